//! Choosing device addresses: an allocator of IOVA ranges inside what the IOMMU accepts.
//!
//! We pick IOVAs ourselves rather than use IOVA = VA, because IOMMUs with a 39-bit address
//! width reject 47-bit virtual addresses and the x86 MSI window is never DMA
//! (reference vfio-userspace.md §1.5).

use std::collections::BTreeMap;

use crate::{DmaError, IovaRange, X86_MSI_WINDOW};

/// The first page of IOVA space is never handed out: IOVA 0 doubles as "none" in device
/// structures (an mlx5 mailbox block whose `next` is 0 ends the chain).
pub const IOVA_ZERO_PAGE: IovaRange = IovaRange::new(0, 0xfff);

/// Free space and allocations of an [`IovaAllocator`], for logs and leak checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct IovaStats {
    /// Free bytes in all holes together.
    pub total_free: u64,
    /// Bytes in the largest free hole (the biggest request that can succeed, alignment aside).
    pub largest_free: u64,
    /// Number of free holes: many small holes means the space is fragmented.
    pub holes: usize,
    /// Ranges handed out and not yet freed.
    pub allocations: usize,
    /// Bytes handed out and not yet freed.
    pub allocated_bytes: u64,
}

/// Hands out IOVA ranges inside the IOMMU's ranges, never in [`X86_MSI_WINDOW`] nor in
/// [`IOVA_ZERO_PAGE`], first fit by address, and coalesces them again on free.
///
/// It is plain data (`&mut self`): share one behind a mutex per IOMMU domain, since two
/// allocators over the same domain would hand out the same IOVAs. `alloc` is O(holes) (first
/// fit), `free` O(log n): meant for arenas and strict-mode leases, not per-packet use.
#[derive(Clone, Debug)]
pub struct IovaAllocator {
    /// Free holes: first address -> last address (inclusive, so the top of the 64-bit space
    /// needs no special case).
    free: BTreeMap<u64, u64>,
    /// Live allocations: IOVA -> length.
    allocated: BTreeMap<u64, u64>,
    total_free: u64,
    allocated_bytes: u64,
}

impl IovaAllocator {
    /// An allocator over `ranges` (in any order, overlaps allowed) minus the MSI window and the
    /// zero page. Empty ranges give an allocator whose every `alloc` reports exhaustion.
    pub fn new(ranges: &[IovaRange]) -> Self {
        let mut spans: Vec<(u64, u64)> = ranges
            .iter()
            .filter(|r| !r.is_empty())
            .map(|r| (r.start, r.end))
            .collect();
        spans.sort_unstable();
        // Merge overlapping and touching ranges.
        let mut merged: Vec<(u64, u64)> = Vec::with_capacity(spans.len());
        for (s, e) in spans {
            match merged.last_mut() {
                Some((_, last)) if s <= last.saturating_add(1) => *last = (*last).max(e),
                _ => merged.push((s, e)),
            }
        }
        let mut alloc = IovaAllocator {
            free: BTreeMap::new(),
            allocated: BTreeMap::new(),
            total_free: 0,
            allocated_bytes: 0,
        };
        for (s, e) in merged {
            for (s, e) in subtract(subtract(vec![(s, e)], IOVA_ZERO_PAGE), X86_MSI_WINDOW) {
                alloc.free.insert(s, e);
                alloc.total_free += e - s + 1;
            }
        }
        alloc
    }

    /// Allocate `len` bytes aligned to `align` (a power of two); returns the IOVA.
    ///
    /// Fails with [`DmaError::IovaExhausted`] (which says whether the space is merely
    /// fragmented) when no hole fits, [`DmaError::Invalid`] for `len == 0` or a bad alignment.
    pub fn alloc(&mut self, len: u64, align: u64) -> Result<u64, DmaError> {
        if len == 0 {
            return Err(DmaError::Invalid("IOVA allocation of 0 bytes".into()));
        }
        if !align.is_power_of_two() {
            return Err(DmaError::Invalid(format!(
                "IOVA alignment {align:#x} is not a power of two"
            )));
        }
        let found = self.free.iter().find_map(|(&start, &last)| {
            let at = start.checked_next_multiple_of(align)?;
            let end = at.checked_add(len - 1)?;
            (end <= last).then_some((start, last, at, end))
        });
        let Some((start, last, at, end)) = found else {
            let stats = self.stats();
            return Err(DmaError::IovaExhausted {
                requested: len,
                align,
                largest_free: stats.largest_free,
                total_free: stats.total_free,
                holes: stats.holes,
            });
        };
        self.free.remove(&start);
        if at > start {
            self.free.insert(start, at - 1);
        }
        if end < last {
            self.free.insert(end + 1, last);
        }
        self.allocated.insert(at, len);
        self.total_free -= len;
        self.allocated_bytes += len;
        Ok(at)
    }

    /// Return `[iova, iova + len)`, exactly as allocated, merging it with its free neighbours.
    ///
    /// Freeing anything else (never allocated, already freed, another length) is
    /// [`DmaError::IovaNotAllocated`] and changes nothing.
    pub fn free(&mut self, iova: u64, len: u64) -> Result<(), DmaError> {
        if self.allocated.get(&iova) != Some(&len) {
            return Err(DmaError::IovaNotAllocated { iova, len });
        }
        self.allocated.remove(&iova);
        self.total_free += len;
        self.allocated_bytes -= len;

        let mut start = iova;
        let mut last = iova + (len - 1);
        let before = self.free.range(..iova).next_back().map(|(&s, &l)| (s, l));
        if let Some((ps, pl)) = before.filter(|&(_, pl)| pl.checked_add(1) == Some(iova)) {
            debug_assert_eq!(pl + 1, iova);
            self.free.remove(&ps);
            start = ps;
        }
        if let Some(nl) = last.checked_add(1).and_then(|next| self.free.remove(&next)) {
            last = nl;
        }
        self.free.insert(start, last);
        Ok(())
    }

    /// Free space, its fragmentation and what is allocated.
    pub fn stats(&self) -> IovaStats {
        IovaStats {
            total_free: self.total_free,
            largest_free: self
                .free
                .iter()
                .map(|(&s, &l)| l - s + 1)
                .max()
                .unwrap_or(0),
            holes: self.free.len(),
            allocations: self.allocated.len(),
            allocated_bytes: self.allocated_bytes,
        }
    }

    /// True when `[iova, iova + len)` is exactly one live allocation.
    pub fn is_allocated(&self, iova: u64, len: u64) -> bool {
        self.allocated.get(&iova) == Some(&len)
    }
}

/// `spans` minus `hole`, both inclusive.
fn subtract(spans: Vec<(u64, u64)>, hole: IovaRange) -> Vec<(u64, u64)> {
    let mut out = Vec::with_capacity(spans.len() + 1);
    for (s, e) in spans {
        if e < hole.start || s > hole.end {
            out.push((s, e));
            continue;
        }
        if s < hole.start {
            out.push((s, hole.start - 1));
        }
        if e > hole.end {
            out.push((hole.end + 1, e));
        }
    }
    out
}

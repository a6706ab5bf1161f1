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
/// [`IOVA_ZERO_PAGE`], and coalesces them again on free.
///
/// Two placements share the one free space: [`IovaAllocator::alloc`] is first fit by address
/// (dense, for long-lived arenas); [`IovaAllocator::alloc_next_fit`] goes on upward from where
/// its last allocation ended and wraps to the bottom only when nothing above fits, so a range
/// just freed is not handed out again until the cursor has gone round the whole space (strict
/// leases: a late device access to a released buffer faults instead of landing in a new one).
///
/// It is plain data (`&mut self`): share one behind a mutex per IOMMU domain, since two
/// allocators over the same domain would hand out the same IOVAs. `alloc` is O(holes) (first
/// fit), `alloc_next_fit` O(log n) until it wraps, `free` O(log n): meant for arenas and
/// strict-mode leases, not per-packet use.
#[derive(Clone, Debug)]
pub struct IovaAllocator {
    /// Free holes: first address -> last address (inclusive, so the top of the 64-bit space
    /// needs no special case).
    free: BTreeMap<u64, u64>,
    /// Live allocations: IOVA -> length.
    allocated: BTreeMap<u64, u64>,
    total_free: u64,
    allocated_bytes: u64,
    /// Where the next [`IovaAllocator::alloc_next_fit`] starts looking: one past the end of the
    /// last one.
    cursor: u64,
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
            cursor: 0,
        };
        for (s, e) in merged {
            for (s, e) in subtract(subtract(vec![(s, e)], IOVA_ZERO_PAGE), X86_MSI_WINDOW) {
                alloc.free.insert(s, e);
                alloc.total_free += e - s + 1;
            }
        }
        alloc
    }

    /// Allocate `len` bytes aligned to `align` (a power of two), first fit by address; returns
    /// the IOVA.
    ///
    /// Fails with [`DmaError::IovaExhausted`] (which says whether the space is merely
    /// fragmented, or the alignment alone is the cause) when no hole fits, [`DmaError::Invalid`] for `len == 0` or a bad alignment.
    pub fn alloc(&mut self, len: u64, align: u64) -> Result<u64, DmaError> {
        check_request(len, align)?;
        let found = self.fit_from(0, len, align);
        self.take(found, len, align)
    }

    /// Allocate like [`IovaAllocator::alloc`], but next fit: the lowest place at or above the
    /// end of the previous next-fit allocation, else (the space above is used up: wrap round)
    /// the lowest place anywhere. Freed ranges thus come back in roughly the order they were
    /// handed out, the one released longest ago first, and never fail a request first fit
    /// would satisfy.
    pub fn alloc_next_fit(&mut self, len: u64, align: u64) -> Result<u64, DmaError> {
        check_request(len, align)?;
        let found = self
            .fit_from(self.cursor, len, align)
            .or_else(|| self.fit_from(0, len, align));
        let at = self.take(found, len, align)?;
        // Wraps to 0 at the very top of the 64-bit space: the next search starts over.
        self.cursor = at.wrapping_add(len);
        Ok(at)
    }

    /// The lowest `len` bytes aligned to `align` at or above `from` in one hole: (hole start,
    /// hole last, IOVA, last byte).
    fn fit_from(&self, from: u64, len: u64, align: u64) -> Option<(u64, u64, u64, u64)> {
        // The hole holding `from`, if any, then every hole above it.
        let first = self
            .free
            .range(..=from)
            .next_back()
            .filter(|&(_, &last)| last >= from)
            .map_or(from, |(&start, _)| start);
        self.free.range(first..).find_map(|(&start, &last)| {
            let at = start.max(from).checked_next_multiple_of(align)?;
            let end = at.checked_add(len - 1)?;
            (end <= last).then_some((start, last, at, end))
        })
    }

    /// Carve what [`IovaAllocator::fit_from`] found out of its hole, or report exhaustion.
    fn take(
        &mut self,
        found: Option<(u64, u64, u64, u64)>,
        len: u64,
        align: u64,
    ) -> Result<u64, DmaError> {
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

/// `len` and `align` make a request: at least a byte, a power-of-two alignment.
fn check_request(len: u64, align: u64) -> Result<(), DmaError> {
    if len == 0 {
        return Err(DmaError::Invalid("IOVA allocation of 0 bytes".into()));
    }
    if !align.is_power_of_two() {
        return Err(DmaError::Invalid(format!(
            "IOVA alignment {align:#x} is not a power of two"
        )));
    }
    Ok(())
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

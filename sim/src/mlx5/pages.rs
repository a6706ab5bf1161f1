//! The firmware's host pages: what it asks for at boot, at INIT_HCA and at run time, the pages
//! the driver gave it (each checked writable by writing a pattern into it through the IOMMU,
//! as firmware uses its pages), and what it gives back on MANAGE_PAGES TAKE.

use std::collections::HashSet;

use dma::SimIommu;
use firmware_cmds::mlx5::ops::pas::ADAPTER_PAGE_SIZE;

/// The byte the model writes over every page it is given.
pub(crate) const PAGE_PATTERN: u8 = 0xa5;

/// Why a MANAGE_PAGES GIVE was refused (the command fails with BAD_PARAM; no page is taken).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GiveProblem {
    /// An address is not 4 KiB aligned (bits 11:0 of a `pas` entry are reserved).
    Misaligned,
    /// The firmware already holds this page, or it appears twice in the list.
    Duplicate,
    /// The IOMMU refused the device's write into the page.
    NotWritable,
}

/// The pages the firmware holds and the demands it has made.
#[derive(Debug, Default)]
pub(crate) struct Pages {
    held: Vec<u64>,
    set: HashSet<u64>,
    /// Pages the firmware cannot give back now (its working set once initialized).
    pub need: u64,
    /// Outstanding run-time request: > 0 pages wanted, < 0 pages offered back.
    pub request: i64,
}

impl Pages {
    /// Pages held.
    pub(crate) fn held(&self) -> u64 {
        self.held.len() as u64
    }

    /// Takes `pas`, after checking every page and writing the pattern into each.
    pub(crate) fn give(&mut self, iommu: &SimIommu, pas: &[u64]) -> Result<(), GiveProblem> {
        let mut seen = HashSet::with_capacity(pas.len());
        for &pa in pas {
            if pa % ADAPTER_PAGE_SIZE != 0 {
                return Err(GiveProblem::Misaligned);
            }
            if self.set.contains(&pa) || !seen.insert(pa) {
                return Err(GiveProblem::Duplicate);
            }
        }
        for &pa in pas {
            if iommu
                .fill(pa, ADAPTER_PAGE_SIZE as usize, PAGE_PATTERN)
                .is_err()
            {
                return Err(GiveProblem::NotWritable);
            }
        }
        for &pa in pas {
            self.held.push(pa);
            self.set.insert(pa);
        }
        Ok(())
    }

    /// Gives back up to `max` pages beyond the working set, most recently given first.
    pub(crate) fn take(&mut self, max: u64) -> Vec<u64> {
        let spare = self.held().saturating_sub(self.need);
        let n = spare.min(max) as usize;
        let out: Vec<u64> = self.held.split_off(self.held.len() - n);
        for pa in &out {
            self.set.remove(pa);
        }
        out
    }
}

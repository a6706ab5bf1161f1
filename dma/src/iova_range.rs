//! An inclusive range of device addresses, as VFIO reports them.

use std::fmt;

/// An inclusive IOVA range `[start, end]`, the form of VFIO's `vfio_iova_range`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct IovaRange {
    /// First valid address.
    pub start: u64,
    /// Last valid address (inclusive).
    pub end: u64,
}

impl IovaRange {
    /// A range from `start` to `end` inclusive. `end < start` gives an empty range.
    pub const fn new(start: u64, end: u64) -> Self {
        IovaRange { start, end }
    }

    /// Number of addresses in the range (saturating at `u64::MAX` for the full space).
    pub fn len(&self) -> u64 {
        if self.end < self.start {
            0
        } else {
            (self.end - self.start).saturating_add(1)
        }
    }

    /// True when the range holds no address.
    pub fn is_empty(&self) -> bool {
        self.end < self.start
    }

    /// True when `[iova, iova + len)` lies entirely inside this range.
    pub fn contains(&self, iova: u64, len: u64) -> bool {
        len > 0
            && iova >= self.start
            && iova
                .checked_add(len - 1)
                .is_some_and(|last| last <= self.end)
    }
}

impl fmt::Debug for IovaRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{:#x}, {:#x}]", self.start, self.end)
    }
}

/// The x86 MSI window: writes here are interrupts, never DMA. Never hand out IOVAs inside it.
pub const X86_MSI_WINDOW: IovaRange = IovaRange::new(0xfee0_0000, 0xfeef_ffff);

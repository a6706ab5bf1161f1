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

/// The DMA mask of a device that drives `bits` address lines: every address it can form is at
/// most this value (the kernel's `DMA_BIT_MASK(bits)`; 64 and above give `u64::MAX`).
pub const fn dma_bit_mask(bits: u32) -> u64 {
    if bits >= 64 {
        u64::MAX
    } else {
        (1u64 << bits) - 1
    }
}

/// The parts of `ranges` a device can reach when the highest address it can form is
/// `dma_mask` (see [`dma_bit_mask`]): each range cut at the mask, ranges wholly above it left
/// out.
///
/// The IOMMU accepts mappings anywhere in its ranges, but a device with narrow address lines
/// (QEMU's `edu`: 28 bits) truncates or refuses IOVAs above its mask, so build the device's
/// [`crate::IovaAllocator`] from the clipped ranges.
pub fn clip_to_dma_mask(ranges: &[IovaRange], dma_mask: u64) -> Vec<IovaRange> {
    ranges
        .iter()
        .filter(|r| !r.is_empty() && r.start <= dma_mask)
        .map(|r| IovaRange::new(r.start, r.end.min(dma_mask)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What QEMU's VT-d reported in the guest (vfio-userspace.md §1.5): a 39-bit space with
    /// the MSI hole.
    const VTD: [IovaRange; 2] = [
        IovaRange::new(0x0, 0xfedf_ffff),
        IovaRange::new(0xfef0_0000, 0x7f_ffff_ffff),
    ];

    #[test]
    fn dma_bit_masks() {
        assert_eq!(dma_bit_mask(28), 0x0fff_ffff);
        assert_eq!(dma_bit_mask(32), 0xffff_ffff);
        assert_eq!(dma_bit_mask(0), 0);
        assert_eq!(dma_bit_mask(64), u64::MAX);
        assert_eq!(dma_bit_mask(80), u64::MAX);
    }

    #[test]
    fn clipping_to_a_28_bit_device_keeps_the_low_256_mib() {
        assert_eq!(
            clip_to_dma_mask(&VTD, dma_bit_mask(28)),
            [IovaRange::new(0, 0x0fff_ffff)]
        );
    }

    #[test]
    fn clipping_to_32_bits_cuts_the_range_above_the_msi_hole() {
        assert_eq!(
            clip_to_dma_mask(&VTD, dma_bit_mask(32)),
            [
                IovaRange::new(0, 0xfedf_ffff),
                IovaRange::new(0xfef0_0000, 0xffff_ffff)
            ]
        );
    }

    #[test]
    fn clipping_to_64_bits_changes_nothing_and_empty_ranges_go() {
        assert_eq!(clip_to_dma_mask(&VTD, dma_bit_mask(64)), VTD);
        let with_empty = [
            IovaRange::new(0x2000, 0x1000),
            IovaRange::new(0x1000, 0x1fff),
        ];
        assert_eq!(
            clip_to_dma_mask(&with_empty, u64::MAX),
            [IovaRange::new(0x1000, 0x1fff)]
        );
    }

    #[test]
    fn ranges_above_the_mask_disappear_and_the_mask_address_itself_stays() {
        let high = [IovaRange::new(0x1_0000_0000, 0x1_ffff_ffff)];
        assert!(clip_to_dma_mask(&high, dma_bit_mask(32)).is_empty());
        let touching = [IovaRange::new(0x0fff_ffff, 0x2000_0000)];
        assert_eq!(
            clip_to_dma_mask(&touching, dma_bit_mask(28)),
            [IovaRange::new(0x0fff_ffff, 0x0fff_ffff)]
        );
    }
}

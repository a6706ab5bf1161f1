//! The `DmaMapper` interface: what an IOMMU domain offers a driver.

use crate::{DmaError, IovaRange};

/// What the device may do with a mapping (the device's point of view).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Access {
    /// The device may only read (host-to-device buffers: WQEs, send payloads, command inputs).
    Read,
    /// The device may only write.
    Write,
    /// The device may read and write (queues, command entries, receive buffers).
    ReadWrite,
}

impl Access {
    /// True when the device may read through a mapping with this access.
    pub fn device_reads(self) -> bool {
        matches!(self, Access::Read | Access::ReadWrite)
    }

    /// True when the device may write through a mapping with this access.
    pub fn device_writes(self) -> bool {
        matches!(self, Access::Write | Access::ReadWrite)
    }
}

/// One IOMMU domain (a VFIO container, or the simulator's IOMMU) seen from the driver side.
///
/// A mapper only maps and unmaps; it never chooses IOVAs (the [`crate::IovaAllocator`] does,
/// inside [`DmaMapper::iova_ranges`]) and never owns memory (a [`crate::DmaMemory`] does).
/// It says which granule it maps in ([`DmaMapper::min_page_size`]); callers round to it.
pub trait DmaMapper: Send + Sync {
    /// A short name for logs and errors, e.g. `vfio-type1` or `sim-iommu`.
    fn name(&self) -> &'static str;

    /// The IOVA ranges the IOMMU accepts (VFIO's IOVA-range capability), sorted, non-overlapping.
    fn iova_ranges(&self) -> Vec<IovaRange>;

    /// The smallest page the IOMMU maps, a power of two: the host address, IOVA and length of
    /// every [`DmaMapper::map`] must be multiples of it (VFIO type1: the lowest bit of the
    /// `iova_pgsizes` bitmap of `VFIO_IOMMU_GET_INFO`, checked in `vfio_dma_do_map`). Callers
    /// round to the larger of this and the CPU page. 4096 unless the backend says otherwise.
    fn min_page_size(&self) -> usize {
        4096
    }

    /// Whether `len` more bytes may be pinned for DMA now: [`DmaError::MemlockTooLow`] when a
    /// map of that length would pass the pinning limit. For callers to ask before they
    /// allocate and fault in the memory (a [`crate::DmaPool`] does); [`DmaMapper::map`]
    /// checks again. `Ok` unless the backend has such a limit.
    fn check_pin_headroom(&self, len: usize) -> Result<(), DmaError> {
        let _ = len;
        Ok(())
    }

    /// Map `len` bytes of host memory at `vaddr` to the device address `iova`.
    ///
    /// All or nothing: when it returns an error, no byte of `iova .. iova + len` may be left
    /// mapped, so that the caller may free the memory and reuse the IOVA. VFIO type1 does
    /// this itself: a map that fails after pinning or mapping part of the range is undone
    /// before the ioctl returns (`vfio_pin_map_dma` calls `vfio_remove_dma` on error,
    /// drivers/vfio/vfio_iommu_type1.c). A [`crate::DmaPool`] does not rely on it: after a
    /// failed map it asks [`DmaMapper::has_mapping_in`], and keeps the memory and IOVA for
    /// good when anything was left mapped there.
    ///
    /// # Safety
    /// `vaddr .. vaddr + len` must be valid, page-aligned memory that stays mapped and is not
    /// reused for anything else until [`DmaMapper::unmap`] of the same range returns: from now
    /// on the device may read or write it at any time.
    unsafe fn map(
        &self,
        vaddr: *mut u8,
        len: usize,
        iova: u64,
        access: Access,
    ) -> Result<(), DmaError>;

    /// Remove a mapping made by [`DmaMapper::map`] with exactly this `iova` and `len`.
    fn unmap(&self, iova: u64, len: usize) -> Result<(), DmaError>;

    /// How many mappings are live in this domain right now.
    fn live_mappings(&self) -> usize;

    /// True when a live mapping covers any byte of `iova .. iova + len` (`len` > 0): what a
    /// caller asks after a failed [`DmaMapper::map`] before it frees the memory and the IOVA.
    fn has_mapping_in(&self, iova: u64, len: usize) -> bool;

    /// How many device accesses this domain refused (always 0 where the kernel does not tell us).
    fn fault_count(&self) -> usize {
        0
    }
}

//! Queue buffers as the driver describes them (a list of page addresses from a command's
//! `pas`), and device DMA that goes only through the simulated IOMMU, split at 4 KiB
//! boundaries so that a buffer made of adjacent mappings reads as it would on hardware.

use dma::{Fault, SimIommu, SimIommuHold};
use firmware_cmds::mlx5::ops::pas::ADAPTER_PAGE_SIZE;

/// What device DMA goes through: the IOMMU itself (a lock per access), or a hold of it for
/// the accesses of one step ([`SimIommu::hold`]).
pub(crate) trait Dma {
    /// A checked device read.
    fn read(&self, iova: u64, buf: &mut [u8]) -> Result<(), Fault>;
    /// A checked device write.
    fn write(&self, iova: u64, data: &[u8]) -> Result<(), Fault>;
}

impl Dma for SimIommu {
    #[inline]
    fn read(&self, iova: u64, buf: &mut [u8]) -> Result<(), Fault> {
        SimIommu::read(self, iova, buf)
    }
    #[inline]
    fn write(&self, iova: u64, data: &[u8]) -> Result<(), Fault> {
        SimIommu::write(self, iova, data)
    }
}

impl<T: Dma + ?Sized> Dma for std::sync::Arc<T> {
    #[inline]
    fn read(&self, iova: u64, buf: &mut [u8]) -> Result<(), Fault> {
        T::read(self, iova, buf)
    }
    #[inline]
    fn write(&self, iova: u64, data: &[u8]) -> Result<(), Fault> {
        T::write(self, iova, data)
    }
}

impl Dma for SimIommuHold<'_> {
    #[inline]
    fn read(&self, iova: u64, buf: &mut [u8]) -> Result<(), Fault> {
        SimIommuHold::read(self, iova, buf)
    }
    #[inline]
    fn write(&self, iova: u64, data: &[u8]) -> Result<(), Fault> {
        SimIommuHold::write(self, iova, data)
    }
}

/// Why a queue buffer description is refused (the command fails with BAD_PARAM).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BufferProblem {
    /// A page address is not aligned to the buffer's page size.
    Misaligned,
    /// Fewer pages than the queue needs.
    TooFewPages,
    /// `log_page_size` makes pages larger than the model supports (1 GiB).
    PageTooLarge,
}

/// A device-visible buffer: `pages[i]` holds bytes `i * page_size ..`.
#[derive(Debug, Clone)]
pub(crate) struct PageList {
    pages: Box<[u64]>,
    page_shift: u32,
}

impl PageList {
    /// A buffer of `len` bytes over `pas`, with pages of `4 KiB << log_page_size`.
    pub(crate) fn new(pas: &[u64], log_page_size: u8, len: u64) -> Result<Self, BufferProblem> {
        let page_shift = 12 + u32::from(log_page_size);
        if page_shift > 30 {
            return Err(BufferProblem::PageTooLarge);
        }
        let page = 1u64 << page_shift;
        if pas.iter().any(|&a| a % page != 0) {
            return Err(BufferProblem::Misaligned);
        }
        let needed = len.div_ceil(page);
        if (pas.len() as u64) < needed {
            return Err(BufferProblem::TooFewPages);
        }
        Ok(PageList {
            pages: pas[..needed as usize].into(),
            page_shift,
        })
    }

    /// log2 of the page size.
    pub(crate) fn page_shift(&self) -> u32 {
        self.page_shift
    }

    /// The IOVA of byte `offset`; `None` past the end of the buffer.
    #[inline]
    pub(crate) fn addr(&self, offset: u64) -> Option<u64> {
        let page = self.pages.get((offset >> self.page_shift) as usize)?;
        Some(page + (offset & ((1 << self.page_shift) - 1)))
    }
}

/// Whether `len` bytes from `iova` stay below the top of the 64-bit address space: a PCIe
/// request cannot wrap round to address 0, so a range that would is refused whole.
fn in_space(iova: u64, len: usize) -> bool {
    len == 0 || iova.checked_add(len as u64 - 1).is_some()
}

/// Device read of `buf.len()` bytes at `iova`; false if the IOMMU refused any part (the fault
/// is recorded by the IOMMU) or the range wraps past the top of the address space.
pub(crate) fn read(iommu: &(impl Dma + ?Sized), iova: u64, buf: &mut [u8]) -> bool {
    if !in_space(iova, buf.len()) {
        return false;
    }
    let mut done = 0usize;
    while done < buf.len() {
        let at = iova + done as u64;
        let room = (ADAPTER_PAGE_SIZE - at % ADAPTER_PAGE_SIZE) as usize;
        let n = room.min(buf.len() - done);
        if iommu.read(at, &mut buf[done..done + n]).is_err() {
            return false;
        }
        done += n;
    }
    true
}

/// Device write of `data` at `iova`, split and refused like [`read`].
pub(crate) fn write(iommu: &(impl Dma + ?Sized), iova: u64, data: &[u8]) -> bool {
    if !in_space(iova, data.len()) {
        return false;
    }
    let mut done = 0usize;
    while done < data.len() {
        let at = iova + done as u64;
        let room = (ADAPTER_PAGE_SIZE - at % ADAPTER_PAGE_SIZE) as usize;
        let n = room.min(data.len() - done);
        if iommu.write(at, &data[done..done + n]).is_err() {
            return false;
        }
        done += n;
    }
    true
}

/// Writes a 64-byte queue entry whose last byte carries the ownership bit: everything else
/// first, then (after a release fence) the last byte, so a driver polling the owner bit never
/// sees a half-written entry.
pub(crate) fn write_owned_entry(iommu: &SimIommu, iova: u64, entry: &[u8; 64]) -> bool {
    iommu.write_owned(iova, entry).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_list_addresses_bytes_and_checks_its_pages() {
        let p = PageList::new(&[0x10000, 0x30000], 0, 8192).unwrap();
        assert_eq!(p.addr(0), Some(0x10000));
        assert_eq!(p.addr(4095), Some(0x10fff));
        assert_eq!(p.addr(4096), Some(0x30000));
        assert_eq!(p.addr(8192), None);
        assert_eq!(
            PageList::new(&[0x10000], 0, 8192).unwrap_err(),
            BufferProblem::TooFewPages
        );
        assert_eq!(
            PageList::new(&[0x1800], 0, 64).unwrap_err(),
            BufferProblem::Misaligned
        );
        assert_eq!(
            PageList::new(&[0x1000], 1, 64).unwrap_err(),
            BufferProblem::Misaligned,
            "8 KiB pages must be 8 KiB aligned"
        );
    }
}

//! The VFIO type1 IOMMU backend: `VFIO_IOMMU_MAP_DMA` / `VFIO_IOMMU_UNMAP_DMA` on a container.

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;
use std::sync::Mutex;

use vfio_bindings::bindings::vfio::{
    VFIO_DMA_MAP_FLAG_READ, VFIO_DMA_MAP_FLAG_WRITE, vfio_iommu_type1_dma_map,
    vfio_iommu_type1_dma_unmap,
};

use crate::memlock::{MemlockState, locked_bytes};
use crate::{Access, DmaError, DmaMapper, IovaRange};

/// `_IO(';', 100 + 13)`: map on a container fd.
pub const VFIO_IOMMU_MAP_DMA: libc::Ioctl = 0x3B71;
/// `_IO(';', 100 + 14)`: unmap on a container fd.
pub const VFIO_IOMMU_UNMAP_DMA: libc::Ioctl = 0x3B72;

/// Whatever keeps a group attached to the container while its owner lives (the driver's
/// group handle, which detaches the group when dropped).
pub type Attachment = Arc<dyn std::any::Any + Send + Sync>;

/// A VFIO container with a type1 IOMMU set, as a [`DmaMapper`].
///
/// The driver's VFIO backend opens the container, attaches the group, sets TYPE1v2 and reads
/// the IOVA ranges; this type only maps and unmaps. It checks `RLIMIT_MEMLOCK` before each map,
/// and again when the kernel answers `ENOMEM`, so that a low limit gives
/// [`DmaError::MemlockTooLow`] instead of a bare `ENOMEM` ([`crate::memlock::MemlockState`]).
///
/// It co-owns the group's attachment: when the last group leaves a container the kernel
/// unmaps and unpins everything and drops the IOMMU (`vfio_group_detach_container`), after
/// which `VFIO_IOMMU_UNMAP_DMA` answers `EINVAL`. Holding the attachment until this mapper is
/// dropped lets a lease that outlives the backend still unmap (and so be freed), and keeps the
/// IOMMU guarding its memory until then.
pub struct VfioType1 {
    // Field order is drop order: detach the group, then close our container fd.
    _attachment: Attachment,
    container: Arc<OwnedFd>,
    ranges: Vec<IovaRange>,
    /// The IOMMU's page sizes (`iova_pgsizes` of `VFIO_IOMMU_GET_INFO`), when reported.
    pgsizes: Option<u64>,
    /// Live mappings: IOVA -> length.
    live: Mutex<HashMap<u64, usize>>,
}

impl VfioType1 {
    /// Wrap a container fd that already has its IOMMU type set; `ranges` are the IOVA ranges
    /// from `VFIO_IOMMU_GET_INFO` (the whole 64-bit space if the kernel reported none), and
    /// `pgsizes` its `iova_pgsizes` bitmap (bit n: pages of 2^n bytes), `None` when the kernel
    /// did not report it (then the CPU page is assumed).
    ///
    /// `attachment` is held until this mapper is dropped, so the group it stands for stays
    /// attached as long as mappings can exist (see the type's docs).
    pub fn new(
        container: Arc<OwnedFd>,
        attachment: Attachment,
        ranges: Vec<IovaRange>,
        pgsizes: Option<u64>,
    ) -> Self {
        VfioType1 {
            _attachment: attachment,
            container,
            ranges,
            pgsizes,
            live: Mutex::new(HashMap::new()),
        }
    }

    fn pinned_bytes(&self) -> u64 {
        self.live
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .values()
            .map(|&l| l as u64)
            .sum()
    }
}

impl DmaMapper for VfioType1 {
    fn name(&self) -> &'static str {
        "vfio-type1"
    }

    fn iova_ranges(&self) -> Vec<IovaRange> {
        self.ranges.clone()
    }

    /// The lowest bit of the `iova_pgsizes` bitmap: `vfio_dma_do_map` refuses a map whose
    /// size, IOVA or address is not a multiple of it (drivers/vfio/vfio_iommu_type1.c). The
    /// CPU page when the kernel did not report the bitmap.
    fn min_page_size(&self) -> usize {
        min_page_of(self.pgsizes)
    }

    /// `RLIMIT_MEMLOCK` and `CAP_IPC_LOCK` as VFIO will judge them
    /// ([`crate::memlock::MemlockState`]), against what this mapper has pinned.
    fn check_pin_headroom(&self, len: usize) -> Result<(), DmaError> {
        MemlockState::current().check(self.pinned_bytes(), len as u64)
    }

    unsafe fn map(
        &self,
        vaddr: *mut u8,
        len: usize,
        iova: u64,
        access: Access,
    ) -> Result<(), DmaError> {
        let memlock = MemlockState::current();
        memlock.check(self.pinned_bytes(), len as u64)?;
        let mut flags = 0;
        if access.device_reads() {
            flags |= VFIO_DMA_MAP_FLAG_READ;
        }
        if access.device_writes() {
            flags |= VFIO_DMA_MAP_FLAG_WRITE;
        }
        let arg = vfio_iommu_type1_dma_map {
            argsz: size_of::<vfio_iommu_type1_dma_map>() as u32,
            flags,
            vaddr: vaddr as u64,
            iova,
            size: len as u64,
        };
        // SAFETY: the ioctl reads the struct we own; the caller guarantees the memory range
        // stays valid until unmap (the contract of `DmaMapper::map`).
        let rc = unsafe {
            libc::ioctl(
                self.container.as_raw_fd(),
                VFIO_IOMMU_MAP_DMA,
                &raw const arg,
            )
        };
        if rc != 0 {
            let source = io::Error::last_os_error();
            if source.raw_os_error() == Some(libc::ENOMEM) {
                // The kernel counts everything this process has locked (mlock, other
                // containers' pins), which our own figure misses; report what it counted.
                // Even when we thought the process exempt: the kernel has just said otherwise.
                let locked = locked_bytes();
                if let Some(e) = memlock.explain_enomem(self.pinned_bytes(), locked, len as u64) {
                    return Err(e);
                }
            }
            let remedy = source.raw_os_error().and_then(|errno| {
                map_errno_remedy(
                    errno,
                    MapRequest {
                        vaddr: vaddr.addr() as u64,
                        iova,
                        len: len as u64,
                    },
                    &self.ranges,
                    self.min_page_size() as u64,
                    self.live_mappings(),
                )
            });
            return Err(DmaError::Map {
                mapper: self.name(),
                iova,
                len,
                source,
                remedy,
            });
        }
        self.live
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(iova, len);
        Ok(())
    }

    fn unmap(&self, iova: u64, len: usize) -> Result<(), DmaError> {
        let mut live = self
            .live
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if live.get(&iova) != Some(&len) {
            return Err(DmaError::Unmap {
                mapper: self.name(),
                iova,
                len,
                reason: "no mapping with this IOVA and length".into(),
            });
        }
        let mut arg = vfio_iommu_type1_dma_unmap {
            argsz: size_of::<vfio_iommu_type1_dma_unmap>() as u32,
            flags: 0,
            iova,
            size: len as u64,
            data: Default::default(),
        };
        // SAFETY: the ioctl reads and writes back (`size`) the struct we own.
        let rc = unsafe {
            libc::ioctl(
                self.container.as_raw_fd(),
                VFIO_IOMMU_UNMAP_DMA,
                &raw mut arg,
            )
        };
        if rc != 0 {
            return Err(DmaError::Unmap {
                mapper: self.name(),
                iova,
                len,
                reason: io::Error::last_os_error().to_string(),
            });
        }
        if arg.size != len as u64 {
            return Err(DmaError::Unmap {
                mapper: self.name(),
                iova,
                len,
                reason: format!("the kernel unmapped {:#x} bytes", arg.size),
            });
        }
        live.remove(&iova);
        Ok(())
    }

    fn live_mappings(&self) -> usize {
        self.live
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .len()
    }

    /// From the mappings this mapper made: a map the kernel refused is never recorded, and
    /// the kernel undoes whatever part of it was done (`vfio_pin_map_dma` calls
    /// `vfio_remove_dma` on error, drivers/vfio/vfio_iommu_type1.c).
    fn has_mapping_in(&self, iova: u64, len: usize) -> bool {
        let Some(last) = (len as u64).checked_sub(1).map(|l| iova.saturating_add(l)) else {
            return false;
        };
        self.live
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .any(|(&start, &l)| {
                start <= last && iova <= start.saturating_add((l as u64).saturating_sub(1))
            })
    }
}

/// A refused `VFIO_IOMMU_MAP_DMA`, as [`map_errno_remedy`] judges it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MapRequest {
    /// Host address of the memory.
    pub vaddr: u64,
    /// IOVA asked for.
    pub iova: u64,
    /// Length in bytes.
    pub len: u64,
}

/// What an errno from `VFIO_IOMMU_MAP_DMA` means for `req` and what to do about it, from the
/// checks of `vfio_dma_do_map` (drivers/vfio/vfio_iommu_type1.c); `None` for an errno none of
/// them gives (`ENOMEM` past `RLIMIT_MEMLOCK` is [`DmaError::MemlockTooLow`] instead).
///
/// `ranges` and `page` are the container's IOVA ranges and smallest IOMMU page as this mapper
/// knows them, `live` the mappings it has made.
///
/// - `ENOSPC`: `!iommu->dma_avail`, the container holds `dma_entry_limit` mappings (a module
///   parameter, 65535 by default, taken by each container when it is opened,
///   `vfio_iommu_type1_open`).
/// - `EEXIST`: `vfio_find_dma` found a mapping overlapping the range.
/// - `EINVAL`: the length, IOVA or address is not a multiple of the smallest page of the
///   `pgsize_bitmap`, the range wraps, or it is outside every IOVA range
///   (`vfio_iommu_iova_dma_valid`).
pub fn map_errno_remedy(
    errno: i32,
    req: MapRequest,
    ranges: &[IovaRange],
    page: u64,
    live: usize,
) -> Option<String> {
    let MapRequest { vaddr, iova, len } = req;
    let last = iova.wrapping_add(len.wrapping_sub(1));
    match errno {
        libc::ENOSPC => Some(format!(
            "the container already holds as many mappings as VFIO type1 allows (the \
             dma_entry_limit parameter of the vfio_iommu_type1 module, 65535 by default; \
             {live} of them made here): lease through a pooled DmaPool (LeaseMode::Pooled), \
             whose arenas put many buffers in one mapping, or raise the limit in \
             /sys/module/vfio_iommu_type1/parameters/dma_entry_limit (containers opened \
             afterwards get it)"
        )),
        libc::EEXIST => Some(format!(
            "IOVA {iova:#x}..={last:#x} overlaps a mapping already in the container: a bug in \
             the IOVA bookkeeping (two IOVA allocators on one container, or an IOVA handed out \
             again before its unmap), not a setting; please report it"
        )),
        libc::EINVAL => {
            let page = page.max(1);
            let misaligned: Vec<&str> = [("length", len), ("IOVA", iova), ("address", vaddr)]
                .into_iter()
                .filter(|&(_, v)| v % page != 0)
                .map(|(what, _)| what)
                .collect();
            let mut causes = Vec::new();
            if len == 0 {
                causes.push("the length is 0".to_string());
            }
            if !misaligned.is_empty() {
                causes.push(format!(
                    "the {} not a multiple of the IOMMU's smallest page {page:#x} (the lowest \
                     bit of iova_pgsizes): map whole IOMMU pages, as a DmaPool does",
                    match misaligned.as_slice() {
                        [one] => format!("{one} is"),
                        many => format!("{} are", many.join(" and ")),
                    }
                ));
            }
            if len > 0 && !ranges.iter().any(|r| r.contains(iova, len)) {
                causes.push(format!(
                    "IOVA {iova:#x}..={last:#x} is not inside one of the container's IOVA \
                     ranges {ranges:?}: take IOVAs from an IovaAllocator over those ranges"
                ));
            }
            Some(if causes.is_empty() {
                format!(
                    "VFIO type1 refuses a map outside its IOVA ranges or not aligned to its \
                     smallest page; by the figures read when the container was set up \
                     (ranges {ranges:?}, page {page:#x}) this one is neither, so the \
                     kernel's have changed since (another group attached to the container?)"
                )
            } else {
                causes.join("; and ")
            })
        }
        _ => None,
    }
}

/// The smallest page of a `iova_pgsizes` bitmap; the CPU page for none (or an empty bitmap).
fn min_page_of(pgsizes: Option<u64>) -> usize {
    match pgsizes {
        Some(bitmap) if bitmap != 0 => {
            usize::try_from(1u64 << bitmap.trailing_zeros()).unwrap_or(usize::MAX)
        }
        _ => crate::base_page_size(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::offset_of;

    #[test]
    fn the_smallest_iommu_page_is_the_lowest_bit_of_the_bitmap() {
        // QEMU's VT-d (reference vfio-userspace.md §1.5): 4K, 2M, 1G.
        assert_eq!(min_page_of(Some(0x4020_1000)), 4096);
        // An IOMMU whose smallest page is 64 KiB.
        assert_eq!(min_page_of(Some(0x2001_0000)), 0x10000);
        assert_eq!(min_page_of(None), crate::base_page_size());
        assert_eq!(min_page_of(Some(0)), crate::base_page_size());
        let container = Arc::new(OwnedFd::from(std::fs::File::open("/dev/null").unwrap()));
        let mapper = VfioType1::new(
            container,
            Arc::new(()),
            vec![IovaRange::new(0, u64::MAX)],
            Some(0x2001_0000),
        );
        assert_eq!(mapper.min_page_size(), 0x10000);
    }

    // Layouts from include/uapi/linux/vfio.h (reference vfio-userspace.md §1.5): map is 32 bytes,
    // unmap 24 bytes plus data[].
    #[test]
    fn ioctl_structs_match_the_uapi() {
        assert_eq!(size_of::<vfio_iommu_type1_dma_map>(), 32);
        assert_eq!(offset_of!(vfio_iommu_type1_dma_map, vaddr), 8);
        assert_eq!(offset_of!(vfio_iommu_type1_dma_map, iova), 16);
        assert_eq!(offset_of!(vfio_iommu_type1_dma_map, size), 24);
        assert_eq!(size_of::<vfio_iommu_type1_dma_unmap>(), 24);
        assert_eq!(offset_of!(vfio_iommu_type1_dma_unmap, iova), 8);
        assert_eq!(offset_of!(vfio_iommu_type1_dma_unmap, size), 16);
        assert_eq!(VFIO_IOMMU_MAP_DMA, 0x3B71);
        assert_eq!(VFIO_IOMMU_UNMAP_DMA, 0x3B72);
        assert_eq!((VFIO_DMA_MAP_FLAG_READ, VFIO_DMA_MAP_FLAG_WRITE), (1, 2));
    }

    /// A 4 KiB-aligned map of 8 KiB at IOVA 0x10000.
    const REQ: MapRequest = MapRequest {
        vaddr: 0x7f00_0000_1000,
        iova: 0x10000,
        len: 0x2000,
    };

    #[test]
    fn an_entry_limit_refusal_says_to_pool_or_raise_the_module_parameter() {
        let msg =
            map_errno_remedy(libc::ENOSPC, REQ, &crate::VTD_39BIT_RANGES, 4096, 65535).unwrap();
        for part in [
            "dma_entry_limit",
            "65535 of them made here",
            "LeaseMode::Pooled",
            "/sys/module/vfio_iommu_type1/parameters/dma_entry_limit",
        ] {
            assert!(msg.contains(part), "{part}: {msg}");
        }
    }

    #[test]
    fn an_overlap_refusal_is_called_a_bug() {
        let msg = map_errno_remedy(libc::EEXIST, REQ, &crate::VTD_39BIT_RANGES, 4096, 1).unwrap();
        assert!(msg.contains("IOVA 0x10000..=0x11fff overlaps"), "{msg}");
        assert!(msg.contains("a bug"), "{msg}");
    }

    #[test]
    fn an_invalid_map_names_what_is_misaligned_or_outside_the_ranges() {
        let ranges = &crate::VTD_39BIT_RANGES;
        let einval = |req, page| map_errno_remedy(libc::EINVAL, req, ranges, page, 0).unwrap();
        // On an IOMMU with 64 KiB pages: the length and the address are not whole pages.
        let msg = einval(REQ, 0x10000);
        assert!(
            msg.contains(
                "the length and address are not a multiple of the IOMMU's smallest page 0x10000"
            ),
            "{msg}"
        );
        assert!(!msg.contains("IOVA ranges"), "{msg}");
        let msg = einval(
            MapRequest {
                vaddr: 0x7f00_0000_2000,
                iova: 0x11000,
                ..REQ
            },
            0x2000,
        );
        assert!(msg.contains("the IOVA is not a multiple"), "{msg}");
        // In the MSI window, which the ranges leave out.
        let msg = einval(
            MapRequest {
                iova: 0xfee0_0000,
                ..REQ
            },
            4096,
        );
        assert!(
            msg.contains(
                "IOVA 0xfee00000..=0xfee01fff is not inside one of the container's IOVA ranges \
                 [[0x0, 0xfedfffff], [0xfef00000, 0x7fffffffff]]"
            ),
            "{msg}"
        );
        assert!(!msg.contains("multiple"), "{msg}");
        // Wrapping past the top of the space is outside every range too.
        let msg = einval(
            MapRequest {
                iova: u64::MAX - 0xfff,
                ..REQ
            },
            4096,
        );
        assert!(msg.contains("not inside one of"), "{msg}");
        // Neither by our figures: the kernel's differ.
        let msg = einval(REQ, 4096);
        assert!(msg.contains("this one is neither"), "{msg}");
    }

    #[test]
    fn other_errnos_get_no_remedy_and_a_remedy_ends_the_message() {
        for errno in [libc::ENOMEM, libc::EFAULT, libc::ENOTTY] {
            assert_eq!(
                map_errno_remedy(errno, REQ, &crate::VTD_39BIT_RANGES, 4096, 0),
                None
            );
        }
        let err = DmaError::Map {
            mapper: "vfio-type1",
            iova: REQ.iova,
            len: REQ.len as usize,
            source: io::Error::from_raw_os_error(libc::EEXIST),
            remedy: Some("what to do".into()),
        };
        let msg = err.to_string();
        assert!(msg.ends_with("(os error 17): what to do"), "{msg}");
        // A map refused for another reason (not a VFIO container here: ENOTTY) stays bare.
        let container = Arc::new(OwnedFd::from(std::fs::File::open("/dev/null").unwrap()));
        let mapper = VfioType1::new(container, Arc::new(()), REQ_RANGES.to_vec(), None);
        let mem = crate::DmaMemory::with_policy(4096, crate::PagePolicy::BaseOnly).unwrap();
        // SAFETY: the map fails (not a VFIO container), so nothing is mapped.
        let err =
            unsafe { mapper.map(mem.as_ptr(), 4096, 0x10000, Access::ReadWrite) }.unwrap_err();
        assert!(
            matches!(&err, DmaError::Map { remedy: None, source, .. } if source.raw_os_error() == Some(libc::ENOTTY)),
            "{err:?}"
        );
    }

    const REQ_RANGES: [IovaRange; 1] = [IovaRange::new(0, u64::MAX)];

    #[test]
    fn the_attachment_lives_exactly_as_long_as_the_mapper() {
        let container = Arc::new(OwnedFd::from(std::fs::File::open("/dev/null").unwrap()));
        let group = Arc::new(17u32);
        let attachment: Attachment = group.clone();
        let mapper = Arc::new(VfioType1::new(
            container,
            attachment,
            vec![IovaRange::new(0, u64::MAX)],
            None,
        ));
        let handle: Arc<dyn DmaMapper> = mapper.clone();
        drop(mapper);
        // A pool's handle alone keeps the group attached.
        assert_eq!(Arc::strong_count(&group), 2);
        drop(handle);
        assert_eq!(Arc::strong_count(&group), 1);
    }
}

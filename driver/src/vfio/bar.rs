//! Mapping a BAR: the whole BAR's address range is reserved with no access rights, then each
//! area VFIO allows (all of it, or the sparse-mmap areas) is mapped over the reservation at its
//! own offset. BAR offsets stay valid, and the pages VFIO keeps for itself (the MSI-X table)
//! fault instead of reaching anything.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::ptr::NonNull;

use crate::backend::MmapArea;

/// The system page size.
pub fn page_size() -> u64 {
    // SAFETY: sysconf takes no pointers.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u64::try_from(n).ok().filter(|&n| n > 0).unwrap_or(4096)
}

/// An address range reserved for one BAR, with areas mapped into it; unmapped on drop.
#[derive(Debug)]
pub struct BarMapping {
    base: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain address space; it is only touched through `Mmio`'s volatile
// accesses, and unmapping it (drop) needs no particular thread.
unsafe impl Send for BarMapping {}
// SAFETY: as above; `BarMapping` itself has no interior state.
unsafe impl Sync for BarMapping {}

impl BarMapping {
    /// Start of the reservation (BAR offset 0).
    pub fn base(&self) -> NonNull<u8> {
        self.base
    }

    /// Length of the reservation (the BAR size rounded up to pages).
    pub fn len(&self) -> usize {
        self.len
    }
}

impl Drop for BarMapping {
    fn drop(&mut self) {
        // SAFETY: `base .. base + len` is the reservation this value made; unmapping it also
        // removes every area mapped into it. Nothing else refers to it once the last `Mmio`
        // holding this value is gone.
        let rc = unsafe { libc::munmap(self.base.as_ptr().cast(), self.len) };
        if rc != 0 {
            tracing::warn!(error = %io::Error::last_os_error(), "munmap of a BAR failed");
        }
    }
}

/// Reserve `bar_size` bytes (rounded up to pages) and map each of `areas` into the reservation
/// with `map_area(address, area, mapped_len)`, which must map exactly there (`MAP_FIXED`).
/// Areas must start on a page boundary; their length is rounded up to pages for the mapping.
pub fn map_bar(
    bar_size: u64,
    areas: &[MmapArea],
    page: u64,
    mut map_area: impl FnMut(*mut u8, &MmapArea, usize) -> io::Result<()>,
) -> Result<BarMapping, String> {
    let round = |n: u64| n.div_ceil(page).checked_mul(page);
    let len = round(bar_size)
        .and_then(|n| usize::try_from(n).ok())
        .filter(|&n| n > 0)
        .ok_or_else(|| format!("BAR size {bar_size:#x} cannot be mapped"))?;
    for a in areas {
        if a.offset % page != 0 {
            return Err(format!(
                "mappable area at {:#x} does not start on a {page:#x}-byte page",
                a.offset
            ));
        }
        let end = round(a.size).and_then(|s| s.checked_add(a.offset));
        if a.size == 0 || end.is_none_or(|e| e > len as u64) {
            return Err(format!(
                "mappable area {:#x}+{:#x} does not fit the {len:#x}-byte BAR",
                a.offset, a.size
            ));
        }
    }
    // SAFETY: a fresh anonymous reservation at an address of the kernel's choosing; it
    // overlaps nothing we own.
    let ptr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if ptr == libc::MAP_FAILED {
        return Err(format!(
            "reserving {len:#x} bytes of address space: {}",
            io::Error::last_os_error()
        ));
    }
    let mapping = BarMapping {
        base: NonNull::new(ptr.cast()).ok_or("mmap returned a null reservation")?,
        len,
    };
    for a in areas {
        let at = mapping.base.as_ptr().wrapping_add(a.offset as usize);
        let mapped_len = round(a.size).unwrap_or(0) as usize;
        map_area(at, a, mapped_len)
            .map_err(|e| format!("mapping the area {:#x}+{:#x}: {e}", a.offset, a.size))?;
    }
    Ok(mapping)
}

/// Map `len` bytes of `fd` at file offset `file_offset` exactly at `at` (inside a reservation
/// made by [`map_bar`]), readable and writable, shared with the device.
///
/// # Safety
///
/// `at .. at + len` must lie inside an address range the caller owns and that nothing else
/// uses (a [`map_bar`] reservation, as `map_bar` hands it to its `map_area` callback), with no
/// Rust references into it: `MAP_FIXED` replaces whatever is mapped there.
pub unsafe fn map_fixed_shared(
    at: *mut u8,
    len: usize,
    fd: BorrowedFd<'_>,
    file_offset: u64,
) -> io::Result<()> {
    let off = libc::off_t::try_from(file_offset)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "file offset too large"))?;
    // SAFETY: the caller guarantees `at .. at + len` is address space it owns and nothing
    // refers to, so MAP_FIXED replaces only its own pages.
    let got = unsafe {
        libc::mmap(
            at.cast(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_FIXED,
            fd.as_raw_fd(),
            off,
        )
    };
    if got == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    if got.cast::<u8>() != at {
        return Err(io::Error::other("the kernel mapped the area elsewhere"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mmio::Mmio;
    use std::sync::Arc;

    /// The permissions /proc/self/maps shows for the mapping that contains `addr`.
    fn perms_at(addr: usize) -> Option<String> {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        maps.lines().find_map(|l| {
            let mut it = l.split_whitespace();
            let range = it.next()?;
            let perms = it.next()?;
            let (lo, hi) = range.split_once('-')?;
            let lo = usize::from_str_radix(lo, 16).ok()?;
            let hi = usize::from_str_radix(hi, 16).ok()?;
            (lo <= addr && addr < hi).then(|| perms.to_string())
        })
    }

    /// Anonymous shared memory stands in for the device: the reservation logic is the same.
    fn anon(at: *mut u8, _: &MmapArea, len: usize) -> io::Result<()> {
        // SAFETY: `at .. at + len` is inside the test's reservation.
        let got = unsafe {
            libc::mmap(
                at.cast(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                -1,
                0,
            )
        };
        if got == libc::MAP_FAILED {
            Err(io::Error::last_os_error())
        } else {
            Ok(())
        }
    }

    #[test]
    fn sparse_bar_keeps_offsets_and_guards_the_hole() {
        let page = page_size();
        let areas = [
            MmapArea {
                offset: 0,
                size: page,
            },
            MmapArea {
                offset: 2 * page,
                size: 2 * page,
            },
        ];
        let bar = map_bar(4 * page, &areas, page, anon).unwrap();
        let base = bar.base();
        let addr = base.as_ptr() as usize;
        let p = page as usize;
        assert_eq!(perms_at(addr).as_deref(), Some("rw-s"));
        assert_eq!(
            perms_at(addr + p).as_deref(),
            Some("---p"),
            "the hole is reserved"
        );
        assert_eq!(perms_at(addr + 2 * p).as_deref(), Some("rw-s"));

        let keep = Arc::new(bar);
        // SAFETY: the areas are live mappings owned by `keep`.
        let mmio = unsafe { Mmio::mapped_sparse(base, 4 * page, areas.to_vec().into(), keep) };
        mmio.write32(0x10, 0x1234_5678);
        assert_eq!(mmio.read32(0x10), 0x1234_5678);
        mmio.write64(2 * page + 8, 0x0102_0304_0506_0708);
        assert_eq!(mmio.read64(2 * page + 8), 0x0102_0304_0506_0708);
        // Big-endian on the bus: the first byte in memory is the most significant.
        // SAFETY: reads one byte of the mapped first area.
        let first = unsafe { base.as_ptr().add(0x10).read_volatile() };
        assert_eq!(first, 0x12);

        assert!(mmio.in_bounds(page - 4, 4));
        assert!(!mmio.in_bounds(page, 4), "the hole is out of bounds");
        assert!(!mmio.in_bounds(2 * page - 4, 8), "straddles the hole");
        assert!(mmio.in_bounds(4 * page - 8, 8));
        assert!(!mmio.in_bounds(4 * page, 4));
        let caught =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| mmio.read32(page + 0x40)));
        assert!(caught.is_err(), "an access in the hole must not happen");

        drop(mmio);
        assert_eq!(
            perms_at(addr),
            None,
            "dropping the last Mmio unmaps the BAR"
        );
        assert_eq!(perms_at(addr + 2 * p), None);
    }

    #[test]
    fn whole_bar_and_bad_areas() {
        let page = page_size();
        let bar = map_bar(
            page / 2,
            &[MmapArea {
                offset: 0,
                size: page / 2,
            }],
            page,
            anon,
        )
        .unwrap();
        assert_eq!(bar.len(), page as usize, "rounded up to a page");
        let unaligned = [MmapArea {
            offset: 0x10,
            size: page,
        }];
        assert!(
            map_bar(4 * page, &unaligned, page, anon)
                .unwrap_err()
                .contains("page")
        );
        let too_big = [MmapArea {
            offset: page,
            size: 4 * page,
        }];
        assert!(
            map_bar(4 * page, &too_big, page, anon)
                .unwrap_err()
                .contains("does not fit")
        );
        assert!(map_bar(0, &[], page, anon).is_err());
        let failing =
            |_: *mut u8, _: &MmapArea, _: usize| Err(io::Error::from_raw_os_error(libc::EINVAL));
        let err = map_bar(
            page,
            &[MmapArea {
                offset: 0,
                size: page,
            }],
            page,
            failing,
        )
        .unwrap_err();
        assert!(err.contains("mapping the area 0x0+"), "{err}");
    }
}

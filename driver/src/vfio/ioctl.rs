//! The VFIO ioctls the backend issues, as safe wrappers over `libc::ioctl`.
//!
//! Every VFIO ioctl is `_IO(';', 100 + n)`: no size is encoded in the number, the argument
//! struct carries its own length in its first `u32` (`argsz`); reference `vfio-userspace.md`
//! §1.1. Argument structs are built and read as byte buffers at the field offsets of the
//! `vfio-bindings` structs, so the only `unsafe` is the system call itself.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use vfio_bindings::bindings::vfio::{VFIO_BASE, VFIO_TYPE};

/// `_IO(VFIO_TYPE, VFIO_BASE + n)` in the asm-generic encoding (x86-64, arm64, riscv64): no
/// direction bits, no size, type in bits 8..16, number in bits 0..8.
const fn vfio_io(n: u32) -> u32 {
    ((VFIO_TYPE as u32) << 8) | (VFIO_BASE + n)
}

/// Container: the API version (must be 0).
pub const VFIO_GET_API_VERSION: u32 = vfio_io(0);
/// Container: is an extension (IOMMU type) supported.
pub const VFIO_CHECK_EXTENSION: u32 = vfio_io(1);
/// Container: choose the IOMMU type (after the first group is attached).
pub const VFIO_SET_IOMMU: u32 = vfio_io(2);
/// Group: viability and container flags.
pub const VFIO_GROUP_GET_STATUS: u32 = vfio_io(3);
/// Group: attach to a container (argument: pointer to the container fd as `s32`).
pub const VFIO_GROUP_SET_CONTAINER: u32 = vfio_io(4);
/// Group: detach from its container.
pub const VFIO_GROUP_UNSET_CONTAINER: u32 = vfio_io(5);
/// Group: a device fd for a device name (argument: NUL-terminated string).
pub const VFIO_GROUP_GET_DEVICE_FD: u32 = vfio_io(6);
/// Device: flags, number of regions and IRQ indexes.
pub const VFIO_DEVICE_GET_INFO: u32 = vfio_io(7);
/// Device: one region's flags, size, file offset and capabilities.
pub const VFIO_DEVICE_GET_REGION_INFO: u32 = vfio_io(8);
/// Device: one IRQ index's flags and vector count.
pub const VFIO_DEVICE_GET_IRQ_INFO: u32 = vfio_io(9);
/// Device: route, trigger, mask or disable interrupts.
pub const VFIO_DEVICE_SET_IRQS: u32 = vfio_io(10);
/// Device: function reset (only when the device reports `VFIO_DEVICE_FLAGS_RESET`).
pub const VFIO_DEVICE_RESET: u32 = vfio_io(11);
/// Container: type1 IOMMU information (page sizes, capability chain).
pub const VFIO_IOMMU_GET_INFO: u32 = vfio_io(12);

/// The largest info buffer we accept the kernel asking for (its caps are a few hundred bytes;
/// anything near this is a malformed `argsz`).
pub const MAX_INFO_BYTES: usize = 1 << 20;

fn check(rc: libc::c_int) -> io::Result<libc::c_int> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

/// The VFIO ioctls that take no argument: the only requests [`ioctl_none`] can issue, so
/// that it never passes a request that would read or write user memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NoArg {
    /// Container: [`VFIO_GET_API_VERSION`].
    GetApiVersion,
    /// Group: [`VFIO_GROUP_UNSET_CONTAINER`].
    GroupUnsetContainer,
    /// Device: [`VFIO_DEVICE_RESET`].
    DeviceReset,
}

impl NoArg {
    /// The request number.
    pub const fn request(self) -> u32 {
        match self {
            NoArg::GetApiVersion => VFIO_GET_API_VERSION,
            NoArg::GroupUnsetContainer => VFIO_GROUP_UNSET_CONTAINER,
            NoArg::DeviceReset => VFIO_DEVICE_RESET,
        }
    }
}

/// The VFIO ioctls whose argument is an integer by value: the only requests [`ioctl_value`]
/// can issue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ValueArg {
    /// Container: [`VFIO_CHECK_EXTENSION`].
    CheckExtension,
    /// Container: [`VFIO_SET_IOMMU`].
    SetIommu,
}

impl ValueArg {
    /// The request number.
    pub const fn request(self) -> u32 {
        match self {
            ValueArg::CheckExtension => VFIO_CHECK_EXTENSION,
            ValueArg::SetIommu => VFIO_SET_IOMMU,
        }
    }
}

/// The VFIO ioctls whose argument is an argsz-prefixed struct the kernel reads and writes: the
/// only requests [`ioctl_buf`] can issue. Each of them touches at most `argsz` bytes, after
/// first reading the fixed struct (which [`BufArg::min_len`] covers).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BufArg {
    /// Group: [`VFIO_GROUP_GET_STATUS`].
    GroupGetStatus,
    /// Device: [`VFIO_DEVICE_GET_INFO`].
    DeviceGetInfo,
    /// Device: [`VFIO_DEVICE_GET_REGION_INFO`].
    DeviceGetRegionInfo,
    /// Device: [`VFIO_DEVICE_GET_IRQ_INFO`].
    DeviceGetIrqInfo,
    /// Device: [`VFIO_DEVICE_SET_IRQS`].
    DeviceSetIrqs,
    /// Container: [`VFIO_IOMMU_GET_INFO`].
    IommuGetInfo,
}

impl BufArg {
    /// The request number.
    pub const fn request(self) -> u32 {
        match self {
            BufArg::GroupGetStatus => VFIO_GROUP_GET_STATUS,
            BufArg::DeviceGetInfo => VFIO_DEVICE_GET_INFO,
            BufArg::DeviceGetRegionInfo => VFIO_DEVICE_GET_REGION_INFO,
            BufArg::DeviceGetIrqInfo => VFIO_DEVICE_GET_IRQ_INFO,
            BufArg::DeviceSetIrqs => VFIO_DEVICE_SET_IRQS,
            BufArg::IommuGetInfo => VFIO_IOMMU_GET_INFO,
        }
    }

    /// The size of the fixed argument struct: the kernel copies its leading fields in before
    /// it looks at `argsz`, so the buffer must hold at least this much.
    pub const fn min_len(self) -> usize {
        use std::mem::size_of;
        use vfio_bindings::bindings::vfio as b;
        match self {
            BufArg::GroupGetStatus => size_of::<b::vfio_group_status>(),
            BufArg::DeviceGetInfo => size_of::<b::vfio_device_info>(),
            BufArg::DeviceGetRegionInfo => size_of::<b::vfio_region_info>(),
            BufArg::DeviceGetIrqInfo => size_of::<b::vfio_irq_info>(),
            BufArg::DeviceSetIrqs => size_of::<b::vfio_irq_set>(),
            BufArg::IommuGetInfo => size_of::<b::vfio_iommu_type1_info>(),
        }
    }
}

/// An ioctl without argument; returns the non-negative result.
pub fn ioctl_none(fd: BorrowedFd<'_>, request: NoArg) -> io::Result<libc::c_int> {
    // SAFETY: every `NoArg` request takes no argument and touches no user memory.
    check(unsafe { libc::ioctl(fd.as_raw_fd(), request.request() as libc::Ioctl) })
}

/// An ioctl whose argument is an integer passed by value.
pub fn ioctl_value(fd: BorrowedFd<'_>, request: ValueArg, value: u32) -> io::Result<libc::c_int> {
    // SAFETY: every `ValueArg` request takes an integer by value; no memory is passed.
    check(unsafe {
        libc::ioctl(
            fd.as_raw_fd(),
            request.request() as libc::Ioctl,
            libc::c_ulong::from(value),
        )
    })
}

/// An ioctl that reads and writes the byte buffer `buf` (an argsz-prefixed struct). Fails with
/// `InvalidInput`, before any system call, unless `buf` holds the request's fixed struct and
/// its `argsz` lies between that size and `buf.len()`.
pub fn ioctl_buf(fd: BorrowedFd<'_>, request: BufArg, buf: &mut [u8]) -> io::Result<libc::c_int> {
    let min = request.min_len();
    if buf.len() < min {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{request:?}: a {}-byte buffer cannot hold the {min}-byte argument",
                buf.len()
            ),
        ));
    }
    let argsz = u32_at(buf, 0) as usize;
    if argsz < min || argsz > buf.len() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{request:?}: argsz {argsz} outside the argument's {min} bytes and the buffer's {}",
                buf.len()
            ),
        ));
    }
    // SAFETY: a `BufArg` request reads its fixed struct (`min` bytes, checked above) and then
    // reads and writes at most `argsz` bytes, which is checked to be at most `buf.len()`;
    // `buf` is a live, exclusively borrowed buffer for the whole call.
    check(unsafe {
        libc::ioctl(
            fd.as_raw_fd(),
            request.request() as libc::Ioctl,
            buf.as_mut_ptr(),
        )
    })
}

/// `VFIO_GROUP_SET_CONTAINER`: the argument is a pointer to the container fd as an `s32`.
pub fn group_set_container(group: BorrowedFd<'_>, container: BorrowedFd<'_>) -> io::Result<()> {
    let fd: i32 = container.as_raw_fd();
    // SAFETY: the kernel reads one s32 through the pointer, which points to a live local.
    check(unsafe {
        libc::ioctl(
            group.as_raw_fd(),
            VFIO_GROUP_SET_CONTAINER as libc::Ioctl,
            &raw const fd,
        )
    })
    .map(drop)
}

/// `VFIO_GROUP_GET_DEVICE_FD`: the argument is the device name as a C string. The returned fd
/// is made close-on-exec if the kernel did not already.
pub fn group_get_device_fd(group: BorrowedFd<'_>, name: &CStr) -> io::Result<OwnedFd> {
    // SAFETY: the kernel reads a NUL-terminated string from a live CStr.
    let fd = check(unsafe {
        libc::ioctl(
            group.as_raw_fd(),
            VFIO_GROUP_GET_DEVICE_FD as libc::Ioctl,
            name.as_ptr(),
        )
    })?;
    // SAFETY: a non-negative return of GET_DEVICE_FD is a new fd that nobody else owns.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    set_cloexec(owned.as_raw_fd())?;
    Ok(owned)
}

/// Make `fd` close-on-exec, so a child process never keeps a VFIO device open (a child holding
/// the device fd blocks the kernel's unbind forever; `vfio-userspace.md` §1.5).
fn set_cloexec(fd: libc::c_int) -> io::Result<()> {
    // SAFETY: F_GETFD/F_SETFD on an fd we own; no memory is passed.
    let flags = check(unsafe { libc::fcntl(fd, libc::F_GETFD) })?;
    if flags & libc::FD_CLOEXEC == 0 {
        // SAFETY: as above.
        check(unsafe { libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC) })?;
    }
    Ok(())
}

/// A little-endian-agnostic (native) `u32` at `offset`; the caller has checked the bounds.
pub fn u32_at(buf: &[u8], offset: usize) -> u32 {
    u32::from_ne_bytes(buf[offset..offset + 4].try_into().expect("4 bytes"))
}

/// A native `u64` at `offset`; the caller has checked the bounds.
pub fn u64_at(buf: &[u8], offset: usize) -> u64 {
    u64::from_ne_bytes(buf[offset..offset + 8].try_into().expect("8 bytes"))
}

/// Store a native `u32` at `offset`.
pub fn put_u32(buf: &mut [u8], offset: usize, value: u32) {
    buf[offset..offset + 4].copy_from_slice(&value.to_ne_bytes());
}

/// A zeroed argument buffer of `len` bytes whose `argsz` (first `u32`) says `len`.
pub fn argsz_buf(len: usize) -> Vec<u8> {
    let mut buf = vec![0u8; len];
    put_u32(&mut buf, 0, len as u32);
    buf
}

/// Issue an INFO ioctl whose answer may carry a capability chain, the way the kernel's
/// selftests do: first with the fixed struct (`fixed`, whose `argsz` is set here), then again
/// with a buffer of the `argsz` the kernel asked for, until the answer fits. Returns the
/// whole buffer (fixed struct followed by the capabilities).
pub fn info_with_caps(fd: BorrowedFd<'_>, request: BufArg, fixed: &[u8]) -> io::Result<Vec<u8>> {
    let mut size = fixed.len();
    // The kernel only asks once for more; a few rounds cover a chain that grows in between.
    for _ in 0..4 {
        let mut buf = vec![0u8; size];
        buf[..fixed.len()].copy_from_slice(fixed);
        put_u32(&mut buf, 0, size as u32);
        ioctl_buf(fd, request, &mut buf)?;
        let wanted = u32_at(&buf, 0) as usize;
        if wanted <= size {
            return Ok(buf);
        }
        if wanted > MAX_INFO_BYTES {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "the kernel asked for a {wanted}-byte info buffer (limit {MAX_INFO_BYTES})"
                ),
            ));
        }
        size = wanted;
    }
    Err(io::Error::new(
        io::ErrorKind::InvalidData,
        "the kernel kept asking for a larger info buffer",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};
    use vfio_bindings::bindings::vfio as b;

    /// Numbers from the table of vfio-userspace.md §1.1.
    #[test]
    #[allow(clippy::unnecessary_cast)]
    fn ioctl_numbers_match_the_reference_table() {
        let table = [
            (VFIO_GET_API_VERSION, 0x3B64),
            (VFIO_CHECK_EXTENSION, 0x3B65),
            (VFIO_SET_IOMMU, 0x3B66),
            (VFIO_GROUP_GET_STATUS, 0x3B67),
            (VFIO_GROUP_SET_CONTAINER, 0x3B68),
            (VFIO_GROUP_UNSET_CONTAINER, 0x3B69),
            (VFIO_GROUP_GET_DEVICE_FD, 0x3B6A),
            (VFIO_DEVICE_GET_INFO, 0x3B6B),
            (VFIO_DEVICE_GET_REGION_INFO, 0x3B6C),
            (VFIO_DEVICE_GET_IRQ_INFO, 0x3B6D),
            (VFIO_DEVICE_SET_IRQS, 0x3B6E),
            (VFIO_DEVICE_RESET, 0x3B6F),
            (VFIO_IOMMU_GET_INFO, 0x3B70),
        ];
        for (got, want) in table {
            assert_eq!(got, want, "{got:#x} != {want:#x}");
        }
        // The dma crate's map/unmap numbers continue the same sequence. Its constants are
        // `c_ulong`, which is `u64` only on 64-bit glibc targets: keep the casts.
        assert_eq!(
            u64::from(vfio_io(13)),
            dma::vfio_type1::VFIO_IOMMU_MAP_DMA as u64
        );
        assert_eq!(
            u64::from(vfio_io(14)),
            dma::vfio_type1::VFIO_IOMMU_UNMAP_DMA as u64
        );
    }

    /// Constants of vfio-userspace.md §1.1, §1.4 and §1.5 against the bindings.
    #[test]
    fn constants_match_the_reference() {
        assert_eq!(b::VFIO_API_VERSION, 0);
        assert_eq!(b::VFIO_TYPE1_IOMMU, 1);
        assert_eq!(b::VFIO_TYPE1v2_IOMMU, 3);
        assert_eq!(b::VFIO_NOIOMMU_IOMMU, 8);
        assert_eq!(b::VFIO_GROUP_FLAGS_VIABLE, 1);
        assert_eq!(b::VFIO_GROUP_FLAGS_CONTAINER_SET, 2);
        assert_eq!(b::VFIO_DEVICE_FLAGS_RESET, 1 << 0);
        assert_eq!(b::VFIO_DEVICE_FLAGS_PCI, 1 << 1);
        assert_eq!(b::VFIO_DEVICE_FLAGS_CAPS, 1 << 7);
        assert_eq!(
            (
                b::VFIO_REGION_INFO_FLAG_READ,
                b::VFIO_REGION_INFO_FLAG_WRITE,
                b::VFIO_REGION_INFO_FLAG_MMAP,
                b::VFIO_REGION_INFO_FLAG_CAPS
            ),
            (1, 2, 4, 8)
        );
        assert_eq!(
            (
                b::VFIO_REGION_INFO_CAP_SPARSE_MMAP,
                b::VFIO_REGION_INFO_CAP_TYPE,
                b::VFIO_REGION_INFO_CAP_MSIX_MAPPABLE
            ),
            (1, 2, 3)
        );
        assert_eq!(
            (
                b::VFIO_IRQ_INFO_EVENTFD,
                b::VFIO_IRQ_INFO_MASKABLE,
                b::VFIO_IRQ_INFO_AUTOMASKED,
                b::VFIO_IRQ_INFO_NORESIZE
            ),
            (1, 2, 4, 8)
        );
        assert_eq!(
            (
                b::VFIO_IRQ_SET_DATA_NONE,
                b::VFIO_IRQ_SET_DATA_BOOL,
                b::VFIO_IRQ_SET_DATA_EVENTFD,
                b::VFIO_IRQ_SET_ACTION_MASK,
                b::VFIO_IRQ_SET_ACTION_UNMASK,
                b::VFIO_IRQ_SET_ACTION_TRIGGER
            ),
            (1, 2, 4, 8, 16, 32)
        );
        assert_eq!(
            (b::VFIO_IOMMU_INFO_PGSIZES, b::VFIO_IOMMU_INFO_CAPS),
            (1, 2)
        );
        assert_eq!(
            (
                b::VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE,
                b::VFIO_IOMMU_TYPE1_INFO_CAP_MIGRATION,
                b::VFIO_IOMMU_TYPE1_INFO_DMA_AVAIL
            ),
            (1, 2, 3)
        );
        assert_eq!(b::VFIO_PCI_CONFIG_REGION_INDEX, 7);
        assert_eq!(b::VFIO_PCI_VGA_REGION_INDEX, 8);
        assert_eq!(b::VFIO_PCI_NUM_REGIONS, 9);
        assert_eq!(
            (
                b::VFIO_PCI_INTX_IRQ_INDEX,
                b::VFIO_PCI_MSI_IRQ_INDEX,
                b::VFIO_PCI_MSIX_IRQ_INDEX,
                b::VFIO_PCI_ERR_IRQ_INDEX,
                b::VFIO_PCI_REQ_IRQ_INDEX
            ),
            (0, 1, 2, 3, 4)
        );
    }

    #[test]
    fn ioctl_buf_refuses_an_argsz_past_the_buffer_before_the_call() {
        // /dev/null would answer any ioctl with ENOTTY: an InvalidInput proves no call was made.
        let null = std::fs::File::open("/dev/null").unwrap();
        let fd = std::os::fd::AsFd::as_fd(&null);
        let mut big = argsz_buf(size_of::<b::vfio_irq_info>());
        put_u32(&mut big, 0, 4096);
        let err = ioctl_buf(fd, BufArg::DeviceGetIrqInfo, &mut big).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "{err}");
        let mut short = argsz_buf(8);
        let err = ioctl_buf(fd, BufArg::DeviceGetIrqInfo, &mut short).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "{err}");
        let mut small_argsz = argsz_buf(size_of::<b::vfio_irq_info>());
        put_u32(&mut small_argsz, 0, 8);
        let err = ioctl_buf(fd, BufArg::DeviceGetIrqInfo, &mut small_argsz).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "{err}");
        let mut good = argsz_buf(size_of::<b::vfio_irq_info>());
        let err = ioctl_buf(fd, BufArg::DeviceGetIrqInfo, &mut good).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ENOTTY), "{err}");
    }

    /// Sizes and field offsets of the argument structs, written out from include/uapi/linux/vfio.h
    /// (the layouts §1.2–§1.5 describe).
    #[test]
    fn argument_struct_layouts() {
        assert_eq!(size_of::<b::vfio_info_cap_header>(), 8);
        assert_eq!(offset_of!(b::vfio_info_cap_header, id), 0);
        assert_eq!(offset_of!(b::vfio_info_cap_header, version), 2);
        assert_eq!(offset_of!(b::vfio_info_cap_header, next), 4);

        assert_eq!(size_of::<b::vfio_group_status>(), 8);
        assert_eq!(offset_of!(b::vfio_group_status, flags), 4);

        assert_eq!(size_of::<b::vfio_device_info>(), 24);
        assert_eq!(offset_of!(b::vfio_device_info, flags), 4);
        assert_eq!(offset_of!(b::vfio_device_info, num_regions), 8);
        assert_eq!(offset_of!(b::vfio_device_info, num_irqs), 12);
        assert_eq!(offset_of!(b::vfio_device_info, cap_offset), 16);

        assert_eq!(size_of::<b::vfio_region_info>(), 32);
        assert_eq!(offset_of!(b::vfio_region_info, flags), 4);
        assert_eq!(offset_of!(b::vfio_region_info, index), 8);
        assert_eq!(offset_of!(b::vfio_region_info, cap_offset), 12);
        assert_eq!(offset_of!(b::vfio_region_info, size), 16);
        assert_eq!(offset_of!(b::vfio_region_info, offset), 24);

        assert_eq!(size_of::<b::vfio_region_info_cap_sparse_mmap>(), 16);
        assert_eq!(offset_of!(b::vfio_region_info_cap_sparse_mmap, nr_areas), 8);
        assert_eq!(offset_of!(b::vfio_region_info_cap_sparse_mmap, areas), 16);
        assert_eq!(size_of::<b::vfio_region_sparse_mmap_area>(), 16);
        assert_eq!(offset_of!(b::vfio_region_sparse_mmap_area, size), 8);

        assert_eq!(size_of::<b::vfio_region_info_cap_type>(), 16);
        assert_eq!(offset_of!(b::vfio_region_info_cap_type, type_), 8);
        assert_eq!(offset_of!(b::vfio_region_info_cap_type, subtype), 12);

        assert_eq!(size_of::<b::vfio_irq_info>(), 16);
        assert_eq!(offset_of!(b::vfio_irq_info, flags), 4);
        assert_eq!(offset_of!(b::vfio_irq_info, index), 8);
        assert_eq!(offset_of!(b::vfio_irq_info, count), 12);

        assert_eq!(size_of::<b::vfio_irq_set>(), 20);
        assert_eq!(offset_of!(b::vfio_irq_set, flags), 4);
        assert_eq!(offset_of!(b::vfio_irq_set, index), 8);
        assert_eq!(offset_of!(b::vfio_irq_set, start), 12);
        assert_eq!(offset_of!(b::vfio_irq_set, count), 16);
        assert_eq!(offset_of!(b::vfio_irq_set, data), 20);

        assert_eq!(size_of::<b::vfio_iommu_type1_info>(), 24);
        assert_eq!(offset_of!(b::vfio_iommu_type1_info, flags), 4);
        assert_eq!(offset_of!(b::vfio_iommu_type1_info, iova_pgsizes), 8);
        assert_eq!(offset_of!(b::vfio_iommu_type1_info, cap_offset), 16);

        assert_eq!(size_of::<b::vfio_iommu_type1_info_cap_iova_range>(), 16);
        assert_eq!(
            offset_of!(b::vfio_iommu_type1_info_cap_iova_range, nr_iovas),
            8
        );
        assert_eq!(
            offset_of!(b::vfio_iommu_type1_info_cap_iova_range, iova_ranges),
            16
        );
        assert_eq!(size_of::<b::vfio_iova_range>(), 16);
        assert_eq!(offset_of!(b::vfio_iova_range, end), 8);

        assert_eq!(size_of::<b::vfio_iommu_type1_info_dma_avail>(), 12);
        assert_eq!(offset_of!(b::vfio_iommu_type1_info_dma_avail, avail), 8);
    }
}

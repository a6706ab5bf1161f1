//! DMA memory: a `memfd`, mapped shared, on 2 MiB huge pages when the system has them, and
//! aligned when asked to an IOMMU page larger than the CPU's ([`DmaMemory::with_alignment`]).
//!
//! A memfd (rather than anonymous memory) because the same buffer must be reachable two ways:
//! by virtual address for VFIO type1 / iommufd, and by fd + offset for a vfio-user server.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;

use crate::DmaError;

/// Size of a huge page as requested with `MFD_HUGE_2MB`.
pub(crate) const HUGE_PAGE: usize = 2 << 20;

/// Under [`PagePolicy::Auto`], requests smaller than this go straight to base pages: rounding
/// them up to a whole huge page would waste more than half of it.
const AUTO_HUGE_MIN: usize = HUGE_PAGE / 2;

/// Which pages back a [`DmaMemory`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PageKind {
    /// 2 MiB hugetlb pages (`MFD_HUGETLB | MFD_HUGE_2MB`): one IOMMU entry and one TLB entry
    /// per 2 MiB.
    Huge2M,
    /// The system's base pages (4 KiB on x86-64).
    Base,
}

impl PageKind {
    /// Size in bytes of one page of this kind.
    pub fn size(self) -> usize {
        match self {
            PageKind::Huge2M => HUGE_PAGE,
            PageKind::Base => base_page_size(),
        }
    }
}

/// Which pages [`DmaMemory::with_policy`] may use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum PagePolicy {
    /// Huge pages for requests of 1 MiB or more when the system has them free, base pages
    /// otherwise (the fallback is logged at `info`).
    #[default]
    Auto,
    /// Huge pages or an error (never a base-page fallback).
    HugeOnly,
    /// Base pages only.
    BaseOnly,
}

/// The system's base page size (`sysconf(_SC_PAGESIZE)`, 4096 if that fails).
pub fn base_page_size() -> usize {
    // SAFETY: sysconf only reads a system constant.
    let sz = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if sz > 0 { sz as usize } else { 4096 }
}

/// Memory the device may reach: a sealed-size memfd mapped `MAP_SHARED`, page-aligned, zeroed,
/// pre-faulted and excluded from `fork` (`MADV_DONTFORK`).
///
/// It is never handed out as a Rust reference: the device may write it at any time, so all
/// access goes through the raw pointer of [`DmaMemory::as_ptr`]. Dropping it unmaps and closes.
/// It must outlive every IOMMU mapping of it (leases make sure of that).
pub struct DmaMemory {
    ptr: NonNull<u8>,
    len: usize,
    fd: OwnedFd,
    kind: PageKind,
}

// SAFETY: DmaMemory owns its mapping and fd exclusively; it hands out only a raw pointer, and
// whoever dereferences that pointer is responsible for synchronising (as with the device).
unsafe impl Send for DmaMemory {}
// SAFETY: as above; no method of &DmaMemory reads or writes the mapped bytes.
unsafe impl Sync for DmaMemory {}

impl DmaMemory {
    /// At least `len` bytes of DMA memory under [`PagePolicy::Auto`].
    pub fn new(len: usize) -> Result<Self, DmaError> {
        Self::with_policy(len, PagePolicy::Auto)
    }

    /// At least `len` bytes of DMA memory, rounded up to whole pages of the kind chosen.
    pub fn with_policy(len: usize, policy: PagePolicy) -> Result<Self, DmaError> {
        Self::with_alignment(len, policy, 1)
    }

    /// At least `len` bytes of DMA memory whose start address and length are multiples of
    /// both the page size of the kind chosen and `align` (a power of two): memory for an
    /// IOMMU whose smallest page is larger than the CPU's (VFIO type1 refuses a map whose
    /// address, IOVA or length is not a multiple of it, `vfio_dma_do_map`).
    ///
    /// [`DmaError::Invalid`] for `len == 0` or an `align` that is not a power of two.
    pub fn with_alignment(len: usize, policy: PagePolicy, align: usize) -> Result<Self, DmaError> {
        if len == 0 {
            return Err(DmaError::Invalid("DMA memory of 0 bytes".into()));
        }
        if !align.is_power_of_two() {
            return Err(DmaError::Invalid(format!(
                "DMA memory alignment {align:#x} is not a power of two"
            )));
        }
        match policy {
            PagePolicy::BaseOnly => Self::create(len, PageKind::Base, align),
            PagePolicy::HugeOnly => Self::create(len, PageKind::Huge2M, align),
            PagePolicy::Auto if len < AUTO_HUGE_MIN => {
                tracing::debug!(len, "DMA memory: small request, using base pages");
                Self::create(len, PageKind::Base, align)
            }
            PagePolicy::Auto => match Self::create(len, PageKind::Huge2M, align) {
                Ok(mem) => {
                    tracing::info!(len = mem.len, "DMA memory: using 2 MiB huge pages");
                    Ok(mem)
                }
                Err(err) => {
                    let mem = Self::create(len, PageKind::Base, align)?;
                    tracing::info!(
                        len = mem.len,
                        page_size = mem.page_size(),
                        "DMA memory: no 2 MiB huge pages ({err}); falling back to base pages \
                         (reserve some with /proc/sys/vm/nr_hugepages)"
                    );
                    Ok(mem)
                }
            },
        }
    }

    /// `len` bytes rounded up to whole pages of `kind` and to `align` (a power of two), at an
    /// address that is a multiple of both.
    fn create(len: usize, kind: PageKind, align: usize) -> Result<Self, DmaError> {
        let page = kind.size();
        // Both are powers of two: the larger is a multiple of the smaller.
        let unit = page.max(align);
        let len = len
            .checked_next_multiple_of(unit)
            .ok_or_else(|| DmaError::Invalid(format!("DMA memory of {len} bytes is too large")))?;
        let fail = |what: &'static str| DmaError::Alloc {
            len,
            what,
            source: io::Error::last_os_error(),
        };

        let mut flags = libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING;
        if kind == PageKind::Huge2M && !test_seam::huge_on_base_pages() {
            flags |= libc::MFD_HUGETLB | libc::MFD_HUGE_2MB;
        }
        // SAFETY: the name is a NUL-terminated literal; the call only creates a new fd.
        let raw = unsafe { libc::memfd_create(c"hca-dma".as_ptr(), flags) };
        if raw < 0 {
            return Err(fail("memfd_create"));
        }
        // SAFETY: `raw` is a fresh fd that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };

        // SAFETY: plain syscall on the fd we own.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) } != 0 {
            return Err(fail("ftruncate of the memfd"));
        }
        // Whoever gets the fd later (a vfio-user server) must not shrink it under our mapping:
        // that would turn device accesses into SIGBUS.
        let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW;
        // SAFETY: plain fcntl on the fd we own.
        if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, seals) } != 0 {
            return Err(fail("sealing the memfd size"));
        }

        // Without MAP_NORESERVE a hugetlb mapping reserves its pages here, so "no huge pages"
        // fails now with ENOMEM rather than as SIGBUS on first touch. The kernel places a
        // mapping on a multiple of its page size (hugetlb: of the huge page); a larger
        // alignment needs a place chosen by us.
        let placed = if unit > page {
            map_aligned(&fd, len, unit)
        } else {
            // SAFETY: a new shared mapping of our own fd at an address the kernel chooses.
            let addr = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED | libc::MAP_POPULATE,
                    fd.as_raw_fd(),
                    0,
                )
            };
            if addr == libc::MAP_FAILED {
                Err(io::Error::last_os_error())
            } else {
                Ok(addr)
            }
        };
        let addr = placed.map_err(|source| DmaError::Alloc {
            len,
            what: if kind == PageKind::Huge2M {
                "mmap of a 2 MiB hugetlb memfd; are huge pages reserved in /proc/sys/vm/nr_hugepages?"
            } else {
                "mmap of the memfd"
            },
            source,
        })?;
        let Some(ptr) = NonNull::new(addr.cast::<u8>()) else {
            return Err(DmaError::Invalid("mmap returned address 0".into()));
        };
        // From here on, Drop unmaps.
        let mem = DmaMemory { ptr, len, fd, kind };

        // MAP_POPULATE ignores failures; MADV_POPULATE_WRITE reports them (e.g. a hugetlb
        // cgroup limit, or a memory cgroup that is full), so no page faults in later with
        // SIGBUS or the OOM killer while the device is using it.
        // SAFETY: advice on our own mapping; it only faults pages in.
        let rc = unsafe { libc::madvise(addr, len, libc::MADV_POPULATE_WRITE) };
        if rc != 0 {
            let err = io::Error::last_os_error();
            // EINVAL: a kernel older than 5.14 without the advice; MAP_POPULATE has done its best.
            if err.raw_os_error() != Some(libc::EINVAL) {
                return Err(DmaError::Alloc {
                    len,
                    what: "pre-faulting the pages (MADV_POPULATE_WRITE)",
                    source: err,
                });
            }
        }
        // A forked child must not share (or copy-on-write) memory the device writes.
        // SAFETY: advice on our own mapping; it changes no contents.
        if unsafe { libc::madvise(addr, len, libc::MADV_DONTFORK) } != 0 {
            return Err(fail("madvise(MADV_DONTFORK)"));
        }
        Ok(mem)
    }

    /// Start of the memory: page-aligned. Valid for [`DmaMemory::len`] bytes while `self` lives.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Length in bytes: the request rounded up to whole pages.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: DMA memory has at least one page.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The memfd, for passing the memory to another process (vfio-user) by fd + offset.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Which pages back the memory.
    pub fn page_kind(&self) -> PageKind {
        self.kind
    }

    /// Size of the pages that back the memory.
    pub fn page_size(&self) -> usize {
        self.kind.size()
    }

    /// The memfd offset of `addr`, or `None` when `addr` is not inside this memory.
    pub fn offset_of(&self, addr: *const u8) -> Option<u64> {
        let off = addr.addr().checked_sub(self.ptr.as_ptr().addr())?;
        (off < self.len).then_some(off as u64)
    }
}

/// Map `len` bytes of `fd` shared, read-write and populated at an address that is a multiple
/// of `align` (a power of two, a multiple of the fd's page size, dividing `len`): reserve
/// `len + align` bytes of address space, map the fd over the aligned part of the reservation,
/// and give back the rest.
fn map_aligned(fd: &OwnedFd, len: usize, align: usize) -> io::Result<*mut libc::c_void> {
    let span = len
        .checked_add(align)
        .ok_or_else(|| io::Error::from(io::ErrorKind::OutOfMemory))?;
    // SAFETY: a new private, inaccessible, unbacked reservation at an address the kernel
    // chooses; nothing else knows of it.
    let resv = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            span,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if resv == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    let Some(head) = resv
        .addr()
        .checked_next_multiple_of(align)
        .map(|aligned| aligned - resv.addr())
    else {
        // SAFETY: the whole reservation, which nothing uses.
        unsafe { libc::munmap(resv, span) };
        return Err(io::Error::from(io::ErrorKind::OutOfMemory));
    };
    let start = resv.cast::<u8>().wrapping_add(head).cast::<libc::c_void>();
    // SAFETY: `start .. start + len` lies inside the reservation made above (`head < align`),
    // which only this function uses; MAP_FIXED replaces that part of it with the fd.
    let addr = unsafe {
        libc::mmap(
            start,
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_POPULATE | libc::MAP_FIXED,
            fd.as_raw_fd(),
            0,
        )
    };
    if addr == libc::MAP_FAILED {
        let err = io::Error::last_os_error();
        // SAFETY: the whole reservation, which nothing uses.
        unsafe { libc::munmap(resv, span) };
        return Err(err);
    }
    let tail = span - head - len;
    // SAFETY: the parts of the reservation before and after the fd's mapping; both are
    // multiples of the base page (the reservation and `align` are), and nothing uses them.
    unsafe {
        if head > 0 {
            libc::munmap(resv, head);
        }
        if tail > 0 {
            libc::munmap(start.cast::<u8>().wrapping_add(len).cast(), tail);
        }
    }
    Ok(addr)
}

/// Unit tests need "huge page" memory on a machine without reserved huge pages: with
/// `set_huge_on_base_pages` on, this thread's `Huge2M` memory is sized and
/// reported as 2 MiB pages but backed by base pages. Outside unit tests it is always off.
pub(crate) mod test_seam {
    #[cfg(test)]
    thread_local! {
        static HUGE_ON_BASE_PAGES: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }

    /// True when `Huge2M` memory is to be backed by base pages (only ever in unit tests).
    pub(crate) fn huge_on_base_pages() -> bool {
        #[cfg(test)]
        {
            HUGE_ON_BASE_PAGES.with(std::cell::Cell::get)
        }
        #[cfg(not(test))]
        {
            false
        }
    }

    /// Switch the seam for this thread.
    #[cfg(test)]
    pub(crate) fn set_huge_on_base_pages(on: bool) {
        HUGE_ON_BASE_PAGES.with(|c| c.set(on));
    }
}

impl Drop for DmaMemory {
    fn drop(&mut self) {
        // SAFETY: exactly the mapping `create` made; nothing can use it after drop. The fd
        // closes when `self.fd` drops.
        let rc = unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
        if rc != 0 {
            tracing::warn!(
                len = self.len,
                "munmap of DMA memory failed: {}",
                io::Error::last_os_error()
            );
        }
    }
}

impl std::fmt::Debug for DmaMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DmaMemory")
            .field("ptr", &self.ptr)
            .field("len", &self.len)
            .field("fd", &self.fd.as_raw_fd())
            .field("kind", &self.kind)
            .finish()
    }
}

//! The one error type of the `dma` crate.

use std::io;

/// Everything that can go wrong while getting, mapping or leasing DMA memory.
///
/// Every message names what failed and, where there is one, the fix.
#[derive(Debug, thiserror::Error)]
pub enum DmaError {
    /// `memfd_create`, `ftruncate` or `mmap` of DMA memory failed.
    #[error("cannot allocate {len} bytes of DMA memory ({what}): {source}")]
    Alloc {
        /// How many bytes were asked for.
        len: usize,
        /// Which step failed.
        what: &'static str,
        /// The OS error.
        #[source]
        source: io::Error,
    },

    /// A zero-length or otherwise unusable request.
    #[error("invalid DMA request: {0}")]
    Invalid(String),

    /// A pool's arena size is smaller than the pages an arena must be made of and mapped in.
    #[error(
        "DMA pool arena size {arena_size:#x} is below the minimum of {min:#x} bytes ({why}): \
         configure an arena_size of at least {min:#x}"
    )]
    ArenaTooSmall {
        /// The configured arena size.
        arena_size: usize,
        /// The smallest arena size that works.
        min: usize,
        /// Which page sets the minimum.
        why: &'static str,
    },

    /// No free IOVA hole holds the request at its alignment.
    #[error(
        "IOVA space exhausted: need {requested} bytes aligned to {align:#x}, largest free hole is \
         {largest_free} bytes of {total_free} free in {holes} holes{}",
        iova_exhaustion_cause(*requested, *align, *largest_free, *total_free, *holes)
    )]
    IovaExhausted {
        /// Bytes requested.
        requested: u64,
        /// Alignment requested.
        align: u64,
        /// Size of the largest free hole.
        largest_free: u64,
        /// Total free bytes.
        total_free: u64,
        /// Number of free holes.
        holes: usize,
    },

    /// `RLIMIT_MEMLOCK` is too low for the pinned memory a mapping needs.
    #[error(
        "RLIMIT_MEMLOCK is {limit} bytes but DMA mappings need {needed} bytes pinned: raise it \
         (`ulimit -l {needed_kib}` in the shell, `memlock` in /etc/security/limits.conf, or \
         `LimitMEMLOCK=` for a systemd unit) or run with CAP_IPC_LOCK"
    )]
    MemlockTooLow {
        /// Bytes that would be pinned after this mapping.
        needed: u64,
        /// `needed` rounded up to KiB, as `ulimit -l` takes it.
        needed_kib: u64,
        /// The current soft limit in bytes.
        limit: u64,
    },

    /// The IOMMU refused a mapping.
    #[error(
        "{mapper}: mapping {len:#x} bytes at IOVA {iova:#x} failed: {source}{}",
        remedy.as_ref().map(|r| format!(": {r}")).unwrap_or_default()
    )]
    Map {
        /// Mapper name.
        mapper: &'static str,
        /// IOVA asked for.
        iova: u64,
        /// Length asked for.
        len: usize,
        /// The OS error (or a description from a simulated IOMMU).
        #[source]
        source: io::Error,
        /// What the error means here and what to do, when the mapper knows (VFIO type1:
        /// [`crate::vfio_type1::map_errno_remedy`]).
        remedy: Option<String>,
    },

    /// The IOMMU refused to remove a mapping, or removed a different amount.
    #[error("{mapper}: unmapping {len:#x} bytes at IOVA {iova:#x} failed: {reason}")]
    Unmap {
        /// Mapper name.
        mapper: &'static str,
        /// IOVA asked for.
        iova: u64,
        /// Length asked for.
        len: usize,
        /// What went wrong.
        reason: String,
    },

    /// An IOVA range was freed that the allocator did not hand out with this length.
    #[error(
        "IOVA {iova:#x} (+{len:#x} bytes) is not allocated: double free, or freed with a length \
         other than the one it was allocated with"
    )]
    IovaNotAllocated {
        /// IOVA passed to free.
        iova: u64,
        /// Length passed to free.
        len: u64,
    },

    /// An access through a lease fell outside it.
    #[error(
        "access of {len} bytes at offset {offset:#x} is outside the {lease_len}-byte DMA lease \
         at IOVA {iova:#x}"
    )]
    OutOfBounds {
        /// IOVA of the lease.
        iova: u64,
        /// Offset of the access inside the lease.
        offset: usize,
        /// Length of the access.
        len: usize,
        /// Length of the lease.
        lease_len: usize,
    },
}

/// Why an [`DmaError::IovaExhausted`] request fit no hole, when the figures say more than
/// "not enough space": a hole large enough that no multiple of the alignment leaves room in
/// (the alignment is the cause), or enough free space spread over holes each too small
/// (fragmentation).
fn iova_exhaustion_cause(
    requested: u64,
    align: u64,
    largest_free: u64,
    total_free: u64,
    holes: usize,
) -> String {
    if largest_free >= requested {
        format!(
            " (no hole holds {requested} bytes at a multiple of {align:#x}, though the largest \
             is big enough: the alignment is the cause; ask for a smaller one)"
        )
    } else if holes > 1 && total_free >= requested {
        " (fragmented: free space is enough in total but not in one hole)".into()
    } else {
        String::new()
    }
}

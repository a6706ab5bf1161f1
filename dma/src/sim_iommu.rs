//! The simulated IOMMU: the driver maps through it as through VFIO type1, and the simulator's
//! device models reach host memory only through it, so every stray DMA becomes a recorded fault.
//!
//! Translation is a binary search of the mappings sorted by IOVA, under a read lock (O(log
//! n), no allocation; a sorted vector rather than a tree, because every device access
//! translates and mappings change rarely); unmap takes the write lock, so once it returns no
//! device access to that memory is still running, just as an IOTLB flush guarantees on
//! hardware. Before the search, the translation tries the mapping that last served the same
//! 2 MiB IOVA frame (a DMA pool maps 2 MiB arenas, each aligned to its size, and a device
//! goes back to the same few queues and buffers); that is only a hint where to look in the
//! live table, read under the same lock, so it can never translate through a mapping that is
//! gone.

use std::fmt;
use std::io;
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError, RwLock, RwLockReadGuard};

use crate::memlock::check_memlock;
use crate::volatile;
use crate::{Access, DmaError, DmaMapper, IovaRange};

/// The IOVA ranges QEMU's emulated VT-d (39-bit address width) reports: everything below
/// 512 GiB except the x86 MSI window (reference vfio-userspace.md §1.5, observed under QEMU).
pub const VTD_39BIT_RANGES: [IovaRange; 2] = [
    IovaRange::new(0x0, 0xfedf_ffff),
    IovaRange::new(0xfef0_0000, 0x7f_ffff_ffff),
];

/// VFIO type1's default `dma_entry_limit`: at most this many mappings per container.
pub const DEFAULT_DMA_ENTRY_LIMIT: usize = 65535;

/// How many faults [`SimIommu::faults`] keeps; [`SimIommu::fault_count`] counts them all.
pub const FAULT_LOG_CAPACITY: usize = 4096;

/// What the device tried to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AccessKind {
    /// A DMA read of host memory.
    Read,
    /// A DMA write to host memory.
    Write,
}

/// Why the IOMMU refused a device access.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FaultReason {
    /// The first byte is in no live mapping (never mapped, or already unmapped).
    NotMapped,
    /// The access starts inside a mapping but runs past its end.
    Straddles,
    /// The mapping does not allow this direction (a device write to a read-only mapping).
    Permission,
    /// Device accesses are switched off ([`SimIommu::set_bus_master`]). Counted apart from
    /// IOMMU faults: a device with bus mastering off issues no DMA at all.
    BusMasterOff,
}

/// A refused device access, as the simulated IOMMU records it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Fault {
    /// First address of the access.
    pub iova: u64,
    /// Length of the access in bytes.
    pub len: usize,
    /// Read or write.
    pub kind: AccessKind,
    /// Why it was refused.
    pub reason: FaultReason,
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self.kind {
            AccessKind::Read => "read",
            AccessKind::Write => "write",
        };
        let why = match self.reason {
            FaultReason::NotMapped => "no live mapping at that IOVA",
            FaultReason::Straddles => "it runs past the end of its mapping",
            FaultReason::Permission => "the mapping does not allow it",
            FaultReason::BusMasterOff => "device DMA is off (bus mastering off or device removed)",
        };
        write!(
            f,
            "simulated IOMMU refused a device {what} of {} bytes at IOVA {:#x}: {why}",
            self.len, self.iova
        )
    }
}

impl std::error::Error for Fault {}

/// Translation hints a [`SimIommu`] keeps, one per IOVA frame modulo this.
const HINT_SLOTS: usize = 8;
/// log2 of the IOVA frame a hint covers: 2 MiB, a DMA pool's arena.
const HINT_FRAME_SHIFT: u32 = 21;

/// Limits and IOVA ranges of a [`SimIommu`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SimIommuConfig {
    /// The ranges [`DmaMapper::iova_ranges`] reports and `map` enforces.
    pub ranges: Vec<IovaRange>,
    /// Most mappings at once (VFIO's `dma_entry_limit`); `map` fails with ENOSPC past it.
    pub max_mappings: usize,
    /// A simulated `RLIMIT_MEMLOCK` in bytes over all live mappings (`None`: unlimited), to
    /// test the "limit too low" path without touching the process's real limit.
    pub memlock_limit: Option<u64>,
    /// The IOMMU page size: IOVA, address and length of every mapping must be multiples of it.
    pub page_size: u64,
}

impl Default for SimIommuConfig {
    /// The VT-d ranges of [`VTD_39BIT_RANGES`], VFIO's default entry limit, no memlock limit,
    /// 4 KiB pages.
    fn default() -> Self {
        SimIommuConfig {
            ranges: VTD_39BIT_RANGES.to_vec(),
            max_mappings: DEFAULT_DMA_ENTRY_LIMIT,
            memlock_limit: None,
            page_size: 4096,
        }
    }
}

/// Host address of a mapping. Only dereferenced under the read lock while the mapping is live.
#[derive(Clone, Copy)]
struct HostPtr(*mut u8);

// SAFETY: the pointer is only an address recorded at map time; it is dereferenced only under
// the mappings lock while the mapping is live, which the `DmaMapper::map` contract keeps valid.
unsafe impl Send for HostPtr {}
// SAFETY: as above; sharing the address itself is harmless.
unsafe impl Sync for HostPtr {}

#[derive(Clone, Copy)]
struct Mapping {
    len: u64,
    host: HostPtr,
    access: Access,
}

#[derive(Default)]
struct Mappings {
    /// Live mappings by start IOVA, sorted, none overlapping.
    by_iova: Vec<(u64, Mapping)>,
    pinned: u64,
}

impl Mappings {
    /// The mapping with the greatest start at or below `iova`.
    #[inline]
    fn at_or_below(&self, iova: u64) -> Option<&(u64, Mapping)> {
        self.index_at_or_below(iova).map(|i| &self.by_iova[i])
    }

    /// True when a mapping covers any byte of `iova ..= last`: mappings never overlap, so
    /// only the one starting last at or below `last` can.
    fn overlaps(&self, iova: u64, last: u64) -> bool {
        self.at_or_below(last)
            .is_some_and(|&(s, ref m)| s + (m.len - 1) >= iova)
    }

    /// The index in `by_iova` of [`Mappings::at_or_below`].
    #[inline]
    fn index_at_or_below(&self, iova: u64) -> Option<usize> {
        let i = self.by_iova.partition_point(|&(start, _)| start <= iova);
        i.checked_sub(1)
    }

    /// The live mapping that contains `iova`, with its index: the one at index `hint` when it
    /// does, else found by binary search. Mappings never overlap, so at most one contains
    /// `iova` and the hint cannot change the answer, only how fast it is found.
    #[inline]
    fn containing(&self, iova: u64, hint: usize) -> Option<(usize, &(u64, Mapping))> {
        if let Some(e @ &(start, ref m)) = self.by_iova.get(hint) {
            if iova >= start && iova - start < m.len {
                return Some((hint, e));
            }
        }
        let i = self.index_at_or_below(iova)?;
        let e @ &(start, ref m) = &self.by_iova[i];
        (iova - start < m.len).then_some((i, e))
    }
}

/// A simulated IOMMU domain: a [`DmaMapper`] for the driver, and checked DMA for device models.
///
/// Device-side accesses ([`SimIommu::read`], [`SimIommu::write`] and the big-endian helpers)
/// succeed only inside one live mapping whose [`Access`] allows them; anything else returns a
/// [`Fault`] and records it ([`SimIommu::faults`]). Host memory is touched through raw pointers
/// only.
pub struct SimIommu {
    config: SimIommuConfig,
    maps: RwLock<Mappings>,
    /// Per 2 MiB IOVA frame (modulo [`HINT_SLOTS`]), the index in the mapping table of the
    /// last successful translation there: where the next one looks first. Any value is safe
    /// (see [`Mappings::containing`]).
    hints: [AtomicUsize; HINT_SLOTS],
    bus_master: AtomicBool,
    fault_count: AtomicUsize,
    blocked: AtomicUsize,
    fault_log: Mutex<Vec<Fault>>,
}

impl Default for SimIommu {
    fn default() -> Self {
        Self::new()
    }
}

impl SimIommu {
    /// A simulated IOMMU with [`SimIommuConfig::default`] (VT-d ranges, MSI hole).
    pub fn new() -> Self {
        Self::with_config(SimIommuConfig::default())
    }

    /// A simulated IOMMU with the given ranges and limits. Device DMA starts enabled.
    pub fn with_config(config: SimIommuConfig) -> Self {
        SimIommu {
            config,
            maps: RwLock::new(Mappings::default()),
            hints: [const { AtomicUsize::new(0) }; HINT_SLOTS],
            bus_master: AtomicBool::new(true),
            fault_count: AtomicUsize::new(0),
            blocked: AtomicUsize::new(0),
            fault_log: Mutex::new(Vec::new()),
        }
    }

    /// The configuration this IOMMU was built with.
    pub fn config(&self) -> &SimIommuConfig {
        &self.config
    }

    /// Allow (`true`) or refuse (`false`) all device accesses, as bus mastering on/off or a
    /// removed device would. After `set_bus_master(false)` returns, no device access is still
    /// running. Refused accesses return a [`FaultReason::BusMasterOff`] fault and are counted
    /// by [`SimIommu::blocked_count`], not recorded as IOMMU faults.
    pub fn set_bus_master(&self, enabled: bool) {
        // Under the write lock, so that accesses in flight finish first.
        let _guard = self.maps.write().unwrap_or_else(PoisonError::into_inner);
        self.bus_master.store(enabled, Ordering::SeqCst);
    }

    /// Whether device accesses are allowed.
    pub fn bus_master(&self) -> bool {
        self.bus_master.load(Ordering::SeqCst)
    }

    /// Device accesses refused because bus mastering was off.
    pub fn blocked_count(&self) -> usize {
        self.blocked.load(Ordering::Relaxed)
    }

    /// Faults recorded so far (the first [`FAULT_LOG_CAPACITY`] since the last
    /// [`SimIommu::take_faults`]).
    pub fn faults(&self) -> Vec<Fault> {
        self.fault_log
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Faults recorded so far, emptying the log ([`SimIommu::fault_count`] keeps counting).
    pub fn take_faults(&self) -> Vec<Fault> {
        std::mem::take(
            &mut *self
                .fault_log
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        )
    }

    /// Every IOMMU fault since creation (not counting [`FaultReason::BusMasterOff`]).
    pub fn fault_count(&self) -> usize {
        self.fault_count.load(Ordering::Relaxed)
    }

    /// Device DMA read of `buf.len()` bytes at `iova` into `buf` (zero bytes: always succeeds).
    pub fn read(&self, iova: u64, buf: &mut [u8]) -> Result<(), Fault> {
        self.hold().read(iova, buf)
    }

    /// Device DMA write of `data` at `iova` (zero bytes: always succeeds).
    pub fn write(&self, iova: u64, data: &[u8]) -> Result<(), Fault> {
        self.hold().write(iova, data)
    }

    /// Device DMA write of `len` copies of `byte` at `iova`.
    pub fn fill(&self, iova: u64, len: usize, byte: u8) -> Result<(), Fault> {
        if len == 0 {
            return Ok(());
        }
        self.access(iova, len, AccessKind::Write, |host| {
            // SAFETY: `host` is valid for `len` bytes (checked translation under the lock).
            unsafe { ptr::write_bytes(host, byte, len) }
        })
    }

    /// Write `data` so that its last byte lands after the rest: all but the last byte, a
    /// release fence, then the last byte (volatile), through one translation. How a device
    /// hands over an entry whose ownership bit is in its last byte (a CQE, an EQE): whoever
    /// sees the new owner value sees the whole entry.
    pub fn write_owned(&self, iova: u64, data: &[u8]) -> Result<(), Fault> {
        let Some((&last, body)) = data.split_last() else {
            return Ok(());
        };
        let len = data.len();
        self.access(iova, len, AccessKind::Write, |host| {
            // SAFETY: `host` is valid for `len` bytes (checked translation under the lock);
            // `data` is a Rust slice, which no DMA memory is, so they do not overlap.
            unsafe { ptr::copy_nonoverlapping(body.as_ptr(), host, len - 1) };
            std::sync::atomic::fence(Ordering::Release);
            // SAFETY: `host + len - 1` is the last byte of the checked range.
            unsafe { volatile::store_u8(host.wrapping_add(len - 1), last) };
        })
    }

    /// Device read of one byte.
    pub fn read_u8(&self, iova: u64) -> Result<u8, Fault> {
        // SAFETY: the closure gets a pointer valid for 1 byte.
        self.access(iova, 1, AccessKind::Read, |p| unsafe {
            volatile::load_u8(p)
        })
    }

    /// Device read of a big-endian u16.
    pub fn read_u16_be(&self, iova: u64) -> Result<u16, Fault> {
        // SAFETY: the closure gets a pointer valid for 2 bytes.
        self.access(iova, 2, AccessKind::Read, |p| unsafe {
            volatile::load_be16(p)
        })
    }

    /// Device read of a big-endian u32 (one volatile load when aligned).
    pub fn read_u32_be(&self, iova: u64) -> Result<u32, Fault> {
        self.hold().read_u32_be(iova)
    }

    /// Device read of a big-endian u64 (one volatile load when aligned).
    pub fn read_u64_be(&self, iova: u64) -> Result<u64, Fault> {
        // SAFETY: the closure gets a pointer valid for 8 bytes.
        self.access(iova, 8, AccessKind::Read, |p| unsafe {
            volatile::load_be64(p)
        })
    }

    /// Device write of one byte.
    pub fn write_u8(&self, iova: u64, v: u8) -> Result<(), Fault> {
        // SAFETY: the closure gets a pointer valid for 1 byte.
        self.access(iova, 1, AccessKind::Write, |p| unsafe {
            volatile::store_u8(p, v);
        })
    }

    /// Device write of a big-endian u16.
    pub fn write_u16_be(&self, iova: u64, v: u16) -> Result<(), Fault> {
        // SAFETY: the closure gets a pointer valid for 2 bytes.
        self.access(iova, 2, AccessKind::Write, |p| unsafe {
            volatile::store_be16(p, v);
        })
    }

    /// Device write of a big-endian u32 (one volatile store when aligned).
    pub fn write_u32_be(&self, iova: u64, v: u32) -> Result<(), Fault> {
        // SAFETY: the closure gets a pointer valid for 4 bytes.
        self.access(iova, 4, AccessKind::Write, |p| unsafe {
            volatile::store_be32(p, v);
        })
    }

    /// Device write of a big-endian u64 (one volatile store when aligned).
    pub fn write_u64_be(&self, iova: u64, v: u64) -> Result<(), Fault> {
        // SAFETY: the closure gets a pointer valid for 8 bytes.
        self.access(iova, 8, AccessKind::Write, |p| unsafe {
            volatile::store_be64(p, v);
        })
    }

    /// Translate `[iova, iova + len)` and run `f` on the host address while the mapping is
    /// held live by a hold for this one access; or record and return the fault.
    #[inline]
    fn access<R>(
        &self,
        iova: u64,
        len: usize,
        kind: AccessKind,
        f: impl FnOnce(*mut u8) -> R,
    ) -> Result<R, Fault> {
        self.hold().access(iova, len, kind, f)
    }

    /// The host address of `[iova, iova + len)` in `maps` (which the caller holds under the
    /// read lock), if bus mastering is on and one live mapping allowing `kind` holds it all;
    /// else the fault, not yet recorded (a refusal for bus mastering off is counted here).
    #[inline]
    fn translate(
        &self,
        maps: &Mappings,
        iova: u64,
        len: usize,
        kind: AccessKind,
    ) -> Result<*mut u8, Fault> {
        let fault = |reason| Fault {
            iova,
            len,
            kind,
            reason,
        };
        if !self.bus_master.load(Ordering::Relaxed) {
            self.blocked.fetch_add(1, Ordering::Relaxed);
            return Err(fault(FaultReason::BusMasterOff));
        }
        let slot = &self.hints[(iova >> HINT_FRAME_SHIFT) as usize % HINT_SLOTS];
        let hint = slot.load(Ordering::Relaxed);
        match maps.containing(iova, hint) {
            None => Err(fault(FaultReason::NotMapped)),
            Some((i, &(start, ref m))) => {
                let off = iova - start;
                let allowed = match kind {
                    AccessKind::Read => m.access.device_reads(),
                    AccessKind::Write => m.access.device_writes(),
                };
                if (len as u64) > m.len - off {
                    Err(fault(FaultReason::Straddles))
                } else if !allowed {
                    Err(fault(FaultReason::Permission))
                } else {
                    if i != hint {
                        slot.store(i, Ordering::Relaxed);
                    }
                    // `off < m.len`, so the pointer stays inside the mapped host memory.
                    Ok(m.host.0.wrapping_add(off as usize))
                }
            }
        }
    }

    /// Several device accesses under one hold of the mapping table (one read lock instead of
    /// one per access), for a device step that makes a few in a row (a WQE and its gather
    /// list, a receive WQE and its scatter). Each access is still translated and checked on
    /// its own, with the same faults and counts as through [`SimIommu::read`] and friends.
    ///
    /// While the returned value lives, [`DmaMapper::unmap`] and [`SimIommu::set_bus_master`]
    /// wait for it, as they wait for one access in flight. Do not make accesses through the
    /// `SimIommu` itself meanwhile: the lock favours writers, so a second read lock taken
    /// while an unmap waits would never be granted.
    pub fn hold(&self) -> SimIommuHold<'_> {
        SimIommuHold {
            iommu: self,
            maps: self.maps.read().unwrap_or_else(PoisonError::into_inner),
        }
    }

    /// Records a refused access as an IOMMU fault; one refused for bus mastering off is not
    /// one (it was counted by [`SimIommu::translate`]).
    #[cold]
    fn record(&self, fault: Fault) {
        if fault.reason == FaultReason::BusMasterOff {
            return;
        }
        self.fault_count.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(%fault, "simulated IOMMU fault");
        let mut log = self
            .fault_log
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if log.len() < FAULT_LOG_CAPACITY {
            log.push(fault);
        }
    }

    /// [`SimIommuConfig::memlock_limit`] against `pinned + len` bytes.
    fn check_memlock(&self, pinned: u64, len: u64) -> Result<(), DmaError> {
        match self.config.memlock_limit {
            Some(limit) => check_memlock(pinned, len, limit, false),
            None => Ok(()),
        }
    }

    fn map_error(&self, iova: u64, len: usize, kind: io::ErrorKind, msg: String) -> DmaError {
        DmaError::Map {
            mapper: self.name(),
            iova,
            len,
            source: io::Error::new(kind, msg),
            remedy: None,
        }
    }
}

/// Device accesses under one hold of a [`SimIommu`]'s mapping table ([`SimIommu::hold`]):
/// the same checked reads and writes as the IOMMU's own, without a lock per access.
pub struct SimIommuHold<'a> {
    iommu: &'a SimIommu,
    maps: RwLockReadGuard<'a, Mappings>,
}

impl SimIommuHold<'_> {
    /// Translate and run `f` on the host address (the mapping is held live by the hold), or
    /// record and return the fault.
    #[inline]
    fn access<R>(
        &self,
        iova: u64,
        len: usize,
        kind: AccessKind,
        f: impl FnOnce(*mut u8) -> R,
    ) -> Result<R, Fault> {
        match self.iommu.translate(&self.maps, iova, len, kind) {
            Ok(host) => Ok(f(host)),
            Err(fault) => {
                // Recording takes only the fault log's lock, never the mapping table's.
                self.iommu.record(fault);
                Err(fault)
            }
        }
    }

    /// [`SimIommu::read`] under the hold.
    pub fn read(&self, iova: u64, buf: &mut [u8]) -> Result<(), Fault> {
        let len = buf.len();
        if len == 0 {
            return Ok(());
        }
        self.access(iova, len, AccessKind::Read, |host| {
            // SAFETY: `host` is valid for `len` bytes (checked translation, mapping held live
            // by the hold); `buf` is a Rust slice, and no slice of DMA memory may exist, so
            // the two do not overlap.
            unsafe { ptr::copy_nonoverlapping(host, buf.as_mut_ptr(), len) }
        })
    }

    /// [`SimIommu::write`] under the hold.
    pub fn write(&self, iova: u64, data: &[u8]) -> Result<(), Fault> {
        let len = data.len();
        if len == 0 {
            return Ok(());
        }
        self.access(iova, len, AccessKind::Write, |host| {
            // SAFETY: as in `read`, with the direction reversed.
            unsafe { ptr::copy_nonoverlapping(data.as_ptr(), host, len) }
        })
    }

    /// [`SimIommu::read_u32_be`] under the hold.
    pub fn read_u32_be(&self, iova: u64) -> Result<u32, Fault> {
        // SAFETY: the closure gets a pointer valid for 4 bytes.
        self.access(iova, 4, AccessKind::Read, |p| unsafe {
            volatile::load_be32(p)
        })
    }
}

impl fmt::Debug for SimIommuHold<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimIommuHold").finish_non_exhaustive()
    }
}

impl DmaMapper for SimIommu {
    fn name(&self) -> &'static str {
        "sim-iommu"
    }

    fn iova_ranges(&self) -> Vec<IovaRange> {
        self.config.ranges.clone()
    }

    /// [`SimIommuConfig::page_size`] (1 for a page size of 0: no alignment rule).
    fn min_page_size(&self) -> usize {
        usize::try_from(self.config.page_size.max(1)).unwrap_or(usize::MAX)
    }

    /// [`SimIommuConfig::memlock_limit`] against what the live mappings pin.
    fn check_pin_headroom(&self, len: usize) -> Result<(), DmaError> {
        let pinned = self
            .maps
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .pinned;
        self.check_memlock(pinned, len as u64)
    }

    unsafe fn map(
        &self,
        vaddr: *mut u8,
        len: usize,
        iova: u64,
        access: Access,
    ) -> Result<(), DmaError> {
        // A zero page size in the config means "no alignment rule", not a division by zero.
        let page = self.config.page_size.max(1);
        let len64 = len as u64;
        if len == 0 {
            return Err(self.map_error(iova, len, io::ErrorKind::InvalidInput, "length 0".into()));
        }
        if iova % page != 0 || len64 % page != 0 || (vaddr.addr() as u64) % page != 0 {
            return Err(self.map_error(
                iova,
                len,
                io::ErrorKind::InvalidInput,
                format!("IOVA, address and length must be multiples of the {page:#x}-byte page"),
            ));
        }
        if !self.config.ranges.iter().any(|r| r.contains(iova, len64)) {
            return Err(self.map_error(
                iova,
                len,
                io::ErrorKind::InvalidInput,
                format!("outside the IOMMU's IOVA ranges {:?}", self.config.ranges),
            ));
        }
        let mut maps = self.maps.write().unwrap_or_else(PoisonError::into_inner);
        if maps.overlaps(iova, iova + (len64 - 1)) {
            return Err(self.map_error(
                iova,
                len,
                io::ErrorKind::AlreadyExists,
                "overlaps a live mapping".into(),
            ));
        }
        if maps.by_iova.len() >= self.config.max_mappings {
            return Err(self.map_error(
                iova,
                len,
                io::ErrorKind::StorageFull,
                format!(
                    "{} mappings is the limit (dma_entry_limit); map larger chunks",
                    self.config.max_mappings
                ),
            ));
        }
        self.check_memlock(maps.pinned, len64)?;
        let at = maps.by_iova.partition_point(|&(start, _)| start < iova);
        maps.by_iova.insert(
            at,
            (
                iova,
                Mapping {
                    len: len64,
                    host: HostPtr(vaddr),
                    access,
                },
            ),
        );
        maps.pinned += len64;
        Ok(())
    }

    fn unmap(&self, iova: u64, len: usize) -> Result<(), DmaError> {
        let mut maps = self.maps.write().unwrap_or_else(PoisonError::into_inner);
        let at = maps.by_iova.partition_point(|&(start, _)| start < iova);
        match maps.by_iova.get(at) {
            Some(&(start, ref m)) if start == iova && m.len == len as u64 => {
                maps.by_iova.remove(at);
                maps.pinned -= len as u64;
                Ok(())
            }
            _ => Err(DmaError::Unmap {
                mapper: self.name(),
                iova,
                len,
                reason: "no mapping with this IOVA and length".into(),
            }),
        }
    }

    fn live_mappings(&self) -> usize {
        self.maps
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .by_iova
            .len()
    }

    fn has_mapping_in(&self, iova: u64, len: usize) -> bool {
        let Some(last) = (len as u64).checked_sub(1).map(|l| iova.saturating_add(l)) else {
            return false;
        };
        self.maps
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .overlaps(iova, last)
    }

    fn fault_count(&self) -> usize {
        SimIommu::fault_count(self)
    }
}

impl fmt::Debug for SimIommu {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimIommu")
            .field("ranges", &self.config.ranges)
            .field("live_mappings", &self.live_mappings())
            .field("fault_count", &self.fault_count())
            .field("bus_master", &self.bus_master())
            .finish_non_exhaustive()
    }
}

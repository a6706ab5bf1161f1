//! Leases on the simulated IOMMU: accounting in both modes, leak detection, data seen by the
//! device side, bounds, permissions, memlock and unmap failures, and use from many threads.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use dma::{
    Access, Accounting, DmaError, DmaLease, DmaMapper, DmaPool, FIRST_BASE_ARENA, FaultReason,
    IovaRange, LeaseMode, PagePolicy, PoolConfig, SimIommu, SimIommuConfig,
};

const MODES: [LeaseMode; 2] = [LeaseMode::Strict, LeaseMode::Pooled];

fn pool(mode: LeaseMode) -> (Arc<SimIommu>, DmaPool) {
    let iommu = Arc::new(SimIommu::new());
    let pool = DmaPool::new(iommu.clone(), mode).unwrap();
    (iommu, pool)
}

/// A pooled-mode pool of default-size arenas on base pages (whose arenas grow with it) on
/// `iommu`.
fn base_only_pool(iommu: Arc<SimIommu>) -> DmaPool {
    DmaPool::with_config(
        iommu,
        PoolConfig {
            pages: PagePolicy::BaseOnly,
            ..PoolConfig::new(LeaseMode::Pooled)
        },
    )
    .unwrap()
}

/// A pooled-mode pool of 64 KiB arenas on its own simulated IOMMU.
fn pooled_64k() -> (Arc<SimIommu>, DmaPool) {
    let iommu = Arc::new(SimIommu::new());
    let pool = DmaPool::with_config(
        iommu.clone(),
        PoolConfig {
            arena_size: 64 << 10,
            ..PoolConfig::new(LeaseMode::Pooled)
        },
    )
    .unwrap();
    (iommu, pool)
}

#[test]
fn accounting_returns_to_zero_after_drop_in_both_modes() {
    for mode in MODES {
        let (iommu, pool) = pool(mode);
        assert_eq!(pool.accounting(), Accounting::default(), "{mode:?}");
        let leases: Vec<DmaLease> = [
            (256, 64, Access::Read),
            (4096, 4096, Access::ReadWrite),
            (100, 8, Access::Write),
            (296, 64, Access::Read),
            (64 << 10, 4096, Access::ReadWrite),
        ]
        .into_iter()
        .map(|(len, align, access)| pool.lease(len, align, access).unwrap())
        .collect();
        let acc = pool.accounting();
        assert_eq!(acc.leases_out, 5, "{mode:?}");
        assert_eq!(acc.lease_bytes, 256 + 4096 + 100 + 296 + (64 << 10));
        match mode {
            LeaseMode::Strict => assert_eq!((acc.live_mappings, acc.arenas), (5, 0)),
            // One arena per access kind.
            LeaseMode::Pooled => assert_eq!((acc.live_mappings, acc.arenas), (3, 3)),
        }
        drop(leases);
        let acc = pool.accounting();
        assert_eq!(
            (acc.leases_out, acc.lease_bytes, acc.faults),
            (0, 0, 0),
            "{mode:?}"
        );
        // Pooled arenas stay mapped for reuse until trimmed.
        assert_eq!(acc.live_mappings, acc.arenas);
        assert_eq!(pool.trim(), acc.arenas);
        assert_eq!(pool.accounting(), Accounting::default(), "{mode:?}");
        assert_eq!(iommu.live_mappings(), 0);
        assert_eq!(pool.iova_stats().allocations, 0);
    }
}

#[test]
fn dropping_the_pool_unmaps_its_arenas() {
    let (iommu, pool) = pool(LeaseMode::Pooled);
    let lease = pool.lease(128, 64, Access::ReadWrite).unwrap();
    drop(pool);
    // The lease keeps the arena alive and mapped.
    assert_eq!(iommu.live_mappings(), 1);
    lease.write_u8(0, 1).unwrap();
    assert_eq!(iommu.read_u8(lease.iova()).unwrap(), 1);
    drop(lease);
    assert_eq!(iommu.live_mappings(), 0);
}

#[test]
fn a_forgotten_lease_shows_in_the_accounting() {
    for mode in MODES {
        let (_iommu, pool) = pool(mode);
        let kept = pool.lease(512, 64, Access::ReadWrite).unwrap();
        std::mem::forget(pool.lease(300, 64, Access::ReadWrite).unwrap());
        drop(kept);
        let acc = pool.accounting();
        assert_eq!((acc.leases_out, acc.lease_bytes), (1, 300), "{mode:?}");
        assert_eq!(
            acc.live_mappings, 1,
            "{mode:?}: the leaked lease's mapping stays"
        );
        assert_eq!(
            pool.trim(),
            0,
            "an arena with a lease out is never released"
        );
    }
}

#[test]
fn what_the_driver_writes_the_device_reads_and_back() {
    for mode in MODES {
        let (iommu, pool) = pool(mode);
        let lease = pool.lease(256, 64, Access::ReadWrite).unwrap();
        let payload: Vec<u8> = (0..=255).collect();
        lease.write(0, &payload).unwrap();
        lease.write_u32_be(4, 0xcafe_f00d).unwrap();
        let mut seen = [0u8; 256];
        iommu.read(lease.iova(), &mut seen).unwrap();
        assert_eq!(&seen[..4], &payload[..4]);
        assert_eq!(
            &seen[4..8],
            &[0xca, 0xfe, 0xf0, 0x0d],
            "big-endian on the device side"
        );
        assert_eq!(&seen[8..], &payload[8..]);

        // Device writes, driver reads.
        iommu
            .write_u64_be(lease.iova() + 16, 0x1122_3344_5566_7788)
            .unwrap();
        iommu.write(lease.iova() + 200, b"CQE!").unwrap();
        assert_eq!(lease.read_u64_be(16).unwrap(), 0x1122_3344_5566_7788);
        assert_eq!(lease.read_u32_be(16).unwrap(), 0x1122_3344);
        assert_eq!(lease.read_u16_be(22).unwrap(), 0x7788);
        assert_eq!(lease.read_u8(23).unwrap(), 0x88);
        let mut buf = [0u8; 4];
        lease.read(200, &mut buf).unwrap();
        assert_eq!(&buf, b"CQE!");
        assert_eq!(lease.iova_at(200).unwrap(), lease.iova() + 200);
        assert_eq!(iommu.fault_count(), 0, "{mode:?}");
    }
}

#[test]
fn leases_start_zeroed_even_when_memory_is_reused() {
    let (_iommu, pool) = pool(LeaseMode::Pooled);
    let first = pool.lease(512, 64, Access::ReadWrite).unwrap();
    let iova = first.iova();
    first.fill(0, 512, 0xff).unwrap();
    drop(first);
    let second = pool.lease(512, 64, Access::ReadWrite).unwrap();
    assert_eq!(second.iova(), iova, "same block handed out again");
    let mut buf = [0xaau8; 512];
    second.read(0, &mut buf).unwrap();
    assert!(buf.iter().all(|&b| b == 0));
}

#[test]
fn a_copied_lease_holds_exactly_its_data_in_both_modes() {
    for mode in MODES {
        let (iommu, pool) = pool(mode);
        let first = pool.lease(256, 64, Access::ReadWrite).unwrap();
        first.fill(0, 256, 0xff).unwrap();
        drop(first);
        let data: Vec<u8> = (0..=255).collect();
        let copy = pool.lease_copy(&data, 64, Access::Read).unwrap();
        assert_eq!(copy.len(), 256);
        let mut buf = [0u8; 256];
        copy.read(0, &mut buf).unwrap();
        assert_eq!(&buf[..], &data[..], "{mode:?}");
        // The device reads the same bytes.
        let mut dev = [0u8; 256];
        iommu.read(copy.iova(), &mut dev).unwrap();
        assert_eq!(&dev[..], &data[..], "{mode:?}");
        assert_eq!(pool.accounting().leases_out, 1);
        drop(copy);
        assert_eq!(pool.accounting().leases_out, 0);
        assert!(pool.lease_copy(&[], 64, Access::Read).is_err(), "0 bytes");
    }
}

#[test]
fn accessors_are_bounds_checked() {
    let (_iommu, pool) = pool(LeaseMode::Pooled);
    let lease = pool.lease(100, 64, Access::ReadWrite).unwrap();
    assert!(lease.write_u32_be(96, 1).is_ok());
    let err = lease.write_u32_be(97, 1).unwrap_err();
    assert!(
        matches!(
            err,
            DmaError::OutOfBounds {
                offset: 97,
                len: 4,
                lease_len: 100,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(lease.read_u64_be(93).is_err());
    assert!(lease.read_u8(100).is_err());
    assert!(lease.read(90, &mut [0; 11]).is_err());
    assert!(lease.write(usize::MAX, &[1]).is_err());
    assert!(lease.fill(1, 100, 0).is_err());
    assert!(lease.iova_at(100).is_err());
    assert!(
        lease.read(100, &mut []).is_ok(),
        "an empty access at the end is in bounds"
    );
    lease.zero();
    assert_eq!(lease.read_u32_be(96).unwrap(), 0);
}

#[test]
fn alignment_and_access_are_honoured() {
    for mode in MODES {
        let (iommu, pool) = pool(mode);
        for align in [1, 64, 4096, 1 << 16] {
            let l = pool.lease(100, align, Access::Read).unwrap();
            assert_eq!(l.iova() % align as u64, 0, "{mode:?} align {align:#x}");
            assert_ne!(l.iova(), 0);
        }
        let ro = pool.lease(64, 64, Access::Read).unwrap();
        assert_eq!(ro.access(), Access::Read);
        let f = iommu.write_u8(ro.iova(), 1).unwrap_err();
        assert_eq!(f.reason, FaultReason::Permission, "{mode:?}");
        assert!(matches!(
            pool.lease(0, 1, Access::Read),
            Err(DmaError::Invalid(_))
        ));
        assert!(matches!(
            pool.lease(1, 3, Access::Read),
            Err(DmaError::Invalid(_))
        ));
        assert_eq!(pool.accounting().faults, 1);
    }
}

#[test]
fn strict_leases_fault_just_past_their_end() {
    let (iommu, pool) = pool(LeaseMode::Strict);
    let a = pool.lease(256, 64, Access::ReadWrite).unwrap();
    // The lease ends where its page does: the first byte past it is unmapped, not the rest
    // of a page-rounded mapping.
    assert_eq!(a.iova() % 64, 0, "aligned as asked");
    assert_eq!((a.iova() + 256) % 4096, 0, "ends at its mapping's end");
    iommu.read_u8(a.iova() + 255).unwrap();
    let f = iommu.read_u8(a.iova() + 256).unwrap_err();
    assert_eq!(f.reason, FaultReason::NotMapped);
    let f = iommu.read_u64_be(a.iova() + 252).unwrap_err();
    assert_eq!(f.reason, FaultReason::Straddles);
    // The host sees the same bytes at the same place.
    a.write(250, b"tail!!").unwrap();
    let mut seen = [0u8; 6];
    iommu.read(a.iova() + 250, &mut seen).unwrap();
    assert_eq!(&seen, b"tail!!");
    let iova = a.iova();
    drop(a);
    assert_eq!(
        iommu.read_u8(iova).unwrap_err().reason,
        FaultReason::NotMapped,
        "a dropped strict lease is unmapped"
    );
}

#[test]
fn a_device_overrun_of_a_strict_lease_faults_rather_than_landing_in_the_next_one() {
    let (iommu, pool) = pool(LeaseMode::Strict);
    // A whole page, 256 bytes, and 5000 bytes (two pages, the end rounded up to the 64-byte
    // alignment, 5056): each lease's first byte past that must be unmapped even with another
    // lease taken right after it.
    for (len, end) in [(4096, 4096), (256, 256), (5000, 5056)] {
        let a = pool.lease(len, 64, Access::ReadWrite).unwrap();
        let b = pool.lease(len, 64, Access::ReadWrite).unwrap();
        for (name, lease) in [("a", &a), ("b", &b)] {
            let past = lease.iova() + end;
            let f = iommu.write(past, &[0xee; 8]).unwrap_err();
            assert_eq!(f.reason, FaultReason::NotMapped, "{len}: past {name}: {f}");
            let f = iommu.read_u8(past).unwrap_err();
            assert_eq!(f.reason, FaultReason::NotMapped, "{len}: past {name}: {f}");
        }
        let mut seen = vec![0u8; b.len()];
        b.read(0, &mut seen).unwrap();
        assert!(seen.iter().all(|&x| x == 0), "{len}: b was not written");
    }
    assert_eq!(pool.accounting().faults, 12);
}

#[test]
fn a_late_device_write_to_a_dropped_strict_lease_faults_rather_than_landing_in_a_new_one() {
    let (iommu, pool) = pool(LeaseMode::Strict);
    let a = pool.lease(4096, 4096, Access::ReadWrite).unwrap();
    let b = pool.lease(4096, 4096, Access::ReadWrite).unwrap();
    let stale = a.iova();
    drop(a);
    // The leases taken next, of the same size and access, never get the released IOVA back.
    let later: Vec<DmaLease> = (0..64)
        .map(|_| pool.lease(4096, 4096, Access::ReadWrite).unwrap())
        .collect();
    for c in &later {
        assert_ne!(
            c.iova(),
            stale,
            "a released IOVA was handed out again at once"
        );
    }
    let f = iommu.write(stale, &[0xee; 8]).unwrap_err();
    assert_eq!(f.reason, FaultReason::NotMapped, "{f}");
    for c in later.iter().chain([&b]) {
        assert_eq!(c.read_u64_be(0).unwrap(), 0, "{c:?} was not written");
    }
    // The same when each lease is dropped before the next is taken (a MAD buffer's life).
    let mut prev = later[0].iova();
    drop(later);
    for _ in 0..64 {
        let c = pool.lease(4096, 4096, Access::ReadWrite).unwrap();
        assert_ne!(c.iova(), prev, "the IOVA just released came back");
        assert_ne!(c.iova(), stale);
        prev = c.iova();
    }
    assert_eq!(
        iommu.read_u8(prev).unwrap_err().reason,
        FaultReason::NotMapped
    );
    drop(b);
    assert_eq!(pool.accounting().leases_out, 0);
    assert_eq!(pool.iova_stats().allocations, 0);
}

#[test]
fn strict_leases_wrap_around_a_small_iova_space_instead_of_exhausting_it() {
    // 64 pages of IOVA space: room for 32 one-page leases with their guard pages.
    let iommu = Arc::new(SimIommu::with_config(SimIommuConfig {
        ranges: vec![IovaRange::new(0x10_0000, 0x13_ffff)],
        ..SimIommuConfig::default()
    }));
    let pool = DmaPool::new(iommu.clone(), LeaseMode::Strict).unwrap();
    let mut live: std::collections::VecDeque<DmaLease> = std::collections::VecDeque::new();
    let mut seen = std::collections::HashSet::new();
    let mut reused = 0usize;
    let mut last_dropped = None;
    for i in 0..20_000usize {
        let lease = pool.lease(4096, 64, Access::ReadWrite).unwrap_or_else(|e| {
            panic!("lease {i}: {e}");
        });
        assert_ne!(Some(lease.iova()), last_dropped, "lease {i}");
        if !seen.insert(lease.iova()) {
            reused += 1;
        }
        live.push_back(lease);
        if live.len() > 8 {
            last_dropped = live.pop_front().map(|l| l.iova());
        }
    }
    assert!(reused > 19_000, "the space wrapped around: {reused}");
    drop(live);
    assert_eq!(pool.accounting(), Accounting::default());
    assert_eq!(pool.iova_stats().allocations, 0);
}

#[test]
fn pooled_leases_grow_arenas_and_large_leases_get_their_own_mapping() {
    let (iommu, pool) = pooled_64k();
    // 16 KiB blocks: 4 per arena, so 5 leases need 2 arenas.
    let mut leases: Vec<DmaLease> = (0..5)
        .map(|_| pool.lease(16 << 10, 64, Access::ReadWrite).unwrap())
        .collect();
    assert_eq!(pool.accounting().arenas, 2);
    let mut iovas: Vec<u64> = leases.iter().map(DmaLease::iova).collect();
    iovas.sort_unstable();
    assert!(
        iovas.windows(2).all(|w| w[1] - w[0] >= 16 << 10),
        "{iovas:x?}"
    );
    // Larger than an arena: its own mapping, released on drop.
    let big = pool.lease(100 << 10, 64, Access::ReadWrite).unwrap();
    assert_eq!(iommu.live_mappings(), 3);
    big.write_u32_be(99 << 10, 5).unwrap();
    assert_eq!(iommu.read_u32_be(big.iova() + (99 << 10)).unwrap(), 5);
    drop(big);
    assert_eq!(iommu.live_mappings(), 2);
    leases.truncate(1);
    // The second arena is idle now; the first still has a lease out.
    assert_eq!(pool.trim(), 1);
    assert_eq!(pool.accounting().arenas, 1);
    drop(leases);
    assert_eq!(pool.trim(), 1);
    assert_eq!(pool.accounting(), Accounting::default());
}

#[test]
fn base_page_arenas_grow_with_the_pool_instead_of_starting_at_the_arena_size() {
    // Every base page of an arena is zeroed and faulted in when it is made: a pool that needs
    // a few KiB must not populate 2 MiB per access kind.
    let iommu = Arc::new(SimIommu::new());
    let pool = base_only_pool(iommu.clone());
    let first = FIRST_BASE_ARENA as u64;
    let mut leases = vec![pool.lease(4096, 4096, Access::ReadWrite).unwrap()];
    assert_eq!(pool.iova_stats().allocated_bytes, first, "the first arena");
    // Fill it; the next arena is as large as those before it together.
    while pool.accounting().arenas == 1 {
        leases.push(pool.lease(4096, 4096, Access::ReadWrite).unwrap());
    }
    assert_eq!(leases.len() as u64, first / 4096 + 1);
    assert_eq!(pool.iova_stats().allocated_bytes, 2 * first);
    while pool.accounting().arenas == 2 {
        leases.push(pool.lease(4096, 4096, Access::ReadWrite).unwrap());
    }
    assert_eq!(
        pool.iova_stats().allocated_bytes,
        4 * first,
        "then twice the first"
    );
    // Another access kind starts small again; a block larger than the first arena gets an
    // arena that holds it, and nothing grows past the arena size.
    let read = pool.lease(256, 64, Access::Read).unwrap();
    assert_eq!(pool.iova_stats().allocated_bytes, 5 * first);
    let big = pool.lease(2 << 20, 4096, Access::Write).unwrap();
    assert_eq!(pool.accounting().arenas, 5);
    assert_eq!(pool.iova_stats().allocated_bytes, 5 * first + (2 << 20));
    iommu.write_u32_be(big.iova() + (2 << 20) - 4, 7).unwrap();
    assert_eq!(big.read_u32_be((2 << 20) - 4).unwrap(), 7);
    drop((leases, read, big));
    assert_eq!(pool.trim(), 5);
    assert_eq!(pool.accounting(), Accounting::default());
    assert_eq!(iommu.live_mappings(), 0);
}

#[test]
fn freed_small_blocks_are_reused_and_never_keep_an_arena_or_a_large_lease_out() {
    let (iommu, pool) = pooled_64k();
    // A MAD buffer dropped and leased again comes back at the same IOVA, with the new data.
    let first = pool.lease_copy(&[0xaa; 256], 64, Access::Read).unwrap();
    let iova = first.iova();
    drop(first);
    let again = pool.lease_copy(&[0x55; 256], 64, Access::Read).unwrap();
    assert_eq!(again.iova(), iova);
    assert_eq!(iommu.read_u32_be(iova + 252).unwrap(), 0x5555_5555);
    // Another access kind never gets it (its arena has other permissions).
    let rw = pool.lease(256, 64, Access::ReadWrite).unwrap();
    assert_ne!(rw.iova(), iova);
    drop((again, rw));
    // Fill a whole arena with 64-byte blocks and drop them all: they are kept for reuse, yet a
    // lease of the whole arena still fits in it (no new arena, no own mapping).
    let small: Vec<DmaLease> = (0..1024)
        .map(|_| pool.lease(64, 64, Access::Write).unwrap())
        .collect();
    assert_eq!(pool.accounting().arenas, 3);
    drop(small);
    let whole = pool.lease(64 << 10, 64, Access::Write).unwrap();
    assert_eq!(pool.accounting().arenas, 3);
    assert_eq!(iommu.live_mappings(), 3);
    drop(whole);
    drop(pool.lease(256, 64, Access::Read).unwrap());
    // Every lease is back: a trim unmaps every arena, kept blocks included.
    assert_eq!(pool.trim(), 3);
    assert_eq!(pool.accounting(), Accounting::default());
    assert_eq!(iommu.live_mappings(), 0);
}

#[test]
fn memlock_too_low_fails_cleanly_in_both_modes() {
    for mode in MODES {
        let iommu = Arc::new(SimIommu::with_config(SimIommuConfig {
            memlock_limit: Some(64 << 10),
            ..SimIommuConfig::default()
        }));
        let pool = DmaPool::with_config(
            iommu.clone(),
            PoolConfig {
                pages: PagePolicy::BaseOnly,
                ..PoolConfig::new(mode)
            },
        )
        .unwrap();
        let len = match mode {
            LeaseMode::Strict => 128 << 10,
            LeaseMode::Pooled => 256, // needs a 2 MiB arena
        };
        let err = pool.lease(len, 64, Access::ReadWrite).unwrap_err();
        assert!(
            matches!(err, DmaError::MemlockTooLow { .. }),
            "{mode:?}: {err:?}"
        );
        assert!(err.to_string().contains("ulimit -l"), "{err}");
        assert_eq!(pool.accounting(), Accounting::default(), "{mode:?}");
        assert_eq!(
            pool.iova_stats().allocations,
            0,
            "{mode:?}: IOVA given back"
        );
    }
}

/// A simulated IOMMU that counts the maps asked of it.
struct CountingMaps {
    inner: SimIommu,
    maps: AtomicUsize,
}

impl DmaMapper for CountingMaps {
    fn name(&self) -> &'static str {
        "counting-maps"
    }
    fn iova_ranges(&self) -> Vec<IovaRange> {
        self.inner.iova_ranges()
    }
    fn check_pin_headroom(&self, len: usize) -> Result<(), DmaError> {
        self.inner.check_pin_headroom(len)
    }
    unsafe fn map(
        &self,
        vaddr: *mut u8,
        len: usize,
        iova: u64,
        access: Access,
    ) -> Result<(), DmaError> {
        self.maps.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's guarantee is passed on unchanged.
        unsafe { self.inner.map(vaddr, len, iova, access) }
    }
    fn unmap(&self, iova: u64, len: usize) -> Result<(), DmaError> {
        self.inner.unmap(iova, len)
    }
    fn live_mappings(&self) -> usize {
        self.inner.live_mappings()
    }
    fn has_mapping_in(&self, iova: u64, len: usize) -> bool {
        self.inner.has_mapping_in(iova, len)
    }
}

/// A lease past the memlock limit is refused before its memory is allocated and faulted in,
/// not by the map afterwards: a lease of 2^63 bytes, whose memory cannot even be allocated
/// (the memfd refuses that size), is refused for memlock rather than for the allocation,
/// and neither it nor any other lease or new arena past the limit reaches the mapper's map.
#[test]
fn a_memlock_refusal_comes_before_the_memory_is_allocated() {
    const LIMIT: u64 = 192 << 10;
    for mode in MODES {
        let mapper = Arc::new(CountingMaps {
            inner: SimIommu::with_config(SimIommuConfig {
                memlock_limit: Some(LIMIT),
                ..SimIommuConfig::default()
            }),
            maps: AtomicUsize::new(0),
        });
        let pool = DmaPool::with_config(
            mapper.clone(),
            PoolConfig {
                arena_size: 128 << 10,
                pages: PagePolicy::BaseOnly,
                ..PoolConfig::new(mode)
            },
        )
        .unwrap();
        // Within the limit (strict: 4 KiB pinned; pooled: one 128 KiB arena).
        let held = pool.lease(4096, 64, Access::ReadWrite).unwrap();
        assert_eq!(mapper.maps.load(Ordering::Relaxed), 1, "{mode:?}");
        let baseline = pool.accounting();
        let mut refused = vec![256 << 10, 1 << 63];
        if mode == LeaseMode::Pooled {
            // A second arena (another access) would pin 256 KiB.
            refused.push(256);
        }
        for len in refused {
            let err = pool.lease(len, 64, Access::Read).unwrap_err();
            assert!(
                matches!(err, DmaError::MemlockTooLow { limit: LIMIT, .. }),
                "{mode:?}, {len:#x} bytes: {err:?}"
            );
            assert_eq!(pool.accounting(), baseline, "{mode:?}");
            assert_eq!(pool.iova_stats().allocations, 1, "{mode:?}");
        }
        assert_eq!(
            mapper.maps.load(Ordering::Relaxed),
            1,
            "{mode:?}: refused before the map"
        );
        drop(held);
        pool.trim();
        assert_eq!(pool.accounting(), Accounting::default(), "{mode:?}");
    }
}

#[test]
fn iova_exhaustion_fails_cleanly() {
    // Room for exactly one 256 KiB arena.
    let iommu = Arc::new(SimIommu::with_config(SimIommuConfig {
        ranges: vec![IovaRange::new(0x4_0000, 0x7_ffff)],
        ..SimIommuConfig::default()
    }));
    let pool = DmaPool::with_config(
        iommu.clone(),
        PoolConfig {
            arena_size: 256 << 10,
            ..PoolConfig::new(LeaseMode::Pooled)
        },
    )
    .unwrap();
    let rw = pool.lease(64, 64, Access::ReadWrite).unwrap();
    let err = pool.lease(64, 64, Access::Read).unwrap_err();
    assert!(matches!(err, DmaError::IovaExhausted { .. }), "{err:?}");
    assert_eq!(pool.accounting().leases_out, 1);
    assert_eq!(iommu.live_mappings(), 1);
    drop(rw);
}

/// A mapper whose unmaps fail while `fail_unmap` is set.
struct FailingUnmap {
    inner: SimIommu,
    fail_unmap: AtomicBool,
}

impl DmaMapper for FailingUnmap {
    fn name(&self) -> &'static str {
        "failing-unmap"
    }
    fn iova_ranges(&self) -> Vec<IovaRange> {
        self.inner.iova_ranges()
    }
    fn min_page_size(&self) -> usize {
        self.inner.min_page_size()
    }
    unsafe fn map(
        &self,
        vaddr: *mut u8,
        len: usize,
        iova: u64,
        access: Access,
    ) -> Result<(), DmaError> {
        // SAFETY: the caller's guarantee is passed on unchanged.
        unsafe { self.inner.map(vaddr, len, iova, access) }
    }
    fn unmap(&self, iova: u64, len: usize) -> Result<(), DmaError> {
        if self.fail_unmap.load(Ordering::Relaxed) {
            return Err(DmaError::Unmap {
                mapper: "failing-unmap",
                iova,
                len,
                reason: "injected".into(),
            });
        }
        self.inner.unmap(iova, len)
    }
    fn live_mappings(&self) -> usize {
        self.inner.live_mappings()
    }
    fn has_mapping_in(&self, iova: u64, len: usize) -> bool {
        self.inner.has_mapping_in(iova, len)
    }
}

#[test]
fn an_unmap_failure_is_counted_not_a_panic_and_the_iova_is_not_reused() {
    let mapper = Arc::new(FailingUnmap {
        inner: SimIommu::new(),
        fail_unmap: AtomicBool::new(true),
    });
    let pool = DmaPool::new(mapper.clone(), LeaseMode::Strict).unwrap();
    let lease = pool.lease(4096, 4096, Access::ReadWrite).unwrap();
    let iova = lease.iova();
    drop(lease);
    let acc = pool.accounting();
    assert_eq!((acc.leases_out, acc.unmap_failures), (0, 1));
    assert_eq!(acc.live_mappings, 1, "the mapping is still there");
    // The device can still reach the memory, so it was kept: still readable, not freed.
    assert_eq!(mapper.inner.read_u8(iova).unwrap(), 0);
    mapper.fail_unmap.store(false, Ordering::Relaxed);
    let next = pool.lease(4096, 4096, Access::ReadWrite).unwrap();
    assert_ne!(
        next.iova(),
        iova,
        "the IOVA of a failed unmap is never reused"
    );
    assert_eq!(pool.iova_stats().allocations, 2);
}

/// An arena whose unmap fails is still mapped: `Accounting::arenas` keeps counting it (as
/// `live_mappings` does), and `trim` does not report it released.
#[test]
fn an_arena_whose_unmap_fails_is_still_counted_as_mapped() {
    let mapper = Arc::new(FailingUnmap {
        inner: SimIommu::new(),
        fail_unmap: AtomicBool::new(true),
    });
    let pool = DmaPool::new(mapper.clone(), LeaseMode::Pooled).unwrap();
    drop(pool.lease(64, 64, Access::ReadWrite).unwrap());
    assert_eq!(pool.trim(), 0, "nothing was released");
    let acc = pool.accounting();
    assert_eq!(
        (acc.arenas, acc.live_mappings, acc.unmap_failures),
        (1, 1, 1),
        "{acc:?}"
    );
    assert_eq!(pool.iova_stats().allocations, 1, "its IOVA is kept");
}

/// A mapper whose maps fail: after mapping (a map that fails halfway, which the
/// `DmaMapper::map` contract forbids) while `leave_mapping` is set, cleanly otherwise.
struct FailingMap {
    inner: SimIommu,
    leave_mapping: bool,
}

impl DmaMapper for FailingMap {
    fn name(&self) -> &'static str {
        "failing-map"
    }
    fn iova_ranges(&self) -> Vec<IovaRange> {
        self.inner.iova_ranges()
    }
    unsafe fn map(
        &self,
        vaddr: *mut u8,
        len: usize,
        iova: u64,
        access: Access,
    ) -> Result<(), DmaError> {
        if self.leave_mapping {
            // SAFETY: the caller's guarantee is passed on unchanged.
            unsafe { self.inner.map(vaddr, len, iova, access) }?;
        }
        Err(DmaError::Invalid("injected map failure".into()))
    }
    fn unmap(&self, iova: u64, len: usize) -> Result<(), DmaError> {
        self.inner.unmap(iova, len)
    }
    fn live_mappings(&self) -> usize {
        self.inner.live_mappings()
    }
    fn has_mapping_in(&self, iova: u64, len: usize) -> bool {
        self.inner.has_mapping_in(iova, len)
    }
}

/// A failed map that left its mapping behind must not free the memory the device can still
/// reach, nor hand its IOVA out again: both are kept and counted, as after a failed unmap.
/// A map that fails cleanly gives everything back.
#[test]
fn a_failed_map_that_left_a_mapping_keeps_its_memory_and_iova() {
    for mode in MODES {
        for leave_mapping in [false, true] {
            let mapper = Arc::new(FailingMap {
                inner: SimIommu::new(),
                leave_mapping,
            });
            let pool = DmaPool::new(mapper.clone(), mode).unwrap();
            let err = pool.lease(4096, 64, Access::ReadWrite).unwrap_err();
            assert!(matches!(err, DmaError::Invalid(_)), "{err:?}");
            let acc = pool.accounting();
            let ctx = format!("{mode:?}, leave_mapping {leave_mapping}: {acc:?}");
            assert_eq!((acc.leases_out, acc.arenas), (0, 0), "{ctx}");
            if leave_mapping {
                assert_eq!((acc.live_mappings, acc.unmap_failures), (1, 1), "{ctx}");
                assert_eq!(pool.iova_stats().allocations, 1, "{ctx}: IOVA kept");
            } else {
                assert_eq!(acc, Accounting::default(), "{ctx}");
                assert_eq!(pool.iova_stats().allocations, 0, "{ctx}: IOVA given back");
            }
        }
    }
}

#[test]
fn leases_move_between_threads_and_the_pool_is_shared() {
    for mode in MODES {
        let (iommu, pool) = pool(mode);
        let threads: Vec<_> = (0..4u8)
            .map(|t| {
                let pool = pool.clone();
                let iommu = iommu.clone();
                std::thread::spawn(move || {
                    let mut held = Vec::new();
                    for i in 0..200usize {
                        let l = pool.lease(64 + i % 300, 64, Access::ReadWrite).unwrap();
                        l.fill(0, l.len(), t).unwrap();
                        held.push(l);
                        if held.len() > 8 {
                            let l = held.remove(i % held.len());
                            // Another thread's lease never overwrote ours.
                            let mut buf = vec![0u8; l.len()];
                            iommu.read(l.iova(), &mut buf).unwrap();
                            assert!(buf.iter().all(|&b| b == t));
                        }
                    }
                    held // moved back to the spawning thread
                })
            })
            .collect();
        let held: Vec<DmaLease> = threads
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect();
        assert_eq!(pool.accounting().leases_out, held.len());
        drop(held);
        pool.trim();
        assert_eq!(pool.accounting(), Accounting::default(), "{mode:?}");
    }
}

#[test]
fn the_pool_rejects_a_bad_arena_size() {
    let iommu: Arc<dyn DmaMapper> = Arc::new(SimIommu::new());
    for arena_size in [0, 3 << 20, 2 << 30] {
        let r = DmaPool::with_config(
            iommu.clone(),
            PoolConfig {
                arena_size,
                ..PoolConfig::new(LeaseMode::Pooled)
            },
        );
        assert!(matches!(r, Err(DmaError::Invalid(_))), "{arena_size:#x}");
    }
    let r = DmaPool::with_config(
        iommu.clone(),
        PoolConfig {
            arena_size: 1024,
            ..PoolConfig::new(LeaseMode::Pooled)
        },
    );
    assert!(
        matches!(r, Err(DmaError::ArenaTooSmall { arena_size: 1024, min, .. }) if min >= 4096),
        "{r:?}"
    );
}

/// Huge pages only, and an arena smaller than a huge page: the memory would be a whole 2 MiB
/// page but the mapping only the arena, so the arena could never be unmapped. The pool refuses
/// the configuration up front and names the minimum.
#[test]
fn huge_pages_only_with_an_arena_below_a_huge_page_is_refused_at_pool_creation() {
    let iommu: Arc<dyn DmaMapper> = Arc::new(SimIommu::new());
    for arena_size in [4096, 64 << 10, 1 << 20] {
        let r = DmaPool::with_config(
            iommu.clone(),
            PoolConfig {
                arena_size,
                pages: PagePolicy::HugeOnly,
                ..PoolConfig::new(LeaseMode::Pooled)
            },
        );
        let err = r.unwrap_err();
        assert!(
            matches!(err, DmaError::ArenaTooSmall { arena_size: a, min, .. } if a == arena_size && min == 2 << 20),
            "{arena_size:#x}: {err:?}"
        );
        assert!(err.to_string().contains("HugeOnly"), "{err}");
    }
    // 2 MiB is fine (the pool is made; whether huge pages exist shows only when leasing).
    DmaPool::with_config(
        iommu,
        PoolConfig {
            arena_size: 2 << 20,
            pages: PagePolicy::HugeOnly,
            ..PoolConfig::new(LeaseMode::Pooled)
        },
    )
    .unwrap();
}

/// An IOMMU whose smallest page (64 KiB) is larger than the CPU's: every mapping's address,
/// IOVA and length are multiples of it, so a 100-byte strict lease and a pooled pool map, are
/// usable from both sides, and give everything back; the strict guard is one IOMMU page.
#[test]
fn leases_map_and_release_on_an_iommu_with_64k_pages() {
    const IOMMU_PAGE: u64 = 0x10000;
    let config = SimIommuConfig {
        page_size: IOMMU_PAGE,
        ..SimIommuConfig::default()
    };
    for mode in MODES {
        let iommu = Arc::new(SimIommu::with_config(config.clone()));
        assert_eq!(iommu.min_page_size(), IOMMU_PAGE as usize);
        // Base pages, so that the memory's page is the CPU's whatever huge pages the machine
        // has, and the IOMMU page is the larger.
        let pool = DmaPool::with_config(
            iommu.clone(),
            PoolConfig {
                pages: PagePolicy::BaseOnly,
                ..PoolConfig::new(mode)
            },
        )
        .unwrap();
        let baseline = pool.accounting();
        // Small (an arena block in pooled mode), and larger than a 2 MiB arena (an own mapping
        // in both modes).
        for len in [100, (2 << 20) + 100] {
            let lease = pool.lease(len, 8, Access::ReadWrite).unwrap();
            // Pooled, the lease starts a page; strict, it ends one (its length rounded up to
            // its alignment), with host and device addresses in step.
            let at = match mode {
                LeaseMode::Pooled => 0,
                LeaseMode::Strict => len.next_multiple_of(8) as u64,
            };
            assert_eq!(
                (lease.as_ptr().addr() as u64 + at) % IOMMU_PAGE,
                0,
                "{mode:?} {len}"
            );
            assert_eq!((lease.iova() + at) % IOMMU_PAGE, 0, "{mode:?} {len}");
            lease.write(len - 4, b"abcd").unwrap();
            let mut seen = [0u8; 4];
            iommu
                .read(lease.iova() + len as u64 - 4, &mut seen)
                .unwrap();
            assert_eq!(&seen, b"abcd", "{mode:?} {len}");
            iommu.write(lease.iova(), b"xy").unwrap();
            assert_eq!(lease.read_u16_be(0).unwrap(), u16::from_be_bytes(*b"xy"));
            let acc = pool.accounting();
            assert_eq!(
                (acc.leases_out, acc.live_mappings),
                (1, 1),
                "{mode:?} {len}"
            );
            if mode == LeaseMode::Strict {
                // The mapping is one IOMMU page-rounded run that the lease ends (its length
                // rounded up to its alignment), then an unmapped guard page.
                let end = len.next_multiple_of(8) as u64;
                assert!(iommu.read_u8(lease.iova() + end - 1).is_ok());
                assert!(iommu.read_u8(lease.iova() + end).is_err());
                let start = lease.iova() + end - (len as u64).next_multiple_of(IOMMU_PAGE);
                assert!(iommu.read_u8(start).is_ok(), "the whole run is mapped");
            }
            drop(lease);
            pool.trim();
            // Faults aside (the guard probe's, counted below), all is as it was.
            let acc = pool.accounting();
            assert_eq!(Accounting { faults: 0, ..acc }, baseline, "{mode:?} {len}");
            assert_eq!(iommu.live_mappings(), 0, "{mode:?} {len}");
            assert_eq!(pool.iova_stats().allocations, 0, "{mode:?} {len}");
        }
        assert_eq!(
            iommu.fault_count(),
            if mode == LeaseMode::Strict { 2 } else { 0 }
        );
    }
}

/// An arena smaller than the IOMMU's smallest page could never be mapped: refused at pool
/// creation, naming the minimum.
#[test]
fn an_arena_below_the_iommu_page_is_refused_at_pool_creation() {
    let iommu: Arc<dyn DmaMapper> = Arc::new(SimIommu::with_config(SimIommuConfig {
        page_size: 0x10000,
        ..SimIommuConfig::default()
    }));
    for arena_size in [4096, 32 << 10] {
        let err = DmaPool::with_config(
            iommu.clone(),
            PoolConfig {
                arena_size,
                ..PoolConfig::new(LeaseMode::Pooled)
            },
        )
        .unwrap_err();
        assert!(
            matches!(err, DmaError::ArenaTooSmall { arena_size: a, min: 0x10000, .. } if a == arena_size),
            "{arena_size:#x}: {err:?}"
        );
        assert!(err.to_string().contains("IOMMU"), "{err}");
    }
    let pool = DmaPool::with_config(
        iommu.clone(),
        PoolConfig {
            arena_size: 0x10000,
            ..PoolConfig::new(LeaseMode::Pooled)
        },
    )
    .unwrap();
    drop(pool.lease(64, 64, Access::Read).unwrap());
    assert_eq!(pool.trim(), 1);
    assert_eq!(iommu.live_mappings(), 0);
}

#[test]
fn thread_safety_markers() {
    fn send<T: Send>() {}
    fn send_sync<T: Send + Sync>() {}
    send::<DmaLease>();
    send_sync::<DmaPool>();
    send_sync::<SimIommu>();
    send_sync::<dma::DmaMemory>();
}

/// A quarantined pool (the device's DMA could not be stopped) gives nothing back: a dropped
/// lease leaves `leases_out` for `quarantined`, keeps its mapping, its memory and its IOVA
/// (the device can still write it, and no later lease gets it), and neither a trim nor the
/// pool's drop unmaps it. Leases dropped before the quarantine went back as usual.
#[test]
fn a_quarantined_pool_keeps_every_dropped_lease_mapped_and_out_of_use() {
    for mode in MODES {
        let (iommu, pool) = pool(mode);
        drop(pool.lease(64, 64, Access::ReadWrite).unwrap());
        let leases: Vec<DmaLease> = [
            (256, 64, Access::Read),
            (296, 64, Access::Write),
            (64 << 10, 4096, Access::ReadWrite),
        ]
        .into_iter()
        .map(|(len, align, access)| pool.lease(len, align, access).unwrap())
        .collect();
        let held: Vec<(u64, usize, Access)> = leases
            .iter()
            .map(|l| (l.iova(), l.len(), l.access()))
            .collect();
        let mappings = iommu.live_mappings();
        assert!(!pool.is_quarantined());
        pool.quarantine();
        assert!(pool.is_quarantined());
        drop(leases);
        let acc = pool.accounting();
        assert_eq!(
            (acc.leases_out, acc.lease_bytes),
            (0, 0),
            "{mode:?}: {acc:?}"
        );
        assert_eq!(
            (acc.quarantined, acc.quarantined_bytes),
            (3, 256 + 296 + (64 << 10)),
            "{mode:?}: {acc:?}"
        );
        assert_eq!(pool.trim(), 0, "{mode:?}: no arena holding one is trimmed");
        assert_eq!(
            iommu.live_mappings(),
            mappings,
            "{mode:?}: nothing unmapped"
        );
        // The device may still reach every quarantined buffer, without a fault.
        let reach = |iova: u64, access: Access| {
            if access == Access::Read {
                iommu.read_u8(iova).map(drop)
            } else {
                iommu.write(iova, &[0xab])
            }
        };
        for &(iova, len, access) in &held {
            reach(iova + len as u64 - 1, access).unwrap();
        }
        // New leases never overlap a quarantined one.
        let later: Vec<DmaLease> = (0..32)
            .map(|i| {
                let access = [Access::Read, Access::Write, Access::ReadWrite][i % 3];
                pool.lease(256, 64, access).unwrap()
            })
            .collect();
        for l in &later {
            for &(iova, len, _) in &held {
                assert!(
                    l.iova() + l.len() as u64 <= iova || iova + len as u64 <= l.iova(),
                    "{mode:?}: {l:?} overlaps quarantined {iova:#x}+{len}"
                );
            }
        }
        drop(later);
        assert_eq!(pool.accounting().quarantined, 35, "{mode:?}");
        let before = iommu.live_mappings();
        drop(pool);
        assert_eq!(
            iommu.live_mappings(),
            before,
            "{mode:?}: the pool's drop unmapped quarantined memory"
        );
        for &(iova, _, access) in &held {
            reach(iova, access).unwrap();
        }
        assert_eq!(iommu.fault_count(), 0, "{mode:?}");
    }
}

/// Under a memlock limit a 256 KiB base-page arena fits but a 2 MiB huge page does not, the
/// default pool (huge pages when it can have them) leases from a base-page arena, as a
/// base-only pool does, instead of failing for want of room for the huge page.
#[test]
fn a_default_pool_under_a_tight_memlock_limit_falls_back_to_a_small_base_page_arena() {
    let limited = || {
        Arc::new(SimIommu::with_config(SimIommuConfig {
            memlock_limit: Some(1 << 20),
            ..SimIommuConfig::default()
        }))
    };
    let base = base_only_pool(limited());
    drop(
        base.lease(64, 64, Access::ReadWrite)
            .expect("base only: a 256 KiB arena fits"),
    );
    let iommu = limited();
    let auto = DmaPool::with_config(iommu.clone(), PoolConfig::new(LeaseMode::Pooled)).unwrap();
    let l = auto
        .lease(64, 64, Access::ReadWrite)
        .expect("the default pool: a 256 KiB arena fits");
    assert_eq!(auto.iova_stats().allocated_bytes, FIRST_BASE_ARENA as u64);
    drop(l);
    assert_eq!(auto.trim(), 1);
    assert_eq!(auto.accounting(), Accounting::default());
    assert_eq!(iommu.live_mappings(), 0);
}

/// Base-page arenas of different sizes (they grow with the pool): leases of every size from
/// 64 B to 2 MiB and alignments up to their size, freed in a scrambled order, each written at
/// its last byte through the IOMMU and read back; no two overlap, and everything comes back,
/// each arena released with the size it was mapped with.
#[test]
fn arenas_of_mixed_sizes_hold_leases_of_every_size_and_give_everything_back() {
    let iommu = Arc::new(SimIommu::new());
    let pool = base_only_pool(iommu.clone());
    let mut leases = Vec::new();
    let mut seed = 0x9e37_79b9u64;
    for round in 0..300u32 {
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        let order = (seed >> 33) % 16;
        let len = 64usize << order;
        let align = 64usize << ((seed >> 40) % (order + 1));
        let l = pool.lease(len, align, Access::ReadWrite).unwrap();
        assert_eq!(l.iova() % align as u64, 0, "IOVA aligned");
        let v = round ^ 0xa5a5;
        iommu.write_u32_be(l.iova() + len as u64 - 4, v).unwrap();
        assert_eq!(l.read_u32_be(len - 4).unwrap(), v);
        leases.push((l, v, len));
        if seed % 3 == 0 {
            let i = (seed >> 20) as usize % leases.len();
            leases.swap_remove(i);
        }
    }
    assert!(pool.accounting().arenas > 2, "several arenas");
    let mut spans: Vec<(u64, u64)> = leases
        .iter()
        .map(|(l, _, n)| (l.iova(), *n as u64))
        .collect();
    spans.sort_unstable();
    for w in spans.windows(2) {
        assert!(w[0].0 + w[0].1 <= w[1].0, "overlap: {w:?}");
    }
    for (l, v, n) in &leases {
        assert_eq!(l.read_u32_be(n - 4).unwrap(), *v);
    }
    drop(leases);
    let arenas = pool.accounting().arenas;
    assert_eq!(pool.trim(), arenas);
    assert_eq!(pool.accounting(), Accounting::default());
    assert_eq!(iommu.live_mappings(), 0);
    assert_eq!(pool.iova_stats().allocations, 0);
}

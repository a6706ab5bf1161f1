//! The simulated IOMMU: device accesses inside, across and outside mappings, permissions,
//! access after unmap, the bus-master switch, accesses under one hold, and the mapper side's
//! checks.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use dma::{
    Access, AccessKind, DmaError, DmaMapper, DmaMemory, Fault, FaultReason, PagePolicy, SimIommu,
    SimIommuConfig, VTD_39BIT_RANGES, X86_MSI_WINDOW,
};

const PAGE: usize = 4096;

/// Three pages of memory: pages 0 and 1 mapped read-write at adjacent IOVAs 0x10000 and
/// 0x11000 (two mappings), page 2 mapped device-read-only at 0x20000.
struct Setup {
    iommu: SimIommu,
    mem: DmaMemory,
}

fn setup() -> Setup {
    let iommu = SimIommu::new();
    let mem = DmaMemory::with_policy(3 * PAGE, PagePolicy::BaseOnly).unwrap();
    let p = mem.as_ptr();
    // SAFETY: each page stays mapped in `mem` until the test ends; the IOMMU is dropped first
    // (field order of Setup: iommu before mem).
    unsafe {
        iommu.map(p, PAGE, 0x10000, Access::ReadWrite).unwrap();
        iommu
            .map(p.add(PAGE), PAGE, 0x11000, Access::ReadWrite)
            .unwrap();
        iommu
            .map(p.add(2 * PAGE), PAGE, 0x20000, Access::Read)
            .unwrap();
    }
    Setup { iommu, mem }
}

fn host_byte(mem: &DmaMemory, off: usize) -> u8 {
    assert!(off < mem.len());
    // SAFETY: inside the memory (asserted); volatile read through the raw pointer.
    unsafe { mem.as_ptr().add(off).read_volatile() }
}

#[test]
fn access_inside_a_mapping_reaches_host_memory_without_faults() {
    let s = setup();
    s.iommu.write(0x10010, &[1, 2, 3, 4]).unwrap();
    assert_eq!(
        (0x10..0x14)
            .map(|o| host_byte(&s.mem, o))
            .collect::<Vec<_>>(),
        [1, 2, 3, 4]
    );
    // The second mapping is a different host page.
    s.iommu.write(0x11000, &[9]).unwrap();
    assert_eq!(host_byte(&s.mem, PAGE), 9);
    let mut buf = [0u8; 4];
    s.iommu.read(0x10010, &mut buf).unwrap();
    assert_eq!(buf, [1, 2, 3, 4]);
    // The last byte of a mapping is inside it.
    s.iommu.write_u8(0x10fff, 0x5a).unwrap();
    assert_eq!(host_byte(&s.mem, PAGE - 1), 0x5a);
    // Device reads of a read-only mapping are fine.
    s.iommu.read(0x20000, &mut buf).unwrap();
    assert_eq!(s.iommu.fault_count(), 0);
    assert!(s.iommu.faults().is_empty());
}

#[test]
fn big_endian_helpers_store_device_byte_order() {
    let s = setup();
    s.iommu.write_u32_be(0x10100, 0x1234_5678).unwrap();
    s.iommu
        .write_u64_be(0x10108, 0x0102_0304_0506_0708)
        .unwrap();
    s.iommu.write_u16_be(0x10111, 0xa1b2).unwrap(); // unaligned
    let bytes: Vec<u8> = (0x100..0x113).map(|o| host_byte(&s.mem, o)).collect();
    assert_eq!(
        bytes,
        [
            0x12, 0x34, 0x56, 0x78, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 0, 0xa1, 0xb2
        ]
    );
    assert_eq!(s.iommu.read_u32_be(0x10100).unwrap(), 0x1234_5678);
    assert_eq!(s.iommu.read_u64_be(0x10108).unwrap(), 0x0102_0304_0506_0708);
    assert_eq!(s.iommu.read_u16_be(0x10111).unwrap(), 0xa1b2);
    assert_eq!(s.iommu.read_u8(0x10101).unwrap(), 0x34);
    s.iommu.fill(0x10100, 8, 0xee).unwrap();
    assert_eq!(s.iommu.read_u64_be(0x10100).unwrap(), 0xeeee_eeee_eeee_eeee);
}

#[test]
fn an_owned_entry_lands_whole_and_is_checked_as_one_access() {
    let s = setup();
    let entry: Vec<u8> = (1..=64).collect();
    s.iommu.write_owned(0x10040, &entry).unwrap();
    assert_eq!(
        (0x40..0x80)
            .map(|o| host_byte(&s.mem, o))
            .collect::<Vec<_>>(),
        entry
    );
    // Across the end of the first mapping: refused whole, nothing written, one fault.
    let f = s.iommu.write_owned(0x10fe0, &entry).unwrap_err();
    assert_eq!(f.reason, FaultReason::Straddles);
    assert_eq!(f.len, 64);
    assert!((PAGE - 0x20..PAGE).all(|o| host_byte(&s.mem, o) == 0));
    // A read-only mapping refuses it.
    let f = s.iommu.write_owned(0x20000, &entry).unwrap_err();
    assert_eq!(f.reason, FaultReason::Permission);
    assert_eq!(s.iommu.fault_count(), 2);
    assert_eq!(
        s.iommu.write_owned(0x99000, &[]),
        Ok(()),
        "nothing to write"
    );
}

#[test]
fn straddling_two_mappings_is_a_straddle_fault() {
    let s = setup();
    let mut buf = [0u8; 32];
    let f = s.iommu.read(0x10ff0, &mut buf).unwrap_err();
    let want = Fault {
        iova: 0x10ff0,
        len: 32,
        kind: AccessKind::Read,
        reason: FaultReason::Straddles,
    };
    assert_eq!(f, want);
    assert_eq!(buf, [0u8; 32], "nothing copied");
    // A u64 across the end of the read-only mapping (into nothing): also a straddle.
    let f2 = s.iommu.read_u64_be(0x20ffc).unwrap_err();
    assert_eq!(f2.reason, FaultReason::Straddles);
    assert_eq!(s.iommu.faults(), vec![want, f2]);
    assert_eq!(s.iommu.fault_count(), 2);
    assert_eq!(DmaMapper::fault_count(&s.iommu), 2);
}

#[test]
fn access_outside_any_mapping_is_not_mapped() {
    let s = setup();
    let f = s.iommu.write(0x12000, &[0; 8]).unwrap_err();
    assert_eq!(
        f,
        Fault {
            iova: 0x12000,
            len: 8,
            kind: AccessKind::Write,
            reason: FaultReason::NotMapped
        }
    );
    // Below every mapping, and at the top of the address space.
    assert_eq!(
        s.iommu.read_u32_be(0x0).unwrap_err().reason,
        FaultReason::NotMapped
    );
    assert_eq!(
        s.iommu.read_u64_be(u64::MAX - 3).unwrap_err().reason,
        FaultReason::NotMapped
    );
    assert_eq!(s.iommu.fault_count(), 3);
}

#[test]
fn write_to_a_read_only_mapping_is_a_permission_fault_and_writes_nothing() {
    let s = setup();
    let f = s.iommu.write_u32_be(0x20010, 0xdead_beef).unwrap_err();
    assert_eq!(
        f,
        Fault {
            iova: 0x20010,
            len: 4,
            kind: AccessKind::Write,
            reason: FaultReason::Permission
        }
    );
    assert_eq!(host_byte(&s.mem, 2 * PAGE + 0x10), 0);
    assert_eq!(s.iommu.faults(), vec![f]);
}

#[test]
fn read_of_a_write_only_mapping_is_a_permission_fault() {
    let iommu = SimIommu::new();
    let mem = DmaMemory::with_policy(PAGE, PagePolicy::BaseOnly).unwrap();
    // SAFETY: `mem` outlives the mapping (unmapped below before it drops).
    unsafe { iommu.map(mem.as_ptr(), PAGE, 0x4000, Access::Write) }.unwrap();
    iommu.write_u8(0x4000, 1).unwrap();
    let f = iommu.read_u8(0x4000).unwrap_err();
    assert_eq!(
        (f.kind, f.reason),
        (AccessKind::Read, FaultReason::Permission)
    );
    iommu.unmap(0x4000, PAGE).unwrap();
}

#[test]
fn access_after_unmap_is_not_mapped() {
    let s = setup();
    s.iommu.write_u8(0x10000, 7).unwrap();
    s.iommu.unmap(0x10000, PAGE).unwrap();
    assert_eq!(s.iommu.live_mappings(), 2);
    let f = s.iommu.read_u8(0x10000).unwrap_err();
    assert_eq!(
        f,
        Fault {
            iova: 0x10000,
            len: 1,
            kind: AccessKind::Read,
            reason: FaultReason::NotMapped
        }
    );
    // The neighbour mapping still works.
    s.iommu.write_u8(0x11000, 1).unwrap();
    assert_eq!(s.iommu.fault_count(), 1);
}

#[test]
fn a_translation_always_uses_the_mapping_live_now_whatever_it_used_before() {
    // The IOMMU remembers where the last translation in an IOVA frame was found. Unmapping
    // and remapping around it (here all in one frame) must never let an access reach a
    // mapping that is gone, the wrong host page, or the old permission.
    let s = setup();
    s.iommu.write_u8(0x10000, 0xa0).unwrap();
    s.iommu.write_u8(0x11000, 0x11).unwrap();
    // Unmapping the lower neighbour moves 0x11000's mapping down in the table.
    s.iommu.unmap(0x10000, PAGE).unwrap();
    assert_eq!(s.iommu.read_u8(0x11000).unwrap(), 0x11);
    s.iommu.write_u8(0x11001, 0x12).unwrap();
    assert_eq!(host_byte(&s.mem, PAGE + 1), 0x12);
    // Unmapped: not mapped, though it was just translated.
    s.iommu.unmap(0x11000, PAGE).unwrap();
    assert_eq!(
        s.iommu.read_u8(0x11000).unwrap_err().reason,
        FaultReason::NotMapped
    );
    // Remapped at the same IOVA onto another host page, device-read-only: the new page and
    // the new permission apply.
    // SAFETY: page 0 of `mem` outlives the mapping (the IOMMU is dropped first).
    unsafe { s.iommu.map(s.mem.as_ptr(), PAGE, 0x11000, Access::Read) }.unwrap();
    assert_eq!(s.iommu.read_u8(0x11000).unwrap(), 0xa0);
    assert_eq!(
        s.iommu.write_u8(0x11000, 1).unwrap_err().reason,
        FaultReason::Permission
    );
    assert_eq!(host_byte(&s.mem, PAGE), 0x11, "the old page is not written");
    assert_eq!(host_byte(&s.mem, 0), 0xa0, "nor the new one");
    assert_eq!(s.iommu.fault_count(), 2);
}

#[test]
fn take_faults_empties_the_log_but_not_the_count() {
    let s = setup();
    let _ = s.iommu.read_u8(0x1);
    let _ = s.iommu.read_u8(0x2);
    assert_eq!(s.iommu.take_faults().len(), 2);
    assert!(s.iommu.faults().is_empty());
    assert_eq!(s.iommu.fault_count(), 2);
}

#[test]
fn bus_master_off_refuses_everything_and_is_counted_apart() {
    let s = setup();
    s.iommu.set_bus_master(false);
    assert!(!s.iommu.bus_master());
    let f = s.iommu.write_u8(0x10000, 1).unwrap_err();
    assert_eq!(f.reason, FaultReason::BusMasterOff);
    assert_eq!(
        s.iommu.read_u8(0x99_0000).unwrap_err().reason,
        FaultReason::BusMasterOff
    );
    assert_eq!(host_byte(&s.mem, 0), 0, "the write did not happen");
    assert_eq!(s.iommu.blocked_count(), 2);
    assert_eq!(s.iommu.fault_count(), 0, "not IOMMU faults");
    assert!(s.iommu.faults().is_empty());
    s.iommu.set_bus_master(true);
    s.iommu.write_u8(0x10000, 1).unwrap();
    assert_eq!(host_byte(&s.mem, 0), 1);
}

#[test]
fn zero_length_accesses_touch_nothing_and_never_fault() {
    let s = setup();
    s.iommu.read(0x0, &mut []).unwrap();
    s.iommu.write(0x12000, &[]).unwrap();
    s.iommu.fill(0x12000, 0, 1).unwrap();
    assert_eq!(s.iommu.fault_count(), 0);
}

fn map_err_kind(r: Result<(), DmaError>) -> std::io::ErrorKind {
    match r {
        Err(DmaError::Map { source, .. }) => source.kind(),
        other => panic!("expected a map error, got {other:?}"),
    }
}

#[test]
fn default_ranges_are_the_vtd_ranges_with_the_msi_hole() {
    let iommu = SimIommu::new();
    assert_eq!(iommu.iova_ranges(), VTD_39BIT_RANGES.to_vec());
    // From reference vfio-userspace.md §1.5: [0x0, 0xfedfffff] and [0xfef00000, 0x7fffffffff].
    assert_eq!(VTD_39BIT_RANGES[0].end, 0xfedf_ffff);
    assert_eq!(VTD_39BIT_RANGES[1].start, 0xfef0_0000);
    assert_eq!(VTD_39BIT_RANGES[1].end, 0x7f_ffff_ffff);
    assert!(
        !iommu
            .iova_ranges()
            .iter()
            .any(|r| r.contains(X86_MSI_WINDOW.start, 1))
    );
}

#[test]
fn map_rejects_bad_requests_like_type1() {
    use std::io::ErrorKind;
    let iommu = SimIommu::new();
    let mem = DmaMemory::with_policy(4 * PAGE, PagePolicy::BaseOnly).unwrap();
    let p = mem.as_ptr();
    // SAFETY: (all maps below) `mem` lives until the end of the test, after the last unmap.
    unsafe {
        // Inside the MSI window, and above the 39-bit limit.
        assert_eq!(
            map_err_kind(iommu.map(p, PAGE, 0xfee0_0000, Access::Read)),
            ErrorKind::InvalidInput
        );
        assert_eq!(
            map_err_kind(iommu.map(p, PAGE, 0x80_0000_0000, Access::Read)),
            ErrorKind::InvalidInput
        );
        // Unaligned IOVA, length, address; zero length.
        assert_eq!(
            map_err_kind(iommu.map(p, PAGE, 0x1_0800, Access::Read)),
            ErrorKind::InvalidInput
        );
        assert_eq!(
            map_err_kind(iommu.map(p, 100, 0x1_0000, Access::Read)),
            ErrorKind::InvalidInput
        );
        assert_eq!(
            map_err_kind(iommu.map(p.add(8), PAGE, 0x1_0000, Access::Read)),
            ErrorKind::InvalidInput
        );
        assert_eq!(
            map_err_kind(iommu.map(p, 0, 0x1_0000, Access::Read)),
            ErrorKind::InvalidInput
        );
        // Overlap with a live mapping, from below and from inside.
        iommu.map(p, 2 * PAGE, 0x1_0000, Access::Read).unwrap();
        assert_eq!(
            map_err_kind(iommu.map(p.add(2 * PAGE), 2 * PAGE, 0xf000, Access::Read)),
            ErrorKind::AlreadyExists
        );
        assert_eq!(
            map_err_kind(iommu.map(p.add(2 * PAGE), PAGE, 0x1_1000, Access::Read)),
            ErrorKind::AlreadyExists
        );
        // Adjacent is fine.
        iommu
            .map(p.add(2 * PAGE), PAGE, 0x1_2000, Access::Read)
            .unwrap();
    }
    assert_eq!(iommu.live_mappings(), 2);
    // Unmap needs the exact IOVA and length.
    assert!(matches!(
        iommu.unmap(0x1_0000, PAGE),
        Err(DmaError::Unmap { .. })
    ));
    assert!(matches!(
        iommu.unmap(0x1_1000, PAGE),
        Err(DmaError::Unmap { .. })
    ));
    iommu.unmap(0x1_0000, 2 * PAGE).unwrap();
    iommu.unmap(0x1_2000, PAGE).unwrap();
    assert_eq!(iommu.live_mappings(), 0);
}

#[test]
fn entry_limit_and_simulated_memlock_limit_are_enforced() {
    let iommu = SimIommu::with_config(SimIommuConfig {
        max_mappings: 2,
        memlock_limit: Some(3 * PAGE as u64),
        ..SimIommuConfig::default()
    });
    let mem = DmaMemory::with_policy(4 * PAGE, PagePolicy::BaseOnly).unwrap();
    let p = mem.as_ptr();
    // SAFETY: `mem` outlives every mapping (all unmapped at the end of the test).
    unsafe {
        iommu.map(p, 2 * PAGE, 0x1_0000, Access::Read).unwrap();
        let err = iommu
            .map(p.add(2 * PAGE), 2 * PAGE, 0x2_0000, Access::Read)
            .unwrap_err();
        assert!(
            matches!(
                err,
                DmaError::MemlockTooLow {
                    needed: 0x4000,
                    limit: 0x3000,
                    ..
                }
            ),
            "{err:?}"
        );
        iommu
            .map(p.add(2 * PAGE), PAGE, 0x2_0000, Access::Read)
            .unwrap();
        assert_eq!(
            map_err_kind(iommu.map(p.add(3 * PAGE), PAGE, 0x3_0000, Access::Read)),
            std::io::ErrorKind::StorageFull
        );
    }
    iommu.unmap(0x1_0000, 2 * PAGE).unwrap();
    iommu.unmap(0x2_0000, PAGE).unwrap();
}

#[test]
fn map_and_unmap_elsewhere_never_disturb_a_device_using_a_live_mapping() {
    // A device thread hammers mapping A while the driver maps and unmaps B: A never faults.
    let iommu = Arc::new(SimIommu::new());
    let mem = DmaMemory::with_policy(2 * PAGE, PagePolicy::BaseOnly).unwrap();
    let p = mem.as_ptr();
    // SAFETY: `mem` outlives both mappings (unmapped before the end of the test).
    unsafe { iommu.map(p, PAGE, 0x1_0000, Access::ReadWrite) }.unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let progress = Arc::new(AtomicU64::new(0));
    let device = {
        let (iommu, stop, progress) =
            (Arc::clone(&iommu), Arc::clone(&stop), Arc::clone(&progress));
        std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                iommu.write_u64_be(0x1_0008, n).unwrap();
                assert_eq!(iommu.read_u64_be(0x1_0008).unwrap(), n);
                n += 1;
                progress.store(n, Ordering::Relaxed);
            }
            n
        })
    };
    // On a loaded machine the device thread may start late: make sure the two really overlap.
    while progress.load(Ordering::Relaxed) == 0 {
        std::thread::yield_now();
    }
    let mut rounds = 0;
    while rounds < 2000 || progress.load(Ordering::Relaxed) < 1000 {
        // SAFETY: as above.
        unsafe { iommu.map(p.wrapping_add(PAGE), PAGE, 0x2_0000, Access::Read) }.unwrap();
        iommu.unmap(0x2_0000, PAGE).unwrap();
        rounds += 1;
    }
    stop.store(true, Ordering::Relaxed);
    let n = device.join().unwrap();
    assert!(n >= 1000);
    assert_eq!(iommu.fault_count(), 0);
    iommu.unmap(0x1_0000, PAGE).unwrap();
}

#[test]
fn a_hold_checks_and_records_every_access_as_the_iommu_does() {
    let s = setup();
    s.iommu.write(0x10010, &[1, 2, 3, 4]).unwrap();
    {
        let h = s.iommu.hold();
        let mut buf = [0u8; 4];
        h.read(0x10010, &mut buf).unwrap();
        assert_eq!(buf, [1, 2, 3, 4]);
        assert_eq!(h.read_u32_be(0x10010).unwrap(), 0x0102_0304);
        h.write(0x11000, &[9, 8]).unwrap();
        // Each refused access is its own fault, with the reason a lone access gets.
        let straddle = h.read(0x10ffe, &mut buf).unwrap_err();
        let permission = h.write(0x20000, &[1]).unwrap_err();
        let unmapped = h.read_u32_be(0x30000).unwrap_err();
        assert_eq!(
            [straddle.reason, permission.reason, unmapped.reason],
            [
                FaultReason::Straddles,
                FaultReason::Permission,
                FaultReason::NotMapped
            ]
        );
        assert_eq!(
            permission,
            Fault {
                iova: 0x20000,
                len: 1,
                kind: AccessKind::Write,
                reason: FaultReason::Permission
            }
        );
        // Zero-length accesses touch nothing, as the IOMMU's own.
        h.read(0x0, &mut []).unwrap();
        h.write(0x0, &[]).unwrap();
    }
    assert_eq!(
        (host_byte(&s.mem, PAGE), host_byte(&s.mem, PAGE + 1)),
        (9, 8)
    );
    assert_eq!(
        host_byte(&s.mem, 2 * PAGE),
        0,
        "the refused write did not happen"
    );
    assert_eq!(s.iommu.fault_count(), 3);
    assert_eq!(s.iommu.faults().len(), 3);
    // Bus mastering off: refused and counted apart, through a hold too.
    s.iommu.set_bus_master(false);
    let h = s.iommu.hold();
    assert_eq!(
        h.write(0x10000, &[1]).unwrap_err().reason,
        FaultReason::BusMasterOff
    );
    drop(h);
    assert_eq!(s.iommu.blocked_count(), 1);
    assert_eq!(s.iommu.fault_count(), 3);
}

#[test]
fn an_unmap_waits_for_a_hold_to_end() {
    let iommu = Arc::new(SimIommu::new());
    let mem = DmaMemory::with_policy(PAGE, PagePolicy::BaseOnly).unwrap();
    // SAFETY: `mem` outlives the mapping (unmapped below, before the end of the test).
    unsafe { iommu.map(mem.as_ptr(), PAGE, 0x1_0000, Access::ReadWrite) }.unwrap();
    let h = iommu.hold();
    let unmapped = Arc::new(AtomicBool::new(false));
    let driver = {
        let (iommu, unmapped) = (Arc::clone(&iommu), Arc::clone(&unmapped));
        std::thread::spawn(move || {
            iommu.unmap(0x1_0000, PAGE).unwrap();
            unmapped.store(true, Ordering::SeqCst);
        })
    };
    // However long the driver thread has had, its unmap has not returned, and the mapping
    // still serves the hold's accesses.
    std::thread::sleep(std::time::Duration::from_millis(50));
    assert!(!unmapped.load(Ordering::SeqCst));
    h.write(0x1_0000, &[5]).unwrap();
    assert_eq!(h.read_u32_be(0x1_0000).unwrap() >> 24, 5);
    drop(h);
    driver.join().unwrap();
    assert!(unmapped.load(Ordering::SeqCst));
    assert_eq!(
        iommu.read_u8(0x1_0000).unwrap_err().reason,
        FaultReason::NotMapped
    );
}

#[test]
fn fault_display_names_the_access_and_the_reason() {
    let f = Fault {
        iova: 0x1234,
        len: 8,
        kind: AccessKind::Write,
        reason: FaultReason::Permission,
    };
    let msg = f.to_string();
    assert!(msg.contains("write of 8 bytes at IOVA 0x1234"), "{msg}");
    assert!(msg.contains("does not allow"), "{msg}");
}

/// `has_mapping_in` answers for any overlap with a live mapping, at both edges, and not for
/// the gaps between mappings or ranges that merely touch them.
#[test]
fn has_mapping_in_sees_any_overlap_and_nothing_else() {
    let s = setup();
    let p = PAGE as u64;
    // Mappings: 0x10000..0x12000 (two) and 0x20000..0x21000.
    for (iova, len, mapped) in [
        (0x10000, PAGE, true),
        (0x11fff, 1, true),
        (0xf000, PAGE, false),
        (0xf000, PAGE + 1, true),
        (0x12000, 0xe000, false),
        (0x12000, 0xe001, true),
        (0x20fff, 1, true),
        (0x21000, PAGE, false),
        (0x0, 0x40000, true),
        (0x10000, 0, false),
        (u64::MAX - p + 1, PAGE, false),
    ] {
        assert_eq!(
            s.iommu.has_mapping_in(iova, len),
            mapped,
            "{iova:#x} +{len:#x}"
        );
    }
    s.iommu.unmap(0x20000, PAGE).unwrap();
    assert!(!s.iommu.has_mapping_in(0x20000, PAGE));
}

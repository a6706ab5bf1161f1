//! Health and removal on the simulated ConnectX: a fatal health syndrome, a stuck health
//! counter, `fw_ver` reading all-ones, surprise removal and the VFIO device request are each
//! detected within the poll budget; the device is quiesced and every outstanding work request
//! completes exactly once in software (WR_FLUSH_ERR, vendor_err 5) without the CQ being read;
//! nothing hangs and every driver resource is released.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use driver::mlx5::{MAX_MISSES, Mlx5Hca, REMOVAL_CHECK};
use driver::verbs::{DeviceEvent, Hca, HcaPort, PostError, SpecialQp, WcStatus};
use driver::{DeviceBackend, DriverError};
use firmware_cmds::mlx5::health::HealthSyndrome;
use firmware_cmds::mlx5::ops::special_contexts::QuerySpecialContexts;
use firmware_cmds::mlx5::timeouts::Timeout;
use hca_tests::mlx5::{MAD, RECV_BUF, SimHca, lease, mad, port, recv_wr, send_wr, to_self};

/// The health poll interval (HEALTH_POLL_INTERVAL, 2 s).
fn interval() -> Duration {
    Timeout::HealthPollInterval.default_duration()
}

/// Call `events` on the port's progress path until one matches, on the device's clock; the
/// device time it took.
fn wait_for_event(
    p: &dyn HcaPort,
    budget: Duration,
    want: impl Fn(&DeviceEvent) -> bool,
) -> Option<(Duration, DeviceEvent)> {
    let start = p.now();
    loop {
        if let Some(e) = p.events().into_iter().find(|e| want(e)) {
            return Some((p.now().saturating_sub(start), e));
        }
        if p.now().saturating_sub(start) > budget {
            return None;
        }
        p.wait(p.now() + Duration::from_millis(1));
    }
}

/// Work in flight when the fault hits: 3 sends and 3 receives on QP1, 2 receives on QP0. The
/// device completes the sends (loopback fills 3 receives) before the fault, and the test does
/// not poll: those CQEs sit unread in the CQ.
struct InFlight {
    /// The buffers the device may still touch until it is quiesced: held, dropped at close.
    bufs: Vec<dma::DmaLease>,
    ids: Vec<u64>,
}

fn post_work(sim: &SimHca, hca: &Mlx5Hca) -> InFlight {
    let p = port(hca, 1);
    let lid = p.attrs().unwrap().lid;
    let mut bufs = Vec::new();
    let mut ids = Vec::new();
    for i in 0..3 {
        let r = lease(p.as_ref(), RECV_BUF);
        p.post_recv(SpecialQp::Gsi, &recv_wr(100 + i, &r)).unwrap();
        bufs.push(r);
        ids.push(100 + i);
    }
    for i in 0..2 {
        let r = lease(p.as_ref(), RECV_BUF);
        p.post_recv(SpecialQp::Smi, &recv_wr(200 + i, &r)).unwrap();
        bufs.push(r);
        ids.push(200 + i);
    }
    for i in 0..3 {
        let s = lease(p.as_ref(), MAD);
        s.write(0, &mad(0x09, i, 1)).unwrap();
        p.post_send(
            SpecialQp::Gsi,
            &send_wr(i, &s, to_self(lid, SpecialQp::Gsi)),
        )
        .unwrap();
        bufs.push(s);
        ids.push(i);
    }
    // Let the device run (without polling): the sends go out and loop back.
    p.wait(p.now() + Duration::from_millis(5));
    // Their successful CQEs are in the CQ, unread: a software flush must not look at them.
    let pos = p.cq_position().unwrap();
    let op_own = sim::Device::iommu(sim.model.as_ref())
        .read_u8(pos.iova + u64::from(pos.next % pos.nent) * 64 + 63)
        .unwrap();
    assert_ne!(op_own >> 4, 0xf, "the device wrote a CQE before the fault");
    assert_eq!(op_own >> 4, 0, "a successful send CQE (REQ)");
    InFlight { bufs, ids }
}

/// After the fault: every work request comes back exactly once, flushed in software, even
/// those whose successful CQE is in the CQ (proof that the CQ was not read); nothing more.
fn check_software_flush(hca: &Mlx5Hca, work: &InFlight) {
    let p = port(hca, 1);
    let mut out = Vec::new();
    let end = p.now() + Duration::from_secs(1);
    while out.len() < work.ids.len() && p.now() < end {
        if p.poll(&mut out, 3).unwrap() == 0 {
            p.wait(p.now() + Duration::from_millis(1));
        }
    }
    let mut seen: HashMap<u64, usize> = HashMap::new();
    for wc in &out {
        *seen.entry(wc.wr_id).or_default() += 1;
        assert_eq!(wc.status, WcStatus::WrFlushErr, "{wc:?}");
        assert_eq!(wc.vendor_err, 5, "{wc:?}");
    }
    for id in &work.ids {
        assert_eq!(seen.get(id), Some(&1), "wr {id}: {out:?}");
    }
    assert_eq!(out.len(), work.ids.len());
    let mut more = Vec::new();
    assert_eq!(
        p.poll(&mut more, 16).unwrap(),
        0,
        "nothing is flushed twice"
    );
    assert_eq!(p.outstanding(), 0);
}

/// After a fatal error: posts and commands fail fast, close releases every driver resource.
fn check_fatal_then_close(sim: &SimHca, hca: &Mlx5Hca, work: InFlight) {
    let p = port(hca, 1);
    let b = lease(p.as_ref(), MAD);
    assert!(matches!(
        p.post_send(SpecialQp::Gsi, &send_wr(9, &b, to_self(1, SpecialQp::Gsi))),
        Err(PostError::DeviceFatal(_))
    ));
    assert!(matches!(
        hca.command(&QuerySpecialContexts),
        Err(DriverError::CommandAborted { .. })
    ));
    assert!(!sim.model.as_ref().bus_master(), "the device was quiesced");
    drop(b);
    drop(work);
    let t = Instant::now();
    hca.close().unwrap();
    assert!(t.elapsed() < Duration::from_secs(5), "close does not hang");
    let a = hca.accounting();
    assert_eq!(a.driver_pool.leases_out, 0, "{a:?}");
    assert_eq!(a.mad_pool.leases_out, 0, "{a:?}");
    assert_eq!(
        (a.driver_pool.quarantined, a.mad_pool.quarantined),
        (0, 0),
        "a quiesced device gets its buffers back: {a:?}"
    );
    assert!(!p.dma().is_quarantined());
    assert_eq!(a.firmware_pages, 0, "{a:?}");
    assert_eq!(sim.backend.dma_mapper().live_mappings(), 0);
    assert_eq!(sim.faults(), 0, "no IOMMU fault");
}

/// A fatal health syndrome on `sim` with work in flight: detected, with its reason.
fn fatal_with_work(sim: &SimHca, hca: &Mlx5Hca) -> (InFlight, String) {
    let p = port(hca, 1);
    p.events();
    let work = post_work(sim, hca);
    sim.model
        .faults()
        .catastrophic(HealthSyndrome::HW_FATAL_ERR, true);
    let (_, ev) = wait_for_event(p.as_ref(), 10 * interval(), |e| {
        matches!(e, DeviceEvent::Fatal { .. })
    })
    .expect("the fatal error is detected");
    let DeviceEvent::Fatal { reason } = ev else {
        unreachable!()
    };
    (work, reason)
}

/// An HCA whose DMA cannot be stopped once open: neither bus mastering off (its config write
/// fails) nor the function reset works.
fn open_with_unstoppable_dma() -> (SimHca, Arc<Mlx5Hca>) {
    let sim = SimHca::new();
    let hca = sim.open_strict();
    sim.backend.faults().fail_config_writes(true);
    sim.backend.faults().fail_reset(true);
    (sim, hca)
}

/// What a driver that could not stop the device's DMA leaves: no IOMMU fault (nothing was
/// unmapped under the device), and the function marked as needing a reset before next open.
fn assert_no_fault_and_reset_needed(sim: &SimHca) {
    assert_eq!(sim.faults(), 0, "no IOMMU fault");
    let why = sim
        .backend
        .needs_reset()
        .expect("the next open must reset first");
    assert!(why.contains("could not be stopped"), "{why}");
}

/// Bus mastering cannot be turned off on the live function (its config write fails), but
/// the function reset works: the reset stops the device's DMA, and the fatal path goes on as
/// usual (software flush, every lease back, nothing quarantined).
#[test]
fn a_fatal_error_whose_bus_master_write_fails_resets_the_function_instead() {
    let sim = SimHca::new();
    let hca = sim.open_strict();
    sim.backend.faults().fail_config_writes(true);
    let resets = sim.model.counters().function_resets;
    let (work, reason) = fatal_with_work(&sim, &hca);
    assert!(!reason.contains("could not be stopped"), "{reason}");
    assert_eq!(
        sim.model.counters().function_resets,
        resets + 1,
        "the function was reset when bus mastering could not be turned off"
    );
    check_software_flush(&hca, &work);
    check_fatal_then_close(&sim, &hca, work);
    assert_eq!(sim.backend.needs_reset(), None);
}

/// Neither bus mastering off nor the function reset works: the device may still write what
/// it was handed. Every work request is still flushed exactly once, but no buffer goes back:
/// the MAD pool keeps each one dropped (the 3 sends in flight and the 5 receive buffers),
/// the driver's own memory is kept at close, nothing is unmapped (the device can still write
/// them without a fault), and the function is marked as needing a reset.
#[test]
fn a_fatal_error_whose_dma_cannot_be_stopped_quarantines_every_buffer() {
    let (sim, hca) = open_with_unstoppable_dma();
    let (work, reason) = fatal_with_work(&sim, &hca);
    assert!(reason.contains("could not be stopped"), "{reason}");
    let p = port(&hca, 1);
    assert!(p.dma().is_quarantined(), "the MAD pool is quarantined");
    assert!(
        sim.model.as_ref().bus_master(),
        "the device still masters the bus"
    );
    let mapper = sim.backend.dma_mapper();
    let mappings = mapper.live_mappings();
    check_software_flush(&hca, &work);
    let receive_iovas: Vec<u64> = work.bufs[..5].iter().map(dma::DmaLease::iova).collect();
    let held = work.bufs.len();
    assert_eq!(held, 3 + 5);
    let before = hca.accounting();
    drop(work);
    let a = hca.accounting();
    assert_eq!(
        a.mad_pool.leases_out,
        before.mad_pool.leases_out - held,
        "{a:?}"
    );
    assert_eq!(
        a.mad_pool.quarantined, held,
        "the sends in flight and the receive buffers are quarantined: {a:?}"
    );
    assert_eq!(mapper.live_mappings(), mappings, "nothing was unmapped");
    let iommu = sim::Device::iommu(sim.model.as_ref());
    for iova in &receive_iovas {
        iommu
            .write(*iova, &[0x5a; 8])
            .expect("a late device write lands in the quarantined buffer");
    }

    let driver_leases = hca.accounting().driver_pool.leases_out;
    assert!(driver_leases > 0);
    hca.close().unwrap();
    let a = hca.accounting();
    assert_eq!(
        (a.driver_pool.leases_out, a.driver_pool.quarantined),
        (0, driver_leases),
        "the driver's own DMA is kept at close: {a:?}"
    );
    assert_eq!(a.mad_pool.quarantined, held, "{a:?}");
    assert_eq!(
        mapper.live_mappings(),
        mappings,
        "the close unmapped nothing"
    );
    assert_no_fault_and_reset_needed(&sim);
}

trait BusMaster {
    fn bus_master(&self) -> bool;
}

impl BusMaster for sim::mlx5::Mlx5 {
    fn bus_master(&self) -> bool {
        sim::Device::iommu(self).bus_master()
    }
}

#[test]
fn a_fatal_health_syndrome_is_detected_within_one_poll_and_flushes_in_software() {
    for synd in [
        HealthSyndrome::FW_INTERNAL_ERR,
        HealthSyndrome::HW_FATAL_ERR,
        HealthSyndrome::ICM_PCI_POISONED_ERR,
    ] {
        let sim = SimHca::new();
        let hca = sim.open_strict();
        let p = port(&hca, 1);
        // A first look at the port so that the next health poll is a full interval away.
        p.events();
        let work = post_work(&sim, &hca);
        sim.model.faults().catastrophic(synd, true);
        let (took, ev) = wait_for_event(p.as_ref(), 10 * interval(), |e| {
            matches!(e, DeviceEvent::Fatal { .. })
        })
        .unwrap_or_else(|| panic!("{synd}: not detected"));
        assert!(took <= interval(), "{synd}: detected after {took:?}");
        let DeviceEvent::Fatal { reason } = ev else {
            unreachable!()
        };
        assert!(reason.contains(synd.name().unwrap()), "{reason}");
        check_software_flush(&hca, &work);
        check_fatal_then_close(&sim, &hca, work);
    }
}

/// Firmware that stops without asking for the recovery flow (its syndrome lacks the RFR bit,
/// and its health counter keeps moving) still shuts its NIC interface down: the driver sees
/// DISABLED within one poll (the kernel's `check_fatal_sensors` reads the interface before
/// the syndrome), and the fatal path runs as for any other fatal error.
#[test]
fn a_firmware_stop_without_the_recovery_bit_is_fatal_through_the_disabled_interface() {
    let synd = HealthSyndrome::FW_INTERNAL_ERR;
    let sim = SimHca::new();
    let hca = sim.open_strict();
    let p = port(&hca, 1);
    p.events();
    let work = post_work(&sim, &hca);
    sim.model.faults().catastrophic(synd, false);
    let (took, ev) = wait_for_event(p.as_ref(), 10 * interval(), |e| {
        matches!(e, DeviceEvent::Fatal { .. })
    })
    .expect("the stopped firmware is detected");
    assert!(took <= interval(), "detected after {took:?}");
    let DeviceEvent::Fatal { reason } = ev else {
        unreachable!()
    };
    assert!(reason.contains("DISABLED"), "{reason}");
    assert!(reason.contains(synd.name().unwrap()), "{reason}");
    check_software_flush(&hca, &work);
    check_fatal_then_close(&sim, &hca, work);
}

// The kernel (`sensor_fw_synd_rfr`) and rdma-core's VFIO provider act on a syndrome only with
// the recovery-flow-required bit; without it the firmware is reporting, and keeps running.
#[test]
fn a_syndrome_without_the_recovery_bit_leaves_the_device_up() {
    let sim = SimHca::new();
    let hca = sim.open_strict();
    let p = port(&hca, 1);
    p.events();
    sim.model
        .faults()
        .report_syndrome(HealthSyndrome::HIGH_TEMP_ERR);
    let fatal = wait_for_event(p.as_ref(), 3 * interval(), |e| {
        matches!(e, DeviceEvent::Fatal { .. } | DeviceEvent::Removed)
    });
    assert!(fatal.is_none(), "{fatal:?}");
    assert!(
        sim.model.as_ref().bus_master(),
        "the device was not quiesced"
    );
    // Work posted after the report completes normally.
    let work = post_work(&sim, &hca);
    let mut out = Vec::new();
    let end = p.now() + Duration::from_secs(1);
    while out.len() < 6 && p.now() < end {
        if p.poll(&mut out, 8).unwrap() == 0 {
            p.wait(p.now() + Duration::from_millis(1));
        }
    }
    // 3 sends to ourselves and the 3 GSI receives they land in; the 2 SMI receives stay.
    assert_eq!(out.len(), 6, "{out:?}");
    for wc in &out {
        assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
        assert!(work.ids.contains(&wc.wr_id), "{wc:?}");
    }
    assert!(hca.command(&QuerySpecialContexts).is_ok());
    drop(work);
    hca.close().unwrap();
}

#[test]
fn a_stuck_health_counter_is_detected_after_three_missed_polls() {
    let sim = SimHca::new();
    let hca = sim.open_strict();
    let p = port(&hca, 1);
    p.events();
    let work = post_work(&sim, &hca);
    sim.model.faults().stop_health_counter(true);
    let (took, ev) = wait_for_event(p.as_ref(), 20 * interval(), |e| {
        matches!(e, DeviceEvent::Fatal { .. })
    })
    .expect("stuck counter detected");
    // The counter may stop just after a poll: MAX_MISSES unchanged polls follow one more.
    assert!(
        took <= interval() * (MAX_MISSES + 1),
        "detected after {took:?}"
    );
    assert!(
        took >= interval() * (MAX_MISSES - 1),
        "not before the misses: {took:?}"
    );
    assert!(
        matches!(&ev, DeviceEvent::Fatal { reason } if reason.contains("stuck")),
        "{ev:?}"
    );
    check_software_flush(&hca, &work);
    check_fatal_then_close(&sim, &hca, work);
}

#[test]
fn fw_ver_reading_all_ones_is_a_removal_seen_within_milliseconds() {
    let sim = SimHca::new();
    let hca = sim.open_strict();
    let p = port(&hca, 1);
    p.events();
    let work = post_work(&sim, &hca);
    sim.model.faults().fw_ver_unreachable();
    let (took, _) = wait_for_event(p.as_ref(), 10 * interval(), |e| *e == DeviceEvent::Removed)
        .expect("removal detected");
    assert!(took <= REMOVAL_CHECK * 2, "detected after {took:?}");
    check_software_flush(&hca, &work);
    check_fatal_then_close(&sim, &hca, work);
}

#[test]
fn surprise_removal_is_detected_flushed_and_released_without_hanging() {
    let sim = SimHca::new();
    let hca = sim.open_strict();
    let p = port(&hca, 1);
    p.events();
    let work = post_work(&sim, &hca);
    sim.model.faults().remove();
    let (took, _) = wait_for_event(p.as_ref(), 10 * interval(), |e| *e == DeviceEvent::Removed)
        .expect("removal detected");
    assert!(took <= REMOVAL_CHECK * 2, "detected after {took:?}");
    check_software_flush(&hca, &work);
    check_fatal_then_close(&sim, &hca, work);
}

#[test]
fn a_command_in_flight_when_the_device_goes_away_does_not_hang() {
    let sim = SimHca::new();
    let hca = sim.open_strict();
    let p = port(&hca, 1);
    sim.model.faults().remove();
    // The command is posted into a device that no longer answers: the wait notices all-ones
    // reads and gives up at once, not after the 60 s command timeout.
    let start = p.now();
    let t = Instant::now();
    let err = p.attrs().unwrap_err();
    assert!(
        matches!(
            err,
            DriverError::CommandAborted { .. } | DriverError::DeviceFatal { .. }
        ),
        "{err}"
    );
    assert!(
        p.now().saturating_sub(start) <= REMOVAL_CHECK * 2,
        "{:?}",
        p.now().saturating_sub(start)
    );
    assert!(t.elapsed() < Duration::from_secs(5));
    assert!(p.events().contains(&DeviceEvent::Removed));
    let t = Instant::now();
    hca.close().unwrap();
    assert!(t.elapsed() < Duration::from_secs(5));
    let a = hca.accounting();
    assert_eq!(
        (a.driver_pool.leases_out, a.mad_pool.leases_out),
        (0, 0),
        "{a:?}"
    );
    assert_eq!(sim.backend.dma_mapper().live_mappings(), 0);
    assert_eq!(sim.faults(), 0);
}

#[test]
fn the_vfio_device_request_is_a_removal() {
    let sim = SimHca::new();
    let hca = sim.open_strict();
    let p = port(&hca, 1);
    let work = post_work(&sim, &hca);
    assert!(
        sim.model.faults().request_release(),
        "the driver routed REQ"
    );
    let (_, _) = wait_for_event(p.as_ref(), interval(), |e| *e == DeviceEvent::Removed)
        .expect("device request seen");
    check_software_flush(&hca, &work);
    check_fatal_then_close(&sim, &hca, work);
}

#[test]
fn a_device_that_stays_healthy_is_polled_and_never_declared_fatal() {
    let sim = SimHca::new();
    let hca = sim.open_strict();
    let p = port(&hca, 1);
    let polls = hca.stats().health_polls;
    assert!(
        wait_for_event(p.as_ref(), 30 * interval(), |e| {
            matches!(e, DeviceEvent::Fatal { .. } | DeviceEvent::Removed)
        })
        .is_none()
    );
    let done = hca.stats().health_polls - polls;
    assert!((29..=32).contains(&done), "{done} health polls in 60 s");
    assert!(hca.fatal_reason().is_none());
    hca.close().unwrap();
    sim.assert_clean(&hca);
}

/// The close's own quiesce follows the same rule: with bus mastering stuck on and no working
/// reset, the driver's memory (rings, mailboxes, pages) is kept, mapped, rather than freed
/// under a device that may still write it, and the function is marked as needing a reset.
#[test]
fn a_close_whose_dma_cannot_be_stopped_keeps_the_drivers_memory() {
    let (sim, hca) = open_with_unstoppable_dma();
    let mapper = sim.backend.dma_mapper();
    let driver_leases = hca.accounting().driver_pool.leases_out;
    hca.close().unwrap();
    let a = hca.accounting();
    assert!(a.driver_pool.quarantined > 0, "{a:?}");
    assert_eq!(a.driver_pool.leases_out, 0, "{a:?}");
    assert!(
        a.driver_pool.quarantined <= driver_leases,
        "only what was out at the close: {a:?}"
    );
    assert!(mapper.live_mappings() >= a.driver_pool.quarantined, "{a:?}");
    assert_no_fault_and_reset_needed(&sim);
}

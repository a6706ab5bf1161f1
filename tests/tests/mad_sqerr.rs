//! A send-queue recovery (SQERR2RTS after an error CQE on QP1) whose command has an unknown
//! outcome on the simulated ConnectX: the command takes effect in the firmware, but its
//! completion never comes (a timeout) or comes back corrupt. For each, what the MAD layer
//! does with the sends flushed by the first error, with sends posted afterwards, with a second
//! error CQE, and at deregistration and close: every send completes exactly once, in bounded
//! device time, leases and mappings go back to their baseline, and no IOMMU fault.

use std::time::Duration;

use driver::DeviceBackend;
use driver::verbs::{Hca, HcaPort, SpecialQp, WcStatus};
use firmware_cmds::mlx5::cmd::status::DeliveryStatus;
use firmware_cmds::mlx5::opcode::Opcode;
use firmware_cmds::mlx5::syndrome::CqeSyndrome;
use hca_tests::mad_rig::{ANSWERED, MadRig, SEND, Tracker, deregister, mad};
use mad::{Agent, SendId, SendRequest};
use sim::mlx5::{CmdCorruption, WqeQueue};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// How the SQERR2RTS of the first recovery goes wrong.
#[derive(Debug, Clone, Copy)]
enum Unknown {
    Withheld,
    Corrupt(CmdCorruption),
}

fn arm(rig: &MadRig, how: Unknown) {
    let op = Opcode::SQERR2RTS_QP.0;
    match how {
        Unknown::Withheld => rig.sim.model.faults().withhold_completion(op),
        Unknown::Corrupt(c) => rig.sim.model.faults().corrupt_completion(op, c),
    }
}

fn send_n(rig: &MadRig, a: &Agent, first: u32, n: u32) -> Vec<SendId> {
    (first..first + n)
        .map(|i| {
            a.send(SendRequest::new(
                mad(ANSWERED, SEND, i),
                rig.to_self(SpecialQp::Gsi),
            ))
            .unwrap()
        })
        .collect()
}

/// The first of `n` sends fails with `vendor` (the send queue stops, the hardware flushes the
/// rest); returns their ids once all completed, checking the failing one kept its error.
fn fail_first(rig: &MadRig, a: &Agent, t: &mut Tracker, first: u32, vendor: u8) -> Vec<SendId> {
    rig.sim.model.faults().wqe_error(
        rig.qpn(SpecialQp::Gsi),
        WqeQueue::Send,
        1,
        CqeSyndrome::LOCAL_LENGTH_ERR,
        vendor,
    );
    let ids = send_n(rig, a, first, 6);
    // A withheld SQERR2RTS costs the driver its 60 s command timeout.
    assert!(
        rig.pump_until(None, &[a], t, Duration::from_secs(90), |t| t.all_done(&ids)),
        "every send completes in bounded device time"
    );
    let c = &t.done[&ids[0]];
    assert_eq!(
        (c.status, c.vendor_err),
        (WcStatus::LocLenErr, u32::from(vendor)),
        "the failing send keeps its error"
    );
    ids
}

fn scenario(how: Unknown) {
    let rig = MadRig::new();
    let a = rig.requester();
    let mut t = Tracker::default();
    arm(&rig, how);
    let start = rig.port.now();
    let ids = fail_first(&rig, &a, &mut t, 0, 0x51);
    assert!(
        rig.port.now().saturating_sub(start) <= Duration::from_secs(70),
        "{how:?}: bounded by the command timeout"
    );
    let k = rig.port.counters();
    assert_eq!(k.send_errors, 1, "{how:?}: {k:?}");
    // The firmware did move the QP back to RTS: the driver learns it, so the sends the
    // hardware flushed are reposted and sent, as after a clean recovery.
    for id in &ids[1..] {
        assert_eq!(
            t.status(*id),
            Some(WcStatus::Success),
            "{how:?}: {id} reposted once the QP's state is known"
        );
    }
    assert_eq!((k.qp_recoveries, k.flush_reposts), (1, 5), "{how:?}: {k:?}");

    // More sends: the QP runs.
    let more = send_n(&rig, &a, 100, 4);
    assert!(rig.pump_until(None, &[&a], &mut t, ms(100), |t| t.all_done(&more)));
    for id in &more {
        assert_eq!(
            t.status(*id),
            Some(WcStatus::Success),
            "{how:?}: {id} sent after the recovery"
        );
    }

    // A second error CQE: a second recovery, which goes through.
    let ids2 = fail_first(&rig, &a, &mut t, 200, 0x52);
    for id in &ids2[1..] {
        assert_eq!(t.status(*id), Some(WcStatus::Success), "{how:?}: {id}");
    }
    let k = rig.port.counters();
    assert_eq!(
        (k.send_errors, k.qp_recoveries, k.flush_reposts),
        (2, 2, 10),
        "{how:?}: {k:?}"
    );

    deregister(a, &mut t);
    assert_eq!(t.done.len(), 6 + 4 + 6, "{how:?}: each send completed once");
    assert_eq!(
        rig.hca.lost_command_slots(),
        usize::from(matches!(
            how,
            Unknown::Withheld | Unknown::Corrupt(CmdCorruption::OwnerStillSet)
        )),
        "{how:?}: a slot whose entry never came back stays out of use"
    );
    let kept = usize::from(!matches!(
        how,
        Unknown::Corrupt(CmdCorruption::DeliveryStatus(_))
    ));
    assert_clean_but_kept(&rig, kept, &format!("{how:?}"));
    rig.finish();
}

/// [`MadRig::assert_clean`], except that a command whose outcome was unknown keeps its
/// mailbox mapped (the firmware may still use it) until the close quiesces the device: `kept`
/// mappings more than the baseline (none for an entry that came back clean with a bad
/// delivery status: the firmware is then done with the mailboxes). [`MadRig::finish`] then
/// checks that the close gave everything back.
fn assert_clean_but_kept(rig: &MadRig, kept: usize, ctx: &str) {
    let a = rig.hca.accounting();
    assert_eq!(a.mad_pool.leases_out, rig.base_leases, "MAD leases: {a:?}");
    rig.hw.dma().trim();
    let mapper = rig.sim.backend.dma_mapper();
    assert_eq!(
        mapper.live_mappings(),
        rig.base_mappings + kept,
        "{ctx}: IOMMU mappings"
    );
    assert_eq!(mapper.fault_count(), 0, "IOMMU faults");
    let c = rig.port.census();
    assert_eq!(c.gsi.active(), 0, "{c:?}");
    assert_eq!(
        (c.gsi.queued, c.backlogged, c.outstanding, c.gsi.posted),
        (0, 0, 0, 0),
        "{c:?}"
    );
    let k = rig.port.counters();
    assert_eq!((k.post_failures, k.bad_completions), (0, 0), "{k:?}");
}

#[test]
fn a_withheld_sqerr2rts_completion_is_resolved_and_the_queue_runs() {
    scenario(Unknown::Withheld);
}

#[test]
fn a_sqerr2rts_completion_with_a_bad_token_is_resolved_and_the_queue_runs() {
    scenario(Unknown::Corrupt(CmdCorruption::EntryToken));
}

#[test]
fn a_sqerr2rts_completion_with_a_bad_delivery_status_is_resolved_and_the_queue_runs() {
    scenario(Unknown::Corrupt(CmdCorruption::DeliveryStatus(
        DeliveryStatus::FW_ERR,
    )));
}

#[test]
fn a_sqerr2rts_completion_whose_owner_bit_stays_set_is_resolved_and_the_queue_runs() {
    scenario(Unknown::Corrupt(CmdCorruption::OwnerStillSet));
}

/// The QUERY_QP that would settle the outcome comes back corrupt too: the driver cannot know
/// the QP's state, so it keeps the send queue stopped, as the kernel's MAD layer leaves a QP
/// whose modify to RTS failed (`ib_mad_send_error` logs it and marks nothing for retry). The
/// sends the hardware flushed complete with their flush, every later send with a software
/// flush without reaching the device; each exactly once, and the port closes clean.
#[test]
fn when_the_qp_state_cannot_be_learned_the_queue_stays_stopped_and_each_send_completes_once() {
    let rig = MadRig::new();
    let a = rig.requester();
    let mut t = Tracker::default();
    let faults = rig.sim.model.faults();
    faults.withhold_completion(Opcode::SQERR2RTS_QP.0);
    faults.corrupt_completion(Opcode::QUERY_QP.0, CmdCorruption::EntryToken);
    let ids = fail_first(&rig, &a, &mut t, 0, 0x51);
    for id in &ids[1..] {
        let c = &t.done[id];
        assert_eq!(
            (c.status, c.vendor_err),
            (WcStatus::WrFlushErr, 0xf9),
            "{id}: the hardware's flush, not reposted"
        );
    }
    let k = rig.port.counters();
    assert_eq!(
        (k.send_errors, k.qp_recoveries, k.flush_reposts, k.posted),
        (1, 0, 0, 6),
        "the recovery failed and is counted so: {k:?}"
    );
    let more = send_n(&rig, &a, 100, 4);
    assert!(rig.pump_until(None, &[&a], &mut t, ms(100), |t| t.all_done(&more)));
    for id in &more {
        let c = &t.done[id];
        assert_eq!(
            (c.status, c.vendor_err),
            (WcStatus::WrFlushErr, 0),
            "{id}: refused while the send queue is stopped, flushed in software"
        );
    }
    assert_eq!(
        rig.port.counters().posted,
        6,
        "nothing more reached the device"
    );
    deregister(a, &mut t);
    assert_eq!(t.done.len(), 6 + 4, "each send completed once");
    assert_eq!(rig.hca.lost_command_slots(), 1);
    // The SQERR2RTS input mailbox and the QUERY_QP output mailbox.
    assert_clean_but_kept(&rig, 2, "unsettled");
    rig.finish();
}

/// Deregistration right after the sends were posted, before anything drove the port: it
/// cancels them, then drives the error CQE, the recovery whose SQERR2RTS completion is
/// withheld (the driver's command timeout) and the flushes itself, and returns once each send
/// completed exactly once, within bounded device time; then the port closes clean.
#[test]
fn deregistration_during_a_recovery_with_a_withheld_sqerr2rts_completes_every_send_once() {
    let rig = MadRig::new();
    let a = rig.requester();
    let mut t = Tracker::default();
    arm(&rig, Unknown::Withheld);
    rig.sim.model.faults().wqe_error(
        rig.qpn(SpecialQp::Gsi),
        WqeQueue::Send,
        1,
        CqeSyndrome::LOCAL_LENGTH_ERR,
        0x51,
    );
    let ids = send_n(&rig, &a, 0, 6);
    let start = rig.port.now();
    deregister(a, &mut t);
    assert!(
        rig.port.now().saturating_sub(start) <= Duration::from_secs(70),
        "bounded by the command timeout"
    );
    assert!(
        t.all_done(&ids),
        "each send completed before deregister returned"
    );
    assert_eq!(t.done.len(), 6);
    // Deregistration canceled them before their CQEs were polled: each reports the cancel
    // (the kernel's cancel_mads: WR_FLUSH_ERR), the failing one too.
    for id in &ids {
        let c = &t.done[id];
        assert_eq!((c.status, c.vendor_err), (WcStatus::WrFlushErr, 0), "{id}");
    }
    let k = rig.port.counters();
    assert_eq!(
        (k.send_errors, k.qp_recoveries, k.flush_reposts),
        (1, 1, 0),
        "recovered (QUERY_QP found RTS), nothing reposted for canceled sends: {k:?}"
    );
    assert_eq!(rig.hca.lost_command_slots(), 1);
    assert_clean_but_kept(&rig, 1, "deregistered");
    rig.finish();
}

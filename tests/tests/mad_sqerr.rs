//! A send-queue recovery (SQERR2RTS after an error CQE on QP1) whose command has an unknown
//! outcome on the simulated ConnectX: the command takes effect in the firmware, but its
//! completion never comes (a timeout) or comes back corrupt. For each, what the MAD layer
//! does with the sends flushed by the first error, with sends posted afterwards, with a second
//! error CQE, and at deregistration and close: every send completes exactly once, in bounded
//! device time, leases and mappings go back to their baseline, and no IOMMU fault.
//!
//! Then an SQERR2RTS that is lost without taking effect (`Mlx5Faults::lose_commands`: the
//! driver times it out and QUERY_QP finds the QP still in SQE): the driver issues it again,
//! a bounded number of times, and the queue comes back; when every attempt is lost the
//! error is typed, the queue stays stopped with every send completed once, and a post
//! refused later asks the MAD layer for another recovery, which brings it back without a
//! reopen. A lost SQERR2RTS that the firmware runs late, after the retry went through, gives
//! its command slot back.

use std::time::Duration;

use driver::verbs::{Hca, HcaPort, SpecialQp, WcStatus};
use driver::{DeviceBackend, DriverError};
use firmware_cmds::mlx5::cmd::status::DeliveryStatus;
use firmware_cmds::mlx5::opcode::Opcode;
use firmware_cmds::mlx5::syndrome::CqeSyndrome;
use hca_tests::mad_rig::{ANSWERED, MadRig, SEND, Tracker, mad};
use mad::{Agent, SendId, SendRequest};
use sim::mlx5::{CmdCorruption, WqeQueue};

/// The simulated firmware's command timeout (`cmd_exec_to`).
const CMD_TIMEOUT: Duration = Duration::from_secs(60);

/// SQERR2RTS commands one recovery issues at most (the driver's bound).
const ATTEMPTS: u32 = 3;

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

    rig.deregister(a, &mut t);
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

/// The first recovery of the sends in `ids` failed: all but the first (which kept its error)
/// complete with the hardware's flush, not reposted, and the port's counters say so.
fn assert_recovery_failed(rig: &MadRig, t: &Tracker, ids: &[SendId]) {
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
/// sends the hardware flushed complete with their flush, later sends with a software flush
/// without reaching the device. The first refused post asks the MAD layer for another
/// recovery, made once twice what the failed one took has passed: the firmware
/// refuses that SQERR2RTS (its QP is in RTS since the withheld one ran), QUERY_QP settles it,
/// and the queue runs again. Each send completes exactly once, and the port closes clean.
#[test]
fn when_the_qp_state_cannot_be_learned_the_queue_stops_until_a_later_post_brings_a_recovery() {
    let rig = MadRig::new();
    let a = rig.requester();
    let mut t = Tracker::default();
    let faults = rig.sim.model.faults();
    faults.withhold_completion(Opcode::SQERR2RTS_QP.0);
    faults.corrupt_completion(Opcode::QUERY_QP.0, CmdCorruption::EntryToken);
    let ids = fail_first(&rig, &a, &mut t, 0, 0x51);
    assert_recovery_failed(&rig, &t, &ids);
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
    let commands = || {
        let c = rig.sim.model.counters();
        (
            c.command_count(Opcode::SQERR2RTS_QP.0),
            c.command_count(Opcode::QUERY_QP.0),
        )
    };
    let before = commands();
    let k = rig.port.counters();
    assert_eq!(
        (k.qp_recoveries, k.recovery_failures),
        (0, 1),
        "no second recovery at once after the failure: {k:?}"
    );
    // The refusals asked for another recovery: it comes once twice what the failed one took
    // (its withheld SQERR2RTS: one command timeout) has passed.
    let failed_at = rig.port.now();
    assert!(rig.pump_until(None, &[&a], &mut t, CMD_TIMEOUT * 3, |_| {
        rig.port.counters().qp_recoveries == 1
    }));
    assert!(
        rig.port.now() >= failed_at + CMD_TIMEOUT,
        "the attempt waited for twice what the failed recovery took"
    );
    let after = commands();
    assert_eq!(
        (after.0 - before.0, after.1 - before.1),
        (1, 1),
        "one more SQERR2RTS (refused: the QP is in RTS), settled by QUERY_QP"
    );
    let k = rig.port.counters();
    assert_eq!((k.qp_recoveries, k.recovery_failures), (1, 1), "{k:?}");
    let sent = send_and_see_on_the_wire(&rig, &a, &mut t, 200);
    rig.deregister(a, &mut t);
    assert_eq!(t.done.len(), 6 + 4 + sent.len(), "each send completed once");
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
    rig.deregister(a, &mut t);
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

/// Fail the first of six sends (the send queue stops, the hardware flushes the other five)
/// and drive the port until all six completed, which takes up to `lost` command timeouts of
/// device time (each lost SQERR2RTS is one); checks the time spent and that the failing send
/// kept its error. Returns the sends' ids.
fn fail_first_with_lost_commands(
    rig: &MadRig,
    a: &Agent,
    t: &mut Tracker,
    first: u32,
    lost: u32,
) -> Vec<SendId> {
    rig.sim.model.faults().wqe_error(
        rig.qpn(SpecialQp::Gsi),
        WqeQueue::Send,
        1,
        CqeSyndrome::LOCAL_LENGTH_ERR,
        0x51,
    );
    let start = rig.port.now();
    let ids = send_n(rig, a, first, 6);
    let bound = CMD_TIMEOUT * (lost + 1);
    assert!(
        rig.pump_until(None, &[a], t, bound, |t| t.all_done(&ids)),
        "every send completes in bounded device time"
    );
    let took = rig.port.now().saturating_sub(start);
    assert!(
        took >= CMD_TIMEOUT * lost && took < CMD_TIMEOUT * lost + Duration::from_secs(10),
        "{lost} lost SQERR2RTS cost {lost} command timeouts: took {took:?}"
    );
    let c = &t.done[&ids[0]];
    assert_eq!(
        (c.status, c.vendor_err),
        (WcStatus::LocLenErr, 0x51),
        "the failing send keeps its error"
    );
    ids
}

/// Sends `n` more, drives them to completion and returns their ids, checking each reached
/// the wire (the device put that many more packets out).
fn send_and_see_on_the_wire(rig: &MadRig, a: &Agent, t: &mut Tracker, first: u32) -> Vec<SendId> {
    let before = rig.sim.model.counters().packets_sent;
    let ids = send_n(rig, a, first, 4);
    assert!(rig.pump_until(None, &[a], t, ms(100), |t| t.all_done(&ids)));
    for id in &ids {
        assert_eq!(t.status(*id), Some(WcStatus::Success), "{id}: sent");
    }
    assert!(
        rig.sim.model.counters().packets_sent >= before + 4,
        "the sends reached the wire"
    );
    ids
}

/// The first SQERR2RTS and its first retry are lost: each times out, QUERY_QP finds the QP
/// still in SQE, so the driver issues the command again; the third goes through. The sends
/// the hardware flushed are reposted and sent, later sends reach the wire, each send
/// completes exactly once, and the close resets the function (two command slots were lost)
/// with nothing left behind and no IOMMU fault (the firmware touched the lost commands'
/// mailboxes at teardown: the driver kept them).
#[test]
fn an_sqerr2rts_lost_without_effect_is_issued_again_and_the_queue_runs() {
    let rig = MadRig::new();
    let a = rig.requester();
    let mut t = Tracker::default();
    let faults = rig.sim.model.faults();
    faults.lose_commands(Opcode::SQERR2RTS_QP.0, ATTEMPTS - 1);
    let ids = fail_first_with_lost_commands(&rig, &a, &mut t, 0, ATTEMPTS - 1);
    for id in &ids[1..] {
        assert_eq!(
            t.status(*id),
            Some(WcStatus::Success),
            "{id}: reposted once the retried SQERR2RTS went through"
        );
    }
    let k = rig.port.counters();
    assert_eq!(
        (k.send_errors, k.qp_recoveries, k.flush_reposts),
        (1, 1, 5),
        "{k:?}"
    );
    let c = rig.sim.model.counters();
    assert_eq!(c.commands_lost, u64::from(ATTEMPTS - 1), "{c:?}");
    assert_eq!(faults.commands_left_to_lose(), 0);
    assert_eq!(
        (
            c.command_count(Opcode::SQERR2RTS_QP.0),
            c.command_count(Opcode::QUERY_QP.0)
        ),
        (1, u64::from(ATTEMPTS - 1)),
        "one SQERR2RTS ran, after a QUERY_QP for each lost one"
    );
    assert_eq!(rig.hca.lost_command_slots(), (ATTEMPTS - 1) as usize);

    let more = send_and_see_on_the_wire(&rig, &a, &mut t, 100);

    rig.deregister(a, &mut t);
    assert_eq!(
        t.done.len(),
        ids.len() + more.len(),
        "each send completed once"
    );
    // Each lost SQERR2RTS keeps its input mailbox (the QP context) until the quiesce.
    assert_clean_but_kept(&rig, (ATTEMPTS - 1) as usize, "lost twice");
    rig.finish();
}

/// The first SQERR2RTS is lost: it times out, QUERY_QP finds the QP still in SQE, the retry
/// goes through and the queue runs, the lost command's slot and input mailbox kept. Then the
/// firmware runs the lost one, late, on a QP already back in RTS: it refuses it (SQERR2RTS
/// is valid from SQE only) and gives its entry back. The driver takes the slot and the
/// mailboxes back at that completion (the kernel frees a timed-out entry on its real
/// completion), the queue keeps running, each send completes once, and the close is clean:
/// no function reset (nothing was left to the device), no IOMMU fault.
#[test]
fn an_sqerr2rts_that_timed_out_and_completes_late_gives_its_slot_back_and_the_queue_runs() {
    let rig = MadRig::new();
    let a = rig.requester();
    let mut t = Tracker::default();
    let faults = rig.sim.model.faults();
    faults.lose_commands(Opcode::SQERR2RTS_QP.0, 1);
    let ids = fail_first_with_lost_commands(&rig, &a, &mut t, 0, 1);
    assert_eq!(rig.hca.lost_command_slots(), 1);
    assert_clean_but_kept(&rig, 1, "one SQERR2RTS lost");
    let before = rig.hca.stats().cmd;
    let sqerr = |c: &sim::mlx5::Mlx5Counters| {
        (
            c.command_count(Opcode::SQERR2RTS_QP.0),
            c.command_failures
                .get(&Opcode::SQERR2RTS_QP.0)
                .copied()
                .unwrap_or(0),
        )
    };
    let (ran, refused) = sqerr(&rig.sim.model.counters());

    assert_eq!(faults.run_lost_commands(), 1);
    let more = send_and_see_on_the_wire(&rig, &a, &mut t, 100);
    let c = rig.sim.model.counters();
    assert_eq!(c.commands_run_late, 1, "{c:?}");
    assert_eq!(
        sqerr(&c),
        (ran + 1, refused + 1),
        "the late SQERR2RTS ran and was refused: the QP was in RTS"
    );
    assert_eq!(rig.hca.lost_command_slots(), 0, "the slot came back");
    let after = rig.hca.stats().cmd;
    assert_eq!(after.late_completions, before.late_completions + 1);
    assert_eq!(
        after.spurious_events, before.spurious_events,
        "its EQE was expected"
    );

    rig.deregister(a, &mut t);
    assert_eq!(
        t.done.len(),
        ids.len() + more.len(),
        "each send completed once"
    );
    assert_clean_but_kept(&rig, 0, "the late completion gave the mailbox back");
    let model = rig.sim.model.clone();
    let resets = model.counters().function_resets;
    rig.finish();
    assert_eq!(
        model.counters().function_resets,
        resets,
        "nothing was left to the device: no reset"
    );
}

/// Every SQERR2RTS of the recovery is lost: after [`ATTEMPTS`] (each timed out, each followed
/// by a QUERY_QP that finds SQE) the driver gives up, in bounded device time. The sends the
/// hardware flushed complete with that flush, later sends with a software flush without
/// reaching the device, each exactly once. Asked again while the firmware still loses them,
/// the recovery fails with the typed error naming the QP and the attempts; once the firmware
/// runs the command, the recovery the refused sends asked the MAD layer for brings the queue
/// back without a reopen, and sends reach the wire. The close resets the function and leaves
/// nothing, no IOMMU fault.
#[test]
fn when_every_sqerr2rts_is_lost_each_send_completes_once_and_a_later_post_brings_the_queue_back() {
    let rig = MadRig::new();
    let a = rig.requester();
    let mut t = Tracker::default();
    let faults = rig.sim.model.faults();
    faults.lose_commands(Opcode::SQERR2RTS_QP.0, 2 * ATTEMPTS);
    let ids = fail_first_with_lost_commands(&rig, &a, &mut t, 0, ATTEMPTS);
    assert_recovery_failed(&rig, &t, &ids);
    let c = rig.sim.model.counters();
    assert_eq!(
        (c.commands_lost, c.command_count(Opcode::QUERY_QP.0)),
        (u64::from(ATTEMPTS), u64::from(ATTEMPTS)),
        "bounded: {c:?}"
    );
    assert_eq!(rig.hca.lost_command_slots(), ATTEMPTS as usize);

    // The queue stays stopped: sends are flushed in software, nothing reaches the device.
    let wire = rig.sim.model.counters().packets_sent;
    let stopped = send_n(&rig, &a, 100, 4);
    assert!(rig.pump_until(None, &[&a], &mut t, ms(100), |t| t.all_done(&stopped)));
    for id in &stopped {
        let c = &t.done[id];
        assert_eq!((c.status, c.vendor_err), (WcStatus::WrFlushErr, 0), "{id}");
    }
    assert_eq!(rig.port.counters().posted, 6, "nothing more was posted");
    assert_eq!(rig.sim.model.counters().packets_sent, wire);

    // A recovery asked while the firmware still loses the command: the typed error.
    let start = rig.port.now();
    let err = rig
        .hw
        .recover_send_queue(SpecialQp::Gsi)
        .expect_err("every attempt lost");
    let took = rig.port.now().saturating_sub(start);
    assert!(
        took >= CMD_TIMEOUT * ATTEMPTS && took < CMD_TIMEOUT * (ATTEMPTS + 1),
        "{ATTEMPTS} attempts, each a command timeout, then no more: {took:?}"
    );
    match &err {
        DriverError::SendQueueNotRecovered {
            qp,
            qpn,
            attempts,
            last,
        } => {
            assert_eq!(
                (qp.as_str(), *qpn, *attempts),
                ("Gsi", rig.qpn(SpecialQp::Gsi), ATTEMPTS),
                "{err}"
            );
            assert!(
                matches!(**last, DriverError::CommandTimeout { opcode, .. } if opcode == Opcode::SQERR2RTS_QP),
                "{err}"
            );
        }
        other => panic!("expected SendQueueNotRecovered, got {other}"),
    }
    let msg = err.to_string();
    assert!(
        msg.contains("still in error (SQE)") && msg.contains("close and reopen"),
        "{msg}"
    );
    assert_eq!(faults.commands_left_to_lose(), 0);

    // The firmware runs SQERR2RTS again. The refused sends above asked the MAD layer for
    // another recovery: it makes it once twice what the failed one took has passed, and the
    // queue runs without a reopen.
    assert!(
        rig.pump_until(None, &[&a], &mut t, CMD_TIMEOUT * 3 * ATTEMPTS, |_| rig
            .port
            .counters()
            .qp_recoveries
            == 1)
    );
    let k = rig.port.counters();
    assert_eq!((k.qp_recoveries, k.recovery_failures), (1, 1), "{k:?}");
    let more = send_and_see_on_the_wire(&rig, &a, &mut t, 200);

    rig.deregister(a, &mut t);
    assert_eq!(
        t.done.len(),
        ids.len() + stopped.len() + more.len(),
        "each send completed once"
    );
    assert_eq!(rig.hca.lost_command_slots(), 2 * ATTEMPTS as usize);
    assert_clean_but_kept(&rig, 2 * ATTEMPTS as usize, "lost every time");
    rig.finish();
}

/// A firmware that loses every SQERR2RTS, with a sender that keeps trying. Each recovery
/// loses [`ATTEMPTS`] commands and holds the progress loop for as many command timeouts; a
/// post refused after it asks for another, which waits at least twice as long as the failed
/// one took (so the loop runs other work most of the time). Lost commands count against the
/// driver's budget of untrusted completions: the one that uses it up makes the device fatal
/// in the third recovery, so no more than the budget of command slots is ever lost. Then
/// every send has completed exactly once, the agent is told of the fatal error once, new
/// sends fail with the typed error, and the close resets the function and gives everything
/// back with no IOMMU fault.
#[test]
fn a_firmware_that_loses_every_sqerr2rts_costs_spaced_recoveries_then_the_device_is_fatal() {
    const BUDGET: u32 = 8;
    assert_eq!(driver::mlx5::UNTRUSTED_COMPLETION_BUDGET, BUDGET as usize);
    let rig = MadRig::new();
    let a = rig.requester();
    let mut t = Tracker::default();
    let faults = rig.sim.model.faults();
    faults.lose_commands(Opcode::SQERR2RTS_QP.0, 1000);
    let lost = || rig.sim.model.counters().commands_lost;
    let mut ids = fail_first_with_lost_commands(&rig, &a, &mut t, 0, ATTEMPTS);
    let round = CMD_TIMEOUT * ATTEMPTS;
    let mut ended = rig.port.now();
    assert_eq!(lost(), u64::from(ATTEMPTS));

    // Second recovery: asked by a refused post, made no sooner than twice the first took.
    ids.extend(send_n(&rig, &a, 100, 1));
    assert!(rig.pump_until(None, &[&a], &mut t, ms(100), |t| t.all_done(&ids)));
    assert_eq!(lost(), u64::from(ATTEMPTS), "no attempt at once");
    assert!(rig.pump_until(None, &[&a], &mut t, round * 4, |_| lost()
        >= u64::from(2 * ATTEMPTS)));
    let now = rig.port.now();
    assert!(
        now >= ended + round * 2 + round,
        "the second recovery waited twice what the first took: it ended {:?} after the first",
        now.saturating_sub(ended)
    );
    assert!(rig.hca.fatal_reason().is_none(), "6 lost, under the budget");
    ended = now;

    // Third recovery: its second lost command uses up the budget.
    ids.extend(send_n(&rig, &a, 200, 1));
    assert!(rig.pump_until(None, &[&a], &mut t, round * 4, |_| {
        rig.hca.fatal_reason().is_some()
    }));
    assert!(
        rig.port.now() >= ended + round * 2,
        "the third recovery waited too"
    );
    let reason = rig.hca.fatal_reason().unwrap_or_default();
    assert!(
        reason.contains("could not be trusted") && reason.contains("timed out"),
        "{reason}"
    );
    assert_eq!(lost(), u64::from(BUDGET), "no command lost past the budget");
    assert_eq!(rig.hca.lost_command_slots(), BUDGET as usize);

    assert!(
        rig.pump_until(None, &[&a], &mut t, ms(100), |t| t.all_done(&ids)
            && t.fatal == 1)
    );
    assert_eq!(t.fatal, 1, "the agent is told once");
    assert!(
        matches!(
            a.send(SendRequest::new(
                mad(ANSWERED, SEND, 300),
                rig.to_self(SpecialQp::Gsi)
            )),
            Err(mad::MadError::DeviceFatal { .. })
        ),
        "new sends fail fast"
    );
    let k = rig.port.counters();
    assert_eq!((k.send_errors, k.qp_recoveries), (1, 0), "{k:?}");
    assert!(k.recovery_failures >= 2, "{k:?}");
    rig.deregister(a, &mut t);
    assert_eq!(t.done.len(), ids.len(), "each send completed once");
    rig.finish_dead_with_one_reset();
}

//! Corrupt command completions on the simulated ConnectX (`Mlx5Faults::corrupt_completion`):
//! an entry given back with another token, a spoiled output mailbox (block number, token,
//! `next` outside the chain, chain cut short), a delivery status on a command that took
//! effect, and an entry whose ownership bit stays set after its completion event. For each,
//! on a command during bring-up and on one after it: the typed error the caller gets, within
//! bounded time, memory whose outcome is unknown kept until the quiesce (the firmware reads it
//! once more at TEARDOWN_HCA or DISABLE_HCA, so memory released early faults in the IOMMU with
//! strict leases), and a clean close (and a reopen that works).
//!
//! Then a device that keeps corrupting completions: the mailboxes kept for them are bounded
//! by the driver's budget, past which the device is declared fatal (outstanding MAD sends
//! complete with the fatal status, new commands fail at once, the close resets the function
//! and gives everything back).

use std::sync::mpsc;
use std::time::Duration;

use driver::verbs::{Hca, HcaOptions, HcaPort, PostError, SpecialQp, WcStatus};
use driver::{DeviceBackend, DriverError};
use firmware_cmds::mlx5::Opcode;
use firmware_cmds::mlx5::cmd::DeliveryStatus;
use firmware_cmds::mlx5::ops::hca_cap::{CapMode, QueryHcaCap};
use firmware_cmds::mlx5::syndrome::CqeSyndrome;
use hca_tests::mad_rig::{ANSWERED, MadRig, SEND, Tracker, mad as rig_mad};
use hca_tests::mlx5::{SimHca, gsi_send_setup, poll_n, port, send_wr, to_self};
use mad::{MadError, SendRequest};
use sim::mlx5::{CmdCorruption, WqeQueue};

/// The simulated firmware's command timeout (`cmd_exec_to`).
const CMD_TIMEOUT: Duration = Duration::from_secs(60);

/// Real time a scenario may take before it counts as hung. Generous: the machine is shared,
/// and a hang is what it catches, not slowness.
const HANG_LIMIT: Duration = Duration::from_secs(300);

/// Untrusted command completions a session keeps before the device is declared fatal (the
/// driver's `UNTRUSTED_COMPLETION_BUDGET`, written out).
const BUDGET: usize = 8;

/// Every corruption, with delivery statuses the command did not deserve (a defined one and
/// one no table names) among them.
const ALL: [CmdCorruption; 8] = [
    CmdCorruption::EntryToken,
    CmdCorruption::OutputBlockNumber,
    CmdCorruption::OutputBlockToken,
    CmdCorruption::OutputNextOutside,
    CmdCorruption::OutputChainCut,
    CmdCorruption::DeliveryStatus(DeliveryStatus::FW_ERR),
    CmdCorruption::DeliveryStatus(DeliveryStatus(0x7f)),
    CmdCorruption::OwnerStillSet,
];

/// The corruptions that apply to a command whose output fits in the entry (no mailbox).
const ENTRY_ONLY: [CmdCorruption; 3] = [
    CmdCorruption::EntryToken,
    CmdCorruption::DeliveryStatus(DeliveryStatus::FW_ERR),
    CmdCorruption::OwnerStillSet,
];

/// Run `scenario` on its own thread and fail if it does not end within [`HANG_LIMIT`] (a
/// panic in it is passed on).
fn bounded(name: &str, scenario: impl FnOnce() + Send + 'static) {
    let (tx, rx) = mpsc::channel();
    let t = std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            scenario();
            let _ = tx.send(());
        })
        .unwrap();
    match rx.recv_timeout(HANG_LIMIT) {
        Ok(()) => t.join().unwrap(),
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            if let Err(panic) = t.join() {
                std::panic::resume_unwind(panic);
            }
        }
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("{name}: hung for {HANG_LIMIT:?}"),
    }
}

/// Run `case` for each of `cases`, every one even after one failed, and fail naming those
/// that failed (their panic messages are printed as they happen).
fn each<T: std::fmt::Debug + Copy>(cases: impl IntoIterator<Item = T>, case: impl Fn(T)) {
    let failed: Vec<String> = cases
        .into_iter()
        .filter(|&c| std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| case(c))).is_err())
        .map(|c| format!("{c:?}"))
        .collect();
    assert!(failed.is_empty(), "failed cases: {}", failed.join(", "));
}

/// Whether the firmware keeps the command's mailboxes after the corrupt completion, so that
/// the driver must too: every corruption but a clean entry with a bad delivery status.
fn mailboxes_unsettled(how: CmdCorruption) -> bool {
    !matches!(how, CmdCorruption::DeliveryStatus(_))
}

/// Assert that `err` is the typed error `how` on `op` must give.
fn assert_error(how: CmdCorruption, op: Opcode, err: &DriverError) {
    let ctx = format!("{op} {how:?}: {err}");
    match how {
        CmdCorruption::EntryToken => match err {
            DriverError::BadDeviceValue { what, detail } => {
                assert_eq!(*what, "command queue entry", "{ctx}");
                assert!(
                    detail.contains(&op.to_string()) && detail.contains("token"),
                    "{ctx}"
                );
            }
            _ => panic!("expected a refused entry: {ctx}"),
        },
        CmdCorruption::OutputBlockNumber
        | CmdCorruption::OutputBlockToken
        | CmdCorruption::OutputNextOutside
        | CmdCorruption::OutputChainCut => {
            let DriverError::BadDeviceValue { what, detail } = err else {
                panic!("expected a refused output mailbox: {ctx}");
            };
            assert_eq!(*what, "command output mailbox", "{ctx}");
            let named = match how {
                CmdCorruption::OutputBlockNumber => "block_num is",
                CmdCorruption::OutputBlockToken => "differs from the entry token",
                CmdCorruption::OutputNextOutside => "could not be accessed",
                _ => "chain ends early",
            };
            assert!(
                detail.contains(&op.to_string()) && detail.contains(named),
                "{ctx}"
            );
        }
        CmdCorruption::DeliveryStatus(s) => assert!(
            matches!(err, DriverError::CommandDelivery { opcode, status } if *opcode == op && *status == s),
            "{ctx}"
        ),
        CmdCorruption::OwnerStillSet => assert!(
            matches!(err, DriverError::CommandTimeout { opcode, .. } if *opcode == op),
            "{ctx}"
        ),
    }
}

/// Assert that the error came when it should, in device time: at the command timeout when the
/// entry is never given back, well before it otherwise.
fn assert_timely(how: CmdCorruption, waited: Duration, ctx: &str) {
    if how == CmdCorruption::OwnerStillSet {
        assert!(waited >= CMD_TIMEOUT, "{ctx}: gave up after {waited:?}");
        assert!(
            waited < CMD_TIMEOUT + Duration::from_secs(5),
            "{ctx}: {waited:?}"
        );
    } else {
        assert!(waited < Duration::from_secs(1), "{ctx}: took {waited:?}");
    }
}

/// Assert that nothing of a failed bring-up is left: no mapping, no IOMMU fault (the firmware
/// read what it still had at the close), no page or object in the firmware.
fn assert_nothing_left(sim: &SimHca, ctx: &str) {
    sim.assert_device_clean(ctx);
    assert_eq!(sim.model.counters().dma_errors, 0, "{ctx}");
}

/// Open with `how` armed on the first `op` of bring-up; check the error, its timing and that
/// nothing is left, then that a new bring-up on the same function works and closes cleanly.
/// Returns the function resets the failed bring-up's close did.
fn failed_bring_up(op: Opcode, how: CmdCorruption) -> u64 {
    let ctx = format!("{op} {how:?}");
    let sim = SimHca::new();
    sim.model.faults().corrupt_completion(op.0, how);
    let start = sim.backend.now();
    let err = sim
        .open(HcaOptions {
            lease_mode: dma::LeaseMode::Strict,
            ..HcaOptions::default()
        })
        .err()
        .unwrap_or_else(|| panic!("{ctx}: bring-up succeeded"));
    assert_error(how, op, &err);
    // The whole failed bring-up, teardown included, in device time.
    let waited = sim.backend.now().saturating_sub(start);
    assert_timely(how, waited, &ctx);
    assert_nothing_left(&sim, &ctx);
    let resets = sim.model.counters().function_resets;

    let hca = sim.open_strict();
    hca.command(&QueryHcaCap::general(CapMode::Current))
        .unwrap_or_else(|e| panic!("{ctx}: the reopened HCA: {e}"));
    hca.close().unwrap();
    sim.assert_clean(&hca);
    assert_eq!(
        sim.model.counters().function_resets,
        resets,
        "{ctx}: the clean close did not reset"
    );
    resets
}

/// A bring-up QUERY_HCA_CAP (an output of eight mailbox blocks) with each corruption: bring-up
/// fails with the corruption's error before the INIT_HCA, and the close leaves nothing. The
/// firmware reads the command's mailboxes again at DISABLE_HCA when it is not done with them,
/// so a driver that released them on the corrupt completion faults in the IOMMU; a function
/// that may still hold them is reset at close, one with a clean entry is not.
#[test]
fn a_corrupt_completion_during_bring_up_fails_it_and_leaves_nothing_behind() {
    bounded("bring-up query", || {
        each(ALL, |how| {
            let resets = failed_bring_up(Opcode::QUERY_HCA_CAP, how);
            assert_eq!(
                resets,
                u64::from(mailboxes_unsettled(how)),
                "{how:?}: reset only when the firmware may still hold the mailboxes"
            );
        });
    });
}

/// A bring-up CREATE_EQ/CQ/QP that takes effect but completes corrupt: the driver cannot know
/// whether the queue exists, so its buffer and doorbell record stay leased until the quiesce
/// (the firmware reads them at TEARDOWN_HCA: released early, they would fault), and the close
/// resets the function.
#[test]
fn a_create_whose_completion_is_corrupt_keeps_its_memory_until_the_quiesce() {
    bounded("bring-up create", || {
        let ops = [Opcode::CREATE_EQ, Opcode::CREATE_CQ, Opcode::CREATE_QP];
        let cases = ops
            .into_iter()
            .flat_map(|op| ENTRY_ONLY.map(|how| (op, how)));
        each(cases, |(op, how)| {
            let resets = failed_bring_up(op, how);
            assert_eq!(resets, 1, "{op} {how:?}: memory was left to the device");
        });
    });
}

/// QUERY_HCA_CAP issued on an open HCA, with each corruption: the caller gets the typed error
/// in time; the command's output mailbox stays leased (and, after a timeout, its slot out of
/// use) while the firmware may still write it; the next command works; close resets the
/// function exactly when something was left to the device, and leaves nothing.
#[test]
fn a_corrupt_completion_of_a_query_on_an_open_hca_is_refused_and_the_hca_goes_on() {
    bounded("open query", || {
        let op = Opcode::QUERY_HCA_CAP;
        let q = QueryHcaCap::general(CapMode::Current);
        each(ALL, |how| {
            let ctx = format!("{how:?}");
            let sim = SimHca::new();
            let hca = sim.open_strict();
            let leases = hca.accounting().driver_pool.leases_out;
            let before = hca.stats().cmd;
            sim.model.faults().corrupt_completion(op.0, how);
            let start = sim.backend.now();
            let err = hca.command(&q).expect_err(&ctx);
            assert_error(how, op, &err);
            assert_timely(how, sim.backend.now().saturating_sub(start), &ctx);
            // The input fits in the entry: the output chain is the command's one lease.
            let kept = usize::from(mailboxes_unsettled(how));
            assert_eq!(
                hca.accounting().driver_pool.leases_out,
                leases + kept,
                "{ctx}: the output mailboxes are kept exactly while the device may write them"
            );
            let refused = matches!(
                how,
                CmdCorruption::DeliveryStatus(_) | CmdCorruption::OwnerStillSet
            );
            let after = hca.stats().cmd;
            assert_eq!(after.corrupt, before.corrupt + u64::from(!refused), "{ctx}");
            if how == CmdCorruption::OwnerStillSet {
                // The command EQE came while the entry was still the device's.
                assert!(
                    after.spurious_events > before.spurious_events,
                    "{ctx}: {after:?}"
                );
            }
            assert_eq!(
                hca.lost_command_slots(),
                usize::from(how == CmdCorruption::OwnerStillSet),
                "{ctx}"
            );
            hca.command(&q)
                .unwrap_or_else(|e| panic!("{ctx}: the next command: {e}"));
            assert_eq!(hca.accounting().driver_pool.leases_out, leases + kept);
            hca.close().unwrap();
            sim.assert_clean(&hca);
            assert_eq!(sim.model.counters().dma_errors, 0, "{ctx}");
            assert_eq!(
                sim.model.counters().function_resets,
                kept as u64,
                "{ctx}: reset exactly when memory was left to the device"
            );
        });
    });
}

/// A page request whose MANAGE_PAGES GIVE (on the page slot) takes effect but completes with
/// a wrong token or a delivery status: the pages may be the firmware's, so they stay leased
/// until the quiesce (the firmware reads them at TEARDOWN_HCA), with the input mailbox when
/// the entry itself was corrupt; the page slot goes on serving the next request; close
/// resets the function and leaves nothing.
#[test]
fn a_page_give_whose_completion_is_corrupt_keeps_its_pages_until_the_quiesce() {
    bounded("page give", || {
        let cases = [
            CmdCorruption::EntryToken,
            CmdCorruption::DeliveryStatus(DeliveryStatus::FW_ERR),
        ];
        each(cases, |how| {
            let ctx = format!("{how:?}");
            let sim = SimHca::new();
            let hca = sim.open_strict();
            let p = port(&hca, 1);
            let leases = hca.accounting().driver_pool.leases_out;
            let given = hca.stats().pages.given;
            sim.model
                .faults()
                .corrupt_completion(Opcode::MANAGE_PAGES.0, how);
            assert!(sim.model.faults().page_request(4));
            serve_until(p.as_ref(), || hca.stats().pages.unknown_outcome > 0);
            assert_eq!(hca.stats().pages.unknown_outcome, 4, "{ctx}");
            assert_eq!(
                hca.stats().cmd.corrupt,
                u64::from(mailboxes_unsettled(how)),
                "{ctx}"
            );
            // 4 pages (the input of a 4-page GIVE is 48 bytes: one input block).
            let kept = 4 + usize::from(mailboxes_unsettled(how));
            assert_eq!(
                hca.accounting().driver_pool.leases_out,
                leases + kept,
                "{ctx}: the pages of the GIVE (and its input mailbox) are kept"
            );
            assert_eq!(
                hca.stats().pages.given,
                given,
                "{ctx}: not counted as given"
            );
            assert!(hca.fatal_reason().is_none(), "{ctx}");

            // The page slot is free again: the next request is served.
            assert!(sim.model.faults().page_request(2));
            serve_until(p.as_ref(), || hca.stats().pages.given == given + 2);
            assert_eq!(hca.stats().pages.given, given + 2, "{ctx}");
            drop(p);
            hca.close().unwrap();
            sim.assert_clean(&hca);
            assert_eq!(sim.model.counters().dma_errors, 0, "{ctx}");
            assert_eq!(sim.model.counters().function_resets, 1, "{ctx}");
        });
    });
}

/// The MAD layer's SQERR2RTS (a MODIFY issued by an open HCA) with a corrupt completion: the
/// command took effect, so the driver, which cannot trust the completion, asks QUERY_QP, finds
/// the QP in RTS and reports the recovery done; the send queue takes sends again (the kernel
/// posts whatever its cached state, so its queue runs too), and the HCA still closes cleanly.
#[test]
fn a_modify_whose_completion_is_corrupt_is_settled_by_query_qp_and_the_hca_still_closes() {
    bounded("modify", || {
        each(ENTRY_ONLY, |how| {
            let ctx = format!("{how:?}");
            let sim = SimHca::new();
            let hca = sim.open_strict();
            let (p, lid, qpn, buf) = gsi_send_setup(&hca);
            sim.model
                .faults()
                .wqe_error(qpn, WqeQueue::Send, 1, CqeSyndrome(0x02), 0x42);
            p.post_send(
                SpecialQp::Gsi,
                &send_wr(1, &buf, to_self(lid, SpecialQp::Gsi)),
            )
            .unwrap();
            assert_eq!(poll_n(p.as_ref(), 1, Duration::from_secs(1)).len(), 1);
            assert!(
                matches!(
                    p.post_send(
                        SpecialQp::Gsi,
                        &send_wr(2, &buf, to_self(lid, SpecialQp::Gsi))
                    ),
                    Err(PostError::SendQueueError(_))
                ),
                "{ctx}: refused before the recovery"
            );
            sim.model
                .faults()
                .corrupt_completion(Opcode::SQERR2RTS_QP.0, how);
            let before = hca.stats().cmd;
            let start = sim.backend.now();
            p.recover_send_queue(SpecialQp::Gsi)
                .unwrap_or_else(|e| panic!("{ctx}: QUERY_QP finds RTS: {e}"));
            assert_timely(how, sim.backend.now().saturating_sub(start), &ctx);
            let after = hca.stats().cmd;
            assert_eq!(
                after.corrupt,
                before.corrupt + u64::from(how == CmdCorruption::EntryToken),
                "{ctx}: the corrupt entry was refused, not taken: {after:?}"
            );
            assert_eq!(
                hca.lost_command_slots(),
                usize::from(how == CmdCorruption::OwnerStillSet),
                "{ctx}"
            );
            p.post_send(
                SpecialQp::Gsi,
                &send_wr(3, &buf, to_self(lid, SpecialQp::Gsi)),
            )
            .unwrap_or_else(|e| panic!("{ctx}: the queue runs again: {e}"));
            let wc = poll_n(p.as_ref(), 1, Duration::from_secs(1));
            assert_eq!(
                wc.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
                vec![(3, WcStatus::Success)],
                "{ctx}: sent"
            );
            drop(buf);
            drop(p);
            hca.close().unwrap();
            sim.assert_clean(&hca);
            assert_eq!(sim.model.counters().dma_errors, 0, "{ctx}");
            // SQERR2RTS names no memory; its input chain (the QP context) is kept after a
            // corrupt entry, its slot lost after a timeout: either makes close reset.
            assert_eq!(
                sim.model.counters().function_resets,
                u64::from(mailboxes_unsettled(how)),
                "{ctx}"
            );
        });
    });
}

/// Stray command-completion EQEs (naming every slot, none busy) complete nothing: the driver
/// counts each named slot as spurious, and the next command completes with its own output.
#[test]
fn a_stray_command_event_completes_nothing_and_is_counted() {
    bounded("stray event", || {
        let sim = SimHca::new();
        let hca = sim.open_strict();
        let p = port(&hca, 1);
        let q = QueryHcaCap::general(CapMode::Current);
        let want = hca.command(&q).unwrap();
        let before = hca.stats().cmd;
        assert!(sim.model.faults().command_event(u32::MAX));
        serve_until(p.as_ref(), || {
            hca.stats().cmd.spurious_events > before.spurious_events
        });
        let after = hca.stats().cmd;
        assert_eq!(
            after.spurious_events,
            before.spurious_events + 32,
            "{after:?}"
        );
        assert_eq!(
            (
                after.by_event,
                after.polled,
                after.event_fallback,
                after.corrupt
            ),
            (
                before.by_event,
                before.polled,
                before.event_fallback,
                before.corrupt
            ),
            "nothing completed"
        );
        let got = hca.command(&q).unwrap();
        assert_eq!(got.caps, want.caps, "the next command has its own output");
        assert_eq!(hca.stats().cmd.by_event, before.by_event + 1);
        drop(p);
        hca.close().unwrap();
        sim.assert_clean(&hca);
        assert_eq!(sim.model.counters().function_resets, 0);
    });
}

/// Run the port's events until `done` holds or a second of device time passes.
fn serve_until(p: &dyn HcaPort, done: impl Fn() -> bool) {
    let end = p.now() + Duration::from_secs(1);
    while !done() && p.now() < end {
        p.events();
        p.wait(p.now() + Duration::from_micros(100));
    }
}

/// A device that corrupts every QUERY_HCA_CAP completion (the entry comes back with another
/// token) while MAD sends are outstanding. Each refused completion keeps its output mailbox
/// (one lease: the firmware is not done with it), so the kept leases grow by one per command,
/// up to the budget and never past it: the refusal that uses up the budget declares the
/// device fatal. Then every outstanding MAD send completes once with the fatal status
/// (WR_FLUSH_ERR, vendor 5) and each agent is told; new commands fail at once with the typed
/// abort, new sends with the typed fatal error; the close resets the function, and the
/// leases, mappings and firmware state go back to nothing with no IOMMU fault.
#[test]
fn corrupt_completions_past_the_budget_make_the_device_fatal_and_the_close_gives_back_everything() {
    bounded("corrupt budget", || {
        assert_eq!(driver::mlx5::UNTRUSTED_COMPLETION_BUDGET, BUDGET);
        let rig = MadRig::new();
        let a = rig.requester();
        let mut t = Tracker::default();
        // Sends held on the QP: their completions come 10 s after they execute.
        rig.sim
            .model
            .faults()
            .send_completion_delay(rig.qpn(SpecialQp::Gsi), Duration::from_secs(10));
        let ids: Vec<_> = (0..4)
            .map(|i| {
                a.send(
                    SendRequest::new(rig_mad(ANSWERED, SEND, i), rig.to_self(SpecialQp::Gsi))
                        .timeout_ms(60_000),
                )
                .unwrap()
            })
            .collect();
        rig.pump(None, &[&a], &mut t, Duration::from_millis(2));
        assert!(t.done.is_empty(), "the sends are outstanding");
        assert!(rig.port.census().gsi.posted > 0, "{:?}", rig.port.census());

        let op = Opcode::QUERY_HCA_CAP;
        let q = QueryHcaCap::general(CapMode::Current);
        let leases = rig.hca.accounting().driver_pool.leases_out;
        for n in 1..=BUDGET {
            let ctx = format!("corrupt completion {n}");
            rig.sim
                .model
                .faults()
                .corrupt_completion(op.0, CmdCorruption::EntryToken);
            let err = rig.hca.command(&q).expect_err(&ctx);
            assert_error(CmdCorruption::EntryToken, op, &err);
            let kept = rig.hca.accounting().driver_pool.leases_out - leases;
            assert_eq!(
                kept, n,
                "{ctx}: one output mailbox kept per refused completion"
            );
            assert!(kept <= BUDGET, "{ctx}: kept {kept}, budget {BUDGET}");
            assert_eq!(rig.hca.stats().cmd.corrupt, n as u64, "{ctx}");
            let fatal = rig.hca.fatal_reason();
            if n < BUDGET {
                assert!(fatal.is_none(), "{ctx}: fatal before the budget: {fatal:?}");
            } else {
                let reason = fatal.unwrap_or_else(|| panic!("{ctx}: not fatal at the budget"));
                assert!(
                    reason.contains("could not be trusted") && reason.contains("budget of 8"),
                    "{reason}"
                );
            }
        }

        // Every outstanding send completes once, with the fatal status; each agent is told.
        assert!(
            rig.pump_until(None, &[&a], &mut t, Duration::from_secs(1), |t| t
                .all_done(&ids))
        );
        for id in &ids {
            let c = &t.done[id];
            assert_eq!((c.status, c.vendor_err), (WcStatus::WrFlushErr, 5), "{c:?}");
        }
        assert_eq!(t.fatal, 1, "the agent is told once");

        // New commands fail at once with the typed abort, and keep nothing more.
        let start = rig.sim.backend.now();
        let err = rig.hca.command(&q).expect_err("fatal");
        assert!(
            matches!(&err, DriverError::CommandAborted { opcode, reason } if *opcode == op && reason.contains("could not be trusted")),
            "{err}"
        );
        assert_eq!(rig.sim.backend.now(), start, "failed without waiting");
        assert!(matches!(
            a.send(SendRequest::new(
                rig_mad(ANSWERED, SEND, 9),
                rig.to_self(SpecialQp::Gsi)
            )),
            Err(MadError::DeviceFatal { .. })
        ));
        assert_eq!(
            rig.hca.accounting().driver_pool.leases_out - leases,
            BUDGET,
            "nothing kept past the budget"
        );
        assert_eq!(
            rig.sim.backend.dma_mapper().fault_count(),
            0,
            "IOMMU faults"
        );

        rig.deregister(a, &mut t);
        assert_eq!(t.done.len(), ids.len(), "each send completed once");
        let model = rig.sim.model.clone();
        assert_eq!(
            model.counters().dma_errors,
            0,
            "no DMA of the device failed"
        );
        // Driven on after the deregistration, the device executes the 4 completions it held
        // back: bus mastering has been off since the fatal error, so their writes are refused
        // (DMA errors on the device's side, no IOMMU fault: finish_dead checks that).
        rig.assert_nothing_after_deregistration();
        let refused = model.counters().dma_errors;
        // Leases, mappings and IOMMU faults back to nothing: checked by finish_dead.
        rig.finish_dead_with_one_reset();
        assert_eq!(
            model.counters().dma_errors,
            refused,
            "no DMA of the device failed in the close"
        );
    });
}

/// Page GIVEs whose entry comes back with a bad delivery status (the command took effect):
/// each keeps its pages (the firmware may hold them) without passing through the refusal of
/// a corrupt entry, and counts against the same budget. The GIVE that uses it up declares
/// the device fatal; the close resets the function and leaves nothing, no IOMMU fault.
#[test]
fn page_gives_with_an_unknown_outcome_count_against_the_budget() {
    bounded("page give budget", || {
        let sim = SimHca::new();
        let hca = sim.open_strict();
        let p = port(&hca, 1);
        let leases = hca.accounting().driver_pool.leases_out;
        let how = CmdCorruption::DeliveryStatus(DeliveryStatus::FW_ERR);
        for n in 1..=BUDGET {
            let ctx = format!("GIVE {n}");
            assert!(hca.fatal_reason().is_none(), "{ctx}: fatal too early");
            sim.model
                .faults()
                .corrupt_completion(Opcode::MANAGE_PAGES.0, how);
            assert!(sim.model.faults().page_request(1), "{ctx}");
            serve_until(p.as_ref(), || hca.stats().pages.unknown_outcome == n as u64);
            assert_eq!(hca.stats().pages.unknown_outcome, n as u64, "{ctx}");
            assert_eq!(
                hca.accounting().driver_pool.leases_out,
                leases + n,
                "{ctx}: each GIVE's page is kept, nothing else"
            );
            assert_eq!(hca.stats().cmd.corrupt, 0, "{ctx}: no entry was refused");
        }
        let reason = hca.fatal_reason().expect("fatal at the budget");
        assert!(reason.contains("budget of 8"), "{reason}");
        assert!(matches!(
            hca.command(&QueryHcaCap::general(CapMode::Current)),
            Err(DriverError::CommandAborted { .. })
        ));
        drop(p);
        hca.close().unwrap();
        sim.assert_clean(&hca);
        assert_eq!(sim.model.counters().dma_errors, 0);
        assert_eq!(sim.model.counters().function_resets, 1);
    });
}

//! Firmware page requests on the simulated ConnectX past bring-up: a MANAGE_PAGES the
//! firmware never completes, a firmware that asks faster than the page slot answers, the
//! requests still queued at close, the page slot every MANAGE_PAGES takes, and requests
//! behind a page slot a caller's timed-out MANAGE_PAGES holds.

use std::time::Duration;

use driver::DriverError;
use driver::mlx5::MAX_PENDING_PAGE_REQUESTS;
use driver::verbs::{DeviceEvent, Hca, HcaOptions, HcaPort};
use firmware_cmds::mlx5::Opcode;
use firmware_cmds::mlx5::ops::pages::{ManagePages, PagesOp};
use firmware_cmds::mlx5::ops::special_contexts::QuerySpecialContexts;
use hca_tests::mlx5::{SimHca, port};
use sim::mlx5::FetchedCommand;

/// The command timeout the simulated firmware reports (`cmd_exec_to`, the default 60 s).
const CMD_TIMEOUT: Duration = Duration::from_secs(60);

/// A page request whose MANAGE_PAGES GIVE is never given back: the page slot is lost at the
/// command timeout and the device declared fatal (quiesced); the pages of the GIVE stay
/// leased until then, requests that pile up meanwhile are bounded, and close returns every
/// lease with no IOMMU fault.
#[test]
fn a_page_command_that_never_completes_makes_the_device_fatal_at_the_command_timeout() {
    let sim = SimHca::new();
    let hca = sim.open_strict();
    let p = port(&hca, 1);
    let leases_before = hca.accounting().driver_pool.leases_out;
    sim.model
        .faults()
        .withhold_completion(Opcode::MANAGE_PAGES.0);
    assert!(sim.model.faults().page_request(4));
    let start = p.now();
    p.events();
    assert_eq!(
        hca.accounting().driver_pool.leases_out,
        leases_before + 4 + 1,
        "the 4 pages and the output mailbox of the GIVE on the page slot"
    );

    // The firmware keeps asking while the slot is stuck: requests wait up to the bound, the
    // rest is refused. Raised in batches the async EQ holds, drained between.
    let extra = MAX_PENDING_PAGE_REQUESTS as u64 + 40;
    let mut raised = 0;
    while raised < extra {
        for _ in 0..100.min(extra - raised) {
            assert!(sim.model.faults().page_request(1));
            raised += 1;
        }
        for _ in 0..10 {
            if hca.stats().pages.requests == 1 + raised {
                break;
            }
            p.events();
        }
    }
    let s = hca.stats();
    assert_eq!(s.pages.requests, 1 + extra);
    assert_eq!(s.pages.refused, 40, "beyond MAX_PENDING_PAGE_REQUESTS");

    // Nothing happens before the command timeout; at it, the device is fatal.
    let mut fatal = None;
    while fatal.is_none() && p.now() < start + CMD_TIMEOUT + Duration::from_secs(2) {
        fatal = p
            .events()
            .into_iter()
            .find(|e| matches!(e, DeviceEvent::Fatal { .. }));
        if fatal.is_none() {
            assert!(
                p.now() < start + CMD_TIMEOUT,
                "no fatal event at the timeout"
            );
            p.wait(p.now() + Duration::from_millis(100));
        }
    }
    let Some(DeviceEvent::Fatal { reason }) = fatal else {
        panic!("no fatal event within the command timeout");
    };
    assert!(reason.contains("MANAGE_PAGES"), "{reason}");
    assert!(p.now() >= start + CMD_TIMEOUT, "not before the timeout");
    let s = hca.stats();
    assert_eq!(s.pages.timeouts, 1);
    assert_eq!(s.cmd.timeouts, 1);
    assert!(
        hca.accounting().driver_pool.leases_out >= leases_before + 4,
        "the pages of the GIVE are kept until the quiesce"
    );
    assert!(matches!(
        hca.command(&QuerySpecialContexts),
        Err(DriverError::CommandAborted { .. })
    ));
    drop(p);
    hca.close().unwrap();
    sim.assert_clean(&hca);
}

/// Serve page events until `done` holds or a second of device time passes.
fn serve_until(p: &dyn HcaPort, done: impl Fn() -> bool) {
    let end = p.now() + Duration::from_secs(1);
    while !done() && p.now() < end {
        p.events();
        p.wait(p.now() + Duration::from_micros(50));
    }
    assert!(done(), "page requests not served within a second");
}

/// Pages the firmware asks for on behalf of other functions (two VFs here) are recorded
/// with their function and taken back from each at close, TAKE naming that function (the
/// kernel's per-function `page_root_xa`); a request that would go past
/// `max_firmware_pages` is answered CAN'T GIVE and counted; accounting ends at zero.
#[test]
fn pages_given_for_other_functions_are_reclaimed_per_function_and_capped() {
    let sim = SimHca::new();
    // Room for the function's own pages and 24 more.
    let own = {
        let probe = sim.open_strict();
        let n = sim.model.pages_held();
        probe.close().unwrap();
        sim.assert_clean(&probe);
        n
    };
    let hca = sim
        .open(HcaOptions {
            lease_mode: dma::LeaseMode::Strict,
            max_firmware_pages: own as usize + 24,
            ..HcaOptions::default()
        })
        .expect("bring-up");
    let p = port(&hca, 1);
    assert!(sim.model.faults().page_request_for(3, false, 8));
    assert!(sim.model.faults().page_request_for(7, false, 12));
    serve_until(p.as_ref(), || sim.model.pages_held() == own + 20);
    assert_eq!(sim.model.pages_held_for(3, false), 8);
    assert_eq!(sim.model.pages_held_for(7, false), 12);
    assert_eq!(sim.model.pages_held_for(0, false), own);

    // 20 of the 24 given: 5 more would pass the cap.
    assert!(sim.model.faults().page_request_for(3, false, 5));
    serve_until(p.as_ref(), || hca.stats().pages.cant_give == 1);
    let s = hca.stats();
    assert_eq!(s.pages.over_limit, 1);
    assert_eq!(s.pages.given, own + 20, "nothing given past the cap");
    assert_eq!(sim.model.pages_held_for(3, false), 8);
    // 4 still fit.
    assert!(sim.model.faults().page_request_for(7, false, 4));
    serve_until(p.as_ref(), || sim.model.pages_held_for(7, false) == 16);
    assert_eq!(hca.stats().pages.over_limit, 1);

    drop(p);
    hca.close().unwrap();
    assert_eq!(
        sim.model.pages_held_for(3, false),
        0,
        "VF 3's pages reclaimed"
    );
    assert_eq!(
        sim.model.pages_held_for(7, false),
        0,
        "VF 7's pages reclaimed"
    );
    let s = hca.stats();
    assert_eq!(
        s.pages.returned, s.pages.given,
        "every page came back by TAKE"
    );
    assert_eq!(s.pages.dropped_after_quiesce, 0);
    assert_eq!(s.pages.bad_returns, 0);
    sim.assert_clean(&hca);
}

/// A page request for the embedded-CPU function (bit 15 of the EQE's `ec_function` word, as
/// the firmware writes it) is served for that function, apart from function 0's own pages,
/// and its pages are taken back from it at close.
#[test]
fn pages_for_the_embedded_cpu_function_are_kept_apart_and_reclaimed() {
    let sim = SimHca::new();
    let hca = sim.open_strict();
    let own = sim.model.pages_held();
    let p = port(&hca, 1);
    assert!(sim.model.faults().page_request_for(0, true, 6));
    serve_until(p.as_ref(), || sim.model.pages_held_for(0, true) == 6);
    assert_eq!(sim.model.pages_held_for(0, false), own);
    drop(p);
    hca.close().unwrap();
    assert_eq!(sim.model.pages_held_for(0, true), 0, "reclaimed from it");
    let s = hca.stats();
    assert_eq!(s.pages.returned, s.pages.given);
    sim.assert_clean(&hca);
}

/// MANAGE_PAGES `op_mod`s (`MLX5_PAGES_CANT_GIVE`, `MLX5_PAGES_GIVE`, `MLX5_PAGES_TAKE`).
const CANT_GIVE: u16 = 0;
const GIVE: u16 = 1;
const TAKE: u16 = 2;

/// The command queue's last slot, where the driver puts every MANAGE_PAGES (the simulated
/// queue has 1 << LOG_CMDQ_SIZE slots).
const PAGE_SLOT: u8 = (1u8 << sim::mlx5::config::LOG_CMDQ_SIZE) - 1;

fn is_manage_pages(c: &FetchedCommand) -> bool {
    c.opcode == Opcode::MANAGE_PAGES.0
}

/// Page requests still queued when the HCA is closed are served before TEARDOWN_HCA, and
/// nothing is given after it (the kernel's `mlx5_pagealloc_stop` runs in `mlx5_unload`,
/// after the EQs are destroyed and before `mlx5_function_teardown`): from TEARDOWN_HCA on the
/// firmware sees only the reclaim TAKEs, then DISABLE_HCA; every page comes back.
#[test]
fn page_requests_queued_at_close_are_served_before_teardown_hca_and_none_after() {
    const REQUESTS: u64 = 40;
    let sim = SimHca::new();
    let hca = sim.open_strict();
    let p = port(&hca, 1);
    let requests_before = hca.stats().pages.requests;
    for _ in 0..REQUESTS {
        assert!(sim.model.faults().page_request_for(3, false, 1));
    }
    sim.model.record_commands(true);
    // One pass queues every request (they fit one EQ polling budget) and starts the first.
    p.events();
    assert_eq!(hca.stats().pages.requests, requests_before + REQUESTS);
    drop(p);
    hca.close().unwrap();

    let record = sim.model.take_command_record();
    let teardown = record
        .iter()
        .position(|c| c.opcode == Opcode::TEARDOWN_HCA.0)
        .expect("TEARDOWN_HCA sent");
    let gives_before = record[..teardown]
        .iter()
        .filter(|c| is_manage_pages(c) && c.op_mod == GIVE)
        .count();
    assert_eq!(
        gives_before as u64, REQUESTS,
        "every queued request served before TEARDOWN_HCA"
    );
    let after: Vec<(u16, u16)> = record[teardown + 1..]
        .iter()
        .map(|c| (c.opcode, c.op_mod))
        .collect();
    let (last, takes) = after.split_last().expect("commands after TEARDOWN_HCA");
    assert_eq!(last.0, Opcode::DISABLE_HCA.0, "{after:x?}");
    assert!(
        !takes.is_empty()
            && takes
                .iter()
                .all(|&(op, op_mod)| op == Opcode::MANAGE_PAGES.0 && op_mod == TAKE),
        "only reclaim TAKEs between TEARDOWN_HCA and DISABLE_HCA: {after:x?}"
    );

    let s = hca.stats();
    assert_eq!(s.pages.unserved_at_close, 0);
    assert_eq!(
        s.pages.returned, s.pages.given,
        "every page came back by TAKE"
    );
    assert_eq!(s.pages.dropped_after_quiesce, 0);
    assert_eq!(sim.model.pages_held_for(3, false), 0);
    assert_eq!(sim.model.counters().function_resets, 0, "a clean close");
    sim.assert_clean(&hca);
}

/// Every MANAGE_PAGES, from the boot and init GIVEs through those answering page requests
/// and one a caller issues to the reclaim TAKEs at close, goes on the page slot, and the
/// firmware never holds two at once (the kernel's `cmd_exec` sets `pages_queue` for every
/// MANAGE_PAGES: the last slot, under a semaphore of one). The caller's CAN'T GIVE is sent
/// while the simulated firmware holds the next command on an ordinary slot behind a page
/// request: on an ordinary slot it would be that command, and the GIVE answering the
/// request would reach the firmware while it still held it.
#[test]
fn every_manage_pages_goes_on_the_page_slot_one_at_a_time() {
    let sim = SimHca::new();
    sim.model.record_commands(true);
    let hca = sim.open_strict();
    let p = port(&hca, 1);
    let own = sim.model.pages_held();
    assert!(sim.model.faults().page_request(4));
    serve_until(p.as_ref(), || sim.model.pages_held() == own + 4);
    assert!(sim.model.faults().page_request(-2));
    serve_until(p.as_ref(), || sim.model.pages_held() == own + 2);

    sim.model.faults().page_request_during_command(1, 8);
    hca.command(&ManagePages {
        op: PagesOp::CantGive,
        function_id: 0,
        embedded_cpu_function: false,
    })
    .unwrap();
    // On the page slot the CAN'T GIVE was not held: the next command is.
    hca.command(&QuerySpecialContexts).unwrap();
    assert_eq!(sim.model.pages_held(), own + 10, "the 8 pages were given");
    drop(p);
    hca.close().unwrap();

    let record = sim.model.take_command_record();
    let pages: Vec<&FetchedCommand> = record.iter().filter(|c| is_manage_pages(c)).collect();
    let op_mods: Vec<u16> = pages.iter().map(|c| c.op_mod).collect();
    // Boot and init GIVEs, the requests' GIVE and TAKE, the caller's CAN'T GIVE, the GIVE of
    // the request raised behind the next command, then the reclaim.
    assert_eq!(
        op_mods[..6],
        [GIVE, GIVE, GIVE, TAKE, CANT_GIVE, GIVE],
        "{op_mods:?}"
    );
    assert!(
        op_mods.len() > 6 && op_mods[6..].iter().all(|&m| m == TAKE),
        "{op_mods:?}"
    );
    for c in &pages {
        assert_eq!(c.slot, PAGE_SLOT, "MANAGE_PAGES on slot {}: {c:?}", c.slot);
        assert!(
            c.others.iter().all(|&(_, op)| op != Opcode::MANAGE_PAGES.0),
            "two MANAGE_PAGES in the firmware at once: {c:?}"
        );
    }
    // The GIVE answering the request raised behind the caller's next command reached the
    // firmware while it held that command (on an ordinary slot), and nothing else.
    let held_behind = record
        .iter()
        .rfind(|c| c.opcode == Opcode::QUERY_SPECIAL_CONTEXTS.0)
        .expect("QUERY_SPECIAL_CONTEXTS sent");
    assert_ne!(held_behind.slot, PAGE_SLOT);
    assert_eq!(
        pages[5].others,
        vec![(held_behind.slot, Opcode::QUERY_SPECIAL_CONTEXTS.0)]
    );

    let s = hca.stats();
    assert_eq!(
        s.pages.returned, s.pages.given,
        "every page came back by TAKE"
    );
    assert_eq!(sim.model.counters().function_resets, 0, "a clean close");
    sim.assert_clean(&hca);
}

/// A caller's MANAGE_PAGES waiting for the page slot goes before the page requests still
/// queued: it waits behind the one in flight only (the kernel's page work runs one request
/// at a time, each taking the page slot's semaphore in turn), not for the whole queue.
#[test]
fn a_manage_pages_waiting_for_the_page_slot_goes_before_queued_page_requests() {
    let sim = SimHca::new();
    let hca = sim.open_strict();
    let p = port(&hca, 1);
    for _ in 0..5 {
        assert!(sim.model.faults().page_request_for(3, false, 1));
    }
    sim.model.record_commands(true);
    // Queues the five and starts the first on the page slot.
    p.events();
    assert!(hca.stats().pages.requests >= 5);
    hca.command(&ManagePages {
        op: PagesOp::CantGive,
        function_id: 3,
        embedded_cpu_function: false,
    })
    .unwrap();
    serve_until(p.as_ref(), || sim.model.pages_held_for(3, false) == 5);
    let op_mods: Vec<u16> = sim
        .model
        .take_command_record()
        .iter()
        .filter(|c| is_manage_pages(c))
        .map(|c| c.op_mod)
        .collect();
    assert_eq!(
        op_mods,
        [GIVE, CANT_GIVE, GIVE, GIVE, GIVE, GIVE],
        "the caller's CAN'T GIVE right after the GIVE in flight"
    );
    drop(p);
    hca.close().unwrap();
    let s = hca.stats();
    assert_eq!(
        s.pages.returned, s.pages.given,
        "every page came back by TAKE"
    );
    sim.assert_clean(&hca);
}

/// A caller's MANAGE_PAGES that the firmware loses: it times out after the command timeout
/// and the page slot stays lost (its mailboxes may still be written) while a page request
/// waits for it; another MANAGE_PAGES is refused at once. When the firmware gives the entry
/// back late, the slot comes back: the waiting request is served, nothing is fatal and the
/// close gives every page back by TAKE.
#[test]
fn a_lost_page_slot_comes_back_when_the_firmware_gives_its_entry_back_late() {
    let sim = SimHca::new();
    let hca = sim.open_strict();
    let p = port(&hca, 1);
    let own = sim.model.pages_held();
    let faults = sim.model.faults();
    faults.lose_commands(Opcode::MANAGE_PAGES.0, 1);
    let start = p.now();
    let cant_give = ManagePages {
        op: PagesOp::CantGive,
        function_id: 0,
        embedded_cpu_function: false,
    };
    let err = hca.command(&cant_give).unwrap_err();
    assert!(
        matches!(err, DriverError::CommandTimeout { opcode, .. } if opcode == Opcode::MANAGE_PAGES),
        "{err}"
    );
    assert!(p.now() >= start + CMD_TIMEOUT);
    assert!(sim.model.faults().page_request(4));
    let end = p.now() + Duration::from_secs(1);
    while p.now() < end {
        let events = p.events();
        assert!(
            !events
                .iter()
                .any(|e| matches!(e, DeviceEvent::Fatal { .. })),
            "{events:?}"
        );
        p.wait(p.now() + Duration::from_millis(10));
    }
    assert_eq!(hca.stats().pages.requests, 1);
    assert_eq!(
        sim.model.pages_held(),
        own,
        "the request waits for the slot"
    );
    let again = hca.command(&cant_give).unwrap_err();
    assert!(
        matches!(&again, DriverError::DeviceTimeout { what, .. } if what.contains("page slot")),
        "{again}"
    );

    assert_eq!(faults.run_lost_commands(), 1);
    serve_until(p.as_ref(), || sim.model.pages_held() == own + 4);
    assert_eq!(hca.stats().cmd.late_completions, 1);
    assert!(hca.fatal_reason().is_none());
    drop(p);
    hca.close().unwrap();
    let s = hca.stats();
    assert_eq!(
        s.pages.returned, s.pages.given,
        "every page came back by TAKE"
    );
    assert_eq!(
        sim.model.counters().function_resets,
        0,
        "nothing was left with the firmware"
    );
    sim.assert_clean(&hca);
}

/// A caller's MANAGE_PAGES that the firmware loses and never gives back: a page request
/// the firmware raises afterwards cannot be answered on the lost page slot. It is not left
/// waiting for good: once it has waited a command timeout for the slot, the device is
/// declared fatal (as when a page request's own MANAGE_PAGES times out), with a reason
/// naming the page slot; close resets the function and returns every lease.
#[test]
fn a_page_request_behind_a_page_slot_never_given_back_makes_the_device_fatal() {
    let sim = SimHca::new();
    let hca = sim.open_strict();
    let p = port(&hca, 1);
    sim.model.faults().lose_commands(Opcode::MANAGE_PAGES.0, 1);
    let err = hca
        .command(&ManagePages {
            op: PagesOp::CantGive,
            function_id: 0,
            embedded_cpu_function: false,
        })
        .unwrap_err();
    assert!(matches!(err, DriverError::CommandTimeout { .. }), "{err}");
    assert!(hca.fatal_reason().is_none(), "one timeout is not fatal");
    assert!(sim.model.faults().page_request(4));
    let start = p.now();
    let mut fatal = None;
    while fatal.is_none() && p.now() < start + 2 * CMD_TIMEOUT {
        fatal = p.events().into_iter().find_map(|e| match e {
            DeviceEvent::Fatal { reason } => Some(reason),
            _ => None,
        });
        p.wait(p.now() + Duration::from_millis(100));
    }
    let reason = fatal.expect("the page request is not left waiting for good");
    assert!(
        p.now() >= start + CMD_TIMEOUT,
        "not before the request waited a command timeout"
    );
    assert!(
        reason.contains("page slot") && reason.contains("MANAGE_PAGES"),
        "{reason}"
    );
    drop(p);
    hca.close().unwrap();
    assert_eq!(sim.model.counters().function_resets, 1);
    sim.assert_clean(&hca);
}

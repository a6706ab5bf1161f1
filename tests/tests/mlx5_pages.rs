//! Firmware page requests on the simulated ConnectX past bring-up: a MANAGE_PAGES the
//! firmware never completes, and a firmware that asks faster than the page slot answers.

use std::time::Duration;

use driver::mlx5::MAX_PENDING_PAGE_REQUESTS;
use driver::verbs::{DeviceEvent, Hca, HcaPort};
use driver::{DeviceBackend, DriverError};
use firmware_cmds::mlx5::Opcode;
use firmware_cmds::mlx5::ops::special_contexts::QuerySpecialContexts;
use hca_tests::mlx5::{SimHca, port};

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
    let a = hca.accounting();
    assert_eq!(a.driver_pool.leases_out, 0, "{a:?}");
    assert_eq!(a.mad_pool.leases_out, 0, "{a:?}");
    assert_eq!(a.firmware_pages, 0, "{a:?}");
    assert_eq!(sim.backend.dma_mapper().live_mappings(), 0);
    assert_eq!(sim.faults(), 0, "no IOMMU fault");
}

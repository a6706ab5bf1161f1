//! Error paths of the mlx5 driver on the simulated ConnectX: every error-CQE syndrome of the
//! kernel's table decoded to its work-completion status (an unknown one to GENERAL_ERR with
//! its vendor syndrome), a command with a bad parameter, page requests raised in the middle
//! of a command, and CQEs the driver must refuse.

use std::collections::HashSet;
use std::time::Duration;

use driver::verbs::{DeviceEvent, Hca, HcaPort, PostError, SpecialQp, WcOpcode, WcStatus};
use driver::{DeviceBackend, DriverError};
use firmware_cmds::mlx5::cmd::CmdStatus;
use firmware_cmds::mlx5::cqe::{Cqe, CqeBody, CqeOpcode, ReqCqe};
use firmware_cmds::mlx5::ops::mad_ifc::MadIfc;
use firmware_cmds::mlx5::ops::special_contexts::QuerySpecialContexts;
use firmware_cmds::mlx5::syndrome::CqeSyndrome;
use hca_tests::mlx5::{
    MAD, RECV_BUF, SimHca, gsi_send_setup, lease, mad, poll_n, port, recv_wr, send_wr, to_self,
};
use sim::Device;
use sim::mlx5::WqeQueue;

/// The kernel's table (`mlx5_handle_error_cqe`, reference hca-hardware.md §5.5) written out
/// by hand: syndrome, `enum ib_wc_status` value, its name.
const TABLE: [(u8, u8, &str); 13] = [
    (0x01, 1, "IB_WC_LOC_LEN_ERR"),
    (0x02, 2, "IB_WC_LOC_QP_OP_ERR"),
    (0x04, 4, "IB_WC_LOC_PROT_ERR"),
    (0x05, 5, "IB_WC_WR_FLUSH_ERR"),
    (0x06, 6, "IB_WC_MW_BIND_ERR"),
    (0x10, 7, "IB_WC_BAD_RESP_ERR"),
    (0x11, 8, "IB_WC_LOC_ACCESS_ERR"),
    (0x12, 9, "IB_WC_REM_INV_REQ_ERR"),
    (0x13, 10, "IB_WC_REM_ACCESS_ERR"),
    (0x14, 11, "IB_WC_REM_OP_ERR"),
    (0x15, 12, "IB_WC_RETRY_EXC_ERR"),
    (0x16, 13, "IB_WC_RNR_RETRY_EXC_ERR"),
    (0x22, 16, "IB_WC_REM_ABORT_ERR"),
];
/// IB_WC_GENERAL_ERR.
const GENERAL_ERR: u8 = 21;

#[test]
fn every_send_syndrome_decodes_to_its_wc_status_and_the_queue_recovers() {
    let sim = SimHca::new();
    let hca = sim.open_strict();
    let (p, lid, qpn, buf) = gsi_send_setup(&hca);
    let rbuf = lease(p.as_ref(), RECV_BUF);
    let mut cases: Vec<(u8, u8, &str)> = TABLE.to_vec();
    cases.push((0x7e, GENERAL_ERR, "IB_WC_GENERAL_ERR"));
    cases.push((0x00, GENERAL_ERR, "IB_WC_GENERAL_ERR"));
    for (i, &(synd, status, name)) in cases.iter().enumerate() {
        let vendor = 0x40 + i as u8;
        sim.model
            .faults()
            .wqe_error(qpn, WqeQueue::Send, 1, CqeSyndrome(synd), vendor);
        p.post_send(
            SpecialQp::Gsi,
            &send_wr(i as u64, &buf, to_self(lid, SpecialQp::Gsi)),
        )
        .unwrap();
        let wcs = poll_n(p.as_ref(), 1, Duration::from_secs(1));
        assert_eq!(wcs.len(), 1, "syndrome {synd:#04x}");
        let wc = wcs[0];
        assert_eq!(wc.wr_id, i as u64);
        assert_eq!(wc.opcode, WcOpcode::Send);
        assert_eq!(wc.status.code(), status, "syndrome {synd:#04x}");
        assert_eq!(wc.status.name(), name);
        assert_eq!(wc.vendor_err, u32::from(vendor), "vendor syndrome kept");
        // The send queue stopped; posting is refused until it is recovered, as a send the
        // hardware would flush.
        assert!(matches!(
            p.post_send(
                SpecialQp::Gsi,
                &send_wr(99, &buf, to_self(lid, SpecialQp::Gsi))
            ),
            Err(PostError::SendQueueError(_))
        ));
        p.recover_send_queue(SpecialQp::Gsi).unwrap();
    }
    // After all that, a send and a receive still work end to end.
    p.post_recv(SpecialQp::Gsi, &recv_wr(500, &rbuf)).unwrap();
    p.post_send(
        SpecialQp::Gsi,
        &send_wr(501, &buf, to_self(lid, SpecialQp::Gsi)),
    )
    .unwrap();
    let wcs = poll_n(p.as_ref(), 2, Duration::from_secs(1));
    assert_eq!(wcs.len(), 2);
    assert!(wcs.iter().all(|w| w.status == WcStatus::Success), "{wcs:?}");
    drop((buf, rbuf));
    hca.close().unwrap();
    sim.assert_clean(&hca);
}

#[test]
fn every_receive_syndrome_decodes_to_its_wc_status_and_reports_the_qp_in_error() {
    let sim = SimHca::new();
    let mut cases: Vec<(u8, u8, &str)> = TABLE.to_vec();
    cases.push((0xa5, GENERAL_ERR, "IB_WC_GENERAL_ERR"));
    for (i, &(synd, status, name)) in cases.iter().enumerate() {
        // A receive error leaves QP1 in ERR: each case gets a fresh bring-up.
        let hca = sim.open_strict();
        let p = port(&hca, 1);
        let lid = p.attrs().unwrap().lid;
        let qpn = p.hw_qpn(SpecialQp::Gsi);
        let vendor = 0x80 + i as u8;
        sim.model
            .faults()
            .wqe_error(qpn, WqeQueue::Recv, 1, CqeSyndrome(synd), vendor);
        let r1 = lease(p.as_ref(), RECV_BUF);
        let r2 = lease(p.as_ref(), RECV_BUF);
        let s = lease(p.as_ref(), MAD);
        s.write(0, &mad(0x09, 7, 7)).unwrap();
        p.post_recv(SpecialQp::Gsi, &recv_wr(10, &r1)).unwrap();
        p.post_recv(SpecialQp::Gsi, &recv_wr(11, &r2)).unwrap();
        p.post_send(
            SpecialQp::Gsi,
            &send_wr(1, &s, to_self(lid, SpecialQp::Gsi)),
        )
        .unwrap();
        // The send, the failed receive, and the second receive flushed by the device.
        let wcs = poll_n(p.as_ref(), 3, Duration::from_secs(1));
        let recv: Vec<_> = wcs.iter().filter(|w| w.opcode == WcOpcode::Recv).collect();
        assert_eq!(recv.len(), 2, "syndrome {synd:#04x}: {wcs:?}");
        assert_eq!(recv[0].wr_id, 10);
        assert_eq!(recv[0].status.code(), status, "syndrome {synd:#04x}");
        assert_eq!(recv[0].status.name(), name);
        assert_eq!(recv[0].vendor_err, u32::from(vendor));
        assert_eq!(recv[1].wr_id, 11);
        assert_eq!(recv[1].status, WcStatus::WrFlushErr);
        let events = p.events();
        assert_eq!(
            events
                .iter()
                .filter(|e| **e
                    == DeviceEvent::QpFatal {
                        port: 1,
                        qp: SpecialQp::Gsi
                    })
                .count(),
            1,
            "{events:?}"
        );
        assert!(matches!(
            p.post_recv(SpecialQp::Gsi, &recv_wr(12, &r1)),
            Err(PostError::NotReady(_))
        ));
        drop((r1, r2, s));
        hca.close().unwrap();
        sim.assert_clean(&hca);
    }
}

#[test]
fn a_command_with_a_bad_parameter_returns_the_named_status() {
    let sim = SimHca::new();
    let hca = sim.open_strict();
    let err = hca
        .command(&MadIfc {
            ignore_mkey: true,
            ignore_bkey: true,
            remote_lid: 0,
            port: 9,
            mad: [0; 256],
        })
        .unwrap_err();
    match &err {
        DriverError::CommandFailed { status, .. } => {
            assert_eq!(*status, CmdStatus::BAD_PARAM_ERR);
        }
        other => panic!("{other}"),
    }
    let msg = err.to_string();
    assert!(
        msg.contains("MAD_IFC") && msg.contains("BAD_PARAM_ERR"),
        "{msg}"
    );
    // The queue is not harmed.
    hca.command(&QuerySpecialContexts).unwrap();
    hca.close().unwrap();
    sim.assert_clean(&hca);
}

#[test]
fn a_page_request_raised_while_a_command_waits_is_served_and_the_command_completes() {
    let sim = SimHca::new();
    let hca = sim.open_strict();
    let before = sim.model.pages_held();
    sim.model.faults().page_request_during_command(1, 8);
    let out = hca.command(&QuerySpecialContexts).unwrap();
    assert_ne!(out.resd_lkey, 0);
    assert_eq!(sim.model.pages_held(), before + 8, "the 8 pages were given");
    let s = hca.stats();
    assert_eq!(s.pages.requests, 1);
    assert_eq!(s.pages.given, before + 8);
    // Pages offered back mid-command are taken back the same way.
    sim.model.faults().page_request_during_command(1, -5);
    hca.command(&QuerySpecialContexts).unwrap();
    assert_eq!(sim.model.pages_held(), before + 3);
    assert_eq!(hca.stats().pages.returned, 5);
    // A request with no command waiting is served by the port's progress.
    assert!(sim.model.faults().page_request(4));
    let p = port(&hca, 1);
    let end = p.now() + Duration::from_millis(100);
    while sim.model.pages_held() != before + 7 && p.now() < end {
        p.events();
        p.wait(p.now() + Duration::from_micros(50));
    }
    assert_eq!(sim.model.pages_held(), before + 7);
    // A request the driver will not satisfy is answered CAN'T GIVE, and the firmware drops it.
    let huge = driver::mlx5::MAX_PAGES_PER_REQUEST as i32 + 1;
    assert!(sim.model.faults().page_request(huge));
    let end = p.now() + Duration::from_millis(100);
    while hca.stats().pages.cant_give == 0 && p.now() < end {
        p.events();
        p.wait(p.now() + Duration::from_micros(50));
    }
    p.events();
    assert_eq!(hca.stats().pages.cant_give, 1);
    assert_eq!(sim.model.pages_requested(), 0, "the request was settled");
    assert_eq!(sim.model.pages_held(), before + 7, "no page given");
    hca.close().unwrap();
    sim.assert_clean(&hca);
}

/// Write `cqe` where the device writes the port's next CQE, with the owner bit software
/// expects, as a misbehaving device would.
fn forge_cqe(sim: &SimHca, p: &driver::mlx5::Mlx5Port, mut cqe: Cqe) {
    let pos = p.cq_position().unwrap();
    cqe.owner = (pos.next / pos.nent) & 1 == 1;
    let at = pos.iova + u64::from(pos.next % pos.nent) * 64;
    sim.model.iommu().write(at, &cqe.encode()).unwrap();
}

fn req_cqe(qpn: u32, wqe_counter: u16) -> Cqe {
    Cqe {
        opcode: CqeOpcode::REQ,
        format: 0,
        owner: false,
        qpn,
        wqe_counter,
        signature: 0,
        body: CqeBody::Requester(ReqCqe {
            wqe_opcode: 0x0a,
            byte_cnt: 0,
            timestamp: 0,
        }),
    }
}

/// Post sends the device completes late, forge `bad`, and check the driver refuses it, makes
/// the device fatal, and flushes every outstanding work request once in software.
fn refuse(bad: impl Fn(&driver::mlx5::Mlx5Port) -> Cqe, what: &str) {
    let sim = SimHca::new();
    let hca = sim.open_strict();
    let p = port(&hca, 1);
    let lid = p.attrs().unwrap().lid;
    sim.model.faults().cqe_delay(Duration::from_secs(5));
    let s = lease(p.as_ref(), MAD);
    s.write(0, &mad(0x09, 3, 3)).unwrap();
    let r = lease(p.as_ref(), RECV_BUF);
    p.post_recv(SpecialQp::Gsi, &recv_wr(100, &r)).unwrap();
    for i in 0..3 {
        p.post_send(
            SpecialQp::Gsi,
            &send_wr(i, &s, to_self(lid, SpecialQp::Gsi)),
        )
        .unwrap();
    }
    forge_cqe(&sim, &p, bad(&p));
    let mut out = Vec::new();
    let err = p.poll(&mut out, 16).unwrap_err();
    assert!(out.is_empty());
    assert!(
        matches!(&err, DriverError::BadDeviceValue { what: "CQE", .. }),
        "{err}"
    );
    assert!(err.to_string().contains(what), "{err}");
    assert_eq!(hca.stats().bad_cqes, 1);
    let events = p.events();
    assert!(
        events
            .iter()
            .any(|e| matches!(e, DeviceEvent::Fatal { reason } if reason.contains("rejected CQE"))),
        "{events:?}"
    );
    // Every outstanding work request comes back once, flushed in software.
    let wcs = poll_n(p.as_ref(), 4, Duration::from_secs(10));
    let ids: HashSet<u64> = wcs.iter().map(|w| w.wr_id).collect();
    assert_eq!(ids, HashSet::from([0, 1, 2, 100]), "{wcs:?}");
    for w in &wcs {
        assert_eq!((w.status, w.vendor_err), (WcStatus::WrFlushErr, 5), "{w:?}");
    }
    let mut more = Vec::new();
    assert_eq!(p.poll(&mut more, 16).unwrap(), 0, "nothing twice");
    assert!(matches!(
        p.post_send(
            SpecialQp::Gsi,
            &send_wr(9, &s, to_self(lid, SpecialQp::Gsi))
        ),
        Err(PostError::DeviceFatal(_))
    ));
    drop((s, r));
    hca.close().unwrap();
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
fn a_cqe_with_a_wqe_counter_outside_the_outstanding_range_is_refused() {
    refuse(
        |p| req_cqe(p.hw_qpn(SpecialQp::Gsi), 0x50),
        "wqe_counter 80",
    );
}

#[test]
fn a_cqe_with_an_unknown_opcode_is_refused() {
    refuse(
        |p| Cqe {
            opcode: CqeOpcode(9),
            body: CqeBody::Other(Box::new([0; 64])),
            ..req_cqe(p.hw_qpn(SpecialQp::Gsi), 0)
        },
        "opcode",
    );
}

#[test]
fn a_cqe_naming_another_qp_is_refused() {
    refuse(|_| req_cqe(0x00ab_cdef, 0), "QPN 0xabcdef");
}

#[test]
fn a_receive_longer_than_its_buffer_is_refused() {
    refuse(
        |p| Cqe {
            opcode: CqeOpcode::RESP_SEND,
            body: CqeBody::Responder(firmware_cmds::mlx5::cqe::RespCqe {
                byte_cnt: RECV_BUF as u32 + 1,
                ..Default::default()
            }),
            ..req_cqe(p.hw_qpn(SpecialQp::Gsi), 0)
        },
        "297 bytes for a 296-byte buffer",
    );
}

/// Closing the HCA while another thread has firmware commands in flight: the other thread's
/// commands end with a result or [`DriverError::Closed`] (never a panic, never a command sent
/// after the queue memory is gone), and everything is released.
#[test]
fn closing_while_another_thread_runs_commands_ends_them_with_closed() {
    for round in 0..20 {
        let sim = SimHca::new();
        let hca = sim.open_strict();
        let (running, started) = std::sync::mpsc::channel();
        let worker = {
            let hca = hca.clone();
            std::thread::spawn(move || {
                let mut ok = 0u32;
                loop {
                    match hca.command(&QuerySpecialContexts) {
                        Ok(_) => {
                            if ok == 0 {
                                let _ = running.send(());
                            }
                            ok += 1;
                        }
                        Err(DriverError::Closed) => return ok,
                        // Commands that reach the firmware after TEARDOWN_HCA are refused by
                        // it; that is a result too.
                        Err(DriverError::CommandFailed { .. }) => {}
                        Err(e) => panic!("round {round}: unexpected error {e:?}"),
                    }
                }
            })
        };
        // Close only once the worker's commands run; rounds vary the overlap.
        started
            .recv()
            .unwrap_or_else(|_| panic!("round {round}: no command of the worker completed"));
        let p = port(&hca, 1);
        p.wait(p.now() + Duration::from_micros(50 * round));
        hca.close()
            .unwrap_or_else(|e| panic!("round {round}: close: {e}"));
        let ok = worker
            .join()
            .unwrap_or_else(|_| panic!("round {round}: the commanding thread panicked"));
        assert!(
            matches!(hca.command(&QuerySpecialContexts), Err(DriverError::Closed)),
            "round {round}: a command after close"
        );
        assert!(ok > 0, "round {round}");
        drop(p);
        sim.assert_clean(&hca);
    }
}

/// A device that writes more EQEs at once than one drain pass takes: each pass takes at most
/// the kernel's `MLX5_EQ_POLLING_BUDGET` (128) and the rest is left for the next, which the
/// port's `wait` does not sleep through; every request is served in the end.
#[test]
fn a_burst_of_eqes_is_drained_a_budget_per_pass() {
    const BURST: u32 = 300;
    let sim = SimHca::new();
    let hca = sim.open_strict();
    let p = port(&hca, 1);
    let before = sim.model.pages_held();
    let eqes = hca.stats().eqes;
    for _ in 0..BURST {
        assert!(sim.model.faults().page_request(1));
    }
    p.events();
    assert_eq!(hca.stats().eqes - eqes, 128, "one pass took one budget");
    assert_eq!(hca.stats().pages.requests, 128);
    // The rest comes on later passes; a wait with EQEs left returns at once.
    let start = p.now();
    p.wait(start + Duration::from_secs(1));
    assert_eq!(p.now(), start, "no sleep with EQEs left in the ring");
    let end = p.now() + Duration::from_millis(500);
    while sim.model.pages_held() != before + u64::from(BURST) && p.now() < end {
        p.events();
        p.wait(p.now() + Duration::from_micros(50));
    }
    assert_eq!(sim.model.pages_held(), before + u64::from(BURST));
    let s = hca.stats();
    assert_eq!(s.pages.requests, u64::from(BURST));
    assert_eq!(s.bad_eqes, 0);
    drop(p);
    hca.close().unwrap();
    sim.assert_clean(&hca);
}

/// A work-queue catastrophic error event (WQ_CATAS_ERROR) moves the QP to ERR in software at
/// once: posts are refused as for any QP in error, before any error CQE is polled, and the
/// MAD layer is told once (the flush CQE polled later, finding the QP in ERR already, tells
/// nobody again).
#[test]
fn a_qp_error_event_refuses_posts_before_any_error_cqe_is_polled() {
    let sim = SimHca::new();
    let hca = sim.open_strict();
    let p = port(&hca, 1);
    let lid = p.attrs().unwrap().lid;
    let qpn = p.hw_qpn(SpecialQp::Gsi);
    let r = lease(p.as_ref(), RECV_BUF);
    p.post_recv(SpecialQp::Gsi, &recv_wr(10, &r)).unwrap();
    assert!(sim.model.faults().qp_to_error(qpn));
    let is_qp_fatal = |e: &DeviceEvent| {
        *e == DeviceEvent::QpFatal {
            port: 1,
            qp: SpecialQp::Gsi,
        }
    };
    let mut told = 0;
    let end = p.now() + Duration::from_secs(1);
    while told == 0 && p.now() < end {
        told += p.events().iter().filter(|e| is_qp_fatal(e)).count();
        p.wait(p.now() + Duration::from_millis(1));
    }
    assert_eq!(told, 1, "the event is told once");
    // No CQE was polled yet: the refusal comes from the event.
    let s = lease(p.as_ref(), MAD);
    s.write(0, &mad(0x09, 7, 7)).unwrap();
    assert!(matches!(
        p.post_send(
            SpecialQp::Gsi,
            &send_wr(1, &s, to_self(lid, SpecialQp::Gsi))
        ),
        Err(PostError::NotReady(_))
    ));
    let r2 = lease(p.as_ref(), RECV_BUF);
    assert!(matches!(
        p.post_recv(SpecialQp::Gsi, &recv_wr(11, &r2)),
        Err(PostError::NotReady(_))
    ));
    // The receive comes back flushed; nothing more is told.
    let wcs = poll_n(p.as_ref(), 1, Duration::from_secs(1));
    assert_eq!(wcs.len(), 1, "{wcs:?}");
    assert_eq!((wcs[0].wr_id, wcs[0].status), (10, WcStatus::WrFlushErr));
    let events = p.events();
    assert!(!events.iter().any(is_qp_fatal), "told twice: {events:?}");
    // QP0 is untouched.
    let s0 = lease(p.as_ref(), RECV_BUF);
    p.post_recv(SpecialQp::Smi, &recv_wr(20, &s0)).unwrap();
    drop((r, r2, s));
    hca.close().unwrap();
    drop(s0);
    sim.assert_clean(&hca);
}

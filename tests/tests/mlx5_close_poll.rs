//! A poll made while the HCA closes: the close takes each special QP out of its port (2RST,
//! software flush, DESTROY_QP) before it destroys the CQ, so a poll in between can meet a CQE
//! of a QP already taken. That CQE is not the device's misbehaviour: its work request is
//! completed once, from the close's software flush, and the close stays clean (no rejected
//! CQE, no fatal state, no function reset).
//!
//! The closing thread is held, deterministically, inside the 2RST of QP0 (the first QP the
//! close takes): the simulated firmware loses that command, a simulator event holds the thread
//! that waits for it as soon as device time passes, and the test polls meanwhile. The lost
//! command is then run late, so the close goes on as if it had completed normally.

use std::sync::mpsc;
use std::time::Duration;

use driver::verbs::{DeviceEvent, Hca, HcaPort, SpecialQp, WcOpcode, WcStatus};
use firmware_cmds::mlx5::opcode::Opcode;
use hca_tests::mlx5::{
    MAD, SimHca, hold_once_a_command_is_lost, lease, mad, poll_n, port, send_wr, to_self,
};

/// Real time after which a thread that has not answered counts as hung.
const HANG_LIMIT: Duration = Duration::from_secs(120);

/// Name of the thread that closes.
const CLOSER: &str = "close";

#[test]
fn a_poll_during_the_close_drops_cqes_of_qps_already_taken_and_the_close_stays_clean() {
    let sim = SimHca::new();
    let hca = sim.open_strict();
    let p = port(&hca, 1);
    let lid = p.attrs().unwrap().lid;
    let buf = lease(p.as_ref(), MAD);
    buf.write(0, &mad(0x01, 1, 1)).unwrap();

    // A send on QP0, then one on QP1, whose CQEs nobody polls before the close.
    let cqes = sim.model.counters().cqes;
    p.post_send(
        SpecialQp::Smi,
        &send_wr(1, &buf, to_self(lid, SpecialQp::Smi)),
    )
    .unwrap();
    p.post_send(
        SpecialQp::Gsi,
        &send_wr(2, &buf, to_self(lid, SpecialQp::Gsi)),
    )
    .unwrap();
    assert_eq!(
        sim.model.counters().cqes,
        cqes + 2,
        "both send CQEs are in the CQ"
    );

    // The close's first command is QP0's 2RST, taken out of its slot just before: it is lost
    // and the closing thread held in its wait.
    let faults = sim.model.faults();
    faults.lose_commands(Opcode::QP_2RST_QP.0, 1);
    let (entered_tx, entered) = mpsc::channel();
    let (release, release_rx) = mpsc::channel();
    hold_once_a_command_is_lost(sim.model.clone(), entered_tx, release_rx, HANG_LIMIT);
    let closer = {
        let hca = hca.clone();
        std::thread::Builder::new()
            .name(CLOSER.into())
            .spawn(move || hca.close())
            .unwrap()
    };
    let holder = entered
        .recv_timeout(HANG_LIMIT)
        .expect("the close's 2RST was fetched and its wait let device time pass");
    assert_eq!(holder.as_deref(), Some(CLOSER));
    assert_eq!(p.hw_qpn(SpecialQp::Smi), 0, "QP0 is taken");
    assert_ne!(p.hw_qpn(SpecialQp::Gsi), 0, "QP1 is not yet");

    // QP0's CQE is dropped; QP1's, behind it, completes its send.
    let mut out = Vec::new();
    let n = p
        .poll(&mut out, 16)
        .expect("a CQE of a QP the close took is not a bad CQE");
    assert_eq!(n, 1, "{out:?}");
    assert_eq!(
        (out[0].wr_id, out[0].qp, out[0].status),
        (2, SpecialQp::Gsi, WcStatus::Success)
    );
    assert_eq!(hca.stats().bad_cqes, 0);

    // The firmware runs the lost 2RST late: the close goes on as if it had completed.
    assert_eq!(faults.run_lost_commands(), 1);
    release.send(()).unwrap();
    closer
        .join()
        .expect("the closing thread")
        .expect("a clean close");

    // QP0's send completes once, from the close's software flush.
    let wcs = poll_n(p.as_ref(), 2, Duration::from_millis(10));
    assert_eq!(wcs.len(), 1, "{wcs:?}");
    assert_eq!(
        (wcs[0].wr_id, wcs[0].qp, wcs[0].opcode, wcs[0].status),
        (1, SpecialQp::Smi, WcOpcode::Send, WcStatus::WrFlushErr)
    );
    let events = p.events();
    assert!(
        !events
            .iter()
            .any(|e| matches!(e, DeviceEvent::Fatal { .. } | DeviceEvent::Removed)),
        "{events:?}"
    );
    assert_eq!(hca.stats().bad_cqes, 0);
    assert_eq!(
        sim.model.counters().function_resets,
        0,
        "a clean close needs no reset"
    );
    drop(buf);
    sim.assert_clean(&hca);
}

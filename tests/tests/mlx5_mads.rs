//! Raw 256-byte MADs through QP0 and QP1 of the simulated ConnectX, looped back to the port's
//! own LID: what arrives is what was sent, every work request completes exactly once with the
//! fields the device reported, and nothing is left behind.

use std::collections::HashSet;
use std::time::Duration;

use driver::verbs::{GRH_LEN, Hca, HcaPort, PostError, SpecialQp, WcOpcode, WcStatus};
use hca_tests::mlx5::{MAD, RECV_BUF, SimHca, lease, mad, poll_n, port, recv_wr, send_wr, to_self};

/// Send `count` MADs of `class` on `qp` to our own LID and check each arrives intact.
fn loop_back(qp: SpecialQp, class: u8, count: u64) {
    let sim = SimHca::new();
    let hca = sim.open_strict();
    let p = port(&hca, 1);
    let lid = p.attrs().unwrap().lid;
    let recvs: Vec<_> = (0..count).map(|_| lease(p.as_ref(), RECV_BUF)).collect();
    for (i, b) in recvs.iter().enumerate() {
        p.post_recv(qp, &recv_wr(1000 + i as u64, b)).unwrap();
    }
    let mut sent = Vec::new();
    let sends: Vec<_> = (0..count)
        .map(|i| {
            let b = lease(p.as_ref(), MAD);
            let m = mad(class, 0x1234_0000 + i, i as u8 * 7);
            b.write(0, &m).unwrap();
            sent.push(m);
            b
        })
        .collect();
    for (i, b) in sends.iter().enumerate() {
        p.post_send(qp, &send_wr(i as u64, b, to_self(lid, qp)))
            .unwrap();
    }
    let wcs = poll_n(p.as_ref(), 2 * count as usize, Duration::from_secs(1));
    assert_eq!(wcs.len(), 2 * count as usize, "{wcs:?}");
    let mut ids = HashSet::new();
    for wc in &wcs {
        assert!(ids.insert(wc.wr_id), "{} completed twice", wc.wr_id);
        assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
        assert_eq!(wc.qp, qp);
        match wc.opcode {
            WcOpcode::Send => assert!(wc.wr_id < count),
            WcOpcode::Recv => {
                let i = (wc.wr_id - 1000) as usize;
                assert_eq!(wc.byte_len, GRH_LEN + MAD as u32, "GRH area + MAD");
                assert_eq!(wc.src_qp, qp.qpn(), "source QP as the wire knows it");
                assert_eq!(wc.slid, lid);
                assert!(!wc.grh, "LID-routed: no GRH");
                let mut got = [0u8; MAD];
                recvs[i].read(GRH_LEN as usize, &mut got).unwrap();
                // Receives complete in posting order, sends in the same order: receive i
                // holds MAD i.
                assert_eq!(got[..], sent[i][..], "MAD {i} changed on the way");
            }
        }
    }
    assert_eq!(ids.len(), 2 * count as usize);
    assert_eq!(p.outstanding(), 0);
    drop(sends);
    drop(recvs);
    hca.close().unwrap();
    sim.assert_clean(&hca);
}

#[test]
fn smps_on_qp0_come_back_intact() {
    loop_back(SpecialQp::Smi, 0x01, 16);
}

#[test]
fn gsi_mads_on_qp1_come_back_intact() {
    loop_back(SpecialQp::Gsi, 0x09, 16);
}

#[test]
fn more_mads_than_the_rings_hold_wrap_around_them() {
    // 128 sends and 256 receives per QP: 600 round trips wrap both rings and the CQ.
    let sim = SimHca::new();
    let hca = sim.open_strict();
    let p = port(&hca, 1);
    let lid = p.attrs().unwrap().lid;
    let rbuf = lease(p.as_ref(), RECV_BUF);
    let sbuf = lease(p.as_ref(), MAD);
    let mut completed = 0;
    for i in 0..600u64 {
        let m = mad(0x09, i, i as u8);
        sbuf.write(0, &m).unwrap();
        p.post_recv(SpecialQp::Gsi, &recv_wr(i, &rbuf)).unwrap();
        p.post_send(
            SpecialQp::Gsi,
            &send_wr(i, &sbuf, to_self(lid, SpecialQp::Gsi)),
        )
        .unwrap();
        let wcs = poll_n(p.as_ref(), 2, Duration::from_secs(1));
        assert_eq!(wcs.len(), 2, "round {i}: {wcs:?}");
        let mut got = [0u8; MAD];
        rbuf.read(GRH_LEN as usize, &mut got).unwrap();
        assert_eq!(got[..], m[..], "round {i}");
        completed += wcs.len();
    }
    assert_eq!(completed, 1200);
    drop((rbuf, sbuf));
    hca.close().unwrap();
    sim.assert_clean(&hca);
}

#[test]
fn a_full_send_queue_refuses_posts_without_consuming_them() {
    let sim = SimHca::new();
    let hca = sim.open_strict();
    let p = port(&hca, 1);
    let (depth, _) = p.queue_depth(SpecialQp::Gsi);
    // Port down on the far side is not needed: nothing is polled, so nothing completes.
    let b = lease(p.as_ref(), MAD);
    b.write(0, &mad(0x09, 1, 1)).unwrap();
    let dest = to_self(0x7777, SpecialQp::Gsi);
    for i in 0..depth {
        p.post_send(SpecialQp::Gsi, &send_wr(u64::from(i), &b, dest))
            .unwrap();
    }
    assert_eq!(
        p.post_send(SpecialQp::Gsi, &send_wr(9999, &b, dest)),
        Err(PostError::QueueFull)
    );
    let wcs = poll_n(p.as_ref(), depth as usize, Duration::from_secs(1));
    assert_eq!(wcs.len(), depth as usize);
    assert!(wcs.iter().all(|w| w.wr_id != 9999));
    drop(b);
    hca.close().unwrap();
    sim.assert_clean(&hca);
}

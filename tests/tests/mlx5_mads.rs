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

#[test]
fn posts_from_several_threads_and_commands_meanwhile_complete_exactly_once() {
    const THREADS: u64 = 4;
    const EACH: u64 = 50;
    let sim = SimHca::new();
    let hca = sim.open(driver::verbs::HcaOptions::default()).unwrap();
    let p = port(&hca, 1);
    let lid = p.attrs().unwrap().lid;
    let recvs: Vec<_> = (0..THREADS * EACH)
        .map(|i| {
            let b = lease(p.as_ref(), RECV_BUF);
            p.post_recv(SpecialQp::Gsi, &recv_wr(10_000 + i, &b))
                .unwrap();
            b
        })
        .collect();
    let wcs = std::thread::scope(|s| {
        for t in 0..THREADS {
            let p = p.clone();
            s.spawn(move || {
                let buf = lease(p.as_ref(), MAD);
                buf.write(0, &mad(0x09, t, t as u8)).unwrap();
                for i in 0..EACH {
                    let wr = send_wr(t * EACH + i, &buf, to_self(lid, SpecialQp::Gsi));
                    loop {
                        match p.post_send(SpecialQp::Gsi, &wr) {
                            Ok(()) => break,
                            Err(PostError::QueueFull) => {
                                p.wait(p.now() + Duration::from_micros(20));
                            }
                            Err(e) => panic!("{e}"),
                        }
                    }
                }
                // The buffer must outlive its sends: wait until this thread's are done.
                let end = p.now() + Duration::from_secs(5);
                while p.outstanding() > 0 && p.now() < end {
                    p.wait(p.now() + Duration::from_micros(50));
                }
            });
        }
        // Firmware commands from another thread while the queues run.
        let pc = p.clone();
        s.spawn(move || {
            for _ in 0..20 {
                assert_eq!(pc.attrs().unwrap().lid, lid);
            }
        });
        poll_n(
            p.as_ref(),
            (2 * THREADS * EACH) as usize,
            Duration::from_secs(5),
        )
    });
    assert_eq!(wcs.len(), (2 * THREADS * EACH) as usize);
    let mut ids = HashSet::new();
    for wc in &wcs {
        assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
        assert!(ids.insert(wc.wr_id), "{} twice", wc.wr_id);
    }
    drop(recvs);
    hca.close().unwrap();
    sim.assert_clean(&hca);
}

#[test]
fn mads_loop_back_on_the_real_clock_too() {
    let sim = SimHca::with_clock(sim::ClockMode::Real);
    let started = std::time::Instant::now();
    let hca = sim.open_strict();
    let p = port(&hca, 1);
    let lid = p.attrs().unwrap().lid;
    for qp in [SpecialQp::Smi, SpecialQp::Gsi] {
        let r = lease(p.as_ref(), RECV_BUF);
        let s = lease(p.as_ref(), MAD);
        let class = if qp == SpecialQp::Smi { 0x01 } else { 0x09 };
        let m = mad(class, 5, 5);
        s.write(0, &m).unwrap();
        p.post_recv(qp, &recv_wr(1, &r)).unwrap();
        p.post_send(qp, &send_wr(2, &s, to_self(lid, qp))).unwrap();
        let wcs = poll_n(p.as_ref(), 2, Duration::from_secs(5));
        assert_eq!(wcs.len(), 2, "{wcs:?}");
        let mut got = [0u8; MAD];
        r.read(GRH_LEN as usize, &mut got).unwrap();
        assert_eq!(got[..], m[..]);
    }
    hca.close().unwrap();
    sim.assert_clean(&hca);
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn on_the_real_clock_a_loopback_completes_within_its_post_and_polling_raises_no_interrupt() {
    let sim = SimHca::with_clock(sim::ClockMode::Real);
    let hca = sim.open_strict();
    let p = port(&hca, 1);
    let lid = p.attrs().unwrap().lid;
    let qp = SpecialQp::Gsi;
    let r = lease(p.as_ref(), RECV_BUF);
    let s = lease(p.as_ref(), MAD);
    s.write(0, &mad(0x09, 9, 9)).unwrap();
    // The CQ may be armed since its creation: a first round trip takes that event.
    p.post_recv(qp, &recv_wr(99, &r)).unwrap();
    p.post_send(qp, &send_wr(99, &s, to_self(lid, qp))).unwrap();
    assert_eq!(poll_n(p.as_ref(), 2, Duration::from_secs(5)).len(), 2);
    let before = sim.model.counters().interrupts;
    for i in 0..8 {
        p.post_recv(qp, &recv_wr(100 + i, &r)).unwrap();
        p.post_send(qp, &send_wr(i, &s, to_self(lid, qp))).unwrap();
        let mut out = Vec::new();
        p.poll(&mut out, 4).unwrap();
        assert_eq!(
            out.len(),
            2,
            "the send's and the receive's completions are there when the post returns: {out:?}"
        );
    }
    assert_eq!(
        sim.model.counters().interrupts,
        before,
        "no interrupt while the CQ is only polled"
    );
    // A wait that may block arms the CQ: the next completion raises the event that ends it.
    // (A count left on the eventfd by the first round trip's event ends the first wait at
    // once, so that the caller polls before it blocks; the second one arms.)
    p.wait(p.now() + Duration::from_millis(1));
    p.wait(p.now() + Duration::from_millis(1));
    p.post_recv(qp, &recv_wr(200, &r)).unwrap();
    p.post_send(qp, &send_wr(9, &s, to_self(lid, qp))).unwrap();
    assert_eq!(
        sim.model.counters().interrupts,
        before + 1,
        "armed before the wait: one event"
    );
    assert_eq!(poll_n(p.as_ref(), 2, Duration::from_secs(5)).len(), 2);
    drop((r, s));
    hca.close().unwrap();
    sim.assert_clean(&hca);
}

/// The special QPs take the P_Key index of the default P_Key (`ib_mad_port_start`), not
/// index 0: on a port whose table holds 0x8001 at index 0 and 0xFFFF at index 1, a MAD sent
/// on QP1 carries 0xFFFF, so it comes back reported at P_Key index 1 (0x8001 would be
/// index 0); a GSI send naming another index is refused, since every send carries the QP's
/// P_Key.
#[test]
fn the_special_qps_use_the_index_of_the_default_pkey() {
    let sim =
        SimHca::with_config_and_pkeys(sim::mlx5::Mlx5Config::default(), Some(&[0x8001, 0xffff]));
    let hca = sim.open_strict();
    let p = port(&hca, 1);
    let lid = p.attrs().unwrap().lid;
    let qp = SpecialQp::Gsi;
    let rbuf = lease(p.as_ref(), RECV_BUF);
    p.post_recv(qp, &recv_wr(7, &rbuf)).unwrap();
    let sbuf = lease(p.as_ref(), MAD);
    sbuf.write(0, &mad(0x09, 1, 1)).unwrap();
    let mut dest = to_self(lid, qp);
    dest.pkey_index = 0;
    assert!(
        matches!(
            p.post_send(qp, &send_wr(1, &sbuf, dest)),
            Err(PostError::Invalid(_))
        ),
        "index 0 is not the GSI QP's"
    );
    dest.pkey_index = 1;
    p.post_send(qp, &send_wr(2, &sbuf, dest)).unwrap();
    let wcs = poll_n(p.as_ref(), 2, Duration::from_secs(1));
    assert_eq!(wcs.len(), 2, "{wcs:?}");
    let recv = wcs
        .iter()
        .find(|w| w.opcode == WcOpcode::Recv)
        .expect("the MAD came back");
    assert_eq!(recv.status, WcStatus::Success, "{recv:?}");
    assert_eq!(recv.pkey_index, 1, "the MAD carried 0xFFFF");
    drop((p, rbuf, sbuf));
    hca.close().unwrap();
    sim.assert_clean(&hca);
}

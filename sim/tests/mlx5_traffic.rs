//! Packets through the simulated ConnectX: UD sends from QP1 and QP0 looped back to the
//! port's own LID into receive WQEs, with the CQE fields and buffer contents hardware gives;
//! the packet's headers; the drops a port makes; errors of malformed WQEs, bad lkeys and short
//! receive buffers; MAD_IFC without an SMA; port changes.

mod mlx5rig;

use firmware_cmds::mlx5::cmd::status::CmdStatus;
use firmware_cmds::mlx5::cqe::{Cqe, CqeBody, CqeOpcode};
use firmware_cmds::mlx5::eqe::{EqeEvent, EventType, port_change};
use firmware_cmds::mlx5::grh::Grh;
use firmware_cmds::mlx5::ops::mad_ifc::MadIfc;
use firmware_cmds::mlx5::ops::qp_modify::{ModifyQp, Sqerr2RtsQp};
use firmware_cmds::mlx5::ops::vport::QueryHcaVportContext;
use firmware_cmds::mlx5::qpc::{QpServiceType, QpState, Qpc};
use firmware_cmds::mlx5::syndrome::CqeSyndrome;
use firmware_cmds::mlx5::wqe::{
    CtrlSeg, DataSeg, DatagramSeg, Gather, UdSendWqe, WqeOpcode, fm_ce_se,
};
use mlx5rig::{CqRing, EqRing, LID, Loopback, QP1_QKEY, QpRing, Rig, SendSpec};
use sim::mlx5::DropReason;
use sim::mlx5::config::vendor_syndrome;
use sim::{Device, Packet, PortChange};
use std::sync::Arc;

struct Net {
    rig: Rig,
    link: Arc<Loopback>,
    eq: EqRing,
    scq: CqRing,
    rcq: CqRing,
    qp: QpRing,
}

/// A brought-up device on a loopback link with a QP (`st`) in RTS, separate send and receive
/// CQs.
fn net(st: QpServiceType) -> Net {
    let mut rig = Rig::new();
    rig.up(false);
    let link = Loopback::attach(&rig);
    let mut eq = rig.create_eq(
        &[
            EventType::COMP.0,
            EventType::PORT_CHANGE.0,
            EventType::WQ_CATAS_ERROR.0,
            EventType::CQ_ERROR.0,
        ],
        5,
        0,
    );
    eq.drain(&rig);
    let scq = rig.create_cq(eq.eqn, 5);
    let rcq = rig.create_cq(eq.eqn, 5);
    let qp = rig.create_qp(st, &scq, &rcq, 5, 5);
    let qkey = if st == QpServiceType::QP0 {
        0
    } else {
        QP1_QKEY
    };
    rig.qp_to_rts(&qp, qkey);
    Net {
        rig,
        link,
        eq,
        scq,
        rcq,
        qp,
    }
}

fn mad_buf(rig: &mut Rig, seed: u8) -> (u64, Vec<u8>) {
    let addr = rig.alloc(256, 64);
    let mad: Vec<u8> = (0..256u32)
        .map(|i| (i as u8).wrapping_mul(seed).wrapping_add(seed))
        .collect();
    rig.mem.write(addr, &mad);
    (addr, mad)
}

fn recv_buf(rig: &mut Rig, len: usize) -> u64 {
    let addr = rig.alloc(len, 64);
    rig.mem.write(addr, &vec![0xee; len]);
    addr
}

fn err(c: &Cqe) -> (CqeOpcode, CqeSyndrome, u8) {
    match &c.body {
        CqeBody::Error(e) => (c.opcode, e.syndrome, e.vendor_err),
        other => panic!("expected an error CQE, got {other:?}"),
    }
}

#[test]
fn a_qp1_send_to_the_own_lid_lands_in_a_receive_wqe() {
    let mut n = net(QpServiceType::QP1);
    let rbuf = recv_buf(&mut n.rig, 512);
    n.qp.post_recv(&n.rig, rbuf, 512);
    let (addr, mad) = mad_buf(&mut n.rig, 3);
    let ctrl = n.qp.write_send(&n.rig, &SendSpec::mad(addr));
    n.rig.ring_send(&ctrl);
    // The send completed; the packet is on the wire, delivered when the scheduler runs.
    let send = n.scq.poll(&n.rig).expect("send CQE");
    assert_eq!(send.opcode, CqeOpcode::REQ);
    assert_eq!(send.qpn, n.qp.qpn);
    assert_eq!(send.wqe_counter, 0);
    assert!(matches!(send.body, CqeBody::Requester(r) if r.wqe_opcode == WqeOpcode::SEND.0));
    assert!(n.rcq.poll(&n.rig).is_none());
    let sent = n.link.sent.lock().unwrap().clone();
    assert_eq!(sent.len(), 1);
    let p = &sent[0];
    assert_eq!((p.slid, p.dlid, p.sl), (LID, LID, 0));
    assert!(!p.vl15);
    assert_eq!((p.src_qp, p.dst_qp), (1, 1));
    assert_eq!(p.qkey, QP1_QKEY);
    assert_eq!(p.pkey, 0xffff);
    assert!(p.grh.is_none());
    assert_eq!(&p.mad[..], &mad[..]);

    n.rig.settle();
    let recv = n.rcq.poll(&n.rig).expect("receive CQE");
    assert_eq!(recv.opcode, CqeOpcode::RESP_SEND);
    assert_eq!(recv.qpn, n.qp.qpn);
    assert_eq!(recv.wqe_counter, 0);
    let CqeBody::Responder(resp) = recv.body else {
        panic!("responder CQE expected");
    };
    assert_eq!(resp.byte_cnt, 40 + 256, "the GRH area counts");
    assert_eq!(resp.src_qpn, 1);
    assert_eq!(resp.slid, LID);
    assert_eq!(resp.sl, 0);
    assert!(!resp.has_grh());
    assert_eq!(resp.pkey(), 0xffff, "QP1 receives carry the P_Key");
    let got = n.rig.mem.bytes(rbuf, 512);
    assert!(
        got[..40].iter().all(|&b| b == 0xee),
        "no GRH: the area is not written"
    );
    assert_eq!(&got[40..296], &mad[..]);
    assert!(got[296..].iter().all(|&b| b == 0xee));
    let counters = n.rig.dev.counters();
    assert_eq!((counters.packets_sent, counters.packets_received), (1, 1));
    assert_eq!(counters.dropped_total(), 0);
    assert_eq!(n.rig.dev.iommu().fault_count(), 0);
}

#[test]
fn a_grh_is_written_into_the_grh_area_when_present() {
    let mut n = net(QpServiceType::QP1);
    let rbuf = recv_buf(&mut n.rig, 512);
    n.qp.post_recv(&n.rig, rbuf, 512);
    let (addr, mad) = mad_buf(&mut n.rig, 5);
    let rgid = [0x77u8; 16];
    let wqe = UdSendWqe {
        ctrl: CtrlSeg {
            wqe_index: n.qp.sq_pc,
            opcode: WqeOpcode::SEND,
            qpn: n.qp.qpn,
            fm_ce_se: fm_ce_se::CQ_UPDATE,
            ..CtrlSeg::default()
        },
        av: DatagramSeg {
            qkey: QP1_QKEY,
            dqpn: 1,
            extended_ud: true,
            rlid: LID,
            sl: 3,
            grh: true,
            hop_limit: 64,
            tclass: 0x20,
            flow_label: 0x12345,
            rgid,
            ..DatagramSeg::default()
        },
        gather: vec![Gather::Data(DataSeg {
            byte_count: 256,
            lkey: n.rig.resd_lkey,
            addr,
        })],
    };
    let ctrl = n.qp.write_wqe(&n.rig, &wqe);
    n.rig.ring_send(&ctrl);
    n.rig.settle();
    let r = n.rcq.poll(&n.rig).expect("receive CQE");
    let CqeBody::Responder(resp) = r.body else {
        panic!("responder CQE expected");
    };
    assert!(resp.has_grh());
    assert_eq!(resp.sl, 3);
    let got = n.rig.mem.bytes(rbuf, 296);
    let g = Grh::decode(&got).unwrap();
    assert_eq!(g.ip_version, 6);
    assert_eq!(g.next_header, 0x1b);
    assert_eq!(g.payload_len, 12 + 8 + 256 + 4);
    assert_eq!(
        (g.traffic_class, g.flow_label, g.hop_limit),
        (0x20, 0x12345, 64)
    );
    assert_eq!(g.dgid, rgid);
    assert_eq!(&g.sgid[..8], &0xfe80_0000_0000_0000u64.to_be_bytes());
    assert_eq!(&g.sgid[8..], &0x0002_c903_0000_0002u64.to_be_bytes());
    assert_eq!(&got[40..], &mad[..]);
}

#[test]
fn qp0_sends_smps_on_vl15_as_qp_0() {
    let mut n = net(QpServiceType::QP0);
    let rbuf = recv_buf(&mut n.rig, 512);
    n.qp.post_recv(&n.rig, rbuf, 512);
    let (addr, mad) = mad_buf(&mut n.rig, 7);
    let spec = SendSpec {
        dqpn: 0,
        qkey: 0,
        ..SendSpec::mad(addr)
    };
    let ctrl = n.qp.write_send(&n.rig, &spec);
    n.rig.ring_send(&ctrl);
    let p = n.link.sent.lock().unwrap()[0].clone();
    assert!(p.vl15);
    assert_eq!((p.src_qp, p.dst_qp), (0, 0));
    n.rig.settle();
    let r = n.rcq.poll(&n.rig).expect("receive CQE");
    let CqeBody::Responder(resp) = r.body else {
        panic!("responder CQE expected");
    };
    assert_eq!(resp.src_qpn, 0);
    assert_eq!(resp.imm_inval_pkey, 0, "only QP1 receives report a P_Key");
    assert_eq!(&n.rig.mem.bytes(rbuf + 40, 256)[..], &mad[..]);
}

fn packet(dst_qp: u32, qkey: u32, pkey: u16, vl15: bool) -> Packet {
    Packet {
        slid: 0x22,
        dlid: LID,
        sl: 0,
        vl15,
        src_qp: 1,
        dst_qp,
        qkey,
        pkey,
        grh: None,
        mad: Box::new([0x42; 256]),
    }
}

#[test]
fn the_port_drops_what_hardware_drops() {
    let mut n = net(QpServiceType::QP1);
    let rbuf = recv_buf(&mut n.rig, 512);
    // No receive WQE yet.
    n.link.inject(packet(1, QP1_QKEY, 0xffff, false));
    n.rig.settle();
    n.qp.post_recv(&n.rig, rbuf, 512);
    n.link.inject(packet(1, 0x1234_5678, 0xffff, false));
    n.link.inject(packet(1, QP1_QKEY, 0x8001, false));
    n.link.inject(packet(1, QP1_QKEY, 0xffff, true));
    n.link.inject(packet(0, 0, 0xffff, true));
    n.link.inject(packet(0x77_7777, 0, 0xffff, false));
    n.rig.settle();
    let c = n.rig.dev.counters();
    assert_eq!(c.dropped(DropReason::NoRecvWqe), 1);
    assert_eq!(c.dropped(DropReason::BadQkey), 1);
    assert_eq!(c.dropped(DropReason::BadPkey), 1);
    assert_eq!(c.dropped(DropReason::WrongVl), 1, "VL15 to QP1");
    assert_eq!(
        c.dropped(DropReason::NoQp),
        2,
        "no QP0 on the port; no such QP"
    );
    assert!(n.rcq.poll(&n.rig).is_none());
    // A limited-membership P_Key still matches the full default P_Key.
    n.link.inject(packet(1, QP1_QKEY, 0x7fff, false));
    n.rig.settle();
    let r = n.rcq.poll(&n.rig).expect("accepted");
    assert!(matches!(r.body, CqeBody::Responder(x) if x.pkey() == 0x7fff));
    // A send with no link attached goes nowhere.
    n.rig.dev.detach_port(1).unwrap();
    let (addr, _) = mad_buf(&mut n.rig, 1);
    let ctrl = n.qp.write_send(&n.rig, &SendSpec::mad(addr));
    n.rig.ring_send(&ctrl);
    assert_eq!(n.rig.dev.counters().dropped(DropReason::NoLink), 1);
}

#[test]
fn a_qp_not_ready_to_receive_drops() {
    let mut rig = Rig::new();
    rig.up(false);
    let link = Loopback::attach(&rig);
    let eq = rig.create_eq(&[EventType::COMP.0], 3, 0);
    let cq = rig.create_cq(eq.eqn, 3);
    let mut qp = rig.create_qp(QpServiceType::QP1, &cq, &cq, 3, 3);
    rig.exec(&firmware_cmds::mlx5::ops::qp_modify::Rst2InitQp(ModifyQp {
        qpn: qp.qpn,
        opt_param_mask: 0,
        ctx: Qpc {
            port: 1,
            q_key: QP1_QKEY,
            ..Qpc::default()
        },
    }))
    .unwrap();
    let rbuf = recv_buf(&mut rig, 512);
    qp.post_recv(&rig, rbuf, 512);
    link.inject(packet(1, QP1_QKEY, 0xffff, false));
    rig.settle();
    assert_eq!(rig.dev.counters().dropped(DropReason::QpState), 1, "INIT");
}

#[test]
fn a_bad_lkey_fails_the_send_and_stops_the_send_queue() {
    let mut n = net(QpServiceType::QP1);
    let (addr, _) = mad_buf(&mut n.rig, 9);
    let bad = SendSpec {
        lkey: Some(0x0099_0000),
        ..SendSpec::mad(addr)
    };
    let ctrl = n.qp.write_send(&n.rig, &bad);
    n.rig.ring_send(&ctrl);
    let c = n.scq.poll(&n.rig).expect("error CQE");
    assert_eq!(err(&c).0, CqeOpcode::REQ_ERR);
    assert_eq!(err(&c).1, CqeSyndrome::LOCAL_PROT_ERR);
    assert_eq!(c.wqe_counter, 0);
    assert_eq!(n.rig.dev.qp_state(n.qp.qpn), Some(QpState::Sqer));
    assert!(n.link.sent.lock().unwrap().is_empty());
    // Sends posted in SQER are flushed.
    let ctrl = n.qp.write_send(&n.rig, &SendSpec::mad(addr));
    n.rig.ring_send(&ctrl);
    let f = n.scq.poll(&n.rig).expect("flush CQE");
    assert_eq!(
        err(&f),
        (CqeOpcode::REQ_ERR, CqeSyndrome::WR_FLUSHED_ERR, 0xf9)
    );
    assert_eq!(f.wqe_counter, ctrl.wqe_index);
    // SQERR2RTS brings the send queue back.
    n.rig
        .exec(&Sqerr2RtsQp(ModifyQp {
            qpn: n.qp.qpn,
            opt_param_mask: 0,
            ctx: Qpc::default(),
        }))
        .unwrap();
    let ctrl = n.qp.write_send(&n.rig, &SendSpec::mad(addr));
    n.rig.ring_send(&ctrl);
    let ok = n.scq.poll(&n.rig).expect("send CQE");
    assert_eq!(ok.opcode, CqeOpcode::REQ);
    assert_eq!(n.link.sent.lock().unwrap().len(), 1);
}

#[test]
fn malformed_wqes_get_local_qp_operation_errors() {
    let mut n = net(QpServiceType::QP1);
    let ctrl =
        n.qp.write_ctrl_only(&n.rig, WqeOpcode::SEND, n.qp.qpn, 0, true);
    n.rig.ring_send(&ctrl);
    let c = n.scq.poll(&n.rig).expect("error CQE");
    assert_eq!(err(&c).1, CqeSyndrome::LOCAL_QP_OP_ERR, "DS 0");
    let rearm = |n: &mut Net| {
        n.rig
            .exec(&Sqerr2RtsQp(ModifyQp {
                qpn: n.qp.qpn,
                opt_param_mask: 0,
                ctx: Qpc::default(),
            }))
            .unwrap();
    };
    rearm(&mut n);
    // A WQE naming another QP (the doorbell names this one).
    let other = n.qp.qpn + 1;
    let mut ctrl = n.qp.write_ctrl_only(&n.rig, WqeOpcode::NOP, other, 1, true);
    ctrl.qpn = n.qp.qpn;
    n.rig.ring_send(&ctrl);
    assert_eq!(
        err(&n.scq.poll(&n.rig).unwrap()).1,
        CqeSyndrome::LOCAL_QP_OP_ERR
    );
    rearm(&mut n);
    // An RDMA write on a datagram QP.
    let ctrl =
        n.qp.write_ctrl_only(&n.rig, WqeOpcode::RDMA_WRITE, n.qp.qpn, 4, true);
    n.rig.ring_send(&ctrl);
    assert_eq!(
        err(&n.scq.poll(&n.rig).unwrap()).1,
        CqeSyndrome::LOCAL_QP_OP_ERR
    );
    // A payload longer than a MAD.
    rearm(&mut n);
    let addr = n.rig.alloc(4096, 64);
    let spec = SendSpec {
        len: 2048,
        ..SendSpec::mad(addr)
    };
    let ctrl = n.qp.write_send(&n.rig, &spec);
    n.rig.ring_send(&ctrl);
    assert_eq!(
        err(&n.scq.poll(&n.rig).unwrap()).1,
        CqeSyndrome::LOCAL_LENGTH_ERR
    );
    assert!(n.link.sent.lock().unwrap().is_empty());
}

/// A send data segment of byte count 0 is 0 bytes (`DataSeg`): between a zero-length entry
/// and a MAD's, the packet carries exactly the MAD.
#[test]
fn a_zero_length_send_data_segment_adds_no_bytes() {
    let mut n = net(QpServiceType::QP1);
    let (empty, _) = mad_buf(&mut n.rig, 9);
    let (addr, mad) = mad_buf(&mut n.rig, 5);
    let lkey = n.rig.resd_lkey;
    let wqe = UdSendWqe {
        ctrl: CtrlSeg {
            wqe_index: n.qp.sq_pc,
            opcode: WqeOpcode::SEND,
            qpn: n.qp.qpn,
            fm_ce_se: fm_ce_se::CQ_UPDATE,
            ..CtrlSeg::default()
        },
        av: DatagramSeg {
            qkey: QP1_QKEY,
            dqpn: 1,
            extended_ud: true,
            rlid: LID,
            ..DatagramSeg::default()
        },
        gather: vec![
            Gather::Data(DataSeg {
                byte_count: 0,
                lkey,
                addr: empty,
            }),
            Gather::Data(DataSeg {
                byte_count: 256,
                lkey,
                addr,
            }),
        ],
    };
    let ctrl = n.qp.write_wqe(&n.rig, &wqe);
    n.rig.ring_send(&ctrl);
    let c = n.scq.poll(&n.rig).expect("send CQE");
    assert_eq!(c.opcode, CqeOpcode::REQ, "{:?}", c.body);
    let sent = n.link.sent.lock().unwrap().clone();
    assert_eq!(sent.len(), 1);
    assert_eq!(
        &sent[0].mad[..],
        &mad[..],
        "the MAD, nothing of the empty entry"
    );
    assert_eq!(n.rig.dev.qp_state(n.qp.qpn), Some(QpState::Rts));
}

/// A receive data segment of byte count 0 is 0 bytes of room (`DataSeg`): the message skips
/// it for the next entry, and a WQE of only such an entry is too short for any message.
#[test]
fn a_zero_length_receive_data_segment_takes_no_bytes() {
    let mut n = net(QpServiceType::QP1);
    let lkey = n.rig.resd_lkey;
    let (skipped, rbuf) = (recv_buf(&mut n.rig, 512), recv_buf(&mut n.rig, 512));
    n.qp.post_recv_segs(
        &n.rig,
        &[
            DataSeg {
                byte_count: 0,
                lkey,
                addr: skipped,
            },
            DataSeg {
                byte_count: 512,
                lkey,
                addr: rbuf,
            },
        ],
    );
    n.link.inject(packet(1, QP1_QKEY, 0xffff, false));
    n.rig.settle();
    let c = n.rcq.poll(&n.rig).expect("receive CQE");
    assert_eq!(c.opcode, CqeOpcode::RESP_SEND, "{:?}", c.body);
    let CqeBody::Responder(resp) = c.body else {
        panic!("responder CQE expected");
    };
    assert_eq!(resp.byte_cnt, 40 + 256);
    assert_eq!(&n.rig.mem.bytes(rbuf + 40, 256)[..], &[0x42; 256][..]);
    assert!(
        n.rig.mem.bytes(skipped, 512).iter().all(|&b| b == 0xee),
        "nothing written through the zero-length entry"
    );

    // Only a zero-length entry: no room, a local length error.
    n.qp.post_recv(&n.rig, skipped, 0);
    n.link.inject(packet(1, QP1_QKEY, 0xffff, false));
    n.rig.settle();
    let c = n.rcq.poll(&n.rig).expect("error CQE");
    assert_eq!(
        err(&c),
        (
            CqeOpcode::RESP_ERR,
            CqeSyndrome::LOCAL_LENGTH_ERR,
            vendor_syndrome::LENGTH
        )
    );
    assert!(
        n.rig.mem.bytes(skipped, 512).iter().all(|&b| b == 0xee),
        "nothing written"
    );
}

#[test]
fn a_short_receive_buffer_fails_the_receive_and_flushes_the_rest() {
    let mut n = net(QpServiceType::QP1);
    let small = recv_buf(&mut n.rig, 128);
    let big = recv_buf(&mut n.rig, 512);
    n.qp.post_recv(&n.rig, small, 128);
    n.qp.post_recv(&n.rig, big, 512);
    n.link.inject(packet(1, QP1_QKEY, 0xffff, false));
    n.rig.settle();
    let c = n.rcq.poll(&n.rig).unwrap();
    assert_eq!(err(&c).0, CqeOpcode::RESP_ERR);
    assert_eq!(err(&c).1, CqeSyndrome::LOCAL_LENGTH_ERR);
    assert_eq!(c.wqe_counter, 0);
    let f = n.rcq.poll(&n.rig).unwrap();
    assert_eq!(
        err(&f),
        (CqeOpcode::RESP_ERR, CqeSyndrome::WR_FLUSHED_ERR, 0xf9)
    );
    assert_eq!(f.wqe_counter, 1);
    assert_eq!(n.rig.dev.qp_state(n.qp.qpn), Some(QpState::Err));
    // A receive posted to a QP in ERR is flushed once the device looks (the driver waits).
    n.qp.post_recv(&n.rig, big, 512);
    n.rig.wait(std::time::Duration::from_millis(1));
    let f = n.rcq.poll(&n.rig).expect("late flush");
    assert_eq!(err(&f).1, CqeSyndrome::WR_FLUSHED_ERR);
    assert_eq!(f.wqe_counter, 2);
}

#[test]
fn unsignaled_sends_complete_silently() {
    let mut n = net(QpServiceType::QP1);
    for _ in 0..4 {
        let b = recv_buf(&mut n.rig, 512);
        n.qp.post_recv(&n.rig, b, 512);
    }
    let (addr, _) = mad_buf(&mut n.rig, 2);
    let mut last = None;
    for i in 0..4 {
        let spec = SendSpec {
            signaled: i == 3,
            ..SendSpec::mad(addr)
        };
        let ctrl = n.qp.write_send(&n.rig, &spec);
        last = Some(ctrl);
    }
    n.rig.ring_send(&last.unwrap());
    let cqes = n.scq.drain(&n.rig);
    assert_eq!(cqes.len(), 1);
    assert_eq!(cqes[0].wqe_counter, last.unwrap().wqe_index);
    n.rig.settle();
    assert_eq!(n.rcq.drain(&n.rig).len(), 4);
}

#[test]
fn mad_ifc_without_an_sma_is_discarded() {
    let mut n = net(QpServiceType::QP1);
    let m = MadIfc {
        ignore_mkey: true,
        ignore_bkey: false,
        remote_lid: 0,
        port: 1,
        mad: [0u8; 256],
    };
    assert_eq!(n.rig.status(&m), CmdStatus::BAD_PKT_ERR);
    let bad_port = MadIfc { port: 2, ..m };
    assert_eq!(n.rig.status(&bad_port), CmdStatus::BAD_PARAM_ERR);
}

#[test]
fn port_changes_reach_the_driver_and_the_vport_context() {
    let mut n = net(QpServiceType::QP1);
    n.link.change(PortChange::Lid);
    n.rig.settle();
    let e = n.eq.poll(&n.rig).expect("port change EQE");
    assert_eq!(
        e.event(),
        EqeEvent::PortChange {
            port: 1,
            sub_type: port_change::LID
        }
    );
    let v = n
        .rig
        .exec(&QueryHcaVportContext {
            other_vport: false,
            port_num: 1,
            vport_number: 0,
        })
        .unwrap();
    assert_eq!(v.lid, LID);
    assert_eq!(v.port_state, 4);
    assert!(v.has_smi);
    assert_eq!(v.port_guid, 0x0002_c903_0000_0002);
}

#[test]
fn a_gsi_send_qp_sends_as_qp1_and_qp1_keeps_the_gsi_qkey() {
    use firmware_cmds::mlx5::ops::qp::CreateQp;
    use firmware_cmds::mlx5::ops::qp_modify::{Init2RtrQp, Rst2InitQp, Rtr2RtsQp};
    use firmware_cmds::mlx5::qpc::rq_type;
    let mut n = net(QpServiceType::QP1);
    // A UD QP without receive queue, DETH source QPN 1: the kernel's GSI send QP.
    let buf = n.rig.alloc(4096, 4096);
    let dbr = n.rig.alloc(64, 64);
    let qpn = n
        .rig
        .exec(&CreateQp {
            ctx: Qpc {
                st: QpServiceType::UD,
                pd: n.rig.pd,
                rq_type: rq_type::ZERO_LEN,
                log_sq_size: 4,
                rlky: true,
                uar_page: n.rig.uar,
                cqn_snd: n.scq.cqn,
                deth_sqpn: 1,
                dbr_addr: dbr,
                ..Qpc::default()
            },
            opt_param_mask: 0,
            input_qpn: 0,
            pas: vec![buf],
        })
        .unwrap()
        .qpn;
    let m = ModifyQp {
        qpn,
        opt_param_mask: 0,
        ctx: Qpc {
            port: 1,
            q_key: QP1_QKEY,
            ..Qpc::default()
        },
    };
    n.rig.exec(&Rst2InitQp(m)).unwrap();
    n.rig.exec(&Init2RtrQp(m)).unwrap();
    n.rig.exec(&Rtr2RtsQp(m)).unwrap();
    let mut tx = QpRing {
        qpn,
        buf,
        dbr,
        sq_offset: 0,
        sq_bbs: 16,
        rq_n: 1,
        rq_stride: 32,
        sq_pc: 0,
        rq_pc: 0,
    };
    let rbuf = recv_buf(&mut n.rig, 512);
    n.qp.post_recv(&n.rig, rbuf, 512);
    let (addr, mad) = mad_buf(&mut n.rig, 11);
    let ctrl = tx.write_send(&n.rig, &SendSpec::mad(addr));
    n.rig.ring_send(&ctrl);
    let p = n.link.sent.lock().unwrap()[0].clone();
    assert_eq!(p.src_qp, 1, "DETH source QPN 1");
    assert_eq!(
        p.qkey, QP1_QKEY,
        "the WQE's Q_Key has bit 31: the QP's is used"
    );
    n.rig.settle();
    let r = n.rcq.poll(&n.rig).expect("QP1 received it");
    let CqeBody::Responder(resp) = r.body else {
        panic!("responder CQE expected");
    };
    assert_eq!(resp.src_qpn, 1);
    assert_eq!(n.rig.mem.bytes(rbuf + 40, 256), mad);
}

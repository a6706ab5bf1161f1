//! Driver input near the top of the 64-bit address space: a receive scatter address or a
//! send-queue page there fails the access with a local protection error, as a PCIe request
//! that would wrap round to address 0 does on hardware; the model neither panics on the
//! overflow (debug builds) nor wraps to a low address (release builds).

mod mlx5rig;

use firmware_cmds::mlx5::cqe::{Cqe, CqeBody};
use firmware_cmds::mlx5::doorbell::QpDbRecord;
use firmware_cmds::mlx5::eqe::EventType;
use firmware_cmds::mlx5::ops::qp::CreateQp;
use firmware_cmds::mlx5::ops::qp_modify::{ModifyQp, Sqerr2RtsQp};
use firmware_cmds::mlx5::qpc::{QpServiceType, Qpc, rq_type};
use firmware_cmds::mlx5::wqe::{CtrlSeg, WqeOpcode};
use mlx5rig::{Loopback, QP1_QKEY, QpRing, Rig};
use sim::Packet;

fn err_synd(c: &Cqe) -> Option<u8> {
    match &c.body {
        CqeBody::Error(e) => Some(e.syndrome.0),
        _ => None,
    }
}

fn packet() -> Packet {
    Packet {
        slid: 0x22,
        dlid: mlx5rig::LID,
        sl: 0,
        vl15: false,
        src_qp: 1,
        dst_qp: 1,
        qkey: QP1_QKEY,
        pkey: 0xffff,
        grh: None,
        mad: Box::new([0x42; 256]),
    }
}

/// A receive WQE whose data segment points at the top of the 64-bit IOVA space.
#[test]
fn recv_scatter_address_at_top_of_iova_space() {
    let mut rig = Rig::new();
    rig.up(false);
    let link = Loopback::attach(&rig);
    let mut eq = rig.create_eq(&[EventType::COMP.0, EventType::CQ_ERROR.0], 5, 0);
    eq.drain(&rig);
    let scq = rig.create_cq(eq.eqn, 5);
    let mut rcq = rig.create_cq(eq.eqn, 5);
    let mut qp = rig.create_qp(QpServiceType::QP1, &scq, &rcq, 5, 5);
    rig.qp_to_rts(&qp, QP1_QKEY);
    qp.post_recv(&rig, u64::MAX - 7, 512);
    link.inject(packet());
    rig.settle();
    let c = rcq.poll(&rig).expect("an error CQE");
    assert_eq!(err_synd(&c), Some(0x04), "local protection error: {c:?}");
}

/// A send queue page at the top of the IOVA space; the WQE at its last basic block.
#[test]
fn send_queue_page_at_top_of_iova_space() {
    let mut rig = Rig::new();
    rig.up(false);
    let mut eq = rig.create_eq(&[EventType::COMP.0, EventType::CQ_ERROR.0], 5, 0);
    eq.drain(&rig);
    let mut scq = rig.create_cq(eq.eqn, 7);
    let dbr = rig.alloc(64, 64);
    let qpn = rig
        .exec(&CreateQp {
            ctx: Qpc {
                st: QpServiceType::UD,
                pd: rig.pd,
                rq_type: rq_type::ZERO_LEN,
                log_sq_size: 6,
                rlky: true,
                uar_page: rig.uar,
                cqn_snd: scq.cqn,
                cqn_rcv: scq.cqn,
                dbr_addr: dbr,
                ..Qpc::default()
            },
            opt_param_mask: 0,
            input_qpn: 0,
            pas: vec![0xFFFF_FFFF_FFFF_F000],
        })
        .unwrap()
        .qpn;
    let qp = QpRing {
        qpn,
        buf: 0,
        dbr,
        sq_offset: 0,
        sq_bbs: 64,
        rq_n: 0,
        rq_stride: 32,
        sq_pc: 0,
        rq_pc: 0,
    };
    rig.qp_to_rts(&qp, QP1_QKEY);
    let ring = |rig: &mut Rig, pc: u32| {
        rig.mem.write(dbr + 4, &QpDbRecord::counter_bytes(pc));
        rig.ring_send(&CtrlSeg {
            opcode: WqeOpcode::NOP,
            qpn,
            ds: 1,
            ..CtrlSeg::default()
        });
    };
    ring(&mut rig, 63);
    rig.settle();
    let cqes = scq.drain(&rig);
    let first = cqes.first().expect("an error CQE for the first WQE");
    assert_eq!(
        err_synd(first),
        Some(0x04),
        "local protection error: {first:?}"
    );
    let m = ModifyQp {
        qpn,
        opt_param_mask: 0,
        ctx: Qpc::default(),
    };
    rig.exec(&Sqerr2RtsQp(m)).unwrap();
    // The next WQE starts at the page's last basic block: its read-ahead must not overflow.
    ring(&mut rig, 65);
    rig.settle();
    let cqes = scq.drain(&rig);
    let first = cqes
        .first()
        .expect("an error CQE for the WQE at the last basic block");
    assert_eq!(
        err_synd(first),
        Some(0x04),
        "local protection error: {first:?}"
    );
}

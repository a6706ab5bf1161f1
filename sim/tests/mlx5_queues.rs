//! EQs, CQs and the QP state machine of the simulated ConnectX: EQE and CQE ownership across
//! ring wraps, arming and interrupts, overruns, the modify-QP transitions (legal and not), the
//! checks of CREATE_QP, and UAR protection of doorbells.

mod mlx5rig;

use firmware_cmds::mlx5::cmd::status::CmdStatus;
use firmware_cmds::mlx5::cqe::{CqeBody, CqeOpcode};
use firmware_cmds::mlx5::doorbell::EqDoorbell;
use firmware_cmds::mlx5::eqe::{EqeEvent, EventType, cq_error_syndrome};
use firmware_cmds::mlx5::health::HealthBuffer;
use firmware_cmds::mlx5::init_seg::off;
use firmware_cmds::mlx5::ops::pd::AllocPd;
use firmware_cmds::mlx5::ops::qp::{CreateQp, DestroyQp, QueryQp};
use firmware_cmds::mlx5::ops::qp_modify::{
    Init2RtrQp, ModifyQp, Qp2Err, Qp2Rst, Rst2InitQp, Rtr2RtsQp, Sqerr2RtsQp,
};
use firmware_cmds::mlx5::ops::uar::AllocUar;
use firmware_cmds::mlx5::qpc::{QpServiceType, QpState, Qpc};
use mlx5rig::{QP1_QKEY, Rig};
use sim::mlx5::syndrome;

fn modify(qpn: u32, port: u8, pkey_index: u16) -> ModifyQp {
    ModifyQp {
        qpn,
        opt_param_mask: 0,
        ctx: Qpc {
            port,
            pkey_index,
            q_key: QP1_QKEY,
            ..Qpc::default()
        },
    }
}

#[test]
fn eqe_ownership_follows_the_pass_across_wraps() {
    let mut rig = Rig::new();
    rig.up(false);
    let mut eq = rig.create_eq(&[EventType::CMD.0], 2, 0);
    // EQE 0 is CREATE_EQ's own completion; then one per command.
    for i in 0..11u32 {
        if i > 0 {
            rig.exec(&AllocPd).unwrap();
        }
        let at = eq.buf + u64::from(i % 4) * 64;
        let raw = rig.mem.bytes(at, 64);
        assert_eq!(
            u32::from(raw[63]),
            (i / 4) & 1,
            "EQE {i}: hardware writes the owner bit of its pass"
        );
        let e = eq.poll(&rig).expect("EQE");
        assert_eq!(e.event(), EqeEvent::Command { vector: 1 });
        assert!(eq.poll(&rig).is_none());
        eq.doorbell(&rig, false);
    }
}

#[test]
fn an_eq_overrun_is_a_fatal_firmware_error() {
    let mut rig = Rig::new();
    rig.up(false);
    let _eq = rig.create_eq(&[EventType::CMD.0], 2, 0);
    // Never consumed: EQE 0 (CREATE_EQ) + 3 fill the ring, the 4th command's EQE overruns.
    for _ in 0..4 {
        rig.exec(&AllocPd).unwrap();
    }
    assert_eq!(rig.dev.counters().eq_overruns, 1);
    let mut raw = [0u8; 64];
    for (i, b) in raw.chunks_mut(4).enumerate() {
        b.copy_from_slice(&rig.rd32(off::HEALTH as u64 + 4 * i as u64).to_be_bytes());
    }
    let h = HealthBuffer::decode(&raw).unwrap();
    assert_eq!(h.synd.0, 0x0c, "asynchronous EQ buffer overrun");
    assert!(h.recovery_required());
    // Dead firmware runs no more commands.
    let p = rig.prepare(
        0,
        &firmware_cmds::mlx5::ops::Command::encode(&AllocPd).unwrap(),
        16,
    );
    let posted = rig.post(0, &p);
    assert!(rig.completion(&posted).is_none());
}

/// The health syndrome byte of the init segment's health buffer.
fn health_syndrome(rig: &Rig) -> u8 {
    let mut raw = [0u8; 64];
    for (i, b) in raw.chunks_mut(4).enumerate() {
        b.copy_from_slice(&rig.rd32(off::HEALTH as u64 + 4 * i as u64).to_be_bytes());
    }
    HealthBuffer::decode(&raw).unwrap().synd.0
}

#[test]
fn a_stale_eq_doorbell_leaves_one_entry_unconsumed() {
    let mut rig = Rig::new();
    rig.up(false);
    let mut eq = rig.create_eq(&[EventType::CMD.0], 2, 0);
    // EQE 0 (CREATE_EQ) and two commands: consumed, ci = 3.
    rig.exec(&AllocPd).unwrap();
    rig.exec(&AllocPd).unwrap();
    assert_eq!(eq.drain(&rig).len(), 3);
    eq.doorbell(&rig, false);
    // A stale doorbell (a racing update seen late): ci = 2, one entry back.
    let stale = EqDoorbell {
        eqn: eq.eqn,
        ci: eq.ci - 1,
        arm: false,
    };
    rig.wr32(rig.uar_base() + stale.offset() as u64, stale.value());
    // With ci = 2 the ring of 4 holds three more EQEs: the commands complete and the
    // firmware stays healthy.
    for i in 0..3 {
        rig.exec(&AllocPd).unwrap();
        assert_eq!(rig.dev.counters().eq_overruns, 0, "command {i}");
        assert_eq!(health_syndrome(&rig), 0, "command {i}");
    }
    // The fourth fills what the stale index still counts as unconsumed: a real overrun.
    rig.exec(&AllocPd).unwrap();
    assert_eq!(rig.dev.counters().eq_overruns, 1);
    assert_eq!(health_syndrome(&rig), 0x0c);
}

#[test]
fn a_stale_cq_doorbell_record_leaves_one_entry_unconsumed() {
    let (mut rig, mut eq, mut cq, mut qp) = qp_rig(2);
    eq.drain(&rig);
    for _ in 0..4 {
        let ctrl = qp.write_nop(&rig, true);
        rig.ring_send(&ctrl);
    }
    assert_eq!(cq.drain(&rig).len(), 4);
    // The record goes one back (a stale write): ci = 3 with 4 produced.
    rig.mem.set_be32(cq.dbr, (cq.ci - 1) & 0x00ff_ffff);
    for i in 0..3 {
        let ctrl = qp.write_nop(&rig, true);
        rig.ring_send(&ctrl);
        assert_eq!(rig.dev.counters().cq_overruns, 0, "NOP {i}");
    }
    assert_eq!(rig.dev.counters().cqes, 7);
    let ctrl = qp.write_nop(&rig, true);
    rig.ring_send(&ctrl);
    assert_eq!(rig.dev.counters().cq_overruns, 1, "four unconsumed: full");
}

/// A QP1 in RTS with a CQ of `1 << log_cq` on a completion EQ.
fn qp_rig(log_cq: u8) -> (Rig, mlx5rig::EqRing, mlx5rig::CqRing, mlx5rig::QpRing) {
    let mut rig = Rig::new();
    rig.up(false);
    let eq = rig.create_eq(&[EventType::COMP.0, EventType::CQ_ERROR.0], 4, 0);
    let cq = rig.create_cq(eq.eqn, log_cq);
    let qp = rig.create_qp(QpServiceType::QP1, &cq, &cq, 3, 3);
    rig.qp_to_rts(&qp, QP1_QKEY);
    (rig, eq, cq, qp)
}

#[test]
fn cqe_ownership_follows_the_pass_across_wraps() {
    let (mut rig, _eq, mut cq, mut qp) = qp_rig(2);
    for i in 0..11u32 {
        let ctrl = qp.write_nop(&rig, true);
        rig.ring_send(&ctrl);
        let at = cq.buf + u64::from(i % 4) * 64;
        let raw = rig.mem.bytes(at, 64);
        assert_eq!(u32::from(raw[63] & 1), (i / 4) & 1, "CQE {i} owner bit");
        assert_eq!(raw[63] >> 4, CqeOpcode::REQ.0);
        let c = cq.poll(&rig).expect("CQE");
        assert_eq!(c.qpn, qp.qpn);
        assert_eq!(u32::from(c.wqe_counter), i, "the WQE's basic-block index");
        assert!(matches!(c.body, CqeBody::Requester(r) if r.wqe_opcode == 0));
        assert!(cq.poll(&rig).is_none());
    }
    assert_eq!(rig.dev.counters().send_wqes, 11);
    assert_eq!(rig.dev.counters().packets_sent, 0, "NOPs send nothing");
}

#[test]
fn a_cq_overrun_raises_a_cq_error_event() {
    let (mut rig, mut eq, cq, mut qp) = qp_rig(2);
    eq.drain(&rig);
    for _ in 0..5 {
        let ctrl = qp.write_nop(&rig, true);
        rig.ring_send(&ctrl);
    }
    let c = rig.dev.counters();
    assert_eq!(c.cq_overruns, 1);
    assert_eq!(c.cqes, 4);
    let events: Vec<EqeEvent> = eq
        .drain(&rig)
        .iter()
        .map(firmware_cmds::mlx5::eqe::Eqe::event)
        .collect();
    assert!(
        events.contains(&EqeEvent::CqError {
            cqn: cq.cqn,
            syndrome: cq_error_syndrome::CQ_OVERRUN
        }),
        "{events:?}"
    );
    // The CQ is in error: further completions are lost.
    let ctrl = qp.write_nop(&rig, true);
    rig.ring_send(&ctrl);
    assert_eq!(rig.dev.counters().cqes, 4);
    assert!(rig.dev.counters().cqes_lost >= 2);
}

#[test]
fn an_armed_cq_raises_one_completion_event() {
    let (mut rig, mut eq, mut cq, mut qp) = qp_rig(4);
    eq.drain(&rig);
    cq.arm(&rig);
    let ctrl = qp.write_nop(&rig, true);
    rig.ring_send(&ctrl);
    assert_eq!(
        eq.poll(&rig).unwrap().event(),
        EqeEvent::Completion { cqn: cq.cqn }
    );
    // Not re-armed: no second event.
    let ctrl = qp.write_nop(&rig, true);
    rig.ring_send(&ctrl);
    assert!(eq.poll(&rig).is_none());
    // Armed while CQEs are waiting: the event comes at once.
    cq.poll(&rig).unwrap();
    cq.arm(&rig);
    assert_eq!(
        eq.poll(&rig).unwrap().event(),
        EqeEvent::Completion { cqn: cq.cqn }
    );
}

#[test]
fn the_qp_state_machine_refuses_illegal_transitions() {
    let mut rig = Rig::new();
    rig.up(false);
    let eq = rig.create_eq(&[EventType::COMP.0], 3, 0);
    let cq = rig.create_cq(eq.eqn, 3);
    let qp = rig.create_qp(QpServiceType::QP1, &cq, &cq, 3, 3);
    let n = qp.qpn;
    let state = |rig: &mut Rig| rig.exec(&QueryQp { qpn: n }).unwrap().ctx.state;
    assert_eq!(state(&mut rig), QpState::Rst);
    let bad = CmdStatus::BAD_QP_STATE_ERR;
    assert_eq!(rig.status(&Rtr2RtsQp(modify(n, 1, 0))), bad);
    assert_eq!(rig.status(&Init2RtrQp(modify(n, 1, 0))), bad);
    assert_eq!(rig.status(&Sqerr2RtsQp(modify(n, 1, 0))), bad);
    assert_eq!(
        rig.status(&Rst2InitQp(modify(n, 0, 0))),
        CmdStatus::BAD_PARAM_ERR,
        "port 0"
    );
    assert_eq!(
        rig.status(&Rst2InitQp(modify(n, 2, 0))),
        CmdStatus::BAD_PARAM_ERR,
        "a port the device does not have"
    );
    assert_eq!(
        rig.status(&Rst2InitQp(modify(n, 1, 200))),
        CmdStatus::BAD_PARAM_ERR,
        "a P_Key index beyond the table"
    );
    assert_eq!(
        state(&mut rig),
        QpState::Rst,
        "refused transitions change nothing"
    );
    assert_eq!(rig.status(&Rst2InitQp(modify(n, 1, 0))), CmdStatus::OK);
    assert_eq!(state(&mut rig), QpState::Init);
    assert_eq!(rig.status(&Rst2InitQp(modify(n, 1, 0))), bad);
    assert_eq!(rig.status(&Rtr2RtsQp(modify(n, 1, 0))), bad);
    assert_eq!(rig.status(&Init2RtrQp(modify(n, 1, 0))), CmdStatus::OK);
    assert_eq!(state(&mut rig), QpState::Rtr);
    assert_eq!(rig.status(&Rtr2RtsQp(modify(n, 1, 0))), CmdStatus::OK);
    assert_eq!(state(&mut rig), QpState::Rts);
    assert_eq!(
        rig.status(&Sqerr2RtsQp(modify(n, 1, 0))),
        bad,
        "not in SQER"
    );
    assert_eq!(rig.status(&Init2RtrQp(modify(n, 1, 0))), bad);
    assert_eq!(rig.status(&Qp2Err { qpn: n }), CmdStatus::OK);
    assert_eq!(state(&mut rig), QpState::Err);
    assert_eq!(rig.dev.qp_state(n), Some(QpState::Err));
    assert_eq!(rig.status(&Rtr2RtsQp(modify(n, 1, 0))), bad);
    assert_eq!(rig.status(&Qp2Err { qpn: n }), CmdStatus::OK, "ERR to ERR");
    assert_eq!(rig.status(&Qp2Rst { qpn: n }), CmdStatus::OK);
    assert_eq!(state(&mut rig), QpState::Rst);
    assert_eq!(
        rig.status(&Qp2Rst { qpn: 0x00ab_cdef }),
        CmdStatus::BAD_RES_ERR
    );
    let info = rig.dev.qps();
    assert_eq!(info.len(), 1);
    assert_eq!(info[0].st, QpServiceType::QP1);
}

#[test]
fn one_qp0_and_one_qp1_per_port() {
    let mut rig = Rig::new();
    rig.up(false);
    let eq = rig.create_eq(&[EventType::COMP.0], 3, 0);
    let cq = rig.create_cq(eq.eqn, 3);
    let a = rig.create_qp(QpServiceType::QP0, &cq, &cq, 3, 3);
    let b = rig.create_qp(QpServiceType::QP0, &cq, &cq, 3, 3);
    let c = rig.create_qp(QpServiceType::QP1, &cq, &cq, 3, 3);
    assert_eq!(rig.status(&Rst2InitQp(modify(a.qpn, 1, 0))), CmdStatus::OK);
    assert_eq!(
        rig.status(&Rst2InitQp(modify(b.qpn, 1, 0))),
        CmdStatus::RES_BUSY
    );
    assert_eq!(rig.status(&Rst2InitQp(modify(c.qpn, 1, 0))), CmdStatus::OK);
    assert_eq!(rig.status(&Qp2Rst { qpn: a.qpn }), CmdStatus::OK);
    assert_eq!(rig.status(&Rst2InitQp(modify(b.qpn, 1, 0))), CmdStatus::OK);
}

#[test]
fn create_qp_checks_what_the_qp_refers_to() {
    let mut rig = Rig::new();
    rig.up(false);
    let eq = rig.create_eq(&[EventType::COMP.0], 3, 0);
    let cq = rig.create_cq(eq.eqn, 3);
    let buf = rig.alloc(8192, 4096);
    let dbr = rig.alloc(64, 64);
    let base = CreateQp {
        ctx: Qpc {
            st: QpServiceType::UD,
            pd: rig.pd,
            log_rq_size: 3,
            log_rq_stride: 1,
            log_sq_size: 3,
            rlky: true,
            uar_page: rig.uar,
            cqn_snd: cq.cqn,
            cqn_rcv: cq.cqn,
            dbr_addr: dbr,
            ..Qpc::default()
        },
        opt_param_mask: 0,
        input_qpn: 0,
        pas: vec![buf],
    };
    let with = |f: &dyn Fn(&mut CreateQp)| {
        let mut c = base.clone();
        f(&mut c);
        c
    };
    assert_eq!(rig.status(&base), CmdStatus::OK);
    assert_eq!(
        rig.outcome(&with(&|c| c.ctx.st = QpServiceType::RC)),
        (CmdStatus::BAD_PARAM_ERR, syndrome::QP_TYPE)
    );
    assert_eq!(
        rig.outcome(&with(&|c| c.ctx.cqn_snd = 0x77_7777)),
        (CmdStatus::BAD_RES_ERR, syndrome::NO_CQ)
    );
    assert_eq!(
        rig.outcome(&with(&|c| c.ctx.pd = 0x55_5555)),
        (CmdStatus::BAD_RES_ERR, syndrome::NO_PD)
    );
    assert_eq!(
        rig.outcome(&with(&|c| c.ctx.uar_page = 0x4444)),
        (CmdStatus::BAD_RES_ERR, syndrome::NO_UAR)
    );
    assert_eq!(
        rig.outcome(&with(&|c| c.ctx.dbr_addr = dbr + 4)),
        (CmdStatus::BAD_PARAM_ERR, syndrome::DBR)
    );
    assert_eq!(
        rig.outcome(&with(&|c| c.ctx.log_sq_size = 9)),
        (CmdStatus::BAD_PARAM_ERR, syndrome::PAS),
        "the buffer's one page cannot hold 512 basic blocks"
    );
    assert_eq!(rig.dev.resources().qps, 1);
}

/// The receive WQE stride against `max_wqe_sz_rq`, with a buffer large enough that only that
/// check can refuse the QP. (`log_rq_size` and `log_sq_size` are 4-bit fields and
/// `log_max_qp_sz` is 15: a queue past it cannot be encoded.)
#[test]
fn create_qp_checks_the_receive_stride_against_max_wqe_sz_rq() {
    let mut rig = Rig::new();
    rig.up(false);
    let eq = rig.create_eq(&[EventType::COMP.0], 3, 0);
    let cq = rig.create_cq(eq.eqn, 3);
    let caps = rig.caps();
    let dbr = rig.alloc(64, 64);
    let (pd, uar, cqn) = (rig.pd, rig.uar, cq.cqn);
    let qp = |log_rq_stride: u8, pas| CreateQp {
        ctx: Qpc {
            st: QpServiceType::UD,
            pd,
            log_rq_size: 3,
            log_rq_stride,
            log_sq_size: 3,
            rlky: true,
            uar_page: uar,
            cqn_snd: cqn,
            cqn_rcv: cqn,
            dbr_addr: dbr,
            ..Qpc::default()
        },
        opt_param_mask: 0,
        input_qpn: 0,
        pas,
    };
    // Receive WQEs of max_wqe_sz_rq, then twice that; 8 of each plus 8 send basic blocks
    // fit the pages given.
    let largest = caps.max_wqe_sz_rq().trailing_zeros() as u8 - 4;
    let pas = rig.pages(((8u32 << (largest + 5)) as usize + 512).div_ceil(4096));
    let ok = qp(largest, pas.clone());
    let qpn = rig.exec(&ok).expect("receive WQEs of max_wqe_sz_rq").qpn;
    rig.exec(&DestroyQp { qpn }).unwrap();
    assert_eq!(
        rig.outcome(&qp(largest + 1, pas)),
        (CmdStatus::BAD_PARAM_ERR, syndrome::QUEUE_SIZE),
        "receive WQEs larger than max_wqe_sz_rq"
    );
    assert_eq!(rig.dev.resources().qps, 0);
}

#[test]
fn doorbells_are_taken_only_from_the_queues_own_uar() {
    let (mut rig, _eq, mut cq, mut qp) = qp_rig(3);
    let other = rig.exec(&AllocUar).unwrap().uar;
    let ctrl = qp.write_nop(&rig, true);
    let wrong = u64::from(other) * 4096 + 0x800;
    rig.dev
        .mmio_write_checked(wrong, &ctrl.doorbell_qword().unwrap().to_be_bytes());
    assert!(cq.poll(&rig).is_none());
    assert_eq!(rig.dev.counters().uar_writes_ignored, 1);
    rig.ring_send(&ctrl);
    assert!(cq.poll(&rig).is_some());
}

/// Device writes by offset, as a driver's BAR mapping would do them.
trait MmioExt {
    fn mmio_write_checked(&self, off: u64, data: &[u8]);
}

impl MmioExt for sim::mlx5::Mlx5 {
    fn mmio_write_checked(&self, off: u64, data: &[u8]) {
        sim::Device::mmio_write(self, 0, off, data);
    }
}

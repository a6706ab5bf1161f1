//! Every fault the simulated ConnectX injects, observed the way a driver would observe it:
//! a chosen syndrome on the Nth send or receive WQE, a QP moved to error, CQE delay, a
//! catastrophic error in the health buffer, a stuck health counter, an unreachable firmware
//! version, surprise removal, the REQ interrupt, and firmware that never finishes booting.

mod mlx5rig;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use firmware_cmds::mlx5::cmd::status::CmdStatus;
use firmware_cmds::mlx5::cqe::{Cqe, CqeBody, CqeOpcode};
use firmware_cmds::mlx5::eqe::{EqeEvent, EventType, queue_type};
use firmware_cmds::mlx5::health::{HealthBuffer, HealthSyndrome};
use firmware_cmds::mlx5::init_seg::{CmdqAddrLoSz, HealthCounter, NicInterface, off};
use firmware_cmds::mlx5::ops::Command;
use firmware_cmds::mlx5::ops::pd::AllocPd;
use firmware_cmds::mlx5::ops::qp_modify::{ModifyQp, Sqerr2RtsQp};
use firmware_cmds::mlx5::qpc::{QpServiceType, QpState, Qpc};
use firmware_cmds::mlx5::syndrome::{CqeSyndrome, IbWcStatus};
use mlx5rig::{CqRing, EqRing, Loopback, QP1_QKEY, QpRing, Rig, SendSpec};
use sim::mlx5::{DropReason, WqeQueue};
use sim::{Device, IrqKind, Packet};

struct Net {
    rig: Rig,
    link: Arc<Loopback>,
    eq: EqRing,
    scq: CqRing,
    rcq: CqRing,
    qp: QpRing,
}

fn net() -> Net {
    let mut rig = Rig::new();
    rig.up(false);
    let link = Loopback::attach(&rig);
    let mut eq = rig.create_eq(&[EventType::COMP.0, EventType::WQ_CATAS_ERROR.0], 5, 0);
    eq.drain(&rig);
    let scq = rig.create_cq(eq.eqn, 6);
    let rcq = rig.create_cq(eq.eqn, 6);
    let qp = rig.create_qp(QpServiceType::QP1, &scq, &rcq, 6, 6);
    rig.qp_to_rts(&qp, QP1_QKEY);
    Net {
        rig,
        link,
        eq,
        scq,
        rcq,
        qp,
    }
}

fn health(rig: &Rig) -> HealthBuffer {
    let mut raw = [0u8; 64];
    for (i, b) in raw.chunks_mut(4).enumerate() {
        b.copy_from_slice(&rig.rd32(off::HEALTH as u64 + 4 * i as u64).to_be_bytes());
    }
    HealthBuffer::decode(&raw).unwrap()
}

fn error_of(c: &Cqe) -> (CqeOpcode, CqeSyndrome, u8) {
    match &c.body {
        CqeBody::Error(e) => (c.opcode, e.syndrome, e.vendor_err),
        other => panic!("expected an error CQE, got {other:?}"),
    }
}

fn sqerr2rts(n: &mut Net) {
    n.rig
        .exec(&Sqerr2RtsQp(ModifyQp {
            qpn: n.qp.qpn,
            opt_param_mask: 0,
            ctx: Qpc::default(),
        }))
        .unwrap();
}

#[test]
fn each_syndrome_on_the_nth_send() {
    let mut n = net();
    let addr = n.rig.alloc(256, 64);
    let mut all: Vec<CqeSyndrome> = CqeSyndrome::ALL.to_vec();
    all.push(CqeSyndrome(0x33));
    for (k, &synd) in all.iter().enumerate() {
        let vendor = 0x80 + k as u8;
        n.rig
            .dev
            .faults()
            .wqe_error(n.qp.qpn, WqeQueue::Send, 2, synd, vendor);
        let sent_before = n.link.sent.lock().unwrap().len();
        let mut ctrls = Vec::new();
        for _ in 0..3 {
            ctrls.push(n.qp.write_send(&n.rig, &SendSpec::mad(addr)));
        }
        n.rig.ring_send(&ctrls[2]);
        let c = n.scq.drain(&n.rig);
        assert_eq!(c.len(), 3, "{synd}");
        assert_eq!(c[0].opcode, CqeOpcode::REQ, "{synd}: the first send runs");
        assert_eq!(error_of(&c[1]), (CqeOpcode::REQ_ERR, synd, vendor));
        assert_eq!(c[1].wqe_counter, ctrls[1].wqe_index);
        assert_eq!(
            error_of(&c[2]),
            (CqeOpcode::REQ_ERR, CqeSyndrome::WR_FLUSHED_ERR, 0xf9),
            "{synd}: the WQE after it is flushed"
        );
        assert_eq!(c[2].wqe_counter, ctrls[2].wqe_index);
        // What the driver makes of it.
        let wc = c[1].wc_error().unwrap();
        let expected = if synd.0 == 0x33 {
            IbWcStatus::GeneralErr
        } else {
            synd.wc_status()
        };
        assert_eq!((wc.status, wc.vendor_err), (expected, vendor));
        assert_eq!(n.rig.dev.qp_state(n.qp.qpn), Some(QpState::Sqer));
        assert_eq!(n.link.sent.lock().unwrap().len(), sent_before + 1);
        sqerr2rts(&mut n);
    }
    assert_eq!(n.rig.dev.iommu().fault_count(), 0);
}

#[test]
fn a_syndrome_on_the_nth_receive() {
    let mut n = net();
    for _ in 0..3 {
        let b = n.rig.alloc(512, 64);
        n.qp.post_recv(&n.rig, b, 512);
    }
    n.rig.dev.faults().wqe_error(
        n.qp.qpn,
        WqeQueue::Recv,
        2,
        CqeSyndrome::REMOTE_ACCESS_ERR,
        0x42,
    );
    let addr = n.rig.alloc(256, 64);
    for _ in 0..2 {
        let ctrl = n.qp.write_send(&n.rig, &SendSpec::mad(addr));
        n.rig.ring_send(&ctrl);
    }
    n.rig.settle();
    let c = n.rcq.drain(&n.rig);
    assert_eq!(c.len(), 3);
    assert_eq!(c[0].opcode, CqeOpcode::RESP_SEND);
    assert_eq!(
        error_of(&c[1]),
        (CqeOpcode::RESP_ERR, CqeSyndrome::REMOTE_ACCESS_ERR, 0x42)
    );
    assert_eq!(c[1].wqe_counter, 1);
    assert_eq!(
        error_of(&c[2]),
        (CqeOpcode::RESP_ERR, CqeSyndrome::WR_FLUSHED_ERR, 0xf9)
    );
    assert_eq!(n.rig.dev.qp_state(n.qp.qpn), Some(QpState::Err));
}

#[test]
fn a_qp_moved_to_error_flushes_everything_and_says_so() {
    let mut n = net();
    for _ in 0..2 {
        let b = n.rig.alloc(512, 64);
        n.qp.post_recv(&n.rig, b, 512);
    }
    let addr = n.rig.alloc(256, 64);
    // Two sends posted, doorbell not rung yet: outstanding in the send queue.
    n.qp.write_send(&n.rig, &SendSpec::mad(addr));
    n.qp.write_send(
        &n.rig,
        &SendSpec {
            signaled: false,
            ..SendSpec::mad(addr)
        },
    );
    assert!(n.rig.dev.faults().qp_to_error(n.qp.qpn));
    assert_eq!(n.rig.dev.qp_state(n.qp.qpn), Some(QpState::Err));
    let s = n.scq.drain(&n.rig);
    assert_eq!(s.len(), 2, "every outstanding send, signaled or not");
    assert!(
        s.iter()
            .all(|c| error_of(c) == (CqeOpcode::REQ_ERR, CqeSyndrome::WR_FLUSHED_ERR, 0xf9))
    );
    let r = n.rcq.drain(&n.rig);
    assert_eq!(r.len(), 2);
    assert!(
        r.iter()
            .all(|c| error_of(c).1 == CqeSyndrome::WR_FLUSHED_ERR)
    );
    let events: Vec<EqeEvent> =
        n.eq.drain(&n.rig)
            .iter()
            .map(firmware_cmds::mlx5::eqe::Eqe::event)
            .collect();
    assert!(events.contains(&EqeEvent::QueueEvent {
        event: EventType::WQ_CATAS_ERROR,
        queue_type: queue_type::QP,
        number: n.qp.qpn
    }));
    assert!(n.link.sent.lock().unwrap().is_empty());
    assert!(!n.rig.dev.faults().qp_to_error(0x00ab_cdef));
}

#[test]
fn cqes_can_be_delayed_and_stay_in_order() {
    let mut n = net();
    let addr = n.rig.alloc(256, 64);
    n.rig.dev.faults().cqe_delay(Duration::from_millis(10));
    let first = n.qp.write_send(&n.rig, &SendSpec::mad(addr));
    n.rig.ring_send(&first);
    n.rig.wait(Duration::from_millis(4));
    let second = n.qp.write_send(&n.rig, &SendSpec::mad(addr));
    n.rig.ring_send(&second);
    // Undelayed again: the third still waits behind the delayed ones.
    n.rig.dev.faults().cqe_delay(Duration::ZERO);
    let third = n.qp.write_send(&n.rig, &SendSpec::mad(addr));
    n.rig.ring_send(&third);
    assert!(n.scq.poll(&n.rig).is_none(), "nothing before the delay");
    n.rig.wait(Duration::from_millis(7));
    let got = n.scq.drain(&n.rig);
    assert_eq!(
        got.iter().map(|cqe| cqe.wqe_counter).collect::<Vec<_>>(),
        vec![first.wqe_index],
        "the first is due at 10 ms, the others at 14 ms"
    );
    n.rig.wait(Duration::from_millis(5));
    let got = n.scq.drain(&n.rig);
    assert_eq!(
        got.iter().map(|cqe| cqe.wqe_counter).collect::<Vec<_>>(),
        vec![second.wqe_index, third.wqe_index]
    );
    // A per-CQ delay on the receive CQ only.
    n.rig
        .dev
        .faults()
        .cq_cqe_delay(n.rcq.cqn, Duration::from_millis(3));
    let buf = n.rig.alloc(512, 64);
    n.qp.post_recv(&n.rig, buf, 512);
    let fourth = n.qp.write_send(&n.rig, &SendSpec::mad(addr));
    n.rig.ring_send(&fourth);
    n.rig.settle();
    assert!(n.scq.poll(&n.rig).is_some());
    assert!(n.rcq.poll(&n.rig).is_none());
    n.rig.wait(Duration::from_millis(3));
    assert!(n.rcq.poll(&n.rig).is_some());
}

#[test]
fn a_catastrophic_error_shows_in_the_health_buffer_and_stops_the_firmware() {
    let mut n = net();
    assert_eq!(health(&n.rig).synd.0, 0);
    n.rig
        .dev
        .faults()
        .catastrophic(HealthSyndrome::HW_FATAL_ERR, true);
    let h = health(&n.rig);
    assert_eq!(h.synd, HealthSyndrome::HW_FATAL_ERR);
    assert!(h.rfr());
    assert!(h.recovery_required());
    assert_eq!(
        HealthCounter::decode(n.rig.rd32(off::HEALTH_COUNTER as u64)).syndrome,
        HealthSyndrome::HW_FATAL_ERR.0
    );
    // The firmware shut the NIC interface down (what the kernel's `check_fatal_sensors`
    // reads first), and a driver's request does not bring it back.
    let nic = |rig: &Rig| CmdqAddrLoSz::decode(rig.rd32(off::CMDQ_ADDR_L_SZ as u64)).nic_interface;
    assert_eq!(nic(&n.rig), NicInterface::DISABLED);
    n.rig.wr32(off::CMDQ_ADDR_L_SZ as u64, n.rig.cmdq as u32);
    assert_eq!(nic(&n.rig), NicInterface::DISABLED, "FULL_DRIVER asked");
    // Commands stay pending; doorbells and packets are ignored.
    let p = n.rig.prepare(0, &AllocPd.encode().unwrap(), 16);
    let posted = n.rig.post(0, &p);
    n.rig.wait(Duration::from_secs(1));
    assert!(n.rig.completion(&posted).is_none());
    let addr = n.rig.alloc(256, 64);
    let ctrl = n.qp.write_send(&n.rig, &SendSpec::mad(addr));
    n.rig.ring_send(&ctrl);
    assert!(n.scq.poll(&n.rig).is_none());
    assert!(n.link.sent.lock().unwrap().is_empty());
    n.link.inject(Packet {
        slid: 1,
        dlid: mlx5rig::LID,
        sl: 0,
        vl15: false,
        src_qp: 1,
        dst_qp: 1,
        qkey: QP1_QKEY,
        pkey: 0xffff,
        grh: None,
        mad: Box::new([0; 256]),
    });
    n.rig.settle();
    assert_eq!(n.rig.dev.counters().dropped(DropReason::DeviceDown), 1);
    // A function reset brings the device back to power-on.
    assert!(n.rig.dev.reset());
    assert_eq!(health(&n.rig).synd.0, 0);
    assert_eq!(nic(&n.rig), NicInterface::FULL_DRIVER);
    assert_eq!(n.rig.dev.resources(), sim::mlx5::ResourceCounts::default());
    assert_eq!(n.rig.dev.pages_held(), 0);
    assert_eq!(n.rig.rd32(off::INITIALIZING as u64) >> 31, 1);
}

#[test]
fn a_stopped_health_counter_stops() {
    let rig = Rig::new();
    let read = |rig: &Rig| HealthCounter::decode(rig.rd32(off::HEALTH_COUNTER as u64)).counter;
    rig.wait(Duration::from_millis(500));
    let a = read(&rig);
    rig.dev.faults().stop_health_counter(true);
    rig.wait(Duration::from_secs(6));
    assert_eq!(read(&rig), a, "three missed polls at 2 s");
    rig.dev.faults().stop_health_counter(false);
    rig.wait(Duration::from_millis(300));
    assert_ne!(read(&rig), a);
}

/// Dead firmware no longer increments its health counter (the kernel's `poll_health` in
/// `health.c` counts a counter unchanged for `MAX_MISSES` polls as firmware gone), so after a
/// fatal error it reads the same however long the driver waits; a function reset brings the
/// firmware back and the counter moves again.
#[test]
fn a_fatal_error_stops_the_health_counter_until_a_reset() {
    let rig = Rig::new();
    let read = |rig: &Rig| HealthCounter::decode(rig.rd32(off::HEALTH_COUNTER as u64)).counter;
    rig.wait(Duration::from_millis(500));
    let alive = read(&rig);
    rig.wait(Duration::from_millis(300));
    assert_ne!(read(&rig), alive, "a live firmware's counter moves");
    rig.dev
        .faults()
        .catastrophic(HealthSyndrome::HW_FATAL_ERR, true);
    let dead = read(&rig);
    rig.wait(Duration::from_secs(7));
    assert_eq!(read(&rig), dead, "three missed polls at 2 s and more");
    assert!(rig.dev.reset());
    let reset = read(&rig);
    rig.wait(Duration::from_millis(300));
    assert_ne!(read(&rig), reset, "the firmware is back after the reset");
}

#[test]
fn an_unreachable_firmware_version_reads_all_ones() {
    let rig = Rig::new();
    assert!(!health(&rig).unreachable());
    rig.dev.faults().fw_ver_unreachable();
    assert!(health(&rig).unreachable());
    assert_ne!(
        rig.rd32(off::FW_REV as u64),
        0xffff_ffff,
        "the rest still answers"
    );
}

#[test]
fn a_removed_device_reads_all_ones_and_does_no_dma() {
    let mut n = net();
    let addr = n.rig.alloc(256, 64);
    n.qp.write_send(&n.rig, &SendSpec::mad(addr));
    n.rig.dev.faults().remove();
    assert!(n.rig.dev.removed());
    for o in [
        off::FW_REV,
        off::INITIALIZING,
        off::HEALTH_COUNTER,
        off::HEALTH + 0x30,
    ] {
        assert_eq!(n.rig.rd32(o as u64), 0xffff_ffff);
    }
    let mut b = [0u8; 8];
    n.rig.dev.mmio_read(0, n.rig.uar_base() + 0x800, &mut b);
    assert_eq!(b, [0xff; 8]);
    let mut id = [0u8; 4];
    n.rig.dev.config().read(0, &mut id);
    assert_eq!(id, [0xff; 4]);
    assert!(!n.rig.dev.iommu().bus_master());
    // Writes go nowhere: no command runs, no send leaves, no DMA is attempted.
    let p = n.rig.prepare(0, &AllocPd.encode().unwrap(), 16);
    let posted = n.rig.post(0, &p);
    assert!(n.rig.completion(&posted).is_none());
    n.rig.ring_send(&firmware_cmds::mlx5::wqe::CtrlSeg {
        qpn: n.qp.qpn,
        ds: 5,
        ..Default::default()
    });
    assert!(n.link.sent.lock().unwrap().is_empty());
    assert_eq!(n.rig.dev.iommu().fault_count(), 0);
    assert_eq!(n.rig.dev.iommu().blocked_count(), 0, "not even attempted");
    assert!(!n.rig.dev.reset(), "a removed function cannot be reset");
}

#[test]
fn the_req_interrupt_asks_for_the_device_back() {
    let rig = Rig::new();
    assert!(!rig.dev.faults().request_release(), "nobody listens yet");
    let hits = Arc::new(AtomicU32::new(0));
    let h = hits.clone();
    rig.dev.irqs().set(
        IrqKind::Req,
        0,
        Some(Arc::new(move || {
            h.fetch_add(1, Ordering::SeqCst);
        })),
    );
    assert!(rig.dev.faults().request_release());
    assert_eq!(hits.load(Ordering::SeqCst), 1);
}

#[test]
fn firmware_that_never_boots_keeps_initializing_set_and_takes_no_command() {
    let mut rig = Rig::new();
    rig.dev.faults().hold_initializing(true);
    rig.wait(Duration::from_secs(10));
    assert_eq!(rig.rd32(off::INITIALIZING as u64) >> 31, 1);
    rig.wr32(off::CMDQ_ADDR_H as u64, (rig.cmdq >> 32) as u32);
    rig.wr32(off::CMDQ_ADDR_L_SZ as u64, rig.cmdq as u32);
    let p = rig.prepare(0, &AllocPd.encode().unwrap(), 16);
    let posted = rig.post(0, &p);
    assert!(rig.completion(&posted).is_none());
    rig.dev.faults().hold_initializing(false);
    assert_eq!(rig.rd32(off::INITIALIZING as u64) >> 31, 0);
    // The entry is still the driver's to ring again.
    rig.wr32(off::CMD_DBELL as u64, 1);
    assert_eq!(
        rig.completion(&posted).unwrap().status(),
        CmdStatus::BAD_RES_STATE_ERR
    );
}

/// `corrupt_completion`: the command runs (ALLOC_PD's PD exists), then exactly the part of
/// its completion the corruption names is spoiled, the rest as a clean completion has it.
/// QUERY_HCA_CAP's output spans eight mailbox blocks, so every corruption applies.
#[test]
fn a_corrupt_completion_spoils_exactly_what_it_names_after_the_command_ran() {
    use firmware_cmds::mlx5::Opcode;
    use firmware_cmds::mlx5::cmd::entry::CmdEntry;
    use firmware_cmds::mlx5::cmd::mailbox::{BLOCK_SIZE, MailboxBlock};
    use firmware_cmds::mlx5::cmd::status::DeliveryStatus;
    use firmware_cmds::mlx5::ops::hca_cap::{CapMode, QueryHcaCap};
    use sim::mlx5::CmdCorruption;

    let q = QueryHcaCap::general(CapMode::Current);
    let input = q.encode().unwrap();
    let cases = [
        CmdCorruption::EntryToken,
        CmdCorruption::OutputBlockNumber,
        CmdCorruption::OutputBlockToken,
        CmdCorruption::OutputNextOutside,
        CmdCorruption::OutputChainCut,
        CmdCorruption::DeliveryStatus(DeliveryStatus(0x7f)),
        CmdCorruption::OwnerStillSet,
    ];
    for how in cases {
        let mut rig = Rig::new();
        rig.up(false);
        // The clean completion of the same command, for comparison.
        let clean = rig.cmd_on(1, &input, q.out_len());
        assert_eq!(clean.delivery, DeliveryStatus::OK);

        rig.dev
            .faults()
            .corrupt_completion(Opcode::QUERY_HCA_CAP.0, how);
        let p = rig.prepare(1, &input, q.out_len());
        let posted = rig.post(1, &p);
        rig.settle();
        let raw = rig.mem.bytes(rig.cmdq + 64, 64);
        let e = CmdEntry::decode(&raw).unwrap();
        let block = MailboxBlock::decode(&rig.mem.bytes(p.out_addrs[0], BLOCK_SIZE)).unwrap();
        let want_token = if how == CmdCorruption::EntryToken {
            posted.token.wrapping_add(0x80)
        } else {
            posted.token
        };
        assert_eq!(e.token, want_token, "{how:?}: entry token");
        assert_eq!(
            e.hw_owned,
            how == CmdCorruption::OwnerStillSet,
            "{how:?}: ownership"
        );
        let want_status = match how {
            CmdCorruption::DeliveryStatus(s) => s,
            _ => DeliveryStatus::OK,
        };
        assert_eq!(e.delivery_status, want_status, "{how:?}");
        assert_eq!(
            e.out_inline[..],
            clean.out[..16],
            "{how:?}: inline output written"
        );
        assert_eq!(
            block.data[..],
            clean.out[16..16 + 512],
            "{how:?}: first block's data written"
        );
        let (num, tok, next) = match how {
            CmdCorruption::OutputBlockNumber => (1, posted.token, p.out_addrs[1]),
            CmdCorruption::OutputBlockToken => (0, posted.token.wrapping_add(0x80), p.out_addrs[1]),
            CmdCorruption::OutputNextOutside => (0, posted.token, rig.cmdq),
            CmdCorruption::OutputChainCut => (0, posted.token, 0),
            _ => (0, posted.token, p.out_addrs[1]),
        };
        assert_eq!(
            (block.block_num, block.token, block.next),
            (num, tok, next),
            "{how:?}: first output block"
        );
        // The next command on the slot runs, unless the slot was left the device's.
        let ignored = rig.dev.counters().cmd_doorbells_ignored;
        let p = rig.prepare(1, &input, q.out_len());
        let next = rig.post(1, &p);
        rig.settle();
        let stuck = how == CmdCorruption::OwnerStillSet;
        assert_eq!(rig.completion(&next).is_none(), stuck, "{how:?}");
        assert_eq!(
            rig.dev.counters().cmd_doorbells_ignored,
            ignored + u64::from(stuck),
            "{how:?}"
        );
    }

    // The command took effect although its completion is corrupt.
    let mut rig = Rig::new();
    rig.up(false);
    let pds = rig.dev.resources().pds;
    rig.dev
        .faults()
        .corrupt_completion(Opcode::ALLOC_PD.0, CmdCorruption::EntryToken);
    let input = AllocPd.encode().unwrap();
    let p = rig.prepare(1, &input, AllocPd.out_len());
    let posted = rig.post(1, &p);
    rig.settle();
    let e = CmdEntry::decode(&rig.mem.bytes(rig.cmdq + 64, 64)).unwrap();
    assert_ne!(e.token, posted.token);
    assert_eq!(rig.dev.resources().pds, pds + 1, "the PD exists");
}

//! The MAD layer on the simulated ConnectX: one scenario per path of the issue (reference
//! mad-stack.md §1), each asserting exactly one completion per send with its status, no event
//! after deregistration, MAD leases and IOMMU mappings back to their baseline, and no IOMMU
//! fault (then, at the end, nothing left in the driver or the device).
//!
//! Requests go to the port's own LID and are looped back by the device; a responder agent on
//! the same port answers them ([`ANSWERED`]), a silent one receives them and never answers
//! ([`SILENT`]).

use std::time::Duration;

use driver::DeviceBackend;
use driver::verbs::{Hca, HcaOptions, HcaPort, SpecialQp, WcStatus};
use firmware_cmds::mlx5::health::HealthSyndrome;
use firmware_cmds::mlx5::qpc::QpState;
use firmware_cmds::mlx5::syndrome::CqeSyndrome;
use hca_tests::mad_rig::{
    ANSWERED, GET, GET_TABLE, MadRig, SA, SEND, SILENT, Seen, Tracker, answer_of,
    deregister_keeping_queue, mad, tid_of,
};
use mad::{AgentSpec, DropReason, Event, MadError, MethodMask, PortConfig, SendRequest, SendState};
use sim::mlx5::WqeQueue;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[test]
fn path01_send_without_response_completes_once_after_its_cqe() {
    let rig = MadRig::new();
    let a = rig.requester();
    let mut t = Tracker::default();
    let ids: Vec<_> = (0..8)
        .map(|i| {
            a.send(
                SendRequest::new(mad(ANSWERED, SEND, i), rig.to_self(SpecialQp::Gsi))
                    .context(u64::from(i)),
            )
            .unwrap()
        })
        .collect();
    assert!(rig.pump_until(None, &[&a], &mut t, ms(100), |t| t.all_done(&ids)));
    for (i, id) in ids.iter().enumerate() {
        let c = &t.done[id];
        assert_eq!(
            (c.status, c.vendor_err, c.retries, c.context),
            (WcStatus::Success, 0, 0, i as u64)
        );
        assert_eq!(
            c.tid >> 56,
            0,
            "the top byte of the stack's TID half stays clear"
        );
        assert_eq!(c.tid & 0xFFFF_FFFF, i as u64, "the client's half is kept");
    }
    // Nobody registered for them on our port: they were dropped there, not answered.
    assert_eq!(rig.port.counters().drops.get(DropReason::NoAgent), 8);
    rig.deregister(a, &mut t);
    assert_eq!(t.done.len(), 8);
    rig.assert_clean();
    rig.finish();
}

#[test]
fn path02_the_response_is_delivered_linked_then_the_send_completes() {
    let rig = MadRig::new();
    let responder = rig.listener(ANSWERED);
    let a = rig.requester();
    let mut t = Tracker::default();
    let id = a
        .send(rig.request(ANSWERED, 0x42, 200, 0).context(7))
        .unwrap();
    assert!(
        rig.pump_until(Some(&responder), &[&a], &mut t, ms(100), |t| t
            .all_done(&[id]))
    );
    assert_eq!(t.recvs.len(), 1);
    let r = &t.recvs[0];
    assert_eq!(r.response_to.map(|s| (s.id, s.context)), Some((id, 7)));
    assert_eq!(r.header().method(), 0x81);
    let c = &t.done[&id];
    assert_eq!(c.status, WcStatus::Success);
    assert_eq!(r.header().tid(), c.tid, "matched on the TID as sent");
    assert_ne!(c.tid >> 32, 0, "the stack owns the upper half");
    // The requester's queue told it the response first, then the completion.
    let (recv, send) = (t.position(Seen::Recv, id), t.position(Seen::Send, id));
    assert!(
        matches!((recv, send), (Some(told), Some(done)) if told < done),
        "the linked response before the completion: {:?}",
        t.log
    );
    assert_eq!(rig.port.counters().responses, 1);
    rig.deregister(a, &mut t);
    rig.deregister(responder, &mut t);
    rig.assert_clean();
    rig.finish();
}

#[test]
fn path02_an_smp_to_our_own_port_is_answered_by_the_firmware_sma() {
    let rig = MadRig::new();
    let sm = rig.agent(AgentSpec::class(0x01, 1, MethodMask::NONE));
    let mut t = Tracker::default();
    // LID-routed SubnGet(NodeInfo) to our own LID on QP0.
    let mut m = mad(0x01, GET, 9);
    m[16..18].copy_from_slice(&0x0011u16.to_be_bytes());
    let id = sm
        .send(SendRequest::new(m, rig.to_self(SpecialQp::Smi)).timeout_ms(200))
        .unwrap();
    assert!(rig.pump_until(None, &[&sm], &mut t, ms(100), |t| t.all_done(&[id])));
    assert_eq!(t.status(id), Some(WcStatus::Success));
    let r = &t.recvs[0];
    assert_eq!((r.header().method(), r.header().status()), (0x81, 0));
    assert_eq!(r.mad[64 + 2], 1, "NodeInfo: NodeType CA");
    assert_eq!(rig.port.counters().local_replies, 1);
    rig.deregister(sm, &mut t);
    rig.assert_clean();
    rig.finish();
}

#[test]
fn path02_a_vendor_class_get_is_answered_by_the_device_before_any_agent() {
    // mlx5's process_mad hands Get and Set of Mellanox vendor class 2 (0x0A) to MAD_IFC
    // before it looks for a client agent. The simulated firmware implements no attribute of
    // that class: it answers GetResp with status 0x000C. Other methods reach the agent.
    let rig = MadRig::new();
    let vendor = rig.listener(0x0A);
    let a = rig.requester();
    let mut t = Tracker::default();
    let get = a.send(rig.request(0x0A, 5, 200, 0)).unwrap();
    let send = a
        .send(SendRequest::new(
            mad(0x0A, SEND, 6),
            rig.to_self(SpecialQp::Gsi),
        ))
        .unwrap();
    assert!(rig.pump_until(None, &[&a, &vendor], &mut t, ms(100), |t| {
        t.all_done(&[get, send]) && t.recvs.len() == 2
    }));
    rig.pump(None, &[&a, &vendor], &mut t, ms(5));
    assert_eq!(t.status(get), Some(WcStatus::Success));
    let to_vendor: Vec<_> = t.recvs.iter().filter(|r| r.agent == vendor.id()).collect();
    assert_eq!(to_vendor.len(), 1, "only the Send reaches the agent");
    assert_eq!(
        (
            to_vendor[0].header().method(),
            tid_of(&to_vendor[0].mad) & 0xFFFF_FFFF
        ),
        (SEND, 6)
    );
    let r = t
        .recvs
        .iter()
        .find(|r| r.response_to.map(|s| s.id) == Some(get))
        .expect("the Get was answered");
    assert_eq!((r.header().method(), r.header().status()), (0x81, 0x000C));
    assert_eq!(r.header().mgmt_class(), 0x0A);
    assert_eq!(rig.port.counters().local_replies, 1);
    rig.deregister(a, &mut t);
    rig.deregister(vendor, &mut t);
    rig.assert_clean();
    rig.finish();
}

#[test]
fn path03_early_response_completes_the_send_only_at_its_cqe() {
    let rig = MadRig::new();
    let responder = rig.listener(ANSWERED);
    let a = rig.requester();
    let mut t = Tracker::default();
    // QP1's send completions come 20 ms late; the looped-back response overtakes them.
    rig.sim
        .model
        .faults()
        .send_completion_delay(rig.qpn(SpecialQp::Gsi), ms(20));
    let id = a.send(rig.request(ANSWERED, 1, 1000, 0)).unwrap();
    assert!(
        rig.pump_until(Some(&responder), &[&a], &mut t, ms(15), |t| !t
            .recvs
            .is_empty())
    );
    assert!(t.done.is_empty(), "the send waits for its CQE");
    assert_eq!(t.recvs[0].response_to.map(|s| s.id), Some(id));
    assert_eq!(rig.port.census().gsi.count(SendState::EarlyResp), 1);
    assert_eq!(
        rig.port.census().gsi.active(),
        2,
        "the request's slot (and the answer's), with their send buffers, stay until their CQEs"
    );
    assert_eq!(
        rig.hca.accounting().mad_pool.leases_out,
        rig.base_leases,
        "sends use their slots' buffers, leased when the port opened: no lease per send"
    );
    assert!(
        rig.pump_until(Some(&responder), &[&a], &mut t, ms(100), |t| t
            .all_done(&[id]))
    );
    assert_eq!(t.status(id), Some(WcStatus::Success));
    let (recv, send) = (t.position(Seen::Recv, id), t.position(Seen::Send, id));
    assert!(
        matches!((recv, send), (Some(told), Some(done)) if told < done),
        "the early response before the completion: {:?}",
        t.log
    );
    assert_eq!(rig.port.counters().early_responses, 1);
    rig.sim
        .model
        .faults()
        .send_completion_delay(rig.qpn(SpecialQp::Gsi), Duration::ZERO);
    rig.pump(Some(&responder), &[&a], &mut t, ms(30));
    rig.deregister(a, &mut t);
    rig.deregister(responder, &mut t);
    rig.assert_clean();
    rig.finish();
}

#[test]
fn path04_timeout_after_retries_then_a_late_response_is_dropped() {
    let rig = MadRig::new();
    let silent = rig.listener(SILENT);
    let a = rig.requester();
    let mut t = Tracker::default();
    let start = rig.port.now();
    let sent_before = rig.sim.model.counters().packets_sent;
    let id = a.send(rig.request(SILENT, 5, 100, 2)).unwrap();
    let mut attempts = Vec::new();
    let deadline = rig.port.deadline_after(ms(1000));
    while !t.all_done(&[id]) && rig.port.now() < deadline {
        rig.pump(None, &[&a], &mut t, ms(1));
        while let Some(Event::Recv(r)) = silent.try_event() {
            attempts.push(r);
        }
    }
    let c = &t.done[&id];
    assert_eq!((c.status, c.retries), (WcStatus::RespTimeoutErr, 2));
    assert_eq!(attempts.len(), 3, "retries + 1 attempts on the wire");
    assert_eq!(
        rig.sim.model.counters().packets_sent - sent_before,
        3,
        "the device sent each attempt once"
    );
    assert!(
        attempts.iter().all(|r| r.header().tid() == c.tid),
        "the same TID each time"
    );
    let took = rig.port.now().saturating_sub(start);
    assert!(
        took >= ms(300) && took < ms(400),
        "3 × 100 ms from each send's CQE: {took:?}"
    );
    let k = rig.port.counters();
    assert_eq!((k.timeouts, k.retries), (1, 2));
    // The silent agent finally answers: too late.
    silent
        .send(SendRequest::new(
            answer_of(&attempts[0]),
            attempts[0].addr.reply_dest(),
        ))
        .unwrap();
    rig.pump(None, &[&a, &silent], &mut t, ms(20));
    assert_eq!(t.recvs.len(), 0, "the late response is not delivered");
    assert_eq!(rig.port.counters().drops.get(DropReason::Late), 1);
    rig.deregister(a, &mut t);
    rig.deregister(silent, &mut t);
    rig.assert_clean();
    rig.finish();
}

#[test]
fn path05_cancel_while_on_the_qp_completes_at_the_cqe() {
    let rig = MadRig::new();
    let silent = rig.listener(SILENT);
    let a = rig.requester();
    let mut t = Tracker::default();
    rig.sim
        .model
        .faults()
        .send_completion_delay(rig.qpn(SpecialQp::Gsi), ms(30));
    let sent_at = rig.port.now();
    let id = a.send(rig.request(SILENT, 1, 10_000, 0)).unwrap();
    rig.pump(None, &[&a], &mut t, ms(1));
    // The packet went out at once (only its CQE is held back).
    let Some(Event::Recv(req)) = silent.try_event() else {
        panic!("the request arrived")
    };
    a.cancel(id).unwrap();
    assert!(matches!(a.cancel(id), Err(MadError::NotOutstanding(_))));
    // The response arrives while the send is still CANCELED (its CQE not in yet): dropped
    // for that reason.
    silent
        .send(SendRequest::new(answer_of(&req), req.addr.reply_dest()))
        .unwrap();
    // The completion comes at the CQE, 30 ms after the send, not before; until then the
    // census shows the send CANCELED.
    let deadline = rig.port.deadline_after(ms(100));
    while !t.all_done(&[id]) {
        assert!(rig.port.now() < deadline, "no completion");
        assert_eq!(
            rig.port.census().gsi.count(SendState::Canceled),
            1,
            "CANCELED until the CQE"
        );
        rig.pump(None, &[&a], &mut t, ms(1));
    }
    let took = rig.port.now().saturating_sub(sent_at);
    assert!(took >= ms(30), "completed before its CQE: {took:?}");
    assert!(
        t.recvs.is_empty(),
        "the response of a canceled send is dropped"
    );
    let d = rig.port.counters().drops;
    assert_eq!(
        (d.get(DropReason::Canceled), d.get(DropReason::Late)),
        (1, 0),
        "{d:?}"
    );
    let c = &t.done[&id];
    assert_eq!((c.status, c.vendor_err), (WcStatus::WrFlushErr, 0));
    rig.sim
        .model
        .faults()
        .send_completion_delay(rig.qpn(SpecialQp::Gsi), Duration::ZERO);
    rig.deregister(a, &mut t);
    rig.deregister(silent, &mut t);
    rig.assert_clean();
    rig.finish();
}

#[test]
fn path06_cancel_while_waiting_completes_from_the_loop_and_the_response_is_dropped() {
    let rig = MadRig::new();
    let silent = rig.listener(SILENT);
    let a = rig.requester();
    let mut t = Tracker::default();
    let id = a.send(rig.request(SILENT, 1, 60_000, 0)).unwrap();
    rig.pump(None, &[&a], &mut t, ms(5));
    assert_eq!(rig.port.census().gsi.count(SendState::WaitResp), 1);
    let Some(Event::Recv(req)) = silent.try_event() else {
        panic!("the request arrived")
    };
    a.cancel(id).unwrap();
    assert!(a.try_event().is_none(), "not reported inline");
    assert!(rig.pump_until(None, &[&a], &mut t, ms(20), |t| t.all_done(&[id])));
    assert_eq!(t.status(id), Some(WcStatus::WrFlushErr));
    silent
        .send(SendRequest::new(answer_of(&req), req.addr.reply_dest()))
        .unwrap();
    rig.pump(None, &[&a, &silent], &mut t, ms(20));
    assert!(
        t.recvs.is_empty(),
        "the response of a canceled send is dropped"
    );
    // The send had completed (and its slot was recycled) before the response came: late. A
    // response that finds its send still CANCELED is path05's.
    let d = rig.port.counters().drops;
    assert_eq!(
        (d.get(DropReason::Late), d.get(DropReason::Canceled)),
        (1, 0),
        "{d:?}"
    );
    rig.deregister(a, &mut t);
    rig.deregister(silent, &mut t);
    rig.assert_clean();
    rig.finish();
}

#[test]
fn path07_modify_timeout_of_an_outstanding_send() {
    let rig = MadRig::new();
    let silent = rig.listener(SILENT);
    let a = rig.requester();
    let mut t = Tracker::default();
    let id = a.send(rig.request(SILENT, 1, 60_000, 0)).unwrap();
    rig.pump(None, &[&a], &mut t, ms(5));
    let from = rig.port.now();
    a.modify_timeout(id, 50).unwrap();
    assert!(rig.pump_until(None, &[&a], &mut t, ms(1000), |t| t.all_done(&[id])));
    let took = rig.port.now().saturating_sub(from);
    assert!(took >= ms(50) && took < ms(60), "{took:?}");
    assert_eq!(t.status(id), Some(WcStatus::RespTimeoutErr));
    // The modify applies to the wait in progress only: the retry after it waits the send's
    // own 200 ms (the kernel no longer saves a modified timeout for the retries: "IB/mad: Do
    // not save the MRA timeout").
    let id = a.send(rig.request(SILENT, 2, 200, 1)).unwrap();
    rig.pump(None, &[&a], &mut t, ms(5));
    let from = rig.port.now();
    a.modify_timeout(id, 50).unwrap();
    assert!(rig.pump_until(None, &[&a], &mut t, ms(1000), |t| t.all_done(&[id])));
    let took = rig.port.now().saturating_sub(from);
    assert!(took >= ms(250) && took < ms(270), "{took:?}");
    assert_eq!(t.status(id), Some(WcStatus::RespTimeoutErr));
    assert_eq!(t.done[&id].retries, 1);
    assert!(matches!(
        a.modify_timeout(id, 10),
        Err(MadError::NotOutstanding(_))
    ));
    rig.deregister(a, &mut t);
    rig.deregister(silent, &mut t);
    rig.assert_clean();
    rig.finish();
}

#[test]
fn path08_deregistration_with_sends_in_every_state() {
    // 40 slots per QP: requests may hold 40 - min(128, 20) = 20 of them.
    let rig = MadRig::with(
        HcaOptions {
            lease_mode: dma::LeaseMode::Strict,
            ..HcaOptions::default()
        },
        PortConfig {
            slots: Some(40),
            ..PortConfig::default()
        },
    );
    let responder = rig.listener(ANSWERED);
    let silent = rig.listener(SILENT);
    // The victim is an SA agent: at most 256/32 = 8 solicited (SA) sends outstanding.
    let victim = rig.agent(AgentSpec::class(SA, 2, MethodMask::NONE));
    let mut t = Tracker::default();
    let mut ids = Vec::new();
    let to_self = rig.to_self(SpecialQp::Gsi);
    // 12 SA GetTables nobody answers: 8 go out, 4 wait in the backlog. The first times out
    // after 20 ms and its retry, the backlog not being empty, is held behind it (QUEUED,
    // keeping its slot); the credit it gave back lets the backlog's head out.
    let short = victim
        .send(
            SendRequest::new(mad(SA, GET_TABLE, 0), to_self)
                .timeout_ms(20)
                .retries(1),
        )
        .unwrap();
    ids.push(short);
    for i in 1..12 {
        ids.push(
            victim
                .send(SendRequest::new(mad(SA, GET_TABLE, i), to_self).timeout_ms(60_000))
                .unwrap(),
        );
    }
    // 2 requests (not solicited: a vendor class) wait for responses nobody sends; one is
    // canceled just before the deregistration, off the QP.
    let waiting: Vec<_> = (0..2)
        .map(|i| {
            victim
                .send(rig.request(SILENT, 100 + i, 60_000, 0))
                .unwrap()
        })
        .collect();
    ids.extend(&waiting);
    rig.pump(Some(&responder), &[], &mut t, ms(30));
    let c = rig.port.census();
    assert_eq!(c.gsi.count(SendState::Queued), 1, "the retry held: {c:?}");
    assert_eq!(c.backlogged, 4, "3 new sends and the retry: {c:?}");
    assert_eq!(c.gsi.count(SendState::WaitResp), 10, "{c:?}");
    assert_eq!(
        (rig.port.counters().retries, rig.port.counters().backlogged),
        (1, 5),
        "4 new sends and the retry were held"
    );
    // From now on send completions come late: 4 answered requests become EARLY_RESP, 4 silent
    // ones stay SEND_START.
    rig.sim
        .model
        .faults()
        .send_completion_delay(rig.qpn(SpecialQp::Gsi), ms(50));
    let mut early = Vec::new();
    for i in 0..4 {
        early.push(
            victim
                .send(rig.request(ANSWERED, 200 + i, 60_000, 0))
                .unwrap(),
        );
        ids.push(
            victim
                .send(rig.request(SILENT, 300 + i, 60_000, 0))
                .unwrap(),
        );
    }
    ids.extend(&early);
    rig.pump(Some(&responder), &[], &mut t, ms(5));
    assert_eq!(
        rig.port.counters().early_responses,
        4,
        "the answers overtook their requests' CQEs"
    );
    // 19 request slots are held (9 SA sends with the queued retry, 2 waiting, 8 just sent):
    // one more takes the last, posted 5 ms after the others (its CQE comes last); 5 wait in
    // the ring's queue.
    let last = victim.send(rig.request(SILENT, 400, 60_000, 0)).unwrap();
    ids.push(last);
    for i in 1..6 {
        ids.push(
            victim
                .send(rig.request(SILENT, 400 + i, 60_000, 0))
                .unwrap(),
        );
    }
    let c = rig.port.census();
    assert_eq!(
        c.gsi.count(SendState::SendStart),
        9,
        "4 silent requests, the last one, the responder's 4 answers: {c:?}"
    );
    // Canceled just before the deregistration: a send on the QP (its CQE held back, after
    // every other one of the victim's) and a send waiting for its response (completed by the
    // loop, which has not run since).
    victim.cancel(last).unwrap();
    victim.cancel(waiting[0]).unwrap();
    let c = rig.port.census();
    assert_eq!(c.gsi.count(SendState::Canceled), 2, "{c:?}");
    assert_eq!(c.gsi.count(SendState::Queued), 1, "the retry: {c:?}");
    assert_eq!(c.backlogged, 4, "3 new sends and the retry: {c:?}");
    assert_eq!(c.gsi.queued, 5, "over the 20 request slots: {c:?}");
    // 8 SA GetTables and a silent request.
    assert_eq!(c.gsi.count(SendState::WaitResp), 9, "{c:?}");
    assert_eq!(c.gsi.count(SendState::EarlyResp), 4, "{c:?}");
    // 4 silent requests and the responder's 4 answers: all with their CQEs held back.
    assert_eq!(c.gsi.count(SendState::SendStart), 8, "{c:?}");
    assert_eq!(
        c.gsi.active(),
        24,
        "20 requests and 4 answers in slots: {c:?}"
    );
    let answers = 4;
    assert_eq!(c.outstanding, ids.len() + answers, "{c:?}");
    let q = victim.events().clone();
    rig.deregister(victim, &mut t);
    // It returned once every send of the victim had completed: nothing of it is left.
    let c = rig.port.census();
    assert_eq!(
        (
            c.gsi.count(SendState::WaitResp),
            c.gsi.count(SendState::EarlyResp),
            c.gsi.count(SendState::Canceled),
            c.gsi.count(SendState::Queued),
            c.gsi.queued,
            c.backlogged,
        ),
        (0, 0, 0, 0, 0, 0),
        "{c:?}"
    );
    assert_eq!(
        rig.hca.accounting().mad_pool.leases_out,
        rig.base_leases,
        "its sends' leases (their slots' buffers) are back"
    );
    // Each completed once (the tracker panics on a second) and before deregistration returned
    // (a later one would be refused by the closed queue: the final check counts those).
    for id in &ids {
        let c = t
            .done
            .get(id)
            .unwrap_or_else(|| panic!("{id} not completed"));
        // The kernel's cancel_mads (drivers/infiniband/core/mad.c): WR_FLUSH_ERR for every
        // send, on the QP or waiting or backlogged, canceled before or not; vendor_err 0
        // (clear_mad_error_list's) on a live device (5 is our fatal flush's).
        assert_eq!((c.status, c.vendor_err), (WcStatus::WrFlushErr, 0), "{id}");
    }
    assert_eq!(t.done.len(), ids.len());
    assert_eq!(t.done[&short].retries, 1, "the queued retry counted");
    for id in &early {
        assert!(
            matches!(
                (t.position(Seen::Recv, *id), t.position(Seen::Send, *id)),
                (Some(told), Some(done)) if told < done
            ),
            "the early response was delivered before the flush: {:?}",
            t.log
        );
    }
    assert_eq!(
        t.recvs.iter().filter(|r| r.response_to.is_some()).count(),
        4,
        "only the early responses were delivered"
    );
    // Traffic goes on; nothing more reaches the deregistered agent.
    rig.sim
        .model
        .faults()
        .send_completion_delay(rig.qpn(SpecialQp::Gsi), Duration::ZERO);
    rig.pump(Some(&responder), &[&silent], &mut t, ms(100));
    assert!(q.is_empty(), "no event after deregistration returned");
    rig.assert_no_event_for_a_closed_agent();
    rig.deregister(responder, &mut t);
    rig.deregister(silent, &mut t);
    rig.assert_clean();
    rig.finish();
}

#[test]
fn path09_an_error_cqe_recovers_the_qp_and_the_flushed_are_reposted_once() {
    let rig = MadRig::new();
    let a = rig.requester();
    let mut t = Tracker::default();
    // The first of 6 sends fails; the send queue goes to SQE; the hardware flushes the rest.
    rig.sim.model.faults().wqe_error(
        rig.qpn(SpecialQp::Gsi),
        WqeQueue::Send,
        1,
        CqeSyndrome::LOCAL_LENGTH_ERR,
        0x51,
    );
    let ids: Vec<_> = (0..6)
        .map(|i| {
            a.send(SendRequest::new(
                mad(ANSWERED, SEND, i),
                rig.to_self(SpecialQp::Gsi),
            ))
            .unwrap()
        })
        .collect();
    let sent_before = rig.sim.model.counters().packets_sent;
    assert!(rig.pump_until(None, &[&a], &mut t, ms(100), |t| t.all_done(&ids)));
    assert_eq!(
        rig.sim.model.counters().packets_sent - sent_before,
        5,
        "the failing send is not transmitted, the 5 flushed ones once each"
    );
    assert_eq!(
        rig.sim.model.qp_state(rig.qpn(SpecialQp::Gsi)),
        Some(QpState::Rts),
        "QP1 is back to RTS"
    );
    let c = &t.done[&ids[0]];
    assert_eq!(
        (c.status, c.vendor_err),
        (WcStatus::LocLenErr, 0x51),
        "the failing send keeps its error"
    );
    for id in &ids[1..] {
        assert_eq!(
            t.status(*id),
            Some(WcStatus::Success),
            "{id}: reposted, then sent"
        );
    }
    let k = rig.port.counters();
    assert_eq!(
        (k.send_errors, k.qp_recoveries, k.flush_reposts),
        (1, 1, 5),
        "{k:?}"
    );
    assert_eq!(
        k.drops.get(DropReason::NoAgent),
        5,
        "each reposted send reached the wire once"
    );
    rig.deregister(a, &mut t);
    rig.assert_clean();
    rig.finish();
}

#[test]
fn path10_a_flush_not_marked_for_retry_is_reported() {
    let rig = MadRig::new();
    let a = rig.requester();
    let mut t = Tracker::default();
    // The QP goes to error under the layer's feet: what is posted afterwards is flushed, with
    // no error CQE before it and so no retry mark.
    assert!(rig.sim.model.faults().qp_to_error(rig.qpn(SpecialQp::Gsi)));
    let ids: Vec<_> = (0..4)
        .map(|i| a.send(rig.request(ANSWERED, i, 100, 1)).unwrap())
        .collect();
    assert!(rig.pump_until(None, &[&a], &mut t, ms(100), |t| t.all_done(&ids)));
    for id in &ids {
        let c = &t.done[id];
        assert_eq!(
            (c.status, c.vendor_err),
            (
                WcStatus::WrFlushErr,
                u32::from(sim::mlx5::config::vendor_syndrome::FLUSH)
            ),
            "a hardware flush (the device's vendor value), not the stack's: {c:?}"
        );
    }
    assert_eq!(rig.port.counters().qp_recoveries, 0);
    rig.deregister(a, &mut t);
    // The QP is dead: its receive buffers came back flushed and are kept, not lost.
    let c = rig.port.census();
    assert_eq!(
        (c.gsi.recv_posted, c.gsi.recv_idle),
        (0, rig.base_recv_posted.0),
        "{c:?}"
    );
    assert_eq!(
        (c.smi.map(|s| s.recv_posted), c.smi.map(|s| s.recv_idle)),
        (rig.base_recv_posted.1, rig.base_recv_posted.1.map(|_| 0)),
        "QP0 untouched: {c:?}"
    );
    rig.assert_clean_but_receives();
    assert_eq!(rig.sim.faults(), 0);
    rig.finish();
}

/// How the device goes away under the MAD layer.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Death {
    /// A health syndrome (path 11).
    Fatal,
    /// A health syndrome on a device whose DMA cannot be stopped (bus mastering cannot be
    /// turned off and the function reset fails).
    FatalUnstoppable,
    /// The device is removed (path 12).
    Removed,
    /// The HCA is closed while the MAD layer still uses it (`ib_unregister_device` under
    /// ib_mad and ib_umad in the kernel).
    Closed,
}

fn device_death(death: Death) {
    let rig = MadRig::with(
        HcaOptions {
            lease_mode: dma::LeaseMode::Strict,
            ..HcaOptions::default()
        },
        PortConfig {
            slots: Some(16),
            ..PortConfig::default()
        },
    );
    let silent = rig.listener(SILENT);
    let a = rig.requester();
    let b = rig.agent(AgentSpec::class(SA, 2, MethodMask::NONE));
    let mut t = Tracker::default();
    let mut ids = Vec::new();
    for i in 0..4 {
        ids.push(a.send(rig.request(SILENT, i, 60_000, 0)).unwrap());
    }
    rig.pump(None, &[&a], &mut t, ms(5));
    // Some on the QP (completions held back), some waiting for a slot, some in b's backlog.
    rig.sim
        .model
        .faults()
        .send_completion_delay(rig.qpn(SpecialQp::Gsi), ms(10_000));
    for i in 10..30 {
        ids.push(a.send(rig.request(SILENT, i, 60_000, 0)).unwrap());
    }
    for i in 0..12 {
        ids.push(
            b.send(
                SendRequest::new(mad(SA, GET_TABLE, i), rig.to_self(SpecialQp::Gsi))
                    .timeout_ms(60_000),
            )
            .unwrap(),
        );
    }
    rig.pump(None, &[&a, &b], &mut t, ms(2));
    let c = rig.port.census();
    assert!(
        c.gsi.count(SendState::WaitResp) > 0 && c.gsi.count(SendState::SendStart) > 0,
        "{c:?}"
    );
    assert!(c.gsi.queued > 0 && c.backlogged > 0, "{c:?}");
    let mut mappings_at_death = None;
    match death {
        Death::Removed => rig.sim.model.faults().remove(),
        Death::FatalUnstoppable => {
            rig.sim.backend.faults().fail_config_writes(true);
            rig.sim.backend.faults().fail_reset(true);
            // What the layer holds: the receive buffers and the send buffer leases (those
            // of the sends in flight among them).
            let c = rig.port.census();
            let held = [Some(c.gsi), c.smi]
                .into_iter()
                .flatten()
                .map(|q| q.send_buffer_leases + q.recv_posted + q.recv_idle)
                .sum::<usize>();
            assert_eq!(held, rig.base_leases, "{c:?}");
            mappings_at_death = Some(rig.sim.backend.dma_mapper().live_mappings());
            rig.sim
                .model
                .faults()
                .catastrophic(HealthSyndrome::FW_INTERNAL_ERR, true);
        }
        Death::Fatal => rig
            .sim
            .model
            .faults()
            .catastrophic(HealthSyndrome::FW_INTERNAL_ERR, true),
        Death::Closed => rig.hca.close().expect("close"),
    }
    assert!(
        rig.pump_until(None, &[&a, &b, &silent], &mut t, ms(10_000), |t| t
            .all_done(&ids))
    );
    for id in &ids {
        let c = &t.done[id];
        assert_eq!((c.status, c.vendor_err), (WcStatus::WrFlushErr, 5), "{c:?}");
    }
    for x in [&a, &b, &silent] {
        assert_eq!(
            t.fatal_by_agent.get(&x.id()),
            Some(&1),
            "{} is told once: {:?}",
            x.id(),
            t.fatal_by_agent
        );
    }
    assert_eq!(t.fatal, 3, "every agent is told once");
    assert!(matches!(
        a.send(rig.request(SILENT, 1, 0, 0)),
        Err(MadError::DeviceFatal { .. })
    ));
    assert!(matches!(
        rig.port.register(AgentSpec::send_only(SpecialQp::Gsi)),
        Err(MadError::DeviceFatal { .. })
    ));
    let before = rig.port.now();
    rig.deregister(a, &mut t);
    rig.deregister(b, &mut t);
    rig.deregister(silent, &mut t);
    assert!(
        rig.port.now().saturating_sub(before) < ms(10),
        "deregistration after death is prompt"
    );
    let c = rig.port.census();
    assert_eq!((c.gsi.active(), c.outstanding), (0, 0), "{c:?}");
    assert_eq!(rig.sim.faults(), 0);
    match mappings_at_death {
        None => rig.finish_dead(),
        Some(mappings) => finish_quarantined(rig, mappings),
    }
}

/// After a death whose DMA could not be stopped: close the HCA and drop the MAD layer; no
/// lease went back to either pool. Every MAD buffer the layer held (the receive buffers and
/// the send buffer leases the sends in flight used) is quarantined, the driver's own memory
/// too, and no mapping live at the death was unmapped.
fn finish_quarantined(rig: MadRig, mappings: usize) {
    assert!(rig.hw.dma().is_quarantined());
    let MadRig {
        sim,
        hca,
        hw,
        port,
        base_leases,
        ..
    } = rig;
    let a = hca.accounting();
    assert_eq!(
        a.mad_pool.leases_out + a.mad_pool.quarantined,
        base_leases,
        "nothing went back to the MAD pool: {a:?}"
    );
    hca.close().expect("close");
    drop(port);
    assert_eq!(hw.dma().trim(), 0, "no arena is idle");
    drop(hw);
    let a = hca.accounting();
    assert_eq!(a.mad_pool.leases_out, 0, "{a:?}");
    assert_eq!(
        a.mad_pool.quarantined, base_leases,
        "every receive buffer and send buffer lease is quarantined: {a:?}"
    );
    assert_eq!(a.driver_pool.leases_out, 0, "{a:?}");
    assert!(a.driver_pool.quarantined > 0, "{a:?}");
    let mapper = sim.backend.dma_mapper();
    assert_eq!(mapper.live_mappings(), mappings, "nothing was unmapped");
    assert_eq!(mapper.fault_count(), 0, "no IOMMU fault");
}

#[test]
fn path11_fatal_error_completes_everything_with_flush_vendor_5() {
    device_death(Death::Fatal);
}

/// Path 11 on a device whose DMA cannot be stopped: every send still completes once with
/// WR_FLUSH_ERR, and no buffer is released or unmapped.
#[test]
fn path11_fatal_error_with_dma_not_stopped_quarantines_every_buffer() {
    device_death(Death::FatalUnstoppable);
}

#[test]
fn path12_removal_completes_everything_and_deregistration_is_prompt() {
    device_death(Death::Removed);
}

#[test]
fn closing_the_hca_under_the_mad_layer_ends_it_as_a_removal_does() {
    device_death(Death::Closed);
}

#[test]
fn path13_more_sends_than_the_queue_holds_wait_in_order_none_refused() {
    let rig = MadRig::new();
    let sink = rig.listener(ANSWERED);
    let a = rig.requester();
    let mut t = Tracker::default();
    let n = 600u32;
    let ids: Vec<_> = (0..n)
        .map(|i| {
            a.send(SendRequest::new(
                mad(ANSWERED, SEND, i),
                rig.to_self(SpecialQp::Gsi),
            ))
            .unwrap()
        })
        .collect();
    let c = rig.port.census();
    assert_eq!((c.gsi.posted, c.gsi.queued), (128, 472), "{c:?}");
    let mut got = Vec::new();
    let deadline = rig.port.deadline_after(ms(2000));
    while !t.all_done(&ids) && rig.port.now() < deadline {
        rig.pump(None, &[&a], &mut t, ms(1));
        while let Some(Event::Recv(r)) = sink.try_event() {
            got.push(r.header().tid() & 0xFFFF_FFFF);
        }
        assert!(
            rig.port.census().gsi.posted <= 128,
            "never more than the queue holds"
        );
    }
    assert!(ids.iter().all(|i| t.status(*i) == Some(WcStatus::Success)));
    // Completions come in posting order: the sends were posted in the order they were made.
    assert_eq!(t.order, ids, "posted in order");
    assert_eq!(rig.sim.model.counters().packets_sent, u64::from(n));
    // The receiver's 256 buffers cannot take a burst of 600 (UD drops what finds no buffer,
    // as hardware does); what it took arrived in order.
    assert!(got.len() >= 256, "{}", got.len());
    assert!(got.windows(2).all(|w| w[0] < w[1]), "in order on the wire");
    assert_eq!(rig.port.counters().overflowed, 472);
    rig.deregister(a, &mut t);
    rig.deregister(sink, &mut t);
    rig.assert_clean();
    rig.finish();
}

#[test]
fn path13_the_solicited_mad_limit_holds_an_sa_agent_to_8_outstanding() {
    let rig = MadRig::new();
    // An SA agent that is its own SA: it receives its GetTables and answers them.
    let sa = rig.agent(AgentSpec::class(SA, 2, MethodMask::of(&[GET_TABLE])));
    let mut t = Tracker::default();
    let ids: Vec<_> = (0..40)
        .map(|i| {
            sa.send(
                SendRequest::new(mad(SA, GET_TABLE, i), rig.to_self(SpecialQp::Gsi))
                    .timeout_ms(1000),
            )
            .unwrap()
        })
        .collect();
    let mut most = 0;
    let deadline = rig.port.deadline_after(ms(1000));
    while !t.all_done(&ids) && rig.port.now() < deadline {
        rig.port.progress_until(rig.port.deadline_after(ms(1)));
        while let Some(e) = sa.try_event() {
            match e {
                Event::Recv(r) if r.response_to.is_none() => {
                    sa.send(SendRequest::new(answer_of(&r), r.addr.reply_dest()))
                        .unwrap();
                }
                e => t.absorb(e),
            }
        }
        // Requests neither finished nor held back: posted or waiting for their response.
        let c = rig.port.census();
        let done = ids.iter().filter(|i| t.done.contains_key(i)).count();
        most = most.max(40 - c.backlogged - done);
    }
    assert!(ids.iter().all(|i| t.status(*i) == Some(WcStatus::Success)));
    assert!(most <= 8, "at most R/32 = 8 outstanding: {most}");
    assert_eq!(rig.port.counters().backlogged, 32);
    rig.deregister(sa, &mut t);
    rig.assert_clean();
    rig.finish();
}

#[test]
fn path14_responses_matching_no_send_are_dropped_and_counted() {
    let rig = MadRig::new();
    let silent = rig.listener(SILENT);
    let a = rig.requester();
    let forger = rig.requester();
    let mut t = Tracker::default();
    let id = a.send(rig.request(SILENT, 1, 60_000, 0)).unwrap();
    rig.pump(None, &[&a], &mut t, ms(5));
    let Some(Event::Recv(req)) = silent.try_event() else {
        panic!("the request arrived")
    };
    let tid = req.header().tid();
    let forge = |f: &dyn Fn(&mut Vec<u8>)| {
        let mut m = answer_of(&req);
        f(&mut m);
        forger
            .send(SendRequest::new(m, rig.to_self(SpecialQp::Gsi)))
            .unwrap()
    };
    // Unknown TIDs: top byte set, another slot, another client half.
    forge(&|m| m[8] = 1);
    forge(&|m| m[10] ^= 0x10);
    forge(&|m| m[15] ^= 1);
    // Another class with the send's TID.
    forge(&|m| m[1] = SILENT + 1);
    // Another address: a GRH where the request had none.
    let mut with_grh = rig.to_self(SpecialQp::Gsi);
    with_grh.grh = Some(driver::verbs::Grh {
        sgid_index: 0,
        dgid: [0xfe; 16],
        flow_label: 0,
        traffic_class: 0,
        hop_limit: 64,
    });
    let grh_sent = forger
        .send(SendRequest::new(answer_of(&req), with_grh))
        .unwrap();
    rig.pump(None, &[&a, &forger], &mut t, ms(20));
    assert!(t.recvs.is_empty(), "{:?}", t.recvs);
    assert!(!t.done.contains_key(&id), "the request still waits");
    let d = rig.port.counters().drops;
    assert_eq!(d.get(DropReason::UnknownTid), 3, "{d:?}");
    assert_eq!(d.get(DropReason::WrongClass), 1, "{d:?}");
    assert_eq!(t.status(grh_sent), Some(WcStatus::Success));
    assert_eq!(d.get(DropReason::WrongAddress), 1, "{d:?}");
    // A response for a canceled send: canceled while waiting, it completes from the progress
    // loop before the response comes back, which is then late (path05 has one that finds its
    // send still CANCELED).
    a.cancel(id).unwrap();
    forge(&|_| {});
    rig.pump(None, &[&a, &forger], &mut t, ms(20));
    assert!(t.recvs.is_empty());
    assert_eq!(t.status(id), Some(WcStatus::WrFlushErr));
    let d = rig.port.counters().drops;
    assert_eq!(
        (d.get(DropReason::Late), d.get(DropReason::Canceled)),
        (1, 0),
        "{d:?}"
    );
    assert_eq!(tid_of(&answer_of(&req)), tid);
    rig.deregister(a, &mut t);
    rig.deregister(forger, &mut t);
    rig.deregister(silent, &mut t);
    rig.assert_clean();
    rig.finish();
}

#[test]
fn threads_send_cancel_and_deregister_while_a_progress_thread_runs_on_the_real_clock() {
    // How the umad library will run it: a progress thread, client threads that send, cancel
    // and deregister, a responder served from its own thread.
    let sim = hca_tests::mlx5::SimHca::with_clock(sim::ClockMode::Real);
    let hca = sim
        .open(HcaOptions {
            lease_mode: dma::LeaseMode::Strict,
            ..HcaOptions::default()
        })
        .expect("bring-up");
    let hw = hca.mlx5_port(1).expect("port");
    let lid = hw.attrs().unwrap().lid;
    let port = mad::Port::open(hw.clone(), PortConfig::default()).unwrap();
    let base = hca.accounting().mad_pool.leases_out;
    let progress = port.spawn_progress_thread().unwrap();
    let responder = port
        .register(AgentSpec::class(ANSWERED, 1, MethodMask::of(&[GET])))
        .unwrap();
    // Requests of the silent class arrive here and stay unanswered (and unread).
    let silent = port
        .register(AgentSpec::class(SILENT, 1, MethodMask::of(&[GET])))
        .unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let server = {
        let stop = stop.clone();
        let port = port.clone();
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                if let Some(Event::Recv(r)) = responder.next_event(port.deadline_after(ms(5))) {
                    let _ = responder.send(SendRequest::new(answer_of(&r), r.addr.reply_dest()));
                }
            }
            responder.deregister();
        })
    };
    let clients: Vec<_> = (0..3u32)
        .map(|k| {
            let port = port.clone();
            std::thread::spawn(move || {
                let a = port
                    .register(AgentSpec::responses_only(SpecialQp::Gsi))
                    .unwrap();
                let dest = UdDestOf::to(lid);
                let mut ids = Vec::new();
                let mut answered = Vec::new();
                for i in 0..300u32 {
                    let silent = i % 5 == 0;
                    let class = if silent { SILENT } else { ANSWERED };
                    let id = a
                        .send(
                            SendRequest::new(mad(class, GET, k * 1000 + i), dest.0)
                                // A burst of 900 requests and their answers can overrun a
                                // 256-buffer receive queue (UD drops what finds no buffer):
                                // the retries bring the dropped ones through.
                                .timeout_ms(if silent { 20 } else { 300 })
                                .retries(if silent { 1 } else { 5 }),
                        )
                        .unwrap();
                    if i % 7 == 0 {
                        let _ = a.cancel(id);
                    } else if !silent {
                        answered.push(id);
                    }
                    ids.push(id);
                }
                // The answered ones finish (the silent ones time out or are canceled by the
                // deregistration).
                let mut t = Tracker::default();
                let deadline = port.deadline_after(ms(10_000));
                while !t.all_done(&answered) {
                    match a.next_event(deadline) {
                        Some(e) => t.absorb(e),
                        None => break,
                    }
                }
                assert!(
                    answered
                        .iter()
                        .all(|i| t.status(*i) == Some(WcStatus::Success)),
                    "client {k}"
                );
                let q = deregister_keeping_queue(a, &mut t);
                assert!(t.all_done(&ids), "client {k}: every send completed once");
                (t.done.len(), q)
            })
        })
        .collect();
    let mut total = 0;
    let mut deregistered = Vec::new();
    for c in clients {
        let (n, q) = c.join().unwrap();
        total += n;
        deregistered.push(q);
    }
    assert_eq!(total, 900);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    server.join().unwrap();
    silent.deregister();
    progress.stop();
    // What the port itself still sends (nothing here: every class has an agent) finishes.
    let end = port.deadline_after(ms(1000));
    while port.census().outstanding > 0 && port.now() < end {
        port.progress_until(port.deadline_after(ms(5)));
    }
    // No event after a deregistration returned: the port driven for twice the longest
    // response timeout (300 ms) after, the clients' queues are still empty.
    let end = port.deadline_after(2 * ms(300));
    while port.now() < end {
        port.progress_until(end);
    }
    for (k, q) in deregistered.iter().enumerate() {
        assert!(q.is_empty(), "client {k}: {:?}", q.try_pop());
    }
    let c = port.census();
    assert_eq!(
        (c.gsi.active(), c.outstanding, c.agents),
        (0, 0, 0),
        "{c:?}"
    );
    assert_eq!(hca.accounting().mad_pool.leases_out, base);
    let k = port.counters();
    assert_eq!((k.bad_completions, k.post_failures), (0, 0), "{k:?}");
    assert!(k.responses > 0, "{k:?}");
    // Not asserted here, unlike on one thread (MadRig's checks): no event counted as dropped
    // for a closed agent. With the progress thread routing receives while clients
    // deregister, a MAD routed to an agent just before its deregistration may legitimately
    // be refused by its closed queue (DropReason::AgentClosed).
    hca.close().unwrap();
    drop(port);
    drop(hw);
    sim.assert_clean(&hca);
}

/// A destination on QP1 of `lid` (a small helper so the client threads own theirs).
struct UdDestOf(driver::verbs::UdDest);

impl UdDestOf {
    fn to(lid: u16) -> UdDestOf {
        UdDestOf(driver::verbs::UdDest {
            dlid: lid,
            sl: 0,
            src_path_bits: 0,
            remote_qpn: 1,
            remote_qkey: mad::QP1_QKEY,
            pkey_index: 0,
            grh: None,
        })
    }
}

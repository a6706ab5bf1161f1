//! The SMI on a port, against the in-crate test double: local completions (order, exactly
//! once, nothing on the wire), refused routes, hop pointers on the wire, the receive rules at
//! the port, and the port's replies. The same paths run on the simulated HCA and fabric in
//! `tests/tests/mad_smi.rs`.

// Short names (rig, agent, error, MAD) read better in these scenarios.
#![allow(clippy::many_single_char_names)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use dma::Accounting;
use driver::verbs::{SpecialQp, UdDest, WcStatus};
use mad_wire::header::MAD_LEN;
use mad_wire::smp::{DirectedRoute, Direction, Smp, SmpRepr, SmpRoute};
use mad_wire::{PERMISSIVE_LID, attr_id, method};

use crate::double::{FakePort, Inbound};
use crate::ring::lock;
use crate::{
    Agent, AgentSpec, DropReason, Event, MadError, MethodMask, Port, PortConfig, SmiDiscard,
};

/// A port on the double with its baseline accounting.
pub(crate) struct Rig {
    pub(crate) fake: Arc<FakePort>,
    pub(crate) port: Port,
    base: Accounting,
}

impl Rig {
    pub(crate) fn new() -> Rig {
        Rig::with_depths(16, 64)
    }

    /// A port on the double whose send and receive queues hold `send` and `recv` entries
    /// (the receive depth sets the agents' flow-control limits).
    pub(crate) fn with_depths(send: u32, recv: u32) -> Rig {
        let fake = FakePort::new(send, recv);
        let port = Port::open(fake.clone(), PortConfig::default()).expect("open");
        let base = fake.accounting();
        Rig { fake, port, base }
    }

    pub(crate) fn agent(&self, spec: AgentSpec) -> Agent {
        self.port.register(spec).expect("register")
    }

    /// Every event of `agent` until `within` of device time passed.
    pub(crate) fn collect(&self, agent: &Agent, within: Duration) -> Vec<Event> {
        let deadline = self.port.deadline_after(within);
        let mut v = Vec::new();
        while let Some(e) = agent.next_event(deadline) {
            v.push(e);
        }
        v
    }

    /// Leases and mappings at baseline, no IOMMU fault, no send buffer rewritten under a
    /// posted send, nothing outstanding.
    pub(crate) fn assert_clean(&self) {
        let a = self.fake.accounting();
        assert_eq!(a.leases_out, self.base.leases_out, "{a:?}");
        assert_eq!(a.live_mappings, self.base.live_mappings);
        assert_eq!(self.fake.faults(), 0, "no IOMMU fault");
        assert_eq!(
            self.fake.buffers_rewritten_while_posted(),
            0,
            "no send buffer rewritten while its send was posted"
        );
        let c = self.port.census();
        assert_eq!(c.outstanding, 0, "{c:?}");
        assert_eq!(c.gsi.active() + c.smi.map_or(0, |s| s.active()), 0, "{c:?}");
    }
}

/// A directed-route Get of `attr` along `path`, with `tid`.
pub(crate) fn dr_get(path: &[u8], attr: u16, tid: u64) -> Vec<u8> {
    let repr = SmpRepr::directed_get(path, attr, 0, tid).expect("a path of at most 63 hops");
    let mut b = vec![0u8; MAD_LEN];
    repr.emit(&mut Smp::new_checked(&mut b[..]).expect("256 bytes"));
    b
}

fn sma_answer(m: &[u8; MAD_LEN]) -> [u8; MAD_LEN] {
    let mut a = *m;
    a[3] = method::GET_RESP;
    a[64] = 0x5A;
    a
}

#[test]
fn a_0_hop_smp_is_answered_locally_response_first_then_completion() {
    let r = Rig::new();
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    r.fake.set_process_mad(move |m| {
        c.fetch_add(1, Ordering::SeqCst);
        // The SMA sees the SMP at the end of its path: hp == hc + 1.
        assert_eq!((m[6], m[7]), (1, 0));
        Ok(sma_answer(m))
    });
    let a = r.agent(AgentSpec::responses_only(SpecialQp::Smi));
    let id = a
        .send(
            crate::SendRequest::new(
                dr_get(&[], attr_id::sm::NODE_INFO, 0x42),
                UdDest::DIRECTED_ROUTE,
            )
            .timeout_ms(100)
            .context(9),
        )
        .expect("accepted");
    let ev = r.collect(&a, Duration::from_millis(5));
    assert_eq!(ev.len(), 2, "{ev:?}");
    let Event::Recv(resp) = &ev[0] else {
        panic!("the response comes first: {ev:?}")
    };
    assert_eq!(resp.response_to.map(|s| (s.id, s.context)), Some((id, 9)));
    assert_eq!((resp.mad[3], resp.mad[64]), (method::GET_RESP, 0x5A));
    assert_eq!(resp.mad[4] & 0x80, 0x80, "D bit set on the answer");
    assert_eq!(resp.addr.slid, PERMISSIVE_LID);
    let Event::Send(done) = &ev[1] else {
        panic!("then the completion: {ev:?}")
    };
    assert_eq!(
        (done.id, done.status, done.tid),
        (
            id,
            WcStatus::Success,
            u64::from(crate::tid::local_stamp(a.id().0)) << 32 | 0x42
        ),
        "the client's TID, with the agent's ID in the stack's upper half"
    );
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert!(r.fake.sent().is_empty(), "nothing on the wire");
    let k = r.port.smi_counters();
    assert_eq!((k.local, k.local_answered, k.sent), (1, 1, 0));
    a.deregister();
    r.assert_clean();
}

#[test]
fn a_local_smp_the_sma_fails_is_refused() {
    let r = Rig::new();
    r.fake.set_process_mad(|_| {
        Err(driver::DriverError::Io {
            what: "MAD_IFC".into(),
            source: std::io::Error::other("bad packet"),
        })
    });
    let a = r.agent(AgentSpec::responses_only(SpecialQp::Smi));
    let e = a
        .send(crate::SendRequest::new(
            dr_get(&[], attr_id::sm::NODE_INFO, 1),
            UdDest::DIRECTED_ROUTE,
        ))
        .unwrap_err();
    assert!(matches!(e, MadError::LocalSmp { port: 1, .. }), "{e}");
    assert_eq!(a.outstanding(), 0);
    assert!(r.collect(&a, Duration::from_millis(2)).is_empty());
    a.deregister();
    r.assert_clean();
}

#[test]
fn a_local_smp_the_sma_does_not_take_goes_to_the_registered_agent() {
    let r = Rig::new();
    r.fake
        .set_process_mad(|_| panic!("SMInfo is not the SMA's (mlx5 process_mad)"));
    let sm = r.agent(AgentSpec::class(0x81, 1, MethodMask::of(&[method::GET])));
    let id = sm
        .send(crate::SendRequest::new(
            dr_get(&[], attr_id::sm::SM_INFO, 5),
            UdDest::DIRECTED_ROUTE,
        ))
        .unwrap();
    let ev = r.collect(&sm, Duration::from_millis(5));
    assert_eq!(ev.len(), 2, "{ev:?}");
    let Event::Recv(req) = &ev[0] else { panic!() };
    assert_eq!(
        (req.response_to, req.header().attr_id()),
        (None, attr_id::sm::SM_INFO)
    );
    assert!(matches!(&ev[1], Event::Send(c) if c.id == id && c.status == WcStatus::Success));
    assert_eq!(r.port.smi_counters().local_passed, 1);
    sm.deregister();
    r.assert_clean();
}

#[test]
fn routes_the_send_rules_discard_are_refused_and_counted() {
    let r = Rig::new();
    let a = r.agent(AgentSpec::responses_only(SpecialQp::Smi));
    // InitialPath[1] names port 2; we are port 1.
    let e = a
        .send(crate::SendRequest::new(
            dr_get(&[2, 1], attr_id::sm::NODE_INFO, 1),
            UdDest::DIRECTED_ROUTE,
        ))
        .unwrap_err();
    assert!(matches!(
        e,
        MadError::DirectedRoute {
            port: 1,
            reason: SmiDiscard::WrongEgress
        }
    ));
    // HopCount 64.
    let mut m = dr_get(&[1], attr_id::sm::NODE_INFO, 2);
    m[7] = 64;
    assert!(matches!(
        a.send(crate::SendRequest::new(m, UdDest::DIRECTED_ROUTE)),
        Err(MadError::DirectedRoute {
            reason: SmiDiscard::HopCount,
            ..
        })
    ));
    let k = r.port.smi_counters();
    assert_eq!(k.send_discards.get(SmiDiscard::WrongEgress), 1);
    assert_eq!(k.send_discards.get(SmiDiscard::HopCount), 1);
    assert_eq!(r.port.counters().sends, 0, "nothing accepted");
    assert!(r.fake.sent().is_empty());
    a.deregister();
    r.assert_clean();
}

#[test]
fn a_multi_hop_smp_leaves_with_hop_pointer_1_and_its_response_is_matched() {
    let r = Rig::new();
    r.fake.set_responder(|out| {
        // The far end's response, back at us: D = 1, HopPointer 1 (the last switch's send
        // rule moved it), ReturnPath as the switches recorded it.
        let mut resp = out.mad;
        resp[3] = method::GET_RESP;
        resp[4] |= 0x80;
        resp[6] = 1;
        resp[192 + 1] = 4;
        resp[192 + 2] = 1;
        vec![Inbound::new(SpecialQp::Smi, resp, 7)]
    });
    let a = r.agent(AgentSpec::responses_only(SpecialQp::Smi));
    let id = a
        .send(
            crate::SendRequest::new(
                dr_get(&[1, 3], attr_id::sm::NODE_INFO, 3),
                UdDest::DIRECTED_ROUTE,
            )
            .timeout_ms(50),
        )
        .unwrap();
    let ev = r.collect(&a, Duration::from_millis(5));
    let sent = r.fake.sent();
    assert_eq!(sent.len(), 1);
    let smp = Smp::new_checked(&sent[0].mad[..]).unwrap();
    assert_eq!(
        (smp.hop_pointer(), smp.hop_count(), smp.direction()),
        (1, 2, Direction::Outbound),
        "the requester's SMI moved the hop pointer (C14-9:1)"
    );
    assert_eq!(sent[0].dest.dlid, PERMISSIVE_LID);
    assert_eq!(ev.len(), 2, "{ev:?}");
    let Event::Recv(resp) = &ev[0] else { panic!() };
    assert_eq!(resp.response_to.map(|s| s.id), Some(id));
    assert_eq!(
        resp.mad[6], 0,
        "our receive rule took the hop pointer to 0 (C14-13:3)"
    );
    assert!(matches!(&ev[1], Event::Send(c) if c.status == WcStatus::Success));
    let k = r.port.smi_counters();
    assert_eq!((k.sent, k.received), (1, 1));
    a.deregister();
    r.assert_clean();
}

#[test]
fn smps_arriving_are_answered_along_the_return_path_or_discarded() {
    let r = Rig::new();
    r.fake.set_process_mad(|m| Ok(sma_answer(m)));
    // A Get at the end of a 2-hop path (hp 2 = hc), from a requester two switches away.
    let mut route = DirectedRoute::from_path(&[1, 5]).unwrap();
    route.hop_pointer = 2;
    route.return_path[1] = 3;
    let repr = SmpRepr::request(
        method::GET,
        SmpRoute::Directed(route),
        attr_id::sm::PORT_INFO,
        0,
        0x77,
    );
    let mut m = [0u8; MAD_LEN];
    repr.emit(&mut Smp::new_checked(&mut m[..]).unwrap());
    r.fake.inject(Inbound::new(SpecialQp::Smi, m, 0));
    // An outbound SMP still mid-path: a CA does not forward (C14-9:2).
    let mut mid = m;
    mid[6] = 1;
    r.fake.inject(Inbound::new(SpecialQp::Smi, mid, 0));
    r.port
        .progress_until(r.port.deadline_after(Duration::from_millis(2)));
    r.port
        .progress_until(r.port.deadline_after(Duration::from_millis(2)));
    let sent = r.fake.sent();
    assert_eq!(sent.len(), 1, "one answer: {sent:?}");
    let smp = Smp::new_checked(&sent[0].mad[..]).unwrap();
    assert_eq!(smp.direction(), Direction::Returning);
    assert_eq!(
        (
            smp.hop_pointer(),
            smp.return_path()[2],
            smp.return_path()[1]
        ),
        (2, 1, 3),
        "ReturnPath[2] = our port (receive rule), hp 3 -> 2 (C14-13:1)"
    );
    assert_eq!(smp.data()[0], 0x5A);
    let k = r.port.smi_counters();
    assert_eq!((k.received, k.replies), (1, 1));
    assert_eq!(k.recv_discards.get(SmiDiscard::NotASwitch), 1);
    r.assert_clean();
}

/// Agent A's 0-hop SMInfo Get, which the port's SMA does not take, handed to the SM agent
/// registered for it; returns the request as the SM agent got it.
fn local_request_to_the_sm(r: &Rig, a: &Agent, sm: &Agent) -> (crate::SendId, crate::RecvMad) {
    r.fake
        .set_process_mad(|_| panic!("SMInfo is not the SMA's (mlx5 process_mad)"));
    let id = a
        .send(
            crate::SendRequest::new(
                dr_get(&[], attr_id::sm::SM_INFO, 0x77),
                UdDest::DIRECTED_ROUTE,
            )
            .timeout_ms(100)
            .context(3),
        )
        .expect("accepted");
    let ev = r.collect(sm, Duration::from_millis(5));
    assert_eq!(ev.len(), 1, "the request, nothing else: {ev:?}");
    let Event::Recv(req) = &ev[0] else {
        panic!("{ev:?}")
    };
    assert_eq!(req.response_to, None);
    assert_eq!(req.header().attr_id(), attr_id::sm::SM_INFO);
    assert_eq!(
        req.header().tid() & 0xFFFF_FFFF,
        0x77,
        "the client's half of the TID"
    );
    (id, (**req).clone())
}

/// A local request another agent of the port answers gets that answer as its response, then
/// its one completion (as a wire send with a response), and nothing is dropped. The kernel
/// routes such an answer to the requester by the TID's upper half (`find_mad_agent`, hi_tid);
/// here the upper half names the request's send slot.
#[test]
fn a_local_request_answered_by_another_agent_gets_that_answer() {
    let r = Rig::new();
    let sm = r.agent(AgentSpec::class(0x81, 1, MethodMask::of(&[method::GET])));
    let a = r.agent(AgentSpec::responses_only(SpecialQp::Smi));
    let (id, req) = local_request_to_the_sm(&r, &a, &sm);
    let mut resp = req.mad;
    resp[3] = method::GET_RESP;
    resp[4] |= 0x80;
    resp[64] = 0xC1;
    let reply = sm
        .send(crate::SendRequest::new(
            resp.to_vec(),
            req.addr.reply_dest(),
        ))
        .expect("the SM's answer is accepted");
    let ev = r.collect(&a, Duration::from_millis(5));
    assert_eq!(ev.len(), 2, "the answer, then the completion: {ev:?}");
    let Event::Recv(got) = &ev[0] else {
        panic!("the answer comes first: {ev:?}")
    };
    assert_eq!(got.mad[64], 0xC1);
    assert_eq!(got.response_to.map(|s| (s.id, s.context)), Some((id, 3)));
    let Event::Send(done) = &ev[1] else {
        panic!("then the completion: {ev:?}")
    };
    assert_eq!((done.id, done.status), (id, WcStatus::Success));
    assert_eq!(done.tid & 0xFFFF_FFFF, 0x77);
    let sm_ev = r.collect(&sm, Duration::from_millis(2));
    assert!(
        matches!(&sm_ev[..], [Event::Send(c)] if c.id == reply && c.status == WcStatus::Success),
        "{sm_ev:?}"
    );
    let c = r.port.counters();
    assert_eq!(c.responses, 1);
    assert_eq!(c.drops.total(), 0, "{:?}", c.drops);
    assert!(r.fake.sent().is_empty(), "nothing on the wire");
    a.deregister();
    sm.deregister();
    r.assert_clean();
}

/// A local request the other agent never answers completes once, with RESP_TIMEOUT_ERR after
/// its timeout (not at once with SUCCESS: the kernel completes a local send at once, which
/// leaves a umad reader waiting for an answer that never comes).
#[test]
fn a_local_request_nobody_answers_times_out_once() {
    let r = Rig::new();
    let sm = r.agent(AgentSpec::class(0x81, 1, MethodMask::of(&[method::GET])));
    let a = r.agent(AgentSpec::responses_only(SpecialQp::Smi));
    let (id, _) = local_request_to_the_sm(&r, &a, &sm);
    assert!(
        r.collect(&a, Duration::from_millis(80)).is_empty(),
        "nothing before its timeout"
    );
    let ev = r.collect(&a, Duration::from_millis(100));
    assert!(
        matches!(&ev[..], [Event::Send(c)] if c.id == id && c.status == WcStatus::RespTimeoutErr),
        "{ev:?}"
    );
    assert_eq!(r.port.counters().timeouts, 1);
    a.deregister();
    sm.deregister();
    r.assert_clean();
}

/// Cancel reaches a local request waiting for its answer as it reaches a wire send: one
/// completion, WR_FLUSH_ERR, and the late answer is dropped.
#[test]
fn a_local_request_waiting_for_its_answer_can_be_canceled() {
    let r = Rig::new();
    let sm = r.agent(AgentSpec::class(0x81, 1, MethodMask::of(&[method::GET])));
    let a = r.agent(AgentSpec::responses_only(SpecialQp::Smi));
    let (id, req) = local_request_to_the_sm(&r, &a, &sm);
    a.cancel(id).expect("outstanding");
    let ev = r.collect(&a, Duration::from_millis(5));
    assert!(
        matches!(&ev[..], [Event::Send(c)] if c.id == id && c.status == WcStatus::WrFlushErr),
        "{ev:?}"
    );
    let mut resp = req.mad;
    resp[3] = method::GET_RESP;
    resp[4] |= 0x80;
    sm.send(crate::SendRequest::new(
        resp.to_vec(),
        req.addr.reply_dest(),
    ))
    .expect("accepted");
    assert!(r.collect(&a, Duration::from_millis(5)).is_empty());
    assert_eq!(r.port.counters().responses, 0);
    a.deregister();
    sm.deregister();
    r.assert_clean();
}

/// Deregistering the requester while its local request waits for the answer finishes that
/// send once (WR_FLUSH_ERR) and leaves no slot held.
#[test]
fn deregistering_a_requester_finishes_its_waiting_local_request() {
    let r = Rig::new();
    let sm = r.agent(AgentSpec::class(0x81, 1, MethodMask::of(&[method::GET])));
    let a = r.agent(AgentSpec::responses_only(SpecialQp::Smi));
    let _ = local_request_to_the_sm(&r, &a, &sm);
    assert_eq!(a.outstanding(), 1);
    a.deregister();
    assert_eq!(r.port.counters().completed.get(WcStatus::WrFlushErr), 1);
    sm.deregister();
    r.assert_clean();
}

/// A local request is outside solicited-MAD flow control, as in the kernel, whose
/// `ib_post_send_mad` consumes a local SMP in `handle_outgoing_dr_smp` before it classifies
/// the send with `is_solicited_fc_mad` / `mad_is_for_backlog`: with the requester's limit
/// full and a wire request waiting in its backlog, the local request reaches the other agent
/// at once, takes no part of the count, and its end releases nothing of it.
#[test]
fn a_local_request_is_outside_flow_control() {
    // Receive depth 16: a responses-only agent may have 16/4 = 4 solicited sends outstanding.
    let r = Rig::with_depths(16, 16);
    let sm = r.agent(AgentSpec::class(0x81, 1, MethodMask::of(&[method::GET])));
    let a = r.agent(AgentSpec::responses_only(SpecialQp::Smi));
    let fc = |a: &Agent| {
        let f = lock(&a.inner.fc);
        (f.max, f.outstanding, f.backlog.len())
    };
    // Five wire requests (one hop out of port 1) nobody answers: four fill the limit, the
    // fifth waits in the backlog.
    let wire: Vec<_> = (0..5)
        .map(|t| {
            a.send(
                crate::SendRequest::new(
                    dr_get(&[1], attr_id::sm::NODE_INFO, 0x100 + t),
                    UdDest::DIRECTED_ROUTE,
                )
                .timeout_ms(60_000),
            )
            .expect("accepted")
        })
        .collect();
    r.port.progress();
    assert_eq!(fc(&a), (4, 4, 1), "limit full, one wire request backlogged");
    assert_eq!(r.fake.sent().len(), 4);
    // The local request is not held behind either: the SM agent gets it now.
    let (id, req) = local_request_to_the_sm(&r, &a, &sm);
    assert_eq!(fc(&a), (4, 4, 1), "the local request is not counted");
    assert_eq!(
        r.port.counters().backlogged,
        1,
        "only the fifth wire request"
    );
    let mut resp = req.mad;
    resp[3] = method::GET_RESP;
    resp[4] |= 0x80;
    sm.send(crate::SendRequest::new(
        resp.to_vec(),
        req.addr.reply_dest(),
    ))
    .expect("the SM's answer is accepted");
    let ev = r.collect(&a, Duration::from_millis(5));
    assert!(
        matches!(&ev[..], [Event::Recv(got), Event::Send(c)]
            if got.response_to.map(|s| s.id) == Some(id)
                && c.id == id && c.status == WcStatus::Success),
        "the answer, then the completion: {ev:?}"
    );
    assert_eq!(
        fc(&a),
        (4, 4, 1),
        "its end released nothing: the backlog still waits"
    );
    assert_eq!(r.fake.sent().len(), 4, "nothing more on the wire");
    // The wire requests end; the count goes back to zero.
    for w in &wire {
        a.cancel(*w).expect("outstanding");
    }
    let ev = r.collect(&a, Duration::from_millis(5));
    assert_eq!(
        ev.iter()
            .filter(|e| matches!(e, Event::Send(c) if c.status == WcStatus::WrFlushErr))
            .count(),
        5,
        "{ev:?}"
    );
    assert_eq!(fc(&a), (4, 0, 0), "counts back at baseline");
    assert_eq!(r.port.census().backlogged, 0);
    a.deregister();
    sm.deregister();
    r.assert_clean();
}

/// The SM agent's answer to `req` (a GetResp with 0xC1 in its first data byte), sent back to
/// where the request came from.
fn sm_answers(sm: &Agent, req: &crate::RecvMad) -> crate::SendId {
    let mut resp = req.mad;
    resp[3] = method::GET_RESP;
    resp[4] |= 0x80;
    resp[64] = 0xC1;
    sm.send(crate::SendRequest::new(
        resp.to_vec(),
        req.addr.reply_dest(),
    ))
    .expect("the SM's answer is accepted")
}

/// A's 0-hop SMInfo Get without a response timeout, which the SM agent takes: A's send
/// completes SUCCESS at once (as the kernel's local send does), the SM gets the request with
/// A's agent ID in the TID's upper half (the kernel's `hi_tid`); returns A's send and the
/// request as the SM got it.
fn untimed_local_request(r: &Rig, a: &Agent, sm: &Agent) -> (crate::SendId, crate::RecvMad) {
    r.fake
        .set_process_mad(|_| panic!("SMInfo is not the SMA's (mlx5 process_mad)"));
    let id = a
        .send(
            crate::SendRequest::new(
                dr_get(&[], attr_id::sm::SM_INFO, 0x77),
                UdDest::DIRECTED_ROUTE,
            )
            .context(3),
        )
        .expect("accepted");
    let ev = r.collect(sm, Duration::from_millis(5));
    let [Event::Recv(req)] = &ev[..] else {
        panic!("the request, nothing else: {ev:?}")
    };
    assert_eq!(req.response_to, None);
    assert_eq!(
        req.header().tid(),
        u64::from(crate::tid::local_stamp(a.id().0)) << 32 | 0x77,
        "A's ID in the stack's half, the client's half kept"
    );
    let ev = r.collect(a, Duration::from_millis(2));
    assert!(
        matches!(&ev[..], [Event::Send(c)] if c.id == id && c.status == WcStatus::Success),
        "A's send completes at once: {ev:?}"
    );
    assert_eq!(a.outstanding(), 0);
    (id, (**req).clone())
}

/// The answer to a local request sent without a response timeout reaches the requester, as
/// in the kernel: `handle_outgoing_dr_smp` finds the requester by the answer's `hi_tid`
/// (`find_mad_agent`) and `local_completions` calls its `recv_handler` without looking for
/// its send (drivers/infiniband/core/mad.c). It comes as a received MAD matched to no send,
/// after the send's SUCCESS completion; nothing is dropped.
#[test]
fn the_answer_to_a_local_request_without_a_timeout_reaches_the_requester() {
    let r = Rig::new();
    let sm = r.agent(AgentSpec::class(0x81, 1, MethodMask::of(&[method::GET])));
    let a = r.agent(AgentSpec::responses_only(SpecialQp::Smi));
    let (_, req) = untimed_local_request(&r, &a, &sm);
    let reply = sm_answers(&sm, &req);
    let ev = r.collect(&a, Duration::from_millis(5));
    let [Event::Recv(got)] = &ev[..] else {
        panic!("the answer: {ev:?}")
    };
    assert_eq!(
        (got.agent, got.response_to, got.mad[3], got.mad[64]),
        (a.id(), None, method::GET_RESP, 0xC1)
    );
    assert_eq!(got.header().tid(), req.header().tid());
    assert_eq!(got.addr.slid, PERMISSIVE_LID);
    let sm_ev = r.collect(&sm, Duration::from_millis(2));
    assert!(
        matches!(&sm_ev[..], [Event::Send(c)] if c.id == reply && c.status == WcStatus::Success),
        "{sm_ev:?}"
    );
    let c = r.port.counters();
    assert_eq!(c.drops.total(), 0, "{:?}", c.drops);
    assert_eq!(c.responses, 0, "matched to no send");
    assert_eq!(r.port.smi_counters().local_routed, 1);
    assert!(r.fake.sent().is_empty(), "nothing on the wire");
    a.deregister();
    sm.deregister();
    r.assert_clean();
}

/// Such an answer for a requester without a receive side, or one that has deregistered, is
/// dropped and counted, as the kernel's `find_mad_agent` finds no agent for it.
#[test]
fn the_answer_to_a_local_request_without_a_timeout_needs_a_live_receiving_requester() {
    let r = Rig::new();
    let sm = r.agent(AgentSpec::class(0x81, 1, MethodMask::of(&[method::GET])));
    // Without a receive side.
    let a = r.agent(AgentSpec::send_only(SpecialQp::Smi));
    let (_, req) = untimed_local_request(&r, &a, &sm);
    sm_answers(&sm, &req);
    assert!(r.collect(&a, Duration::from_millis(5)).is_empty());
    r.collect(&sm, Duration::from_millis(2));
    let c = r.port.counters();
    assert_eq!(c.drops.get(DropReason::NotExpected), 1, "{:?}", c.drops);
    assert_eq!(a.counters().drops.get(DropReason::NotExpected), 1);
    // Gone before the answer.
    let b = r.agent(AgentSpec::responses_only(SpecialQp::Smi));
    let (_, req) = untimed_local_request(&r, &b, &sm);
    b.deregister();
    sm_answers(&sm, &req);
    r.collect(&sm, Duration::from_millis(5));
    let c = r.port.counters();
    assert_eq!(c.drops.get(DropReason::UnknownTid), 1, "{:?}", c.drops);
    assert_eq!(c.drops.total(), 2, "{:?}", c.drops);
    assert_eq!(r.port.smi_counters().local_routed, 0);
    a.deregister();
    sm.deregister();
    r.assert_clean();
}

/// A send the SMI routed and `Agent::send` then refused because its agent began to
/// deregister is not counted as sent (the SMI counters name SMPs put on the wire or handled
/// locally). Deterministic: the requester's send is held inside `Agent::send`, past its first
/// closing check, on the agent table's lock (a local request for another agent looks there);
/// the agent closes meanwhile.
#[test]
fn a_local_request_refused_by_a_closing_agent_is_not_counted() {
    let r = Rig::new();
    let sm = r.agent(AgentSpec::class(0x81, 1, MethodMask::of(&[method::GET])));
    let a = r.agent(AgentSpec::responses_only(SpecialQp::Smi));
    r.fake
        .set_process_mad(|_| panic!("SMInfo is not the SMA's (mlx5 process_mad)"));
    let smi_before = r.port.smi_counters();
    let sends_before = r.port.counters().sends;
    let shared = &r.port.shared;
    let ids = shared.next_send.load(Ordering::SeqCst);
    let table = shared.agents.write().expect("agent table");
    let result = std::thread::scope(|s| {
        let sender = s.spawn(|| {
            a.send(
                crate::SendRequest::new(
                    dr_get(&[], attr_id::sm::SM_INFO, 0x77),
                    UdDest::DIRECTED_ROUTE,
                )
                .timeout_ms(100),
            )
        });
        // The send took its ID (past the first closing check); it now waits for the table.
        while shared.next_send.load(Ordering::SeqCst) == ids {
            std::thread::yield_now();
        }
        a.inner.closing.store(true, Ordering::SeqCst);
        drop(table);
        sender.join().expect("the sender")
    });
    assert!(matches!(result, Err(MadError::AgentClosed)), "{result:?}");
    assert_eq!(r.port.smi_counters(), smi_before);
    assert_eq!(r.port.counters().sends, sends_before);
    assert!(r.collect(&sm, Duration::from_millis(2)).is_empty());
    a.deregister();
    sm.deregister();
    r.assert_clean();
}

/// Wire SMPs sent while their agent deregisters: each one counted as sent is one the port
/// accepted (a send refused at the second closing check of `Agent::send`, after the SMI routed
/// it, is not counted). Many rounds, so that deregistrations land inside that window.
#[test]
fn wire_smps_refused_by_a_deregistration_are_not_counted_as_sent() {
    let r = Rig::new();
    for round in 0..200 {
        let a = r.agent(AgentSpec::responses_only(SpecialQp::Smi));
        let inner = Arc::clone(&a.inner);
        let sends_before = r.port.counters().sends;
        let accepted = std::thread::scope(|s| {
            let sender = s.spawn(|| {
                let mut n = 0u64;
                loop {
                    match a.send(crate::SendRequest::new(
                        dr_get(&[1], attr_id::sm::NODE_INFO, n),
                        UdDest::DIRECTED_ROUTE,
                    )) {
                        Ok(_) => n += 1,
                        Err(MadError::AgentClosed) => return n,
                        Err(e) => panic!("{e}"),
                    }
                }
            });
            // Let some sends through first, then deregister under the sender.
            while r.port.counters().sends == sends_before {
                std::thread::yield_now();
            }
            r.port.shared.deregister(&inner);
            sender.join().expect("the sender")
        });
        drop(a);
        let (k, c) = (r.port.smi_counters(), r.port.counters());
        assert_eq!(
            k.sent, c.sends,
            "round {round}: {accepted} accepted this round"
        );
    }
    r.assert_clean();
}

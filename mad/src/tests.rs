//! Unit tests of the port, agents and progress loop against the in-crate test double
//! (`double.rs`): each of the paths of reference/mad-stack.md §1 in isolation, with exactly one
//! completion per send, its status, no event after deregistration, leases back, no IOMMU fault.
//! The same paths run on the simulated HCA in `tests/` (crate hca-tests).

// Short names (rig, agents, queues) read better in these scenarios.
#![allow(clippy::many_single_char_names)]

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use dma::Accounting;
use driver::verbs::{GRH_LEN, HcaPort, SpecialQp, UdDest, WcOpcode, WcStatus, WorkCompletion};
use mad_wire::header::MAD_LEN;

use crate::double::{FakePort, Inbound, Outbound};
use crate::progress::RECOVERY_RETRY;
use crate::{
    Agent, AgentSpec, DropReason, Event, EventQueue, MadError, MethodMask, Port, PortConfig,
    QP1_QKEY, SendId, SendRequest, SendState,
};

const PERF: u8 = 0x04;
const SA: u8 = 0x03;

fn mad(class: u8, version: u8, method: u8, attr: u16, tid: u64) -> Vec<u8> {
    let mut b = vec![0u8; MAD_LEN];
    b[0] = 1;
    b[1] = class;
    b[2] = version;
    b[3] = method;
    b[8..16].copy_from_slice(&tid.to_be_bytes());
    b[16..18].copy_from_slice(&attr.to_be_bytes());
    b
}

fn get(tid: u64) -> Vec<u8> {
    mad(PERF, 1, 0x01, 0x12, tid)
}

fn gsi(lid: u16) -> UdDest {
    UdDest {
        dlid: lid,
        sl: 0,
        src_path_bits: 0,
        remote_qpn: 1,
        remote_qkey: QP1_QKEY,
        pkey_index: 0,
        grh: None,
    }
}

fn smi(lid: u16) -> UdDest {
    UdDest {
        remote_qpn: 0,
        remote_qkey: 0,
        ..gsi(lid)
    }
}

/// The responder of a well-behaved peer: every request gets its response method with the same
/// TID, from the LID it was sent to.
fn answer(out: &Outbound) -> Vec<Inbound> {
    let mut m = out.mad;
    if m[3] & 0x80 != 0 {
        return Vec::new();
    }
    m[3] = if m[3] == 0x02 { 0x81 } else { m[3] | 0x80 };
    vec![Inbound::new(out.qp, m, out.dest.dlid)]
}

struct Rig {
    fake: Arc<FakePort>,
    port: Port,
    base: Accounting,
}

fn rig_with(send: u32, recv: u32, config: PortConfig) -> Rig {
    let fake = FakePort::new(send, recv);
    let port = Port::open(fake.clone(), config).expect("open");
    let base = fake.accounting();
    Rig { fake, port, base }
}

fn rig() -> Rig {
    rig_with(16, 64, PortConfig::default())
}

/// [`rig`] with `slots` send slots per ring (fewer than the queue holds).
fn rig_with_slots(slots: u32) -> Rig {
    rig_with(
        16,
        64,
        PortConfig {
            slots: Some(slots),
            ..PortConfig::default()
        },
    )
}

impl Rig {
    fn agent(&self, spec: AgentSpec) -> Agent {
        self.port.register(spec).expect("register")
    }

    fn perf_agent(&self) -> Agent {
        self.agent(AgentSpec::responses_only(SpecialQp::Gsi))
    }

    /// Every event `agent` gets until `within` of device time has passed.
    fn collect(&self, agent: &Agent, within: Duration) -> Vec<Event> {
        let deadline = self.port.deadline_after(within);
        let mut v = Vec::new();
        while let Some(e) = agent.next_event(deadline) {
            v.push(e);
        }
        v
    }

    /// Leases and mappings back to what they were after the port opened, no IOMMU fault,
    /// no send buffer rewritten under a posted send, no slot busy, nothing queued, no request
    /// unit held on any ring, no agent among a ring's unit waiters, no agent still registered
    /// holding a credit or a backlog.
    fn assert_clean(&self) {
        let a = self.fake.accounting();
        assert_eq!(
            a.leases_out, self.base.leases_out,
            "leases back to baseline: {a:?}"
        );
        assert_eq!(
            a.live_mappings, self.base.live_mappings,
            "mappings back to baseline"
        );
        assert_eq!(self.fake.faults(), 0, "no IOMMU fault");
        assert_eq!(
            self.fake.buffers_rewritten_while_posted(),
            0,
            "no send buffer rewritten while its send was posted"
        );
        let c = self.port.census();
        assert_eq!(c.gsi.active(), 0, "{c:?}");
        assert_eq!(c.smi.map_or(0, |s| s.active()), 0, "{c:?}");
        assert_eq!(c.gsi.queued + c.backlogged, 0, "{c:?}");
        assert_eq!(c.outstanding, 0, "{c:?}");
        assert_eq!(c.gsi.posted, 0, "{c:?}");
        // Request units of every ring back, and no agent still registered holding a
        // flow-control credit or a backlogged send.
        for qp in [SpecialQp::Smi, SpecialQp::Gsi] {
            if let Some(ring) = self.port.shared.ring(qp) {
                assert_eq!(ring.requests_held(), 0, "{qp:?} request units back: {c:?}");
            }
        }
        assert_eq!(
            (c.gsi.requests_held, c.smi.map_or(0, |s| s.requests_held)),
            (0, 0),
            "{c:?}"
        );
        assert_eq!(
            (c.gsi.unit_waiters, c.smi.map_or(0, |s| s.unit_waiters)),
            (0, 0),
            "no agent left among a ring's unit waiters: {c:?}"
        );
        for (id, a) in &self.port.shared.agents_read().agents {
            let fc = crate::ring::lock(&a.fc);
            assert_eq!(fc.outstanding, 0, "agent {id} holds flow-control credits");
            assert!(fc.backlog.is_empty(), "agent {id} has a backlog");
        }
        assert_eq!(
            self.port.counters().post_failures,
            0,
            "a post never fails for room"
        );
        assert_eq!(
            self.port.counters().bad_completions,
            0,
            "every completion found its work request"
        );
    }
}

/// The completions in `events`, by send, each checked to be the only one for its send.
fn completions(events: &[Event]) -> HashMap<SendId, (WcStatus, u32, u32)> {
    let mut m = HashMap::new();
    for e in events {
        if let Event::Send(c) = e {
            assert!(
                m.insert(c.id, (c.status, c.vendor_err, c.retries))
                    .is_none(),
                "two completions for {}",
                c.id
            );
        }
    }
    m
}

fn recvs(events: &[Event]) -> Vec<&crate::RecvMad> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::Recv(r) => Some(&**r),
            _ => None,
        })
        .collect()
}

fn tid_of(m: &[u8]) -> u64 {
    u64::from_be_bytes(m[8..16].try_into().unwrap())
}

/// A slot's send buffer is reused by its next send: a shorter MAD goes out zero-padded, with
/// none of the previous MAD's bytes, and the buffers are the leases the census names.
#[test]
fn a_reused_send_buffer_carries_only_the_new_mad_zero_padded() {
    let r = rig_with_slots(2);
    let census = r.port.census();
    assert_eq!(
        (
            census.gsi.send_buffer_leases,
            census.smi.map(|s| s.send_buffer_leases)
        ),
        (1, Some(1)),
        "one lease holds the two slots' buffers on each QP"
    );
    let a = r.perf_agent();
    // A full MAD in each slot's buffer, so that the short one reuses one, whichever.
    for tid in [1, 3] {
        let mut full = get(tid);
        full[24..].fill(0xA5);
        a.send(SendRequest::new(full, gsi(2))).unwrap();
        let ev = r.collect(&a, Duration::from_millis(10));
        assert_eq!(completions(&ev).len(), 1, "{ev:?}");
    }
    let short = get(2)[..40].to_vec();
    a.send(SendRequest::new(short, gsi(2))).unwrap();
    let ev = r.collect(&a, Duration::from_millis(10));
    assert_eq!(completions(&ev).len(), 1, "{ev:?}");
    let sent = r.fake.sent();
    assert_eq!(sent.len(), 3);
    assert!(
        sent[..2]
            .iter()
            .all(|s| s.mad[24..].iter().all(|&b| b == 0xA5)),
        "the full MADs whole"
    );
    // Its bytes as given, but for the TID's upper half, which the stack rewrites.
    let mut expected = get(2)[..40].to_vec();
    expected[8..12].copy_from_slice(&sent[2].mad[8..12]);
    assert_eq!(
        &sent[2].mad[..40],
        &expected[..],
        "the short MAD's own bytes"
    );
    assert!(
        sent[2].mad[40..].iter().all(|&b| b == 0),
        "zero-padded past its 40 bytes: {:?}",
        &sent[2].mad[40..]
    );
    a.deregister();
    r.assert_clean();
}

/// A finished send's record goes back to its ring for a new send (at most the slot count of
/// them are kept), holding no MAD and still naming its agent, whose next send takes it over
/// as it is (no reference count changes); once the agent is deregistered the kept records
/// name the port's internal agent: a kept record keeps no client agent alive, nor its event
/// queue, once the agent is gone.
#[test]
fn finished_sends_records_are_kept_for_their_agent_until_it_is_gone() {
    let r = rig_with_slots(2);
    r.fake.set_responder(answer);
    let a = r.perf_agent();
    let id = a.id();
    let queue = Arc::downgrade(a.events());
    let ids: Vec<SendId> = (0..6)
        .map(|t| {
            a.send(SendRequest::new(get(t), gsi(5)).timeout_ms(100))
                .unwrap()
        })
        .collect();
    let ev = r.collect(&a, Duration::from_millis(50));
    let c = completions(&ev);
    assert!(ids.iter().all(|id| c[id].0 == WcStatus::Success), "{ev:?}");
    assert_eq!(recvs(&ev).len(), 6, "{ev:?}");
    let kept = r.port.send_ring(SpecialQp::Gsi).spare_records();
    assert!(
        (1..=2).contains(&kept.len()),
        "kept, at most the slot count: {kept:?}"
    );
    assert!(
        kept.iter().all(|&(agent, mad)| agent == id && mad == 0),
        "its agent and no MAD: {kept:?}"
    );
    drop(ev);
    a.deregister();
    let kept = r.port.send_ring(SpecialQp::Gsi).spare_records();
    assert!(
        !kept.is_empty() && kept.iter().all(|&(agent, _)| agent == crate::AgentId(0)),
        "the internal agent once it is gone: {kept:?}"
    );
    assert!(
        queue.upgrade().is_none(),
        "nothing keeps the deregistered agent's event queue"
    );
    r.assert_clean();
}

/// Sends that finish while their agent deregisters (canceled by it) leave records naming the
/// internal agent: nothing kept holds the agent once its deregistration returned.
#[test]
fn records_of_sends_finished_by_a_deregistration_name_no_agent() {
    let r = rig_with_slots(4);
    let a = r.perf_agent();
    let queue = Arc::downgrade(a.events());
    for t in 0..6 {
        a.send(SendRequest::new(get(t), gsi(5)).timeout_ms(60_000))
            .unwrap();
    }
    r.port.progress();
    a.deregister();
    let kept = r.port.send_ring(SpecialQp::Gsi).spare_records();
    assert!(
        !kept.is_empty()
            && kept
                .iter()
                .all(|&(agent, mad)| agent == crate::AgentId(0) && mad == 0),
        "the internal agent and no MAD: {kept:?}"
    );
    assert!(
        queue.upgrade().is_none(),
        "nothing keeps the deregistered agent's event queue"
    );
    r.assert_clean();
}

#[test]
fn path1_send_without_response_completes_after_its_cqe() {
    let r = rig();
    r.fake.set_auto(false);
    let a = r.perf_agent();
    let id = a
        .send(SendRequest::new(get(7), gsi(2)).context(99))
        .unwrap();
    assert_eq!(r.port.progress(), 0, "nothing completes before the CQE");
    assert!(a.try_event().is_none());
    assert_eq!(
        r.port.census().gsi.active(),
        1,
        "the slot is held until the CQE"
    );
    assert_eq!(
        r.fake.accounting().leases_out,
        r.base.leases_out,
        "the MAD is in its slot's send buffer: no lease per send"
    );
    r.fake.execute(SpecialQp::Gsi, 1);
    let ev = r.collect(&a, Duration::from_millis(10));
    let c = completions(&ev);
    assert_eq!(c.len(), 1);
    assert_eq!(c[&id], (WcStatus::Success, 0, 0));
    match &ev[0] {
        Event::Send(s) => {
            assert_eq!(s.context, 99);
            assert_eq!(s.tid & 0xFFFF_FFFF, 7, "the client's low TID kept");
            assert_eq!(s.tid >> 56, 0, "the top byte stays clear");
        }
        e => panic!("{e:?}"),
    }
    a.deregister();
    r.assert_clean();
}

#[test]
fn path2_response_is_delivered_linked_then_the_send_completes() {
    let r = rig();
    r.fake.set_responder(answer);
    let a = r.perf_agent();
    let id = a
        .send(
            SendRequest::new(get(0xFFFF_FFFF_0000_0042), gsi(5))
                .timeout_ms(100)
                .context(3),
        )
        .unwrap();
    let ev = r.collect(&a, Duration::from_millis(50));
    assert_eq!(ev.len(), 2, "{ev:?}");
    let Event::Recv(resp) = &ev[0] else {
        panic!("the response comes first: {ev:?}")
    };
    assert_eq!(resp.response_to.map(|s| (s.id, s.context)), Some((id, 3)));
    assert_eq!(resp.header().method(), 0x81);
    let sent = r.fake.sent();
    assert_eq!(sent.len(), 1);
    let wire_tid = tid_of(&sent[0].mad);
    assert_eq!(wire_tid & 0xFFFF_FFFF, 0x42, "low half is the client's");
    assert_ne!(
        wire_tid >> 32,
        0xFFFF_FFFF,
        "the stack owns the upper half of a request's TID"
    );
    assert_eq!(wire_tid >> 56, 0);
    assert_eq!(resp.header().tid(), wire_tid);
    assert_eq!(completions(&ev)[&id], (WcStatus::Success, 0, 0));
    assert_eq!(r.port.counters().responses, 1);
    a.deregister();
    r.assert_clean();
}

#[test]
fn responses_keep_the_requesters_tid() {
    let r = rig();
    let a = r.perf_agent();
    let mut m = get(0xABCD_0001_0000_0002);
    m[3] = 0x81;
    a.send(SendRequest::new(m, gsi(5))).unwrap();
    r.collect(&a, Duration::from_millis(5));
    assert_eq!(tid_of(&r.fake.sent()[0].mad), 0xABCD_0001_0000_0002);
    a.deregister();
    r.assert_clean();
}

#[test]
fn path3_early_response_completes_the_send_only_at_its_cqe() {
    let r = rig();
    r.fake.set_responder(answer);
    r.fake.hold_send_cqes(true);
    let a = r.perf_agent();
    let id = a
        .send(SendRequest::new(get(1), gsi(5)).timeout_ms(100))
        .unwrap();
    let ev = r.collect(&a, Duration::from_millis(20));
    assert_eq!(ev.len(), 1, "{ev:?}");
    assert!(matches!(&ev[0], Event::Recv(m) if m.response_to.map(|s| s.id) == Some(id)));
    assert_eq!(r.port.census().gsi.count(SendState::EarlyResp), 1);
    assert_eq!(
        r.fake.accounting().leases_out,
        r.base.leases_out,
        "the MAD is in its slot's send buffer: no lease per send"
    );
    // Far beyond the timeout: an EARLY_RESP send does not time out.
    let ev = r.collect(&a, Duration::from_millis(500));
    assert!(ev.is_empty(), "{ev:?}");
    r.fake.release_send_cqes();
    let ev = r.collect(&a, Duration::from_millis(5));
    assert_eq!(completions(&ev)[&id], (WcStatus::Success, 0, 0));
    assert_eq!(r.port.counters().early_responses, 1);
    a.deregister();
    r.assert_clean();
}

#[test]
fn path4_timeout_after_retries_then_late_response_dropped() {
    let r = rig();
    let a = r.perf_agent();
    let t0 = r.fake.time();
    let id = a
        .send(SendRequest::new(get(9), gsi(5)).timeout_ms(100).retries(2))
        .unwrap();
    let ev = r.collect(&a, Duration::from_secs(2));
    assert_eq!(completions(&ev)[&id], (WcStatus::RespTimeoutErr, 0, 2));
    let sent = r.fake.sent();
    assert_eq!(sent.len(), 3, "retries + 1 attempts on the wire");
    assert!(
        sent.iter().all(|s| tid_of(&s.mad) == tid_of(&sent[0].mad)),
        "same TID each time"
    );
    let elapsed = r.fake.time().saturating_sub(t0);
    assert!(
        elapsed >= Duration::from_millis(300),
        "3 × 100 ms: {elapsed:?}"
    );
    let c = r.port.counters();
    assert_eq!((c.timeouts, c.retries), (1, 2));
    // The response finally comes: the send is gone, it is dropped as late.
    let mut late = sent[0].mad;
    late[3] = 0x81;
    r.fake.inject(Inbound::new(SpecialQp::Gsi, late, 5));
    let ev = r.collect(&a, Duration::from_millis(5));
    assert!(ev.is_empty(), "{ev:?}");
    assert_eq!(r.port.counters().drops.get(DropReason::Late), 1);
    a.deregister();
    r.assert_clean();
}

#[test]
fn path5_cancel_on_the_qp_completes_at_its_cqe() {
    let r = rig();
    r.fake.set_auto(false);
    let a = r.perf_agent();
    let id = a
        .send(SendRequest::new(get(1), gsi(5)).timeout_ms(1000))
        .unwrap();
    a.cancel(id).unwrap();
    assert!(
        matches!(a.cancel(id), Err(MadError::NotOutstanding(_))),
        "already canceled"
    );
    r.port.progress();
    assert!(a.try_event().is_none(), "no completion before the CQE");
    assert_eq!(r.port.census().gsi.count(SendState::Canceled), 1);
    r.fake.execute(SpecialQp::Gsi, 1);
    let ev = r.collect(&a, Duration::from_millis(5));
    assert_eq!(completions(&ev)[&id], (WcStatus::WrFlushErr, 0, 0));
    a.deregister();
    r.assert_clean();
}

#[test]
fn path6_cancel_while_waiting_completes_from_the_loop_and_drops_the_response() {
    let r = rig();
    let a = r.perf_agent();
    let id = a
        .send(SendRequest::new(get(1), gsi(5)).timeout_ms(10_000))
        .unwrap();
    r.port.progress();
    assert_eq!(r.port.census().gsi.count(SendState::WaitResp), 1);
    a.cancel(id).unwrap();
    assert!(
        a.try_event().is_none(),
        "reported by the progress loop, not inline"
    );
    // The response arrives before the loop runs: it is dropped as a canceled send's.
    let mut resp = r.fake.sent()[0].mad;
    resp[3] = 0x81;
    r.fake.inject(Inbound::new(SpecialQp::Gsi, resp, 5));
    let ev = r.collect(&a, Duration::from_millis(5));
    assert_eq!(ev.len(), 1, "{ev:?}");
    assert_eq!(completions(&ev)[&id], (WcStatus::WrFlushErr, 0, 0));
    assert_eq!(r.port.counters().drops.get(DropReason::Canceled), 1);
    // And one more copy later: the send is gone.
    r.fake.inject(Inbound::new(SpecialQp::Gsi, resp, 5));
    assert!(r.collect(&a, Duration::from_millis(5)).is_empty());
    assert_eq!(r.port.counters().drops.get(DropReason::Late), 1);
    a.deregister();
    r.assert_clean();
}

#[test]
fn path7_modify_timeout_of_a_waiting_send() {
    let r = rig();
    let a = r.perf_agent();
    let id = a
        .send(SendRequest::new(get(1), gsi(5)).timeout_ms(60_000))
        .unwrap();
    r.port.progress();
    let t0 = r.fake.time();
    a.modify_timeout(id, 50).unwrap();
    let ev = a.next_event(r.port.deadline_after(Duration::from_secs(1)));
    let took = r.fake.time().saturating_sub(t0);
    let ev: Vec<Event> = ev.into_iter().collect();
    assert_eq!(completions(&ev)[&id], (WcStatus::RespTimeoutErr, 0, 0));
    assert!(
        took >= Duration::from_millis(50) && took < Duration::from_millis(200),
        "{took:?}"
    );
    assert!(matches!(
        a.modify_timeout(id, 10),
        Err(MadError::NotOutstanding(_))
    ));
    a.deregister();
    r.assert_clean();
}

#[test]
fn modify_before_the_cqe_changes_the_timeout_used_at_the_cqe() {
    let r = rig();
    r.fake.set_auto(false);
    let a = r.perf_agent();
    let id = a
        .send(SendRequest::new(get(1), gsi(5)).timeout_ms(60_000))
        .unwrap();
    a.modify_timeout(id, 20).unwrap();
    r.fake.execute(SpecialQp::Gsi, 1);
    r.fake.set_auto(true);
    let ev = r.collect(&a, Duration::from_millis(100));
    assert_eq!(completions(&ev)[&id].0, WcStatus::RespTimeoutErr);
    a.deregister();
    r.assert_clean();
}

/// The events queued for `agent` so far (drives nothing).
fn queued_events(agent: &Agent) -> Vec<Event> {
    let mut ev = Vec::new();
    agent.events().drain_into(&mut ev);
    ev
}

/// Move device time to `t` and run one pass; the completions it queued for `agent`.
fn pass_at(r: &Rig, agent: &Agent, t: Duration) -> HashMap<SendId, (WcStatus, u32, u32)> {
    r.fake.wait(t);
    r.port.progress();
    completions(&queued_events(agent))
}

/// Path 7 racing a pass: a modify that returns Ok while a pass runs takes effect, whatever
/// the pass has already looked at. Here it comes from a notify hook, which the pass runs after
/// it took the list of modified timeouts and before it fires the expired timers; the old
/// deadline has passed. The send must still wait after that pass and time out at its new
/// deadline, not its old one. The kernel's `ib_modify_mad` and `timeout_sends` take the
/// agent's lock, and `timeout_sends` reads each send's deadline under it (`mad.c`).
#[test]
fn modify_during_a_pass_is_not_undone_by_the_old_timer() {
    let r = rig();
    let a = Arc::new(r.perf_agent());
    let id = a
        .send(SendRequest::new(get(2), gsi(5)).timeout_ms(50))
        .unwrap();
    r.port.progress();
    assert_eq!(r.port.census().gsi.count(SendState::WaitResp), 1);
    // Past its deadline, with no pass yet.
    r.fake.wait(r.port.now() + Duration::from_millis(60));
    let modified = Arc::new(std::sync::Mutex::new(None));
    {
        let (a2, m, fake) = (Arc::clone(&a), Arc::clone(&modified), Arc::clone(&r.fake));
        a.events().set_notify(Some(Arc::new(move || {
            let mut g = m.lock().unwrap();
            if g.is_none() {
                *g = Some((fake.time(), a2.modify_timeout(id, 1000)));
            }
        })));
    }
    // Another send's completion is the event that runs the hook.
    let other = a.send(SendRequest::new(get(1), gsi(5))).unwrap();
    r.port.progress();
    a.events().set_notify(None);
    let (at, res) = modified.lock().unwrap().take().expect("the hook ran");
    assert!(res.is_ok(), "{res:?}");
    let c = completions(&queued_events(&a));
    assert_eq!(c[&other].0, WcStatus::Success);
    assert!(
        !c.contains_key(&id),
        "modify returned Ok, yet the send finished on its old timer: {:?}",
        c[&id]
    );
    assert_eq!(r.port.census().gsi.count(SendState::WaitResp), 1);
    let new_deadline = at + Duration::from_secs(1);
    assert!(pass_at(&r, &a, at + Duration::from_millis(999)).is_empty());
    let c = pass_at(&r, &a, new_deadline);
    assert_eq!(c.get(&id), Some(&(WcStatus::RespTimeoutErr, 0, 0)));
    let a = Arc::try_unwrap(a).expect("the hook let go of the agent");
    a.deregister();
    r.assert_clean();
}

/// A modify whose new deadline has also passed when the old timer fires: the send retries
/// then, and its retry waits the send's own timeout (50 ms) from its own completion, not the
/// modified one: the kernel's `ib_modify_mad` changes only the wait in progress
/// (`mad_send_wr->timeout`), and `retry_send` takes `send_buf.timeout_ms` again, which a
/// modify no longer saves ("IB/mad: Do not save the MRA timeout"). Nor must the modify's
/// deadline, computed before the retry, come back to time the retry out early.
#[test]
fn a_modify_applied_before_a_retry_does_not_time_the_retry_out() {
    let r = rig();
    let a = Arc::new(r.perf_agent());
    let id = a
        .send(SendRequest::new(get(2), gsi(5)).timeout_ms(50).retries(1))
        .unwrap();
    r.port.progress();
    let t0 = r.port.now();
    r.fake.wait(t0 + Duration::from_millis(60));
    let modified = Arc::new(std::sync::Mutex::new(None));
    {
        let (a2, m, fake) = (Arc::clone(&a), Arc::clone(&modified), Arc::clone(&r.fake));
        a.events().set_notify(Some(Arc::new(move || {
            let mut g = m.lock().unwrap();
            if g.is_none() {
                // New deadline t0 + 65 ms; the pass then reads the clock at t0 + 70 ms.
                *g = Some(a2.modify_timeout(id, 5));
                fake.wait(t0 + Duration::from_millis(70));
            }
        })));
    }
    let other = a.send(SendRequest::new(get(1), gsi(5))).unwrap();
    r.port.progress();
    a.events().set_notify(None);
    assert!(matches!(*modified.lock().unwrap(), Some(Ok(()))));
    let c = completions(&queued_events(&a));
    assert_eq!(c[&other].0, WcStatus::Success);
    assert!(!c.contains_key(&id), "{:?}", c[&id]);
    // The retry's completion (at t0 + 70 ms): it waits its own 50 ms from there.
    let c = pass_at(&r, &a, t0 + Duration::from_millis(70));
    assert!(
        !c.contains_key(&id),
        "the retry timed out at its completion: {:?}",
        c[&id]
    );
    assert_eq!(r.port.census().gsi.count(SendState::WaitResp), 1);
    assert!(
        pass_at(&r, &a, t0 + Duration::from_millis(75)).is_empty(),
        "the retry waited the modified 5 ms"
    );
    assert!(pass_at(&r, &a, t0 + Duration::from_millis(119)).is_empty());
    let c = pass_at(&r, &a, t0 + Duration::from_millis(120));
    assert_eq!(c.get(&id), Some(&(WcStatus::RespTimeoutErr, 0, 1)));
    let a = Arc::try_unwrap(a).expect("the hook let go of the agent");
    a.deregister();
    r.assert_clean();
}

/// A modify of a send still on the wire (SEND_START) applies to the wait its send completion
/// begins, and only to it: the retry after that wait waits the send's own timeout again (the
/// kernel's `ib_modify_mad` sets `mad_send_wr->timeout` of an active send; `retry_send` sets
/// it again from `send_buf.timeout_ms`).
#[test]
fn a_modify_on_the_wire_applies_to_the_first_wait_only() {
    let r = rig();
    let a = r.perf_agent();
    let id = a
        .send(SendRequest::new(get(1), gsi(5)).timeout_ms(50).retries(1))
        .unwrap();
    assert_eq!(r.port.census().gsi.count(SendState::SendStart), 1);
    a.modify_timeout(id, 5).unwrap();
    r.port.progress();
    let t0 = r.port.now();
    assert_eq!(r.port.census().gsi.count(SendState::WaitResp), 1);
    assert!(pass_at(&r, &a, t0 + Duration::from_millis(4)).is_empty());
    // The modified wait ends: the retry goes out, and its completion begins its wait.
    assert!(pass_at(&r, &a, t0 + Duration::from_millis(5)).is_empty());
    assert!(pass_at(&r, &a, t0 + Duration::from_millis(5)).is_empty());
    assert_eq!(r.port.counters().retries, 1);
    assert_eq!(r.port.census().gsi.count(SendState::WaitResp), 1);
    assert!(
        pass_at(&r, &a, t0 + Duration::from_millis(54)).is_empty(),
        "the retry waited the modified 5 ms"
    );
    let c = pass_at(&r, &a, t0 + Duration::from_millis(55));
    assert_eq!(c.get(&id), Some(&(WcStatus::RespTimeoutErr, 0, 1)));
    a.deregister();
    r.assert_clean();
}

/// A modify accepted between the progress loop's read of the send's timeout and the send's
/// CQE transition (SEND_START -> WAIT_RESP): the wait uses the new timeout (the kernel's
/// completion reads it under the lock `ib_modify_mad` takes). `from`: the send's timeout
/// (0: no response awaited until the modify).
fn modify_at_the_cqe(from: u32) {
    let r = rig();
    let a = Arc::new(r.perf_agent());
    let id = a
        .send(SendRequest::new(get(1), gsi(5)).timeout_ms(from))
        .unwrap();
    let modified = Arc::new(std::sync::Mutex::new(None));
    {
        let (a2, m) = (Arc::clone(&a), Arc::clone(&modified));
        *r.port.shared.after_timeout_read.lock().unwrap() = Some(Box::new(move || {
            let mut g = m.lock().unwrap();
            if g.is_none() {
                *g = Some(a2.modify_timeout(id, 50));
            }
        }));
    }
    let t0 = r.port.now();
    r.port.progress();
    *r.port.shared.after_timeout_read.lock().unwrap() = None;
    assert!(matches!(*modified.lock().unwrap(), Some(Ok(()))));
    let c = completions(&queued_events(&a));
    assert!(
        !c.contains_key(&id),
        "modified to 50 ms at its CQE, it did not wait: {:?}",
        c[&id]
    );
    assert_eq!(r.port.census().gsi.count(SendState::WaitResp), 1);
    assert!(pass_at(&r, &a, t0 + Duration::from_millis(49)).is_empty());
    let c = pass_at(&r, &a, t0 + Duration::from_millis(50));
    assert_eq!(c.get(&id), Some(&(WcStatus::RespTimeoutErr, 0, 0)));
    let a = Arc::try_unwrap(a).expect("the hook let go of the agent");
    a.deregister();
    r.assert_clean();
}

#[test]
fn modify_between_the_timeout_read_and_the_cqe_transition_is_used() {
    modify_at_the_cqe(60_000);
}

#[test]
fn modify_of_a_send_awaiting_no_response_at_its_cqe_makes_it_wait() {
    modify_at_the_cqe(0);
}

#[test]
fn path8_deregistration_with_sends_in_every_state() {
    // 4 slots; an SA agent limited to 64/32 = 2 outstanding solicited sends.
    let r = rig_with(4, 64, PortConfig::default());
    r.fake.set_auto(false);
    r.fake.set_responder(answer);
    r.fake.hold_send_cqes(true);
    let sa = r.agent(AgentSpec::class(SA, 2, MethodMask::NONE));
    let perf = r.perf_agent();
    let mut ids = Vec::new();
    // Two solicited SA sends go out; the next two wait in the agent's backlog.
    for t in 0..4 {
        ids.push(
            sa.send(SendRequest::new(mad(SA, 2, 0x01, 0x11, t), gsi(5)).timeout_ms(1000))
                .unwrap(),
        );
    }
    // Unsolicited SA sends fill the other slots and then the overflow queue.
    for t in 4..8 {
        ids.push(
            sa.send(SendRequest::new(mad(SA, 2, 0x01, 0x11, t), gsi(5)))
                .unwrap(),
        );
    }
    // Another agent's send waits in the overflow queue too; it must survive.
    let other = perf.send(SendRequest::new(get(100), gsi(5))).unwrap();
    let c = r.port.census();
    assert_eq!(c.gsi.count(SendState::SendStart), 4, "{c:?}");
    assert_eq!(c.backlogged, 2, "{c:?}");
    assert_eq!(c.gsi.queued, 3, "{c:?}");
    // One posted send executes with its CQE held: its response makes it EARLY_RESP.
    r.fake.execute(SpecialQp::Gsi, 1);
    r.fake.deliver_due();
    r.port.progress();
    assert_eq!(r.port.census().gsi.count(SendState::EarlyResp), 1);
    let events = sa.events().clone();
    r.fake.set_auto(true);
    r.fake.hold_send_cqes(false);
    r.fake.release_send_cqes();
    sa.deregister();
    let mut ev = Vec::new();
    events.drain_into(&mut ev);
    let c = completions(&ev);
    assert_eq!(
        c.len(),
        ids.len(),
        "each send completed exactly once before deregister returned"
    );
    for id in &ids[..] {
        assert!(c.contains_key(id), "{id} {c:?}");
    }
    // Canceled by the deregistration, the early-answered one included (its response was
    // delivered first), as the kernel's cancel_mads does to everything on its send list.
    assert!(c.values().all(|v| v.0 == WcStatus::WrFlushErr), "{c:?}");
    assert_eq!(recvs(&ev).len(), 1, "the early response was delivered");
    // Nothing more for the deregistered agent, even with traffic for it.
    let mut resp: [u8; MAD_LEN] = mad(SA, 2, 0x81, 0x11, 1).try_into().unwrap();
    resp[8..16].copy_from_slice(&tid_of(&r.fake.sent()[0].mad).to_be_bytes());
    r.fake.inject(Inbound::new(SpecialQp::Gsi, resp, 5));
    let ev = r.collect(&perf, Duration::from_millis(10));
    assert!(events.is_empty(), "no event after deregistration returned");
    assert_eq!(
        completions(&ev)[&other].0,
        WcStatus::Success,
        "the other agent's send went on"
    );
    perf.deregister();
    r.assert_clean();
}

#[test]
fn path9_error_cqe_recovers_the_qp_and_reposts_the_flushed_once() {
    let r = rig();
    r.fake.set_auto(false);
    let a = r.perf_agent();
    let ids: Vec<SendId> = (0..3)
        .map(|t| a.send(SendRequest::new(get(t), gsi(5))).unwrap())
        .collect();
    r.fake.fail_next_send(SpecialQp::Gsi, WcStatus::LocLenErr);
    r.fake.set_auto(true);
    let ev = r.collect(&a, Duration::from_millis(20));
    let c = completions(&ev);
    assert_eq!(
        c[&ids[0]],
        (WcStatus::LocLenErr, 0x51, 0),
        "the failing send keeps its status"
    );
    assert_eq!(
        c[&ids[1]].0,
        WcStatus::Success,
        "flushed, reposted once, completed"
    );
    assert_eq!(c[&ids[2]].0, WcStatus::Success);
    let k = r.port.counters();
    assert_eq!((k.qp_recoveries, k.flush_reposts, k.send_errors), (1, 2, 1));
    assert_eq!(
        r.fake.sent().len(),
        2,
        "the flushed two reached the wire once, after recovery"
    );
    a.deregister();
    r.assert_clean();
}

#[test]
fn path9_a_send_the_device_refuses_before_the_error_is_handled_is_flushed_and_reposted() {
    let r = rig();
    r.fake.set_auto(false);
    r.fake.refuse_posts_in_sqe(true);
    let a = r.perf_agent();
    let first = a.send(SendRequest::new(get(0), gsi(5))).unwrap();
    r.fake.fail_next_send(SpecialQp::Gsi, WcStatus::LocLenErr);
    // The first send fails on the wire: the send queue is in SQE, its error CQE not polled.
    r.fake.execute(SpecialQp::Gsi, 1);
    r.fake.set_auto(true);
    // Posted in that window (another thread's send racing the progress loop): refused.
    let second = a.send(SendRequest::new(get(1), gsi(5))).unwrap();
    assert_eq!(r.fake.posted_sends(SpecialQp::Gsi), 0);
    let ev = r.collect(&a, Duration::from_millis(20));
    let c = completions(&ev);
    assert_eq!(c[&first], (WcStatus::LocLenErr, 0x51, 0));
    assert_eq!(
        c[&second].0,
        WcStatus::Success,
        "flushed like a work request the hardware took in SQE, reposted after recovery"
    );
    let k = r.port.counters();
    assert_eq!((k.qp_recoveries, k.flush_reposts), (1, 1));
    assert_eq!(r.fake.sent().len(), 1, "the second reached the wire once");
    a.deregister();
    r.assert_clean();
}

#[test]
fn path9_after_a_failed_recovery_a_refused_post_brings_another_attempt_and_the_queue_runs_again() {
    let r = rig();
    r.fake.set_auto(false);
    r.fake.refuse_posts_in_sqe(true);
    r.fake.fail_recoveries(2);
    let a = r.perf_agent();
    let first = a.send(SendRequest::new(get(0), gsi(5))).unwrap();
    r.fake.fail_next_send(SpecialQp::Gsi, WcStatus::LocLenErr);
    r.fake.set_auto(true);
    let ev = r.collect(&a, Duration::from_millis(20));
    assert_eq!(completions(&ev)[&first], (WcStatus::LocLenErr, 0x51, 0));
    let k = r.port.counters();
    assert_eq!(
        (k.send_errors, k.recovery_failures, k.qp_recoveries),
        (1, 1, 0)
    );
    // Time passes with nothing sent: a port nobody sends on pays no attempt.
    let _ = r.collect(&a, RECOVERY_RETRY * 3);
    assert_eq!(
        r.fake.recoveries_asked(),
        1,
        "no attempt without a refused post"
    );
    // A send refused by the stuck queue completes with a software flush and asks for an
    // attempt, made at once (the last failure is older than RECOVERY_RETRY). It fails too.
    let asking = a.send(SendRequest::new(get(1), gsi(5))).unwrap();
    let ev = r.collect(&a, Duration::from_millis(20));
    assert_eq!(completions(&ev)[&asking], (WcStatus::WrFlushErr, 0, 0));
    assert_eq!(
        r.fake.recoveries_asked(),
        2,
        "the refused post brought one attempt"
    );
    assert_eq!(r.port.counters().recovery_failures, 2);
    // Refused again sooner than RECOVERY_RETRY after that failure: the attempt waits.
    let early = a.send(SendRequest::new(get(2), gsi(5))).unwrap();
    let ev = r.collect(&a, Duration::from_millis(20));
    assert_eq!(completions(&ev)[&early], (WcStatus::WrFlushErr, 0, 0));
    assert_eq!(
        r.fake.recoveries_asked(),
        2,
        "no attempt before RECOVERY_RETRY"
    );
    let _ = r.collect(&a, RECOVERY_RETRY * 2);
    assert_eq!(
        r.fake.recoveries_asked(),
        3,
        "the waiting request was served once"
    );
    assert_eq!(r.port.counters().qp_recoveries, 1);
    let after = a.send(SendRequest::new(get(3), gsi(5))).unwrap();
    let ev = r.collect(&a, Duration::from_millis(20));
    assert_eq!(completions(&ev)[&after].0, WcStatus::Success);
    assert_eq!(
        r.fake.sent().len(),
        1,
        "only the send after the recovery reached the wire"
    );
    assert_eq!(
        r.fake.recoveries_asked(),
        3,
        "a running queue asks for nothing"
    );
    a.deregister();
    r.assert_clean();
}

#[test]
fn path10_a_flush_not_marked_for_retry_is_reported() {
    let r = rig();
    r.fake.set_auto(false);
    let a = r.perf_agent();
    let id = a
        .send(SendRequest::new(get(1), gsi(5)).timeout_ms(100))
        .unwrap();
    r.fake.flush_sends(SpecialQp::Gsi);
    let ev = r.collect(&a, Duration::from_millis(5));
    assert_eq!(completions(&ev)[&id], (WcStatus::WrFlushErr, 0x249, 0));
    assert_eq!(
        r.port.counters().qp_recoveries,
        0,
        "a flush is not a reason to recover"
    );
    a.deregister();
    r.assert_clean();
}

fn fatal_case(removed: bool) {
    let r = rig_with(4, 64, PortConfig::default());
    r.fake.set_auto(false);
    let a = r.perf_agent();
    let b = r.agent(AgentSpec::class(SA, 2, MethodMask::NONE));
    let mut ids = Vec::new();
    for t in 0..6 {
        ids.push(
            a.send(SendRequest::new(get(t), gsi(5)).timeout_ms(1000))
                .unwrap(),
        );
    }
    // Two of them reach WAIT_RESP; the rest are on the QP or queued.
    r.fake.execute(SpecialQp::Gsi, 2);
    r.port.progress();
    let sb = b
        .send(SendRequest::new(mad(SA, 2, 1, 0x11, 9), gsi(5)).timeout_ms(1000))
        .unwrap();
    r.fake.make_fatal(removed);
    let ev = r.collect(&a, Duration::from_millis(10));
    let c = completions(&ev);
    assert_eq!(c.len(), ids.len());
    for id in &ids {
        assert_eq!(c[id], (WcStatus::WrFlushErr, 5, 0), "{id}");
    }
    assert!(ev.iter().any(|e| matches!(e, Event::DeviceFatal { .. })));
    let evb = r.collect(&b, Duration::from_millis(10));
    assert_eq!(completions(&evb)[&sb], (WcStatus::WrFlushErr, 5, 0));
    assert_eq!(
        evb.iter()
            .filter(|e| matches!(e, Event::DeviceFatal { .. }))
            .count(),
        1,
        "every agent is told once"
    );
    assert!(matches!(
        a.send(SendRequest::new(get(1), gsi(5))),
        Err(MadError::DeviceFatal { .. })
    ));
    assert!(matches!(
        r.port.register(AgentSpec::send_only(SpecialQp::Gsi)),
        Err(MadError::DeviceFatal { .. })
    ));
    a.deregister();
    b.deregister();
    assert_eq!(r.fake.posted_recvs(SpecialQp::Gsi), 0);
    let acc = r.fake.accounting();
    assert!(
        acc.leases_out < r.base.leases_out,
        "receive buffers released after the flush: {acc:?}"
    );
    assert_eq!(r.fake.faults(), 0);
}

#[test]
fn path11_fatal_completes_everything_with_flush_vendor_5() {
    fatal_case(false);
}

#[test]
fn path12_removal_likewise_and_deregistration_is_prompt() {
    fatal_case(true);
}

#[test]
fn path13_sends_beyond_the_slots_wait_in_order_none_refused() {
    let r = rig_with(4, 64, PortConfig::default());
    let a = r.perf_agent();
    let ids: Vec<SendId> = (0..40)
        .map(|t| a.send(SendRequest::new(get(t), gsi(5))).unwrap())
        .collect();
    assert!(r.port.census().gsi.queued > 0);
    let ev = r.collect(&a, Duration::from_millis(50));
    let c = completions(&ev);
    assert_eq!(c.len(), 40);
    assert!(ids.iter().all(|i| c[i].0 == WcStatus::Success));
    let order: Vec<u64> = r
        .fake
        .sent()
        .iter()
        .map(|s| tid_of(&s.mad) & 0xFFFF_FFFF)
        .collect();
    assert_eq!(order, (0..40).collect::<Vec<_>>(), "in order on the wire");
    assert!(r.port.counters().overflowed > 0);
    a.deregister();
    r.assert_clean();
}

#[test]
fn path13_solicited_limit_holds_sa_sends_back() {
    let r = rig_with(16, 64, PortConfig::default());
    // Answers come 50 ms later: the SA agent may have 64/32 = 2 outstanding.
    r.fake.set_responder(|o| {
        let mut v = answer(o);
        for p in &mut v {
            p.delay = Duration::from_millis(50);
        }
        v
    });
    let sa = r.agent(AgentSpec::class(SA, 2, MethodMask::NONE));
    let ids: Vec<SendId> = (0..6)
        .map(|t| {
            sa.send(SendRequest::new(mad(SA, 2, 1, 0x11, t), gsi(5)).timeout_ms(1000))
                .unwrap()
        })
        .collect();
    let c = r.port.census();
    assert_eq!(c.gsi.active(), 2, "{c:?}");
    assert_eq!(c.backlogged, 4);
    let ev = r.collect(&sa, Duration::from_millis(400));
    let done = completions(&ev);
    assert!(
        ids.iter().all(|i| done[i].0 == WcStatus::Success),
        "{done:?}"
    );
    assert_eq!(r.port.counters().backlogged, 4);
    // The backlog went on in order (released at the end of the passes that finished the sends
    // ahead of it, several under one queue lock).
    let order: Vec<u64> = r
        .fake
        .sent()
        .iter()
        .map(|o| tid_of(&o.mad) & 0xFFFF_FFFF)
        .collect();
    assert_eq!(order, (0..6).collect::<Vec<u64>>());
    sa.deregister();
    r.assert_clean();
}

/// An SA agent (limit 64/32 = 2) with A1 (timeout 10 ms, 1 retry), A2 (40 ms, 1 retry) and B
/// (no timeout worth the name) sent, no peer answering, driven past A1's timeout: B went out
/// of the backlog when A1 timed out, and A1's retry waits in the backlog (QUEUED) behind the
/// limit. Returns the rig, the agent, and A1, A2, B.
fn queued_retry() -> (Rig, Agent, [SendId; 3]) {
    let r = rig_with(16, 64, PortConfig::default());
    let sa = r.agent(AgentSpec::class(SA, 2, MethodMask::NONE));
    let send = |t: u64, to: u32, n: u32| {
        sa.send(
            SendRequest::new(mad(SA, 2, 0x01, 0x11, t), gsi(5))
                .timeout_ms(to)
                .retries(n),
        )
        .unwrap()
    };
    let ids = [send(1, 10, 1), send(2, 40, 1), send(3, 100_000, 0)];
    assert_eq!(r.port.census().backlogged, 1, "B");
    let d = r.port.deadline_after(Duration::from_millis(20));
    while r.port.now() < d {
        r.port.progress_until(d);
    }
    assert_eq!(r.port.counters().backlogged, 2, "B, then A1's retry");
    assert_eq!(r.port.census().backlogged, 1, "A1's retry");
    assert_eq!(r.fake.sent().len(), 3, "A1, A2, B");
    (r, sa, ids)
}

/// A canceled QUEUED retry leaves the backlog at once, as the kernel's cancel takes it off
/// `backlog_list`: it no longer counts as backlogged, and a later retry does not queue behind
/// it (the kernel's `retry_send` queues only behind a non-empty backlog).
#[test]
fn a_canceled_queued_retry_leaves_the_backlog_at_once() {
    let (r, sa, [a1, a2, _b]) = queued_retry();
    sa.cancel(a1).unwrap();
    assert_eq!(r.port.census().backlogged, 0, "A1's retry left the backlog");
    r.port.progress();
    let d = r.port.deadline_after(Duration::from_millis(40));
    while r.port.now() < d {
        r.port.progress_until(d);
    }
    assert_eq!(
        r.port.counters().backlogged,
        2,
        "A2's retry went out at once, not into the backlog"
    );
    let ev = r.collect(&sa, Duration::from_millis(60));
    let c = completions(&ev);
    assert_eq!(c[&a1].0, WcStatus::WrFlushErr);
    assert_eq!(c[&a2], (WcStatus::RespTimeoutErr, 0, 1));
    sa.deregister();
    r.assert_clean();
}

/// A QUEUED retry whose response arrives leaves the backlog with its completion, as the
/// kernel's `ib_mark_mad_done` takes a QUEUED send to DONE (off `backlog_list`).
#[test]
fn an_answered_queued_retry_leaves_the_backlog() {
    let (r, sa, [a1, ..]) = queued_retry();
    let mut m = r.fake.sent()[0].mad;
    m[3] = 0x81;
    r.fake.inject(Inbound::new(SpecialQp::Gsi, m, 5));
    let ev = r.collect(&sa, Duration::from_millis(2));
    assert_eq!(recvs(&ev).len(), 1);
    assert_eq!(completions(&ev)[&a1], (WcStatus::Success, 0, 1));
    assert_eq!(r.port.census().backlogged, 0, "A1's retry left the backlog");
    sa.deregister();
    r.assert_clean();
}

/// A retry let out of the backlog whose post the device refuses completes with
/// LOC_QP_OP_ERR, as the kernel's `process_backlog_mads` completes a backlog entry whose
/// `ib_send_mad` fails.
#[test]
fn a_retry_from_the_backlog_whose_post_is_refused_completes_with_loc_qp_op_err() {
    let (r, sa, [a1, _a2, b]) = queued_retry();
    r.fake.refuse_next_posts(SpecialQp::Gsi, 1);
    // B's end makes room: A1's retry leaves the backlog, and its post is refused.
    sa.cancel(b).unwrap();
    let ev = r.collect(&sa, Duration::from_millis(5));
    let c = completions(&ev);
    assert_eq!(c[&b].0, WcStatus::WrFlushErr);
    assert_eq!(c[&a1], (WcStatus::LocQpOpErr, 0, 1));
    assert_eq!(r.port.counters().post_failures, 1);
    assert_eq!(r.fake.sent().len(), 3, "A1's retry never reached the wire");
    assert_eq!(r.port.census().backlogged, 0);
    sa.deregister();
    assert_eq!(r.fake.accounting().leases_out, r.base.leases_out);
}

/// On a dead device the flush completes a QUEUED retry and takes it out of the backlog.
#[test]
fn a_dead_device_flushes_queued_retries_out_of_the_backlog() {
    let (r, sa, [a1, ..]) = queued_retry();
    r.fake.make_fatal(false);
    let ev = r.collect(&sa, Duration::from_millis(5));
    assert_eq!(completions(&ev)[&a1], (WcStatus::WrFlushErr, 5, 1));
    assert_eq!(r.port.census().backlogged, 0, "A1's retry left the backlog");
    sa.deregister();
}

/// A BM MAD with AttributeModifier bit 0 set is a response (`ib_response_mad`): routed by
/// its TID. When no send of the stack holds the TID's upper half (the kernel: no agent holds
/// the `hi_tid`), `ib_mad_recv_done` still calls `generate_unmatched_resp`, which answers a
/// Get or Set with GetResp 0x000C; anything else is dropped, and so is one whose upper half
/// a send holds (the kernel: the agent is found, its send is not).
#[test]
fn an_unclaimed_bm_response_get_or_set_is_answered_with_0x000c() {
    const BM: u8 = 0x05;
    let r = rig();
    let a = r.perf_agent();
    let id = a
        .send(SendRequest::new(mad(BM, 1, 0x01, 0x10, 1), gsi(5)).timeout_ms(1000))
        .unwrap();
    r.port.progress();
    let sent = r.fake.sent()[0].mad;
    let bm = |method: u8, f: &dyn Fn(&mut [u8; MAD_LEN])| {
        let mut m = sent;
        m[3] = method;
        m[23] |= 1;
        f(&mut m);
        m
    };
    let foreign = |m: &mut [u8; MAD_LEN]| m[8..16].copy_from_slice(&77u64.to_be_bytes());
    let other_slot = |m: &mut [u8; MAD_LEN]| m[10] ^= 0x0F;
    let other_low_half = |m: &mut [u8; MAD_LEN]| m[15] ^= 1;
    for m in [
        bm(0x01, &foreign),
        bm(0x02, &other_slot),
        bm(0x03, &foreign),
        bm(0x01, &other_low_half),
    ] {
        r.fake.inject(Inbound::new(SpecialQp::Gsi, m, 9));
    }
    let ev = r.collect(&a, Duration::from_millis(5));
    assert!(ev.is_empty(), "{ev:?}");
    let answers: Vec<_> = r.fake.sent()[1..]
        .iter()
        .map(|o| {
            let m = &o.mad;
            (
                m[1],
                m[3],
                u16::from_be_bytes([m[4], m[5]]),
                tid_of(m),
                m[23] & 1,
                o.dest.dlid,
            )
        })
        .collect();
    assert_eq!(
        answers,
        vec![
            (BM, 0x81, 0x000C, 77, 1, 9),
            (BM, 0x81, 0x000C, tid_of(&bm(0x02, &other_slot)), 1, 9),
        ],
        "the Get and the Set whose TID no send holds"
    );
    let k = r.port.counters();
    assert_eq!(k.unmatched_replies, 2);
    assert_eq!(
        k.drops.get(DropReason::UnknownTid),
        2,
        "the Send, the held half"
    );
    // The response to the send still matches.
    r.fake
        .inject(Inbound::new(SpecialQp::Gsi, bm(0x01, &|_| {}), 5));
    let ev = r.collect(&a, Duration::from_millis(5));
    assert_eq!(recvs(&ev).len(), 1);
    assert_eq!(completions(&ev)[&id].0, WcStatus::Success);
    a.deregister();
    r.assert_clean();
}

#[test]
fn path14_responses_that_match_nothing_are_dropped_and_counted() {
    let r = rig();
    let a = r.perf_agent();
    let id = a
        .send(SendRequest::new(get(1), gsi(5)).timeout_ms(1000))
        .unwrap();
    r.port.progress();
    let sent = r.fake.sent()[0].mad;
    let resp = |f: &dyn Fn(&mut [u8; MAD_LEN])| {
        let mut m = sent;
        m[3] = 0x81;
        f(&mut m);
        m
    };
    // Unknown TIDs: top byte set, another slot, another low half.
    for m in [
        resp(&|m| m[8] = 1),
        resp(&|m| m[10] ^= 0x0F),
        resp(&|m| m[15] ^= 1),
    ] {
        r.fake.inject(Inbound::new(SpecialQp::Gsi, m, 5));
    }
    // Another class with the same TID.
    r.fake
        .inject(Inbound::new(SpecialQp::Gsi, resp(&|m| m[1] = 0x06), 5));
    // Another address: a GRH where the request had none.
    let mut g = Inbound::new(SpecialQp::Gsi, resp(&|_| {}), 5);
    g.grh = Some([0u8; GRH_LEN as usize]);
    r.fake.inject(g);
    let ev = r.collect(&a, Duration::from_millis(5));
    assert!(ev.is_empty(), "{ev:?}");
    let d = r.port.counters().drops;
    assert_eq!(d.get(DropReason::UnknownTid), 3, "{d:?}");
    assert_eq!(d.get(DropReason::WrongClass), 1);
    assert_eq!(d.get(DropReason::WrongAddress), 1);
    assert_eq!(
        a.counters().drops.get(DropReason::WrongAddress),
        1,
        "counted per agent too"
    );
    // The right one still matches.
    r.fake
        .inject(Inbound::new(SpecialQp::Gsi, resp(&|_| {}), 5));
    let ev = r.collect(&a, Duration::from_millis(5));
    assert_eq!(completions(&ev)[&id].0, WcStatus::Success);
    a.deregister();
    r.assert_clean();
}

#[test]
fn a_response_to_a_send_without_timeout_is_not_expected() {
    let r = rig();
    r.fake.set_responder(answer);
    r.fake.hold_send_cqes(true);
    let a = r.perf_agent();
    let id = a.send(SendRequest::new(get(1), gsi(5))).unwrap();
    let ev = r.collect(&a, Duration::from_millis(5));
    assert!(ev.is_empty());
    assert_eq!(r.port.counters().drops.get(DropReason::NotExpected), 1);
    r.fake.release_send_cqes();
    let ev = r.collect(&a, Duration::from_millis(5));
    assert_eq!(completions(&ev)[&id].0, WcStatus::Success);
    a.deregister();
    r.assert_clean();
}

/// K-2025 (rdma 8ab05a5456bb, "IB/cm: Use separate agent w/o flow control for REP") lets an
/// agent without a receive side send with a timeout and retries (`ib_post_send_mad` no longer
/// refuses it) and gives it no flow control (`sol_fc_max` 0 without a `recv_handler`). Its
/// responses have nowhere to go: `find_mad_agent` drops a MAD for an agent without a
/// `recv_handler`, so each send ends at its last timeout.
#[test]
fn a_send_only_agent_sends_with_timeouts_without_flow_control_and_its_responses_are_dropped() {
    let r = rig();
    r.fake.set_responder(answer);
    let a = r.agent(AgentSpec::send_only(SpecialQp::Gsi));
    // More solicited SA sends than R/4 (16) or R/32 (2) would let out at once.
    let ids: Vec<SendId> = (0..20)
        .map(|t| {
            a.send(
                SendRequest::new(mad(SA, 2, 0x01, 0x11, t), gsi(5))
                    .timeout_ms(10)
                    .retries(1),
            )
            .expect("a timeout on a send-only agent is accepted")
        })
        .collect();
    assert_eq!(r.port.census().backlogged, 0, "no flow control");
    let ev = r.collect(&a, Duration::from_millis(100));
    assert!(recvs(&ev).is_empty(), "no response is delivered");
    let c = completions(&ev);
    for id in &ids {
        assert_eq!(c[id], (WcStatus::RespTimeoutErr, 0, 1), "{id}");
    }
    let k = r.port.counters();
    assert_eq!(k.backlogged, 0);
    assert_eq!(r.fake.sent().len(), 40, "two attempts each");
    assert_eq!(
        k.drops.get(DropReason::NotExpected),
        40,
        "every answer dropped"
    );
    assert_eq!(a.counters().drops.get(DropReason::NotExpected), 40);
    a.deregister();
    r.assert_clean();
}

#[test]
fn unsolicited_requests_go_to_the_registered_agent() {
    let r = rig();
    let a = r.agent(AgentSpec::class(PERF, 1, MethodMask::of(&[0x01])));
    r.fake
        .inject(Inbound::new(SpecialQp::Gsi, get(5).try_into().unwrap(), 9));
    let ev = r.collect(&a, Duration::from_millis(5));
    let rx = recvs(&ev);
    assert_eq!(rx.len(), 1);
    assert_eq!((rx[0].addr.slid, rx[0].response_to), (9, None));
    // Answer it: back to where it came from.
    let mut resp = rx[0].mad;
    resp[3] = 0x81;
    let id = a
        .send(SendRequest::new(resp.to_vec(), rx[0].addr.reply_dest()))
        .unwrap();
    let ev = r.collect(&a, Duration::from_millis(5));
    assert_eq!(completions(&ev)[&id].0, WcStatus::Success);
    assert_eq!(r.fake.sent()[0].dest.dlid, 9);
    a.deregister();
    r.assert_clean();
}

#[test]
fn an_unclaimed_get_is_answered_with_0x000c() {
    let r = rig();
    r.fake.inject(Inbound::new(
        SpecialQp::Gsi,
        mad(0x06, 1, 0x01, 0x10, 77).try_into().unwrap(),
        9,
    ));
    // A Send (not Get/Set) nobody claims is only dropped.
    r.fake.inject(Inbound::new(
        SpecialQp::Gsi,
        mad(0x06, 1, 0x03, 0x10, 78).try_into().unwrap(),
        9,
    ));
    for _ in 0..3 {
        r.port.progress();
    }
    let sent = r.fake.sent();
    assert_eq!(sent.len(), 1);
    let m = &sent[0].mad;
    assert_eq!(
        (m[3], u16::from_be_bytes([m[4], m[5]]), tid_of(m)),
        (0x81, 0x000C, 77)
    );
    assert_eq!((sent[0].dest.dlid, sent[0].dest.remote_qpn), (9, 1));
    let k = r.port.counters();
    assert_eq!(
        (k.unmatched_replies, k.drops.get(DropReason::NoAgent)),
        (1, 1)
    );
    r.assert_clean();
}

#[test]
fn smps_to_our_port_are_answered_by_the_local_agent_except_sminfo() {
    let r = rig();
    r.fake.set_process_mad(|m| {
        let mut a = *m;
        a[3] = 0x81;
        a[64] = 0xAA;
        Ok(a)
    });
    let sm = r.agent(AgentSpec::class(0x81, 1, MethodMask::of(&[0x01])));
    // Directed-route SMPs at the end of a one-hop path (HopPointer 1 = HopCount, permissive
    // DrSLID/DrDLID), as a neighbour's SMI sends them.
    let dr = |attr, tid| {
        let mut m = mad(0x81, 1, 0x01, attr, tid);
        m[6] = 1;
        m[7] = 1;
        m[32..36].fill(0xFF);
        m.try_into().unwrap()
    };
    r.fake
        .inject(Inbound::new(SpecialQp::Smi, dr(0x11, 1), 0xFFFF));
    r.fake
        .inject(Inbound::new(SpecialQp::Smi, dr(0x20, 2), 0xFFFF));
    let ev = r.collect(&sm, Duration::from_millis(5));
    let rx = recvs(&ev);
    assert_eq!(rx.len(), 1, "only SMInfo reaches the SM agent");
    assert_eq!(rx[0].header().attr_id(), 0x20);
    let sent = r.fake.sent();
    assert_eq!(sent.len(), 1);
    assert_eq!(
        (sent[0].qp, sent[0].mad[64], sent[0].mad[4] & 0x80),
        (SpecialQp::Smi, 0xAA, 0x80)
    );
    assert_eq!(r.port.counters().local_replies, 1);
    sm.deregister();
    r.assert_clean();
}

/// mlx5's `process_mad` takes Get and Set of PerfMgt, the Mellanox vendor classes (0x09,
/// 0x0A) and Congestion Control (0x21) before any client agent: a registered agent sees them
/// only when `process_mad` fails, and the other methods of those classes always.
#[test]
fn vendor_and_cc_gets_and_sets_go_to_the_device_before_any_agent() {
    let r = rig();
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = Arc::clone(&seen);
    r.fake.set_process_mad(move |m| {
        log.lock().unwrap().push((m[1], m[3]));
        let mut a = *m;
        a[3] = 0x81;
        a[4..6].copy_from_slice(&0x000Cu16.to_be_bytes());
        Ok(a)
    });
    let vs = r.agent(AgentSpec::class(
        0x0A,
        1,
        MethodMask::of(&[0x01, 0x02, 0x03]),
    ));
    let cc = r.agent(AgentSpec::class(0x21, 1, MethodMask::of(&[0x01, 0x02])));
    for (class, method, tid) in [(0x0A, 0x01, 1), (0x21, 0x02, 2), (0x0A, 0x03, 3)] {
        r.fake.inject(Inbound::new(
            SpecialQp::Gsi,
            mad(class, 1, method, 0x10, tid).try_into().unwrap(),
            9,
        ));
    }
    let ev = r.collect(&vs, Duration::from_millis(5));
    let rx = recvs(&ev);
    assert_eq!(rx.len(), 1, "only the Send reaches the vendor agent");
    assert_eq!((rx[0].header().method(), tid_of(&rx[0].mad)), (0x03, 3));
    assert!(r.collect(&cc, Duration::from_millis(5)).is_empty());
    assert_eq!(*seen.lock().unwrap(), vec![(0x0A, 0x01), (0x21, 0x02)]);
    let sent = r.fake.sent();
    assert_eq!(
        sent.iter()
            .map(|o| (o.mad[1], o.mad[3], tid_of(&o.mad), o.dest.dlid))
            .collect::<Vec<_>>(),
        vec![(0x0A, 0x81, 1, 9), (0x21, 0x81, 2, 9)],
        "the device's answers went back to the requester"
    );
    assert_eq!(r.port.counters().local_replies, 2);
    vs.deregister();
    cc.deregister();
    r.assert_clean();
}

/// A response timeout runs from when its send's completion is handled: a firmware command
/// (`process_mad`, for a MAD the device answers) handled earlier in the same poll batch
/// does not make the timeouts armed after it expire early (the batch's clock reading is
/// taken again after the command).
#[test]
fn a_slow_process_mad_earlier_in_the_batch_does_not_shorten_later_timeouts() {
    let r = rig();
    r.fake.set_auto(false);
    r.fake.set_process_mad(|m| {
        let mut a = *m;
        a[3] = 0x81;
        Ok(a)
    });
    r.fake.set_process_mad_time(Duration::from_millis(50));
    let a = r.perf_agent();
    let send = |t| {
        a.send(SendRequest::new(get(t), gsi(5)).timeout_ms(10))
            .unwrap()
    };
    let (first, second) = (send(1), send(2));
    // One batch: the first send's CQE, a PerfMgt Get for the device, the second send's CQE.
    r.fake.execute(SpecialQp::Gsi, 1);
    r.fake.inject(Inbound::new(
        SpecialQp::Gsi,
        mad(PERF, 1, 0x01, 0x12, 7).try_into().unwrap(),
        9,
    ));
    r.fake.deliver_due();
    r.fake.execute(SpecialQp::Gsi, 1);
    let t0 = r.port.now();
    r.port.progress();
    assert_eq!(
        r.port.now(),
        t0 + Duration::from_millis(50),
        "the command's time"
    );
    let ev = r.collect(&a, Duration::from_millis(5));
    let c = completions(&ev);
    assert_eq!(
        c[&first].0,
        WcStatus::RespTimeoutErr,
        "armed before the command"
    );
    assert!(!c.contains_key(&second), "timed out early: {c:?}");
    let ev = r.collect(&a, Duration::from_millis(20));
    assert_eq!(completions(&ev)[&second].0, WcStatus::RespTimeoutErr);
    assert!(r.port.now() >= t0 + Duration::from_millis(60));
    r.fake.set_auto(true);
    r.port.progress();
    a.deregister();
    r.assert_clean();
}

#[test]
fn received_mads_are_validated() {
    let r = rig();
    let a = r.agent(AgentSpec::class(PERF, 1, MethodMask::of(&[0x01])));
    let mut bad_version: [u8; MAD_LEN] = get(1).try_into().unwrap();
    bad_version[0] = 2;
    r.fake.inject(Inbound::new(SpecialQp::Gsi, bad_version, 1));
    r.fake
        .inject(Inbound::new(SpecialQp::Smi, get(2).try_into().unwrap(), 1));
    r.fake.inject(Inbound::new(
        SpecialQp::Gsi,
        mad(0x07, 2, 0x01, 0x10, 3).try_into().unwrap(),
        1,
    ));
    let mut short = Inbound::new(SpecialQp::Gsi, get(4).try_into().unwrap(), 1);
    short.len = 10;
    r.fake.inject(short);
    let ev = r.collect(&a, Duration::from_millis(5));
    assert!(ev.is_empty(), "{ev:?}");
    let d = r.port.counters().drops;
    assert_eq!(
        [
            DropReason::BadBaseVersion,
            DropReason::WrongQp,
            DropReason::CmMethod,
            DropReason::BadLength
        ]
        .map(|x| d.get(x)),
        [1, 1, 1, 1]
    );
    assert_eq!(
        r.port.census().gsi.recv_posted,
        64,
        "every buffer went back to the device"
    );
    a.deregister();
    r.assert_clean();
}

#[test]
/// Any receive error means the QP has entered the error state (`ib_mad_recv_done`; the mlx5
/// driver moves the QP to ERR on every receive error CQE): the buffer is kept, not reposted,
/// and so is that of every later receive of the QP. The other QP goes on.
fn a_receive_error_marks_the_qp_in_error_and_keeps_the_buffer() {
    let r = rig();
    r.fake.fail_next_recv(SpecialQp::Gsi, WcStatus::LocLenErr);
    r.port.progress();
    let k = r.port.counters();
    assert_eq!((k.recv_errors, k.recv_repost_failures), (1, 1));
    let c = r.port.census();
    assert_eq!((c.gsi.recv_posted, c.gsi.recv_idle), (63, 1), "kept");
    assert_eq!(r.fake.posted_recvs(SpecialQp::Gsi), 63);
    // A MAD the device still delivers on that QP is handled; its buffer is kept too.
    r.fake.inject(Inbound::new(
        SpecialQp::Gsi,
        mad(0x06, 1, 0x01, 0x10, 1).try_into().unwrap(),
        9,
    ));
    r.port.progress();
    r.port.progress();
    let k = r.port.counters();
    assert_eq!((k.unmatched_replies, k.recv_repost_failures), (1, 2));
    assert_eq!(r.fake.posted_recvs(SpecialQp::Gsi), 62);
    assert_eq!(r.port.census().gsi.recv_idle, 2);
    // QP0 is not in error: its buffers go back.
    r.fake.inject(Inbound::new(
        SpecialQp::Smi,
        mad(0x01, 1, 0x81, 0x11, 2).try_into().unwrap(),
        9,
    ));
    r.port.progress();
    assert_eq!(r.fake.posted_recvs(SpecialQp::Smi), 64);
    assert_eq!(
        r.fake.accounting().leases_out,
        r.base.leases_out,
        "no buffer lost"
    );
    r.assert_clean();
}

#[test]
fn completions_naming_nothing_are_rejected() {
    let r = rig();
    for wr_id in [
        0u64,
        0x0100_0000_0000_0003,
        0x0200_0000_0000_0003,
        0x0101_0000_0000_0FFF,
    ] {
        r.fake.bogus_completion(WorkCompletion::status_only(
            wr_id,
            SpecialQp::Gsi,
            WcOpcode::Send,
            WcStatus::Success,
            0,
        ));
    }
    r.port.progress();
    assert_eq!(r.port.counters().bad_completions, 4);
    assert_eq!(r.fake.accounting().leases_out, r.base.leases_out);
    assert_eq!(
        r.port.census().gsi.recv_posted,
        64,
        "no buffer taken for them"
    );
}

#[test]
fn sends_are_checked_before_acceptance() {
    let r = rig();
    let a = r.agent(AgentSpec::send_only(SpecialQp::Gsi));
    assert!(matches!(
        a.send(SendRequest::new(vec![1; 10], gsi(1))),
        Err(MadError::MadTooShort { len: 10 })
    ));
    assert!(matches!(
        a.send(SendRequest::new(vec![1; 300], gsi(1))),
        Err(MadError::MadTooLarge { .. })
    ));
    assert!(matches!(
        a.send(SendRequest::new(mad(0x81, 1, 1, 0x11, 1), smi(1))),
        Err(MadError::ClassNotOnQp { class: 0x81, .. })
    ));
    let rm = r.agent(AgentSpec::class(SA, 2, MethodMask::NONE).with_rmpp(1));
    let mut active = mad(SA, 2, 0x12, 0x11, 1);
    active[26] = 0x01;
    active.truncate(40);
    assert!(matches!(
        rm.send(SendRequest::new(active, gsi(1))),
        Err(MadError::RmppTooShort { len: 40, need: 56 })
    ));
    assert_eq!(r.port.counters().sends, 0, "nothing accepted");
    a.deregister();
    rm.deregister();
    r.assert_clean();
}

#[test]
fn registrations_conflict_and_free_on_deregistration() {
    let r = rig();
    let a = r.agent(AgentSpec::class(PERF, 1, MethodMask::of(&[0x01, 0x02])));
    let e = r
        .port
        .register(AgentSpec::class(PERF, 1, MethodMask::of(&[0x02])))
        .unwrap_err();
    assert!(
        matches!(e, MadError::RegistrationConflict { method: 0x02, .. }),
        "{e}"
    );
    assert!(matches!(
        r.port
            .register(AgentSpec::class(0x30, 1, MethodMask::of(&[1]))),
        Err(MadError::InvalidRegistration { .. })
    ));
    a.deregister();
    let b = r.agent(AgentSpec::class(PERF, 1, MethodMask::of(&[0x02])));
    b.deregister();
    r.assert_clean();
}

/// A registration mask naming a response method (0x81) is refused, not registered as the
/// request method (0x01): a Get then finds no agent.
#[test]
fn a_registration_naming_a_response_method_is_refused() {
    let r = rig();
    let reg = r
        .port
        .register(AgentSpec::class(PERF, 1, MethodMask::of(&[0x81])));
    assert!(reg.is_err(), "registered");
    assert_eq!(r.port.census().agents, 0);
    // Get (0x01) is still free.
    let a = r.agent(AgentSpec::class(PERF, 1, MethodMask::of(&[0x01])));
    a.deregister();
    r.assert_clean();
}

/// Agent IDs are handed out cyclically skipping the IDs of live agents and the internal
/// agent's 0, as the kernel's `xa_alloc_cyclic` skips IDs in use: after the counter wraps, a
/// new agent never shares an ID with a live one (whose deregistration would then cancel the
/// new agent's sends and take it out of the agent table).
#[test]
fn agent_ids_skip_live_agents_and_zero_when_the_counter_wraps() {
    use std::sync::atomic::Ordering;
    let r = rig();
    r.fake.set_auto(false);
    let a = r.perf_agent();
    let b = r.perf_agent();
    // The counter comes round to a's ID (then b's).
    r.port.shared.next_agent.store(a.id().0, Ordering::Relaxed);
    let c = r.perf_agent();
    assert!(
        c.id() != a.id() && c.id() != b.id(),
        "{:?} {:?} {:?}",
        a.id(),
        b.id(),
        c.id()
    );
    // The counter wraps through 0, the internal agent's ID; IDs stay within 23 bits (a local
    // request's TID carries its agent's: crate::tid::local_stamp).
    r.port.shared.next_agent.store(u32::MAX, Ordering::Relaxed);
    let d = r.perf_agent();
    let e = r.perf_agent();
    assert_eq!(d.id().0, crate::tid::MAX_AGENT_ID);
    assert!(
        ![0, a.id().0, b.id().0, c.id().0].contains(&e.id().0),
        "{:?}",
        e.id()
    );
    // a's deregistration leaves the others' sends and registrations alone.
    let id = c
        .send(SendRequest::new(get(1), gsi(5)).timeout_ms(60_000))
        .unwrap();
    r.fake.execute(SpecialQp::Gsi, 1);
    r.port.progress();
    a.deregister();
    assert_eq!(r.port.census().agents, 4, "b, c, d and e still registered");
    let ev = r.collect(&c, Duration::from_millis(5));
    assert!(
        completions(&ev).is_empty(),
        "c's send is not canceled: {ev:?}"
    );
    r.fake.set_auto(true);
    c.cancel(id).unwrap();
    let ev = r.collect(&c, Duration::from_millis(5));
    assert_eq!(completions(&ev)[&id].0, WcStatus::WrFlushErr);
    for x in [b, c, d, e] {
        x.deregister();
    }
    r.assert_clean();
}

#[test]
fn shared_queue_and_dropped_agent_deregisters() {
    let r = rig();
    r.fake.set_responder(answer);
    let q = EventQueue::shared();
    let a = r.agent(AgentSpec::responses_only(SpecialQp::Gsi).with_events(q.clone()));
    let b = r.agent(AgentSpec::responses_only(SpecialQp::Gsi).with_events(q.clone()));
    let ia = a
        .send(SendRequest::new(get(1), gsi(5)).timeout_ms(10))
        .unwrap();
    let ib = b
        .send(SendRequest::new(get(2), gsi(5)).timeout_ms(10))
        .unwrap();
    let mut ev = Vec::new();
    let deadline = r.port.deadline_after(Duration::from_millis(20));
    while let Some(e) = r.port.wait_event(&q, deadline) {
        ev.push(e);
    }
    let c = completions(&ev);
    assert_eq!((c[&ia].0, c[&ib].0), (WcStatus::Success, WcStatus::Success));
    assert_eq!(ev.iter().filter(|e| e.agent() == a.id()).count(), 2);
    drop(a);
    drop(b);
    r.assert_clean();
}

#[test]
fn threads_send_cancel_and_deregister_while_a_progress_thread_runs() {
    let r = rig_with(8, 64, PortConfig::default());
    r.fake.set_responder(|o| {
        // Answer two thirds, drop the rest (they time out).
        if o.mad[15] % 3 == 0 {
            Vec::new()
        } else {
            answer(o)
        }
    });
    let thread = r.port.spawn_progress_thread().unwrap();
    let port = r.port.clone();
    let handles: Vec<_> = (0..4)
        .map(|t| {
            let port = port.clone();
            std::thread::spawn(move || {
                let a = port
                    .register(AgentSpec::responses_only(SpecialQp::Gsi))
                    .unwrap();
                let mut ids = Vec::new();
                for i in 0..200u64 {
                    let id = a
                        .send(
                            SendRequest::new(get(t * 1000 + i), gsi(5))
                                .timeout_ms(5)
                                .retries(1),
                        )
                        .unwrap();
                    if i % 7 == 0 {
                        let _ = a.cancel(id);
                    }
                    ids.push(id);
                }
                let q = a.events().clone();
                a.deregister();
                let mut ev = Vec::new();
                q.drain_into(&mut ev);
                let c = completions(&ev);
                assert_eq!(c.len(), ids.len(), "thread {t}");
                assert!(q.is_empty());
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    thread.stop();
    r.assert_clean();
}

/// A seeded random walk over the operations, on the double, with the invariants checked after
/// every step (the full run with syndromes, QP errors and removal is in `tests/` on the
/// simulated HCA).
#[test]
fn random_operations_keep_the_invariants() {
    for seed in 1..=8u64 {
        random_walk(seed, 3000);
    }
}

fn random_walk(seed: u64, steps: usize) {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut rnd = move |n: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % n
    };
    let r = rig_with(8, 32, PortConfig::default());
    r.fake.set_responder(|o| {
        if o.mad[15] % 4 == 0 {
            Vec::new()
        } else {
            answer(o)
        }
    });
    let mut agents: Vec<(Agent, Vec<SendId>, HashMap<SendId, u32>)> = Vec::new();
    let mut closed: Vec<Arc<EventQueue>> = Vec::new();
    let mut fatal = false;
    for step in 0..steps {
        match rnd(100) {
            0..=2 if agents.len() < 4 && !fatal => {
                agents.push((r.perf_agent(), Vec::new(), HashMap::new()));
            }
            3 if !agents.is_empty() => {
                let (a, ids, mut seen) = agents.swap_remove(rnd(agents.len() as u64) as usize);
                let q = a.events().clone();
                a.deregister();
                let mut ev = Vec::new();
                q.drain_into(&mut ev);
                for (id, _) in completions(&ev) {
                    *seen.entry(id).or_default() += 1;
                }
                for id in &ids {
                    assert_eq!(
                        seen.get(id),
                        Some(&1),
                        "seed {seed} step {step}: {id} completed once"
                    );
                }
                closed.push(q);
            }
            4..=49 if !agents.is_empty() => {
                let i = rnd(agents.len() as u64) as usize;
                let t = rnd(1 << 20);
                let req = SendRequest::new(get(t), gsi(5))
                    .timeout_ms(rnd(3) as u32 * 20)
                    .retries(rnd(3) as u32);
                match agents[i].0.send(req) {
                    Ok(id) => agents[i].1.push(id),
                    Err(MadError::DeviceFatal { .. }) => assert!(fatal),
                    Err(e) => panic!("seed {seed}: {e}"),
                }
            }
            50..=59 if !agents.is_empty() => {
                let i = rnd(agents.len() as u64) as usize;
                if let Some(&id) = agents[i].1.last() {
                    let _ = agents[i].0.cancel(id);
                }
            }
            60..=62 if !agents.is_empty() => {
                let i = rnd(agents.len() as u64) as usize;
                if let Some(&id) = agents[i].1.first() {
                    let _ = agents[i].0.modify_timeout(id, 1 + rnd(30) as u32);
                }
            }
            63..=64 => r.fake.fail_next_send(SpecialQp::Gsi, WcStatus::LocLenErr),
            65..=66 => r.fake.drop_next_packets(1),
            67 if step > steps / 2 && rnd(20) == 0 => {
                r.fake.make_fatal(rnd(2) == 0);
                fatal = true;
            }
            _ => {
                let until = r.port.deadline_after(Duration::from_millis(rnd(10)));
                r.port.progress_until(until);
            }
        }
        // Per step: completions so far are unique; the deregistered get nothing new.
        for (a, _, seen) in &mut agents {
            while let Some(e) = a.try_event() {
                if let Event::Send(c) = e {
                    let n = seen.entry(c.id).or_default();
                    *n += 1;
                    assert_eq!(*n, 1, "seed {seed} step {step}: {} twice", c.id);
                }
            }
        }
        for q in &closed {
            assert!(
                q.is_empty(),
                "seed {seed} step {step}: event after deregistration"
            );
        }
        assert_eq!(r.fake.faults(), 0, "seed {seed} step {step}: IOMMU fault");
        let census = r.port.census();
        assert!(census.gsi.active() <= census.gsi.slots as usize);
        assert!(
            r.fake.posted_sends(SpecialQp::Gsi) <= 8,
            "never more WRs than the queue"
        );
    }
    for (a, ids, mut seen) in agents {
        let q = a.events().clone();
        a.deregister();
        let mut ev = Vec::new();
        q.drain_into(&mut ev);
        for (id, _) in completions(&ev) {
            *seen.entry(id).or_default() += 1;
        }
        for id in &ids {
            assert_eq!(
                seen.get(id),
                Some(&1),
                "seed {seed}: {id} completed exactly once"
            );
        }
    }
    let c = r.port.census();
    assert_eq!(
        (c.gsi.active(), c.gsi.queued, c.outstanding),
        (0, 0, 0),
        "seed {seed}"
    );
    assert_eq!(r.fake.faults(), 0);
    if !fatal {
        r.assert_clean();
    }
    let _ = r.fake.dropped_no_rq();
}

#[test]
fn more_requests_wait_for_responses_than_the_send_queue_holds() {
    // Send queue of 4, default slots (16): 12 requests are outstanding at once, never more
    // than 4 work requests on the QP.
    let r = rig_with(4, 64, PortConfig::default());
    assert_eq!(r.port.slots(SpecialQp::Gsi), 16);
    let a = r.perf_agent();
    let ids: Vec<SendId> = (0..12)
        .map(|t| {
            a.send(SendRequest::new(get(t), gsi(5)).timeout_ms(1000))
                .unwrap()
        })
        .collect();
    assert!(r.port.census().gsi.posted <= 4);
    for _ in 0..5 {
        r.port.progress();
        assert!(r.fake.posted_sends(SpecialQp::Gsi) <= 4);
    }
    let c = r.port.census();
    assert_eq!(
        (c.gsi.count(SendState::WaitResp), c.gsi.posted, c.gsi.queued),
        (12, 0, 0),
        "{c:?}"
    );
    for id in ids {
        a.cancel(id).unwrap();
    }
    let ev = r.collect(&a, Duration::from_millis(5));
    assert_eq!(completions(&ev).len(), 12);
    a.deregister();
    r.assert_clean();
}

#[test]
fn loopback_replies_are_not_starved_by_the_requests_they_answer() {
    // 40 requests to our own LID, on a send queue of 4 with 16 slots: requests hold at most
    // 12 slots, so the responder agent on the same port always has slots for its answers.
    let r = rig_with(4, 64, PortConfig::default());
    let responder = r.agent(AgentSpec::class(0x0B, 1, MethodMask::of(&[0x01])));
    let req = r.perf_agent();
    let ids: Vec<SendId> = (0..40)
        .map(|t| {
            req.send(SendRequest::new(mad(0x0B, 1, 0x01, 0x10, t), gsi(1)).timeout_ms(1000))
                .unwrap()
        })
        .collect();
    let mut done = HashMap::new();
    let deadline = r.port.deadline_after(Duration::from_millis(500));
    while done.len() < ids.len() && r.port.now() < deadline {
        r.port
            .progress_until(r.port.deadline_after(Duration::from_millis(1)));
        while let Some(e) = responder.try_event() {
            if let Event::Recv(m) = e {
                let mut a = m.mad;
                a[3] = 0x81;
                responder
                    .send(SendRequest::new(a.to_vec(), m.addr.reply_dest()))
                    .unwrap();
            }
        }
        while let Some(e) = req.try_event() {
            if let Event::Send(c) = e {
                done.insert(c.id, c.status);
            }
        }
    }
    assert!(
        ids.iter().all(|i| done.get(i) == Some(&WcStatus::Success)),
        "{done:?} {:?} {:?}",
        r.port.counters(),
        r.port.census()
    );
    assert_eq!(r.port.counters().timeouts, 0, "answered, not timed out");
    responder.deregister();
    req.deregister();
    r.assert_clean();
}

#[test]
fn requests_wait_for_slots_in_order_when_their_share_is_taken() {
    // 4 slots with a send queue of 16: requests may hold 4 - min(16, 4/2) = 2 of them.
    let r = rig_with_slots(4);
    r.fake.set_responder(|o| {
        let mut v = answer(o);
        for p in &mut v {
            p.delay = Duration::from_millis(20);
        }
        v
    });
    let a = r.perf_agent();
    let ids: Vec<SendId> = (0..10)
        .map(|t| {
            a.send(SendRequest::new(get(t), gsi(5)).timeout_ms(1000))
                .unwrap()
        })
        .collect();
    let c = r.port.census();
    assert_eq!((c.gsi.active(), c.gsi.queued), (2, 8), "{c:?}");
    // A send that awaits no response passes the waiting requests.
    let plain = a
        .send(SendRequest::new(mad(PERF, 1, 0x03, 0x12, 99), gsi(5)))
        .unwrap();
    r.port.progress();
    assert_eq!(tid_of(&r.fake.sent()[2].mad) & 0xFFFF_FFFF, 99);
    let ev = r.collect(&a, Duration::from_millis(300));
    let done = completions(&ev);
    assert!(ids.iter().all(|i| done[i].0 == WcStatus::Success));
    assert_eq!(done[&plain].0, WcStatus::Success);
    let order: Vec<u64> = r
        .fake
        .sent()
        .iter()
        .map(|s| tid_of(&s.mad) & 0xFFFF_FFFF)
        .filter(|&t| t != 99)
        .collect();
    assert_eq!(order, (0..10).collect::<Vec<_>>(), "requests in order");
    a.deregister();
    r.assert_clean();
}

#[test]
fn a_retry_waits_for_a_send_queue_entry() {
    // A send queue of 1: the retry of A waits while B is on the QP, then goes.
    let r = rig_with(1, 64, PortConfig::default());
    r.fake.set_auto(false);
    let a = r.perf_agent();
    let ia = a
        .send(SendRequest::new(get(1), gsi(5)).timeout_ms(10).retries(1))
        .unwrap();
    r.fake.execute(SpecialQp::Gsi, 1);
    r.port.progress();
    let ib = a.send(SendRequest::new(get(2), gsi(5))).unwrap();
    assert_eq!(
        r.fake.posted_sends(SpecialQp::Gsi),
        1,
        "B took the one entry"
    );
    // A times out; its retry queues behind B.
    r.port
        .progress_until(r.port.deadline_after(Duration::from_millis(20)));
    let c = r.port.census();
    assert_eq!((c.gsi.queued, c.gsi.posted), (1, 1), "{c:?}");
    assert_eq!(r.fake.posted_sends(SpecialQp::Gsi), 1);
    r.fake.execute(SpecialQp::Gsi, 1); // B completes; A's retry is posted
    r.port.progress();
    assert_eq!(r.fake.posted_sends(SpecialQp::Gsi), 1, "A's retry");
    r.fake.set_auto(true);
    let ev = r.collect(&a, Duration::from_millis(50));
    let c = completions(&ev);
    assert_eq!(c[&ib].0, WcStatus::Success);
    assert_eq!(c[&ia], (WcStatus::RespTimeoutErr, 0, 1));
    assert_eq!(r.fake.sent().len(), 3, "A, B, A again");
    a.deregister();
    r.assert_clean();
}

#[test]
fn flushed_receives_mark_the_qp_in_error_and_are_kept() {
    let r = rig();
    r.fake.fail_next_recv(SpecialQp::Gsi, WcStatus::WrFlushErr);
    r.port.progress();
    let c = r.port.census();
    assert_eq!(
        (c.gsi.recv_posted, c.gsi.recv_idle),
        (63, 1),
        "kept, not reposted into a QP in error"
    );
    assert_eq!(r.fake.posted_recvs(SpecialQp::Gsi), 63);
    // The error stays on QP1: QP0 still reposts.
    r.fake.inject(Inbound::new(
        SpecialQp::Smi,
        mad(0x01, 1, 0x81, 0x11, 2).try_into().unwrap(),
        9,
    ));
    r.port.progress();
    assert_eq!(r.port.census().smi.unwrap().recv_posted, 64);
    assert_eq!(
        r.fake.accounting().leases_out,
        r.base.leases_out,
        "no buffer lost"
    );
}

#[test]
fn progress_or_wait_returns_once_work_is_done_or_at_the_deadline() {
    let r = rig();
    r.fake.set_responder(answer);
    let q = EventQueue::shared();
    let a = r.agent(AgentSpec::responses_only(SpecialQp::Gsi).with_events(Arc::clone(&q)));
    let deadline = r.port.deadline_after(Duration::from_millis(30));
    assert!(
        !r.port.progress_or_wait(deadline),
        "nothing to do: false, at the deadline"
    );
    assert!(r.port.now() >= deadline);
    assert!(
        !r.port.progress_or_wait(deadline),
        "a deadline already past: false at once"
    );
    let id = a
        .send(SendRequest::new(get(1), gsi(5)).timeout_ms(100))
        .unwrap();
    let deadline = r.port.deadline_after(Duration::from_millis(50));
    let mut calls = 0;
    while q.len() < 2 {
        assert!(r.port.progress_or_wait(deadline), "work done: true");
        calls += 1;
        assert!(
            calls < 10,
            "the response and completion come within a few calls"
        );
    }
    assert!(
        r.port.now() < deadline,
        "returned on the work, not the deadline"
    );
    let mut ev = Vec::new();
    q.drain_into(&mut ev);
    assert_eq!(completions(&ev)[&id], (WcStatus::Success, 0, 0));
    a.deregister();
    r.assert_clean();
}

#[test]
fn progress_or_wait_returns_on_a_dead_device_whichever_thread_took_the_death() {
    let r = rig();
    let q = EventQueue::shared();
    let a = r.agent(AgentSpec::responses_only(SpecialQp::Gsi).with_events(Arc::clone(&q)));
    r.fake.make_fatal(true);
    // Another caller's passes take the death and tell the agent (as umad_send's pass or
    // the fallback thread does while a reader sleeps).
    let mut passes = 0;
    while q.is_empty() {
        r.port.progress();
        passes += 1;
        assert!(passes < 100, "the death is told within a few passes");
    }
    assert!(r.port.fatal_reason().is_some());
    let deadline = r.port.deadline_after(Duration::from_secs(10));
    assert!(
        r.port.progress_or_wait(deadline),
        "a dead device: back to look again, not false at the deadline"
    );
    assert!(r.port.now() < deadline, "not run to the deadline");
    let mut ev = Vec::new();
    q.drain_into(&mut ev);
    assert!(
        ev.iter().any(|e| matches!(e, Event::DeviceFatal { .. })),
        "{ev:?}"
    );
    a.deregister();
    assert_eq!(r.fake.faults(), 0);
    assert_eq!(r.port.census().outstanding, 0);
}

#[test]
fn progress_or_wait_waits_for_the_thread_holding_the_loop() {
    let r = rig();
    let held = r.port.shared.progress.lock().unwrap();
    let start = std::time::Instant::now();
    let deadline = r.port.deadline_after(Duration::from_secs(3600));
    assert!(
        r.port.progress_or_wait(deadline),
        "another thread holds the loop: back after at most max_sleep, to look again"
    );
    assert!(start.elapsed() < Duration::from_secs(10));
    assert!(
        r.port.now() < deadline,
        "the device's time did not pass here"
    );
    drop(held);
}

#[test]
fn progress_then_sleep_does_the_work_or_sleeps_to_the_deadline_without_the_loop() {
    let r = rig();
    r.fake.set_responder(answer);
    let q = EventQueue::shared();
    let a = r.agent(AgentSpec::responses_only(SpecialQp::Gsi).with_events(Arc::clone(&q)));
    let id = a
        .send(SendRequest::new(get(1), gsi(5)).timeout_ms(100))
        .unwrap();
    let deadline = r.port.deadline_after(Duration::from_millis(50));
    let mut calls = 0;
    while q.len() < 2 {
        r.port.progress_then_sleep(deadline);
        calls += 1;
        assert!(
            calls < 10,
            "the response and completion come within a few calls"
        );
    }
    let mut ev = Vec::new();
    q.drain_into(&mut ev);
    assert_eq!(completions(&ev)[&id], (WcStatus::Success, 0, 0));
    // A deadline before max_sleep (5 ms) ends the sleep.
    let deadline = r.port.deadline_after(Duration::from_millis(3));
    assert_eq!(r.port.progress_then_sleep(deadline), 0, "nothing to do");
    assert!(r.port.now() >= deadline, "slept to the deadline");
    assert!(
        r.port.shared.progress.try_lock().is_ok(),
        "the loop is free after the sleep"
    );
    a.deregister();
    r.assert_clean();
}

#[test]
fn a_notify_hook_that_panics_loses_no_other_agents_completion() {
    // Run where a hang (the bug this guards against: a deregistration, or an agent's drop,
    // waiting forever for a completion the panic lost) fails the test instead of stalling it.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        hook_panic_scenario();
        let _ = tx.send(());
    });
    match rx.recv_timeout(Duration::from_secs(20)) {
        Ok(()) => {}
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => panic!("the scenario failed"),
        Err(e) => panic!("the scenario hung ({e})"),
    }
}

fn hook_panic_scenario() {
    let r = rig();
    r.fake.set_auto(false);
    let a = r.perf_agent();
    let b = r.perf_agent();
    a.events()
        .set_notify(Some(Arc::new(|| panic!("the user's hook panics"))));
    let ida = a.send(SendRequest::new(get(1), gsi(2))).unwrap();
    let idb = b.send(SendRequest::new(get(2), gsi(2))).unwrap();
    // Both CQEs come back in one pass: A's event is queued first, then B's, then A's hook runs.
    r.fake.execute(SpecialQp::Gsi, 2);
    let pass = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| r.port.progress()));
    assert!(
        pass.is_ok(),
        "the hook's panic is caught where the hook runs"
    );
    assert_eq!(a.events().hook_panics(), 1);
    // B's completion is queued and counted although A's hook panicked before B's wake, so
    // B's deregistration (which waits for B's sends to be counted out) returns.
    let eb = r.collect(&b, Duration::from_millis(10));
    assert_eq!(completions(&eb).get(&idb), Some(&(WcStatus::Success, 0, 0)));
    b.deregister();
    a.events().set_notify(None);
    let ea = r.collect(&a, Duration::from_millis(10));
    assert_eq!(completions(&ea).get(&ida), Some(&(WcStatus::Success, 0, 0)));
    a.deregister();
    r.assert_clean();
}

#[test]
fn a_notify_hook_that_panics_on_completions_made_outside_the_loop_loses_none() {
    // Cancels of sends still queued complete at once, in the caller's thread, one after the
    // other; deregistration waits for each. A hook panicking at the first must not lose the
    // rest (the scenario runs in its own thread so that a hang fails the test).
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let r = rig_with(4, 64, PortConfig::default());
        r.fake.set_auto(false);
        let a = r.perf_agent();
        let ids: Vec<SendId> = (0..12)
            .map(|t| a.send(SendRequest::new(get(t), gsi(5))).unwrap())
            .collect();
        assert!(r.port.census().gsi.queued > 0, "some wait for a slot");
        a.events()
            .set_notify(Some(Arc::new(|| panic!("the user's hook panics"))));
        // Deregistration cancels them all: those still queued complete in this thread.
        let events = Arc::clone(a.events());
        r.fake.set_auto(true);
        a.deregister();
        let mut ev = Vec::new();
        events.drain_into(&mut ev);
        let c = completions(&ev);
        assert_eq!(c.len(), ids.len(), "one completion each: {ev:?}");
        assert!(events.hook_panics() > 0);
        r.assert_clean();
        let _ = tx.send(());
    });
    match rx.recv_timeout(Duration::from_secs(20)) {
        Ok(()) => {}
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => panic!("the scenario failed"),
        Err(e) => panic!("the scenario hung ({e})"),
    }
}

/// The double's check that a send buffer is not rewritten while its send is posted (each slot
/// owns its buffer, so the IOMMU cannot catch a reuse before DONE): a buffer rewritten after
/// its send is DONE is fine; one rewritten between post and execution is counted, and the
/// device sends the new bytes.
#[test]
fn a_send_buffer_rewritten_while_its_send_is_posted_is_counted() {
    let r = rig_with_slots(2);
    r.fake.set_auto(false);
    let a = r.perf_agent();
    let ring = r.port.send_ring(SpecialQp::Gsi);
    a.send(SendRequest::new(get(1), gsi(2))).unwrap();
    r.fake.execute(SpecialQp::Gsi, 1);
    let ev = r.collect(&a, Duration::from_millis(10));
    assert_eq!(completions(&ev).len(), 1, "{ev:?}");
    // DONE: the slot's buffer is the stack's again (and the other slot's was never posted).
    for index in 0..2 {
        ring.scribble_send_buffer(index, 0x5A);
    }
    assert_eq!(r.fake.buffers_rewritten_while_posted(), 0);
    a.send(SendRequest::new(get(2), gsi(2))).unwrap();
    assert_eq!(r.fake.posted_sends(SpecialQp::Gsi), 1);
    // Both buffers: the posted send's is one of them.
    for index in 0..2 {
        ring.scribble_send_buffer(index, 0xC3);
    }
    r.fake.execute(SpecialQp::Gsi, 1);
    assert_eq!(
        r.fake.buffers_rewritten_while_posted(),
        1,
        "the rewrite under the posted send is caught"
    );
    let sent = r.fake.sent();
    assert_eq!(sent.len(), 2);
    assert_eq!(tid_of(&sent[0].mad) & 0xFFFF_FFFF, 1);
    assert!(
        sent[1].mad.iter().all(|&b| b == 0xC3),
        "the device sent the rewritten bytes"
    );
    a.deregister();
}

/// A MAD that cannot be copied into its slot's send buffer is not posted (the buffer still
/// holds the slot's previous MAD): its send completes with LOC_QP_OP_ERR, counted as a post
/// failure, and the slot serves the next send.
#[test]
fn a_mad_not_copied_into_its_send_buffer_completes_with_loc_qp_op_err_unsent() {
    use driver::verbs::HcaPort;
    let r = rig_with_slots(2);
    let a = r.perf_agent();
    let ring = r.port.send_ring(SpecialQp::Gsi);
    let first = a.send(SendRequest::new(get(1), gsi(2))).unwrap();
    let ev = r.collect(&a, Duration::from_millis(10));
    assert_eq!(completions(&ev)[&first].0, WcStatus::Success);
    // Leases too short for a MAD: the copy at install fails.
    ring.replace_send_buffers(r.fake.dma(), 64);
    let refused = a
        .send(SendRequest::new(get(2), gsi(2)).timeout_ms(100))
        .unwrap();
    let ev = r.collect(&a, Duration::from_millis(10));
    let c = completions(&ev);
    assert_eq!(c.len(), 1, "{ev:?}");
    assert_eq!(c[&refused], (WcStatus::LocQpOpErr, 0, 0));
    assert_eq!(
        r.fake.sent().len(),
        1,
        "nothing posted: the slot's previous MAD is not sent again"
    );
    assert_eq!(r.port.counters().post_failures, 1);
    let census = r.port.census();
    assert_eq!(
        (census.gsi.active(), census.gsi.posted),
        (0, 0),
        "slot and send queue entry back: {census:?}"
    );
    ring.replace_send_buffers(r.fake.dma(), MAD_LEN);
    let next = a.send(SendRequest::new(get(3), gsi(2))).unwrap();
    let ev = r.collect(&a, Duration::from_millis(10));
    assert_eq!(completions(&ev)[&next].0, WcStatus::Success);
    let sent = r.fake.sent();
    assert_eq!(sent.len(), 2);
    assert_eq!(tid_of(&sent[1].mad) & 0xFFFF_FFFF, 3, "the new MAD went");
    a.deregister();
    let acc = r.fake.accounting();
    assert_eq!(acc.leases_out, r.base.leases_out, "{acc:?}");
    assert_eq!(acc.live_mappings, r.base.live_mappings, "{acc:?}");
    assert_eq!(r.fake.faults(), 0);
    assert_eq!(r.fake.buffers_rewritten_while_posted(), 0);
}

/// Opening a port that cannot lease its GSI receive buffers (the IOMMU is one mapping short)
/// fails with a DMA error after the SMI receive buffers were posted: those stay mapped (kept
/// for the device, which may still write them), everything else is released.
#[test]
fn a_failed_open_keeps_the_receive_buffers_already_posted() {
    let probe = FakePort::new(16, 64);
    let mappings = {
        let _port = Port::open(probe.clone(), PortConfig::default()).expect("open");
        probe.accounting().live_mappings
    };
    let fake = FakePort::with_max_mappings(16, 64, mappings - 1);
    let before = fake.accounting();
    let opened = Port::open(fake.clone(), PortConfig::default());
    assert!(matches!(opened, Err(MadError::Dma(_))), "a DMA error");
    assert_eq!(fake.posted_recvs(SpecialQp::Smi), 64, "SMI buffers posted");
    assert_eq!(fake.posted_recvs(SpecialQp::Gsi), 0);
    assert_eq!(
        fake.posted_buffers_unmapped(),
        0,
        "no lease freed under a posted receive"
    );
    assert_eq!(fake.faults(), 0);
    let acc = fake.accounting();
    assert_eq!(
        acc.leases_out,
        before.leases_out + 64,
        "only the posted receive buffers are kept: {acc:?}"
    );
}

/// How the device is when the port is dropped.
#[derive(Clone, Copy, PartialEq, Eq)]
enum DeviceAtDrop {
    Live,
    Fatal,
    Removed,
}

/// Drop a port whose own reply (an unclaimed Get's 0x000c) was posted and never executed.
fn drop_with_a_send_on_the_qp(device: DeviceAtDrop) {
    let fake = FakePort::new(16, 64);
    let before = fake.accounting();
    let port = Port::open(fake.clone(), PortConfig::default()).expect("open");
    let send_leases = port.census().gsi.send_buffer_leases + 1;
    assert!(
        send_leases > 2,
        "the test needs more than one lease per ring"
    );
    fake.set_auto(false);
    fake.inject(Inbound::new(
        SpecialQp::Gsi,
        mad(0x06, 1, 0x01, 0x10, 77).try_into().unwrap(),
        9,
    ));
    fake.deliver_due();
    port.progress();
    assert_eq!(fake.posted_sends(SpecialQp::Gsi), 1, "the reply is posted");
    match device {
        DeviceAtDrop::Live => {}
        DeviceAtDrop::Fatal => fake.make_fatal(false),
        DeviceAtDrop::Removed => fake.make_fatal(true),
    }
    drop(port);
    let acc = fake.accounting();
    if device == DeviceAtDrop::Live {
        let recvs = fake.posted_recvs(SpecialQp::Smi) + fake.posted_recvs(SpecialQp::Gsi);
        assert_eq!(recvs, 128, "every receive buffer is still posted");
        assert_eq!(
            acc.leases_out,
            before.leases_out + recvs + 1,
            "kept: the posted receive buffers and the one lease holding the posted send's \
             buffer; the other send buffer leases are released: {acc:?}"
        );
        assert_eq!(
            fake.posted_buffers_unmapped(),
            0,
            "no lease freed under a posted work request"
        );
        // The device may still execute the send: it reads the reply, intact.
        fake.execute(SpecialQp::Gsi, 1);
        let sent = fake.sent();
        assert_eq!(sent.len(), 1);
        let m = &sent[0].mad;
        assert_eq!(
            (m[3], u16::from_be_bytes([m[4], m[5]]), tid_of(m)),
            (0x81, 0x000C, 77)
        );
        assert_eq!(fake.buffers_rewritten_while_posted(), 0);
    } else {
        assert_eq!(acc.leases_out, before.leases_out, "all released: {acc:?}");
        assert_eq!(acc.live_mappings, before.live_mappings, "{acc:?}");
        assert!(fake.sent().is_empty());
    }
    assert_eq!(fake.faults(), 0);
}

#[test]
fn a_port_dropped_with_a_send_on_a_live_qp_keeps_only_that_sends_buffer_lease() {
    drop_with_a_send_on_the_qp(DeviceAtDrop::Live);
}

#[test]
fn a_port_dropped_after_a_fatal_error_releases_every_lease() {
    drop_with_a_send_on_the_qp(DeviceAtDrop::Fatal);
}

#[test]
fn a_port_dropped_after_removal_releases_every_lease() {
    drop_with_a_send_on_the_qp(DeviceAtDrop::Removed);
}

/// Runs `body` on a thread of its own and fails if it has not finished within `limit` of real
/// time: a deadlock is a failure, not a hung test run (the stuck thread is left behind).
fn within_real_time(limit: Duration, body: impl FnOnce() + Send + 'static) {
    let (tx, rx) = std::sync::mpsc::channel();
    let worker = std::thread::spawn(move || {
        body();
        let _ = tx.send(());
    });
    match rx.recv_timeout(limit) {
        Ok(()) => worker.join().unwrap(),
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
            // The body panicked: report its panic.
            if let Err(e) = worker.join() {
                std::panic::resume_unwind(e);
            }
        }
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
            panic!("not finished within {limit:?} of real time: deadlocked")
        }
    }
}

/// Threads send solicited SA requests (short timeouts, retries, a third never answered, so
/// timers fire and retries queue behind their agent's flow-control backlog of 2) and modify and
/// cancel them while a progress thread runs, with the default 32 slots of a send queue of 8
/// (24 of them for requests). Retries waiting in the backlogs hold their slots: a new send let
/// out of a backlog with a flow-control credit must not then wait for one of those slots, or
/// no retry ever gets its credit back (the port-wide deadlock this guards against). The timer
/// decides under the slot's data lock and looks at the backlog without it; modify takes flow
/// control's lock, then the data lock: no thread waits for another in a cycle either. Every
/// send completes exactly once, deregistration returns, and the port ends clean.
#[test]
fn retries_queued_behind_flow_control_do_not_deadlock_the_request_slots() {
    within_real_time(Duration::from_secs(120), || {
        for round in 0..3u64 {
            let r = rig_with(8, 64, PortConfig::default());
            assert_eq!(r.port.slots(SpecialQp::Gsi), 32);
            r.fake.set_responder(|o| {
                if o.mad[15] % 3 == 0 {
                    Vec::new()
                } else {
                    answer(o)
                }
            });
            let progress = r.port.spawn_progress_thread().unwrap();
            let handles: Vec<_> = (0..4u64)
                .map(|t| {
                    let a = r.agent(AgentSpec::class(SA, 2, MethodMask::NONE));
                    let port = r.port.clone();
                    std::thread::spawn(move || {
                        let mut ids = Vec::new();
                        let mut seen = HashMap::new();
                        let take = |seen: &mut HashMap<SendId, WcStatus>, e: Event| {
                            if let Event::Send(c) = e {
                                assert!(seen.insert(c.id, c.status).is_none(), "{} twice", c.id);
                            }
                        };
                        for i in 0..60u64 {
                            let tid = round << 32 | t << 16 | i;
                            let req = SendRequest::new(mad(SA, 2, 0x01, 0x12, tid), gsi(5))
                                .timeout_ms(1 + (i % 4) as u32)
                                .retries((i / 3 % 3) as u32);
                            let id = a.send(req).unwrap();
                            ids.push(id);
                            let earlier = ids[(i as usize * 7) % ids.len()];
                            match i % 8 {
                                0 | 4 => {
                                    let _ = a.modify_timeout(earlier, 1 + (i % 5) as u32);
                                }
                                1 | 5 => {
                                    let _ = a.modify_timeout(id, 3);
                                }
                                2 => {
                                    let _ = a.cancel(earlier);
                                }
                                _ => {}
                            }
                            if i % 4 == 3 {
                                if let Some(e) =
                                    a.next_event(port.deadline_after(Duration::from_millis(2)))
                                {
                                    take(&mut seen, e);
                                }
                            }
                        }
                        // Everything finishes on its own (by response, timeout or cancel). The
                        // double's clock jumps whenever the loop sleeps, so its time is no
                        // measure of a thread the machine does not run for a while: real time
                        // bounds this.
                        let give_up = std::time::Instant::now() + Duration::from_secs(30);
                        while seen.len() < ids.len() && std::time::Instant::now() < give_up {
                            if let Some(e) =
                                a.next_event(port.deadline_after(Duration::from_millis(100)))
                            {
                                take(&mut seen, e);
                            }
                        }
                        for id in &ids {
                            assert!(seen.contains_key(id), "round {round} thread {t}: {id} lost");
                        }
                        assert_eq!(seen.len(), ids.len(), "round {round} thread {t}");
                        a.deregister();
                    })
                })
                .collect();
            for h in handles {
                h.join().unwrap();
            }
            progress.stop();
            let c = r.port.counters();
            assert!(
                c.timeouts > 0 && c.retries > 0,
                "round {round}: timers fired: {c:?}"
            );
            r.assert_clean();
        }
    });
}

/// 4 slots on a send queue of 2: 2 request units.
fn rig_with_two_request_units() -> Rig {
    let r = rig_with(
        2,
        64,
        PortConfig {
            slots: Some(4),
            ..PortConfig::default()
        },
    );
    assert_eq!(r.port.shared.ring(SpecialQp::Gsi).unwrap().request_limit, 2);
    r
}

fn request_units_taken(r: &Rig) -> u32 {
    r.port.shared.ring(SpecialQp::Gsi).unwrap().requests_held()
}

/// The state the port-wide deadlock came from, reached deterministically: one SA agent (limit
/// 64/32 = 2) on a ring with 2 request units, nobody answering. A1 and A2 take both units and
/// both credits; A3 and A4 wait in the backlog. At A1's and A2's timeouts their retries queue
/// behind A3 and A4 (the backlog is not empty, the kernel's `retry_send`) and give their
/// credits back, keeping their slots and units. A3 and A4 used to take those credits into the
/// ring's queue and wait there for a unit, which the queued retries held while they waited for
/// those credits: nothing moved again. A new send now takes a credit only with a unit, so A3
/// and A4 stay in the backlog, the retries go past them, and the units the retries give back
/// at their end let A3 and A4 go.
#[test]
fn queued_retries_holding_every_request_unit_go_past_new_sends_waiting_for_one() {
    within_real_time(Duration::from_secs(60), || {
        let r = rig_with_two_request_units();
        let sa = r.agent(AgentSpec::class(SA, 2, MethodMask::NONE));
        let ids: Vec<SendId> = (1..=4u64)
            .map(|t| {
                let m = mad(SA, 2, 0x01, 0x11, t);
                sa.send(SendRequest::new(m, gsi(5)).timeout_ms(10).retries(1))
                    .unwrap()
            })
            .collect();
        r.port.progress();
        let t0 = r.port.now();
        assert_eq!(r.port.census().backlogged, 2, "A3, A4");
        assert_eq!(r.port.census().gsi.count(SendState::WaitResp), 2);
        let c = pass_at(&r, &sa, t0 + Duration::from_millis(10));
        assert!(c.is_empty(), "{c:?}");
        let k = r.port.counters();
        assert_eq!(
            (k.retries, k.backlogged),
            (2, 4),
            "both retries queued: {k:?}"
        );
        assert_eq!(request_units_taken(&r), 2, "the retries hold both units");
        let wire = |r: &Rig| -> Vec<u64> {
            r.fake
                .sent()
                .iter()
                .map(|o| tid_of(&o.mad) & 0xFF)
                .collect()
        };
        assert_eq!(k.posted, 4, "the retries went past A3 and A4: {k:?}");
        let c = r.port.census();
        assert_eq!(c.gsi.count(SendState::SendStart), 2, "{c:?}");
        assert_eq!(c.backlogged, 2, "A3 and A4 wait for a unit: {c:?}");
        assert_eq!(
            c.gsi.queued, 0,
            "with no credit, not in the ring's queue: {c:?}"
        );
        let done = completions(&r.collect(&sa, Duration::from_millis(100)));
        for id in &ids {
            assert_eq!(
                done.get(id),
                Some(&(WcStatus::RespTimeoutErr, 0, 1)),
                "{id}"
            );
        }
        assert_eq!(wire(&r), [1, 2, 1, 2, 3, 4, 3, 4]);
        assert_eq!(request_units_taken(&r), 0);
        sa.deregister();
        r.assert_clean();
    });
}

/// A solicited send that finds its agent's credits free but no request unit waits in the
/// backlog holding nothing (an overflow, not flow control), and goes when another agent's
/// request gives a unit back at its end.
#[test]
fn a_solicited_send_without_a_request_unit_goes_when_another_agents_request_ends() {
    within_real_time(Duration::from_secs(60), || {
        let r = rig_with_two_request_units();
        let perf = r.perf_agent();
        let p: Vec<SendId> = (1..=2u64)
            .map(|t| {
                perf.send(SendRequest::new(get(t), gsi(5)).timeout_ms(100_000))
                    .unwrap()
            })
            .collect();
        let sa = r.agent(AgentSpec::class(SA, 2, MethodMask::NONE));
        let s = sa
            .send(SendRequest::new(mad(SA, 2, 0x01, 0x11, 3), gsi(5)).timeout_ms(10))
            .unwrap();
        r.port.progress();
        let c = r.port.census();
        assert_eq!(c.backlogged, 1, "{c:?}");
        let k = r.port.counters();
        assert_eq!((k.backlogged, k.overflowed), (0, 1), "{k:?}");
        assert_eq!(r.port.counters().posted, 2);
        perf.cancel(p[0]).unwrap();
        r.port.progress();
        assert_eq!(r.port.census().backlogged, 0);
        assert_eq!(r.port.counters().posted, 3, "the SA send went out");
        assert_eq!(
            completions(&r.collect(&sa, Duration::from_millis(20))).get(&s),
            Some(&(WcStatus::RespTimeoutErr, 0, 0))
        );
        perf.deregister();
        sa.deregister();
        r.assert_clean();
    });
}

/// A send that reserved a request unit with its credit and is canceled while it waits in the
/// ring's queue (here for a send queue entry) gives the unit back, and the backlog waiting for
/// it goes on.
#[test]
fn a_canceled_queued_send_gives_its_request_unit_to_a_waiting_backlog() {
    within_real_time(Duration::from_secs(60), || {
        let r = rig_with_two_request_units();
        let a = r.agent(AgentSpec::class(SA, 2, MethodMask::NONE));
        let b = r.agent(AgentSpec::class(SA, 2, MethodMask::NONE));
        let send = |agent: &Agent, t: u64| {
            let m = mad(SA, 2, 0x01, 0x11, t);
            agent
                .send(SendRequest::new(m, gsi(5)).timeout_ms(10_000))
                .unwrap()
        };
        // The queue's 2 entries, taken by two sends that await no response.
        let perf = r.perf_agent();
        perf.send(SendRequest::new(get(9), gsi(5))).unwrap();
        perf.send(SendRequest::new(get(10), gsi(5))).unwrap();
        let a1 = send(&a, 1);
        let a2 = send(&a, 2);
        let b1 = send(&b, 3);
        assert_eq!(r.port.census().gsi.queued, 2, "A1, A2 wait for an entry");
        assert_eq!(r.port.census().backlogged, 1, "B1 waits for a unit");
        a.cancel(a2).unwrap();
        assert_eq!(r.port.census().backlogged, 0, "B1 took A2's unit");
        let done = completions(&r.collect(&a, Duration::from_millis(5)));
        assert_eq!(done[&a2].0, WcStatus::WrFlushErr);
        a.cancel(a1).unwrap();
        b.cancel(b1).unwrap();
        let _ = r.collect(&perf, Duration::from_millis(5));
        perf.deregister();
        a.deregister();
        b.deregister();
        assert_eq!(request_units_taken(&r), 0);
        r.assert_clean();
    });
}

/// [`rig_with_two_request_units`] with 256 receive buffers: an SA agent may have 8 solicited
/// sends outstanding (R/32), more than the ring's 2 units, so its sends wait for units, not
/// for credits.
fn rig_with_two_units_and_sa_credits_to_spare() -> Rig {
    let r = rig_with(
        2,
        256,
        PortConfig {
            slots: Some(4),
            ..PortConfig::default()
        },
    );
    assert_eq!(r.port.shared.ring(SpecialQp::Gsi).unwrap().request_limit, 2);
    r
}

/// The ring's unit waiters, front first, by agent.
fn unit_waiters(r: &Rig) -> Vec<u32> {
    r.port.shared.ring(SpecialQp::Gsi).unwrap().units.waiters()
}

/// Both units held by `holder`'s two requests (a class without flow control; nobody answers),
/// then `first` and `second` (SA agents) each send 3 requests, in that order: `first` begins
/// waiting for a unit before `second`. Returns the holder's sends, `first`'s and `second`'s.
fn two_agents_waiting_for_units(
    r: &Rig,
    holder: &Agent,
    first: &Agent,
    second: &Agent,
) -> (Vec<SendId>, Vec<SendId>, Vec<SendId>) {
    let h: Vec<SendId> = (1..=2u64)
        .map(|t| {
            holder
                .send(SendRequest::new(get(0x100 + t), gsi(5)).timeout_ms(1_000_000))
                .unwrap()
        })
        .collect();
    r.port.progress();
    assert_eq!(request_units_taken(r), 2, "the holder has both units");
    let send = |agent: &Agent, t: u64| {
        let m = mad(SA, 2, 0x01, 0x11, t);
        agent
            .send(SendRequest::new(m, gsi(5)).timeout_ms(1_000_000))
            .unwrap()
    };
    let f: Vec<SendId> = (0xA1..=0xA3).map(|t| send(first, t)).collect();
    let s: Vec<SendId> = (0xB1..=0xB3).map(|t| send(second, t)).collect();
    r.port.progress();
    let c = r.port.census();
    assert_eq!(c.backlogged, 6, "every SA send waits for a unit: {c:?}");
    assert_eq!(
        unit_waiters(r),
        [first.id().0, second.id().0],
        "in the order they began waiting"
    );
    assert_eq!(c.gsi.unit_waiters, 2, "{c:?}");
    (h, f, s)
}

/// The client TIDs (low 32 bits) of the MADs posted on QP1, in the order they were posted,
/// from the `from`-th on the wire (the double puts a posted send on the wire when it executes
/// it, at the next poll: this executes those posted since).
fn wire_tids_from(r: &Rig, from: usize) -> Vec<u64> {
    r.fake.execute(SpecialQp::Gsi, usize::MAX);
    r.fake.sent()[from..]
        .iter()
        .map(|o| tid_of(&o.mad) & 0xFFFF_FFFF)
        .collect()
}

/// Request units freed one at a time go to the agents waiting for one in the order they began
/// waiting, one each in turn: A (which began waiting first) gets the first, B the next, and so
/// on, whoever gave the unit back. In particular an agent whose own request ends does not take
/// the unit it gave back while the other agent waits at the front. They used to go to the
/// agents in the agent table's (`HashMap`) order: one agent took every unit freed while it had
/// sends waiting (A1 A2 A3 B1 B2 B3, or B1 B2 B3 A1 A2 A3), and the other waited.
#[test]
fn freed_request_units_go_round_the_waiting_agents_in_the_order_they_began_waiting() {
    within_real_time(Duration::from_secs(60), || {
        let r = rig_with_two_units_and_sa_credits_to_spare();
        let holder = r.perf_agent();
        // B registered first: the agents' IDs (and the table) are no guide to the order.
        let b = r.agent(AgentSpec::class(SA, 2, MethodMask::NONE));
        let a = r.agent(AgentSpec::class(SA, 2, MethodMask::NONE));
        let (h, a_ids, b_ids) = two_agents_waiting_for_units(&r, &holder, &a, &b);
        let on_wire = r.fake.sent().len();
        // Each step gives one unit back (a cancel of a request waiting for its response,
        // finished by the next pass), and names the request that must go out with it and the
        // unit waiters after it.
        let steps: [(&Agent, SendId, u64, Vec<u32>); 6] = [
            (&holder, h[0], 0xA1, vec![b.id().0, a.id().0]),
            (&holder, h[1], 0xB1, vec![a.id().0, b.id().0]),
            // B's own request ends while A waits at the front: A gets the unit.
            (&b, b_ids[0], 0xA2, vec![b.id().0, a.id().0]),
            (&a, a_ids[0], 0xB2, vec![a.id().0, b.id().0]),
            // A's last send: A no longer waits.
            (&b, b_ids[1], 0xA3, vec![b.id().0]),
            (&a, a_ids[1], 0xB3, vec![]),
        ];
        let mut expect = Vec::new();
        for (i, (agent, id, goes, waiters)) in steps.into_iter().enumerate() {
            agent.cancel(id).unwrap();
            r.port.progress();
            expect.push(goes);
            assert_eq!(
                wire_tids_from(&r, on_wire),
                expect,
                "step {i}: the unit of {id} goes to the agent at the front"
            );
            assert_eq!(unit_waiters(&r), waiters, "step {i}");
            assert_eq!(request_units_taken(&r), 2, "step {i}: every unit in use");
        }
        assert_eq!(r.port.census().backlogged, 0);
        for (agent, id) in [(&a, a_ids[2]), (&b, b_ids[2])] {
            agent.cancel(id).unwrap();
        }
        for agent in [&holder, &a, &b] {
            let done = completions(&r.collect(agent, Duration::from_millis(5)));
            assert!(
                done.values().all(|c| c.0 == WcStatus::WrFlushErr),
                "{done:?}"
            );
        }
        holder.deregister();
        a.deregister();
        b.deregister();
        r.assert_clean();
    });
}

/// Two units given back in one pass go one to each waiting agent, in the order they began
/// waiting; they used to both go to whichever agent the table listed first.
#[test]
fn request_units_freed_together_go_one_to_each_waiting_agent() {
    within_real_time(Duration::from_secs(60), || {
        let r = rig_with_two_units_and_sa_credits_to_spare();
        let holder = r.perf_agent();
        let b = r.agent(AgentSpec::class(SA, 2, MethodMask::NONE));
        let a = r.agent(AgentSpec::class(SA, 2, MethodMask::NONE));
        let (h, _, _) = two_agents_waiting_for_units(&r, &holder, &a, &b);
        let on_wire = r.fake.sent().len();
        holder.cancel(h[0]).unwrap();
        holder.cancel(h[1]).unwrap();
        r.port.progress();
        assert_eq!(
            wire_tids_from(&r, on_wire),
            [0xA1, 0xB1],
            "one each, A first"
        );
        assert_eq!(unit_waiters(&r), [a.id().0, b.id().0], "both wait again");
        let _ = r.collect(&holder, Duration::from_millis(5));
        holder.deregister();
        // Deregistering cancels their sends: each leaves the waiters.
        a.deregister();
        assert_eq!(unit_waiters(&r), [b.id().0]);
        b.deregister();
        r.assert_clean();
    });
}

/// An agent deregistered while it waits for a unit leaves the ring's unit waiters (the one
/// behind it becomes the front), and the next unit given back goes to that one.
#[test]
fn an_agent_deregistered_while_waiting_for_a_unit_leaves_the_waiters() {
    within_real_time(Duration::from_secs(60), || {
        let r = rig_with_two_units_and_sa_credits_to_spare();
        let holder = r.perf_agent();
        let a = r.agent(AgentSpec::class(SA, 2, MethodMask::NONE));
        let b = r.agent(AgentSpec::class(SA, 2, MethodMask::NONE));
        let (h, _, _) = two_agents_waiting_for_units(&r, &holder, &a, &b);
        let a_id = a.id().0;
        a.deregister();
        assert_eq!(unit_waiters(&r), [b.id().0], "A left, B is the front");
        assert_eq!(r.port.census().gsi.unit_waiters, 1);
        assert!(!r.port.shared.waits_for_a_unit(a_id));
        let on_wire = r.fake.sent().len();
        holder.cancel(h[0]).unwrap();
        r.port.progress();
        assert_eq!(wire_tids_from(&r, on_wire), [0xB1]);
        holder.cancel(h[1]).unwrap();
        r.port.progress();
        assert_eq!(wire_tids_from(&r, on_wire), [0xB1, 0xB2]);
        let _ = r.collect(&holder, Duration::from_millis(5));
        holder.deregister();
        b.deregister();
        r.assert_clean();
    });
}

/// Fills the ring of [`rig_with_two_request_units`] (4 slots, send queue of 2, 2 units) with
/// sends whose only way forward is a retry: `a`'s two requests with a retry left hold the
/// units; two sends created with no timeout, given one by a modify (the kernel's
/// `ib_modify_mad` sets `mad_send_wr->timeout` of a send on its send list) and with a retry
/// left, hold the other two slots. Then `b`'s send awaiting no response waits for a slot.
/// Returns `a`'s four sends and `b`'s.
fn every_slot_held_by_a_send_that_must_retry(a: &Agent, b: &Agent) -> ([SendId; 4], SendId) {
    let p1 = a
        .send(SendRequest::new(get(1), gsi(5)).timeout_ms(10).retries(1))
        .unwrap();
    let p2 = a
        .send(SendRequest::new(get(2), gsi(5)).timeout_ms(10).retries(1))
        .unwrap();
    let n1 = a.send(SendRequest::new(get(3), gsi(5)).retries(1)).unwrap();
    let n2 = a.send(SendRequest::new(get(4), gsi(5)).retries(1)).unwrap();
    a.modify_timeout(n1, 10).unwrap();
    a.modify_timeout(n2, 10).unwrap();
    let n3 = b.send(SendRequest::new(get(5), gsi(5))).unwrap();
    ([p1, p2, n1, n2], n3)
}

/// A retry needs only a send queue entry (it holds its slot): it must not wait in the ring's
/// queue behind a new send waiting for a slot, when every slot is held by a send whose only
/// way forward is that retry. It used to: `next_locked` stopped at the new send, no slot ever
/// came back, and nothing completed. The kernel's `ib_send_mad` queues retries and new sends
/// alike only for the send queue, whose entries always come back at their completions.
#[test]
fn a_retry_goes_past_a_new_send_waiting_for_the_slot_the_retry_holds() {
    within_real_time(Duration::from_secs(20), || {
        let r = rig_with_two_request_units();
        let a = r.perf_agent();
        let ([p1, p2, n1, n2], n3) = every_slot_held_by_a_send_that_must_retry(&a, &a);
        let done = completions(&r.collect(&a, Duration::from_secs(1)));
        for id in [p1, p2] {
            assert_eq!(
                done.get(&id),
                Some(&(WcStatus::RespTimeoutErr, 0, 1)),
                "{id} timed out after its retry: {done:?}"
            );
        }
        // A retry waits for the send's own timeout (0: none), not the modified one (the
        // kernel's `retry_send` since "IB/mad: Do not save the MRA timeout"): done at its CQE.
        for id in [n1, n2] {
            assert_eq!(
                done.get(&id),
                Some(&(WcStatus::Success, 0, 1)),
                "{id} done after its retry: {done:?}"
            );
        }
        assert_eq!(
            done.get(&n3).map(|c| c.0),
            Some(WcStatus::Success),
            "{done:?}"
        );
        assert_eq!(r.fake.sent().len(), 9, "4 sends, 4 retries, the new send");
        a.deregister();
        assert_eq!(request_units_taken(&r), 0);
        r.assert_clean();
    });
}

/// The same cycle across two agents: deregistering the agent whose retries wait returns (its
/// canceled retries, on no QP, complete in software), and the other agent's send goes.
#[test]
fn deregistration_returns_with_a_retry_behind_another_agents_send_waiting_for_a_slot() {
    within_real_time(Duration::from_secs(20), || {
        let r = rig_with_two_request_units();
        let a = r.perf_agent();
        let b = r.perf_agent();
        let (held, n3) = every_slot_held_by_a_send_that_must_retry(&a, &b);
        // Past the first timeouts: the retries are queued (or gone).
        let _ = r.collect(&a, Duration::from_millis(20));
        a.deregister();
        let done = completions(&r.collect(&b, Duration::from_millis(100)));
        assert_eq!(
            done.get(&n3).map(|c| c.0),
            Some(WcStatus::Success),
            "{done:?}"
        );
        assert_eq!(r.port.census().outstanding, 0, "{held:?} all finished");
        b.deregister();
        assert_eq!(request_units_taken(&r), 0);
        r.assert_clean();
    });
}

/// A port with fewer than [`crate::MIN_SLOTS`] send slots is refused: with one slot, requests
/// could hold every slot (its request limit would be 1), and a send awaiting no response (a
/// reply to a loopback request) would wait for the request it answers.
#[test]
fn a_port_with_fewer_than_two_slots_is_refused() {
    for slots in [0, 1] {
        let fake = FakePort::new(16, 64);
        let base = fake.accounting();
        let config = PortConfig {
            slots: Some(slots),
            ..PortConfig::default()
        };
        let opened = Port::open(fake.clone(), config);
        assert!(
            matches!(opened, Err(MadError::TooFewSlots { slots: s, min: 2 }) if s == slots),
            "{slots} slots: {:?}",
            opened.err()
        );
        assert_eq!(
            fake.accounting().leases_out,
            base.leases_out,
            "nothing leased"
        );
    }
    let r = rig_with_slots(2);
    assert_eq!(
        r.port.shared.ring(SpecialQp::Gsi).unwrap().request_limit,
        1,
        "two slots: one for requests, one kept"
    );
}

/// A send waiting for its response when the device dies completes with WR_FLUSH_ERR
/// (vendor_err 5) after the DeviceFatal event, like every other outstanding send, even when its
/// deadline passed before the pass that sees the death: that pass fires no timer (it would
/// complete it with RESP_TIMEOUT_ERR, or retry it, after its agent was told of the death).
#[test]
fn a_send_waiting_for_its_response_when_the_device_dies_is_flushed_even_past_its_deadline() {
    for retries in [0, 1] {
        let r = rig();
        let a = r.perf_agent();
        let id = a
            .send(
                SendRequest::new(get(1), gsi(5))
                    .timeout_ms(1000)
                    .retries(retries),
            )
            .unwrap();
        r.port.progress();
        assert_eq!(r.port.census().gsi.count(SendState::WaitResp), 1);
        r.fake.make_fatal(false);
        r.fake.wait(r.port.now() + Duration::from_secs(2));
        r.port.shared.next_pass_takes_device_events();
        r.port.progress();
        let ev = queued_events(&a);
        assert!(
            matches!(ev.first(), Some(Event::DeviceFatal { .. })),
            "{ev:?}"
        );
        assert_eq!(
            completions(&ev),
            HashMap::from([(id, (WcStatus::WrFlushErr, 5, 0))]),
            "{retries} retries: flushed, not timed out: {ev:?}"
        );
        assert_eq!(r.fake.sent().len(), 1, "not resent");
        let c = r.port.counters();
        assert_eq!((c.timeouts, c.retries), (0, 0));
        a.deregister();
    }
}

/// Request units taken on QP1's ring.
fn gsi_units_held(r: &Rig) -> u32 {
    r.port.shared.ring(SpecialQp::Gsi).unwrap().requests_held()
}

/// `agent`'s flow-control credits taken and sends in its backlog.
fn credits_and_backlog(agent: &Agent) -> (u32, usize) {
    let fc = crate::ring::lock(&agent.inner.fc);
    (fc.outstanding, fc.backlog.len())
}

/// Request units and flow-control credits return to zero after a mixed run on a ring of 2
/// request units: three SA agents (2 credits each) with retries queued in their backlogs,
/// answers to half the requests, cancels of sends in the backlog, in the ring's queue and of
/// queued retries, a modify, and one agent deregistered mid-flight.
#[test]
fn request_units_and_credits_return_to_zero_after_a_mixed_run() {
    within_real_time(Duration::from_secs(60), || {
        let r = rig_with_two_request_units();
        // Answer even TIDs only.
        r.fake.set_responder(|o| {
            if o.mad[15] % 2 == 0 {
                answer(o)
            } else {
                Vec::new()
            }
        });
        let a = r.agent(AgentSpec::class(SA, 2, MethodMask::NONE));
        let b = r.agent(AgentSpec::class(SA, 2, MethodMask::NONE));
        let c = r.agent(AgentSpec::class(SA, 2, MethodMask::NONE));
        let mut ids = Vec::new();
        for t in 1..=6u64 {
            for (k, ag) in [&a, &b, &c].into_iter().enumerate() {
                let m = mad(SA, 2, 0x01, 0x11, t << 4 | k as u64);
                let id = ag
                    .send(SendRequest::new(m, gsi(5)).timeout_ms(10).retries(2))
                    .unwrap();
                ids.push(id);
            }
        }
        r.port.progress();
        // The run contends: every unit taken, sends waiting in backlogs.
        assert_eq!(gsi_units_held(&r), 2, "{:?}", r.port.census());
        assert!(r.port.census().backlogged > 0, "{:?}", r.port.census());
        let _ = a.cancel(ids[0]);
        let _ = b.cancel(ids[4]);
        let _ = c.cancel(ids[17]);
        let _ = a.modify_timeout(ids[9], 30);
        for step in 1..=5usize {
            pass_at(&r, &a, r.port.now() + Duration::from_millis(10));
            let _ = b.cancel(ids[step * 3 + 1]);
        }
        b.deregister();
        let _ = r.collect(&a, Duration::from_millis(500));
        let _ = r.collect(&c, Duration::from_millis(500));
        let census = r.port.census();
        assert_eq!(gsi_units_held(&r), 0, "request units back: {census:?}");
        assert_eq!(credits_and_backlog(&a), (0, 0), "{census:?}");
        assert_eq!(credits_and_backlog(&c), (0, 0), "{census:?}");
        a.deregister();
        c.deregister();
        r.assert_clean();
    });
}

/// Request units and flow-control credits return to zero when the device dies while sends
/// wait in agents' backlogs (for units or credits) and in the ring's queue holding units.
#[test]
fn request_units_and_credits_return_to_zero_after_a_fatal_error() {
    within_real_time(Duration::from_secs(60), || {
        let r = rig_with_two_request_units();
        let a = r.agent(AgentSpec::class(SA, 2, MethodMask::NONE));
        let b = r.agent(AgentSpec::class(SA, 2, MethodMask::NONE));
        // Sends awaiting no response take the send queue's 2 entries, so sends holding
        // units wait in the ring's queue.
        let perf = r.perf_agent();
        perf.send(SendRequest::new(get(9), gsi(5))).unwrap();
        perf.send(SendRequest::new(get(10), gsi(5))).unwrap();
        for t in 1..=4u64 {
            for ag in [&a, &b] {
                let m = mad(SA, 2, 0x01, 0x11, t);
                ag.send(SendRequest::new(m, gsi(5)).timeout_ms(10).retries(2))
                    .unwrap();
            }
        }
        let before = r.port.census();
        assert_eq!(gsi_units_held(&r), 2, "{before:?}");
        assert!(before.backlogged > 0, "{before:?}");
        r.fake.make_fatal(false);
        let _ = r.collect(&a, Duration::from_millis(200));
        let _ = r.collect(&b, Duration::from_millis(200));
        let _ = r.collect(&perf, Duration::from_millis(200));
        let after = r.port.census();
        assert_eq!(gsi_units_held(&r), 0, "request units back: {after:?}");
        assert_eq!(after.gsi.requests_held, 0, "{after:?}");
        assert_eq!(credits_and_backlog(&a), (0, 0), "{after:?}");
        assert_eq!(credits_and_backlog(&b), (0, 0), "{after:?}");
        assert_eq!((after.backlogged, after.outstanding), (0, 0), "{after:?}");
        a.deregister();
        b.deregister();
        perf.deregister();
    });
}

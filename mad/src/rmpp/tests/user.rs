//! User RMPP (agents registered without the MAD layer's RMPP) after the request's send slot
//! is reused: the later segments of a response still reach the agent whose request it answers,
//! as the kernel finds the agent from the TID however many sends came in between, until the
//! Last segment, deregistration, the 40 s limit, or the table's bound.

use super::*;

/// The raw response segments among `ev` (no send they answer), as (TID, segment number).
fn raw_segments(ev: &[Event]) -> Vec<(u64, u32)> {
    ev.iter()
        .filter_map(|e| match e {
            Event::Recv(m) if m.response_to.is_none() => Some((tid_of(&m.mad), rmpp_of(&m.mad).3)),
            _ => None,
        })
        .collect()
}

/// The whole responses the peer answered GetTables with, by wire TID, in order.
type Kept = Arc<Mutex<Vec<(u64, Vec<u8>)>>>;

/// A peer answering every GetTable with segment 1 only of a 3-segment response; the whole
/// responses are kept by wire TID, in the order the GetTables went out.
fn first_segments_only(r: &Rig) -> Kept {
    let kept = Arc::new(Mutex::new(Vec::new()));
    let k = kept.clone();
    r.fake.set_responder(move |out| {
        if out.mad[3] != method::GET_TABLE {
            return Vec::new();
        }
        let tid = tid_of(&out.mad);
        let msg = sa_message(method::GET_TABLE_RESP, tid, 500, true, 2);
        let first = segments_of(&msg, &[1]);
        k.lock().unwrap().push((tid, msg));
        first.into_iter().map(from_peer).collect()
    });
    kept
}

/// A GetTable from `client` (client TID 5) that expects a response; its segment 1 answers it.
fn get_table(r: &Rig, client: &crate::Agent) {
    get_table_with_tid(r, client, 5);
}

/// A GetTable from `client` with the client TID `tid` that expects a response; its segment 1
/// answers it.
pub(super) fn get_table_with_tid(r: &Rig, client: &crate::Agent, tid: u64) {
    let id = client
        .send(
            SendRequest::new(sa_message(method::GET_TABLE, tid, 0, false, 0), to_peer())
                .timeout_ms(100),
        )
        .unwrap();
    let ev = r.collect(client, Duration::from_millis(5));
    assert!(
        matches!(&ev[..], [Event::Recv(m), Event::Send(c)]
            if m.response_to.map(|s| s.id) == Some(id) && c.status == WcStatus::Success),
        "segment 1 answers the GetTable: {ev:?}"
    );
}

/// One GetTable of a user-RMPP client answered by segment 1 only, then `n` other sends:
/// the client, and the TID and whole response of the transfer still under way.
fn transfer_after_sends(r: &Rig, n: u64) -> (crate::Agent, u64, Vec<u8>) {
    let kept = first_segments_only(r);
    let client = r.agent(AgentSpec::responses_only(SpecialQp::Gsi));
    get_table(r, &client);
    other_sends(r, &client, n);
    let (tid, msg) = kept.lock().unwrap()[0].clone();
    (client, tid, msg)
}

fn inject_segments(r: &Rig, msg: &[u8], nums: &[u32]) {
    for s in segments_of(msg, nums) {
        r.fake.inject(from_peer(s));
    }
}

#[test]
fn later_segments_reach_the_user_rmpp_agent_however_many_sends_came_between() {
    for n in [0, 33, 64, 300] {
        let r = Rig::new();
        let (client, tid, msg) = transfer_after_sends(&r, n);
        inject_segments(&r, &msg, &[2, 3]);
        let ev = r.collect(&client, Duration::from_millis(5));
        assert_eq!(
            raw_segments(&ev),
            vec![(tid, 2), (tid, 3)],
            "after {n} sends: {ev:?}"
        );
        assert_eq!(r.port.rmpp_counters().raw_delivered, 2, "after {n} sends");
        assert_eq!(r.port.rmpp_census().user_transfers, 0, "gone at Last");
        client.deregister();
        r.assert_clean();
    }
}

#[test]
fn a_segment_after_the_last_one_is_dropped_and_counted() {
    let r = Rig::new();
    let (client, tid, msg) = transfer_after_sends(&r, 64);
    assert_eq!(r.port.rmpp_census().user_transfers, 1, "remembered");
    inject_segments(&r, &msg, &[2, 3]);
    let ev = r.collect(&client, Duration::from_millis(5));
    assert_eq!(raw_segments(&ev), vec![(tid, 2), (tid, 3)]);
    assert_eq!(r.port.rmpp_census().user_transfers, 0, "gone at Last");
    // A copy of segment 2 after the Last one: the transfer has ended for us.
    let drops = r.port.counters().drops.total();
    inject_segments(&r, &msg, &[2]);
    let ev = r.collect(&client, Duration::from_millis(5));
    assert!(ev.is_empty(), "{ev:?}");
    assert_eq!(
        r.port.counters().drops.total(),
        drops + 1,
        "dropped, counted"
    );
    assert_eq!(r.port.rmpp_counters().raw_delivered, 2);
    client.deregister();
    r.assert_clean();
}

#[test]
fn an_abort_from_the_responder_is_delivered_and_ends_the_transfer() {
    let r = Rig::new();
    let (client, tid, msg) = transfer_after_sends(&r, 64);
    // The responder gives up after segment 2 (its ABORT answers the client's ACK).
    inject_segments(&r, &msg, &[2]);
    let seg = segments_of(&msg, &[2])[0];
    let ack = control(&seg, rmpp_type::ACK, 0, 2, 3);
    let abort = control(&ack, rmpp_type::ABORT, rmpp_status::T2L, 0, 0);
    r.fake.inject(from_peer(abort));
    let ev = r.collect(&client, Duration::from_millis(5));
    assert_eq!(raw_segments(&ev), vec![(tid, 2), (tid, 0)], "{ev:?}");
    assert_eq!(r.port.rmpp_census().user_transfers, 0, "gone at the ABORT");
    inject_segments(&r, &msg, &[3]);
    assert!(r.collect(&client, Duration::from_millis(5)).is_empty());
    client.deregister();
    r.assert_clean();
}

#[test]
fn deregistration_forgets_the_agents_transfers_and_others_keep_theirs() {
    let r = Rig::new();
    let kept = first_segments_only(&r);
    let gone = r.agent(AgentSpec::responses_only(SpecialQp::Gsi));
    let stays = r.agent(AgentSpec::responses_only(SpecialQp::Gsi));
    get_table(&r, &gone);
    get_table(&r, &stays);
    other_sends(&r, &stays, 64);
    assert_eq!(r.port.rmpp_census().user_transfers, 2);
    gone.deregister();
    assert_eq!(r.port.rmpp_census().user_transfers, 1, "the other's stays");
    let kept = kept.lock().unwrap().clone();
    let drops = r.port.counters().drops.total();
    inject_segments(&r, &kept[0].1, &[2]);
    inject_segments(&r, &kept[1].1, &[2]);
    let ev = r.collect(&stays, Duration::from_millis(5));
    assert_eq!(raw_segments(&ev), vec![(kept[1].0, 2)], "{ev:?}");
    assert_eq!(
        r.port.counters().drops.total(),
        drops + 1,
        "the gone one's dropped"
    );
    assert_eq!(r.port.rmpp_counters().raw_delivered, 1);
    stays.deregister();
    assert_eq!(r.port.rmpp_census(), super::super::RmppCensus::default());
    r.assert_clean();
}

#[test]
fn the_table_keeps_to_its_bound_dropping_the_oldest() {
    let r = Rig::new();
    r.port.set_rmpp_limits(super::super::RmppLimits {
        max_user_transfers: 4,
        ..r.port.rmpp_limits()
    });
    let kept = first_segments_only(&r);
    let client = r.agent(AgentSpec::responses_only(SpecialQp::Gsi));
    for _ in 0..6 {
        get_table(&r, &client);
    }
    assert_eq!(r.port.rmpp_census().user_transfers, 4);
    assert_eq!(r.port.rmpp_counters().user_transfers_evicted, 2);
    other_sends(&r, &client, 64);
    let kept = kept.lock().unwrap().clone();
    for (_, msg) in &kept {
        inject_segments(&r, msg, &[2]);
    }
    let ev = r.collect(&client, Duration::from_millis(5));
    let newest: Vec<(u64, u32)> = kept[2..].iter().map(|(t, _)| (*t, 2)).collect();
    assert_eq!(
        raw_segments(&ev),
        newest,
        "the two oldest were forgotten: {ev:?}"
    );
    client.deregister();
    assert_eq!(r.port.rmpp_census().user_transfers, 0);
    r.assert_clean();
}

#[test]
fn a_transfer_without_its_last_segment_is_forgotten_after_40_s() {
    let r = Rig::new();
    let (client, tid, msg) = transfer_after_sends(&r, 64);
    // Segment 2 well inside the limit, which it does not move.
    r.collect(&client, Duration::from_secs(30));
    inject_segments(&r, &msg, &[2]);
    let ev = r.collect(&client, Duration::from_millis(5));
    assert_eq!(raw_segments(&ev), vec![(tid, 2)]);
    r.collect(&client, Duration::from_secs(11));
    let k = r.port.rmpp_counters();
    assert_eq!(k.user_transfers_expired, 1);
    assert_eq!(r.port.rmpp_census().user_transfers, 0);
    inject_segments(&r, &msg, &[3]);
    assert!(r.collect(&client, Duration::from_millis(5)).is_empty());
    assert_eq!(r.port.rmpp_counters().raw_delivered, 1);
    client.deregister();
    r.assert_clean();
}

#[test]
fn a_new_send_in_the_old_slot_gets_its_own_segments() {
    // A's GetTable, then B's GetTables (same client TID) until every slot has held one of
    // B's, so one of them took A's slot again: the same TID upper half but for the
    // generation. Each response's later segments reach the agent that asked.
    let r = Rig::new();
    let kept = first_segments_only(&r);
    let a = r.agent(AgentSpec::responses_only(SpecialQp::Gsi));
    let b = r.agent(AgentSpec::responses_only(SpecialQp::Gsi));
    get_table(&r, &a);
    for _ in 0..64 {
        get_table(&r, &b);
    }
    let kept = kept.lock().unwrap().clone();
    let ring = r.port.shared.ring(SpecialQp::Gsi).unwrap();
    let slot_of = |tid: u64| ring.layout.decode(tid, ring.slot_count()).unwrap().index;
    assert!(
        kept[1..]
            .iter()
            .any(|(t, _)| slot_of(*t) == slot_of(kept[0].0)),
        "one of B's GetTables reused A's slot"
    );
    // A few at a time: the receive queue holds 64.
    let (mut ev_a, mut ev_b) = (Vec::new(), Vec::new());
    for (_, msg) in &kept {
        inject_segments(&r, msg, &[2, 3]);
        ev_a.extend(r.collect(&a, Duration::from_millis(1)));
        ev_b.extend(r.collect(&b, Duration::from_millis(1)));
    }
    assert_eq!(raw_segments(&ev_a), vec![(kept[0].0, 2), (kept[0].0, 3)]);
    let want_b: Vec<(u64, u32)> = kept[1..]
        .iter()
        .flat_map(|(t, _)| [(*t, 2), (*t, 3)])
        .collect();
    assert_eq!(raw_segments(&ev_b), want_b);
    assert_eq!(r.port.rmpp_census().user_transfers, 0);
    a.deregister();
    b.deregister();
    r.assert_clean();
}

/// The TID a MAD sent by `client` went to the peer with (the last such send).
fn wire_tid_of_last(r: &Rig, method: u8, kind: u8) -> u64 {
    let sent = r.fake.sent();
    let o = sent
        .iter()
        .rev()
        .find(|o| o.mad[3] == method && rmpp_of(&o.mad).0 == kind)
        .expect("sent");
    tid_of(&o.mad)
}

#[test]
fn the_users_ack_stop_and_abort_of_a_response_keep_its_tid() {
    // The kernel rewrites a request's TID upper half to the agent's hi_tid, which for the
    // ACK of a response to the agent's own request leaves it as it is: the responder finds
    // its transfer by that TID. However many sends came between.
    for n in [0, 64] {
        let r = Rig::new();
        let (client, tid, msg) = transfer_after_sends(&r, n);
        let seg1 = segments_of(&msg, &[1])[0];
        for (kind, status, seg, win) in [
            (rmpp_type::ACK, 0, 1, 9),
            (rmpp_type::STOP, rmpp_status::RESOURCES_EXHAUSTED, 0, 0),
            (rmpp_type::ABORT, rmpp_status::T2L, 0, 0),
        ] {
            let ctl = control(&seg1, kind, status, seg, win);
            assert_eq!(ctl[3], method::GET_TABLE, "a request method");
            client
                .send(SendRequest::new(ctl.to_vec(), to_peer()))
                .unwrap();
            let c = completions(&r.collect(&client, Duration::from_millis(5)));
            assert_eq!(c.len(), 1);
            assert_eq!(c[0].tid, tid, "the completion's TID is the wire's");
            assert_eq!(
                wire_tid_of_last(&r, method::GET_TABLE, kind),
                tid,
                "type {kind} after {n} sends went with the response's TID"
            );
        }
        client.deregister();
        r.assert_clean();
    }
}

#[test]
fn another_agents_response_tid_is_not_kept() {
    // B sends an ACK naming A's response: not a transfer of B's, so its TID is rewritten as
    // any request's (B cannot speak for A's transfers).
    let r = Rig::new();
    let (a, tid, msg) = transfer_after_sends(&r, 0);
    let b = r.agent(AgentSpec::responses_only(SpecialQp::Gsi));
    let ack = control(&segments_of(&msg, &[1])[0], rmpp_type::ACK, 0, 1, 9);
    b.send(SendRequest::new(ack.to_vec(), to_peer())).unwrap();
    assert_eq!(
        completions(&r.collect(&b, Duration::from_millis(5))).len(),
        1
    );
    let wire = wire_tid_of_last(&r, method::GET_TABLE, rmpp_type::ACK);
    assert_ne!(wire, tid, "rewritten");
    assert_eq!(
        wire & 0xFFFF_FFFF,
        tid & 0xFFFF_FFFF,
        "the client's lower half"
    );
    a.deregister();
    b.deregister();
    r.assert_clean();
}

/// A peer that acknowledges each DATA segment of a GetMulti (window 3), and answers the
/// Last one with a one-segment GetMultiResp.
fn getmulti_receiver(r: &Rig) {
    r.fake.set_responder(move |out| {
        let f = rmpp_of(&out.mad);
        if out.mad[3] != method::GET_MULTI || f.0 != rmpp_type::DATA {
            return Vec::new();
        }
        let mut back = vec![from_peer(control(&out.mad, rmpp_type::ACK, 0, f.3, 3))];
        if f.1 & flags::LAST != 0 {
            let resp = sa_message(method::GET_MULTI_RESP, tid_of(&out.mad), 20, true, 6);
            back.extend(segments_of(&resp, &[1]).into_iter().map(from_peer));
        }
        back
    });
}

#[test]
fn the_segments_of_a_user_rmpp_request_all_go_with_the_first_ones_tid() {
    // The user cuts a GetMulti into 3 segments, each written with its own TID (client TID
    // 0x33): the first takes a TID as any request, the later ones go with that TID, as the
    // kernel sends every segment with hi_tid and the client's lower half. The peer's ACKs
    // and response reach the agent with that TID, however many sends came between.
    for n in [0, 64] {
        let r = Rig::new();
        getmulti_receiver(&r);
        let client = r.agent(AgentSpec::responses_only(SpecialQp::Gsi));
        let msg = sa_message(method::GET_MULTI, 0x33, 500, true, 1);
        let segs = segments_of(&msg, &[1, 2, 3]);
        client
            .send(SendRequest::new(segs[0].to_vec(), to_peer()))
            .unwrap();
        let ev = r.collect(&client, Duration::from_millis(5));
        let wire = wire_tid_of_last(&r, method::GET_MULTI, rmpp_type::DATA);
        assert_eq!(completions(&ev)[0].tid, wire);
        assert_eq!(raw_segments(&ev), vec![(wire, 1)], "ACK 1: {ev:?}");
        other_sends(&r, &client, n);
        for seg in &segs[1..] {
            client
                .send(SendRequest::new(seg.to_vec(), to_peer()))
                .unwrap();
        }
        let ev = r.collect(&client, Duration::from_millis(5));
        let sent: Vec<u64> = r
            .fake
            .sent()
            .iter()
            .filter(|o| o.mad[3] == method::GET_MULTI)
            .map(|o| tid_of(&o.mad))
            .collect();
        assert_eq!(sent, vec![wire; 3], "after {n} sends");
        assert_eq!(
            completions(&ev).iter().map(|c| c.tid).collect::<Vec<_>>(),
            vec![wire; 2]
        );
        // ACKs 2 and 3, then the response (segment 1 of 1).
        assert_eq!(
            raw_segments(&ev),
            vec![(wire, 2), (wire, 3), (wire, 1)],
            "after {n} sends: {ev:?}"
        );
        let Some(Event::Recv(resp)) = ev.iter().rev().find(|e| matches!(e, Event::Recv(_))) else {
            panic!("{ev:?}")
        };
        assert_eq!(resp.mad[3], method::GET_MULTI_RESP);
        client.deregister();
        r.assert_clean();
    }
}

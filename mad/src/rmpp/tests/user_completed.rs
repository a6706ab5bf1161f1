//! User RMPP after the response's Last segment: the transfer is kept, completed, for
//! [`super::super::CLEANUP_DELAY`], so the user's final ACK of the Last segment (a request
//! method, sent after it) and its ACKs of resent copies of the Last segment go with the
//! response's TID, as the kernel's `ib_umad_write` sends them with the agent's `hi_tid`,
//! however many sends of other agents took the request's send slot meanwhile. A resent Last
//! segment reaches the user (the kernel hands every RMPP-active response of a user-RMPP
//! agent to it), any other segment after the Last one is dropped. Completed transfers go at
//! the end of the delay, at deregistration, at the device's death, and first at the bound.

use super::*;
use crate::rmpp::{CLEANUP_DELAY, RmppCensus, RmppLimits};

/// The responses a peer sent, by wire TID, in order.
type Kept = Arc<Mutex<Vec<(u64, Vec<u8>)>>>;

/// A peer answering every GetTable with segments `segs` of a 3-segment response (or, with
/// `one`, with the whole response in one segment), keeping the responses by wire TID.
fn responder(r: &Rig, segs: &'static [u32], one: bool) -> Kept {
    let kept = Arc::new(Mutex::new(Vec::new()));
    let k = kept.clone();
    r.fake.set_responder(move |out| {
        if out.mad[3] != method::GET_TABLE || rmpp_of(&out.mad).0 == rmpp_type::ACK {
            return Vec::new();
        }
        let tid = tid_of(&out.mad);
        let msg = sa_message(
            method::GET_TABLE_RESP,
            tid,
            if one { 20 } else { 500 },
            true,
            7,
        );
        let back = segments_of(&msg, segs);
        k.lock().unwrap().push((tid, msg));
        back.into_iter().map(from_peer).collect()
    });
    kept
}

/// `client`'s GetTable (client TID 0x42), answered by its response's segment 1.
fn get_table(r: &Rig, client: &crate::Agent) {
    super::user::get_table_with_tid(r, client, 0x42);
}

/// The segments among `ev` that answer no send, as (TID, RMPP type, segment number).
fn unmatched(ev: &[Event]) -> Vec<(u64, u8, u32)> {
    ev.iter()
        .filter_map(|e| match e {
            Event::Recv(m) if m.response_to.is_none() => {
                let f = rmpp_of(&m.mad);
                Some((tid_of(&m.mad), f.0, f.3))
            }
            _ => None,
        })
        .collect()
}

/// The agent whose send was the last in the QP1 slot `tid` names.
fn slot_owner(r: &Rig, tid: u64) -> u32 {
    let ring = r.port.shared.ring(SpecialQp::Gsi).unwrap();
    let i = ring.layout.decode(tid, ring.slot_count()).unwrap().index;
    ring.slots[i as usize]
        .owner
        .load(std::sync::atomic::Ordering::Acquire)
}

/// Who sends between the response's Last segment and the user's ACK of it.
#[derive(Clone, Copy, Debug)]
enum Between {
    Nobody,
    /// The client itself, until every slot was handed out again.
    Client,
    /// Another agent, until every slot (the GetTable's among them) was its.
    Other,
}

/// A client's GetTable answered with segment 1 of 3 (then segments 2 and 3 come), with
/// the sends of `between` after the GetTable: the client, the other agent, the response's
/// TID and message.
fn transfer(r: &Rig, between: Between) -> (crate::Agent, crate::Agent, u64, Vec<u8>) {
    let kept = responder(r, &[1], false);
    let client = r.agent(AgentSpec::responses_only(SpecialQp::Gsi));
    let other = r.agent(AgentSpec::responses_only(SpecialQp::Gsi));
    get_table(r, &client);
    let (tid, msg) = kept.lock().unwrap()[0].clone();
    match between {
        Between::Nobody => {}
        Between::Client => other_sends(r, &client, 64),
        Between::Other => other_sends(r, &other, 64),
    }
    let want = match between {
        Between::Other => other.id().0,
        _ => client.id().0,
    };
    assert_eq!(slot_owner(r, tid), want, "{between:?}: the GetTable's slot");
    for seg in segments_of(&msg, &[2, 3]) {
        r.fake.inject(from_peer(seg));
    }
    let ev = r.collect(&client, Duration::from_millis(5));
    assert_eq!(
        unmatched(&ev),
        vec![(tid, rmpp_type::DATA, 2), (tid, rmpp_type::DATA, 3)],
        "{between:?}"
    );
    (client, other, tid, msg)
}

/// `client` acknowledges segment `seg` of `msg` (a GetTable ACK, as a user builds it from
/// the segment): the TID it went to the peer with, and its completion's.
fn ack(r: &Rig, client: &crate::Agent, msg: &[u8], seg: u32) -> (u64, u64) {
    let segment = segments_of(msg, &[seg])[0];
    let mad = control(&segment, rmpp_type::ACK, 0, seg, seg);
    assert_eq!(mad[3], method::GET_TABLE, "a request method");
    client
        .send(SendRequest::new(mad.to_vec(), to_peer()))
        .unwrap();
    let done = completions(&r.collect(client, Duration::from_millis(5)));
    assert_eq!(done.len(), 1);
    let out = r
        .fake
        .sent()
        .into_iter()
        .rev()
        .find(|o| o.mad[3] == method::GET_TABLE && rmpp_of(&o.mad).0 == rmpp_type::ACK)
        .expect("the ACK went out");
    (tid_of(&out.mad), done[0].tid)
}

#[test]
fn the_final_ack_goes_with_the_responses_tid_whoever_took_the_slot_meanwhile() {
    for between in [Between::Nobody, Between::Client, Between::Other] {
        let r = Rig::new();
        let (client, other, tid, msg) = transfer(&r, between);
        assert_eq!(
            ack(&r, &client, &msg, 3),
            (tid, tid),
            "{between:?}: the final ACK on the wire, and its completion"
        );
        client.deregister();
        other.deregister();
        r.assert_clean();
    }
}

#[test]
fn the_final_ack_of_a_one_segment_response_goes_with_its_tid_after_another_agent_took_the_slot() {
    let r = Rig::new();
    let kept = responder(&r, &[1], true);
    let client = r.agent(AgentSpec::responses_only(SpecialQp::Gsi));
    let other = r.agent(AgentSpec::responses_only(SpecialQp::Gsi));
    get_table(&r, &client);
    let (tid, msg) = kept.lock().unwrap()[0].clone();
    assert_eq!(
        rmpp_of(&segments_of(&msg, &[1])[0]).1 & flags::LAST,
        flags::LAST
    );
    other_sends(&r, &other, 64);
    assert_eq!(slot_owner(&r, tid), other.id().0);
    assert_eq!(ack(&r, &client, &msg, 1), (tid, tid));
    let c = r.port.rmpp_census();
    assert_eq!(
        (c.user_transfers, c.user_transfers_completed),
        (0, 1),
        "completed at its first segment"
    );
    client.deregister();
    other.deregister();
    r.assert_clean();
}

#[test]
fn a_resent_last_segment_reaches_the_user_and_its_ack_goes_with_the_responses_tid() {
    for between in [Between::Other, Between::Nobody] {
        let r = Rig::new();
        let (client, other, tid, msg) = transfer(&r, between);
        // The final ACK is lost; the responder sends the Last segment again 2 s later.
        ack(&r, &client, &msg, 3);
        r.collect(&client, Duration::from_secs(2));
        let delivered = r.port.rmpp_counters().raw_delivered;
        r.fake.inject(from_peer(segments_of(&msg, &[3])[0]));
        let ev = r.collect(&client, Duration::from_millis(5));
        assert_eq!(
            unmatched(&ev),
            vec![(tid, rmpp_type::DATA, 3)],
            "{between:?}: the copy reaches the user"
        );
        assert_eq!(r.port.rmpp_counters().raw_delivered, delivered + 1);
        assert_eq!(
            ack(&r, &client, &msg, 3),
            (tid, tid),
            "{between:?}: the ACK again"
        );
        // Another segment after the Last one is dropped and counted, slot reused or not.
        let drops = r.port.counters().drops.total();
        r.fake.inject(from_peer(segments_of(&msg, &[2])[0]));
        let ev = r.collect(&client, Duration::from_millis(5));
        assert!(unmatched(&ev).is_empty(), "{between:?}: {ev:?}");
        assert_eq!(
            r.port.counters().drops.total(),
            drops + 1,
            "{between:?}: dropped, counted"
        );
        client.deregister();
        other.deregister();
        r.assert_clean();
    }
}

#[test]
fn a_completed_transfer_is_forgotten_after_the_cleanup_delay() {
    let r = Rig::new();
    let (client, other, tid, msg) = transfer(&r, Between::Other);
    let c = r.port.rmpp_census();
    assert_eq!((c.user_transfers, c.user_transfers_completed), (0, 1));
    // Still there just before the delay's end (an ACK keeps the TID), gone after it.
    r.collect(
        &client,
        CLEANUP_DELAY.saturating_sub(Duration::from_secs(1)),
    );
    assert_eq!(r.port.rmpp_census().user_transfers_completed, 1);
    assert_eq!(ack(&r, &client, &msg, 3).0, tid);
    r.collect(&client, Duration::from_secs(2));
    assert_eq!(r.port.rmpp_census(), RmppCensus::default());
    let k = r.port.rmpp_counters();
    assert_eq!(
        (k.user_transfers_expired, k.user_transfers_evicted),
        (0, 0),
        "a completed transfer neither expired nor was evicted"
    );
    // Now a copy of the Last segment names no transfer, and an ACK is any request.
    let drops = r.port.counters().drops.total();
    r.fake.inject(from_peer(segments_of(&msg, &[3])[0]));
    assert!(unmatched(&r.collect(&client, Duration::from_millis(5))).is_empty());
    assert_eq!(r.port.counters().drops.total(), drops + 1);
    assert_ne!(ack(&r, &client, &msg, 3).0, tid);
    client.deregister();
    other.deregister();
    r.assert_clean();
}

#[test]
fn a_resent_last_segment_does_not_extend_the_cleanup_delay() {
    let r = Rig::new();
    let (client, other, tid, msg) = transfer(&r, Between::Other);
    r.collect(&client, Duration::from_secs(8));
    r.fake.inject(from_peer(segments_of(&msg, &[3])[0]));
    let ev = r.collect(&client, Duration::from_millis(5));
    assert_eq!(unmatched(&ev), vec![(tid, rmpp_type::DATA, 3)]);
    r.collect(&client, Duration::from_secs(3));
    assert_eq!(
        r.port.rmpp_census().user_transfers_completed,
        0,
        "10 s after the first Last segment"
    );
    client.deregister();
    other.deregister();
    r.assert_clean();
}

#[test]
fn deregistration_and_device_death_forget_completed_transfers() {
    let r = Rig::new();
    let kept = responder(&r, &[1], false);
    let a = r.agent(AgentSpec::responses_only(SpecialQp::Gsi));
    let b = r.agent(AgentSpec::responses_only(SpecialQp::Gsi));
    get_table(&r, &a);
    get_table(&r, &b);
    let kept = kept.lock().unwrap().clone();
    for ((_, msg), agent) in kept.iter().zip([&a, &b]) {
        for seg in segments_of(msg, &[2, 3]) {
            r.fake.inject(from_peer(seg));
        }
        assert_eq!(
            unmatched(&r.collect(agent, Duration::from_millis(5))).len(),
            2
        );
    }
    assert_eq!(r.port.rmpp_census().user_transfers_completed, 2);
    a.deregister();
    assert_eq!(
        r.port.rmpp_census().user_transfers_completed,
        1,
        "the other's stays"
    );
    r.fake.make_fatal(false);
    r.port.shared.next_pass_takes_device_events();
    r.port.progress();
    assert_eq!(r.port.rmpp_census(), RmppCensus::default());
    b.deregister();
    assert_eq!(r.fake.faults(), 0);
    assert_eq!(r.port.census().outstanding, 0);
}

#[test]
fn at_the_bound_completed_transfers_give_way_before_any_under_way() {
    let r = Rig::new();
    r.port.set_rmpp_limits(RmppLimits {
        max_user_transfers: 4,
        ..r.port.rmpp_limits()
    });
    let kept = responder(&r, &[1], false);
    let client = r.agent(AgentSpec::responses_only(SpecialQp::Gsi));
    for _ in 0..4 {
        get_table(&r, &client);
    }
    // The two oldest complete.
    for (_, msg) in &kept.lock().unwrap().clone()[..2] {
        for seg in segments_of(msg, &[2, 3]) {
            r.fake.inject(from_peer(seg));
        }
    }
    assert_eq!(
        unmatched(&r.collect(&client, Duration::from_millis(5))).len(),
        4
    );
    let c = r.port.rmpp_census();
    assert_eq!((c.user_transfers, c.user_transfers_completed), (2, 2));
    // Two new transfers take the completed ones' room; a third the oldest under way's.
    get_table(&r, &client);
    get_table(&r, &client);
    let c = r.port.rmpp_census();
    assert_eq!((c.user_transfers, c.user_transfers_completed), (4, 0));
    assert_eq!(r.port.rmpp_counters().user_transfers_evicted, 0);
    get_table(&r, &client);
    assert_eq!(r.port.rmpp_census().user_transfers, 4);
    assert_eq!(r.port.rmpp_counters().user_transfers_evicted, 1);
    client.deregister();
    assert_eq!(r.port.rmpp_census(), RmppCensus::default());
    r.assert_clean();
}

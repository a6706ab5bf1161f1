//! Segments of a response to a single-MAD request (a ring TID) of an agent with RMPP after the
//! request's send slot went to other sends: the kernel's `continue_rmpp` finds the reassembly
//! by the segment alone (TID, source QP, LID, class, version, method), whatever became of the
//! send, so a late copy is acknowledged again and a transfer still coming in is acknowledged
//! to its end.

use super::*;

/// A client with RMPP whose single-MAD GetTable (client TID 0x77, response timeout
/// `timeout_ms`) the peer answers with segments `segs` of a 3-segment GetTableResp (kept in
/// the returned cell); the ACKs the client sends are logged as (segment, window).
#[allow(clippy::type_complexity)]
fn get_table(
    segs: &'static [u32],
    timeout_ms: u32,
) -> (
    Rig,
    crate::Agent,
    crate::SendId,
    Arc<Mutex<Vec<u8>>>,
    Arc<Mutex<Vec<(u32, u32)>>>,
) {
    let r = Rig::new();
    let response = Arc::new(Mutex::new(Vec::new()));
    let acks = Arc::new(Mutex::new(Vec::new()));
    let (resp2, acks2) = (response.clone(), acks.clone());
    r.fake.set_responder(move |out| {
        let f = rmpp_of(&out.mad);
        if out.mad[3] == method::GET_TABLE && f.0 == rmpp_type::ACK {
            acks2.lock().unwrap().push((f.3, f.4));
            return Vec::new();
        }
        if out.mad[3] != method::GET_TABLE {
            return Vec::new();
        }
        let msg = sa_message(method::GET_TABLE_RESP, tid_of(&out.mad), 500, true, 4);
        resp2.lock().unwrap().clone_from(&msg);
        segments_of(&msg, segs).into_iter().map(from_peer).collect()
    });
    let client = r.agent(AgentSpec::responses_only(SpecialQp::Gsi).with_rmpp(1));
    let id = client
        .send(
            SendRequest::new(sa_message(method::GET_TABLE, 0x77, 20, false, 0), to_peer())
                .timeout_ms(timeout_ms),
        )
        .unwrap();
    (r, client, id, response, acks)
}

#[test]
fn a_late_copy_of_the_last_segment_is_acknowledged_again_however_many_sends_came_between() {
    for n in [0, 200] {
        let (r, client, id, response, acks) = get_table(&[1, 2, 3], 1000);
        let ev = r.collect(&client, Duration::from_millis(10));
        assert!(
            matches!(&ev[..], [Event::Recv(m), Event::Send(c)]
                if m.response_to.map(|s| s.id) == Some(id) && c.status == WcStatus::Success),
            "{ev:?}"
        );
        assert_eq!(*acks.lock().unwrap(), vec![(1, 9), (3, 9)]);
        other_sends(&r, &client, n);
        let before = r.port.rmpp_counters();
        // Our last ACK was lost: the peer sends segment 3 again.
        let msg = response.lock().unwrap().clone();
        r.fake.inject(from_peer(segments_of(&msg, &[3])[0]));
        let ev = r.collect(&client, Duration::from_millis(10));
        assert!(
            ev.is_empty(),
            "nothing delivered twice after {n} sends: {ev:?}"
        );
        let after = r.port.rmpp_counters();
        assert_eq!(
            after.acks_sent,
            before.acks_sent + 1,
            "acknowledged again after {n} sends"
        );
        assert_eq!(acks.lock().unwrap().last(), Some(&(3, 9)));
        assert_eq!(after.transfers_received, before.transfers_received);
        client.deregister();
        r.assert_clean();
    }
}

#[test]
fn a_response_whose_request_timed_out_and_whose_slot_was_reused_is_acknowledged_to_its_end() {
    for n in [0, 200] {
        // Only segment 1 comes at first; the request times out (50 ms) before the rest.
        let (r, client, id, response, acks) = get_table(&[1], 50);
        let c = completions(&r.collect(&client, Duration::from_millis(200)));
        assert_eq!(c.len(), 1);
        assert_eq!((c[0].id, c[0].status), (id, WcStatus::RespTimeoutErr));
        other_sends(&r, &client, n);
        let msg = response.lock().unwrap().clone();
        for seg in segments_of(&msg, &[2, 3]) {
            r.fake.inject(from_peer(seg));
        }
        let ev = r.collect(&client, Duration::from_millis(10));
        assert!(ev.is_empty(), "the request has ended: {ev:?}");
        assert_eq!(
            *acks.lock().unwrap(),
            vec![(1, 9), (3, 9)],
            "reassembled and acknowledged to the end after {n} sends"
        );
        // No T2L abort later: the reassembly completed.
        r.collect(&client, Duration::from_secs(45));
        let k = r.port.rmpp_counters();
        assert_eq!(
            (k.reassembly_timeouts, k.aborts_sent),
            (0, 0),
            "after {n} sends"
        );
        client.deregister();
        r.assert_clean();
    }
}

#[test]
fn a_response_to_an_rmpp_request_that_ended_before_it_came_is_acknowledged_then_dropped() {
    // The GetMulti (sent with RMPP: an RMPP TID) times out before any of its response comes;
    // the kernel still finds the agent by the TID, reassembles and acknowledges to the end,
    // then drops the message no send waits for.
    let (r, client, id, response, acks) = super::rmpp_request(&[], 50);
    let c = completions(&r.collect(&client, Duration::from_millis(200)));
    assert_eq!(c.len(), 1);
    assert_eq!((c[0].id, c[0].status), (id, WcStatus::RespTimeoutErr));
    assert_eq!(
        r.port.rmpp_census().ended_requests,
        1,
        "its agent remembered"
    );
    super::rest_after_the_request_ended(&r, &client, &response, &acks, &[1, 2, 3]);
    r.collect(&client, Duration::from_secs(45));
    let k = r.port.rmpp_counters();
    assert_eq!((k.reassembly_timeouts, k.aborts_sent), (0, 0));
    assert_eq!(
        r.port.rmpp_census().ended_requests,
        0,
        "forgotten after 40 s"
    );
    client.deregister();
    r.assert_clean();
}

#[test]
fn a_bad_ack_for_an_rmpp_request_that_ended_is_answered_with_abort() {
    // As the kernel's process_rmpp_ack (the agent found by the TID): an ACK with a status
    // is refused with ABORT (bad status) even when no transfer is left for it.
    let (r, client, id, _, _) = super::rmpp_request(&[], 50);
    let c = completions(&r.collect(&client, Duration::from_millis(200)));
    assert_eq!((c[0].id, c[0].status), (id, WcStatus::RespTimeoutErr));
    let sent = r.fake.sent();
    let req = sent
        .iter()
        .find(|o| o.mad[3] == method::GET_MULTI && rmpp_of(&o.mad).0 == rmpp_type::DATA)
        .expect("the request's segment");
    let bad = control(&req.mad, rmpp_type::ACK, 0x7F, 1, 1);
    assert_eq!(bad[3], method::GET_MULTI_RESP, "a response method");
    r.fake.inject(from_peer(bad));
    r.collect(&client, Duration::from_millis(10));
    assert_eq!(
        super::refusals(&r),
        vec![(rmpp_type::ABORT, rmpp_status::BAD_STATUS)]
    );
    client.deregister();
    assert_eq!(
        r.port.rmpp_census().ended_requests,
        0,
        "forgotten with its agent"
    );
    r.assert_clean();
}

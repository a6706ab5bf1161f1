//! A response arriving for an agent that is deregistering: the kernel's
//! `ib_unregister_mad_agent` takes the agent out of the port's table first, so nothing after
//! that starts a reassembly for it (which would hold the gone agent, be acknowledged, and end
//! in ABORT T2L 40 s later).

use super::*;

#[test]
fn a_response_segment_during_deregistration_starts_no_reassembly() {
    let r = Rig::new();
    let client = r.agent(AgentSpec::responses_only(SpecialQp::Gsi).with_rmpp(1));
    let other = r.agent(AgentSpec::responses_only(SpecialQp::Gsi));
    // A one-segment GetMulti sent with RMPP (an RMPP TID); its send CQE is held, so its
    // transfer stays in the table after deregistration cancels it.
    r.fake.hold_send_cqes(true);
    client
        .send(
            SendRequest::new(sa_message(method::GET_MULTI, 0x42, 20, true, 1), to_peer())
                .timeout_ms(1000),
        )
        .unwrap();
    r.collect(&other, Duration::from_millis(1));
    let sent = r.fake.sent();
    assert_eq!(sent.len(), 1, "the segment went out");
    let tid = tid_of(&sent[0].mad);
    r.fake.set_auto(false);
    let agents = r.port.census().agents;
    let gone = std::thread::spawn(move || client.deregister());
    while r.port.census().agents == agents {
        std::thread::yield_now();
    }
    // Deregistration has begun (the agent is out of the table) and waits for the segment.
    std::thread::sleep(Duration::from_millis(20));
    let msg = sa_message(method::GET_MULTI_RESP, tid, 500, true, 8);
    r.fake.inject(from_peer(segments_of(&msg, &[1])[0]));
    r.fake.deliver_due();
    std::thread::sleep(Duration::from_millis(20));
    r.fake.hold_send_cqes(false);
    r.fake.release_send_cqes();
    r.fake.set_auto(true);
    gone.join().unwrap();
    assert_eq!(
        r.port.rmpp_census().reassemblies,
        0,
        "no reassembly started"
    );
    assert_eq!(r.port.rmpp_counters().acks_sent, 0, "nothing acknowledged");
    r.collect(&other, Duration::from_secs(45));
    let k = r.port.rmpp_counters();
    assert_eq!((k.reassembly_timeouts, k.aborts_sent), (0, 0));
    other.deregister();
    r.assert_clean();
}

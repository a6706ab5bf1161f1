//! RMPP between two of our own ports on the simulated fabric (reference/mad-stack.md §2.9):
//! an agent acting as SA on Hca2 answers a GetTable from Hca1 with several KiB, cut into
//! segments by Hca2's MAD layer and put together by Hca1's. One segment is lost on the wire
//! and recovered; a transfer whose ACKs never come times out; a transfer whose sender goes
//! away is aborted by the receiver with T2L after 40 s. Each ends with one completion per
//! send, leases and mappings back, and no IOMMU fault, on both HCAs.

// Short names (fabric, agent, tracker) read better in these scenarios.
#![allow(clippy::many_single_char_names)]

use std::time::Duration;

use driver::verbs::{SpecialQp, WcStatus};
use hca_tests::mad_fabric::{LID_HCA2, MadFabric, lid_dest};
use hca_tests::mad_rig::Tracker;
use mad::wire::{method, rmpp};
use mad::{Agent, AgentSpec, DropReason, Event, MethodMask, RecvMad, SendId, SendRequest};
use sim::net::{DropReason as NetDrop, Fault};

const SA: u8 = 0x03;

/// An SA MAD: header (class version 2, `m`, `tid`, NodeRecord, RMPP Active when `rmpp`),
/// then `data_len` bytes of data, byte `i` of it `i * 7 + 3` mod 256.
fn sa_message(m: u8, tid: u64, data_len: usize, active: bool) -> Vec<u8> {
    let mut b = vec![0u8; 56 + data_len];
    b[0] = 1;
    b[1] = SA;
    b[2] = 2;
    b[3] = m;
    b[8..16].copy_from_slice(&tid.to_be_bytes());
    b[16..18].copy_from_slice(&0x0011u16.to_be_bytes());
    if active {
        b[24] = rmpp::VERSION;
        b[26] = rmpp::flags::ACTIVE;
    }
    for (i, x) in b[56..].iter_mut().enumerate() {
        *x = (i * 7 + 3) as u8;
    }
    b
}

/// The SA on Hca2 and the client on Hca1, both registered with RMPP, on a configured subnet.
fn setup() -> (MadFabric, Agent, Agent) {
    let mut f = MadFabric::new();
    f.configure();
    let sa = f.hca2.agent(
        AgentSpec::class(SA, 2, MethodMask::of(&[method::GET, method::GET_TABLE])).with_rmpp(1),
    );
    let client = f
        .hca1
        .agent(AgentSpec::responses_only(SpecialQp::Gsi).with_rmpp(1));
    (f, sa, client)
}

/// The client's GetTable to the SA.
fn get_table(client: &Agent, timeout_ms: u32) -> SendId {
    client
        .send(
            SendRequest::new(
                sa_message(method::GET_TABLE, 0x0102_0304, 200, false),
                lid_dest(LID_HCA2, SpecialQp::Gsi),
            )
            .timeout_ms(timeout_ms),
        )
        .expect("accepted")
}

/// Pump until the SA has the request; returns it.
fn sa_request(f: &MadFabric, sa: &Agent, t: &mut Tracker) -> RecvMad {
    let mut got = None;
    assert!(f.pump_until(&[], t, Duration::from_secs(1), |_| {
        if let Some(Event::Recv(r)) = sa.try_event() {
            got = Some(*r.into_box());
        }
        got.is_some()
    }));
    got.expect("the GetTable")
}

#[test]
fn a_get_table_response_of_8_kib_with_a_dropped_segment_is_recovered() {
    let (f, sa, client) = setup();
    let mut t = Tracker::default();
    let mut ts = Tracker::default();
    let id = get_table(&client, 5000);
    let req = sa_request(&f, &sa, &mut ts);
    assert_eq!(req.header().method(), method::GET_TABLE);
    // The third packet to leave Hca2 from now on is lost: segment 3 (Hca2 sends only
    // segments; the ACKs come from Hca1).
    f.net.drop_nth_leaving(f.port_id("Hca2", 1), 3);
    let resp = sa_message(method::GET_TABLE_RESP, req.header().tid(), 8192, true);
    let sid = sa
        .send(SendRequest::new(resp.clone(), req.addr.reply_dest()).retries(3))
        .expect("an RMPP transfer");
    // Send IDs are per port: the client's events go to `t`, the SA's to `ts`.
    assert!(
        f.pump_until(&[&client], &mut t, Duration::from_secs(10), |t| {
            t.done.contains_key(&id)
        }),
        "the GetTable completes"
    );
    // The response, whole and once, before the request's completion.
    assert_eq!(t.recvs.len(), 1);
    let r = &t.recvs[0];
    assert_eq!(r.response_to.map(|s| s.id), Some(id));
    assert_eq!(t.status(id), Some(WcStatus::Success));
    let msg = r.rmpp.as_ref().expect("reassembled");
    assert_eq!((r.len, msg.len()), (resp.len(), resp.len()));
    assert_eq!(msg[..24], resp[..24], "the common header as sent");
    assert_eq!(msg[36..], resp[36..], "SA header and 8 KiB of data as sent");
    assert_eq!(
        (msg[25], msg[26] & 7),
        (
            rmpp::rmpp_type::DATA,
            rmpp::flags::ACTIVE | rmpp::flags::FIRST
        ),
        "the first segment's RMPP header"
    );
    // The SA's send: one completion, after its last ACK.
    assert!(f.pump_until(&[&sa], &mut ts, Duration::from_secs(3), |t| {
        t.done.contains_key(&sid)
    }));
    assert_eq!(ts.status(sid), Some(WcStatus::Success));
    // Exactly one segment lost on the wire; the go-back resend from segment 2 brought it.
    assert_eq!(f.net.drops().get(NetDrop::Fault), 1);
    let k2 = f.hca2.port.rmpp_counters();
    let k1 = f.hca1.port.rmpp_counters();
    assert_eq!(k2.transfers_sent, 1);
    assert!(k2.segments_resent >= 2, "segments 2 and 3 again: {k2:?}");
    assert_eq!(k2.segments_sent, 41 + k2.segments_resent, "{k2:?}");
    assert_eq!(
        k1.segments_received,
        k2.segments_sent - 1,
        "every segment sent arrived but the one lost: {k1:?}"
    );
    assert_eq!(k1.transfers_received, 1, "{k1:?}");
    f.hca1.deregister(client, &mut t);
    f.hca2.deregister(sa, &mut ts);
    f.assert_clean();
    f.finish();
}

#[test]
fn a_transfer_whose_acks_never_come_times_out_after_its_retries() {
    let (f, sa, client) = setup();
    let mut t = Tracker::default();
    let mut ts = Tracker::default();
    let id = get_table(&client, 3000);
    let req = sa_request(&f, &sa, &mut ts);
    // From now on nothing crosses Hca1's link: neither segments nor ACKs.
    f.net.set_link_fault(f.port_id("Hca1", 1), Fault::drop(1.0));
    let resp = sa_message(method::GET_TABLE_RESP, req.header().tid(), 2000, true);
    let sid = sa
        .send(SendRequest::new(resp, req.addr.reply_dest()).retries(2))
        .unwrap();
    let start = f.hca2.port.now();
    assert!(f.pump_until(&[&sa], &mut ts, Duration::from_secs(10), |t| {
        t.done.contains_key(&sid)
    }));
    let c = &ts.done[&sid];
    assert_eq!((c.status, c.retries), (WcStatus::RespTimeoutErr, 2));
    let took = f.hca2.port.now().saturating_sub(start);
    assert!(
        took >= Duration::from_secs(6),
        "three ACK timeouts of 2 s: {took:?}"
    );
    assert_eq!(f.hca2.port.rmpp_counters().segments_resent, 2);
    f.net.clear_faults();
    // The client's request timed out meanwhile: one completion, no response.
    assert!(
        f.pump_until(&[&client], &mut t, Duration::from_secs(1), |t| t
            .done
            .contains_key(&id))
    );
    assert_eq!(t.status(id), Some(WcStatus::RespTimeoutErr));
    assert!(t.recvs.is_empty());
    f.hca1.deregister(client, &mut t);
    f.hca2.deregister(sa, &mut ts);
    f.assert_clean();
    f.finish();
}

#[test]
fn a_transfer_whose_sender_goes_away_is_aborted_by_the_receiver_with_t2l() {
    let (f, sa, client) = setup();
    let mut t = Tracker::default();
    let mut ts = Tracker::default();
    let id = get_table(&client, 45_000);
    let req = sa_request(&f, &sa, &mut ts);
    let resp = sa_message(method::GET_TABLE_RESP, req.header().tid(), 4000, true);
    let sid = sa
        .send(SendRequest::new(resp, req.addr.reply_dest()))
        .unwrap();
    // The first segment goes and is acknowledged (window 1 at first), then the SA goes away.
    assert!(f.pump_until(&[], &mut t, Duration::from_secs(1), |_| {
        f.hca2.port.rmpp_counters().acks_received == 1
    }));
    f.hca2.deregister(sa, &mut ts);
    assert_eq!(
        ts.done.get(&sid).map(|c| c.status),
        Some(WcStatus::WrFlushErr),
        "its transfer completed once, canceled"
    );
    let drops_before = f.hca2.port.counters().drops.get(DropReason::NoAgent);
    // Hca1 waits 40 s for the next segment, then aborts with T2L.
    f.pump(&[&client], &mut t, Duration::from_secs(39));
    assert_eq!(f.hca1.port.rmpp_counters().reassembly_timeouts, 0);
    f.pump(&[&client], &mut t, Duration::from_secs(2));
    let k1 = f.hca1.port.rmpp_counters();
    assert_eq!((k1.reassembly_timeouts, k1.aborts_sent), (1, 1), "{k1:?}");
    // The ABORT reached Hca2, where no agent takes it any more.
    assert_eq!(
        f.hca2.port.counters().drops.get(DropReason::NoAgent),
        drops_before + 1
    );
    // The request itself times out at 45 s, without a response.
    assert!(
        f.pump_until(&[&client], &mut t, Duration::from_secs(5), |t| t
            .done
            .contains_key(&id))
    );
    assert_eq!(t.status(id), Some(WcStatus::RespTimeoutErr));
    assert!(t.recvs.is_empty());
    f.hca1.deregister(client, &mut t);
    f.assert_clean();
    f.finish();
}

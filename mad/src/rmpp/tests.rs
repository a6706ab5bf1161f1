//! RMPP on a port against the in-crate test double, the peer scripted in the test (its
//! segments and ACKs written out with the layouts of reference/mad-stack.md §2.9): reassembly
//! with a lost segment, the sender's window, ACK timeouts, STOP and ABORT, the reassembly
//! timeout, user RMPP, a request sent with RMPP, modified timeouts, cancel, deregistration and
//! device death.
//! Each checks one completion per send and the leases back. Transfers between two of our
//! own ports run on the simulated fabric in `tests/tests/mad_rmpp.rs`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use driver::verbs::{HcaPort, SpecialQp, UdDest, WcStatus};
use mad_wire::header::MAD_LEN;
use mad_wire::rmpp::{Rmpp, flags, rmpp_status, rmpp_type};
use mad_wire::{class, method};

use super::segment::Layout;
use crate::double::{Inbound, Outbound};
use crate::smi::tests::Rig;
use crate::{AgentSpec, Event, MethodMask, QP1_QKEY, SendCompletion, SendRequest};

const PEER: u16 = 9;

fn to_peer() -> UdDest {
    UdDest {
        dlid: PEER,
        sl: 0,
        src_path_bits: 0,
        remote_qpn: 1,
        remote_qkey: QP1_QKEY,
        pkey_index: 0,
        grh: None,
    }
}

/// An SA message: header (version 2, `method`, `tid`, RMPP version 1 Active when `rmpp`),
/// then `data_len` bytes of data numbered from `seed`.
fn sa_message(m: u8, tid: u64, data_len: usize, rmpp: bool, seed: u8) -> Vec<u8> {
    let mut b = vec![0u8; 56 + data_len];
    b[0] = 1;
    b[1] = class::SUBN_ADM;
    b[2] = 2;
    b[3] = m;
    b[8..16].copy_from_slice(&tid.to_be_bytes());
    b[16..18].copy_from_slice(&0x0011u16.to_be_bytes());
    if rmpp {
        b[24] = 1;
        b[26] = flags::ACTIVE;
    }
    for (i, x) in b[56..].iter_mut().enumerate() {
        *x = seed.wrapping_add((i % 199) as u8);
    }
    b
}

/// Segments `nums` of `msg`, as a sender cuts them.
fn segments_of(msg: &[u8], nums: &[u32]) -> Vec<[u8; MAD_LEN]> {
    let l = Layout::new(class::SUBN_ADM, msg.len()).unwrap();
    nums.iter()
        .map(|&n| {
            let mut out = [0u8; MAD_LEN];
            l.segment(msg, n, &mut out);
            out
        })
        .collect()
}

/// An RMPP control MAD (ACK, STOP, ABORT) answering `to`, as a peer makes it.
fn control(to: &[u8; MAD_LEN], kind: u8, status: u8, seg: u32, newwin: u32) -> [u8; MAD_LEN] {
    let mut m = [0u8; MAD_LEN];
    m[..56].copy_from_slice(&to[..56]);
    m[3] ^= 0x80;
    let mut r = Rmpp::new_checked(&mut m[..]).unwrap();
    r.set_rmpp_version(1);
    r.set_rmpp_type(kind);
    r.set_flags(flags::ACTIVE);
    r.set_rmpp_status(status);
    r.set_segment_number(seg);
    r.set_paylen_newwin(newwin);
    m
}

fn rmpp_of(m: &[u8; MAD_LEN]) -> (u8, u8, u8, u32, u32) {
    let r = Rmpp::new_checked(&m[..]).unwrap();
    (
        r.rmpp_type(),
        r.flags(),
        r.rmpp_status(),
        r.segment_number(),
        r.paylen_newwin(),
    )
}

fn from_peer(m: [u8; MAD_LEN]) -> Inbound {
    Inbound::new(SpecialQp::Gsi, m, PEER)
}

fn tid_of(m: &[u8]) -> u64 {
    u64::from_be_bytes(m[8..16].try_into().unwrap())
}

/// The sends to the peer, as (RMPP type, flags, status, segment, paylen/newwin).
fn sent_rmpp(sent: &[Outbound]) -> Vec<(u8, u8, u8, u32, u32)> {
    sent.iter()
        .filter(|o| o.dest.dlid == PEER)
        .map(|o| rmpp_of(&o.mad))
        .collect()
}

fn completions(ev: &[Event]) -> Vec<SendCompletion> {
    ev.iter()
        .filter_map(|e| match e {
            Event::Send(c) => Some(c.clone()),
            _ => None,
        })
        .collect()
}

/// `n` sends of `client` that expect no response, all completed: each takes the next free
/// send slot, so after about a slot count of them every slot has been handed out again.
fn other_sends(r: &Rig, client: &crate::Agent, n: u64) {
    for i in 0..n {
        client
            .send(SendRequest::new(
                sa_message(method::GET, 0x1000 + i, 0, false, 0),
                to_peer(),
            ))
            .unwrap();
    }
    let ev = r.collect(client, Duration::from_millis(5));
    assert_eq!(completions(&ev).len(), n as usize, "{ev:?}");
}

#[test]
fn a_multi_segment_response_with_a_lost_segment_is_reassembled_once_it_comes() {
    let r = Rig::new();
    let response = Arc::new(Mutex::new(Vec::new()));
    let acks = Arc::new(Mutex::new(Vec::new()));
    let (resp2, acks2) = (response.clone(), acks.clone());
    r.fake.set_responder(move |out| {
        if out.mad[3] == method::GET_TABLE && rmpp_of(&out.mad).0 == rmpp_type::ACK {
            acks2.lock().unwrap().push(rmpp_of(&out.mad));
            return Vec::new();
        }
        // The request: 5 segments of GetTableResp, the third lost on the way.
        let msg = sa_message(
            method::GET_TABLE_RESP,
            tid_of(&out.mad),
            200 * 4 + 30,
            true,
            3,
        );
        *resp2.lock().unwrap() = msg.clone();
        segments_of(&msg, &[1, 2, 4, 5])
            .into_iter()
            .map(from_peer)
            .collect()
    });
    let client = r.agent(AgentSpec::responses_only(SpecialQp::Gsi).with_rmpp(1));
    let id = client
        .send(
            SendRequest::new(
                sa_message(method::GET_TABLE, 0x1234, 20, false, 0),
                to_peer(),
            )
            .timeout_ms(3000),
        )
        .unwrap();
    let ev = r.collect(&client, Duration::from_millis(10));
    assert!(ev.is_empty(), "nothing until the message is whole: {ev:?}");
    // Segment 1 opened the window to 1 + 64/8 and was acknowledged; nothing else yet.
    assert_eq!(
        *acks.lock().unwrap(),
        vec![(rmpp_type::ACK, flags::ACTIVE, 0, 1, 9)]
    );
    // The lost segment comes again (the sender's ACK timeout).
    let msg = response.lock().unwrap().clone();
    r.fake.inject(from_peer(segments_of(&msg, &[3])[0]));
    let ev = r.collect(&client, Duration::from_millis(10));
    assert_eq!(ev.len(), 2, "{ev:?}");
    let Event::Recv(got) = &ev[0] else {
        panic!("the whole response first: {ev:?}")
    };
    assert_eq!(got.response_to.map(|s| s.id), Some(id));
    let whole = got.rmpp.as_ref().expect("the reassembled message");
    assert_eq!(got.len, msg.len());
    assert_eq!(whole[56..], msg[56..], "the data as sent");
    assert_eq!(got.message(), &whole[..]);
    assert!(matches!(&ev[1], Event::Send(c) if c.id == id && c.status == WcStatus::Success));
    assert_eq!(
        acks.lock().unwrap().last(),
        Some(&(rmpp_type::ACK, flags::ACTIVE, 0, 5, 9)),
        "the last segment acknowledged"
    );
    let k = r.port.rmpp_counters();
    assert_eq!(
        (k.transfers_received, k.segments_received, k.acks_sent),
        (1, 5, 2)
    );
    client.deregister();
    r.assert_clean();
}

/// An RMPP response to an agent without a receive side is dropped segment by segment, as
/// the kernel's `find_mad_agent` gives up on an agent without a `recv_handler`: nothing is
/// reassembled or acknowledged, and the request ends at its timeout.
#[test]
fn an_rmpp_response_to_a_send_only_agent_is_dropped_unacknowledged() {
    let r = Rig::new();
    r.fake.set_responder(move |out| {
        if rmpp_of(&out.mad).0 == rmpp_type::ACK {
            return Vec::new();
        }
        let msg = sa_message(
            method::GET_TABLE_RESP,
            tid_of(&out.mad),
            200 * 2 + 30,
            true,
            3,
        );
        segments_of(&msg, &[1, 2, 3])
            .into_iter()
            .map(from_peer)
            .collect()
    });
    let client = r.agent(AgentSpec::send_only(SpecialQp::Gsi).with_rmpp(1));
    let id = client
        .send(
            SendRequest::new(
                sa_message(method::GET_TABLE, 0x1234, 20, false, 0),
                to_peer(),
            )
            .timeout_ms(50),
        )
        .unwrap();
    let ev = r.collect(&client, Duration::from_millis(100));
    assert_eq!(ev.len(), 1, "only the completion: {ev:?}");
    let c = completions(&ev);
    assert_eq!((c[0].id, c[0].status), (id, WcStatus::RespTimeoutErr));
    assert_eq!(r.fake.sent().len(), 1, "the request only, no ACK");
    assert_eq!(r.port.rmpp_counters().segments_received, 0);
    assert_eq!(
        client.counters().drops.get(crate::DropReason::NotExpected),
        3,
        "every segment dropped"
    );
    client.deregister();
    r.assert_clean();
}

/// Our SA agent answering a GetTable from the peer with `data_len` bytes by RMPP; the peer
/// acknowledges as `ack` says (None: no answer).
fn sa_sends(
    data_len: usize,
    retries: u32,
    ack: impl FnMut(&(u8, u8, u8, u32, u32), &[u8; MAD_LEN]) -> Option<[u8; MAD_LEN]> + Send + 'static,
) -> (Rig, crate::Agent, crate::SendId) {
    let r = Rig::new();
    let ack = Mutex::new(ack);
    r.fake.set_responder(move |out| {
        let f = rmpp_of(&out.mad);
        if f.0 != rmpp_type::DATA {
            return Vec::new();
        }
        (ack.lock().unwrap())(&f, &out.mad)
            .map(from_peer)
            .into_iter()
            .collect()
    });
    let sa = r.agent(
        AgentSpec::class(
            class::SUBN_ADM,
            2,
            MethodMask::of(&[method::GET, method::GET_TABLE]),
        )
        .with_rmpp(1),
    );
    r.fake.inject(from_peer(
        sa_message(method::GET_TABLE, 0xAB, 200, false, 0)
            .try_into()
            .unwrap(),
    ));
    let req = loop {
        match sa.next_event(r.port.deadline_after(Duration::from_millis(5))) {
            Some(Event::Recv(q)) => break q,
            other => assert!(other.is_some(), "the GetTable arrives"),
        }
    };
    let resp = sa_message(method::GET_TABLE_RESP, tid_of(&req.mad), data_len, true, 7);
    let id = sa
        .send(SendRequest::new(resp, req.addr.reply_dest()).retries(retries))
        .unwrap();
    (r, sa, id)
}

#[test]
fn the_sender_keeps_to_the_window_and_ends_at_the_last_ack() {
    // 5 segments; the peer grants 1 -> 3 -> 5.
    let (r, sa, id) = sa_sends(1000, 0, |f, m| match f.3 {
        1 => Some(control(m, rmpp_type::ACK, 0, 1, 3)),
        3 => Some(control(m, rmpp_type::ACK, 0, 3, 5)),
        5 => Some(control(m, rmpp_type::ACK, 0, 5, 5)),
        _ => None,
    });
    let ev = r.collect(&sa, Duration::from_millis(20));
    let c = completions(&ev);
    assert_eq!(c.len(), 1, "{ev:?}");
    assert_eq!(
        (c[0].id, c[0].status, c[0].retries),
        (id, WcStatus::Success, 0)
    );
    let sent = sent_rmpp(&r.fake.sent());
    let a = flags::ACTIVE;
    assert_eq!(
        sent,
        vec![
            (rmpp_type::DATA, a | flags::FIRST, 0, 1, 5 * 220),
            (rmpp_type::DATA, a, 0, 2, 0),
            (rmpp_type::DATA, a, 0, 3, 0),
            (rmpp_type::DATA, a, 0, 4, 0),
            (rmpp_type::DATA, a | flags::LAST, 0, 5, 220),
        ]
    );
    let k = r.port.rmpp_counters();
    assert_eq!(
        (k.segments_sent, k.acks_received, k.segments_resent),
        (5, 3, 0)
    );
    sa.deregister();
    r.assert_clean();
}

#[test]
fn an_unacknowledged_segment_is_resent_after_the_ack_timeout_until_retries_run_out() {
    let (r, sa, id) = sa_sends(450, 1, |_, _| None);
    let start = r.port.now();
    let ev = r.collect(&sa, Duration::from_secs(5));
    let c = completions(&ev);
    assert_eq!(c.len(), 1, "{ev:?}");
    assert_eq!(
        (c[0].id, c[0].status, c[0].retries),
        (id, WcStatus::RespTimeoutErr, 1)
    );
    let sent = sent_rmpp(&r.fake.sent());
    assert_eq!(
        sent.iter().map(|s| s.3).collect::<Vec<_>>(),
        vec![1, 1],
        "segment 1, again after 2 s"
    );
    let took = r.port.now().saturating_sub(start);
    assert!(
        took >= Duration::from_secs(4),
        "two ACK timeouts of 2 s: {took:?}"
    );
    assert_eq!(r.port.rmpp_counters().segments_resent, 1);
    sa.deregister();
    r.assert_clean();
}

#[test]
fn a_lost_segment_is_resent_from_the_last_ack() {
    // The peer acknowledges segment 1 (window 64) and then only what arrives in sequence;
    // segment 3's first copy is lost.
    let seen = Arc::new(Mutex::new(Vec::new()));
    let seen2 = seen.clone();
    let mut lost_once = false;
    let mut in_seq = 0;
    let (r, sa, id) = sa_sends(200 * 4 + 1, 2, move |f, m| {
        seen2.lock().unwrap().push(f.3);
        if f.3 == 3 && !lost_once {
            lost_once = true;
            return None;
        }
        if f.3 == in_seq + 1 {
            in_seq = f.3;
        }
        match f.3 {
            1 => Some(control(m, rmpp_type::ACK, 0, 1, 64)),
            5 if in_seq == 5 => Some(control(m, rmpp_type::ACK, 0, 5, 64)),
            _ => None,
        }
    });
    let ev = r.collect(&sa, Duration::from_secs(3));
    let c = completions(&ev);
    assert_eq!(c.len(), 1, "{ev:?}");
    assert_eq!(
        (c[0].id, c[0].status, c[0].retries),
        (id, WcStatus::Success, 1)
    );
    assert_eq!(
        *seen.lock().unwrap(),
        vec![1, 2, 3, 4, 5, 2, 3, 4, 5],
        "after the ACK timeout, everything after the last ACK again"
    );
    sa.deregister();
    r.assert_clean();
}

#[test]
fn stop_and_abort_from_the_receiver_end_the_transfer() {
    for (kind, status, want, abort_back) in [
        (rmpp_type::STOP, rmpp_status::RESOURCES_EXHAUSTED, 1, None),
        (rmpp_type::ABORT, rmpp_status::T2L, 118, None),
        (rmpp_type::ABORT, 5, 124, Some(rmpp_status::BAD_STATUS)),
        (rmpp_type::STOP, 0, 124, Some(rmpp_status::BAD_STATUS)),
    ] {
        let (r, sa, id) = sa_sends(1000, 3, move |f, m| {
            (f.3 == 1).then(|| control(m, kind, status, 0, 0))
        });
        let ev = r.collect(&sa, Duration::from_millis(20));
        let c = completions(&ev);
        assert_eq!(c.len(), 1, "{ev:?}");
        assert_eq!(
            (c[0].id, c[0].status, c[0].vendor_err),
            (id, WcStatus::RemAbortErr, want),
            "{kind} {status}"
        );
        let back: Vec<u8> = sent_rmpp(&r.fake.sent())
            .iter()
            .filter(|s| s.0 == rmpp_type::ABORT)
            .map(|s| s.2)
            .collect();
        assert_eq!(back, abort_back.into_iter().collect::<Vec<_>>());
        assert_eq!(r.port.rmpp_counters().remote_aborts, 1);
        sa.deregister();
        r.assert_clean();
    }
}

#[test]
fn a_stalled_reassembly_is_aborted_with_t2l_after_40_s() {
    let r = Rig::new();
    let aborts = Arc::new(Mutex::new(Vec::new()));
    let aborts2 = aborts.clone();
    r.fake.set_responder(move |out| {
        let f = rmpp_of(&out.mad);
        if f.0 == rmpp_type::ABORT {
            aborts2.lock().unwrap().push(f);
            return Vec::new();
        }
        if out.mad[3] != method::GET_TABLE || f.0 != rmpp_type::NONE {
            return Vec::new();
        }
        let msg = sa_message(method::GET_TABLE_RESP, tid_of(&out.mad), 600, true, 1);
        vec![from_peer(segments_of(&msg, &[1])[0])]
    });
    let client = r.agent(AgentSpec::responses_only(SpecialQp::Gsi).with_rmpp(1));
    let id = client
        .send(
            SendRequest::new(sa_message(method::GET_TABLE, 1, 0, false, 0), to_peer())
                .timeout_ms(45_000),
        )
        .unwrap();
    let ev = r.collect(&client, Duration::from_millis(39_900));
    assert!(ev.is_empty(), "{ev:?}");
    assert!(aborts.lock().unwrap().is_empty(), "not before 40 s");
    let ev = r.collect(&client, Duration::from_secs(6));
    assert_eq!(
        *aborts.lock().unwrap(),
        vec![(rmpp_type::ABORT, flags::ACTIVE, rmpp_status::T2L, 0, 0)]
    );
    assert_eq!(r.port.rmpp_counters().reassembly_timeouts, 1);
    let c = completions(&ev);
    assert_eq!(c.len(), 1);
    assert_eq!((c[0].id, c[0].status), (id, WcStatus::RespTimeoutErr));
    client.deregister();
    r.assert_clean();
}

#[test]
fn agents_without_rmpp_get_the_segments_as_they_come() {
    let r = Rig::new();
    r.fake.set_responder(|out| {
        if out.mad[3] != method::GET_TABLE {
            return Vec::new();
        }
        let msg = sa_message(method::GET_TABLE_RESP, tid_of(&out.mad), 500, true, 2);
        segments_of(&msg, &[1, 2, 3])
            .into_iter()
            .map(from_peer)
            .collect()
    });
    let client = r.agent(AgentSpec::responses_only(SpecialQp::Gsi));
    let id = client
        .send(
            SendRequest::new(sa_message(method::GET_TABLE, 5, 0, false, 0), to_peer())
                .timeout_ms(100),
        )
        .unwrap();
    let ev = r.collect(&client, Duration::from_millis(10));
    let kinds: Vec<(Option<u32>, Option<bool>)> = ev
        .iter()
        .map(|e| match e {
            Event::Recv(m) => (Some(rmpp_of(&m.mad).3), Some(m.response_to.is_some())),
            Event::Send(_) => (None, None),
            Event::DeviceFatal { .. } => unreachable!(),
        })
        .collect();
    assert_eq!(
        kinds,
        vec![
            (Some(1), Some(true)),
            (None, None),
            (Some(2), Some(false)),
            (Some(3), Some(false))
        ],
        "segment 1 answers the send; 2 and 3 arrive raw"
    );
    assert!(
        completions(&ev)
            .iter()
            .all(|c| c.id == id && c.status == WcStatus::Success)
    );
    assert!(
        sent_rmpp(&r.fake.sent())
            .iter()
            .all(|s| s.0 == rmpp_type::NONE),
        "no ACK from the stack"
    );
    assert_eq!(r.port.rmpp_counters().raw_delivered, 2);
    client.deregister();
    r.assert_clean();
}

#[test]
fn a_request_sent_with_rmpp_gets_its_own_tid_acks_and_response() {
    let r = Rig::new();
    let log = Arc::new(Mutex::new(Vec::new()));
    let log2 = log.clone();
    r.fake.set_responder(move |out| {
        let f = rmpp_of(&out.mad);
        log2.lock().unwrap().push((out.mad[3], f));
        match (f.0, f.3) {
            // Segment 2 of 2: acknowledge both.
            (rmpp_type::DATA, 1) => vec![from_peer(control(&out.mad, rmpp_type::ACK, 0, 1, 2))],
            (rmpp_type::DATA, 2) => vec![from_peer(control(&out.mad, rmpp_type::ACK, 0, 2, 2))],
            // Our double-sided ACK: now the response, a single MAD.
            (rmpp_type::ACK, 0) => {
                let mut resp: [u8; MAD_LEN] =
                    sa_message(method::GET_MULTI_RESP, tid_of(&out.mad), 200, false, 4)
                        .try_into()
                        .unwrap();
                resp[24..36].fill(0);
                vec![from_peer(resp)]
            }
            _ => Vec::new(),
        }
    });
    let client = r.agent(AgentSpec::responses_only(SpecialQp::Gsi).with_rmpp(1));
    let id = client
        .send(
            SendRequest::new(
                sa_message(method::GET_MULTI, 0x0000_0000_CAFE_0001, 300, true, 9),
                to_peer(),
            )
            .timeout_ms(500)
            .context(77),
        )
        .unwrap();
    let ev = r.collect(&client, Duration::from_millis(20));
    assert_eq!(ev.len(), 2, "{ev:?}");
    let Event::Recv(resp) = &ev[0] else {
        panic!("{ev:?}")
    };
    assert_eq!(resp.response_to.map(|s| (s.id, s.context)), Some((id, 77)));
    assert!(resp.rmpp.is_none(), "a single MAD");
    let Event::Send(done) = &ev[1] else { panic!() };
    assert_eq!(done.status, WcStatus::Success);
    assert_eq!(
        done.tid & 0xFFFF_FFFF,
        0xCAFE_0001,
        "the client's half kept"
    );
    assert_eq!((done.tid >> 32) & (1 << 23), 0, "not the ring's QP1 space");
    let log = log.lock().unwrap();
    let a = flags::ACTIVE;
    assert_eq!(
        log.iter()
            .map(|(m, f)| (*m, f.0, f.1, f.3))
            .collect::<Vec<_>>(),
        vec![
            (method::GET_MULTI, rmpp_type::DATA, a | flags::FIRST, 1),
            (method::GET_MULTI, rmpp_type::DATA, a | flags::LAST, 2),
            // ack_ds_ack: the ACK's method flipped back, SegmentNumber 0, window 1.
            (method::GET_MULTI, rmpp_type::ACK, a, 0),
        ]
    );
    assert_eq!(log[2].1.4, 1, "NewWindowLast 1");
    client.deregister();
    r.assert_clean();
}

#[test]
fn cancel_deregistration_and_death_each_complete_a_transfer_once() {
    // Cancel while waiting for an ACK.
    let (r, sa, id) = sa_sends(1000, 5, |_, _| None);
    r.collect(&sa, Duration::from_millis(5));
    sa.cancel(id).unwrap();
    assert!(sa.cancel(id).is_err(), "once");
    let c = completions(&r.collect(&sa, Duration::from_millis(5)));
    assert_eq!(c.len(), 1);
    assert_eq!(
        (c[0].id, c[0].status, c[0].vendor_err),
        (id, WcStatus::WrFlushErr, 0)
    );
    sa.deregister();
    r.assert_clean();

    // Deregistration with a transfer under way.
    let (r, sa, id) = sa_sends(1000, 5, |_, _| None);
    let q = sa.events().clone();
    sa.deregister();
    let mut ev = Vec::new();
    q.drain_into(&mut ev);
    let c = completions(&ev);
    assert_eq!(c.len(), 1, "{ev:?}");
    assert_eq!((c[0].id, c[0].status), (id, WcStatus::WrFlushErr));
    r.assert_clean();

    // The device dies with a segment on the QP.
    let (r, sa, id) = sa_sends(1000, 5, |_, _| None);
    r.fake.set_auto(false);
    r.collect(&sa, Duration::from_millis(5));
    r.fake.make_fatal(false);
    let c = completions(&r.collect(&sa, Duration::from_millis(20)));
    assert_eq!(c.len(), 1);
    assert_eq!(
        (c[0].id, c[0].status, c[0].vendor_err),
        (id, WcStatus::WrFlushErr, 5)
    );
    sa.deregister();
    assert_eq!(r.fake.faults(), 0);
    assert_eq!(r.port.census().outstanding, 0);
}

#[test]
fn a_request_arriving_in_segments_is_delivered_whole_to_the_registered_agent() {
    let r = Rig::new();
    let acks = Arc::new(Mutex::new(Vec::new()));
    let acks2 = acks.clone();
    r.fake.set_responder(move |out| {
        acks2.lock().unwrap().push((out.mad[3], rmpp_of(&out.mad)));
        Vec::new()
    });
    let sa = r.agent(
        AgentSpec::class(class::SUBN_ADM, 2, MethodMask::of(&[method::GET_MULTI])).with_rmpp(1),
    );
    // A GetMulti of 3 segments from the peer, in order.
    let msg = sa_message(method::GET_MULTI, 0x0BAD_CAFE, 450, true, 6);
    for seg in segments_of(&msg, &[1, 2, 3]) {
        r.fake.inject(from_peer(seg));
    }
    let ev = r.collect(&sa, Duration::from_millis(10));
    assert_eq!(ev.len(), 1, "{ev:?}");
    let Event::Recv(q) = &ev[0] else { panic!() };
    assert_eq!(q.response_to, None, "a request");
    assert_eq!((q.len, q.addr.slid), (msg.len(), PEER));
    assert_eq!(q.message()[56..], msg[56..]);
    // ACKs go back as responses: segment 1 (window to 9), then the last.
    let a = flags::ACTIVE;
    assert_eq!(
        *acks.lock().unwrap(),
        vec![
            (method::GET_MULTI_RESP, (rmpp_type::ACK, a, 0, 1, 9)),
            (method::GET_MULTI_RESP, (rmpp_type::ACK, a, 0, 3, 9)),
        ]
    );
    sa.deregister();
    r.assert_clean();
}

/// An agent registered with an RMPP version may send only RMPP-capable classes: the kernel's
/// `ib_post_send_mad` refuses any other class from it with EINVAL (`!ib_is_mad_class_rmpp`
/// and `rmpp_version`), with the Active flag or without. A single MAD of an RMPP-capable
/// class (Active clear) still goes.
#[test]
fn an_rmpp_agent_may_not_send_a_class_without_rmpp() {
    let r = Rig::new();
    let client = r.agent(AgentSpec::responses_only(SpecialQp::Gsi).with_rmpp(1));
    // A PerfMgt Get (PortCounters): byte 26 is reserved there, zero.
    let mut get = vec![0u8; MAD_LEN];
    get[..4].copy_from_slice(&[1, class::PERF_MGMT, 1, method::GET]);
    get[8..16].copy_from_slice(&0x77u64.to_be_bytes());
    get[16..18].copy_from_slice(&0x0012u16.to_be_bytes());
    for active in [0, flags::ACTIVE] {
        get[26] = active;
        let e = client
            .send(SendRequest::new(get.clone(), to_peer()).timeout_ms(100))
            .unwrap_err();
        assert!(
            matches!(
                e,
                crate::MadError::RmppClass {
                    class: class::PERF_MGMT
                }
            ),
            "Active {active}: {e}"
        );
    }
    assert!(r.fake.sent().is_empty(), "nothing on the wire");
    assert_eq!(r.port.counters().sends, 0, "nothing accepted");
    // An SA Get as a single MAD is the agent's to send.
    let id = client
        .send(SendRequest::new(
            sa_message(method::GET, 1, 200, false, 0),
            to_peer(),
        ))
        .expect("a single MAD of an RMPP-capable class");
    let c = completions(&r.collect(&client, Duration::from_millis(5)));
    assert_eq!((c[0].id, c[0].status), (id, WcStatus::Success));
    assert_eq!(r.port.rmpp_counters().transfers_sent, 0, "not a transfer");
    client.deregister();
    r.assert_clean();
}

/// A client sending a GetMulti of one segment with RMPP (so its TID is RMPP's), and a peer
/// that acknowledges it and, on our double-sided ACK, answers with `segs` of a 3-segment
/// GetMultiResp (kept in the returned cell to send more later). Our ACKs (SegmentNumber, window)
/// are logged.
#[allow(clippy::type_complexity)]
fn rmpp_request(
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
        match (f.0, f.3) {
            (rmpp_type::DATA, 1) => vec![from_peer(control(&out.mad, rmpp_type::ACK, 0, 1, 1))],
            (rmpp_type::ACK, 0) => {
                let msg = sa_message(method::GET_MULTI_RESP, tid_of(&out.mad), 500, true, 8);
                resp2.lock().unwrap().clone_from(&msg);
                segments_of(&msg, segs).into_iter().map(from_peer).collect()
            }
            (rmpp_type::ACK, _) => {
                acks2.lock().unwrap().push((f.3, f.4));
                Vec::new()
            }
            _ => Vec::new(),
        }
    });
    let client = r.agent(AgentSpec::responses_only(SpecialQp::Gsi).with_rmpp(1));
    let id = client
        .send(
            SendRequest::new(sa_message(method::GET_MULTI, 0x42, 20, true, 1), to_peer())
                .timeout_ms(timeout_ms),
        )
        .unwrap();
    (r, client, id, response, acks)
}

#[test]
fn a_late_copy_of_a_response_to_an_rmpp_request_is_acknowledged_again_not_delivered_again() {
    let (r, client, id, response, acks) = rmpp_request(&[1, 2, 3], 1000);
    let ev = r.collect(&client, Duration::from_millis(10));
    assert_eq!(ev.len(), 2, "{ev:?}");
    assert!(matches!(&ev[0], Event::Recv(m) if m.response_to.map(|s| s.id) == Some(id)));
    assert!(matches!(&ev[1], Event::Send(c) if c.id == id && c.status == WcStatus::Success));
    assert_eq!(*acks.lock().unwrap(), vec![(1, 9), (3, 9)]);
    let before = r.port.rmpp_counters();
    // Our last ACK was lost: the peer sends segment 3 again, after its send is gone.
    let msg = response.lock().unwrap().clone();
    r.fake.inject(from_peer(segments_of(&msg, &[3])[0]));
    let ev = r.collect(&client, Duration::from_millis(10));
    assert!(ev.is_empty(), "nothing delivered twice: {ev:?}");
    let after = r.port.rmpp_counters();
    assert_eq!(after.acks_sent, before.acks_sent + 1, "acknowledged again");
    assert_eq!(acks.lock().unwrap().last(), Some(&(3, 9)));
    assert_eq!(after.transfers_received, before.transfers_received);
    // The completed reassembly is forgotten after 10 s: a copy then is the ring's to drop.
    r.collect(&client, Duration::from_secs(11));
    r.fake.inject(from_peer(segments_of(&msg, &[3])[0]));
    assert!(r.collect(&client, Duration::from_millis(10)).is_empty());
    assert_eq!(r.port.rmpp_counters().acks_sent, after.acks_sent);
    assert_eq!(r.port.rmpp_counters().reassembly_timeouts, 0);
    client.deregister();
    r.assert_clean();
}

/// The peer sends segments `nums` of the kept `response` to a request of `client` that has
/// already ended: nothing is delivered, the reassembly is acknowledged to its end (the logged
/// `acks` come to segment 1 then 3, window 9), and the finished message is dropped as late.
fn rest_after_the_request_ended(
    r: &Rig,
    client: &crate::Agent,
    response: &Mutex<Vec<u8>>,
    acks: &Mutex<Vec<(u32, u32)>>,
    nums: &[u32],
) {
    let late = r.port.counters().drops.get(crate::DropReason::Late);
    let msg = response.lock().unwrap().clone();
    for seg in segments_of(&msg, nums) {
        r.fake.inject(from_peer(seg));
    }
    let ev = r.collect(client, Duration::from_millis(10));
    assert!(ev.is_empty(), "the request has ended: {ev:?}");
    assert_eq!(
        *acks.lock().unwrap(),
        vec![(1, 9), (3, 9)],
        "reassembled and acknowledged to the end"
    );
    assert_eq!(
        r.port.counters().drops.get(crate::DropReason::Late),
        late + 1,
        "the finished message dropped as a late response"
    );
}

#[test]
fn a_response_whose_request_timed_out_meanwhile_is_still_acknowledged_then_dropped() {
    // Only segment 1 comes at first; the request times out (50 ms) before the rest.
    let (r, client, id, response, acks) = rmpp_request(&[1], 50);
    let c = completions(&r.collect(&client, Duration::from_millis(200)));
    assert_eq!(c.len(), 1);
    assert_eq!((c[0].id, c[0].status), (id, WcStatus::RespTimeoutErr));
    rest_after_the_request_ended(&r, &client, &response, &acks, &[2, 3]);
    // No T2L abort later: the reassembly completed.
    r.collect(&client, Duration::from_secs(45));
    let k = r.port.rmpp_counters();
    assert_eq!((k.reassembly_timeouts, k.aborts_sent), (0, 0));
    client.deregister();
    r.assert_clean();
}

/// Our SA agent, registered with RMPP for GetMulti requests (which the peer sends in segments).
fn sa_getmulti(r: &Rig) -> crate::Agent {
    r.agent(AgentSpec::class(class::SUBN_ADM, 2, MethodMask::of(&[method::GET_MULTI])).with_rmpp(1))
}

/// Segments `nums` of a GetMulti from the peer with `data_len` bytes of data and `tid`.
fn getmulti(tid: u64, data_len: usize, nums: &[u32]) -> (Vec<u8>, Vec<[u8; MAD_LEN]>) {
    let msg = sa_message(method::GET_MULTI, tid, data_len, true, 5);
    let segs = segments_of(&msg, nums);
    (msg, segs)
}

/// The STOPs and ABORTs sent to the peer, as (type, status).
fn refusals(r: &Rig) -> Vec<(u8, u8)> {
    sent_rmpp(&r.fake.sent())
        .iter()
        .filter(|s| s.0 == rmpp_type::STOP || s.0 == rmpp_type::ABORT)
        .map(|s| (s.0, s.2))
        .collect()
}

#[test]
fn a_flood_of_first_segments_is_bounded_refused_with_stop_and_then_forgotten() {
    let r = Rig::new();
    let sa = sa_getmulti(&r);
    let limits = r.port.rmpp_limits();
    assert_eq!(
        (limits.max_reassemblies, limits.max_segments_held),
        (64, super::MAX_SEGMENTS as usize),
        "the receive queue's depth (the double's 64) and one longest message"
    );
    // 5000 transfers of 3 segments each, of which only the first segment ever comes.
    for batch in 0..5000u64 / 25 {
        for tid in batch * 25..(batch + 1) * 25 {
            r.fake
                .inject(from_peer(getmulti(0x1_0000 + tid, 450, &[1]).1[0]));
        }
        assert!(r.collect(&sa, Duration::from_millis(1)).is_empty());
    }
    assert_eq!(r.fake.dropped_no_rq(), 0, "every segment reached RMPP");
    let c = r.port.rmpp_census();
    assert_eq!((c.reassemblies, c.segments_held), (64, 64), "bounded");
    let k = r.port.rmpp_counters();
    assert_eq!(k.transfers_refused, 5000 - 64);
    assert_eq!(k.segments_received, 64);
    let stops = refusals(&r);
    assert_eq!(stops.len(), 5000 - 64);
    assert!(
        stops
            .iter()
            .all(|&s| s == (rmpp_type::STOP, rmpp_status::RESOURCES_EXHAUSTED)),
        "STOP with status 1 (resources exhausted)"
    );
    // The 64 time out 40 s after their first segment (ABORT T2L) and are forgotten.
    r.collect(&sa, Duration::from_secs(41));
    let k = r.port.rmpp_counters();
    assert_eq!(k.reassembly_timeouts, 64);
    let c = r.port.rmpp_census();
    assert_eq!((c.reassemblies, c.segments_held), (0, 0));
    // A transfer now is taken and delivered whole, once.
    let (msg, segs) = getmulti(0xF00D, 450, &[1, 2, 3]);
    for s in segs {
        r.fake.inject(from_peer(s));
    }
    let ev = r.collect(&sa, Duration::from_millis(10));
    assert_eq!(ev.len(), 1, "{ev:?}");
    let Event::Recv(q) = &ev[0] else { panic!() };
    assert_eq!(q.message()[56..], msg[56..]);
    assert_eq!(r.port.rmpp_counters().transfers_refused, 5000 - 64);
    assert_eq!(r.port.rmpp_census().segments_held, 0);
    r.collect(&sa, Duration::from_secs(11));
    assert_eq!(r.port.rmpp_census(), super::RmppCensus::default());
    sa.deregister();
    r.assert_clean();
}

#[test]
fn segments_beyond_the_ports_limit_stop_the_transfer_that_brings_them() {
    let r = Rig::new();
    let sa = sa_getmulti(&r);
    r.port.set_rmpp_limits(super::RmppLimits {
        max_reassemblies: 64,
        max_segments_held: 3,
        ..super::RmppLimits::for_recv_depth(64)
    });
    let (msg_a, seg_a) = getmulti(0xA, 450, &[1, 2, 3]);
    let (_, seg_b) = getmulti(0xB, 450, &[1, 2, 3]);
    // A1, B1, A2: 3 held. B2 would be the 4th: B is stopped and forgotten.
    for s in [seg_a[0], seg_b[0], seg_a[1], seg_b[1]] {
        r.fake.inject(from_peer(s));
    }
    assert!(r.collect(&sa, Duration::from_millis(10)).is_empty());
    assert_eq!(
        refusals(&r),
        vec![(rmpp_type::STOP, rmpp_status::RESOURCES_EXHAUSTED)]
    );
    let c = r.port.rmpp_census();
    assert_eq!((c.reassemblies, c.segments_held), (1, 2), "A only");
    // A finishes and is delivered; B's last segment finds no transfer.
    r.fake.inject(from_peer(seg_a[2]));
    r.fake.inject(from_peer(seg_b[2]));
    let ev = r.collect(&sa, Duration::from_millis(10));
    assert_eq!(ev.len(), 1, "{ev:?}");
    let Event::Recv(q) = &ev[0] else { panic!() };
    assert_eq!(q.message()[56..], msg_a[56..]);
    let k = r.port.rmpp_counters();
    assert_eq!((k.transfers_refused, k.transfers_received), (1, 1));
    assert_eq!(r.port.rmpp_census().segments_held, 0);
    sa.deregister();
    assert_eq!(r.port.rmpp_census(), super::RmppCensus::default());
    r.assert_clean();
}

#[test]
fn at_the_limit_a_completed_reassembly_makes_room_and_open_ones_do_not() {
    let r = Rig::new();
    let sa = sa_getmulti(&r);
    r.port.set_rmpp_limits(super::RmppLimits {
        max_reassemblies: 2,
        max_segments_held: 64,
        ..super::RmppLimits::for_recv_depth(64)
    });
    // One complete single-segment message (kept 10 s) and one open transfer.
    r.fake.inject(from_peer(getmulti(1, 10, &[1]).1[0]));
    r.fake.inject(from_peer(getmulti(2, 450, &[1]).1[0]));
    assert_eq!(r.collect(&sa, Duration::from_millis(10)).len(), 1);
    // A third takes the completed one's place.
    r.fake.inject(from_peer(getmulti(3, 450, &[1]).1[0]));
    r.collect(&sa, Duration::from_millis(10));
    assert!(refusals(&r).is_empty());
    assert_eq!(r.port.rmpp_census().reassemblies, 2);
    // A fourth finds both open: refused.
    r.fake.inject(from_peer(getmulti(4, 450, &[1]).1[0]));
    r.collect(&sa, Duration::from_millis(10));
    assert_eq!(
        refusals(&r),
        vec![(rmpp_type::STOP, rmpp_status::RESOURCES_EXHAUSTED)]
    );
    assert_eq!(r.port.rmpp_counters().transfers_refused, 1);
    sa.deregister();
    assert_eq!(r.port.rmpp_census(), super::RmppCensus::default());
    r.assert_clean();
}

#[test]
fn transfers_sharing_a_tid_are_each_moved_by_their_own_acks() {
    // Responses of one SA with the same TID and class to two peers, and a third with another
    // TID, all in flight at once. Each peer acknowledges every segment it gets; an ACK must
    // move only the transfer sent to the address it comes from (`ib_find_send_mad`), found
    // through the (TID, class) index.
    const OTHER: u16 = 10;
    let r = Rig::new();
    r.fake.set_responder(move |out| {
        let f = rmpp_of(&out.mad);
        if f.0 != rmpp_type::DATA {
            return Vec::new();
        }
        let ack = control(&out.mad, rmpp_type::ACK, 0, f.3, 5);
        vec![Inbound::new(SpecialQp::Gsi, ack, out.dest.dlid)]
    });
    let sa = r.agent(
        AgentSpec::class(class::SUBN_ADM, 2, MethodMask::of(&[method::GET_TABLE])).with_rmpp(1),
    );
    let to = |dlid| UdDest { dlid, ..to_peer() };
    let resp = |tid, seed| sa_message(method::GET_TABLE_RESP, tid, 1000, true, seed);
    let ids = [
        sa.send(SendRequest::new(resp(0xAB, 1), to(PEER))).unwrap(),
        sa.send(SendRequest::new(resp(0xAB, 2), to(OTHER))).unwrap(),
        sa.send(SendRequest::new(resp(0xCD, 3), to(PEER))).unwrap(),
    ];
    assert_eq!(r.port.rmpp_index_len(), 3);
    let ev = r.collect(&sa, Duration::from_millis(50));
    let mut done: Vec<_> = completions(&ev).iter().map(|c| (c.id, c.status)).collect();
    done.sort_by_key(|d| d.0);
    assert_eq!(
        done,
        ids.iter()
            .map(|&i| (i, WcStatus::Success))
            .collect::<Vec<_>>(),
        "{ev:?}"
    );
    // Every segment went once to the peer it was for: no ACK moved the wrong transfer (which
    // would have skipped or repeated segments).
    let sent = r.fake.sent();
    for (dlid, tid, seed) in [(PEER, 0xAB, 1), (OTHER, 0xAB, 2), (PEER, 0xCD, 3)] {
        let got: Vec<[u8; MAD_LEN]> = sent
            .iter()
            .filter(|o| {
                o.dest.dlid == dlid && tid_of(&o.mad) == tid && rmpp_of(&o.mad).0 == rmpp_type::DATA
            })
            .map(|o| o.mad)
            .collect();
        assert_eq!(
            got,
            segments_of(&resp(tid, seed), &[1, 2, 3, 4, 5]),
            "to {dlid} TID {tid:#x}"
        );
    }
    let k = r.port.rmpp_counters();
    assert_eq!(
        (k.segments_sent, k.acks_received, k.segments_resent),
        (15, 15, 0)
    );
    assert_eq!(r.port.rmpp_census().transfers, 0);
    assert_eq!(
        r.port.rmpp_index_len(),
        0,
        "the index empties with the table"
    );
    sa.deregister();
    r.assert_clean();
}

mod closing;
mod late;
mod user;
mod user_completed;

/// Move device time to `t` and run passes until there is nothing left to do; the send
/// completions then queued for `agent`.
fn settle_at(r: &Rig, agent: &crate::Agent, t: Duration) -> Vec<SendCompletion> {
    use driver::verbs::HcaPort;
    r.fake.wait(t);
    for _ in 0..50 {
        if r.port.progress() == 0 {
            break;
        }
    }
    let mut ev = Vec::new();
    agent.events().drain_into(&mut ev);
    completions(&ev)
}

/// The DATA segments sent to the peer so far, by segment number.
fn data_sent(r: &Rig) -> Vec<u32> {
    sent_rmpp(&r.fake.sent())
        .iter()
        .filter(|s| s.0 == rmpp_type::DATA)
        .map(|s| s.3)
        .collect()
}

/// The last segment sent to the peer.
fn last_to_peer(r: &Rig) -> [u8; MAD_LEN] {
    r.fake
        .sent()
        .iter()
        .rev()
        .find(|o| o.dest.dlid == PEER)
        .expect("a segment sent")
        .mad
}

/// A one-segment GetMulti sent with RMPP (timeout 100 ms, one retry) to a peer that never
/// answers, modified to 1000 ms while waiting for the ACK (`on_the_wire`: while its segment is
/// still on the QP). The kernel since "IB/mad: Do not save the MRA timeout" (`ib_modify_mad`
/// no longer sets `send_buf.timeout_ms`): the modify times that one ACK wait
/// (`ib_reset_mad_timeout`, or `mad_send_wr->timeout` taken at the CQE), and the resend's ACK
/// wait is the send's own 100 ms again (`retry_send` reads `send_buf.timeout_ms`, and
/// `send_next_seg` keeps it for a timeout of at most 2 s).
fn a_modify_times_one_ack_wait(on_the_wire: bool) {
    let r = Rig::new();
    let client = r.agent(AgentSpec::responses_only(SpecialQp::Gsi).with_rmpp(1));
    r.fake.hold_send_cqes(on_the_wire);
    let id = client
        .send(
            SendRequest::new(sa_message(method::GET_MULTI, 0x42, 20, true, 1), to_peer())
                .timeout_ms(100)
                .retries(1),
        )
        .unwrap();
    let t0 = r.port.now();
    assert!(settle_at(&r, &client, t0).is_empty());
    assert_eq!(data_sent(&r), vec![1]);
    client.modify_timeout(id, 1000).unwrap();
    if on_the_wire {
        r.fake.hold_send_cqes(false);
        r.fake.release_send_cqes();
        assert!(settle_at(&r, &client, t0).is_empty());
    }
    assert!(settle_at(&r, &client, t0 + Duration::from_millis(999)).is_empty());
    assert_eq!(
        data_sent(&r),
        vec![1],
        "the ACK wait was the modified 1000 ms"
    );
    assert!(settle_at(&r, &client, t0 + Duration::from_secs(1)).is_empty());
    assert_eq!(
        data_sent(&r),
        vec![1, 1],
        "resent when the modified wait ended"
    );
    assert!(settle_at(&r, &client, t0 + Duration::from_millis(1099)).is_empty());
    let c = settle_at(&r, &client, t0 + Duration::from_millis(1100));
    assert_eq!(
        c.iter()
            .map(|c| (c.id, c.status, c.retries))
            .collect::<Vec<_>>(),
        vec![(id, WcStatus::RespTimeoutErr, 1)],
        "the resend's ACK wait was the send's own 100 ms"
    );
    client.deregister();
    r.assert_clean();
}

#[test]
fn a_modify_during_an_ack_wait_times_that_wait_only() {
    a_modify_times_one_ack_wait(false);
}

#[test]
fn a_modify_while_a_segment_is_on_the_qp_times_the_ack_wait_it_begins_only() {
    a_modify_times_one_ack_wait(true);
}

#[test]
fn a_modify_before_the_last_ack_leaves_the_response_wait_at_the_sends_timeout() {
    // The kernel's process_rmpp_ack arms the response wait with send_buf.timeout_ms, which a
    // modify no longer changes.
    let r = Rig::new();
    let client = r.agent(AgentSpec::responses_only(SpecialQp::Gsi).with_rmpp(1));
    let id = client
        .send(
            SendRequest::new(sa_message(method::GET_MULTI, 0x42, 20, true, 1), to_peer())
                .timeout_ms(100),
        )
        .unwrap();
    let t0 = r.port.now();
    assert!(settle_at(&r, &client, t0).is_empty());
    client.modify_timeout(id, 5000).unwrap();
    r.fake.inject(from_peer(control(
        &last_to_peer(&r),
        rmpp_type::ACK,
        0,
        1,
        1,
    )));
    assert!(settle_at(&r, &client, t0).is_empty());
    assert_eq!(r.port.rmpp_counters().acks_received, 1);
    assert!(settle_at(&r, &client, t0 + Duration::from_millis(99)).is_empty());
    let c = settle_at(&r, &client, t0 + Duration::from_millis(100));
    assert_eq!(
        c.iter().map(|c| (c.id, c.status)).collect::<Vec<_>>(),
        vec![(id, WcStatus::RespTimeoutErr)],
        "the response wait was the send's own 100 ms, not the modified 5 s"
    );
    client.deregister();
    r.assert_clean();
}

#[test]
fn a_modify_of_a_transfer_awaiting_no_response_does_not_make_it_wait_for_one() {
    // process_rmpp_ack completes the send at its last ACK when send_buf.timeout_ms is 0,
    // which a modify no longer changes.
    let (r, sa, id) = sa_sends(200, 0, |_, _| None);
    let t0 = r.port.now();
    assert!(settle_at(&r, &sa, t0).is_empty());
    assert_eq!(data_sent(&r), vec![1]);
    sa.modify_timeout(id, 500).unwrap();
    r.fake.inject(from_peer(control(
        &last_to_peer(&r),
        rmpp_type::ACK,
        0,
        1,
        1,
    )));
    let c = settle_at(&r, &sa, t0);
    assert_eq!(
        c.iter().map(|c| (c.id, c.status)).collect::<Vec<_>>(),
        vec![(id, WcStatus::Success)],
        "ended at its last ACK"
    );
    sa.deregister();
    r.assert_clean();
}

/// A 3-segment GetMulti with RMPP, timeout `timeout_ms`: the peer grants the window to 3 at
/// segment 1's ACK; segment 2 is on the QP when the transfer is modified to 700 ms, and
/// segment 3 follows it at its CQE. The ACK wait after segment 3: the modified 700 ms when the
/// send's timeout is 1..=2000 ms (the kernel's `send_next_seg` leaves `mad_send_wr->timeout`
/// alone then), else the 2 s `send_next_seg` sets over it. Returns when the go-back resend
/// (from segment 2) went, in ms after the modify.
fn modify_before_a_next_segment(timeout_ms: u32) -> u64 {
    let r = Rig::new();
    let client = r.agent(AgentSpec::responses_only(SpecialQp::Gsi).with_rmpp(1));
    let id = client
        .send(
            SendRequest::new(sa_message(method::GET_MULTI, 0x42, 500, true, 1), to_peer())
                .timeout_ms(timeout_ms)
                .retries(1),
        )
        .unwrap();
    let t0 = r.port.now();
    assert!(settle_at(&r, &client, t0).is_empty());
    assert_eq!(data_sent(&r), vec![1]);
    r.fake.hold_send_cqes(true);
    r.fake.inject(from_peer(control(
        &last_to_peer(&r),
        rmpp_type::ACK,
        0,
        1,
        3,
    )));
    assert!(settle_at(&r, &client, t0).is_empty());
    assert_eq!(data_sent(&r), vec![1, 2], "segment 2 on the QP");
    client.modify_timeout(id, 700).unwrap();
    r.fake.hold_send_cqes(false);
    r.fake.release_send_cqes();
    assert!(settle_at(&r, &client, t0).is_empty());
    assert_eq!(data_sent(&r), vec![1, 2, 3]);
    let mut ms = 0;
    while data_sent(&r).len() == 3 {
        ms += 50;
        assert!(ms <= 3000, "resent within 3 s");
        assert!(settle_at(&r, &client, t0 + Duration::from_millis(ms)).is_empty());
    }
    assert_eq!(data_sent(&r)[..4], [1, 2, 3, 2], "back to segment 2");
    client.cancel(id).unwrap();
    settle_at(&r, &client, t0 + Duration::from_millis(ms));
    client.deregister();
    r.assert_clean();
    ms
}

#[test]
fn a_modify_before_a_next_segment_times_its_ack_wait_as_the_kernel_does() {
    assert_eq!(modify_before_a_next_segment(100), 700);
    assert_eq!(modify_before_a_next_segment(3000), 2000);
}

/// The device dies while an RMPP transfer waits for an ACK whose timeout has passed: the pass
/// that sees the death (at its start) tells the agent DeviceFatal, and the transfer then ends
/// with WR_FLUSH_ERR (vendor_err 5) like every other outstanding send, not RESP_TIMEOUT_ERR
/// (no timer decides anything on a dead device, as for plain sends).
#[test]
fn an_rmpp_transfer_past_its_ack_timeout_when_the_device_dies_is_flushed_not_timed_out() {
    for retries in [0, 1] {
        let (r, sa, id) = sa_sends(1000, retries, |_, _| None);
        let _ = r.collect(&sa, Duration::from_millis(5));
        let before = r.port.rmpp_counters();
        r.fake.make_fatal(false);
        r.fake.wait(r.port.now() + Duration::from_secs(3));
        r.port.shared.next_pass_takes_device_events();
        r.port.progress();
        r.port.progress();
        let mut ev = Vec::new();
        sa.events().drain_into(&mut ev);
        assert!(
            matches!(ev.first(), Some(Event::DeviceFatal { .. })),
            "{ev:?}"
        );
        let c = completions(&ev);
        assert_eq!(c.len(), 1, "{ev:?}");
        assert_eq!(
            (c[0].id, c[0].status, c[0].vendor_err),
            (id, WcStatus::WrFlushErr, 5),
            "{retries} retries: flushed, not timed out after the death"
        );
        assert_eq!(
            r.port.rmpp_counters().segments_resent,
            before.segments_resent,
            "{retries} retries: no segment resent to a dead device"
        );
        sa.deregister();
    }
}

/// A reassembly past its 40 s when the device dies is dropped, with no ABORT (T2L) sent to
/// the dead device; the request it answers is flushed.
#[test]
fn a_stalled_reassembly_sends_no_abort_once_the_device_died() {
    let r = Rig::new();
    r.fake.set_responder(move |out| {
        if out.mad[3] != method::GET_TABLE || rmpp_of(&out.mad).0 != rmpp_type::NONE {
            return Vec::new();
        }
        let msg = sa_message(method::GET_TABLE_RESP, tid_of(&out.mad), 600, true, 1);
        vec![from_peer(segments_of(&msg, &[1])[0])]
    });
    let client = r.agent(AgentSpec::responses_only(SpecialQp::Gsi).with_rmpp(1));
    let id = client
        .send(
            SendRequest::new(sa_message(method::GET_TABLE, 1, 0, false, 0), to_peer())
                .timeout_ms(45_000),
        )
        .unwrap();
    let ev = r.collect(&client, Duration::from_millis(5));
    assert!(ev.is_empty(), "{ev:?}");
    assert_eq!(
        r.port.rmpp_counters().segments_received,
        1,
        "a reassembly under way"
    );
    r.fake.make_fatal(false);
    r.fake.wait(r.port.now() + Duration::from_secs(41));
    r.port.shared.next_pass_takes_device_events();
    r.port.progress();
    let mut ev = Vec::new();
    client.events().drain_into(&mut ev);
    let k = r.port.rmpp_counters();
    assert_eq!((k.reassembly_timeouts, k.aborts_sent), (0, 0), "{ev:?}");
    let c = completions(&ev);
    assert_eq!(c.len(), 1, "{ev:?}");
    assert_eq!(
        (c[0].id, c[0].status, c[0].vendor_err),
        (id, WcStatus::WrFlushErr, 5)
    );
    client.deregister();
}

//! The MAD layer on the simulated ConnectX (virtual clock, pooled leases), one thread doing
//! everything (the progress loop, the requester and the responder):
//!
//! - `mad_sends`: sends without response to our own LID, completed per second (the device
//!   loops them back and the port drops them: nobody registered);
//! - `mad_round_trips/{1,16,128}`: Get -> GetResp round trips per second with that many
//!   outstanding, answered by a responder agent on the same port (loopback).
//!
//! Criterion reports time per element; elements are sends or round trips.

use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use driver::verbs::{Hca, HcaOptions, SpecialQp};
use hca_tests::mad_rig::{ANSWERED, GET, MadRig, SEND, answer_of, mad};
use mad::{Agent, Event, PortConfig, SendRequest, WcStatus};

fn rig() -> MadRig {
    MadRig::with(
        HcaOptions {
            lease_mode: dma::LeaseMode::Pooled,
            ..HcaOptions::default()
        },
        PortConfig::default(),
    )
}

/// Send `n` MADs without response, keeping the send queue full; returns when all completed.
fn sends(rig: &MadRig, a: &Agent, n: u64) {
    let dest = rig.to_self(SpecialQp::Gsi);
    let (mut sent, mut done) = (0u64, 0u64);
    while done < n {
        while sent < n && sent - done < 256 {
            a.send(SendRequest::new(mad(ANSWERED, SEND, sent as u32), dest))
                .expect("send");
            sent += 1;
        }
        rig.port.progress();
        while let Some(e) = a.try_event() {
            if let Event::Send(c) = e {
                assert_eq!(c.status, WcStatus::Success);
                done += 1;
            }
        }
    }
}

/// `n` round trips with `outstanding` requests in flight.
fn round_trips(rig: &MadRig, req: &Agent, responder: &Agent, outstanding: u64, n: u64) {
    let dest = rig.to_self(SpecialQp::Gsi);
    let send = |t: u64| {
        req.send(SendRequest::new(mad(ANSWERED, GET, t as u32), dest).timeout_ms(1000))
            .expect("request");
    };
    let (mut sent, mut done) = (0u64, 0u64);
    while sent < outstanding.min(n) {
        send(sent);
        sent += 1;
    }
    while done < n {
        // Returns as soon as something was done; otherwise lets (virtual) time pass so that
        // the looped-back packets arrive.
        rig.port
            .progress_until(rig.port.deadline_after(Duration::from_millis(1)));
        while let Some(e) = responder.try_event() {
            if let Event::Recv(r) = e {
                responder
                    .send(SendRequest::new(answer_of(&r), r.addr.reply_dest()))
                    .expect("answer");
            }
        }
        while let Some(e) = req.try_event() {
            if let Event::Send(c) = e {
                assert_eq!(c.status, WcStatus::Success, "{c:?}");
                done += 1;
                if sent < n {
                    send(sent);
                    sent += 1;
                }
            }
        }
    }
}

fn bench_sends(c: &mut Criterion) {
    let rig = rig();
    let a = rig.requester();
    let mut g = c.benchmark_group("mad_sends");
    g.throughput(Throughput::Elements(1));
    g.bench_function("loopback_no_response", |b| {
        b.iter_custom(|iters| {
            let t = Instant::now();
            sends(&rig, &a, iters);
            t.elapsed()
        });
    });
    g.finish();
    a.deregister();
}

fn bench_round_trips(c: &mut Criterion) {
    let rig = rig();
    let responder = rig.listener(ANSWERED);
    let req = rig.requester();
    let mut g = c.benchmark_group("mad_round_trips");
    g.throughput(Throughput::Elements(1));
    g.measurement_time(Duration::from_secs(5));
    for outstanding in [1u64, 16, 128] {
        g.bench_function(format!("{outstanding}_outstanding"), |b| {
            b.iter_custom(|iters| {
                let t = Instant::now();
                round_trips(&rig, &req, &responder, outstanding, iters);
                t.elapsed()
            });
        });
    }
    g.finish();
    req.deregister();
    responder.deregister();
    let _ = rig.hca.accounting();
}

criterion_group!(benches, bench_sends, bench_round_trips);
criterion_main!(benches);

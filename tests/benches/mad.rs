//! The MAD layer on the simulated ConnectX (virtual clock, pooled leases), one thread doing
//! everything (the progress loop, the requester and the responder):
//!
//! - `mad_sends`: sends without response to our own LID, completed per second (the device
//!   loops them back and the port drops them: nobody registered);
//! - `mad_round_trips/{1,16,128}`: Get -> GetResp round trips per second with that many
//!   outstanding, answered by a responder agent on the same port (loopback): both ends of
//!   every round trip go through the MAD layer, two MADs sent and two received per element;
//! - `mad_round_trips_sma/{1,16,128}`: directed-route SubnGet(NodeInfo) one hop away,
//!   answered by the simulated switch's SMA (as a remote SMA answers an SM in firmware): the
//!   requester's side alone, one MAD sent and one received per element.
//!
//! Criterion reports time per element; elements are sends or round trips.

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use driver::verbs::UdDest;
use driver::verbs::{Hca, HcaOptions, SpecialQp};
use hca_tests::mad_fabric::{SWITCH1, attach_with, dr_smp, example};
use hca_tests::mad_rig::{ANSWERED, GET, MadRig, SEND, answer_of, mad};
use mad::wire::{attr_id, method};
use mad::{Agent, AgentSpec, Event, PortConfig, SendRequest, WcStatus};
use sim::fabric::Fabric;
use sim::net::Network;
use sim::{ClockMode, Scheduler};

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

/// `n` directed-route NodeInfo Gets to Switch1 with `outstanding` in flight; each must come
/// back answered.
fn sma_round_trips(rig: &MadRig, req: &Agent, outstanding: u64, n: u64) {
    let template = dr_smp(method::GET, SWITCH1, attr_id::sm::NODE_INFO, 0, [0; 64], 0);
    let send = |t: u64| {
        let mut m = template.clone();
        m[12..16].copy_from_slice(&(t as u32).to_be_bytes());
        req.send(SendRequest::new(m, UdDest::DIRECTED_ROUTE).timeout_ms(1000))
            .expect("request");
    };
    let (mut sent, mut done) = (0u64, 0u64);
    while sent < outstanding.min(n) {
        send(sent);
        sent += 1;
    }
    while done < n {
        rig.port
            .progress_until(rig.port.deadline_after(Duration::from_millis(1)));
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

fn bench_sma_round_trips(c: &mut Criterion) {
    let fabric = Fabric::parse_file(example("net.2sw2path4hca")).expect("topology");
    let net = Network::new(fabric, Arc::new(Scheduler::new(ClockMode::Virtual)));
    let rig = attach_with(
        &net,
        "Hca1",
        HcaOptions {
            lease_mode: dma::LeaseMode::Pooled,
            ..HcaOptions::default()
        },
    );
    let req = rig.agent(AgentSpec::responses_only(SpecialQp::Smi));
    let mut g = c.benchmark_group("mad_round_trips_sma");
    g.throughput(Throughput::Elements(1));
    g.measurement_time(Duration::from_secs(5));
    for outstanding in [1u64, 16, 128] {
        g.bench_function(format!("{outstanding}_outstanding"), |b| {
            b.iter_custom(|iters| {
                let t = Instant::now();
                sma_round_trips(&rig, &req, outstanding, iters);
                t.elapsed()
            });
        });
    }
    g.finish();
    req.deregister();
}

criterion_group!(
    benches,
    bench_sends,
    bench_round_trips,
    bench_sma_round_trips
);
criterion_main!(benches);

//! The cost of one SMP and its answer through the running network, on a small fat tree and
//! on the 102,976-node one: a directed-route NodeInfo three hops deep (host, leaf, spine,
//! leaf) and a LID-routed NodeInfo across the tree (host to a host in another pod, six links
//! each way). Each iteration is what a device does: `transmit`, run the due events, take the
//! delivered answer. The goal: the cost does not grow with the fabric's size.
//!
//! Also measured: building the network (`Network::new`: agents' defaults for every port) on
//! both fabrics.

use std::collections::VecDeque;
use std::hint::black_box;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use mad_wire::smp::{DirectedRoute, Smp, SmpRepr, SmpRoute};
use mad_wire::{attr_id, method};
use sim::fabric::state::LFT_BLOCK;
use sim::fabric::{Fabric, NodeId, PortId, generator};
use sim::link::{PortChange, PortLink, PortSink};
use sim::net::Network;
use sim::packet::Packet;
use sim::{ClockMode, Scheduler};

const FABRICS: [(&str, &str); 2] = [
    (
        "26-nodes",
        "fat-tree3:pods=2,leaves=2,hosts=4,spines=2,cores=2",
    ),
    (
        "102976-nodes",
        "fat-tree3:pods=96,leaves=32,hosts=32,spines=16,cores=64",
    ),
];

#[derive(Default)]
struct Sink(Mutex<Vec<Packet>>);

impl PortSink for Sink {
    fn deliver(&self, _port: u8, packet: Packet) {
        self.0.lock().unwrap().push(packet);
    }
    fn port_changed(&self, _port: u8, _change: PortChange) {}
}

fn packet(repr: &SmpRepr, slid: u16, dlid: u16) -> Packet {
    let mut mad = Box::new([0u8; 256]);
    repr.emit(&mut Smp::new_checked(&mut mad[..]).unwrap());
    Packet {
        slid,
        dlid,
        sl: 0,
        vl15: true,
        src_qp: 0,
        dst_qp: 0,
        qkey: 0,
        pkey: 0xFFFF,
        grh: None,
        mad,
    }
}

/// The ports of a shortest path from `from` (a CA port) to CA `to`, as (egress, ingress)
/// pairs per link, found by a breadth-first search over the cables.
fn path(f: &Fabric, from: PortId, to: NodeId) -> Vec<(PortId, PortId)> {
    let mut prev: Vec<Option<(PortId, PortId)>> = vec![None; f.node_count()];
    let start = f.port(from).node();
    let first = f.peer(from).expect("cabled");
    prev[f.port(first).node().index()] = Some((from, first));
    let mut q = VecDeque::from([f.port(first).node()]);
    while let Some(n) = q.pop_front() {
        if n == to {
            break;
        }
        for p in f.ports_of(n) {
            if let Some(peer) = f.peer(p) {
                let m = f.port(peer).node();
                if prev[m.index()].is_none() && m != start {
                    prev[m.index()] = Some((p, peer));
                    q.push_back(m);
                }
            }
        }
    }
    let mut hops = Vec::new();
    let mut n = to;
    while n != start {
        let (out, inp) = prev[n.index()].expect("reachable");
        hops.push((out, inp));
        n = f.port(out).node();
    }
    hops.reverse();
    hops
}

/// Sets `lid` → `port` in the LFT of the switch owning `port`, and LinearFDBTop.
fn route(f: &mut Fabric, port: PortId, lid: u16) {
    let num = f.port(port).num();
    let node = f.port(port).node();
    let sw = f.switch_mut(node).expect("a switch");
    let block = lid / LFT_BLOCK as u16;
    let mut b = sw.lft_block(block);
    b[usize::from(lid) % LFT_BLOCK] = num;
    sw.set_lft_block(block, &b);
    sw.info.linear_fdb_top = sw.info.linear_fdb_top.max(lid);
}

struct Setup {
    net: Network,
    sink: Arc<Sink>,
    link: Arc<dyn PortLink>,
    dr: Packet,
    lid: Packet,
}

fn setup(spec: &str) -> Setup {
    let fabric = generator::generate(spec).expect("spec");
    let net = Network::new(fabric, Arc::new(Scheduler::new(ClockMode::Virtual)));
    let sink = Arc::new(Sink::default());
    let dyn_sink: Arc<dyn PortSink> = sink.clone();
    let link = net.attach("host-1", 1, &dyn_sink).expect("attach");
    // The last host is in the last pod: across the cores.
    let hosts_per_leaf = net.with_fabric_mut(|f| {
        let src = f.port_id(f.node_by_name("host-1").unwrap(), 1).unwrap();
        let last = f
            .node_ids()
            .filter(|&n| f.name(n).starts_with("host-"))
            .last()
            .unwrap();
        let hops = path(f, src, last);
        let dst = f.port_id(last, 1).unwrap();
        f.set_lid(src, 1, 0).unwrap();
        f.set_lid(dst, 2, 0).unwrap();
        for &(out, inp) in &hops {
            if f.node(f.port(out).node()).kind() == sim::fabric::NodeType::Switch {
                route(f, out, 2);
            }
            if f.node(f.port(inp).node()).kind() == sim::fabric::NodeType::Switch {
                route(f, inp, 1);
            }
        }
        let leaf = f.port(f.peer(src).unwrap()).node();
        let hosts = f
            .ports_of(leaf)
            .filter(|&p| {
                f.peer(p).is_some_and(|q| {
                    f.node(f.port(q).node()).kind() != sim::fabric::NodeType::Switch
                })
            })
            .count();
        hosts as u8
    });
    // Host 1 -> its leaf -> the leaf's first spine (port hosts+1) -> that spine's second leaf.
    let mut dr = DirectedRoute::from_path(&[1, hosts_per_leaf + 1, 2]).unwrap();
    dr.hop_pointer = 1;
    let dr = packet(
        &SmpRepr::request(
            method::GET,
            SmpRoute::Directed(dr),
            attr_id::sm::NODE_INFO,
            0,
            1,
        ),
        0xFFFF,
        0xFFFF,
    );
    let lid = packet(
        &SmpRepr::request(
            method::GET,
            SmpRoute::LidRouted,
            attr_id::sm::NODE_INFO,
            0,
            2,
        ),
        1,
        2,
    );
    let s = Setup {
        net,
        sink,
        link,
        dr,
        lid,
    };
    // Both requests must be answered, or the bench measures drops.
    for p in [s.dr.clone(), s.lid.clone()] {
        s.link.transmit(p);
        s.net.scheduler().run_due();
        assert_eq!(s.sink.0.lock().unwrap().drain(..).count(), 1, "answered");
    }
    s
}

fn one(s: &Setup, p: &Packet) {
    s.link.transmit(p.clone());
    s.net.scheduler().run_due();
    let got = s.sink.0.lock().unwrap().pop();
    black_box(got.expect("answered"));
}

fn net_forward(c: &mut Criterion) {
    let mut g = c.benchmark_group("net_forward");
    g.measurement_time(Duration::from_secs(5));
    for (name, spec) in FABRICS {
        let s = setup(spec);
        g.bench_function(BenchmarkId::new("dr_node_info_3_hops", name), |b| {
            b.iter(|| one(&s, &s.dr));
        });
        g.bench_function(
            BenchmarkId::new("lid_routed_node_info_6_links", name),
            |b| {
                b.iter(|| one(&s, &s.lid));
            },
        );
    }
    g.finish();
}

fn net_build(c: &mut Criterion) {
    let mut g = c.benchmark_group("net_build");
    g.sample_size(10).measurement_time(Duration::from_secs(20));
    for (name, spec) in FABRICS {
        let fabric = generator::generate(spec).expect("spec");
        g.bench_function(BenchmarkId::new("network_new", name), |b| {
            b.iter_batched(
                || fabric.clone(),
                |f| Network::new(f, Arc::new(Scheduler::new(ClockMode::Virtual))),
                criterion::BatchSize::LargeInput,
            );
        });
    }
    g.finish();
}

criterion_group!(benches, net_forward, net_build);
criterion_main!(benches);

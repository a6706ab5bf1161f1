//! Devices on the network: attaching, the standalone CA, loopback, two devices exchanging
//! packets, and the delivery rule (nothing is delivered on the caller's stack).

mod netutil;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mad_wire::attr::node_info::{NodeInfo, NodeInfoRepr, NodeType};
use mad_wire::attr::port_info::cap_mask;
use mad_wire::{attr_id, class, method, status};
use netutil::{Recorder, attach, dr_smp, example, gsi, local_get, network, smp_of};
use sim::link::{PortChange, PortLink, PortSink};
use sim::net::{NetError, Network, Standalone, StandaloneInit};
use sim::packet::Packet;
use sim::{ClockMode, Scheduler};

fn standalone(init: StandaloneInit, ports: u8) -> Network {
    let cfg = Standalone {
        num_ports: ports,
        node_guid: Some(0x0002_c903_0000_1000),
        init,
        ..Standalone::default()
    };
    Network::standalone(&cfg, Arc::new(Scheduler::new(ClockMode::Virtual))).unwrap()
}

#[test]
fn a_standalone_ca_starts_active_with_lid_1_by_default() {
    let net = standalone(StandaloneInit::default(), 2);
    let d = attach(&net, "sim-hca", 1);
    let s = d.link.port_info();
    assert_eq!((s.state, s.phys_state), (4, 5), "Active, LinkUp");
    assert_eq!((s.lid, s.lmc, s.sm_lid), (1, 0, 1));
    assert_eq!(s.node_guid, 0x0002_c903_0000_1000);
    assert_eq!(s.port_guid, 0x0002_c903_0000_1001);
    assert_eq!(s.subnet_prefix, 0xfe80_0000_0000_0000);
    assert_eq!(s.capability_mask, 0x0050_C048);
    assert_eq!(s.pkey_table_len, 64);
    let d2 = attach(&net, "sim-hca", 2);
    assert_eq!(d2.link.port_info().lid, 2);
}

#[test]
fn a_standalone_ca_can_start_unconfigured() {
    let net = standalone(StandaloneInit::Init, 1);
    let s = attach(&net, "sim-hca", 1).link.port_info();
    assert_eq!(
        (s.state, s.phys_state, s.lid),
        (2, 5, 0),
        "Init, LinkUp, no LID"
    );
    let net = standalone(StandaloneInit::Down, 1);
    let s = attach(&net, "sim-hca", 1).link.port_info();
    assert_eq!(
        (s.state, s.phys_state, s.lid),
        (1, 2, 0),
        "Down, Polling, no LID"
    );
}

#[test]
fn local_mad_is_the_sma_of_the_device_node() {
    let net = standalone(StandaloneInit::Active, 2);
    let d = attach(&net, "sim-hca", 2);
    let resp = d
        .link
        .local_mad(&local_get(attr_id::sm::NODE_INFO, 0), false)
        .expect("the SMA answers NodeInfo");
    let smp = smp_of(&Packet {
        mad: Box::new(resp),
        ..dr_smp(method::GET, &[], 0, 0, [0; 64])
    });
    assert_eq!(
        (smp.method, smp.status),
        (method::GET_RESP, status::SUCCESS)
    );
    let ni = NodeInfoRepr::parse(&NodeInfo::new_checked(&smp.data[..]).unwrap()).unwrap();
    assert_eq!((ni.node_type, ni.num_ports), (NodeType::Ca, 2));
    assert_eq!(ni.node_guid, 0x0002_c903_0000_1000);
    assert_eq!(
        (ni.port_guid, ni.local_port_num),
        (0x0002_c903_0000_1002, 2)
    );
    // A response is not a request: the SMA does not answer it.
    let mut r = local_get(attr_id::sm::NODE_INFO, 0);
    r[3] = method::GET_RESP;
    assert_eq!(d.link.local_mad(&r, false), None);
}

#[test]
fn a_packet_to_the_own_lid_loops_back_after_the_transmit_returns() {
    let net = standalone(StandaloneInit::Active, 1);
    let d = attach(&net, "sim-hca", 1);
    let p = gsi(0x09, method::SEND, 1, 1, 0x10, 0, b"loopback");
    d.link.transmit(p.clone());
    assert!(d.rec.take().is_empty(), "not delivered inside transmit");
    assert_eq!(net.scheduler().run_due(), 1);
    let got = d.rec.take();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0], (1, p));
    // Loopback does not touch the wire.
    let port = net.port("sim-hca", 1).unwrap();
    assert_eq!(net.counters(port).xmit_packets, 0);
}

#[test]
fn attach_refuses_what_is_not_a_free_ca_port() {
    let net = network(example("net.2sw2path4hca"));
    let sink: Arc<dyn PortSink> = Arc::new(Recorder::default());
    assert!(matches!(
        net.attach("Switch1", 1, &sink),
        Err(NetError::NotACa { .. })
    ));
    assert!(matches!(
        net.attach("Nobody", 1, &sink),
        Err(NetError::NoSuchNode { .. })
    ));
    assert!(matches!(
        net.attach("Hca1", 3, &sink),
        Err(NetError::NoSuchPort { ports: 2, .. })
    ));
    assert!(matches!(
        net.attach("Hca1", 0, &sink),
        Err(NetError::NoSuchPort { .. })
    ));
    let link = net.attach("Hca1", 1, &sink).unwrap();
    assert!(matches!(
        net.attach("Hca1", 1, &sink),
        Err(NetError::AlreadyAttached { .. })
    ));
    // Dropping the link detaches: the port is free again.
    drop(link);
    assert!(net.attach("Hca1", 1, &sink).is_ok());
}

#[test]
fn two_devices_exchange_packets_through_the_switches() {
    let net = network(example("net.2sw2path4hca"));
    let a = attach(&net, "Hca1", 1);
    let b = attach(&net, "Hca2", 1);
    // A directed route from Hca1 to Hca2: Switch1 port 3, Switch2 port 1.
    let p = dr_smp(method::GET, &[1, 3, 1], attr_id::sm::NODE_INFO, 0, [0; 64]);
    a.link.transmit(p);
    net.scheduler().run_due();
    assert!(a.rec.take().is_empty());
    let got = b.rec.take();
    assert_eq!(got.len(), 1, "the SMP reached the device at Hca2");
    let (port, pkt) = &got[0];
    assert_eq!(*port, 1);
    let smp = smp_of(pkt);
    assert_eq!(smp.method, method::GET);
    let mad_wire::smp::SmpRoute::Directed(dr) = smp.route else {
        panic!("directed route")
    };
    // As the device's host sees it: hp = hc = 3, the two switches recorded their ingress
    // ports; ReturnPath[3] is the receiving host's to fill.
    assert_eq!((dr.hop_pointer, dr.hop_count), (3, 3));
    assert_eq!(dr.return_path[1..=3], [1, 3, 0]);

    // The host at Hca2 applies its receive rule (ReturnPath[3] = its port, hp = hc + 1),
    // asks its SMA, and sends the response back with the responder's send rule applied:
    // D = 1, hp = hc.
    let mut mad = *pkt.mad;
    mad[192 + 3] = 1;
    mad[6] = 4;
    let mut resp = b.link.local_mad(&mad, false).expect("answered");
    assert_eq!(resp[4] & 0x80, 0x80, "D set");
    resp[6] = 3;
    b.link.transmit(Packet {
        mad: Box::new(resp),
        ..pkt.clone()
    });
    net.scheduler().run_due();
    let back = a.rec.take();
    assert_eq!(back.len(), 1, "the response came back to Hca1");
    let smp = smp_of(&back[0].1);
    assert_eq!(smp.method, method::GET_RESP);
    let mad_wire::smp::SmpRoute::Directed(dr) = smp.route else {
        panic!("directed route")
    };
    assert_eq!(
        dr.hop_pointer, 1,
        "the requester's own receive rule takes it to 0"
    );
    let ni = NodeInfoRepr::parse(&NodeInfo::new_checked(&smp.data[..]).unwrap()).unwrap();
    assert_eq!((ni.node_guid, ni.port_guid), (0x10_0003, 0x10_0004));
}

/// A device that locks itself while it transmits, and checks that nothing is delivered to it
/// while it holds the lock.
struct Guarded {
    busy: AtomicBool,
    lock: Mutex<()>,
    delivered: AtomicUsize,
    link: Mutex<Option<Arc<dyn PortLink>>>,
    echo: AtomicBool,
}

impl PortSink for Guarded {
    fn deliver(&self, _port: u8, packet: Packet) {
        assert!(
            !self.busy.load(Ordering::SeqCst),
            "deliver ran inside the device's transmit"
        );
        let _g = self.lock.lock().unwrap();
        self.delivered.fetch_add(1, Ordering::SeqCst);
        if self.echo.swap(false, Ordering::SeqCst) {
            // Transmitting from inside deliver is allowed: the network's lock is not held.
            let link = self.link.lock().unwrap().clone().unwrap();
            link.transmit(packet);
        }
    }

    fn port_changed(&self, _port: u8, _change: PortChange) {
        assert!(!self.busy.load(Ordering::SeqCst));
    }
}

#[test]
fn deliveries_never_run_on_the_transmitting_stack() {
    let net = standalone(StandaloneInit::Active, 1);
    let dev = Arc::new(Guarded {
        busy: AtomicBool::new(false),
        lock: Mutex::new(()),
        delivered: AtomicUsize::new(0),
        link: Mutex::new(None),
        echo: AtomicBool::new(true),
    });
    let sink: Arc<dyn PortSink> = dev.clone();
    let link = net.attach("sim-hca", 1, &sink).unwrap();
    *dev.link.lock().unwrap() = Some(link.clone());
    {
        let _g = dev.lock.lock().unwrap();
        dev.busy.store(true, Ordering::SeqCst);
        link.transmit(gsi(0x09, method::SEND, 1, 1, 0x10, 0, b"x"));
        dev.busy.store(false, Ordering::SeqCst);
    }
    assert_eq!(dev.delivered.load(Ordering::SeqCst), 0);
    // The first delivery echoes the packet; the echo is delivered on a later run.
    net.scheduler().run_due();
    net.scheduler().run_due();
    assert_eq!(dev.delivered.load(Ordering::SeqCst), 2);
    *dev.link.lock().unwrap() = None;
}

#[test]
fn a_real_time_waiter_wakes_when_a_packet_arrives() {
    let sched = Arc::new(Scheduler::new(ClockMode::Real));
    let net = Network::standalone(&Standalone::default(), sched.clone()).unwrap();
    let d = attach(&net, "sim-hca", 1);
    let link = d.link.clone();
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(20));
        link.transmit(gsi(0x09, method::SEND, 1, 1, 0x10, 0, b"wake"));
    });
    let start = sched.now();
    while d.rec.packets.lock().unwrap().is_empty() {
        assert!(
            sched.now().saturating_sub(start) < Duration::from_secs(10),
            "woken in time"
        );
        sched.run_until(sched.now() + Duration::from_secs(30));
    }
    t.join().unwrap();
    assert_eq!(d.rec.take().len(), 1);
}

#[test]
fn is_sm_is_set_through_the_link_and_cleared_when_the_device_leaves() {
    let net = network(example("net.2sw2path4hca"));
    let d = attach(&net, "Hca1", 1);
    let before = d.link.port_info().capability_mask;
    assert_eq!(before & cap_mask::IS_SM, 0);
    let after = d.link.modify_capability_mask(cap_mask::IS_SM, 0);
    assert_eq!(after, before | cap_mask::IS_SM);
    assert_eq!(d.link.port_info().capability_mask, after);
    let port = net.port("Hca1", 1).unwrap();
    drop(d);
    let mask = net.with_fabric(|f| f.port(port).state.capability_mask);
    assert_eq!(mask, before);
    let _ = class::SUBN_LID_ROUTED;
}

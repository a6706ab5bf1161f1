//! What the network tests share: a device that records what the network gives it, and the
//! packets a device's host would put on the wire, built with the `mad-wire` layouts.
//!
//! Hop pointers are written out by hand: a requester's SMI moves the hop pointer from 0 to 1
//! before the SMP leaves (IBA C14-9:1, and C14-9:3 for a 0-hop route), so a fresh
//! directed-route request is on the wire with HopPointer 1.

#![allow(dead_code)]

pub mod sweep;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use mad_wire::header::{Mad, MadHeaderRepr};
use mad_wire::smp::{DirectedRoute, Smp, SmpRepr, SmpRoute};
use mad_wire::{class, method};
use sim::fabric::Fabric;
use sim::link::{PortChange, PortLink, PortSink};
use sim::net::{Network, QP1_QKEY};
use sim::packet::Packet;
use sim::{ClockMode, Scheduler};

/// `sim/tests/<rel>`.
pub fn data(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join(rel)
}

/// The fabric of ibsim's example `name` (`sim/tests/net-examples/`).
pub fn example(name: &str) -> Fabric {
    Fabric::parse_file(data(&format!("net-examples/{name}"))).expect("example parses")
}

/// A network over `fabric` on virtual time.
pub fn network(fabric: Fabric) -> Network {
    Network::new(fabric, Arc::new(Scheduler::new(ClockMode::Virtual)))
}

/// A device that records what it receives.
#[derive(Default)]
pub struct Recorder {
    pub packets: Mutex<Vec<(u8, Packet)>>,
    pub changes: Mutex<Vec<(u8, PortChange)>>,
}

impl PortSink for Recorder {
    fn deliver(&self, port: u8, packet: Packet) {
        self.packets.lock().unwrap().push((port, packet));
    }

    fn port_changed(&self, port: u8, change: PortChange) {
        self.changes.lock().unwrap().push((port, change));
    }
}

impl Recorder {
    /// Takes the packets delivered so far.
    pub fn take(&self) -> Vec<(u8, Packet)> {
        std::mem::take(&mut *self.packets.lock().unwrap())
    }

    /// Takes the port changes reported so far.
    pub fn take_changes(&self) -> Vec<(u8, PortChange)> {
        std::mem::take(&mut *self.changes.lock().unwrap())
    }
}

/// A device attached to a port: its recorder and its link.
pub struct Device {
    pub rec: Arc<Recorder>,
    pub link: Arc<dyn PortLink>,
    sink: Arc<dyn PortSink>,
}

/// Attaches a recording device to `node` port `port`.
pub fn attach(net: &Network, node: &str, port: u8) -> Device {
    let rec = Arc::new(Recorder::default());
    let sink: Arc<dyn PortSink> = rec.clone();
    let link = net.attach(node, port, &sink).expect("attach");
    Device { rec, link, sink }
}

impl Device {
    /// Transmits `p`, runs the events due, and returns what came back.
    pub fn exchange(&self, net: &Network, p: Packet) -> Vec<(u8, Packet)> {
        self.link.transmit(p);
        net.scheduler().run_due();
        self.rec.take()
    }

    /// The one packet `p` brought back.
    pub fn request(&self, net: &Network, p: Packet) -> Packet {
        let mut got = self.exchange(net, p);
        assert_eq!(got.len(), 1, "one packet back, got {}", got.len());
        got.pop().unwrap().1
    }
}

fn boxed(buf: [u8; 256]) -> Box<[u8; 256]> {
    Box::new(buf)
}

/// A directed-route SMP along `path` (egress ports, one per hop) as a requester's host puts it
/// on the wire: HopPointer 1, permissive DrSLID/DrDLID, UD LIDs permissive, QP0, VL15.
pub fn dr_smp(m: u8, path: &[u8], attr: u16, attr_mod: u32, data: [u8; 64]) -> Packet {
    let mut route = DirectedRoute::from_path(path).expect("path fits");
    route.hop_pointer = 1;
    let mut repr = SmpRepr::request(m, SmpRoute::Directed(route), attr, attr_mod, 0x1234_5678);
    repr.data = data;
    smp_packet(&repr, 0xFFFF, 0xFFFF)
}

/// A LID-routed SMP from `slid` to `dlid`.
pub fn lid_smp(m: u8, slid: u16, dlid: u16, attr: u16, attr_mod: u32, data: [u8; 64]) -> Packet {
    let mut repr = SmpRepr::request(m, SmpRoute::LidRouted, attr, attr_mod, 0x2345_6789);
    repr.data = data;
    smp_packet(&repr, slid, dlid)
}

/// `repr` in a VL15 QP0 packet.
pub fn smp_packet(repr: &SmpRepr, slid: u16, dlid: u16) -> Packet {
    let mut buf = [0u8; 256];
    repr.emit(&mut Smp::new_checked(&mut buf[..]).unwrap());
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
        mad: boxed(buf),
    }
}

/// A GSI MAD of `mgmt_class` on QP1 from `slid` to `dlid`, with `data` at offset 64.
pub fn gsi(
    mgmt_class: u8,
    m: u8,
    slid: u16,
    dlid: u16,
    attr: u16,
    attr_mod: u32,
    data: &[u8],
) -> Packet {
    let mut buf = [0u8; 256];
    MadHeaderRepr::request(mgmt_class, 1, m, 0x3456_789A, attr, attr_mod)
        .emit(&mut Mad::new_checked(&mut buf[..]).unwrap());
    buf[64..64 + data.len()].copy_from_slice(data);
    Packet {
        slid,
        dlid,
        sl: 0,
        vl15: false,
        src_qp: 1,
        dst_qp: 1,
        qkey: QP1_QKEY,
        pkey: 0xFFFF,
        grh: None,
        mad: boxed(buf),
    }
}

/// A PMA Get or Set.
pub fn pma(m: u8, slid: u16, dlid: u16, attr: u16, data: &[u8]) -> Packet {
    gsi(class::PERF_MGMT, m, slid, dlid, attr, 0, data)
}

/// The SMP in a packet.
pub fn smp_of(p: &Packet) -> SmpRepr {
    SmpRepr::parse(&Smp::new_checked(&p.mad[..]).unwrap()).expect("an SMP")
}

/// A 256-byte Get SMP for `local_mad`: 0-hop directed route, HopPointer 1 as the host's SMI
/// leaves it for the local SMA.
pub fn local_get(attr: u16, attr_mod: u32) -> [u8; 256] {
    local_smp(method::GET, attr, attr_mod, [0; 64])
}

/// A 256-byte SMP for `local_mad`.
pub fn local_smp(m: u8, attr: u16, attr_mod: u32, data: [u8; 64]) -> [u8; 256] {
    let mut p = dr_smp(m, &[], attr, attr_mod, data);
    std::mem::replace(&mut *p.mad, [0; 256])
}

/// What a directed-route SMP brought back: the response, or `None` if nothing came back.
pub fn dr_call(
    net: &Network,
    dev: &Device,
    m: u8,
    path: &[u8],
    attr: u16,
    attr_mod: u32,
    data: [u8; 64],
) -> Option<SmpRepr> {
    let mut got = dev.exchange(net, dr_smp(m, path, attr, attr_mod, data));
    assert!(got.len() <= 1, "at most one answer");
    got.pop().map(|(_, p)| smp_of(&p))
}

/// A directed-route Get that must be answered; returns (status, data).
pub fn dr_get(
    net: &Network,
    dev: &Device,
    path: &[u8],
    attr: u16,
    attr_mod: u32,
) -> (u16, [u8; 64]) {
    let r = dr_call(net, dev, method::GET, path, attr, attr_mod, [0; 64]).expect("an answer");
    assert_eq!(r.method, method::GET_RESP);
    (r.status, r.data)
}

/// A directed-route Set that must be answered; returns (status, data).
pub fn dr_set(
    net: &Network,
    dev: &Device,
    path: &[u8],
    attr: u16,
    attr_mod: u32,
    data: [u8; 64],
) -> (u16, [u8; 64]) {
    let r = dr_call(net, dev, method::SET, path, attr, attr_mod, data).expect("an answer");
    assert_eq!(r.method, method::GET_RESP);
    (r.status, r.data)
}

/// PortInfo of 64 data bytes.
pub fn port_info(data: &[u8; 64]) -> mad_wire::attr::port_info::PortInfoRepr {
    use mad_wire::attr::port_info::{PortInfo, PortInfoRepr};
    PortInfoRepr::parse(&PortInfo::new_checked(&data[..]).unwrap()).unwrap()
}

/// The 64 data bytes of a PortInfo.
pub fn port_info_data(r: &mad_wire::attr::port_info::PortInfoRepr) -> [u8; 64] {
    use mad_wire::attr::port_info::PortInfo;
    let mut d = [0u8; 64];
    r.emit(&mut PortInfo::new_checked(&mut d[..]).unwrap());
    d
}

/// SwitchInfo of 64 data bytes.
pub fn switch_info(data: &[u8; 64]) -> mad_wire::attr::switch_info::SwitchInfoRepr {
    use mad_wire::attr::switch_info::{SwitchInfo, SwitchInfoRepr};
    SwitchInfoRepr::parse(&SwitchInfo::new_checked(&data[..]).unwrap()).unwrap()
}

/// The 64 data bytes of a SwitchInfo.
pub fn switch_info_data(r: &mad_wire::attr::switch_info::SwitchInfoRepr) -> [u8; 64] {
    use mad_wire::attr::switch_info::SwitchInfo;
    let mut d = [0u8; 64];
    r.emit(&mut SwitchInfo::new_checked(&mut d[..]).unwrap());
    d
}

/// The host's SMA answers a 0-hop SMP for the device (MAD_IFC, M_Key ignored).
pub fn local_call(dev: &Device, m: u8, attr: u16, attr_mod: u32, data: [u8; 64]) -> SmpRepr {
    let resp = dev
        .link
        .local_mad(&local_smp(m, attr, attr_mod, data), true)
        .expect("the local SMA answers");
    SmpRepr::parse(&Smp::new_checked(&resp[..]).unwrap()).unwrap()
}

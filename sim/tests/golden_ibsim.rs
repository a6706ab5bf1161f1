//! The golden MADs recorded from ibsim 0.10 on `net.2sw2path4hca` (requests built by
//! libibmad, answered by ibsim's SMA/PMA; `mad/wire/tests/vectors/README.md`), replayed
//! through this network from a device at Hca1 port 1, and the answers compared with ibsim's
//! field by field.
//!
//! Where ibsim is not what a real SMA does, the difference is asserted, not hidden:
//! - ibsim clears the upper 32 bits of the TID; we answer with the TID of the request.
//! - ibsim does not move the directed-route hop pointer (its responses carry 0); on the wire a
//!   response reaches the requester with HopPointer 1, the requester's own SMI making it 0. The
//!   recorded requests carry 0, as libibmad built them before the kernel's SMI moved it to 1;
//!   we replay them with 1, as they travel.
//! - ibsim writes the requester's port into ReturnPath\[0\], which IBA leaves unused.
//! - ibsim 0.10's LinearFDBCap is 30K; ours is ibsim 0.12's 48K (set to 30K here to compare).
//! - Before an SM runs, ibsim reports GidPrefix 0 and M_KeyLeasePeriod 0x0FF9; ours start at
//!   the IBA default fe80:: and 0.
//! - ibsim does not answer an attribute it has no handler for; an SMA answers 0x000C.

mod netutil;

use mad_wire::attr::class_port_info::{ClassPortInfo, ClassPortInfoRepr, pma_cap};
use mad_wire::attr::guid_info::{GuidInfo, GuidInfoRepr};
use mad_wire::attr::linear_forwarding_table::{LinearForwardingTable, LinearForwardingTableRepr};
use mad_wire::attr::node_description::{NodeDescription, NodeDescriptionRepr};
use mad_wire::attr::node_info::{NodeInfo, NodeInfoRepr};
use mad_wire::attr::pkey_table::{PkeyTable, PkeyTableRepr};
use mad_wire::attr::port_info::{PortInfo, PortInfoRepr};
use mad_wire::attr::switch_info::{SwitchInfo, SwitchInfoRepr};
use mad_wire::header::{Mad, MadHeaderRepr};
use mad_wire::perf::PerfMad;
use mad_wire::smp::{Smp, SmpRepr, SmpRoute};
use mad_wire::status;
use netutil::{Device, attach, example, network, sweep};
use sim::net::Network;

const VECTORS: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../mad/wire/tests/vectors/ibsim-net.2sw2path4hca.txt"
));

struct Vector {
    description: String,
    req: [u8; 256],
    resp: Option<[u8; 256]>,
}

fn hex(text: &str) -> [u8; 256] {
    assert_eq!(text.len(), 512);
    let mut out = [0u8; 256];
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).expect("hex digit");
    }
    out
}

fn vector(description: &str) -> Vector {
    let mut found: Vec<Vector> = Vec::new();
    let mut last_comment = String::new();
    for line in VECTORS.lines() {
        if line.starts_with("# madvec ") {
            found.push(Vector {
                description: last_comment.clone(),
                req: [0; 256],
                resp: None,
            });
        } else if let Some(c) = line.strip_prefix("# ") {
            c.clone_into(&mut last_comment);
        } else if let Some(h) = line.strip_prefix("REQ ") {
            found.last_mut().unwrap().req = hex(h);
        } else if let Some(h) = line.strip_prefix("RESP ") {
            found.last_mut().unwrap().resp = Some(hex(h));
        }
    }
    let mut m: Vec<Vector> = found
        .into_iter()
        .filter(|v| v.description == description)
        .collect();
    assert_eq!(m.len(), 1, "{description}");
    m.pop().unwrap()
}

fn smp(bytes: &[u8; 256]) -> SmpRepr {
    SmpRepr::parse(&Smp::new_checked(&bytes[..]).unwrap()).unwrap()
}

fn setup() -> (Network, Device) {
    let net = network(example("net.2sw2path4hca"));
    net.with_fabric_mut(|f| {
        for name in ["Switch1", "Switch2"] {
            let sw = f.node_by_name(name).unwrap();
            f.switch_mut(sw).unwrap().info.linear_fdb_cap = 30 * 1024;
        }
    });
    let dev = attach(&net, "Hca1", 1);
    (net, dev)
}

/// Replays a recorded request: a 0-hop one through the device's own SMA (as the kernel hands
/// it to MAD_IFC), any other on the wire with HopPointer 1. Returns our answer and ibsim's.
fn replay(net: &Network, d: &Device, v: &Vector) -> (SmpRepr, SmpRepr) {
    let req = smp(&v.req);
    let ibsim = smp(v.resp.as_ref().expect("ibsim answered"));
    let ours = match req.route {
        SmpRoute::Directed(dr) if dr.hop_count == 0 => {
            let mut mad = v.req;
            mad[6] = 1;
            smp(&d.link.local_mad(&mad, false).expect("answered"))
        }
        SmpRoute::Directed(_) => {
            let mut mad = v.req;
            mad[6] = 1;
            let p = netutil::smp_packet(&smp(&mad), 0xFFFF, 0xFFFF);
            smp(&d.request(net, p).mad)
        }
        SmpRoute::LidRouted => {
            let p = netutil::smp_packet(&req, sweep::LID_HCA1, dlid_of(&v.description));
            smp(&d.request(net, p).mad)
        }
    };
    // The header, field by field.
    assert_eq!(ours.class_version, ibsim.class_version);
    assert_eq!((ours.method, ours.status), (ibsim.method, ibsim.status));
    assert_eq!(
        (ours.attr_id, ours.attr_mod),
        (ibsim.attr_id, ibsim.attr_mod)
    );
    assert_eq!(ours.tid, req.tid, "we keep the request's TID");
    assert_eq!(ours.tid & 0xFFFF_FFFF, ibsim.tid & 0xFFFF_FFFF);
    assert_eq!(ours.m_key, ibsim.m_key);
    match (ours.route, ibsim.route) {
        (SmpRoute::Directed(o), SmpRoute::Directed(i)) => {
            assert_eq!(o.direction, i.direction);
            assert_eq!(o.hop_count, i.hop_count);
            assert_eq!((o.dr_slid, o.dr_dlid), (i.dr_slid, i.dr_dlid));
            let hc = usize::from(o.hop_count);
            assert_eq!(o.initial_path[1..=hc], i.initial_path[1..=hc]);
            assert_eq!(o.return_path[1..=hc], i.return_path[1..=hc]);
            assert_eq!(i.hop_pointer, 0, "ibsim leaves the hop pointer at 0");
            assert_eq!(o.hop_pointer, 1, "on the wire, before the requester's SMI");
        }
        (SmpRoute::LidRouted, SmpRoute::LidRouted) => {}
        (o, i) => panic!("routes differ: {o:?} vs {i:?}"),
    }
    (ours, ibsim)
}

fn dlid_of(description: &str) -> u16 {
    if description.contains("LID 2") { 2 } else { 1 }
}

fn node_info(r: &SmpRepr) -> NodeInfoRepr {
    NodeInfoRepr::parse(&NodeInfo::new_checked(&r.data[..]).unwrap()).unwrap()
}

fn port_info(r: &SmpRepr) -> PortInfoRepr {
    PortInfoRepr::parse(&PortInfo::new_checked(&r.data[..]).unwrap()).unwrap()
}

#[test]
fn node_info_node_description_guid_info_and_pkeys_of_the_local_ca() {
    let (net, d) = setup();
    let (o, i) = replay(&net, &d, &vector("DR 0-hop NodeInfo of the local CA"));
    assert_eq!(node_info(&o), node_info(&i));
    let (o, i) = replay(
        &net,
        &d,
        &vector("DR 0-hop NodeDescription of the local CA"),
    );
    let text = |r: &SmpRepr| {
        NodeDescriptionRepr::parse(&NodeDescription::new_checked(&r.data[..]).unwrap())
            .unwrap()
            .bytes
    };
    assert_eq!(text(&o), text(&i));
    let (o, i) = replay(
        &net,
        &d,
        &vector("DR 0-hop GUIDInfo block 0 of the local CA"),
    );
    let guids =
        |r: &SmpRepr| GuidInfoRepr::parse(&GuidInfo::new_checked(&r.data[..]).unwrap()).unwrap();
    assert_eq!(guids(&o), guids(&i));
    let (o, i) = replay(
        &net,
        &d,
        &vector("DR 0-hop P_KeyTable block 0 of the local CA"),
    );
    let pk =
        |r: &SmpRepr| PkeyTableRepr::parse(&PkeyTable::new_checked(&r.data[..]).unwrap()).unwrap();
    assert_eq!(pk(&o), pk(&i));
}

#[test]
fn port_info_of_the_local_ca_before_the_sweep() {
    let (net, d) = setup();
    let (o, i) = replay(
        &net,
        &d,
        &vector("DR 0-hop PortInfo port 1 of the local CA"),
    );
    let (o, i) = (port_info(&o), port_info(&i));
    assert_eq!((o.gid_prefix, i.gid_prefix), (0xfe80_0000_0000_0000, 0));
    assert_eq!((o.m_key_lease_period, i.m_key_lease_period), (0, 0x0FF9));
    let aligned = PortInfoRepr {
        gid_prefix: 0,
        m_key_lease_period: 0x0FF9,
        ..o
    };
    assert_eq!(aligned, i);
}

#[test]
fn the_first_switch_one_hop_away() {
    let (net, d) = setup();
    let (o, i) = replay(&net, &d, &vector("DR 1-hop NodeInfo of the first switch"));
    assert_eq!(node_info(&o), node_info(&i));
    let (o, i) = replay(&net, &d, &vector("DR 1-hop NodeDescription of the switch"));
    assert_eq!(o.data, i.data);
    let (o, i) = replay(&net, &d, &vector("DR 1-hop SwitchInfo"));
    let si = |r: &SmpRepr| {
        SwitchInfoRepr::parse(&SwitchInfo::new_checked(&r.data[..]).unwrap()).unwrap()
    };
    assert_eq!(si(&o), si(&i));
    let (o, i) = replay(&net, &d, &vector("DR 1-hop PortInfo port 3 of the switch"));
    assert_eq!(port_info(&o), port_info(&i));
}

#[test]
fn nodes_two_and_three_hops_away() {
    let (net, d) = setup();
    let (o, i) = replay(
        &net,
        &d,
        &vector("DR 2-hop NodeInfo (switch port 3 to the second switch)"),
    );
    assert_eq!(node_info(&o), node_info(&i));
    let (o, i) = replay(
        &net,
        &d,
        &vector("DR 3-hop NodeInfo of a CA behind the second switch"),
    );
    assert_eq!(node_info(&o), node_info(&i));
}

#[test]
fn an_attribute_no_sma_has() {
    let (net, d) = setup();
    let v = vector("DR 1-hop unsupported attribute 0x00FE");
    assert!(v.resp.is_none(), "ibsim answered nothing");
    let mut mad = v.req;
    mad[6] = 1;
    let resp = d.request(&net, netutil::smp_packet(&smp(&mad), 0xFFFF, 0xFFFF));
    let r = smp(&resp.mad);
    assert_eq!(r.status, status::METHOD_ATTR_UNSUPPORTED);
}

#[test]
fn after_an_sm_sweep() {
    let (net, d) = setup();
    sweep::configure(&net, &d);
    let (o, i) = replay(
        &net,
        &d,
        &vector(
            "DR 0-hop PortInfo port 1 of the local CA after the sweep (LID, SM LID, state ACTIVE)",
        ),
    );
    let (o, i) = (port_info(&o), port_info(&i));
    assert_eq!((o.m_key_lease_period, i.m_key_lease_period), (0, 0x0FF9));
    assert_eq!(
        PortInfoRepr {
            m_key_lease_period: 0x0FF9,
            ..o
        },
        i
    );
    // LID 1 is the device's own port: the packet loops back to the device, whose host asks
    // its SMA; so ask the SMA directly.
    let v = vector("LID-routed NodeInfo to LID 1");
    let ours = smp(&d.link.local_mad(&v.req, false).expect("answered"));
    let ibsim = smp(v.resp.as_ref().unwrap());
    assert_eq!((ours.method, ours.status), (ibsim.method, ibsim.status));
    assert_eq!(node_info(&ours), node_info(&ibsim));
    let (o, i) = replay(&net, &d, &vector("LID-routed SwitchInfo to LID 2"));
    let si = |r: &SmpRepr| {
        SwitchInfoRepr::parse(&SwitchInfo::new_checked(&r.data[..]).unwrap()).unwrap()
    };
    assert_eq!(si(&o), si(&i));
    let (o, i) = replay(
        &net,
        &d,
        &vector("LID-routed LinearForwardingTable block 0 of LID 2"),
    );
    let lft = |r: &SmpRepr| {
        LinearForwardingTableRepr::parse(&LinearForwardingTable::new_checked(&r.data[..]).unwrap())
            .unwrap()
    };
    assert_eq!(lft(&o), lft(&i));
}

#[test]
fn the_pma_of_the_local_ca() {
    let (net, d) = setup();
    sweep::configure(&net, &d);
    let v = vector("PMA ClassPortInfo of LID 1");
    let ours = d.link.local_mad(&v.req, false).expect("answered");
    let ibsim = v.resp.unwrap();
    let hdr = |b: &[u8; 256]| MadHeaderRepr::parse(&Mad::new_checked(&b[..]).unwrap()).unwrap();
    let (ho, hi) = (hdr(&ours), hdr(&ibsim));
    assert_eq!(
        (ho.mgmt_class, ho.method, ho.status),
        (hi.mgmt_class, hi.method, hi.status)
    );
    let cpi = |b: &[u8; 256]| {
        ClassPortInfoRepr::parse(
            &ClassPortInfo::new_checked(PerfMad::new_checked(&b[..]).unwrap().data()).unwrap(),
        )
        .unwrap()
    };
    let (o, i) = (cpi(&ours), cpi(&ibsim));
    // The whole of ibsim's answer, its capability bits included.
    assert_eq!(o, i);
    assert_eq!(o.capability_mask, pma_cap::EXT_WIDTH | pma_cap::XMIT_WAIT);
    // PortSelect 0 on a CA whose port is 1: refused, as ibsim does.
    let v = vector("PMA PortCounters of LID 1");
    let ours = d.link.local_mad(&v.req, false).expect("answered");
    assert_eq!(hdr(&ours).status, status::INVALID_ATTR_VALUE);
    assert_eq!(hdr(&ours).status, hdr(&v.resp.unwrap()).status);
}

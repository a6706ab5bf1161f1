//! Routing: directed-route SMPs by the SMI rules at every hop (multi-hop paths, the return
//! path, bad hop pointers and paths), LID routing through the LFTs an SM programmed (and the
//! drop, counted at the switch, when there is no route), VL15 for SMPs only, and the PMA
//! counting the packets that really crossed each port. Fabric: ibsim's `net.2sw2path4hca`,
//! the SM's device at Hca1 port 1.

mod netutil;

use mad_wire::attr::class_port_info::{ClassPortInfo, ClassPortInfoRepr, pma_cap};
use mad_wire::attr::node_info::{NodeInfo, NodeInfoRepr};
use mad_wire::attr::port_counters::{PortCounters, PortCountersRepr, counter_select};
use mad_wire::attr::port_counters_ext::{
    PortCountersExt, PortCountersExtRepr, counter_select as ext_select,
};
use mad_wire::perf::PerfMad;
use mad_wire::smp::SmpRoute;
use mad_wire::{MadHeaderRepr, attr_id, method, status};
use netutil::sweep::{self, LID_HCA1, LID_HCA2, LID_SWITCH1, LID_SWITCH2};
use netutil::{Device, attach, dr_smp, example, gsi, lid_smp, network, pma, smp_of};
use sim::net::{DropReason, Network, smi::DrDiscard};
use sim::packet::Packet;

fn setup() -> (Network, Device) {
    let net = network(example("net.2sw2path4hca"));
    let dev = attach(&net, "Hca1", 1);
    (net, dev)
}

fn node_guid(p: &Packet) -> u64 {
    let smp = smp_of(p);
    NodeInfoRepr::parse(&NodeInfo::new_checked(&smp.data[..]).unwrap())
        .unwrap()
        .node_guid
}

#[test]
fn a_three_hop_directed_route_and_its_return_path() {
    let (net, d) = setup();
    // Hca1 -> Switch1 (out 3) -> Switch2 (out 1) -> Hca2, a simulated CA.
    let resp = d.request(
        &net,
        dr_smp(method::GET, &[1, 3, 1], attr_id::sm::NODE_INFO, 0, [0; 64]),
    );
    let smp = smp_of(&resp);
    assert_eq!(
        (smp.method, smp.status),
        (method::GET_RESP, status::SUCCESS)
    );
    let SmpRoute::Directed(dr) = smp.route else {
        panic!("a directed-route response")
    };
    assert_eq!(dr.direction, mad_wire::smp::Direction::Returning);
    assert_eq!((dr.hop_count, dr.hop_pointer), (3, 1));
    assert_eq!(dr.initial_path[1..=3], [1, 3, 1]);
    // The ingress ports: Switch1 port 1, Switch2 port 3, Hca2 port 1.
    assert_eq!(dr.return_path[1..=3], [1, 3, 1]);
    assert_eq!(node_guid(&resp), 0x10_0003);
    assert_eq!(
        (resp.slid, resp.dlid, resp.src_qp, resp.dst_qp),
        (0xFFFF, 0xFFFF, 0, 0)
    );
    assert!(resp.vl15);
    // The second inter-switch link, and a switch two hops away.
    let resp = d.request(
        &net,
        dr_smp(method::GET, &[1, 5], attr_id::sm::NODE_INFO, 0, [0; 64]),
    );
    assert_eq!(node_guid(&resp), 0x20_0001);
    let SmpRoute::Directed(dr) = smp_of(&resp).route else {
        panic!()
    };
    assert_eq!(dr.return_path[1..=2], [1, 5]);
    // A path that loops back through the same switch: 1,3,3 comes back to Switch1.
    let resp = d.request(
        &net,
        dr_smp(method::GET, &[1, 3, 3], attr_id::sm::NODE_INFO, 0, [0; 64]),
    );
    assert_eq!(node_guid(&resp), 0x20_0000);
}

#[test]
fn directed_routes_the_smi_discards() {
    let (net, d) = setup();
    let sw1_p1 = net.port("Switch1", 1).unwrap();
    // HopPointer 0 on the wire: the sender did not apply its send rule.
    let mut p = dr_smp(method::GET, &[1, 3], attr_id::sm::NODE_INFO, 0, [0; 64]);
    p.mad[6] = 0;
    assert!(d.exchange(&net, p).is_empty());
    assert_eq!(
        net.drops()
            .get(DropReason::DirectedRoute(DrDiscard::HopPointer)),
        1
    );
    assert_eq!(net.counters(sw1_p1).vl15_dropped, 1);
    // A hop pointer beyond hc + 1.
    let mut p = dr_smp(method::GET, &[1, 3], attr_id::sm::NODE_INFO, 0, [0; 64]);
    p.mad[6] = 5;
    assert!(d.exchange(&net, p).is_empty());
    assert_eq!(
        net.drops()
            .get(DropReason::DirectedRoute(DrDiscard::HopPointer)),
        2
    );
    // A CA in the middle of the path (Hca3 at hop 2 of 3).
    assert!(
        d.exchange(
            &net,
            dr_smp(method::GET, &[1, 2, 1], attr_id::sm::NODE_INFO, 0, [0; 64])
        )
        .is_empty()
    );
    assert_eq!(
        net.drops()
            .get(DropReason::DirectedRoute(DrDiscard::NotASwitch)),
        1
    );
    // A port the switch does not have, and one it has but not cabled.
    assert!(
        d.exchange(
            &net,
            dr_smp(method::GET, &[1, 9], attr_id::sm::NODE_INFO, 0, [0; 64])
        )
        .is_empty()
    );
    assert_eq!(
        net.drops()
            .get(DropReason::DirectedRoute(DrDiscard::NoSuchPort)),
        1
    );
    assert!(
        d.exchange(
            &net,
            dr_smp(method::GET, &[1, 7], attr_id::sm::NODE_INFO, 0, [0; 64])
        )
        .is_empty()
    );
    assert_eq!(net.drops().get(DropReason::LinkDown), 1);
    let sw1_p7 = net.port("Switch1", 7).unwrap();
    assert_eq!(net.counters(sw1_p7).xmit_discards, 1);
    // A route with a LID-routed tail (DrDLID not permissive) is not carried.
    let mut p = dr_smp(method::GET, &[1], attr_id::sm::NODE_INFO, 0, [0; 64]);
    p.mad[34..36].copy_from_slice(&9u16.to_be_bytes());
    assert!(d.exchange(&net, p).is_empty());
    assert_eq!(net.drops().get(DropReason::DrLidRouted), 1);
    // HopCount above 63.
    let mut p = dr_smp(method::GET, &[1], attr_id::sm::NODE_INFO, 0, [0; 64]);
    p.mad[7] = 64;
    assert!(d.exchange(&net, p).is_empty());
    assert_eq!(
        net.drops()
            .get(DropReason::DirectedRoute(DrDiscard::HopCount)),
        1
    );
}

#[test]
fn lid_routing_follows_the_programmed_tables() {
    let (net, d) = setup();
    // Before any SM: no LIDs, no routes.
    assert!(
        d.exchange(
            &net,
            lid_smp(method::GET, 1, 4, attr_id::sm::NODE_INFO, 0, [0; 64])
        )
        .is_empty()
    );
    assert_eq!(net.drops().get(DropReason::NoRoute), 1);
    sweep::assign_lids_and_routes(&net, &d);
    // LID-routed SMPs pass ports in Init (VL15).
    let resp = d.request(
        &net,
        lid_smp(
            method::GET,
            LID_HCA1,
            LID_HCA2,
            attr_id::sm::NODE_INFO,
            0,
            [0; 64],
        ),
    );
    assert_eq!(node_guid(&resp), 0x10_0003);
    assert_eq!((resp.slid, resp.dlid), (LID_HCA2, LID_HCA1));
    let resp = d.request(
        &net,
        lid_smp(
            method::GET,
            LID_HCA1,
            LID_SWITCH2,
            attr_id::sm::NODE_INFO,
            0,
            [0; 64],
        ),
    );
    assert_eq!(node_guid(&resp), 0x20_0001);
    // A LID no LFT routes: dropped at Switch1, counted at its ingress port.
    let sw1_p1 = net.port("Switch1", 1).unwrap();
    let before = net.counters(sw1_p1).rcv_switch_relay_errors;
    assert!(
        d.exchange(
            &net,
            lid_smp(method::GET, LID_HCA1, 9, attr_id::sm::NODE_INFO, 0, [0; 64])
        )
        .is_empty()
    );
    assert_eq!(net.counters(sw1_p1).rcv_switch_relay_errors, before + 1);
    // A LID above LinearFDBTop (6) is not routed even if the entry is set.
    net.with_fabric_mut(|f| {
        let sw = f.node_by_name("Switch1").unwrap();
        let mut block = [0xFF; 64];
        block[7] = 2;
        f.switch_mut(sw).unwrap().set_lft_block(0, &{
            let mut b = block;
            b[..7].copy_from_slice(&sweep::LFT_SWITCH1);
            b
        });
    });
    assert!(
        d.exchange(
            &net,
            lid_smp(method::GET, LID_HCA1, 7, attr_id::sm::NODE_INFO, 0, [0; 64])
        )
        .is_empty()
    );
    assert_eq!(net.counters(sw1_p1).rcv_switch_relay_errors, before + 2);
    // A device's port takes only its own LIDs: an LFT that sends LID 6 (Hca4's) to Hca3,
    // where a device is attached, gets it dropped at Hca3's port.
    let client = attach(&net, "Hca3", 1);
    assert_eq!(
        d.exchange(
            &net,
            lid_smp(
                method::GET,
                LID_HCA1,
                sweep::LID_HCA3,
                attr_id::sm::NODE_INFO,
                0,
                [0; 64]
            )
        ),
        vec![]
    );
    assert_eq!(client.rec.take().len(), 1, "the device at Hca3 got its SMP");
    net.with_fabric_mut(|f| {
        let sw = f.node_by_name("Switch1").unwrap();
        let s = f.switch_mut(sw).unwrap();
        let mut b = s.lft_block(0);
        b[6] = 2;
        s.set_lft_block(0, &b);
    });
    assert!(
        d.exchange(
            &net,
            lid_smp(
                method::GET,
                LID_HCA1,
                sweep::LID_HCA4,
                attr_id::sm::NODE_INFO,
                0,
                [0; 64]
            )
        )
        .is_empty()
    );
    assert!(client.rec.take().is_empty());
    assert_eq!(net.drops().get(DropReason::WrongDlid), 1);
    assert_eq!(net.counters(net.port("Hca3", 1).unwrap()).rcv_errors, 1);
    // A multicast DLID is not forwarded.
    assert!(
        d.exchange(
            &net,
            lid_smp(
                method::GET,
                LID_HCA1,
                0xC001,
                attr_id::sm::NODE_INFO,
                0,
                [0; 64]
            )
        )
        .is_empty()
    );
    assert_eq!(net.drops().get(DropReason::Multicast), 1);
}

#[test]
fn data_packets_need_active_ports_and_vl15_is_for_smps() {
    let (net, d) = setup();
    sweep::assign_lids_and_routes(&net, &d);
    let get = || {
        pma(
            method::GET,
            LID_HCA1,
            LID_SWITCH1,
            attr_id::pma::CLASS_PORT_INFO,
            &[],
        )
    };
    // The ports are Init: the SM's own port does not send data.
    assert!(d.exchange(&net, get()).is_empty());
    assert_eq!(net.drops().get(DropReason::PortNotActive), 1);
    sweep::activate(&net, &d);
    let resp = d.request(&net, get());
    let hdr = MadHeaderRepr::parse(&mad_wire::Mad::new_checked(&resp.mad[..]).unwrap()).unwrap();
    assert_eq!(
        (hdr.method, hdr.status),
        (method::GET_RESP, status::SUCCESS)
    );
    assert_eq!(
        (resp.src_qp, resp.dst_qp, resp.qkey, resp.vl15),
        (1, 1, 0x8001_0000, false)
    );
    let cpi = ClassPortInfoRepr::parse(
        &ClassPortInfo::new_checked(PerfMad::new_checked(&resp.mad[..]).unwrap().data()).unwrap(),
    )
    .unwrap();
    assert_eq!(
        cpi.capability_mask,
        pma_cap::ALL_PORT_SELECT | pma_cap::EXT_WIDTH | pma_cap::XMIT_WAIT
    );
    assert_eq!((cpi.class_version, cpi.resp_time_value), (1, 18));
    // An SMP on a data VL, a GSI MAD on VL15, an SMP to QP1: dropped where they enter.
    let mut p = lid_smp(
        method::GET,
        LID_HCA1,
        LID_SWITCH1,
        attr_id::sm::NODE_INFO,
        0,
        [0; 64],
    );
    p.vl15 = false;
    assert!(d.exchange(&net, p).is_empty());
    let mut p = get();
    p.vl15 = true;
    assert!(d.exchange(&net, p).is_empty());
    let mut p = lid_smp(
        method::GET,
        LID_HCA1,
        LID_SWITCH1,
        attr_id::sm::NODE_INFO,
        0,
        [0; 64],
    );
    p.dst_qp = 1;
    assert!(d.exchange(&net, p).is_empty());
    assert_eq!(net.drops().get(DropReason::Vl15Violation), 3);
    let sw1_p1 = net.port("Switch1", 1).unwrap();
    assert_eq!(net.counters(sw1_p1).vl15_dropped, 2);
    // Another GSI class to a simulated node: Get is answered 0x000C.
    let resp = d.request(
        &net,
        gsi(0x0A, method::GET, LID_HCA1, LID_HCA2, 0x10, 0, &[]),
    );
    let hdr = MadHeaderRepr::parse(&mad_wire::Mad::new_checked(&resp.mad[..]).unwrap()).unwrap();
    assert_eq!(
        (hdr.method, hdr.status),
        (0x81, status::METHOD_ATTR_UNSUPPORTED)
    );
}

fn counters_request(m: u8, dlid: u16, select: u8, clear: u16) -> Packet {
    let mut data = [0u8; 44];
    let mut repr = PortCountersRepr::parse(&PortCounters::new_checked(&data[..]).unwrap()).unwrap();
    repr.port_select = select;
    repr.counter_select = clear;
    repr.emit(&mut PortCounters::new_checked(&mut data[..]).unwrap());
    pma(m, LID_HCA1, dlid, attr_id::pma::PORT_COUNTERS, &data)
}

fn counters_of(p: &Packet) -> (u16, PortCountersRepr) {
    let pm = PerfMad::new_checked(&p.mad[..]).unwrap();
    let st = pm.header().status();
    (
        st,
        PortCountersRepr::parse(&PortCounters::new_checked(pm.data()).unwrap()).unwrap(),
    )
}

#[test]
fn the_pma_counts_real_traffic_and_set_clears() {
    let (net, d) = setup();
    sweep::configure(&net, &d);
    // Clear Switch2 port 1 (toward Hca2), then send 5 SMPs through it and back.
    let (st, _) =
        counters_of(&d.request(&net, counters_request(method::SET, LID_SWITCH2, 1, 0xFFFF)));
    assert_eq!(st, status::SUCCESS);
    for _ in 0..5 {
        d.request(
            &net,
            lid_smp(
                method::GET,
                LID_HCA1,
                LID_HCA2,
                attr_id::sm::NODE_INFO,
                0,
                [0; 64],
            ),
        );
    }
    let (st, c) = counters_of(&d.request(&net, counters_request(method::GET, LID_SWITCH2, 1, 0)));
    assert_eq!(st, status::SUCCESS);
    assert_eq!(c.port_select, 1);
    assert_eq!((c.port_xmit_packets, c.port_rcv_packets), (5, 5));
    assert_eq!((c.port_xmit_data, c.port_rcv_data), (5 * 72, 5 * 72));
    // Switch2 port 3 (toward Switch1) carried those 10 packets, plus the PMA Set and Get and
    // their responses: 7 each way.
    let (_, c3) = counters_of(&d.request(&net, counters_request(method::GET, LID_SWITCH2, 3, 0)));
    assert!(c3.port_xmit_packets >= 7 && c3.port_rcv_packets >= 7);
    // Set clears only what CounterSelect names.
    let (_, c) = counters_of(&d.request(
        &net,
        counters_request(
            method::SET,
            LID_SWITCH2,
            1,
            counter_select::PORT_XMIT_PACKETS,
        ),
    ));
    assert_eq!((c.port_xmit_packets, c.port_rcv_packets), (0, 5));
    // All ports summed (switches only).
    let (st, all) =
        counters_of(&d.request(&net, counters_request(method::GET, LID_SWITCH2, 0xFF, 0)));
    assert_eq!(st, status::SUCCESS);
    assert!(all.port_rcv_packets >= c3.port_rcv_packets + 5);
    // A CA answers for its own port only; a switch port it lacks.
    let (st, _) = counters_of(&d.request(&net, counters_request(method::GET, LID_HCA2, 2, 0)));
    assert_eq!(st, status::INVALID_ATTR_VALUE);
    let (st, c) = counters_of(&d.request(&net, counters_request(method::GET, LID_HCA2, 1, 0)));
    assert_eq!(st, status::SUCCESS);
    assert!(c.port_rcv_packets >= 6);
    let (st, _) = counters_of(&d.request(&net, counters_request(method::GET, LID_SWITCH2, 9, 0)));
    assert_eq!(st, status::INVALID_ATTR_VALUE);
    // The device's own PMA through MAD_IFC sees the same counters as the network.
    let hca1 = net.port("Hca1", 1).unwrap();
    let mut mad = [0u8; 256];
    mad.copy_from_slice(&counters_request(method::GET, LID_HCA1, 1, 0).mad[..]);
    let resp = d.link.local_mad(&mad, false).expect("answered");
    let (st, c) = counters_of(&Packet {
        mad: Box::new(resp),
        ..lid_smp(0, 0, 0, 0, 0, [0; 64])
    });
    assert_eq!(st, status::SUCCESS);
    assert_eq!(
        u64::from(c.port_xmit_packets),
        net.counters(hca1).xmit_packets
    );
}

#[test]
fn port_counters_answers_what_it_counts_and_zeros_the_rest() {
    let (net, d) = setup();
    sweep::configure(&net, &d);
    // A Get carrying junk in QP1Dropped (byte 20) and past the attribute's 44 bytes.
    let mut p = counters_request(method::GET, LID_SWITCH2, 1, 0);
    let data_at = mad_wire::perf::DATA_OFFSET;
    p.mad[data_at + 20] = 0xAB;
    p.mad[data_at + 21] = 0xCD;
    p.mad[data_at + 44] = 0xEF;
    p.mad[data_at + 191] = 0x5A;
    let resp = d.request(&net, p);
    let (st, c) = counters_of(&resp);
    assert_eq!(st, status::SUCCESS);
    assert_eq!(c.qp1_dropped, 0);
    let pm = PerfMad::new_checked(&resp.mad[..]).unwrap();
    assert!(
        pm.data()[44..].iter().all(|&b| b == 0),
        "{:?}",
        &pm.data()[44..]
    );
}

fn ext_request(m: u8, dlid: u16, select: u8, clear: u16) -> Packet {
    let mut data = [0u8; 72];
    let repr = PortCountersExtRepr {
        port_select: select,
        counter_select: clear,
        ..PortCountersExtRepr::default()
    };
    repr.emit(&mut PortCountersExt::new_checked(&mut data[..]).unwrap());
    pma(m, LID_HCA1, dlid, attr_id::pma::PORT_COUNTERS_EXT, &data)
}

fn ext_of(p: &Packet) -> (u16, PortCountersExtRepr) {
    let pm = PerfMad::new_checked(&p.mad[..]).unwrap();
    let st = pm.header().status();
    (
        st,
        PortCountersExtRepr::parse(&PortCountersExt::new_checked(pm.data()).unwrap()).unwrap(),
    )
}

#[test]
fn port_counters_extended_counts_in_64_bits_and_set_clears_what_it_names() {
    let (net, d) = setup();
    sweep::configure(&net, &d);
    // Clear Switch2 port 1 (toward Hca2) through PortCountersExtended, then send 5 SMPs to
    // Hca2 through it and back.
    let (st, c) = ext_of(&d.request(&net, ext_request(method::SET, LID_SWITCH2, 1, 0x00FF)));
    assert_eq!((st, c.port_xmit_packets, c.port_rcv_packets), (0, 0, 0));
    for _ in 0..5 {
        d.request(
            &net,
            lid_smp(
                method::GET,
                LID_HCA1,
                LID_HCA2,
                attr_id::sm::NODE_INFO,
                0,
                [0; 64],
            ),
        );
    }
    let resp = d.request(&net, ext_request(method::GET, LID_SWITCH2, 1, 0));
    let (st, c) = ext_of(&resp);
    assert_eq!(st, status::SUCCESS);
    assert_eq!(
        c,
        PortCountersExtRepr {
            port_select: 1,
            counter_select: 0,
            port_xmit_data: 5 * 72,
            port_rcv_data: 5 * 72,
            port_xmit_packets: 5,
            port_rcv_packets: 5,
            port_unicast_xmit_packets: 5,
            port_unicast_rcv_packets: 5,
            port_multicast_xmit_packets: 0,
            port_multicast_rcv_packets: 0,
        }
    );
    // Nothing after the attribute's 72 bytes.
    let pm = PerfMad::new_checked(&resp.mad[..]).unwrap();
    assert!(pm.data()[72..].iter().all(|&b| b == 0));
    // Set clears only what CounterSelect names: PortRcvPkts clears the received count, not
    // the transmitted one; PortUnicastXmitPkts its own.
    let (st, c) = ext_of(&d.request(
        &net,
        ext_request(
            method::SET,
            LID_SWITCH2,
            1,
            ext_select::PORT_RCV_PACKETS | ext_select::PORT_UNICAST_XMIT_PACKETS,
        ),
    ));
    assert_eq!(st, status::SUCCESS);
    assert_eq!(
        (
            c.port_xmit_packets,
            c.port_rcv_packets,
            c.port_unicast_xmit_packets,
            c.port_unicast_rcv_packets,
            c.port_xmit_data,
        ),
        (5, 0, 0, 5, 5 * 72)
    );
    // The same counters PortCounters shows.
    let (_, pc) = counters_of(&d.request(&net, counters_request(method::GET, LID_SWITCH2, 1, 0)));
    assert_eq!((pc.port_xmit_packets, pc.port_rcv_packets), (5, 0));
    // All ports summed on a switch; a CA only for its own port.
    let (st, all) = ext_of(&d.request(&net, ext_request(method::GET, LID_SWITCH2, 0xFF, 0)));
    assert_eq!(st, status::SUCCESS);
    assert!(all.port_xmit_packets > 5);
    let (st, _) = ext_of(&d.request(&net, ext_request(method::GET, LID_HCA2, 2, 0)));
    assert_eq!(st, status::INVALID_ATTR_VALUE);
    let (st, c) = ext_of(&d.request(&net, ext_request(method::GET, LID_HCA2, 1, 0)));
    assert_eq!(st, status::SUCCESS);
    assert!(c.port_rcv_packets >= 6);
}

/// The LIDs of Hca3 and Hca4 as the test moves them.
fn path_info(net: &Network, d: &Device, path: &[u8]) -> u16 {
    netutil::port_info(&netutil::dr_get(net, d, path, attr_id::sm::PORT_INFO, 0).1).lid
}

/// The NodeGUID of whoever answers a LID-routed NodeInfo Get to `dlid`.
fn answers(net: &Network, d: &Device, dlid: u16) -> Option<u64> {
    let got = d.exchange(
        net,
        lid_smp(
            method::GET,
            LID_HCA1,
            dlid,
            attr_id::sm::NODE_INFO,
            0,
            [0; 64],
        ),
    );
    assert!(got.len() <= 1, "at most one answer");
    got.first().map(|(_, p)| node_guid(p))
}

/// A PortInfo Set may give a port a LID another port still holds: a real SMA knows only its
/// own port (`qib_mad.c` `subn_set_portinfo` refuses only LID 0 and multicast LIDs), and ibsim
/// (`sim_mad.c`) takes it and only logs "overwrite lid table entry". OpenSM's LID manager has
/// several LID Sets in flight, so a port is routinely given a LID that another gives up later
/// in the same sweep. While two ports hold a LID, a packet for it goes where the LFTs send it
/// and the first port on its way holding that LID takes it.
#[test]
fn a_lid_another_port_still_holds_is_taken_and_routed_once_moved() {
    // NodeGUIDs by ibsim's scheme (CAs from 0x100000, each taking ports + 1 GUIDs).
    const HCA3_GUID: u64 = 0x10_0006;
    const HCA4_GUID: u64 = 0x10_0009;
    let (net, d) = setup();
    sweep::assign_lids_and_routes(&net, &d);
    assert_eq!(path_info(&net, &d, sweep::HCA3), sweep::LID_HCA3);
    assert_eq!(path_info(&net, &d, sweep::HCA4), sweep::LID_HCA4);
    assert_eq!(answers(&net, &d, 6), Some(HCA4_GUID));
    // Hca3 takes LID 6, which Hca4 still holds: status 0 (update_port asserts it).
    sweep::set_lid(&net, &d, sweep::HCA3, 0, 6);
    assert_eq!(path_info(&net, &d, sweep::HCA3), 6);
    assert_eq!(path_info(&net, &d, sweep::HCA4), 6);
    // Both hold 6: the LFTs still lead 6 to Hca4, which takes it.
    assert_eq!(answers(&net, &d, 6), Some(HCA4_GUID));
    // Hca4 moves on to 7; the SM reprograms the LFTs for the new LIDs.
    sweep::set_lid(&net, &d, sweep::HCA4, 0, 7);
    assert_eq!(path_info(&net, &d, sweep::HCA4), 7);
    // Switch1: 6 to Hca3 (port 2), 7 towards Switch2 (port 5); Switch2: 6 back to Switch1
    // (port 5), 7 to Hca4 (port 2). LID 5 is no one's now.
    sweep::program_switch(&net, &d, sweep::SWITCH1, &[0xFF, 1, 0, 3, 3, 0xFF, 2, 5]);
    sweep::program_switch(&net, &d, sweep::SWITCH2, &[0xFF, 3, 3, 0, 1, 0xFF, 5, 2]);
    assert_eq!(answers(&net, &d, 6), Some(HCA3_GUID));
    assert_eq!(answers(&net, &d, 7), Some(HCA4_GUID));
    assert_eq!(answers(&net, &d, 5), None);
    // The index follows: each LID has its one holder again.
    let (hca3, hca4) = (net.port("Hca3", 1).unwrap(), net.port("Hca4", 1).unwrap());
    net.with_fabric(|f| {
        assert_eq!(f.lid_owner(6), Some(hca3));
        assert_eq!(f.lid_owner(7), Some(hca4));
        assert_eq!(f.lid_owner(5), None);
    });
}

/// A switch's management port is an end port: it takes only the DLIDs of its own LID/LMC
/// range. An LFT entry of 0 for another LID leads the packet to port 0, which drops it and
/// counts it (PortRcvErrors of port 0, `DropReason::WrongDlid`) instead of answering.
#[test]
fn a_switch_answers_only_its_own_lids_whatever_its_lft_says() {
    let (net, d) = setup();
    sweep::assign_lids_and_routes(&net, &d);
    // Switch1's LFT: LID 7 (no one's) to port 0, LinearFDBTop 7.
    let mut lft = sweep::LFT_SWITCH1.to_vec();
    lft.push(0);
    sweep::program_switch(&net, &d, sweep::SWITCH1, &lft);
    let sw1_p0 = net.with_fabric(|f| f.port_id(f.node_by_name("Switch1").unwrap(), 0).unwrap());
    let (errors, wrong) = (
        net.counters(sw1_p0).rcv_errors,
        net.drops().get(DropReason::WrongDlid),
    );
    assert!(
        d.exchange(
            &net,
            lid_smp(method::GET, LID_HCA1, 7, attr_id::sm::NODE_INFO, 0, [0; 64])
        )
        .is_empty(),
        "Switch1 does not answer LID 7"
    );
    assert_eq!(net.drops().get(DropReason::WrongDlid), wrong + 1);
    assert_eq!(net.counters(sw1_p0).rcv_errors, errors + 1);
    // Its own LID (LFT entry 0 too) is answered.
    let resp = d.request(
        &net,
        lid_smp(
            method::GET,
            LID_HCA1,
            LID_SWITCH1,
            attr_id::sm::NODE_INFO,
            0,
            [0; 64],
        ),
    );
    assert_eq!(node_guid(&resp), 0x20_0000);
    assert_eq!(resp.slid, LID_SWITCH1);
    assert_eq!(net.drops().get(DropReason::WrongDlid), wrong + 1);
}

/// LID 0 is reserved (IBA 4.1.3): no port holds it and no switch forwards a packet for it,
/// whatever LFT entry 0 holds (ibsim's `lid_route_MAD` refuses it too). The switch drops it
/// once, as it drops any LID it has no route for (`NoRoute`, PortRcvSwitchRelayErrors of the
/// ingress port); a CA, simulated or with a device attached, does not take it as its own.
#[test]
fn dlid_0_is_never_forwarded_nor_taken() {
    let (net, d) = setup();
    sweep::assign_lids_and_routes(&net, &d);
    // Switch1's LFT entry 0 leads to Hca3 (port 2), where a device listens.
    let mut lft = sweep::LFT_SWITCH1.to_vec();
    lft[0] = 2;
    sweep::program_switch(&net, &d, sweep::SWITCH1, &lft);
    let client = attach(&net, "Hca3", 1);
    let (sw1_p1, sw1_p2) = (
        net.port("Switch1", 1).unwrap(),
        net.port("Switch1", 2).unwrap(),
    );
    let relay = net.counters(sw1_p1).rcv_switch_relay_errors;
    let xmit = net.counters(sw1_p2).xmit_packets;
    let (drops, no_route) = (net.drops().total(), net.drops().get(DropReason::NoRoute));
    let smp = lid_smp(method::GET, LID_HCA1, 0, attr_id::sm::NODE_INFO, 0, [0; 64]);
    assert!(d.exchange(&net, smp).is_empty());
    assert!(client.rec.take().is_empty(), "nothing reached Hca3");
    assert_eq!(
        net.counters(sw1_p2).xmit_packets,
        xmit,
        "nothing left by port 2"
    );
    assert_eq!(net.counters(sw1_p1).rcv_switch_relay_errors, relay + 1);
    assert_eq!(net.drops().get(DropReason::NoRoute), no_route + 1);
    assert_eq!(net.drops().total(), drops + 1, "one drop");

    // Two CAs cabled to each other: neither takes DLID 0, configured (LID 1) or not.
    let two = "Hca 1 \"A\"\n[1] \"B\"[1]\n\nHca 1 \"B\"\n[1] \"A\"[1]\n";
    for b_lid in [0u16, 1] {
        for b_device in [false, true] {
            let net = network(sim::fabric::Fabric::parse_str("two", two).unwrap());
            let a = attach(&net, "A", 1);
            let b = b_device.then(|| attach(&net, "B", 1));
            let (pa, pb) = (net.port("A", 1).unwrap(), net.port("B", 1).unwrap());
            net.with_fabric_mut(|f| {
                for p in [pa, pb] {
                    f.port_mut(p).state.link_state = sim::fabric::state::LinkState::Active;
                }
                if b_lid != 0 {
                    f.set_lid(pb, b_lid, 0).unwrap();
                }
            });
            let smp = lid_smp(method::GET, 2, 0, attr_id::sm::NODE_INFO, 0, [0; 64]);
            assert!(a.exchange(&net, smp).is_empty(), "B LID {b_lid}");
            if let Some(b) = &b {
                assert!(b.rec.take().is_empty(), "B's device LID {b_lid}");
            }
            assert_eq!(net.drops().get(DropReason::WrongDlid), 1, "B LID {b_lid}");
            assert_eq!(net.drops().total(), 1);
        }
    }
}

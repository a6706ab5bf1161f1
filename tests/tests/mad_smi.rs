//! Directed-route SMPs through the MAD layer on the simulated ConnectX and fabric
//! (reference/mad-stack.md §1.8, §2.8): a 0-hop SMP answered by the local SMA without the
//! wire, directed routes through switches, SMPs to our own port answered by our MAD layer,
//! LID-routed SMPs once an SM (run here through the MAD layer) has programmed the switches,
//! and refused routes. Each ends with leases, mappings and IOMMU faults checked.

// Short names (fabric, agent, tracker, MAD) read better in these scenarios.
#![allow(clippy::many_single_char_names)]

use std::time::Duration;

use driver::verbs::{SpecialQp, UdDest, WcStatus};
use hca_tests::mad_fabric::{
    HCA2, HCA4, LID_HCA2, LID_SWITCH2, MadFabric, SWITCH2, dr_smp, lid_dest, lid_smp, smp_of,
};
use hca_tests::mad_rig::{MadRig, Tracker};
use mad::wire::attr::node_info::{NodeInfo, NodeInfoRepr, NodeType};
use mad::wire::attr::port_info::{PortInfo, PortInfoRepr};
use mad::wire::smp::Direction;
use mad::wire::{attr_id, method, status};
use mad::{AgentSpec, Event, MadError, MethodMask, SendRequest, SmiDiscard};

fn node_info(data: &[u8; 64]) -> NodeInfoRepr {
    NodeInfoRepr::parse(&NodeInfo::new_checked(&data[..]).unwrap()).unwrap()
}

#[test]
fn a_0_hop_node_info_is_answered_by_the_local_sma_with_nothing_on_the_wire() {
    let rig = MadRig::new();
    let me = rig.sim.net.port("sim-hca", 1).unwrap();
    let before = rig.sim.net.counters(me);
    let a = rig.agent(AgentSpec::responses_only(SpecialQp::Smi));
    let id = a
        .send(
            SendRequest::new(
                dr_smp(method::GET, &[], attr_id::sm::NODE_INFO, 0, [0; 64], 0x77),
                UdDest::DIRECTED_ROUTE,
            )
            .timeout_ms(100)
            .context(5),
        )
        .unwrap();
    let mut t = Tracker::default();
    assert!(
        rig.pump_until(None, &[&a], &mut t, Duration::from_secs(1), |t| t
            .all_done(&[id]))
    );
    // The response first, then the completion, each once.
    assert_eq!(t.recvs.len(), 1);
    assert_eq!(t.order, vec![id]);
    let r = &t.recvs[0];
    assert_eq!(r.response_to.map(|s| (s.id, s.context)), Some((id, 5)));
    let smp = smp_of(r);
    assert_eq!(
        (smp.method, smp.status, smp.tid),
        (
            method::GET_RESP,
            0,
            u64::from(mad::tid::local_stamp(a.id().0)) << 32 | 0x77
        ),
        "the client's TID, the agent's ID in the stack's upper half (the kernel's hi_tid)"
    );
    let ni = node_info(&smp.data);
    let guid = rig.sim.model.mlx5_config().node_guid;
    assert_eq!(
        (ni.node_type, ni.node_guid, ni.port_guid),
        (NodeType::Ca, guid, guid + 1)
    );
    assert_eq!(ni.local_port_num, 1);
    assert_eq!(t.status(id), Some(WcStatus::Success));
    // No DMA, no packet: the port's counters did not move.
    let after = rig.sim.net.counters(me);
    assert_eq!(
        (after.xmit_packets, after.rcv_packets),
        (before.xmit_packets, before.rcv_packets),
        "nothing on the wire"
    );
    let k = rig.port.smi_counters();
    assert_eq!((k.local, k.local_answered, k.sent), (1, 1, 0));
    assert_eq!(rig.port.counters().posted, 0, "no work request posted");
    rig.deregister(a, &mut t);
    rig.assert_clean();
    rig.finish();
}

#[test]
fn directed_routes_through_switches_are_answered_and_matched() {
    let f = MadFabric::new();
    let a = f.hca1.agent(AgentSpec::responses_only(SpecialQp::Smi));
    let guid = |node: &str| {
        let id = f.net.node(node).unwrap();
        f.net.with_fabric(|fab| fab.node(id).guid())
    };
    // Switch2, two hops; Hca4 (a network CA) behind it, three hops.
    let sw2 = f.dr_call(&a, method::GET, SWITCH2, attr_id::sm::NODE_INFO, 0, [0; 64]);
    let ni = node_info(&sw2.data);
    assert_eq!(
        (ni.node_type, ni.node_guid),
        (NodeType::Switch, guid("Switch2"))
    );
    let mad::wire::smp::SmpRoute::Directed(dr) = sw2.route else {
        panic!("a directed route")
    };
    assert_eq!(dr.direction, Direction::Returning);
    assert_eq!(
        (dr.hop_pointer, dr.hop_count),
        (0, 2),
        "back at the requester"
    );
    assert_eq!(
        &dr.return_path[1..=2],
        &[1, 3],
        "Switch1 entered by port 1, Switch2 by port 3"
    );
    let hca4 = f.dr_call(&a, method::GET, HCA4, attr_id::sm::NODE_INFO, 0, [0; 64]);
    let ni = node_info(&hca4.data);
    assert_eq!((ni.node_type, ni.node_guid), (NodeType::Ca, guid("Hca4")));
    let k = f.hca1.port.smi_counters();
    assert_eq!((k.sent, k.received, k.local), (2, 2, 0));
    let mut t = Tracker::default();
    f.hca1.deregister(a, &mut t);
    f.assert_clean();
    f.finish();
}

#[test]
fn smps_to_our_port_are_answered_by_our_mad_layer() {
    let f = MadFabric::new();
    let a = f.hca1.agent(AgentSpec::responses_only(SpecialQp::Smi));
    // Hca2's SMA answers through Hca2's MAD layer (receive rules, process_mad, the reply's
    // send rule back along the ReturnPath).
    let r = f.dr_call(&a, method::GET, HCA2, attr_id::sm::NODE_INFO, 0, [0; 64]);
    let ni = node_info(&r.data);
    let id = f.net.node("Hca2").unwrap();
    let want = f.net.with_fabric(|fab| fab.node(id).guid());
    assert_eq!(
        (ni.node_type, ni.node_guid, ni.local_port_num),
        (NodeType::Ca, want, 1)
    );
    let pi = f.dr_call(&a, method::GET, HCA2, attr_id::sm::PORT_INFO, 0, [0; 64]);
    let pi = PortInfoRepr::parse(&PortInfo::new_checked(&pi.data[..]).unwrap()).unwrap();
    assert_eq!(pi.local_port_num, 1);
    let k2 = f.hca2.port.smi_counters();
    assert_eq!((k2.received, k2.replies), (2, 2), "{k2:?}");
    assert_eq!(f.hca2.port.counters().local_replies, 2);

    // SMInfo is not the SMA's: with an SM agent on Hca2 it gets the request and answers it
    // itself; without one, Hca2's MAD layer answers 0x000C.
    let sm2 = f
        .hca2
        .agent(AgentSpec::class(0x81, 1, MethodMask::of(&[method::GET])));
    let id = a
        .send(
            SendRequest::new(
                dr_smp(method::GET, HCA2, attr_id::sm::SM_INFO, 0, [0; 64], 9),
                UdDest::DIRECTED_ROUTE,
            )
            .timeout_ms(100),
        )
        .unwrap();
    let mut t = Tracker::default();
    let mut answered = false;
    assert!(f.pump_until(&[&a], &mut t, Duration::from_secs(1), |t| {
        if !answered {
            if let Some(Event::Recv(q)) = sm2.try_event() {
                let mut resp = q.mad;
                resp[3] = method::GET_RESP;
                resp[4] |= 0x80;
                resp[64] = 0xC1;
                sm2.send(SendRequest::new(resp.to_vec(), q.addr.reply_dest()))
                    .expect("the SM's answer");
                answered = true;
            }
        }
        t.all_done(&[id])
    }));
    assert_eq!(t.status(id), Some(WcStatus::Success));
    let r = t.recvs.iter().find(|r| r.response_to.is_some()).unwrap();
    assert_eq!(
        (r.mad[64], smp_of(r).status),
        (0xC1, 0),
        "the SM agent's answer"
    );
    // Send IDs are per port: Hca2's go to a tracker of their own.
    let mut t2 = Tracker::default();
    f.hca2.deregister(sm2, &mut t2);
    assert_eq!(t2.done.len(), 1, "the SM agent's answer completed once");
    let r = f.dr_call(&a, method::GET, HCA2, attr_id::sm::SM_INFO, 0, [0; 64]);
    assert_eq!(
        r.status,
        status::METHOD_ATTR_UNSUPPORTED,
        "no SM there: 0x000C"
    );
    assert_eq!(f.hca2.port.counters().unmatched_replies, 1);
    f.hca1.deregister(a, &mut t);
    f.assert_clean();
    f.finish();
}

#[test]
fn lid_routed_smps_reach_a_switch_and_our_other_port_once_the_subnet_is_configured() {
    let mut f = MadFabric::new();
    // The SM's sweep, through Hca1's MAD layer: Hca1's own LID by a local 0-hop Set.
    f.configure();
    assert!(
        f.hca1.port.smi_counters().local >= 2,
        "our own PortInfo Get and Sets"
    );
    let a = f.hca1.agent(AgentSpec::responses_only(SpecialQp::Smi));
    for (dlid, node, kind) in [
        (LID_SWITCH2, "Switch2", NodeType::Switch),
        (LID_HCA2, "Hca2", NodeType::Ca),
    ] {
        let (resp, c) = f.call(
            &a,
            SendRequest::new(
                lid_smp(
                    method::GET,
                    attr_id::sm::NODE_INFO,
                    0,
                    0x600 + u64::from(dlid),
                ),
                lid_dest(dlid, SpecialQp::Smi),
            )
            .timeout_ms(100),
        );
        assert_eq!(c.status, WcStatus::Success, "LID {dlid}");
        let r = resp.expect("a response");
        assert_eq!(r.addr.slid, dlid, "from {node}'s LID");
        let smp = smp_of(&r);
        assert_eq!(smp.route, mad::wire::smp::SmpRoute::LidRouted);
        let ni = node_info(&smp.data);
        let id = f.net.node(node).unwrap();
        assert_eq!(
            (ni.node_type, ni.node_guid),
            (kind, f.net.with_fabric(|fab| fab.node(id).guid()))
        );
    }
    // Hca2's SMA answered the LID-routed Get through Hca2's MAD layer.
    assert!(f.hca2.port.counters().local_replies >= 1);
    let mut t = Tracker::default();
    f.hca1.deregister(a, &mut t);
    f.assert_clean();
    f.finish();
}

#[test]
fn routes_the_send_rules_discard_are_refused_and_nothing_is_sent() {
    let f = MadFabric::new();
    let me = f.port_id("Hca1", 1);
    let before = f.net.counters(me).xmit_packets;
    let a = f.hca1.agent(AgentSpec::responses_only(SpecialQp::Smi));
    // InitialPath[1] must be the port we send from (1).
    let e = a
        .send(SendRequest::new(
            dr_smp(method::GET, &[2, 3], attr_id::sm::NODE_INFO, 0, [0; 64], 1),
            UdDest::DIRECTED_ROUTE,
        ))
        .unwrap_err();
    assert!(
        matches!(
            e,
            MadError::DirectedRoute {
                port: 1,
                reason: SmiDiscard::WrongEgress
            }
        ),
        "{e}"
    );
    // A hop pointer a requester cannot send from (mid-path at a CA).
    let mut m = dr_smp(method::GET, SWITCH2, attr_id::sm::NODE_INFO, 0, [0; 64], 2);
    m[6] = 1;
    assert!(matches!(
        a.send(SendRequest::new(m, UdDest::DIRECTED_ROUTE)),
        Err(MadError::DirectedRoute {
            reason: SmiDiscard::NotASwitch,
            ..
        })
    ));
    let k = f.hca1.port.smi_counters();
    assert_eq!(k.send_discards.total(), 2);
    assert_eq!(f.hca1.port.counters().sends, 0);
    let mut t = Tracker::default();
    f.pump(&[&a], &mut t, Duration::from_millis(5));
    assert_eq!(
        f.net.counters(me).xmit_packets,
        before,
        "nothing left the port"
    );
    f.hca1.deregister(a, &mut t);
    f.assert_clean();
    f.finish();
}

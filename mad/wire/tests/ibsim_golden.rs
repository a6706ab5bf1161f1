//! Golden MADs recorded from ibsim 0.10 and libibmad 44 on ibsim's `net.2sw2path4hca`
//! (`vectors/README.md`). Each REQ and RESP is parsed and its fields compared with the values
//! written out here by hand from the recorded bytes and the topology: Hca1 (GUIDs 0x100000…,
//! attached at Switch1 port 1), Switch1 (0x200000, "Switch1"), Switch2 (0x200001, reached from
//! Switch1 port 3 on its port 3), Hca2 (0x100003…, on Switch2 port 1). Requests built here from
//! the same query must equal libibmad's bytes.

use mad_wire::attr::class_port_info::{ClassPortInfo, ClassPortInfoRepr, pma_cap};
use mad_wire::attr::guid_info::{GuidInfo, GuidInfoRepr};
use mad_wire::attr::linear_forwarding_table::{LinearForwardingTable, LinearForwardingTableRepr};
use mad_wire::attr::node_description::{NodeDescription, NodeDescriptionRepr};
use mad_wire::attr::node_info::{NodeInfo, NodeInfoRepr, NodeType};
use mad_wire::attr::pkey_table::{PkeyTable, PkeyTableRepr};
use mad_wire::attr::port_info::{PhysPortState, PortInfo, PortInfoRepr, PortState};
use mad_wire::attr::switch_info::{SwitchInfo, SwitchInfoRepr};
use mad_wire::header::{Mad, MadHeaderRepr};
use mad_wire::perf::PerfMad;
use mad_wire::smp::{DirectedRoute, Direction, Smp, SmpRepr, SmpRoute};
use mad_wire::{attr_id, class, method, status};

const VECTORS: &str = include_str!("vectors/ibsim-net.2sw2path4hca.txt");

/// The TID libibmad put in every request; ibsim answers with the upper 32 bits cleared.
const REQ_TID: u64 = 0x0000_ABCD_1234_5678;
const RESP_TID: u64 = 0x0000_0000_1234_5678;

struct Vector {
    description: String,
    req: Vec<u8>,
    resp: Option<Vec<u8>>,
}

fn hex(text: &str) -> Vec<u8> {
    assert_eq!(text.len() % 2, 0, "odd hex length");
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).expect("hex digit"))
        .collect()
}

/// Entries in file order: the comment line before `# madvec`, then REQ and RESP.
fn vectors() -> Vec<Vector> {
    let mut out: Vec<Vector> = Vec::new();
    let mut last_comment = String::new();
    for line in VECTORS.lines() {
        if let Some(query) = line.strip_prefix("# madvec ") {
            assert!(!query.is_empty());
            out.push(Vector {
                description: last_comment.clone(),
                req: Vec::new(),
                resp: None,
            });
        } else if let Some(comment) = line.strip_prefix("# ") {
            comment.clone_into(&mut last_comment);
        } else if let Some(h) = line.strip_prefix("REQ ") {
            out.last_mut().expect("REQ before madvec").req = hex(h);
        } else if let Some(h) = line.strip_prefix("RESP ") {
            out.last_mut().expect("RESP before madvec").resp = Some(hex(h));
        }
    }
    out
}

fn vector(description: &str) -> Vector {
    let mut matches: Vec<Vector> = vectors()
        .into_iter()
        .filter(|v| v.description == description)
        .collect();
    assert_eq!(matches.len(), 1, "one vector described {description:?}");
    matches.pop().unwrap()
}

fn smp(bytes: &[u8]) -> SmpRepr {
    assert_eq!(bytes.len(), 256);
    SmpRepr::parse(&Smp::new_checked(bytes).unwrap()).unwrap()
}

fn directed(repr: &SmpRepr) -> DirectedRoute {
    match repr.route {
        SmpRoute::Directed(dr) => dr,
        SmpRoute::LidRouted => panic!("expected a directed-route SMP"),
    }
}

/// Checks a DR Get request and its GetResp: class, method, attribute, hop count, pointer (ibsim
/// leaves it at 0), D bit, status, TID, permissive LIDs and the InitialPath.
fn check_dr_exchange(v: &Vector, path: &[u8], attr: u16, attr_mod: u32) -> SmpRepr {
    let req = smp(&v.req);
    assert_eq!(req.method, method::GET);
    assert_eq!(
        (req.attr_id, req.attr_mod, req.tid),
        (attr, attr_mod, REQ_TID)
    );
    let dr = directed(&req);
    assert_eq!(dr.direction, Direction::Outbound);
    assert_eq!(usize::from(dr.hop_count), path.len());
    assert_eq!(dr.hop_pointer, 0);
    assert_eq!((dr.dr_slid, dr.dr_dlid), (0xFFFF, 0xFFFF));
    assert_eq!(dr.initial_path[1..=path.len()], *path);
    assert!(!Mad::new_checked(&v.req[..]).unwrap().is_response());

    // Our builder makes libibmad's request, byte for byte.
    let mut built = [0u8; 256];
    SmpRepr::directed_get(path, attr, attr_mod, REQ_TID)
        .unwrap()
        .emit(&mut Smp::new_checked(&mut built[..]).unwrap());
    assert_eq!(built[..], v.req[..]);

    let resp_bytes = v.resp.as_ref().expect("a response");
    let resp = smp(resp_bytes);
    assert!(Mad::new_checked(&resp_bytes[..]).unwrap().is_response());
    assert_eq!(resp.method, method::GET_RESP);
    assert_eq!(resp.status, status::SUCCESS);
    assert_eq!(
        (resp.attr_id, resp.attr_mod, resp.tid),
        (attr, attr_mod, RESP_TID)
    );
    let rdr = directed(&resp);
    assert_eq!(rdr.direction, Direction::Returning);
    assert_eq!(usize::from(rdr.hop_count), path.len());
    assert_eq!(rdr.hop_pointer, 0, "ibsim does not move the hop pointer");
    assert_eq!(rdr.initial_path[1..=path.len()], *path);

    // Turning the request into a response in place gives ibsim's header, TID aside.
    let mut answered = v.req.clone();
    Smp::new_checked(&mut answered[..])
        .unwrap()
        .make_response(status::SUCCESS)
        .unwrap();
    assert_eq!(answered[..8], resp_bytes[..8]);
    assert_eq!(answered[12..24], resp_bytes[12..24]);
    resp
}

fn node_info(data: &[u8]) -> NodeInfoRepr {
    NodeInfoRepr::parse(&NodeInfo::new_checked(data).unwrap()).unwrap()
}

fn port_info(data: &[u8]) -> PortInfoRepr {
    PortInfoRepr::parse(&PortInfo::new_checked(data).unwrap()).unwrap()
}

fn switch_info(data: &[u8]) -> SwitchInfoRepr {
    SwitchInfoRepr::parse(&SwitchInfo::new_checked(data).unwrap()).unwrap()
}

#[test]
fn the_vector_file_has_every_entry() {
    let all = vectors();
    assert_eq!(all.len(), 18);
    assert!(all.iter().all(|v| v.req.len() == 256));
    assert_eq!(all.iter().filter(|v| v.resp.is_some()).count(), 17);
}

#[test]
fn node_info_of_the_local_ca_at_0_hops() {
    let resp = check_dr_exchange(
        &vector("DR 0-hop NodeInfo of the local CA"),
        &[],
        attr_id::sm::NODE_INFO,
        0,
    );
    assert_eq!(resp.class_version, 1);
    assert_eq!(
        node_info(&resp.data),
        NodeInfoRepr {
            base_version: 1,
            class_version: 1,
            node_type: NodeType::Ca,
            num_ports: 2,
            system_image_guid: 0x0000_0000_0010_0000,
            node_guid: 0x0000_0000_0010_0000,
            port_guid: 0x0000_0000_0010_0001,
            partition_cap: 64,
            device_id: 0,
            revision: 0xA1,
            local_port_num: 1,
            vendor_id: 0,
        }
    );
}

#[test]
fn node_description_of_the_local_ca() {
    let resp = check_dr_exchange(
        &vector("DR 0-hop NodeDescription of the local CA"),
        &[],
        attr_id::sm::NODE_DESCRIPTION,
        0,
    );
    let nd =
        NodeDescriptionRepr::parse(&NodeDescription::new_checked(&resp.data[..]).unwrap()).unwrap();
    assert_eq!(nd.text(), Ok("Hca1"));
}

#[test]
fn port_info_of_the_local_ca_before_the_sweep() {
    let resp = check_dr_exchange(
        &vector("DR 0-hop PortInfo port 1 of the local CA"),
        &[],
        attr_id::sm::PORT_INFO,
        1,
    );
    let pi = port_info(&resp.data);
    assert_eq!(
        (pi.m_key, pi.gid_prefix, pi.lid, pi.master_sm_lid),
        (0, 0, 0, 0)
    );
    assert_eq!(pi.capability_mask, 0x0050_C048);
    assert_eq!((pi.diag_code, pi.m_key_lease_period), (0, 0x0FF9));
    assert_eq!(pi.local_port_num, 1);
    assert_eq!(
        (
            pi.link_width_enabled,
            pi.link_width_supported,
            pi.link_width_active
        ),
        (2, 0x1F, 2)
    );
    assert_eq!(pi.link_speed_supported, 7);
    assert_eq!(pi.port_state, PortState::Init);
    assert_eq!(pi.port_physical_state, PhysPortState::LinkUp);
    assert_eq!(pi.link_down_default_state, 2);
    assert_eq!((pi.m_key_protect_bits, pi.lmc), (0, 0));
    assert_eq!((pi.link_speed_active, pi.link_speed_enabled), (1, 1));
    assert_eq!((pi.neighbor_mtu, pi.master_sm_sl), (4, 0));
    assert_eq!((pi.vl_cap, pi.init_type), (4, 0));
    assert_eq!(
        (
            pi.vl_high_limit,
            pi.vl_arbitration_high_cap,
            pi.vl_arbitration_low_cap
        ),
        (0, 8, 8)
    );
    assert_eq!((pi.init_type_reply, pi.mtu_cap), (0, 4));
    assert_eq!((pi.vl_stall_count, pi.hoq_life), (7, 0));
    assert_eq!(pi.operational_vls, 4);
    assert!(!pi.partition_enforcement_inbound && !pi.partition_enforcement_outbound);
    assert!(!pi.filter_raw_inbound && !pi.filter_raw_outbound);
    assert_eq!(
        (
            pi.m_key_violations,
            pi.p_key_violations,
            pi.q_key_violations
        ),
        (0, 0, 0)
    );
    assert_eq!(pi.guid_cap, 32);
    assert!(!pi.client_reregister);
    assert_eq!(
        (pi.multicast_pkey_trap_suppression, pi.subnet_timeout),
        (0, 31)
    );
    assert_eq!(pi.resp_time_value, 0);
    assert_eq!(
        (pi.local_phy_errors, pi.overrun_errors, pi.max_credit_hint),
        (0, 0, 0)
    );
    assert_eq!(pi.link_round_trip_latency, 0);
    assert_eq!(pi.capability_mask2, 0x0030);
    assert_eq!(
        (
            pi.link_speed_ext_active,
            pi.link_speed_ext_supported,
            pi.link_speed_ext_enabled
        ),
        (0, 0, 0)
    );
}

#[test]
fn guid_info_and_pkey_table_of_the_local_ca() {
    let resp = check_dr_exchange(
        &vector("DR 0-hop GUIDInfo block 0 of the local CA"),
        &[],
        attr_id::sm::GUID_INFO,
        0,
    );
    let guids = GuidInfoRepr::parse(&GuidInfo::new_checked(&resp.data[..]).unwrap()).unwrap();
    assert_eq!(guids.guids, [0x0010_0001, 0, 0, 0, 0, 0, 0, 0]);

    let resp = check_dr_exchange(
        &vector("DR 0-hop P_KeyTable block 0 of the local CA"),
        &[],
        attr_id::sm::PKEY_TABLE,
        0,
    );
    let pkeys = PkeyTableRepr::parse(&PkeyTable::new_checked(&resp.data[..]).unwrap()).unwrap();
    assert_eq!(pkeys.pkeys[0], 0xFFFF);
    assert!(pkeys.pkeys[1..].iter().all(|&p| p == 0));
}

#[test]
fn the_first_switch_at_1_hop() {
    let resp = check_dr_exchange(
        &vector("DR 1-hop NodeInfo of the first switch"),
        &[1],
        attr_id::sm::NODE_INFO,
        0,
    );
    // ibsim recorded the ingress ports in the ReturnPath.
    assert_eq!(directed(&resp).return_path[..2], [1, 1]);
    let ni = node_info(&resp.data);
    assert_eq!(ni.node_type, NodeType::Switch);
    assert_eq!(ni.num_ports, 8);
    assert_eq!(
        (ni.system_image_guid, ni.node_guid, ni.port_guid),
        (0x20_0000, 0x20_0000, 0x20_0000)
    );
    assert_eq!(
        (ni.partition_cap, ni.revision, ni.local_port_num),
        (8, 0xA1, 1)
    );

    let resp = check_dr_exchange(
        &vector("DR 1-hop NodeDescription of the switch"),
        &[1],
        attr_id::sm::NODE_DESCRIPTION,
        0,
    );
    let nd =
        NodeDescriptionRepr::parse(&NodeDescription::new_checked(&resp.data[..]).unwrap()).unwrap();
    assert_eq!(nd.text(), Ok("Switch1"));
}

#[test]
fn switch_info_before_the_sweep() {
    let resp = check_dr_exchange(
        &vector("DR 1-hop SwitchInfo"),
        &[1],
        attr_id::sm::SWITCH_INFO,
        0,
    );
    assert_eq!(
        switch_info(&resp.data),
        SwitchInfoRepr {
            linear_fdb_cap: 30 * 1024,
            random_fdb_cap: 0,
            multicast_fdb_cap: 1024,
            linear_fdb_top: 0,
            default_port: 0,
            default_mcast_primary_port: 0,
            default_mcast_not_primary_port: 0,
            life_time_value: 0,
            port_state_change: true,
            optimized_sl_to_vl_mapping_programming: 0,
            lids_per_port: 0,
            partition_enforcement_cap: 64,
            inbound_enforcement_cap: false,
            outbound_enforcement_cap: false,
            filter_raw_inbound_cap: true,
            filter_raw_outbound_cap: true,
            enhanced_port0: false,
            multicast_fdb_top: 0,
        }
    );
}

#[test]
fn port_info_of_a_switch_port() {
    let resp = check_dr_exchange(
        &vector("DR 1-hop PortInfo port 3 of the switch"),
        &[1],
        attr_id::sm::PORT_INFO,
        3,
    );
    let pi = port_info(&resp.data);
    assert_eq!(
        (pi.lid, pi.capability_mask, pi.m_key_lease_period),
        (0, 0, 0)
    );
    assert_eq!(pi.local_port_num, 1);
    assert_eq!(pi.port_state, PortState::Init);
    assert_eq!(pi.port_physical_state, PhysPortState::LinkUp);
    assert_eq!(
        (pi.neighbor_mtu, pi.mtu_cap, pi.vl_cap, pi.operational_vls),
        (4, 4, 4, 4)
    );
    assert_eq!(
        (pi.guid_cap, pi.subnet_timeout, pi.capability_mask2),
        (0, 0, 0)
    );
}

#[test]
fn nodes_two_and_three_hops_away() {
    let resp = check_dr_exchange(
        &vector("DR 2-hop NodeInfo (switch port 3 to the second switch)"),
        &[1, 3],
        attr_id::sm::NODE_INFO,
        0,
    );
    assert_eq!(directed(&resp).return_path[..3], [1, 1, 3]);
    let ni = node_info(&resp.data);
    assert_eq!(ni.node_type, NodeType::Switch);
    assert_eq!(
        (ni.node_guid, ni.port_guid, ni.local_port_num),
        (0x20_0001, 0x20_0001, 3)
    );

    let resp = check_dr_exchange(
        &vector("DR 3-hop NodeInfo of a CA behind the second switch"),
        &[1, 3, 1],
        attr_id::sm::NODE_INFO,
        0,
    );
    let ni = node_info(&resp.data);
    assert_eq!((ni.node_type, ni.num_ports), (NodeType::Ca, 2));
    assert_eq!((ni.system_image_guid, ni.node_guid), (0x10_0003, 0x10_0003));
    assert_eq!((ni.port_guid, ni.local_port_num), (0x10_0004, 1));
}

#[test]
fn an_unsupported_attribute_request() {
    let v = vector("DR 1-hop unsupported attribute 0x00FE");
    assert!(v.resp.is_none(), "ibsim answered nothing");
    let req = smp(&v.req);
    assert_eq!(req.attr_id, 0x00FE);
    assert_eq!(directed(&req).hop_count, 1);
}

#[test]
fn port_info_after_the_sweep() {
    let resp = check_dr_exchange(
        &vector(
            "DR 0-hop PortInfo port 1 of the local CA after the sweep (LID, SM LID, state ACTIVE)",
        ),
        &[],
        attr_id::sm::PORT_INFO,
        1,
    );
    let pi = port_info(&resp.data);
    assert_eq!(pi.gid_prefix, 0xFE80_0000_0000_0000);
    assert_eq!((pi.lid, pi.master_sm_lid), (1, 1));
    assert_eq!(pi.port_state, PortState::Active);
    assert_eq!(pi.port_physical_state, PhysPortState::LinkUp);
    assert_eq!(pi.capability_mask, 0x0050_C048);
}

/// A LID-routed Get and its GetResp; our builder makes libibmad's request.
fn check_lid_exchange(v: &Vector, attr: u16) -> SmpRepr {
    let req = smp(&v.req);
    assert_eq!(req.route, SmpRoute::LidRouted);
    assert_eq!(
        (req.method, req.attr_id, req.tid),
        (method::GET, attr, REQ_TID)
    );
    let mut built = [0u8; 256];
    SmpRepr::request(method::GET, SmpRoute::LidRouted, attr, 0, REQ_TID)
        .emit(&mut Smp::new_checked(&mut built[..]).unwrap());
    assert_eq!(built[..], v.req[..]);
    let resp = smp(v.resp.as_ref().unwrap());
    assert_eq!(resp.route, SmpRoute::LidRouted);
    assert_eq!(
        (resp.method, resp.status),
        (method::GET_RESP, status::SUCCESS)
    );
    assert_eq!((resp.attr_id, resp.tid), (attr, RESP_TID));
    resp
}

#[test]
fn lid_routed_queries_after_the_sweep() {
    let resp = check_lid_exchange(
        &vector("LID-routed NodeInfo to LID 1"),
        attr_id::sm::NODE_INFO,
    );
    let ni = node_info(&resp.data);
    assert_eq!(
        (ni.node_type, ni.node_guid, ni.port_guid),
        (NodeType::Ca, 0x10_0000, 0x10_0001)
    );

    let resp = check_lid_exchange(
        &vector("LID-routed SwitchInfo to LID 2"),
        attr_id::sm::SWITCH_INFO,
    );
    let si = switch_info(&resp.data);
    assert_eq!(si.linear_fdb_top, 6);
    assert_eq!(si.life_time_value, 18);
    assert!(!si.port_state_change, "the SM cleared PortStateChange");

    let resp = check_lid_exchange(
        &vector("LID-routed LinearForwardingTable block 0 of LID 2"),
        attr_id::sm::LINEAR_FORWARDING_TABLE,
    );
    let lft = LinearForwardingTableRepr::parse(
        &LinearForwardingTable::new_checked(&resp.data[..]).unwrap(),
    )
    .unwrap();
    // LID 0 unused, 1 Hca1 on port 1, 2 the switch itself, 3-4 via Switch2 on port 3,
    // 5 Hca3 on port 2, 6 via the second inter-switch link on port 5, the rest unrouted.
    assert_eq!(lft.ports[..7], [0xFF, 1, 0, 3, 3, 2, 5]);
    assert!(lft.ports[7..].iter().all(|&p| p == 0xFF));
}

#[test]
fn pma_class_port_info_and_port_counters() {
    let v = vector("PMA ClassPortInfo of LID 1");
    let mut built = [0u8; 256];
    MadHeaderRepr::request(
        class::PERF_MGMT,
        1,
        method::GET,
        REQ_TID,
        attr_id::pma::CLASS_PORT_INFO,
        0,
    )
    .emit(&mut Mad::new_checked(&mut built[..]).unwrap());
    assert_eq!(built[..], v.req[..]);
    let resp = v.resp.unwrap();
    let pma = PerfMad::new_checked(&resp[..]).unwrap();
    let header = MadHeaderRepr::parse(&pma.header()).unwrap();
    assert_eq!(
        (header.mgmt_class, header.method, header.status),
        (0x04, 0x81, 0)
    );
    assert!(header.is_response());
    let cpi = ClassPortInfoRepr::parse(&ClassPortInfo::new_checked(pma.data()).unwrap()).unwrap();
    assert_eq!((cpi.base_version, cpi.class_version), (1, 1));
    assert_eq!(cpi.capability_mask, pma_cap::EXT_WIDTH | pma_cap::XMIT_WAIT);
    assert_eq!((cpi.capability_mask2, cpi.resp_time_value), (0, 18));

    let v = vector("PMA PortCounters of LID 1");
    let req = MadHeaderRepr::parse(&Mad::new_checked(&v.req[..]).unwrap()).unwrap();
    assert_eq!(
        (req.mgmt_class, req.attr_id, req.attr_mod),
        (0x04, attr_id::pma::PORT_COUNTERS, 0)
    );
    let resp = v.resp.unwrap();
    let header = MadHeaderRepr::parse(&Mad::new_checked(&resp[..]).unwrap()).unwrap();
    assert_eq!(header.method, method::GET_RESP);
    assert_eq!(
        header.status,
        status::INVALID_ATTR_VALUE,
        "ibsim refuses a CA PortSelect (0 here) other than its own port"
    );
}

//! A small subnet manager for ibsim's `net.2sw2path4hca`, run by the device at Hca1 port 1
//! through the network as OpenSM's sweep would (`mad-stack.md` §5.1): LIDs by PortInfo Set,
//! forwarding tables, LinearFDBTop, then every linked port to Armed and then Active.
//!
//! The LIDs and tables are written out by hand, the ones OpenSM chose on this fabric (the
//! golden vectors show Switch1's): Hca1 1, Switch1 2, Switch2 3, Hca2 4, Hca3 5, Hca4 6.

use mad_wire::attr::linear_forwarding_table::{LinearForwardingTable, LinearForwardingTableRepr};
use mad_wire::attr::port_info::{PhysPortState, PortInfoRepr, PortState};
use mad_wire::attr::switch_info::{SwitchInfo, SwitchInfoRepr};
use mad_wire::{attr_id, method, status};
use sim::net::Network;

use super::{Device, dr_get, dr_set, local_call, port_info, port_info_data};

/// Directed routes from Hca1 port 1.
pub const SWITCH1: &[u8] = &[1];
pub const SWITCH2: &[u8] = &[1, 3];
pub const HCA2: &[u8] = &[1, 3, 1];
pub const HCA3: &[u8] = &[1, 2];
pub const HCA4: &[u8] = &[1, 3, 2];

/// LIDs.
pub const LID_HCA1: u16 = 1;
pub const LID_SWITCH1: u16 = 2;
pub const LID_SWITCH2: u16 = 3;
pub const LID_HCA2: u16 = 4;
pub const LID_HCA3: u16 = 5;
pub const LID_HCA4: u16 = 6;

/// Switch1's LFT block 0 as OpenSM programmed it (golden vector), and Switch2's.
pub const LFT_SWITCH1: [u8; 7] = [0xFF, 1, 0, 3, 3, 2, 5];
pub const LFT_SWITCH2: [u8; 7] = [0xFF, 3, 3, 0, 1, 5, 2];

/// Read-modify-write of PortInfo `port` along `path` (empty: the SM's own port, through its
/// SMA). The state fields are sent as "no change" unless `f` changes them.
pub fn update_port(
    net: &Network,
    sm: &Device,
    path: &[u8],
    port: u32,
    f: impl FnOnce(&mut PortInfoRepr),
) {
    let mut pi = if path.is_empty() {
        let r = local_call(sm, method::GET, attr_id::sm::PORT_INFO, port, [0; 64]);
        port_info(&r.data)
    } else {
        let (st, d) = dr_get(net, sm, path, attr_id::sm::PORT_INFO, port);
        assert_eq!(st, status::SUCCESS);
        port_info(&d)
    };
    pi.port_state = PortState::NoChange;
    pi.port_physical_state = PhysPortState::NoChange;
    f(&mut pi);
    let st = if path.is_empty() {
        local_call(
            sm,
            method::SET,
            attr_id::sm::PORT_INFO,
            port,
            port_info_data(&pi),
        )
        .status
    } else {
        dr_set(
            net,
            sm,
            path,
            attr_id::sm::PORT_INFO,
            port,
            port_info_data(&pi),
        )
        .0
    };
    assert_eq!(
        st,
        status::SUCCESS,
        "PortInfo Set of port {port} along {path:?}"
    );
}

/// Gives PortInfo `port` along `path` LID `lid` (SM LID Hca1's), asserting status 0.
pub fn set_lid(net: &Network, sm: &Device, path: &[u8], port: u32, lid: u16) {
    update_port(net, sm, path, port, |pi| {
        pi.lid = lid;
        pi.master_sm_lid = LID_HCA1;
        pi.gid_prefix = 0xfe80_0000_0000_0000;
    });
}

/// Writes LFT block 0 of the switch along `path` (LIDs 0 up to `lft.len() - 1`, the rest
/// 0xFF), sets LinearFDBTop to the last of them, and clears PortStateChange.
pub fn program_switch(net: &Network, sm: &Device, path: &[u8], lft: &[u8]) {
    let mut ports = [0xFFu8; 64];
    ports[..lft.len()].copy_from_slice(lft);
    let mut d = [0u8; 64];
    LinearForwardingTableRepr { ports }
        .emit(&mut LinearForwardingTable::new_checked(&mut d[..]).unwrap());
    let (st, _) = dr_set(net, sm, path, attr_id::sm::LINEAR_FORWARDING_TABLE, 0, d);
    assert_eq!(st, status::SUCCESS);
    let (st, d) = dr_get(net, sm, path, attr_id::sm::SWITCH_INFO, 0);
    assert_eq!(st, status::SUCCESS);
    let mut si = SwitchInfoRepr::parse(&SwitchInfo::new_checked(&d[..]).unwrap()).unwrap();
    si.linear_fdb_top = (lft.len() - 1) as u16;
    si.life_time_value = 18;
    si.port_state_change = true; // writing 1 clears it
    let mut d = [0u8; 64];
    si.emit(&mut SwitchInfo::new_checked(&mut d[..]).unwrap());
    let (st, _) = dr_set(net, sm, path, attr_id::sm::SWITCH_INFO, 0, d);
    assert_eq!(st, status::SUCCESS);
}

/// Assigns LIDs and programs the LFTs (ports stay Init).
pub fn assign_lids_and_routes(net: &Network, sm: &Device) {
    set_lid(net, sm, &[], 1, LID_HCA1);
    set_lid(net, sm, SWITCH1, 0, LID_SWITCH1);
    set_lid(net, sm, SWITCH2, 0, LID_SWITCH2);
    set_lid(net, sm, HCA2, 0, LID_HCA2);
    set_lid(net, sm, HCA3, 0, LID_HCA3);
    set_lid(net, sm, HCA4, 0, LID_HCA4);
    program_switch(net, sm, SWITCH1, &LFT_SWITCH1);
    program_switch(net, sm, SWITCH2, &LFT_SWITCH2);
}

/// Every linked port, as (path to its node, PortInfo modifier).
const LINKED: [(&[u8], u32); 12] = [
    (&[], 1),
    (HCA2, 0),
    (HCA3, 0),
    (HCA4, 0),
    (SWITCH1, 1),
    (SWITCH1, 2),
    (SWITCH1, 3),
    (SWITCH1, 5),
    (SWITCH2, 1),
    (SWITCH2, 2),
    (SWITCH2, 3),
    (SWITCH2, 5),
];

/// Brings every linked port to Armed, then to Active.
pub fn activate(net: &Network, sm: &Device) {
    for state in [PortState::Armed, PortState::Active] {
        for (path, port) in LINKED {
            update_port(net, sm, path, port, |pi| pi.port_state = state);
        }
    }
}

/// The whole sweep.
pub fn configure(net: &Network, sm: &Device) {
    assign_lids_and_routes(net, sm);
    activate(net, sm);
}

//! The SMA's attributes, Get and Set, with good and bad modifiers and methods, asked through
//! the network by a device at Hca1 of ibsim's `net.2sw2path4hca`: Switch1 is one hop away
//! (path 1), Hca3 (a simulated CA) two (path 1,2). Expected values are written out from IBA
//! and ibsim's tables: statuses 0x0004 bad class version, 0x0008 bad method, 0x000C attribute
//! (or method for it) unsupported, 0x001C bad modifier or field.

mod netutil;

use mad_wire::attr::guid_info::{GuidInfo, GuidInfoRepr};
use mad_wire::attr::linear_forwarding_table::{LinearForwardingTable, LinearForwardingTableRepr};
use mad_wire::attr::multicast_forwarding_table::{
    MftAttrMod, MulticastForwardingTable, MulticastForwardingTableRepr,
};
use mad_wire::attr::node_description::{NodeDescription, NodeDescriptionRepr};
use mad_wire::attr::node_info::{NodeInfo, NodeInfoRepr, NodeType};
use mad_wire::attr::pkey_table::{PkeyAttrMod, PkeyTable, PkeyTableRepr};
use mad_wire::attr::sl_to_vl_table::{SlToVlAttrMod, SlToVlTable, SlToVlTableRepr};
use mad_wire::attr::vl_arb_table::{VlArbAttrMod, VlArbEntry, VlArbTable, VlArbTableRepr};
use mad_wire::smp::SmpRepr;
use mad_wire::{attr_id, method, status};
use netutil::{
    Device, attach, dr_call, dr_get, dr_set, dr_smp, example, network, port_info, port_info_data,
    smp_of, switch_info, switch_info_data,
};
use sim::net::Network;

const SW: &[u8] = &[1];
const CA: &[u8] = &[1, 2];
const OK: u16 = status::SUCCESS;
const BAD: u16 = status::INVALID_ATTR_VALUE;
const UNSUP: u16 = status::METHOD_ATTR_UNSUPPORTED;

/// A change made to a PortInfo before it is sent.
type Edit = fn(&mut mad_wire::attr::port_info::PortInfoRepr);

fn setup() -> (Network, Device) {
    let net = network(example("net.2sw2path4hca"));
    let dev = attach(&net, "Hca1", 1);
    (net, dev)
}

fn st(r: (u16, [u8; 64])) -> u16 {
    r.0
}

#[test]
fn node_info_and_description() {
    let (net, d) = setup();
    let (s, data) = dr_get(&net, &d, CA, attr_id::sm::NODE_INFO, 0);
    assert_eq!(s, OK);
    let ni = NodeInfoRepr::parse(&NodeInfo::new_checked(&data[..]).unwrap()).unwrap();
    // Hca3: the third CA in file order, GUIDs 0x100006.. (ibsim's scheme), reached on port 1.
    assert_eq!(
        ni,
        NodeInfoRepr {
            base_version: 1,
            class_version: 1,
            node_type: NodeType::Ca,
            num_ports: 2,
            system_image_guid: 0x10_0006,
            node_guid: 0x10_0006,
            port_guid: 0x10_0007,
            partition_cap: 64,
            device_id: 0,
            revision: 0xA1,
            local_port_num: 1,
            vendor_id: 0,
        }
    );
    assert_eq!(st(dr_get(&net, &d, CA, attr_id::sm::NODE_INFO, 1)), BAD);
    assert_eq!(
        st(dr_set(&net, &d, CA, attr_id::sm::NODE_INFO, 0, data)),
        UNSUP
    );
    let (s, data) = dr_get(&net, &d, SW, attr_id::sm::NODE_DESCRIPTION, 0);
    assert_eq!(s, OK);
    let nd = NodeDescriptionRepr::parse(&NodeDescription::new_checked(&data[..]).unwrap()).unwrap();
    assert_eq!(nd.text(), Ok("Switch1"));
    assert_eq!(
        st(dr_get(&net, &d, SW, attr_id::sm::NODE_DESCRIPTION, 2)),
        BAD
    );
    assert_eq!(
        st(dr_set(&net, &d, SW, attr_id::sm::NODE_DESCRIPTION, 0, data)),
        UNSUP
    );
}

#[test]
fn port_info_modifiers() {
    let (net, d) = setup();
    // A CA: 0 means the port the SMP came in by; 1 and 2 exist; 3 does not.
    let (s, data) = dr_get(&net, &d, CA, attr_id::sm::PORT_INFO, 0);
    assert_eq!(s, OK);
    let pi = port_info(&data);
    assert_eq!((pi.local_port_num, u8::from(pi.port_state)), (1, 2));
    let (s, data) = dr_get(&net, &d, CA, attr_id::sm::PORT_INFO, 2);
    assert_eq!(s, OK);
    assert_eq!(
        u8::from(port_info(&data).port_state),
        1,
        "port 2 is not cabled"
    );
    assert_eq!(st(dr_get(&net, &d, CA, attr_id::sm::PORT_INFO, 3)), BAD);
    // A CA refuses a Set of a port other than the receiving one.
    let mut pi2 = port_info(&data);
    pi2.port_state = mad_wire::attr::port_info::PortState::NoChange;
    pi2.port_physical_state = mad_wire::attr::port_info::PhysPortState::NoChange;
    pi2.lid = 40;
    pi2.master_sm_lid = 1;
    assert_eq!(
        st(dr_set(
            &net,
            &d,
            CA,
            attr_id::sm::PORT_INFO,
            2,
            port_info_data(&pi2)
        )),
        BAD
    );
    // A switch: ports 0 to 8.
    for p in 0..=8 {
        assert_eq!(
            st(dr_get(&net, &d, SW, attr_id::sm::PORT_INFO, p)),
            OK,
            "port {p}"
        );
    }
    assert_eq!(st(dr_get(&net, &d, SW, attr_id::sm::PORT_INFO, 9)), BAD);
    // Bit 31 is SMSupportsExtendedSpeeds (smpquery -x; OpenSM sets it on its Sets): the
    // port is still bits 7:0. Bits 30:8 are reserved.
    let (s, data) = dr_get(&net, &d, SW, attr_id::sm::PORT_INFO, 0x8000_0003);
    assert_eq!(s, OK);
    assert_eq!(port_info(&data).local_port_num, 1, "the port it came in by");
    let (s, data) = dr_get(&net, &d, CA, attr_id::sm::PORT_INFO, 0x8000_0002);
    assert_eq!(s, OK);
    assert_eq!(u8::from(port_info(&data).port_state), 1, "port 2 again");
    assert_eq!(
        st(dr_get(&net, &d, SW, attr_id::sm::PORT_INFO, 0x0000_0103)),
        BAD
    );
    assert_eq!(
        st(dr_get(&net, &d, SW, attr_id::sm::PORT_INFO, 0x4000_0003)),
        BAD
    );
    let mut pi = port_info(&dr_get(&net, &d, CA, attr_id::sm::PORT_INFO, 0).1);
    pi.port_state = mad_wire::attr::port_info::PortState::NoChange;
    pi.port_physical_state = mad_wire::attr::port_info::PhysPortState::NoChange;
    pi.lid = 0x30;
    pi.master_sm_lid = 1;
    pi.subnet_timeout = 18;
    assert_eq!(
        st(dr_set(
            &net,
            &d,
            CA,
            attr_id::sm::PORT_INFO,
            0x8000_0001,
            port_info_data(&pi)
        )),
        OK,
        "OpenSM's Set"
    );
    assert_eq!(
        port_info(&dr_get(&net, &d, CA, attr_id::sm::PORT_INFO, 1).1).subnet_timeout,
        18
    );
}

#[test]
fn port_info_set_writes_and_checks_fields() {
    let (net, d) = setup();
    let (_, data) = dr_get(&net, &d, CA, attr_id::sm::PORT_INFO, 1);
    let mut pi = port_info(&data);
    // A Set leaves PortState and PortPhysicalState alone with 0 (the Get said Init/LinkUp).
    pi.port_state = mad_wire::attr::port_info::PortState::NoChange;
    pi.port_physical_state = mad_wire::attr::port_info::PhysPortState::NoChange;
    pi.lid = 0x20;
    pi.lmc = 2;
    pi.master_sm_lid = 1;
    pi.master_sm_sl = 3;
    pi.gid_prefix = 0xfe80_0000_0000_1234;
    pi.subnet_timeout = 18;
    pi.operational_vls = 2;
    pi.hoq_life = 9;
    let (s, back) = dr_set(&net, &d, CA, attr_id::sm::PORT_INFO, 1, port_info_data(&pi));
    assert_eq!(s, OK);
    let got = port_info(&back);
    assert_eq!(
        (got.lid, got.lmc, got.master_sm_lid, got.master_sm_sl),
        (0x20, 2, 1, 3)
    );
    assert_eq!(
        (got.gid_prefix, got.subnet_timeout, got.operational_vls),
        (0xfe80_0000_0000_1234, 18, 2)
    );
    let ca = net.port("Hca3", 1).unwrap();
    net.with_fabric(|f| {
        assert_eq!(f.lid_owner(0x23), Some(ca), "LMC 2: LIDs 0x20-0x23");
        assert_eq!(f.lid_owner(0x24), None);
    });
    // Each bad field makes the whole Set fail and changes nothing.
    let bad_fields: [(&str, Edit); 11] = [
        ("PortPhysicalState LinkUp in a Set", |p| {
            p.port_physical_state = mad_wire::attr::port_info::PhysPortState::LinkUp;
        }),
        ("multicast LID", |p| p.lid = 0xC000),
        ("LMC range past the unicast LIDs", |p| {
            p.lid = 0xBFFD;
            p.lmc = 2;
        }),
        ("LID 0", |p| p.lid = 0),
        ("SM LID 0", |p| p.master_sm_lid = 0),
        ("width beyond supported", |p| p.link_width_enabled = 0x20),
        ("speed beyond supported", |p| p.link_speed_enabled = 0x8),
        ("neighbor MTU 0", |p| p.neighbor_mtu = 0),
        ("MTU above MTUCap", |p| p.neighbor_mtu = 5),
        ("OperationalVLs above VLCap", |p| p.operational_vls = 5),
        ("LinkDownDefaultState 3", |p| p.link_down_default_state = 3),
    ];
    for (what, f) in bad_fields {
        let mut b = pi;
        b.lid = 0x40;
        f(&mut b);
        let (s, back) = dr_set(&net, &d, CA, attr_id::sm::PORT_INFO, 1, port_info_data(&b));
        assert_eq!(s, BAD, "{what}");
        assert_eq!(port_info(&back).lid, 0x20, "{what}: nothing changed");
    }
    // A LID inside another port's LMC range is taken: an SMA knows only its own port
    // (`qib_mad.c` refuses only LID 0 and multicast LIDs; ibsim takes it too).
    let (_, data) = dr_get(&net, &d, &[1, 3, 1], attr_id::sm::PORT_INFO, 1);
    let mut other = port_info(&data);
    other.port_state = mad_wire::attr::port_info::PortState::NoChange;
    other.port_physical_state = mad_wire::attr::port_info::PhysPortState::NoChange;
    other.lid = 0x22;
    other.master_sm_lid = 1;
    assert_eq!(
        st(dr_set(
            &net,
            &d,
            &[1, 3, 1],
            attr_id::sm::PORT_INFO,
            1,
            port_info_data(&other)
        )),
        OK
    );
    let hca2 = net.port("Hca2", 1).unwrap();
    net.with_fabric(|f| {
        assert_eq!(f.port(hca2).lid(), 0x22);
        assert_eq!(f.lid_holders(0x22), vec![ca, hca2]);
        assert_eq!(f.lid_holders(0x23), vec![ca]);
    });
    // Width 0xFF means "all supported".
    let mut w = pi;
    w.link_width_enabled = 0xFF;
    let (s, back) = dr_set(&net, &d, CA, attr_id::sm::PORT_INFO, 1, port_info_data(&w));
    assert_eq!((s, port_info(&back).link_width_enabled), (OK, 0x1F));
}

/// A switch's port 0 has no link, but reports the width and speed of a 4x SDR one, as ibsim
/// does: `ibsim/sim_net.c` `init_ports` gives every port LinkWidthActive `LINKWIDTH_4x` (2)
/// and LinkSpeedActive `LINKSPEED_SDR` (1), no extended speed (`DEFAULT_LINKSPEEDEXT`), and
/// enables the net's default width and speed (`sim.h` `DEFAULT_LINKWIDTH` 4x = 2,
/// `DEFAULT_LINKSPEED` SDR = 1); `update_portinfo` writes them with LinkWidthSupported
/// `LINKWIDTH_1x_2x_4x_8x_12x` (31) and LinkSpeedSupported `LINKSPEED_SDR_DDR_QDR` (7), and
/// the extended speed fields as 0 when no extended speed is active. ibsim 0.10 answers
/// `smpquery -D portinfo 0,1 0` on this net with exactly these (4X, 2.5 Gbps). OpenSM takes
/// the rate of a path to or from a switch from them (10 Gb/s, not 2.5).
#[test]
fn switch_port0_reports_a_4x_sdr_rate_as_ibsim() {
    let (net, d) = setup();
    let expect = |pi: &mad_wire::attr::port_info::PortInfoRepr, what: &str| {
        assert_eq!(
            (
                pi.link_width_supported,
                pi.link_width_active,
                pi.link_speed_supported,
                pi.link_speed_active,
            ),
            (31, 2, 7, 1),
            "{what}: LinkWidthSupported/Active, LinkSpeedSupported/Active"
        );
        assert_eq!(
            (
                pi.link_speed_ext_active,
                pi.link_speed_ext_supported,
                pi.link_speed_ext_enabled,
            ),
            (0, 0, 0),
            "{what}: no extended speed"
        );
        assert_eq!(
            (u8::from(pi.port_state), u8::from(pi.port_physical_state)),
            (4, 5),
            "{what}: Active/LinkUp"
        );
    };
    let (s, data) = dr_get(&net, &d, SW, attr_id::sm::PORT_INFO, 0);
    assert_eq!(s, OK);
    let pi = port_info(&data);
    expect(&pi, "before any Set");
    assert_eq!(
        (pi.link_width_enabled, pi.link_speed_enabled),
        (2, 1),
        "LinkWidthEnabled 4x, LinkSpeedEnabled SDR"
    );

    // OpenSM's Set of port 0 (its LID, SM LID, "set to supported" width and speed): the
    // enabled masks change, the active rate does not (port 0 does not train).
    let mut set = pi;
    set.port_state = mad_wire::attr::port_info::PortState::NoChange;
    set.port_physical_state = mad_wire::attr::port_info::PhysPortState::NoChange;
    set.lid = 2;
    set.master_sm_lid = 1;
    set.link_width_enabled = 0xFF;
    set.link_speed_enabled = 0xF;
    let (s, back) = dr_set(
        &net,
        &d,
        SW,
        attr_id::sm::PORT_INFO,
        0,
        port_info_data(&set),
    );
    assert_eq!(s, OK);
    let got = port_info(&back);
    expect(&got, "after OpenSM's Set");
    assert_eq!((got.link_width_enabled, got.link_speed_enabled), (31, 7));

    // A fault aimed at port 0 (the network names no port 0; its PortId can still be had)
    // finds no cable to pull.
    let p0 = net.with_fabric(|f| f.port_id(f.node_by_name("Switch1").unwrap(), 0).unwrap());
    net.set_link_down(p0, true);
    let pi = port_info(&dr_get(&net, &d, SW, attr_id::sm::PORT_INFO, 0).1);
    expect(&pi, "after a fault on port 0");
}

#[test]
fn switch_info_get_set_and_bad_modifiers() {
    let (net, d) = setup();
    let (s, data) = dr_get(&net, &d, SW, attr_id::sm::SWITCH_INFO, 0);
    assert_eq!(s, OK);
    let mut si = switch_info(&data);
    assert_eq!((si.linear_fdb_cap, si.multicast_fdb_cap), (48 * 1024, 1024));
    assert!(si.port_state_change, "links came up at load");
    si.linear_fdb_top = 0x100;
    si.life_time_value = 18;
    si.port_state_change = true;
    si.linear_fdb_cap = 1; // read-only: ignored
    let (s, back) = dr_set(
        &net,
        &d,
        SW,
        attr_id::sm::SWITCH_INFO,
        0,
        switch_info_data(&si),
    );
    assert_eq!(s, OK);
    let got = switch_info(&back);
    assert_eq!((got.linear_fdb_top, got.life_time_value), (0x100, 18));
    assert!(!got.port_state_change, "writing 1 clears PortStateChange");
    assert_eq!(got.linear_fdb_cap, 48 * 1024);
    // LinearFDBTop beyond the unicast LIDs, a default port the switch lacks, a modifier.
    let mut b = got;
    b.linear_fdb_top = 0xC000;
    assert_eq!(
        st(dr_set(
            &net,
            &d,
            SW,
            attr_id::sm::SWITCH_INFO,
            0,
            switch_info_data(&b)
        )),
        BAD
    );
    let mut b = got;
    b.default_port = 9;
    assert_eq!(
        st(dr_set(
            &net,
            &d,
            SW,
            attr_id::sm::SWITCH_INFO,
            0,
            switch_info_data(&b)
        )),
        BAD
    );
    assert_eq!(st(dr_get(&net, &d, SW, attr_id::sm::SWITCH_INFO, 1)), BAD);
    // A CA has no SwitchInfo.
    assert_eq!(st(dr_get(&net, &d, CA, attr_id::sm::SWITCH_INFO, 0)), UNSUP);
}

#[test]
fn linear_forwarding_table_blocks() {
    let (net, d) = setup();
    let mut ports = [0xFFu8; 64];
    ports[5] = 3;
    ports[63] = 8;
    let mut data = [0u8; 64];
    LinearForwardingTableRepr { ports }
        .emit(&mut LinearForwardingTable::new_checked(&mut data[..]).unwrap());
    assert_eq!(
        st(dr_set(
            &net,
            &d,
            SW,
            attr_id::sm::LINEAR_FORWARDING_TABLE,
            767,
            data
        )),
        OK
    );
    let (s, back) = dr_get(&net, &d, SW, attr_id::sm::LINEAR_FORWARDING_TABLE, 767);
    assert_eq!((s, back), (OK, data));
    // Unwritten blocks read as "no route".
    let (s, back) = dr_get(&net, &d, SW, attr_id::sm::LINEAR_FORWARDING_TABLE, 3);
    assert_eq!((s, back), (OK, [0xFF; 64]));
    // 48K LIDs = 768 blocks.
    assert_eq!(
        st(dr_get(
            &net,
            &d,
            SW,
            attr_id::sm::LINEAR_FORWARDING_TABLE,
            768
        )),
        BAD
    );
    assert_eq!(
        st(dr_set(
            &net,
            &d,
            SW,
            attr_id::sm::LINEAR_FORWARDING_TABLE,
            768,
            data
        )),
        BAD
    );
    assert_eq!(
        st(dr_get(
            &net,
            &d,
            CA,
            attr_id::sm::LINEAR_FORWARDING_TABLE,
            0
        )),
        UNSUP
    );
}

#[test]
fn multicast_forwarding_table_blocks_and_positions() {
    let (net, d) = setup();
    let mut masks = [0u16; 32];
    masks[0] = 0x0006;
    masks[31] = 0x01FE;
    let mut data = [0u8; 64];
    MulticastForwardingTableRepr { port_masks: masks }
        .emit(&mut MulticastForwardingTable::new_checked(&mut data[..]).unwrap());
    let m = |block, position| MftAttrMod { block, position }.to_attr_mod();
    assert_eq!(
        st(dr_set(
            &net,
            &d,
            SW,
            attr_id::sm::MULTICAST_FORWARDING_TABLE,
            m(31, 0),
            data
        )),
        OK
    );
    let (s, back) = dr_get(
        &net,
        &d,
        SW,
        attr_id::sm::MULTICAST_FORWARDING_TABLE,
        m(31, 0),
    );
    assert_eq!((s, back), (OK, data));
    let (s, back) = dr_get(
        &net,
        &d,
        SW,
        attr_id::sm::MULTICAST_FORWARDING_TABLE,
        m(0, 0),
    );
    assert_eq!((s, back), (OK, [0; 64]));
    // An 8-port switch has one 16-port mask position; MulticastFDBCap 1024 = 32 blocks.
    assert_eq!(
        st(dr_get(
            &net,
            &d,
            SW,
            attr_id::sm::MULTICAST_FORWARDING_TABLE,
            m(0, 1)
        )),
        BAD
    );
    assert_eq!(
        st(dr_get(
            &net,
            &d,
            SW,
            attr_id::sm::MULTICAST_FORWARDING_TABLE,
            m(32, 0)
        )),
        BAD
    );
    assert_eq!(
        st(dr_get(
            &net,
            &d,
            CA,
            attr_id::sm::MULTICAST_FORWARDING_TABLE,
            0
        )),
        UNSUP
    );
}

fn pkeys(data: &[u8; 64]) -> [u16; 32] {
    PkeyTableRepr::parse(&PkeyTable::new_checked(&data[..]).unwrap())
        .unwrap()
        .pkeys
}

#[test]
fn pkey_tables_of_ca_and_switch_ports() {
    let (net, d) = setup();
    let (s, data) = dr_get(&net, &d, CA, attr_id::sm::PKEY_TABLE, 0);
    assert_eq!(s, OK);
    let mut expect = [0u16; 32];
    expect[0] = 0xFFFF;
    assert_eq!(pkeys(&data), expect);
    // A CA holds 64 P_Keys: blocks 0 and 1.
    let mut t = [0u16; 32];
    t[0] = 0xFFFF;
    t[1] = 0x8001;
    t[31] = 0x7FFF;
    let mut data = [0u8; 64];
    PkeyTableRepr { pkeys: t }.emit(&mut PkeyTable::new_checked(&mut data[..]).unwrap());
    assert_eq!(
        st(dr_set(&net, &d, CA, attr_id::sm::PKEY_TABLE, 1, data)),
        OK
    );
    let (_, back) = dr_get(&net, &d, CA, attr_id::sm::PKEY_TABLE, 1);
    assert_eq!(pkeys(&back), t);
    let (_, back) = dr_get(&net, &d, CA, attr_id::sm::PKEY_TABLE, 0);
    assert_eq!(pkeys(&back), expect, "block 0 untouched");
    assert_eq!(st(dr_get(&net, &d, CA, attr_id::sm::PKEY_TABLE, 2)), BAD);
    // A switch: port 0 holds 8 (NodeInfo PartitionCap), external ports 64
    // (PartitionEnforcementCap); the port is in bits 16-31.
    let m = |port, block| PkeyAttrMod { block, port }.to_attr_mod();
    assert_eq!(
        st(dr_get(&net, &d, SW, attr_id::sm::PKEY_TABLE, m(0, 0))),
        OK
    );
    assert_eq!(
        st(dr_get(&net, &d, SW, attr_id::sm::PKEY_TABLE, m(0, 1))),
        BAD
    );
    assert_eq!(
        st(dr_get(&net, &d, SW, attr_id::sm::PKEY_TABLE, m(3, 1))),
        OK
    );
    assert_eq!(
        st(dr_get(&net, &d, SW, attr_id::sm::PKEY_TABLE, m(9, 0))),
        BAD
    );
    // Port 0 returns its 8 entries, the rest of the block zero.
    let mut eight = [0u16; 32];
    eight[..8].copy_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8]);
    eight[8] = 9;
    let mut data = [0u8; 64];
    PkeyTableRepr { pkeys: eight }.emit(&mut PkeyTable::new_checked(&mut data[..]).unwrap());
    let (s, back) = dr_set(&net, &d, SW, attr_id::sm::PKEY_TABLE, m(0, 0), data);
    assert_eq!(s, OK);
    assert_eq!(pkeys(&back)[..9], [1, 2, 3, 4, 5, 6, 7, 8, 0]);
}

#[test]
fn sl_to_vl_tables() {
    let (net, d) = setup();
    let vls = |data: &[u8; 64]| {
        SlToVlTableRepr::parse(&SlToVlTable::new_checked(&data[..]).unwrap())
            .unwrap()
            .vls
    };
    // ibsim's default: SL n on VL n, SL 15 on VL 7.
    let (s, data) = dr_get(&net, &d, CA, attr_id::sm::SL_TO_VL_TABLE, 0);
    assert_eq!(s, OK);
    assert_eq!(
        vls(&data),
        [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 7]
    );
    let mut t = [0u8; 16];
    t[3] = 1;
    t[15] = 15;
    let mut data = [0u8; 64];
    SlToVlTableRepr { vls: t }.emit(&mut SlToVlTable::new_checked(&mut data[..]).unwrap());
    assert_eq!(
        st(dr_set(&net, &d, CA, attr_id::sm::SL_TO_VL_TABLE, 0, data)),
        OK
    );
    assert_eq!(
        vls(&dr_get(&net, &d, CA, attr_id::sm::SL_TO_VL_TABLE, 0).1),
        t
    );
    // A switch: one table per (input, output) pair.
    let m = |input_port, output_port| {
        SlToVlAttrMod {
            input_port,
            output_port,
        }
        .to_attr_mod()
    };
    assert_eq!(
        st(dr_set(
            &net,
            &d,
            SW,
            attr_id::sm::SL_TO_VL_TABLE,
            m(1, 3),
            data
        )),
        OK
    );
    assert_eq!(
        vls(&dr_get(&net, &d, SW, attr_id::sm::SL_TO_VL_TABLE, m(1, 3)).1),
        t
    );
    assert_ne!(
        vls(&dr_get(&net, &d, SW, attr_id::sm::SL_TO_VL_TABLE, m(3, 1)).1),
        t
    );
    assert_eq!(
        st(dr_get(&net, &d, SW, attr_id::sm::SL_TO_VL_TABLE, m(1, 9))),
        BAD
    );
    assert_eq!(
        st(dr_get(&net, &d, SW, attr_id::sm::SL_TO_VL_TABLE, m(9, 1))),
        BAD
    );
    assert_eq!(
        st(dr_get(&net, &d, SW, attr_id::sm::SL_TO_VL_TABLE, 1 << 16)),
        BAD
    );
}

#[test]
fn vl_arbitration_tables() {
    let (net, d) = setup();
    let entries = |data: &[u8; 64]| {
        VlArbTableRepr::parse(&VlArbTable::new_checked(&data[..]).unwrap())
            .unwrap()
            .entries
    };
    let modifier = |block, port| VlArbAttrMod { block, port }.to_attr_mod();
    // Low priority, entries 0-31: VLArbitrationLowCap is 8, so 8 entries and zeros.
    let (s, data) = dr_get(&net, &d, CA, attr_id::sm::VL_ARB_TABLE, modifier(1, 0));
    assert_eq!(s, OK);
    let e = entries(&data);
    assert_eq!(e[0], VlArbEntry { vl: 0, weight: 0 });
    assert_eq!(e[1], VlArbEntry { vl: 1, weight: 4 });
    assert_eq!(e[7], VlArbEntry { vl: 7, weight: 4 });
    assert_eq!(e[8], VlArbEntry::default());
    // High priority: VL0 weight 4.
    let e = entries(&dr_get(&net, &d, CA, attr_id::sm::VL_ARB_TABLE, modifier(3, 0)).1);
    assert_eq!(e[0], VlArbEntry { vl: 0, weight: 4 });
    // Entries 32-63 exist only with a cap above 32; blocks are 1 to 4.
    for bad in [0, 2, 4, 5] {
        assert_eq!(
            st(dr_get(
                &net,
                &d,
                CA,
                attr_id::sm::VL_ARB_TABLE,
                modifier(bad, 0)
            )),
            BAD,
            "block {bad}"
        );
    }
    let mut t = [VlArbEntry::default(); 32];
    t[0] = VlArbEntry { vl: 2, weight: 200 };
    t[8] = VlArbEntry { vl: 3, weight: 1 }; // beyond the cap: not stored
    let mut data = [0u8; 64];
    VlArbTableRepr { entries: t }.emit(&mut VlArbTable::new_checked(&mut data[..]).unwrap());
    let (s, back) = dr_set(
        &net,
        &d,
        SW,
        attr_id::sm::VL_ARB_TABLE,
        modifier(3, 5),
        data,
    );
    assert_eq!(s, OK);
    let e = entries(&back);
    assert_eq!(
        (e[0], e[8]),
        (VlArbEntry { vl: 2, weight: 200 }, VlArbEntry::default())
    );
    assert_eq!(
        st(dr_get(
            &net,
            &d,
            SW,
            attr_id::sm::VL_ARB_TABLE,
            modifier(1, 9)
        )),
        BAD
    );
}

#[test]
fn guid_info_blocks() {
    let (net, d) = setup();
    let guids = |data: &[u8; 64]| {
        GuidInfoRepr::parse(&GuidInfo::new_checked(&data[..]).unwrap())
            .unwrap()
            .guids
    };
    let (s, data) = dr_get(&net, &d, CA, attr_id::sm::GUID_INFO, 0);
    assert_eq!(s, OK);
    assert_eq!(guids(&data), [0x10_0007, 0, 0, 0, 0, 0, 0, 0]);
    // GUIDCap 32: blocks 0-3. Entry 0 (the port GUID) is read-only.
    let mut data = [0u8; 64];
    GuidInfoRepr {
        guids: [1, 2, 3, 4, 5, 6, 7, 8],
    }
    .emit(&mut GuidInfo::new_checked(&mut data[..]).unwrap());
    let (s, back) = dr_set(&net, &d, CA, attr_id::sm::GUID_INFO, 0, data);
    assert_eq!((s, guids(&back)), (OK, [0x10_0007, 2, 3, 4, 5, 6, 7, 8]));
    let (s, back) = dr_set(&net, &d, CA, attr_id::sm::GUID_INFO, 3, data);
    assert_eq!((s, guids(&back)), (OK, [1, 2, 3, 4, 5, 6, 7, 8]));
    assert_eq!(st(dr_get(&net, &d, CA, attr_id::sm::GUID_INFO, 4)), BAD);
    // A switch answers for port 0, GUIDCap 1.
    let (s, data) = dr_get(&net, &d, SW, attr_id::sm::GUID_INFO, 0);
    assert_eq!((s, guids(&data)), (OK, [0x20_0000, 0, 0, 0, 0, 0, 0, 0]));
    assert_eq!(st(dr_get(&net, &d, SW, attr_id::sm::GUID_INFO, 1)), BAD);
}

#[test]
fn sm_info_unknown_attributes_methods_and_versions() {
    let (net, d) = setup();
    // No SM at a simulated node.
    assert_eq!(st(dr_get(&net, &d, CA, attr_id::sm::SM_INFO, 0)), UNSUP);
    assert_eq!(st(dr_get(&net, &d, SW, attr_id::sm::SM_INFO, 0)), UNSUP);
    // An attribute no SMA has, and one only switches have.
    assert_eq!(st(dr_get(&net, &d, SW, 0x00FE, 0)), UNSUP);
    assert_eq!(
        st(dr_get(
            &net,
            &d,
            SW,
            attr_id::sm::RANDOM_FORWARDING_TABLE,
            0
        )),
        UNSUP
    );
    // A method the SMA does not know: 0x0008, answered with its response method.
    let r = dr_call(&net, &d, 0x10, SW, attr_id::sm::NODE_INFO, 0, [0; 64]).expect("answered");
    assert_eq!((r.method, r.status), (0x90, status::METHOD_UNSUPPORTED));
    // Class version 2: 0x0004.
    let mut p = dr_smp(method::GET, SW, attr_id::sm::NODE_INFO, 0, [0; 64]);
    p.mad[2] = 2;
    let got = d.exchange(&net, p);
    let r: SmpRepr = smp_of(&got[0].1);
    assert_eq!(
        (r.method, r.status),
        (method::GET_RESP, status::BAD_VERSION)
    );
    // A response or a trap sent to an SMA is not answered.
    assert!(
        dr_call(
            &net,
            &d,
            method::GET_RESP,
            SW,
            attr_id::sm::NODE_INFO,
            0,
            [0; 64]
        )
        .is_none()
    );
    assert!(dr_call(&net, &d, method::TRAP, SW, attr_id::sm::NOTICE, 0, [0; 64]).is_none());
}

/// A TrapRepress acknowledges a Notice: the SMA takes it and answers nothing. A TrapRepress
/// of any other attribute is answered 0x000C, in a GetResp (TrapRepress has no response
/// method), as the kernel's software SMA does (`qib_mad.c` `process_subn`, whose `reply`
/// writes GetResp whatever the request). ibsim drops every TrapRepress.
#[test]
fn trap_repress_of_notice_is_taken_and_of_another_attribute_refused() {
    let (net, d) = setup();
    for path in [SW, CA] {
        let repress = |attr| dr_call(&net, &d, method::TRAP_REPRESS, path, attr, 0, [0; 64]);
        assert!(repress(attr_id::sm::NOTICE).is_none(), "{path:?}");
        for attr in [attr_id::sm::NODE_INFO, attr_id::sm::PORT_INFO, 0x00FE] {
            let r = repress(attr).expect("answered");
            assert_eq!(
                (r.method, r.status, r.attr_id),
                (method::GET_RESP, UNSUP, attr),
                "{path:?} attribute {attr:#06x}"
            );
        }
    }
}

/// Mellanox ExtendedPortInfo byte offsets, written out from OpenSM's `ib_mlnx_ext_port_info_t`
/// (three reserved bytes before each field): StateChangeEnable, LinkSpeedSupported,
/// LinkSpeedEnabled, LinkSpeedActive.
const EPI_SCE: usize = 3;
const EPI_SUPPORTED: usize = 7;
const EPI_ENABLED: usize = 11;
const EPI_ACTIVE: usize = 15;

/// (Supported, Enabled, Active) of an ExtendedPortInfo; the other bytes must be 0.
fn epi(data: &[u8; 64]) -> (u8, u8, u8) {
    for (i, b) in data.iter().enumerate() {
        if ![EPI_SUPPORTED, EPI_ENABLED, EPI_ACTIVE].contains(&i) {
            assert_eq!(
                *b, 0,
                "byte {i} of ExtendedPortInfo is reserved or StateChangeEnable"
            );
        }
    }
    (data[EPI_SUPPORTED], data[EPI_ENABLED], data[EPI_ACTIVE])
}

#[test]
fn mellanox_extended_port_info_reports_fdr10() {
    // A Switch-IB (DeviceID 0xcb20, which ibportstate and libibnetdisc ask ExtendedPortInfo
    // of) with an EDR, an FDR10 and a QDR link.
    let fabric = sim::fabric::Fabric::parse_str(
        "epi.topo",
        "vendid=0x2c9\ndevid=0xcb20\nSwitch 36 \"S\"\n\
         [1] \"A\"[1] # lid 0 4xEDR\n[2] \"B\"[1] # lid 0 4xFDR10\n[3] \"C\"[1] # lid 0 4xQDR\n\n\
         devid=0x1013\nCa 1 \"A\"\n[1] \"S\"[1] # lid 0 lmc 0 \"S\" lid 0 4xEDR\n\n\
         Ca 1 \"B\"\n[1] \"S\"[2] # lid 0 lmc 0 \"S\" lid 0 4xFDR10\n\n\
         Ca 1 \"C\"\n[1] \"S\"[3] # lid 0 lmc 0 \"S\" lid 0 4xQDR\n",
    )
    .unwrap();
    let net = network(fabric);
    let d = attach(&net, "A", 1);
    let epi_attr = attr_id::sm::MLNX_EXTENDED_PORT_INFO;
    assert_eq!(epi_attr, 0xFF90);
    let get = |path: &[u8], port: u32| {
        let (s, data) = dr_get(&net, &d, path, epi_attr, port);
        assert_eq!(s, OK, "path {path:?} port {port}");
        epi(&data)
    };
    // EDR link: FDR10 supported and enabled (the EDR token enables it, as in ibsim) but not
    // active, the link runs EDR.
    assert_eq!(get(SW, 1), (1, 1, 0));
    // FDR10 link: all three.
    assert_eq!(get(SW, 2), (1, 1, 1));
    // QDR link: none.
    assert_eq!(get(SW, 3), (0, 0, 0));
    // A CA: 0 is the port the SMP came in by; B is reached by switch port 2.
    assert_eq!(get(&[1, 2], 0), (1, 1, 1));
    assert_eq!(get(&[1, 2], 1), (1, 1, 1));
    // Beyond the ports: 0x001C.
    assert_eq!(st(dr_get(&net, &d, SW, epi_attr, 37)), BAD);
    assert_eq!(st(dr_get(&net, &d, &[1, 3], epi_attr, 2)), BAD);

    // A Set without StateChangeEnable changes nothing and answers the current value.
    let mut data = [0u8; 64];
    let (s, back) = dr_set(&net, &d, SW, epi_attr, 2, data);
    assert_eq!((s, epi(&back)), (OK, (1, 1, 1)));
    // With it, writing the enable the port has is accepted...
    data[EPI_SCE] = 1;
    data[EPI_ENABLED] = 1;
    assert_eq!(st(dr_set(&net, &d, SW, epi_attr, 2, data)), OK);
    // ...and changing it is refused, changing nothing.
    data[EPI_ENABLED] = 0;
    let (s, back) = dr_set(&net, &d, SW, epi_attr, 2, data);
    assert_eq!((s, epi(&back)), (BAD, (1, 1, 1)));
    assert_eq!(get(SW, 2), (1, 1, 1));
}

//! The port state machine the SM drives with PortInfo Sets, and M_Key protection, on ibsim's
//! `net.2sw2path4hca` with the SM's device at Hca1 port 1. Switch1 (path 1) port 1 is the
//! SM's neighbour; Hca3 (path 1,2) hangs off Switch1 port 2. The M_Key of a CA port named
//! through its sibling is tested on `net.2sw2path4hca2port` (Hca2's two ports).

mod netutil;

use std::time::Duration;

use mad_wire::attr::notice::{Notice, NoticeRepr};
use mad_wire::attr::port_info::{PhysPortState, PortInfoRepr, PortState};
use mad_wire::attr::switch_info::{SwitchInfo, SwitchInfoRepr};
use mad_wire::{attr_id, method, status};
use netutil::sweep::{self, update_port};
use netutil::{
    Device, attach, dr_call, dr_get, dr_set, example, network, port_info, port_info_data,
};
use sim::link::PortChange;
use sim::net::{DropReason, Network};
use sim::packet::Packet;

const SW: &[u8] = &[1];
const CA: &[u8] = &[1, 2];

fn setup() -> (Network, Device) {
    let net = network(example("net.2sw2path4hca"));
    let dev = attach(&net, "Hca1", 1);
    // Hca3 gets a LID: a CA port's PortInfo Set must carry a valid LID and SM LID.
    update_port(&net, &dev, CA, 0, |pi| {
        pi.lid = 5;
        pi.master_sm_lid = 1;
    });
    (net, dev)
}

/// An SMP along `path` carrying M_Key `key`: the answer, or `None` if it was dropped.
fn call_with_key(
    net: &Network,
    d: &Device,
    m: u8,
    path: &[u8],
    attr_mod: u32,
    data: [u8; 64],
    key: u64,
) -> Option<mad_wire::smp::SmpRepr> {
    let mut p = netutil::dr_smp(m, path, attr_id::sm::PORT_INFO, attr_mod, data);
    p.mad[24..32].copy_from_slice(&key.to_be_bytes());
    let mut got = d.exchange(net, p);
    got.pop().map(|(_, p)| netutil::smp_of(&p))
}

/// PortState and PortPhysicalState of `port` at the end of `path` (local if empty).
fn states(net: &Network, d: &Device, path: &[u8], port: u32) -> (u8, u8) {
    let pi = if path.is_empty() {
        port_info(&netutil::local_call(d, method::GET, attr_id::sm::PORT_INFO, port, [0; 64]).data)
    } else {
        port_info(&dr_get(net, d, path, attr_id::sm::PORT_INFO, port).1)
    };
    (u8::from(pi.port_state), u8::from(pi.port_physical_state))
}

/// A Set of PortState/PortPhysicalState on `port` along `path`: its status.
fn set_state(net: &Network, d: &Device, path: &[u8], port: u32, state: u8, phys: u8) -> u16 {
    let (_, data) = dr_get(net, d, path, attr_id::sm::PORT_INFO, port);
    let mut pi: PortInfoRepr = port_info(&data);
    pi.port_state = PortState::from(state);
    pi.port_physical_state = PhysPortState::from(phys);
    dr_set(
        net,
        d,
        path,
        attr_id::sm::PORT_INFO,
        port,
        port_info_data(&pi),
    )
    .0
}

const INIT: (u8, u8) = (2, 5);
const ARMED: (u8, u8) = (3, 5);
const ACTIVE: (u8, u8) = (4, 5);
const POLLING: (u8, u8) = (1, 2);
const DISABLED: (u8, u8) = (1, 3);

#[test]
fn init_armed_active_in_order_only() {
    let (net, d) = setup();
    assert_eq!(states(&net, &d, SW, 2), INIT);
    // Init -> Active skips Armed: refused, nothing changes.
    assert_eq!(set_state(&net, &d, SW, 2, 4, 0), status::INVALID_ATTR_VALUE);
    assert_eq!(states(&net, &d, SW, 2), INIT);
    // Init is not a state an SM sets; 5 and up are reserved.
    assert_eq!(set_state(&net, &d, SW, 2, 2, 0), status::INVALID_ATTR_VALUE);
    assert_eq!(set_state(&net, &d, SW, 2, 5, 0), status::INVALID_ATTR_VALUE);
    // Armed, then Armed again (no change), then Active needs the neighbour Armed.
    assert_eq!(set_state(&net, &d, SW, 2, 3, 0), status::SUCCESS);
    assert_eq!(states(&net, &d, SW, 2), ARMED);
    assert_eq!(set_state(&net, &d, SW, 2, 3, 0), status::SUCCESS);
    assert_eq!(set_state(&net, &d, SW, 2, 4, 0), status::INVALID_ATTR_VALUE);
    assert_eq!(states(&net, &d, SW, 2), ARMED);
    // Hca3 (the neighbour) to Armed, then both ends to Active.
    assert_eq!(set_state(&net, &d, CA, 1, 3, 0), status::SUCCESS);
    assert_eq!(set_state(&net, &d, SW, 2, 4, 0), status::SUCCESS);
    assert_eq!(set_state(&net, &d, CA, 1, 4, 0), status::SUCCESS);
    assert_eq!(states(&net, &d, SW, 2), ACTIVE);
    assert_eq!(states(&net, &d, CA, 1), ACTIVE);
    // Active -> Armed is not a transition.
    assert_eq!(set_state(&net, &d, SW, 2, 3, 0), status::INVALID_ATTR_VALUE);
    // A physical state with Armed or Active, or a physical state other than 0, 2, 3.
    assert_eq!(set_state(&net, &d, SW, 2, 4, 2), status::INVALID_ATTR_VALUE);
    assert_eq!(set_state(&net, &d, SW, 2, 0, 5), status::INVALID_ATTR_VALUE);
    assert_eq!(set_state(&net, &d, SW, 2, 0, 1), status::INVALID_ATTR_VALUE);
}

/// A switch's port 0 has no link: it stays Active, and its state bits are ignored ("for
/// switch port 0, the state bits are ignored": OpenSM `osm_lid_mgr.c`
/// `lid_mgr_set_physp_pi`). Down (1) is taken and changes nothing; Active (4), the state it
/// holds, is a no-op success as on any Active port; Armed (3) is refused with 0x001C, as
/// Active -> Armed is on any port. (ibsim's `do_portinfo` refuses Armed and Active on it.)
#[test]
fn a_switch_port_0_takes_down_and_active_as_no_change_and_refuses_armed() {
    let (net, d) = setup();
    // Port 0 holds the switch's LID: a Set must carry a valid one.
    update_port(&net, &d, SW, 0, |pi| {
        pi.lid = 2;
        pi.master_sm_lid = 1;
    });
    assert_eq!(states(&net, &d, SW, 0), ACTIVE);
    for state in [1, 4] {
        assert_eq!(
            set_state(&net, &d, SW, 0, state, 0),
            status::SUCCESS,
            "PortState {state}"
        );
        assert_eq!(states(&net, &d, SW, 0), ACTIVE);
    }
    assert_eq!(set_state(&net, &d, SW, 0, 3, 0), status::INVALID_ATTR_VALUE);
    assert_eq!(states(&net, &d, SW, 0), ACTIVE);
    // A refused Set changes nothing else either.
    let before = port_info(&dr_get(&net, &d, SW, attr_id::sm::PORT_INFO, 0).1);
    let mut pi = before;
    pi.port_state = PortState::Armed;
    pi.port_physical_state = PhysPortState::NoChange;
    pi.lid = 0x40;
    pi.master_sm_lid = 1;
    let (st, _) = dr_set(&net, &d, SW, attr_id::sm::PORT_INFO, 0, port_info_data(&pi));
    assert_eq!(st, status::INVALID_ATTR_VALUE);
    let after = port_info(&dr_get(&net, &d, SW, attr_id::sm::PORT_INFO, 0).1);
    assert_eq!(after.lid, before.lid);
    // A physical state stays refused: port 0 has no physical link to disable or poll.
    assert_eq!(set_state(&net, &d, SW, 0, 0, 3), status::INVALID_ATTR_VALUE);
    assert_eq!(set_state(&net, &d, SW, 0, 1, 2), status::INVALID_ATTR_VALUE);
}

#[test]
fn down_bounces_the_link_and_disabled_holds_it() {
    let (net, d) = setup();
    // Down on the switch port facing the SM's own port: the link retrains, both ends Init;
    // the SM's device hears the port go down and come back.
    update_port(&net, &d, SW, 1, |pi| pi.port_state = PortState::Armed);
    assert_eq!(states(&net, &d, SW, 1), ARMED);
    d.rec.take_changes();
    assert_eq!(set_state(&net, &d, SW, 1, 1, 0), status::SUCCESS);
    net.scheduler().run_due();
    assert_eq!(
        d.rec.take_changes(),
        vec![(1, PortChange::Down), (1, PortChange::Initialized)]
    );
    assert_eq!(states(&net, &d, SW, 1), INIT);
    assert_eq!(states(&net, &d, &[], 1), INIT);
    // Disabled on Switch1 port 2: Hca3's end goes to Polling, the switch's to Disabled, and
    // the switch counts a link down on its port. It does not set its own PortStateChange: the
    // change comes from a SubnSet to the switch itself (ibsim `sim_mad.c`: "the local
    // portchange (if switch) is not changed according to the spec (p. 731) - no portchange
    // on subnset"); the far end is a CA, so no switch sets it.
    let (_, si) = dr_get(&net, &d, SW, attr_id::sm::SWITCH_INFO, 0);
    let mut si = SwitchInfoRepr::parse(&SwitchInfo::new_checked(&si[..]).unwrap()).unwrap();
    si.port_state_change = true;
    let mut data = [0u8; 64];
    si.emit(&mut SwitchInfo::new_checked(&mut data[..]).unwrap());
    let (_, back) = dr_set(&net, &d, SW, attr_id::sm::SWITCH_INFO, 0, data);
    assert!(
        !SwitchInfoRepr::parse(&SwitchInfo::new_checked(&back[..]).unwrap())
            .unwrap()
            .port_state_change
    );
    assert_eq!(set_state(&net, &d, SW, 2, 0, 3), status::SUCCESS);
    assert_eq!(states(&net, &d, SW, 2), DISABLED);
    let hca3 = net.port("Hca3", 1).unwrap();
    net.with_fabric(|f| {
        let s = f.port(hca3).state;
        assert_eq!((s.link_state as u8, s.phys_state as u8), POLLING);
    });
    assert!(!port_state_change(&net, &d, SW));
    let sw2 = net.port("Switch1", 2).unwrap();
    assert_eq!(net.counters(sw2).link_downed, 1);
    // Hca3 is unreachable now.
    assert!(
        dr_call(
            &net,
            &d,
            method::GET,
            CA,
            attr_id::sm::NODE_INFO,
            0,
            [0; 64]
        )
        .is_none()
    );
    // Down without a physical state leaves a disabled port disabled; Polling enables it.
    assert_eq!(set_state(&net, &d, SW, 2, 1, 0), status::SUCCESS);
    assert_eq!(states(&net, &d, SW, 2), DISABLED);
    assert_eq!(set_state(&net, &d, SW, 2, 0, 2), status::SUCCESS);
    assert_eq!(states(&net, &d, SW, 2), INIT);
    assert_eq!(states(&net, &d, CA, 1), INIT);
}

/// SwitchInfo:PortStateChange of the switch along `path`.
fn port_state_change(net: &Network, d: &Device, path: &[u8]) -> bool {
    let (st, si) = dr_get(net, d, path, attr_id::sm::SWITCH_INFO, 0);
    assert_eq!(st, status::SUCCESS);
    SwitchInfoRepr::parse(&SwitchInfo::new_checked(&si[..]).unwrap())
        .unwrap()
        .port_state_change
}

/// Whether `p` is a trap 128 (a switch's port went up or down): its SLID if so.
fn trap_128_from(p: &Packet) -> Option<u16> {
    let smp = netutil::smp_of(p);
    let notice = Notice::new_checked(&smp.data[..]).ok()?;
    (smp.method == method::TRAP
        && smp.attr_id == attr_id::sm::NOTICE
        && NoticeRepr::parse(&notice).ok()?.trap_number_or_device_id == 128)
        .then_some(p.slid)
}

/// Like [`set_state`], also returning the LIDs of the switches whose trap 128 reached the
/// SM's device with the response.
fn set_state_traps(
    net: &Network,
    d: &Device,
    path: &[u8],
    port: u32,
    state: u8,
    phys: u8,
) -> (u16, Vec<u16>) {
    let (_, data) = dr_get(net, d, path, attr_id::sm::PORT_INFO, port);
    let mut pi: PortInfoRepr = port_info(&data);
    pi.port_state = PortState::from(state);
    pi.port_physical_state = PhysPortState::from(phys);
    let got = d.exchange(
        net,
        netutil::dr_smp(
            method::SET,
            path,
            attr_id::sm::PORT_INFO,
            port,
            port_info_data(&pi),
        ),
    );
    net.scheduler().run_due();
    let mut status = None;
    let mut traps = Vec::new();
    for (_, p) in got.iter().chain(d.rec.take().iter()) {
        match trap_128_from(p) {
            Some(lid) => traps.push(lid),
            None => status = Some(netutil::smp_of(p).status),
        }
    }
    (status.expect("the Set is answered"), traps)
}

/// A PortInfo Set that bounces a link between two switches: the switch that was set neither
/// sets its own PortStateChange nor sends trap 128 (IBA's SwitchInfo table: changes of
/// PortState resulting from SubnSet do not change the bit; ibsim `sim_mad.c` `do_portinfo`:
/// "the local portchange (if switch) is not changed according to the spec (p. 731) - no
/// portchange on subnset", it sets the remote switch's). The switch at the far end does both.
/// A cable pulled still makes both switches set it.
#[test]
fn a_subn_set_raises_port_state_change_only_at_the_far_switch() {
    // Switch2 by the other cable (Switch1 port 5), which stays up throughout.
    const SW2: &[u8] = &[1, 5];
    let net = network(example("net.2sw2path4hca"));
    let d = attach(&net, "Hca1", 1);
    netutil::sweep::configure(&net, &d);
    net.scheduler().run_due();
    d.rec.take();
    assert!(!port_state_change(&net, &d, SW));
    assert!(!port_state_change(&net, &d, SW2));
    // Switch1 port 3 (to Switch2 port 3) to Down: the link retrains, both ends Init.
    assert_eq!(
        set_state_traps(&net, &d, SW, 3, 1, 0),
        (status::SUCCESS, vec![netutil::sweep::LID_SWITCH2]),
        "only Switch2, the far end, traps"
    );
    assert_eq!(states(&net, &d, SW, 3), INIT);
    assert_eq!(states(&net, &d, SW2, 3), INIT);
    assert!(!port_state_change(&net, &d, SW), "Switch1 was set");
    assert!(port_state_change(&net, &d, SW2), "Switch2 is the far end");
    // Disabled and Polling again by SubnSet to Switch1: the same rule.
    // Switch2's trap for the Disabled is lost: its LFT sends LID 1 out of port 3, now down.
    clear_port_state_change(&net, &d, SW2);
    let lost = net.drops().get(DropReason::LinkDown);
    assert_eq!(
        set_state_traps(&net, &d, SW, 3, 0, 3),
        (status::SUCCESS, vec![])
    );
    assert_eq!(net.drops().get(DropReason::LinkDown), lost + 1);
    assert_eq!(states(&net, &d, SW, 3), DISABLED);
    assert!(!port_state_change(&net, &d, SW));
    assert!(port_state_change(&net, &d, SW2));
    clear_port_state_change(&net, &d, SW2);
    assert_eq!(
        set_state_traps(&net, &d, SW, 3, 0, 2),
        (status::SUCCESS, vec![netutil::sweep::LID_SWITCH2])
    );
    assert!(!port_state_change(&net, &d, SW));
    assert!(port_state_change(&net, &d, SW2));
    // A cable pulled is no SubnSet: both switches set it.
    clear_port_state_change(&net, &d, SW2);
    let p3 = net.port("Switch1", 3).unwrap();
    let traps = |d: &Device| {
        net.scheduler().run_due();
        let mut v: Vec<u16> = d
            .rec
            .take()
            .iter()
            .filter_map(|(_, p)| trap_128_from(p))
            .collect();
        v.sort_unstable();
        v
    };
    net.set_link_down(p3, true);
    // Switch2's trap is lost on its way out of port 3, now down.
    assert_eq!(traps(&d), vec![netutil::sweep::LID_SWITCH1]);
    net.set_link_down(p3, false);
    assert_eq!(
        traps(&d),
        vec![netutil::sweep::LID_SWITCH1, netutil::sweep::LID_SWITCH2]
    );
    assert!(port_state_change(&net, &d, SW));
    assert!(port_state_change(&net, &d, SW2));
}

/// Writes 1 to PortStateChange of the switch along `path`, which clears it.
fn clear_port_state_change(net: &Network, d: &Device, path: &[u8]) {
    let (_, si) = dr_get(net, d, path, attr_id::sm::SWITCH_INFO, 0);
    let mut si = SwitchInfoRepr::parse(&SwitchInfo::new_checked(&si[..]).unwrap()).unwrap();
    si.port_state_change = true;
    let mut data = [0u8; 64];
    si.emit(&mut SwitchInfo::new_checked(&mut data[..]).unwrap());
    let (st, back) = dr_set(net, d, path, attr_id::sm::SWITCH_INFO, 0, data);
    assert_eq!(st, status::SUCCESS);
    assert!(
        !SwitchInfoRepr::parse(&SwitchInfo::new_checked(&back[..]).unwrap())
            .unwrap()
            .port_state_change
    );
}

/// Read-modify-write of Switch1's PortInfo port 0 with M_Key `using` on both SMPs.
fn update_keyed(net: &Network, d: &Device, using: u64, f: impl FnOnce(&mut PortInfoRepr)) {
    let r = call_with_key(net, d, method::GET, SW, 0, [0; 64], using).expect("answered");
    let mut pi = port_info(&r.data);
    pi.port_state = PortState::NoChange;
    pi.port_physical_state = PhysPortState::NoChange;
    pi.lid = 2;
    pi.master_sm_lid = 1;
    f(&mut pi);
    let r =
        call_with_key(net, d, method::SET, SW, 0, port_info_data(&pi), using).expect("answered");
    assert_eq!(r.status, status::SUCCESS);
}

/// Sets M_Key, protect bits and lease period of Switch1 (port 0), using M_Key `using`.
fn protect(net: &Network, d: &Device, using: u64, key: u64, bits: u8, lease: u16) {
    update_keyed(net, d, using, |pi| {
        pi.m_key = key;
        pi.m_key_protect_bits = bits;
        pi.m_key_lease_period = lease;
    });
}

/// A Get of Switch1 PortInfo port 0 with `key`: the PortInfo, or `None` if dropped.
fn get_with_key(net: &Network, d: &Device, key: u64) -> Option<PortInfoRepr> {
    call_with_key(net, d, method::GET, SW, 0, [0; 64], key).map(|r| port_info(&r.data))
}

/// A Set of Switch1 port 0 with `key` changing the SM LID to `sm` (and keeping M_Key
/// 0x1111): the new SM LID, or `None` if dropped.
fn set_with_key(net: &Network, d: &Device, key: u64, sm: u16) -> Option<u16> {
    let current = get_with_key(net, d, 0x1111).expect("the right key reads");
    let mut pi = current;
    pi.port_state = PortState::NoChange;
    pi.port_physical_state = PhysPortState::NoChange;
    pi.master_sm_lid = sm;
    pi.m_key = 0x1111;
    call_with_key(net, d, method::SET, SW, 0, port_info_data(&pi), key)
        .map(|r| port_info(&r.data).master_sm_lid)
}

fn violations(net: &Network, d: &Device, key: u64) -> u16 {
    get_with_key(net, d, key)
        .expect("the right key reads")
        .m_key_violations
}

const KEY: u64 = 0x1111;
const WRONG: u64 = 0x2222;

#[test]
fn m_key_protection_levels() {
    let (net, d) = setup();
    // Level 0: a Get with a wrong key is answered and shows the key; a Set is dropped.
    protect(&net, &d, 0, KEY, 0, 0);
    assert_eq!(get_with_key(&net, &d, WRONG).map(|p| p.m_key), Some(KEY));
    assert_eq!(set_with_key(&net, &d, WRONG, 7), None);
    assert_eq!(violations(&net, &d, KEY), 1);
    assert_eq!(set_with_key(&net, &d, KEY, 7), Some(7));
    // Level 1: a Get with a wrong key is answered but M_Key reads 0.
    protect(&net, &d, KEY, KEY, 1, 0);
    let pi = get_with_key(&net, &d, WRONG).expect("answered");
    assert_eq!((pi.m_key, pi.m_key_protect_bits), (0, 1));
    assert_eq!(get_with_key(&net, &d, KEY).map(|p| p.m_key), Some(KEY));
    assert_eq!(
        violations(&net, &d, KEY),
        1,
        "a level-1 Get is no violation"
    );
    // Level 2 and 3: a Get with a wrong key is dropped and counted.
    for level in [2, 3] {
        protect(&net, &d, KEY, KEY, level, 0);
        let before = violations(&net, &d, KEY);
        assert_eq!(get_with_key(&net, &d, WRONG), None);
        assert_eq!(set_with_key(&net, &d, WRONG, 9), None);
        assert_eq!(violations(&net, &d, KEY), before + 2);
        assert!(get_with_key(&net, &d, KEY).is_some());
    }
    // Writing 0 to M_KeyViolations clears it.
    assert!(violations(&net, &d, KEY) > 0);
    update_keyed(&net, &d, KEY, |pi| pi.m_key_violations = 0);
    assert_eq!(violations(&net, &d, KEY), 0);
}

#[test]
fn the_m_key_lease_lets_a_new_sm_take_over() {
    const KEY: u64 = 0xAB;
    let (net, d) = setup();
    protect(&net, &d, 0, KEY, 2, 5);
    // A violation starts the 5-second lease.
    assert_eq!(get_with_key(&net, &d, 0), None);
    let t0 = net.scheduler().now();
    net.scheduler().run_until(t0 + Duration::from_secs(4));
    assert_eq!(get_with_key(&net, &d, 0), None, "lease still running");
    net.scheduler().run_until(t0 + Duration::from_secs(6));
    // Expired: the protect bits fell to 0, a Get without the key is answered.
    let pi = get_with_key(&net, &d, 0).expect("answered after the lease");
    assert_eq!((pi.m_key_protect_bits, pi.m_key), (0, KEY));
    // A valid SMP during the lease stops it.
    protect(&net, &d, KEY, KEY, 2, 5);
    assert_eq!(get_with_key(&net, &d, 0), None);
    assert!(get_with_key(&net, &d, KEY).is_some());
    let t1 = net.scheduler().now();
    net.scheduler().run_until(t1 + Duration::from_secs(10));
    assert_eq!(get_with_key(&net, &d, 0), None, "still protected");
}

#[test]
fn m_key_of_a_ca_port_and_the_local_host() {
    let (net, d) = setup();
    update_port(&net, &d, CA, 0, |pi| {
        pi.m_key = 0x77;
        pi.m_key_protect_bits = 2;
        pi.lid = 5;
        pi.master_sm_lid = 1;
    });
    assert!(
        dr_call(
            &net,
            &d,
            method::GET,
            CA,
            attr_id::sm::NODE_INFO,
            0,
            [0; 64]
        )
        .is_none()
    );
    // The device's own SMA: MAD_IFC with "ignore M_Key" is always answered.
    netutil::sweep::update_port(&net, &d, &[], 1, |pi| {
        pi.m_key = 0x99;
        pi.m_key_protect_bits = 3;
        pi.lid = 1;
        pi.master_sm_lid = 1;
    });
    let mad = netutil::local_get(attr_id::sm::NODE_INFO, 0);
    assert!(d.link.local_mad(&mad, true).is_some());
    assert!(
        d.link.local_mad(&mad, false).is_none(),
        "checked without the flag"
    );
}

/// Hca2's ports 1 and 2 on ibsim's `net.2sw2path4hca2port` (both hang off Switch2, path 1,3),
/// from the SM's device at Hca1 port 1.
const HCA2_P1: &[u8] = &[1, 3, 1];
const HCA2_P2: &[u8] = &[1, 3, 2];
const LID_P1: u16 = 8;
const LID_P2: u16 = 9;

/// `net.2sw2path4hca2port` with the SM's device at Hca1 port 1 (LID 1), the switches routing
/// LID 1 towards it (so that traps reach the SM), and Hca2's ports at LIDs 8 and 9 with SM
/// LID 1 (so that they can trap).
fn two_port_setup() -> (Network, Device) {
    let net = network(example("net.2sw2path4hca2port"));
    let d = attach(&net, "Hca1", 1);
    sweep::set_lid(&net, &d, &[], 1, 1);
    sweep::set_lid(&net, &d, &[1], 0, 2);
    sweep::set_lid(&net, &d, &[1, 3], 0, 3);
    // LID 1: Switch1 sends it by port 1 (to Hca1), Switch2 by port 3 (to Switch1).
    sweep::program_switch(&net, &d, &[1], &[0xFF, 1]);
    sweep::program_switch(&net, &d, &[1, 3], &[0xFF, 3]);
    sweep::set_lid(&net, &d, HCA2_P1, 0, LID_P1);
    sweep::set_lid(&net, &d, HCA2_P2, 0, LID_P2);
    (net, d)
}

/// A PortInfo SMP along `path` with modifier `attr_mod` and M_Key `key`: its response, if
/// any, and the IssuerLIDs of the traps 256 that reached the SM meanwhile.
fn keyed_port_info(
    net: &Network,
    d: &Device,
    m: u8,
    path: &[u8],
    attr_mod: u32,
    data: [u8; 64],
    key: u64,
) -> (Option<mad_wire::smp::SmpRepr>, Vec<u16>) {
    let mut p = netutil::dr_smp(m, path, attr_id::sm::PORT_INFO, attr_mod, data);
    p.mad[24..32].copy_from_slice(&key.to_be_bytes());
    let mut response = None;
    let mut traps = Vec::new();
    for (_, p) in d.exchange(net, p) {
        let smp = netutil::smp_of(&p);
        if smp.method == method::TRAP {
            let n = NoticeRepr::parse(&Notice::new_checked(&smp.data[..]).unwrap()).unwrap();
            assert_eq!(n.trap_number_or_device_id, 256, "only traps 256 here");
            assert_eq!(p.slid, n.issuer_lid, "a trap comes from its issuer");
            traps.push(n.issuer_lid);
        } else {
            assert!(response.replace(smp).is_none(), "one response at most");
        }
    }
    traps.sort_unstable();
    (response, traps)
}

/// Read-modify-write of Hca2's port along `path` (modifier 0, its own port) with M_Key
/// `key`, keeping its LID and SM LID: the Set must succeed.
fn update_hca2(
    net: &Network,
    d: &Device,
    path: &[u8],
    key: u64,
    f: impl FnOnce(&mut PortInfoRepr),
) {
    let (r, _) = keyed_port_info(net, d, method::GET, path, 0, [0; 64], key);
    let mut pi = port_info(&r.expect("the right key reads").data);
    pi.port_state = PortState::NoChange;
    pi.port_physical_state = PhysPortState::NoChange;
    f(&mut pi);
    let (r, _) = keyed_port_info(net, d, method::SET, path, 0, port_info_data(&pi), key);
    assert_eq!(r.expect("the right key writes").status, status::SUCCESS);
}

/// (M_Key, M_KeyProtectBits, M_KeyViolations) of Hca2's port along `path`, read through that
/// port itself with its M_Key `key`.
fn hca2_mkey(net: &Network, d: &Device, path: &[u8], key: u64) -> (u64, u8, u16) {
    let (r, traps) = keyed_port_info(net, d, method::GET, path, 0, [0; 64], key);
    assert!(traps.is_empty());
    let pi = port_info(&r.expect("the right key reads").data);
    (pi.m_key, pi.m_key_protect_bits, pi.m_key_violations)
}

/// A CA's PortInfo names any of its ports (modifier N), but port N's M_Key guards port N's
/// PortInfo whichever port the SMP came in by (IBA 14.2.4; the kernel's software SMA,
/// `qib_mad.c` `subn_get_portinfo`, checks the M_Key of port N too when N is not the
/// receiving port, and `process_subn` checks it as well when the receiving port's check
/// failed, so that both count): a violation on port N is counted there and trapped from
/// there, and whether M_Key reads 0 is port N's protect level's decision.
#[test]
fn a_ca_port_named_through_its_sibling_keeps_its_own_m_key() {
    const P2_KEY: u64 = 0x5555;
    const P1_KEY: u64 = 0x1111;
    let (net, d) = two_port_setup();
    update_hca2(&net, &d, HCA2_P2, 0, |pi| {
        pi.m_key = P2_KEY;
        pi.m_key_protect_bits = 2;
    });
    let get = |path: &[u8], n: u32, key: u64| {
        keyed_port_info(&net, &d, method::GET, path, n, [0; 64], key)
    };
    // Through port 2 itself, without the key: dropped, trapped from port 2.
    let (r, traps) = get(HCA2_P2, 0, 0);
    assert!(r.is_none());
    assert_eq!(traps, [LID_P2]);
    // Through port 1 (unprotected), naming port 2: the same.
    let (r, traps) = get(HCA2_P1, 2, 0);
    assert!(r.is_none(), "port 2's PortInfo read through port 1: {r:?}");
    assert_eq!(traps, [LID_P2]);
    assert_eq!(hca2_mkey(&net, &d, HCA2_P2, P2_KEY), (P2_KEY, 2, 2));
    assert_eq!(
        hca2_mkey(&net, &d, HCA2_P1, 0),
        (0, 0, 0),
        "port 1 saw no violation"
    );
    // A Set through port 1 naming port 2 without its key: dropped and counted on port 2; with
    // its key, refused as any CA Set of another port (ibsim), port 2 unchanged.
    let (r, _) = get(HCA2_P2, 0, P2_KEY);
    let mut pi = port_info(&r.unwrap().data);
    pi.port_state = PortState::NoChange;
    pi.port_physical_state = PhysPortState::NoChange;
    pi.m_key = 0;
    pi.m_key_protect_bits = 0;
    let set =
        |key: u64| keyed_port_info(&net, &d, method::SET, HCA2_P1, 2, port_info_data(&pi), key);
    let (r, traps) = set(0);
    assert!(r.is_none(), "port 2 written through port 1: {r:?}");
    assert_eq!(traps, [LID_P2]);
    let (r, traps) = set(P2_KEY);
    let r = r.expect("the right key is answered");
    assert_eq!(r.status, status::INVALID_ATTR_VALUE);
    assert!(traps.is_empty());
    assert_eq!(hca2_mkey(&net, &d, HCA2_P2, P2_KEY), (P2_KEY, 2, 3));
    // With the key, port 2 is read through port 1.
    let (r, traps) = get(HCA2_P1, 2, P2_KEY);
    let pi = port_info(&r.expect("the right key reads").data);
    assert_eq!((pi.m_key, pi.lid, pi.local_port_num), (P2_KEY, LID_P2, 1));
    assert!(traps.is_empty());

    // Level 1 on port 2: a Get without its key, through port 1, reads M_Key 0 and is no
    // violation.
    update_hca2(&net, &d, HCA2_P2, P2_KEY, |pi| pi.m_key_protect_bits = 1);
    let (r, traps) = get(HCA2_P1, 2, 0);
    let pi = port_info(&r.expect("level 1 answers").data);
    assert_eq!(
        (pi.m_key, pi.m_key_protect_bits, pi.m_key_violations),
        (0, 1, 3)
    );
    assert!(traps.is_empty());
    // Port 1 at level 1 with its own key: port 2's key read through port 1 is port 2's
    // decision, and it is the right one for port 2.
    update_hca2(&net, &d, HCA2_P1, 0, |pi| {
        pi.m_key = P1_KEY;
        pi.m_key_protect_bits = 1;
    });
    let (r, _) = get(HCA2_P1, 2, P2_KEY);
    assert_eq!(port_info(&r.expect("answered").data).m_key, P2_KEY);

    // Both ports at level 2, neither key: dropped, counted and trapped on both.
    update_hca2(&net, &d, HCA2_P1, P1_KEY, |pi| pi.m_key_protect_bits = 2);
    update_hca2(&net, &d, HCA2_P2, P2_KEY, |pi| pi.m_key_protect_bits = 2);
    let (r, traps) = get(HCA2_P1, 2, 0);
    assert!(r.is_none());
    assert_eq!(traps, [LID_P1, LID_P2]);
    assert_eq!(hca2_mkey(&net, &d, HCA2_P1, P1_KEY), (P1_KEY, 2, 1));
    assert_eq!(hca2_mkey(&net, &d, HCA2_P2, P2_KEY), (P2_KEY, 2, 4));
}

/// A switch whose port 1 faces an EDR-capable CA (`w=3 s=7 e=3`: 1x|4x, SDR-QDR, FDR|EDR)
/// and whose port 2 faces the SM's CA at the net's defaults (4x, SDR).
const EDR_NET: &str = "Switch 2 \"S\"
[1] \"H\"[1] w=3 s=7 e=3
[2] \"G\"[1]

Hca 1 \"H\"
[1] \"S\"[1] w=3 s=7 e=3

Hca 1 \"G\"
[1] \"S\"[2]
";

/// (LinkWidthEnabled, Supported, Active), (LinkSpeedEnabled, Supported, Active) and
/// (LinkSpeedExtEnabled, Supported, Active) of Switch S port 1.
type Rates = ((u8, u8, u8), (u8, u8, u8), (u8, u8, u8));

fn rates(net: &Network, d: &Device) -> Rates {
    let pi = port_info(&dr_get(net, d, SW, attr_id::sm::PORT_INFO, 1).1);
    (
        (
            pi.link_width_enabled,
            pi.link_width_supported,
            pi.link_width_active,
        ),
        (
            pi.link_speed_enabled,
            pi.link_speed_supported,
            pi.link_speed_active,
        ),
        (
            pi.link_speed_ext_enabled,
            pi.link_speed_ext_supported,
            pi.link_speed_ext_active,
        ),
    )
}

/// A port whose link is down (disabled by the SM, or its cable pulled) keeps reporting what it
/// supports and enables, extended speeds included; only the Active fields go to 0, until the
/// link trains again. Values written out from ibsim's `sim.h`: supported widths
/// `LINKWIDTH_1x_2x_4x_8x_12x` 31, speeds `LINKSPEED_SDR_DDR_QDR` 7, extended speeds
/// `LINKSPEEDEXT_NDR_HDR_EDR_FDR` 15; trained: 4x (2), QDR (4), EDR (2).
#[test]
fn a_port_whose_link_is_down_keeps_its_supported_and_enabled_rates() {
    let fabric = sim::fabric::Fabric::parse_str("edr", EDR_NET).unwrap();
    let net = network(fabric);
    let d = attach(&net, "G", 1);
    let up: Rates = ((3, 31, 2), (7, 7, 4), (3, 15, 2));
    let down: Rates = ((3, 31, 0), (7, 7, 0), (3, 15, 0));
    assert_eq!(rates(&net, &d), up, "trained");

    assert_eq!(set_state(&net, &d, SW, 1, 0, 3), status::SUCCESS);
    assert_eq!(states(&net, &d, SW, 1), DISABLED);
    assert_eq!(rates(&net, &d), down, "disabled by the SM");
    assert_eq!(set_state(&net, &d, SW, 1, 0, 2), status::SUCCESS);
    assert_eq!(states(&net, &d, SW, 1), INIT);
    assert_eq!(rates(&net, &d), up, "enabled again");

    let port = net.port("S", 1).unwrap();
    net.set_link_down(port, true);
    assert_eq!(states(&net, &d, SW, 1), POLLING);
    assert_eq!(rates(&net, &d), down, "cable pulled");
    net.set_link_down(port, false);
    assert_eq!(rates(&net, &d), up, "cable back");
}

/// A PortInfo Set of LinkSpeedExtEnabled `ext` (all else read back, state "no change") on
/// `port` along `path`: its status and the PortInfo answered.
fn set_ext(net: &Network, d: &Device, path: &[u8], port: u32, ext: u8) -> (u16, PortInfoRepr) {
    let (_, data) = dr_get(net, d, path, attr_id::sm::PORT_INFO, port);
    let mut pi: PortInfoRepr = port_info(&data);
    pi.port_state = PortState::NoChange;
    pi.port_physical_state = PhysPortState::NoChange;
    pi.link_speed_ext_enabled = ext;
    let (st, back) = dr_set(
        net,
        d,
        path,
        attr_id::sm::PORT_INFO,
        port,
        port_info_data(&pi),
    );
    (st, port_info(&back))
}

/// LinkSpeedExtEnabled 31 means "set to LinkSpeedExtSupported" and an explicit mask must be a
/// subset of it (IBA 14.2.5.6; `qib_mad.c` `subn_set_portinfo` refuses a mask beyond the
/// supported speeds with 0x001C). Hca3 and Switch1 port 2 of `net.2sw2path4hca` run SDR and
/// support no extended speed (LinkSpeedExtSupported 0, as ibsim reports it): 31 written on
/// both ends (as OpenSM's `force_link_speed_ext` default does) changes nothing (ibsim: no
/// change either), an explicit FDR mask is refused, and the link retrains without an
/// extended speed.
#[test]
fn set_to_supported_on_a_port_without_extended_speeds_changes_nothing() {
    let (net, d) = setup();
    let pi = port_info(&dr_get(&net, &d, CA, attr_id::sm::PORT_INFO, 1).1);
    assert_eq!(
        (
            pi.link_speed_ext_supported,
            pi.link_speed_ext_enabled,
            pi.link_speed_ext_active
        ),
        (0, 0, 0)
    );
    for (path, port) in [(CA, 1), (SW, 2)] {
        let (st, back) = set_ext(&net, &d, path, port, 31);
        assert_eq!(st, status::SUCCESS, "31 on port {port} along {path:?}");
        assert_eq!(back.link_speed_ext_enabled, 0, "read back on {path:?}");
    }
    // Bounce the link: it trains at SDR, no extended speed.
    assert_eq!(set_state(&net, &d, CA, 1, 1, 0), status::SUCCESS);
    let pi = port_info(&dr_get(&net, &d, CA, attr_id::sm::PORT_INFO, 1).1);
    assert_eq!(
        (pi.link_speed_active, pi.link_speed_ext_active),
        (1, 0),
        "retrained without an extended speed"
    );
    // An explicit mask beyond the supported extended speeds (none): refused, nothing changes.
    let (st, back) = set_ext(&net, &d, CA, 1, 1);
    assert_eq!(st, status::INVALID_ATTR_VALUE);
    assert_eq!(back.link_speed_ext_enabled, 0);
    for (node, port) in [("Hca3", 1), ("Switch1", 2)] {
        let id = net.port(node, port).unwrap();
        let e = net.with_fabric(|f| f.port(id).enabled.speed_ext);
        assert_eq!(e, 0, "{node} port {port} enables none");
    }
}

/// On a port that supports extended speeds (`EDR_NET`: Switch S port 1 reports
/// LinkSpeedExtSupported 15, ibsim's `LINKSPEEDEXT_NDR_HDR_EDR_FDR`), 31 enables all of them,
/// a mask beyond them (0x10) is refused and a subset (FDR) is taken and trains when the link
/// next comes up.
#[test]
fn set_to_supported_on_a_port_with_extended_speeds_enables_them() {
    let fabric = sim::fabric::Fabric::parse_str("edr", EDR_NET).unwrap();
    let net = network(fabric);
    let d = attach(&net, "G", 1);
    let (st, back) = set_ext(&net, &d, SW, 1, 31);
    assert_eq!(st, status::SUCCESS);
    assert_eq!(
        (back.link_speed_ext_enabled, back.link_speed_ext_supported),
        (15, 15)
    );
    let (st, back) = set_ext(&net, &d, SW, 1, 0x10);
    assert_eq!(st, status::INVALID_ATTR_VALUE);
    assert_eq!(back.link_speed_ext_enabled, 15);
    let (st, back) = set_ext(&net, &d, SW, 1, 1);
    assert_eq!(st, status::SUCCESS);
    assert_eq!(back.link_speed_ext_enabled, 1);
    assert_eq!(set_state(&net, &d, SW, 1, 1, 0), status::SUCCESS);
    assert_eq!(rates(&net, &d).2, (1, 15, 1), "retrained at FDR");
}

/// A switch whose port 1 faces an XDR CA (the `4xXDR` token on both ends, which ibsim does not
/// know) and whose port 2 faces the SM's CA at the net's defaults (4x, SDR).
const XDR_NET: &str = "Switch 2 \"S\"
[1] \"H\"[1] # \"H\" lid 0 4xXDR
[2] \"G\"[1]

Hca 1 \"H\"
[1] \"S\"[1] # lid 0 lmc 0 \"S\" lid 0 4xXDR

Hca 1 \"G\"
[1] \"S\"[2]
";

/// (LinkSpeedExtEnabled2, LinkSpeedExtSupported2, LinkSpeedExtActive2) of a PortInfo.
fn ext2(pi: &PortInfoRepr) -> (u8, u8, u8) {
    (
        pi.link_speed_ext_enabled2,
        pi.link_speed_ext_supported2,
        pi.link_speed_ext_active2,
    )
}

/// An XDR port reports LinkSpeedExt*2 (XDR = 1: libibmad `dump.c` `dump_linkspeedext2`) and
/// CapabilityMask2 IsExtSpeeds2Supported (0x0800) and IsLinkSpeedXDRSupported (0x1000), on a
/// switch on port 0, whose masks readers take for its ports (libibnetdisc
/// `ibnd_get_agg_linkspeedext`); a port without XDR reports none of it, as ibsim's do. Down,
/// only Active2 goes to 0. A Set of LinkSpeedExtEnabled2 beyond what the port supports is
/// refused.
#[test]
fn an_xdr_port_reports_its_extended_speeds_2() {
    const XDR_CAPS: u16 = 0x0800 | 0x1000;
    let fabric = sim::fabric::Fabric::parse_str("xdr", XDR_NET).unwrap();
    let net = network(fabric);
    let d = attach(&net, "G", 1);
    let get =
        |path: &[u8], port: u32| port_info(&dr_get(&net, &d, path, attr_id::sm::PORT_INFO, port).1);

    let s1 = get(SW, 1);
    assert_eq!(ext2(&s1), (1, 1, 1), "switch port 1");
    assert_eq!(
        (
            s1.link_speed_ext_enabled,
            s1.link_speed_ext_supported,
            s1.link_speed_ext_active
        ),
        (15, 15, 8),
        "NDR and below trained as before"
    );
    assert_eq!(
        get(SW, 0).capability_mask2 & XDR_CAPS,
        XDR_CAPS,
        "switch port 0"
    );
    assert_eq!(ext2(&get(SW, 2)), (0, 0, 0), "switch port 2 (no XDR)");
    let h = get(&[1, 1], 1);
    assert_eq!(ext2(&h), (1, 1, 1), "the XDR CA");
    assert_eq!(h.capability_mask2 & XDR_CAPS, XDR_CAPS);
    let g =
        port_info(&netutil::local_call(&d, method::GET, attr_id::sm::PORT_INFO, 1, [0; 64]).data);
    assert_eq!(g.capability_mask2, 0x0030, "a CA without XDR: ibsim's mask");
    assert_eq!(ext2(&g), (0, 0, 0));

    // Enabled2 beyond the supported XDR, or XDR on a port without it: refused.
    for (port, mask) in [(1, 2), (2, 1)] {
        let (_, data) = dr_get(&net, &d, SW, attr_id::sm::PORT_INFO, port);
        let mut pi: PortInfoRepr = port_info(&data);
        pi.port_state = PortState::NoChange;
        pi.port_physical_state = PhysPortState::NoChange;
        pi.link_speed_ext_enabled2 = mask;
        let (st, back) = dr_set(
            &net,
            &d,
            SW,
            attr_id::sm::PORT_INFO,
            port,
            port_info_data(&pi),
        );
        assert_eq!(st, status::INVALID_ATTR_VALUE, "{mask} on port {port}");
        assert_eq!(ext2(&port_info(&back)), ext2(&get(SW, port)), "unchanged");
    }

    let port = net.port("S", 1).unwrap();
    net.set_link_down(port, true);
    assert_eq!(ext2(&get(SW, 1)), (1, 1, 0), "cable pulled");
    net.set_link_down(port, false);
    assert_eq!(ext2(&get(SW, 1)), (1, 1, 1), "cable back");
}

//! Traps 144 (local changes), 256 (Bad M_Key), 257 (Bad P_Key) and 258 (Bad Q_Key) from the
//! simulated SMAs, on ibsim's
//! `net.2sw2path4hca` configured by the small SM of `netutil::sweep` (the SM's device at Hca1
//! port 1, LID 1; Switch1 2, Switch2 3, Hca2 4). Trap 128 is tested in `net_faults.rs` and
//! `sma_state.rs`.
//!
//! Expected notices are written out byte by byte from the layouts of the references: ibsim's
//! `encode_trap144` with libibmad's `IB_NOTICE_DATA_144_*` fields (LIDADDR at Notice byte 12,
//! CapabilityMask at byte 16), and the kernel's `ntc_256` (LIDADDR 12, DRSLID 14, Method 16,
//! AttributeID 18, AttributeModifier 20, M_Key 24, DR byte 33, return path 34) and
//! `ntc_257_258` (LIDADDR1 12, LIDADDR2 14, Key 16, SL/QP1 20, QP2 24, GIDADDR1 28,
//! GIDADDR2 44), as the kernel's `qib_bad_pqkey` fills them.

mod netutil;

use mad_wire::attr::pkey_table::{PkeyTable, PkeyTableRepr};
use mad_wire::attr::port_info::{PhysPortState, PortInfoRepr, PortState, cap_mask};
use mad_wire::header::{Mad, MadHeaderRepr};
use mad_wire::{attr_id, method, status};
use netutil::sweep::{self, HCA2, LID_HCA1, LID_HCA2, LID_SWITCH2, SWITCH2};
use netutil::{
    Device, attach, dr_get, dr_set, example, network, pma, port_info, port_info_data, smp_of,
};
use sim::net::{DropReason, Network};
use sim::packet::{Packet, PacketGrh};

fn configured() -> (Network, Device) {
    configured_on(example("net.2sw2path4hca"))
}

fn configured_on(fabric: sim::fabric::Fabric) -> (Network, Device) {
    let net = network(fabric);
    let sm = attach(&net, "Hca1", 1);
    sweep::configure(&net, &sm);
    (net, sm)
}

/// `net.2sw2path4hca` with the link Hca2 port 1 - Switch2 port 1 enabling every extended
/// speed (`e=15`), so that both ends support them.
fn with_extended_speeds_at_hca2() -> sim::fabric::Fabric {
    let text = std::fs::read_to_string(netutil::data("net-examples/net.2sw2path4hca")).unwrap();
    let mut out = String::new();
    for line in text.lines() {
        out += line;
        if line == "[1]\t\"Hca2\"[1]" || line == "[1]\t\"Switch2\"[1]" {
            out += " e=15";
        }
        out.push('\n');
    }
    assert_eq!(out.matches("e=15").count(), 2);
    sim::fabric::Fabric::parse_str("net.2sw2path4hca+e", &out).unwrap()
}

/// Read-modify-write of PortInfo `port` along `path` (states "no change"), with M_Key `key`
/// on the Set (the Get carries the port's own key, `KEY` once protected); returns every
/// packet that came back to the SM.
fn set_port_info(
    net: &Network,
    sm: &Device,
    path: &[u8],
    port: u32,
    key: u64,
    f: impl FnOnce(&mut PortInfoRepr),
) -> Vec<Packet> {
    let mut pi = read_port_info(net, sm, path, port);
    pi.port_state = PortState::NoChange;
    pi.port_physical_state = PhysPortState::NoChange;
    f(&mut pi);
    let mut p = netutil::dr_smp(
        method::SET,
        path,
        attr_id::sm::PORT_INFO,
        port,
        port_info_data(&pi),
    );
    p.mad[24..32].copy_from_slice(&key.to_be_bytes());
    sm.exchange(net, p).into_iter().map(|(_, p)| p).collect()
}

/// PortInfo `port` along `path`, read with M_Key `KEY` (which an unprotected port, M_Key 0,
/// answers too).
fn read_port_info(net: &Network, sm: &Device, path: &[u8], port: u32) -> PortInfoRepr {
    let mut p = netutil::dr_smp(method::GET, path, attr_id::sm::PORT_INFO, port, [0; 64]);
    p.mad[24..32].copy_from_slice(&KEY.to_be_bytes());
    let r = smp_of(&sm.request(net, p));
    assert_eq!((r.method, r.status), (method::GET_RESP, status::SUCCESS));
    port_info(&r.data)
}

/// Splits what came back into (responses, traps).
fn split(got: Vec<Packet>) -> (Vec<Packet>, Vec<Packet>) {
    got.into_iter().partition(|p| p.mad[3] != method::TRAP)
}

/// The one successful response among `got`, and the traps.
fn answered(got: Vec<Packet>) -> Vec<Packet> {
    let (resp, traps) = split(got);
    assert_eq!(resp.len(), 1, "one response");
    let r = smp_of(&resp[0]);
    assert_eq!((r.method, r.status), (method::GET_RESP, status::SUCCESS));
    traps
}

/// Checks that `trap` is a SubnTrap(Notice) LID-routed from `slid` to the SM at LID 1 on
/// VL15/QP0, and returns its 64 Notice bytes.
fn notice_of(trap: &Packet, slid: u16) -> [u8; 64] {
    assert_eq!(
        (
            trap.slid,
            trap.dlid,
            trap.vl15,
            trap.src_qp,
            trap.dst_qp,
            trap.pkey
        ),
        (slid, LID_HCA1, true, 0, 0, 0xFFFF)
    );
    let m = &trap.mad;
    // BaseVersion 1, class SubnLID 0x01, ClassVersion 1, method SubnTrap 0x05, status 0.
    assert_eq!(m[..6], [0x01, 0x01, 0x01, 0x05, 0x00, 0x00]);
    // AttributeID Notice 0x0002, reserved, AttributeModifier 0, M_Key 0.
    assert_eq!(
        m[16..32],
        [0, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]
    );
    let mut n = [0u8; 64];
    n.copy_from_slice(&m[64..128]);
    n
}

/// Trap 144 as ibsim's `encode_trap144` lays it out.
fn trap_144(producer: u8, lid: u16, capability_mask: u32) -> [u8; 64] {
    let [lh, ll] = lid.to_be_bytes();
    let [c0, c1, c2, c3] = capability_mask.to_be_bytes();
    let mut n = [0u8; 64];
    n[..20].copy_from_slice(&[
        0x84, // IsGeneric, Type 4 (Informational)
        0, 0, producer, // ProducerType
        0x00, 0x90, // TrapNumber 144
        lh, ll, // IssuerLID
        0, 0, // NoticeToggle / NoticeCount
        0, 0, // DataDetails: reserved
        lh, ll, // LIDADDR
        0, 0, // reserved / OtherLocalChanges
        c0, c1, c2, c3, // CapabilityMask
    ]);
    n
}

#[test]
fn a_width_change_on_a_ca_port_sends_trap_144_to_the_sm() {
    let (net, sm) = configured();
    let traps = answered(set_port_info(&net, &sm, HCA2, 0, 0, |pi| {
        assert_eq!(pi.link_width_enabled, 0x02, "4x, the file's default");
        pi.link_width_enabled = 0x1F;
    }));
    assert_eq!(traps.len(), 1, "one trap from Hca2");
    assert_eq!(
        notice_of(&traps[0], LID_HCA2),
        trap_144(1, LID_HCA2, 0x0050_C048)
    );
    let (_, d) = dr_get(&net, &sm, HCA2, attr_id::sm::PORT_INFO, 0);
    assert_eq!(port_info(&d).link_width_enabled, 0x1F);
    // An explicit LinkSpeedEnabled (SDR|DDR, from SDR alone) too.
    let traps = answered(set_port_info(&net, &sm, HCA2, 0, 0, |pi| {
        pi.link_speed_enabled = 0x3;
    }));
    assert_eq!(traps.len(), 1);
    assert_eq!(
        notice_of(&traps[0], LID_HCA2),
        trap_144(1, LID_HCA2, 0x0050_C048)
    );
    let pi = read_port_info(&net, &sm, HCA2, 0);
    assert_eq!((pi.link_width_enabled, pi.link_speed_enabled), (0x1F, 0x3));
    // An explicit LinkSpeedExtEnabled on a port that supports no extended speed: refused
    // (0x001C), no trap.
    let got = set_port_info(&net, &sm, HCA2, 0, 0, |pi| pi.link_speed_ext_enabled = 0x1);
    let (resp, traps) = split(got);
    assert!(traps.is_empty());
    assert_eq!(smp_of(&resp[0]).status, status::INVALID_ATTR_VALUE);
    // On a port that supports them, an explicit LinkSpeedExtEnabled (FDR, from all four)
    // sends the trap.
    let (net, sm) = configured_on(with_extended_speeds_at_hca2());
    let traps = answered(set_port_info(&net, &sm, HCA2, 0, 0, |pi| {
        assert_eq!(pi.link_speed_ext_enabled, 0xF, "the file's e=15");
        pi.link_speed_ext_enabled = 0x1;
    }));
    assert_eq!(traps.len(), 1);
    assert_eq!(
        notice_of(&traps[0], LID_HCA2),
        trap_144(1, LID_HCA2, 0x0050_C048)
    );
    assert_eq!(
        read_port_info(&net, &sm, HCA2, 0).link_speed_ext_enabled,
        0x1
    );
}

#[test]
fn the_all_supported_codes_change_the_rates_without_a_trap() {
    // What OpenSM writes in its sweeps (force_link_width 255, force_link_speed 15); ibsim
    // ignores them and sends nothing, our SMA enables every supported rate and sends nothing.
    let (net, sm) = configured();
    let traps = answered(set_port_info(&net, &sm, HCA2, 0, 0, |pi| {
        pi.link_width_enabled = 0xFF;
        pi.link_speed_enabled = 0xF;
        pi.link_speed_ext_enabled = 0x1F;
    }));
    assert!(traps.is_empty());
    let pi = read_port_info(&net, &sm, HCA2, 0);
    assert_eq!((pi.link_width_enabled, pi.link_speed_enabled), (0x1F, 0x7));
    // 30 disables the extended speeds: no trap either.
    assert!(
        answered(set_port_info(&net, &sm, HCA2, 0, 0, |pi| pi
            .link_speed_ext_enabled =
            0x1E))
        .is_empty()
    );
    assert_eq!(net.drops().total(), 0);
}

#[test]
fn a_width_change_on_a_switch_port_sends_trap_144_when_lid_routed() {
    let (net, sm) = configured();
    // Switch2's external port 1 (to Hca2), set by LID from the SM: the switch's SMA, at port
    // 0's LID, reports it (ibsim: such an SMP reaches the SMA through port 0).
    let mut pi = read_port_info(&net, &sm, SWITCH2, 1);
    pi.port_state = PortState::NoChange;
    pi.port_physical_state = PhysPortState::NoChange;
    pi.link_width_enabled = 0x03;
    let set = netutil::lid_smp(
        method::SET,
        LID_HCA1,
        LID_SWITCH2,
        attr_id::sm::PORT_INFO,
        1,
        port_info_data(&pi),
    );
    let got = sm.exchange(&net, set).into_iter().map(|(_, p)| p).collect();
    let traps = answered(got);
    assert_eq!(traps.len(), 1, "one trap from Switch2");
    assert_eq!(
        notice_of(&traps[0], LID_SWITCH2),
        trap_144(2, LID_SWITCH2, 0x0000_C048)
    );
    assert_eq!(
        read_port_info(&net, &sm, SWITCH2, 1).link_width_enabled,
        0x03
    );
    // By directed route the SMP comes into Switch2 by an external port, without a LID: the
    // width changes, and no trap (ibsim's `encode_trap144` refuses a port without a LID).
    let traps = answered(set_port_info(&net, &sm, SWITCH2, 1, 0, |pi| {
        pi.link_width_enabled = 0x1F;
    }));
    assert!(traps.is_empty());
    assert_eq!(
        read_port_info(&net, &sm, SWITCH2, 1).link_width_enabled,
        0x1F
    );
    assert_eq!(net.drops().total(), 0, "no trap made and dropped either");
}

#[test]
fn a_set_that_changes_no_enabled_rate_sends_no_trap() {
    let (net, sm) = configured();
    // Written back as read; 0 means "no change" for all three.
    for (path, port) in [(HCA2, 0), (SWITCH2, 1), (SWITCH2, 0)] {
        assert!(answered(set_port_info(&net, &sm, path, port, 0, |_| {})).is_empty());
        let traps = answered(set_port_info(&net, &sm, path, port, 0, |pi| {
            pi.link_width_enabled = 0;
            pi.link_speed_enabled = 0;
            pi.link_speed_ext_enabled = 0;
            pi.hoq_life = 7;
        }));
        assert!(traps.is_empty(), "{path:?} port {port}");
    }
    // The current value, spelled out, is no change either.
    let traps = answered(set_port_info(&net, &sm, HCA2, 0, 0, |pi| {
        pi.link_width_enabled = 0x02;
    }));
    assert!(traps.is_empty());
    assert_eq!(net.drops().total(), 0);
}

#[test]
fn no_trap_144_without_a_lid_and_an_sm_lid() {
    // Hca2 has a LID (the file's) but no SM LID; Hca3 has neither. A trap made anyway would
    // leave the port and be dropped by a switch without forwarding tables: counted.
    let mut fabric = example("net.2sw2path4hca");
    let hca2 = fabric.node_by_name("Hca2").unwrap();
    let hca2_port = fabric.port_id(hca2, 1).unwrap();
    fabric.set_lid(hca2_port, 4, 0).unwrap();
    let net = network(fabric);
    let _sm = attach(&net, "Hca1", 1);
    for node in ["Hca2", "Hca3"] {
        let host = attach(&net, node, 1);
        host.link.modify_capability_mask(cap_mask::IS_SM, 0);
        net.scheduler().run_due();
        assert_eq!(host.link.port_info().capability_mask, 0x0050_C04A);
        assert_eq!(net.drops().total(), 0, "{node}: no trap made");
    }
}

#[test]
fn a_capability_mask_change_sends_trap_144() {
    let (net, sm) = configured();
    // A host at Hca2 opens its port as SM: IsSM set, trap 144 with the new mask.
    let client = attach(&net, "Hca2", 1);
    assert_eq!(
        client.link.modify_capability_mask(cap_mask::IS_SM, 0),
        0x0050_C04A
    );
    net.scheduler().run_due();
    let got: Vec<Packet> = sm.rec.take().into_iter().map(|(_, p)| p).collect();
    assert_eq!(got.len(), 1);
    assert_eq!(
        notice_of(&got[0], LID_HCA2),
        trap_144(1, LID_HCA2, 0x0050_C04A)
    );
    // Setting it again changes nothing and sends nothing.
    client.link.modify_capability_mask(cap_mask::IS_SM, 0);
    net.scheduler().run_due();
    assert!(sm.rec.take().is_empty());
    // The host goes away: IsSM cleared, trap 144 with the old mask.
    drop(client);
    net.scheduler().run_due();
    let got: Vec<Packet> = sm.rec.take().into_iter().map(|(_, p)| p).collect();
    assert_eq!(got.len(), 1);
    assert_eq!(
        notice_of(&got[0], LID_HCA2),
        trap_144(1, LID_HCA2, 0x0050_C048)
    );
    // The SM's own port: the trap is turned round to its own host (LID 1 to LID 1).
    sm.link.modify_capability_mask(cap_mask::IS_SM, 0);
    net.scheduler().run_due();
    let got = sm.rec.take();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].0, 1, "delivered on port 1");
    assert_eq!(
        notice_of(&got[0].1, LID_HCA1),
        trap_144(1, LID_HCA1, 0x0050_C04A)
    );
    assert_eq!(net.drops().total(), 0);
}

const KEY: u64 = 0x0123_4567_89AB_CDEF;
const WRONG: u64 = 0x1122_3344_5566_7788;

/// Gives the port along `path` (PortInfo `port`) M_Key `KEY` with protect bits 2.
fn protect(net: &Network, sm: &Device, path: &[u8], port: u32) {
    assert!(
        answered(set_port_info(net, sm, path, port, 0, |pi| {
            pi.m_key = KEY;
            pi.m_key_protect_bits = 2;
        }))
        .is_empty()
    );
}

/// M_KeyViolations of PortInfo `port` along `path`, read with the right key.
fn violations(net: &Network, sm: &Device, path: &[u8], port: u32) -> u16 {
    read_port_info(net, sm, path, port).m_key_violations
}

#[test]
fn a_lid_routed_smp_with_a_bad_m_key_sends_trap_256() {
    let (net, sm) = configured();
    protect(&net, &sm, HCA2, 0);
    // A LID-routed PortInfo Get from LID 1 with the wrong key: dropped, trap 256 instead.
    let mut p = netutil::lid_smp(
        method::GET,
        LID_HCA1,
        LID_HCA2,
        attr_id::sm::PORT_INFO,
        0x0000_0001,
        [0; 64],
    );
    p.mad[24..32].copy_from_slice(&WRONG.to_be_bytes());
    let got: Vec<Packet> = sm.exchange(&net, p).into_iter().map(|(_, p)| p).collect();
    let (resp, traps) = split(got);
    assert!(resp.is_empty(), "no answer to a bad M_Key");
    assert_eq!(traps.len(), 1);
    let mut expected = [0u8; 64];
    expected[..34].copy_from_slice(&[
        0x82, // IsGeneric, Type 2 (Security)
        0, 0, 1, // ProducerType: CA
        0x01, 0x00, // TrapNumber 256
        0, 4, // IssuerLID: Hca2
        0, 0, // NoticeToggle / NoticeCount
        0, 0, // reserved
        0, 1, // LIDADDR: the requester, LID 1
        0, 0, // DRSLID (LID-routed)
        0x01, 0, // Method Get, reserved
        0x00, 0x15, // AttributeID PortInfo
        0, 0, 0, 1, // AttributeModifier
        0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, // the M_Key it carried
        0,    // reserved
        0,    // DRNotice 0
    ]);
    assert_eq!(notice_of(&traps[0], LID_HCA2), expected);
    assert_eq!(violations(&net, &sm, HCA2, 0), 1);
}

#[test]
fn a_directed_route_smp_with_a_bad_m_key_sends_trap_256_with_its_route() {
    let (net, sm) = configured();
    protect(&net, &sm, SWITCH2, 0);
    // A directed-route Set along [1, 3] with the wrong key: 2 hops, entering Switch1 by
    // port 1 and Switch2 by port 3, so ReturnPath is [0, 1, 3, ...].
    let got = set_port_info(&net, &sm, SWITCH2, 0, WRONG, |pi| pi.hoq_life = 3);
    let (resp, traps) = split(got);
    assert!(resp.is_empty(), "no answer to a bad M_Key");
    assert_eq!(traps.len(), 1);
    let mut expected = [0u8; 64];
    expected[..36].copy_from_slice(&[
        0x82, // IsGeneric, Type 2 (Security)
        0, 0, 2, // ProducerType: switch
        0x01, 0x00, // TrapNumber 256
        0, 3, // IssuerLID: Switch2
        0, 0, // NoticeToggle / NoticeCount
        0, 0, // reserved
        0xFF, 0xFF, // LIDADDR: the SMP's SLID, permissive
        0xFF, 0xFF, // DRSLID
        0x02, 0, // Method Set, reserved
        0x00, 0x15, // AttributeID PortInfo
        0, 0, 0, 0, // AttributeModifier
        0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, // the M_Key it carried
        0,    // reserved
        0x82, // DRNotice, not truncated, DRHopCount 2
        0, 1, // the first HopCount bytes of ReturnPath (as the kernel's SMAs copy them)
    ]);
    assert_eq!(notice_of(&traps[0], LID_SWITCH2), expected);
    assert_eq!(violations(&net, &sm, SWITCH2, 0), 1);
    // The right key is answered and sends nothing.
    assert!(
        answered(set_port_info(&net, &sm, SWITCH2, 0, KEY, |pi| pi
            .hoq_life =
            3))
        .is_empty()
    );
}

#[test]
fn with_m_key_0_any_key_passes_and_nothing_traps() {
    // OpenSM's default: M_Key 0, protect bits 0. No check can fail, no trap 256.
    let (net, sm) = configured();
    let mut p = netutil::lid_smp(
        method::GET,
        LID_HCA1,
        LID_HCA2,
        attr_id::sm::PORT_INFO,
        0,
        [0; 64],
    );
    p.mad[24..32].copy_from_slice(&WRONG.to_be_bytes());
    let r = smp_of(&sm.request(&net, p));
    assert_eq!((r.method, r.status), (method::GET_RESP, status::SUCCESS));
    let traps = answered(set_port_info(&net, &sm, SWITCH2, 0, WRONG, |pi| {
        pi.hoq_life = 4;
    }));
    assert!(traps.is_empty());
    assert_eq!(violations(&net, &sm, SWITCH2, 0), 0);
    assert_eq!(net.drops().total(), 0);
}

/// A PMA ClassPortInfo Get from the SM's port (LID 1, QP1) to `dlid`, on SL 5, with P_Key
/// `pkey` and Q_Key `qkey`.
fn pma_get(dlid: u16, pkey: u16, qkey: u32) -> Packet {
    let mut p = pma(
        method::GET,
        LID_HCA1,
        dlid,
        attr_id::pma::CLASS_PORT_INFO,
        &[],
    );
    p.sl = 5;
    p.pkey = pkey;
    p.qkey = qkey;
    p
}

/// The PMA's answer to [`pma_get`] among `got`: checks that it is the only packet and a
/// successful GetResp.
fn pma_answered(got: &[(u8, Packet)]) {
    assert_eq!(got.len(), 1, "one answer, no trap");
    let h = MadHeaderRepr::parse(&Mad::new_checked(&got[0].1.mad[..]).unwrap()).unwrap();
    assert_eq!((h.method, h.status), (method::GET_RESP, status::SUCCESS));
}

/// Trap 257 or 258 as the kernel's `qib_bad_pqkey` lays it out, for a packet from LID 1 QP1
/// on SL 5 to `lid2` QP1, without a GRH.
fn trap_257_258(producer: u8, trap: u16, issuer: u16, lid2: u16, key: u32) -> [u8; 64] {
    let [t0, t1] = trap.to_be_bytes();
    let [ih, il] = issuer.to_be_bytes();
    let [l2h, l2l] = lid2.to_be_bytes();
    let [k0, k1, k2, k3] = key.to_be_bytes();
    let mut n = [0u8; 64];
    n[..28].copy_from_slice(&[
        0x82, // IsGeneric, Type 2 (Security)
        0, 0, producer, // ProducerType
        t0, t1, // TrapNumber
        ih, il, // IssuerLID
        0, 0, // NoticeToggle / NoticeCount
        0, 0, // reserved
        0, 1, // LIDADDR1: the sender, LID 1
        l2h, l2l, // LIDADDR2: the receiver
        k0, k1, k2, k3, // Key
        0x50, 0, 0, 1, // SL 5, QP1 1
        0, 0, 0, 1, // QP2 1
    ]);
    n
}

#[test]
fn a_gmp_whose_p_key_is_not_in_the_port_table_sends_trap_257() {
    let (net, sm) = configured();
    // Hca2's table holds the default P_Key 0xFFFF only: 0x8001 (another partition) fails.
    let got: Vec<Packet> = sm
        .exchange(&net, pma_get(LID_HCA2, 0x8001, 0x8001_0000))
        .into_iter()
        .map(|(_, p)| p)
        .collect();
    let (resp, traps) = split(got);
    assert!(resp.is_empty(), "the PMA does not answer it");
    assert_eq!(traps.len(), 1);
    assert_eq!(
        notice_of(&traps[0], LID_HCA2),
        trap_257_258(1, 257, LID_HCA2, LID_HCA2, 0x0000_8001)
    );
    assert_eq!(read_port_info(&net, &sm, HCA2, 0).p_key_violations, 1);
    assert_eq!(read_port_info(&net, &sm, HCA2, 0).q_key_violations, 0);
    assert_eq!(net.drops().get(DropReason::BadPkey), 1);

    // At a switch the P_Key table of port 0 (its end port) decides, and the switch reports.
    let got: Vec<Packet> = sm
        .exchange(&net, pma_get(LID_SWITCH2, 0x0000, 0x8001_0000))
        .into_iter()
        .map(|(_, p)| p)
        .collect();
    let (resp, traps) = split(got);
    assert!(resp.is_empty());
    assert_eq!(traps.len(), 1);
    assert_eq!(
        notice_of(&traps[0], LID_SWITCH2),
        trap_257_258(2, 257, LID_SWITCH2, LID_SWITCH2, 0)
    );
    assert_eq!(read_port_info(&net, &sm, SWITCH2, 0).p_key_violations, 1);
    assert_eq!(net.drops().get(DropReason::BadPkey), 2);
}

#[test]
fn a_gmp_the_port_table_accepts_is_answered_without_a_trap() {
    let (net, sm) = configured();
    // The full and the limited member of the default partition both match 0xFFFF.
    for pkey in [0xFFFF, 0x7FFF] {
        pma_answered(&sm.exchange(&net, pma_get(LID_HCA2, pkey, 0x8001_0000)));
        pma_answered(&sm.exchange(&net, pma_get(LID_SWITCH2, pkey, 0x8001_0000)));
    }
    assert_eq!(read_port_info(&net, &sm, HCA2, 0).p_key_violations, 0);
    assert_eq!(net.drops().total(), 0);

    // The SM makes Hca2 a limited member of partition 0x0001 and nothing else: a limited
    // member may not talk to a limited one, a full member may; 0xFFFF is gone.
    let mut t = [0u16; 32];
    t[0] = 0x0001;
    let mut data = [0u8; 64];
    PkeyTableRepr { pkeys: t }.emit(&mut PkeyTable::new_checked(&mut data[..]).unwrap());
    assert_eq!(
        dr_set(&net, &sm, HCA2, attr_id::sm::PKEY_TABLE, 0, data).0,
        status::SUCCESS
    );
    pma_answered(&sm.exchange(&net, pma_get(LID_HCA2, 0x8001, 0x8001_0000)));
    for pkey in [0x0001, 0xFFFF] {
        let got: Vec<Packet> = sm
            .exchange(&net, pma_get(LID_HCA2, pkey, 0x8001_0000))
            .into_iter()
            .map(|(_, p)| p)
            .collect();
        let (resp, traps) = split(got);
        assert!(resp.is_empty(), "P_Key {pkey:#x}");
        assert_eq!(
            notice_of(&traps[0], LID_HCA2),
            trap_257_258(1, 257, LID_HCA2, LID_HCA2, u32::from(pkey))
        );
    }
    assert_eq!(read_port_info(&net, &sm, HCA2, 0).p_key_violations, 2);
}

#[test]
fn a_gmp_to_qp1_with_a_wrong_q_key_sends_trap_258() {
    let (net, sm) = configured();
    for (dlid, path, producer) in [(LID_HCA2, HCA2, 1), (LID_SWITCH2, SWITCH2, 2)] {
        let got: Vec<Packet> = sm
            .exchange(&net, pma_get(dlid, 0xFFFF, 0x8001_0001))
            .into_iter()
            .map(|(_, p)| p)
            .collect();
        let (resp, traps) = split(got);
        assert!(resp.is_empty(), "LID {dlid}: no answer");
        assert_eq!(traps.len(), 1);
        assert_eq!(
            notice_of(&traps[0], dlid),
            trap_257_258(producer, 258, dlid, dlid, 0x8001_0001)
        );
        let pi = read_port_info(&net, &sm, path, 0);
        assert_eq!((pi.p_key_violations, pi.q_key_violations), (0, 1));
    }
    assert_eq!(net.drops().get(DropReason::BadQkey), 2);
    // A bad P_Key and a bad Q_Key: the P_Key is checked first, one trap 257.
    let got: Vec<Packet> = sm
        .exchange(&net, pma_get(LID_HCA2, 0x8001, 0))
        .into_iter()
        .map(|(_, p)| p)
        .collect();
    let (_, traps) = split(got);
    assert_eq!(traps.len(), 1);
    assert_eq!(
        notice_of(&traps[0], LID_HCA2),
        trap_257_258(1, 257, LID_HCA2, LID_HCA2, 0x0000_8001)
    );
    let pi = read_port_info(&net, &sm, HCA2, 0);
    assert_eq!((pi.p_key_violations, pi.q_key_violations), (1, 1));
}

#[test]
fn a_bad_key_trap_carries_the_gids_of_the_grh() {
    let (net, sm) = configured();
    let mut p = pma_get(LID_HCA2, 0xFFFF, 0x8001_0002);
    let mut sgid = [0u8; 16];
    sgid[..2].copy_from_slice(&[0xFE, 0x80]);
    sgid[8..].copy_from_slice(&0x0000_0000_0010_0001u64.to_be_bytes());
    let mut dgid = sgid;
    dgid[15] = 0x05;
    p.grh = Some(Box::new(PacketGrh {
        sgid,
        dgid,
        traffic_class: 0,
        flow_label: 0,
        hop_limit: 1,
    }));
    let got: Vec<Packet> = sm.exchange(&net, p).into_iter().map(|(_, p)| p).collect();
    let (resp, traps) = split(got);
    assert!(resp.is_empty());
    let mut expected = trap_257_258(1, 258, LID_HCA2, LID_HCA2, 0x8001_0002);
    expected[28..44].copy_from_slice(&sgid);
    expected[44..60].copy_from_slice(&dgid);
    assert_eq!(notice_of(&traps[0], LID_HCA2), expected);
}

#[test]
fn no_bad_key_trap_without_an_sm_lid() {
    let (net, sm) = configured();
    // Hca2 forgets its SM: the violation is still counted and the GMP dropped, but no trap
    // is made (it would have been counted as a drop, or reached the SM).
    net.with_fabric_mut(|f| {
        let hca2 = f.node_by_name("Hca2").unwrap();
        let port = f.port_id(hca2, 1).unwrap();
        f.port_mut(port).state.sm_lid = 0;
    });
    assert!(
        sm.exchange(&net, pma_get(LID_HCA2, 0x8001, 0x8001_0000))
            .is_empty()
    );
    assert!(
        sm.exchange(&net, pma_get(LID_HCA2, 0xFFFF, 0x0000_0000))
            .is_empty()
    );
    let drops = net.drops();
    assert_eq!(
        (
            drops.get(DropReason::BadPkey),
            drops.get(DropReason::BadQkey),
            drops.total()
        ),
        (1, 1, 2)
    );
    let pi = read_port_info(&net, &sm, HCA2, 0);
    assert_eq!((pi.p_key_violations, pi.q_key_violations), (1, 1));
}

#[test]
fn writing_0_resets_the_key_violation_counters() {
    let (net, sm) = configured();
    sm.exchange(&net, pma_get(LID_HCA2, 0x8001, 0x8001_0000));
    sm.exchange(&net, pma_get(LID_HCA2, 0xFFFF, 0x8001_0003));
    let pi = read_port_info(&net, &sm, HCA2, 0);
    assert_eq!((pi.p_key_violations, pi.q_key_violations), (1, 1));
    assert!(
        answered(set_port_info(&net, &sm, HCA2, 0, 0, |pi| {
            pi.p_key_violations = 0;
            pi.q_key_violations = 0;
        }))
        .is_empty()
    );
    let pi = read_port_info(&net, &sm, HCA2, 0);
    assert_eq!((pi.p_key_violations, pi.q_key_violations), (0, 0));
}

//! Every field accessor against libibmad's own field model: `fields.c` names each field by a
//! bit offset and width (`BITSOFFS(o, w)` for fields inside a big-endian 32-bit word, plain
//! offsets for whole words and 64-bit fields) and `mad_get_field`/`mad_set_field` read and
//! write it through that word. `lib_get`/`lib_set` below do the same, independently of our
//! `field.rs`, and the offsets in each `chk!` are `fields.c`'s (rdma-core 691953d8; header and
//! RMPP rows give `BITSOFFS` already worked out), never taken from our code. On random buffers
//! our getter must agree with `lib_get`, and our setter must change exactly the bits `lib_set`
//! changes.
#![allow(clippy::cast_possible_truncation, clippy::cast_lossless)]
use mad_wire::attr::class_port_info::ClassPortInfo;
use mad_wire::attr::node_info::NodeInfo;
use mad_wire::attr::notice::Notice;
use mad_wire::attr::port_counters::PortCounters;
use mad_wire::attr::port_counters_ext::PortCountersExt;
use mad_wire::attr::port_info::{PhysPortState, PortInfo, PortState};
use mad_wire::attr::sm_info::{SmInfo, SmState};
use mad_wire::attr::switch_info::SwitchInfo;
use mad_wire::header::Mad;
use mad_wire::rmpp::Rmpp;
use mad_wire::sa::SaMad;
use mad_wire::smp::{Direction, Smp};
use mad_wire::vendor::VendorMad;

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn buf(&mut self) -> [u8; 256] {
        let mut b = [0u8; 256];
        for x in &mut b {
            *x = self.next() as u8;
        }
        b
    }
}
const fn bo(o: usize, w: usize) -> usize {
    (o & !31) | (32 - (o & 31) - w)
}
fn mask(w: usize) -> u64 {
    if w == 64 { u64::MAX } else { (1u64 << w) - 1 }
}
fn lib_get(b: &[u8], o: usize, w: usize) -> u64 {
    if w == 64 {
        assert_eq!(o % 8, 0);
        return u64::from_be_bytes(b[o / 8..o / 8 + 8].try_into().unwrap());
    }
    assert!(o % 32 + w <= 32, "field crosses a word");
    let wi = o / 32 * 4;
    let word = u32::from_be_bytes(b[wi..wi + 4].try_into().unwrap()) as u64;
    (word >> (o % 32)) & mask(w)
}
fn lib_set(b: &mut [u8], o: usize, w: usize, v: u64) {
    if w == 64 {
        b[o / 8..o / 8 + 8].copy_from_slice(&v.to_be_bytes());
        return;
    }
    let wi = o / 32 * 4;
    let mut word = u32::from_be_bytes(b[wi..wi + 4].try_into().unwrap()) as u64;
    word &= !(mask(w) << (o % 32));
    word |= (v & mask(w)) << (o % 32);
    b[wi..wi + 4].copy_from_slice(&(word as u32).to_be_bytes());
}

/// base: byte offset of the view inside the 256-byte scratch (libibmad offsets are relative to it).
macro_rules! chk {
    ($rng:ident, $view:ident, $base:expr, $name:literal, $o:expr, $w:expr, |$g:ident| $get:expr, |$s:ident, $v:ident| $set:expr) => {{
        let (o, w): (usize, usize) = ($o, $w);
        for _ in 0..200 {
            let b = $rng.buf();
            let $g = $view::new_checked(&b[$base..]).unwrap();
            let ours: u64 = $get;
            assert_eq!(ours, lib_get(&b[$base..], o, w), "get {}", $name);
            let mut x = b;
            let mut y = b;
            let $v: u64 = $rng.next() & mask(w);
            {
                let mut $s = $view::new_checked(&mut x[$base..]).unwrap();
                $set;
            }
            lib_set(&mut y[$base..], o, w, $v);
            assert_eq!(x[..], y[..], "set {}", $name);
        }
    }};
}

#[test]
#[rustfmt::skip]
fn port_info_matches_libibmad() {
    let mut r = Rng(0x1234_5678_9abc_def1);
    chk!(r, PortInfo, 0, "Mkey", 0, 64, |g| g.m_key(), |s, v| s.set_m_key(v));
    chk!(r, PortInfo, 0, "GidPrefix", 64, 64, |g| g.gid_prefix(), |s, v| s.set_gid_prefix(v));
    chk!(r, PortInfo, 0, "Lid", bo(128, 16), 16, |g| g.lid() as u64, |s, v| s.set_lid(v as u16));
    chk!(r, PortInfo, 0, "SMLid", bo(144, 16), 16, |g| g.master_sm_lid() as u64, |s, v| s.set_master_sm_lid(v as u16));
    chk!(r, PortInfo, 0, "CapMask", 160, 32, |g| g.capability_mask() as u64, |s, v| s.set_capability_mask(v as u32));
    chk!(r, PortInfo, 0, "DiagCode", bo(192, 16), 16, |g| g.diag_code() as u64, |s, v| s.set_diag_code(v as u16));
    chk!(r, PortInfo, 0, "MkeyLease", bo(208, 16), 16, |g| g.m_key_lease_period() as u64, |s, v| s.set_m_key_lease_period(v as u16));
    chk!(r, PortInfo, 0, "LocalPort", bo(224, 8), 8, |g| g.local_port_num() as u64, |s, v| s.set_local_port_num(v as u8));
    chk!(r, PortInfo, 0, "LWE", bo(232, 8), 8, |g| g.link_width_enabled() as u64, |s, v| s.set_link_width_enabled(v as u8));
    chk!(r, PortInfo, 0, "LWS", bo(240, 8), 8, |g| g.link_width_supported() as u64, |s, v| s.set_link_width_supported(v as u8));
    chk!(r, PortInfo, 0, "LWA", bo(248, 8), 8, |g| g.link_width_active() as u64, |s, v| s.set_link_width_active(v as u8));
    chk!(r, PortInfo, 0, "LSS", bo(256, 4), 4, |g| g.link_speed_supported() as u64, |s, v| s.set_link_speed_supported(v as u8));
    chk!(r, PortInfo, 0, "LinkState", bo(260, 4), 4, |g| u8::from(g.port_state()) as u64, |s, v| s.set_port_state(PortState::from(v as u8)));
    chk!(r, PortInfo, 0, "Phys", bo(264, 4), 4, |g| u8::from(g.port_physical_state()) as u64, |s, v| s.set_port_physical_state(PhysPortState::from(v as u8)));
    chk!(r, PortInfo, 0, "LDDS", bo(268, 4), 4, |g| g.link_down_default_state() as u64, |s, v| s.set_link_down_default_state(v as u8));
    chk!(r, PortInfo, 0, "Protect", bo(272, 2), 2, |g| g.m_key_protect_bits() as u64, |s, v| s.set_m_key_protect_bits(v as u8));
    chk!(r, PortInfo, 0, "LMC", bo(277, 3), 3, |g| g.lmc() as u64, |s, v| s.set_lmc(v as u8));
    chk!(r, PortInfo, 0, "LSA", bo(280, 4), 4, |g| g.link_speed_active() as u64, |s, v| s.set_link_speed_active(v as u8));
    chk!(r, PortInfo, 0, "LSE", bo(284, 4), 4, |g| g.link_speed_enabled() as u64, |s, v| s.set_link_speed_enabled(v as u8));
    chk!(r, PortInfo, 0, "NeighborMTU", bo(288, 4), 4, |g| g.neighbor_mtu() as u64, |s, v| s.set_neighbor_mtu(v as u8));
    chk!(r, PortInfo, 0, "SMSL", bo(292, 4), 4, |g| g.master_sm_sl() as u64, |s, v| s.set_master_sm_sl(v as u8));
    chk!(r, PortInfo, 0, "VLCap", bo(296, 4), 4, |g| g.vl_cap() as u64, |s, v| s.set_vl_cap(v as u8));
    chk!(r, PortInfo, 0, "InitType", bo(300, 4), 4, |g| g.init_type() as u64, |s, v| s.set_init_type(v as u8));
    chk!(r, PortInfo, 0, "VLHighLimit", bo(304, 8), 8, |g| g.vl_high_limit() as u64, |s, v| s.set_vl_high_limit(v as u8));
    chk!(r, PortInfo, 0, "VLArbHigh", bo(312, 8), 8, |g| g.vl_arbitration_high_cap() as u64, |s, v| s.set_vl_arbitration_high_cap(v as u8));
    chk!(r, PortInfo, 0, "VLArbLow", bo(320, 8), 8, |g| g.vl_arbitration_low_cap() as u64, |s, v| s.set_vl_arbitration_low_cap(v as u8));
    chk!(r, PortInfo, 0, "InitReply", bo(328, 4), 4, |g| g.init_type_reply() as u64, |s, v| s.set_init_type_reply(v as u8));
    chk!(r, PortInfo, 0, "MtuCap", bo(332, 4), 4, |g| g.mtu_cap() as u64, |s, v| s.set_mtu_cap(v as u8));
    chk!(r, PortInfo, 0, "VLStall", bo(336, 3), 3, |g| g.vl_stall_count() as u64, |s, v| s.set_vl_stall_count(v as u8));
    chk!(r, PortInfo, 0, "HoqLife", bo(339, 5), 5, |g| g.hoq_life() as u64, |s, v| s.set_hoq_life(v as u8));
    chk!(r, PortInfo, 0, "OperVLs", bo(344, 4), 4, |g| g.operational_vls() as u64, |s, v| s.set_operational_vls(v as u8));
    chk!(r, PortInfo, 0, "PEI", bo(348, 1), 1, |g| g.partition_enforcement_inbound() as u64, |s, v| s.set_partition_enforcement_inbound(v != 0));
    chk!(r, PortInfo, 0, "PEO", bo(349, 1), 1, |g| g.partition_enforcement_outbound() as u64, |s, v| s.set_partition_enforcement_outbound(v != 0));
    chk!(r, PortInfo, 0, "FRI", bo(350, 1), 1, |g| g.filter_raw_inbound() as u64, |s, v| s.set_filter_raw_inbound(v != 0));
    chk!(r, PortInfo, 0, "FRO", bo(351, 1), 1, |g| g.filter_raw_outbound() as u64, |s, v| s.set_filter_raw_outbound(v != 0));
    chk!(r, PortInfo, 0, "MkeyViol", bo(352, 16), 16, |g| g.m_key_violations() as u64, |s, v| s.set_m_key_violations(v as u16));
    chk!(r, PortInfo, 0, "PkeyViol", bo(368, 16), 16, |g| g.p_key_violations() as u64, |s, v| s.set_p_key_violations(v as u16));
    chk!(r, PortInfo, 0, "QkeyViol", bo(384, 16), 16, |g| g.q_key_violations() as u64, |s, v| s.set_q_key_violations(v as u16));
    chk!(r, PortInfo, 0, "GuidCap", bo(400, 8), 8, |g| g.guid_cap() as u64, |s, v| s.set_guid_cap(v as u8));
    chk!(r, PortInfo, 0, "ClientRereg", bo(408, 1), 1, |g| g.client_reregister() as u64, |s, v| s.set_client_reregister(v != 0));
    chk!(r, PortInfo, 0, "McastSupp", bo(409, 2), 2, |g| g.multicast_pkey_trap_suppression() as u64, |s, v| s.set_multicast_pkey_trap_suppression(v as u8));
    chk!(r, PortInfo, 0, "SubnetTimeout", bo(411, 5), 5, |g| g.subnet_timeout() as u64, |s, v| s.set_subnet_timeout(v as u8));
    chk!(r, PortInfo, 0, "RespTimeVal", bo(419, 5), 5, |g| g.resp_time_value() as u64, |s, v| s.set_resp_time_value(v as u8));
    chk!(r, PortInfo, 0, "LocalPhysErr", bo(424, 4), 4, |g| g.local_phy_errors() as u64, |s, v| s.set_local_phy_errors(v as u8));
    chk!(r, PortInfo, 0, "OverrunErr", bo(428, 4), 4, |g| g.overrun_errors() as u64, |s, v| s.set_overrun_errors(v as u8));
    chk!(r, PortInfo, 0, "MaxCreditHint", bo(432, 16), 16, |g| g.max_credit_hint() as u64, |s, v| s.set_max_credit_hint(v as u16));
    chk!(r, PortInfo, 0, "RoundTrip", bo(456, 24), 24, |g| g.link_round_trip_latency() as u64, |s, v| s.set_link_round_trip_latency(v as u32));
    chk!(r, PortInfo, 0, "CapMask2", bo(480, 16), 16, |g| g.capability_mask2() as u64, |s, v| s.set_capability_mask2(v as u16));
    chk!(r, PortInfo, 0, "LSEA", bo(496, 4), 4, |g| g.link_speed_ext_active() as u64, |s, v| s.set_link_speed_ext_active(v as u8));
    chk!(r, PortInfo, 0, "LSES", bo(500, 4), 4, |g| g.link_speed_ext_supported() as u64, |s, v| s.set_link_speed_ext_supported(v as u8));
    chk!(r, PortInfo, 0, "LSEE", bo(507, 5), 5, |g| g.link_speed_ext_enabled() as u64, |s, v| s.set_link_speed_ext_enabled(v as u8));
    chk!(r, PortInfo, 0, "LinkSpeedExtActive2", bo(449, 2), 2, |g| g.link_speed_ext_active2() as u64, |s, v| s.set_link_speed_ext_active2(v as u8));
    chk!(r, PortInfo, 0, "LinkSpeedExtSupported2", bo(451, 2), 2, |g| g.link_speed_ext_supported2() as u64, |s, v| s.set_link_speed_ext_supported2(v as u8));
    chk!(r, PortInfo, 0, "LinkSpeedExtEnabled2", bo(453, 3), 3, |g| g.link_speed_ext_enabled2() as u64, |s, v| s.set_link_speed_ext_enabled2(v as u8));
}

#[test]
#[rustfmt::skip]
fn node_switch_sm_info_match_libibmad() {
    let mut r = Rng(0x9e37_79b9_7f4a_7c15);
    chk!(r, NodeInfo, 0, "BaseVers", bo(0, 8), 8, |g| g.base_version() as u64, |s, v| s.set_base_version(v as u8));
    chk!(r, NodeInfo, 0, "ClassVers", bo(8, 8), 8, |g| g.class_version() as u64, |s, v| s.set_class_version(v as u8));
    chk!(r, NodeInfo, 0, "NodeType", bo(16, 8), 8, |g| u8::from(g.node_type()) as u64, |s, v| s.set_node_type((v as u8).into()));
    chk!(r, NodeInfo, 0, "NumPorts", bo(24, 8), 8, |g| g.num_ports() as u64, |s, v| s.set_num_ports(v as u8));
    chk!(r, NodeInfo, 0, "SystemGuid", 32, 64, |g| g.system_image_guid(), |s, v| s.set_system_image_guid(v));
    chk!(r, NodeInfo, 0, "Guid", 96, 64, |g| g.node_guid(), |s, v| s.set_node_guid(v));
    chk!(r, NodeInfo, 0, "PortGuid", 160, 64, |g| g.port_guid(), |s, v| s.set_port_guid(v));
    chk!(r, NodeInfo, 0, "PartCap", bo(224, 16), 16, |g| g.partition_cap() as u64, |s, v| s.set_partition_cap(v as u16));
    chk!(r, NodeInfo, 0, "DevId", bo(240, 16), 16, |g| g.device_id() as u64, |s, v| s.set_device_id(v as u16));
    chk!(r, NodeInfo, 0, "Revision", 256, 32, |g| g.revision() as u64, |s, v| s.set_revision(v as u32));
    chk!(r, NodeInfo, 0, "LocalPort", bo(288, 8), 8, |g| g.local_port_num() as u64, |s, v| s.set_local_port_num(v as u8));
    chk!(r, NodeInfo, 0, "VendorId", bo(296, 24), 24, |g| g.vendor_id() as u64, |s, v| s.set_vendor_id(v as u32));

    chk!(r, SwitchInfo, 0, "LinearFdbCap", bo(0, 16), 16, |g| g.linear_fdb_cap() as u64, |s, v| s.set_linear_fdb_cap(v as u16));
    chk!(r, SwitchInfo, 0, "RandomFdbCap", bo(16, 16), 16, |g| g.random_fdb_cap() as u64, |s, v| s.set_random_fdb_cap(v as u16));
    chk!(r, SwitchInfo, 0, "McastFdbCap", bo(32, 16), 16, |g| g.multicast_fdb_cap() as u64, |s, v| s.set_multicast_fdb_cap(v as u16));
    chk!(r, SwitchInfo, 0, "LinearFdbTop", bo(48, 16), 16, |g| g.linear_fdb_top() as u64, |s, v| s.set_linear_fdb_top(v as u16));
    chk!(r, SwitchInfo, 0, "DefPort", bo(64, 8), 8, |g| g.default_port() as u64, |s, v| s.set_default_port(v as u8));
    chk!(r, SwitchInfo, 0, "DefMcastPrim", bo(72, 8), 8, |g| g.default_mcast_primary_port() as u64, |s, v| s.set_default_mcast_primary_port(v as u8));
    chk!(r, SwitchInfo, 0, "DefMcastNotPrim", bo(80, 8), 8, |g| g.default_mcast_not_primary_port() as u64, |s, v| s.set_default_mcast_not_primary_port(v as u8));
    chk!(r, SwitchInfo, 0, "LifeTime", bo(88, 5), 5, |g| g.life_time_value() as u64, |s, v| s.set_life_time_value(v as u8));
    chk!(r, SwitchInfo, 0, "StateChange", bo(93, 1), 1, |g| g.port_state_change() as u64, |s, v| s.set_port_state_change(v != 0));
    chk!(r, SwitchInfo, 0, "OptSL2VL", bo(94, 2), 2, |g| g.optimized_sl_to_vl_mapping_programming() as u64, |s, v| s.set_optimized_sl_to_vl_mapping_programming(v as u8));
    chk!(r, SwitchInfo, 0, "LidsPerPort", bo(96, 16), 16, |g| g.lids_per_port() as u64, |s, v| s.set_lids_per_port(v as u16));
    chk!(r, SwitchInfo, 0, "PartEnfCap", bo(112, 16), 16, |g| g.partition_enforcement_cap() as u64, |s, v| s.set_partition_enforcement_cap(v as u16));
    chk!(r, SwitchInfo, 0, "InbPE", bo(128, 1), 1, |g| g.inbound_enforcement_cap() as u64, |s, v| s.set_inbound_enforcement_cap(v != 0));
    chk!(r, SwitchInfo, 0, "OutPE", bo(129, 1), 1, |g| g.outbound_enforcement_cap() as u64, |s, v| s.set_outbound_enforcement_cap(v != 0));
    chk!(r, SwitchInfo, 0, "FRI", bo(130, 1), 1, |g| g.filter_raw_inbound_cap() as u64, |s, v| s.set_filter_raw_inbound_cap(v != 0));
    chk!(r, SwitchInfo, 0, "FRO", bo(131, 1), 1, |g| g.filter_raw_outbound_cap() as u64, |s, v| s.set_filter_raw_outbound_cap(v != 0));
    chk!(r, SwitchInfo, 0, "EP0", bo(132, 1), 1, |g| g.enhanced_port0() as u64, |s, v| s.set_enhanced_port0(v != 0));
    chk!(r, SwitchInfo, 0, "MFDBTop", bo(144, 16), 16, |g| g.multicast_fdb_top() as u64, |s, v| s.set_multicast_fdb_top(v as u16));

    chk!(r, SmInfo, 0, "Guid", 0, 64, |g| g.guid(), |s, v| s.set_guid(v));
    chk!(r, SmInfo, 0, "Key", 64, 64, |g| g.sm_key(), |s, v| s.set_sm_key(v));
    chk!(r, SmInfo, 0, "Activity", 128, 32, |g| g.act_count() as u64, |s, v| s.set_act_count(v as u32));
    chk!(r, SmInfo, 0, "Priority", bo(160, 4), 4, |g| g.priority() as u64, |s, v| s.set_priority(v as u8));
    chk!(r, SmInfo, 0, "State", bo(164, 4), 4, |g| u8::from(g.sm_state()) as u64, |s, v| s.set_sm_state(SmState::from(v as u8)));
}

#[test]
#[rustfmt::skip]
fn notice_counters_cpi_match_libibmad() {
    let mut r = Rng(0xdead_beef_cafe_f00d);
    chk!(r, Notice, 0, "IsGeneric", bo(0, 1), 1, |g| g.is_generic() as u64, |s, v| { let t = s.notice_type(); s.set_generic_and_type(v != 0, t); });
    chk!(r, Notice, 0, "Type", bo(1, 7), 7, |g| g.notice_type() as u64, |s, v| { let gg = s.is_generic(); s.set_generic_and_type(gg, v as u8); });
    chk!(r, Notice, 0, "Producer", bo(8, 24), 24, |g| g.producer_type_or_vendor_id() as u64, |s, v| s.set_producer_type_or_vendor_id(v as u32));
    chk!(r, Notice, 0, "TrapNum", bo(32, 16), 16, |g| g.trap_number_or_device_id() as u64, |s, v| s.set_trap_number_or_device_id(v as u16));
    chk!(r, Notice, 0, "IssuerLID", bo(48, 16), 16, |g| g.issuer_lid() as u64, |s, v| s.set_issuer_lid(v as u16));
    chk!(r, Notice, 0, "Toggle", bo(64, 1), 1, |g| g.notice_toggle() as u64, |s, v| { let c = s.notice_count(); s.set_toggle_and_count(v != 0, c); });
    chk!(r, Notice, 0, "Count", bo(65, 15), 15, |g| g.notice_count() as u64, |s, v| { let t = s.notice_toggle(); s.set_toggle_and_count(t, v as u16); });
    chk!(r, Notice, 0, "NoticeDataLID", bo(80, 16), 16, |g| g.details().ntc_128_lid() as u64, |s, v| s.details_mut().set_ntc_128_lid(v as u16));
    chk!(r, Notice, 0, "NoticeDataTrap144LID", bo(96, 16), 16, |g| g.details().ntc_144_lid() as u64, |s, v| s.details_mut().set_ntc_144_lid(v as u16));
    chk!(r, Notice, 0, "NoticeDataTrap144CapMask", bo(128, 32), 32, |g| g.details().ntc_144_capability_mask() as u64, |s, v| s.details_mut().set_ntc_144_capability_mask(v as u32));

    chk!(r, PortCounters, 0, "PortSelect", bo(8, 8), 8, |g| g.port_select() as u64, |s, v| s.set_port_select(v as u8));
    chk!(r, PortCounters, 0, "CounterSelect", bo(16, 16), 16, |g| g.counter_select() as u64, |s, v| s.set_counter_select(v as u16));
    chk!(r, PortCounters, 0, "SymErr", bo(32, 16), 16, |g| g.symbol_error_counter() as u64, |s, v| s.set_symbol_error_counter(v as u16));
    chk!(r, PortCounters, 0, "LinkErrRec", bo(48, 8), 8, |g| g.link_error_recovery_counter() as u64, |s, v| s.set_link_error_recovery_counter(v as u8));
    chk!(r, PortCounters, 0, "LinkDowned", bo(56, 8), 8, |g| g.link_downed_counter() as u64, |s, v| s.set_link_downed_counter(v as u8));
    chk!(r, PortCounters, 0, "RcvErr", bo(64, 16), 16, |g| g.port_rcv_errors() as u64, |s, v| s.set_port_rcv_errors(v as u16));
    chk!(r, PortCounters, 0, "RcvRemPhys", bo(80, 16), 16, |g| g.port_rcv_remote_physical_errors() as u64, |s, v| s.set_port_rcv_remote_physical_errors(v as u16));
    chk!(r, PortCounters, 0, "RcvSwRelay", bo(96, 16), 16, |g| g.port_rcv_switch_relay_errors() as u64, |s, v| s.set_port_rcv_switch_relay_errors(v as u16));
    chk!(r, PortCounters, 0, "XmitDiscards", bo(112, 16), 16, |g| g.port_xmit_discards() as u64, |s, v| s.set_port_xmit_discards(v as u16));
    chk!(r, PortCounters, 0, "XmitConstr", bo(128, 8), 8, |g| g.port_xmit_constraint_errors() as u64, |s, v| s.set_port_xmit_constraint_errors(v as u8));
    chk!(r, PortCounters, 0, "RcvConstr", bo(136, 8), 8, |g| g.port_rcv_constraint_errors() as u64, |s, v| s.set_port_rcv_constraint_errors(v as u8));
    chk!(r, PortCounters, 0, "CounterSelect2", bo(144, 8), 8, |g| g.counter_select2() as u64, |s, v| s.set_counter_select2(v as u8));
    chk!(r, PortCounters, 0, "LLI", bo(152, 4), 4, |g| g.local_link_integrity_errors() as u64, |s, v| s.set_local_link_integrity_errors(v as u8));
    chk!(r, PortCounters, 0, "EBO", bo(156, 4), 4, |g| g.excessive_buffer_overrun_errors() as u64, |s, v| s.set_excessive_buffer_overrun_errors(v as u8));
    chk!(r, PortCounters, 0, "VL15Dropped", bo(176, 16), 16, |g| g.vl15_dropped() as u64, |s, v| s.set_vl15_dropped(v as u16));
    chk!(r, PortCounters, 0, "XmitData", 192, 32, |g| g.port_xmit_data() as u64, |s, v| s.set_port_xmit_data(v as u32));
    chk!(r, PortCounters, 0, "RcvData", 224, 32, |g| g.port_rcv_data() as u64, |s, v| s.set_port_rcv_data(v as u32));
    chk!(r, PortCounters, 0, "XmitPkts", 256, 32, |g| g.port_xmit_packets() as u64, |s, v| s.set_port_xmit_packets(v as u32));
    chk!(r, PortCounters, 0, "RcvPkts", 288, 32, |g| g.port_rcv_packets() as u64, |s, v| s.set_port_rcv_packets(v as u32));
    chk!(r, PortCounters, 0, "XmitWait", 320, 32, |g| g.port_xmit_wait() as u64, |s, v| s.set_port_xmit_wait(v as u32));

    chk!(r, PortCountersExt, 0, "PortSelect", bo(8, 8), 8, |g| g.port_select() as u64, |s, v| s.set_port_select(v as u8));
    chk!(r, PortCountersExt, 0, "CounterSelect", bo(16, 16), 16, |g| g.counter_select() as u64, |s, v| s.set_counter_select(v as u16));
    chk!(r, PortCountersExt, 0, "CounterSelect2", 32, 32, |g| g.counter_select2() as u64, |s, v| s.set_counter_select2(v as u32));
    chk!(r, PortCountersExt, 0, "XmitData", 64, 64, |g| g.port_xmit_data(), |s, v| s.set_port_xmit_data(v));
    chk!(r, PortCountersExt, 0, "RcvData", 128, 64, |g| g.port_rcv_data(), |s, v| s.set_port_rcv_data(v));
    chk!(r, PortCountersExt, 0, "XmitPkts", 192, 64, |g| g.port_xmit_packets(), |s, v| s.set_port_xmit_packets(v));
    chk!(r, PortCountersExt, 0, "RcvPkts", 256, 64, |g| g.port_rcv_packets(), |s, v| s.set_port_rcv_packets(v));
    chk!(r, PortCountersExt, 0, "UXmit", 320, 64, |g| g.port_unicast_xmit_packets(), |s, v| s.set_port_unicast_xmit_packets(v));
    chk!(r, PortCountersExt, 0, "URcv", 384, 64, |g| g.port_unicast_rcv_packets(), |s, v| s.set_port_unicast_rcv_packets(v));
    chk!(r, PortCountersExt, 0, "MXmit", 448, 64, |g| g.port_multicast_xmit_packets(), |s, v| s.set_port_multicast_xmit_packets(v));
    chk!(r, PortCountersExt, 0, "MRcv", 512, 64, |g| g.port_multicast_rcv_packets(), |s, v| s.set_port_multicast_rcv_packets(v));

    chk!(r, ClassPortInfo, 0, "BaseVersion", bo(0, 8), 8, |g| g.base_version() as u64, |s, v| s.set_base_version(v as u8));
    chk!(r, ClassPortInfo, 0, "ClassVersion", bo(8, 8), 8, |g| g.class_version() as u64, |s, v| s.set_class_version(v as u8));
    chk!(r, ClassPortInfo, 0, "CapMask", bo(16, 16), 16, |g| g.capability_mask() as u64, |s, v| s.set_capability_mask(v as u16));
    chk!(r, ClassPortInfo, 0, "CapMask2", bo(32, 27), 27, |g| g.capability_mask2() as u64, |s, v| s.set_capability_mask2(v as u32));
    chk!(r, ClassPortInfo, 0, "RespTimeVal", bo(59, 5), 5, |g| g.resp_time_value() as u64, |s, v| s.set_resp_time_value(v as u8));
    chk!(r, ClassPortInfo, 0, "RedirectTC", bo(192, 8), 8, |g| g.redirect_tc() as u64, |s, v| { let (sl, fl) = (s.redirect_sl(), s.redirect_fl()); s.set_redirect_tc_sl_fl(v as u8, sl, fl) });
    chk!(r, ClassPortInfo, 0, "RedirectSL", bo(200, 4), 4, |g| g.redirect_sl() as u64, |s, v| { let (tc, fl) = (s.redirect_tc(), s.redirect_fl()); s.set_redirect_tc_sl_fl(tc, v as u8, fl) });
    chk!(r, ClassPortInfo, 0, "RedirectFL", bo(204, 20), 20, |g| g.redirect_fl() as u64, |s, v| { let (tc, sl) = (s.redirect_tc(), s.redirect_sl()); s.set_redirect_tc_sl_fl(tc, sl, v as u32) });
    chk!(r, ClassPortInfo, 0, "RedirectLID", bo(224, 16), 16, |g| g.redirect_lid() as u64, |s, v| s.set_redirect_lid(v as u16));
    chk!(r, ClassPortInfo, 0, "RedirectPKey", bo(240, 16), 16, |g| g.redirect_pkey() as u64, |s, v| s.set_redirect_pkey(v as u16));
    chk!(r, ClassPortInfo, 0, "RedirectQKey", 288, 32, |g| g.redirect_qkey() as u64, |s, v| s.set_redirect_qkey(v as u32));
    chk!(r, ClassPortInfo, 0, "TrapTC", bo(448, 8), 8, |g| g.trap_tc() as u64, |s, v| { let (sl, fl) = (s.trap_sl(), s.trap_fl()); s.set_trap_tc_sl_fl(v as u8, sl, fl) });
    chk!(r, ClassPortInfo, 0, "TrapSL", bo(456, 4), 4, |g| g.trap_sl() as u64, |s, v| { let (tc, fl) = (s.trap_tc(), s.trap_fl()); s.set_trap_tc_sl_fl(tc, v as u8, fl) });
    chk!(r, ClassPortInfo, 0, "TrapFL", bo(460, 20), 20, |g| g.trap_fl() as u64, |s, v| { let (tc, sl) = (s.trap_tc(), s.trap_sl()); s.set_trap_tc_sl_fl(tc, sl, v as u32) });
    chk!(r, ClassPortInfo, 0, "TrapLID", bo(480, 16), 16, |g| g.trap_lid() as u64, |s, v| s.set_trap_lid(v as u16));
    chk!(r, ClassPortInfo, 0, "TrapPKey", bo(496, 16), 16, |g| g.trap_pkey() as u64, |s, v| s.set_trap_pkey(v as u16));
    chk!(r, ClassPortInfo, 0, "TrapHL", bo(512, 8), 8, |g| g.trap_hop_limit() as u64, |s, v| s.set_trap_hop_limit(v as u8));
    chk!(r, ClassPortInfo, 0, "TrapQP", bo(520, 24), 24, |g| g.trap_qp() as u64, |s, v| s.set_trap_qp(v as u32));
    chk!(r, ClassPortInfo, 0, "TrapQKey", 544, 32, |g| g.trap_qkey() as u64, |s, v| s.set_trap_qkey(v as u32));
}

#[test]
#[rustfmt::skip]
fn redirect_qp_matches_libibmad() {
    // separate: our setter also clears the reserved byte 32.
    let mut r = Rng(7);
    for _ in 0..100 {
        let b = r.buf();
        let g = ClassPortInfo::new_checked(&b[..]).unwrap();
        assert_eq!(g.redirect_qp() as u64, lib_get(&b, bo(264, 24), 24));
    }
}

#[test]
#[rustfmt::skip]
fn headers_match_libibmad() {
    let mut r = Rng(0x0123_4567_89ab_cdef);
    chk!(r, Mad, 0, "MadMethod+R", 0, 8, |g| g.method() as u64, |s, v| s.set_method(v as u8));
    chk!(r, Mad, 0, "ClassVersion", 8, 8, |g| g.class_version() as u64, |s, v| s.set_class_version(v as u8));
    chk!(r, Mad, 0, "MgmtClass", 16, 8, |g| g.mgmt_class() as u64, |s, v| s.set_mgmt_class(v as u8));
    chk!(r, Mad, 0, "BaseVersion", 24, 8, |g| g.base_version() as u64, |s, v| s.set_base_version(v as u8));
    chk!(r, Mad, 0, "Status", 48, 16, |g| g.status() as u64, |s, v| s.set_status(v as u16));
    chk!(r, Mad, 0, "TRID", 64, 64, |g| g.tid(), |s, v| s.set_tid(v));
    chk!(r, Mad, 0, "Attr", 144, 16, |g| g.attr_id() as u64, |s, v| s.set_attr_id(v as u16));
    chk!(r, Mad, 0, "Modifier", 160, 32, |g| g.attr_mod() as u64, |s, v| s.set_attr_mod(v as u32));
    chk!(r, Smp, 0, "HopCnt", 32, 8, |g| g.hop_count() as u64, |s, v| s.set_hop_count(v as u8));
    chk!(r, Smp, 0, "HopPtr", 40, 8, |g| g.hop_pointer() as u64, |s, v| s.set_hop_pointer(v as u8));
    chk!(r, Smp, 0, "DrStatus", 48, 15, |g| g.dr_status() as u64, |s, v| s.set_dr_status(v as u16));
    chk!(r, Smp, 0, "D", 63, 1, |g| (g.direction() == Direction::Returning) as u64, |s, v| s.set_direction(if v != 0 { Direction::Returning } else { Direction::Outbound }));
    chk!(r, Smp, 0, "Mkey", 192, 64, |g| g.m_key(), |s, v| s.set_m_key(v));
    chk!(r, Smp, 0, "DrDLID", 256, 16, |g| g.dr_dlid() as u64, |s, v| s.set_dr_dlid(v as u16));
    chk!(r, Smp, 0, "DrSLID", 272, 16, |g| g.dr_slid() as u64, |s, v| s.set_dr_slid(v as u16));
    chk!(r, Rmpp, 0, "RmppVers", 24 * 8 + 24, 8, |g| g.rmpp_version() as u64, |s, v| s.set_rmpp_version(v as u8));
    chk!(r, Rmpp, 0, "RmppType", 24 * 8 + 16, 8, |g| g.rmpp_type() as u64, |s, v| s.set_rmpp_type(v as u8));
    chk!(r, Rmpp, 0, "RmppResp", 24 * 8 + 11, 5, |g| g.resp_time() as u64, |s, v| s.set_resp_time(v as u8));
    chk!(r, Rmpp, 0, "RmppFlags", 24 * 8 + 8, 3, |g| g.flags() as u64, |s, v| s.set_flags(v as u8));
    chk!(r, Rmpp, 0, "RmppStatus", 24 * 8, 8, |g| g.rmpp_status() as u64, |s, v| s.set_rmpp_status(v as u8));
    chk!(r, Rmpp, 0, "SegNum", 28 * 8, 32, |g| g.segment_number() as u64, |s, v| s.set_segment_number(v as u32));
    chk!(r, Rmpp, 0, "Payload", 32 * 8, 32, |g| g.paylen_newwin() as u64, |s, v| s.set_paylen_newwin(v as u32));
    chk!(r, SaMad, 0, "SaSMkey", 288, 64, |g| g.sm_key(), |s, v| s.set_sm_key(v));
    chk!(r, SaMad, 0, "SaAttrOffs", 46 * 8, 16, |g| g.attr_offset() as u64, |s, v| s.set_attr_offset(v as u16));
    chk!(r, SaMad, 0, "SaCompMask", 48 * 8, 64, |g| g.component_mask(), |s, v| s.set_component_mask(v));
    chk!(r, VendorMad, 0, "OUI", 36 * 8, 24, |g| g.oui() as u64, |s, v| s.set_oui(v as u32));
}

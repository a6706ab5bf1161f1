//! The values a port's PortInfo has before any SM writes it, per kind of port.
//!
//! Where ibsim is a fair model of a real SMA they are ibsim's: its `hcaport`, `swport` and
//! `smaport` templates (`ibsim/sim_net.c`) as `update_portinfo` fills them, checked against the
//! PortInfo ibsim 0.10 returned in the golden vectors (`mad/wire/tests/vectors`). Deliberate
//! differences: the GidPrefix starts at the IBA default `fe80::` (ibsim reads 0 until an SM
//! writes it), and M_KeyLeasePeriod starts at 0 (ibsim's template has 0x0FF9, a template
//! artefact: 4089 s).

use mad_wire::attr::vl_arb_table::VlArbEntry;

/// The three kinds of port slot, which differ in what PortInfo means for them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PortKind {
    /// A CA's (or router's) port: it has a LID, an M_Key, a P_Key table of its own.
    Ca,
    /// A switch's management port 0: the switch's LID, M_Key and SM LID live here.
    SwitchPort0,
    /// A switch's external port: link state and rates only.
    SwitchExternal,
}

/// The constant and default PortInfo values of one kind of port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortDefaults {
    /// CapabilityMask.
    pub capability_mask: u32,
    /// CapabilityMask2.
    pub capability_mask2: u16,
    /// GUIDCap: GUIDs the GUIDInfo table holds.
    pub guid_cap: u8,
    /// SubnetTimeOut until the SM writes it.
    pub subnet_timeout: u8,
    /// RespTimeValue.
    pub resp_time_value: u8,
    /// VLStallCount until the SM writes it.
    pub vl_stall_count: u8,
    /// MTUCap (4 = 2048 bytes).
    pub mtu_cap: u8,
    /// NeighborMTU until the SM writes it.
    pub neighbor_mtu: u8,
    /// VLCap (4 = VL0-VL7).
    pub vl_cap: u8,
    /// VLArbitrationHighCap.
    pub vl_arb_high_cap: u8,
    /// VLArbitrationLowCap.
    pub vl_arb_low_cap: u8,
}

/// CA ports: CapabilityMask 0x0050C048 (IsTrapSupported, IsSLMappingSupported,
/// IsExtendedSpeedsSupported, IsCapabilityMask2Supported, IsVendorClassSupported,
/// IsCapabilityMaskNoticeSupported) and CapabilityMask2 0x0030, as ibsim 0.10 answered.
///
/// IsClientReregistrationSupported (0x02000000) is left clear, as ibsim's `hcaport` has it,
/// though ConnectX firmware sets it. So OpenSM never sets ClientReregister on a simulated CA
/// port (`osm_lid_mgr.c` sets it only for ports whose CapabilityMask has the bit), and the
/// host's client-reregister path is driven only by an SM that sets it regardless (the SMA
/// takes it either way). Setting the bit would make the SM port's CapabilityMask differ
/// from ibsim's where the tests compare them (`saquery -s` in `interop_live.rs`, and the
/// local CA's PortInfo in the golden vectors).
pub const CA_PORT: PortDefaults = PortDefaults {
    capability_mask: 0x0050_C048,
    capability_mask2: 0x0030,
    guid_cap: 32,
    subnet_timeout: 31,
    resp_time_value: 0,
    vl_stall_count: 7,
    mtu_cap: 4,
    neighbor_mtu: 4,
    vl_cap: 4,
    vl_arb_high_cap: 8,
    vl_arb_low_cap: 8,
};

/// A switch's port 0 (ibsim `smaport`).
pub const SWITCH_PORT0: PortDefaults = PortDefaults {
    capability_mask: 0x0000_C048,
    capability_mask2: 0x0030,
    guid_cap: 1,
    subnet_timeout: 31,
    resp_time_value: 8,
    vl_stall_count: 0,
    mtu_cap: 3,
    neighbor_mtu: 1,
    vl_cap: 4,
    vl_arb_high_cap: 8,
    vl_arb_low_cap: 8,
};

/// A switch's external ports (ibsim `swport`, checked against the golden PortInfo of Switch1
/// port 3).
pub const SWITCH_EXTERNAL: PortDefaults = PortDefaults {
    capability_mask: 0,
    capability_mask2: 0,
    guid_cap: 0,
    subnet_timeout: 0,
    resp_time_value: 0,
    vl_stall_count: 7,
    mtu_cap: 4,
    neighbor_mtu: 4,
    vl_cap: 4,
    vl_arb_high_cap: 8,
    vl_arb_low_cap: 8,
};

impl PortKind {
    /// The defaults of this kind of port.
    pub const fn defaults(self) -> &'static PortDefaults {
        match self {
            PortKind::Ca => &CA_PORT,
            PortKind::SwitchPort0 => &SWITCH_PORT0,
            PortKind::SwitchExternal => &SWITCH_EXTERNAL,
        }
    }
}

/// LinkWidthSupported of every port: 1x, 2x, 4x, 8x, 12x (ibsim `LINKWIDTH_1x_2x_4x_8x_12x`).
pub const LINK_WIDTH_SUPPORTED: u8 = 0x1F;
/// LinkSpeedSupported of every port: SDR, DDR, QDR.
pub const LINK_SPEED_SUPPORTED: u8 = 0x7;
/// LinkSpeedExtSupported of a port whose topology enables an extended speed: FDR to NDR,
/// what ibsim reports whatever the port enables (`LINKSPEEDEXT_NDR_HDR_EDR_FDR`). A port
/// enabling none supports none ([`Port::speed_ext_supported`](crate::fabric::Port::speed_ext_supported)).
pub const LINK_SPEED_EXT_SUPPORTED: u8 = 0xF;
/// LinkSpeedExtSupported2 of a port whose topology enables XDR (ibsim has no extended
/// speed 2). A port that does not supports none, and then neither it nor, for a switch, its
/// port 0 sets CapabilityMask2 IsExtSpeeds2Supported and IsLinkSpeedXDRSupported
/// ([`CAP_MASK2_XDR`]): the PortInfo of a simulated port without XDR stays ibsim's.
pub const LINK_SPEED_EXT2_SUPPORTED: u8 = crate::fabric::rate::SPEED_EXT2_XDR;
/// The CapabilityMask2 bits of a port that supports XDR, or of a switch's port 0 when one
/// of its ports does (a switch's ports are read with port 0's masks): IsExtSpeeds2Supported
/// (0x0800: the LinkSpeedExt*2 fields mean something; libibnetdisc
/// `ibnd_get_agg_linkspeedext` reads LinkSpeedExtActive2 only then) and
/// IsLinkSpeedXDRSupported (0x1000), libibmad `iba_types.h`.
pub const CAP_MASK2_XDR: u16 = mad_wire::attr::port_info::cap_mask2::EXT_SPEEDS_2_SUPPORTED
    | mad_wire::attr::port_info::cap_mask2::LINK_SPEED_XDR_SUPPORTED;
/// LinkDownDefaultState until the SM writes it: 2 = Polling.
pub const LINK_DOWN_DEFAULT: u8 = 2;

/// NodeInfo Revision (ibsim's node templates).
pub const NODE_REVISION: u32 = 0xA1;
/// NodeInfo PartitionCap of a CA: its P_Key table holds 64 entries.
pub const CA_PARTITION_CAP: u16 = 64;
/// NodeInfo PartitionCap of a switch: the P_Key table of its port 0 holds 8 entries (ibsim's
/// switch template); external ports hold SwitchInfo PartitionEnforcementCap entries.
pub const SWITCH_PARTITION_CAP: u16 = 8;

/// The SL-to-VL table every port starts with (ibsim `default_sl2vl`: SL n on VL n, SL 15 on
/// VL 7), two SLs per byte, the even SL in the high nibble.
pub const SL2VL: [u8; 8] = [0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xe7];

/// Entries of each VL arbitration table (low and high priority) a port keeps.
pub const VL_ARB_ENTRIES: usize = 64;

/// The high-priority VL arbitration table every port starts with (ibsim
/// `default_vlarb_high`): VL0 weight 4, VL1-14 weight 0.
pub fn vl_arb_high() -> [VlArbEntry; VL_ARB_ENTRIES] {
    let mut t = [VlArbEntry::default(); VL_ARB_ENTRIES];
    for (vl, e) in t.iter_mut().enumerate().take(15) {
        *e = VlArbEntry {
            vl: vl as u8,
            weight: if vl == 0 { 4 } else { 0 },
        };
    }
    t
}

/// The low-priority VL arbitration table every port starts with (ibsim `default_vlarb_low`):
/// VL0 weight 0, VL1-14 weight 4.
pub fn vl_arb_low() -> [VlArbEntry; VL_ARB_ENTRIES] {
    let mut t = [VlArbEntry::default(); VL_ARB_ENTRIES];
    for (vl, e) in t.iter_mut().enumerate().take(15) {
        *e = VlArbEntry {
            vl: vl as u8,
            weight: if vl == 0 { 0 } else { 4 },
        };
    }
    t
}

/// PMA ClassPortInfo RespTimeValue (ibsim `do_cpi`: 18).
pub const PMA_RESP_TIME_VALUE: u8 = 18;

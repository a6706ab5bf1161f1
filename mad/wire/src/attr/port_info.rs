//! PortInfo (SM attribute 0x0015, 64 bytes; IBA 14.2.5.6, kernel `struct ib_port_info`,
//! OpenSM `ib_port_info_t`, bit offsets as libibmad `fields.c`). AttributeModifier = port.
//!
//! | Offset | Field (bit split, high bits first) |
//! |---|---|
//! | 0 | M_Key (8 bytes) |
//! | 8 | GidPrefix (8) |
//! | 16 | LID (2) |
//! | 18 | MasterSMLID (2) |
//! | 20 | CapabilityMask (4) |
//! | 24 | DiagCode (2) |
//! | 26 | M_KeyLeasePeriod (2) |
//! | 28 | LocalPortNum |
//! | 29 | LinkWidthEnabled |
//! | 30 | LinkWidthSupported |
//! | 31 | LinkWidthActive |
//! | 32 | LinkSpeedSupported (4) / PortState (4) |
//! | 33 | PortPhysicalState (4) / LinkDownDefaultState (4) |
//! | 34 | M_KeyProtectBits (2) / reserved (3) / LMC (3) |
//! | 35 | LinkSpeedActive (4) / LinkSpeedEnabled (4) |
//! | 36 | NeighborMTU (4) / MasterSMSL (4) |
//! | 37 | VLCap (4) / InitType (4) |
//! | 38 | VLHighLimit |
//! | 39 | VLArbitrationHighCap |
//! | 40 | VLArbitrationLowCap |
//! | 41 | InitTypeReply (4) / MTUCap (4) |
//! | 42 | VLStallCount (3) / HOQLife (5) |
//! | 43 | OperationalVLs (4) / PartitionEnforcementInbound / …Outbound / FilterRawInbound / FilterRawOutbound |
//! | 44 | M_KeyViolations (2) |
//! | 46 | P_KeyViolations (2) |
//! | 48 | Q_KeyViolations (2) |
//! | 50 | GUIDCap |
//! | 51 | ClientReregister (1) / MulticastPKeyTrapSuppressionEnabled (2) / SubnetTimeOut (5) |
//! | 52 | reserved (3) / RespTimeValue (5) |
//! | 53 | LocalPhyErrors (4) / OverrunErrors (4) |
//! | 54 | MaxCreditHint (2) |
//! | 56 | reserved (1) / LinkSpeedExtActive2 (2) / LinkSpeedExtSupported2 (2) / LinkSpeedExtEnabled2 (3) |
//! | 57 | LinkRoundTripLatency (3) |
//! | 60 | CapabilityMask2 (2) |
//! | 62 | LinkSpeedExtActive (4) / LinkSpeedExtSupported (4) |
//! | 63 | reserved (3) / LinkSpeedExtEnabled (5) |

use crate::error::{Result, check_len};
use crate::field::{
    bits, set_bits_at, set_u16_at, set_u24_at, set_u32_at, set_u64_at, u16_at, u24_at, u32_at,
    u64_at,
};
use crate::macros::{bits_get, bits_set, byte_get, byte_set, flag_get, flag_set, wire_enum};

/// Length of PortInfo.
pub const LEN: usize = 64;

wire_enum! {
    /// PortState (4 bits): the logical link state.
    pub enum PortState(u8) {
        /// In a Set: leave the state alone.
        NoChange = 0,
        /// Down.
        Down = 1,
        /// Initialize: link up, not configured.
        Init = 2,
        /// Armed.
        Armed = 3,
        /// Active.
        Active = 4,
    }
}

wire_enum! {
    /// PortPhysicalState (4 bits).
    pub enum PhysPortState(u8) {
        /// In a Set: leave the state alone.
        NoChange = 0,
        /// Sleep.
        Sleep = 1,
        /// Polling.
        Polling = 2,
        /// Disabled.
        Disabled = 3,
        /// PortConfigurationTraining.
        PortConfigurationTraining = 4,
        /// LinkUp.
        LinkUp = 5,
        /// LinkErrorRecovery.
        LinkErrorRecovery = 6,
        /// PhyTest.
        PhyTest = 7,
    }
}

/// CapabilityMask bits (OpenSM `IB_PORT_CAP_*`).
pub mod cap_mask {
    /// The port's node runs a subnet manager.
    pub const IS_SM: u32 = 0x0000_0002;
    /// Notice supported.
    pub const HAS_NOTICE: u32 = 0x0000_0004;
    /// Traps supported.
    pub const HAS_TRAP: u32 = 0x0000_0008;
    /// Inter-packet delay supported.
    pub const HAS_IPD: u32 = 0x0000_0010;
    /// Automatic path migration supported.
    pub const HAS_AUTO_MIG: u32 = 0x0000_0020;
    /// SL mapping supported.
    pub const HAS_SL_MAP: u32 = 0x0000_0040;
    /// Non-volatile M_Key.
    pub const HAS_NV_MKEY: u32 = 0x0000_0080;
    /// Non-volatile P_Key.
    pub const HAS_NV_PKEY: u32 = 0x0000_0100;
    /// LedInfo supported.
    pub const HAS_LED_INFO: u32 = 0x0000_0200;
    /// The SM is disabled on this port.
    pub const SM_DISABLED: u32 = 0x0000_0400;
    /// SystemImageGUID supported.
    pub const HAS_SYS_IMAGE_GUID: u32 = 0x0000_0800;
    /// P_Key switch external port trap supported.
    pub const HAS_PKEY_SW_EXT_PORT_TRAP: u32 = 0x0000_1000;
    /// Cable info supported.
    pub const HAS_CABLE_INFO: u32 = 0x0000_2000;
    /// Extended link speeds supported (LinkSpeedExt fields valid).
    pub const HAS_EXT_SPEEDS: u32 = 0x0000_4000;
    /// CapabilityMask2 is valid.
    pub const HAS_CAP_MASK2: u32 = 0x0000_8000;
    /// Communication management supported.
    pub const HAS_COM_MGT: u32 = 0x0001_0000;
    /// SNMP tunnelling supported.
    pub const HAS_SNMP: u32 = 0x0002_0000;
    /// Reinit supported.
    pub const REINIT: u32 = 0x0004_0000;
    /// Device management supported.
    pub const HAS_DEV_MGT: u32 = 0x0008_0000;
    /// Vendor classes supported.
    pub const HAS_VENDOR_CLASS: u32 = 0x0010_0000;
    /// DR notice supported.
    pub const HAS_DR_NOTICE: u32 = 0x0020_0000;
    /// Capability-mask-change notice supported (trap 144).
    pub const HAS_CAP_MASK_NOTICE: u32 = 0x0040_0000;
    /// IsBootManagementSupported (libibmad `dump.c`; libibverbs `IBV_PORT_BOOT_MGMT_SUP`):
    /// boot management, not baseboard management.
    pub const HAS_BM: u32 = 0x0080_0000;
    /// LinkRoundTripLatency supported.
    pub const HAS_LINK_RT_LATENCY: u32 = 0x0100_0000;
    /// Client reregistration supported.
    pub const HAS_CLIENT_REREG: u32 = 0x0200_0000;
    /// Other-local-changes notice supported.
    pub const HAS_OTHER_LOCAL_CHANGES_NOTICE: u32 = 0x0400_0000;
    /// Link speed/width pairs table supported.
    pub const HAS_LINK_SPEED_WIDTH_PAIRS_TABLE: u32 = 0x0800_0000;
    /// Vendor-specific MADs table supported.
    pub const HAS_VENDOR_MADS: u32 = 0x1000_0000;
    /// Multicast P_Key trap suppression supported.
    pub const HAS_MCAST_PKEY_TRAP_SUPPRESS: u32 = 0x2000_0000;
    /// MulticastFDBTop supported.
    pub const HAS_MCAST_FDB_TOP: u32 = 0x4000_0000;
    /// HierarchyInfo supported.
    pub const HAS_HIERARCHY_INFO: u32 = 0x8000_0000;
}

/// LinkWidth bits (Enabled/Supported are masks, Active one bit).
pub mod link_width {
    /// 1x.
    pub const X1: u8 = 1;
    /// 4x.
    pub const X4: u8 = 2;
    /// 8x.
    pub const X8: u8 = 4;
    /// 12x.
    pub const X12: u8 = 8;
    /// 2x.
    pub const X2: u8 = 16;
}

/// LinkSpeed bits (Supported/Enabled are masks, Active one bit).
pub mod link_speed {
    /// 2.5 Gb/s (SDR).
    pub const SDR: u8 = 1;
    /// 5 Gb/s (DDR).
    pub const DDR: u8 = 2;
    /// 10 Gb/s (QDR).
    pub const QDR: u8 = 4;
}

/// LinkSpeedExt bits (valid when [`cap_mask::HAS_EXT_SPEEDS`] is set).
pub mod link_speed_ext {
    /// 14 Gb/s (FDR).
    pub const FDR: u8 = 1;
    /// 25 Gb/s (EDR).
    pub const EDR: u8 = 2;
    /// 50 Gb/s (HDR).
    pub const HDR: u8 = 4;
    /// 100 Gb/s (NDR).
    pub const NDR: u8 = 8;
}

/// LinkSpeedExt2 bits (byte 56; valid when [`cap_mask2::EXT_SPEEDS_2_SUPPORTED`] is set).
/// Values as libibmad `dump.c` `mad_dump_linkspeedext2`.
pub mod link_speed_ext2 {
    /// 212.5 Gb/s (XDR).
    pub const XDR: u8 = 1;
}

/// CapabilityMask2 bits (libibmad `iba_types.h` `IB_PORT_CAP2_*`).
pub mod cap_mask2 {
    /// NodeDescription may be Set.
    pub const SET_NODE_DESCRIPTION_SUPPORTED: u16 = 0x0001;
    /// PortInfoExtended supported.
    pub const PORT_INFO_EXTENDED_SUPPORTED: u16 = 0x0002;
    /// Virtualization supported.
    pub const VIRTUALIZATION_SUPPORTED: u16 = 0x0004;
    /// SwitchPortStateTable supported.
    pub const SWITCH_PORT_STATE_TABLE_SUPPORTED: u16 = 0x0008;
    /// LinkWidth 2x supported.
    pub const LINK_WIDTH_2X_SUPPORTED: u16 = 0x0010;
    /// LinkSpeed HDR supported.
    pub const LINK_SPEED_HDR_SUPPORTED: u16 = 0x0020;
    /// LinkSpeed NDR supported.
    pub const LINK_SPEED_NDR_SUPPORTED: u16 = 0x0400;
    /// The LinkSpeedExt*2 fields of byte 56 are valid.
    pub const EXT_SPEEDS_2_SUPPORTED: u16 = 0x0800;
    /// LinkSpeed XDR supported.
    pub const LINK_SPEED_XDR_SUPPORTED: u16 = 0x1000;
}

/// MTU codes (NeighborMTU, MTUCap).
pub mod mtu {
    /// 256 bytes.
    pub const MTU_256: u8 = 1;
    /// 512 bytes.
    pub const MTU_512: u8 = 2;
    /// 1024 bytes.
    pub const MTU_1024: u8 = 3;
    /// 2048 bytes.
    pub const MTU_2048: u8 = 4;
    /// 4096 bytes.
    pub const MTU_4096: u8 = 5;
}

mod field {
    pub const M_KEY: usize = 0;
    pub const GID_PREFIX: usize = 8;
    pub const LID: usize = 16;
    pub const MASTER_SM_LID: usize = 18;
    pub const CAPABILITY_MASK: usize = 20;
    pub const DIAG_CODE: usize = 24;
    pub const M_KEY_LEASE_PERIOD: usize = 26;
    pub const LOCAL_PORT_NUM: usize = 28;
    pub const LINK_WIDTH_ENABLED: usize = 29;
    pub const LINK_WIDTH_SUPPORTED: usize = 30;
    pub const LINK_WIDTH_ACTIVE: usize = 31;
    /// LinkSpeedSupported (7–4) / PortState (3–0).
    pub const SPEED_STATE: usize = 32;
    /// PortPhysicalState (7–4) / LinkDownDefaultState (3–0).
    pub const PHYS_DOWNDEF: usize = 33;
    /// M_KeyProtectBits (7–6) / reserved (5–3) / LMC (2–0).
    pub const PROTECT_LMC: usize = 34;
    /// LinkSpeedActive (7–4) / LinkSpeedEnabled (3–0).
    pub const SPEED_ACTIVE_ENABLED: usize = 35;
    /// NeighborMTU (7–4) / MasterSMSL (3–0).
    pub const MTU_SMSL: usize = 36;
    /// VLCap (7–4) / InitType (3–0).
    pub const VLCAP_INITTYPE: usize = 37;
    pub const VL_HIGH_LIMIT: usize = 38;
    pub const VL_ARB_HIGH_CAP: usize = 39;
    pub const VL_ARB_LOW_CAP: usize = 40;
    /// InitTypeReply (7–4) / MTUCap (3–0).
    pub const INITREPLY_MTUCAP: usize = 41;
    /// VLStallCount (7–5) / HOQLife (4–0).
    pub const STALL_HOQ: usize = 42;
    /// OperationalVLs (7–4) / PartEnfIn (3) / PartEnfOut (2) / FilterRawIn (1) / FilterRawOut (0).
    pub const OPVLS_ENFORCE: usize = 43;
    pub const M_KEY_VIOLATIONS: usize = 44;
    pub const P_KEY_VIOLATIONS: usize = 46;
    pub const Q_KEY_VIOLATIONS: usize = 48;
    pub const GUID_CAP: usize = 50;
    /// ClientReregister (7) / MulticastPKeyTrapSuppressionEnabled (6–5) / SubnetTimeOut (4–0).
    pub const REREG_SUBNET_TIMEOUT: usize = 51;
    /// reserved (7–5) / RespTimeValue (4–0).
    pub const RESP_TIME: usize = 52;
    /// LocalPhyErrors (7–4) / OverrunErrors (3–0).
    pub const PHY_OVERRUN_ERRORS: usize = 53;
    pub const MAX_CREDIT_HINT: usize = 54;
    /// reserved (7) / LinkSpeedExtActive2 (6–5) / LinkSpeedExtSupported2 (4–3) /
    /// LinkSpeedExtEnabled2 (2–0).
    pub const SPEED_EXT2: usize = 56;
    pub const LINK_ROUND_TRIP_LATENCY: usize = 57;
    pub const CAPABILITY_MASK2: usize = 60;
    /// LinkSpeedExtActive (7–4) / LinkSpeedExtSupported (3–0).
    pub const SPEED_EXT: usize = 62;
    /// reserved (7–5) / LinkSpeedExtEnabled (4–0).
    pub const SPEED_EXT_ENABLED: usize = 63;
}

/// A typed view of a PortInfo attribute.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortInfo<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> PortInfo<T> {
    /// Views `buffer` as PortInfo, checking that it holds 64 bytes.
    pub fn new_checked(buffer: T) -> Result<Self> {
        check_len("PortInfo", buffer.as_ref(), LEN)?;
        Ok(Self { buffer })
    }

    /// Gives the buffer back.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// M_Key.
    pub fn m_key(&self) -> u64 {
        u64_at(self.buffer.as_ref(), field::M_KEY)
    }

    /// GidPrefix.
    pub fn gid_prefix(&self) -> u64 {
        u64_at(self.buffer.as_ref(), field::GID_PREFIX)
    }

    /// LID (base LID of the port).
    pub fn lid(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field::LID)
    }

    /// MasterSMLID.
    pub fn master_sm_lid(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field::MASTER_SM_LID)
    }

    /// CapabilityMask ([`cap_mask`]).
    pub fn capability_mask(&self) -> u32 {
        u32_at(self.buffer.as_ref(), field::CAPABILITY_MASK)
    }

    /// DiagCode.
    pub fn diag_code(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field::DIAG_CODE)
    }

    /// M_KeyLeasePeriod (seconds).
    pub fn m_key_lease_period(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field::M_KEY_LEASE_PERIOD)
    }

    byte_get!(
        local_port_num,
        field::LOCAL_PORT_NUM,
        "LocalPortNum: the port that received this SMP."
    );
    byte_get!(
        link_width_enabled,
        field::LINK_WIDTH_ENABLED,
        "LinkWidthEnabled ([`link_width`] mask)."
    );
    byte_get!(
        link_width_supported,
        field::LINK_WIDTH_SUPPORTED,
        "LinkWidthSupported ([`link_width`] mask)."
    );
    byte_get!(
        link_width_active,
        field::LINK_WIDTH_ACTIVE,
        "LinkWidthActive ([`link_width`])."
    );
    bits_get!(
        link_speed_supported,
        field::SPEED_STATE,
        4,
        4,
        "LinkSpeedSupported ([`link_speed`] mask), 4 bits."
    );

    /// PortState, 4 bits.
    pub fn port_state(&self) -> PortState {
        PortState::from(bits(self.buffer.as_ref()[field::SPEED_STATE], 0, 4))
    }

    /// PortPhysicalState, 4 bits.
    pub fn port_physical_state(&self) -> PhysPortState {
        PhysPortState::from(bits(self.buffer.as_ref()[field::PHYS_DOWNDEF], 4, 4))
    }

    bits_get!(
        link_down_default_state,
        field::PHYS_DOWNDEF,
        0,
        4,
        "LinkDownDefaultState, 4 bits (1 Sleep, 2 Polling)."
    );
    bits_get!(
        m_key_protect_bits,
        field::PROTECT_LMC,
        6,
        2,
        "M_KeyProtectBits, 2 bits."
    );
    bits_get!(lmc, field::PROTECT_LMC, 0, 3, "LMC, 3 bits.");
    bits_get!(
        link_speed_active,
        field::SPEED_ACTIVE_ENABLED,
        4,
        4,
        "LinkSpeedActive ([`link_speed`]), 4 bits."
    );
    bits_get!(
        link_speed_enabled,
        field::SPEED_ACTIVE_ENABLED,
        0,
        4,
        "LinkSpeedEnabled ([`link_speed`] mask), 4 bits."
    );
    bits_get!(
        neighbor_mtu,
        field::MTU_SMSL,
        4,
        4,
        "NeighborMTU ([`mtu`]), 4 bits."
    );
    bits_get!(master_sm_sl, field::MTU_SMSL, 0, 4, "MasterSMSL, 4 bits.");
    bits_get!(vl_cap, field::VLCAP_INITTYPE, 4, 4, "VLCap, 4 bits.");
    bits_get!(init_type, field::VLCAP_INITTYPE, 0, 4, "InitType, 4 bits.");
    byte_get!(vl_high_limit, field::VL_HIGH_LIMIT, "VLHighLimit.");
    byte_get!(
        vl_arbitration_high_cap,
        field::VL_ARB_HIGH_CAP,
        "VLArbitrationHighCap."
    );
    byte_get!(
        vl_arbitration_low_cap,
        field::VL_ARB_LOW_CAP,
        "VLArbitrationLowCap."
    );
    bits_get!(
        init_type_reply,
        field::INITREPLY_MTUCAP,
        4,
        4,
        "InitTypeReply, 4 bits."
    );
    bits_get!(
        mtu_cap,
        field::INITREPLY_MTUCAP,
        0,
        4,
        "MTUCap ([`mtu`]), 4 bits."
    );
    bits_get!(
        vl_stall_count,
        field::STALL_HOQ,
        5,
        3,
        "VLStallCount, 3 bits."
    );
    bits_get!(hoq_life, field::STALL_HOQ, 0, 5, "HOQLife, 5 bits.");
    bits_get!(
        operational_vls,
        field::OPVLS_ENFORCE,
        4,
        4,
        "OperationalVLs, 4 bits."
    );

    flag_get!(
        partition_enforcement_inbound,
        field::OPVLS_ENFORCE,
        3,
        "PartitionEnforcementInbound."
    );

    flag_get!(
        partition_enforcement_outbound,
        field::OPVLS_ENFORCE,
        2,
        "PartitionEnforcementOutbound."
    );

    flag_get!(
        filter_raw_inbound,
        field::OPVLS_ENFORCE,
        1,
        "FilterRawInbound."
    );

    flag_get!(
        filter_raw_outbound,
        field::OPVLS_ENFORCE,
        0,
        "FilterRawOutbound."
    );

    /// M_KeyViolations.
    pub fn m_key_violations(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field::M_KEY_VIOLATIONS)
    }

    /// P_KeyViolations.
    pub fn p_key_violations(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field::P_KEY_VIOLATIONS)
    }

    /// Q_KeyViolations.
    pub fn q_key_violations(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field::Q_KEY_VIOLATIONS)
    }

    byte_get!(
        guid_cap,
        field::GUID_CAP,
        "GUIDCap: entries in the GUID table."
    );

    flag_get!(
        client_reregister,
        field::REREG_SUBNET_TIMEOUT,
        7,
        "ClientReregister."
    );

    bits_get!(
        multicast_pkey_trap_suppression,
        field::REREG_SUBNET_TIMEOUT,
        5,
        2,
        "MulticastPKeyTrapSuppressionEnabled, 2 bits."
    );
    bits_get!(
        subnet_timeout,
        field::REREG_SUBNET_TIMEOUT,
        0,
        5,
        "SubnetTimeOut, 5 bits."
    );
    bits_get!(
        resp_time_value,
        field::RESP_TIME,
        0,
        5,
        "RespTimeValue, 5 bits."
    );
    bits_get!(
        local_phy_errors,
        field::PHY_OVERRUN_ERRORS,
        4,
        4,
        "LocalPhyErrors threshold, 4 bits."
    );
    bits_get!(
        overrun_errors,
        field::PHY_OVERRUN_ERRORS,
        0,
        4,
        "OverrunErrors threshold, 4 bits."
    );

    /// MaxCreditHint.
    pub fn max_credit_hint(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field::MAX_CREDIT_HINT)
    }

    /// LinkRoundTripLatency, 24 bits.
    pub fn link_round_trip_latency(&self) -> u32 {
        u24_at(self.buffer.as_ref(), field::LINK_ROUND_TRIP_LATENCY)
    }

    /// CapabilityMask2 (valid when [`cap_mask::HAS_CAP_MASK2`] is set).
    pub fn capability_mask2(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field::CAPABILITY_MASK2)
    }

    bits_get!(
        link_speed_ext_active,
        field::SPEED_EXT,
        4,
        4,
        "LinkSpeedExtActive ([`link_speed_ext`]), 4 bits."
    );
    bits_get!(
        link_speed_ext_supported,
        field::SPEED_EXT,
        0,
        4,
        "LinkSpeedExtSupported ([`link_speed_ext`] mask), 4 bits."
    );
    bits_get!(
        link_speed_ext_enabled,
        field::SPEED_EXT_ENABLED,
        0,
        5,
        "LinkSpeedExtEnabled, 5 bits."
    );
    bits_get!(
        link_speed_ext_active2,
        field::SPEED_EXT2,
        5,
        2,
        "LinkSpeedExtActive2 ([`link_speed_ext2`]), 2 bits."
    );
    bits_get!(
        link_speed_ext_supported2,
        field::SPEED_EXT2,
        3,
        2,
        "LinkSpeedExtSupported2 ([`link_speed_ext2`] mask), 2 bits."
    );
    bits_get!(
        link_speed_ext_enabled2,
        field::SPEED_EXT2,
        0,
        3,
        "LinkSpeedExtEnabled2, 3 bits."
    );
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> PortInfo<T> {
    /// Sets M_Key.
    pub fn set_m_key(&mut self, value: u64) {
        set_u64_at(self.buffer.as_mut(), field::M_KEY, value);
    }

    /// Sets GidPrefix.
    pub fn set_gid_prefix(&mut self, value: u64) {
        set_u64_at(self.buffer.as_mut(), field::GID_PREFIX, value);
    }

    /// Sets LID.
    pub fn set_lid(&mut self, value: u16) {
        set_u16_at(self.buffer.as_mut(), field::LID, value);
    }

    /// Sets MasterSMLID.
    pub fn set_master_sm_lid(&mut self, value: u16) {
        set_u16_at(self.buffer.as_mut(), field::MASTER_SM_LID, value);
    }

    /// Sets CapabilityMask.
    pub fn set_capability_mask(&mut self, value: u32) {
        set_u32_at(self.buffer.as_mut(), field::CAPABILITY_MASK, value);
    }

    /// Sets DiagCode.
    pub fn set_diag_code(&mut self, value: u16) {
        set_u16_at(self.buffer.as_mut(), field::DIAG_CODE, value);
    }

    /// Sets M_KeyLeasePeriod.
    pub fn set_m_key_lease_period(&mut self, value: u16) {
        set_u16_at(self.buffer.as_mut(), field::M_KEY_LEASE_PERIOD, value);
    }

    byte_set!(
        set_local_port_num,
        field::LOCAL_PORT_NUM,
        "Sets LocalPortNum."
    );
    byte_set!(
        set_link_width_enabled,
        field::LINK_WIDTH_ENABLED,
        "Sets LinkWidthEnabled."
    );
    byte_set!(
        set_link_width_supported,
        field::LINK_WIDTH_SUPPORTED,
        "Sets LinkWidthSupported."
    );
    byte_set!(
        set_link_width_active,
        field::LINK_WIDTH_ACTIVE,
        "Sets LinkWidthActive."
    );
    bits_set!(
        set_link_speed_supported,
        field::SPEED_STATE,
        4,
        4,
        "Sets LinkSpeedSupported (4 bits)."
    );

    /// Sets PortState.
    pub fn set_port_state(&mut self, value: PortState) {
        set_bits_at(self.buffer.as_mut(), field::SPEED_STATE, 0, 4, value.into());
    }

    /// Sets PortPhysicalState.
    pub fn set_port_physical_state(&mut self, value: PhysPortState) {
        set_bits_at(
            self.buffer.as_mut(),
            field::PHYS_DOWNDEF,
            4,
            4,
            value.into(),
        );
    }

    bits_set!(
        set_link_down_default_state,
        field::PHYS_DOWNDEF,
        0,
        4,
        "Sets LinkDownDefaultState (4 bits)."
    );
    bits_set!(
        set_m_key_protect_bits,
        field::PROTECT_LMC,
        6,
        2,
        "Sets M_KeyProtectBits (2 bits)."
    );

    /// Clears the reserved bits: 5–3 of byte 34, 7–5 of byte 52, 7 of byte 56, 7–5 of byte 63.
    /// Bits 6–0 of byte 56 are the XDR LinkSpeedExt*2 fields (libibmad `fields.c`), not reserved.
    pub fn clear_reserved(&mut self) {
        set_bits_at(self.buffer.as_mut(), field::PROTECT_LMC, 3, 3, 0);
        set_bits_at(self.buffer.as_mut(), field::RESP_TIME, 5, 3, 0);
        set_bits_at(self.buffer.as_mut(), field::SPEED_EXT2, 7, 1, 0);
        set_bits_at(self.buffer.as_mut(), field::SPEED_EXT_ENABLED, 5, 3, 0);
    }

    bits_set!(set_lmc, field::PROTECT_LMC, 0, 3, "Sets LMC (3 bits).");
    bits_set!(
        set_link_speed_active,
        field::SPEED_ACTIVE_ENABLED,
        4,
        4,
        "Sets LinkSpeedActive (4 bits)."
    );
    bits_set!(
        set_link_speed_enabled,
        field::SPEED_ACTIVE_ENABLED,
        0,
        4,
        "Sets LinkSpeedEnabled (4 bits)."
    );
    bits_set!(
        set_neighbor_mtu,
        field::MTU_SMSL,
        4,
        4,
        "Sets NeighborMTU (4 bits)."
    );
    bits_set!(
        set_master_sm_sl,
        field::MTU_SMSL,
        0,
        4,
        "Sets MasterSMSL (4 bits)."
    );
    bits_set!(
        set_vl_cap,
        field::VLCAP_INITTYPE,
        4,
        4,
        "Sets VLCap (4 bits)."
    );
    bits_set!(
        set_init_type,
        field::VLCAP_INITTYPE,
        0,
        4,
        "Sets InitType (4 bits)."
    );
    byte_set!(set_vl_high_limit, field::VL_HIGH_LIMIT, "Sets VLHighLimit.");
    byte_set!(
        set_vl_arbitration_high_cap,
        field::VL_ARB_HIGH_CAP,
        "Sets VLArbitrationHighCap."
    );
    byte_set!(
        set_vl_arbitration_low_cap,
        field::VL_ARB_LOW_CAP,
        "Sets VLArbitrationLowCap."
    );
    bits_set!(
        set_init_type_reply,
        field::INITREPLY_MTUCAP,
        4,
        4,
        "Sets InitTypeReply (4 bits)."
    );
    bits_set!(
        set_mtu_cap,
        field::INITREPLY_MTUCAP,
        0,
        4,
        "Sets MTUCap (4 bits)."
    );
    bits_set!(
        set_vl_stall_count,
        field::STALL_HOQ,
        5,
        3,
        "Sets VLStallCount (3 bits)."
    );
    bits_set!(
        set_hoq_life,
        field::STALL_HOQ,
        0,
        5,
        "Sets HOQLife (5 bits)."
    );
    bits_set!(
        set_operational_vls,
        field::OPVLS_ENFORCE,
        4,
        4,
        "Sets OperationalVLs (4 bits)."
    );

    flag_set!(
        set_partition_enforcement_inbound,
        field::OPVLS_ENFORCE,
        3,
        "Sets PartitionEnforcementInbound."
    );

    flag_set!(
        set_partition_enforcement_outbound,
        field::OPVLS_ENFORCE,
        2,
        "Sets PartitionEnforcementOutbound."
    );

    flag_set!(
        set_filter_raw_inbound,
        field::OPVLS_ENFORCE,
        1,
        "Sets FilterRawInbound."
    );

    flag_set!(
        set_filter_raw_outbound,
        field::OPVLS_ENFORCE,
        0,
        "Sets FilterRawOutbound."
    );

    /// Sets M_KeyViolations.
    pub fn set_m_key_violations(&mut self, value: u16) {
        set_u16_at(self.buffer.as_mut(), field::M_KEY_VIOLATIONS, value);
    }

    /// Sets P_KeyViolations.
    pub fn set_p_key_violations(&mut self, value: u16) {
        set_u16_at(self.buffer.as_mut(), field::P_KEY_VIOLATIONS, value);
    }

    /// Sets Q_KeyViolations.
    pub fn set_q_key_violations(&mut self, value: u16) {
        set_u16_at(self.buffer.as_mut(), field::Q_KEY_VIOLATIONS, value);
    }

    byte_set!(set_guid_cap, field::GUID_CAP, "Sets GUIDCap.");

    flag_set!(
        set_client_reregister,
        field::REREG_SUBNET_TIMEOUT,
        7,
        "Sets ClientReregister."
    );

    bits_set!(
        set_multicast_pkey_trap_suppression,
        field::REREG_SUBNET_TIMEOUT,
        5,
        2,
        "Sets MulticastPKeyTrapSuppressionEnabled (2 bits)."
    );
    bits_set!(
        set_subnet_timeout,
        field::REREG_SUBNET_TIMEOUT,
        0,
        5,
        "Sets SubnetTimeOut (5 bits)."
    );
    bits_set!(
        set_resp_time_value,
        field::RESP_TIME,
        0,
        5,
        "Sets RespTimeValue (5 bits)."
    );
    bits_set!(
        set_local_phy_errors,
        field::PHY_OVERRUN_ERRORS,
        4,
        4,
        "Sets LocalPhyErrors (4 bits)."
    );
    bits_set!(
        set_overrun_errors,
        field::PHY_OVERRUN_ERRORS,
        0,
        4,
        "Sets OverrunErrors (4 bits)."
    );

    /// Sets MaxCreditHint.
    pub fn set_max_credit_hint(&mut self, value: u16) {
        set_u16_at(self.buffer.as_mut(), field::MAX_CREDIT_HINT, value);
    }

    /// Sets LinkRoundTripLatency (24 bits; higher bits dropped).
    pub fn set_link_round_trip_latency(&mut self, value: u32) {
        set_u24_at(self.buffer.as_mut(), field::LINK_ROUND_TRIP_LATENCY, value);
    }

    /// Sets CapabilityMask2.
    pub fn set_capability_mask2(&mut self, value: u16) {
        set_u16_at(self.buffer.as_mut(), field::CAPABILITY_MASK2, value);
    }

    bits_set!(
        set_link_speed_ext_active,
        field::SPEED_EXT,
        4,
        4,
        "Sets LinkSpeedExtActive (4 bits)."
    );
    bits_set!(
        set_link_speed_ext_supported,
        field::SPEED_EXT,
        0,
        4,
        "Sets LinkSpeedExtSupported (4 bits)."
    );
    bits_set!(
        set_link_speed_ext_enabled,
        field::SPEED_EXT_ENABLED,
        0,
        5,
        "Sets LinkSpeedExtEnabled (5 bits)."
    );
    bits_set!(
        set_link_speed_ext_active2,
        field::SPEED_EXT2,
        5,
        2,
        "Sets LinkSpeedExtActive2 (2 bits)."
    );
    bits_set!(
        set_link_speed_ext_supported2,
        field::SPEED_EXT2,
        3,
        2,
        "Sets LinkSpeedExtSupported2 (2 bits)."
    );
    bits_set!(
        set_link_speed_ext_enabled2,
        field::SPEED_EXT2,
        0,
        3,
        "Sets LinkSpeedExtEnabled2 (3 bits)."
    );
}

/// PortInfo as plain values; every field of the attribute, bit fields split out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PortInfoRepr {
    /// M_Key.
    pub m_key: u64,
    /// GidPrefix.
    pub gid_prefix: u64,
    /// LID.
    pub lid: u16,
    /// MasterSMLID.
    pub master_sm_lid: u16,
    /// CapabilityMask ([`cap_mask`]).
    pub capability_mask: u32,
    /// DiagCode.
    pub diag_code: u16,
    /// M_KeyLeasePeriod.
    pub m_key_lease_period: u16,
    /// LocalPortNum.
    pub local_port_num: u8,
    /// LinkWidthEnabled.
    pub link_width_enabled: u8,
    /// LinkWidthSupported.
    pub link_width_supported: u8,
    /// LinkWidthActive.
    pub link_width_active: u8,
    /// LinkSpeedSupported, 4 bits.
    pub link_speed_supported: u8,
    /// PortState.
    pub port_state: PortState,
    /// PortPhysicalState.
    pub port_physical_state: PhysPortState,
    /// LinkDownDefaultState, 4 bits.
    pub link_down_default_state: u8,
    /// M_KeyProtectBits, 2 bits.
    pub m_key_protect_bits: u8,
    /// LMC, 3 bits.
    pub lmc: u8,
    /// LinkSpeedActive, 4 bits.
    pub link_speed_active: u8,
    /// LinkSpeedEnabled, 4 bits.
    pub link_speed_enabled: u8,
    /// NeighborMTU, 4 bits.
    pub neighbor_mtu: u8,
    /// MasterSMSL, 4 bits.
    pub master_sm_sl: u8,
    /// VLCap, 4 bits.
    pub vl_cap: u8,
    /// InitType, 4 bits.
    pub init_type: u8,
    /// VLHighLimit.
    pub vl_high_limit: u8,
    /// VLArbitrationHighCap.
    pub vl_arbitration_high_cap: u8,
    /// VLArbitrationLowCap.
    pub vl_arbitration_low_cap: u8,
    /// InitTypeReply, 4 bits.
    pub init_type_reply: u8,
    /// MTUCap, 4 bits.
    pub mtu_cap: u8,
    /// VLStallCount, 3 bits.
    pub vl_stall_count: u8,
    /// HOQLife, 5 bits.
    pub hoq_life: u8,
    /// OperationalVLs, 4 bits.
    pub operational_vls: u8,
    /// PartitionEnforcementInbound.
    pub partition_enforcement_inbound: bool,
    /// PartitionEnforcementOutbound.
    pub partition_enforcement_outbound: bool,
    /// FilterRawInbound.
    pub filter_raw_inbound: bool,
    /// FilterRawOutbound.
    pub filter_raw_outbound: bool,
    /// M_KeyViolations.
    pub m_key_violations: u16,
    /// P_KeyViolations.
    pub p_key_violations: u16,
    /// Q_KeyViolations.
    pub q_key_violations: u16,
    /// GUIDCap.
    pub guid_cap: u8,
    /// ClientReregister.
    pub client_reregister: bool,
    /// MulticastPKeyTrapSuppressionEnabled, 2 bits.
    pub multicast_pkey_trap_suppression: u8,
    /// SubnetTimeOut, 5 bits.
    pub subnet_timeout: u8,
    /// RespTimeValue, 5 bits.
    pub resp_time_value: u8,
    /// LocalPhyErrors, 4 bits.
    pub local_phy_errors: u8,
    /// OverrunErrors, 4 bits.
    pub overrun_errors: u8,
    /// MaxCreditHint.
    pub max_credit_hint: u16,
    /// LinkRoundTripLatency, 24 bits.
    pub link_round_trip_latency: u32,
    /// CapabilityMask2.
    pub capability_mask2: u16,
    /// LinkSpeedExtActive, 4 bits.
    pub link_speed_ext_active: u8,
    /// LinkSpeedExtSupported, 4 bits.
    pub link_speed_ext_supported: u8,
    /// LinkSpeedExtEnabled, 5 bits.
    pub link_speed_ext_enabled: u8,
    /// LinkSpeedExtActive2 ([`link_speed_ext2`]), 2 bits (XDR).
    pub link_speed_ext_active2: u8,
    /// LinkSpeedExtSupported2 ([`link_speed_ext2`] mask), 2 bits.
    pub link_speed_ext_supported2: u8,
    /// LinkSpeedExtEnabled2, 3 bits.
    pub link_speed_ext_enabled2: u8,
}

impl PortInfoRepr {
    /// Reads every field of `view`.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(view: &PortInfo<&T>) -> Result<Self> {
        Ok(Self {
            m_key: view.m_key(),
            gid_prefix: view.gid_prefix(),
            lid: view.lid(),
            master_sm_lid: view.master_sm_lid(),
            capability_mask: view.capability_mask(),
            diag_code: view.diag_code(),
            m_key_lease_period: view.m_key_lease_period(),
            local_port_num: view.local_port_num(),
            link_width_enabled: view.link_width_enabled(),
            link_width_supported: view.link_width_supported(),
            link_width_active: view.link_width_active(),
            link_speed_supported: view.link_speed_supported(),
            port_state: view.port_state(),
            port_physical_state: view.port_physical_state(),
            link_down_default_state: view.link_down_default_state(),
            m_key_protect_bits: view.m_key_protect_bits(),
            lmc: view.lmc(),
            link_speed_active: view.link_speed_active(),
            link_speed_enabled: view.link_speed_enabled(),
            neighbor_mtu: view.neighbor_mtu(),
            master_sm_sl: view.master_sm_sl(),
            vl_cap: view.vl_cap(),
            init_type: view.init_type(),
            vl_high_limit: view.vl_high_limit(),
            vl_arbitration_high_cap: view.vl_arbitration_high_cap(),
            vl_arbitration_low_cap: view.vl_arbitration_low_cap(),
            init_type_reply: view.init_type_reply(),
            mtu_cap: view.mtu_cap(),
            vl_stall_count: view.vl_stall_count(),
            hoq_life: view.hoq_life(),
            operational_vls: view.operational_vls(),
            partition_enforcement_inbound: view.partition_enforcement_inbound(),
            partition_enforcement_outbound: view.partition_enforcement_outbound(),
            filter_raw_inbound: view.filter_raw_inbound(),
            filter_raw_outbound: view.filter_raw_outbound(),
            m_key_violations: view.m_key_violations(),
            p_key_violations: view.p_key_violations(),
            q_key_violations: view.q_key_violations(),
            guid_cap: view.guid_cap(),
            client_reregister: view.client_reregister(),
            multicast_pkey_trap_suppression: view.multicast_pkey_trap_suppression(),
            subnet_timeout: view.subnet_timeout(),
            resp_time_value: view.resp_time_value(),
            local_phy_errors: view.local_phy_errors(),
            overrun_errors: view.overrun_errors(),
            max_credit_hint: view.max_credit_hint(),
            link_round_trip_latency: view.link_round_trip_latency(),
            capability_mask2: view.capability_mask2(),
            link_speed_ext_active: view.link_speed_ext_active(),
            link_speed_ext_supported: view.link_speed_ext_supported(),
            link_speed_ext_enabled: view.link_speed_ext_enabled(),
            link_speed_ext_active2: view.link_speed_ext_active2(),
            link_speed_ext_supported2: view.link_speed_ext_supported2(),
            link_speed_ext_enabled2: view.link_speed_ext_enabled2(),
        })
    }

    /// Bytes [`PortInfoRepr::emit`] writes.
    pub const fn buffer_len(&self) -> usize {
        LEN
    }

    /// Writes every field into `view`, reserved bits cleared; bits of a value beyond its
    /// field's width are dropped.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(&self, view: &mut PortInfo<&mut T>) {
        view.set_m_key(self.m_key);
        view.set_gid_prefix(self.gid_prefix);
        view.set_lid(self.lid);
        view.set_master_sm_lid(self.master_sm_lid);
        view.set_capability_mask(self.capability_mask);
        view.set_diag_code(self.diag_code);
        view.set_m_key_lease_period(self.m_key_lease_period);
        view.set_local_port_num(self.local_port_num);
        view.set_link_width_enabled(self.link_width_enabled);
        view.set_link_width_supported(self.link_width_supported);
        view.set_link_width_active(self.link_width_active);
        view.set_link_speed_supported(self.link_speed_supported);
        view.set_port_state(self.port_state);
        view.set_port_physical_state(self.port_physical_state);
        view.set_link_down_default_state(self.link_down_default_state);
        view.clear_reserved();
        view.set_m_key_protect_bits(self.m_key_protect_bits);
        view.set_lmc(self.lmc);
        view.set_link_speed_active(self.link_speed_active);
        view.set_link_speed_enabled(self.link_speed_enabled);
        view.set_neighbor_mtu(self.neighbor_mtu);
        view.set_master_sm_sl(self.master_sm_sl);
        view.set_vl_cap(self.vl_cap);
        view.set_init_type(self.init_type);
        view.set_vl_high_limit(self.vl_high_limit);
        view.set_vl_arbitration_high_cap(self.vl_arbitration_high_cap);
        view.set_vl_arbitration_low_cap(self.vl_arbitration_low_cap);
        view.set_init_type_reply(self.init_type_reply);
        view.set_mtu_cap(self.mtu_cap);
        view.set_vl_stall_count(self.vl_stall_count);
        view.set_hoq_life(self.hoq_life);
        view.set_operational_vls(self.operational_vls);
        view.set_partition_enforcement_inbound(self.partition_enforcement_inbound);
        view.set_partition_enforcement_outbound(self.partition_enforcement_outbound);
        view.set_filter_raw_inbound(self.filter_raw_inbound);
        view.set_filter_raw_outbound(self.filter_raw_outbound);
        view.set_m_key_violations(self.m_key_violations);
        view.set_p_key_violations(self.p_key_violations);
        view.set_q_key_violations(self.q_key_violations);
        view.set_guid_cap(self.guid_cap);
        view.set_client_reregister(self.client_reregister);
        view.set_multicast_pkey_trap_suppression(self.multicast_pkey_trap_suppression);
        view.set_subnet_timeout(self.subnet_timeout);
        view.set_resp_time_value(self.resp_time_value);
        view.set_local_phy_errors(self.local_phy_errors);
        view.set_overrun_errors(self.overrun_errors);
        view.set_max_credit_hint(self.max_credit_hint);
        view.set_link_round_trip_latency(self.link_round_trip_latency);
        view.set_capability_mask2(self.capability_mask2);
        view.set_link_speed_ext_active(self.link_speed_ext_active);
        view.set_link_speed_ext_supported(self.link_speed_ext_supported);
        view.set_link_speed_ext_enabled(self.link_speed_ext_enabled);
        view.set_link_speed_ext_active2(self.link_speed_ext_active2);
        view.set_link_speed_ext_supported2(self.link_speed_ext_supported2);
        view.set_link_speed_ext_enabled2(self.link_speed_ext_enabled2);
    }
}

//! Attribute IDs of the subnet-management and performance-management classes (IBA 14.2.5,
//! 16.1.3; kernel `ib_smi.h`, `ib_pma.h`, OpenSM `ib_types.h`).
//!
//! Attribute IDs are class-relative: 0x0012 is SwitchInfo for SMPs and PortCounters for the
//! PMA, so the two sets live in their own modules.

/// ClassPortInfo, common to every GS class (and the PMA).
pub const CLASS_PORT_INFO: u16 = 0x0001;
/// Notice, the payload of Trap and TrapRepress.
pub const NOTICE: u16 = 0x0002;

/// Subnet-management attributes (classes 0x01 and 0x81).
pub mod sm {
    /// ClassPortInfo.
    pub const CLASS_PORT_INFO: u16 = 0x0001;
    /// Notice (trap payload).
    pub const NOTICE: u16 = 0x0002;
    /// NodeDescription.
    pub const NODE_DESCRIPTION: u16 = 0x0010;
    /// NodeInfo.
    pub const NODE_INFO: u16 = 0x0011;
    /// SwitchInfo.
    pub const SWITCH_INFO: u16 = 0x0012;
    /// GUIDInfo; modifier = block of 8 GUIDs.
    pub const GUID_INFO: u16 = 0x0014;
    /// PortInfo; modifier = port number.
    pub const PORT_INFO: u16 = 0x0015;
    /// P_KeyTable; modifier = block (bits 0–15) and port (bits 16–31).
    pub const PKEY_TABLE: u16 = 0x0016;
    /// SLtoVLMappingTable; modifier = input port (bits 8–15), output port (bits 0–7).
    pub const SL_TO_VL_TABLE: u16 = 0x0017;
    /// VLArbitrationTable; modifier = block (bits 16–31), port (bits 0–15).
    pub const VL_ARB_TABLE: u16 = 0x0018;
    /// LinearForwardingTable; modifier = block of 64 LIDs.
    pub const LINEAR_FORWARDING_TABLE: u16 = 0x0019;
    /// RandomForwardingTable.
    pub const RANDOM_FORWARDING_TABLE: u16 = 0x001A;
    /// MulticastForwardingTable; modifier = block (bits 0–8), port-mask position (bits 28–31).
    pub const MULTICAST_FORWARDING_TABLE: u16 = 0x001B;
    /// SMInfo.
    pub const SM_INFO: u16 = 0x0020;
    /// VendorDiag.
    pub const VENDOR_DIAG: u16 = 0x0030;
    /// LedInfo.
    pub const LED_INFO: u16 = 0x0031;
    /// Mellanox ExtendedPortInfo (vendor-specific, in the 0xFF00 range).
    pub const MLNX_EXTENDED_PORT_INFO: u16 = 0xFF90;
    /// Attribute IDs with these bits all set are vendor-specific.
    pub const VENDOR_MASK: u16 = 0xFF00;
}

/// Performance-management attributes (class 0x04).
pub mod pma {
    /// ClassPortInfo.
    pub const CLASS_PORT_INFO: u16 = 0x0001;
    /// PortSamplesControl.
    pub const PORT_SAMPLES_CONTROL: u16 = 0x0010;
    /// PortSamplesResult.
    pub const PORT_SAMPLES_RESULT: u16 = 0x0011;
    /// PortCounters.
    pub const PORT_COUNTERS: u16 = 0x0012;
    /// PortCountersExtended.
    pub const PORT_COUNTERS_EXT: u16 = 0x001D;
    /// PortSamplesResultExtended.
    pub const PORT_SAMPLES_RESULT_EXT: u16 = 0x001E;
}

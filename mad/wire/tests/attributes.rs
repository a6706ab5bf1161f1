//! Attribute layouts against bytes written out by hand from the IBA tables (kernel `ib_smi.h`,
//! `ib_pma.h`, OpenSM `ib_types.h`, libibmad `fields.c`): every field gets a distinct value, the
//! bytes are laid out one by one, parse must give those values and emit the same bytes.

use mad_wire::Error;
use mad_wire::attr::class_port_info::{ClassPortInfo, ClassPortInfoRepr, pma_cap};
use mad_wire::attr::guid_info::{GuidInfo, GuidInfoRepr};
use mad_wire::attr::linear_forwarding_table::{
    LinearForwardingTable, LinearForwardingTableRepr, block_and_index,
};
use mad_wire::attr::multicast_forwarding_table::{
    MftAttrMod, MulticastForwardingTable, MulticastForwardingTableRepr,
};
use mad_wire::attr::node_description::{NodeDescription, NodeDescriptionRepr};
use mad_wire::attr::node_info::{NodeInfo, NodeInfoRepr, NodeType};
use mad_wire::attr::notice::{BadKey, BadMkey, BadMkeyRoute, Notice, NoticeRepr, trap};
use mad_wire::attr::notice_details::{DataDetails, change_flags};
use mad_wire::attr::pkey_table::{PkeyAttrMod, PkeyTable, PkeyTableRepr};
use mad_wire::attr::port_counters::{PortCounters, PortCountersRepr};
use mad_wire::attr::port_counters_ext::{PortCountersExt, PortCountersExtRepr};
use mad_wire::attr::port_info::{
    PhysPortState, PortInfo, PortInfoRepr, PortState, cap_mask, cap_mask2, link_speed_ext2,
};
use mad_wire::attr::sl_to_vl_table::{SlToVlAttrMod, SlToVlTable, SlToVlTableRepr};
use mad_wire::attr::sm_info::{SmInfo, SmInfoRepr, SmState};
use mad_wire::attr::switch_info::{SwitchInfo, SwitchInfoRepr};
use mad_wire::attr::vl_arb_table::{VlArbAttrMod, VlArbEntry, VlArbTable, VlArbTableRepr};

/// PortInfo with a distinct value in every field.
const PORT_INFO: [u8; 64] = [
    0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, // 0: M_Key
    0xFE, 0x80, 0x00, 0x00, 0x00, 0x00, 0x00, 0x11, // 8: GidPrefix
    0x12, 0x13, // 16: LID
    0x14, 0x15, // 18: MasterSMLID
    0x02, 0x50, 0xC0, 0x4A, // 20: CapabilityMask
    0x18, 0x19, // 24: DiagCode
    0x1A, 0x1B, // 26: M_KeyLeasePeriod
    0x1C, // 28: LocalPortNum
    0x03, // 29: LinkWidthEnabled 1x|4x
    0x1F, // 30: LinkWidthSupported
    0x02, // 31: LinkWidthActive 4x
    0x74, // 32: LinkSpeedSupported 7 / PortState 4 (Active)
    0x52, // 33: PortPhysicalState 5 (LinkUp) / LinkDownDefaultState 2
    0x85, // 34: M_KeyProtectBits 0b10 / reserved 000 / LMC 0b101
    0x47, // 35: LinkSpeedActive 4 / LinkSpeedEnabled 7
    0x5B, // 36: NeighborMTU 5 / MasterSMSL 0xB
    0x46, // 37: VLCap 4 / InitType 6
    0x26, // 38: VLHighLimit
    0x27, // 39: VLArbitrationHighCap
    0x28, // 40: VLArbitrationLowCap
    0x94, // 41: InitTypeReply 9 / MTUCap 4
    0xD3, // 42: VLStallCount 0b110 / HOQLife 0b10011
    0x3A, // 43: OperationalVLs 3 / PartEnfIn 1 / PartEnfOut 0 / FilterRawIn 1 / FilterRawOut 0
    0x2C, 0x2D, // 44: M_KeyViolations
    0x2E, 0x2F, // 46: P_KeyViolations
    0x30, 0x31, // 48: Q_KeyViolations
    0x32, // 50: GUIDCap
    0xB2, // 51: ClientReregister 1 / McastPKeyTrapSuppression 0b01 / SubnetTimeOut 0b10010
    0x14, // 52: reserved 000 / RespTimeValue 0b10100
    0xA3, // 53: LocalPhyErrors 0xA / OverrunErrors 3
    0x36, 0x37, // 54: MaxCreditHint
    0x2B, 0x39, 0x3A,
    0x3B, // 56: reserved 0 / LinkSpeedExtActive2 1 / Supported2 1 / Enabled2 0b011; 57: LinkRoundTripLatency
    0x3C, 0x3D, // 60: CapabilityMask2
    0x2F, // 62: LinkSpeedExtActive 2 / LinkSpeedExtSupported 0xF
    0x1E, // 63: reserved 000 / LinkSpeedExtEnabled 0b11110
];

fn port_info_repr() -> PortInfoRepr {
    PortInfoRepr {
        m_key: 0x0102_0304_0506_0708,
        gid_prefix: 0xFE80_0000_0000_0011,
        lid: 0x1213,
        master_sm_lid: 0x1415,
        capability_mask: 0x0250_C04A,
        diag_code: 0x1819,
        m_key_lease_period: 0x1A1B,
        local_port_num: 0x1C,
        link_width_enabled: 0x03,
        link_width_supported: 0x1F,
        link_width_active: 0x02,
        link_speed_supported: 7,
        port_state: PortState::Active,
        port_physical_state: PhysPortState::LinkUp,
        link_down_default_state: 2,
        m_key_protect_bits: 2,
        lmc: 5,
        link_speed_active: 4,
        link_speed_enabled: 7,
        neighbor_mtu: 5,
        master_sm_sl: 0xB,
        vl_cap: 4,
        init_type: 6,
        vl_high_limit: 0x26,
        vl_arbitration_high_cap: 0x27,
        vl_arbitration_low_cap: 0x28,
        init_type_reply: 9,
        mtu_cap: 4,
        vl_stall_count: 6,
        hoq_life: 0x13,
        operational_vls: 3,
        partition_enforcement_inbound: true,
        partition_enforcement_outbound: false,
        filter_raw_inbound: true,
        filter_raw_outbound: false,
        m_key_violations: 0x2C2D,
        p_key_violations: 0x2E2F,
        q_key_violations: 0x3031,
        guid_cap: 0x32,
        client_reregister: true,
        multicast_pkey_trap_suppression: 1,
        subnet_timeout: 0x12,
        resp_time_value: 0x14,
        local_phy_errors: 0xA,
        overrun_errors: 3,
        max_credit_hint: 0x3637,
        link_round_trip_latency: 0x39_3A3B,
        capability_mask2: 0x3C3D,
        link_speed_ext_active: 2,
        link_speed_ext_supported: 0xF,
        link_speed_ext_enabled: 0x1E,
        link_speed_ext_active2: 1,
        link_speed_ext_supported2: 1,
        link_speed_ext_enabled2: 3,
    }
}

#[test]
fn port_info_round_trips_every_field() {
    let repr = PortInfoRepr::parse(&PortInfo::new_checked(&PORT_INFO[..]).unwrap()).unwrap();
    assert_eq!(repr, port_info_repr());
    assert_ne!(repr.capability_mask & cap_mask::IS_SM, 0);
    assert_ne!(repr.capability_mask & cap_mask::HAS_CLIENT_REREG, 0);
    let mut out = [0xFFu8; 64];
    repr.emit(&mut PortInfo::new_checked(&mut out[..]).unwrap());
    assert_eq!(out, PORT_INFO);
}

/// libibmad `fields.c` "More PortInfo fields (XDR)": LinkSpeedExtActive2 `BITSOFFS(449, 2)`,
/// LinkSpeedExtSupported2 `BITSOFFS(451, 2)`, LinkSpeedExtEnabled2 `BITSOFFS(453, 3)`, i.e.
/// byte 56 bits 6–5, 4–3 and 2–0; bit 7 alone is reserved. 0x29 = 0 01 01 001: XDR in all three.
#[test]
fn port_info_byte_56_carries_the_xdr_speeds() {
    let mut bytes = PORT_INFO;
    bytes[56] = 0xA9; // reserved bit 7 set, then 0x29
    let view = PortInfo::new_checked(&bytes[..]).unwrap();
    assert_eq!(view.link_speed_ext_active2(), link_speed_ext2::XDR);
    assert_eq!(view.link_speed_ext_supported2(), link_speed_ext2::XDR);
    assert_eq!(view.link_speed_ext_enabled2(), 1);
    assert_eq!(
        view.link_round_trip_latency(),
        0x39_3A3B,
        "byte 56 is not latency"
    );

    let mut cleared = bytes;
    PortInfo::new_checked(&mut cleared[..])
        .unwrap()
        .clear_reserved();
    assert_eq!(cleared[56], 0x29, "only bit 7 of byte 56 is reserved");

    let view = PortInfo::new_checked(&bytes[..]).unwrap();
    let repr = PortInfoRepr::parse(&view).unwrap();
    assert_eq!(
        (
            repr.link_speed_ext_active2,
            repr.link_speed_ext_supported2,
            repr.link_speed_ext_enabled2
        ),
        (1, 1, 1)
    );
    let mut out = [0xFFu8; 64];
    let mut out_view = PortInfo::new_checked(&mut out[..]).unwrap();
    repr.emit(&mut out_view);
    let mut expected = PORT_INFO;
    expected[56] = 0x29;
    assert_eq!(out, expected);

    let mut bytes = [0xFFu8; 64];
    let mut view = PortInfo::new_checked(&mut bytes[..]).unwrap();
    view.set_link_speed_ext_active2(0);
    assert_eq!(bytes[56], 0x9F, "ActiveSpeed2 is bits 6-5");
    let mut view = PortInfo::new_checked(&mut bytes[..]).unwrap();
    view.set_link_speed_ext_supported2(0);
    view.set_link_speed_ext_enabled2(0xFF);
    assert_eq!(
        bytes[56], 0x87,
        "Supported2 bits 4-3 cleared, wide Enabled2 fills only 2-0"
    );
}

/// CapabilityMask2 bits as libibmad `iba_types.h` `IB_PORT_CAP2_*` writes them out.
#[test]
fn cap_mask2_bits_are_libibmads() {
    assert_eq!(
        [
            cap_mask2::SET_NODE_DESCRIPTION_SUPPORTED,
            cap_mask2::PORT_INFO_EXTENDED_SUPPORTED,
            cap_mask2::VIRTUALIZATION_SUPPORTED,
            cap_mask2::SWITCH_PORT_STATE_TABLE_SUPPORTED,
            cap_mask2::LINK_WIDTH_2X_SUPPORTED,
            cap_mask2::LINK_SPEED_HDR_SUPPORTED,
            cap_mask2::LINK_SPEED_NDR_SUPPORTED,
            cap_mask2::EXT_SPEEDS_2_SUPPORTED,
            cap_mask2::LINK_SPEED_XDR_SUPPORTED,
        ],
        [
            0x0001, 0x0002, 0x0004, 0x0008, 0x0010, 0x0020, 0x0400, 0x0800, 0x1000
        ]
    );
}

#[test]
fn port_info_bit_setters_leave_their_neighbours_alone() {
    let mut bytes = [0xFFu8; 64];
    let mut view = PortInfo::new_checked(&mut bytes[..]).unwrap();
    view.set_port_state(PortState::Armed);
    view.set_lmc(0);
    view.set_hoq_life(0);
    view.set_client_reregister(false);
    view.set_link_speed_ext_enabled(0xFF);
    assert_eq!(bytes[32], 0xF3, "LinkSpeedSupported kept, PortState 3");
    assert_eq!(bytes[34], 0xF8, "M_KeyProtectBits and reserved kept, LMC 0");
    assert_eq!(bytes[42], 0xE0, "VLStallCount kept, HOQLife 0");
    assert_eq!(bytes[51], 0x7F, "only ClientReregister cleared");
    assert_eq!(bytes[63], 0xFF, "a wide value fills only the 5-bit field");
    assert!(matches!(
        PortInfo::new_checked(&[0u8; 63][..]),
        Err(Error::Truncated {
            needed: 64,
            got: 63,
            ..
        })
    ));
}

#[test]
fn unnamed_port_states_are_kept() {
    let mut bytes = PORT_INFO;
    bytes[32] = 0x7A; // PortState 0xA: no name
    bytes[33] = 0x92; // PortPhysicalState 9: no name
    let repr = PortInfoRepr::parse(&PortInfo::new_checked(&bytes[..]).unwrap()).unwrap();
    assert_eq!(repr.port_state, PortState::Unknown(0xA));
    assert_eq!(repr.port_physical_state, PhysPortState::Unknown(9));
    let mut out = [0u8; 64];
    repr.emit(&mut PortInfo::new_checked(&mut out[..]).unwrap());
    assert_eq!(out, bytes);
}

const NODE_INFO: [u8; 40] = [
    0x01, // BaseVersion
    0x01, // ClassVersion
    0x02, // NodeType switch
    0x24, // NumPorts 36
    0x00, 0x02, 0xC9, 0x03, 0x00, 0x00, 0x00, 0x01, // SystemImageGUID
    0x00, 0x02, 0xC9, 0x03, 0x00, 0x00, 0x00, 0x02, // NodeGUID
    0x00, 0x02, 0xC9, 0x03, 0x00, 0x00, 0x00, 0x03, // PortGUID
    0x00, 0x08, // PartitionCap
    0xCB, 0x20, // DeviceID
    0x00, 0x00, 0x00, 0xA1, // Revision
    0x11, // LocalPortNum
    0x00, 0x02, 0xC9, // VendorID
];

#[test]
fn node_info_round_trips() {
    let repr = NodeInfoRepr::parse(&NodeInfo::new_checked(&NODE_INFO[..]).unwrap()).unwrap();
    assert_eq!(
        repr,
        NodeInfoRepr {
            base_version: 1,
            class_version: 1,
            node_type: NodeType::Switch,
            num_ports: 36,
            system_image_guid: 0x0002_C903_0000_0001,
            node_guid: 0x0002_C903_0000_0002,
            port_guid: 0x0002_C903_0000_0003,
            partition_cap: 8,
            device_id: 0xCB20,
            revision: 0xA1,
            local_port_num: 0x11,
            vendor_id: 0x0002C9,
        }
    );
    let mut out = [0xFFu8; 40];
    repr.emit(&mut NodeInfo::new_checked(&mut out[..]).unwrap());
    assert_eq!(out, NODE_INFO);
    assert_eq!(NodeType::from(4), NodeType::Unknown(4));
    assert_eq!(u8::from(NodeType::Router), 3);
}

#[test]
fn node_description_is_nul_padded_text() {
    let mut bytes = [0u8; 64];
    bytes[..11].copy_from_slice(b"ibsw-a mlx5");
    let repr =
        NodeDescriptionRepr::parse(&NodeDescription::new_checked(&bytes[..]).unwrap()).unwrap();
    assert_eq!(repr.text(), Ok("ibsw-a mlx5"));
    assert_eq!(NodeDescriptionRepr::from_text("ibsw-a mlx5").unwrap(), repr);
    let mut out = [0xFFu8; 64];
    repr.emit(&mut NodeDescription::new_checked(&mut out[..]).unwrap());
    assert_eq!(out, bytes);
    let long = "x".repeat(65);
    assert_eq!(
        NodeDescriptionRepr::from_text(&long),
        Err(Error::NodeDescriptionTooLong { len: 65 })
    );
    assert_eq!(
        NodeDescriptionRepr::from_text(&long[..64])
            .unwrap()
            .text()
            .unwrap()
            .len(),
        64
    );
    let bad = NodeDescriptionRepr { bytes: [0xFF; 64] };
    assert_eq!(bad.text(), Err(Error::NodeDescriptionNotUtf8));
}

const SWITCH_INFO: [u8; 20] = [
    0xC0, 0x00, // LinearFDBCap 49152
    0x01, 0x02, // RandomFDBCap
    0x04, 0x00, // MulticastFDBCap 1024
    0x01, 0x23, // LinearFDBTop
    0x05, // DefaultPort
    0x06, // DefaultMulticastPrimaryPort
    0x07, // DefaultMulticastNotPrimaryPort
    0x9E, // LifeTimeValue 0b10011 / PortStateChange 1 / OptimizedSLtoVL 0b10
    0x00, 0x04, // LIDsPerPort
    0x00, 0x20, // PartitionEnforcementCap
    0xA8, // Inbound 1 / Outbound 0 / FilterRawIn 1 / FilterRawOut 0 / EnhancedPort0 1 / 000
    0x00, // reserved
    0xC0, 0x1F, // MulticastFDBTop
];

#[test]
fn switch_info_round_trips() {
    let repr = SwitchInfoRepr::parse(&SwitchInfo::new_checked(&SWITCH_INFO[..]).unwrap()).unwrap();
    assert_eq!(
        repr,
        SwitchInfoRepr {
            linear_fdb_cap: 0xC000,
            random_fdb_cap: 0x0102,
            multicast_fdb_cap: 0x0400,
            linear_fdb_top: 0x0123,
            default_port: 5,
            default_mcast_primary_port: 6,
            default_mcast_not_primary_port: 7,
            life_time_value: 0x13,
            port_state_change: true,
            optimized_sl_to_vl_mapping_programming: 2,
            lids_per_port: 4,
            partition_enforcement_cap: 0x20,
            inbound_enforcement_cap: true,
            outbound_enforcement_cap: false,
            filter_raw_inbound_cap: true,
            filter_raw_outbound_cap: false,
            enhanced_port0: true,
            multicast_fdb_top: 0xC01F,
        }
    );
    let mut out = [0xFFu8; 20];
    repr.emit(&mut SwitchInfo::new_checked(&mut out[..]).unwrap());
    assert_eq!(out, SWITCH_INFO);
}

#[test]
fn sm_info_round_trips() {
    let bytes: [u8; 21] = [
        0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, // GUID
        0x88, 0x99, 0xAA, 0xBB, 0xCC, 0xDD, 0xEE, 0xFF, // SM_Key
        0x01, 0x02, 0x03, 0x04, // ActCount
        0xE3, // Priority 14 / SMState 3 (Master)
    ];
    let repr = SmInfoRepr::parse(&SmInfo::new_checked(&bytes[..]).unwrap()).unwrap();
    assert_eq!(
        repr,
        SmInfoRepr {
            guid: 0x0011_2233_4455_6677,
            sm_key: 0x8899_AABB_CCDD_EEFF,
            act_count: 0x0102_0304,
            priority: 14,
            sm_state: SmState::Master,
        }
    );
    let mut out = [0u8; 21];
    repr.emit(&mut SmInfo::new_checked(&mut out[..]).unwrap());
    assert_eq!(out, bytes);
}

const PORT_COUNTERS: [u8; 44] = [
    0x00, // reserved
    0x03, // PortSelect
    0xF0, 0x0F, // CounterSelect
    0x04, 0x05, // SymbolErrorCounter
    0x06, // LinkErrorRecoveryCounter
    0x07, // LinkDownedCounter
    0x08, 0x09, // PortRcvErrors
    0x0A, 0x0B, // PortRcvRemotePhysicalErrors
    0x0C, 0x0D, // PortRcvSwitchRelayErrors
    0x0E, 0x0F, // PortXmitDiscards
    0x10, // PortXmitConstraintErrors
    0x11, // PortRcvConstraintErrors
    0x12, // CounterSelect2
    0x13, // LocalLinkIntegrityErrors 1 / ExcessiveBufferOverrunErrors 3
    0x14, 0x15, // QP1Dropped
    0x16, 0x17, // VL15Dropped
    0x18, 0x19, 0x1A, 0x1B, // PortXmitData
    0x1C, 0x1D, 0x1E, 0x1F, // PortRcvData
    0x20, 0x21, 0x22, 0x23, // PortXmitPkts
    0x24, 0x25, 0x26, 0x27, // PortRcvPkts
    0x28, 0x29, 0x2A, 0x2B, // PortXmitWait
];

#[test]
fn port_counters_round_trip() {
    let repr =
        PortCountersRepr::parse(&PortCounters::new_checked(&PORT_COUNTERS[..]).unwrap()).unwrap();
    assert_eq!(
        repr,
        PortCountersRepr {
            port_select: 3,
            counter_select: 0xF00F,
            symbol_error_counter: 0x0405,
            link_error_recovery_counter: 6,
            link_downed_counter: 7,
            port_rcv_errors: 0x0809,
            port_rcv_remote_physical_errors: 0x0A0B,
            port_rcv_switch_relay_errors: 0x0C0D,
            port_xmit_discards: 0x0E0F,
            port_xmit_constraint_errors: 0x10,
            port_rcv_constraint_errors: 0x11,
            counter_select2: 0x12,
            local_link_integrity_errors: 1,
            excessive_buffer_overrun_errors: 3,
            qp1_dropped: 0x1415,
            vl15_dropped: 0x1617,
            port_xmit_data: 0x1819_1A1B,
            port_rcv_data: 0x1C1D_1E1F,
            port_xmit_packets: 0x2021_2223,
            port_rcv_packets: 0x2425_2627,
            port_xmit_wait: 0x2829_2A2B,
        }
    );
    let mut out = [0xFFu8; 44];
    repr.emit(&mut PortCounters::new_checked(&mut out[..]).unwrap());
    assert_eq!(out, PORT_COUNTERS);
}

const CLASS_PORT_INFO: [u8; 72] = [
    0x01, // BaseVersion
    0x02, // ClassVersion
    0x12, 0x03, // CapabilityMask
    0x02, 0x46, 0x8A, 0xD1, // CapabilityMask2 0x0123456 (27 bits) / RespTimeValue 0x11
    0xFE, 0x80, 0, 0, 0, 0, 0, 0, 0x00, 0x02, 0xC9, 0x03, 0x00, 0x00, 0x00,
    0x05, // RedirectGID
    0x12, 0x34, 0x56, 0x78, // RedirectTC 0x12 / SL 3 / FL 0x45678
    0x00, 0x13, // RedirectLID
    0xFF, 0xFF, // RedirectP_Key
    0x00, 0xAB, 0xCD, 0xEF, // reserved / RedirectQP
    0x80, 0x01, 0x00, 0x00, // RedirectQ_Key
    0xFE, 0x80, 0, 0, 0, 0, 0, 0, 0x00, 0x02, 0xC9, 0x03, 0x00, 0x00, 0x00, 0x06, // TrapGID
    0x21, 0x49, 0xAB, 0xCD, // TrapTC 0x21 / SL 4 / FL 0x9ABCD
    0x00, 0x01, // TrapLID
    0x7F, 0xFF, // TrapP_Key
    0x40, 0x00, 0x00, 0x01, // TrapHL / TrapQP
    0x80, 0x01, 0x00, 0x00, // TrapQ_Key
];

#[test]
fn class_port_info_round_trips() {
    let repr = ClassPortInfoRepr::parse(&ClassPortInfo::new_checked(&CLASS_PORT_INFO[..]).unwrap())
        .unwrap();
    let mut gid = [
        0xFE, 0x80, 0, 0, 0, 0, 0, 0, 0x00, 0x02, 0xC9, 0x03, 0x00, 0x00, 0x00, 0x05,
    ];
    assert_eq!(
        repr,
        ClassPortInfoRepr {
            base_version: 1,
            class_version: 2,
            capability_mask: 0x1203,
            capability_mask2: 0x012_3456,
            resp_time_value: 0x11,
            redirect_gid: gid,
            redirect_tc: 0x12,
            redirect_sl: 3,
            redirect_fl: 0x4_5678,
            redirect_lid: 0x13,
            redirect_pkey: 0xFFFF,
            redirect_qp: 0xAB_CDEF,
            redirect_qkey: 0x8001_0000,
            trap_gid: {
                gid[15] = 6;
                gid
            },
            trap_tc: 0x21,
            trap_sl: 4,
            trap_fl: 0x9_ABCD,
            trap_lid: 1,
            trap_pkey: 0x7FFF,
            trap_hop_limit: 0x40,
            trap_qp: 1,
            trap_qkey: 0x8001_0000,
        }
    );
    assert_eq!(repr.capability_mask & pma_cap::ALL_PORT_SELECT, 0);
    assert_ne!(repr.capability_mask & pma_cap::XMIT_WAIT, 0);
    assert_ne!(repr.capability_mask & pma_cap::EXT_WIDTH, 0);
    let mut out = [0xFFu8; 72];
    repr.emit(&mut ClassPortInfo::new_checked(&mut out[..]).unwrap());
    assert_eq!(out, CLASS_PORT_INFO);
}

/// PMA CapabilityMask bits as OpenSM `ib_types.h` writes them out: `IB_PM_ALL_PORT_SELECT`
/// `1 << 8`, `IB_PM_EXT_WIDTH_SUPPORTED` `1 << 9`, `IB_PM_EXT_WIDTH_NOIETF_SUP` `1 << 10`,
/// `IB_PM_SAMPLES_ONLY_SUP` `1 << 11`, `IB_PM_PC_XMIT_WAIT_SUP` `1 << 12`,
/// `IB_PM_IS_QP1_DROP_SUP` `1 << 15`.
#[test]
fn pma_cap_bits_are_opensms() {
    assert_eq!(
        [
            pma_cap::ALL_PORT_SELECT,
            pma_cap::EXT_WIDTH,
            pma_cap::EXT_WIDTH_NOIETF,
            pma_cap::SAMPLES_ONLY,
            pma_cap::XMIT_WAIT,
            pma_cap::IS_QP1_DROP,
        ],
        [0x0100, 0x0200, 0x0400, 0x0800, 0x1000, 0x8000]
    );
}

#[test]
fn trap_128_notice_is_laid_out_as_a_switch_sends_it() {
    let mut expected = [0u8; 64];
    expected[..12].copy_from_slice(&[
        0x81, // IsGeneric 1 / Type 1 (Urgent)
        0x00, 0x00, 0x02, // ProducerType: switch
        0x00, 0x80, // TrapNumber 128
        0x00, 0x07, // IssuerLID
        0x00, 0x00, // NoticeToggle 0 / NoticeCount 0
        0x00, 0x07, // DataDetails: LIDADDR
    ]);
    let repr = NoticeRepr::port_state_change(7);
    let mut out = [0xFFu8; 64];
    repr.emit(&mut Notice::new_checked(&mut out[..]).unwrap());
    assert_eq!(out, expected);
    let parsed = NoticeRepr::parse(&Notice::new_checked(&expected[..]).unwrap()).unwrap();
    assert_eq!(parsed, repr);
    assert_eq!(parsed.port_state_change_lid(), Some(7));
}

#[test]
fn trap_144_notice_is_laid_out_as_ibsim_sends_it() {
    // ibsim `encode_trap144` with libibmad's fields: IsGeneric 1, Type 4, producer = node
    // type, TrapNumber 144, IssuerLID; NoticeDataTrap144LID at bit 96 of the Notice (byte 12),
    // NoticeDataTrap144CapMask at bit 128 (byte 16).
    let mut expected = [0u8; 64];
    expected[..20].copy_from_slice(&[
        0x84, // IsGeneric 1 / Type 4 (Informational)
        0x00, 0x00, 0x01, // ProducerType: CA
        0x00, 0x90, // TrapNumber 144
        0x00, 0x05, // IssuerLID
        0x00, 0x00, // NoticeToggle 0 / NoticeCount 0
        0x00, 0x00, // DataDetails: reserved
        0x00, 0x05, // LIDADDR
        0x00, 0x00, // reserved, OtherLocalChanges 0
        0x00, 0x50, 0xC0, 0x48, // CapabilityMask
    ]);
    let repr = NoticeRepr::capability_mask_change(1, 5, 0x0050_C048);
    let mut out = [0xFFu8; 64];
    repr.emit(&mut Notice::new_checked(&mut out[..]).unwrap());
    assert_eq!(out, expected);
    assert_eq!(
        NoticeRepr::parse(&Notice::new_checked(&expected[..]).unwrap()).unwrap(),
        repr
    );
    assert_eq!(repr.port_state_change_lid(), None);
}

#[test]
fn trap_256_notice_is_laid_out_as_the_kernel_sma_sends_it() {
    // Kernel `struct ib_mad_notice_attr` ntc_256 (OpenSM's is the same): reserved 2, LIDADDR 2,
    // DRSLID 2, Method 1, reserved 1, AttributeID 2, AttributeModifier 4, M_Key 8, reserved 1,
    // DRNotice/DRPathTruncated/DRHopCount 1, DRNoticeReturnPath 30; at Notice byte 10 + n.
    let lid_routed = BadMkey {
        lid: 0x0102,
        method: 0x02,
        attr_id: 0x0015,
        attr_mod: 0x0000_0003,
        m_key: 0x1122_3344_5566_7788,
        directed: None,
    };
    let mut expected = [0u8; 64];
    expected[..34].copy_from_slice(&[
        0x82, // IsGeneric 1 / Type 2 (Security)
        0x00, 0x00, 0x02, // ProducerType: switch
        0x01, 0x00, // TrapNumber 256
        0x00, 0x09, // IssuerLID
        0x00, 0x00, // NoticeToggle 0 / NoticeCount 0
        0x00, 0x00, // reserved
        0x01, 0x02, // LIDADDR
        0x00, 0x00, // DRSLID
        0x02, 0x00, // Method, reserved
        0x00, 0x15, // AttributeID
        0x00, 0x00, 0x00, 0x03, // AttributeModifier
        0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, // M_Key
        0x00, // reserved
        0x00, // not directed-route
    ]);
    let repr = NoticeRepr::bad_mkey(2, 9, &lid_routed);
    let mut out = [0xFFu8; 64];
    repr.emit(&mut Notice::new_checked(&mut out[..]).unwrap());
    assert_eq!(out, expected);

    // Directed route, 3 hops: DRSLID, DRNotice | 3, the first 3 ReturnPath bytes.
    let mut return_path = [0u8; 64];
    return_path[..5].copy_from_slice(&[0, 1, 3, 1, 9]);
    let directed = BadMkey {
        directed: Some(BadMkeyRoute {
            dr_slid: 0xFFFF,
            hop_count: 3,
            return_path,
        }),
        ..lid_routed
    };
    expected[14..16].copy_from_slice(&[0xFF, 0xFF]);
    expected[33] = 0x83;
    expected[34..37].copy_from_slice(&[0, 1, 3]);
    NoticeRepr::bad_mkey(2, 9, &directed).emit(&mut Notice::new_checked(&mut out[..]).unwrap());
    assert_eq!(out, expected);

    // 40 hops: 30 bytes kept, DRPathTruncated, DRHopCount 30.
    let long = BadMkey {
        directed: Some(BadMkeyRoute {
            dr_slid: 0xFFFF,
            hop_count: 40,
            return_path: [7; 64],
        }),
        ..lid_routed
    };
    NoticeRepr::bad_mkey(2, 9, &long).emit(&mut Notice::new_checked(&mut out[..]).unwrap());
    assert_eq!(out[33], 0x80 | 0x40 | 0x1E);
    assert_eq!(out[34..64], [7u8; 30]);
}

#[test]
fn traps_257_and_258_are_laid_out_as_the_kernel_sma_sends_them() {
    // Kernel and OpenSM ntc_257_258: reserved 2, LIDADDR1 2, LIDADDR2 2, Key 4, SL (4 bits) /
    // reserved 4 / QP1 24, reserved 8 / QP2 24, GIDADDR1 16, GIDADDR2 16; at Notice byte 10 + n.
    // The kernel (`qib_bad_pqkey`) writes a P_Key as a 32-bit Key, so it sits in Key's low half.
    let mut gid1 = [0u8; 16];
    gid1[0] = 0xFE;
    gid1[15] = 0x01;
    let mut gid2 = [0u8; 16];
    gid2[0] = 0xFE;
    gid2[15] = 0x02;
    let packet = BadKey {
        lid1: 0x0102,
        lid2: 0x0304,
        key: 0x0000_8001,
        sl: 0x3,
        qp1: 0xAB_CDEF,
        qp2: 0x01,
        gid1,
        gid2,
    };
    let mut expected = [0u8; 64];
    expected[..28].copy_from_slice(&[
        0x82, // IsGeneric 1 / Type 2 (Security)
        0x00, 0x00, 0x01, // ProducerType: CA
        0x01, 0x01, // TrapNumber 257
        0x00, 0x07, // IssuerLID
        0x00, 0x00, // NoticeToggle 0 / NoticeCount 0
        0x00, 0x00, // reserved
        0x01, 0x02, // LIDADDR1
        0x03, 0x04, // LIDADDR2
        0x00, 0x00, 0x80, 0x01, // Key: the P_Key
        0x30, 0xAB, 0xCD, 0xEF, // SL 3, QP1
        0x00, 0x00, 0x00, 0x01, // QP2
    ]);
    expected[28] = 0xFE;
    expected[43] = 0x01;
    expected[44] = 0xFE;
    expected[59] = 0x02;
    let mut out = [0xFFu8; 64];
    NoticeRepr::bad_pkey(1, 7, &packet).emit(&mut Notice::new_checked(&mut out[..]).unwrap());
    assert_eq!(out, expected);

    // Trap 258 from a switch: the Q_Key fills Key; QP numbers keep their 24 bits only.
    let qkey = BadKey {
        key: 0x8001_0001,
        sl: 0x1F,
        qp1: 0xFF00_0001,
        qp2: 0xFF00_0001,
        ..packet
    };
    expected[3] = 0x02;
    expected[5] = 0x02;
    expected[16..28].copy_from_slice(&[
        0x80, 0x01, 0x00, 0x01, // Key: the Q_Key
        0xF0, 0x00, 0x00, 0x01, // SL 15 (4 bits), QP1 1
        0x00, 0x00, 0x00, 0x01, // QP2 1
    ]);
    NoticeRepr::bad_qkey(2, 7, &qkey).emit(&mut Notice::new_checked(&mut out[..]).unwrap());
    assert_eq!(out, expected);
}

/// DataDetails of the traps the SA and SMAs send, laid out by hand from OpenSM `ib_types.h`
/// `ib_mad_notice_attr_t.data_details`: `ntc_64_67` (res[6], gid), `ntc_128` (sw_lid),
/// `ntc_129_131` (pad 2, lid, port_num), `ntc_144` (pad1 2, lid, pad2, local_changes,
/// new_cap_mask, change_flgs, cap_mask2), `ntc_145` (pad1 2, lid, pad2 2, new_sys_guid).
#[test]
fn notice_data_details_are_read_at_opensms_offsets() {
    let gid = [
        0xFE, 0x80, 0, 0, 0, 0, 0, 0, 0x00, 0x02, 0xC9, 0x03, 0x00, 0x00, 0xAB, 0xCD,
    ];
    let mut d = [0u8; 54];
    d[6..22].copy_from_slice(&gid);
    assert_eq!(
        DataDetails::new(&d).ntc_64_67_gid(),
        gid,
        "trap 64-67 GID at 6"
    );

    let mut d = [0u8; 54];
    d[..2].copy_from_slice(&[0x00, 0x2A]);
    assert_eq!(DataDetails::new(&d).ntc_128_lid(), 42, "trap 128 LID at 0");

    let mut d = [0u8; 54];
    d[..5].copy_from_slice(&[0x00, 0x00, 0x12, 0x34, 0x07]);
    let v = DataDetails::new(&d);
    assert_eq!((v.ntc_129_131_lid(), v.ntc_129_131_port()), (0x1234, 7));

    let mut d = [0u8; 54];
    d[..14].copy_from_slice(&[
        0x00, 0x00, // pad1
        0x00, 0x05, // lid
        0x00, // pad2
        0x01, // local_changes: OtherLocalChanges
        0x02, 0x5A, 0x08, 0x4A, // new_cap_mask
        0x00, 0x21, // change_flgs: CapabilityMask2 | NodeDescription
        0x08, 0x00, // cap_mask2
    ]);
    let v = DataDetails::new(&d);
    assert_eq!(v.ntc_144_lid(), 5);
    assert!(v.ntc_144_other_local_changes());
    assert_eq!(v.ntc_144_capability_mask(), 0x025A_084A);
    assert_eq!(
        v.ntc_144_change_flags(),
        change_flags::CAPABILITY_MASK2 | change_flags::NODE_DESCRIPTION
    );
    assert_eq!(v.ntc_144_capability_mask2(), 0x0800);

    let mut d = [0u8; 54];
    d[..14].copy_from_slice(&[
        0x00, 0x00, 0x00, 0x09, 0x00, 0x00, 0x00, 0x02, 0xC9, 0x03, 0x00, 0x11, 0x22, 0x33,
    ]);
    let v = DataDetails::new(&d);
    assert_eq!(
        (v.ntc_145_lid(), v.ntc_145_system_image_guid()),
        (9, 0x0002_C903_0011_2233)
    );

    // OpenSM SM_GID_IN_SERVICE_TRAP .. SM_REPATH_TRAP and TRAP_144_MASK_* values.
    assert_eq!(
        [
            trap::GID_IN_SERVICE,
            trap::GID_OUT_OF_SERVICE,
            trap::MGID_CREATED,
            trap::MGID_DESTROYED,
            trap::UNPATH,
            trap::REPATH,
        ],
        [64, 65, 66, 67, 68, 69]
    );
    assert_eq!(
        [
            change_flags::NODE_DESCRIPTION,
            change_flags::LINK_WIDTH_ENABLED,
            change_flags::LINK_SPEED_ENABLED,
            change_flags::SM_PRIORITY,
            change_flags::HIERARCHY_INFO,
            change_flags::CAPABILITY_MASK2,
        ],
        [0x0001, 0x0002, 0x0004, 0x0008, 0x0010, 0x0020]
    );
}

/// The traps we build read back through the per-trap accessors, from bytes laid out by hand
/// (kernel/OpenSM `ntc_256` and `ntc_257_258`, Notice byte 10 + n).
#[test]
fn notice_data_details_read_back_traps_256_to_258() {
    let mut n = [0u8; 64];
    n[10..64].copy_from_slice(&{
        let mut d = [0u8; 54];
        d[..24].copy_from_slice(&[
            0x00, 0x00, 0x01, 0x02, 0xFF, 0xFF, 0x02, 0x00, 0x00, 0x15, 0x00, 0x00, 0x00, 0x03,
            0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x00, 0xC3,
        ]);
        d[24..27].copy_from_slice(&[0, 1, 3]);
        d
    });
    let view = Notice::new_checked(&n[..]).unwrap();
    let v = view.details();
    assert_eq!((v.ntc_256_lid(), v.ntc_256_dr_slid()), (0x0102, 0xFFFF));
    assert_eq!((v.ntc_256_method(), v.ntc_256_attr_id()), (0x02, 0x0015));
    assert_eq!(v.ntc_256_attr_mod(), 3);
    assert_eq!(v.ntc_256_m_key(), 0x1122_3344_5566_7788);
    assert!(v.ntc_256_dr_notice() && v.ntc_256_dr_path_truncated());
    assert_eq!(v.ntc_256_dr_hop_count(), 3);
    assert_eq!(v.ntc_256_dr_return_path()[..4], [0, 1, 3, 0]);

    let mut d = [0u8; 54];
    d[..18].copy_from_slice(&[
        0x00, 0x00, 0x01, 0x02, 0x03, 0x04, 0x80, 0x01, 0x00, 0x01, 0xF0, 0xAB, 0xCD, 0xEF, 0xFF,
        0x00, 0x00, 0x01,
    ]);
    d[18] = 0xFE;
    d[33] = 0x01;
    d[34] = 0xFE;
    d[49] = 0x02;
    let v = DataDetails::new(&d);
    assert_eq!(
        (v.ntc_257_258_lid1(), v.ntc_257_258_lid2()),
        (0x0102, 0x0304)
    );
    assert_eq!(v.ntc_257_258_key(), 0x8001_0001);
    assert_eq!(v.ntc_257_258_sl(), 15);
    assert_eq!(v.ntc_257_258_qp1(), 0xAB_CDEF);
    assert_eq!(v.ntc_257_258_qp2(), 1, "reserved byte above QP2 ignored");
    assert_eq!(
        (v.ntc_257_258_gid1()[0], v.ntc_257_258_gid1()[15]),
        (0xFE, 0x01)
    );
    assert_eq!(
        (v.ntc_257_258_gid2()[0], v.ntc_257_258_gid2()[15]),
        (0xFE, 0x02)
    );

    // The Repr's view reads what the constructors wrote.
    let repr = NoticeRepr::capability_mask_change(1, 5, 0x0050_C048);
    assert_eq!(repr.details().ntc_144_lid(), 5);
    assert_eq!(repr.details().ntc_144_capability_mask(), 0x0050_C048);
}

#[test]
fn vendor_notice_and_issuer_gid_round_trip() {
    let mut bytes = [0u8; 80];
    bytes[..10].copy_from_slice(&[
        0x03, // IsGeneric 0 / Type 3
        0x00, 0x02, 0xC9, // VendorID
        0xCB, 0x20, // DeviceID
        0x12, 0x34, // IssuerLID
        0x92, 0x34, // NoticeToggle 1 / NoticeCount 0x1234
    ]);
    bytes[10] = 0xDD;
    bytes[63] = 0xEE;
    bytes[64..80].copy_from_slice(&[0xFE, 0x80, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8]);
    let view = Notice::new_checked(&bytes[..]).unwrap();
    assert_eq!(
        view.issuer_gid(),
        Some([0xFE, 0x80, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8])
    );
    assert_eq!(
        Notice::new_checked(&bytes[..64]).unwrap().issuer_gid(),
        None
    );
    let repr = NoticeRepr::parse(&view).unwrap();
    assert!(!repr.is_generic);
    assert_eq!(repr.notice_type, 3);
    assert_eq!(repr.producer_type_or_vendor_id, 0x0002C9);
    assert_eq!(repr.trap_number_or_device_id, 0xCB20);
    assert_eq!(repr.issuer_lid, 0x1234);
    assert!(repr.notice_toggle);
    assert_eq!(repr.notice_count, 0x1234);
    assert_eq!((repr.data_details[0], repr.data_details[53]), (0xDD, 0xEE));
    assert_eq!(repr.port_state_change_lid(), None);
    let mut out = [0u8; 80];
    let mut view = Notice::new_checked(&mut out[..]).unwrap();
    repr.emit(&mut view);
    assert!(view.set_issuer_gid([0xFE, 0x80, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8]));
    assert_eq!(out, bytes);
    let mut short = [0u8; 64];
    assert!(
        !Notice::new_checked(&mut short[..])
            .unwrap()
            .set_issuer_gid([1; 16])
    );
}

#[test]
fn tables_round_trip() {
    // P_KeyTable: 32 big-endian P_Keys.
    let mut pkeys = [0u8; 64];
    pkeys[..6].copy_from_slice(&[0xFF, 0xFF, 0x80, 0x01, 0x7F, 0xFF]);
    pkeys[62..].copy_from_slice(&[0x12, 0x34]);
    let repr = PkeyTableRepr::parse(&PkeyTable::new_checked(&pkeys[..]).unwrap()).unwrap();
    assert_eq!(repr.pkeys[..3], [0xFFFF, 0x8001, 0x7FFF]);
    assert_eq!(repr.pkeys[31], 0x1234);
    let mut out = [0xAAu8; 64];
    repr.emit(&mut PkeyTable::new_checked(&mut out[..]).unwrap());
    assert_eq!(out, pkeys);

    // GUIDInfo: 8 big-endian GUIDs.
    let mut guids = [0u8; 64];
    guids[..8].copy_from_slice(&[0x00, 0x02, 0xC9, 0x03, 0x00, 0x00, 0x00, 0x05]);
    guids[56..].copy_from_slice(&[0x80, 0, 0, 0, 0, 0, 0, 0x01]);
    let repr = GuidInfoRepr::parse(&GuidInfo::new_checked(&guids[..]).unwrap()).unwrap();
    assert_eq!(repr.guids[0], 0x0002_C903_0000_0005);
    assert_eq!(repr.guids[7], 0x8000_0000_0000_0001);
    let mut out = [0xAAu8; 64];
    repr.emit(&mut GuidInfo::new_checked(&mut out[..]).unwrap());
    assert_eq!(out, guids);

    // LinearForwardingTable: one port byte per LID.
    let mut lft = [0xFFu8; 64];
    lft[..4].copy_from_slice(&[0x00, 0x01, 0x02, 0x24]);
    let repr =
        LinearForwardingTableRepr::parse(&LinearForwardingTable::new_checked(&lft[..]).unwrap())
            .unwrap();
    assert_eq!(repr.ports[..5], [0, 1, 2, 0x24, 0xFF]);
    let mut out = [0u8; 64];
    repr.emit(&mut LinearForwardingTable::new_checked(&mut out[..]).unwrap());
    assert_eq!(out, lft);
    assert_eq!(block_and_index(0), (0, 0));
    assert_eq!(block_and_index(130), (2, 2));
    assert_eq!(block_and_index(0xBFFF), (767, 63));

    // MulticastForwardingTable: 32 big-endian port masks.
    let mut mft = [0u8; 64];
    mft[..2].copy_from_slice(&[0x00, 0x06]);
    mft[62..].copy_from_slice(&[0x80, 0x01]);
    let repr = MulticastForwardingTableRepr::parse(
        &MulticastForwardingTable::new_checked(&mft[..]).unwrap(),
    )
    .unwrap();
    assert_eq!((repr.port_masks[0], repr.port_masks[31]), (0x0006, 0x8001));
    let mut out = [0xAAu8; 64];
    repr.emit(&mut MulticastForwardingTable::new_checked(&mut out[..]).unwrap());
    assert_eq!(out, mft);

    // SLtoVLMappingTable: SL 0 in the high nibble of byte 0.
    let sl2vl = [0x01, 0x23, 0x45, 0x67, 0x89, 0xAB, 0xCD, 0xEF];
    let repr = SlToVlTableRepr::parse(&SlToVlTable::new_checked(&sl2vl[..]).unwrap()).unwrap();
    assert_eq!(
        repr.vls,
        [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]
    );
    let mut out = [0u8; 8];
    repr.emit(&mut SlToVlTable::new_checked(&mut out[..]).unwrap());
    assert_eq!(out, sl2vl);

    // VLArbitrationTable: (reserved 4 bits | VL 4 bits, weight) pairs.
    let mut vlarb = [0u8; 64];
    vlarb[..6].copy_from_slice(&[0x00, 0x20, 0x01, 0x40, 0x0F, 0xFF]);
    let repr = VlArbTableRepr::parse(&VlArbTable::new_checked(&vlarb[..]).unwrap()).unwrap();
    assert_eq!(
        repr.entries[..3],
        [
            VlArbEntry {
                vl: 0,
                weight: 0x20
            },
            VlArbEntry {
                vl: 1,
                weight: 0x40
            },
            VlArbEntry {
                vl: 15,
                weight: 0xFF
            }
        ]
    );
    let mut out = [0xAAu8; 64];
    repr.emit(&mut VlArbTable::new_checked(&mut out[..]).unwrap());
    assert_eq!(out, vlarb);
    let mut reserved_set = vlarb;
    reserved_set[0] = 0xF3;
    let view = VlArbTable::new_checked(&reserved_set[..]).unwrap();
    assert_eq!(
        view.entry(0),
        Ok(VlArbEntry {
            vl: 3,
            weight: 0x20
        })
    );
}

#[test]
fn table_indexes_from_the_wire_are_checked() {
    let bytes = [0u8; 64];
    assert_eq!(
        PkeyTable::new_checked(&bytes[..]).unwrap().pkey(32),
        Err(Error::IndexOutOfRange {
            table: "a P_KeyTable block",
            index: 32,
            len: 32
        })
    );
    assert!(GuidInfo::new_checked(&bytes[..]).unwrap().guid(8).is_err());
    assert!(
        LinearForwardingTable::new_checked(&bytes[..])
            .unwrap()
            .port(64)
            .is_err()
    );
    assert!(
        MulticastForwardingTable::new_checked(&bytes[..])
            .unwrap()
            .port_mask(32)
            .is_err()
    );
    assert!(
        SlToVlTable::new_checked(&bytes[..8])
            .unwrap()
            .vl(16)
            .is_err()
    );
    assert!(
        VlArbTable::new_checked(&bytes[..])
            .unwrap()
            .entry(32)
            .is_err()
    );
    let mut buf = [0u8; 64];
    let mut pk = PkeyTable::new_checked(&mut buf[..]).unwrap();
    pk.set_pkey(31, 0xFFFF).unwrap();
    assert!(pk.set_pkey(32, 0xFFFF).is_err());
    assert_eq!(buf[62..], [0xFF, 0xFF]);
}

#[test]
fn attribute_modifiers_split_as_the_spec_says() {
    // P_KeyTable: block in bits 0-15, port in bits 16-31.
    assert_eq!(
        PkeyAttrMod::from_attr_mod(0x0005_0002),
        PkeyAttrMod { block: 2, port: 5 }
    );
    assert_eq!(PkeyAttrMod { block: 2, port: 5 }.to_attr_mod(), 0x0005_0002);
    // SLtoVLMappingTable: input port in bits 8-15, output port in bits 0-7.
    let sl = SlToVlAttrMod {
        input_port: 3,
        output_port: 7,
    };
    assert_eq!(sl.to_attr_mod(), 0x0307);
    assert_eq!(SlToVlAttrMod::from_attr_mod(0x0307), sl);
    // VLArbitrationTable: block in bits 16-31, port in bits 0-15.
    let vl = VlArbAttrMod { block: 3, port: 9 };
    assert_eq!(vl.to_attr_mod(), 0x0003_0009);
    assert_eq!(VlArbAttrMod::from_attr_mod(0x0003_0009), vl);
    // MulticastForwardingTable: block in bits 0-8, position in bits 28-31.
    let mft = MftAttrMod {
        block: 0x1FF,
        position: 2,
    };
    assert_eq!(mft.to_attr_mod(), 0x2000_01FF);
    assert_eq!(
        MftAttrMod::from_attr_mod(0x2FFF_FE03),
        MftAttrMod {
            block: 3,
            position: 2
        }
    );
}

/// PortCountersExtended, laid out from libibmad `fields.c` (`IB_PC_EXT_*`: PortSelect bits
/// 8–15, CounterSelect 16–31, then eight 64-bit counters from bit 64) and the kernel's
/// `struct ib_pma_portcounters_ext` (reserved u8, port_select, counter_select, then a u32 the
/// kernel calls reserved and libibmad and OpenSM CounterSelect2).
const PORT_COUNTERS_EXT: [u8; 72] = [
    0x00, // reserved
    0x05, // PortSelect
    0x00, 0xA5, // CounterSelect
    0x00, 0x00, 0x00, 0x00, // CounterSelect2 (not carried by the Repr)
    0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, // 8: PortXmitData
    0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, // 16: PortRcvData
    0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0x27, 0x28, // 24: PortXmitPkts
    0x31, 0x32, 0x33, 0x34, 0x35, 0x36, 0x37, 0x38, // 32: PortRcvPkts
    0x41, 0x42, 0x43, 0x44, 0x45, 0x46, 0x47, 0x48, // 40: PortUnicastXmitPkts
    0x51, 0x52, 0x53, 0x54, 0x55, 0x56, 0x57, 0x58, // 48: PortUnicastRcvPkts
    0x61, 0x62, 0x63, 0x64, 0x65, 0x66, 0x67, 0x68, // 56: PortMulticastXmitPkts
    0x71, 0x72, 0x73, 0x74, 0x75, 0x76, 0x77, 0x78, // 64: PortMulticastRcvPkts
];

/// CounterSelect2 is libibmad `fields.c` `{32, 32, "CounterSelect2"}` of PortCountersExtended
/// (bytes 4–7, big-endian) and OpenSM `ib_port_counters_ext_t.counter_select2` (`ib_net32_t`
/// after `counter_select`): not reserved.
#[test]
fn port_counters_ext_counter_select2_is_bytes_4_to_7() {
    let mut bytes = PORT_COUNTERS_EXT;
    bytes[..8].copy_from_slice(&[0xEE, 0x05, 0x00, 0xA5, 0x80, 0x00, 0x12, 0x34]);
    let view = PortCountersExt::new_checked(&bytes[..]).unwrap();
    assert_eq!(view.counter_select2(), 0x8000_1234);
    assert_eq!(view.counter_select(), 0x00A5);

    let mut cleared = bytes;
    PortCountersExt::new_checked(&mut cleared[..])
        .unwrap()
        .clear_reserved();
    assert_eq!(
        cleared[..8],
        [0x00, 0x05, 0x00, 0xA5, 0x80, 0x00, 0x12, 0x34],
        "only byte 0 is reserved"
    );

    let mut out = PORT_COUNTERS_EXT;
    PortCountersExt::new_checked(&mut out[..])
        .unwrap()
        .set_counter_select2(0x0102_0304);
    assert_eq!(out[2..8], [0x00, 0xA5, 0x01, 0x02, 0x03, 0x04]);
    assert_eq!(out[8..], PORT_COUNTERS_EXT[8..]);
}

#[test]
fn port_counters_ext_round_trip() {
    let repr =
        PortCountersExtRepr::parse(&PortCountersExt::new_checked(&PORT_COUNTERS_EXT[..]).unwrap())
            .unwrap();
    assert_eq!(
        repr,
        PortCountersExtRepr {
            port_select: 5,
            counter_select: 0x00A5,
            port_xmit_data: 0x0102_0304_0506_0708,
            port_rcv_data: 0x1112_1314_1516_1718,
            port_xmit_packets: 0x2122_2324_2526_2728,
            port_rcv_packets: 0x3132_3334_3536_3738,
            port_unicast_xmit_packets: 0x4142_4344_4546_4748,
            port_unicast_rcv_packets: 0x5152_5354_5556_5758,
            port_multicast_xmit_packets: 0x6162_6364_6566_6768,
            port_multicast_rcv_packets: 0x7172_7374_7576_7778,
        }
    );
    let mut out = [0xFFu8; 72];
    repr.emit(&mut PortCountersExt::new_checked(&mut out[..]).unwrap());
    assert_eq!(out, PORT_COUNTERS_EXT);
    assert!(matches!(
        PortCountersExt::new_checked(&PORT_COUNTERS_EXT[..71]),
        Err(Error::Truncated { .. })
    ));
}

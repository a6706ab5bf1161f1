//! SwitchInfo (SM attribute 0x0012; IBA 14.2.5.4, OpenSM `ib_switch_info_t`, bit offsets as
//! libibmad `fields.c`). The attribute is 20 bytes (ibsim and OpenSM read no more).
//!
//! | Offset | Field |
//! |---|---|
//! | 0 | LinearFDBCap (2) |
//! | 2 | RandomFDBCap (2) |
//! | 4 | MulticastFDBCap (2) |
//! | 6 | LinearFDBTop (2) |
//! | 8 | DefaultPort |
//! | 9 | DefaultMulticastPrimaryPort |
//! | 10 | DefaultMulticastNotPrimaryPort |
//! | 11 | LifeTimeValue (5) / PortStateChange (1) / OptimizedSLtoVLMappingProgramming (2) |
//! | 12 | LIDsPerPort (2) |
//! | 14 | PartitionEnforcementCap (2) |
//! | 16 | InboundEnforcementCap / OutboundEnforcementCap / FilterRawInboundCap / FilterRawOutboundCap / EnhancedPort0 / reserved (3) |
//! | 17 | reserved |
//! | 18 | MulticastFDBTop (2) |

use crate::error::{Result, check_len};
use crate::field::{set_bits_at, set_u16_at, u16_at};
use crate::macros::{bits_get, bits_set, byte_get, byte_set, flag_get, flag_set};

/// Length of SwitchInfo.
pub const LEN: usize = 20;

mod field {
    pub const LINEAR_FDB_CAP: usize = 0;
    pub const RANDOM_FDB_CAP: usize = 2;
    pub const MULTICAST_FDB_CAP: usize = 4;
    pub const LINEAR_FDB_TOP: usize = 6;
    pub const DEFAULT_PORT: usize = 8;
    pub const DEFAULT_MCAST_PRIMARY_PORT: usize = 9;
    pub const DEFAULT_MCAST_NOT_PRIMARY_PORT: usize = 10;
    /// LifeTimeValue (7–3) / PortStateChange (2) / OptimizedSLtoVL (1–0).
    pub const LIFE_STATE: usize = 11;
    pub const LIDS_PER_PORT: usize = 12;
    pub const PARTITION_ENFORCEMENT_CAP: usize = 14;
    /// Inbound (7) / Outbound (6) / FilterRawIn (5) / FilterRawOut (4) / EnhancedPort0 (3).
    pub const FLAGS: usize = 16;
    pub const RESERVED: usize = 17;
    pub const MULTICAST_FDB_TOP: usize = 18;
}

/// A typed view of a SwitchInfo attribute.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SwitchInfo<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> SwitchInfo<T> {
    /// Views `buffer` as SwitchInfo, checking that it holds 20 bytes.
    pub fn new_checked(buffer: T) -> Result<Self> {
        check_len("SwitchInfo", buffer.as_ref(), LEN)?;
        Ok(Self { buffer })
    }

    /// Gives the buffer back.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// LinearFDBCap: LinearForwardingTable entries supported.
    pub fn linear_fdb_cap(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field::LINEAR_FDB_CAP)
    }

    /// RandomFDBCap.
    pub fn random_fdb_cap(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field::RANDOM_FDB_CAP)
    }

    /// MulticastFDBCap.
    pub fn multicast_fdb_cap(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field::MULTICAST_FDB_CAP)
    }

    /// LinearFDBTop: the highest LID in use in the LinearForwardingTable.
    pub fn linear_fdb_top(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field::LINEAR_FDB_TOP)
    }

    byte_get!(default_port, field::DEFAULT_PORT, "DefaultPort.");
    byte_get!(
        default_mcast_primary_port,
        field::DEFAULT_MCAST_PRIMARY_PORT,
        "DefaultMulticastPrimaryPort."
    );
    byte_get!(
        default_mcast_not_primary_port,
        field::DEFAULT_MCAST_NOT_PRIMARY_PORT,
        "DefaultMulticastNotPrimaryPort."
    );
    bits_get!(
        life_time_value,
        field::LIFE_STATE,
        3,
        5,
        "LifeTimeValue, 5 bits."
    );
    flag_get!(
        port_state_change,
        field::LIFE_STATE,
        2,
        "PortStateChange: a port changed state since the SM last cleared it."
    );
    bits_get!(
        optimized_sl_to_vl_mapping_programming,
        field::LIFE_STATE,
        0,
        2,
        "OptimizedSLtoVLMappingProgramming, 2 bits."
    );

    /// LIDsPerPort.
    pub fn lids_per_port(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field::LIDS_PER_PORT)
    }

    /// PartitionEnforcementCap.
    pub fn partition_enforcement_cap(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field::PARTITION_ENFORCEMENT_CAP)
    }

    flag_get!(
        inbound_enforcement_cap,
        field::FLAGS,
        7,
        "InboundEnforcementCap."
    );
    flag_get!(
        outbound_enforcement_cap,
        field::FLAGS,
        6,
        "OutboundEnforcementCap."
    );
    flag_get!(
        filter_raw_inbound_cap,
        field::FLAGS,
        5,
        "FilterRawInboundCap."
    );
    flag_get!(
        filter_raw_outbound_cap,
        field::FLAGS,
        4,
        "FilterRawOutboundCap."
    );
    flag_get!(enhanced_port0, field::FLAGS, 3, "EnhancedPort0.");

    /// MulticastFDBTop.
    pub fn multicast_fdb_top(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field::MULTICAST_FDB_TOP)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> SwitchInfo<T> {
    /// Sets LinearFDBCap.
    pub fn set_linear_fdb_cap(&mut self, value: u16) {
        set_u16_at(self.buffer.as_mut(), field::LINEAR_FDB_CAP, value);
    }

    /// Sets RandomFDBCap.
    pub fn set_random_fdb_cap(&mut self, value: u16) {
        set_u16_at(self.buffer.as_mut(), field::RANDOM_FDB_CAP, value);
    }

    /// Sets MulticastFDBCap.
    pub fn set_multicast_fdb_cap(&mut self, value: u16) {
        set_u16_at(self.buffer.as_mut(), field::MULTICAST_FDB_CAP, value);
    }

    /// Sets LinearFDBTop.
    pub fn set_linear_fdb_top(&mut self, value: u16) {
        set_u16_at(self.buffer.as_mut(), field::LINEAR_FDB_TOP, value);
    }

    byte_set!(set_default_port, field::DEFAULT_PORT, "Sets DefaultPort.");
    byte_set!(
        set_default_mcast_primary_port,
        field::DEFAULT_MCAST_PRIMARY_PORT,
        "Sets DefaultMulticastPrimaryPort."
    );
    byte_set!(
        set_default_mcast_not_primary_port,
        field::DEFAULT_MCAST_NOT_PRIMARY_PORT,
        "Sets DefaultMulticastNotPrimaryPort."
    );
    bits_set!(
        set_life_time_value,
        field::LIFE_STATE,
        3,
        5,
        "Sets LifeTimeValue (5 bits)."
    );
    flag_set!(
        set_port_state_change,
        field::LIFE_STATE,
        2,
        "Sets PortStateChange (an SM writes 1 to clear it)."
    );
    bits_set!(
        set_optimized_sl_to_vl_mapping_programming,
        field::LIFE_STATE,
        0,
        2,
        "Sets OptimizedSLtoVLMappingProgramming (2 bits)."
    );

    /// Sets LIDsPerPort.
    pub fn set_lids_per_port(&mut self, value: u16) {
        set_u16_at(self.buffer.as_mut(), field::LIDS_PER_PORT, value);
    }

    /// Sets PartitionEnforcementCap.
    pub fn set_partition_enforcement_cap(&mut self, value: u16) {
        set_u16_at(
            self.buffer.as_mut(),
            field::PARTITION_ENFORCEMENT_CAP,
            value,
        );
    }

    flag_set!(
        set_inbound_enforcement_cap,
        field::FLAGS,
        7,
        "Sets InboundEnforcementCap."
    );
    flag_set!(
        set_outbound_enforcement_cap,
        field::FLAGS,
        6,
        "Sets OutboundEnforcementCap."
    );
    flag_set!(
        set_filter_raw_inbound_cap,
        field::FLAGS,
        5,
        "Sets FilterRawInboundCap."
    );
    flag_set!(
        set_filter_raw_outbound_cap,
        field::FLAGS,
        4,
        "Sets FilterRawOutboundCap."
    );
    flag_set!(set_enhanced_port0, field::FLAGS, 3, "Sets EnhancedPort0.");

    /// Clears the reserved bits 2–0 of byte 16 and byte 17.
    pub fn clear_reserved(&mut self) {
        set_bits_at(self.buffer.as_mut(), field::FLAGS, 0, 3, 0);
        self.buffer.as_mut()[field::RESERVED] = 0;
    }

    /// Sets MulticastFDBTop.
    pub fn set_multicast_fdb_top(&mut self, value: u16) {
        set_u16_at(self.buffer.as_mut(), field::MULTICAST_FDB_TOP, value);
    }
}

/// SwitchInfo as plain values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SwitchInfoRepr {
    /// LinearFDBCap.
    pub linear_fdb_cap: u16,
    /// RandomFDBCap.
    pub random_fdb_cap: u16,
    /// MulticastFDBCap.
    pub multicast_fdb_cap: u16,
    /// LinearFDBTop.
    pub linear_fdb_top: u16,
    /// DefaultPort.
    pub default_port: u8,
    /// DefaultMulticastPrimaryPort.
    pub default_mcast_primary_port: u8,
    /// DefaultMulticastNotPrimaryPort.
    pub default_mcast_not_primary_port: u8,
    /// LifeTimeValue, 5 bits.
    pub life_time_value: u8,
    /// PortStateChange.
    pub port_state_change: bool,
    /// OptimizedSLtoVLMappingProgramming, 2 bits.
    pub optimized_sl_to_vl_mapping_programming: u8,
    /// LIDsPerPort.
    pub lids_per_port: u16,
    /// PartitionEnforcementCap.
    pub partition_enforcement_cap: u16,
    /// InboundEnforcementCap.
    pub inbound_enforcement_cap: bool,
    /// OutboundEnforcementCap.
    pub outbound_enforcement_cap: bool,
    /// FilterRawInboundCap.
    pub filter_raw_inbound_cap: bool,
    /// FilterRawOutboundCap.
    pub filter_raw_outbound_cap: bool,
    /// EnhancedPort0.
    pub enhanced_port0: bool,
    /// MulticastFDBTop.
    pub multicast_fdb_top: u16,
}

impl SwitchInfoRepr {
    /// Reads every field of `view`.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(view: &SwitchInfo<&T>) -> Result<Self> {
        Ok(Self {
            linear_fdb_cap: view.linear_fdb_cap(),
            random_fdb_cap: view.random_fdb_cap(),
            multicast_fdb_cap: view.multicast_fdb_cap(),
            linear_fdb_top: view.linear_fdb_top(),
            default_port: view.default_port(),
            default_mcast_primary_port: view.default_mcast_primary_port(),
            default_mcast_not_primary_port: view.default_mcast_not_primary_port(),
            life_time_value: view.life_time_value(),
            port_state_change: view.port_state_change(),
            optimized_sl_to_vl_mapping_programming: view.optimized_sl_to_vl_mapping_programming(),
            lids_per_port: view.lids_per_port(),
            partition_enforcement_cap: view.partition_enforcement_cap(),
            inbound_enforcement_cap: view.inbound_enforcement_cap(),
            outbound_enforcement_cap: view.outbound_enforcement_cap(),
            filter_raw_inbound_cap: view.filter_raw_inbound_cap(),
            filter_raw_outbound_cap: view.filter_raw_outbound_cap(),
            enhanced_port0: view.enhanced_port0(),
            multicast_fdb_top: view.multicast_fdb_top(),
        })
    }

    /// Bytes [`SwitchInfoRepr::emit`] writes.
    pub const fn buffer_len(&self) -> usize {
        LEN
    }

    /// Writes every field into `view`, reserved bits cleared.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(&self, view: &mut SwitchInfo<&mut T>) {
        view.set_linear_fdb_cap(self.linear_fdb_cap);
        view.set_random_fdb_cap(self.random_fdb_cap);
        view.set_multicast_fdb_cap(self.multicast_fdb_cap);
        view.set_linear_fdb_top(self.linear_fdb_top);
        view.set_default_port(self.default_port);
        view.set_default_mcast_primary_port(self.default_mcast_primary_port);
        view.set_default_mcast_not_primary_port(self.default_mcast_not_primary_port);
        view.set_life_time_value(self.life_time_value);
        view.set_port_state_change(self.port_state_change);
        view.set_optimized_sl_to_vl_mapping_programming(
            self.optimized_sl_to_vl_mapping_programming,
        );
        view.set_lids_per_port(self.lids_per_port);
        view.set_partition_enforcement_cap(self.partition_enforcement_cap);
        view.clear_reserved();
        view.set_inbound_enforcement_cap(self.inbound_enforcement_cap);
        view.set_outbound_enforcement_cap(self.outbound_enforcement_cap);
        view.set_filter_raw_inbound_cap(self.filter_raw_inbound_cap);
        view.set_filter_raw_outbound_cap(self.filter_raw_outbound_cap);
        view.set_enhanced_port0(self.enhanced_port0);
        view.set_multicast_fdb_top(self.multicast_fdb_top);
    }
}

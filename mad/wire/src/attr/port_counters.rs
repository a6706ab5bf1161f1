//! PortCounters (PMA attribute 0x0012, 44 bytes; IBA 16.1.3.5, kernel
//! `struct ib_pma_portcounters`, OpenSM `ib_port_counters_t`, libibmad `fields.c`).
//!
//! | Offset | Field |
//! |---|---|
//! | 0 | reserved |
//! | 1 | PortSelect |
//! | 2 | CounterSelect (2) |
//! | 4 | SymbolErrorCounter (2) |
//! | 6 | LinkErrorRecoveryCounter |
//! | 7 | LinkDownedCounter |
//! | 8 | PortRcvErrors (2) |
//! | 10 | PortRcvRemotePhysicalErrors (2) |
//! | 12 | PortRcvSwitchRelayErrors (2) |
//! | 14 | PortXmitDiscards (2) |
//! | 16 | PortXmitConstraintErrors |
//! | 17 | PortRcvConstraintErrors |
//! | 18 | CounterSelect2 (reserved in the kernel's struct) |
//! | 19 | LocalLinkIntegrityErrors (4) / ExcessiveBufferOverrunErrors (4) |
//! | 20 | QP1Dropped (2) (OpenSM; reserved in the kernel's struct) |
//! | 22 | VL15Dropped (2) |
//! | 24 | PortXmitData (4) |
//! | 28 | PortRcvData (4) |
//! | 32 | PortXmitPkts (4) |
//! | 36 | PortRcvPkts (4) |
//! | 40 | PortXmitWait (4) |

use crate::error::{Result, check_len};
use crate::field::{set_u16_at, set_u32_at, u16_at, u32_at};
use crate::macros::{bits_get, bits_set, byte_get, byte_set};

/// Length of PortCounters.
pub const LEN: usize = 44;
/// PortSelect meaning "all ports" (when ClassPortInfo has
/// [`crate::attr::class_port_info::pma_cap::ALL_PORT_SELECT`]).
pub const ALL_PORTS: u8 = 0xFF;

/// CounterSelect bits: which counters a Set clears (kernel `IB_PMA_SEL_*`).
pub mod counter_select {
    /// SymbolErrorCounter.
    pub const SYMBOL_ERROR: u16 = 0x0001;
    /// LinkErrorRecoveryCounter.
    pub const LINK_ERROR_RECOVERY: u16 = 0x0002;
    /// LinkDownedCounter.
    pub const LINK_DOWNED: u16 = 0x0004;
    /// PortRcvErrors.
    pub const PORT_RCV_ERRORS: u16 = 0x0008;
    /// PortRcvRemotePhysicalErrors.
    pub const PORT_RCV_REMPHYS_ERRORS: u16 = 0x0010;
    /// PortRcvSwitchRelayErrors.
    pub const PORT_RCV_SWITCH_RELAY_ERRORS: u16 = 0x0020;
    /// PortXmitDiscards.
    pub const PORT_XMIT_DISCARDS: u16 = 0x0040;
    /// PortXmitConstraintErrors.
    pub const PORT_XMIT_CONSTRAINT_ERRORS: u16 = 0x0080;
    /// PortRcvConstraintErrors.
    pub const PORT_RCV_CONSTRAINT_ERRORS: u16 = 0x0100;
    /// LocalLinkIntegrityErrors.
    pub const LOCAL_LINK_INTEGRITY_ERRORS: u16 = 0x0200;
    /// ExcessiveBufferOverrunErrors.
    pub const EXCESSIVE_BUFFER_OVERRUNS: u16 = 0x0400;
    /// VL15Dropped.
    pub const VL15_DROPPED: u16 = 0x0800;
    /// PortXmitData.
    pub const PORT_XMIT_DATA: u16 = 0x1000;
    /// PortRcvData.
    pub const PORT_RCV_DATA: u16 = 0x2000;
    /// PortXmitPkts.
    pub const PORT_XMIT_PACKETS: u16 = 0x4000;
    /// PortRcvPkts.
    pub const PORT_RCV_PACKETS: u16 = 0x8000;
}

/// CounterSelect2 bits (the byte at offset 18): libibmad's `performance_reset_via` writes its
/// mask's bits 16 and up there, perfquery's bit 16 being PortXmitWait and bit 17 QP1Dropped.
pub mod counter_select2 {
    /// PortXmitWait.
    pub const PORT_XMIT_WAIT: u8 = 0x01;
    /// QP1Dropped.
    pub const QP1_DROPPED: u8 = 0x02;
}

mod field {
    pub const RESERVED: usize = 0;
    pub const PORT_SELECT: usize = 1;
    pub const COUNTER_SELECT: usize = 2;
    pub const SYMBOL_ERROR: usize = 4;
    pub const LINK_ERROR_RECOVERY: usize = 6;
    pub const LINK_DOWNED: usize = 7;
    pub const RCV_ERRORS: usize = 8;
    pub const RCV_REMPHYS_ERRORS: usize = 10;
    pub const RCV_SWITCH_RELAY_ERRORS: usize = 12;
    pub const XMIT_DISCARDS: usize = 14;
    pub const XMIT_CONSTRAINT_ERRORS: usize = 16;
    pub const RCV_CONSTRAINT_ERRORS: usize = 17;
    pub const COUNTER_SELECT2: usize = 18;
    /// LocalLinkIntegrityErrors (7–4) / ExcessiveBufferOverrunErrors (3–0).
    pub const LLI_EBO: usize = 19;
    pub const QP1_DROPPED: usize = 20;
    pub const VL15_DROPPED: usize = 22;
    pub const XMIT_DATA: usize = 24;
    pub const RCV_DATA: usize = 28;
    pub const XMIT_PKTS: usize = 32;
    pub const RCV_PKTS: usize = 36;
    pub const XMIT_WAIT: usize = 40;
}

/// A typed view of a PortCounters attribute.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortCounters<T: AsRef<[u8]>> {
    buffer: T,
}

macro_rules! be16 {
    ($get:ident, $set:ident, $at:expr, $doc:literal) => {
        impl<T: AsRef<[u8]>> PortCounters<T> {
            #[doc = $doc]
            pub fn $get(&self) -> u16 {
                u16_at(self.buffer.as_ref(), $at)
            }
        }
        impl<T: AsRef<[u8]> + AsMut<[u8]>> PortCounters<T> {
            #[doc = concat!("Sets ", $doc)]
            pub fn $set(&mut self, value: u16) {
                set_u16_at(self.buffer.as_mut(), $at, value);
            }
        }
    };
}

macro_rules! be32 {
    ($get:ident, $set:ident, $at:expr, $doc:literal) => {
        impl<T: AsRef<[u8]>> PortCounters<T> {
            #[doc = $doc]
            pub fn $get(&self) -> u32 {
                u32_at(self.buffer.as_ref(), $at)
            }
        }
        impl<T: AsRef<[u8]> + AsMut<[u8]>> PortCounters<T> {
            #[doc = concat!("Sets ", $doc)]
            pub fn $set(&mut self, value: u32) {
                set_u32_at(self.buffer.as_mut(), $at, value);
            }
        }
    };
}

be16!(
    counter_select,
    set_counter_select,
    field::COUNTER_SELECT,
    "CounterSelect ([`counter_select`])."
);
be16!(
    symbol_error_counter,
    set_symbol_error_counter,
    field::SYMBOL_ERROR,
    "SymbolErrorCounter."
);
be16!(
    port_rcv_errors,
    set_port_rcv_errors,
    field::RCV_ERRORS,
    "PortRcvErrors."
);
be16!(
    port_rcv_remote_physical_errors,
    set_port_rcv_remote_physical_errors,
    field::RCV_REMPHYS_ERRORS,
    "PortRcvRemotePhysicalErrors."
);
be16!(
    port_rcv_switch_relay_errors,
    set_port_rcv_switch_relay_errors,
    field::RCV_SWITCH_RELAY_ERRORS,
    "PortRcvSwitchRelayErrors."
);
be16!(
    port_xmit_discards,
    set_port_xmit_discards,
    field::XMIT_DISCARDS,
    "PortXmitDiscards."
);
be16!(
    qp1_dropped,
    set_qp1_dropped,
    field::QP1_DROPPED,
    "QP1Dropped."
);
be16!(
    vl15_dropped,
    set_vl15_dropped,
    field::VL15_DROPPED,
    "VL15Dropped."
);
be32!(
    port_xmit_data,
    set_port_xmit_data,
    field::XMIT_DATA,
    "PortXmitData (in units of 4 bytes)."
);
be32!(
    port_rcv_data,
    set_port_rcv_data,
    field::RCV_DATA,
    "PortRcvData (in units of 4 bytes)."
);
be32!(
    port_xmit_packets,
    set_port_xmit_packets,
    field::XMIT_PKTS,
    "PortXmitPkts."
);
be32!(
    port_rcv_packets,
    set_port_rcv_packets,
    field::RCV_PKTS,
    "PortRcvPkts."
);
be32!(
    port_xmit_wait,
    set_port_xmit_wait,
    field::XMIT_WAIT,
    "PortXmitWait."
);

impl<T: AsRef<[u8]>> PortCounters<T> {
    /// Views `buffer` as PortCounters, checking that it holds 44 bytes.
    pub fn new_checked(buffer: T) -> Result<Self> {
        check_len("PortCounters", buffer.as_ref(), LEN)?;
        Ok(Self { buffer })
    }

    /// Gives the buffer back.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    byte_get!(
        port_select,
        field::PORT_SELECT,
        "PortSelect: the port the counters are of."
    );
    byte_get!(
        link_error_recovery_counter,
        field::LINK_ERROR_RECOVERY,
        "LinkErrorRecoveryCounter."
    );
    byte_get!(
        link_downed_counter,
        field::LINK_DOWNED,
        "LinkDownedCounter."
    );
    byte_get!(
        port_xmit_constraint_errors,
        field::XMIT_CONSTRAINT_ERRORS,
        "PortXmitConstraintErrors."
    );
    byte_get!(
        port_rcv_constraint_errors,
        field::RCV_CONSTRAINT_ERRORS,
        "PortRcvConstraintErrors."
    );
    byte_get!(counter_select2, field::COUNTER_SELECT2, "CounterSelect2.");
    bits_get!(
        local_link_integrity_errors,
        field::LLI_EBO,
        4,
        4,
        "LocalLinkIntegrityErrors, 4 bits."
    );
    bits_get!(
        excessive_buffer_overrun_errors,
        field::LLI_EBO,
        0,
        4,
        "ExcessiveBufferOverrunErrors, 4 bits."
    );
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> PortCounters<T> {
    /// Clears the reserved byte 0.
    pub fn clear_reserved(&mut self) {
        self.buffer.as_mut()[field::RESERVED] = 0;
    }

    byte_set!(set_port_select, field::PORT_SELECT, "Sets PortSelect.");
    byte_set!(
        set_link_error_recovery_counter,
        field::LINK_ERROR_RECOVERY,
        "Sets LinkErrorRecoveryCounter."
    );
    byte_set!(
        set_link_downed_counter,
        field::LINK_DOWNED,
        "Sets LinkDownedCounter."
    );
    byte_set!(
        set_port_xmit_constraint_errors,
        field::XMIT_CONSTRAINT_ERRORS,
        "Sets PortXmitConstraintErrors."
    );
    byte_set!(
        set_port_rcv_constraint_errors,
        field::RCV_CONSTRAINT_ERRORS,
        "Sets PortRcvConstraintErrors."
    );
    byte_set!(
        set_counter_select2,
        field::COUNTER_SELECT2,
        "Sets CounterSelect2."
    );
    bits_set!(
        set_local_link_integrity_errors,
        field::LLI_EBO,
        4,
        4,
        "Sets LocalLinkIntegrityErrors (4 bits)."
    );
    bits_set!(
        set_excessive_buffer_overrun_errors,
        field::LLI_EBO,
        0,
        4,
        "Sets ExcessiveBufferOverrunErrors (4 bits)."
    );
}

/// PortCounters as plain values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PortCountersRepr {
    /// PortSelect.
    pub port_select: u8,
    /// CounterSelect.
    pub counter_select: u16,
    /// SymbolErrorCounter.
    pub symbol_error_counter: u16,
    /// LinkErrorRecoveryCounter.
    pub link_error_recovery_counter: u8,
    /// LinkDownedCounter.
    pub link_downed_counter: u8,
    /// PortRcvErrors.
    pub port_rcv_errors: u16,
    /// PortRcvRemotePhysicalErrors.
    pub port_rcv_remote_physical_errors: u16,
    /// PortRcvSwitchRelayErrors.
    pub port_rcv_switch_relay_errors: u16,
    /// PortXmitDiscards.
    pub port_xmit_discards: u16,
    /// PortXmitConstraintErrors.
    pub port_xmit_constraint_errors: u8,
    /// PortRcvConstraintErrors.
    pub port_rcv_constraint_errors: u8,
    /// CounterSelect2.
    pub counter_select2: u8,
    /// LocalLinkIntegrityErrors, 4 bits.
    pub local_link_integrity_errors: u8,
    /// ExcessiveBufferOverrunErrors, 4 bits.
    pub excessive_buffer_overrun_errors: u8,
    /// QP1Dropped.
    pub qp1_dropped: u16,
    /// VL15Dropped.
    pub vl15_dropped: u16,
    /// PortXmitData.
    pub port_xmit_data: u32,
    /// PortRcvData.
    pub port_rcv_data: u32,
    /// PortXmitPkts.
    pub port_xmit_packets: u32,
    /// PortRcvPkts.
    pub port_rcv_packets: u32,
    /// PortXmitWait.
    pub port_xmit_wait: u32,
}

impl PortCountersRepr {
    /// Reads every field of `view`.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(view: &PortCounters<&T>) -> Result<Self> {
        Ok(Self {
            port_select: view.port_select(),
            counter_select: view.counter_select(),
            symbol_error_counter: view.symbol_error_counter(),
            link_error_recovery_counter: view.link_error_recovery_counter(),
            link_downed_counter: view.link_downed_counter(),
            port_rcv_errors: view.port_rcv_errors(),
            port_rcv_remote_physical_errors: view.port_rcv_remote_physical_errors(),
            port_rcv_switch_relay_errors: view.port_rcv_switch_relay_errors(),
            port_xmit_discards: view.port_xmit_discards(),
            port_xmit_constraint_errors: view.port_xmit_constraint_errors(),
            port_rcv_constraint_errors: view.port_rcv_constraint_errors(),
            counter_select2: view.counter_select2(),
            local_link_integrity_errors: view.local_link_integrity_errors(),
            excessive_buffer_overrun_errors: view.excessive_buffer_overrun_errors(),
            qp1_dropped: view.qp1_dropped(),
            vl15_dropped: view.vl15_dropped(),
            port_xmit_data: view.port_xmit_data(),
            port_rcv_data: view.port_rcv_data(),
            port_xmit_packets: view.port_xmit_packets(),
            port_rcv_packets: view.port_rcv_packets(),
            port_xmit_wait: view.port_xmit_wait(),
        })
    }

    /// Bytes [`PortCountersRepr::emit`] writes.
    pub const fn buffer_len(&self) -> usize {
        LEN
    }

    /// Writes every field into `view`, the reserved byte cleared.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(&self, view: &mut PortCounters<&mut T>) {
        view.clear_reserved();
        view.set_port_select(self.port_select);
        view.set_counter_select(self.counter_select);
        view.set_symbol_error_counter(self.symbol_error_counter);
        view.set_link_error_recovery_counter(self.link_error_recovery_counter);
        view.set_link_downed_counter(self.link_downed_counter);
        view.set_port_rcv_errors(self.port_rcv_errors);
        view.set_port_rcv_remote_physical_errors(self.port_rcv_remote_physical_errors);
        view.set_port_rcv_switch_relay_errors(self.port_rcv_switch_relay_errors);
        view.set_port_xmit_discards(self.port_xmit_discards);
        view.set_port_xmit_constraint_errors(self.port_xmit_constraint_errors);
        view.set_port_rcv_constraint_errors(self.port_rcv_constraint_errors);
        view.set_counter_select2(self.counter_select2);
        view.set_local_link_integrity_errors(self.local_link_integrity_errors);
        view.set_excessive_buffer_overrun_errors(self.excessive_buffer_overrun_errors);
        view.set_qp1_dropped(self.qp1_dropped);
        view.set_vl15_dropped(self.vl15_dropped);
        view.set_port_xmit_data(self.port_xmit_data);
        view.set_port_rcv_data(self.port_rcv_data);
        view.set_port_xmit_packets(self.port_xmit_packets);
        view.set_port_rcv_packets(self.port_rcv_packets);
        view.set_port_xmit_wait(self.port_xmit_wait);
    }
}

//! PortCountersExtended (PMA attribute 0x001D; IBA 16.1.4, kernel
//! `struct ib_pma_portcounters_ext`, libibmad `fields.c` `IB_PC_EXT_*`): the traffic counters
//! 64 bits wide, and the unicast/multicast packet counts of the IETF MIBs.
//!
//! | Offset | Field |
//! |---|---|
//! | 0 | reserved |
//! | 1 | PortSelect |
//! | 2 | CounterSelect (2) |
//! | 4 | CounterSelect2 (4) |
//! | 8 | PortXmitData (8) |
//! | 16 | PortRcvData (8) |
//! | 24 | PortXmitPkts (8) |
//! | 32 | PortRcvPkts (8) |
//! | 40 | PortUnicastXmitPkts (8) |
//! | 48 | PortUnicastRcvPkts (8) |
//! | 56 | PortMulticastXmitPkts (8) |
//! | 64 | PortMulticastRcvPkts (8) |
//!
//! CounterSelect2 (libibmad `{32, 32, "CounterSelect2"}`, OpenSM
//! `ib_port_counters_ext_t.counter_select2`) selects, in a Set, the 64-bit error counters that
//! later IBA versions add after byte 72 (ClassPortInfo CapabilityMask2
//! IsAdditionalPortCountersExtendedSupported); the view names the field, but those counters are
//! not part of it.

use crate::error::{Result, check_len};
use crate::field::{set_u16_at, set_u32_at, set_u64_at, u16_at, u32_at, u64_at};
use crate::macros::{byte_get, byte_set};

/// Length of PortCountersExtended as this view knows it.
pub const LEN: usize = 72;

/// CounterSelect bits of PortCountersExtended: which counters a Set clears (kernel
/// `IB_PMA_SELX_*`). They differ from PortCounters' bits.
pub mod counter_select {
    /// PortXmitData.
    pub const PORT_XMIT_DATA: u16 = 0x0001;
    /// PortRcvData.
    pub const PORT_RCV_DATA: u16 = 0x0002;
    /// PortXmitPkts.
    pub const PORT_XMIT_PACKETS: u16 = 0x0004;
    /// PortRcvPkts.
    pub const PORT_RCV_PACKETS: u16 = 0x0008;
    /// PortUnicastXmitPkts.
    pub const PORT_UNICAST_XMIT_PACKETS: u16 = 0x0010;
    /// PortUnicastRcvPkts.
    pub const PORT_UNICAST_RCV_PACKETS: u16 = 0x0020;
    /// PortMulticastXmitPkts.
    pub const PORT_MULTICAST_XMIT_PACKETS: u16 = 0x0040;
    /// PortMulticastRcvPkts.
    pub const PORT_MULTICAST_RCV_PACKETS: u16 = 0x0080;
}

mod field {
    pub const RESERVED0: usize = 0;
    pub const PORT_SELECT: usize = 1;
    pub const COUNTER_SELECT: usize = 2;
    pub const COUNTER_SELECT2: usize = 4;
    pub const XMIT_DATA: usize = 8;
    pub const RCV_DATA: usize = 16;
    pub const XMIT_PKTS: usize = 24;
    pub const RCV_PKTS: usize = 32;
    pub const UNICAST_XMIT_PKTS: usize = 40;
    pub const UNICAST_RCV_PKTS: usize = 48;
    pub const MULTICAST_XMIT_PKTS: usize = 56;
    pub const MULTICAST_RCV_PKTS: usize = 64;
}

/// A typed view of a PortCountersExtended attribute.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortCountersExt<T: AsRef<[u8]>> {
    buffer: T,
}

macro_rules! be64 {
    ($get:ident, $set:ident, $at:expr, $doc:literal) => {
        impl<T: AsRef<[u8]>> PortCountersExt<T> {
            #[doc = $doc]
            pub fn $get(&self) -> u64 {
                u64_at(self.buffer.as_ref(), $at)
            }
        }
        impl<T: AsRef<[u8]> + AsMut<[u8]>> PortCountersExt<T> {
            #[doc = concat!("Sets ", $doc)]
            pub fn $set(&mut self, value: u64) {
                set_u64_at(self.buffer.as_mut(), $at, value);
            }
        }
    };
}

be64!(
    port_xmit_data,
    set_port_xmit_data,
    field::XMIT_DATA,
    "PortXmitData (in units of 4 bytes)."
);
be64!(
    port_rcv_data,
    set_port_rcv_data,
    field::RCV_DATA,
    "PortRcvData (in units of 4 bytes)."
);
be64!(
    port_xmit_packets,
    set_port_xmit_packets,
    field::XMIT_PKTS,
    "PortXmitPkts."
);
be64!(
    port_rcv_packets,
    set_port_rcv_packets,
    field::RCV_PKTS,
    "PortRcvPkts."
);
be64!(
    port_unicast_xmit_packets,
    set_port_unicast_xmit_packets,
    field::UNICAST_XMIT_PKTS,
    "PortUnicastXmitPkts."
);
be64!(
    port_unicast_rcv_packets,
    set_port_unicast_rcv_packets,
    field::UNICAST_RCV_PKTS,
    "PortUnicastRcvPkts."
);
be64!(
    port_multicast_xmit_packets,
    set_port_multicast_xmit_packets,
    field::MULTICAST_XMIT_PKTS,
    "PortMulticastXmitPkts."
);
be64!(
    port_multicast_rcv_packets,
    set_port_multicast_rcv_packets,
    field::MULTICAST_RCV_PKTS,
    "PortMulticastRcvPkts."
);

impl<T: AsRef<[u8]>> PortCountersExt<T> {
    /// Views `buffer` as PortCountersExtended, checking that it holds 72 bytes.
    pub fn new_checked(buffer: T) -> Result<Self> {
        check_len("PortCountersExtended", buffer.as_ref(), LEN)?;
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

    /// CounterSelect ([`counter_select`]).
    pub fn counter_select(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field::COUNTER_SELECT)
    }

    /// CounterSelect2: which of the additional 64-bit error counters a Set clears.
    pub fn counter_select2(&self) -> u32 {
        u32_at(self.buffer.as_ref(), field::COUNTER_SELECT2)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> PortCountersExt<T> {
    /// Clears the reserved byte 0. Bytes 4–7 are CounterSelect2, not reserved.
    pub fn clear_reserved(&mut self) {
        self.buffer.as_mut()[field::RESERVED0] = 0;
    }

    byte_set!(set_port_select, field::PORT_SELECT, "Sets PortSelect.");

    /// Sets CounterSelect.
    pub fn set_counter_select(&mut self, value: u16) {
        set_u16_at(self.buffer.as_mut(), field::COUNTER_SELECT, value);
    }

    /// Sets CounterSelect2.
    pub fn set_counter_select2(&mut self, value: u32) {
        set_u32_at(self.buffer.as_mut(), field::COUNTER_SELECT2, value);
    }
}

/// PortCountersExtended as plain values, but for CounterSelect2 (set it on the view after
/// [`PortCountersExtRepr::emit`]): code builds this struct field by field, so it keeps its fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct PortCountersExtRepr {
    /// PortSelect.
    pub port_select: u8,
    /// CounterSelect.
    pub counter_select: u16,
    /// PortXmitData.
    pub port_xmit_data: u64,
    /// PortRcvData.
    pub port_rcv_data: u64,
    /// PortXmitPkts.
    pub port_xmit_packets: u64,
    /// PortRcvPkts.
    pub port_rcv_packets: u64,
    /// PortUnicastXmitPkts.
    pub port_unicast_xmit_packets: u64,
    /// PortUnicastRcvPkts.
    pub port_unicast_rcv_packets: u64,
    /// PortMulticastXmitPkts.
    pub port_multicast_xmit_packets: u64,
    /// PortMulticastRcvPkts.
    pub port_multicast_rcv_packets: u64,
}

impl PortCountersExtRepr {
    /// Reads every field of `view`.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(view: &PortCountersExt<&T>) -> Result<Self> {
        Ok(Self {
            port_select: view.port_select(),
            counter_select: view.counter_select(),
            port_xmit_data: view.port_xmit_data(),
            port_rcv_data: view.port_rcv_data(),
            port_xmit_packets: view.port_xmit_packets(),
            port_rcv_packets: view.port_rcv_packets(),
            port_unicast_xmit_packets: view.port_unicast_xmit_packets(),
            port_unicast_rcv_packets: view.port_unicast_rcv_packets(),
            port_multicast_xmit_packets: view.port_multicast_xmit_packets(),
            port_multicast_rcv_packets: view.port_multicast_rcv_packets(),
        })
    }

    /// Bytes [`PortCountersExtRepr::emit`] writes.
    pub const fn buffer_len(&self) -> usize {
        LEN
    }

    /// Writes every field into `view`, the reserved byte cleared and CounterSelect2, which
    /// this Repr does not carry, 0.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(&self, view: &mut PortCountersExt<&mut T>) {
        view.clear_reserved();
        view.set_counter_select2(0);
        view.set_port_select(self.port_select);
        view.set_counter_select(self.counter_select);
        view.set_port_xmit_data(self.port_xmit_data);
        view.set_port_rcv_data(self.port_rcv_data);
        view.set_port_xmit_packets(self.port_xmit_packets);
        view.set_port_rcv_packets(self.port_rcv_packets);
        view.set_port_unicast_xmit_packets(self.port_unicast_xmit_packets);
        view.set_port_unicast_rcv_packets(self.port_unicast_rcv_packets);
        view.set_port_multicast_xmit_packets(self.port_multicast_xmit_packets);
        view.set_port_multicast_rcv_packets(self.port_multicast_rcv_packets);
    }
}

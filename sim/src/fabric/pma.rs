//! The performance management agent (PMA, class 0x04) of every simulated node, and the port
//! counters it reports. The network counts the packets that really cross each port
//! ([`PortCounters`]); the PMA answers:
//!
//! - ClassPortInfo Get: BaseVersion 1, ClassVersion 1, RespTimeValue 18 (ibsim), capability
//!   PortXmitWait and IsExtendedWidthSupported (PortCountersExtended with its unicast and
//!   multicast counters, which the network counts), plus AllPortSelect on switches: the mask
//!   ibsim gives.
//! - PortCounters Get and Set (Set clears the counters CounterSelect names, and PortXmitWait
//!   when CounterSelect2 has bit 0, the bit libibmad's reset mask puts there for it; ibsim
//!   clears it for any non-zero CounterSelect2): a CA answers for the port the MAD arrived on only
//!   (another PortSelect is 0x001C, as ibsim and qib do: `qib_mad.c` `pma_get_portcounters`;
//!   mlx5's `process_pma_cmd` ignores PortSelect); a switch for any of its ports, or all of
//!   them summed with PortSelect 255. The modifier must be 0.
//! - PortCountersExtended Get and Set, the same ports selected; Set clears what CounterSelect
//!   bits 0-7 name.
//!
//! PortCounters and PortCountersExtended report the same counters of a port ([`PortCounters`]
//! is their one store), as qib does (`qib_mad.c`: `pma_set_portcounters` and
//! `pma_set_portcounters_ext` move the same `z_port_xmit_data` and like baselines): a
//! PortCounters Set clearing PortXmitData (or RcvData, XmitPkts, RcvPkts) zeroes
//! the 64-bit PortCountersExtended counter too, and the other way round. ibsim keeps the two
//! attributes apart, so under it the clear of one leaves the other.
//!
//! Counters saturate at their field's width and stay there until cleared, as IBA 16.1.3.5
//! says; they are kept in 64 bits and clamped when reported.

use mad_wire::attr::class_port_info::{ClassPortInfo, ClassPortInfoRepr, pma_cap};
use mad_wire::attr::port_counters::{
    ALL_PORTS, PortCounters as PortCountersView, PortCountersRepr, counter_select as sel,
    counter_select2 as sel2,
};
use mad_wire::attr::port_counters_ext::{
    PortCountersExt as PortCountersExtView, PortCountersExtRepr, counter_select as xsel,
};
use mad_wire::perf::DATA_OFFSET;
use mad_wire::{attr_id, class, method, status};

use super::model::{NodeId, NodeType, PortId};
use super::sma::defaults::PMA_RESP_TIME_VALUE;
use super::sma::respond;
use super::sma::{Reply, Sma};

/// What the network counted at one port since the counters were last cleared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PortCounters {
    /// SymbolErrorCounter: corrupted packets detected on the link.
    pub symbol_errors: u64,
    /// LinkErrorRecoveryCounter.
    pub link_error_recovery: u64,
    /// LinkDownedCounter: times the link went down.
    pub link_downed: u64,
    /// PortRcvErrors: packets received with an error and discarded.
    pub rcv_errors: u64,
    /// PortRcvRemotePhysicalErrors.
    pub rcv_remote_physical_errors: u64,
    /// PortRcvSwitchRelayErrors: packets a switch could not forward (no route, loop).
    pub rcv_switch_relay_errors: u64,
    /// PortXmitDiscards: packets discarded on the way out (link down, port not ready).
    pub xmit_discards: u64,
    /// PortXmitConstraintErrors.
    pub xmit_constraint_errors: u64,
    /// PortRcvConstraintErrors.
    pub rcv_constraint_errors: u64,
    /// LocalLinkIntegrityErrors.
    pub local_link_integrity_errors: u64,
    /// ExcessiveBufferOverrunErrors.
    pub excessive_buffer_overrun_errors: u64,
    /// VL15Dropped: SMPs dropped at this port.
    pub vl15_dropped: u64,
    /// PortXmitData, in 4-byte words.
    pub xmit_data: u64,
    /// PortRcvData, in 4-byte words.
    pub rcv_data: u64,
    /// PortXmitPkts.
    pub xmit_packets: u64,
    /// PortRcvPkts.
    pub rcv_packets: u64,
    /// PortXmitWait.
    pub xmit_wait: u64,
    /// PortUnicastXmitPkts: packets sent to a unicast (or the permissive) DLID.
    pub unicast_xmit_packets: u64,
    /// PortUnicastRcvPkts.
    pub unicast_rcv_packets: u64,
    /// PortMulticastXmitPkts: packets sent to a multicast DLID (0xC000-0xFFFE).
    pub multicast_xmit_packets: u64,
    /// PortMulticastRcvPkts.
    pub multicast_rcv_packets: u64,
}

impl PortCounters {
    /// Clears the counters `mask` (CounterSelect bits) names, and PortXmitWait if `xmit_wait`.
    pub fn clear(&mut self, mask: u16, xmit_wait: bool) {
        let fields: [(u16, &mut u64); 16] = [
            (sel::SYMBOL_ERROR, &mut self.symbol_errors),
            (sel::LINK_ERROR_RECOVERY, &mut self.link_error_recovery),
            (sel::LINK_DOWNED, &mut self.link_downed),
            (sel::PORT_RCV_ERRORS, &mut self.rcv_errors),
            (
                sel::PORT_RCV_REMPHYS_ERRORS,
                &mut self.rcv_remote_physical_errors,
            ),
            (
                sel::PORT_RCV_SWITCH_RELAY_ERRORS,
                &mut self.rcv_switch_relay_errors,
            ),
            (sel::PORT_XMIT_DISCARDS, &mut self.xmit_discards),
            (
                sel::PORT_XMIT_CONSTRAINT_ERRORS,
                &mut self.xmit_constraint_errors,
            ),
            (
                sel::PORT_RCV_CONSTRAINT_ERRORS,
                &mut self.rcv_constraint_errors,
            ),
            (
                sel::LOCAL_LINK_INTEGRITY_ERRORS,
                &mut self.local_link_integrity_errors,
            ),
            (
                sel::EXCESSIVE_BUFFER_OVERRUNS,
                &mut self.excessive_buffer_overrun_errors,
            ),
            (sel::VL15_DROPPED, &mut self.vl15_dropped),
            (sel::PORT_XMIT_DATA, &mut self.xmit_data),
            (sel::PORT_RCV_DATA, &mut self.rcv_data),
            (sel::PORT_XMIT_PACKETS, &mut self.xmit_packets),
            (sel::PORT_RCV_PACKETS, &mut self.rcv_packets),
        ];
        for (bit, field) in fields {
            if mask & bit != 0 {
                *field = 0;
            }
        }
        if xmit_wait {
            self.xmit_wait = 0;
        }
    }

    /// Clears what a PortCounters Set names: the counters of `select` (CounterSelect), and
    /// PortXmitWait if `select2` (CounterSelect2) has its bit 0. Its other bits name counters
    /// this PMA does not keep (bit 1: QP1Dropped).
    pub fn clear_selected(&mut self, select: u16, select2: u8) {
        self.clear(select, select2 & sel2::PORT_XMIT_WAIT != 0);
    }

    /// Clears the counters `mask` (PortCountersExtended CounterSelect bits) names.
    pub fn clear_ext(&mut self, mask: u16) {
        let fields: [(u16, &mut u64); 8] = [
            (xsel::PORT_XMIT_DATA, &mut self.xmit_data),
            (xsel::PORT_RCV_DATA, &mut self.rcv_data),
            (xsel::PORT_XMIT_PACKETS, &mut self.xmit_packets),
            (xsel::PORT_RCV_PACKETS, &mut self.rcv_packets),
            (
                xsel::PORT_UNICAST_XMIT_PACKETS,
                &mut self.unicast_xmit_packets,
            ),
            (
                xsel::PORT_UNICAST_RCV_PACKETS,
                &mut self.unicast_rcv_packets,
            ),
            (
                xsel::PORT_MULTICAST_XMIT_PACKETS,
                &mut self.multicast_xmit_packets,
            ),
            (
                xsel::PORT_MULTICAST_RCV_PACKETS,
                &mut self.multicast_rcv_packets,
            ),
        ];
        for (bit, field) in fields {
            if mask & bit != 0 {
                *field = 0;
            }
        }
    }

    /// The sum of two ports' counters (PortSelect 255).
    fn plus(self, o: PortCounters) -> PortCounters {
        PortCounters {
            symbol_errors: self.symbol_errors.saturating_add(o.symbol_errors),
            link_error_recovery: self
                .link_error_recovery
                .saturating_add(o.link_error_recovery),
            link_downed: self.link_downed.saturating_add(o.link_downed),
            rcv_errors: self.rcv_errors.saturating_add(o.rcv_errors),
            rcv_remote_physical_errors: self
                .rcv_remote_physical_errors
                .saturating_add(o.rcv_remote_physical_errors),
            rcv_switch_relay_errors: self
                .rcv_switch_relay_errors
                .saturating_add(o.rcv_switch_relay_errors),
            xmit_discards: self.xmit_discards.saturating_add(o.xmit_discards),
            xmit_constraint_errors: self
                .xmit_constraint_errors
                .saturating_add(o.xmit_constraint_errors),
            rcv_constraint_errors: self
                .rcv_constraint_errors
                .saturating_add(o.rcv_constraint_errors),
            local_link_integrity_errors: self
                .local_link_integrity_errors
                .saturating_add(o.local_link_integrity_errors),
            excessive_buffer_overrun_errors: self
                .excessive_buffer_overrun_errors
                .saturating_add(o.excessive_buffer_overrun_errors),
            vl15_dropped: self.vl15_dropped.saturating_add(o.vl15_dropped),
            xmit_data: self.xmit_data.saturating_add(o.xmit_data),
            rcv_data: self.rcv_data.saturating_add(o.rcv_data),
            xmit_packets: self.xmit_packets.saturating_add(o.xmit_packets),
            rcv_packets: self.rcv_packets.saturating_add(o.rcv_packets),
            xmit_wait: self.xmit_wait.saturating_add(o.xmit_wait),
            unicast_xmit_packets: self
                .unicast_xmit_packets
                .saturating_add(o.unicast_xmit_packets),
            unicast_rcv_packets: self
                .unicast_rcv_packets
                .saturating_add(o.unicast_rcv_packets),
            multicast_xmit_packets: self
                .multicast_xmit_packets
                .saturating_add(o.multicast_xmit_packets),
            multicast_rcv_packets: self
                .multicast_rcv_packets
                .saturating_add(o.multicast_rcv_packets),
        }
    }

    /// Writes the counters into `r`, each clamped to its field.
    fn report(&self, r: &mut PortCountersRepr) {
        fn c16(v: u64) -> u16 {
            u16::try_from(v).unwrap_or(u16::MAX)
        }
        fn c32(v: u64) -> u32 {
            u32::try_from(v).unwrap_or(u32::MAX)
        }
        fn c8(v: u64) -> u8 {
            u8::try_from(v).unwrap_or(u8::MAX)
        }
        fn c4(v: u64) -> u8 {
            v.min(0xF) as u8
        }
        r.symbol_error_counter = c16(self.symbol_errors);
        r.link_error_recovery_counter = c8(self.link_error_recovery);
        r.link_downed_counter = c8(self.link_downed);
        r.port_rcv_errors = c16(self.rcv_errors);
        r.port_rcv_remote_physical_errors = c16(self.rcv_remote_physical_errors);
        r.port_rcv_switch_relay_errors = c16(self.rcv_switch_relay_errors);
        r.port_xmit_discards = c16(self.xmit_discards);
        r.port_xmit_constraint_errors = c8(self.xmit_constraint_errors);
        r.port_rcv_constraint_errors = c8(self.rcv_constraint_errors);
        r.local_link_integrity_errors = c4(self.local_link_integrity_errors);
        r.excessive_buffer_overrun_errors = c4(self.excessive_buffer_overrun_errors);
        r.vl15_dropped = c16(self.vl15_dropped);
        r.port_xmit_data = c32(self.xmit_data);
        r.port_rcv_data = c32(self.rcv_data);
        r.port_xmit_packets = c32(self.xmit_packets);
        r.port_rcv_packets = c32(self.rcv_packets);
        r.port_xmit_wait = c32(self.xmit_wait);
        // QP1Dropped is not counted (the capability mask does not claim IsQP1DropSupported).
        r.qp1_dropped = 0;
    }

    /// Writes the 64-bit counters into `r`: kept in 64 bits, they saturate there.
    fn report_ext(&self, r: &mut PortCountersExtRepr) {
        r.port_xmit_data = self.xmit_data;
        r.port_rcv_data = self.rcv_data;
        r.port_xmit_packets = self.xmit_packets;
        r.port_rcv_packets = self.rcv_packets;
        r.port_unicast_xmit_packets = self.unicast_xmit_packets;
        r.port_unicast_rcv_packets = self.unicast_rcv_packets;
        r.port_multicast_xmit_packets = self.multicast_xmit_packets;
        r.port_multicast_rcv_packets = self.multicast_rcv_packets;
    }
}

impl Sma<'_> {
    /// The PMA: handles a class 0x04 MAD that reached `node` through `in_port`.
    pub(crate) fn pma(&mut self, node: NodeId, in_port: u8, mad: &mut [u8; 256]) -> Reply {
        let m = mad[3];
        if method::has_response_bit(m) || m == method::TRAP || m == method::TRAP_REPRESS {
            return Reply::PassUp;
        }
        if mad[2] != class::PERF_MGMT_CLASS_VERSION {
            return respond(mad, status::BAD_VERSION);
        }
        if m != method::GET && m != method::SET {
            return respond(mad, status::METHOD_UNSUPPORTED);
        }
        let set = m == method::SET;
        let header = mad_wire::Mad::new_checked(&mad[..]).expect("256 bytes");
        let (attr, attr_mod) = (header.attr_id(), header.attr_mod());
        let is_switch = self.fabric.node(node).kind() == NodeType::Switch;
        let st = match attr {
            attr_id::pma::CLASS_PORT_INFO if !set => {
                let mut cap = pma_cap::XMIT_WAIT | pma_cap::EXT_WIDTH;
                if is_switch {
                    cap |= pma_cap::ALL_PORT_SELECT;
                }
                let repr = ClassPortInfoRepr {
                    base_version: class::BASE_VERSION,
                    class_version: class::PERF_MGMT_CLASS_VERSION,
                    capability_mask: cap,
                    capability_mask2: 0,
                    resp_time_value: PMA_RESP_TIME_VALUE,
                    redirect_gid: [0; 16],
                    redirect_tc: 0,
                    redirect_sl: 0,
                    redirect_fl: 0,
                    redirect_lid: 0,
                    redirect_pkey: 0,
                    redirect_qp: 0,
                    redirect_qkey: 0,
                    trap_gid: [0; 16],
                    trap_tc: 0,
                    trap_sl: 0,
                    trap_fl: 0,
                    trap_lid: 0,
                    trap_pkey: 0,
                    trap_hop_limit: 0,
                    trap_qp: 0,
                    trap_qkey: 0,
                };
                let data = &mut mad[DATA_OFFSET..];
                data.fill(0);
                repr.emit(&mut ClassPortInfo::new_checked(data).expect("192 bytes"));
                status::SUCCESS
            }
            attr_id::pma::PORT_COUNTERS => self.port_counters(node, in_port, set, attr_mod, mad),
            attr_id::pma::PORT_COUNTERS_EXT => {
                self.port_counters_ext(node, in_port, set, attr_mod, mad)
            }
            _ => status::METHOD_ATTR_UNSUPPORTED,
        };
        respond(mad, st)
    }

    /// The ports PortSelect `select` names at `node` for a MAD that came in by `in_port`, or
    /// `None` when the request is invalid: a CA answers for the port the MAD arrived on only,
    /// a switch for any of its ports or all of them (255); the modifier must be 0.
    fn selected_ports(
        &self,
        node: NodeId,
        in_port: u8,
        select: u8,
        attr_mod: u32,
    ) -> Option<Vec<PortId>> {
        let n = self.fabric.node(node);
        let ok = attr_mod == 0
            && if n.kind() == NodeType::Switch {
                select <= n.num_ports() || select == ALL_PORTS
            } else {
                select == in_port
            };
        if !ok {
            return None;
        }
        Some(if select == ALL_PORTS {
            (0..=n.num_ports())
                .filter_map(|p| self.fabric.port_id(node, p))
                .collect()
        } else {
            self.fabric.port_id(node, select).into_iter().collect()
        })
    }

    fn port_counters(
        &mut self,
        node: NodeId,
        in_port: u8,
        set: bool,
        attr_mod: u32,
        mad: &mut [u8; 256],
    ) -> u16 {
        let data = &mut mad[DATA_OFFSET..];
        let mut repr = PortCountersRepr::parse(
            &PortCountersView::new_checked(&data[..]).expect("192 bytes hold PortCounters"),
        )
        .expect("PortCounters parses");
        let Some(ports) = self.selected_ports(node, in_port, repr.port_select, attr_mod) else {
            return status::INVALID_ATTR_VALUE;
        };
        let mut total = PortCounters::default();
        for p in ports {
            if set {
                self.agents
                    .counters_mut(p)
                    .clear_selected(repr.counter_select, repr.counter_select2);
            }
            total = total.plus(self.agents.counters(p));
        }
        total.report(&mut repr);
        // Only PortSelect and the CounterSelects come from the request: what this PMA does
        // not count, and everything after the attribute, reads zero.
        data.fill(0);
        repr.emit(&mut PortCountersView::new_checked(&mut data[..]).expect("192 bytes"));
        status::SUCCESS
    }

    /// PortCountersExtended Get and Set (Set clears what CounterSelect bits 0-7 name), with
    /// the port selection of PortCounters. What follows the attribute reads zero.
    fn port_counters_ext(
        &mut self,
        node: NodeId,
        in_port: u8,
        set: bool,
        attr_mod: u32,
        mad: &mut [u8; 256],
    ) -> u16 {
        let data = &mut mad[DATA_OFFSET..];
        let req = PortCountersExtRepr::parse(
            &PortCountersExtView::new_checked(&data[..]).expect("192 bytes hold it"),
        )
        .expect("PortCountersExtended parses");
        let Some(ports) = self.selected_ports(node, in_port, req.port_select, attr_mod) else {
            return status::INVALID_ATTR_VALUE;
        };
        let mut total = PortCounters::default();
        for p in ports {
            if set {
                self.agents.counters_mut(p).clear_ext(req.counter_select);
            }
            total = total.plus(self.agents.counters(p));
        }
        let mut repr = PortCountersExtRepr {
            port_select: req.port_select,
            counter_select: req.counter_select,
            ..PortCountersExtRepr::default()
        };
        total.report_ext(&mut repr);
        data.fill(0);
        repr.emit(&mut PortCountersExtView::new_checked(&mut data[..]).expect("192 bytes"));
        status::SUCCESS
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_counter_select2_bit_0_clears_port_xmit_wait() {
        let waited = PortCounters {
            xmit_wait: 7,
            vl15_dropped: 3,
            ..PortCounters::default()
        };
        // Bit 1 is QP1Dropped (perfquery's reset mask bit 17): PortXmitWait stays.
        let mut c = waited;
        c.clear_selected(0, 0x02);
        assert_eq!(c, waited);
        let mut c = waited;
        c.clear_selected(0, 0x01);
        assert_eq!((c.xmit_wait, c.vl15_dropped), (0, 3));
        let mut c = waited;
        c.clear_selected(sel::VL15_DROPPED, 0);
        assert_eq!((c.xmit_wait, c.vl15_dropped), (7, 0));
    }
}

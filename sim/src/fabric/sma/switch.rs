//! The switch-only attributes: SwitchInfo and the linear and multicast forwarding tables. A CA
//! asked for them answers 0x000C (the dispatcher never calls these for a CA).
//!
//! - SwitchInfo Set writes LinearFDBTop (at most LinearFDBCap - 1 and a unicast LID), the
//!   default ports (a port of the switch, or 255), LifeTimeValue and LIDsPerPort;
//!   PortStateChange is cleared by writing 1. The capabilities are read-only. MulticastFDBTop
//!   is ignored, as ibsim's `do_switchinfo` (`sim_mad.c`) ignores it: no simulated switch
//!   supports it ([`limits::MULTICAST_FDB_TOP`]).
//! - LinearForwardingTable: modifier = block of 64 LIDs, below LinearFDBCap / 64.
//! - MulticastForwardingTable: modifier bits 0-8 the block of 32 MLIDs (below
//!   MulticastFDBCap / 32), bits 28-31 the 16-port mask position (within the switch's ports).

use mad_wire::attr::linear_forwarding_table::{
    LIDS_PER_BLOCK, LinearForwardingTable, LinearForwardingTableRepr,
};
use mad_wire::attr::multicast_forwarding_table::{
    MLID_START, MLIDS_PER_BLOCK, MftAttrMod, MulticastForwardingTable, MulticastForwardingTableRepr,
};
use mad_wire::attr::switch_info::{SwitchInfo, SwitchInfoRepr};
use mad_wire::status;

use super::{Data, Sma, Status, limits};
use crate::fabric::model::NodeId;
use crate::fabric::state::{LFT_BLOCK, SwitchState};

const BAD: Status = status::INVALID_ATTR_VALUE;

impl Sma<'_> {
    fn switch_state(&mut self, node: NodeId) -> &mut SwitchState {
        self.fabric
            .switch_mut(node)
            .expect("the dispatcher calls switch handlers for switches only")
    }

    /// SwitchInfo.
    pub(super) fn switch_info(
        &mut self,
        node: NodeId,
        set: bool,
        attr_mod: u32,
        data: &mut Data,
    ) -> Status {
        let ports = self.fabric.node(node).num_ports();
        let mut st = status::SUCCESS;
        if attr_mod != 0 {
            st = BAD;
        } else if set {
            let req = SwitchInfoRepr::parse(&SwitchInfo::new_checked(&data[..]).expect("64 bytes"))
                .expect("SwitchInfo parses from 64 bytes");
            let sw = self.switch_state(node);
            let top_max = limits::linear_fdb_top_max(&sw.info);
            let port_ok = |p: u8| limits::switch_port_ok(ports, p);
            if req.linear_fdb_top > top_max
                || !port_ok(req.default_port)
                || !port_ok(req.default_mcast_primary_port)
                || !port_ok(req.default_mcast_not_primary_port)
            {
                st = BAD;
            } else {
                let i = &mut sw.info;
                i.linear_fdb_top = req.linear_fdb_top;
                i.default_port = req.default_port;
                i.default_mcast_primary_port = req.default_mcast_primary_port;
                i.default_mcast_not_primary_port = req.default_mcast_not_primary_port;
                i.life_time_value = req.life_time_value;
                i.lids_per_port = req.lids_per_port;
                if req.port_state_change {
                    i.port_state_change = false;
                }
            }
        }
        let i = self.switch_state(node).info;
        SwitchInfoRepr {
            linear_fdb_cap: i.linear_fdb_cap,
            random_fdb_cap: i.random_fdb_cap,
            multicast_fdb_cap: i.multicast_fdb_cap,
            linear_fdb_top: i.linear_fdb_top,
            default_port: i.default_port,
            default_mcast_primary_port: i.default_mcast_primary_port,
            default_mcast_not_primary_port: i.default_mcast_not_primary_port,
            life_time_value: i.life_time_value,
            port_state_change: i.port_state_change,
            optimized_sl_to_vl_mapping_programming: i.optimized_sl2vl,
            lids_per_port: i.lids_per_port,
            partition_enforcement_cap: i.partition_enforcement_cap,
            inbound_enforcement_cap: i.inbound_enforcement_cap,
            outbound_enforcement_cap: i.outbound_enforcement_cap,
            filter_raw_inbound_cap: i.filter_raw_inbound_cap,
            filter_raw_outbound_cap: i.filter_raw_outbound_cap,
            enhanced_port0: i.enhanced_port0,
            multicast_fdb_top: i.multicast_fdb_top,
        }
        .emit(&mut SwitchInfo::new_checked(&mut data[..]).expect("64 bytes"));
        data[mad_wire::attr::switch_info::LEN..].fill(0);
        st
    }

    /// One LinearForwardingTable block.
    pub(super) fn lft(
        &mut self,
        node: NodeId,
        set: bool,
        attr_mod: u32,
        data: &mut Data,
    ) -> Status {
        let sw = self.switch_state(node);
        let blocks = u32::from(sw.info.linear_fdb_cap) / LIDS_PER_BLOCK as u32;
        if attr_mod >= blocks {
            return BAD;
        }
        let block = attr_mod as u16;
        if set {
            let req = LinearForwardingTableRepr::parse(
                &LinearForwardingTable::new_checked(&data[..]).expect("64 bytes"),
            )
            .expect("an LFT block parses from 64 bytes");
            let mut ports = [0u8; LFT_BLOCK];
            ports.copy_from_slice(&req.ports);
            sw.set_lft_block(block, &ports);
        }
        LinearForwardingTableRepr {
            ports: sw.lft_block(block),
        }
        .emit(&mut LinearForwardingTable::new_checked(&mut data[..]).expect("64 bytes"));
        status::SUCCESS
    }

    /// One MulticastForwardingTable block of port masks.
    pub(super) fn mft(
        &mut self,
        node: NodeId,
        set: bool,
        attr_mod: u32,
        data: &mut Data,
    ) -> Status {
        let sw = self.switch_state(node);
        let m = MftAttrMod::from_attr_mod(attr_mod);
        let first = u32::from(m.block) * MLIDS_PER_BLOCK as u32;
        if first >= u32::from(sw.info.multicast_fdb_cap) || m.position >= sw.mft_positions {
            return BAD;
        }
        let mlid = |i: usize| MLID_START + (first as u16) + i as u16;
        if set {
            let req = MulticastForwardingTableRepr::parse(
                &MulticastForwardingTable::new_checked(&data[..]).expect("64 bytes"),
            )
            .expect("an MFT block parses from 64 bytes");
            for (i, &mask) in req.port_masks.iter().enumerate() {
                let lid = mlid(i);
                // Masks beyond MulticastFDBCap in the last block are not stored.
                let _ = sw.set_mft_mask(lid, m.position, mask);
            }
        }
        let mut out = MulticastForwardingTableRepr {
            port_masks: [0; MLIDS_PER_BLOCK],
        };
        for (i, mask) in out.port_masks.iter_mut().enumerate() {
            *mask = sw.mft_mask(mlid(i), m.position);
        }
        out.emit(&mut MulticastForwardingTable::new_checked(&mut data[..]).expect("64 bytes"));
        status::SUCCESS
    }
}

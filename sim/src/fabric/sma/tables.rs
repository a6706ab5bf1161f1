//! The per-port tables: P_KeyTable, SLtoVLMappingTable, VLArbitrationTable and GUIDInfo.
//! Each is stored only once written (a side table of the fabric), and reads as its default
//! until then.
//!
//! - P_KeyTable: modifier bits 0-15 the block of 32 P_Keys, bits 16-31 the port (switches;
//!   a CA answers for the receiving port). A CA port and a switch's port 0 hold NodeInfo
//!   PartitionCap entries, a switch's external port SwitchInfo PartitionEnforcementCap. Entry 0
//!   starts as the default P_Key 0xFFFF (ibsim `init_ports`).
//! - SLtoVLMappingTable: switches: modifier bits 8-15 the input port, bits 0-7 the output
//!   port; a CA ignores the modifier (as ibsim and the kernel's SMAs).
//! - VLArbitrationTable: modifier bits 16-31 the block (1, 2 low priority; 3, 4 high), bits
//!   0-15 the port (switches). A block exists if the port's VLArbitrationLowCap/HighCap covers
//!   it; entries beyond the cap read as 0 and are not stored.
//! - GUIDInfo: modifier = block of 8 GUIDs, below GUIDCap / 8. Entry 0 of block 0 is the port
//!   GUID, read-only; the others are alias GUIDs the SM may write. A switch answers for port 0.

use mad_wire::attr::guid_info::{GUIDS_PER_BLOCK, GuidInfo, GuidInfoRepr};
use mad_wire::attr::pkey_table::{
    DEFAULT_PKEY, PKEYS_PER_BLOCK, PkeyAttrMod, PkeyTable, PkeyTableRepr,
};
use mad_wire::attr::sl_to_vl_table::{SlToVlAttrMod, SlToVlTable, SlToVlTableRepr};
use mad_wire::attr::vl_arb_table::{
    ENTRIES_PER_BLOCK, VlArbAttrMod, VlArbEntry, VlArbTable, VlArbTableRepr,
};
use mad_wire::status;

use super::defaults::{self, CA_PARTITION_CAP, PortKind, SWITCH_PARTITION_CAP};
use super::{Data, Effect, Sma, Status, port_kind};
use crate::fabric::model::{Fabric, NodeId, NodeType, PortId};
use crate::link::PortChange;
use crate::packet::pkey_match;

const BAD: Status = status::INVALID_ATTR_VALUE;

impl Sma<'_> {
    /// The port a table attribute addresses: on a switch the port in the modifier (`None` if
    /// the switch has no such port), on a CA the receiving port.
    fn table_port(&self, node: NodeId, in_port: u8, switch_port: u32) -> Option<PortId> {
        let n = self.fabric.node(node);
        if n.kind() == NodeType::Switch {
            u8::try_from(switch_port)
                .ok()
                .and_then(|p| self.fabric.port_id(node, p))
        } else {
            self.fabric.port_id(node, in_port)
        }
    }

    /// P_Key table entries of `port`.
    fn pkey_cap(&self, port: PortId) -> usize {
        pkey_capacity(self.fabric, port)
    }

    /// The P_Key table of `port` (the default one if never written).
    pub fn pkeys(&self, port: PortId) -> Vec<u16> {
        match self.agents.pkeys.get(port) {
            Some(t) => t.to_vec(),
            None => default_pkeys(self.pkey_cap(port)).into_vec(),
        }
    }

    /// Whether the P_Key table of `port` has an entry that matches `pkey` (IBA 10.9.3), as
    /// the port checks every packet but an SMP.
    pub fn accepts_pkey(&self, port: PortId, pkey: u16) -> bool {
        match self.agents.pkeys.get(port) {
            Some(t) => t.iter().any(|&k| pkey_match(k, pkey)),
            // The default table, without making it: the default P_Key and empty entries.
            None => self.pkey_cap(port) > 0 && pkey_match(DEFAULT_PKEY, pkey),
        }
    }

    /// P_KeyTable.
    pub(super) fn pkey_table(
        &mut self,
        node: NodeId,
        in_port: u8,
        set: bool,
        attr_mod: u32,
        data: &mut Data,
    ) -> Status {
        let m = PkeyAttrMod::from_attr_mod(attr_mod);
        let Some(port) = self.table_port(node, in_port, u32::from(m.port)) else {
            return BAD;
        };
        let cap = self.pkey_cap(port);
        let start = usize::from(m.block) * PKEYS_PER_BLOCK;
        if start >= cap {
            return BAD;
        }
        let n = (cap - start).min(PKEYS_PER_BLOCK);
        if set {
            let req = PkeyTableRepr::parse(&PkeyTable::new_checked(&data[..]).expect("64 bytes"))
                .expect("a P_Key block parses from 64 bytes");
            let table = self
                .agents
                .pkeys
                .get_or_insert_with(port, || default_pkeys(cap));
            // A stored table always has `cap` entries (the state file refuses others); should
            // one not, the entries it lacks are not stored rather than written out of bounds.
            let stored = table.get_mut(start..).unwrap_or_default();
            let m = n.min(stored.len());
            let changed = stored[..m] != req.pkeys[..m];
            stored[..m].copy_from_slice(&req.pkeys[..m]);
            if changed {
                self.effect(Effect::Port(port, PortChange::Pkey));
            }
        }
        let mut out = PkeyTableRepr {
            pkeys: [0; PKEYS_PER_BLOCK],
        };
        match self.agents.pkeys.get(port) {
            Some(t) => {
                // Entries a (malformed) stored table lacks read as empty.
                let have = t.get(start..).unwrap_or_default();
                let m = n.min(have.len());
                out.pkeys[..m].copy_from_slice(&have[..m]);
            }
            None if start == 0 => out.pkeys[0] = DEFAULT_PKEY,
            None => {}
        }
        out.emit(&mut PkeyTable::new_checked(&mut data[..]).expect("64 bytes"));
        status::SUCCESS
    }

    /// SLtoVLMappingTable.
    pub(super) fn sl2vl(
        &mut self,
        node: NodeId,
        in_port: u8,
        set: bool,
        attr_mod: u32,
        data: &mut Data,
    ) -> Status {
        let key = if self.fabric.node(node).kind() == NodeType::Switch {
            let m = SlToVlAttrMod::from_attr_mod(attr_mod);
            let num = self.fabric.node(node).num_ports();
            let (Some(out), true) = (
                self.fabric.port_id(node, m.output_port),
                attr_mod >> 16 == 0 && m.input_port <= num,
            ) else {
                return BAD;
            };
            (out, m.input_port)
        } else {
            match self.fabric.port_id(node, in_port) {
                Some(p) => (p, 0),
                None => return BAD,
            }
        };
        if set {
            let mut t = [0u8; 8];
            t.copy_from_slice(&data[..8]);
            self.agents.sl2vl.insert(key, t);
        }
        let t = self
            .agents
            .sl2vl
            .get(&key)
            .copied()
            .unwrap_or(defaults::SL2VL);
        let repr = SlToVlTableRepr::parse(&SlToVlTable::new_checked(&t[..]).expect("8 bytes"))
            .expect("an SL-to-VL table parses from 8 bytes");
        data.fill(0);
        repr.emit(&mut SlToVlTable::new_checked(&mut data[..]).expect("64 bytes"));
        status::SUCCESS
    }

    /// VLArbitrationTable.
    pub(super) fn vl_arb(
        &mut self,
        node: NodeId,
        in_port: u8,
        set: bool,
        attr_mod: u32,
        data: &mut Data,
    ) -> Status {
        let m = VlArbAttrMod::from_attr_mod(attr_mod);
        let Some(port) = self.table_port(node, in_port, u32::from(m.port)) else {
            return BAD;
        };
        if !(1..=4).contains(&m.block) {
            return BAD;
        }
        let d = port_kind(self.fabric, port).defaults();
        let high = m.block >= 3;
        let upper = m.block % 2 == 0;
        let cap = usize::from(if high {
            d.vl_arb_high_cap
        } else {
            d.vl_arb_low_cap
        });
        let start = if upper { ENTRIES_PER_BLOCK } else { 0 };
        if cap <= start {
            return BAD;
        }
        let n = (cap - start).min(ENTRIES_PER_BLOCK);
        let which = usize::from(high);
        if set {
            let req = VlArbTableRepr::parse(&VlArbTable::new_checked(&data[..]).expect("64 bytes"))
                .expect("a VL arbitration block parses from 64 bytes");
            let t = self.agents.vlarb.get_or_insert_with(port, || {
                Box::new([defaults::vl_arb_low(), defaults::vl_arb_high()])
            });
            t[which][start..start + n].copy_from_slice(&req.entries[..n]);
        }
        let mut out = VlArbTableRepr {
            entries: [VlArbEntry::default(); ENTRIES_PER_BLOCK],
        };
        let src = match self.agents.vlarb.get(port) {
            Some(t) => t[which],
            None if high => defaults::vl_arb_high(),
            None => defaults::vl_arb_low(),
        };
        out.entries[..n].copy_from_slice(&src[start..start + n]);
        out.emit(&mut VlArbTable::new_checked(&mut data[..]).expect("64 bytes"));
        status::SUCCESS
    }

    /// GUIDInfo.
    pub(super) fn guid_info(
        &mut self,
        node: NodeId,
        in_port: u8,
        set: bool,
        attr_mod: u32,
        data: &mut Data,
    ) -> Status {
        let Some(port) = self.table_port(node, in_port, 0) else {
            return BAD;
        };
        let cap = usize::from(port_kind(self.fabric, port).defaults().guid_cap);
        let Ok(block) = usize::try_from(attr_mod) else {
            return BAD;
        };
        let start = block.saturating_mul(GUIDS_PER_BLOCK);
        if start >= cap {
            return BAD;
        }
        let n = (cap - start).min(GUIDS_PER_BLOCK);
        if set {
            let req = GuidInfoRepr::parse(&GuidInfo::new_checked(&data[..]).expect("64 bytes"))
                .expect("a GUIDInfo block parses from 64 bytes");
            let table = self
                .agents
                .guids
                .get_or_insert_with(port, || vec![0; cap].into_boxed_slice());
            // Entry 0 (the port GUID) is read-only.
            let first = usize::from(start == 0);
            let changed = table[start + first..start + n] != req.guids[first..n];
            table[start + first..start + n].copy_from_slice(&req.guids[first..n]);
            if changed {
                self.effect(Effect::Port(port, PortChange::Guid));
            }
        }
        let mut out = GuidInfoRepr {
            guids: [0; GUIDS_PER_BLOCK],
        };
        if let Some(t) = self.agents.guids.get(port) {
            out.guids[..n].copy_from_slice(&t[start..start + n]);
        }
        if start == 0 {
            out.guids[0] = self.fabric.port(port).guid();
        }
        out.emit(&mut GuidInfo::new_checked(&mut data[..]).expect("64 bytes"));
        status::SUCCESS
    }
}

/// How many entries the P_Key table of `port` holds: NodeInfo PartitionCap for a CA port and
/// a switch's port 0, SwitchInfo PartitionEnforcementCap for a switch's external port.
pub fn pkey_capacity(fabric: &Fabric, port: PortId) -> usize {
    match port_kind(fabric, port) {
        PortKind::Ca => usize::from(CA_PARTITION_CAP),
        PortKind::SwitchPort0 => usize::from(SWITCH_PARTITION_CAP),
        PortKind::SwitchExternal => {
            let node = fabric.port(port).node();
            usize::from(
                fabric
                    .switch(node)
                    .map_or(0, |s| s.info.partition_enforcement_cap),
            )
        }
    }
}

/// A P_Key table of `cap` entries as a port starts: the default P_Key, then empty entries.
fn default_pkeys(cap: usize) -> Box<[u16]> {
    let mut t = vec![0u16; cap].into_boxed_slice();
    if let Some(first) = t.first_mut() {
        *first = DEFAULT_PKEY;
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stored P_Key table shorter or longer than the port's capacity (which no SMA Set
    /// makes, but a state written by hand could have) is read and written within its length:
    /// no index beyond it, the entries it lacks read as empty.
    #[test]
    fn a_stored_pkey_table_of_another_length_cannot_panic_the_sma() {
        let mut fabric = Fabric::parse_str(
            "t",
            "Hca 1 \"A\"\n[1] \"B\"[1]\n\nHca 1 \"B\"\n[1] \"A\"[1]\n",
        )
        .unwrap();
        let mut agents = super::super::Agents::new(&mut fabric);
        let a = fabric.node_by_name("A").unwrap();
        let port = fabric.port_id(a, 1).unwrap();
        for len in [1usize, 40, 100] {
            let t: Vec<u16> = (0..len).map(|i| 0x8000 | i as u16).collect();
            *agents.pkeys.get_or_insert_with(port, Box::default) = t.into_boxed_slice();
            let mut sma = Sma {
                fabric: &mut fabric,
                agents: &mut agents,
                now: std::time::Duration::ZERO,
            };
            for block in 0..2u32 {
                let mut data = [0u8; 64];
                assert_eq!(
                    sma.pkey_table(a, 1, false, block, &mut data),
                    status::SUCCESS
                );
                let first = block as usize * PKEYS_PER_BLOCK;
                for i in 0..PKEYS_PER_BLOCK {
                    let want = if first + i < len {
                        0x8000 | (first + i) as u16
                    } else {
                        0
                    };
                    let got = u16::from_be_bytes([data[2 * i], data[2 * i + 1]]);
                    assert_eq!(got, want, "table of {len}, block {block}, entry {i}");
                }
                assert_eq!(
                    sma.pkey_table(a, 1, true, block, &mut data),
                    status::SUCCESS
                );
            }
            assert_eq!(sma.agents.pkeys.get(port).map(|t| t.len()), Some(len));
        }
    }
}

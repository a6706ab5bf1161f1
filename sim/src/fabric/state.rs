//! The management state the simulated SMA keeps per port and per switch (PortInfo, SwitchInfo,
//! the forwarding tables). The topology sets the initial values; the SMA changes them on Set.

use super::rate::ActiveRates;

/// PortInfo PortState (`mad-stack.md` §2.7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[repr(u8)]
pub enum LinkState {
    /// 0: no state change (only meaningful in a Set).
    NoChange = 0,
    /// 1: Down.
    #[default]
    Down = 1,
    /// 2: Initialize.
    Init = 2,
    /// 3: Armed.
    Armed = 3,
    /// 4: Active.
    Active = 4,
}

/// PortInfo PortPhysicalState (`mad-stack.md` §2.7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[repr(u8)]
pub enum PhysState {
    /// 0: no state change (only meaningful in a Set).
    NoChange = 0,
    /// 1: Sleep.
    Sleep = 1,
    /// 2: Polling: no partner seen.
    #[default]
    Polling = 2,
    /// 3: Disabled.
    Disabled = 3,
    /// 4: PortConfigurationTraining.
    Training = 4,
    /// 5: LinkUp.
    LinkUp = 5,
    /// 6: LinkErrorRecovery.
    LinkErrorRecovery = 6,
    /// 7: PhyTest.
    PhyTest = 7,
}

/// Per-port state the SMA reads and writes through PortInfo. Initial values follow ibsim's
/// `connect_ports`: a linked port starts in Init/LinkUp, an unlinked one in Down/Polling, a
/// switch's port 0 in Active/LinkUp. The LID and LMC live on [`Port`](super::Port) because the
/// fabric's LID index must follow them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PortState {
    /// PortState.
    pub link_state: LinkState,
    /// PortPhysicalState.
    pub phys_state: PhysState,
    /// The rate the link trained to (zero when the link is not up); a switch's port 0, which
    /// has no link, reports [`ActiveRates::SWITCH_PORT0`].
    pub active: ActiveRates,
    /// M_Key.
    pub m_key: u64,
    /// M_KeyLeasePeriod.
    pub m_key_lease_period: u16,
    /// M_KeyProtectBits (0-3).
    pub m_key_protect: u8,
    /// GidPrefix (subnet prefix); IBA's default link-local prefix fe80::/64.
    pub subnet_prefix: u64,
    /// MasterSMLID.
    pub sm_lid: u16,
    /// MasterSMSL.
    pub sm_sl: u8,
    /// CapabilityMask; the SMA sets its own bits (IsSM is set by an SM attaching here).
    pub capability_mask: u32,
    /// NeighborMTU.
    pub neighbor_mtu: u8,
    /// OperationalVLs.
    pub op_vls: u8,
    /// HOQLife.
    pub hoq_life: u8,
    /// ClientReregister pending.
    pub client_reregister: bool,
}

impl Default for PortState {
    fn default() -> Self {
        PortState {
            link_state: LinkState::Down,
            phys_state: PhysState::Polling,
            active: ActiveRates::default(),
            m_key: 0,
            m_key_lease_period: 0,
            m_key_protect: 0,
            subnet_prefix: 0xfe80_0000_0000_0000,
            sm_lid: 0,
            sm_sl: 0,
            capability_mask: 0,
            neighbor_mtu: 0,
            op_vls: 0,
            hoq_life: 0,
            client_reregister: false,
        }
    }
}

/// SwitchInfo fields (`mad-stack.md` §2.7, OSM `ib_switch_info_t`). Defaults are ibsim's
/// (`sim_net.c` `switchinfo[]` and `new_switch`, `sim.h` caps of version 0.12).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SwitchInfo {
    /// LinearFDBCap: LIDs the LFT can hold (ibsim 0.12: 48K).
    pub linear_fdb_cap: u16,
    /// RandomFDBCap.
    pub random_fdb_cap: u16,
    /// MulticastFDBCap (ibsim: 1024).
    pub multicast_fdb_cap: u16,
    /// LinearFDBTop: highest LID the LFT is valid for.
    pub linear_fdb_top: u16,
    /// DefaultPort.
    pub default_port: u8,
    /// DefaultMulticastPrimaryPort.
    pub default_mcast_primary_port: u8,
    /// DefaultMulticastNotPrimaryPort.
    pub default_mcast_not_primary_port: u8,
    /// LifeTimeValue (5 bits).
    pub life_time_value: u8,
    /// PortStateChange: set when a port changes state, cleared by the SM (ibsim sets it as links
    /// come up at load).
    pub port_state_change: bool,
    /// OptimizedSLtoVLMappingProgramming (2 bits).
    pub optimized_sl2vl: u8,
    /// LIDsPerPort.
    pub lids_per_port: u16,
    /// PartitionEnforcementCap (ibsim: 64).
    pub partition_enforcement_cap: u16,
    /// InboundEnforcementCap.
    pub inbound_enforcement_cap: bool,
    /// OutboundEnforcementCap.
    pub outbound_enforcement_cap: bool,
    /// FilterRawInboundCap (ibsim: set).
    pub filter_raw_inbound_cap: bool,
    /// FilterRawOutboundCap (ibsim: set).
    pub filter_raw_outbound_cap: bool,
    /// EnhancedPort0: port 0 is an enhanced port (from the header's `enhanced port 0`).
    pub enhanced_port0: bool,
    /// MulticastFDBTop.
    pub multicast_fdb_top: u16,
}

impl Default for SwitchInfo {
    fn default() -> Self {
        SwitchInfo {
            linear_fdb_cap: 48 * 1024,
            random_fdb_cap: 0,
            multicast_fdb_cap: 1024,
            linear_fdb_top: 0,
            default_port: 0,
            default_mcast_primary_port: 0,
            default_mcast_not_primary_port: 0,
            life_time_value: 0,
            port_state_change: false,
            optimized_sl2vl: 0,
            lids_per_port: 0,
            partition_enforcement_cap: 64,
            inbound_enforcement_cap: false,
            outbound_enforcement_cap: false,
            filter_raw_inbound_cap: true,
            filter_raw_outbound_cap: true,
            enhanced_port0: false,
            multicast_fdb_top: crate::fabric::sma::limits::MULTICAST_FDB_TOP,
        }
    }
}

/// The LFT entry meaning "no route" (IBA: port 255 drops the packet).
pub const LFT_NO_ROUTE: u8 = 0xff;
/// The first multicast LID.
pub const MCAST_LID_BASE: u16 = 0xc000;
/// Entries per LinearForwardingTable block.
pub const LFT_BLOCK: usize = 64;

/// A switch's forwarding state. The tables start empty and grow as the SM programs them, so an
/// unrouted 100,000-node fabric costs no table memory.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SwitchState {
    /// SwitchInfo.
    pub info: SwitchInfo,
    /// Linear forwarding table: `lft[lid]` is the output port; [`LFT_NO_ROUTE`] or beyond the end
    /// means no route. Indexed directly by DLID, so a lookup is O(1).
    pub lft: Vec<u8>,
    /// Multicast forwarding table: port masks, `positions` 16-bit words per MLID (MLID
    /// `0xc000 + i` at `mft[i * positions ..]`, word `k` covering ports `16k .. 16k+15`).
    pub mft: Vec<u16>,
    /// 16-port mask words per MLID: `(num_ports + 1).div_ceil(16)`.
    pub mft_positions: u8,
}

impl SwitchState {
    /// A switch with `num_ports` external ports and ibsim's default SwitchInfo.
    pub fn new(num_ports: u8) -> SwitchState {
        SwitchState {
            info: SwitchInfo::default(),
            lft: Vec::new(),
            mft: Vec::new(),
            mft_positions: (u16::from(num_ports) + 1).div_ceil(16) as u8,
        }
    }

    /// The output port the LFT gives for `lid`, or `None` if there is no route.
    pub fn route(&self, lid: u16) -> Option<u8> {
        match self.lft.get(usize::from(lid)) {
            Some(&p) if p != LFT_NO_ROUTE => Some(p),
            _ => None,
        }
    }

    /// Stores one LinearForwardingTable block (64 LIDs starting at `block * 64`), growing the
    /// table as needed. Returns `false` (storing nothing) if the block lies beyond
    /// LinearFDBCap.
    pub fn set_lft_block(&mut self, block: u16, ports: &[u8; LFT_BLOCK]) -> bool {
        let start = usize::from(block) * LFT_BLOCK;
        if start + LFT_BLOCK > usize::from(self.info.linear_fdb_cap) {
            return false;
        }
        if self.lft.len() < start + LFT_BLOCK {
            self.lft.resize(start + LFT_BLOCK, LFT_NO_ROUTE);
        }
        self.lft[start..start + LFT_BLOCK].copy_from_slice(ports);
        true
    }

    /// One LinearForwardingTable block as the SMA returns it in a Get (unprogrammed entries
    /// read as [`LFT_NO_ROUTE`]).
    pub fn lft_block(&self, block: u16) -> [u8; LFT_BLOCK] {
        let mut out = [LFT_NO_ROUTE; LFT_BLOCK];
        let start = usize::from(block) * LFT_BLOCK;
        if start < self.lft.len() {
            let end = (start + LFT_BLOCK).min(self.lft.len());
            out[..end - start].copy_from_slice(&self.lft[start..end]);
        }
        out
    }

    /// The port mask word `position` (ports `16 * position ..`) for multicast LID `mlid`, or 0
    /// when unprogrammed or out of range.
    pub fn mft_mask(&self, mlid: u16, position: u8) -> u16 {
        let (Some(i), true) = (
            mlid.checked_sub(MCAST_LID_BASE),
            position < self.mft_positions,
        ) else {
            return 0;
        };
        let at = usize::from(i) * usize::from(self.mft_positions) + usize::from(position);
        self.mft.get(at).copied().unwrap_or(0)
    }

    /// Sets a port mask word, growing the table. Returns `false` (storing nothing) if `mlid` is
    /// not a multicast LID within MulticastFDBCap or `position` is beyond the switch's ports.
    pub fn set_mft_mask(&mut self, mlid: u16, position: u8, mask: u16) -> bool {
        let Some(i) = mlid.checked_sub(MCAST_LID_BASE) else {
            return false;
        };
        if i >= self.info.multicast_fdb_cap || position >= self.mft_positions {
            return false;
        }
        let per = usize::from(self.mft_positions);
        let at = usize::from(i) * per + usize::from(position);
        if self.mft.len() <= at {
            self.mft.resize((usize::from(i) + 1) * per, 0);
        }
        self.mft[at] = mask;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lft_grows_by_block_and_reads_back() {
        let mut s = SwitchState::new(36);
        assert_eq!(s.route(5), None);
        let mut block = [LFT_NO_ROUTE; LFT_BLOCK];
        block[3] = 7;
        assert!(s.set_lft_block(2, &block));
        assert_eq!(s.lft.len(), 192);
        assert_eq!(s.route(128 + 3), Some(7));
        assert_eq!(s.route(128 + 4), None);
        assert_eq!(s.route(5), None);
        assert_eq!(s.lft_block(2)[3], 7);
        assert_eq!(s.lft_block(100), [LFT_NO_ROUTE; LFT_BLOCK]);
        // 48K LIDs = 768 blocks: block 767 fits, 768 does not.
        assert!(s.set_lft_block(767, &block));
        assert!(!s.set_lft_block(768, &block));
    }

    #[test]
    fn mft_positions_and_bounds() {
        let mut s = SwitchState::new(36);
        assert_eq!(s.mft_positions, 3); // ports 0..=36 need three 16-port words
        assert!(s.set_mft_mask(0xc001, 2, 0x10));
        assert_eq!(s.mft_mask(0xc001, 2), 0x10);
        assert_eq!(s.mft_mask(0xc001, 1), 0);
        assert_eq!(s.mft_mask(0xc000, 0), 0);
        assert!(!s.set_mft_mask(0xbfff, 0, 1));
        assert!(!s.set_mft_mask(0xc001, 3, 1));
        assert!(!s.set_mft_mask(0xc000 + 1024, 0, 1));
        assert_eq!(SwitchState::new(15).mft_positions, 1);
        assert_eq!(SwitchState::new(16).mft_positions, 2);
    }
}

//! The fabric model: nodes and ports in flat vectors addressed by integer ids, so that following
//! a link, a directed-route hop or an LFT entry is an index operation whatever the fabric's size.
//!
//! Layout: `nodes[n]` owns the port slots `ports[base .. base + num_ports + 1]`, slot `base + p`
//! being port `p` (slot `base` is port 0: a switch's management port, unused on CAs and
//! routers). A port's peer is stored as the peer's global [`PortId`], and every port knows its
//! node and number, so a hop is two loads. Switches index a side vector of [`SwitchState`].
//! Names and descriptions live in one string arena.

use std::collections::HashMap;

use crate::idmap::IdKeyMap;

use super::rate::LinkRates;
use super::state::{PortState, SwitchState};

/// Marks "none" in the `u32` id fields.
pub(super) const NONE: u32 = u32::MAX;

/// Index of a node in its [`Fabric`], in file order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId(pub u32);

impl NodeId {
    /// The index as a `usize`.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// Index of a port slot in its [`Fabric`] (all nodes' ports in one vector).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PortId(pub u32);

impl PortId {
    /// The index as a `usize`.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// NodeInfo NodeType (`mad-stack.md` §2.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum NodeType {
    /// 1: channel adapter (`Hca`/`Ca` records).
    Ca = 1,
    /// 2: switch (`Switch` records).
    Switch = 2,
    /// 3: router (`Rt` records).
    Router = 3,
}

impl NodeType {
    /// The record keyword the writer uses (`Switch`, `Ca`, `Rt`, as ibnetdiscover writes them).
    pub fn keyword(self) -> &'static str {
        match self {
            NodeType::Ca => "Ca",
            NodeType::Switch => "Switch",
            NodeType::Router => "Rt",
        }
    }
}

/// A span of the string arena.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Span {
    pub(super) start: u32,
    pub(super) len: u32,
}

/// A node: a switch, CA or router with its identity (NodeInfo, NodeDescription).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    pub(super) kind: NodeType,
    pub(super) num_ports: u8,
    pub(super) port_base: u32,
    pub(super) switch: u32,
    pub(super) guid: u64,
    pub(super) sys_image_guid: u64,
    pub(super) vendor_id: u32,
    pub(super) device_id: u16,
    pub(super) name: Span,
    pub(super) description: Span,
}

impl Node {
    /// Switch, CA or router.
    pub fn kind(&self) -> NodeType {
        self.kind
    }
    /// NumPorts: physical ports, numbered 1 to this.
    pub fn num_ports(&self) -> u8 {
        self.num_ports
    }
    /// NodeGUID.
    pub fn guid(&self) -> u64 {
        self.guid
    }
    /// SystemImageGUID.
    pub fn sys_image_guid(&self) -> u64 {
        self.sys_image_guid
    }
    /// VendorID (24 bits).
    pub fn vendor_id(&self) -> u32 {
        self.vendor_id
    }
    /// DeviceID.
    pub fn device_id(&self) -> u16 {
        self.device_id
    }
}

/// A port slot: a physical port (or a switch's port 0), its GUID, its enabled rates, the port it
/// is cabled to, and the SMA's state for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Port {
    pub(super) node: u32,
    pub(super) num: u8,
    pub(super) lmc: u8,
    pub(super) lid: u16,
    pub(super) peer: u32,
    pub(super) guid: u64,
    /// The rates this port enables (PortInfo LinkWidthEnabled etc.).
    pub enabled: LinkRates,
    /// LinkSpeedExtSupported: fixed when the fabric is built (see
    /// [`speed_ext_supported`](Self::speed_ext_supported)).
    pub(super) speed_ext_supported: u8,
    /// LinkSpeedExtSupported2: fixed when the fabric is built (see
    /// [`speed_ext2_supported`](Self::speed_ext2_supported)).
    pub(super) speed_ext2_supported: u8,
    /// PortInfo state kept by the SMA.
    pub state: PortState,
}

impl Port {
    /// The node this port belongs to.
    pub fn node(&self) -> NodeId {
        NodeId(self.node)
    }
    /// Its port number (0 for a switch's management port).
    pub fn num(&self) -> u8 {
        self.num
    }
    /// PortGUID (a switch's ports all share port 0's).
    pub fn guid(&self) -> u64 {
        self.guid
    }
    /// Base LID (0 = unassigned). Meaningful on CA/router ports and switch port 0.
    pub fn lid(&self) -> u16 {
        self.lid
    }
    /// LMC: the port answers to `lid .. lid + 2^lmc`.
    pub fn lmc(&self) -> u8 {
        self.lmc
    }
    /// The extended speeds the port supports (PortInfo LinkSpeedExtSupported): ibsim's
    /// FDR to NDR ([`LINK_SPEED_EXT_SUPPORTED`]) if its topology enables any extended speed,
    /// none for a port the topology gives SDR to QDR only. Fixed when the fabric is built, so
    /// an SM disabling the extended speeds (LinkSpeedExtEnabled 30) can enable them again;
    /// the SMA keeps [`enabled`](Self::enabled)`.speed_ext` inside it.
    ///
    /// [`LINK_SPEED_EXT_SUPPORTED`]: super::sma::defaults::LINK_SPEED_EXT_SUPPORTED
    pub fn speed_ext_supported(&self) -> u8 {
        self.speed_ext_supported
    }
    /// The extended speeds 2 the port supports (PortInfo LinkSpeedExtSupported2): XDR
    /// ([`LINK_SPEED_EXT2_SUPPORTED`]) if its topology enables it, else none. Fixed when the
    /// fabric is built, as [`speed_ext_supported`](Self::speed_ext_supported) is; the SMA
    /// keeps [`enabled`](Self::enabled)`.speed_ext2` inside it.
    ///
    /// [`LINK_SPEED_EXT2_SUPPORTED`]: super::sma::defaults::LINK_SPEED_EXT2_SUPPORTED
    pub fn speed_ext2_supported(&self) -> u8 {
        self.speed_ext2_supported
    }
    /// The port cabled to this one, if any.
    pub fn peer(&self) -> Option<PortId> {
        (self.peer != NONE).then_some(PortId(self.peer))
    }
}

/// A simulated InfiniBand fabric: nodes, their ports, the links between them and the
/// management state of each. Build one with [`Fabric::parse_file`], [`Fabric::parse_str`],
/// [`FabricBuilder`](super::FabricBuilder) or [`generator`](super::generator).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fabric {
    pub(super) nodes: Vec<Node>,
    pub(super) ports: Vec<Port>,
    pub(super) switches: Vec<SwitchState>,
    pub(super) strings: String,
    pub(super) by_name: IdKeyMap<Box<str>, NodeId>,
    pub(super) by_guid: IdKeyMap<u64, NodeId>,
    pub(super) by_port_guid: IdKeyMap<u64, PortId>,
    /// `lid_owner[lid]` = the port that took that unicast LID last, or `NONE`.
    pub(super) lid_owner: Vec<u32>,
    /// The other ports holding a LID held twice or more, the one that took it first first.
    /// Rare (only while an SM moves LIDs), so kept apart; a LID has no entry when only
    /// `lid_owner` holds it.
    pub(super) lid_shared: HashMap<u16, Vec<u32>>,
    pub(super) links: usize,
}

/// One past the highest unicast LID (unicast LIDs are 0x0001-0xbfff).
pub const UNICAST_LID_END: u32 = 0xc000;

impl Fabric {
    /// Number of nodes.
    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    /// Number of physical ports (port 1 and up of every node; a switch's port 0 is not counted).
    pub fn port_count(&self) -> usize {
        self.nodes.iter().map(|n| usize::from(n.num_ports)).sum()
    }

    /// Number of links (cables).
    pub fn link_count(&self) -> usize {
        self.links
    }

    /// Number of nodes of one type.
    pub fn count_of(&self, kind: NodeType) -> usize {
        self.nodes.iter().filter(|n| n.kind == kind).count()
    }

    /// All node ids, in file order.
    pub fn node_ids(&self) -> impl ExactSizeIterator<Item = NodeId> + use<> {
        (0..self.nodes.len() as u32).map(NodeId)
    }

    /// A node. Panics if `id` is not from this fabric.
    pub fn node(&self, id: NodeId) -> &Node {
        &self.nodes[id.index()]
    }

    /// A node's id (the quoted string of its record, e.g. `"S-0008f10400411a08"` or `Switch1`).
    pub fn name(&self, id: NodeId) -> &str {
        self.span(self.nodes[id.index()].name)
    }

    /// A node's NodeDescription (its id when the file gives none, as in ibsim).
    pub fn description(&self, id: NodeId) -> &str {
        self.span(self.nodes[id.index()].description)
    }

    pub(super) fn span(&self, s: Span) -> &str {
        &self.strings[s.start as usize..(s.start + s.len) as usize]
    }

    /// The node with this id string.
    pub fn node_by_name(&self, name: &str) -> Option<NodeId> {
        self.by_name.get(name).copied()
    }

    /// The node with this NodeGUID.
    pub fn node_by_guid(&self, guid: u64) -> Option<NodeId> {
        self.by_guid.get(&guid).copied()
    }

    /// The port with this PortGUID, among linked CA and router ports and switches (found
    /// through their port 0).
    pub fn port_by_guid(&self, guid: u64) -> Option<PortId> {
        self.by_port_guid.get(&guid).copied()
    }

    /// Port `num` of `node`: O(1). `None` if the node has no such port (port 0 exists only on
    /// switches).
    pub fn port_id(&self, node: NodeId, num: u8) -> Option<PortId> {
        let n = &self.nodes[node.index()];
        if num > n.num_ports || (num == 0 && n.kind != NodeType::Switch) {
            return None;
        }
        Some(PortId(n.port_base + u32::from(num)))
    }

    /// A port. Panics if `id` is not from this fabric.
    pub fn port(&self, id: PortId) -> &Port {
        &self.ports[id.index()]
    }

    /// A port, to change its state or enabled rates.
    pub fn port_mut(&mut self, id: PortId) -> &mut Port {
        &mut self.ports[id.index()]
    }

    /// The port cabled to `id`, if any: O(1).
    pub fn peer(&self, id: PortId) -> Option<PortId> {
        self.ports[id.index()].peer()
    }

    /// The ports of `node` from 1 up (without a switch's port 0).
    pub fn ports_of(&self, node: NodeId) -> impl ExactSizeIterator<Item = PortId> + use<> {
        let n = &self.nodes[node.index()];
        (n.port_base + 1..n.port_base + 1 + u32::from(n.num_ports)).map(PortId)
    }

    /// A switch's forwarding state; `None` for CAs and routers.
    pub fn switch(&self, node: NodeId) -> Option<&SwitchState> {
        let s = self.nodes[node.index()].switch;
        (s != NONE).then(|| &self.switches[s as usize])
    }

    /// A switch's forwarding state, to program it.
    pub fn switch_mut(&mut self, node: NodeId) -> Option<&mut SwitchState> {
        let s = self.nodes[node.index()].switch;
        (s != NONE).then(|| &mut self.switches[s as usize])
    }

    /// The port holding unicast `lid` (a switch's LIDs are its port 0's): O(1). When an SM
    /// has given the LID to several ports (see [`Fabric::assign_lid`]), the one that took it
    /// last, as ibsim's LID table; when that one gives it up, the one that took it before.
    /// Forwarding does not ask this: a packet goes where the LFTs send it and is taken by the
    /// first port on its way holding its DLID.
    pub fn lid_owner(&self, lid: u16) -> Option<PortId> {
        match self.lid_owner.get(usize::from(lid)) {
            Some(&p) if p != NONE => Some(PortId(p)),
            _ => None,
        }
    }

    /// Every port holding unicast `lid`, the one that took it first first (so the last is
    /// [`Fabric::lid_owner`]); more than one only while an SM moves LIDs.
    pub fn lid_holders(&self, lid: u16) -> Vec<PortId> {
        let mut v: Vec<PortId> = self
            .lid_shared
            .get(&lid)
            .map(|s| s.iter().map(|&p| PortId(p)).collect())
            .unwrap_or_default();
        v.extend(self.lid_owner(lid));
        v
    }

    /// Gives port `id` base LID `lid` and LMC `lmc` as a topology or state file does, keeping
    /// the LID index in step. `lid` 0 unassigns. Fails, changing nothing, if the port cannot
    /// hold a LID (a switch's external port, a CA's port 0), if the range leaves the unicast
    /// LIDs, if the base LID has any of its low LMC bits set or if another port
    /// holds part of it.
    pub fn set_lid(&mut self, id: PortId, lid: u16, lmc: u8) -> Result<(), super::Problem> {
        self.check_lid(id, lid, lmc)?;
        let range = lid_range(lid, lmc).unwrap_or(0..0);
        for l in range {
            if let Some(&other) = self.lid_holders(l as u16).iter().find(|&&p| p != id) {
                return Err(super::Problem::DuplicateLid {
                    lid: l as u16,
                    port: self.port_label(id),
                    other: self.port_label(other),
                });
            }
        }
        self.move_lid(id, lid, lmc);
        Ok(())
    }

    /// Gives port `id` base LID `lid` and LMC `lmc` as its SMA does on a PortInfo Set: an SMA
    /// knows only its own port, so a LID another port still holds is taken too (qib's
    /// `subn_set_portinfo` and ibsim's `sim_mad.c` do the same; an SM moving LIDs gives a
    /// port a LID another gives up later in the same sweep). Both then hold it until one
    /// moves; [`Fabric::lid_owner`] names the one that took it last. `lid` 0 unassigns.
    /// Fails, changing nothing, if the port cannot hold a LID, the range leaves the unicast
    /// LIDs or the base LID has any of its low LMC bits set.
    pub fn assign_lid(&mut self, id: PortId, lid: u16, lmc: u8) -> Result<(), super::Problem> {
        self.check_lid(id, lid, lmc)?;
        self.move_lid(id, lid, lmc);
        Ok(())
    }

    /// Whether port `id` may hold an LMC other than 0: not a switch's base port 0
    /// (SwitchInfo EnhancedPort0 clear), which has one LID. OpenSM gives it one
    /// (`osm_lid_mgr.c` `lid_mgr_get_port_lid`: "if the port is a base switch port 0 then we
    /// only need one lid", by `osm_switch.h` `osm_switch_sp0_is_lmc_capable`, true only for an
    /// enhanced port 0) and writes LMC 0 to it (`lid_mgr_set_physp_pi` sets the LMC of a
    /// switch's port 0 only when it is enhanced and `lmc_esp0` is on).
    pub fn lmc_capable(&self, id: PortId) -> bool {
        let p = &self.ports[id.index()];
        p.num != 0
            || self
                .switch(NodeId(p.node))
                .is_none_or(|s| s.info.enhanced_port0)
    }

    /// Whether port `id` can hold `lid`/`lmc` at all.
    fn check_lid(&self, id: PortId, lid: u16, lmc: u8) -> Result<(), super::Problem> {
        let p = &self.ports[id.index()];
        let node = &self.nodes[p.node as usize];
        if (node.kind == NodeType::Switch) != (p.num == 0) {
            return Err(super::Problem::InvalidPort {
                port: self.port_label(id),
                why: "only CA and router ports and a switch's port 0 have LIDs",
            });
        }
        if lmc != 0 && !self.lmc_capable(id) {
            return Err(super::Problem::LmcOnBaseSwitchPort0 {
                lmc: u64::from(lmc),
                port: self.port_label(id),
            });
        }
        if lid_range(lid, lmc).is_none() {
            return Err(super::Problem::LidOutOfRange {
                lid: u64::from(lid),
                lmc: u64::from(lmc),
                port: self.port_label(id),
            });
        }
        if !lid_aligned(lid, lmc) {
            return Err(super::Problem::UnalignedLid {
                lid,
                lmc,
                port: self.port_label(id),
            });
        }
        Ok(())
    }

    /// Moves port `id` from its LIDs to `lid`/`lmc` (checked), in the port and in the index.
    fn move_lid(&mut self, id: PortId, lid: u16, lmc: u8) {
        let p = &self.ports[id.index()];
        for l in lid_range(p.lid, p.lmc).unwrap_or(0..0) {
            self.unhold(l as u16, id.0);
        }
        for l in lid_range(lid, lmc).unwrap_or(0..0) {
            self.hold(l as u16, id.0);
        }
        let p = &mut self.ports[id.index()];
        p.lid = lid;
        p.lmc = lmc;
    }

    /// Records that `port` took `lid` (now its newest holder).
    fn hold(&mut self, lid: u16, port: u32) {
        let slot = &mut self.lid_owner[usize::from(lid)];
        if *slot != NONE && *slot != port {
            self.lid_shared.entry(lid).or_default().push(*slot);
        }
        *slot = port;
    }

    /// Records that `port` gave up `lid`; the newest other holder, if any, takes its place.
    fn unhold(&mut self, lid: u16, port: u32) {
        let owner = self.lid_owner[usize::from(lid)];
        let Some(shared) = self.lid_shared.get_mut(&lid) else {
            if owner == port {
                self.lid_owner[usize::from(lid)] = NONE;
            }
            return;
        };
        if owner == port {
            self.lid_owner[usize::from(lid)] = shared.pop().unwrap_or(NONE);
        } else {
            shared.retain(|&p| p != port);
        }
        if shared.is_empty() {
            self.lid_shared.remove(&lid);
        }
    }

    /// `"name"[port]`, how messages name a port.
    pub fn port_label(&self, id: PortId) -> String {
        let p = &self.ports[id.index()];
        format!("\"{}\"[{}]", self.name(NodeId(p.node)), p.num)
    }
}

/// Whether base LID `lid` has its low `lmc` bits clear, as a port's LIDs are: a port takes
/// the DLIDs that match its base LID with the low LMC bits masked (IBA 4.1.3), so a base
/// LID with any of them set names LIDs the port does not answer to. OpenSM's LID manager
/// hands out aligned ranges only (`osm_lid_mgr.c` `lid_mgr_init_sweep` drops a persistent
/// entry that is "Not aligned").
pub(crate) fn lid_aligned(lid: u16, lmc: u8) -> bool {
    u32::from(lid) & ((1u32 << lmc.min(16)) - 1) == 0
}

/// The LIDs `lid .. lid + 2^lmc`, if they are all unicast LIDs (an empty range for LID 0).
pub(super) fn lid_range(lid: u16, lmc: u8) -> Option<std::ops::Range<u32>> {
    if lmc > 7 {
        return None;
    }
    if lid == 0 {
        return Some(0..0);
    }
    let end = u32::from(lid) + (1u32 << lmc);
    (end <= UNICAST_LID_END).then_some(u32::from(lid)..end)
}

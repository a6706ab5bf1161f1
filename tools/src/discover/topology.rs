//! What a discovery found: the nodes (with what their SMAs answered), their ports, the links
//! between them, and what could not be learned. Nodes are kept in the order a walk whose
//! answers all came back in the order asked finds them (`order.rs`: whatever order they
//! really came back in) and addressed by index; a link is stored at both ends.

use std::collections::HashMap;
use std::time::Duration;

use mad::wire::attr::node_info::NodeType;
use mad::wire::attr::port_info::{PhysPortState, PortInfoRepr, PortState, cap_mask, cap_mask2};

/// Index of a node in [`Topology::nodes`].
pub type NodeIndex = usize;

/// One end of a link: a node and one of its port numbers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PortRef {
    /// The node.
    pub node: NodeIndex,
    /// The port number (1 and up).
    pub port: u8,
}

/// A directed route as libibmad writes it: `0` for the local port, `0,1,3` for out of port 1
/// and then port 3.
pub fn route_text(path: &[u8]) -> String {
    let mut s = String::from("0");
    for p in path {
        s.push(',');
        s.push_str(&p.to_string());
    }
    s
}

/// The CapabilityMask and CapabilityMask2 that say which extended speed fields of a port's
/// PortInfo mean anything (0 when the PortInfo that holds them was not read).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CapabilityMasks {
    /// CapabilityMask ([`cap_mask`]).
    pub mask: u32,
    /// CapabilityMask2 ([`cap_mask2`]).
    pub mask2: u16,
}

/// The extended speed active of `info` as libibnetdisc reads it
/// (`ibnd_get_agg_linkspeedext`): 0 unless `caps` has HasExtSpeeds; then LinkSpeedExtActive,
/// unless `caps` also has HasCapMask2 and CapabilityMask2 IsExtSpeeds2Supported and
/// LinkSpeedExtActive2 is not 0, when it is LinkSpeedExtActive2 shifted into bit 5 and up
/// (so XDR is 32).
pub fn agg_link_speed_ext_active(caps: CapabilityMasks, info: &PortInfoRepr) -> u8 {
    if caps.mask & cap_mask::HAS_EXT_SPEEDS == 0 {
        return 0;
    }
    let ext2 = caps.mask & cap_mask::HAS_CAP_MASK2 != 0
        && caps.mask2 & cap_mask2::EXT_SPEEDS_2_SUPPORTED != 0;
    // LinkSpeedExtActive2 is 2 bits (the parser masks it), so the shift stays within a byte.
    let e2 = if ext2 {
        (info.link_speed_ext_active2 & 0x3) << 5
    } else {
        0
    };
    if e2 != 0 {
        e2
    } else {
        info.link_speed_ext_active
    }
}

/// A port of a discovered node.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Port {
    /// The port number (0 is a switch's management port).
    pub num: u8,
    /// PortGUID as NodeInfo reported it when an SMP entered through this port (a switch's
    /// ports share port 0's); 0 when no SMP entered here.
    pub guid: u64,
    /// The port's PortInfo, when it was read.
    pub info: Option<PortInfoRepr>,
    /// Mellanox ExtendedPortInfo LinkSpeedActive said FDR10 (read only for QDR links of
    /// Mellanox devices, as libibnetdisc does).
    pub fdr10_active: bool,
    /// The port at the other end of its cable, when discovery crossed it.
    pub remote: Option<PortRef>,
}

impl Port {
    /// LinkWidthActive, LinkSpeedActive, and the extended speed active as libibnetdisc
    /// aggregates it ([`agg_link_speed_ext_active`]) under `caps` (the port's own masks, or a
    /// switch's port 0's: [`Node::capability_masks_for`]); `None` without PortInfo.
    pub fn active_rate(&self, caps: CapabilityMasks) -> Option<(u8, u8, u8)> {
        let i = self.info.as_ref()?;
        Some((
            i.link_width_active,
            i.link_speed_active,
            agg_link_speed_ext_active(caps, i),
        ))
    }

    /// The physical state, when PortInfo was read.
    pub fn phys_state(&self) -> Option<PhysPortState> {
        self.info.as_ref().map(|i| i.port_physical_state)
    }

    /// The logical state, when PortInfo was read.
    pub fn state(&self) -> Option<PortState> {
        self.info.as_ref().map(|i| i.port_state)
    }
}

/// What SwitchInfo said of a switch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SwitchDetails {
    /// EnhancedPort0.
    pub enhanced_port0: bool,
    /// LinearFDBCap.
    pub linear_fdb_cap: u16,
    /// LinearFDBTop.
    pub linear_fdb_top: u16,
    /// MulticastFDBCap.
    pub multicast_fdb_cap: u16,
    /// LIDsPerPort.
    pub lids_per_port: u16,
}

/// A discovered node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Node {
    /// NodeGUID: the node's identity (a node reached twice is the same node).
    pub guid: u64,
    /// NodeType as reported (CA, switch, router, or a value with no name).
    pub kind: NodeType,
    /// NumPorts.
    pub num_ports: u8,
    /// SystemImageGUID.
    pub sys_image_guid: u64,
    /// VendorID (24 bits).
    pub vendor_id: u32,
    /// DeviceID.
    pub device_id: u16,
    /// Revision.
    pub revision: u32,
    /// NodeDescription as received (64 bytes, NUL-padded); `None` until it was read.
    pub description: Option<[u8; 64]>,
    /// The directed route (egress port per hop) by which a walk whose answers came back in
    /// the order asked first reaches it (not always the route this walk used, when answers
    /// came back out of order); empty for the local node.
    pub path: Vec<u8>,
    /// Hops from the local port along `path`.
    pub hops: u8,
    /// SwitchInfo, for a switch whose SwitchInfo was read.
    pub switch: Option<SwitchDetails>,
    /// Ports 0 ..= `num_ports` (port 0 is only queried on switches).
    pub ports: Vec<Port>,
}

impl Node {
    /// Whether the node is a switch.
    pub fn is_switch(&self) -> bool {
        self.kind == NodeType::Switch
    }

    /// The description as ibnetdiscover prints it: up to the first NUL, at most the 64 bytes
    /// of the attribute (libibnetdisc keeps it in a `char[IB_SMP_DATA_SIZE + 1]` and
    /// `clean_nodedesc` ends it at `IB_SMP_DATA_SIZE`), every byte that is not printable
    /// ASCII replaced by a space. Empty when it was never read.
    pub fn description_text(&self) -> String {
        let Some(raw) = &self.description else {
            return String::new();
        };
        raw.iter()
            .take(64)
            .take_while(|&&b| b != 0)
            .map(|&b| {
                if b == b' ' || b.is_ascii_graphic() {
                    char::from(b)
                } else {
                    ' '
                }
            })
            .collect()
    }

    /// The LID the node answers on: port 0's for a switch, `port`'s for a CA or router.
    pub fn lid_of(&self, port: u8) -> u16 {
        let p = if self.is_switch() { 0 } else { port };
        self.port(p)
            .and_then(|p| p.info.as_ref())
            .map_or(0, |i| i.lid)
    }

    /// The LMC that goes with [`Node::lid_of`].
    pub fn lmc_of(&self, port: u8) -> u8 {
        let p = if self.is_switch() { 0 } else { port };
        self.port(p)
            .and_then(|p| p.info.as_ref())
            .map_or(0, |i| i.lmc)
    }

    /// The capability masks that say which extended speeds `port` reports: a switch's
    /// port 0's, a CA's own port's (0 when that PortInfo was not read), as libibnetdisc and
    /// ibnetdiscover pick them.
    pub fn capability_masks_for(&self, port: u8) -> CapabilityMasks {
        let p = if self.is_switch() { 0 } else { port };
        self.port(p)
            .and_then(|p| p.info.as_ref())
            .map_or(CapabilityMasks::default(), |i| CapabilityMasks {
                mask: i.capability_mask,
                mask2: i.capability_mask2,
            })
    }

    /// Port `num`, if the node has it.
    pub fn port(&self, num: u8) -> Option<&Port> {
        self.ports.get(usize::from(num))
    }
}

/// What went wrong with one query. Discovery goes on past every one of these.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FailureKind {
    /// No response after the retries (the MAD layer's RESP_TIMEOUT_ERR).
    Timeout {
        /// Retries the MAD layer made.
        retries: u32,
    },
    /// The SMA answered with a non-zero status.
    Status(u16),
    /// The send ended with another work-completion status.
    Completion(String),
    /// The MAD layer refused the send.
    Refused(String),
    /// The response did not make sense (wrong attribute, a field out of range, a GUID that
    /// contradicts an earlier answer).
    BadResponse(String),
}

impl std::fmt::Display for FailureKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FailureKind::Timeout { retries } => {
                write!(f, "no response (timed out after {retries} retries)")
            }
            FailureKind::Status(s) => write!(f, "answered with status {s:#06x}"),
            FailureKind::Completion(s) => write!(f, "send completed with {s}"),
            FailureKind::Refused(s) => write!(f, "not sent: {s}"),
            FailureKind::BadResponse(s) => write!(f, "bad response: {s}"),
        }
    }
}

/// A query that failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    /// The directed route it went along.
    pub path: Vec<u8>,
    /// The attribute asked for.
    pub attr_id: u16,
    /// Its modifier (the port number for PortInfo).
    pub attr_mod: u32,
    /// The node it was about, when known (a NodeInfo failure is about whatever lies there).
    pub node: Option<NodeIndex>,
    /// What happened.
    pub kind: FailureKind,
}

/// Counts of one discovery.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// SMPs the engine sent (each one query; the MAD layer's retries are not counted here).
    pub smps: u64,
    /// Responses received.
    pub responses: u64,
    /// Queries that timed out after their retries.
    pub timeouts: u64,
    /// Retries the MAD layer made for the engine's SMPs (a lost SMP or a slow answer).
    pub retries: u64,
    /// Most SMPs in flight at once.
    pub max_in_flight: usize,
    /// Longest directed route used.
    pub max_hops: u8,
    /// Links up that were not followed because the node's shortest known route had reached
    /// the maximum hop count (each port once).
    pub beyond_max_hops: u64,
    /// Mellanox ExtendedPortInfo queries answered with an error status (the device has no
    /// such attribute: the port is not FDR10). Not failures: nothing is missing.
    pub ext_port_info_unsupported: u64,
    /// Wall-clock time the discovery took.
    pub wall: Duration,
    /// Device-clock time it took (equal to the wall time on hardware and on the simulator's
    /// real clock; simulated time on its virtual clock).
    pub device: Duration,
}

/// A discovered fabric.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Topology {
    /// Nodes in the order an in-order walk finds them: breadth-first from the local port,
    /// each node's ports in increasing number; the local node is first.
    pub nodes: Vec<Node>,
    /// The local node and the port discovery started from.
    pub from: Option<PortRef>,
    /// The PortGUID the local port's NodeInfo (the walk's first answer) reported, kept apart
    /// from [`Port::guid`], which a later NodeInfo of a node claiming the same NodeGUID
    /// overwrites: ibnetdiscover's `# Initiated from node ... port ...` prints this one
    /// (`dump_topology` reads `from_node->info`, the NodeInfo libibnetdisc's `create_node`
    /// copied once).
    pub from_port_guid: u64,
    /// Queries that failed.
    pub failures: Vec<Failure>,
    /// Counts.
    pub stats: Stats,
    by_guid: HashMap<u64, NodeIndex>,
}

impl Topology {
    /// The node with this NodeGUID.
    pub fn node_by_guid(&self, guid: u64) -> Option<NodeIndex> {
        self.by_guid.get(&guid).copied()
    }

    /// Adds a node (the caller checked that its GUID is new).
    pub(crate) fn add_node(&mut self, node: Node) -> NodeIndex {
        let i = self.nodes.len();
        self.by_guid.insert(node.guid, i);
        self.nodes.push(node);
        i
    }

    /// Records that `a` and `b` are cabled together. An end that was linked elsewhere
    /// before is unlinked first (the latest answer wins, as in libibnetdisc).
    pub(crate) fn link(&mut self, a: PortRef, b: PortRef) {
        for end in [a, b] {
            if let Some(old) = self.port_mut(end).and_then(|p| p.remote.take())
                && let Some(p) = self.port_mut(old)
            {
                p.remote = None;
            }
        }
        if let Some(p) = self.port_mut(a) {
            p.remote = Some(b);
        }
        if let Some(p) = self.port_mut(b) {
            p.remote = Some(a);
        }
    }

    pub(crate) fn port_mut(&mut self, r: PortRef) -> Option<&mut Port> {
        self.nodes
            .get_mut(r.node)
            .and_then(|n| n.ports.get_mut(usize::from(r.port)))
    }

    /// A port by reference.
    pub fn port(&self, r: PortRef) -> Option<&Port> {
        self.nodes.get(r.node).and_then(|n| n.port(r.port))
    }

    /// Every link once (the end with the lower node index, then port, first).
    pub fn links(&self) -> Vec<(PortRef, PortRef)> {
        let mut out = Vec::new();
        for (i, n) in self.nodes.iter().enumerate() {
            for p in n.ports.iter().skip(1) {
                if let Some(r) = p.remote {
                    let a = PortRef {
                        node: i,
                        port: p.num,
                    };
                    if a < r {
                        out.push((a, r));
                    }
                }
            }
        }
        out
    }

    /// The same topology with its nodes in `order` (every index once) and, where `paths`
    /// (by old index) has one, that node's route replaced by it; every reference to a node
    /// follows it. Failures are sorted by route, attribute, modifier, node and what happened,
    /// so that their order does not depend on the order answers came back in either.
    pub(crate) fn reordered(self, order: &[NodeIndex], paths: &[Option<Vec<u8>>]) -> Topology {
        debug_assert_eq!(order.len(), self.nodes.len());
        let mut new_index = vec![0; self.nodes.len()];
        for (new, &old) in order.iter().enumerate() {
            new_index[old] = new;
        }
        let moved = |r: PortRef| PortRef {
            node: new_index[r.node],
            port: r.port,
        };
        let mut old_nodes: Vec<Option<Node>> = self.nodes.into_iter().map(Some).collect();
        let mut nodes = Vec::with_capacity(order.len());
        for &old in order {
            let mut n = old_nodes[old].take().expect("each node once");
            if let Some(p) = paths.get(old).cloned().flatten() {
                n.hops = u8::try_from(p.len()).unwrap_or(u8::MAX);
                n.path = p;
            }
            for port in &mut n.ports {
                port.remote = port.remote.map(moved);
            }
            nodes.push(n);
        }
        let mut failures = self.failures;
        for f in &mut failures {
            f.node = f.node.map(|n| new_index[n]);
        }
        failures.sort_by_cached_key(|f| {
            (
                f.path.clone(),
                f.attr_id,
                f.attr_mod,
                f.node.map(|n| nodes[n].guid),
                f.kind.to_string(),
            )
        });
        let by_guid = nodes.iter().enumerate().map(|(i, n)| (n.guid, i)).collect();
        Topology {
            nodes,
            from: self.from.map(moved),
            from_port_guid: self.from_port_guid,
            failures,
            stats: self.stats,
            by_guid,
        }
    }

    /// The port whose LID and LMC stand for node `i` in the JSON and graph writers: a
    /// switch's port 0; for the local node, the port discovery started from; for another CA
    /// or router, its first port with a link (port 1 when none has one), so that a CA cabled
    /// only on port 2 shows that port's LID.
    pub fn lid_port(&self, i: NodeIndex) -> u8 {
        let Some(n) = self.nodes.get(i) else {
            return 0;
        };
        if n.is_switch() {
            return 0;
        }
        if let Some(f) = self.from.filter(|f| f.node == i) {
            return f.port;
        }
        n.ports
            .iter()
            .skip(1)
            .find(|p| p.remote.is_some())
            .map_or(1, |p| p.num)
    }

    /// Nodes of `kind`.
    pub fn count_of(&self, kind: NodeType) -> usize {
        self.nodes.iter().filter(|n| n.kind == kind).count()
    }
}

//! Building a [`Fabric`] node by node and link by link: what the parser and the generators use,
//! and what tests use to make fabrics the text format cannot describe.

use std::collections::HashMap;

use crate::idmap::IdKeyMap;

use super::error::{FabricError, Problem};
use super::guid::GuidAllocator;
use super::model::{Fabric, NONE, Node, NodeId, NodeType, Port, PortId, Span, UNICAST_LID_END};
use super::rate::{ActiveRates, LinkRates, NoCommon};
use super::sma::defaults::{LINK_SPEED_EXT_SUPPORTED, LINK_SPEED_EXT2_SUPPORTED};
use super::state::{LinkState, PhysState, PortState, SwitchState};

/// Longest node id ibsim keeps (`NODEIDLEN` 65 with the terminating NUL).
pub const MAX_NAME_LEN: usize = 64;
/// NodeDescription is 64 bytes.
pub const MAX_DESCRIPTION_LEN: usize = 64;
/// Most ports a node can have: NumPorts is a byte, and 255 is the LFT's "no route".
pub const MAX_PORTS: u8 = 254;
/// Most port entries a fabric holds, counting each node's port 0 (a node of N ports takes
/// N + 1). About 100 bytes each while a file is read, so the bound keeps a hostile or mistyped
/// topology to about 100 MB: a fabric using every unicast LID (49,151) needs some 200,000, the
/// 648-host fat tree of 36-port switches 3,294, the 2,144-node benchmark tree 10,336 (ibsim
/// has such a cap too, `MAXNETPORTS`).
pub const MAX_FABRIC_PORTS: u64 = 1 << 20;

/// What a new node is: the fields of a node header and the GUID directives before it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeSpec<'a> {
    /// Switch, CA or router.
    pub kind: NodeType,
    /// Its unique id (at most 64 bytes, no `"`, no control characters).
    pub name: &'a str,
    /// NodeDescription; `None` means the id, as in ibsim.
    pub description: Option<&'a str>,
    /// NumPorts (1-254).
    pub num_ports: u8,
    /// NodeGUID; `None` takes the next default GUID ([`guid`](super::guid) scheme).
    pub guid: Option<u64>,
    /// SystemImageGUID; `None` means the node GUID.
    pub sys_image_guid: Option<u64>,
    /// A switch's port GUID (shared by its ports); `None` means the node GUID.
    pub switch_port_guid: Option<u64>,
    /// VendorID (24 bits).
    pub vendor_id: u32,
    /// DeviceID.
    pub device_id: u16,
    /// Enabled rates every port starts with.
    pub enabled: LinkRates,
    /// A switch's SwitchInfo EnhancedPort0.
    pub enhanced_port0: bool,
}

impl<'a> NodeSpec<'a> {
    /// A node with defaults for everything but its type, id and port count.
    pub fn new(kind: NodeType, name: &'a str, num_ports: u8) -> NodeSpec<'a> {
        NodeSpec {
            kind,
            name,
            description: None,
            num_ports,
            guid: None,
            sys_image_guid: None,
            switch_port_guid: None,
            vendor_id: 0,
            device_id: 0,
            enabled: LinkRates::DEFAULT,
            enhanced_port0: false,
        }
    }
}

/// What a problem found when finishing a fabric is about, so the parser can name its line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Subject {
    /// A port, with its node.
    Port(PortId, NodeId),
}

/// Assembles a [`Fabric`]: add nodes, set port GUIDs, rates and LIDs, link ports, then
/// [`build`](Self::build), which trains the links and checks GUIDs.
#[derive(Debug, Clone)]
pub struct FabricBuilder {
    f: Fabric,
    guids: GuidAllocator,
    explicit_guid: Vec<bool>,
}

impl Default for FabricBuilder {
    fn default() -> Self {
        Self::new()
    }
}

/// Checks a node id or description for what the format and NodeDescription can carry.
pub(super) fn check_text(what: &'static str, text: &str, max: usize) -> Result<(), Problem> {
    let bad = |why| Problem::BadName {
        what,
        text: text.to_owned(),
        why,
    };
    if text.len() > max {
        // Both bounds are 64: tell them apart by what the text is.
        return Err(bad(if what == "description" {
            "longer than the 64 bytes of NodeDescription"
        } else {
            "longer than 64 bytes"
        }));
    }
    if text.contains('"') || text.chars().any(char::is_control) {
        return Err(bad("contains a `\"` or a control character"));
    }
    Ok(())
}

impl FabricBuilder {
    /// An empty fabric with ibsim's default GUID counters.
    pub fn new() -> FabricBuilder {
        FabricBuilder {
            f: Fabric {
                nodes: Vec::new(),
                ports: Vec::new(),
                switches: Vec::new(),
                strings: String::new(),
                by_name: IdKeyMap::default(),
                by_guid: IdKeyMap::default(),
                by_port_guid: IdKeyMap::default(),
                lid_owner: vec![NONE; UNICAST_LID_END as usize],
                lid_shared: HashMap::new(),
                links: 0,
            },
            guids: GuidAllocator::default(),
            explicit_guid: Vec::new(),
        }
    }

    /// The fabric so far (links not yet trained).
    pub fn fabric(&self) -> &Fabric {
        &self.f
    }

    /// The default-GUID counters, to move them as `switchguid=` does.
    pub fn guids_mut(&mut self) -> &mut GuidAllocator {
        &mut self.guids
    }

    fn intern(&mut self, s: &str) -> Span {
        let start = self.f.strings.len() as u32;
        self.f.strings.push_str(s);
        Span {
            start,
            len: s.len() as u32,
        }
    }

    /// Adds a node with its ports (unlinked).
    pub fn add_node(&mut self, spec: &NodeSpec<'_>) -> Result<NodeId, Problem> {
        if spec.name.is_empty() {
            return Err(Problem::BadName {
                what: "node id",
                text: String::new(),
                why: "empty",
            });
        }
        check_text("node id", spec.name, MAX_NAME_LEN)?;
        if let Some(d) = spec.description {
            check_text("description", d, MAX_DESCRIPTION_LEN)?;
        }
        if spec.num_ports == 0 || spec.num_ports > MAX_PORTS {
            return Err(Problem::PortCountOutOfRange {
                count: u64::from(spec.num_ports),
            });
        }
        if spec.vendor_id > 0xff_ffff {
            return Err(Problem::BadNumber {
                what: "vendor id",
                text: format!("{:#x}", spec.vendor_id),
                why: "VendorID has 24 bits",
            });
        }
        self.check_room(spec.num_ports)?;
        if self.f.by_name.contains_key(spec.name) {
            return Err(Problem::DuplicateNode {
                name: spec.name.to_owned(),
                first: None,
            });
        }
        let guid = match spec.guid {
            Some(g) => g,
            None => self.guids.peek(spec.kind),
        };
        if let Some(&other) = self.f.by_guid.get(&guid) {
            return Err(Problem::DuplicateGuid {
                what: "node",
                guid,
                name: spec.name.to_owned(),
                other: self.f.name(other).to_owned(),
            });
        }
        if spec.guid.is_none() {
            self.guids.take(spec.kind, spec.num_ports);
        }
        let id = NodeId(self.f.nodes.len() as u32);
        let name = self.intern(spec.name);
        let description = match spec.description {
            Some(d) if d != spec.name => self.intern(d),
            _ => name,
        };
        let switch = if spec.kind == NodeType::Switch {
            let mut s = SwitchState::new(spec.num_ports);
            s.info.enhanced_port0 = spec.enhanced_port0;
            self.f.switches.push(s);
            (self.f.switches.len() - 1) as u32
        } else {
            NONE
        };
        let port_base = self.f.ports.len() as u32;
        for p in 0..=spec.num_ports {
            let pguid = if spec.kind == NodeType::Switch {
                spec.switch_port_guid.unwrap_or(guid)
            } else {
                guid.wrapping_add(u64::from(p))
            };
            self.f.ports.push(Port {
                node: id.0,
                num: p,
                lmc: 0,
                lid: 0,
                peer: NONE,
                guid: pguid,
                enabled: spec.enabled,
                speed_ext_supported: 0,
                speed_ext2_supported: 0,
                state: PortState::default(),
            });
            self.explicit_guid.push(false);
        }
        self.f.nodes.push(Node {
            kind: spec.kind,
            num_ports: spec.num_ports,
            port_base,
            switch,
            guid,
            sys_image_guid: spec.sys_image_guid.unwrap_or(guid),
            vendor_id: spec.vendor_id,
            device_id: spec.device_id,
            name,
            description,
        });
        self.f.by_name.insert(spec.name.into(), id);
        self.f.by_guid.insert(guid, id);
        Ok(id)
    }

    /// Refuses a node of `num_ports` ports when the fabric would then hold more than
    /// [`MAX_FABRIC_PORTS`] port entries, before anything is allocated for it.
    pub fn check_room(&self, num_ports: u8) -> Result<(), Problem> {
        let ports = self.f.ports.len() as u64 + u64::from(num_ports) + 1;
        if ports > MAX_FABRIC_PORTS {
            return Err(Problem::TooManyPorts {
                ports,
                limit: MAX_FABRIC_PORTS,
            });
        }
        Ok(())
    }

    fn physical(&self, port: PortId) -> Result<(), Problem> {
        if self.f.port(port).num == 0 {
            return Err(Problem::PortZero);
        }
        Ok(())
    }

    /// Gives a CA or router port its own PortGUID (ibnetdiscover's `[1](guid)`).
    pub fn set_port_guid(&mut self, port: PortId, guid: u64) -> Result<(), Problem> {
        self.physical(port)?;
        let node = self.f.port(port).node;
        if self.f.nodes[node as usize].kind == NodeType::Switch {
            return Err(Problem::InvalidPort {
                port: self.f.port_label(port),
                why: "a switch's ports share the switch's port GUID (switchguid=X(P))",
            });
        }
        self.f.ports[port.index()].guid = guid;
        self.explicit_guid[port.index()] = true;
        Ok(())
    }

    /// Whether the port's GUID was set with [`set_port_guid`](Self::set_port_guid).
    pub fn has_explicit_guid(&self, port: PortId) -> bool {
        self.explicit_guid[port.index()]
    }

    /// Sets the rates a port enables.
    pub fn set_enabled(&mut self, port: PortId, rates: LinkRates) {
        self.f.ports[port.index()].enabled = rates;
    }

    /// Gives a port its initial LID and LMC (see [`Fabric::set_lid`]).
    pub fn set_lid(&mut self, port: PortId, lid: u16, lmc: u8) -> Result<(), Problem> {
        self.f.set_lid(port, lid, lmc)
    }

    /// Cables two physical ports together.
    pub fn link(&mut self, a: PortId, b: PortId) -> Result<(), Problem> {
        self.physical(a)?;
        self.physical(b)?;
        if a == b {
            return Err(Problem::SelfLink {
                port: self.f.port_label(a),
            });
        }
        for p in [a, b] {
            if self.f.ports[p.index()].peer != NONE {
                return Err(Problem::AlreadyLinked {
                    port: self.f.port_label(p),
                });
            }
        }
        self.f.ports[a.index()].peer = b.0;
        self.f.ports[b.index()].peer = a.0;
        self.f.links += 1;
        Ok(())
    }

    /// Finishes the fabric: fixes each port's supported extended speeds from the ones it
    /// enables ([`Port::speed_ext_supported`], [`Port::speed_ext2_supported`]), trains every
    /// link, sets the initial port states, indexes port GUIDs.
    pub fn build(self) -> Result<Fabric, FabricError> {
        self.finish().map_err(|(p, _)| FabricError::Invalid(p))
    }

    pub(super) fn finish(mut self) -> Result<Fabric, (Problem, Subject)> {
        let f = &mut self.f;
        for i in 0..f.ports.len() {
            let enabled_ext = f.ports[i].enabled.speed_ext;
            f.ports[i].speed_ext_supported = if enabled_ext == 0 {
                0
            } else {
                LINK_SPEED_EXT_SUPPORTED
            };
            f.ports[i].speed_ext2_supported = if f.ports[i].enabled.speed_ext2 == 0 {
                0
            } else {
                LINK_SPEED_EXT2_SUPPORTED
            };
            let node = &f.nodes[f.ports[i].node as usize];
            let (kind, num) = (node.kind, f.ports[i].num);
            let peer = f.ports[i].peer;
            let state = &mut f.ports[i].state;
            if num == 0 {
                if kind == NodeType::Switch {
                    state.link_state = LinkState::Active;
                    state.phys_state = PhysState::LinkUp;
                    state.active = ActiveRates::SWITCH_PORT0;
                }
                continue;
            }
            if peer == NONE {
                continue;
            }
            if (peer as usize) > i {
                let (a, b) = (f.ports[i].enabled, f.ports[peer as usize].enabled);
                let active = ActiveRates::train(a, b).map_err(|nc| {
                    let (what, a_mask, b_mask) = match nc {
                        NoCommon::Width => ("width", a.width, b.width),
                        NoCommon::Speed => ("speed", a.speed, b.speed),
                    };
                    let problem = Problem::NoCommonRate {
                        what,
                        a: f.port_label(PortId(i as u32)),
                        b: f.port_label(PortId(peer)),
                        a_mask,
                        b_mask,
                    };
                    (
                        problem,
                        Subject::Port(PortId(i as u32), NodeId(f.ports[i].node)),
                    )
                })?;
                for p in [i, peer as usize] {
                    let s = &mut f.ports[p].state;
                    s.link_state = LinkState::Init;
                    s.phys_state = PhysState::LinkUp;
                    s.active = active;
                }
                for p in [i, peer as usize] {
                    let n = &f.nodes[f.ports[p].node as usize];
                    if n.switch != NONE {
                        f.switches[n.switch as usize].info.port_state_change = true;
                    }
                }
            }
        }
        // Port GUIDs that discovery can see must be unique: every switch's and every linked CA
        // or router port's. An unlinked port cannot be reached, and its default GUID is
        // invented here, so it must not make a real topology fail.
        for n in 0..f.nodes.len() {
            let node = &f.nodes[n];
            let ports: Vec<u32> = if node.kind == NodeType::Switch {
                vec![node.port_base]
            } else {
                (node.port_base + 1..=node.port_base + u32::from(node.num_ports))
                    .filter(|&p| f.ports[p as usize].peer != NONE)
                    .collect()
            };
            for p in ports {
                let guid = f.ports[p as usize].guid;
                if let Some(&other) = f.by_port_guid.get(&guid) {
                    let problem = Problem::DuplicateGuid {
                        what: "port",
                        guid,
                        name: f.port_label(PortId(p)),
                        other: f.port_label(other),
                    };
                    return Err((problem, Subject::Port(PortId(p), NodeId(n as u32))));
                }
                f.by_port_guid.insert(guid, PortId(p));
            }
        }
        Ok(self.f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_description_is_refused_as_a_description() {
        let long = "d".repeat(65);
        let spec = NodeSpec {
            description: Some(&long),
            ..NodeSpec::new(NodeType::Ca, "h", 1)
        };
        let e = FabricBuilder::new().add_node(&spec).unwrap_err();
        assert!(
            matches!(&e, Problem::BadName { what: "description", why, .. } if why.contains("NodeDescription")),
            "{e:?}"
        );
    }

    #[test]
    fn builds_a_small_fabric() {
        let mut b = FabricBuilder::new();
        let sw = b
            .add_node(&NodeSpec::new(NodeType::Switch, "sw", 4))
            .unwrap();
        let h = b.add_node(&NodeSpec::new(NodeType::Ca, "h", 2)).unwrap();
        let sp = b.fabric().port_id(sw, 3).unwrap();
        let hp = b.fabric().port_id(h, 1).unwrap();
        b.link(sp, hp).unwrap();
        assert!(matches!(b.link(hp, sp), Err(Problem::AlreadyLinked { .. })));
        let f = b.build().unwrap();
        assert_eq!(f.node(sw).guid(), 0x200000);
        assert_eq!(f.node(h).guid(), 0x100000);
        assert_eq!(f.port(hp).guid(), 0x100001);
        assert_eq!(f.peer(sp), Some(hp));
        assert_eq!(f.port(hp).state.link_state, LinkState::Init);
        assert_eq!(
            f.port(f.port_id(h, 2).unwrap()).state.link_state,
            LinkState::Down
        );
        let p0 = f.port_id(sw, 0).unwrap();
        assert_eq!(f.port(p0).state.link_state, LinkState::Active);
        assert!(f.switch(sw).unwrap().info.port_state_change);
        assert_eq!(f.port_id(h, 0), None);
        assert_eq!(f.port_id(h, 3), None);
        assert_eq!(f.port_by_guid(0x100001), Some(hp));
        assert_eq!(f.port_by_guid(0x100002), None);
        assert_eq!(f.port_by_guid(0x200000), Some(p0));
        assert_eq!(f.link_count(), 1);
        assert_eq!(f.port_count(), 6);
    }

    #[test]
    fn rejects_bad_nodes() {
        let mut b = FabricBuilder::new();
        b.add_node(&NodeSpec::new(NodeType::Ca, "a", 1)).unwrap();
        assert!(matches!(
            b.add_node(&NodeSpec::new(NodeType::Ca, "a", 1)),
            Err(Problem::DuplicateNode { .. })
        ));
        assert!(matches!(
            b.add_node(&NodeSpec::new(NodeType::Ca, "b", 0)),
            Err(Problem::PortCountOutOfRange { count: 0 })
        ));
        assert!(matches!(
            b.add_node(&NodeSpec::new(NodeType::Ca, "b", 255)),
            Err(Problem::PortCountOutOfRange { count: 255 })
        ));
        assert!(matches!(
            b.add_node(&NodeSpec::new(NodeType::Ca, "q\"q", 1)),
            Err(Problem::BadName { .. })
        ));
        let spec = NodeSpec {
            guid: Some(0x100000),
            ..NodeSpec::new(NodeType::Switch, "c", 1)
        };
        assert!(matches!(
            b.add_node(&spec),
            Err(Problem::DuplicateGuid { what: "node", .. })
        ));
    }

    #[test]
    fn training_failure_names_the_link() {
        let mut b = FabricBuilder::new();
        let a = b.add_node(&NodeSpec::new(NodeType::Ca, "a", 1)).unwrap();
        let spec = NodeSpec {
            enabled: LinkRates {
                width: 1,
                ..LinkRates::DEFAULT
            },
            ..NodeSpec::new(NodeType::Ca, "b", 1)
        };
        let c = b.add_node(&spec).unwrap();
        let (pa, pc) = (
            b.fabric().port_id(a, 1).unwrap(),
            b.fabric().port_id(c, 1).unwrap(),
        );
        b.link(pa, pc).unwrap();
        let err = b.build().unwrap_err().to_string();
        assert!(err.contains("no common width"), "{err}");
        assert!(
            err.contains("\"a\"[1]") && err.contains("\"b\"[1]"),
            "{err}"
        );
    }

    #[test]
    fn lid_index_follows_set_lid() {
        let mut b = FabricBuilder::new();
        let a = b.add_node(&NodeSpec::new(NodeType::Ca, "a", 2)).unwrap();
        let s = b
            .add_node(&NodeSpec::new(NodeType::Switch, "s", 2))
            .unwrap();
        let mut f = b.build().unwrap();
        let (a1, a2) = (f.port_id(a, 1).unwrap(), f.port_id(a, 2).unwrap());
        f.set_lid(a1, 4, 2).unwrap();
        assert_eq!(f.lid_owner(4), Some(a1));
        assert_eq!(f.lid_owner(7), Some(a1));
        assert_eq!(f.lid_owner(8), None);
        assert!(matches!(
            f.set_lid(a2, 6, 0),
            Err(Problem::DuplicateLid { lid: 6, .. })
        ));
        f.set_lid(a1, 9, 0).unwrap();
        assert_eq!(f.lid_owner(4), None);
        f.set_lid(a2, 6, 0).unwrap();
        assert_eq!(f.lid_owner(6), Some(a2));
        let s1 = f.port_id(s, 1).unwrap();
        assert!(matches!(
            f.set_lid(s1, 20, 0),
            Err(Problem::InvalidPort { .. })
        ));
        assert!(matches!(
            f.set_lid(a1, 0xbfff, 1),
            Err(Problem::LidOutOfRange { .. })
        ));
        f.set_lid(a1, 0xbfff, 0).unwrap();
    }

    /// An SMA's LID Set takes a LID another port holds; the index keeps every holder, names
    /// the newest as owner, and falls back to the older one when the newest moves away.
    #[test]
    fn lid_index_keeps_every_holder_of_a_shared_lid() {
        let mut b = FabricBuilder::new();
        let a = b.add_node(&NodeSpec::new(NodeType::Ca, "a", 3)).unwrap();
        let mut f = b.build().unwrap();
        let [a1, a2, a3] = [1, 2, 3].map(|n| f.port_id(a, n).unwrap());
        f.set_lid(a1, 4, 1).unwrap();
        f.assign_lid(a2, 5, 0).unwrap();
        f.assign_lid(a3, 5, 0).unwrap();
        assert_eq!(f.lid_holders(5), vec![a1, a2, a3]);
        assert_eq!(f.lid_owner(5), Some(a3));
        assert_eq!(f.lid_owner(4), Some(a1));
        // The strict form still refuses a LID held by another port.
        assert!(matches!(
            f.set_lid(a2, 4, 0),
            Err(Problem::DuplicateLid { lid: 4, .. })
        ));
        assert!(matches!(
            f.set_lid(a3, 5, 0),
            Err(Problem::DuplicateLid { lid: 5, .. })
        ));
        // The newest holder leaves: the one before it owns the LID again.
        f.assign_lid(a3, 9, 0).unwrap();
        assert_eq!(f.lid_owner(5), Some(a2));
        // A holder in the middle leaves.
        f.assign_lid(a1, 0, 0).unwrap();
        assert_eq!(f.lid_holders(5), vec![a2]);
        assert_eq!(f.lid_owner(4), None);
        f.assign_lid(a2, 0, 0).unwrap();
        assert_eq!(f.lid_owner(5), None);
        // The side table is empty again: equal to a fabric where only a3 ever had a LID.
        let mut g = FabricBuilder::new();
        let ga = g.add_node(&NodeSpec::new(NodeType::Ca, "a", 3)).unwrap();
        let mut g = g.build().unwrap();
        g.set_lid(g.port_id(ga, 3).unwrap(), 9, 0).unwrap();
        assert!(f == g);
        assert!(matches!(
            f.assign_lid(a1, 0xbfff, 1),
            Err(Problem::LidOutOfRange { .. })
        ));
    }
}

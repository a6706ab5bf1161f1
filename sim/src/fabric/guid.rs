//! Default GUIDs for nodes the topology gives none: ibsim's scheme, so that a file without GUIDs
//! yields the same GUIDs here as under ibsim (and the same ibnetdiscover output).
//!
//! The scheme (`ibsim/sim_net.c` `new_node`, `parse_guidbase`): one counter per node type,
//! starting at 0x100000 for CAs and 0x200000 for switches. Each new node takes its type's
//! counter as its node GUID. A switch then advances the counter by 1 (its ports share the node
//! GUID); a CA or router advances it by `ports + 1`, because port `p` gets GUID `node + p`.
//! `switchguid=X` / `caguid=X` / `rtguid=X` move the counter (and the type's base) to X;
//! `switchguid+N` moves it to base + N.
//!
//! One deliberate difference: ibsim's router counter starts at 0 (its base array has no router
//! entry), which makes the first router's GUID 0, an invalid GUID. Routers start at 0x300000.

use super::model::NodeType;

/// Where each node type's GUIDs start when nothing else is said.
pub const DEFAULT_BASES: [(NodeType, u64); 3] = [
    (NodeType::Ca, 0x10_0000),
    (NodeType::Switch, 0x20_0000),
    (NodeType::Router, 0x30_0000),
];

/// The per-type GUID counters of the scheme described in the module documentation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuidAllocator {
    base: [u64; 3],
    next: [u64; 3],
}

fn slot(kind: NodeType) -> usize {
    match kind {
        NodeType::Ca => 0,
        NodeType::Switch => 1,
        NodeType::Router => 2,
    }
}

impl Default for GuidAllocator {
    fn default() -> Self {
        let mut base = [0; 3];
        for (kind, b) in DEFAULT_BASES {
            base[slot(kind)] = b;
        }
        GuidAllocator { base, next: base }
    }
}

impl GuidAllocator {
    /// `switchguid=X` and friends: the next node of `kind` gets GUID `guid`.
    pub fn set_base(&mut self, kind: NodeType, guid: u64) {
        self.base[slot(kind)] = guid;
        self.next[slot(kind)] = guid;
    }

    /// `switchguid+N` and friends: the next node of `kind` gets the type's base plus `offset`.
    pub fn set_offset(&mut self, kind: NodeType, offset: u64) {
        self.next[slot(kind)] = self.base[slot(kind)].wrapping_add(offset);
    }

    /// The GUID the next node of `kind` will get.
    pub fn peek(&self, kind: NodeType) -> u64 {
        self.next[slot(kind)]
    }

    /// Takes the node GUID for a new node of `kind` with `num_ports` ports and reserves the GUIDs
    /// its ports use.
    pub fn take(&mut self, kind: NodeType, num_ports: u8) -> u64 {
        let s = slot(kind);
        let guid = self.next[s];
        let used = if kind == NodeType::Switch {
            1
        } else {
            u64::from(num_ports) + 1
        };
        self.next[s] = guid.wrapping_add(used);
        guid
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_advance_per_type() {
        let mut g = GuidAllocator::default();
        assert_eq!(g.take(NodeType::Switch, 8), 0x200000);
        assert_eq!(g.take(NodeType::Switch, 8), 0x200001);
        assert_eq!(g.take(NodeType::Ca, 2), 0x100000);
        assert_eq!(g.take(NodeType::Ca, 2), 0x100003);
        assert_eq!(g.take(NodeType::Router, 1), 0x300000);
        g.set_base(NodeType::Ca, 0x5000);
        assert_eq!(g.take(NodeType::Ca, 1), 0x5000);
        assert_eq!(g.peek(NodeType::Ca), 0x5002);
        g.set_offset(NodeType::Ca, 0x10);
        assert_eq!(g.take(NodeType::Ca, 1), 0x5010);
    }
}

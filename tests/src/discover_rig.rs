//! Helpers for the discovery tests (`tests/discover_*.rs`): a simulated ConnectX with the MAD
//! layer on a CA of a simulated fabric the test controls (faults, links down), the discovery
//! engine of `hca-tools` run through it, and comparisons of what it found with the topology
//! file parsed on its own.
//!
//! The comparisons never use the engine's writers to build what they compare with: the
//! expected side is always the file as `sim::fabric` parses it, and the discovered graph is
//! read field by field (NodeInfo, NodeDescription, PortInfo, links as the engine recorded
//! them). The text output is checked by parsing it back with the same parser, which is itself
//! checked against captures of the real ibnetdiscover (`sim/tests/ibnetdiscover/`).

use std::collections::BTreeSet;
use std::sync::Arc;

use driver::verbs::HcaOptions;
use hca_tools::discover::{self, Config, Topology};
use mad::wire::attr::node_info::NodeType as WireNodeType;
use mad::wire::attr::port_info::PhysPortState;
use sim::fabric::{Fabric, NodeType};
use sim::net::Network;
use sim::{ClockMode, Scheduler};

use crate::mad_fabric::attach_with;
use crate::mad_rig::MadRig;

/// Our HCA on a fabric.
pub struct DiscoverRig {
    /// The running network (fault injection, links down).
    pub net: Network,
    /// Our HCA, its driver and MAD layer.
    pub hca: MadRig,
}

impl DiscoverRig {
    /// `fabric` running on a virtual clock, our HCA attached to port 1 of CA `node`, strict
    /// leases (every buffer its own IOMMU mapping, so an overrun faults).
    pub fn new(fabric: Fabric, node: &str) -> DiscoverRig {
        DiscoverRig::with(fabric, node, ClockMode::Virtual, dma::LeaseMode::Strict)
    }

    /// The same on `clock` with `leases`.
    pub fn with(
        fabric: Fabric,
        node: &str,
        clock: ClockMode,
        leases: dma::LeaseMode,
    ) -> DiscoverRig {
        let net = Network::new(fabric, Arc::new(Scheduler::new(clock)));
        let hca = attach_with(
            &net,
            node,
            HcaOptions {
                lease_mode: leases,
                ..HcaOptions::default()
            },
        );
        DiscoverRig { net, hca }
    }

    /// Run a discovery with `cfg`; panics if the engine gives up.
    pub fn discover(&self, cfg: &Config) -> Topology {
        discover::discover(&self.hca.port, cfg, &mut |_| {}).expect("discovery")
    }

    /// Leases, mappings and sends back to their baseline, then close everything and check
    /// nothing is left.
    pub fn finish(self) {
        self.net.clear_faults();
        self.hca.assert_clean();
        let DiscoverRig { net, hca } = self;
        hca.finish();
        drop(net);
    }
}

/// The fabric of `sim/tests/net-examples/<name>`.
pub fn example(name: &str) -> Fabric {
    Fabric::parse_file(crate::mad_fabric::example(name)).expect("topology")
}

/// The first CA of `f` in file order.
pub fn first_ca(f: &Fabric) -> String {
    let n = f
        .node_ids()
        .find(|&n| f.node(n).kind() == NodeType::Ca)
        .expect("a CA");
    f.name(n).to_owned()
}

fn kind_of(k: WireNodeType) -> Option<NodeType> {
    match k {
        WireNodeType::Ca => Some(NodeType::Ca),
        WireNodeType::Switch => Some(NodeType::Switch),
        WireNodeType::Router => Some(NodeType::Router),
        WireNodeType::Unknown(_) => None,
    }
}

/// Every link of `f` as a pair of (node GUID, port) ends, lower end first.
pub fn links_by_guid(f: &Fabric) -> BTreeSet<((u64, u8), (u64, u8))> {
    let mut out = BTreeSet::new();
    for n in f.node_ids() {
        for p in f.ports_of(n) {
            if let Some(q) = f.peer(p) {
                let a = (f.node(n).guid(), f.port(p).num());
                let b = (f.node(f.port(q).node()).guid(), f.port(q).num());
                out.insert(if a < b { (a, b) } else { (b, a) });
            }
        }
    }
    out
}

/// Every link the engine recorded, as in [`links_by_guid`].
pub fn discovered_links(t: &Topology) -> BTreeSet<((u64, u8), (u64, u8))> {
    t.links()
        .into_iter()
        .map(|(a, b)| {
            let a = (t.nodes[a.node].guid, a.port);
            let b = (t.nodes[b.node].guid, b.port);
            if a < b { (a, b) } else { (b, a) }
        })
        .collect()
}

/// Assert that the discovered graph is `f` exactly: the same nodes (GUID, type, port count,
/// system image GUID, vendor and device IDs, description, a switch's EnhancedPort0 and LID),
/// the same links between the same ports, the same port GUIDs, LIDs, enabled and active widths
/// and speeds (extended speeds 2, XDR, included) on every port the engine read, and no
/// failure.
// t/f for the two sides, n/p/q for nodes and ports: the comparison reads like the model.
#[allow(clippy::many_single_char_names)]
pub fn assert_reproduces(t: &Topology, f: &Fabric) {
    assert!(t.failures.is_empty(), "failures: {:#?}", t.failures);
    assert_eq!(t.nodes.len(), f.node_count(), "node count");
    assert_eq!(t.links().len(), f.link_count(), "link count");
    assert_eq!(discovered_links(t), links_by_guid(f), "links");
    for n in f.node_ids() {
        let name = f.name(n);
        let fnode = f.node(n);
        let i = t
            .node_by_guid(fnode.guid())
            .unwrap_or_else(|| panic!("{name} ({:#x}) not discovered", fnode.guid()));
        let d = &t.nodes[i];
        assert_eq!(kind_of(d.kind), Some(fnode.kind()), "{name}: type");
        assert_eq!(d.num_ports, fnode.num_ports(), "{name}: ports");
        assert_eq!(d.sys_image_guid, fnode.sys_image_guid(), "{name}");
        assert_eq!(d.vendor_id, fnode.vendor_id(), "{name}");
        assert_eq!(d.device_id, fnode.device_id(), "{name}");
        assert_eq!(
            d.description_text(),
            f.description(n),
            "{name}: description"
        );
        if fnode.kind() == NodeType::Switch {
            let p0 = f.port(f.port_id(n, 0).expect("port 0"));
            let sw = f.switch(n).expect("switch state");
            assert_eq!(
                d.switch.map(|s| s.enhanced_port0),
                Some(sw.info.enhanced_port0),
                "{name}: SwitchInfo"
            );
            assert_eq!(d.lid_of(0), p0.lid(), "{name}: LID");
            assert_eq!(
                d.port(0).map(|p| p.guid),
                Some(p0.guid()),
                "{name}: port GUID"
            );
        }
        for p in f.ports_of(n) {
            let fp = f.port(p);
            let num = fp.num();
            let dp = d.port(num).expect("the port exists");
            let what = format!("{name}[{num}]");
            let Some(q) = f.peer(p) else {
                assert_eq!(dp.remote, None, "{what} is not cabled");
                if let Some(info) = dp.info {
                    assert_ne!(info.port_physical_state, PhysPortState::LinkUp, "{what}");
                    assert_eq!(info.link_width_enabled, fp.enabled.width, "{what}");
                }
                continue;
            };
            let r = dp.remote.unwrap_or_else(|| panic!("{what}: no link found"));
            let fq = f.port(q);
            assert_eq!(
                (t.nodes[r.node].guid, r.port),
                (f.node(fq.node()).guid(), fq.num()),
                "{what}: the other end"
            );
            assert_eq!(dp.guid, fp.guid(), "{what}: port GUID");
            let info = dp
                .info
                .unwrap_or_else(|| panic!("{what}: PortInfo not read"));
            assert_eq!(info.lid, fp.lid(), "{what}: LID");
            let (e, a) = (fp.enabled, fp.state.active);
            assert_eq!(
                (
                    info.link_width_enabled,
                    info.link_speed_enabled,
                    info.link_speed_ext_enabled,
                    info.link_speed_ext_enabled2
                ),
                (e.width, e.speed, e.speed_ext, e.speed_ext2),
                "{what}: enabled width/speed/extended speed/extended speed 2"
            );
            assert_eq!(
                (
                    info.link_width_active,
                    info.link_speed_active,
                    info.link_speed_ext_active,
                    info.link_speed_ext_active2
                ),
                (a.width, a.speed, a.speed_ext, a.speed_ext2),
                "{what}: active width/speed/extended speed/extended speed 2"
            );
        }
    }
}

/// Assert that `text` (ibnetdiscover's format) parses back to `f`: the same nodes by GUID
/// with the same type, port count, description, system image GUID, vendor and device IDs,
/// the same links, CA port GUIDs, LIDs and active rates (ibnetdiscover's text gives the
/// active rate, from which a reader can only guess the enabled masks).
pub fn assert_text_reproduces(text: &str, f: &Fabric) {
    let g = Fabric::parse_str("discovered", text)
        .unwrap_or_else(|e| panic!("the output does not parse: {e}\n{text}"));
    assert_eq!(g.node_count(), f.node_count(), "node count");
    assert_eq!(links_by_guid(&g), links_by_guid(f), "links");
    for n in f.node_ids() {
        let fnode = f.node(n);
        let name = f.name(n);
        let m = g
            .node_by_guid(fnode.guid())
            .unwrap_or_else(|| panic!("{name} missing from the text"));
        let gnode = g.node(m);
        assert_eq!(gnode.kind(), fnode.kind(), "{name}");
        assert_eq!(gnode.num_ports(), fnode.num_ports(), "{name}");
        assert_eq!(g.description(m), f.description(n), "{name}");
        assert_eq!(gnode.sys_image_guid(), fnode.sys_image_guid(), "{name}");
        assert_eq!(
            (gnode.vendor_id(), gnode.device_id()),
            (fnode.vendor_id(), fnode.device_id()),
            "{name}"
        );
        if fnode.kind() == NodeType::Switch {
            let lid = |fab: &Fabric, id| fab.port(fab.port_id(id, 0).expect("port 0")).lid();
            assert_eq!(lid(&g, m), lid(f, n), "{name}: LID");
            assert_eq!(
                g.switch(m).map(|s| s.info.enhanced_port0),
                f.switch(n).map(|s| s.info.enhanced_port0),
                "{name}"
            );
        }
        for (p, q) in f.ports_of(n).zip(g.ports_of(m)) {
            let (fp, gp) = (f.port(p), g.port(q));
            if f.peer(p).is_none() {
                continue;
            }
            let what = format!("{name}[{}]", fp.num());
            assert_eq!(gp.state.active, fp.state.active, "{what}: active rate");
            if fnode.kind() != NodeType::Switch {
                assert_eq!(gp.guid(), fp.guid(), "{what}: port GUID");
                assert_eq!(gp.lid(), fp.lid(), "{what}: LID");
            }
        }
    }
}

//! Generators for regular fabrics: two- and three-level fat trees, a single switch, a line and a
//! ring of switches. Each builds a [`Fabric`] that [`Fabric::write_topology`] turns into a
//! topology file; [`generate`] and [`generate_text`] take a spec string, for the command line.
//!
//! Specs (`shape:key=value,...`; numbers are decimal):
//!
//! | shape | keys | fabric |
//! |---|---|---|
//! | `fat-tree` | `leaves`, `hosts` (per leaf), `spines`, optional `links` (per leaf-spine pair, default 1), `leaf-ports`, `spine-ports` (pad switches to a radix) | every leaf is cabled to every spine with `links` cables; leaf `l` has hosts on ports 1..=hosts, then uplinks: to spine `s` on ports `hosts + s*links + k + 1`; spine `s` reaches leaf `l` on ports `l*links + k + 1` |
//! | `fat-tree3` | `pods`, `leaves` (per pod), `hosts` (per leaf), `spines` (per pod), `cores` (a multiple of `spines`) | in each pod every leaf is cabled to every pod spine (leaf port `hosts + j + 1` ↔ spine port `l + 1`); the cores form `spines` groups of `cores/spines`: pod spine `j` is cabled to every core of group `j` (spine port `leaves + m + 1` ↔ core port `pod + 1`), so each core has one port per pod |
//! | `switch` | `hosts`, optional `ports` | one switch with hosts on ports 1..=hosts |
//! | `line` | `switches`, `hosts` (per switch), optional `links` | switch `i` cabled to switch `i+1` with `links` cables (ports `hosts + k + 1` to the next, `hosts + links + k + 1` to the previous) |
//! | `ring` | as `line`, `switches` ≥ 3 | a line whose last switch is cabled to the first |
//!
//! Every shape takes `link=<rate>` (an ibnetdiscover rate such as `4xQDR`, `4xHDR`,
//! `4xXDR`) to enable that rate on both ends of every cable (as the token would in a file);
//! spare ports and all ports without it have ibsim's defaults (4x SDR).
//!
//! Hosts are single-port CAs named `host-N` (N from 1, described as `host-N HCA-1`) and come
//! first in the file, so the first node (ibsim's default attach point) is a host. Switches are
//! `spine-N`/`leaf-N`, `core-N`/`podP-spineN`/`podP-leafN`, `switch-1`, `sw-N`. GUIDs follow
//! ibsim's default scheme ([`guid`](crate::fabric::guid)), written out explicitly.
//!
//! Examples: the 648-host tree of 36-port switches is `fat-tree:leaves=36,hosts=18,spines=18`;
//! the 2,144-node benchmark tree is `fat-tree:leaves=64,hosts=32,spines=32`; a 102,976-node tree
//! is `fat-tree3:pods=96,leaves=32,hosts=32,spines=16,cores=64`.

mod spec;

use std::io::Write;

pub use self::spec::parse_spec;
use super::builder::{FabricBuilder, MAX_FABRIC_PORTS, NodeSpec};
use super::error::{FabricError, Problem, SpecProblem};
use super::model::{Fabric, NodeId, NodeType};
use super::rate::LinkRates;

/// Most nodes a generator builds (a typo should not exhaust memory); the ports they hold are
/// bounded too, by [`MAX_FABRIC_PORTS`].
pub const MAX_NODES: u64 = 1_000_000;

/// A two-level fat tree (leaf/spine).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FatTree {
    /// Leaf switches.
    pub leaves: u32,
    /// Hosts on each leaf.
    pub hosts_per_leaf: u32,
    /// Spine switches.
    pub spines: u32,
    /// Cables between each leaf and each spine.
    pub links_per_spine: u32,
    /// Leaf port count, if more than needed (e.g. 36).
    pub leaf_ports: Option<u8>,
    /// Spine port count, if more than needed.
    pub spine_ports: Option<u8>,
}

/// A three-level fat tree: pods of leaves and spines under a layer of cores.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FatTree3 {
    /// Pods.
    pub pods: u32,
    /// Leaf switches per pod.
    pub leaves_per_pod: u32,
    /// Hosts on each leaf.
    pub hosts_per_leaf: u32,
    /// Spine (aggregation) switches per pod.
    pub spines_per_pod: u32,
    /// Core switches (a multiple of `spines_per_pod`).
    pub cores: u32,
}

/// One switch with hosts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Star {
    /// Hosts.
    pub hosts: u32,
    /// Switch port count, if more than `hosts`.
    pub ports: Option<u8>,
}

/// Switches in a line or a ring, each with hosts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chain {
    /// Switches.
    pub switches: u32,
    /// Hosts on each switch.
    pub hosts_per_switch: u32,
    /// Cables between neighbouring switches.
    pub links: u32,
}

/// The shape to generate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Shape {
    /// `fat-tree`.
    FatTree(FatTree),
    /// `fat-tree3`.
    FatTree3(FatTree3),
    /// `switch`.
    Switch(Star),
    /// `line`.
    Line(Chain),
    /// `ring`.
    Ring(Chain),
}

/// A parsed spec: a shape and the rate every port enables.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GenSpec {
    /// What to build.
    pub shape: Shape,
    /// Enabled rates for both ends of every cable; `None` keeps ibsim's defaults.
    pub link: Option<LinkRates>,
}

/// Parses `spec` and builds the fabric.
pub fn generate(spec: &str) -> Result<Fabric, FabricError> {
    build(&parse_spec(spec)?).map_err(|e| match e {
        FabricError::Spec { problem, .. } => FabricError::Spec {
            spec: spec.to_owned(),
            problem,
        },
        other => other,
    })
}

/// Parses `spec`, builds the fabric and writes its topology to `out`.
pub fn generate_text(spec: &str, out: impl Write) -> Result<Fabric, FabricError> {
    let f = generate(spec)?;
    f.write_topology(out)?;
    Ok(f)
}

/// Builds the fabric a spec describes.
pub fn build(spec: &GenSpec) -> Result<Fabric, FabricError> {
    let mut g = Gen {
        b: FabricBuilder::new(),
        rates: spec.link.unwrap_or(LinkRates::DEFAULT),
        hosts: Vec::new(),
        spec: spec_name(&spec.shape),
    };
    match &spec.shape {
        Shape::FatTree(t) => g.fat_tree(t)?,
        Shape::FatTree3(t) => g.fat_tree3(t)?,
        Shape::Switch(s) => g.star(s)?,
        Shape::Line(c) => g.chain(c, false)?,
        Shape::Ring(c) => g.chain(c, true)?,
    }
    let name = g.spec.clone();
    g.b.build().map_err(|e| match e {
        FabricError::Invalid(p) => FabricError::Spec {
            spec: name,
            problem: SpecProblem::Model(p),
        },
        other => other,
    })
}

fn spec_name(s: &Shape) -> String {
    match s {
        Shape::FatTree(_) => "fat-tree",
        Shape::FatTree3(_) => "fat-tree3",
        Shape::Switch(_) => "switch",
        Shape::Line(_) => "line",
        Shape::Ring(_) => "ring",
    }
    .to_owned()
}

struct Gen {
    b: FabricBuilder,
    rates: LinkRates,
    hosts: Vec<NodeId>,
    spec: String,
}

impl Gen {
    fn fail(&self, problem: SpecProblem) -> FabricError {
        FabricError::Spec {
            spec: self.spec.clone(),
            problem,
        }
    }

    fn model(&self, p: Problem) -> FabricError {
        self.fail(SpecProblem::Model(p))
    }

    /// Refuses more than [`MAX_NODES`] nodes; `None` is a count that overflowed 64 bits.
    fn check_size(&self, nodes: Option<u64>) -> Result<(), FabricError> {
        match nodes {
            Some(n) if n <= MAX_NODES => Ok(()),
            count => Err(self.fail(SpecProblem::TooLarge {
                what: "nodes",
                count,
                limit: MAX_NODES,
            })),
        }
    }

    /// Refuses a shape whose nodes, given as (how many, ports each), would hold more than
    /// [`MAX_FABRIC_PORTS`] port entries (each node's ports and its port 0), before building.
    fn check_ports(&self, nodes: &[(Option<u64>, u8)]) -> Result<(), FabricError> {
        let total = nodes.iter().try_fold(0u64, |sum, &(count, ports)| {
            count?.checked_mul(u64::from(ports) + 1)?.checked_add(sum)
        });
        match total {
            Some(t) if t <= MAX_FABRIC_PORTS => Ok(()),
            count => Err(self.fail(SpecProblem::TooLarge {
                what: "ports",
                count,
                limit: MAX_FABRIC_PORTS,
            })),
        }
    }

    /// The port count of `what`, which needs `needed` ports (`for_what` says what they are
    /// for); `given` is the count the spec gave and its key.
    fn ports(
        &self,
        what: &'static str,
        needed: u64,
        given: Option<(&'static str, u8)>,
        hint: &'static str,
        for_what: impl FnOnce() -> String,
    ) -> Result<u8, FabricError> {
        if needed > 254 {
            return Err(self.fail(SpecProblem::TooManyPorts {
                what,
                ports: needed,
                hint,
            }));
        }
        match given {
            Some((key, g)) if u64::from(g) < needed => Err(self.fail(SpecProblem::BadValue {
                key: key.to_owned(),
                value: g.to_string(),
                why: format!("{what} needs at least {needed} ports: {}", for_what()),
            })),
            Some((_, g)) => Ok(g),
            None => Ok(needed.max(1) as u8),
        }
    }

    fn node(
        &mut self,
        kind: NodeType,
        name: &str,
        desc: Option<&str>,
        ports: u8,
    ) -> Result<NodeId, FabricError> {
        let spec = NodeSpec {
            description: desc,
            ..NodeSpec::new(kind, name, ports)
        };
        self.b.add_node(&spec).map_err(|p| self.model(p))
    }

    /// Adds `n` single-port hosts.
    fn add_hosts(&mut self, n: u64) -> Result<(), FabricError> {
        self.hosts.reserve(n as usize);
        for i in 1..=n {
            let name = format!("host-{i}");
            let desc = format!("host-{i} HCA-1");
            let h = self.node(NodeType::Ca, &name, Some(&desc), 1)?;
            self.hosts.push(h);
        }
        Ok(())
    }

    fn switches(&mut self, prefix: &str, n: u32, ports: u8) -> Result<Vec<NodeId>, FabricError> {
        (1..=n)
            .map(|i| self.node(NodeType::Switch, &format!("{prefix}{i}"), None, ports))
            .collect()
    }

    fn link(
        &mut self,
        one: NodeId,
        one_port: u64,
        other: NodeId,
        other_port: u64,
    ) -> Result<(), FabricError> {
        let fabric = self.b.fabric();
        let ends = [
            fabric
                .port_id(one, one_port as u8)
                .expect("generator port within the node"),
            fabric
                .port_id(other, other_port as u8)
                .expect("generator port within the node"),
        ];
        self.b.link(ends[0], ends[1]).map_err(|p| self.model(p))?;
        // The rate belongs to the cable, as an ibnetdiscover token would set it; spare ports
        // keep ibsim's defaults.
        for end in ends {
            self.b.set_enabled(end, self.rates);
        }
        Ok(())
    }

    /// Cables `hosts_per` consecutive hosts, from `first`, to ports 1.. of `sw`.
    fn attach_hosts(&mut self, sw: NodeId, first: u64, hosts_per: u64) -> Result<(), FabricError> {
        for k in 0..hosts_per {
            let h = self.hosts[(first + k) as usize];
            self.link(sw, k + 1, h, 1)?;
        }
        Ok(())
    }

    fn fat_tree(&mut self, tree: &FatTree) -> Result<(), FabricError> {
        let leaves = u64::from(tree.leaves);
        let hosts = u64::from(tree.hosts_per_leaf);
        let spines = u64::from(tree.spines);
        let links = u64::from(tree.links_per_spine);
        self.check_size(
            leaves
                .checked_mul(hosts)
                .and_then(|h| h.checked_add(leaves))
                .and_then(|n| n.checked_add(spines)),
        )?;
        let leaf_ports = self.ports(
            "a leaf",
            hosts + spines * links,
            tree.leaf_ports.map(|p| ("leaf-ports", p)),
            "hosts, spines or links",
            || format!("{hosts} for its hosts and {links} to each of the {spines} spines"),
        )?;
        let spine_ports = self.ports(
            "a spine",
            leaves * links,
            tree.spine_ports.map(|p| ("spine-ports", p)),
            "leaves or links",
            || format!("{links} to each of the {leaves} leaves"),
        )?;
        self.check_ports(&[
            (leaves.checked_mul(hosts), 1),
            (Some(leaves), leaf_ports),
            (Some(spines), spine_ports),
        ])?;
        self.add_hosts(leaves * hosts)?;
        let spine_ids = self.switches("spine-", tree.spines, spine_ports)?;
        let leaf_ids = self.switches("leaf-", tree.leaves, leaf_ports)?;
        for (li, &leaf) in leaf_ids.iter().enumerate() {
            let li = li as u64;
            self.attach_hosts(leaf, li * hosts, hosts)?;
            for (si, &spine) in spine_ids.iter().enumerate() {
                let si = si as u64;
                for j in 0..links {
                    self.link(leaf, hosts + si * links + j + 1, spine, li * links + j + 1)?;
                }
            }
        }
        Ok(())
    }

    fn fat_tree3(&mut self, tree: &FatTree3) -> Result<(), FabricError> {
        let pods = u64::from(tree.pods);
        let leaves = u64::from(tree.leaves_per_pod);
        let hosts = u64::from(tree.hosts_per_leaf);
        let spines = u64::from(tree.spines_per_pod);
        let cores = u64::from(tree.cores);
        if cores % spines != 0 {
            return Err(self.fail(SpecProblem::BadValue {
                key: "cores".to_owned(),
                value: cores.to_string(),
                why: format!("must be a multiple of spines ({spines}): each pod spine reaches cores/spines cores"),
            }));
        }
        let per_group = cores / spines;
        self.check_size(
            leaves
                .checked_mul(hosts)
                .and_then(|h| h.checked_add(leaves))
                .and_then(|n| n.checked_add(spines))
                .and_then(|per_pod| per_pod.checked_mul(pods))
                .and_then(|n| n.checked_add(cores)),
        )?;
        let leaf_ports = self.ports(
            "a leaf",
            hosts + spines,
            None,
            "hosts or spines",
            String::new,
        )?;
        let spine_ports = self.ports(
            "a pod spine",
            leaves + per_group,
            None,
            "leaves or cores",
            String::new,
        )?;
        let core_ports = self.ports("a core", pods, None, "pods", String::new)?;
        self.check_ports(&[
            (
                pods.checked_mul(leaves).and_then(|l| l.checked_mul(hosts)),
                1,
            ),
            (pods.checked_mul(leaves), leaf_ports),
            (pods.checked_mul(spines), spine_ports),
            (Some(cores), core_ports),
        ])?;
        self.add_hosts(pods * leaves * hosts)?;
        let core_ids = self.switches("core-", tree.cores, core_ports)?;
        for pod in 0..pods {
            let spine_ids = self.switches(
                &format!("pod{}-spine", pod + 1),
                tree.spines_per_pod,
                spine_ports,
            )?;
            let leaf_ids = self.switches(
                &format!("pod{}-leaf", pod + 1),
                tree.leaves_per_pod,
                leaf_ports,
            )?;
            for (li, &leaf) in leaf_ids.iter().enumerate() {
                let li = li as u64;
                self.attach_hosts(leaf, (pod * leaves + li) * hosts, hosts)?;
                for (j, &spine) in spine_ids.iter().enumerate() {
                    self.link(leaf, hosts + j as u64 + 1, spine, li + 1)?;
                }
            }
            for (j, &spine) in spine_ids.iter().enumerate() {
                for m in 0..per_group {
                    let core = core_ids[(j as u64 * per_group + m) as usize];
                    self.link(spine, leaves + m + 1, core, pod + 1)?;
                }
            }
        }
        Ok(())
    }

    fn star(&mut self, s: &Star) -> Result<(), FabricError> {
        let h = u64::from(s.hosts);
        self.check_size(h.checked_add(1))?;
        let ports = self.ports(
            "the switch",
            h,
            s.ports.map(|p| ("ports", p)),
            "hosts",
            || format!("one for each of the {h} hosts"),
        )?;
        self.check_ports(&[(Some(h), 1), (Some(1), ports)])?;
        self.add_hosts(h)?;
        let sw = self.node(NodeType::Switch, "switch-1", None, ports)?;
        self.attach_hosts(sw, 0, h)
    }

    fn chain(&mut self, chain: &Chain, ring: bool) -> Result<(), FabricError> {
        let switches = u64::from(chain.switches);
        let hosts = u64::from(chain.hosts_per_switch);
        let links = u64::from(chain.links);
        if ring && switches < 3 {
            return Err(self.fail(SpecProblem::BadValue {
                key: "switches".to_owned(),
                value: switches.to_string(),
                why: "a ring needs at least 3 switches (use line for 2)".to_owned(),
            }));
        }
        self.check_size(
            switches
                .checked_mul(hosts)
                .and_then(|h| h.checked_add(switches)),
        )?;
        let inter = if switches > 1 { 2 * links } else { 0 };
        let ports = self.ports(
            "a switch",
            hosts + inter,
            None,
            "hosts or links",
            String::new,
        )?;
        self.check_ports(&[(switches.checked_mul(hosts), 1), (Some(switches), ports)])?;
        self.add_hosts(switches * hosts)?;
        let ids = self.switches("sw-", chain.switches, ports)?;
        for (i, &sw) in ids.iter().enumerate() {
            self.attach_hosts(sw, i as u64 * hosts, hosts)?;
        }
        let pairs = if ring { switches } else { switches - 1 };
        for i in 0..pairs {
            let this = ids[i as usize];
            let next = ids[((i + 1) % switches) as usize];
            for j in 0..links {
                self.link(this, hosts + j + 1, next, hosts + links + j + 1)?;
            }
        }
        Ok(())
    }
}

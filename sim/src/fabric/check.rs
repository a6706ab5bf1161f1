//! What a subnet manager must leave behind, checked on a fabric's state: every cabled port
//! ACTIVE, a LID on every CA port and switch, no LID twice, and from every CA port to every
//! other the switches' LFTs lead the way over ACTIVE links.
//!
//! The walk is the forwarding rule written out on its own (not the network's engine), so
//! that a check of the engine's routes and of the SM's tables do not share a mistake: leave
//! the source CA port over its link; at a switch, LFT\[DLID\] (within LinearFDBTop, port 0
//! meaning the switch itself) names the way out; the walk ends at the CA port that owns the
//! DLID, or fails.

use std::collections::HashMap;
use std::fmt;

use super::model::{Fabric, NodeType, PortId};
use super::state::LinkState;

/// The most switches a LID-routed packet may cross before the walk calls it a loop.
pub const MAX_HOPS: usize = 64;

/// What [`check`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    /// Cabled ports looked at (both ends of every link, and every switch's port 0).
    pub cabled_ports: usize,
    /// Cabled ports not ACTIVE, with their state.
    pub not_active: Vec<String>,
    /// CA ports and switches without a LID.
    pub without_lid: Vec<String>,
    /// LIDs held by more than one port.
    pub duplicate_lids: Vec<(u16, Vec<String>)>,
    /// Base LIDs assigned (CA ports and switches).
    pub lids: usize,
    /// CA ports with a link and a LID (the ends of the reachability check).
    pub ca_ports: usize,
    /// Ordered pairs of those CA ports walked.
    pub pairs: usize,
    /// Pairs whose walk failed.
    pub unreachable: usize,
    /// The first failures, said in words (at most 20).
    pub failures: Vec<String>,
}

impl Report {
    /// Nothing wrong.
    pub fn ok(&self) -> bool {
        self.not_active.is_empty()
            && self.without_lid.is_empty()
            && self.duplicate_lids.is_empty()
            && self.unreachable == 0
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{} cabled ports, {} not ACTIVE; {} LIDs, {} ports without one, {} duplicated; \
             {} CA ports, {} of {} pairs unreachable",
            self.cabled_ports,
            self.not_active.len(),
            self.lids,
            self.without_lid.len(),
            self.duplicate_lids.len(),
            self.ca_ports,
            self.unreachable,
            self.pairs
        )?;
        for p in self.not_active.iter().take(20) {
            writeln!(f, "  not active: {p}")?;
        }
        for p in self.without_lid.iter().take(20) {
            writeln!(f, "  no LID: {p}")?;
        }
        for (lid, ports) in self.duplicate_lids.iter().take(20) {
            writeln!(f, "  LID {lid} held by {}", ports.join(", "))?;
        }
        for x in &self.failures {
            writeln!(f, "  {x}")?;
        }
        Ok(())
    }
}

fn active(f: &Fabric, p: PortId) -> bool {
    f.port(p).state.link_state == LinkState::Active
}

fn owns(f: &Fabric, p: PortId, lid: u16) -> bool {
    let port = f.port(p);
    let base = u32::from(port.lid());
    base != 0 && u32::from(lid) >= base && u32::from(lid) < base + (1u32 << port.lmc())
}

/// Walk from CA port `from` towards `dlid`; `Err` says where it stops.
pub fn route(f: &Fabric, from: PortId, dlid: u16) -> Result<Vec<PortId>, String> {
    let mut path = vec![from];
    let mut out = from;
    for _ in 0..=MAX_HOPS {
        let Some(q) = f.peer(out) else {
            return Err(format!("{} has no cable", f.port_label(out)));
        };
        if !active(f, out) || !active(f, q) {
            return Err(format!(
                "the link {} - {} is not ACTIVE",
                f.port_label(out),
                f.port_label(q)
            ));
        }
        path.push(q);
        let node = f.port(q).node();
        if f.node(node).kind() != NodeType::Switch {
            return if owns(f, q, dlid) {
                Ok(path)
            } else {
                Err(format!(
                    "arrives at {}, which does not own LID {dlid}",
                    f.port_label(q)
                ))
            };
        }
        let sw = f
            .switch(node)
            .ok_or_else(|| "a switch without tables".to_owned())?;
        let name = f.name(node);
        if dlid > sw.info.linear_fdb_top {
            return Err(format!(
                "switch {name:?}: LID {dlid} is beyond LinearFDBTop {}",
                sw.info.linear_fdb_top
            ));
        }
        let e = sw
            .route(dlid)
            .ok_or_else(|| format!("switch {name:?} has no LFT entry for LID {dlid}"))?;
        if e == 0 {
            return Err(format!("switch {name:?} routes LID {dlid} to itself"));
        }
        out = f.port_id(node, e).ok_or_else(|| {
            format!("switch {name:?} routes LID {dlid} to port {e}, which it lacks")
        })?;
        path.push(out);
    }
    Err(format!(
        "no arrival after {MAX_HOPS} switches: a routing loop"
    ))
}

/// Check the fabric (see the module documentation).
pub fn check(f: &Fabric) -> Report {
    let mut r = Report::default();
    let mut holders: HashMap<u32, Vec<String>> = HashMap::new();
    let mut cas: Vec<PortId> = Vec::new();
    for n in f.node_ids() {
        let node = f.node(n);
        let switch = node.kind() == NodeType::Switch;
        for num in 0..=node.num_ports() {
            let Some(p) = f.port_id(n, num) else { continue };
            let port = f.port(p);
            let cabled = f.peer(p).is_some() || (switch && num == 0);
            if cabled {
                r.cabled_ports += 1;
                if !active(f, p) {
                    r.not_active.push(format!(
                        "{} {:?}/{:?}",
                        f.port_label(p),
                        port.state.link_state,
                        port.state.phys_state
                    ));
                }
            }
            let holds_lid = if switch {
                num == 0
            } else {
                f.peer(p).is_some()
            };
            if !holds_lid {
                continue;
            }
            if port.lid() == 0 {
                r.without_lid.push(f.port_label(p));
                continue;
            }
            r.lids += 1;
            let base = u32::from(port.lid());
            for lid in base..base + (1u32 << port.lmc()) {
                holders.entry(lid).or_default().push(f.port_label(p));
            }
            if !switch {
                cas.push(p);
            }
        }
    }
    let mut dups: Vec<(u16, Vec<String>)> = holders
        .into_iter()
        .filter(|(_, v)| v.len() > 1)
        .map(|(l, v)| (l as u16, v))
        .collect();
    dups.sort();
    r.duplicate_lids = dups;
    r.ca_ports = cas.len();
    for &s in &cas {
        for &d in &cas {
            if s == d {
                continue;
            }
            r.pairs += 1;
            let dlid = f.port(d).lid();
            if let Err(why) = route(f, s, dlid) {
                r.unreachable += 1;
                if r.failures.len() < 20 {
                    r.failures.push(format!(
                        "{} -> {} (LID {dlid}): {why}",
                        f.port_label(s),
                        f.port_label(d)
                    ));
                }
            }
        }
    }
    r
}

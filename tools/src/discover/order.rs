//! The order a discovery's nodes are kept and written in, made independent of the order the
//! answers came back in.
//!
//! With several SMPs in flight, answers come back in whatever order the fabric returns them
//! (on hardware, and on the simulator when a link is slow), and which answer comes first
//! decides which route first reaches a node, and so the order nodes are found in. The
//! walk's own order is therefore not repeatable. The order kept is the one the same walk
//! would have found with every answer coming back in the order it was asked (as with one
//! SMP at a time, or on ibsim, which answers in order): the walk is replayed on what was
//! found, the fabric's links standing in for the answers. That order is breadth-first from
//! the local port, each node's ports in increasing number (and a Mellanox QDR port followed
//! after its ExtendedPortInfo, as libibnetdisc does), and it is the order ibnetdiscover
//! finds nodes in when answers come back in order, so the ibnetdiscover text keeps its
//! parity with the real tool. Each node's `path` becomes the route the replay first reached
//! it by. Nodes the replay cannot reach (a link recorded and later contradicted) follow, in
//! the walk's order; failures are sorted by route, attribute, modifier and what happened.

use std::collections::VecDeque;

use mad::wire::attr::port_info::PhysPortState;

use super::engine::{Config, wants_ext_port_info};
use super::topology::{NodeIndex, PortRef, Topology};

/// A query of the replayed walk that leads somewhere (NodeDescription and SwitchInfo lead
/// nowhere, so their place in the queue changes no order).
enum Replay {
    /// NodeInfo along `path`, which left by `via` (none for the local port).
    Node { path: Vec<u8>, via: Option<PortRef> },
    /// PortInfo of a port of a node, asked along `path`.
    Port {
        node: NodeIndex,
        port: u8,
        path: Vec<u8>,
    },
    /// Mellanox ExtendedPortInfo of a port, asked along `path`.
    ExtPort {
        node: NodeIndex,
        port: u8,
        path: Vec<u8>,
    },
}

/// What the replay found of one node.
#[derive(Clone)]
struct Found {
    path: Vec<u8>,
    /// The port the replay's SMPs entered the node by.
    entry: u8,
}

/// `t` with its nodes in the in-order walk's order and their paths the routes that walk
/// took (see the module documentation); `cfg` is the discovery's (hop limit, ExtendedPortInfo).
pub(crate) fn in_answer_independent_order(t: Topology, cfg: &Config) -> Topology {
    let Some(from) = t.from else {
        return t;
    };
    let mut found: Vec<Option<Found>> = vec![None; t.nodes.len()];
    let mut order: Vec<NodeIndex> = Vec::with_capacity(t.nodes.len());
    let mut queue = VecDeque::from([Replay::Node {
        path: Vec::new(),
        via: None,
    }]);
    while let Some(q) = queue.pop_front() {
        match q {
            Replay::Node { path, via } => {
                // What lies at the end of the route: the local port, or across the link.
                let here = match via {
                    None => Some(from),
                    Some(v) => t.port(v).and_then(|p| p.remote),
                };
                let Some(here) = here else { continue };
                let n = &t.nodes[here.node];
                if found[here.node].is_none() {
                    found[here.node] = Some(Found {
                        path: path.clone(),
                        entry: here.port,
                    });
                    order.push(here.node);
                    if n.is_switch() {
                        queue.push_back(Replay::Port {
                            node: here.node,
                            port: 0,
                            path: path.clone(),
                        });
                    }
                }
                if !n.is_switch() {
                    queue.push_back(Replay::Port {
                        node: here.node,
                        port: here.port,
                        path,
                    });
                }
            }
            Replay::Port { node, port, path } => {
                let n = &t.nodes[node];
                let Some(info) = n.port(port).and_then(|p| p.info) else {
                    continue;
                };
                if port == 0 && n.is_switch() {
                    for i in 1..=n.num_ports {
                        queue.push_back(Replay::Port {
                            node,
                            port: i,
                            path: path.clone(),
                        });
                    }
                }
                if wants_ext_port_info(cfg, n, port, &info) {
                    queue.push_back(Replay::ExtPort { node, port, path });
                } else {
                    follow(&t, cfg, &found, node, port, path, &mut queue);
                }
            }
            Replay::ExtPort { node, port, path } => {
                follow(&t, cfg, &found, node, port, path, &mut queue);
            }
        }
    }
    let paths: Vec<Option<Vec<u8>>> = found.into_iter().map(|f| f.map(|f| f.path)).collect();
    order.extend(
        paths
            .iter()
            .enumerate()
            .filter(|(_, p)| p.is_none())
            .map(|(i, _)| i),
    );
    t.reordered(&order, &paths)
}

/// The replay's `follow`: the walk's rule for going on from port `port` of `node` (reached
/// along `path`): a link up, out of a switch port other than the one the SMPs entered by, or
/// out of the local port, within the hop limit.
fn follow(
    t: &Topology,
    cfg: &Config,
    found: &[Option<Found>],
    node: NodeIndex,
    port: u8,
    path: Vec<u8>,
    queue: &mut VecDeque<Replay>,
) {
    let n = &t.nodes[node];
    let Some(info) = n.port(port).and_then(|p| p.info) else {
        return;
    };
    if port == 0 || info.port_physical_state != PhysPortState::LinkUp {
        return;
    }
    let here = PortRef { node, port };
    let entry = found[node].as_ref().map_or(0, |f| f.entry);
    let onward = n.is_switch() && port != entry;
    if !onward && t.from != Some(here) {
        return;
    }
    if path.len() >= usize::from(cfg.max_hops) {
        return;
    }
    let mut next = path;
    next.push(port);
    queue.push_back(Replay::Node {
        path: next,
        via: Some(here),
    });
}

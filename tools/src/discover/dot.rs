//! A [`Topology`] as a Graphviz graph (`hca discover --dot | dot -Tsvg > fabric.svg`):
//! switches as boxes, CAs as ellipses, routers as diamonds, one edge per link labelled with
//! its rate and the port number at each end. Nodes are named by GUID and labelled with their
//! description, GUID and LID; the local node is filled. Nodes and edges come in the order of
//! [`Topology::nodes`], which does not depend on the order answers came back in.

use std::io::Write;

use mad::wire::attr::node_info::NodeType;

use super::ibnetdiscover::{speed_word, width_name};
use super::json::quote;
use super::topology::Topology;

/// Write `t` as a Graphviz `graph`.
pub fn write(t: &Topology, out: &mut dyn Write) -> std::io::Result<()> {
    writeln!(out, "graph fabric {{")?;
    writeln!(
        out,
        "  graph [overlap=false, splines=true];\n  node [fontsize=10];\n  edge [fontsize=8];"
    )?;
    for (i, n) in t.nodes.iter().enumerate() {
        let shape = match n.kind {
            NodeType::Switch => "box",
            NodeType::Ca => "ellipse",
            NodeType::Router => "diamond",
            NodeType::Unknown(_) => "octagon",
        };
        let label = format!(
            "{}\n{:#018x}\nlid {}",
            n.description_text(),
            n.guid,
            n.lid_of(t.lid_port(i))
        );
        let local = if t.from.is_some_and(|f| f.node == i) {
            ", style=filled, fillcolor=lightblue"
        } else {
            ""
        };
        writeln!(
            out,
            "  \"{:#018x}\" [shape={shape}, label={}{local}];",
            n.guid,
            quote(&label)
        )?;
    }
    for (a, b) in t.links() {
        let na = &t.nodes[a.node];
        let nb = &t.nodes[b.node];
        let rate = na
            .port(a.port)
            .and_then(|p| {
                let (w, s, e) = p.active_rate(na.capability_masks_for(a.port))?;
                Some(format!(
                    "{}{}",
                    width_name(w),
                    speed_word(s, e, p.fdr10_active)
                ))
            })
            .unwrap_or_default();
        writeln!(
            out,
            "  \"{:#018x}\" -- \"{:#018x}\" [taillabel=\"{}\", headlabel=\"{}\", label=\"{rate}\"];",
            na.guid, nb.guid, a.port, b.port
        )?;
    }
    writeln!(out, "}}")
}

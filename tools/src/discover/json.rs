//! A [`Topology`] as JSON (`hca discover --json`). The schema, `hca-discover/1`:
//!
//! ```text
//! {
//!   "schema": "hca-discover/1",
//!   "from": {"node": GUID, "port": N},              the local node and port
//!   "stats": {"nodes", "switches", "cas", "routers", "links", "smps", "responses",
//!             "retries", "timeouts", "failures", "max_in_flight", "max_hops",
//!             "beyond_max_hops" (links up not followed because their route would have
//!             been longer than the hop limit): numbers,
//!             "wall_ms", "device_ms": numbers (ms, fractional)},
//!   "nodes": [{                                      in the order below
//!     "guid": GUID, "type": "switch" | "ca" | "router" | "unknown",
//!     "name": "S-<guid>" | "H-<guid>" | "R-<guid>", "description": string,
//!     "num_ports": N, "system_image_guid": GUID, "vendor_id": HEX, "device_id": HEX,
//!     "revision": N, "lid": N, "lmc": N (a switch's port 0; the local node's start port;
//!               another CA's first linked port: Topology::lid_port, as in the graph),
//!     "path": [egress port per hop], "enhanced_port0": bool (switches),
//!     "ports": [{                                    ports whose PortInfo was read
//!       "port": N, "guid": GUID, "lid": N, "lmc": N, "state": string, "phys_state": string,
//!       "rate": "4xHDR" (as ibnetdiscover prints it; null when the link is not up, and for
//!               a switch's port 0, which has no link: its PortInfo reports a 4X SDR width
//!               and speed, as ibsim's and real switches' do, and those are in "width" and
//!               "speed", but ibnetdiscover prints no rate for it),
//!       "width": {"active", "enabled", "supported"}, PortInfo masks (numbers)
//!       "speed": {"active", "enabled", "supported", "ext_active", "ext_enabled",
//!                 "ext_supported", "ext_active2", "ext_enabled2", "ext_supported2"},
//!               PortInfo values (numbers, as read: whether the extended ones mean anything
//!               is in the capability masks, which "rate" follows), "fdr10": bool,
//!       "remote": {"guid": GUID, "port": N} | null
//!     }]
//!   }],
//!   "links": [{"a": {"guid", "port"}, "b": {"guid", "port"}, "rate": string | null}],
//!   "failures": [{"path": [...], "attribute": HEX, "attribute_name": string,
//!                 "modifier": N, "node": GUID | null, "error": string}]
//! }
//! ```
//!
//! The output does not depend on the order answers came back in (only "stats", the run's own
//! counts and times, does). Nodes come in the order a walk finds them when every answer comes
//! back in the order it was asked (one SMP at a time, or ibsim): breadth-first from the local
//! node (first), each node's ports in increasing number, a Mellanox QDR port followed after
//! its ExtendedPortInfo; nodes that walk cannot reach come last. A node's "path" is the route
//! that walk first reaches it by. "links" are ordered by their first end's node (in that
//! order) and port, each link once with its lower end first; "failures" by path, attribute,
//! modifier, node and error.
//!
//! GUID and HEX are strings (`"0x0002c90300a1b2c3"`): 64-bit numbers do not survive JSON
//! readers that hold numbers as doubles.

use std::fmt::Write as _;
use std::io::Write;

use mad::wire::attr::node_info::NodeType;
use mad::wire::attr::port_info::PhysPortState;
use mad::wire::attr_id::sm;

use super::ibnetdiscover::{node_name, speed_word, width_name};
use super::topology::{Node, NodeIndex, Port, PortRef, Topology};

/// `s` as a JSON string, quotes included.
pub fn quote(s: &str) -> String {
    let mut o = String::with_capacity(s.len() + 2);
    o.push('"');
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            '\n' => o.push_str("\\n"),
            '\r' => o.push_str("\\r"),
            '\t' => o.push_str("\\t"),
            c if u32::from(c) < 0x20 => {
                let _ = write!(o, "\\u{:04x}", u32::from(c));
            }
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

fn guid(g: u64) -> String {
    format!("\"{g:#018x}\"")
}

fn kind_name(k: NodeType) -> &'static str {
    match k {
        NodeType::Switch => "switch",
        NodeType::Ca => "ca",
        NodeType::Router => "router",
        NodeType::Unknown(_) => "unknown",
    }
}

/// The name of an SM attribute the engine asks for.
pub fn attribute_name(id: u16) -> &'static str {
    match id {
        sm::NODE_INFO => "NodeInfo",
        sm::NODE_DESCRIPTION => "NodeDescription",
        sm::SWITCH_INFO => "SwitchInfo",
        sm::PORT_INFO => "PortInfo",
        sm::MLNX_EXTENDED_PORT_INFO => "MlnxExtendedPortInfo",
        _ => "?",
    }
}

fn path(p: &[u8]) -> String {
    let items: Vec<String> = p.iter().map(u8::to_string).collect();
    format!("[{}]", items.join(","))
}

/// The rate token of a port whose link is up. A switch's port 0 has none: it has no link,
/// whatever width and speed its PortInfo reports (ibnetdiscover prints none for it either).
fn port_rate(n: &Node, p: &Port) -> Option<String> {
    let i = p.info.as_ref()?;
    if p.num == 0 || i.port_physical_state != PhysPortState::LinkUp {
        return None;
    }
    let ext = p
        .active_rate(n.capability_masks_for(p.num))
        .map_or(0, |r| r.2);
    Some(format!(
        "{}{}",
        width_name(i.link_width_active),
        speed_word(i.link_speed_active, ext, p.fdr10_active)
    ))
}

fn quote_or_null(s: Option<String>) -> String {
    s.map_or_else(|| "null".into(), |s| quote(&s))
}

fn remote(t: &Topology, r: Option<PortRef>) -> String {
    match r {
        Some(r) => format!(
            "{{\"guid\": {}, \"port\": {}}}",
            guid(t.nodes[r.node].guid),
            r.port
        ),
        None => "null".into(),
    }
}

fn write_port(t: &Topology, n: &Node, p: &Port, out: &mut dyn Write) -> std::io::Result<()> {
    let Some(i) = p.info.as_ref() else {
        return Ok(());
    };
    write!(
        out,
        "{{\"port\": {}, \"guid\": {}, \"lid\": {}, \"lmc\": {}, \"state\": {}, \"phys_state\": {}, \
         \"rate\": {}, \"width\": {{\"active\": {}, \"enabled\": {}, \"supported\": {}}}, \
         \"speed\": {{\"active\": {}, \"enabled\": {}, \"supported\": {}, \"ext_active\": {}, \
         \"ext_enabled\": {}, \"ext_supported\": {}, \"ext_active2\": {}, \"ext_enabled2\": {}, \
         \"ext_supported2\": {}}}, \"fdr10\": {}, \"remote\": {}}}",
        p.num,
        guid(p.guid),
        n.lid_of(p.num),
        n.lmc_of(p.num),
        quote(&format!("{:?}", i.port_state)),
        quote(&format!("{:?}", i.port_physical_state)),
        quote_or_null(port_rate(n, p)),
        i.link_width_active,
        i.link_width_enabled,
        i.link_width_supported,
        i.link_speed_active,
        i.link_speed_enabled,
        i.link_speed_supported,
        i.link_speed_ext_active,
        i.link_speed_ext_enabled,
        i.link_speed_ext_supported,
        i.link_speed_ext_active2,
        i.link_speed_ext_enabled2,
        i.link_speed_ext_supported2,
        p.fdr10_active,
        remote(t, p.remote)
    )
}

fn write_node(t: &Topology, i: NodeIndex, out: &mut dyn Write) -> std::io::Result<()> {
    let n = &t.nodes[i];
    let lid_port = t.lid_port(i);
    write!(
        out,
        "    {{\"guid\": {}, \"type\": \"{}\", \"name\": {}, \"description\": {}, \"num_ports\": {}, \
         \"system_image_guid\": {}, \"vendor_id\": \"{:#08x}\", \"device_id\": \"{:#06x}\", \
         \"revision\": {}, \"lid\": {}, \"lmc\": {}, \"path\": {}",
        guid(n.guid),
        kind_name(n.kind),
        node_name(n),
        quote(&n.description_text()),
        n.num_ports,
        guid(n.sys_image_guid),
        n.vendor_id,
        n.device_id,
        n.revision,
        n.lid_of(lid_port),
        n.lmc_of(lid_port),
        path(&n.path)
    )?;
    if n.is_switch() {
        write!(
            out,
            ", \"enhanced_port0\": {}",
            n.switch.is_some_and(|s| s.enhanced_port0)
        )?;
    }
    write!(out, ",\n     \"ports\": [")?;
    let mut first = true;
    for p in &n.ports {
        if p.info.is_none() {
            continue;
        }
        if !first {
            write!(out, ",")?;
        }
        first = false;
        write!(out, "\n      ")?;
        write_port(t, n, p, out)?;
    }
    write!(out, "]}}")
}

/// Write `t` as JSON (the schema is in the module documentation).
pub fn write(t: &Topology, out: &mut dyn Write) -> std::io::Result<()> {
    let links = t.links();
    writeln!(out, "{{\n  \"schema\": \"hca-discover/1\",")?;
    match t.from {
        Some(f) => writeln!(
            out,
            "  \"from\": {{\"node\": {}, \"port\": {}}},",
            guid(t.nodes[f.node].guid),
            f.port
        )?,
        None => writeln!(out, "  \"from\": null,")?,
    }
    let s = &t.stats;
    writeln!(
        out,
        "  \"stats\": {{\"nodes\": {}, \"switches\": {}, \"cas\": {}, \"routers\": {}, \"links\": {}, \
         \"smps\": {}, \"responses\": {}, \"retries\": {}, \"timeouts\": {}, \"failures\": {}, \"max_in_flight\": {}, \
         \"max_hops\": {}, \"beyond_max_hops\": {}, \"wall_ms\": {:.3}, \"device_ms\": {:.3}}},",
        t.nodes.len(),
        t.count_of(NodeType::Switch),
        t.count_of(NodeType::Ca),
        t.count_of(NodeType::Router),
        links.len(),
        s.smps,
        s.responses,
        s.retries,
        s.timeouts,
        t.failures.len(),
        s.max_in_flight,
        s.max_hops,
        s.beyond_max_hops,
        s.wall.as_secs_f64() * 1e3,
        s.device.as_secs_f64() * 1e3
    )?;
    write!(out, "  \"nodes\": [")?;
    for i in 0..t.nodes.len() {
        writeln!(out, "{}", if i == 0 { "" } else { "," })?;
        write_node(t, i, out)?;
    }
    write!(out, "\n  ],\n  \"links\": [")?;
    for (i, (a, b)) in links.iter().enumerate() {
        let na = &t.nodes[a.node];
        let rate = na.port(a.port).and_then(|p| port_rate(na, p));
        write!(
            out,
            "{}\n    {{\"a\": {}, \"b\": {}, \"rate\": {}}}",
            if i == 0 { "" } else { "," },
            remote(t, Some(*a)),
            remote(t, Some(*b)),
            quote_or_null(rate)
        )?;
    }
    write!(out, "\n  ],\n  \"failures\": [")?;
    for (i, f) in t.failures.iter().enumerate() {
        write!(
            out,
            "{}\n    {{\"path\": {}, \"attribute\": \"{:#06x}\", \"attribute_name\": \"{}\", \
             \"modifier\": {}, \"node\": {}, \"error\": {}}}",
            if i == 0 { "" } else { "," },
            path(&f.path),
            f.attr_id,
            attribute_name(f.attr_id),
            f.attr_mod,
            f.node
                .map_or_else(|| "null".into(), |n| guid(t.nodes[n].guid)),
            quote(&f.kind.to_string())
        )?;
    }
    writeln!(out, "\n  ]\n}}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_are_escaped() {
        assert_eq!(quote("a\"b\\c\n\u{1}"), "\"a\\\"b\\\\c\\n\\u0001\"");
        assert_eq!(quote("plain"), "\"plain\"");
    }

    #[test]
    fn an_xdr_link_has_an_xdr_rate() {
        use crate::discover::ibnetdiscover::tests::node_with_ext_speeds;
        use mad::wire::attr::port_info::cap_mask::{HAS_CAP_MASK2, HAS_EXT_SPEEDS};
        // ibnetdiscover.c prints "XDR" for LinkSpeedExtActive2 1 (aggregated 32) when
        // CapabilityMask2 has IsExtSpeeds2Supported (0x0800).
        for kind in [NodeType::Switch, NodeType::Ca] {
            let n = node_with_ext_speeds(kind, HAS_EXT_SPEEDS | HAS_CAP_MASK2, 0x0800, 0, 1);
            assert_eq!(
                port_rate(&n, &n.ports[1]).as_deref(),
                Some("4xXDR"),
                "{kind:?}"
            );
        }
    }
}

//! Helpers shared by the fabric tests: test data paths, counts made without the parser, and
//! views of a fabric that do not depend on node order or names.

#![allow(dead_code)]

use std::collections::{BTreeSet, VecDeque};
use std::path::PathBuf;

use sim::fabric::{Fabric, NodeId};

/// `sim/tests/<rel>`.
pub fn data(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join(rel)
}

/// Counts made by looking at the text only: node headers by type, ports from the headers'
/// port counts, and port lines (each link is described by two of them).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct TextCounts {
    pub switches: usize,
    pub cas: usize,
    pub routers: usize,
    pub ports: usize,
    pub port_lines: usize,
}

pub fn count_text(text: &str) -> TextCounts {
    let mut c = TextCounts::default();
    for line in text.lines() {
        let mut words = line.split_whitespace();
        let first = words.next().unwrap_or("");
        let kind = match first {
            "Switch" => &mut c.switches,
            "Hca" | "Ca" => &mut c.cas,
            "Rt" => &mut c.routers,
            _ => {
                if line.trim_start().starts_with('[') {
                    c.port_lines += 1;
                }
                continue;
            }
        };
        *kind += 1;
        c.ports += words.next().unwrap().parse::<usize>().unwrap();
    }
    c
}

/// Every link as an ordered pair of (node GUID, port number) ends.
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

/// Nodes reachable from `from` over links.
pub fn reachable(f: &Fabric, from: NodeId) -> Vec<bool> {
    let mut seen = vec![false; f.node_count()];
    let mut queue = VecDeque::from([from]);
    seen[from.index()] = true;
    while let Some(n) = queue.pop_front() {
        for p in f.ports_of(n) {
            if let Some(q) = f.peer(p) {
                let m = f.port(q).node();
                if !seen[m.index()] {
                    seen[m.index()] = true;
                    queue.push_back(m);
                }
            }
        }
    }
    seen
}

/// Parse, write, parse again: the two parses must be equal, and writing is stable.
pub fn assert_round_trip(f: &Fabric) {
    let text = f.to_topology_string().expect("writable");
    let again = Fabric::parse_str("written", &text)
        .unwrap_or_else(|e| panic!("written topology does not parse: {e}\n{text}"));
    assert!(again == *f, "round trip changed the fabric:\n{text}");
    assert_eq!(again.to_topology_string().unwrap(), text);
}

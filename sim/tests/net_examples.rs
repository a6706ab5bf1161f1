//! ibsim's example topologies (Debian ibsim-utils `net-examples`, copied in
//! `tests/net-examples`): each parses, with the node, port and link counts of its text and of
//! a count made by hand, and the GUIDs ibsim itself assigns.

mod common;

use common::{TextCounts, assert_round_trip, count_text, data};
use sim::fabric::{Fabric, NodeType};

const EXAMPLES: [&str; 5] = [
    "net",
    "net.1",
    "net.2sw2path",
    "net.2sw2path4hca",
    "net.2sw2path4hca2port",
];

/// Counted by hand from the files: (switches, CAs, physical ports, links).
const HAND_COUNTS: [(&str, usize, usize, usize, usize); 5] = [
    ("net", 2, 2, 20, 4),
    ("net.1", 1, 2, 12, 2),
    ("net.2sw2path", 2, 2, 20, 4),
    ("net.2sw2path4hca", 2, 4, 24, 6),
    ("net.2sw2path4hca2port", 2, 2, 20, 6),
];

fn load(name: &str) -> (Fabric, String) {
    let path = data(&format!("net-examples/{name}"));
    let text = std::fs::read_to_string(&path).unwrap();
    let f = Fabric::parse_file(&path).unwrap_or_else(|e| panic!("{name}: {e}"));
    (f, text)
}

#[test]
fn every_example_parses_with_the_counts_of_its_text() {
    for name in EXAMPLES {
        let (f, text) = load(name);
        let c = count_text(&text);
        let got = TextCounts {
            switches: f.count_of(NodeType::Switch),
            cas: f.count_of(NodeType::Ca),
            routers: f.count_of(NodeType::Router),
            ports: f.port_count(),
            port_lines: 2 * f.link_count(),
        };
        assert_eq!(got, c, "{name}");
        assert_eq!(f.node_count(), c.switches + c.cas + c.routers, "{name}");
    }
}

#[test]
fn every_example_has_the_hand_counted_numbers() {
    for (name, switches, cas, ports, links) in HAND_COUNTS {
        let (f, _) = load(name);
        assert_eq!(f.count_of(NodeType::Switch), switches, "{name}");
        assert_eq!(f.count_of(NodeType::Ca), cas, "{name}");
        assert_eq!(f.port_count(), ports, "{name}");
        assert_eq!(f.link_count(), links, "{name}");
    }
}

#[test]
fn net_links_and_ibsim_default_guids() {
    let (f, _) = load("net");
    let id = |n| f.node_by_name(n).unwrap();
    let (s1, s2, h1, h2) = (id("Switch1"), id("Switch2"), id("Hca1"), id("Hca2"));
    let port = |n, p| f.port_id(n, p).unwrap();
    assert_eq!(f.peer(port(s1, 1)), Some(port(h1, 1)));
    assert_eq!(f.peer(port(s1, 2)), Some(port(h2, 2)));
    assert_eq!(f.peer(port(s1, 3)), Some(port(s2, 3)));
    assert_eq!(f.peer(port(s2, 4)), Some(port(s1, 4)));
    assert_eq!(f.peer(port(h1, 2)), None);
    assert_eq!(f.peer(port(h2, 1)), None);
    // GUIDs observed from ibsim 0.10 on this file (mad-stack.md §4.2).
    assert_eq!(f.node(s1).guid(), 0x200000);
    assert_eq!(f.node(s2).guid(), 0x200001);
    assert_eq!(f.node(h1).guid(), 0x100000);
    assert_eq!(f.port(port(h1, 1)).guid(), 0x100001);
    assert_eq!(f.node(h2).guid(), 0x100003);
    assert_eq!(f.port(port(h2, 2)).guid(), 0x100005);
    // The id is the description when the file gives none (ibsim).
    assert_eq!(f.description(h2), "Hca2");
    // The first node in the file comes first (ibsim's default attach point).
    assert_eq!(f.name(sim::fabric::NodeId(0)), "Switch1");
}

#[test]
fn every_example_round_trips() {
    for name in EXAMPLES {
        assert_round_trip(&load(name).0);
    }
}

#[test]
fn copies_match_the_installed_package() {
    let installed = std::path::Path::new("/usr/share/doc/ibsim-utils/net-examples");
    if !installed.is_dir() {
        eprintln!("ibsim-utils not installed: copies not compared");
        return;
    }
    for name in EXAMPLES.iter().copied().chain(["examples.README"]) {
        let ours = std::fs::read(data(&format!("net-examples/{name}"))).unwrap();
        let theirs = std::fs::read(installed.join(name)).unwrap();
        assert!(
            ours == theirs,
            "tests/net-examples/{name} differs from {}",
            installed.display()
        );
    }
    // Every example the package ships is covered here.
    let mut shipped: Vec<String> = std::fs::read_dir(installed)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n != "examples.README")
        .collect();
    shipped.sort();
    assert_eq!(shipped, EXAMPLES);
}

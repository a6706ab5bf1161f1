//! `ibnetdiscover`, unmodified, over this project's libibumad on simulated fabrics: what it
//! finds is the topology file (every node with its GUID, type and port count, every link),
//! and its output is the output of the same command under ibsim and umad2sim on the same
//! file, attached at the same CA, line for line but for the "generated on" date.
//!
//! Fabrics: ibsim's examples, a 648-host fat tree, a fat tree with a link taken out.
//!
//! Our topology parser gives both the simulator and the expected side their GUIDs, so on
//! `net.2sw2path4hca` the nodes (GUID, type, ports, description), the CA port GUIDs and the
//! links are also compared with literals written out from ibsim's recorded answers
//! (/work/shared/vectors/ibsim-net.2sw2path4hca.txt) and ibsim's GUID scheme
//! (reference/mad-stack.md §4.2), read from ibnetdiscover's text by this file's own reader.

use std::collections::BTreeSet;

use hca_tests::interop::{
    self, Case, Ibsim, Ours, WorkDir, links, nodes, normalize_ibnetdiscover, parse_ibnetdiscover,
};
use sim::fabric::Fabric;

fn discover(case: &Case, work: &WorkDir) {
    let Some(ibnetdiscover) = interop::need_program("ibnetdiscover", "infiniband-diags") else {
        return;
    };
    let ours = Ours::new(work, &case.topology, &case.node)
        .run(&ibnetdiscover, &[])
        .ok();
    // What it found is the file.
    let found = parse_ibnetdiscover(&ours.stdout);
    let file = Fabric::parse_file(&case.topology).expect("topology parses");
    assert_eq!(
        nodes(&found),
        nodes(&file),
        "{}: nodes (GUID, type, ports)",
        case.name
    );
    assert_eq!(links(&found), links(&file), "{}: links", case.name);
    let Some(sim) = Ibsim::start(work, &case.topology) else {
        return;
    };
    let theirs = sim.run(&ibnetdiscover, &case.node, &[]).ok();
    let (a, b) = (
        normalize_ibnetdiscover(&ours.stdout),
        normalize_ibnetdiscover(&theirs.stdout),
    );
    if a != b {
        let first = a
            .lines()
            .zip(b.lines())
            .position(|(x, y)| x != y)
            .unwrap_or(a.lines().count().min(b.lines().count()));
        panic!(
            "{}: ibnetdiscover differs from ibsim's at line {}:\nours:   {:?}\nibsim:  {:?}",
            case.name,
            first + 1,
            a.lines().nth(first),
            b.lines().nth(first)
        );
    }
    eprintln!(
        "{}: {} lines, ours {:?}, ibsim {:?}",
        case.name,
        a.lines().count(),
        ours.took,
        theirs.took
    );
}

#[test]
fn ibnetdiscover_on_the_ibsim_examples_is_the_file_and_ibsims_output() {
    let work = WorkDir::new("discover-examples");
    for case in interop::net_examples() {
        discover(&case, &work);
    }
}

#[test]
fn ibnetdiscover_on_a_648_host_fat_tree_is_the_file_and_ibsims_output() {
    let work = WorkDir::new("discover-ft648");
    discover(&interop::fat_tree_648(&work), &work);
}

#[test]
fn ibnetdiscover_does_not_see_a_dropped_link() {
    let work = WorkDir::new("discover-dropped");
    let case = interop::dropped_link(&work);
    let file = Fabric::parse_file(&case.topology).unwrap();
    // 4 x 3 host cables + 4 x 2 uplinks, less one.
    assert_eq!(file.link_count(), 19);
    discover(&case, &work);
}

/// A node as ibnetdiscover prints it: type word, node GUID, port count, description.
type NodeLine = (String, u64, u8, String);
/// A cable: (node GUID, port) at each end, lower end first.
type Link = ((u64, u8), (u64, u8));

/// The nodes of `net.2sw2path4hca` as ibsim numbers them: per-type counters from CA 0x100000
/// and switch 0x200000 in file order, a CA taking its node GUID then one per port.
/// Switch1, Switch2, Hca1 and Hca2 (GUIDs, types, port counts; the descriptions of Hca1 and
/// Switch1) are what ibsim answered in the recorded vectors; Hca3 and Hca4 follow the scheme
/// (interop_ibstat.rs sees Hca3's 0x100006 from ibstat).
fn ibsim_nodes() -> BTreeSet<NodeLine> {
    [
        ("Switch", 0x20_0000, 8, "Switch1"),
        ("Switch", 0x20_0001, 8, "Switch2"),
        ("Ca", 0x10_0000, 2, "Hca1"),
        ("Ca", 0x10_0003, 2, "Hca2"),
        ("Ca", 0x10_0006, 2, "Hca3"),
        ("Ca", 0x10_0009, 2, "Hca4"),
    ]
    .into_iter()
    .map(|(k, g, n, d)| (k.to_owned(), g, n, d.to_owned()))
    .collect()
}

/// The cabled CA ports' GUIDs (node GUID, port, port GUID): node GUID + port. Hca1's
/// 0x100001 and Hca2's 0x100004 are in the vectors.
const IBSIM_CA_PORTS: [(u64, u8, u64); 4] = [
    (0x10_0000, 1, 0x10_0001),
    (0x10_0003, 1, 0x10_0004),
    (0x10_0006, 1, 0x10_0007),
    (0x10_0009, 1, 0x10_000a),
];

/// The file's six cables in GUIDs. In the vectors: Hca1 port 1 reaches Switch1 at port 1,
/// Switch1 port 3 reaches Switch2 at port 3, Switch2 port 1 reaches Hca2 at port 1.
const IBSIM_LINKS: [Link; 6] = [
    ((0x10_0000, 1), (0x20_0000, 1)),
    ((0x10_0003, 1), (0x20_0001, 1)),
    ((0x10_0006, 1), (0x20_0000, 2)),
    ((0x10_0009, 1), (0x20_0001, 2)),
    ((0x20_0000, 3), (0x20_0001, 3)),
    ((0x20_0000, 5), (0x20_0001, 5)),
];

/// What ibnetdiscover's text says, read here without the topology parser: node header lines
/// (`Switch\t8 "S-0000000000200000"\t\t# "Switch1" ...`, `Ca\t2 "H-..."\t\t# "Hca1"`)
/// and port lines (`[1]\t"H-<guid>"[1](100001) ...` on a switch, `[1](100001) \t"S-<guid>"[1]
/// ...` on a CA).
#[derive(Default, Debug)]
struct Printed {
    nodes: BTreeSet<NodeLine>,
    links: BTreeSet<Link>,
    /// (node GUID, port, port GUID) of every CA port printed with its GUID.
    ca_ports: BTreeSet<(u64, u8, u64)>,
}

/// The GUID of a node id `"S-0000000000200000"` (quotes included).
fn guid_of_id(id: &str) -> u64 {
    let hex = id
        .trim_matches('"')
        .split_once('-')
        .unwrap_or_else(|| panic!("node id {id:?}"))
        .1;
    u64::from_str_radix(hex, 16).unwrap_or_else(|e| panic!("node id {id:?}: {e}"))
}

/// `[n]` at the start of `s`: n and the rest.
fn bracketed(s: &str) -> (u8, &str) {
    let (n, rest) = s
        .strip_prefix('[')
        .and_then(|r| r.split_once(']'))
        .unwrap_or_else(|| panic!("a [port] in {s:?}"));
    (
        n.parse().unwrap_or_else(|e| panic!("port {n:?}: {e}")),
        rest,
    )
}

/// `(hex)` at the start of `s`, if there: the value and the rest.
fn parenthesized(s: &str) -> (Option<u64>, &str) {
    match s.strip_prefix('(').and_then(|r| r.split_once(')')) {
        Some((h, rest)) => (
            Some(u64::from_str_radix(h, 16).unwrap_or_else(|e| panic!("guid {h:?}: {e}"))),
            rest,
        ),
        None => (None, s),
    }
}

fn read_ibnetdiscover(text: &str) -> Printed {
    let mut out = Printed::default();
    let mut node: Option<(String, u64)> = None;
    for line in text.lines() {
        let (body, comment) = line.split_once('#').unwrap_or((line, ""));
        let mut words = body.split_whitespace();
        match words.next() {
            Some(kind @ ("Switch" | "Ca" | "Rt")) => {
                let ports: u8 = words.next().expect("port count").parse().expect("ports");
                let guid = guid_of_id(words.next().expect("node id"));
                let desc = comment
                    .trim()
                    .strip_prefix('"')
                    .and_then(|c| c.split_once('"'))
                    .map_or_else(
                        || panic!("a description in {line:?}"),
                        |(d, _)| d.to_owned(),
                    );
                out.nodes.insert((kind.to_owned(), guid, ports, desc));
                node = Some((kind.to_owned(), guid));
            }
            Some(w) if w.starts_with('[') => {
                let (kind, guid) = node
                    .clone()
                    .unwrap_or_else(|| panic!("{line:?} before a node"));
                let (port, rest) = bracketed(body.trim_start());
                let (own_guid, rest) = parenthesized(rest);
                let rest = rest.trim_start();
                let (id, rest) = rest
                    .strip_prefix('"')
                    .and_then(|r| r.split_once('"'))
                    .unwrap_or_else(|| panic!("a remote node id in {line:?}"));
                let (peer_port, rest) = bracketed(rest);
                let (peer_guid, _) = parenthesized(rest);
                let peer = guid_of_id(id);
                if kind == "Ca" {
                    let g = own_guid.unwrap_or_else(|| panic!("a CA port GUID in {line:?}"));
                    out.ca_ports.insert((guid, port, g));
                }
                if let (Some(g), true) = (peer_guid, id.starts_with("H-")) {
                    out.ca_ports.insert((peer, peer_port, g));
                }
                let (a, b) = ((guid, port), (peer, peer_port));
                out.links.insert(if a <= b { (a, b) } else { (b, a) });
            }
            _ => {}
        }
    }
    out
}

#[test]
fn ibnetdiscover_on_net_2sw2path4hca_prints_ibsims_guids_names_and_cables() {
    let Some(ibnetdiscover) = interop::need_program("ibnetdiscover", "infiniband-diags") else {
        return;
    };
    let work = WorkDir::new("discover-literals");
    let case = interop::net_examples()
        .into_iter()
        .find(|c| c.name == "net.2sw2path4hca")
        .expect("the example");
    let ours = Ours::new(&work, &case.topology, &case.node)
        .run(&ibnetdiscover, &[])
        .ok();
    let printed = read_ibnetdiscover(&ours.stdout);
    assert_eq!(printed.nodes, ibsim_nodes(), "nodes\n{}", ours.stdout);
    assert_eq!(
        printed.ca_ports,
        IBSIM_CA_PORTS.into_iter().collect(),
        "CA port GUIDs\n{}",
        ours.stdout
    );
    assert_eq!(
        printed.links,
        IBSIM_LINKS.into_iter().collect(),
        "links\n{}",
        ours.stdout
    );
    eprintln!(
        "net.2sw2path4hca: {} nodes, {} CA port GUIDs, {} links as ibsim numbers them",
        printed.nodes.len(),
        printed.ca_ports.len(),
        printed.links.len()
    );
}

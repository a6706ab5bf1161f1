//! Generated fabrics: node, port and link numbers worked out by hand for each shape, every host
//! reachable, the written text parsing back to the same fabric, and spec errors.

mod common;

use common::{assert_round_trip, reachable};
use sim::fabric::builder::MAX_FABRIC_PORTS;
use sim::fabric::generator::{self, MAX_NODES};
use sim::fabric::{Fabric, FabricError, NodeType, SpecProblem};

/// Expected (hosts, switches, physical ports, links), worked out by hand per spec.
const CASES: [(&str, usize, usize, usize, usize); 8] = [
    // 36 leaves x 18 hosts, 18 spines: leaves have 18+18 = 36 ports, spines 36;
    // links = 648 host links + 36*18 uplinks.
    (
        "fat-tree:leaves=36,hosts=18,spines=18",
        648,
        54,
        36 * 36 + 18 * 36 + 648,
        648 + 648,
    ),
    // 18 leaves x 36 hosts, 18 spines: leaves 36+18 = 54 ports, spines 18.
    (
        "fat-tree:leaves=18,hosts=36,spines=18",
        648,
        36,
        18 * 54 + 18 * 18 + 648,
        648 + 324,
    ),
    // The 2,144-node benchmark fabric: leaves 32+32 = 64 ports, spines 64.
    (
        "fat-tree:leaves=64,hosts=32,spines=32",
        2048,
        96,
        64 * 64 + 32 * 64 + 2048,
        2048 + 2048,
    ),
    // Two cables per leaf-spine pair, switches padded to 36 ports.
    (
        "fat-tree:leaves=4,hosts=3,spines=2,links=2,leaf-ports=36,spine-ports=36",
        12,
        6,
        6 * 36 + 12,
        12 + 16,
    ),
    // 2 pods x 2 leaves x 2 hosts, 2 spines per pod, 4 cores (2 per spine):
    // leaves 2+2 ports, pod spines 2+2, cores 2 (one per pod).
    (
        "fat-tree3:pods=2,leaves=2,hosts=2,spines=2,cores=4",
        8,
        12,
        4 * 4 + 4 * 4 + 4 * 2 + 8,
        8 + 8 + 8,
    ),
    ("switch:hosts=5,ports=8", 5, 1, 8 + 5, 5),
    // 4 switches x 2 hosts, 2 cables between neighbours: 2 + 2*2 = 6 ports each, 3 pairs.
    ("line:switches=4,hosts=2,links=2", 8, 4, 4 * 6 + 8, 8 + 6),
    ("ring:switches=5,hosts=1", 5, 5, 5 * 3 + 5, 5 + 5),
];

#[test]
fn generated_fabrics_have_the_expected_numbers() {
    for (spec, hosts, switches, ports, links) in CASES {
        let f = generator::generate(spec).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(f.count_of(NodeType::Ca), hosts, "{spec}");
        assert_eq!(f.count_of(NodeType::Switch), switches, "{spec}");
        assert_eq!(f.node_count(), hosts + switches, "{spec}");
        assert_eq!(f.port_count(), ports, "{spec}");
        assert_eq!(f.link_count(), links, "{spec}");
    }
}

#[test]
fn the_benchmark_fabric_has_2144_nodes() {
    let f = generator::generate("fat-tree:leaves=64,hosts=32,spines=32").unwrap();
    assert_eq!(f.node_count(), 2144);
}

#[test]
fn every_node_is_reachable_from_the_first_host() {
    for (spec, ..) in CASES {
        let f = generator::generate(spec).unwrap();
        let first = f.node_by_name("host-1").unwrap();
        assert_eq!(first.0, 0, "{spec}: hosts come first");
        let seen = reachable(&f, first);
        for n in f.node_ids() {
            assert!(seen[n.index()], "{spec}: {} unreachable", f.name(n));
        }
    }
}

#[test]
fn fat_tree_wiring() {
    let f = generator::generate("fat-tree:leaves=3,hosts=4,spines=2,links=2").unwrap();
    let id = |n: &str| f.node_by_name(n).unwrap();
    let port = |n: &str, p| f.port_id(id(n), p).unwrap();
    // host-6 is the second host of leaf-2.
    assert_eq!(f.peer(port("host-6", 1)), Some(port("leaf-2", 2)));
    // leaf-2 (index 1): to spine-2 (index 1) on ports 4 + 1*2 + {1,2}; spine-2 sees leaf-2 on
    // ports 1*2 + {1,2}.
    assert_eq!(f.peer(port("leaf-2", 7)), Some(port("spine-2", 3)));
    assert_eq!(f.peer(port("leaf-2", 8)), Some(port("spine-2", 4)));
    // Every leaf reaches every spine.
    for l in 1..=3 {
        for s in 1..=2 {
            let leaf = id(&format!("leaf-{l}"));
            let n = f
                .ports_of(leaf)
                .filter(|&p| {
                    f.peer(p)
                        .is_some_and(|q| f.name(f.port(q).node()) == format!("spine-{s}"))
                })
                .count();
            assert_eq!(n, 2, "leaf-{l} to spine-{s}");
        }
    }
    assert_eq!(f.description(id("host-6")), "host-6 HCA-1");
}

#[test]
fn fat_tree3_wiring() {
    let f = generator::generate("fat-tree3:pods=3,leaves=2,hosts=2,spines=2,cores=4").unwrap();
    let id = |n: &str| f.node_by_name(n).unwrap();
    // Each core has one port per pod, each to a spine of that pod.
    for c in 1..=4 {
        let core = id(&format!("core-{c}"));
        assert_eq!(f.node(core).num_ports(), 3);
        for (pod, p) in f.ports_of(core).enumerate() {
            let q = f.peer(p).unwrap();
            assert!(
                f.name(f.port(q).node())
                    .starts_with(&format!("pod{}-spine", pod + 1))
            );
        }
    }
    // pod2-spine2 (group 2) reaches cores 3 and 4.
    let s = id("pod2-spine2");
    let ups: Vec<_> = (3..=4)
        .map(|p| {
            f.name(f.port(f.peer(f.port_id(s, p).unwrap()).unwrap()).node())
                .to_owned()
        })
        .collect();
    assert_eq!(ups, ["core-3", "core-4"]);
}

#[test]
fn link_option_sets_every_cabled_port() {
    let f = generator::generate("switch:hosts=2,ports=4,link=4xHDR").unwrap();
    for n in f.node_ids() {
        for p in f.ports_of(n) {
            let e = f.port(p).enabled;
            if f.peer(p).is_some() {
                assert_eq!((e.width, e.speed, e.speed_ext, e.fdr10), (3, 7, 7, true));
            } else {
                assert_eq!(
                    e,
                    sim::fabric::LinkRates::DEFAULT,
                    "spare port {}",
                    f.port_label(p)
                );
            }
        }
    }
}

#[test]
fn an_xdr_fabric_is_generated_written_and_read_back() {
    // `4xXDR` (beyond ibsim): every cabled port enables XDR, and trains to it; the written
    // file spells it as the token and reads back as the same fabric.
    let spec = "fat-tree:leaves=2,hosts=2,spines=1,link=4xXDR";
    let mut text = Vec::new();
    let f = generator::generate_text(spec, &mut text).unwrap();
    let text = String::from_utf8(text).unwrap();
    for n in f.node_ids() {
        for p in f.ports_of(n).filter(|&p| f.peer(p).is_some()) {
            let (e, a) = (f.port(p).enabled, f.port(p).state.active);
            assert_eq!((e.speed_ext, e.speed_ext2), (15, 1), "{}", f.port_label(p));
            assert_eq!((a.speed_ext, a.speed_ext2), (8, 1), "{}", f.port_label(p));
        }
    }
    assert!(text.contains(" 4xXDR\n"), "{text}");
    let parsed = Fabric::parse_str(spec, &text).unwrap();
    assert!(parsed == f);
    assert_round_trip(&f);
}

#[test]
fn generated_text_parses_back_to_the_same_fabric() {
    for (spec, ..) in CASES {
        let mut text = Vec::new();
        let f = generator::generate_text(spec, &mut text).unwrap();
        let parsed = Fabric::parse_str(spec, std::str::from_utf8(&text).unwrap()).unwrap();
        assert!(parsed == f, "{spec}");
        assert_round_trip(&f);
    }
}

fn spec_problem(spec: &str) -> SpecProblem {
    match generator::generate(spec) {
        Err(FabricError::Spec { spec: s, problem }) => {
            assert_eq!(s, spec);
            problem
        }
        Err(e) => panic!("{spec}: {e}"),
        Ok(_) => panic!("{spec}: generated"),
    }
}

#[test]
fn bad_specs() {
    assert_eq!(
        spec_problem("torus:x=1"),
        SpecProblem::UnknownShape("torus".into())
    );
    assert!(matches!(
        spec_problem("fat-tree:leaves=2,hosts=2"),
        SpecProblem::MissingKey { key: "spines", .. }
    ));
    assert!(matches!(
        spec_problem("fat-tree:leaves=2,hosts=2,spines=1,pods=2"),
        SpecProblem::UnknownKey { .. }
    ));
    assert!(matches!(
        spec_problem("fat-tree:leaves=2,leaves=3"),
        SpecProblem::DuplicateKey(_)
    ));
    assert!(matches!(
        spec_problem("fat-tree:leaves=two,hosts=2,spines=1"),
        SpecProblem::BadValue { .. }
    ));
    assert!(matches!(
        spec_problem("fat-tree:leaves=0,hosts=2,spines=1"),
        SpecProblem::BadValue { .. }
    ));
    assert!(matches!(
        spec_problem("switch:hosts=2,link=4xWHAT"),
        SpecProblem::BadValue { .. }
    ));
    assert!(matches!(
        spec_problem("switch:hosts=300"),
        SpecProblem::TooManyPorts { ports: 300, .. }
    ));
    // Too few ports: the message names the key given and says what the ports are for.
    let e = spec_problem("switch:hosts=3,ports=2");
    assert!(matches!(e, SpecProblem::BadValue { .. }), "{e:?}");
    let m = e.to_string();
    assert!(
        m.contains("bad value `2` for `ports`")
            && m.contains("the switch needs at least 3 ports: one for each of the 3 hosts"),
        "{m}"
    );
    let m = spec_problem("fat-tree:leaves=2,hosts=3,spines=2,links=2,leaf-ports=6").to_string();
    assert!(
        m.contains("for `leaf-ports`")
            && m.contains(
                "a leaf needs at least 7 ports: 3 for its hosts and 2 to each of the 2 spines"
            ),
        "{m}"
    );
    let m = spec_problem("fat-tree:leaves=3,hosts=1,spines=1,links=2,spine-ports=5").to_string();
    assert!(
        m.contains("for `spine-ports`")
            && m.contains("a spine needs at least 6 ports: 2 to each of the 3 leaves"),
        "{m}"
    );
    assert!(matches!(
        spec_problem("fat-tree:leaves=255,hosts=1,spines=1"),
        SpecProblem::TooManyPorts { .. }
    ));
    assert!(matches!(
        spec_problem("fat-tree3:pods=2,leaves=2,hosts=2,spines=3,cores=4"),
        SpecProblem::BadValue { .. }
    ));
    assert!(matches!(
        spec_problem("ring:switches=2,hosts=1"),
        SpecProblem::BadValue { .. }
    ));
    assert!(matches!(
        spec_problem("fat-tree3:pods=250,leaves=100,hosts=100,spines=1,cores=1"),
        SpecProblem::TooLarge {
            limit: MAX_NODES,
            ..
        }
    ));
}

#[test]
fn shapes_of_too_many_ports_are_refused_before_building() {
    // 50,000 switches of 254 ports: few nodes, but 12.7 million ports.
    for spec in [
        "line:switches=50000,hosts=0,links=127",
        "ring:switches=999999,hosts=0,links=127",
        // 505,251 nodes, 1.5 million ports.
        "fat-tree3:pods=250,leaves=20,hosts=100,spines=1,cores=1",
    ] {
        let p = spec_problem(spec);
        assert!(
            matches!(
                p,
                SpecProblem::TooLarge {
                    what: "ports",
                    count: Some(_),
                    limit: MAX_FABRIC_PORTS
                }
            ),
            "{spec}: {p:?}"
        );
    }
}

#[test]
fn node_counts_beyond_64_bits_are_too_large_not_a_panic() {
    for spec in [
        "fat-tree3:pods=4294967295,leaves=4294967295,hosts=1,spines=1,cores=1",
        "fat-tree3:pods=4294967295,leaves=4294967295,hosts=4294967295,spines=1,cores=1",
    ] {
        let p = spec_problem(spec);
        assert_eq!(
            p,
            SpecProblem::TooLarge {
                what: "nodes",
                count: None,
                limit: MAX_NODES
            },
            "{spec}"
        );
        assert!(p.to_string().contains("more than 2^64"), "{p}");
    }
    // The largest counts the other shapes take fit 64 bits, and are refused as too many.
    for spec in [
        "fat-tree:leaves=4294967295,hosts=4294967295,spines=4294967295",
        "line:switches=4294967295,hosts=4294967295",
        "ring:switches=4294967295,hosts=4294967295",
        "switch:hosts=4294967295",
    ] {
        assert!(
            matches!(
                spec_problem(spec),
                SpecProblem::TooLarge {
                    what: "nodes",
                    count: Some(_),
                    ..
                }
            ),
            "{spec}"
        );
    }
}

#[test]
fn a_fat_tree_of_over_100000_nodes() {
    let f = generator::generate("fat-tree3:pods=96,leaves=32,hosts=32,spines=16,cores=64").unwrap();
    // 96 pods x (32 leaves x 32 hosts + 32 leaves + 16 spines) + 64 cores.
    assert_eq!(f.node_count(), 96 * (32 * 32 + 32 + 16) + 64);
    assert_eq!(f.count_of(NodeType::Ca), 98_304);
    // Host links, leaf-spine links (32 x 16 per pod), spine-core links (16 x 4 per pod).
    assert_eq!(f.link_count(), 98_304 + 96 * 32 * 16 + 96 * 16 * 4);
    let seen = reachable(&f, f.node_by_name("host-1").unwrap());
    assert!(seen.iter().all(|&s| s));
    // Its text reads back as the same fabric.
    let text = f.to_topology_string().unwrap();
    assert!(Fabric::parse_str("100k", &text).unwrap() == f);
}

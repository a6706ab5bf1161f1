//! Discovery through the full stack (the simulated ConnectX on a simulated fabric, the mlx5
//! driver, the MAD layer, the engine of `hca discover`) reproduces the topology file exactly:
//! every ibsim example and the 648-host fat tree. Each run ends with the HCA's leases,
//! mappings and sends back at their baseline (`DiscoverRig::finish`).

use std::time::{Duration, SystemTime};

use hca_tests::discover_rig::{
    DiscoverRig, assert_reproduces, assert_text_reproduces, example, first_ca,
};
use hca_tools::discover::{Config, Topology, ibnetdiscover};
use sim::fabric::{Fabric, generator};

fn text_of(t: &Topology) -> String {
    let mut text = Vec::new();
    ibnetdiscover::write(t, SystemTime::now(), &mut text).expect("write");
    String::from_utf8(text).expect("UTF-8")
}

/// Discover `fabric` from its first CA with `cfg`; compare the graph and the text with
/// `expected` (the same file parsed separately).
fn check(fabric: Fabric, expected: &Fabric, cfg: &Config) -> Topology {
    let node = first_ca(expected);
    let rig = DiscoverRig::new(fabric, &node);
    let t = rig.discover(cfg);
    assert_reproduces(&t, expected);
    assert_text_reproduces(&text_of(&t), expected);
    rig.finish();
    t
}

fn discover_example(name: &str) {
    let expected = example(name);
    let t = check(example(name), &expected, &Config::default());
    // The local node is the CA the HCA sits on, reached with no hop.
    let from = t.from.expect("a start");
    assert_eq!(from.node, 0);
    assert!(t.nodes[0].path.is_empty());
    assert_eq!(
        t.nodes[0].description_text(),
        expected.description(expected.node_by_name(&first_ca(&expected)).unwrap())
    );
}

#[test]
fn net() {
    discover_example("net");
}

#[test]
fn net_1() {
    discover_example("net.1");
}

#[test]
fn net_2sw2path() {
    discover_example("net.2sw2path");
}

#[test]
fn net_2sw2path4hca() {
    discover_example("net.2sw2path4hca");
}

#[test]
fn net_2sw2path4hca2port() {
    // Both of Hca1's ports are cabled to Switch1: the second is the same node reached again.
    discover_example("net.2sw2path4hca2port");
}

#[test]
fn every_example_file_is_covered() {
    let dir = hca_tests::mad_fabric::example("");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .expect("net-examples")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("net"))
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "net",
            "net.1",
            "net.2sw2path",
            "net.2sw2path4hca",
            "net.2sw2path4hca2port"
        ],
        "a new example needs its test above"
    );
}

#[test]
fn fat_tree_of_648_hosts() {
    let spec = "fat-tree:leaves=36,hosts=18,spines=18";
    let mut file = Vec::new();
    generator::generate_text(spec, &mut file).expect("generate");
    let file = String::from_utf8(file).expect("UTF-8");
    let expected = Fabric::parse_str("ft648", &file).expect("parse");
    assert_eq!(expected.node_count(), 648 + 36 + 18);
    let t = check(
        Fabric::parse_str("ft648", &file).expect("parse"),
        &expected,
        &Config::default(),
    );
    // Leaf, spine, leaf, host: four hops at most from host-1.
    assert_eq!(t.stats.max_hops, 4);
    assert!(t.stats.max_in_flight > 1, "SMPs were in flight together");
    assert_eq!(t.stats.responses, t.stats.smps);
}

#[test]
fn a_generated_xdr_fabric_is_found_and_its_text_reads_back() {
    // ibnetdiscover prints XDR for LinkSpeedExtActive2 1 (libibnetdisc aggregates it to 32);
    // the simulator's 4xXDR ports report it, and the text the walk writes reads back with the
    // same active rates (XDR included) on every port.
    let spec = "fat-tree:leaves=2,hosts=2,spines=2,link=4xXDR";
    let expected = generator::generate(spec).expect("generate");
    let t = check(
        generator::generate(spec).expect("generate"),
        &expected,
        &Config::default(),
    );
    let text = text_of(&t);
    let rated: Vec<&str> = text.lines().filter(|l| l.starts_with('[')).collect();
    assert_eq!(rated.len(), 2 * expected.link_count(), "{text}");
    for l in rated {
        assert!(l.ends_with(" 4xXDR"), "{l}");
    }
}

#[test]
fn one_smp_at_a_time_finds_the_same_fabric() {
    let expected = example("net.2sw2path4hca");
    let t = check(
        example("net.2sw2path4hca"),
        &expected,
        &Config {
            window: 1,
            ..Config::default()
        },
    );
    assert_eq!(t.stats.max_in_flight, 1);
}

#[test]
fn mellanox_qdr_ports_get_their_extended_port_info_asked() {
    // libibnetdisc asks Mellanox devices' QDR ports for ExtendedPortInfo (FDR10 shows only
    // there); the simulated SMA answers it, as ibsim and the devices do.
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("data/mellanox-qdr.topo");
    let expected = Fabric::parse_file(&path).unwrap();
    let t = check(
        Fabric::parse_file(&path).unwrap(),
        &expected,
        &Config::default(),
    );
    assert_eq!(t.stats.ext_port_info_unsupported, 0);
    let linked = |t: &Topology| {
        t.nodes
            .iter()
            .flat_map(|n| n.ports.iter())
            .filter(|p| p.remote.is_some())
            .map(|p| p.fdr10_active)
            .collect::<Vec<_>>()
    };
    // Two switch ports and the two HCA ports, all linked at QDR: none FDR10.
    assert_eq!(linked(&t), [false; 4]);
    let t2 = {
        let rig = DiscoverRig::new(Fabric::parse_file(&path).unwrap(), &first_ca(&expected));
        let t = rig.discover(&Config {
            mlnx_ext_port_info: false,
            ..Config::default()
        });
        rig.finish();
        t
    };
    assert_eq!(t.stats.smps, t2.stats.smps + 4);

    // The same links at FDR10: ExtendedPortInfo is where it shows.
    let text = std::fs::read_to_string(&path)
        .unwrap()
        .replace("4xQDR", "4xFDR10");
    let fdr10 = Fabric::parse_str("mellanox-fdr10", &text).unwrap();
    let t = check(
        Fabric::parse_str("mellanox-fdr10", &text).unwrap(),
        &fdr10,
        &Config::default(),
    );
    assert_eq!(linked(&t), [true; 4]);
}

/// What `hca discover` writes of `t` in each format, but the JSON's `stats` line (the run's
/// own counts and times). The ibnetdiscover text is dated at the epoch.
fn outputs(t: &Topology) -> [String; 3] {
    let mut json = Vec::new();
    hca_tools::discover::json::write(t, &mut json).expect("json");
    let json = String::from_utf8(json)
        .expect("UTF-8")
        .lines()
        .filter(|l| !l.trim_start().starts_with("\"stats\""))
        .collect::<Vec<_>>()
        .join("\n");
    let mut text = Vec::new();
    ibnetdiscover::write(t, SystemTime::UNIX_EPOCH, &mut text).expect("text");
    let mut dot = Vec::new();
    hca_tools::discover::dot::write(t, &mut dot).expect("dot");
    [
        json,
        String::from_utf8(text).expect("UTF-8"),
        String::from_utf8(dot).expect("UTF-8"),
    ]
}

#[test]
fn the_outputs_do_not_depend_on_the_order_answers_come_back_in() {
    // A fat tree where every leaf and spine is reached by more than one route: with several
    // SMPs in flight, which answer comes back first decides which route reaches a node first,
    // and so the order nodes are found in. Here the answers are reordered by slowing one of
    // host-1's leaf's uplinks (leaf-1 port 3 to spine-1, port 4 to spine-2) and by sending one
    // SMP at a time; every run must write the same JSON, text and graph.
    let spec = "fat-tree:leaves=4,hosts=2,spines=2";
    let run = |window: usize, slow_port: Option<u8>| {
        let fabric = generator::generate(spec).expect("generate");
        let rig = DiscoverRig::new(fabric, "host-1");
        if let Some(p) = slow_port {
            let port = rig.net.port("leaf-1", p).expect("an uplink");
            rig.net
                .set_link_fault(port, sim::net::Fault::delay(Duration::from_millis(5)));
        }
        let t = rig.discover(&Config {
            window,
            ..Config::default()
        });
        assert!(t.failures.is_empty(), "{:?}", t.failures);
        assert_reproduces(&t, &generator::generate(spec).expect("generate"));
        rig.finish();
        outputs(&t)
    };
    let reference = run(32, None);
    for (window, slow) in [(1, None), (32, Some(3)), (32, Some(4)), (4, Some(3))] {
        let got = run(window, slow);
        for (i, what) in ["JSON", "ibnetdiscover text", "dot"].iter().enumerate() {
            if let Some((line, (a, b))) = got[i]
                .lines()
                .zip(reference[i].lines())
                .enumerate()
                .find(|(_, (a, b))| a != b)
            {
                panic!(
                    "{what} with window {window}, slow uplink {slow:?}, line {}:\n got  {a}\n want {b}",
                    line + 1
                );
            }
            assert_eq!(got[i], reference[i], "{what}: same lines, different length");
        }
    }
}

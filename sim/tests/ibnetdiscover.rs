//! Real ibnetdiscover output (captured from Debian's ibnetdiscover on ibsim, see
//! `tests/ibnetdiscover/README.md`) parses into the fabric it describes, and the writer
//! reproduces it.

mod common;

use common::{assert_round_trip, count_text, data, links_by_guid};
use sim::fabric::{Fabric, LinkState, NodeType, PhysState, generator};

fn load(name: &str) -> Fabric {
    let path = data(&format!("ibnetdiscover/{name}"));
    Fabric::parse_file(&path).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn text(name: &str) -> String {
    std::fs::read_to_string(data(&format!("ibnetdiscover/{name}"))).unwrap()
}

#[test]
fn counts_match_the_text() {
    for name in [
        "plain.ibnetdiscover",
        "hdr.ibnetdiscover",
        "hdr-full.ibnetdiscover",
        "hdr-grouping.ibnetdiscover",
        "gen-fat-tree.ibnetdiscover",
        "ibsim-input-plain.net",
        "ibsim-input-hdr.net",
    ] {
        let f = load(name);
        let c = count_text(&text(name));
        assert_eq!(f.count_of(NodeType::Switch), c.switches, "{name}");
        assert_eq!(f.count_of(NodeType::Ca), c.cas, "{name}");
        assert_eq!(f.port_count(), c.ports, "{name}");
        assert_eq!(2 * f.link_count(), c.port_lines, "{name}");
    }
}

#[test]
fn hdr_capture_has_the_identity_lids_and_rates_it_shows() {
    let f = load("hdr.ibnetdiscover");
    assert_eq!(
        (f.count_of(NodeType::Switch), f.count_of(NodeType::Ca)),
        (2, 3)
    );
    assert_eq!((f.port_count(), f.link_count()), (76, 6));

    let leaf = f.node_by_name("S-248a070300f81a00").unwrap();
    let spine = f.node_by_name("S-248a070300f81b00").unwrap();
    let n3 = f.node_by_name("H-0c42a10300a3e3e0").unwrap();
    assert_eq!(f.node(leaf).guid(), 0x248a070300f81a00);
    assert_eq!(f.node(leaf).sys_image_guid(), 0x248a070300f81a00);
    assert_eq!(
        (f.node(leaf).vendor_id(), f.node(leaf).device_id()),
        (0x2c9, 0xcb20)
    );
    assert_eq!(f.description(leaf), "MF0;leaf01:MQM8700/U1");
    assert!(f.switch(leaf).unwrap().info.enhanced_port0);
    assert_eq!(f.node(n3).device_id(), 0x1017);
    assert_eq!(f.description(n3), "node03 mlx5_0");

    let p = |n, i| f.port_id(n, i).unwrap();
    // LIDs: switch port 0 from the header, CA ports from their lines.
    assert_eq!(f.port(p(leaf, 0)).lid(), 7);
    assert_eq!(f.port(p(spine, 0)).lid(), 8);
    assert_eq!((f.port(p(n3, 1)).lid(), f.port(p(n3, 2)).lid()), (10, 11));
    assert_eq!(f.lid_owner(11), Some(p(n3, 2)));
    assert_eq!(f.lid_owner(8), Some(p(spine, 0)));
    // CA port GUIDs from the parentheses.
    assert_eq!(f.port(p(n3, 2)).guid(), 0xc42a10300a3e3e2);
    assert_eq!(f.port_by_guid(0xc42a10300a3e3e1), Some(p(n3, 1)));
    // Links.
    assert_eq!(f.peer(p(spine, 10)), Some(p(n3, 1)));
    assert_eq!(f.peer(p(leaf, 35)), Some(p(spine, 1)));
    // Rates: ibsim's mapping of 4xHDR / 4xEDR, and what the links train to.
    let hdr = f.port(p(leaf, 3)).enabled;
    assert_eq!(
        (hdr.width, hdr.speed, hdr.speed_ext, hdr.fdr10),
        (3, 7, 7, true)
    );
    let edr = f.port(p(spine, 10)).enabled;
    assert_eq!(
        (edr.width, edr.speed, edr.speed_ext, edr.fdr10),
        (3, 7, 3, true)
    );
    let a = f.port(p(leaf, 3)).state.active;
    assert_eq!((a.width, a.speed, a.speed_ext), (2, 4, 4)); // 4x, QDR, HDR
    let a = f.port(p(n3, 1)).state.active;
    assert_eq!((a.width, a.speed, a.speed_ext), (2, 4, 2)); // 4x, QDR, EDR
    // Initial states as ibsim sets them.
    assert_eq!(f.port(p(n3, 1)).state.link_state, LinkState::Init);
    assert_eq!(f.port(p(n3, 1)).state.phys_state, PhysState::LinkUp);
    assert_eq!(f.port(p(leaf, 4)).state.link_state, LinkState::Down);
    assert_eq!(f.port(p(leaf, 0)).state.link_state, LinkState::Active);
}

#[test]
fn default_full_and_grouping_outputs_describe_the_same_fabric() {
    let plain = load("hdr.ibnetdiscover");
    assert!(load("hdr-full.ibnetdiscover") == plain);
    assert!(load("hdr-grouping.ibnetdiscover") == plain);
}

#[test]
fn ibsim_input_and_its_discovery_agree() {
    // GUIDs ibsim assigned to the GUID-less input, as ibnetdiscover reported them.
    let input = load("ibsim-input-plain.net");
    let found = load("plain.ibnetdiscover");
    for (name, guid) in [
        ("Switch1", 0x200000),
        ("Switch2", 0x200001),
        ("Hca1", 0x100000),
        ("Hca2", 0x100003),
        ("Hca3", 0x100006),
    ] {
        let n = input.node_by_name(name).unwrap();
        assert_eq!(input.node(n).guid(), guid, "{name}");
        let m = found.node_by_guid(guid).unwrap();
        assert_eq!(found.description(m), name);
    }
    assert_eq!(links_by_guid(&input), links_by_guid(&found));

    let input = load("ibsim-input-hdr.net");
    let found = load("hdr.ibnetdiscover");
    assert_eq!(links_by_guid(&input), links_by_guid(&found));
    for n in found.node_ids() {
        let m = input.node_by_guid(found.node(n).guid()).unwrap();
        assert_eq!(input.description(m), found.description(n));
        assert_eq!(input.node(m).device_id(), found.node(n).device_id());
    }
}

#[test]
fn ibsim_reads_our_generated_files_as_we_do() {
    let ours =
        generator::generate("fat-tree:leaves=4,hosts=3,spines=2,links=2,link=4xEDR").unwrap();
    let theirs = load("gen-fat-tree.ibnetdiscover");
    assert_eq!(links_by_guid(&ours), links_by_guid(&theirs));
    for n in ours.node_ids() {
        let m = theirs.node_by_guid(ours.node(n).guid()).unwrap();
        assert_eq!(theirs.description(m), ours.description(n));
        for (p, q) in ours.ports_of(n).zip(theirs.ports_of(m)) {
            assert_eq!(ours.port(p).guid(), theirs.port(q).guid());
            assert_eq!(ours.port(p).state.active, theirs.port(q).state.active);
        }
    }
}

#[test]
fn writing_a_capture_reproduces_it() {
    for name in ["hdr.ibnetdiscover", "plain.ibnetdiscover"] {
        let written = load(name).to_topology_string().unwrap();
        // ibnetdiscover's leading comment block (date, initiating node) is its own.
        let body = |t: &str| {
            t.lines()
                .skip_while(|l| l.starts_with('#'))
                .collect::<Vec<_>>()
                .join("\n")
        };
        assert_eq!(body(&written), body(&text(name)), "{name}");
    }
}

#[test]
fn captures_round_trip() {
    for name in [
        "plain.ibnetdiscover",
        "hdr.ibnetdiscover",
        "hdr-full.ibnetdiscover",
        "gen-fat-tree.ibnetdiscover",
        "ibsim-input-hdr.net",
    ] {
        assert_round_trip(&load(name));
    }
}

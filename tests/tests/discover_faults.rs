//! Discovery through the full stack when the fabric misbehaves: a lost SMP is retried by the
//! MAD layer and the walk still finds everything; a link that loses every SMP ends in a
//! timeout in the MAD layer that the discovery reports, with the rest of the fabric found; a
//! link that is down hides the subtree behind it (not followed, nothing times out), and the
//! subtree is back once the link is. Nodes that lie (a CA answering through
//! [`hca_tests::impostor`]): one that claims to be a switch answering by its port 0 is listed
//! as a failure, not linked; one that claims the local HCA's NodeGUID does not change the
//! local PortGUID the text's header gives.

use std::collections::{BTreeSet, VecDeque};

use driver::verbs::WcStatus;
use hca_tests::discover_rig::{DiscoverRig, discovered_links, example, links_by_guid};
use hca_tests::impostor::Impostor;
use hca_tools::discover::{Config, FailureKind, ibnetdiscover};
use mad::wire::attr::node_info::NodeType;
use mad::wire::attr::port_info::PhysPortState;
use mad::wire::attr_id::sm;
use sim::fabric::{Fabric, NodeId, PortId, generator};
use sim::net::{DropReason, Fault};

/// GUIDs of the nodes `f` reaches from `from` without crossing the link at `cut`.
fn reachable_without(f: &Fabric, from: NodeId, cut: Option<PortId>) -> BTreeSet<u64> {
    let cut_peer = cut.and_then(|p| f.peer(p));
    let mut seen = BTreeSet::from([f.node(from).guid()]);
    let mut queue = VecDeque::from([from]);
    while let Some(n) = queue.pop_front() {
        for p in f.ports_of(n) {
            if Some(p) == cut || Some(p) == cut_peer {
                continue;
            }
            if let Some(q) = f.peer(p) {
                let m = f.port(q).node();
                if seen.insert(f.node(m).guid()) {
                    queue.push_back(m);
                }
            }
        }
    }
    seen
}

/// Links of `f` whose both ends are in `nodes`, other than the one at `cut`.
fn links_among(
    f: &Fabric,
    nodes: &BTreeSet<u64>,
    cut: Option<PortId>,
) -> BTreeSet<((u64, u8), (u64, u8))> {
    let cut_ends: BTreeSet<(u64, u8)> = cut
        .into_iter()
        .chain(cut.and_then(|p| f.peer(p)))
        .map(|p| (f.node(f.port(p).node()).guid(), f.port(p).num()))
        .collect();
    links_by_guid(f)
        .into_iter()
        .filter(|(a, b)| nodes.contains(&a.0) && nodes.contains(&b.0))
        .filter(|(a, b)| !cut_ends.contains(a) && !cut_ends.contains(b))
        .collect()
}

fn guids(t: &hca_tools::discover::Topology) -> BTreeSet<u64> {
    t.nodes.iter().map(|n| n.guid).collect()
}

#[test]
fn a_lost_smp_is_retried_and_the_walk_finds_everything() {
    let expected = example("net.2sw2path4hca");
    let rig = DiscoverRig::new(example("net.2sw2path4hca"), "Hca1");
    // The first packet to leave Switch1 towards Hca3 is the NodeInfo that finds Hca3.
    let towards_hca3 = rig.net.port("Switch1", 2).unwrap();
    rig.net.drop_nth_leaving(towards_hca3, 1);
    let before = rig.hca.port.counters();
    let t = rig.discover(&Config::default());
    let after = rig.hca.port.counters();

    assert_eq!(
        rig.net.drops().get(DropReason::Fault),
        1,
        "one SMP was lost"
    );
    assert_eq!(
        after.retries - before.retries,
        1,
        "the MAD layer retried it"
    );
    assert_eq!(
        after.timeouts - before.timeouts,
        0,
        "and the retry was answered"
    );
    assert!(t.failures.is_empty(), "{:?}", t.failures);
    assert_eq!((t.stats.retries, t.stats.timeouts), (1, 0));
    hca_tests::discover_rig::assert_reproduces(&t, &expected);
    rig.finish();
}

#[test]
fn a_link_that_loses_everything_ends_in_a_timeout_reported_by_the_walk() {
    let expected = example("net.2sw2path4hca");
    let rig = DiscoverRig::new(example("net.2sw2path4hca"), "Hca1");
    let towards_hca3 = rig.net.port("Switch1", 2).unwrap();
    rig.net.set_link_fault(towards_hca3, Fault::drop(1.0));
    let before = rig.hca.port.counters();
    let cfg = Config::default();
    let t = rig.discover(&cfg);
    let after = rig.hca.port.counters();

    // The MAD layer: the NodeInfo for Hca3 went out 1 + 3 times, then timed out.
    assert_eq!(rig.net.drops().get(DropReason::Fault), 4);
    assert_eq!(after.retries - before.retries, u64::from(cfg.retries));
    assert_eq!(after.timeouts - before.timeouts, 1);
    assert_eq!(
        after.completed.get(WcStatus::RespTimeoutErr)
            - before.completed.get(WcStatus::RespTimeoutErr),
        1
    );

    // The discovery: that one query failed, everything else was found.
    assert_eq!((t.stats.retries, t.stats.timeouts), (3, 1));
    assert_eq!(t.failures.len(), 1, "{:?}", t.failures);
    let f = &t.failures[0];
    assert_eq!(
        (f.attr_id, f.attr_mod, f.path.as_slice()),
        (sm::NODE_INFO, 0, &[1u8, 2][..])
    );
    assert_eq!(f.kind, FailureKind::Timeout { retries: 3 });

    let hca3 = expected.node(expected.node_by_name("Hca3").unwrap()).guid();
    let mut want = guids_of(&expected);
    want.remove(&hca3);
    assert_eq!(guids(&t), want);
    let cut = expected.port_id(expected.node_by_name("Switch1").unwrap(), 2);
    assert_eq!(discovered_links(&t), links_among(&expected, &want, cut));
    // The link itself is up: the walk tried it, and nothing answered.
    let sw1 = t
        .node_by_guid(
            expected
                .node(expected.node_by_name("Switch1").unwrap())
                .guid(),
        )
        .unwrap();
    let p2 = t.nodes[sw1].port(2).unwrap();
    assert_eq!(p2.phys_state(), Some(PhysPortState::LinkUp));
    assert_eq!(p2.remote, None);
    rig.finish();
}

fn guids_of(f: &Fabric) -> BTreeSet<u64> {
    f.node_ids().map(|n| f.node(n).guid()).collect()
}

#[test]
fn a_link_down_removes_the_subtree_behind_it() {
    let spec = "fat-tree:leaves=3,hosts=2,spines=1";
    let expected = generator::generate(spec).unwrap();
    let rig = DiscoverRig::new(generator::generate(spec).unwrap(), "host-1");
    // leaf-3's only uplink, to spine-1: behind it are leaf-3 and its two hosts.
    let leaf3 = expected.node_by_name("leaf-3").unwrap();
    let uplink = expected.port_id(leaf3, 3).unwrap();
    assert_eq!(
        expected
            .node(expected.port(expected.peer(uplink).unwrap()).node())
            .guid(),
        expected
            .node(expected.node_by_name("spine-1").unwrap())
            .guid()
    );
    rig.net
        .set_link_down(rig.net.port("leaf-3", 3).unwrap(), true);
    let before = rig.hca.port.counters();
    let t = rig.discover(&Config::default());
    let after = rig.hca.port.counters();

    let host1 = expected.node_by_name("host-1").unwrap();
    let want = reachable_without(&expected, host1, Some(uplink));
    assert_eq!(
        want.len(),
        expected.node_count() - 3,
        "the subtree is leaf-3 and 2 hosts"
    );
    assert_eq!(guids(&t), want);
    assert_eq!(
        discovered_links(&t),
        links_among(&expected, &want, Some(uplink))
    );
    // A port that is down is not followed: nothing was sent that way, nothing timed out.
    assert!(t.failures.is_empty(), "{:?}", t.failures);
    assert_eq!(after.timeouts - before.timeouts, 0);
    assert_eq!(after.retries - before.retries, 0);
    let spine = t
        .node_by_guid(
            expected
                .node(expected.node_by_name("spine-1").unwrap())
                .guid(),
        )
        .unwrap();
    let down = t.nodes[spine].port(3).unwrap();
    assert_ne!(down.phys_state(), Some(PhysPortState::LinkUp));
    assert_eq!(down.remote, None);

    // The cable back: the subtree is found again.
    rig.net
        .set_link_down(rig.net.port("leaf-3", 3).unwrap(), false);
    let t = rig.discover(&Config::default());
    hca_tests::discover_rig::assert_reproduces(&t, &expected);
    rig.finish();
}

/// The GUID of node `name` of `f`, and the GUID of its port `port` (a CA's).
fn guid_and_port_guid(f: &Fabric, name: &str, port: u8) -> (u64, u64) {
    let n = f.node_by_name(name).unwrap();
    (f.node(n).guid(), f.port(f.port_id(n, port).unwrap()).guid())
}

#[test]
fn a_switch_that_answers_a_link_by_its_port_0_is_a_failure_not_a_link() {
    let expected = example("net.2sw2path4hca");
    let rig = DiscoverRig::new(example("net.2sw2path4hca"), "Hca1");
    // Hca3, behind Switch1 port 2, says it is a switch and that the SMP came in by port 0.
    let liar = Impostor::attach(&rig.net, "Hca3", 1, |ni| {
        ni.node_type = NodeType::Switch;
        ni.local_port_num = 0;
    });
    let t = rig.discover(&Config::default());
    assert!(liar.node_infos() >= 1, "the impostor answered");

    let (hca3, _) = guid_and_port_guid(&expected, "Hca3", 1);
    assert_eq!(t.failures.len(), 1, "{:#?}", t.failures);
    let f = &t.failures[0];
    assert_eq!(
        (f.attr_id, f.attr_mod, f.path.as_slice()),
        (sm::NODE_INFO, 0, &[1u8, 2][..])
    );
    assert!(
        matches!(&f.kind, FailureKind::BadResponse(why) if why.contains("LocalPortNum 0")),
        "{:?}",
        f.kind
    );
    // Not a node, not a link: Switch1 port 2 leads nowhere, everything else is there.
    let mut want = guids_of(&expected);
    want.remove(&hca3);
    assert_eq!(guids(&t), want);
    let cut = expected.port_id(expected.node_by_name("Switch1").unwrap(), 2);
    assert_eq!(discovered_links(&t), links_among(&expected, &want, cut));
    let (sw1, _) = guid_and_port_guid(&expected, "Switch1", 1);
    let sw1 = t.node_by_guid(sw1).unwrap();
    assert_eq!(t.nodes[sw1].port(2).unwrap().remote, None);
    drop(liar);
    rig.finish();
}

#[test]
fn another_node_claiming_the_local_guid_leaves_the_headers_port_guid_alone() {
    let expected = example("net.2sw2path4hca");
    let rig = DiscoverRig::new(example("net.2sw2path4hca"), "Hca1");
    let (hca1, hca1_port) = guid_and_port_guid(&expected, "Hca1", 1);
    let (_, hca3_port) = guid_and_port_guid(&expected, "Hca3", 1);
    assert_ne!(hca1_port, hca3_port);
    // Hca3 answers with Hca1's NodeGUID (and its own PortGUID, by its port 1 as Hca1's).
    let liar = Impostor::attach(&rig.net, "Hca3", 1, move |ni| ni.node_guid = hca1);
    let t = rig.discover(&Config::default());
    assert!(liar.node_infos() >= 1, "the impostor answered");

    let from = t.from.expect("the local node");
    assert_eq!(t.nodes[from.node].guid, hca1);
    // The later NodeInfo took over the local node's port 1, as libibnetdisc's
    // `recv_node_info` sets `port->guid` from every NodeInfo...
    assert_eq!(t.nodes[from.node].port(1).unwrap().guid, hca3_port);
    // ...but the header gives the first NodeInfo's PortGUID, as `dump_topology` does.
    assert_eq!(t.from_port_guid, hca1_port);
    let mut text = Vec::new();
    ibnetdiscover::write(&t, std::time::SystemTime::now(), &mut text).unwrap();
    let text = String::from_utf8(text).unwrap();
    let header = format!("# Initiated from node {hca1:016x} port {hca1_port:016x}");
    assert_eq!(text.lines().nth(3), Some(header.as_str()), "{text}");
    drop(liar);
    rig.finish();
}

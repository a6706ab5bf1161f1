//! The discovery engine's limits and reports, through the full stack: the maximum hop count
//! stops the walk where it says, the window bounds the SMPs in flight, progress reports follow
//! the walk, bad settings are refused before anything is sent, and an HCA alone on its
//! simulated node finds itself and reports the port that leads nowhere.

use std::collections::{BTreeSet, HashMap, VecDeque};

use hca_tests::discover_rig::{DiscoverRig, assert_reproduces, example};
use hca_tests::mad_rig::MadRig;
use hca_tools::EngineError;
use hca_tools::discover::{self, Config, FailureKind, Progress};
use sim::fabric::{Fabric, generator};

/// Hop distance of every node of `f` from `from`, by GUID.
fn hops_from(f: &Fabric, from: &str) -> HashMap<u64, usize> {
    let start = f.node_by_name(from).unwrap();
    let mut dist = HashMap::from([(f.node(start).guid(), 0)]);
    let mut queue = VecDeque::from([start]);
    while let Some(n) = queue.pop_front() {
        let d = dist[&f.node(n).guid()];
        for p in f.ports_of(n) {
            if let Some(q) = f.peer(p) {
                let m = f.port(q).node();
                dist.entry(f.node(m).guid()).or_insert_with(|| {
                    queue.push_back(m);
                    d + 1
                });
            }
        }
    }
    dist
}

#[test]
fn the_walk_stops_at_the_maximum_hop_count() {
    // sw-1 - sw-2 - sw-3 - sw-4 in a line, one host each; we are host-1.
    let spec = "line:switches=4,hosts=1";
    let expected = generator::generate(spec).unwrap();
    let dist = hops_from(&expected, "host-1");
    for max in [1u8, 2, 3] {
        let rig = DiscoverRig::new(generator::generate(spec).unwrap(), "host-1");
        let t = rig.discover(&Config {
            max_hops: max,
            ..Config::default()
        });
        let want: BTreeSet<u64> = dist
            .iter()
            .filter(|&(_, &d)| d <= usize::from(max))
            .map(|(&g, _)| g)
            .collect();
        let got: BTreeSet<u64> = t.nodes.iter().map(|n| n.guid).collect();
        assert_eq!(got, want, "max hops {max}");
        assert_eq!(t.stats.max_hops, max);
        assert!(t.failures.is_empty(), "{:?}", t.failures);
        // The last switch reached has links up it did not follow: its host (if not reached)
        // and the next switch.
        assert!(t.stats.beyond_max_hops > 0, "max hops {max}");
        assert!(t.nodes.iter().all(|n| n.hops <= max));
        rig.finish();
    }
    // With room enough, everything.
    let rig = DiscoverRig::new(generator::generate(spec).unwrap(), "host-1");
    let t = rig.discover(&Config::default());
    assert_reproduces(&t, &expected);
    assert_eq!(t.stats.beyond_max_hops, 0);
    assert_eq!(usize::from(t.stats.max_hops), *dist.values().max().unwrap());
    rig.finish();
}

#[test]
fn the_window_bounds_the_smps_in_flight_and_progress_follows_the_walk() {
    for window in [1usize, 3, 32] {
        let rig = DiscoverRig::new(
            generator::generate("fat-tree:leaves=6,hosts=4,spines=3").unwrap(),
            "host-1",
        );
        let mut seen: Vec<Progress> = Vec::new();
        let t = discover::discover(
            &rig.hca.port,
            &Config {
                window,
                ..Config::default()
            },
            &mut |p| seen.push(*p),
        )
        .unwrap();
        assert!(t.stats.max_in_flight <= window, "window {window}");
        assert!(
            seen.iter().all(|p| p.in_flight <= window),
            "window {window}"
        );
        if window > 1 {
            assert!(t.stats.max_in_flight > 1, "window {window} was used");
        }
        assert!(
            seen.windows(2)
                .all(|w| w[0].nodes <= w[1].nodes && w[0].smps <= w[1].smps)
        );
        let last = seen.last().expect("progress was reported");
        assert_eq!(
            (last.nodes, last.in_flight, last.queued, last.smps),
            (t.nodes.len(), 0, 0, t.stats.smps)
        );
        assert_eq!(last.switches, 9);
        rig.finish();
    }
}

#[test]
fn bad_settings_are_refused_before_anything_is_sent() {
    let rig = DiscoverRig::new(example("net"), "Hca1");
    let before = rig.hca.port.counters();
    for cfg in [
        Config {
            window: 0,
            ..Config::default()
        },
        Config {
            max_hops: 64,
            ..Config::default()
        },
    ] {
        let r = discover::discover(&rig.hca.port, &cfg, &mut |_| {});
        assert!(matches!(r, Err(EngineError::BadSetting { .. })), "{cfg:?}");
    }
    assert_eq!(rig.hca.port.counters().sends, before.sends);
    assert_eq!(rig.hca.port.census().agents, 0, "no agent left registered");
    rig.finish();
}

#[test]
fn an_hca_alone_finds_itself_and_reports_the_port_that_leads_nowhere() {
    // The standalone simulated HCA: its port is up (it loops back to itself) but cabled to
    // nothing, so the SMP sent out of it is lost and times out.
    let rig = MadRig::new();
    let t = discover::discover(&rig.port, &Config::default(), &mut |_| {}).unwrap();
    assert_eq!(t.nodes.len(), 1);
    assert_eq!(t.nodes[0].guid, rig.sim.model.mlx5_config().node_guid);
    assert!(t.links().is_empty());
    assert_eq!(t.failures.len(), 1, "{:?}", t.failures);
    assert_eq!(t.failures[0].path, vec![1]);
    assert!(matches!(t.failures[0].kind, FailureKind::Timeout { .. }));
    rig.assert_clean();
    rig.finish();
}

/// Three switches in a triangle, SwA and SwC cabled twice, one host on each; we are Hca1.
/// Every node is within 3 hops of Hca1 (Hca3: SwA, SwC, Hca3), every link within the routes
/// of 3 hops.
const TRIANGLE: &str = "\
Switch\t4 \"SwA\"
[1]\t\"Hca1\"[1]
[2]\t\"SwB\"[2]
[3]\t\"SwC\"[3]
[4]\t\"SwC\"[4]

Switch\t4 \"SwB\"
[1]\t\"Hca2\"[1]
[2]\t\"SwA\"[2]
[3]\t\"SwC\"[2]

Switch\t4 \"SwC\"
[1]\t\"Hca3\"[2]
[2]\t\"SwB\"[3]
[3]\t\"SwA\"[3]
[4]\t\"SwA\"[4]

Hca\t2 \"Hca1\"
[1]\t\"SwA\"[1]

Hca\t1 \"Hca2\"
[1]\t\"SwB\"[1]

Hca\t2 \"Hca3\"
[2]\t\"SwC\"[1]
";

/// A chain where the hop limit stops a node (SwD, 4 hops from Hca1 through SwB) beyond the
/// one a slow link makes answer late by its shorter route (SwC, 2 hops by SwA port 3): every
/// node is within 4 hops of Hca1, every link within the routes of 4 hops.
const CHAIN: &str = "\
Switch\t3 \"SwA\"
[1]\t\"Hca1\"[1]
[2]\t\"SwB\"[1]
[3]\t\"SwC\"[3]

Switch\t3 \"SwB\"
[1]\t\"SwA\"[2]
[2]\t\"SwC\"[1]
[3]\t\"Hca2\"[1]

Switch\t3 \"SwC\"
[1]\t\"SwB\"[2]
[2]\t\"SwD\"[1]
[3]\t\"SwA\"[3]

Switch\t2 \"SwD\"
[1]\t\"SwC\"[2]
[2]\t\"Hca3\"[1]

Hca\t1 \"Hca1\"
[1]\t\"SwA\"[1]

Hca\t1 \"Hca2\"
[1]\t\"SwB\"[3]

Hca\t1 \"Hca3\"
[1]\t\"SwD\"[2]
";

#[test]
fn the_hop_limit_finds_the_same_nodes_whatever_route_answers_first() {
    // With SwA's links to SwC slow, SwC answers first by a longer route through SwB, where
    // the hop limit stops its links (TRIANGLE) or those of the switch behind it (CHAIN); its
    // shorter route answers later, and the walk must then go on by it (to Hca3) as a walk
    // whose answers come back in order does.
    let text = |t: &discover::Topology| {
        let mut out = Vec::new();
        discover::ibnetdiscover::write(t, std::time::SystemTime::UNIX_EPOCH, &mut out).unwrap();
        String::from_utf8(out).unwrap()
    };
    for (name, topo, max_hops, slow) in [
        ("triangle", TRIANGLE, 3, &[3u8, 4][..]),
        ("chain", CHAIN, 4, &[3][..]),
    ] {
        let cfg = |window| Config {
            window,
            max_hops,
            ..Config::default()
        };
        let fabric = || Fabric::parse_str(name, topo).unwrap();
        let rig = DiscoverRig::new(fabric(), "Hca1");
        let in_order = rig.discover(&cfg(1));
        rig.finish();
        assert_reproduces(&in_order, &fabric());

        let rig = DiscoverRig::new(fabric(), "Hca1");
        for &p in slow {
            let port = rig.net.port("SwA", p).unwrap();
            rig.net.set_link_fault(
                port,
                sim::net::Fault::delay(std::time::Duration::from_millis(50)),
            );
        }
        let late = rig.discover(&cfg(32));
        rig.finish();
        assert!(late.failures.is_empty(), "{name}: {:?}", late.failures);
        assert_reproduces(&late, &fabric());
        assert_eq!(text(&late), text(&in_order), "{name}");
        assert_eq!(
            late.stats.beyond_max_hops, in_order.stats.beyond_max_hops,
            "{name}"
        );
    }
}

//! `opensm -o`, unmodified, over this project's libibumad on simulated fabrics: it reaches
//! SUBNET UP without an error in its log; afterwards (the fabric's state saved by the run and
//! loaded by the checker) every cabled port is ACTIVE, every CA port and switch has a LID, no
//! LID is used twice, and every CA reaches every other CA through the forwarding tables OpenSM
//! wrote; the check walked every cabled port, LID and CA pair the topology file has. The same
//! OpenSM under ibsim and umad2sim on the same file, attached at the same CA, reaches SUBNET
//! UP too, assigns as many LIDs, and leaves a fabric that `ibnetdiscover` and `iblinkinfo`
//! print exactly as they print ours. Each world and each fabric has an OpenSM cache of its
//! own, empty before its OpenSM runs (no `guid2lid` carried over). On the fabric with a link
//! taken out, iblinkinfo shows both ends of it Down/Polling with nothing beyond, in both
//! worlds.

use std::path::Path;

use hca_tests::interop::{self, Case, Ibsim, Ours, Run, Walked, WorkDir, normalize_ibnetdiscover};

fn subnet_up(log: &Path, who: &str) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_else(|e| panic!("{who}: {e}"));
    assert!(text.contains("SUBNET UP"), "{who}: no SUBNET UP in\n{text}");
    text
}

/// iblinkinfo's line for `port` of switch `name` (under its `Switch: GUID NAME:` header).
fn iblinkinfo_port<'a>(text: &'a str, name: &str, port: u8) -> &'a str {
    let mut in_switch = false;
    for l in text.lines() {
        if !l.starts_with(char::is_whitespace) {
            in_switch = l.starts_with("Switch:") && l.trim_end().ends_with(&format!(" {name}:"));
            continue;
        }
        let mut w = l.split_whitespace();
        let (_lid, at) = (w.next(), w.next());
        if in_switch && at.is_some_and(|a| a.starts_with(&format!("{port}["))) {
            return l;
        }
    }
    panic!("no line for {name} port {port} in iblinkinfo's output:\n{text}");
}

/// The ports `case` uncabled are Down/Polling with nothing at the other end, as iblinkinfo
/// prints an uncabled port under ibsim: `==(   Down/ Polling)==>   [  ] "" ( )`.
fn dropped_ports_down(case: &Case, who: &str, iblinkinfo: &str) {
    for (node, port) in &case.dropped {
        let l = iblinkinfo_port(iblinkinfo, node, *port);
        let l = l.trim_end();
        assert!(
            l.contains("Down/ Polling)==>") && l.ends_with("[  ] \"\" ( )"),
            "{}: {who}: {node} port {port} uncabled, Down/Polling: {l:?}",
            case.name
        );
    }
}

fn same(what: &str, ours: &Run, theirs: &Run) {
    let (a, b) = (
        normalize_ibnetdiscover(&ours.stdout),
        normalize_ibnetdiscover(&theirs.stdout),
    );
    if a != b {
        let i = a.lines().zip(b.lines()).position(|(x, y)| x != y);
        panic!(
            "{what} differs from ibsim's at line {:?}:\nours:  {:?}\nibsim: {:?}\n--- ours\n{a}--- ibsim\n{b}",
            i.map(|i| i + 1),
            i.and_then(|i| a.lines().nth(i)),
            i.and_then(|i| b.lines().nth(i)),
        );
    }
}

fn bring_up(case: &Case, work: &WorkDir) {
    let (Some(opensm), Some(ibnetdiscover), Some(iblinkinfo)) = (
        interop::need_program("opensm", "opensm"),
        interop::need_program("ibnetdiscover", "infiniband-diags"),
        interop::need_program("iblinkinfo", "infiniband-diags"),
    ) else {
        return;
    };
    let state = work.join(&format!("{}.state", case.name));
    // A new OpenSM cache for each case and each world (Ours::new, Ibsim::start), checked
    // empty by opensm_once: no guid2lid of another fabric or of the other world.
    let ours = Ours::new(work, &case.topology, &case.node).with_state(&state);
    let log = work.join(&format!("{}-ours.log", case.name));
    let run = ours.opensm_once(&opensm, &log);
    let text = subnet_up(&log, &format!("{}: ours", case.name));
    let errors: Vec<&str> = text.lines().filter(|l| l.contains(" ERR ")).collect();
    assert!(
        errors.is_empty(),
        "{}: OpenSM logged errors: {errors:#?}",
        case.name
    );
    let (_, report) = ours.check();
    assert!(report.ok(), "{}: {report}", case.name);
    // What the check walked is the whole fabric: a check walking nothing cannot pass.
    let walked = Walked::of(&case.topology);
    assert_eq!(
        Walked::from_report(&report),
        walked,
        "{}: the check walked every cabled port, LID and CA pair: {report}",
        case.name
    );
    assert!(walked.pairs > 0, "{}: CA pairs to walk", case.name);
    eprintln!("{}: opensm -o took {:?}; {report}", case.name, run.took);
    let Some(sim) = Ibsim::start(work, &case.topology) else {
        return;
    };
    assert_ne!(sim.cache(), ours.cache(), "each world its own OpenSM cache");
    let log = work.join(&format!("{}-ibsim.log", case.name));
    let theirs = sim.opensm_once(&opensm, &case.node, &log);
    subnet_up(&log, &format!("{}: ibsim", case.name));
    eprintln!(
        "{}: under ibsim opensm -o took {:?}",
        case.name, theirs.took
    );
    let a = ours.run(&ibnetdiscover, &[]).ok();
    let b = sim.run(&ibnetdiscover, &case.node, &[]).ok();
    same(
        &format!("{}: ibnetdiscover after OpenSM", case.name),
        &a,
        &b,
    );
    assert!(report.lids > 0);
    assert_eq!(
        report.lids,
        interop::ibnetdiscover_lids(&b.stdout).len(),
        "{}: LIDs assigned",
        case.name
    );
    let a = ours.run(&iblinkinfo, &[]).ok();
    let b = sim.run(&iblinkinfo, &case.node, &[]).ok();
    dropped_ports_down(case, "ours", &a.stdout);
    dropped_ports_down(case, "ibsim", &b.stdout);
    same(&format!("{}: iblinkinfo after OpenSM", case.name), &a, &b);
    // iblinkinfo prints both ends of every cable.
    let file = sim::fabric::Fabric::parse_file(&case.topology).expect("topology parses");
    let active = b.stdout.lines().filter(|l| l.contains("Active/")).count();
    assert_eq!(
        active,
        2 * file.link_count(),
        "{}: every link ACTIVE under ibsim too:\n{}",
        case.name,
        b.stdout
    );
}

#[test]
fn opensm_brings_up_the_ibsim_examples_as_under_ibsim() {
    let work = WorkDir::new("opensm-examples");
    for case in interop::net_examples() {
        bring_up(&case, &work);
    }
}

#[test]
fn opensm_brings_up_a_648_host_fat_tree_as_under_ibsim() {
    let work = WorkDir::new("opensm-ft648");
    bring_up(&interop::fat_tree_648(&work), &work);
}

#[test]
fn opensm_brings_up_a_fabric_with_a_dropped_link_as_under_ibsim() {
    let work = WorkDir::new("opensm-dropped");
    let case = interop::dropped_link(&work);
    // leaf-1's port 4 and the spine port it was cabled to.
    assert_eq!(case.dropped.len(), 2, "{:?}", case.dropped);
    assert_eq!(case.dropped[0], ("leaf-1".to_owned(), 4));
    assert!(
        case.dropped[1].0.starts_with("spine-"),
        "{:?}",
        case.dropped
    );
    // 12 hosts of one port, 6 switches, 19 links: written out, not only computed.
    let walked = Walked::of(&case.topology);
    assert_eq!(
        walked,
        Walked {
            cabled_ports: 2 * 19 + 6,
            lids: 6 + 12,
            ca_ports: 12,
            pairs: 12 * 11,
        }
    );
    bring_up(&case, &work);
}

//! `opensm -o`, unmodified, over this project's libibumad on simulated fabrics: it reaches
//! SUBNET UP without an error in its log; afterwards (the fabric's state saved by the run and
//! loaded by the checker) every cabled port is ACTIVE, every CA port and switch has a LID, no
//! LID is used twice, and every CA reaches every other CA through the forwarding tables OpenSM
//! wrote. The same OpenSM under ibsim and umad2sim on the same file, attached at the same CA,
//! reaches SUBNET UP too, assigns as many LIDs, and leaves a fabric that `ibnetdiscover` and
//! `iblinkinfo` print exactly as they print ours.

use std::path::Path;

use hca_tests::interop::{self, Case, Ibsim, Ours, Run, WorkDir, normalize_ibnetdiscover};

fn opensm_args(log: &Path) -> Vec<String> {
    vec![
        "-o".into(),
        "-s".into(),
        "0".into(),
        "-f".into(),
        log.display().to_string(),
    ]
}

fn subnet_up(log: &Path, who: &str) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_else(|e| panic!("{who}: {e}"));
    assert!(text.contains("SUBNET UP"), "{who}: no SUBNET UP in\n{text}");
    text
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
    let ours = Ours::new(work, &case.topology, &case.node).with_state(&state);
    let log = work.join(&format!("{}-ours.log", case.name));
    let args = opensm_args(&log);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let run = ours.run(&opensm, &args).ok();
    let text = subnet_up(&log, &format!("{}: ours", case.name));
    let errors: Vec<&str> = text.lines().filter(|l| l.contains(" ERR ")).collect();
    assert!(
        errors.is_empty(),
        "{}: OpenSM logged errors: {errors:#?}",
        case.name
    );
    let (_, report) = ours.check();
    assert!(report.ok(), "{}: {report}", case.name);
    eprintln!("{}: opensm -o took {:?}; {report}", case.name, run.took);
    let Some(sim) = Ibsim::start(work, &case.topology) else {
        return;
    };
    let log = work.join(&format!("{}-ibsim.log", case.name));
    let args = opensm_args(&log);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let theirs = sim.run(&opensm, &case.node, &args).ok();
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
    bring_up(&interop::dropped_link(&work), &work);
}

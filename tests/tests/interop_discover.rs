//! `ibnetdiscover`, unmodified, over this project's libibumad on simulated fabrics: what it
//! finds is the topology file (every node with its GUID, type and port count, every link),
//! and its output is the output of the same command under ibsim and umad2sim on the same
//! file, attached at the same CA, line for line but for the "generated on" date.
//!
//! Fabrics: ibsim's examples, a 648-host fat tree, a fat tree with a link taken out.

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

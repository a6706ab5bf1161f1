//! `hca discover`'s default output against the real thing: Debian's `ibnetdiscover`
//! (infiniband-diags) run under `ibsim` + `umad2sim` on the same topology file, from the same
//! node. Every line but the date must be the same, in the same order.
//!
//! Needs the Debian packages ibsim-utils (ibsim, libumad2sim.so) and infiniband-diags.
//! Without them the test fails under CI (`CI` set) saying what to install, and is skipped with
//! that message elsewhere. ibsim and ibnetdiscover run through the interop harness
//! ([`interop::Ibsim`]): full paths (`/usr/sbin` included), ibsim's output logged in the
//! work directory, a bounded wait for it to listen, ibnetdiscover under `timeout -k`.

use std::path::Path;
use std::time::SystemTime;

use hca_tests::discover_rig::DiscoverRig;
use hca_tests::interop::{self, Ibsim, WorkDir};
use hca_tools::discover::{Config, ibnetdiscover};
use sim::fabric::{Fabric, generator};

/// ibnetdiscover (its full path), or `None` when the test is skipped: fails under CI, and
/// skips elsewhere, naming the Debian package of what is missing ([`interop::need`]; ibsim
/// and umad2sim are looked for by [`Ibsim::start_with`]).
fn ibnetdiscover_program() -> Option<std::path::PathBuf> {
    interop::need_program("ibnetdiscover", "infiniband-diags")
}

/// ibnetdiscover from `node` under ibsim (bounded: ibsim must listen within 30 s, the run
/// is under `timeout -k`), ibsim's tables sized for `nodes`; `None` when skipped.
fn ibsim_ibnetdiscover(
    work: &WorkDir,
    topology: &Path,
    nodes: usize,
    node: &str,
) -> Option<String> {
    let program = ibnetdiscover_program()?;
    let n = (nodes * 2).max(2048).to_string();
    let p = (nodes * 80).max(20000).to_string();
    let sim = Ibsim::start_with(work, topology, &["-N", &n, "-S", &n, "-P", &p])?;
    Some(sim.run(&program, node, &[]).ok().stdout)
}

/// The lines of an ibnetdiscover output without its date line.
fn undated(text: &str) -> Vec<&str> {
    text.lines()
        .filter(|l| !l.starts_with("# Topology file: generated on "))
        .collect()
}

/// Compare ibnetdiscover on ibsim with our discovery on the simulator, both from `node` of
/// the topology file at `path`.
fn compare(work: &WorkDir, path: &Path, node: &str) {
    let fabric = Fabric::parse_file(path).expect("topology");
    let nodes = fabric.node_count();
    let Some(real) = ibsim_ibnetdiscover(work, path, nodes, node) else {
        return;
    };
    let rig = DiscoverRig::new(fabric, node);
    let t = rig.discover(&Config::default());
    let mut ours = Vec::new();
    ibnetdiscover::write(&t, SystemTime::now(), &mut ours).unwrap();
    rig.finish();
    let ours = String::from_utf8(ours).unwrap();
    let (a, b) = (undated(&real), undated(&ours));
    for (i, (x, y)) in a.iter().zip(&b).enumerate() {
        assert_eq!(x, y, "{}: line {} differs", path.display(), i + 1);
    }
    assert_eq!(a.len(), b.len(), "{}: line count", path.display());
    assert!(a.len() > 10, "a real output");
}

#[test]
fn the_ibsim_examples_read_as_ibnetdiscover_writes_them() {
    let work = WorkDir::new("discover-examples");
    for name in [
        "net",
        "net.1",
        "net.2sw2path",
        "net.2sw2path4hca",
        "net.2sw2path4hca2port",
    ] {
        compare(&work, &hca_tests::mad_fabric::example(name), "Hca1");
    }
}

#[test]
fn mellanox_qdr_ports_read_as_ibnetdiscover_writes_them() {
    let work = WorkDir::new("discover-qdr");
    // Both tools ask the QDR ports of these Mellanox devices for ExtendedPortInfo.
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/mellanox-qdr.topo");
    compare(&work, &path, "H-0c42a10300a3e1c8");
}

#[test]
fn a_generated_fat_tree_reads_as_ibnetdiscover_writes_it() {
    // Rates other than ibsim's default, and hosts reached through two levels of switches.
    // The file is in the work directory, removed with it (kept, and named, on a failure).
    let work = WorkDir::new("discover-ft");
    let path = work.join("ft.topo");
    let mut file = std::fs::File::create(&path).unwrap();
    generator::generate_text("fat-tree:leaves=8,hosts=6,spines=4,link=4xEDR", &mut file).unwrap();
    drop(file);
    compare(&work, &path, "host-1");
}

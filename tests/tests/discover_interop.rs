//! `hca discover`'s default output against the real thing: Debian's `ibnetdiscover`
//! (infiniband-diags) run under `ibsim` + `umad2sim` on the same topology file, from the same
//! node. Every line but the date must be the same, in the same order.
//!
//! Needs the Debian packages ibsim-utils (ibsim, libumad2sim.so) and infiniband-diags.
//! Without them the test fails under CI (`CI` set) saying what to install, and is skipped with
//! that message elsewhere.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::SystemTime;

use hca_tests::discover_rig::DiscoverRig;
use hca_tools::discover::{Config, ibnetdiscover};
use sim::fabric::{Fabric, generator};

const UMAD2SIM: &str = "/usr/lib/x86_64-linux-gnu/umad2sim/libumad2sim.so";

/// What is missing to run the real tools, if anything.
fn missing() -> Option<String> {
    let mut gone = Vec::new();
    for (what, package) in [
        ("ibsim", "ibsim-utils"),
        ("ibnetdiscover", "infiniband-diags"),
    ] {
        let found = std::env::var_os("PATH")
            .is_some_and(|paths| std::env::split_paths(&paths).any(|d| d.join(what).is_file()))
            || Path::new("/usr/sbin").join(what).is_file();
        if !found {
            gone.push(format!("{what} (package {package})"));
        }
    }
    if !Path::new(UMAD2SIM).is_file() {
        gone.push(format!("{UMAD2SIM} (package libumad2sim0)"));
    }
    (!gone.is_empty()).then(|| gone.join(", "))
}

fn skip_if_missing() -> bool {
    let Some(what) = missing() else {
        return false;
    };
    let msg = format!(
        "the ibnetdiscover comparison cannot run: missing {what} (.ci/run installs the packages)"
    );
    assert!(std::env::var_os("CI").is_none(), "{msg}");
    eprintln!("skipped: {msg}");
    true
}

/// ibsim running a topology file, on a socket name of its own.
struct Ibsim {
    child: Child,
    sock: String,
    dir: PathBuf,
}

impl Ibsim {
    fn start(topology: &Path, nodes: usize) -> Ibsim {
        static N: AtomicU32 = AtomicU32::new(0);
        let sock = format!(
            "hca-discover-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        let dir = std::env::temp_dir().join(&sock);
        std::fs::create_dir_all(&dir).unwrap();
        let n = (nodes * 2).max(2048).to_string();
        let mut child = Command::new("ibsim")
            .args([
                "-s",
                "-n",
                "-N",
                &n,
                "-S",
                &n,
                "-P",
                &(nodes * 80).max(20000).to_string(),
            ])
            .arg(topology)
            .env("IBSIM_SOCKNAME", &sock)
            .current_dir(&dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start ibsim");
        let out = child.stdout.take().expect("ibsim's output");
        let ready = BufReader::new(out)
            .lines()
            .map_while(Result::ok)
            .any(|l| l.contains("Network simulator ready"));
        assert!(ready, "ibsim did not start on {}", topology.display());
        Ibsim { child, sock, dir }
    }

    /// Run ibnetdiscover from `node` through umad2sim; its standard output.
    fn ibnetdiscover(&self, node: &str) -> String {
        let out = Command::new("ibnetdiscover")
            .env("IBSIM_SOCKNAME", &self.sock)
            .env("SIM_HOST", node)
            .env("LD_PRELOAD", UMAD2SIM)
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .output()
            .expect("run ibnetdiscover");
        assert!(
            out.status.success(),
            "ibnetdiscover failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).expect("UTF-8")
    }
}

impl Drop for Ibsim {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The lines of an ibnetdiscover output without its date line.
fn undated(text: &str) -> Vec<&str> {
    text.lines()
        .filter(|l| !l.starts_with("# Topology file: generated on "))
        .collect()
}

/// Compare ibnetdiscover on ibsim with our discovery on the simulator, both from `node` of
/// the topology file at `path`.
fn compare(path: &Path, node: &str) {
    let fabric = Fabric::parse_file(path).expect("topology");
    let nodes = fabric.node_count();
    let real = {
        let ibsim = Ibsim::start(path, nodes);
        ibsim.ibnetdiscover(node)
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
    if skip_if_missing() {
        return;
    }
    for name in [
        "net",
        "net.1",
        "net.2sw2path",
        "net.2sw2path4hca",
        "net.2sw2path4hca2port",
    ] {
        compare(&hca_tests::mad_fabric::example(name), "Hca1");
    }
}

#[test]
fn mellanox_qdr_ports_read_as_ibnetdiscover_writes_them() {
    if skip_if_missing() {
        return;
    }
    // Both tools ask the QDR ports of these Mellanox devices for ExtendedPortInfo.
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/mellanox-qdr.topo");
    compare(&path, "H-0c42a10300a3e1c8");
}

#[test]
fn a_generated_fat_tree_reads_as_ibnetdiscover_writes_it() {
    if skip_if_missing() {
        return;
    }
    // Rates other than ibsim's default, and hosts reached through two levels of switches.
    let path = std::env::temp_dir().join(format!("hca-discover-ft-{}.topo", std::process::id()));
    let mut file = std::fs::File::create(&path).unwrap();
    generator::generate_text("fat-tree:leaves=8,hosts=6,spines=4,link=4xEDR", &mut file).unwrap();
    drop(file);
    compare(&path, "host-1");
    std::fs::remove_file(&path).unwrap();
}

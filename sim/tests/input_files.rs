//! Files the simulator reads (topology files, their includes, saved state): a device, a FIFO,
//! a directory or a file above the size bound is refused with a typed error before anything
//! is read, instead of being read without end; files of real fabrics still load.

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use sim::fabric::{Fabric, FabricError, Problem, generator};
use sim::input_file::{InputFileError, MAX_TOPOLOGY_BYTES};
use sim::net::state_file::max_state_bytes;
use sim::net::{NetError, Network};
use sim::{ClockMode, Scheduler};

/// A fresh directory for one test.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sim-input-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A FIFO nobody writes to: opening it for reading the usual way blocks forever.
fn fifo(path: &Path) {
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: `c` is a NUL-terminated path that outlives the call.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
}

/// A sparse file of `len` bytes (no disk used, reads as zeros).
fn sparse(path: &Path, len: u64) {
    std::fs::File::create(path).unwrap().set_len(len).unwrap();
}

fn topology_refusal(path: &Path) -> InputFileError {
    match Fabric::parse_file(path) {
        Err(FabricError::Io { path: p, source }) => {
            assert_eq!(p, path);
            source
        }
        Err(e) => panic!("{}: not a read error: {e}", path.display()),
        Ok(_) => panic!("{} parsed", path.display()),
    }
}

#[test]
fn topology_devices_fifos_and_directories_are_refused() {
    for dev in ["/dev/zero", "/dev/urandom"] {
        let e = topology_refusal(Path::new(dev));
        assert!(
            matches!(
                e,
                InputFileError::NotRegular {
                    kind: "character device"
                }
            ),
            "{dev}: {e}"
        );
        let msg = e.to_string();
        assert!(msg.contains("not a regular file"), "{msg}");
        assert!(msg.contains("save the text to a regular file"), "{msg}");
    }
    let dir = scratch("topo-special");
    let f = dir.join("fifo");
    fifo(&f);
    assert!(matches!(
        topology_refusal(&f),
        InputFileError::NotRegular { kind: "FIFO" }
    ));
    let e = topology_refusal(&dir);
    assert!(
        matches!(e, InputFileError::NotRegular { kind: "directory" }),
        "{e}"
    );
    // A directory is not something that might never end: the message says what applies.
    let msg = e.to_string();
    assert!(
        msg.contains("it is a directory: give the path of a file") && !msg.contains("never end"),
        "{msg}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn topology_files_above_64_mib_are_refused() {
    assert_eq!(MAX_TOPOLOGY_BYTES, 64 * 1024 * 1024);
    let dir = scratch("topo-large");
    let big = dir.join("big.topo");
    sparse(&big, MAX_TOPOLOGY_BYTES + 1);
    let e = topology_refusal(&big);
    assert!(
        matches!(e, InputFileError::TooLarge { limit, .. } if limit == MAX_TOPOLOGY_BYTES),
        "{e}"
    );
    assert!(e.to_string().contains("larger than 67108864 bytes"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The `why` of an include error, checking it is one.
fn include_refusal(top: &Path) -> String {
    match Fabric::parse_file(top) {
        Err(FabricError::Parse {
            line,
            problem: Problem::Include { why, .. },
            ..
        }) => {
            assert_eq!(line, 1);
            why
        }
        Err(e) => panic!("not an include error: {e}"),
        Ok(_) => panic!("parsed"),
    }
}

#[test]
fn includes_are_bounded_the_same_way_and_together() {
    let dir = scratch("include");
    let top = dir.join("top.topo");
    std::fs::write(&top, "include \"/dev/zero\"\n").unwrap();
    let why = include_refusal(&top);
    assert!(why.contains("character device"), "{why}");

    let f = dir.join("fifo");
    fifo(&f);
    std::fs::write(&top, "include \"fifo\"\n").unwrap();
    assert!(include_refusal(&top).contains("FIFO"));

    // An included file under 64 MiB on its own, but over what the including file leaves of
    // the 64 MiB the whole topology may hold.
    let text = "include \"big.topo\"\n";
    std::fs::write(&top, text).unwrap();
    sparse(&dir.join("big.topo"), MAX_TOPOLOGY_BYTES - 4);
    let why = include_refusal(&top);
    let left = MAX_TOPOLOGY_BYTES - text.len() as u64;
    assert!(why.contains(&format!("larger than {left} bytes")), "{why}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn generated_fat_trees_load_from_files() {
    let dir = scratch("fat-tree");
    // The 648-host tree of 36-port switches (54 switches) and the 2,144-node benchmark fabric.
    for (spec, nodes) in [
        ("fat-tree:leaves=36,hosts=18,spines=18", 648 + 54),
        ("fat-tree:leaves=64,hosts=32,spines=32", 2144),
    ] {
        let path = dir.join("ft.topo");
        let mut file = std::fs::File::create(&path).unwrap();
        generator::generate_text(spec, &mut file).unwrap();
        drop(file);
        let len = std::fs::metadata(&path).unwrap().len();
        // Far inside the bound: under 1 MiB.
        assert!(len < 1 << 20, "{spec}: {len} bytes");
        let f = Fabric::parse_file(&path).unwrap_or_else(|e| panic!("{spec}: {e}"));
        assert_eq!(f.node_count(), nodes, "{spec}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

const SMALL_TREE: &str = "fat-tree:leaves=4,hosts=3,spines=2";

fn fat_tree_network() -> Network {
    let f = generator::generate(SMALL_TREE).unwrap();
    Network::new(f, Arc::new(Scheduler::new(ClockMode::Virtual)))
}

fn state_refusal(net: &Network, path: &Path) -> InputFileError {
    match net.load_state(path) {
        Err(NetError::StateFileRead { path: p, source }) => {
            assert_eq!(p, path.display().to_string());
            source
        }
        Err(e) => panic!("{}: not a read error: {e}", path.display()),
        Ok(()) => panic!("{} loaded", path.display()),
    }
}

#[test]
fn state_devices_fifos_and_oversized_files_are_refused() {
    let net = fat_tree_network();
    let e = state_refusal(&net, Path::new("/dev/zero"));
    assert!(
        matches!(
            e,
            InputFileError::NotRegular {
                kind: "character device"
            }
        ),
        "{e}"
    );
    let dir = scratch("state");
    let f = dir.join("fifo");
    fifo(&f);
    assert!(matches!(
        state_refusal(&net, &f),
        InputFileError::NotRegular { kind: "FIFO" }
    ));
    let limit = max_state_bytes(&generator::generate(SMALL_TREE).unwrap());
    let big = dir.join("big.state");
    sparse(&big, limit + 1);
    let e = state_refusal(&net, &big);
    assert!(
        matches!(e, InputFileError::TooLarge { limit: l, .. } if l == limit),
        "{e}"
    );
    assert!(e.to_string().contains("fabric of 18 nodes"), "{e}");

    // A saved state is a regular file well inside the bound, and loads.
    let saved = dir.join("saved.state");
    net.save_state(&saved).unwrap();
    fat_tree_network().load_state(&saved).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_state_bound_holds_a_state_with_every_table_full() {
    // Every switch's LFT and MFT at capacity and every port's fields at their widest: the
    // largest state this fabric can save fits in half the bound less its 1 MiB margin.
    let mut f = generator::generate(SMALL_TREE).unwrap();
    for n in f.node_ids().collect::<Vec<_>>() {
        if let Some(sw) = f.switch_mut(n) {
            sw.lft = vec![0xFF; usize::from(sw.info.linear_fdb_cap)];
            sw.mft = vec![
                0xFFFF;
                usize::from(sw.info.multicast_fdb_cap) * usize::from(sw.mft_positions)
            ];
            sw.info.linear_fdb_top = u16::MAX;
            sw.info.multicast_fdb_top = u16::MAX;
        }
    }
    let bound = max_state_bytes(&f);
    let net = Network::new(f, Arc::new(Scheduler::new(ClockMode::Virtual)));
    let text = net.state_text();
    assert!(
        (text.len() as u64) < (bound - (1 << 20)) / 2,
        "{} bytes, bound {bound}",
        text.len()
    );
}

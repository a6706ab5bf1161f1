//! `hca discover` and `hca bench` as a user runs them, on the simulator: the three output
//! formats read back (the text by the fabric parser, the JSON by a JSON parser, the graph by
//! its shape), failures reported on standard error, errors that say what to do, and the
//! bench's report.

use std::fs;
use std::io::Read as _;
use std::process::{Command, Output};

use sim::fabric::{Fabric, generator};

/// A small fat tree on the virtual clock: 2 leaves of 2 hosts, 1 spine.
const SPEC: &str = "fat-tree:leaves=2,hosts=2,spines=1,link=4xEDR";
const DEVICE: &str = "sim:clock=virtual,fabric=fat-tree:leaves=2/hosts=2/spines=1/link=4xEDR";

fn hca(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_hca"))
        .args(args)
        .env_remove("HCA_LOG")
        .env_remove("RUST_LOG")
        .output()
        .expect("run hca")
}

fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).expect("UTF-8")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn ok(args: &[&str]) -> String {
    let o = hca(args);
    assert!(o.status.success(), "hca {args:?}: {}", stderr(&o));
    stdout(&o)
}

#[test]
fn the_default_output_is_ibnetdiscover_text_of_the_fabric() {
    let o = hca(&["discover", "--device", DEVICE]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        stderr(&o),
        "",
        "nothing on stderr when it is not a terminal"
    );
    let text = stdout(&o);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "#");
    assert!(
        lines[1].starts_with("# Topology file: generated on "),
        "{}",
        lines[1]
    );
    assert_eq!(lines[2], "#");
    assert_eq!(
        lines[3],
        "# Initiated from node 0000000000100000 port 0000000000100001"
    );
    let found = Fabric::parse_str("discover", &text).expect("the output parses");
    let expected = generator::generate(SPEC).unwrap();
    assert_eq!(found.node_count(), expected.node_count());
    assert_eq!(found.link_count(), expected.link_count());
    for n in expected.node_ids() {
        let m = found
            .node_by_guid(expected.node(n).guid())
            .expect("every node");
        assert_eq!(found.description(m), expected.description(n));
    }
    assert!(text.contains("\t\t# \"spine-1\" lid 0 4xEDR\n"), "{text}");
}

#[test]
fn json_follows_its_schema() {
    let text = ok(&["discover", "--device", DEVICE, "--json"]);
    let v: serde_json::Value = serde_json::from_str(&text).expect("valid JSON");
    assert_eq!(v["schema"], "hca-discover/1");
    assert_eq!(v["from"]["node"], "0x0000000000100000");
    assert_eq!(v["from"]["port"], 1);
    let nodes = v["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 7);
    assert_eq!(v["stats"]["nodes"], 7);
    assert_eq!(v["stats"]["switches"], 3);
    assert_eq!(v["stats"]["links"], 6);
    assert_eq!(v["links"].as_array().unwrap().len(), 6);
    assert!(v["failures"].as_array().unwrap().is_empty());
    let expected = generator::generate(SPEC).unwrap();
    for n in nodes {
        let guid =
            u64::from_str_radix(n["guid"].as_str().unwrap().trim_start_matches("0x"), 16).unwrap();
        let e = expected.node_by_guid(guid).expect("a node of the fabric");
        assert_eq!(n["description"], expected.description(e));
        assert_eq!(n["num_ports"], expected.node(e).num_ports());
        if n["type"] == "switch" {
            // Port 0 reports the width and speed of a 4X SDR link (LinkWidthActive 2,
            // LinkSpeedActive 1, no extended speed), as ibsim's and real switches' do, but it
            // has no link, and ibnetdiscover prints no rate for it.
            let ports = n["ports"].as_array().unwrap();
            let p0 = ports.iter().find(|p| p["port"] == 0).expect("port 0 read");
            assert!(p0["rate"].is_null(), "{p0}");
            assert_eq!(p0["width"]["active"], 2);
            assert_eq!(p0["speed"]["active"], 1);
            assert_eq!(p0["speed"]["ext_active"], 0);
        }
        for p in n["ports"].as_array().unwrap() {
            if p["remote"].is_null() {
                continue;
            }
            assert_eq!(p["rate"], "4xEDR");
            assert_eq!(p["phys_state"], "LinkUp");
            assert_eq!(p["width"]["active"], 2);
        }
    }
    let spine = nodes
        .iter()
        .find(|n| n["description"] == "spine-1")
        .unwrap();
    assert_eq!(spine["type"], "switch");
    assert_eq!(spine["path"], serde_json::json!([1, 3]));
}

#[test]
fn dot_is_a_graph_of_the_fabric() {
    let text = ok(&["discover", "--device", DEVICE, "--dot"]);
    assert!(text.starts_with("graph fabric {\n"), "{text}");
    assert!(text.ends_with("}\n"));
    assert_eq!(text.matches(" -- ").count(), 6, "one edge per link");
    assert_eq!(text.matches("[shape=box").count(), 3, "switches");
    assert_eq!(text.matches("[shape=ellipse").count(), 4, "hosts");
    assert_eq!(text.matches("fillcolor").count(), 1, "the local node");
}

#[test]
fn output_goes_to_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fabric.topo");
    let out = ok(&["discover", "--device", DEVICE, "-o", path.to_str().unwrap()]);
    assert_eq!(out, "");
    let f = Fabric::parse_file(&path).unwrap();
    assert_eq!(f.node_count(), 7);
}

/// The names in `dir`, sorted.
fn names(dir: &std::path::Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn a_failed_run_leaves_the_output_file_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("net2");
    let p = path.to_str().unwrap();
    fs::write(&path, "keep me\n").unwrap();
    // What lies at the old fixed temporary name, a link to someone's file, is not followed
    // (discover may run as root in a directory others write), nor removed.
    let victim = dir.path().join("victim");
    fs::write(&victim, "victim\n").unwrap();
    std::os::unix::fs::symlink(&victim, dir.path().join("net2.tmp")).unwrap();
    let before = names(dir.path());
    for args in [
        vec![
            "discover",
            "--device",
            "sim:topology=/nonexistent/x",
            "-o",
            p,
        ],
        vec!["sim", "gen", "fat-tree:leaves=2", "-o", p],
    ] {
        let o = hca(&args);
        assert!(!o.status.success(), "{args:?} succeeded");
        assert_eq!(fs::read_to_string(&path).unwrap(), "keep me\n", "{args:?}");
        assert_eq!(fs::read_to_string(&victim).unwrap(), "victim\n", "{args:?}");
        assert_eq!(names(dir.path()), before, "{args:?}");
    }
    // A walk may write over the very topology it reads.
    ok(&["sim", "gen", SPEC, "-o", p]);
    let device = format!("sim:clock=virtual,topology={p},node=host-1");
    ok(&["discover", "--device", &device, "-o", p]);
    assert_eq!(Fabric::parse_file(&path).unwrap().node_count(), 7);
    assert_eq!(fs::read_to_string(&victim).unwrap(), "victim\n");
    assert_eq!(names(dir.path()), before);
}

#[test]
fn a_fabric_opened_with_state_is_saved_when_hca_exits() {
    let dir = tempfile::tempdir().unwrap();
    let topo = dir.path().join("ft.topo");
    ok(&["sim", "gen", SPEC, "-o", topo.to_str().unwrap()]);
    let state = dir.path().join("ft.state");
    let device = format!(
        "sim:clock=virtual,topology={},node=host-1,state={}",
        topo.display(),
        state.display()
    );
    ok(&["discover", "--device", &device]);
    let text = fs::read_to_string(&state).expect("the state was saved");
    assert!(
        text.contains("hca-sim-state 1") && text.contains("port 100000 1 "),
        "host-1 is CA GUID 0x100000: {text}"
    );
    // A command that fails after the device opened saves it too.
    fs::remove_file(&state).unwrap();
    let o = hca(&["discover", "--device", &device, "--port", "2"]);
    assert!(!o.status.success(), "a second port of a 1-port HCA");
    assert!(state.exists(), "saved on the error path: {}", stderr(&o));
    // A state file that cannot be written is an error of the run.
    let bad = format!(
        "sim:clock=virtual,topology={},node=host-1,state={}/none/ft.state",
        topo.display(),
        dir.path().display()
    );
    let o = hca(&["discover", "--device", &bad]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("saving the simulated fabric"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn the_default_device_is_a_simulated_fat_tree() {
    let text = ok(&["discover", "--stats"]);
    let f = Fabric::parse_str("default", &text).unwrap();
    let expected = generator::generate("fat-tree:leaves=4,hosts=4,spines=2,link=4xHDR").unwrap();
    assert_eq!(f.node_count(), expected.node_count());
    assert_eq!(f.link_count(), expected.link_count());
}

#[test]
fn failed_queries_are_listed_on_stderr_and_the_rest_is_printed() {
    // The simulated HCA alone: its port is up but cabled to nothing.
    let o = hca(&["discover", "--device", "sim:clock=virtual", "--stats"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(err.contains("warning: 1 queries failed"), "{err}");
    assert!(
        err.contains("NodeInfo:0 along 0,1: no response (timed out after 3 retries)"),
        "{err}"
    );
    assert!(err.contains("discovered 1 nodes"), "{err}");
    let f = Fabric::parse_str("alone", &stdout(&o)).unwrap();
    assert_eq!(f.node_count(), 1);
}

#[test]
fn errors_say_what_to_do() {
    for (args, says) in [
        (
            vec!["discover", "--device", "sim:fabric=fat-tree:leaves=2"],
            "cannot open",
        ),
        (
            vec!["discover", "--device", DEVICE, "--window", "0"],
            "window",
        ),
        (
            vec!["discover", "--device", DEVICE, "--port", "3"],
            "--port",
        ),
        (vec!["discover", "--device", "vfio:0000:99:00.0"], "vfio"),
        (vec!["bench", "--device", DEVICE, "--path", "1,0"], "1-254"),
        (
            vec!["bench", "--device", DEVICE, "--attr", "lft"],
            "node-info",
        ),
        (vec!["bench", "--device", DEVICE, "--time=0"], "seconds"),
    ] {
        let o = hca(&args);
        assert!(!o.status.success(), "{args:?} succeeded");
        let err = stderr(&o);
        assert!(err.contains(says), "{args:?}: {err}");
    }
    let o = hca(&["discover", "--json", "--dot"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("cannot be used with"), "{}", stderr(&o));
}

#[test]
fn too_many_retries_are_refused_not_a_panic() {
    for cmd in ["discover", "bench"] {
        let o = hca(&[cmd, "--device", DEVICE, "--retries", "4294967295"]);
        assert_eq!(o.status.code(), Some(1), "{cmd}: {}", stderr(&o));
        assert!(
            stderr(&o).contains("retries") && stderr(&o).contains("give 0 to 100"),
            "{cmd}: {}",
            stderr(&o)
        );
    }
}

#[test]
fn a_bench_that_cannot_complete_says_why_and_fails() {
    // Refused before anything is sent.
    for (args, says) in [
        (vec!["--timeout", "0"], "timeout: 0 ms"),
        (
            vec!["--path", "9"],
            "the first hop 9 is not the port the SMPs leave by (1)",
        ),
    ] {
        let mut all = vec!["bench", "--device", DEVICE, "--count", "3"];
        all.extend(args);
        let o = hca(&all);
        assert_eq!(o.status.code(), Some(1), "{all:?}");
        assert!(stderr(&o).contains(says), "{all:?}: {}", stderr(&o));
        assert_eq!(stdout(&o), "", "{all:?}");
    }
    // A route through a leaf port with nothing behind it: every send times out.
    let o = hca(&[
        "bench",
        "--device",
        DEVICE,
        "--count",
        "3",
        "--window",
        "1",
        "--timeout",
        "10",
        "--path",
        "1,30",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    let report = stdout(&o);
    assert!(report.contains("3 timed out"), "{report}");
    assert!(
        report.contains("first failure   no response within 10 ms"),
        "{report}"
    );
    // No round trip, no latency: not a latency of 0.
    for key in ["latency wall", "latency device"] {
        assert_eq!(field(&report, key), "none (no round trips)", "{report}");
    }
    assert!(
        stderr(&o).contains("no round trip completed out of 3 sends: no response within 10 ms"),
        "{}",
        stderr(&o)
    );
    // A --time too short for the first send: nothing is sent, and the error says what to do.
    let o = hca(&["bench", "--device", DEVICE, "--time", "1e-9"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("out of 0 sends: the time (--time 0.000000001) ran out before the first send: give a longer --time"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn a_bench_from_a_down_port_says_the_port_is_down() {
    let down = "sim:clock=virtual,port_state=down";
    let o = hca(&["bench", "--device", down, "--count", "1", "--timeout", "10"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("port 1 is Down (physical state Polling)")
            && stderr(&o).contains("pick another port with --port"),
        "{}",
        stderr(&o)
    );
    assert_eq!(stdout(&o), "", "refused before anything is sent");
    // The HCA's own SMA answers without the wire, Down or not.
    let o = hca(&["bench", "--device", down, "--count", "1", "--path", "0"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}

#[test]
fn help_gives_the_default_window_per_device_kind() {
    let help = ok(&["discover", "--help"]);
    assert!(
        help.contains("[default: 4 on vfio: devices, 32 on the simulator]"),
        "{help}"
    );
}

#[test]
fn help_has_examples() {
    for cmd in ["discover", "bench"] {
        let text = ok(&[cmd, "--help"]);
        assert!(text.contains("Examples:"), "{cmd}: {text}");
        assert!(text.contains(&format!("hca {cmd}")), "{cmd}");
    }
}

#[test]
fn bench_help_says_what_its_figures_cover() {
    let help = ok(&["bench", "--help"]);
    let flat = help.split_whitespace().collect::<Vec<_>>().join(" ");
    for says in [
        "no warm-up is left out",
        "none when no round trip completed",
        "over the time from the first send to the last response",
        // --count counts sends, a timed-out one too, not round trips.
        "until COUNT SMPs have been sent and have ended, each in a round trip, a timeout or a \
         failure",
        "--count <N> SMPs to send, each ending in a round trip, a timeout or a failure",
    ] {
        assert!(flat.contains(says), "{says}: {help}");
    }
    assert!(!flat.contains("COUNT round trips"), "{help}");
}

/// The value of a report line `  key  value`.
fn field<'a>(report: &'a str, key: &str) -> &'a str {
    report
        .lines()
        .find_map(|l| l.strip_prefix("  ").and_then(|l| l.strip_prefix(key)))
        .unwrap_or_else(|| panic!("no `{key}` line in:\n{report}"))
        .trim()
}

#[test]
fn the_bench_report_is_well_formed() {
    let r = ok(&[
        "bench", "--device", DEVICE, "--count", "500", "--window", "4",
    ]);
    let first = r.lines().next().unwrap();
    assert_eq!(
        first,
        format!("hca bench: NodeInfo Get along 0,1 (1 hop) on {DEVICE}, window 4")
    );
    assert_eq!(
        field(&r, "round trips"),
        "500 (0 with an error status, 0 timed out, 0 failed, 0 retries)"
    );
    assert!(field(&r, "elapsed").ends_with(" s device clock"), "{r}");
    let throughput = field(&r, "throughput");
    assert!(
        throughput.contains(" round trips/s (wall clock, over the ")
            && throughput.ends_with(" s from the first send to the last response)"),
        "{r}"
    );
    for key in ["latency wall", "latency device"] {
        let v = field(&r, key);
        let words: Vec<&str> = v.split_whitespace().collect();
        assert_eq!(
            (words[0], words[3], words[6]),
            ("p50", "p99", "max"),
            "{key}: {v}"
        );
        let p50: f64 = words[1].parse().unwrap();
        let p99: f64 = words[4].parse().unwrap();
        let max: f64 = words[7].parse().unwrap();
        assert!(p50 <= p99 && p99 <= max, "{key}: {v}");
        assert!(v.ends_with("(over the 500 answered sends)"), "{key}: {v}");
    }
    let in_flight: usize = field(&r, "in flight")
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=4).contains(&in_flight), "{r}");
}

#[test]
fn the_bench_counts_error_statuses_and_runs_for_a_time() {
    // SwitchInfo of the HCA's own port: answered locally, with "attribute unsupported".
    let r = ok(&[
        "bench",
        "--device",
        DEVICE,
        "--attr",
        "switch-info",
        "--path",
        "0",
        "--count",
        "50",
    ]);
    assert!(
        r.starts_with("hca bench: SwitchInfo Get along 0 (0 hops)"),
        "{r}"
    );
    assert_eq!(
        field(&r, "round trips"),
        "50 (50 with an error status, 0 timed out, 0 failed, 0 retries)"
    );
    let r = ok(&[
        "bench", "--device", DEVICE, "--time", "0.2", "--path", "1,3",
    ]);
    assert!(r.contains("(2 hops)"), "{r}");
    let n: u64 = field(&r, "round trips")
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(n > 0, "{r}");
}

/// A fabric with a dual-port CA, h2 (GUID 0x3000), cabled to switch A (GUID 0x1000) port 4 by
/// its port 1 and to switch B (GUID 0x1001) port 6 by its port 2; A and B are linked, and a
/// single-port CA, h1, hangs off A.
const DUAL: &str = "\
switchguid=0x1000(1000)
Switch\t8 \"S-0000000000001000\"\t\t# \"sw-A\" enhanced port 0 lid 16 lmc 0
[1]\t\"H-0000000000002000\"[1](2001)
[2]\t\"S-0000000000001001\"[2]
[4]\t\"H-0000000000003000\"[1](3001)

switchguid=0x1001(1001)
Switch\t8 \"S-0000000000001001\"\t\t# \"sw-B\" base port 0 lid 2 lmc 0
[2]\t\"S-0000000000001000\"[2]
[6]\t\"H-0000000000003000\"[2](3002)

caguid=0x2000
Ca\t1 \"H-0000000000002000\"\t\t# \"h1\"
[1](2001)\t\"S-0000000000001000\"[1]

caguid=0x3000
Ca\t2 \"H-0000000000003000\"\t\t# \"h2\"
[1](3001)\t\"S-0000000000001000\"[4]
[2](3002)\t\"S-0000000000001001\"[6]
";

/// `DUAL` written to a file, and the device string of our HCA as h2 with both ports.
fn dual_device(dir: &tempfile::TempDir) -> String {
    let path = dir.path().join("dual.topo");
    fs::write(&path, DUAL).unwrap();
    format!(
        "sim:clock=virtual,topology={},node=H-0000000000003000,ports=2",
        path.display()
    )
}

#[test]
fn a_walk_that_comes_back_into_the_hca_by_its_other_port_is_answered() {
    let dir = tempfile::tempdir().unwrap();
    let device = dual_device(&dir);
    let h2 = "0x0000000000003000";
    let (sw_a, sw_b, h1) = (
        "0x0000000000001000",
        "0x0000000000001001",
        "0x0000000000002000",
    );
    // Walked from either port, the SMPs come back into h2 by the other one, whose own SMA
    // must answer them.
    for port in ["1", "2"] {
        let o = hca(&["discover", "--device", &device, "--port", port, "--json"]);
        assert!(o.status.success(), "--port {port}: {}", stderr(&o));
        assert!(
            !stderr(&o).contains("failed"),
            "--port {port}: {}",
            stderr(&o)
        );
        let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
        assert_eq!(v["failures"], serde_json::json!([]), "--port {port}");
        assert_eq!(v["stats"]["retries"], 0, "--port {port}");
        assert_eq!(v["stats"]["timeouts"], 0, "--port {port}");
        // On the virtual clock, a query left unanswered costs its timeout and retries (4 s of
        // device time); answered, the walk takes a few ms of it.
        let device_ms = v["stats"]["device_ms"].as_f64().unwrap();
        assert!(device_ms < 100.0, "--port {port}: {device_ms} ms");
        // Each link once, its ends in either order (the lower end is the one found first).
        let mut links: Vec<[(String, u64); 2]> = v["links"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| {
                let end = |e: &serde_json::Value| {
                    (
                        e["guid"].as_str().unwrap().to_owned(),
                        e["port"].as_u64().unwrap(),
                    )
                };
                let mut ends = [end(&l["a"]), end(&l["b"])];
                ends.sort();
                assert_eq!(l["rate"], "4xSDR", "--port {port}: {l}");
                ends
            })
            .collect();
        links.sort();
        let end = |g: &str, p: u64| (g.to_owned(), p);
        let mut expected = vec![
            [end(h2, 1), end(sw_a, 4)],
            [end(h2, 2), end(sw_b, 6)],
            [end(sw_a, 1), end(h1, 1)],
            [end(sw_a, 2), end(sw_b, 2)],
        ];
        for e in &mut expected {
            e.sort();
        }
        expected.sort();
        assert_eq!(links, expected, "--port {port}");
    }
}

#[test]
fn a_bench_route_that_ends_in_the_hca_by_its_other_port_is_answered() {
    let dir = tempfile::tempdir().unwrap();
    let device = dual_device(&dir);
    // Out by port 1 to switch A, on to switch B, and back into h2 by its port 2.
    let r = ok(&[
        "bench",
        "--device",
        &device,
        "--path",
        "1,2,6",
        "--count",
        "50",
        "--timeout",
        "100",
    ]);
    assert_eq!(
        field(&r, "round trips"),
        "50 (0 with an error status, 0 timed out, 0 failed, 0 retries)"
    );
}

#[test]
fn a_description_of_64_bytes_is_printed_whole_as_ibnetdiscover_prints_it() {
    // NodeDescription is 64 bytes with no room for a NUL; libibnetdisc keeps it in a
    // char[65] and ibnetdiscover prints all 64 (checked against Debian's ibnetdiscover 44.0
    // over `hca run`).
    let desc = "0123456789abcdef".repeat(4);
    assert_eq!(desc.len(), 64);
    let topo = format!(
        "switchguid=0x1000(1000)\n\
         Switch\t8 \"S-0000000000001000\"\t\t# \"{desc}\" enhanced port 0 lid 16 lmc 0\n\
         [1]\t\"H-0000000000002000\"[1](2001)\n\
         \n\
         caguid=0x2000\n\
         Ca\t1 \"H-0000000000002000\"\t\t# \"h1\"\n\
         [1](2001)\t\"S-0000000000001000\"[1]\n"
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("long.topo");
    fs::write(&path, topo).unwrap();
    let device = format!(
        "sim:clock=virtual,topology={},node=H-0000000000002000",
        path.display()
    );
    // ibnetdiscover's lines for the switch and for the CA's port, written out from its
    // format (`Switch\tN "S-<guid>"\t\t# "<desc>" enhanced port 0 lid L lmc M`, and a CA port's
    // `[P](<port guid>) \t"S-<guid>"[P]\t\t# lid L lmc M "<desc>" lid L <rate>`).
    let text = ok(&["discover", "--device", &device]);
    let switch_line = "Switch\t8 \"S-0000000000001000\"\t\t# \
         \"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\" \
         enhanced port 0 lid 16 lmc 0";
    assert!(text.lines().any(|l| l == switch_line), "{text}");
    let ca_port_line = "[1](2001) \t\"S-0000000000001000\"[1]\t\t# lid 0 lmc 0 \
         \"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\" lid 16 4xSDR";
    assert!(text.lines().any(|l| l == ca_port_line), "{text}");
    let v: serde_json::Value =
        serde_json::from_str(&ok(&["discover", "--device", &device, "--json"])).unwrap();
    let switch = v["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["type"] == "switch")
        .unwrap();
    assert_eq!(switch["description"], desc.as_str());
    let dot = ok(&["discover", "--device", &device, "--dot"]);
    assert!(dot.contains(&format!("label=\"{desc}\\n")), "{dot}");
}

#[test]
fn a_walk_cut_short_by_max_hops_says_so() {
    // From host-1, one hop reaches its leaf; the leaf's links up to host-2 and to the spine
    // are not followed.
    let o = hca(&["discover", "--device", DEVICE, "--max-hops", "1", "--stats"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains(
            "warning: 2 links up were not followed: their routes would be longer than \
             --max-hops 1; what lies behind them is missing"
        ),
        "{err}"
    );
    assert!(
        err.contains(", 2 links not followed past --max-hops"),
        "the summary: {err}"
    );
    let o = hca(&["discover", "--device", DEVICE, "--max-hops", "1", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["stats"]["beyond_max_hops"], 2);
    assert_eq!(v["stats"]["nodes"], 2);
    // The whole walk: nothing left out, nothing said.
    let o = hca(&["discover", "--device", DEVICE, "--json"]);
    assert_eq!(stderr(&o), "");
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["stats"]["beyond_max_hops"], 0);
}

/// Whether `err` has a log line at ERROR level.
fn has_error_line(err: &str) -> bool {
    err.lines().any(|l| l.contains(" ERROR "))
}

#[test]
fn settings_are_refused_before_the_device_is_opened() {
    for (args, says) in [
        (
            vec!["discover", "--window", "0"],
            "window: 0 SMPs in flight",
        ),
        (vec!["discover", "--max-hops", "0"], "max hops: 0"),
        (vec!["discover", "--timeout", "0"], "timeout: 0 ms"),
        (vec!["bench", "--count", "0"], "count: 0 sends"),
        (vec!["bench", "--window", "0"], "window: 0 sends in flight"),
        (
            vec!["bench", "--path", "2"],
            "the first hop 2 is not the port the SMPs leave by (1)",
        ),
    ] {
        // A device that cannot be opened: the setting is refused before it is tried.
        for device in ["sim:topology=/nonexistent/x.topo,node=h", DEVICE] {
            let mut all = args.clone();
            all.extend(["--device", device]);
            let o = hca(&all);
            assert_eq!(o.status.code(), Some(1), "{all:?}");
            let err = stderr(&o);
            assert!(err.contains(says), "{all:?}: {err}");
            assert!(!err.contains("cannot open"), "{all:?}: {err}");
            assert!(!has_error_line(&err), "{all:?}: {err}");
        }
    }
}

#[test]
fn closing_after_a_walk_logs_no_error() {
    // The MAD layer on both ports of the HCA, each closed with it; and a lone HCA whose walk
    // times out.
    let dir = tempfile::tempdir().unwrap();
    let dual = dual_device(&dir);
    for device in [dual.as_str(), "sim:clock=virtual"] {
        for port in ["1", "2"] {
            if device == "sim:clock=virtual" && port == "2" {
                continue;
            }
            let o = hca(&["discover", "--device", device, "--port", port]);
            assert!(o.status.success(), "{device} --port {port}: {}", stderr(&o));
            assert!(
                !has_error_line(&stderr(&o)),
                "{device} --port {port}: {}",
                stderr(&o)
            );
        }
    }
    let o = hca(&[
        "bench", "--device", &dual, "--path", "1,2,6", "--count", "10",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!has_error_line(&stderr(&o)), "{}", stderr(&o));
}

#[test]
fn an_output_that_is_a_directory_is_refused_before_the_walk() {
    let parent = tempfile::tempdir().unwrap();
    let dir = parent.path().join("out");
    fs::create_dir(&dir).unwrap();
    let d = dir.to_str().unwrap();
    // With a device that cannot be opened, only a check made before the walk can be what
    // fails.
    for args in [
        vec![
            "discover",
            "--device",
            "sim:topology=/nonexistent/x.topo,node=h",
            "-o",
            d,
        ],
        vec!["sim", "gen", SPEC, "-o", d],
    ] {
        let o = hca(&args);
        assert_eq!(o.status.code(), Some(1), "{args:?}");
        let err = stderr(&o);
        assert!(
            err.contains(&format!("cannot write {d}: {d} is a directory")),
            "{args:?}: {err}"
        );
        assert_eq!(names(parent.path()), ["out"], "{args:?}");
    }
}

#[test]
fn a_bench_modifier_the_attribute_cannot_take_is_refused() {
    for (args, says) in [
        (
            vec!["--attr", "port-info", "--modifier", "999"],
            "modifier: 999: PortInfo's modifier is a port number, 0 to 254",
        ),
        (
            vec!["--attr", "port-info", "--modifier", "255"],
            "modifier: 255: PortInfo's modifier is a port number, 0 to 254",
        ),
        (
            vec!["--attr", "node-info", "--modifier", "1"],
            "modifier: 1: NodeInfo takes none (its modifier is reserved): give 0",
        ),
        (
            vec!["--attr", "switch-info", "--modifier", "2"],
            "modifier: 2: SwitchInfo takes none",
        ),
        (
            vec!["--attr", "node-desc", "--modifier", "3"],
            "modifier: 3: NodeDescription takes none",
        ),
    ] {
        let mut all = vec![
            "bench",
            "--device",
            "sim:topology=/nonexistent/x.topo,node=h",
        ];
        all.extend(args);
        let o = hca(&all);
        assert_eq!(o.status.code(), Some(1), "{all:?}");
        assert!(stderr(&o).contains(says), "{all:?}: {}", stderr(&o));
    }
    // A port number in range that the node does not have is only known by asking: the
    // switch's SMA answers with an error status, which the report counts.
    let r = ok(&[
        "bench",
        "--device",
        DEVICE,
        "--attr",
        "port-info",
        "--modifier",
        "254",
        "--count",
        "5",
    ]);
    assert_eq!(
        field(&r, "round trips"),
        "5 (5 with an error status, 0 timed out, 0 failed, 0 retries)"
    );
}

/// Sends `sig` to the child.
fn signal(child: &Reaped, sig: i32) {
    let pid = i32::try_from(child.0.id()).unwrap();
    // SAFETY: kill(2) with a pid this test started and has not reaped (a `Reaped` reaps it
    // only when dropped), so the pid is still the child's.
    assert_eq!(unsafe { libc::kill(pid, sig) }, 0);
}

/// A child `hca`, killed and reaped when dropped: a test that fails leaves no process behind.
struct Reaped(std::process::Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        // Both are harmless on a child that already ended (`kill` then does nothing).
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `hca args`, its stdout and stderr piped, without the log variables.
fn spawn_hca(args: &[&str]) -> Reaped {
    Reaped(
        Command::new(env!("CARGO_BIN_EXE_hca"))
            .args(args)
            .env_remove("HCA_LOG")
            .env_remove("RUST_LOG")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("run hca"),
    )
}

/// Waits until `ready()`, at most 30 s, failing at once if `child` ends first.
fn wait_until(child: &mut Reaped, what: &str, mut ready: impl FnMut() -> bool) {
    let t = std::time::Instant::now();
    while !ready() {
        if child.0.try_wait().unwrap().is_some() {
            let o = wait_bounded(child);
            panic!(
                "hca ended before {what}: {:?}\n{}{}",
                o.status,
                stdout(&o),
                stderr(&o)
            );
        }
        assert!(t.elapsed().as_secs() < 30, "not within 30 s: {what}");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// Waits for `child` at most a minute (then fails; dropping it kills it).
fn wait_bounded(child: &mut Reaped) -> Output {
    let c = &mut child.0;
    let t = std::time::Instant::now();
    while c.try_wait().unwrap().is_none() {
        assert!(
            t.elapsed() < std::time::Duration::from_secs(60),
            "hca did not end within a minute"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let mut out = Vec::new();
    let mut err = Vec::new();
    c.stdout.take().unwrap().read_to_end(&mut out).unwrap();
    c.stderr.take().unwrap().read_to_end(&mut err).unwrap();
    Output {
        status: c.wait().unwrap(),
        stdout: out,
        stderr: err,
    }
}

/// An M_Key no SMP of `hca discover` carries (it sends 0).
const MKEY: &str = "mkey=1";

/// Ctrl-C during a walk: the walk stops, the command unwinds (the temporary output file
/// removed, the session closed, the state= fabric saved) and hca exits 130.
///
/// The walk cannot end before the signal: the state file protects every switch with an
/// M_Key the walk does not know at M_KeyProtectBits 2, so a switch drops the walk's Gets
/// unanswered (IBA 14.2.4; the sim's `sma/mkey.rs`), and the walk waits for a one-hour
/// timeout with no retry for the NodeInfo of the first switch, behind which every other
/// node lies.
#[test]
fn ctrl_c_stops_a_walk_cleanly_and_exits_130() {
    let dir = tempfile::tempdir().unwrap();
    let topo = dir.path().join("net.topo");
    ok(&[
        "sim",
        "gen",
        "fat-tree:leaves=2,hosts=2,spines=1",
        "-o",
        topo.to_str().unwrap(),
    ]);
    let state = dir.path().join("net.state");
    let out = dir.path().join("out.topo");
    let device = format!(
        "sim:topology={},node=host-1,state={}",
        topo.display(),
        state.display()
    );
    // A first walk writes the state file; then every switch's port 0 (whose M_Key guards
    // the switch's SMA) gets an M_Key and protect bits 2, and the file a line of ours that
    // a save would not write.
    ok(&["discover", "--device", &device]);
    let mut protected = 0;
    let mut text = String::new();
    for line in fs::read_to_string(&state).unwrap().lines() {
        let mut line = line.to_owned();
        if line.split(' ').nth(2) == Some("0") && line.starts_with("port ") {
            let key = line.replace(
                "mkey=0 lease=0 protect=0",
                &format!("{MKEY} lease=0 protect=2"),
            );
            assert_ne!(key, line, "a switch port 0 record of another form: {line}");
            line = key;
            protected += 1;
        }
        text.push_str(&line);
        text.push('\n');
    }
    assert_eq!(protected, 3, "one port 0 per switch:\n{text}");
    text.push_str("# protected by the test\n");
    fs::write(&state, &text).unwrap();

    let mut child = spawn_hca(&[
        "discover",
        "--device",
        &device,
        "--timeout",
        "3600000",
        "--retries",
        "0",
        "-o",
        out.to_str().unwrap(),
    ]);
    // The temporary output file (a third name beside the topology and the state) is made
    // after the handler is installed: once it is there, Ctrl-C is the handler's.
    wait_until(&mut child, "the temporary output file appears", || {
        names(dir.path()).len() > 2
    });
    signal(&child, libc::SIGINT);
    let o = wait_bounded(&mut child);
    assert_eq!(o.status.code(), Some(130), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("interrupted by SIGINT"),
        "{}",
        stderr(&o)
    );
    assert!(!out.exists());
    assert_eq!(
        names(dir.path()),
        ["net.state", "net.topo"],
        "{}",
        stderr(&o)
    );
    // Saved by this run: the file is the save's, without our line, the M_Keys kept.
    let text = fs::read_to_string(&state).unwrap();
    assert!(text.contains("hca-sim-state 1"), "{text}");
    assert!(
        !text.contains("protected by the test"),
        "not saved:\n{text}"
    );
    assert_eq!(text.matches(MKEY).count(), 3, "{text}");
}

/// Ctrl-C during a bench: it stops, prints the report of what it measured, and exits 130.
///
/// The fabric is served from this test, which loses the second SMP the HCA sends: with
/// one SMP in flight, a one-hour timeout and no retry, the first is a round trip before
/// the second leaves, and the bench waits for the second's answer until the signal.
#[test]
fn ctrl_c_stops_a_bench_with_its_report() {
    let dir = tempfile::tempdir().unwrap();
    let net = sim::Network::new(
        generator::generate("fat-tree:leaves=2,hosts=2,spines=1").unwrap(),
        std::sync::Arc::new(sim::Scheduler::new(sim::ClockMode::Real)),
    );
    net.drop_nth_leaving(net.port("host-1", 1).unwrap(), 2);
    let socket = dir.path().join("fabric.sock");
    let server = sim::net::remote::FabricServer::start(net, &socket).unwrap();
    let device = format!("sim:server={},node=host-1", socket.display());
    let mut child = spawn_hca(&[
        "bench",
        "--device",
        &device,
        "--window",
        "1",
        "--timeout",
        "3600000",
        "--retries",
        "0",
    ]);
    let lost = || server.network().drops().get(sim::net::DropReason::Fault);
    wait_until(&mut child, "the second SMP is lost", || lost() > 0);
    signal(&child, libc::SIGINT);
    let o = wait_bounded(&mut child);
    assert_eq!(o.status.code(), Some(130), "{}", stderr(&o));
    let report = stdout(&o);
    assert_eq!(
        field(&report, "interrupted"),
        "by SIGINT (1 sends in flight cancelled)",
        "{report}"
    );
    assert_eq!(
        field(&report, "round trips"),
        "1 (0 with an error status, 0 timed out, 0 failed, 0 retries)",
        "{report}"
    );
    assert_eq!(lost(), 1);
}

/// `--time` bounds the run: sends in flight when it is up are cancelled, not waited for up to
/// their timeouts (10 s here, on the real clock), and the report counts them.
#[test]
fn a_timed_bench_cancels_what_is_in_flight_when_the_time_is_up() {
    let t = std::time::Instant::now();
    let o = hca(&[
        "bench",
        "--device",
        "sim:fabric=fat-tree:leaves=2/hosts=2/spines=1",
        "--timeout",
        "10000",
        "--time",
        "0.5",
        "--path",
        "1,9",
    ]);
    let took = t.elapsed();
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(took < std::time::Duration::from_secs(8), "{took:?}");
    let r = stdout(&o);
    assert!(
        field(&r, "cancelled").ends_with("sends in flight when the time ran out"),
        "{r}"
    );
    assert!(
        stderr(&o).contains("no response before the time ran out"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn discover_help_maps_ibnetdiscover_flags() {
    let help = ok(&["discover", "--help"]);
    let flat = help.split_whitespace().collect::<Vec<_>>().join(" ");
    for says in [
        "-o/--outstanding_smps N is --window N",
        "-t MS is --timeout MS",
        "-P N is --port N",
        "[topology-file] argument is --output FILE",
        "-m/--max_hops only reports the deepest route found",
    ] {
        assert!(flat.contains(says), "{says}: {help}");
    }
}

#[test]
fn bench_help_gives_the_default_count() {
    let help = ok(&["bench", "--help"]);
    let flat = help.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        flat.contains("[default: 100000, unless --time is given]"),
        "{help}"
    );
    assert!(
        flat.contains("are cancelled (the report counts them)"),
        "{help}"
    );
}

/// A switch with three CAs: h1 (GUID 0x2000, LID 5), h2 (0x3000, two ports, cabled only on
/// port 2, LID 7) and h3 (0x4000, two ports, both cabled: LID 9 on port 1, LID 11 on port 2).
const PORT2: &str = "\
switchguid=0x1000(1000)
Switch\t4 \"S-0000000000001000\"\t\t# \"sw\" base port 0 lid 1 lmc 0
[1]\t\"H-0000000000002000\"[1](2001)
[2]\t\"H-0000000000003000\"[2](3002)
[3]\t\"H-0000000000004000\"[2](4002)
[4]\t\"H-0000000000004000\"[1](4001)

caguid=0x2000
Ca\t1 \"H-0000000000002000\"\t\t# \"h1\"
[1](2001)\t\"S-0000000000001000\"[1]\t\t# lid 5 lmc 0 \"sw\" lid 1 4xSDR

caguid=0x3000
Ca\t2 \"H-0000000000003000\"\t\t# \"h2\"
[2](3002)\t\"S-0000000000001000\"[2]\t\t# lid 7 lmc 0 \"sw\" lid 1 4xSDR

caguid=0x4000
Ca\t2 \"H-0000000000004000\"\t\t# \"h3\"
[1](4001)\t\"S-0000000000001000\"[4]\t\t# lid 9 lmc 0 \"sw\" lid 1 4xSDR
[2](4002)\t\"S-0000000000001000\"[3]\t\t# lid 11 lmc 0 \"sw\" lid 1 4xSDR
";

#[test]
fn the_graph_and_the_json_give_a_node_the_same_lid() {
    // A CA cabled only on its port 2 is labelled with that port's LID, not port 1's (which
    // has none); the local node with the LID of the port the walk started from.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("port2.topo");
    fs::write(&path, PORT2).unwrap();
    let device = format!(
        "sim:clock=virtual,topology={},node=H-0000000000004000,ports=2",
        path.display()
    );
    let args = ["discover", "--device", &device, "--port", "2"];
    let v: serde_json::Value =
        serde_json::from_str(&ok(&[&args[..], &["--json"]].concat())).unwrap();
    let dot = ok(&[&args[..], &["--dot"]].concat());
    let mut lids = std::collections::BTreeMap::new();
    for n in v["nodes"].as_array().unwrap() {
        let guid = n["guid"].as_str().unwrap();
        let lid = n["lid"].as_u64().unwrap();
        // The graph's label ends `\n<guid>\nlid <lid>`.
        assert!(
            dot.contains(&format!("\\n{guid}\\nlid {lid}\"")),
            "{guid}: JSON says lid {lid}\n{dot}"
        );
        lids.insert(guid.to_owned(), lid);
    }
    let want = [
        ("0x0000000000001000", 1),
        ("0x0000000000002000", 5),
        ("0x0000000000003000", 7),
        ("0x0000000000004000", 11),
    ]
    .map(|(g, l)| (g.to_owned(), l));
    assert_eq!(lids, want.into_iter().collect());
}

#[test]
fn an_xdr_fabric_from_sim_gen_is_discovered_and_its_output_reads_back() {
    let dir = tempfile::tempdir().unwrap();
    let topo = dir.path().join("xdr.topo");
    ok(&[
        "sim",
        "gen",
        "switch:hosts=2,link=4xXDR",
        "-o",
        topo.to_str().unwrap(),
    ]);
    let device = format!("sim:clock=virtual,topology={},node=host-1", topo.display());
    let text = ok(&["discover", "--device", &device]);
    let ports: Vec<&str> = text.lines().filter(|l| l.starts_with('[')).collect();
    assert_eq!(ports.len(), 4, "two links, both ends: {text}");
    assert!(ports.iter().all(|l| l.ends_with(" lid 0 4xXDR")), "{text}");
    // The output is a topology file: read back, its links train to XDR again, and a walk of
    // it prints the same.
    let found = Fabric::parse_str("discovered", &text).expect("the output parses");
    for n in found.node_ids() {
        for p in found.ports_of(n).filter(|&p| found.peer(p).is_some()) {
            assert_eq!(
                found.port(p).state.active.speed_ext2,
                1,
                "{}",
                found.port_label(p)
            );
        }
    }
    let again = dir.path().join("found.topo");
    fs::write(&again, &text).unwrap();
    let device = format!(
        "sim:clock=virtual,topology={},node=H-0000000000100000",
        again.display()
    );
    let undated = |t: &str| t.lines().skip(2).map(str::to_owned).collect::<Vec<_>>();
    assert_eq!(
        undated(&ok(&["discover", "--device", &device])),
        undated(&text)
    );
}

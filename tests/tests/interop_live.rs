//! A live subnet manager: Debian's OpenSM, unmodified, runs as a daemon over this project's
//! libibumad on a fabric `hca sim serve` holds, and the diagnostics run beside it from
//! another node (`hca run --device sim:server=SOCKET,node=NAME`), as they do under ibsim and
//! umad2sim, where the same OpenSM runs too for comparison. On ibsim's
//! `net.2sw2path4hca` and on a generated fat tree (4 leaves of 3 hosts, 2 spines):
//!
//! - OpenSM reaches SUBNET UP (bounded wait) and keeps running;
//! - `sminfo` names it (LID, GUID, priority, MASTER) as under ibsim;
//! - `saquery` answers NodeRecords, PathRecords, PortInfoRecords, LinkRecords and the IsSM
//!   ports with every record (counts written out below from the topology, as OpenSM's SA
//!   makes them): the multi-segment answers exercise RMPP and libibmad's grow-and-retry on
//!   umad_recv's ENOSPC. umad2sim has no RMPP, so under ibsim a multi-MAD answer stops after
//!   its first MAD: ibsim's records must be the first of ours, field by field where both
//!   worlds agree, and PathRecords in every field (the rate of a path to or from a switch,
//!   which OpenSM takes from the switch's port 0, included);
//! - `ibnetdiscover` from the other node prints what it prints under ibsim, and OpenSM
//!   assigned as many LIDs;
//! - the SM's port has IsSM while OpenSM runs and loses it when OpenSM exits (the SMInfo
//!   query then fails, as under ibsim);
//! - SIGTERM stops OpenSM, then the server: both exit 0, the socket is removed, the saved
//!   state is a configured fabric (every port ACTIVE, LIDs unique, every CA reaches every
//!   other), and no process of the test is left.
//!
//! And traps: with OpenSM's periodic sweep off (`-s 0`), a spine's port to a leaf (the
//! leaf's uplink its route to the SM does not use) disabled and enabled again with
//! `ibportstate` makes the leaf, whose port went down under it, send trap 128 (link state
//! change) to the SM (the spine, which the SM's own Set changed, sends none); each trap makes
//! OpenSM re-sweep. With the uplink down the leaf's port is Down and the SA still has every
//! node (the leaf keeps its other uplink); enabled again, the port is Active. (ibsim 0.10
//! sends no trap for a PortInfo Set, so its OpenSM learns nothing without a sweep: this test
//! has no ibsim half.)

use std::path::Path;
use std::time::Instant;

use hca_tests::interop::{self, Ibsim, Run, WorkDir, normalize_ibnetdiscover};
use hca_tests::live::{self, SaRecord, Served, sa_records};

/// What OpenSM's SA must answer on a fabric, written out from the topology.
struct Expected {
    /// Switches plus cabled CA ports: one NodeRecord and one LID each (LMC 0).
    nodes: usize,
    /// `saquery -p`: every ordered pair of those end ports, itself included.
    paths: usize,
    /// Every switch port (0 ..= N) plus every cabled CA port.
    port_infos: usize,
    /// Both directions of every cable.
    links: usize,
}

struct Case {
    name: &'static str,
    topology: std::path::PathBuf,
    /// Where OpenSM runs.
    sm_node: &'static str,
    /// Where the diagnostics run.
    tool_node: &'static str,
    expected: Expected,
}

/// OpenSM's priority in the tests (not the default 0, so that sminfo shows ours).
const PRIORITY: u8 = 7;

fn example() -> Case {
    // 2 switches of 8 ports, 4 CAs of 2 ports with port 1 cabled; 4 CA links and 2
    // switch-to-switch links.
    Case {
        name: "net.2sw2path4hca",
        topology: Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../sim/tests/net-examples/net.2sw2path4hca"),
        sm_node: "Hca1",
        tool_node: "Hca2",
        expected: Expected {
            nodes: 6,
            paths: 36,
            port_infos: 2 * 9 + 4,
            links: 2 * 6,
        },
    }
}

fn fat_tree(work: &WorkDir) -> Case {
    // 4 leaves of 5 ports (3 hosts, 2 uplinks), 2 spines of 4 ports, 12 hosts of 1 port;
    // 12 host links and 8 leaf-to-spine links.
    let c = interop::generated(work, "ft12", "fat-tree:leaves=4,hosts=3,spines=2");
    Case {
        name: "fat-tree:leaves=4,hosts=3,spines=2",
        topology: c.topology,
        sm_node: "host-1",
        tool_node: "host-12",
        expected: Expected {
            nodes: 18,
            paths: 18 * 18,
            port_infos: 4 * 6 + 2 * 5 + 12,
            links: 2 * 20,
        },
    }
}

/// Whether NodeRecord `n` is of node `name`: its description is the name, or what the
/// topology file's comment gives ("host-1 HCA-1").
fn is_node(n: &SaRecord, name: &str) -> bool {
    let d = n.get("NodeDescription");
    d == name || d.strip_prefix(name).is_some_and(|r| r.starts_with(' '))
}

/// What `sminfo` says: (SM LID, SM GUID, priority, state).
fn sminfo(r: &Run) -> (String, String, String, String) {
    let w: Vec<&str> = r.stdout.split_whitespace().collect();
    let after = |k: &[&str]| {
        w.windows(k.len() + 1)
            .find(|x| x[..k.len()] == *k)
            .map_or_else(
                || panic!("no {k:?} in {:?}", r.stdout),
                |x| x[k.len()].trim_end_matches(',').to_owned(),
            )
    };
    (
        after(&["sm", "lid"]),
        after(&["sm", "guid"]),
        after(&["priority"]),
        w.last().copied().unwrap_or_default().to_owned(),
    )
}

/// The SA queries compared: the saquery arguments, the record kind, the fields that name
/// a record, the fields both worlds must agree on (beyond the key; `None`: every field),
/// and the count expected.
struct Query {
    args: &'static [&'static str],
    kind: &'static str,
    key: &'static [&'static str],
    same: Option<&'static [&'static str]>,
    count: fn(&Expected) -> usize,
}

const QUERIES: [Query; 5] = [
    Query {
        args: &["-N"],
        kind: "NodeRecord",
        key: &["lid", "port_guid"],
        same: Some(&[
            "node_type",
            "num_ports",
            "node_guid",
            "port_num",
            "NodeDescription",
        ]),
        count: |e| e.nodes,
    },
    Query {
        args: &["-p"],
        kind: "PathRecord",
        key: &["slid", "dlid"],
        // Every field, the rate of a path to or from a switch included: OpenSM takes it from
        // the switch's port 0, which reports 4x SDR in both worlds (10 Gb/s).
        same: None,
        count: |e| e.paths,
    },
    Query {
        args: &["PortInfoRecord"],
        kind: "PortInfoRecord",
        key: &["EndPortLid", "PortNum"],
        same: Some(&["Lid", "SMLid", "LinkState"]),
        count: |e| e.port_infos,
    },
    Query {
        args: &["LinkRecord"],
        kind: "LinkRecord",
        key: &["FromLID", "FromPort", "ToLID", "ToPort"],
        same: Some(&[]),
        count: |e| e.links,
    },
    Query {
        args: &["-s"],
        kind: "PortInfoRecord",
        key: &["EndPortLid", "PortNum"],
        same: Some(&["base_lid", "master_sm_base_lid", "capability_mask"]),
        count: |_| 1,
    },
];

/// Our records of `q`: the expected count, LIDs from the SM's assignment, distinct keys.
fn check_ours(case: &Case, q: &Query, r: &Run) -> Vec<SaRecord> {
    let what = format!("{}: ours: saquery {}", case.name, q.args.join(" "));
    let recs = sa_records(&r.stdout);
    assert!(
        recs.iter().all(|x| x.kind == q.kind),
        "{what}: only {}s:\n{}",
        q.kind,
        r.stdout
    );
    assert_eq!(
        recs.len(),
        (q.count)(&case.expected),
        "{what}: records\n{}",
        r.stdout
    );
    let keys: std::collections::BTreeSet<Vec<String>> = recs.iter().map(|x| x.key(q.key)).collect();
    assert_eq!(keys.len(), recs.len(), "{what}: every record once");
    recs
}

/// ibsim's records of `q` are the first of ours (umad2sim delivers only the first MAD of a
/// multi-MAD answer), equal in the key and the `same` fields (or in every field).
fn compare_with_ibsim(case: &Case, q: &Query, ours: &[SaRecord], theirs: &Run) {
    let what = format!("{}: saquery {}", case.name, q.args.join(" "));
    // The records the first MAD holds whole; saquery prints the rest of the length the RMPP
    // header announced as zeros.
    let recs: Vec<SaRecord> = sa_records(&theirs.stdout)
        .into_iter()
        .take_while(|r| r.key(q.key).iter().any(|v| v != "0"))
        .collect();
    assert!(
        !recs.is_empty(),
        "{what}: ibsim answers at least one record:\n{}",
        theirs.stdout
    );
    assert!(
        recs.len() <= ours.len(),
        "{what}: ibsim has more records than ours"
    );
    for (i, (a, b)) in ours.iter().zip(&recs).enumerate() {
        let Some(same) = q.same else {
            assert_eq!(a, b, "{what}: record {i}, every field (ours, ibsim)");
            continue;
        };
        for f in q.key.iter().chain(same) {
            assert_eq!(
                a.get(f),
                b.get(f),
                "{what}: record {i} field {f} (ours, ibsim)"
            );
        }
    }
    eprintln!(
        "{what}: ours {} records, ibsim {} (its first MAD)",
        ours.len(),
        recs.len()
    );
}

/// ibnetdiscover outputs are the same node records (the blank-line separated blocks, each
/// line for line), in any order: libibnetdisc keeps several SMPs in flight and lists nodes as
/// their answers arrive, which on a live fabric is not always in the order they were sent.
fn same_nodes(what: &str, ours: &str, theirs: &str) {
    let blocks = |t: &str| {
        let mut v: Vec<String> = normalize_ibnetdiscover(t)
            .split("\n\n")
            .map(|b| b.trim().to_owned())
            .filter(|b| !b.is_empty())
            .collect();
        v.sort();
        v
    };
    let (a, b) = (blocks(ours), blocks(theirs));
    assert_eq!(
        a.len(),
        b.len(),
        "{what}: as many records as ibsim's\n{ours}\n{theirs}"
    );
    for (x, y) in a.iter().zip(&b) {
        assert_eq!(x, y, "{what}: a node record (ours, ibsim)");
    }
}

fn has_is_sm(portinfo: &Run) -> bool {
    portinfo.stdout.lines().any(|l| l.trim() == "IsSM")
}

/// The PortInfo of `lid` once it shows IsSM, or the last one read after 10 s. The library sets
/// the bit from its issm watcher thread a moment after the SM opens the file (README: "the
/// bit follows open and close a moment later"), which a loaded machine can stretch past the
/// SM's first sweep.
fn portinfo_with_is_sm(served: &Served, at: &str, smpquery: &Path, lid: &str) -> Run {
    let deadline = Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let portinfo = served.run(at, smpquery, &["portinfo", lid]).ok();
        if has_is_sm(&portinfo) || Instant::now() >= deadline {
            return portinfo;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// What the ibsim world answered, for comparison.
struct Theirs {
    sminfo: Run,
    saquery: Vec<Run>,
    ca_path: Run,
    ibnetdiscover: Run,
    portinfo: Run,
    after_stop: Run,
}

/// Runs the ibsim world; `sm_lid` is the SM's LID and `path` the `--src-to-dst` pair that
/// ours answered.
fn ibsim_world(case: &Case, work: &WorkDir, sm_lid: &str, path: &str) -> Option<Theirs> {
    let opensm = interop::find_program("opensm")?;
    let diag = |p: &str| interop::find_program(p).expect("checked by the caller");
    let sim = Ibsim::start(work, &case.topology)?;
    let t = Instant::now();
    let sm = live::ibsim_opensm(&sim, work, &opensm, case.sm_node, PRIORITY);
    eprintln!("{}: ibsim: SUBNET UP after {:?}", case.name, t.elapsed());
    let at = case.tool_node;
    let sminfo = sim.run(&diag("sminfo"), at, &[]).ok();
    let saquery = QUERIES
        .iter()
        .map(|q| sim.run(&diag("saquery"), at, q.args).ok())
        .collect();
    let ca_path = sim
        .run(&diag("saquery"), at, &["-p", "--src-to-dst", path])
        .ok();
    let ibnetdiscover = sim.run(&diag("ibnetdiscover"), at, &[]).ok();
    let portinfo = sim.run(&diag("smpquery"), at, &["portinfo", sm_lid]).ok();
    let (status, _) = sm.stop();
    assert!(
        status.success(),
        "{}: opensm under ibsim exits 0 on SIGTERM: {status}",
        case.name
    );
    let after_stop = sim.run(&diag("sminfo"), at, &[]);
    Some(Theirs {
        sminfo,
        saquery,
        ca_path,
        ibnetdiscover,
        portinfo,
        after_stop,
    })
}

fn live_sm(case: &Case, work: &WorkDir) {
    let programs =
        interop::need_programs(["opensm", "sminfo", "saquery", "ibnetdiscover", "smpquery"]);
    let [
        Some(opensm),
        Some(sminfo_p),
        Some(saquery),
        Some(ibnetdiscover),
        Some(smpquery),
    ] = programs
    else {
        return;
    };
    let started = Instant::now();
    let Some(served) = Served::start(work, &case.topology) else {
        return;
    };
    let mut sm = live::our_opensm(&served, work, &opensm, case.sm_node, PRIORITY, &[]);
    eprintln!(
        "{}: ours: SUBNET UP after {:?}",
        case.name,
        started.elapsed()
    );
    let at = case.tool_node;
    assert!(
        !sm.log().contains(" ERR "),
        "{}: OpenSM logged errors:\n{}",
        case.name,
        live::tail(&sm.log(), 40)
    );

    // sminfo: our OpenSM, MASTER, at the LID of its port.
    let info = served.run(at, &sminfo_p, &[]).ok();
    let (lid, guid, priority, state) = sminfo(&info);
    assert_eq!(
        priority,
        PRIORITY.to_string(),
        "{}: {}",
        case.name,
        info.stdout
    );
    assert_eq!(state, "SMINFO_MASTER", "{}: {}", case.name, info.stdout);
    let portinfo = portinfo_with_is_sm(&served, at, &smpquery, &lid);
    assert!(
        has_is_sm(&portinfo),
        "{}: IsSM on the SM's port:\n{}",
        case.name,
        portinfo.stdout
    );

    // The SA, with every record.
    let mut ours = Vec::new();
    for q in &QUERIES {
        let r = served.run(at, &saquery, q.args).ok();
        ours.push(check_ours(case, q, &r));
    }
    let sm_record = &ours[4][0];
    assert_eq!(
        sm_record.get("EndPortLid"),
        lid,
        "{}: the IsSM port is the SM's",
        case.name
    );
    let nodes = &ours[0];
    let sm_node = nodes
        .iter()
        .find(|n| n.get("lid") == lid)
        .unwrap_or_else(|| panic!("{}: a NodeRecord at the SM's LID {lid}", case.name));
    // The node's description: its name, or what the file's comment says ("host-1 HCA-1").
    assert!(
        is_node(sm_node, case.sm_node),
        "{}: the SM's node: {sm_node:?}",
        case.name
    );
    assert_eq!(
        u64::from_str_radix(sm_node.get("port_guid").trim_start_matches("0x"), 16).ok(),
        u64::from_str_radix(guid.trim_start_matches("0x"), 16).ok(),
        "{}: sminfo's GUID is the SM port's",
        case.name
    );

    // One path between two CAs (the SM's and the tools' nodes): a one-MAD answer, compared
    // whole with ibsim's below.
    let tool_lid = nodes
        .iter()
        .find(|n| is_node(n, case.tool_node))
        .unwrap_or_else(|| panic!("{}: a NodeRecord of {}", case.name, case.tool_node))
        .get("lid")
        .to_owned();
    let pair = format!("{lid}:{tool_lid}");
    let ca_path = served
        .run(at, &saquery, &["-p", "--src-to-dst", &pair])
        .ok();
    let ca_path_recs = sa_records(&ca_path.stdout);
    assert_eq!(ca_path_recs.len(), 1, "{}: {}", case.name, ca_path.stdout);
    assert_eq!(
        ca_path_recs[0].key(&["slid", "dlid"]),
        [lid.clone(), tool_lid.clone()],
        "{}: the path asked for",
        case.name
    );

    // ibnetdiscover from the other node, while the SM runs.
    let disc = served.run(at, &ibnetdiscover, &[]).ok();
    let lids = interop::ibnetdiscover_lids(&disc.stdout);
    assert_eq!(
        lids.len(),
        case.expected.nodes,
        "{}: LIDs assigned:\n{}",
        case.name,
        disc.stdout
    );
    sm.assert_running();

    // Stop OpenSM: its port loses IsSM, and nothing answers SMInfo any more.
    let (status, log) = sm.stop();
    assert!(
        status.success(),
        "{}: opensm exits 0 on SIGTERM: {status}",
        case.name
    );
    assert!(
        log.contains("Exiting SM"),
        "{}: {}",
        case.name,
        live::tail(&log, 10)
    );
    let errors: Vec<&str> = log.lines().filter(|l| l.contains(" ERR ")).collect();
    assert!(
        errors.is_empty(),
        "{}: OpenSM logged errors while it served: {errors:#?}",
        case.name
    );
    let portinfo_after = served.run(at, &smpquery, &["portinfo", &lid]).ok();
    assert!(
        !has_is_sm(&portinfo_after),
        "{}: IsSM cleared when OpenSM exits:\n{}",
        case.name,
        portinfo_after.stdout
    );
    let after_stop = served.run(at, &sminfo_p, &[]);
    assert_ne!(
        after_stop.code,
        Some(0),
        "{}: no SM after the stop: {}",
        case.name,
        after_stop.stdout
    );

    // Stop the server: it saves a configured fabric and removes its socket.
    let socket = served.socket().to_owned();
    let server_pid = served.pid();
    let (_, report) = {
        let state = served.state().to_owned();
        let topology = case.topology.clone();
        let (status, out) = served.stop();
        assert!(
            status.success(),
            "{}: hca sim serve exits 0 on SIGTERM: {status}\n{out}",
            case.name
        );
        assert!(out.contains("SIGTERM: stopping the fabric server"), "{out}");
        assert!(!socket.exists(), "{}: the socket is removed", case.name);
        interop::check_state(&topology, &state)
    };
    assert!(report.ok(), "{}: {report}", case.name);
    assert_eq!(report.lids, case.expected.nodes, "{}: {report}", case.name);
    let left = live::mentioning(&work.path().display().to_string());
    assert!(
        left.is_empty(),
        "{}: processes left (server was {server_pid}): {left:#?}",
        case.name
    );
    eprintln!(
        "{}: ours done after {:?}; {report}",
        case.name,
        started.elapsed()
    );

    // The same under ibsim.
    let t = Instant::now();
    let Some(theirs) = ibsim_world(case, work, &lid, &pair) else {
        return;
    };
    assert_eq!(
        sminfo(&info),
        sminfo(&theirs.sminfo),
        "{}: sminfo: SM LID, GUID, priority, state (ours, ibsim)",
        case.name
    );
    for ((q, a), b) in QUERIES.iter().zip(&ours).zip(&theirs.saquery) {
        compare_with_ibsim(case, q, a, b);
    }
    // Among the PathRecords compared, one ends at a switch: its rate comes from the switch's
    // port 0, 4X SDR in both worlds, so 0x83 (selector "exactly" 0x80 | OpenSM's
    // IB_PATH_RECORD_RATE_10_GBS 3, `ib_types.h`), not 0x82 (2.5 Gb/s).
    let switch_lids: Vec<&str> = ours[0]
        .iter()
        .filter(|n| n.get("node_type") == "Switch")
        .map(|n| n.get("lid"))
        .collect();
    let paths = QUERIES
        .iter()
        .position(|q| q.kind == "PathRecord")
        .expect("PathRecords are queried");
    let compared = sa_records(&theirs.saquery[paths].stdout);
    let to_switch = compared
        .iter()
        .find(|r| switch_lids.contains(&r.get("dlid")))
        .unwrap_or_else(|| {
            panic!(
                "{}: ibsim's first PathRecords reach no switch:\n{}",
                case.name, theirs.saquery[paths].stdout
            )
        });
    assert_eq!(
        to_switch.get("rate"),
        "0x83",
        "{}: rate of a path to a switch (10 Gb/s)",
        case.name
    );
    let their_path = sa_records(&theirs.ca_path.stdout);
    assert_eq!(
        ca_path_recs, their_path,
        "{}: the CA-to-CA PathRecord, every field (ours, ibsim)",
        case.name
    );
    same_nodes(
        &format!("{}: ibnetdiscover with the SM running", case.name),
        &disc.stdout,
        &theirs.ibnetdiscover.stdout,
    );
    assert_eq!(
        lids,
        interop::ibnetdiscover_lids(&theirs.ibnetdiscover.stdout),
        "{}: the LIDs OpenSM assigned",
        case.name
    );
    assert!(
        has_is_sm(&theirs.portinfo),
        "{}: ibsim: IsSM while OpenSM runs",
        case.name
    );
    assert_eq!(
        after_stop.code, theirs.after_stop.code,
        "{}: sminfo fails the same way after the stop",
        case.name
    );
    let left = live::mentioning(&work.path().display().to_string());
    assert!(
        left.is_empty(),
        "{}: processes left under ibsim: {left:#?}",
        case.name
    );
    eprintln!("{}: ibsim world took {:?}", case.name, t.elapsed());
}

#[test]
fn a_live_opensm_serves_the_diags_on_net_2sw2path4hca_as_under_ibsim() {
    let work = WorkDir::new("live-example");
    live_sm(&example(), &work);
}

#[test]
fn a_live_opensm_serves_the_diags_on_a_fat_tree_as_under_ibsim() {
    let work = WorkDir::new("live-fat-tree");
    let case = fat_tree(&work);
    live_sm(&case, &work);
}

/// Runs `program args` at `node` and returns what it printed; panics if it failed.
fn ok_at(served: &Served, node: &str, program: &Path, args: &[&str]) -> String {
    served.run(node, program, args).ok().stdout
}

/// The output port `ibroute`'s dump `lft` gives for the decimal LID `lid`.
fn route_port(lft: &str, lid: &str) -> u8 {
    let lid: u16 = lid.parse().expect("a decimal LID");
    let key = format!("0x{lid:04x} ");
    lft.lines()
        .find_map(|l| l.strip_prefix(&key))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no route to LID {lid} in\n{lft}"))
}

#[test]
fn traps_from_a_switch_drive_a_live_opensm_that_does_not_sweep() {
    let programs =
        interop::need_programs(["opensm", "saquery", "smpquery", "ibportstate", "ibroute"]);
    let [
        Some(opensm),
        Some(saquery),
        Some(smpquery),
        Some(ibportstate),
        Some(ibroute),
    ] = programs
    else {
        return;
    };
    let work = WorkDir::new("live-traps");
    let case = fat_tree(&work);
    let Some(served) = Served::start(&work, &case.topology) else {
        return;
    };
    let mut sm = live::our_opensm(
        &served,
        &work,
        &opensm,
        case.sm_node,
        PRIORITY,
        &["-s", "0"],
    );
    let at = case.tool_node;
    let nodes = sa_records(&ok_at(&served, at, &saquery, &["-N"]));
    assert_eq!(nodes.len(), case.expected.nodes);
    let lid_of = |name: &str| {
        nodes
            .iter()
            .find(|n| is_node(n, name))
            .unwrap_or_else(|| panic!("a NodeRecord of {name}"))
            .get("lid")
            .to_owned()
    };
    // leaf-2's uplinks (generated file): port 4 to spine-1's port 2, port 5 to spine-2's port
    // 2. The SM takes down the one leaf-2's route to the SM does not use, from the spine's
    // side. A SubnSet leaves the set switch's own PortStateChange alone (IBA, as ibsim has
    // it): the trap comes from leaf-2, whose port went down under it.
    let (leaf, sm_lid) = (lid_of("leaf-2"), lid_of(case.sm_node));
    let lft = ok_at(&served, at, &ibroute, &[&leaf]);
    let (spine, leaf_port) = match route_port(&lft, &sm_lid) {
        4 => ("spine-2", "5"),
        5 => ("spine-1", "4"),
        p => panic!("leaf-2 reaches the SM through port {p}:\n{lft}"),
    };
    let spine_lid = lid_of(spine);
    let traps = |log: &str| log.matches("num:128 (Link state change)").count();
    let sweeps = |log: &str| log.matches("SUBNET UP").count();
    let link_state = |port: &str| {
        let pi = ok_at(&served, at, &smpquery, &["portinfo", &leaf, port]);
        pi.lines()
            .find(|l| l.starts_with("LinkState:"))
            .and_then(|l| l.rsplit('.').next())
            .map_or_else(|| panic!("no LinkState in\n{pi}"), str::to_owned)
    };
    assert_eq!(sweeps(&sm.log()), 1);

    ok_at(&served, at, &ibportstate, &[&spine_lid, "2", "disable"]);
    let log = sm.wait_log("trap 128 from leaf-2 and a sweep", |l| {
        traps(l) == 1 && sweeps(l) == 2
    });
    assert!(
        log.contains(&format!("from LID:{leaf} ")),
        "the trap's producer is leaf-2: {}",
        live::tail(&log, 20)
    );
    assert!(
        !log.contains(&format!("from LID:{spine_lid} ")),
        "{spine}, which the SM set, does not trap: {}",
        live::tail(&log, 20)
    );
    assert_eq!(link_state(leaf_port), "Down");
    let now = sa_records(&ok_at(&served, at, &saquery, &["-N"]));
    assert_eq!(
        now.len(),
        case.expected.nodes,
        "no node lost with one uplink"
    );

    ok_at(&served, at, &ibportstate, &[&spine_lid, "2", "enable"]);
    let log = sm.wait_log("trap 128 for the link back and a sweep", |l| {
        traps(l) == 2 && sweeps(l) == 3
    });
    assert!(
        !log.contains(&format!("from LID:{spine_lid} ")),
        "{spine} does not trap for the SM's own Set: {}",
        live::tail(&log, 20)
    );
    assert_eq!(link_state(leaf_port), "Active");

    let (status, log) = sm.stop();
    assert!(status.success());
    assert!(!log.contains(" ERR "), "{}", live::tail(&log, 30));
    let state = served.state().to_owned();
    let (status, out) = served.stop();
    assert!(status.success(), "{out}");
    let (_, report) = interop::check_state(&case.topology, &state);
    assert!(report.ok(), "{report}");
    let left = live::mentioning(&work.path().display().to_string());
    assert!(left.is_empty(), "processes left: {left:#?}");
}

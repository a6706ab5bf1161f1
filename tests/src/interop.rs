//! The interop harness: Debian's OpenSM and infiniband-diags, unmodified, run on this
//! project's `libibumad.so.3` over a simulated fabric ([`Ours`]), and the same programs run
//! under ibsim and umad2sim on the same topology file ([`Ibsim`]), so that a test can compare
//! the two, and check the configured fabric's state ([`Ours::check`]).
//!
//! - [`Ours`] runs a program with `LD_LIBRARY_PATH` pointing at a directory where
//!   `libibumad.so.3` is the built library, `HCA_DEVICE=sim:topology=FILE,node=NAME` (with
//!   `state=FILE` to keep what OpenSM configured for the programs after it), and OpenSM's
//!   cache and temporary directories (`OSM_CACHE_DIR`, `OSM_TMP_DIR`) in a directory of its
//!   own inside the test's work directory.
//! - [`Ibsim`] starts `ibsim -s -n FILE` on a socket name of its own (`IBSIM_SOCKNAME`, the
//!   Linux abstract namespace, so tests running at once never meet), runs programs with
//!   `LD_PRELOAD=libumad2sim.so` and `SIM_HOST` (the node to attach at), OpenSM's cache in a
//!   directory of its own too, and kills ibsim (by its pid) when dropped.
//! - OpenSM's cache is per world and per fabric: `opensm -o` writes `guid2lid` (and
//!   `guid2mkey`, `neighbors`) there and the next OpenSM reads them back (OpenSM's
//!   `osm_db_files.c`, `osm_lid_mgr.c`), so a shared cache would seed one world's LID
//!   assignment with the other's. [`Ours::opensm_once`] and [`Ibsim::opensm_once`] assert the
//!   cache is empty before they run OpenSM, and fail with the end of OpenSM's log.
//! - Every program runs under `timeout -k` ([`limited`]): SIGTERM at its limit, SIGKILL
//!   [`KILL_AFTER`] later (OpenSM handles SIGTERM, so a hang in its exit path would
//!   otherwise hang the test).
//! - [`normalize_ibnetdiscover`] and [`links`] make ibnetdiscover output comparable.
//!
//! Missing programs fail the test under CI (`CI` set) with the Debian package to install, and
//! skip it elsewhere ([`need`]). `hca discover`/`hca bench` and the side-by-side benchmark can
//! use the same runners.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use sim::fabric::Fabric;

/// Where Debian's ibsim-utils puts the umad2sim preload library.
pub const UMAD2SIM: &str = "/usr/lib/x86_64-linux-gnu/umad2sim/libumad2sim.so";

/// The longest any one program may run before the harness gives up on it: well inside
/// nextest's limit for the interop tests (5 minutes, `.config/nextest.toml`), so that the
/// harness, not nextest, stops a hung program and says what it printed.
pub const PROGRAM_LIMIT: Duration = Duration::from_secs(120);

/// How long after SIGTERM at its limit a program still running gets SIGKILL.
pub const KILL_AFTER: Duration = Duration::from_secs(10);

/// `Some(())` when `ok`; otherwise fail under CI naming the package, or say the test is
/// skipped and return `None`.
pub fn need(ok: bool, what: &str, package: &str) -> Option<()> {
    if ok {
        return Some(());
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "{what} is missing: install the Debian package {package}"
    );
    eprintln!("skipped: {what} is missing (install the Debian package {package})");
    None
}

/// The path of `program` in the usual places (`/usr/sbin` is often not on a user's PATH).
pub fn find_program(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/usr/bin", "/sbin", "/bin"].map(PathBuf::from))
        .map(|d| d.join(program))
        .find(|p| p.is_file())
}

/// `program` (from `package`), or `None` when the test is skipped.
pub fn need_program(program: &str, package: &str) -> Option<PathBuf> {
    let p = find_program(program);
    need(p.is_some(), program, package)?;
    p
}

/// [`need_program`] for each of `programs`, each looked for in the Debian package that ships
/// it (opensm, ibsim-utils, else infiniband-diags).
pub fn need_programs<const N: usize>(programs: [&str; N]) -> [Option<PathBuf>; N] {
    programs.map(|p| {
        let package = match p {
            "opensm" => "opensm",
            "ibsim" => "ibsim-utils",
            _ => "infiniband-diags",
        };
        need_program(p, package)
    })
}

/// The `libibumad.so` cargo built with the tests (`target/<profile>/deps/`).
pub fn built_lib() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let lib = exe.parent().expect("deps directory").join("libibumad.so");
    assert!(
        lib.exists(),
        "{} is missing: it is built with the hca-tests crate (which depends on umad)",
        lib.display()
    );
    lib
}

/// A directory of its own for one test, removed when dropped.
#[derive(Debug)]
pub struct WorkDir(PathBuf);

impl WorkDir {
    /// A fresh directory named after `name`.
    pub fn new(name: &str) -> WorkDir {
        static N: AtomicU32 = AtomicU32::new(0);
        let d = std::env::temp_dir().join(format!(
            "hca-interop-{}-{}-{name}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("work directory");
        WorkDir(d)
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.0
    }

    /// `name` inside it.
    pub fn join(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("kept {} for the failure", self.0.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// What a program did.
#[derive(Debug, Clone)]
pub struct Run {
    /// The command line, for messages.
    pub what: String,
    /// Exit status code (`None` when killed).
    pub code: Option<i32>,
    /// The signal that killed it, if one did (`timeout -k` itself dies of SIGKILL when it had
    /// to kill the program).
    pub signal: Option<i32>,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
    /// Wall time.
    pub took: Duration,
}

impl Run {
    /// Panics with everything known unless the program exited with 0.
    #[track_caller]
    #[allow(clippy::return_self_not_must_use)]
    pub fn ok(self) -> Run {
        assert_eq!(
            self.code,
            Some(0),
            "{} {} after {:?}:\nstdout:\n{}\nstderr:\n{}",
            self.what,
            self.failure(),
            self.took,
            self.stdout,
            self.stderr
        );
        self
    }

    /// Whether `timeout` stopped it: exit code 124 (SIGTERM at the limit was enough), or
    /// `timeout` itself killed by SIGKILL (coreutils' `timeout -k` re-raises the signal its
    /// program died of, which shells show as 137).
    pub fn timed_out(&self) -> bool {
        self.code == Some(124) || self.signal == Some(libc::SIGKILL)
    }

    /// How it failed, in words.
    fn failure(&self) -> String {
        if self.timed_out() {
            format!("timed out (code {:?}, signal {:?})", self.code, self.signal)
        } else {
            format!("failed (code {:?}, signal {:?})", self.code, self.signal)
        }
    }
}

/// `program` under `timeout -k` (so that a hung program fails the test instead of hanging
/// it): SIGTERM after `limit`, SIGKILL [`KILL_AFTER`] later if it is still running (a program
/// that handles SIGTERM, as OpenSM does, and then hangs in its exit path is killed too); see
/// [`Run::timed_out`].
pub fn limited(program: &Path, limit: Duration) -> Command {
    limited_with(program, limit, KILL_AFTER)
}

fn limited_with(program: &Path, limit: Duration, kill_after: Duration) -> Command {
    let mut c = Command::new("timeout");
    c.arg("-k")
        .arg(format!("{}s", kill_after.as_secs_f64()))
        .arg(format!("{}s", limit.as_secs_f64()))
        .arg(program);
    c
}

/// Panics, listing what it holds, unless `dir` is empty (or missing): OpenSM's cache before
/// an OpenSM run, which must not start from another run's `guid2lid`.
#[track_caller]
pub fn assert_empty_dir(dir: &Path, what: &str) {
    let held: Vec<String> = std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    assert!(
        held.is_empty(),
        "{what}: {} is not empty before OpenSM runs: {held:?}",
        dir.display()
    );
}

/// A fresh directory `WORK/osm-WHO-N` for one world's OpenSM cache.
fn fresh_cache(work: &Path, who: &str) -> PathBuf {
    static N: AtomicU32 = AtomicU32::new(0);
    let d = work.join(format!("osm-{who}-{}", N.fetch_add(1, Ordering::Relaxed)));
    std::fs::create_dir_all(&d).expect("OpenSM's cache directory");
    d
}

/// `opensm -o -s 0 -f LOG`: one sweep, then exit.
pub fn opensm_once_args(log: &Path) -> Vec<String> {
    vec![
        "-o".into(),
        "-s".into(),
        "0".into(),
        "-f".into(),
        log.display().to_string(),
    ]
}

/// `run` (an OpenSM run logging to `log`) if it exited 0; otherwise panics with what it
/// printed and the end of its log (saying so when `timeout` stopped it).
#[track_caller]
pub fn opensm_ok(run: Run, log: &Path) -> Run {
    if run.code != Some(0) {
        let text = std::fs::read(log).map_or_else(
            |e| format!("(cannot read {}: {e})", log.display()),
            |b| String::from_utf8_lossy(&b).into_owned(),
        );
        panic!(
            "{} {} after {:?}:\nstdout:\n{}\nstderr:\n{}\nits log ({}) ends:\n{}",
            run.what,
            run.failure(),
            run.took,
            run.stdout,
            run.stderr,
            log.display(),
            crate::live::tail(&text, 40)
        );
    }
    run
}

/// Runs `cmd` to its end (its standard input empty), `what` naming it in messages.
pub fn run_command(mut cmd: Command, what: String) -> Run {
    let start = Instant::now();
    let out: Output = cmd
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {what}: {e}"));
    Run {
        what,
        code: out.status.code(),
        signal: std::os::unix::process::ExitStatusExt::signal(&out.status),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        took: start.elapsed(),
    }
}

/// Programs on this project's library and a simulated fabric.
#[derive(Debug)]
pub struct Ours {
    lib_dir: PathBuf,
    work: PathBuf,
    cache: PathBuf,
    topology: PathBuf,
    node: String,
    state: Option<PathBuf>,
}

impl Ours {
    /// Programs attached at CA `node` of `topology`, working in `work`, with an OpenSM cache
    /// of their own (a new, empty one for each `Ours::new`).
    pub fn new(work: &WorkDir, topology: &Path, node: &str) -> Ours {
        let lib_dir = work.join("ours-lib");
        std::fs::create_dir_all(&lib_dir).expect("library directory");
        let link = lib_dir.join("libibumad.so.3");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(built_lib(), &link).expect("libibumad.so.3 link");
        Ours {
            lib_dir,
            work: work.path().to_owned(),
            cache: fresh_cache(work.path(), "ours"),
            topology: topology.to_owned(),
            node: node.to_owned(),
            state: None,
        }
    }

    /// Keep the fabric's state in `state` across programs.
    #[must_use]
    pub fn with_state(mut self, state: &Path) -> Ours {
        self.state = Some(state.to_owned());
        self
    }

    /// The same fabric, state and OpenSM cache, attached at `node`.
    #[must_use]
    pub fn at(&self, node: &str) -> Ours {
        Ours {
            lib_dir: self.lib_dir.clone(),
            work: self.work.clone(),
            cache: self.cache.clone(),
            topology: self.topology.clone(),
            node: node.to_owned(),
            state: self.state.clone(),
        }
    }

    /// The `HCA_DEVICE` string.
    pub fn device(&self) -> String {
        let mut d = format!(
            "sim:topology={},node={}",
            self.topology.display(),
            self.node
        );
        if let Some(s) = &self.state {
            let _ = write!(d, ",state={}", s.display());
        }
        d
    }

    /// OpenSM's cache and temporary directory in this world.
    pub fn cache(&self) -> &Path {
        &self.cache
    }

    /// The command for `program` (under `timeout`) with the environment set.
    pub fn command(&self, program: &Path) -> Command {
        let mut c = limited(program, PROGRAM_LIMIT);
        c.env("LD_LIBRARY_PATH", &self.lib_dir)
            .env(ibumad::DEVICE_ENV, self.device())
            .env("OSM_CACHE_DIR", &self.cache)
            .env("OSM_TMP_DIR", &self.cache)
            .current_dir(&self.work);
        c
    }

    /// `opensm -o -s 0 -f LOG` (one sweep), its cache checked empty first; panics with the
    /// end of the log unless it exits 0.
    #[track_caller]
    pub fn opensm_once(&self, opensm: &Path, log: &Path) -> Run {
        assert_empty_dir(&self.cache, "ours: OpenSM's cache");
        let args = opensm_once_args(log);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        opensm_ok(self.run(opensm, &args), log)
    }

    /// Run `program args`.
    pub fn run(&self, program: &Path, args: &[&str]) -> Run {
        let mut c = self.command(program);
        c.args(args);
        run_command(c, format!("ours: {} {}", program.display(), args.join(" ")))
    }

    /// The fabric with the saved state loaded, checked as an SM must leave it.
    pub fn check(&self) -> (Fabric, sim::fabric::check::Report) {
        let state = self.state.as_ref().expect("a state file to check");
        check_state(&self.topology, state)
    }
}

/// The fabric of `topology` with the state saved in `state` loaded, checked as an SM must
/// leave it.
pub fn check_state(topology: &Path, state: &Path) -> (Fabric, sim::fabric::check::Report) {
    let fabric = Fabric::parse_file(topology).expect("topology parses");
    let net = sim::net::Network::new(
        fabric,
        std::sync::Arc::new(sim::Scheduler::new(sim::ClockMode::Virtual)),
    );
    net.load_state(state).expect("the saved state loads");
    let report = net.with_fabric(sim::fabric::check::check);
    (net.with_fabric(Clone::clone), report)
}

/// An ibsim server on a topology file, with umad2sim clients.
#[derive(Debug)]
pub struct Ibsim {
    child: Child,
    sock: String,
    work: PathBuf,
    cache: PathBuf,
    log: PathBuf,
}

impl Ibsim {
    /// Start `ibsim -s -n topology` (`None` when ibsim or umad2sim is missing outside CI).
    pub fn start(work: &WorkDir, topology: &Path) -> Option<Ibsim> {
        Ibsim::start_with(work, topology, &[])
    }

    /// [`Ibsim::start`] with more of ibsim's options before the file (e.g. its table sizes,
    /// `-N`, `-S`, `-P`). Its output goes to `WORK/ibsim-SOCK.log`; it must listen within
    /// 30 s. Its OpenSM cache is a new, empty directory.
    pub fn start_with(work: &WorkDir, topology: &Path, extra: &[&str]) -> Option<Ibsim> {
        static N: AtomicU32 = AtomicU32::new(0);
        let ibsim = need_program("ibsim", "ibsim-utils")?;
        need(Path::new(UMAD2SIM).exists(), UMAD2SIM, "libumad2sim0")?;
        let sock = format!(
            "hca{}x{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        let log_path = work.join(&format!("ibsim-{sock}.log"));
        let log = std::fs::File::create(&log_path).expect("ibsim log");
        let child = crate::orphans::killed_with_parent(&mut Command::new(ibsim))
            .args(["-s", "-n"])
            .args(extra)
            .arg(topology)
            .env("IBSIM_SOCKNAME", &sock)
            .current_dir(work.path())
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("start ibsim");
        let mut sim = Ibsim {
            child,
            sock,
            work: work.path().to_owned(),
            cache: fresh_cache(work.path(), "ibsim"),
            log: log_path,
        };
        sim.wait_ready();
        Some(sim)
    }

    /// Wait until the server's control socket exists (clients retry only every 2 s).
    /// `/proc/net/unix` shows an abstract name with `@` for its NUL bytes: ibsim's name
    /// ends with one.
    fn wait_ready(&mut self) {
        let name = format!("@{}:ctl", self.sock);
        let with_nul = format!("{name}@");
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(30) {
            if let Ok(Some(status)) = self.child.try_wait() {
                let log = std::fs::read_to_string(&self.log).unwrap_or_default();
                panic!("ibsim exited ({status}) before it listened:\n{log}");
            }
            let unix = std::fs::read_to_string("/proc/net/unix").unwrap_or_default();
            if unix
                .lines()
                .any(|l| l.ends_with(&name) || l.ends_with(&with_nul))
            {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        panic!("ibsim did not listen on {name} within 30 s; it printed:\n{log}");
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// OpenSM's cache and temporary directory in this world.
    pub fn cache(&self) -> &Path {
        &self.cache
    }

    /// The command for `program` (under `timeout`), attached at node `host` (its name in
    /// the file).
    pub fn command(&self, program: &Path, host: &str) -> Command {
        let mut c = limited(program, PROGRAM_LIMIT);
        self.environment(&mut c, host);
        c
    }

    /// The command for `program` attached at `host`, not under `timeout`: for a daemon the
    /// caller stops itself (its pid is the program's).
    pub fn daemon_command(&self, program: &Path, host: &str) -> Command {
        let mut c = Command::new(program);
        self.environment(&mut c, host);
        c
    }

    fn environment(&self, c: &mut Command, host: &str) {
        c.env("LD_PRELOAD", UMAD2SIM)
            .env("IBSIM_SOCKNAME", &self.sock)
            .env("SIM_HOST", host)
            .env("OSM_CACHE_DIR", &self.cache)
            .env("OSM_TMP_DIR", &self.cache)
            .current_dir(&self.work);
    }

    /// `opensm -o -s 0 -f LOG` at `host` (one sweep), its cache checked empty first; panics
    /// with the end of the log unless it exits 0.
    #[track_caller]
    pub fn opensm_once(&self, opensm: &Path, host: &str, log: &Path) -> Run {
        assert_empty_dir(&self.cache, "ibsim: OpenSM's cache");
        let args = opensm_once_args(log);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        opensm_ok(self.run(opensm, host, &args), log)
    }

    /// Run `program args` attached at `host`.
    pub fn run(&self, program: &Path, host: &str, args: &[&str]) -> Run {
        let mut c = self.command(program, host);
        c.args(args);
        run_command(
            c,
            format!(
                "ibsim: {} {} (at {host})",
                program.display(),
                args.join(" ")
            ),
        )
    }
}

impl Drop for Ibsim {
    fn drop(&mut self) {
        // Only the process this harness started, by its pid.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// ibnetdiscover output without what differs between two runs on the same fabric: the
/// `generated on <date>` line. Nothing else is removed (the caller attaches both runs at the
/// same node).
pub fn normalize_ibnetdiscover(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for l in text
        .lines()
        .filter(|l| !l.starts_with("# Topology file: generated on"))
    {
        out.push_str(l.trim_end());
        out.push('\n');
    }
    out
}

/// Distinct non-zero LIDs of the switches and CA ports in an ibnetdiscover output: the LIDs
/// an SM assigned, as ibnetdiscover saw them.
pub fn ibnetdiscover_lids(text: &str) -> BTreeSet<u16> {
    let mut lids = BTreeSet::new();
    for l in text.lines() {
        // Switch records: "... base port 0 lid N lmc M"; CA ports: "# lid N lmc M ...".
        let is_switch = l.starts_with("Switch");
        if !is_switch && !l.starts_with('[') {
            continue;
        }
        let words: Vec<&str> = l.split_whitespace().collect();
        if let Some(w) = words.windows(2).find(|w| w[0] == "lid") {
            if let Ok(n) = w[1].parse::<u16>() {
                if n != 0 && (is_switch || l.contains("lmc")) {
                    lids.insert(n);
                }
            }
        }
    }
    lids
}

/// A fabric's links as (GUID, port, GUID, port), smaller end first, with the node types
/// and port counts: what ibnetdiscover must find of a topology file. Switches are named by
/// their GUID, CAs by their node GUID.
pub fn links(fabric: &Fabric) -> BTreeSet<(u64, u8, u64, u8)> {
    let mut out = BTreeSet::new();
    for node in fabric.node_ids() {
        for port in fabric.ports_of(node) {
            let Some(peer) = fabric.peer(port) else {
                continue;
            };
            let here = (fabric.node(node).guid(), fabric.port(port).num());
            let there_port = fabric.port(peer);
            let there = (fabric.node(there_port.node()).guid(), there_port.num());
            let (lo, hi) = if here <= there {
                (here, there)
            } else {
                (there, here)
            };
            out.insert((lo.0, lo.1, hi.0, hi.1));
        }
    }
    out
}

/// (GUID, type (1 CA, 2 switch, 3 router), ports) of every node.
pub fn nodes(f: &Fabric) -> BTreeSet<(u64, u8, u8)> {
    f.node_ids()
        .map(|n| {
            (
                f.node(n).guid(),
                f.node(n).kind() as u8,
                f.node(n).num_ports(),
            )
        })
        .collect()
}

/// The fabric an ibnetdiscover output describes.
pub fn parse_ibnetdiscover(text: &str) -> Fabric {
    Fabric::parse_str("ibnetdiscover output", text)
        .unwrap_or_else(|e| panic!("ibnetdiscover output parses: {e}\n{text}"))
}

/// `text` (an ibnetdiscover/ibsim topology) without the link at `node` port `port`: both
/// port lines of the cable go.
pub fn drop_link(text: &str, node: &str, port: u8) -> String {
    let f = Fabric::parse_str("topology", text).expect("topology parses");
    let n = f.node_by_name(node).expect("node in the topology");
    let p = f.port_id(n, port).expect("port of the node");
    let peer = f.peer(p).expect("the port is cabled");
    let peer_node = f.name(f.port(peer).node()).to_owned();
    let peer_port = f.port(peer).num();
    let mut out = String::new();
    let mut current = String::new();
    for line in text.lines() {
        let t = line.trim_start();
        if let Some(name) = record_name(t) {
            current = name;
        }
        let drop = t.starts_with('[')
            && ((current == node && port_of_line(t) == Some(port))
                || (current == peer_node && port_of_line(t) == Some(peer_port)));
        if !drop {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// The quoted name of a node record's header line.
fn record_name(line: &str) -> Option<String> {
    let kw = ["Switch", "Hca", "Ca", "Rt"];
    if !kw.iter().any(|k| line.starts_with(k)) {
        return None;
    }
    let start = line.find('"')? + 1;
    let end = start + line[start..].find('"')?;
    Some(line[start..end].to_owned())
}

/// The local port of a `[p]...` link line.
fn port_of_line(line: &str) -> Option<u8> {
    let end = line.find(']')?;
    line[1..end].parse().ok()
}

/// A fabric the interop tests run on: a topology file and the CA both simulators attach at.
#[derive(Debug, Clone)]
pub struct Case {
    /// A short name for messages.
    pub name: String,
    /// The topology file.
    pub topology: PathBuf,
    /// The CA (its name in the file) the programs attach at.
    pub node: String,
    /// The ports the test uncabled, as (node name, port): both ends of each link it took out
    /// of the file it started from (the dropped-link case; empty for the others).
    pub dropped: Vec<(String, u8)>,
}

/// What a fabric check ([`sim::fabric::check::check`]) must have walked on a configured
/// fabric, computed from the topology file: so that a check walking nothing cannot pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Walked {
    /// Both ends of every link, and every switch's port 0.
    pub cabled_ports: usize,
    /// Switches plus cabled CA ports (LMC 0: one LID each).
    pub lids: usize,
    /// CA ports with a link.
    pub ca_ports: usize,
    /// Ordered pairs of distinct such CA ports.
    pub pairs: usize,
}

impl Walked {
    /// The counts for the fabric of `topology`.
    pub fn of(topology: &Path) -> Walked {
        let f = Fabric::parse_file(topology).expect("topology parses");
        let mut switches = 0;
        let mut ca_ports = 0;
        for n in f.node_ids() {
            if f.node(n).kind() == sim::fabric::NodeType::Switch {
                switches += 1;
            } else {
                ca_ports += f.ports_of(n).filter(|&p| f.peer(p).is_some()).count();
            }
        }
        Walked {
            cabled_ports: 2 * f.link_count() + switches,
            lids: switches + ca_ports,
            ca_ports,
            pairs: ca_ports * ca_ports.saturating_sub(1),
        }
    }

    /// The same counts from a check's report.
    pub fn from_report(r: &sim::fabric::check::Report) -> Walked {
        Walked {
            cabled_ports: r.cabled_ports,
            lids: r.lids,
            ca_ports: r.ca_ports,
            pairs: r.pairs,
        }
    }
}

/// ibsim's example fabrics (`sim/tests/net-examples/`, copies of Debian's
/// `/usr/share/doc/ibsim-utils/net-examples/`), attached at `Hca1`.
pub fn net_examples() -> Vec<Case> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../sim/tests/net-examples");
    [
        "net",
        "net.1",
        "net.2sw2path",
        "net.2sw2path4hca",
        "net.2sw2path4hca2port",
    ]
    .iter()
    .map(|n| Case {
        name: (*n).to_owned(),
        topology: dir.join(n),
        node: "Hca1".into(),
        dropped: Vec::new(),
    })
    .collect()
}

/// A fat tree from the generator (`spec`, e.g. `fat-tree:leaves=36,hosts=18,spines=18`),
/// written into `work`, attached at `host-1`.
pub fn generated(work: &WorkDir, name: &str, spec: &str) -> Case {
    let path = work.join(&format!("{name}.topo"));
    let mut text = Vec::new();
    sim::fabric::generator::generate_text(spec, &mut text).expect("the generator takes the spec");
    std::fs::write(&path, text).expect("write the topology");
    Case {
        name: name.to_owned(),
        topology: path,
        node: "host-1".into(),
        dropped: Vec::new(),
    }
}

/// The 648-host fat tree: 36 leaves of 18 hosts, 18 spines (702 nodes, 1296 links).
pub fn fat_tree_648(work: &WorkDir) -> Case {
    generated(work, "ft648", "fat-tree:leaves=36,hosts=18,spines=18")
}

/// A small fat tree (4 leaves of 3 hosts, 2 spines) with the first uplink of `leaf-1`
/// (its port 4) taken out; `dropped` names both ends.
pub fn dropped_link(work: &WorkDir) -> Case {
    let mut text = Vec::new();
    sim::fabric::generator::generate_text("fat-tree:leaves=4,hosts=3,spines=2", &mut text)
        .expect("the generator takes the spec");
    let text = String::from_utf8_lossy(&text).into_owned();
    let full = Fabric::parse_str("topology", &text).expect("topology parses");
    let leaf = full.node_by_name("leaf-1").expect("leaf-1");
    let peer = full
        .peer(full.port_id(leaf, 4).expect("leaf-1 port 4"))
        .expect("leaf-1 port 4 is cabled");
    let spine = (
        full.name(full.port(peer).node()).to_owned(),
        full.port(peer).num(),
    );
    let text = drop_link(&text, "leaf-1", 4);
    let path = work.join("dropped.topo");
    std::fs::write(&path, text).expect("write the topology");
    Case {
        name: "dropped-link".into(),
        topology: path,
        node: "host-1".into(),
        dropped: vec![("leaf-1".into(), 4), spine],
    }
}

/// Every case of deliverable 2: the examples, the 648-host fat tree, the dropped link.
pub fn all_cases(work: &WorkDir) -> Vec<Case> {
    let mut v = net_examples();
    v.push(fat_tree_648(work));
    v.push(dropped_link(work));
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A program that ignores SIGTERM (as one hung in a SIGTERM handler's exit path does) is
    /// killed `kill_after` past its limit, rather than left running.
    #[test]
    fn limited_kills_a_program_that_ignores_sigterm() {
        let mut c = limited_with(
            Path::new("/bin/sh"),
            Duration::from_millis(200),
            Duration::from_millis(300),
        );
        c.args(["-c", "trap '' TERM; sleep 20; exit 3"]);
        let r = run_command(c, "sh ignoring SIGTERM".into());
        assert!(r.timed_out(), "{r:?}");
        assert_eq!(
            r.signal,
            Some(libc::SIGKILL),
            "SIGKILL after SIGTERM was ignored: {r:?}"
        );
        assert!(
            r.took < Duration::from_secs(10),
            "killed, not waited for: {r:?}"
        );
    }

    /// A program that obeys SIGTERM ends at its limit with `timeout`'s code 124.
    #[test]
    fn limited_stops_a_program_at_its_limit() {
        let mut c = limited(Path::new("/bin/sleep"), Duration::from_millis(200));
        c.arg("20");
        let r = run_command(c, "sleep".into());
        assert_eq!((r.code, r.signal), (Some(124), None), "{r:?}");
        assert!(r.timed_out());
        assert!(r.took < Duration::from_secs(10), "{r:?}");
    }

    #[test]
    fn assert_empty_dir_takes_an_empty_or_missing_directory_only() {
        let work = WorkDir::new("empty-dir");
        assert_empty_dir(&work.join("missing"), "missing");
        assert_empty_dir(work.path(), "empty");
        std::fs::write(work.join("guid2lid"), "0x1 1 1\n").unwrap();
        let r = std::panic::catch_unwind(|| assert_empty_dir(work.path(), "held"));
        assert!(r.is_err(), "a planted guid2lid is refused");
    }
}

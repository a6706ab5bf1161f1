//! `hca discover`: walk the fabric from a port of an HCA and print it as ibnetdiscover does
//! (or as JSON, or as a Graphviz graph).

use std::io::{BufWriter, IsTerminal, Write};
use std::path::PathBuf;
use std::time::{Instant, SystemTime};

use hca_tools::discover::{self, Config, Progress, Topology, dot, ibnetdiscover, json};
use hca_tools::output_file::ReplaceFile;
use hca_tools::session::{DEFAULT_DEVICE, Session};
use mad::wire::attr::node_info::NodeType;

use super::{CmdResult, Context};

/// Long help of `hca discover`.
pub const HELP: &str = "\
Walks the fabric from one port of an HCA with directed-route SMPs, as ibnetdiscover does
(NodeInfo, NodeDescription, PortInfo of every switch port, SwitchInfo), several SMPs in flight
at once, and prints what it found.

Output (to standard output, or to --output FILE, which is replaced only when the walk and the
write succeed: it is written to a new file beside FILE, FILE.<random>.tmp, and renamed):
  default   ibnetdiscover's topology format: switches, then CAs, each with its linked ports;
            readable by `hca sim`/sim:topology=, by ibsim (but for XDR links, which ibsim
            does not know), and by scripts written for ibnetdiscover (the date in the
            header is UTC)
  --json    the same as JSON (schema hca-discover/1: nodes, ports with GUIDs, LIDs, states,
            widths and speeds, links, failed queries, counts)
  --dot     a Graphviz graph: hca discover --dot | dot -Tsvg > fabric.svg

On a terminal, a progress line on standard error shows the nodes found, the SMPs sent and in
flight, and the rate; a summary follows. Queries that fail (a node that does not answer, an
error status) are listed on standard error and the walk goes on past them; a warning there
also counts the links up not followed because their route would be longer than --max-hops.
Ctrl-C (SIGINT) or SIGTERM stops the walk: nothing is written, --output is left as it was,
a sim: fabric opened with state=FILE is saved, and hca discover exits with status 130 (143
for SIGTERM); a second Ctrl-C ends it at once.

For users of ibnetdiscover (infiniband-diags/man/ibnetdiscover.8.in.rst in rdma-core):
its -o/--outstanding_smps N is --window N, -t MS is --timeout MS, -P N is --port N, and
its [topology-file] argument is --output FILE; its -m/--max_hops only reports the deepest
route found (the summary here gives it as `hops deep`), where --max-hops is a limit.

The default device is the built-in simulator with a generated fabric (a two-level fat tree
of 4 leaf switches with 4 hosts each and 2 spines, 4xHDR links), the HCA being its first host:
  sim:fabric=fat-tree:leaves=4/hosts=4/spines=2/link=4xHDR
Any fabric `hca sim gen` can make works the same way (its `,` written `/`), and so does a
topology file: sim:topology=FILE,node=NAME. On hardware, give the VFIO device.

Examples:
  hca discover
  hca discover --device sim:fabric=fat-tree:leaves=64/hosts=32/spines=32
  hca discover --device sim:topology=my.topo,node=Hca1 --json > fabric.json
  hca discover --dot | dot -Tsvg > fabric.svg
  hca discover --device vfio:0000:03:00.0 --port 2 -o fabric.topo
  hca discover --window 2 --timeout 1000 --retries 3   (libibnetdisc's settings)";

/// Arguments of `hca discover`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The device string: vfio:DDDD:BB:DD.F, sim, or sim:KEY=VALUE,...
    #[arg(long, short, value_name = "DEVICE", default_value = DEFAULT_DEVICE)]
    pub device: String,
    /// The HCA port to discover from.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub port: u8,
    /// Print JSON instead of ibnetdiscover's format.
    #[arg(long, conflicts_with = "dot")]
    pub json: bool,
    /// Print a Graphviz graph instead of ibnetdiscover's format.
    #[arg(long)]
    pub dot: bool,
    /// Write to this file instead of standard output.
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// SMPs in flight at once [default: 4 on vfio: devices, 32 on the simulator].
    /// libibnetdisc keeps 2 and OpenSM 4: VL15 has no flow control, so a switch may drop SMPs
    /// that come faster than its SMA answers; if the summary shows retries on a real fabric,
    /// lower it.
    #[arg(long, value_name = "N")]
    pub window: Option<usize>,
    /// Response timeout of each attempt, in ms.
    #[arg(long, value_name = "MS", default_value_t = discover::engine::DEFAULT_TIMEOUT_MS)]
    pub timeout: u32,
    /// Retries after a timeout (0 to 100).
    #[arg(long, value_name = "N", default_value_t = discover::engine::DEFAULT_RETRIES)]
    pub retries: u32,
    /// Longest directed route to follow, in hops (1-63).
    #[arg(long, value_name = "N", default_value_t = 63)]
    pub max_hops: u8,
    /// Do not read Mellanox ExtendedPortInfo of QDR ports (it only tells FDR10 from QDR).
    #[arg(long)]
    pub no_mlnx_epi: bool,
    /// Print the summary on standard error even when it is not a terminal.
    #[arg(long)]
    pub stats: bool,
}

/// The progress line: on standard error when it is a terminal, at most ten times a second.
struct ProgressLine {
    on: bool,
    last: Option<Instant>,
    shown: bool,
}

impl ProgressLine {
    fn update(&mut self, p: &Progress) {
        if !self.on || self.last.is_some_and(|t| t.elapsed().as_millis() < 100) {
            return;
        }
        self.last = Some(Instant::now());
        err!(
            "\r\x1b[Kdiscovering: {} nodes ({} switches), {} SMPs, {} in flight, {:.0} SMPs/s",
            p.nodes,
            p.switches,
            p.smps,
            p.in_flight,
            hca_tools::per_second(p.smps, p.elapsed)
        );
        self.shown = true;
    }

    fn clear(&mut self) {
        if self.shown {
            err!("\r\x1b[K");
            self.shown = false;
        }
    }
}

/// Walk and print.
pub fn run(ctx: &Context, args: &Args) -> CmdResult {
    let cfg = Config {
        window: args
            .window
            .unwrap_or_else(|| discover::engine::default_window(&args.device)),
        timeout_ms: args.timeout,
        retries: args.retries,
        max_hops: args.max_hops,
        mlnx_ext_port_info: !args.no_mlnx_epi,
    };
    // Refuse a bad setting before the device is opened (and its error is the only news).
    cfg.check()?;
    // Ctrl-C stops the walk and unwinds (the output's temporary file removed, a state= fabric
    // saved); installed before the output file exists.
    hca_tools::interrupt::install()?;
    // Create the output first, so that a bad path does not cost a walk; it replaces FILE only
    // once complete (FILE may be the topology this walk reads). The temporary file is new and
    // removed if the run fails, so a failure leaves the directory as it was.
    let mut file = match &args.output {
        Some(p) => {
            Some(ReplaceFile::create(p).map_err(|e| format!("cannot write {}: {e}", p.display()))?)
        }
        None => None,
    };
    let mut stdout = BufWriter::new(std::io::stdout().lock());
    let out: &mut dyn Write = match &mut file {
        Some(f) => f,
        None => &mut stdout,
    };
    let options = driver::OpenOptions {
        sysfs: ctx.sysfs.clone(),
        dev_root: ctx.dev_root.clone(),
    };
    let session = Session::open_with(&args.device, args.port, &options)?;
    let terminal = std::io::stderr().is_terminal();
    let mut line = ProgressLine {
        on: terminal,
        last: None,
        shown: false,
    };
    let found = discover::discover_with(&session.port, &session.others, &cfg, &mut |p| {
        line.update(p);
    });
    line.clear();
    let closed = session.close();
    let t = found?;
    closed?;
    if args.json {
        json::write(&t, out)?;
    } else if args.dot {
        dot::write(&t, out)?;
    } else {
        ibnetdiscover::write(&t, SystemTime::now(), out)?;
    }
    out.flush()?;
    if let (Some(f), Some(p)) = (file, &args.output) {
        f.commit()
            .map_err(|e| format!("cannot write {}: {e}", p.display()))?;
    }
    report_failures(&t);
    report_cut_short(&t, args.max_hops);
    if terminal || args.stats {
        summary(&t);
    }
    Ok(())
}

fn report_failures(t: &Topology) {
    const SHOWN: usize = 20;
    if t.failures.is_empty() {
        return;
    }
    errln!(
        "warning: {} queries failed; what lies behind them is missing:",
        t.failures.len()
    );
    for f in t.failures.iter().take(SHOWN) {
        errln!(
            "  {}:{} along {}: {}",
            json::attribute_name(f.attr_id),
            f.attr_mod,
            discover::route_text(&f.path),
            f.kind
        );
    }
    if t.failures.len() > SHOWN {
        errln!(
            "  ... and {} more (--json lists them all)",
            t.failures.len() - SHOWN
        );
    }
}

/// Links up that the walk did not follow because of `--max-hops`: what lies behind them is
/// missing from the output as surely as behind a failed query.
fn report_cut_short(t: &Topology, max_hops: u8) {
    let n = t.stats.beyond_max_hops;
    if n > 0 {
        errln!(
            "warning: {n} links up were not followed: their routes would be longer than \
             --max-hops {max_hops}; what lies behind them is missing"
        );
    }
}

fn summary(t: &Topology) {
    let s = &t.stats;
    let secs = s.wall.as_secs_f64();
    errln!(
        "discovered {} nodes ({} switches, {} CAs, {} routers) and {} links in {:.1} ms: {} SMPs \
         ({:.0}/s), at most {} in flight, {} hops deep, {} retried, {} failed, {} links not \
         followed past --max-hops",
        t.nodes.len(),
        t.count_of(NodeType::Switch),
        t.count_of(NodeType::Ca),
        t.count_of(NodeType::Router),
        t.links().len(),
        secs * 1e3,
        s.smps,
        hca_tools::per_second(s.smps, s.wall),
        s.max_in_flight,
        s.max_hops,
        s.retries,
        t.failures.len(),
        s.beyond_max_hops
    );
}

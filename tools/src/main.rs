//! `hca`: list, bind and inspect Mellanox HCAs, discover fabrics and measure MAD round trips,
//! on real hardware through VFIO or on the built-in simulator.
//!
//! `main.rs` parses the command line and sets up logging; each subcommand lives in its own
//! module under `cmd/`.

#[macro_use]
mod cmd;
mod error;
mod state;

use std::io::IsTerminal as _;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

const EXAMPLES: &str = "\
Examples:
  hca list                          show the Mellanox/NVIDIA functions, their drivers and IOMMU groups
  sudo hca bind 0000:03:00.0        give a function to vfio-pci (remembers its driver)
  hca info vfio:0000:03:00.0        open it through VFIO and show regions, IRQs, IOVA ranges
  hca info sim                      the same for the simulated HCA
  hca decode cqe < cqe.txt          name the fields of a CQE from a dump (also eqe, status)
  sudo hca unbind 0000:03:00.0      give it back to the driver it had before
  hca sim gen fat-tree:leaves=64,hosts=32,spines=32 -o ft.topo   write a simulated fabric
  hca run -- ibstat                 run an infiniband-diags tool on the simulator
  hca run --device sim:topology=ft.topo,node=host-1 -- opensm -o   OpenSM on a simulated fabric
  hca discover                      walk a simulated fabric and print it as ibnetdiscover does
  hca discover --device vfio:0000:03:00.0 --json   the same on hardware, as JSON
  hca bench --window 16             MAD round trips per second and their latency

Device strings:
  vfio:DDDD:BB:DD.F   a function bound to vfio-pci (vfio:03:00.0 means domain 0000)
  sim                 the built-in simulated HCA
  sim:KEY=VALUE,...   the simulated HCA with parameters (listed below)

Logging: set HCA_LOG (or RUST_LOG), e.g. HCA_LOG=debug or HCA_LOG=driver=trace.";

/// List, bind and inspect InfiniBand HCAs (mthca, mlx4, mlx5) for the userspace driver.
#[derive(Debug, Parser)]
#[command(name = "hca", version, after_long_help = cmd::with_sim_help(EXAMPLES))]
struct Cli {
    /// Where sysfs is mounted (point it at a copy to try commands without touching the system).
    #[arg(long, global = true, value_name = "DIR", default_value = "/sys")]
    sysfs_root: PathBuf,

    /// Where device nodes are (`/dev/vfio/...` lives under it).
    #[arg(
        long,
        global = true,
        value_name = "DIR",
        default_value = "/dev",
        hide_short_help = true
    )]
    dev_root: PathBuf,

    /// Where `hca bind` records each function's previous driver for `hca unbind`.
    #[arg(
        long,
        global = true,
        value_name = "DIR",
        default_value = "/run/hca",
        hide_short_help = true
    )]
    state_dir: PathBuf,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Show the Mellanox/NVIDIA HCA functions: family, model, driver, IOMMU group, NUMA node.
    #[command(after_long_help = cmd::list::HELP)]
    List(cmd::list::Args),
    /// Give a PCI function to vfio-pci so that the userspace driver can open it (root).
    #[command(after_long_help = cmd::bind::HELP)]
    Bind(cmd::bind::Args),
    /// Take a function off vfio-pci and give it back to its previous driver (root).
    #[command(after_long_help = cmd::unbind::HELP)]
    Unbind(cmd::unbind::Args),
    /// Open a device string and show its ID, regions, interrupts and IOVA ranges; bring an
    /// HCA up and show its firmware, capabilities and ports.
    #[command(after_long_help = cmd::with_sim_help(cmd::info::HELP))]
    Info(cmd::info::Args),
    /// Name the fields of a CQE, an EQE or a command status from a hex dump.
    #[command(after_long_help = cmd::decode::HELP)]
    Decode(cmd::decode::Args),
    /// Run an unmodified libibumad program (OpenSM, infiniband-diags) on this project's
    /// libibumad.so.3 and a device (the simulator by default).
    #[command(after_long_help = cmd::run::HELP)]
    Run(cmd::run::Args),
    /// Walk the fabric from a port by directed route and print it (ibnetdiscover's format,
    /// JSON or Graphviz).
    #[command(after_long_help = cmd::with_sim_help(cmd::discover::HELP))]
    Discover(cmd::discover::Args),
    /// Measure MAD round trips (SMP Gets) through the MAD layer: throughput and latency.
    #[command(after_long_help = cmd::with_sim_help(cmd::bench::HELP))]
    Bench(cmd::bench::Args),
    /// Tools for the simulated fabric: `hca sim gen` writes topology files, `hca sim serve`
    /// shares one fabric between programs.
    #[command(subcommand)]
    Sim(cmd::sim::SimCommand),
}

fn init_logging() {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_env("HCA_LOG")
        .or_else(|_| EnvFilter::try_from_default_env())
        .unwrap_or_else(|_| EnvFilter::new("warn"));
    // Colour only for a terminal: in a log file or a pipe the escape codes are noise.
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        // A failed write of a log line is otherwise reported with `eprintln!`, to the same
        // stderr that just failed, which panics the logging thread; `hca sim serve` runs on
        // with SIGPIPE ignored when its log's reader has gone, and must not.
        .log_internal_errors(false)
        .init();
}

/// Die quietly of SIGPIPE when the reader of our output goes away, as Unix tools do.
///
/// The Rust runtime ignores SIGPIPE, so a write to a closed pipe (`hca info sim | true`,
/// `hca bench 2>&1 | head -4`) becomes an error that `println!` turns into a panic, and the
/// panic's own message then fails on the closed stderr. The default action covers every
/// print at once, where routing each through `writeln!` and treating `BrokenPipe` as success
/// would have to be done, and kept done, at every print. It changes nothing else: the
/// simulator's sockets write with MSG_NOSIGNAL, and children of `hca run` get the default
/// disposition from `Command` anyway.
fn restore_sigpipe() {
    // SAFETY: `signal` with SIG_DFL installs no handler of ours; called first in main, before
    // any thread exists.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

fn main() -> ExitCode {
    restore_sigpipe();
    let cli = Cli::parse();
    init_logging();
    embed::install();
    let ctx = cmd::Context {
        sysfs: driver::sysfs::Sysfs::new(&cli.sysfs_root),
        dev_root: cli.dev_root,
        state: state::BindRecords::new(cli.state_dir),
    };
    let result = match cli.command {
        Command::List(args) => cmd::list::run(&ctx, &args),
        Command::Bind(args) => cmd::bind::run(&ctx, &args),
        Command::Unbind(args) => cmd::unbind::run(&ctx, &args),
        Command::Info(args) => cmd::info::run(&ctx, &args),
        Command::Decode(args) => cmd::decode::run(&args),
        Command::Sim(sim_cmd) => cmd::sim::run(&sim_cmd),
        Command::Run(args) => cmd::run::run(&args),
        Command::Discover(args) => cmd::discover::run(&ctx, &args),
        Command::Bench(args) => cmd::bench::run(&ctx, &args),
    };
    let mut code: u8 = match result {
        Ok(()) => 0,
        // Stopped by Ctrl-C or SIGTERM (discover, bench): 128 + the signal, as a shell shows a
        // program that died of it, once the command has unwound.
        Err(e) => {
            if let Some(&hca_tools::EngineError::Interrupted { signal }) =
                e.downcast_ref::<hca_tools::EngineError>()
            {
                errln!("{e}");
                u8::try_from(128 + signal).unwrap_or(1)
            } else {
                errln!("error: {e}");
                1
            }
        }
    };
    // A simulated fabric opened with `state=FILE` whose device is still open is saved when
    // the program exits (SIM_HELP), whether the command succeeded or not: what it changed
    // before failing is kept. This also reports saves at a device's close that failed.
    for (path, saved) in embed::persist_states() {
        if let Err(e) = saved {
            errln!("error: saving the simulated fabric's state to {path}: {e}");
            if code == 0 {
                code = 1;
            }
        }
    }
    ExitCode::from(code)
}

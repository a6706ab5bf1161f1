//! `hca sim ...`: tools for the simulated fabric (`hca sim gen` writes topology files,
//! `hca sim serve` serves one fabric to several programs).

use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use embed::serve::{ExitSignals, ServeError, ServeOptions, Serving};
use hca_tools::output_file::ReplaceFile;
use sim::fabric::generator;

use super::CmdResult;

/// Long help of `hca sim gen`.
pub const GEN_HELP: &str = "\
Writes a topology file in the ibnetdiscover/ibsim format for a regular fabric, to standard
output or to --output (written to a new file beside FILE, FILE.<random>.tmp, and renamed over
FILE only when complete, so a refused spec leaves FILE as it was). The simulator
(sim:topology=FILE), ibsim and our parser all read it.

Shapes (numbers are decimal):
  fat-tree:leaves=L,hosts=H,spines=S[,links=K,leaf-ports=P,spine-ports=Q]
      two levels: every leaf cabled to every spine (K cables each), H hosts per leaf
  fat-tree3:pods=P,leaves=L,hosts=H,spines=S,cores=C
      three levels: pods of leaves and spines under C cores (C a multiple of S)
  switch:hosts=H[,ports=P]      one switch with H hosts
  line:switches=N,hosts=H[,links=K]   switches in a line, H hosts each
  ring:switches=N,hosts=H[,links=K]   the same, closed into a ring (N >= 3)
Every shape takes link=RATE (e.g. link=4xHDR; 1x to 12x, SDR to NDR, FDR10, XDR) for the rate of
every cable.

Hosts are single-port CAs named host-1, host-2, ... and come first in the file; switches are
named after their role (leaf-N, spine-N, core-N, podP-leafN, switch-1, sw-N). GUIDs follow
ibsim's default scheme and are written out.

Examples:
  hca sim gen fat-tree:leaves=36,hosts=18,spines=18 -o ft648.topo     648 hosts, 36-port switches
  hca sim gen fat-tree:leaves=64,hosts=32,spines=32 -o ft2144.topo    2,144 nodes
  hca sim gen fat-tree3:pods=96,leaves=32,hosts=32,spines=16,cores=64 -o ft100k.topo
  hca sim gen switch:hosts=4";

/// Long help of `hca sim serve`.
pub const SERVE_HELP: &str = "\
Holds one simulated fabric (the topology file's switches and CAs, with their SMA and PMA)
and serves it on a Unix socket, so that several programs share it at once: an OpenSM daemon
on one node, and sminfo, saquery, smpquery or ibnetdiscover on others, as ibsim serves its
umad2sim clients. Each program is a client: its simulated ConnectX attaches to one CA port
with the device string sim:server=SOCKET,node=NAME[,port=N]. Time is the wall clock.

The socket defaults to $XDG_RUNTIME_DIR/hca-fabric.sock, or hca-fabric-$USER.sock in the
temporary directory. It is made with mode 0600, so other users cannot connect (root can); a
connection that gets past the mode from a process neither of the server's user nor root is
refused and the refusal logged. A socket a live server answers
on is refused; a stale one is replaced.
Servers starting on one path take turns through a lock file beside the socket, SOCKET.lock,
which stays (it is never stale: the kernel drops the lock when its holder exits).
SIGINT, SIGTERM or SIGHUP (the terminal it runs in closed) stops the server: clients are
detached (an SM's IsSM bit is cleared), the state is saved to --state, the socket is
removed, and hca sim serve exits with status 0 (should waiting for those signals fail, it
stops the same way, state saved, and exits with status 1). A --state file that cannot be
written, and a topology with no CA (nothing a client could attach to), are refused at the
start. A client whose server goes away sees its port go Down.

Examples:
  hca sim serve --topology net &
  hca run --device sim:server=$XDG_RUNTIME_DIR/hca-fabric.sock,node=Hca1 -- opensm -f sm.log &
  hca run --device sim:server=$XDG_RUNTIME_DIR/hca-fabric.sock,node=Hca2 -- sminfo
  hca run --device sim:server=$XDG_RUNTIME_DIR/hca-fabric.sock,node=Hca2 -- saquery";

/// Subcommands of `hca sim`.
#[derive(Debug, clap::Subcommand)]
pub enum SimCommand {
    /// Write a generated topology file (fat trees and other regular shapes).
    #[command(after_long_help = GEN_HELP)]
    Gen(GenArgs),
    /// Serve one simulated fabric to several programs at once (sim:server=SOCKET,node=NAME).
    #[command(after_long_help = SERVE_HELP)]
    Serve(ServeArgs),
}

/// Arguments of `hca sim serve`.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// The fabric: a topology file in the ibnetdiscover/ibsim format.
    #[arg(long, value_name = "FILE")]
    pub topology: PathBuf,

    /// The socket to listen on (default: $XDG_RUNTIME_DIR/hca-fabric.sock, or
    /// hca-fabric-$USER.sock in the temporary directory).
    #[arg(long, value_name = "PATH")]
    pub socket: Option<PathBuf>,

    /// Load the fabric's SMA state from FILE if it exists, and save it there on exit (and
    /// once at start, so that a FILE that cannot be written is refused before serving).
    #[arg(long, value_name = "FILE")]
    pub state: Option<PathBuf>,

    /// The seed of the fault generator (decimal, or hex with 0x).
    #[arg(long, value_name = "N", value_parser = parse_seed)]
    pub seed: Option<u64>,
}

fn parse_seed(s: &str) -> Result<u64, String> {
    let r = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => s.parse(),
    };
    r.map_err(|e| format!("{s}: {e}"))
}

/// Arguments of `hca sim gen`.
#[derive(Debug, clap::Args)]
pub struct GenArgs {
    /// The shape and its sizes, e.g. fat-tree:leaves=64,hosts=32,spines=32.
    #[arg(value_name = "SPEC")]
    pub spec: String,

    /// Write to this file instead of standard output.
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
}

/// Run `hca sim ...`.
pub fn run(cmd: &SimCommand) -> CmdResult {
    match cmd {
        SimCommand::Gen(args) => generate(args),
        SimCommand::Serve(args) => serve(args),
    }
}

fn serve(args: &ServeArgs) -> CmdResult {
    // First, before the server starts its threads, so that they inherit the blocked mask and
    // the signals reach only the wait below.
    let signals = ExitSignals::block()?;
    ignore_sigpipe();
    let opts = ServeOptions {
        topology: args.topology.clone(),
        socket: args
            .socket
            .clone()
            .unwrap_or_else(sim::net::remote::default_socket_path),
        state: args.state.clone(),
        seed: args.seed,
    };
    let serving = Serving::start(&opts)?;
    let (nodes, cas) = serving.server().network().with_fabric(|f| {
        let cas = f
            .node_ids()
            .filter(|&n| f.node(n).kind() == sim::fabric::NodeType::Ca)
            .count();
        (f.node_count(), cas)
    });
    note(format_args!(
        "serving {} ({nodes} nodes, {cas} CAs) on {} (pid {}); programs attach with \
         --device sim:server={},node=NAME; SIGINT, SIGTERM or SIGHUP stops it",
        args.topology.display(),
        serving.socket().display(),
        std::process::id(),
        serving.socket().display(),
    ));
    serve_until(serving, args.state.as_deref(), |t| signals.wait(t))
}

/// Waits with `wait` (a second at a time) for SIGINT, SIGTERM or SIGHUP, then stops `serving`:
/// clients detached, the state saved to `state`, the socket removed. A wait that fails stops
/// the server all the same (its state is saved: clients may have changed it for hours), and
/// is then the error returned.
fn serve_until(
    serving: Serving,
    state: Option<&Path>,
    mut wait: impl FnMut(Duration) -> Result<Option<i32>, ServeError>,
) -> CmdResult {
    let waited = loop {
        match wait(Duration::from_secs(1)) {
            Ok(Some(sig)) => break Ok(sig),
            Ok(None) => {}
            Err(e) => break Err(e),
        }
    };
    match &waited {
        Ok(sig) => {
            let name = hca_tools::interrupt::name(*sig);
            note(format_args!("{name}: stopping the fabric server"));
        }
        Err(e) => note(format_args!(
            "waiting for SIGINT, SIGTERM or SIGHUP failed ({e}): stopping the fabric server"
        )),
    }
    let stopped = serving.stop();
    if let (Ok(()), Some(state)) = (&stopped, state) {
        note(format_args!(
            "saved the fabric's state to {}",
            state.display()
        ));
    }
    match (waited, stopped) {
        (Ok(_), Ok(())) => Ok(()),
        (Err(e), Ok(())) | (Ok(_), Err(e)) => Err(e.into()),
        (Err(w), Err(s)) => Err(format!("{w}; and stopping the server: {s}").into()),
    }
}

/// Ignores SIGPIPE for the rest of the server's life.
///
/// `main` restores the default action, which ends a tool quietly when the reader of its
/// output goes away (`| head`). A server must not die that way: its stderr may be a pipe whose
/// reader has gone (`hca sim serve 2>&1 | tee log`, the terminal of a closed session), and
/// dying of the next log line would skip what SIGINT, SIGTERM and SIGHUP do (clients detached,
/// state saved, socket removed). Ignored, the write fails with EPIPE instead, which [`note`] and the
/// log writer drop. Called before any thread starts, like [`ExitSignals::block`].
fn ignore_sigpipe() {
    // SAFETY: `signal` with SIG_IGN installs no handler of ours; no other thread exists yet.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
}

/// A line of the server's to stderr; a failed write is dropped, since the server's work does
/// not depend on anyone reading it (`eprintln!` would panic on it).
fn note(line: std::fmt::Arguments<'_>) {
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

fn generate(args: &GenArgs) -> CmdResult {
    let Some(path) = &args.output else {
        let stdout = std::io::stdout();
        let mut out = BufWriter::new(stdout.lock());
        generator::generate_text(&args.spec, &mut out)?;
        out.flush()?;
        return Ok(());
    };
    // A new file beside FILE, renamed over FILE only when complete: a refused spec leaves FILE as it was.
    let mut out =
        ReplaceFile::create(path).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    let fabric = generator::generate_text(&args.spec, &mut out)?;
    out.commit()
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    errln!(
        "wrote {}: {} nodes, {} links",
        path.display(),
        fabric.node_count(),
        fabric.link_count()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A server of one switch with one host, its state in `dir/net.state`.
    fn start(dir: &Path) -> Serving {
        let topology = dir.join("net.topo");
        let mut out = std::fs::File::create(&topology).unwrap();
        generator::generate_text("switch:hosts=1", &mut out).unwrap();
        drop(out);
        Serving::start(&ServeOptions {
            topology,
            socket: dir.join("fabric.sock"),
            state: Some(dir.join("net.state")),
            seed: None,
        })
        .unwrap()
    }

    /// [`start`], with host-1's LID changed to `lid` (what a client's SM would do).
    fn start_with_lid(dir: &Path, lid: u16) -> Serving {
        let serving = start(dir);
        let net = serving.server().network();
        let port = net.port("host-1", 1).unwrap();
        net.with_fabric_mut(|f| f.set_lid(port, lid, 0).unwrap());
        serving
    }

    /// host-1's LID as the state file has it, read into a fresh server.
    fn saved_lid(dir: &Path) -> u16 {
        let again = start(dir);
        let net = again.server().network();
        let port = net.port("host-1", 1).unwrap();
        let lid = net.with_fabric(|f| f.port(port).lid());
        again.stop().unwrap();
        lid
    }

    // The wait for the exit signals can fail (sigtimedwait's EINVAL, a seccomp filter): the
    // server must still stop cleanly and keep what its clients changed, not drop the state.
    #[test]
    fn a_failed_wait_for_signals_still_saves_the_state() {
        let dir = tempfile::tempdir().unwrap();
        let serving = start_with_lid(dir.path(), 7);
        let mut waits = 0;
        let r = serve_until(serving, Some(&dir.path().join("net.state")), |_| {
            waits += 1;
            if waits < 3 {
                Ok(None)
            } else {
                Err(ServeError::Signals(std::io::Error::from_raw_os_error(
                    libc::EINVAL,
                )))
            }
        });
        let e = r.expect_err("the failed wait is the error");
        assert!(e.to_string().contains("signal handling"), "{e}");
        assert!(
            !dir.path().join("fabric.sock").exists(),
            "the socket removed"
        );
        assert_eq!(saved_lid(dir.path()), 7, "the state saved at the stop");
    }

    #[test]
    fn a_signal_stops_the_server_and_saves_the_state() {
        let dir = tempfile::tempdir().unwrap();
        let serving = start_with_lid(dir.path(), 9);
        serve_until(serving, Some(&dir.path().join("net.state")), |_| {
            Ok(Some(libc::SIGTERM))
        })
        .unwrap();
        assert_eq!(saved_lid(dir.path()), 9);
    }
}

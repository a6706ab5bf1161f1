//! `hca bench`: MAD round trips through the MAD layer, with their throughput and latency.

use std::io::Write;
use std::time::Duration;

use hca_tools::EngineError;
use hca_tools::bench::{self, Attr, Config, Stop};
use hca_tools::session::{DEFAULT_DEVICE, Session};

use super::{CmdResult, Context};

/// Long help of `hca bench`.
pub const HELP: &str = "\
Sends directed-route SMP Gets of one attribute along one route through the MAD layer, WINDOW
of them in flight at once, until COUNT SMPs have been sent and have ended, each in a round
trip, a timeout or a failure (or for --time seconds), and prints a small report: round trips,
timeouts, elapsed time, round trips per second, and the latency from each send to its
response (p50, p99, max), over the answered sends only: one that timed out, failed or was
cancelled has no latency, and the lines say none when no round trip completed.
Every round trip counts, the first ones too: no warm-up is left out (when first-use costs
matter, run a short bench first, or one long enough that they do not show).

Round trips per second are counted over the time from the first send to the last response,
so that a send that times out at the end does not add its timeout to the time; the elapsed
line gives the whole run, timeouts included.

Latency is given on two clocks. Wall clock: from the send to the moment the bench reads the
response, what a program on the MAD layer waits. Device clock: the HCA's clock, the wall
clock on hardware and on the simulator's real clock (the default); on clock=virtual it is
simulated time, in which a round trip with no simulated delay takes none.

The default device is the simulator's generated fat tree (see `hca discover --help`), and the
default route, 1, reaches the leaf switch of the HCA's host; --path 0 asks the HCA's own SMA
(answered without the wire, as the kernel answers SMPs for the local port). The first hop of
--path is the port the SMPs leave by, so it must be --port; --timeout must be above 0. A route
from a port that is Down is refused before anything is sent (--path 0 is still answered).

A route may end in the HCA itself by another of its ports: the MAD layer is open on every
port and answers there too, within a millisecond (the bench gives those ports a pass of
their progress loop at least once a millisecond), which the latency then includes.

When a send does not end in a round trip, the report's `first failure` line says why; when
none did, hca bench exits with status 1. Ctrl-C (SIGINT) or SIGTERM stops the bench: the
sends in flight are cancelled, the report of what was measured is printed, and hca bench
exits with status 130 (143 for SIGTERM).

Examples:
  hca bench
  hca bench --window 1 --count 20000
  hca bench --window 128 --time 5
  hca bench --attr port-info --modifier 1 --path 1,5
  hca bench --path 0
  hca bench --device vfio:0000:03:00.0 --path 1";

/// Arguments of `hca bench`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The device string: vfio:DDDD:BB:DD.F, sim, or sim:KEY=VALUE,...
    #[arg(long, short, value_name = "DEVICE", default_value = DEFAULT_DEVICE)]
    pub device: String,
    /// The HCA port to send from.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub port: u8,
    /// SMPs in flight at once (1-1024).
    #[arg(long, value_name = "N", default_value_t = 16)]
    pub window: usize,
    /// The attribute: node-info, node-desc, port-info or switch-info.
    #[arg(long, value_name = "ATTR", default_value = "node-info")]
    pub attr: Attr,
    /// The attribute modifier: the port for port-info (0 to 254; a port the node does not
    /// have is answered with an error status), 0 for the others.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub modifier: u32,
    /// The directed route: egress ports separated by commas (1,3), libibmad's 0,1,3 also
    /// accepted; 0 for the local port.
    #[arg(long, value_name = "PORTS", default_value = "1")]
    pub path: String,
    /// SMPs to send, each ending in a round trip, a timeout or a failure (a send that times
    /// out counts too) [default: 100000, unless --time is given].
    #[arg(long, value_name = "N", conflicts_with = "time")]
    pub count: Option<u64>,
    /// Seconds to run for, instead of a count: sends still in flight when the time is up are
    /// cancelled (the report counts them), not waited for; a time too short for the first
    /// send sends none (an error).
    #[arg(long, value_name = "S")]
    pub time: Option<f64>,
    /// Response timeout of each attempt, in ms.
    #[arg(long, value_name = "MS", default_value_t = 1000)]
    pub timeout: u32,
    /// Retries after a timeout (0 to 100).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub retries: u32,
}

/// `1,3`, `0,1,3` or `0` as a list of egress ports.
fn parse_path(s: &str) -> Result<Vec<u8>, String> {
    let mut ports = Vec::new();
    for (i, item) in s.split(',').enumerate() {
        let p: u8 = item.trim().parse().map_err(|_| {
            format!("--path {s}: `{item}` is not a port number (0-254); write e.g. 1,3")
        })?;
        if p == 0 && i == 0 {
            continue;
        }
        if p == 0 || p == 255 {
            return Err(format!(
                "--path {s}: port {p} cannot be a hop (ports are 1-254)"
            ));
        }
        ports.push(p);
    }
    Ok(ports)
}

/// Run the bench and print its report.
pub fn run(ctx: &Context, args: &Args) -> CmdResult {
    let stop = match (args.count, args.time) {
        (_, Some(t)) if !(t > 0.0 && t.is_finite() && t < 1e6) => {
            return Err(format!("--time {t}: give a number of seconds above 0").into());
        }
        (_, Some(t)) => Stop::Time(Duration::from_secs_f64(t)),
        (Some(n), None) => Stop::Count(n),
        (None, None) => Stop::Count(100_000),
    };
    let cfg = Config {
        window: args.window,
        attr: args.attr,
        attr_mod: args.modifier,
        path: parse_path(&args.path)?,
        stop,
        timeout_ms: args.timeout,
        retries: args.retries,
    };
    // Refused before the device is opened, so that a bad setting is the only news.
    cfg.check(args.port)?;
    let options = driver::OpenOptions {
        sysfs: ctx.sysfs.clone(),
        dev_root: ctx.dev_root.clone(),
    };
    // Ctrl-C stops the bench, which then reports what it measured, as ping does.
    hca_tools::interrupt::install()?;
    let session = Session::open_with(&args.device, args.port, &options)?;
    let result = bench::run_with(&session.port, &session.others, &cfg);
    let closed = session.close();
    let report = result?;
    closed?;
    let mut out = std::io::stdout().lock();
    report
        .write(&args.device, &mut out)
        .and_then(|()| out.flush())
        .map_err(super::stdout_error)?;
    if let Some(signal) = report.interrupted {
        return Err(EngineError::Interrupted { signal }.into());
    }
    if report.round_trips == 0 {
        return Err(EngineError::NoRoundTrip {
            sent: report.timeouts + report.failed + report.cancelled,
            why: report.first_failure.unwrap_or_else(|| match stop {
                // The time ran out before the loop's first send.
                Stop::Time(d) => format!(
                    "the time (--time {}) ran out before the first send: give a longer --time",
                    d.as_secs_f64()
                ),
                Stop::Count(_) => "nothing was sent".to_string(),
            }),
        }
        .into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::parse_path;

    #[test]
    fn paths() {
        assert_eq!(parse_path("1").unwrap(), vec![1]);
        assert_eq!(parse_path("0,1,3").unwrap(), vec![1, 3]);
        assert_eq!(parse_path("1,3").unwrap(), vec![1, 3]);
        assert!(parse_path("0").unwrap().is_empty());
        assert!(parse_path("1,0").is_err());
        assert!(parse_path("x").is_err());
        assert!(parse_path("300").is_err());
    }
}

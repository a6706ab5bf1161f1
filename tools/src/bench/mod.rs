//! MAD round trips through the MAD layer (`hca bench`): directed-route SMP Gets of one
//! attribute along one route, `window` of them in flight, for a count or a time; the report
//! gives the throughput and the latency from each send to its response.
//!
//! Throughput is round trips over the wall-clock time from the first send to the last
//! response: a send that never gets one (lost, or to a node that is not there) would
//! otherwise add its whole timeout to the time, and a run that ends on one lost SMP would
//! report a fraction of the rate it had. The elapsed time up to the last completion
//! (timeouts included) is reported beside it.
//!
//! Latency is measured twice: on the wall clock (what a user waits: `Agent::send` to the
//! response event read by the bench loop, so it includes the time a response waits in the
//! window behind others), and on the device clock (`Port::now`: the wall clock on hardware
//! and on the simulator's real clock; simulated time on its virtual clock, where a round trip
//! that crosses no simulated delay takes no time).

use std::collections::HashMap;
use std::io::Write;
use std::time::{Duration, Instant};

use driver::verbs::{PortState, SpecialQp, UdDest, WcStatus};
use mad::wire::attr::port_info::PhysPortState;
use mad::wire::attr_id::sm;
use mad::wire::method;
use mad::wire::smp::{Smp, SmpRepr};
use mad::{AgentSpec, Event, MadError, Port, SendId, SendRequest};

use crate::EngineError;
use crate::discover::route_text;

/// The attribute each SMP gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Attr {
    /// NodeInfo.
    NodeInfo,
    /// NodeDescription.
    NodeDescription,
    /// PortInfo (of the port given as modifier).
    PortInfo,
    /// SwitchInfo (switches only).
    SwitchInfo,
}

impl Attr {
    /// Every attribute, as `--attr` spells them.
    pub const ALL: [(&'static str, Attr); 4] = [
        ("node-info", Attr::NodeInfo),
        ("node-desc", Attr::NodeDescription),
        ("port-info", Attr::PortInfo),
        ("switch-info", Attr::SwitchInfo),
    ];

    /// The attribute ID.
    pub fn id(self) -> u16 {
        match self {
            Attr::NodeInfo => sm::NODE_INFO,
            Attr::NodeDescription => sm::NODE_DESCRIPTION,
            Attr::PortInfo => sm::PORT_INFO,
            Attr::SwitchInfo => sm::SWITCH_INFO,
        }
    }

    /// Its name in the report.
    pub fn name(self) -> &'static str {
        match self {
            Attr::NodeInfo => "NodeInfo",
            Attr::NodeDescription => "NodeDescription",
            Attr::PortInfo => "PortInfo",
            Attr::SwitchInfo => "SwitchInfo",
        }
    }
}

impl std::str::FromStr for Attr {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Attr::ALL
            .iter()
            .find(|(n, _)| *n == s)
            .map(|(_, a)| *a)
            .ok_or_else(|| {
                let names: Vec<&str> = Attr::ALL.iter().map(|(n, _)| *n).collect();
                format!("unknown attribute `{s}`: one of {}", names.join(", "))
            })
    }
}

/// When the bench stops sending.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    /// After this many sends, each ending in a round trip, a timeout or a failure (one that
    /// times out counts as much as one answered).
    Count(u64),
    /// After this much wall-clock time: sends still in flight then are cancelled (and
    /// counted in [`Report::cancelled`]), not waited for up to their timeouts.
    Time(Duration),
}

/// What to measure.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// SMPs in flight at once (1 to 1024).
    pub window: usize,
    /// The attribute.
    pub attr: Attr,
    /// Its modifier (the port number for PortInfo).
    pub attr_mod: u32,
    /// The directed route: the egress port per hop; empty for the local port (answered by
    /// the HCA's own SMA without the wire).
    pub path: Vec<u8>,
    /// When to stop.
    pub stop: Stop,
    /// Response timeout of each attempt, in ms.
    pub timeout_ms: u32,
    /// Retries after a timeout.
    pub retries: u32,
}

impl Config {
    /// Refuse a window, timeout, retry count, count or route out of range for SMPs sent from
    /// port `port` ([`run`] does too; a command checks first, so that a bad setting does
    /// not cost opening a device). Gives the SMP every send copies.
    pub fn check(&self, port: u8) -> Result<SmpRepr, EngineError> {
        if !(1..=1024).contains(&self.window) {
            return Err(EngineError::BadSetting {
                what: "window",
                why: format!("{} sends in flight: give 1 to 1024", self.window),
            });
        }
        crate::discover::engine::check_attempts(self.timeout_ms, self.retries)?;
        if let Some(&first) = self.path.first()
            && first != port
        {
            // A CA's SMA drops a directed-route SMP whose first hop is not the port it left
            // by.
            return Err(EngineError::BadSetting {
                what: "path",
                why: format!(
                    "the first hop {first} is not the port the SMPs leave by ({port}): start \
                     the path with {port} or pick the port with --port {first}"
                ),
            });
        }
        self.check_modifier()?;
        if self.stop == Stop::Count(0) {
            return Err(EngineError::BadSetting {
                what: "count",
                why: "0 sends: give at least 1".into(),
            });
        }
        SmpRepr::directed_get(&self.path, self.attr.id(), self.attr_mod, 0).map_err(|e| {
            EngineError::BadSetting {
                what: "path",
                why: e.to_string(),
            }
        })
    }
}

impl Config {
    /// The modifier as the attribute reads it (IBA 14.2.5; reference/mad-stack.md §2.5):
    /// PortInfo's is a port number (0, the port the SMP enters by, to 254, the most a switch
    /// has); NodeInfo, NodeDescription and SwitchInfo have none, their modifier being
    /// reserved (0 from a sender). Whether the node has the port asked for is known only by
    /// asking: its SMA answers with an error status, counted in the report.
    fn check_modifier(&self) -> Result<(), EngineError> {
        let m = self.attr_mod;
        let why = match self.attr {
            Attr::PortInfo if m > 254 => format!(
                "{m}: {}'s modifier is a port number, 0 to 254 (0: the port the SMPs enter by)",
                self.attr.name()
            ),
            Attr::PortInfo => return Ok(()),
            _ if m != 0 => format!(
                "{m}: {} takes none (its modifier is reserved): give 0",
                self.attr.name()
            ),
            _ => return Ok(()),
        };
        Err(EngineError::BadSetting {
            what: "modifier",
            why,
        })
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            window: 16,
            attr: Attr::NodeInfo,
            attr_mod: 0,
            path: vec![1],
            stop: Stop::Count(100_000),
            timeout_ms: 1000,
            retries: 0,
        }
    }
}

/// Percentiles of a set of latencies.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Latency {
    /// Median.
    pub p50: Duration,
    /// 99th percentile.
    pub p99: Duration,
    /// Largest.
    pub max: Duration,
}

impl Latency {
    /// Nearest-rank percentiles of `v` (sorted in place); `None` for an empty set (no
    /// round trip has no latency, not a latency of 0).
    pub fn of(v: &mut [Duration]) -> Option<Latency> {
        if v.is_empty() {
            return None;
        }
        v.sort_unstable();
        let rank = |pct: usize| v[(v.len() * pct).div_ceil(100).max(1) - 1];
        Some(Latency {
            p50: rank(50),
            p99: rank(99),
            max: v[v.len() - 1],
        })
    }
}

/// What a bench measured.
#[derive(Clone, Debug, PartialEq)]
pub struct Report {
    /// What was run.
    pub config: Config,
    /// Sends that got their response (with any status).
    pub round_trips: u64,
    /// Of those, responses with a non-zero MAD status.
    pub error_status: u64,
    /// Sends that timed out after their retries.
    pub timeouts: u64,
    /// Sends that ended otherwise (a work-completion error) or were refused.
    pub failed: u64,
    /// Retries the MAD layer made.
    pub retries: u64,
    /// Wall-clock time from the first send to the last completion (timeouts included).
    pub wall: Duration,
    /// Wall-clock time from the first send to the last response: the time the round trips
    /// took, without the wait for sends that timed out after it (0 without round trips).
    pub round_trip_span: Duration,
    /// Device-clock time for the same.
    pub device: Duration,
    /// Latency on the wall clock; `None` when no round trip completed.
    pub wall_latency: Option<Latency>,
    /// Latency on the device clock; `None` when no round trip completed.
    pub device_latency: Option<Latency>,
    /// Most sends in flight at once.
    pub max_in_flight: usize,
    /// What went wrong first with a send that did not end in a round trip (a send the MAD
    /// layer refused, a completion error, a timeout), for a report that shows no round trips.
    pub first_failure: Option<String>,
    /// The signal that stopped the bench before it was done ([`crate::interrupt`]), if one
    /// did.
    pub interrupted: Option<i32>,
    /// Sends still waiting for their response when the bench stopped (interrupted, or its
    /// time up), cancelled: they are neither round trips nor failures.
    pub cancelled: u64,
}

impl Report {
    /// Round trips per second of wall-clock time from the first send to the last response
    /// ([`Report::round_trip_span`]); 0 without round trips.
    pub fn throughput(&self) -> f64 {
        crate::per_second(self.round_trips, self.round_trip_span)
    }

    /// The report as `hca bench` prints it: a title, then `key  value` lines.
    pub fn write(&self, device: &str, out: &mut dyn Write) -> std::io::Result<()> {
        let c = &self.config;
        let hops = c.path.len();
        writeln!(
            out,
            "hca bench: {} Get along {} ({hops} hop{}) on {device}, window {}",
            c.attr.name(),
            route_text(&c.path),
            if hops == 1 { "" } else { "s" },
            c.window
        )?;
        let rows = [
            (
                "round trips",
                format!(
                    "{} ({} with an error status, {} timed out, {} failed, {} retries)",
                    self.round_trips, self.error_status, self.timeouts, self.failed, self.retries
                ),
            ),
            (
                "elapsed",
                format!(
                    "{:.3} s wall clock, {:.3} s device clock",
                    self.wall.as_secs_f64(),
                    self.device.as_secs_f64()
                ),
            ),
            (
                "throughput",
                format!(
                    "{:.0} round trips/s (wall clock, over the {:.3} s from the first send to \
                     the last response)",
                    self.throughput(),
                    self.round_trip_span.as_secs_f64()
                ),
            ),
            ("latency wall", self.fmt_latency(self.wall_latency.as_ref())),
            (
                "latency device",
                self.fmt_latency(self.device_latency.as_ref()),
            ),
            ("in flight", format!("{} at most", self.max_in_flight)),
        ];
        for (k, v) in rows {
            writeln!(out, "  {k:<16}{v}")?;
        }
        if let Some(f) = &self.first_failure {
            writeln!(out, "  {:<16}{f}", "first failure")?;
        }
        if let Some(sig) = self.interrupted {
            writeln!(
                out,
                "  {:<16}by {} ({} sends in flight cancelled)",
                "interrupted",
                crate::interrupt::name(sig),
                self.cancelled
            )?;
        } else if self.cancelled > 0 {
            writeln!(
                out,
                "  {:<16}{} sends in flight when the time ran out",
                "cancelled", self.cancelled
            )?;
        }
        Ok(())
    }

    /// A latency line: its percentiles are over the answered sends only (a send that timed
    /// out, failed or was cancelled has no latency), which the line says.
    fn fmt_latency(&self, l: Option<&Latency>) -> String {
        let Some(l) = l else {
            return "none (no round trips)".into();
        };
        let unanswered = self.timeouts + self.failed + self.cancelled;
        format!(
            "p50 {}  p99 {}  max {}  (over the {} answered send{}{})",
            us(l.p50),
            us(l.p99),
            us(l.max),
            self.round_trips,
            if self.round_trips == 1 { "" } else { "s" },
            if unanswered > 0 {
                format!(", not the {unanswered} unanswered")
            } else {
                String::new()
            }
        )
    }
}

fn us(d: Duration) -> String {
    format!("{:.1} us", d.as_secs_f64() * 1e6)
}

struct Sent {
    wall: Instant,
    device: Duration,
    answered: bool,
}

/// Run the bench on `port` (registers an agent of its own, deregistered before returning).
pub fn run(port: &Port, cfg: &Config) -> Result<Report, EngineError> {
    run_with(port, &[], cfg)
}

/// [`run`] on `port` while keeping `others`, the MAD layer on the HCA's other ports,
/// answering ([`crate::session::drive`]): a route that ends in the HCA by another port asks
/// that port's SMA.
pub fn run_with(port: &Port, others: &[Port], cfg: &Config) -> Result<Report, EngineError> {
    let repr = cfg.check(port.port_num())?;
    if !cfg.path.is_empty() {
        check_port_up(port)?;
    }
    let mut template = vec![0u8; 256];
    repr.emit(&mut Smp::new_checked(&mut template[..]).expect("256 bytes hold an SMP"));
    let dest = UdDest::DIRECTED_ROUTE;
    let agent = port.register(AgentSpec::responses_only(SpecialQp::Smi))?;
    let before = port.counters();
    let mut report = Report {
        config: cfg.clone(),
        round_trips: 0,
        error_status: 0,
        timeouts: 0,
        failed: 0,
        retries: 0,
        wall: Duration::ZERO,
        round_trip_span: Duration::ZERO,
        device: Duration::ZERO,
        wall_latency: None,
        device_latency: None,
        max_in_flight: 0,
        first_failure: None,
        interrupted: None,
        cancelled: 0,
    };
    let mut wall_lat = Vec::new();
    let mut dev_lat = Vec::new();
    let mut in_flight: HashMap<SendId, Sent> = HashMap::new();
    let started = Instant::now();
    let device_start = port.now();
    let mut first_send: Option<Instant> = None;
    let mut last_response: Option<Instant> = None;
    let mut sent: u64 = 0;
    let mut tid: u32 = 0;
    let stall = crate::discover::engine::stall_limit(cfg.timeout_ms, cfg.retries);
    let mut last_event = port.now();
    let result = loop {
        if let Some(signal) = crate::interrupt::requested() {
            report.interrupted = Some(signal);
            report.cancelled = in_flight.values().filter(|s| !s.answered).count() as u64;
            break Ok(());
        }
        let more = match cfg.stop {
            Stop::Count(n) => sent < n,
            Stop::Time(d) => started.elapsed() < d,
        };
        // Time is up: what is in flight is cancelled (by the deregistration below), so that
        // --time bounds the run rather than waiting out the timeouts of the last sends.
        if !more && matches!(cfg.stop, Stop::Time(_)) {
            report.cancelled = in_flight.values().filter(|s| !s.answered).count() as u64;
            if report.cancelled > 0 && report.round_trips == 0 {
                report.first_failure.get_or_insert_with(|| {
                    "no response before the time ran out (the sends in flight were cancelled): \
                     is the route right and does every hop exist?"
                        .into()
                });
            }
            break Ok(());
        }
        while more && in_flight.len() < cfg.window {
            if let Stop::Count(n) = cfg.stop
                && sent >= n
            {
                break;
            }
            tid = tid.wrapping_add(1);
            let mut mad = template.clone();
            mad[12..16].copy_from_slice(&tid.to_be_bytes());
            let req = SendRequest::new(mad, dest)
                .timeout_ms(cfg.timeout_ms)
                .retries(cfg.retries);
            let (wall, device) = (Instant::now(), port.now());
            match agent.send(req) {
                Ok(id) => {
                    first_send.get_or_insert(wall);
                    in_flight.insert(
                        id,
                        Sent {
                            wall,
                            device,
                            answered: false,
                        },
                    );
                    sent += 1;
                }
                Err(MadError::DeviceFatal { .. }) => break,
                Err(e) => {
                    report.failed += 1;
                    report
                        .first_failure
                        .get_or_insert_with(|| format!("the MAD layer refused a send: {e}"));
                    sent += 1;
                }
            }
            report.max_in_flight = report.max_in_flight.max(in_flight.len());
        }
        if in_flight.is_empty() && !more {
            break Ok(());
        }
        if let Some(reason) = port.fatal_reason() {
            break Err(EngineError::DeviceFatal { reason });
        }
        crate::session::drive(others);
        let slice = wait_bound(
            cfg.stop,
            started.elapsed(),
            crate::session::wait_slice(others, Duration::from_millis(100)),
        );
        let Some(ev) = agent.next_event(port.deadline_after(slice)) else {
            if in_flight.is_empty() {
                continue;
            }
            let waited = port.now().saturating_sub(last_event);
            if waited > stall {
                break Err(EngineError::Stalled {
                    outstanding: in_flight.len(),
                    waited,
                });
            }
            continue;
        };
        last_event = port.now();
        let mut next = Some(ev);
        while let Some(ev) = next {
            match ev {
                Event::Recv(r) => {
                    if let Some(s) = r.response_to.and_then(|to| in_flight.get_mut(&to.id))
                        && !s.answered
                    {
                        s.answered = true;
                        let now = Instant::now();
                        last_response = Some(now);
                        wall_lat.push(now.saturating_duration_since(s.wall));
                        dev_lat.push(port.now().saturating_sub(s.device));
                        report.round_trips += 1;
                        let status = Smp::new_checked(&r.mad[..]).map_or(1, |v| v.dr_status());
                        if r.header().method() != method::GET_RESP || status != 0 {
                            report.error_status += 1;
                        }
                    }
                }
                Event::Send(c) => {
                    if let Some(s) = in_flight.remove(&c.id)
                        && !s.answered
                    {
                        if c.status == WcStatus::RespTimeoutErr {
                            report.timeouts += 1;
                            report.first_failure.get_or_insert_with(|| {
                                format!(
                                    "no response within {} ms ({} retries): is the route right \
                                     and does every hop exist?",
                                    cfg.timeout_ms, c.retries
                                )
                            });
                        } else {
                            report.failed += 1;
                            report.first_failure.get_or_insert_with(|| {
                                format!("a send completed with status {:?}", c.status)
                            });
                        }
                    }
                }
                Event::DeviceFatal { .. } => {}
            }
            next = agent.try_event();
        }
    };
    report.wall = started.elapsed();
    if let (Some(first), Some(last)) = (first_send, last_response) {
        report.round_trip_span = last.saturating_duration_since(first);
    }
    report.device = port.now().saturating_sub(device_start);
    agent.deregister();
    result?;
    if let Some(reason) = port.fatal_reason() {
        return Err(EngineError::DeviceFatal { reason });
    }
    report.retries = port.counters().retries.saturating_sub(before.retries);
    report.wall_latency = Latency::of(&mut wall_lat);
    report.device_latency = Latency::of(&mut dev_lat);
    Ok(report)
}

/// Refuse to send along a route from a port that is Down: every SMP would time out, and the
/// report would blame the route. (An empty path is not checked: the HCA's own SMA answers
/// it without the wire.) A port whose attributes cannot be read is let through: its sends
/// then say what is wrong.
fn check_port_up(port: &Port) -> Result<(), EngineError> {
    match port.hca().attrs() {
        Ok(a) if a.state == PortState::Down => Err(EngineError::PortDown {
            port: a.port_num,
            phys: format!("{:?}", PhysPortState::from(a.phys_state)),
        }),
        _ => Ok(()),
    }
}

/// How long the bench waits for its next event: `slice`, but no longer than what is left of
/// a `--time` run at `elapsed`, so that a run whose sends get no answer ends when its time is
/// up rather than a whole slice after.
fn wait_bound(stop: Stop, elapsed: Duration, slice: Duration) -> Duration {
    match stop {
        Stop::Time(d) => slice.min(d.saturating_sub(elapsed)),
        Stop::Count(_) => slice,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        let mut v: Vec<Duration> = (1..=100).rev().map(Duration::from_micros).collect();
        let l = Latency::of(&mut v).unwrap();
        assert_eq!(l.p50, Duration::from_micros(50));
        assert_eq!(l.p99, Duration::from_micros(99));
        assert_eq!(l.max, Duration::from_micros(100));
        let mut one = vec![Duration::from_micros(7)];
        assert_eq!(Latency::of(&mut one).unwrap().p99, Duration::from_micros(7));
        assert_eq!(Latency::of(&mut []), None);
    }

    #[test]
    fn the_wait_for_events_ends_when_the_time_is_up() {
        let ms = Duration::from_millis;
        let slice = ms(100);
        assert_eq!(wait_bound(Stop::Time(ms(10)), ms(0), slice), ms(10));
        assert_eq!(wait_bound(Stop::Time(ms(1000)), ms(990), slice), ms(10));
        assert_eq!(wait_bound(Stop::Time(ms(1000)), ms(500), slice), slice);
        assert_eq!(
            wait_bound(Stop::Time(ms(10)), ms(20), slice),
            Duration::ZERO
        );
        assert_eq!(wait_bound(Stop::Count(5), ms(20), slice), slice);
    }

    #[test]
    fn the_latency_lines_say_they_cover_the_answered_sends_only() {
        let lat = Latency {
            p50: Duration::from_micros(2),
            p99: Duration::from_micros(3),
            max: Duration::from_micros(4),
        };
        let r = Report {
            config: Config::default(),
            round_trips: 19,
            error_status: 0,
            timeouts: 1,
            failed: 0,
            retries: 0,
            wall: Duration::from_millis(5),
            round_trip_span: Duration::from_millis(4),
            device: Duration::from_millis(5),
            wall_latency: Some(lat),
            device_latency: Some(lat),
            max_in_flight: 1,
            first_failure: None,
            interrupted: None,
            cancelled: 0,
        };
        let mut out = Vec::new();
        r.write("sim", &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        for key in ["latency wall", "latency device"] {
            let line = text.lines().find(|l| l.contains(key)).unwrap();
            assert!(
                line.ends_with(
                    "p50 2.0 us  p99 3.0 us  max 4.0 us  (over the 19 answered sends, not the 1 \
                     unanswered)"
                ),
                "{line}"
            );
        }
    }

    #[test]
    fn attributes_parse_by_name() {
        assert_eq!("port-info".parse::<Attr>(), Ok(Attr::PortInfo));
        let e = "lft".parse::<Attr>().unwrap_err();
        assert!(
            e.contains("node-info, node-desc, port-info, switch-info"),
            "{e}"
        );
    }
}

//! The discovery engine: breadth-first by directed route from the local port, as libibnetdisc
//! walks a fabric (reference/mad-stack.md §3.5; infiniband-diags `libibnetdisc/ibnetdisc.c`),
//! on our MAD layer.
//!
//! What is asked, and what each answer leads to:
//! - NodeInfo along a path. A new NodeGUID is a new node: ask its NodeDescription, and for a
//!   switch its SwitchInfo and port 0's PortInfo. A known GUID is the same node reached
//!   again: only the link is recorded. Either way the port the SMP entered by is linked to
//!   the port it left from, and a CA or router's entry port gets its PortInfo read.
//! - PortInfo of a switch's port 0 leads to the PortInfo of each of its ports.
//! - PortInfo of a port whose link is up (PhysState LinkUp) leads on, with NodeInfo along the
//!   path extended by that port, when it is a switch port other than the one the SMPs entered
//!   by, or the local port. Ports that are down are not followed; routes are not extended past
//!   the maximum hop count.
//! - Each node's shortest known route is remembered, and a port is followed from it. With
//!   several SMPs in flight a switch can answer first by a longer route, where the hop limit
//!   stops its links, and only later by a shorter one; so when a route reaches a known switch
//!   shorter than before, and the hop limit stopped a link of that switch or of a node
//!   reached through it, its links are followed again from the shorter route. The walk then
//!   finds the nodes a walk whose answers come back in order finds, whatever the order.
//! - Mellanox devices' QDR ports get an ExtendedPortInfo first (FDR10 shows only there), as
//!   libibnetdisc does; the walk goes on after its answer or its failure.
//!
//! Several SMPs are in flight at once (the window); the rest wait in a FIFO, which keeps the
//! walk breadth-first. Timeouts and retries are the MAD layer's (each send carries them, as
//! libibnetdisc passes them to the kernel): the engine only sees one completion per query,
//! a response or RESP_TIMEOUT_ERR. A query that fails is recorded and the walk goes on.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use driver::verbs::{SpecialQp, UdDest, WcStatus};
use mad::wire::attr::node_info::{NodeInfo, NodeInfoRepr, NodeType};
use mad::wire::attr::port_info::{PhysPortState, PortInfo, PortInfoRepr};
use mad::wire::attr::switch_info::{SwitchInfo, SwitchInfoRepr};
use mad::wire::attr_id::sm;
use mad::wire::method;
use mad::wire::smp::{MAX_HOP_COUNT, Smp, SmpRepr, SmpRoute};
use mad::{Agent, AgentSpec, Event, MadError, Port, RecvMad, SendCompletion, SendId, SendRequest};

use super::topology::{
    Failure, FailureKind, Node, NodeIndex, Port as TopoPort, PortRef, SwitchDetails, Topology,
};
use crate::EngineError;

/// libibnetdisc's SMPs on the wire (`DEFAULT_MAX_SMP_ON_WIRE`).
pub const LIBIBNETDISC_WINDOW: usize = 2;
/// The default window on the simulator: enough SMPs in flight to keep the device and the MAD layer
/// busy (see the README's bench figures), well under the MAD layer's 128 solicited SMPs per agent.
pub const DEFAULT_WINDOW: usize = 32;
/// The default window on hardware: OpenSM's 4 (`max_wire_smps`). VL15 has no flow control, so
/// a real switch drops SMPs that come faster than its SMA answers them; the simulator's do not.
pub const DEFAULT_WINDOW_VFIO: usize = 4;

/// The default window for `device`: [`DEFAULT_WINDOW_VFIO`] for a `vfio:` device (a real
/// fabric), [`DEFAULT_WINDOW`] for the simulator.
pub fn default_window(device: &str) -> usize {
    if device.starts_with("vfio:") {
        DEFAULT_WINDOW_VFIO
    } else {
        DEFAULT_WINDOW
    }
}
/// libibnetdisc's response timeout (`DEFAULT_TIMEOUT`), in ms.
pub const DEFAULT_TIMEOUT_MS: u32 = 1000;
/// libibnetdisc's retries (`DEFAULT_RETRIES`).
pub const DEFAULT_RETRIES: u32 = 3;
/// The most retries after a timeout that discover and bench accept: with the longest sane
/// timeout, more would only hide a dead node for hours.
pub const MAX_RETRIES: u32 = 100;
/// Mellanox ExtendedPortInfo's LinkSpeedActive byte (libibmad
/// `IB_MLNX_EXT_PORT_LINK_SPEED_ACTIVE_F`, bits 120..128) and its FDR10 bit.
const EPI_SPEED_ACTIVE: usize = 15;
const EPI_FDR10: u8 = 0x01;
/// LinkSpeedActive value of QDR.
const SPEED_QDR: u8 = 4;

/// How a discovery runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// SMPs in flight at once (1 to 1024).
    pub window: usize,
    /// Response timeout of each attempt, in ms (the MAD layer's timer).
    pub timeout_ms: u32,
    /// Retries after a timeout (the MAD layer's).
    pub retries: u32,
    /// Longest directed route followed, in hops (1 to 63).
    pub max_hops: u8,
    /// Read Mellanox ExtendedPortInfo on QDR ports of Mellanox devices (to see FDR10), as
    /// ibnetdiscover does by default.
    pub mlnx_ext_port_info: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            window: DEFAULT_WINDOW,
            timeout_ms: DEFAULT_TIMEOUT_MS,
            retries: DEFAULT_RETRIES,
            max_hops: MAX_HOP_COUNT,
            mlnx_ext_port_info: true,
        }
    }
}

/// Refuse more than [`MAX_RETRIES`] retries.
/// The per-attempt timeout and the retries of each send, for discover and bench: a 0 ms timeout
/// would drop every response as no longer expected.
pub(crate) fn check_attempts(timeout_ms: u32, retries: u32) -> Result<(), EngineError> {
    if timeout_ms == 0 {
        return Err(EngineError::BadSetting {
            what: "timeout",
            why: "0 ms: give the time to wait for each response".into(),
        });
    }
    if retries > MAX_RETRIES {
        return Err(EngineError::BadSetting {
            what: "retries",
            why: format!("{retries}: give 0 to {MAX_RETRIES}"),
        });
    }
    Ok(())
}

impl Config {
    /// Refuse a window, hop limit, timeout or retry count out of range ([`discover`] does
    /// too; a command checks first, so that a bad setting does not cost opening a device).
    pub fn check(&self) -> Result<(), EngineError> {
        if !(1..=1024).contains(&self.window) {
            return Err(EngineError::BadSetting {
                what: "window",
                why: format!("{} SMPs in flight: give 1 to 1024", self.window),
            });
        }
        if !(1..=MAX_HOP_COUNT).contains(&self.max_hops) {
            return Err(EngineError::BadSetting {
                what: "max hops",
                why: format!("{}: a directed route has 1 to 63 hops", self.max_hops),
            });
        }
        check_attempts(self.timeout_ms, self.retries)
    }
}

/// Where a discovery stands, for a progress line.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Progress {
    /// Nodes found.
    pub nodes: usize,
    /// Of which switches.
    pub switches: usize,
    /// SMPs sent so far.
    pub smps: u64,
    /// SMPs in flight.
    pub in_flight: usize,
    /// Queries waiting for room in the window.
    pub queued: usize,
    /// Queries that failed so far.
    pub failures: usize,
    /// Wall-clock time since the start.
    pub elapsed: Duration,
}

/// What one query asks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ask {
    /// NodeInfo; `via` is the port the path left by (none for the local node).
    NodeInfo {
        via: Option<PortRef>,
    },
    NodeDescription(NodeIndex),
    SwitchInfo(NodeIndex),
    PortInfo(NodeIndex, u8),
    ExtPortInfo(NodeIndex, u8),
}

impl Ask {
    fn attribute(self) -> (u16, u32) {
        match self {
            Ask::NodeInfo { .. } => (sm::NODE_INFO, 0),
            Ask::NodeDescription(_) => (sm::NODE_DESCRIPTION, 0),
            Ask::SwitchInfo(_) => (sm::SWITCH_INFO, 0),
            Ask::PortInfo(_, p) => (sm::PORT_INFO, u32::from(p)),
            Ask::ExtPortInfo(_, p) => (sm::MLNX_EXTENDED_PORT_INFO, u32::from(p)),
        }
    }

    fn node(self) -> Option<NodeIndex> {
        match self {
            Ask::NodeInfo { .. } => None,
            Ask::NodeDescription(n)
            | Ask::SwitchInfo(n)
            | Ask::PortInfo(n, _)
            | Ask::ExtPortInfo(n, _) => Some(n),
        }
    }
}

#[derive(Clone, Debug)]
struct Query {
    path: Vec<u8>,
    ask: Ask,
}

struct InFlight {
    query: Query,
    answered: bool,
}

/// What the walk keeps of a node's routes, so that the hop limit cuts the same links whatever
/// route answers first.
struct Routes {
    /// The shortest route known to reach the node.
    best: Vec<u8>,
    /// The port SMPs along `best` enter the node by.
    entry: u8,
    /// Length of the route its links were last followed again from ([`usize::MAX`] until
    /// then: they are followed from the route that found it, as their PortInfo answers).
    refollowed: usize,
    /// Its ports whose links the hop limit stopped (and no later route followed).
    cut: Vec<u8>,
    /// The hop limit stopped a link of this node or of one reached through it: a shorter
    /// route to it must be followed on.
    cut_beyond: bool,
}

/// Whether libibnetdisc reads Mellanox ExtendedPortInfo of this device
/// (`is_mlnx_ext_port_info_supported`: Mellanox switches and HCAs by DeviceID, Bull's by
/// VendorID and DeviceID).
pub fn mlnx_ext_port_info_supported(vendor_id: u32, device_id: u16) -> bool {
    const BULL: u32 = 0x119f;
    let d = device_id;
    let mellanox_switch = matches!(
        d,
        0xc738..=0xc73b | 0xc839 | 0xcb20 | 0xcf08 | 0xcf09 | 0xd2f0
    );
    let bull_switch =
        vendor_id == BULL && matches!(d, 0x1b02 | 0x1b50 | 0x1ba0 | 0x1bd0..=0x1bd5 | 0x1bf0);
    let mellanox_hca = matches!(d, 0x1003..=0x101b | 0xa2d2);
    let bull_hca = vendor_id == BULL
        && matches!(
            d,
            0x1b33
                | 0x1b73
                | 0x1b40
                | 0x1b41
                | 0x1b60
                | 0x1b61
                | 0x1b83
                | 0x1b93
                | 0x1b94
                | 0x1bb4
                | 0x1bb5
                | 0x1bc4..=0x1bc6
        );
    mellanox_switch || bull_switch || mellanox_hca || bull_hca
}

/// Whether the walk asks port `p` of `node` (whose PortInfo `pi` was just read) for its
/// Mellanox ExtendedPortInfo before following it: a QDR link up with no extended speed, on a
/// device libibnetdisc asks.
pub(crate) fn wants_ext_port_info(cfg: &Config, node: &Node, p: u8, pi: &PortInfoRepr) -> bool {
    cfg.mlnx_ext_port_info
        && mlnx_ext_port_info_supported(node.vendor_id, node.device_id)
        && pi.port_physical_state == PhysPortState::LinkUp
        && pi.link_speed_active == SPEED_QDR
        && node
            .port(p)
            .and_then(|x| x.active_rate(node.capability_masks_for(p)))
            .is_some_and(|(_, _, ext)| ext == 0)
}

struct Engine<'a> {
    port: &'a Port,
    /// The HCA's other ports, driven between waits.
    others: &'a [Port],
    agent: Agent,
    cfg: Config,
    queue: VecDeque<Query>,
    in_flight: HashMap<SendId, InFlight>,
    topo: Topology,
    next_tid: u32,
    started: Instant,
    /// Switches found so far (for progress reports, without counting each time).
    switches: usize,
    /// Each node's routes, by node index.
    routes: Vec<Routes>,
    /// The node each answered NodeInfo route reached.
    reached: HashMap<Vec<u8>, NodeIndex>,
}

/// Discover the fabric from `port` (the MAD layer's port of the local HCA), calling
/// `progress` after every batch of events. Registers an agent of its own for the run (a
/// responses-only SMI agent) and deregisters it before returning, so the port's sends and
/// leases are back to what they were.
///
/// Fails only when nothing can go on: a bad setting, the MAD layer refusing the agent, the
/// device dying, the local port not answering, or the MAD layer not completing sends.
/// Everything else (nodes that do not answer, bad answers) is in [`Topology::failures`].
pub fn discover(
    port: &Port,
    cfg: &Config,
    progress: &mut dyn FnMut(&Progress),
) -> Result<Topology, EngineError> {
    discover_with(port, &[], cfg, progress)
}

/// [`discover`] from `port` while keeping `others`, the MAD layer on the HCA's other ports,
/// answering ([`crate::session::drive`]): a walk that comes back into the HCA by one of them
/// asks that port's SMA.
pub fn discover_with(
    port: &Port,
    others: &[Port],
    cfg: &Config,
    progress: &mut dyn FnMut(&Progress),
) -> Result<Topology, EngineError> {
    cfg.check()?;
    let agent = port.register(AgentSpec::responses_only(SpecialQp::Smi))?;
    let started = Instant::now();
    let device_start = port.now();
    let mut e = Engine {
        port,
        others,
        agent,
        cfg: *cfg,
        queue: VecDeque::new(),
        in_flight: HashMap::new(),
        topo: Topology::default(),
        next_tid: 0,
        started,
        switches: 0,
        routes: Vec::new(),
        reached: HashMap::new(),
    };
    e.queue.push_back(Query {
        path: Vec::new(),
        ask: Ask::NodeInfo { via: None },
    });
    let result = e.run(progress);
    let Engine {
        agent,
        mut topo,
        routes,
        ..
    } = e;
    topo.stats.retries = agent.counters().retries;
    topo.stats.beyond_max_hops = routes.iter().map(|r| r.cut.len() as u64).sum();
    // Deregistration completes whatever is still outstanding (after an error) before it
    // returns, so no lease outlives the call.
    agent.deregister();
    result?;
    let mut topo = super::order::in_answer_independent_order(topo, cfg);
    topo.stats.wall = started.elapsed();
    topo.stats.device = port.now().saturating_sub(device_start);
    if topo.from.is_none() {
        let why = topo
            .failures
            .first()
            .map_or_else(|| "no answer".to_owned(), |f| f.kind.to_string());
        return Err(EngineError::NoLocalNode { why });
    }
    Ok(topo)
}

/// How long nothing may happen while sends are outstanding: every attempt's timeout, and a
/// margin for the device.
pub(crate) fn stall_limit(timeout_ms: u32, retries: u32) -> Duration {
    Duration::from_millis(u64::from(timeout_ms).saturating_mul(u64::from(retries) + 1))
        + Duration::from_secs(10)
}

impl Engine<'_> {
    fn run(&mut self, progress: &mut dyn FnMut(&Progress)) -> Result<(), EngineError> {
        let mut last_event = self.port.now();
        loop {
            if let Some(signal) = crate::interrupt::requested() {
                return Err(EngineError::Interrupted { signal });
            }
            self.fill()?;
            progress(&self.progress());
            if self.in_flight.is_empty() && self.queue.is_empty() {
                return Ok(());
            }
            crate::session::drive(self.others);
            let slice = crate::session::wait_slice(self.others, Duration::from_millis(100));
            if let Some(ev) = self.agent.next_event(self.port.deadline_after(slice)) {
                self.handle(ev)?;
                while let Some(ev) = self.agent.try_event() {
                    self.handle(ev)?;
                }
                last_event = self.port.now();
            } else {
                if let Some(reason) = self.port.fatal_reason() {
                    return Err(EngineError::DeviceFatal { reason });
                }
                let waited = self.port.now().saturating_sub(last_event);
                if waited > stall_limit(self.cfg.timeout_ms, self.cfg.retries) {
                    return Err(EngineError::Stalled {
                        outstanding: self.in_flight.len(),
                        waited,
                    });
                }
            }
        }
    }

    fn progress(&self) -> Progress {
        Progress {
            nodes: self.topo.nodes.len(),
            switches: self.switches,
            smps: self.topo.stats.smps,
            in_flight: self.in_flight.len(),
            queued: self.queue.len(),
            failures: self.topo.failures.len(),
            elapsed: self.started.elapsed(),
        }
    }

    /// Send queued queries while the window has room.
    fn fill(&mut self) -> Result<(), EngineError> {
        while self.in_flight.len() < self.cfg.window {
            let Some(q) = self.queue.pop_front() else {
                return Ok(());
            };
            self.send(q)?;
        }
        Ok(())
    }

    fn send(&mut self, q: Query) -> Result<(), EngineError> {
        let (attr, attr_mod) = q.ask.attribute();
        self.next_tid = self.next_tid.wrapping_add(1);
        let repr = match SmpRepr::directed_get(&q.path, attr, attr_mod, u64::from(self.next_tid)) {
            Ok(r) => r,
            Err(e) => {
                self.fail(&q, FailureKind::Refused(e.to_string()));
                return Ok(());
            }
        };
        let mut buf = vec![0u8; 256];
        repr.emit(&mut Smp::new_checked(&mut buf[..]).expect("256 bytes hold an SMP"));
        let req = SendRequest::new(buf, UdDest::DIRECTED_ROUTE)
            .timeout_ms(self.cfg.timeout_ms)
            .retries(self.cfg.retries);
        match self.agent.send(req) {
            Ok(id) => {
                self.topo.stats.smps += 1;
                self.topo.stats.max_hops = self.topo.stats.max_hops.max(q.path.len() as u8);
                self.in_flight.insert(
                    id,
                    InFlight {
                        query: q,
                        answered: false,
                    },
                );
                self.topo.stats.max_in_flight =
                    self.topo.stats.max_in_flight.max(self.in_flight.len());
                Ok(())
            }
            Err(MadError::DeviceFatal { reason }) => Err(EngineError::DeviceFatal { reason }),
            Err(e) => {
                self.fail(&q, FailureKind::Refused(e.to_string()));
                Ok(())
            }
        }
    }

    fn handle(&mut self, ev: Event) -> Result<(), EngineError> {
        match ev {
            Event::Recv(r) => self.on_recv(&r),
            Event::Send(c) => self.on_completion(&c),
            Event::DeviceFatal { reason, .. } => {
                return Err(EngineError::DeviceFatal { reason });
            }
        }
        Ok(())
    }

    fn on_recv(&mut self, r: &RecvMad) {
        let Some(to) = r.response_to else {
            return;
        };
        let Some(f) = self.in_flight.get_mut(&to.id) else {
            return;
        };
        if std::mem::replace(&mut f.answered, true) {
            return;
        }
        let q = f.query.clone();
        self.topo.stats.responses += 1;
        match Self::check_response(&q, &r.mad) {
            Ok(data) => self.on_answer(&q, &data),
            // A device without Mellanox ExtendedPortInfo says so with an error status: that
            // only means "not FDR10", and nothing is missing from the walk.
            Err(FailureKind::Status(_)) if matches!(q.ask, Ask::ExtPortInfo(..)) => {
                self.topo.stats.ext_port_info_unsupported += 1;
                self.after_failure(&q);
            }
            Err(kind) => {
                self.fail(&q, kind);
                self.after_failure(&q);
            }
        }
    }

    fn on_completion(&mut self, c: &SendCompletion) {
        let Some(f) = self.in_flight.remove(&c.id) else {
            return;
        };
        if f.answered {
            return;
        }
        let kind = match c.status {
            WcStatus::RespTimeoutErr => {
                self.topo.stats.timeouts += 1;
                FailureKind::Timeout { retries: c.retries }
            }
            WcStatus::Success => {
                FailureKind::BadResponse("the send completed without a response".into())
            }
            other => FailureKind::Completion(format!("{other:?}")),
        };
        self.fail(&f.query, kind);
        self.after_failure(&f.query);
    }

    /// The data of a response that answers `q` with success, or what is wrong with it.
    fn check_response(q: &Query, mad: &[u8; 256]) -> Result<[u8; 64], FailureKind> {
        let smp = Smp::new_checked(&mad[..])
            .and_then(|v| SmpRepr::parse(&v))
            .map_err(|e| FailureKind::BadResponse(e.to_string()))?;
        let (attr, attr_mod) = q.ask.attribute();
        if smp.method != method::GET_RESP
            || smp.attr_id != attr
            || smp.attr_mod != attr_mod
            || !matches!(smp.route, SmpRoute::Directed(_))
        {
            return Err(FailureKind::BadResponse(format!(
                "method {:#04x} attribute {:#06x}:{} answers a Get of {attr:#06x}:{attr_mod}",
                smp.method, smp.attr_id, smp.attr_mod
            )));
        }
        if smp.status != 0 {
            return Err(FailureKind::Status(smp.status));
        }
        Ok(smp.data)
    }

    fn fail(&mut self, q: &Query, kind: FailureKind) {
        let (attr_id, attr_mod) = q.ask.attribute();
        self.topo.failures.push(Failure {
            path: q.path.clone(),
            attr_id,
            attr_mod,
            node: q.ask.node(),
            kind,
        });
    }

    /// What a failed query still leads to: the walk goes on past a port whose
    /// ExtendedPortInfo failed (libibnetdisc's `mlnx_ext_port_info_err`).
    fn after_failure(&mut self, q: &Query) {
        if let Ask::ExtPortInfo(n, p) = q.ask {
            self.follow(n, p, &q.path);
        }
    }

    fn push(&mut self, path: &[u8], ask: Ask) {
        self.queue.push_back(Query {
            path: path.to_vec(),
            ask,
        });
    }

    fn on_answer(&mut self, q: &Query, data: &[u8; 64]) {
        match q.ask {
            Ask::NodeInfo { via } => self.on_node_info(q, via, data),
            Ask::NodeDescription(n) => self.topo.nodes[n].description = Some(*data),
            Ask::SwitchInfo(n) => {
                match SwitchInfo::new_checked(&data[..]).and_then(|v| SwitchInfoRepr::parse(&v)) {
                    Ok(si) => {
                        self.topo.nodes[n].switch = Some(SwitchDetails {
                            enhanced_port0: si.enhanced_port0,
                            linear_fdb_cap: si.linear_fdb_cap,
                            linear_fdb_top: si.linear_fdb_top,
                            multicast_fdb_cap: si.multicast_fdb_cap,
                            lids_per_port: si.lids_per_port,
                        });
                    }
                    Err(e) => self.fail(q, FailureKind::BadResponse(e.to_string())),
                }
            }
            Ask::PortInfo(n, p) => self.on_port_info(q, n, p, data),
            Ask::ExtPortInfo(n, p) => {
                if let Some(port) = self.topo.nodes[n].ports.get_mut(usize::from(p)) {
                    port.fdr10_active = data[EPI_SPEED_ACTIVE] & EPI_FDR10 != 0;
                }
                self.follow(n, p, &q.path);
            }
        }
    }

    fn on_node_info(&mut self, q: &Query, via: Option<PortRef>, data: &[u8; 64]) {
        let ni = match NodeInfo::new_checked(&data[..]).and_then(|v| NodeInfoRepr::parse(&v)) {
            Ok(ni) => ni,
            Err(e) => return self.fail(q, FailureKind::BadResponse(e.to_string())),
        };
        let local = ni.local_port_num;
        let is_switch = ni.node_type == NodeType::Switch;
        // Port 0 of a switch is its management port, which no cable reaches: a switch that
        // says an SMP from a link came in by port 0 is refused, where libibnetdisc
        // (`recv_node_info`) links its `ports[0]` to the port the SMP left by and so drops
        // the real link. Stricter on purpose: the answer is listed as a failure instead.
        if local == 0 && is_switch && via.is_some() {
            return self.fail(
                q,
                FailureKind::BadResponse(format!(
                    "NodeInfo of switch {:#018x}: LocalPortNum 0 (its management port) for an \
                     SMP that came in over a link",
                    ni.node_guid
                )),
            );
        }
        if ni.num_ports == 0 || local > ni.num_ports || (local == 0 && !is_switch) {
            return self.fail(
                q,
                FailureKind::BadResponse(format!(
                    "NodeInfo of {:#018x}: LocalPortNum {local} with {} ports",
                    ni.node_guid, ni.num_ports
                )),
            );
        }
        let index = match self.topo.node_by_guid(ni.node_guid) {
            Some(i) => {
                let known = &self.topo.nodes[i];
                if known.kind != ni.node_type || known.num_ports != ni.num_ports {
                    return self.fail(
                        q,
                        FailureKind::BadResponse(format!(
                            "NodeGUID {:#018x} answered as a {:?} with {} ports, first as a {:?} with {}",
                            ni.node_guid, ni.node_type, ni.num_ports, known.kind, known.num_ports
                        )),
                    );
                }
                i
            }
            None => self.new_node(q, &ni),
        };
        self.reached.insert(q.path.clone(), index);
        self.shorter_route(index, &q.path, local);
        let here = PortRef {
            node: index,
            port: local,
        };
        if let Some(p) = self.topo.port_mut(here) {
            p.guid = ni.port_guid;
        }
        match via {
            None => {
                self.topo.from = Some(here);
                self.topo.from_port_guid = ni.port_guid;
            }
            Some(v) => self.topo.link(here, v),
        }
        if !is_switch {
            self.push(&q.path, Ask::PortInfo(index, local));
        }
    }

    fn new_node(&mut self, q: &Query, ni: &NodeInfoRepr) -> NodeIndex {
        let is_switch = ni.node_type == NodeType::Switch;
        let ports = (0..=ni.num_ports)
            .map(|num| TopoPort {
                num,
                // A switch's ports all have port 0's GUID.
                guid: if is_switch { ni.port_guid } else { 0 },
                ..TopoPort::default()
            })
            .collect();
        self.routes.push(Routes {
            best: q.path.clone(),
            entry: ni.local_port_num,
            refollowed: usize::MAX,
            cut: Vec::new(),
            cut_beyond: false,
        });
        let index = self.topo.add_node(Node {
            guid: ni.node_guid,
            kind: ni.node_type,
            num_ports: ni.num_ports,
            sys_image_guid: ni.system_image_guid,
            vendor_id: ni.vendor_id,
            device_id: ni.device_id,
            revision: ni.revision,
            description: None,
            path: q.path.clone(),
            hops: q.path.len() as u8,
            switch: None,
            ports,
        });
        self.push(&q.path, Ask::NodeDescription(index));
        if is_switch {
            self.switches += 1;
            self.push(&q.path, Ask::SwitchInfo(index));
            self.push(&q.path, Ask::PortInfo(index, 0));
        }
        index
    }

    fn on_port_info(&mut self, q: &Query, n: NodeIndex, p: u8, data: &[u8; 64]) {
        let pi = match PortInfo::new_checked(&data[..]).and_then(|v| PortInfoRepr::parse(&v)) {
            Ok(pi) => pi,
            Err(e) => return self.fail(q, FailureKind::BadResponse(e.to_string())),
        };
        let node = &mut self.topo.nodes[n];
        let (is_switch, num_ports) = (node.is_switch(), node.num_ports);
        let Some(port) = node.ports.get_mut(usize::from(p)) else {
            return;
        };
        port.info = Some(pi);
        if p == 0 && is_switch {
            for i in 1..=num_ports {
                self.push(&q.path, Ask::PortInfo(n, i));
            }
        }
        if self.wants_ext_port_info(n, p, &pi) {
            self.push(&q.path, Ask::ExtPortInfo(n, p));
            return;
        }
        self.follow(n, p, &q.path);
    }

    fn wants_ext_port_info(&self, n: NodeIndex, p: u8, pi: &PortInfoRepr) -> bool {
        wants_ext_port_info(&self.cfg, &self.topo.nodes[n], p, pi)
    }

    /// Follow port `p` of node `n` (whose PortInfo was asked along `path`) to whatever is
    /// cabled to it, if its link is up and it leads somewhere new: a switch port other than
    /// the one the SMPs came in by, or the local port. It is followed from the node's
    /// shortest known route, which may be shorter than `path`.
    fn follow(&mut self, n: NodeIndex, p: u8, path: &[u8]) {
        let Some(info) = self.topo.nodes[n].port(p).and_then(|x| x.info) else {
            return;
        };
        let r = &self.routes[n];
        let (path, entry) = if r.best.len() < path.len() {
            (r.best.clone(), r.entry)
        } else {
            (path.to_vec(), info.local_port_num)
        };
        self.follow_from(n, p, path, entry);
    }

    /// [`Engine::follow`] along `path`, by which SMPs enter node `n` at port `entry`.
    fn follow_from(&mut self, n: NodeIndex, p: u8, path: Vec<u8>, entry: u8) {
        let node = &self.topo.nodes[n];
        let Some(info) = node.port(p).and_then(|x| x.info) else {
            return;
        };
        if p == 0 || info.port_physical_state != PhysPortState::LinkUp {
            return;
        }
        let here = PortRef { node: n, port: p };
        let onward = node.is_switch() && p != entry;
        if !onward && self.topo.from != Some(here) {
            return;
        }
        if path.len() >= usize::from(self.cfg.max_hops) {
            self.cut(n, p, &path);
            return;
        }
        self.routes[n].cut.retain(|&c| c != p);
        let mut next = path;
        next.push(p);
        self.queue.push_back(Query {
            path: next,
            ask: Ask::NodeInfo { via: Some(here) },
        });
    }

    /// The hop limit stopped port `p` of node `n`, reached along `path`. Every node along
    /// `path` learns that a shorter route to it should be followed on; one that already
    /// knows a shorter route than `path` takes to it follows its links again from there.
    fn cut(&mut self, n: NodeIndex, p: u8, path: &[u8]) {
        if !self.routes[n].cut.contains(&p) {
            self.routes[n].cut.push(p);
        }
        for k in (0..=path.len()).rev() {
            let Some(&a) = self.reached.get(&path[..k]) else {
                continue;
            };
            self.routes[a].cut_beyond = true;
            self.refollow_if_shorter(a, k);
        }
    }

    /// A NodeInfo along `path` reached node `n` by port `entry`: remember the route if it is
    /// the shortest yet, and follow the node on from it if the hop limit stopped anything
    /// it leads to.
    fn shorter_route(&mut self, n: NodeIndex, path: &[u8], entry: u8) {
        let r = &mut self.routes[n];
        if path.len() >= r.best.len() {
            return;
        }
        r.best = path.to_vec();
        r.entry = entry;
        if r.cut_beyond {
            self.refollow_if_shorter(n, usize::MAX);
        }
    }

    /// Follow every port of switch `n` again from its shortest route, when that is shorter
    /// than `than` and than the route they were last followed again from.
    fn refollow_if_shorter(&mut self, n: NodeIndex, than: usize) {
        let r = &self.routes[n];
        let len = r.best.len();
        if !self.topo.nodes[n].is_switch() || len >= than || len >= r.refollowed {
            return;
        }
        let (best, entry) = (r.best.clone(), r.entry);
        self.routes[n].refollowed = len;
        // What the hop limit stops is counted again from this route (the old route's entry
        // port may be one it leaves by, and the new one's is not followed).
        self.routes[n].cut.clear();
        for p in 1..=self.topo.nodes[n].num_ports {
            self.follow_from(n, p, best.clone(), entry);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ext_port_info_devices_follow_libibnetdisc() {
        // Mellanox switch (Quantum 0xcb20) and HCA (ConnectX-5 0x1017) device IDs, whatever
        // the vendor; Bull's only with Bull's vendor ID.
        assert!(mlnx_ext_port_info_supported(0x2c9, 0xcb20));
        assert!(mlnx_ext_port_info_supported(0, 0x1017));
        assert!(mlnx_ext_port_info_supported(0x119f, 0x1bd3));
        assert!(!mlnx_ext_port_info_supported(0x2c9, 0x1bd3));
        assert!(!mlnx_ext_port_info_supported(0, 0));
        assert!(!mlnx_ext_port_info_supported(0x2c9, 0x101c));
    }

    #[test]
    fn an_xdr_port_is_not_asked_for_fdr10() {
        use crate::discover::ibnetdiscover::tests::node_with_ext_speeds;
        use mad::wire::attr::port_info::cap_mask::{HAS_CAP_MASK2, HAS_EXT_SPEEDS};
        // libibnetdisc asks ExtendedPortInfo only when ibnd_get_agg_linkspeedext is 0, and
        // that is 32 for LinkSpeedExtActive2 1 with IsExtSpeeds2Supported (0x0800).
        let cfg = Config::default();
        for (mask2, ext2, wanted) in [(0x0800, 1, false), (0x0800, 0, true), (0, 1, true)] {
            for kind in [NodeType::Switch, NodeType::Ca] {
                let mut n =
                    node_with_ext_speeds(kind, HAS_EXT_SPEEDS | HAS_CAP_MASK2, mask2, 0, ext2);
                // A Quantum switch / ConnectX-5 (Mellanox devices libibnetdisc asks), at QDR.
                n.device_id = if kind == NodeType::Switch {
                    0xcb20
                } else {
                    0x1017
                };
                n.ports[1].info.as_mut().unwrap().link_speed_active = SPEED_QDR;
                let pi = n.ports[1].info.unwrap();
                assert_eq!(
                    wants_ext_port_info(&cfg, &n, 1, &pi),
                    wanted,
                    "{kind:?} mask2 {mask2:#x} ext2 {ext2}"
                );
            }
        }
    }

    #[test]
    fn the_default_window_is_opensms_on_hardware_and_wider_on_the_simulator() {
        assert_eq!(default_window("vfio:0000:03:00.0"), 4);
        assert_eq!(default_window("vfio:03:00.0"), 4);
        assert_eq!(default_window("sim"), 32);
        assert_eq!(default_window("sim:fabric=fat-tree:leaves=2"), 32);
    }

    #[test]
    fn settings_out_of_range_are_refused() {
        let bad = [
            Config {
                window: 0,
                ..Config::default()
            },
            Config {
                max_hops: 64,
                ..Config::default()
            },
            Config {
                timeout_ms: 0,
                ..Config::default()
            },
            Config {
                retries: MAX_RETRIES + 1,
                ..Config::default()
            },
            Config {
                retries: u32::MAX,
                ..Config::default()
            },
        ];
        for c in bad {
            assert!(
                matches!(c.check(), Err(EngineError::BadSetting { .. })),
                "{c:?}"
            );
        }
        assert!(Config::default().check().is_ok());
        let most = Config {
            retries: MAX_RETRIES,
            ..Config::default()
        };
        assert!(most.check().is_ok());
    }
}

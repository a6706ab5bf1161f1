//! One port of the MAD layer: its send rings and receive buffers on QP0 and QP1, its agents,
//! and the progress loop that drains the completion queue, fires response timers and delivers
//! events.
//!
//! Threading: everything is callable from any thread. Sends are posted by the thread that
//! sends (or the one that frees a slot). The progress loop runs on whichever thread drives it
//! — [`Port::progress`], [`Port::progress_until`], [`Agent::next_event`] and
//! [`Agent::deregister`] drive it when it is free, and [`Port::spawn_progress_thread`] gives it
//! a thread of its own — one thread at a time (the progress token, a lock nobody blocks on).
//! No lock that a sender, a canceller or a deregistration waits for is held while the device
//! is called.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{
    Arc, Mutex, MutexGuard, OnceLock, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard,
    TryLockError, Weak,
};
use std::thread::JoinHandle;
use std::time::Duration;

use driver::verbs::{HcaPort, SOFTWARE_FLUSH_VENDOR_ERR, SpecialQp, WcStatus, WorkCompletion};

use crate::addr::LocalPort;
use crate::agent::{Agent, AgentInner, AgentSpec};
use crate::counters::{PortCells, PortCounters, bump};
use crate::error::MadError;
use crate::event::{AgentId, Event, EventQueue, SendCompletion, SendId};
use crate::flow::{self, Backlogged, FlowControl};
use crate::recv::RecvRing;
use crate::registry::{self, Registry};
use crate::ring::{
    BUFS_PER_LEASE, Drained, Job, POST_BATCH, Pending, PostBatch, Queues, Record, SendRing, lock,
};
use crate::slot_events;
use crate::slot_state::{CancelOutcome, SendState};
use crate::tid::{MAX_AGENT_ID, MAX_SLOTS_PER_QP, WrId};
use crate::timer::TimerHeap;
use crate::units::Reserve;
use crate::waiters::{Driver, LetGo, Taken, TokenWaiters};

/// Settings of a [`Port`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortConfig {
    /// The longest the progress loop sleeps in the device's `wait` before it looks again at
    /// work other threads left it (cancels of waiting sends, modified timeouts). Completions
    /// and due timers wake it anyway.
    pub max_sleep: Duration,
    /// Completions taken per `poll` call.
    pub poll_batch: usize,
    /// Send slots per QP: how many sends may be outstanding (posted, or waiting for their
    /// response) before more wait in the queue. Default: 4 × the send queue depth; at most
    /// 8192 (the kernel's largest queue); at least [`MIN_SLOTS`] ([`Port::open`] refuses
    /// fewer with [`MadError::TooFewSlots`]). The send queue's depth itself bounds the work
    /// requests posted at once.
    pub slots: Option<u32>,
}

impl Default for PortConfig {
    /// 5 ms sleeps, 64 completions per poll, 4 slots per send queue entry.
    fn default() -> Self {
        PortConfig {
            max_sleep: Duration::from_millis(5),
            poll_batch: 64,
            slots: None,
        }
    }
}

/// Default send slots per send queue entry ([`PortConfig::slots`]).
pub const DEFAULT_SLOTS_PER_ENTRY: u32 = 4;

/// The fewest send slots per QP ([`PortConfig::slots`]): requests may hold all but one
/// (`SendRing::request_limit`), so that a send awaiting no response (a reply to a loopback
/// request, say) always finds a slot that no request waiting for its response holds.
pub const MIN_SLOTS: u32 = 2;

pub(crate) fn qpi(qp: SpecialQp) -> usize {
    match qp {
        SpecialQp::Smi => 0,
        SpecialQp::Gsi => 1,
    }
}

/// What [`PortShared::fc_drain_locked`] did: the QPs whose rings got work (indexed by `qpi`),
/// and whether the agent handed the front of its ring's unit waiters on to another agent,
/// whom the caller serves once it let go of the agent's lock
/// ([`PortShared::serve_handed_on`]).
#[derive(Clone, Copy, Debug, Default)]
struct BacklogMoved {
    queued: [bool; 2],
    handed_on: bool,
}

/// The agents of a port and what they registered.
#[derive(Default)]
pub(crate) struct AgentTable {
    pub(crate) registry: Registry,
    pub(crate) agents: HashMap<u32, Arc<AgentInner>>,
}

impl AgentTable {
    pub(crate) fn lookup(
        &self,
        version: u8,
        class: u8,
        method: u8,
        oui: u32,
    ) -> Option<Arc<AgentInner>> {
        let id = self.registry.lookup(version, class, method, oui)?;
        self.agents.get(&id).cloned()
    }
}

/// What only the progress loop touches.
pub(crate) struct ProgressState {
    pub(crate) wcs: Vec<WorkCompletion>,
    pub(crate) timers: TimerHeap,
    pub(crate) recv: [Option<RecvRing>; 2],
    /// The TID each slot sent last, to tell a late response from an unknown one.
    pub(crate) last_tid: [Vec<u64>; 2],
    pub(crate) local: LocalPort,
    pub(crate) fatal_handled: bool,
    /// A QP the device moved to error (a receive completed with an error, or a fatal QP
    /// event): its buffers are kept unposted, since a repost would only be flushed.
    pub(crate) qp_in_error: [bool; 2],
    /// A send queue whose recovery failed (its QP still refused posts as in SQE): the device
    /// time before which a refused post does not bring another attempt.
    pub(crate) sq_stuck: [Option<Duration>; 2],
    /// Receive buffers completed in the current poll batch, to repost together (per QP).
    pub(crate) reposts: [Vec<u32>; 2],
    /// Events of this pass's receives and finished sends, queued together (one queue lock per
    /// run of events for one queue) before the pass lets anyone see its work: see
    /// `PortShared::flush_events`.
    pub(crate) staged: Vec<crate::progress::Staged>,
    /// The event queues `flush_events` wakes, kept between passes for its room (empty
    /// outside it).
    pub(crate) to_wake: Vec<Arc<EventQueue>>,
    /// The device time of the completion batch being handled, read at its first send
    /// completion that arms a timer (`None` between batches): the completions of one poll
    /// were all found at once, and reading the clock costs the driver a call each time.
    pub(crate) batch_now: Option<Duration>,
    /// Records of the sends this pass finished, per QP, handed back to their rings at its end
    /// (one queue lock each): see `SendRing::keep_records`.
    pub(crate) spent: [Vec<Record>; 2],
    /// Agents whose solicited sends this pass finished, with how many: they leave the agent's
    /// flow-control count, and its backlog moves on, at the end of the pass (see
    /// `PortShared::fc_release_in_pass`).
    pub(crate) fc_released: Vec<(Arc<AgentInner>, u32)>,
    /// Boxes for received MADs, taken from the port's spares a handful at a time: see
    /// `RecvSpares::take_cached`.
    #[allow(
        clippy::vec_box,
        reason = "a RecvBox holds a Box<RecvMad>: the box is what is reused"
    )]
    pub(crate) recv_boxes: Vec<Box<crate::event::RecvMad>>,
    /// Per QP: this pass gave back send queue entries or slots without kicking the ring's
    /// drainers; it kicks once, at its end, before its own drain (`PortShared::pass`).
    pub(crate) kick_owed: [bool; 2],
}

/// Work another thread leaves the progress loop.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SlotRef {
    pub(crate) qp: SpecialQp,
    pub(crate) index: u32,
    pub(crate) generation: u32,
}

pub(crate) struct PortShared {
    pub(crate) hca: Arc<dyn HcaPort>,
    pub(crate) config: PortConfig,
    pub(crate) port_num: u8,
    pub(crate) rings: [Option<SendRing>; 2],
    pub(crate) recv_depth: [u32; 2],
    pub(crate) agents: RwLock<AgentTable>,
    pub(crate) internal: Arc<AgentInner>,
    pub(crate) progress: Mutex<ProgressState>,
    fatal: OnceLock<String>,
    /// The next send ID.
    pub(crate) next_send: AtomicU64,
    /// The next agent ID to try, masked to [`MAX_AGENT_ID`] (cyclic; 0 is the internal
    /// agent's, IDs in use are skipped).
    pub(crate) next_agent: AtomicU32,
    /// Canceled sends not on the QP: the progress loop completes them.
    pub(crate) reap: Mutex<Vec<SlotRef>>,
    /// Waiting sends whose timeout was modified: a hint for the progress loop to move their
    /// timers to the deadline the modify stored in the slot (`SlotData::deadline`), in case it
    /// is earlier than the one armed. The deadline there is the one that counts: a timer that
    /// fires earlier is armed again from it.
    pub(crate) rearm: Mutex<Vec<SlotRef>>,
    /// Completions made in software for posts the device refused (with whether the work
    /// request had taken a send queue entry).
    pub(crate) soft_cq: Mutex<Vec<(WorkCompletion, bool)>>,
    pub(crate) cells: PortCells,
    /// The port's counters the progress loop adds to (see [`crate::counters::solo`]).
    pub(crate) solo_cells: PortCells,
    /// Gauges the progress loop mirrors for [`Port::census`].
    pub(crate) gauges: Gauges,
    /// The threads that found the progress token taken (parked, or waiting on their event
    /// queue), and the count of its releases they look at.
    waiters: TokenWaiters,
    /// Progress passes so far (device events are taken every few passes).
    pub(crate) passes: AtomicU64,
    /// Directed-route SMPs: local completions and counters (crate::smi).
    pub(crate) smi: crate::smi::SmiState,
    /// RMPP transfers (crate::rmpp).
    pub(crate) rmpp: crate::rmpp::Rmpp,
    /// Boxes of received MADs dropped by their readers, for the next receives (as many as
    /// the deeper receive queue holds at most).
    pub(crate) recv_spares: Arc<crate::event::RecvSpares>,
    /// Set while the progress loop handles a batch of completions: posting waits for the end
    /// of the batch, because an error CQE in it has already put the send queue in SQE on the
    /// device's side and the recovery comes only when the loop reaches that CQE.
    pub(crate) hold_posts: AtomicBool,
    /// A post was refused because the send queue is in SQE (per QP): after a failed recovery
    /// this is what asks the progress loop to try it again (see `PortShared::retry_recovery`).
    pub(crate) sq_refused: [AtomicBool; 2],
    /// Tests only: run by the progress loop between its read of a send's timeout and that
    /// send's CQE transition (`on_send_wc`), to put a modify exactly there.
    #[cfg(test)]
    pub(crate) after_timeout_read: Mutex<Option<Box<dyn FnMut() + Send>>>,
}

/// The progress token held: the loop's state, and on letting go a wake-up for the threads
/// that found it taken ([`LetGo`]). The fields drop in order: the lock first, then the
/// wake-up.
pub(crate) struct Token<'a> {
    st: MutexGuard<'a, ProgressState>,
    _let_go: LetGo<'a>,
}

impl std::ops::Deref for Token<'_> {
    type Target = ProgressState;
    fn deref(&self) -> &ProgressState {
        &self.st
    }
}

impl std::ops::DerefMut for Token<'_> {
    fn deref_mut(&mut self) -> &mut ProgressState {
        &mut self.st
    }
}

#[derive(Default)]
pub(crate) struct Gauges {
    pub(crate) recv_posted: [AtomicUsize; 2],
    pub(crate) recv_idle: [AtomicUsize; 2],
    pub(crate) timers: AtomicUsize,
}

/// A port of the MAD layer. Cheap to clone (a handle); everything is safe from any thread.
#[derive(Clone)]
pub struct Port {
    pub(crate) shared: Arc<PortShared>,
}

impl std::fmt::Debug for Port {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Port")
            .field("port_num", &self.shared.port_num)
            .field("fatal", &self.shared.fatal_reason())
            .finish_non_exhaustive()
    }
}

/// Open the MAD layer on `hca` with the default [`PortConfig`].
pub fn open(hca: Arc<dyn HcaPort>) -> Result<Port, MadError> {
    Port::open(hca, PortConfig::default())
}

/// Slots by state, queued sends and receive buffers of one QP.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QpCensus {
    /// Send slots.
    pub slots: u32,
    /// Slots in each [`SendState`] (indexed by `SendState as usize`).
    pub by_state: [usize; SendState::ALL.len()],
    /// Sends (and retries) waiting for a slot or a send queue entry.
    pub queued: usize,
    /// Send queue depth.
    pub depth: u32,
    /// Work requests posted and not completed (at most `depth`).
    pub posted: u32,
    /// Request units taken: slots holding requests awaiting a response, and units reserved
    /// by queued sends (at most the ring's request limit; 0 when nothing is in flight).
    pub requests_held: u32,
    /// Agents whose backlog waits for a request unit, served in the order they began waiting
    /// (0 when no backlog holds a new send).
    pub unit_waiters: usize,
    /// Receive buffers posted.
    pub recv_posted: usize,
    /// Receive buffers held but not posted (the device refused them back).
    pub recv_idle: usize,
    /// DMA leases holding the slots' send buffers (16 MADs each), leased when the port
    /// opened and kept until it is dropped: the only DMA memory sends use.
    pub send_buffer_leases: usize,
}

impl QpCensus {
    /// Slots in `state`.
    pub fn count(&self, state: SendState) -> usize {
        self.by_state[state as usize]
    }

    /// Slots holding an unfinished send.
    pub fn active(&self) -> usize {
        self.by_state.iter().sum::<usize>()
            - self.count(SendState::Free)
            - self.count(SendState::Done)
    }
}

/// What a port holds at one moment, for leak checks and diagnostics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Census {
    /// QP0 (absent on a function without SMI).
    pub smi: Option<QpCensus>,
    /// QP1.
    pub gsi: QpCensus,
    /// Sends and retries held by flow control over all agents.
    pub backlogged: usize,
    /// Response timers armed (as of the last progress pass).
    pub timers: usize,
    /// Agents registered (the port's own not counted).
    pub agents: usize,
    /// Sends accepted and not finished, over all agents (the port's own replies included).
    pub outstanding: usize,
}

/// A [`Port::open`] that failed: shut down the receive rings already posted, keeping the
/// buffers the live device may still write.
fn abandon_posted(recv: &mut [Option<RecvRing>; 2]) {
    for r in recv.iter_mut().flatten() {
        r.shutdown(true);
    }
}

impl Port {
    /// Open the MAD layer on `hca`: size a send ring per special QP to its send queue and
    /// lease its slots' send buffers, lease and post a receive buffer per receive queue entry.
    pub fn open(hca: Arc<dyn HcaPort>, config: PortConfig) -> Result<Port, MadError> {
        if let Some(slots) = config.slots.filter(|&n| n < MIN_SLOTS) {
            return Err(MadError::TooFewSlots {
                slots,
                min: MIN_SLOTS,
            });
        }
        let attrs = hca.attrs()?;
        let pool = hca.dma().clone();
        let mut rings: [Option<SendRing>; 2] = [None, None];
        let mut recv: [Option<RecvRing>; 2] = [None, None];
        let mut recv_depth = [0u32; 2];
        let mut last_tid: [Vec<u64>; 2] = [Vec::new(), Vec::new()];
        let qps: &[SpecialQp] = if attrs.has_smi {
            &[SpecialQp::Smi, SpecialQp::Gsi]
        } else {
            &[SpecialQp::Gsi]
        };
        for &qp in qps {
            let (sq, rq) = hca.queue_depth(qp);
            let slots = config
                .slots
                .unwrap_or(sq.saturating_mul(DEFAULT_SLOTS_PER_ENTRY))
                .clamp(MIN_SLOTS, MAX_SLOTS_PER_QP);
            let i = qpi(qp);
            // On a failure, the receive rings before this one are posted to the live device:
            // keep what it may still write.
            let leased = SendRing::new(qp, slots, sq, &pool)
                .and_then(|ring| Ok((ring, RecvRing::new(qp, rq, &pool)?)));
            let (ring, mut rr) = match leased {
                Ok(l) => l,
                Err(e) => {
                    abandon_posted(&mut recv);
                    return Err(e.into());
                }
            };
            rings[i] = Some(ring);
            last_tid[i] = vec![0; slots as usize];
            recv_depth[i] = rq;
            let (failed, first) = rr.post_all(&*hca);
            if let Some(source) = first {
                tracing::error!(qp = ?qp, failed, "posting receive buffers failed");
                rr.shutdown(true);
                abandon_posted(&mut recv);
                return Err(MadError::PostRecv { qp, source });
            }
            recv[i] = Some(rr);
        }
        let internal = Arc::new(AgentInner::new(
            AgentId(0),
            &AgentSpec::send_only(SpecialQp::Gsi),
            None,
            0,
        ));
        let shared = PortShared {
            port_num: hca.port_num(),
            config,
            rings,
            recv_depth,
            agents: RwLock::new(AgentTable::default()),
            internal,
            progress: Mutex::new(ProgressState {
                wcs: Vec::with_capacity(config.poll_batch),
                timers: TimerHeap::new(2 * MAX_SLOTS_PER_QP as usize),
                recv,
                last_tid,
                local: LocalPort::new(attrs.lmc, attrs.gid_prefix, attrs.port_guid),
                fatal_handled: false,
                qp_in_error: [false; 2],
                sq_stuck: [None; 2],
                reposts: [Vec::new(), Vec::new()],
                staged: Vec::new(),
                to_wake: Vec::new(),
                batch_now: None,
                spent: [Vec::new(), Vec::new()],
                fc_released: Vec::new(),
                recv_boxes: Vec::new(),
                kick_owed: [false; 2],
            }),
            fatal: OnceLock::new(),
            next_send: AtomicU64::new(1),
            next_agent: AtomicU32::new(1),
            reap: Mutex::new(Vec::new()),
            rearm: Mutex::new(Vec::new()),
            soft_cq: Mutex::new(Vec::new()),
            cells: PortCells::default(),
            solo_cells: PortCells::default(),
            gauges: Gauges::default(),
            waiters: TokenWaiters::new(),
            passes: AtomicU64::new(0),
            smi: crate::smi::SmiState::new(),
            rmpp: crate::rmpp::Rmpp::new(recv_depth[qpi(SpecialQp::Gsi)]),
            recv_spares: crate::event::RecvSpares::new(
                recv_depth.iter().copied().max().unwrap_or(0) as usize,
            ),
            hold_posts: AtomicBool::new(false),
            sq_refused: [AtomicBool::new(false), AtomicBool::new(false)],
            #[cfg(test)]
            after_timeout_read: Mutex::new(None),
            hca,
        };
        shared.mirror_gauges(&lock(&shared.progress));
        Ok(Port {
            shared: Arc::new(shared),
        })
    }

    /// Register an agent. Refused: a registration the kernel refuses (bad class, version,
    /// OUI, RMPP version, class on the wrong QP), a method another agent holds, QP0 on a
    /// function without SMI, a dead device.
    pub fn register(&self, mut spec: AgentSpec) -> Result<Agent, MadError> {
        let s = &self.shared;
        if let Some(reason) = s.fatal_reason() {
            return Err(MadError::DeviceFatal { reason });
        }
        if s.ring(spec.qp).is_none() {
            return Err(MadError::NoSmi { port: s.port_num });
        }
        registry::validate(spec.class.as_ref(), spec.qp, spec.rmpp_version)?;
        let fc_max = flow::limit(
            spec.class.map(|c| c.class),
            spec.responses || spec.class.is_some(),
            s.recv_depth[qpi(spec.qp)],
        );
        let events = spec.events.take().unwrap_or_else(EventQueue::shared);
        let inner = {
            let mut t = s.agents_mut();
            if let Some(reason) = s.fatal_reason() {
                return Err(MadError::DeviceFatal { reason });
            }
            // Cyclic over 1..=MAX_AGENT_ID (23 bits: a local request's TID carries it, as the
            // kernel's carries its 24-bit hi_tid), skipping 0 (the internal agent's) and the
            // IDs of live agents, as the kernel's xa_alloc_cyclic: after the counter wraps, an
            // ID still in use is never handed out again. Under the table's lock, so no other
            // registration takes the same one; there are far fewer live agents than IDs, so
            // this ends. (2^32 is a multiple of 2^23: the masked counter wraps evenly.) Nor
            // the ID of an agent just taken out of the table that its deregistration has not
            // yet taken out of a ring's unit waiters (which know agents by ID).
            let id = loop {
                let id = s.next_agent.fetch_add(1, Ordering::Relaxed) & MAX_AGENT_ID;
                if id != 0 && !t.agents.contains_key(&id) && !s.waits_for_a_unit(id) {
                    break id;
                }
            };
            if let Some(c) = &spec.class {
                t.registry.register(id, c)?;
            }
            let inner = Arc::new(AgentInner::new(AgentId(id), &spec, Some(events), fc_max));
            t.agents.insert(id, Arc::clone(&inner));
            inner
        };
        Ok(Agent::new(inner, Arc::clone(&self.shared)))
    }

    /// One non-blocking pass of the progress loop, if no other thread is running it: returns
    /// the work done (completions, timers, cancels handled).
    pub fn progress(&self) -> usize {
        self.shared.progress_nonblocking()
    }

    /// Drive the progress loop until `deadline` (device time), returning early once it has
    /// done some work; returns the work done.
    pub fn progress_until(&self, deadline: Duration) -> usize {
        let s = &self.shared;
        let mut work = 0;
        s.drive_until(
            &mut |w| {
                work = w;
                w > 0
            },
            Some(deadline),
            &|d, ready| s.park_unless(d, ready),
        );
        work
    }

    /// For a thread waiting for something the progress loop delivers (in a queue of its own
    /// making): drive the loop until it does some work or `deadline` (device time) passes,
    /// sleeping in the device between passes; when another thread holds the loop, wait
    /// instead until that thread does some work, `deadline`, or `max_sleep`. On a dead
    /// device, back after each pass and sleep (at most `max_sleep`): another thread's pass
    /// may have been the one that took the death and told the agents, between two of this
    /// thread's, which then find nothing to do until the deadline. Returns false only when
    /// `deadline` passed with nothing done here; either way the caller looks at what it
    /// waits for and calls again.
    pub fn progress_or_wait(&self, deadline: Duration) -> bool {
        let s = &self.shared;
        loop {
            let now = s.hca.now();
            if now >= deadline {
                return false;
            }
            let mut st = match s.try_progress() {
                Ok(st) => st,
                Err(taken) => {
                    s.park_for_loop(taken, deadline.saturating_sub(now).min(s.config.max_sleep));
                    return true;
                }
            };
            if s.pass(&mut st) > 0 {
                return true;
            }
            s.sleep_in_device(&st, Some(deadline));
            if s.is_fatal() {
                return true;
            }
        }
    }

    /// For a thread that drives the progress loop only while no other thread does: one pass
    /// (unless another thread holds the loop: then a wait for it, as
    /// [`Port::progress_or_wait`]), and when it did nothing, a sleep in the device until it
    /// signals, the next timer, `deadline` or `max_sleep`, with the loop let go meanwhile, so
    /// that a thread wanting it takes it at once. Returns the work the pass did.
    pub fn progress_then_sleep(&self, deadline: Duration) -> usize {
        let s = &self.shared;
        let now = s.hca.now();
        let mut st = match s.try_progress() {
            Ok(st) => st,
            Err(taken) => {
                s.park_for_loop(taken, deadline.saturating_sub(now).min(s.config.max_sleep));
                return 0;
            }
        };
        let work = s.pass(&mut st);
        if work > 0 {
            return work;
        }
        let until = s.sleep_until(&st, s.hca.now(), Some(deadline));
        drop(st);
        if until > s.hca.now() {
            s.hca.wait(until);
        }
        0
    }

    /// The next event of `queue` (shared by agents of this port), waiting until `deadline`
    /// at most; drives the progress loop when no other thread does.
    pub fn wait_event(&self, queue: &Arc<EventQueue>, deadline: Duration) -> Option<Event> {
        self.shared.wait_event(queue, deadline)
    }

    /// Run the progress loop on a thread of its own until the returned handle is stopped or
    /// dropped (or every handle of the port is gone).
    pub fn spawn_progress_thread(&self) -> Result<ProgressThread, MadError> {
        let stop = Arc::new(AtomicBool::new(false));
        let weak: Weak<PortShared> = Arc::downgrade(&self.shared);
        let flag = Arc::clone(&stop);
        let handle = std::thread::Builder::new()
            .name(format!("mad-port{}", self.shared.port_num))
            .spawn(move || {
                while !flag.load(Ordering::Acquire) {
                    let Some(port) = weak.upgrade() else { break };
                    port.tick();
                }
            })
            .map_err(MadError::Thread)?;
        Ok(ProgressThread {
            stop,
            handle: Some(handle),
        })
    }

    /// The device's clock (deadlines are in these terms; virtual on a simulator in virtual
    /// time).
    pub fn now(&self) -> Duration {
        self.shared.hca.now()
    }

    /// `now() + d`.
    pub fn deadline_after(&self, d: Duration) -> Duration {
        self.now() + d
    }

    /// The port's counters.
    pub fn counters(&self) -> PortCounters {
        self.shared.cells.snapshot_with(&self.shared.solo_cells)
    }

    /// Why the device is dead, if it is.
    pub fn fatal_reason(&self) -> Option<String> {
        self.shared.fatal_reason()
    }

    /// The device port underneath.
    pub fn hca(&self) -> &Arc<dyn HcaPort> {
        &self.shared.hca
    }

    /// Port number.
    pub fn port_num(&self) -> u8 {
        self.shared.port_num
    }

    /// Send slots of `qp` (0 if the port has no such QP).
    pub fn slots(&self, qp: SpecialQp) -> u32 {
        self.shared.ring(qp).map_or(0, SendRing::slot_count)
    }

    /// Slots by state, queues, receive buffers, timers, agents: what the port holds now.
    pub fn census(&self) -> Census {
        self.shared.census()
    }
}

/// The progress loop on its own thread; stops (and joins) when dropped.
#[derive(Debug)]
pub struct ProgressThread {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

impl ProgressThread {
    /// Stop the thread and wait for it.
    pub fn stop(mut self) {
        self.join();
    }

    fn join(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(h) = self.handle.take() {
            if h.join().is_err() {
                tracing::error!("the MAD progress thread panicked");
            }
        }
    }
}

impl Drop for ProgressThread {
    fn drop(&mut self) {
        self.join();
    }
}

/// The port's progress loop as the waits for its token see it, for a caller whose wait ends
/// at `deadline` (device time): a pass that did nothing sleeps in the device.
struct PortDriver<'a> {
    port: &'a PortShared,
    deadline: Option<Duration>,
}

impl<'a> PortDriver<'a> {
    fn new(port: &'a PortShared, deadline: Option<Duration>) -> Self {
        PortDriver { port, deadline }
    }
}

impl<'a> Driver for PortDriver<'a> {
    type Guard = MutexGuard<'a, ProgressState>;

    #[inline]
    fn try_lock(&self) -> Option<Self::Guard> {
        self.port.try_lock_progress()
    }

    #[inline]
    fn expired(&self) -> bool {
        let now = self.port.hca.now();
        self.deadline.is_some_and(|d| now >= d)
    }

    #[inline]
    fn run(&mut self, st: &mut Self::Guard) -> usize {
        let w = self.port.pass(st);
        if w == 0 {
            self.port.sleep_in_device(st, self.deadline);
        }
        w
    }
}

impl PortShared {
    pub(crate) fn ring(&self, qp: SpecialQp) -> Option<&SendRing> {
        self.rings[qpi(qp)].as_ref()
    }

    /// The record of a send of `mad` on `qp`: in a buffer of the QP's ring when it has one
    /// (see `SendRing::record`), else a fresh copy.
    #[allow(
        clippy::unnecessary_box_returns,
        reason = "the box is the point: it moves as a pointer, and is reused"
    )]
    pub(crate) fn record(
        &self,
        qp: SpecialQp,
        agent: &Arc<AgentInner>,
        mad: &[u8],
        build: impl FnOnce(Arc<AgentInner>, Vec<u8>) -> Pending,
    ) -> Record {
        match self.ring(qp) {
            Some(ring) => ring.record(agent, mad, build),
            None => Box::new(build(Arc::clone(agent), mad.to_vec())),
        }
    }

    /// Whether agent `id` is among the unit waiters of a ring (see [`crate::units`]).
    pub(crate) fn waits_for_a_unit(&self, id: u32) -> bool {
        self.rings
            .iter()
            .flatten()
            .any(|ring| ring.units.is_waiting(id))
    }

    pub(crate) fn agents_read(&self) -> RwLockReadGuard<'_, AgentTable> {
        self.agents.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn agents_mut(&self) -> RwLockWriteGuard<'_, AgentTable> {
        self.agents.write().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn fatal_reason(&self) -> Option<String> {
        self.fatal.get().cloned()
    }

    pub(crate) fn is_fatal(&self) -> bool {
        self.fatal.get().is_some()
    }

    pub(crate) fn set_fatal(&self, reason: String) {
        self.end(reason, true);
    }

    /// The HCA was closed under the port: the same end as a fatal error, but the order of an
    /// ordinary close (the HCA first, then the port, so that the buffers come back), not an
    /// error to log as one.
    pub(crate) fn set_closed(&self) {
        self.end("the HCA was closed".into(), false);
    }

    fn end(&self, reason: String, error: bool) {
        if self.fatal.set(reason).is_ok() {
            bump(&self.cells.fatal_events);
            let reason = self.fatal.get().map(String::as_str);
            if error {
                tracing::error!(
                    port = self.port_num,
                    reason,
                    "device fatal: completing every outstanding send with WR_FLUSH_ERR"
                );
            } else {
                tracing::debug!(
                    port = self.port_num,
                    reason,
                    "completing every outstanding send with WR_FLUSH_ERR"
                );
            }
        }
    }

    pub(crate) fn next_send_id(&self) -> SendId {
        SendId(self.next_send.fetch_add(1, Ordering::Relaxed))
    }

    /// Wake threads waiting for the progress loop to do something.
    #[inline]
    pub(crate) fn notify_all(&self) {
        self.waiters.notify_all();
    }

    /// The progress loop, unless another thread is running it (a poisoned lock is taken too).
    /// The release count is read before the try ([`TokenWaiters::try_take`]), so that a
    /// release between a failed try and the park that follows is seen
    /// ([`PortShared::park_for_loop`]).
    fn try_progress(&self) -> Result<Token<'_>, Taken> {
        let (st, let_go) = self.waiters.try_take(|| self.try_lock_progress())?;
        Ok(Token {
            st,
            _let_go: let_go,
        })
    }

    /// The progress loop's lock, unless another thread holds it (a poisoned lock is taken
    /// too). Tried only through [`TokenWaiters::try_take`].
    #[inline]
    fn try_lock_progress(&self) -> Option<MutexGuard<'_, ProgressState>> {
        match self.progress.try_lock() {
            Ok(g) => Some(g),
            Err(TryLockError::Poisoned(p)) => Some(p.into_inner()),
            Err(TryLockError::WouldBlock) => None,
        }
    }

    /// True once the token found `taken` was let go.
    fn let_go_since(&self, taken: Taken) -> bool {
        self.waiters.let_go_since(taken)
    }

    /// A thread that found the progress token `taken` waits up to `d` for the holder to do
    /// something or let the token go.
    fn park_for_loop(&self, taken: Taken, d: Duration) {
        self.park_unless(d, &mut || self.let_go_since(taken));
    }

    /// Wait (wall time) up to `d` for the progress loop to do something, unless `ready`
    /// already holds ([`TokenWaiters::park_unless`]: `ready` must take no lock).
    pub(crate) fn park_unless(&self, d: Duration, ready: &mut dyn FnMut() -> bool) {
        self.waiters.park_unless(d, ready);
    }

    fn progress_nonblocking(&self) -> usize {
        self.try_progress().map_or(0, |mut st| self.pass(&mut st))
    }

    /// Run the progress loop (or wait for the thread that runs it) until `done` says so or
    /// `deadline` (device time) passes. Returns whether `done` said so.
    pub(crate) fn drive_until(
        &self,
        done: &mut dyn FnMut(usize) -> bool,
        deadline: Option<Duration>,
        park: &dyn Fn(Duration, &mut dyn FnMut() -> bool),
    ) -> bool {
        self.waiters
            .drive_until(&mut PortDriver::new(self, deadline), done, &|ready| {
                park(self.config.max_sleep, ready);
            })
    }

    /// With the progress token: let the device run until the next timer, `deadline` or
    /// `max_sleep`, whichever is first (it returns sooner when the device signals).
    fn sleep_in_device(&self, st: &ProgressState, deadline: Option<Duration>) {
        let now = self.hca.now();
        let until = self.sleep_until(st, now, deadline);
        if until > now {
            self.hca.wait(until);
        }
    }

    /// When a sleep starting `now` must end: the next timer, `deadline` or `max_sleep`.
    fn sleep_until(
        &self,
        st: &ProgressState,
        now: Duration,
        deadline: Option<Duration>,
    ) -> Duration {
        let mut until = now + self.config.max_sleep;
        if let Some(t) = st.timers.next_deadline() {
            until = until.min(t);
        }
        if let Some(t) = self.rmpp.next_deadline() {
            until = until.min(t);
        }
        if let Some(d) = deadline {
            until = until.min(d);
        }
        until
    }

    /// One step of a progress thread.
    fn tick(&self) {
        match self.try_progress() {
            Ok(mut st) => {
                if self.pass(&mut st) == 0 {
                    self.sleep_in_device(&st, None);
                }
            }
            Err(taken) => self.park_for_loop(taken, self.config.max_sleep),
        }
    }

    pub(crate) fn wait_event(&self, queue: &Arc<EventQueue>, deadline: Duration) -> Option<Event> {
        self.waiters.wait_event(
            &mut PortDriver::new(self, Some(deadline)),
            queue,
            self.config.max_sleep,
        )
    }

    /// Accept `p` of `agent` (counted in its `outstanding` already): to the agent's backlog
    /// if flow control holds it, otherwise to the ring's queue, then post what can be posted.
    /// A solicited send takes its flow-control credit only with a request unit of its ring
    /// (see [`crate::flow`]): without one, or while other agents wait for one before it, it
    /// waits in the backlog too, as an overflow.
    pub(crate) fn submit(&self, agent: &Arc<AgentInner>, mut p: Record) {
        debug_assert_eq!(agent.id, p.agent.id, "the send's own agent");
        let mut handed_on = false;
        {
            let mut fc = lock(&agent.fc);
            if fc.must_wait(p.solicited) {
                fc.backlog.push_back(Backlogged::New(p));
                bump(&agent.cells.backlogged);
                bump(&self.cells.backlogged);
                return;
            }
            if p.solicited && fc.max > 0 {
                match self
                    .ring(agent.qp)
                    .map(|ring| ring.units.reserve(agent.id.0))
                {
                    Some(Reserve::Waiting) => {
                        // No request unit for it: it waits for one at the head of the (empty)
                        // backlog, holding no credit; its agent is among the ring's unit
                        // waiters, which a unit given back serves.
                        fc.backlog.push_back(Backlogged::New(p));
                        bump(&self.cells.overflowed);
                        return;
                    }
                    Some(Reserve::Taken { handed_on: h }) => {
                        p.reserved = true;
                        handed_on = h;
                    }
                    // Agents are only registered on QPs that exist (enqueue completes it).
                    None => {}
                }
                fc.outstanding += 1;
                p.fc_counted = true;
            }
        }
        let qp = agent.qp;
        self.enqueue(p);
        if handed_on {
            self.serve_handed_on(qp);
        }
    }

    /// Queue `p` on its QP's ring and drain.
    pub(crate) fn enqueue(&self, p: Record) {
        let qp = p.agent.qp;
        let Some(ring) = self.ring(qp) else {
            // Agents are only registered on QPs that exist.
            self.complete_pending(p, WcStatus::LocQpOpErr, 0);
            return;
        };
        self.enqueue_job(ring, Job::New(p));
    }

    /// Queue `job` on `ring` and drain.
    pub(crate) fn enqueue_job(&self, ring: &SendRing, job: Job) {
        // A sender that finds nobody draining drains itself: its job then joins the queue under
        // the lock the batch is collected under (one queue lock, no kick: the drainer itself
        // looks at the queue next).
        if !self.hold_posts.load(Ordering::SeqCst) {
            if let Some(seen) = ring.try_begin_drain() {
                if self.drain_held(ring, seen, Some(job)) {
                    self.drain(ring);
                }
                return;
            }
        }
        if ring.enqueue(job) {
            bump(&self.cells.overflowed);
        }
        self.drain(ring);
    }

    /// Post what waits in `ring`'s queue while slots and send queue entries are free (in
    /// order, one drainer at a time), as chains of up to [`POST_BATCH`] work requests behind
    /// one doorbell each; on a dead device, complete it all with WR_FLUSH_ERR.
    pub(crate) fn drain(&self, ring: &SendRing) {
        if self.hold_posts.load(Ordering::SeqCst) {
            // The progress loop drains every ring when its batch is done.
            return;
        }
        ring.drain_with(|seen| self.drain_held(ring, seen, None));
    }

    /// One drain with the posting flag, taken when the kick count was `seen`; `incoming` is
    /// queued first (under the queue lock the first batch is collected under). Gives the flag
    /// back; true if something happened meanwhile that this drain may have missed.
    fn drain_held(&self, ring: &SendRing, seen: u64, mut incoming: Option<Job>) -> bool {
        let dead = self.is_fatal();
        {
            let mut batch = lock(&ring.batch);
            loop {
                let (job, waited) = ring.next_batch(dead, &mut batch, incoming.take());
                if waited {
                    bump(&self.cells.overflowed);
                }
                let full = batch.wrs.len() >= POST_BATCH;
                if !batch.wrs.is_empty() && (job.is_none() || full) {
                    self.post_batch(ring.qp, &mut batch);
                }
                let Some(job) = job else {
                    if full {
                        // More may wait behind a full batch.
                        continue;
                    }
                    break;
                };
                match job {
                    // next_batch goes on after those itself.
                    Drained::Batched => {}
                    Drained::Skip(wr_id) => {
                        self.soft_completion(ring.qp, wr_id, WcStatus::WrFlushErr, 0, false);
                    }
                    Drained::Local {
                        wr_id,
                        mad,
                        pkey_index,
                    } => self.smi_local_installed(ring.qp, wr_id, &mad, pkey_index),
                    Drained::Refused(wr_id) => {
                        bump(&self.cells.post_failures);
                        self.soft_completion(ring.qp, wr_id, WcStatus::LocQpOpErr, 0, true);
                    }
                    Drained::Fail(news, reposts) => {
                        for p in news {
                            self.complete_pending(
                                p,
                                WcStatus::WrFlushErr,
                                SOFTWARE_FLUSH_VENDOR_ERR,
                            );
                        }
                        for wr_id in reposts {
                            self.soft_completion(
                                ring.qp,
                                wr_id,
                                WcStatus::WrFlushErr,
                                SOFTWARE_FLUSH_VENDOR_ERR,
                                false,
                            );
                        }
                    }
                }
            }
        }
        ring.end_drain(seen)
    }

    /// Post the chain in `batch` (each work request has its send queue entry) and empty it.
    /// A work request the device refuses gets its completion in software: WR_FLUSH_ERR
    /// (vendor_err 5) on a dead device, its `on_fail` status otherwise; those after it are
    /// still posted.
    fn post_batch(&self, qp: SpecialQp, batch: &mut PostBatch) {
        let total = batch.wrs.len();
        let mut start = 0;
        while start < total {
            let (n, refused) = self.hca.post_sends(qp, &batch.wrs[start..]);
            let n = n.min(total - start);
            self.cells.posted.fetch_add(n as u64, Ordering::Relaxed);
            start += n;
            match refused {
                Some(e) if start < total => {
                    tracing::debug!(qp = ?qp, "post refused: {e}");
                    let (status, vendor, failed) = match e {
                        driver::verbs::PostError::DeviceFatal(_) => {
                            (WcStatus::WrFlushErr, SOFTWARE_FLUSH_VENDOR_ERR, true)
                        }
                        // The send queue stopped at an error completion the progress loop has
                        // not handled yet (this sender raced it). The hardware would flush this
                        // work request: so does this completion, which the loop handles after
                        // that error, once its recovery marked the send for one repost. It is
                        // no failure of the post: it counts as the flush (and the repost).
                        // After a failed recovery the queue stays in SQE: the send completes
                        // with this flush, and the refusal asks the loop for another attempt.
                        driver::verbs::PostError::SendQueueError(_) => {
                            self.sq_refused[qpi(qp)].store(true, Ordering::Relaxed);
                            (WcStatus::WrFlushErr, 0, false)
                        }
                        _ => (batch.meta[start], 0, true),
                    };
                    if failed {
                        bump(&self.cells.post_failures);
                    }
                    self.unpost(qp, batch.wrs[start].wr_id, batch);
                    self.soft_completion(qp, batch.wrs[start].wr_id, status, vendor, true);
                    start += 1;
                }
                Some(e) => {
                    tracing::error!(qp = ?qp, "post refused past the end of the chain: {e}");
                }
                None if n == 0 => {
                    // A port that posts nothing and names no reason: do not spin on it.
                    tracing::error!(qp = ?qp, "post_sends posted nothing and refused nothing");
                    for i in start..total {
                        bump(&self.cells.post_failures);
                        let (wr_id, on_fail) = (batch.wrs[i].wr_id, batch.meta[i]);
                        self.unpost(qp, wr_id, batch);
                        self.soft_completion(qp, wr_id, on_fail, 0, true);
                    }
                    start = total;
                }
                None => {}
            }
        }
        batch.wrs.clear();
        batch.meta.clear();
    }

    /// The device refused the work request `wr_id` (of a send in a slot of `qp`): take back
    /// the `posted` its agent was counted when it was collected for the chain.
    fn unpost(&self, qp: SpecialQp, wr_id: u64, batch: &PostBatch) {
        let Some(WrId::Send {
            index, generation, ..
        }) = WrId::decode(wr_id)
        else {
            return;
        };
        let Some(slot) = self.ring(qp).and_then(|r| r.slots.get(index as usize)) else {
            return;
        };
        if let Some(d) = lock(&slot.data)
            .as_ref()
            .filter(|d| d.generation == generation)
        {
            crate::counters::posted(batch, &d.p.agent, false);
        }
    }

    /// A completion for `wr_id` made in software, handled by the next progress pass like a
    /// CQE. `credit`: the work request had taken a send queue entry, which comes back with it.
    pub(crate) fn soft_completion(
        &self,
        qp: SpecialQp,
        wr_id: u64,
        status: WcStatus,
        vendor_err: u32,
        credit: bool,
    ) {
        lock(&self.soft_cq).push((
            WorkCompletion::status_only(
                wr_id,
                qp,
                driver::verbs::WcOpcode::Send,
                status,
                vendor_err,
            ),
            credit,
        ));
    }

    /// Finish a send that never got a slot: report it with `status` and drop it (its MAD is in
    /// ordinary memory; a send uses DMA memory only through a slot's send buffer).
    pub(crate) fn complete_pending(&self, p: Record, status: WcStatus, vendor_err: u32) {
        let agent = Arc::clone(&p.agent);
        if p.reserved {
            if let Some(ring) = self.ring(agent.qp) {
                ring.unreserve();
                self.wake_unit_waiters(ring);
            }
        }
        if p.fc_counted {
            self.fc_release(&agent);
        }
        let completion = SendCompletion {
            agent: agent.id,
            id: p.id,
            context: p.context,
            status,
            vendor_err,
            retries: 0,
            tid: p.tid(),
            header: p.header,
        };
        self.cells.completed(status);
        agent.cells.completed(status);
        agent.deliver(Event::Send(completion), self);
        drop(p);
        agent.outstanding.fetch_sub(1, Ordering::SeqCst);
        self.notify_all();
    }

    /// One solicited send of `agent` is no longer outstanding: let the backlog go on (under the
    /// same hold of the agent's lock, so the common case takes it once).
    pub(crate) fn fc_release(&self, agent: &Arc<AgentInner>) {
        let queued = {
            let mut fc = lock(&agent.fc);
            fc.outstanding = fc.outstanding.saturating_sub(1);
            // Under the same lock a sender decides to wait: an empty backlog stays empty for it.
            if fc.backlog.is_empty() {
                return;
            }
            self.fc_drain_locked(agent, &mut fc)
        };
        self.drain_queued(queued);
        if queued.handed_on {
            self.serve_handed_on(agent.qp);
        }
    }

    /// Move what the limit allows from `agent`'s backlog onward: new sends to the ring's
    /// queue, retries back onto the QP.
    pub(crate) fn fc_drain(&self, agent: &Arc<AgentInner>) {
        if self.fc_drain_quiet(agent) {
            self.serve_handed_on(agent.qp);
        }
    }

    /// [`PortShared::fc_drain`] within [`PortShared::wake_unit_waiters`], which serves the
    /// unit waiters itself: returns whether the agent handed the front of its ring's unit
    /// waiters on to another agent ([`Reserve::Taken`]).
    fn fc_drain_quiet(&self, agent: &Arc<AgentInner>) -> bool {
        let queued = self.fc_drain_locked(agent, &mut lock(&agent.fc));
        self.drain_queued(queued);
        queued.handed_on
    }

    /// Another agent became the front of the unit waiters of `qp`'s ring (the one before it
    /// took a unit or left, outside a serve): serve it, as a unit given back would (its
    /// hand-on set the wanted flag).
    pub(crate) fn serve_handed_on(&self, qp: SpecialQp) {
        if let Some(ring) = self.ring(qp) {
            self.wake_unit_waiters(ring);
        }
    }

    /// [`PortShared::fc_release`] for a send the progress loop finished: counted now, and at
    /// the end of the pass ([`PortShared::fc_drain_later`]) the agent's count drops by what
    /// the pass finished and its backlog moves on, under one lock of the agent's (and one of
    /// the queue's) rather than one per finished send. Posting waits for the end of the
    /// pass's completions anyway; a sender that sees the count before then waits in the
    /// backlog, which moves on at that end.
    pub(crate) fn fc_release_in_pass(st: &mut ProgressState, agent: &Arc<AgentInner>) {
        match st
            .fc_released
            .iter_mut()
            .find(|(a, _)| Arc::ptr_eq(a, agent))
        {
            Some((_, n)) => *n += 1,
            None => st.fc_released.push((Arc::clone(agent), 1)),
        }
    }

    /// Apply what [`PortShared::fc_release_in_pass`] counted in the pass, and move the
    /// backlogs on. (Left in the progress state until then, so a pass that panicked leaves
    /// them to the next.)
    pub(crate) fn fc_drain_later(&self, st: &mut ProgressState) {
        while let Some((agent, n)) = st.fc_released.pop() {
            let queued = {
                let mut fc = lock(&agent.fc);
                fc.outstanding = fc.outstanding.saturating_sub(n);
                // As in fc_release: an empty backlog stays empty for a sender that sees the
                // count.
                if fc.backlog.is_empty() {
                    continue;
                }
                self.fc_drain_locked(&agent, &mut fc)
            };
            self.drain_queued(queued);
            // A hand-on set its ring's wanted flag: the wakes below serve it.
        }
        for ring in self.rings.iter().flatten() {
            self.wake_unit_waiters(ring);
        }
    }

    /// Request units came back on `ring`: if a backlog waits for one, move every backlog of
    /// the ring's agents on (rare: only when the ring's requests were at their limit). First
    /// the agents waiting for a unit, in the order they began waiting (`RequestUnits::serve`:
    /// while units last, each takes one in turn), then every other agent of the ring, as
    /// before the order was kept: the agents moved on are the same, only their order is the
    /// waiters'. A backlog still without a unit says so again.
    pub(crate) fn wake_unit_waiters(&self, ring: &SendRing) {
        while ring.units.take_wanted() {
            let mut served: Vec<u32> = Vec::new();
            ring.units.serve(|id| {
                let agent = self
                    .agents_read()
                    .agents
                    .get(&id)
                    .filter(|a| a.qp == ring.qp)
                    .cloned();
                match agent {
                    Some(a) => {
                        // Its hand-on (if any) made another agent the front: `serve` goes on.
                        self.fc_drain_quiet(&a);
                        served.push(id);
                    }
                    // Deregistered (its clean-up takes it out too): the next one is served.
                    None => {
                        ring.units.leave(id);
                    }
                }
            });
            let others: Vec<Arc<AgentInner>> = self
                .agents_read()
                .agents
                .values()
                .filter(|a| a.qp == ring.qp && !served.contains(&a.id.0))
                .cloned()
                .collect();
            let mut handed_on = false;
            for a in &others {
                handed_on |= self.fc_drain_quiet(a);
            }
            // One of them became the front and left it (it joined and took a unit meanwhile,
            // or spent its credit): serve the new front (the hand-on set the flag again).
            if !handed_on {
                break;
            }
        }
    }

    /// `fc_drain` with the agent's lock held (`fc`); returns which QPs got work (indexed by
    /// `qpi`), to be drained once each after the lock ([`PortShared::drain_queued`]), and
    /// whether the agent handed the front of its ring's unit waiters on. What it lets go
    /// joins its ring's queue under one queue lock per ring (taken after the agent's lock, as
    /// every path takes them; a retry's slot lock comes after both, as the drainer takes a
    /// slot's lock under the queue lock; the ring's unit waiters' lock, a leaf, after those),
    /// and the ring is kicked once.
    ///
    /// In backlog order while credits last, except that a new send takes its credit only with
    /// a request unit ([`crate::units::RequestUnits::reserve`]): when none is left for it
    /// (none free, or other agents wait for one before it), the new sends stay (in order,
    /// the agent among the ring's unit waiters), and the retries behind them, which hold
    /// theirs in their slots, go on (see [`crate::flow`]). An agent stays among the unit
    /// waiters only while a new send of its found no unit and it still has a credit to take
    /// one with.
    fn fc_drain_locked(&self, agent: &Arc<AgentInner>, fc: &mut FlowControl) -> BacklogMoved {
        let mut queued = [false; 2];
        let mut handed_on = false;
        let mut queues: [Option<MutexGuard<'_, Queues>>; 2] = [None, None];
        // Entries kept ahead (new sends waiting for a unit) and whether one was.
        let mut at = 0;
        let mut no_unit = false;
        // Whether a new send takes a credit, and so a unit (every backlogged send does: it is
        // solicited, and the agent has a limit).
        let limited = fc.max > 0;
        let counts = |p: &Pending| p.solicited && limited;
        while fc.has_credit() && at < fc.backlog.len() {
            let mut reserved = false;
            if let Backlogged::New(p) = &fc.backlog[at] {
                if counts(p) {
                    if let Some(ring) = self.ring(agent.qp) {
                        if no_unit {
                            at += 1;
                            continue;
                        }
                        match ring.units.reserve(agent.id.0) {
                            Reserve::Taken { handed_on: h } => handed_on |= h,
                            Reserve::Waiting => {
                                no_unit = true;
                                at += 1;
                                continue;
                            }
                        }
                        reserved = true;
                    }
                }
            }
            match fc.backlog.remove(at) {
                Some(Backlogged::New(mut p)) => {
                    let Some(ring) = self.ring(agent.qp) else {
                        // Unreachable: agents are registered only on QPs with a ring
                        // (`Port::register` refuses the others; the internal and RMPP agents
                        // are on QP1, which always has one) and a port's rings are fixed at
                        // open. Were it reached, the send still gets its one completion, as
                        // `enqueue` gives it: it holds no credit and no unit (both are taken
                        // with the ring only), so completing it takes no agent lock.
                        debug_assert!(
                            false,
                            "a backlogged send of an agent on a QP without a ring"
                        );
                        debug_assert!(!p.fc_counted && !p.reserved && !reserved);
                        self.complete_pending(p, WcStatus::LocQpOpErr, 0);
                        continue;
                    };
                    if counts(&p) {
                        fc.outstanding += 1;
                        p.fc_counted = true;
                    }
                    p.reserved = reserved;
                    let i = qpi(agent.qp);
                    let q = queues[i].get_or_insert_with(|| ring.lock_queue());
                    if ring.push_locked(q, Job::New(p)) {
                        bump(&self.cells.overflowed);
                    }
                    queued[i] = true;
                }
                Some(Backlogged::Retry {
                    qp,
                    index,
                    generation,
                }) => {
                    let Some(ring) = self.ring(qp) else { continue };
                    let Some(slot) = ring.slots.get(index as usize) else {
                        continue;
                    };
                    if slot.state.unqueue(generation) {
                        if let Some(d) = lock(&slot.data)
                            .as_mut()
                            .filter(|d| d.generation == generation)
                        {
                            if d.p.solicited && fc.max > 0 {
                                fc.outstanding += 1;
                                d.p.fc_counted = true;
                            }
                        }
                        let i = qpi(qp);
                        let q = queues[i].get_or_insert_with(|| ring.lock_queue());
                        // The kernel's process_backlog_mads completes a backlog entry whose
                        // post fails with LOC_QP_OP_ERR (a retry posted straight from its
                        // timer keeps RESP_TIMEOUT_ERR, as timeout_sends does).
                        let job = Job::Repost {
                            index,
                            generation,
                            on_fail: WcStatus::LocQpOpErr,
                        };
                        if ring.push_locked(q, job) {
                            bump(&self.cells.overflowed);
                        }
                        queued[i] = true;
                    }
                }
                None => break,
            }
        }
        drop(queues);
        for qp in [SpecialQp::Smi, SpecialQp::Gsi] {
            if queued[qpi(qp)] {
                if let Some(ring) = self.ring(qp) {
                    ring.kick();
                }
            }
        }
        // No longer waiting for a unit: every new send took one, or those left wait for a
        // credit (the retries behind them spent the last), which its own sends give back.
        if !(no_unit && fc.has_credit()) {
            if let Some(ring) = self.ring(agent.qp) {
                handed_on |= ring.units.leave(agent.id.0);
            }
        }
        BacklogMoved { queued, handed_on }
    }

    /// Drain the rings `fc_drain_locked` queued work on (after the agent's lock).
    fn drain_queued(&self, moved: BacklogMoved) {
        for qp in [SpecialQp::Smi, SpecialQp::Gsi] {
            if moved.queued[qpi(qp)] {
                if let Some(ring) = self.ring(qp) {
                    self.drain(ring);
                }
            }
        }
    }

    /// [`Agent::cancel`].
    pub(crate) fn cancel(&self, agent: &Arc<AgentInner>, id: SendId) -> Result<(), MadError> {
        if let Some(r) = self.rmpp_cancel(agent, id) {
            return r;
        }
        let ring = self.ring(agent.qp).ok_or(MadError::NotOutstanding(id))?;
        let mut handed_on = false;
        let found = {
            let mut fc = lock(&agent.fc);
            let pos = fc
                .backlog
                .iter()
                .position(|b| matches!(b, Backlogged::New(p) if p.id == id));
            if let Some(Backlogged::New(p)) = pos.and_then(|i| fc.backlog.remove(i)) {
                // Its agent waits for a unit only while a new send of its does.
                if !fc.backlog.iter().any(|b| matches!(b, Backlogged::New(_))) {
                    handed_on = ring.units.leave(agent.id.0);
                }
                p
            } else {
                let mut q = ring.lock_queue();
                let mut v = ring.remove_locked(&mut q, |p| p.id == id && p.agent.id == agent.id);
                if let Some(p) = v.pop() {
                    p
                } else {
                    // With both locks held, the send cannot move between the queue and a slot.
                    for (index, slot) in ring.slots.iter().enumerate() {
                        let Some(generation) = slot.active_generation_of(id) else {
                            continue;
                        };
                        if slot.owner.load(Ordering::Acquire) != agent.id.0 {
                            return Err(MadError::NotOutstanding(id));
                        }
                        let out = slot_events::cancel(&slot.state, generation, || {
                            lock(&self.reap).push(SlotRef {
                                qp: ring.qp,
                                index: index as u32,
                                generation,
                            });
                        });
                        return match out {
                            CancelOutcome::Canceled { .. } => {
                                // A QUEUED retry leaves the backlog now, not at the next
                                // drain: until then it would hold later sends back.
                                fc.remove_retry(ring.qp, index as u32, generation);
                                Ok(())
                            }
                            _ => Err(MadError::NotOutstanding(id)),
                        };
                    }
                    return Err(MadError::NotOutstanding(id));
                }
            }
        };
        self.complete_pending(found, WcStatus::WrFlushErr, self.flush_vendor());
        if handed_on {
            self.wake_unit_waiters(ring);
        }
        Ok(())
    }

    /// [`Agent::modify_timeout`] with a non-zero timeout.
    pub(crate) fn modify(
        &self,
        agent: &Arc<AgentInner>,
        id: SendId,
        timeout_ms: u32,
    ) -> Result<(), MadError> {
        if let Some(r) = self.rmpp_modify(agent, id, timeout_ms) {
            return r;
        }
        let ring = self.ring(agent.qp).ok_or(MadError::NotOutstanding(id))?;
        let deadline = self.hca.now() + Duration::from_millis(u64::from(timeout_ms));
        let mut fc = lock(&agent.fc);
        for b in &mut fc.backlog {
            if let Backlogged::New(p) = b {
                if p.id == id {
                    // Its first wait (QUEUED is active in `ib_modify_mad`).
                    p.wait_ms = timeout_ms;
                    return Ok(());
                }
            }
        }
        let mut q = ring.lock_queue();
        for job in q.jobs_mut() {
            if let Job::New(p) = job {
                if p.id == id && p.agent.id == agent.id {
                    p.wait_ms = timeout_ms;
                    return Ok(());
                }
            }
        }
        for (index, slot) in ring.slots.iter().enumerate() {
            let Some(generation) = slot.active_generation_of(id) else {
                continue;
            };
            // The kernel's ib_modify_mad decides under the agent's lock, which the send's
            // completion and its timer take too; here the slot's data lock stands for it. The
            // send's CQE transition takes it only for a send awaiting no response (one
            // awaiting one reads the timeout again after it: `slot_events::modify`); the
            // timer decides under it, against the deadline stored here.
            let mut d = lock(&slot.data);
            // With the send's data held, its slot is not recycled (the data is taken out
            // first), so what `slot_events::modify` stores is this send's.
            let Some(d) = d
                .as_mut()
                .filter(|d| d.generation == generation && d.p.agent.id == agent.id)
            else {
                return Err(MadError::NotOutstanding(id));
            };
            match slot_events::modify(&slot.state, generation, &slot.timeout_ms, timeout_ms) {
                Some(SendState::WaitResp) => {
                    // The wait began at its CQE: it now ends `timeout_ms` from now
                    // (`ib_reset_mad_timeout`). The timer armed at the CQE fires against this
                    // deadline; the hint moves it earlier if need be. A retry after it waits
                    // the send's own timeout (the timer stores it back).
                    d.deadline = Some(deadline);
                    lock(&self.rearm).push(SlotRef {
                        qp: ring.qp,
                        index: index as u32,
                        generation,
                    });
                }
                // The wait its CQE begins takes the timeout `slot_events::modify` stored (for a
                // QUEUED retry: the wait after its post), and only that wait.
                Some(SendState::SendStart | SendState::EarlyResp | SendState::Queued) => {}
                // Canceled or finishing: nothing reads the timeout it stored.
                _ => return Err(MadError::NotOutstanding(id)),
            }
            drop(q);
            drop(fc);
            return Ok(());
        }
        Err(MadError::NotOutstanding(id))
    }

    /// Cancel everything `agent` has outstanding: backlog and queue entries are completed now,
    /// slots are canceled (completing at their CQE, or from the progress loop).
    fn cancel_all(&self, agent: &Arc<AgentInner>) {
        self.rmpp_cancel_agent(agent);
        let Some(ring) = self.ring(agent.qp) else {
            return;
        };
        let mut list = Vec::new();
        let handed_on;
        {
            let mut fc = lock(&agent.fc);
            for b in fc.backlog.drain(..) {
                if let Backlogged::New(p) = b {
                    list.push(p);
                }
            }
            // No new send of its waits for a unit any more.
            handed_on = ring.units.leave(agent.id.0);
            let mut q = ring.lock_queue();
            list.extend(ring.remove_locked(&mut q, |p| p.agent.id == agent.id));
            let mut reap = Vec::new();
            for (index, slot) in ring.slots.iter().enumerate() {
                if let Some(generation) = slot.active_generation_of_agent(agent.id.0) {
                    slot_events::cancel(&slot.state, generation, || {
                        reap.push(SlotRef {
                            qp: ring.qp,
                            index: index as u32,
                            generation,
                        });
                    });
                }
            }
            lock(&self.reap).extend(reap);
        }
        for p in list {
            self.complete_pending(p, WcStatus::WrFlushErr, self.flush_vendor());
        }
        if handed_on {
            self.wake_unit_waiters(ring);
        }
    }

    /// [`Agent::deregister`].
    pub(crate) fn deregister(&self, agent: &Arc<AgentInner>) {
        agent.closing.store(true, Ordering::SeqCst);
        {
            let mut t = self.agents_mut();
            if let Some(c) = &agent.class {
                t.registry.unregister(agent.id.0, c);
            }
            t.agents.remove(&agent.id.0);
        }
        loop {
            self.cancel_all(agent);
            if agent.outstanding.load(Ordering::SeqCst) == 0 {
                break;
            }
            // One step: run the loop (or wait for whoever runs it), then sweep again for
            // sends that raced the first sweep.
            let step_end = self.hca.now() + self.config.max_sleep;
            self.drive_until(
                &mut |_| agent.outstanding.load(Ordering::SeqCst) == 0,
                Some(step_end),
                &|d, ready| self.park_unless(d, ready),
            );
        }
        // Nothing of it left in a backlog, so not among any ring's unit waiters either (every
        // path that takes a new send out of a backlog makes its agent leave when none is left).
        debug_assert!(
            !self.waits_for_a_unit(agent.id.0),
            "a deregistered agent left among the unit waiters"
        );
        if let Some(q) = agent.events.as_ref() {
            let _queue = q.lock();
            agent.closed.store(true, Ordering::Release);
        } else {
            agent.closed.store(true, Ordering::Release);
        }
        // The records its finished sends left for new sends name it no more (see
        // `SendRing::keep_records`): nothing the port keeps holds the agent or its queue.
        for ring in self.rings.iter().flatten() {
            ring.forget_agent(agent, &self.internal);
        }
    }

    pub(crate) fn census(&self) -> Census {
        let qp_census = |ring: &SendRing| {
            let mut c = QpCensus {
                slots: ring.slot_count(),
                queued: ring.queued(),
                depth: ring.depth,
                posted: ring.posted(),
                requests_held: ring.requests_held(),
                unit_waiters: ring.units.waiting(),
                recv_posted: self.gauges.recv_posted[qpi(ring.qp)].load(Ordering::Relaxed),
                recv_idle: self.gauges.recv_idle[qpi(ring.qp)].load(Ordering::Relaxed),
                send_buffer_leases: ring.buffer_leases,
                ..QpCensus::default()
            };
            for s in &*ring.slots {
                c.by_state[s.state.load().state() as usize] += 1;
            }
            c
        };
        let (backlogged, agents, mut outstanding) = {
            let t = self.agents_read();
            let mut b = 0;
            let mut o = 0;
            for a in t.agents.values() {
                b += lock(&a.fc).backlog.len();
                o += a.outstanding.load(Ordering::SeqCst);
            }
            (b, t.agents.len(), o)
        };
        outstanding += self.internal.outstanding.load(Ordering::SeqCst) + self.rmpp.outstanding();
        Census {
            smi: self.ring(SpecialQp::Smi).map(qp_census),
            gsi: self.ring(SpecialQp::Gsi).map(qp_census).unwrap_or_default(),
            backlogged,
            timers: self.gauges.timers.load(Ordering::Relaxed),
            agents,
            outstanding,
        }
    }

    pub(crate) fn mirror_gauges(&self, st: &ProgressState) {
        for (i, r) in st.recv.iter().enumerate() {
            if let Some(r) = r {
                self.gauges.recv_posted[i].store(r.posted(), Ordering::Relaxed);
                self.gauges.recv_idle[i].store(r.idle(), Ordering::Relaxed);
            }
        }
        self.gauges.timers.store(st.timers.len(), Ordering::Relaxed);
    }
}

impl Drop for PortShared {
    /// Every client agent is gone (each held the port). Let the port's own replies finish (a
    /// second of device time at most), take back what the device returns, then release the
    /// receive and send buffers: those still posted to a live device are leaked on purpose,
    /// because the device may still access them (close the HCA before dropping the port to
    /// get them back). A send buffer is leaked with the lease it shares with 15 others.
    fn drop(&mut self) {
        let internal = Arc::clone(&self.internal);
        let deadline = self.hca.now() + Duration::from_secs(1);
        self.drive_until(
            &mut |_| {
                internal.outstanding.load(Ordering::SeqCst) == 0 && self.rmpp.outstanding() == 0
            },
            Some(deadline),
            &|d, _| std::thread::sleep(d),
        );
        let _ = self.progress_nonblocking();
        let dead = self.is_fatal();
        let st = self
            .progress
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner);
        let mut leaked = 0;
        for r in st.recv.iter_mut().flatten() {
            leaked += r.shutdown(!dead);
        }
        for ring in self.rings.iter_mut().flatten() {
            let mut on_qp = vec![false; ring.buffer_leases];
            for (index, slot) in ring.slots.iter().enumerate() {
                let w = slot.state.load();
                if lock(&slot.data).take().is_some() && w.on_qp() && !dead {
                    on_qp[index / BUFS_PER_LEASE as usize] = true;
                }
            }
            let queues = ring.queue.get_mut().unwrap_or_else(PoisonError::into_inner);
            for (lease, keep) in std::mem::take(&mut queues.buffers).into_iter().zip(on_qp) {
                if keep {
                    std::mem::forget(lease);
                    leaked += 1;
                }
            }
        }
        if leaked > 0 {
            tracing::warn!(
                port = self.port_num,
                leaked,
                "MAD port dropped while the device still held buffers: they are leaked rather \
                 than freed under the device (close the HCA first)"
            );
        }
    }
}

#[cfg(test)]
impl Port {
    /// The send ring of `qp`, for the unit tests that reach into its send buffers.
    pub(crate) fn send_ring(&self, qp: SpecialQp) -> &SendRing {
        self.shared.ring(qp).expect("a send ring on this QP")
    }
}

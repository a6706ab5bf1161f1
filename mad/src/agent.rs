//! Agents: what a client registers (class, version, methods, OUI; or send-only), the handle it
//! sends, cancels and reads events with, and synchronous deregistration.

use std::borrow::Cow;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use driver::verbs::{SpecialQp, UdDest};
use mad_wire::class;
use mad_wire::header::{HEADER_LEN, MAD_LEN, is_response};

use crate::counters::{AgentCells, AgentCounters, bump};
use crate::error::MadError;
use crate::event::{AgentId, Event, EventQueue, SendId};
use crate::flow::{self, FlowControl};
use crate::port::PortShared;
use crate::registry::{ClassRegistration, MethodMask};
use crate::ring::Pending;
use crate::smi::SmiRoute;

/// What to register.
#[derive(Clone, Debug)]
pub struct AgentSpec {
    /// The QP the agent sends on (and receives its class on): QP0 for SMPs, QP1 otherwise.
    pub qp: SpecialQp,
    /// Unsolicited MADs to receive; `None` for an agent that only sends (and, with
    /// `responses`, gets the responses to its requests).
    pub class: Option<ClassRegistration>,
    /// The agent has a receive side (the kernel's `recv_handler`): responses to its requests
    /// are delivered, and its solicited sends are under flow control ([`crate::flow`]).
    /// Always true when `class` is given. Without it the agent may still send with a
    /// response timeout (as since the kernel's 2025 flow-control series), but responses to
    /// it are dropped (counted as [`crate::DropReason::NotExpected`]): such a send ends at
    /// its last timeout.
    pub responses: bool,
    /// RMPP version (0 or 1) for RMPP-capable classes. With 1 the stack runs RMPP for the
    /// agent (sends with the RMPP Active flag become transfers, segments are reassembled);
    /// with 0 RMPP segments pass as single MADs (user RMPP). See [`crate::rmpp`].
    pub rmpp_version: u8,
    /// The queue to deliver into; `None` gives the agent a queue of its own.
    pub events: Option<Arc<EventQueue>>,
}

impl AgentSpec {
    /// An agent that only sends, on `qp`: it receives nothing (a send with a response timeout
    /// ends at its last timeout, its responses dropped) and has no flow control.
    pub fn send_only(qp: SpecialQp) -> AgentSpec {
        AgentSpec {
            qp,
            class: None,
            responses: false,
            rmpp_version: 0,
            events: None,
        }
    }

    /// An agent that sends requests and receives their responses, but no unsolicited MAD
    /// (umad's class-0 agents).
    pub fn responses_only(qp: SpecialQp) -> AgentSpec {
        AgentSpec {
            responses: true,
            ..AgentSpec::send_only(qp)
        }
    }

    /// An agent for `class` at `version` that receives the unsolicited `methods`, on the QP
    /// the class uses.
    pub fn class(class: u8, version: u8, methods: MethodMask) -> AgentSpec {
        let qp = if class::is_smp(class) {
            SpecialQp::Smi
        } else {
            SpecialQp::Gsi
        };
        AgentSpec {
            qp,
            class: Some(ClassRegistration {
                class,
                version,
                methods,
                oui: None,
            }),
            responses: true,
            rmpp_version: 0,
            events: None,
        }
    }

    /// An agent for vendor range-2 `class` with `oui`.
    pub fn vendor(class: u8, version: u8, oui: u32, methods: MethodMask) -> AgentSpec {
        let mut s = AgentSpec::class(class, version, methods);
        if let Some(c) = s.class.as_mut() {
            c.oui = Some(oui);
        }
        s
    }

    /// Deliver into `queue` (shared with other agents).
    #[must_use]
    pub fn with_events(mut self, queue: Arc<EventQueue>) -> AgentSpec {
        self.events = Some(queue);
        self
    }

    /// Register with RMPP version `v`.
    #[must_use]
    pub fn with_rmpp(mut self, v: u8) -> AgentSpec {
        self.rmpp_version = v;
        self
    }
}

/// One MAD to send.
///
/// The MAD is owned or borrowed ([`Cow`]): the stack copies it before [`Agent::send`]
/// returns, so a caller that sends from a buffer of its own (an array it rewrites for each
/// send) lends it, and no allocation is made or freed for the send.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SendRequest<'a> {
    /// The MAD: 24 to 256 bytes (zero-padded to 256). For a request (not a response), the
    /// upper 32 bits of its TID are replaced by the stack's; the lower 32 are the client's.
    /// (An agent without RMPP sending a user-RMPP transfer: its MADs after the First segment
    /// go with the transfer's TID, [`crate::rmpp::user_send`].)
    /// An RMPP transfer (agent registered with RMPP, Active flag set) is the whole message,
    /// of any length from its class header up: the header (e.g. 56 bytes for the SA), then
    /// the data, which the stack cuts into segments.
    pub mad: Cow<'a, [u8]>,
    /// Where it goes.
    pub dest: UdDest,
    /// Response timeout in ms; 0 when no response is expected. The timer starts when the send
    /// completes on the wire.
    pub timeout_ms: u32,
    /// Retries after a response timeout (attempts on the wire = retries + 1).
    pub retries: u32,
    /// Returned with the completion and with the response.
    pub context: u64,
}

impl<'a> SendRequest<'a> {
    /// `mad` (a `Vec<u8>` to hand over, or a `&[u8]`, `&[u8; N]` or `&Vec<u8>` to lend) to
    /// `dest`, no response expected.
    pub fn new(mad: impl Into<Cow<'a, [u8]>>, dest: UdDest) -> SendRequest<'a> {
        SendRequest {
            mad: mad.into(),
            dest,
            timeout_ms: 0,
            retries: 0,
            context: 0,
        }
    }

    /// Expect a response within `ms` after each attempt.
    #[must_use]
    pub fn timeout_ms(mut self, ms: u32) -> SendRequest<'a> {
        self.timeout_ms = ms;
        self
    }

    /// Retry `n` times after a timeout.
    #[must_use]
    pub fn retries(mut self, n: u32) -> SendRequest<'a> {
        self.retries = n;
        self
    }

    /// Attach `context`.
    #[must_use]
    pub fn context(mut self, context: u64) -> SendRequest<'a> {
        self.context = context;
        self
    }
}

/// The shared state of one agent.
pub(crate) struct AgentInner {
    pub(crate) id: AgentId,
    pub(crate) qp: SpecialQp,
    pub(crate) class: Option<ClassRegistration>,
    pub(crate) receives: bool,
    pub(crate) rmpp_version: u8,
    /// `None` for the port's internal agent (its completions are only counted).
    pub(crate) events: Option<Arc<EventQueue>>,
    /// No new sends (deregistration started).
    pub(crate) closing: AtomicBool,
    /// No new events (set under the event queue's lock when deregistration ends).
    pub(crate) closed: AtomicBool,
    /// Accepted sends not yet finished and released.
    pub(crate) outstanding: AtomicUsize,
    pub(crate) fc: Mutex<FlowControl>,
    pub(crate) cells: AgentCells,
    /// Its counters the progress loop adds to (see [`crate::counters::solo`]).
    pub(crate) solo_cells: AgentCells,
    pub(crate) fatal_told: AtomicBool,
}

impl AgentInner {
    pub(crate) fn new(
        id: AgentId,
        spec: &AgentSpec,
        events: Option<Arc<EventQueue>>,
        fc_max: u32,
    ) -> AgentInner {
        AgentInner {
            id,
            qp: spec.qp,
            class: spec.class,
            receives: spec.responses || spec.class.is_some(),
            rmpp_version: spec.rmpp_version,
            events,
            closing: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            outstanding: AtomicUsize::new(0),
            fc: Mutex::new(FlowControl::new(fc_max)),
            cells: AgentCells::default(),
            solo_cells: AgentCells::default(),
            fatal_told: AtomicBool::new(false),
        }
    }

    /// Deliver `ev` (dropped and counted if the agent is closed or its queue is full).
    pub(crate) fn deliver(&self, ev: Event, port: &PortShared) {
        let Some(q) = self.events.as_ref() else {
            return;
        };
        if let Err(refused) = q.push(ev, &self.closed) {
            self.refused(refused, port);
        }
    }

    /// Count an event its queue refused (the agent closed, or its queue full).
    pub(crate) fn refused(&self, refused: crate::event::PushRefused, port: &PortShared) {
        let reason = match refused {
            crate::event::PushRefused::Closed => crate::counters::DropReason::AgentClosed,
            crate::event::PushRefused::Full => crate::counters::DropReason::QueueFull,
        };
        self.cells.dropped(reason);
        port.cells.dropped(reason);
    }
}

/// A registered agent. Dropping it deregisters it (synchronously: see
/// [`Agent::deregister`]).
pub struct Agent {
    pub(crate) inner: Arc<AgentInner>,
    pub(crate) port: Arc<PortShared>,
    done: bool,
}

impl std::fmt::Debug for Agent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agent")
            .field("id", &self.inner.id)
            .field("qp", &self.inner.qp)
            .field("class", &self.inner.class)
            .field("outstanding", &self.outstanding())
            .finish_non_exhaustive()
    }
}

impl Agent {
    pub(crate) fn new(inner: Arc<AgentInner>, port: Arc<PortShared>) -> Agent {
        Agent {
            inner,
            port,
            done: false,
        }
    }

    /// The agent's ID on its port.
    pub fn id(&self) -> AgentId {
        self.inner.id
    }

    /// The QP it sends on.
    pub fn qp(&self) -> SpecialQp {
        self.inner.qp
    }

    /// What it registered for.
    pub fn registration(&self) -> Option<ClassRegistration> {
        self.inner.class
    }

    /// The queue its events go to.
    pub fn events(&self) -> &Arc<EventQueue> {
        self.inner
            .events
            .as_ref()
            .expect("client agents always have a queue")
    }

    /// Send one MAD. On `Ok` the send is accepted and will end in exactly one
    /// [`Event::Send`]; sends beyond the free slots (or the agent's solicited-MAD limit) wait
    /// in order and are never refused for lack of room.
    ///
    /// An agent registered with RMPP sends a message of any length with the RMPP Active flag
    /// set (byte 26, bit 0) as one RMPP transfer ([`crate::rmpp`]), and, as in the kernel,
    /// only classes that may use RMPP ([`MadError::RmppClass`]). A directed-route SMP
    /// passes the SMI send rules, and one for this port itself is answered by the port's SMA
    /// without the wire ([`crate::smi`]).
    ///
    /// Refused (nothing sent, no completion): device dead ([`MadError::DeviceFatal`]), agent
    /// deregistered, a MAD shorter than its header or (without RMPP) longer than one MAD, a
    /// class that does not use the agent's QP, RMPP misuse, a directed route the SMI rules discard, a local SMP the port's SMA could
    /// not process, no DMA memory (for an RMPP transfer's or a local SMP's own needs; an
    /// ordinary send uses its slot's send buffer, leased when the port opened).
    pub fn send(&self, req: SendRequest<'_>) -> Result<SendId, MadError> {
        let SendRequest {
            mut mad,
            dest,
            timeout_ms,
            retries,
            context,
        } = req;
        let port = &self.port;
        let agent = &self.inner;
        if let Some(reason) = port.fatal_reason() {
            return Err(MadError::DeviceFatal { reason });
        }
        if agent.closing.load(Ordering::SeqCst) {
            return Err(MadError::AgentClosed);
        }
        let len = mad.len();
        if len < HEADER_LEN {
            return Err(MadError::MadTooShort { len });
        }
        if len > MAD_LEN && agent.rmpp_version == 0 {
            return Err(MadError::MadTooLarge { len, max: MAD_LEN });
        }
        let mad_class = mad[1];
        if class::is_smp(mad_class) != (agent.qp == SpecialQp::Smi) {
            return Err(MadError::ClassNotOnQp {
                class: mad_class,
                qp: agent.qp,
            });
        }
        // The kernel's ib_post_send_mad: an agent registered with an RMPP version sends only
        // classes that may use RMPP, Active flag or not.
        if agent.rmpp_version != 0 && !class::is_rmpp_capable(mad_class) {
            return Err(MadError::RmppClass { class: mad_class });
        }
        // RMPP transfers (crate::rmpp) and directed-route SMPs (crate::smi: the send rules,
        // and SMPs for this port answered locally) leave the ordinary path here.
        if let Some(id) = port.rmpp_send(agent, &mad, dest, timeout_ms, retries, context)? {
            return Ok(id);
        }
        if len > MAD_LEN {
            return Err(MadError::MadTooLarge { len, max: MAD_LEN });
        }
        let attr_mod = u32::from_be_bytes([mad[20], mad[21], mad[22], mad[23]]);
        let mut keep_tid = is_response(mad_class, mad[3], attr_mod);
        // User RMPP: a request-method MAD that continues a transfer of the agent keeps the
        // transfer's TID (crate::rmpp::user_send).
        if !keep_tid
            && agent.rmpp_version == 0
            && len >= mad_wire::rmpp::RMPP_HEADER_END
            && mad[26] & mad_wire::rmpp::flags::ACTIVE != 0
            && class::is_rmpp_capable(mad_class)
        {
            if let Some(tid) = port.user_rmpp_tid(agent, &mad, &dest) {
                mad.to_mut()[8..16].copy_from_slice(&tid.to_be_bytes());
                keep_tid = true;
            }
        }
        let mut header = [0u8; HEADER_LEN];
        header.copy_from_slice(&mad[..HEADER_LEN]);
        let build = |agent, mad| Pending {
            agent,
            id: port.next_send_id(),
            mad,
            header,
            dest,
            timeout_ms,
            wait_ms: timeout_ms,
            max_retries: retries,
            context,
            solicited: flow::is_solicited(mad_class, timeout_ms),
            fc_counted: false,
            reserved: false,
            is_response: keep_tid,
            local: false,
        };
        // The MAD waits in a buffer of the ring's (see `SendRing::record`); the caller's
        // bytes are not kept.
        let mut pending = port.record(agent.qp, agent, &mad, build);
        let mut smi_route = None;
        if mad_class == class::SUBN_DIRECTED_ROUTE {
            // The SMI send rules move the hop pointer: in the stack's copy (the caller's
            // bytes may be borrowed), padded to a whole MAD; the kept header follows.
            if pending.mad.len() < MAD_LEN {
                pending.mad.resize(MAD_LEN, 0);
            }
            let route = port.smi_send(
                agent,
                &mut pending.mad,
                &dest,
                context,
                timeout_ms,
                pending.id,
            )?;
            match route {
                SmiRoute::Done(id) => return Ok(id),
                SmiRoute::Wire => {}
                SmiRoute::LocalRequest => {
                    // Handed to its agent once, as the kernel does (it never retries a local
                    // SMP): a retry would only hand it to the same agent again.
                    pending.local = true;
                    pending.max_retries = 0;
                    // Outside flow control: the kernel's ib_post_send_mad consumes a local
                    // SMP in handle_outgoing_dr_smp before it asks is_solicited_fc_mad, so
                    // it never counts against the limit nor waits in the backlog (and with
                    // `fc_counted` never set, its end releases nothing).
                    pending.solicited = false;
                }
            }
            pending.header.copy_from_slice(&pending.mad[..HEADER_LEN]);
            smi_route = Some(route);
        }
        // Counted before the closing check, which deregistration sets before it sweeps: either
        // deregistration sees this send, or this send sees it closing.
        agent.outstanding.fetch_add(1, Ordering::SeqCst);
        if agent.closing.load(Ordering::SeqCst) {
            agent.outstanding.fetch_sub(1, Ordering::SeqCst);
            port.notify_all();
            return Err(MadError::AgentClosed);
        }
        let id = pending.id;
        bump(&agent.cells.sends);
        bump(&port.cells.sends);
        if let Some(route) = &smi_route {
            port.smi_accepted(route);
        }
        port.submit(agent, pending);
        Ok(id)
    }

    /// Cancel send `id` (the kernel's `ib_cancel_mad`). Its one completion, WR_FLUSH_ERR,
    /// comes later: at its CQE if it is on the QP, otherwise from the progress loop (or at
    /// once for a send that never left the queues). A response arriving after this is dropped.
    pub fn cancel(&self, id: SendId) -> Result<(), MadError> {
        self.port.cancel(&self.inner, id)
    }

    /// Change the response timeout of send `id` for one wait (the kernel's `ib_modify_mad`): a
    /// send waiting for its response waits `timeout_ms` from now; one not waiting yet (still
    /// on the QP, or queued, or a retry waiting in the flow-control backlog) waits
    /// `timeout_ms` from its send completion. A retry after that wait waits the send's own
    /// timeout again: the kernel keeps the modified timeout only for the wait it applies to
    /// (since "IB/mad: Do not save the MRA timeout", 2024). An RMPP transfer likewise: the
    /// ACK or response wait in progress, or the ACK wait its segment on the QP begins; its
    /// response wait is always the send's own timeout, and a send given none still ends at its
    /// last ACK. 0 cancels.
    pub fn modify_timeout(&self, id: SendId, timeout_ms: u32) -> Result<(), MadError> {
        if timeout_ms == 0 {
            return self.cancel(id);
        }
        self.port.modify(&self.inner, id, timeout_ms)
    }

    /// Take an event if one is queued (does not drive the port).
    pub fn try_event(&self) -> Option<Event> {
        self.events().try_pop()
    }

    /// The next event, waiting until `deadline` (device time, [`crate::Port::now`]) at most.
    /// Drives the port's progress loop itself when no other thread does.
    pub fn next_event(&self, deadline: Duration) -> Option<Event> {
        self.port.wait_event(self.events(), deadline)
    }

    /// Sends accepted and not yet finished (and released).
    pub fn outstanding(&self) -> usize {
        self.inner.outstanding.load(Ordering::SeqCst)
    }

    /// The agent's counters.
    pub fn counters(&self) -> AgentCounters {
        self.inner.cells.snapshot_with(&self.inner.solo_cells)
    }

    /// Deregister (the kernel's `ib_unregister_mad_agent`): stop new sends and receives,
    /// cancel every outstanding send, and return only when each has completed exactly once
    /// (sends on the QP complete at their CQE, which a dead device's driver makes in
    /// software). Completions are queued before this returns; nothing is queued for the agent
    /// after. None of its sends is in a slot when it returns: the slots' send buffers it used
    /// are free for other sends to rewrite. Drives the port itself when no other thread does;
    /// must not be called from inside a notify callback.
    pub fn deregister(mut self) {
        self.deregister_inner();
    }

    fn deregister_inner(&mut self) {
        if std::mem::replace(&mut self.done, true) {
            return;
        }
        self.port.deregister(&self.inner);
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        self.deregister_inner();
    }
}

//! Directed-route SMPs on a port (reference/mad-stack.md §1.8, §2.8): the SMI rules on the way
//! out and in, and the SMPs the port answers itself without the wire.
//!
//! - **Sending** ([`rules::outgoing`], the kernel's `handle_outgoing_dr_smp`): a directed-route
//!   SMP an agent sends passes the send rules, which move its hop pointer (0 → 1 for a new
//!   request). One they discard is refused (`MadError::DirectedRoute`), as the kernel fails
//!   the post. One destined to this port (a 0-hop request, or a returning SMP whose hop
//!   pointer reaches 0) never touches the wire: the port's own SMA answers it through
//!   `HcaPort::process_mad` (MAD_IFC), and the progress loop delivers a *local completion* in
//!   the kernel's order: the answer to the agent first (as the response to that send), then
//!   the send's one completion, SUCCESS. Such a request takes no send slot: the upper half of
//!   its TID carries the sending agent's ID instead ([`crate::tid::local_stamp`]), as the
//!   kernel's carries the agent's `hi_tid`.
//! - **Local requests for another agent**: a local request the SMA does not take (SMInfo, for
//!   one), sent with a response timeout while an agent of this port is registered for it,
//!   takes a send slot and a TID naming it like a wire request, and goes to that agent instead
//!   of the wire. The agent's answer comes back through the send rules as a local SMP and is
//!   matched to the slot; the send then completes as a wire request does: answer, then
//!   SUCCESS; or RESP_TIMEOUT_ERR; or WR_FLUSH_ERR when canceled or deregistered. The kernel
//!   instead completes it SUCCESS at once and routes the answer by the TID's `hi_tid` to the
//!   requester (see `PortShared::is_local_request_for_an_agent`).
//! - **Local requests without a timeout** go to that agent too, but as any local SMP: the
//!   send completes SUCCESS at once. The agent's answer then finds the requester as in the
//!   kernel, by the agent ID in its TID's upper half, and is delivered to it (if it has a
//!   receive side) as a received MAD matched to no send (`response_to` `None`): the kernel's
//!   `local_completions` calls the requester's `recv_handler` without looking for its send.
//! - **Receiving** ([`rules::incoming`], `handle_ib_smi`): a directed-route SMP from the wire
//!   passes the receive rules (ReturnPath, hop pointer) before anything else looks at it; one
//!   at the end of its path (`hp == hc + 1`) goes to the port's SMA like any SMP, and a
//!   response back at its requester (`hp == 0`) to response matching.
//! - **Replies** of the port's own agent (the SMA's answers, the 0x000C answers) pass the send
//!   rules too (C14-13:1 moves the hop pointer back) before they go out.
//!
//! Discards are counted by reason ([`SmiCounters`]).

pub mod rules;
#[cfg(all(test, not(loom)))]
pub(crate) mod tests;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use driver::verbs::{SpecialQp, UdDest, WcStatus};
use mad_wire::header::{HEADER_LEN, MAD_LEN, Mad};
use mad_wire::{PERMISSIVE_LID, class, smp::Smp};

use crate::addr::RecvAddr;
use crate::agent::AgentInner;
use crate::counters::{DropReason, bump, solo};
use crate::error::MadError;
use crate::event::{Event, RecvBox, RecvMad, SendCompletion, SendId, SendRef};
use crate::port::{Port, PortShared, ProgressState};
use crate::recv_rules::{self, LocalAgent};
use crate::ring::lock;

pub use rules::{Forward, Outgoing, SmiDiscard};

/// Directed-route discards by reason.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SmiDiscardCounts(pub [u64; SmiDiscard::ALL.len()]);

impl SmiDiscardCounts {
    /// Discards for `reason`.
    pub fn get(&self, reason: SmiDiscard) -> u64 {
        self.0[reason.index()]
    }

    /// All discards.
    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }
}

/// What the SMI of a port has done since it was opened ([`Port::smi_counters`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SmiCounters {
    /// Directed-route SMPs of agents put on the wire after the send rules.
    pub sent: u64,
    /// Directed-route SMPs of agents handled by the port itself, never on the wire.
    pub local: u64,
    /// Of those, answered by the port's SMA with a response delivered to the sender.
    pub local_answered: u64,
    /// Of those, handed to a registered agent as a received SMP (the SMA does not take it).
    pub local_passed: u64,
    /// Answers of agents of this port to local requests sent without a response timeout,
    /// delivered to the requester by the agent ID in their TID, matched to no send.
    pub local_routed: u64,
    /// Answers of the port's SMA that were not the response to the SMP (never delivered).
    pub local_bad_answers: u64,
    /// Directed-route SMPs from the wire that passed the receive rules.
    pub received: u64,
    /// Replies of the port's own agent that passed the send rules and went out.
    pub replies: u64,
    /// Sends (and replies of the port's agent) the send rules discarded.
    pub send_discards: SmiDiscardCounts,
    /// Received SMPs the receive rules discarded.
    pub recv_discards: SmiDiscardCounts,
}

#[derive(Default)]
struct Cells {
    sent: AtomicU64,
    local: AtomicU64,
    local_answered: AtomicU64,
    local_passed: AtomicU64,
    local_routed: AtomicU64,
    local_bad_answers: AtomicU64,
    /// Only the progress loop adds to it ([`crate::counters::solo`]).
    received: AtomicU64,
    replies: AtomicU64,
    send_discards: [AtomicU64; SmiDiscard::ALL.len()],
    recv_discards: [AtomicU64; SmiDiscard::ALL.len()],
}

impl Cells {
    fn snapshot(&self) -> SmiCounters {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        SmiCounters {
            sent: get(&self.sent),
            local: get(&self.local),
            local_answered: get(&self.local_answered),
            local_passed: get(&self.local_passed),
            local_routed: get(&self.local_routed),
            local_bad_answers: get(&self.local_bad_answers),
            received: get(&self.received),
            replies: get(&self.replies),
            send_discards: SmiDiscardCounts(std::array::from_fn(|i| get(&self.send_discards[i]))),
            recv_discards: SmiDiscardCounts(std::array::from_fn(|i| get(&self.recv_discards[i]))),
        }
    }
}

/// The send a local completion finishes.
struct LocalSend {
    agent: Arc<AgentInner>,
    id: SendId,
    context: u64,
    header: [u8; HEADER_LEN],
    tid: u64,
}

/// What the port's own SMA made of a local SMP.
enum LocalOutcome {
    /// Its answer, the response to the send (delivered if the sender has a receive side).
    Reply(Box<[u8; MAD_LEN]>),
    /// Taken without an answer (TrapRepress, a Trap from LID 0, an answer that was not the
    /// response).
    Consumed,
    /// Not the SMA's: handled as a received SMP (a request to the agent registered for it, a
    /// response to response matching), as the kernel's `IB_MAD_RESULT_SUCCESS` case.
    Incoming(Box<[u8; MAD_LEN]>),
}

/// One local completion, waiting for the progress loop.
struct Local {
    /// `None` for a reply of the port's own agent that came back to this port.
    send: Option<LocalSend>,
    outcome: LocalOutcome,
    pkey_index: u16,
}

/// The SMI state of a port.
#[derive(Default)]
pub(crate) struct SmiState {
    local: Mutex<VecDeque<Local>>,
    cells: Cells,
}

impl SmiState {
    pub(crate) fn new() -> SmiState {
        SmiState::default()
    }
}

/// The address a local completion's receive carries: from the permissive LID on QP0, as the
/// kernel's `build_smp_wc` makes it.
fn local_addr(pkey_index: u16) -> RecvAddr {
    RecvAddr {
        qp: SpecialQp::Smi,
        src_qp: 0,
        slid: PERMISSIVE_LID,
        sl: 0,
        dlid_path_bits: 0,
        pkey_index,
        grh: None,
    }
}

impl Port {
    /// What the port's SMI has done: SMPs sent, answered locally, received, discarded by
    /// reason.
    pub fn smi_counters(&self) -> SmiCounters {
        self.shared.smi.cells.snapshot()
    }
}

/// Where `Agent::send` takes a send after the SMI's look at it ([`PortShared::smi_send`]).
/// A send that goes on (not `Done`) is counted only once `Agent::send` accepts it
/// ([`PortShared::smi_accepted`]).
pub(crate) enum SmiRoute {
    /// An ordinary send, on the wire (a directed-route SMP with its hop pointer moved).
    Wire,
    /// Handled by the port itself: its completion comes from the local completions.
    Done(SendId),
    /// A request for another agent of this port that awaits its answer: it takes a send slot
    /// like a wire request (`Pending::local`), is handed to that agent instead of posted
    /// ([`PortShared::smi_local_installed`]), and completes as a wire request does; but it is
    /// outside solicited-MAD flow control ([`crate::flow`]), as the kernel's local SMPs are.
    LocalRequest,
}

impl PortShared {
    /// `Agent::send`'s hook for directed-route SMPs: apply the send rules to `mad` (a
    /// directed-route SMP of one MAD, 256 bytes: the record's copy, zero-padded), refuse what
    /// they discard, and take a local SMP off the wire as send `id`; a local request another
    /// agent of the port takes, with a timeout, becomes [`SmiRoute::LocalRequest`].
    pub(crate) fn smi_send(
        &self,
        agent: &Arc<AgentInner>,
        mad: &mut [u8],
        dest: &UdDest,
        context: u64,
        timeout_ms: u32,
        id: SendId,
    ) -> Result<SmiRoute, MadError> {
        let cells = &self.smi.cells;
        match rules::outgoing(mad, false, self.port_num) {
            Err(reason) => {
                bump(&cells.send_discards[reason.index()]);
                tracing::debug!(port = self.port_num, %reason, "directed-route SMP refused");
                Err(MadError::DirectedRoute {
                    port: self.port_num,
                    reason,
                })
            }
            Ok(Outgoing::Wire) => Ok(SmiRoute::Wire),
            Ok(Outgoing::Local) if timeout_ms > 0 && self.is_local_request_for_an_agent(mad) => {
                Ok(SmiRoute::LocalRequest)
            }
            Ok(Outgoing::Local) => self
                .smi_local(agent, mad, dest, context, id)
                .map(SmiRoute::Done),
        }
    }

    /// Count a send `Agent::send` accepted after [`PortShared::smi_send`] routed it (one it
    /// refuses after that, its agent closing, is not counted).
    pub(crate) fn smi_accepted(&self, route: &SmiRoute) {
        match route {
            SmiRoute::Wire => bump(&self.smi.cells.sent),
            SmiRoute::LocalRequest => bump(&self.smi.cells.local),
            // Counted by `smi_local` once accepted.
            SmiRoute::Done(_) => {}
        }
    }

    /// Whether the local SMP `mad` (256 bytes, past the send rules) is a request the port's
    /// SMA does not take and an agent of this port is registered for. The kernel completes
    /// such a send at once with SUCCESS, hands the request to that agent (`find_mad_agent` in
    /// `handle_outgoing_dr_smp`, then `local_completions`), and routes the agent's answer to
    /// the requester by the TID's upper half, its `hi_tid` (drivers/infiniband/core/mad.c).
    /// Here the upper half names a send slot, so the request takes one, and then completes
    /// as a wire request: after its answer (delivered as its response), or with
    /// RESP_TIMEOUT_ERR. Unlike the kernel's, it does wait (and may time out, be canceled or
    /// be flushed at deregistration), which a umad reader needs: it is told of every request
    /// with a timeout, by its answer or by ETIMEDOUT. (A request without a timeout is not
    /// asked about: it completes at once as in the kernel, its TID carrying the agent's ID,
    /// by which the answer is routed to it: `smi_local_incoming`.)
    fn is_local_request_for_an_agent(&self, mad: &[u8]) -> bool {
        let Ok(hdr) = Mad::new_checked(mad) else {
            return false;
        };
        let dr_slid = Smp::new_checked(mad).map_or(PERMISSIVE_LID, |s| s.dr_slid());
        !hdr.is_response()
            && recv_rules::local_agent(&hdr, dr_slid) == LocalAgent::Pass
            && self
                .agents_read()
                .lookup(hdr.class_version(), hdr.mgmt_class(), hdr.method(), 0)
                .is_some()
    }

    /// The drainer's hook for a local request (`SmiRoute::LocalRequest`) now in its slot,
    /// its TID rewritten: its work request `wr_id` completes in software at once (it took no
    /// send queue entry), as a posted one would, which moves the send to wait for its answer;
    /// and the request goes to the agent it is for as a received SMP (the progress loop's
    /// local completions).
    pub(crate) fn smi_local_installed(
        &self,
        qp: SpecialQp,
        wr_id: u64,
        mad: &[u8],
        pkey_index: u16,
    ) {
        let mut m = [0u8; MAD_LEN];
        let len = mad.len().min(MAD_LEN);
        m[..len].copy_from_slice(&mad[..len]);
        self.soft_completion(qp, wr_id, WcStatus::Success, 0, false);
        lock(&self.smi.local).push_back(Local {
            send: None,
            outcome: LocalOutcome::Incoming(Box::new(m)),
            pkey_index,
        });
        self.notify_all();
    }

    /// A directed-route SMP for this port itself: the port's SMA answers it now (the sender's
    /// thread calls `process_mad`, as the kernel does in `ib_post_send_mad`), and the
    /// progress loop delivers the answer and then the completion. A request's TID gets the
    /// agent's ID in its upper half ([`crate::tid::local_stamp`]; the kernel's carries the
    /// agent's `hi_tid`, which `ib_umad_write` or the kernel client put there), by which an
    /// answer of another agent finds it (`smi_local_incoming`).
    fn smi_local(
        &self,
        agent: &Arc<AgentInner>,
        mad: &[u8],
        dest: &UdDest,
        context: u64,
        id: SendId,
    ) -> Result<SendId, MadError> {
        let mut buf = [0u8; MAD_LEN];
        buf.copy_from_slice(mad);
        {
            let mut m = Mad::new_checked(&mut buf[..]).expect("a full MAD holds a header");
            if !m.is_response() {
                let client = m.tid() & 0xFFFF_FFFF;
                m.set_tid(u64::from(crate::tid::local_stamp(agent.id.0)) << 32 | client);
            }
        }
        let hdr = Mad::new_checked(&buf[..]).expect("a full MAD holds a header");
        let dr_slid = Smp::new_checked(&buf[..]).map_or(PERMISSIVE_LID, |s| s.dr_slid());
        let mut header = [0u8; HEADER_LEN];
        header.copy_from_slice(&buf[..HEADER_LEN]);
        let tid = hdr.tid();
        // Counted before the closing check, as `Agent::send` does: either deregistration sees
        // this send, or this send sees the agent closing.
        agent.outstanding.fetch_add(1, Ordering::SeqCst);
        if agent.closing.load(Ordering::SeqCst) {
            agent.outstanding.fetch_sub(1, Ordering::SeqCst);
            self.notify_all();
            return Err(MadError::AgentClosed);
        }
        let outcome = match recv_rules::local_agent(&hdr, dr_slid) {
            LocalAgent::Consume => Ok(LocalOutcome::Consumed),
            LocalAgent::Pass => Ok(LocalOutcome::Incoming(Box::new(buf))),
            LocalAgent::Absorb => self
                .hca
                .process_mad(&buf, false)
                .map(|_| LocalOutcome::Consumed),
            LocalAgent::Answer => self.hca.process_mad(&buf, false).map(|answer| {
                if let Some(reply) = recv_rules::firmware_answer(&buf, answer) {
                    LocalOutcome::Reply(Box::new(reply))
                } else {
                    bump(&self.smi.cells.local_bad_answers);
                    tracing::warn!(
                        port = self.port_num,
                        "process_mad answered a local SMP with something that is not its response"
                    );
                    LocalOutcome::Consumed
                }
            }),
        };
        let outcome = match outcome {
            Ok(o) => o,
            Err(source) => {
                agent.outstanding.fetch_sub(1, Ordering::SeqCst);
                self.notify_all();
                return Err(MadError::LocalSmp {
                    port: self.port_num,
                    source,
                });
            }
        };
        bump(&agent.cells.sends);
        bump(&self.cells.sends);
        bump(&self.smi.cells.local);
        lock(&self.smi.local).push_back(Local {
            send: Some(LocalSend {
                agent: Arc::clone(agent),
                id,
                context,
                header,
                tid,
            }),
            outcome,
            pkey_index: dest.pkey_index,
        });
        self.notify_all();
        Ok(id)
    }

    /// `on_mad`'s hook for directed-route SMPs from the wire: the receive rules, applied in
    /// place to the received copy (which the event will own). `false`: discarded (counted),
    /// and `mad` is then of no further use.
    pub(crate) fn smi_incoming(&self, st: &ProgressState, mad: &mut [u8; MAD_LEN]) -> bool {
        // A channel adapter: the port count only matters to a switch's rules.
        match rules::incoming(mad, false, self.port_num, self.port_num) {
            Ok(()) => {
                solo(st, &self.smi.cells.received);
                true
            }
            Err(reason) => {
                bump(&self.smi.cells.recv_discards[reason.index()]);
                tracing::debug!(port = self.port_num, %reason, "received directed-route SMP discarded");
                false
            }
        }
    }

    /// `send_internal`'s hook: a reply of the port's own agent to a directed-route SMP passes
    /// the send rules (C14-13:1 moves its hop pointer back). `None`: not to be sent (discarded,
    /// or for this port itself: then it is handled as received, as the kernel does).
    pub(crate) fn smi_reply(&self, mad: &[u8; MAD_LEN], pkey_index: u16) -> Option<[u8; MAD_LEN]> {
        let mut m = *mad;
        if m[1] != class::SUBN_DIRECTED_ROUTE {
            return Some(m);
        }
        match rules::outgoing(&mut m, false, self.port_num) {
            Ok(Outgoing::Wire) => {
                bump(&self.smi.cells.replies);
                Some(m)
            }
            Ok(Outgoing::Local) => {
                lock(&self.smi.local).push_back(Local {
                    send: None,
                    outcome: LocalOutcome::Incoming(Box::new(m)),
                    pkey_index,
                });
                None
            }
            Err(reason) => {
                bump(&self.smi.cells.send_discards[reason.index()]);
                tracing::debug!(port = self.port_num, %reason, "reply to a directed-route SMP discarded");
                None
            }
        }
    }

    /// The progress loop's hook: deliver the local completions, each receive before its
    /// send's completion. Returns how many.
    pub(crate) fn smi_pass(&self, st: &mut ProgressState) -> usize {
        let items: Vec<Local> = lock(&self.smi.local).drain(..).collect();
        let n = items.len();
        for item in items {
            let addr = local_addr(item.pkey_index);
            match item.outcome {
                LocalOutcome::Reply(reply) => {
                    if let Some(s) = item.send.as_ref().filter(|s| s.agent.receives) {
                        bump(&self.smi.cells.local_answered);
                        bump(&self.cells.responses);
                        bump(&s.agent.cells.responses);
                        s.agent.deliver(
                            Event::Recv(RecvBox::from(Box::new(RecvMad {
                                agent: s.agent.id,
                                mad: *reply,
                                len: MAD_LEN,
                                addr,
                                response_to: Some(SendRef {
                                    id: s.id,
                                    context: s.context,
                                }),
                                rmpp: None,
                            }))),
                            self,
                        );
                    }
                }
                LocalOutcome::Consumed => {}
                LocalOutcome::Incoming(m) => {
                    self.smi_local_incoming(st, &m, addr);
                    // What that staged (a response matched, a request delivered) is queued
                    // before the local send's own completion below.
                    self.flush_events(st);
                }
            }
            if let Some(s) = item.send {
                self.cells.completed(WcStatus::Success);
                s.agent.cells.completed(WcStatus::Success);
                s.agent.deliver(
                    Event::Send(SendCompletion {
                        agent: s.agent.id,
                        id: s.id,
                        context: s.context,
                        status: WcStatus::Success,
                        vendor_err: 0,
                        retries: 0,
                        tid: s.tid,
                        header: s.header,
                    }),
                    self,
                );
                s.agent.outstanding.fetch_sub(1, Ordering::SeqCst);
            }
        }
        n
    }

    /// A local SMP the SMA did not take, handled as if it had been received: a response goes
    /// to response matching (or, if its TID carries an agent's ID, to that agent:
    /// `smi_local_routed`), a request to the agent registered for it (or nowhere: the kernel
    /// drops it without an answer).
    fn smi_local_incoming(&self, st: &mut ProgressState, m: &[u8; MAD_LEN], addr: RecvAddr) {
        let mut recv = RecvMad::received(m, MAD_LEN, addr);
        let hdr = Mad::new_checked(&m[..]).expect("a full MAD holds a header");
        if hdr.is_response() {
            match crate::tid::local_stamp_agent(hdr.tid()) {
                Some(id) => self.smi_local_routed(st, id, recv),
                None => self.on_response(st, SpecialQp::Smi, recv),
            }
            return;
        }
        let agent =
            self.agents_read()
                .lookup(hdr.class_version(), hdr.mgmt_class(), hdr.method(), 0);
        let Some(a) = agent else {
            self.cells.dropped(DropReason::NoAgent);
            return;
        };
        bump(&self.smi.cells.local_passed);
        bump(&self.cells.unsolicited);
        bump(&a.cells.unsolicited);
        recv.agent = a.id;
        crate::progress::stage(st, a, Event::Recv(recv));
    }

    /// The answer of an agent of this port to a local request that took no send slot (one
    /// sent without a response timeout): its TID carries the requester's agent ID `id`. As
    /// in the kernel's `handle_outgoing_dr_smp` (`find_mad_agent` by the TID's `hi_tid`) and
    /// `local_completions` (the requester's `recv_handler` called without a search for its
    /// send; drivers/infiniband/core/mad.c), it goes to that agent whatever became of its
    /// send, as a received MAD matched to no send. Dropped if no agent of QP0 with that ID is
    /// registered (`UnknownTid`; a deregistering one has left the table, as the kernel's
    /// `xa_erase` of its `hi_tid`) or it has no receive side (`NotExpected`: `find_mad_agent`
    /// gives up on an agent without a `recv_handler`).
    fn smi_local_routed(&self, st: &mut ProgressState, id: u32, mut recv: RecvBox) {
        let agent = self.agents_read().agents.get(&id).cloned();
        let Some(a) = agent.filter(|a| a.qp == SpecialQp::Smi) else {
            self.cells.dropped(DropReason::UnknownTid);
            return;
        };
        if !a.receives {
            self.cells.dropped(DropReason::NotExpected);
            a.cells.dropped(DropReason::NotExpected);
            return;
        }
        bump(&self.smi.cells.local_routed);
        recv.agent = a.id;
        crate::progress::stage(st, a, Event::Recv(recv));
    }
}

//! The progress loop of a port: one pass takes the device's events, drains the completion
//! queue (and the completions made in software for refused posts), completes canceled sends,
//! re-arms modified timers, fires expired ones (against the deadline a modify may have stored
//! with the send since: `on_timeout`), finishes everything after a fatal error, and posts what
//! waits for a slot. Every transition of a send slot into DONE happens here, and
//! each reports that send's one completion.
//!
//! Paths (reference/mad-stack.md §1): a send CQE moves a request to WAIT_RESP (timer armed at
//! the CQE, §1.4) or finishes the send; a response finds its slot from its TID (O(1)) and, once
//! TID, class and address check out (§1.3), is delivered before the send's completion (or
//! before its CQE: EARLY_RESP); an error CQE finishes its send and brings the QP back from SQE
//! to RTS, marking what the hardware will flush for one repost (§1.6); a timer retries or
//! times the send out; a fatal error finishes everything with WR_FLUSH_ERR, vendor_err 5.

use std::sync::atomic::Ordering;
use std::sync::{Arc, MutexGuard};
use std::time::Duration;

use driver::verbs::{
    DeviceEvent, SOFTWARE_FLUSH_VENDOR_ERR, SpecialQp, UdDest, WcOpcode, WcStatus, WorkCompletion,
};
use mad_wire::header::{HEADER_LEN, MAD_LEN, Mad};
use mad_wire::{class, vendor};

use crate::addr::{LocalPort, RecvAddr, same_address};
use crate::agent::AgentInner;
use crate::counters::{DropReason, bump, solo};
use crate::event::{Event, PushRefused, RecvBox, SendCompletion, SendRef};
use crate::flow::Backlogged;
use crate::port::{PortShared, ProgressState, SlotRef, qpi};
use crate::recv_rules::{self, LocalAgent};
use crate::ring::{Job, Pending, Record, SlotData, lock};
use crate::slot_events;
use crate::slot_state::{CqeOutcome, Finish, SendState, TimeoutOutcome};
use crate::tid::{MAX_SLOTS_PER_QP, WrId};

/// Most completions one pass takes before it looks at timers and cancels.
const PASS_BUDGET: usize = 1024;

/// After a failed send-queue recovery, the least device time before a refused post brings
/// another attempt (see `PortShared::retry_recovery`): this, or twice what the failed
/// recovery took if longer (an attempt on a device that loses commands costs its command
/// timeouts).
pub(crate) const RECOVERY_RETRY: Duration = Duration::from_secs(1);

/// Device events are taken every this many passes (and on every pass that finds no
/// completion, when the loop is about to sleep).
const EVENT_INTERVAL: u64 = 16;

fn timer_key(qp: SpecialQp, index: u32) -> u32 {
    qpi(qp) as u32 * MAX_SLOTS_PER_QP + index
}

fn timer_slot(key: u32) -> (SpecialQp, u32) {
    let qp = if key / MAX_SLOTS_PER_QP == 0 {
        SpecialQp::Smi
    } else {
        SpecialQp::Gsi
    };
    (qp, key % MAX_SLOTS_PER_QP)
}

/// A completion the driver made up for a work request it flushed in software, which it does
/// once the device is dead or the HCA closed (WR_FLUSH_ERR, vendor_err 5, as the kernel's
/// `mlx5_ib_poll_sw_comp`).
fn is_software_flush(wc: &WorkCompletion) -> bool {
    wc.status == WcStatus::WrFlushErr && wc.vendor_err == SOFTWARE_FLUSH_VENDOR_ERR
}

fn ms(v: u32) -> Duration {
    Duration::from_millis(u64::from(v))
}

/// An event the progress loop made, held until the pass queues its events together
/// ([`PortShared::flush_events`]).
pub(crate) struct Staged {
    whose: Whose,
    /// A response that finished the send whose completion `ev` is: told first, in the same
    /// entry (which holds the send's record, naming the agent both are for).
    response: Option<RecvBox>,
    ev: Option<Event>,
    /// What the queue refused, of `response` and of `ev`.
    refused: [Option<PushRefused>; 2],
}

/// Whose event a [`Staged`] one is.
enum Whose {
    /// An agent's (a received MAD).
    Agent(Arc<AgentInner>),
    /// A finished send's (its completion), on that QP: its record, which names its agent.
    /// The send leaves the agent's `outstanding` once the event is queued (deregistration
    /// waits for that count, so it never closes the queue on a staged completion), and the
    /// record then goes back to its ring for a new send, still naming the agent
    /// ([`crate::ring::SendRing::record`]).
    Send(SpecialQp, Record),
}

impl Whose {
    fn agent(&self) -> &Arc<AgentInner> {
        match self {
            Whose::Agent(a) => a,
            Whose::Send(_, p) => &p.agent,
        }
    }
}

/// Hold `ev` for `agent` until the pass queues its events.
pub(crate) fn stage(st: &mut ProgressState, agent: Arc<AgentInner>, ev: Event) {
    st.staged.push(Staged {
        whose: Whose::Agent(agent),
        response: None,
        ev: Some(ev),
        refused: [None; 2],
    });
}

/// Hold `ev`, the completion of the send whose record is `p` (on `qp`, still counted in its
/// agent's `outstanding`), and before it the `response` that finished it if any, until the
/// pass queues its events.
fn stage_completion(
    st: &mut ProgressState,
    qp: SpecialQp,
    p: Record,
    ev: Event,
    response: Option<RecvBox>,
) {
    st.staged.push(Staged {
        whose: Whose::Send(qp, p),
        response,
        ev: Some(ev),
        refused: [None; 2],
    });
}

/// Holds posting while a batch of completions is handled (see `PortShared::hold_posts`);
/// lets go when dropped, so a panic cannot leave every post held.
struct HoldPosts<'a>(&'a std::sync::atomic::AtomicBool);

impl<'a> HoldPosts<'a> {
    fn new(flag: &'a std::sync::atomic::AtomicBool) -> HoldPosts<'a> {
        flag.store(true, Ordering::SeqCst);
        HoldPosts(flag)
    }
}

impl Drop for HoldPosts<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::SeqCst);
    }
}

#[cfg(test)]
impl PortShared {
    /// Make the next pass one that takes the device's events at its start (a fatal error is
    /// then seen before that pass's timers and RMPP deadlines).
    pub(crate) fn next_pass_takes_device_events(&self) {
        let p = self.passes.load(Ordering::Relaxed);
        self.passes
            .store(p.next_multiple_of(EVENT_INTERVAL), Ordering::Relaxed);
    }
}

impl PortShared {
    /// One pass of the progress loop; returns the work done.
    pub(crate) fn pass(&self, st: &mut ProgressState) -> usize {
        // The device's events (a fatal error, a removal, a LID change) are looked at every few
        // passes: taking them costs the driver a look at its interrupt lines.
        let pass = self.passes.fetch_add(1, Ordering::Relaxed);
        let mut events_taken = pass % EVENT_INTERVAL == 0;
        let mut work = if events_taken {
            self.device_events(st)
        } else {
            0
        };
        let held = HoldPosts::new(&self.hold_posts);
        loop {
            let mut wcs = std::mem::take(&mut st.wcs);
            wcs.clear();
            let n = match self.hca.poll(&mut wcs, self.config.poll_batch) {
                Ok(n) => n,
                Err(e) => {
                    bump(&self.cells.poll_errors);
                    tracing::warn!(port = self.port_num, "poll: {e}");
                    0
                }
            };
            // The driver's software flush (it flushes so once the device is dead or the HCA
            // closed): the end is taken now, before these completions are handed out, rather
            // than up to EVENT_INTERVAL passes later: the agents are told, and new sends
            // refused, first. (A device's own flush CQE with that vendor syndrome only makes
            // the pass look at the events early.)
            if !events_taken && !self.is_fatal() && wcs.iter().any(is_software_flush) {
                events_taken = true;
                work += self.device_events(st);
            }
            st.batch_now = None;
            for wc in &wcs {
                self.on_wc(st, wc, None);
            }
            st.wcs = wcs;
            self.repost_recvs(st);
            work += n;
            if n < self.config.poll_batch || work >= PASS_BUDGET {
                break;
            }
        }
        let soft = std::mem::take(&mut *lock(&self.soft_cq));
        st.batch_now = None;
        for (wc, credit) in &soft {
            self.on_wc(st, wc, Some(*credit));
        }
        work += soft.len();
        st.batch_now = None;
        // Under the hold, as an error CQE's recovery: a post landing between the recovery and
        // its retry marks would be marked for a repost it does not need.
        work += self.retry_recovery(st);
        drop(held);
        let reap = std::mem::take(&mut *lock(&self.reap));
        for r in &reap {
            if let Some(slot) = self.ring(r.qp).and_then(|g| g.slots.get(r.index as usize)) {
                if let Some(f) = slot_events::reap(&slot.state, r.generation) {
                    let (status, vendor) = self.status_of(f);
                    self.finish(st, *r, status, vendor);
                }
            }
        }
        work += reap.len();
        // Modified timeouts: a hint to arm each timer at the deadline now stored with its send
        // (which a modify made after this look is stored too: `on_timeout` goes by it).
        let rearm = std::mem::take(&mut *lock(&self.rearm));
        for r in &rearm {
            if let Some(slot) = self.ring(r.qp).and_then(|g| g.slots.get(r.index as usize)) {
                let deadline = lock(&slot.data)
                    .as_ref()
                    .filter(|d| d.generation == r.generation)
                    .and_then(|d| d.deadline);
                let w = slot.state.load();
                if let Some(deadline) = deadline {
                    if w.generation() == r.generation && w.state() == SendState::WaitResp {
                        st.timers
                            .arm(timer_key(r.qp, r.index), deadline, r.generation);
                    }
                }
            }
        }
        work += rearm.len();
        // RMPP reads its segments' completions from its own queue next.
        self.flush_events(st);
        // Local completions of directed-route SMPs (crate::smi); RMPP segment completions
        // and timers (crate::rmpp).
        work += self.smi_pass(st) + self.rmpp_pass(st);
        let now = self.hca.now();
        // Once the device is dead no timer decides anything: a send waiting for its response
        // is flushed below (WR_FLUSH_ERR, vendor_err 5) like every other outstanding send, not
        // timed out or retried after its agent was told of the death. Its timer, left armed,
        // finds the slot's generation gone.
        while let Some((key, generation)) = (!self.is_fatal())
            .then(|| st.timers.pop_expired(now))
            .flatten()
        {
            let (qp, index) = timer_slot(key);
            self.on_timeout(
                st,
                SlotRef {
                    qp,
                    index,
                    generation,
                },
                now,
            );
            work += 1;
        }
        if work == 0 && !events_taken {
            work += self.device_events(st);
        }
        if self.is_fatal() {
            work += self.flush_everything(st);
        }
        self.flush_events(st);
        self.fc_drain_later(st);
        for (i, ring) in self.rings.iter().enumerate() {
            if let Some(ring) = ring {
                if !st.spent[i].is_empty() {
                    ring.keep_records(&mut st.spent[i], &self.internal);
                }
                // One kick for the entries and slots this pass gave back, before the drain: a
                // drainer holding the flag now sees it and drains again, or this one drains.
                if std::mem::take(&mut st.kick_owed[i]) {
                    ring.kick();
                }
                self.drain(ring);
            }
        }
        self.mirror_gauges(st);
        if work > 0 {
            self.notify_all();
        }
        work
    }

    /// Queue the staged events in the order they were made: one lock per run of events for
    /// one queue, one wake after it. Each event still passes its agent's closed flag under the
    /// queue lock, which deregistration takes to set it (so no event reaches an agent after
    /// its deregistration returned), and the receive limit. A completion's send leaves its
    /// agent's `outstanding` count only after its event was queued (or refused), as
    /// `AgentInner::deliver` and the decrement after it did one by one. The queues are woken
    /// (which runs their `set_notify` hooks, user code) only once every event is queued and
    /// counted: a hook that panics cannot lose another agent's event or leave its
    /// `outstanding` count, which deregistration waits on, behind.
    pub(crate) fn flush_events(&self, st: &mut ProgressState) {
        if st.staged.is_empty() {
            return;
        }
        let mut staged = std::mem::take(&mut st.staged);
        let mut to_wake = std::mem::take(&mut st.to_wake);
        let mut start = 0;
        while start < staged.len() {
            let queue = staged[start].whose.agent().events.clone();
            let same = |s: &Staged| match (&s.whose.agent().events, &queue) {
                (Some(a), Some(b)) => Arc::ptr_eq(a, b),
                (None, None) => true,
                _ => false,
            };
            let end = start
                + staged[start..]
                    .iter()
                    .position(|s| !same(s))
                    .unwrap_or(staged.len() - start);
            if let Some(q) = queue {
                let mut queued = false;
                {
                    let mut g = q.lock();
                    for s in &mut staged[start..end] {
                        let closed = &s.whose.agent().closed;
                        if let Some(r) = s.response.take() {
                            match q.push_locked(&mut g, Event::Recv(r), closed) {
                                Ok(()) => queued = true,
                                Err(r) => s.refused[0] = Some(r),
                            }
                        }
                        if let Some(ev) = s.ev.take() {
                            match q.push_locked(&mut g, ev, closed) {
                                Ok(()) => queued = true,
                                Err(r) => s.refused[1] = Some(r),
                            }
                        }
                    }
                }
                if queued {
                    to_wake.push(q);
                }
            }
            start = end;
        }
        for s in staged.drain(..) {
            for r in s.refused.into_iter().flatten() {
                s.whose.agent().refused(r, self);
            }
            if let Whose::Send(qp, p) = s.whose {
                p.agent.outstanding.fetch_sub(1, Ordering::SeqCst);
                st.spent[qpi(qp)].push(p);
            }
        }
        st.staged = staged;
        for q in to_wake.drain(..) {
            q.wake();
        }
        st.to_wake = to_wake;
    }

    /// The vendor_err of a WR_FLUSH_ERR the stack reports: 5 once the device is dead (as the
    /// driver's software flushes), 0 for a cancel.
    pub(crate) fn flush_vendor(&self) -> u32 {
        if self.is_fatal() {
            SOFTWARE_FLUSH_VENDOR_ERR
        } else {
            0
        }
    }

    /// Take the device's events: a fatal error or removal marks the port dead and tells every
    /// agent once; address changes refresh what the address check needs.
    fn device_events(&self, st: &mut ProgressState) -> usize {
        // A fatal event is told after the events of the work done before it.
        self.flush_events(st);
        let events = self.hca.events();
        let n = events.len();
        let mut refresh = false;
        for ev in events {
            match ev {
                DeviceEvent::Fatal { reason } => self.set_fatal(reason),
                DeviceEvent::Removed => self.set_fatal("the device was removed".into()),
                DeviceEvent::Closed => self.set_closed(),
                DeviceEvent::QpFatal { qp, .. } => {
                    tracing::error!(port = self.port_num, qp = ?qp, "special QP in error");
                    st.qp_in_error[qpi(qp)] = true;
                }
                DeviceEvent::LidChange(_)
                | DeviceEvent::PortActive(_)
                | DeviceEvent::ClientReregister(_) => refresh = true,
                DeviceEvent::PortError(_) | DeviceEvent::PkeyChange(_) => {}
            }
        }
        if refresh && !self.is_fatal() {
            match self.hca.attrs() {
                Ok(a) => st.local = LocalPort::new(a.lmc, a.gid_prefix, a.port_guid),
                Err(e) => tracing::warn!(port = self.port_num, "port attributes: {e}"),
            }
        }
        if let Some(reason) = self.fatal_reason() {
            if !st.fatal_handled {
                st.fatal_handled = true;
                let agents: Vec<Arc<AgentInner>> =
                    self.agents_read().agents.values().cloned().collect();
                for a in agents {
                    if !a.fatal_told.swap(true, Ordering::AcqRel) {
                        a.deliver(
                            Event::DeviceFatal {
                                agent: a.id,
                                reason: reason.clone(),
                            },
                            self,
                        );
                    }
                }
            }
        }
        n
    }

    /// A completion: from the device (`soft` is `None`), or made in software (`soft` says
    /// whether its work request had taken a send queue entry).
    fn on_wc(&self, st: &mut ProgressState, wc: &WorkCompletion, soft: Option<bool>) {
        match WrId::decode(wc.wr_id) {
            Some(WrId::Send {
                qp,
                index,
                generation,
            }) if qp == wc.qp && wc.opcode == WcOpcode::Send => self.on_send_wc(
                st,
                SlotRef {
                    qp,
                    index,
                    generation,
                },
                wc,
                soft,
            ),
            Some(WrId::Recv { qp, index }) if qp == wc.qp && wc.opcode == WcOpcode::Recv => {
                self.on_recv_wc(st, qp, index, wc);
            }
            _ => self.bad_completion(wc, "names nothing the stack posted"),
        }
    }

    fn bad_completion(&self, wc: &WorkCompletion, why: &str) {
        bump(&self.cells.bad_completions);
        tracing::error!(
            port = self.port_num,
            wr_id = format_args!("{:#x}", wc.wr_id),
            qp = ?wc.qp,
            "completion rejected: {why}"
        );
    }

    fn on_send_wc(
        &self,
        st: &mut ProgressState,
        r: SlotRef,
        wc: &WorkCompletion,
        soft: Option<bool>,
    ) {
        let Some(ring) = self.ring(r.qp) else {
            return self.bad_completion(wc, "no such QP");
        };
        let Some(slot) = ring.slots.get(r.index as usize) else {
            return self.bad_completion(wc, "slot index out of range");
        };
        let fatal = self.is_fatal();
        let ok = wc.status == WcStatus::Success;
        // The generation in the state word is the one the send in the slot was installed
        // with (`send_cqe` checks it again, with the state, when it moves it); the timeout
        // was stored before that install was published.
        if slot.state.load().generation() != r.generation {
            return self.bad_completion(wc, "slot holds no send of that generation");
        }
        let read_ms = slot.timeout_ms.load(Ordering::Acquire);
        #[cfg(test)]
        if let Some(f) = lock(&self.after_timeout_read).as_mut() {
            f();
        }
        // A send awaiting a response (the round trip's path) moves without the slot's data
        // lock: a modify racing it is seen after the transition (`send_cqe_timed`). One
        // awaiting none moves under that lock, where a modify may still give it a timeout
        // (the kernel's completion reads it under the lock `ib_modify_mad` takes); it is then
        // mostly DONE, and its data is taken out under the same lock for `finish`.
        let cqe = |read_ms| {
            slot_events::send_cqe_timed(
                &slot.state,
                r.generation,
                wc.status,
                fatal,
                read_ms,
                &slot.timeout_ms,
            )
        };
        let mut taken = None;
        let (out, timeout_ms) = if read_ms > 0 {
            cqe(read_ms)
        } else {
            let mut data = lock(&slot.data);
            let out = cqe(slot.timeout_ms.load(Ordering::Acquire));
            if matches!(out.0, CqeOutcome::Done(_)) {
                taken = data.take();
            }
            out
        };
        match out {
            CqeOutcome::Wait => {
                let now = *st.batch_now.get_or_insert_with(|| self.hca.now());
                let deadline = now + ms(timeout_ms);
                st.timers
                    .arm(timer_key(r.qp, r.index), deadline, r.generation);
            }
            CqeOutcome::Done(f) => {
                let (status, vendor) = match f {
                    Finish::Failed => (wc.status, wc.vendor_err),
                    f => self.status_of(f),
                };
                self.finish_taken(st, r, status, vendor, taken, None);
            }
            CqeOutcome::Repost => {
                // Reposted once the batch is done: a later CQE of this batch may already have
                // stopped the send queue again, and its recovery comes when the loop gets
                // there.
                bump(&self.cells.flush_reposts);
                if soft.unwrap_or(true) {
                    ring.give_credit();
                }
                ring.enqueue(Job::Repost {
                    index: r.index,
                    generation: r.generation,
                    on_fail: wc.status,
                });
                return;
            }
            CqeOutcome::Unexpected => {
                return self.bad_completion(wc, "its work request is not on the QP");
            }
        }
        // The work request left the send queue: its entry is free again (the kick comes at the
        // end of the pass).
        if soft.unwrap_or(true) {
            ring.give_credit_unkicked();
            st.kick_owed[qpi(r.qp)] = true;
        }
        if soft.is_none() && !ok && wc.status != WcStatus::WrFlushErr && !fatal {
            self.recover(st, r.qp, wc);
        }
    }

    /// A per-WR error moved the send queue to SQE: bring it back to RTS and mark what the
    /// hardware will flush for one repost (`ib_mad_send_error`).
    fn recover(&self, st: &mut ProgressState, qp: SpecialQp, wc: &WorkCompletion) {
        bump(&self.cells.send_errors);
        tracing::warn!(
            port = self.port_num,
            qp = ?qp,
            status = %wc.status,
            vendor_err = wc.vendor_err,
            "send completed in error; recovering the send queue"
        );
        self.recover_send_queue(st, qp);
    }

    /// Ask the device to bring the send queue of `qp` from SQE back to RTS. On success, the
    /// sends still on the QP are marked for one repost (the hardware flushes them). On
    /// failure the queue stays refused in software ([`PostError::SendQueueError`]), and
    /// `st.sq_stuck` records when a refused post may bring another attempt
    /// ([`PortShared::retry_recovery`]).
    ///
    /// [`PostError::SendQueueError`]: driver::verbs::PostError::SendQueueError
    fn recover_send_queue(&self, st: &mut ProgressState, qp: SpecialQp) {
        // The commands may take a while (their timeouts, on a device that loses them): the
        // batch's later completions read the clock again.
        st.batch_now = None;
        let start = self.hca.now();
        match self.hca.recover_send_queue(qp) {
            Ok(()) => {
                st.sq_stuck[qpi(qp)] = None;
                bump(&self.cells.qp_recoveries);
                if let Some(ring) = self.ring(qp) {
                    for slot in &*ring.slots {
                        let w = slot.state.load();
                        if w.on_qp() {
                            slot.state.mark_retry(w.generation());
                        }
                    }
                }
            }
            Err(e) => {
                bump(&self.cells.recovery_failures);
                // A refusal made before this failure must not bring the next attempt.
                self.sq_refused[qpi(qp)].store(false, Ordering::Relaxed);
                // An attempt on a device that loses commands holds this loop for its command
                // timeouts: the next one waits at least twice as long as this one took, so
                // the loop does other work at least two thirds of the time.
                let now = self.hca.now();
                let wait = RECOVERY_RETRY.max(now.saturating_sub(start) * 2);
                st.sq_stuck[qpi(qp)] = Some(now + wait);
                tracing::error!(
                    port = self.port_num,
                    qp = ?qp,
                    "send queue recovery: {e}; sends on this QP complete with WR_FLUSH_ERR \
                     until a later post brings another attempt (at least {wait:?} from now)"
                );
            }
        }
    }

    /// After a failed recovery, a post refused because the send queue is still in SQE asks
    /// for another attempt, made once the wait the failure set has passed (at least
    /// [`RECOVERY_RETRY`] of device time). Without it the
    /// queue would stay refused until the port is reopened: the driver posts nothing while it
    /// believes SQE, so no error CQE would ever bring a recovery. The attempt waits for a
    /// refused post rather than a timer because an attempt on a device that loses commands
    /// holds the progress loop for its command timeouts: a port nobody sends on pays nothing.
    fn retry_recovery(&self, st: &mut ProgressState) -> usize {
        let mut work = 0;
        for qp in [SpecialQp::Smi, SpecialQp::Gsi] {
            let i = qpi(qp);
            if !self.sq_refused[i].load(Ordering::Relaxed) {
                continue;
            }
            let Some(not_before) = st.sq_stuck[i] else {
                // A post that raced an error CQE: the loop's own recovery follows that CQE.
                self.sq_refused[i].store(false, Ordering::Relaxed);
                continue;
            };
            if self.hca.now() < not_before || self.is_fatal() {
                continue;
            }
            self.sq_refused[i].store(false, Ordering::Relaxed);
            tracing::warn!(
                port = self.port_num,
                qp = ?qp,
                "a post was refused while the send queue stays in SQE; recovering it again"
            );
            self.recover_send_queue(st, qp);
            work += 1;
        }
        work
    }

    fn status_of(&self, f: Finish) -> (WcStatus, u32) {
        match f {
            Finish::Sent | Finish::Answered | Finish::Responded => (WcStatus::Success, 0),
            Finish::Canceled => (WcStatus::WrFlushErr, self.flush_vendor()),
            Finish::TimedOut => (WcStatus::RespTimeoutErr, 0),
            Finish::Flushed => (WcStatus::WrFlushErr, SOFTWARE_FLUSH_VENDOR_ERR),
            // The caller supplies the CQE's own status for these.
            Finish::Failed => (WcStatus::GeneralErr, 0),
        }
    }

    /// Report the one completion of the send in `r` (already DONE) and free the slot: its send
    /// buffer, which the device no longer reads, is the next send's to rewrite.
    pub(crate) fn finish(
        &self,
        st: &mut ProgressState,
        r: SlotRef,
        status: WcStatus,
        vendor_err: u32,
    ) {
        self.finish_taken(st, r, status, vendor_err, None, None);
    }

    /// [`Self::finish`], the send's data already taken out of its slot (`Some`) by the caller,
    /// under the lock it moved the slot into DONE under; `response`: the response that
    /// finished the send, told just before its completion.
    fn finish_taken(
        &self,
        st: &mut ProgressState,
        r: SlotRef,
        status: WcStatus,
        vendor_err: u32,
        taken: Option<SlotData>,
        response: Option<RecvBox>,
    ) {
        let Some(ring) = self.ring(r.qp) else { return };
        let Some(slot) = ring.slots.get(r.index as usize) else {
            return;
        };
        let taken = match taken {
            Some(d) => Some(d),
            None => lock(&slot.data).take(),
        };
        // Checked in place rather than through Option::filter, which moves the record once
        // more.
        let Some(data) = taken else {
            tracing::error!(index = r.index, "a DONE slot held no send (stack bug)");
            return;
        };
        if data.generation != r.generation {
            tracing::error!(index = r.index, "a DONE slot held no send (stack bug)");
            return;
        }
        st.timers.disarm(timer_key(r.qp, r.index));
        if let Some(t) = st.last_tid[qpi(r.qp)].get_mut(r.index as usize) {
            *t = data.tid;
        }
        let agent = &data.p.agent;
        if data.p.fc_counted {
            PortShared::fc_release_in_pass(st, agent);
        }
        if status == WcStatus::RespTimeoutErr {
            bump(&self.cells.timeouts);
            bump(&agent.cells.timeouts);
        }
        self.solo_cells.completed_solo(st, status);
        agent.solo_cells.completed_solo(st, status);
        let completion = SendCompletion {
            agent: agent.id,
            id: data.p.id,
            context: data.p.context,
            status,
            vendor_err,
            retries: data.retries_used,
            tid: data.tid,
            header: data.p.header,
        };
        // The slot goes back here: it is DONE, so no work request of it is on the QP.
        if slot.state.recycle(r.generation).is_some() {
            ring.release(r.index, data.request);
            st.kick_owed[qpi(r.qp)] = true;
        } else {
            tracing::error!(
                index = r.index,
                "recycling a slot that was not DONE (stack bug)"
            );
        }
        // The completion is queued (and the send leaves `outstanding`) with the pass's other
        // events. The send's record (no DMA memory: its MAD was in the slot's send buffer,
        // which stays with the ring) then goes back to the ring for a new send, at the end of
        // the pass (`SendRing::keep_records`).
        stage_completion(st, r.qp, data.p, Event::Send(completion), response);
    }

    /// The timer of the send in `r` fired at `now`. Decided under the slot's data lock, as
    /// the kernel's `timeout_sends` decides under the agent's lock `ib_modify_mad` takes: a
    /// modify accepted before counts (its deadline, if later, arms the timer again), one after
    /// finds the send retried, queued or done.
    fn on_timeout(&self, st: &mut ProgressState, r: SlotRef, now: Duration) {
        let Some(slot) = self.ring(r.qp).and_then(|g| g.slots.get(r.index as usize)) else {
            return;
        };
        // Whether a retry waits behind its agent's flow-control backlog: looked at without the
        // data lock (flow control's lock comes first, as in modify and the backlog's drain),
        // then everything is decided again under it.
        let mut behind = None;
        let (out, counted, agent) = loop {
            let mut data = lock(&slot.data);
            let Some(d) = data.as_mut().filter(|d| d.generation == r.generation) else {
                return;
            };
            if let Some(deadline) = d.deadline.filter(|&t| t > now) {
                st.timers
                    .arm(timer_key(r.qp, r.index), deadline, r.generation);
                return;
            }
            let retry = d.retries_used < d.p.max_retries;
            if retry && d.p.solicited && behind.is_none() {
                let agent = Arc::clone(&d.p.agent);
                drop(data);
                behind = Some(!lock(&agent.fc).backlog.is_empty());
                continue;
            }
            let out =
                slot_events::timer(&slot.state, r.generation, retry, || behind.unwrap_or(false));
            let mut counted = false;
            if matches!(out, TimeoutOutcome::Reposted | TimeoutOutcome::Queued) {
                // This wait is over: the retry's own CQE arms the next one, which waits the
                // send's own timeout (`retry_send` sets `mad_send_wr->timeout` from
                // `send_buf.timeout_ms`, which a modify no longer changes). A modify from now
                // on finds the retry SEND_START or QUEUED and stores over it.
                d.retries_used += 1;
                d.deadline = None;
                slot.timeout_ms.store(d.p.timeout_ms, Ordering::Release);
                if out == TimeoutOutcome::Queued {
                    counted = std::mem::replace(&mut d.p.fc_counted, false);
                }
            }
            break (out, counted, Arc::clone(&d.p.agent));
        };
        match out {
            TimeoutOutcome::Reposted => {
                bump(&self.cells.retries);
                bump(&agent.cells.retries);
                // It waits for a send queue entry like any other post.
                if let Some(ring) = self.ring(r.qp) {
                    self.enqueue_job(
                        ring,
                        Job::Repost {
                            index: r.index,
                            generation: r.generation,
                            on_fail: WcStatus::RespTimeoutErr,
                        },
                    );
                }
            }
            TimeoutOutcome::Queued => {
                bump(&self.cells.retries);
                bump(&agent.cells.retries);
                bump(&self.cells.backlogged);
                bump(&agent.cells.backlogged);
                {
                    let mut fc = lock(&agent.fc);
                    if counted {
                        fc.outstanding = fc.outstanding.saturating_sub(1);
                    }
                    fc.backlog.push_back(Backlogged::Retry {
                        qp: r.qp,
                        index: r.index,
                        generation: r.generation,
                    });
                }
                self.fc_drain(&agent);
            }
            TimeoutOutcome::Done(f) => {
                let (status, vendor) = self.status_of(f);
                self.finish(st, r, status, vendor);
            }
            TimeoutOutcome::Stale => {}
        }
    }

    /// The device is dead: finish every send that is not on the QP (those on it finish at the
    /// driver's software flush), and every send that never got a slot.
    fn flush_everything(&self, st: &mut ProgressState) -> usize {
        let mut work = self.rmpp_flush();
        for rr in st.recv.iter_mut().flatten() {
            rr.release_idle();
        }
        for ring in self.rings.iter().flatten() {
            for (index, slot) in ring.slots.iter().enumerate() {
                let w = slot.state.load();
                if !w.is_active() || w.on_qp() {
                    continue;
                }
                if let Some(f) = slot.state.flush_idle(w.generation()) {
                    let (status, vendor) = self.status_of(f);
                    let r = SlotRef {
                        qp: ring.qp,
                        index: index as u32,
                        generation: w.generation(),
                    };
                    self.finish(st, r, status, vendor);
                    work += 1;
                }
            }
        }
        let agents: Vec<Arc<AgentInner>> = self.agents_read().agents.values().cloned().collect();
        for a in agents {
            // Retries leave the backlog too: their QUEUED slots were flushed above.
            let (list, handed_on) = {
                let mut fc = lock(&a.fc);
                let mut out = Vec::new();
                for b in fc.backlog.drain(..) {
                    if let Backlogged::New(p) = b {
                        out.push(p);
                    }
                }
                // It no longer waits for a request unit.
                let handed_on = self.ring(a.qp).is_some_and(|r| r.units.leave(a.id.0));
                (out, handed_on)
            };
            for p in list {
                self.complete_pending(p, WcStatus::WrFlushErr, SOFTWARE_FLUSH_VENDOR_ERR);
                work += 1;
            }
            if handed_on {
                self.serve_handed_on(a.qp);
            }
        }
        work
    }

    /// Give the receive buffers of the last poll batch back to the device, one batch (one
    /// doorbell record update) per QP. A QP that went into error meanwhile keeps them; a dead
    /// device's refusal releases them (it no longer touches them); any other refusal keeps
    /// the buffer, counted.
    fn repost_recvs(&self, st: &mut ProgressState) {
        for q in 0..st.reposts.len() {
            if st.reposts[q].is_empty() {
                continue;
            }
            let indexes = std::mem::take(&mut st.reposts[q]);
            if let Some(rr) = st.recv[q].as_mut() {
                if st.qp_in_error[q] {
                    self.cells
                        .recv_repost_failures
                        .fetch_add(indexes.len() as u64, Ordering::Relaxed);
                } else {
                    for (index, e) in rr.post_batch(&*self.hca, &indexes) {
                        if matches!(e, driver::verbs::PostError::DeviceFatal(_)) {
                            rr.release(index);
                        } else {
                            bump(&self.cells.recv_repost_failures);
                            tracing::debug!(
                                port = self.port_num,
                                qp = q,
                                "receive buffer kept: {e}"
                            );
                        }
                    }
                }
            }
            let mut indexes = indexes;
            indexes.clear();
            st.reposts[q] = indexes;
        }
    }

    fn on_recv_wc(&self, st: &mut ProgressState, qp: SpecialQp, index: u32, wc: &WorkCompletion) {
        let fatal = self.is_fatal();
        let copied = {
            let Some(rr) = st.recv[qpi(qp)].as_mut() else {
                return self.bad_completion(wc, "no receive queue on that QP");
            };
            if !rr.complete(index) {
                return self.bad_completion(wc, "receive buffer not posted");
            }
            let copied = if wc.status == WcStatus::Success {
                let boxes = &mut st.recv_boxes;
                Some(rr.copy_out(index, wc.byte_len, wc.grh, |grh, len| {
                    self.recv_spares
                        .take_cached(boxes, len, RecvAddr::from_wc(wc, grh))
                }))
            } else {
                if !(fatal && wc.status == WcStatus::WrFlushErr) {
                    bump(&self.cells.recv_errors);
                    tracing::debug!(port = self.port_num, qp = ?qp, status = %wc.status, "receive error");
                }
                // Any receive error means the QP has entered the error state (the kernel's
                // `ib_mad_recv_done` says so; an mlx5 error CQE moves the QP to ERR, a flush
                // comes only from ERR): what it would take back would only be flushed.
                st.qp_in_error[qpi(qp)] = true;
                None
            };
            // The buffer goes back to the device with the others of this poll batch (the MAD
            // is copied out; see `repost_recvs`). If the device is dead it is released
            // instead: its completion says the device is done with it, and a dead device takes
            // no buffer back. A QP in error keeps it, as the kernel leaves it on its list
            // until the port closes.
            if fatal {
                rr.release(index);
            } else if st.qp_in_error[qpi(qp)] {
                bump(&self.cells.recv_repost_failures);
            } else {
                st.reposts[qpi(qp)].push(index);
            }
            copied
        };
        match copied {
            None => {}
            Some(None) => {
                solo(st, &self.solo_cells.received);
                self.cells.dropped(DropReason::BadLength);
            }
            Some(Some(recv)) => {
                solo(st, &self.solo_cells.received);
                self.on_mad(st, qp, recv);
            }
        }
    }

    /// A MAD arrived (copied out of its buffer into the box its event will own): validate
    /// it, give the port's own agent first refusal, then match it to a send (responses) or
    /// dispatch it (requests).
    fn on_mad(&self, st: &mut ProgressState, qp: SpecialQp, mut recv: RecvBox) {
        let len = recv.len;
        if let Err(reason) = recv_rules::validate(qp, &recv.mad[..len]) {
            self.cells.dropped(reason);
            return;
        }
        // Directed-route SMPs pass the SMI receive rules first (crate::smi), in place.
        if recv.mad[1] == class::SUBN_DIRECTED_ROUTE && !self.smi_incoming(st, &mut recv.mad) {
            return;
        }
        let mad = &recv.mad;
        let hdr = Mad::new_checked(&mad[..]).expect("a full MAD holds a header");
        let mut local_failed = false;
        match recv_rules::local_agent(&hdr, recv.addr.slid) {
            LocalAgent::Consume => {
                bump(&self.cells.local_consumed);
                return;
            }
            action @ (LocalAgent::Answer | LocalAgent::Absorb) => {
                // A firmware command (MAD_IFC) may take long: the batch's later completions
                // read the clock again, or their response timeouts would start early.
                st.batch_now = None;
                match self.hca.process_mad(mad, false) {
                    Ok(_) if action == LocalAgent::Absorb => {
                        bump(&self.cells.local_consumed);
                        return;
                    }
                    Ok(answer) => {
                        if let Some(reply) = recv_rules::firmware_answer(mad, answer) {
                            bump(&self.cells.local_replies);
                            self.send_internal(qp, &reply, recv.addr.reply_dest());
                            return;
                        }
                        tracing::warn!(
                            port = self.port_num,
                            "process_mad answered with something that is not the response"
                        );
                        bump(&self.cells.local_failures);
                        local_failed = true;
                    }
                    Err(e) => {
                        tracing::debug!(port = self.port_num, "process_mad: {e}");
                        bump(&self.cells.local_failures);
                        local_failed = true;
                    }
                }
            }
            LocalAgent::Pass => {}
        }
        // RMPP segments, ACKs, STOPs and ABORTs (crate::rmpp).
        if self.rmpp_receive(st, qp, mad, len, &recv.addr) {
            return;
        }
        if hdr.is_response() {
            self.on_response(st, qp, recv);
            return;
        }
        let oui = if class::is_vendor_range2(hdr.mgmt_class()) {
            vendor::VendorMad::new_checked(&mad[..]).map_or(0, |v| v.oui())
        } else {
            0
        };
        let agent =
            self.agents_read()
                .lookup(hdr.class_version(), hdr.mgmt_class(), hdr.method(), oui);
        if let Some(a) = agent {
            solo(st, &self.solo_cells.unsolicited);
            solo(st, &a.solo_cells.unsolicited);
            recv.agent = a.id;
            stage(st, a, Event::Recv(recv));
            return;
        }
        match recv_rules::unmatched_response(mad).filter(|_| !local_failed) {
            Some(reply) => {
                bump(&self.cells.unmatched_replies);
                self.send_internal(qp, &reply, recv.addr.reply_dest());
            }
            None => self.cells.dropped(DropReason::NoAgent),
        }
    }

    /// A response: find its send from the TID's upper half, check TID, class and address
    /// (§1.3), then deliver it and finish the send (or leave it to its CQE: EARLY_RESP). One
    /// whose TID names no send is dropped, or answered if it is a BM Get or Set
    /// ([`Self::unclaimed_response`]).
    /// `recv.rmpp` holds the whole message when RMPP reassembled it (`recv.mad` is then its
    /// first segment); the box becomes the event as it is.
    pub(crate) fn on_response(&self, st: &mut ProgressState, qp: SpecialQp, recv: RecvBox) {
        let hdr = Mad::new_checked(&recv.mad[..]).expect("a full MAD holds a header");
        let tid = hdr.tid();
        let mgmt_class = hdr.mgmt_class();
        let Some(ring) = self.ring(qp) else { return };
        let Some(t) = ring.layout.decode(tid, ring.slot_count()) else {
            return self.unclaimed_response(qp, &recv);
        };
        let slot = &ring.slots[t.index as usize];
        let w = slot.state.load();
        if !w.is_active()
            || !ring
                .layout
                .generation_matches(t.generation_bits, w.generation())
        {
            if st.last_tid[qpi(qp)].get(t.index as usize) == Some(&tid) {
                self.cells.dropped(DropReason::Late);
                return;
            }
            return self.unclaimed_response(qp, &recv);
        }
        let generation = w.generation();
        // Checked, moved by the state machine and, once finished, taken out for `finish`, all
        // under one hold of the slot's data lock (as a send CQE awaiting no response is): the
        // lock is taken once per response, not once to check and again to take.
        let mut data = lock(&slot.data);
        let Some(d) = data
            .as_mut()
            .filter(|d| d.generation == generation && d.tid == tid)
        else {
            drop(data);
            self.cells.dropped(DropReason::UnknownTid);
            return;
        };
        // An agent without a receive side gets no MAD at all (`find_mad_agent` gives up on it
        // before any matching): its send ends at its timeout.
        let reason = if !d.p.agent.receives {
            Some(DropReason::NotExpected)
        } else if d.p.class() != mgmt_class {
            Some(DropReason::WrongClass)
        } else if mgmt_class != class::SUBN_DIRECTED_ROUTE
            && !same_address(d.p.is_response, &d.p.dest, true, &recv.addr, &st.local)
        {
            Some(DropReason::WrongAddress)
        } else if slot.timeout_ms.load(Ordering::Acquire) == 0 {
            // The kernel's `ib_find_send_mad` skips a send on `send_list` whose `timeout` is
            // 0 (what a modify changes, not `send_buf.timeout_ms`).
            Some(DropReason::NotExpected)
        } else {
            match slot_events::response(&slot.state, generation) {
                slot_events::Response::Deliver(finished) => {
                    let r = SlotRef {
                        qp,
                        index: t.index,
                        generation,
                    };
                    return self.deliver_response(st, r, w.state(), recv, data, finished);
                }
                slot_events::Response::Drop(reason) => Some(reason),
            }
        };
        if let Some(reason) = reason {
            self.cells.dropped(reason);
            d.p.agent.cells.dropped(reason);
        }
    }

    /// [`Self::on_response`] for a response the state machine took (`finished`: it ended the
    /// send, which `data`, the slot's data still locked, holds; `None`: it came before the
    /// send's CQE, EARLY_RESP) to the send in `r`. `was`: the slot's state before.
    fn deliver_response(
        &self,
        st: &mut ProgressState,
        r: SlotRef,
        was: SendState,
        mut recv: RecvBox,
        mut data: MutexGuard<'_, Option<SlotData>>,
        finished: Option<Finish>,
    ) {
        let Some(d) = data.as_mut() else {
            unreachable!("checked by the caller under the same lock")
        };
        recv.agent = d.p.agent.id;
        recv.response_to = Some(SendRef {
            id: d.p.id,
            context: d.p.context,
        });
        solo(st, &self.solo_cells.responses);
        solo(st, &d.p.agent.solo_cells.responses);
        if let Some(f) = finished {
            // DONE: its data leaves the slot under the lock it moved into DONE under.
            let taken = data.take();
            drop(data);
            if was == SendState::Queued {
                if let Some(t) = &taken {
                    // A retry answered while it waited in the backlog leaves it (the kernel's
                    // DONE takes it off `backlog_list`); no drain would take it off otherwise.
                    // (Flow control's lock is never taken under the slot's.)
                    lock(&t.p.agent.fc).remove_retry(r.qp, r.index, r.generation);
                }
            }
            // Staged with the send's completion, before it (told in that order), in the entry
            // that holds the send's record: no reference to the agent is taken for it.
            let (status, vendor) = self.status_of(f);
            self.finish_taken(st, r, status, vendor, taken, Some(recv));
        } else {
            // EARLY_RESP no longer counts against flow control (the kernel's send_count--).
            let counted = std::mem::replace(&mut d.p.fc_counted, false);
            let agent = Arc::clone(&d.p.agent);
            drop(data);
            bump(&self.cells.early_responses);
            if counted {
                self.fc_release(&agent);
            }
            // Queued at the pass's end, as every event of the pass: the reference moves in.
            stage(st, agent, Event::Recv(recv));
        }
    }

    /// A response whose TID names no send of this stack: the kernel's `find_mad_agent` finds
    /// no agent for its `hi_tid`, and `ib_mad_recv_done` calls `generate_unmatched_resp`.
    /// Only a BM MAD with AttributeModifier bit 0 set (a response for `ib_response_mad`)
    /// can be a Get or Set here: it is answered with GetResp 0x000C. Anything else is dropped.
    /// (A BM MAD never goes to `process_mad`, whose failure would suppress the answer.)
    fn unclaimed_response(&self, qp: SpecialQp, recv: &RecvBox) {
        match recv_rules::unmatched_response(&recv.mad) {
            Some(reply) => {
                bump(&self.cells.unmatched_replies);
                self.send_internal(qp, &reply, recv.addr.reply_dest());
            }
            None => self.cells.dropped(DropReason::UnknownTid),
        }
    }

    /// Send an answer made by the stack itself (the port agent's reply, or the 0x000C answer
    /// to an unclaimed Get/Set) back on `qp` to `dest`.
    fn send_internal(&self, qp: SpecialQp, mad: &[u8; MAD_LEN], dest: UdDest) {
        // A reply to a directed-route SMP passes the SMI send rules (crate::smi).
        let Some(mad) = self.smi_reply(mad, dest.pkey_index) else {
            return;
        };
        let mut header = [0u8; HEADER_LEN];
        header.copy_from_slice(&mad[..HEADER_LEN]);
        let build = |agent, buf| Pending {
            agent,
            id: self.next_send_id(),
            mad: buf,
            header,
            dest,
            timeout_ms: 0,
            wait_ms: 0,
            max_retries: 0,
            context: 0,
            solicited: false,
            fc_counted: false,
            reserved: false,
            is_response: true,
            local: false,
        };
        let p = self.record(qp, &self.internal, &mad[..], build);
        self.internal.outstanding.fetch_add(1, Ordering::SeqCst);
        bump(&self.cells.sends);
        let Some(ring) = self.ring(qp) else {
            self.complete_pending(p, WcStatus::LocQpOpErr, 0);
            return;
        };
        self.enqueue_job(ring, Job::New(p));
    }
}

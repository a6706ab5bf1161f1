//! What agents are told: received MADs (with the send they answer, for responses), exactly one
//! completion per accepted send, and the device's death; and the queue that holds them.
//!
//! Every agent delivers into an [`EventQueue`]: its own, or one it shares with other agents (the
//! umad library gives all agents of one file descriptor one queue, as the kernel's umad has
//! one read queue per fd). A queue never takes an event for an agent after that agent's
//! deregistration returned.

#[cfg(loom)]
use loom::sync::{
    Condvar, Mutex, MutexGuard,
    atomic::{AtomicU64, AtomicUsize},
};
use std::collections::VecDeque;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, PoisonError};
#[cfg(not(loom))]
use std::sync::{
    Condvar, Mutex, MutexGuard,
    atomic::{AtomicU64, AtomicUsize},
};
use std::time::Duration;

use driver::verbs::WcStatus;
use mad_wire::header::{HEADER_LEN, MAD_LEN, Mad};

use crate::addr::RecvAddr;

/// Names one accepted send on its port (unique per port, never reused).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SendId(pub u64);

impl fmt::Display for SendId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{}", self.0)
    }
}

/// Names one agent on its port: unique among the port's live agents. Handed out cyclically up
/// to [`crate::tid::MAX_AGENT_ID`] (the kernel's `hi_tid` is cyclic too): after the counter
/// wraps, an ID no live agent holds may be given again.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AgentId(pub u32);

impl fmt::Display for AgentId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "agent {}", self.0)
    }
}

/// The send a response answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SendRef {
    /// The send.
    pub id: SendId,
    /// The context it was sent with.
    pub context: u64,
}

/// A received MAD.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecvMad {
    /// The agent it was delivered to.
    pub agent: AgentId,
    /// The MAD (zero-padded after `len` bytes).
    pub mad: [u8; MAD_LEN],
    /// Bytes received (the device's byte count less the GRH area); for an RMPP message, the
    /// whole message's length.
    pub len: usize,
    /// Where it came from.
    pub addr: RecvAddr,
    /// For a response: the send it answers (whose completion follows this event).
    pub response_to: Option<SendRef>,
    /// For a message the stack reassembled from RMPP segments (an agent registered with
    /// RMPP): the whole message, `len` bytes: the first segment entire (headers included),
    /// then the data of each later segment (the bytes after its class header), as the
    /// kernel's umad hands it to `read()`. `mad` then holds the first segment. `None` for a
    /// single MAD.
    pub rmpp: Option<Vec<u8>>,
}

impl RecvMad {
    /// The bytes received: the reassembled RMPP message, or the one MAD's `len` bytes.
    pub fn message(&self) -> &[u8] {
        match &self.rmpp {
            Some(m) => m,
            None => &self.mad[..self.len.min(MAD_LEN)],
        }
    }

    /// The MAD's common header.
    pub fn header(&self) -> Mad<&[u8]> {
        // A 256-byte buffer always holds the 24-byte header.
        Mad::new_checked(&self.mad[..]).expect("a MAD buffer holds a header")
    }
    /// A MAD the stack received (or handles as received), not yet matched to an agent: its
    /// `agent` is filled in by whoever delivers it. A copy of `mad`, in a box of its own: the
    /// hot receive path reads the device's buffer straight into a box from its port's spares
    /// instead (`RecvRing::copy_out`, [`RecvSpares::take`]).
    pub(crate) fn received(mad: &[u8; MAD_LEN], len: usize, addr: RecvAddr) -> RecvBox {
        RecvBox::from(Box::new(RecvMad {
            agent: AgentId(0),
            mad: *mad,
            len,
            addr,
            response_to: None,
            rmpp: None,
        }))
    }
}

/// The boxes of received MADs a port keeps for its next receives: a [`RecvBox`] dropped goes
/// back here (while fewer than `cap` wait), and the receive path takes one before it
/// allocates. At a high receive rate boxes are dropped in bursts (a reader empties its queue),
/// far more at once than a general-purpose allocator keeps at hand for one size; here the next
/// receives find them.
#[derive(Debug)]
pub(crate) struct RecvSpares {
    /// The boxes themselves (not their contents) are what is kept: each goes back into a
    /// `RecvBox` as it is.
    #[allow(
        clippy::vec_box,
        reason = "a RecvBox holds a Box<RecvMad>: the box is what is reused"
    )]
    boxes: std::sync::Mutex<Vec<Box<RecvMad>>>,
    cap: usize,
}

impl RecvSpares {
    /// Spares for at most `cap` boxes.
    pub(crate) fn new(cap: usize) -> Arc<RecvSpares> {
        Arc::new(RecvSpares {
            boxes: std::sync::Mutex::new(Vec::with_capacity(cap)),
            cap,
        })
    }

    /// A box for a MAD of `len` bytes (at most [`MAD_LEN`]) from `addr`, for the caller to
    /// fill `mad[..len]`: every other field is set as [`RecvMad::received`] sets it, and the
    /// bytes after `len` are zero. A spare if there is one (what it held before is
    /// overwritten), a new box otherwise; it comes back here when dropped.
    /// (The progress loop takes through [`RecvSpares::take_cached`].)
    #[cfg(test)]
    pub(crate) fn take(self: &Arc<Self>, len: usize, addr: RecvAddr) -> RecvBox {
        let spare = self
            .boxes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .pop();
        self.reset(spare, len, addr)
    }

    /// [`RecvSpares::take`] for the progress loop, which takes a box per receive: from
    /// `cache`, its own hand of boxes, which takes every spare at once (one lock) when it is
    /// empty. So at most `cap` boxes wait here and `cap` more in that hand.
    #[allow(
        clippy::vec_box,
        reason = "a RecvBox holds a Box<RecvMad>: the box is what is reused"
    )]
    pub(crate) fn take_cached(
        self: &Arc<Self>,
        cache: &mut Vec<Box<RecvMad>>,
        len: usize,
        addr: RecvAddr,
    ) -> RecvBox {
        if cache.is_empty() {
            std::mem::swap(
                cache,
                &mut *self
                    .boxes
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner),
            );
        }
        self.reset(cache.pop(), len, addr)
    }

    /// `spare` (or a new box) set up as `take` says.
    fn reset(self: &Arc<Self>, spare: Option<Box<RecvMad>>, len: usize, addr: RecvAddr) -> RecvBox {
        let mad = match spare {
            Some(mut b) => {
                b.agent = AgentId(0);
                b.len = len;
                b.addr = addr;
                b.response_to = None;
                b.rmpp = None;
                if len < MAD_LEN {
                    b.mad[len..].fill(0);
                }
                b
            }
            None => Box::new(RecvMad {
                agent: AgentId(0),
                mad: [0; MAD_LEN],
                len,
                addr,
                response_to: None,
                rmpp: None,
            }),
        };
        RecvBox {
            boxed: Some(mad),
            spares: Some(Arc::clone(self)),
        }
    }

    /// Keep `b` for a later receive, unless `cap` already wait.
    fn give(&self, mut b: Box<RecvMad>) {
        // A reassembled message is not kept with it.
        b.rmpp = None;
        let mut boxes = self
            .boxes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if boxes.len() < self.cap {
            boxes.push(b);
            return;
        }
        drop(boxes);
        drop(b);
    }

    /// Boxes waiting for a receive.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.boxes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .len()
    }
}

/// A received MAD in its box ([`Event::Recv`]), read and written through `Deref`. Dropped, the
/// box goes back to the port that received it, whose next receive reuses it (a port keeps a
/// bounded number), so a port receiving at a high rate allocates nothing per MAD.
/// [`RecvBox::into_box`] keeps the MAD instead; `From<Box<RecvMad>>` makes one that is freed
/// when dropped (for events made outside a port, e.g. in tests).
pub struct RecvBox {
    /// `Some` until dropped or taken by `into_box`.
    boxed: Option<Box<RecvMad>>,
    spares: Option<Arc<RecvSpares>>,
}

impl RecvBox {
    /// The MAD's box, which then stays the caller's (it does not go back to the port).
    pub fn into_box(mut self) -> Box<RecvMad> {
        self.boxed
            .take()
            .expect("a RecvBox holds its MAD until it is dropped")
    }
}

impl From<Box<RecvMad>> for RecvBox {
    /// A box of its own, freed when dropped.
    fn from(mad: Box<RecvMad>) -> RecvBox {
        RecvBox {
            boxed: Some(mad),
            spares: None,
        }
    }
}

impl std::ops::Deref for RecvBox {
    type Target = RecvMad;
    fn deref(&self) -> &RecvMad {
        self.boxed
            .as_deref()
            .expect("a RecvBox holds its MAD until it is dropped")
    }
}

impl std::ops::DerefMut for RecvBox {
    fn deref_mut(&mut self) -> &mut RecvMad {
        self.boxed
            .as_deref_mut()
            .expect("a RecvBox holds its MAD until it is dropped")
    }
}

impl Drop for RecvBox {
    fn drop(&mut self) {
        if let (Some(mad), Some(spares)) = (self.boxed.take(), self.spares.take()) {
            spares.give(mad);
        }
    }
}

impl Clone for RecvBox {
    /// A copy in a box of its own (freed when dropped).
    fn clone(&self) -> RecvBox {
        RecvBox::from(Box::new(RecvMad::clone(self)))
    }
}

impl fmt::Debug for RecvBox {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        RecvMad::fmt(self, f)
    }
}

impl PartialEq for RecvBox {
    /// The MADs and what came with them are equal (wherever their boxes go back to).
    fn eq(&self, other: &RecvBox) -> bool {
        **self == **other
    }
}

impl Eq for RecvBox {}

/// The one completion of an accepted send.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SendCompletion {
    /// The agent that sent it.
    pub agent: AgentId,
    /// The send.
    pub id: SendId,
    /// The context it was sent with.
    pub context: u64,
    /// How it ended: SUCCESS, RESP_TIMEOUT_ERR, WR_FLUSH_ERR (canceled, deregistered, flushed,
    /// device dead), or the error of its work completion.
    pub status: WcStatus,
    /// The vendor syndrome: 5 for a completion made because the device died; the device's
    /// value for a per-WR error; 0 otherwise.
    pub vendor_err: u32,
    /// Retries used after response timeouts.
    pub retries: u32,
    /// The TID as sent (its upper 32 bits are the stack's for a request), or as given if the
    /// send never left its queue.
    pub tid: u64,
    /// The first 24 bytes of the MAD as sent (what umad returns for a timed-out send).
    pub header: [u8; HEADER_LEN],
}

/// What an agent is told.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// A MAD arrived for the agent: a request it registered for, or a response to its send.
    Recv(RecvBox),
    /// One of its sends finished.
    Send(SendCompletion),
    /// The device died or was removed: every outstanding send completes with WR_FLUSH_ERR
    /// (vendor_err 5), and new sends fail.
    DeviceFatal {
        /// The agent told.
        agent: AgentId,
        /// What the driver said.
        reason: String,
    },
}

impl Event {
    /// The agent the event is for.
    pub fn agent(&self) -> AgentId {
        match self {
            Event::Recv(r) => r.agent,
            Event::Send(s) => s.agent,
            Event::DeviceFatal { agent, .. } => *agent,
        }
    }
}

/// Called after events were added to a queue (e.g. to signal an eventfd for `poll`).
pub type Notify = Arc<dyn Fn() + Send + Sync>;

/// A queue of events for one or more agents.
pub struct EventQueue {
    events: Mutex<VecDeque<Event>>,
    cv: Condvar,
    recv_limit: usize,
    dropped: AtomicU64,
    notify: Mutex<Option<Notify>>,
    has_notify: AtomicBool,
    /// Threads blocked in `wait_nonempty_unless` (a condvar wake costs a system call: only
    /// then).
    waiters: AtomicUsize,
    /// [`EventQueue::rouse`] calls so far.
    rousals: AtomicU64,
    /// Panics of the notify hook, caught.
    hook_panics: AtomicU64,
    /// Loom only: whether [`EventQueue::rouse`] takes the queue's lock (not in a negative
    /// control, which shows that the wake-up is lost without it).
    #[cfg(loom)]
    rouse_locks: bool,
}

impl fmt::Debug for EventQueue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EventQueue")
            .field("len", &self.len())
            .field("recv_limit", &self.recv_limit)
            .field("dropped", &self.dropped_over_limit())
            .finish_non_exhaustive()
    }
}

impl Default for EventQueue {
    fn default() -> Self {
        EventQueue::new()
    }
}

impl EventQueue {
    /// An unbounded queue.
    pub fn new() -> EventQueue {
        EventQueue::with_recv_limit(usize::MAX)
    }

    /// A queue that drops received MADs while it holds `limit` events or more (the kernel's
    /// umad caps each fd's receive list at 200000). Send completions and fatal events are
    /// always queued, so no send loses its completion.
    pub fn with_recv_limit(limit: usize) -> EventQueue {
        EventQueue {
            events: Mutex::new(VecDeque::new()),
            cv: Condvar::new(),
            recv_limit: limit,
            dropped: AtomicU64::new(0),
            notify: Mutex::new(None),
            has_notify: AtomicBool::new(false),
            waiters: AtomicUsize::new(0),
            rousals: AtomicU64::new(0),
            hook_panics: AtomicU64::new(0),
            #[cfg(loom)]
            rouse_locks: true,
        }
    }

    /// Loom only: a queue whose [`EventQueue::rouse`] does not take its lock (a negative
    /// control).
    #[cfg(all(loom, test))]
    pub(crate) fn with_unlocked_rouse() -> EventQueue {
        EventQueue {
            rouse_locks: false,
            ..EventQueue::new()
        }
    }

    /// A shared handle to a new unbounded queue.
    pub fn shared() -> Arc<EventQueue> {
        Arc::new(EventQueue::new())
    }

    /// Call `f` each time events are added: once per push, or once per run of events a
    /// progress pass queues together. It runs without the queue's lock but possibly inside
    /// the port's progress loop (on the thread that drives it), so it must be short and must
    /// not deregister an agent or wait for the port: that would wait for the pass it is in.
    /// A panic in `f` is caught where `f` is called (counted in
    /// [`EventQueue::hook_panics`] and logged): it does not reach the thread that queued the
    /// events, and no event or completion is lost to it.
    pub fn set_notify(&self, f: Option<Notify>) {
        let has = f.is_some();
        *self.notify.lock().unwrap_or_else(PoisonError::into_inner) = f;
        self.has_notify.store(has, Ordering::Release);
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, VecDeque<Event>> {
        self.events.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Take the oldest event, if any.
    pub fn try_pop(&self) -> Option<Event> {
        self.lock().pop_front()
    }

    /// Move every queued event into `out`; returns how many.
    pub fn drain_into(&self, out: &mut Vec<Event>) -> usize {
        let mut q = self.lock();
        let n = q.len();
        out.extend(q.drain(..));
        n
    }

    /// Events queued.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// No event queued.
    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    /// Received MADs dropped because the queue was at its limit.
    pub fn dropped_over_limit(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Add `ev` unless `closed` (checked under the queue lock, which deregistration takes to
    /// set it) or over the limit. Returns whether it was queued.
    pub(crate) fn push(&self, ev: Event, closed: &AtomicBool) -> Result<(), PushRefused> {
        self.push_locked(&mut self.lock(), ev, closed)?;
        self.wake();
        Ok(())
    }

    /// [`EventQueue::push`]'s checks and queueing, under the lock `q` the caller took (of this
    /// queue): several events then take the lock once. The caller calls [`EventQueue::wake`]
    /// after letting the lock go if any was queued.
    pub(crate) fn push_locked(
        &self,
        q: &mut VecDeque<Event>,
        ev: Event,
        closed: &AtomicBool,
    ) -> Result<(), PushRefused> {
        if closed.load(Ordering::Acquire) {
            return Err(PushRefused::Closed);
        }
        if matches!(ev, Event::Recv(_)) && q.len() >= self.recv_limit {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return Err(PushRefused::Full);
        }
        q.push_back(ev);
        Ok(())
    }

    /// Tell the waiters and the notify hook that events were added (without the queue lock
    /// held).
    pub(crate) fn wake(&self) {
        if self.waiters.load(Ordering::SeqCst) > 0 {
            self.cv.notify_all();
        }
        if self.has_notify.load(Ordering::Acquire) {
            let f = self
                .notify
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone();
            if let Some(f) = f {
                // The hook runs where the stack is in the middle of delivering: other agents'
                // events and the counts deregistration waits on may come after this wake. A
                // panic must not unwind through that; it is reported and counted instead
                // (the panic message itself goes to the process's panic hook, stderr by
                // default).
                if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f())).is_err() {
                    self.hook_panics.fetch_add(1, Ordering::Relaxed);
                    tracing::error!("an event queue's notify hook panicked; the panic was caught");
                }
            }
        }
    }

    /// End the waits in [`EventQueue::wait_nonempty_unless`] though nothing was added (their
    /// threads look again at what they wait for). The lock is taken so that the wake-up
    /// cannot fall between a waiter's look at the rousal count and its wait.
    pub(crate) fn rouse(&self) {
        self.rousals.fetch_add(1, Ordering::SeqCst);
        if self.rouse_locks() {
            drop(self.lock());
        }
        self.cv.notify_all();
    }

    /// Whether `rouse` takes the queue's lock: always.
    #[cfg(not(loom))]
    #[allow(clippy::unused_self, reason = "the loom build's twin reads the model")]
    #[inline]
    fn rouse_locks(&self) -> bool {
        true
    }

    /// Whether `rouse` takes the queue's lock (not in a negative control).
    #[cfg(loom)]
    fn rouse_locks(&self) -> bool {
        self.rouse_locks
    }

    /// How many times the notify hook panicked (each panic was caught).
    pub fn hook_panics(&self) -> u64 {
        self.hook_panics.load(Ordering::Relaxed)
    }

    /// Wait up to `timeout` (wall time) for the queue to be non-empty, unless `ready` already
    /// holds (it is looked at first, without the queue lock, so it may take it);
    /// [`EventQueue::rouse`] ends the wait too. A rousal made after `ready` was looked at is
    /// seen: the wait goes on only while the count of rousals read before is unchanged.
    pub(crate) fn wait_nonempty_unless(
        &self,
        timeout: Duration,
        ready: &mut dyn FnMut() -> bool,
    ) -> bool {
        let roused = self.rousals.load(Ordering::SeqCst);
        if ready() {
            return false;
        }
        let q = self.lock();
        if !q.is_empty() {
            return true;
        }
        // Counted under the queue lock, which `push` takes before it reads the count.
        self.waiters.fetch_add(1, Ordering::SeqCst);
        let q = wait_while(&self.cv, q, timeout, |q| {
            q.is_empty() && self.rousals.load(Ordering::SeqCst) == roused
        });
        self.waiters.fetch_sub(1, Ordering::SeqCst);
        !q.is_empty()
    }
}

/// Wait on `cv` while `pending` holds, or `d` passes.
#[cfg(not(loom))]
#[inline]
fn wait_while<'a, T>(
    cv: &Condvar,
    g: MutexGuard<'a, T>,
    d: Duration,
    pending: impl FnMut(&mut T) -> bool,
) -> MutexGuard<'a, T> {
    cv.wait_timeout_while(g, d, pending)
        .unwrap_or_else(PoisonError::into_inner)
        .0
}

/// Wait on `cv` while `pending` holds: with no timeout, since loom's condition variable
/// cannot time out, so that a missed wake-up is a deadlock loom reports.
#[cfg(loom)]
fn wait_while<'a, T>(
    cv: &Condvar,
    mut g: MutexGuard<'a, T>,
    _d: Duration,
    mut pending: impl FnMut(&mut T) -> bool,
) -> MutexGuard<'a, T> {
    while pending(&mut g) {
        g = cv.wait(g).unwrap_or_else(PoisonError::into_inner);
    }
    g
}

/// Why [`EventQueue::push`] refused an event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PushRefused {
    /// The agent is deregistered.
    Closed,
    /// A received MAD over the limit.
    Full,
}

#[cfg(test)]
mod tests {
    use super::*;
    use driver::verbs::SpecialQp;

    fn recv(agent: u32) -> Event {
        Event::Recv(RecvBox::from(Box::new(RecvMad {
            agent: AgentId(agent),
            mad: [0; MAD_LEN],
            len: MAD_LEN,
            addr: RecvAddr {
                qp: SpecialQp::Gsi,
                src_qp: 1,
                slid: 1,
                sl: 0,
                dlid_path_bits: 0,
                pkey_index: 0,
                grh: None,
            },
            response_to: None,
            rmpp: None,
        })))
    }

    fn done(agent: u32) -> Event {
        Event::Send(SendCompletion {
            agent: AgentId(agent),
            id: SendId(1),
            context: 0,
            status: WcStatus::RespTimeoutErr,
            vendor_err: 0,
            retries: 0,
            tid: 0,
            header: [0; HEADER_LEN],
        })
    }

    #[test]
    fn closed_agents_get_nothing() {
        let q = EventQueue::new();
        let open = AtomicBool::new(false);
        let closed = AtomicBool::new(true);
        assert!(q.push(recv(1), &open).is_ok());
        assert_eq!(q.push(done(2), &closed), Err(PushRefused::Closed));
        assert_eq!(q.len(), 1);
        assert_eq!(q.try_pop().map(|e| e.agent()), Some(AgentId(1)));
    }

    #[test]
    fn the_limit_drops_receives_never_completions() {
        let q = EventQueue::with_recv_limit(2);
        let open = AtomicBool::new(false);
        assert!(q.push(recv(1), &open).is_ok());
        assert!(q.push(recv(1), &open).is_ok());
        assert_eq!(q.push(recv(1), &open), Err(PushRefused::Full));
        assert!(q.push(done(1), &open).is_ok(), "completions are exempt");
        assert_eq!(q.len(), 3);
        assert_eq!(q.dropped_over_limit(), 1);
    }

    #[test]
    fn notify_runs_after_each_push() {
        let q = EventQueue::new();
        let n = Arc::new(AtomicU64::new(0));
        let n2 = n.clone();
        q.set_notify(Some(Arc::new(move || {
            n2.fetch_add(1, Ordering::Relaxed);
        })));
        let open = AtomicBool::new(false);
        q.push(done(1), &open).unwrap();
        q.push(done(1), &open).unwrap();
        assert_eq!(n.load(Ordering::Relaxed), 2);
        let mut v = Vec::new();
        assert_eq!(q.drain_into(&mut v), 2);
        assert!(q.is_empty());
    }

    fn addr(slid: u16) -> RecvAddr {
        RecvAddr {
            qp: SpecialQp::Gsi,
            src_qp: 1,
            slid,
            sl: 0,
            dlid_path_bits: 0,
            pkey_index: 0,
            grh: None,
        }
    }

    /// A dropped box goes back to its spares and the next `take` reuses it, every field reset
    /// and the bytes past the new length zeroed; at most `cap` wait.
    #[test]
    fn recv_boxes_come_back_reset_and_bounded() {
        let spares = RecvSpares::new(2);
        let mut a = spares.take(MAD_LEN, addr(1));
        a.mad.fill(0xee);
        a.agent = AgentId(7);
        a.response_to = Some(SendRef {
            id: SendId(3),
            context: 4,
        });
        a.rmpp = Some(vec![1, 2, 3]);
        let a_at = std::ptr::from_ref::<RecvMad>(&a);
        drop(a);
        assert_eq!(spares.len(), 1);
        let b = spares.take(100, addr(2));
        assert_eq!(spares.len(), 0);
        assert_eq!(
            std::ptr::from_ref::<RecvMad>(&b),
            a_at,
            "the same box again"
        );
        assert_eq!(b.agent, AgentId(0));
        assert_eq!((b.len, b.addr.slid), (100, 2));
        assert_eq!((b.response_to, b.rmpp.as_ref()), (None, None));
        assert!(b.mad[100..].iter().all(|&x| x == 0), "zero past the length");
        let (c, d) = (spares.take(MAD_LEN, addr(3)), spares.take(MAD_LEN, addr(4)));
        drop((b, c, d));
        assert_eq!(spares.len(), 2, "no more than cap are kept");
        // Taken out of its box, or made apart from a port, a MAD does not come back.
        let kept = spares.take(MAD_LEN, addr(5)).into_box();
        assert_eq!((kept.addr.slid, spares.len()), (5, 1));
        drop(kept);
        drop(RecvBox::from(Box::new(RecvMad::clone(
            &spares.take(24, addr(6)),
        ))));
        assert_eq!(
            spares.len(),
            1,
            "only the box taken from the spares came back"
        );
    }

    /// The progress loop's hand takes every spare at once when it is empty, then hands them
    /// out without the spares' lock; dropped boxes still go back to the spares.
    #[test]
    fn cached_take_empties_the_spares_into_the_hand() {
        let spares = RecvSpares::new(4);
        drop((spares.take(MAD_LEN, addr(1)), spares.take(MAD_LEN, addr(2))));
        assert_eq!(spares.len(), 2);
        let mut hand = Vec::new();
        let a = spares.take_cached(&mut hand, 30, addr(3));
        assert_eq!(
            (spares.len(), hand.len()),
            (0, 1),
            "both taken, one handed out"
        );
        assert_eq!((a.len, a.addr.slid, a.agent), (30, 3, AgentId(0)));
        assert!(a.mad[30..].iter().all(|&x| x == 0), "zero past the length");
        let b = spares.take_cached(&mut hand, MAD_LEN, addr(4));
        assert_eq!((spares.len(), hand.len()), (0, 0));
        drop((a, b));
        assert_eq!(spares.len(), 2, "dropped boxes go back to the spares");
        let c = spares.take_cached(&mut hand, MAD_LEN, addr(5));
        assert_eq!((spares.len(), hand.len(), c.addr.slid), (0, 1, 5));
    }
}

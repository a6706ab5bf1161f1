//! The send side of one special QP: a fixed ring of send slots sized from the send queue, the
//! free slots, the send queue's entries, and the in-order queue of what waits for them.
//!
//! A send lives in exactly one place: its agent's flow-control backlog, this ring's queue
//! (both as a boxed [`Pending`] record that owns its MAD), or a slot (which keeps the box).
//! The box moves as a pointer, and once its send is finished it comes back to the ring's
//! spare records for a new send. Each slot has a send buffer of
//! its own, leased with the ring when the port opens (like the receive buffers): the MAD is
//! copied into it when the send moves into the slot, and it is reused by the slot's next send
//! once this one is DONE (the device no longer reads it then: DESIGN §4.3), so no DMA memory
//! is leased per send. It moves from the queue into a slot under the queue lock, so a search
//! that holds that lock finds it in one place or the other. A slot stays owned from install
//! to DONE; a send queue entry only from post to completion, as in the kernel, where a send
//! waiting for its response no longer occupies the send queue. So the work requests posted
//! never exceed the send queue's depth (a post never fails for room), a port may have more
//! requests waiting for responses than its send queue holds, and a loopback reply is not
//! starved by the requests it answers. What cannot go yet (no slot, or no entry) waits in the
//! queue, in order (except that a retry, which holds its slot, goes past new sends waiting
//! for one), and nothing is refused.
//!
//! Requests may hold at most [`SendRing::request_limit`] slots, the *request units*, so that
//! sends awaiting no response always find one. A request takes its unit as it leaves the
//! queue, except a solicited send under flow control, which reserves it with its
//! flow-control credit before it is queued and then waits only for a slot and an entry: a
//! credit never waits for a unit, which a retry waiting in the backlog for a credit may hold
//! ([`crate::flow`] has the argument). Agents whose backlogs wait for a unit get them in the
//! order they began waiting ([`crate::units`]).
//!
//! Posting is safe from any thread. Whoever queues a send then drains the queue; one drainer
//! at a time holds the posting flag (a try-flag nobody waits on), so sends leave the queue and
//! reach the QP in queue order, and no lock is held while the device is called.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use dma::{Access, DmaError, DmaLease, DmaPool};
use driver::verbs::{SendWr, Sge, SpecialQp, UdDest, WcStatus};
use mad_wire::header::{HEADER_LEN, MAD_LEN};

use crate::agent::AgentInner;
use crate::counters;
use crate::event::SendId;
use crate::slot_state::SlotState;
use crate::sync;
use crate::tid::{TidLayout, WrId};
use crate::units::RequestUnits;

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The record of a send, boxed from its acceptance to its completion (see
/// [`SendRing::record`]). It owns its MAD until install, when the MAD goes into its slot's
/// send buffer.
pub(crate) struct Pending {
    pub(crate) agent: Arc<AgentInner>,
    pub(crate) id: SendId,
    /// The MAD (24 to 256 bytes), in a buffer from [`SendRing::mad_buffer`]: copied into the
    /// slot's send buffer (zero-padded) at install, when the buffer goes back to the ring's
    /// spares. Kept out of line rather than in the record, which moves several times on its
    /// way to a slot (a 256-byte record costs more to move than the buffer costs).
    pub(crate) mad: Vec<u8>,
    /// The MAD's first 24 bytes (the TID's upper half is rewritten at install), for the
    /// completion.
    pub(crate) header: [u8; HEADER_LEN],
    pub(crate) dest: UdDest,
    /// Its response timeout (the kernel's `send_buf.timeout_ms`): each retry waits this long.
    /// A modify does not change it (since the kernel's "IB/mad: Do not save the MRA
    /// timeout"): see `wait_ms`.
    pub(crate) timeout_ms: u32,
    /// The timeout of its first wait for a response (the kernel's `mad_send_wr->timeout`
    /// before that wait begins): `timeout_ms`, or what a modify made while it was not in a
    /// slot yet. Goes into [`Slot::timeout_ms`] at install.
    pub(crate) wait_ms: u32,
    pub(crate) max_retries: u32,
    pub(crate) context: u64,
    /// Counts against its agent's solicited-MAD limit (§1.9).
    pub(crate) solicited: bool,
    /// Currently counted in its agent's outstanding solicited sends.
    pub(crate) fc_counted: bool,
    /// Holds one of its ring's request units, reserved with its flow-control credit and not
    /// yet in a slot ([`SendRing::try_reserve`]; see [`crate::flow`] on why a credit never
    /// waits for one). Cleared at install, when the slot's `SlotData::request` takes it over.
    pub(crate) reserved: bool,
    /// The MAD's TID is kept: a response (the requester's TID), an RMPP segment or control
    /// MAD of the port's RMPP agent, or a user-RMPP MAD continuing a transfer of its agent
    /// (the transfer's TID, `crate::rmpp::user_send`).
    pub(crate) is_response: bool,
    /// A directed-route request for another agent of this port (crate::smi): it takes a slot
    /// (and a TID naming it) like any request, but no send queue entry, and is never posted.
    pub(crate) local: bool,
}

/// A send's record in its box, which moves as a pointer from the backlog to the queue to the
/// slot, and is reused by a later send once this one finished ([`SendRing::record`]).
pub(crate) type Record = Box<Pending>;

impl Pending {
    pub(crate) fn class(&self) -> u8 {
        self.header[1]
    }

    pub(crate) fn tid(&self) -> u64 {
        let mut b = [0u8; 8];
        b.copy_from_slice(&self.header[8..16]);
        u64::from_be_bytes(b)
    }
}

/// What a slot holds while a send is in it. Only the thread that installs the send writes it
/// (the slot came from the free list); after that, whoever holds the mutex reads it, and the
/// progress loop takes it out at DONE.
pub(crate) struct SlotData {
    pub(crate) generation: u32,
    pub(crate) p: Record,
    /// The TID as sent.
    pub(crate) tid: u64,
    pub(crate) retries_used: u32,
    /// Holds one of the ring's request units (given back when the slot is).
    pub(crate) request: bool,
    /// The deadline of the current wait for a response, when a modify set it (the kernel's
    /// `ib_reset_mad_timeout`) after the send's CQE had armed its timer: the progress loop
    /// fires that timer against this one, under this lock (`on_timeout`). `None`: the
    /// deadline the CQE armed stands. Cleared when the wait ends in a retry.
    pub(crate) deadline: Option<Duration>,
}

/// One send slot.
pub(crate) struct Slot {
    pub(crate) state: SlotState,
    /// The send in the slot (written before the state is published; lets cancel find it
    /// without locking every slot).
    pub(crate) send_id: AtomicU64,
    /// Its agent (same rule).
    pub(crate) owner: AtomicU32,
    /// The timeout in ms of its next (or current) wait for a response, the kernel's
    /// `mad_send_wr->timeout` (same rule): the record's `wait_ms` at install, what `modify`
    /// stores (under the data lock) for the wait that its CQE begins, and the send's own
    /// `timeout_ms` again for each retry (the timer stores it under the data lock, as
    /// `retry_send` does). Its send CQE reads it without taking that lock when it is not 0
    /// (`slot_events::send_cqe_timed` says how a modify racing that CQE is not lost). Loom's
    /// atomic under `--cfg loom`.
    pub(crate) timeout_ms: sync::AtomicU32,
    pub(crate) data: Mutex<Option<SlotData>>,
}

impl Slot {
    fn new() -> Slot {
        Slot {
            state: SlotState::new(),
            send_id: AtomicU64::new(0),
            owner: AtomicU32::new(u32::MAX),
            timeout_ms: sync::AtomicU32::new(0),
            data: Mutex::new(None),
        }
    }

    /// The generation of the active send in the slot if it is `id` (read without a lock:
    /// state, then id, then state again, so both belong to the same use of the slot).
    pub(crate) fn active_generation_of(&self, id: SendId) -> Option<u32> {
        let a = self.state.load();
        if !a.is_active() || self.send_id.load(Ordering::Acquire) != id.0 {
            return None;
        }
        let b = self.state.load();
        (b.generation() == a.generation() && b.is_active()).then_some(a.generation())
    }

    /// The generation of the active send in the slot if its agent is `agent` (same method).
    pub(crate) fn active_generation_of_agent(&self, agent: u32) -> Option<u32> {
        let a = self.state.load();
        if !a.is_active() || self.owner.load(Ordering::Acquire) != agent {
            return None;
        }
        let b = self.state.load();
        (b.generation() == a.generation() && b.is_active()).then_some(a.generation())
    }
}

/// Free slot indexes: a single-producer single-consumer ring. The producer is the progress
/// loop (which recycles slots, one thread at a time); the consumer is the drainer, which pops
/// under the queue lock. Each index is in the ring at most once, so it never overflows. Its
/// room is a power of two (at least the slot count), so a position is a mask of the free-running
/// counters rather than a division. Its atomics are loom's under `--cfg loom`
/// (ring/loom_tests.rs).
struct FreeRing {
    buf: Box<[sync::AtomicU32]>,
    mask: usize,
    head: sync::AtomicUsize,
    tail: sync::AtomicUsize,
}

impl FreeRing {
    fn full(n: u32) -> FreeRing {
        let room = (n as usize).next_power_of_two();
        FreeRing {
            buf: (0..room as u32).map(sync::AtomicU32::new).collect(),
            mask: room - 1,
            head: sync::AtomicUsize::new(0),
            tail: sync::AtomicUsize::new(n as usize),
        }
    }

    /// Release, not sequentially consistent (which costs a locked instruction on x86-64): a
    /// drainer that must see this index does so through the kick that follows every push
    /// (the progress loop's, at the end of the pass that called [`SendRing::release`]), whose
    /// sequentially consistent read-modify-write comes after this store.
    fn push(&self, index: u32) {
        let t = self.tail.load(Ordering::Relaxed);
        self.buf[t & self.mask].store(index, Ordering::Relaxed);
        self.tail.store(t.wrapping_add(1), Ordering::Release);
    }

    fn pop(&self) -> Option<u32> {
        let h = self.head.load(Ordering::Relaxed);
        if h == self.tail.load(Ordering::SeqCst) {
            return None;
        }
        let v = self.buf[h & self.mask].load(Ordering::Relaxed);
        self.head.store(h.wrapping_add(1), Ordering::Release);
        Some(v)
    }

    fn len(&self) -> usize {
        let t = self.tail.load(Ordering::SeqCst);
        let h = self.head.load(Ordering::Acquire);
        t.wrapping_sub(h)
    }
}

/// The posting flag: one drainer at a time holds it (a try-flag nobody waits on), and the kick
/// count, bumped whenever a drain could newly make progress (a job queued, a slot or an entry
/// freed: the progress loop bumps it once for all it freed in a pass, before its own drain at
/// the pass's end), so that a drainer giving the flag back does not miss it. A kicker bumps
/// the count before it tries the flag, a drainer gives the flag back before it reads the count
/// (all sequentially consistent): either the kicker takes the flag, or the drainer sees the
/// kick and drains again. Its atomics are loom's under `--cfg loom` (ring/loom_tests.rs).
struct Posting {
    flag: sync::AtomicBool,
    kicks: sync::AtomicU64,
}

impl Posting {
    fn new() -> Posting {
        Posting {
            flag: sync::AtomicBool::new(false),
            kicks: sync::AtomicU64::new(0),
        }
    }

    #[inline]
    fn kick(&self) {
        self.kicks.fetch_add(1, Ordering::SeqCst);
    }

    /// Take the flag; `None` if another thread holds it, else the kick count to hand back to
    /// [`Posting::end`].
    #[inline]
    fn try_begin(&self) -> Option<u64> {
        sync::seq_cst_order();
        if self.flag.swap(true, Ordering::SeqCst) {
            None
        } else {
            Some(self.kicks.load(Ordering::SeqCst))
        }
    }

    /// Give the flag back (taken when the kick count was `seen`); true if something happened
    /// meanwhile that the drainer may have missed, so it should try again. A swap, not a
    /// store: the same instruction on x86-64 (a `SeqCst` store is an `xchg`), and loom orders
    /// a read-modify-write after the kicker's failed swap of the flag, where it leaves a
    /// plain store unordered with it (and reports the flag lost, which cannot happen).
    #[inline]
    fn end(&self, seen: u64) -> bool {
        self.flag.swap(false, Ordering::SeqCst);
        sync::seq_cst_order();
        self.kicks.load(Ordering::SeqCst) != seen
    }

    /// Drain while there may be something to drain: `held` drains once with the flag (taken
    /// when the kick count was the value it is given) and returns [`Posting::end`]'s answer,
    /// or false if it returned the flag otherwise.
    #[inline]
    fn drain(&self, mut held: impl FnMut(u64) -> bool) {
        while let Some(seen) = self.try_begin() {
            if !held(seen) {
                return;
            }
        }
    }
}

/// What waits in a ring's queue, in order.
pub(crate) enum Job {
    /// A new send: needs a slot and a send queue entry.
    New(Record),
    /// A retry of the send in slot `index` (SEND_START on the QP, or canceled since): needs a
    /// send queue entry. `on_fail` is the status its completion gets if the device refuses it.
    Repost {
        index: u32,
        generation: u32,
        on_fail: WcStatus,
    },
}

/// What the drainer does with the head of the queue.
pub(crate) enum Drained {
    /// Its work request was appended to the drainer's batch, to post (a send queue entry is
    /// taken for it, and its agent's `posted` counted: a refused post takes the count back).
    /// Appended where it is built, rather than returned through this enum and pushed.
    Batched,
    /// A retry canceled while it waited: complete it in software (no entry was taken).
    Skip(u64),
    /// A local request (`Pending::local`) in its slot, SEND_START as if posted, its TID
    /// rewritten: the caller hands `mad` to the agent it is for and completes the work request
    /// `wr_id` in software (it took no send queue entry).
    Local {
        wr_id: u64,
        mad: Vec<u8>,
        pkey_index: u16,
    },
    /// A new send in its slot whose MAD could not be copied into the slot's send buffer: not
    /// posted (the buffer holds another send's bytes), it completes in software with
    /// LOC_QP_OP_ERR, as a refused post does. A send queue entry was taken for it, which
    /// comes back with that completion.
    Refused(u64),
    /// The device is dead: complete these with WR_FLUSH_ERR (new sends, and the `wr_id`s of
    /// queued retries, which hold no entry).
    Fail(Vec<Record>, Vec<u64>),
}

/// The queue of a ring: requests (new sends with a response timeout), the other new sends, and
/// retries, each job numbered in arrival order. Retries are kept apart because they need only
/// a send queue entry (each holds its slot): one must not wait behind a new send that waits
/// for a slot, which the retry's own send may hold ([`SendRing::next_locked`]).
#[derive(Default)]
pub(crate) struct Queues {
    next_seq: u64,
    requests: VecDeque<(u64, Job)>,
    others: VecDeque<(u64, Job)>,
    /// Only [`Job::Repost`]s.
    reposts: VecDeque<(u64, Job)>,
    /// The slots' send buffers: slot `i`'s MAD is at byte `(i % BUFS_PER_LEASE) * MAD_LEN` of
    /// lease `i / BUFS_PER_LEASE`. Under the queue lock, which every install (the only writer
    /// of a buffer) holds: a lease is written through a shared reference, and is not `Sync`.
    pub(crate) buffers: Vec<DmaLease>,
    /// MAD buffers (ordinary memory) given back at install, for the next sends (at most the
    /// send queue's depth of them): see [`SendRing::record`].
    spares: Vec<Vec<u8>>,
    /// Records of finished sends, for the next sends (at most the slot count of them): see
    /// [`SendRing::record`] and [`SendRing::keep_records`].
    records: Vec<Record>,
}

/// Slot `index`'s send buffer in `buffers` ([`Queues::buffers`]): its lease and the MAD's
/// offset in it.
fn buffer(buffers: &[DmaLease], index: u32) -> (&DmaLease, usize) {
    (
        &buffers[(index / BUFS_PER_LEASE) as usize],
        (index % BUFS_PER_LEASE) as usize * MAD_LEN,
    )
}

impl Queues {
    fn is_empty(&self) -> bool {
        self.requests.is_empty() && self.others.is_empty() && self.reposts.is_empty()
    }

    /// Every queued new send's job, in no particular order.
    pub(crate) fn jobs_mut(&mut self) -> impl Iterator<Item = &mut Job> {
        self.requests
            .iter_mut()
            .chain(self.others.iter_mut())
            .map(|(_, j)| j)
    }
}

/// Work requests a drainer posts behind one doorbell at most.
pub(crate) const POST_BATCH: usize = 32;

/// What a drainer collected to post as one chain: the work requests, and for each the status
/// its completion gets if the device refuses it. Only the drainer (who holds the posting flag)
/// uses it; the vectors keep their room.
pub(crate) struct PostBatch {
    pub(crate) wrs: Vec<SendWr>,
    pub(crate) meta: Vec<WcStatus>,
}

/// The send side of one special QP.
pub(crate) struct SendRing {
    pub(crate) qp: SpecialQp,
    pub(crate) slots: Box<[Slot]>,
    pub(crate) layout: TidLayout,
    /// Send queue depth: at most this many work requests are posted at once.
    pub(crate) depth: u32,
    /// Send queue entries not taken.
    credits: AtomicU32,
    /// The most slots requests may hold (the rest are kept for sends that await no response,
    /// such as the answers to loopback requests, which would otherwise wait for slots held by
    /// the very requests they answer): the request units. Below the slot count, which is at
    /// least [`crate::MIN_SLOTS`] (`Port::open`), so one slot at least is kept.
    pub(crate) request_limit: u32,
    /// The request units taken (by requests in slots, and by queued sends that reserved one
    /// with their flow-control credit, [`Pending::reserved`]), and the agents whose backlogs
    /// wait for one, served in the order they began waiting ([`crate::units`]).
    pub(crate) units: RequestUnits,
    free: FreeRing,
    pub(crate) queue: Mutex<Queues>,
    queued: AtomicUsize,
    posting: Posting,
    /// The drainer's chain of work requests (see [`PostBatch`]).
    pub(crate) batch: Mutex<PostBatch>,
    /// The leases of the slots' send buffers (kept in the queue: see [`Queues::buffers`]).
    pub(crate) buffer_leases: usize,
}

/// Send buffers per DMA lease: one 4 KiB page of MADs (in strict mode each lease is mapped
/// on its own, and a mapping is at least a page, so smaller leases would only multiply the
/// mappings).
pub(crate) const BUFS_PER_LEASE: u32 = 4096 / MAD_LEN as u32;

impl SendRing {
    /// A ring of `slots` slots (at least 1) on `qp` whose send queue holds `depth` work
    /// requests (at least 1), with a send buffer per slot leased from `pool`.
    pub(crate) fn new(
        qp: SpecialQp,
        slots: u32,
        depth: u32,
        pool: &DmaPool,
    ) -> Result<SendRing, DmaError> {
        let slots = slots.max(1);
        let depth = depth.max(1);
        let buffers = (0..slots.div_ceil(BUFS_PER_LEASE))
            .map(|i| {
                let n = (slots - i * BUFS_PER_LEASE).min(BUFS_PER_LEASE) as usize;
                pool.lease(n * MAD_LEN, 64, Access::Read)
            })
            .collect::<Result<Vec<_>, _>>()?;
        let request_limit = (slots - depth.min(slots / 2)).max(1);
        Ok(SendRing {
            qp,
            slots: (0..slots).map(|_| Slot::new()).collect(),
            layout: TidLayout::new(qp, slots),
            depth,
            credits: AtomicU32::new(depth),
            request_limit,
            units: RequestUnits::new(request_limit),
            free: FreeRing::full(slots),
            buffer_leases: buffers.len(),
            queue: Mutex::new(Queues {
                buffers,
                ..Queues::default()
            }),
            queued: AtomicUsize::new(0),
            posting: Posting::new(),
            batch: Mutex::new(PostBatch {
                wrs: Vec::with_capacity(POST_BATCH),
                meta: Vec::with_capacity(POST_BATCH),
            }),
        })
    }

    pub(crate) fn slot_count(&self) -> u32 {
        self.slots.len() as u32
    }

    pub(crate) fn queued(&self) -> usize {
        self.queued.load(Ordering::Acquire)
    }

    /// Work requests posted and not completed.
    pub(crate) fn posted(&self) -> u32 {
        self.depth - self.credits.load(Ordering::SeqCst)
    }

    pub(crate) fn kick(&self) {
        self.posting.kick();
    }

    pub(crate) fn lock_queue(&self) -> MutexGuard<'_, Queues> {
        lock(&self.queue)
    }

    /// The boxed record of a new send of `mad` by `agent`: `build` makes it around `agent` and
    /// a copy of `mad`, in a buffer the ring kept from an earlier send if it has one, and it
    /// goes into a box the ring kept from a finished send if it has one (both taken under one
    /// queue lock). Sends often wait (for flow control, a slot or an entry) and then leave in
    /// bursts, and so would their buffers and records if each were freed at install or
    /// completion: a general-purpose allocator serves a block freed just before far more
    /// cheaply than one of a burst freed long after it was allocated, so the MAD waits in one
    /// of these, and the caller's bytes (often borrowed: see `SendRequest`) are not kept. The
    /// record is boxed so that it moves as a pointer from the backlog to the queue to its
    /// slot. A kept record still names the agent whose send it was (see
    /// [`SendRing::keep_records`]): when that is `agent`, its reference is taken over as it
    /// is, and no reference count changes (each is a locked instruction).
    #[allow(
        clippy::unnecessary_box_returns,
        reason = "the box is the point: it moves as a pointer, and is reused"
    )]
    pub(crate) fn record(
        &self,
        agent: &Arc<AgentInner>,
        mad: &[u8],
        build: impl FnOnce(Arc<AgentInner>, Vec<u8>) -> Pending,
    ) -> Record {
        let (buf, spare) = {
            let mut q = self.lock_queue();
            (q.spares.pop(), q.records.pop())
        };
        let mut buf = buf.unwrap_or_else(|| Vec::with_capacity(MAD_LEN));
        buf.extend_from_slice(mad);
        match spare {
            Some(mut b) => {
                // Its own reference if it names `agent`; what else it held (another agent, an
                // emptied buffer) goes.
                let agent = if Arc::ptr_eq(&b.agent, agent) {
                    b.agent
                } else {
                    Arc::clone(agent)
                };
                *b = build(agent, buf);
                b
            }
            None => Box::new(build(Arc::clone(agent), buf)),
        }
    }

    /// Keep the records in `spent` (of finished sends of this ring, their MADs taken at
    /// install) for new sends, as many as fit under the slot count; the rest are freed, after
    /// the queue lock. Each still names its agent, for that agent's next send
    /// ([`SendRing::record`]), unless the agent is closing: it then names `internal` (the
    /// port's internal agent), so that a kept record keeps no deregistered agent (nor its
    /// event queue) alive. A record kept before its agent began closing is made to name
    /// `internal` by the deregistration ([`SendRing::forget_agent`]), which looks after the
    /// agent's last send left `outstanding`, and so after its record came back here or, if
    /// it comes later, sees the agent closing.
    pub(crate) fn keep_records(&self, spent: &mut Vec<Record>, internal: &Arc<AgentInner>) {
        // A closing agent's last reference may be in a record: dropped after the queue lock,
        // as is every record not kept (its event queue's hook is the user's code).
        let mut closing = Vec::new();
        {
            let mut q = self.lock_queue();
            let room = self.slots.len().saturating_sub(q.records.len());
            let n = room.min(spent.len());
            let from = spent.len() - n;
            for mut r in spent.drain(from..) {
                if r.agent.closing.load(Ordering::SeqCst) {
                    closing.push(std::mem::replace(&mut r.agent, Arc::clone(internal)));
                }
                q.records.push(r);
            }
        }
        drop(closing);
        spent.clear();
    }

    /// Make the kept records that name `agent` (deregistering: none of its sends is left)
    /// name `internal` instead (see [`SendRing::keep_records`]).
    pub(crate) fn forget_agent(&self, agent: &Arc<AgentInner>, internal: &Arc<AgentInner>) {
        let mut q = self.lock_queue();
        for r in &mut q.records {
            if Arc::ptr_eq(&r.agent, agent) {
                r.agent = Arc::clone(internal);
            }
        }
    }

    /// Request units taken (slots holding requests, and units reserved by queued sends).
    pub(crate) fn requests_held(&self) -> u32 {
        self.units.held()
    }

    /// Take a request unit if one is left (`requests_held < request_limit`), for a request
    /// leaving the queue without one. (A new send under flow control reserves its own with
    /// [`RequestUnits::reserve`], in the order its agent began waiting.)
    #[inline]
    pub(crate) fn try_reserve(&self) -> bool {
        self.units.try_take()
    }

    /// Give back the unit a queued send reserved and never took into a slot (it completed
    /// first: canceled, or flushed). The caller then moves waiting backlogs on
    /// ([`RequestUnits::take_wanted`]).
    pub(crate) fn unreserve(&self) {
        self.units.give_back();
        self.kick();
    }

    /// Put `job` at the back of its queue. Returns whether it had to wait behind others or
    /// for a slot or an entry (for the overflow counter).
    pub(crate) fn enqueue(&self, job: Job) -> bool {
        let waits = self.push_locked(&mut self.lock_queue(), job);
        self.kick();
        waits
    }

    /// `enqueue` with the queue lock held, without the kick (for the drainer's own job, which
    /// it collects under the same lock).
    pub(crate) fn push_locked(&self, q: &mut Queues, job: Job) -> bool {
        let no_entry = self.credits.load(Ordering::SeqCst) == 0;
        let seq = q.next_seq;
        q.next_seq += 1;
        let waits = match &job {
            // A send holding a reserved unit needs none: it never waits behind the limit.
            Job::New(p) => {
                let waits = !q.is_empty() || no_entry || self.free.len() == 0;
                if p.timeout_ms > 0 && !p.reserved {
                    q.requests.push_back((seq, job));
                } else {
                    q.others.push_back((seq, job));
                }
                waits
            }
            // A retry waits only for older retries and an entry (new sends queued before it
            // wait for a slot, a unit or an entry: it goes past the first two).
            Job::Repost { .. } => {
                let waits = !q.reposts.is_empty() || no_entry;
                q.reposts.push_back((seq, job));
                waits
            }
        };
        self.queued_add(1);
        waits
    }

    /// Change the queued count; only under the queue lock, which orders its writers (a load
    /// and a store, no locked instruction; readers, the census, load it without the lock).
    /// A release store: a sequentially consistent one is a locked instruction on x86-64, and
    /// no decision reads this count.
    fn queued_add(&self, n: usize) {
        self.queued
            .store(self.queued.load(Ordering::Relaxed) + n, Ordering::Release);
    }

    /// The other way (same rule).
    fn queued_sub(&self, n: usize) {
        self.queued
            .store(self.queued.load(Ordering::Relaxed) - n, Ordering::Release);
    }

    /// Remove the new sends matching `pred` from the queue; the caller holds the queue lock
    /// (from [`SendRing::lock_queue`]).
    pub(crate) fn remove_locked(
        &self,
        q: &mut Queues,
        pred: impl Fn(&Pending) -> bool,
    ) -> Vec<Record> {
        let mut out = Vec::new();
        for list in [&mut q.requests, &mut q.others] {
            let mut i = 0;
            while i < list.len() {
                if matches!(&list[i].1, Job::New(p) if pred(p)) {
                    if let Some((_, Job::New(p))) = list.remove(i) {
                        out.push(p);
                        self.queued_sub(1);
                    }
                } else {
                    i += 1;
                }
            }
        }
        out
    }

    /// A send queue entry came back (its work request completed).
    pub(crate) fn give_credit(&self) {
        self.give_credit_unkicked();
        self.kick();
    }

    /// [`SendRing::give_credit`] without the kick, for the progress loop: it kicks once for
    /// everything a pass gave back, at the pass's end and before its own drain
    /// (`ProgressState::kick_owed`), rather than once per completion (a kick is a locked
    /// instruction).
    pub(crate) fn give_credit_unkicked(&self) {
        let before = self.credits.fetch_add(1, Ordering::SeqCst);
        debug_assert!(before < self.depth, "more entries returned than taken");
    }

    /// Give back an entry taken by this drainer and not used (no kick: the drainer looks at
    /// the queue again itself).
    fn return_credit(&self) {
        self.credits.fetch_add(1, Ordering::SeqCst);
    }

    fn take_credit(&self) -> bool {
        self.credits
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |c| c.checked_sub(1))
            .is_ok()
    }

    /// Take the posting flag; `None` if another thread is draining, else the kick count to
    /// hand back to [`SendRing::end_drain`].
    pub(crate) fn try_begin_drain(&self) -> Option<u64> {
        self.posting.try_begin()
    }

    /// Give the posting flag back; true if something happened meanwhile that the drainer may
    /// have missed, so it should try again.
    pub(crate) fn end_drain(&self, seen: u64) -> bool {
        self.posting.end(seen)
    }

    /// Drain while there may be something to drain (see [`Posting::drain`]): `held` drains
    /// once with the posting flag, taken when the kick count was the value it is given.
    pub(crate) fn drain_with(&self, held: impl FnMut(u64) -> bool) {
        self.posting.drain(held);
    }

    /// With the posting flag held: the jobs that can go now, under one queue lock (see
    /// [`SendRing::next_locked`]), after queueing `incoming` (the drainer's own job) under that
    /// lock. Work requests to post are appended to `batch` (until it holds [`POST_BATCH`]);
    /// returns at the first job that is not a post (the caller handles it and calls again), or
    /// `None` when nothing more can go now or the batch is full; and whether `incoming` had to
    /// wait (as [`SendRing::enqueue`] says).
    pub(crate) fn next_batch(
        &self,
        dead: bool,
        batch: &mut PostBatch,
        incoming: Option<Job>,
    ) -> (Option<Drained>, bool) {
        let mut q = self.lock_queue();
        let waited = incoming.is_some_and(|job| self.push_locked(&mut q, job));
        while batch.wrs.len() < POST_BATCH {
            match self.next_locked(&mut q, dead, batch) {
                Some(Drained::Batched) => {}
                other => return (other, waited),
            }
        }
        (None, waited)
    }

    /// With the posting flag and the queue lock held: the oldest queued job that can go now (a
    /// slot and an entry for a new send, and for a request a request unit; an entry for a
    /// retry). A request held by the request limit lets younger sends that need no unit go first
    /// (those awaiting no response, and requests that reserved theirs with their flow-control
    /// credit), and a new send waiting for a slot lets younger retries go first (each holds
    /// its slot already, and the slot the new send waits for may be one of theirs, given back
    /// only once the retry is posted and its wait ends: the kernel's `ib_send_mad` too queues
    /// retries and new sends alike for the send queue only); otherwise jobs go in arrival
    /// order, and new sends, and retries, keep their order among themselves.
    fn next_locked(&self, q: &mut Queues, dead: bool, batch: &mut PostBatch) -> Option<Drained> {
        if dead {
            if q.is_empty() {
                return None;
            }
            let mut news = Vec::new();
            let mut reposts = Vec::new();
            let all: Vec<(u64, Job)> = q
                .requests
                .drain(..)
                .chain(q.others.drain(..))
                .chain(q.reposts.drain(..))
                .collect();
            for (_, job) in all {
                match job {
                    Job::New(p) => news.push(p),
                    Job::Repost {
                        index, generation, ..
                    } => reposts.push(self.wr_id(index, generation)),
                }
            }
            self.queued_sub(news.len() + reposts.len());
            return Some(Drained::Fail(news, reposts));
        }
        // The heads of the three lists (requests, other new sends, retries), looked at in
        // arrival order.
        let seq = |l: &VecDeque<(u64, Job)>| l.front().map(|(s, _)| *s);
        let mut heads = [seq(&q.requests), seq(&q.others), seq(&q.reposts)];
        // A new send found no free slot: no new send goes in this call (they keep their
        // order), but a retry, which holds its slot, may.
        let mut no_slot = false;
        loop {
            let mut pick = None;
            for (which, head) in heads.iter().enumerate() {
                if let Some(s) = *head {
                    if pick.is_none_or(|(best, _)| s < best) {
                        pick = Some((s, which));
                    }
                }
            }
            let (_, which) = pick?;
            heads[which] = None;
            let from_requests = which == 0;
            let list = match which {
                0 => &mut q.requests,
                1 => &mut q.others,
                _ => &mut q.reposts,
            };
            let Some((_, head)) = list.front() else {
                continue;
            };
            let out = match head {
                Job::New(p) => {
                    let local = p.local;
                    if from_requests && self.requests_held() >= self.request_limit {
                        // Over the request limit: the other lists may go.
                        continue;
                    }
                    if no_slot || self.free.len() == 0 {
                        // Retries may go past it: one may hold the slot it waits for, and
                        // give it back only after the retry (its last wait) ends.
                        no_slot = true;
                        continue;
                    }
                    if !(local || self.take_credit()) {
                        return None;
                    }
                    if from_requests && !self.try_reserve() {
                        // A sender reserved the last unit since the look above.
                        if !local {
                            self.return_credit();
                        }
                        continue;
                    }
                    let index = self
                        .free
                        .pop()
                        .expect("a free slot (only the drainer pops)");
                    let Some((_, Job::New(p))) = list.pop_front() else {
                        unreachable!("the head is a new send")
                    };
                    // It holds a unit now if it is a request (taken above, or reserved).
                    let request = from_requests || p.reserved;
                    let (out, mad) = self.install(&q.buffers, index, p, request, batch);
                    if q.spares.len() < self.depth as usize && mad.capacity() >= MAD_LEN {
                        q.spares.push(mad);
                    }
                    out
                }
                &Job::Repost {
                    index,
                    generation,
                    on_fail,
                } => {
                    let slot = &self.slots[index as usize];
                    let w = slot.state.load();
                    let current = w.generation() == generation && w.on_qp();
                    if !current || w.state() == crate::slot_state::SendState::Canceled {
                        list.pop_front();
                        Drained::Skip(self.wr_id(index, generation))
                    } else if !self.take_credit() {
                        return None;
                    } else {
                        list.pop_front();
                        let post = lock(&slot.data)
                            .as_ref()
                            .filter(|d| d.generation == generation)
                            .map(|d| {
                                counters::posted(batch, &d.p.agent, true);
                                batch
                                    .wrs
                                    .push(self.send_wr(&q.buffers, index, generation, &d.p));
                                batch.meta.push(on_fail);
                                Drained::Batched
                            });
                        post.unwrap_or_else(|| {
                            self.give_credit();
                            Drained::Skip(self.wr_id(index, generation))
                        })
                    }
                }
            };
            self.queued_sub(1);
            return Some(out);
        }
    }

    pub(crate) fn wr_id(&self, index: u32, generation: u32) -> u64 {
        WrId::Send {
            qp: self.qp,
            index,
            generation,
        }
        .encode()
    }

    /// The work request of `p` in slot `index` (generation `generation`): built at install
    /// and again for each repost rather than kept in the slot, whose record moves (into the
    /// slot, out at DONE) are cheaper without it.
    fn send_wr(&self, buffers: &[DmaLease], index: u32, generation: u32, p: &Pending) -> SendWr {
        let (lease, offset) = buffer(buffers, index);
        SendWr {
            wr_id: self.wr_id(index, generation),
            sge: Sge {
                iova: lease.iova() + offset as u64,
                len: MAD_LEN as u32,
            },
            dest: p.dest,
        }
    }

    /// Move `p` into the free slot `index` and publish it as SEND_START on the QP: rewrite the
    /// TID's upper half for a request (in the MAD and the kept header), copy the MAD into the
    /// slot's send buffer (zero-padded), build the work request and append it to `batch`.
    /// Returns [`Drained::Batched`] (or, if the copy failed, [`Drained::Refused`], with
    /// nothing appended) with the MAD's buffer, emptied (for the spares). A local request is
    /// neither copied nor appended: [`Drained::Local`] carries its MAD. Called with the queue
    /// lock held.
    fn install(
        &self,
        buffers: &[DmaLease],
        index: u32,
        mut p: Record,
        request: bool,
        batch: &mut PostBatch,
    ) -> (Drained, Vec<u8>) {
        let generation = self.slots[index as usize].state.load().generation();
        let tid = self.rewrite_tid(&mut p, index, generation);
        if p.local {
            return self.install_local(buffers, index, generation, p, tid, request);
        }
        // The slot is free (it came from the free list): the device reads its buffer only
        // once the work request built below is posted.
        let (lease, offset) = buffer(buffers, index);
        let len = p.mad.len().min(MAD_LEN);
        let copied = lease.write(offset, &p.mad[..len]).and_then(|()| {
            if len < MAD_LEN {
                lease.fill(offset + len, MAD_LEN - len, 0)
            } else {
                Ok(())
            }
        });
        if let Err(e) = &copied {
            // The buffer is MAD_LEN bytes inside its lease by construction.
            tracing::error!(index, "copying a MAD into its send buffer: {e}");
        }
        // Not needed any more (retries send the send buffer again).
        let mut mad = std::mem::take(&mut p.mad);
        mad.clear();
        let wr = self.send_wr(buffers, index, generation, &p);
        if copied.is_ok() {
            counters::posted(batch, &p.agent, true);
        }
        self.occupy(index, generation, p, tid, request);
        let out = if copied.is_ok() {
            batch.wrs.push(wr);
            batch.meta.push(WcStatus::LocQpOpErr);
            Drained::Batched
        } else {
            // Posting it would send what the buffer still holds: the slot's previous MAD.
            Drained::Refused(wr.wr_id)
        };
        (out, mad)
    }

    /// [`SendRing::install`] of a local request: in its slot like any request, but its MAD
    /// goes to the agent it is for ([`Drained::Local`]) rather than to the send buffer.
    #[cold]
    fn install_local(
        &self,
        buffers: &[DmaLease],
        index: u32,
        generation: u32,
        mut p: Record,
        tid: u64,
        request: bool,
    ) -> (Drained, Vec<u8>) {
        let mad = std::mem::take(&mut p.mad);
        let wr = self.send_wr(buffers, index, generation, &p);
        self.occupy(index, generation, p, tid, request);
        let out = Drained::Local {
            wr_id: wr.wr_id,
            mad,
            pkey_index: wr.dest.pkey_index,
        };
        (out, Vec::new())
    }

    /// A request's TID with its upper half naming slot `index` (written into the MAD and the
    /// kept header); a response keeps the requester's.
    fn rewrite_tid(&self, p: &mut Record, index: u32, generation: u32) -> u64 {
        if p.is_response {
            return p.tid();
        }
        let tid = self.layout.rewrite(p.tid(), index, generation);
        p.header[8..16].copy_from_slice(&tid.to_be_bytes());
        p.mad[8..16].copy_from_slice(&tid.to_be_bytes());
        tid
    }

    /// Store `p` in the free slot `index` and publish it as SEND_START; `request`: it holds a
    /// request unit (taken before), which the slot now holds until [`SendRing::release`].
    fn occupy(&self, index: u32, generation: u32, mut p: Record, tid: u64, request: bool) {
        let slot = &self.slots[index as usize];
        slot.send_id.store(p.id.0, Ordering::Release);
        slot.owner.store(p.agent.id.0, Ordering::Release);
        slot.timeout_ms.store(p.wait_ms, Ordering::Release);
        p.reserved = false;
        {
            let mut data = lock(&slot.data);
            // A slot from the free list holds nothing (its last send was taken out at DONE):
            // clearing it first (which drops whatever it held, as the assignment would) leaves
            // no drop between building the record and storing it, so it is built in place.
            *data = None;
            *data = Some(SlotData {
                generation,
                p,
                tid,
                retries_used: 0,
                request,
                deadline: None,
            });
        }
        let published = slot.state.install(generation);
        debug_assert!(published, "a slot from the free list is free");
        if !published {
            tracing::error!(index, "send slot from the free list was not free");
        }
    }

    /// Give slot `index` back to the free list (the progress loop, after `recycle`);
    /// `request`: it held a request unit, which comes back too (the progress loop then moves
    /// waiting backlogs on at the end of its pass: [`RequestUnits::take_wanted`]). No kick:
    /// the progress loop kicks once at the end of its pass, before its own drain
    /// (`ProgressState::kick_owed`).
    pub(crate) fn release(&self, index: u32, request: bool) {
        if request {
            self.units.give_back();
        }
        self.free.push(index);
    }
}

#[cfg(test)]
impl SendRing {
    /// The records kept for new sends: for each, the agent it names and its MAD buffer's
    /// length.
    pub(crate) fn spare_records(&self) -> Vec<(crate::event::AgentId, usize)> {
        self.lock_queue()
            .records
            .iter()
            .map(|r| (r.agent.id, r.mad.len()))
            .collect()
    }

    /// Replace every send buffer lease by one of `len` bytes from `pool` (too short for a MAD
    /// makes the copy at install fail, as a real DMA error would). Only while no send is in a
    /// slot: a lease the device may read is not dropped.
    pub(crate) fn replace_send_buffers(&self, pool: &DmaPool, len: usize) {
        let mut q = self.lock_queue();
        assert!(
            self.slots.iter().all(|s| !s.state.load().is_active()),
            "no send in a slot"
        );
        for lease in &mut q.buffers {
            *lease = pool.lease(len, 64, Access::Read).expect("lease");
        }
    }

    /// Write `byte` over slot `index`'s send buffer, whatever its send's state (to check that
    /// the test double notices a buffer rewritten under a posted send).
    pub(crate) fn scribble_send_buffer(&self, index: u32, byte: u8) {
        let q = self.lock_queue();
        let (lease, offset) = buffer(&q.buffers, index);
        lease.fill(offset, MAD_LEN, byte).expect("in the lease");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_ring_hands_out_each_index_once() {
        let f = FreeRing::full(4);
        assert_eq!(f.len(), 4);
        let got: Vec<u32> = std::iter::from_fn(|| f.pop()).collect();
        assert_eq!(got, vec![0, 1, 2, 3]);
        assert_eq!(f.pop(), None);
        f.push(2);
        f.push(0);
        assert_eq!(f.len(), 2);
        assert_eq!(f.pop(), Some(2));
        f.push(3);
        f.push(1);
        f.push(2);
        assert_eq!(f.len(), 4);
        let got: Vec<u32> = std::iter::from_fn(|| f.pop()).collect();
        assert_eq!(got, vec![0, 3, 1, 2]);
    }

    /// A slot count that is not a power of two: the ring's room is larger, and indexes still
    /// come back in the order they were pushed across many wraps of its positions.
    #[test]
    fn free_ring_of_three_keeps_order_across_wraps() {
        let f = FreeRing::full(3);
        assert_eq!(f.len(), 3);
        let mut expect: std::collections::VecDeque<u32> = (0..3).collect();
        for round in 0..20u32 {
            let a = f.pop().expect("a free index");
            assert_eq!(Some(a), expect.pop_front(), "round {round}");
            let b = f.pop().expect("a second free index");
            assert_eq!(Some(b), expect.pop_front(), "round {round}");
            // Given back in the other order.
            f.push(b);
            f.push(a);
            expect.push_back(b);
            expect.push_back(a);
            assert_eq!(f.len(), 3);
        }
        let got: Vec<u32> = std::iter::from_fn(|| f.pop()).collect();
        assert_eq!(got, Vec::from(expect));
        assert_eq!(f.pop(), None);
    }
}

#[cfg(all(test, loom))]
mod loom_tests;

//! The send side of one special QP: a fixed ring of send slots sized to the send queue, the
//! free slots, and the in-order queue of sends waiting for a slot.
//!
//! A send lives in exactly one place: its agent's flow-control backlog, this ring's queue
//! (both as a [`Pending`] record that owns its DMA lease), or a slot (which then owns the
//! lease). It moves from the queue into a slot under the queue lock, so a search that holds
//! that lock finds it in one place or the other. A slot stays owned from install to DONE, so
//! the work requests on the QP never outnumber the slots and the send queue never overflows;
//! sends beyond the slots wait in the queue, in order, and none is refused.
//!
//! Posting is safe from any thread. Whoever queues a send then drains the queue; one drainer
//! at a time holds the posting flag (a try-flag nobody waits on), so sends leave the queue and
//! reach the QP in queue order, and no lock is held while the device is called.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use dma::DmaLease;
use driver::verbs::{SendWr, Sge, SpecialQp, UdDest};
use mad_wire::header::{HEADER_LEN, MAD_LEN};

use crate::agent::AgentInner;
use crate::event::SendId;
use crate::slot_state::SlotState;
use crate::tid::{TidLayout, WrId};

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A send that has no slot yet. It owns its DMA lease, which already holds the MAD.
pub(crate) struct Pending {
    pub(crate) agent: Arc<AgentInner>,
    pub(crate) id: SendId,
    pub(crate) lease: DmaLease,
    /// The MAD's first 24 bytes as given (the TID's upper half is rewritten at install).
    pub(crate) header: [u8; HEADER_LEN],
    pub(crate) dest: UdDest,
    pub(crate) timeout_ms: u32,
    pub(crate) max_retries: u32,
    pub(crate) context: u64,
    /// Counts against its agent's solicited-MAD limit (§1.9).
    pub(crate) solicited: bool,
    /// Currently counted in its agent's outstanding solicited sends.
    pub(crate) fc_counted: bool,
    /// The MAD is a response (its TID is the requester's and is kept).
    pub(crate) is_response: bool,
}

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
    pub(crate) p: Pending,
    /// The TID as sent.
    pub(crate) tid: u64,
    pub(crate) retries_used: u32,
    pub(crate) wr: SendWr,
}

/// One send slot.
pub(crate) struct Slot {
    pub(crate) state: SlotState,
    /// The send in the slot (written before the state is published; lets cancel find it
    /// without locking every slot).
    pub(crate) send_id: AtomicU64,
    /// Its agent (same rule).
    pub(crate) owner: AtomicU32,
    pub(crate) data: Mutex<Option<SlotData>>,
}

impl Slot {
    fn new() -> Slot {
        Slot {
            state: SlotState::new(),
            send_id: AtomicU64::new(0),
            owner: AtomicU32::new(u32::MAX),
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
/// under the queue lock. Each index is in the ring at most once, so it never overflows.
struct FreeRing {
    buf: Box<[AtomicU32]>,
    head: AtomicUsize,
    tail: AtomicUsize,
}

impl FreeRing {
    fn full(n: u32) -> FreeRing {
        FreeRing {
            buf: (0..n).map(AtomicU32::new).collect(),
            head: AtomicUsize::new(0),
            tail: AtomicUsize::new(n as usize),
        }
    }

    fn push(&self, index: u32) {
        let t = self.tail.load(Ordering::Relaxed);
        self.buf[t % self.buf.len()].store(index, Ordering::Relaxed);
        self.tail.store(t.wrapping_add(1), Ordering::SeqCst);
    }

    fn pop(&self) -> Option<u32> {
        let h = self.head.load(Ordering::Relaxed);
        if h == self.tail.load(Ordering::SeqCst) {
            return None;
        }
        let v = self.buf[h % self.buf.len()].load(Ordering::Relaxed);
        self.head.store(h.wrapping_add(1), Ordering::Release);
        Some(v)
    }

    fn len(&self) -> usize {
        let t = self.tail.load(Ordering::SeqCst);
        let h = self.head.load(Ordering::Acquire);
        t.wrapping_sub(h)
    }
}

/// A send that just got a slot and is ready to post.
pub(crate) struct Installed {
    pub(crate) wr: SendWr,
    pub(crate) agent: Arc<AgentInner>,
}

/// What the drainer does with the head of the queue.
pub(crate) enum Drained {
    /// Post it.
    Post(Installed),
    /// The device is dead: complete these with WR_FLUSH_ERR.
    Fail(Vec<Pending>),
}

/// The send side of one special QP.
pub(crate) struct SendRing {
    pub(crate) qp: SpecialQp,
    pub(crate) slots: Box<[Slot]>,
    pub(crate) layout: TidLayout,
    free: FreeRing,
    queue: Mutex<VecDeque<Pending>>,
    queued: AtomicUsize,
    posting: AtomicBool,
}

impl SendRing {
    /// A ring of `slots` slots (at least 1) on `qp`.
    pub(crate) fn new(qp: SpecialQp, slots: u32) -> SendRing {
        let slots = slots.max(1);
        SendRing {
            qp,
            slots: (0..slots).map(|_| Slot::new()).collect(),
            layout: TidLayout::new(qp, slots),
            free: FreeRing::full(slots),
            queue: Mutex::new(VecDeque::new()),
            queued: AtomicUsize::new(0),
            posting: AtomicBool::new(false),
        }
    }

    pub(crate) fn slot_count(&self) -> u32 {
        self.slots.len() as u32
    }

    pub(crate) fn queued(&self) -> usize {
        self.queued.load(Ordering::SeqCst)
    }

    pub(crate) fn lock_queue(&self) -> MutexGuard<'_, VecDeque<Pending>> {
        lock(&self.queue)
    }

    /// Put `p` at the back of the queue. Returns whether it had to wait behind others or for
    /// a slot (for the overflow counter).
    pub(crate) fn enqueue(&self, p: Pending) -> bool {
        let mut q = self.lock_queue();
        let waits = !q.is_empty() || self.free.len() == 0;
        q.push_back(p);
        self.queued.fetch_add(1, Ordering::SeqCst);
        waits
    }

    /// Remove the queued send `id` of `agent`, if it is in the queue. The caller holds the
    /// queue lock (from [`SendRing::lock_queue`]).
    pub(crate) fn remove_locked(
        &self,
        q: &mut VecDeque<Pending>,
        pred: impl Fn(&Pending) -> bool,
    ) -> Vec<Pending> {
        let mut out = Vec::new();
        let mut i = 0;
        while i < q.len() {
            if pred(&q[i]) {
                if let Some(p) = q.remove(i) {
                    out.push(p);
                    self.queued.fetch_sub(1, Ordering::SeqCst);
                }
            } else {
                i += 1;
            }
        }
        out
    }

    /// Take the posting flag; false if another thread is draining.
    pub(crate) fn try_begin_drain(&self) -> bool {
        !self.posting.swap(true, Ordering::SeqCst)
    }

    /// Give the posting flag back; true if the queue may have work a drainer would now miss
    /// (a send arrived or a slot freed while the flag was held), so the caller loops.
    pub(crate) fn end_drain(&self, dead: bool) -> bool {
        self.posting.store(false, Ordering::SeqCst);
        self.queued() > 0 && (dead || self.free.len() > 0)
    }

    /// With the posting flag held: take the head of the queue into a free slot.
    pub(crate) fn next(&self, dead: bool) -> Option<Drained> {
        let mut q = self.lock_queue();
        if q.is_empty() {
            return None;
        }
        if dead {
            let all: Vec<Pending> = q.drain(..).collect();
            self.queued.fetch_sub(all.len(), Ordering::SeqCst);
            return Some(Drained::Fail(all));
        }
        let index = self.free.pop()?;
        let p = q.pop_front().expect("queue is not empty");
        self.queued.fetch_sub(1, Ordering::SeqCst);
        let installed = self.install(index, p);
        drop(q);
        Some(Drained::Post(installed))
    }

    /// Move `p` into the free slot `index` and publish it as SEND_START on the QP: rewrite the
    /// TID's upper half for a request (in the DMA buffer and the kept header), build the work
    /// request. Called with the queue lock held.
    fn install(&self, index: u32, mut p: Pending) -> Installed {
        let slot = &self.slots[index as usize];
        let generation = slot.state.load().generation();
        let tid = if p.is_response {
            p.tid()
        } else {
            let tid = self.layout.rewrite(p.tid(), index, generation);
            p.header[8..16].copy_from_slice(&tid.to_be_bytes());
            if let Err(e) = p.lease.write_u32_be(8, (tid >> 32) as u32) {
                // The lease is MAD_LEN bytes; offset 8 is always inside it.
                tracing::error!("writing the TID into a send buffer: {e}");
            }
            tid
        };
        let wr = SendWr {
            wr_id: WrId::Send {
                qp: self.qp,
                index,
                generation,
            }
            .encode(),
            sge: Sge {
                iova: p.lease.iova(),
                len: MAD_LEN as u32,
            },
            dest: p.dest,
        };
        let agent = Arc::clone(&p.agent);
        slot.send_id.store(p.id.0, Ordering::Release);
        slot.owner.store(agent.id.0, Ordering::Release);
        *lock(&slot.data) = Some(SlotData {
            generation,
            p,
            tid,
            retries_used: 0,
            wr,
        });
        let published = slot.state.install(generation);
        debug_assert!(published, "a slot from the free list is free");
        if !published {
            tracing::error!(index, "send slot from the free list was not free");
        }
        Installed { wr, agent }
    }

    /// Give slot `index` back to the free list (the progress loop, after `recycle`).
    pub(crate) fn release(&self, index: u32) {
        self.free.push(index);
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
}

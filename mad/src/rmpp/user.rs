//! The user-RMPP transfers under way by TID: which agent a response's TID names once the
//! request's send slot may have gone to another send, and which TID an agent's later
//! segments, ACKs, STOPs and ABORTs go with ([`super::user_send`]).
//!
//! The kernel finds the agent of any response from the TID's upper half (the agent's
//! `hi_tid`), so every later segment of a user-RMPP response reaches it however many sends
//! went out meanwhile (`ib_mad_complete_recv` in drivers/infiniband/core/mad.c hands every
//! RMPP-active response MAD it matches to no send to the agent: "user rmpp is in effect"),
//! and `ib_umad_write` (drivers/infiniband/core/user_mad.c) sends every request-method MAD
//! of the agent with that `hi_tid`, so the user's ACKs go with the response's TID. Ours
//! names the send slot and its generation instead, which the ring can only attribute while
//! the slot still holds that send or its last one. This table keeps the full TID of a
//! request answered by an RMPP-active response segment, with its agent (by ID: the agent
//! may deregister) and the address it came from (an ACK of a user-RMPP request's segment is
//! recorded too: its TID is the one the request's later segments must carry).
//!
//! An entry is under way until the response's Last segment; then it is completed and kept
//! [`super::CLEANUP_DELAY`] more (the kernel keeps a completed reassembly that long for
//! duplicates: `complete_rmpp` in drivers/infiniband/core/mad_rmpp.c), so that the user's
//! final ACK of the Last segment, sent after it, and its ACKs of copies of the Last segment
//! the responder resends when that ACK is lost (a kernel RMPP sender waits at most 2 s for
//! it: `send_next_seg` in mad_rmpp.c), still go with the response's TID and those copies
//! still reach the user. A completed entry takes no other DATA segment. An entry goes at an
//! ABORT or STOP, the transfer's time limit (or the end of the cleanup delay), the agent's
//! deregistration, the device's death, or when the bound pushes it out (completed ones
//! first). The full 64-bit TID carries the slot's generation, so a later send in the same
//! slot is never taken for the old one.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use crate::event::AgentId;

/// The bound on the user-RMPP transfer table by default: far more than the transfers a node
/// has under way, each costing a few dozen bytes.
pub const DEFAULT_MAX_USER_TRANSFERS: usize = 256;

struct Entry {
    /// Insertion order (with `deadline`, the key in `under_way` or `completed`).
    seq: u64,
    agent: AgentId,
    mgmt_class: u8,
    /// The peer's LID and QP.
    peer: (u16, u32),
    deadline: Duration,
    /// The response's Last segment came: the entry is kept only for the user's final ACK
    /// (and its ACKs of resent copies of the Last segment).
    completed: bool,
}

impl Entry {
    fn key(&self) -> (Duration, u64) {
        (self.deadline, self.seq)
    }
}

/// How many entries [`UserTransfers::expire`] forgot.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Expired {
    /// Transfers under way (no Last segment within their time limit).
    pub(super) under_way: usize,
    /// Completed transfers at the end of their cleanup delay.
    pub(super) completed: usize,
}

/// User-RMPP transfers under way or recently completed, by TID.
#[derive(Default)]
pub(super) struct UserTransfers {
    by_tid: HashMap<u64, Entry>,
    /// The TIDs of the entries under way by (deadline, insertion order): they expire in this
    /// order, and at the bound the first goes first.
    under_way: BTreeMap<(Duration, u64), u64>,
    /// The same for the completed entries, which the bound drops before any under way.
    completed: BTreeMap<(Duration, u64), u64>,
    next_seq: u64,
}

impl UserTransfers {
    /// The entries, under way and completed.
    pub(super) fn len(&self) -> usize {
        self.by_tid.len()
    }

    /// The completed entries.
    pub(super) fn completed_len(&self) -> usize {
        self.completed.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.by_tid.is_empty()
    }

    /// Make room for one entry within `max`: completed entries go first, due soonest first,
    /// then those under way. Returns how many under way were dropped.
    fn make_room(&mut self, max: usize) -> usize {
        let mut dropped = 0;
        while self.by_tid.len() >= max {
            let tid = if let Some((_, tid)) = self.completed.pop_first() {
                tid
            } else if let Some((_, tid)) = self.under_way.pop_first() {
                dropped += 1;
                tid
            } else {
                break;
            };
            self.by_tid.remove(&tid);
        }
        dropped
    }

    /// Add a new entry for `tid` within `max`; returns how many under way were dropped.
    #[allow(clippy::too_many_arguments)]
    fn add(
        &mut self,
        tid: u64,
        agent: AgentId,
        mgmt_class: u8,
        peer: (u16, u32),
        deadline: Duration,
        completed: bool,
        max: usize,
    ) -> usize {
        if max == 0 {
            return 0;
        }
        let dropped = self.make_room(max);
        let seq = self.next_seq;
        self.next_seq += 1;
        let e = Entry {
            seq,
            agent,
            mgmt_class,
            peer,
            deadline,
            completed,
        };
        self.order_of(completed).insert(e.key(), tid);
        self.by_tid.insert(tid, e);
        dropped
    }

    /// Remember that `tid` (class `mgmt_class`, from `peer`) answers a request of `agent`,
    /// until `deadline`; an entry already there, under way or completed, stays as it is (the
    /// limit counts from the first segment). At most `max` entries are kept: returns how many
    /// under way were dropped for this one.
    pub(super) fn insert(
        &mut self,
        tid: u64,
        agent: AgentId,
        mgmt_class: u8,
        peer: (u16, u32),
        deadline: Duration,
        max: usize,
    ) -> usize {
        if self.by_tid.contains_key(&tid) {
            return 0;
        }
        self.add(tid, agent, mgmt_class, peer, deadline, false, max)
    }

    /// The Last segment of `tid` came: its entry (made now if there is none, as for a
    /// response of one segment) is kept until `deadline` for the user's final ACK, and for
    /// its ACKs of resent copies of the Last segment. An entry already completed keeps its
    /// deadline (the kernel's `complete_rmpp` queues the cleanup once; a duplicate of the
    /// Last segment does not move it). Returns how many under way were dropped to make room
    /// within `max`.
    pub(super) fn complete(
        &mut self,
        tid: u64,
        agent: AgentId,
        mgmt_class: u8,
        peer: (u16, u32),
        deadline: Duration,
        max: usize,
    ) -> usize {
        if let Some(e) = self.by_tid.get_mut(&tid) {
            if !e.completed {
                self.under_way.remove(&e.key());
                e.completed = true;
                e.deadline = deadline;
                self.completed.insert(e.key(), tid);
            }
            return 0;
        }
        self.add(tid, agent, mgmt_class, peer, deadline, true, max)
    }

    /// The TID of `agent`'s newest transfer under way (not completed) of class `mgmt_class`
    /// with `peer` whose TID's lower half is `low`, if one is under way at `now`.
    pub(super) fn find(
        &self,
        agent: AgentId,
        low: u32,
        mgmt_class: u8,
        peer: (u16, u32),
        now: Duration,
    ) -> Option<u64> {
        self.by_tid
            .iter()
            .filter(|&(&tid, e)| {
                e.agent == agent
                    && !e.completed
                    && tid as u32 == low
                    && e.mgmt_class == mgmt_class
                    && e.peer == peer
                    && e.deadline > now
            })
            .max_by_key(|(_, e)| e.seq)
            .map(|(&tid, _)| tid)
    }

    /// The agent whose request `tid` answers, and whether its transfer completed, if the
    /// entry of class `mgmt_class` is still kept at `now`.
    pub(super) fn lookup(
        &self,
        tid: u64,
        mgmt_class: u8,
        now: Duration,
    ) -> Option<(AgentId, bool)> {
        self.by_tid
            .get(&tid)
            .filter(|e| e.mgmt_class == mgmt_class && e.deadline > now)
            .map(|e| (e.agent, e.completed))
    }

    /// The agent whose request `tid` answers, if its entry of class `mgmt_class` (under way
    /// or completed) is still kept at `now`.
    pub(super) fn get(&self, tid: u64, mgmt_class: u8, now: Duration) -> Option<AgentId> {
        self.lookup(tid, mgmt_class, now).map(|(a, _)| a)
    }

    /// Forget `tid`.
    pub(super) fn remove(&mut self, tid: u64) {
        if let Some(e) = self.by_tid.remove(&tid) {
            self.order_of(e.completed).remove(&e.key());
        }
    }

    fn order_of(&mut self, completed: bool) -> &mut BTreeMap<(Duration, u64), u64> {
        if completed {
            &mut self.completed
        } else {
            &mut self.under_way
        }
    }

    /// Forget the entries past their deadline at `now`.
    pub(super) fn expire(&mut self, now: Duration) -> Expired {
        let mut n = Expired::default();
        for completed in [false, true] {
            loop {
                let order = self.order_of(completed);
                let Some((&key, &tid)) = order.first_key_value() else {
                    break;
                };
                if key.0 > now {
                    break;
                }
                order.remove(&key);
                self.by_tid.remove(&tid);
                if completed {
                    n.completed += 1;
                } else {
                    n.under_way += 1;
                }
            }
        }
        n
    }

    /// The earliest deadline.
    pub(super) fn next_deadline(&self) -> Option<Duration> {
        let first = |o: &BTreeMap<(Duration, u64), u64>| o.first_key_value().map(|(k, _)| k.0);
        first(&self.under_way)
            .into_iter()
            .chain(first(&self.completed))
            .min()
    }

    /// Forget the entries of `agent` (it deregisters).
    pub(super) fn remove_agent(&mut self, agent: AgentId) {
        let (under_way, completed) = (&mut self.under_way, &mut self.completed);
        self.by_tid.retain(|_, e| {
            let keep = e.agent != agent;
            if !keep {
                if e.completed {
                    completed.remove(&e.key());
                } else {
                    under_way.remove(&e.key());
                }
            }
            keep
        });
    }

    /// Forget everything (the device died).
    pub(super) fn clear(&mut self) {
        self.by_tid.clear();
        self.under_way.clear();
        self.completed.clear();
    }
}

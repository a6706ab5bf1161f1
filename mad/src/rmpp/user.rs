//! The user-RMPP transfers under way by TID: which agent a response's TID names once the
//! request's send slot may have gone to another send, and which TID an agent's later
//! segments, ACKs, STOPs and ABORTs go with ([`super::user_send`]).
//!
//! The kernel finds the agent of any response from the TID's upper half (the agent's
//! `hi_tid`), so every later segment of a user-RMPP response reaches it however many sends
//! went out meanwhile. Ours names the send slot and its generation instead, which the ring
//! can only attribute while the slot still holds that send or its last one. This table keeps
//! the full TID of a request answered by an RMPP-active response segment, with its agent
//! (by ID: the agent may deregister) and the address it came from (an ACK of a user-RMPP
//! request's segment is recorded too: its TID is the one the request's later segments must
//! carry), until the Last segment (or an ABORT or STOP), the
//! transfer's time limit, the agent's deregistration, or the bound pushes it out, oldest
//! first. The full 64-bit TID carries the slot's generation, so a later send in the same
//! slot is never taken for the old one.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use crate::event::AgentId;

/// The bound on the user-RMPP transfer table by default: far more than the transfers a node
/// has under way, each costing a few dozen bytes.
pub const DEFAULT_MAX_USER_TRANSFERS: usize = 256;

struct Entry {
    /// Insertion order (the key in `order`).
    seq: u64,
    agent: AgentId,
    mgmt_class: u8,
    /// The peer's LID and QP.
    peer: (u16, u32),
    deadline: Duration,
}

/// User-RMPP responses under way, by TID.
#[derive(Default)]
pub(super) struct UserTransfers {
    by_tid: HashMap<u64, Entry>,
    /// TIDs by insertion order: the oldest is dropped first, and expires first (every
    /// deadline is the same span after its insertion).
    order: BTreeMap<u64, u64>,
    next_seq: u64,
}

impl UserTransfers {
    pub(super) fn len(&self) -> usize {
        self.by_tid.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.by_tid.is_empty()
    }

    /// Remember that `tid` (class `mgmt_class`, from `peer`) answers a request of `agent`,
    /// until `deadline`; an entry already there keeps its deadline (the limit counts from the
    /// first segment). At most `max` entries are kept: returns how many older ones were
    /// dropped for this one.
    pub(super) fn insert(
        &mut self,
        tid: u64,
        agent: AgentId,
        mgmt_class: u8,
        peer: (u16, u32),
        deadline: Duration,
        max: usize,
    ) -> usize {
        if self.by_tid.contains_key(&tid) || max == 0 {
            return 0;
        }
        let mut dropped = 0;
        while self.by_tid.len() >= max {
            let Some((_, old)) = self.order.pop_first() else {
                break;
            };
            self.by_tid.remove(&old);
            dropped += 1;
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        self.order.insert(seq, tid);
        self.by_tid.insert(
            tid,
            Entry {
                seq,
                agent,
                mgmt_class,
                peer,
                deadline,
            },
        );
        dropped
    }

    /// The TID of `agent`'s newest transfer of class `mgmt_class` with `peer` whose TID's
    /// lower half is `low`, if one is under way at `now`.
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
                    && tid as u32 == low
                    && e.mgmt_class == mgmt_class
                    && e.peer == peer
                    && e.deadline > now
            })
            .max_by_key(|(_, e)| e.seq)
            .map(|(&tid, _)| tid)
    }

    /// The agent whose request `tid` answers, if a segment of class `mgmt_class` may still
    /// come for it at `now`.
    pub(super) fn get(&self, tid: u64, mgmt_class: u8, now: Duration) -> Option<AgentId> {
        self.by_tid
            .get(&tid)
            .filter(|e| e.mgmt_class == mgmt_class && e.deadline > now)
            .map(|e| e.agent)
    }

    /// Forget `tid`.
    pub(super) fn remove(&mut self, tid: u64) {
        if let Some(e) = self.by_tid.remove(&tid) {
            self.order.remove(&e.seq);
        }
    }

    /// Forget the entries past their deadline at `now`; returns how many.
    pub(super) fn expire(&mut self, now: Duration) -> usize {
        let mut n = 0;
        while let Some((&seq, &tid)) = self.order.first_key_value() {
            if self.by_tid.get(&tid).is_some_and(|e| e.deadline > now) {
                break;
            }
            self.order.remove(&seq);
            self.by_tid.remove(&tid);
            n += 1;
        }
        n
    }

    /// The earliest deadline.
    pub(super) fn next_deadline(&self) -> Option<Duration> {
        let (_, tid) = self.order.first_key_value()?;
        self.by_tid.get(tid).map(|e| e.deadline)
    }

    /// Forget the entries of `agent` (it deregisters).
    pub(super) fn remove_agent(&mut self, agent: AgentId) {
        let order = &mut self.order;
        self.by_tid.retain(|_, e| {
            let keep = e.agent != agent;
            if !keep {
                order.remove(&e.seq);
            }
            keep
        });
    }

    /// Forget everything (the device died).
    pub(super) fn clear(&mut self) {
        self.by_tid.clear();
        self.order.clear();
    }
}

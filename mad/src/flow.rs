//! Solicited-MAD flow control per agent, after the kernel's 2025 patch "IB/mad: Add flow
//! control for solicited MADs" (reference/mad-stack.md §1.9).
//!
//! A send is *solicited* when it has a response timeout and its class is CM, SA or an SMP
//! class. An RMPP-active send of an agent registered with RMPP is not (the kernel's
//! `is_solicited_fc_mad`): it is a transfer ([`crate::rmpp`]), whose segments go out under
//! its own window and ACK timeouts, outside the agent's limit. An agent may have at
//! most `limit` solicited sends outstanding (posted or waiting for their response); further
//! solicited sends wait in its backlog (state QUEUED) in order, and so does a retry when the
//! backlog is not empty. The backlog drains as outstanding solicited sends finish.
//!
//! # Credits and request units: why sends never wait for each other in a cycle
//!
//! A send here may wait for four things: a credit of its agent (above), a *request unit* of
//! its ring (`SendRing::request_limit` of a ring's slots may hold requests; the rest are kept
//! for sends that await no response), a free slot, and a send queue entry. The kernel has
//! only the first: it allocates a `mad_send_wr` per send, and its send queue has an unbounded
//! overflow list, so a backlogged send there holds nothing. Here a retry that the kernel's
//! `retry_send` puts in the backlog (QUEUED, when the backlog is not empty) keeps its slot,
//! and with it its request unit: its slot's TID is how its response is still matched (the
//! kernel's `ib_find_send_mad` searches `backlog_list` too). If a new send could hold a credit
//! while it waits for a unit, this could happen: queued retries hold every unit, each waiting
//! for its agent's credits, which new sends hold in the ring's queue, waiting for a unit.
//!
//! So a credit is only ever held by a send that holds a unit. A new send takes its credit and
//! reserves a unit together, under its agent's lock (`PortShared::submit` and the backlog's
//! drain, `Pending::reserved`); with no unit left for it it waits in the backlog holding
//! neither, and its agent joins the ring's *unit waiters*, so that whoever gives a unit back
//! moves the backlogs on (`RequestUnits::reserve`, `PortShared::wake_unit_waiters`). A retry
//! leaving the backlog holds its unit in its slot already. Units are taken before credits,
//! never after, and every waiter waits only for holders that go on by themselves:
//!
//! - A send holding a unit and a credit, in the ring's queue, waits for a slot and an entry.
//!   Requests hold at most `request_limit` slots minus the units reserved and not yet in a
//!   slot, so the slots beyond that are free or held by sends that await no response, which
//!   give them back at their send completion, or, given a timeout by a modify, once their
//!   last wait for a response ends: each of their retries is a repost, which waits only for
//!   an entry (below); entries come back at send completions. It waits behind no request
//!   held by the limit (it needs no unit: it queues with the sends that await no response).
//! - A retry in the ring's queue (timed out, or leaving the backlog) holds its slot and
//!   waits only for an entry: it goes past new sends waiting for a slot
//!   (`SendRing::next_locked`), since the slot they wait for may be its own.
//! - A send in a slot, posted or waiting for its response, holds a unit (and a credit, if
//!   solicited) and waits only for the device, a response or its timer.
//! - A queued retry holds a unit and waits for a credit, which only the two kinds above hold.
//! - A new send in the backlog holds nothing and waits for a credit or a unit, which only the
//!   three kinds above hold.
//!
//! # The order units go in
//!
//! Units go to the waiting agents in the order they began waiting, one each in turn
//! (`units.rs`): the ring keeps its waiting agents in a FIFO (an agent joins at the back
//! when a new send of its finds no unit while it has a credit, and leaves once none of its new
//! sends waits, or it has no credit to take one with, or it is deregistered); only the agent
//! at the front takes a unit while others wait, even one its own request just gave back, and
//! having taken one it goes to the back if another send of its waits. A unit given back
//! serves the waiters from the front, then moves every other agent of the ring on as before:
//! the set of backlogs a unit wakes is unchanged, only their order is the waiters'. (The
//! ring's requests that reserved no unit, which take theirs as they leave the ring's queue,
//! are not among the waiters: they wait in the ring's queue, in its order.)
//!
//! The argument above is unchanged by it: the order adds no wait on anything held. A new send
//! behind others in the FIFO holds nothing, and waits only until the agents ahead of it have
//! had their turn, which needs nothing but a free unit: the front takes one under the FIFO's
//! lock; when it finds none it sets the wanted flag and looks again, so either it takes the
//! unit or the thread that gave it back sees the flag and serves it; a serve goes on down the
//! FIFO while units last; and whoever makes another agent the front outside a serve (the
//! front took a unit, or left) serves the new front once it let go of its agent's lock. The
//! FIFO's lock is a leaf (taken under an agent's lock, and under the ring's queue lock the
//! backlog's drain may hold, with nothing taken under it), so it adds no lock cycle either.
//! `units/loom_tests.rs` model-checks that no unit stays free while an agent waits for one.
//!
//! The backlog keeps its order but for one case, needed for the third point: when the new
//! sends at its head wait for a unit while a credit is free, the retries behind them go first
//! (new sends keep their order among themselves). The kernel never meets that case, so its
//! observable behaviour differs only while a ring's requests are at their limit: a solicited
//! send that finds its agent's credits free but no unit waits in the backlog (counted as
//! `overflowed`, as a send waiting for a slot is, not as `backlogged`), the agent's later
//! solicited sends and retries queue behind it, and a retry queued behind it goes on at once
//! if a credit is free (and then, if its post is refused, completes with LOC_QP_OP_ERR as a
//! retry from the backlog does).

use std::collections::VecDeque;

use driver::verbs::SpecialQp;
use mad_wire::class;

use crate::ring::Record;

/// The kernel's `IB_MAD_QP_RECV_SIZE`, the cap on R for SMP agents.
const KERNEL_RECV_SIZE: u32 = 512;

/// The limit for an agent registered for `class` (`None`: a send-only or responses-only
/// agent) that has a receive side or not (`receives`: the kernel's `recv_handler`), with
/// `recv_depth` = R, the receive queue size. 0 means no limit (no flow control): the kernel
/// sets `sol_fc_max` to `get_sol_fc_max_outstanding` only for an agent with a `recv_handler`,
/// and to 0 for one without (rdma commit 8ab05a5456bb, "IB/cm: Use separate agent w/o flow
/// control for REP", which CM's send-only REP agent relies on).
pub fn limit(class: Option<u8>, receives: bool, recv_depth: u32) -> u32 {
    if !receives {
        return 0;
    }
    match class {
        None | Some(class::CM) => recv_depth / 4,
        Some(class::SUBN_ADM) => recv_depth / 32,
        Some(class::SUBN_LID_ROUTED | class::SUBN_DIRECTED_ROUTE) => {
            recv_depth.min(KERNEL_RECV_SIZE) / 4
        }
        Some(_) => 0,
    }
}

/// `is_solicited_fc_mad`: whether a send of `mad_class` with `timeout_ms` counts.
pub fn is_solicited(mad_class: u8, timeout_ms: u32) -> bool {
    timeout_ms > 0
        && matches!(
            mad_class,
            class::CM | class::SUBN_ADM | class::SUBN_LID_ROUTED | class::SUBN_DIRECTED_ROUTE
        )
}

/// Something in an agent's backlog.
pub(crate) enum Backlogged {
    /// A new send, not posted yet.
    New(Record),
    /// A retry of the send in slot `index` of `qp` at `generation` (the slot is QUEUED).
    Retry {
        qp: SpecialQp,
        index: u32,
        generation: u32,
    },
}

/// An agent's flow-control state (under the agent's lock).
pub(crate) struct FlowControl {
    /// The limit (0: none).
    pub(crate) max: u32,
    /// Solicited sends posted or waiting for their response.
    pub(crate) outstanding: u32,
    pub(crate) backlog: VecDeque<Backlogged>,
}

impl FlowControl {
    pub(crate) fn new(max: u32) -> FlowControl {
        FlowControl {
            max,
            outstanding: 0,
            backlog: VecDeque::new(),
        }
    }

    /// `mad_is_for_backlog`: a solicited send waits if the backlog is not empty or the limit
    /// is reached.
    pub(crate) fn must_wait(&self, solicited: bool) -> bool {
        solicited && self.max > 0 && (!self.backlog.is_empty() || self.outstanding >= self.max)
    }

    /// Take the retry of slot `index` of `qp` at `generation` out of the backlog (it was
    /// canceled or answered while QUEUED: the kernel's DONE and CANCELED take a send off
    /// `backlog_list`). Returns whether it was there.
    pub(crate) fn remove_retry(&mut self, qp: SpecialQp, index: u32, generation: u32) -> bool {
        let pos = self.backlog.iter().position(|b| {
            matches!(b, Backlogged::Retry { qp: q, index: i, generation: g }
                if *q == qp && *i == index && *g == generation)
        });
        pos.and_then(|p| self.backlog.remove(p)).is_some()
    }

    /// Whether a credit is left (or there is no limit).
    pub(crate) fn has_credit(&self) -> bool {
        self.max == 0 || self.outstanding < self.max
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The table of §1.9 with R = 512 (the kernel's default receive queue size); an agent
    /// without a receive side has none (K-2025, rdma 8ab05a5456bb).
    #[test]
    fn limits_follow_the_kernel_table() {
        assert_eq!(limit(None, true, 512), 128, "responses-only agent: R/4");
        assert_eq!(
            limit(None, false, 512),
            0,
            "send-only agent: no flow control"
        );
        assert_eq!(limit(Some(0x07), true, 512), 128, "CM: R/4");
        assert_eq!(limit(Some(0x03), true, 512), 16, "SA: R/32");
        assert_eq!(limit(Some(0x01), true, 512), 128, "SMP: min(R,512)/4");
        assert_eq!(limit(Some(0x81), true, 4096), 128, "SMP: R capped at 512");
        assert_eq!(limit(Some(0x04), true, 512), 0, "other classes: no limit");
        assert_eq!(limit(Some(0x03), true, 256), 8);
    }

    #[test]
    fn solicited_means_a_timeout_and_cm_sa_or_smp() {
        for c in [0x07, 0x03, 0x01, 0x81] {
            assert!(is_solicited(c, 100), "{c:#x}");
            assert!(!is_solicited(c, 0), "{c:#x} without timeout");
        }
        for c in [0x04, 0x05, 0x06, 0x30] {
            assert!(!is_solicited(c, 100), "{c:#x}");
        }
    }

    #[test]
    fn backlog_rule() {
        let mut f = FlowControl::new(2);
        assert!(!f.must_wait(true));
        f.outstanding = 2;
        assert!(f.must_wait(true));
        assert!(!f.must_wait(false), "unsolicited sends never wait");
        let none = FlowControl::new(0);
        assert!(!none.must_wait(true), "no limit");
        f.outstanding = 1;
        f.backlog.push_back(Backlogged::Retry {
            qp: SpecialQp::Gsi,
            index: 0,
            generation: 0,
        });
        assert!(f.must_wait(true), "a non-empty backlog keeps order");
        assert!(f.has_credit());
        f.outstanding = 2;
        assert!(!f.has_credit());
    }
}

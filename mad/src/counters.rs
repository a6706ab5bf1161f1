//! Counters per port and per agent, readable from code at any time ([`crate::Port::counters`],
//! [`crate::Agent::counters`]): sends, completions by status, responses matched, drops by
//! reason, timeouts and retries. Updated with relaxed atomics; a snapshot is a plain struct.
//!
//! Each port and agent has two sets of cells: one any thread adds to (a locked
//! read-modify-write per count), and one only the holder of the port's progress lock adds to
//! (a plain load and store: that lock orders its holders, so no count is lost). The receive
//! and completion paths, which run only in the progress loop, count in the second; a snapshot
//! is the sum of both. An agent's `posted`, in the first set, is written only by its ring's
//! drainer, one at a time, and so also with a plain load and store (`posted`).

use std::sync::atomic::{AtomicU64, Ordering};

use driver::verbs::WcStatus;

use crate::agent::AgentInner;
use crate::port::ProgressState;
use crate::ring::PostBatch;

/// Completions by work-completion status.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StatusCounts(pub [u64; WcStatus::ALL.len()]);

impl StatusCounts {
    /// Completions with `status`.
    pub fn get(&self, status: WcStatus) -> u64 {
        self.0[usize::from(status.code())]
    }

    /// All completions.
    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }
}

/// Why a received MAD (or an event) was dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DropReason {
    /// A response whose TID names no send of this port (a BM Get or Set among them is
    /// answered with 0x000C instead, counted in `unmatched_replies`).
    UnknownTid,
    /// A response for a send that already finished (timed out, answered, canceled).
    Late,
    /// A response for a canceled send.
    Canceled,
    /// A second response for a send whose response already arrived.
    Duplicate,
    /// A response of another management class than the send's.
    WrongClass,
    /// A response from another address than the send went to (§1.3).
    WrongAddress,
    /// A response for a send that awaits none (sent with timeout 0), or for a send of an agent
    /// without a receive side (the kernel's `find_mad_agent` drops a MAD for an agent without
    /// a `recv_handler`).
    NotExpected,
    /// A request no agent registered for and that gets no answer.
    NoAgent,
    /// A receive completion with an impossible byte count.
    BadLength,
    /// BaseVersion other than 1.
    BadBaseVersion,
    /// A class on the wrong QP (SMPs only on QP0, the rest only on QP1).
    WrongQp,
    /// A CM MAD other than ClassPortInfo with a method other than Send.
    CmMethod,
    /// An event for an agent that had deregistered (a receive racing the deregistration).
    AgentClosed,
    /// A received MAD over the event queue's limit.
    QueueFull,
}

impl DropReason {
    /// Every reason.
    pub const ALL: [DropReason; 14] = [
        DropReason::UnknownTid,
        DropReason::Late,
        DropReason::Canceled,
        DropReason::Duplicate,
        DropReason::WrongClass,
        DropReason::WrongAddress,
        DropReason::NotExpected,
        DropReason::NoAgent,
        DropReason::BadLength,
        DropReason::BadBaseVersion,
        DropReason::WrongQp,
        DropReason::CmMethod,
        DropReason::AgentClosed,
        DropReason::QueueFull,
    ];
}

/// Drops by reason.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DropCounts(pub [u64; DropReason::ALL.len()]);

impl DropCounts {
    /// Drops for `reason`.
    pub fn get(&self, reason: DropReason) -> u64 {
        self.0[reason as usize]
    }

    /// All drops.
    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }
}

/// Atomic cells behind a [`StatusCounts`] / [`DropCounts`] snapshot.
#[derive(Debug)]
pub(crate) struct Cells<const N: usize>([AtomicU64; N]);

impl<const N: usize> Default for Cells<N> {
    fn default() -> Self {
        Cells(std::array::from_fn(|_| AtomicU64::new(0)))
    }
}

impl<const N: usize> Cells<N> {
    fn add(&self, i: usize) {
        if let Some(c) = self.0.get(i) {
            c.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Only by the holder of the progress lock (see [`solo`]).
    fn add_solo(&self, i: usize) {
        if let Some(c) = self.0.get(i) {
            add_unlocked(c);
        }
    }

    fn snapshot(&self) -> [u64; N] {
        std::array::from_fn(|i| self.0[i].load(Ordering::Relaxed))
    }
}

fn sum<const N: usize>(a: [u64; N], b: [u64; N]) -> [u64; N] {
    std::array::from_fn(|i| a[i] + b[i])
}

/// Declares a snapshot struct of plain counters, its atomic cells, and `snapshot()`.
macro_rules! counter_set {
    (
        $(#[$doc:meta])* $name:ident / $cells:ident {
            $( $(#[$fdoc:meta])* $field:ident ),* $(,)?
        }
    ) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
        pub struct $name {
            $( $(#[$fdoc])* pub $field: u64, )*
            /// Completions by status.
            pub completed: StatusCounts,
            /// Drops by reason.
            pub drops: DropCounts,
        }

        #[derive(Debug, Default)]
        pub(crate) struct $cells {
            $( pub(crate) $field: AtomicU64, )*
            completed: Cells<{ WcStatus::ALL.len() }>,
            drops: Cells<{ DropReason::ALL.len() }>,
        }

        impl $cells {
            pub(crate) fn snapshot(&self) -> $name {
                $name {
                    $( $field: self.$field.load(Ordering::Relaxed), )*
                    completed: StatusCounts(self.completed.snapshot()),
                    drops: DropCounts(self.drops.snapshot()),
                }
            }

            /// This snapshot plus the counts of `solo` (the progress loop's cells).
            pub(crate) fn snapshot_with(&self, solo: &$cells) -> $name {
                let (a, b) = (self.snapshot(), solo.snapshot());
                $name {
                    $( $field: a.$field + b.$field, )*
                    completed: StatusCounts(sum(a.completed.0, b.completed.0)),
                    drops: DropCounts(sum(a.drops.0, b.drops.0)),
                }
            }

            pub(crate) fn completed(&self, status: WcStatus) {
                self.completed.add(usize::from(status.code()));
            }

            /// In the progress loop's cells (see [`solo`]).
            pub(crate) fn completed_solo(&self, _st: &ProgressState, status: WcStatus) {
                self.completed.add_solo(usize::from(status.code()));
            }

            pub(crate) fn dropped(&self, reason: DropReason) {
                self.drops.add(reason as usize);
            }
        }
    };
}

counter_set! {
    /// What one port has done since it was opened.
    PortCounters / PortCells {
        /// Sends accepted (every one ends in exactly one completion).
        sends,
        /// Work requests posted: first posts, retries and reposts after a flush.
        posted,
        /// Responses matched to a send.
        responses,
        /// Of those, responses that arrived before their send's completion (EARLY_RESP).
        early_responses,
        /// Sends that finished with RESP_TIMEOUT_ERR.
        timeouts,
        /// Retries after a response timeout.
        retries,
        /// Receive completions carrying a MAD.
        received,
        /// Requests delivered to an agent.
        unsolicited,
        /// MADs answered by the port's own agent (`process_mad`).
        local_replies,
        /// MADs absorbed by the port's own agent without an answer.
        local_consumed,
        /// `process_mad` calls that failed (the MAD then went to the client agents).
        local_failures,
        /// Get/Set answered with status 0x000C because no agent claimed them.
        unmatched_replies,
        /// Receive completions with an error status.
        recv_errors,
        /// Receive buffers not given back to the device, because their QP is in error or
        /// the device refused them (kept, not lost).
        recv_repost_failures,
        /// Send completions with a per-work-request error (not a flush).
        send_errors,
        /// Send queues brought back from SQE to RTS.
        qp_recoveries,
        /// Send-queue recoveries that failed (the queue stays refused until a later post
        /// brings another attempt).
        recovery_failures,
        /// Flushed work requests reposted after a recovery.
        flush_reposts,
        /// Posts the device refused (completed with LOC_QP_OP_ERR or WR_FLUSH_ERR).
        post_failures,
        /// Sends that waited for a free slot.
        overflowed,
        /// Sends (and retries) held by solicited-MAD flow control.
        backlogged,
        /// Completions naming nothing the stack posted (rejected, never trusted).
        bad_completions,
        /// Errors returned by the device's poll.
        poll_errors,
        /// Fatal-error or removal events seen.
        fatal_events,
    }
}

counter_set! {
    /// What one agent has done since it was registered.
    AgentCounters / AgentCells {
        /// Sends accepted.
        sends,
        /// Work requests posted for its sends (retries included).
        posted,
        /// Responses matched to its sends.
        responses,
        /// Its sends that timed out.
        timeouts,
        /// Retries of its sends.
        retries,
        /// Requests delivered to it.
        unsolicited,
        /// Its sends held by flow control.
        backlogged,
    }
}

pub(crate) fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// Add one to a cell of the progress loop's set. `_st` is the proof that the caller holds the
/// progress lock, the only writer of that set: a load and a store lose no count then, and cost
/// no locked instruction.
pub(crate) fn solo(_st: &ProgressState, c: &AtomicU64) {
    add_unlocked(c);
}

/// Add one to an agent's `posted` (or, `up` false, take one back), as the drainer of its ring
/// does: the drainer holds the ring's batch (`_batch` is the proof), and an agent sends on one
/// QP, so one thread at a time writes the cell: a load and a store lose no count, and cost no
/// locked instruction. The port's internal agent (ID 0) answers on both QPs, whose drainers
/// may run at once: its cell takes a locked add.
pub(crate) fn posted(_batch: &PostBatch, agent: &AgentInner, up: bool) {
    let c = &agent.cells.posted;
    if agent.id.0 == 0 {
        if up {
            c.fetch_add(1, Ordering::Relaxed);
        } else {
            c.fetch_sub(1, Ordering::Relaxed);
        }
        return;
    }
    let v = c.load(Ordering::Relaxed);
    c.store(
        if up { v + 1 } else { v.wrapping_sub(1) },
        Ordering::Relaxed,
    );
}

/// One more in a cell with a single writer: a load and a store, no locked instruction.
fn add_unlocked(c: &AtomicU64) {
    c.store(c.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshots_count_by_status_and_reason() {
        let c = PortCells::default();
        bump(&c.sends);
        c.completed(WcStatus::RespTimeoutErr);
        c.completed(WcStatus::RespTimeoutErr);
        c.completed(WcStatus::Success);
        c.dropped(DropReason::Late);
        let s = c.snapshot();
        assert_eq!(s.sends, 1);
        assert_eq!(s.completed.get(WcStatus::RespTimeoutErr), 2);
        assert_eq!(s.completed.total(), 3);
        assert_eq!(s.drops.get(DropReason::Late), 1);
        assert_eq!(s.drops.get(DropReason::UnknownTid), 0);
        for (i, r) in DropReason::ALL.iter().enumerate() {
            assert_eq!(*r as usize, i);
        }
    }

    #[test]
    fn a_snapshot_with_the_progress_loops_cells_is_the_sum_of_both() {
        let (shared, progress) = (PortCells::default(), PortCells::default());
        bump(&shared.received);
        progress.received.store(2, Ordering::Relaxed);
        shared.completed(WcStatus::Success);
        progress
            .completed
            .add_solo(usize::from(WcStatus::Success.code()));
        progress
            .completed
            .add_solo(usize::from(WcStatus::Success.code()));
        progress.drops.add_solo(DropReason::Late as usize);
        let s = shared.snapshot_with(&progress);
        assert_eq!(s.received, 3);
        assert_eq!(s.completed.get(WcStatus::Success), 3);
        assert_eq!(s.drops.get(DropReason::Late), 1);
        assert_eq!(
            shared.snapshot().received,
            1,
            "each set keeps its own counts"
        );
    }
}

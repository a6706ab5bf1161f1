//! What the port does with each event of a send slot: which [`SlotState`] transition a send
//! CQE, a matched response, a timer expiry, a cancel, a modify or the reaping of a canceled
//! send attempts, and what comes of it (a completion to report, a response to deliver or drop,
//! a send for the progress loop to reap, a deadline to move). The progress loop
//! (`progress.rs`) and cancel, modify and deregistration (`port.rs`) decide through these
//! functions and only carry out the answer (timers, buffers, events), so the loom models
//! (`slot_events/loom_tests.rs`) check the port's own decisions racing each other, not a copy
//! of them.

use driver::verbs::WcStatus;

use crate::counters::DropReason;
use crate::slot_state::{CancelOutcome, CqeOutcome, Finish, RespOutcome, SendState, SlotState};
use crate::slot_state::{TimeoutAction, TimeoutOutcome};
use crate::sync::{AtomicU32, Ordering};

/// A send CQE of `status` for generation `generation`. `fatal`: the device is dead.
/// `timeout_ms`: the send's response timeout (0: no response awaited).
///
/// A success waits for its response unless the device is dead; only a flush on a live device
/// may be reposted (when recovery marked the slot). A send that awaited a response and whose
/// CQE is a success on a dead device finishes as [`Finish::Flushed`]: its response will never
/// come.
#[inline]
pub(crate) fn send_cqe(
    state: &SlotState,
    generation: u32,
    status: WcStatus,
    fatal: bool,
    timeout_ms: u32,
) -> CqeOutcome {
    let ok = status == WcStatus::Success;
    let allow_retry = status == WcStatus::WrFlushErr && !fatal;
    match state.send_cqe(generation, ok, timeout_ms > 0 && !fatal, allow_retry) {
        CqeOutcome::Done(Finish::Sent) if fatal && timeout_ms > 0 => {
            CqeOutcome::Done(Finish::Flushed)
        }
        out => out,
    }
}

/// [`send_cqe`] for a slot that keeps the send's response timeout in `timeout`, which a modify
/// may change at any moment ([`modify`]). `read_ms` is the value the caller read from it
/// before: it decides whether the send waits (a modify never makes a timeout 0, and a send
/// read at 0 must be completed under the lock its modify takes, where this value is final).
/// Returns the outcome and, for [`CqeOutcome::Wait`], the timeout to wait, read again after
/// the transition: a modify ordered before the transition in the state word stored its value
/// before, and the transition's acquire makes it seen here; a modify ordered after it finds
/// the send waiting and sets the wait's deadline itself.
#[inline]
pub(crate) fn send_cqe_timed(
    state: &SlotState,
    generation: u32,
    status: WcStatus,
    fatal: bool,
    read_ms: u32,
    timeout: &AtomicU32,
) -> (CqeOutcome, u32) {
    match send_cqe(state, generation, status, fatal, read_ms) {
        CqeOutcome::Wait => (CqeOutcome::Wait, timeout.load(Ordering::Acquire)),
        out => (out, read_ms),
    }
}

/// A modify of generation `generation`'s response timeout to `timeout_ms` (non-zero; any
/// thread, holding the lock on the slot's send, so that the slot is not recycled meanwhile):
/// the new value goes into `timeout`, then the state is read in the word's order
/// ([`SlotState::load_ordered`]). Returns that state: SEND_START, EARLY_RESP or QUEUED, a
/// later CQE transition waits the new timeout ([`send_cqe_timed`]); WAIT_RESP, the wait has
/// begun and the caller sets its new deadline; anything else, the send is not outstanding.
/// `None`: the slot holds another generation.
#[inline]
pub(crate) fn modify(
    state: &SlotState,
    generation: u32,
    timeout: &AtomicU32,
    timeout_ms: u32,
) -> Option<SendState> {
    timeout.store(timeout_ms, Ordering::Release);
    let w = state.load_ordered();
    (w.generation() == generation).then(|| w.state())
}

/// What the progress loop does with a response matched to its send.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Response {
    /// Deliver it; then, if `Some`, report the send's completion (the send was waiting), or
    /// leave the send to complete at its CQE (EARLY_RESP).
    Deliver(Option<Finish>),
    /// Drop it, counted under this reason.
    Drop(DropReason),
}

/// A response whose TID, class and address matched generation `generation` of the slot.
#[inline]
pub(crate) fn response(state: &SlotState, generation: u32) -> Response {
    match state.response(generation) {
        RespOutcome::Done => Response::Deliver(Some(Finish::Responded)),
        RespOutcome::Early => Response::Deliver(None),
        RespOutcome::Canceled => Response::Drop(DropReason::Canceled),
        RespOutcome::Duplicate => Response::Drop(DropReason::Duplicate),
        RespOutcome::Stale => Response::Drop(DropReason::Late),
    }
}

/// The response timer of generation `generation` expired. `retry_left`: the send has a retry
/// left. `queue_behind`: asked only when a retry is left, whether the retry must wait behind
/// its agent's flow-control backlog (a solicited send, and the backlog is not empty).
#[inline]
pub(crate) fn timer(
    state: &SlotState,
    generation: u32,
    retry_left: bool,
    queue_behind: impl FnOnce() -> bool,
) -> TimeoutOutcome {
    let action = if !retry_left {
        TimeoutAction::Expire
    } else if queue_behind() {
        TimeoutAction::Queue
    } else {
        TimeoutAction::Retry
    };
    state.timeout(generation, action)
}

/// Cancel generation `generation` (any thread: [`Agent::cancel`], deregistration). A send
/// canceled while none of its work requests is on the QP has no CQE to complete it: `to_reap`
/// is called to hand it to the progress loop's reap list ([`reap`]).
///
/// [`Agent::cancel`]: crate::Agent::cancel
#[inline]
pub(crate) fn cancel(state: &SlotState, generation: u32, to_reap: impl FnOnce()) -> CancelOutcome {
    let out = state.cancel(generation);
    if out == (CancelOutcome::Canceled { on_qp: false }) {
        to_reap();
    }
    out
}

/// The progress loop takes generation `generation` off its reap list: the completion to report,
/// if the send is still canceled and off the QP (it may have completed meanwhile: at its timer,
/// or in a dead device's flush).
#[inline]
pub(crate) fn reap(state: &SlotState, generation: u32) -> Option<Finish> {
    state.reap(generation).then_some(Finish::Canceled)
}

#[cfg(all(test, loom))]
mod loom_tests;

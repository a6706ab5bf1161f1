//! The state word of one send slot and its transitions: the kernel's 2025 send state machine
//! (`mad_priv.h` `enum ib_mad_state`; reference/mad-stack.md §1.2) as one atomic word moved by
//! compare-and-swap, so that completion, response, timeout, cancel and deregistration may race
//! and still make exactly one transition into DONE per use of the slot.
//!
//! Word layout:
//!
//! | bits | field |
//! |---|---|
//! | 0–3 | state ([`SendState`]) |
//! | 4 | `ON_QP`: a work request of this slot is posted and its completion (from the device, or made in software) is still to come |
//! | 5 | `RETRY`: repost once if that completion is a flush (set after an SQE -> RTS recovery, §1.6) |
//! | 32–63 | generation: bumped each time the slot is recycled, so an event meant for an earlier use of the slot cannot touch the current one |
//!
//! Who moves what:
//! - the thread that took the slot from the free list: FREE -> SEND_START (`install`);
//! - any thread: SEND_START / EARLY_RESP / WAIT_RESP / QUEUED -> CANCELED (`cancel`);
//! - the port's progress loop (one thread at a time): everything else, and in particular every
//!   transition into DONE and DONE -> FREE (`recycle`).
//!
//! DONE is reached only when no work request of the slot is on the QP (`ON_QP` clear, or the
//! completion being handled is that work request's own), so at DONE the device no longer
//! reads the slot's send buffer, and the slot's next send may rewrite it (DESIGN §4.3). Each
//! function returns what it did; a function that moved the slot into DONE says so, and the
//! caller that got that answer is the one that reports the send's single completion.

use crate::sync::{AtomicU64, Ordering};

const STATE_MASK: u64 = 0x0F;
const ON_QP: u64 = 1 << 4;
const RETRY: u64 = 1 << 5;
const GEN_SHIFT: u32 = 32;

/// Where a send is in its life (the kernel's `ib_mad_state`, without INIT, plus FREE for an
/// unused slot).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SendState {
    /// The slot holds no send.
    Free,
    /// The work request is on the QP; its completion has not been seen.
    SendStart,
    /// The send completed; a response or the timeout is awaited.
    WaitResp,
    /// The response arrived before the send's completion; the send completes at its CQE.
    EarlyResp,
    /// Canceled; reports WR_FLUSH_ERR when its CQE arrives (if on the QP) or from the
    /// progress loop (if not).
    Canceled,
    /// Held back by solicited-MAD flow control before a retry (§1.9); not on the QP.
    Queued,
    /// Finished: its one completion is being reported; the slot is recycled right after.
    Done,
}

impl SendState {
    /// Every state, in encoding order.
    pub const ALL: [SendState; 7] = [
        SendState::Free,
        SendState::SendStart,
        SendState::WaitResp,
        SendState::EarlyResp,
        SendState::Canceled,
        SendState::Queued,
        SendState::Done,
    ];

    fn code(self) -> u64 {
        self as u64
    }

    fn from_code(code: u64) -> SendState {
        // The word is only ever written by this module with a valid code.
        SendState::ALL
            .get(code as usize)
            .copied()
            .unwrap_or(SendState::Done)
    }
}

/// A snapshot of a slot's state word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Word(u64);

impl Word {
    fn new(state: SendState, on_qp: bool, retry: bool, generation: u32) -> Word {
        let mut w = state.code() | (u64::from(generation) << GEN_SHIFT);
        if on_qp {
            w |= ON_QP;
        }
        if retry {
            w |= RETRY;
        }
        Word(w)
    }

    /// The state.
    pub fn state(self) -> SendState {
        SendState::from_code(self.0 & STATE_MASK)
    }

    /// The generation (which use of the slot this is).
    pub fn generation(self) -> u32 {
        (self.0 >> GEN_SHIFT) as u32
    }

    /// Whether a work request of the slot is posted and its completion is still to come.
    pub fn on_qp(self) -> bool {
        self.0 & ON_QP != 0
    }

    /// Whether a flush of that work request is to be reposted once.
    pub fn retry(self) -> bool {
        self.0 & RETRY != 0
    }

    /// Whether the slot holds a send that has not finished.
    pub fn is_active(self) -> bool {
        !matches!(self.state(), SendState::Free | SendState::Done)
    }

    fn with_state(self, state: SendState) -> Word {
        Word((self.0 & !STATE_MASK) | state.code())
    }

    fn with_on_qp(self, on: bool) -> Word {
        Word(if on { self.0 | ON_QP } else { self.0 & !ON_QP })
    }

    fn with_retry(self, on: bool) -> Word {
        Word(if on { self.0 | RETRY } else { self.0 & !RETRY })
    }
}

/// How a send finished, as far as the state machine knows; the caller turns it into a status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Finish {
    /// Its CQE was a success and no response was awaited (or the response came first).
    Sent,
    /// Its CQE was a success after its response had already arrived (EARLY_RESP).
    Answered,
    /// Its CQE carried an error (the caller reports the CQE's status).
    Failed,
    /// It was canceled (the caller reports WR_FLUSH_ERR).
    Canceled,
    /// The response arrived while it waited (WAIT_RESP or QUEUED).
    Responded,
    /// Its response timeout expired with no retry left (RESP_TIMEOUT_ERR).
    TimedOut,
    /// The device died while it was not on the QP (WR_FLUSH_ERR, vendor_err 5).
    Flushed,
}

/// What a send CQE did to the slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CqeOutcome {
    /// The send is now waiting for its response (WAIT_RESP): arm its timer.
    Wait,
    /// The slot is DONE: report this completion.
    Done(Finish),
    /// A flush of a work request marked for retry: the mark is cleared and the slot stays on
    /// the QP; the caller reposts it (and, if that fails, calls [`SlotState::send_cqe`] again
    /// with `allow_retry` false).
    Repost,
    /// The CQE does not belong to the current use of the slot (wrong generation, or nothing of
    /// the slot is on the QP): a device-written value not to be trusted. Nothing changed.
    Unexpected,
}

/// What a matched response did to the slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RespOutcome {
    /// The slot is DONE (it was waiting): deliver the response, then report the completion.
    Done,
    /// The send's CQE has not been seen yet: deliver the response; the send completes at its
    /// CQE (EARLY_RESP).
    Early,
    /// The send was canceled: drop the response.
    Canceled,
    /// A response was already matched (EARLY_RESP): drop this one.
    Duplicate,
    /// The slot has moved on (another generation, or nothing outstanding): drop it.
    Stale,
}

/// What the progress loop wants done with a send whose timer expired.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimeoutAction {
    /// Retries are left: repost now (WAIT_RESP -> SEND_START).
    Retry,
    /// Retries are left but the agent's flow-control backlog is not empty: queue behind it
    /// (WAIT_RESP -> QUEUED, as the kernel's `retry_send` since 2025).
    Queue,
    /// No retry left: the send times out (WAIT_RESP -> DONE).
    Expire,
}

/// What a timer expiry did to the slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimeoutOutcome {
    /// Now SEND_START and on the QP: post the work request again.
    Reposted,
    /// Now QUEUED: put it at the back of its agent's backlog.
    Queued,
    /// The slot is DONE: report this completion.
    Done(Finish),
    /// The timer belonged to another state or generation: nothing changed.
    Stale,
}

/// What a cancel did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CancelOutcome {
    /// Now CANCELED. When `on_qp`, the send completes at its CQE; otherwise the progress loop
    /// must be told (its reap list) to complete it.
    Canceled {
        /// Whether a work request of the send is still on the QP.
        on_qp: bool,
    },
    /// Already canceled.
    AlreadyCanceled,
    /// The slot holds no unfinished send of that generation.
    NotActive,
}

/// The state word of one send slot.
#[derive(Debug)]
pub struct SlotState {
    word: AtomicU64,
}

impl Default for SlotState {
    fn default() -> Self {
        SlotState::new()
    }
}

impl SlotState {
    /// A free slot at generation 0.
    pub fn new() -> SlotState {
        SlotState {
            word: AtomicU64::new(Word::new(SendState::Free, false, false, 0).0),
        }
    }

    /// The current word.
    pub fn load(&self) -> Word {
        Word(self.word.load(Ordering::Acquire))
    }

    /// The current word, read by a read-modify-write that changes nothing, so that the read
    /// has its place in the word's order among the transitions (a plain load may return an
    /// older word). A transition ordered before it is seen; one ordered after it sees what
    /// the caller stored before it (release, then the transition's acquire). A modify relies
    /// on this against a send's CQE transition (`slot_events::modify`).
    pub fn load_ordered(&self) -> Word {
        Word(self.word.fetch_add(0, Ordering::AcqRel))
    }

    /// Apply `f` to the word of generation `generation` until the CAS succeeds or `f` declines
    /// (returns `Err`). Returns the word before and after, or `f`'s refusal.
    fn update<T>(
        &self,
        generation: u32,
        mut f: impl FnMut(Word) -> Result<(Word, T), T>,
        stale: T,
    ) -> T {
        let mut cur = self.load();
        loop {
            if cur.generation() != generation {
                return stale;
            }
            let (next, out) = match f(cur) {
                Ok(v) => v,
                Err(refused) => return refused,
            };
            match self.word.compare_exchange_weak(
                cur.0,
                next.0,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return out,
                Err(actual) => cur = Word(actual),
            }
        }
    }

    /// FREE -> SEND_START with the work request on the QP. Only the thread that took the slot
    /// from the free list calls this, before posting; false if the slot was not free at that
    /// generation (a bug in the free list).
    pub fn install(&self, generation: u32) -> bool {
        self.update(
            generation,
            |w| {
                if w.state() == SendState::Free {
                    Ok((
                        Word::new(SendState::SendStart, true, false, generation),
                        true,
                    ))
                } else {
                    Err(false)
                }
            },
            false,
        )
    }

    /// A send completion for the work request of generation `generation`.
    ///
    /// `ok`: the CQE's status was success. `expect_response`: a success makes the send wait
    /// for a response (it has a timeout and the device is not dead). `allow_retry`: the CQE is a
    /// flush that may be reposted if the slot is marked RETRY.
    pub fn send_cqe(
        &self,
        generation: u32,
        ok: bool,
        expect_response: bool,
        allow_retry: bool,
    ) -> CqeOutcome {
        self.update(
            generation,
            |w| {
                if !w.on_qp() {
                    return Err(CqeOutcome::Unexpected);
                }
                let state = w.state();
                if !ok
                    && allow_retry
                    && w.retry()
                    && matches!(state, SendState::SendStart | SendState::EarlyResp)
                {
                    return Ok((w.with_retry(false), CqeOutcome::Repost));
                }
                let done = |f: Finish| {
                    Ok((
                        w.with_state(SendState::Done)
                            .with_on_qp(false)
                            .with_retry(false),
                        CqeOutcome::Done(f),
                    ))
                };
                match state {
                    SendState::Canceled => done(Finish::Canceled),
                    SendState::SendStart if ok && expect_response => Ok((
                        w.with_state(SendState::WaitResp)
                            .with_on_qp(false)
                            .with_retry(false),
                        CqeOutcome::Wait,
                    )),
                    SendState::SendStart if ok => done(Finish::Sent),
                    SendState::EarlyResp if ok => done(Finish::Answered),
                    SendState::SendStart | SendState::EarlyResp => done(Finish::Failed),
                    _ => Err(CqeOutcome::Unexpected),
                }
            },
            CqeOutcome::Unexpected,
        )
    }

    /// A response matched (TID, class and address checked by the caller) to generation
    /// `generation`.
    pub fn response(&self, generation: u32) -> RespOutcome {
        self.update(
            generation,
            |w| match w.state() {
                SendState::WaitResp | SendState::Queued => Ok((
                    w.with_state(SendState::Done).with_retry(false),
                    RespOutcome::Done,
                )),
                SendState::SendStart => {
                    Ok((w.with_state(SendState::EarlyResp), RespOutcome::Early))
                }
                SendState::Canceled => Err(RespOutcome::Canceled),
                SendState::EarlyResp => Err(RespOutcome::Duplicate),
                SendState::Free | SendState::Done => Err(RespOutcome::Stale),
            },
            RespOutcome::Stale,
        )
    }

    /// The response timer of generation `generation` expired.
    pub fn timeout(&self, generation: u32, action: TimeoutAction) -> TimeoutOutcome {
        self.update(
            generation,
            |w| match w.state() {
                SendState::WaitResp => Ok(match action {
                    TimeoutAction::Retry => (
                        w.with_state(SendState::SendStart).with_on_qp(true),
                        TimeoutOutcome::Reposted,
                    ),
                    TimeoutAction::Queue => {
                        (w.with_state(SendState::Queued), TimeoutOutcome::Queued)
                    }
                    TimeoutAction::Expire => (
                        w.with_state(SendState::Done),
                        TimeoutOutcome::Done(Finish::TimedOut),
                    ),
                }),
                SendState::Canceled if !w.on_qp() => Ok((
                    w.with_state(SendState::Done).with_retry(false),
                    TimeoutOutcome::Done(Finish::Canceled),
                )),
                _ => Err(TimeoutOutcome::Stale),
            },
            TimeoutOutcome::Stale,
        )
    }

    /// Cancel generation `generation` (any thread).
    pub fn cancel(&self, generation: u32) -> CancelOutcome {
        self.update(
            generation,
            |w| match w.state() {
                SendState::SendStart
                | SendState::EarlyResp
                | SendState::WaitResp
                | SendState::Queued => Ok((
                    w.with_state(SendState::Canceled),
                    CancelOutcome::Canceled { on_qp: w.on_qp() },
                )),
                SendState::Canceled => Err(CancelOutcome::AlreadyCanceled),
                SendState::Free | SendState::Done => Err(CancelOutcome::NotActive),
            },
            CancelOutcome::NotActive,
        )
    }

    /// Complete a canceled send that is not on the QP (CANCELED -> DONE); false if it is not in
    /// that state (already completed, or still on the QP and completing at its CQE).
    pub fn reap(&self, generation: u32) -> bool {
        self.update(
            generation,
            |w| {
                if w.state() == SendState::Canceled && !w.on_qp() {
                    Ok((w.with_state(SendState::Done).with_retry(false), true))
                } else {
                    Err(false)
                }
            },
            false,
        )
    }

    /// A QUEUED retry leaves the flow-control backlog: QUEUED -> SEND_START, on the QP. False
    /// if it was canceled or answered meanwhile.
    pub fn unqueue(&self, generation: u32) -> bool {
        self.update(
            generation,
            |w| {
                if w.state() == SendState::Queued {
                    Ok((w.with_state(SendState::SendStart).with_on_qp(true), true))
                } else {
                    Err(false)
                }
            },
            false,
        )
    }

    /// The device is dead: a send that is not on the QP (WAIT_RESP, QUEUED, or CANCELED off the
    /// QP) finishes now. Sends on the QP finish at their (software) flush CQE.
    pub fn flush_idle(&self, generation: u32) -> Option<Finish> {
        self.update(
            generation,
            |w| {
                let finish = match w.state() {
                    _ if w.on_qp() => return Err(None),
                    SendState::WaitResp | SendState::Queued => Finish::Flushed,
                    SendState::Canceled => Finish::Canceled,
                    _ => return Err(None),
                };
                Ok((
                    w.with_state(SendState::Done).with_retry(false),
                    Some(finish),
                ))
            },
            None,
        )
    }

    /// After the QP was brought back from SQE to RTS, the hardware flushes whatever was on it:
    /// mark the work request of generation `generation`, if it is on the QP, for one repost.
    pub fn mark_retry(&self, generation: u32) -> bool {
        self.update(
            generation,
            |w| {
                if w.on_qp() {
                    Ok((w.with_retry(true), true))
                } else {
                    Err(false)
                }
            },
            false,
        )
    }

    /// DONE -> FREE at the next generation. Only the caller that got the DONE answer calls
    /// this, after reporting the completion (the slot's send buffer may then be rewritten by
    /// its next send). Returns the new generation, or `None` if the slot was not DONE at
    /// `generation`.
    pub fn recycle(&self, generation: u32) -> Option<u32> {
        let next = generation.wrapping_add(1);
        self.update(
            generation,
            |w| {
                if w.state() == SendState::Done {
                    Ok((Word::new(SendState::Free, false, false, next), Some(next)))
                } else {
                    Err(None)
                }
            },
            None,
        )
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn installed() -> SlotState {
        let s = SlotState::new();
        assert!(s.install(0));
        s
    }

    fn state(s: &SlotState) -> (SendState, bool, bool) {
        let w = s.load();
        (w.state(), w.on_qp(), w.retry())
    }

    #[test]
    fn install_only_from_free_at_its_generation() {
        let s = SlotState::new();
        assert!(!s.install(1), "wrong generation");
        assert!(s.install(0));
        assert!(!s.install(0), "already installed");
        assert_eq!(state(&s), (SendState::SendStart, true, false));
    }

    /// Table of the 2025 machine for a send CQE (reference/mad-stack.md §1.2 step 5): state
    /// before, CQE ok?, response expected?, outcome, state after.
    #[test]
    fn send_cqe_table() {
        use CqeOutcome as C;
        use SendState as S;
        type Case = (fn(&SlotState), bool, bool, CqeOutcome, SendState);
        let cases: &[Case] = &[
            (|_| {}, true, true, C::Wait, S::WaitResp),
            (|_| {}, true, false, C::Done(Finish::Sent), S::Done),
            (|_| {}, false, true, C::Done(Finish::Failed), S::Done),
            (
                |s| assert_eq!(s.response(0), RespOutcome::Early),
                true,
                true,
                C::Done(Finish::Answered),
                S::Done,
            ),
            (
                |s| assert_eq!(s.response(0), RespOutcome::Early),
                false,
                true,
                C::Done(Finish::Failed),
                S::Done,
            ),
            (
                |s| {
                    assert!(matches!(
                        s.cancel(0),
                        CancelOutcome::Canceled { on_qp: true }
                    ));
                },
                true,
                true,
                C::Done(Finish::Canceled),
                S::Done,
            ),
            (
                |s| {
                    assert!(matches!(
                        s.cancel(0),
                        CancelOutcome::Canceled { on_qp: true }
                    ));
                },
                false,
                false,
                C::Done(Finish::Canceled),
                S::Done,
            ),
        ];
        for (i, (prep, ok, expect, outcome, after)) in cases.iter().enumerate() {
            let s = installed();
            prep(&s);
            assert_eq!(s.send_cqe(0, *ok, *expect, false), *outcome, "case {i}");
            assert_eq!(s.load().state(), *after, "case {i}");
            assert!(!s.load().on_qp(), "case {i}: off the QP after its CQE");
        }
    }

    #[test]
    fn cqe_for_another_generation_or_off_the_qp_is_unexpected() {
        let s = installed();
        assert_eq!(s.send_cqe(1, true, false, false), CqeOutcome::Unexpected);
        assert_eq!(s.send_cqe(0, true, true, false), CqeOutcome::Wait);
        assert_eq!(
            s.send_cqe(0, true, true, false),
            CqeOutcome::Unexpected,
            "a second CQE for a WR no longer on the QP"
        );
        assert_eq!(s.load().state(), SendState::WaitResp);
    }

    #[test]
    fn flush_of_a_marked_wr_reposts_once() {
        let s = installed();
        assert!(s.mark_retry(0));
        assert_eq!(state(&s), (SendState::SendStart, true, true));
        assert_eq!(s.send_cqe(0, false, true, true), CqeOutcome::Repost);
        assert_eq!(state(&s), (SendState::SendStart, true, false));
        assert_eq!(
            s.send_cqe(0, false, true, true),
            CqeOutcome::Done(Finish::Failed),
            "the second flush is reported"
        );
    }

    #[test]
    fn flush_of_a_marked_but_canceled_wr_is_reported_not_reposted() {
        let s = installed();
        assert!(s.mark_retry(0));
        assert!(matches!(
            s.cancel(0),
            CancelOutcome::Canceled { on_qp: true }
        ));
        assert_eq!(
            s.send_cqe(0, false, true, true),
            CqeOutcome::Done(Finish::Canceled)
        );
    }

    #[test]
    fn mark_retry_needs_a_wr_on_the_qp() {
        let s = installed();
        assert_eq!(s.send_cqe(0, true, true, false), CqeOutcome::Wait);
        assert!(!s.mark_retry(0));
        assert!(!s.load().retry());
    }

    #[test]
    fn response_table() {
        let s = installed();
        assert_eq!(s.send_cqe(0, true, true, false), CqeOutcome::Wait);
        assert_eq!(s.response(0), RespOutcome::Done);
        assert_eq!(s.response(0), RespOutcome::Stale, "DONE: nothing to match");

        let s = installed();
        assert_eq!(s.response(0), RespOutcome::Early);
        assert_eq!(s.response(0), RespOutcome::Duplicate);

        let s = installed();
        assert!(matches!(s.cancel(0), CancelOutcome::Canceled { .. }));
        assert_eq!(s.response(0), RespOutcome::Canceled);

        let s = installed();
        assert_eq!(s.response(1), RespOutcome::Stale, "another generation");
        assert_eq!(SlotState::new().response(0), RespOutcome::Stale, "free");
    }

    #[test]
    fn timeout_paths() {
        for (action, outcome, after) in [
            (
                TimeoutAction::Retry,
                TimeoutOutcome::Reposted,
                (SendState::SendStart, true, false),
            ),
            (
                TimeoutAction::Queue,
                TimeoutOutcome::Queued,
                (SendState::Queued, false, false),
            ),
            (
                TimeoutAction::Expire,
                TimeoutOutcome::Done(Finish::TimedOut),
                (SendState::Done, false, false),
            ),
        ] {
            let s = installed();
            assert_eq!(s.send_cqe(0, true, true, false), CqeOutcome::Wait);
            assert_eq!(s.timeout(0, action), outcome);
            assert_eq!(state(&s), after);
        }
        // A timer that fires while the send is back on the QP (a retry in flight) is stale.
        let s = installed();
        assert_eq!(s.timeout(0, TimeoutAction::Expire), TimeoutOutcome::Stale);
    }

    #[test]
    fn queued_retry_can_be_answered_canceled_or_reposted() {
        let queued = || {
            let s = installed();
            assert_eq!(s.send_cqe(0, true, true, false), CqeOutcome::Wait);
            assert_eq!(s.timeout(0, TimeoutAction::Queue), TimeoutOutcome::Queued);
            s
        };
        let s = queued();
        assert_eq!(s.response(0), RespOutcome::Done);
        assert!(!s.unqueue(0));

        let s = queued();
        assert_eq!(s.cancel(0), CancelOutcome::Canceled { on_qp: false });
        assert!(!s.unqueue(0));
        assert!(s.reap(0));

        let s = queued();
        assert!(s.unqueue(0));
        assert_eq!(state(&s), (SendState::SendStart, true, false));
    }

    #[test]
    fn cancel_table() {
        let s = installed();
        assert_eq!(s.cancel(0), CancelOutcome::Canceled { on_qp: true });
        assert_eq!(s.cancel(0), CancelOutcome::AlreadyCanceled);
        assert!(
            !s.reap(0),
            "on the QP: completes at its CQE, not by reaping"
        );

        let s = installed();
        assert_eq!(s.send_cqe(0, true, true, false), CqeOutcome::Wait);
        assert_eq!(s.cancel(0), CancelOutcome::Canceled { on_qp: false });
        assert!(s.reap(0));
        assert!(!s.reap(0));
        assert_eq!(s.cancel(0), CancelOutcome::NotActive);

        assert_eq!(SlotState::new().cancel(0), CancelOutcome::NotActive);
    }

    #[test]
    fn a_canceled_send_on_the_qp_finishes_only_at_its_cqe() {
        let s = installed();
        assert_eq!(s.cancel(0), CancelOutcome::Canceled { on_qp: true });
        assert_eq!(s.timeout(0, TimeoutAction::Expire), TimeoutOutcome::Stale);
        assert!(!s.reap(0));
        assert_eq!(s.flush_idle(0), None);
        assert_eq!(s.response(0), RespOutcome::Canceled);
        assert_eq!(state(&s), (SendState::Canceled, true, false));
        assert_eq!(
            s.send_cqe(0, true, true, false),
            CqeOutcome::Done(Finish::Canceled)
        );
    }

    #[test]
    fn flush_idle_only_touches_sends_off_the_qp() {
        let s = installed();
        assert_eq!(s.flush_idle(0), None, "on the QP: waits for its flush CQE");
        assert_eq!(s.send_cqe(0, true, true, false), CqeOutcome::Wait);
        assert_eq!(s.flush_idle(0), Some(Finish::Flushed));
        assert_eq!(s.load().state(), SendState::Done);

        let s = installed();
        assert_eq!(s.send_cqe(0, true, true, false), CqeOutcome::Wait);
        assert!(matches!(s.cancel(0), CancelOutcome::Canceled { .. }));
        assert_eq!(s.flush_idle(0), Some(Finish::Canceled));
    }

    #[test]
    fn recycle_bumps_the_generation_and_fences_off_the_old_one() {
        let s = installed();
        assert_eq!(s.recycle(0), None, "not DONE");
        assert_eq!(
            s.send_cqe(0, true, false, false),
            CqeOutcome::Done(Finish::Sent)
        );
        assert_eq!(s.recycle(0), Some(1));
        assert_eq!(s.load().state(), SendState::Free);
        assert!(s.install(1));
        assert_eq!(s.cancel(0), CancelOutcome::NotActive, "old generation");
        assert_eq!(s.response(0), RespOutcome::Stale);
        assert_eq!(s.send_cqe(0, true, false, false), CqeOutcome::Unexpected);
        assert_eq!(s.load().state(), SendState::SendStart);
    }

    #[test]
    fn generation_wraps() {
        let s = SlotState {
            word: AtomicU64::new(Word::new(SendState::Done, false, false, u32::MAX).0),
        };
        assert_eq!(s.recycle(u32::MAX), Some(0));
        assert!(s.install(0));
    }
}

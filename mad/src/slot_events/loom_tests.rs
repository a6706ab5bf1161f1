//! Model checks of a send slot's events under every interleaving loom can find: completion,
//! response, timer and reaping on the progress thread racing cancel and deregistration on
//! others, and a modify racing the CQE. Each event goes through the port's own decision
//! ([`super::send_cqe`], [`super::send_cqe_timed`], [`super::response`], [`super::timer`],
//! [`super::cancel`], [`super::modify`], [`super::reap`]); the models only record what the port
//! would report.
//! Run with `RUSTFLAGS="--cfg loom" cargo test -p mad --release --lib loom`.

use super::{Response, cancel, modify, reap, response, send_cqe, send_cqe_timed, timer};
use crate::slot_state::{CancelOutcome, CqeOutcome, Finish, SendState, SlotState, TimeoutOutcome};
use driver::verbs::WcStatus;
use loom::sync::atomic::{AtomicU32, Ordering};
use loom::sync::{Arc, Mutex};
use loom::thread;

/// A response timeout: the send awaits a response.
const AWAIT: u32 = 100;

/// The progress loop's side of one slot (generation 0): each event is decided by the port's
/// own functions; every completion they say to report is recorded.
struct Progress {
    slot: Arc<SlotState>,
    reap: Arc<Mutex<Vec<u32>>>,
    done: Vec<Finish>,
}

impl Progress {
    fn new(slot: Arc<SlotState>, reap: Arc<Mutex<Vec<u32>>>) -> Self {
        Progress {
            slot,
            reap,
            done: Vec::new(),
        }
    }

    /// The CQE (of `status`) of a work request that is on the QP: it must find it (a slot
    /// finished before its CQE would be reused, and its send buffer rewritten, while the
    /// device may still read it). `timeout_ms` 0: no response awaited.
    fn cqe(&mut self, status: WcStatus, timeout_ms: u32) -> CqeOutcome {
        let out = send_cqe(&self.slot, 0, status, false, timeout_ms);
        assert_ne!(
            out,
            CqeOutcome::Unexpected,
            "finished while on the QP: {:?}",
            self.done
        );
        match out {
            CqeOutcome::Done(f) => self.done.push(f),
            CqeOutcome::Repost => {
                // The repost is skipped or refused in this model: its software completion, a
                // flush, comes back.
                if let CqeOutcome::Done(f) =
                    send_cqe(&self.slot, 0, WcStatus::WrFlushErr, false, timeout_ms)
                {
                    self.done.push(f);
                }
            }
            _ => {}
        }
        out
    }

    fn response(&mut self) -> Response {
        let out = response(&self.slot, 0);
        if let Response::Deliver(Some(f)) = out {
            self.done.push(f);
        }
        out
    }

    fn timer(&mut self, retry_left: bool) -> TimeoutOutcome {
        let out = timer(&self.slot, 0, retry_left, || false);
        if let TimeoutOutcome::Done(f) = out {
            self.done.push(f);
        }
        out
    }

    fn reap_all(&mut self) {
        let list: Vec<u32> = std::mem::take(&mut *self.reap.lock().unwrap());
        for generation in list {
            if let Some(f) = reap(&self.slot, generation) {
                self.done.push(f);
            }
        }
    }
}

/// What cancel and deregistration do from their own threads.
fn cancel_from(slot: &SlotState, reap: &Mutex<Vec<u32>>) -> CancelOutcome {
    cancel(slot, 0, || reap.lock().unwrap().push(0))
}

fn canceled(outs: &[CancelOutcome]) -> bool {
    outs.iter()
        .any(|o| matches!(o, CancelOutcome::Canceled { .. }))
}

fn spawn_cancel(
    slot: &Arc<SlotState>,
    reap: &Arc<Mutex<Vec<u32>>>,
) -> thread::JoinHandle<CancelOutcome> {
    let (slot, reap) = (slot.clone(), reap.clone());
    thread::spawn(move || cancel_from(&slot, &reap))
}

/// CQE and response (progress) race a cancel and a deregistration's cancel.
#[test]
fn loom_cqe_response_vs_cancel_and_deregister() {
    loom::model(|| {
        let slot = Arc::new(SlotState::new());
        assert!(slot.install(0));
        let reap = Arc::new(Mutex::new(Vec::new()));
        let c = spawn_cancel(&slot, &reap);
        let d = spawn_cancel(&slot, &reap);
        let mut p = Progress::new(slot.clone(), reap.clone());
        p.cqe(WcStatus::Success, AWAIT);
        p.response();
        p.reap_all();
        let outs = [c.join().unwrap(), d.join().unwrap()];
        // The loop keeps running after the cancels: whatever was left is completed.
        p.reap_all();
        p.timer(false);
        assert_eq!(p.done.len(), 1, "exactly one DONE: {:?} {outs:?}", p.done);
        assert_eq!(slot.load().state(), SendState::Done);
        let n = outs
            .iter()
            .filter(|o| matches!(o, CancelOutcome::Canceled { .. }))
            .count();
        assert!(n <= 1, "only one cancel can win: {outs:?}");
        if canceled(&outs) {
            assert_eq!(p.done[0], Finish::Canceled);
        } else {
            assert_eq!(p.done[0], Finish::Responded);
        }
    });
}

/// An early response (before the CQE) races a cancel; the CQE comes last.
#[test]
fn loom_early_response_vs_cancel() {
    loom::model(|| {
        let slot = Arc::new(SlotState::new());
        assert!(slot.install(0));
        let reap = Arc::new(Mutex::new(Vec::new()));
        let c = spawn_cancel(&slot, &reap);
        let mut p = Progress::new(slot.clone(), reap.clone());
        let r = p.response();
        p.cqe(WcStatus::Success, AWAIT);
        let out = c.join().unwrap();
        p.reap_all();
        assert_eq!(p.done.len(), 1, "{:?} {r:?} {out:?}", p.done);
        match out {
            CancelOutcome::Canceled { on_qp } => {
                assert!(on_qp, "the WR was on the QP until the CQE");
                assert_eq!(p.done[0], Finish::Canceled);
            }
            CancelOutcome::NotActive => assert_eq!(p.done[0], Finish::Answered),
            CancelOutcome::AlreadyCanceled => panic!("nobody else canceled"),
        }
    });
}

/// The timer fires (retry, then expiry) while a cancel races it.
#[test]
fn loom_timeout_retry_vs_cancel() {
    loom::model(|| {
        let slot = Arc::new(SlotState::new());
        assert!(slot.install(0));
        assert_eq!(
            send_cqe(&slot, 0, WcStatus::Success, false, AWAIT),
            CqeOutcome::Wait
        );
        let reap = Arc::new(Mutex::new(Vec::new()));
        let c = spawn_cancel(&slot, &reap);
        let mut p = Progress::new(slot.clone(), reap.clone());
        if p.timer(true) == TimeoutOutcome::Reposted {
            // A stale timer firing while the retry is on the QP changes nothing, canceled
            // or not.
            p.timer(false);
            p.reap_all();
            p.cqe(WcStatus::Success, AWAIT);
            p.timer(false);
        }
        let out = c.join().unwrap();
        p.reap_all();
        // A canceled send still on the QP completes at the CQE of its repost.
        if slot.load().on_qp() {
            p.cqe(WcStatus::Success, AWAIT);
        }
        assert_eq!(p.done.len(), 1, "{:?} {out:?}", p.done);
        if matches!(out, CancelOutcome::Canceled { .. }) {
            assert_eq!(p.done[0], Finish::Canceled);
        } else {
            assert_eq!(p.done[0], Finish::TimedOut);
        }
    });
}

/// Recovery marks the WR for retry while a cancel races; the hardware then flushes it.
#[test]
fn loom_retry_mark_and_flush_vs_cancel() {
    loom::model(|| {
        let slot = Arc::new(SlotState::new());
        assert!(slot.install(0));
        let reap = Arc::new(Mutex::new(Vec::new()));
        let c = spawn_cancel(&slot, &reap);
        let mut p = Progress::new(slot.clone(), reap.clone());
        assert!(slot.mark_retry(0));
        // The flush: reposted unless canceled; the repost's CQE then completes it.
        let first = send_cqe(&slot, 0, WcStatus::WrFlushErr, false, 0);
        match first {
            CqeOutcome::Repost => {
                p.cqe(WcStatus::Success, 0);
            }
            CqeOutcome::Done(f) => p.done.push(f),
            other => panic!("unexpected {other:?}"),
        }
        let out = c.join().unwrap();
        p.reap_all();
        if slot.load().on_qp() {
            p.cqe(WcStatus::Success, 0);
        }
        assert_eq!(p.done.len(), 1, "{:?} {first:?} {out:?}", p.done);
        if matches!(out, CancelOutcome::Canceled { .. }) {
            assert_eq!(p.done[0], Finish::Canceled);
        } else {
            assert_eq!(p.done[0], Finish::Sent);
        }
    });
}

/// A cancel aimed at generation 0 races the slot finishing, being recycled and reused:
/// it may cancel generation 0 or nothing, never generation 1.
#[test]
fn loom_stale_cancel_never_touches_the_next_use() {
    loom::model(|| {
        let slot = Arc::new(SlotState::new());
        assert!(slot.install(0));
        let reap = Arc::new(Mutex::new(Vec::new()));
        let c = spawn_cancel(&slot, &reap);
        let mut p = Progress::new(slot.clone(), reap.clone());
        p.cqe(WcStatus::Success, 0);
        assert_eq!(p.done.len(), 1);
        assert_eq!(slot.recycle(0), Some(1));
        assert!(slot.install(1));
        let out = c.join().unwrap();
        let w = slot.load();
        assert_eq!(w.generation(), 1);
        assert_eq!(w.state(), SendState::SendStart, "{out:?}");
        assert_eq!(
            send_cqe(&slot, 1, WcStatus::Success, false, 0),
            CqeOutcome::Done(Finish::Sent)
        );
    });
}

/// A modify of a waiting send's timeout (another thread) races its CQE, which read the old
/// timeout before its transition. Whichever the state word orders first, the new timeout is
/// not lost: the CQE waits it (the modify came first), or the modify finds the send waiting
/// (and the port sets the wait's new deadline from it).
#[test]
fn loom_modify_vs_cqe_is_never_lost() {
    const NEW: u32 = 7;
    loom::model(|| {
        let slot = Arc::new(SlotState::new());
        assert!(slot.install(0));
        let timeout = Arc::new(AtomicU32::new(AWAIT));
        let m = {
            let (slot, timeout) = (slot.clone(), timeout.clone());
            thread::spawn(move || modify(&slot, 0, &timeout, NEW))
        };
        let read = timeout.load(Ordering::Acquire);
        let (out, waits) = send_cqe_timed(&slot, 0, WcStatus::Success, false, read, &timeout);
        let seen = m.join().unwrap();
        assert_eq!(out, CqeOutcome::Wait);
        match seen {
            Some(SendState::SendStart) => {
                assert_eq!(waits, NEW, "a modify before the CQE transition was lost");
            }
            Some(SendState::WaitResp) => {}
            other => panic!("the send was outstanding: {other:?}"),
        }
    });
}

/// Negative control for [`loom_modify_vs_cqe_is_never_lost`]: with a modify that reads the
/// state by a plain (acquire) load after its store, some execution loses the modify: the load
/// reads SEND_START from before the CQE transition while the CQE's read after the transition
/// misses the store (store buffering). This is why [`modify`] reads the word by a
/// read-modify-write.
#[test]
fn loom_modify_with_a_plain_load_can_be_lost() {
    const NEW: u32 = 7;
    static LOST: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    loom::model(|| {
        let slot = Arc::new(SlotState::new());
        assert!(slot.install(0));
        let timeout = Arc::new(AtomicU32::new(AWAIT));
        let m = {
            let (slot, timeout) = (slot.clone(), timeout.clone());
            thread::spawn(move || {
                timeout.store(NEW, Ordering::Release);
                slot.load().state()
            })
        };
        let read = timeout.load(Ordering::Acquire);
        let (out, waits) = send_cqe_timed(&slot, 0, WcStatus::Success, false, read, &timeout);
        let seen = m.join().unwrap();
        assert_eq!(out, CqeOutcome::Wait);
        if seen == SendState::SendStart && waits != NEW {
            LOST.store(true, std::sync::atomic::Ordering::Relaxed);
        }
    });
    assert!(
        LOST.load(std::sync::atomic::Ordering::Relaxed),
        "loom found no execution that loses the modify"
    );
}

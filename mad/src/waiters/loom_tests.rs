//! Model checks of the wait for the progress token's holder: threads waiting on their event
//! queue ([`TokenWaiters::wait_event`], [`TokenWaiters::wait_on_queue`],
//! [`EventQueue::wait_nonempty_unless`]) or parked ([`TokenWaiters::drive_until`],
//! [`TokenWaiters::park_unless`]), against a holder that lets the token go ([`LetGo`]: the
//! release count, the parked threads' wake-up, the rousal of every listed queue) or pushes an
//! event to a waiter's queue ([`EventQueue::push`]). The waits, the try of the token
//! ([`TokenWaiters::try_take`]) and the order of its parts are the port's own code: the
//! models give them only a [`Driver`] (as `port::PortDriver` is the port's) around a model of the
//! token's lock. A waiter ends its wait when its queue has an event, or when it takes the
//! token (it would then drive the loop itself; the model's pass finds nothing, lets the token
//! go, and its deadline has passed). Waits have no timeout under loom: a waiter that sleeps
//! through the only wake-up waits forever, which loom reports as a deadlock. Models of two
//! threads are explored exhaustively, those of three up to [`PREEMPTIONS`] preemptions per
//! execution.
//! Run with `RUSTFLAGS="--cfg loom" cargo test -p mad --release --lib loom -- --nocapture`
//! (which prints how many executions each model check explored).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool as StdAtomicBool, AtomicUsize as StdAtomicUsize};

use driver::verbs::WcStatus;
use loom::sync::atomic::AtomicBool;
use loom::thread;
use mad_wire::header::HEADER_LEN;

use super::*;
use crate::event::{AgentId, Event, SendCompletion, SendId};
use crate::park::Model;
use crate::park::loom_tests::expect_deadlock_in;

/// The whole protocol (the negative controls take parts of it away).
const FULL: Model = Model {
    recheck: true,
    seq_cst: true,
};

/// No timeout: loom's waits have none anyway.
const FOREVER: Duration = Duration::MAX;

/// A port's progress token and the threads that wait for its holder.
struct World {
    /// The progress token, as the standard library's mutex implements `PortShared::progress`:
    /// `try_lock` a compare-and-swap (acquire on success, relaxed on failure), unlock a
    /// release swap. Not loom's mutex: its unlock is no scheduling point and its `try_lock`
    /// an opaque one, so loom would never run a waiter's try while the holder holds the
    /// token (it explores 7 executions of (a) and finds none of the controls' deadlocks).
    token: AtomicBool,
    waiters: TokenWaiters,
}

/// The token's lock held; unlocks when dropped.
struct Locked<'a>(&'a AtomicBool);

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        self.0.swap(false, Ordering::Release);
    }
}

impl World {
    fn new(model: Model) -> Arc<World> {
        World::with(TokenWaiters::with_model(model))
    }

    fn with(waiters: TokenWaiters) -> Arc<World> {
        Arc::new(World {
            token: AtomicBool::new(false),
            waiters,
        })
    }

    /// The token's lock tried (what `PortShared::try_lock_progress` does to the mutex).
    fn try_lock(&self) -> Option<Locked<'_>> {
        self.token
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .ok()
            .map(|_| Locked(&self.token))
    }

    /// The holder's token, taken before any waiter starts.
    fn hold(&self) -> (Locked<'_>, LetGo<'_>) {
        match self.waiters.try_take(|| self.try_lock()) {
            Ok(held) => held,
            Err(_) => unreachable!("the token is free before any waiter starts"),
        }
    }

    /// Every waiter that returned left the list and the count.
    fn assert_nobody_listed(&self) {
        assert_eq!(
            self.waiters.queue_waits.load(Ordering::SeqCst),
            0,
            "a queue waiter left counted"
        );
        assert!(lock(&self.waiters.queues).is_empty(), "a queue left listed");
    }
}

/// The model's progress loop for one call of a wait (as `port::PortDriver` is the port's):
/// a pass finds nothing to do, and sleeping in the device until the deadline it then passes
/// the deadline, so that a waiter that took the token returns (`took` says it did).
struct ModelDriver<'a> {
    w: &'a World,
    took: bool,
}

impl<'a> ModelDriver<'a> {
    fn new(w: &'a World) -> Self {
        ModelDriver { w, took: false }
    }
}

impl<'a> Driver for ModelDriver<'a> {
    type Guard = Locked<'a>;

    fn try_lock(&self) -> Option<Locked<'a>> {
        self.w.try_lock()
    }

    fn expired(&self) -> bool {
        self.took
    }

    fn run(&mut self, _: &mut Locked<'a>) -> usize {
        self.took = true;
        0
    }
}

/// How a waiter's wait ended.
#[derive(Debug, PartialEq, Eq)]
enum Woke {
    /// Its queue had an event.
    Event,
    /// It took the token.
    Token,
}

/// A caller of `Port::wait_event` ([`TokenWaiters::wait_event`], as `PortShared::wait_event`
/// calls it) that calls again while it gets no event and did not take the token (another
/// thread may have taken the event it saw first).
fn wait_event(w: &World, q: &Arc<EventQueue>) -> Woke {
    loop {
        let mut driver = ModelDriver::new(w);
        if w.waiters.wait_event(&mut driver, q, FOREVER).is_some() {
            return Woke::Event;
        }
        if driver.took {
            return Woke::Token;
        }
    }
}

/// A caller of `PortShared::drive_until` ([`TokenWaiters::drive_until`]) with the parking
/// wait (`Port::progress_until`, deregistration): here with nothing to wait for but the
/// token.
fn wait_parked(w: &World) -> Woke {
    let mut driver = ModelDriver::new(w);
    let done = w
        .waiters
        .drive_until(&mut driver, &mut |_| false, &|ready| {
            w.waiters.park_unless(FOREVER, ready);
        });
    assert!(
        !done && driver.took,
        "the wait ends only when it took the token"
    );
    Woke::Token
}

/// A send completion, the event the holder pushes.
fn completion() -> Event {
    Event::Send(SendCompletion {
        agent: AgentId(1),
        id: SendId(1),
        context: 0,
        status: WcStatus::Success,
        vendor_err: 0,
        retries: 0,
        tid: 0,
        header: [0; HEADER_LEN],
    })
}

/// The preemptions per execution loom explores in the models of three threads (unless
/// `LOOM_MAX_PREEMPTIONS` says otherwise): every interleaving with at most this many
/// switches away from a thread that could go on. Each bound more multiplies the executions
/// by about 7: (c) explores 67,537 at 4 (4 s in a release build), 566,805 at 5 (37 s) and
/// 4,034,007 at 6 (3 min); unbounded, it had not finished after 4 min.
const PREEMPTIONS: usize = 4;

/// Run `f` under loom, every interleaving or (`bounded`) those with at most [`PREEMPTIONS`],
/// and print how many executions loom explored.
fn check(name: &'static str, bounded: bool, f: impl Fn() + Sync + Send + 'static) {
    let runs = Arc::new(StdAtomicUsize::new(0));
    let counted = Arc::clone(&runs);
    builder(bounded).check(move || {
        counted.fetch_add(1, Ordering::Relaxed);
        f();
    });
    eprintln!(
        "{name}: loom explored {} executions",
        runs.load(Ordering::Relaxed)
    );
}

/// Loom's settings from the environment, with [`PREEMPTIONS`] if `bounded` and it sets none.
fn builder(bounded: bool) -> loom::model::Builder {
    let mut b = loom::model::Builder::new();
    if bounded && b.preemption_bound.is_none() {
        b.preemption_bound = Some(PREEMPTIONS);
    }
    b
}

/// (a) A thread waits on its queue while the holder lets the token go without producing its
/// event: it sees the release and takes the token.
fn release_reaches_a_queue_waiter(model: Model, queue: &Arc<EventQueue>) {
    let w = World::new(model);
    let held = w.hold();
    let waiter = {
        let (w, q) = (Arc::clone(&w), Arc::clone(queue));
        thread::spawn(move || wait_event(&w, &q))
    };
    drop(held);
    assert_eq!(waiter.join().unwrap(), Woke::Token);
    w.assert_nobody_listed();
}

#[test]
fn loom_waiters_release_wakes_a_queue_waiter() {
    check("(a) release vs queue waiter", false, || {
        release_reaches_a_queue_waiter(FULL, &EventQueue::shared());
    });
}

/// (b) A thread waits on its queue while the holder, keeping the token, pushes an event to
/// that queue: it sees the event.
#[test]
fn loom_waiters_push_wakes_a_queue_waiter() {
    check("(b) push vs queue waiter", false, || {
        let w = World::new(FULL);
        let q = EventQueue::shared();
        let open = StdAtomicBool::new(false);
        let held = w.hold();
        let waiter = {
            let (w, q) = (Arc::clone(&w), Arc::clone(&q));
            thread::spawn(move || wait_event(&w, &q))
        };
        q.push(completion(), &open).unwrap();
        assert_eq!(waiter.join().unwrap(), Woke::Event);
        drop(held);
        w.assert_nobody_listed();
    });
}

/// (c) One thread parked, one on its queue, one release: both wait ends (each takes the
/// token in turn; the first's letting go wakes the second if it still waits).
#[test]
fn loom_waiters_one_release_wakes_a_parked_and_a_queue_waiter() {
    check("(c) release vs parked + queue waiter", true, || {
        let w = World::new(FULL);
        let held = w.hold();
        let parked = {
            let w = Arc::clone(&w);
            thread::spawn(move || wait_parked(&w))
        };
        let on_queue = {
            let w = Arc::clone(&w);
            thread::spawn(move || wait_event(&w, &EventQueue::shared()))
        };
        drop(held);
        assert_eq!(parked.join().unwrap(), Woke::Token);
        assert_eq!(on_queue.join().unwrap(), Woke::Token);
        w.assert_nobody_listed();
    });
}

/// (d) Two threads on two queues; the holder pushes an event to the first (whose thread
/// leaves, unlisting its queue) and then lets the token go, rousing the list while it
/// changes: the second thread sees the release.
#[test]
fn loom_waiters_release_rouses_the_list_while_a_waiter_leaves() {
    check("(d) push + release vs two queue waiters", true, || {
        let w = World::new(FULL);
        let (q1, q2) = (EventQueue::shared(), EventQueue::shared());
        let open = StdAtomicBool::new(false);
        let held = w.hold();
        let first = {
            let (w, q) = (Arc::clone(&w), Arc::clone(&q1));
            thread::spawn(move || wait_event(&w, &q))
        };
        let second = {
            let (w, q) = (Arc::clone(&w), Arc::clone(&q2));
            thread::spawn(move || wait_event(&w, &q))
        };
        q1.push(completion(), &open).unwrap();
        drop(held);
        // The first may have looked at its queue before the push and found the token free.
        let _either = first.join().unwrap();
        assert_eq!(second.join().unwrap(), Woke::Token);
        w.assert_nobody_listed();
    });
}

/// (d') Two threads on one queue (listed twice); the holder pushes one event and lets the
/// token go: the thread that takes the event leaves, taking its entry off the list and not
/// the other's, which may be waiting again by then and is roused by the release.
#[test]
fn loom_waiters_two_waiters_on_one_queue_both_return() {
    check(
        "(d') push + release vs two waiters on one queue",
        true,
        || {
            two_waiters_on_one_queue(&World::new(FULL));
        },
    );
}

/// (d') with `w`'s waiters.
fn two_waiters_on_one_queue(w: &Arc<World>) {
    let q = EventQueue::shared();
    let open = StdAtomicBool::new(false);
    let held = w.hold();
    let waiters: Vec<_> = (0..2)
        .map(|_| {
            let (w, q) = (Arc::clone(w), Arc::clone(&q));
            thread::spawn(move || wait_event(&w, &q))
        })
        .collect();
    q.push(completion(), &open).unwrap();
    drop(held);
    let taken = waiters
        .into_iter()
        .map(|h| h.join().unwrap())
        .filter(|woke| *woke == Woke::Event)
        .count();
    assert_eq!(
        taken + q.len(),
        1,
        "the one event was taken once, or is left"
    );
    w.assert_nobody_listed();
}

/// Negative control: without the look at the release count after the queue is listed and
/// counted, a thread that found the token taken, and was counted just after the holder
/// found no queue waiter, sleeps through the release. Loom must find that interleaving.
#[test]
fn loom_waiters_queue_wait_without_the_recheck_misses_the_release() {
    expect_deadlock("no-recheck");
}

/// Negative control: the re-check is not enough if the waiter's count and the release count
/// are ordered only by acquire/release (what loom makes of the `SeqCst` accesses without the
/// fences): the holder may read no queue waiter and the waiter no release (store
/// buffering). This is why both sides' accesses are `SeqCst`.
#[test]
fn loom_waiters_queue_wait_without_a_total_order_misses_the_release() {
    expect_deadlock("no-total-order");
}

/// Negative control: a rousal that does not take the queue's lock can fall between the
/// waiter's look at the rousal count (under the lock) and its wait on the condition
/// variable, and wake nobody.
#[test]
fn loom_waiters_rouse_without_the_queue_lock_misses_the_release() {
    expect_deadlock("unlocked-rouse");
}

/// Negative control of (d'): a thread leaving that took every entry of its queue off the
/// list, the other thread's too (listed again just before, after it lost the event to the
/// first), leaves that thread to sleep through the release.
#[test]
fn loom_waiters_unlisting_another_threads_entry_misses_the_release() {
    expect_deadlock("unlist-all");
}

/// Names the negative control [`loom_waiters_control_child`] runs.
const CONTROL_ENV: &str = "MAD_WAITERS_LOOM_CONTROL";

/// A negative control's model check (scenario (a) with a part of the protocol taken away), in
/// a process of its own, as park.rs's are. Does nothing unless [`CONTROL_ENV`] names a
/// control.
#[test]
#[ignore = "run by the negative controls, in a child process"]
fn loom_waiters_control_child() {
    let (model, locked_rouse) = match std::env::var(CONTROL_ENV).as_deref() {
        Ok("no-recheck") => (
            Model {
                recheck: false,
                ..FULL
            },
            true,
        ),
        Ok("no-total-order") => (
            Model {
                seq_cst: false,
                ..FULL
            },
            true,
        ),
        Ok("unlocked-rouse") => (FULL, false),
        Ok("unlist-all") => {
            return builder(true).check(|| {
                two_waiters_on_one_queue(&World::with(TokenWaiters::with_unlisting_all()));
            });
        }
        _ => return,
    };
    loom::model(move || {
        let queue = if locked_rouse {
            EventQueue::shared()
        } else {
            Arc::new(EventQueue::with_unlocked_rouse())
        };
        release_reaches_a_queue_waiter(model, &queue);
    });
}

/// Run the model check of `control` in a child process and require loom's deadlock report.
fn expect_deadlock(control: &str) {
    expect_deadlock_in(
        "waiters::loom_tests::loom_waiters_control_child",
        CONTROL_ENV,
        control,
    );
}

//! The threads that found the progress token taken, and what letting the token go does for
//! them.
//!
//! They are of two kinds. Most park in [`Parking`] until the holder does some work or lets
//! go. A thread in [`crate::Port::wait_event`] waits on its own event queue instead (a queue
//! may be shared with agents of other ports, whose events this port's parking never hears
//! of): it lists its queue here, and letting go of the token rouses every listed queue.
//!
//! Both kinds count themselves before they look again at the release count, and letting go
//! bumps that count before it reads theirs (all sequentially consistent): either the waiter
//! sees the release, or the releaser sees the waiter and wakes it.
//!
//! Under `--cfg loom` the list, counts and queues are loom's (see park.rs for what that
//! changes); the model checks are in `waiters/loom_tests.rs`.

#[cfg(loom)]
use loom::sync::{
    Mutex, MutexGuard,
    atomic::{AtomicU64, AtomicUsize, Ordering},
};
use std::sync::{Arc, PoisonError};
#[cfg(not(loom))]
use std::sync::{
    Mutex, MutexGuard,
    atomic::{AtomicU64, AtomicUsize, Ordering},
};
use std::time::Duration;

use crate::event::{Event, EventQueue};
use crate::park::Parking;

/// Who waits for the progress token's holder, and the count of its releases they look at.
pub(crate) struct TokenWaiters {
    /// Where threads wait for the holder to do something.
    parking: Parking,
    /// Times the progress token was let go: a thread that found the token taken waits
    /// unless this moved since it looked, and is woken when it moves.
    releases: AtomicU64,
    /// Event queues whose threads wait in [`TokenWaiters::wait_on_queue`] (on their queue,
    /// not in `parking`), roused when the token is let go; a queue is listed once per
    /// thread waiting on it.
    queues: Mutex<Vec<Arc<EventQueue>>>,
    /// Threads counted in [`TokenWaiters::wait_on_queue`], so that letting go takes no lock
    /// when there are none.
    queue_waits: AtomicUsize,
    /// Loom only: a leaving thread takes every entry of its queue off the list, not just its
    /// own (a negative control: another thread waiting on the same queue is then not roused).
    #[cfg(loom)]
    unlists_all: bool,
}

/// The progress loop as the waits for its token see it: the try of the token's lock, whether
/// the caller's deadline passed, and a pass of the loop with the token held. The port's is
/// `port::PortDriver`; the loom models implement it around a model of the lock, so that they
/// check these waits, not a copy of them.
pub(crate) trait Driver {
    /// The token's lock, held.
    type Guard;
    /// The token's lock tried: its guard, or `None` if another thread holds it (called by
    /// [`TokenWaiters::try_take`], which orders it after the read of the release count).
    fn try_lock(&self) -> Option<Self::Guard>;
    /// True once the caller's deadline passed.
    fn expired(&self) -> bool;
    /// A pass of the loop with the token held (and a sleep in the device when it did
    /// nothing): the work it did.
    fn run(&mut self, guard: &mut Self::Guard) -> usize;
}

/// The progress token was held by another thread when tried: the count of its releases
/// read before the try.
#[derive(Clone, Copy)]
pub(crate) struct Taken(u64);

/// Part of the progress token's guard: when dropped (after the token's lock), wakes the
/// threads that found the token taken.
pub(crate) struct LetGo<'a>(&'a TokenWaiters);

impl Drop for LetGo<'_> {
    fn drop(&mut self) {
        self.0.released();
    }
}

impl TokenWaiters {
    /// Nobody waiting, no release yet.
    pub(crate) fn new() -> Self {
        TokenWaiters {
            parking: Parking::new(),
            releases: AtomicU64::new(0),
            queues: Mutex::new(Vec::new()),
            queue_waits: AtomicUsize::new(0),
            #[cfg(loom)]
            unlists_all: false,
        }
    }

    /// Loom only: the protocol with some of its parts taken away (negative controls), in
    /// both kinds of wait.
    #[cfg(all(loom, test))]
    pub(crate) fn with_model(model: crate::park::Model) -> Self {
        TokenWaiters {
            parking: Parking::with_model(model),
            ..TokenWaiters::new()
        }
    }

    /// Loom only: a leaving thread takes every entry of its queue off the list (a negative
    /// control).
    #[cfg(all(loom, test))]
    pub(crate) fn with_unlisting_all() -> Self {
        TokenWaiters {
            unlists_all: true,
            ..TokenWaiters::new()
        }
    }

    /// The count of releases, read before a try of the token: if the try fails, a release
    /// made between the try and the wait that follows is then seen.
    #[inline]
    fn before_try(&self) -> Taken {
        Taken(self.releases.load(Ordering::SeqCst))
    }

    /// The part of the token's guard that calls [`TokenWaiters::released`] when dropped.
    #[inline]
    fn let_go(&self) -> LetGo<'_> {
        LetGo(self)
    }

    /// Try the progress token with `try_lock` (`None`: another thread holds it). The release
    /// count is read BEFORE the try: a release between a failed try and the wait that
    /// follows is then seen by [`TokenWaiters::let_go_since`] (read after the failure, a
    /// release just before the read would pass unseen and the waiter sleep through it). On
    /// success, the token's guard and the wake-up behind it: a tuple drops its fields in
    /// order, so the lock goes first, then the waiters are woken.
    #[inline]
    pub(crate) fn try_take<G>(
        &self,
        try_lock: impl FnOnce() -> Option<G>,
    ) -> Result<(G, LetGo<'_>), Taken> {
        let taken = self.before_try();
        match try_lock() {
            Some(g) => Ok((g, self.let_go())),
            None => Err(taken),
        }
    }

    /// Run the progress loop of `driver` (or wait with `park` for the thread that runs it)
    /// until `done`, given the work done here, says so (true) or the driver's deadline passes
    /// (false). A thread that found the token taken waits unless `done` holds or the token
    /// was let go since its try.
    #[inline]
    pub(crate) fn drive_until(
        &self,
        driver: &mut impl Driver,
        done: &mut dyn FnMut(usize) -> bool,
        park: &dyn Fn(&mut dyn FnMut() -> bool),
    ) -> bool {
        let mut work = 0;
        loop {
            if done(work) {
                return true;
            }
            if driver.expired() {
                return false;
            }
            match self.try_take(|| driver.try_lock()) {
                // Kept whole, so that the lock goes before the wake-up (see `try_take`).
                Ok(mut held) => work += driver.run(&mut held.0),
                Err(taken) => park(&mut || done(work) || self.let_go_since(taken)),
            }
        }
    }

    /// The next event of `queue`, waiting for it (up to `max_sleep` at a time) while driving
    /// the loop of `driver` when no other thread does, until the driver's deadline. The
    /// queue's own wait looks at the condition under the queue's lock. A queue may be shared
    /// with agents of other ports, whose events this port's parking never hears of: the
    /// thread waits on its queue, listed so that letting go of the token rouses it.
    pub(crate) fn wait_event(
        &self,
        driver: &mut impl Driver,
        queue: &Arc<EventQueue>,
        max_sleep: Duration,
    ) -> Option<Event> {
        if let Some(e) = queue.try_pop() {
            return Some(e);
        }
        self.drive_until(driver, &mut |_| !queue.is_empty(), &|ready| {
            self.wait_on_queue(queue, max_sleep, ready);
        });
        queue.try_pop()
    }

    /// True once the token found `taken` was let go.
    #[inline]
    pub(crate) fn let_go_since(&self, taken: Taken) -> bool {
        self.releases.load(Ordering::SeqCst) != taken.0
    }

    /// Wake the parked threads: the holder did some work (published before this call).
    #[inline]
    pub(crate) fn notify_all(&self) {
        self.parking.notify_all();
    }

    /// Wait (wall time) up to `d` for the holder to do something, unless `ready` already
    /// holds ([`Parking::park_unless`]: `ready` must take no lock).
    pub(crate) fn park_unless(&self, d: Duration, ready: &mut dyn FnMut() -> bool) {
        self.parking.park_unless(d, ready);
    }

    /// The progress token was let go: wake the threads that found it taken, so that one of
    /// them takes it (the holder may have left with their completions still to come, and
    /// nobody would drive the loop until their `max_sleep` ended). Counted before the parked
    /// and queue waiters are read, as a waiter counts itself before it reads the count.
    /// Every waiter is woken, though one takes the token: a single wake-up would be lost if
    /// its thread left without the token (its own condition held) and did not pass it on, a
    /// variant not model-checked. The cost is N wake-ups per release with N threads waiting;
    /// with none, three atomic accesses and no lock.
    fn released(&self) {
        self.releases.fetch_add(1, Ordering::SeqCst);
        self.parking.notify_all();
        self.parking.seq_cst_fence();
        if self.queue_waits.load(Ordering::SeqCst) > 0 {
            for q in lock(&self.queues).iter() {
                q.rouse();
            }
        }
    }

    /// Wait (wall time) up to `d` on `queue` for an event, a release of the token, or
    /// `ready` (looked at after the queue is listed and counted, without the queue's lock).
    /// Listed before counted, unlisted after uncounted: a releaser that reads the count
    /// finds the queue in the list.
    pub(crate) fn wait_on_queue(
        &self,
        queue: &Arc<EventQueue>,
        d: Duration,
        ready: &mut dyn FnMut() -> bool,
    ) {
        lock(&self.queues).push(Arc::clone(queue));
        self.queue_waits.fetch_add(1, Ordering::SeqCst);
        self.parking.seq_cst_fence();
        #[cfg(loom)]
        let mut never = || false;
        #[cfg(loom)]
        let ready: &mut dyn FnMut() -> bool = if self.parking.rechecks() {
            ready
        } else {
            &mut never
        };
        queue.wait_nonempty_unless(d, ready);
        self.queue_waits.fetch_sub(1, Ordering::SeqCst);
        let mut list = lock(&self.queues);
        #[cfg(loom)]
        if self.unlists_all {
            list.retain(|q| !Arc::ptr_eq(q, queue));
        }
        if let Some(i) = list.iter().position(|q| Arc::ptr_eq(q, queue)) {
            list.swap_remove(i);
        }
    }
}

/// The list's lock, also when a thread panicked holding it (the list stays meaningful).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(all(test, loom))]
mod loom_tests;

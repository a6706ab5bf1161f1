//! Where threads that cannot take the progress token wait for the thread that holds it to do
//! something, and the wake-up that thread sends after publishing what it did.
//!
//! A wake-up costs a system call, so a notifier that finds nobody parked returns after one
//! sequentially consistent load. The price is the classic lost wake-up: a thread that looked at
//! its condition, found it false, and only then counted itself parked would sleep through a
//! notification sent in between. A parking thread therefore looks at its condition once more
//! after counting itself (see [`Parking::park_unless`]).
//!
//! Under `--cfg loom` the mutex, condition variable and count are loom's, and a wait has no
//! timeout (loom cannot model time), so that a missed wake-up shows as a deadlock loom reports;
//! the model checks are at the bottom of this file.

#[cfg(loom)]
use loom::sync::{
    Condvar, Mutex, MutexGuard,
    atomic::{AtomicUsize, Ordering},
};
use std::sync::PoisonError;
#[cfg(not(loom))]
use std::sync::{
    Condvar, Mutex, MutexGuard,
    atomic::{AtomicUsize, Ordering},
};
use std::time::Duration;

/// The park/notify protocol of one port: a wake-up sequence under a mutex, the condition
/// variable parked threads wait on, and how many threads are parked.
pub(crate) struct Parking {
    /// Bumped by every wake-up that found someone parked; a parked thread waits until it moves.
    seq: Mutex<u64>,
    cv: Condvar,
    /// Threads counted in [`Parking::park_unless`] (only then does a wake-up take the lock).
    parked: AtomicUsize,
    /// Loom only: parts of the protocol the negative controls take away.
    #[cfg(loom)]
    model: Model,
}

/// Loom only: which parts of the protocol a model keeps (all of them but in the negative
/// controls, which show that the checks fail without the part they take away).
#[cfg(loom)]
#[derive(Clone, Copy)]
pub(crate) struct Model {
    /// Look at the condition again after counting the thread parked.
    pub(crate) recheck: bool,
    /// Stand in, with `fence(SeqCst)`, for the total order of sequentially consistent accesses
    /// that loom does not model (it takes `SeqCst` loads and stores as acquire/release).
    pub(crate) seq_cst: bool,
}

impl Parking {
    /// Nobody parked yet.
    pub(crate) fn new() -> Self {
        Parking {
            seq: Mutex::new(0),
            cv: Condvar::new(),
            parked: AtomicUsize::new(0),
            #[cfg(loom)]
            model: Model {
                recheck: true,
                seq_cst: true,
            },
        }
    }

    /// Loom only: the protocol with some of its parts taken away (negative controls).
    #[cfg(all(loom, test))]
    pub(crate) fn with_model(model: Model) -> Self {
        Parking {
            model,
            ..Parking::new()
        }
    }

    /// Wake every parked thread. The caller has published what it did (with sequentially
    /// consistent stores or read-modify-writes) before calling: a thread that counted itself
    /// parked after the load below sees it in its `ready` re-check.
    #[inline]
    pub(crate) fn notify_all(&self) {
        self.seq_cst_fence();
        if self.parked.load(Ordering::SeqCst) == 0 {
            return;
        }
        *lock(&self.seq) += 1;
        self.cv.notify_all();
    }

    /// Wait (wall time) up to `d` for a wake-up, unless `ready` (the caller's condition,
    /// looked at once more after this thread counted itself parked) already holds. A notifier
    /// that read the parked count as 0 did so before this thread counted itself (both
    /// sequentially consistent), so what it announced is seen by `ready`; one that read it
    /// later bumps the sequence this thread waits on, which it read before counting itself.
    /// `ready` runs under the notify lock: it must take no lock.
    pub(crate) fn park_unless(&self, d: Duration, ready: &mut dyn FnMut() -> bool) {
        let g = lock(&self.seq);
        let seen = *g;
        self.parked.fetch_add(1, Ordering::SeqCst);
        self.seq_cst_fence();
        if !(self.rechecks() && ready()) {
            wait_while_unchanged(&self.cv, g, seen, d);
        }
        self.parked.fetch_sub(1, Ordering::SeqCst);
    }

    /// Whether a waiter looks at its condition again after counting itself (in
    /// `park_unless`, and in `TokenWaiters::wait_on_queue`): always.
    #[cfg(not(loom))]
    #[allow(clippy::unused_self, reason = "the loom build's twin reads the model")]
    #[inline]
    pub(crate) fn rechecks(&self) -> bool {
        true
    }

    /// Whether a waiter looks at its condition again after counting itself (not in a
    /// negative control).
    #[cfg(loom)]
    pub(crate) fn rechecks(&self) -> bool {
        self.model.recheck
    }

    /// Nothing outside loom: there the sequentially consistent accesses order themselves.
    #[cfg(not(loom))]
    #[allow(clippy::unused_self, reason = "the loom build's twin reads the model")]
    #[inline]
    pub(crate) fn seq_cst_fence(&self) {}

    /// What loom needs to see the total order of the `SeqCst` accesses around it.
    #[cfg(loom)]
    pub(crate) fn seq_cst_fence(&self) {
        if self.model.seq_cst {
            loom::sync::atomic::fence(Ordering::SeqCst);
        }
    }
}

/// The notify lock, also when a thread panicked holding it (the sequence stays meaningful).
fn lock(m: &Mutex<u64>) -> MutexGuard<'_, u64> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Wait on `cv` until the sequence moves from `seen`, or `d` passes.
#[cfg(not(loom))]
fn wait_while_unchanged(cv: &Condvar, g: MutexGuard<'_, u64>, seen: u64, d: Duration) {
    let _unused = cv
        .wait_timeout_while(g, d, |n| *n == seen)
        .unwrap_or_else(PoisonError::into_inner);
}

/// Wait on `cv` until the sequence moves from `seen`: with no timeout, since loom's condition
/// variable cannot time out (its `wait_timeout` only waits), so a missed wake-up is a deadlock.
#[cfg(loom)]
fn wait_while_unchanged(cv: &Condvar, mut g: MutexGuard<'_, u64>, seen: u64, _d: Duration) {
    while *g == seen {
        g = cv.wait(g).unwrap_or_else(PoisonError::into_inner);
    }
}

/// Model checks of the protocol under every interleaving loom can find: a waiter that parks
/// unless a flag is set, as deregistration parks unless its `outstanding` count is 0, and a
/// notifier that sets the flag and then calls `notify_all`, as the progress loop publishes what
/// it did before it notifies. A waiter that sleeps through the only wake-up waits forever
/// (no timeout under loom), which loom reports as a deadlock.
/// Run with `RUSTFLAGS="--cfg loom" cargo test -p mad --release --lib loom`.
#[cfg(all(test, loom))]
pub(crate) mod loom_tests {
    use super::*;
    use loom::sync::Arc;
    use loom::sync::atomic::AtomicBool;
    use loom::thread;

    /// What `drive_until` does when another thread holds the progress token: look at the
    /// condition, and park unless it holds, until it does.
    fn wait_for(p: &Parking, flag: &AtomicBool) {
        while !flag.load(Ordering::SeqCst) {
            p.park_unless(Duration::from_secs(1), &mut || flag.load(Ordering::SeqCst));
        }
    }

    /// `waiters` threads wait for the flag that the main thread sets once, then notifies.
    fn run(model: Model, waiters: usize) {
        let p = Arc::new(Parking::with_model(model));
        let flag = Arc::new(AtomicBool::new(false));
        let handles: Vec<_> = (0..waiters)
            .map(|_| {
                let (p, flag) = (Arc::clone(&p), Arc::clone(&flag));
                thread::spawn(move || wait_for(&p, &flag))
            })
            .collect();
        flag.store(true, Ordering::SeqCst);
        p.notify_all();
        for h in handles {
            h.join().unwrap();
        }
        assert_eq!(p.parked.load(Ordering::SeqCst), 0, "a waiter left counted");
    }

    const FULL: Model = Model {
        recheck: true,
        seq_cst: true,
    };

    /// One waiter always returns: no interleaving loses the wake-up.
    #[test]
    fn loom_park_one_waiter_never_misses_the_wake_up() {
        loom::model(|| run(FULL, 1));
    }

    /// Two waiters always return, whichever of them parked when the notifier looked.
    #[test]
    fn loom_park_two_waiters_never_miss_the_wake_up() {
        loom::model(|| run(FULL, 2));
    }

    /// Negative control: without the re-check after counting itself parked, a waiter that
    /// looked at the flag just before the notifier set it, and counted itself just after the
    /// notifier found nobody parked, sleeps forever. Loom must find that interleaving.
    #[test]
    fn loom_park_without_the_recheck_misses_the_wake_up() {
        expect_deadlock("no-recheck");
    }

    /// Negative control: the re-check is not enough if the count and the flag are ordered
    /// only by acquire/release (what loom makes of the accesses without the fences): the
    /// notifier may read the count as 0 and the waiter the flag as unset (store buffering).
    /// This is why both sides' accesses are `SeqCst`.
    #[test]
    fn loom_park_without_a_total_order_misses_the_wake_up() {
        expect_deadlock("no-total-order");
    }

    /// Names the negative control [`loom_park_control_child`] runs.
    const CONTROL_ENV: &str = "MAD_PARK_LOOM_CONTROL";

    /// A negative control's model check, in a process of its own: loom reports a deadlock by
    /// a panic, and the blocked threads' unwinding then panics again in loom's destructors,
    /// which aborts the process (so `#[should_panic]` cannot catch it). Does nothing unless
    /// [`CONTROL_ENV`] names a control.
    #[test]
    #[ignore = "run by the negative controls, in a child process"]
    fn loom_park_control_child() {
        let model = match std::env::var(CONTROL_ENV).as_deref() {
            Ok("no-recheck") => Model {
                recheck: false,
                ..FULL
            },
            Ok("no-total-order") => Model {
                seq_cst: false,
                ..FULL
            },
            _ => return,
        };
        loom::model(move || run(model, 1));
    }

    /// Run the model check of `control` in a child process of this test binary and require
    /// that it fail with loom's deadlock report.
    fn expect_deadlock(control: &str) {
        expect_deadlock_in(
            "park::loom_tests::loom_park_control_child",
            CONTROL_ENV,
            control,
        );
    }

    /// Run the ignored test `child` (its full path) in a child process of this test binary,
    /// with `env` naming `control`, and require that it fail with loom's deadlock report.
    pub(crate) fn expect_deadlock_in(child: &str, env: &str, control: &str) {
        let exe = std::env::current_exe().expect("the test binary's path");
        let out = std::process::Command::new(exe)
            .args([
                "--ignored",
                "--exact",
                child,
                "--nocapture",
                "--test-threads=1",
            ])
            .env(env, control)
            .env("RUST_BACKTRACE", "0")
            .output()
            .expect("run the test binary");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && stderr.contains("deadlock; threads"),
            "loom found no deadlock in the control {control}: {}\n{stderr}",
            out.status
        );
    }
}

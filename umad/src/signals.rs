//! Signals: a handler that runs while `umad_recv` or `umad_poll` waits ends the wait, as it
//! ends libibumad's `poll(2)` (rdma-core `libibumad/umad.c`, `dev_poll`: a failed poll is
//! -EIO, errno left at EINTR).
//!
//! These waits do not sleep in a system call a signal interrupts: the waiting thread runs
//! the port's progress loop and sleeps in the device (a condition variable on the
//! simulator), in slices. So the wait blocks the asynchronous signals from its first sleep
//! on, and after each slice asks with `ppoll` (no fds, no timeout, the caller's mask) whether
//! one came: `ppoll` unblocks them for the length of the call, a pending one runs its
//! handler there and `ppoll` fails with EINTR, exactly once, whatever `SA_RESTART` says
//! (poll(2) is never restarted), while an ignored one runs nothing and `ppoll` returns 0. No
//! signal is lost between two looks: it stays pending until the next. The caller's mask
//! comes back when the wait ends.
//!
//! The library's own threads (progress, issm watcher, the simulator's) block the same
//! signals for good (`with_async_blocked` around their start): a process-directed signal
//! then goes to a thread of the program, and while its only thread waits here, stays
//! pending for that wait to find, instead of running its handler on a library thread.
//!
//! Synchronous signals (faults, traps, `abort`) are never blocked: blocked, a fault would
//! kill the process without its handler.

use std::mem::MaybeUninit;

/// The signals a wait blocks: all but the synchronous ones (glibc leaves its own
/// cancellation and setxid signals unblocked whatever is asked).
fn async_set() -> libc::sigset_t {
    let mut set = MaybeUninit::<libc::sigset_t>::uninit();
    // SAFETY: sigfillset initialises the set it is given; sigdelset changes an initialised
    // one. Numbers below are valid signals.
    unsafe {
        libc::sigfillset(set.as_mut_ptr());
        for s in [
            libc::SIGSEGV,
            libc::SIGBUS,
            libc::SIGILL,
            libc::SIGFPE,
            libc::SIGTRAP,
            libc::SIGSYS,
            libc::SIGABRT,
        ] {
            libc::sigdelset(set.as_mut_ptr(), s);
        }
        set.assume_init()
    }
}

/// Block the asynchronous signals in this thread; returns the mask found (plain data: a
/// wait keeps it in a frame a cancellation may unwind, which must hold nothing to drop).
pub(crate) fn block_async() -> libc::sigset_t {
    let set = async_set();
    let mut old = MaybeUninit::<libc::sigset_t>::uninit();
    // SAFETY: a valid set, and room for the old mask, which pthread_sigmask fills on success
    // (it cannot fail with SIG_BLOCK and a valid set).
    unsafe {
        libc::pthread_sigmask(libc::SIG_BLOCK, &raw const set, old.as_mut_ptr());
        old.assume_init()
    }
}

/// Put back the mask [`block_async`] found.
pub(crate) fn restore(old: &libc::sigset_t) {
    // SAFETY: a mask pthread_sigmask gave.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, old, std::ptr::null_mut()) };
}

/// Whether a signal blocked since [`block_async`] (whose result is `old`) has a handler
/// that ran now: the handler runs in here, as it would have in libibumad's `poll`.
pub(crate) fn caught(old: &libc::sigset_t) -> bool {
    let zero = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: no fds (a null array of length 0), a live timeout and a mask pthread_sigmask
    // gave; ppoll restores this thread's mask on return.
    let r = unsafe { libc::ppoll(std::ptr::null_mut(), 0, &raw const zero, old) };
    r < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR)
}

/// Run `f` with the asynchronous signals blocked, so that threads it starts keep them
/// blocked; the mask is put back after.
pub(crate) fn with_async_blocked<T>(f: impl FnOnce() -> T) -> T {
    struct Restore(libc::sigset_t);
    impl Drop for Restore {
        fn drop(&mut self) {
            restore(&self.0);
        }
    }
    let _restore = Restore(block_async());
    f()
}

//! SIGINT (Ctrl-C) and SIGTERM during a walk or a bench: the engines stop at their next pass
//! and return, so that the command unwinds as after any other error (the output's temporary
//! file removed, the session closed, a `state=` fabric saved) and exits 128 + the signal's
//! number, as a shell reports a program killed by it.
//!
//! [`install`] puts a handler that only records the signal; [`requested`] reads it. The
//! handler is installed with `SA_RESETHAND`: a second Ctrl-C finds the default action and
//! ends the program at once, for when the unwinding itself hangs.

use std::sync::atomic::{AtomicI32, Ordering};

/// The signal received, 0 for none.
static RECEIVED: AtomicI32 = AtomicI32::new(0);

extern "C" fn record(sig: libc::c_int) {
    // An atomic store is async-signal-safe.
    RECEIVED.store(sig, Ordering::Relaxed);
}

/// Record SIGINT and SIGTERM for [`requested`] instead of dying of them (once each).
pub fn install() -> std::io::Result<()> {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: a zeroed sigaction is valid (empty mask, no flags); the handler only
        // stores to an atomic, which is async-signal-safe; the old action is not asked for.
        let rc = unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = record as extern "C" fn(libc::c_int) as libc::sighandler_t;
            sa.sa_flags = libc::SA_RESETHAND | libc::SA_RESTART;
            libc::sigemptyset(&raw mut sa.sa_mask);
            libc::sigaction(sig, &raw const sa, std::ptr::null_mut())
        };
        if rc != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// The signal that asked the program to stop, if one came since [`install`].
pub fn requested() -> Option<i32> {
    match RECEIVED.load(Ordering::Relaxed) {
        0 => None,
        sig => Some(sig),
    }
}

/// The signal's name, for messages.
pub fn name(sig: i32) -> &'static str {
    match sig {
        libc::SIGINT => "SIGINT",
        libc::SIGTERM => "SIGTERM",
        libc::SIGHUP => "SIGHUP",
        _ => "a signal",
    }
}

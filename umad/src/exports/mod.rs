//! The C functions of `<infiniband/umad.h>`, with libibumad's contracts: return values,
//! `errno`, what is written where. Each one is a thin layer over [`crate::context`] and
//! [`crate::file`]; the Rust side never panics across the boundary (a panic is caught and
//! becomes EIO), and never acts on a `pthread_cancel` inside (cancellation is deferred to
//! the caller's next cancellation point, see `uncancellable`; `umad_recv` and
//! `umad_poll` act on it between the steps of their wait).
//!
//! They are exported under their C names with rdma-core's symbol versions by
//! `src/symbols.rs` and `libibumad.map`.

pub mod addr;
pub mod ca;
pub mod debug;
pub mod io;
pub mod port;

use std::borrow::Cow;
use std::ffi::{CStr, c_char, c_int};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, Ordering};

use crate::abi::{HDR_LEN, HDR_LEN_OLD};

/// libibumad's `new_user_mad_api`: set by the first successful `umad_open_port` (whose
/// `ENABLE_PKEY` succeeds, as it always does here). Until then `umad_size` is the old 56.
pub(crate) static NEW_API: AtomicBool = AtomicBool::new(false);

/// `umad_size()`.
pub(crate) fn hdr_len() -> usize {
    if NEW_API.load(Ordering::Relaxed) {
        HDR_LEN
    } else {
        HDR_LEN_OLD
    }
}

pub(crate) fn errno() -> c_int {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

pub(crate) fn set_errno(e: c_int) {
    // SAFETY: __errno_location returns this thread's errno.
    unsafe { *libc::__errno_location() = e };
}

unsafe extern "C" {
    /// pthread's cancel state switch (not a cancellation point).
    fn pthread_setcancelstate(state: c_int, old: *mut c_int) -> c_int;
}

/// glibc's `PTHREAD_CANCEL_DISABLE`.
const PTHREAD_CANCEL_DISABLE: c_int = 1;

/// Runs `f` with cancellation disabled, then restores the state found. The driver, the
/// simulator, the MAD layer and stderr make system calls that are cancellation points
/// (eventfd reads and writes, sleeps, writes), and a cancel acted on there would unwind
/// through frames holding locks, and through `catch_unwind`, which glibc's forced unwind
/// must not meet ("FATAL: exception not rethrown"). A cancel pending meanwhile is acted on
/// at the caller's next cancellation point (libibumad's own are its read, write and poll).
pub(crate) fn uncancellable<T>(f: impl FnOnce() -> T) -> T {
    let mut old: c_int = 0;
    // SAFETY: plain pthread call on this thread, with a live int for the old state.
    unsafe { pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &raw mut old) };
    let r = f();
    // SAFETY: as above; restoring the state found.
    unsafe { pthread_setcancelstate(old, std::ptr::null_mut()) };
    r
}

/// Runs `f` with cancellation deferred ([`uncancellable`]), turning a panic into
/// `on_panic` (and errno EIO).
pub(crate) fn guard<T>(on_panic: T, f: impl FnOnce() -> T) -> T {
    uncancellable(|| {
        catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|_| {
            set_errno(libc::EIO);
            on_panic
        })
    })
}

/// A C string argument: `None` for NULL. Bytes that are not UTF-8 become U+FFFD, which no
/// CA name contains.
///
/// # Safety
/// `p` is NULL or a NUL-terminated string.
pub(crate) unsafe fn opt_str<'a>(p: *const c_char) -> Option<Cow<'a, str>> {
    if p.is_null() {
        return None;
    }
    // SAFETY: the caller passes a NUL-terminated string.
    Some(unsafe { CStr::from_ptr(p) }.to_string_lossy())
}

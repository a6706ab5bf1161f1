//! Sending and receiving: `umad_send`, `umad_recv`, `umad_poll`, `umad_get_fd`.
//!
//! `umad_recv` and `umad_poll` wait in `poll(2)` on the umad fd, a cancellation point, as
//! libibumad's do: OpenSM stops its receiver thread with `pthread_cancel`, which unwinds
//! the thread from inside that `poll`. So these two are `extern "C-unwind"` (a plain
//! `extern "C"` function aborts when an unwind crosses it), `poll` is declared as one that
//! may unwind, and nothing that needs dropping is alive across the wait: the unwind passes
//! through frames with nothing to clean up.

use std::ffi::{c_int, c_void};

use crate::abi::{HDR_LEN, IbUserMad};
use crate::context::global;
use crate::error::UmadError;
use crate::exports::{errno, guard, hdr_len, set_errno};

unsafe extern "C-unwind" {
    /// libc's `poll`, declared so that the cancellation unwind may pass through it.
    #[link_name = "poll"]
    fn poll_cancellable(fds: *mut libc::pollfd, nfds: libc::nfds_t, timeout: c_int) -> c_int;
}

/// libibumad's `dev_poll`: 0 when `fd` is readable (or in error), -ETIMEDOUT when
/// `timeout_ms` passed, -EIO when `poll` failed (errno says why).
fn dev_poll(fd: c_int, timeout_ms: c_int) -> c_int {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one pollfd, live for the call.
    let n = unsafe { poll_cancellable(&raw mut p, 1, timeout_ms) };
    match n {
        1 => 0,
        0 => -libc::ETIMEDOUT,
        _ => -libc::EIO,
    }
}

/// `umad_send`: stores `timeout_ms`, `retries` and `agentid` in the header at `umad`, then
/// sends the header and `length` bytes of MAD. 0, or -EIO with errno saying why (EINVAL for
/// a short or over-long MAD or a duplicate TID, EIO for an unregistered agent or a dead
/// device, EBADF for an fd this library did not open).
///
/// # Safety
/// `umad` points to `umad_size() + length` bytes.
pub unsafe extern "C" fn umad_send(
    fd: c_int,
    agentid: c_int,
    umad: *mut c_void,
    length: c_int,
    timeout_ms: c_int,
    retries: c_int,
) -> c_int {
    guard(-libc::EIO, || {
        set_errno(0);
        if umad.is_null() || length < 0 {
            set_errno(libc::EINVAL);
            return -libc::EIO;
        }
        let h = umad.cast::<IbUserMad>();
        // SAFETY: the caller's buffer starts with the header; libibumad writes these three
        // fields there too.
        unsafe {
            (*h).timeout_ms = timeout_ms as u32;
            (*h).retries = retries as u32;
            (*h).agent_id = agentid as u32;
        }
        let len = hdr_len() + length as usize;
        // SAFETY: the caller's buffer holds umad_size() + length bytes.
        let bytes = unsafe { std::slice::from_raw_parts(umad.cast::<u8>(), len) };
        let r = global()
            .ok_or(UmadError::NotAPort { fd })
            .and_then(|c| c.file(fd))
            .and_then(|f| {
                if hdr_len() != HDR_LEN {
                    return Err(UmadError::ShortWrite { len, hdr: HDR_LEN });
                }
                f.write(bytes)
            });
        match r {
            Ok(_) => 0,
            Err(e) => {
                crate::context::debug("umad_send", || format!("fd {fd}: {e}"));
                set_errno(e.errno());
                -libc::EIO
            }
        }
    })
}

/// What `read(2)` does on the fd: the next packet into the buffer, or -errno.
fn read(fd: c_int, buf: &mut [u8]) -> Result<usize, UmadError> {
    let c = global().ok_or(UmadError::NotAPort { fd })?;
    c.file(fd)?.read(buf)
}

/// The part of `umad_recv` after the wait.
///
/// # Safety
/// As `umad_recv`.
unsafe fn recv_now(fd: c_int, umad: *mut c_void, length: *mut c_int) -> c_int {
    guard(-libc::EIO, || {
        // SAFETY: the caller's int.
        let want = unsafe { *length };
        let len = hdr_len() + usize::try_from(want).unwrap_or(0);
        // SAFETY: the caller's buffer holds umad_size() + *length bytes.
        let buf = unsafe { std::slice::from_raw_parts_mut(umad.cast::<u8>(), len) };
        match read(fd, buf) {
            Ok(n) => {
                // SAFETY: the caller's int.
                unsafe { *length = n.saturating_sub(hdr_len()) as c_int };
                // SAFETY: the header was just written at the start of the buffer.
                unsafe { (*umad.cast::<IbUserMad>()).agent_id as c_int }
            }
            Err(e) => {
                // libibumad reports the header's length (less the header): after ENOSPC
                // that is what the message needs.
                if len >= 20 {
                    // SAFETY: at least the header's first 20 bytes are the caller's.
                    let l = unsafe { (*umad.cast::<IbUserMad>()).length };
                    // SAFETY: the caller's int.
                    unsafe { *length = (l as c_int).wrapping_sub(hdr_len() as c_int) };
                }
                set_errno(e.errno());
                -e.errno()
            }
        }
    })
}

/// `umad_recv`: waits up to `timeout_ms` (-1: forever, 0: not at all) for a packet, then
/// reads it. Returns the agent ID with `*length` = the MAD's length; or -errno:
/// -ETIMEDOUT after the timeout, -EAGAIN when nothing is queued, -ENOSPC (with `*length` =
/// the length needed) for a message longer than the buffer, -EINVAL for a buffer shorter
/// than one MAD, -EIO once the device is gone.
///
/// # Safety
/// `umad` points to `umad_size() + *length` bytes; `length` to an int.
pub unsafe extern "C-unwind" fn umad_recv(
    fd: c_int,
    umad: *mut c_void,
    length: *mut c_int,
    timeout_ms: c_int,
) -> c_int {
    if umad.is_null() || length.is_null() {
        set_errno(libc::EINVAL);
        return -libc::EINVAL;
    }
    set_errno(0);
    if timeout_ms != 0 {
        let n = dev_poll(fd, timeout_ms);
        if n < 0 {
            if errno() == 0 {
                set_errno(-n);
            }
            return n;
        }
    }
    // SAFETY: as this function's contract.
    unsafe { recv_now(fd, umad, length) }
}

/// `umad_poll`: 0 when the fd is readable (or its device gone), -ETIMEDOUT, -EIO.
pub extern "C-unwind" fn umad_poll(fd: c_int, timeout_ms: c_int) -> c_int {
    dev_poll(fd, timeout_ms)
}

/// `umad_get_fd`: the fd itself.
pub extern "C" fn umad_get_fd(fd: c_int) -> c_int {
    fd
}

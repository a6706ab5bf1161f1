//! Sending and receiving: `umad_send`, `umad_recv`, `umad_poll`, `umad_get_fd`.
//!
//! `umad_recv` and `umad_poll` wait by running the port's progress loop ([`crate::drive`])
//! instead of in `poll(2)`, but stay cancellable as libibumad's are: OpenSM stops its
//! receiver thread with `pthread_cancel`. The loop runs with cancellation disabled (the
//! driver and the simulator make system calls that are cancellation points, with locks
//! held), in steps of at most `SLICE` (in `drive`), and between steps the thread passes an explicit
//! cancellation point with nothing alive that needs dropping. So these two are
//! `extern "C-unwind"` (a plain `extern "C"` function aborts when an unwind crosses it).
//! A signal handled during the wait ends it as it ends libibumad's `poll` ([`crate::signals`]).

use std::ffi::{c_int, c_void};
use std::ptr::{addr_of, addr_of_mut};

use std::time::Duration;

use crate::abi::{HDR_LEN, IbUserMad, MIN_WRITE_MAD};
use crate::context::global;
use crate::error::UmadError;
use crate::exports::{errno, guard, hdr_len, set_errno};
use crate::file::UmadFile;
use crate::signals;

unsafe extern "C-unwind" {
    /// pthread's explicit cancellation point; may unwind (a pending cancel).
    fn pthread_testcancel();
}

/// Longest stretch a waiting caller spends in the library between two cancellation points
/// (how long a `pthread_cancel` of a thread waiting in `umad_recv` may take to act).
const SLICE: Duration = Duration::from_millis(5);

/// Acts on a pending cancel of this thread. Call only from a frame with nothing alive that
/// needs dropping: the unwind passes through it.
fn cancellation_point() {
    // SAFETY: no arguments; the unwind it may start is allowed through the callers
    // (`extern "C-unwind"`, nothing to drop).
    unsafe { pthread_testcancel() };
}

/// One step of a wait: done (with the C return value), or not yet.
enum Step {
    Done(c_int),
    More,
}

/// A wait's step: `(file, until, now, last)`, see [`wait_steps`].
type StepFn<'a> = dyn FnMut(&UmadFile, Duration, Duration, bool) -> Result<Step, UmadError> + 'a;

/// A wait of `umad_recv` or `umad_poll` of `timeout_ms` (-1: forever), in steps of at most
/// [`SLICE`] between which a cancel of the thread is acted on. `step(file, until, now, last)`
/// does one step (until `until`, device time; `now`: the device time read at the step's
/// start; `last`: the deadline has passed) and says whether it is done; the wait's deadline
/// is fixed in device time at the first step, which looks without sleeping. After the
/// deadline: -ETIMEDOUT.
///
/// From the first sleep on the asynchronous signals are blocked, and a signal whose
/// handler runs (after a step, see [`crate::signals`]) ends the wait as it ends libibumad's
/// `poll`: -EIO with errno EINTR (rdma-core `libibumad/umad.c`, `dev_poll`; `umad_recv`
/// keeps the errno poll left). The caller's mask is back when this returns. A thread
/// cancelled meanwhile ends with them blocked (the mask is plain data here: the frames the
/// cancellation unwinds hold nothing to drop).
fn wait_steps(fd: c_int, timeout_ms: c_int, step: &mut StepFn<'_>) -> c_int {
    let mut deadline: Option<Duration> = None;
    // The caller's signal mask, once this wait sleeps with the asynchronous signals blocked.
    let mut caller_mask: Option<libc::sigset_t> = None;
    loop {
        let sleeps = caller_mask.is_some();
        // guard: cancellation disabled inside, acted on below between steps.
        let r = guard(Step::Done(-libc::EIO), || {
            let r = global()
                .ok_or(UmadError::NotAPort { fd })
                .and_then(|c| c.file(fd))
                .and_then(|f| {
                    let now = f.port().mad.now();
                    let end = *deadline.get_or_insert_with(|| {
                        u64::try_from(timeout_ms).map_or(Duration::MAX, |ms| {
                            now.saturating_add(Duration::from_millis(ms))
                        })
                    });
                    let until = if sleeps {
                        end.min(now.saturating_add(SLICE))
                    } else {
                        now
                    };
                    step(&f, until, now, now >= end)
                });
            r.unwrap_or_else(|e| {
                set_errno(e.errno());
                Step::Done(-e.errno())
            })
        });
        if let Step::Done(n) = r {
            if let Some(mask) = &caller_mask {
                // What the step left in errno is the answer's: keep it across the restore.
                let e = errno();
                signals::restore(mask);
                set_errno(e);
            }
            return n;
        }
        match &caller_mask {
            None => caller_mask = Some(signals::block_async()),
            Some(mask) => {
                if signals::caught(mask) {
                    signals::restore(mask);
                    set_errno(libc::EINTR);
                    return -libc::EIO;
                }
            }
        }
        cancellation_point();
    }
}

/// `umad_send`: stores `timeout_ms`, `retries` and `agentid` in the header at `umad`, then
/// sends the header and `length` bytes of MAD. 0, or -EIO with errno saying why (EINVAL for
/// a short or over-long MAD or a duplicate TID, EIO for an unregistered agent or a dead
/// device, EBADF for an fd this library did not open).
///
/// As the kernel's `write`, it reads the header and the MAD's first 36 bytes first, and the
/// rest only once every check passed ([`UmadFile::write_parts`]): a `length` longer than
/// one MAD (outside RMPP) is refused without reading past it.
///
/// # Safety
/// `umad` points to `umad_size() + length` bytes (at least the header and 36 bytes of MAD
/// for a `length` the checks refuse); no alignment is asked of it.
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
        let Ok(mad_len) = usize::try_from(length) else {
            set_errno(libc::EINVAL);
            return -libc::EIO;
        };
        if umad.is_null() {
            set_errno(libc::EINVAL);
            return -libc::EIO;
        }
        let h = umad.cast::<IbUserMad>();
        // SAFETY: the caller's buffer starts with a header (umad_size() bytes, which hold
        // these three fields in either ABI); libibumad writes them there too. Unaligned
        // writes: the caller's buffer may have any alignment.
        unsafe {
            addr_of_mut!((*h).timeout_ms).write_unaligned(timeout_ms as u32);
            addr_of_mut!((*h).retries).write_unaligned(retries as u32);
            addr_of_mut!((*h).agent_id).write_unaligned(agentid as u32);
        }
        let len = hdr_len() + mad_len;
        let r = global()
            .ok_or(UmadError::NotAPort { fd })
            .and_then(|c| c.file(fd))
            .and_then(|f| {
                if hdr_len() != HDR_LEN || mad_len < MIN_WRITE_MAD {
                    return Err(UmadError::ShortWrite { len, hdr: HDR_LEN });
                }
                // SAFETY: mad_len >= 36, so the umad_size() + length bytes the caller vouches
                // for include the header and the MAD's first 36 bytes; read unaligned.
                let head: [u8; HDR_LEN + MIN_WRITE_MAD] =
                    unsafe { std::ptr::read_unaligned(umad.cast()) };
                f.write_parts(&head, mad_len, || {
                    // SAFETY: called only once the length passed the kernel's checks; the
                    // caller's buffer holds umad_size() + length bytes, read as bytes (no
                    // alignment needed).
                    unsafe { std::slice::from_raw_parts(umad.cast::<u8>().add(HDR_LEN), mad_len) }
                })
            });
        match r {
            Ok(_) => {
                // libibumad's errno = 0 on entry survives a successful write; the system
                // calls made on the way here may have set it.
                set_errno(0);
                0
            }
            Err(e) => {
                crate::context::debug("umad_send", || format!("fd {fd}: {e}"));
                set_errno(e.errno());
                -libc::EIO
            }
        }
    })
}

/// `umad_recv`: waits up to `timeout_ms` (-1: forever, 0: not at all) for a packet, then
/// reads it. Returns the agent ID with `*length` = the MAD's length; or -errno:
/// -ETIMEDOUT after the timeout, -EAGAIN when nothing is queued, -ENOSPC (with `*length` =
/// the length needed) for a message longer than the buffer, -EINVAL for a buffer shorter
/// than one MAD (or at once, `*length` untouched, for a negative `*length`), -EIO once the
/// device is gone, and -EIO with errno EINTR when a signal's handler ran during the wait
/// (`*length` untouched), as libibumad's interrupted `poll`.
///
/// The waiting thread runs the port's progress loop itself ([`crate::drive`]); a cancel of
/// it (OpenSM stops its receiver thread with `pthread_cancel`) is acted on between steps of
/// at most `SLICE` (in `drive`), with nothing of the library's alive.
///
/// # Safety
/// `umad` points to `umad_size() + *length` bytes, at any alignment; `length` to an int.
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
    // SAFETY: the caller's int, read unaligned (no alignment is asked of it).
    let want = unsafe { length.read_unaligned() };
    // The kernel's read refuses a count below the header's size at once; nothing is
    // written back.
    let Ok(want) = usize::try_from(want) else {
        set_errno(libc::EINVAL);
        return -libc::EINVAL;
    };
    let len = hdr_len() + want;
    wait_steps(fd, timeout_ms, &mut |f, until, now, last| {
        // SAFETY: the caller's buffer holds umad_size() + *length bytes.
        let buf = unsafe { std::slice::from_raw_parts_mut(umad.cast::<u8>(), len) };
        match f.recv_wait_from(buf, until, now, timeout_ms != 0) {
            Ok(n) => {
                // SAFETY: the caller's int, written unaligned.
                unsafe { length.write_unaligned(n.saturating_sub(hdr_len()) as c_int) };
                // As libibumad's: 0 after a successful read, whatever the system calls made
                // on the way (a lowered fd's EAGAIN) left in it.
                set_errno(0);
                let h = umad.cast::<IbUserMad>();
                // SAFETY: the header was just written at the start of the caller's buffer;
                // read unaligned (the buffer may sit at any address).
                Ok(Step::Done(unsafe {
                    addr_of!((*h).agent_id).read_unaligned() as c_int
                }))
            }
            Err(UmadError::Again) if !last => Ok(Step::More),
            Err(UmadError::Again) if timeout_ms != 0 => {
                set_errno(libc::ETIMEDOUT);
                Ok(Step::Done(-libc::ETIMEDOUT))
            }
            Err(e) => {
                // libibumad reports the header's length (less the header): after ENOSPC
                // that is what the message needs.
                if len >= 20 {
                    let h = umad.cast::<IbUserMad>();
                    // SAFETY: at least the header's first 20 bytes are the caller's (they
                    // hold `length`); read unaligned.
                    let l = unsafe { addr_of!((*h).length).read_unaligned() };
                    // SAFETY: the caller's int, written unaligned.
                    unsafe {
                        length.write_unaligned((l as c_int).wrapping_sub(hdr_len() as c_int));
                    }
                }
                Err(e)
            }
        }
    })
}

/// `umad_poll`: 0 when the fd is readable (or its device gone, which includes a child of
/// `fork()`, whose devices stayed with the parent), -ETIMEDOUT, -EIO (errno EINTR when a
/// signal's handler ran); waits as `umad_recv` does.
pub extern "C-unwind" fn umad_poll(fd: c_int, timeout_ms: c_int) -> c_int {
    if global().is_some_and(|c| c.inherited()) {
        return 0;
    }
    wait_steps(fd, timeout_ms, &mut |f, until, _now, last| {
        if f.wait_readable(until)? {
            Ok(Step::Done(0))
        } else if last {
            Ok(Step::Done(-libc::ETIMEDOUT))
        } else {
            Ok(Step::More)
        }
    })
}

/// `umad_get_fd`: the fd itself.
pub extern "C" fn umad_get_fd(fd: c_int) -> c_int {
    fd
}

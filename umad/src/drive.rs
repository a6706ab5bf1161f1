//! Who runs a port's MAD progress loop: the threads that wait in `umad_recv` / `umad_poll`
//! run it themselves, and a fallback thread runs it when none has waited for a while.
//!
//! Why: libibnetdisc keeps 2 SMPs in flight and OpenSM about 4, so each SMP's round trip is
//! paid in full. When the waiting thread drives the loop, a response the (simulated) device
//! wrote during `umad_send` is found by the next `umad_recv` in the same thread, with no
//! thread switch and no system call; a response completed by another thread (OpenSM sends
//! from its worker threads while its receiver waits) costs one wake-up instead of two (the
//! progress thread's, then the reader's).
//!
//! The fallback keeps the kernel's contract for programs that never wait in this library
//! (they `poll(2)` the fd and read with a zero timeout): it drives the loop whenever no
//! caller has waited for [`IDLE`], so that a MAD still makes the fd readable, and timers
//! still fire, within about that long. While callers wait it sleeps on a condition
//! variable nobody signals per MAD.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::context::lock;

/// How long after the last caller's wait the fallback thread takes the loop over (and how
/// often it looks while callers wait).
pub const IDLE: Duration = Duration::from_millis(2);

/// The longest the fallback thread sleeps in the device before it looks again whether a
/// caller waits (it lets go of the loop while asleep: a caller takes it at once).
const SLICE: Duration = Duration::from_millis(5);

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// What the callers and the fallback thread of one port share.
#[derive(Debug, Default)]
pub struct Drive {
    /// Threads waiting in this library on a file of the port now.
    waiting: AtomicUsize,
    /// When (device time, ns) a caller last stopped waiting.
    last_wait: AtomicU64,
    stop: AtomicBool,
    park: (Mutex<()>, Condvar),
}

impl Drive {
    /// A caller starts waiting; it drives the loop until the returned guard is dropped.
    pub fn enter<'a>(&'a self, port: &'a mad::Port) -> Waiting<'a> {
        self.waiting.fetch_add(1, Ordering::SeqCst);
        Waiting {
            drive: self,
            port,
            ends_at: None,
        }
    }

    /// Threads waiting now.
    pub fn waiting(&self) -> usize {
        self.waiting.load(Ordering::SeqCst)
    }

    fn callers_active(&self, now: Duration) -> bool {
        self.waiting() > 0
            || nanos(now).saturating_sub(self.last_wait.load(Ordering::SeqCst)) < nanos(IDLE)
    }

    fn sleep(&self, d: Duration) {
        let g = lock(&self.park.0);
        if self.stop.load(Ordering::SeqCst) {
            return;
        }
        let _unused = self
            .park
            .1
            .wait_timeout(g, d)
            .unwrap_or_else(PoisonError::into_inner);
    }
}

/// A caller's wait (see [`Drive::enter`]).
#[derive(Debug)]
pub struct Waiting<'a> {
    drive: &'a Drive,
    port: &'a mad::Port,
    ends_at: Option<Duration>,
}

impl Waiting<'_> {
    /// The wait will not sleep: it ends at `now` (device time, just read by the caller), as
    /// far as [`IDLE`] can tell; the clock is not read again when it ends.
    pub fn ends_at(&mut self, now: Duration) {
        self.ends_at = Some(now);
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        let end = self.ends_at.unwrap_or_else(|| self.port.now());
        self.drive.last_wait.store(nanos(end), Ordering::SeqCst);
        self.drive.waiting.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The fallback thread of a port; stops (and joins) when dropped.
#[derive(Debug)]
pub struct Fallback {
    drive: Arc<Drive>,
    handle: Option<JoinHandle<()>>,
}

impl Fallback {
    /// Start the fallback thread of `port`.
    ///
    /// Every time it looks (at least every [`IDLE`] while callers wait, every `SLICE` while
    /// it drives the loop) it calls `show`, which makes the fds of packets that returning
    /// callers left queued readable (see [`crate::queue::ReadQueue::release`]). It does so
    /// while callers wait too: a caller blocked on one file must not keep the leftovers of
    /// another file unshown (`show` leaves alone a file a caller waits on).
    pub fn spawn(
        port: mad::Port,
        drive: Arc<Drive>,
        show: impl Fn() + Send + 'static,
    ) -> std::io::Result<Fallback> {
        let d = Arc::clone(&drive);
        let handle = std::thread::Builder::new()
            .name(format!("umad-port{}", port.port_num()))
            .spawn(move || {
                while !d.stop.load(Ordering::SeqCst) {
                    show();
                    if d.callers_active(port.now()) {
                        d.sleep(IDLE);
                    } else {
                        port.progress_then_sleep(port.now() + SLICE);
                    }
                }
            })?;
        Ok(Fallback {
            drive,
            handle: Some(handle),
        })
    }
}

impl Drop for Fallback {
    fn drop(&mut self) {
        {
            let _g = lock(&self.drive.park.0);
            self.drive.stop.store(true, Ordering::SeqCst);
        }
        self.drive.park.1.notify_all();
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

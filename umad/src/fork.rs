//! `fork(2)` and the library.
//!
//! The kernel's umad fds keep working in a child: they name a kernel file. Here everything
//! behind them stays with the process that opened the devices: the DMA memory is mapped
//! `MADV_DONTFORK` (a child touching it faults), the progress and issm threads do not exist in
//! the child (only the forking thread is copied), and locks other threads held at the fork
//! stay held. So a child answers every call that needs a device as if the device had been
//! removed, without touching anything the parent's threads use, and does nothing at exit
//! (no IsSM cleared, no issm directory removed, no simulated fabric saved: those are the
//! parent's). The answers, per call, are said in the crate's top doc.
//!
//! What a context belongs to is told by a generation: a `pthread_atfork` child handler
//! bumps the process's ([`generation`]), and a context made before that is the parent's
//! ([`crate::Context::inherited`]). One atomic load per call, no `getpid`.
//!
//! The same handler closes, in the child, the library's own ends of the umad fds' socket
//! pairs (`LibFd`): a child holding them would keep the parent's sockets alive, so that a
//! device death in the parent (which closes its end to make the user's fd report POLLERR,
//! see [`crate::queue`]) would go unseen while the child lives. The user's own fd is the
//! user's, and stays open in the child as a kernel umad fd would.

use std::cell::RefCell;
use std::os::fd::{IntoRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, Once};

use crate::context::lock;

/// Forks this process descends from since the library installed its handler: bumped in
/// every child.
static GENERATION: AtomicU64 = AtomicU64::new(0);

/// The library's own descriptors (socket ends the user never sees), closed in a child.
static LIB_FDS: Mutex<Vec<RawFd>> = Mutex::new(Vec::new());

thread_local! {
    /// [`LIB_FDS`], held by the forking thread from the prepare handler to the parent's or
    /// the child's handler, so that no other thread changes it mid-fork and the child finds
    /// it unlocked and complete.
    static HELD: RefCell<Option<MutexGuard<'static, Vec<RawFd>>>> = const { RefCell::new(None) };
}

static INSTALL: Once = Once::new();

/// Install the fork handlers (once per process; before the first context or umad fd).
pub(crate) fn install() {
    INSTALL.call_once(|| {
        // SAFETY: registers three extern "C" functions without arguments, which stay valid
        // while the library is loaded (glibc's pthread_atfork drops them at dlclose).
        let r = unsafe { libc::pthread_atfork(Some(prepare), Some(parent), Some(child)) };
        if r != 0 {
            crate::context::say(format_args!(
                "libibumad (hca): pthread_atfork failed ({r}): a child of fork() may crash \
                 if it calls the library"
            ));
        }
    });
}

/// This process's generation: a context made in an earlier one belongs to an ancestor.
pub fn generation() -> u64 {
    GENERATION.load(Ordering::Acquire)
}

extern "C" fn prepare() {
    let _ = HELD.try_with(|h| {
        if let Ok(mut h) = h.try_borrow_mut() {
            *h = Some(lock(&LIB_FDS));
        }
    });
}

extern "C" fn parent() {
    let _ = HELD.try_with(|h| {
        if let Ok(mut h) = h.try_borrow_mut() {
            h.take();
        }
    });
}

/// In the child (one thread, only async-signal-safe work: an atomic add, `close`, and the
/// unlock of a futex the forking thread itself took).
extern "C" fn child() {
    GENERATION.fetch_add(1, Ordering::AcqRel);
    let _ = HELD.try_with(|h| {
        if let Ok(mut h) = h.try_borrow_mut() {
            if let Some(mut fds) = h.take() {
                for fd in fds.drain(..) {
                    // SAFETY: a descriptor the library made and tracks (LibFd); the child's
                    // copy is closed here and never again (LibFd::drop checks the pid).
                    unsafe { libc::close(fd) };
                }
            }
        }
    });
}

/// A descriptor of the library's own, closed in a child of `fork()` by the fork handler
/// and, in the process that made it, when dropped.
#[derive(Debug)]
pub(crate) struct LibFd {
    fd: RawFd,
    pid: u32,
}

impl LibFd {
    /// Track `fd` (closed in children from now on).
    pub(crate) fn new(fd: OwnedFd) -> LibFd {
        install();
        let fd = fd.into_raw_fd();
        lock(&LIB_FDS).push(fd);
        LibFd {
            fd,
            pid: std::process::id(),
        }
    }

    /// The descriptor.
    pub(crate) fn raw(&self) -> RawFd {
        self.fd
    }
}

impl Drop for LibFd {
    fn drop(&mut self) {
        {
            let mut fds = lock(&LIB_FDS);
            if let Some(i) = fds.iter().position(|&f| f == self.fd) {
                fds.swap_remove(i);
            }
        }
        // Untracked first: a fork from now on leaves the child a copy it keeps (harmless),
        // never a number closed here and reused. In a child the fork handler closed it
        // already, and the number may name something of the child's now.
        if self.pid == std::process::id() {
            // SAFETY: the descriptor this LibFd owns, in the process that made it.
            unsafe { libc::close(self.fd) };
        }
    }
}

/// Descriptors tracked now (tests).
pub fn tracked() -> usize {
    lock(&LIB_FDS).len()
}

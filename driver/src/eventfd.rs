//! A Linux eventfd: how interrupts reach us (VFIO signals one per vector; the emulated backend
//! writes the same kind of fd from its device model).

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

/// An eventfd opened non-blocking and close-on-exec.
#[derive(Debug)]
pub struct EventFd(OwnedFd);

impl EventFd {
    /// Create an eventfd with a zero count.
    pub fn new() -> io::Result<Self> {
        // SAFETY: eventfd takes no pointers; a non-negative return is a new fd we own.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just returned by eventfd and is owned by nobody else.
        Ok(EventFd(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// Another handle on the same eventfd (a `dup`), for a signaller that must own one.
    pub fn try_clone(&self) -> io::Result<Self> {
        Ok(EventFd(self.0.try_clone()?))
    }

    /// Add one to the counter: raise the interrupt.
    pub fn signal(&self) -> io::Result<()> {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a local u64 to our fd.
        let n = unsafe { libc::write(self.0.as_raw_fd(), (&raw const one).cast(), 8) };
        if n == 8 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }

    /// Read and clear the counter; `Ok(0)` when nothing was signalled.
    pub fn take(&self) -> io::Result<u64> {
        let mut v: u64 = 0;
        // SAFETY: reads at most 8 bytes into a local u64 from our fd.
        let n = unsafe { libc::read(self.0.as_raw_fd(), (&raw mut v).cast(), 8) };
        if n == 8 {
            return Ok(v);
        }
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::WouldBlock {
            Ok(0)
        } else {
            Err(e)
        }
    }

    /// Wait until the counter is non-zero or `timeout` passes; returns the count taken.
    pub fn wait(&self, timeout: Duration) -> io::Result<u64> {
        let mut pfd = libc::pollfd {
            fd: self.0.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
        // SAFETY: polls one pollfd we own for the given time.
        let rc = unsafe { libc::poll(&raw mut pfd, 1, ms) };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        self.take()
    }
}

impl AsFd for EventFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

impl AsRawFd for EventFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signal_then_take_counts() {
        let e = EventFd::new().unwrap();
        assert_eq!(e.take().unwrap(), 0);
        e.signal().unwrap();
        e.signal().unwrap();
        assert_eq!(e.wait(Duration::from_millis(10)).unwrap(), 2);
        assert_eq!(e.take().unwrap(), 0);
    }
}

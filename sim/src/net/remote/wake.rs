//! Waking the server's accept thread at a stop without going through the socket's path: the
//! path may have been removed, or taken by another server (whose accept a connection would
//! reach instead). The thread waits in `poll(2)` on its listener and on one end of a socket
//! pair; the stop shuts the other end, which makes that end readable for good.

use std::io::{Error, ErrorKind};
use std::os::fd::AsRawFd;
use std::os::unix::net::{UnixListener, UnixStream};

/// The stop's side: [`Stop::ask`] wakes the thread holding the matching [`StopSignal`].
#[derive(Debug)]
pub(crate) struct Stop(UnixStream);

/// The accept thread's side.
#[derive(Debug)]
pub(crate) struct StopSignal(UnixStream);

/// A new pair.
pub(crate) fn stop_pair() -> std::io::Result<(Stop, StopSignal)> {
    let (a, b) = UnixStream::pair()?;
    Ok((Stop(a), StopSignal(b)))
}

impl Stop {
    /// Wakes the waiting thread (and every later wait): the peer reads end-of-file.
    pub(crate) fn ask(&self) {
        let _ = self.0.shutdown(std::net::Shutdown::Both);
    }
}

/// What woke [`wait`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Woken {
    /// The listener has a connection to accept (or an error to report).
    Connection,
    /// The stop was asked.
    Stop,
}

/// Waits until `listener` has a connection or `signal` says stop; the stop wins when both.
pub(crate) fn wait(listener: &UnixListener, signal: &StopSignal) -> std::io::Result<Woken> {
    let mut fds = [
        libc::pollfd {
            fd: listener.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            fd: signal.0.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    loop {
        // SAFETY: `fds` is a live array of two pollfd that poll reads and writes (revents)
        // only during the call; both descriptors belong to objects borrowed for the call.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) };
        if n < 0 {
            let e = Error::last_os_error();
            if e.kind() == ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if fds[1].revents != 0 {
            return Ok(Woken::Stop);
        }
        if fds[0].revents != 0 {
            return Ok(Woken::Connection);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stop_wakes_the_wait_and_a_connection_is_told_apart() {
        let dir = std::env::temp_dir().join(format!("sim-wake-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("l.sock");
        let listener = UnixListener::bind(&path).unwrap();
        let (stop, signal) = stop_pair().unwrap();
        let _c = UnixStream::connect(&path).unwrap();
        assert_eq!(wait(&listener, &signal).unwrap(), Woken::Connection);
        stop.ask();
        assert_eq!(wait(&listener, &signal).unwrap(), Woken::Stop);
        // Asked once, the stop stays asked.
        assert_eq!(wait(&listener, &signal).unwrap(), Woken::Stop);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

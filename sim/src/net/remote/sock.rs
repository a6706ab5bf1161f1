//! Writing frames to a socket without `SIGPIPE`: a client lives inside programs written in C
//! (OpenSM, the diagnostics) whose default action for `SIGPIPE` is to die, and a server that
//! went away must be a dead link, not a dead program.

use std::io::{Error, ErrorKind};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;

/// Writes all of `buf` to `stream` with `MSG_NOSIGNAL`: a peer that is gone is an `EPIPE`
/// error. The socket's send timeout still applies (a timeout is `WouldBlock`).
pub(crate) fn send_all(stream: &UnixStream, mut buf: &[u8]) -> std::io::Result<()> {
    while !buf.is_empty() {
        // SAFETY: `send` reads `buf.len()` bytes from `buf`, a live slice, and writes nothing
        // of ours; the descriptor belongs to `stream`, which outlives the call.
        let n = unsafe {
            libc::send(
                stream.as_raw_fd(),
                buf.as_ptr().cast(),
                buf.len(),
                libc::MSG_NOSIGNAL,
            )
        };
        if n < 0 {
            let e = Error::last_os_error();
            if e.kind() == ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            return Err(Error::new(ErrorKind::WriteZero, "the socket took no bytes"));
        }
        buf = &buf[n as usize..];
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn a_closed_peer_is_an_error_not_a_signal() {
        let (a, mut b) = UnixStream::pair().unwrap();
        send_all(&a, b"frame").unwrap();
        let mut got = [0u8; 5];
        b.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"frame");
        drop(b);
        // Without MSG_NOSIGNAL this would raise SIGPIPE (ignored in Rust test binaries, so
        // the check is the error kind).
        let e = send_all(&a, b"more").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::BrokenPipe);
    }
}

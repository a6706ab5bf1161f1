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

/// Writes `buf` to `stream` only if the socket takes it without waiting: `Ok(false)` when it
/// took nothing (its buffer is full). Once part of `buf` is in, the rest is written waiting
/// as [`send_all`] does, so that the stream never holds half a frame.
pub(crate) fn send_now(stream: &UnixStream, buf: &[u8]) -> std::io::Result<bool> {
    loop {
        // SAFETY: as in `send_all`: `buf` is a live slice, read only; the descriptor belongs
        // to `stream`, which outlives the call.
        let n = unsafe {
            libc::send(
                stream.as_raw_fd(),
                buf.as_ptr().cast(),
                buf.len(),
                libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT,
            )
        };
        if n < 0 {
            let e = Error::last_os_error();
            match e.kind() {
                ErrorKind::Interrupted => continue,
                ErrorKind::WouldBlock => return Ok(false),
                _ => return Err(e),
            }
        }
        if n == 0 && !buf.is_empty() {
            return Err(Error::new(ErrorKind::WriteZero, "the socket took no bytes"));
        }
        send_all(stream, &buf[n as usize..])?;
        return Ok(true);
    }
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

    #[test]
    fn send_now_takes_nothing_from_a_full_socket_and_never_waits() {
        let (a, mut b) = UnixStream::pair().unwrap();
        a.set_write_timeout(Some(std::time::Duration::from_secs(60)))
            .unwrap();
        let chunk = [7u8; 4096];
        let mut sent = 0usize;
        while send_now(&a, &chunk).unwrap() {
            sent += chunk.len();
            assert!(sent < 64 << 20, "the socket never filled");
        }
        // Full: nothing more taken, at once.
        assert!(!send_now(&a, b"frame").unwrap());
        let mut got = vec![0u8; sent];
        b.read_exact(&mut got).unwrap();
        assert!(got.iter().all(|&x| x == 7), "only whole chunks went in");
        assert!(send_now(&a, b"frame").unwrap());
    }
}

//! Writing frames to a socket without `SIGPIPE`: a client lives inside programs written in C
//! (OpenSM, the diagnostics) whose default action for `SIGPIPE` is to die, and a server that
//! went away must be a dead link, not a dead program.

use std::io::{Error, ErrorKind};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;

/// Connections the kernel queues before the server accepts them (`listen(2)`'s backlog, as
/// the standard library's `UnixListener::bind`).
const BACKLOG: libc::c_int = 128;

/// A listening socket bound at `path`, its file made with mode 0600 (less the umask) from the
/// start: Linux's `unix_bind` (net/unix/af_unix.c) gives the new file the mode of the
/// socket's own inode less the umask, and that inode's mode is set here (`fchmod`) before the
/// bind. So no other user can connect in the moment between the bind and a `chmod`, as they
/// could to a socket bound with the default mode (0777 less the umask).
pub(crate) fn bind_owner_only(path: &Path) -> std::io::Result<UnixListener> {
    let bytes = path.as_os_str().as_bytes();
    // SAFETY: sockaddr_un is plain data, for which all zeros is a valid value.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    if bytes.len() >= addr.sun_path.len() || bytes.contains(&0) {
        return Err(Error::new(
            ErrorKind::InvalidInput,
            format!(
                "a Unix socket path holds at most {} bytes and no NUL",
                addr.sun_path.len() - 1
            ),
        ));
    }
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (d, &s) in addr.sun_path.iter_mut().zip(bytes) {
        *d = s as libc::c_char;
    }
    // SAFETY: socket(2) takes no pointers.
    let raw = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    if raw < 0 {
        return Err(Error::last_os_error());
    }
    // SAFETY: `raw` is a descriptor socket(2) just made, owned by nothing else.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    // SAFETY: fchmod(2) on a descriptor of `fd`, which outlives the call; no pointers.
    if unsafe { libc::fchmod(fd.as_raw_fd(), 0o600) } != 0 {
        return Err(Error::last_os_error());
    }
    let len = std::mem::offset_of!(libc::sockaddr_un, sun_path) + bytes.len() + 1;
    let len = libc::socklen_t::try_from(len).expect("a sockaddr_un's size fits socklen_t");
    // SAFETY: `addr` is a live sockaddr_un of which bind(2) reads `len` bytes (at most its
    // size: the path was checked shorter than sun_path); the descriptor is `fd`'s.
    let rc = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&raw const addr).cast::<libc::sockaddr>(),
            len,
        )
    };
    if rc != 0 {
        return Err(Error::last_os_error());
    }
    // SAFETY: listen(2) on `fd`'s descriptor; no pointers.
    if unsafe { libc::listen(fd.as_raw_fd(), BACKLOG) } != 0 {
        return Err(Error::last_os_error());
    }
    Ok(UnixListener::from(fd))
}

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

    // The file is never open to others, not even between the bind and a chmod.
    #[test]
    fn a_socket_bound_owner_only_is_made_without_group_or_other_bits() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("sim-bind-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("s.sock");
        let listener = bind_owner_only(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o077, 0, "mode {mode:o}");
        let _c = UnixStream::connect(&path).unwrap();
        assert!(listener.accept().is_ok());
        let long = dir.join("x".repeat(200));
        let e = bind_owner_only(&long).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput);
        assert!(e.to_string().contains("107 bytes"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
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

//! Whose server a client has reached, and whose client a server has: the peer's user id,
//! taken from the kernel (`SO_PEERCRED`), is checked before anything the other side sends is
//! believed.
//!
//! A server takes clients of its own user and root only ([`may_attach`]): another user's
//! program could otherwise send as a port of the fabric (and the SM's port among them), or
//! read what reaches it. Its socket file is made with mode 0600 as well, so that another user
//! cannot even connect; the check holds where the mode does not (a server running as root
//! serves root and nobody else, whatever the file's mode).
//!
//! Without `XDG_RUNTIME_DIR` the default socket is `hca-fabric-$USER.sock` in the temporary
//! directory, a path any user can create first. A server of another user there would see
//! every MAD a client sends and could answer anything; a server running as the client's own
//! user, or as root (who could read our memory anyway), is trusted.

use std::os::fd::AsRawFd as _;
use std::os::unix::net::UnixStream;
use std::path::Path;

use super::RemoteError;

/// The user id of the process at the other end of `stream`, as the kernel recorded it when
/// the connection was made.
pub(crate) fn peer_uid(stream: &UnixStream) -> std::io::Result<u32> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = libc::socklen_t::try_from(std::mem::size_of::<libc::ucred>())
        .expect("ucred's size fits socklen_t");
    // SAFETY: `cred` and `len` are live locals of the sizes passed; the kernel writes at most
    // `len` bytes into `cred` and the length back into `len`.
    let rc = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&raw mut cred).cast(),
            &raw mut len,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(cred.uid)
}

/// The user id this process runs as.
pub(crate) fn our_uid() -> u32 {
    // SAFETY: getuid has no preconditions and cannot fail.
    unsafe { libc::getuid() }
}

/// Whether a server running as `server` takes a client running as `client`: its own user
/// or root.
pub(crate) fn may_attach(server: u32, client: u32) -> bool {
    client == server || client == 0
}

/// Accepts a server running as `ours` or as root; refuses any other with
/// [`RemoteError::ForeignServer`].
pub(crate) fn check_owner(path: &Path, server: u32, ours: u32) -> Result<(), RemoteError> {
    if server == ours || server == 0 {
        return Ok(());
    }
    Err(RemoteError::ForeignServer {
        path: path.to_owned(),
        uid: server,
        ours,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_of_ours_or_of_root_is_trusted_and_another_users_is_not() {
        let p = Path::new("/tmp/hca-fabric-alice.sock");
        assert!(check_owner(p, 1000, 1000).is_ok());
        assert!(check_owner(p, 0, 1000).is_ok());
        assert!(check_owner(p, 0, 0).is_ok());
        let e = check_owner(p, 1001, 1000).unwrap_err();
        assert!(
            matches!(&e, RemoteError::ForeignServer { uid: 1001, ours: 1000, path } if path == p),
            "{e}"
        );
        assert!(e.to_string().contains("uid 1001"), "{e}");
        // Root's client is no exception: it trusts root's and its own servers only.
        assert!(check_owner(p, 1000, 0).is_err());
    }

    #[test]
    fn a_server_takes_its_own_users_and_roots_clients_only() {
        assert!(may_attach(1000, 1000));
        assert!(may_attach(1000, 0));
        assert!(!may_attach(1000, 1001));
        assert!(may_attach(0, 0));
        assert!(!may_attach(0, 1000), "a root server serves root only");
    }

    #[test]
    fn the_peer_of_a_socket_of_ours_is_us() {
        let (a, b) = UnixStream::pair().unwrap();
        assert_eq!(peer_uid(&a).unwrap(), our_uid());
        assert_eq!(peer_uid(&b).unwrap(), our_uid());
    }
}

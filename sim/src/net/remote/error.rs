//! Why starting a fabric server, or attaching to one, failed.

use std::path::PathBuf;

use super::wire::{RefuseCode, WireError};

/// What went wrong between a fabric server and a client.
#[derive(Debug, thiserror::Error)]
pub enum RemoteError {
    /// A socket operation of a client failed.
    #[error("fabric server socket {path}: {what}: {source}{}", hint(source))]
    Io {
        /// The socket's path.
        path: PathBuf,
        /// What was being done.
        what: &'static str,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// A socket operation of the server itself failed (claiming, binding, looking at its
    /// socket, starting its threads): told with the server's hints, not a client's.
    #[error("fabric server socket {path}: {what}: {source}{}", server_hint(source))]
    ServerIo {
        /// The socket's path.
        path: PathBuf,
        /// What was being done.
        what: &'static str,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// Another server answers on the path.
    #[error(
        "a fabric server is already listening on {path}: stop it, or give this one another \
         socket path"
    )]
    Live {
        /// The socket's path.
        path: PathBuf,
    },
    /// Another process held the socket's lock file for as long as a server waits for it
    /// ([`IO_TIMEOUT`](super::IO_TIMEOUT)); a server holds it only while it claims and binds
    /// the path, so that one is stuck.
    #[error(
        "another process has held {lock} for {waited:?}: a fabric server starting on {path} \
         is stuck there; stop it, or give this one another socket path"
    )]
    Locked {
        /// The socket's path.
        path: PathBuf,
        /// The lock file beside it.
        lock: PathBuf,
        /// How long this server waited.
        waited: std::time::Duration,
    },
    /// The path exists and is not a socket; the server does not remove such a file.
    #[error("{path} exists and is not a socket: remove it or choose another socket path")]
    NotASocket {
        /// The path.
        path: PathBuf,
    },
    /// The server refused the attach.
    #[error("the fabric server at {path} refused to attach {node:?} port {port}: {message}")]
    Refused {
        /// The socket's path.
        path: PathBuf,
        /// The node asked for.
        node: String,
        /// The port asked for.
        port: u8,
        /// Why, as a code.
        code: RefuseCode,
        /// Why, in the server's words.
        message: String,
    },
    /// The server speaks another version of the protocol (it refused ours, or answered the
    /// attach with its own): client and server must come from the same build.
    #[error(
        "the fabric server at {path} speaks protocol version {}, this program version {ours}: \
         run this program from the same build of hca as `hca sim serve`, or restart the server \
         with this program's build",
        server.map_or_else(|| "another".to_owned(), |v| v.to_string())
    )]
    Version {
        /// The socket's path.
        path: PathBuf,
        /// The version this program speaks.
        ours: u16,
        /// The server's version, when it said (`None`: a refusal that did not).
        server: Option<u16>,
    },
    /// The server sent something that is not this protocol.
    #[error("the fabric server at {path} sent a malformed frame: {source}")]
    Malformed {
        /// The socket's path.
        path: PathBuf,
        /// What is wrong.
        #[source]
        source: WireError,
    },
    /// The server sent a frame out of turn during the attach.
    #[error("the fabric server at {path} answered the attach with {got}")]
    Unexpected {
        /// The socket's path.
        path: PathBuf,
        /// What came instead.
        got: String,
    },
    /// The server closed the connection before answering.
    #[error("the fabric server at {path} closed the connection before answering the attach")]
    Closed {
        /// The socket's path.
        path: PathBuf,
    },
    /// The process listening on the socket runs as another user (not as us, not as root), so
    /// it is not trusted with the port's MADs.
    #[error(
        "the fabric server at {path} runs as uid {uid}, not as this user (uid {ours}) or root: \
         another user's program may have taken the path; use a socket in a directory only you \
         can write (set XDG_RUNTIME_DIR, or give the path with sim:server=)"
    )]
    ForeignServer {
        /// The socket's path.
        path: PathBuf,
        /// The server's user id.
        uid: u32,
        /// Ours.
        ours: u32,
    },
    /// The network behind the server runs on virtual time, which only a driver waiting on it
    /// moves; a server of many processes needs the wall clock.
    #[error("a fabric server needs a network on real time (ClockMode::Real)")]
    VirtualClock,
}

/// A hint for the errors a server's users meet first.
fn server_hint(e: &std::io::Error) -> &'static str {
    match e.kind() {
        std::io::ErrorKind::NotFound => " (does the socket's directory exist?)",
        std::io::ErrorKind::PermissionDenied => {
            " (may this user create files in the socket's directory?)"
        }
        _ => "",
    }
}

/// A hint for the errors a client's users meet first.
fn hint(e: &std::io::Error) -> &'static str {
    match e.kind() {
        std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused => {
            " (is `hca sim serve` running on this socket?)"
        }
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => {
            " (the server did not answer in time)"
        }
        _ => "",
    }
}

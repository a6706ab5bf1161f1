//! The one error type of the library, and the errno each case becomes at the C boundary
//! (the kernel's umad and libibumad's choices, reference/mad-stack.md §3.1, §3.3).

use driver::DriverError;
use mad::MadError;

/// What the library refuses, and why.
#[derive(Debug, thiserror::Error)]
pub enum UmadError {
    /// The device string could not be opened or brought up.
    #[error(
        "cannot open the HCA {device:?} (set HCA_DEVICE to sim, sim:KEY=VALUE,... or \
         vfio:DDDD:BB:DD.F): {reason}"
    )]
    Init {
        /// The device string.
        device: String,
        /// What failed.
        reason: String,
    },

    /// No CA has this name.
    #[error("no CA named {name:?}: `ibstat -l` lists the CAs this library serves")]
    NoCa {
        /// The name asked for.
        name: String,
    },

    /// The CA has no such port (or none that can carry MADs).
    #[error("CA {ca} has no port {port}")]
    NoPort {
        /// CA name.
        ca: String,
        /// Port asked for.
        port: i32,
    },

    /// The fd is not one `umad_open_port` returned (or it was closed).
    #[error("fd {fd} is not a umad port opened by umad_open_port (or it was closed)")]
    NotAPort {
        /// The fd.
        fd: i32,
    },

    /// An agent ID outside 0-31.
    #[error("agent id {id} is out of range: a umad fd has agents 0-31")]
    AgentRange {
        /// The ID given.
        id: i64,
    },

    /// A send with an agent this fd has not registered.
    #[error("agent {id} is not registered on this fd: register it before sending")]
    SendUnknownAgent {
        /// The ID given.
        id: u32,
    },

    /// An unregister of an agent this fd has not registered.
    #[error("agent {id} is not registered on this fd")]
    UnregisterUnknownAgent {
        /// The ID given.
        id: u32,
    },

    /// All 32 agents of the fd are in use.
    #[error("all 32 agents of this fd are in use: unregister one, or open the port again")]
    AgentsFull,

    /// A registration for a QP other than 0 or 1.
    #[error("QP {qpn} cannot carry MADs: register on QP 0 (SMPs) or 1 (everything else)")]
    BadQpn {
        /// The QP given.
        qpn: u32,
    },

    /// Registration flags the library does not know.
    #[error("registration flags {flags:#x} are not supported (only UMAD_USER_RMPP, 1)")]
    BadFlags {
        /// The flags given.
        flags: u32,
    },

    /// The MAD layer refused the registration.
    #[error("registration refused: {0}")]
    Registration(#[source] MadError),

    /// A registration after the device was removed.
    #[error("the device of this port was removed ({reason}): registrations fail")]
    RegisterRemoved {
        /// What the driver said.
        reason: String,
    },

    /// The device of the fd was removed: its agents are dead.
    #[error("the device of this port was removed ({reason}): close the fd")]
    Dead {
        /// What the driver said.
        reason: String,
    },

    /// A write shorter than the header plus 36 bytes of MAD.
    #[error(
        "a umad write of {len} bytes is too short: it needs the {hdr}-byte header and at \
         least 36 bytes of MAD"
    )]
    ShortWrite {
        /// Bytes given.
        len: usize,
        /// Header size.
        hdr: usize,
    },

    /// A MAD shorter than its class's headers (`ib_get_mad_data_offset`: 56 bytes for the
    /// SA, 64 for DevMgt/DevAdm/BIS, 40 for vendor range 2, 24 otherwise).
    #[error(
        "a MAD of class {class:#04x} of {len} bytes is shorter than that class's {need}-byte          headers: write the whole header"
    )]
    ShortForClass {
        /// MAD bytes given.
        len: usize,
        /// Management class.
        class: u8,
        /// The class's data offset.
        need: usize,
    },

    /// A request whose TID and class an outstanding request of the same agent already uses
    /// (or a response already going to the same destination).
    #[error(
        "a {what} with TID {tid:#018x} class {class:#04x} is already outstanding on this fd \
         (the kernel refuses duplicates): use another TID"
    )]
    Duplicate {
        /// "request" or "response".
        what: &'static str,
        /// The TID as written.
        tid: u64,
        /// Management class.
        class: u8,
    },

    /// The MAD layer refused the send.
    #[error("send refused: {0}")]
    Send(#[source] MadError),

    /// Nothing to read (non-blocking read of an empty queue).
    #[error("no MAD is queued")]
    Again,

    /// `umad_recv`/`umad_poll` waited `timeout_ms` and nothing came.
    #[error("no MAD came within the timeout")]
    TimedOut,

    /// The buffer cannot hold even the first MAD of the next packet (it stays queued).
    #[error("a buffer of {len} bytes cannot hold the next packet ({need} bytes); it stays queued")]
    BufferTooSmall {
        /// Bytes offered.
        len: usize,
        /// Bytes of the first segment with header.
        need: usize,
    },

    /// The next packet is a multi-segment (RMPP) message larger than the buffer: the header
    /// and the first segment were copied, the length tells what is needed, and it stays
    /// queued.
    #[error("the next message needs {need} bytes; a buffer of {len} holds its first segment")]
    NoSpace {
        /// Bytes offered.
        len: usize,
        /// Header plus message length.
        need: usize,
    },

    /// The call came from a child of `fork()`: the devices stayed with the parent.
    #[error(
        "this process is a child of fork(): the HCAs, their DMA memory and the library's \
         threads stayed with the parent, so here the device is as good as removed (use the \
         library in the parent, or in a program the child executes)"
    )]
    Forked,

    /// `poll` failed.
    #[error("poll on the umad fd failed: {0}")]
    Poll(#[source] std::io::Error),

    /// A system resource (socket pair, inotify, temporary directory) could not be had.
    #[error("{what}: {source}")]
    Os {
        /// What was being done.
        what: &'static str,
        /// The error.
        #[source]
        source: std::io::Error,
    },

    /// The driver refused something (capability mask, port query).
    #[error(transparent)]
    Driver(#[from] DriverError),
}

impl UmadError {
    /// The errno the kernel's umad (or libibumad) gives for this case.
    pub fn errno(&self) -> i32 {
        match self {
            UmadError::Init { .. } | UmadError::NoCa { .. } => libc::ENODEV,
            UmadError::NoPort { .. }
            | UmadError::AgentRange { .. }
            | UmadError::UnregisterUnknownAgent { .. }
            | UmadError::BadQpn { .. }
            | UmadError::BadFlags { .. }
            | UmadError::Registration(_)
            | UmadError::ShortWrite { .. }
            | UmadError::ShortForClass { .. }
            | UmadError::Duplicate { .. }
            | UmadError::BufferTooSmall { .. } => libc::EINVAL,
            UmadError::NotAPort { .. } => libc::EBADF,
            UmadError::SendUnknownAgent { .. }
            | UmadError::Dead { .. }
            | UmadError::Forked
            | UmadError::Poll(_)
            | UmadError::Driver(_) => libc::EIO,
            UmadError::AgentsFull => libc::ENOMEM,
            UmadError::RegisterRemoved { .. } => libc::EPIPE,
            UmadError::Send(e) => send_errno(e),
            UmadError::Again => libc::EAGAIN,
            UmadError::TimedOut => libc::ETIMEDOUT,
            UmadError::NoSpace { .. } => libc::ENOSPC,
            UmadError::Os { source, .. } => source.raw_os_error().unwrap_or(libc::EIO),
        }
    }
}

/// What `write` on a kernel umad fd returns for a send the MAD layer refuses.
fn send_errno(e: &MadError) -> i32 {
    match e {
        MadError::MadTooShort { .. }
        | MadError::MadTooLarge { .. }
        | MadError::ClassNotOnQp { .. }
        | MadError::RmppTooShort { .. }
        | MadError::DirectedRoute { .. }
        | MadError::LocalSmp { .. }
        | MadError::RmppClass { .. } => libc::EINVAL,
        MadError::Dma(_) => libc::ENOMEM,
        _ => libc::EIO,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errnos_follow_the_kernel() {
        assert_eq!(UmadError::AgentsFull.errno(), libc::ENOMEM);
        assert_eq!(
            UmadError::RegisterRemoved { reason: "x".into() }.errno(),
            libc::EPIPE
        );
        assert_eq!(UmadError::Dead { reason: "x".into() }.errno(), libc::EIO);
        assert_eq!(UmadError::SendUnknownAgent { id: 3 }.errno(), libc::EIO);
        assert_eq!(
            UmadError::UnregisterUnknownAgent { id: 3 }.errno(),
            libc::EINVAL
        );
        assert_eq!(
            UmadError::Duplicate {
                what: "request",
                tid: 1,
                class: 1
            }
            .errno(),
            libc::EINVAL
        );
        assert_eq!(UmadError::NoSpace { len: 1, need: 2 }.errno(), libc::ENOSPC);
        assert_eq!(
            UmadError::Send(MadError::MadTooLarge { len: 300, max: 256 }).errno(),
            libc::EINVAL
        );
    }
}

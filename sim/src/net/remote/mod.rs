//! One simulated fabric shared by several processes: a [`FabricServer`] holds the
//! [`Network`](crate::net::Network) and serves it over a Unix stream socket; in each client
//! process a [`RemoteLink`] is the [`PortLink`](crate::link::PortLink) its device attaches
//! through, exactly as it would attach to an in-process network. So an OpenSM daemon and the
//! diagnostics run beside it can share one fabric, as `ibsim` and its umad2sim clients do
//! (but one level lower: here the clients are whole simulated HCAs with the driver and MAD
//! layer above them, and the wire carries packets, not umad MADs).
//!
//! # The protocol (version 2)
//!
//! A stream of frames, each a 4-byte big-endian length `N` (1 ..= [`wire::MAX_FRAME`], 1024)
//! followed by `N` bytes: a type byte, then the type's fields, all big-endian, with no
//! padding. A frame whose body is not exactly the size its type and flags give is malformed.
//!
//! A *packet* is: SLID u16, DLID u16, SL u8 (0..=15), flags u8 (bit 0 VL15, bit 1 GRH
//! present, others 0), source QP u32 and destination QP u32 (24 bits), Q_Key u32, P_Key u16,
//! then if the GRH bit is set: SGID 16 bytes, DGID 16 bytes, traffic class u8, flow label
//! u32 (20 bits), hop limit u8; then the 256-byte MAD. (276 bytes, 314 with a GRH.)
//!
//! Client to server:
//!
//! | type | name | fields |
//! |---|---|---|
//! | 0x01 | ATTACH | magic u32 `0x48434146` ("HCAF"), version u16, port u8, name length u16 (1..=512), node name (UTF-8) |
//! | 0x02 | TRANSMIT | a packet leaving the client's port (the server forces its SLID into the port's LIDs: base LID, with the path bits the LMC leaves to the sender) |
//! | 0x03 | LOCAL_MAD | request id u32, flags u8 (bit 0: ignore M_Key), MAD 256 bytes |
//! | 0x04 | PORT_INFO | request id u32 |
//! | 0x05 | MODIFY_CAP_MASK | request id u32, set u32, clear u32 |
//! | 0x06 | COUNT_DROP | counter u8 (1: VL15Dropped, 2: PortRcvErrors), count u32 (1 and up): received packets the device dropped, counted in the port's PMA counter and the network's drops (version 2) |
//!
//! Server to client:
//!
//! | type | name | fields |
//! |---|---|---|
//! | 0x81 | ATTACHED | version u16 |
//! | 0x82 | REFUSED | code u8 ([`RefuseCode`]), message (UTF-8, the rest of the frame) |
//! | 0x83 | DELIVER | a packet arriving at the client's port |
//! | 0x84 | PORT_CHANGED | change u8: 1 Down, 2 Active, 3 Initialized, 4 LID, 5 P_Key, 6 GUID, 7 ClientReregister |
//! | 0x85 | MAD_ANSWER | request id u32, present u8 (0 or 1), the 256-byte answer if present |
//! | 0x86 | PORT_INFO_ANSWER | request id u32, PortState u8, PhysState u8, LMC u8, SM SL u8, LID u16, SM LID u16, port GUID u64, node GUID u64, subnet prefix u64, CapabilityMask u32, P_Key table length u16 |
//! | 0x87 | CAP_MASK_ANSWER | request id u32, the new CapabilityMask u32 |
//!
//! Who may connect: the socket file has mode 0600, so another user's `connect` fails in the
//! kernel (EACCES); a connection that gets past the mode (a process with CAP_DAC_OVERRIDE, a
//! descriptor passed on) is taken only from a process of the server's user or of root (the
//! kernel's `SO_PEERCRED`); any other gets REFUSED Forbidden at once, before the server reads
//! a byte of it. A client checks the
//! server's user the same way before it believes anything it says.
//!
//! The conversation: the client's first frame is ATTACH, whole within the server's attach
//! timeout (10 s by default: one deadline from the connection, however the bytes come). A
//! server with too many connections waiting to attach (64 by default) refuses a new one at
//! once, before reading it, with REFUSED Busy. The server answers ATTACHED, or REFUSED and
//! closes: version mismatch (the versions must be equal; the message starts `this server
//! speaks protocol version N` in every version, [`wire::VERSION_REFUSAL`], so that a client of
//! another version can tell the user both, [`RemoteError::Version`]), unknown node, port 0 or
//! beyond the node's ports, a switch or router, a port another client holds, a malformed
//! frame, no ATTACH in time (Timeout). Then, in any order: the client sends TRANSMIT and
//! COUNT_DROP (no answer), and requests (each answered by the frame of the same id; ids are
//! the client's, answers come in request order); the server sends DELIVER and PORT_CHANGED
//! when the fabric has them. A second ATTACH, a malformed frame or an unknown type ends the
//! connection with REFUSED (the server logs it; other clients are not affected): nothing the
//! client sent after that frame is read, and nothing is written after the REFUSED (packets
//! for the port until it is detached are counted lost). When the
//! connection ends for any reason the server detaches the port and clears the IsSM bit it had
//! set, as closing the `issm` device does, and only then closes its end: a client that shuts
//! down its sending side and reads to the end of the stream knows the port is free
//! (what [`RemoteLink`]'s drop does).
//!
//! # Where things run
//!
//! Server side, the network's own rules hold (see [`crate::net`]): requests are answered
//! under the network's lock by the client's reader thread, deliveries are scheduler events
//! run by the server's clock thread, which queue frames for the client's writer thread.
//! Client side, see [`RemoteLink`]: deliveries are events on the device's scheduler, never
//! run on the reader's stack or a caller's; how a dead server looks is in its documentation.

mod client;
mod error;
mod last_answers;
mod peer;
mod server;
mod sock;
mod wake;
pub mod wire;

use std::path::PathBuf;

pub use self::client::{DEFAULT_TIMEOUT, RemoteLink, RemoteStats, RemoteTarget};
pub use self::error::RemoteError;
pub use self::server::{
    CLIENT_QUEUE, FabricServer, IO_TIMEOUT, MAX_HANDSHAKES, ServerLimits, ServerStats,
};
pub use self::wire::RefuseCode;

/// The socket's file name in the default directory.
pub const SOCKET_NAME: &str = "hca-fabric.sock";

/// Where a fabric server listens when not told: `$XDG_RUNTIME_DIR/hca-fabric.sock` when the
/// variable is set (a per-user directory), else `hca-fabric-$USER.sock` (or
/// `hca-fabric.sock` without `USER`) in the temporary directory. Another user may create that
/// path first; a client checks whose server answers there and refuses another user's
/// ([`RemoteError::ForeignServer`]).
pub fn default_socket_path() -> PathBuf {
    if let Some(dir) = std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir).join(SOCKET_NAME);
    }
    let name = match std::env::var("USER") {
        Ok(u) if !u.is_empty() && !u.contains('/') => format!("hca-fabric-{u}.sock"),
        _ => SOCKET_NAME.to_owned(),
    };
    std::env::temp_dir().join(name)
}

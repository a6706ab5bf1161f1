//! The fabric server: one [`Network`] served to client processes over a Unix stream socket.
//!
//! Threads: one accepts connections; one runs the network's scheduler (every delivery and
//! port change is a scheduler event, so this thread is what moves packets between clients);
//! each client has a reader (its frames, answered under the network's lock) and a writer (the
//! frames for it, from a bounded queue, so a client that stops reading can hold up only
//! itself: when its queue is full, packets for it are dropped and counted, as a port without
//! buffers drops them on hardware: in [`ServerStats::queue_drops`], the port's VL15Dropped or
//! PortRcvErrors and the network's [`drops`](Network::drops) as
//! [`ClientQueueFull`](crate::net::DropReason::ClientQueueFull)). Packets for a client whose
//! connection has ended, failed or been refused are counted too ([`ServerStats::gone_drops`],
//! and in the network's [`drops`](Network::drops) as
//! [`DeviceGone`](crate::net::DropReason::DeviceGone), as an in-process network counts a
//! packet for a device that has gone): every packet the network hands a client is written to
//! its socket or counted.
//!
//! The socket file has mode 0600 from its creation (the socket's own mode is set before the
//! bind, which Linux's `unix_bind` gives the file), and a connection is taken only from the
//! server's own user or root (`SO_PEERCRED`, `peer.rs`): another user's is refused with
//! [`RefuseCode::Forbidden`] before anything is read, and logged.
//!
//! The socket file: a server takes an exclusive `flock` on `PATH.lock` beside it while it
//! claims the path (a stale socket, one nobody answers on, is removed), binds and records
//! which file it bound, so two servers starting together on one path cannot both think they
//! own it: the second sees the first's socket live. The lock file is left in place (empty; the
//! kernel drops the lock with its last descriptor, also when the process dies). At its stop a
//! server removes the socket file only if it is still the one it bound, checked while its
//! listening socket is still open (so the file's inode cannot have been reused by another).

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{ErrorKind, Read};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::error::RemoteError;
use super::peer::{may_attach, our_uid, peer_uid};
use super::sock::{bind_owner_only, send_all};
use super::wake::{Stop, StopSignal, Woken, stop_pair};
use super::wire::{
    ClientMsg, RefuseCode, ServerMsg, VERSION, VERSION_REFUSAL, WireError, read_frame,
};
use crate::clock::ClockMode;
use crate::fabric::PortId;
use crate::link::{PortChange, PortLink, PortSink, ReceiveDrop};
use crate::net::{AttachedPort, DropReason, NetError, Network};
use crate::packet::Packet;

/// Frames waiting for one client before packets for it are dropped.
pub const CLIENT_QUEUE: usize = 16 * 1024;
/// How long a new connection may take to send its ATTACH by default ([`ServerLimits`]), and
/// how long a write to a client may block.
pub const IO_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections accepted and not yet attached, by default, before more are refused.
pub const MAX_HANDSHAKES: usize = 64;

/// What a server lets its connections take before they attach. Attached connections need no
/// limit of their own: each holds a CA port of the topology, which one connection at a time
/// may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerLimits {
    /// How long a new connection may take to send its whole ATTACH ([`IO_TIMEOUT`]).
    pub attach_timeout: Duration,
    /// Connections accepted and not yet attached (each a thread and two descriptors) beyond
    /// which a new one is refused with [`RefuseCode::Busy`] ([`MAX_HANDSHAKES`]).
    pub max_handshakes: usize,
}

impl Default for ServerLimits {
    fn default() -> ServerLimits {
        ServerLimits {
            attach_timeout: IO_TIMEOUT,
            max_handshakes: MAX_HANDSHAKES,
        }
    }
}

/// How long the accept thread may wait to write a refusal for a server too busy.
const BUSY_WRITE: Duration = Duration::from_millis(100);
/// How often the scheduler thread looks at the stop flag when nothing happens.
const CLOCK_TICK: Duration = Duration::from_millis(200);
/// How often a starting server tries again for the lock another server holds.
const LOCK_RETRY: Duration = Duration::from_millis(5);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What the server has seen since it started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ServerStats {
    /// Connections accepted.
    pub connections: u64,
    /// Attaches granted.
    pub attaches: u64,
    /// Connections refused (bad attach, version, malformed or out-of-turn frames, too many
    /// waiting to attach, no ATTACH in time).
    pub refused: u64,
    /// Connections closed for a malformed frame (also counted in `refused`). A connection
    /// that ends inside a frame once attached (a client killed while it wrote) is a
    /// disconnect, not counted here.
    pub malformed: u64,
    /// Connections refused because [`ServerLimits::max_handshakes`] connections were already
    /// waiting to attach (also counted in `refused`).
    pub busy: u64,
    /// Connections that sent no whole ATTACH within [`ServerLimits::attach_timeout`] (also
    /// counted in `refused`).
    pub timed_out: u64,
    /// Connections of a process of another user than the server's, not root, refused with
    /// [`RefuseCode::Forbidden`] before anything was read (also counted in `refused`).
    pub forbidden: u64,
    /// Packets and port changes dropped because a client's queue was full. The packets are
    /// also counted in the network's [`drops`](Network::drops) as
    /// [`ClientQueueFull`](crate::net::DropReason::ClientQueueFull) and in the client port's
    /// VL15Dropped (an SMP) or PortRcvErrors (a data packet).
    pub queue_drops: u64,
    /// Packets (DELIVER frames) written to clients' sockets.
    pub sent: u64,
    /// Packets for a client whose connection had ended, failed or been refused (nothing is
    /// written after a REFUSED) before they could be written: queued when it went, or handed
    /// over after. Also counted in the network's
    /// [`drops`](Network::drops) as [`DeviceGone`](crate::net::DropReason::DeviceGone). (Port
    /// changes for a gone client are news to nobody, as in the network: not counted.)
    pub gone_drops: u64,
}

#[derive(Default)]
struct Counters {
    connections: AtomicU64,
    attaches: AtomicU64,
    refused: AtomicU64,
    malformed: AtomicU64,
    busy: AtomicU64,
    timed_out: AtomicU64,
    forbidden: AtomicU64,
    queue_drops: AtomicU64,
    sent: AtomicU64,
    gone_drops: AtomicU64,
}

/// A connection's thread and a handle on its socket (to close it at shutdown).
struct Conn {
    stream: UnixStream,
    thread: JoinHandle<()>,
}

/// Ends a connection's record when its thread is done (also if it panicked): its socket
/// handle closed, its thread handed over to be joined ([`Shared::conn_ended`]).
struct ConnEnd {
    shared: Arc<Shared>,
    id: u64,
}

impl Drop for ConnEnd {
    fn drop(&mut self) {
        self.shared.conn_ended(self.id);
    }
}

/// What the server's threads share.
struct Shared {
    net: Network,
    stop: AtomicBool,
    /// Connections open, by number: each a thread and a descriptor of its socket here.
    conns: Mutex<HashMap<u64, Conn>>,
    /// Threads whose connection has ended, to be joined (by the clock thread within a tick,
    /// by the accept thread, at the stop).
    finished: Mutex<Vec<JoinHandle<()>>>,
    /// Attached clients by connection number: node name and port.
    attached: Mutex<HashMap<u64, (String, u8)>>,
    /// Connections accepted and not yet attached (or refused).
    handshakes: AtomicUsize,
    next_conn: AtomicU64,
    counters: Counters,
    limits: ServerLimits,
    /// The user the server runs as: its clients must run as it, or as root.
    uid: u32,
    /// The user id the server takes its clients' to be, instead of the kernel's: for a test of
    /// another user's client, which a test cannot be.
    #[cfg(test)]
    peer_uid: Mutex<Option<u32>>,
    /// Runs right after a client's port is attached, for a test to make the network deliver
    /// to the client at the earliest moment it can.
    #[cfg(test)]
    after_attach: Mutex<Option<AttachHook>>,
}

impl Shared {
    /// Connection `id` has ended: its socket handle is closed and its thread, about to
    /// return, is handed over to be joined. Nothing when the stop has taken the connection
    /// already (it joins the thread itself).
    fn conn_ended(&self, id: u64) {
        let mut conns = lock(&self.conns);
        if let Some(c) = conns.remove(&id) {
            drop(c.stream);
            lock(&self.finished).push(c.thread);
        }
    }

    /// Joins the threads whose connection has ended. Never called by a connection's thread
    /// (which would find its own handle).
    fn reap(&self) {
        let done = std::mem::take(&mut *lock(&self.finished));
        for t in done {
            let _ = t.join();
        }
    }

    /// Counts `msg`, for a client that has gone, as lost: a packet is a drop, a port change
    /// nothing.
    fn lost(&self, msg: &ServerMsg) {
        if matches!(msg, ServerMsg::Deliver(_)) {
            self.counters.gone_drops.fetch_add(1, Ordering::Relaxed);
            self.net.scheduler().count_undelivered();
        }
    }
}

/// What a test runs right after a client's port is attached.
#[cfg(test)]
type AttachHook = Box<dyn Fn(&dyn PortSink) + Send>;

/// A running fabric server. Dropping it (or [`FabricServer::shutdown`]) stops it: every
/// client is disconnected (detached, IsSM cleared), every thread joined, and the socket file
/// removed if it is still the one this server made.
pub struct FabricServer {
    shared: Arc<Shared>,
    path: PathBuf,
    /// Device and inode of the socket file this server bound.
    identity: (u64, u64),
    /// Wakes the accept thread at the stop (not a connection to the path: see `wake.rs`).
    wake: Stop,
    /// The listening socket, shared with the accept thread and held until the socket file
    /// is removed: while it is open the file's inode is taken, so `identity` still names
    /// this server's socket and no other's.
    listener: Option<Arc<UnixListener>>,
    accept: Option<JoinHandle<()>>,
    clock: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for FabricServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FabricServer")
            .field("path", &self.path)
            .field("attached", &self.attached())
            .finish_non_exhaustive()
    }
}

/// Makes `path` free for a new socket: nothing there, or a socket nobody answers on (a server
/// that died without removing it), which is removed. A live socket or another kind of file is
/// an error.
fn claim(path: &Path) -> Result<(), RemoteError> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => {
            return Err(RemoteError::ServerIo {
                path: path.to_owned(),
                what: "looking at the socket path",
                source: e,
            });
        }
    };
    if !meta.file_type().is_socket() {
        return Err(RemoteError::NotASocket {
            path: path.to_owned(),
        });
    }
    match UnixStream::connect(path) {
        Ok(_) => Err(RemoteError::Live {
            path: path.to_owned(),
        }),
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
            tracing::info!(path = %path.display(), "removing a stale fabric server socket");
            match std::fs::remove_file(path) {
                // Removed meanwhile by the server that made it, at the end of its stop.
                Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
                r => r.map_err(|e| RemoteError::ServerIo {
                    path: path.to_owned(),
                    what: "removing a stale socket",
                    source: e,
                }),
            }
        }
        Err(e) => Err(RemoteError::ServerIo {
            path: path.to_owned(),
            what: "checking whether a server answers",
            source: e,
        }),
    }
}

/// `PATH.lock`: the lock file of the socket at `path`.
fn lock_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".lock");
    PathBuf::from(name)
}

/// An exclusive `flock` on a socket's lock file, released when dropped (the kernel releases
/// it with the file's last descriptor, so a server that dies leaves no lock behind).
struct PathLock {
    _file: File,
}

/// Takes the lock on `path`'s lock file, waiting up to [`IO_TIMEOUT`] for a server that holds
/// it (it holds it only while it claims and binds the path).
fn lock_socket_path(path: &Path) -> Result<PathLock, RemoteError> {
    let lock = lock_path(path);
    let file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&lock)
        .map_err(|e| RemoteError::ServerIo {
            path: path.to_owned(),
            what: "opening the socket's lock file (PATH.lock)",
            source: e,
        })?;
    let by = Instant::now() + IO_TIMEOUT;
    loop {
        // SAFETY: flock(2) takes a descriptor of `file`, which outlives the call, and reads
        // or writes no memory of ours.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
            return Ok(PathLock { _file: file });
        }
        let e = std::io::Error::last_os_error();
        match e.kind() {
            ErrorKind::Interrupted => {}
            ErrorKind::WouldBlock if Instant::now() < by => std::thread::sleep(LOCK_RETRY),
            ErrorKind::WouldBlock => {
                return Err(RemoteError::Locked {
                    path: path.to_owned(),
                    lock,
                    waited: IO_TIMEOUT,
                });
            }
            _ => {
                return Err(RemoteError::ServerIo {
                    path: path.to_owned(),
                    what: "locking the socket's lock file (PATH.lock)",
                    source: e,
                });
            }
        }
    }
}

impl FabricServer {
    /// Serves `net` on a new socket at `path`, with the default [`ServerLimits`]. Refuses a
    /// path where a server answers ([`RemoteError::Live`]) or that is not a socket; replaces
    /// a stale socket. Servers starting on one path take turns (a lock on `PATH.lock`, left
    /// in place), so of two starting together on a free or stale path one gets it and the
    /// other finds it live. The network must run on real time.
    pub fn start(net: Network, path: &Path) -> Result<FabricServer, RemoteError> {
        FabricServer::start_with(net, path, ServerLimits::default())
    }

    /// [`FabricServer::start`] with `limits`.
    pub fn start_with(
        net: Network,
        path: &Path,
        limits: ServerLimits,
    ) -> Result<FabricServer, RemoteError> {
        if net.scheduler().clock().mode() != ClockMode::Real {
            return Err(RemoteError::VirtualClock);
        }
        // Held while the path is claimed, bound and recorded: no other server can take the
        // path in between (remove the stale socket after we did, and then ours).
        let guard = lock_socket_path(path)?;
        claim(path)?;
        // Mode 0600 from the start (see `bind_owner_only`), then exactly 0600 whatever the
        // umask took away: only our user (and root) may connect.
        let listener = bind_owner_only(path).map_err(|e| RemoteError::ServerIo {
            path: path.to_owned(),
            what: "binding",
            source: e,
        })?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(|e| {
            RemoteError::ServerIo {
                path: path.to_owned(),
                what: "making the socket its owner's only (mode 0600)",
                source: e,
            }
        })?;
        // Non-blocking: the accept thread accepts only what poll() reported, and a client
        // that went away meanwhile must not leave it blocked in accept().
        listener
            .set_nonblocking(true)
            .map_err(|e| RemoteError::ServerIo {
                path: path.to_owned(),
                what: "making the socket non-blocking",
                source: e,
            })?;
        let (wake, signal) = stop_pair().map_err(|e| RemoteError::ServerIo {
            path: path.to_owned(),
            what: "making the stop signal",
            source: e,
        })?;
        let meta = std::fs::symlink_metadata(path).map_err(|e| RemoteError::ServerIo {
            path: path.to_owned(),
            what: "looking at the new socket",
            source: e,
        })?;
        drop(guard);
        let listener = Arc::new(listener);
        let shared = Arc::new(Shared {
            net,
            stop: AtomicBool::new(false),
            conns: Mutex::new(HashMap::new()),
            finished: Mutex::new(Vec::new()),
            attached: Mutex::new(HashMap::new()),
            handshakes: AtomicUsize::new(0),
            next_conn: AtomicU64::new(1),
            counters: Counters::default(),
            limits,
            uid: our_uid(),
            #[cfg(test)]
            peer_uid: Mutex::new(None),
            #[cfg(test)]
            after_attach: Mutex::new(None),
        });
        let spawn_err = |e| RemoteError::ServerIo {
            path: path.to_owned(),
            what: "starting a server thread",
            source: e,
        };
        let s = shared.clone();
        let clock = std::thread::Builder::new()
            .name("fabric-clock".into())
            .spawn(move || run_clock(&s))
            .map_err(spawn_err)?;
        let s = shared.clone();
        let l = listener.clone();
        let accept = std::thread::Builder::new()
            .name("fabric-accept".into())
            .spawn(move || accept_loop(&s, &l, &signal));
        let mut server = FabricServer {
            shared,
            path: path.to_owned(),
            identity: (meta.dev(), meta.ino()),
            wake,
            listener: Some(listener),
            accept: None,
            clock: Some(clock),
        };
        server.accept = Some(accept.map_err(spawn_err)?);
        tracing::info!(path = %path.display(), "fabric server listening");
        Ok(server)
    }

    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The network served.
    pub fn network(&self) -> &Network {
        &self.shared.net
    }

    /// The clients attached now: node name and port, sorted.
    pub fn attached(&self) -> Vec<(String, u8)> {
        let mut v: Vec<(String, u8)> = lock(&self.shared.attached).values().cloned().collect();
        v.sort();
        v
    }

    /// What the server holds for connections now: those open (each a thread and a
    /// descriptor of its socket), and those ended whose thread is not joined yet (within a
    /// tick of its clock, 200 ms). 0 when no client is connected, once the last one's end
    /// is done.
    pub fn connections(&self) -> usize {
        lock(&self.shared.conns).len() + lock(&self.shared.finished).len()
    }

    /// What the server has counted.
    pub fn stats(&self) -> ServerStats {
        let c = &self.shared.counters;
        ServerStats {
            connections: c.connections.load(Ordering::Relaxed),
            attaches: c.attaches.load(Ordering::Relaxed),
            refused: c.refused.load(Ordering::Relaxed),
            malformed: c.malformed.load(Ordering::Relaxed),
            busy: c.busy.load(Ordering::Relaxed),
            timed_out: c.timed_out.load(Ordering::Relaxed),
            forbidden: c.forbidden.load(Ordering::Relaxed),
            queue_drops: c.queue_drops.load(Ordering::Relaxed),
            sent: c.sent.load(Ordering::Relaxed),
            gone_drops: c.gone_drops.load(Ordering::Relaxed),
        }
    }

    /// Stops the server (what dropping it does), for callers that want to say so.
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        if self.shared.stop.swap(true, Ordering::SeqCst) {
            return;
        }
        self.wake.ask();
        if let Some(t) = self.accept.take() {
            let _ = t.join();
        }
        self.shared
            .net
            .scheduler()
            .schedule_in(Duration::ZERO, Box::new(|| {}));
        if let Some(t) = self.clock.take() {
            let _ = t.join();
        }
        let conns = std::mem::take(&mut *lock(&self.shared.conns));
        for c in conns.values() {
            let _ = c.stream.shutdown(std::net::Shutdown::Both);
        }
        for (_, c) in conns {
            let _ = c.thread.join();
        }
        // Those that ended before: handed over before the connections were taken.
        self.shared.reap();
        // Only the socket this server bound: another server may have replaced the file. Our
        // listening socket, still open, keeps the inode we recorded ours (Linux's unix_bind
        // holds the bound path until unix_release_sock), so a match is no reused inode.
        if let Ok(m) = std::fs::symlink_metadata(&self.path) {
            if (m.dev(), m.ino()) == self.identity {
                let _ = std::fs::remove_file(&self.path);
            }
        }
        drop(self.listener.take());
        tracing::info!(path = %self.path.display(), "fabric server stopped");
    }
}

impl Drop for FabricServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Runs the network's scheduler until the server stops: deliveries to clients happen here.
/// Also joins, every tick, the threads of connections that have ended.
fn run_clock(shared: &Shared) {
    let sched = shared.net.scheduler();
    while !shared.stop.load(Ordering::SeqCst) {
        sched.run_until(sched.now() + CLOCK_TICK);
        shared.reap();
    }
}

fn accept_loop(shared: &Arc<Shared>, listener: &UnixListener, signal: &StopSignal) {
    loop {
        match super::wake::wait(listener, signal) {
            Ok(Woken::Stop) => return,
            Ok(Woken::Connection) => {}
            Err(e) => {
                tracing::warn!("fabric server: waiting for connections failed: {e}");
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
        }
        let stream = match listener.accept() {
            Ok((s, _)) => s,
            // The client gave up between poll() and accept().
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(e) => {
                if shared.stop.load(Ordering::SeqCst) {
                    return;
                }
                // Out of file descriptors and the like: wait rather than spin.
                tracing::warn!("fabric server: accept failed: {e}");
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
        };
        if shared.stop.load(Ordering::SeqCst) {
            return;
        }
        // Connections do not inherit the listener's O_NONBLOCK on Linux; make sure anyway,
        // since every read and write of a connection relies on blocking with a timeout.
        if let Err(e) = stream.set_nonblocking(false) {
            tracing::warn!("fabric server: a new connection: {e}; closing it");
            continue;
        }
        shared.counters.connections.fetch_add(1, Ordering::Relaxed);
        let id = shared.next_conn.fetch_add(1, Ordering::Relaxed);
        if !peer_allowed(shared, id, &stream) {
            continue;
        }
        // Only this thread adds, so the count cannot pass the limit between the check and the
        // increment.
        let max = shared.limits.max_handshakes;
        if shared.handshakes.load(Ordering::SeqCst) >= max {
            shared.counters.busy.fetch_add(1, Ordering::Relaxed);
            let m = format!(
                "{max} connections are already waiting to attach; try again when they have"
            );
            tracing::warn!("fabric server: connection {id}: {m}; refusing it");
            // A fresh socket's buffer takes the refusal at once; never wait on it here.
            let _ = stream.set_write_timeout(Some(BUSY_WRITE));
            refuse_now(shared, &stream, RefuseCode::Busy, &m);
            let _ = stream.shutdown(std::net::Shutdown::Both);
            continue;
        }
        let handshake = Handshake::begin(shared);
        let Ok(handle) = stream.try_clone() else {
            tracing::warn!("fabric server: cannot clone connection {id}; closing it");
            continue;
        };
        let s = shared.clone();
        // Held until the connection is recorded, so that its end (which takes the lock)
        // finds it.
        let mut conns = lock(&shared.conns);
        let thread = std::thread::Builder::new()
            .name(format!("fabric-client-{id}"))
            .spawn(move || {
                let _end = ConnEnd {
                    shared: s.clone(),
                    id,
                };
                serve(&s, id, &stream, handshake);
            });
        match thread {
            Ok(thread) => {
                conns.insert(
                    id,
                    Conn {
                        stream: handle,
                        thread,
                    },
                );
            }
            Err(e) => tracing::warn!("fabric server: no thread for connection {id}: {e}"),
        }
        drop(conns);
        shared.reap();
    }
}

/// Whether the process at the other end of a new connection `id` may attach: it runs as the
/// server's user or as root (`SO_PEERCRED`, the credentials the kernel recorded at its
/// connect). Another is refused with [`RefuseCode::Forbidden`] and closed before anything of
/// it is read; a connection whose credentials cannot be read is closed.
fn peer_allowed(shared: &Shared, id: u64, stream: &UnixStream) -> bool {
    let uid = match peer_uid(stream) {
        Ok(uid) => uid,
        Err(e) => {
            tracing::warn!(
                "fabric server: connection {id}: cannot tell whose it is (SO_PEERCRED): {e}; \
                 closing it"
            );
            let _ = stream.shutdown(std::net::Shutdown::Both);
            return false;
        }
    };
    #[cfg(test)]
    let uid = lock(&shared.peer_uid).unwrap_or(uid);
    if may_attach(shared.uid, uid) {
        return true;
    }
    shared.counters.forbidden.fetch_add(1, Ordering::Relaxed);
    let m = format!(
        "this fabric server runs as uid {}: only that user or root may attach, not uid {uid}; \
         start a fabric server of your own (hca sim serve --socket PATH) and attach to it",
        shared.uid
    );
    tracing::warn!("fabric server: connection {id}: {m}; refusing it");
    // A fresh socket's buffer takes the refusal at once; never wait on it here.
    let _ = stream.set_write_timeout(Some(BUSY_WRITE));
    refuse_now(shared, stream, RefuseCode::Forbidden, &m);
    let _ = stream.shutdown(std::net::Shutdown::Both);
    false
}

/// What the network holds to reach one client: its queue.
struct ClientSink {
    tx: SyncSender<ServerMsg>,
    shared: Arc<Shared>,
    id: u64,
    /// The client's port, whose counters count the packets its full queue drops.
    port: PortId,
}

impl ClientSink {
    fn push(&self, msg: ServerMsg) {
        match self.tx.try_send(msg) {
            Ok(()) => {}
            Err(TrySendError::Full(msg)) => {
                // A packet the port could not take: its counters and the network's drops
                // count it (a port change lost is news to nobody's counters).
                if let ServerMsg::Deliver(p) = &msg {
                    self.shared.net.count_port_drop(
                        self.port,
                        ReceiveDrop::for_packet(p),
                        DropReason::ClientQueueFull,
                    );
                }
                self.full();
            }
            // The writer has gone (it outlives every sender unless it died).
            Err(TrySendError::Disconnected(msg)) => self.shared.lost(&msg),
        }
    }

    fn full(&self) {
        let n = self
            .shared
            .counters
            .queue_drops
            .fetch_add(1, Ordering::Relaxed);
        if n.is_power_of_two() {
            tracing::warn!(
                "fabric server: client {} does not read; {} frames dropped so far",
                self.id,
                n + 1
            );
        }
    }
}

impl PortSink for ClientSink {
    fn deliver(&self, _port: u8, packet: Packet) {
        self.push(ServerMsg::Deliver(packet));
    }

    fn port_changed(&self, _port: u8, change: PortChange) {
        self.push(ServerMsg::PortChanged(change));
    }
}

/// Writes `msg` straight to a connection that has no writer thread yet (refusals during the
/// attach).
fn refuse_now(shared: &Shared, stream: &UnixStream, code: RefuseCode, message: &str) {
    shared.counters.refused.fetch_add(1, Ordering::Relaxed);
    let msg = ServerMsg::Refused {
        code,
        message: message.to_owned(),
    };
    let _ = send_all(stream, &msg.encode());
}

fn refusal_of(e: &NetError) -> RefuseCode {
    match e {
        NetError::NoSuchNode { .. } | NetError::NoSuchNodeId { .. } => RefuseCode::UnknownNode,
        NetError::NoSuchPort { .. } => RefuseCode::NoSuchPort,
        NetError::NotACa { .. } => RefuseCode::NotACa,
        NetError::AlreadyAttached { .. } => RefuseCode::PortTaken,
        _ => RefuseCode::Protocol,
    }
}

/// A connection read against one deadline: each read may wait only what is left of it (a
/// socket's receive timeout alone restarts with every read, so a byte at a time could hold a
/// connection for ever).
struct Deadline<'a> {
    stream: &'a UnixStream,
    by: Instant,
}

impl Read for Deadline<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let left = self.by.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(ErrorKind::TimedOut.into());
        }
        self.stream.set_read_timeout(Some(left))?;
        (&mut &*self.stream).read(buf)
    }
}

/// The first frame of a connection: (node, port) of a valid ATTACH, or the refusal sent.
fn handshake(shared: &Shared, id: u64, stream: &UnixStream) -> Option<(String, u8)> {
    let _ = stream.set_write_timeout(Some(IO_TIMEOUT));
    let limit = shared.limits.attach_timeout;
    let mut by_deadline = Deadline {
        stream,
        by: Instant::now() + limit,
    };
    let body = match read_frame(&mut by_deadline) {
        Ok(Some(b)) => b,
        Ok(None) => {
            tracing::debug!("fabric server: connection {id} closed before attaching");
            return None;
        }
        Err(_) if shared.stop.load(Ordering::SeqCst) => return None,
        Err(WireError::Io {
            kind: ErrorKind::WouldBlock | ErrorKind::TimedOut,
            ..
        }) => {
            let m = format!("no ATTACH within {limit:?} of connecting");
            tracing::info!("fabric server: connection {id}: {m}; closing it");
            shared.counters.timed_out.fetch_add(1, Ordering::Relaxed);
            refuse_now(shared, stream, RefuseCode::Timeout, &m);
            return None;
        }
        Err(e @ WireError::Io { .. }) => {
            tracing::debug!("fabric server: connection {id} failed before attaching: {e}");
            return None;
        }
        Err(e) => {
            tracing::warn!("fabric server: connection {id}: {e}; closing it");
            shared.counters.malformed.fetch_add(1, Ordering::Relaxed);
            refuse_now(shared, stream, RefuseCode::Malformed, &e.to_string());
            return None;
        }
    };
    match ClientMsg::decode(&body) {
        Ok(ClientMsg::Attach {
            version,
            node,
            port,
        }) => {
            if version != VERSION {
                // Starts with VERSION_REFUSAL in every version: the client reads ours there.
                let m = format!(
                    "{VERSION_REFUSAL}{VERSION}, the client {version}: run the client from the \
                     same build of hca as `hca sim serve`, or restart the server with the \
                     client's build"
                );
                tracing::warn!("fabric server: connection {id}: {m}");
                refuse_now(shared, stream, RefuseCode::Version, &m);
                return None;
            }
            if shared.stop.load(Ordering::SeqCst) {
                refuse_now(
                    shared,
                    stream,
                    RefuseCode::ShuttingDown,
                    "the server is stopping",
                );
                return None;
            }
            Some((node, port))
        }
        Ok(other) => {
            let m = format!("the first frame must be ATTACH, not {}", kind(&other));
            tracing::warn!("fabric server: connection {id}: {m}; closing it");
            refuse_now(shared, stream, RefuseCode::Protocol, &m);
            None
        }
        Err(e) => {
            tracing::warn!("fabric server: connection {id}: {e}; closing it");
            shared.counters.malformed.fetch_add(1, Ordering::Relaxed);
            refuse_now(shared, stream, RefuseCode::Malformed, &e.to_string());
            None
        }
    }
}

fn kind(m: &ClientMsg) -> &'static str {
    match m {
        ClientMsg::Attach { .. } => "ATTACH",
        ClientMsg::Transmit(_) => "TRANSMIT",
        ClientMsg::LocalMad { .. } => "LOCAL_MAD",
        ClientMsg::PortInfo { .. } => "PORT_INFO",
        ClientMsg::ModifyCapMask { .. } => "MODIFY_CAP_MASK",
        ClientMsg::CountDrop { .. } => "COUNT_DROP",
    }
}

/// A connection counted in [`Shared::handshakes`] until this is dropped (also when its
/// thread could not be started).
struct Handshake(Arc<Shared>);

impl Handshake {
    fn begin(shared: &Arc<Shared>) -> Handshake {
        shared.handshakes.fetch_add(1, Ordering::SeqCst);
        Handshake(shared.clone())
    }
}

impl Drop for Handshake {
    fn drop(&mut self) {
        self.0.handshakes.fetch_sub(1, Ordering::SeqCst);
    }
}

/// One connection, from its ATTACH to its end.
fn serve(shared: &Arc<Shared>, id: u64, stream: &UnixStream, counted: Handshake) {
    let attach = handshake(shared, id, stream);
    drop(counted);
    let Some((node, port)) = attach else {
        let _ = stream.shutdown(std::net::Shutdown::Both);
        return;
    };
    // The port, for the counters of what its queue drops (the attach below refuses a port
    // that is no CA's or taken).
    let pid = match shared.net.port(node.as_str(), port) {
        Ok(p) => p,
        Err(e) => {
            tracing::info!("fabric server: connection {id} refused: {e}");
            refuse_now(shared, stream, refusal_of(&e), &e.to_string());
            let _ = stream.shutdown(std::net::Shutdown::Both);
            return;
        }
    };
    // The writer starts before the port is attached and waits for `go` to write ATTACHED:
    // from the attach on, the network may deliver to the client at any time (an SM sweeping
    // the fabric), the packets queue meanwhile, and the client must read the answer to its
    // ATTACH before any DELIVER. If the attach fails the writer is never let go and the
    // refusal is written here.
    let w = match stream.try_clone() {
        Ok(w) => w,
        Err(e) => {
            tracing::warn!("fabric server: connection {id}: no writer: {e}");
            refuse_now(shared, stream, RefuseCode::ShuttingDown, &e.to_string());
            let _ = stream.shutdown(std::net::Shutdown::Both);
            return;
        }
    };
    let (tx, rx) = sync_channel(CLIENT_QUEUE);
    let (go, ready) = sync_channel::<()>(1);
    let s = shared.clone();
    let writer = match std::thread::Builder::new()
        .name(format!("fabric-write-{id}"))
        .spawn(move || write_loop(&s, id, &w, &ready, &rx))
    {
        Ok(t) => t,
        Err(e) => {
            tracing::warn!("fabric server: connection {id}: no writer: {e}");
            refuse_now(shared, stream, RefuseCode::ShuttingDown, &e.to_string());
            let _ = stream.shutdown(std::net::Shutdown::Both);
            return;
        }
    };
    let sink: Arc<dyn PortSink> = Arc::new(ClientSink {
        tx: tx.clone(),
        shared: shared.clone(),
        id,
        port: pid,
    });
    let link = match shared.net.attach_port(node.as_str(), port, &sink) {
        Ok(l) => l,
        Err(e) => {
            tracing::info!("fabric server: connection {id} refused: {e}");
            drop(go);
            let _ = writer.join();
            refuse_now(shared, stream, refusal_of(&e), &e.to_string());
            let _ = stream.shutdown(std::net::Shutdown::Both);
            return;
        }
    };
    #[cfg(test)]
    if let Some(hook) = lock(&shared.after_attach).as_ref() {
        hook(sink.as_ref());
    }
    // Recorded before the writer is let go, so that a client that has read ATTACHED is
    // counted.
    shared.counters.attaches.fetch_add(1, Ordering::Relaxed);
    lock(&shared.attached).insert(id, (node.clone(), port));
    let _ = go.send(());
    tracing::info!("fabric server: connection {id} attached at {node:?} port {port}");
    let _ = stream.set_read_timeout(None);
    let why = read_loop(shared, id, stream, &link, &tx);
    // Detach first (the network forgets the client and clears the IsSM it set), then let the
    // writer drain what is queued and end, and only then close our end: a client that reads
    // the end of the stream knows its port is free (a dropped RemoteLink waits for it).
    drop(link);
    lock(&shared.attached).remove(&id);
    drop(sink);
    drop(tx);
    let _ = writer.join();
    let _ = stream.shutdown(std::net::Shutdown::Both);
    tracing::info!("fabric server: connection {id} ({node:?} port {port}) detached: {why}");
}

/// Answers a client's frames until it disconnects or misbehaves; returns why it ended. A
/// frame that earns a REFUSED is the last one read: nothing the client sent after it is
/// looked at.
fn read_loop(
    shared: &Shared,
    id: u64,
    stream: &UnixStream,
    link: &AttachedPort,
    tx: &SyncSender<ServerMsg>,
) -> String {
    loop {
        let body = match read_frame(&mut &*stream) {
            Ok(Some(b)) => b,
            Ok(None) => return "disconnected".into(),
            // A client killed while it wrote: gone, not misbehaving.
            Err(e @ WireError::Truncated { .. }) => return format!("disconnected: {e}"),
            Err(e) => {
                if shared.stop.load(Ordering::SeqCst) {
                    return "the server is stopping".into();
                }
                if matches!(e, WireError::Io { .. }) {
                    return e.to_string();
                }
                return malformed(shared, id, tx, &e);
            }
        };
        let msg = match ClientMsg::decode(&body) {
            Ok(m) => m,
            Err(e) => return malformed(shared, id, tx, &e),
        };
        let answer = match msg {
            ClientMsg::Transmit(p) => {
                // The client's SLID is not believed: it leaves with one of its port's LIDs.
                link.transmit_as_own(p);
                continue;
            }
            ClientMsg::CountDrop { drop, count } => {
                link.count_drops(drop, u64::from(count));
                continue;
            }
            ClientMsg::LocalMad {
                id: rid,
                ignore_mkey,
                mad,
            } => ServerMsg::MadAnswer {
                id: rid,
                mad: link.local_mad(&mad, ignore_mkey).map(Box::new),
            },
            ClientMsg::PortInfo { id: rid } => ServerMsg::PortInfo {
                id: rid,
                snapshot: link.port_info(),
            },
            ClientMsg::ModifyCapMask {
                id: rid,
                set,
                clear,
            } => ServerMsg::CapMask {
                id: rid,
                mask: link.modify_capability_mask(set, clear),
            },
            ClientMsg::Attach { .. } => {
                shared.counters.refused.fetch_add(1, Ordering::Relaxed);
                let m = "ATTACH on a connection already attached: one port per connection";
                tracing::warn!("fabric server: connection {id}: {m}; closing it");
                let _ = tx.send(ServerMsg::Refused {
                    code: RefuseCode::Protocol,
                    message: m.into(),
                });
                return m.into();
            }
        };
        // Answers wait for room (they are what the client is blocked on).
        if tx.send(answer).is_err() {
            return "its writer ended".into();
        }
    }
}

fn malformed(shared: &Shared, id: u64, tx: &SyncSender<ServerMsg>, e: &WireError) -> String {
    tracing::warn!("fabric server: connection {id}: malformed frame: {e}; closing it");
    shared.counters.malformed.fetch_add(1, Ordering::Relaxed);
    shared.counters.refused.fetch_add(1, Ordering::Relaxed);
    let _ = tx.send(ServerMsg::Refused {
        code: RefuseCode::Malformed,
        message: e.to_string(),
    });
    format!("malformed frame: {e}")
}

/// Sends a client ATTACHED once `ready` says its port is attached (nothing if `ready`'s
/// sender goes first: the attach failed), then its frames until every sender is gone. Once a
/// write fails it closes the connection (the reader sees the end and detaches the client) and
/// takes the rest without writing, counting the packets lost, so that a sender never finds
/// the queue gone with frames in it uncounted. A REFUSED is the last frame written: the
/// connection is over (its reader has stopped), and what the network hands the client until
/// its port is detached is taken and counted lost the same way.
fn write_loop(
    shared: &Shared,
    id: u64,
    stream: &UnixStream,
    ready: &Receiver<()>,
    rx: &Receiver<ServerMsg>,
) {
    if ready.recv().is_err() {
        return;
    }
    let mut open = write(stream, &ServerMsg::Attached { version: VERSION }).is_ok();
    for msg in rx {
        if open {
            match write(stream, &msg) {
                Ok(()) => {
                    match msg {
                        ServerMsg::Deliver(_) => {
                            shared.counters.sent.fetch_add(1, Ordering::Relaxed);
                        }
                        ServerMsg::Refused { .. } => open = false,
                        _ => {}
                    }
                    continue;
                }
                Err(e) => {
                    tracing::debug!("fabric server: writing to client {id}: {e}");
                    open = false;
                }
            }
        }
        shared.lost(&msg);
    }
}

/// Writes one frame; on failure closes the connection both ways.
fn write(stream: &UnixStream, msg: &ServerMsg) -> std::io::Result<()> {
    let r = send_all(stream, &msg.encode());
    if r.is_err() {
        let _ = stream.shutdown(std::net::Shutdown::Both);
    }
    r
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::fabric::Fabric;
    use crate::sched::Scheduler;

    /// A GMP to the client's port 1, as the network would deliver one.
    fn packet() -> Packet {
        Packet {
            slid: 2,
            dlid: 1,
            sl: 0,
            vl15: false,
            src_qp: 1,
            dst_qp: 1,
            qkey: 0x8001_0000,
            pkey: 0xffff,
            grh: None,
            mad: Box::new([7; 256]),
        }
    }

    fn next(stream: &mut UnixStream) -> ServerMsg {
        let body = read_frame(stream)
            .unwrap()
            .expect("the server closed the connection");
        ServerMsg::decode(&body).unwrap()
    }

    /// A real-time server of ibsim's net.2sw2path4hca on `fabric.sock` in a fresh directory
    /// named after `tag` (removed by the caller).
    fn serve_example(tag: &str) -> (FabricServer, std::path::PathBuf) {
        let topo = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/net-examples/net.2sw2path4hca"
        );
        let net = Network::new(
            Fabric::parse_file(topo).unwrap(),
            Arc::new(Scheduler::new(ClockMode::Real)),
        );
        let dir = std::env::temp_dir().join(format!("{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let server = FabricServer::start(net, &dir.join("fabric.sock")).unwrap();
        (server, dir)
    }

    // The network may deliver to a client's port from the moment it is attached (an SM
    // sweeping the fabric does), before the server's thread for the connection has moved on.
    // The client must still read ATTACHED first: it refuses an attach answered by anything
    // else.
    #[test]
    fn attached_comes_before_a_delivery_made_the_moment_the_port_is_attached() {
        let (server, dir) = serve_example("sim-attach-order");
        *lock(&server.shared.after_attach) = Some(Box::new(|sink| sink.deliver(1, packet())));

        let mut stream = UnixStream::connect(server.path()).unwrap();
        let attach = ClientMsg::Attach {
            version: VERSION,
            node: "Hca1".into(),
            port: 1,
        };
        send_all(&stream, &attach.encode()).unwrap();
        let first = next(&mut stream);
        assert!(
            matches!(first, ServerMsg::Attached { version: VERSION }),
            "the attach was answered with {:.60}",
            format!("{first:?}")
        );
        match next(&mut stream) {
            ServerMsg::Deliver(p) => assert_eq!(p, packet()),
            other => panic!("expected the delivery after ATTACHED, got {other:?}"),
        }
        drop(stream);
        server.shutdown();
        let _ = std::fs::remove_dir_all(&dir);
    }

    // A client that goes while packets for it are queued: each packet the network handed
    // it is written to its socket or counted, the ones queued when it went and the ones handed
    // over after (ibsim warns of each packet it cannot write, ibsim.c sim_read_pkt).
    #[test]
    fn every_packet_for_a_client_that_goes_is_written_or_counted() {
        const N: u64 = 20_000;
        let (server, dir) = serve_example("sim-gone-client");
        *lock(&server.shared.after_attach) = Some(Box::new(|sink| {
            for _ in 0..N {
                sink.deliver(1, packet());
            }
        }));

        let mut stream = UnixStream::connect(server.path()).unwrap();
        let attach = ClientMsg::Attach {
            version: VERSION,
            node: "Hca1".into(),
            port: 1,
        };
        send_all(&stream, &attach.encode()).unwrap();
        assert!(matches!(next(&mut stream), ServerMsg::Attached { .. }));
        drop(stream);

        let by = Instant::now() + Duration::from_secs(10);
        let counted = |st: ServerStats| st.sent + st.queue_drops + st.gone_drops;
        while counted(server.stats()) < N && Instant::now() < by {
            std::thread::sleep(Duration::from_millis(10));
        }
        let st = server.stats();
        assert_eq!(counted(st), N, "written or dropped: {st:?}");
        assert_eq!(st.queue_drops, N - CLIENT_QUEUE as u64, "{st:?}");
        assert!(st.gone_drops > 0, "{st:?}");
        assert_eq!(
            server
                .network()
                .drops()
                .get(crate::net::DropReason::DeviceGone),
            st.gone_drops,
            "the network counts the packets for the gone client as DeviceGone"
        );
        server.shutdown();
        let _ = std::fs::remove_dir_all(&dir);
    }

    // A client that does not read: what its full queue drops is counted where a port's
    // drops are, in its counters (VL15Dropped for an SMP, PortRcvErrors for a data packet)
    // and the network's drops, not only in the server's own statistics.
    #[test]
    fn what_a_full_queue_drops_is_counted_in_the_port_and_the_network() {
        let (server, dir) = serve_example("sim-full-queue");
        *lock(&server.shared.after_attach) = Some(Box::new(|sink| {
            for _ in 0..CLIENT_QUEUE + 10 {
                sink.deliver(1, packet());
            }
            for _ in 0..5 {
                sink.deliver(
                    1,
                    Packet {
                        vl15: true,
                        dst_qp: 0,
                        ..packet()
                    },
                );
            }
            sink.port_changed(1, PortChange::Lid);
        }));
        let mut stream = UnixStream::connect(server.path()).unwrap();
        let attach = ClientMsg::Attach {
            version: VERSION,
            node: "Hca1".into(),
            port: 1,
        };
        send_all(&stream, &attach.encode()).unwrap();
        assert!(matches!(next(&mut stream), ServerMsg::Attached { .. }));
        let st = server.stats();
        assert_eq!(st.queue_drops, 16, "10 GMPs, 5 SMPs, a port change: {st:?}");
        let net = server.network();
        let port = net.port("Hca1", 1).unwrap();
        let c = net.counters(port);
        assert_eq!((c.rcv_errors, c.vl15_dropped), (10, 5), "{c:?}");
        assert_eq!(
            net.drops().get(crate::net::DropReason::ClientQueueFull),
            15,
            "the packets, not the port change"
        );
        drop(stream);
        server.shutdown();
        let _ = std::fs::remove_dir_all(&dir);
    }

    // A process of another user (not root) must not attach, whatever the socket file's mode
    // let it reach: it is refused before anything of it is read, and told why and what to do.
    // The kernel's uid of the peer is replaced by another user's (a test cannot be one).
    #[test]
    fn a_client_of_another_user_is_refused_before_it_is_read() {
        let (server, dir) = serve_example("sim-foreign-client");
        let ours = our_uid();
        let other = if ours == 1 { 2 } else { 1 };
        *lock(&server.shared.peer_uid) = Some(other);

        let mut stream = UnixStream::connect(server.path()).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let attach = ClientMsg::Attach {
            version: VERSION,
            node: "Hca1".into(),
            port: 1,
        };
        // The refusal may come before the ATTACH is written, and the write may fail then.
        let _ = send_all(&stream, &attach.encode());
        match next(&mut stream) {
            ServerMsg::Refused {
                code: RefuseCode::Forbidden,
                message,
            } => {
                assert!(message.contains(&format!("uid {ours}")), "{message}");
                assert!(message.contains(&format!("uid {other}")), "{message}");
                assert!(message.contains("hca sim serve"), "{message}");
            }
            other => panic!("expected REFUSED Forbidden, got {other:?}"),
        }
        // Then closed (reset: the server left the ATTACH unread).
        match read_frame(&mut stream) {
            Ok(None)
            | Err(WireError::Io {
                kind: ErrorKind::ConnectionReset,
                ..
            }) => {}
            other => panic!("expected the end of the connection, got {other:?}"),
        }
        // Through a link, the refusal is the caller's error.
        let sink: Arc<dyn PortSink> = Arc::new(Nobody);
        let sched = Arc::new(Scheduler::new(ClockMode::Real));
        let target = crate::net::remote::RemoteTarget::new(server.path(), "Hca1", 1);
        match crate::net::remote::RemoteLink::connect(&target, 1, &sink, &sched) {
            Err(RemoteError::Refused {
                code: RefuseCode::Forbidden,
                ..
            }) => {}
            other => panic!("expected the refusal, got {other:?}"),
        }
        assert!(server.attached().is_empty());
        let st = server.stats();
        assert_eq!(
            (st.forbidden, st.refused, st.attaches, st.malformed),
            (2, 2, 0, 0),
            "{st:?}"
        );

        // Our own user's (the kernel's word again) attaches.
        *lock(&server.shared.peer_uid) = None;
        let link = crate::net::remote::RemoteLink::connect(&target, 1, &sink, &sched).unwrap();
        assert_eq!(server.attached(), vec![("Hca1".to_owned(), 1)]);
        drop(link);
        server.shutdown();
        let _ = std::fs::remove_dir_all(&dir);
    }

    // Once a client is refused, the connection is over: what reaches its queue after the
    // REFUSED (deliveries until its port is detached) is not written, and the packets are
    // counted lost, as for a client gone.
    #[test]
    fn nothing_is_written_after_a_refused() {
        let (server, dir) = serve_example("sim-after-refused");
        let (ours, mut theirs) = UnixStream::pair().unwrap();
        theirs
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let (tx, rx) = sync_channel(CLIENT_QUEUE);
        let (go, ready) = sync_channel::<()>(1);
        let shared = server.shared.clone();
        let writer = std::thread::spawn(move || write_loop(&shared, 99, &ours, &ready, &rx));
        go.send(()).unwrap();
        tx.send(ServerMsg::Deliver(packet())).unwrap();
        tx.send(ServerMsg::Refused {
            code: RefuseCode::Malformed,
            message: "bad".into(),
        })
        .unwrap();
        tx.send(ServerMsg::Deliver(packet())).unwrap();
        tx.send(ServerMsg::PortChanged(PortChange::Lid)).unwrap();
        tx.send(ServerMsg::Deliver(packet())).unwrap();
        drop(tx);
        writer.join().unwrap();
        assert!(matches!(next(&mut theirs), ServerMsg::Attached { .. }));
        assert!(matches!(next(&mut theirs), ServerMsg::Deliver(_)));
        assert!(matches!(next(&mut theirs), ServerMsg::Refused { .. }));
        // The writer's end (a clone in `write_loop` only) is closed: nothing more came.
        assert_eq!(
            read_frame(&mut theirs).unwrap(),
            None,
            "nothing after REFUSED"
        );
        let st = server.stats();
        assert_eq!((st.sent, st.gone_drops), (1, 2), "{st:?}");
        drop(go);
        server.shutdown();
        let _ = std::fs::remove_dir_all(&dir);
    }

    struct Nobody;

    impl PortSink for Nobody {
        fn deliver(&self, _port: u8, _packet: Packet) {}
        fn port_changed(&self, _port: u8, _change: PortChange) {}
    }

    // With its socket file removed, nothing can connect to the server to wake its accept
    // thread: the stop must still end that thread and let the network go.
    #[test]
    fn shutdown_ends_every_thread_when_the_socket_file_was_removed() {
        let (server, dir) = serve_example("sim-removed-sock");
        let path = dir.join("fabric.sock");
        let shared = Arc::downgrade(&server.shared);
        std::fs::remove_file(&path).unwrap();
        server.shutdown();
        assert!(
            shared.upgrade().is_none(),
            "a server thread still holds the network after shutdown"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}

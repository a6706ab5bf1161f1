//! The fabric server: one [`Network`] served to client processes over a Unix stream socket.
//!
//! Threads: one accepts connections; one runs the network's scheduler (every delivery and
//! port change is a scheduler event, so this thread is what moves packets between clients);
//! each client has a reader (its frames, answered under the network's lock) and a writer (the
//! frames for it, from a bounded queue, so a client that stops reading can hold up only
//! itself: when its queue is full, packets for it are dropped and counted, as a full
//! receive queue drops them on hardware).

use std::collections::HashMap;
use std::io::{ErrorKind, Read};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::error::RemoteError;
use super::sock::send_all;
use super::wake::{Stop, StopSignal, Woken, stop_pair};
use super::wire::{ClientMsg, RefuseCode, ServerMsg, VERSION, WireError, read_frame};
use crate::clock::ClockMode;
use crate::link::{PortChange, PortLink, PortSink};
use crate::net::{AttachedPort, NetError, Network};
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
    /// Connections closed for a malformed frame (also counted in `refused`).
    pub malformed: u64,
    /// Connections refused because [`ServerLimits::max_handshakes`] connections were already
    /// waiting to attach (also counted in `refused`).
    pub busy: u64,
    /// Connections that sent no whole ATTACH within [`ServerLimits::attach_timeout`] (also
    /// counted in `refused`).
    pub timed_out: u64,
    /// Packets and port changes dropped because a client's queue was full.
    pub queue_drops: u64,
}

#[derive(Default)]
struct Counters {
    connections: AtomicU64,
    attaches: AtomicU64,
    refused: AtomicU64,
    malformed: AtomicU64,
    busy: AtomicU64,
    timed_out: AtomicU64,
    queue_drops: AtomicU64,
}

/// A connection's thread and a handle on its socket (to close it at shutdown).
struct Conn {
    stream: UnixStream,
    thread: JoinHandle<()>,
}

/// What the server's threads share.
struct Shared {
    net: Network,
    stop: AtomicBool,
    conns: Mutex<Vec<Conn>>,
    /// Attached clients by connection number: node name and port.
    attached: Mutex<HashMap<u64, (String, u8)>>,
    /// Connections accepted and not yet attached (or refused).
    handshakes: AtomicUsize,
    next_conn: AtomicU64,
    counters: Counters,
    limits: ServerLimits,
    /// Runs right after a client's port is attached, for a test to make the network deliver
    /// to the client at the earliest moment it can.
    #[cfg(test)]
    after_attach: Mutex<Option<AttachHook>>,
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
            std::fs::remove_file(path).map_err(|e| RemoteError::ServerIo {
                path: path.to_owned(),
                what: "removing a stale socket",
                source: e,
            })
        }
        Err(e) => Err(RemoteError::ServerIo {
            path: path.to_owned(),
            what: "checking whether a server answers",
            source: e,
        }),
    }
}

impl FabricServer {
    /// Serves `net` on a new socket at `path`, with the default [`ServerLimits`]. Refuses a
    /// path where a server answers ([`RemoteError::Live`]) or that is not a socket; replaces
    /// a stale socket. The network must run on real time.
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
        claim(path)?;
        let listener = UnixListener::bind(path).map_err(|e| RemoteError::ServerIo {
            path: path.to_owned(),
            what: "binding",
            source: e,
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
        let shared = Arc::new(Shared {
            net,
            stop: AtomicBool::new(false),
            conns: Mutex::new(Vec::new()),
            attached: Mutex::new(HashMap::new()),
            handshakes: AtomicUsize::new(0),
            next_conn: AtomicU64::new(1),
            counters: Counters::default(),
            limits,
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
        let accept = std::thread::Builder::new()
            .name("fabric-accept".into())
            .spawn(move || accept_loop(&s, &listener, &signal));
        let mut server = FabricServer {
            shared,
            path: path.to_owned(),
            identity: (meta.dev(), meta.ino()),
            wake,
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
            queue_drops: c.queue_drops.load(Ordering::Relaxed),
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
        for c in &conns {
            let _ = c.stream.shutdown(std::net::Shutdown::Both);
        }
        for c in conns {
            let _ = c.thread.join();
        }
        // Only the socket this server bound: another server may have replaced the file.
        if let Ok(m) = std::fs::symlink_metadata(&self.path) {
            if (m.dev(), m.ino()) == self.identity {
                let _ = std::fs::remove_file(&self.path);
            }
        }
        tracing::info!(path = %self.path.display(), "fabric server stopped");
    }
}

impl Drop for FabricServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Runs the network's scheduler until the server stops: deliveries to clients happen here.
fn run_clock(shared: &Shared) {
    let sched = shared.net.scheduler();
    while !shared.stop.load(Ordering::SeqCst) {
        sched.run_until(sched.now() + CLOCK_TICK);
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
        let thread = std::thread::Builder::new()
            .name(format!("fabric-client-{id}"))
            .spawn(move || serve(&s, id, &stream, handshake));
        let mut conns = lock(&shared.conns);
        conns.retain(|c| !c.thread.is_finished());
        match thread {
            Ok(thread) => conns.push(Conn {
                stream: handle,
                thread,
            }),
            Err(e) => tracing::warn!("fabric server: no thread for connection {id}: {e}"),
        }
    }
}

/// What the network holds to reach one client: its queue.
struct ClientSink {
    tx: SyncSender<ServerMsg>,
    shared: Arc<Shared>,
    id: u64,
}

impl ClientSink {
    fn push(&self, msg: ServerMsg) {
        if let Err(TrySendError::Full(_)) = self.tx.try_send(msg) {
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
                let m = format!(
                    "this server speaks protocol version {VERSION}, the client {version}: use \
                     the same build of hca for both"
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
    let (tx, rx) = sync_channel(CLIENT_QUEUE);
    // ATTACHED goes first in the queue, before the port is attached: from then on the network
    // may deliver to the client at any time (an SM sweeping the fabric), and the client must
    // read the answer to its ATTACH before any DELIVER. If the attach fails the queue is never
    // written.
    let _ = tx.send(ServerMsg::Attached { version: VERSION });
    let sink: Arc<dyn PortSink> = Arc::new(ClientSink {
        tx: tx.clone(),
        shared: shared.clone(),
        id,
    });
    let link = match shared.net.attach_port(node.as_str(), port, &sink) {
        Ok(l) => l,
        Err(e) => {
            tracing::info!("fabric server: connection {id} refused: {e}");
            refuse_now(shared, stream, refusal_of(&e), &e.to_string());
            let _ = stream.shutdown(std::net::Shutdown::Both);
            return;
        }
    };
    #[cfg(test)]
    if let Some(hook) = lock(&shared.after_attach).as_ref() {
        hook(sink.as_ref());
    }
    let w = match stream.try_clone() {
        Ok(w) => w,
        Err(e) => {
            tracing::warn!("fabric server: connection {id}: no writer: {e}");
            refuse_now(shared, stream, RefuseCode::ShuttingDown, &e.to_string());
            return;
        }
    };
    // Recorded before the writer starts, so that a client that has read ATTACHED is counted.
    shared.counters.attaches.fetch_add(1, Ordering::Relaxed);
    lock(&shared.attached).insert(id, (node.clone(), port));
    let writer = match std::thread::Builder::new()
        .name(format!("fabric-write-{id}"))
        .spawn(move || write_loop(&w, &rx))
    {
        Ok(t) => t,
        Err(e) => {
            lock(&shared.attached).remove(&id);
            shared.counters.attaches.fetch_sub(1, Ordering::Relaxed);
            tracing::warn!("fabric server: connection {id}: no writer: {e}");
            refuse_now(shared, stream, RefuseCode::ShuttingDown, &e.to_string());
            return;
        }
    };
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

/// Answers a client's frames until it disconnects or misbehaves; returns why it ended.
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
                link.transmit(p);
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

/// Sends a client its frames until every sender is gone or the socket fails.
fn write_loop(stream: &UnixStream, rx: &Receiver<ServerMsg>) {
    for msg in rx {
        if let Err(e) = send_all(stream, &msg.encode()) {
            tracing::debug!("fabric server: writing to a client: {e}");
            // The reader sees the connection end and detaches the client.
            let _ = stream.shutdown(std::net::Shutdown::Both);
            return;
        }
    }
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

//! The client side: a [`PortLink`] whose fabric is a fabric server in another process.
//!
//! A reader thread takes the server's frames: deliveries and port changes become events on
//! the device's [`Scheduler`] (the delivery rule: the device's sink never runs on the
//! reader's stack, nor on the stack of a call the device made), each followed by
//! [`Scheduler::notify`] so that a waiting driver wakes; answers go to the call waiting for
//! them. That scheduler runs only when the device's driver waits or rings a doorbell, so the
//! deliveries waiting there are capped ([`RemoteTarget::max_pending`]); beyond, they are
//! dropped and counted, and told to the server as drops of the port (an SMP in its
//! VL15Dropped, a data packet in its PortRcvErrors), as a port without buffers drops them.
//! `local_mad`, `port_info` and `modify_capability_mask` are synchronous calls with a timeout.
//! [`PortLink::count_drop`] is a COUNT_DROP frame: a packet the device drops (an SMP its QP0
//! cannot take) is counted in the server's port counter (VL15Dropped) and drops.

use std::collections::HashMap;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, TryLockError, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

use mad_wire::attr_id;

use super::error::RemoteError;
use super::last_answers::{LastAnswers, local_get};
use super::server::CLIENT_QUEUE;
use super::sock::{send_all, send_now};
use super::wire::{
    ClientMsg, RefuseCode, ServerMsg, VERSION, WireError, read_frame, refused_version,
};
use crate::link::{PortChange, PortLink, PortSink, PortSnapshot, ReceiveDrop};
use crate::packet::Packet;
use crate::sched::Scheduler;

/// How long a call waits for the server's answer before the link is declared dead.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// PortInfo:PortState Down.
const STATE_DOWN: u8 = 1;
/// PortInfo:PortPhysicalState Polling: no link partner, as with a pulled cable.
const PHYS_POLLING: u8 = 2;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The receive drops a link tells the server of, in the order of [`Shared::unreported`].
const DROP_KINDS: [ReceiveDrop; 2] = [ReceiveDrop::Vl15, ReceiveDrop::Overrun];

fn drop_slot(d: ReceiveDrop) -> usize {
    match d {
        ReceiveDrop::Vl15 => 0,
        ReceiveDrop::Overrun => 1,
    }
}

/// Where to attach: a server's socket, a CA node's name and one of its ports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteTarget {
    /// The server's socket.
    pub path: PathBuf,
    /// The CA node, by its name in the server's topology.
    pub node: String,
    /// The node's port (1 and up).
    pub port: u8,
    /// How long the attach and every later call may wait for the server.
    pub timeout: Duration,
    /// Deliveries that may wait on the device's scheduler (which runs only when the driver
    /// waits or rings a doorbell) before more are dropped, as a port without buffers drops
    /// them (counted in the server's port counters: [`RemoteStats::overflowed`]):
    /// [`CLIENT_QUEUE`] by default, the server's own limit per client.
    pub max_pending: usize,
}

impl RemoteTarget {
    /// Port `port` of `node` on the server at `path`, with [`DEFAULT_TIMEOUT`].
    pub fn new(path: impl Into<PathBuf>, node: &str, port: u8) -> RemoteTarget {
        RemoteTarget {
            path: path.into(),
            node: node.to_owned(),
            port,
            timeout: DEFAULT_TIMEOUT,
            max_pending: CLIENT_QUEUE,
        }
    }
}

/// What a link has counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RemoteStats {
    /// Packets sent to the server.
    pub transmitted: u64,
    /// Packets the server delivered (scheduled for the device).
    pub delivered: u64,
    /// Packets the device transmitted after the link died (dropped).
    pub dropped: u64,
    /// Packets the server delivered that were dropped because
    /// [`max_pending`](RemoteTarget::max_pending) deliveries already waited for the device:
    /// each reported to the server as the port could not take it (an SMP in VL15Dropped, a
    /// data packet in PortRcvErrors), as a port without buffers drops it on hardware.
    pub overflowed: u64,
    /// Received packets dropped (by the device, [`PortLink::count_drop`], or as `overflowed`)
    /// that the link told the server of (COUNT_DROP), for the port's counters there.
    pub reported_drops: u64,
}

/// Calls waiting for an answer, and whether the link is dead.
struct Calls {
    next: u32,
    waiting: HashMap<u32, mpsc::Sender<ServerMsg>>,
    dead: Option<String>,
}

struct Shared {
    path: PathBuf,
    device_port: u8,
    timeout: Duration,
    /// For shutting the socket down from any thread.
    stream: UnixStream,
    writer: Mutex<UnixStream>,
    calls: Mutex<Calls>,
    /// The last snapshot the server gave; what a dead link reports (as Down).
    last: Mutex<PortSnapshot>,
    /// The last answers of the port's own SMA; what a dead link answers MAD_IFC with.
    answers: LastAnswers,
    /// The link is being dropped: its end is not news for the device.
    closing: AtomicBool,
    sink: Weak<dyn PortSink>,
    sched: Weak<Scheduler>,
    transmitted: AtomicU64,
    delivered: AtomicU64,
    dropped: AtomicU64,
    overflowed: AtomicU64,
    reported_drops: AtomicU64,
    /// Receive drops not told to the server yet, by counter ([`DROP_KINDS`]).
    unreported: [AtomicU64; 2],
    /// Deliveries scheduled on the device's scheduler and not run yet (shared with the
    /// events, which outlive nothing of the link's but this).
    pending: Arc<AtomicUsize>,
    max_pending: usize,
}

/// A device port attached to a fabric server. Dropping it disconnects: the server detaches
/// the port and clears the IsSM bit this port set before the drop returns (unless the server
/// does not close the connection within the timeout), so the port may be taken again at once.
///
/// # A dead server
///
/// When the connection ends (the server stopped or crashed, or it sent a malformed frame) or
/// a call gets no answer within the timeout, the link is dead for good: the device hears
/// [`PortChange::Down`] (as an event on its scheduler), [`port_info`](PortLink::port_info)
/// reports the last state the server gave with PortState Down and PortPhysicalState
/// Polling (a pulled cable), [`local_mad`](PortLink::local_mad) answers as the HCA's own
/// SMA (in its firmware on hardware) would with the cable pulled: Gets of NodeInfo,
/// NodeDescription, PortInfo (Down, Polling), P_KeyTable and GUIDInfo from the last answers
/// the server gave (NodeInfo, NodeDescription and PortInfo are asked at the attach for this),
/// anything else `None` (MAD_IFC fails; see `last_answers.rs`), [`transmit`](PortLink::transmit) drops the packet (counted in
/// [`RemoteStats::dropped`]), and
/// [`modify_capability_mask`](PortLink::modify_capability_mask) changes nothing and returns
/// the last mask known. [`RemoteLink::dead`] says why. A new server means a new link (the
/// program reopens its device).
pub struct RemoteLink {
    shared: Arc<Shared>,
    reader: Mutex<Option<JoinHandle<()>>>,
    /// Disconnected when the reader has ended.
    reader_done: Mutex<Option<mpsc::Receiver<()>>>,
}

impl std::fmt::Debug for RemoteLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteLink")
            .field("path", &self.shared.path)
            .field("device_port", &self.shared.device_port)
            .field("dead", &self.dead())
            .finish_non_exhaustive()
    }
}

fn io<'a>(path: &'a Path, what: &'static str) -> impl FnOnce(std::io::Error) -> RemoteError + 'a {
    move |source| RemoteError::Io {
        path: path.to_owned(),
        what,
        source,
    }
}

/// Sends the ATTACH of `target` on `stream` and reads the answer: `Ok` when attached.
fn attach(stream: &UnixStream, target: &RemoteTarget) -> Result<(), RemoteError> {
    let path = target.path.as_path();
    let attach = ClientMsg::Attach {
        version: VERSION,
        node: target.node.clone(),
        port: target.port,
    };
    // A server that refuses before reading (too many connections waiting to attach) may
    // have closed its end before the ATTACH went out: its REFUSED can still be read, and
    // says more than the failed write.
    let sent = send_all(stream, &attach.encode());
    let answer = read_frame(&mut &*stream);
    if let Err(e) = sent {
        if !matches!(answer, Ok(Some(_))) {
            return Err(io(path, "sending the attach")(e));
        }
    }
    let body = match answer {
        Ok(Some(b)) => b,
        Ok(None) => {
            return Err(RemoteError::Closed {
                path: path.to_owned(),
            });
        }
        Err(WireError::Io { kind, message }) => {
            return Err(RemoteError::Io {
                path: path.to_owned(),
                what: "waiting for the attach's answer",
                source: std::io::Error::new(kind, message),
            });
        }
        Err(source) => {
            return Err(RemoteError::Malformed {
                path: path.to_owned(),
                source,
            });
        }
    };
    match ServerMsg::decode(&body) {
        Ok(ServerMsg::Attached { version }) if version == VERSION => Ok(()),
        Ok(ServerMsg::Attached { version }) => Err(RemoteError::Version {
            path: path.to_owned(),
            ours: VERSION,
            server: Some(version),
        }),
        Ok(ServerMsg::Refused {
            code: RefuseCode::Version,
            message,
        }) => Err(RemoteError::Version {
            path: path.to_owned(),
            ours: VERSION,
            server: refused_version(&message),
        }),
        Ok(ServerMsg::Refused { code, message }) => Err(RemoteError::Refused {
            path: path.to_owned(),
            node: target.node.clone(),
            port: target.port,
            code,
            message,
        }),
        Ok(other) => Err(RemoteError::Unexpected {
            path: path.to_owned(),
            got: format!("{other:?}"),
        }),
        Err(source) => Err(RemoteError::Malformed {
            path: path.to_owned(),
            source,
        }),
    }
}

impl RemoteLink {
    /// Attaches to `target` for the device port `device_port`: packets and port changes from
    /// the server reach `sink` (held weakly; the device owns it) as events on `sched` (the
    /// device's scheduler), with `device_port` as their port.
    pub fn connect(
        target: &RemoteTarget,
        device_port: u8,
        sink: &Arc<dyn PortSink>,
        sched: &Arc<Scheduler>,
    ) -> Result<Arc<RemoteLink>, RemoteError> {
        let path = target.path.as_path();
        let stream = UnixStream::connect(path).map_err(io(path, "connecting"))?;
        // Before a frame is sent or read: the path may be another user's.
        let server = super::peer::peer_uid(&stream).map_err(io(path, "asking whose it is"))?;
        super::peer::check_owner(path, server, super::peer::our_uid())?;
        stream
            .set_write_timeout(Some(target.timeout))
            .map_err(io(path, "setting a timeout"))?;
        stream
            .set_read_timeout(Some(target.timeout))
            .map_err(io(path, "setting a timeout"))?;
        attach(&stream, target)?;
        stream
            .set_read_timeout(None)
            .map_err(io(path, "clearing the read timeout"))?;
        let shared = Arc::new(Shared {
            path: path.to_owned(),
            device_port,
            timeout: target.timeout,
            writer: Mutex::new(stream.try_clone().map_err(io(path, "cloning the socket"))?),
            stream,
            calls: Mutex::new(Calls {
                next: 0,
                waiting: HashMap::new(),
                dead: None,
            }),
            last: Mutex::new(PortSnapshot::default()),
            answers: LastAnswers::new(target.port),
            closing: AtomicBool::new(false),
            sink: Arc::downgrade(sink),
            sched: Arc::downgrade(sched),
            transmitted: AtomicU64::new(0),
            delivered: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            overflowed: AtomicU64::new(0),
            reported_drops: AtomicU64::new(0),
            unreported: [AtomicU64::new(0), AtomicU64::new(0)],
            pending: Arc::new(AtomicUsize::new(0)),
            max_pending: target.max_pending,
        });
        let reader_stream = shared
            .stream
            .try_clone()
            .map_err(io(path, "cloning the socket"))?;
        let s = shared.clone();
        // Dropped (disconnected) when the reader ends.
        let (done_tx, done) = mpsc::channel::<()>();
        let reader = std::thread::Builder::new()
            .name(format!("fabric-link-{device_port}"))
            .spawn(move || {
                let _done = done_tx;
                read_loop(&s, &reader_stream);
            })
            .map_err(io(path, "starting the reader thread"))?;
        let link = Arc::new(RemoteLink {
            shared,
            reader: Mutex::new(Some(reader)),
            reader_done: Mutex::new(Some(done)),
        });
        // What the kernel reads of its own port at registration (mlx5_ib's MAD_IFC queries):
        // kept, so that the port's SMA still answers them once the server is gone. The link
        // may die here; the device then sees its port Down.
        for (attr, tid) in [
            (attr_id::sm::NODE_INFO, 1),
            (attr_id::sm::NODE_DESCRIPTION, 2),
            (attr_id::sm::PORT_INFO, 3),
        ] {
            link.local_mad(&local_get(attr, 0, 0x6863_6166_0000_0000 | tid), true);
        }
        Ok(link)
    }

    /// Why the link is dead, or `None` while it is alive.
    pub fn dead(&self) -> Option<String> {
        lock(&self.shared.calls).dead.clone()
    }

    /// What the link has counted.
    pub fn stats(&self) -> RemoteStats {
        let s = &self.shared;
        RemoteStats {
            transmitted: s.transmitted.load(Ordering::Relaxed),
            delivered: s.delivered.load(Ordering::Relaxed),
            dropped: s.dropped.load(Ordering::Relaxed),
            overflowed: s.overflowed.load(Ordering::Relaxed),
            reported_drops: s.reported_drops.load(Ordering::Relaxed),
        }
    }

    /// The server's socket.
    pub fn path(&self) -> &Path {
        &self.shared.path
    }

    /// A call: `make(id)` is sent, and the answer with that id awaited. `None` if the link is
    /// dead or dies meanwhile.
    fn call(&self, make: impl FnOnce(u32) -> ClientMsg) -> Option<ServerMsg> {
        let s = &self.shared;
        let (tx, rx) = mpsc::channel();
        let id = {
            let mut c = lock(&s.calls);
            if c.dead.is_some() {
                return None;
            }
            c.next = c.next.wrapping_add(1);
            let id = c.next;
            c.waiting.insert(id, tx);
            id
        };
        if let Err(e) = s.send(&make(id)) {
            s.die(&format!("writing to the server failed: {e}"));
            return None;
        }
        match rx.recv_timeout(s.timeout) {
            Ok(m) => Some(m),
            Err(RecvTimeoutError::Timeout) => {
                s.die(&format!("the server did not answer within {:?}", s.timeout));
                None
            }
            Err(RecvTimeoutError::Disconnected) => None,
        }
    }

    fn down_snapshot(&self) -> PortSnapshot {
        let mut s = *lock(&self.shared.last);
        s.state = STATE_DOWN;
        s.phys_state = PHYS_POLLING;
        s
    }
}

impl Shared {
    fn send(&self, msg: &ClientMsg) -> std::io::Result<()> {
        self.send_with_drops(Some(msg))
    }

    /// Writes the drops not told yet (COUNT_DROP), then `msg`, waiting for the socket (up to
    /// the timeout) as every call of the device does.
    fn send_with_drops(&self, msg: Option<&ClientMsg>) -> std::io::Result<()> {
        let w = lock(&self.writer);
        let (drops, taken) = self.take_unreported();
        // On failure the link dies, and the drops with it: nobody keeps the counters.
        match msg.map(ClientMsg::encode) {
            // Nearly always: one frame, as it was encoded.
            Some(frame) if drops.is_empty() => send_all(&w, &frame)?,
            Some(frame) => {
                let mut buf = drops;
                buf.extend_from_slice(&frame);
                send_all(&w, &buf)?;
            }
            None if drops.is_empty() => {}
            None => send_all(&w, &drops)?,
        }
        self.reported(taken);
        drop(w);
        // A drop counted while we held the writer was not told by the reader: tell it now.
        self.report_drops_now();
        Ok(())
    }

    /// COUNT_DROP frames for the drops not told yet, taken from [`Shared::unreported`], and
    /// how many of each they carry.
    fn take_unreported(&self) -> (Vec<u8>, [u64; 2]) {
        let mut buf = Vec::new();
        let mut taken = [0u64; 2];
        for (i, &drop) in DROP_KINDS.iter().enumerate() {
            let n = self.unreported[i].swap(0, Ordering::SeqCst);
            if n == 0 {
                continue;
            }
            let count = u32::try_from(n).unwrap_or(u32::MAX);
            if u64::from(count) < n {
                self.unreported[i].fetch_add(n - u64::from(count), Ordering::SeqCst);
            }
            buf.extend_from_slice(&ClientMsg::CountDrop { drop, count }.encode());
            taken[i] = u64::from(count);
        }
        (buf, taken)
    }

    fn reported(&self, taken: [u64; 2]) {
        self.reported_drops
            .fetch_add(taken.iter().sum(), Ordering::Relaxed);
    }

    /// Tells the server of the drops not told yet if the writer is free and the socket takes
    /// them without waiting; otherwise they go with the next frame the link writes. The
    /// reader thread calls this: it must never wait for the server, which may be waiting for
    /// it to read (its queue for us full).
    fn report_drops_now(&self) {
        if self
            .unreported
            .iter()
            .all(|n| n.load(Ordering::SeqCst) == 0)
        {
            return;
        }
        let w = match self.writer.try_lock() {
            Ok(w) => w,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => return,
        };
        let (buf, taken) = self.take_unreported();
        if buf.is_empty() {
            return;
        }
        match send_now(&w, &buf) {
            Ok(true) => self.reported(taken),
            Ok(false) => {
                for (n, t) in self.unreported.iter().zip(taken) {
                    n.fetch_add(t, Ordering::SeqCst);
                }
            }
            Err(e) => {
                drop(w);
                self.die(&format!("writing to the server failed: {e}"));
            }
        }
    }

    /// The server's delivery `p` found no room: dropped, and told to the server as a drop of
    /// the port (an SMP in VL15Dropped, a data packet in PortRcvErrors).
    fn overflow(&self, p: &Packet) {
        let n = self.overflowed.fetch_add(1, Ordering::Relaxed);
        if n.is_power_of_two() {
            tracing::warn!(
                "fabric link to {} (device port {}): {} deliveries wait for the device; {} \
                 dropped so far",
                self.path.display(),
                self.device_port,
                self.max_pending,
                n + 1
            );
        }
        self.unreported[drop_slot(ReceiveDrop::for_packet(p))].fetch_add(1, Ordering::SeqCst);
        self.report_drops_now();
    }

    /// The link is dead: fail the waiting calls, close the socket, and (unless the link is
    /// being dropped) tell the device its port went down, through its scheduler.
    fn die(&self, reason: &str) {
        self.end(reason, std::net::Shutdown::Both);
    }

    /// [`Shared::die`], shutting `how` of the socket.
    fn end(&self, reason: &str, how: std::net::Shutdown) {
        let waiting = {
            let mut c = lock(&self.calls);
            if c.dead.is_some() {
                return;
            }
            c.dead = Some(reason.to_owned());
            std::mem::take(&mut c.waiting)
        };
        // Dropping the senders ends every waiting call.
        drop(waiting);
        let _ = self.stream.shutdown(how);
        if self.closing.load(Ordering::SeqCst) {
            return;
        }
        tracing::warn!(
            "fabric link to {} (device port {}) is down: {reason}",
            self.path.display(),
            self.device_port
        );
        self.schedule(move |sink, port| sink.port_changed(port, PortChange::Down));
    }

    /// Schedules the delivery of `p` to the device, or drops it when
    /// [`RemoteTarget::max_pending`] deliveries already wait.
    fn deliver(&self, p: Packet) {
        // Only this thread adds, so the count cannot pass the limit between the check and
        // the increment; events running meanwhile only lower it.
        if self.pending.load(Ordering::SeqCst) >= self.max_pending {
            self.overflow(&p);
            return;
        }
        self.pending.fetch_add(1, Ordering::SeqCst);
        self.delivered.fetch_add(1, Ordering::Relaxed);
        let pending = self.pending.clone();
        if !self.schedule(move |sink, port| {
            pending.fetch_sub(1, Ordering::SeqCst);
            sink.deliver(port, p);
        }) {
            self.pending.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// Runs `f` on the device's sink as an event on its scheduler, then wakes its driver.
    /// `false` when the device's scheduler is gone (nothing scheduled).
    fn schedule(&self, f: impl FnOnce(&dyn PortSink, u8) + Send + 'static) -> bool {
        let Some(sched) = self.sched.upgrade() else {
            return false;
        };
        let sink = self.sink.clone();
        let weak = self.sched.clone();
        let port = self.device_port;
        sched.schedule_at(
            sched.now(),
            Box::new(move || {
                if let Some(s) = sink.upgrade() {
                    f(s.as_ref(), port);
                }
                if let Some(s) = weak.upgrade() {
                    s.notify();
                }
            }),
        );
        true
    }
}

/// The reader thread: the server's frames until the connection ends.
fn read_loop(s: &Shared, mut stream: &UnixStream) {
    loop {
        let body = match read_frame(&mut stream) {
            Ok(Some(b)) => b,
            Ok(None) => return s.die("the server closed the connection"),
            Err(e) => return s.die(&format!("reading from the server: {e}")),
        };
        if s.closing.load(Ordering::SeqCst) {
            // Dropped: what comes before the server's end of the stream is for nobody.
            continue;
        }
        match ServerMsg::decode(&body) {
            Ok(ServerMsg::Deliver(p)) => s.deliver(p),
            Ok(ServerMsg::PortChanged(c)) => {
                s.schedule(move |sink, port| sink.port_changed(port, c));
            }
            Ok(
                m @ (ServerMsg::MadAnswer { id, .. }
                | ServerMsg::PortInfo { id, .. }
                | ServerMsg::CapMask { id, .. }),
            ) => {
                let waiter = lock(&s.calls).waiting.remove(&id);
                match waiter {
                    Some(tx) => {
                        let _ = tx.send(m);
                    }
                    None => {
                        return s.die(&format!(
                            "the server answered call {id}, which is not waiting"
                        ));
                    }
                }
            }
            Ok(ServerMsg::Refused { message, .. }) => {
                return s.die(&format!("the server ended the link: {message}"));
            }
            Ok(ServerMsg::Attached { .. }) => {
                return s.die("the server sent a second ATTACHED");
            }
            Err(e) => return s.die(&format!("the server sent a malformed frame: {e}")),
        }
    }
}

impl PortLink for RemoteLink {
    fn transmit(&self, packet: Packet) {
        let s = &self.shared;
        if lock(&s.calls).dead.is_some() {
            s.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        match s.send(&ClientMsg::Transmit(packet)) {
            Ok(()) => {
                s.transmitted.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => {
                s.dropped.fetch_add(1, Ordering::Relaxed);
                s.die(&format!("writing to the server failed: {e}"));
            }
        }
    }

    fn local_mad(&self, mad: &[u8; 256], ignore_mkey: bool) -> Option<[u8; 256]> {
        let s = &self.shared;
        match self.call(|id| ClientMsg::LocalMad {
            id,
            ignore_mkey,
            mad: Box::new(*mad),
        }) {
            Some(ServerMsg::MadAnswer { mad: answer, .. }) => {
                let answer = answer.map(|m| *m);
                if let Some(a) = &answer {
                    s.answers.keep(mad, a);
                }
                answer
            }
            Some(other) => {
                s.die(&format!("the server answered LOCAL_MAD with {other:?}"));
                s.answers.answer(mad, ignore_mkey, &self.down_snapshot())
            }
            None => s.answers.answer(mad, ignore_mkey, &self.down_snapshot()),
        }
    }

    fn port_info(&self) -> PortSnapshot {
        match self.call(|id| ClientMsg::PortInfo { id }) {
            Some(ServerMsg::PortInfo { snapshot, .. }) => {
                *lock(&self.shared.last) = snapshot;
                snapshot
            }
            Some(other) => {
                self.shared
                    .die(&format!("the server answered PORT_INFO with {other:?}"));
                self.down_snapshot()
            }
            None => self.down_snapshot(),
        }
    }

    fn count_drop(&self, drop: ReceiveDrop) {
        let s = &self.shared;
        if lock(&s.calls).dead.is_some() {
            // Nobody keeps the port's counters any more.
            return;
        }
        s.unreported[drop_slot(drop)].fetch_add(1, Ordering::SeqCst);
        if let Err(e) = s.send_with_drops(None) {
            s.die(&format!("writing to the server failed: {e}"));
        }
    }

    fn modify_capability_mask(&self, set: u32, clear: u32) -> u32 {
        match self.call(|id| ClientMsg::ModifyCapMask { id, set, clear }) {
            Some(ServerMsg::CapMask { mask, .. }) => {
                lock(&self.shared.last).capability_mask = mask;
                mask
            }
            Some(other) => {
                self.shared.die(&format!(
                    "the server answered MODIFY_CAP_MASK with {other:?}"
                ));
                lock(&self.shared.last).capability_mask
            }
            None => lock(&self.shared.last).capability_mask,
        }
    }
}

impl Drop for RemoteLink {
    /// Disconnects and waits (up to the timeout) for the server to close its end, which it
    /// does only once it has detached the port: so the port is free when the drop returns,
    /// and reopening the device at once is not refused as taken.
    fn drop(&mut self) {
        let s = &self.shared;
        if lock(&s.calls).dead.is_none() {
            // Drops the reader could not tell without waiting: the port's counters are the
            // server's.
            let _ = s.send_with_drops(None);
        }
        s.closing.store(true, Ordering::SeqCst);
        // Our end of the stream: the server reads EOF, detaches, then closes its end, which
        // ends the reader. A server that does not within the timeout is cut off.
        s.end("the link was dropped", std::net::Shutdown::Write);
        if let Some(done) = lock(&self.reader_done).take() {
            if let Err(RecvTimeoutError::Timeout) = done.recv_timeout(s.timeout) {
                tracing::warn!(
                    "fabric server {} did not close the link of device port {} within {:?}",
                    s.path.display(),
                    s.device_port,
                    s.timeout
                );
            }
        }
        let _ = s.stream.shutdown(std::net::Shutdown::Both);
        if let Some(t) = lock(&self.reader).take() {
            // The last handle may go on the reader's own thread only if a scheduled event
            // dropped the device there, which events never do; guard anyway.
            if t.thread().id() != std::thread::current().id() {
                let _ = t.join();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::remote::wire::RefuseCode;

    // The server may refuse and close before the client's ATTACH is written: the write
    // fails, and the refusal waiting on the socket is what the caller must hear.
    #[test]
    fn a_refusal_sent_before_the_attach_is_heard_despite_the_failed_write() {
        let (client, server) = UnixStream::pair().unwrap();
        let refused = ServerMsg::Refused {
            code: RefuseCode::Busy,
            message: "busy".into(),
        };
        send_all(&server, &refused.encode()).unwrap();
        drop(server);
        client
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let target = RemoteTarget::new("/nowhere.sock", "Hca1", 1);
        match attach(&client, &target) {
            Err(RemoteError::Refused {
                code: RefuseCode::Busy,
                ..
            }) => {}
            other => panic!("expected the refusal, got {other:?}"),
        }
    }
}

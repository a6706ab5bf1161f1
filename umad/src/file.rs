//! One umad file: what the kernel's `ib_umad_file` is for an fd of `/dev/infiniband/umad<N>`.
//!
//! - up to 32 agents (lowest free ID first), each a MAD-layer agent delivering into the
//!   file's one event queue;
//! - the read queue ([`ReadQueue`]): received MADs, and requests that got no response coming
//!   back with status ETIMEDOUT (header as written, the first 24 bytes of the MAD as sent);
//! - the outstanding sends, for the kernel's duplicate rule and for the timeout returns.
//!
//! Every request sent with a timeout ends in exactly one of: its response in the queue, or
//! its return with ETIMEDOUT. The kernel returns only response timeouts and frees sends
//! that fail otherwise (a flushed or failed work request) without a word, which leaves a
//! waiting OpenSM hanging; this library returns those too, as timeouts. Responses to our
//! own requests are exempt from the receive limit for the same reason.
//!
//! No lock of this file is held while the MAD layer is called (sends, registrations,
//! deregistrations): the MAD layer's progress thread delivers into the file under that
//! lock.

use std::collections::HashMap;
use std::os::fd::RawFd;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use mad::wire::class::is_rmpp_capable;
use mad::wire::header::{MAD_LEN, is_response};
use mad::wire::rmpp::{Rmpp, flags as rmpp_flags};
use mad::{
    Agent, AgentId, AgentSpec, ClassRegistration, Event, EventQueue, MethodMask, RecvBox,
    SendRequest, SpecialQp, WcStatus,
};

use crate::abi::{
    HDR_LEN, IbUserMad, MAD_HDR_LEN, MAX_AGENTS, MAX_RECV_LIST, MIN_WRITE_MAD, USER_RMPP,
};
use crate::context::{CaPort, debug, lock};
use crate::error::UmadError;
use crate::header::{Destination, DupKey, dest_of, is_duplicate, recv_header};
use crate::queue::{Packet, ReadQueue};

/// What `REGISTER_AGENT` / `REGISTER_AGENT2` ask for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Registration {
    /// 0 (SMPs) or 1 (everything else).
    pub qpn: u32,
    /// Management class; 0 registers an agent that only gets responses to its requests.
    pub class: u8,
    /// Class version.
    pub version: u8,
    /// Unsolicited methods to receive.
    pub methods: [u64; 2],
    /// OUI, used for vendor range-2 classes; with a class, wider than 24 bits is EINVAL
    /// (`REGISTER_AGENT2`).
    pub oui: u32,
    /// RMPP version.
    pub rmpp_version: u8,
    /// `REGISTER_AGENT2` flags (`UMAD_USER_RMPP`).
    pub flags: u32,
}

enum Slot {
    Free,
    /// Being registered (the MAD layer is asked without the file's lock).
    Reserved,
    Active {
        agent: Arc<Agent>,
        /// The MAD layer does RMPP for it (an RMPP version without `UMAD_USER_RMPP`): a send
        /// with the RMPP Active flag may be longer than one MAD.
        rmpp: bool,
    },
}

struct Sent {
    key: DupKey,
    hdr: IbUserMad,
}

struct State {
    slots: Vec<Slot>,
    by_agent: HashMap<AgentId, u32>,
    /// MADs delivered to an agent of no slot while a slot is [`Slot::Reserved`]: the MAD
    /// layer delivers to an agent as soon as it is registered, before the file knows it
    /// (the kernel holds the file's lock across `ib_register_mad_agent`, so its
    /// `queue_packet` waits and loses nothing). The agent's registration takes them; the
    /// rest (MADs of agents just unregistered, which the kernel drops too) go when no slot
    /// is reserved any more. Held to the read queue's receive limit; beyond it a MAD is
    /// dropped and counted as the queue counts its own.
    pending: Vec<RecvBox>,
    queue: ReadQueue,
    sends: HashMap<u64, Sent>,
    next_seq: u64,
    dead: Option<String>,
    closed: bool,
}

/// One open umad port (an fd of `umad_open_port`).
pub struct UmadFile {
    port: Arc<CaPort>,
    events: Arc<EventQueue>,
    /// Where [`UmadFile::take_events`] drains the event queue (kept: one allocation per
    /// delivered MAD otherwise). Taken before `state`, and only there.
    scratch: Mutex<Vec<Event>>,
    fd: RawFd,
    state: Mutex<State>,
}

impl std::fmt::Debug for UmadFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UmadFile")
            .field("fd", &self.fd)
            .field("port", &self.port)
            .finish_non_exhaustive()
    }
}

impl UmadFile {
    /// A new file on `port`.
    pub fn open(port: Arc<CaPort>) -> Result<Arc<UmadFile>, UmadError> {
        let queue = ReadQueue::new(MAX_RECV_LIST)?;
        let fd = queue.fd();
        let events = Arc::new(EventQueue::new());
        let file = Arc::new(UmadFile {
            port,
            events: Arc::clone(&events),
            scratch: Mutex::new(Vec::new()),
            fd,
            state: Mutex::new(State {
                slots: (0..MAX_AGENTS).map(|_| Slot::Free).collect(),
                by_agent: HashMap::new(),
                pending: Vec::new(),
                queue,
                sends: HashMap::new(),
                next_seq: 1,
                dead: None,
                closed: false,
            }),
        });
        let weak: Weak<UmadFile> = Arc::downgrade(&file);
        events.set_notify(Some(Arc::new(move || {
            if let Some(f) = weak.upgrade() {
                f.take_events();
            }
        })));
        Ok(file)
    }

    /// The fd the user polls.
    pub fn fd(&self) -> RawFd {
        self.fd
    }

    /// Whether [`UmadFile::fd`] still names this file's socket: the user may have closed it
    /// (libibumad's `umad_close_port` is a plain `close`) and got the number back for
    /// something else.
    pub fn owns_fd(&self) -> bool {
        lock(&self.state).queue.owns_fd()
    }

    /// Close the user's fd if it still names this file's socket; returns whether it did.
    /// A number that names something else now is left alone.
    pub fn close_fd(&self) -> bool {
        lock(&self.state).queue.close_user()
    }

    /// The port it is open on.
    pub fn port(&self) -> &Arc<CaPort> {
        &self.port
    }

    /// Packets waiting to be read.
    pub fn queued(&self) -> usize {
        lock(&self.state).queue.len()
    }

    /// Sends accepted and not finished.
    pub fn outstanding(&self) -> usize {
        lock(&self.state).sends.len()
    }

    /// Agents registered.
    pub fn agents(&self) -> usize {
        lock(&self.state)
            .slots
            .iter()
            .filter(|s| matches!(s, Slot::Active { .. }))
            .count()
    }

    /// `REGISTER_AGENT(2)`: the lowest free agent ID.
    pub fn register(&self, r: &Registration) -> Result<u32, UmadError> {
        self.register_with(r, || {})
    }

    /// [`UmadFile::register`], calling `between` once the MAD layer has registered the agent
    /// and before the file takes it (where a MAD may already arrive for it: the tests make
    /// one arrive there).
    fn register_with(&self, r: &Registration, between: impl FnOnce()) -> Result<u32, UmadError> {
        if let Some(reason) = self.port.removed() {
            return Err(UmadError::RegisterRemoved { reason });
        }
        let qp = match r.qpn {
            0 => SpecialQp::Smi,
            1 => SpecialQp::Gsi,
            qpn => return Err(UmadError::BadQpn { qpn }),
        };
        if r.flags & !USER_RMPP != 0 {
            return Err(UmadError::BadFlags { flags: r.flags });
        }
        let id = {
            let mut st = lock(&self.state);
            if let Some(reason) = st.dead.clone() {
                return Err(UmadError::RegisterRemoved { reason });
            }
            let id = st
                .slots
                .iter()
                .position(|s| matches!(s, Slot::Free))
                .ok_or(UmadError::AgentsFull)?;
            st.slots[id] = Slot::Reserved;
            id
        };
        let release = |st: &mut State| {
            st.slots[id] = Slot::Free;
            st.forget_pending();
        };
        // ib_umad_reg_agent2 refuses an OUI wider than 24 bits with any class (after the
        // free ID is found).
        if r.class != 0 && r.oui & 0xff00_0000 != 0 {
            release(&mut lock(&self.state));
            return Err(UmadError::Registration(
                mad::MadError::InvalidRegistration {
                    reason: format!("OUI {:#010x} is wider than 24 bits", r.oui),
                },
            ));
        }
        let class = (r.class != 0).then(|| ClassRegistration {
            class: r.class,
            version: r.version,
            methods: MethodMask::from_words(r.methods),
            oui: mad::wire::class::is_vendor_range2(r.class).then_some(r.oui),
        });
        // With user RMPP the kernel leaves RMPP to the user: the MAD layer sees a plain
        // agent. ib_register_mad_agent still checks the registration with the RMPP version
        // given (0 or 1, an RMPP-capable class), and refuses user RMPP without a class.
        let rmpp = if r.flags & USER_RMPP != 0 {
            let checked = if class.is_none() {
                Err(mad::MadError::InvalidRegistration {
                    reason: "UMAD_USER_RMPP needs a management class".into(),
                })
            } else {
                mad::registry::validate(class.as_ref(), qp, r.rmpp_version)
            };
            if let Err(e) = checked {
                release(&mut lock(&self.state));
                return Err(UmadError::Registration(e));
            }
            0
        } else {
            r.rmpp_version
        };
        let spec = match class {
            None => AgentSpec::responses_only(qp),
            Some(class) => AgentSpec {
                qp,
                class: Some(class),
                responses: true,
                rmpp_version: rmpp,
                events: None,
            },
        }
        .with_rmpp(rmpp)
        .with_events(Arc::clone(&self.events));
        let agent = match self.port.mad.register(spec) {
            Ok(a) => a,
            Err(e) => {
                release(&mut lock(&self.state));
                return Err(match e {
                    mad::MadError::DeviceFatal { reason } => UmadError::RegisterRemoved { reason },
                    e => UmadError::Registration(e),
                });
            }
        };
        between();
        let mut st = lock(&self.state);
        if st.closed {
            release(&mut st);
            drop(st);
            agent.deregister();
            return Err(UmadError::NotAPort { fd: self.fd });
        }
        st.by_agent.insert(agent.id(), id as u32);
        // What arrived for it before this: in order, ahead of anything later (which
        // `take_events` queues under this lock, now that `by_agent` has it).
        let (early, rest): (Vec<RecvBox>, Vec<RecvBox>) = std::mem::take(&mut st.pending)
            .into_iter()
            .partition(|m| m.agent == agent.id());
        st.pending = rest;
        for m in early {
            st.queue_recv(id as u32, &m);
        }
        st.slots[id] = Slot::Active {
            agent: Arc::new(agent),
            rmpp: rmpp != 0,
        };
        st.forget_pending();
        debug("umad_register", || {
            format!(
                "fd {} registered agent {id} qp {} class {:#x} version {}",
                self.fd, r.qpn, r.class, r.version
            )
        });
        Ok(id as u32)
    }

    /// `UNREGISTER_AGENT`: returns when the agent's sends are all finished (the kernel's
    /// `ib_unregister_mad_agent` is synchronous too); nothing of it is queued afterwards.
    pub fn unregister(&self, id: u32) -> Result<(), UmadError> {
        if id as usize >= MAX_AGENTS {
            return Err(UmadError::AgentRange { id: id.into() });
        }
        let agent = {
            let mut st = lock(&self.state);
            if st.dead.is_some() {
                return Err(UmadError::UnregisterUnknownAgent { id });
            }
            let a = match std::mem::replace(&mut st.slots[id as usize], Slot::Free) {
                Slot::Active { agent, .. } => agent,
                other => {
                    st.slots[id as usize] = other;
                    return Err(UmadError::UnregisterUnknownAgent { id });
                }
            };
            st.by_agent.remove(&a.id());
            st.sends.retain(|_, s| s.key.slot != id);
            a
        };
        deregister(agent);
        Ok(())
    }

    /// The checks the kernel's `ib_umad_write` makes on the header and the MAD's first 36
    /// bytes (`head`: the header, then those bytes) before it copies the rest of a write
    /// whose MAD is `mad_len` bytes long, without sending: as [`UmadFile::write_parts`]
    /// makes them, up to the duplicate rule.
    pub fn check_write(
        &self,
        head: &[u8; HDR_LEN + MIN_WRITE_MAD],
        mad_len: usize,
    ) -> Result<(), UmadError> {
        let hdr = check_head(head, mad_len)?;
        let active = rmpp_active(&head[HDR_LEN..]);
        admit(&lock(&self.state), &hdr, head[HDR_LEN + 1], active, mad_len).map(|_| ())
    }

    /// `write(2)` on the umad fd: one header and MAD (`bytes`); returns the bytes taken. As
    /// [`UmadFile::write_parts`] with the whole buffer at hand.
    pub fn write(&self, bytes: &[u8]) -> Result<usize, UmadError> {
        let Some(head) = bytes.first_chunk::<{ HDR_LEN + MIN_WRITE_MAD }>() else {
            return Err(UmadError::ShortWrite {
                len: bytes.len(),
                hdr: HDR_LEN,
            });
        };
        self.write_parts(head, bytes.len() - HDR_LEN, || &bytes[HDR_LEN..])
    }

    /// `write(2)` of a header and a `mad_len`-byte MAD of which only `head` (the header, then
    /// the MAD's first 36 bytes) has been read; `rest` gives the whole MAD, and is called only
    /// once every check passed (`umad_send` reads no more of the caller's buffer before).
    ///
    /// The kernel's checks, in its order, under the file's lock once: a MAD of at least 36
    /// bytes (else EINVAL), an agent ID in range (EINVAL), the device alive (EIO), the agent
    /// registered (EIO), a length the send may have: at least the class's headers (EINVAL),
    /// then one MAD or any length for an RMPP-active
    /// send of an agent the MAD layer does RMPP for (`ib_create_send_mad`, EINVAL), and no
    /// outstanding duplicate (`is_duplicate`, EINVAL; not asked of an RMPP-active segment of
    /// an agent the MAD layer does no RMPP for). The RMPP header of an RMPP-class MAD of
    /// an agent with the MAD layer's RMPP is sent as the kernel sends it, not as written (see
    /// `kernel_rmpp_header`). Returns the bytes taken, header included.
    pub fn write_parts<'a>(
        &self,
        head: &[u8; HDR_LEN + MIN_WRITE_MAD],
        mad_len: usize,
        rest: impl FnOnce() -> &'a [u8],
    ) -> Result<usize, UmadError> {
        let hdr = check_head(head, mad_len)?;
        let mad = &head[HDR_LEN..];
        let class = mad[1];
        let active = rmpp_active(mad);
        let attr_mod = u32::from_be_bytes([mad[20], mad[21], mad[22], mad[23]]);
        let key = DupKey {
            slot: hdr.agent_id,
            tid: u64::from_be_bytes(mad[8..16].try_into().expect("36 bytes")),
            class,
            response: is_response(class, mad[3], attr_mod),
            dest: Destination::of(&hdr),
        };
        let (agent, seq, kernel_rmpp) = {
            let mut st = lock(&self.state);
            let (agent, kernel_rmpp) = admit(&st, &hdr, class, active, mad_len)?;
            // ib_umad_write (drivers/infiniband/core/user_mad.c) adds an RMPP-active MAD of
            // an agent without the MAD layer's RMPP to the send list without is_duplicate:
            // such an agent sends a transfer's segments one by one, all with its TID (the MAD
            // layer sends those after the First with the First's wire TID, as the kernel's
            // hi_tid does: mad::rmpp::user_send). It is still recorded, and later writes are
            // checked against it.
            let user_segment = !kernel_rmpp && active;
            if !user_segment && st.sends.values().any(|s| is_duplicate(&key, &s.key)) {
                return Err(UmadError::Duplicate {
                    what: if key.response { "response" } else { "request" },
                    tid: key.tid,
                    class,
                });
            }
            let seq = st.next_seq;
            st.next_seq += 1;
            st.sends.insert(seq, Sent { key, hdr });
            (agent, seq, kernel_rmpp)
        };
        let mut message = rest().to_vec();
        debug_assert_eq!(message.len(), mad_len);
        // What was checked is what goes out: the caller's buffer may have changed between
        // the two reads (another thread writing it during `umad_send`). The kernel also sends
        // the common header from its first copy.
        let checked = MIN_WRITE_MAD.min(message.len());
        message[..checked].copy_from_slice(&head[HDR_LEN..HDR_LEN + checked]);
        if kernel_rmpp && is_rmpp_capable(class) {
            kernel_rmpp_header(&mut message, active);
        }
        let req = SendRequest::new(message, dest_of(&hdr, true, agent.qp()))
            .timeout_ms(hdr.timeout_ms)
            .retries(hdr.retries)
            .context(seq);
        match agent.send(req) {
            Ok(_) => Ok(HDR_LEN + mad_len),
            Err(e) => {
                lock(&self.state).sends.remove(&seq);
                Err(UmadError::Send(e))
            }
        }
    }

    /// `read(2)` on the umad fd (non-blocking, as libibumad opens it): the next packet into
    /// `buf`, header first.
    pub fn read(&self, buf: &mut [u8]) -> Result<usize, UmadError> {
        if buf.len() < HDR_LEN {
            return Err(UmadError::BufferTooSmall {
                len: buf.len(),
                need: HDR_LEN,
            });
        }
        let mut st = lock(&self.state);
        if let Some(reason) = st.dead.clone() {
            return Err(UmadError::Dead { reason });
        }
        if let Some(reason) = self.port.marked_removed() {
            // The port is marked and this file's turn has not come yet.
            return Err(UmadError::Dead {
                reason: reason.to_owned(),
            });
        }
        if st.closed {
            return Err(UmadError::NotAPort { fd: self.fd });
        }
        let p = st.queue.pop().ok_or(UmadError::Again)?;
        match p.copy_out(HDR_LEN, buf) {
            Ok(n) => Ok(n),
            Err(e) => {
                st.queue.requeue(p);
                Err(e)
            }
        }
    }

    /// `umad_recv`: the next packet into `buf` (as [`UmadFile::read`]), running the port's
    /// progress loop in this thread (or waiting for the thread that runs it) until one is
    /// queued or `until` (device time) passes; then `Again`. With `until` already past, one
    /// pass of the loop if no other thread is running it, and a read. A `blocking` caller
    /// (a timeout other than 0: it will be back) leaves what else is queued unshown for a
    /// while (see [`ReadQueue::release`]); a caller that polls the fd gets it shown at once.
    pub fn recv_wait(
        &self,
        buf: &mut [u8],
        until: Duration,
        blocking: bool,
    ) -> Result<usize, UmadError> {
        self.recv_wait_from(buf, until, self.port.mad.now(), blocking)
    }

    /// [`UmadFile::recv_wait`] for a caller that has just read the device clock (`now`):
    /// a step that does not sleep reads it no more (`umad_recv` of libibnetdisc's SMPs
    /// finds its response at once, and each read of the clock is a system call's worth of
    /// its round trip on a VM).
    pub fn recv_wait_from(
        &self,
        buf: &mut [u8],
        until: Duration,
        now: Duration,
        blocking: bool,
    ) -> Result<usize, UmadError> {
        let mut hold = Hold::new(self);
        hold.show = !blocking;
        let mut waiting = blocking.then(|| self.port.drive.enter(&self.port.mad));
        if until <= now {
            // No sleep: the wait ends about when it began, as far as the fallback thread's
            // 2 ms idle rule can tell.
            if let Some(w) = waiting.as_mut() {
                w.ends_at(now);
            }
        }
        match self.read(buf) {
            Err(UmadError::Again) => {}
            r => return r,
        }
        if until <= now {
            self.port.mad.progress();
            return self.read(buf);
        }
        loop {
            let more = self.port.mad.progress_or_wait(until);
            match self.read(buf) {
                Err(UmadError::Again) if more => {}
                r => return r,
            }
        }
    }

    /// `umad_poll`: whether a packet is queued (or the device gone) by `until` (device time),
    /// running the port's progress loop meanwhile as [`UmadFile::recv_wait`] does.
    pub fn wait_readable(&self, until: Duration) -> Result<bool, UmadError> {
        let ready = || {
            let st = lock(&self.state);
            if st.closed {
                return Err(UmadError::NotAPort { fd: self.fd });
            }
            Ok(st.dead.is_some() || !st.queue.is_empty())
        };
        if ready()? {
            return Ok(true);
        }
        let _waiting = self.port.drive.enter(&self.port.mad);
        loop {
            let more = self.port.mad.progress_or_wait(until);
            if ready()? || !more {
                return ready();
            }
        }
    }

    /// Make the fd readable if packets wait and no reader holds the queue (what a reader
    /// that blocked left; see [`ReadQueue::release`]).
    pub fn show_queued(&self) {
        lock(&self.state).queue.show();
    }

    /// The device is going: `poll` reports POLLERR from now on (reads fail once the port is
    /// marked removed, or the file killed).
    pub(crate) fn signal_dead(&self) {
        lock(&self.state).queue.kill();
    }

    /// The device is gone: reads fail with EIO, `poll` reports POLLERR.
    pub fn kill(&self, reason: &str) {
        let mut st = lock(&self.state);
        if st.dead.is_none() {
            st.dead = Some(reason.to_owned());
            st.queue.kill();
        }
    }

    /// `close(2)`: unregister every agent (each returns when its sends are finished), drop
    /// what is queued. The fd itself is closed by [`UmadFile::close_fd`], or when the last
    /// handle goes, and only if it still names this file's socket.
    pub fn close(&self) {
        let agents: Vec<Arc<Agent>> = {
            let mut st = lock(&self.state);
            st.closed = true;
            st.by_agent.clear();
            st.pending.clear();
            st.sends.clear();
            let agents = st
                .slots
                .iter_mut()
                .filter_map(|s| match std::mem::replace(s, Slot::Free) {
                    Slot::Active { agent, .. } => Some(agent),
                    _ => None,
                })
                .collect();
            st.queue.clear();
            agents
        };
        for a in agents {
            deregister(a);
        }
        self.events.set_notify(None);
        lock(&self.state).queue.clear();
    }

    /// Move what the MAD layer delivered into the read queue (the event queue's notify:
    /// runs on the progress thread).
    fn take_events(&self) {
        let mut evs = lock(&self.scratch);
        if self.events.drain_into(&mut evs) == 0 {
            return;
        }
        let mut st = lock(&self.state);
        let mut died = None;
        for ev in evs.drain(..) {
            match ev {
                Event::Recv(r) => match st.by_agent.get(&r.agent) {
                    Some(&slot) => st.queue_recv(slot, &r),
                    None if !st.closed && st.slots.iter().any(|s| matches!(s, Slot::Reserved)) => {
                        if st.pending.len() < st.queue.limit() {
                            st.pending.push(r);
                        } else {
                            st.queue.count_dropped();
                        }
                    }
                    None => {}
                },
                Event::Send(c) => {
                    let Some(sent) = st.sends.remove(&c.context) else {
                        continue;
                    };
                    if sent.hdr.timeout_ms == 0 || c.status == WcStatus::Success {
                        continue;
                    }
                    let Some(&slot) = st.by_agent.get(&c.agent) else {
                        continue;
                    };
                    debug("umad_recv", || {
                        format!(
                            "fd {} agent {slot}: send TID {:#018x} ended {:?}: returned as \
                             ETIMEDOUT",
                            self.fd, c.tid, c.status
                        )
                    });
                    st.queue
                        .push(Packet::timed_out(sent.hdr, slot, c.header), true);
                }
                Event::DeviceFatal { reason, .. } => {
                    died.get_or_insert(reason);
                }
            }
        }
        drop(st);
        drop(evs);
        if let Some(reason) = died {
            // The whole port dies at once, this file with it, as the kernel's
            // `ib_umad_kill_port` marks every file: once a read of any fd of the port says
            // EIO, every other fd of it says so too (the agents hear of the death one after
            // another, the port's own sentinel perhaps last).
            self.port.mark_removed(&reason);
            self.kill(&reason);
        }
    }
}

impl State {
    /// Queue MAD `r` received for agent `slot`.
    fn queue_recv(&mut self, slot: u32, r: &mad::RecvMad) {
        // A reassembled RMPP message goes up whole, as the kernel's umad hands it to read()
        // (ENOSPC first when the reader's buffer is short).
        let data = match &r.rmpp {
            Some(message) => message.clone(),
            None => r.mad.to_vec(),
        };
        let hdr = recv_header(slot, r, HDR_LEN, data.len());
        let exempt = r.response_to.is_some();
        self.queue.push(
            Packet {
                hdr,
                data,
                received: true,
            },
            exempt,
        );
    }

    /// Drop the pending MADs once no registration is under way: no agent will claim them.
    fn forget_pending(&mut self) {
        if !self.slots.iter().any(|s| matches!(s, Slot::Reserved)) {
            self.pending.clear();
        }
    }
}

/// The checks of a write that need no lock: a MAD of at least 36 bytes, an agent ID in
/// range. Returns the header.
fn check_head(
    head: &[u8; HDR_LEN + MIN_WRITE_MAD],
    mad_len: usize,
) -> Result<IbUserMad, UmadError> {
    if mad_len < MIN_WRITE_MAD {
        return Err(UmadError::ShortWrite {
            len: HDR_LEN + mad_len,
            hdr: HDR_LEN,
        });
    }
    let hdr = IbUserMad::from_bytes(head[..HDR_LEN].try_into().expect("header length"));
    if hdr.agent_id as usize >= MAX_AGENTS {
        return Err(UmadError::AgentRange {
            id: hdr.agent_id.into(),
        });
    }
    Ok(hdr)
}

/// Whether `mad` (at least its first 36 bytes) is of an RMPP-capable class and has the RMPP
/// Active flag set: worked out once per write from the checked bytes.
fn rmpp_active(mad: &[u8]) -> bool {
    is_rmpp_capable(mad[1])
        && Rmpp::new_checked(mad).is_ok_and(|r| r.flags() & rmpp_flags::ACTIVE != 0)
}

/// The checks of a write made under the file's lock (`st`), but the duplicate rule: the
/// device alive, the agent registered, and a length the send may have: at least the
/// headers of the MAD's `class` (`ib_umad_write`'s `check_sub_overflow` against
/// `ib_get_mad_data_offset`), and no more than one MAD but for RMPP. Returns the agent and
/// whether the MAD layer does RMPP for it. `active`: the MAD is an RMPP-active one of an
/// RMPP-capable class ([`rmpp_active`]).
fn admit(
    st: &State,
    hdr: &IbUserMad,
    class: u8,
    active: bool,
    mad_len: usize,
) -> Result<(Arc<Agent>, bool), UmadError> {
    if let Some(reason) = st.dead.clone() {
        return Err(UmadError::Dead { reason });
    }
    let Slot::Active { agent, rmpp } = &st.slots[hdr.agent_id as usize] else {
        return Err(UmadError::SendUnknownAgent { id: hdr.agent_id });
    };
    let need = mad::wire::class::data_offset(class);
    if mad_len < need {
        return Err(UmadError::ShortForClass {
            len: mad_len,
            class,
            need,
        });
    }
    if !(*rmpp && active) && mad_len > MAD_LEN {
        return Err(UmadError::Send(mad::MadError::MadTooLarge {
            len: mad_len,
            max: MAD_LEN,
        }));
    }
    Ok((Arc::clone(agent), *rmpp))
}

/// The RMPP header (bytes 24 to 35) of a MAD of an RMPP-capable class sent by an agent the
/// MAD layer does RMPP for, as the kernel's `ib_umad_write` leaves it: it copies only the
/// 24-byte common header and the bytes from 36 on over a zeroed buffer, so none of the
/// user's RMPP fields reach the wire. What `ib_create_send_mad` then puts there for an
/// RMPP-active send (`alloc_send_rmpp_list`: RMPPVersion, DATA, Active) and `send_next_seg`
/// per segment (First, Last, SegmentNumber, PayloadLength) the MAD layer writes; RRespTime and
/// RMPPStatus stay 0. Without the Active flag (`active` false) the header goes out all zero.
fn kernel_rmpp_header(mad: &mut [u8], active: bool) {
    mad[MAD_HDR_LEN..MIN_WRITE_MAD].fill(0);
    if active {
        let mut r = Rmpp::new_checked(&mut mad[..]).expect("36 bytes: an RMPP header");
        r.set_flags(rmpp_flags::ACTIVE);
    }
}

/// A reader waiting in this library holds its file's queue (see [`ReadQueue::hold`]); a
/// reader that blocked (and so is likely to block again) leaves what remains for
/// [`UmadFile::show_queued`].
struct Hold<'a> {
    file: &'a UmadFile,
    show: bool,
}

impl<'a> Hold<'a> {
    fn new(file: &'a UmadFile) -> Hold<'a> {
        lock(&file.state).queue.hold();
        Hold { file, show: true }
    }
}

impl Drop for Hold<'_> {
    fn drop(&mut self) {
        lock(&self.file.state).queue.release(self.show);
    }
}

/// Deregister an agent, waiting for a sender that still holds it to let go (a send in
/// flight on another thread takes a moment).
fn deregister(mut a: Arc<Agent>) {
    loop {
        match Arc::try_unwrap(a) {
            Ok(agent) => {
                agent.deregister();
                return;
            }
            Err(back) => {
                a = back;
                std::thread::yield_now();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::context::Context;
    use std::time::Instant;

    /// A context over a standalone simulated ConnectX (LID 1), and the port.
    fn rig() -> (Context, Arc<CaPort>, sim::net::Network) {
        let (model, net) =
            sim::mlx5::Mlx5::standalone_default(sim::ClockMode::Real).expect("simulated ConnectX");
        let backend = embed::backend_for(Arc::new(model), "sim");
        let ctx = Context::from_backends(vec![("sim".into(), backend)]).expect("context");
        let port = Arc::clone(&ctx.cas()[0].ports[0]);
        (ctx, port, net)
    }

    fn sa(methods: u64) -> Registration {
        Registration {
            qpn: 1,
            class: 0x03,
            version: 2,
            methods: [methods, 0],
            oui: 0,
            rmpp_version: 0,
            flags: 0,
        }
    }

    /// An SA Get from `agent` to LID 1, QP1.
    fn sa_get(agent: u32, tid: u64) -> Vec<u8> {
        let mut h = IbUserMad {
            agent_id: agent,
            timeout_ms: 1000,
            ..IbUserMad::default()
        };
        h.addr.lid = 1u16.to_be();
        h.addr.qpn = 1u32.to_be();
        h.addr.qkey = 0x8001_0000u32.to_be();
        let mut b = h.to_bytes().to_vec();
        let mut m = [0u8; MAD_LEN];
        (m[0], m[1], m[2], m[3]) = (1, 0x03, 2, 0x01);
        m[8..16].copy_from_slice(&tid.to_be_bytes());
        m[16..18].copy_from_slice(&0x0011u16.to_be_bytes());
        b.extend_from_slice(&m);
        b
    }

    #[test]
    fn a_mad_arriving_while_its_agent_registers_is_read() {
        let (ctx, port, _net) = rig();
        let client = ctx.open_file(&port).unwrap();
        let server = ctx.open_file(&port).unwrap();
        let c = client.register(&sa(0)).unwrap();
        let id = server
            .register_with(&sa(1 << 0x01), || {
                // The MAD layer has the server's agent; the file does not yet.
                let before = port.mad.counters().unsolicited;
                client.write(&sa_get(c, 0x5151)).unwrap();
                let end = Instant::now() + Duration::from_secs(5);
                while port.mad.counters().unsolicited == before {
                    assert!(Instant::now() < end, "the Get was never delivered");
                    port.mad.progress();
                }
            })
            .unwrap();
        // Another thread may have counted the delivery and not yet handed the event to the
        // file: give it a moment (a Get lost for good stays Again past the deadline).
        let mut buf = vec![0u8; HDR_LEN + MAD_LEN];
        let end = Instant::now() + Duration::from_secs(5);
        let n = loop {
            match server.read(&mut buf) {
                Err(UmadError::Again) if Instant::now() < end => {
                    port.mad.progress();
                }
                r => break r.expect("the Get that arrived during registration"),
            }
        };
        assert_eq!(n, HDR_LEN + MAD_LEN);
        let h = IbUserMad::from_bytes(buf[..HDR_LEN].try_into().unwrap());
        assert_eq!(h.agent_id, id);
        let m = &buf[HDR_LEN..];
        assert_eq!((m[1], m[3]), (0x03, 0x01));
        assert_eq!(
            u64::from_be_bytes(m[8..16].try_into().unwrap()) as u32,
            0x5151
        );
        assert!(
            matches!(server.read(&mut buf), Err(UmadError::Again)),
            "once"
        );
        assert!(
            lock(&server.state).pending.is_empty(),
            "nothing left pending"
        );
        ctx.close_file(client.fd()).unwrap();
        ctx.close_file(server.fd()).unwrap();
        ctx.close().unwrap();
    }
}

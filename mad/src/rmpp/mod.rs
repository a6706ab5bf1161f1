//! RMPP (reference/mad-stack.md §2.9; the kernel's `mad_rmpp.c`): messages larger than one MAD
//! for the RMPP-capable classes (SA, DevMgt, DevAdm, BIS, vendor range 2), for agents
//! registered with RMPP version 1. It sits between such an agent and the port's send ring.
//!
//! - **Sending.** A send whose RMPP header has the Active flag set (any length from the class
//!   header up) is one transfer: cut into DATA segments ([`segment`]), posted one at a time in
//!   the receiver's window, ACKs awaited, lost segments resent on the ACK timeout, STOP and
//!   ABORT honoured ([`sender`]). Each segment is a send of the port's RMPP agent with a DMA
//!   lease of its own, released at its completion; the client's send has exactly one
//!   completion, reported after its last segment left the QP. A request sent with RMPP gets a
//!   TID the ring never uses (the QP0 pattern on QP1), so its ACKs and response find it here.
//!   A modified timeout times one ACK or response wait, as the kernel's since "IB/mad: Do not
//!   save the MRA timeout" (`rmpp_modify`); the response wait is always the client's timeout.
//! - **Receiving.** DATA segments for such an agent are reassembled ([`receiver`]), ACKed at
//!   each window's end, and the whole message is delivered once, as one receive (with
//!   [`crate::RecvMad::rmpp`] holding it): a request to the agent registered for it, a
//!   response through the port's response matching (it finishes the request it answers). A
//!   segment reaches its reassembly (open, or kept for late copies) by the segment alone,
//!   whatever became of the request's send and its slot (the kernel's `continue_rmpp`); the
//!   agent of a request sent with RMPP is remembered by its TID for [`REASSEMBLY_TIMEOUT`]
//!   after the request ended, so that a response still coming is reassembled, acknowledged
//!   and dropped, and a bad ACK refused, as the kernel does finding the agent by `hi_tid`. A
//!   transfer not complete 40 s after its first segment is aborted (ABORT, status T2L): the
//!   deadline is set once, at segment 1, and not moved by later segments (the kernel's
//!   `start_rmpp` arms its timeout work once too), so a transfer still moving after 40 s is
//!   aborted as well as a stalled one. A completed one is remembered for 10 s to acknowledge
//!   late duplicates. How many reassemblies a port holds, and how many segments in all, is
//!   bounded ([`RmppLimits`]; the kernel sets no bound): past the bound a new transfer is
//!   refused with STOP (resources exhausted), as one longer than [`MAX_SEGMENTS`] is.
//! - **Agents without RMPP** get segments as they come (the kernel's user RMPP): requests by
//!   registration, and response segments that match no waiting send delivered to the agent
//!   whose send the TID names, even once that send's slot went to another send ([`user`]).
//!   What such an agent sends after a transfer's First segment (later segments, ACKs, STOPs,
//!   ABORTs) goes with the transfer's TID ([`user_send`]).

pub mod receiver;
pub mod segment;
pub mod sender;
#[cfg(all(test, not(loom)))]
mod tests;
pub mod user;
pub mod user_send;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use driver::verbs::{SOFTWARE_FLUSH_VENDOR_ERR, SpecialQp, UdDest, WcStatus};
use mad_wire::header::{HEADER_LEN, MAD_LEN, Mad, is_response};
use mad_wire::rmpp::{Rmpp as RmppView, flags, rmpp_status, rmpp_type};
use mad_wire::{class, method, vendor};

use crate::addr::{RecvAddr, same_address};
use crate::agent::{AgentInner, AgentSpec};
use crate::counters::{DropReason, bump};
use crate::error::MadError;
use crate::event::{AgentId, Event, EventQueue, RecvBox, RecvMad, SendCompletion, SendId, SendRef};
use crate::port::{Port, PortShared, ProgressState, qpi};
use crate::ring::{Pending, lock};

use receiver::{MAX_SEGMENTS, Receiver, RecvStep};
use segment::Layout;
use sender::{Reply, Sender, Step, Wait};
use user::{DEFAULT_MAX_USER_TRANSFERS, UserTransfers};

/// How long after its first segment a reassembly must be complete, or be aborted with T2L
/// (the kernel's 40 s "until we can find the packet lifetimes", counted from segment 1 and
/// never extended).
pub const REASSEMBLY_TIMEOUT: Duration = Duration::from_secs(40);
/// How long a completed reassembly is kept to acknowledge duplicates (the kernel's 10 s).
pub const CLEANUP_DELAY: Duration = Duration::from_secs(10);

/// The agent ID of the port's RMPP agent (never given to a client).
const RMPP_AGENT: AgentId = AgentId(u32::MAX - 1);
/// Bit 23 of the TID's upper half: the ring's QP1 bit. Clear in the TIDs of RMPP requests, so
/// the ring (whose QP1 TIDs all have it) never takes their responses for its own.
const RING_QP1_BIT: u32 = 1 << 23;

/// What RMPP on a port has done since it was opened ([`Port::rmpp_counters`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RmppCounters {
    /// Transfers sent (clients' RMPP-active sends accepted).
    pub transfers_sent: u64,
    /// DATA segments posted, first sends and resends.
    pub segments_sent: u64,
    /// Segments posted again (after an ACK timeout, the go-back resend of the unacknowledged
    /// ones).
    pub segments_resent: u64,
    /// ACKs received for transfers sent.
    pub acks_received: u64,
    /// Transfers sent that ended with the receiver's STOP or ABORT.
    pub remote_aborts: u64,
    /// Transfers received whole: delivered, or dropped (counted as a late response) when the
    /// request they answer ended while they came in.
    pub transfers_received: u64,
    /// DATA segments taken into a reassembly (duplicates and late copies included).
    pub segments_received: u64,
    /// DATA segments dropped (duplicate, beyond the window, for no transfer).
    pub segments_dropped: u64,
    /// ACKs sent.
    pub acks_sent: u64,
    /// ABORTs and STOPs sent (bad segments, bad ACKs, reassembly timeouts).
    pub aborts_sent: u64,
    /// Reassemblies aborted after [`REASSEMBLY_TIMEOUT`] (ABORT with T2L).
    pub reassembly_timeouts: u64,
    /// Transfers refused or stopped with STOP (resources exhausted): longer than
    /// [`MAX_SEGMENTS`], or beyond the port's [`RmppLimits`].
    pub transfers_refused: u64,
    /// Segments of agents without RMPP delivered as they came.
    pub raw_delivered: u64,
    /// User-RMPP responses under way forgotten before their Last segment to keep within
    /// [`RmppLimits::max_user_transfers`] (their later segments are dropped). Completed ones
    /// forgotten early for room are not counted: they go first, and cost only a final ACK's
    /// TID if the request's slot went to another agent's send.
    pub user_transfers_evicted: u64,
    /// User-RMPP responses under way forgotten [`REASSEMBLY_TIMEOUT`] after their first
    /// segment without their Last one.
    pub user_transfers_expired: u64,
}

#[derive(Default)]
struct Cells {
    transfers_sent: AtomicU64,
    segments_sent: AtomicU64,
    segments_resent: AtomicU64,
    acks_received: AtomicU64,
    remote_aborts: AtomicU64,
    transfers_received: AtomicU64,
    segments_received: AtomicU64,
    segments_dropped: AtomicU64,
    acks_sent: AtomicU64,
    aborts_sent: AtomicU64,
    reassembly_timeouts: AtomicU64,
    transfers_refused: AtomicU64,
    raw_delivered: AtomicU64,
    user_transfers_evicted: AtomicU64,
    user_transfers_expired: AtomicU64,
}

impl Cells {
    fn snapshot(&self) -> RmppCounters {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        RmppCounters {
            transfers_sent: g(&self.transfers_sent),
            segments_sent: g(&self.segments_sent),
            segments_resent: g(&self.segments_resent),
            acks_received: g(&self.acks_received),
            remote_aborts: g(&self.remote_aborts),
            transfers_received: g(&self.transfers_received),
            segments_received: g(&self.segments_received),
            segments_dropped: g(&self.segments_dropped),
            acks_sent: g(&self.acks_sent),
            aborts_sent: g(&self.aborts_sent),
            reassembly_timeouts: g(&self.reassembly_timeouts),
            transfers_refused: g(&self.transfers_refused),
            raw_delivered: g(&self.raw_delivered),
            user_transfers_evicted: g(&self.user_transfers_evicted),
            user_transfers_expired: g(&self.user_transfers_expired),
        }
    }
}

/// One transfer being sent.
struct Transfer {
    agent: Arc<AgentInner>,
    id: SendId,
    context: u64,
    dest: UdDest,
    mgmt_class: u8,
    tid: u64,
    is_response: bool,
    /// The message with the TID and RMPP fields it is sent with.
    message: Vec<u8>,
    layout: Layout,
    sender: Sender,
    /// The client's timeout, kept for the whole transfer (the kernel's `send_buf.timeout_ms`,
    /// which a modify no longer changes): each ACK wait's ([`Sender::ack_timeout`]) and the
    /// response wait's.
    timeout_ms: u32,
    /// A modified timeout for the next wait, given while a segment is on the QP (the kernel's
    /// `mad_send_wr->timeout` set by `ib_modify_mad` in SEND_START): the ACK wait that
    /// segment's completion begins takes it, once. See [`PortShared::rmpp_modify`].
    wait_ms: Option<u32>,
    deadline: Option<Duration>,
    /// The send of the segment on the QP.
    in_flight: Option<SendId>,
    /// The highest segment posted so far (a lower one posted again is a resend).
    max_posted: u32,
}

impl Transfer {
    fn completion(&self, status: WcStatus, vendor_err: u32) -> SendCompletion {
        let mut header = [0u8; HEADER_LEN];
        header.copy_from_slice(&self.message[..HEADER_LEN]);
        SendCompletion {
            agent: self.agent.id,
            id: self.id,
            context: self.context,
            status,
            vendor_err,
            retries: self.sender.retries_used,
            tid: self.tid,
            header,
        }
    }
}

/// What identifies a transfer being received (`find_rmpp_recv`). The kernel keeps a list per
/// agent; one table per port keyed without the agent is the same, since a segment with a given
/// key reaches one agent only (a request by registration, a response by its TID).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Key {
    tid: u64,
    src_qp: u32,
    slid: u16,
    mgmt_class: u8,
    class_version: u8,
    method: u8,
}

impl Key {
    fn of(mad: &[u8; MAD_LEN], addr: &RecvAddr) -> Key {
        let h = Mad::new_checked(&mad[..]).expect("a full MAD holds a header");
        Key {
            tid: h.tid(),
            src_qp: addr.src_qp,
            slid: addr.slid,
            mgmt_class: h.mgmt_class(),
            class_version: h.class_version(),
            method: h.method(),
        }
    }
}

/// One transfer being received.
struct Reassembly {
    agent: Arc<AgentInner>,
    receiver: Receiver,
    /// The first segment (its header makes the ABORT of a timeout) and where it came from.
    first: Box<[u8; MAD_LEN]>,
    addr: RecvAddr,
    /// The transfer is aborted at this time while active, forgotten once complete.
    deadline: Duration,
}

/// How much a port's peers may make it hold in reassemblies. The kernel sets no bound; ours
/// is stricter because the memory is this process's and any node of the subnet can send
/// First segments with new TIDs, each of which would otherwise open a reassembly kept for
/// [`REASSEMBLY_TIMEOUT`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RmppLimits {
    /// Reassemblies at once, open or completed (kept [`CLEANUP_DELAY`] for late copies).
    /// Default: the QP1 receive queue's depth, one per receive buffer (the kernel's 512 by
    /// default, far more than the transfers a node has under way). At the limit a completed
    /// one is forgotten early to make room; if none is, a new transfer is refused.
    pub max_reassemblies: usize,
    /// Segments held by all open reassemblies together. Default: [`MAX_SEGMENTS`], so that
    /// one message of the most segments a reassembly takes still fits (about 64 MiB of
    /// 256-byte segments), and all of them together no more.
    pub max_segments_held: usize,
    /// User-RMPP responses whose agent is remembered after the request's send slot went to
    /// another send ([`user`]): under way, or completed and kept [`CLEANUP_DELAY`] for the
    /// user's final ACK. Default: [`DEFAULT_MAX_USER_TRANSFERS`]. At the limit the completed
    /// one due soonest is forgotten; if none is, the oldest under way (counted in
    /// [`RmppCounters::user_transfers_evicted`]).
    pub max_user_transfers: usize,
}

impl RmppLimits {
    /// The defaults for a port whose QP1 receive queue holds `recv_depth` buffers.
    pub fn for_recv_depth(recv_depth: u32) -> RmppLimits {
        RmppLimits {
            max_reassemblies: recv_depth.max(1) as usize,
            max_segments_held: MAX_SEGMENTS as usize,
            max_user_transfers: DEFAULT_MAX_USER_TRANSFERS,
        }
    }
}

/// What RMPP on a port holds now ([`Port::rmpp_census`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RmppCensus {
    /// Transfers being sent (or waiting for their segment's completion).
    pub transfers: usize,
    /// Reassemblies, open or completed and kept for late copies.
    pub reassemblies: usize,
    /// Segments the open reassemblies hold.
    pub segments_held: usize,
    /// User-RMPP responses under way whose agent is remembered by TID.
    pub user_transfers: usize,
    /// User-RMPP responses completed (their Last segment came) less than [`CLEANUP_DELAY`]
    /// ago whose agent is remembered by TID, for the user's final ACK.
    pub user_transfers_completed: usize,
    /// RMPP requests ended less than [`REASSEMBLY_TIMEOUT`] ago whose agent is remembered
    /// by TID (for their responses still coming).
    pub ended_requests: usize,
}

/// Take `x` out of the (TID, class) index.
fn unindex(by_tid: &mut HashMap<(u64, u8), Vec<SendId>>, x: &Transfer) {
    if let std::collections::hash_map::Entry::Occupied(mut e) = by_tid.entry((x.tid, x.mgmt_class))
    {
        e.get_mut().retain(|&i| i != x.id);
        if e.get().is_empty() {
            e.remove();
        }
    }
}

struct Table {
    /// Transfers being sent, by send ID (the order they were accepted in).
    sends: BTreeMap<SendId, Transfer>,
    /// The IDs of `sends` by (TID, class): what an ACK, STOP, ABORT or response names, so
    /// that finding its transfer does not walk them all.
    by_tid: HashMap<(u64, u8), Vec<SendId>>,
    recvs: HashMap<Key, Reassembly>,
    /// Segments held by all of `recvs`.
    held: usize,
    /// User-RMPP responses under way.
    user: UserTransfers,
    /// RMPP requests that ended, by TID, for [`REASSEMBLY_TIMEOUT`]: their agent, for the
    /// segments, ACKs, STOPs and ABORTs still coming (the kernel's `find_mad_agent` finds the
    /// agent by `hi_tid` whatever became of the send). Bounded as `user` is.
    ended: UserTransfers,
    limits: RmppLimits,
}

/// Remember the agent of transfer `x`, being forgotten at `now`, if it is a request.
fn remember_ended(ended: &mut UserTransfers, x: &Transfer, now: Duration, max: usize) {
    if !x.is_response {
        let peer = (x.dest.dlid, x.dest.remote_qpn);
        let deadline = now + REASSEMBLY_TIMEOUT;
        ended.insert(x.tid, x.agent.id, x.mgmt_class, peer, deadline, max);
    }
}

impl Table {
    fn new(limits: RmppLimits) -> Table {
        Table {
            sends: BTreeMap::new(),
            by_tid: HashMap::new(),
            recvs: HashMap::new(),
            held: 0,
            user: UserTransfers::default(),
            ended: UserTransfers::default(),
            limits,
        }
    }

    /// Add transfer `x`.
    fn add_send(&mut self, x: Transfer) {
        self.by_tid
            .entry((x.tid, x.mgmt_class))
            .or_default()
            .push(x.id);
        self.sends.insert(x.id, x);
    }

    /// Forget transfer `id` (at `now`: a request's agent is remembered by its TID).
    fn remove_send(&mut self, id: SendId, now: Duration) -> Option<Transfer> {
        let x = self.sends.remove(&id)?;
        unindex(&mut self.by_tid, &x);
        remember_ended(&mut self.ended, &x, now, self.limits.max_user_transfers);
        Some(x)
    }

    /// Forget the transfers `keep` refuses (at `now`, as [`Table::remove_send`]).
    fn retain_sends(&mut self, mut keep: impl FnMut(&Transfer) -> bool, now: Duration) {
        let (by_tid, ended) = (&mut self.by_tid, &mut self.ended);
        let max = self.limits.max_user_transfers;
        self.sends.retain(|_, x| {
            let k = keep(x);
            if !k {
                unindex(by_tid, x);
                remember_ended(ended, x, now, max);
            }
            k
        });
    }

    /// The transfers with TID `tid` of class `mgmt_class`.
    fn sends_named(&self, tid: u64, mgmt_class: u8) -> impl Iterator<Item = &Transfer> {
        self.by_tid
            .get(&(tid, mgmt_class))
            .into_iter()
            .flatten()
            .filter_map(|id| self.sends.get(id))
    }

    /// Forget reassembly `key`, and the segments it holds.
    fn remove_recv(&mut self, key: &Key) -> Option<Reassembly> {
        let r = self.recvs.remove(key)?;
        self.held -= r.receiver.held();
        Some(r)
    }

    /// Forget the reassemblies `keep` refuses, and the segments they hold.
    fn retain_recvs(&mut self, mut keep: impl FnMut(&Reassembly) -> bool) {
        let mut freed = 0;
        self.recvs.retain(|_, r| {
            let k = keep(r);
            if !k {
                freed += r.receiver.held();
            }
            k
        });
        self.held -= freed;
    }

    /// Whether a new reassembly of one segment fits, after forgetting the completed
    /// reassembly due soonest if the table is full.
    fn room_for_one(&mut self) -> bool {
        if self.recvs.len() >= self.limits.max_reassemblies {
            let oldest = self
                .recvs
                .iter()
                .filter(|(_, r)| r.receiver.complete)
                .min_by_key(|(_, r)| r.deadline)
                .map(|(k, _)| *k);
            match oldest {
                Some(k) => {
                    self.remove_recv(&k);
                }
                None => return false,
            }
        }
        self.held < self.limits.max_segments_held
    }
}

/// What to do once the table's lock is released.
enum Action {
    /// Post a segment (its send ID is the transfer's `in_flight`).
    Segment {
        seg_id: SendId,
        context: u64,
        mad: Box<[u8; MAD_LEN]>,
        dest: UdDest,
    },
    /// Send an ACK, STOP or ABORT.
    Control {
        mad: Box<[u8; MAD_LEN]>,
        dest: UdDest,
    },
    /// Report a client's send's one completion.
    Complete {
        agent: Arc<AgentInner>,
        completion: SendCompletion,
    },
    /// Deliver a received message.
    Deliver {
        agent: Arc<AgentInner>,
        recv: Box<RecvMad>,
    },
    /// A reassembled response to a send of the ring: through response matching.
    Match {
        first: Box<[u8; MAD_LEN]>,
        addr: RecvAddr,
        message: Vec<u8>,
    },
}

/// RMPP on one port.
pub(crate) struct Rmpp {
    /// The agent the segments, ACKs and ABORTs are sent by; their completions come back in
    /// its queue.
    agent: Arc<AgentInner>,
    table: Mutex<Table>,
    cells: Cells,
    next_tid: AtomicU32,
    /// Receive window in segments: an eighth of the receive queue, as the kernel's
    /// `window_size`.
    window: u32,
}

impl Rmpp {
    /// RMPP for a port whose QP1 receive queue holds `recv_depth` buffers.
    pub(crate) fn new(recv_depth: u32) -> Rmpp {
        let events = EventQueue::shared();
        Rmpp {
            agent: Arc::new(AgentInner::new(
                RMPP_AGENT,
                &AgentSpec::send_only(SpecialQp::Gsi),
                Some(events),
                0,
            )),
            table: Mutex::new(Table::new(RmppLimits::for_recv_depth(recv_depth))),
            cells: Cells::default(),
            next_tid: AtomicU32::new(1),
            window: (recv_depth >> 3).max(1),
        }
    }

    /// Sends of the RMPP agent not yet completed (segments and control MADs on the QP).
    pub(crate) fn outstanding(&self) -> usize {
        self.agent.outstanding.load(Ordering::SeqCst)
    }

    /// The earliest timer.
    pub(crate) fn next_deadline(&self) -> Option<Duration> {
        let t = lock(&self.table);
        let sends = t.sends.values().filter_map(|x| x.deadline);
        let recvs = t.recvs.values().map(|r| r.deadline);
        sends
            .chain(recvs)
            .chain(t.user.next_deadline())
            .chain(t.ended.next_deadline())
            .min()
    }

    fn events(&self) -> &EventQueue {
        self.agent
            .events
            .as_ref()
            .expect("the RMPP agent has a queue")
    }
}

impl Port {
    /// What RMPP on this port has done: transfers, segments, ACKs, aborts.
    pub fn rmpp_counters(&self) -> RmppCounters {
        self.shared.rmpp.cells.snapshot()
    }

    /// What RMPP on this port holds now: transfers, reassemblies, segments.
    pub fn rmpp_census(&self) -> RmppCensus {
        let t = lock(&self.shared.rmpp.table);
        RmppCensus {
            transfers: t.sends.len(),
            reassemblies: t.recvs.len(),
            segments_held: t.held,
            user_transfers: t.user.len() - t.user.completed_len(),
            user_transfers_completed: t.user.completed_len(),
            ended_requests: t.ended.len(),
        }
    }

    /// Entries of the (TID, class) index of transfers being sent: as many as transfers,
    /// none left once they are all gone.
    #[cfg(all(test, not(loom)))]
    pub(crate) fn rmpp_index_len(&self) -> usize {
        let t = lock(&self.shared.rmpp.table);
        t.by_tid.values().map(Vec::len).sum()
    }

    /// The bounds on what this port's peers can make it hold in reassemblies.
    pub fn rmpp_limits(&self) -> RmppLimits {
        lock(&self.shared.rmpp.table).limits
    }

    /// Change those bounds; reassemblies already beyond them are left to finish.
    pub fn set_rmpp_limits(&self, limits: RmppLimits) {
        lock(&self.shared.rmpp.table).limits = limits;
    }
}

fn rmpp_flags(mad: &[u8]) -> u8 {
    RmppView::new_checked(mad).map_or(0, |r| r.flags())
}

/// A control MAD (ACK, STOP, ABORT) made from the header of `recv` (`hdr_len` bytes, the rest
/// zero): the method's response bit flipped, Active set, and the given fields.
fn control(
    recv: &[u8; MAD_LEN],
    kind: u8,
    status: u8,
    seg: u32,
    newwin: u32,
) -> Box<[u8; MAD_LEN]> {
    let hdr_len = class::data_offset(recv[1]);
    let mut m = Box::new([0u8; MAD_LEN]);
    m[..hdr_len].copy_from_slice(&recv[..hdr_len]);
    m[3] ^= method::RESPONSE;
    let mut r = RmppView::new_checked(&mut m[..]).expect("a MAD holds an RMPP header");
    if kind != rmpp_type::ACK {
        r.set_rmpp_version(mad_wire::rmpp::VERSION);
    }
    r.set_rmpp_type(kind);
    r.set_flags(flags::ACTIVE);
    r.set_rmpp_status(status);
    r.set_segment_number(seg);
    r.set_paylen_newwin(newwin);
    m
}

impl PortShared {
    /// `Agent::send`'s hook for RMPP: an RMPP-active send of an agent registered with RMPP is
    /// taken as a transfer. `Ok(None)`: not RMPP's (a single MAD).
    pub(crate) fn rmpp_send(
        &self,
        agent: &Arc<AgentInner>,
        mad: &[u8],
        dest: UdDest,
        timeout_ms: u32,
        retries: u32,
        context: u64,
    ) -> Result<Option<SendId>, MadError> {
        if agent.rmpp_version == 0 {
            return Ok(None);
        }
        // Without the Active flag it is a single MAD (`Agent::send` refused the classes
        // without RMPP already).
        if rmpp_flags(mad) & flags::ACTIVE == 0 {
            return Ok(None);
        }
        let mgmt_class = mad[1];
        let need = class::data_offset(mgmt_class);
        let layout = Layout::new(mgmt_class, mad.len()).ok_or(MadError::RmppTooShort {
            len: mad.len(),
            need,
        })?;
        let mut message = mad.to_vec();
        let attr_mod = u32::from_be_bytes([mad[20], mad[21], mad[22], mad[23]]);
        let response = is_response(mgmt_class, mad[3], attr_mod);
        let mut tid = Mad::new_checked(&message[..]).expect("checked").tid();
        if !response {
            let hi = self.rmpp.next_tid.fetch_add(1, Ordering::Relaxed) & (RING_QP1_BIT - 1);
            tid = (u64::from(hi) << 32) | (tid & 0xFFFF_FFFF);
        }
        {
            let mut h = Mad::new_checked(&mut message[..]).expect("checked");
            h.set_tid(tid);
            let mut r = RmppView::new_checked(&mut message[..]).expect("checked");
            r.set_rmpp_version(agent.rmpp_version);
            r.set_rmpp_type(rmpp_type::DATA);
        }
        // Counted before the closing check, as `Agent::send` does.
        agent.outstanding.fetch_add(1, Ordering::SeqCst);
        if agent.closing.load(Ordering::SeqCst) {
            agent.outstanding.fetch_sub(1, Ordering::SeqCst);
            self.notify_all();
            return Err(MadError::AgentClosed);
        }
        let id = self.next_send_id();
        bump(&agent.cells.sends);
        bump(&self.cells.sends);
        bump(&self.rmpp.cells.transfers_sent);
        let mut x = Transfer {
            agent: Arc::clone(agent),
            id,
            context,
            dest,
            mgmt_class,
            tid,
            is_response: response,
            message,
            layout,
            sender: Sender::new(layout.seg_count, timeout_ms, retries),
            timeout_ms,
            wait_ms: None,
            deadline: None,
            in_flight: None,
            max_posted: 0,
        };
        let mut actions = Vec::new();
        let step = x.sender.start();
        self.rmpp_step(&mut x, step, &mut actions);
        lock(&self.rmpp.table).add_send(x);
        self.rmpp_run(None, actions);
        Ok(Some(id))
    }

    /// Carry out `step` of transfer `x`.
    fn rmpp_step(&self, x: &mut Transfer, step: Step, actions: &mut Vec<Action>) {
        match step {
            Step::Nothing => {}
            Step::Post(n) => {
                if n <= x.max_posted {
                    bump(&self.rmpp.cells.segments_resent);
                }
                x.max_posted = x.max_posted.max(n);
                // The kernel's `send_next_seg` sets the 2 s ACK timeout over a modified one
                // unless the client's timeout is 1..=2000 ms, where it leaves it: a modified
                // timeout given while the previous segment was on the QP then waits for the
                // ACK after this one instead.
                if x.timeout_ms == 0 || x.timeout_ms > sender::ACK_TIMEOUT_MS {
                    x.wait_ms = None;
                }
                let mut mad = Box::new([0u8; MAD_LEN]);
                x.layout.segment(&x.message, n, &mut mad);
                let seg_id = self.next_send_id();
                x.in_flight = Some(seg_id);
                x.deadline = None;
                actions.push(Action::Segment {
                    seg_id,
                    context: x.id.0,
                    mad,
                    dest: x.dest,
                });
            }
            Step::ArmAck => {
                let wait = x.wait_ms.take().map_or_else(
                    || Sender::ack_timeout(x.timeout_ms),
                    |ms| Duration::from_millis(u64::from(ms)),
                );
                x.deadline = Some(self.hca.now() + wait);
            }
            Step::ArmResponse => {
                // Always the client's own timeout: the kernel sets it again for the response
                // wait (`ib_process_rmpp_send_wc`, `process_rmpp_ack` read
                // `send_buf.timeout_ms`), whatever a modify set for the ACK wait.
                x.wait_ms = None;
                x.deadline = Some(self.hca.now() + Duration::from_millis(u64::from(x.timeout_ms)));
            }
            Step::Finish(status, vendor_err) => {
                x.deadline = None;
                if status == WcStatus::RemAbortErr {
                    bump(&self.rmpp.cells.remote_aborts);
                }
                actions.push(Action::Complete {
                    agent: Arc::clone(&x.agent),
                    completion: x.completion(status, vendor_err),
                });
            }
        }
    }

    /// Do what the table's handlers decided, without its lock. `st` is there when called from
    /// the progress loop (needed to match a reassembled response).
    fn rmpp_run(&self, mut st: Option<&mut ProgressState>, actions: Vec<Action>) {
        // What RMPP tells its agents goes straight to their queues: the events the pass staged
        // before it go first, so that each agent sees them in the order they happened.
        if let Some(st) = st.as_deref_mut() {
            self.flush_events(st);
        }
        for a in actions {
            match a {
                Action::Segment {
                    seg_id,
                    context,
                    mad,
                    dest,
                } => {
                    bump(&self.rmpp.cells.segments_sent);
                    self.rmpp_post(&mad, dest, seg_id, context);
                }
                Action::Control { mad, dest } => {
                    let id = self.next_send_id();
                    self.rmpp_post(&mad, dest, id, 0);
                }
                Action::Complete { agent, completion } => {
                    self.cells.completed(completion.status);
                    agent.cells.completed(completion.status);
                    agent.deliver(Event::Send(completion), self);
                    agent.outstanding.fetch_sub(1, Ordering::SeqCst);
                    self.notify_all();
                }
                Action::Deliver { agent, recv } => {
                    if recv.response_to.is_some() {
                        bump(&self.cells.responses);
                        bump(&agent.cells.responses);
                    } else {
                        bump(&self.cells.unsolicited);
                        bump(&agent.cells.unsolicited);
                    }
                    agent.deliver(Event::Recv(RecvBox::from(recv)), self);
                }
                Action::Match {
                    first,
                    addr,
                    message,
                } => {
                    if let Some(st) = st.as_deref_mut() {
                        let mut recv = RecvMad::received(&first, message.len(), addr);
                        recv.rmpp = Some(message);
                        self.on_response(st, SpecialQp::Gsi, recv);
                        // Queued now: a later action of this list delivers directly and must
                        // not overtake the response and its send's completion.
                        self.flush_events(st);
                    }
                }
            }
        }
    }

    /// Post one MAD of the RMPP agent (a segment with `context` = its transfer, or a control
    /// MAD with context 0). It goes into a send slot's buffer like any other send.
    fn rmpp_post(&self, mad: &[u8; MAD_LEN], dest: UdDest, id: SendId, context: u64) {
        let agent = &self.rmpp.agent;
        let mut header = [0u8; HEADER_LEN];
        header.copy_from_slice(&mad[..HEADER_LEN]);
        agent.outstanding.fetch_add(1, Ordering::SeqCst);
        bump(&self.cells.sends);
        let build = |agent, buf| Pending {
            agent,
            id,
            mad: buf,
            header,
            dest,
            timeout_ms: 0,
            wait_ms: 0,
            max_retries: 0,
            context,
            solicited: false,
            fc_counted: false,
            reserved: false,
            // The TID is the transfer's: kept as it is, like a response's.
            is_response: true,
            local: false,
        };
        self.enqueue(self.record(SpecialQp::Gsi, agent, mad, build));
    }

    /// The progress loop's hook: segment completions, then expired timers. Returns the work
    /// done.
    pub(crate) fn rmpp_pass(&self, st: &mut ProgressState) -> usize {
        let mut events = Vec::new();
        self.rmpp.events().drain_into(&mut events);
        let now = self.hca.now();
        let mut actions = Vec::new();
        let mut work = events.len();
        {
            let mut t = lock(&self.rmpp.table);
            if events.is_empty()
                && t.sends.is_empty()
                && t.recvs.is_empty()
                && t.user.is_empty()
                && t.ended.is_empty()
            {
                return 0;
            }
            let ended = t.ended.expire(now);
            work += ended.under_way + ended.completed;
            let expired = t.user.expire(now);
            work += expired.under_way + expired.completed;
            if expired.under_way > 0 {
                self.rmpp
                    .cells
                    .user_transfers_expired
                    .fetch_add(expired.under_way as u64, Ordering::Relaxed);
            }
            for ev in events {
                let Event::Send(c) = ev else { continue };
                if c.context == 0 {
                    continue;
                }
                let Some(x) = t
                    .sends
                    .get_mut(&SendId(c.context))
                    .filter(|x| x.in_flight == Some(c.id))
                else {
                    continue;
                };
                x.in_flight = None;
                let step = x.sender.on_send_completion(c.status, c.vendor_err);
                self.rmpp_step(x, step, &mut actions);
            }
            // Once the device is dead no timer decides anything (as for plain sends in
            // `pass`): every transfer ends with WR_FLUSH_ERR (vendor_err 5) in
            // `flush_everything` after this, not with a timeout or a resend after its agent
            // was told of the death, and no reassembly's timeout sends an ABORT.
            let dead = self.is_fatal();
            for x in t.sends.values_mut().filter(|_| !dead) {
                if x.deadline.is_some_and(|d| d <= now) {
                    x.deadline = None;
                    work += 1;
                    let step = x.sender.on_timeout();
                    self.rmpp_step(x, step, &mut actions);
                }
            }
            t.retain_sends(|x| x.sender.done.is_none() || x.in_flight.is_some(), now);
            let mut expired = Vec::new();
            t.retain_recvs(|r| {
                if dead || r.deadline > now {
                    return true;
                }
                if !r.receiver.complete {
                    expired.push((r.first.clone(), r.addr));
                }
                false
            });
            for (first, addr) in expired {
                work += 1;
                bump(&self.rmpp.cells.reassembly_timeouts);
                bump(&self.rmpp.cells.aborts_sent);
                actions.push(Action::Control {
                    mad: control(&first, rmpp_type::ABORT, rmpp_status::T2L, 0, 0),
                    dest: addr.reply_dest(),
                });
            }
        }
        self.rmpp_run(Some(st), actions);
        work
    }

    /// `on_mad`'s hook: a MAD of an RMPP-capable class on QP1 that RMPP takes (segments, ACKs,
    /// STOPs and ABORTs of agents registered with RMPP; responses to RMPP requests; response
    /// segments delivered raw to agents without RMPP). Returns whether it was taken.
    pub(crate) fn rmpp_receive(
        &self,
        st: &mut ProgressState,
        qp: SpecialQp,
        mad: &[u8; MAD_LEN],
        len: usize,
        addr: &RecvAddr,
    ) -> bool {
        let mgmt_class = mad[1];
        if qp != SpecialQp::Gsi || !class::is_rmpp_capable(mgmt_class) {
            return false;
        }
        let hdr = Mad::new_checked(&mad[..]).expect("a full MAD holds a header");
        let response = hdr.is_response();
        let tid = hdr.tid();
        let active = len >= mad_wire::rmpp::RMPP_HEADER_END && rmpp_flags(mad) & flags::ACTIVE != 0;
        let mut actions = Vec::new();
        // Responses (and ACKs) to a request sent with RMPP carry a TID of this module's.
        if response && ((tid >> 32) as u32) & RING_QP1_BIT == 0 {
            let agent = {
                let t = lock(&self.rmpp.table);
                // Not a deregistering agent's, whose transfers may stay until their segment
                // is back (the kernel takes the agent out of its table first).
                t.sends_named(tid, mgmt_class)
                    .find(|x| !x.is_response && !x.agent.closing.load(Ordering::SeqCst))
                    .map(|x| Arc::clone(&x.agent))
            };
            // The transfer may have ended (answered, timed out, canceled) while its response's
            // reassembly goes on or is kept to acknowledge late copies: the segment goes there,
            // as the kernel's `continue_rmpp` finds its `rmpp_recv` by the segment alone.
            let agent = match agent {
                Some(a) => a,
                None if active => match self
                    .rmpp_recv_agent(mad, addr)
                    .or_else(|| self.rmpp_ended_agent(tid, mgmt_class))
                {
                    Some(a) => a,
                    None => return false,
                },
                None => return false,
            };
            if !agent.receives {
                self.drop_for_send_only(&agent);
                return true;
            }
            if active {
                self.rmpp_active(st, &agent, mad, addr, &mut actions);
            } else {
                self.rmpp_response(st, &agent, tid, mad, len, *addr, None, &mut actions);
            }
            self.rmpp_run(Some(st), actions);
            return true;
        }
        if !active {
            return false;
        }
        let (agent, waiting) = if response {
            match self.tid_owner(st, tid) {
                Some(o) => o,
                // The slot went to another send. A reassembly under way or kept for late
                // copies takes its segments whatever became of the request (the kernel's
                // `continue_rmpp` finds it by the segment alone); a user-RMPP response under
                // way or just completed still names its agent (the kernel's `find_mad_agent`
                // by `hi_tid`).
                None => match self
                    .rmpp_recv_agent(mad, addr)
                    .or_else(|| self.user_rmpp_owner(tid, mgmt_class))
                {
                    Some(a) => (a, false),
                    None => return false,
                },
            }
        } else {
            let oui = if class::is_vendor_range2(mgmt_class) {
                vendor::VendorMad::new_checked(&mad[..]).map_or(0, |v| v.oui())
            } else {
                0
            };
            match self
                .agents_read()
                .lookup(hdr.class_version(), mgmt_class, hdr.method(), oui)
            {
                Some(a) => (a, false),
                None => return false,
            }
        };
        if !agent.receives {
            self.drop_for_send_only(&agent);
            return true;
        }
        if agent.rmpp_version == 0 {
            // User RMPP: segments as they come. A response segment that still finds its send
            // waiting goes through matching (which finishes the send); the rest straight to
            // the agent, as the kernel's "user rmpp is in effect" case.
            if !response {
                return false;
            }
            if !self.user_rmpp_track(&agent, tid, mgmt_class, mad, addr) {
                // A DATA segment other than the Last one after the Last one: the transfer
                // has completed for us; dropped and counted as any response for no send.
                return false;
            }
            if waiting {
                return false;
            }
            bump(&self.rmpp.cells.raw_delivered);
            actions.push(Action::Deliver {
                recv: Box::new(RecvMad {
                    agent: agent.id,
                    mad: *mad,
                    len,
                    addr: *addr,
                    response_to: None,
                    rmpp: None,
                }),
                agent,
            });
            self.rmpp_run(Some(st), actions);
            return true;
        }
        self.rmpp_active(st, &agent, mad, addr, &mut actions);
        self.rmpp_run(Some(st), actions);
        true
    }

    /// A response (segment, ACK, STOP or ABORT) for an agent without a receive side: dropped
    /// before any RMPP work, as the kernel's `find_mad_agent` gives up on an agent without a
    /// `recv_handler`.
    fn drop_for_send_only(&self, agent: &AgentInner) {
        self.cells.dropped(DropReason::NotExpected);
        agent.cells.dropped(DropReason::NotExpected);
    }

    /// The agent of the reassembly `mad` (a segment from `addr`) belongs to, if there is one.
    fn rmpp_recv_agent(&self, mad: &[u8; MAD_LEN], addr: &RecvAddr) -> Option<Arc<AgentInner>> {
        let t = lock(&self.rmpp.table);
        t.recvs
            .get(&Key::of(mad, addr))
            .map(|r| Arc::clone(&r.agent))
    }

    /// The agent (still registered) of the RMPP request `tid` that ended not long ago.
    fn rmpp_ended_agent(&self, tid: u64, mgmt_class: u8) -> Option<Arc<AgentInner>> {
        let id = lock(&self.rmpp.table)
            .ended
            .get(tid, mgmt_class, self.hca.now())?;
        self.agents_read().agents.get(&id.0).cloned()
    }

    /// The agent that sent the request `tid` names, and whether that send still waits: the
    /// slot's owner when the slot holds that very send, or when the slot is free and its last
    /// send had that TID; otherwise the TID cannot be attributed.
    fn tid_owner(&self, st: &ProgressState, tid: u64) -> Option<(Arc<AgentInner>, bool)> {
        let ring = self.ring(SpecialQp::Gsi)?;
        let t = ring.layout.decode(tid, ring.slot_count())?;
        let slot = ring.slots.get(t.index as usize)?;
        let w = slot.state.load();
        let waiting = if w.is_active() {
            let same = ring
                .layout
                .generation_matches(t.generation_bits, w.generation())
                && lock(&slot.data).as_ref().is_some_and(|d| d.tid == tid);
            if !same {
                return None;
            }
            true
        } else {
            if st.last_tid[qpi(SpecialQp::Gsi)].get(t.index as usize) != Some(&tid) {
                return None;
            }
            false
        };
        let owner = slot.owner.load(Ordering::Acquire);
        let agent = self.agents_read().agents.get(&owner).cloned()?;
        Some((agent, waiting))
    }

    /// The agent (still registered) of the user-RMPP response with TID `tid`, under way or
    /// completed (then only a copy of its Last segment, or an ACK, STOP or ABORT, reaches the
    /// agent: [`Self::user_rmpp_track`]).
    fn user_rmpp_owner(&self, tid: u64, mgmt_class: u8) -> Option<Arc<AgentInner>> {
        let id = lock(&self.rmpp.table)
            .user
            .get(tid, mgmt_class, self.hca.now())?;
        self.agents_read().agents.get(&id.0).cloned()
    }

    /// Keep `agent`'s user-RMPP transfer `tid` (an active response `mad` of it arrived from
    /// `addr`: a segment of the response, or an ACK of a segment of the request) attributed
    /// until it ends: the response's Last DATA segment completes it, kept [`CLEANUP_DELAY`]
    /// more for the user's final ACK and its ACKs of resent copies of the Last segment (see
    /// [`user`]); an ABORT or STOP forgets it. Returns `false` for a DATA segment other than
    /// the Last one of a completed transfer, which is not to be delivered (a resent Last
    /// segment is, so that the user acknowledges it again).
    fn user_rmpp_track(
        &self,
        agent: &AgentInner,
        tid: u64,
        mgmt_class: u8,
        mad: &[u8; MAD_LEN],
        addr: &RecvAddr,
    ) -> bool {
        let r = RmppView::new_checked(&mad[..]).expect("a MAD holds an RMPP header");
        let now = self.hca.now();
        let mut t = lock(&self.rmpp.table);
        let kind = r.rmpp_type();
        let last = r.flags() & flags::LAST != 0;
        let max = t.limits.max_user_transfers;
        let peer = (addr.slid, addr.src_qp);
        let evicted = match kind {
            rmpp_type::DATA if !last => {
                if t.user
                    .lookup(tid, mgmt_class, now)
                    .is_some_and(|(_, completed)| completed)
                {
                    return false;
                }
                let deadline = now + REASSEMBLY_TIMEOUT;
                t.user
                    .insert(tid, agent.id, mgmt_class, peer, deadline, max)
            }
            rmpp_type::ACK => {
                let deadline = now + REASSEMBLY_TIMEOUT;
                t.user
                    .insert(tid, agent.id, mgmt_class, peer, deadline, max)
            }
            rmpp_type::DATA => {
                let deadline = now + CLEANUP_DELAY;
                t.user
                    .complete(tid, agent.id, mgmt_class, peer, deadline, max)
            }
            rmpp_type::ABORT | rmpp_type::STOP => {
                t.user.remove(tid);
                0
            }
            _ => 0,
        };
        if evicted > 0 {
            self.rmpp
                .cells
                .user_transfers_evicted
                .fetch_add(evicted as u64, Ordering::Relaxed);
        }
        true
    }

    /// An RMPP-active MAD for `agent`, registered with RMPP (`ib_process_rmpp_recv_wc`).
    fn rmpp_active(
        &self,
        st: &mut ProgressState,
        agent: &Arc<AgentInner>,
        mad: &[u8; MAD_LEN],
        addr: &RecvAddr,
        actions: &mut Vec<Action>,
    ) {
        let r = RmppView::new_checked(&mad[..]).expect("a MAD holds an RMPP header");
        let (version, kind, status) = (r.rmpp_version(), r.rmpp_type(), r.rmpp_status());
        if version != mad_wire::rmpp::VERSION {
            self.rmpp_abort_send(st, agent, mad, addr, rmpp_status::UNV, actions);
            self.rmpp_nack(mad, addr, rmpp_status::UNV, actions);
            return;
        }
        match kind {
            rmpp_type::DATA => self.rmpp_data(st, agent, mad, addr, actions),
            rmpp_type::ACK => self.rmpp_ack(st, agent, mad, addr, actions),
            rmpp_type::STOP => {
                if status == rmpp_status::RESOURCES_EXHAUSTED {
                    self.rmpp_abort_send(st, agent, mad, addr, status, actions);
                } else {
                    self.rmpp_abort_send(st, agent, mad, addr, rmpp_status::BAD_STATUS, actions);
                    self.rmpp_nack(mad, addr, rmpp_status::BAD_STATUS, actions);
                }
            }
            rmpp_type::ABORT => {
                if (rmpp_status::ABORT_MIN..=rmpp_status::ABORT_MAX).contains(&status) {
                    self.rmpp_abort_send(st, agent, mad, addr, status, actions);
                } else {
                    self.rmpp_abort_send(st, agent, mad, addr, rmpp_status::BAD_STATUS, actions);
                    self.rmpp_nack(mad, addr, rmpp_status::BAD_STATUS, actions);
                }
            }
            _ => {
                self.rmpp_abort_send(st, agent, mad, addr, rmpp_status::BADT, actions);
                self.rmpp_nack(mad, addr, rmpp_status::BADT, actions);
            }
        }
    }

    /// An ABORT with `status` back to the sender of `mad` (`nack_recv`).
    fn rmpp_nack(
        &self,
        mad: &[u8; MAD_LEN],
        addr: &RecvAddr,
        status: u8,
        actions: &mut Vec<Action>,
    ) {
        bump(&self.rmpp.cells.aborts_sent);
        actions.push(Action::Control {
            mad: control(mad, rmpp_type::ABORT, status, 0, 0),
            dest: addr.reply_dest(),
        });
    }

    /// The ID of `agent`'s transfer that `mad` (an ACK, STOP, ABORT or response from
    /// `addr`) is about (`ib_find_send_mad`: TID, class, and address).
    fn rmpp_find_send(
        t: &Table,
        st: &ProgressState,
        agent: &AgentInner,
        mad: &[u8; MAD_LEN],
        addr: &RecvAddr,
    ) -> Option<SendId> {
        let h = Mad::new_checked(&mad[..]).expect("a full MAD holds a header");
        t.sends_named(h.tid(), h.mgmt_class())
            .find(|x| {
                x.agent.id == agent.id
                    && same_address(x.is_response, &x.dest, h.is_response(), addr, &st.local)
            })
            .map(|x| x.id)
    }

    /// The receiver stopped or aborted a transfer of `agent` (`abort_send`).
    fn rmpp_abort_send(
        &self,
        st: &ProgressState,
        agent: &AgentInner,
        mad: &[u8; MAD_LEN],
        addr: &RecvAddr,
        status: u8,
        actions: &mut Vec<Action>,
    ) {
        let mut t = lock(&self.rmpp.table);
        let Some(x) =
            Self::rmpp_find_send(&t, st, agent, mad, addr).and_then(|id| t.sends.get_mut(&id))
        else {
            return;
        };
        let id = x.id;
        let step = x.sender.abort(status);
        self.rmpp_step(x, step, actions);
        if x.sender.done.is_some() && x.in_flight.is_none() {
            t.remove_send(id, self.hca.now());
        }
    }

    /// An ACK (`process_rmpp_ack`).
    fn rmpp_ack(
        &self,
        st: &ProgressState,
        agent: &AgentInner,
        mad: &[u8; MAD_LEN],
        addr: &RecvAddr,
        actions: &mut Vec<Action>,
    ) {
        let view = RmppView::new_checked(&mad[..]).expect("a MAD holds an RMPP header");
        let (seg, newwin, status) = (
            view.segment_number(),
            view.new_window_last(),
            view.rmpp_status(),
        );
        let mut t = lock(&self.rmpp.table);
        let Some(x) =
            Self::rmpp_find_send(&t, st, agent, mad, addr).and_then(|id| t.sends.get_mut(&id))
        else {
            drop(t);
            // Unmatched (or the double-sided ACK of a transfer received: its window of 1
            // is the one every response starts with here). Bad ones are still refused.
            if status != rmpp_status::SUCCESS {
                self.rmpp_nack(mad, addr, rmpp_status::BAD_STATUS, actions);
            } else if newwin < seg {
                self.rmpp_nack(mad, addr, rmpp_status::W2S, actions);
            }
            return;
        };
        bump(&self.rmpp.cells.acks_received);
        let id = x.id;
        let (step, reply) = x.sender.on_ack(seg, newwin, status);
        self.rmpp_step(x, step, actions);
        match reply {
            Reply::Nothing => {}
            Reply::DsAck => {
                bump(&self.rmpp.cells.acks_sent);
                let mut m = control(mad, rmpp_type::ACK, 0, 0, 1);
                // `ack_ds_ack` keeps the received RMPP version.
                m[24] = mad[24];
                actions.push(Action::Control {
                    mad: m,
                    dest: addr.reply_dest(),
                });
            }
            Reply::Abort(s) => self.rmpp_nack(mad, addr, s, actions),
        }
        if x.sender.done.is_some() && x.in_flight.is_none() {
            t.remove_send(id, self.hca.now());
        }
    }

    /// A DATA segment for `agent` (`process_rmpp_data`, `start_rmpp`, `continue_rmpp`).
    fn rmpp_data(
        &self,
        st: &mut ProgressState,
        agent: &Arc<AgentInner>,
        mad: &[u8; MAD_LEN],
        addr: &RecvAddr,
        actions: &mut Vec<Action>,
    ) {
        let view = RmppView::new_checked(&mad[..]).expect("a MAD holds an RMPP header");
        let (seg, first, status) = (
            view.segment_number(),
            view.flags() & flags::FIRST != 0,
            view.rmpp_status(),
        );
        if status != rmpp_status::SUCCESS {
            bump(&self.rmpp.cells.segments_dropped);
            return self.rmpp_nack(mad, addr, rmpp_status::BAD_STATUS, actions);
        }
        if (seg == 1) != first {
            bump(&self.rmpp.cells.segments_dropped);
            return self.rmpp_nack(mad, addr, rmpp_status::BAD_SEG, actions);
        }
        let key = Key::of(mad, addr);
        let now = self.hca.now();
        let mut guard = lock(&self.rmpp.table);
        let t = &mut *guard;
        let mut step = match t.recvs.get_mut(&key) {
            Some(r) if r.agent.id != agent.id => {
                // Another agent's (one that registered for the class after it started).
                bump(&self.rmpp.cells.segments_dropped);
                return;
            }
            Some(r) => {
                let before = r.receiver.held();
                let step = r.receiver.on_segment(seg, mad);
                t.held = t.held + r.receiver.held() - before;
                step
            }
            None if seg == 1 => {
                if agent.closing.load(Ordering::SeqCst) {
                    // Deregistration sets this before it forgets the agent's reassemblies
                    // under this lock: checked here, none is started after that.
                    bump(&self.rmpp.cells.segments_dropped);
                    return;
                }
                if !t.room_for_one() {
                    // The port's limits: refused as a transfer too long is (`RecvStep::Stop`).
                    return self.rmpp_refuse(mad, addr, actions);
                }
                let (receiver, step) = Receiver::start(mad[1], mad, self.rmpp.window, MAX_SEGMENTS);
                t.held += receiver.held();
                t.recvs.insert(
                    key,
                    Reassembly {
                        agent: Arc::clone(agent),
                        receiver,
                        first: Box::new(*mad),
                        addr: *addr,
                        deadline: now + REASSEMBLY_TIMEOUT,
                    },
                );
                step
            }
            None => {
                bump(&self.rmpp.cells.segments_dropped);
                return;
            }
        };
        bump(&self.rmpp.cells.segments_received);
        if matches!(step, RecvStep::Nothing | RecvStep::Ack) && t.held > t.limits.max_segments_held
        {
            step = RecvStep::Stop;
        }
        let re = t.recvs.get_mut(&key).expect("looked up or inserted above");
        let ack = |re: &mut Reassembly, actions: &mut Vec<Action>| {
            let (acked, window) = re.receiver.ack_fields();
            bump(&self.rmpp.cells.acks_sent);
            actions.push(Action::Control {
                mad: control(mad, rmpp_type::ACK, 0, acked, window),
                dest: addr.reply_dest(),
            });
        };
        match step {
            RecvStep::Nothing => {}
            RecvStep::Dropped => bump(&self.rmpp.cells.segments_dropped),
            RecvStep::Ack => ack(re, actions),
            RecvStep::Stop => {
                t.remove_recv(&key);
                self.rmpp_refuse(mad, addr, actions);
            }
            RecvStep::Complete => {
                ack(re, actions);
                bump(&self.rmpp.cells.transfers_received);
                re.deadline = now + CLEANUP_DELAY;
                let before = re.receiver.held();
                let message = re.receiver.take_message();
                let first_addr = re.addr;
                t.held -= before;
                let mut first = Box::new([0u8; MAD_LEN]);
                let copied = message.len().min(MAD_LEN);
                first[..copied].copy_from_slice(&message[..copied]);
                let h = Mad::new_checked(&first[..]).expect("a full MAD holds a header");
                let (response, tid) = (h.is_response(), h.tid());
                drop(guard);
                if !response {
                    actions.push(Action::Deliver {
                        agent: Arc::clone(agent),
                        recv: Box::new(RecvMad {
                            agent: agent.id,
                            mad: *first,
                            len: message.len(),
                            addr: first_addr,
                            response_to: None,
                            rmpp: Some(message),
                        }),
                    });
                } else if ((tid >> 32) as u32) & RING_QP1_BIT == 0 {
                    let len = message.len();
                    self.rmpp_response(
                        st,
                        agent,
                        tid,
                        &first,
                        len,
                        first_addr,
                        Some(message),
                        actions,
                    );
                } else {
                    actions.push(Action::Match {
                        first,
                        addr: first_addr,
                        message,
                    });
                }
            }
        }
    }

    /// Tell the sender of `mad` to stop its transfer (STOP, resources exhausted): too long for
    /// a reassembly, or beyond the port's [`RmppLimits`].
    fn rmpp_refuse(&self, mad: &[u8; MAD_LEN], addr: &RecvAddr, actions: &mut Vec<Action>) {
        bump(&self.rmpp.cells.transfers_refused);
        bump(&self.rmpp.cells.aborts_sent);
        actions.push(Action::Control {
            mad: control(mad, rmpp_type::STOP, rmpp_status::RESOURCES_EXHAUSTED, 0, 0),
            dest: addr.reply_dest(),
        });
    }

    /// The response (`mad`, or the reassembled `message`) to a request `agent` sent with
    /// RMPP: delivered, and the transfer done (`ib_mad_complete_recv`).
    #[allow(clippy::too_many_arguments)]
    fn rmpp_response(
        &self,
        st: &ProgressState,
        agent: &Arc<AgentInner>,
        tid: u64,
        first: &[u8; MAD_LEN],
        len: usize,
        addr: RecvAddr,
        message: Option<Vec<u8>>,
        actions: &mut Vec<Action>,
    ) {
        let mut t = lock(&self.rmpp.table);
        let Some(x) =
            Self::rmpp_find_send(&t, st, agent, first, &addr).and_then(|id| t.sends.get_mut(&id))
        else {
            // The request ended (timed out, canceled) before or while its response came in.
            self.cells.dropped(crate::counters::DropReason::Late);
            return;
        };
        let id = x.id;
        if x.sender.done.is_some() || x.tid != tid {
            self.cells.dropped(crate::counters::DropReason::Late);
            return;
        }
        actions.push(Action::Deliver {
            agent: Arc::clone(agent),
            recv: Box::new(RecvMad {
                agent: agent.id,
                mad: *first,
                len,
                addr,
                response_to: Some(SendRef {
                    id: x.id,
                    context: x.context,
                }),
                rmpp: message,
            }),
        });
        let step = x.sender.on_response();
        self.rmpp_step(x, step, actions);
        if x.in_flight.is_none() {
            t.remove_send(id, self.hca.now());
        }
    }

    /// Cancel `agent`'s transfer `id`: `None` if it is not a transfer.
    pub(crate) fn rmpp_cancel(
        &self,
        agent: &AgentInner,
        id: SendId,
    ) -> Option<Result<(), MadError>> {
        let mut actions = Vec::new();
        let result = {
            let mut t = lock(&self.rmpp.table);
            let x = t.sends.get_mut(&id)?;
            if x.agent.id != agent.id || x.sender.done.is_some() {
                return Some(Err(MadError::NotOutstanding(id)));
            }
            let step = x.sender.cancel(WcStatus::WrFlushErr, self.flush_vendor());
            self.rmpp_step(x, step, &mut actions);
            if x.in_flight.is_none() {
                t.remove_send(id, self.hca.now());
            }
            Ok(())
        };
        self.rmpp_run(None, actions);
        Some(result)
    }

    /// Change the timeout of one wait of `agent`'s transfer `id` (`timeout_ms` > 0; 0 is a
    /// cancel): `None` if it is not a transfer. As the kernel's `ib_modify_mad` does to an
    /// RMPP send since "IB/mad: Do not save the MRA timeout" (`mad.c`, `mad_rmpp.c`):
    ///
    /// - waiting for an ACK or the response, that wait ends `timeout_ms` from now
    ///   (`ib_reset_mad_timeout`), with no 2 s bound on an ACK wait;
    /// - with a segment on the QP, the ACK wait its completion begins takes `timeout_ms`
    ///   (`mad_send_wr->timeout`; see `Step::Post` in `rmpp_step` for when a next segment
    ///   sent first keeps it);
    /// - every later wait is the client's own again: an ACK wait after an ACK or a resend,
    ///   and the response wait after the last ACK (the kernel reads `send_buf.timeout_ms`,
    ///   which no longer changes). Whether a response is awaited stays as the send said: a
    ///   send without a timeout still ends at its last ACK.
    pub(crate) fn rmpp_modify(
        &self,
        agent: &AgentInner,
        id: SendId,
        timeout_ms: u32,
    ) -> Option<Result<(), MadError>> {
        let mut t = lock(&self.rmpp.table);
        let x = t.sends.get_mut(&id)?;
        if x.agent.id != agent.id || x.sender.done.is_some() {
            return Some(Err(MadError::NotOutstanding(id)));
        }
        let ms = Duration::from_millis(u64::from(timeout_ms));
        match x.sender.wait {
            Wait::Ack | Wait::Response => {
                x.wait_ms = None;
                x.deadline = Some(self.hca.now() + ms);
            }
            Wait::Nothing => x.wait_ms = Some(timeout_ms),
        }
        Some(Ok(()))
    }

    /// Deregistration of `agent`: its transfers are canceled (each completes once its segment
    /// on the QP is back), its reassemblies forgotten.
    pub(crate) fn rmpp_cancel_agent(&self, agent: &AgentInner) {
        let mut actions = Vec::new();
        {
            let mut t = lock(&self.rmpp.table);
            for x in t.sends.values_mut().filter(|x| x.agent.id == agent.id) {
                let step = x.sender.cancel(WcStatus::WrFlushErr, self.flush_vendor());
                self.rmpp_step(x, step, &mut actions);
            }
            t.retain_sends(
                |x| x.sender.done.is_none() || x.in_flight.is_some(),
                self.hca.now(),
            );
            t.retain_recvs(|r| r.agent.id != agent.id);
            t.user.remove_agent(agent.id);
            t.ended.remove_agent(agent.id);
        }
        self.rmpp_run(None, actions);
    }

    /// The device died: every transfer ends with WR_FLUSH_ERR (vendor_err 5), at once or when
    /// its segment's flushed completion comes; reassemblies are dropped.
    pub(crate) fn rmpp_flush(&self) -> usize {
        let mut actions = Vec::new();
        {
            let mut t = lock(&self.rmpp.table);
            for x in t.sends.values_mut() {
                let step = x
                    .sender
                    .cancel(WcStatus::WrFlushErr, SOFTWARE_FLUSH_VENDOR_ERR);
                self.rmpp_step(x, step, &mut actions);
            }
            t.retain_sends(
                |x| x.sender.done.is_none() || x.in_flight.is_some(),
                self.hca.now(),
            );
            t.recvs.clear();
            t.held = 0;
            t.user.clear();
            t.ended.clear();
        }
        let n = actions.len();
        self.rmpp_run(None, actions);
        n
    }
}

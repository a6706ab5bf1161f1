//! A test double of `driver::verbs::HcaPort` for the unit tests of this crate: special QPs
//! with bounded queues, a completion queue, DMA through a simulated IOMMU (so a buffer
//! released too early faults), virtual time, and fault injection (error CQEs that put the send
//! queue in SQE and flush what follows, dropped packets, fatal errors with software flushes).
//! A send buffer is read when its work request is posted and again when it executes: a buffer
//! the stack rewrote in between (reused too early: its lease is the slot's, not the send's,
//! so the IOMMU cannot catch it) is counted.
//! The "wire" is a responder closure that sees every sent MAD and may answer it.
//!
//! The scenario tests run on the simulated HCA (`tests/`); this double only exercises
//! the core in isolation.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use dma::{Accounting, DmaMapper, DmaPool, LeaseMode, SimIommu, SimIommuConfig};
use driver::DriverError;
use driver::verbs::{
    DeviceEvent, GRH_LEN, HcaPort, PortAttrs, PortState, PostError, RecvWr, SendWr, SpecialQp,
    UdDest, WcOpcode, WcStatus, WorkCompletion,
};
use mad_wire::header::MAD_LEN;

/// A MAD that went on the wire.
#[derive(Clone, Debug)]
pub(crate) struct Outbound {
    pub(crate) qp: SpecialQp,
    pub(crate) mad: [u8; MAD_LEN],
    pub(crate) dest: UdDest,
}

/// A MAD that arrives.
#[derive(Clone, Debug)]
pub(crate) struct Inbound {
    pub(crate) qp: SpecialQp,
    pub(crate) mad: [u8; MAD_LEN],
    pub(crate) src_qp: u32,
    pub(crate) slid: u16,
    pub(crate) dlid_path_bits: u8,
    pub(crate) grh: Option<[u8; GRH_LEN as usize]>,
    /// Bytes of MAD the completion reports (256 normally).
    pub(crate) len: u32,
    /// Delay after the send that caused it.
    pub(crate) delay: Duration,
}

impl Inbound {
    pub(crate) fn new(qp: SpecialQp, mad: [u8; MAD_LEN], slid: u16) -> Inbound {
        Inbound {
            qp,
            mad,
            src_qp: match qp {
                SpecialQp::Smi => 0,
                SpecialQp::Gsi => 1,
            },
            slid,
            dlid_path_bits: 0,
            grh: None,
            len: MAD_LEN as u32,
            delay: Duration::ZERO,
        }
    }
}

type Responder = Box<dyn FnMut(&Outbound) -> Vec<Inbound> + Send>;
type ProcessMad = Box<dyn FnMut(&[u8; MAD_LEN]) -> Result<[u8; MAD_LEN], DriverError> + Send>;

fn qpi(qp: SpecialQp) -> usize {
    match qp {
        SpecialQp::Smi => 0,
        SpecialQp::Gsi => 1,
    }
}

fn qp_of(i: usize) -> SpecialQp {
    if i == 0 {
        SpecialQp::Smi
    } else {
        SpecialQp::Gsi
    }
}

struct Dev {
    now: Duration,
    /// Execute posted sends and deliver due packets on every poll.
    auto: bool,
    /// Posted sends, each with its MAD as it was in the send buffer when it was posted
    /// (`None`: the buffer was not readable then).
    sq: [VecDeque<(SendWr, Option<[u8; MAD_LEN]>)>; 2],
    /// Sends whose buffer held other bytes when they executed than when they were posted.
    rewritten_while_posted: usize,
    /// Send queue in SQE: what it holds (and what is posted) is flushed.
    sqe: [bool; 2],
    /// Refuse sends while in SQE, as the mlx5 driver does until the error CQE is handled.
    refuse_in_sqe: bool,
    /// Send-queue recoveries still to fail (the queue stays in SQE).
    fail_recoveries: usize,
    /// Sends still to refuse with `NotReady`, per QP.
    refuse_posts: [usize; 2],
    /// Recoveries asked for, failed ones included.
    recoveries_asked: usize,
    rq: [VecDeque<RecvWr>; 2],
    cq: VecDeque<WorkCompletion>,
    fatal: bool,
    events: Vec<DeviceEvent>,
    /// Error status for the next executed send of each QP.
    fail_next: [Option<WcStatus>; 2],
    /// Packets to drop before they reach the responder.
    drop_wire: usize,
    /// Inbound packets scheduled: (due time, packet).
    wire: Vec<(Duration, Inbound)>,
    responder: Option<Responder>,
    process_mad: Option<ProcessMad>,
    /// Device time a `process_mad` call takes (a firmware command).
    process_mad_time: Duration,
    sent: Vec<Outbound>,
    lid: u16,
    has_smi: bool,
    send_depth: u32,
    recv_depth: u32,
    dropped_no_rq: usize,
    /// Keep send CQEs aside (to let a response overtake its send's CQE).
    hold_send_cqes: bool,
    /// Packets to our own LID come back to our own QP (as the HCA's loopback does).
    loopback: bool,
    held: Vec<WorkCompletion>,
}

/// The double.
pub(crate) struct FakePort {
    dev: Mutex<Dev>,
    pool: DmaPool,
    iommu: Arc<SimIommu>,
}

fn lock(m: &Mutex<Dev>) -> MutexGuard<'_, Dev> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn err(what: &str) -> DriverError {
    DriverError::Io {
        what: what.into(),
        source: std::io::Error::other("test double"),
    }
}

impl FakePort {
    /// A port with `send_depth` / `recv_depth` per QP, strict leases (one IOMMU mapping each),
    /// auto mode on.
    pub(crate) fn new(send_depth: u32, recv_depth: u32) -> Arc<FakePort> {
        FakePort::with_iommu(send_depth, recv_depth, SimIommu::new())
    }

    /// [`FakePort::new`] whose IOMMU maps at most `max_mappings` at once (with strict leases,
    /// the lease after that many fails: to reach the paths where the port cannot lease).
    pub(crate) fn with_max_mappings(
        send_depth: u32,
        recv_depth: u32,
        max_mappings: usize,
    ) -> Arc<FakePort> {
        let config = SimIommuConfig {
            max_mappings,
            ..SimIommuConfig::default()
        };
        FakePort::with_iommu(send_depth, recv_depth, SimIommu::with_config(config))
    }

    fn with_iommu(send_depth: u32, recv_depth: u32, iommu: SimIommu) -> Arc<FakePort> {
        let iommu = Arc::new(iommu);
        let mapper: Arc<dyn DmaMapper> = iommu.clone();
        let pool = DmaPool::new(mapper, LeaseMode::Strict).expect("pool");
        Arc::new(FakePort {
            dev: Mutex::new(Dev {
                now: Duration::from_secs(1),
                auto: true,
                sq: [VecDeque::new(), VecDeque::new()],
                rewritten_while_posted: 0,
                sqe: [false; 2],
                refuse_in_sqe: false,
                fail_recoveries: 0,
                refuse_posts: [0; 2],
                recoveries_asked: 0,
                rq: [VecDeque::new(), VecDeque::new()],
                cq: VecDeque::new(),
                fatal: false,
                events: Vec::new(),
                fail_next: [None; 2],
                drop_wire: 0,
                wire: Vec::new(),
                responder: None,
                process_mad: None,
                process_mad_time: Duration::ZERO,
                sent: Vec::new(),
                lid: 1,
                has_smi: true,
                send_depth,
                recv_depth,
                dropped_no_rq: 0,
                hold_send_cqes: false,
                held: Vec::new(),
                loopback: true,
            }),
            pool,
            iommu,
        })
    }

    pub(crate) fn set_auto(&self, on: bool) {
        lock(&self.dev).auto = on;
    }

    pub(crate) fn set_responder(&self, f: impl FnMut(&Outbound) -> Vec<Inbound> + Send + 'static) {
        lock(&self.dev).responder = Some(Box::new(f));
    }

    pub(crate) fn set_process_mad(
        &self,
        f: impl FnMut(&[u8; MAD_LEN]) -> Result<[u8; MAD_LEN], DriverError> + Send + 'static,
    ) {
        lock(&self.dev).process_mad = Some(Box::new(f));
    }

    /// Make each `process_mad` call take `t` of device time (a slow firmware command).
    pub(crate) fn set_process_mad_time(&self, t: Duration) {
        lock(&self.dev).process_mad_time = t;
    }

    pub(crate) fn fail_next_send(&self, qp: SpecialQp, status: WcStatus) {
        lock(&self.dev).fail_next[qpi(qp)] = Some(status);
    }

    /// Refuse sends with `SendQueueError` while a send queue is in SQE (the mlx5 driver's
    /// behaviour between polling an error CQE and its recovery) instead of accepting them to
    /// be flushed (the hardware's).
    pub(crate) fn refuse_posts_in_sqe(&self, on: bool) {
        lock(&self.dev).refuse_in_sqe = on;
    }

    /// Refuse the next `n` posts of sends on `qp` with `NotReady` (a post the device refuses
    /// for a reason other than room, SQE or death).
    pub(crate) fn refuse_next_posts(&self, qp: SpecialQp, n: usize) {
        lock(&self.dev).refuse_posts[qpi(qp)] = n;
    }

    /// Fail the next `n` send-queue recoveries (the firmware lost the command: the queue stays
    /// in SQE).
    pub(crate) fn fail_recoveries(&self, n: usize) {
        lock(&self.dev).fail_recoveries = n;
    }

    /// Send-queue recoveries asked for so far, failed ones included.
    pub(crate) fn recoveries_asked(&self) -> usize {
        lock(&self.dev).recoveries_asked
    }

    pub(crate) fn drop_next_packets(&self, n: usize) {
        lock(&self.dev).drop_wire += n;
    }

    /// A fatal error: bus mastering off (no more DMA), every outstanding WR will be flushed in
    /// software by poll, posts fail.
    pub(crate) fn make_fatal(&self, removed: bool) {
        let mut d = lock(&self.dev);
        d.fatal = true;
        self.iommu.set_bus_master(false);
        d.events.push(if removed {
            DeviceEvent::Removed
        } else {
            DeviceEvent::Fatal {
                reason: "test: health syndrome".into(),
            }
        });
    }

    /// Schedule `p` to arrive now (+ its delay).
    pub(crate) fn inject(&self, p: Inbound) {
        let mut d = lock(&self.dev);
        let due = d.now + p.delay;
        d.wire.push((due, p));
    }

    pub(crate) fn sent(&self) -> Vec<Outbound> {
        lock(&self.dev).sent.clone()
    }

    pub(crate) fn posted_sends(&self, qp: SpecialQp) -> usize {
        lock(&self.dev).sq[qpi(qp)].len()
    }

    pub(crate) fn posted_recvs(&self, qp: SpecialQp) -> usize {
        lock(&self.dev).rq[qpi(qp)].len()
    }

    pub(crate) fn accounting(&self) -> Accounting {
        self.pool.accounting()
    }

    pub(crate) fn faults(&self) -> usize {
        self.iommu.fault_count()
    }

    /// Sends whose buffer was rewritten between their post and their execution (the device
    /// sent other bytes than were posted): a send buffer reused before its send was DONE.
    pub(crate) fn buffers_rewritten_while_posted(&self) -> usize {
        lock(&self.dev).rewritten_while_posted
    }

    /// Posted sends and receives whose buffer is not mapped for the device's access (read for
    /// a send, write for a receive): a lease released under a posted work request. Probes
    /// with device accesses, so each one found is also an IOMMU fault; a receive buffer is
    /// probed by writing a zero into its GRH area, which nobody reads before a completion
    /// reports a GRH written there.
    pub(crate) fn posted_buffers_unmapped(&self) -> usize {
        let d = lock(&self.dev);
        let mut byte = [0u8; 1];
        let sends = d.sq.iter().flatten().map(|(wr, _)| wr.sge.iova);
        let unreadable = sends
            .filter(|&iova| self.iommu.read(iova, &mut byte).is_err())
            .count();
        let unwritable =
            d.rq.iter()
                .flatten()
                .filter(|wr| self.iommu.write(wr.sge.iova, &[0]).is_err())
                .count();
        unreadable + unwritable
    }

    /// Keep successful send CQEs aside until [`FakePort::release_send_cqes`].
    pub(crate) fn hold_send_cqes(&self, on: bool) {
        lock(&self.dev).hold_send_cqes = on;
    }

    /// Put the held send CQEs on the completion queue.
    pub(crate) fn release_send_cqes(&self) {
        let mut d = lock(&self.dev);
        let held = std::mem::take(&mut d.held);
        d.cq.extend(held);
    }

    /// Flush every posted send of `qp` without an error CQE first (as when the QP is moved to
    /// error by something else): WR_FLUSH_ERR completions nobody marked for retry.
    pub(crate) fn flush_sends(&self, qp: SpecialQp) {
        let mut d = lock(&self.dev);
        while let Some((wr, _)) = d.sq[qpi(qp)].pop_front() {
            d.cq.push_back(WorkCompletion::status_only(
                wr.wr_id,
                qp,
                WcOpcode::Send,
                WcStatus::WrFlushErr,
                0x249,
            ));
        }
    }

    /// A receive completion with an error status for the oldest posted buffer of `qp`.
    pub(crate) fn fail_next_recv(&self, qp: SpecialQp, status: WcStatus) {
        let mut d = lock(&self.dev);
        if let Some(wr) = d.rq[qpi(qp)].pop_front() {
            d.cq.push_back(WorkCompletion::status_only(
                wr.wr_id,
                qp,
                WcOpcode::Recv,
                status,
                0x11,
            ));
        }
    }

    /// Make the device report a completion for a `wr_id` the stack never posted.
    pub(crate) fn bogus_completion(&self, wc: WorkCompletion) {
        lock(&self.dev).cq.push_back(wc);
    }

    /// Packets dropped because no receive buffer was posted.
    pub(crate) fn dropped_no_rq(&self) -> usize {
        lock(&self.dev).dropped_no_rq
    }

    /// Execute `n` posted sends of `qp` (manual mode).
    pub(crate) fn execute(&self, qp: SpecialQp, n: usize) {
        let mut d = lock(&self.dev);
        for _ in 0..n {
            if !self.execute_one(&mut d, qpi(qp)) {
                break;
            }
        }
    }

    /// Deliver due packets (manual mode).
    pub(crate) fn deliver_due(&self) {
        let mut d = lock(&self.dev);
        self.deliver(&mut d);
    }

    fn execute_one(&self, d: &mut Dev, i: usize) -> bool {
        let Some((wr, at_post)) = d.sq[i].pop_front() else {
            return false;
        };
        let qp = qp_of(i);
        let cqe = |status, vendor| {
            WorkCompletion::status_only(wr.wr_id, qp, WcOpcode::Send, status, vendor)
        };
        if d.sqe[i] {
            d.cq.push_back(cqe(WcStatus::WrFlushErr, 0x249));
            return true;
        }
        if let Some(status) = d.fail_next[i].take() {
            d.sqe[i] = true;
            d.cq.push_back(cqe(status, 0x51));
            return true;
        }
        let mut mad = [0u8; MAD_LEN];
        if self.iommu.read(wr.sge.iova, &mut mad).is_err() {
            d.sqe[i] = true;
            d.cq.push_back(cqe(WcStatus::LocProtErr, 0x52));
            return true;
        }
        if at_post.is_some_and(|m| m != mad) {
            d.rewritten_while_posted += 1;
        }
        if d.hold_send_cqes {
            d.held.push(cqe(WcStatus::Success, 0));
        } else {
            d.cq.push_back(cqe(WcStatus::Success, 0));
        }
        let out = Outbound {
            qp,
            mad,
            dest: wr.dest,
        };
        d.sent.push(out.clone());
        if d.drop_wire > 0 {
            d.drop_wire -= 1;
            return true;
        }
        if d.loopback && out.dest.dlid == d.lid {
            let now = d.now;
            let mut p = Inbound::new(qp, mad, d.lid);
            p.src_qp = qp.qpn();
            d.wire.push((now, p));
            return true;
        }
        if let Some(mut r) = d.responder.take() {
            let replies = r(&out);
            d.responder = Some(r);
            let now = d.now;
            for p in replies {
                d.wire.push((now + p.delay, p));
            }
        }
        true
    }

    fn deliver(&self, d: &mut Dev) {
        let now = d.now;
        let mut due: Vec<Inbound> = Vec::new();
        d.wire.retain(|(t, p)| {
            if *t <= now {
                due.push(p.clone());
                false
            } else {
                true
            }
        });
        for p in due {
            let i = qpi(p.qp);
            let Some(wr) = d.rq[i].pop_front() else {
                d.dropped_no_rq += 1;
                continue;
            };
            if let Some(g) = p.grh {
                let _ = self.iommu.write(wr.sge.iova, &g);
            }
            let _ = self.iommu.write(
                wr.sge.iova + u64::from(GRH_LEN),
                &p.mad[..p.len.min(256) as usize],
            );
            let mut wc =
                WorkCompletion::status_only(wr.wr_id, p.qp, WcOpcode::Recv, WcStatus::Success, 0);
            wc.byte_len = GRH_LEN + p.len;
            wc.src_qp = p.src_qp;
            wc.slid = p.slid;
            wc.dlid_path_bits = p.dlid_path_bits;
            wc.grh = p.grh.is_some();
            d.cq.push_back(wc);
        }
    }

    /// The device's virtual time.
    pub(crate) fn time(&self) -> Duration {
        lock(&self.dev).now
    }
}

impl HcaPort for FakePort {
    fn port_num(&self) -> u8 {
        1
    }

    fn attrs(&self) -> Result<PortAttrs, DriverError> {
        let d = lock(&self.dev);
        if d.fatal {
            return Err(err("attrs on a dead device"));
        }
        Ok(PortAttrs {
            port_num: 1,
            state: PortState::Active,
            phys_state: 5,
            lid: d.lid,
            lmc: 0,
            sm_lid: 1,
            sm_sl: 0,
            port_guid: 0x0002_c903_0000_0001,
            gid_prefix: 0xfe80_0000_0000_0000,
            capability_mask: 0,
            pkey_table_len: 1,
            has_smi: d.has_smi,
        })
    }

    fn queue_depth(&self, _qp: SpecialQp) -> (u32, u32) {
        let d = lock(&self.dev);
        (d.send_depth, d.recv_depth)
    }

    fn post_send(&self, qp: SpecialQp, wr: &SendWr) -> Result<(), PostError> {
        let mut d = lock(&self.dev);
        if d.fatal {
            return Err(PostError::DeviceFatal("test: fatal".into()));
        }
        let i = qpi(qp);
        if d.refuse_in_sqe && d.sqe[i] {
            return Err(PostError::SendQueueError("test: SQE".into()));
        }
        if d.sq[i].len() >= d.send_depth as usize {
            return Err(PostError::QueueFull);
        }
        if d.refuse_posts[i] > 0 {
            d.refuse_posts[i] -= 1;
            return Err(PostError::NotReady("test: refused".into()));
        }
        // What the device would send if it executed the request now: compared when it does.
        let mut mad = [0u8; MAD_LEN];
        let at_post = self.iommu.read(wr.sge.iova, &mut mad).ok().map(|()| mad);
        d.sq[i].push_back((*wr, at_post));
        Ok(())
    }

    fn post_recv(&self, qp: SpecialQp, wr: &RecvWr) -> Result<(), PostError> {
        let mut d = lock(&self.dev);
        if d.fatal {
            return Err(PostError::DeviceFatal("test: fatal".into()));
        }
        let i = qpi(qp);
        if d.rq[i].len() >= d.recv_depth as usize {
            return Err(PostError::QueueFull);
        }
        d.rq[i].push_back(*wr);
        Ok(())
    }

    fn poll(&self, out: &mut Vec<WorkCompletion>, max: usize) -> Result<usize, DriverError> {
        let mut d = lock(&self.dev);
        if d.fatal {
            for i in 0..2 {
                while let Some((wr, _)) = d.sq[i].pop_front() {
                    d.cq.push_back(WorkCompletion::status_only(
                        wr.wr_id,
                        qp_of(i),
                        WcOpcode::Send,
                        WcStatus::WrFlushErr,
                        5,
                    ));
                }
                while let Some(wr) = d.rq[i].pop_front() {
                    d.cq.push_back(WorkCompletion::status_only(
                        wr.wr_id,
                        qp_of(i),
                        WcOpcode::Recv,
                        WcStatus::WrFlushErr,
                        5,
                    ));
                }
            }
        } else if d.auto {
            for i in 0..2 {
                while self.execute_one(&mut d, i) {}
            }
            self.deliver(&mut d);
        }
        let mut n = 0;
        while n < max {
            let Some(wc) = d.cq.pop_front() else { break };
            out.push(wc);
            n += 1;
        }
        Ok(n)
    }

    fn recover_send_queue(&self, qp: SpecialQp) -> Result<(), DriverError> {
        let mut d = lock(&self.dev);
        let i = qpi(qp);
        d.recoveries_asked += 1;
        if d.fatal || !d.sqe[i] {
            return Err(err("send queue not in SQE"));
        }
        if d.fail_recoveries > 0 {
            d.fail_recoveries -= 1;
            return Err(err("test: SQERR2RTS lost"));
        }
        // What the SQ still holds was flushed by the hardware when it entered SQE.
        while let Some((wr, _)) = d.sq[i].pop_front() {
            d.cq.push_back(WorkCompletion::status_only(
                wr.wr_id,
                qp,
                WcOpcode::Send,
                WcStatus::WrFlushErr,
                0x249,
            ));
        }
        d.sqe[i] = false;
        Ok(())
    }

    fn process_mad(&self, mad: &[u8; 256], _ignore_mkey: bool) -> Result<[u8; 256], DriverError> {
        let mut d = lock(&self.dev);
        let took = d.process_mad_time;
        d.now += took;
        match d.process_mad.as_mut() {
            Some(f) => f(mad),
            None => Err(err("no local agent in the double")),
        }
    }

    fn events(&self) -> Vec<DeviceEvent> {
        std::mem::take(&mut lock(&self.dev).events)
    }

    fn dma(&self) -> &DmaPool {
        &self.pool
    }

    fn now(&self) -> Duration {
        lock(&self.dev).now
    }

    fn wait(&self, deadline: Duration) {
        let mut d = lock(&self.dev);
        let next = d.wire.iter().map(|(t, _)| *t).min();
        let until = next.map_or(deadline, |t| t.min(deadline));
        if until > d.now {
            d.now = until;
        }
    }
}

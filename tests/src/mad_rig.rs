//! Helpers for the MAD-layer scenarios (`tests/mad_*.rs`): the MAD layer opened on a simulated
//! ConnectX the test keeps a handle on, MADs to the port's own LID (looped back by the device),
//! an in-thread responder, a tracker that holds every send to exactly one completion, and the
//! leak checks each scenario ends with.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use driver::DeviceBackend;
use driver::mlx5::{Mlx5Hca, Mlx5Port};
use driver::verbs::{Hca, HcaOptions, HcaPort, SpecialQp, UdDest, WcStatus};
use mad::{
    Agent, AgentId, AgentSpec, DropReason, Event, EventQueue, MethodMask, Port, PortConfig,
    QP1_QKEY, RecvMad, SendCompletion, SendId, SendRequest,
};

use crate::mlx5::SimHca;

/// A vendor range-1 class the responder agent answers (looped back to our own LID).
pub const ANSWERED: u8 = 0x0B;
/// A vendor range-1 class registered by a silent agent: requests arrive, nobody answers.
pub const SILENT: u8 = 0x0C;
/// Subnet administration.
pub const SA: u8 = 0x03;
/// Get.
pub const GET: u8 = 0x01;
/// Send (no response).
pub const SEND: u8 = 0x03;
/// GetTable (SA; no unmatched-method answer is generated for it).
pub const GET_TABLE: u8 = 0x12;
/// The longest response timeout a scenario on a rig gives a send (the 60 s of the sends meant
/// to wait "forever"); [`MadRig::set_longest_timeout`] changes it for a rig.
pub const LONGEST_TIMEOUT: Duration = Duration::from_secs(60);

/// A 256-byte MAD of `class` (class version 2 for SA, 1 otherwise) with `method` and the
/// client's low TID `tid`.
pub fn mad(class: u8, method: u8, tid: u32) -> Vec<u8> {
    let mut m = vec![0u8; 256];
    m[0] = 1;
    m[1] = class;
    m[2] = if class == SA { 2 } else { 1 };
    m[3] = method;
    m[8..16].copy_from_slice(&u64::from(tid).to_be_bytes());
    m[16..18].copy_from_slice(&0x0010u16.to_be_bytes());
    m[40] = tid as u8;
    m
}

/// The TID of a MAD.
pub fn tid_of(m: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&m[8..16]);
    u64::from_be_bytes(b)
}

/// The response a responder sends back for `req`: same MAD, response method.
pub fn answer_of(req: &RecvMad) -> Vec<u8> {
    let mut a = req.mad.to_vec();
    a[3] = if a[3] == 0x02 { 0x81 } else { a[3] | 0x80 };
    a
}

/// The MAD layer on a simulated ConnectX alone on its network.
pub struct MadRig {
    /// The simulated device and the driver's backend (fault injection).
    pub sim: SimHca,
    /// The driver's HCA.
    pub hca: Arc<Mlx5Hca>,
    /// The driver's port 1.
    pub hw: Arc<Mlx5Port>,
    /// The MAD layer on it.
    pub port: Port,
    /// Our LID.
    pub lid: u16,
    /// MAD-pool leases out once the port was open (its receive buffers).
    pub base_leases: usize,
    /// IOMMU mappings live once the port was open.
    pub base_mappings: usize,
    /// Receive buffers posted once the port was open: QP1's, and QP0's if it has one.
    pub base_recv_posted: (usize, Option<usize>),
    /// The queues of the agents [`MadRig::deregister`] took down: the final check drives the
    /// port a while longer and then asserts each is still empty.
    pub(crate) deregistered: Mutex<Vec<(AgentId, Arc<EventQueue>)>>,
    /// The longest response timeout of the rig's sends (how long the final check drives the
    /// port after the deregistrations: twice this).
    pub(crate) longest_timeout: Mutex<Duration>,
}

impl MadRig {
    /// Strict leases (a buffer released early faults), virtual clock, default port settings.
    pub fn new() -> MadRig {
        MadRig::with(
            HcaOptions {
                lease_mode: dma::LeaseMode::Strict,
                ..HcaOptions::default()
            },
            PortConfig::default(),
        )
    }

    /// With these HCA options and port settings.
    pub fn with(options: HcaOptions, config: PortConfig) -> MadRig {
        let sim = SimHca::new();
        let hca = sim.open(options).expect("bring-up");
        let hw = hca.mlx5_port(1).expect("port 1");
        let lid = hw.attrs().expect("port attributes").lid;
        let port = Port::open(hw.clone(), config).expect("MAD layer");
        MadRig::assemble(sim, hca, hw, port, lid)
    }

    /// The MAD layer on `sim`, brought up with `options`, opened with `config` on the port
    /// `wrap` makes of the driver's port 1 (a layer in between that records what passes, or
    /// the port itself).
    pub fn open_through(
        sim: SimHca,
        options: HcaOptions,
        config: PortConfig,
        wrap: impl FnOnce(Arc<Mlx5Port>) -> Arc<dyn HcaPort>,
    ) -> MadRig {
        let hca = sim.open(options).expect("bring-up");
        let hw = hca.mlx5_port(1).expect("port 1");
        let lid = hw.attrs().expect("port attributes").lid;
        let port = Port::open(wrap(hw.clone()), config).expect("MAD layer");
        MadRig::assemble(sim, hca, hw, port, lid)
    }

    /// The rig of a MAD layer just opened on `port`: its baselines (leases, mappings, receive
    /// buffers posted) are taken now.
    pub(crate) fn assemble(
        sim: SimHca,
        hca: Arc<Mlx5Hca>,
        hw: Arc<Mlx5Port>,
        port: Port,
        lid: u16,
    ) -> MadRig {
        let base_leases = hca.accounting().mad_pool.leases_out;
        let base_mappings = sim.backend.dma_mapper().live_mappings();
        let c = port.census();
        let base_recv_posted = (c.gsi.recv_posted, c.smi.map(|s| s.recv_posted));
        assert!(
            c.gsi.recv_posted > 0,
            "QP1 has receive buffers posted: {c:?}"
        );
        MadRig {
            sim,
            hca,
            hw,
            port,
            lid,
            base_leases,
            base_mappings,
            base_recv_posted,
            deregistered: Mutex::default(),
            longest_timeout: Mutex::new(LONGEST_TIMEOUT),
        }
    }

    /// Declare the longest response timeout the scenario's sends have (default
    /// [`LONGEST_TIMEOUT`]); on the real clock this keeps the final check short.
    pub fn set_longest_timeout(&self, longest: Duration) {
        *self
            .longest_timeout
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = longest;
    }

    /// Deregister `agent` (see [`deregister_keeping_queue`]) and keep its queue: the final
    /// check ([`MadRig::finish`], [`MadRig::finish_dead`]) asserts nothing reached it after.
    pub fn deregister(&self, agent: Agent, tracker: &mut Tracker) {
        let id = agent.id();
        let q = deregister_keeping_queue(agent, tracker);
        self.deregistered
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((id, q));
    }

    /// No event after a deregistration returned: drive the port for twice the longest
    /// response timeout (any timer or late completion still tied to a deregistered agent has
    /// fired by then), then check every queue [`MadRig::deregister`] kept is empty and that
    /// the port dropped no event for a closed agent. The queue of a deregistered agent refuses
    /// every event (and counts it as [`DropReason::AgentClosed`]), so its being empty alone
    /// shows nothing: the count is what catches an event meant for an agent after its
    /// deregistration returned. The final checks run it; a scenario calls it itself to look
    /// at the device after.
    pub fn assert_nothing_after_deregistration(&self) {
        let kept = std::mem::take(
            &mut *self
                .deregistered
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        if kept.is_empty() {
            self.assert_no_event_for_a_closed_agent();
            return;
        }
        let longest = *self
            .longest_timeout
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let end = self.port.deadline_after(2 * longest);
        while self.port.now() < end {
            self.port.progress_until(end);
        }
        for (id, q) in &kept {
            assert!(
                q.is_empty(),
                "{id}: an event after its deregistration returned (port driven {:?} \
                 after): {:?}",
                2 * longest,
                q.try_pop()
            );
        }
        self.assert_no_event_for_a_closed_agent();
    }

    /// No event was refused because its agent had deregistered (on one thread driving the
    /// port, a deregistration returns only once nothing more is owed to the agent).
    pub fn assert_no_event_for_a_closed_agent(&self) {
        let d = self.port.counters().drops;
        assert_eq!(
            d.get(DropReason::AgentClosed),
            0,
            "an event for an agent after its deregistration returned: {d:?}"
        );
    }

    /// The device's QPN of a special QP (for fault injection).
    pub fn qpn(&self, qp: SpecialQp) -> u32 {
        self.hw.hw_qpn(qp)
    }

    /// Our own port on `qp`.
    pub fn to_self(&self, qp: SpecialQp) -> UdDest {
        UdDest {
            dlid: self.lid,
            sl: 0,
            src_path_bits: 0,
            remote_qpn: qp.qpn(),
            remote_qkey: match qp {
                SpecialQp::Smi => 0,
                SpecialQp::Gsi => QP1_QKEY,
            },
            pkey_index: 0,
            grh: None,
        }
    }

    /// Register `spec`.
    pub fn agent(&self, spec: AgentSpec) -> Agent {
        self.port.register(spec).expect("register")
    }

    /// An agent that sends on QP1 and receives its responses.
    pub fn requester(&self) -> Agent {
        self.agent(AgentSpec::responses_only(SpecialQp::Gsi))
    }

    /// An agent that receives Gets of `class` (answered by [`serve`], or not).
    pub fn listener(&self, class: u8) -> Agent {
        self.agent(AgentSpec::class(class, 1, MethodMask::of(&[GET, SEND])))
    }

    /// A request of `class` to our own LID on QP1.
    pub fn request(
        &self,
        class: u8,
        tid: u32,
        timeout_ms: u32,
        retries: u32,
    ) -> SendRequest<'static> {
        SendRequest::new(mad(class, GET, tid), self.to_self(SpecialQp::Gsi))
            .timeout_ms(timeout_ms)
            .retries(retries)
    }

    /// Drive the port for `within` of device time: the responder answers what it receives,
    /// every event of `watch` goes to `tracker`.
    pub fn pump(
        &self,
        responder: Option<&Agent>,
        watch: &[&Agent],
        tracker: &mut Tracker,
        within: Duration,
    ) {
        let deadline = self.port.deadline_after(within);
        loop {
            self.port.progress_until(
                self.port
                    .deadline_after(Duration::from_millis(1))
                    .min(deadline),
            );
            if let Some(r) = responder {
                serve(r, tracker);
            }
            for a in watch {
                while let Some(e) = a.try_event() {
                    tracker.absorb(e);
                }
            }
            if self.port.now() >= deadline {
                return;
            }
        }
    }

    /// Drive the port until `done` says so (or `within` of device time passed).
    pub fn pump_until(
        &self,
        responder: Option<&Agent>,
        watch: &[&Agent],
        tracker: &mut Tracker,
        within: Duration,
        done: impl Fn(&Tracker) -> bool,
    ) -> bool {
        let deadline = self.port.deadline_after(within);
        while !done(tracker) {
            if self.port.now() >= deadline {
                return false;
            }
            self.pump(responder, watch, tracker, Duration::from_millis(1));
        }
        true
    }

    /// MAD leases and IOMMU mappings back to what they were once the port opened, every
    /// receive buffer posted again (none kept idle, no repost refused), no IOMMU fault (driver
    /// side and device side), no slot or queue busy, no request unit held and no agent
    /// waiting for one, no post refused for room, no event dropped for a closed agent.
    pub fn assert_clean(&self) {
        self.assert_clean_but_receives();
        let c = self.port.census();
        assert_eq!(
            (c.gsi.recv_posted, c.smi.map(|s| s.recv_posted)),
            self.base_recv_posted,
            "every receive buffer is posted again: {c:?}"
        );
        assert_eq!(
            c.gsi.recv_idle + c.smi.map_or(0, |s| s.recv_idle),
            0,
            "no receive buffer kept idle: {c:?}"
        );
        let k = self.port.counters();
        assert_eq!(k.recv_repost_failures, 0, "a receive repost was refused");
    }

    /// [`MadRig::assert_clean`] but for the receive buffers (a scenario whose QP went to
    /// error, where they are kept unposted, checks them itself).
    pub fn assert_clean_but_receives(&self) {
        let a = self.hca.accounting();
        assert_eq!(a.mad_pool.leases_out, self.base_leases, "MAD leases: {a:?}");
        // With pooled leases, arenas a busy moment added stay mapped until trimmed.
        self.hw.dma().trim();
        let mapper = self.sim.backend.dma_mapper();
        assert_eq!(mapper.live_mappings(), self.base_mappings, "IOMMU mappings");
        assert_eq!(mapper.fault_count(), 0, "IOMMU faults");
        let c = self.port.census();
        assert_eq!(c.gsi.active(), 0, "{c:?}");
        assert_eq!(c.smi.map_or(0, |s| s.active()), 0, "{c:?}");
        assert_eq!(
            (c.gsi.queued, c.backlogged, c.outstanding),
            (0, 0, 0),
            "{c:?}"
        );
        assert_eq!(c.gsi.posted + c.smi.map_or(0, |s| s.posted), 0, "{c:?}");
        assert_eq!(
            (c.gsi.requests_held, c.smi.map_or(0, |s| s.requests_held)),
            (0, 0),
            "request units back: {c:?}"
        );
        assert_eq!(
            (c.gsi.unit_waiters, c.smi.map_or(0, |s| s.unit_waiters)),
            (0, 0),
            "no agent left among a ring's unit waiters: {c:?}"
        );
        let k = self.port.counters();
        assert_eq!(
            k.drops.get(DropReason::AgentClosed),
            0,
            "an event for an agent after its deregistration returned: {:?}",
            k.drops
        );
        assert_eq!(k.post_failures, 0, "a post was refused");
        assert_eq!(
            k.bad_completions, 0,
            "a completion named nothing outstanding"
        );
    }

    /// After the device died: close the HCA, drop the MAD layer, and check that nothing the
    /// driver and the MAD layer held is left (no lease, no mapping, no IOMMU fault; the dead
    /// device's own state is not asked).
    pub fn finish_dead(self) {
        assert_eq!(self.port.census().agents, 0, "deregister every agent first");
        self.assert_nothing_after_deregistration();
        let MadRig {
            sim, hca, hw, port, ..
        } = self;
        hca.close().expect("close");
        drop(port);
        // The layer's last leases went back after close: unmap the pool's idle arenas.
        hw.dma().trim();
        drop(hw);
        let a = hca.accounting();
        assert_eq!(a.driver_pool.leases_out, 0, "{a:?}");
        assert_eq!(a.mad_pool.leases_out, 0, "{a:?}");
        assert_eq!(a.firmware_pages, 0, "{a:?}");
        let mapper = sim.backend.dma_mapper();
        assert_eq!(mapper.live_mappings(), 0);
        assert_eq!(mapper.fault_count(), 0, "no IOMMU fault");
    }

    /// [`MadRig::finish_dead`], checking too that the close reset the function once (as it
    /// does after the device was declared fatal).
    pub fn finish_dead_with_one_reset(self) {
        let model = self.sim.model.clone();
        let resets = model.counters().function_resets;
        self.finish_dead();
        assert_eq!(
            model.counters().function_resets,
            resets + 1,
            "the close reset the function"
        );
    }

    /// Close the HCA, drop the MAD layer, and check nothing is left anywhere (the driver's
    /// and the device's accounting).
    pub fn finish(self) {
        assert_eq!(self.port.census().agents, 0, "deregister every agent first");
        self.assert_nothing_after_deregistration();
        let MadRig {
            sim, hca, hw, port, ..
        } = self;
        hca.close().expect("close");
        // After close the device returns every receive buffer (flushed in software): the
        // layer releases them as it is dropped.
        drop(port);
        // With pooled leases, unmap the arenas those leases left idle.
        hw.dma().trim();
        drop(hw);
        sim.assert_clean(&hca);
    }
}

impl Default for MadRig {
    fn default() -> Self {
        MadRig::new()
    }
}

/// Answer every request `responder` has received.
pub fn serve(responder: &Agent, tracker: &mut Tracker) {
    while let Some(e) = responder.try_event() {
        match e {
            Event::Recv(r) if r.response_to.is_none() && r.header().method() == GET => {
                responder
                    .send(SendRequest::new(answer_of(&r), r.addr.reply_dest()))
                    .expect("answer");
                tracker.served += 1;
            }
            other => tracker.absorb(other),
        }
    }
}

/// What kind of event an entry of [`Tracker::log`] was.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Seen {
    /// A received MAD (with the send it answers, if it is a matched response).
    Recv,
    /// A send's completion.
    Send,
    /// The device died.
    Fatal,
}

/// Every event seen, holding each send to exactly one completion.
#[derive(Default, Debug)]
pub struct Tracker {
    /// Every event in the order it was taken in: its kind and the send it names (a
    /// completion's send, a response's request; `None` for an unsolicited MAD or a fatal
    /// event). Taken from one agent's queue, this is the order that agent was told things in.
    pub log: Vec<(Seen, Option<SendId>)>,
    /// The one completion of each send.
    pub done: HashMap<SendId, SendCompletion>,
    /// Sends in the order their completions arrived.
    pub order: Vec<SendId>,
    /// Received MADs, in arrival order.
    pub recvs: Vec<RecvMad>,
    /// Fatal events seen.
    pub fatal: usize,
    /// Fatal events seen, by the agent told.
    pub fatal_by_agent: HashMap<AgentId, usize>,
    /// Requests answered by [`serve`].
    pub served: usize,
}

impl Tracker {
    /// Take `e` in; panics on a second completion of a send, on a second fatal event for an
    /// agent, and on a completion told to an agent after its fatal event that is not the
    /// stack's flush (WR_FLUSH_ERR, vendor_err 5): once the device is dead, nothing completes
    /// otherwise.
    pub fn absorb(&mut self, e: Event) {
        match e {
            Event::Send(c) => {
                let id = c.id;
                if self.fatal_by_agent.contains_key(&c.agent) {
                    assert_eq!(
                        (c.status, c.vendor_err),
                        (WcStatus::WrFlushErr, 5),
                        "{id} completed after {} was told the device died: {c:?}",
                        c.agent
                    );
                }
                self.log.push((Seen::Send, Some(id)));
                self.order.push(id);
                if let Some(prev) = self.done.insert(id, c) {
                    panic!("{id} completed twice: first {prev:?}");
                }
            }
            Event::Recv(r) => {
                let r = *r.into_box();
                self.log.push((Seen::Recv, r.response_to.map(|s| s.id)));
                self.recvs.push(r);
            }
            Event::DeviceFatal { agent, reason } => {
                self.log.push((Seen::Fatal, None));
                self.fatal += 1;
                let n = self.fatal_by_agent.entry(agent).or_default();
                *n += 1;
                assert_eq!(*n, 1, "{agent} told twice the device died ({reason})");
            }
        }
    }

    /// Where in [`Tracker::log`] the first event of `kind` naming `id` is.
    pub fn position(&self, kind: Seen, id: SendId) -> Option<usize> {
        self.log.iter().position(|e| *e == (kind, Some(id)))
    }

    /// The status of `id`'s completion.
    pub fn status(&self, id: SendId) -> Option<WcStatus> {
        self.done.get(&id).map(|c| c.status)
    }

    /// Each of `ids` completed (exactly once: [`Tracker::absorb`] checks that).
    pub fn all_done(&self, ids: &[SendId]) -> bool {
        ids.iter().all(|i| self.done.contains_key(i))
    }
}

/// Deregister `agent` and take in the events it was given before deregistration returned;
/// returns its queue, which must stay empty from now on. Only the port driven for a while
/// after can show that: [`MadRig::deregister`] keeps the queue for its final check; a test
/// without a rig drives the port and checks the queue itself.
#[must_use = "check the queue stays empty after driving the port"]
pub fn deregister_keeping_queue(agent: Agent, tracker: &mut Tracker) -> Arc<EventQueue> {
    let q = agent.events().clone();
    agent.deregister();
    while let Some(e) = q.try_pop() {
        tracker.absorb(e);
    }
    q
}

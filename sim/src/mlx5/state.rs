//! Everything the simulated firmware and hardware remember, under the device's one lock, and
//! the helpers every path shares: routing an event to its EQ, writing (or delaying) a CQE,
//! moving a QP to SQER or ERR and flushing its work requests, and the catastrophic stop.
//!
//! Work that must not run under the lock (raising interrupts, waking the driver, scheduling
//! delayed CQEs) is collected in [`Effects`] and performed by the caller after unlocking.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use dma::SimIommu;
use firmware_cmds::mlx5::caps::HcaCaps;
use firmware_cmds::mlx5::cqe::{Cqe, CqeBody, CqeOpcode, ErrCqe};
use firmware_cmds::mlx5::eqe::{EqeEvent, EventType, cq_error_syndrome};
use firmware_cmds::mlx5::health::HealthSyndrome;
use firmware_cmds::mlx5::init_seg::NicInterface;
use firmware_cmds::mlx5::qpc::QpState;
use firmware_cmds::mlx5::syndrome::CqeSyndrome;
use firmware_cmds::mlx5::wqe::{CTRL_SEG_LEN, CtrlSeg, bbs_for_ds};

use super::caps;
use super::cmdq::CmdSlots;
use super::config::{FIRST_UAR, Mlx5Config, vendor_syndrome};
use super::counters::Counters;
use super::cq::{self, Cq, Delayed};
use super::eq::{self, Eq};
use super::faults::FaultState;
use super::pages::Pages;
use super::qp::Qp;
use crate::idmap::IdTable;
use crate::link::PortSnapshot;
use crate::packet::pkey_match;
use crate::sched::Scheduler;

/// The HCA's life cycle as the commands move it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Before ENABLE_HCA (and after DISABLE_HCA).
    Disabled,
    /// After ENABLE_HCA, before INIT_HCA.
    Enabled,
    /// After INIT_HCA.
    Initialized,
    /// After TEARDOWN_HCA, before DISABLE_HCA.
    TornDown,
}

/// The health buffer and counter.
#[derive(Debug, Clone)]
pub(crate) struct Health {
    /// Health syndrome (0 = healthy).
    pub synd: u8,
    /// `rfr_severity`.
    pub rfr_severity: u8,
    /// Extended syndrome.
    pub ext_synd: u16,
    /// `fw_ver` as the buffer reads.
    pub fw_ver: u32,
    /// The counter stopped at this value (a fault, or the firmware died).
    pub stopped_at: Option<u32>,
    /// Firmware is dead: commands and doorbells are no longer processed.
    pub fatal: bool,
}

/// What the device knows of one of its ports, refreshed from the fabric outside the lock.
#[derive(Debug, Clone)]
pub(crate) struct PortView {
    /// The port's management state.
    pub snapshot: PortSnapshot,
    /// The P_Key table (index 0 is the default P_Key when no SMA answers).
    pub pkeys: Vec<u16>,
    /// A fabric link is attached: sends go somewhere.
    pub linked: bool,
}

impl PortView {
    pub(crate) fn unlinked(entries: usize, node_guid: u64) -> Self {
        let mut pkeys = vec![0u16; entries];
        if let Some(p) = pkeys.first_mut() {
            *p = 0xffff;
        }
        PortView {
            snapshot: PortSnapshot {
                state: 1,
                phys_state: 3,
                node_guid,
                port_guid: node_guid,
                ..PortSnapshot::default()
            },
            pkeys,
            linked: false,
        }
    }

    /// The table has an entry of the same partition that may talk to `pkey` (at least one of
    /// the two full members).
    pub(crate) fn accepts(&self, pkey: u16) -> bool {
        self.pkeys.iter().any(|&p| pkey_match(p, pkey))
    }
}

/// Work for the caller to do after unlocking.
#[derive(Debug, Default)]
pub(crate) struct Effects {
    /// MSI-X vectors to raise.
    pub irqs: Vec<u32>,
    /// Something the driver may wait for was written.
    pub notify: bool,
    /// Delayed CQEs of these CQs fall due at these times.
    pub timers: Vec<(Duration, u32)>,
}

/// The device's state.
pub(crate) struct State {
    pub cfg: Mlx5Config,
    pub iommu: Arc<SimIommu>,
    pub sched: Arc<Scheduler>,
    /// Time of creation or of the last reset (the `initializing` bit follows it).
    pub born: Duration,
    pub cmdq_addr_h: u32,
    pub cmdq_addr_l: u32,
    pub nic_interface: u8,
    pub health: Health,
    pub phase: Phase,
    pub issi: u16,
    pub caps_max: HcaCaps,
    pub caps_cur: HcaCaps,
    pub host_endianness: u8,
    pub cmd: CmdSlots,
    pub pages: Pages,
    pub uars: BTreeSet<u32>,
    pub pds: BTreeMap<u32, u32>,
    pub next_pd: u32,
    pub eqs: BTreeMap<u8, Eq>,
    pub cqs: IdTable<Cq>,
    pub next_cqn: u32,
    pub qps: IdTable<Qp>,
    pub next_qpn: u32,
    /// Per port: the QPN of its QP0 and QP1 (set at RST2INIT, when the port is known).
    pub special: Vec<[Option<u32>; 2]>,
    /// QPs in ERR with a receive queue: new receive WQEs are flushed when seen.
    pub err_rqs: BTreeSet<u32>,
    pub ports: Vec<PortView>,
    pub faults: FaultState,
    pub counters: Counters,
    /// Function resets so far: work begun outside the lock (a MAD_IFC the port's SMA
    /// answers) is finished only by the firmware that began it.
    pub generation: u64,
    pub fx: Effects,
    /// MAD buffers of delivered packets, reused for the next sends (no allocation per
    /// packet in a loop back). Boxed because a `Packet` carries its MAD as a box: reuse
    /// moves the box, it never copies the bytes.
    #[allow(clippy::vec_box)]
    pub mad_pool: Vec<Box<[u8; 256]>>,
    /// The time of the operation under way, read once for all its steps (see
    /// `Inner::with_at`); `None`: read the clock.
    pub op_now: Option<Duration>,
    /// The latest time a step of this device used. An operation reads the clock before it
    /// takes the device lock, so another thread's step may have used a later time meanwhile:
    /// the operation's time is raised to this mark, and the device's times (CQE timestamps,
    /// delay deadlines) never go back.
    pub time_mark: std::cell::Cell<Duration>,
    /// Where a send or receive WQE is read to: kept, so that each WQE does not zero a fresh
    /// buffer (what a WQE did not overwrite is never read). `None` only while lent out or
    /// before the first WQE.
    pub wqe_scratch: Option<Box<[u8; WQE_SCRATCH]>>,
}

/// Bytes of [`State::wqe_scratch`]: the largest WQE the device reads (a send WQE of 16
/// basic blocks; a receive WQE is 512 bytes at most).
pub(crate) const WQE_SCRATCH: usize = 1024;

impl State {
    /// The WQE scratch buffer, taken out of the state for one WQE (give it back with
    /// [`State::put_scratch`]).
    #[inline]
    pub(crate) fn take_scratch(&mut self) -> Box<[u8; WQE_SCRATCH]> {
        self.wqe_scratch
            .take()
            .unwrap_or_else(|| Box::new([0; WQE_SCRATCH]))
    }

    /// Gives back the buffer [`State::take_scratch`] lent.
    #[inline]
    pub(crate) fn put_scratch(&mut self, buf: Box<[u8; WQE_SCRATCH]>) {
        self.wqe_scratch = Some(buf);
    }
}

impl State {
    pub(crate) fn new(cfg: Mlx5Config, iommu: Arc<SimIommu>, sched: Arc<Scheduler>) -> Self {
        let caps_max = caps::max_caps(&cfg);
        let caps_cur = caps::initial_current(&caps_max);
        let born = sched.now();
        let own = super::pages::own(cfg.embedded_cpu);
        let ports = (0..cfg.ports)
            .map(|_| PortView::unlinked(128, cfg.node_guid))
            .collect();
        State {
            health: Health {
                synd: 0,
                rfr_severity: 0,
                ext_synd: 0,
                fw_ver: cfg.fw.fw_rev_reg(),
                stopped_at: None,
                fatal: false,
            },
            special: vec![[None, None]; usize::from(cfg.ports)],
            cfg,
            iommu,
            sched,
            born,
            cmdq_addr_h: 0,
            cmdq_addr_l: 0,
            nic_interface: 0,
            phase: Phase::Disabled,
            issi: 0,
            caps_max,
            caps_cur,
            host_endianness: 0,
            cmd: CmdSlots::default(),
            pages: Pages::new(own),
            uars: BTreeSet::new(),
            pds: BTreeMap::new(),
            next_pd: 1,
            eqs: BTreeMap::new(),
            cqs: IdTable::default(),
            next_cqn: 0x400,
            qps: IdTable::default(),
            next_qpn: 0x100,
            err_rqs: BTreeSet::new(),
            ports,
            faults: FaultState::default(),
            counters: Counters::default(),
            generation: 0,
            fx: Effects::default(),
            mad_pool: Vec::new(),
            op_now: None,
            time_mark: std::cell::Cell::new(Duration::ZERO),
            wqe_scratch: None,
        }
    }

    /// Simulated time.
    pub(crate) fn now(&self) -> Duration {
        if let Some(t) = self.op_now {
            return t;
        }
        let t = self.sched.now().max(self.time_mark.get());
        self.time_mark.set(t);
        t
    }

    /// The free-running timer CQEs carry (nanoseconds).
    pub(crate) fn timestamp(&self) -> u64 {
        u64::try_from(self.now().as_nanos()).unwrap_or(u64::MAX)
    }

    /// The function-level reset: back to power-on, every resource and page forgotten, faults
    /// cleared (a reset is how a driver recovers a dead device).
    pub(crate) fn power_on(&mut self) {
        let fresh = State::new(self.cfg.clone(), self.iommu.clone(), self.sched.clone());
        let ports = std::mem::take(&mut self.ports);
        let counters = std::mem::take(&mut self.counters);
        let generation = self.generation.wrapping_add(1);
        *self = fresh;
        self.ports = ports;
        self.counters = counters;
        self.generation = generation;
    }

    /// Drops every EQ, CQ, QP, UAR and PD (TEARDOWN_HCA); returns how many there were.
    pub(crate) fn drop_resources(&mut self) -> usize {
        let n = self.eqs.len() + self.cqs.len() + self.qps.len() + self.uars.len() + self.pds.len();
        self.eqs.clear();
        self.cqs.clear();
        self.qps.clear();
        self.uars.clear();
        self.pds.clear();
        self.err_rqs.clear();
        for s in &mut self.special {
            *s = [None, None];
        }
        n
    }

    /// The next free UAR index, if any is left below the end of BAR0.
    pub(crate) fn alloc_uar(&mut self, bar_pages: u32) -> Option<u32> {
        let idx = (FIRST_UAR..bar_pages).find(|i| !self.uars.contains(i))?;
        self.uars.insert(idx);
        Some(idx)
    }

    /// Firmware death: the health buffer shows `synd`, the recovery-flow bit when `rfr`, the
    /// NIC interface reads DISABLED, and from now on no command or doorbell is processed.
    /// The kernel counts a DISABLED interface as fatal by itself (`check_fatal_sensors` in
    /// drivers/net/ethernet/mellanox/mlx5/core/health.c returns MLX5_SENSOR_NIC_DISABLED
    /// before it looks at the syndrome), and `mlx5_handle_bad_state` expects to find it
    /// DISABLED after a fatal error ("Expected to see disabled NIC but it is full driver").
    /// The health counter, the firmware's heartbeat, stops where it is (the kernel's
    /// `poll_health` counts a counter unchanged for `MAX_MISSES` polls as "device's health
    /// compromised"); a function reset ([`State::power_on`]) starts it again.
    pub(crate) fn fatal(&mut self, synd: HealthSyndrome, rfr: bool) {
        self.set_health_syndrome(synd, rfr, 0x2);
        self.health.fatal = true;
        if self.health.stopped_at.is_none() {
            let now = self.sched.now();
            self.health.stopped_at = Some(super::regs::health_counter_value(self, now));
        }
        self.nic_interface = NicInterface::DISABLED.0;
        self.fx.notify = true;
    }

    /// The health buffer shows `synd` with `severity` (a kernel log level: 2 critical, 4
    /// warning) and the recovery-flow-required bit when `rfr`. The `rfr_severity` byte: bit 7
    /// RFR, bit 3 severity valid, bits 2:0 the severity.
    pub(crate) fn set_health_syndrome(&mut self, synd: HealthSyndrome, rfr: bool, severity: u8) {
        self.health.synd = synd.0;
        self.health.rfr_severity = (u8::from(rfr) << 7) | 0x08 | (severity & 0x7);
    }

    /// Posts an event to the lowest-numbered EQ subscribed to its type.
    pub(crate) fn post_event(&mut self, ev: &EqeEvent) -> bool {
        let t = event_type(ev);
        let Some(eq) = self.eqs.values_mut().find(|e| e.wants(t)) else {
            self.counters.snap.events_unrouted += 1;
            return false;
        };
        match eq.post(&self.iommu, ev) {
            eq::Posted::Written(irq) => {
                self.counters.snap.eqes += 1;
                self.fx.notify = true;
                if let Some(v) = irq {
                    self.fx.irqs.push(v);
                }
                true
            }
            eq::Posted::InError => false,
            eq::Posted::DmaFailed => {
                self.counters.snap.dma_errors += 1;
                false
            }
            eq::Posted::Overrun => {
                self.counters.snap.eq_overruns += 1;
                // Firmware reports an EQ overrun through the health buffer and stops.
                self.fatal(HealthSyndrome::ASYNCHRONOUS_EQ_BUF_OVERRUN, true);
                false
            }
        }
    }

    /// The CQE delay in force for `cqn`.
    fn cqe_delay(&self, cqn: u32) -> Duration {
        self.faults
            .cq_delay
            .get(&cqn)
            .copied()
            .unwrap_or(self.faults.cqe_delay)
    }

    /// Completes on `cqn`. A send completion of a QP whose send completions are made late
    /// ([`super::Mlx5Faults::send_completion_delay`]), or that has late ones pending, goes
    /// behind them (a work queue always completes in order); anything else goes on at once.
    pub(crate) fn complete(&mut self, cqn: u32, cqe: Cqe, solicited: bool) {
        // Nearly always: no delay in force and nothing held back, so nothing to order behind
        // (what the general path below would conclude after its look-ups). The CQ is looked
        // up once for the check and the write.
        if !self.faults.delays_cqes() {
            if let Some(cq) = self.cqs.get_mut(&cqn) {
                if cq.late.is_empty() && cq.delayed.is_empty() {
                    let (is_error, is_flush) = cqe_kind(&cqe);
                    let eqn = cq.eqn;
                    let posted = cq.post(&self.iommu, &cqe, solicited || is_error);
                    self.posted(cqn, eqn, posted, is_error, is_flush);
                    return;
                }
            }
        }
        if matches!(cqe.opcode, CqeOpcode::REQ | CqeOpcode::REQ_ERR) {
            let delay = self.faults.send_completion_delay.get(&cqe.qpn).copied();
            let pending = self.cqs.get(&cqn).and_then(|cq| {
                cq.late
                    .iter()
                    .filter(|d| d.cqe.qpn == cqe.qpn)
                    .map(|d| d.due)
                    .max()
            });
            if delay.is_some() || pending.is_some() {
                let due = (self.now() + delay.unwrap_or_default()).max(pending.unwrap_or_default());
                self.complete_late(cqn, cqe, solicited, due);
                return;
            }
        }
        self.complete_in_order(cqn, cqe, solicited);
    }

    /// Writes the CQE now, or queues it behind an injected CQE delay (and behind CQEs already
    /// waiting, so a CQ never completes out of order).
    fn complete_in_order(&mut self, cqn: u32, cqe: Cqe, solicited: bool) {
        let delay = self.cqe_delay(cqn);
        let now = self.now();
        let Some(cq) = self.cqs.get_mut(&cqn) else {
            self.counters.snap.cqes_lost += 1;
            return;
        };
        if !delay.is_zero() || !cq.delayed.is_empty() {
            let due = now + delay;
            cq.delayed.push_back(Delayed {
                due,
                cqe,
                solicited,
            });
            self.fx.timers.push((due, cqn));
            return;
        }
        self.write_cqe(cqn, &cqe, solicited);
    }

    /// Completes on `cqn` at `due`, holding back no other QP's CQE meanwhile (a send
    /// completion generated late).
    fn complete_late(&mut self, cqn: u32, cqe: Cqe, solicited: bool, due: Duration) {
        let Some(cq) = self.cqs.get_mut(&cqn) else {
            self.counters.snap.cqes_lost += 1;
            return;
        };
        cq.late.push(Delayed {
            due,
            cqe,
            solicited,
        });
        self.fx.timers.push((due, cqn));
    }

    /// Writes the delayed CQEs of `cqn` that are due.
    pub(crate) fn flush_delayed(&mut self, cqn: u32) {
        let now = self.now();
        let due: Vec<Delayed> = match self.cqs.get_mut(&cqn) {
            Some(cq) if cq.late.iter().any(|d| d.due <= now) => {
                let (due, keep) = std::mem::take(&mut cq.late)
                    .into_iter()
                    .partition(|d| d.due <= now);
                cq.late = keep;
                due
            }
            _ => Vec::new(),
        };
        for d in due {
            self.complete_in_order(cqn, d.cqe, d.solicited);
        }
        loop {
            let Some(cq) = self.cqs.get_mut(&cqn) else {
                return;
            };
            if cq.delayed.front().is_none_or(|d| d.due > now) {
                return;
            }
            let Some(d) = cq.delayed.pop_front() else {
                return;
            };
            self.write_cqe(cqn, &d.cqe, d.solicited);
        }
    }

    fn write_cqe(&mut self, cqn: u32, cqe: &Cqe, solicited: bool) {
        let (is_error, is_flush) = cqe_kind(cqe);
        let Some(cq) = self.cqs.get_mut(&cqn) else {
            self.counters.snap.cqes_lost += 1;
            return;
        };
        let eqn = cq.eqn;
        let posted = cq.post(&self.iommu, cqe, solicited || is_error);
        self.posted(cqn, eqn, posted, is_error, is_flush);
    }

    /// Counts a CQE posted to `cqn` (whose EQ is `eqn`) and does what follows: the
    /// completion event of an armed CQ, or the CQ error event of an overrun or access
    /// violation.
    #[inline]
    fn posted(&mut self, cqn: u32, eqn: u8, posted: cq::Posted, is_error: bool, is_flush: bool) {
        match posted {
            cq::Posted::Written(fire) => {
                let c = &mut self.counters.snap;
                c.cqes += 1;
                c.error_cqes += u64::from(is_error);
                c.flush_cqes += u64::from(is_flush);
                self.fx.notify = true;
                if fire {
                    self.post_completion_event(eqn, cqn);
                }
            }
            cq::Posted::InError => self.counters.snap.cqes_lost += 1,
            cq::Posted::Overrun => {
                self.counters.snap.cqes_lost += 1;
                self.counters.snap.cq_overruns += 1;
                self.post_event(&EqeEvent::CqError {
                    cqn,
                    syndrome: cq_error_syndrome::CQ_OVERRUN,
                });
            }
            cq::Posted::AccessViolation => {
                self.counters.snap.cqes_lost += 1;
                self.counters.snap.dma_errors += 1;
                self.post_event(&EqeEvent::CqError {
                    cqn,
                    syndrome: cq_error_syndrome::CQ_ACCESS_VIOLATION_ERROR,
                });
            }
        }
    }

    /// A completion event goes to the CQ's own EQ, not by type.
    pub(crate) fn post_completion_event(&mut self, eqn: u8, cqn: u32) {
        let Some(eq) = self.eqs.get_mut(&eqn) else {
            self.counters.snap.events_unrouted += 1;
            return;
        };
        match eq.post(&self.iommu, &EqeEvent::Completion { cqn }) {
            eq::Posted::Written(irq) => {
                self.counters.snap.eqes += 1;
                self.fx.notify = true;
                if let Some(v) = irq {
                    self.fx.irqs.push(v);
                }
            }
            eq::Posted::InError => {}
            eq::Posted::DmaFailed => self.counters.snap.dma_errors += 1,
            eq::Posted::Overrun => {
                self.counters.snap.eq_overruns += 1;
                self.fatal(HealthSyndrome::EQ_IN_ERR, true);
            }
        }
    }

    /// An error CQE for a work request of `qp`.
    pub(crate) fn error_cqe(
        qp: &Qp,
        send: bool,
        syndrome: CqeSyndrome,
        vendor_err: u8,
        wqe_counter: u16,
        wqe_opcode: u8,
    ) -> Cqe {
        Cqe {
            opcode: if send {
                CqeOpcode::REQ_ERR
            } else {
                CqeOpcode::RESP_ERR
            },
            format: 0,
            owner: false,
            qpn: qp.qpn,
            wqe_counter,
            signature: 0,
            body: CqeBody::Error(ErrCqe {
                syndrome,
                vendor_err,
                wqe_opcode,
                srqn: qp.user_index & 0x00ff_ffff,
                hw_err_synd: 0,
                hw_synd_type: 0,
            }),
        }
    }

    /// Moves `qpn` to ERR and flushes both queues.
    pub(crate) fn qp_to_err(&mut self, qpn: u32) {
        let Some(qp) = self.qps.get_mut(&qpn) else {
            return;
        };
        qp.state = QpState::Err;
        let has_rq = qp.rq_log.is_some();
        if has_rq {
            self.err_rqs.insert(qpn);
        }
        self.flush_sq(qpn);
        self.flush_rq(qpn);
    }

    /// Moves `qpn` to SQER (a send error on a UD-type QP) and flushes its send queue.
    pub(crate) fn qp_to_sqer(&mut self, qpn: u32) {
        if let Some(qp) = self.qps.get_mut(&qpn) {
            qp.state = QpState::Sqer;
            self.flush_sq(qpn);
        }
    }

    /// Completes every posted, unprocessed send WQE of `qpn` with WR_FLUSH_ERR.
    pub(crate) fn flush_sq(&mut self, qpn: u32) {
        let Some(qp) = self.qps.get_mut(&qpn) else {
            return;
        };
        let (Some(bbs), Some(pc)) = (qp.sq_bbs(), qp.sq_producer(&self.iommu)) else {
            return;
        };
        let cqn = qp.cqn_snd;
        let mut pending = u32::from(pc.wrapping_sub(qp.sq_cc)).min(bbs);
        let mut cqes = Vec::new();
        while pending > 0 {
            let mut ctrl = [0u8; CTRL_SEG_LEN];
            let read = qp
                .sq_bb_addr(qp.sq_cc)
                .is_some_and(|a| self.iommu.read(a, &mut ctrl).is_ok());
            let seg = CtrlSeg::decode(&ctrl).ok().filter(|_| read);
            let step = seg
                .map_or(1, |c| bbs_for_ds(usize::from(c.ds)).max(1) as u32)
                .min(pending);
            let opcode = seg.map_or(0, |c| c.opcode.0);
            cqes.push(State::error_cqe(
                qp,
                true,
                CqeSyndrome::WR_FLUSHED_ERR,
                vendor_syndrome::FLUSH,
                qp.sq_cc,
                opcode,
            ));
            qp.sq_cc = qp.sq_cc.wrapping_add(step as u16);
            qp.sends += 1;
            pending -= step;
        }
        self.counters.snap.send_wqes += cqes.len() as u64;
        for c in cqes {
            self.complete(cqn, c, true);
        }
    }

    /// Completes every posted, unconsumed receive WQE of `qpn` with WR_FLUSH_ERR.
    pub(crate) fn flush_rq(&mut self, qpn: u32) {
        let Some(qp) = self.qps.get_mut(&qpn) else {
            return;
        };
        let (Some(n), Some(pc)) = (qp.rq_entries(), qp.rq_producer(&self.iommu)) else {
            return;
        };
        let cqn = qp.cqn_rcv;
        qp.rq_pc_seen = pc;
        let pending = u32::from(pc.wrapping_sub(qp.rq_cc)).min(n);
        let mut cqes = Vec::with_capacity(pending as usize);
        for _ in 0..pending {
            cqes.push(State::error_cqe(
                qp,
                false,
                CqeSyndrome::WR_FLUSHED_ERR,
                vendor_syndrome::FLUSH,
                qp.rq_cc,
                0,
            ));
            qp.rq_cc = qp.rq_cc.wrapping_add(1);
            qp.recvs += 1;
        }
        self.counters.snap.recv_wqes += cqes.len() as u64;
        for c in cqes {
            self.complete(cqn, c, true);
        }
    }

    /// Flushes receive WQEs posted to QPs in ERR since they were last looked at (hardware
    /// notices new WQEs of an errored QP on its own; the model looks whenever the driver
    /// waits).
    pub(crate) fn sweep_err_rqs(&mut self) {
        let qpns: Vec<u32> = self.err_rqs.iter().copied().collect();
        for qpn in qpns {
            if self.qps.get(&qpn).is_some_and(|q| q.state == QpState::Err) {
                self.flush_rq(qpn);
            } else {
                self.err_rqs.remove(&qpn);
            }
        }
    }
}

/// Whether a CQE reports an error, and whether that error is a flush.
fn cqe_kind(cqe: &Cqe) -> (bool, bool) {
    match &cqe.body {
        CqeBody::Error(e) => (true, e.syndrome == CqeSyndrome::WR_FLUSHED_ERR),
        _ => (false, false),
    }
}

/// The event type an EQE carries.
pub(crate) fn event_type(ev: &EqeEvent) -> EventType {
    match *ev {
        EqeEvent::Completion { .. } => EventType::COMP,
        EqeEvent::Command { .. } => EventType::CMD,
        EqeEvent::PageRequest { .. } => EventType::PAGE_REQUEST,
        EqeEvent::PortChange { .. } => EventType::PORT_CHANGE,
        EqeEvent::CqError { .. } => EventType::CQ_ERROR,
        EqeEvent::QueueEvent { event, .. } | EqeEvent::Other { event, .. } => event,
    }
}

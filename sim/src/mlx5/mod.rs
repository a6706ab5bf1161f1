//! A simulated ConnectX (mlx5): the PCI function a userspace mlx5 driver binds, with its
//! firmware, as far as a driver can observe them.
//!
//! * BAR0 holds the initialization segment at 0 (`regs`: firmware version, command interface
//!   revision, command queue address, doorbell, `initializing`, health buffer and counter,
//!   timers) and UAR pages from index [`config::FIRST_UAR`] on (`uar`).
//! * The command queue ([`cmdq`]) runs commands on the doorbell through the IOMMU, with
//!   mailboxes, tokens, signatures and the delivery and command statuses firmware gives
//!   (`exec` has the command set); firmware pages (`pages`) are asked for at boot, at
//!   INIT_HCA and at run time.
//! * EQs (`eq`), CQs (`cq`) and QP0/QP1/UD QPs (`qp`) live in driver memory; sends (`send`) become
//!   [`Packet`](crate::packet::Packet)s on the port's [`PortLink`], packets the fabric delivers
//!   (`recv`) land in receive queues.
//! * Every DMA goes through the device's [`SimIommu`]; an IOMMU fault means a driver bug and is
//!   recorded there for the test to see.
//! * [`Mlx5Faults`] injects faults; [`Mlx5Counters`] and the accessors of [`Mlx5`] observe.
//!
//! A port is attached to a fabric with [`Mlx5::attach_port`]: the fabric gets the device's
//! [`Mlx5::sink`] and gives back the port's [`PortLink`], which carries the port's packets and
//! answers MAD_IFC with the port's SMA.

mod attach;
mod buffer;
mod caps;
pub mod cmdq;
pub mod config;
pub mod counters;
mod cq;
pub mod engine;
mod eq;
mod exec;
pub mod faults;
mod pages;
mod port;
mod qp;
mod recv;
mod regs;
mod send;
mod state;
mod uar;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock, Weak};
use std::time::Duration;

use dma::SimIommu;
use firmware_cmds::mlx5::qpc::{QpServiceType, QpState};

pub use self::attach::MELLANOX_OUI;
pub use self::config::Mlx5Config;
pub use self::counters::{DropReason, FetchedCommand, Mlx5Counters};
pub use self::engine::{DeviceThread, DeviceThreadError};
pub use self::exec::synd as syndrome;
pub use self::faults::{CmdCorruption, Mlx5Faults, WqeQueue};

use self::cmdq::{MadWork, PortWork};
use self::config::{BAR0_SIZE, CLASS_INFINIBAND, FIRST_UAR, MELLANOX_VENDOR};
use self::send::SendStep;
use self::state::State;
use crate::clock::{ClockMode, SimClock};
use crate::device::{Bar, Device, IrqKind, IrqLines};
use crate::link::{PortLink, PortSink};
use crate::pci_config::ConfigSpace;
use crate::sched::Scheduler;

/// What is wrong with a request to the model itself (not with what a driver does: that gets
/// the status a device would give).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Mlx5Error {
    /// The configuration describes a device the model cannot simulate.
    #[error("invalid simulated ConnectX configuration: {0}")]
    Config(String),
    /// The network refused to place the device (no such node, not a CA, port taken).
    #[error("cannot attach the simulated ConnectX to the network: {0}")]
    Network(String),
    /// A port number outside 1..=ports.
    #[error("port {port} does not exist: the simulated ConnectX has {ports} port(s)")]
    NoSuchPort {
        /// The port asked for.
        port: u8,
        /// Ports the device has.
        ports: u8,
    },
}

/// A QP as the model sees it, for tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpInfo {
    /// QP number.
    pub qpn: u32,
    /// Service type.
    pub st: QpServiceType,
    /// State.
    pub state: QpState,
    /// Port (0 before RST2INIT).
    pub port: u8,
}

/// How many firmware objects exist, for leak checks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ResourceCounts {
    /// Event queues.
    pub eqs: usize,
    /// Completion queues.
    pub cqs: usize,
    /// Queue pairs.
    pub qps: usize,
    /// UARs.
    pub uars: usize,
    /// Protection domains.
    pub pds: usize,
}

/// The shared body of the device: what the driver's accesses, the fabric's deliveries and the
/// scheduler's events all reach.
pub(crate) struct Inner {
    cfg: Mlx5Config,
    sched: Arc<Scheduler>,
    iommu: Arc<SimIommu>,
    config: ConfigSpace,
    irqs: IrqLines,
    removed: AtomicBool,
    state: Mutex<State>,
    links: Vec<RwLock<Option<Arc<dyn PortLink>>>>,
    port_dirty: Vec<AtomicBool>,
    /// Some QP in ERR has a receive queue to watch (saves the lock on every wait otherwise).
    err_rqs: AtomicBool,
    /// The device's own thread, when it has one ([`Mlx5::run_on_own_thread`]).
    engine: RwLock<Option<Arc<engine::Engine>>>,
    weak: Weak<Inner>,
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        let mut st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        // A step that panicked under `with_at` (a model bug; the lock is taken again past
        // the poison) must not leave its time behind as the device's clock.
        st.op_now = None;
        st
    }

    /// Runs `f` under the device lock, then does what it left to do outside the lock
    /// (interrupts, waking the driver, timers).
    pub(crate) fn with<R>(&self, f: impl FnOnce(&mut State) -> R) -> R {
        let mut st = self.lock();
        let r = f(&mut st);
        self.err_rqs
            .store(!st.err_rqs.is_empty(), Ordering::Relaxed);
        if st.fx.irqs.is_empty() && st.fx.timers.is_empty() {
            // The usual step (a WQE, a packet): at most a wake-up, and nothing to move out.
            let notify = std::mem::take(&mut st.fx.notify);
            drop(st);
            if notify {
                self.sched.notify();
            }
            return r;
        }
        st.counters.snap.interrupts += st.fx.irqs.len() as u64;
        let fx = std::mem::take(&mut st.fx);
        drop(st);
        self.apply(fx);
        r
    }

    /// [`with`](Self::with) for a step of an operation that read the clock at `now`: the
    /// state's time is `now` for the step (the clock is read once per doorbell or delivery
    /// run, not once per CQE and timestamp).
    pub(crate) fn with_at<R>(&self, now: Duration, f: impl FnOnce(&mut State) -> R) -> R {
        self.with(|st| {
            let now = now.max(st.time_mark.get());
            st.time_mark.set(now);
            st.op_now = Some(now);
            let r = f(st);
            st.op_now = None;
            r
        })
    }

    fn apply(&self, fx: state::Effects) {
        for v in fx.irqs {
            self.irqs.raise(IrqKind::Msix, v);
        }
        for (due, cqn) in fx.timers {
            let weak = self.weak.clone();
            self.sched.schedule_at(
                due,
                Box::new(move || {
                    if let Some(inner) = weak.upgrade() {
                        inner.flush_delayed(cqn);
                    }
                }),
            );
        }
        if fx.notify {
            self.sched.notify();
        }
    }

    /// A delayed-CQE timer fired.
    fn flush_delayed(&self, cqn: u32) {
        let mut st = self.lock();
        st.flush_delayed(cqn);
        st.counters.snap.interrupts += st.fx.irqs.len() as u64;
        let fx = std::mem::take(&mut st.fx);
        drop(st);
        self.apply(fx);
    }

    fn down(&self) -> bool {
        self.removed.load(Ordering::SeqCst)
    }

    fn link(&self, port: u8) -> Option<Arc<dyn PortLink>> {
        let slot = self.links.get(usize::from(port.checked_sub(1)?))?;
        slot.read().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Refreshes the view of every port whose state changed, calling the links with no lock
    /// held.
    fn refresh_ports(&self) {
        for (i, dirty) in self.port_dirty.iter().enumerate() {
            // A plain load first: this runs on every doorbell.
            if !dirty.load(Ordering::Acquire) || !dirty.swap(false, Ordering::AcqRel) {
                continue;
            }
            let port = i as u8 + 1;
            let entries = self.with(|st| 1usize << (7 + st.caps_cur.pkey_table_size().min(5)));
            let view = match self.link(port) {
                Some(link) => port::read_view(link.as_ref(), entries),
                None => state::PortView::unlinked(entries, self.cfg.node_guid),
            };
            self.with(|st| st.ports[i] = view);
        }
    }

    fn mark_dirty(&self, port: u8) {
        if let Some(d) = self.port_dirty.get(usize::from(port.wrapping_sub(1))) {
            d.store(true, Ordering::SeqCst);
        }
    }

    /// The command doorbell rang.
    fn command_doorbell(&self, mask: u32) {
        self.refresh_ports();
        for slot in 0..cmdq::SLOTS {
            if mask & (1u32 << slot) != 0 {
                let work = self.with(|st| st.start_command(slot));
                self.drive(work);
            }
        }
    }

    /// Answers MAD_IFCs through the ports' SMAs (no lock held), finishing their commands and
    /// any they release.
    fn drive(&self, work: Vec<MadWork>) {
        let mut queue: VecDeque<MadWork> = work.into();
        while let Some(w) = queue.pop_front() {
            let more = match &w.what {
                PortWork::Mad { mad, ignore_mkey } => {
                    let answer = self
                        .link(w.port)
                        .and_then(|l| l.local_mad(mad, *ignore_mkey));
                    // A Set may have changed the port (LID, P_Keys): read it again before the
                    // driver sees the answer.
                    if mad[3] == mad_wire::method::SET {
                        self.mark_dirty(w.port);
                        self.refresh_ports();
                    }
                    self.with(|st| st.finish_mad(&w, answer.as_ref()))
                }
                PortWork::Caps(caps) => {
                    let now = self
                        .link(w.port)
                        .map(|l| l.modify_capability_mask(*caps, !*caps));
                    self.mark_dirty(w.port);
                    self.refresh_ports();
                    self.with(|st| st.finish_caps(&w, now))
                }
            };
            queue.extend(more);
        }
    }

    /// Runs the send queue of `qpn` at `now`, one WQE per lock, transmitting outside the lock.
    fn run_send_queue(&self, qpn: u32, now: Duration) {
        loop {
            match self.with_at(now, |st| st.next_send(qpn)) {
                SendStep::Idle => return,
                SendStep::Completed => {}
                SendStep::Packet(port, packet, more) => {
                    // Counted (sent, or dropped for want of a link) by `next_send`.
                    if let Some(link) = self.link(port) {
                        link.transmit_at(packet, now);
                    }
                    if !more {
                        return;
                    }
                }
            }
        }
    }

    fn mmio_read(&self, offset: u64, data: &mut [u8]) {
        if self.down() {
            data.fill(0xff);
            return;
        }
        self.uar_fence();
        let now = self.sched.now();
        let init_end = u64::from(FIRST_UAR) * 4096;
        if offset >= init_end || data.is_empty() {
            // UAR pages are write-only.
            data.fill(0);
            return;
        }
        let st = self.lock();
        // Assemble the bytes from the 32-bit registers they fall in (device byte order).
        for (i, b) in data.iter_mut().enumerate() {
            let at = offset as usize + i;
            let reg = regs::read32(&st, at & !3, now).to_be_bytes();
            *b = reg[at & 3];
        }
    }

    fn mmio_write(&self, offset: u64, data: &[u8]) {
        if self.down() {
            return;
        }
        let init_end = u64::from(FIRST_UAR) * 4096;
        if offset >= init_end {
            // With a device thread, a UAR write is only queued for it (see `engine`).
            if self.engine().is_some_and(|e| e.post(offset, data)) {
                return;
            }
            let _held = self.sched.hold_wakes();
            let effect = self.with(|st| {
                if st.health.fatal {
                    return uar::UarEffect::None;
                }
                st.uar_write_at(offset, data)
            });
            if let uar::UarEffect::Send(qpn) = effect {
                self.run_doorbells(&[qpn]);
            }
            return;
        }
        self.uar_fence();
        // What this write makes the device do wakes a waiting driver once, at the end.
        let _held = self.sched.hold_wakes();
        for (i, chunk) in data.chunks(4).enumerate() {
            if chunk.len() != 4 {
                break;
            }
            let at = offset as usize + 4 * i;
            let v = u32::from_be_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
            let effect = self.with(|st| regs::write32(st, at, v));
            if let regs::WriteEffect::CommandDoorbell(mask) = effect {
                self.command_doorbell(mask);
            }
        }
    }

    /// With a device thread: waits until the UAR writes queued so far are applied (see
    /// `engine::Engine::fence`).
    fn uar_fence(&self) {
        if let Some(e) = self.engine() {
            e.fence();
        }
    }

    /// The device thread's queue, if it has one: cloned out of its slot, so that the slot's
    /// lock is not held while the queue is used.
    fn engine(&self) -> Option<Arc<engine::Engine>> {
        self.engine
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Applies `writes` to UAR pages, in order, under one lock, and runs the send queues they
    /// rang (each once, in the order first rung; their numbers left in `qpns`). Nothing on a
    /// removed or dead device.
    fn apply_uar_writes(&self, writes: &[engine::UarWrite], qpns: &mut Vec<u32>) {
        if writes.is_empty() || self.down() {
            return;
        }
        // What the writes make the device do wakes a waiting driver once, at the end.
        let _held = self.sched.hold_wakes();
        let fatal = self.with(|st| {
            if st.health.fatal {
                return true;
            }
            for w in writes {
                if let uar::UarEffect::Send(qpn) = st.uar_write_at(w.offset, w.data()) {
                    if !qpns.contains(&qpn) {
                        qpns.push(qpn);
                    }
                }
            }
            false
        });
        if !fatal {
            self.run_doorbells(qpns);
        }
    }

    /// Runs the send queues of `qpns` (their doorbells rang), on this thread.
    fn run_doorbells(&self, qpns: &[u32]) {
        if qpns.is_empty() {
            return;
        }
        let _held = self.sched.hold_wakes();
        self.refresh_ports();
        // One read of the clock for the doorbell: its CQEs, its packets and the events they
        // made due all happen at this time.
        let now = self.sched.now();
        for &qpn in qpns {
            self.run_send_queue(qpn, now);
        }
        // In real time, what the send made due now (a delivery with no delay: the response
        // of a switch's SMA, a loopback) runs here, on the doorbell's thread, with no lock of
        // the device held (the network's delivery rule): the driver finds it on its next poll
        // instead of in a wait, and no thread is woken to run it. (A delivery the network
        // timed later than `now`, because another thread ran it at a later time meanwhile,
        // waits for the driver's next wait.) Virtual time keeps events to the one thread
        // that waits.
        if self.sched.clock().mode() == ClockMode::Real {
            self.sched.run_due_at(now);
        }
    }
}

/// A simulated ConnectX PCI function.
pub struct Mlx5 {
    inner: Arc<Inner>,
    /// What the fabric holds (weakly) to reach the device; owned here.
    sink: Arc<dyn PortSink>,
}

impl std::fmt::Debug for Mlx5 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mlx5")
            .field("device_id", &self.inner.cfg.device_id)
            .field("removed", &self.inner.down())
            .finish_non_exhaustive()
    }
}

impl Mlx5 {
    /// A ConnectX described by `cfg`, on the clock and event queue of `sched` (shared with the
    /// fabric it will be attached to).
    pub fn new(cfg: Mlx5Config, sched: Arc<Scheduler>) -> Result<Self, Mlx5Error> {
        cfg.validate().map_err(Mlx5Error::Config)?;
        let iommu = Arc::new(SimIommu::new());
        let ports = usize::from(cfg.ports);
        let inner = Arc::new_cyclic(|weak| Inner {
            config: ConfigSpace::new(
                MELLANOX_VENDOR,
                cfg.device_id,
                CLASS_INFINIBAND,
                iommu.clone(),
            ),
            irqs: IrqLines::new(&[(IrqKind::Msix, cfg.msix_vectors), (IrqKind::Req, 1)]),
            removed: AtomicBool::new(false),
            state: Mutex::new(State::new(cfg.clone(), iommu.clone(), sched.clone())),
            links: (0..ports).map(|_| RwLock::new(None)).collect(),
            port_dirty: (0..ports).map(|_| AtomicBool::new(false)).collect(),
            err_rqs: AtomicBool::new(false),
            engine: RwLock::new(None),
            weak: weak.clone(),
            cfg,
            sched,
            iommu,
        });
        let sink: Arc<dyn PortSink> = Arc::new(port::Sink(Arc::downgrade(&inner)));
        Ok(Mlx5 { inner, sink })
    }

    /// A default ConnectX-5 with its own scheduler in `mode`.
    pub fn with_clock(mode: ClockMode) -> Self {
        Self::new(Mlx5Config::default(), Arc::new(Scheduler::new(mode)))
            .expect("the default configuration is valid")
    }

    /// The configuration.
    pub fn mlx5_config(&self) -> &Mlx5Config {
        &self.inner.cfg
    }

    /// The scheduler (clock and timed events) the device runs on.
    pub fn scheduler(&self) -> &Arc<Scheduler> {
        &self.inner.sched
    }

    /// What a fabric delivers this device's packets and port changes to. The device owns
    /// it (a fabric keeps only a weak reference), so it lives as long as the device.
    pub fn sink(&self) -> Arc<dyn PortSink> {
        self.sink.clone()
    }

    /// Connects `port` (1-based) to a fabric through `link`, and reads the port's state and
    /// P_Key table from it.
    pub fn attach_port(&self, port: u8, link: Arc<dyn PortLink>) -> Result<(), Mlx5Error> {
        let slot = self.port_slot(port)?;
        *slot.write().unwrap_or_else(PoisonError::into_inner) = Some(link);
        self.inner.mark_dirty(port);
        self.inner.refresh_ports();
        Ok(())
    }

    /// Disconnects `port`: its sends are dropped (counted as [`DropReason::NoLink`]) and
    /// MAD_IFC on it gets no answer.
    pub fn detach_port(&self, port: u8) -> Result<(), Mlx5Error> {
        let slot = self.port_slot(port)?;
        *slot.write().unwrap_or_else(PoisonError::into_inner) = None;
        self.inner.mark_dirty(port);
        self.inner.refresh_ports();
        Ok(())
    }

    fn port_slot(&self, port: u8) -> Result<&RwLock<Option<Arc<dyn PortLink>>>, Mlx5Error> {
        port.checked_sub(1)
            .and_then(|i| self.inner.links.get(usize::from(i)))
            .ok_or(Mlx5Error::NoSuchPort {
                port,
                ports: self.inner.cfg.ports,
            })
    }

    /// Runs the device's send doorbells on a thread of its own from now until the returned
    /// handle is dropped, as a real HCA works beside the host instead of inside its doorbell
    /// write (see [`engine`]). Real clock only.
    pub fn run_on_own_thread(&self) -> Result<DeviceThread, DeviceThreadError> {
        engine::spawn(&self.inner)
    }

    /// Fault injection.
    pub fn faults(&self) -> Mlx5Faults<'_> {
        Mlx5Faults { inner: &self.inner }
    }

    /// A snapshot of the counters.
    pub fn counters(&self) -> Mlx5Counters {
        self.inner.with(|st| st.counters.snap.clone())
    }

    /// Pages the firmware holds (given by MANAGE_PAGES and not yet given back).
    pub fn pages_held(&self) -> u64 {
        self.inner.with(|st| st.pages.held())
    }

    /// Pages the firmware holds for one function (`function_id`, `ec_function`), every
    /// function's own pages included under (0, false).
    pub fn pages_held_for(&self, function_id: u16, ec_function: bool) -> u64 {
        self.inner
            .with(|st| st.pages.held_by((function_id, ec_function)))
    }

    /// The outstanding run-time page request (> 0 wanted, < 0 offered back).
    pub fn pages_requested(&self) -> i64 {
        self.inner.with(|st| st.pages.request)
    }

    /// Start (`true`) or stop recording every command the firmware fetches from the queue,
    /// with its slot and the commands it held at the time ([`FetchedCommand`]); starting
    /// again drops what was recorded. Read with [`Mlx5::take_command_record`].
    pub fn record_commands(&self, on: bool) {
        self.inner.with(|st| st.counters.record = on.then(Vec::new));
    }

    /// The commands fetched since recording started, oldest first; the record goes on, empty.
    pub fn take_command_record(&self) -> Vec<FetchedCommand> {
        self.inner.with(|st| {
            st.counters
                .record
                .as_mut()
                .map(std::mem::take)
                .unwrap_or_default()
        })
    }

    /// Command slots the device is working on (bit n = slot n), e.g. a command held behind a
    /// page request.
    pub fn pending_commands(&self) -> u32 {
        self.inner.with(|st| st.cmd.busy)
    }

    /// The state of QP `qpn`.
    pub fn qp_state(&self, qpn: u32) -> Option<QpState> {
        self.inner.with(|st| st.qps.get(&qpn).map(|q| q.state))
    }

    /// Every QP, by number.
    pub fn qps(&self) -> Vec<QpInfo> {
        self.inner.with(|st| {
            let mut v: Vec<QpInfo> = st
                .qps
                .values()
                .map(|q| QpInfo {
                    qpn: q.qpn,
                    st: q.st,
                    state: q.state,
                    port: q.port,
                })
                .collect();
            v.sort_by_key(|q| q.qpn);
            v
        })
    }

    /// How many EQs, CQs, QPs, UARs and PDs exist.
    pub fn resources(&self) -> ResourceCounts {
        self.inner.with(|st| ResourceCounts {
            eqs: st.eqs.len(),
            cqs: st.cqs.len(),
            qps: st.qps.len(),
            uars: st.uars.len(),
            pds: st.pds.len(),
        })
    }

    /// The device was removed ([`Mlx5Faults::remove`]).
    pub fn removed(&self) -> bool {
        self.inner.down()
    }
}

impl Device for Mlx5 {
    fn ids(&self) -> (u16, u16) {
        (MELLANOX_VENDOR, self.inner.cfg.device_id)
    }

    fn bars(&self) -> Vec<Bar> {
        vec![Bar {
            index: 0,
            size: BAR0_SIZE,
        }]
    }

    fn mmio_read(&self, bar: u8, offset: u64, data: &mut [u8]) {
        if bar == 0
            && offset
                .checked_add(data.len() as u64)
                .is_some_and(|e| e <= BAR0_SIZE)
        {
            self.inner.mmio_read(offset, data);
        } else {
            data.fill(0xff);
        }
    }

    fn mmio_write(&self, bar: u8, offset: u64, data: &[u8]) {
        if bar == 0
            && offset
                .checked_add(data.len() as u64)
                .is_some_and(|e| e <= BAR0_SIZE)
        {
            self.inner.mmio_write(offset, data);
        }
    }

    fn config(&self) -> &ConfigSpace {
        &self.inner.config
    }

    fn irqs(&self) -> &IrqLines {
        &self.inner.irqs
    }

    fn reset(&self) -> bool {
        if self.inner.down() {
            return false;
        }
        self.inner.uar_fence();
        self.inner.config.reset();
        self.inner.with(|st| {
            st.power_on();
            st.counters.snap.function_resets += 1;
        });
        for d in &self.inner.port_dirty {
            d.store(true, Ordering::SeqCst);
        }
        self.inner.refresh_ports();
        true
    }

    fn iommu(&self) -> &Arc<SimIommu> {
        &self.inner.iommu
    }

    fn clock(&self) -> &SimClock {
        self.inner.sched.clock()
    }

    fn run_until(&self, deadline: Duration) {
        self.inner.refresh_ports();
        if !self.inner.down() && self.inner.err_rqs.load(Ordering::Relaxed) {
            self.inner.with(|st| {
                if !st.health.fatal {
                    st.sweep_err_rqs();
                }
            });
        }
        self.inner.sched.run_until(deadline);
    }
}

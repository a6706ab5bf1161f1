//! The state one mlx5 function shares between its HCA object, its ports and the command
//! engine: register access, DMA pools, the command queue, EQs, firmware pages, health, the
//! device state (up, fatal, closed) and the progress loop that drives everything.
//!
//! There is no background thread: whoever waits on the device (a command, a port's `poll` or
//! `events`) runs [`Dev::progress`], which drains the EQs, reaps command completions, serves
//! page requests and polls health when due. Interrupts only make `wait` return sooner.
//!
//! Lock order (never taken the other way): `eqs` → `pages` → `cmd` → `stats`; a port's CQ →
//! its QPs; `ports` and each port's shared state are leaves. A QP error event takes the QP's
//! lock from the EQ dispatch, which holds no lock then; nothing holding a QP lock drives
//! the device.

use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError, RwLock, Weak};
use std::time::Duration;

use dma::{DmaLease, DmaPool, IovaAllocator, PoolConfig};
use firmware_cmds::mlx5::caps::HcaCaps;
use firmware_cmds::mlx5::eqe::{EqeEvent, EventType, port_change};
use firmware_cmds::mlx5::init_seg::FwRev;

use crate::backend::{DeviceBackend, DeviceBackendExt, IrqIndex};
use crate::error::DriverError;
use crate::eventfd::EventFd;
use crate::mmio::Mmio;
use crate::verbs::{DeviceEvent, HcaOptions, SpecialQp};

use super::cmd::{self, CmdState, CmdStats};
use super::eq::EqSet;
use super::health::{Health, Verdict};
use super::pages::{FwPages, PageRequest};
use super::uar::Uar;

const UP: u8 = 0;
const FATAL: u8 = 1;
const CLOSED: u8 = 2;

/// Counters of one function, for tests and `hca info`.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Mlx5Stats {
    /// The command queue.
    pub cmd: CmdStats,
    /// Firmware pages.
    pub pages: super::pages::PageStats,
    /// EQEs consumed.
    pub eqes: u64,
    /// EQEs of a type the EQ was not created for, naming an unknown queue, or that did not
    /// decode.
    pub bad_eqes: u64,
    /// CQEs rejected (bad opcode, QPN, WQE counter or byte count).
    pub bad_cqes: u64,
    /// Health polls done.
    pub health_polls: u64,
}

/// What one port shares with the progress loop: its events and what the EQs tell it.
#[derive(Debug, Default)]
pub(crate) struct PortShared {
    pub(crate) port_num: u8,
    pub(crate) events: Mutex<Vec<DeviceEvent>>,
    /// Its CQ (0 until created).
    pub(crate) cqn: AtomicU32,
    /// Completion events seen for its CQ: the arm sequence number.
    pub(crate) cq_events: AtomicU32,
    /// Special QP numbers (0 until created).
    pub(crate) qpn0: AtomicU32,
    pub(crate) qpn1: AtomicU32,
    /// The P_Key table changed: refresh the cache before using it.
    pub(crate) pkey_stale: AtomicBool,
    /// Held across the read-modify-write of the capability mask (the kernel's
    /// `cap_mask_mutex`).
    pub(crate) cap_mask_lock: Mutex<()>,
    /// The port object, set once it exists: a QP error event moves its QP to ERR.
    pub(crate) port: OnceLock<Weak<super::port::Mlx5Port>>,
}

impl PortShared {
    pub(crate) fn push(&self, ev: DeviceEvent) {
        self.events
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(ev);
    }
}

/// Facts learned at bring-up.
#[derive(Debug, Clone, Default)]
pub(crate) struct DevInfo {
    pub(crate) fw: Option<FwRev>,
    pub(crate) caps: HcaCaps,
    pub(crate) max_caps: HcaCaps,
    pub(crate) issi: u16,
    pub(crate) uar: u32,
    pub(crate) uar_base: u64,
    pub(crate) pd: u32,
    pub(crate) lkey: u32,
    pub(crate) node_guid: u64,
    /// The function is a BlueField's embedded CPU (`initializing` bit 23, read once the
    /// firmware is initialized, as `mlx5_read_embedded_cpu`): ENABLE/DISABLE_HCA, QUERY_PAGES
    /// and the startup GIVEs then name it with `embedded_cpu_function` (`mlx5_core_is_ecpf`).
    pub(crate) embedded_cpu: bool,
}

/// What the bring-up got to, so that teardown undoes exactly that.
#[derive(Debug, Default)]
pub(crate) struct Stage {
    pub(crate) cmd_up: bool,
    pub(crate) enabled: bool,
    pub(crate) initialized: bool,
    pub(crate) uar: Option<Uar>,
    pub(crate) pd: Option<u32>,
}

/// One mlx5 function.
pub(crate) struct Dev {
    pub(crate) backend: Arc<dyn DeviceBackend>,
    pub(crate) bar: Mmio,
    /// The driver's own DMA: rings, doorbell records, mailboxes, firmware pages.
    pub(crate) pool: DmaPool,
    /// MAD buffers, handed to the layer above.
    pub(crate) mad_pool: DmaPool,
    pub(crate) options: HcaOptions,
    cmd: Mutex<CmdState>,
    pages: Mutex<FwPages>,
    pub(crate) eqs: Mutex<EqSet>,
    /// The last drain pass stopped at its budget with EQEs left: a waiter must not block.
    eq_backlog: AtomicBool,
    health: Mutex<Health>,
    stats: Mutex<Mlx5Stats>,
    pub(crate) info: RwLock<DevInfo>,
    state: AtomicU8,
    entering_fatal: AtomicBool,
    fatal: Mutex<Option<String>>,
    pub(crate) ports: RwLock<Vec<Arc<PortShared>>>,
    /// MSI-X vector 0, which every EQ uses.
    pub(crate) irq: Mutex<Option<EventFd>>,
    /// The VFIO device request (removal) notification.
    pub(crate) req: Mutex<Option<EventFd>>,
    /// DMA the device may still reach (a destroy command failed): released after the quiesce.
    graveyard: Mutex<Vec<DmaLease>>,
    stage: Mutex<Stage>,
}

/// True when a command that failed with `err` may nevertheless have taken effect in the
/// firmware: anything but a clean failure status from the firmware, a command never sent
/// (closed, aborted in the fatal state: the device is then quiesced), or a request refused
/// before posting is counted as unknown. Memory it handed over must then stay leased until
/// the quiesce.
pub(crate) fn outcome_unknown(err: &DriverError) -> bool {
    !matches!(
        err,
        DriverError::CommandFailed { .. }
            | DriverError::CommandAborted { .. }
            | DriverError::Closed
    )
}

/// The init-segment areas the driver reads or writes (name, offset, bytes): each must be
/// inside BAR0, and inside its mapped areas when VFIO maps it sparsely.
const INIT_SEG_AREAS: [(&str, usize, usize); 10] = {
    use firmware_cmds::mlx5::health::HEALTH_BUFFER_LEN;
    use firmware_cmds::mlx5::init_seg::off;
    [
        ("fw_rev", off::FW_REV, 4),
        ("cmdif_rev_fw_sub", off::CMDIF_REV_FW_SUB, 4),
        ("cmdq_addr_h", off::CMDQ_ADDR_H, 4),
        ("cmdq_addr_l_sz", off::CMDQ_ADDR_L_SZ, 4),
        ("cmd_dbell", off::CMD_DBELL, 4),
        ("initializing", off::INITIALIZING, 4),
        ("health buffer", off::HEALTH, HEALTH_BUFFER_LEN),
        ("cmd_exec_to", off::CMD_EXEC_TO, 4),
        ("cmd_q_init_to", off::CMD_Q_INIT_TO, 4),
        ("health_counter", off::HEALTH_COUNTER, 4),
    ]
};

/// Refuse a BAR0 that does not hold every init-segment area the driver touches (too small,
/// or a sparse mapping that leaves some out), so that no register access can assert.
pub(crate) fn check_init_segment(bar: &Mmio) -> Result<(), DriverError> {
    let missing: Vec<String> = INIT_SEG_AREAS
        .iter()
        .filter(|&&(_, off, len)| {
            // Every 32-bit word of the area must be reachable.
            (0..len)
                .step_by(4)
                .any(|i| !bar.in_bounds((off + i) as u64, 4))
        })
        .map(|&(name, off, len)| format!("{name} at {off:#x}..{:#x}", off + len))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    let areas = bar.areas().map_or_else(String::new, |a| {
        let list: Vec<String> = a
            .iter()
            .map(|m| format!("{:#x}..{:#x}", m.offset, m.offset.saturating_add(m.size)))
            .collect();
        format!(" of which only {} is mapped", list.join(", "))
    });
    Err(DriverError::RegionNotMappable {
        index: crate::backend::region::BAR0,
        reason: format!(
            "BAR0 is {:#x} bytes{areas}, which leaves out init-segment registers the driver \
             needs ({}); this is not an mlx5 function, or its BAR is mapped wrongly",
            bar.len(),
            missing.join(", ")
        ),
    })
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Dev {
    /// Map BAR0 and set up the DMA pools; nothing is written to the device.
    pub(crate) fn new(
        backend: Arc<dyn DeviceBackend>,
        options: HcaOptions,
    ) -> Result<Self, DriverError> {
        let bar = backend.map_region(crate::backend::region::BAR0)?;
        check_init_segment(&bar)?;
        let mapper = backend.dma_mapper();
        let iova = Arc::new(Mutex::new(IovaAllocator::new(&mapper.iova_ranges())));
        let cfg = PoolConfig::new(options.lease_mode);
        let pool = DmaPool::with_iova(mapper.clone(), cfg, iova.clone())?;
        let mad_pool = DmaPool::with_iova(mapper, cfg, iova)?;
        Ok(Dev {
            backend,
            bar,
            pool,
            mad_pool,
            options,
            cmd: Mutex::new(CmdState::new()),
            pages: Mutex::new(FwPages::with_limit(options.max_firmware_pages)),
            eqs: Mutex::new(EqSet::default()),
            eq_backlog: AtomicBool::new(false),
            health: Mutex::new(Health::default()),
            stats: Mutex::new(Mlx5Stats::default()),
            info: RwLock::new(DevInfo::default()),
            state: AtomicU8::new(UP),
            entering_fatal: AtomicBool::new(false),
            fatal: Mutex::new(None),
            ports: RwLock::new(Vec::new()),
            irq: Mutex::new(None),
            req: Mutex::new(None),
            graveyard: Mutex::new(Vec::new()),
            stage: Mutex::new(Stage::default()),
        })
    }

    pub(crate) fn lock_cmd(&self) -> MutexGuard<'_, CmdState> {
        lock(&self.cmd)
    }

    pub(crate) fn lock_pages(&self) -> MutexGuard<'_, FwPages> {
        lock(&self.pages)
    }

    pub(crate) fn lock_stats(&self) -> MutexGuard<'_, Mlx5Stats> {
        lock(&self.stats)
    }

    pub(crate) fn lock_health(&self) -> MutexGuard<'_, Health> {
        lock(&self.health)
    }

    pub(crate) fn stage(&self) -> MutexGuard<'_, Stage> {
        lock(&self.stage)
    }

    /// True once `enter_fatal` ran (even after the HCA was closed).
    pub(crate) fn was_fatal(&self) -> bool {
        self.entering_fatal.load(Ordering::Acquire)
    }

    fn read_info(&self) -> std::sync::RwLockReadGuard<'_, DevInfo> {
        self.info.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// P_Key table entries (from the caps' `pkey_table_size`).
    pub(crate) fn pkey_table_len(&self) -> u16 {
        firmware_cmds::mlx5::caps::pkey_table_entries(self.read_info().caps.pkey_table_size())
            .map_or(0, |n| n as u16)
    }

    /// The function is an ECPF (see [`DevInfo::embedded_cpu`]).
    pub(crate) fn is_ecpf(&self) -> bool {
        self.read_info().embedded_cpu
    }

    /// Ports of the function.
    pub(crate) fn num_ports(&self) -> u32 {
        self.read_info().caps.num_ports()
    }

    /// The function is a virtualised one (port attributes come from the vport context).
    pub(crate) fn ib_virt(&self) -> bool {
        self.read_info().caps.ib_virt()
    }

    /// Keep `lease` until the device is quiesced: the device may still write it.
    pub(crate) fn bury(&self, lease: DmaLease) {
        lock(&self.graveyard).push(lease);
    }

    /// After a command that handed `leases` to the firmware failed with `err`: release them
    /// when the firmware cleanly refused the command (or it was never sent, or the device is
    /// already quiesced), bury them otherwise (timeout, bad token or output chain, an output
    /// that does not decode), since the firmware may already be using them.
    pub(crate) fn release_or_bury(
        &self,
        err: &DriverError,
        leases: impl IntoIterator<Item = DmaLease>,
    ) {
        if outcome_unknown(err) {
            let mut grave = lock(&self.graveyard);
            let before = grave.len();
            grave.extend(leases);
            tracing::warn!(
                leases = grave.len() - before,
                "keeping the memory of a command whose outcome is unknown until the device is \
                 quiesced: {err}"
            );
        }
    }

    /// Release what `bury` kept; only once bus mastering is off.
    pub(crate) fn empty_graveyard(&self) -> usize {
        let v = std::mem::take(&mut *lock(&self.graveyard));
        v.len()
    }

    /// A snapshot of the counters.
    pub(crate) fn stats(&self) -> Mlx5Stats {
        let mut s = *self.lock_stats();
        s.pages = self.lock_pages().stats;
        s.cmd.corrupt = self.lock_cmd().corrupt_completions();
        s
    }

    /// Why the device is unusable (fatal or closed), if it is.
    pub(crate) fn fatal_reason(&self) -> Option<String> {
        match self.state.load(Ordering::Acquire) {
            UP => None,
            CLOSED => Some("the HCA was closed".to_string()),
            _ => Some(
                lock(&self.fatal)
                    .clone()
                    .unwrap_or_else(|| "fatal error".to_string()),
            ),
        }
    }

    /// True once a fatal error was detected (and the device quiesced).
    pub(crate) fn is_fatal(&self) -> bool {
        self.state.load(Ordering::Acquire) != UP
    }

    /// Mark the device closed (after teardown); later calls fail with [`DriverError::Closed`].
    pub(crate) fn set_closed(&self) {
        self.state.store(CLOSED, Ordering::Release);
    }

    /// True after `set_closed`.
    pub(crate) fn is_closed(&self) -> bool {
        self.state.load(Ordering::Acquire) == CLOSED
    }

    /// Stop the device's DMA (`when` says why, for the log): bus mastering off, read back;
    /// a function that reads all-ones is gone and issues no DMA. When the bit cannot be
    /// cleared on a function that still answers (a failed VFIO config write), reset the
    /// function, which clears it. When that fails too, the device may still write anything
    /// it was handed: both pools are quarantined ([`DmaPool::quarantine`]) before anything
    /// is given back, so that no buffer it holds is reused or unmapped (DESIGN §4.3), and
    /// false is returned. The layer above sees it through [`crate::verbs::HcaPort::dma`].
    pub(crate) fn quiesce_dma(&self, when: &str) -> bool {
        let device = self.backend.describe();
        let off = self
            .backend
            .set_bus_master(false)
            .and_then(|()| self.backend.bus_master());
        let why = match off {
            Ok(false) | Err(DriverError::DeviceFatal { .. }) => return true,
            Ok(true) => "the bus-master bit still reads set after clearing it".to_string(),
            Err(e) => format!("turning bus mastering off failed: {e}"),
        };
        tracing::warn!(%device, "{when}: {why}; resetting the function instead");
        let failed = match self.backend.reset() {
            Ok(true) => match self.backend.bus_master() {
                Ok(false) | Err(DriverError::DeviceFatal { .. }) => {
                    tracing::warn!(%device, "{when}: function reset; its DMA is stopped");
                    return true;
                }
                Ok(true) => "bus mastering is still on after the reset".to_string(),
                Err(e) => format!("the command register cannot be read after the reset: {e}"),
            },
            Ok(false) => "the function offers no reset".to_string(),
            Err(e) => format!("the reset failed: {e}"),
        };
        tracing::error!(
            %device,
            "{when}: the device's DMA could not be stopped ({why}; {failed}): every buffer it \
             was handed is kept allocated and mapped (quarantined) instead of being released"
        );
        self.pool.quarantine();
        self.mad_pool.quarantine();
        false
    }

    /// Enter the fatal state once (`mlx5_enter_error_state`): quiesce the device (bus mastering
    /// off, else a function reset, else quarantine of every buffer: [`Dev::quiesce_dma`])
    /// first, so that nothing it was handed is reused while it may still write it, then mark
    /// the state (which makes commands fake their results and ports flush in software), then
    /// tell every port.
    pub(crate) fn enter_fatal(&self, reason: &str, removed: bool) {
        if self.entering_fatal.swap(true, Ordering::AcqRel) {
            return;
        }
        tracing::error!(device = %self.backend.describe(), "device fatal: {reason}");
        let reason = if self.quiesce_dma("after a fatal error") {
            reason.to_string()
        } else {
            format!(
                "{reason}; the device's DMA could not be stopped, so its buffers are kept \
                 (quarantined) for the life of the process"
            )
        };
        let reason = reason.as_str();
        *lock(&self.fatal) = Some(reason.to_string());
        if self.state.load(Ordering::Acquire) == UP {
            self.state.store(FATAL, Ordering::Release);
        }
        let ev = if removed {
            DeviceEvent::Removed
        } else {
            DeviceEvent::Fatal {
                reason: reason.to_string(),
            }
        };
        for p in self
            .ports
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
        {
            p.push(ev.clone());
        }
    }

    /// The port shared state for port `n` (from 1).
    pub(crate) fn port_shared(&self, n: u8) -> Option<Arc<PortShared>> {
        self.ports
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .find(|p| p.port_num == n)
            .cloned()
    }

    /// Route MSI-X vector 0 (every EQ's) and the device-request notification to eventfds,
    /// where the backend has them. Failures only cost latency: the driver never depends on
    /// interrupts.
    pub(crate) fn setup_irqs(&self) {
        let route = |index: IrqIndex| -> Option<EventFd> {
            let info = self.backend.irq_info(index).ok()?;
            if info.count == 0 || !info.eventfd {
                return None;
            }
            let fd = EventFd::new().ok()?;
            match self.backend.set_irqs(index, 0, &[&fd]) {
                Ok(()) => Some(fd),
                Err(e) => {
                    tracing::debug!(?index, "interrupts not routed: {e}");
                    None
                }
            }
        };
        *lock(&self.irq) = route(IrqIndex::Msix);
        *lock(&self.req) = route(IrqIndex::Req);
    }

    /// Stop the interrupts routed by `setup_irqs`.
    pub(crate) fn teardown_irqs(&self) {
        if lock(&self.irq).take().is_some() {
            let _ = self.backend.disable_irqs(IrqIndex::Msix);
        }
        if lock(&self.req).take().is_some() {
            let _ = self.backend.disable_irqs(IrqIndex::Req);
        }
    }

    /// Drive the device: take pending interrupts, check for removal and poll health when
    /// due, drain the EQs, reap command completions and serve page requests. Never blocks
    /// (EQ draining is skipped when another thread is at it).
    pub(crate) fn progress(&self) {
        if self.is_fatal() {
            return;
        }
        self.take_signals();
        self.progress_quiet();
    }

    /// Take the interrupt eventfds (a system call each): clears the vector's count so that a
    /// later wait blocks, and acts on a removal request. Returns whether an interrupt was
    /// signalled.
    pub(crate) fn take_signals(&self) -> bool {
        let irq = lock(&self.irq)
            .as_ref()
            .is_some_and(|fd| fd.take().unwrap_or(0) > 0);
        let removal_request = lock(&self.req)
            .as_ref()
            .is_some_and(|fd| fd.take().unwrap_or(0) > 0);
        if removal_request {
            self.enter_fatal(
                "the kernel asked for the device back (VFIO device request)",
                true,
            );
        }
        irq || removal_request
    }

    /// [`Dev::progress`] without the eventfds: health when due, EQs, commands, pages. What
    /// the CQ poll runs each time; the eventfds are taken by `progress` (device events) and
    /// before a wait ([`crate::verbs::HcaPort::wait`]), which is when their count matters.
    pub(crate) fn progress_quiet(&self) {
        if self.is_fatal() {
            return;
        }
        let now = self.backend.now();
        self.check_health(now);
        if self.is_fatal() {
            return;
        }
        self.drain_eqs();
        if self.is_fatal() {
            return;
        }
        {
            let mut st = self.lock_cmd();
            if st.watches_slots() {
                let mut stats = self.lock_stats();
                cmd::reap(&mut st, now, &mut stats.cmd);
            }
        }
        self.service_page_requests();
    }

    /// Poll health when due (and look for all-ones reads more often); enter the fatal state
    /// on a fatal verdict.
    fn check_health(&self, now: Duration) {
        let verdict = {
            let mut h = self.lock_health();
            h.check(&self.bar, now)
        };
        match verdict {
            None => {}
            Some(Verdict::Healthy) => self.lock_stats().health_polls += 1,
            Some(Verdict::Fatal(reason)) => {
                self.lock_stats().health_polls += 1;
                self.enter_fatal(&reason, false);
            }
            Some(Verdict::Removed(reason)) => {
                self.lock_stats().health_polls += 1;
                self.enter_fatal(&reason, true);
            }
        }
    }

    /// True when the last drain pass left EQEs for the next one: the caller should poll
    /// again rather than wait for an interrupt (the EQ was armed with EQEs already there).
    pub(crate) fn eq_backlog(&self) -> bool {
        self.eq_backlog.load(Ordering::Acquire)
    }

    /// One drain pass over the EQs (at most [`super::eq::EQ_POLLING_BUDGET`] EQEs from each)
    /// and act on what they say.
    fn drain_eqs(&self) {
        let Ok(mut eqs) = self.eqs.try_lock() else {
            return;
        };
        let mut found = Vec::new();
        let drained = eqs.poll_all(&self.bar, &mut found);
        drop(eqs);
        self.eq_backlog.store(drained.more, Ordering::Release);
        if found.is_empty() && drained.undecodable == 0 {
            return;
        }
        {
            let mut stats = self.lock_stats();
            stats.eqes += found.len() as u64 + drained.undecodable;
            stats.bad_eqes += drained.undecodable;
        }
        for (expected, eqe) in found {
            if !expected {
                self.lock_stats().bad_eqes += 1;
                tracing::warn!(event = %eqe.event_type, "EQE of a type its EQ was not created for");
                continue;
            }
            self.dispatch(eqe.event(), eqe.sub_type);
        }
    }

    fn dispatch(&self, ev: EqeEvent, sub_type: u8) {
        match ev {
            EqeEvent::Command { vector } => {
                let mut st = self.lock_cmd();
                let mut stats = self.lock_stats();
                cmd::note_event(&mut st, vector, &mut stats.cmd);
            }
            EqeEvent::PageRequest {
                ec_function,
                function_id,
                num_pages,
            } => self.lock_pages().request(PageRequest::from_eqe(
                ec_function,
                function_id,
                num_pages,
            )),
            EqeEvent::Completion { cqn } => {
                let ports = self.ports.read().unwrap_or_else(PoisonError::into_inner);
                if let Some(p) = ports.iter().find(|p| p.cqn.load(Ordering::Relaxed) == cqn) {
                    p.cq_events.fetch_add(1, Ordering::Relaxed);
                } else {
                    drop(ports);
                    self.lock_stats().bad_eqes += 1;
                    tracing::warn!(cqn, "completion event for an unknown CQ");
                }
            }
            EqeEvent::PortChange { port, .. } => {
                let Some(p) = self.port_shared(port) else {
                    self.lock_stats().bad_eqes += 1;
                    tracing::warn!(port, "port change event for a port that does not exist");
                    return;
                };
                let ev = match sub_type {
                    port_change::ACTIVE => Some(DeviceEvent::PortActive(port)),
                    port_change::DOWN | port_change::INITIALIZED => {
                        Some(DeviceEvent::PortError(port))
                    }
                    port_change::LID => Some(DeviceEvent::LidChange(port)),
                    port_change::PKEY => {
                        p.pkey_stale.store(true, Ordering::Release);
                        Some(DeviceEvent::PkeyChange(port))
                    }
                    port_change::CLIENT_REREG => Some(DeviceEvent::ClientReregister(port)),
                    other => {
                        tracing::debug!(port, sub_type = other, "port change ignored");
                        None
                    }
                };
                if let Some(ev) = ev {
                    p.push(ev);
                }
            }
            EqeEvent::CqError { cqn, syndrome } => {
                let ours = self
                    .ports
                    .read()
                    .unwrap_or_else(PoisonError::into_inner)
                    .iter()
                    .any(|p| p.cqn.load(Ordering::Relaxed) == cqn);
                if ours {
                    // An overrun CQ has lost completions: exactly-once cannot be kept.
                    self.enter_fatal(
                        &format!("CQ {cqn:#x} error, syndrome {syndrome:#04x}"),
                        false,
                    );
                } else {
                    self.lock_stats().bad_eqes += 1;
                }
            }
            EqeEvent::QueueEvent { event, number, .. } => {
                let fatal = matches!(
                    event,
                    EventType::WQ_CATAS_ERROR
                        | EventType::WQ_INVAL_REQ_ERROR
                        | EventType::WQ_ACCESS_ERROR
                );
                let ports = self.ports.read().unwrap_or_else(PoisonError::into_inner);
                let hit = ports.iter().find_map(|p| {
                    if p.qpn0.load(Ordering::Relaxed) == number && number != 0 {
                        Some((p.clone(), SpecialQp::Smi))
                    } else if p.qpn1.load(Ordering::Relaxed) == number && number != 0 {
                        Some((p.clone(), SpecialQp::Gsi))
                    } else {
                        None
                    }
                });
                drop(ports);
                match hit {
                    Some((p, qp)) if fatal => {
                        tracing::error!(port = p.port_num, ?qp, event = %event, "QP error event");
                        // The QP is in ERR in the device: posts are refused from now on, not
                        // accepted until an error CQE is polled. The MAD layer is told once,
                        // by whichever of this and the poll moved it there.
                        let moved = p
                            .port
                            .get()
                            .and_then(Weak::upgrade)
                            .is_none_or(|port| port.qp_error_event(qp));
                        if moved {
                            p.push(DeviceEvent::QpFatal {
                                port: p.port_num,
                                qp,
                            });
                        }
                    }
                    Some((_, qp)) => tracing::debug!(?qp, event = %event, "QP event"),
                    None => {
                        self.lock_stats().bad_eqes += 1;
                        tracing::warn!(number, event = %event, "event for an unknown queue");
                    }
                }
            }
            EqeEvent::Other { event, .. } => {
                tracing::debug!(event = %event, "async event ignored");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use firmware_cmds::mlx5::Opcode;
    use firmware_cmds::mlx5::cmd::{CmdStatus, DeliveryStatus};

    use crate::backend::MmapArea;
    use crate::emulated::EmulatedBackend;
    use crate::mlx5::testutil::Recorder;
    use crate::mmio::Mmio;

    fn open_with_bar0(len: u64) -> Result<Dev, DriverError> {
        let model = Arc::new(Recorder {
            bar0_len: Some(len),
            ..Recorder::default()
        });
        let backend = Arc::new(EmulatedBackend::new(model, "test"));
        Dev::new(backend, HcaOptions::default())
    }

    /// A function whose link went down behind vfio-pci reads 0xfbff in its command register
    /// (INTx disable comes from the kernel's copy): it is gone, so its DMA is stopped and the
    /// fatal path gives the buffers back instead of quarantining them.
    #[test]
    fn a_gone_function_behind_vfio_is_quiesced_without_quarantine() {
        let model = Arc::new(Recorder {
            bar0_len: Some(0x1014),
            config_all_ones: true,
            config_vfio_merge: true,
            ..Recorder::default()
        });
        let backend = Arc::new(EmulatedBackend::new(model.clone(), "test"));
        let dev = Dev::new(backend, HcaOptions::default()).unwrap();
        dev.enter_fatal("link down", true);
        assert!(dev.is_fatal());
        assert!(
            !dev.pool.is_quarantined(),
            "the driver pool is not quarantined"
        );
        assert!(
            !dev.mad_pool.is_quarantined(),
            "the MAD pool is not quarantined"
        );
        assert!(
            model.config_writes.lock().unwrap().is_empty(),
            "nothing is written to a gone function"
        );
    }

    #[test]
    fn opening_an_hca_whose_bar0_is_too_small_fails_without_a_panic() {
        let model = Arc::new(Recorder {
            bar0_len: Some(0x100),
            ..Recorder::default()
        });
        let backend = Arc::new(EmulatedBackend::new(model, "test"));
        let err = crate::mlx5::Mlx5Hca::open(backend, HcaOptions::default())
            .err()
            .expect("no bring-up on a 256-byte BAR0");
        assert!(
            matches!(err, DriverError::RegionNotMappable { index: 0, .. }),
            "{err:?}"
        );
    }

    #[test]
    fn a_bar0_too_small_for_the_init_segment_is_a_typed_error() {
        for len in [0x100, 0x1000, 0x1010] {
            let err = open_with_bar0(len)
                .err()
                .expect("a BAR0 that small is refused");
            match &err {
                DriverError::RegionNotMappable { index: 0, reason } => {
                    assert!(reason.contains(&format!("{len:#x}")), "{reason}");
                }
                other => panic!("{len:#x}: {other:?}"),
            }
        }
        // Exactly the registers the driver touches fit.
        assert!(open_with_bar0(0x1014).is_ok());
    }

    #[test]
    fn a_sparse_bar0_without_its_first_page_is_a_typed_error() {
        let len = 0x4000usize;
        let map = memmap2::MmapMut::map_anon(len).unwrap();
        let base = std::ptr::NonNull::new(map.as_ptr().cast_mut()).unwrap();
        let areas: Arc<[MmapArea]> = Arc::new([MmapArea {
            offset: 0x1000,
            size: 0x3000,
        }]);
        // SAFETY: the area lies inside the anonymous mapping, which the Arc keeps alive;
        // nothing makes references into it.
        let bar = unsafe { Mmio::mapped_sparse(base, len as u64, areas, Arc::new(map)) };
        let err = check_init_segment(&bar).unwrap_err();
        match &err {
            DriverError::RegionNotMappable { index: 0, reason } => {
                assert!(reason.contains("0x1fc"), "{reason}");
                assert!(reason.contains("mapped"), "{reason}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn only_a_clean_refusal_or_an_unsent_command_releases_what_it_handed_over() {
        let op = Opcode::CREATE_CQ;
        let known = [
            DriverError::CommandFailed {
                opcode: op,
                op_mod: 0,
                status: CmdStatus::BAD_PARAM_ERR,
                syndrome: 1,
            },
            DriverError::CommandAborted {
                opcode: op,
                reason: "fatal".into(),
            },
            DriverError::Closed,
        ];
        for e in &known {
            assert!(!outcome_unknown(e), "{e}");
        }
        let unknown = [
            DriverError::CommandTimeout { opcode: op, ms: 1 },
            DriverError::BadDeviceValue {
                what: "command queue entry",
                detail: "token".into(),
            },
            DriverError::CommandDelivery {
                opcode: op,
                status: DeliveryStatus::TOKEN_ERR,
            },
            DriverError::Layout(firmware_cmds::Error::Invalid {
                what: "output",
                reason: "short",
            }),
        ];
        for e in &unknown {
            assert!(outcome_unknown(e), "{e}");
        }
    }
}

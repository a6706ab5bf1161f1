//! Bring-up and teardown in the kernel's order (`mlx5_function_setup`, `mlx5_load`,
//! `mlx5_function_teardown`; reference `hca-hardware.md` §5.3), with its timeouts:
//!
//! 1. wait for `initializing` to clear (FW_PRE_INIT, 120 s, polled every 2 ms);
//! 2. bus mastering on, command queue set up, timeouts read from the init segment;
//! 3. wait for `initializing` again (FW_INIT, 2 s or `cmd_q_init_to`, at most 120 s; the
//!    command timeout from `cmd_exec_to`, at most 300 s); health polling starts;
//! 4. the embedded-CPU bit of `initializing` read; ENABLE_HCA (with `embedded_cpu_function`
//!    on an ECPF, as QUERY_PAGES, the startup GIVEs and DISABLE_HCA); QUERY_ISSI / SET_ISSI
//!    (1 when offered, else 0);
//! 5. QUERY_PAGES boot → MANAGE_PAGES GIVE;
//! 6. ACCESS_REG HOST_ENDIANNESS (physical functions);
//! 7. QUERY_HCA_CAP (max, current) → SET_HCA_CAP;
//! 8. QUERY_PAGES init → MANAGE_PAGES GIVE; INIT_HCA; QUERY_HCA_CAP current;
//! 9. interrupts, ALLOC_UAR, the command EQ (commands switch to events), the async and
//!    completion EQs; QUERY_SPECIAL_CONTEXTS (the reserved lkey), ALLOC_PD;
//! 10. per port: CQ, the P_Key cache, QP0 (when the function has an SMI) and QP1 to RTS on
//!     the index of the default P_Key.
//!
//! Teardown undoes whatever exists, in reverse: QPs to RESET and destroyed (their outstanding
//! work requests flushed in software), CQs, EQs (commands back to polling before the command
//! EQ goes), the page requests still queued served and no new one started, PD, UAR,
//! TEARDOWN_HCA, every page reclaimed, DISABLE_HCA; then bus mastering off, and only then the
//! queue memory, mailboxes and any page the firmware kept are released.

use std::sync::{Arc, PoisonError};
use std::time::Duration;

use dma::base_page_size;
use firmware_cmds::mlx5::caps::{CapType, HcaCaps, pkey_table_code, port_type};
use firmware_cmds::mlx5::init_seg::{self, FwRev, Initializing};
use firmware_cmds::mlx5::ops::access_reg::AccessReg;
use firmware_cmds::mlx5::ops::hca::{DisableHca, EnableHca, InitHca, TeardownHca, TeardownProfile};
use firmware_cmds::mlx5::ops::hca_cap::{CapMode, QueryHcaCap, SetHcaCap};
use firmware_cmds::mlx5::ops::issi::{QueryIssi, SetIssi};
use firmware_cmds::mlx5::ops::pages::PagesKind;
use firmware_cmds::mlx5::ops::pd::{AllocPd, DeallocPd};
use firmware_cmds::mlx5::ops::special_contexts::QuerySpecialContexts;
use firmware_cmds::mlx5::ops::vport::QueryHcaVportContext;
use firmware_cmds::mlx5::timeouts::{self, Timeout};

use crate::backend::{DeviceBackend, DeviceBackendExt};
use crate::error::DriverError;
use crate::pci::{self, FunctionKind};
use crate::verbs::{DeviceEvent, SpecialQp};

use super::cmd::{self, CmdMode};
use super::cq::Cq;
use super::dev::{Dev, PortShared};
use super::eq::{self, ASYNC_EVENTS, Eq, NUM_ASYNC_EQE, NUM_COMP_EQE};
use super::port::Mlx5Port;
use super::qp::{Geometry, Qp, QpParams};
use super::uar::{BfReg, Uar};
use super::wait::ms;

/// Most ports the driver accepts (ConnectX functions have one or two).
const MAX_PORTS: u32 = 4;

/// The host's cache line, for `cache_line_128byte`.
const CACHE_LINE: usize = if cfg!(target_arch = "powerpc64") {
    128
} else {
    64
};

/// The largest `log_max_qp` the kernel's default profile asks for.
const LOG_MAX_QP: u32 = 18;

/// Poll `initializing` until bit 31 clears (`wait_fw_init`), every FW_PRE_INIT_WAIT, warning
/// every FW_PRE_INIT_WARN_MESSAGE_INTERVAL.
fn wait_fw_init(dev: &Dev, timeout: Duration, what: &str) -> Result<(), DriverError> {
    let backend = dev.backend.as_ref();
    let start = backend.now();
    let deadline = start.saturating_add(timeout);
    let step = Timeout::FwPreInitWait.default_duration();
    let warn_every = Timeout::FwPreInitWarnMessageInterval.default_duration();
    let mut next_warn = start.saturating_add(warn_every);
    loop {
        let reg = dev.bar.read32(init_seg::off::INITIALIZING as u64);
        if reg == u32::MAX {
            return Err(DriverError::DeviceFatal {
                reason: "the init segment reads all-ones: the device is gone or its PCI link is \
                         down"
                    .into(),
            });
        }
        if !Initializing::decode(reg).initializing {
            return Ok(());
        }
        let now = backend.now();
        if now >= deadline {
            return Err(DriverError::DeviceTimeout {
                what: format!("the firmware to finish {what} (initializing bit still set)"),
                ms: ms(timeout),
            });
        }
        if now >= next_warn {
            tracing::warn!(
                waited_ms = ms(now.saturating_sub(start)),
                "firmware still {what}"
            );
            next_warn = now.saturating_add(warn_every);
        }
        backend.wait(now.saturating_add(step).min(deadline));
    }
}

/// Longest wait for `initializing` after the command queue is set up: FW_PRE_INIT's 120 s.
/// Health polling starts only after this wait, so a longer one would hang bring-up on a
/// firmware that never clears the bit.
const FW_INIT_CEILING: Duration = Duration::from_secs(120);

/// Longest command timeout accepted from the init segment: five times the kernel's 60 s
/// default. The register's hour unit allows about 120 years.
const CMD_TIMEOUT_CEILING: Duration = Duration::from_secs(300);

/// The FW_INIT wait and the command timeout (None: keep the default) from the init segment's
/// `cmd_exec_to` and `cmd_q_init_to`, clamped to [`FW_INIT_CEILING`] and
/// [`CMD_TIMEOUT_CEILING`] (logged when a clamp applies).
fn iseg_timeouts(exec_to: u32, q_init_to: u32) -> (Duration, Option<Duration>) {
    let (fw_init_ms, cmd_ms) = timeouts::from_iseg(exec_to, q_init_to);
    let clamp = |what: &str, ms: u64, ceiling: Duration| {
        let d = Duration::from_millis(ms);
        if d > ceiling {
            tracing::warn!(
                asked_ms = ms,
                used_ms = super::wait::ms(ceiling),
                "the init segment's {what} timeout is beyond the driver's ceiling; clamped"
            );
            ceiling
        } else {
            d
        }
    };
    let fw_init =
        clamp("FW_INIT (cmd_q_init_to)", fw_init_ms, FW_INIT_CEILING).max(Duration::from_millis(1));
    let cmd = (cmd_ms > 0).then(|| clamp("command (cmd_exec_to)", cmd_ms, CMD_TIMEOUT_CEILING));
    (fw_init, cmd)
}

fn random_owner_id() -> [u32; 4] {
    let mut b = [0u8; 16];
    // SAFETY: getrandom writes at most `b.len()` bytes into the local buffer.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    if n != 16 {
        tracing::debug!("getrandom failed; sw_owner_id from the clock");
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        b.copy_from_slice(&t.to_le_bytes());
    }
    let w = |i: usize| u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
    [w(0), w(4), w(8), w(12)]
}

/// QUERY_HCA_CAP max and current, then SET_HCA_CAP with the kernel's changes
/// (`handle_hca_cap`). Returns the max page.
fn set_hca_caps(dev: &Dev) -> Result<HcaCaps, DriverError> {
    let max = dev.exec(&QueryHcaCap::general(CapMode::Max))?.caps;
    let cur = dev.exec(&QueryHcaCap::general(CapMode::Current))?.caps;
    let mut set = cur;
    set.set_pkey_table_size(pkey_table_code(128).unwrap_or(0))?;
    set.set_log_max_qp(LOG_MAX_QP.min(max.log_max_qp()))?;
    set.set_cmdif_checksum(0)?;
    let page = base_page_size();
    set.set_uar_4k(max.uar_4k() && page > 4096)?;
    set.set_log_uar_page_sz(page.trailing_zeros().saturating_sub(12))?;
    if max.cache_line_128byte() {
        set.set_cache_line_128byte(CACHE_LINE >= 128)?;
    }
    dev.exec(&SetHcaCap {
        cap_type: CapType::GENERAL,
        other_function: false,
        function_id: 0,
        caps: set,
    })?;
    Ok(max)
}

/// ISSI 1 when the firmware offers it, 0 otherwise (`mlx5_core_set_issi`): a
/// `supported_issi_dw0` of 0 means ISSI 0 too (firmware that predates the field), as the
/// kernel's `sup_issi & 1 || !sup_issi`.
fn negotiate_issi(dev: &Dev) -> Result<u16, DriverError> {
    let q = match dev.exec(&QueryIssi) {
        Ok(q) => q,
        Err(DriverError::CommandFailed { status, .. }) => {
            tracing::debug!(%status, "QUERY_ISSI failed: ISSI 0");
            return Ok(0);
        }
        Err(e) => return Err(e),
    };
    if q.supports(1) {
        dev.exec(&SetIssi { current_issi: 1 })?;
        Ok(1)
    } else if q.supports(0) || q.supported_issi_dw0 == 0 {
        Ok(0)
    } else {
        Err(DriverError::DeviceUnsupported {
            what: format!("ISSI 0 or 1 (it offers {:#x})", q.supported_issi_dw0),
            hint: "the driver speaks ISSI 0 and 1 only".into(),
        })
    }
}

/// Bring the function up and create its ports. On failure everything done so far is undone.
pub(crate) fn bring_up(dev: &Arc<Dev>) -> Result<Vec<Arc<Mlx5Port>>, DriverError> {
    let started = dev.backend.now();
    let mut ports = Vec::new();
    match bring_up_steps(dev, &mut ports) {
        Ok(()) => {
            tracing::info!(
                device = %dev.backend.describe(),
                ms = ms(dev.backend.now().saturating_sub(started)),
                "mlx5 HCA up"
            );
            Ok(ports)
        }
        Err(e) => {
            tracing::error!("bring-up failed: {e}");
            if let Err(t) = teardown(dev, &ports) {
                tracing::warn!("teardown after a failed bring-up: {t}");
            }
            Err(e)
        }
    }
}

fn bring_up_steps(dev: &Arc<Dev>, ports: &mut Vec<Arc<Mlx5Port>>) -> Result<(), DriverError> {
    wait_fw_init(
        dev,
        Timeout::FwPreInit.default_duration(),
        "pre-initializing",
    )?;
    dev.backend.set_bus_master(true)?;
    {
        let mut st = dev.lock_cmd();
        cmd::init(&mut st, &dev.bar, &dev.pool)?;
        let exec_to = dev.bar.read32(init_seg::off::CMD_EXEC_TO as u64);
        let q_init_to = dev.bar.read32(init_seg::off::CMD_Q_INIT_TO as u64);
        let (fw_init, cmd) = iseg_timeouts(exec_to, q_init_to);
        if let Some(cmd) = cmd {
            st.timeout = cmd;
        }
        drop(st);
        dev.stage().cmd_up = true;
        wait_fw_init(dev, fw_init, "initializing")?;
    }
    let embedded_cpu =
        Initializing::decode(dev.bar.read32(init_seg::off::INITIALIZING as u64)).embedded_cpu;
    dev.info
        .write()
        .unwrap_or_else(PoisonError::into_inner)
        .embedded_cpu = embedded_cpu;
    if embedded_cpu {
        tracing::info!("the function is an embedded CPU function (ECPF)");
    }
    dev.lock_health().start(dev.backend.now());

    dev.exec(&EnableHca {
        function_id: 0,
        embedded_cpu_function: embedded_cpu,
    })?;
    dev.stage().enabled = true;
    let issi = negotiate_issi(dev)?;
    dev.give_startup_pages(PagesKind::Boot)?;
    let is_pf = pci::lookup(dev.backend.pci_id()).is_none_or(|k| k.kind == FunctionKind::Pf);
    if is_pf {
        dev.exec(&AccessReg::host_endianness(cfg!(target_endian = "big")))?;
    }
    let max_caps = set_hca_caps(dev)?;
    dev.give_startup_pages(PagesKind::Init)?;
    let owner = if max_caps.sw_owner_id() {
        random_owner_id()
    } else {
        [0; 4]
    };
    dev.exec(&InitHca { sw_owner_id: owner })?;
    dev.stage().initialized = true;
    let caps = dev.exec(&QueryHcaCap::general(CapMode::Current))?.caps;
    if caps.port_type() != port_type::IB {
        return Err(DriverError::DeviceUnsupported {
            what: "InfiniBand on this function (its port type is Ethernet)".into(),
            hint: "the MAD stack needs an InfiniBand port; switch the port with mlxconfig \
                   LINK_TYPE_P1=1 or use another function"
                .into(),
        });
    }
    let num_ports = caps.num_ports();
    if num_ports == 0 || num_ports > MAX_PORTS {
        return Err(DriverError::BadDeviceValue {
            what: "HCA capabilities",
            detail: format!("num_ports {num_ports} (expected 1 to {MAX_PORTS})"),
        });
    }
    {
        let mut info = dev.info.write().unwrap_or_else(PoisonError::into_inner);
        info.fw = Some(FwRev::from_regs(
            dev.bar.read32(init_seg::off::FW_REV as u64),
            dev.bar.read32(init_seg::off::CMDIF_REV_FW_SUB as u64),
        ));
        info.caps = caps.clone();
        info.max_caps = max_caps;
        info.issi = issi;
    }

    dev.setup_irqs();
    let uar = Uar::alloc(dev, caps.uar_4k(), base_page_size())?;
    dev.stage().uar = Some(uar);
    {
        let mut info = dev.info.write().unwrap_or_else(PoisonError::into_inner);
        info.uar = uar.index;
        info.uar_base = uar.base;
    }
    let cmd_eq = Eq::create(
        dev,
        eq::cmd_eq_wanted(),
        &[firmware_cmds::mlx5::eqe::EventType::CMD],
        false,
        uar.index,
        uar.base,
    )?;
    dev.eqs.lock().unwrap_or_else(PoisonError::into_inner).cmd = Some(cmd_eq);
    dev.lock_cmd().mode = CmdMode::Events;
    let async_eq = Eq::create(dev, NUM_ASYNC_EQE, ASYNC_EVENTS, false, uar.index, uar.base)?;
    dev.eqs
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .async_eq = Some(async_eq);
    let comp_eq = Eq::create(dev, NUM_COMP_EQE, &[], true, uar.index, uar.base)?;
    let comp_eqn = comp_eq.eqn;
    dev.eqs.lock().unwrap_or_else(PoisonError::into_inner).comp = Some(comp_eq);

    let special = dev.exec(&QuerySpecialContexts)?;
    let pd = dev.exec(&AllocPd)?.pd;
    dev.stage().pd = Some(pd);
    {
        let mut info = dev.info.write().unwrap_or_else(PoisonError::into_inner);
        info.lkey = special.resd_lkey;
        info.pd = pd;
    }

    for n in 1..=num_ports as u8 {
        create_port(dev, n, &caps, uar, comp_eqn, pd, special.resd_lkey, ports)?;
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn create_port(
    dev: &Arc<Dev>,
    n: u8,
    caps: &HcaCaps,
    uar: Uar,
    comp_eqn: u8,
    pd: u32,
    lkey: u32,
    ports: &mut Vec<Arc<Mlx5Port>>,
) -> Result<(), DriverError> {
    let shared = Arc::new(PortShared {
        port_num: n,
        ..PortShared::default()
    });
    dev.ports
        .write()
        .unwrap_or_else(PoisonError::into_inner)
        .push(shared.clone());
    let has_smi = if caps.ib_virt() {
        dev.exec(&QueryHcaVportContext {
            other_vport: false,
            port_num: if caps.num_ports() > 1 { n } else { 0 },
            vport_number: 0,
        })?
        .has_smi
    } else {
        true
    };
    let geo = Geometry::new(
        dev.options.send_depth,
        dev.options.recv_depth,
        caps.log_max_qp_sz(),
    )?;
    let mut port = Mlx5Port::new(dev.clone(), shared.clone(), has_smi);
    port.depths = (geo.sq_depth, geo.rq_cnt);
    let port = Arc::new(port);
    let _ = shared.port.set(Arc::downgrade(&port));
    ports.push(port.clone());

    let qps = 1 + u32::from(has_smi);
    let cq = Cq::create(
        dev,
        (geo.sq_depth + geo.rq_cnt) * qps,
        comp_eqn,
        uar.index,
        uar.base,
        caps.log_max_cq_sz(),
    )?;
    shared
        .cqn
        .store(cq.cqn, std::sync::atomic::Ordering::Relaxed);
    *port.cq.lock().unwrap_or_else(PoisonError::into_inner) = Some(cq);

    // The P_Key table first: the special QPs take the index of the default P_Key, as
    // `ib_mad_port_start` does with the cache the core filled before the MAD layer started.
    port.refresh_pkeys();
    let pkey_index = port.default_pkey_index();
    let ts_format = super::qp::default_ts_format(caps);
    let user_index = super::qp::default_user_index(caps);
    for (i, kind) in [SpecialQp::Smi, SpecialQp::Gsi].into_iter().enumerate() {
        if kind == SpecialQp::Smi && !has_smi {
            continue;
        }
        let bfreg = (usize::from(n - 1) * 2 + i) % firmware_cmds::mlx5::doorbell::BFREGS_PER_UAR;
        let qp = Qp::create(
            dev,
            &QpParams {
                kind,
                port: n,
                geo,
                cqn: shared.cqn.load(std::sync::atomic::Ordering::Relaxed),
                pd,
                uar: uar.index,
                bf: BfReg::new(uar.base, bfreg, caps.log_bf_reg_size()),
                lkey,
                ts_format,
                user_index,
                pkey_index,
            },
        )?;
        let slot = match kind {
            SpecialQp::Smi => &shared.qpn0,
            SpecialQp::Gsi => &shared.qpn1,
        };
        slot.store(qp.qpn, std::sync::atomic::Ordering::Relaxed);
        *port.qps[i].lock().unwrap_or_else(PoisonError::into_inner) = Some(qp);
    }
    if let Some(cq) = port
        .cq
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .as_mut()
    {
        cq.arm(&dev.bar, 0);
    }
    Ok(())
}

/// After a teardown that left state in the device (see `teardown`): reset the function
/// through the backend, so that the firmware forgets this session's memory before a new
/// session's IOVA allocator hands the same addresses out again; when the backend has no
/// reset (or it fails), mark the backend so that the next bring-up is refused with
/// [`DriverError::NeedsReset`]. Called after the quiesce and after every lease was released.
fn reset_after_unclean_close(dev: &Dev, reason: &str) {
    match dev.backend.reset() {
        Ok(true) => {
            tracing::warn!(
                device = %dev.backend.describe(),
                "function reset at close: {reason}"
            );
            dev.backend.mark_needs_reset(None);
        }
        Ok(false) => {
            tracing::error!(
                device = %dev.backend.describe(),
                "the function needs a reset it does not offer: {reason}"
            );
            dev.backend.mark_needs_reset(Some(reason.to_string()));
        }
        Err(e) => {
            tracing::error!(
                device = %dev.backend.describe(),
                "function reset at close failed ({e}): {reason}"
            );
            dev.backend
                .mark_needs_reset(Some(format!("{reason}; the reset at close failed: {e}")));
        }
    }
}

/// Refuse to bring up a function an earlier session left needing a reset.
pub(crate) fn check_no_reset_needed(backend: &dyn DeviceBackend) -> Result<(), DriverError> {
    match backend.needs_reset() {
        Some(reason) => Err(DriverError::NeedsReset {
            device: backend.describe(),
            reason,
        }),
        None => Ok(()),
    }
}

/// Undo everything that exists, in reverse order; returns the first error (the rest is still
/// done). Every lease is released by the time it returns, after bus mastering is off.
pub(crate) fn teardown(dev: &Arc<Dev>, ports: &[Arc<Mlx5Port>]) -> Result<(), DriverError> {
    let fatal_before = dev.was_fatal();
    let mut first: Option<DriverError> = None;
    let mut note = |what: &str, r: Result<(), DriverError>| {
        if let Err(e) = r {
            tracing::warn!("teardown: {what}: {e}");
            first.get_or_insert(e);
        }
    };

    for port in ports {
        for i in 0..port.qps.len() {
            let Some(mut qp) = port.take_qp_for_close(i) else {
                continue;
            };
            if let Err(e) = qp.reset(dev) {
                // The device may still use the rings: quiesce it before anything is flushed.
                dev.enter_fatal(
                    &format!("QP {:#x} could not be reset at close: {e}", qp.qpn),
                    false,
                );
                note("2RST", Err(e));
            }
            let mut wcs = Vec::new();
            qp.flush(&mut wcs, usize::MAX);
            port.flushed
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .extend(wcs);
            note("DESTROY_QP", qp.destroy(dev));
        }
        // The QPs are reset (the device no longer touches their buffers) and their work is in
        // `flushed`: the layer above may now end everything it has outstanding.
        port.shared.push(DeviceEvent::Closed);
        let cq = port
            .cq
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(cq) = cq {
            note("DESTROY_CQ", cq.destroy(dev));
        }
    }

    let (comp, async_eq) = {
        let mut eqs = dev.eqs.lock().unwrap_or_else(PoisonError::into_inner);
        (eqs.comp.take(), eqs.async_eq.take())
    };
    for e in [comp, async_eq].into_iter().flatten() {
        note("DESTROY_EQ", e.destroy(dev));
    }
    dev.lock_cmd().mode = CmdMode::Polling;
    let cmd_eq = dev
        .eqs
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .cmd
        .take();
    if let Some(e) = cmd_eq {
        note("DESTROY_EQ", e.destroy(dev));
    }
    // No page request can arrive any more: serve those queued, start nothing after
    // (`mlx5_unload`: `mlx5_eq_table_destroy`, then `mlx5_pagealloc_stop`, all before
    // `mlx5_function_teardown` sends TEARDOWN_HCA).
    dev.stop_page_requests();

    let (pd, uar, initialized, enabled, cmd_up) = {
        let mut s = dev.stage();
        (
            s.pd.take(),
            s.uar.take(),
            std::mem::take(&mut s.initialized),
            std::mem::take(&mut s.enabled),
            std::mem::take(&mut s.cmd_up),
        )
    };
    if let Some(pd) = pd {
        note("DEALLOC_PD", dev.exec(&DeallocPd { pd }).map(drop));
    }
    if let Some(uar) = uar {
        note("DEALLOC_UAR", uar.free(dev));
    }
    // What the device may still hold of this session after it: reasons to reset it.
    let mut left_behind: Vec<String> = Vec::new();
    if initialized {
        if let Err(e) = dev.exec(&TeardownHca {
            profile: TeardownProfile::GracefulClose,
        }) {
            // The kernel skips the rest of its cleanup; we quiesce and release locally.
            dev.enter_fatal(&format!("TEARDOWN_HCA failed: {e}"), false);
            left_behind.push(format!("TEARDOWN_HCA failed ({e})"));
            note("TEARDOWN_HCA", Err(e));
        }
    }
    if enabled || initialized {
        if let Err(e) = dev.reclaim_all_pages() {
            note("page reclaim", Err(e));
        }
    }
    if enabled {
        let disable = DisableHca {
            function_id: 0,
            embedded_cpu_function: dev.is_ecpf(),
        };
        note("DISABLE_HCA", dev.exec(&disable).map(drop));
    }
    // Commands other threads still run get a bounded time to complete; no new one is posted.
    let left = dev.close_commands(cmd::CLOSE_DRAIN);
    if left > 0 {
        tracing::warn!(
            commands = left,
            "closing with firmware commands of other threads still in flight; they end with \
             `closed`"
        );
    }
    dev.lock_health().stop();

    // Quiesce, then release what the device could still have reached: when its DMA cannot
    // be stopped, the pools are quarantined and the releases below keep every lease instead.
    if (cmd_up || enabled) && !dev.quiesce_dma("closing") {
        left_behind.push("its DMA could not be stopped (buffers quarantined)".to_string());
    }
    let page_op_left = {
        let mut pages = dev.lock_pages();
        let op_left = pages.op_in_flight();
        if op_left {
            left_behind.push("a MANAGE_PAGES on the page slot never completed".to_string());
        }
        if pages.leases() > 0 {
            tracing::warn!(
                pages = pages.held(),
                "releasing pages the firmware did not return (bus mastering is off)"
            );
            left_behind.push(format!(
                "{} firmware pages were not given back",
                pages.leases()
            ));
        }
        pages.drop_all_after_quiesce();
        op_left
    };
    {
        let mut st = dev.lock_cmd();
        // The page request's command, named above, is not counted twice.
        let lost = (st.lost_slots() + st.in_flight()).saturating_sub(usize::from(page_op_left));
        if lost > 0 {
            left_behind.push(format!(
                "{lost} firmware commands never completed (their command slots were lost)"
            ));
        }
        let kept = st.kept_mailboxes();
        if kept > 0 {
            left_behind.push(format!(
                "{kept} mailbox leases of corrupt command completions were still the device's"
            ));
        }
        st.free();
    }
    let buried = dev.empty_graveyard();
    if buried > 0 {
        tracing::warn!(buried, "released DMA kept after failed destroy commands");
        left_behind.push(format!(
            "{buried} buffers of commands with an unknown outcome were still the device's"
        ));
    }
    dev.teardown_irqs();
    dev.mad_pool.trim();
    dev.pool.trim();
    if dev.was_fatal() {
        let reason = dev
            .fatal_reason()
            .unwrap_or_else(|| "fatal error".to_string());
        left_behind.insert(
            0,
            format!("the session ended in the fatal state ({reason})"),
        );
    }
    if !left_behind.is_empty() {
        reset_after_unclean_close(dev, &left_behind.join("; "));
    }
    dev.set_closed();
    match first {
        Some(e) if !fatal_before => Err(e),
        Some(e) => {
            tracing::debug!("teardown errors after a fatal error are expected: {e}");
            Ok(())
        }
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use firmware_cmds::mlx5::timeouts::iseg_timeout_reg;

    #[test]
    fn init_segment_timeouts_are_clamped_to_their_ceilings() {
        const HOURS: u8 = 3;
        const SECONDS: u8 = 1;
        // The largest value in hours: about 120 years for both.
        let huge = iseg_timeout_reg(0x000f_ffff, HOURS);
        assert_eq!(
            iseg_timeouts(huge, huge),
            (Duration::from_secs(120), Some(Duration::from_secs(300)))
        );
        // Values under the ceilings are kept as given.
        assert_eq!(
            iseg_timeouts(iseg_timeout_reg(90, SECONDS), iseg_timeout_reg(10, SECONDS)),
            (Duration::from_secs(10), Some(Duration::from_secs(90)))
        );
        // Exactly at the ceilings: unchanged.
        assert_eq!(
            iseg_timeouts(iseg_timeout_reg(5, 2), iseg_timeout_reg(2, 2)),
            (Duration::from_secs(120), Some(Duration::from_secs(300)))
        );
        // cmd_q_init_to zero: the defaults (FW_INIT 2 s, commands 60 s).
        assert_eq!(
            iseg_timeouts(huge, 0),
            (Duration::from_secs(2), Some(Duration::from_secs(60)))
        );
        // A zero command timeout keeps the default; a zero FW_INIT still waits a little.
        assert_eq!(
            iseg_timeouts(0, iseg_timeout_reg(0, SECONDS)),
            (Duration::from_millis(1), None)
        );
    }

    #[test]
    fn owner_ids_are_random() {
        assert_ne!(random_owner_id(), random_owner_id());
    }
}

//! One port of an mlx5 HCA as the MAD layer sees it ([`HcaPort`]): its CQ and special QPs,
//! the poll that validates every CQE before turning it into a completion, the software flush
//! after a fatal error, port attributes (MAD_IFC PortInfo and NodeInfo, or the HCA vport
//! context on virtualised functions, as `mlx5_ib_query_port` chooses), the cached P_Key table,
//! and the port's events.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use dma::DmaPool;
use firmware_cmds::mlx5::ops::access_reg::AccessReg;
use firmware_cmds::mlx5::ops::mad_ifc::{MAD_LEN, MadIfc, MadIfcOut};
use firmware_cmds::mlx5::ops::vport::QueryHcaVportContext;

use crate::error::DriverError;
use crate::verbs::{
    DeviceEvent, HcaPort, PortAttrs, PortState, PostError, RecvWr, SendWr, SpecialQp,
    WorkCompletion,
};

use super::cq::{self, Cq, CqeKind};
use super::dev::{Dev, PortShared};
use super::qp::{Qp, SqRecoveryFailed};
use super::smp;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A port of an mlx5 HCA.
pub struct Mlx5Port {
    pub(crate) dev: Arc<Dev>,
    pub(crate) shared: Arc<PortShared>,
    pub(crate) port_num: u8,
    pub(crate) has_smi: bool,
    pub(crate) cq: Mutex<Option<Cq>>,
    /// QP0 (index 0) and QP1 (index 1).
    pub(crate) qps: [Mutex<Option<Qp>>; 2],
    /// Signalled (with the QP's mutex of the same index) when a send-queue recovery ends:
    /// a second recovery waits on it for the first, without holding the QP's lock.
    recovery_done: [Condvar; 2],
    /// Depths of the special QPs (send, receive).
    pub(crate) depths: (u32, u32),
    /// Completions made in software when the QPs were torn down, not yet polled.
    pub(crate) flushed: Mutex<VecDeque<WorkCompletion>>,
    /// A bad CQE found while completions were being returned: reported by the next poll.
    pending_error: Mutex<Option<String>>,
    /// QPNs of the special QPs the close took out of `qps` (recorded under the slot's lock
    /// as it takes one), while the CQ may still hold their CQEs: a poll in between drops
    /// those rather than refuse them as the device's, since their work requests complete from
    /// the close's software flush.
    taken_by_close: Mutex<Vec<u32>>,
    pkeys: Mutex<Vec<u16>>,
    /// The last P_Key found in `pkeys` and its index ([`PKEY_HIT_VALID`] | index << 16 | P_Key),
    /// or 0: every GSI receive looks its P_Key up, nearly always the same one. Written only
    /// under the `pkeys` lock, so a refresh (which clears it) never meets an older hit.
    pkey_hit: AtomicU64,
}

/// Marks [`Mlx5Port::pkey_hit`] as holding a P_Key and its index.
const PKEY_HIT_VALID: u64 = 1 << 32;

/// Where the device writes a port's CQEs and which one software reads next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CqPosition {
    /// IOVA of CQE 0 (64-byte CQEs, contiguous).
    pub iova: u64,
    /// Entries in the ring (a power of two).
    pub nent: u32,
    /// The consumer counter: the next CQE software reads is at `next % nent`, and it is
    /// software's when its owner bit equals `(next / nent) & 1`.
    pub next: u32,
}

fn qp_index(qp: SpecialQp) -> usize {
    match qp {
        SpecialQp::Smi => 0,
        SpecialQp::Gsi => 1,
    }
}

impl Mlx5Port {
    pub(crate) fn new(dev: Arc<Dev>, shared: Arc<PortShared>, has_smi: bool) -> Self {
        let port_num = shared.port_num;
        Mlx5Port {
            dev,
            shared,
            port_num,
            has_smi,
            cq: Mutex::new(None),
            qps: [Mutex::new(None), Mutex::new(None)],
            recovery_done: [Condvar::new(), Condvar::new()],
            depths: (0, 0),
            flushed: Mutex::new(VecDeque::new()),
            pending_error: Mutex::new(None),
            taken_by_close: Mutex::new(Vec::new()),
            pkeys: Mutex::new(Vec::new()),
            pkey_hit: AtomicU64::new(0),
        }
    }

    /// The QP number the device gave a special QP (0 when it does not exist).
    pub fn hw_qpn(&self, qp: SpecialQp) -> u32 {
        lock(&self.qps[qp_index(qp)]).as_ref().map_or(0, |q| q.qpn)
    }

    /// Where the port's CQ is (diagnostics, and fault injection in tests: a simulated device
    /// can be made to write an impossible CQE there).
    pub fn cq_position(&self) -> Option<CqPosition> {
        lock(&self.cq).as_ref().map(|cq| {
            let (iova, nent, next) = cq.position();
            CqPosition { iova, nent, next }
        })
    }

    /// Work requests posted and not yet returned by `poll`.
    pub fn outstanding(&self) -> usize {
        let queued = lock(&self.flushed).len();
        queued
            + self
                .qps
                .iter()
                .map(|q| lock(q).as_ref().map_or(0, Qp::outstanding))
                .sum::<usize>()
    }

    /// Read the P_Key table through MAD_IFC into the cache (best effort: an empty cache maps
    /// every P_Key to index 0).
    pub(crate) fn refresh_pkeys(&self) {
        // Cleared before the read: a P_Key change event during it sets the flag again, and
        // the table is read once more, instead of the change being lost.
        self.shared.pkey_stale.store(false, Ordering::Release);
        let entries = self.dev.pkey_table_len() as usize;
        let table = read_pkey_table(self.port_num, entries, &mut |c| self.dev.exec(c));
        {
            let mut pkeys = lock(&self.pkeys);
            *pkeys = table;
            self.pkey_hit.store(0, Ordering::Release);
        }
    }

    fn pkey_index(&self, pkey: u16) -> u16 {
        let hit = self.pkey_hit.load(Ordering::Acquire);
        if hit & PKEY_HIT_VALID != 0 && hit as u16 == pkey {
            return (hit >> 16) as u16;
        }
        let pkeys = lock(&self.pkeys);
        if let Some(index) = smp::find_cached_pkey(&pkeys, pkey) {
            self.pkey_hit.store(
                PKEY_HIT_VALID | u64::from(index) << 16 | u64::from(pkey),
                Ordering::Release,
            );
            return index;
        }
        // The kernel's mlx5 leaves (u16)-1 here (`ib_find_cached_pkey` sets it before
        // searching), an index of no entry. The device delivers to QP1 only packets whose
        // P_Key the table holds, so a miss means the cached table is stale (a change not yet
        // re-read) or could not be read; 0 is reported instead, a valid index whose P_Key
        // a reply to the MAD goes out with when it is the GSI QP's own.
        tracing::debug!(
            port = self.port_num,
            pkey,
            "P_Key not in the cached table; index 0"
        );
        0
    }

    /// The index the special QPs' contexts take (`ib_mad_port_start`): that of the default
    /// P_Key 0xFFFF in the table read by [`Mlx5Port::refresh_pkeys`], else 0 (logged).
    pub(crate) fn default_pkey_index(&self) -> u16 {
        let pkeys = lock(&self.pkeys);
        smp::find_pkey(&pkeys, smp::DEFAULT_PKEY).unwrap_or_else(|| {
            tracing::warn!(
                port = self.port_num,
                entries = pkeys.len(),
                "the default P_Key 0xFFFF is not in the port's P_Key table; the special QPs \
                 use P_Key index 0"
            );
            0
        })
    }

    /// SubnGet through MAD_IFC (M_Key and B_Key ignored, as the kernel's queries do).
    fn smp_get(&self, attr: u16, modifier: u32) -> Result<[u8; 64], DriverError> {
        smp_get_with(self.port_num, attr, modifier, &mut |c| self.dev.exec(c))
    }

    fn attrs_mad_ifc(&self) -> Result<PortAttrs, DriverError> {
        let pi = smp::port_info(&self.smp_get(smp::ATTR_PORT_INFO, u32::from(self.port_num))?);
        let ni = smp::node_info(&self.smp_get(smp::ATTR_NODE_INFO, 0)?);
        Ok(PortAttrs {
            port_num: self.port_num,
            state: PortState::from_code(pi.port_state),
            phys_state: pi.phys_state,
            lid: pi.lid,
            lmc: pi.lmc,
            sm_lid: pi.sm_lid,
            sm_sl: pi.sm_sl,
            port_guid: ni.port_guid,
            gid_prefix: pi.gid_prefix,
            capability_mask: pi.capability_mask,
            pkey_table_len: self.dev.pkey_table_len(),
            has_smi: self.has_smi,
        })
    }

    fn attrs_vport(&self) -> Result<PortAttrs, DriverError> {
        let multi = self.dev.num_ports() > 1;
        let v = self.dev.exec(&QueryHcaVportContext {
            other_vport: false,
            port_num: if multi { self.port_num } else { 0 },
            vport_number: 0,
        })?;
        // The vport context has no subnet prefix; PortInfo has it when the SMA answers.
        let gid_prefix = self
            .smp_get(smp::ATTR_PORT_INFO, u32::from(self.port_num))
            .map_or(0, |d| smp::port_info(&d).gid_prefix);
        Ok(PortAttrs {
            port_num: self.port_num,
            state: PortState::from_code(v.port_state),
            phys_state: v.port_physical_state,
            lid: v.lid,
            lmc: v.lmc,
            sm_lid: v.sm_lid,
            sm_sl: v.sm_sl,
            port_guid: v.port_guid,
            gid_prefix,
            capability_mask: v.cap_mask1,
            pkey_table_len: self.dev.pkey_table_len(),
            has_smi: v.has_smi,
        })
    }

    /// Why a port call other than a post cannot run: [`DriverError::Closed`] once the HCA is
    /// closed, [`DriverError::DeviceFatal`] on a dead device.
    fn check_usable(&self) -> Result<(), DriverError> {
        match self.dev.fatal_reason() {
            None => Ok(()),
            // Closed is for good: a fatal state seen first and closed since reads as closed.
            Some(_) if self.dev.is_closed() => Err(DriverError::Closed),
            Some(reason) => Err(DriverError::DeviceFatal { reason }),
        }
    }

    /// Why special QP `qp` is not in its slot: QP0 of a function without SMI was never
    /// created; any other QP was taken out by the close (`take_qp_for_close`), which may run
    /// before the device is marked closed.
    fn missing_qp(&self, qp: SpecialQp) -> DriverError {
        if qp == SpecialQp::Smi && !self.has_smi {
            DriverError::DeviceUnsupported {
                what: format!("QP0 (SMI) on port {}", self.port_num),
                hint: "this virtualised function has no SMI (its HCA vport context's has_smi \
                       is 0); send SMPs through a function that has one, such as the physical \
                       function"
                    .into(),
            }
        } else {
            DriverError::Closed
        }
    }

    fn fatal_post(&self) -> Option<PostError> {
        // One load while the device is up; the reason is built only for a dead device.
        self.dev.fatal_reason().map(PostError::DeviceFatal)
    }

    /// Run `post` on `qp` under its lock, unless the device is dead (checked before the lock
    /// and again under it: a fatal error may have flushed the QP meanwhile) or the QP does not
    /// exist.
    fn on_live_qp<R>(
        &self,
        qp: SpecialQp,
        post: impl FnOnce(&mut Qp) -> Result<R, PostError>,
    ) -> Result<R, PostError> {
        if let Some(e) = self.fatal_post() {
            return Err(e);
        }
        let mut g = lock(&self.qps[qp_index(qp)]);
        let Some(q) = g.as_mut() else {
            return Err(PostError::NotReady(format!(
                "port {} has no {qp:?} QP (the function has no SMI, or the HCA is closing)",
                self.port_num
            )));
        };
        if let Some(e) = self.fatal_post() {
            return Err(e);
        }
        post(q)
    }

    /// A QP error event for `qp` ([`Qp::error_event`]): true if it moved the QP to ERR (it
    /// exists, and was not in ERR already).
    pub(crate) fn qp_error_event(&self, qp: SpecialQp) -> bool {
        lock(&self.qps[qp_index(qp)])
            .as_mut()
            .is_some_and(Qp::error_event)
    }

    /// Take special QP `i` out of its slot for the close; its CQEs still in the CQ are
    /// dropped by a poll from now on (see `taken_by_close`).
    pub(crate) fn take_qp_for_close(&self, i: usize) -> Option<Qp> {
        let mut slot = lock(&self.qps[i]);
        let qp = slot.take()?;
        lock(&self.taken_by_close).push(qp.qpn);
        Some(qp)
    }

    /// Return queued software completions, then (fatal) flush every QP in software.
    fn flush_into(&self, out: &mut Vec<WorkCompletion>, max: usize) -> usize {
        let mut n = 0;
        {
            let mut q = lock(&self.flushed);
            while n < max {
                let Some(wc) = q.pop_front() else { break };
                out.push(wc);
                n += 1;
            }
        }
        for slot in &self.qps {
            if n >= max {
                break;
            }
            if let Some(qp) = lock(slot).as_mut() {
                n += qp.flush(out, max - n);
            }
        }
        n
    }

    /// A bad CQE: count it, make the device fatal (which quiesces it), and report it now if
    /// nothing was returned in this poll, else at the next.
    fn reject(&self, detail: String, returned: usize) -> Result<usize, DriverError> {
        self.dev.lock_stats().bad_cqes += 1;
        tracing::error!(port = self.port_num, "rejected CQE: {detail}");
        self.dev.enter_fatal(
            &format!("port {}: rejected CQE: {detail}", self.port_num),
            false,
        );
        if returned == 0 {
            Err(DriverError::BadDeviceValue {
                what: "CQE",
                detail,
            })
        } else {
            *lock(&self.pending_error) = Some(detail);
            Ok(returned)
        }
    }

    fn poll_cq(&self, out: &mut Vec<WorkCompletion>, max: usize) -> Result<usize, DriverError> {
        let mut guard = lock(&self.cq);
        let Some(cq) = guard.as_mut() else {
            return Ok(0);
        };
        // Both QPs are held for the batch (CQ, then QP0, then QP1: no path takes them in
        // another order), so a CQE costs no lock of its own.
        let mut qps = [lock(&self.qps[0]), lock(&self.qps[1])];
        let mut n = 0;
        let mut dropped = 0;
        while n < max {
            let Some(raw) = cq.next() else { break };
            let parsed = match cq::parse(&raw) {
                Ok(p) => p,
                Err(detail) => {
                    cq.set_ci();
                    drop(qps);
                    return self.reject(detail, n);
                }
            };
            let which = qps
                .iter()
                .position(|q| q.as_ref().is_some_and(|qp| qp.qpn == parsed.qpn));
            let Some(which) = which else {
                if lock(&self.taken_by_close).contains(&parsed.qpn) {
                    // Completed already, in software, by the close that took the QP.
                    tracing::debug!(
                        port = self.port_num,
                        qpn = parsed.qpn,
                        "CQE of a QP the close took: dropped"
                    );
                    dropped += 1;
                    if dropped >= max {
                        break;
                    }
                    continue;
                }
                cq.set_ci();
                drop(qps);
                return self.reject(
                    format!(
                        "CQE names QPN {:#x}, which is not a special QP of port {}",
                        parsed.qpn, self.port_num
                    ),
                    n,
                );
            };
            let Some(qp) = qps[which].as_mut() else {
                continue;
            };
            let was_error = qp.in_error();
            let wc = match &parsed.kind {
                CqeKind::SendOk | CqeKind::SendErr { .. } => {
                    qp.complete_send(parsed.wqe_counter, &parsed.kind)
                }
                CqeKind::Recv(_) | CqeKind::RecvErr { .. } => {
                    qp.complete_recv(parsed.wqe_counter, &parsed.kind, |p| self.pkey_index(p))
                }
            };
            let now_error = qp.in_error();
            match wc {
                Ok(wc) => {
                    if now_error && !was_error {
                        // The QP is in ERR: the MAD layer must know (once).
                        self.shared.push(DeviceEvent::QpFatal {
                            port: self.port_num,
                            qp: wc.qp,
                        });
                    }
                    out.push(wc);
                    n += 1;
                }
                Err(detail) => {
                    cq.set_ci();
                    drop(qps);
                    return self.reject(detail, n);
                }
            }
        }
        drop(qps);
        // One doorbell record update for the batch.
        if n > 0 || dropped > 0 {
            cq.set_ci();
            cq.disarm();
        }
        Ok(n)
    }

    /// Arm the CQ for an event on its next completion (at once if CQEs are already past the
    /// consumer index): done only before a wait that may block, so that a thread polling
    /// the CQ in a loop costs the device no EQE and the host no interrupt per completion.
    fn arm_cq(&self) {
        if let Some(cq) = lock(&self.cq).as_mut() {
            cq.arm(&self.dev.bar, self.shared.cq_events.load(Ordering::Relaxed));
        }
    }
}

/// A recovery whose commands run without the QP's lock: ends it under the lock and wakes a
/// recovery waiting for it, also when the commands panic (a waiter must not wait for good).
struct Recovering<'a> {
    slot: &'a Mutex<Option<Qp>>,
    done: &'a Condvar,
    /// Where a QP that the recovery found in ERR is reported.
    shared: &'a PortShared,
    finished: bool,
}

impl Recovering<'_> {
    /// Hand the commands' outcome to the QP, if the close has not taken it meanwhile.
    fn finish(&mut self, outcome: Result<(), SqRecoveryFailed>) -> Result<(), DriverError> {
        self.finished = true;
        let r = match lock(self.slot).as_mut() {
            Some(q) => {
                let was_error = q.in_error();
                let r = q.finish_recovery(outcome);
                if q.in_error() && !was_error {
                    // QUERY_QP found the QP in ERR. Its error CQEs, polled later, find the
                    // state ERR already and tell nobody: the MAD layer is told here.
                    self.shared.push(DeviceEvent::QpFatal {
                        port: self.shared.port_num,
                        qp: q.kind,
                    });
                }
                r
            }
            // Taken by the close (reset and destroyed): nothing to bring back.
            None => Err(DriverError::Closed),
        };
        self.done.notify_all();
        r
    }
}

impl Drop for Recovering<'_> {
    fn drop(&mut self) {
        if !self.finished {
            if let Some(q) = lock(self.slot).as_mut() {
                q.recovering = false;
            }
            self.done.notify_all();
        }
    }
}

impl HcaPort for Mlx5Port {
    fn port_num(&self) -> u8 {
        self.port_num
    }

    fn attrs(&self) -> Result<PortAttrs, DriverError> {
        self.check_usable()?;
        if self.dev.ib_virt() {
            self.attrs_vport()
        } else {
            self.attrs_mad_ifc()
        }
    }

    fn queue_depth(&self, _qp: SpecialQp) -> (u32, u32) {
        self.depths
    }

    fn post_send(&self, qp: SpecialQp, wr: &SendWr) -> Result<(), PostError> {
        let (_, err) = self.post_sends(qp, std::slice::from_ref(wr));
        err.map_or(Ok(()), Err)
    }

    fn post_sends(&self, qp: SpecialQp, wrs: &[SendWr]) -> (usize, Option<PostError>) {
        if wrs.is_empty() {
            return (0, None);
        }
        self.on_live_qp(qp, |q| Ok(q.post_sends(&self.dev.bar, wrs)))
            .unwrap_or_else(|e| (0, Some(e)))
    }

    fn post_recv(&self, qp: SpecialQp, wr: &RecvWr) -> Result<(), PostError> {
        self.on_live_qp(qp, |q| q.post_recv(wr))
    }

    fn post_recvs(&self, qp: SpecialQp, wrs: &[RecvWr]) -> (usize, Option<PostError>) {
        if wrs.is_empty() {
            return (0, None);
        }
        self.on_live_qp(qp, |q| Ok(q.post_recvs(wrs)))
            .unwrap_or_else(|e| (0, Some(e)))
    }

    fn poll(&self, out: &mut Vec<WorkCompletion>, max: usize) -> Result<usize, DriverError> {
        if let Some(detail) = lock(&self.pending_error).take() {
            return Err(DriverError::BadDeviceValue {
                what: "CQE",
                detail,
            });
        }
        self.dev.progress_quiet();
        if self.dev.is_fatal() {
            // Quiesced: never read the CQ again; complete everything in software.
            return Ok(self.flush_into(out, max));
        }
        if self.shared.pkey_stale.load(Ordering::Acquire) {
            self.refresh_pkeys();
        }
        self.poll_cq(out, max)
    }

    fn recover_send_queue(&self, qp: SpecialQp) -> Result<(), DriverError> {
        self.check_usable()?;
        let i = qp_index(qp);
        // A recovery already running (only the MAD progress loop recovers, but the API is
        // public): wait for it to end, without the QP's lock, then look at what it left.
        let mut g = self.recovery_done[i]
            .wait_while(lock(&self.qps[i]), |q| {
                q.as_ref().is_some_and(|q| q.recovering)
            })
            .unwrap_or_else(PoisonError::into_inner);
        let Some(q) = g.as_mut() else {
            drop(g);
            return Err(self.missing_qp(qp));
        };
        let Some(job) = q.begin_recovery()? else {
            return Ok(());
        };
        // The commands may take command timeouts: posts must not wait for them (the QP stays
        // SQE in software, so they are refused at once), nor a poll, nor a close.
        drop(g);
        let mut recovering = Recovering {
            slot: &self.qps[i],
            done: &self.recovery_done[i],
            shared: &self.shared,
            finished: false,
        };
        recovering.finish(job.run(&self.dev))
    }

    fn process_mad(&self, mad: &[u8; 256], ignore_mkey: bool) -> Result<[u8; 256], DriverError> {
        let out = self
            .dev
            .exec(&process_mad_command(self.port_num, mad, ignore_mkey))?;
        let mut r = [0u8; MAD_LEN];
        r.copy_from_slice(&out.mad);
        Ok(r)
    }

    /// `mlx5_ib_modify_port` on a physical function: read the mask (PortInfo through
    /// MAD_IFC), then write the new one with ACCESS_REG PCAP (`mlx5_set_port_caps`). A
    /// virtualised function would use MODIFY_HCA_VPORT_CONTEXT, which is not implemented.
    fn modify_capability_mask(&self, set: u32, clear: u32) -> Result<u32, DriverError> {
        self.check_usable()?;
        if self.dev.ib_virt() {
            return Err(DriverError::DeviceUnsupported {
                what: "changing the capability mask of a virtualised function".into(),
                hint: "MODIFY_HCA_VPORT_CONTEXT is not implemented; use the physical function"
                    .into(),
            });
        }
        let _guard = lock(&self.shared.cap_mask_lock);
        let cur = self.attrs_mad_ifc()?.capability_mask;
        let caps = (cur | set) & !clear;
        self.dev.exec(&AccessReg::pcap(self.port_num, caps))?;
        Ok(self.attrs_mad_ifc()?.capability_mask)
    }

    fn events(&self) -> Vec<DeviceEvent> {
        self.dev.progress();
        if self.shared.pkey_stale.load(Ordering::Acquire) && !self.dev.is_fatal() {
            self.refresh_pkeys();
        }
        std::mem::take(&mut *lock(&self.shared.events))
    }

    fn dma(&self) -> &DmaPool {
        &self.dev.mad_pool
    }

    fn now(&self) -> Duration {
        self.dev.backend.now()
    }

    fn wait(&self, deadline: Duration) {
        // An interrupt signalled since the eventfds were last taken: return at once, so the
        // caller polls (and looks at events) before it blocks.
        if self.dev.take_signals() {
            return;
        }
        // The last drain pass stopped at its budget: the EQEs left raise no interrupt.
        if self.dev.eq_backlog() {
            return;
        }
        // Armed only now, and only when the wait may block (see `arm_cq`): a completion
        // written after the last poll raises the CQ event (at once if one is already there),
        // which ends the wait.
        if deadline > self.dev.backend.now() && !self.dev.is_fatal() {
            self.arm_cq();
        }
        self.dev.backend.wait(deadline);
    }
}

/// Runs one MAD_IFC: the device's command interface, or a test's fake firmware.
type ExecMadIfc<'a> = dyn FnMut(&MadIfc) -> Result<MadIfcOut, DriverError> + 'a;

/// SubnGet(`attr`, `modifier`) of port `port`'s SMA through `exec`, M_Key and B_Key
/// ignored as the kernel's queries do; the answer's SMP data once `smp::response_data`
/// found it to be the GetResp of this very request (a device value is not trusted).
fn smp_get_with(
    port: u8,
    attr: u16,
    modifier: u32,
    exec: &mut ExecMadIfc<'_>,
) -> Result<[u8; 64], DriverError> {
    let tid = 0x6d6c_7835_0000_0000 | u64::from(attr);
    let out = exec(&MadIfc {
        ignore_mkey: true,
        ignore_bkey: true,
        remote_lid: 0,
        port,
        mad: smp::subn_get(attr, modifier, tid),
    })?;
    let data = smp::response_data(&out.mad, attr, modifier, tid).map_err(|detail| {
        DriverError::BadDeviceValue {
            what: "MAD_IFC response",
            detail,
        }
    })?;
    let mut d = [0u8; 64];
    d.copy_from_slice(data);
    Ok(d)
}

/// The P_Key table of port `port` (`entries` long, as the caps say), read block by block
/// through `exec`; best effort: a block that cannot be read, or whose answer is not its
/// own, ends the read and the blocks before it are kept.
fn read_pkey_table(port: u8, entries: usize, exec: &mut ExecMadIfc<'_>) -> Vec<u16> {
    let blocks = entries.div_ceil(smp::PKEYS_PER_BLOCK).max(1);
    let mut table = Vec::with_capacity(entries);
    for b in 0..blocks {
        let Ok(block) = u32::try_from(b) else { break };
        match smp_get_with(port, smp::ATTR_PKEY_TABLE, block, exec) {
            Ok(d) => table.extend(smp::pkey_block(&d)),
            Err(e) => {
                // The SMA may hold fewer entries than the caps say: keep what was read.
                tracing::debug!(
                    port,
                    entries = table.len(),
                    "P_Key table read up to block {b}: {e}"
                );
                break;
            }
        }
    }
    table
}

/// The MAD_IFC `process_mad` sends. The kernel's `mlx5_MAD_IFC` sets both op_mod bits,
/// ignore M_Key and ignore B_Key, whenever it has no work completion (a MAD the stack
/// issues itself, where a key-violation trap would have nowhere to go); a MAD with one
/// (received, or a local SMP with its built completion) sets neither. `ignore_mkey` is the
/// trait's "issued by the stack itself" flag, so it sets both.
fn process_mad_command(port: u8, mad: &[u8; MAD_LEN], ignore_mkey: bool) -> MadIfc {
    MadIfc {
        ignore_mkey,
        ignore_bkey: ignore_mkey,
        remote_lid: 0,
        port,
        mad: *mad,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, AtomicU32};

    use firmware_cmds::mlx5::ops::Command;

    use super::*;
    use crate::emulated::EmulatedBackend;
    use crate::mlx5::qp::SwState;
    use crate::mlx5::qp::tests::qp;
    use crate::mlx5::testutil::Recorder;
    use crate::verbs::HcaOptions;

    fn shared() -> PortShared {
        PortShared {
            port_num: 2,
            events: Mutex::new(Vec::new()),
            cqn: AtomicU32::new(0),
            cq_events: AtomicU32::new(0),
            qpn0: AtomicU32::new(0),
            qpn1: AtomicU32::new(0x48),
            pkey_stale: AtomicBool::new(false),
            cap_mask_lock: Mutex::new(()),
            port: std::sync::OnceLock::new(),
        }
    }

    /// Port 2 of a function on a register file (no firmware: nothing here may issue a
    /// command), with or without SMI, its GSI QP (QPN 0x48, in RTS) in its slot and no QP0.
    fn port_with_gsi(has_smi: bool) -> (DmaPool, Mlx5Port) {
        let model = Arc::new(Recorder {
            bar0_len: Some(0x1014),
            ..Recorder::default()
        });
        let backend = Arc::new(EmulatedBackend::new(model, "test"));
        let dev = Arc::new(Dev::new(backend, HcaOptions::default()).unwrap());
        let port = Mlx5Port::new(dev, Arc::new(shared()), has_smi);
        let (pool, _rec, _bar, q) = qp(SpecialQp::Gsi, 4, 4);
        *lock(&port.qps[1]) = Some(q);
        (pool, port)
    }

    /// The close takes the QPs out of the port before it marks the device closed: a
    /// recovery in between finds no QP and says the HCA is closed (not that the function
    /// lacks something). Only QP0 of a function without SMI is a missing feature.
    #[test]
    fn a_recovery_of_a_qp_the_close_took_says_closed() {
        let (_pool, port) = port_with_gsi(false);
        let taken = port.take_qp_for_close(1).expect("the GSI QP");
        assert!(!port.dev.is_fatal(), "the device is not marked closed yet");
        let r = port.recover_send_queue(SpecialQp::Gsi);
        assert!(matches!(r, Err(DriverError::Closed)), "{r:?}");
        let r = port.recover_send_queue(SpecialQp::Smi);
        assert!(
            matches!(&r, Err(DriverError::DeviceUnsupported { what, hint })
                if what.contains("QP0") && hint.contains("no SMI")),
            "{r:?}"
        );
        drop(taken);

        // With SMI, an empty QP0 slot is the close's too.
        let (_pool, port) = port_with_gsi(true);
        let r = port.recover_send_queue(SpecialQp::Smi);
        assert!(matches!(r, Err(DriverError::Closed)), "{r:?}");
    }

    /// After the close, the port calls that are not posts all say `Closed` (as `attrs` does);
    /// on a device that is fatal but not closed they say `DeviceFatal`.
    #[test]
    fn after_the_close_recovery_and_the_capability_mask_say_closed() {
        let (_pool, port) = port_with_gsi(true);
        port.dev.enter_fatal("test: a health syndrome", false);
        let r = port.recover_send_queue(SpecialQp::Gsi);
        assert!(matches!(r, Err(DriverError::DeviceFatal { .. })), "{r:?}");
        let r = port.modify_capability_mask(1 << 5, 0);
        assert!(matches!(r, Err(DriverError::DeviceFatal { .. })), "{r:?}");
        let r = port.attrs();
        assert!(matches!(r, Err(DriverError::DeviceFatal { .. })), "{r:?}");

        port.dev.set_closed();
        let r = port.recover_send_queue(SpecialQp::Gsi);
        assert!(matches!(r, Err(DriverError::Closed)), "{r:?}");
        let r = port.modify_capability_mask(1 << 5, 0);
        assert!(matches!(r, Err(DriverError::Closed)), "{r:?}");
        let r = port.attrs();
        assert!(matches!(r, Err(DriverError::Closed)), "{r:?}");
    }

    /// A QP in ERR is not recovered: the error names the QP and its state and says what to
    /// do; the QP stays in ERR and no recovery is left marked running.
    #[test]
    fn recovering_a_qp_in_error_says_it_is_in_error() {
        let (_pool, port) = port_with_gsi(true);
        lock(&port.qps[1]).as_mut().unwrap().state = SwState::Error;
        let r = port.recover_send_queue(SpecialQp::Gsi);
        let Err(e @ DriverError::QpInError { qpn: 0x48, .. }) = &r else {
            panic!("{r:?}");
        };
        let msg = e.to_string();
        assert!(
            msg.contains("Gsi QP 0x48 is in error (ERR)") && msg.contains("close and reopen"),
            "{msg}"
        );
        let g = lock(&port.qps[1]);
        let q = g.as_ref().unwrap();
        assert_eq!((q.state, q.recovering), (SwState::Error, false));
    }

    /// End a recovery of a QP in SQE whose QP is in `state` once the commands ran, with
    /// `outcome`; returns the port's events.
    fn finish(
        state: SwState,
        outcome: Result<(), SqRecoveryFailed>,
    ) -> (Result<(), DriverError>, Vec<DeviceEvent>) {
        let (_pool, _rec, _bar, mut q) = qp(SpecialQp::Gsi, 4, 4);
        q.state = SwState::SqError;
        assert!(q.begin_recovery().unwrap().is_some());
        q.state = state;
        let slot = Mutex::new(Some(q));
        let done = Condvar::new();
        let shared = shared();
        let r = Recovering {
            slot: &slot,
            done: &done,
            shared: &shared,
            finished: false,
        }
        .finish(outcome);
        let events = std::mem::take(&mut *lock(&shared.events));
        (r, events)
    }

    /// A recovery whose QUERY_QP found the QP in ERR moves it to ERR in software and tells
    /// the MAD layer (its error CQEs, polled later, no longer do); a QP another path moved
    /// to ERR, or one left in SQE, raises nothing here.
    #[test]
    fn a_recovery_that_finds_the_qp_in_err_reports_it() {
        let failed = |in_err| Err(SqRecoveryFailed::for_test(DriverError::Closed, in_err));
        let (r, events) = finish(SwState::SqError, failed(true));
        assert!(matches!(r, Err(DriverError::Closed)), "{r:?}");
        assert!(
            matches!(
                events[..],
                [DeviceEvent::QpFatal {
                    port: 2,
                    qp: SpecialQp::Gsi
                }]
            ),
            "{events:?}"
        );
        // A receive error polled while the commands ran reported it already.
        let (_, events) = finish(SwState::Error, failed(true));
        assert!(events.is_empty(), "{events:?}");
        let (_, events) = finish(SwState::Error, Ok(()));
        assert!(events.is_empty(), "{events:?}");
        // Left in SQE (a later recovery tries again), or recovered.
        let (_, events) = finish(SwState::SqError, failed(false));
        assert!(events.is_empty(), "{events:?}");
        let (r, events) = finish(SwState::SqError, Ok(()));
        assert!(r.is_ok() && events.is_empty(), "{r:?} {events:?}");
    }

    /// The command mailbox of `process_mad`: the stack's own query (no work completion)
    /// ignores both keys, op_mod 0x0003 as `mlx5_MAD_IFC` gives it; a received MAD
    /// ignores neither. op_mod is bytes 6..8 of the command input (`mad_ifc_in`).
    #[test]
    fn process_mad_ignores_both_keys_for_the_stacks_own_mads() {
        let mad = [0x5a; MAD_LEN];
        let own = process_mad_command(1, &mad, true).encode().unwrap();
        assert_eq!(&own[0..2], &[0x05, 0x0d], "MAD_IFC");
        assert_eq!(&own[6..8], &[0x00, 0x03], "ignore M_Key and B_Key");
        let received = process_mad_command(1, &mad, false).encode().unwrap();
        assert_eq!(&received[6..8], &[0x00, 0x00], "keys checked");
    }

    /// A fake firmware for the P_Key table: answers SubnGet(P_KeyTable, block) with the
    /// GetResp of block `block` (entries 0x8000 | index), except that the answer to block
    /// `wrong` carries block 0's data and modifier 0.
    fn pkey_firmware(wrong: u32) -> impl FnMut(&MadIfc) -> Result<MadIfcOut, DriverError> {
        move |c: &MadIfc| {
            let mut mad = c.mad;
            mad[3] = 0x81;
            let mut block = u32::from_be_bytes([mad[20], mad[21], mad[22], mad[23]]);
            if block == wrong {
                block = 0;
                mad[20..24].copy_from_slice(&0u32.to_be_bytes());
            }
            for i in 0..32 {
                let pkey = 0x8000 | (block * 32 + i) as u16;
                let at = 64 + 2 * i as usize;
                mad[at..at + 2].copy_from_slice(&pkey.to_be_bytes());
            }
            Ok(MadIfcOut { mad })
        }
    }

    /// An answer for P_KeyTable block 0 to the request for block 1 is refused as a bad device
    /// value, and the table read stops there, keeping block 0 (the existing best-effort
    /// semantics), instead of storing block 0's P_Keys at indexes 32..63.
    #[test]
    fn a_pkey_block_answered_for_another_modifier_ends_the_read() {
        let mut good = pkey_firmware(u32::MAX);
        let all = read_pkey_table(1, 96, &mut good);
        assert_eq!(all.len(), 96);
        assert_eq!((all[0], all[33], all[95]), (0x8000, 0x8021, 0x805f));

        let mut bad = pkey_firmware(1);
        let r = smp_get_with(1, smp::ATTR_PKEY_TABLE, 1, &mut bad);
        assert!(
            matches!(&r, Err(DriverError::BadDeviceValue { detail, .. }) if detail.contains("modifier")),
            "{r:?}"
        );
        let table = read_pkey_table(1, 96, &mut bad);
        assert_eq!(table.len(), 32, "block 0 only");
        assert_eq!((table[0], table[31]), (0x8000, 0x801f));
    }

    /// An answer whose TID is not the request's is refused.
    #[test]
    fn an_smp_answer_with_another_tid_is_refused() {
        let mut fw = |c: &MadIfc| {
            let mut mad = c.mad;
            mad[3] = 0x81;
            mad[15] ^= 1;
            Ok(MadIfcOut { mad })
        };
        let r = smp_get_with(1, smp::ATTR_PORT_INFO, 1, &mut fw);
        assert!(
            matches!(&r, Err(DriverError::BadDeviceValue { detail, .. }) if detail.contains("TID")),
            "{r:?}"
        );
    }
}

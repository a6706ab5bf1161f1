//! The send queue: on a doorbell, the device reads the QP's doorbell record and runs the WQEs
//! up to it, one per call so the device lock is never held while a packet is on the wire.
//! Each WQE is checked as hardware checks it (size, QPN, opcode, lkeys, length, DMA) and
//! becomes a packet (SLID from the port's LID and the path bits, VL15 for QP0, source QP 0,
//! 1 or the DETH override, Q_Key and P_Key from the QP where the WQE defers to it).

use dma::{SimIommu, SimIommuHold};
use firmware_cmds::mlx5::cqe::{Cqe, CqeBody, CqeOpcode, ReqCqe};
use firmware_cmds::mlx5::qpc::{QpServiceType, QpState};
use firmware_cmds::mlx5::syndrome::CqeSyndrome;
use firmware_cmds::mlx5::wqe::{
    CtrlSeg, GatherRef, SEND_WQE_BB, SEND_WQE_MAX_WQEBBS, UdSendWqe, WqeOpcode, bbs_for_ds,
    fm_ce_se,
};

use super::buffer;
use super::config::{special_keys, vendor_syndrome};
use super::counters::Counters;
use super::counters::DropReason;
use super::faults::WqeQueue;
use super::qp::Qp;
use super::state::{PortView, State, WQE_SCRATCH};
use crate::packet::{Packet, PacketGrh};

/// Largest send WQE, in bytes.
const MAX_WQE: usize = SEND_WQE_BB * SEND_WQE_MAX_WQEBBS;
const _: () = assert!(MAX_WQE <= WQE_SCRATCH);
/// A MAD: the only payload the fabric carries.
const MAD_LEN: usize = 256;
/// Bit 31 of a WQE's Q_Key: use the QP's Q_Key instead (IBA 10.2.5).
const QKEY_FROM_QP: u32 = 0x8000_0000;

/// What one step of the send queue produced.
#[derive(Debug)]
pub(crate) enum SendStep {
    /// A packet to put on the wire out of `port`; `true` if more WQEs were posted behind it.
    Packet(u8, Packet, bool),
    /// A WQE completed without a packet (NOP, error, flush).
    Completed,
    /// Nothing (more) to do.
    Idle,
}

/// A send WQE that failed: the syndrome and vendor syndrome of its error CQE.
struct SendError(CqeSyndrome, u8);

fn qp_op_err() -> SendError {
    SendError(CqeSyndrome::LOCAL_QP_OP_ERR, vendor_syndrome::BAD_WQE)
}

impl State {
    /// A send doorbell for `qpn` from UAR `uar`: whether the device takes it.
    pub(crate) fn accept_send_doorbell(&mut self, qpn: u32, uar: u32) -> bool {
        match self.qps.get_mut(&qpn) {
            Some(q) if q.uar == uar && q.sq_log.is_some() => {
                // The doorbell record is read again at the next WQE.
                q.sq_pc_seen = q.sq_cc;
                true
            }
            _ => {
                self.counters.snap.uar_writes_ignored += 1;
                false
            }
        }
    }

    /// Runs the next send WQE of `qpn`.
    pub(crate) fn next_send(&mut self, qpn: u32) -> SendStep {
        let mut wqe = self.take_scratch();
        let step = self.next_send_with(qpn, &mut wqe[..MAX_WQE]);
        self.put_scratch(wqe);
        step
    }

    /// [`next_send`](Self::next_send), reading the WQE into `wqe`. The QP is looked up once:
    /// the WQE is read and turned into a packet with the state's other parts borrowed apart.
    fn next_send_with(&mut self, qpn: u32, wqe: &mut [u8]) -> SendStep {
        let State {
            qps,
            iommu,
            counters,
            ports,
            mad_pool,
            faults,
            ..
        } = self;
        let Some(qp) = qps.get_mut(&qpn) else {
            return SendStep::Idle;
        };
        match qp.state {
            QpState::Rts => {}
            QpState::Sqer | QpState::Err => {
                self.flush_sq(qpn);
                return SendStep::Idle;
            }
            // Before RTS the device does not look at the send queue.
            _ => return SendStep::Idle,
        }
        let Some(bbs) = qp.sq_bbs() else {
            counters.snap.dma_errors += 1;
            return SendStep::Idle;
        };
        let start = qp.sq_cc;
        // The producer read at the last doorbell (or when the consumer caught up with it)
        // holds while it is ahead of the consumer within the ring: the driver only moves it
        // forward, and rings again for what it posts later.
        let cached = u32::from(qp.sq_pc_seen.wrapping_sub(start));
        let pc = if cached == 0 || cached > bbs {
            let Some(pc) = qp.sq_producer(iommu) else {
                counters.snap.dma_errors += 1;
                return SendStep::Idle;
            };
            qp.sq_pc_seen = pc;
            pc
        } else {
            qp.sq_pc_seen
        };
        let pending = u32::from(pc.wrapping_sub(start));
        if pending == 0 {
            return SendStep::Idle;
        }
        let (result, nbb, opcode, signaled) = if pending > bbs {
            // A doorbell record beyond the ring: the WQE there is not one the driver posted.
            (Err(qp_op_err()), 1, 0, true)
        } else {
            let mut cx = SendCx {
                iommu,
                counters,
                ports,
                mad_pool,
            };
            cx.read_send_wqe(qp, start, pending, wqe)
        };
        let injected = faults.take_wqe(qpn, WqeQueue::Send);
        let result = match injected {
            Some(f) => Err(SendError(f.syndrome, f.vendor_err)),
            None => result,
        };
        qp.sq_cc = start.wrapping_add(nbb as u16);
        qp.sends += 1;
        let more = pc != qp.sq_cc;
        counters.snap.send_wqes += 1;
        let cqn = qp.cqn_snd;
        match result {
            Ok(packet) => {
                if signaled {
                    let cqe = Cqe {
                        opcode: CqeOpcode::REQ,
                        format: 0,
                        owner: false,
                        qpn,
                        wqe_counter: start,
                        signature: 0,
                        body: CqeBody::Requester(ReqCqe {
                            wqe_opcode: opcode,
                            byte_cnt: 0,
                            timestamp: self.timestamp(),
                        }),
                    };
                    self.complete(cqn, cqe, false);
                }
                match packet {
                    Some((port, p)) => {
                        if self.ports[usize::from(port.max(1) - 1)].linked {
                            self.counters.snap.packets_sent += 1;
                        } else {
                            self.counters.drop_packet(DropReason::NoLink);
                        }
                        SendStep::Packet(port, p, more)
                    }
                    None => SendStep::Completed,
                }
            }
            Err(SendError(syndrome, vendor)) => {
                let qp = &self.qps[&qpn];
                let cqe = State::error_cqe(qp, true, syndrome, vendor, start, opcode);
                self.complete(cqn, cqe, true);
                // A send error on a datagram QP stops only its send queue.
                self.qp_to_sqer(qpn);
                SendStep::Completed
            }
        }
    }
}

/// What reading a send WQE and building its packet use of the state, borrowed apart from
/// the QP being served.
struct SendCx<'a> {
    iommu: &'a SimIommu,
    counters: &'a mut Counters,
    ports: &'a [PortView],
    #[allow(clippy::vec_box)]
    mad_pool: &'a mut Vec<Box<[u8; MAD_LEN]>>,
}

impl SendCx<'_> {
    /// Reads and runs the WQE of `qp` at basic block `start`: its result (a packet, or none
    /// for a NOP), the basic blocks it spans, its opcode and whether it asks for a CQE.
    #[allow(clippy::type_complexity)]
    fn read_send_wqe(
        &mut self,
        qp: &Qp,
        start: u16,
        pending: u32,
        wqe: &mut [u8],
    ) -> (Result<Option<(u8, Packet)>, SendError>, u32, u8, bool) {
        // The WQE and its gather list are read under one hold of the IOMMU (nothing else
        // reaches the IOMMU until the packet is built).
        let dma = self.iommu.hold();
        // The control segment first: its DS count says how many basic blocks follow.
        let read_bb = |i: u16, dst: &mut [u8]| {
            qp.sq_bb_addr(start.wrapping_add(i))
                .is_some_and(|a| dma.read(a, dst).is_ok())
        };
        // A UD send is two basic blocks: when the second is posted and follows the first in
        // the same page, both come in one read (the device fetches ahead as far as the
        // doorbell record allows; what it fetched past the WQE is not used).
        let page = firmware_cmds::mlx5::ops::pas::ADAPTER_PAGE_SIZE;
        let at = qp.sq_bb_addr(start);
        let ahead = pending >= 2
            && match (at, qp.sq_bb_addr(start.wrapping_add(1))) {
                (Some(a), Some(b)) => {
                    a.checked_add(SEND_WQE_BB as u64) == Some(b)
                        && a % page + 2 * SEND_WQE_BB as u64 <= page
                }
                _ => false,
            };
        let first = if ahead { 2 * SEND_WQE_BB } else { SEND_WQE_BB };
        let first_read = at.is_some_and(|a| dma.read(a, &mut wqe[..first]).is_ok());
        if !first_read {
            self.counters.snap.dma_errors += 1;
            return (
                Err(SendError(
                    CqeSyndrome::LOCAL_PROT_ERR,
                    vendor_syndrome::PROTECTION,
                )),
                1,
                0,
                true,
            );
        }
        let Ok(ctrl) = CtrlSeg::decode(&wqe[..]) else {
            return (Err(qp_op_err()), 1, 0, true);
        };
        let opcode = ctrl.opcode.0;
        let signaled = ctrl.fm_ce_se & fm_ce_se::CQ_UPDATE != 0;
        let nbb = bbs_for_ds(usize::from(ctrl.ds)) as u32;
        if ctrl.ds == 0 || nbb as usize > SEND_WQE_MAX_WQEBBS || nbb > pending {
            return (Err(qp_op_err()), nbb.clamp(1, pending), opcode, true);
        }
        let fetched = (first / SEND_WQE_BB) as u32;
        for i in fetched..nbb {
            let at = i as usize * SEND_WQE_BB;
            if !read_bb(i as u16, &mut wqe[at..at + SEND_WQE_BB]) {
                self.counters.snap.dma_errors += 1;
                return (
                    Err(SendError(
                        CqeSyndrome::LOCAL_PROT_ERR,
                        vendor_syndrome::PROTECTION,
                    )),
                    nbb,
                    opcode,
                    true,
                );
            }
        }
        if ctrl.qpn != qp.qpn {
            return (Err(qp_op_err()), nbb, opcode, true);
        }
        let result = match ctrl.opcode {
            WqeOpcode::NOP => Ok(None),
            WqeOpcode::SEND | WqeOpcode::SEND_IMM => self
                .build_packet(&dma, qp, &wqe[..nbb as usize * SEND_WQE_BB])
                .map(Some),
            _ => Err(qp_op_err()),
        };
        (result, nbb, opcode, signaled)
    }

    /// The packet of a UD-style send WQE of `qp`.
    fn build_packet(
        &mut self,
        dma: &SimIommuHold<'_>,
        qp: &Qp,
        wqe: &[u8],
    ) -> Result<(u8, Packet), SendError> {
        let (_, av, gather) = UdSendWqe::parse_in_place(wqe).map_err(|_| qp_op_err())?;
        let mut mad = self
            .mad_pool
            .pop()
            .unwrap_or_else(|| Box::new([0u8; MAD_LEN]));
        let mut len = 0usize;
        for g in gather {
            match g.map_err(|_| qp_op_err())? {
                GatherRef::Data(d) => {
                    if d.lkey != special_keys::RESD_LKEY || !qp.rlky {
                        return Err(SendError(
                            CqeSyndrome::LOCAL_PROT_ERR,
                            vendor_syndrome::PROTECTION,
                        ));
                    }
                    // A byte count of 0 is 0 bytes (see `DataSeg`): it adds nothing.
                    let n = u64::from(d.byte_count);
                    if len as u64 + n > MAD_LEN as u64 {
                        return Err(SendError(
                            CqeSyndrome::LOCAL_LENGTH_ERR,
                            vendor_syndrome::LENGTH,
                        ));
                    }
                    let n = n as usize;
                    if !buffer::read(dma, d.addr, &mut mad[len..len + n]) {
                        self.counters.snap.dma_errors += 1;
                        return Err(SendError(
                            CqeSyndrome::LOCAL_PROT_ERR,
                            vendor_syndrome::PROTECTION,
                        ));
                    }
                    len += n;
                }
                GatherRef::Inline(bytes) => {
                    if len + bytes.len() > MAD_LEN {
                        return Err(SendError(
                            CqeSyndrome::LOCAL_LENGTH_ERR,
                            vendor_syndrome::LENGTH,
                        ));
                    }
                    mad[len..len + bytes.len()].copy_from_slice(bytes);
                    len += bytes.len();
                }
            }
        }
        // A gather list shorter than a MAD leaves the rest zero (a reused buffer holds the
        // last packet's bytes there).
        if len < MAD_LEN {
            mad[len..].fill(0);
        }
        let view = &self.ports[usize::from(qp.port.max(1) - 1)];
        let snap = &view.snapshot;
        let lmc_mask = (1u16 << snap.lmc.min(7)) - 1;
        let av = &av;
        let pkey = view
            .pkeys
            .get(usize::from(qp.pkey_index))
            .copied()
            .unwrap_or(0);
        let grh = av.grh.then(|| {
            let mut sgid = [0u8; 16];
            sgid[..8].copy_from_slice(&snap.subnet_prefix.to_be_bytes());
            sgid[8..].copy_from_slice(&snap.port_guid.to_be_bytes());
            Box::new(PacketGrh {
                sgid,
                dgid: av.rgid,
                traffic_class: av.tclass,
                flow_label: av.flow_label,
                hop_limit: av.hop_limit,
            })
        });
        let src_qp = match qp.st {
            QpServiceType::QP0 => 0,
            QpServiceType::QP1 => 1,
            _ if qp.deth_sqpn == 1 => 1,
            _ => qp.qpn,
        };
        let qkey = if av.qkey & QKEY_FROM_QP != 0 {
            qp.qkey
        } else {
            av.qkey
        };
        Ok((
            qp.port,
            Packet {
                slid: (snap.lid & !lmc_mask) | (u16::from(av.path_bits) & lmc_mask),
                dlid: av.rlid,
                sl: av.sl,
                vl15: qp.st == QpServiceType::QP0,
                src_qp,
                dst_qp: av.dqpn,
                qkey,
                pkey,
                grh,
                mad,
            },
        ))
    }
}

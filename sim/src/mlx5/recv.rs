//! The receive side: a packet the fabric delivers to a port goes to that port's QP0 or QP1
//! (destination QP 0 or 1) or to a UD QP by number, after the checks hardware makes (QP state,
//! VL15 only for QP0, Q_Key, P_Key), into the next posted receive WQE: the 40-byte GRH area
//! (written only when the packet has a GRH), then the MAD, and a responder CQE.

use dma::SimIommu;
use firmware_cmds::mlx5::cqe::{Cqe, CqeBody, CqeOpcode, RespCqe};
use firmware_cmds::mlx5::grh::{GRH_LEN, Grh, IP_VERSION, NEXT_HEADER_IBA};
use firmware_cmds::mlx5::qpc::QpServiceType;
use firmware_cmds::mlx5::syndrome::CqeSyndrome;
use firmware_cmds::mlx5::wqe::{DATA_SEG_LEN, DataSeg, INVALID_LKEY};

use super::buffer;
use super::config::{special_keys, vendor_syndrome};
use super::counters::Counters;
use super::counters::DropReason;
use super::faults::WqeQueue;
use super::qp::Qp;
use super::state::{State, WQE_SCRATCH};
use crate::link::ReceiveDrop;
use crate::packet::{Packet, pkey_match};

/// Bytes a UD receive consumes: the GRH area and the MAD.
const RECV_LEN: usize = GRH_LEN + 256;
/// Largest receive WQE the caps allow (`max_wqe_sz_rq`).
const MAX_RECV_WQE: usize = 512;
const _: () = assert!(MAX_RECV_WQE <= WQE_SCRATCH);
/// Bytes after the GRH up to and including the ICRC: BTH 12 + DETH 8 + MAD 256 + ICRC 4.
const GRH_PAYLOAD_LEN: u16 = 12 + 8 + 256 + 4;
/// The GRH indication a responder CQE carries when a GRH is present (any non-zero value
/// means "GRH" to the kernel and rdma-core).
const CQE_L3_GRH: u8 = 1;

impl State {
    /// A packet arrived at `port`. Returns the drop the port's PMA counts, if the packet was
    /// dropped for one: an SMP that QP0 could not take (not receiving, or no receive posted)
    /// is a VL15 packet dropped for want of resources.
    pub(crate) fn receive(&mut self, port: u8, pkt: &Packet) -> Option<ReceiveDrop> {
        let mut raw = self.take_scratch();
        let r = self.try_receive(port, pkt, &mut raw[..MAX_RECV_WQE]);
        self.put_scratch(raw);
        let reason = r.err()?;
        self.counters.drop_packet(reason);
        let for_qp0 = pkt.vl15 && pkt.dst_qp == 0;
        (for_qp0 && matches!(reason, DropReason::QpState | DropReason::NoRecvWqe))
            .then_some(ReceiveDrop::Vl15)
    }

    /// `raw`: room for the receive WQE.
    fn try_receive(&mut self, port: u8, pkt: &Packet, raw: &mut [u8]) -> Result<(), DropReason> {
        if port == 0 || port > self.cfg.ports {
            return Err(DropReason::NoQp);
        }
        let p = usize::from(port - 1);
        let qpn = match pkt.dst_qp {
            0 => self.special[p][0],
            1 => self.special[p][1],
            n => Some(n),
        }
        .ok_or(DropReason::NoQp)?;
        // The QP is looked up once; the state's other parts are borrowed apart from it.
        let State {
            qps,
            iommu,
            counters,
            ports,
            faults,
            ..
        } = self;
        let view = &ports[p];
        let qp = qps.get_mut(&qpn).ok_or(DropReason::NoQp)?;
        if qp.port != port || (qp.st == QpServiceType::UD && pkt.dst_qp < 2) {
            return Err(DropReason::NoQp);
        }
        if !qp.receives() {
            return Err(DropReason::QpState);
        }
        if (qp.st == QpServiceType::QP0) != pkt.vl15 {
            return Err(DropReason::WrongVl);
        }
        if qp.st != QpServiceType::QP0 && pkt.qkey != qp.qkey {
            return Err(DropReason::BadQkey);
        }
        let pkey_ok = match qp.st {
            QpServiceType::QP0 => true,
            QpServiceType::QP1 => view.accepts(pkt.pkey),
            _ => view
                .pkeys
                .get(usize::from(qp.pkey_index))
                .is_some_and(|&k| pkey_match(k, pkt.pkey)),
        };
        if !pkey_ok {
            return Err(DropReason::BadPkey);
        }
        let lmc_mask = (1u16 << view.snapshot.lmc.min(7)) - 1;
        let Some(n) = qp.rq_entries() else {
            return Err(DropReason::NoRecvWqe);
        };
        let index = qp.rq_cc;
        // The cached producer is good while it is ahead of the consumer within the ring (a
        // flush may have moved the consumer past it).
        let cached = u32::from(qp.rq_pc_seen.wrapping_sub(index));
        let pc = if cached == 0 || cached > n {
            let Some(pc) = qp.rq_producer(iommu) else {
                counters.snap.dma_errors += 1;
                return Err(DropReason::NoRecvWqe);
            };
            pc
        } else {
            qp.rq_pc_seen
        };
        let pending = u32::from(pc.wrapping_sub(index));
        if pending == 0 {
            return Err(DropReason::NoRecvWqe);
        }
        qp.rq_pc_seen = pc;
        counters.snap.packets_received += 1;
        let result = if pending > n {
            Err((CqeSyndrome::LOCAL_QP_OP_ERR, vendor_syndrome::BAD_WQE))
        } else if let Some(f) = faults.take_wqe(qpn, WqeQueue::Recv) {
            Err((f.syndrome, f.vendor_err))
        } else {
            scatter(iommu, counters, qp, index, pkt, raw)
        };
        qp.rq_cc = index.wrapping_add(1);
        qp.recvs += 1;
        counters.snap.recv_wqes += 1;
        let cqn = qp.cqn_rcv;
        match result {
            Ok(()) => {
                let imm_inval_pkey = if qp.st == QpServiceType::QP1 {
                    u32::from(pkt.pkey)
                } else {
                    0
                };
                let srqn = qp.user_index & 0x00ff_ffff;
                let cqe = Cqe {
                    opcode: CqeOpcode::RESP_SEND,
                    format: 0,
                    owner: false,
                    qpn,
                    wqe_counter: index,
                    signature: 0,
                    body: CqeBody::Responder(RespCqe {
                        byte_cnt: RECV_LEN as u32,
                        src_qpn: pkt.src_qp & 0x00ff_ffff,
                        sl: pkt.sl & 0xf,
                        l3_hdr: if pkt.grh.is_some() { CQE_L3_GRH } else { 0 },
                        slid: pkt.slid,
                        ml_path: (pkt.dlid & lmc_mask) as u8,
                        imm_inval_pkey,
                        srqn,
                        timestamp: self.timestamp(),
                        drop_count: 0,
                    }),
                };
                self.complete(cqn, cqe, false);
            }
            Err((syndrome, vendor)) => {
                let cqe = State::error_cqe(qp, false, syndrome, vendor, index, 0);
                self.complete(cqn, cqe, true);
                self.qp_to_err(qpn);
            }
        }
        Ok(())
    }
}

/// Writes the GRH area and the MAD of `pkt` into receive WQE `index` of `qp`, reading the
/// WQE into `raw`.
fn scatter(
    iommu: &SimIommu,
    counters: &mut Counters,
    qp: &Qp,
    index: u16,
    pkt: &Packet,
    raw: &mut [u8],
) -> Result<(), (CqeSyndrome, u8)> {
    // The WQE is read and the message written under one hold of the IOMMU.
    let dma = iommu.hold();
    let stride = (1usize << qp.rq_stride_shift).min(MAX_RECV_WQE);
    let read = qp
        .rq_wqe_addr(index)
        .is_some_and(|a| buffer::read(&dma, a, &mut raw[..stride]));
    let prot = (CqeSyndrome::LOCAL_PROT_ERR, vendor_syndrome::PROTECTION);
    if !read {
        counters.snap.dma_errors += 1;
        return Err(prot);
    }
    // Every data segment is checked (and the capacity summed) before anything is written;
    // the write below walks the same segments again rather than keeping a zeroed array of
    // them for each packet.
    // A byte count of 0 is 0 bytes (see `DataSeg`): no room, and nothing is written there.
    let mut nsegs = 0;
    let mut capacity = 0u64;
    for s in data_segs(&raw[..stride]) {
        if s.lkey != special_keys::RESD_LKEY || !qp.rlky {
            return Err(prot);
        }
        nsegs += 1;
        capacity += u64::from(s.byte_count);
    }
    if capacity < RECV_LEN as u64 {
        return Err((CqeSyndrome::LOCAL_LENGTH_ERR, vendor_syndrome::LENGTH));
    }
    let grh = pkt.grh.as_deref().map(|g| {
        Grh {
            ip_version: IP_VERSION,
            traffic_class: g.traffic_class,
            flow_label: g.flow_label,
            payload_len: GRH_PAYLOAD_LEN,
            next_header: NEXT_HEADER_IBA,
            hop_limit: g.hop_limit,
            sgid: g.sgid,
            dgid: g.dgid,
        }
        .encode()
    });
    // The message as the scatter list sees it: GRH area, then MAD.
    let mut at = 0usize;
    let mut ok = true;
    for seg in data_segs(&raw[..stride]).take(nsegs) {
        // `byte_count` is whatever the WQE holds (bit 31 included): saturate, do not overflow.
        let (addr, len) = (seg.addr, seg.byte_count as usize);
        let end = at.saturating_add(len).min(RECV_LEN);
        let mut pos = at;
        while pos < end {
            let (src, take): (&[u8], usize) = if pos < GRH_LEN {
                let n = (GRH_LEN - pos).min(end - pos);
                match &grh {
                    Some(g) => (&g[pos..pos + n], n),
                    // Without a GRH the area is skipped, not written.
                    None => (&[][..], n),
                }
            } else {
                let m = pos - GRH_LEN;
                let n = end - pos;
                (&pkt.mad[m..m + n], n)
            };
            if !src.is_empty() {
                // A segment address the driver wrote near the top of the address space must
                // fail the write, not wrap round to a low one.
                ok = addr
                    .checked_add((pos - at) as u64)
                    .is_some_and(|a| buffer::write(&dma, a, src));
                if !ok {
                    break;
                }
            }
            pos += take;
        }
        at = at.saturating_add(len);
        if at >= RECV_LEN || !ok {
            break;
        }
    }
    if !ok {
        counters.snap.dma_errors += 1;
        return Err(prot);
    }
    Ok(())
}

/// The data segments of a receive WQE, up to the first that does not decode or ends the list.
/// The model does not advertise the `terminate_scatter_list_mkey` capability (caps.rs), so a
/// list ends with the fallback key `INVALID_LKEY` (0x100), as the kernel writes it then.
fn data_segs(wqe: &[u8]) -> impl Iterator<Item = DataSeg> + '_ {
    wqe.chunks_exact(DATA_SEG_LEN)
        .map_while(|chunk| DataSeg::decode(chunk).ok())
        .take_while(|s| !s.is_terminator(INVALID_LKEY))
}

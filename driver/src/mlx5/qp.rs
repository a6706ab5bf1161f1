//! The special QPs (`hw/mlx5/qp.c`, `wr.c`): QP0 (service type QP0) and QP1 (QP1, the
//! hardware GSI QP, sent on directly as the kernel does without `set_deth_sqpn`), their
//! receive and send rings in one DMA buffer (RQ first, then SQ), the doorbell record, the state
//! transitions to RTS and back, UD send WQEs with the barriers hardware needs, and the
//! bookkeeping that turns each CQE into exactly one completion of a posted work request.
//!
//! Every send is signalled and UD completes in order, so each queue keeps its outstanding work
//! requests in posting order and a CQE must name the oldest one: a WQE counter that names
//! anything else is rejected. Posting order also gives the software flush after a fatal error.

use std::collections::VecDeque;

use dma::{Access, DmaLease};
use firmware_cmds::mlx5::caps::{HcaCaps, ts_format_cap};
use firmware_cmds::mlx5::doorbell::{DB_RECORD_LEN, QpDbRecord, RCV_DBR, SND_DBR};
use firmware_cmds::mlx5::ops::qp::{CreateQp, DestroyQp, QueryQp};
use firmware_cmds::mlx5::ops::qp_modify::{
    Init2RtrQp, ModifyQp, Qp2Rst, Rst2InitQp, Rtr2RtsQp, Sqerr2RtsQp,
};
use firmware_cmds::mlx5::qpc::{QpServiceType, QpState, Qpc, pm_state, ts_format};
use firmware_cmds::mlx5::syndrome::WcError;
use firmware_cmds::mlx5::wqe::{
    CtrlSeg, DATAGRAM_SEG_LEN, DataSeg, DatagramSeg, SEND_WQE_BB, SINGLE_DATA_WQE_LEN, UdSendWqe,
    WqeOpcode, fm_ce_se,
};

use crate::barrier;
use crate::error::DriverError;
use crate::mmio::Mmio;
use crate::verbs::{
    GRH_LEN, PostError, RecvWr, SendWr, SpecialQp, UdDest, WcOpcode, WcStatus, WorkCompletion,
};

use super::cq::CqeKind;
use super::dev::{Dev, outcome_unknown};
use super::eq::pas_of;
use super::uar::BfReg;

/// SQERR2RTS commands one recovery issues at most (see [`SqRecovery::run`]). Three: one lost
/// command is a glitch worth retrying and a second retry costs little, but every attempt that
/// times out holds the MAD progress loop for the command timeout (60 s by default) and keeps
/// a command slot until the device gives it back, at worst until the close, so a firmware
/// that loses them all costs at most four timeouts and four of the 31 ordinary slots per
/// recovery (three SQERR2RTS and the last QUERY_QP); lost commands count against
/// `UNTRUSTED_COMPLETION_BUDGET`, so a few such recoveries make the device fatal.
pub(crate) const SQERR2RTS_ATTEMPTS: u32 = 3;

/// Q_Key of QP1 (`IB_QP1_QKEY`); QP0 uses 0.
pub const QP1_QKEY: u32 = 0x8001_0000;

/// QPC `mtu` of the special QPs: 256 bytes (`IB_MTU_256`, `MLX5_QPC_MTU_256_BYTES`), with
/// [`SPECIAL_QP_LOG_MSG_MAX`], as `__mlx5_ib_modify_qp` sets for QP0 and QP1 on every
/// transition: a MAD is one 256-byte packet.
pub(crate) const SPECIAL_QP_MTU: u8 = 1;

/// QPC `log_msg_max` of the special QPs: 2^8 bytes, one MAD.
pub(crate) const SPECIAL_QP_LOG_MSG_MAX: u8 = 8;

/// QPC `user_index` when the device reports `cqe_version` 1 (`MLX5_IB_DEFAULT_UIDX`): the
/// kernel writes it on every kernel QP ("0xffffff means we ask to work with cqe version 0").
pub(crate) const DEFAULT_USER_INDEX: u32 = 0x00ff_ffff;

/// The QPC `ts_format` of a new QP (`mlx5_get_qp_default_ts`, InfiniBand, so the general
/// `sq_ts_format` rather than RoCE's `qp_ts_format`): free-running when that is all the
/// device offers (the capability is 0, also on firmware that predates it), DEFAULT when it
/// offers real time, so that a device with a real-time clock only accepts the QP.
pub(crate) fn default_ts_format(caps: &HcaCaps) -> u8 {
    if caps.sq_ts_format() == ts_format_cap::FREE_RUNNING {
        ts_format::FREE_RUNNING
    } else {
        ts_format::DEFAULT
    }
}

/// The QPC `user_index` of a new QP: [`DEFAULT_USER_INDEX`] with `cqe_version` 1, else 0
/// (the field is reserved then).
pub(crate) fn default_user_index(caps: &HcaCaps) -> u32 {
    if caps.cqe_version() == 1 {
        DEFAULT_USER_INDEX
    } else {
        0
    }
}

/// Bytes of a receive WQE: one data segment (MADs are one buffer).
pub(crate) const RECV_WQE_SIZE: usize = 16;

/// Basic blocks of a UD send WQE with one data segment: control (16) + datagram (48) + data
/// (16) = 80 bytes, 5 DS.
pub(crate) const SEND_WQE_BBS: u32 = 2;

/// Ring sizes of a special QP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Geometry {
    /// Sends outstanding at most.
    pub(crate) sq_depth: u32,
    /// Send ring basic blocks.
    pub(crate) sq_bbs: u32,
    /// Receive ring entries (= receives outstanding at most).
    pub(crate) rq_cnt: u32,
}

impl Geometry {
    /// Round the asked depths to powers of two and check them against `log_max_qp_sz` (the
    /// caps' largest WQE count) and the QPC's 4-bit log fields.
    pub(crate) fn new(send: u32, recv: u32, log_max_qp_sz: u32) -> Result<Geometry, DriverError> {
        let sq_depth = send.clamp(1, 1 << 15).next_power_of_two();
        let rq_cnt = recv.clamp(4, 1 << 15).next_power_of_two();
        let sq_bbs = sq_depth * SEND_WQE_BBS;
        let limit = log_max_qp_sz.min(15);
        for (what, n) in [("send ring", sq_bbs), ("receive ring", rq_cnt)] {
            if n.trailing_zeros() > limit {
                return Err(DriverError::DeviceUnsupported {
                    what: format!("a {what} of {n} entries"),
                    hint: format!(
                        "the device allows 2^{limit}; open the HCA with smaller queue depths"
                    ),
                });
            }
        }
        Ok(Geometry {
            sq_depth,
            sq_bbs,
            rq_cnt,
        })
    }

    /// Byte offset of the send ring in the QP buffer.
    pub(crate) fn sq_offset(&self) -> usize {
        self.rq_cnt as usize * RECV_WQE_SIZE
    }

    /// Bytes of the QP buffer.
    pub(crate) fn bytes(&self) -> usize {
        self.sq_offset() + self.sq_bbs as usize * SEND_WQE_BB
    }
}

/// What the driver believes the QP's state is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SwState {
    Rts,
    /// A send failed: the send queue stopped (SQE) until SQERR2RTS.
    SqError,
    /// A receive failed or the device reported a QP error.
    Error,
    /// Moved to RESET for teardown.
    Reset,
}

#[derive(Debug, Clone, Copy)]
struct SendRec {
    index: u16,
    bbs: u16,
    wr_id: u64,
}

#[derive(Debug, Clone, Copy)]
struct RecvRec {
    wr_id: u64,
    len: u32,
}

/// One special QP.
#[derive(Debug)]
pub(crate) struct Qp {
    pub(crate) kind: SpecialQp,
    pub(crate) qpn: u32,
    port: u8,
    buf: DmaLease,
    db: DmaLease,
    geo: Geometry,
    sq_head: u32,
    sq_tail: u32,
    sends: VecDeque<SendRec>,
    rq_head: u32,
    rq_tail: u32,
    recvs: VecDeque<RecvRec>,
    pub(crate) state: SwState,
    /// The first WQE index posted after the last SQERR2RTS: flushes of WQEs before it belong
    /// to the stop that recovery ended, so they do not stop the queue again. Cleared once no
    /// send before it is outstanding: it is compared modulo 2^16.
    recovered_at: Option<u16>,
    /// A recovery's commands are running (without the QP's lock): a second recovery waits
    /// for it rather than issue its own.
    pub(crate) recovering: bool,
    bf: BfReg,
    lkey: u32,
    /// P_Key index of the QP's context (RST2INIT): the index of the default P_Key.
    pkey_index: u16,
    /// The last destination sent to and its encoded datagram segment: the MAD layer sends
    /// to few destinations (every directed-route SMP to one), so most WQEs copy it rather
    /// than check and encode it again.
    av_cache: Option<(UdDest, [u8; DATAGRAM_SEG_LEN])>,
}

/// [`send_wqe_with_av`] into a new array, the datagram segment encoded from `wr.dest` for a
/// GSI QP on P_Key index 0.
#[cfg(test)]
pub(crate) fn send_wqe(
    qpn: u32,
    index: u16,
    wr: &SendWr,
    lkey: u32,
) -> Result<[u8; SINGLE_DATA_WQE_LEN], PostError> {
    let mut b = [0u8; SINGLE_DATA_WQE_LEN];
    let av = datagram_seg(&wr.dest, SpecialQp::Gsi, 0)?;
    send_wqe_with_av(qpn, index, wr, lkey, &av, &mut b)?;
    Ok(b)
}

/// The datagram segment (address vector) of `d`, checked and encoded, for a send on `kind`
/// whose context holds P_Key index `qp_pkey_index`. An mlx5 WQE has no P_Key: every send
/// carries the QP's. So a GSI send must name that index (per-P_Key GSI send QPs, which the
/// kernel uses with `set_deth_sqpn`, are not implemented); an SMP's P_Key is not checked by
/// its receiver, and the kernel ignores the index on QP0, as this does.
pub(crate) fn datagram_seg(
    d: &UdDest,
    kind: SpecialQp,
    qp_pkey_index: u16,
) -> Result<[u8; DATAGRAM_SEG_LEN], PostError> {
    if kind == SpecialQp::Gsi && d.pkey_index != qp_pkey_index {
        return Err(PostError::Invalid(format!(
            "P_Key index {}: sends on the mlx5 GSI QP carry its P_Key, index {qp_pkey_index} \
             (per-P_Key GSI send QPs are not implemented)",
            d.pkey_index
        )));
    }
    if d.remote_qpn > 0x00ff_ffff || d.sl > 0xf || d.src_path_bits > 0x7f {
        return Err(PostError::Invalid(format!(
            "destination QPN {:#x}, SL {} or path bits {:#x} out of range",
            d.remote_qpn, d.sl, d.src_path_bits
        )));
    }
    let mut av = DatagramSeg {
        qkey: d.remote_qkey,
        dqpn: d.remote_qpn,
        extended_ud: true,
        sl: d.sl,
        path_bits: d.src_path_bits,
        rlid: d.dlid,
        ..DatagramSeg::default()
    };
    if let Some(g) = d.grh {
        if g.flow_label > 0x000f_ffff {
            return Err(PostError::Invalid(format!(
                "flow label {:#x} does not fit 20 bits",
                g.flow_label
            )));
        }
        av.grh = true;
        av.sgid_index = g.sgid_index;
        av.flow_label = g.flow_label;
        av.tclass = g.traffic_class;
        av.hop_limit = g.hop_limit;
        av.rgid = g.dgid;
    }
    av.to_bytes()
        .map_err(|e| PostError::Invalid(format!("send WQE: {e}")))
}

/// Build the WQE of a UD send into `b` (all of it written on success; whole basic blocks):
/// control (signalled SEND at `index`), the datagram segment `av` (encoded already by
/// [`datagram_seg`]), one data segment with `lkey`.
pub(crate) fn send_wqe_with_av(
    qpn: u32,
    index: u16,
    wr: &SendWr,
    lkey: u32,
    av: &[u8; DATAGRAM_SEG_LEN],
    b: &mut [u8; SINGLE_DATA_WQE_LEN],
) -> Result<(), PostError> {
    // A MAD send needs the MAD's bytes. The kernel's `mlx5_ib_post_send` (wr.c) and
    // rdma-core leave zero-length SGEs out of a send WQE, so a count of 0 is never given to
    // the device (what it makes of one is not documented; `DataSeg` takes it as 0 bytes).
    // Bit 31 marks an inline segment.
    if wr.sge.len == 0 {
        return Err(PostError::Invalid(
            "an empty send buffer: a MAD send needs the MAD's bytes".into(),
        ));
    }
    if wr.sge.len & 0x8000_0000 != 0 {
        return Err(PostError::Invalid(format!(
            "a send buffer of {} bytes: 2 GiB or more does not fit a data segment",
            wr.sge.len
        )));
    }
    let ctrl = CtrlSeg {
        opmod: 0,
        wqe_index: index,
        opcode: WqeOpcode::SEND,
        qpn,
        ds: 0,
        signature: 0,
        fm_ce_se: fm_ce_se::CQ_UPDATE,
        imm: 0,
    };
    let data = DataSeg {
        byte_count: wr.sge.len,
        lkey,
        addr: wr.sge.iova,
    };
    UdSendWqe::single_data_with_av(ctrl, av, data, b)
        .map_err(|e| PostError::Invalid(format!("send WQE: {e}")))
}

/// Everything needed to create a special QP.
#[derive(Debug, Clone, Copy)]
pub(crate) struct QpParams {
    pub(crate) kind: SpecialQp,
    pub(crate) port: u8,
    pub(crate) geo: Geometry,
    pub(crate) cqn: u32,
    pub(crate) pd: u32,
    pub(crate) uar: u32,
    pub(crate) bf: BfReg,
    pub(crate) lkey: u32,
    /// QPC `ts_format` ([`default_ts_format`]).
    pub(crate) ts_format: u8,
    /// QPC `user_index` ([`default_user_index`]).
    pub(crate) user_index: u32,
    /// P_Key index for RST2INIT: that of the default P_Key 0xFFFF, else 0
    /// (`ib_mad_port_start`).
    pub(crate) pkey_index: u16,
}

/// The CREATE_QP context of a special QP (`create_kernel_qp`).
fn create_ctx(p: &QpParams, dbr_addr: u64) -> Qpc {
    let geo = p.geo;
    Qpc {
        st: service_type(p.kind),
        pm_state: pm_state::MIGRATED,
        pd: p.pd,
        log_rq_size: geo.rq_cnt.trailing_zeros() as u8,
        log_rq_stride: (RECV_WQE_SIZE.trailing_zeros() - 4) as u8,
        log_sq_size: geo.sq_bbs.trailing_zeros() as u8,
        ts_format: p.ts_format,
        rlky: true,
        fre: true,
        uar_page: p.uar,
        user_index: p.user_index,
        log_page_size: 0,
        cqn_snd: p.cqn,
        cqn_rcv: p.cqn,
        dbr_addr,
        ..Qpc::default()
    }
}

/// The context of the special QPs' modify commands (`__mlx5_ib_modify_qp`, with the
/// attributes of `ib_mad_port_start`): port, P_Key index, Q_Key, and the 256-byte MTU and
/// message size the kernel sets on QP0 and QP1.
fn modify_ctx(kind: SpecialQp, qpn: u32, port: u8, pkey_index: u16) -> ModifyQp {
    ModifyQp {
        qpn,
        opt_param_mask: 0,
        ctx: Qpc {
            st: service_type(kind),
            pm_state: pm_state::MIGRATED,
            mtu: SPECIAL_QP_MTU,
            log_msg_max: SPECIAL_QP_LOG_MSG_MAX,
            port,
            pkey_index,
            q_key: match kind {
                SpecialQp::Smi => 0,
                SpecialQp::Gsi => QP1_QKEY,
            },
            ..Qpc::default()
        },
    }
}

fn service_type(kind: SpecialQp) -> QpServiceType {
    match kind {
        SpecialQp::Smi => QpServiceType::QP0,
        SpecialQp::Gsi => QpServiceType::QP1,
    }
}

impl Qp {
    /// CREATE_QP, then RST2INIT (port, P_Key index, Q_Key), INIT2RTR and RTR2RTS (PSN 0).
    pub(crate) fn create(dev: &Dev, p: &QpParams) -> Result<Qp, DriverError> {
        let geo = p.geo;
        let page = firmware_cmds::mlx5::ops::pas::ADAPTER_PAGE_SIZE as usize;
        let buf = dev
            .pool
            .lease(geo.bytes().next_multiple_of(page), page, Access::ReadWrite)?;
        let db = dev
            .pool
            .lease(DB_RECORD_LEN, DB_RECORD_LEN, Access::ReadWrite)?;
        let ctx = create_ctx(p, db.iova());
        barrier::to_device();
        let out = match dev.exec(&CreateQp {
            ctx,
            opt_param_mask: 0,
            input_qpn: 0,
            pas: pas_of(&buf),
        }) {
            Ok(out) => out,
            Err(e) => {
                dev.release_or_bury(&e, [buf, db]);
                return Err(e);
            }
        };
        let qp = Qp {
            kind: p.kind,
            qpn: out.qpn,
            port: p.port,
            buf,
            db,
            geo,
            sq_head: 0,
            sq_tail: 0,
            sends: VecDeque::new(),
            rq_head: 0,
            rq_tail: 0,
            recvs: VecDeque::new(),
            state: SwState::Reset,
            recovered_at: None,
            recovering: false,
            bf: p.bf,
            lkey: p.lkey,
            pkey_index: p.pkey_index,
            av_cache: None,
        };
        if let Err(e) = qp.to_rts(dev) {
            // Destroyed from RESET, as `destroy_qp_common` does.
            let mut qp = qp;
            let _ = qp.reset(dev);
            let _ = qp.destroy(dev);
            return Err(e);
        }
        tracing::debug!(qpn = qp.qpn, kind = ?p.kind, port = p.port, "special QP in RTS");
        Ok(Qp {
            state: SwState::Rts,
            ..qp
        })
    }

    fn modify_ctx(&self) -> ModifyQp {
        modify_ctx(self.kind, self.qpn, self.port, self.pkey_index)
    }

    fn to_rts(&self, dev: &Dev) -> Result<(), DriverError> {
        let m = self.modify_ctx();
        dev.exec(&Rst2InitQp(m))?;
        dev.exec(&Init2RtrQp(m))?;
        dev.exec(&Rtr2RtsQp(ModifyQp {
            ctx: Qpc {
                next_send_psn: 0,
                ..m.ctx
            },
            ..m
        }))?;
        Ok(())
    }

    /// Begin a recovery after a send error (the MAD layer's): in SQE, mark the QP
    /// recovering and return what the commands need, which the caller runs with
    /// [`SqRecovery::run`] without the QP's lock (they may take command timeouts) and hands
    /// to [`Qp::finish_recovery`]; in RTS there is nothing to do (`None`). Posts stay refused
    /// meanwhile: the software state is SQE until the commands brought the QP back.
    pub(crate) fn begin_recovery(&mut self) -> Result<Option<SqRecovery>, DriverError> {
        match self.state {
            SwState::Rts => Ok(None),
            SwState::SqError => {
                self.recovering = true;
                Ok(Some(SqRecovery {
                    kind: self.kind,
                    modify: self.modify_ctx(),
                }))
            }
            SwState::Error | SwState::Reset => Err(self.not_recoverable()),
        }
    }

    /// End the recovery [`Qp::begin_recovery`] began, with what its commands did. The QP
    /// comes back to RTS only if it is still in SQE: a receive error or a QP error event
    /// seen while the commands ran moved it to ERR, which no SQERR2RTS undoes. On an error
    /// the software state stays SQE (or becomes ERR when the firmware says so), so a later
    /// recovery tries again.
    pub(crate) fn finish_recovery(
        &mut self,
        outcome: Result<(), SqRecoveryFailed>,
    ) -> Result<(), DriverError> {
        self.recovering = false;
        match (outcome, self.state) {
            (Ok(()), SwState::SqError) => {
                self.state = SwState::Rts;
                // Nothing was posted since the error (posts were refused), so this is the
                // first WQE after the SQERR2RTS.
                self.recovered_at = Some(self.sq_head as u16);
                Ok(())
            }
            (Ok(()), SwState::Rts) => Ok(()),
            (Ok(()), SwState::Error | SwState::Reset) => Err(self.not_recoverable()),
            (Err(f), state) => {
                if f.qp_in_error && state == SwState::SqError {
                    self.state = SwState::Error;
                }
                Err(f.err)
            }
        }
    }

    /// Why a QP in ERR or RESET is not recovered: ERR stays ([`DriverError::QpInError`]);
    /// RESET is the close's (it resets a QP only after taking it out of the port), so closed.
    fn not_recoverable(&self) -> DriverError {
        match self.state {
            SwState::Reset => DriverError::Closed,
            _ => DriverError::QpInError {
                qp: format!("{:?}", self.kind),
                qpn: self.qpn,
            },
        }
    }
    /// 2RST: the device stops using the rings (outstanding work requests are then flushed in
    /// software by the caller).
    pub(crate) fn reset(&mut self, dev: &Dev) -> Result<(), DriverError> {
        dev.exec(&Qp2Rst { qpn: self.qpn })?;
        self.state = SwState::Reset;
        Ok(())
    }

    /// DESTROY_QP; buffers wait for the quiesce if the command failed.
    pub(crate) fn destroy(self, dev: &Dev) -> Result<(), DriverError> {
        match dev.exec(&DestroyQp { qpn: self.qpn }) {
            Ok(_) => Ok(()),
            Err(e) => {
                dev.bury(self.buf);
                dev.bury(self.db);
                Err(e)
            }
        }
    }

    /// Work requests outstanding.
    pub(crate) fn outstanding(&self) -> usize {
        self.sends.len() + self.recvs.len()
    }

    fn ready(&self) -> Result<(), PostError> {
        match self.state {
            SwState::Rts => Ok(()),
            SwState::SqError => Err(PostError::SendQueueError(format!(
                "the send queue of {:?} QP {:#x} is in error; recover it first",
                self.kind, self.qpn
            ))),
            SwState::Error => Err(PostError::NotReady(format!(
                "{:?} QP {:#x} is in error",
                self.kind, self.qpn
            ))),
            SwState::Reset => Err(PostError::NotReady(format!(
                "{:?} QP {:#x} is being closed",
                self.kind, self.qpn
            ))),
        }
    }

    /// Build and post one send: WQE writes, then `to_device`, then the doorbell record, then
    /// `to_device`, then the control segment's first 8 bytes to the BlueFlame register.
    #[cfg(test)]
    pub(crate) fn post_send(&mut self, bar: &Mmio, wr: &SendWr) -> Result<(), PostError> {
        let (_, err) = self.post_sends(bar, std::slice::from_ref(wr));
        err.map_or(Ok(()), Err)
    }

    /// Post `wrs` in order behind one doorbell record update and one doorbell (as
    /// `mlx5_ib_post_send` does for a chain): the work requests up to the first one refused are
    /// posted. Returns how many, and why the next was refused.
    pub(crate) fn post_sends(&mut self, bar: &Mmio, wrs: &[SendWr]) -> (usize, Option<PostError>) {
        let mut posted = 0;
        let mut last_ctrl = None;
        let mut refused = None;
        for wr in wrs {
            match self.write_send(wr) {
                Ok(ctrl) => {
                    last_ctrl = Some(ctrl);
                    posted += 1;
                }
                Err(e) => {
                    refused = Some(e);
                    break;
                }
            }
        }
        if let Some(qword) = last_ctrl {
            barrier::to_device();
            let _ = self
                .db
                .write(SND_DBR * 4, &QpDbRecord::counter_bytes(self.sq_head));
            barrier::to_device();
            // The doorbell carries the first 8 bytes of the last WQE's control segment; the
            // device runs the queue up to the doorbell record.
            self.bf.ring(bar, qword);
        }
        (posted, refused)
    }

    /// Write the WQE of `wr` at the head of the send ring and account it (no doorbell);
    /// returns the first 8 bytes of its control segment, for the doorbell.
    fn write_send(&mut self, wr: &SendWr) -> Result<[u8; 8], PostError> {
        self.ready()?;
        if self.sends.len() as u32 >= self.geo.sq_depth {
            return Err(PostError::QueueFull);
        }
        let index = self.sq_head as u16;
        let mut bytes = [0u8; SINGLE_DATA_WQE_LEN];
        let av = match &self.av_cache {
            Some((dest, av)) if *dest == wr.dest => av,
            _ => {
                let av = datagram_seg(&wr.dest, self.kind, self.pkey_index)?;
                &self.av_cache.insert((wr.dest, av)).1
            }
        };
        send_wqe_with_av(self.qpn, index, wr, self.lkey, av, &mut bytes)?;
        let bbs = (bytes.len() / SEND_WQE_BB) as u32;
        let used = self.sq_head.wrapping_sub(self.sq_tail);
        if used + bbs > self.geo.sq_bbs {
            return Err(PostError::QueueFull);
        }
        let mask = self.geo.sq_bbs - 1;
        let first = self.sq_head & mask;
        let ring_err = |e: dma::DmaError| PostError::Invalid(format!("send ring: {e}"));
        if first + bbs <= self.geo.sq_bbs {
            // Contiguous in the ring: one copy.
            self.buf
                .write(self.geo.sq_offset() + first as usize * SEND_WQE_BB, &bytes)
                .map_err(ring_err)?;
        } else {
            for (k, bb) in bytes.chunks(SEND_WQE_BB).enumerate() {
                let slot = (self.sq_head.wrapping_add(k as u32) & mask) as usize;
                self.buf
                    .write(self.geo.sq_offset() + slot * SEND_WQE_BB, bb)
                    .map_err(ring_err)?;
            }
        }
        self.sq_head = self.sq_head.wrapping_add(bbs);
        self.sends.push_back(SendRec {
            index,
            bbs: bbs as u16,
            wr_id: wr.wr_id,
        });
        let mut qword = [0u8; 8];
        qword.copy_from_slice(&bytes[..8]);
        Ok(qword)
    }

    /// Post one receive: the data segment, then `to_device`, then the doorbell record.
    pub(crate) fn post_recv(&mut self, wr: &RecvWr) -> Result<(), PostError> {
        let (_, err) = self.post_recvs(std::slice::from_ref(wr));
        err.map_or(Ok(()), Err)
    }

    /// Post `wrs` in order: their data segments, then `to_device`, then one doorbell record
    /// update for all. The work requests up to the first one refused are posted; returns how
    /// many, and why the next was refused.
    pub(crate) fn post_recvs(&mut self, wrs: &[RecvWr]) -> (usize, Option<PostError>) {
        let mut posted = 0;
        let mut refused = None;
        for wr in wrs {
            match self.write_recv(wr) {
                Ok(()) => posted += 1,
                Err(e) => {
                    refused = Some(e);
                    break;
                }
            }
        }
        if posted > 0 {
            barrier::to_device();
            let _ = self
                .db
                .write(RCV_DBR * 4, &QpDbRecord::counter_bytes(self.rq_head));
        }
        (posted, refused)
    }

    /// Write the data segment of `wr` at the head of the receive ring and account it (no
    /// doorbell record update).
    fn write_recv(&mut self, wr: &RecvWr) -> Result<(), PostError> {
        match self.state {
            SwState::Rts | SwState::SqError => {}
            _ => self.ready()?,
        }
        // This also keeps a byte count of 0 (an empty buffer) out of the ring.
        if wr.sge.len < GRH_LEN {
            return Err(PostError::Invalid(format!(
                "a receive buffer of {} bytes cannot hold the {GRH_LEN}-byte GRH area",
                wr.sge.len
            )));
        }
        if wr.sge.len & 0x8000_0000 != 0 {
            return Err(PostError::Invalid(
                "receive buffer longer than 2 GiB".into(),
            ));
        }
        if self.recvs.len() as u32 >= self.geo.rq_cnt {
            return Err(PostError::QueueFull);
        }
        let slot = (self.rq_head & (self.geo.rq_cnt - 1)) as usize;
        let seg = DataSeg {
            byte_count: wr.sge.len,
            lkey: self.lkey,
            addr: wr.sge.iova,
        };
        self.buf
            .write(slot * RECV_WQE_SIZE, &seg.to_bytes())
            .map_err(|e| PostError::Invalid(format!("receive ring: {e}")))?;
        self.rq_head = self.rq_head.wrapping_add(1);
        self.recvs.push_back(RecvRec {
            wr_id: wr.wr_id,
            len: wr.sge.len,
        });
        Ok(())
    }

    /// The completion of the oldest send, if the CQE names it (`wqe_counter` must be its
    /// index: anything else is outside the outstanding range or out of order).
    pub(crate) fn complete_send(
        &mut self,
        wqe_counter: u16,
        kind: &CqeKind,
    ) -> Result<WorkCompletion, String> {
        let Some(front) = self.sends.front().copied() else {
            return Err(format!(
                "send CQE for {:?} QP {:#x} with wqe_counter {wqe_counter}, but no send is \
                 outstanding",
                self.kind, self.qpn
            ));
        };
        if wqe_counter != front.index {
            let end = self.sq_head as u16;
            return Err(format!(
                "send CQE for {:?} QP {:#x} with wqe_counter {wqe_counter}: the oldest \
                 outstanding send is at {} (outstanding {}..{end}, {} sends)",
                self.kind,
                self.qpn,
                front.index,
                front.index,
                self.sends.len()
            ));
        }
        // The work requests before the recovery's mark are all completed once the front
        // reaches it: drop the mark, or the 16-bit comparison below would take a send
        // 2^15 basic blocks on for one of them. (Only a compare while there is no mark.)
        if let Some(at) = self.recovered_at {
            if at.wrapping_sub(front.index) as i16 <= 0 {
                self.recovered_at = None;
            }
        }
        let (status, vendor_err) = match kind {
            CqeKind::SendOk => (WcStatus::Success, 0),
            CqeKind::SendErr {
                syndrome,
                vendor_err,
            } => {
                let e = WcError::from_cqe(*syndrome, *vendor_err);
                // An error CQE (a flush too: the hardware flushes only a stopped queue) means
                // the send queue is in SQE until SQERR2RTS, except the flush of a work request
                // posted before the last SQERR2RTS: the hardware flushed it when the queue
                // stopped, it is only polled after the recovery (which the MAD layer does on
                // the first error CQE, then reposting the flushed: the kernel's
                // ib_mad_send_error), and the queue runs.
                let old_flush = e.status == WcStatus::WrFlushErr
                    && self
                        .recovered_at
                        .is_some_and(|at| (at.wrapping_sub(front.index) as i16) > 0);
                if self.state == SwState::Rts && !old_flush {
                    self.state = SwState::SqError;
                }
                (e.status, u32::from(e.vendor_err))
            }
            _ => return Err("a receive CQE cannot complete a send".into()),
        };
        self.sends.pop_front();
        self.sq_tail = self.sq_tail.wrapping_add(u32::from(front.bbs));
        Ok(WorkCompletion::status_only(
            front.wr_id,
            self.kind,
            WcOpcode::Send,
            status,
            vendor_err,
        ))
    }

    /// The device reported the QP in error (a work-queue catastrophic, invalid-request or
    /// access error event): ERR in software, so that posts are refused at once. True if it
    /// moved (from RTS or SQE); a QP in ERR already or being reset is left as it is.
    pub(crate) fn error_event(&mut self) -> bool {
        match self.state {
            SwState::Rts | SwState::SqError => {
                self.state = SwState::Error;
                true
            }
            SwState::Error | SwState::Reset => false,
        }
    }

    /// True when the QP is in ERR (a receive failed or was flushed, a QP error event came, or
    /// a recovery's QUERY_QP found it so): the MAD layer is told once, with `DeviceEvent::QpFatal`, by whichever
    /// of the poll and the recovery moved it there.
    pub(crate) fn in_error(&self) -> bool {
        self.state == SwState::Error
    }

    /// The completion of the oldest receive. A successful one must report between
    /// [`GRH_LEN`] and the buffer's length; `pkey_index` turns a QP1 P_Key into its index.
    pub(crate) fn complete_recv(
        &mut self,
        wqe_counter: u16,
        kind: &CqeKind,
        pkey_index: impl Fn(u16) -> u16,
    ) -> Result<WorkCompletion, String> {
        let Some(front) = self.recvs.front().copied() else {
            return Err(format!(
                "receive CQE for {:?} QP {:#x} with wqe_counter {wqe_counter}, but no receive \
                 is outstanding",
                self.kind, self.qpn
            ));
        };
        // Only the ring index the counter names is compared with the oldest receive's slot:
        // the sim writes its full 16-bit `rq_cc`, but the references do not rely on more than
        // the index. mlx5_ib ignores the field for a non-SRQ RQ and takes the next receive in
        // order (drivers/infiniband/hw/mlx5/cq.c, `handle_responder`: `wq->tail &
        // (wq->wqe_cnt - 1)`); rdma-core masks it to the ring (providers/mlx5/cq.c,
        // `handle_responder`: `wqe_counter & (wq->wqe_cnt - 1)`, since "mlx5: Handle OOO WQE
        // consumption in CQE generation"), as mlx5e does (en_rx.c, `mlx5e_handle_rx_cqe`,
        // through `mlx5_wq_cyc_ctr2ix`, core/wq.h). So a device writing either a counter or
        // an index works; an index that is not the oldest receive's is still refused.
        let mask = (self.geo.rq_cnt - 1) as u16;
        let tail = self.rq_tail as u16;
        if wqe_counter & mask != tail & mask {
            return Err(format!(
                "receive CQE for {:?} QP {:#x} with wqe_counter {wqe_counter} (ring index {}): \
                 the oldest outstanding receive is at ring index {} (counter {tail}, {} \
                 outstanding)",
                self.kind,
                self.qpn,
                wqe_counter & mask,
                tail & mask,
                self.recvs.len()
            ));
        }
        let wc = match kind {
            CqeKind::Recv(r) => {
                if r.byte_cnt < GRH_LEN || r.byte_cnt > front.len {
                    return Err(format!(
                        "receive CQE for {:?} QP {:#x} reports {} bytes for a {}-byte buffer \
                         (at least the {GRH_LEN}-byte GRH area is always counted)",
                        self.kind, self.qpn, r.byte_cnt, front.len
                    ));
                }
                WorkCompletion {
                    wr_id: front.wr_id,
                    qp: self.kind,
                    opcode: WcOpcode::Recv,
                    status: WcStatus::Success,
                    vendor_err: 0,
                    byte_len: r.byte_cnt,
                    src_qp: r.src_qpn,
                    slid: r.slid,
                    sl: r.sl,
                    dlid_path_bits: r.ml_path & 0x7f,
                    pkey_index: match self.kind {
                        SpecialQp::Gsi => pkey_index(r.pkey),
                        SpecialQp::Smi => 0,
                    },
                    grh: r.grh,
                }
            }
            CqeKind::RecvErr {
                syndrome,
                vendor_err,
            } => {
                let e = WcError::from_cqe(*syndrome, *vendor_err);
                // A receive error (a flush too: the hardware flushes receives only in ERR)
                // leaves the whole QP in ERR.
                self.state = SwState::Error;
                WorkCompletion::status_only(
                    front.wr_id,
                    self.kind,
                    WcOpcode::Recv,
                    e.status,
                    u32::from(e.vendor_err),
                )
            }
            _ => return Err("a send CQE cannot complete a receive".into()),
        };
        self.recvs.pop_front();
        self.rq_tail = self.rq_tail.wrapping_add(1);
        Ok(wc)
    }

    /// Complete every outstanding work request in software with WR_FLUSH_ERR and vendor_err 5
    /// (`mlx5_ib_poll_sw_comp`: sends first, then receives), at most `max`. Only once the
    /// device can no longer touch the buffers (quiesced, or the QP in RESET).
    pub(crate) fn flush(&mut self, out: &mut Vec<WorkCompletion>, max: usize) -> usize {
        let f = WcError::software_flush();
        let mut n = 0;
        while n < max {
            let Some(s) = self.sends.pop_front() else {
                break;
            };
            self.sq_tail = self.sq_tail.wrapping_add(u32::from(s.bbs));
            out.push(WorkCompletion::status_only(
                s.wr_id,
                self.kind,
                WcOpcode::Send,
                f.status,
                u32::from(f.vendor_err),
            ));
            n += 1;
        }
        if self.sends.is_empty() {
            // No send is left from before the last recovery (see `complete_send`).
            self.recovered_at = None;
        }
        while n < max {
            let Some(r) = self.recvs.pop_front() else {
                break;
            };
            self.rq_tail = self.rq_tail.wrapping_add(1);
            out.push(WorkCompletion::status_only(
                r.wr_id,
                self.kind,
                WcOpcode::Recv,
                f.status,
                u32::from(f.vendor_err),
            ));
            n += 1;
        }
        n
    }
}

/// What a send-queue recovery's commands need, taken from the QP under its lock
/// ([`Qp::begin_recovery`]) so that they run without it: a thread posting meanwhile is
/// refused at once (the QP is in SQE in software) instead of waiting for the firmware, as the
/// kernel holds no send-queue lock across `ib_modify_qp` either.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SqRecovery {
    kind: SpecialQp,
    modify: ModifyQp,
}

/// How a recovery's commands failed: the error to report, and whether QUERY_QP found the
/// QP in ERR (the software state then follows).
#[derive(Debug)]
pub(crate) struct SqRecoveryFailed {
    err: DriverError,
    qp_in_error: bool,
}

impl SqRecoveryFailed {
    /// A failure whose QUERY_QP found the QP in ERR (`qp_in_error`) or did not.
    #[cfg(test)]
    pub(crate) fn for_test(err: DriverError, qp_in_error: bool) -> SqRecoveryFailed {
        SqRecoveryFailed { err, qp_in_error }
    }

    fn new(err: DriverError) -> SqRecoveryFailed {
        SqRecoveryFailed {
            err,
            qp_in_error: false,
        }
    }
}

impl SqRecovery {
    /// Issue SQERR2RTS until the firmware's QP is in RTS, at most [`SQERR2RTS_ATTEMPTS`]
    /// times.
    ///
    /// A command whose outcome is unknown (a timeout, a corrupt completion: the firmware may
    /// or may not have run it) is settled by QUERY_QP. RTS: it did run, the recovery is done.
    /// SQE: it did not take effect, and SQERR2RTS is valid from SQE only, so issuing it again
    /// cannot do anything twice; it is retried. ERR: the QP is marked so and the error
    /// stands. Without the retry, a QP left in SQE would stay refused in software for good:
    /// the driver posts nothing while it believes SQE, so no error CQE would ever bring a
    /// second recovery.
    ///
    /// An attempt the firmware refuses outright (a failure status) is settled by QUERY_QP as
    /// well: an earlier command that timed out (of this recovery or of an earlier one, even
    /// one that ended well on a later attempt) may have run late and moved the QP to RTS,
    /// and SQERR2RTS from RTS fails with a bad state although the queue runs. It costs one
    /// command on an error path. (The kernel's `ib_mad_send_error` logs a failed modify and
    /// gives up; it has no command whose outcome it does not know.)
    ///
    /// It runs without the QP's lock (see [`SqRecovery`]). The bound keeps a firmware that
    /// loses every command from holding the caller (the MAD progress loop) for more than
    /// [`SQERR2RTS_ATTEMPTS`] + 1 command timeouts (the last QUERY_QP may be lost too), and
    /// from losing more than that many command slots, per recovery; each lost command also
    /// counts against the driver's
    /// [`UNTRUSTED_COMPLETION_BUDGET`](super::cmd::UNTRUSTED_COMPLETION_BUDGET), which bounds
    /// how many recoveries can lose them before the device is declared fatal. When every
    /// attempt leaves the QP in SQE the result is [`DriverError::SendQueueNotRecovered`]; the
    /// software state stays SQE (see [`Qp::finish_recovery`]), so a later recovery starts a
    /// new round.
    pub(crate) fn run(&self, dev: &Dev) -> Result<(), SqRecoveryFailed> {
        let mut attempt = 1;
        loop {
            let Err(err) = dev.exec(&Sqerr2RtsQp(self.modify)) else {
                return Ok(());
            };
            let refused = matches!(err, DriverError::CommandFailed { .. });
            if !outcome_unknown(&err) && !refused {
                return Err(SqRecoveryFailed::new(err));
            }
            let qpn = format!("{:#x}", self.modify.qpn);
            match dev.exec(&QueryQp {
                qpn: self.modify.qpn,
            }) {
                Ok(out) if out.ctx.state == QpState::Rts => {
                    tracing::warn!(
                        qp = ?self.kind, qpn = %qpn, attempt,
                        "SQERR2RTS failed ({err}); QUERY_QP says RTS: recovered"
                    );
                    return Ok(());
                }
                Ok(out) if out.ctx.state == QpState::Sqer && attempt < SQERR2RTS_ATTEMPTS => {
                    tracing::warn!(
                        qp = ?self.kind, qpn = %qpn, attempt,
                        "SQERR2RTS failed ({err}); QUERY_QP says SQE, so it did not take \
                         effect: issuing it again ({} of {SQERR2RTS_ATTEMPTS})",
                        attempt + 1
                    );
                    attempt += 1;
                }
                Ok(out) if out.ctx.state == QpState::Sqer => {
                    tracing::error!(
                        qp = ?self.kind, qpn = %qpn, attempt,
                        "SQERR2RTS failed ({err}); QUERY_QP says SQE after every attempt: \
                         the send queue stays stopped"
                    );
                    return Err(SqRecoveryFailed::new(DriverError::SendQueueNotRecovered {
                        qp: format!("{:?}", self.kind),
                        qpn: self.modify.qpn,
                        attempts: attempt,
                        last: Box::new(err),
                    }));
                }
                Ok(out) => {
                    tracing::error!(
                        qp = ?self.kind, qpn = %qpn, attempt, state = ?out.ctx.state,
                        "SQERR2RTS failed ({err}); the QP is neither in RTS nor in SQE"
                    );
                    return Err(SqRecoveryFailed {
                        err,
                        qp_in_error: out.ctx.state == QpState::Err,
                    });
                }
                Err(q) => {
                    tracing::error!(
                        qp = ?self.kind, qpn = %qpn, attempt,
                        "SQERR2RTS failed ({err}) and QUERY_QP failed too ({q})"
                    );
                    return Err(SqRecoveryFailed::new(err));
                }
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::mlx5::cq::{CqeKind, RecvCqe};
    use crate::mlx5::testutil::{Recorder, recording_bar};
    use crate::verbs::{Grh, Sge, UdDest};
    use dma::{DmaPool, LeaseMode, SimIommu};
    use firmware_cmds::mlx5::syndrome::CqeSyndrome;
    use firmware_cmds::mlx5::wqe::CTRL_SEG_LEN;
    use std::sync::Arc;

    /// A QP in RTS with its rings in strict leases, without a device.
    pub(crate) fn qp(kind: SpecialQp, send: u32, recv: u32) -> (DmaPool, Arc<Recorder>, Mmio, Qp) {
        let iommu = Arc::new(SimIommu::new());
        let pool = DmaPool::new(iommu.clone(), LeaseMode::Strict).unwrap();
        let geo = Geometry::new(send, recv, 15).unwrap();
        let buf = pool.lease(geo.bytes(), 4096, Access::ReadWrite).unwrap();
        let db = pool.lease(8, 8, Access::ReadWrite).unwrap();
        let (rec, bar) = recording_bar();
        // What the device finds in the send ring and the doorbell record at each doorbell.
        let sq = geo.sq_offset();
        rec.watch_dma(
            iommu,
            &[
                (buf.iova() + sq as u64, geo.bytes() - sq),
                (db.iova(), DB_RECORD_LEN),
            ],
        );
        let q = Qp {
            kind,
            qpn: 0x48,
            port: 1,
            buf,
            db,
            geo,
            sq_head: 0,
            sq_tail: 0,
            sends: VecDeque::new(),
            rq_head: 0,
            rq_tail: 0,
            recvs: VecDeque::new(),
            state: SwState::Rts,
            recovered_at: None,
            recovering: false,
            bf: BfReg::new(0x2000, 0, 9),
            lkey: 0x100,
            pkey_index: 0,
            av_cache: None,
        };
        (pool, rec, bar, q)
    }

    fn recv(len: u32, id: u64) -> RecvWr {
        RecvWr {
            wr_id: id,
            sge: Sge {
                iova: 0x7000_0000 + id * 0x1000,
                len,
            },
        }
    }

    fn ok_recv(bytes: u32) -> CqeKind {
        CqeKind::Recv(RecvCqe {
            byte_cnt: bytes,
            src_qpn: 1,
            slid: 3,
            sl: 2,
            ml_path: 0x81,
            pkey: 0xffff,
            grh: false,
        })
    }

    /// When the BlueFlame write arrives, the device finds the send's WQE in the ring and the
    /// doorbell record counting it (the recorder reads both through the IOMMU as the write
    /// lands): a doorbell rung before either is written fails here. The order of the WQE and
    /// the doorbell record, two plain memory writes with no device access between them, is
    /// not observable without instrumenting DMA memory writes, and not checked.
    #[test]
    fn a_send_writes_the_wqe_and_the_doorbell_record_before_the_bf_register() {
        let (_pool, rec, bar, mut q) = qp(SpecialQp::Gsi, 4, 4);
        let want = send_wqe(0x48, 0, &wr(0, None), 0x100).unwrap();
        q.post_send(&bar, &wr(0, None)).unwrap();
        let w = rec.take_with_dma();
        assert_eq!(w.len(), 1, "one doorbell");
        let (offset, bytes, dma) = &w[0];
        assert_eq!((*offset, &bytes[..]), (0x2800, &want[..8]));
        assert_eq!(&dma[0][..128], &want[..], "the WQE was in the ring");
        assert_eq!(
            dma[1],
            [0, 0, 0, 0, 0, 0, 0, 2],
            "the doorbell record counted it: RQ 0 (untouched), SQ 2 BBs"
        );
        // The next doorbell goes to the other half of the register, the WQE two BBs on.
        let want = send_wqe(0x48, 2, &wr(0, None), 0x100).unwrap();
        q.post_send(&bar, &wr(0, None)).unwrap();
        let w = rec.take_with_dma();
        assert_eq!(w.len(), 1, "one doorbell");
        let (offset, bytes, dma) = &w[0];
        assert_eq!(*offset, 0x2900);
        assert_eq!(&bytes[0..4], &[0x00, 0x00, 0x02, 0x0a], "WQE index 2");
        assert_eq!(
            &dma[0][128..256],
            &want[..],
            "the second WQE was in the ring"
        );
        assert_eq!(dma[1], [0, 0, 0, 0, 0, 0, 0, 4], "SQ 4 BBs");
    }

    #[test]
    fn a_chain_of_sends_rings_one_doorbell_with_the_last_wqe() {
        let (_pool, rec, bar, mut q) = qp(SpecialQp::Gsi, 4, 4);
        let chain = [wr(0, None), wr(0, None), wr(0, None)];
        let (n, err) = q.post_sends(&bar, &chain);
        assert_eq!((n, err.is_none()), (3, true));
        assert_eq!(
            q.db.read_u32_be(4).unwrap(),
            6,
            "SQ counter past the three WQEs"
        );
        for i in 0..3u16 {
            let mut wqe = [0u8; 128];
            q.buf
                .read(q.geo.sq_offset() + usize::from(i) * 128, &mut wqe)
                .unwrap();
            let want = send_wqe(0x48, 2 * i, &chain[usize::from(i)], 0x100).unwrap();
            assert_eq!(&wqe[..], &want[..], "WQE {i}");
        }
        let w = rec.take();
        assert_eq!(w.len(), 1, "one doorbell for the chain");
        assert_eq!(
            &w[0].1[0..4],
            &[0x00, 0x00, 0x04, 0x0a],
            "the last WQE's index"
        );
        // The queue holds four: the fifth of a chain is refused, the fourth posted.
        let (n, err) = q.post_sends(&bar, &[wr(0, None), wr(0, None)]);
        assert_eq!(n, 1);
        assert!(matches!(err, Some(PostError::QueueFull)));
        assert_eq!(rec.take().len(), 1);
        // Nothing posted: no doorbell.
        let (n, err) = q.post_sends(&bar, &[wr(0, None)]);
        assert_eq!(n, 0);
        assert!(err.is_some());
        assert!(rec.take().is_empty());
    }

    #[test]
    fn sends_wrap_the_ring_and_complete_in_order_only() {
        let (_pool, _rec, bar, mut q) = qp(SpecialQp::Smi, 2, 4);
        for round in 0..5u16 {
            let mut a = wr(0, None);
            a.wr_id = u64::from(round) * 2;
            let mut b = a;
            b.wr_id += 1;
            q.post_send(&bar, &a).unwrap();
            q.post_send(&bar, &b).unwrap();
            assert_eq!(q.post_send(&bar, &a), Err(PostError::QueueFull));
            let first = round * 4;
            let err = q.complete_send(first + 2, &CqeKind::SendOk).unwrap_err();
            assert!(err.contains("oldest outstanding send is at"), "{err}");
            let wc = q.complete_send(first, &CqeKind::SendOk).unwrap();
            assert_eq!((wc.wr_id, wc.status), (a.wr_id, WcStatus::Success));
            let wc = q.complete_send(first + 2, &CqeKind::SendOk).unwrap();
            assert_eq!(wc.wr_id, b.wr_id);
            let err = q.complete_send(first + 4, &CqeKind::SendOk).unwrap_err();
            assert!(err.contains("no send is outstanding"), "{err}");
        }
        assert_eq!(q.sq_head, 20, "10 sends of 2 BBs over a 4-BB ring");
    }

    #[test]
    fn a_send_error_stops_the_send_queue_until_recovery() {
        let (_pool, _rec, bar, mut q) = qp(SpecialQp::Gsi, 4, 4);
        q.post_send(&bar, &wr(0, None)).unwrap();
        q.post_send(&bar, &wr(0, None)).unwrap();
        let e = CqeKind::SendErr {
            syndrome: CqeSyndrome(0x04),
            vendor_err: 0x33,
        };
        let wc = q.complete_send(0, &e).unwrap();
        assert_eq!((wc.status, wc.vendor_err), (WcStatus::LocProtErr, 0x33));
        assert_eq!(q.state, SwState::SqError);
        assert!(matches!(
            q.post_send(&bar, &wr(0, None)),
            Err(PostError::SendQueueError(_))
        ));
        // The hardware flushes the rest.
        let wc = q.complete_send(2, &flushed()).unwrap();
        assert_eq!(wc.status, WcStatus::WrFlushErr);
        // Receives may still be posted while the send queue is stopped.
        q.post_recv(&recv(296, 1)).unwrap();
    }

    #[test]
    fn a_flush_polled_after_recovery_leaves_the_send_queue_running() {
        // A recovery whose SQERR2RTS went through, then the flush of the second send is
        // polled.
        let (_pool, _rec, bar, mut q) = recovered_with_one_send_flushing();
        let f = flushed();
        let wc = q.complete_send(2, &f).unwrap();
        assert_eq!(wc.status, WcStatus::WrFlushErr);
        assert_eq!(q.state, SwState::Rts, "a flush is not a new send error");
        q.post_send(&bar, &wr(0, None))
            .expect("the flushed send can be reposted");
        // A flush of a send posted after the recovery is a new stop.
        let wc = q.complete_send(4, &f).unwrap();
        assert_eq!(wc.status, WcStatus::WrFlushErr);
        assert_eq!(q.state, SwState::SqError);
    }

    /// The recovery's mark is dropped once the queue has moved past it: a flush 32,768 basic
    /// blocks (16,384 two-BB sends) later is compared with a 16-bit index that has wrapped
    /// round to look "before the recovery" again, and would leave the queue in RTS although
    /// the QP stopped.
    #[test]
    fn a_flush_long_after_a_recovery_still_stops_the_send_queue() {
        let (_pool, rec, bar, mut q) = recovered_with_one_send_flushing();
        let f = flushed();
        q.complete_send(2, &f).unwrap();
        assert_eq!(q.state, SwState::Rts, "the old flush");
        let mut index = 4u16;
        for _ in 0..16_385 {
            q.post_send(&bar, &wr(0, None)).unwrap();
            let wc = q.complete_send(index, &CqeKind::SendOk).unwrap();
            assert_eq!(wc.status, WcStatus::Success);
            index = index.wrapping_add(2);
            rec.take();
        }
        assert_eq!(q.recovered_at, None, "the queue moved past the recovery");
        q.post_send(&bar, &wr(0, None)).unwrap();
        let wc = q.complete_send(index, &f).unwrap();
        assert_eq!(wc.status, WcStatus::WrFlushErr);
        assert_eq!(q.state, SwState::SqError, "a new stop");
    }

    /// A software flush empties the send queue: nothing is left before the recovery's mark.
    #[test]
    fn a_software_flush_drops_the_recovery_mark() {
        let (_pool, _rec, _bar, mut q) = recovered_with_one_send_flushing();
        assert_eq!(q.recovered_at, Some(4));
        let mut out = Vec::new();
        assert_eq!(q.flush(&mut out, usize::MAX), 1);
        assert_eq!(q.recovered_at, None);
    }

    #[test]
    fn a_recovery_brings_back_only_a_queue_still_in_sqe_and_refuses_posts_meanwhile() {
        let stopped = || {
            let (pool, rec, bar, mut q) = qp(SpecialQp::Gsi, 4, 4);
            q.post_send(&bar, &wr(0, None)).unwrap();
            let e = CqeKind::SendErr {
                syndrome: CqeSyndrome(0x04),
                vendor_err: 0x33,
            };
            q.complete_send(0, &e).unwrap();
            (pool, rec, bar, q)
        };
        let fail = |qp_in_error| SqRecoveryFailed {
            err: DriverError::Closed,
            qp_in_error,
        };

        // Nothing to do in RTS.
        let (_pool, _rec, _bar, mut q) = qp(SpecialQp::Gsi, 4, 4);
        assert!(q.begin_recovery().unwrap().is_none());
        assert!(!q.recovering);

        // While the commands run (without the lock), sends are refused, receives taken.
        let (_pool, _rec, bar, mut q) = stopped();
        let job = q.begin_recovery().unwrap().expect("a recovery to run");
        assert_eq!((job.modify.qpn, q.recovering), (0x48, true));
        assert!(matches!(
            q.post_send(&bar, &wr(0, None)),
            Err(PostError::SendQueueError(_))
        ));
        q.post_recv(&recv(296, 1)).unwrap();
        q.finish_recovery(Ok(())).unwrap();
        assert_eq!((q.state, q.recovering), (SwState::Rts, false));
        assert_eq!(q.recovered_at, Some(2), "the first WQE after the recovery");
        q.post_send(&bar, &wr(0, None)).unwrap();

        // The QP went to ERR while the commands ran (a receive error): it stays there.
        let (_pool, _rec, _bar, mut q) = stopped();
        assert!(q.begin_recovery().unwrap().is_some());
        q.state = SwState::Error;
        assert!(matches!(
            q.finish_recovery(Ok(())),
            Err(DriverError::QpInError { qpn: 0x48, .. })
        ));
        assert_eq!((q.state, q.recovering), (SwState::Error, false));

        // Commands that failed leave SQE for a later attempt, or ERR when QUERY_QP said so.
        for (qp_in_error, after) in [(false, SwState::SqError), (true, SwState::Error)] {
            let (_pool, _rec, _bar, mut q) = stopped();
            assert!(q.begin_recovery().unwrap().is_some());
            assert!(matches!(
                q.finish_recovery(Err(fail(qp_in_error))),
                Err(DriverError::Closed)
            ));
            assert_eq!((q.state, q.recovering), (after, false));
        }
    }

    #[test]
    fn a_batch_of_receives_is_posted_up_to_the_first_refused_behind_one_doorbell_record() {
        let (_pool, _rec, _bar, mut q) = qp(SpecialQp::Gsi, 4, 4);
        let wrs = [recv(296, 0), recv(296, 1), recv(39, 2), recv(296, 3)];
        let (n, err) = q.post_recvs(&wrs);
        assert_eq!(n, 2, "the two before the short buffer");
        assert!(matches!(err, Some(PostError::Invalid(_))), "{err:?}");
        assert_eq!(
            q.db.read_u32_be(0).unwrap(),
            2,
            "RQ head in the doorbell record"
        );
        let (n, err) = q.post_recvs(&wrs[3..]);
        assert_eq!((n, err), (1, None));
        assert_eq!(q.db.read_u32_be(0).unwrap(), 3);
        let mut seg = [0u8; 16];
        q.buf.read(2 * 16, &mut seg).unwrap();
        let d = DataSeg::decode(&seg).unwrap();
        assert_eq!(
            d.addr, 0x7000_3000,
            "the fourth buffer in the third ring slot"
        );
        assert_eq!(q.post_recvs(&[]), (0, None));
        assert_eq!(q.outstanding(), 3);
    }

    #[test]
    fn a_receive_is_checked_against_its_buffer() {
        let (_pool, _rec, _bar, mut q) = qp(SpecialQp::Gsi, 4, 4);
        assert!(matches!(
            q.post_recv(&recv(39, 0)),
            Err(PostError::Invalid(_))
        ));
        // An empty buffer never becomes a data segment of byte count 0.
        assert!(matches!(
            q.post_recv(&recv(0, 0)),
            Err(PostError::Invalid(_))
        ));
        assert_eq!(q.db.read_u32_be(0).unwrap(), 0, "nothing posted");
        for id in 0..4 {
            q.post_recv(&recv(296, id)).unwrap();
        }
        assert_eq!(q.post_recv(&recv(296, 9)), Err(PostError::QueueFull));
        assert_eq!(
            q.db.read_u32_be(0).unwrap(),
            4,
            "RQ head in the doorbell record"
        );
        let mut seg = [0u8; 16];
        q.buf.read(16, &mut seg).unwrap();
        let d = DataSeg::decode(&seg).unwrap();
        assert_eq!((d.byte_count, d.lkey, d.addr), (296, 0x100, 0x7000_1000));

        let err = q.complete_recv(0, &ok_recv(297), |_| 0).unwrap_err();
        assert!(err.contains("297 bytes for a 296-byte buffer"), "{err}");
        let err = q.complete_recv(0, &ok_recv(39), |_| 0).unwrap_err();
        assert!(err.contains("39 bytes"), "{err}");
        let err = q.complete_recv(1, &ok_recv(296), |_| 0).unwrap_err();
        assert!(
            err.contains("oldest outstanding receive is at ring index 0"),
            "{err}"
        );
        let wc = q
            .complete_recv(0, &ok_recv(296), |p| if p == 0xffff { 5 } else { 0 })
            .unwrap();
        assert_eq!(wc.wr_id, 0);
        assert_eq!(wc.byte_len, 296);
        assert_eq!((wc.src_qp, wc.slid, wc.sl, wc.dlid_path_bits), (1, 3, 2, 1));
        assert_eq!(wc.pkey_index, 5, "QP1 maps the CQE's P_Key to its index");
        assert!(!wc.grh);
    }

    /// A receive CQE is matched by the ring index its counter names: a device writing the
    /// full counter (the sim's `rq_cc`) and one writing only the ring index both complete
    /// the oldest receive, past the first lap of the ring and across the counter's 16-bit
    /// wrap; an index that is not the oldest receive's is refused and completes nothing.
    #[test]
    fn a_receive_cqe_is_matched_by_the_ring_index_its_counter_names() {
        let (_pool, _rec, _bar, mut q) = qp(SpecialQp::Gsi, 4, 4);
        for id in 0..4 {
            q.post_recv(&recv(296, id)).unwrap();
        }
        for counter in 0..4u16 {
            let wc = q.complete_recv(counter, &ok_recv(296), |_| 0).unwrap();
            assert_eq!(wc.wr_id, u64::from(counter));
            q.post_recv(&recv(296, 10 + u64::from(counter))).unwrap();
        }
        // Second lap: the oldest is counter 4, ring slot 0.
        let err = q.complete_recv(1, &ok_recv(296), |_| 0).unwrap_err();
        assert!(
            err.contains("ring index 1")
                && err.contains("oldest outstanding receive is at ring index 0"),
            "{err}"
        );
        let err = q.complete_recv(5, &ok_recv(296), |_| 0).unwrap_err();
        assert!(
            err.contains("ring index 1"),
            "a full counter naming slot 1: {err}"
        );
        assert_eq!(q.outstanding(), 4, "nothing completed");
        let wc = q.complete_recv(0, &ok_recv(296), |_| 0).unwrap();
        assert_eq!(wc.wr_id, 10, "the ring index of counter 4");
        let wc = q.complete_recv(5, &ok_recv(296), |_| 0).unwrap();
        assert_eq!(wc.wr_id, 11, "the full counter 5");
        assert_eq!(q.outstanding(), 2);

        // Across the 16-bit wrap of the counter: slot 3, then slot 0.
        let (_pool, _rec, _bar, mut q) = qp(SpecialQp::Gsi, 4, 4);
        q.rq_head = 0xffff;
        q.rq_tail = 0xffff;
        q.post_recv(&recv(296, 1)).unwrap();
        q.post_recv(&recv(296, 2)).unwrap();
        assert!(
            q.complete_recv(0, &ok_recv(296), |_| 0).is_err(),
            "slot 0 is not the oldest"
        );
        assert_eq!(q.complete_recv(3, &ok_recv(296), |_| 0).unwrap().wr_id, 1);
        assert_eq!(q.complete_recv(0, &ok_recv(296), |_| 0).unwrap().wr_id, 2);
    }

    #[test]
    fn a_software_flush_completes_each_work_request_once_sends_first() {
        let (_pool, _rec, bar, mut q) = qp(SpecialQp::Smi, 4, 4);
        let mut s = wr(0, None);
        for id in 0..3 {
            s.wr_id = 100 + id;
            q.post_send(&bar, &s).unwrap();
            q.post_recv(&recv(296, id)).unwrap();
        }
        let mut out = Vec::new();
        assert_eq!(q.flush(&mut out, 4), 4);
        assert_eq!(q.flush(&mut out, 10), 2);
        assert_eq!(q.flush(&mut out, 10), 0, "nothing is flushed twice");
        let ids: Vec<u64> = out.iter().map(|w| w.wr_id).collect();
        assert_eq!(ids, vec![100, 101, 102, 0, 1, 2]);
        for w in &out {
            assert_eq!(
                (w.status, w.vendor_err),
                (
                    WcStatus::WrFlushErr,
                    crate::verbs::SOFTWARE_FLUSH_VENDOR_ERR
                )
            );
            assert_eq!(w.qp, SpecialQp::Smi);
        }
        assert_eq!(out[0].opcode, WcOpcode::Send);
        assert_eq!(out[3].opcode, WcOpcode::Recv);
        assert_eq!(q.outstanding(), 0);
    }

    /// A GSI QP that posted two sends, stopped on an error in the first and recovered: the
    /// hardware still owes the flush of the second (at WQE index 2).
    fn recovered_with_one_send_flushing() -> (DmaPool, Arc<Recorder>, Mmio, Qp) {
        let (pool, rec, bar, mut q) = qp(SpecialQp::Gsi, 4, 4);
        q.post_send(&bar, &wr(0, None)).unwrap();
        q.post_send(&bar, &wr(0, None)).unwrap();
        let e = CqeKind::SendErr {
            syndrome: CqeSyndrome(0x04),
            vendor_err: 0x33,
        };
        q.complete_send(0, &e).unwrap();
        assert_eq!(q.state, SwState::SqError);
        assert!(q.begin_recovery().unwrap().is_some());
        q.finish_recovery(Ok(())).unwrap();
        (pool, rec, bar, q)
    }

    /// The completion of a send the hardware flushed.
    fn flushed() -> CqeKind {
        CqeKind::SendErr {
            syndrome: CqeSyndrome::WR_FLUSHED_ERR,
            vendor_err: 0,
        }
    }

    fn wr(pkey_index: u16, grh: Option<Grh>) -> SendWr {
        SendWr {
            wr_id: 42,
            sge: Sge {
                iova: 0x1_2345_6000,
                len: 256,
            },
            dest: UdDest {
                dlid: 0xffff,
                sl: 3,
                src_path_bits: 1,
                remote_qpn: 1,
                remote_qkey: QP1_QKEY,
                pkey_index,
                grh,
            },
        }
    }

    /// A QP error event moves a QP in RTS or SQE to ERR (posts then refused as for a QP in
    /// error) and says so; a QP in ERR already, or being reset, is left as it is.
    #[test]
    fn a_qp_error_event_moves_the_qp_to_err_once() {
        for (from, moved, to) in [
            (SwState::Rts, true, SwState::Error),
            (SwState::SqError, true, SwState::Error),
            (SwState::Error, false, SwState::Error),
            (SwState::Reset, false, SwState::Reset),
        ] {
            let (_pool, _rec, bar, mut q) = qp(SpecialQp::Gsi, 4, 4);
            q.state = from;
            assert_eq!(q.error_event(), moved, "{from:?}");
            assert_eq!(q.state, to, "{from:?}");
            if moved {
                assert!(
                    matches!(q.post_send(&bar, &wr(0, None)), Err(PostError::NotReady(_))),
                    "{from:?}"
                );
            }
        }
    }

    #[test]
    fn a_ud_send_wqe_is_two_basic_blocks_laid_out_as_the_kernel_does() {
        let b = send_wqe(0x48, 0x1234, &wr(0, None), 0x100).unwrap();
        assert_eq!(b.len(), 128, "two basic blocks");
        // ctrl: opmod 0 | index 0x1234 | opcode SEND 0x0a.
        assert_eq!(&b[0..4], &[0x00, 0x12, 0x34, 0x0a]);
        // qpn 0x48 << 8 | ds 5 (ctrl 1 + av 3 + data 1).
        assert_eq!(&b[4..8], &[0x00, 0x00, 0x48, 0x05]);
        // fm_ce_se: CQ_UPDATE (2 << 2).
        assert_eq!(b[11], 0x08);
        let av = &b[CTRL_SEG_LEN..CTRL_SEG_LEN + DATAGRAM_SEG_LEN];
        assert_eq!(&av[0..4], &QP1_QKEY.to_be_bytes(), "qkey");
        assert_eq!(
            &av[8..12],
            &[0x80, 0x00, 0x00, 0x01],
            "extended UD AV + dqpn 1"
        );
        assert_eq!(av[12], 0x03, "rate 0, SL 3");
        assert_eq!(av[13], 0x01, "path bits");
        assert_eq!(&av[14..16], &[0xff, 0xff], "rlid");
        assert_eq!(&av[28..32], &[0, 0, 0, 0], "no GRH");
        let data = &b[64..80];
        assert_eq!(&data[0..4], &256u32.to_be_bytes());
        assert_eq!(&data[4..8], &0x100u32.to_be_bytes());
        assert_eq!(&data[8..16], &0x1_2345_6000u64.to_be_bytes());
        assert!(b[80..].iter().all(|&x| x == 0), "padding");
    }

    #[test]
    fn a_grh_send_sets_the_grh_bit_and_fields() {
        let g = Grh {
            sgid_index: 2,
            dgid: [0xfe; 16],
            flow_label: 0xabcde,
            traffic_class: 0x40,
            hop_limit: 7,
        };
        let b = send_wqe(1, 0, &wr(0, Some(g)), 0).unwrap();
        let av = &b[CTRL_SEG_LEN..CTRL_SEG_LEN + DATAGRAM_SEG_LEN];
        assert_eq!(av[0x1a], 0x40);
        assert_eq!(av[0x1b], 7);
        assert_eq!(
            u32::from_be_bytes(av[0x1c..0x20].try_into().unwrap()),
            (1 << 30) | (2 << 20) | 0xabcde
        );
        assert_eq!(&av[0x20..0x30], &[0xfe; 16]);
    }

    /// The QP keeps the last destination's encoded datagram segment: WQEs to alternating
    /// destinations (one differing from the other only inside its GRH) each carry their own
    /// segment, byte for byte as encoded afresh, and a destination the checks refuse is still
    /// refused after a good one was kept.
    #[test]
    fn the_kept_datagram_segment_follows_the_destination() {
        let (_pool, _rec, bar, mut q) = qp(SpecialQp::Gsi, 8, 4);
        let g = |flow_label| Grh {
            sgid_index: 1,
            dgid: [0xfe; 16],
            flow_label,
            traffic_class: 0,
            hop_limit: 64,
        };
        let chain = [
            wr(0, None),
            wr(0, None),
            wr(0, Some(g(1))),
            wr(0, Some(g(2))),
            wr(0, None),
        ];
        for w in &chain {
            q.post_send(&bar, w).unwrap();
        }
        for (i, w) in chain.iter().enumerate() {
            let mut wqe = [0u8; 128];
            q.buf.read(q.geo.sq_offset() + i * 128, &mut wqe).unwrap();
            let want = send_wqe(0x48, 2 * i as u16, w, 0x100).unwrap();
            assert_eq!(&wqe[..], &want[..], "WQE {i}");
        }
        let mut bad = wr(0, None);
        bad.dest.sl = 0x10;
        assert!(matches!(
            q.post_send(&bar, &bad),
            Err(PostError::Invalid(_))
        ));
        assert_eq!(q.sends.len(), chain.len(), "the refused one is not posted");
    }

    /// An empty send buffer cannot carry a MAD (and the kernel and rdma-core never give the
    /// device a send data segment of byte count 0), and bit 31 marks inline data: such a send
    /// is refused before anything reaches the ring.
    #[test]
    fn an_empty_or_2_gib_send_buffer_is_refused_without_posting() {
        let (_pool, rec, bar, mut q) = qp(SpecialQp::Gsi, 4, 4);
        for (len, what) in [(0, "an empty send buffer"), (0x8000_0000, "2 GiB or more")] {
            let mut w = wr(0, None);
            w.sge.len = len;
            let err = q.post_send(&bar, &w).unwrap_err();
            assert!(
                matches!(&err, PostError::Invalid(m) if m.contains(what)),
                "{len:#x}: {err}"
            );
        }
        assert_eq!(q.sends.len(), 0);
        assert_eq!(q.sq_head, 0);
        assert!(rec.take().is_empty(), "no doorbell");
        assert_eq!(q.db.read_u32_be(4).unwrap(), 0, "no doorbell record");
        q.post_send(&bar, &wr(0, None)).unwrap();
    }

    #[test]
    fn an_unsupported_pkey_index_is_refused_without_posting() {
        assert!(matches!(
            send_wqe(1, 0, &wr(3, None), 0),
            Err(PostError::Invalid(m)) if m.contains("P_Key index 3")
        ));
    }

    #[test]
    fn a_gsi_send_must_name_the_qps_pkey_index_and_an_smp_need_not() {
        let d = wr(1, None).dest;
        assert!(datagram_seg(&d, SpecialQp::Gsi, 1).is_ok());
        assert!(datagram_seg(&wr(0, None).dest, SpecialQp::Gsi, 1).is_err());
        assert!(datagram_seg(&wr(0, None).dest, SpecialQp::Smi, 1).is_ok());
    }

    fn params(caps: &HcaCaps) -> QpParams {
        QpParams {
            kind: SpecialQp::Gsi,
            port: 1,
            geo: Geometry::new(4, 4, 15).unwrap(),
            cqn: 5,
            pd: 6,
            uar: 7,
            bf: BfReg::new(0x2000, 0, 9),
            lkey: 0x100,
            ts_format: default_ts_format(caps),
            user_index: default_user_index(caps),
            pkey_index: 0,
        }
    }

    fn encoded(ctx: &Qpc) -> [u8; firmware_cmds::mlx5::qpc::QPC_LEN] {
        let mut b = [0u8; firmware_cmds::mlx5::qpc::QPC_LEN];
        ctx.encode_into(&mut b).unwrap();
        b
    }

    #[test]
    fn create_qp_asks_for_free_running_timestamps_only_when_that_is_all_the_device_has() {
        // mlx5_get_qp_default_ts: sq_ts_format 0 (free-running only) gives FREE_RUNNING (0),
        // 1 (real time only) and 2 (both) give DEFAULT (1). QPC ts_format is bits 0x58..0x5a:
        // the top two bits of byte 0x0b.
        for (cap, want, byte) in [(0, 0, 0x00), (1, 1, 0x40), (2, 1, 0x40)] {
            let mut caps = HcaCaps::zeroed();
            caps.set_sq_ts_format(cap).unwrap();
            let p = params(&caps);
            assert_eq!(p.ts_format, want, "sq_ts_format {cap}");
            let b = encoded(&create_ctx(&p, 0x1000));
            assert_eq!(b[0x0b] & 0xc0, byte, "sq_ts_format {cap}");
        }
    }

    #[test]
    fn create_qp_writes_the_default_user_index_with_cqe_version_1() {
        // MLX5_IB_DEFAULT_UIDX 0xffffff in user_index (bits 0x88..0xa0: bytes 0x11..0x14)
        // when cqe_version is 1; nothing otherwise.
        let mut caps = HcaCaps::zeroed();
        caps.set_cqe_version(1).unwrap();
        let b = encoded(&create_ctx(&params(&caps), 0x1000));
        assert_eq!(&b[0x10..0x14], &[0x00, 0xff, 0xff, 0xff]);
        caps.set_cqe_version(0).unwrap();
        let b = encoded(&create_ctx(&params(&caps), 0x1000));
        assert_eq!(&b[0x10..0x14], &[0, 0, 0, 0]);
    }

    #[test]
    fn special_qp_transitions_carry_mtu_256_log_msg_max_8_and_the_pkey_index() {
        // __mlx5_ib_modify_qp for QP0/QP1: mtu IB_MTU_256 (1) and log_msg_max 8, the old
        // `mtu_msgmax = (IB_MTU_256 << 5) | 8` = 0x28 in byte 8.
        for kind in [SpecialQp::Smi, SpecialQp::Gsi] {
            let m = modify_ctx(kind, 0x48, 2, 3);
            let b = encoded(&m.ctx);
            assert_eq!(b[0x08], 0x28, "{kind:?}");
            assert_eq!(m.ctx.pkey_index, 3);
            assert_eq!(m.ctx.port, 2);
        }
    }

    #[test]
    fn geometry_rounds_and_checks_the_caps() {
        let g = Geometry::new(100, 200, 15).unwrap();
        assert_eq!((g.sq_depth, g.sq_bbs, g.rq_cnt), (128, 256, 256));
        assert_eq!(g.sq_offset(), 256 * 16);
        assert_eq!(g.bytes(), 4096 + 256 * 64);
        assert!(Geometry::new(128, 256, 7).is_err(), "256 BBs need log 8");
        let g = Geometry::new(0, 0, 15).unwrap();
        assert_eq!((g.sq_depth, g.rq_cnt), (1, 4));
    }

    proptest::proptest! {
        /// Whatever the device writes, a CQE either completes the oldest outstanding work
        /// request or is rejected: never a panic, never a work request completed twice or
        /// lost.
        #[test]
        fn random_cqes_never_complete_a_work_request_twice(
            cqes in proptest::collection::vec(
                (
                    proptest::prop_oneof![
                        proptest::strategy::Just(0u8),
                        proptest::strategy::Just(2u8),
                        proptest::strategy::Just(13u8),
                        proptest::strategy::Just(14u8),
                        0u8..16,
                    ],
                    0u16..12,
                    0u32..400,
                    proptest::num::u8::ANY,
                    proptest::array::uniform32(0u8..),
                ),
                0..40,
            ),
        ) {
            let (_pool, _rec, bar, mut q) = qp(SpecialQp::Gsi, 4, 4);
            let mut s = wr(0, None);
            for id in 0..4u64 {
                s.wr_id = id;
                q.post_send(&bar, &s).unwrap();
                q.post_recv(&recv(296, 100 + id)).unwrap();
            }
            let mut seen = std::collections::HashSet::new();
            for (op, counter, bytes, synd, noise) in cqes {
                // Random fields where the driver looks, noise elsewhere.
                let mut raw = [0u8; 64];
                raw[..32].copy_from_slice(&noise);
                raw[0x2c..0x30].copy_from_slice(&bytes.to_be_bytes());
                raw[0x37] = synd;
                raw[0x38..0x3c].copy_from_slice(&0x48u32.to_be_bytes());
                raw[0x3c..0x3e].copy_from_slice(&counter.to_be_bytes());
                raw[0x3f] = op << 4;
                let Ok(p) = crate::mlx5::cq::parse(&raw) else { continue };
                let r = match p.kind {
                    CqeKind::SendOk | CqeKind::SendErr { .. } => {
                        q.complete_send(p.wqe_counter, &p.kind)
                    }
                    _ => q.complete_recv(p.wqe_counter, &p.kind, |_| 0),
                };
                if let Ok(wc) = r {
                    proptest::prop_assert!(seen.insert(wc.wr_id), "{} twice", wc.wr_id);
                }
            }
            let mut out = Vec::new();
            q.flush(&mut out, usize::MAX);
            for wc in out {
                proptest::prop_assert!(seen.insert(wc.wr_id), "{} twice", wc.wr_id);
            }
            proptest::prop_assert_eq!(seen.len(), 8);
        }
    }
}

//! CREATE_QP, DESTROY_QP, QUERY_QP and the modify-QP transitions, for the QP kinds the model
//! runs: QP0 (SMI), QP1 (GSI) and UD (the kernel's GSI send QPs, with DETH source QPN 1).

use firmware_cmds::mlx5::caps::ts_format_cap;
use firmware_cmds::mlx5::cmd::header::InHeader;
use firmware_cmds::mlx5::cmd::status::CmdStatus;
use firmware_cmds::mlx5::opcode::Opcode;
use firmware_cmds::mlx5::ops::qp::{
    CreateQp, CreateQpOut, DestroyQp, QP_SHORT_LEN, QueryQp, QueryQpOut,
};
use firmware_cmds::mlx5::ops::qp_modify::{
    Init2RtrQp, ModifyQp, Qp2Err, Qp2Rst, Rst2InitQp, Rtr2RtsQp, Sqerr2RtsQp,
};
use firmware_cmds::mlx5::ops::{Command, CommandOutput, NoPayload};
use firmware_cmds::mlx5::qpc::{QpServiceType, QpState, Qpc, optpar, rq_type, ts_format};
use firmware_cmds::mlx5::wqe::SEND_WQE_BB;

use super::{Failure, decode_failure, encoded, synd};
use crate::mlx5::buffer::PageList;
use crate::mlx5::qp::{Qp, transition};
use crate::mlx5::state::State;
use crate::packet::QP1_QKEY;

type Out = Result<Vec<u8>, Failure>;

fn decode<C: Command>(input: &[u8]) -> Result<C, Failure> {
    C::decode(input).map_err(|e| decode_failure(&e))
}

fn bad_param(s: u32) -> Failure {
    (CmdStatus::BAD_PARAM_ERR, s)
}

fn no_object(s: u32) -> Failure {
    (CmdStatus::BAD_RES_ERR, s)
}

/// Whether a QP may be created with timestamp format `ts` when the `sq_ts_format`
/// capability is `cap`: DEFAULT always (the device picks), free-running and real-time only
/// when the capability offers them; 3 is undefined. The kernel's `mlx5_get_qp_default_ts`
/// asks for free-running only when the capability is 0, and `get_ts_format` refuses
/// free-running itself when the capability is real-time only, which is what firmware checks.
fn ts_format_supported(cap: u32, ts: u8) -> bool {
    match ts {
        ts_format::DEFAULT => true,
        ts_format::FREE_RUNNING => cap != ts_format_cap::REAL_TIME,
        ts_format::REAL_TIME => cap != ts_format_cap::FREE_RUNNING,
        _ => false,
    }
}

pub(super) fn create_qp(st: &mut State, input: &[u8], _: u32) -> Out {
    let c: CreateQp = decode(input)?;
    let ctx = c.ctx;
    if ![QpServiceType::QP0, QpServiceType::QP1, QpServiceType::UD].contains(&ctx.st) {
        return Err(bad_param(synd::QP_TYPE));
    }
    // BAD_PARAM, as for any context value the device does not support (the syndrome real
    // firmware gives is not public).
    if !ts_format_supported(st.caps_cur.sq_ts_format(), ctx.ts_format) {
        return Err(bad_param(synd::TS_FORMAT));
    }
    if c.input_qpn != 0 || ctx.page_offset != 0 {
        return Err(bad_param(synd::CONTEXT));
    }
    if ctx.deth_sqpn > 1 || (ctx.deth_sqpn == 1 && ctx.st != QpServiceType::UD) {
        return Err(bad_param(synd::CONTEXT));
    }
    if !st.pds.contains_key(&ctx.pd) {
        return Err(no_object(synd::NO_PD));
    }
    if !st.uars.contains(&ctx.uar_page) {
        return Err(no_object(synd::NO_UAR));
    }
    let max_log = st.caps_cur.log_max_qp_sz();
    let rq_log = match ctx.rq_type {
        rq_type::NON_ZERO => Some(ctx.log_rq_size),
        rq_type::ZERO_LEN => None,
        _ => return Err(bad_param(synd::CONTEXT)),
    };
    let rq_stride_shift = 4 + u32::from(ctx.log_rq_stride);
    if rq_log.is_some_and(|l| {
        u32::from(l) > max_log || (1u32 << rq_stride_shift) > st.caps_cur.max_wqe_sz_rq()
    }) {
        return Err(bad_param(synd::QUEUE_SIZE));
    }
    let sq_log = (!ctx.no_sq).then_some(ctx.log_sq_size);
    if sq_log.is_some_and(|l| u32::from(l) > max_log) {
        return Err(bad_param(synd::QUEUE_SIZE));
    }
    if sq_log.is_some() && !st.cqs.contains_key(&ctx.cqn_snd) {
        return Err(no_object(synd::NO_CQ));
    }
    if rq_log.is_some() && !st.cqs.contains_key(&ctx.cqn_rcv) {
        return Err(no_object(synd::NO_CQ));
    }
    if ctx.dbr_addr % 8 != 0 {
        return Err(bad_param(synd::DBR));
    }
    let rq_bytes = rq_log.map_or(0u64, |l| 1u64 << (u32::from(l) + rq_stride_shift));
    let sq_bytes = sq_log.map_or(0u64, |l| (SEND_WQE_BB as u64) << l);
    let buf = PageList::new(&c.pas, ctx.log_page_size, rq_bytes + sq_bytes)
        .map_err(|_| bad_param(synd::PAS))?;
    if st.qps.len() >= 1usize << st.caps_cur.log_max_qp().min(24) {
        return Err((CmdStatus::NO_RES_ERR, synd::EXHAUSTED));
    }
    let mut qpn = st.next_qpn;
    while qpn < 2 || st.qps.contains_key(&qpn) {
        qpn = (qpn + 1) & 0x00ff_ffff;
    }
    st.next_qpn = (qpn + 1) & 0x00ff_ffff;
    if let Some(users) = st.pds.get_mut(&ctx.pd) {
        *users += 1;
    }
    if sq_log.is_some() {
        if let Some(cq) = st.cqs.get_mut(&ctx.cqn_snd) {
            cq.qps += 1;
        }
    }
    if rq_log.is_some() {
        if let Some(cq) = st.cqs.get_mut(&ctx.cqn_rcv) {
            cq.qps += 1;
        }
    }
    st.qps.insert(
        qpn,
        Qp {
            qpn,
            st: ctx.st,
            state: QpState::Rst,
            pd: ctx.pd,
            uar: ctx.uar_page,
            cqn_snd: ctx.cqn_snd,
            cqn_rcv: ctx.cqn_rcv,
            buf,
            dbr: ctx.dbr_addr,
            rq_log,
            rq_stride_shift,
            sq_log,
            sq_offset: rq_bytes,
            rlky: ctx.rlky,
            port: 0,
            pkey_index: 0,
            qkey: 0,
            deth_sqpn: ctx.deth_sqpn,
            user_index: ctx.user_index,
            sq_cc: 0,
            rq_cc: 0,
            rq_pc_seen: 0,
            sq_pc_seen: 0,
            sends: 0,
            recvs: 0,
        },
    );
    encoded(CreateQpOut { qpn }.encode())
}

impl State {
    /// Unbinds a QP from its port's special-QP slot.
    fn release_special(&mut self, qpn: u32) {
        for slots in &mut self.special {
            for s in slots.iter_mut() {
                if *s == Some(qpn) {
                    *s = None;
                }
            }
        }
    }
}

pub(super) fn destroy_qp(st: &mut State, input: &[u8], _: u32) -> Out {
    let c: DestroyQp = decode(input)?;
    let Some(qp) = st.qps.remove(&c.qpn) else {
        return Err(no_object(synd::NO_QP));
    };
    if let Some(users) = st.pds.get_mut(&qp.pd) {
        *users = users.saturating_sub(1);
    }
    if qp.sq_log.is_some() {
        if let Some(cq) = st.cqs.get_mut(&qp.cqn_snd) {
            cq.qps = cq.qps.saturating_sub(1);
        }
    }
    if qp.rq_log.is_some() {
        if let Some(cq) = st.cqs.get_mut(&qp.cqn_rcv) {
            cq.qps = cq.qps.saturating_sub(1);
        }
    }
    st.release_special(c.qpn);
    st.err_rqs.remove(&c.qpn);
    st.faults.wqe.retain(|f| f.qpn != c.qpn);
    encoded(NoPayload::<QP_SHORT_LEN>.encode())
}

pub(super) fn query_qp(st: &mut State, input: &[u8], _: u32) -> Out {
    let c: QueryQp = decode(input)?;
    let Some(qp) = st.qps.get(&c.qpn) else {
        return Err(no_object(synd::NO_QP));
    };
    let db = qp.db_record(&st.iommu).unwrap_or_default();
    let ctx = Qpc {
        state: qp.state,
        st: qp.st,
        pd: qp.pd,
        log_rq_size: qp.rq_log.unwrap_or(0),
        log_rq_stride: (qp.rq_stride_shift - 4) as u8,
        no_sq: qp.sq_log.is_none(),
        log_sq_size: qp.sq_log.unwrap_or(0),
        rlky: qp.rlky,
        uar_page: qp.uar,
        user_index: qp.user_index,
        log_page_size: (qp.buf.page_shift() - 12) as u8,
        pkey_index: qp.pkey_index,
        port: qp.port,
        cqn_snd: qp.cqn_snd,
        deth_sqpn: qp.deth_sqpn,
        cqn_rcv: qp.cqn_rcv,
        dbr_addr: qp.dbr,
        q_key: qp.qkey,
        rq_type: if qp.rq_log.is_some() {
            rq_type::NON_ZERO
        } else {
            rq_type::ZERO_LEN
        },
        hw_sq_wqebb_counter: qp.sq_cc,
        sw_sq_wqebb_counter: db.sq,
        hw_rq_counter: u32::from(qp.rq_cc),
        sw_rq_counter: u32::from(db.rq),
        ..Qpc::default()
    };
    encoded(
        QueryQpOut {
            opt_param_mask: 0,
            ctx,
        }
        .encode(),
    )
}

/// The body of a modify-QP input: the context-carrying transitions give a [`ModifyQp`], the
/// others only a QPN.
fn modify_body(op: Opcode, input: &[u8]) -> Result<ModifyQp, Failure> {
    let qpn_only = |qpn| ModifyQp {
        qpn,
        ..ModifyQp::default()
    };
    Ok(match op {
        Opcode::RST2INIT_QP => decode::<Rst2InitQp>(input)?.0,
        Opcode::INIT2RTR_QP => decode::<Init2RtrQp>(input)?.0,
        Opcode::RTR2RTS_QP => decode::<Rtr2RtsQp>(input)?.0,
        Opcode::SQERR2RTS_QP => decode::<Sqerr2RtsQp>(input)?.0,
        Opcode::QP_2ERR_QP => qpn_only(decode::<Qp2Err>(input)?.qpn),
        _ => qpn_only(decode::<Qp2Rst>(input)?.qpn),
    })
}

pub(super) fn modify_qp(st: &mut State, input: &[u8], _: u32) -> Out {
    let op = InHeader::decode(input)
        .map_err(|e| decode_failure(&e))?
        .opcode;
    let m = modify_body(op, input)?;
    let Some(qp) = st.qps.get(&m.qpn) else {
        return Err(no_object(synd::NO_QP));
    };
    let to = match transition(op, qp.state) {
        Some(Ok(to)) => to,
        Some(Err(())) => return Err((CmdStatus::BAD_QP_STATE_ERR, synd::QP_STATE)),
        None => return Err((CmdStatus::BAD_OP_ERR, synd::BAD_OPCODE)),
    };
    let (kind, qpn) = (qp.st, qp.qpn);
    let pkeys = 1usize << (7 + st.caps_cur.pkey_table_size().min(5));
    match op {
        Opcode::RST2INIT_QP => {
            let port = m.ctx.port;
            if port == 0 || port > st.cfg.ports {
                return Err(bad_param(synd::PORT));
            }
            if usize::from(m.ctx.pkey_index) >= pkeys {
                return Err(bad_param(synd::PKEY_INDEX));
            }
            let special = match kind {
                QpServiceType::QP0 => Some(0),
                QpServiceType::QP1 => Some(1),
                _ => None,
            };
            if let Some(i) = special {
                let slot = &mut st.special[usize::from(port - 1)][i];
                if slot.is_some_and(|q| q != qpn) {
                    return Err((CmdStatus::RES_BUSY, synd::SPECIAL_QP_BUSY));
                }
                *slot = Some(qpn);
            }
            let qp = st.qps.get_mut(&qpn).expect("looked up above");
            qp.port = port;
            qp.pkey_index = m.ctx.pkey_index;
            qp.qkey = match kind {
                // QP0 has no Q_Key; QP1's is the well-known GSI Q_Key whatever the context says.
                QpServiceType::QP0 => 0,
                QpServiceType::QP1 => QP1_QKEY,
                _ => m.ctx.q_key,
            };
            qp.state = to;
        }
        Opcode::QP_2ERR_QP => st.qp_to_err(qpn),
        Opcode::QP_2RST_QP => {
            st.release_special(qpn);
            st.err_rqs.remove(&qpn);
            let qp = st.qps.get_mut(&qpn).expect("looked up above");
            qp.state = QpState::Rst;
            qp.sq_cc = 0;
            qp.rq_cc = 0;
            qp.rq_pc_seen = 0;
            qp.sq_pc_seen = 0;
        }
        _ => {
            if m.opt_param_mask & optpar::PKEY_INDEX != 0 {
                if usize::from(m.ctx.pkey_index) >= pkeys {
                    return Err(bad_param(synd::PKEY_INDEX));
                }
                st.qps.get_mut(&qpn).expect("looked up above").pkey_index = m.ctx.pkey_index;
            }
            let qp = st.qps.get_mut(&qpn).expect("looked up above");
            if m.opt_param_mask & optpar::Q_KEY != 0 && kind == QpServiceType::UD {
                qp.qkey = m.ctx.q_key;
            }
            qp.state = to;
        }
    }
    encoded(NoPayload::<QP_SHORT_LEN>.encode())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qp_timestamp_formats_are_checked_against_sq_ts_format() {
        // (cap, ts_format, accepted): FREE_RUNNING 0, DEFAULT 1, REAL_TIME 2 against the
        // capability's 0 free-running only, 1 real-time only, 2 both.
        let table = [
            (0, 0, true),
            (0, 1, true),
            (0, 2, false),
            (1, 0, false),
            (1, 1, true),
            (1, 2, true),
            (2, 0, true),
            (2, 1, true),
            (2, 2, true),
            (2, 3, false),
        ];
        for (cap, ts, ok) in table {
            assert_eq!(ts_format_supported(cap, ts), ok, "cap {cap} ts_format {ts}");
        }
    }
}

//! UARs, protection domains, event queues and completion queues.

use firmware_cmds::mlx5::cmd::status::CmdStatus;
use firmware_cmds::mlx5::cqc::cqe_sz;
use firmware_cmds::mlx5::eqc::st as eq_st;
use firmware_cmds::mlx5::ops::cq::{CQ_SHORT_LEN, CreateCq, CreateCqOut, DestroyCq};
use firmware_cmds::mlx5::ops::eq::{CreateEq, CreateEqOut, DestroyEq, EQ_SHORT_LEN};
use firmware_cmds::mlx5::ops::pd::{AllocPd, AllocPdOut, DeallocPd, PD_LEN};
use firmware_cmds::mlx5::ops::uar::{AllocUar, AllocUarOut, DeallocUar, UAR_LEN};
use firmware_cmds::mlx5::ops::{Command, CommandOutput, NoPayload};

use super::{Failure, decode_failure, encoded, synd};
use crate::mlx5::buffer::PageList;
use crate::mlx5::config::BAR0_SIZE;
use crate::mlx5::cq::Cq;
use crate::mlx5::eq::Eq;
use crate::mlx5::state::State;

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

fn in_use() -> Failure {
    (CmdStatus::BAD_RES_STATE_ERR, synd::IN_USE)
}

fn exhausted() -> Failure {
    (CmdStatus::NO_RES_ERR, synd::EXHAUSTED)
}

/// UAR pages in BAR0 at the current UAR size.
fn bar_uar_pages(st: &State) -> u32 {
    (BAR0_SIZE / st.uar_page_size()) as u32
}

impl State {
    /// Bytes per UAR: 4 KiB with `uar_4k`, else 4 KiB << `log_uar_page_sz`.
    pub(crate) fn uar_page_size(&self) -> u64 {
        if self.caps_cur.uar_4k() {
            4096
        } else {
            4096 << self.caps_cur.log_uar_page_sz().min(4)
        }
    }
}

pub(super) fn alloc_uar(st: &mut State, input: &[u8], _: u32) -> Out {
    let _: AllocUar = decode(input)?;
    let pages = bar_uar_pages(st);
    let uar = st.alloc_uar(pages).ok_or_else(exhausted)?;
    encoded(AllocUarOut { uar }.encode())
}

pub(super) fn dealloc_uar(st: &mut State, input: &[u8], _: u32) -> Out {
    let c: DeallocUar = decode(input)?;
    if !st.uars.contains(&c.uar) {
        return Err(no_object(synd::NO_UAR));
    }
    let used = st.eqs.values().any(|e| e.uar == c.uar)
        || st.cqs.values().any(|q| q.uar == c.uar)
        || st.qps.values().any(|q| q.uar == c.uar);
    if used {
        return Err(in_use());
    }
    st.uars.remove(&c.uar);
    encoded(NoPayload::<UAR_LEN>.encode())
}

pub(super) fn alloc_pd(st: &mut State, input: &[u8], _: u32) -> Out {
    let _: AllocPd = decode(input)?;
    let limit = 1u32 << st.caps_cur.log_max_pd().min(24);
    if st.pds.len() as u32 >= limit {
        return Err(exhausted());
    }
    let mut pd = st.next_pd;
    while st.pds.contains_key(&pd) || pd == 0 {
        pd = (pd + 1) & 0x00ff_ffff;
    }
    st.next_pd = (pd + 1) & 0x00ff_ffff;
    st.pds.insert(pd, 0);
    encoded(AllocPdOut { pd }.encode())
}

pub(super) fn dealloc_pd(st: &mut State, input: &[u8], _: u32) -> Out {
    let c: DeallocPd = decode(input)?;
    match st.pds.get(&c.pd) {
        None => Err(no_object(synd::NO_PD)),
        Some(&users) if users > 0 => Err(in_use()),
        Some(_) => {
            st.pds.remove(&c.pd);
            encoded(NoPayload::<PD_LEN>.encode())
        }
    }
}

pub(super) fn create_eq(st: &mut State, input: &[u8], _: u32) -> Out {
    let c: CreateEq = decode(input)?;
    let ctx = c.ctx;
    if u32::from(ctx.log_eq_size) > st.caps_cur.log_max_eq_sz() {
        return Err(bad_param(synd::QUEUE_SIZE));
    }
    if ctx.page_offset != 0 {
        return Err(bad_param(synd::CONTEXT));
    }
    if !st.uars.contains(&ctx.uar_page) {
        return Err(no_object(synd::NO_UAR));
    }
    if u32::from(ctx.intr) >= st.cfg.msix_vectors {
        return Err(bad_param(synd::VECTOR));
    }
    let len = 64u64 << ctx.log_eq_size;
    let buf = PageList::new(&c.pas, ctx.log_page_size, len).map_err(|_| bad_param(synd::PAS))?;
    let limit = 1usize << st.caps_cur.log_max_eq().min(8);
    let eqn = (0..limit)
        .map(|n| n as u8)
        .find(|n| !st.eqs.contains_key(n))
        .ok_or_else(exhausted)?;
    st.eqs.insert(
        eqn,
        Eq::new(
            ctx.log_eq_size,
            buf,
            ctx.uar_page,
            u32::from(ctx.intr),
            c.event_bitmask,
            ctx.oi,
            ctx.st == eq_st::ARMED,
        ),
    );
    encoded(CreateEqOut { eqn }.encode())
}

pub(super) fn destroy_eq(st: &mut State, input: &[u8], _: u32) -> Out {
    let c: DestroyEq = decode(input)?;
    match st.eqs.get(&c.eqn) {
        None => Err(no_object(synd::NO_EQ)),
        Some(eq) if eq.cqs > 0 => Err(in_use()),
        Some(_) => {
            st.eqs.remove(&c.eqn);
            encoded(NoPayload::<EQ_SHORT_LEN>.encode())
        }
    }
}

pub(super) fn create_cq(st: &mut State, input: &[u8], _: u32) -> Out {
    let c: CreateCq = decode(input)?;
    let ctx = c.ctx;
    if u32::from(ctx.log_cq_size) > st.caps_cur.log_max_cq_sz() {
        return Err(bad_param(synd::QUEUE_SIZE));
    }
    let stride = match ctx.cqe_sz {
        cqe_sz::BYTES_64 => 64u32,
        cqe_sz::BYTES_128 | cqe_sz::BYTES_128_PAD => 128,
        _ => return Err(bad_param(synd::CONTEXT)),
    };
    if ctx.page_offset != 0 || ctx.cc {
        return Err(bad_param(synd::CONTEXT));
    }
    if ctx.dbr_addr % 8 != 0 {
        return Err(bad_param(synd::DBR));
    }
    if !st.uars.contains(&ctx.uar_page) {
        return Err(no_object(synd::NO_UAR));
    }
    let eqn = u8::try_from(ctx.c_eqn).map_err(|_| no_object(synd::NO_EQ))?;
    if !st.eqs.contains_key(&eqn) {
        return Err(no_object(synd::NO_EQ));
    }
    let len = u64::from(stride) << ctx.log_cq_size;
    let buf = PageList::new(&c.pas, ctx.log_page_size, len).map_err(|_| bad_param(synd::PAS))?;
    let limit = 1usize << st.caps_cur.log_max_cq().min(24);
    if st.cqs.len() >= limit {
        return Err(exhausted());
    }
    let mut cqn = st.next_cqn;
    while st.cqs.contains_key(&cqn) || cqn == 0 {
        cqn = (cqn + 1) & 0x00ff_ffff;
    }
    st.next_cqn = (cqn + 1) & 0x00ff_ffff;
    st.cqs.insert(
        cqn,
        Cq::new(
            ctx.log_cq_size,
            stride,
            buf,
            ctx.uar_page,
            eqn,
            ctx.dbr_addr,
            ctx.oi,
        ),
    );
    if let Some(eq) = st.eqs.get_mut(&eqn) {
        eq.cqs += 1;
    }
    encoded(CreateCqOut { cqn }.encode())
}

pub(super) fn destroy_cq(st: &mut State, input: &[u8], _: u32) -> Out {
    let c: DestroyCq = decode(input)?;
    match st.cqs.get(&c.cqn) {
        None => Err(no_object(synd::NO_CQ)),
        Some(cq) if cq.qps > 0 => Err(in_use()),
        Some(cq) => {
            let eqn = cq.eqn;
            st.cqs.remove(&c.cqn);
            st.faults.cq_delay.remove(&c.cqn);
            if let Some(eq) = st.eqs.get_mut(&eqn) {
                eq.cqs = eq.cqs.saturating_sub(1);
            }
            encoded(NoPayload::<CQ_SHORT_LEN>.encode())
        }
    }
}

//! QUERY_PAGES and MANAGE_PAGES, and the firmware's run-time page requests.
//!
//! The firmware asks for `boot_pages` before INIT_HCA's boot stage and `init_pages` more for
//! INIT_HCA; at run time it raises PAGE_REQUEST events (> 0 give, < 0 take back). Once
//! initialized it will not give back its working set; after TEARDOWN_HCA it gives back every
//! page.

use firmware_cmds::mlx5::cmd::status::CmdStatus;
use firmware_cmds::mlx5::eqe::{EqeEvent, page_req};
use firmware_cmds::mlx5::ops::pages::{
    ManagePages, ManagePagesOut, PAS_OFFSET, PagesKind, PagesOp, QueryPages, QueryPagesOut,
};
use firmware_cmds::mlx5::ops::pas::PAS_ENTRY;
use firmware_cmds::mlx5::ops::{Command, CommandOutput};

use super::{Failure, decode_failure, encoded, synd};
use crate::mlx5::cmdq::Unpark;
use crate::mlx5::pages::{Function, GiveProblem};
use crate::mlx5::state::{Phase, State};

type Out = Result<Vec<u8>, Failure>;

impl State {
    /// Raises a page request of `num_pages` (> 0 give, < 0 take) on behalf of another
    /// function (a VF of this PF, or the host PF of an ECPF): only the EQE; the firmware's
    /// own demand is not changed. Returns whether an EQ took the event.
    pub(crate) fn request_pages_for(&mut self, f: Function, num_pages: i32) -> bool {
        self.pages.know(f);
        self.post_event(&EqeEvent::PageRequest {
            ec_function: if f.1 { page_req::EC_FUNCTION } else { 0 },
            function_id: f.0,
            num_pages,
        })
    }

    /// Raises a run-time page request of `num_pages` (> 0 give, < 0 take). Returns whether an
    /// EQ took the event.
    pub(crate) fn request_pages(&mut self, num_pages: i32) -> bool {
        self.pages.request += i64::from(num_pages);
        if num_pages > 0 {
            self.pages.need += u64::from(num_pages.unsigned_abs());
        } else {
            self.pages.need = self
                .pages
                .need
                .saturating_sub(u64::from(num_pages.unsigned_abs()));
        }
        // On an ECPF its own function is the embedded-CPU one (`func_id_to_type`).
        let (function_id, ec) = self.pages.own;
        self.post_event(&EqeEvent::PageRequest {
            ec_function: if ec { page_req::EC_FUNCTION } else { 0 },
            function_id,
            num_pages,
        })
    }

    /// A page request moved toward settlement by `delta` pages; release parked commands when
    /// it is settled.
    fn settle(&mut self, delta: i64) {
        if self.pages.request == 0 {
            return;
        }
        let before = self.pages.request;
        self.pages.request = if before > 0 {
            (before - delta).max(0)
        } else {
            (before + delta).min(0)
        };
        if self.pages.request == 0 && !self.cmd.parked.is_empty() {
            self.cmd.unpark = Some(Unpark::Run);
        }
    }
}

pub(super) fn query_pages(st: &mut State, input: &[u8], _: u32) -> Out {
    let c = QueryPages::decode(input).map_err(|e| decode_failure(&e))?;
    // The function's own demand only: an ECPF names itself with `embedded_cpu_function`
    // (the kernel sets it from `mlx5_core_is_ecpf`); without it, function 0 is the host PF.
    if (c.function_id, c.embedded_cpu_function) != st.pages.own {
        return Err((CmdStatus::BAD_PARAM_ERR, synd::FUNCTION));
    }
    let boot = u64::from(st.cfg.boot_pages);
    let init = u64::from(st.cfg.init_pages);
    let held = st.pages.held_by(st.pages.own);
    let num_pages = match (c.kind, st.phase) {
        (PagesKind::Boot, Phase::Enabled) => boot.saturating_sub(held) as i64,
        (PagesKind::Init, Phase::Enabled) => (boot + init).saturating_sub(held).min(init) as i64,
        (PagesKind::Regular, _) => st.pages.request,
        _ => 0,
    };
    encoded(
        QueryPagesOut {
            function_id: st.pages.own.0,
            embedded_cpu_function: st.pages.own.1,
            num_pages: num_pages.clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32,
        }
        .encode(),
    )
}

pub(super) fn manage_pages(st: &mut State, input: &[u8], outlen: u32) -> Out {
    let c = ManagePages::decode(input).map_err(|e| decode_failure(&e))?;
    // Pages for other functions (VFs the firmware asked pages for, the host PF of an ECPF)
    // are held apart; only the function's own pages settle its requests. On an ECPF, a GIVE
    // for function 0 without `embedded_cpu_function` is for the host PF: accepted and held
    // apart, so the function's own INIT_HCA then lacks them (as a driver that forgot the
    // flag would find).
    let f: Function = (c.function_id, c.embedded_cpu_function);
    let own = st.pages.own;
    // A function that does not exist gets nothing and gives nothing back, as QUERY_PAGES
    // refuses it.
    if !st.pages.exists(f) {
        return Err((CmdStatus::BAD_PARAM_ERR, synd::FUNCTION));
    }
    match c.op {
        PagesOp::Give(pas) => {
            let iommu = st.iommu.clone();
            st.pages.give(&iommu, f, &pas).map_err(|p| {
                let s = match p {
                    GiveProblem::Misaligned => synd::PAGE_MISALIGNED,
                    GiveProblem::Duplicate => synd::PAGE_DUPLICATE,
                    GiveProblem::NotWritable => {
                        st.counters.snap.dma_errors += 1;
                        synd::PAGE_NOT_WRITABLE
                    }
                };
                (CmdStatus::BAD_PARAM_ERR, s)
            })?;
            if f == own && st.pages.request > 0 {
                st.settle(pas.len() as i64);
            }
            encoded(ManagePagesOut::default().encode())
        }
        PagesOp::CantGive => {
            if f == own && st.pages.request > 0 {
                st.pages.need = st.pages.need.saturating_sub(st.pages.request as u64);
                st.pages.request = 0;
                if !st.cmd.parked.is_empty() {
                    st.cmd.unpark = Some(Unpark::Fail);
                }
            }
            encoded(ManagePagesOut::default().encode())
        }
        PagesOp::Take(n) => {
            // No more pages than the output has room for.
            let room = (outlen as usize).saturating_sub(PAS_OFFSET) / PAS_ENTRY;
            let pas = st.pages.take(f, u64::from(n).min(room as u64));
            if f == own && st.pages.request < 0 {
                st.settle(pas.len() as i64);
            }
            encoded(ManagePagesOut { pas }.encode())
        }
    }
}

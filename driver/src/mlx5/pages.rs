//! Firmware pages (`pagealloc.c`): the host memory the firmware asks for, given as 4 KiB
//! leases with MANAGE_PAGES and taken back the same way, and the accounting that lets a test
//! see every page come back.
//!
//! Three paths, every MANAGE_PAGES of them on the command queue's page slot, one at a time
//! (see `cmd.rs`): the boot and init pages of the bring-up (QUERY_PAGES on an ordinary slot,
//! then GIVE); page requests the firmware raises at any time through the async EQ, answered
//! while other commands wait (GIVE, TAKE, or CAN'T GIVE when memory runs out); and the
//! reclaim of every page at teardown. A page is released only once the device returned it or
//! can no longer reach it (bus mastering off). A page request the firmware raised is never
//! left unanswered for good: when its MANAGE_PAGES, or a caller's that holds the page slot,
//! has not come back within the command timeout, the device is declared fatal.
//!
//! At close the page-request machinery is stopped before TEARDOWN_HCA
//! ([`Dev::stop_page_requests`], the kernel's `mlx5_pagealloc_stop` in `mlx5_unload`, after
//! the EQs are destroyed): the requests already queued are served (for at most
//! [`STOP_DRAIN`]), then nothing new starts; what is left is dropped and counted
//! ([`PageStats::unserved_at_close`]).

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use dma::{Access, DmaLease};
use firmware_cmds::mlx5::eqe::page_req;
use firmware_cmds::mlx5::ops::pages::{
    ManagePages, ManagePagesOut, PagesKind, PagesOp, QueryPages,
};
use firmware_cmds::mlx5::ops::pas::{ADAPTER_PAGE_SIZE, PAS_ENTRY};
use firmware_cmds::mlx5::ops::{Command, CommandOutput};
use firmware_cmds::mlx5::timeouts::Timeout;

use crate::error::DriverError;

use super::cmd;
use super::dev::Dev;
use super::wait::{Backoff, ms};

/// Most pages one request may ask for (1 GiB): a larger number is treated as a device error.
pub const MAX_PAGES_PER_REQUEST: u32 = 1 << 18;

/// Page requests kept waiting for the page slot: as many as the async EQ holds at once
/// (`NUM_ASYNC_EQE` plus the spare EQEs, 512 entries). A firmware that asks faster than one
/// MANAGE_PAGES at a time can answer (or whose page slot is stuck) has further requests
/// refused: counted in [`PageStats::refused`] and logged, never queued without bound. The
/// kernel queues a work item per request instead; its allocator is the bound there.
pub const MAX_PENDING_PAGE_REQUESTS: usize = 512;

/// The default of [`crate::verbs::HcaOptions::max_firmware_pages`]: 2^20 pages (4 GiB),
/// far above what a function's own firmware asks for (tens of MiB), room for the VFs of a
/// PF, and a bound on the host memory a runaway firmware can take.
pub const DEFAULT_MAX_FIRMWARE_PAGES: usize = 1 << 20;

/// Longest time [`Dev::stop_page_requests`] goes on starting the page requests queued at
/// close (the async EQ is gone by then, so the queue only shrinks). The kernel's
/// `flush_workqueue` has no bound of its own beyond each command's timeout; a healthy device
/// answers the [`MAX_PENDING_PAGE_REQUESTS`] the queue can hold in far less, and the
/// RECLAIM_PAGES timeout (5 s) this takes is what the close already allowed the firmware to
/// return its pages.
pub(crate) const STOP_DRAIN: Duration = Duration::from_secs(5);

/// Pages asked back per TAKE at teardown (`optimal_reclaimed_pages`: what 12 mailbox blocks
/// hold).
pub(crate) const RECLAIM_BATCH: u32 = ((16 + 12 * 512 - 16) / PAS_ENTRY) as u32;

/// A page request from the firmware (a PAGE_REQUEST EQE).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PageRequest {
    pub(crate) function_id: u16,
    pub(crate) ec_function: bool,
    /// > 0: give; < 0: take back.
    pub(crate) num_pages: i32,
}

impl PageRequest {
    /// The request a PAGE_REQUEST EQE carries. Only bit 15 of its `ec_function` word names
    /// the embedded-CPU function (`EC_FUNCTION_MASK`); the others, such as release-all (which
    /// this driver does not enable), do not.
    pub(crate) fn from_eqe(ec_function: u16, function_id: u16, num_pages: i32) -> Self {
        PageRequest {
            function_id,
            ec_function: ec_function & page_req::EC_FUNCTION != 0,
            num_pages,
        }
    }

    fn function(self) -> Function {
        Function {
            id: self.function_id,
            ec: self.ec_function,
        }
    }
}

/// The function pages are given for (the kernel's `function` key of `page_root_xa`:
/// `func_id | ec_function << 16`): the function itself (0, false), or a VF of a PF, or the
/// host PF of an embedded-CPU function. Pages are taken back from the function they were
/// given for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Function {
    pub(crate) id: u16,
    pub(crate) ec: bool,
}

/// A MANAGE_PAGES in flight on the page slot.
#[derive(Debug)]
enum PageOp {
    Give(Vec<DmaLease>),
    Take(u32),
    CantGive,
}

/// Counters of firmware pages.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PageStats {
    /// Pages given (boot, init and requests).
    pub given: u64,
    /// Pages the firmware gave back.
    pub returned: u64,
    /// Pages released without the firmware giving them back (device fatal or reclaim timed out;
    /// always after bus mastering was turned off).
    pub dropped_after_quiesce: u64,
    /// Page requests received through the EQ.
    pub requests: u64,
    /// CAN'T GIVE answers sent.
    pub cant_give: u64,
    /// Returned addresses that were not ours (or not given for the function named).
    pub bad_returns: u64,
    /// GIVE requests answered CAN'T GIVE because they would take the pages given past
    /// [`crate::verbs::HcaOptions::max_firmware_pages`] (counted in `cant_give` as well).
    pub over_limit: u64,
    /// Page requests refused because [`MAX_PENDING_PAGE_REQUESTS`] were already waiting.
    pub refused: u64,
    /// MANAGE_PAGES on the page slot that did not complete within the command timeout
    /// (the device is then fatal).
    pub timeouts: u64,
    /// Pages of GIVEs whose outcome is unknown (a timeout, a corrupt completion, a delivery
    /// error): the firmware may hold them, so they stay leased until the quiesce.
    pub unknown_outcome: u64,
    /// Page requests not served because the page machinery stopped at close: still waiting
    /// after the close served them for 5 s, or arriving after the stop.
    pub unserved_at_close: u64,
}

/// The firmware's pages and the page-request machinery.
#[derive(Debug)]
pub(crate) struct FwPages {
    /// Pages the firmware holds, by address, with the function they were given for.
    given: HashMap<u64, (Function, DmaLease)>,
    /// Most pages given, in limbo and in flight at once.
    limit: usize,
    /// Pages of a GIVE whose outcome is unknown (a timeout, a bad token, delivery or output
    /// chain; see `outcome_unknown`): kept until the device is quiesced.
    limbo: Vec<DmaLease>,
    pending: VecDeque<PageRequest>,
    /// The MANAGE_PAGES on the page slot, and when it was posted (device time).
    in_flight: Option<(PageRequest, PageOp, Duration)>,
    /// When page requests were first found waiting for a page slot that holds a caller's
    /// MANAGE_PAGES that timed out (device time); `None` while they are not blocked so.
    blocked_since: Option<Duration>,
    /// Stopped at close: no page request starts any more (the one in flight may finish).
    stopped: bool,
    pub(crate) stats: PageStats,
}

impl Default for FwPages {
    fn default() -> Self {
        FwPages::with_limit(DEFAULT_MAX_FIRMWARE_PAGES)
    }
}

impl FwPages {
    /// No page given; at most `limit` pages ever held at once.
    pub(crate) fn with_limit(limit: usize) -> Self {
        FwPages {
            given: HashMap::new(),
            limit,
            limbo: Vec::new(),
            pending: VecDeque::new(),
            in_flight: None,
            blocked_since: None,
            stopped: false,
            stats: PageStats::default(),
        }
    }

    /// Whether `n` more pages stay within the limit (pages given, in limbo and in flight
    /// count: all are leased for the firmware).
    fn room_for(&self, n: usize) -> bool {
        self.leases().saturating_add(n) <= self.limit
    }

    /// [`FwPages::room_for`] as an error naming `what` was asked (startup pages or a page
    /// request), for the caller to return or answer CAN'T GIVE with.
    fn check_room(&self, n: u32, what: &str) -> Result<(), DriverError> {
        if self.room_for(n as usize) {
            return Ok(());
        }
        Err(DriverError::DeviceUnsupported {
            what: format!(
                "{what} of {n} pages with {} already given, more than the {} allowed",
                self.leases(),
                self.limit
            ),
            hint: "raise HcaOptions::max_firmware_pages".into(),
        })
    }

    /// Pages held for function `f`.
    fn held_for(&self, f: Function) -> usize {
        self.given.values().filter(|(g, _)| *g == f).count()
    }

    /// The functions pages are held for, and how many each, in function order.
    fn holders(&self) -> Vec<(Function, usize)> {
        let mut m: std::collections::BTreeMap<Function, usize> = std::collections::BTreeMap::new();
        for (f, _) in self.given.values() {
            *m.entry(*f).or_default() += 1;
        }
        m.into_iter().collect()
    }

    /// Pages the firmware holds.
    pub(crate) fn held(&self) -> usize {
        self.given.len()
    }

    /// True while a MANAGE_PAGES answering a page request is on the page slot.
    pub(crate) fn op_in_flight(&self) -> bool {
        self.in_flight.is_some()
    }

    /// Leases held (pages given, in flight and in limbo).
    pub(crate) fn leases(&self) -> usize {
        let flying = match &self.in_flight {
            Some((_, PageOp::Give(v), _)) => v.len(),
            _ => 0,
        };
        self.given.len() + self.limbo.len() + flying
    }

    /// Queue a page request from an EQE; refused (counted, logged) when
    /// [`MAX_PENDING_PAGE_REQUESTS`] already wait, dropped (counted, logged) once stopped.
    pub(crate) fn request(&mut self, req: PageRequest) {
        self.stats.requests += 1;
        if self.stopped {
            self.stats.unserved_at_close += 1;
            tracing::warn!(
                ?req,
                "page request after the page machinery stopped: not served"
            );
            return;
        }
        if self.pending.len() >= MAX_PENDING_PAGE_REQUESTS {
            self.stats.refused += 1;
            tracing::warn!(
                ?req,
                waiting = self.pending.len(),
                "page request refused: {MAX_PENDING_PAGE_REQUESTS} already wait for the page slot"
            );
            return;
        }
        self.pending.push_back(req);
    }

    /// Start no page request from now on (close): the requests still waiting are dropped
    /// and counted; returns how many. The one in flight, if any, may still finish.
    fn stop(&mut self) -> usize {
        self.stopped = true;
        let n = self.pending.len();
        self.stats.unserved_at_close += n as u64;
        self.pending.clear();
        n
    }

    /// Requests waiting, and whether one is in flight.
    fn backlog(&self) -> (usize, bool) {
        (self.pending.len(), self.in_flight.is_some())
    }

    /// The MANAGE_PAGES on the page slot timed out: its GIVE pages (if any) may be the
    /// firmware's now, so they wait in limbo for the quiesce; the requests still waiting are
    /// dropped (the device is about to be declared fatal).
    fn op_timed_out(&mut self) -> Option<PageRequest> {
        let (req, op, _) = self.in_flight.take()?;
        self.stats.timeouts += 1;
        if let PageOp::Give(leases) = op {
            self.keep_in_limbo(leases);
        }
        self.pending.clear();
        Some(req)
    }

    /// Keep the pages of a GIVE whose outcome is unknown until the quiesce.
    fn keep_in_limbo(&mut self, leases: Vec<DmaLease>) {
        self.stats.unknown_outcome += leases.len() as u64;
        self.limbo.extend(leases);
    }

    /// Record pages the firmware accepted for `f`.
    fn accept(&mut self, f: Function, leases: Vec<DmaLease>) {
        self.stats.given += leases.len() as u64;
        for l in leases {
            self.given.insert(l.iova(), (f, l));
        }
    }

    /// Release the pages the firmware returned for `f`; addresses that are not ours, or not
    /// given for `f`, are counted and logged (the kernel's `free_4k` looks in the function's
    /// own tree), never trusted.
    fn returned(&mut self, f: Function, pas: &[u64]) -> usize {
        let mut n = 0;
        for pa in pas {
            if self.given.get(pa).is_some_and(|(g, _)| *g == f) {
                self.given.remove(pa);
                n += 1;
            } else {
                self.stats.bad_returns += 1;
                tracing::warn!(
                    addr = format_args!("{pa:#x}"),
                    function = f.id,
                    ec = f.ec,
                    "firmware returned a page the driver never gave that function"
                );
            }
        }
        self.stats.returned += n as u64;
        n
    }

    /// Drop every page: only once the device can no longer reach them.
    pub(crate) fn drop_all_after_quiesce(&mut self) {
        let n = self.given.len() + self.limbo.len();
        self.stats.dropped_after_quiesce += n as u64;
        self.given.clear();
        self.limbo.clear();
        self.pending.clear();
        if let Some((_, PageOp::Give(v), _)) = self.in_flight.take() {
            self.stats.dropped_after_quiesce += v.len() as u64;
        }
    }
}

/// Lease `n` zeroed 4 KiB pages for the firmware.
fn lease_pages(dev: &Dev, n: u32) -> Result<Vec<DmaLease>, DriverError> {
    let page = ADAPTER_PAGE_SIZE as usize;
    (0..n)
        .map(|_| {
            dev.pool
                .lease(page, page, Access::ReadWrite)
                .map_err(DriverError::from)
        })
        .collect()
}

fn check_count(what: &'static str, n: i32) -> Result<u32, DriverError> {
    let n = u32::try_from(n).map_err(|_| DriverError::BadDeviceValue {
        what,
        detail: format!("asks for {n} pages"),
    })?;
    if n > MAX_PAGES_PER_REQUEST {
        return Err(DriverError::BadDeviceValue {
            what,
            detail: format!("asks for {n} pages, more than the {MAX_PAGES_PER_REQUEST} accepted"),
        });
    }
    Ok(n)
}

impl Dev {
    /// QUERY_PAGES for `kind`, then GIVE that many pages (`mlx5_satisfy_startup_pages`) on
    /// the page slot. Both carry `embedded_cpu_function` from the function itself
    /// (`mlx5_core_is_ecpf`), not from the QUERY_PAGES output, as the kernel does.
    pub(crate) fn give_startup_pages(&self, kind: PagesKind) -> Result<(), DriverError> {
        let ecpf = self.is_ecpf();
        let q = self.exec(&QueryPages {
            kind,
            function_id: 0,
            embedded_cpu_function: ecpf,
        })?;
        if q.num_pages <= 0 {
            tracing::debug!(?kind, num_pages = q.num_pages, "no startup pages wanted");
            return Ok(());
        }
        let n = check_count("QUERY_PAGES output", q.num_pages)?;
        self.lock_pages()
            .check_room(n, &format!("a firmware request for {kind:?} startup pages"))?;
        let leases = lease_pages(self, n)?;
        let give = ManagePages {
            op: PagesOp::Give(leases.iter().map(DmaLease::iova).collect()),
            function_id: q.function_id,
            embedded_cpu_function: ecpf,
        };
        match self.exec(&give) {
            Ok(_) => {
                let f = Function {
                    id: q.function_id,
                    ec: ecpf,
                };
                self.lock_pages().accept(f, leases);
                tracing::debug!(?kind, pages = n, "startup pages given");
                Ok(())
            }
            Err(e) => {
                if super::dev::outcome_unknown(&e) {
                    // The firmware may have taken them: keep them until the device is quiesced.
                    tracing::warn!(
                        pages = leases.len(),
                        "keeping pages of a GIVE whose outcome is unknown until the quiesce: {e}"
                    );
                    self.lock_pages().keep_in_limbo(leases);
                }
                Err(e)
            }
        }
    }

    /// Serve page requests on the page slot: finish the one in flight when the device gave
    /// the slot back, then start the next (none once stopped, nor while a caller of `exec`
    /// waits for the slot). Called from the progress loop; never blocks.
    ///
    /// A MANAGE_PAGES the device has not given back within the command timeout loses the
    /// page slot for good (the firmware may still write its mailboxes, and its GIVE pages
    /// may be the firmware's): the pages go to limbo and the device is declared fatal, which
    /// quiesces it before anything is released, as the kernel's teardown after a command
    /// timeout would. Requests that cannot start because the page slot holds a caller's
    /// MANAGE_PAGES that timed out wait for the firmware to give it back for at most a
    /// command timeout, then make the device fatal too (`check_blocked`).
    pub(crate) fn service_page_requests(&self) {
        let mut pages = self.lock_pages();
        if let Some((_, _, posted_at)) = pages.in_flight {
            let (done, timeout) = {
                let st = self.lock_cmd();
                (
                    st.slot_count() > 0 && cmd::is_done(&st, st.page_slot()),
                    st.timeout,
                )
            };
            if !done {
                if self.backend.now().saturating_sub(posted_at) < timeout {
                    return;
                }
                {
                    let mut st = self.lock_cmd();
                    let slot = st.page_slot();
                    cmd::lose(&mut st, slot);
                }
                let req = pages.op_timed_out();
                drop(pages);
                self.lock_stats().cmd.timeouts += 1;
                self.enter_fatal(
                    &format!(
                        "MANAGE_PAGES for page request {req:?} timed out after {} ms on the \
                         page slot",
                        ms(timeout)
                    ),
                    false,
                );
                return;
            }
            let result = {
                let mut st = self.lock_cmd();
                let slot = st.page_slot();
                cmd::finish(&mut st, slot)
            };
            let Some((req, op, _)) = pages.in_flight.take() else {
                return;
            };
            // A GIVE whose entry came back with a bad delivery status keeps its pages without
            // passing through the refusal of a corrupt completion: counted here instead.
            let untrusted = match &result {
                Err(e) => {
                    matches!(op, PageOp::Give(_))
                        && super::dev::outcome_unknown(e)
                        && !matches!(e, DriverError::BadDeviceValue { .. })
                }
                Ok(_) => false,
            };
            let failed = result.is_err();
            page_op_done(&mut pages, req, op, result);
            if untrusted {
                self.lock_cmd().note_untrusted();
            }
            if failed {
                drop(pages);
                self.check_untrusted_budget();
                if self.is_fatal() {
                    return;
                }
                pages = self.lock_pages();
            }
        }
        while pages.in_flight.is_none() && !pages.stopped {
            let Some(req) = pages.pending.pop_front() else {
                pages.blocked_since = None;
                return;
            };
            match self.start_page_op(&mut pages, req) {
                Ok(true) => pages.blocked_since = None,
                // The slot is not free (requeued): try again on a later pass.
                Ok(false) => return self.check_blocked(pages),
                Err(e) => tracing::error!("page request {req:?} not served: {e}"),
            }
        }
    }

    /// Page requests wait for the page slot: in order while a MANAGE_PAGES holds it, but not
    /// for good while it holds one that timed out (a caller's: see [`Dev::exec`]). The
    /// firmware may give that entry back late, which frees the slot (`cmd::reap`); if it has
    /// not within a command timeout of the requests finding the slot so, the firmware's
    /// request for pages cannot be answered and the device is declared fatal, as when a page
    /// request's own MANAGE_PAGES times out. (The kernel's page work stalls behind it with
    /// no bound: a timed-out page command keeps `pages_sem` until a real completion, or the
    /// error state's `mlx5_cmd_flush`, frees the entry: `cmd.c` `mlx5_cmd_comp_handler`,
    /// "only real completion can free the cmd slot", and `cmd_ent_put`.)
    fn check_blocked(&self, mut pages: std::sync::MutexGuard<'_, FwPages>) {
        let (lost, timeout) = {
            let st = self.lock_cmd();
            (st.page_slot_lost(), st.timeout)
        };
        if !lost {
            pages.blocked_since = None;
            return;
        }
        let now = self.backend.now();
        let since = if let Some(t) = pages.blocked_since {
            t
        } else {
            tracing::warn!(
                waiting = pages.pending.len(),
                "page requests wait for the page slot, which holds a MANAGE_PAGES that timed \
                 out; the device is declared fatal unless the firmware gives it back within \
                 {} ms",
                ms(timeout)
            );
            pages.blocked_since = Some(now);
            now
        };
        if now.saturating_sub(since) < timeout {
            return;
        }
        let first = pages
            .pending
            .front()
            .map_or_else(String::new, |r| format!(" (the first {r:?})"));
        let waiting = pages.pending.len();
        drop(pages);
        self.enter_fatal(
            &format!(
                "{waiting} page requests{first} waited {} ms for the page slot, which holds a \
                 MANAGE_PAGES that timed out and that the firmware never gave back: the \
                 firmware's requests for pages cannot be answered",
                ms(timeout)
            ),
            false,
        );
    }
}

/// Account for a finished page command.
fn page_op_done(
    pages: &mut FwPages,
    req: PageRequest,
    op: PageOp,
    result: Result<Vec<u8>, DriverError>,
) {
    let result = result.and_then(|out| {
        cmd::check_status(firmware_cmds::mlx5::Opcode::MANAGE_PAGES, 0, &out)?;
        Ok(out)
    });
    match (op, result) {
        (PageOp::Give(leases), Ok(_)) => {
            tracing::debug!(
                pages = leases.len(),
                func = req.function_id,
                "pages given on request"
            );
            pages.accept(req.function(), leases);
        }
        (PageOp::Give(leases), Err(e)) if super::dev::outcome_unknown(&e) => {
            // A bad token, delivery or output chain: the firmware may have taken them.
            tracing::warn!(
                pages = leases.len(),
                "GIVE on request ended with an unknown outcome ({e}); pages kept until the \
                 quiesce"
            );
            pages.keep_in_limbo(leases);
        }
        (PageOp::Give(leases), Err(e)) => {
            // The firmware refused them: they were never its.
            tracing::warn!(
                pages = leases.len(),
                "firmware refused requested pages: {e}"
            );
        }
        (PageOp::Take(n), Ok(out)) => match ManagePagesOut::decode(&out) {
            Ok(o) if o.pas.len() <= n as usize => {
                let got = pages.returned(req.function(), &o.pas);
                tracing::debug!(asked = n, got, "pages taken back on request");
            }
            Ok(o) => tracing::error!(
                asked = n,
                got = o.pas.len(),
                "firmware returned more pages than asked (corruption); none released"
            ),
            Err(e) => tracing::error!("MANAGE_PAGES TAKE output: {e}"),
        },
        // A reclaim the firmware itself asked for and then failed is ignored, as the
        // kernel does (`reclaim_pages` with `event`).
        (PageOp::Take(_), Err(e)) => tracing::warn!("page reclaim on request failed: {e}"),
        (PageOp::CantGive, r) => {
            if let Err(e) = r {
                tracing::warn!("CAN'T GIVE notification failed: {e}");
            }
        }
    }
}

impl Dev {
    /// Post the MANAGE_PAGES answering `req` on the page slot. False when the slot is not
    /// free, or a caller of `exec` waits for it: `req` is put back first in line.
    fn start_page_op(&self, pages: &mut FwPages, req: PageRequest) -> Result<bool, DriverError> {
        if req.num_pages == 0 {
            return Ok(true);
        }
        // The slot first, so that a request put back is neither leased for nor counted twice.
        let slot = {
            let mut st = self.lock_cmd();
            if st.page_slot_wanted() {
                None
            } else {
                cmd::reserve_page_slot(&mut st)
            }
        };
        let Some(slot) = slot else {
            // The slot is busy (a MANAGE_PAGES of `exec`, or one that was lost), or `exec`
            // waits for it: try again later.
            pages.pending.push_front(req);
            return Ok(false);
        };
        let posted = self.post_page_op(pages, req, slot);
        if posted.is_err() {
            cmd::unreserve(&mut self.lock_cmd(), slot);
        }
        posted.map(|()| true)
    }

    /// Build the MANAGE_PAGES answering `req` (leasing the pages of a GIVE) and post it in
    /// the page slot, reserved by the caller.
    fn post_page_op(
        &self,
        pages: &mut FwPages,
        req: PageRequest,
        slot: usize,
    ) -> Result<(), DriverError> {
        let (op, input_op) = if req.num_pages > 0 {
            match check_count("page request EQE", req.num_pages)
                .and_then(|n| {
                    pages.check_room(n, "a page request").inspect_err(|_| {
                        pages.stats.over_limit += 1;
                    })?;
                    Ok(n)
                })
                .and_then(|n| lease_pages(self, n))
            {
                Ok(leases) => {
                    let pas = leases.iter().map(DmaLease::iova).collect();
                    (PageOp::Give(leases), PagesOp::Give(pas))
                }
                Err(e) => {
                    tracing::warn!(
                        "cannot give {} pages: {e}; answering CAN'T GIVE",
                        req.num_pages
                    );
                    pages.stats.cant_give += 1;
                    (PageOp::CantGive, PagesOp::CantGive)
                }
            }
        } else {
            let n = req.num_pages.unsigned_abs().min(MAX_PAGES_PER_REQUEST);
            (PageOp::Take(n), PagesOp::Take(n))
        };
        let m = ManagePages {
            op: input_op,
            function_id: req.function_id,
            embedded_cpu_function: req.ec_function,
        };
        let input = m.encode()?;
        let outlen = m.out_len();
        let now = self.backend.now();
        {
            let mut st = self.lock_cmd();
            cmd::post(&mut st, slot, &input, outlen, &self.pool, &self.bar, now)?;
        }
        pages.in_flight = Some((req, op, now));
        Ok(())
    }

    /// Stop the page-request machinery at close (`mlx5_pagealloc_stop`: the page-request
    /// notifier unregistered, then `flush_workqueue`, so queued requests finish and none
    /// starts after), called once the EQs are destroyed and before TEARDOWN_HCA: serve the
    /// requests already queued for at most [`STOP_DRAIN`], then start nothing more (what is
    /// left is dropped and counted in [`PageStats::unserved_at_close`]), and let the one in
    /// flight finish, as the kernel's flush waits for its command: it completes, or at the
    /// command timeout the device is declared fatal (see `service_page_requests`). Nothing
    /// to wait for in a fatal state: the device is quiesced.
    pub(crate) fn stop_page_requests(&self) {
        let mut backoff = Backoff::new(Duration::from_millis(1));
        let drain_end = self.backend.now().saturating_add(STOP_DRAIN);
        while self.fatal_reason().is_none() && self.backend.now() < drain_end {
            let (waiting, flying) = self.lock_pages().backlog();
            if waiting == 0 && !flying {
                break;
            }
            self.progress();
            backoff.pause(self.backend.as_ref(), drain_end);
        }
        let dropped = self.lock_pages().stop();
        if dropped > 0 {
            tracing::warn!(
                requests = dropped,
                "page requests still queued {} ms into the close are not served",
                ms(STOP_DRAIN)
            );
        }
        // The command timeout bounds the wait: `service_page_requests` declares the device
        // fatal when the page slot's command has not completed by then (the second is a
        // margin, never reached).
        let timeout = self.lock_cmd().timeout;
        let end = self
            .backend
            .now()
            .saturating_add(timeout)
            .saturating_add(Duration::from_secs(1));
        let mut backoff = Backoff::new(Duration::from_millis(1));
        while self.lock_pages().op_in_flight() && self.fatal_reason().is_none() {
            self.progress();
            if self.backend.now() >= end {
                break;
            }
            backoff.pause(self.backend.as_ref(), end);
        }
    }

    /// Take every page back (`mlx5_reclaim_startup_pages`): for each function pages were
    /// given for, TAKE in batches naming that function until none of its pages is left,
    /// giving up on it when the firmware returns nothing for RECLAIM_PAGES (5 s), as
    /// `mlx5_reclaim_root_pages` does per function. Every TAKE goes on the page slot. Called
    /// after [`Dev::stop_page_requests`], so no page request is served meanwhile. In a fatal
    /// state nothing is sent: the device is quiesced, so the pages are simply released.
    pub(crate) fn reclaim_all_pages(&self) -> Result<(), DriverError> {
        let timeout = Timeout::ReclaimPages.default_duration();
        let mut first_err = None;
        let mut given_up: Vec<Function> = Vec::new();
        loop {
            if self.fatal_reason().is_some() {
                self.lock_pages().drop_all_after_quiesce();
                return Ok(());
            }
            let next = self
                .lock_pages()
                .holders()
                .into_iter()
                .find(|(f, _)| !given_up.contains(f));
            let Some((f, _)) = next else {
                return first_err.map_or(Ok(()), Err);
            };
            if let Err(e) = self.reclaim_function(f, timeout) {
                tracing::warn!(function = f.id, ec = f.ec, "page reclaim: {e}");
                given_up.push(f);
                first_err.get_or_insert(e);
            }
        }
    }

    /// TAKE the pages of `f` back until none is left; a timeout when the firmware returns
    /// none for `timeout`.
    fn reclaim_function(&self, f: Function, timeout: Duration) -> Result<(), DriverError> {
        let mut backoff = Backoff::new(Duration::from_millis(1));
        let mut end = self.backend.now().saturating_add(timeout);
        loop {
            if self.fatal_reason().is_some() {
                return Ok(());
            }
            let held = self.lock_pages().held_for(f);
            if held == 0 {
                return Ok(());
            }
            let n = u32::try_from(held).unwrap_or(u32::MAX).min(RECLAIM_BATCH);
            let out = self.exec(&ManagePages {
                op: PagesOp::Take(n),
                function_id: f.id,
                embedded_cpu_function: f.ec,
            })?;
            if out.pas.len() > n as usize {
                return Err(DriverError::BadDeviceValue {
                    what: "MANAGE_PAGES TAKE output",
                    detail: format!("{} pages returned for {n} asked", out.pas.len()),
                });
            }
            let got = self.lock_pages().returned(f, &out.pas);
            let now = self.backend.now();
            if got > 0 {
                end = now.saturating_add(timeout);
            } else if now >= end {
                tracing::warn!(
                    left = held,
                    function = f.id,
                    "firmware did not return all pages; giving up"
                );
                return Err(DriverError::DeviceTimeout {
                    what: format!(
                        "the firmware to return the last {held} pages of function {:#x}{}",
                        f.id,
                        if f.ec { " (embedded CPU)" } else { "" }
                    ),
                    ms: ms(timeout),
                });
            } else {
                backoff.pause(self.backend.as_ref(), end);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dma::{DmaPool, LeaseMode, SimIommu};
    use std::sync::Arc;

    // `req_pages_handler`: `ec_function = be16 & EC_FUNCTION_MASK (0x8000)`; bit 14 is
    // RELEASE_ALL_PAGES_MASK, and the low bits mean nothing.
    #[test]
    fn only_bit_15_of_the_ec_function_word_names_the_embedded_cpu_function() {
        for (word, ec) in [
            (0x0000, false),
            (0x0001, false),
            (0x4000, false),
            (0x8000, true),
            (0xc000, true),
        ] {
            let r = PageRequest::from_eqe(word, 3, 8);
            assert_eq!(
                r.function(),
                Function { id: 3, ec },
                "ec_function word {word:#06x}"
            );
            assert_eq!(r.num_pages, 8);
        }
    }

    fn leases(n: usize) -> (DmaPool, Vec<DmaLease>) {
        let pool = DmaPool::new(Arc::new(SimIommu::new()), LeaseMode::Pooled).unwrap();
        let v = (0..n)
            .map(|_| pool.lease(4096, 4096, Access::ReadWrite).unwrap())
            .collect();
        (pool, v)
    }

    #[test]
    fn pages_given_and_returned_are_accounted() {
        let (pool, v) = leases(4);
        let iovas: Vec<u64> = v.iter().map(DmaLease::iova).collect();
        assert!(iovas.iter().all(|a| a % 4096 == 0), "4 KiB aligned");
        let mut p = FwPages::default();
        p.accept(OWN, v);
        assert_eq!(p.held(), 4);
        assert_eq!(pool.accounting().leases_out, 4);
        // Two ours, one stranger.
        assert_eq!(p.returned(OWN, &[iovas[1], 0xdead_0000, iovas[3]]), 2);
        assert_eq!(p.stats.bad_returns, 1);
        assert_eq!(p.stats.returned, 2);
        assert_eq!(p.held(), 2);
        assert_eq!(pool.accounting().leases_out, 2);
        p.drop_all_after_quiesce();
        assert_eq!(p.stats.dropped_after_quiesce, 2);
        assert_eq!(pool.accounting().leases_out, 0);
    }

    const OWN: Function = Function { id: 0, ec: false };

    #[test]
    fn pages_come_back_only_from_the_function_they_were_given_for() {
        let (pool, v) = leases(3);
        let iovas: Vec<u64> = v.iter().map(DmaLease::iova).collect();
        let vf = Function { id: 5, ec: false };
        let mut p = FwPages::default();
        let mut v = v.into_iter();
        p.accept(OWN, v.by_ref().take(1).collect());
        p.accept(vf, v.collect());
        assert_eq!(p.holders(), vec![(OWN, 1), (vf, 2)]);
        // The VF's page named in a TAKE for the function itself is not released.
        assert_eq!(p.returned(OWN, &[iovas[1]]), 0);
        assert_eq!(p.stats.bad_returns, 1);
        assert_eq!(p.returned(vf, &[iovas[1], iovas[2]]), 2);
        assert_eq!(p.holders(), vec![(OWN, 1)]);
        assert_eq!(pool.accounting().leases_out, 1);
    }

    #[test]
    fn the_limit_counts_every_page_leased_for_the_firmware() {
        let (_pool, v) = leases(3);
        let mut p = FwPages::with_limit(4);
        assert!(p.room_for(4));
        assert!(!p.room_for(5));
        p.accept(OWN, v);
        assert!(p.room_for(1));
        assert!(!p.room_for(2));
    }

    #[test]
    fn page_counts_from_the_device_are_checked() {
        assert_eq!(check_count("x", 5).unwrap(), 5);
        assert!(check_count("x", -1).is_err());
        assert!(check_count("x", i32::MAX).is_err());
        assert!(check_count("x", MAX_PAGES_PER_REQUEST as i32).is_ok());
    }

    #[test]
    fn the_reclaim_batch_is_what_twelve_blocks_hold() {
        assert_eq!(RECLAIM_BATCH, 768);
    }
}

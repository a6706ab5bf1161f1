//! The command queue engine (`cmd.c`): one DMA page of 64-byte entries, one slot per command
//! in flight, mailbox chains leased per command, tokens, completion by polling the ownership
//! bit or by command EQ events, timeouts from the init segment, and the results the kernel
//! fakes once the device is in a fatal state.
//!
//! Slots `0 .. n-1` run ordinary commands; the last slot, the page slot, runs every
//! MANAGE_PAGES and nothing else, one at a time: the startup GIVEs and the reclaim TAKEs
//! (which wait here for the slot) as well as the answers to page requests (see `pages.rs`),
//! so that a page request raised while every ordinary slot waits can still be served, and
//! the firmware never has two MANAGE_PAGES at once. The kernel does the same (`cmd_exec`
//! sets `pages_queue` for every MANAGE_PAGES; `cmd_work_handler` puts such a command at
//! `max_reg_cmds`, the last slot, under `pages_sem`, a semaphore of one). A caller's
//! MANAGE_PAGES waiting for the slot goes before the page requests still queued: it waits
//! behind the one in flight only, as behind the kernel's page work, which runs one request at
//! a time, each taking `pages_sem` in turn. A command completes when the device gives its
//! entry back
//! (ownership bit clear); in event mode the driver looks at an entry only when a command EQE
//! names its slot, and falls back to polling it after [`EVENT_FALLBACK`] in case an event was
//! lost. A command that times out keeps its slot and mailboxes out of use until the device is
//! quiesced, or until the device gives its entry back late with the command's token: the
//! firmware may still write them. A page slot lost so holds page requests up for at most a
//! command timeout; then the device is declared fatal (`pages.rs`).
//!
//! Nothing in a completed entry is trusted: the delivery status, the token (which must be the
//! one posted) and every output mailbox block (inside our own chain, numbered in order,
//! carrying the token) are checked. The kernel checks the delivery status, and signatures only
//! with command checksums on (it turns them off, and so do we: `cmdif_checksum` 0), not tokens
//! or block numbers. A completion with a wrong token or a corrupt output chain is not one the
//! device can be trusted to be done with: its mailboxes are kept until the queue is freed
//! after the quiesce, while the slot goes back into use (a device still busy with it leaves
//! the next command there to time out, which then loses the slot).

use std::time::Duration;

use dma::{Access, DmaLease, DmaPool};
use firmware_cmds::mlx5::Opcode;
use firmware_cmds::mlx5::cmd::entry::{self, CmdEntry, ENTRY_SIZE, INLINE_LEN, OWNER_HW};
use firmware_cmds::mlx5::cmd::header::{InHeader, OutHeader};
use firmware_cmds::mlx5::cmd::mailbox::{self, BLOCK_ALIGN, BLOCK_SIZE, ChainCheck};
use firmware_cmds::mlx5::cmd::{CmdStatus, DeliveryStatus};
use firmware_cmds::mlx5::init_seg::{self, CmdqAddrLoSz};
use firmware_cmds::mlx5::ops::{Command, CommandOutput};

use crate::barrier;
use crate::error::DriverError;
use crate::mmio::Mmio;

use super::dev::Dev;
use super::wait::{Backoff, ms};

/// In event mode, how long a command may stay without an event before its entry is polled.
pub(crate) const EVENT_FALLBACK: Duration = Duration::from_millis(100);

/// Longest pause between two looks at a waiting command.
const MAX_POLL_PAUSE: Duration = Duration::from_millis(1);

/// Extra time the kernel allows over the command timeout in polling mode (`poll_timeout`).
const POLL_GRACE: Duration = Duration::from_secs(1);

/// Longest wait at close for commands other threads have in flight to complete, before the
/// queue memory is released under them (they then end with [`DriverError::Closed`]).
pub(crate) const CLOSE_DRAIN: Duration = Duration::from_secs(2);

/// Command completions the driver could not trust, and whose memory it therefore keeps until
/// the close, that one session tolerates: the one that uses up the budget makes the device
/// fatal. Counted: completions refused as corrupt (a wrong entry token or output chain: their
/// mailboxes are kept), commands that timed out (their slot and mailboxes are kept: the
/// firmware may still run them) and page GIVEs with an unknown outcome that were not refused
/// (a bad delivery status: their pages are kept). Commands already in flight when the budget
/// is reached may each add one more before the fatal state stops them.
///
/// Why a budget: a kept completion pins up to two mailbox chains (and a GIVE its pages) until
/// the quiesce, so a device that keeps corrupting completions would make the driver's memory
/// grow without bound over a long session, and one that loses commands would stall every
/// slot, holding each caller for a command timeout. Why eight: a healthy device gives none;
/// one or two in a session are survivable glitches (a send-queue recovery meets at most
/// four: three SQERR2RTS and a QUERY_QP), so the budget is above what one glitch costs,
/// while eight kept completions are at most sixteen chains and eight of the 31 slots.
///
/// What the kernel does (`drivers/net/ethernet/mellanox/mlx5/core/cmd.c`, `health.c`): it
/// counts no corrupt completion. It checks the delivery status and, with checksums on, the
/// signatures, and frees the mailboxes whatever it found. A timed-out command leaks its slot
/// (`wait_func`: "timeout. Will cause a leak of a command resource"; the entry stays marked
/// `MLX5_CMD_ENT_STATE_TIMEDOUT` until a real completion frees it), which the slot count
/// bounds: once every ordinary slot is stalled, `mlx5_cmd_invoke` fails new commands at once
/// with -EAGAIN ("All CMD slots are stalled, aborting command"; `mlx5_cmd_all_stalled`). The
/// device is declared in internal error only by the health poll (`check_fatal_sensors`: PCI
/// channel offline, `fw_ver` all-ones, a health syndrome with recovery required) or PCI
/// error handling; a stopped health counter (`MAX_MISSES`) is logged and reported, not fatal.
/// This driver keeps what the kernel frees, so it needs a bound of its own; it takes the
/// kernel's remedy for a device it cannot use: enter the error state (quiesce, flush in
/// software, fake the teardown commands) and reset the function at close.
pub const UNTRUSTED_COMPLETION_BUDGET: usize = 8;

/// How completions are noticed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CmdMode {
    /// Read every busy entry's ownership bit (before the command EQ exists).
    Polling,
    /// Look at an entry when a command EQE names it (after the command EQ exists).
    Events,
}

/// One command on the queue.
#[derive(Debug)]
pub(crate) struct InFlight {
    pub(crate) opcode: Opcode,
    token: u8,
    outlen: usize,
    /// Input chain (device reads): never read back, held so the lease lives until completion.
    #[allow(dead_code)]
    in_box: Option<DmaLease>,
    /// Output chain (device writes).
    out_box: Option<DmaLease>,
    posted_at: Duration,
    /// The device gave the entry back.
    done: bool,
    /// A command EQE named this slot since it was posted.
    event_seen: bool,
}

#[derive(Debug)]
enum Slot {
    Free,
    /// Reserved by a caller that is filling it in.
    Reserved,
    Busy(InFlight),
    /// Timed out or abandoned: the device may still write its mailboxes.
    Lost(InFlight),
}

/// The queue as the driver keeps it.
#[derive(Debug)]
pub(crate) struct CmdState {
    page: Option<DmaLease>,
    stride: usize,
    slots: Vec<Slot>,
    /// Slots holding a command (busy or lost): [`reap`] looks at the slots only when there is
    /// one, which it is not on most calls (every CQ poll makes one).
    watched: usize,
    token: u8,
    pub(crate) mode: CmdMode,
    /// Command timeout (`cmd_exec_to`, default 60 s).
    pub(crate) timeout: Duration,
    /// The interface is closing or closed: no command may be posted any more.
    closed: bool,
    /// Changes each time the slots are set up or released, so that a slot number taken before
    /// is never used on a queue it did not come from.
    generation: u64,
    /// Mailboxes of completions refused as corrupt (a wrong token or output chain): the
    /// device may not be done with them, so they are dropped only with the queue, after the
    /// quiesce.
    kept: Vec<DmaLease>,
    /// Completions refused as corrupt so far.
    corrupt: u64,
    /// Untrusted completions kept since the queue was set up (see
    /// [`UNTRUSTED_COMPLETION_BUDGET`]).
    untrusted: usize,
    /// Callers of [`Dev::exec`] waiting for the page slot with a MANAGE_PAGES: while there
    /// is one, page requests start nothing there (see [`CmdState::page_slot_wanted`]).
    page_waiters: usize,
}

/// Counters of the command queue.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct CmdStats {
    /// Commands completed with the entry's ownership bit seen in polling mode.
    pub polled: u64,
    /// Commands completed after a command EQE named their slot.
    pub by_event: u64,
    /// Commands completed by the event-mode fallback (no EQE within the fallback time).
    pub event_fallback: u64,
    /// Command EQE bits that named a slot with no command (or one the device still owns).
    pub spurious_events: u64,
    /// Commands that timed out.
    pub timeouts: u64,
    /// Commands answered by the driver because the device is in a fatal state.
    pub faked: u64,
    /// Completions refused because the entry came back with another token or the output
    /// mailbox chain was corrupt (their mailboxes are kept until the close).
    pub corrupt: u64,
    /// Commands that timed out and were then given back by the device after all: their
    /// slots and mailboxes were freed (their output was not used).
    pub late_completions: u64,
}

impl CmdState {
    /// A queue with no memory yet (before `init`).
    pub(crate) fn new() -> Self {
        CmdState {
            page: None,
            stride: ENTRY_SIZE,
            slots: Vec::new(),
            watched: 0,
            token: 0,
            mode: CmdMode::Polling,
            timeout: firmware_cmds::mlx5::timeouts::Timeout::Cmd.default_duration(),
            closed: false,
            generation: 0,
            kept: Vec::new(),
            corrupt: 0,
            untrusted: 0,
            page_waiters: 0,
        }
    }

    /// Count a completion the driver could not trust and keeps memory of (a refused corrupt
    /// completion, a command that timed out, a page GIVE with an unknown outcome).
    pub(crate) fn note_untrusted(&mut self) {
        self.untrusted += 1;
    }

    /// Untrusted completions kept since the queue was set up.
    pub(crate) fn untrusted_completions(&self) -> usize {
        self.untrusted
    }

    /// Completions refused as corrupt so far (see [`CmdStats::corrupt`]).
    pub(crate) fn corrupt_completions(&self) -> u64 {
        self.corrupt
    }

    /// Mailbox chains of corrupt completions kept until the queue is freed.
    pub(crate) fn kept_mailboxes(&self) -> usize {
        self.kept.len()
    }

    /// Refuse the completion of `f` as corrupt: its mailboxes are kept until the queue is
    /// freed (after the quiesce), since the device that wrote it may not be done with them.
    fn refuse(&mut self, f: InFlight, what: &'static str, detail: &str) -> DriverError {
        self.corrupt += 1;
        self.note_untrusted();
        self.kept.extend(f.in_box);
        self.kept.extend(f.out_box);
        tracing::error!(
            opcode = %f.opcode,
            "refused a corrupt command completion ({what}: {detail}); its mailboxes are kept \
             until the device is quiesced"
        );
        DriverError::BadDeviceValue {
            what,
            detail: format!(
                "{detail}; the command's outcome is unknown, so its memory is kept until the \
                 HCA is closed, and the close resets the function"
            ),
        }
    }

    /// The current generation of the slots (see [`CmdState::owns`]).
    pub(crate) fn generation(&self) -> u64 {
        self.generation
    }

    /// True when `slot`, taken in `generation`, still belongs to this queue: the queue was
    /// neither released nor set up again since.
    pub(crate) fn owns(&self, slot: usize, generation: u64) -> bool {
        generation == self.generation && slot < self.slots.len()
    }

    /// Refuse every new command from now on (close): commands already posted may finish.
    pub(crate) fn close(&mut self) {
        self.closed = true;
    }

    /// True once [`CmdState::close`] ran.
    pub(crate) fn is_closed(&self) -> bool {
        self.closed
    }

    /// Slots, the page slot included, holding a command the device has not given back or
    /// its caller has not collected yet (lost slots excluded).
    pub(crate) fn in_flight(&self) -> usize {
        self.slots
            .iter()
            .filter(|s| matches!(s, Slot::Busy(_) | Slot::Reserved))
            .count()
    }

    /// A caller of [`Dev::exec`] waits for the page slot: page requests leave it to them.
    pub(crate) fn page_slot_wanted(&self) -> bool {
        self.page_waiters > 0
    }

    /// The page slot holds a command that timed out (until the device gives it back late).
    pub(crate) fn page_slot_lost(&self) -> bool {
        matches!(self.slots.last(), Some(Slot::Lost(_)))
    }

    /// Some slot holds a command (busy or lost): [`reap`] has something to look at.
    pub(crate) fn watches_slots(&self) -> bool {
        self.watched > 0
    }

    /// Number of slots (0 before `init`).
    pub(crate) fn slot_count(&self) -> usize {
        self.slots.len()
    }

    /// The slot reserved for MANAGE_PAGES: the last one.
    pub(crate) fn page_slot(&self) -> usize {
        self.slots.len().saturating_sub(1)
    }

    /// Slots whose command timed out and that the device has not given back.
    pub(crate) fn lost_slots(&self) -> usize {
        self.slots
            .iter()
            .filter(|s| matches!(s, Slot::Lost(_)))
            .count()
    }

    /// Ordinary slots (the page slot excluded) whose command timed out and that the device
    /// has not given back.
    fn lost_ordinary_slots(&self) -> usize {
        self.lost_slots() - usize::from(self.page_slot_lost())
    }

    fn next_token(&mut self) -> u8 {
        self.token = self.token.wrapping_add(1);
        if self.token == 0 {
            self.token = 1;
        }
        self.token
    }

    fn entry_offset(&self, slot: usize) -> usize {
        slot * self.stride
    }

    /// Give every lost or abandoned slot back, dropping its mailboxes. Only once the device can
    /// no longer write them (bus mastering off, or the queue torn down).
    pub(crate) fn release_all(&mut self) {
        for s in &mut self.slots {
            *s = Slot::Free;
        }
        self.watched = 0;
    }

    /// Drop the queue page, every slot and the kept mailboxes (after the device is quiesced or
    /// disabled).
    pub(crate) fn free(&mut self) {
        self.release_all();
        self.kept.clear();
        self.untrusted = 0;
        self.slots.clear();
        self.page = None;
        self.mode = CmdMode::Polling;
        self.closed = true;
        self.generation = self.generation.wrapping_add(1);
    }

    /// Leases held: the queue page and every slot's mailboxes.
    #[cfg(test)]
    pub(crate) fn leases(&self) -> usize {
        let boxes: usize = self
            .slots
            .iter()
            .map(|s| match s {
                Slot::Busy(f) | Slot::Lost(f) => {
                    usize::from(f.in_box.is_some()) + usize::from(f.out_box.is_some())
                }
                _ => 0,
            })
            .sum();
        boxes + self.kept.len() + usize::from(self.page.is_some())
    }
}

/// Set up the command queue (`mlx5_cmd_init`): check the interface revision and geometry,
/// lease the queue page and tell the device where it is.
pub(crate) fn init(state: &mut CmdState, bar: &Mmio, pool: &DmaPool) -> Result<(), DriverError> {
    let rev = init_seg::cmdif_rev(bar.read32(init_seg::off::CMDIF_REV_FW_SUB as u64));
    if rev != init_seg::CMD_IF_REV {
        return Err(DriverError::DeviceUnsupported {
            what: format!("command interface revision {rev}"),
            hint: format!(
                "the driver speaks revision {} (ConnectX-4 and later); update the firmware",
                init_seg::CMD_IF_REV
            ),
        });
    }
    let geo = CmdqAddrLoSz::decode(bar.read32(init_seg::off::CMDQ_ADDR_L_SZ as u64));
    geo.check_geometry()
        .map_err(|e| DriverError::BadDeviceValue {
            what: "command queue geometry (cmdq_addr_l_sz)",
            detail: e.to_string(),
        })?;
    let slots = 1usize << geo.log_cmdq_size;
    let stride = 1usize << geo.log_cmdq_stride;
    if slots < 2 || stride < ENTRY_SIZE {
        return Err(DriverError::BadDeviceValue {
            what: "command queue geometry (cmdq_addr_l_sz)",
            detail: format!(
                "{slots} slots of {stride} bytes: at least 2 slots of {ENTRY_SIZE} bytes are needed"
            ),
        });
    }
    let page_size = 1usize << init_seg::ADAPTER_PAGE_SHIFT;
    let page = pool.lease(page_size, page_size, Access::ReadWrite)?;
    let iova = page.iova();
    bar.write32(init_seg::off::CMDQ_ADDR_H as u64, (iova >> 32) as u32);
    // The low 12 bits are zero: nic_interface 0 (FULL_DRIVER), size and stride read-only.
    bar.write32(init_seg::off::CMDQ_ADDR_L_SZ as u64, iova as u32);
    barrier::to_device();
    state.page = Some(page);
    state.stride = stride;
    state.slots = (0..slots).map(|_| Slot::Free).collect();
    state.watched = 0;
    state.mode = CmdMode::Polling;
    state.closed = false;
    state.generation = state.generation.wrapping_add(1);
    tracing::debug!(slots, stride, iova, "command queue set up");
    Ok(())
}

/// The opcodes whose result the kernel fakes as success when the device is in internal error
/// (`mlx5_internal_err_ret_value`), limited to the ones this driver issues or may issue.
fn faked_success(op: Opcode) -> bool {
    matches!(
        op,
        Opcode::TEARDOWN_HCA
            | Opcode::DISABLE_HCA
            | Opcode::MANAGE_PAGES
            | Opcode::DESTROY_MKEY
            | Opcode::DESTROY_EQ
            | Opcode::DESTROY_CQ
            | Opcode::DESTROY_QP
            | Opcode::DEALLOC_PD
            | Opcode::DEALLOC_UAR
            | Opcode::DETACH_FROM_MCG
            | Opcode::QP_2ERR_QP
            | Opcode::QP_2RST_QP
            | Opcode::ACCESS_REG
    )
}

/// What a command gets when it cannot be sent: a zeroed successful output for the teardown
/// opcodes, an abort error for the others.
pub(crate) fn fake_result(op: Opcode, outlen: usize, reason: &str) -> Result<Vec<u8>, DriverError> {
    if faked_success(op) {
        Ok(OutHeader::failure(CmdStatus::OK, 0, outlen))
    } else {
        Err(DriverError::CommandAborted {
            opcode: op,
            reason: reason.to_string(),
        })
    }
}

/// Place a command in `slot`: lease and frame its mailboxes, write and seal the entry, ring
/// the doorbell.
pub(crate) fn post(
    state: &mut CmdState,
    slot: usize,
    input: &[u8],
    outlen: usize,
    pool: &DmaPool,
    bar: &Mmio,
    now: Duration,
) -> Result<(), DriverError> {
    if state.closed || slot >= state.slots.len() {
        return Err(DriverError::Closed);
    }
    let header = InHeader::decode(input)?;
    let token = state.next_token();
    let inlen = u32::try_from(input.len()).map_err(|_| DriverError::Layout(too_long("input")))?;
    let outlen32 = u32::try_from(outlen).map_err(|_| DriverError::Layout(too_long("output")))?;

    let (in_box, in_inline, in_ptr) = frame_chain(pool, input, token, Access::Read)?;
    let zeros = vec![0u8; outlen];
    let (out_box, _, out_ptr) = frame_chain(pool, &zeros, token, Access::ReadWrite)?;

    let raw =
        CmdEntry::new_request(in_inline, inlen, in_ptr, outlen32, out_ptr, token).encode_sealed();
    let off = state.entry_offset(slot);
    let page = state.page.as_ref().ok_or(DriverError::Closed)?;
    page.write(off, &raw)?;
    if !matches!(state.slots[slot], Slot::Busy(_) | Slot::Lost(_)) {
        state.watched += 1;
    }
    state.slots[slot] = Slot::Busy(InFlight {
        opcode: header.opcode,
        token,
        outlen,
        in_box,
        out_box,
        posted_at: now,
        done: false,
        event_seen: false,
    });
    // The entry and the mailboxes must be visible before the device is told to read them.
    barrier::to_device();
    bar.write32(init_seg::off::CMD_DBELL as u64, 1u32 << slot);
    tracing::trace!(slot, opcode = %header.opcode, token, "command posted");
    Ok(())
}

fn too_long(what: &'static str) -> firmware_cmds::Error {
    firmware_cmds::Error::Invalid {
        what,
        reason: "longer than 4 GiB",
    }
}

/// Lease and fill a mailbox chain for `msg`: returns the lease (None when the message fits
/// inline), the 16 inline bytes and the first block's address.
fn frame_chain(
    pool: &DmaPool,
    msg: &[u8],
    token: u8,
    access: Access,
) -> Result<(Option<DmaLease>, [u8; INLINE_LEN], u64), DriverError> {
    let n = mailbox::blocks_needed(msg.len());
    if n == 0 {
        let mut inline = [0u8; INLINE_LEN];
        inline[..msg.len()].copy_from_slice(msg);
        return Ok((None, inline, 0));
    }
    let align = BLOCK_ALIGN as usize;
    let lease = pool.lease(n * align, align, access)?;
    let addrs: Vec<u64> = (0..n).map(|i| lease.iova() + (i * align) as u64).collect();
    // Block signatures are computed even though the kernel disables checking: they cost
    // nothing and a device that checks them finds them right.
    let framed = mailbox::frame(msg, &addrs, token, true)?;
    for (i, block) in framed.blocks.iter().enumerate() {
        lease.write(i * align, &block.encode())?;
    }
    Ok((Some(lease), framed.inline, addrs[0]))
}

/// Note the slots a command EQE names (event mode).
pub(crate) fn note_event(state: &mut CmdState, vector: u32, stats: &mut CmdStats) {
    for slot in 0..state.slots.len().min(32) {
        if vector & (1 << slot) == 0 {
            continue;
        }
        match &mut state.slots[slot] {
            Slot::Busy(f) => f.event_seen = true,
            // A late completion of a command that timed out: `reap` looks at lost slots
            // anyway.
            Slot::Lost(_) => {}
            _ => stats.spurious_events += 1,
        }
    }
    let beyond = if state.slots.len() >= 32 {
        0
    } else {
        vector >> state.slots.len()
    };
    if beyond != 0 {
        stats.spurious_events += u64::from(beyond.count_ones());
    }
}

/// Look at the busy entries that may have completed and mark those the device gave back,
/// and free lost entries the device gave back late with their token. The caller checks
/// [`CmdState::watches_slots`] first (and skips the stats lock when nothing is watched);
/// with nothing watched this finds nothing.
pub(crate) fn reap(state: &mut CmdState, now: Duration, stats: &mut CmdStats) {
    debug_assert_eq!(
        state.watched,
        state
            .slots
            .iter()
            .filter(|s| matches!(s, Slot::Busy(_) | Slot::Lost(_)))
            .count(),
        "the count of busy and lost slots"
    );
    let Some(page) = state.page.as_ref() else {
        return;
    };
    let mut freed = 0;
    for (slot, s) in state.slots.iter_mut().enumerate() {
        if let Slot::Lost(f) = s {
            if late_completion(page, slot * state.stride, f) {
                tracing::warn!(
                    slot,
                    opcode = %f.opcode,
                    "a command that timed out completed late; its slot and mailboxes are free"
                );
                stats.late_completions += 1;
                *s = Slot::Free;
                freed += 1;
            }
            continue;
        }
        let Slot::Busy(f) = s else { continue };
        if f.done {
            continue;
        }
        let fallback = now.saturating_sub(f.posted_at) >= EVENT_FALLBACK;
        let look = match state.mode {
            CmdMode::Polling => true,
            CmdMode::Events => f.event_seen || fallback,
        };
        if !look {
            continue;
        }
        let Ok(own) = page.read_u8(slot * state.stride + entry::off::STATUS_OWN) else {
            continue;
        };
        if own & OWNER_HW != 0 {
            if f.event_seen {
                // The event came before the entry was given back (or was stale): keep waiting.
                stats.spurious_events += 1;
                f.event_seen = false;
            }
            continue;
        }
        f.done = true;
        match state.mode {
            CmdMode::Polling => stats.polled += 1,
            CmdMode::Events if f.event_seen => stats.by_event += 1,
            CmdMode::Events => {
                stats.event_fallback += 1;
                tracing::warn!(
                    slot,
                    opcode = %f.opcode,
                    "command completed without a command EQE; found by polling its entry"
                );
            }
        }
    }
    state.watched -= freed;
}

/// Whether the device gave back, late, the entry at `offset` of a command that timed out
/// (`f`): then the firmware is done with it and its mailboxes, as with any completion, and
/// the slot can be used again (the kernel's `mlx5_cmd_comp_handler` frees a timed-out entry
/// on its real completion the same way). Its output is not read: its caller has already
/// returned with the timeout. An entry given back with another token is not this command's
/// completion: the slot stays lost (looked at no more), its mailboxes kept until the
/// quiesce. The timeout stays counted against [`UNTRUSTED_COMPLETION_BUDGET`]: a device
/// that runs commands a command timeout late is not one to trust again.
fn late_completion(page: &DmaLease, offset: usize, f: &mut InFlight) -> bool {
    if f.done {
        return false;
    }
    let Ok(own) = page.read_u8(offset + entry::off::STATUS_OWN) else {
        return false;
    };
    if own & OWNER_HW != 0 {
        return false;
    }
    // Ownership was seen clear; read the rest of the entry only after that.
    barrier::from_device();
    match page.read_u8(offset + entry::off::TOKEN) {
        Ok(token) if token == f.token => true,
        _ => {
            f.done = true;
            false
        }
    }
}

/// True when the command in `slot` has been given back by the device.
/// False when the slot no longer exists (the queue was released).
pub(crate) fn is_done(state: &CmdState, slot: usize) -> bool {
    matches!(state.slots.get(slot), Some(Slot::Busy(f)) if f.done)
}

/// True when `slot` holds a command (done or not).
#[cfg(test)]
pub(crate) fn is_busy(state: &CmdState, slot: usize) -> bool {
    matches!(state.slots.get(slot), Some(Slot::Busy(_) | Slot::Reserved))
}

/// Reserve a free ordinary slot (never the page slot).
/// None as well once the queue is closed.
pub(crate) fn reserve(state: &mut CmdState) -> Option<usize> {
    if state.closed {
        return None;
    }
    let n = state.page_slot();
    let slot = (0..n).find(|&i| matches!(state.slots[i], Slot::Free))?;
    state.slots[slot] = Slot::Reserved;
    Some(slot)
}

/// Reserve the page slot (for a MANAGE_PAGES).
pub(crate) fn reserve_page_slot(state: &mut CmdState) -> Option<usize> {
    let slot = state.page_slot();
    if state.closed || !matches!(state.slots.get(slot), Some(Slot::Free)) {
        return None;
    }
    state.slots[slot] = Slot::Reserved;
    Some(slot)
}

/// Give back a reserved slot that was not posted.
pub(crate) fn unreserve(state: &mut CmdState, slot: usize) {
    if let Some(s @ Slot::Reserved) = state.slots.get_mut(slot) {
        *s = Slot::Free;
    }
}

/// Mark the command in `slot` lost: the device may still write its mailboxes, so they stay
/// leased until the device gives the entry back (see [`reap`]) or is quiesced. Nothing to do
/// when the queue was released (its mailboxes went with it, after the quiesce).
///
/// A command the device already gave back (reaped by another thread between its caller's
/// last look and this call) is lost as one not yet given back: `done` means "look no more"
/// on a lost slot, so keeping it would keep the slot and its mailboxes until the queue is
/// freed. The next [`reap`] then finds the entry given back, checks its token and frees it.
pub(crate) fn lose(state: &mut CmdState, slot: usize) {
    let Some(entry) = state.slots.get_mut(slot) else {
        return;
    };
    let s = std::mem::replace(entry, Slot::Free);
    *entry = match s {
        Slot::Busy(mut f) => {
            f.done = false;
            Slot::Lost(f)
        }
        Slot::Lost(f) => Slot::Lost(f),
        Slot::Free | Slot::Reserved => Slot::Free,
    };
}

/// Take the output of the completed command in `slot` and free the slot. Checks the entry's
/// delivery status and token and every output block; the output's own status is left to the
/// caller (see [`check_status`]). A wrong token or output block is
/// [`DriverError::BadDeviceValue`] (`command queue entry` / `command output mailbox`), and
/// the command's mailboxes are kept until the queue is freed. [`DriverError::Closed`] when
/// the queue was released.
pub(crate) fn finish(state: &mut CmdState, slot: usize) -> Result<Vec<u8>, DriverError> {
    let entry = state.slots.get_mut(slot).ok_or(DriverError::Closed)?;
    let s = std::mem::replace(entry, Slot::Free);
    let Slot::Busy(f) = s else {
        *entry = s;
        return Err(DriverError::BadDeviceValue {
            what: "command queue state",
            detail: format!("slot {slot} has no completed command"),
        });
    };
    state.watched -= 1;
    // Ownership was seen clear; read the rest of the entry only after that.
    barrier::from_device();
    let page = state.page.as_ref().ok_or(DriverError::Closed)?;
    let mut raw = [0u8; ENTRY_SIZE];
    page.read(slot * state.stride, &mut raw)?;
    let e = CmdEntry::decode(&raw)?;
    if e.delivery_status != DeliveryStatus::OK {
        return Err(DriverError::CommandDelivery {
            opcode: f.opcode,
            status: e.delivery_status,
        });
    }
    if e.token != f.token {
        let detail = format!(
            "{} came back with token {:#04x}, posted with {:#04x}",
            f.opcode, e.token, f.token
        );
        return Err(state.refuse(f, "command queue entry", &detail));
    }
    let out_box = f.out_box.as_ref();
    let first = out_box.map_or(0, DmaLease::iova);
    let out = mailbox::gather(
        &e.out_inline,
        f.outlen,
        first,
        ChainCheck {
            token: f.token,
            verify_signatures: false,
            output: true,
        },
        |addr| read_block(out_box, addr),
    );
    match out {
        Ok(out) => Ok(out),
        Err(err) => {
            let detail = format!("{}: {err}", f.opcode);
            Err(state.refuse(f, "command output mailbox", &detail))
        }
    }
}

/// Read one 576-byte block at `addr` if it lies inside `lease` (the device wrote the `next`
/// pointers we follow, so every address is checked against our own chain).
fn read_block(lease: Option<&DmaLease>, addr: u64) -> Option<[u8; BLOCK_SIZE]> {
    let lease = lease?;
    let off = usize::try_from(addr.checked_sub(lease.iova())?).ok()?;
    let mut b = [0u8; BLOCK_SIZE];
    lease.read(off, &mut b).ok()?;
    Some(b)
}

/// Turn a non-zero output status into [`DriverError::CommandFailed`].
pub(crate) fn check_status(op: Opcode, op_mod: u16, out: &[u8]) -> Result<(), DriverError> {
    let h = OutHeader::decode(out)?;
    if h.status.is_ok() {
        Ok(())
    } else {
        Err(DriverError::CommandFailed {
            opcode: op,
            op_mod,
            status: h.status,
            syndrome: h.syndrome,
        })
    }
}

impl Dev {
    /// Run a typed command and decode its output: on an ordinary slot, or on the page slot
    /// for MANAGE_PAGES.
    pub(crate) fn exec<C: Command>(&self, cmd: &C) -> Result<C::Output, DriverError> {
        let input = cmd.encode()?;
        let out = self.exec_raw(&input, cmd.out_len())?;
        Ok(C::Output::decode(&out)?)
    }

    /// Run a command given as raw input bytes, on an ordinary slot, or on the page slot for
    /// MANAGE_PAGES (waiting for it while another MANAGE_PAGES has it); returns its output
    /// after checking the delivery and the output status.
    pub(crate) fn exec_raw(&self, input: &[u8], outlen: usize) -> Result<Vec<u8>, DriverError> {
        let header = InHeader::decode(input)?;
        let op = header.opcode;
        if self.is_closed() {
            return Err(DriverError::Closed);
        }
        if let Some(reason) = self.fatal_reason() {
            self.lock_stats().cmd.faked += 1;
            return fake_result(op, outlen, &reason);
        }
        let start = self.backend.now();
        let timeout = self.lock_cmd().timeout;
        let deadline = start.saturating_add(timeout);
        let page_cmd = op == Opcode::MANAGE_PAGES;
        if page_cmd {
            self.lock_cmd().page_waiters += 1;
        }
        let taken = self.take_slot(op, input, outlen, page_cmd, start, deadline);
        if page_cmd {
            let mut st = self.lock_cmd();
            st.page_waiters = st.page_waiters.saturating_sub(1);
        }
        let (slot, generation) = match taken? {
            Taken::Posted { slot, generation } => (slot, generation),
            Taken::Faked(out) => return out,
        };

        let mut backoff = Backoff::new(MAX_POLL_PAUSE);
        let posted = self.backend.now();
        loop {
            self.progress();
            {
                let mut st = self.lock_cmd();
                if !st.owns(slot, generation) {
                    // The HCA was closed under this command: its memory went with the queue,
                    // after the device was quiesced.
                    return Err(DriverError::Closed);
                }
                if is_done(&st, slot) {
                    let out = finish(&mut st, slot);
                    drop(st);
                    if out.is_err() {
                        self.check_untrusted_budget();
                    }
                    let out = out?;
                    check_status(op, header.op_mod, &out)?;
                    return Ok(out);
                }
            }
            if let Some(reason) = self.fatal_reason() {
                // The device is quiesced (bus mastering off) before the state says fatal, so
                // the mailboxes can be given back now.
                let mut st = self.lock_cmd();
                if st.owns(slot, generation) {
                    lose(&mut st, slot);
                }
                drop(st);
                if self.is_closed() {
                    return Err(DriverError::Closed);
                }
                self.lock_stats().cmd.faked += 1;
                return fake_result(op, outlen, &reason);
            }
            let now = self.backend.now();
            let mode = self.lock_cmd().mode;
            let limit = match mode {
                CmdMode::Polling => timeout.saturating_add(POLL_GRACE),
                CmdMode::Events => timeout,
            };
            if now.saturating_sub(posted) >= limit {
                let mut st = self.lock_cmd();
                if !st.owns(slot, generation) {
                    return Err(DriverError::Closed);
                }
                if is_done(&st, slot) {
                    // Another thread's progress reaped it since the look above: it completed
                    // in time after all; take its output on the next turn.
                    continue;
                }
                lose(&mut st, slot);
                st.note_untrusted();
                drop(st);
                self.lock_stats().cmd.timeouts += 1;
                tracing::error!(opcode = %op, slot, "firmware command timed out");
                self.check_untrusted_budget();
                return Err(DriverError::CommandTimeout {
                    opcode: op,
                    ms: ms(limit),
                });
            }
            backoff.pause(self.backend.as_ref(), posted.saturating_add(limit));
        }
    }
}

/// How [`Dev::take_slot`] ended.
enum Taken {
    /// The command is posted in `slot` of the queue's `generation`.
    Posted { slot: usize, generation: u64 },
    /// Not posted: the result the command gets (faked after a fatal error, or an abort).
    Faked(Result<Vec<u8>, DriverError>),
}

impl Dev {
    /// Post `input` in a free slot, waiting (and driving the device) while there is none: an
    /// ordinary slot, or the page slot for a MANAGE_PAGES (`page_cmd`). Gives up at
    /// `deadline`, at the close, or at once when every slot it could use holds a command
    /// that timed out.
    fn take_slot(
        &self,
        op: Opcode,
        input: &[u8],
        outlen: usize,
        page_cmd: bool,
        start: Duration,
        deadline: Duration,
    ) -> Result<Taken, DriverError> {
        let mut backoff = Backoff::new(MAX_POLL_PAUSE);
        loop {
            {
                let mut st = self.lock_cmd();
                if st.is_closed() || st.slot_count() == 0 {
                    return Err(DriverError::Closed);
                }
                let slot = if page_cmd {
                    reserve_page_slot(&mut st)
                } else {
                    reserve(&mut st)
                };
                if let Some(slot) = slot {
                    if let Err(e) = post(&mut st, slot, input, outlen, &self.pool, &self.bar, start)
                    {
                        unreserve(&mut st, slot);
                        return Err(e);
                    }
                    return Ok(Taken::Posted {
                        slot,
                        generation: st.generation(),
                    });
                }
                if page_cmd && st.page_slot_lost() {
                    return Err(DriverError::DeviceTimeout {
                        what: format!(
                            "the page slot for {op}: it holds a MANAGE_PAGES that timed out \
                             (close the HCA and reset the function)"
                        ),
                        ms: 0,
                    });
                }
                if !page_cmd && st.lost_ordinary_slots() >= st.page_slot() {
                    return Err(DriverError::DeviceTimeout {
                        what: format!(
                            "a command slot for {op}: every ordinary slot holds a command that \
                             timed out (close the HCA and reset the function)"
                        ),
                        ms: 0,
                    });
                }
            }
            self.progress();
            if self.is_closed() {
                return Err(DriverError::Closed);
            }
            if let Some(reason) = self.fatal_reason() {
                self.lock_stats().cmd.faked += 1;
                return Ok(Taken::Faked(fake_result(op, outlen, &reason)));
            }
            if self.backend.now() >= deadline {
                self.lock_stats().cmd.timeouts += 1;
                return Ok(Taken::Faked(Err(DriverError::CommandTimeout {
                    opcode: op,
                    ms: ms(deadline.saturating_sub(start)),
                })));
            }
            backoff.pause(self.backend.as_ref(), deadline);
        }
    }
}

impl Dev {
    /// Enter the fatal state once the untrusted completions kept used up
    /// [`UNTRUSTED_COMPLETION_BUDGET`]: the device is quiesced (so nothing kept can be
    /// written any more), outstanding work completes in software with the fatal status, new
    /// commands fail at once, and the close resets the function and releases everything.
    pub(crate) fn check_untrusted_budget(&self) {
        let n = self.lock_cmd().untrusted_completions();
        if n >= UNTRUSTED_COMPLETION_BUDGET {
            self.enter_fatal(
                &format!(
                    "{n} firmware command completions could not be trusted (corrupt, timed \
                     out, or a page GIVE with an unknown outcome), the budget of \
                     {UNTRUSTED_COMPLETION_BUDGET}: the command interface is not trusted any \
                     more, and the memory kept for them is released after the quiesce"
                ),
                false,
            );
        }
    }

    /// Close the command interface (teardown, before the quiesce): refuse new commands with
    /// [`DriverError::Closed`], then give commands other threads have in flight up to `limit`
    /// of device time to complete. Returns how many are still in flight; those end with
    /// [`DriverError::Closed`] once the queue is released.
    pub(crate) fn close_commands(&self, limit: Duration) -> usize {
        self.lock_cmd().close();
        let deadline = self.backend.now().saturating_add(limit);
        let mut backoff = Backoff::new(MAX_POLL_PAUSE);
        loop {
            self.progress();
            let left = self.lock_cmd().in_flight();
            if left == 0 || self.is_fatal() || self.backend.now() >= deadline {
                return left;
            }
            backoff.pause(self.backend.as_ref(), deadline);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dma::{LeaseMode, SimIommu};
    use firmware_cmds::mlx5::cmd::mailbox::MailboxBlock;
    use firmware_cmds::mlx5::ops::hca_cap::{CapMode, QueryHcaCap};
    use firmware_cmds::mlx5::ops::pages::{ManagePages, PagesOp};
    use std::sync::Arc;

    fn pool() -> (Arc<SimIommu>, DmaPool) {
        let iommu = Arc::new(SimIommu::new());
        iommu.set_bus_master(true);
        let pool = DmaPool::new(iommu.clone(), LeaseMode::Strict).unwrap();
        (iommu, pool)
    }

    /// A queue page and two slots, without a device.
    fn state(pool: &DmaPool) -> CmdState {
        let mut st = CmdState::new();
        st.page = Some(pool.lease(4096, 4096, Access::ReadWrite).unwrap());
        st.stride = 64;
        st.slots = (0..4).map(|_| Slot::Free).collect();
        st
    }

    fn dummy_bar() -> Mmio {
        super::super::testutil::recording_bar().1
    }

    /// A QUERY_HCA_CAP posted in slot 0 with `out_len` bytes of output: the entry's IOVA and
    /// its bytes as the device sees them.
    fn posted_query(
        iommu: &SimIommu,
        pool: &DmaPool,
        st: &mut CmdState,
        out_len: usize,
    ) -> (u64, [u8; 64]) {
        let input = QueryHcaCap::general(CapMode::Max).encode().unwrap();
        post(st, 0, &input, out_len, pool, &dummy_bar(), Duration::ZERO).unwrap();
        let iova = st.page.as_ref().unwrap().iova();
        let mut raw = [0u8; 64];
        iommu.read(iova, &mut raw).unwrap();
        (iova, raw)
    }

    /// Play the device for one entry through the IOMMU: gather the input as the firmware
    /// would, and answer with `reply` (scattered into the driver's output chain).
    fn device_answers(iommu: &SimIommu, entry_iova: u64, reply: &[u8]) -> Vec<u8> {
        let mut raw = [0u8; 64];
        iommu.read(entry_iova, &mut raw).unwrap();
        assert!(CmdEntry::signature_ok(&raw), "entry signature");
        let e = CmdEntry::decode(&raw).unwrap();
        assert!(e.hw_owned);
        let check = ChainCheck {
            token: e.token,
            verify_signatures: true,
            output: false,
        };
        let read = |a: u64| {
            let mut b = [0u8; BLOCK_SIZE];
            iommu.read(a, &mut b).ok().map(|()| b)
        };
        let input = mailbox::gather(&e.in_inline, e.inlen as usize, e.in_ptr, check, read).unwrap();
        let inline = mailbox::scatter(
            reply,
            e.out_ptr,
            ChainCheck {
                output: true,
                ..check
            },
            false,
            read,
            |a, b| iommu.write(a, b).is_ok(),
        )
        .unwrap();
        let mut done = e;
        done.out_inline = inline;
        done.hw_owned = false;
        iommu.write(entry_iova, &done.encode()).unwrap();
        input
    }

    #[test]
    fn a_long_command_is_framed_into_chained_blocks_and_its_output_gathered() {
        let (iommu, pool) = pool();
        let mut st = state(&pool);
        // MANAGE_PAGES GIVE of 100 pages: 16 + 800 bytes, two input blocks.
        let pages: Vec<u64> = (1..=100).map(|i| i << 12).collect();
        let cmd = ManagePages {
            op: PagesOp::Give(pages.clone()),
            function_id: 0,
            embedded_cpu_function: false,
        };
        let input = cmd.encode().unwrap();
        // Ask for a long output to exercise the output chain too.
        let outlen = 0x1010;
        let (rec, bar) = super::super::testutil::recording_bar();
        post(&mut st, 1, &input, outlen, &pool, &bar, Duration::ZERO).unwrap();
        assert!(is_busy(&st, 1));
        assert_eq!(
            rec.take(),
            vec![(0x18, 2u32.to_be_bytes().to_vec())],
            "one doorbell: 1 << slot, big-endian, at cmd_dbell"
        );
        let entry_iova = st.page.as_ref().unwrap().iova() + 64;
        let mut reply = vec![0u8; outlen];
        for (i, b) in reply.iter_mut().enumerate().skip(8) {
            *b = (i % 251) as u8;
        }
        let seen = device_answers(&iommu, entry_iova, &reply);
        assert_eq!(seen, input, "the device gathers exactly the input");
        let mut stats = CmdStats::default();
        reap(&mut st, Duration::ZERO, &mut stats);
        assert!(is_done(&st, 1));
        assert_eq!(stats.polled, 1);
        let out = finish(&mut st, 1).unwrap();
        assert_eq!(out, reply);
        assert!(!is_busy(&st, 1));
        assert_eq!(st.leases(), 1, "only the queue page is left");
        assert_eq!(iommu.fault_count(), 0);
    }

    #[test]
    fn tokens_rotate_and_skip_zero() {
        let (_iommu, pool) = pool();
        let mut st = state(&pool);
        st.token = 0xfe;
        assert_eq!(st.next_token(), 0xff);
        assert_eq!(st.next_token(), 1);
    }

    #[test]
    fn events_mark_slots_and_stray_bits_are_counted() {
        let (_iommu, pool) = pool();
        let mut st = state(&pool);
        st.mode = CmdMode::Events;
        let bar = dummy_bar();
        let input = QueryHcaCap::general(CapMode::Current).encode().unwrap();
        post(&mut st, 0, &input, 0x1010, &pool, &bar, Duration::ZERO).unwrap();
        let mut stats = CmdStats::default();
        // Bit 0 (busy), bit 2 (free), bit 9 (beyond the queue).
        note_event(&mut st, 0b10_0000_0101, &mut stats);
        assert_eq!(stats.spurious_events, 2);
        // The device still owns the entry: the event alone does not complete it.
        reap(&mut st, Duration::ZERO, &mut stats);
        assert!(!is_done(&st, 0));
        assert_eq!(stats.spurious_events, 3);
        // Give the entry back without an event: found by the fallback only after its delay.
        let page = st.page.as_ref().unwrap();
        let own = page.read_u8(entry::off::STATUS_OWN).unwrap();
        page.write_u8(entry::off::STATUS_OWN, own & !OWNER_HW)
            .unwrap();
        reap(&mut st, Duration::from_millis(1), &mut stats);
        assert!(!is_done(&st, 0));
        reap(&mut st, EVENT_FALLBACK, &mut stats);
        assert!(is_done(&st, 0));
        assert_eq!(stats.event_fallback, 1);
    }

    #[test]
    fn a_delivery_error_is_reported_with_its_name() {
        let (iommu, pool) = pool();
        let mut st = state(&pool);
        let (iova, mut raw) = posted_query(&iommu, &pool, &mut st, 16);
        raw[entry::off::STATUS_OWN] = DeliveryStatus::TOKEN_ERR.0 << 1;
        iommu.write(iova, &raw).unwrap();
        let mut stats = CmdStats::default();
        reap(&mut st, Duration::ZERO, &mut stats);
        let err = finish(&mut st, 0).unwrap_err();
        assert!(
            matches!(err, DriverError::CommandDelivery { status, .. } if status == DeliveryStatus::TOKEN_ERR),
            "{err}"
        );
        assert!(err.to_string().contains("TOK_ERR"), "{err}");
        assert!(!is_busy(&st, 0), "the slot is free again");
    }

    #[test]
    fn an_output_chain_pointer_outside_our_mailboxes_is_rejected() {
        let (iommu, pool) = pool();
        let mut st = state(&pool);
        let (iova, mut raw) = posted_query(&iommu, &pool, &mut st, 0x1010);
        let e = CmdEntry::decode(&raw).unwrap();
        // Corrupt the first output block's `next` to point at the command page.
        let mut b = [0u8; BLOCK_SIZE];
        iommu.read(e.out_ptr, &mut b).unwrap();
        let mut block = MailboxBlock::decode(&b).unwrap();
        block.next = iova;
        iommu.write(e.out_ptr, &block.encode()).unwrap();
        raw[entry::off::STATUS_OWN] = 0;
        iommu.write(iova, &raw).unwrap();
        let mut stats = CmdStats::default();
        reap(&mut st, Duration::ZERO, &mut stats);
        let err = finish(&mut st, 0).unwrap_err();
        assert!(matches!(err, DriverError::BadDeviceValue { .. }), "{err:?}");
        assert!(!is_busy(&st, 0), "the slot goes back into use");
        assert_eq!(st.kept_mailboxes(), 1, "the output chain is kept");
        assert_eq!(st.leases(), 2, "the queue page and the kept output chain");
        assert_eq!(st.corrupt_completions(), 1);
        assert_eq!(st.untrusted_completions(), 1, "counted against the budget");
        st.free();
        assert_eq!(st.leases(), 0, "dropped with the queue, after the quiesce");
        assert_eq!(
            st.untrusted_completions(),
            0,
            "the budget is per queue set-up"
        );
    }

    #[test]
    fn an_entry_given_back_with_another_token_is_refused_and_its_mailboxes_kept() {
        let (iommu, pool) = pool();
        let mut st = state(&pool);
        let (iova, mut raw) = posted_query(&iommu, &pool, &mut st, 0x1010);
        raw[entry::off::TOKEN] ^= 0x80;
        raw[entry::off::STATUS_OWN] = 0;
        iommu.write(iova, &raw).unwrap();
        let mut stats = CmdStats::default();
        reap(&mut st, Duration::ZERO, &mut stats);
        let err = finish(&mut st, 0).unwrap_err();
        assert!(
            matches!(&err, DriverError::BadDeviceValue { what: "command queue entry", detail } if detail.contains("token")),
            "{err:?}"
        );
        assert!(!is_busy(&st, 0));
        assert_eq!(st.kept_mailboxes(), 1, "the output chain is kept");
        assert_eq!(st.corrupt_completions(), 1);
    }

    #[test]
    fn a_timed_out_command_given_back_late_frees_its_slot_and_mailboxes() {
        let (iommu, pool) = pool();
        let mut st = state(&pool);
        st.mode = CmdMode::Events;
        let (iova, mut raw) = posted_query(&iommu, &pool, &mut st, 0x1010);
        lose(&mut st, 0);
        let mut stats = CmdStats::default();
        reap(&mut st, EVENT_FALLBACK, &mut stats);
        assert_eq!(st.lost_slots(), 1, "the device still owns the entry");
        assert_eq!(st.leases(), 2, "the queue page and the output chain");
        // The device gives the entry back (its EQE names a lost slot: not spurious).
        raw[entry::off::STATUS_OWN] = 0;
        iommu.write(iova, &raw).unwrap();
        note_event(&mut st, 1, &mut stats);
        assert_eq!(stats.spurious_events, 0);
        reap(&mut st, Duration::ZERO, &mut stats);
        assert_eq!(st.lost_slots(), 0);
        assert_eq!(stats.late_completions, 1);
        assert_eq!(st.leases(), 1, "only the queue page");
        assert_eq!(reserve(&mut st), Some(0), "the slot is used again");
    }

    #[test]
    fn a_command_reaped_just_before_it_is_lost_is_freed_by_the_next_reap() {
        let (iommu, pool) = pool();
        let mut st = state(&pool);
        let (iova, mut raw) = posted_query(&iommu, &pool, &mut st, 0x1010);
        raw[entry::off::STATUS_OWN] = 0;
        iommu.write(iova, &raw).unwrap();
        let mut stats = CmdStats::default();
        // Another thread reaps it; then its caller, past its deadline, loses it.
        reap(&mut st, Duration::ZERO, &mut stats);
        assert!(is_done(&st, 0));
        lose(&mut st, 0);
        assert_eq!(st.lost_slots(), 1);
        reap(&mut st, Duration::ZERO, &mut stats);
        assert_eq!(
            st.lost_slots(),
            0,
            "the slot is not kept until the queue is freed"
        );
        assert_eq!(stats.late_completions, 1);
        assert_eq!(st.leases(), 1, "only the queue page");
        assert_eq!(reserve(&mut st), Some(0), "the slot is used again");
    }

    #[test]
    fn a_late_entry_with_another_token_leaves_the_slot_lost() {
        let (iommu, pool) = pool();
        let mut st = state(&pool);
        let (iova, mut raw) = posted_query(&iommu, &pool, &mut st, 0x1010);
        lose(&mut st, 0);
        raw[entry::off::TOKEN] ^= 0x80;
        raw[entry::off::STATUS_OWN] = 0;
        iommu.write(iova, &raw).unwrap();
        let mut stats = CmdStats::default();
        reap(&mut st, Duration::ZERO, &mut stats);
        reap(&mut st, Duration::ZERO, &mut stats);
        assert_eq!(st.lost_slots(), 1);
        assert_eq!(stats.late_completions, 0);
        assert_eq!(st.leases(), 2, "the output chain is kept until the quiesce");
        assert_eq!(reserve(&mut st), Some(1), "not slot 0");
    }

    #[test]
    fn faked_results_follow_the_kernel_list() {
        let out = fake_result(Opcode::TEARDOWN_HCA, 16, "gone").unwrap();
        assert_eq!(out, vec![0u8; 16]);
        assert!(fake_result(Opcode::MANAGE_PAGES, 16, "gone").is_ok());
        assert!(fake_result(Opcode::QP_2RST_QP, 16, "gone").is_ok());
        let err = fake_result(Opcode::CREATE_QP, 16, "gone").unwrap_err();
        assert!(
            matches!(err, DriverError::CommandAborted { opcode, .. } if opcode == Opcode::CREATE_QP)
        );
        assert!(fake_result(Opcode::MAD_IFC, 0x110, "gone").is_err());
    }

    #[test]
    fn a_slot_from_a_released_queue_is_refused_not_indexed() {
        let (_iommu, pool) = pool();
        let mut st = state(&pool);
        let bar = dummy_bar();
        let input = QueryHcaCap::general(CapMode::Max).encode().unwrap();
        let slot = reserve(&mut st).unwrap();
        post(&mut st, slot, &input, 16, &pool, &bar, Duration::ZERO).unwrap();
        let generation = st.generation();
        assert!(st.owns(slot, generation));
        assert_eq!(st.in_flight(), 1);
        st.close();
        assert_eq!(reserve(&mut st), None, "a closed queue takes no command");
        assert_eq!(reserve_page_slot(&mut st), None);
        st.free();
        assert!(!st.owns(slot, generation));
        assert!(!is_done(&st, slot));
        assert!(matches!(finish(&mut st, slot), Err(DriverError::Closed)));
        lose(&mut st, slot);
        unreserve(&mut st, slot);
        assert!(matches!(
            post(&mut st, slot, &input, 16, &pool, &bar, Duration::ZERO),
            Err(DriverError::Closed)
        ));
        assert_eq!(st.leases(), 0);
    }

    #[test]
    fn the_page_slot_counts_in_flight_and_its_loss_is_told_apart() {
        let (_iommu, pool) = pool();
        let mut st = state(&pool);
        let bar = dummy_bar();
        let input = QueryHcaCap::general(CapMode::Max).encode().unwrap();
        let page = reserve_page_slot(&mut st).unwrap();
        assert_eq!(page, 3);
        post(&mut st, page, &input, 16, &pool, &bar, Duration::ZERO).unwrap();
        assert_eq!(st.in_flight(), 1, "a command on the page slot is in flight");
        assert!(!st.page_slot_lost());
        lose(&mut st, page);
        assert!(st.page_slot_lost());
        assert_eq!(st.in_flight(), 0);
        assert_eq!(st.lost_slots(), 1);
        assert_eq!(st.lost_ordinary_slots(), 0);
        let slot = reserve(&mut st).unwrap();
        post(&mut st, slot, &input, 16, &pool, &bar, Duration::ZERO).unwrap();
        lose(&mut st, slot);
        assert_eq!(st.lost_ordinary_slots(), 1);
    }

    #[test]
    fn reserve_never_hands_out_the_page_slot() {
        let (_iommu, pool) = pool();
        let mut st = state(&pool);
        assert_eq!(reserve(&mut st), Some(0));
        assert_eq!(reserve(&mut st), Some(1));
        assert_eq!(reserve(&mut st), Some(2));
        assert_eq!(reserve(&mut st), None, "slot 3 is the page slot");
        assert_eq!(reserve_page_slot(&mut st), Some(3));
        assert_eq!(reserve_page_slot(&mut st), None);
        unreserve(&mut st, 1);
        assert_eq!(reserve(&mut st), Some(1));
    }
}

//! The command queue, on the device side: what happens when the driver rings the command
//! doorbell. For each slot: read the entry through the IOMMU, check ownership, transport
//! type, signature (when checksums are on), reserved bytes, lengths and the mailbox chains
//! (alignment, block numbers, tokens, signatures), run the command, write the output (inline
//! and mailboxes), hand the entry back with its delivery status, and post a command-completion
//! EQE if an EQ takes them.
//!
//! A command may stay pending: behind an injected page request (until MANAGE_PAGES settles
//! it on another slot) or while MAD_IFC asks the fabric's SMA (outside the device lock).
//!
//! Injected faults act here too: a lost command (never run, never given back), a withheld
//! completion (the command runs, the entry is never given back) and a corrupted one
//! ([`CmdCorruption`]: a wrong entry token, a spoiled output mailbox, a delivery status the
//! command does not deserve, or the ownership bit left set).

use std::sync::atomic::{Ordering, fence};

use firmware_cmds::Error as CodecError;
use firmware_cmds::mlx5::cmd::entry::{self, CMD_XPORT_PCI, CmdEntry, ENTRY_SIZE, INLINE_LEN};
use firmware_cmds::mlx5::cmd::header::{InHeader, OutHeader};
use firmware_cmds::mlx5::cmd::mailbox::{self, BLOCK_SIZE, ChainCheck, MailboxBlock};
use firmware_cmds::mlx5::cmd::status::{CmdStatus, DeliveryStatus};
use firmware_cmds::mlx5::eqe::EqeEvent;
use firmware_cmds::mlx5::ops::CommandOutput;
use firmware_cmds::mlx5::ops::mad_ifc::{MAD_LEN, MadIfcOut};

use super::buffer;
use super::config::{LOG_CMDQ_SIZE, MAX_CMD_MSG_LEN};
use super::counters::FetchedCommand;
use super::exec::{self, Exec};
use super::faults::CmdCorruption;
use super::regs;
use super::state::State;

/// Slots of the queue.
pub(crate) const SLOTS: u8 = 1 << LOG_CMDQ_SIZE;
/// The slot a driver keeps for MANAGE_PAGES (the kernel's `max_reg_cmds`, the last one):
/// every MANAGE_PAGES comes here, one at a time. The firmware runs any command in any slot;
/// only [`crate::mlx5::Mlx5Faults::page_request_during_command`] leaves this slot alone.
pub(crate) const PAGE_SLOT: u8 = SLOTS - 1;

/// What the device remembers of a command it is working on.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SlotCtx {
    /// Slot number.
    pub slot: u8,
    /// IOVA of the entry.
    pub addr: u64,
    /// The entry as read.
    pub raw: [u8; ENTRY_SIZE],
    /// Token of the entry and its mailboxes.
    pub token: u8,
    /// Output length the driver provided.
    pub outlen: u32,
    /// First output mailbox.
    pub out_ptr: u64,
    /// Command checksums were on when the command started.
    pub checksum: bool,
    /// Opcode (for the counters).
    pub opcode: u16,
    /// An injected corruption of this command's completion.
    pub corrupt: Option<CmdCorruption>,
}

/// A command waiting for pages.
#[derive(Debug)]
pub(crate) struct Parked {
    pub ctx: SlotCtx,
    pub input: Vec<u8>,
}

/// A command the firmware fetched and lost (see
/// [`crate::mlx5::Mlx5Faults::lose_commands`]), kept to be run late.
#[derive(Debug)]
pub(crate) struct LostCommand {
    pub parked: Parked,
    /// Its mailboxes: the firmware reads them once more at TEARDOWN_HCA or DISABLE_HCA if
    /// the command has not run by then (running it late settles them).
    pub kept: Vec<u64>,
}

/// A MAD_IFC waiting for the port's SMA.
#[derive(Debug)]
pub(crate) struct MadWork {
    pub ctx: SlotCtx,
    pub port: u8,
    pub what: PortWork,
    /// [`State::generation`] when the command began: a function reset while the port
    /// worked outside the lock leaves the answer to no one.
    pub generation: u64,
}

/// What a command needs done through a port's link, outside the device lock.
#[derive(Debug)]
pub(crate) enum PortWork {
    /// MAD_IFC: the SMA answers the MAD.
    Mad {
        mad: Box<[u8; MAD_LEN]>,
        ignore_mkey: bool,
    },
    /// ACCESS_REG PCAP write: the capability mask becomes `caps`.
    Caps(u32),
}

/// How parked commands leave the park.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unpark {
    /// The pages arrived: run them.
    Run,
    /// The driver answered ALLOCATION_FAIL: fail them with NO_RES.
    Fail,
}

/// The command slots' device-side state.
#[derive(Debug, Default)]
pub(crate) struct CmdSlots {
    /// Slots the device is working on.
    pub busy: u32,
    /// Commands waiting for a page request to be settled.
    pub parked: Vec<Parked>,
    /// Set by MANAGE_PAGES when the request that parked commands is settled.
    pub unpark: Option<Unpark>,
    /// The opcode of the command in each busy slot (meaningless while the slot is free).
    pub opcodes: [u16; SLOTS as usize],
}

fn read_block(st: &State, addr: u64) -> Option<[u8; BLOCK_SIZE]> {
    let mut b = [0u8; BLOCK_SIZE];
    buffer::read(&st.iommu, addr, &mut b).then_some(b)
}

fn chain_status(e: &CodecError) -> DeliveryStatus {
    match e {
        CodecError::Mailbox { problem, .. } => problem.delivery_status(),
        _ => DeliveryStatus::FW_ERR,
    }
}

impl State {
    /// Whether the firmware is in a state to run commands at all.
    fn runs_commands(&self) -> bool {
        !self.health.fatal && self.nic_interface == 0 && !regs::initializing(self, self.now())
    }

    /// The command doorbell rang for `slot`. Returns MAD_IFC work to do outside the lock.
    pub(crate) fn start_command(&mut self, slot: u8) -> Vec<MadWork> {
        let bit = 1u32 << slot;
        if slot >= SLOTS || !self.runs_commands() || self.cmd.busy & bit != 0 {
            self.counters.snap.cmd_doorbells_ignored += 1;
            return Vec::new();
        }
        let addr = regs::cmdq_base(self) + u64::from(slot) * ENTRY_SIZE as u64;
        let mut raw = [0u8; ENTRY_SIZE];
        if !buffer::read(&self.iommu, addr, &mut raw) {
            self.counters.snap.dma_errors += 1;
            return Vec::new();
        }
        let Ok(e) = CmdEntry::decode(&raw) else {
            return Vec::new();
        };
        if !e.hw_owned {
            self.counters.snap.cmd_doorbells_ignored += 1;
            return Vec::new();
        }
        self.cmd.busy |= bit;
        let checksum = self.caps_cur.cmdif_checksum() != 0;
        let mut ctx = SlotCtx {
            slot,
            addr,
            raw,
            token: e.token,
            outlen: e.outlen,
            out_ptr: e.out_ptr,
            checksum,
            opcode: 0,
            corrupt: None,
        };
        let input = match self.check_and_gather(&e, &raw, checksum) {
            Ok(input) => input,
            Err(status) => {
                self.finish_delivery_error(&ctx, status);
                return Vec::new();
            }
        };
        // inlen >= 8 was checked, so the header decodes.
        let header = InHeader::decode(&input).ok();
        ctx.opcode = header.map_or(0, |h| h.opcode.0);
        self.note_fetched(slot, ctx.opcode, header.map_or(0, |h| h.op_mod));
        if slot != PAGE_SLOT {
            if let Some((skip, pages)) = self.faults.page_request_on_command {
                if skip == 0 {
                    self.faults.page_request_on_command = None;
                    self.cmd.parked.push(Parked { ctx, input });
                    self.request_pages(pages);
                    return Vec::new();
                }
                self.faults.page_request_on_command = Some((skip - 1, pages));
            }
        }
        self.run(ctx, &input)
    }

    /// Remember which command `slot` holds, and add it to the record when one is kept.
    fn note_fetched(&mut self, slot: u8, opcode: u16, op_mod: u16) {
        if let Some(record) = self.counters.record.as_mut() {
            let others = (0..SLOTS)
                .filter(|&s| s != slot && self.cmd.busy & (1u32 << s) != 0)
                .map(|s| (s, self.cmd.opcodes[usize::from(s)]))
                .collect();
            record.push(FetchedCommand {
                slot,
                opcode,
                op_mod,
                others,
            });
        }
        self.cmd.opcodes[usize::from(slot)] = opcode;
    }

    /// The delivery checks, then the input message.
    fn check_and_gather(
        &mut self,
        e: &CmdEntry,
        raw: &[u8; ENTRY_SIZE],
        checksum: bool,
    ) -> Result<Vec<u8>, DeliveryStatus> {
        if e.ty != CMD_XPORT_PCI {
            return Err(DeliveryStatus::CMD_DESCR_ERR);
        }
        if checksum && !CmdEntry::signature_ok(raw) {
            return Err(DeliveryStatus::SIGNATURE_ERR);
        }
        // Bytes 0x01..0x04 and 0x3e are reserved.
        if raw[1..4].iter().any(|&b| b != 0) || raw[0x3e] != 0 {
            return Err(DeliveryStatus::RES_FLD_NOT_CLR_ERR);
        }
        if e.inlen < 8 || e.inlen > MAX_CMD_MSG_LEN {
            return Err(DeliveryStatus::IN_LENGTH_ERR);
        }
        if e.outlen < 8 || e.outlen > MAX_CMD_MSG_LEN {
            return Err(DeliveryStatus::OUT_LENGTH_ERR);
        }
        let input = mailbox::gather(
            &e.in_inline,
            e.inlen as usize,
            e.in_ptr,
            ChainCheck {
                token: e.token,
                verify_signatures: checksum,
                output: false,
            },
            |a| read_block(self, a),
        )
        .map_err(|err| chain_status(&err))?;
        if e.outlen as usize > INLINE_LEN {
            // Walk the output chain before running anything: a command whose answer cannot be
            // delivered must not take effect.
            mailbox::gather(
                &[0; INLINE_LEN],
                e.outlen as usize,
                e.out_ptr,
                ChainCheck {
                    token: e.token,
                    verify_signatures: false,
                    output: true,
                },
                |a| read_block(self, a),
            )
            .map_err(|err| chain_status(&err))?;
        }
        Ok(input)
    }

    /// Runs a command whose delivery was good and completes it (or hands MAD_IFC out).
    fn run(&mut self, mut ctx: SlotCtx, input: &[u8]) -> Vec<MadWork> {
        if let Some((opcode, left)) = self.faults.lose {
            if opcode == ctx.opcode {
                self.faults.lose = (left > 1).then_some((opcode, left - 1));
                // Not run, and the entry stays the device's (slot busy): a timeout. The
                // fetched command's mailboxes are still the firmware's to touch.
                let kept = self.mailboxes_of(&ctx);
                self.counters.snap.commands_lost += 1;
                self.faults.lost.push(LostCommand {
                    parked: Parked {
                        ctx,
                        input: input.to_vec(),
                    },
                    kept,
                });
                return Vec::new();
            }
        }
        if let Some((opcode, how)) = self.faults.corrupt {
            if opcode == ctx.opcode {
                self.faults.corrupt = None;
                ctx.corrupt = Some(how);
                // The firmware is not done with what the command named, nor (unless the entry
                // it gives back is otherwise clean) with the command's own mailboxes.
                let mut kept = exec::memory_named(input);
                if how.keeps_mailboxes() {
                    kept.extend(self.mailboxes_of(&ctx));
                }
                self.faults.unsettled_memory.extend(kept);
            }
        }
        if self.faults.withhold == Some(ctx.opcode) {
            self.faults.withhold = None;
            // The command takes effect, but the entry stays the device's (slot busy).
            let _ = exec::execute(self, input, ctx.outlen);
            self.faults
                .unsettled_memory
                .extend(exec::memory_named(input));
            return Vec::new();
        }
        self.execute_and_finish(ctx, input)
    }

    /// The commands lost by [`crate::mlx5::Mlx5Faults::lose_commands`] run now, late, in the
    /// order they were fetched: each takes effect, its entry is given back and its command
    /// EQE posted, and the firmware is done with its mailboxes. Nothing while the firmware
    /// runs no commands (fatal, torn down): they stay lost. Returns the MAD_IFC work.
    pub(crate) fn run_lost_commands(&mut self) -> (usize, Vec<MadWork>) {
        if !self.runs_commands() {
            return (0, Vec::new());
        }
        let lost = std::mem::take(&mut self.faults.lost);
        let mut work = Vec::new();
        let n = lost.len();
        for l in lost {
            self.counters.snap.commands_run_late += 1;
            work.extend(self.execute_and_finish(l.parked.ctx, &l.parked.input));
        }
        (n, work)
    }

    /// Runs a command (no fault left to apply) and completes it, or hands MAD_IFC out.
    fn execute_and_finish(&mut self, ctx: SlotCtx, input: &[u8]) -> Vec<MadWork> {
        match exec::execute(self, input, ctx.outlen) {
            Exec::Out(out) => {
                self.finish(&ctx, Ok(out));
                self.after_command()
            }
            Exec::Fail(status, syndrome) => {
                self.finish(&ctx, Err((status, syndrome)));
                self.after_command()
            }
            Exec::Mad {
                port,
                mad,
                ignore_mkey,
            } => vec![MadWork {
                ctx,
                port,
                what: PortWork::Mad { mad, ignore_mkey },
                generation: self.generation,
            }],
            Exec::PortCaps { port, caps } => vec![MadWork {
                ctx,
                port,
                what: PortWork::Caps(caps),
                generation: self.generation,
            }],
        }
    }

    /// After a command completed: run or fail the commands a settled page request releases.
    fn after_command(&mut self) -> Vec<MadWork> {
        let Some(how) = self.cmd.unpark.take() else {
            return Vec::new();
        };
        let parked = std::mem::take(&mut self.cmd.parked);
        let mut work = Vec::new();
        for p in parked {
            match how {
                Unpark::Run => work.extend(self.run(p.ctx, &p.input)),
                Unpark::Fail => {
                    self.finish(
                        &p.ctx,
                        Err((CmdStatus::NO_RES_ERR, exec::synd::PAGES_REFUSED)),
                    );
                }
            }
        }
        work
    }

    /// Whether port work the lock was let go for is still this firmware's to finish. Not
    /// after a function reset meanwhile: the command belonged to the firmware the reset
    /// replaced (its entry, mailboxes and EQ are the old driver's), and its completion would
    /// land in what the driver set up since. Not after the firmware died meanwhile either:
    /// dead firmware completes nothing. Such a command is abandoned, never given back.
    fn port_work_current(&mut self, work: &MadWork) -> bool {
        if work.generation == self.generation && !self.health.fatal {
            return true;
        }
        self.counters.snap.commands_abandoned += 1;
        false
    }

    /// The SMA answered (or not) a MAD_IFC.
    pub(crate) fn finish_mad(
        &mut self,
        work: &MadWork,
        answer: Option<&[u8; MAD_LEN]>,
    ) -> Vec<MadWork> {
        if !self.port_work_current(work) {
            return Vec::new();
        }
        let result = match answer {
            Some(mad) => MadIfcOut { mad: *mad }
                .encode()
                .map_err(|_| (CmdStatus::INT_ERR, exec::synd::INTERNAL)),
            // The firmware discards a MAD it does not answer (mthca/mlx4 MAD_IFC semantics).
            None => Err((CmdStatus::BAD_PKT_ERR, exec::synd::MAD_DISCARDED)),
        };
        self.finish(&work.ctx, result);
        self.after_command()
    }

    /// A PCAP write was applied: the port's capability mask is now `caps` (`None`: the
    /// port has no link to set it through).
    pub(crate) fn finish_caps(&mut self, work: &MadWork, caps: Option<u32>) -> Vec<MadWork> {
        use firmware_cmds::mlx5::ops::access_reg::{AccessRegOut, Pcap};
        if !self.port_work_current(work) {
            return Vec::new();
        }
        let result = match caps {
            Some(caps) => AccessRegOut {
                data: Pcap {
                    port: work.port,
                    caps,
                }
                .encode()
                .to_vec(),
            }
            .encode()
            .map_err(|_| (CmdStatus::INT_ERR, exec::synd::INTERNAL)),
            None => Err((CmdStatus::BAD_RES_STATE_ERR, exec::synd::PORT)),
        };
        self.finish(&work.ctx, result);
        self.after_command()
    }

    /// Writes the output and hands the entry back.
    fn finish(&mut self, ctx: &SlotCtx, result: Result<Vec<u8>, (CmdStatus, u32)>) {
        let (out, failed) = match result {
            Ok(out) => (out, false),
            Err((status, syndrome)) => (OutHeader::failure(status, syndrome, INLINE_LEN), true),
        };
        self.counters.command(ctx.opcode, failed);
        // The firmware writes as much of its output as the driver made room for.
        let n = out.len().min(ctx.outlen as usize);
        let iommu = self.iommu.clone();
        let inline = mailbox::scatter(
            &out[..n],
            ctx.out_ptr,
            ChainCheck {
                token: ctx.token,
                verify_signatures: false,
                output: true,
            },
            ctx.checksum,
            |a| read_block(self, a),
            |a, b| buffer::write(&iommu, a, b),
        );
        match inline {
            Ok(inline) => {
                if let Some(how) = ctx.corrupt {
                    self.spoil_output(ctx, how);
                }
                self.hand_back(ctx, Some(&inline), DeliveryStatus::OK);
            }
            Err(e) => self.hand_back(ctx, None, chain_status(&e)),
        }
    }

    /// The addresses of the blocks of a command's input and output chains (as far as they
    /// can be followed).
    fn mailboxes_of(&self, ctx: &SlotCtx) -> Vec<u64> {
        let Ok(e) = CmdEntry::decode(&ctx.raw) else {
            return Vec::new();
        };
        let mut addrs = Vec::new();
        for (first, len) in [(e.in_ptr, e.inlen), (e.out_ptr, e.outlen)] {
            let mut addr = first;
            for _ in 0..mailbox::blocks_needed(len as usize) {
                let Some(raw) = (addr != 0).then(|| read_block(self, addr)).flatten() else {
                    break;
                };
                addrs.push(addr);
                addr = MailboxBlock::decode(&raw).map_or(0, |b| b.next);
            }
        }
        addrs
    }

    /// Spoils the first output mailbox block after the output was written (the mailbox
    /// corruptions of [`CmdCorruption`]); nothing when the output has no block to spoil.
    fn spoil_output(&mut self, ctx: &SlotCtx, how: CmdCorruption) {
        let blocks = mailbox::blocks_needed(ctx.outlen as usize);
        let needs = match how {
            CmdCorruption::OutputBlockNumber | CmdCorruption::OutputBlockToken => 1,
            CmdCorruption::OutputNextOutside | CmdCorruption::OutputChainCut => 2,
            _ => return,
        };
        if blocks < needs || ctx.out_ptr == 0 {
            return;
        }
        let Some(raw) = read_block(self, ctx.out_ptr) else {
            return;
        };
        let Ok(mut block) = MailboxBlock::decode(&raw) else {
            return;
        };
        match how {
            CmdCorruption::OutputBlockNumber => block.block_num = block.block_num.wrapping_add(1),
            CmdCorruption::OutputBlockToken => block.token = ctx.token.wrapping_add(0x80),
            CmdCorruption::OutputNextOutside => block.next = regs::cmdq_base(self),
            _ => block.next = 0,
        }
        if ctx.checksum {
            block.seal();
        }
        if !buffer::write(&self.iommu, ctx.out_ptr, &block.encode()) {
            self.counters.snap.dma_errors += 1;
        }
    }

    fn finish_delivery_error(&mut self, ctx: &SlotCtx, status: DeliveryStatus) {
        self.hand_back(ctx, None, status);
    }

    /// Writes the entry's output field and status, clears ownership (last), and posts the
    /// command-completion event.
    fn hand_back(
        &mut self,
        ctx: &SlotCtx,
        inline: Option<&[u8; INLINE_LEN]>,
        status: DeliveryStatus,
    ) {
        let mut raw = ctx.raw;
        let mut status = status;
        // The ownership bit given back: clear, unless a fault leaves it set.
        let mut owner = 0;
        match ctx.corrupt {
            Some(CmdCorruption::EntryToken) => {
                raw[entry::off::TOKEN] = ctx.token.wrapping_add(0x80);
            }
            Some(CmdCorruption::DeliveryStatus(s)) => status = s,
            Some(CmdCorruption::OwnerStillSet) => owner = entry::OWNER_HW,
            _ => {}
        }
        if status != DeliveryStatus::OK {
            self.counters.snap.delivery_errors += 1;
        }
        if let Some(inline) = inline {
            raw[entry::off::OUT..entry::off::OUT + INLINE_LEN].copy_from_slice(inline);
        }
        raw[entry::off::STATUS_OWN] = ((status.0 & 0x7f) << 1) | owner;
        if ctx.checksum {
            raw[entry::off::SIG] = 0;
            raw[entry::off::SIG] = entry::signature(&raw);
        }
        let ok = buffer::write(&self.iommu, ctx.addr, &raw[..entry::off::STATUS_OWN]);
        fence(Ordering::Release);
        let ok = ok
            && self
                .iommu
                .write_u8(
                    ctx.addr + entry::off::STATUS_OWN as u64,
                    raw[entry::off::STATUS_OWN],
                )
                .is_ok();
        if !ok {
            self.counters.snap.dma_errors += 1;
        }
        // An entry left the device's stays busy: the slot is stuck, as a withheld one is.
        if owner == 0 {
            self.cmd.busy &= !(1u32 << ctx.slot);
        }
        self.fx.notify = true;
        self.post_event(&EqeEvent::Command {
            vector: 1u32 << ctx.slot,
        });
    }
}

//! Fault injection, each switchable per test, in one place: [`Mlx5Faults`], reached with
//! [`Mlx5::faults`](super::Mlx5::faults).
//!
//! | Fault | What the driver sees |
//! |---|---|
//! | [`Mlx5Faults::wqe_error`] | the Nth send or receive WQE of a QP completes with the chosen syndrome and vendor syndrome; the QP goes to SQER (send) or ERR (receive) and the WQEs after it are flushed (WR_FLUSH_ERR, vendor syndrome 0xf9) |
//! | [`Mlx5Faults::qp_to_error`] | the QP goes to ERR, every outstanding WQE is flushed, a WQ_CATAS_ERROR event is raised |
//! | [`Mlx5Faults::cqe_delay`], [`Mlx5Faults::cq_cqe_delay`] | CQEs are written that much later (by the scheduler), in order |
//! | [`Mlx5Faults::send_completion_delay`] | a QP's send completions are generated that much later, without holding back other CQEs (a looped-back response can complete first) |
//! | [`Mlx5Faults::catastrophic`] | the health buffer shows the syndrome (and RFR); commands and doorbells are no longer processed and the health counter stops, until a function reset |
//! | [`Mlx5Faults::report_syndrome`] | the health buffer shows the syndrome without RFR; the device keeps working |
//! | [`Mlx5Faults::stop_health_counter`] | the health counter stops changing |
//! | [`Mlx5Faults::fw_ver_unreachable`] | the health buffer's `fw_ver` reads all-ones |
//! | [`Mlx5Faults::remove`] | every register and config read returns all-ones, writes are ignored, DMA stops |
//! | [`Mlx5Faults::page_request`] | a PAGE_REQUEST event now |
//! | [`Mlx5Faults::page_request_for`] | a PAGE_REQUEST event now for another function (VF) |
//! | [`Mlx5Faults::page_request_during_command`] | the Nth next command stays pending behind a PAGE_REQUEST until MANAGE_PAGES settles it |
//! | [`Mlx5Faults::hold_initializing`] | the `initializing` bit stays set |
//! | [`Mlx5Faults::withhold_completion`] | the next command of an opcode takes effect but its entry is never given back (a timeout); the firmware keeps reading the queue memory or pages it named until TEARDOWN_HCA (or DISABLE_HCA, whichever comes first) |
//! | [`Mlx5Faults::lose_commands`] | the next N commands of an opcode are lost: never run (no effect) and never given back (each times out, unless [`Mlx5Faults::run_lost_commands`] runs them late); the firmware touches their mailboxes once more at TEARDOWN_HCA or DISABLE_HCA |
//! | [`Mlx5Faults::run_lost_commands`] | the lost commands take effect, late, in the order they were fetched; their entries come back and command EQEs are posted; teardown no longer touches their mailboxes |
//! | [`Mlx5Faults::corrupt_completion`] with [`CmdCorruption::EntryToken`] | the next command of an opcode takes effect and its entry is given back with a token other than the one the driver wrote; the firmware touches the command's mailboxes and the memory it named once more at TEARDOWN_HCA or DISABLE_HCA |
//! | … [`CmdCorruption::OutputBlockNumber`], [`CmdCorruption::OutputBlockToken`] | the same, with the first output mailbox block carrying a wrong `block_num` or `token` (only for an output longer than the 16 inline bytes) |
//! | … [`CmdCorruption::OutputNextOutside`], [`CmdCorruption::OutputChainCut`] | the same, with the first output block's `next` pointing at the command queue page or cut to 0 (only for an output of two blocks or more) |
//! | … [`CmdCorruption::DeliveryStatus`] | the command takes effect, but its entry comes back with the chosen delivery status (a clean entry otherwise); the memory the command named stays the firmware's until TEARDOWN_HCA or DISABLE_HCA |
//! | … [`CmdCorruption::OwnerStillSet`] | the command takes effect, the entry's output and status are written and the command-completion EQE is posted, but the ownership bit stays set and the slot busy (a timeout); the firmware touches the command's mailboxes and the memory it named once more at TEARDOWN_HCA or DISABLE_HCA |
//! | [`Mlx5Faults::command_event`] | a command-completion EQE naming slots the device has not completed anything on (a stray event) |
//! | [`Mlx5Faults::request_release`] | the VFIO REQ interrupt (the host wants the device back) |

use std::sync::atomic::Ordering;
use std::time::Duration;

use firmware_cmds::mlx5::cmd::status::DeliveryStatus;
use firmware_cmds::mlx5::eqe::{EqeEvent, EventType, queue_type};
use firmware_cmds::mlx5::health::{FW_VER_UNREACHABLE, HealthSyndrome};
use firmware_cmds::mlx5::syndrome::CqeSyndrome;

use super::Inner;
use super::state::State;
use crate::device::IrqKind;
use crate::idmap::IdMap;

/// Which work queue of a QP a WQE fault applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WqeQueue {
    /// The send queue.
    Send,
    /// The receive queue.
    Recv,
}

/// How [`Mlx5Faults::corrupt_completion`] spoils a command's completion. In every case the
/// command runs and takes effect first, as it would on firmware that goes wrong only while
/// answering.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmdCorruption {
    /// The entry is given back with a token other than the one the driver wrote. The
    /// firmware is not done with the command: it touches the command's mailboxes and the
    /// memory the command named once more at TEARDOWN_HCA or DISABLE_HCA.
    EntryToken,
    /// The first output mailbox block carries a wrong `block_num` (the entry is clean). No
    /// effect on a command whose output fits in the entry's 16 inline bytes. Mailboxes and
    /// named memory are touched later as with [`CmdCorruption::EntryToken`].
    OutputBlockNumber,
    /// The first output mailbox block carries a token other than the entry's. Same conditions
    /// as [`CmdCorruption::OutputBlockNumber`].
    OutputBlockToken,
    /// The first output mailbox block's `next` points at the command queue page instead of the
    /// second block. No effect on an output chain of fewer than two blocks.
    OutputNextOutside,
    /// The first output mailbox block's `next` is 0 although more blocks follow. No effect on
    /// an output chain of fewer than two blocks.
    OutputChainCut,
    /// The entry comes back with this delivery status although the command took effect. The
    /// entry and mailboxes are otherwise clean and the firmware is done with them, but the
    /// memory the command named stays the firmware's until TEARDOWN_HCA or DISABLE_HCA.
    DeliveryStatus(DeliveryStatus),
    /// The output and the delivery status are written and the command-completion EQE is
    /// posted, but the ownership bit stays set: the entry is never given back (a timeout),
    /// and the firmware keeps the command's mailboxes and named memory as with
    /// [`CmdCorruption::EntryToken`].
    OwnerStillSet,
}

impl CmdCorruption {
    /// Whether the firmware may still touch the command's own mailboxes after the
    /// completion: every corruption but a clean entry with a bad delivery status.
    pub(crate) fn keeps_mailboxes(self) -> bool {
        !matches!(self, CmdCorruption::DeliveryStatus(_))
    }
}

/// An armed WQE fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WqeFault {
    pub qpn: u32,
    pub queue: WqeQueue,
    /// WQEs still to pass before the one that fails (0: the next one fails).
    pub skip: u32,
    pub syndrome: CqeSyndrome,
    pub vendor_err: u8,
}

/// The faults in force.
#[derive(Debug, Default)]
pub(crate) struct FaultState {
    pub wqe: Vec<WqeFault>,
    pub cqe_delay: Duration,
    pub cq_delay: IdMap<Duration>,
    /// (commands still to pass, pages) of a page request raised while a command is pending.
    pub page_request_on_command: Option<(u32, i32)>,
    pub hold_initializing: bool,
    /// Per QP: how long after a send executes its completion is generated.
    pub send_completion_delay: IdMap<Duration>,
    /// Opcode of the next command whose completion is withheld.
    pub withhold: Option<u16>,
    /// Opcode of the commands to lose, and how many more to lose.
    pub lose: Option<(u16, u32)>,
    /// Commands lost so far, kept to be run late ([`Mlx5Faults::run_lost_commands`]).
    pub lost: Vec<super::cmdq::LostCommand>,
    /// Opcode of the next command whose completion is corrupted, and how.
    pub corrupt: Option<(u16, CmdCorruption)>,
    /// DMA addresses of commands whose completion was withheld or corrupted (memory the
    /// command named, and its mailboxes when the firmware is not done with them): the
    /// firmware still uses them, and reads them once more at TEARDOWN_HCA (or DISABLE_HCA,
    /// whichever comes first).
    pub unsettled_memory: Vec<u64>,
}

impl FaultState {
    /// Whether any fault delays CQEs (a CQE delay for all CQs or one, a late send
    /// completion): if none does, a CQE goes on at once unless its CQ holds some back.
    pub(crate) fn delays_cqes(&self) -> bool {
        !self.cqe_delay.is_zero()
            || !self.cq_delay.is_empty()
            || !self.send_completion_delay.is_empty()
    }

    /// If a fault is armed for the next WQE of `qpn`'s `queue`, counts the WQE and returns the
    /// fault when it is the one that fails.
    #[inline]
    pub(crate) fn take_wqe(&mut self, qpn: u32, queue: WqeQueue) -> Option<WqeFault> {
        if self.wqe.is_empty() {
            None
        } else {
            self.take_armed_wqe(qpn, queue)
        }
    }

    /// [`FaultState::take_wqe`] when some WQE fault is armed.
    #[cold]
    fn take_armed_wqe(&mut self, qpn: u32, queue: WqeQueue) -> Option<WqeFault> {
        let i = self
            .wqe
            .iter()
            .position(|f| f.qpn == qpn && f.queue == queue)?;
        if self.wqe[i].skip == 0 {
            Some(self.wqe.remove(i))
        } else {
            self.wqe[i].skip -= 1;
            None
        }
    }
}

/// Fault injection on one simulated ConnectX.
pub struct Mlx5Faults<'a> {
    pub(crate) inner: &'a Inner,
}

impl Mlx5Faults<'_> {
    /// The `nth` (1-based, counted from now) send or receive WQE of `qpn` completes with
    /// `syndrome` and `vendor_err` instead of being executed. Any syndrome may be chosen (the
    /// table of reference §5.5 or another). A send that fails is not transmitted; a receive
    /// that fails consumes its WQE and loses its packet.
    pub fn wqe_error(
        &self,
        qpn: u32,
        queue: WqeQueue,
        nth: u32,
        syndrome: CqeSyndrome,
        vendor_err: u8,
    ) {
        self.inner.with(|st| {
            st.faults.wqe.push(WqeFault {
                qpn,
                queue,
                skip: nth.saturating_sub(1),
                syndrome,
                vendor_err,
            });
        });
    }

    /// Moves `qpn` to ERR now, as firmware does on a work-queue catastrophic error: every
    /// outstanding WQE is flushed and a WQ_CATAS_ERROR event is posted. False if there is no
    /// such QP.
    pub fn qp_to_error(&self, qpn: u32) -> bool {
        self.inner.with(|st| {
            if !st.qps.contains_key(&qpn) {
                return false;
            }
            st.qp_to_err(qpn);
            st.post_event(&EqeEvent::QueueEvent {
                event: EventType::WQ_CATAS_ERROR,
                queue_type: queue_type::QP,
                number: qpn,
            });
            true
        })
    }

    /// Delays every CQE of every CQ by `delay` (zero: no delay).
    pub fn cqe_delay(&self, delay: Duration) {
        self.inner.with(|st| st.faults.cqe_delay = delay);
    }

    /// The send completions of `qpn` are generated `delay` after their WQE executed (zero:
    /// at once). Unlike a CQE delay, a late send completion holds back no other CQE of its
    /// CQ: a receive that completes meanwhile (the response to that very send, looped back)
    /// is written first, as hardware may do since completions are ordered per work queue,
    /// not across a QP's send and receive queues.
    pub fn send_completion_delay(&self, qpn: u32, delay: Duration) {
        self.inner.with(|st| {
            if delay.is_zero() {
                st.faults.send_completion_delay.remove(&qpn);
            } else {
                st.faults.send_completion_delay.insert(qpn, delay);
            }
        });
    }

    /// Delays the CQEs of `cqn` by `delay`, overriding [`Mlx5Faults::cqe_delay`].
    pub fn cq_cqe_delay(&self, cqn: u32, delay: Duration) {
        self.inner.with(|st| {
            st.faults.cq_delay.insert(cqn, delay);
        });
    }

    /// A catastrophic firmware error: the health buffer shows `synd`, with the
    /// recovery-flow-required bit when `recovery_required` (the kernel declares the device
    /// fatal when both are set); commands stay pending forever, doorbells are ignored and the
    /// health counter stops until a function reset.
    pub fn catastrophic(&self, synd: HealthSyndrome, recovery_required: bool) {
        self.inner.with(|st| st.fatal(synd, recovery_required));
    }

    /// A health report the firmware keeps running through: the health buffer shows `synd`
    /// (severity 4, warning) without the recovery-flow-required bit, and commands and
    /// doorbells go on being processed.
    pub fn report_syndrome(&self, synd: HealthSyndrome) {
        self.inner.with(|st| {
            st.set_health_syndrome(synd, false, 0x4);
        });
    }

    /// Stops (or restarts) the health counter; a stopped counter is what a hung firmware
    /// looks like.
    pub fn stop_health_counter(&self, stopped: bool) {
        let now = self.inner.sched.now();
        self.inner.with(|st| {
            st.health.stopped_at = if stopped {
                Some(super::regs::health_counter_value(st, now))
            } else {
                None
            };
        });
    }

    /// The health buffer's `fw_ver` reads all-ones (the kernel's "device unreachable"
    /// sensor) while the rest of the device keeps working.
    pub fn fw_ver_unreachable(&self) {
        self.inner.with(|st| st.health.fw_ver = FW_VER_UNREACHABLE);
    }

    /// Surprise removal: every register and config-space read returns all-ones, writes are
    /// ignored, and the device issues no more DMA (bus mastering off in the IOMMU).
    pub fn remove(&self) {
        self.inner.removed.store(true, Ordering::SeqCst);
        self.inner.config.set_removed();
        self.inner.iommu.set_bus_master(false);
        self.inner.sched.notify();
    }

    /// Raises a PAGE_REQUEST event now: `num_pages` > 0 asks for pages, < 0 offers pages
    /// back. False if no EQ takes page requests (QUERY_PAGES REGULAR still reports it).
    pub fn page_request(&self, num_pages: i32) -> bool {
        self.inner.with(|st| st.request_pages(num_pages))
    }

    /// Raises a PAGE_REQUEST event for another function (`function_id`, `ec_function`: a VF
    /// of this PF, or the host PF of an ECPF), as a PF's firmware does for its VFs. The pages
    /// given are held for that function and given back only by a TAKE naming it. False if
    /// no EQ takes page requests.
    pub fn page_request_for(&self, function_id: u16, ec_function: bool, num_pages: i32) -> bool {
        self.inner
            .with(|st| st.request_pages_for((function_id, ec_function), num_pages))
    }

    /// The `nth` (1-based) command started from now on a slot other than the last (the
    /// driver's page slot) raises a PAGE_REQUEST of `num_pages` and stays pending until
    /// MANAGE_PAGES has settled the request on another slot; then it runs and completes.
    pub fn page_request_during_command(&self, nth: u32, num_pages: i32) {
        self.inner.with(|st| {
            st.faults.page_request_on_command = Some((nth.saturating_sub(1), num_pages));
        });
    }

    /// Keeps the `initializing` bit set (firmware that never finishes booting).
    pub fn hold_initializing(&self, hold: bool) {
        self.inner.with(|st| st.faults.hold_initializing = hold);
    }

    /// The next command with `opcode` runs (takes effect) but its entry is never given back,
    /// so the driver times it out. The firmware keeps the memory the command named (queue
    /// buffer and doorbell record of a CREATE_CQ/EQ/QP, the pages of a MANAGE_PAGES GIVE) and
    /// reads it again at TEARDOWN_HCA (or DISABLE_HCA, whichever comes first): memory the
    /// driver released meanwhile shows up as an IOMMU fault.
    pub fn withhold_completion(&self, opcode: u16) {
        self.inner.with(|st| st.faults.withhold = Some(opcode));
    }

    /// The next `count` commands with `opcode` are lost: the firmware fetches each but never
    /// runs it (it takes no effect) nor gives its entry back (unless
    /// [`Mlx5Faults::run_lost_commands`] runs them late), so the driver times it out and the
    /// slot stays busy. Unlike [`Mlx5Faults::withhold_completion`], whose command takes
    /// effect, this is the state a driver must learn by querying: a modify that timed out
    /// and left the object as it was, safe to issue again. The firmware may still act on the
    /// fetched command, so it touches its mailboxes once more at TEARDOWN_HCA or DISABLE_HCA:
    /// mailboxes the driver released meanwhile show up as IOMMU faults. `count` 0 disarms.
    pub fn lose_commands(&self, opcode: u16, count: u32) {
        self.inner
            .with(|st| st.faults.lose = (count > 0).then_some((opcode, count)));
    }

    /// The firmware runs, late, every command it lost ([`Mlx5Faults::lose_commands`]) and
    /// still holds, in the order it fetched them: each takes effect as it would have, its
    /// entry is given back and its command EQE posted, and the firmware is done with its
    /// mailboxes (teardown no longer touches them). What a driver meets when a command it
    /// timed out completes after all: the slot it kept busy comes back. Nothing while the
    /// firmware runs no commands (fatal, torn down). Returns how many ran; counted in
    /// `Mlx5Counters::commands_run_late`.
    pub fn run_lost_commands(&self) -> usize {
        let (n, work) = self.inner.with(State::run_lost_commands);
        self.inner.drive(work);
        n
    }

    /// Commands still to be lost by [`Mlx5Faults::lose_commands`].
    pub fn commands_left_to_lose(&self) -> u32 {
        self.inner.with(|st| st.faults.lose.map_or(0, |(_, n)| n))
    }

    /// The next command with `opcode` runs (takes effect) and its completion is spoiled as
    /// `how` says (see [`CmdCorruption`]). The firmware keeps the memory the command named
    /// (and, unless the entry is otherwise clean, the command's mailboxes) and reads it again
    /// at TEARDOWN_HCA or DISABLE_HCA: memory the driver released meanwhile shows up as an
    /// IOMMU fault.
    pub fn corrupt_completion(&self, opcode: u16, how: CmdCorruption) {
        self.inner
            .with(|st| st.faults.corrupt = Some((opcode, how)));
    }

    /// Posts a command-completion EQE whose `vector` names slots the device completed nothing
    /// on (a stray or repeated event; bits beyond the queue may be set). False if no EQ takes
    /// command events.
    pub fn command_event(&self, vector: u32) -> bool {
        self.inner
            .with(|st| st.post_event(&EqeEvent::Command { vector }))
    }

    /// Raises the REQ interrupt: the host asks for the device back (vfio-pci's device
    /// request). False if no handler is installed.
    pub fn request_release(&self) -> bool {
        self.inner.irqs.raise(IrqKind::Req, 0)
    }
}

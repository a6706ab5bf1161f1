//! What the model counts, for tests and for `hca` tools to observe: commands by opcode,
//! delivery errors, work requests, completions, events, packets sent, received and dropped
//! (by reason), and the doorbells and DMA the device refused.

use std::collections::BTreeMap;

/// Why a packet that reached a port was not placed in a receive queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DropReason {
    /// No QP with the destination QPN on this port.
    NoQp,
    /// The destination QP is not in a state that receives (RTR, RTS, SQER, SQD).
    QpState,
    /// A packet for QP0 that did not arrive on VL15, or a VL15 packet for another QP.
    WrongVl,
    /// The Q_Key does not match the QP's (QP1: 0x80010000).
    BadQkey,
    /// The P_Key is not in the port's table (QP1) or not the QP's (UD).
    BadPkey,
    /// The receive queue had no posted WQE.
    NoRecvWqe,
    /// The port has no link to a fabric (a send went nowhere).
    NoLink,
    /// The device is removed or its firmware dead.
    DeviceDown,
}

impl DropReason {
    /// Every reason, for reports.
    pub const ALL: [DropReason; 8] = [
        DropReason::NoQp,
        DropReason::QpState,
        DropReason::WrongVl,
        DropReason::BadQkey,
        DropReason::BadPkey,
        DropReason::NoRecvWqe,
        DropReason::NoLink,
        DropReason::DeviceDown,
    ];
}

/// A snapshot of the model's counters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Mlx5Counters {
    /// Commands completed (delivered to the firmware and answered), by opcode.
    pub commands: BTreeMap<u16, u64>,
    /// Commands answered with a non-zero status, by opcode.
    pub command_failures: BTreeMap<u16, u64>,
    /// Commands lost by the injected fault ([`crate::mlx5::Mlx5Faults::lose_commands`]):
    /// fetched, not run, not given back (unless run late:
    /// [`crate::mlx5::Mlx5Faults::run_lost_commands`]).
    pub commands_lost: u64,
    /// Lost commands the firmware ran late (`Mlx5Faults::run_lost_commands`).
    pub commands_run_late: u64,
    /// Commands whose port work (a MAD_IFC the SMA answered, a PCAP write) came back after a
    /// function reset or the firmware's death: never completed.
    pub commands_abandoned: u64,
    /// Entries completed with a non-zero delivery status.
    pub delivery_errors: u64,
    /// Command doorbells for a slot the device did not own, or while it could not run
    /// commands (initializing, busy slot, NIC interface disabled, firmware dead).
    pub cmd_doorbells_ignored: u64,
    /// Send WQEs processed (including those completed in error or flushed).
    pub send_wqes: u64,
    /// Receive WQEs consumed (including those completed in error or flushed).
    pub recv_wqes: u64,
    /// CQEs written.
    pub cqes: u64,
    /// Error CQEs written (flushes included).
    pub error_cqes: u64,
    /// Flush CQEs written (syndrome WR_FLUSH_ERR).
    pub flush_cqes: u64,
    /// CQEs lost because their CQ was in error or gone.
    pub cqes_lost: u64,
    /// EQEs written.
    pub eqes: u64,
    /// Events with no EQ subscribed to their type.
    pub events_unrouted: u64,
    /// MSI-X interrupts raised.
    pub interrupts: u64,
    /// CQ overruns.
    pub cq_overruns: u64,
    /// EQ overruns.
    pub eq_overruns: u64,
    /// Packets put on the wire.
    pub packets_sent: u64,
    /// Packets placed in a receive queue (including those completed in error).
    pub packets_received: u64,
    /// Packets dropped, by reason.
    pub packets_dropped: BTreeMap<DropReason, u64>,
    /// UAR writes that matched nothing (unallocated UAR, unknown queue, a queue of another
    /// UAR, an offset that is no doorbell).
    pub uar_writes_ignored: u64,
    /// Device DMA the IOMMU refused (each is also an IOMMU fault: a driver bug).
    pub dma_errors: u64,
    /// Function resets (FLR through the backend); the counters survive them.
    pub function_resets: u64,
}

impl Mlx5Counters {
    /// Commands of `opcode` completed.
    pub fn command_count(&self, opcode: u16) -> u64 {
        self.commands.get(&opcode).copied().unwrap_or(0)
    }

    /// Packets dropped for `reason`.
    pub fn dropped(&self, reason: DropReason) -> u64 {
        self.packets_dropped.get(&reason).copied().unwrap_or(0)
    }

    /// Packets dropped for any reason.
    pub fn dropped_total(&self) -> u64 {
        self.packets_dropped.values().sum()
    }
}

/// A command as the firmware fetched it from the queue, in a record of
/// [`crate::mlx5::Mlx5::record_commands`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchedCommand {
    /// The slot its doorbell named.
    pub slot: u8,
    /// Its opcode.
    pub opcode: u16,
    /// Its `op_mod` (for MANAGE_PAGES: 0 CAN'T GIVE, 1 GIVE, 2 TAKE).
    pub op_mod: u16,
    /// The other commands the firmware held when it fetched this one (not yet given back:
    /// running, pending behind a page request or a MAD, withheld or lost), as (slot, opcode).
    pub others: Vec<(u8, u16)>,
}

/// The counters as the model keeps them.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub snap: Mlx5Counters,
    /// The commands fetched while recording is on (None: off). Kept over function resets,
    /// as the counters are.
    pub record: Option<Vec<FetchedCommand>>,
}

impl Counters {
    pub(crate) fn command(&mut self, opcode: u16, failed: bool) {
        *self.snap.commands.entry(opcode).or_default() += 1;
        if failed {
            *self.snap.command_failures.entry(opcode).or_default() += 1;
        }
    }

    pub(crate) fn drop_packet(&mut self, reason: DropReason) {
        *self.snap.packets_dropped.entry(reason).or_default() += 1;
    }
}

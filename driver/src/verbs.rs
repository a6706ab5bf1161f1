//! The family-independent interface the MAD layer drives: the special QPs of a port (QP0 for
//! SMPs, QP1 for GSI), their work requests and completions, port attributes, device events, and
//! the HCA that owns the ports. A family (mlx5, later mthca, mlx4) implements [`Hca`] and
//! [`HcaPort`]; the MAD layer never knows which family it runs on.
//!
//! Rules every implementation keeps (DESIGN §4):
//! - every posted work request ends in exactly one [`WorkCompletion`] from [`HcaPort::poll`]:
//!   from the device's CQE, or, after a fatal error or removal, a software flush
//!   ([`WcStatus::WrFlushErr`], `vendor_err` 5) made without reading the device;
//! - a completion is only returned once the device can no longer touch the buffer of that work
//!   request (after its CQE, or after the device was quiesced);
//! - nothing the device wrote is trusted: a CQE naming a work request that is not outstanding,
//!   an unknown opcode or an impossible byte count is an error that moves the QP or the device to
//!   error, never a panic.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use dma::{Accounting, DmaPool, LeaseMode};
pub use firmware_cmds::mlx5::syndrome::IbWcStatus as WcStatus;

use crate::error::DriverError;

/// Which special QP of a port.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SpecialQp {
    /// QP0: subnet management packets, VL15.
    Smi,
    /// QP1: general services (SA, PerfMgt, CM, vendor classes).
    Gsi,
}

impl SpecialQp {
    /// The QP number the wire knows it by.
    pub fn qpn(self) -> u32 {
        match self {
            SpecialQp::Smi => 0,
            SpecialQp::Gsi => 1,
        }
    }
}

/// The `vendor_err` of the completions a driver makes in software for the work requests
/// outstanding when the device died or went ([`WcStatus::WrFlushErr`] with this value), as
/// mlx5's `mlx5_ib_poll_sw_comp` does with the WR_FLUSH_ERR syndrome.
pub const SOFTWARE_FLUSH_VENDOR_ERR: u32 = 5;

/// Size of the GRH area at the start of every UD receive buffer. The device writes the GRH
/// there when the packet carried one and leaves it untouched otherwise; the MAD starts after it.
pub const GRH_LEN: u32 = 40;

/// Global route header fields for a send (IBA 8.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grh {
    /// Index of the source GID in the port's GID table.
    pub sgid_index: u8,
    /// Destination GID.
    pub dgid: [u8; 16],
    /// Flow label (20 bits).
    pub flow_label: u32,
    /// Traffic class.
    pub traffic_class: u8,
    /// Hop limit.
    pub hop_limit: u8,
}

/// Where a UD datagram goes: the address vector plus the destination QP and Q_Key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UdDest {
    /// Destination LID (0xffff, the permissive LID, for directed-route SMPs).
    pub dlid: u16,
    /// Service level (SMPs always go on VL15 whatever the SL).
    pub sl: u8,
    /// Source path bits (low LMC bits of our LID).
    pub src_path_bits: u8,
    /// Destination QP (0 or 1 for management traffic, or a redirected QP).
    pub remote_qpn: u32,
    /// Q_Key (0 for QP0; 0x80010000 for QP1).
    pub remote_qkey: u32,
    /// P_Key index to send with.
    pub pkey_index: u16,
    /// A GRH, when the destination is in another subnet or asked for one.
    pub grh: Option<Grh>,
}

impl UdDest {
    /// The destination of every directed-route SMP: QP0 at the permissive LID (0xffff), Q_Key
    /// 0, P_Key index 0, SL 0, no GRH. The route itself is in the SMP's initial path.
    pub const DIRECTED_ROUTE: Self = Self {
        dlid: 0xffff,
        sl: 0,
        src_path_bits: 0,
        remote_qpn: 0,
        remote_qkey: 0,
        pkey_index: 0,
        grh: None,
    };
}

/// One contiguous buffer, named by its device address (IOVA). The family supplies the memory
/// key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sge {
    /// Device address of the buffer.
    pub iova: u64,
    /// Length in bytes.
    pub len: u32,
}

/// A send of one datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SendWr {
    /// Returned in the completion; the MAD layer encodes its slot and generation here.
    pub wr_id: u64,
    /// The MAD (header and payload) to send.
    pub sge: Sge,
    /// The destination.
    pub dest: UdDest,
}

/// A receive buffer: [`GRH_LEN`] bytes of GRH area, then room for the MAD.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecvWr {
    /// Returned in the completion.
    pub wr_id: u64,
    /// The buffer.
    pub sge: Sge,
}

/// Which side of a QP a completion belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WcOpcode {
    /// A send finished.
    Send,
    /// A datagram arrived (or a receive was flushed).
    Recv,
}

/// One completed work request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WorkCompletion {
    /// The work request's `wr_id`.
    pub wr_id: u64,
    /// The QP it was posted on.
    pub qp: SpecialQp,
    /// Send or receive.
    pub opcode: WcOpcode,
    /// The status.
    pub status: WcStatus,
    /// The vendor syndrome of an error completion (5 for a software flush), 0 on success.
    pub vendor_err: u32,
    /// Bytes received, including the [`GRH_LEN`] area (receives only).
    pub byte_len: u32,
    /// Source QP of a received datagram.
    pub src_qp: u32,
    /// Source LID of a received datagram.
    pub slid: u16,
    /// Service level of a received datagram.
    pub sl: u8,
    /// Destination LID path bits of a received datagram.
    pub dlid_path_bits: u8,
    /// P_Key index of a received datagram (QP1; 0 on QP0).
    pub pkey_index: u16,
    /// The datagram carried a GRH (written into the buffer's GRH area).
    pub grh: bool,
}

impl WorkCompletion {
    /// A completion for `wr_id` with only the status fields set (sends, flushes).
    pub fn status_only(
        wr_id: u64,
        qp: SpecialQp,
        opcode: WcOpcode,
        status: WcStatus,
        vendor_err: u32,
    ) -> Self {
        WorkCompletion {
            wr_id,
            qp,
            opcode,
            status,
            vendor_err,
            byte_len: 0,
            src_qp: 0,
            slid: 0,
            sl: 0,
            dlid_path_bits: 0,
            pkey_index: 0,
            grh: false,
        }
    }
}

/// Logical port state (PortInfo:PortState).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PortState {
    /// No change / unknown (0).
    Nop,
    /// Down (1).
    Down,
    /// Initialize (2): only SMPs flow.
    Init,
    /// Armed (3).
    Armed,
    /// Active (4).
    Active,
    /// A value the device reported that IBA does not define.
    Other(u8),
}

impl PortState {
    /// From the PortInfo encoding.
    pub fn from_code(v: u8) -> Self {
        match v {
            0 => PortState::Nop,
            1 => PortState::Down,
            2 => PortState::Init,
            3 => PortState::Armed,
            4 => PortState::Active,
            n => PortState::Other(n),
        }
    }
}

impl fmt::Display for PortState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PortState::Nop => f.write_str("NOP"),
            PortState::Down => f.write_str("DOWN"),
            PortState::Init => f.write_str("INIT"),
            PortState::Armed => f.write_str("ARMED"),
            PortState::Active => f.write_str("ACTIVE"),
            PortState::Other(n) => write!(f, "state {n}"),
        }
    }
}

/// What the MAD layer and the tools need to know about a port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortAttrs {
    /// Port number (from 1).
    pub port_num: u8,
    /// Logical state.
    pub state: PortState,
    /// Physical state (PortInfo:PortPhysicalState encoding; 5 = LinkUp).
    pub phys_state: u8,
    /// Base LID (0 until the SM assigns one).
    pub lid: u16,
    /// LID mask count.
    pub lmc: u8,
    /// LID of the master SM.
    pub sm_lid: u16,
    /// SL to reach the master SM.
    pub sm_sl: u8,
    /// Port GUID.
    pub port_guid: u64,
    /// Subnet prefix of the port's GID.
    pub gid_prefix: u64,
    /// PortInfo:CapabilityMask (IsSM is bit 1).
    pub capability_mask: u32,
    /// Number of P_Key table entries.
    pub pkey_table_len: u16,
    /// Whether QP0 exists on this port (a VF may have no SMI).
    pub has_smi: bool,
}

/// Something the device or the driver tells the layer above.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeviceEvent {
    /// The port became ACTIVE.
    PortActive(u8),
    /// The port left ACTIVE (down or back to INIT).
    PortError(u8),
    /// The port's LID changed.
    LidChange(u8),
    /// The P_Key table changed.
    PkeyChange(u8),
    /// The SM asked clients to re-register.
    ClientReregister(u8),
    /// A special QP hit an unrecoverable error.
    QpFatal {
        /// Port.
        port: u8,
        /// Which QP.
        qp: SpecialQp,
    },
    /// The device is in a fatal state (health syndrome, stuck firmware, all-ones reads, a
    /// device-written value that cannot be trusted). Every outstanding work request is being
    /// completed in software with WR_FLUSH_ERR; new posts fail. The device was quiesced first
    /// (bus mastering off, or a function reset); when neither worked, its DMA may go on, and
    /// the pool of [`HcaPort::dma`] is quarantined (see there) before anything is flushed.
    Fatal {
        /// What was seen.
        reason: String,
    },
    /// The device is being taken away (VFIO REQ) or reads all-ones; as `Fatal`, and the HCA
    /// should be closed promptly.
    Removed,
    /// The HCA was closed ([`Hca::close`], or dropped) while the port was still in use: its
    /// QPs are gone and every work request they held was completed with WR_FLUSH_ERR; posts
    /// fail. The layer above ends as on removal (the kernel's `ib_unregister_device`).
    Closed,
}

/// Why a post was refused. A refused post consumed nothing: the caller still owns its buffer.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PostError {
    /// The work queue is full; post again after completions retire work requests.
    #[error("the work queue is full")]
    QueueFull,
    /// The QP is not in a state that accepts this post (in error, or being closed).
    #[error("the QP is not ready: {0}")]
    NotReady(String),
    /// The send queue is in error (SQE) after a work request completed in error, and the
    /// error completion has not been handled yet: a send posted now would be flushed by the
    /// hardware. Treat it as flushed; once the send queue is recovered, post it again.
    #[error("the send queue is in error until it is recovered: {0}")]
    SendQueueError(String),
    /// The device is in a fatal state or gone.
    #[error("the device is in a fatal state: {0}")]
    DeviceFatal(String),
    /// The work request itself is invalid (e.g. a buffer too small for a receive).
    #[error("invalid work request: {0}")]
    Invalid(String),
}

/// One port of an HCA with its special QPs.
///
/// Posting is safe from any thread. `poll` and `events` are meant for one progress loop per
/// port, but are safe to call from several threads.
pub trait HcaPort: Send + Sync {
    /// Port number (from 1).
    fn port_num(&self) -> u8;

    /// Current attributes (queried from the device).
    fn attrs(&self) -> Result<PortAttrs, DriverError>;

    /// Send and receive queue depths of a special QP, in work requests.
    fn queue_depth(&self, qp: SpecialQp) -> (u32, u32);

    /// Post one send. On error nothing was posted.
    fn post_send(&self, qp: SpecialQp, wr: &SendWr) -> Result<(), PostError>;

    /// Post `wrs` in order as one chain (one doorbell where the device allows it): those
    /// before the first one refused are posted, nothing from it on. Returns how many were
    /// posted and why the next one was refused.
    fn post_sends(&self, qp: SpecialQp, wrs: &[SendWr]) -> (usize, Option<PostError>) {
        for (i, wr) in wrs.iter().enumerate() {
            if let Err(e) = self.post_send(qp, wr) {
                return (i, Some(e));
            }
        }
        (wrs.len(), None)
    }

    /// Post one receive buffer. On error nothing was posted.
    fn post_recv(&self, qp: SpecialQp, wr: &RecvWr) -> Result<(), PostError>;

    /// Post receive buffers in order as one batch (a driver updates the doorbell record once
    /// for all): those before the first one refused are posted, nothing from it on. Returns
    /// how many were posted and why the next one was refused.
    fn post_recvs(&self, qp: SpecialQp, wrs: &[RecvWr]) -> (usize, Option<PostError>) {
        for (i, wr) in wrs.iter().enumerate() {
            if let Err(e) = self.post_recv(qp, wr) {
                return (i, Some(e));
            }
        }
        (wrs.len(), None)
    }

    /// Move up to `max` completions of both special QPs (sends and receives) into `out`;
    /// returns how many. After a fatal error it returns the software flushes of every
    /// outstanding work request (once each) without touching the device.
    fn poll(&self, out: &mut Vec<WorkCompletion>, max: usize) -> Result<usize, DriverError>;

    /// Bring a special QP's send queue from SQE (after a per-WR error) back to RTS. Posts are
    /// not held while the device works on it (its commands may take their timeouts): a send
    /// posted meanwhile is refused with [`PostError::SendQueueError`] at once. A second call
    /// made meanwhile waits for the first and then starts from what it left.
    fn recover_send_queue(&self, qp: SpecialQp) -> Result<(), DriverError>;

    /// Hand a MAD to the port's own management agent (the firmware SMA/PMA through MAD_IFC on
    /// hardware) and return its answer: how SMPs to the local port are served.
    ///
    /// `ignore_mkey`: the MAD is issued by the stack itself and has no work completion, so
    /// both keys are ignored (M_Key and B_Key, as the kernel's `mlx5_MAD_IFC` does without
    /// `in_wc`: a key-violation trap would have nowhere to go). `false` for a MAD received
    /// from the wire or sent by a local client, whose keys the agent checks.
    fn process_mad(&self, mad: &[u8; 256], ignore_mkey: bool) -> Result<[u8; 256], DriverError>;

    /// Set the bits `set`, then clear the bits `clear`, of the port's
    /// PortInfo:CapabilityMask, and return the mask the port's SMA now reports: how a
    /// subnet manager announces itself (IsSM, bit 1) while it holds the port, as the
    /// kernel's `ib_modify_port` does for `issm`. A family that cannot do it says so.
    fn modify_capability_mask(&self, set: u32, clear: u32) -> Result<u32, DriverError> {
        let _ = (set, clear);
        Err(DriverError::DeviceUnsupported {
            what: "changing the port capability mask".into(),
            hint: "this device family has no way to set it (IsSM cannot be announced)".into(),
        })
    }

    /// Take the events that happened since the last call (checks device health when due).
    fn events(&self) -> Vec<DeviceEvent>;

    /// The DMA pool MAD buffers are leased from (mapped in this device's IOMMU domain).
    ///
    /// When the device's DMA could not be stopped after a fatal error (or at close), the
    /// driver quarantines this pool ([`DmaPool::quarantine`], seen with
    /// [`DmaPool::is_quarantined`]) before it flushes anything: the buffers the flushed work
    /// requests give back may still be written by the device, so every lease dropped from
    /// then on stays allocated and mapped, counted in `Accounting::quarantined`, and is never
    /// handed out again. The layer above drops its leases as usual.
    fn dma(&self) -> &DmaPool;

    /// The device's clock (see [`crate::DeviceBackend::now`]).
    fn now(&self) -> Duration;

    /// Block until `deadline` or until the device signals (see [`crate::DeviceBackend::wait`]).
    fn wait(&self, deadline: Duration);
}

/// Static facts about an HCA for tools and logs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HcaInfo {
    /// Device string it was opened from.
    pub device: String,
    /// Family name (`mlx5`, ...).
    pub family: &'static str,
    /// Model name from the PCI ID table.
    pub model: String,
    /// Firmware version `major.minor.subminor`.
    pub fw_version: String,
    /// Node GUID.
    pub node_guid: u64,
    /// Number of ports.
    pub ports: u8,
    /// Capabilities that matter to a user, as label/value pairs.
    pub caps: Vec<(&'static str, String)>,
}

/// How to open an HCA: the DMA lease mode and the special QPs' queue depths.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HcaOptions {
    /// How the driver's own DMA memory (rings, command mailboxes, firmware pages) and the MAD
    /// buffer pool of [`HcaPort::dma`] back their leases. Strict catches device overruns (one
    /// IOMMU mapping per lease); pooled is fast and keeps the mapping count small.
    pub lease_mode: LeaseMode,
    /// Send queue depth of each special QP, in work requests (rounded up to a power of two and
    /// capped by the device).
    pub send_depth: u32,
    /// Receive queue depth of each special QP, in work requests (as above).
    pub recv_depth: u32,
    /// Most 4 KiB pages of host memory given to the device's firmware at once (its own and
    /// those it asks for on behalf of other functions). Startup pages beyond it fail the
    /// bring-up; a run-time request beyond it is answered CAN'T GIVE, as the kernel answers
    /// when its allocation fails. Default
    /// [`DEFAULT_MAX_FIRMWARE_PAGES`](crate::mlx5::DEFAULT_MAX_FIRMWARE_PAGES) (4 GiB).
    pub max_firmware_pages: usize,
}

impl Default for HcaOptions {
    /// Pooled leases, 128 sends and 256 receives per special QP (the kernel's MAD layer uses
    /// 128 and 512), at most 4 GiB of firmware pages.
    fn default() -> Self {
        HcaOptions {
            lease_mode: LeaseMode::Pooled,
            send_depth: 128,
            recv_depth: 256,
            max_firmware_pages: crate::mlx5::DEFAULT_MAX_FIRMWARE_PAGES,
        }
    }
}

/// What an HCA holds at one moment, for leak checks: tests compare it with zero after
/// [`Hca::close`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct HcaAccounting {
    /// The driver's own pool (rings, doorbell records, command mailboxes, firmware pages).
    pub driver_pool: Accounting,
    /// The MAD buffer pool handed out by [`HcaPort::dma`].
    pub mad_pool: Accounting,
    /// Pages the firmware holds (given and not returned).
    pub firmware_pages: usize,
    /// Work requests posted and not yet completed, over every port.
    pub outstanding_wrs: usize,
}

/// An opened, brought-up HCA.
pub trait Hca: Send + Sync {
    /// Facts.
    fn info(&self) -> HcaInfo;

    /// Leases, mappings, firmware pages and outstanding work requests right now.
    fn accounting(&self) -> HcaAccounting;

    /// Port `n` (from 1), if it exists.
    fn port(&self, n: u8) -> Option<Arc<dyn HcaPort>>;

    /// Orderly teardown: stop the queues, return every firmware page, disable the function,
    /// and release every lease and mapping. Idempotent; also done on drop.
    fn close(&self) -> Result<(), DriverError>;
}

//! QP context (`mlx5_ifc_qpc_bits`, 0xe8 bytes) with its primary address path
//! (`mlx5_ifc_ads_bits`), QP states, service types and the modify-QP optional-parameter mask.

use core::fmt;

use crate::error::{Error, Result};
use crate::mlx5::bits::{Field, Field64, need};

/// Size of the context.
pub const QPC_LEN: usize = 0xe8;
/// Bit offset of `primary_address_path` inside the context.
pub const PRIMARY_ADDRESS_PATH_BIT: usize = 0xc0;

/// QP state (`MLX5_QP_STATE_*`), QPC `state`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QpState {
    /// 0.
    Rst,
    /// 1.
    Init,
    /// 2.
    Rtr,
    /// 3.
    Rts,
    /// 4.
    Sqer,
    /// 5.
    Sqd,
    /// 6.
    Err,
    /// 7.
    SqDraining,
    /// 9.
    Suspended,
}

impl QpState {
    /// Every state.
    pub const ALL: [QpState; 9] = [
        QpState::Rst,
        QpState::Init,
        QpState::Rtr,
        QpState::Rts,
        QpState::Sqer,
        QpState::Sqd,
        QpState::Err,
        QpState::SqDraining,
        QpState::Suspended,
    ];

    /// The state code.
    pub fn code(self) -> u8 {
        match self {
            QpState::Rst => 0,
            QpState::Init => 1,
            QpState::Rtr => 2,
            QpState::Rts => 3,
            QpState::Sqer => 4,
            QpState::Sqd => 5,
            QpState::Err => 6,
            QpState::SqDraining => 7,
            QpState::Suspended => 9,
        }
    }

    /// Parses a state code.
    pub fn from_code(code: u8) -> Result<Self> {
        QpState::ALL
            .into_iter()
            .find(|s| s.code() == code)
            .ok_or(Error::UnknownCode {
                what: "QP state",
                value: code.into(),
            })
    }

    /// The kernel's name (`MLX5_QP_STATE_*` suffix).
    pub fn name(self) -> &'static str {
        match self {
            QpState::Rst => "RST",
            QpState::Init => "INIT",
            QpState::Rtr => "RTR",
            QpState::Rts => "RTS",
            QpState::Sqer => "SQER",
            QpState::Sqd => "SQD",
            QpState::Err => "ERR",
            QpState::SqDraining => "SQ_DRAINING",
            QpState::Suspended => "SUSPENDED",
        }
    }
}

impl fmt::Display for QpState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// QP service type (`MLX5_QP_ST_*`), QPC `st`. Values from include/linux/mlx5/qp.h (the
/// anonymous `MLX5_QP_ST_*` enum), which lists SYNC_UMR (0xe) before PTP_1588 (0xd) and
/// REG_UMR (0xc): the numbers, not the order, are what counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct QpServiceType(pub u8);

impl QpServiceType {
    /// Reliable connected.
    pub const RC: Self = Self(0x0);
    /// Unreliable connected.
    pub const UC: Self = Self(0x1);
    /// Unreliable datagram.
    pub const UD: Self = Self(0x2);
    /// XRC.
    pub const XRC: Self = Self(0x3);
    /// MLX (raw IB headers).
    pub const MLX: Self = Self(0x4);
    /// DC initiator.
    pub const DCI: Self = Self(0x5);
    /// DC target.
    pub const DCT: Self = Self(0x6);
    /// The SMI QP (QP0).
    pub const QP0: Self = Self(0x7);
    /// The GSI QP (QP1).
    pub const QP1: Self = Self(0x8);
    /// Raw Ethertype.
    pub const RAW_ETHERTYPE: Self = Self(0x9);
    /// Raw IPv6.
    pub const RAW_IPV6: Self = Self(0xa);
    /// Sniffer.
    pub const SNIFFER: Self = Self(0xb);
    /// Registration UMR (`MLX5_QP_ST_REG_UMR`).
    pub const REG_UMR: Self = Self(0xc);
    /// PTP 1588.
    pub const PTP_1588: Self = Self(0xd);
    /// Synchronous UMR (`MLX5_QP_ST_SYNC_UMR`).
    pub const SYNC_UMR: Self = Self(0xe);

    /// The name of the type, or `None` for an undefined code.
    pub fn name(self) -> Option<&'static str> {
        Some(match self.0 {
            0x0 => "RC",
            0x1 => "UC",
            0x2 => "UD",
            0x3 => "XRC",
            0x4 => "MLX",
            0x5 => "DCI",
            0x6 => "DCT",
            0x7 => "QP0",
            0x8 => "QP1",
            0x9 => "RAW_ETHERTYPE",
            0xa => "RAW_IPV6",
            0xb => "SNIFFER",
            0xc => "REG_UMR",
            0xd => "PTP_1588",
            0xe => "SYNC_UMR",
            _ => return None,
        })
    }
}

/// Path-migration states (`MLX5_QP_PM_*`), QPC `pm_state`.
pub mod pm_state {
    /// Armed.
    pub const ARMED: u8 = 0x0;
    /// Rearm.
    pub const REARM: u8 = 0x1;
    /// Migrated: what the kernel sets at CREATE_QP.
    pub const MIGRATED: u8 = 0x3;
}

/// QPC `rq_type` values (`MLX5_NON_ZERO_RQ` … `MLX5_ZERO_LEN_RQ`; older kernels' qp.h holds
/// them shifted by 24 for the old QPC layout, the `rq_type` field takes the plain value).
pub mod rq_type {
    /// The QP has its own receive queue.
    pub const NON_ZERO: u8 = 0;
    /// Receives come from an SRQ.
    pub const SRQ: u8 = 1;
    /// Cyclic RQ (CRQ).
    pub const CRQ: u8 = 2;
    /// No receive queue (a send-only QP, such as a GSI send QP).
    pub const ZERO_LEN: u8 = 3;
}

/// QPC `ts_format` values (`MLX5_TIMESTAMP_FORMAT_*`): the format of the timestamps in the
/// QP's CQEs. Which ones a device accepts its `sq_ts_format` capability says
/// ([`crate::mlx5::caps::ts_format_cap`]).
pub mod ts_format {
    /// Free-running device clock.
    pub const FREE_RUNNING: u8 = 0x0;
    /// Whatever the device uses by default (what the kernel asks for when the capability
    /// reports real-time support).
    pub const DEFAULT: u8 = 0x1;
    /// Real-time clock.
    pub const REAL_TIME: u8 = 0x2;
}

/// Optional-parameter mask bits of the modify-QP commands (`MLX5_QP_OPTPAR_*`).
pub mod optpar {
    /// Alternate address path.
    pub const ALT_ADDR_PATH: u32 = 1 << 0;
    /// Remote read enable.
    pub const RRE: u32 = 1 << 1;
    /// Remote atomic enable.
    pub const RAE: u32 = 1 << 2;
    /// Remote write enable.
    pub const RWE: u32 = 1 << 3;
    /// P_Key index.
    pub const PKEY_INDEX: u32 = 1 << 4;
    /// Q_Key.
    pub const Q_KEY: u32 = 1 << 5;
    /// RNR timeout.
    pub const RNR_TIMEOUT: u32 = 1 << 6;
    /// Primary address path.
    pub const PRIMARY_ADDR_PATH: u32 = 1 << 7;
    /// SRA max.
    pub const SRA_MAX: u32 = 1 << 8;
    /// RRA max.
    pub const RRA_MAX: u32 = 1 << 9;
    /// PM state.
    pub const PM_STATE: u32 = 1 << 10;
    /// Retry count.
    pub const RETRY_COUNT: u32 = 1 << 12;
    /// RNR retry.
    pub const RNR_RETRY: u32 = 1 << 13;
    /// ACK timeout.
    pub const ACK_TIMEOUT: u32 = 1 << 14;
    /// LAG TX affinity.
    pub const LAG_TX_AFF: u32 = 1 << 15;
    /// Primary port.
    pub const PRI_PORT: u32 = 1 << 16;
    /// Counter set id.
    pub const COUNTER_SET_ID: u32 = 1 << 25;
}

/// Field positions relative to the start of the context (mlx5_ifc.h `qpc`; address-path
/// fields are `ads` offsets plus [`PRIMARY_ADDRESS_PATH_BIT`]).
pub mod field {
    use super::{Field, Field64, PRIMARY_ADDRESS_PATH_BIT as PAP};
    /// `state`.
    pub const STATE: Field = Field::new("state", 0x00, 4);
    /// `st`: service type.
    pub const ST: Field = Field::new("st", 0x08, 8);
    /// `pm_state`.
    pub const PM_STATE: Field = Field::new("pm_state", 0x13, 2);
    /// `pd`.
    pub const PD: Field = Field::new("pd", 0x28, 24);
    /// `mtu`.
    pub const MTU: Field = Field::new("mtu", 0x40, 3);
    /// `log_msg_max`.
    pub const LOG_MSG_MAX: Field = Field::new("log_msg_max", 0x43, 5);
    /// `log_rq_size`: log2 of RQ WQEs.
    pub const LOG_RQ_SIZE: Field = Field::new("log_rq_size", 0x49, 4);
    /// `log_rq_stride`: log2(RQ WQE size) - 4.
    pub const LOG_RQ_STRIDE: Field = Field::new("log_rq_stride", 0x4d, 3);
    /// `no_sq`.
    pub const NO_SQ: Field = Field::new("no_sq", 0x50, 1);
    /// `log_sq_size`: log2 of SQ WQE basic blocks.
    pub const LOG_SQ_SIZE: Field = Field::new("log_sq_size", 0x51, 4);
    /// `ts_format`: CQE timestamp format ([`super::ts_format`]).
    pub const TS_FORMAT: Field = Field::new("ts_format", 0x58, 2);
    /// `rlky`: the reserved lkey may be used (the kernel sets it on every kernel QP).
    pub const RLKY: Field = Field::new("rlky", 0x5b, 1);
    /// `uar_page`.
    pub const UAR_PAGE: Field = Field::new("uar_page", 0x68, 24);
    /// `user_index`.
    pub const USER_INDEX: Field = Field::new("user_index", 0x88, 24);
    /// `log_page_size`: log2(page size) - 12.
    pub const LOG_PAGE_SIZE: Field = Field::new("log_page_size", 0xa3, 5);
    /// `remote_qpn`.
    pub const REMOTE_QPN: Field = Field::new("remote_qpn", 0xa8, 24);
    /// `primary_address_path.pkey_index` (ads bit 0x10).
    pub const PKEY_INDEX: Field = Field::new("pkey_index", PAP + 0x10, 16);
    /// `primary_address_path.sl` (ads bit 0x124).
    pub const SL: Field = Field::new("sl", PAP + 0x124, 4);
    /// `primary_address_path.vhca_port_num` (ads bit 0x128): the port, 1-based.
    pub const VHCA_PORT_NUM: Field = Field::new("vhca_port_num", PAP + 0x128, 8);
    /// `fre`: fast registration enabled (set on every kernel QP).
    pub const FRE: Field = Field::new("fre", 0x394, 1);
    /// `next_send_psn`.
    pub const NEXT_SEND_PSN: Field = Field::new("next_send_psn", 0x3c8, 24);
    /// `cqn_snd`.
    pub const CQN_SND: Field = Field::new("cqn_snd", 0x3e8, 24);
    /// `deth_sqpn`: source QPN put in the DETH (1 for GSI TX QPs).
    pub const DETH_SQPN: Field = Field::new("deth_sqpn", 0x408, 24);
    /// `page_offset`.
    pub const PAGE_OFFSET: Field = Field::new("page_offset", 0x494, 6);
    /// `next_rcv_psn`.
    pub const NEXT_RCV_PSN: Field = Field::new("next_rcv_psn", 0x4a8, 24);
    /// `cqn_rcv`.
    pub const CQN_RCV: Field = Field::new("cqn_rcv", 0x4e8, 24);
    /// `dbr_addr`: DMA address of the 8-byte QP doorbell record.
    pub const DBR_ADDR: Field64 = Field64::new("dbr_addr", 0x500);
    /// `q_key`.
    pub const Q_KEY: Field = Field::new("q_key", 0x540, 32);
    /// `rq_type`.
    pub const RQ_TYPE: Field = Field::new("rq_type", 0x565, 3);
    /// `srqn_rmpn_xrqn`.
    pub const SRQN: Field = Field::new("srqn_rmpn_xrqn", 0x568, 24);
    /// `hw_sq_wqebb_counter`.
    pub const HW_SQ_WQEBB_COUNTER: Field = Field::new("hw_sq_wqebb_counter", 0x5a0, 16);
    /// `sw_sq_wqebb_counter`.
    pub const SW_SQ_WQEBB_COUNTER: Field = Field::new("sw_sq_wqebb_counter", 0x5b0, 16);
    /// `hw_rq_counter`.
    pub const HW_RQ_COUNTER: Field = Field::new("hw_rq_counter", 0x5c0, 32);
    /// `sw_rq_counter`.
    pub const SW_RQ_COUNTER: Field = Field::new("sw_rq_counter", 0x5e0, 32);
}

/// A QP context restricted to the fields the special QPs and the simulator use; other bits
/// are written as zero and ignored on decode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Qpc {
    /// State (meaningful in QUERY_QP output).
    pub state: QpState,
    /// Service type.
    pub st: QpServiceType,
    /// Path-migration state ([`pm_state`]).
    pub pm_state: u8,
    /// Protection domain.
    pub pd: u32,
    /// Path MTU code.
    pub mtu: u8,
    /// log2 of the largest message.
    pub log_msg_max: u8,
    /// log2 of RQ WQEs.
    pub log_rq_size: u8,
    /// log2(RQ WQE size) - 4.
    pub log_rq_stride: u8,
    /// No send queue.
    pub no_sq: bool,
    /// log2 of SQ basic blocks.
    pub log_sq_size: u8,
    /// Timestamp format.
    pub ts_format: u8,
    /// The reserved lkey may be used.
    pub rlky: bool,
    /// Fast registration enabled.
    pub fre: bool,
    /// UAR index for the doorbells.
    pub uar_page: u32,
    /// User index reported in CQEs.
    pub user_index: u32,
    /// log2(buffer page size) - 12.
    pub log_page_size: u8,
    /// Offset of the buffer inside its first page.
    pub page_offset: u8,
    /// Remote QPN (connected QPs).
    pub remote_qpn: u32,
    /// Primary path P_Key index.
    pub pkey_index: u16,
    /// Primary path SL.
    pub sl: u8,
    /// Port number (1-based).
    pub port: u8,
    /// Next send PSN.
    pub next_send_psn: u32,
    /// Send CQ.
    pub cqn_snd: u32,
    /// DETH source QPN override.
    pub deth_sqpn: u32,
    /// Next receive PSN.
    pub next_rcv_psn: u32,
    /// Receive CQ.
    pub cqn_rcv: u32,
    /// DMA address of the doorbell record.
    pub dbr_addr: u64,
    /// Q_Key (UD, QP1).
    pub q_key: u32,
    /// RQ type.
    pub rq_type: u8,
    /// SRQ number.
    pub srqn: u32,
    /// Hardware SQ counter (query only).
    pub hw_sq_wqebb_counter: u16,
    /// Software SQ counter (query only).
    pub sw_sq_wqebb_counter: u16,
    /// Hardware RQ counter (query only).
    pub hw_rq_counter: u32,
    /// Software RQ counter (query only).
    pub sw_rq_counter: u32,
}

impl Default for Qpc {
    fn default() -> Self {
        Qpc {
            state: QpState::Rst,
            st: QpServiceType::RC,
            pm_state: 0,
            pd: 0,
            mtu: 0,
            log_msg_max: 0,
            log_rq_size: 0,
            log_rq_stride: 0,
            no_sq: false,
            log_sq_size: 0,
            ts_format: 0,
            rlky: false,
            fre: false,
            uar_page: 0,
            user_index: 0,
            log_page_size: 0,
            page_offset: 0,
            remote_qpn: 0,
            pkey_index: 0,
            sl: 0,
            port: 0,
            next_send_psn: 0,
            cqn_snd: 0,
            deth_sqpn: 0,
            next_rcv_psn: 0,
            cqn_rcv: 0,
            dbr_addr: 0,
            q_key: 0,
            rq_type: 0,
            srqn: 0,
            hw_sq_wqebb_counter: 0,
            sw_sq_wqebb_counter: 0,
            hw_rq_counter: 0,
            sw_rq_counter: 0,
        }
    }
}

impl Qpc {
    /// Writes the context into `ctx` (at least [`QPC_LEN`] bytes, zeroed by the caller).
    pub fn encode_into(&self, ctx: &mut [u8]) -> Result<()> {
        need("qpc", ctx, QPC_LEN)?;
        field::STATE.set(ctx, self.state.code().into())?;
        field::ST.set(ctx, self.st.0.into())?;
        field::PM_STATE.set(ctx, self.pm_state.into())?;
        field::PD.set(ctx, self.pd)?;
        field::MTU.set(ctx, self.mtu.into())?;
        field::LOG_MSG_MAX.set(ctx, self.log_msg_max.into())?;
        field::LOG_RQ_SIZE.set(ctx, self.log_rq_size.into())?;
        field::LOG_RQ_STRIDE.set(ctx, self.log_rq_stride.into())?;
        field::NO_SQ.set_bool(ctx, self.no_sq)?;
        field::LOG_SQ_SIZE.set(ctx, self.log_sq_size.into())?;
        field::TS_FORMAT.set(ctx, self.ts_format.into())?;
        field::RLKY.set_bool(ctx, self.rlky)?;
        field::FRE.set_bool(ctx, self.fre)?;
        field::UAR_PAGE.set(ctx, self.uar_page)?;
        field::USER_INDEX.set(ctx, self.user_index)?;
        field::LOG_PAGE_SIZE.set(ctx, self.log_page_size.into())?;
        field::PAGE_OFFSET.set(ctx, self.page_offset.into())?;
        field::REMOTE_QPN.set(ctx, self.remote_qpn)?;
        field::PKEY_INDEX.set(ctx, self.pkey_index.into())?;
        field::SL.set(ctx, self.sl.into())?;
        field::VHCA_PORT_NUM.set(ctx, self.port.into())?;
        field::NEXT_SEND_PSN.set(ctx, self.next_send_psn)?;
        field::CQN_SND.set(ctx, self.cqn_snd)?;
        field::DETH_SQPN.set(ctx, self.deth_sqpn)?;
        field::NEXT_RCV_PSN.set(ctx, self.next_rcv_psn)?;
        field::CQN_RCV.set(ctx, self.cqn_rcv)?;
        field::DBR_ADDR.set(ctx, self.dbr_addr)?;
        field::Q_KEY.set(ctx, self.q_key)?;
        field::RQ_TYPE.set(ctx, self.rq_type.into())?;
        field::SRQN.set(ctx, self.srqn)?;
        field::HW_SQ_WQEBB_COUNTER.set(ctx, self.hw_sq_wqebb_counter.into())?;
        field::SW_SQ_WQEBB_COUNTER.set(ctx, self.sw_sq_wqebb_counter.into())?;
        field::HW_RQ_COUNTER.set(ctx, self.hw_rq_counter)?;
        field::SW_RQ_COUNTER.set(ctx, self.sw_rq_counter)
    }

    /// Reads a context; an undefined state code is an error.
    pub fn decode(ctx: &[u8]) -> Result<Self> {
        need("qpc", ctx, QPC_LEN)?;
        Ok(Qpc {
            state: QpState::from_code(field::STATE.get(ctx)? as u8)?,
            st: QpServiceType(field::ST.get(ctx)? as u8),
            pm_state: field::PM_STATE.get(ctx)? as u8,
            pd: field::PD.get(ctx)?,
            mtu: field::MTU.get(ctx)? as u8,
            log_msg_max: field::LOG_MSG_MAX.get(ctx)? as u8,
            log_rq_size: field::LOG_RQ_SIZE.get(ctx)? as u8,
            log_rq_stride: field::LOG_RQ_STRIDE.get(ctx)? as u8,
            no_sq: field::NO_SQ.get_bool(ctx)?,
            log_sq_size: field::LOG_SQ_SIZE.get(ctx)? as u8,
            ts_format: field::TS_FORMAT.get(ctx)? as u8,
            rlky: field::RLKY.get_bool(ctx)?,
            fre: field::FRE.get_bool(ctx)?,
            uar_page: field::UAR_PAGE.get(ctx)?,
            user_index: field::USER_INDEX.get(ctx)?,
            log_page_size: field::LOG_PAGE_SIZE.get(ctx)? as u8,
            page_offset: field::PAGE_OFFSET.get(ctx)? as u8,
            remote_qpn: field::REMOTE_QPN.get(ctx)?,
            pkey_index: field::PKEY_INDEX.get(ctx)? as u16,
            sl: field::SL.get(ctx)? as u8,
            port: field::VHCA_PORT_NUM.get(ctx)? as u8,
            next_send_psn: field::NEXT_SEND_PSN.get(ctx)?,
            cqn_snd: field::CQN_SND.get(ctx)?,
            deth_sqpn: field::DETH_SQPN.get(ctx)?,
            next_rcv_psn: field::NEXT_RCV_PSN.get(ctx)?,
            cqn_rcv: field::CQN_RCV.get(ctx)?,
            dbr_addr: field::DBR_ADDR.get(ctx)?,
            q_key: field::Q_KEY.get(ctx)?,
            rq_type: field::RQ_TYPE.get(ctx)? as u8,
            srqn: field::SRQN.get(ctx)?,
            hw_sq_wqebb_counter: field::HW_SQ_WQEBB_COUNTER.get(ctx)? as u16,
            sw_sq_wqebb_counter: field::SW_SQ_WQEBB_COUNTER.get(ctx)? as u16,
            hw_rq_counter: field::HW_RQ_COUNTER.get(ctx)?,
            sw_rq_counter: field::SW_RQ_COUNTER.get(ctx)?,
        })
    }
}

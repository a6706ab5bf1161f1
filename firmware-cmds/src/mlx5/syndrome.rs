//! Error-CQE syndromes (`MLX5_CQE_SYNDROME_*`) and their mapping to `enum ib_wc_status`
//! (`mlx5_handle_error_cqe` in the kernel and rdma-core), with the vendor syndrome kept as
//! `vendor_err`.

use core::fmt;

use crate::error::{Error, Result};

/// Work-completion status, with the kernel's numeric values (`enum ib_wc_status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum IbWcStatus {
    /// 0.
    Success = 0,
    /// 1.
    LocLenErr = 1,
    /// 2.
    LocQpOpErr = 2,
    /// 3.
    LocEecOpErr = 3,
    /// 4.
    LocProtErr = 4,
    /// 5.
    WrFlushErr = 5,
    /// 6.
    MwBindErr = 6,
    /// 7.
    BadRespErr = 7,
    /// 8.
    LocAccessErr = 8,
    /// 9.
    RemInvReqErr = 9,
    /// 10.
    RemAccessErr = 10,
    /// 11.
    RemOpErr = 11,
    /// 12.
    RetryExcErr = 12,
    /// 13.
    RnrRetryExcErr = 13,
    /// 14.
    LocRddViolErr = 14,
    /// 15.
    RemInvRdReqErr = 15,
    /// 16.
    RemAbortErr = 16,
    /// 17.
    InvEecnErr = 17,
    /// 18.
    InvEecStateErr = 18,
    /// 19.
    FatalErr = 19,
    /// 20.
    RespTimeoutErr = 20,
    /// 21.
    GeneralErr = 21,
}

impl IbWcStatus {
    /// Every status, in numeric order.
    pub const ALL: [IbWcStatus; 22] = [
        IbWcStatus::Success,
        IbWcStatus::LocLenErr,
        IbWcStatus::LocQpOpErr,
        IbWcStatus::LocEecOpErr,
        IbWcStatus::LocProtErr,
        IbWcStatus::WrFlushErr,
        IbWcStatus::MwBindErr,
        IbWcStatus::BadRespErr,
        IbWcStatus::LocAccessErr,
        IbWcStatus::RemInvReqErr,
        IbWcStatus::RemAccessErr,
        IbWcStatus::RemOpErr,
        IbWcStatus::RetryExcErr,
        IbWcStatus::RnrRetryExcErr,
        IbWcStatus::LocRddViolErr,
        IbWcStatus::RemInvRdReqErr,
        IbWcStatus::RemAbortErr,
        IbWcStatus::InvEecnErr,
        IbWcStatus::InvEecStateErr,
        IbWcStatus::FatalErr,
        IbWcStatus::RespTimeoutErr,
        IbWcStatus::GeneralErr,
    ];

    /// The numeric value.
    pub fn code(self) -> u8 {
        self as u8
    }

    /// Parses a numeric value.
    pub fn from_code(code: u8) -> Result<Self> {
        IbWcStatus::ALL
            .get(usize::from(code))
            .copied()
            .ok_or(Error::UnknownCode {
                what: "ib_wc_status",
                value: code.into(),
            })
    }

    /// The kernel's enumerator name.
    pub fn name(self) -> &'static str {
        match self {
            IbWcStatus::Success => "IB_WC_SUCCESS",
            IbWcStatus::LocLenErr => "IB_WC_LOC_LEN_ERR",
            IbWcStatus::LocQpOpErr => "IB_WC_LOC_QP_OP_ERR",
            IbWcStatus::LocEecOpErr => "IB_WC_LOC_EEC_OP_ERR",
            IbWcStatus::LocProtErr => "IB_WC_LOC_PROT_ERR",
            IbWcStatus::WrFlushErr => "IB_WC_WR_FLUSH_ERR",
            IbWcStatus::MwBindErr => "IB_WC_MW_BIND_ERR",
            IbWcStatus::BadRespErr => "IB_WC_BAD_RESP_ERR",
            IbWcStatus::LocAccessErr => "IB_WC_LOC_ACCESS_ERR",
            IbWcStatus::RemInvReqErr => "IB_WC_REM_INV_REQ_ERR",
            IbWcStatus::RemAccessErr => "IB_WC_REM_ACCESS_ERR",
            IbWcStatus::RemOpErr => "IB_WC_REM_OP_ERR",
            IbWcStatus::RetryExcErr => "IB_WC_RETRY_EXC_ERR",
            IbWcStatus::RnrRetryExcErr => "IB_WC_RNR_RETRY_EXC_ERR",
            IbWcStatus::LocRddViolErr => "IB_WC_LOC_RDD_VIOL_ERR",
            IbWcStatus::RemInvRdReqErr => "IB_WC_REM_INV_RD_REQ_ERR",
            IbWcStatus::RemAbortErr => "IB_WC_REM_ABORT_ERR",
            IbWcStatus::InvEecnErr => "IB_WC_INV_EECN_ERR",
            IbWcStatus::InvEecStateErr => "IB_WC_INV_EEC_STATE_ERR",
            IbWcStatus::FatalErr => "IB_WC_FATAL_ERR",
            IbWcStatus::RespTimeoutErr => "IB_WC_RESP_TIMEOUT_ERR",
            IbWcStatus::GeneralErr => "IB_WC_GENERAL_ERR",
        }
    }
}

impl fmt::Display for IbWcStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.name(), self.code())
    }
}

/// Syndrome byte of an error CQE (byte 0x37).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CqeSyndrome(pub u8);

impl CqeSyndrome {
    /// Local length error.
    pub const LOCAL_LENGTH_ERR: Self = Self(0x01);
    /// Local QP operation error.
    pub const LOCAL_QP_OP_ERR: Self = Self(0x02);
    /// Local protection error.
    pub const LOCAL_PROT_ERR: Self = Self(0x04);
    /// WR flushed (the QP is in error).
    pub const WR_FLUSHED_ERR: Self = Self(0x05);
    /// Memory window bind error.
    pub const MW_BIND_ERR: Self = Self(0x06);
    /// Bad response.
    pub const BAD_RESP_ERR: Self = Self(0x10);
    /// Local access error.
    pub const LOCAL_ACCESS_ERR: Self = Self(0x11);
    /// Remote invalid request.
    pub const REMOTE_INVAL_REQ_ERR: Self = Self(0x12);
    /// Remote access error.
    pub const REMOTE_ACCESS_ERR: Self = Self(0x13);
    /// Remote operation error.
    pub const REMOTE_OP_ERR: Self = Self(0x14);
    /// Transport retry counter exceeded.
    pub const TRANSPORT_RETRY_EXC_ERR: Self = Self(0x15);
    /// RNR retry counter exceeded.
    pub const RNR_RETRY_EXC_ERR: Self = Self(0x16);
    /// Remote aborted.
    pub const REMOTE_ABORTED_ERR: Self = Self(0x22);

    /// Every named syndrome.
    pub const ALL: [Self; 13] = [
        Self::LOCAL_LENGTH_ERR,
        Self::LOCAL_QP_OP_ERR,
        Self::LOCAL_PROT_ERR,
        Self::WR_FLUSHED_ERR,
        Self::MW_BIND_ERR,
        Self::BAD_RESP_ERR,
        Self::LOCAL_ACCESS_ERR,
        Self::REMOTE_INVAL_REQ_ERR,
        Self::REMOTE_ACCESS_ERR,
        Self::REMOTE_OP_ERR,
        Self::TRANSPORT_RETRY_EXC_ERR,
        Self::RNR_RETRY_EXC_ERR,
        Self::REMOTE_ABORTED_ERR,
    ];

    /// The `MLX5_CQE_SYNDROME_*` suffix, or `None` for a syndrome the kernel does not name.
    pub fn name(self) -> Option<&'static str> {
        Some(match self.0 {
            0x01 => "LOCAL_LENGTH_ERR",
            0x02 => "LOCAL_QP_OP_ERR",
            0x04 => "LOCAL_PROT_ERR",
            0x05 => "WR_FLUSH_ERR",
            0x06 => "MW_BIND_ERR",
            0x10 => "BAD_RESP_ERR",
            0x11 => "LOCAL_ACCESS_ERR",
            0x12 => "REMOTE_INVAL_REQ_ERR",
            0x13 => "REMOTE_ACCESS_ERR",
            0x14 => "REMOTE_OP_ERR",
            0x15 => "TRANSPORT_RETRY_EXC_ERR",
            0x16 => "RNR_RETRY_EXC_ERR",
            0x22 => "REMOTE_ABORTED_ERR",
            _ => return None,
        })
    }

    /// The work-completion status (`mlx5_handle_error_cqe`); unnamed syndromes give
    /// GENERAL_ERR.
    pub fn wc_status(self) -> IbWcStatus {
        match self.0 {
            0x01 => IbWcStatus::LocLenErr,
            0x02 => IbWcStatus::LocQpOpErr,
            0x04 => IbWcStatus::LocProtErr,
            0x05 => IbWcStatus::WrFlushErr,
            0x06 => IbWcStatus::MwBindErr,
            0x10 => IbWcStatus::BadRespErr,
            0x11 => IbWcStatus::LocAccessErr,
            0x12 => IbWcStatus::RemInvReqErr,
            0x13 => IbWcStatus::RemAccessErr,
            0x14 => IbWcStatus::RemOpErr,
            0x15 => IbWcStatus::RetryExcErr,
            0x16 => IbWcStatus::RnrRetryExcErr,
            0x22 => IbWcStatus::RemAbortErr,
            _ => IbWcStatus::GeneralErr,
        }
    }
}

impl fmt::Display for CqeSyndrome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#04x} {}", self.0, self.name().unwrap_or("UNKNOWN"))
    }
}

/// A work-completion error as the kernel reports it: the status and the vendor syndrome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WcError {
    /// The work-completion status.
    pub status: IbWcStatus,
    /// `wc->vendor_err`: the CQE's `vendor_err_synd` byte.
    pub vendor_err: u8,
}

impl WcError {
    /// What an error CQE with this syndrome and vendor syndrome becomes.
    pub fn from_cqe(syndrome: CqeSyndrome, vendor_err_synd: u8) -> Self {
        WcError {
            status: syndrome.wc_status(),
            vendor_err: vendor_err_synd,
        }
    }

    /// The completion the driver makes up for a WR it flushes in software after a fatal
    /// error (`mlx5_ib_poll_sw_comp`): WR_FLUSH_ERR with vendor_err 5.
    pub fn software_flush() -> Self {
        WcError {
            status: IbWcStatus::WrFlushErr,
            vendor_err: CqeSyndrome::WR_FLUSHED_ERR.0,
        }
    }
}

impl fmt::Display for WcError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}, vendor_err {:#04x}", self.status, self.vendor_err)
    }
}

//! Command-queue status codes: the delivery status of an entry (`status_own >> 1`) and the
//! command status byte of an output, with their kernel names and errno mappings (`cmd.c`
//! `deliv_status_to_err`, `cmd_status_to_err`, `cmd_status_str`).

use core::fmt;

/// Linux errno values used by the kernel mappings (asm-generic/errno*.h).
pub mod errno {
    /// I/O error.
    pub const EIO: i32 = 5;
    /// Try again.
    pub const EAGAIN: i32 = 11;
    /// Out of memory.
    pub const ENOMEM: i32 = 12;
    /// Bad address.
    pub const EFAULT: i32 = 14;
    /// Device or resource busy.
    pub const EBUSY: i32 = 16;
    /// Invalid argument.
    pub const EINVAL: i32 = 22;
    /// No message of desired type.
    pub const ENOMSG: i32 = 42;
    /// Invalid request descriptor.
    pub const EBADR: i32 = 53;
    /// Link has been severed.
    pub const ENOLINK: i32 = 67;
    /// Remote I/O error.
    pub const EREMOTEIO: i32 = 121;
}

/// Delivery status of a command-queue entry (`MLX5_CMD_DELIVERY_STAT_*`, entry byte 0x3f bits
/// \[7:1\]). Non-zero means the device could not even run the command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DeliveryStatus(pub u8);

impl DeliveryStatus {
    /// No errors.
    pub const OK: Self = Self(0x0);
    /// Signature error.
    pub const SIGNATURE_ERR: Self = Self(0x1);
    /// Token error.
    pub const TOKEN_ERR: Self = Self(0x2);
    /// Bad block number.
    pub const BAD_BLOCK_NUMBER: Self = Self(0x3);
    /// Output pointer not aligned to block size.
    pub const OUT_PTR_ALIGN_ERR: Self = Self(0x4);
    /// Input pointer not aligned to block size.
    pub const IN_PTR_ALIGN_ERR: Self = Self(0x5);
    /// Firmware internal error.
    pub const FW_ERR: Self = Self(0x6);
    /// Command input length error.
    pub const IN_LENGTH_ERR: Self = Self(0x7);
    /// Command output length error.
    pub const OUT_LENGTH_ERR: Self = Self(0x8);
    /// Reserved fields not cleared.
    pub const RES_FLD_NOT_CLR_ERR: Self = Self(0x9);
    /// Bad command descriptor type.
    pub const CMD_DESCR_ERR: Self = Self(0x10);

    /// Every defined delivery status.
    pub const ALL: [Self; 11] = [
        Self::OK,
        Self::SIGNATURE_ERR,
        Self::TOKEN_ERR,
        Self::BAD_BLOCK_NUMBER,
        Self::OUT_PTR_ALIGN_ERR,
        Self::IN_PTR_ALIGN_ERR,
        Self::FW_ERR,
        Self::IN_LENGTH_ERR,
        Self::OUT_LENGTH_ERR,
        Self::RES_FLD_NOT_CLR_ERR,
        Self::CMD_DESCR_ERR,
    ];

    /// The kernel's `MLX5_CMD_DELIVERY_STAT_*` suffix, or `None` for an undefined value.
    pub fn name(self) -> Option<&'static str> {
        Some(match self.0 {
            0x0 => "OK",
            0x1 => "SIGNAT_ERR",
            0x2 => "TOK_ERR",
            0x3 => "BAD_BLK_NUM_ERR",
            0x4 => "OUT_PTR_ALIGN_ERR",
            0x5 => "IN_PTR_ALIGN_ERR",
            0x6 => "FW_ERR",
            0x7 => "IN_LENGTH_ERR",
            0x8 => "OUT_LENGTH_ERR",
            0x9 => "RES_FLD_NOT_CLR_ERR",
            0x10 => "CMD_DESCR_ERR",
            _ => return None,
        })
    }

    /// The kernel's description (`deliv_status_to_str`).
    pub fn description(self) -> &'static str {
        match self.0 {
            0x0 => "no errors",
            0x1 => "signature error",
            0x2 => "token error",
            0x3 => "bad block number",
            0x4 => "output pointer not aligned to block size",
            0x5 => "input pointer not aligned to block size",
            0x6 => "firmware internal error",
            0x7 => "command input length error",
            0x8 => "command output length error",
            0x9 => "reserved fields not cleared",
            0x10 => "bad command descriptor type",
            _ => "unknown status code",
        }
    }

    /// Negative errno the kernel returns for it (`deliv_status_to_err`).
    pub fn errno(self) -> i32 {
        match self.0 {
            0x0 => 0,
            0x1 | 0x2 => -errno::EBADR,
            0x3..=0x5 => -errno::EFAULT,
            0x7 | 0x8 | 0x9 | 0x10 => -errno::ENOMSG,
            0x6 => -errno::EIO,
            _ => -errno::EINVAL,
        }
    }
}

impl fmt::Display for DeliveryStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:#04x} {} ({})",
            self.0,
            self.name().unwrap_or("UNKNOWN"),
            self.description()
        )
    }
}

/// Command status, byte 0 of every command output (`MLX5_CMD_STAT_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CmdStatus(pub u8);

impl CmdStatus {
    /// Success.
    pub const OK: Self = Self(0x00);
    /// Internal error.
    pub const INT_ERR: Self = Self(0x01);
    /// Bad operation (unknown or unsupported opcode).
    pub const BAD_OP_ERR: Self = Self(0x02);
    /// Bad parameter.
    pub const BAD_PARAM_ERR: Self = Self(0x03);
    /// Bad system state.
    pub const BAD_SYS_STATE_ERR: Self = Self(0x04);
    /// Bad resource.
    pub const BAD_RES_ERR: Self = Self(0x05);
    /// Resource busy.
    pub const RES_BUSY: Self = Self(0x06);
    /// Limits exceeded.
    pub const LIM_ERR: Self = Self(0x08);
    /// Bad resource state.
    pub const BAD_RES_STATE_ERR: Self = Self(0x09);
    /// Bad index.
    pub const IX_ERR: Self = Self(0x0a);
    /// No resources.
    pub const NO_RES_ERR: Self = Self(0x0f);
    /// Bad QP state.
    pub const BAD_QP_STATE_ERR: Self = Self(0x10);
    /// Bad packet (discarded).
    pub const BAD_PKT_ERR: Self = Self(0x30);
    /// Bad size, too many outstanding CQEs.
    pub const BAD_SIZE_OUTS_CQES_ERR: Self = Self(0x40);
    /// Bad input length.
    pub const BAD_INP_LEN_ERR: Self = Self(0x50);
    /// Bad output length.
    pub const BAD_OUTP_LEN_ERR: Self = Self(0x51);
    /// Status the kernel fakes for commands it does not post while the device is in internal
    /// error (`MLX5_DRIVER_STATUS_ABORTED`); never written by a device.
    pub const DRIVER_ABORTED: Self = Self(0xfe);

    /// Every status a device may write.
    pub const ALL: [Self; 16] = [
        Self::OK,
        Self::INT_ERR,
        Self::BAD_OP_ERR,
        Self::BAD_PARAM_ERR,
        Self::BAD_SYS_STATE_ERR,
        Self::BAD_RES_ERR,
        Self::RES_BUSY,
        Self::LIM_ERR,
        Self::BAD_RES_STATE_ERR,
        Self::IX_ERR,
        Self::NO_RES_ERR,
        Self::BAD_QP_STATE_ERR,
        Self::BAD_PKT_ERR,
        Self::BAD_SIZE_OUTS_CQES_ERR,
        Self::BAD_INP_LEN_ERR,
        Self::BAD_OUTP_LEN_ERR,
    ];

    /// The kernel's `MLX5_CMD_STAT_*` suffix, or `None` for an undefined value.
    pub fn name(self) -> Option<&'static str> {
        Some(match self.0 {
            0x00 => "OK",
            0x01 => "INT_ERR",
            0x02 => "BAD_OP_ERR",
            0x03 => "BAD_PARAM_ERR",
            0x04 => "BAD_SYS_STATE_ERR",
            0x05 => "BAD_RES_ERR",
            0x06 => "RES_BUSY",
            0x08 => "LIM_ERR",
            0x09 => "BAD_RES_STATE_ERR",
            0x0a => "IX_ERR",
            0x0f => "NO_RES_ERR",
            0x10 => "BAD_QP_STATE_ERR",
            0x30 => "BAD_PKT_ERR",
            0x40 => "BAD_SIZE_OUTS_CQES_ERR",
            0x50 => "BAD_INP_LEN_ERR",
            0x51 => "BAD_OUTP_LEN_ERR",
            0xfe => "DRIVER_STATUS_ABORTED",
            _ => return None,
        })
    }

    /// The kernel's description (`cmd_status_str`).
    pub fn description(self) -> &'static str {
        match self.0 {
            0x00 => "OK",
            0x01 => "internal error",
            0x02 => "bad operation",
            0x03 => "bad parameter",
            0x04 => "bad system state",
            0x05 => "bad resource",
            0x06 => "resource busy",
            0x08 => "limits exceeded",
            0x09 => "bad resource state",
            0x0a => "bad index",
            0x0f => "no resources",
            0x10 => "bad QP state",
            0x30 => "bad packet (discarded)",
            0x40 => "bad size too many outstanding CQEs",
            0x50 => "bad input length",
            0x51 => "bad output length",
            0xfe => "aborted by the driver (device in internal error)",
            _ => "unknown status",
        }
    }

    /// Negative errno of `cmd_status_to_err` (used by the kernel for logging; callers of
    /// `mlx5_cmd_exec` see -EREMOTEIO for any non-zero status in current kernels).
    #[allow(clippy::match_same_arms)] // mirrors cmd_status_to_err, defined codes listed
    pub fn errno(self) -> i32 {
        match self.0 {
            0x00 => 0,
            0x01 | 0x04 | 0x50 | 0x51 => -errno::EIO,
            0x02 | 0x03 | 0x05 | 0x09 | 0x0a | 0x10 | 0x30 | 0x40 => -errno::EINVAL,
            0x06 => -errno::EBUSY,
            0x08 => -errno::ENOMEM,
            0x0f => -errno::EAGAIN,
            _ => -errno::EIO,
        }
    }

    /// True for success.
    pub fn is_ok(self) -> bool {
        self.0 == 0
    }
}

impl fmt::Display for CmdStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:#04x} {} ({})",
            self.0,
            self.name().unwrap_or("UNKNOWN"),
            self.description()
        )
    }
}

/// Syndrome the kernel fakes together with [`CmdStatus::DRIVER_ABORTED`] (`MLX5_DRIVER_SYND`).
pub const DRIVER_SYNDROME: u32 = 0xbadd_00de;

/// A command status with its 32-bit firmware syndrome, named for display (the `hca decode`
/// view of a failed command).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatusReport {
    /// Output status byte.
    pub status: CmdStatus,
    /// Output syndrome dword.
    pub syndrome: u32,
}

impl fmt::Display for StatusReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "status {}, syndrome {:#010x}, errno {}",
            self.status,
            self.syndrome,
            self.status.errno()
        )?;
        if self.status == CmdStatus::DRIVER_ABORTED && self.syndrome == DRIVER_SYNDROME {
            write!(f, " (driver-faked result, device in internal error)")?;
        }
        Ok(())
    }
}

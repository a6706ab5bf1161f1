//! Doorbells: the QP and CQ doorbell records in host memory, the CQ arm word and its 64-bit
//! UAR write, the EQ doorbell, and the layout of a UAR page.

use crate::error::Result;
use crate::mlx5::bits::need;

/// UAR page offset of the CQ arm doorbell (`MLX5_CQ_DOORBELL`).
pub const UAR_CQ_DOORBELL: usize = 0x20;
/// UAR page offset of the EQ doorbell that updates the CI and arms (`MLX5_EQ_DOORBEL_OFFSET`).
pub const UAR_EQ_DOORBELL_ARM: usize = 0x40;
/// UAR page offset of the EQ doorbell that only updates the CI.
pub const UAR_EQ_DOORBELL_NO_ARM: usize = 0x48;
/// UAR page offset of the first BlueFlame register (`MLX5_BF_OFFSET`).
pub const UAR_BF_OFFSET: usize = 0x800;
/// BlueFlame registers per UAR (`MLX5_BFREGS_PER_UAR`).
pub const BFREGS_PER_UAR: usize = 4;
/// Size of a UAR when `uar_4k` is set.
pub const UAR_4K: usize = 4096;

/// Offset of BlueFlame register `n` (< 4) inside a UAR page: `0x800 + n * (1 << log_bf_reg_size)`.
/// Each register is used in two halves of `(1 << log_bf_reg_size) / 2` bytes, alternated
/// after every doorbell.
pub fn bf_reg_offset(n: usize, log_bf_reg_size: u32) -> usize {
    UAR_BF_OFFSET + n * (1usize << log_bf_reg_size)
}

/// BAR0 offset of UAR `index`: `index * 4096` with `uar_4k`, otherwise `index * page_size`.
pub fn uar_bar_offset(index: u32, uar_4k: bool, system_page_size: usize) -> usize {
    let stride = if uar_4k { UAR_4K } else { system_page_size };
    index as usize * stride
}

/// Index of the receive counter in the QP doorbell record (`MLX5_RCV_DBR`).
pub const RCV_DBR: usize = 0;
/// Index of the send counter in the QP doorbell record (`MLX5_SND_DBR`).
pub const SND_DBR: usize = 1;
/// Size of a QP or CQ doorbell record.
pub const DB_RECORD_LEN: usize = 8;

/// The QP doorbell record: two big-endian dwords, RQ head then SQ producer counter (each
/// written as `counter & 0xffff`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QpDbRecord {
    /// RQ head (WQEs).
    pub rq: u16,
    /// SQ producer counter (basic blocks).
    pub sq: u16,
}

impl QpDbRecord {
    /// The big-endian dword the driver writes at dword `RCV_DBR` or `SND_DBR`.
    pub fn counter_bytes(counter: u32) -> [u8; 4] {
        (counter & 0xffff).to_be_bytes()
    }

    /// Emits the record.
    pub fn encode(&self) -> [u8; DB_RECORD_LEN] {
        let mut b = [0u8; DB_RECORD_LEN];
        b[RCV_DBR * 4..RCV_DBR * 4 + 4].copy_from_slice(&Self::counter_bytes(self.rq.into()));
        b[SND_DBR * 4..SND_DBR * 4 + 4].copy_from_slice(&Self::counter_bytes(self.sq.into()));
        b
    }

    /// Parses a record (the simulator reads it through the IOMMU); bits above 15 are ignored.
    pub fn decode(buf: &[u8]) -> Result<Self> {
        need("QP doorbell record", buf, DB_RECORD_LEN)?;
        let d = |i: usize| {
            u32::from_be_bytes([buf[i * 4], buf[i * 4 + 1], buf[i * 4 + 2], buf[i * 4 + 3]])
        };
        Ok(QpDbRecord {
            rq: (d(RCV_DBR) & 0xffff) as u16,
            sq: (d(SND_DBR) & 0xffff) as u16,
        })
    }
}

/// Arm command of the CQ arm word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CqArmCmd {
    /// Event on the next completion (`MLX5_CQ_DB_REQ_NOT` = 0).
    NextCompletion,
    /// Event on the next solicited completion (`MLX5_CQ_DB_REQ_NOT_SOL` = 1 << 24).
    NextSolicited,
}

/// The CQ arm word: `(sn & 3) << 28 | cmd | (ci & 0xffffff)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CqArm {
    /// Arm sequence number (2 bits).
    pub sn: u8,
    /// What to arm for.
    pub cmd: CqArmCmd,
    /// Consumer index (24 bits).
    pub ci: u32,
}

/// `MLX5_CQ_DB_REQ_NOT_SOL`.
pub const CQ_DB_REQ_NOT_SOL: u32 = 1 << 24;
/// `MLX5_CQ_DB_REQ_NOT`.
pub const CQ_DB_REQ_NOT: u32 = 0;

impl CqArm {
    /// The arm word.
    pub fn word(&self) -> u32 {
        let cmd = match self.cmd {
            CqArmCmd::NextCompletion => CQ_DB_REQ_NOT,
            CqArmCmd::NextSolicited => CQ_DB_REQ_NOT_SOL,
        };
        (u32::from(self.sn & 3) << 28) | cmd | (self.ci & 0x00ff_ffff)
    }

    /// Parses an arm word.
    pub fn from_word(w: u32) -> Self {
        CqArm {
            sn: ((w >> 28) & 3) as u8,
            cmd: if w & CQ_DB_REQ_NOT_SOL != 0 {
                CqArmCmd::NextSolicited
            } else {
                CqArmCmd::NextCompletion
            },
            ci: w & 0x00ff_ffff,
        }
    }

    /// The 64-bit UAR+0x20 doorbell: high dword the arm word, low dword the CQN; written as
    /// a big-endian quantity (hi dword first).
    pub fn uar_doorbell(&self, cqn: u32) -> u64 {
        (u64::from(self.word()) << 32) | u64::from(cqn & 0x00ff_ffff)
    }

    /// Splits a UAR+0x20 doorbell value into the arm word and the CQN.
    pub fn from_uar_doorbell(v: u64) -> (Self, u32) {
        (Self::from_word((v >> 32) as u32), (v as u32) & 0x00ff_ffff)
    }
}

/// The CQ doorbell record: `[0]` set_ci = `ci & 0xffffff`, `[1]` the last arm word.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CqDbRecord {
    /// Consumer index (24 bits).
    pub set_ci: u32,
    /// Arm word.
    pub arm: u32,
}

impl CqDbRecord {
    /// Emits the record.
    pub fn encode(&self) -> [u8; DB_RECORD_LEN] {
        let mut b = [0u8; DB_RECORD_LEN];
        b[0..4].copy_from_slice(&(self.set_ci & 0x00ff_ffff).to_be_bytes());
        b[4..8].copy_from_slice(&self.arm.to_be_bytes());
        b
    }

    /// Parses a record.
    pub fn decode(buf: &[u8]) -> Result<Self> {
        need("CQ doorbell record", buf, DB_RECORD_LEN)?;
        Ok(CqDbRecord {
            set_ci: u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]) & 0x00ff_ffff,
            arm: u32::from_be_bytes([buf[4], buf[5], buf[6], buf[7]]),
        })
    }
}

/// An EQ doorbell write: `(ci & 0xffffff) | eqn << 24` at UAR+0x40 (arm) or +0x48.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EqDoorbell {
    /// EQ number.
    pub eqn: u8,
    /// Consumer index (24 bits).
    pub ci: u32,
    /// Arm as well as update.
    pub arm: bool,
}

impl EqDoorbell {
    /// UAR page offset to write.
    pub fn offset(&self) -> usize {
        if self.arm {
            UAR_EQ_DOORBELL_ARM
        } else {
            UAR_EQ_DOORBELL_NO_ARM
        }
    }

    /// The 32-bit value.
    pub fn value(&self) -> u32 {
        crate::mlx5::eqe::eq_doorbell_value(self.ci, self.eqn)
    }

    /// Parses a write at a UAR offset; `None` if the offset is not an EQ doorbell.
    pub fn from_write(offset: usize, value: u32) -> Option<Self> {
        let arm = match offset {
            UAR_EQ_DOORBELL_ARM => true,
            UAR_EQ_DOORBELL_NO_ARM => false,
            _ => return None,
        };
        Some(EqDoorbell {
            eqn: (value >> 24) as u8,
            ci: value & 0x00ff_ffff,
            arm,
        })
    }
}

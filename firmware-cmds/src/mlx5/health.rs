//! The health buffer (init segment 0x200, `struct health_buffer`, 64 bytes) and the health
//! syndromes (`MLX5_INITIAL_SEG_HEALTH_SYNDROME_*`, names from `hsynd_str`).

use core::fmt;

use crate::error::Result;
use crate::mlx5::bits::need;

/// Size of the buffer.
pub const HEALTH_BUFFER_LEN: usize = 0x40;
/// `fw_ver` reads this when the device is unreachable (PCI reads return all ones).
pub const FW_VER_UNREACHABLE: u32 = 0xffff_ffff;

/// Offsets inside the buffer (add `init_seg::off::HEALTH` for BAR0 offsets).
pub mod off {
    /// `assert_var[6]` (BE32 each).
    pub const ASSERT_VAR: usize = 0x00;
    /// `assert_exit_ptr`.
    pub const ASSERT_EXIT_PTR: usize = 0x20;
    /// `assert_callra`.
    pub const ASSERT_CALLRA: usize = 0x24;
    /// `time`.
    pub const TIME: usize = 0x2c;
    /// `fw_ver`.
    pub const FW_VER: usize = 0x30;
    /// `hw_id`.
    pub const HW_ID: usize = 0x34;
    /// `rfr_severity` (u8).
    pub const RFR_SEVERITY: usize = 0x38;
    /// `irisc_index` (u8).
    pub const IRISC_INDEX: usize = 0x3c;
    /// `synd` (u8).
    pub const SYND: usize = 0x3d;
    /// `ext_synd` (BE16).
    pub const EXT_SYND: usize = 0x3e;
}

/// A health syndrome (`health.synd`; 0 = healthy).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct HealthSyndrome(pub u8);

impl HealthSyndrome {
    /// Firmware internal error.
    pub const FW_INTERNAL_ERR: Self = Self(0x01);
    /// iRISC not responding.
    pub const DEAD_IRISC: Self = Self(0x07);
    /// Unrecoverable hardware error.
    pub const HW_FATAL_ERR: Self = Self(0x08);
    /// Firmware CRC error.
    pub const FW_CRC_ERR: Self = Self(0x09);
    /// ICM fetch PCI error.
    pub const ICM_FETCH_PCI_ERR: Self = Self(0x0a);
    /// ICM page error.
    pub const ICM_PAGE_ERR: Self = Self(0x0b);
    /// Asynchronous EQ buffer overrun.
    pub const ASYNCHRONOUS_EQ_BUF_OVERRUN: Self = Self(0x0c);
    /// EQ error.
    pub const EQ_IN_ERR: Self = Self(0x0d);
    /// Invalid EQ referenced.
    pub const EQ_INV: Self = Self(0x0e);
    /// FFSER error.
    pub const FFSER_ERR: Self = Self(0x0f);
    /// High temperature.
    pub const HIGH_TEMP_ERR: Self = Self(0x10);
    /// ICM fetch PCI data poisoned.
    pub const ICM_PCI_POISONED_ERR: Self = Self(0x12);

    /// Every defined syndrome.
    pub const ALL: [Self; 12] = [
        Self::FW_INTERNAL_ERR,
        Self::DEAD_IRISC,
        Self::HW_FATAL_ERR,
        Self::FW_CRC_ERR,
        Self::ICM_FETCH_PCI_ERR,
        Self::ICM_PAGE_ERR,
        Self::ASYNCHRONOUS_EQ_BUF_OVERRUN,
        Self::EQ_IN_ERR,
        Self::EQ_INV,
        Self::FFSER_ERR,
        Self::HIGH_TEMP_ERR,
        Self::ICM_PCI_POISONED_ERR,
    ];

    /// The `MLX5_INITIAL_SEG_HEALTH_SYNDROME_*` suffix, or `None`.
    pub fn name(self) -> Option<&'static str> {
        Some(match self.0 {
            0x01 => "FW_INTERNAL_ERR",
            0x07 => "DEAD_IRISC",
            0x08 => "HW_FATAL_ERR",
            0x09 => "FW_CRC_ERR",
            0x0a => "ICM_FETCH_PCI_ERR",
            0x0b => "ICM_PAGE_ERR",
            0x0c => "ASYNCHRONOUS_EQ_BUF_OVERRUN",
            0x0d => "EQ_IN_ERR",
            0x0e => "EQ_INV",
            0x0f => "FFSER_ERR",
            0x10 => "HIGH_TEMP_ERR",
            0x12 => "ICM_PCI_POISONED_ERR",
            _ => return None,
        })
    }

    /// The kernel's description (`hsynd_str`).
    pub fn description(self) -> &'static str {
        match self.0 {
            0x01 => "firmware internal error",
            0x07 => "irisc not responding",
            0x08 => "unrecoverable hardware error",
            0x09 => "firmware CRC error",
            0x0a => "ICM fetch PCI error",
            // The kernel prints "HW fatal error" for ICM_PAGE_ERR.
            0x0b => "HW fatal error",
            0x0c => "async EQ buffer overrun",
            0x0d => "EQ error",
            0x0e => "Invalid EQ referenced",
            0x0f => "FFSER error",
            0x10 => "High temperature",
            0x12 => "ICM fetch PCI data poisoned error",
            _ => "unrecognized error",
        }
    }
}

impl fmt::Display for HealthSyndrome {
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

/// The health buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HealthBuffer {
    /// Assert variables.
    pub assert_var: [u32; 6],
    /// Assert exit pointer.
    pub assert_exit_ptr: u32,
    /// Assert caller return address.
    pub assert_callra: u32,
    /// Firmware time of the assert.
    pub time: u32,
    /// Firmware version; [`FW_VER_UNREACHABLE`] when the device is gone.
    pub fw_ver: u32,
    /// Hardware id.
    pub hw_id: u32,
    /// Bit 7 recovery-flow-required, bit 3 severity valid, bits \[2:0\] severity.
    pub rfr_severity: u8,
    /// iRISC index.
    pub irisc_index: u8,
    /// Health syndrome.
    pub synd: HealthSyndrome,
    /// Extended syndrome.
    pub ext_synd: u16,
}

impl HealthBuffer {
    /// Parses the 64 bytes of the buffer.
    pub fn decode(buf: &[u8]) -> Result<Self> {
        need("health buffer", buf, HEALTH_BUFFER_LEN)?;
        let be32 = |at: usize| u32::from_be_bytes([buf[at], buf[at + 1], buf[at + 2], buf[at + 3]]);
        let mut assert_var = [0u32; 6];
        for (i, v) in assert_var.iter_mut().enumerate() {
            *v = be32(off::ASSERT_VAR + 4 * i);
        }
        Ok(HealthBuffer {
            assert_var,
            assert_exit_ptr: be32(off::ASSERT_EXIT_PTR),
            assert_callra: be32(off::ASSERT_CALLRA),
            time: be32(off::TIME),
            fw_ver: be32(off::FW_VER),
            hw_id: be32(off::HW_ID),
            rfr_severity: buf[off::RFR_SEVERITY],
            irisc_index: buf[off::IRISC_INDEX],
            synd: HealthSyndrome(buf[off::SYND]),
            ext_synd: u16::from_be_bytes([buf[off::EXT_SYND], buf[off::EXT_SYND + 1]]),
        })
    }

    /// Emits the 64 bytes.
    pub fn encode(&self) -> [u8; HEALTH_BUFFER_LEN] {
        let mut b = [0u8; HEALTH_BUFFER_LEN];
        let mut put = |at: usize, v: u32| b[at..at + 4].copy_from_slice(&v.to_be_bytes());
        for (i, v) in self.assert_var.iter().enumerate() {
            put(off::ASSERT_VAR + 4 * i, *v);
        }
        put(off::ASSERT_EXIT_PTR, self.assert_exit_ptr);
        put(off::ASSERT_CALLRA, self.assert_callra);
        put(off::TIME, self.time);
        put(off::FW_VER, self.fw_ver);
        put(off::HW_ID, self.hw_id);
        b[off::RFR_SEVERITY] = self.rfr_severity;
        b[off::IRISC_INDEX] = self.irisc_index;
        b[off::SYND] = self.synd.0;
        b[off::EXT_SYND..off::EXT_SYND + 2].copy_from_slice(&self.ext_synd.to_be_bytes());
        b
    }

    /// Recovery flow required (`rfr_severity >> 7`).
    pub fn rfr(&self) -> bool {
        self.rfr_severity >> 7 != 0
    }

    /// Severity, when the valid bit is set.
    pub fn severity(&self) -> Option<u8> {
        (self.rfr_severity & 0x8 != 0).then_some(self.rfr_severity & 0x7)
    }

    /// The device no longer answers reads (`fw_ver` all ones).
    pub fn unreachable(&self) -> bool {
        self.fw_ver == FW_VER_UNREACHABLE
    }

    /// Firmware asks for recovery: `rfr` set and a non-zero syndrome (`sensor_fw_synd_rfr`).
    pub fn recovery_required(&self) -> bool {
        self.rfr() && self.synd.0 != 0
    }
}

//! The initialization segment at BAR0 offset 0 (`struct mlx5_init_seg`): register offsets and
//! the decoding of the registers' values. Values here are the host-order numbers a 32-bit
//! big-endian register access returns.

use core::fmt;

use crate::error::{Error, Result};

/// Register offsets from BAR0.
pub mod off {
    /// `fw_rev`: \[31:16\] minor, \[15:0\] major.
    pub const FW_REV: usize = 0x000;
    /// `cmdif_rev_fw_sub`: \[31:16\] command interface revision, \[15:0\] FW subminor.
    pub const CMDIF_REV_FW_SUB: usize = 0x004;
    /// `cmdq_addr_h`: command queue address bits 63:32.
    pub const CMDQ_ADDR_H: usize = 0x010;
    /// `cmdq_addr_l_sz`: address bits 31:12, nic_interface, log size, log stride.
    pub const CMDQ_ADDR_L_SZ: usize = 0x014;
    /// `cmd_dbell`: write `1 << slot`.
    pub const CMD_DBELL: usize = 0x018;
    /// `initializing`.
    pub const INITIALIZING: usize = 0x1fc;
    /// `health` buffer (64 bytes).
    pub const HEALTH: usize = 0x200;
    /// `cmd_exec_to`.
    pub const CMD_EXEC_TO: usize = 0xff8;
    /// `cmd_q_init_to`.
    pub const CMD_Q_INIT_TO: usize = 0xffc;
    /// `internal_timer_h`.
    pub const INTERNAL_TIMER_H: usize = 0x1000;
    /// `internal_timer_l`.
    pub const INTERNAL_TIMER_L: usize = 0x1004;
    /// `health_counter`: \[31:24\] health syndrome, \[23:0\] counter.
    pub const HEALTH_COUNTER: usize = 0x1010;
    /// `real_time_h`.
    pub const REAL_TIME_H: usize = 0x1040;
    /// `real_time_l`.
    pub const REAL_TIME_L: usize = 0x1044;
    /// `ieee1588_clk` (64-bit).
    pub const IEEE1588_CLK: usize = 0x2000;
    /// `ieee1588_clk_type`.
    pub const IEEE1588_CLK_TYPE: usize = 0x2008;
    /// `clr_intx`.
    pub const CLR_INTX: usize = 0x200c;
}

/// Bytes of BAR0 the initialization segment spans (`sizeof(struct mlx5_init_seg)`).
pub const INIT_SEG_LEN: usize = 0x2010;
/// Command interface revision the driver requires (`CMD_IF_REV`).
pub const CMD_IF_REV: u16 = 5;
/// log2 of the device page (`MLX5_ADAPTER_PAGE_SHIFT`): the command queue is one such page.
pub const ADAPTER_PAGE_SHIFT: u32 = 12;
/// Bit of `initializing` that says firmware reset is supported (`MLX5_FW_RESET_SUPPORTED_OFFSET`).
pub const FW_RESET_SUPPORTED_BIT: u32 = 30;

/// Firmware version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FwRev {
    /// Major (`fw_rev & 0xffff`).
    pub major: u16,
    /// Minor (`fw_rev >> 16`).
    pub minor: u16,
    /// Subminor (`cmdif_rev_fw_sub & 0xffff`).
    pub subminor: u16,
}

impl FwRev {
    /// Decodes the `fw_rev` and `cmdif_rev_fw_sub` registers.
    pub fn from_regs(fw_rev: u32, cmdif_rev_fw_sub: u32) -> Self {
        FwRev {
            major: (fw_rev & 0xffff) as u16,
            minor: (fw_rev >> 16) as u16,
            subminor: (cmdif_rev_fw_sub & 0xffff) as u16,
        }
    }

    /// The `fw_rev` register value.
    pub fn fw_rev_reg(&self) -> u32 {
        (u32::from(self.minor) << 16) | u32::from(self.major)
    }

    /// The `cmdif_rev_fw_sub` register value for a command interface revision.
    pub fn cmdif_rev_fw_sub_reg(&self, cmdif_rev: u16) -> u32 {
        (u32::from(cmdif_rev) << 16) | u32::from(self.subminor)
    }
}

impl fmt::Display for FwRev {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.subminor)
    }
}

/// Command interface revision from `cmdif_rev_fw_sub`.
pub fn cmdif_rev(cmdif_rev_fw_sub: u32) -> u16 {
    (cmdif_rev_fw_sub >> 16) as u16
}

/// NIC interface state (`MLX5_INITIAL_SEG_NIC_INTERFACE_*`), `cmdq_addr_l_sz` bits \[10:8\]
/// as `mlx5_get_nic_state` reads them (`(reg >> 8) & 7`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct NicInterface(pub u8);

impl NicInterface {
    /// 0: normal operation.
    pub const FULL_DRIVER: Self = Self(0x0);
    /// 1: firmware has shut the NIC interface down (after fast teardown or a fatal error).
    pub const DISABLED: Self = Self(0x1);
    /// 2: no DRAM NIC.
    pub const NO_DRAM_NIC: Self = Self(0x2);
    /// 7: driver-requested software reset during recovery.
    pub const SW_RESET: Self = Self(0x7);

    /// The kernel's name, or `None` for an undefined value.
    pub fn name(self) -> Option<&'static str> {
        Some(match self.0 {
            0 => "FULL_DRIVER",
            1 => "DISABLED",
            2 => "NO_DRAM_NIC",
            7 => "SW_RESET",
            _ => return None,
        })
    }
}

/// The `cmdq_addr_l_sz` register.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CmdqAddrLoSz {
    /// Command queue address bits 31:12 (the low 12 bits are zero).
    pub addr_lo: u32,
    /// NIC interface state.
    pub nic_interface: NicInterface,
    /// log2 of the number of entries (read-only, from firmware).
    pub log_cmdq_size: u8,
    /// log2 of the entry stride (read-only, from firmware).
    pub log_cmdq_stride: u8,
}

impl CmdqAddrLoSz {
    /// Decodes the register.
    pub fn decode(reg: u32) -> Self {
        CmdqAddrLoSz {
            addr_lo: reg & 0xffff_f000,
            nic_interface: NicInterface(((reg >> 8) & 7) as u8),
            log_cmdq_size: ((reg >> 4) & 0xf) as u8,
            log_cmdq_stride: (reg & 0xf) as u8,
        }
    }

    /// Encodes the register.
    pub fn encode(&self) -> u32 {
        (self.addr_lo & 0xffff_f000)
            | (u32::from(self.nic_interface.0 & 7) << 8)
            | (u32::from(self.log_cmdq_size & 0xf) << 4)
            | u32::from(self.log_cmdq_stride & 0xf)
    }

    /// Checks the geometry the kernel accepts (`mlx5_cmd_init`): at most 32 entries and
    /// entries x stride within one 4 KiB page.
    pub fn check_geometry(&self) -> Result<()> {
        if (1usize << self.log_cmdq_size) > crate::mlx5::cmd::entry::MAX_COMMANDS {
            return Err(Error::Invalid {
                what: "log_cmdq_size",
                reason: "firmware reports more than 32 command slots",
            });
        }
        if u32::from(self.log_cmdq_size) + u32::from(self.log_cmdq_stride) > ADAPTER_PAGE_SHIFT {
            return Err(Error::Invalid {
                what: "command queue geometry",
                reason: "log_cmdq_size + log_cmdq_stride exceeds one 4 KiB page",
            });
        }
        Ok(())
    }
}

/// The value a driver writes to `cmdq_addr_l_sz` to move the NIC interface to `state` while
/// keeping the queue address (`mlx5_set_nic_state`).
pub fn with_nic_state(cmdq_addr_l_sz: u32, state: NicInterface) -> u32 {
    (cmdq_addr_l_sz & 0xffff_f000) | (u32::from(state.0) << 8)
}

/// The `initializing` register.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Initializing {
    /// Bit 31: firmware still initializing; poll until clear.
    pub initializing: bool,
    /// Bit 30: firmware reset supported.
    pub fw_reset_supported: bool,
    /// Bits \[26:24\]: NIC interface modes supported.
    pub nic_interface_supported: u8,
    /// Bit 23: this is the embedded CPU (BlueField ARM) function.
    pub embedded_cpu: bool,
}

impl Initializing {
    /// Decodes the register.
    pub fn decode(reg: u32) -> Self {
        Initializing {
            initializing: reg >> 31 != 0,
            fw_reset_supported: (reg >> FW_RESET_SUPPORTED_BIT) & 1 != 0,
            nic_interface_supported: ((reg >> 24) & 7) as u8,
            embedded_cpu: (reg >> 23) & 1 != 0,
        }
    }

    /// Encodes the register.
    pub fn encode(&self) -> u32 {
        (u32::from(self.initializing) << 31)
            | (u32::from(self.fw_reset_supported) << FW_RESET_SUPPORTED_BIT)
            | (u32::from(self.nic_interface_supported & 7) << 24)
            | (u32::from(self.embedded_cpu) << 23)
    }
}

/// The `health_counter` register.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HealthCounter {
    /// Bits \[31:24\]: health syndrome (newer devices).
    pub syndrome: u8,
    /// Bits \[23:0\]: counter the firmware increments while alive.
    pub counter: u32,
}

impl HealthCounter {
    /// Decodes the register.
    pub fn decode(reg: u32) -> Self {
        HealthCounter {
            syndrome: (reg >> 24) as u8,
            counter: reg & 0x00ff_ffff,
        }
    }

    /// Encodes the register (the counter wraps at 24 bits).
    pub fn encode(&self) -> u32 {
        (u32::from(self.syndrome) << 24) | (self.counter & 0x00ff_ffff)
    }
}

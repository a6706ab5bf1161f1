//! Driver timeouts (`lib/tout.c` defaults) and the decoding of the init segment's
//! `cmd_exec_to` / `cmd_q_init_to` registers.

use core::time::Duration;

/// A timeout the driver applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Timeout {
    /// Wait for the `initializing` bit before the command queue exists.
    FwPreInit,
    /// The same wait during recovery.
    FwPreInitOnRecovery,
    /// Interval of "still waiting" warnings during the pre-init wait.
    FwPreInitWarnMessageInterval,
    /// Poll interval of the pre-init wait.
    FwPreInitWait,
    /// Wait for `initializing` after the command queue is set up (overridden by
    /// `cmd_q_init_to`).
    FwInit,
    /// One command (overridden by `cmd_exec_to`).
    Cmd,
    /// PCI toggle during recovery.
    PciToggle,
    /// Health poll interval.
    HealthPollInterval,
    /// Full crash dump.
    FullCrdump,
    /// Firmware reset.
    FwReset,
    /// Flush on error.
    FlushOnError,
    /// PCI sync for firmware update.
    PciSyncUpdate,
    /// Fast teardown: wait for NIC interface DISABLED.
    Teardown,
    /// FSM reactivation.
    FsmReactivate,
    /// Page reclaim.
    ReclaimPages,
    /// VF page reclaim.
    ReclaimVfsPages,
    /// Reset unload.
    ResetUnload,
}

impl Timeout {
    /// Every timeout.
    pub const ALL: [Timeout; 17] = [
        Timeout::FwPreInit,
        Timeout::FwPreInitOnRecovery,
        Timeout::FwPreInitWarnMessageInterval,
        Timeout::FwPreInitWait,
        Timeout::FwInit,
        Timeout::Cmd,
        Timeout::PciToggle,
        Timeout::HealthPollInterval,
        Timeout::FullCrdump,
        Timeout::FwReset,
        Timeout::FlushOnError,
        Timeout::PciSyncUpdate,
        Timeout::Teardown,
        Timeout::FsmReactivate,
        Timeout::ReclaimPages,
        Timeout::ReclaimVfsPages,
        Timeout::ResetUnload,
    ];

    /// The kernel default in milliseconds (`tout_def_sw_val`).
    #[allow(clippy::match_same_arms)] // one line per entry of tout_def_sw_val
    pub fn default_ms(self) -> u64 {
        match self {
            Timeout::FwPreInit => 120_000,
            Timeout::FwPreInitOnRecovery => 7_200_000,
            Timeout::FwPreInitWarnMessageInterval => 20_000,
            Timeout::FwPreInitWait => 2,
            Timeout::FwInit => 2_000,
            Timeout::Cmd => 60_000,
            Timeout::PciToggle => 2_000,
            Timeout::HealthPollInterval => 2_000,
            Timeout::FullCrdump => 60_000,
            Timeout::FwReset => 60_000,
            Timeout::FlushOnError => 2_000,
            Timeout::PciSyncUpdate => 5_000,
            Timeout::Teardown => 3_000,
            Timeout::FsmReactivate => 5_000,
            Timeout::ReclaimPages => 5_000,
            Timeout::ReclaimVfsPages => 120_000,
            Timeout::ResetUnload => 300_000,
        }
    }

    /// The default as a duration.
    pub fn default_duration(self) -> Duration {
        Duration::from_millis(self.default_ms())
    }
}

/// Decodes an init-segment timeout register (`tout_convert_iseg_to_ms`): value in bits
/// \[19:0\], unit in bits \[30:29\] (0 ms, 1 s, 2 min, 3 h).
pub fn iseg_timeout_ms(reg: u32) -> u64 {
    let value = u64::from(reg & 0x000f_ffff);
    match (reg >> 29) & 0x3 {
        0 => value,
        1 => value * 1_000,
        2 => value * 60_000,
        _ => value * 3_600_000,
    }
}

/// Encodes a timeout register value from a count and a unit (0 ms, 1 s, 2 min, 3 h); for the
/// simulator's init segment. Counts wider than 20 bits are cut to 20 bits.
pub fn iseg_timeout_reg(value: u32, unit: u8) -> u32 {
    (u32::from(unit & 3) << 29) | (value & 0x000f_ffff)
}

/// The timeouts the init segment overrides: `cmd_q_init_to` sets [`Timeout::FwInit`] and
/// `cmd_exec_to` sets [`Timeout::Cmd`], but only when `cmd_q_init_to` is non-zero
/// (`mlx5_tout_query_iseg`). Returns (fw_init_ms, cmd_ms).
pub fn from_iseg(cmd_exec_to: u32, cmd_q_init_to: u32) -> (u64, u64) {
    if cmd_q_init_to == 0 {
        (Timeout::FwInit.default_ms(), Timeout::Cmd.default_ms())
    } else {
        (iseg_timeout_ms(cmd_q_init_to), iseg_timeout_ms(cmd_exec_to))
    }
}

//! The initialization segment at BAR0 offset 0 as the firmware presents it: firmware and
//! command interface revisions, the command queue address (with the read-only size and
//! stride), the NIC interface state, the `initializing` bit, the health buffer and counter,
//! and the free-running timers. Reads are computed from the state and the clock.

use std::time::Duration;

use firmware_cmds::mlx5::health::{HealthBuffer, HealthSyndrome};
use firmware_cmds::mlx5::init_seg::{
    CMD_IF_REV, CmdqAddrLoSz, HealthCounter, Initializing, NicInterface, off,
};

use super::config::{LOG_CMDQ_SIZE, LOG_CMDQ_STRIDE};
use super::state::State;

/// The health counter at `now`: one increment per health tick since creation, unless stopped.
pub(crate) fn health_counter_value(st: &State, now: Duration) -> u32 {
    if let Some(v) = st.health.stopped_at {
        return v;
    }
    let ticks = now.saturating_sub(st.born).as_nanos() / st.cfg.health_tick.as_nanos().max(1);
    (ticks as u32) & 0x00ff_ffff
}

/// Whether the `initializing` bit reads 1 at `now`.
pub(crate) fn initializing(st: &State, now: Duration) -> bool {
    st.faults.hold_initializing || now.saturating_sub(st.born) < st.cfg.init_delay
}

/// The command queue's base address as the driver wrote it.
pub(crate) fn cmdq_base(st: &State) -> u64 {
    (u64::from(st.cmdq_addr_h) << 32) | u64::from(st.cmdq_addr_l & 0xffff_f000)
}

/// One 32-bit register of the initialization segment (host-order value of a big-endian
/// access). Offsets the segment does not define read 0.
pub(crate) fn read32(st: &State, offset: usize, now: Duration) -> u32 {
    let health = off::HEALTH..off::HEALTH + 0x40;
    if health.contains(&offset) {
        let buf = HealthBuffer {
            fw_ver: st.health.fw_ver,
            rfr_severity: st.health.rfr_severity,
            synd: HealthSyndrome(st.health.synd),
            ext_synd: st.health.ext_synd,
            ..HealthBuffer::default()
        }
        .encode();
        let at = (offset - off::HEALTH) & !3;
        return u32::from_be_bytes([buf[at], buf[at + 1], buf[at + 2], buf[at + 3]]);
    }
    let ns = u64::try_from(now.as_nanos()).unwrap_or(u64::MAX);
    match offset & !3 {
        off::FW_REV => st.cfg.fw.fw_rev_reg(),
        off::CMDIF_REV_FW_SUB => st.cfg.fw.cmdif_rev_fw_sub_reg(CMD_IF_REV),
        off::CMDQ_ADDR_H => st.cmdq_addr_h,
        off::CMDQ_ADDR_L_SZ => CmdqAddrLoSz {
            addr_lo: st.cmdq_addr_l,
            nic_interface: NicInterface(st.nic_interface),
            log_cmdq_size: LOG_CMDQ_SIZE,
            log_cmdq_stride: LOG_CMDQ_STRIDE,
        }
        .encode(),
        off::INITIALIZING => Initializing {
            initializing: initializing(st, now),
            fw_reset_supported: false,
            nic_interface_supported: 0,
            embedded_cpu: st.cfg.embedded_cpu,
        }
        .encode(),
        off::INTERNAL_TIMER_H | off::REAL_TIME_H => (ns >> 32) as u32,
        off::INTERNAL_TIMER_L | off::REAL_TIME_L => ns as u32,
        off::HEALTH_COUNTER => HealthCounter {
            syndrome: st.health.synd,
            counter: health_counter_value(st, now),
        }
        .encode(),
        _ => 0,
    }
}

/// What a register write asks of the device beyond storing it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WriteEffect {
    /// Nothing more.
    None,
    /// The command doorbell rang for these slots.
    CommandDoorbell(u32),
}

/// A 32-bit register write.
pub(crate) fn write32(st: &mut State, offset: usize, value: u32) -> WriteEffect {
    match offset {
        off::CMDQ_ADDR_H => st.cmdq_addr_h = value,
        off::CMDQ_ADDR_L_SZ => {
            let r = CmdqAddrLoSz::decode(value);
            st.cmdq_addr_l = r.addr_lo;
            // The driver requests a state; firmware reports where it went. A software reset
            // request (recovery) and a fast teardown both end with the interface disabled,
            // and dead firmware keeps it disabled until a function reset.
            st.nic_interface = match r.nic_interface {
                _ if st.health.fatal => NicInterface::DISABLED.0,
                NicInterface::SW_RESET | NicInterface::DISABLED => NicInterface::DISABLED.0,
                other => other.0,
            };
        }
        off::CMD_DBELL => return WriteEffect::CommandDoorbell(value),
        _ => {}
    }
    WriteEffect::None
}

//! Health polling (`health.c` `poll_health`, rdma-core `mlx5_vfio_poll_health`): every
//! HEALTH_POLL_INTERVAL (2 s) the health buffer, the NIC interface state and the health
//! counter are read; a fatal sensor or a counter stuck for [`MAX_MISSES`] polls makes the
//! device fatal. Between polls, `fw_ver` is read every [`REMOVAL_CHECK`] so that a device that
//! went away (reads return all-ones) is noticed within milliseconds, not seconds.
//!
//! Fatal: `fw_ver` all-ones (removed), NIC interface DISABLED or SW_RESET, a non-zero health
//! syndrome with the recovery-flow-required bit (`sensor_fw_synd_rfr`: `rfr && synd`, in the
//! kernel's `health.c` and rdma-core's `mlx5_vfio.c` alike), or the counter stuck (rdma-core's
//! `mlx5_vfio_poll_health`). A syndrome without that bit (high temperature, say) is a report
//! the firmware keeps running through: it is logged once per new syndrome, as the kernel
//! queues its health report only when the syndrome changes, and the device stays up.

use std::fmt::Write as _;
use std::time::Duration;

use firmware_cmds::mlx5::health::{FW_VER_UNREACHABLE, HEALTH_BUFFER_LEN, HealthBuffer};
use firmware_cmds::mlx5::init_seg::{self, CmdqAddrLoSz, HealthCounter, NicInterface};
use firmware_cmds::mlx5::timeouts::Timeout;

use crate::mmio::Mmio;

/// Polls with an unchanged health counter before the firmware is declared stuck (`MAX_MISSES`).
pub const MAX_MISSES: u32 = 3;

/// How often `fw_ver` is read to notice a removed device between health polls.
pub const REMOVAL_CHECK: Duration = Duration::from_millis(10);

/// What one health poll reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Sample {
    pub(crate) health: HealthBuffer,
    pub(crate) nic: NicInterface,
    pub(crate) counter: u32,
}

/// The outcome of a poll.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    Healthy,
    Fatal(String),
    /// Reads return all-ones: the device is gone.
    Removed(String),
}

/// Health polling state.
#[derive(Debug, Default)]
pub(crate) struct Health {
    started: bool,
    interval: Duration,
    next_poll: Duration,
    next_removal_check: Duration,
    prev_count: Option<u32>,
    misses: u32,
    /// The syndrome of the last poll, so that one without the recovery bit is reported once.
    prev_synd: u8,
}

/// Read the health buffer, NIC state and counter.
pub(crate) fn sample(bar: &Mmio) -> Sample {
    let mut raw = [0u8; HEALTH_BUFFER_LEN];
    for (i, chunk) in raw.chunks_exact_mut(4).enumerate() {
        let v = bar.read32((init_seg::off::HEALTH + 4 * i) as u64);
        chunk.copy_from_slice(&v.to_be_bytes());
    }
    let health = HealthBuffer::decode(&raw).unwrap_or_default();
    let nic = CmdqAddrLoSz::decode(bar.read32(init_seg::off::CMDQ_ADDR_L_SZ as u64)).nic_interface;
    let counter = HealthCounter::decode(bar.read32(init_seg::off::HEALTH_COUNTER as u64)).counter;
    Sample {
        health,
        nic,
        counter,
    }
}

fn fw_ver(bar: &Mmio) -> u32 {
    bar.read32((init_seg::off::HEALTH + firmware_cmds::mlx5::health::off::FW_VER) as u64)
}

impl Health {
    /// Start polling at `now` (after the command queue is up, as the kernel does).
    pub(crate) fn start(&mut self, now: Duration) {
        self.start_with(now, Timeout::HealthPollInterval.default_duration());
    }

    /// Start with another interval (tests).
    pub(crate) fn start_with(&mut self, now: Duration, interval: Duration) {
        self.started = true;
        self.interval = interval;
        self.next_poll = now;
        self.next_removal_check = now;
        self.prev_count = None;
        self.misses = 0;
    }

    /// Stop polling (teardown).
    pub(crate) fn stop(&mut self) {
        self.started = false;
    }

    /// Poll when due: `Some` verdict after a full poll or an all-ones read, `None` otherwise.
    pub(crate) fn check(&mut self, bar: &Mmio, now: Duration) -> Option<Verdict> {
        if !self.started {
            return None;
        }
        if now >= self.next_poll {
            self.next_poll = now.saturating_add(self.interval);
            self.next_removal_check = now.saturating_add(REMOVAL_CHECK);
            return Some(self.evaluate(&sample(bar)));
        }
        if now >= self.next_removal_check {
            self.next_removal_check = now.saturating_add(REMOVAL_CHECK);
            if fw_ver(bar) == FW_VER_UNREACHABLE {
                return Some(Verdict::Removed(removed_reason()));
            }
        }
        None
    }

    /// Judge one sample (`check_fatal_sensors`, then the counter, as `poll_health`).
    pub(crate) fn evaluate(&mut self, s: &Sample) -> Verdict {
        if s.health.unreachable() {
            return Verdict::Removed(removed_reason());
        }
        if s.nic == NicInterface::DISABLED || s.nic == NicInterface::SW_RESET {
            // Firmware that went fatal disables the interface and leaves its syndrome in the
            // health buffer (the kernel checks the interface first, `check_fatal_sensors`,
            // and prints the buffer with its report): name both.
            let mut reason = format!(
                "the NIC interface is {} (firmware shut the function down)",
                s.nic.name().unwrap_or("?")
            );
            if s.health.synd.0 != 0 {
                let rfr = if s.health.rfr() {
                    " with recovery required"
                } else {
                    ""
                };
                // Writing into a String cannot fail.
                let _ = write!(
                    reason,
                    "; health syndrome {}{rfr}, ext_synd {:#06x}",
                    s.health.synd, s.health.ext_synd
                );
            }
            return Verdict::Fatal(reason);
        }
        if s.health.synd.0 != 0 && s.health.rfr() {
            return Verdict::Fatal(format!(
                "health syndrome {} with recovery required, ext_synd {:#06x}",
                s.health.synd, s.health.ext_synd
            ));
        }
        let synd = std::mem::replace(&mut self.prev_synd, s.health.synd.0);
        if s.health.synd.0 != 0 && s.health.synd.0 != synd {
            tracing::warn!(
                "firmware health report: syndrome {}, ext_synd {:#06x}, severity {:?}, \
                 without the recovery-required bit; the device stays up",
                s.health.synd,
                s.health.ext_synd,
                s.health.severity()
            );
        }
        if self.prev_count == Some(s.counter) {
            self.misses += 1;
        } else {
            self.misses = 0;
        }
        self.prev_count = Some(s.counter);
        if self.misses >= MAX_MISSES {
            return Verdict::Fatal(format!(
                "the firmware health counter stayed at {:#x} for {} polls (firmware stuck)",
                s.counter,
                self.misses + 1
            ));
        }
        Verdict::Healthy
    }
}

fn removed_reason() -> String {
    "register reads return all-ones (fw_ver 0xffffffff): the device is gone or its PCI link is down"
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use firmware_cmds::mlx5::health::HealthSyndrome;

    fn healthy(counter: u32) -> Sample {
        Sample {
            health: HealthBuffer {
                fw_ver: 0x0010_0020,
                ..HealthBuffer::default()
            },
            nic: NicInterface::FULL_DRIVER,
            counter,
        }
    }

    #[test]
    fn a_moving_counter_is_healthy() {
        let mut h = Health::default();
        for c in 0..10 {
            assert_eq!(h.evaluate(&healthy(c)), Verdict::Healthy);
        }
    }

    #[test]
    fn a_counter_stuck_for_three_polls_is_fatal_on_the_third_miss() {
        let mut h = Health::default();
        assert_eq!(h.evaluate(&healthy(7)), Verdict::Healthy);
        assert_eq!(h.evaluate(&healthy(7)), Verdict::Healthy, "miss 1");
        assert_eq!(h.evaluate(&healthy(7)), Verdict::Healthy, "miss 2");
        assert!(matches!(h.evaluate(&healthy(7)), Verdict::Fatal(r) if r.contains("stuck")));
    }

    #[test]
    fn a_counter_that_moves_again_resets_the_misses() {
        let mut h = Health::default();
        h.evaluate(&healthy(1));
        h.evaluate(&healthy(1));
        h.evaluate(&healthy(1));
        assert_eq!(h.evaluate(&healthy(2)), Verdict::Healthy);
        assert_eq!(h.evaluate(&healthy(2)), Verdict::Healthy);
    }

    #[test]
    fn every_defined_syndrome_with_recovery_required_is_fatal_and_named() {
        for synd in HealthSyndrome::ALL {
            let mut h = Health::default();
            let mut s = healthy(1);
            s.health.synd = synd;
            // bit 7 recovery flow required, bit 3 severity valid, severity 2.
            s.health.rfr_severity = 0x8a;
            let Verdict::Fatal(reason) = h.evaluate(&s) else {
                panic!("{synd} not fatal");
            };
            assert!(reason.contains(synd.name().unwrap()), "{reason}");
        }
    }

    // The kernel's `sensor_fw_synd_rfr` is `rfr && synd`: a syndrome alone is reported, not
    // acted on.
    #[test]
    fn a_syndrome_without_the_recovery_bit_is_not_fatal() {
        for synd in HealthSyndrome::ALL {
            let mut h = Health::default();
            let mut s = healthy(1);
            s.health.synd = synd;
            // severity valid, severity 4, recovery bit clear.
            s.health.rfr_severity = 0x0c;
            assert_eq!(h.evaluate(&s), Verdict::Healthy, "{synd}");
            s.counter = 2;
            assert_eq!(h.evaluate(&s), Verdict::Healthy, "{synd}, second poll");
        }
        // ... and the recovery bit without a syndrome is nothing either.
        let mut h = Health::default();
        let mut s = healthy(1);
        s.health.rfr_severity = 0x80;
        assert_eq!(h.evaluate(&s), Verdict::Healthy);
    }

    #[test]
    fn all_ones_means_removed_and_nic_disabled_is_fatal() {
        let mut h = Health::default();
        let mut s = healthy(1);
        s.health.fw_ver = FW_VER_UNREACHABLE;
        assert!(matches!(h.evaluate(&s), Verdict::Removed(_)));
        let mut s = healthy(1);
        s.nic = NicInterface::DISABLED;
        assert!(matches!(h.evaluate(&s), Verdict::Fatal(r) if r.contains("DISABLED")));
        s.nic = NicInterface::SW_RESET;
        assert!(matches!(h.evaluate(&s), Verdict::Fatal(r) if r.contains("SW_RESET")));
    }

    /// Firmware that went fatal shows DISABLED and its syndrome: the reason names both,
    /// with or without the recovery bit.
    #[test]
    fn a_disabled_interface_names_the_syndrome_it_was_left_with() {
        for (rfr_severity, rfr) in [(0x8a, true), (0x0a, false)] {
            let mut h = Health::default();
            let mut s = healthy(1);
            s.nic = NicInterface::DISABLED;
            s.health.synd = HealthSyndrome::HW_FATAL_ERR;
            s.health.rfr_severity = rfr_severity;
            let Verdict::Fatal(reason) = h.evaluate(&s) else {
                panic!("not fatal");
            };
            assert!(reason.contains("DISABLED"), "{reason}");
            assert!(
                reason.contains(HealthSyndrome::HW_FATAL_ERR.name().unwrap()),
                "{reason}"
            );
            assert_eq!(reason.contains("recovery required"), rfr, "{reason}");
        }
    }
}

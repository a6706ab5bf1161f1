//! The simulator's clock: real (follows the monotonic clock) or virtual (moves only when the
//! driver waits), so that timeouts and delays in tests are exact and instant.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How the simulator's time passes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClockMode {
    /// Time is the monotonic clock since the device was created; waiting sleeps.
    Real,
    /// Time stands still until the driver waits; waiting jumps to the deadline (or to the
    /// next device event). Deterministic and instant.
    Virtual,
}

/// A device's clock.
#[derive(Debug)]
pub struct SimClock {
    mode: ClockMode,
    origin: Instant,
    /// Virtual time in nanoseconds (unused in real mode).
    virt_ns: AtomicU64,
}

impl SimClock {
    /// A clock in `mode`, starting at zero.
    pub fn new(mode: ClockMode) -> Self {
        SimClock {
            mode,
            origin: Instant::now(),
            virt_ns: AtomicU64::new(0),
        }
    }

    /// The mode.
    pub fn mode(&self) -> ClockMode {
        self.mode
    }

    /// Time since the device was created.
    pub fn now(&self) -> Duration {
        match self.mode {
            ClockMode::Real => self.origin.elapsed(),
            ClockMode::Virtual => Duration::from_nanos(self.virt_ns.load(Ordering::Acquire)),
        }
    }

    /// Let time reach `t`: sleep in real mode, jump in virtual mode. Never goes back.
    pub fn pass_until(&self, t: Duration) {
        match self.mode {
            ClockMode::Real => {
                if let Some(left) = t.checked_sub(self.now()) {
                    std::thread::sleep(left);
                }
            }
            ClockMode::Virtual => {
                let ns = u64::try_from(t.as_nanos()).unwrap_or(u64::MAX);
                self.virt_ns.fetch_max(ns, Ordering::AcqRel);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn virtual_time_moves_only_when_asked_and_never_back() {
        let c = SimClock::new(ClockMode::Virtual);
        assert_eq!(c.now(), Duration::ZERO);
        c.pass_until(Duration::from_secs(3600));
        assert_eq!(c.now(), Duration::from_secs(3600));
        c.pass_until(Duration::from_secs(1));
        assert_eq!(c.now(), Duration::from_secs(3600));
    }

    #[test]
    fn real_time_sleeps() {
        let c = SimClock::new(ClockMode::Real);
        let target = c.now() + Duration::from_millis(20);
        c.pass_until(target);
        assert!(c.now() >= target);
    }
}

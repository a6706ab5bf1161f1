//! Waiting on the device: deadlines and an exponential back-off between polls, on the device's
//! own clock (`DeviceBackend::now`/`wait`), never the host's. On a simulated device with a
//! virtual clock, waiting is what runs the model, so every timeout here is exact and instant.

use std::time::Duration;

use crate::backend::DeviceBackend;

/// First pause of a poll loop: short, because most firmware commands complete in microseconds.
const FIRST_STEP: Duration = Duration::from_micros(5);

/// Polls with pauses that double from a few microseconds up to `max`, so a fast completion is
/// seen quickly and a slow one costs few wake-ups. `wait` returns early when the device
/// signals (an interrupt), so the pause is only an upper bound.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Backoff {
    step: Duration,
    max: Duration,
}

impl Backoff {
    /// A back-off whose pauses never exceed `max`.
    pub(crate) fn new(max: Duration) -> Self {
        Backoff {
            step: FIRST_STEP.min(max),
            max,
        }
    }

    /// Let time pass until the next poll, never past `deadline`.
    pub(crate) fn pause(&mut self, backend: &dyn DeviceBackend, deadline: Duration) {
        let now = backend.now();
        let until = now.saturating_add(self.step).min(deadline).max(now);
        backend.wait(until);
        self.step = self.step.saturating_mul(2).min(self.max);
    }
}

/// Milliseconds of a duration, saturating, for error messages.
pub(crate) fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_double_up_to_the_cap() {
        let mut b = Backoff::new(Duration::from_micros(40));
        assert_eq!(b.step, Duration::from_micros(5));
        b.step = b.step.saturating_mul(2).min(b.max);
        b.step = b.step.saturating_mul(2).min(b.max);
        b.step = b.step.saturating_mul(2).min(b.max);
        assert_eq!(b.step, Duration::from_micros(40));
        b.step = b.step.saturating_mul(2).min(b.max);
        assert_eq!(b.step, Duration::from_micros(40));
    }

    #[test]
    fn ms_saturates() {
        assert_eq!(ms(Duration::from_millis(1500)), 1500);
        assert_eq!(ms(Duration::MAX), u64::MAX);
    }
}

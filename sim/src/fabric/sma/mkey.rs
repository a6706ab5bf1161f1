//! M_Key protection (IBA 14.2.4): who may read and write a port's management state.
//!
//! A port with M_Key 0 is unprotected. Otherwise an SMP whose M_Key differs is judged by the
//! port's M_KeyProtectBits:
//!
//! | Protect | Get | Set, TrapRepress |
//! |---|---|---|
//! | 0 | answered | dropped, violation |
//! | 1 | answered, PortInfo:M_Key reads 0 | dropped, violation |
//! | 2, 3 | dropped, violation | dropped, violation |
//!
//! A violation increments M_KeyViolations (saturating), makes the network send trap 256 (Bad
//! M_Key) to the SM, and, if M_KeyLeasePeriod is not 0, starts the lease: when it runs out
//! without a valid Get, Set or TrapRepress in between, the protect bits fall back to 0 so that
//! a new SM can take the port over. The rules follow the kernel's software SMA (`qib_mad.c`
//! `check_mkey`, and `qib_bad_mkey` for the trap).

use std::time::Duration;

use mad_wire::method;

use super::Sma;
use crate::fabric::model::PortId;

/// The verdict of the M_Key check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Check {
    /// Go ahead.
    Pass,
    /// Go ahead, but PortInfo must report M_Key as 0 (protect level 1, wrong key, Get).
    HideKey,
    /// Drop the SMP without an answer.
    Fail,
}

impl Sma<'_> {
    /// Checks an SMP with `method` and `key` against the M_Key of `port`.
    pub(super) fn check_mkey(&mut self, port: PortId, m: u8, key: u64, ignore: bool) -> Check {
        let now = self.now;
        if let Some(deadline) = self.agents.extra.get(port).and_then(|e| e.lease_deadline) {
            if now >= deadline {
                self.fabric.port_mut(port).state.m_key_protect = 0;
                self.extra_mut(port).lease_deadline = None;
            }
        }
        let state = self.fabric.port(port).state;
        let valid = ignore || state.m_key == 0 || state.m_key == key;
        let guarded = m == method::GET || m == method::SET || m == method::TRAP_REPRESS;
        if valid {
            if guarded {
                if let Some(e) = self.agents.extra.get_mut(port) {
                    e.lease_deadline = None;
                }
            }
            return Check::Pass;
        }
        if !guarded {
            return Check::Pass;
        }
        if m == method::GET && state.m_key_protect < 2 {
            return if state.m_key_protect == 1 {
                Check::HideKey
            } else {
                Check::Pass
            };
        }
        let lease = state.m_key_lease_period;
        let e = self.extra_mut(port);
        e.m_key_violations = e.m_key_violations.saturating_add(1);
        if e.lease_deadline.is_none() && lease != 0 {
            e.lease_deadline = Some(now + Duration::from_secs(u64::from(lease)));
        }
        Check::Fail
    }
}

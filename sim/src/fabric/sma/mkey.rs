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
//!
//! Which port's M_Key guards an SMP: a switch's port 0; a CA's receiving port, and for a
//! PortInfo Get or Set whose modifier names another port of the CA, that port as well, since
//! a port's M_Key guards its own PortInfo (`qib_mad.c`: `subn_get_portinfo` checks the named
//! port's key when the receiving port's passed, `process_subn` checks it too when the
//! receiving port's failed, so that both count). The named port's verdict alone decides
//! whether its M_Key reads 0. Unlike `qib_mad.c`, which checks the named port without the
//! caller's flags, MAD_IFC's "ignore M_Key" covers the named port too: the flag says the
//! local host is trusted, whichever of its ports the PortInfo is of.

use std::time::Duration;

use mad_wire::method;

use super::{Reply, Silent, Sma};
use crate::fabric::model::{NodeId, PortId};

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

/// The SMP an M_Key verdict is given on: what of it the verdict depends on.
#[derive(Debug, Clone, Copy)]
pub(super) struct Request {
    /// Its method.
    pub(super) method: u8,
    /// Its AttributeID.
    pub(super) attr: u16,
    /// Its AttributeModifier.
    pub(super) attr_mod: u32,
    /// The M_Key it carries.
    pub(super) key: u64,
    /// MAD_IFC's "ignore M_Key" (the local host).
    pub(super) ignore: bool,
}

impl Sma<'_> {
    /// Checks `req`, which reached `node` by port `in_port`, against the M_Key of every port
    /// that guards it (see the module documentation); `key_port` is the SMA's own (a
    /// switch's port 0, a CA's receiving port). `Err` holds the reply to a violation;
    /// `Ok` says whether PortInfo's M_Key must read 0.
    pub(super) fn check_smp_mkey(
        &mut self,
        node: NodeId,
        in_port: u8,
        key_port: PortId,
        req: Request,
    ) -> Result<Check, Reply> {
        let own = self.check_mkey(key_port, req.method, req.key, req.ignore);
        let named = (req.attr == mad_wire::attr_id::sm::PORT_INFO
            && (req.method == method::GET || req.method == method::SET))
            .then(|| self.named_other_port(node, in_port, req.attr_mod))
            .flatten()
            .map(|p| (p, self.check_mkey(p, req.method, req.key, req.ignore)));
        match (own, named) {
            (Check::Fail, n) => Err(Reply::Consumed(Silent::MkeyViolation {
                port: key_port,
                also: n.and_then(|(p, c)| (c == Check::Fail).then_some(p)),
            })),
            (_, Some((p, Check::Fail))) => Err(Reply::Consumed(Silent::MkeyViolation {
                port: p,
                also: None,
            })),
            // The named port's verdict alone says whether its M_Key reads 0.
            (_, Some((_, c))) | (c, None) => Ok(c),
        }
    }

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

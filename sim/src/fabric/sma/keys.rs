//! The P_Key and Q_Key checks of a GMP (a MAD on QP1, not VL15) that reaches the agents of a
//! simulated node, and the violation counters that go with them (PortInfo:P_KeyViolations and
//! Q_KeyViolations, saturating at 0xFFFF; a Set writing 0 resets them, `port_info.rs`).
//!
//! - P_Key (IBA 10.9.3): the packet's P_Key must match an entry of the P_Key table of the end
//!   port it reached (a CA's port, a switch's port 0): same partition, not both limited
//!   members. SMPs are exempt.
//! - Q_Key: a GMP to QP1 must carry QP1's Q_Key, 0x80010000.
//!
//! A packet failing either is dropped without an answer, the port counts the violation, and
//! the network sends trap 257 (Bad P_Key) or 258 (Bad Q_Key) to the SM. The P_Key is checked
//! first, as the BTH that holds it comes before the DETH that holds the Q_Key (the kernel's
//! software SMAs, `qib_ud_rcv`, check them in that order too).

use super::Sma;
use crate::fabric::model::PortId;

pub use crate::packet::QP1_QKEY;

/// Which key check a GMP failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyViolation {
    /// Its P_Key matches no entry of the port's P_Key table: trap 257.
    Pkey,
    /// It was for QP1 with a Q_Key other than [`QP1_QKEY`]: trap 258.
    Qkey,
}

impl Sma<'_> {
    /// Checks a GMP that reached the end port `port` carrying `pkey`, for QP `dst_qp` with
    /// `qkey`, and counts a violation at the port.
    pub fn check_gmp_keys(
        &mut self,
        port: PortId,
        pkey: u16,
        dst_qp: u32,
        qkey: u32,
    ) -> Result<(), KeyViolation> {
        if !self.accepts_pkey(port, pkey) {
            let x = self.extra_mut(port);
            x.p_key_violations = x.p_key_violations.saturating_add(1);
            return Err(KeyViolation::Pkey);
        }
        if dst_qp == 1 && qkey != QP1_QKEY {
            let x = self.extra_mut(port);
            x.q_key_violations = x.q_key_violations.saturating_add(1);
            return Err(KeyViolation::Qkey);
        }
        Ok(())
    }
}

//! Writes to UAR pages: the CQ arm doorbell (+0x20, 64-bit), the EQ doorbells (+0x40 update
//! and arm, +0x48 update only) and the BlueFlame registers (+0x800.., the first 8 bytes of a
//! send WQE's control segment at the start of a half). A doorbell for a queue of another UAR
//! is ignored, as the UAR is what protects a queue's doorbells.

use firmware_cmds::mlx5::doorbell::{
    BFREGS_PER_UAR, CqArm, CqArmCmd, EqDoorbell, UAR_BF_OFFSET, UAR_CQ_DOORBELL,
};

use super::config::LOG_BF_REG_SIZE;
use super::cq::Arm;
use super::state::State;

/// What a UAR write asks of the device beyond the state change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum UarEffect {
    /// Nothing more.
    None,
    /// Run the send queue of this QP.
    Send(u32),
}

/// Whether `offset` of a UAR page starts a BlueFlame buffer half.
fn is_bf_doorbell(offset: usize) -> bool {
    let bf = 1usize << LOG_BF_REG_SIZE;
    offset >= UAR_BF_OFFSET
        && offset < UAR_BF_OFFSET + BFREGS_PER_UAR * bf
        && (offset - UAR_BF_OFFSET) % (bf / 2) == 0
}

fn be(data: &[u8]) -> u64 {
    data.iter().fold(0u64, |v, &b| (v << 8) | u64::from(b))
}

impl State {
    /// A write of `data` (device byte order) at `offset` of BAR0, in the UAR pages.
    pub(crate) fn uar_write_at(&mut self, offset: u64, data: &[u8]) -> UarEffect {
        let size = self.uar_page_size();
        self.uar_write((offset / size) as u32, (offset % size) as usize, data)
    }

    /// A write of `data` (device byte order) at `offset` of UAR `uar`.
    pub(crate) fn uar_write(&mut self, uar: u32, offset: usize, data: &[u8]) -> UarEffect {
        if !self.uars.contains(&uar) {
            self.counters.snap.uar_writes_ignored += 1;
            return UarEffect::None;
        }
        match (offset, data.len()) {
            (UAR_CQ_DOORBELL, 8) => {
                let (arm, cqn) = CqArm::from_uar_doorbell(be(data));
                self.arm_cq(uar, cqn, arm);
                UarEffect::None
            }
            (_, 4) if EqDoorbell::from_write(offset, be(data) as u32).is_some() => {
                if let Some(d) = EqDoorbell::from_write(offset, be(data) as u32) {
                    self.eq_doorbell(uar, d);
                }
                UarEffect::None
            }
            (_, 8) if is_bf_doorbell(offset) => {
                // Bytes 4..8 of the control segment: QPN [31:8], DS [5:0].
                let qpn = (be(&data[4..8]) as u32) >> 8;
                if self.accept_send_doorbell(qpn, uar) {
                    UarEffect::Send(qpn)
                } else {
                    UarEffect::None
                }
            }
            // The rest of a BlueFlame copy of a WQE; the device reads the WQE from memory.
            (o, _) if o >= UAR_BF_OFFSET => UarEffect::None,
            _ => {
                self.counters.snap.uar_writes_ignored += 1;
                UarEffect::None
            }
        }
    }

    fn arm_cq(&mut self, uar: u32, cqn: u32, arm: CqArm) {
        let Some(cq) = self.cqs.get_mut(&cqn).filter(|c| c.uar == uar) else {
            self.counters.snap.uar_writes_ignored += 1;
            return;
        };
        let how = match arm.cmd {
            CqArmCmd::NextCompletion => Arm::Next,
            CqArmCmd::NextSolicited => Arm::Solicited,
        };
        let eqn = cq.eqn;
        if cq.arm(how, arm.ci) {
            self.post_completion_event(eqn, cqn);
        }
    }

    fn eq_doorbell(&mut self, uar: u32, d: EqDoorbell) {
        let Some(eq) = self.eqs.get_mut(&d.eqn).filter(|e| e.uar == uar) else {
            self.counters.snap.uar_writes_ignored += 1;
            return;
        };
        eq.doorbell(d.ci, d.arm);
        // Armed with entries the driver has not consumed: interrupt at once.
        if eq.armed && eq.pc != eq.ci {
            eq.armed = false;
            let v = eq.intr;
            self.fx.irqs.push(v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blueflame_doorbells_are_at_the_start_of_each_half() {
        assert!(is_bf_doorbell(0x800));
        assert!(is_bf_doorbell(0x900));
        assert!(is_bf_doorbell(0xa00));
        assert!(is_bf_doorbell(0xf00));
        assert!(!is_bf_doorbell(0x808));
        assert!(!is_bf_doorbell(0x1000));
        assert!(!is_bf_doorbell(0x40));
    }
}

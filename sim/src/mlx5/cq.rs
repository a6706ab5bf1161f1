//! Completion queues: the ring of CQEs (64 bytes, or 128 with the CQE in the second half) in
//! driver memory, ownership by wrap parity, the consumer index the driver keeps in its doorbell
//! record, arming through the UAR, overrun, and CQEs held back by an injected delay.

use std::collections::VecDeque;
use std::time::Duration;

use dma::SimIommu;
use firmware_cmds::mlx5::cqe::{CQE_SIZE, CQE128_OFFSET, Cqe, off};

use super::buffer::{self, PageList};

/// What posting a CQE did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Posted {
    /// Written; `true` if the CQ was armed for it and a completion event is due.
    Written(bool),
    /// No free entry: the CQ is now in error (CQ_ERROR, overrun).
    Overrun,
    /// The doorbell record or the buffer could not be accessed: the CQ is now in error
    /// (CQ_ERROR, access violation).
    AccessViolation,
    /// The CQ is already in error: nothing written.
    InError,
}

/// What the CQ is armed for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Arm {
    /// Any completion.
    Next,
    /// Solicited or error completions.
    Solicited,
}

/// A CQE waiting for its injected delay to pass.
#[derive(Debug, Clone)]
pub(crate) struct Delayed {
    /// When it may be written.
    pub due: Duration,
    /// The CQE (owner bit set when written).
    pub cqe: Cqe,
    /// It completes a solicited or failed work request.
    pub solicited: bool,
}

/// One completion queue.
#[derive(Debug)]
pub(crate) struct Cq {
    /// Entries (a power of two).
    pub nent: u32,
    /// Bytes per entry (64 or 128).
    pub stride: u32,
    buf: PageList,
    /// UAR whose doorbell arms this CQ.
    pub uar: u32,
    /// Completion EQ.
    pub eqn: u8,
    /// DMA address of the doorbell record.
    pub dbr: u64,
    /// Ignore overruns.
    pub oi: bool,
    /// Producer counter (CQEs written).
    pub pc: u32,
    /// The consumer index as last read from the doorbell record. It only moves forward, so
    /// while it shows room the record need not be read again (as hardware caches it).
    ci_seen: u32,
    /// Armed for the next (solicited) completion.
    pub armed: Option<Arm>,
    /// Overrun or access violation: writes nothing more.
    pub error: bool,
    /// QPs bound to this CQ (DESTROY_CQ is refused while any is).
    pub qps: u32,
    /// CQEs held back by an injected delay, in completion order.
    pub delayed: VecDeque<Delayed>,
    /// Send completions generated late (an injected send-completion delay): each completes
    /// when due, holding back nothing.
    pub late: Vec<Delayed>,
}

impl Cq {
    /// A new CQ.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        log_size: u8,
        stride: u32,
        buf: PageList,
        uar: u32,
        eqn: u8,
        dbr: u64,
        oi: bool,
    ) -> Self {
        Cq {
            nent: 1 << log_size,
            stride,
            buf,
            uar,
            eqn,
            dbr,
            oi,
            pc: 0,
            ci_seen: 0,
            armed: None,
            error: false,
            qps: 0,
            delayed: VecDeque::new(),
            late: Vec::new(),
        }
    }

    /// The consumer index the driver last wrote to the doorbell record.
    fn consumer_index(&self, iommu: &SimIommu) -> Option<u32> {
        iommu.read_u32_be(self.dbr).ok().map(|v| v & 0x00ff_ffff)
    }

    /// Entries written and not yet consumed: by the cached consumer index while it shows
    /// room, else by the doorbell record.
    fn outstanding(&mut self, iommu: &SimIommu) -> Option<u32> {
        let cached = self.pc.wrapping_sub(self.ci_seen) & 0x00ff_ffff;
        if cached < self.nent {
            return Some(cached);
        }
        self.ci_seen = self.consumer_index(iommu)?;
        Some(self.pc.wrapping_sub(self.ci_seen) & 0x00ff_ffff)
    }

    /// An arm doorbell (UAR + 0x20): armed for `arm`, consumer at `ci`. Returns true if an
    /// event is due at once because CQEs beyond `ci` are already there.
    pub(crate) fn arm(&mut self, arm: Arm, ci: u32) -> bool {
        if self.error {
            return false;
        }
        let pending = self.pc.wrapping_sub(ci) & 0x00ff_ffff;
        if pending != 0 && arm == Arm::Next {
            self.armed = None;
            true
        } else {
            self.armed = Some(arm);
            false
        }
    }

    /// Writes `cqe` with the ownership bit of its pass.
    #[inline]
    pub(crate) fn post(&mut self, iommu: &SimIommu, cqe: &Cqe, solicited: bool) -> Posted {
        if self.error {
            return Posted::InError;
        }
        let Some(outstanding) = self.outstanding(iommu) else {
            self.error = true;
            return Posted::AccessViolation;
        };
        if !self.oi && outstanding >= self.nent {
            self.error = true;
            return Posted::Overrun;
        }
        let index = self.pc & (self.nent - 1);
        let mut off = u64::from(index) * u64::from(self.stride);
        if self.stride as usize > CQE_SIZE {
            off += CQE128_OFFSET as u64;
        }
        let Some(at) = self.buf.addr(off) else {
            self.error = true;
            return Posted::AccessViolation;
        };
        let mut entry = [0u8; CQE_SIZE];
        cqe.encode_into(&mut entry);
        // The ownership bit of this pass, whatever the CQE carried.
        let owner = u8::from(self.pc & self.nent != 0);
        entry[off::OP_OWN] = (entry[off::OP_OWN] & !1) | owner;
        if !buffer::write_owned_entry(iommu, at, &entry) {
            self.error = true;
            return Posted::AccessViolation;
        }
        self.pc = self.pc.wrapping_add(1);
        let fire = match self.armed {
            Some(Arm::Next) => true,
            Some(Arm::Solicited) => solicited,
            None => false,
        };
        if fire {
            self.armed = None;
        }
        Posted::Written(fire)
    }
}

//! Event queues: the ring of 64-byte EQEs in driver memory, its ownership bit, the consumer
//! index the driver reports through the UAR doorbell, arming, and overrun.

use dma::SimIommu;
use firmware_cmds::mlx5::eqe::{EQE_SIZE, Eqe, EqeEvent, EventType};

use super::buffer::{self, PageList};

/// What posting an EQE did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Posted {
    /// Written; `Some(vector)` if the EQ was armed and its interrupt must be raised.
    Written(Option<u32>),
    /// The EQ had no free entry and does not ignore overruns: it is now in error.
    Overrun,
    /// The EQ is in error (an earlier overrun or a DMA failure): nothing written.
    InError,
    /// The IOMMU refused the write: the EQ is now in error.
    DmaFailed,
}

/// One event queue.
#[derive(Debug)]
pub(crate) struct Eq {
    /// Entries (a power of two).
    pub nent: u32,
    buf: PageList,
    /// UAR whose doorbell serves this EQ.
    pub uar: u32,
    /// MSI-X vector.
    pub intr: u32,
    /// Event types routed here (bit `t % 64` of word `t / 64`).
    pub mask: [u64; 4],
    /// Ignore overruns (`oi`).
    pub oi: bool,
    /// Producer counter (EQEs written).
    pub pc: u32,
    /// Consumer counter from the last doorbell.
    pub ci: u32,
    /// The next EQE raises the interrupt.
    pub armed: bool,
    /// Overrun or DMA failure: the EQ writes nothing more.
    pub error: bool,
    /// CQs bound to this EQ (DESTROY_EQ is refused while any is).
    pub cqs: u32,
}

impl Eq {
    /// A new EQ; `armed` follows the context's `st` (the kernel leaves it 0 and arms with its
    /// first doorbell).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        log_size: u8,
        buf: PageList,
        uar: u32,
        intr: u32,
        mask: [u64; 4],
        oi: bool,
        armed: bool,
    ) -> Self {
        Eq {
            nent: 1 << log_size,
            buf,
            uar,
            intr,
            mask,
            oi,
            pc: 0,
            ci: 0,
            armed,
            error: false,
            cqs: 0,
        }
    }

    /// Whether event type `t` is routed to this EQ.
    pub(crate) fn wants(&self, t: EventType) -> bool {
        self.mask[usize::from(t.0 / 64)] & (1u64 << (t.0 % 64)) != 0
    }

    /// A doorbell: the driver consumed up to `ci` (24 bits), and optionally re-arms.
    pub(crate) fn doorbell(&mut self, ci: u32, arm: bool) {
        // The driver writes its 24-bit consumer counter; keep the upper bits of ours so the
        // distance to the producer stays right across the 2^24 wrap. The step is signed: a
        // stale or reordered doorbell (ci one behind the last) moves the counter back by one
        // (an entry not yet consumed), it is not a jump of 2^24 - 1 forward that would make
        // the next EQE an overrun.
        let delta = ci.wrapping_sub(self.ci) & 0x00ff_ffff;
        if delta & 0x0080_0000 == 0 {
            self.ci = self.ci.wrapping_add(delta);
        } else {
            self.ci = self.ci.wrapping_sub(0x0100_0000 - delta);
        }
        if arm {
            self.armed = true;
        }
    }

    /// Writes one EQE with the ownership bit of its pass.
    pub(crate) fn post(&mut self, iommu: &SimIommu, ev: &EqeEvent) -> Posted {
        if self.error {
            return Posted::InError;
        }
        if !self.oi && self.pc.wrapping_sub(self.ci) >= self.nent {
            self.error = true;
            return Posted::Overrun;
        }
        let owner = u8::from(self.pc & self.nent != 0);
        let eqe = Eqe::from_event(ev, owner);
        let index = self.pc & (self.nent - 1);
        let Some(at) = self.buf.addr(u64::from(index) * EQE_SIZE as u64) else {
            self.error = true;
            return Posted::DmaFailed;
        };
        if !buffer::write_owned_entry(iommu, at, &eqe.encode()) {
            self.error = true;
            return Posted::DmaFailed;
        }
        self.pc = self.pc.wrapping_add(1);
        if self.armed {
            self.armed = false;
            Posted::Written(Some(self.intr))
        } else {
            Posted::Written(None)
        }
    }
}

//! Event queues (`eq.c`): a ring of 64-byte EQEs in DMA memory, its ownership rule, the
//! consumer-index doorbell, and the three EQs the driver creates: the command EQ (command
//! completions, after which the command queue runs in event mode), the async EQ (page
//! requests, port changes, CQ and QP errors) and the completion EQ that CQs report to.
//!
//! All three use MSI-X vector 0; the EQs are drained by polling their memory, so interrupts
//! are a wake-up, never a requirement.

use dma::{Access, DmaLease};
use firmware_cmds::mlx5::doorbell::EqDoorbell;
use firmware_cmds::mlx5::eqc::Eqc;
use firmware_cmds::mlx5::eqe::{
    self, EQE_SIZE, Eqe, EventType, NUM_CMD_EQE, NUM_SPARE_EQE, OWNER_INIT_VAL,
};
use firmware_cmds::mlx5::ops::eq::{CreateEq, DestroyEq};
use firmware_cmds::mlx5::ops::pas::ADAPTER_PAGE_SIZE;

use crate::barrier;
use crate::error::DriverError;
use crate::mmio::Mmio;

use super::dev::Dev;

/// EQEs of the async EQ before the spare ones (the kernel uses 0x1000; page requests, port
/// changes and queue errors are rare and the EQ is drained on every poll).
pub(crate) const NUM_ASYNC_EQE: u32 = 0x100;
/// EQEs of the completion EQ before the spare ones.
pub(crate) const NUM_COMP_EQE: u32 = 0x80;

/// The async events the driver asks for (`MLX5_ASYNC_EVENT_MASK` without the ones that need
/// capabilities it does not use).
pub(crate) const ASYNC_EVENTS: &[EventType] = &[
    EventType::PATH_MIG,
    EventType::COMM_EST,
    EventType::SQ_DRAINED,
    EventType::SRQ_LAST_WQE,
    EventType::SRQ_RQ_LIMIT,
    EventType::CQ_ERROR,
    EventType::WQ_CATAS_ERROR,
    EventType::PATH_MIG_FAILED,
    EventType::WQ_INVAL_REQ_ERROR,
    EventType::WQ_ACCESS_ERROR,
    EventType::SRQ_CATAS_ERROR,
    EventType::PORT_CHANGE,
    EventType::PAGE_REQUEST,
];

/// One EQ.
#[derive(Debug)]
pub(crate) struct Eq {
    buf: DmaLease,
    nent: u32,
    cons_index: u32,
    pub(crate) eqn: u8,
    /// BAR0 offset of the UAR the doorbell goes to.
    uar_base: u64,
    /// The event types it was created for (COMP arrives on the EQ a CQ names, whatever the
    /// mask).
    events: Vec<EventType>,
    accepts_comp: bool,
}

/// The EQs of a function.
#[derive(Debug, Default)]
pub(crate) struct EqSet {
    pub(crate) cmd: Option<Eq>,
    pub(crate) async_eq: Option<Eq>,
    pub(crate) comp: Option<Eq>,
}

impl EqSet {
    /// Drain every EQ; each EQE comes with whether its EQ was created for it.
    pub(crate) fn poll_all(&mut self, bar: &Mmio, out: &mut Vec<(bool, Eqe)>) {
        for eq in [&mut self.cmd, &mut self.async_eq, &mut self.comp]
            .into_iter()
            .flatten()
        {
            eq.poll(bar, out);
        }
    }
}

/// Number of EQEs for `wanted` usable ones: the spare EQEs added, rounded to a power of two.
pub(crate) fn eq_size(wanted: u32) -> u32 {
    (wanted + NUM_SPARE_EQE).next_power_of_two()
}

/// The 4 KiB page addresses of a buffer leased contiguously.
pub(crate) fn pas_of(lease: &DmaLease) -> Vec<u64> {
    let page = ADAPTER_PAGE_SIZE as usize;
    (0..lease.len().div_ceil(page))
        .map(|i| lease.iova() + (i * page) as u64)
        .collect()
}

impl Eq {
    /// Create an EQ of at least `wanted` usable entries for `events` (CREATE_EQ), on MSI-X
    /// vector 0, with its doorbell in the UAR at `uar_base`; armed on return.
    pub(crate) fn create(
        dev: &Dev,
        wanted: u32,
        events: &[EventType],
        accepts_comp: bool,
        uar: u32,
        uar_base: u64,
    ) -> Result<Eq, DriverError> {
        let nent = eq_size(wanted);
        let bytes = (nent as usize * EQE_SIZE).max(ADAPTER_PAGE_SIZE as usize);
        let buf = dev
            .pool
            .lease(bytes, ADAPTER_PAGE_SIZE as usize, Access::ReadWrite)?;
        for i in 0..nent as usize {
            buf.write_u8(i * EQE_SIZE + eqe::off::OWNER, OWNER_INIT_VAL)?;
        }
        let mut create = CreateEq {
            ctx: Eqc {
                log_eq_size: nent.trailing_zeros() as u8,
                uar_page: uar,
                intr: 0,
                log_page_size: 0,
                ..Eqc::default()
            },
            event_bitmask: [0; 4],
            pas: pas_of(&buf),
        };
        for &t in events {
            create = create.with_event(t.0);
        }
        barrier::to_device();
        let out = match dev.exec(&create) {
            Ok(out) => out,
            Err(e) => {
                dev.release_or_bury(&e, [buf]);
                return Err(e);
            }
        };
        let eq = Eq {
            buf,
            nent,
            cons_index: 0,
            eqn: out.eqn,
            uar_base,
            events: events.to_vec(),
            accepts_comp,
        };
        eq.doorbell(&dev.bar, true);
        tracing::debug!(eqn = eq.eqn, nent, ?events, "EQ created");
        Ok(eq)
    }

    /// Write the consumer index, arming the EQ for the next event when `arm`.
    fn doorbell(&self, bar: &Mmio, arm: bool) {
        let db = EqDoorbell {
            eqn: self.eqn,
            ci: self.cons_index,
            arm,
        };
        bar.write32(self.uar_base + db.offset() as u64, db.value());
    }

    /// Take every EQE software owns, updating the consumer index at least every
    /// `NUM_SPARE_EQE` entries, and re-arm.
    pub(crate) fn poll(&mut self, bar: &Mmio, out: &mut Vec<(bool, Eqe)>) {
        let mut taken = 0u32;
        loop {
            let idx = (self.cons_index & (self.nent - 1)) as usize;
            let Ok(owner) = self.buf.read_u8(idx * EQE_SIZE + eqe::off::OWNER) else {
                break;
            };
            if !eqe::sw_owned(owner, self.cons_index, self.nent) {
                break;
            }
            barrier::from_device();
            let mut raw = [0u8; EQE_SIZE];
            if self.buf.read(idx * EQE_SIZE, &mut raw).is_err() {
                break;
            }
            self.cons_index = self.cons_index.wrapping_add(1);
            taken += 1;
            if let Ok(e) = Eqe::decode(&raw) {
                let expected = self.events.contains(&e.event_type)
                    || (self.accepts_comp && e.event_type == EventType::COMP);
                out.push((expected, e));
            }
            if taken % NUM_SPARE_EQE == 0 {
                self.doorbell(bar, false);
            }
        }
        if taken > 0 {
            self.doorbell(bar, true);
        }
    }

    /// DESTROY_EQ. The buffer is released when the command succeeded (or was faked because
    /// the device is quiesced); otherwise it waits for the quiesce in the graveyard.
    pub(crate) fn destroy(self, dev: &Dev) -> Result<(), DriverError> {
        match dev.exec(&DestroyEq { eqn: self.eqn }) {
            Ok(_) => Ok(()),
            Err(e) => {
                dev.bury(self.buf);
                Err(e)
            }
        }
    }
}

/// The command EQ's size.
pub(crate) fn cmd_eq_wanted() -> u32 {
    NUM_CMD_EQE
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_include_the_spare_entries() {
        assert_eq!(eq_size(NUM_CMD_EQE), 256);
        assert_eq!(eq_size(NUM_ASYNC_EQE), 512);
        assert_eq!(eq_size(0), 128);
    }

    #[test]
    fn ownership_flips_each_pass() {
        // Driver initialises owner 1; hardware writes 0 on pass 0, 1 on pass 1.
        let nent = 8;
        assert!(!eqe::sw_owned(OWNER_INIT_VAL, 0, nent));
        assert!(eqe::sw_owned(0, 3, nent));
        assert!(!eqe::sw_owned(0, 8, nent));
        assert!(eqe::sw_owned(1, 8, nent));
    }
}

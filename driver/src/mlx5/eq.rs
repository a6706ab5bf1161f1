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

/// EQEs one drain pass takes from one EQ: the kernel's `MLX5_EQ_POLLING_BUDGET` (128, in
/// `drivers/net/ethernet/mellanox/mlx5/core/eq.c`). A device that keeps writing EQEs cannot
/// keep one `progress` caller draining for ever; what is left waits for the next pass. No
/// larger than the spare EQEs, so the consumer index is written (at the end of the pass)
/// before the device can reach an entry the pass has not consumed.
pub(crate) const EQ_POLLING_BUDGET: u32 = 128;
const _: () = assert!(EQ_POLLING_BUDGET <= NUM_SPARE_EQE);

/// What one drain pass of an EQ (or of every EQ) left behind.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Drained {
    /// EQEs consumed that did not decode (dropped, to be counted as bad).
    pub(crate) undecodable: u64,
    /// The pass stopped at its budget with software-owned EQEs still in the ring.
    pub(crate) more: bool,
}

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
    /// One drain pass over every EQ, at most [`EQ_POLLING_BUDGET`] EQEs from each; each EQE
    /// comes with whether its EQ was created for it.
    pub(crate) fn poll_all(&mut self, bar: &Mmio, out: &mut Vec<(bool, Eqe)>) -> Drained {
        let mut all = Drained::default();
        for eq in [&mut self.cmd, &mut self.async_eq, &mut self.comp]
            .into_iter()
            .flatten()
        {
            let d = eq.poll(bar, out, EQ_POLLING_BUDGET);
            all.undecodable += d.undecodable;
            all.more |= d.more;
        }
        all
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

    /// Whether the EQE at the consumer index is software's (`next_eqe_sw`); false when it
    /// cannot be read.
    fn next_owned(&self) -> bool {
        let idx = (self.cons_index & (self.nent - 1)) as usize;
        self.buf
            .read_u8(idx * EQE_SIZE + eqe::off::OWNER)
            .is_ok_and(|owner| eqe::sw_owned(owner, self.cons_index, self.nent))
    }

    /// Take up to `budget` EQEs software owns (no more than the spare EQEs, so the consumer
    /// index written once at the end is never too late), then write the consumer index and
    /// re-arm, as the kernel's `mlx5_eq_async_int` does: what is left stays for the next
    /// pass, which the returned `more` asks for.
    pub(crate) fn poll(&mut self, bar: &Mmio, out: &mut Vec<(bool, Eqe)>, budget: u32) -> Drained {
        let budget = budget.min(NUM_SPARE_EQE);
        let mut taken = 0u32;
        let mut drained = Drained::default();
        while taken < budget && self.next_owned() {
            barrier::from_device();
            let idx = (self.cons_index & (self.nent - 1)) as usize;
            let mut raw = [0u8; EQE_SIZE];
            if self.buf.read(idx * EQE_SIZE, &mut raw).is_err() {
                break;
            }
            self.cons_index = self.cons_index.wrapping_add(1);
            taken += 1;
            match Eqe::decode(&raw) {
                Ok(e) => {
                    let expected = self.events.contains(&e.event_type)
                        || (self.accepts_comp && e.event_type == EventType::COMP);
                    out.push((expected, e));
                }
                Err(e) => {
                    drained.undecodable += 1;
                    tracing::warn!(eqn = self.eqn, "EQE that does not decode dropped: {e}");
                }
            }
        }
        if taken > 0 {
            self.doorbell(bar, true);
        }
        drained.more = taken == budget && self.next_owned();
        drained
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
    use std::sync::Arc;

    use dma::{DmaPool, LeaseMode, SimIommu};
    use firmware_cmds::mlx5::eqe::EqeEvent;

    use crate::mlx5::testutil::recording_bar;

    /// An async-sized EQ over a leased ring, every entry in its initial (hardware-owned)
    /// state, as `create` leaves it.
    fn ring(pool: &DmaPool) -> Eq {
        let nent = eq_size(NUM_ASYNC_EQE);
        let buf = pool
            .lease(nent as usize * EQE_SIZE, 4096, Access::ReadWrite)
            .unwrap();
        for i in 0..nent as usize {
            buf.write_u8(i * EQE_SIZE + eqe::off::OWNER, OWNER_INIT_VAL)
                .unwrap();
        }
        Eq {
            buf,
            nent,
            cons_index: 0,
            eqn: 3,
            uar_base: 0x1000,
            events: ASYNC_EVENTS.to_vec(),
            accepts_comp: false,
        }
    }

    /// Write `n` page-request EQEs from entry `from` on, with the owner bit of pass 0, as
    /// the device does.
    fn device_writes(eq: &Eq, from: u32, n: u32) {
        for i in from..from + n {
            let e = Eqe::from_event(
                &EqeEvent::PageRequest {
                    ec_function: 0,
                    function_id: 0,
                    num_pages: 1,
                },
                0,
            );
            eq.buf.write(i as usize * EQE_SIZE, &e.encode()).unwrap();
        }
    }

    fn armed_at(eq: &Eq, ci: u32) -> (u64, Vec<u8>) {
        let db = EqDoorbell {
            eqn: eq.eqn,
            ci,
            arm: true,
        };
        (
            eq.uar_base + db.offset() as u64,
            db.value().to_be_bytes().to_vec(),
        )
    }

    #[test]
    fn a_drain_pass_takes_at_most_the_budget_and_leaves_the_rest_for_the_next() {
        let pool = DmaPool::new(Arc::new(SimIommu::new()), LeaseMode::Pooled).unwrap();
        let (rec, bar) = recording_bar();
        let mut eq = ring(&pool);
        // More than two budgets at once, fewer than the ring holds.
        let written = 2 * EQ_POLLING_BUDGET + 44;
        device_writes(&eq, 0, written);

        let mut out = Vec::new();
        let d = eq.poll(&bar, &mut out, EQ_POLLING_BUDGET);
        assert_eq!(out.len(), 128, "one pass takes MLX5_EQ_POLLING_BUDGET EQEs");
        assert!(d.more, "and says EQEs are left");
        assert_eq!(d.undecodable, 0);
        assert!(out.iter().all(|(expected, _)| *expected));
        assert_eq!(
            rec.take(),
            vec![armed_at(&eq, 128)],
            "the consumer index of what was taken, written once and armed"
        );

        out.clear();
        assert!(eq.poll(&bar, &mut out, EQ_POLLING_BUDGET).more);
        assert_eq!(out.len(), 128);
        assert_eq!(rec.take(), vec![armed_at(&eq, 256)]);

        out.clear();
        let d = eq.poll(&bar, &mut out, EQ_POLLING_BUDGET);
        assert_eq!(out.len(), 44, "the rest");
        assert!(!d.more, "nothing left");
        assert_eq!(rec.take(), vec![armed_at(&eq, written)]);

        // An empty pass writes no doorbell.
        out.clear();
        assert_eq!(
            eq.poll(&bar, &mut out, EQ_POLLING_BUDGET),
            Drained::default()
        );
        assert!(out.is_empty());
        assert!(rec.take().is_empty());
    }

    #[test]
    fn the_budget_never_exceeds_the_spare_entries() {
        let pool = DmaPool::new(Arc::new(SimIommu::new()), LeaseMode::Pooled).unwrap();
        let (rec, bar) = recording_bar();
        let mut eq = ring(&pool);
        device_writes(&eq, 0, 300);
        let mut out = Vec::new();
        let d = eq.poll(&bar, &mut out, u32::MAX);
        assert_eq!(out.len(), NUM_SPARE_EQE as usize);
        assert!(d.more);
        assert_eq!(rec.take(), vec![armed_at(&eq, NUM_SPARE_EQE)]);
    }

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

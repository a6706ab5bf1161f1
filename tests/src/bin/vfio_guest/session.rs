//! One open of `edu` through VFIO: the backend, the edu driver, a strict and a pooled lease
//! pool sharing one IOVA allocator clipped to the device's DMA mask, and the orderly close
//! whose accounting the `accounting_zero` test checks.

use std::sync::{Arc, Mutex, PoisonError};

use dma::{Accounting, DmaLease, DmaPool, IovaAllocator, IovaStats, LeaseMode, PoolConfig};
use driver::{DeviceBackendExt, PciAddress};
use hca_tests::edu::{self, Edu};

use crate::runner::Fail;

/// An open `edu` and the pools of its IOMMU domain.
pub struct Session {
    /// Leases held across tests (the REQ test holds some while the unbind waits); dropped
    /// first on close.
    pub held: Vec<DmaLease>,
    /// Leases with their own mapping each.
    pub strict: DmaPool,
    /// Leases carved from mapped arenas.
    pub pooled: DmaPool,
    /// The IOVA allocator both pools share (the domain's ranges clipped to 28 bits).
    pub iova: Arc<Mutex<IovaAllocator>>,
    /// The device.
    pub edu: Edu,
    /// Its address.
    pub address: PciAddress,
}

/// What closing a session found: the figures the accounting test asserts on.
#[derive(Clone, Debug)]
pub struct CloseReport {
    /// Which session.
    pub label: &'static str,
    /// Strict pool after every lease was dropped.
    pub strict: Accounting,
    /// Pooled pool after every lease was dropped, before trimming its arenas.
    pub pooled_before_trim: Accounting,
    /// Arenas `trim` released.
    pub trimmed: usize,
    /// Pooled pool after the trim.
    pub pooled: Accounting,
    /// The shared IOVA allocator after the trim.
    pub iova: IovaStats,
    /// Live mappings of the domain's mapper just before the backend was dropped.
    pub live_mappings_at_close: usize,
    /// Other holders of the backend when it was dropped (0: the drop closed the device).
    pub backend_other_refs: usize,
    /// Bus mastering as read back after the quiesce (None: it could not be read).
    pub bus_master_after_quiesce: Option<bool>,
}

impl Session {
    /// Open `address` (bound to vfio-pci) through `driver::open`'s group flow and take over
    /// the edu behind it.
    pub fn open(address: PciAddress) -> Result<Self, Fail> {
        let backend = driver::open(&format!("vfio:{address}"))?;
        let iova = edu::iova_allocator(backend.dma_mapper().as_ref());
        let strict = edu::pool(backend.as_ref(), PoolConfig::new(LeaseMode::Strict), &iova)?;
        let pooled = edu::pool(backend.as_ref(), PoolConfig::new(LeaseMode::Pooled), &iova)?;
        let edu = Edu::open(backend)?;
        Ok(Session {
            held: Vec::new(),
            strict,
            pooled,
            iova,
            edu,
            address,
        })
    }

    /// The quiesce-then-release order of DESIGN §4.3: stop the device (bus mastering and
    /// interrupts off), drop the leases, trim and drop the pools, unmap BAR0, and close the
    /// backend last.
    pub fn close(self, label: &'static str) -> Result<CloseReport, Fail> {
        let Session {
            held,
            strict,
            pooled,
            iova,
            edu,
            address: _,
        } = self;
        let quiesced = edu.quiesce();
        let bus_master_after_quiesce = edu.backend().bus_master().ok();
        drop(held);
        let strict_acc = strict.accounting();
        let pooled_before_trim = pooled.accounting();
        let trimmed = pooled.trim();
        let pooled_acc = pooled.accounting();
        let iova_stats = iova.lock().unwrap_or_else(PoisonError::into_inner).stats();
        drop(strict);
        drop(pooled);
        let backend = edu.close();
        let live_mappings_at_close = backend.dma_mapper().live_mappings();
        let backend_other_refs = Arc::strong_count(&backend) - 1;
        drop(backend);
        quiesced?;
        Ok(CloseReport {
            label,
            strict: strict_acc,
            pooled_before_trim,
            trimmed,
            pooled: pooled_acc,
            iova: iova_stats,
            live_mappings_at_close,
            backend_other_refs,
            bus_master_after_quiesce,
        })
    }
}

//! What every simulated PCI function offers, in the simulator's own terms. The `embed` crate
//! adapts this to the driver's `DeviceModel`; the simulator itself never sees the driver.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use dma::SimIommu;

use crate::clock::SimClock;
use crate::pci_config::ConfigSpace;

/// Interrupt kinds of a PCI function (the order vfio-pci numbers them in).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IrqKind {
    /// Legacy INTx.
    Intx,
    /// MSI.
    Msi,
    /// MSI-X.
    Msix,
    /// PCIe error notification.
    Err,
    /// Device request (the host wants the device back).
    Req,
}

/// How a device raises one interrupt vector: a callback the host side installs.
pub type IrqSignal = Arc<dyn Fn() + Send + Sync>;

/// One BAR of a device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bar {
    /// BAR number (0..=5).
    pub index: u8,
    /// Size in bytes.
    pub size: u64,
}

/// A simulated PCI function.
pub trait Device: Send + Sync {
    /// Vendor and device ID.
    fn ids(&self) -> (u16, u16);

    /// The BARs the function implements.
    fn bars(&self) -> Vec<Bar>;

    /// A register read of `data.len()` bytes.
    fn mmio_read(&self, bar: u8, offset: u64, data: &mut [u8]);

    /// A register write of `data.len()` bytes.
    fn mmio_write(&self, bar: u8, offset: u64, data: &[u8]);

    /// The configuration space.
    fn config(&self) -> &ConfigSpace;

    /// The interrupt lines.
    fn irqs(&self) -> &IrqLines;

    /// Function-level reset; `false` when the device has none.
    fn reset(&self) -> bool;

    /// The IOMMU every DMA of this device goes through.
    fn iommu(&self) -> &Arc<SimIommu>;

    /// The device's clock.
    fn clock(&self) -> &SimClock;

    /// Run the device until `deadline`, or until it has raised an interrupt or written a
    /// completion. A device with nothing scheduled simply lets time pass.
    fn run_until(&self, deadline: Duration) {
        self.clock().pass_until(deadline);
    }
}

/// The interrupt vectors of a device and the signals the host installed on them.
#[derive(Default)]
pub struct IrqLines {
    counts: [u32; 5],
    signals: RwLock<[Vec<Option<IrqSignal>>; 5]>,
}

impl std::fmt::Debug for IrqLines {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IrqLines")
            .field("counts", &self.counts)
            .finish_non_exhaustive()
    }
}

fn slot(kind: IrqKind) -> usize {
    match kind {
        IrqKind::Intx => 0,
        IrqKind::Msi => 1,
        IrqKind::Msix => 2,
        IrqKind::Err => 3,
        IrqKind::Req => 4,
    }
}

impl IrqLines {
    /// Lines with `count` vectors of each kind given; kinds not given have none.
    pub fn new(vectors: &[(IrqKind, u32)]) -> Self {
        let mut counts = [0; 5];
        for &(k, n) in vectors {
            counts[slot(k)] = n;
        }
        IrqLines {
            counts,
            signals: RwLock::default(),
        }
    }

    /// Number of vectors of `kind`.
    pub fn count(&self, kind: IrqKind) -> u32 {
        self.counts[slot(kind)]
    }

    /// Install (or with `None`, remove) the signal of one vector; vectors beyond the count are
    /// ignored.
    pub fn set(&self, kind: IrqKind, vector: u32, signal: Option<IrqSignal>) {
        if vector >= self.count(kind) {
            return;
        }
        let mut s = self
            .signals
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let v = &mut s[slot(kind)];
        if v.len() <= vector as usize {
            v.resize(vector as usize + 1, None);
        }
        v[vector as usize] = signal;
    }

    /// Remove every signal of `kind`.
    pub fn clear(&self, kind: IrqKind) {
        self.signals
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)[slot(kind)]
        .clear();
    }

    /// Raise one vector; returns false when nothing is installed on it.
    pub fn raise(&self, kind: IrqKind, vector: u32) -> bool {
        let s = self
            .signals
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match s[slot(kind)].get(vector as usize) {
            Some(Some(sig)) => {
                sig();
                true
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[test]
    fn raise_reaches_only_the_installed_vector() {
        let lines = IrqLines::new(&[(IrqKind::Msix, 2)]);
        let hits = Arc::new(AtomicU32::new(0));
        let h = hits.clone();
        lines.set(
            IrqKind::Msix,
            1,
            Some(Arc::new(move || {
                h.fetch_add(1, Ordering::Relaxed);
            })),
        );
        assert!(!lines.raise(IrqKind::Msix, 0));
        assert!(lines.raise(IrqKind::Msix, 1));
        assert!(!lines.raise(IrqKind::Msi, 0));
        lines.set(IrqKind::Msix, 5, None);
        lines.clear(IrqKind::Msix);
        assert!(!lines.raise(IrqKind::Msix, 1));
        assert_eq!(hits.load(Ordering::Relaxed), 1);
    }
}

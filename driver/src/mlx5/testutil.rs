//! Test helpers: a register file that records every write, for checking doorbells without a
//! device model, and what DMA memory held when each write arrived.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use dma::{DmaMapper, SimIommu};

use crate::backend::{IrqIndex, IrqInfo, PciId, RegionInfo};
use crate::emulated::DeviceModel;
use crate::eventfd::EventFd;
use crate::mmio::Mmio;

/// DMA areas (IOVA, length) and the IOMMU they are read through.
type DmaWatch = (Arc<SimIommu>, Vec<(u64, usize)>);

/// Records MMIO writes (offset, bytes as they crossed the bus); reads return zeros.
#[derive(Default)]
pub(crate) struct Recorder {
    pub(crate) writes: Mutex<Vec<(u64, Vec<u8>)>>,
    /// When set, the model offers a mappable BAR0 of this many bytes.
    pub(crate) bar0_len: Option<u64>,
    /// Config-space reads return all-ones (a removed or resetting function).
    pub(crate) config_all_ones: bool,
    /// With `config_all_ones`: reads merge as vfio-pci's do, the hardware's all-ones except
    /// in the bits it keeps a virtual copy of, here the command register's INTx disable
    /// (0x0400) from a copy that holds 0 (a gone function behind VFIO reads 0xfbff there).
    pub(crate) config_vfio_merge: bool,
    /// Config-space writes seen (offset, bytes).
    pub(crate) config_writes: Mutex<Vec<(u64, Vec<u8>)>>,
    /// DMA areas (IOVA, length) read through the IOMMU as each MMIO write arrives
    /// ([`Recorder::watch_dma`]).
    pub(crate) dma_watch: Mutex<Option<DmaWatch>>,
    /// One entry per write in `writes`: the watched areas' bytes when it arrived (empty
    /// without a watch). What a device reading memory on a doorbell would find, so a test
    /// sees whether the driver wrote memory before or after the doorbell.
    pub(crate) dma_at_writes: Mutex<Vec<Vec<Vec<u8>>>>,
}

impl Recorder {
    /// The MMIO writes so far (and forget them).
    pub(crate) fn take(&self) -> Vec<(u64, Vec<u8>)> {
        self.dma_at_writes.lock().unwrap().clear();
        std::mem::take(&mut *self.writes.lock().unwrap())
    }

    /// From now on, read `areas` (IOVA, length) through `iommu` as each MMIO write arrives.
    pub(crate) fn watch_dma(&self, iommu: Arc<SimIommu>, areas: &[(u64, usize)]) {
        *self.dma_watch.lock().unwrap() = Some((iommu, areas.to_vec()));
    }

    /// The MMIO writes so far, each with the watched areas' bytes when it arrived (and
    /// forget them).
    pub(crate) fn take_with_dma(&self) -> Vec<(u64, Vec<u8>, Vec<Vec<u8>>)> {
        let dma = std::mem::take(&mut *self.dma_at_writes.lock().unwrap());
        let writes = std::mem::take(&mut *self.writes.lock().unwrap());
        assert_eq!(writes.len(), dma.len(), "one DMA reading per write");
        writes
            .into_iter()
            .zip(dma)
            .map(|((offset, bytes), dma)| (offset, bytes, dma))
            .collect()
    }

    /// The watched areas' bytes now, as the device reads them.
    fn read_watched(&self) -> Vec<Vec<u8>> {
        let watch = self.dma_watch.lock().unwrap();
        let Some((iommu, areas)) = watch.as_ref() else {
            return Vec::new();
        };
        areas
            .iter()
            .map(|&(iova, len)| {
                let mut b = vec![0u8; len];
                iommu.read(iova, &mut b).expect("a watched area is mapped");
                b
            })
            .collect()
    }
}

impl DeviceModel for Recorder {
    fn pci_id(&self) -> PciId {
        PciId {
            vendor: 0,
            device: 0,
        }
    }
    fn regions(&self) -> Vec<RegionInfo> {
        self.bar0_len
            .map(|size| RegionInfo {
                index: crate::backend::region::BAR0,
                size,
                read: true,
                write: true,
                mmap: true,
                msix_mappable: false,
                sparse: None,
            })
            .into_iter()
            .collect()
    }
    fn mmio_read(&self, _: u8, _: u64, d: &mut [u8]) {
        d.fill(0);
    }
    fn mmio_write(&self, _: u8, offset: u64, d: &[u8]) {
        let dma = self.read_watched();
        self.dma_at_writes.lock().unwrap().push(dma);
        self.writes.lock().unwrap().push((offset, d.to_vec()));
    }
    fn config_read(&self, offset: u64, d: &mut [u8]) {
        d.fill(if self.config_all_ones { 0xff } else { 0 });
        // The command register's high byte is at 0x05; INTx disable is its bit 2.
        let high_command_byte = 0x05u64.checked_sub(offset).map(|i| i as usize);
        if let Some(b) = high_command_byte.and_then(|i| d.get_mut(i)) {
            if self.config_vfio_merge {
                *b &= !0x04;
            }
        }
    }
    fn config_write(&self, offset: u64, d: &[u8]) {
        self.config_writes
            .lock()
            .unwrap()
            .push((offset, d.to_vec()));
    }
    fn irq_info(&self, index: IrqIndex) -> IrqInfo {
        IrqInfo {
            index,
            count: 0,
            eventfd: false,
            maskable: false,
            automasked: false,
            noresize: false,
        }
    }
    fn set_irqs(&self, _: IrqIndex, _: u32, _: Vec<EventFd>) {}
    fn reset(&self) -> bool {
        false
    }
    fn dma_mapper(&self) -> Arc<dyn DmaMapper> {
        Arc::new(SimIommu::new())
    }
    fn now(&self) -> Duration {
        Duration::ZERO
    }
    fn run_until(&self, _: Duration) {}
}

/// A 64 KiB BAR whose writes `Recorder` keeps.
pub(crate) fn recording_bar() -> (Arc<Recorder>, Mmio) {
    let r = Arc::new(Recorder::default());
    let bar = Mmio::emulated(r.clone(), 0, 0x1_0000);
    (r, bar)
}

//! A PCI configuration space for device models: identity, the command register, and bus
//! mastering wired to the device's IOMMU (no bus master, no DMA), as on real hardware.

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use dma::SimIommu;

/// Offset of the command register.
pub const COMMAND: usize = 0x04;
/// Command register: memory space decode.
pub const COMMAND_MEMORY: u16 = 1 << 1;
/// Command register: bus master (the device may DMA).
pub const COMMAND_MASTER: u16 = 1 << 2;
/// Size of the conventional configuration space.
pub const CONFIG_SIZE: usize = 256;

/// 256 bytes of configuration space (little-endian, as PCI defines it).
#[derive(Debug)]
pub struct ConfigSpace {
    bytes: Mutex<[u8; CONFIG_SIZE]>,
    iommu: Arc<SimIommu>,
    removed: AtomicBool,
}

impl ConfigSpace {
    /// A config space for `vendor:device` of class `class` (24 bits), memory decode on and bus
    /// mastering off, as a function looks just after vfio-pci took it.
    pub fn new(vendor: u16, device: u16, class: u32, iommu: Arc<SimIommu>) -> Self {
        let mut b = [0u8; CONFIG_SIZE];
        b[0..2].copy_from_slice(&vendor.to_le_bytes());
        b[2..4].copy_from_slice(&device.to_le_bytes());
        b[COMMAND..COMMAND + 2].copy_from_slice(&COMMAND_MEMORY.to_le_bytes());
        b[0x09..0x0c].copy_from_slice(&class.to_le_bytes()[..3]);
        iommu.set_bus_master(false);
        ConfigSpace {
            bytes: Mutex::new(b),
            iommu,
            removed: AtomicBool::new(false),
        }
    }

    /// The function is gone from the bus (surprise removal): from now on every read returns
    /// all-ones and writes are ignored, so bus mastering cannot come back.
    pub fn set_removed(&self) {
        self.removed.store(true, Ordering::SeqCst);
    }

    /// Writes the command register as a function-level reset leaves it: memory decode on, bus
    /// mastering off.
    pub fn reset(&self) {
        self.write(COMMAND as u64, &COMMAND_MEMORY.to_le_bytes());
    }

    /// A read; bytes beyond the 256-byte space read as all-ones, as on the bus.
    pub fn read(&self, offset: u64, data: &mut [u8]) {
        if self.removed.load(Ordering::SeqCst) {
            data.fill(0xff);
            return;
        }
        let b = self
            .bytes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for (i, out) in data.iter_mut().enumerate() {
            *out = usize::try_from(offset)
                .ok()
                .and_then(|o| o.checked_add(i))
                .and_then(|o| b.get(o).copied())
                .unwrap_or(0xff);
        }
    }

    /// A write; only the command register is writable, and its bus-master bit switches the
    /// device's DMA on and off.
    pub fn write(&self, offset: u64, data: &[u8]) {
        if self.removed.load(Ordering::SeqCst) {
            return;
        }
        let mut b = self
            .bytes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for (i, v) in data.iter().enumerate() {
            let Some(o) = usize::try_from(offset).ok().and_then(|o| o.checked_add(i)) else {
                continue;
            };
            if (COMMAND..COMMAND + 2).contains(&o) {
                b[o] = *v;
            }
        }
        let cmd = u16::from_le_bytes([b[COMMAND], b[COMMAND + 1]]);
        self.iommu.set_bus_master(cmd & COMMAND_MASTER != 0);
    }

    /// The command register.
    pub fn command(&self) -> u16 {
        let b = self
            .bytes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        u16::from_le_bytes([b[COMMAND], b[COMMAND + 1]])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_reads_back_and_only_command_is_writable() {
        let iommu = Arc::new(SimIommu::new());
        let c = ConfigSpace::new(0x15b3, 0x1017, 0x0c0600, iommu);
        let mut id = [0u8; 4];
        c.read(0, &mut id);
        assert_eq!(id, [0xb3, 0x15, 0x17, 0x10]);
        c.write(0, &[0, 0, 0, 0]);
        c.read(0, &mut id);
        assert_eq!(id, [0xb3, 0x15, 0x17, 0x10]);
        let mut beyond = [0u8; 2];
        c.read(0xff, &mut beyond);
        assert_eq!(beyond, [0, 0xff]);
    }

    #[test]
    fn bus_master_bit_gates_dma() {
        let iommu = Arc::new(SimIommu::new());
        let c = ConfigSpace::new(0x1234, 0x11e8, 0, iommu.clone());
        assert!(!iommu.bus_master());
        c.write(
            COMMAND as u64,
            &(COMMAND_MEMORY | COMMAND_MASTER).to_le_bytes(),
        );
        assert!(iommu.bus_master());
        assert_eq!(c.command(), COMMAND_MEMORY | COMMAND_MASTER);
        c.write(COMMAND as u64, &COMMAND_MEMORY.to_le_bytes());
        assert!(!iommu.bus_master());
    }

    #[test]
    fn a_removed_function_reads_all_ones_and_ignores_writes() {
        let iommu = Arc::new(SimIommu::new());
        let c = ConfigSpace::new(0x15b3, 0x1017, 0x020700, iommu.clone());
        c.set_removed();
        let mut id = [0u8; 4];
        c.read(0, &mut id);
        assert_eq!(id, [0xff; 4]);
        c.write(
            COMMAND as u64,
            &(COMMAND_MEMORY | COMMAND_MASTER).to_le_bytes(),
        );
        assert!(!iommu.bus_master(), "bus mastering stays off");
    }
}

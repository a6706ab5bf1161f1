//! A model of QEMU's `edu` teaching device (docs/specs/edu.rst in QEMU): the smallest device
//! that proves the whole simulated path (registers, MSI, DMA through the simulated IOMMU,
//! bus mastering). The QEMU guest test drives the real `edu` with the same driver code.
//!
//! Registers are little-endian. Factorials and DMA complete at once (QEMU uses timers).

use std::sync::{Arc, Mutex};

use dma::SimIommu;

use crate::clock::{ClockMode, SimClock};
use crate::device::{Bar, Device, IrqKind, IrqLines};
use crate::pci_config::ConfigSpace;

/// PCI vendor ID of `edu`.
pub const EDU_VENDOR: u16 = 0x1234;
/// PCI device ID of `edu`.
pub const EDU_DEVICE: u16 = 0x11e8;
/// Identification register value (version 1.0).
pub const EDU_ID: u32 = 0x0100_00ed;
/// Offset of the device's DMA buffer in its own address space.
pub const EDU_DMA_BUFFER: u64 = 0x40000;
/// Size of the DMA buffer.
pub const EDU_DMA_BUFFER_SIZE: usize = 4096;
/// Default DMA mask: 28 bits.
pub const EDU_DMA_MASK: u64 = (1 << 28) - 1;
/// BAR0 size.
const BAR0_SIZE: u64 = 1 << 20;

/// Register offsets.
pub mod reg {
    /// Identification (RO).
    pub const ID: u64 = 0x00;
    /// Liveness: reads the inverse of the last write.
    pub const LIVENESS: u64 = 0x04;
    /// Factorial input / result.
    pub const FACTORIAL: u64 = 0x08;
    /// Status: bit 0 computing, bit 7 raise interrupt when the factorial is done.
    pub const STATUS: u64 = 0x20;
    /// Interrupt status (RO).
    pub const IRQ_STATUS: u64 = 0x24;
    /// Raise interrupt (WO): value ORed into the interrupt status.
    pub const IRQ_RAISE: u64 = 0x60;
    /// Acknowledge interrupt (WO): clears bits of the interrupt status.
    pub const IRQ_ACK: u64 = 0x64;
    /// DMA source address (u64).
    pub const DMA_SRC: u64 = 0x80;
    /// DMA destination address (u64).
    pub const DMA_DST: u64 = 0x88;
    /// DMA transfer count.
    pub const DMA_COUNT: u64 = 0x90;
    /// DMA command: bit 0 start, bit 1 direction (1 = device to RAM), bit 2 interrupt 0x100.
    pub const DMA_CMD: u64 = 0x98;
}

/// Status bit: raise interrupt 0x1 when a factorial is done.
pub const STATUS_IRQ_FACT: u32 = 0x80;
/// Interrupt status bit raised by a finished factorial.
pub const IRQ_FACT: u32 = 0x1;
/// Interrupt status bit raised by a finished DMA.
pub const IRQ_DMA: u32 = 0x100;
/// DMA command bits.
pub const DMA_START: u64 = 1;
/// DMA direction: device buffer to RAM.
pub const DMA_TO_RAM: u64 = 2;
/// DMA: raise interrupt when done.
pub const DMA_IRQ: u64 = 4;

#[derive(Debug, Default)]
struct Regs {
    liveness: u32,
    factorial: u32,
    status: u32,
    irq_status: u32,
    dma_src: u64,
    dma_dst: u64,
    dma_count: u64,
    dma_cmd: u64,
    buffer: Vec<u8>,
    /// DMAs refused by the IOMMU or the DMA mask.
    dma_errors: u64,
}

/// The `edu` device model.
#[derive(Debug)]
pub struct Edu {
    regs: Mutex<Regs>,
    config: ConfigSpace,
    irqs: IrqLines,
    iommu: Arc<SimIommu>,
    clock: SimClock,
}

impl Edu {
    /// A new `edu` behind its own simulated IOMMU.
    pub fn new(mode: ClockMode) -> Self {
        let iommu = Arc::new(SimIommu::new());
        Edu {
            regs: Mutex::new(Regs {
                buffer: vec![0; EDU_DMA_BUFFER_SIZE],
                ..Regs::default()
            }),
            config: ConfigSpace::new(EDU_VENDOR, EDU_DEVICE, 0x00ff_0000, iommu.clone()),
            irqs: IrqLines::new(&[(IrqKind::Intx, 1), (IrqKind::Msi, 1), (IrqKind::Req, 1)]),
            iommu,
            clock: SimClock::new(mode),
        }
    }

    /// DMAs that failed (IOMMU fault, bus mastering off, outside the DMA mask or the buffer).
    pub fn dma_errors(&self) -> u64 {
        self.lock().dma_errors
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Regs> {
        self.regs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn raise(&self, r: &mut Regs, bits: u32) {
        r.irq_status |= bits;
        if !self.irqs.raise(IrqKind::Msi, 0) {
            self.irqs.raise(IrqKind::Intx, 0);
        }
    }

    fn run_dma(&self, r: &mut Regs) {
        let to_ram = r.dma_cmd & DMA_TO_RAM != 0;
        let (ram, dev) = if to_ram {
            (r.dma_dst, r.dma_src)
        } else {
            (r.dma_src, r.dma_dst)
        };
        let len = r.dma_count as usize;
        let off = dev.wrapping_sub(EDU_DMA_BUFFER) as usize;
        let ok_range = dev >= EDU_DMA_BUFFER
            && off
                .checked_add(len)
                .is_some_and(|e| e <= EDU_DMA_BUFFER_SIZE)
            && ram
                .checked_add(len as u64)
                .is_some_and(|e| e <= EDU_DMA_MASK + 1);
        let done = ok_range
            && if to_ram {
                self.iommu.write(ram, &r.buffer[off..off + len]).is_ok()
            } else {
                let mut tmp = vec![0u8; len];
                let res = self.iommu.read(ram, &mut tmp).is_ok();
                if res {
                    r.buffer[off..off + len].copy_from_slice(&tmp);
                }
                res
            };
        if !done {
            r.dma_errors += 1;
        }
        r.dma_cmd &= !DMA_START;
        if r.dma_cmd & DMA_IRQ != 0 {
            self.raise(r, IRQ_DMA);
        }
    }
}

fn factorial(n: u32) -> u32 {
    (1..=n).fold(1u32, u32::wrapping_mul)
}

fn le(data: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    let n = data.len().min(8);
    b[..n].copy_from_slice(&data[..n]);
    u64::from_le_bytes(b)
}

impl Device for Edu {
    fn ids(&self) -> (u16, u16) {
        (EDU_VENDOR, EDU_DEVICE)
    }

    fn bars(&self) -> Vec<Bar> {
        vec![Bar {
            index: 0,
            size: BAR0_SIZE,
        }]
    }

    fn mmio_read(&self, bar: u8, offset: u64, data: &mut [u8]) {
        let r = self.lock();
        let v: u64 = match (bar, offset) {
            (0, reg::ID) => u64::from(EDU_ID),
            (0, reg::LIVENESS) => u64::from(!r.liveness),
            (0, reg::FACTORIAL) => u64::from(r.factorial),
            (0, reg::STATUS) => u64::from(r.status),
            (0, reg::IRQ_STATUS) => u64::from(r.irq_status),
            (0, reg::DMA_SRC) => r.dma_src,
            (0, reg::DMA_DST) => r.dma_dst,
            (0, reg::DMA_COUNT) => r.dma_count,
            (0, reg::DMA_CMD) => r.dma_cmd,
            _ => u64::MAX,
        };
        let bytes = v.to_le_bytes();
        let n = data.len().min(8);
        data[..n].copy_from_slice(&bytes[..n]);
    }

    fn mmio_write(&self, bar: u8, offset: u64, data: &[u8]) {
        if bar != 0 {
            return;
        }
        let v = le(data);
        let mut r = self.lock();
        match offset {
            reg::LIVENESS => r.liveness = v as u32,
            reg::FACTORIAL => {
                r.factorial = factorial(v as u32);
                if r.status & STATUS_IRQ_FACT != 0 {
                    self.raise(&mut r, IRQ_FACT);
                }
            }
            reg::STATUS => r.status = (v as u32) & STATUS_IRQ_FACT,
            reg::IRQ_RAISE => self.raise(&mut r, v as u32),
            reg::IRQ_ACK => r.irq_status &= !(v as u32),
            reg::DMA_SRC => r.dma_src = v,
            reg::DMA_DST => r.dma_dst = v,
            reg::DMA_COUNT => r.dma_count = v,
            reg::DMA_CMD => {
                r.dma_cmd = v;
                if v & DMA_START != 0 {
                    self.run_dma(&mut r);
                }
            }
            _ => {}
        }
    }

    fn config(&self) -> &ConfigSpace {
        &self.config
    }

    fn irqs(&self) -> &IrqLines {
        &self.irqs
    }

    fn reset(&self) -> bool {
        false
    }

    fn iommu(&self) -> &Arc<SimIommu> {
        &self.iommu
    }

    fn clock(&self) -> &SimClock {
        &self.clock
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dma::{Access, DmaMapper, DmaMemory};

    fn w32(e: &Edu, off: u64, v: u32) {
        e.mmio_write(0, off, &v.to_le_bytes());
    }
    fn r32(e: &Edu, off: u64) -> u32 {
        let mut b = [0u8; 4];
        e.mmio_read(0, off, &mut b);
        u32::from_le_bytes(b)
    }

    #[test]
    fn registers_behave_as_qemus_edu() {
        let e = Edu::new(ClockMode::Virtual);
        assert_eq!(r32(&e, reg::ID), 0x0100_00ed);
        w32(&e, reg::LIVENESS, 0x1234_5678);
        assert_eq!(r32(&e, reg::LIVENESS), !0x1234_5678);
        w32(&e, reg::FACTORIAL, 5);
        assert_eq!(r32(&e, reg::FACTORIAL), 120);
        w32(&e, reg::IRQ_RAISE, 0x40);
        assert_eq!(r32(&e, reg::IRQ_STATUS), 0x40);
        w32(&e, reg::IRQ_ACK, 0x40);
        assert_eq!(r32(&e, reg::IRQ_STATUS), 0);
    }

    #[test]
    fn dma_needs_bus_master_and_a_mapping() {
        let e = Edu::new(ClockMode::Virtual);
        let mem = DmaMemory::new(4096).unwrap();
        // SAFETY: `mem` outlives the mapping (unmapped below).
        unsafe {
            e.iommu()
                .map(mem.as_ptr(), 4096, 0x10_0000, Access::ReadWrite)
        }
        .unwrap();
        let go = |e: &Edu| {
            e.mmio_write(0, reg::DMA_SRC, &0x10_0000u64.to_le_bytes());
            e.mmio_write(0, reg::DMA_DST, &EDU_DMA_BUFFER.to_le_bytes());
            e.mmio_write(0, reg::DMA_COUNT, &16u64.to_le_bytes());
            e.mmio_write(0, reg::DMA_CMD, &DMA_START.to_le_bytes());
        };
        go(&e);
        assert_eq!(e.dma_errors(), 1, "bus mastering is off after reset");
        e.config().write(
            0x04,
            &(crate::pci_config::COMMAND_MEMORY | crate::pci_config::COMMAND_MASTER).to_le_bytes(),
        );
        go(&e);
        assert_eq!(e.dma_errors(), 1);
        e.iommu().unmap(0x10_0000, 4096).unwrap();
        go(&e);
        assert_eq!(e.dma_errors(), 2, "unmapped IOVA");
        assert_eq!(e.iommu().fault_count(), 1);
    }
}

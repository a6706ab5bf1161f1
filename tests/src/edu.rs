//! A small driver for QEMU's `edu` device (QEMU `docs/specs/edu.rst`, `hw/misc/edu.c`), written
//! on the project's own device access (`driver::DeviceBackend`, `driver::Mmio`) and DMA layer
//! (`dma::DmaPool`). The QEMU guest test (`src/bin/vfio_guest/`) drives it to check the VFIO
//! path against a real kernel and a real (emulated) IOMMU; nothing here issues an ioctl itself.
//!
//! The device: PCI `1234:11e8`, BAR0 of 1 MiB with little-endian registers (4-byte accesses
//! below 0x80, 4 or 8 bytes above), a factorial unit, a 4 KiB DMA buffer at BAR offset
//! 0x40000 that a DMA engine copies to or from host memory, and one MSI vector. It signals
//! factorial and DMA completion by setting bits of its interrupt status register; the driver
//! acknowledges them, MSI or not. Its DMA addresses are 28 bits wide.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dma::{DmaError, DmaMapper, DmaPool, IovaAllocator, PoolConfig, clip_to_dma_mask};
use driver::eventfd::EventFd;
use driver::sysfs::{PciFunction, Sysfs};
use driver::{DeviceBackend, DeviceBackendExt, DriverError, IrqIndex, Mmio, PciId, barrier};

/// The PCI identity of `edu`.
pub const EDU_ID: PciId = PciId {
    vendor: 0x1234,
    device: 0x11e8,
};

/// Size of BAR0.
pub const BAR0_SIZE: u64 = 1 << 20;

/// Width of the device's DMA addresses: QEMU clamps every DMA address to its `dma_mask`
/// property, 28 bits unless the machine sets another, so IOVAs must stay below 256 MiB.
pub const DMA_MASK_BITS: u32 = 28;

/// Register offsets in BAR0.
pub mod reg {
    /// Identification, `0xRRrr00ed` (major, minor): reads `0x010000ed`.
    pub const ID: u64 = 0x00;
    /// Liveness check: reads back the bitwise inverse of what was written.
    pub const LIVENESS: u64 = 0x04;
    /// Factorial: write n, read n! once the status register's computing bit is clear.
    pub const FACTORIAL: u64 = 0x08;
    /// Status: bit 0 computing (read-only), bit 7 raise an interrupt when a factorial is done.
    pub const STATUS: u64 = 0x20;
    /// Interrupt status: the reasons of the pending interrupt.
    pub const IRQ_STATUS: u64 = 0x24;
    /// Interrupt raise: the value is ORed into the interrupt status, and an interrupt sent.
    pub const IRQ_RAISE: u64 = 0x60;
    /// Interrupt acknowledge: clears the bits written from the interrupt status.
    pub const IRQ_ACK: u64 = 0x64;
    /// DMA source address (64 bits).
    pub const DMA_SRC: u64 = 0x80;
    /// DMA destination address (64 bits).
    pub const DMA_DST: u64 = 0x88;
    /// DMA transfer count in bytes (64 bits).
    pub const DMA_COUNT: u64 = 0x90;
    /// DMA command (64 bits): see [`super::dma_cmd`].
    pub const DMA_CMD: u64 = 0x98;
}

/// Bits of the DMA command register.
pub mod dma_cmd {
    /// Start the transfer; reads 1 while it runs.
    pub const RUN: u64 = 0x1;
    /// Direction: 0 host memory to the device buffer, 1 the device buffer to host memory.
    pub const TO_HOST: u64 = 0x2;
    /// Raise interrupt [`super::IRQ_DMA`] when the transfer is done.
    pub const IRQ: u64 = 0x4;
}

/// What the identification register reads on the QEMU versions we know (major 1, minor 0).
pub const ID_VALUE: u32 = 0x0100_00ed;
/// Status bit: a factorial is being computed.
pub const STATUS_COMPUTING: u32 = 0x01;
/// Status bit: raise [`IRQ_FACT`] when a factorial is done.
pub const STATUS_IRQ_FACT: u32 = 0x80;
/// Interrupt status bit of a finished factorial.
pub const IRQ_FACT: u32 = 0x001;
/// Interrupt status bit of a finished DMA transfer.
pub const IRQ_DMA: u32 = 0x100;

/// BAR offset (and DMA address on the device side) of the device's DMA buffer.
pub const BUFFER: u64 = 0x40000;
/// Size of the device's DMA buffer.
pub const BUFFER_LEN: u64 = 4096;

/// Which way a DMA transfer goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// Host memory (an IOVA) to the device's buffer: the device reads host memory.
    ToDevice,
    /// The device's buffer to host memory: the device writes host memory.
    ToHost,
}

/// What went wrong talking to `edu`.
#[derive(Debug, thiserror::Error)]
pub enum EduError {
    /// The device access layer failed.
    #[error(transparent)]
    Driver(#[from] DriverError),
    /// The DMA layer failed.
    #[error(transparent)]
    Dma(#[from] DmaError),
    /// An eventfd could not be made or read.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The function opened is not an `edu`.
    #[error("{found_vendor:04x}:{found_device:04x} is not an edu device (1234:11e8)")]
    NotEdu {
        /// Vendor ID found.
        found_vendor: u16,
        /// Device ID found.
        found_device: u16,
    },
    /// No `edu` in sysfs, or more than one.
    #[error(
        "expected one edu function (1234:11e8) in sysfs, found {0}: is QEMU started with -device edu?"
    )]
    NotFound(usize),
    /// Nothing happened within the time allowed.
    #[error("timed out after {after:?} waiting for {what}")]
    Timeout {
        /// What we waited for.
        what: &'static str,
        /// How long we waited.
        after: Duration,
    },
    /// The device is still busy with an earlier request.
    #[error("the device is busy: {0}")]
    Busy(&'static str),
    /// A DMA request the device cannot carry out.
    #[error("bad DMA request: {0}")]
    BadDma(String),
    /// The device reported something other than what was asked of it.
    #[error("unexpected device state: {0}")]
    Unexpected(String),
}

/// The one `edu` function in `sysfs`.
pub fn find(sysfs: &Sysfs) -> Result<PciFunction, EduError> {
    let mut found = sysfs.find_by_id(EDU_ID)?;
    if found.len() == 1 {
        Ok(found.remove(0))
    } else {
        Err(EduError::NotFound(found.len()))
    }
}

/// An IOVA allocator for `edu`'s IOMMU domain: the mapper's ranges clipped to the device's
/// 28-bit DMA mask. Share it between every pool of the domain.
pub fn iova_allocator(mapper: &dyn DmaMapper) -> Arc<Mutex<IovaAllocator>> {
    let ranges = clip_to_dma_mask(&mapper.iova_ranges(), dma::dma_bit_mask(DMA_MASK_BITS));
    Arc::new(Mutex::new(IovaAllocator::new(&ranges)))
}

/// A lease pool for `edu` in `config.mode`, taking IOVAs from `iova` (see [`iova_allocator`]).
pub fn pool(
    backend: &dyn DeviceBackend,
    config: PoolConfig,
    iova: &Arc<Mutex<IovaAllocator>>,
) -> Result<DmaPool, EduError> {
    Ok(DmaPool::with_iova(
        backend.dma_mapper(),
        config,
        Arc::clone(iova),
    )?)
}

/// An open `edu`: BAR0 mapped, its MSI vector routed to an eventfd, bus mastering on.
///
/// Drop it (or [`Edu::close`] it) before the backend, and drop every lease the device may
/// touch only after [`Edu::quiesce`].
pub struct Edu {
    // Field order is drop order: the BAR mapping goes before the backend handle.
    bar: Mmio,
    msi: EventFd,
    backend: Arc<dyn DeviceBackend>,
}

impl std::fmt::Debug for Edu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Edu")
            .field("device", &self.backend.describe())
            .field("bar", &self.bar)
            .finish_non_exhaustive()
    }
}

impl Edu {
    /// Take over the `edu` function behind `backend`: map BAR0, route MSI vector 0 to an
    /// eventfd, turn bus mastering on.
    pub fn open(backend: Arc<dyn DeviceBackend>) -> Result<Self, EduError> {
        let id = backend.pci_id();
        if id != EDU_ID {
            return Err(EduError::NotEdu {
                found_vendor: id.vendor,
                found_device: id.device,
            });
        }
        let bar = backend.map_region(driver::backend::region::BAR0)?;
        if bar.len() < BUFFER + BUFFER_LEN {
            return Err(EduError::Unexpected(format!(
                "BAR0 is {:#x} bytes, too small to hold the DMA buffer at {BUFFER:#x}",
                bar.len()
            )));
        }
        let msi = EventFd::new().map_err(|source| EduError::Io {
            what: "creating the MSI eventfd",
            source,
        })?;
        backend.set_irqs(IrqIndex::Msi, 0, &[&msi])?;
        backend.set_bus_master(true)?;
        Ok(Edu { bar, msi, backend })
    }

    /// The device backend.
    pub fn backend(&self) -> &Arc<dyn DeviceBackend> {
        &self.backend
    }

    /// Length of the mapped BAR0.
    pub fn bar_len(&self) -> u64 {
        self.bar.len()
    }

    /// The identification register.
    pub fn id(&self) -> u32 {
        self.bar.read32_le(reg::ID)
    }

    /// Write `value` to the liveness register and read it back (the device inverts it).
    pub fn liveness(&self, value: u32) -> u32 {
        self.bar.write32_le(reg::LIVENESS, value);
        self.bar.read32_le(reg::LIVENESS)
    }

    /// The status register.
    pub fn status(&self) -> u32 {
        self.bar.read32_le(reg::STATUS)
    }

    /// The interrupt status register.
    pub fn irq_status(&self) -> u32 {
        self.bar.read32_le(reg::IRQ_STATUS)
    }

    /// Acknowledge interrupt reasons `bits`.
    pub fn ack(&self, bits: u32) {
        self.bar.write32_le(reg::IRQ_ACK, bits);
    }

    /// Take the count of MSIs signalled since the last take (0: none).
    pub fn take_msi(&self) -> Result<u64, EduError> {
        self.msi.take().map_err(|source| EduError::Io {
            what: "reading the MSI eventfd",
            source,
        })
    }

    /// Wait, through the backend's `wait`, until the MSI eventfd has been signalled; returns
    /// the count taken from it.
    pub fn wait_msi(&self, timeout: Duration) -> Result<u64, EduError> {
        let start = Instant::now();
        loop {
            let n = self.take_msi()?;
            if n > 0 {
                return Ok(n);
            }
            let left = timeout.saturating_sub(start.elapsed());
            if left.is_zero() {
                return Err(EduError::Timeout {
                    what: "an MSI on the eventfd",
                    after: timeout,
                });
            }
            self.backend.wait(self.backend.now() + left);
        }
    }

    /// Wait for an MSI, check that the interrupt status has the reasons `want`, acknowledge
    /// them, and return the status as it was.
    pub fn wait_irq(&self, want: u32, timeout: Duration) -> Result<u32, EduError> {
        self.wait_msi(timeout)?;
        let status = self.irq_status();
        if status & want != want {
            return Err(EduError::Unexpected(format!(
                "an MSI arrived with interrupt status {status:#x}, expected bits {want:#x}"
            )));
        }
        self.ack(want);
        Ok(status)
    }

    /// Compute `n!` (modulo 2^32) on the device, with the completion signalled by an MSI.
    pub fn factorial(&self, n: u32, timeout: Duration) -> Result<u32, EduError> {
        if self.status() & STATUS_COMPUTING != 0 {
            return Err(EduError::Busy("a factorial is being computed"));
        }
        self.bar.write32_le(reg::STATUS, STATUS_IRQ_FACT);
        self.bar.write32_le(reg::FACTORIAL, n);
        self.wait_irq(IRQ_FACT, timeout)?;
        let status = self.status();
        if status & STATUS_COMPUTING != 0 {
            return Err(EduError::Unexpected(format!(
                "factorial interrupt with the computing bit still set (status {status:#x})"
            )));
        }
        Ok(self.bar.read32_le(reg::FACTORIAL))
    }

    /// Copy `len` bytes between the device buffer at `offset` and host memory at `iova`, and
    /// wait for the completion interrupt.
    ///
    /// `offset + len` must stay below the buffer's end: QEMU up to 7.2 treats a transfer that
    /// ends exactly at the end of the buffer as out of range and stops the whole machine
    /// (`hw_error` in `edu_check_range`). The IOVA range must be below the 28-bit mask, or QEMU
    /// would silently truncate it.
    pub fn dma(
        &self,
        direction: Direction,
        iova: u64,
        offset: u64,
        len: u64,
        timeout: Duration,
    ) -> Result<(), EduError> {
        if len == 0 || offset.checked_add(len).is_none_or(|end| end >= BUFFER_LEN) {
            return Err(EduError::BadDma(format!(
                "{len} bytes at buffer offset {offset:#x} do not fit strictly inside the \
                 {BUFFER_LEN}-byte buffer"
            )));
        }
        let mask = dma::dma_bit_mask(DMA_MASK_BITS);
        if iova.checked_add(len - 1).is_none_or(|last| last > mask) {
            return Err(EduError::BadDma(format!(
                "IOVA {iova:#x} + {len:#x} is above the device's {DMA_MASK_BITS}-bit DMA mask"
            )));
        }
        if self.bar.read64_le(reg::DMA_CMD) & dma_cmd::RUN != 0 {
            return Err(EduError::Busy("a DMA transfer is running"));
        }
        let (src, dst, dir) = match direction {
            Direction::ToDevice => (iova, BUFFER + offset, 0),
            Direction::ToHost => (BUFFER + offset, iova, dma_cmd::TO_HOST),
        };
        self.bar.write64_le(reg::DMA_SRC, src);
        self.bar.write64_le(reg::DMA_DST, dst);
        self.bar.write64_le(reg::DMA_COUNT, len);
        // The device reads host memory after this store: our writes must be visible first.
        barrier::to_device();
        self.bar
            .write64_le(reg::DMA_CMD, dma_cmd::RUN | dir | dma_cmd::IRQ);
        self.wait_irq(IRQ_DMA, timeout)?;
        let cmd = self.bar.read64_le(reg::DMA_CMD);
        if cmd & dma_cmd::RUN != 0 {
            return Err(EduError::Unexpected(format!(
                "DMA interrupt with the transfer still running (command {cmd:#x})"
            )));
        }
        // What the device wrote is read only after its completion was seen.
        barrier::from_device();
        Ok(())
    }

    /// Stop the device from touching memory: bus mastering off, interrupts off. After this,
    /// leases the device was using may be dropped.
    pub fn quiesce(&self) -> Result<(), EduError> {
        self.backend.set_bus_master(false)?;
        self.backend.disable_irqs(IrqIndex::Msi)?;
        Ok(())
    }

    /// Unmap BAR0 and close the MSI eventfd, giving back the backend handle (drop it last).
    pub fn close(self) -> Arc<dyn DeviceBackend> {
        let Edu { bar, msi, backend } = self;
        drop(bar);
        drop(msi);
        backend
    }
}

//! The device-access interface: what any PCI function backend (kernel VFIO, the in-process
//! emulated device) gives the families above it.

use std::sync::Arc;
use std::time::Duration;

use dma::DmaMapper;

use crate::error::DriverError;
use crate::eventfd::EventFd;
use crate::mmio::Mmio;

/// PCI identity of a function.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PciId {
    /// Vendor ID (0x15b3 for Mellanox).
    pub vendor: u16,
    /// Device ID.
    pub device: u16,
}

/// Region indexes of a PCI function, as vfio-pci numbers them.
pub mod region {
    /// BAR0.
    pub const BAR0: u32 = 0;
    /// BAR2 (UARs on mthca/mlx4).
    pub const BAR2: u32 = 2;
    /// BAR4 (DDR on some mthca).
    pub const BAR4: u32 = 4;
    /// Expansion ROM.
    pub const ROM: u32 = 6;
    /// PCI configuration space.
    pub const CONFIG: u32 = 7;
}

/// An area of a region that may be mapped (VFIO's sparse-mmap capability).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MmapArea {
    /// Offset inside the region.
    pub offset: u64,
    /// Length in bytes.
    pub size: u64,
}

/// What a backend reports about one region.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RegionInfo {
    /// Region index (see [`region`]).
    pub index: u32,
    /// Size in bytes (0 for an unimplemented BAR).
    pub size: u64,
    /// Readable.
    pub read: bool,
    /// Writable.
    pub write: bool,
    /// Mappable (subject to `sparse`).
    pub mmap: bool,
    /// The BAR holds the MSI-X table yet may be mapped whole (VFIO's MSIX_MAPPABLE
    /// capability); MSI-X is still programmed through [`DeviceBackend::set_irqs`].
    pub msix_mappable: bool,
    /// When present, only these areas may be mapped.
    pub sparse: Option<Vec<MmapArea>>,
}

/// Interrupt indexes of a PCI function, as vfio-pci numbers them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum IrqIndex {
    /// Legacy INTx.
    Intx = 0,
    /// MSI.
    Msi = 1,
    /// MSI-X.
    Msix = 2,
    /// PCIe AER error notification.
    Err = 3,
    /// Device request: the kernel wants the device back (unbind, removal).
    Req = 4,
}

/// What a backend reports about one interrupt index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IrqInfo {
    /// Which index.
    pub index: IrqIndex,
    /// Number of vectors (0 = not available).
    pub count: u32,
    /// Signalled through eventfds.
    pub eventfd: bool,
    /// Can be masked.
    pub maskable: bool,
    /// Masked automatically after firing (INTx).
    pub automasked: bool,
    /// The vector count cannot be changed once set.
    pub noresize: bool,
}

/// A PCI function as the driver sees it, whatever is behind it.
///
/// Implemented by the VFIO backend ([`crate::vfio`]) and the emulated backend
/// ([`crate::emulated`]). Families (mlx5, ...) use only this trait: nothing above it knows
/// whether it talks to hardware or to a model.
pub trait DeviceBackend: Send + Sync {
    /// The device string this backend was opened from, e.g. `vfio:0000:03:00.0` or `sim`.
    fn describe(&self) -> String;

    /// Vendor and device ID.
    fn pci_id(&self) -> PciId;

    /// Information about region `index`.
    fn region_info(&self, index: u32) -> Result<RegionInfo, DriverError>;

    /// Map region `index` (a BAR) for register access.
    fn map_region(&self, index: u32) -> Result<Mmio, DriverError>;

    /// Read `data.len()` bytes of PCI configuration space at `offset`.
    fn config_read(&self, offset: u64, data: &mut [u8]) -> Result<(), DriverError>;

    /// Write PCI configuration space at `offset`.
    fn config_write(&self, offset: u64, data: &[u8]) -> Result<(), DriverError>;

    /// Information about interrupt index `index`.
    fn irq_info(&self, index: IrqIndex) -> Result<IrqInfo, DriverError>;

    /// Route vectors `start ..` of `index` to `fds` (signalled on each interrupt). An empty
    /// `fds` stops the whole index, like [`DeviceBackend::disable_irqs`].
    fn set_irqs(&self, index: IrqIndex, start: u32, fds: &[&EventFd]) -> Result<(), DriverError>;

    /// Stop signalling every vector of `index`.
    fn disable_irqs(&self, index: IrqIndex) -> Result<(), DriverError>;

    /// Reset the function if it supports a reset; `Ok(false)` when it has none.
    fn reset(&self) -> Result<bool, DriverError>;

    /// Why the function must be reset before a driver brings it up again, if it must: a
    /// session that ended leaving state in the device it could not undo records it with
    /// [`DeviceBackend::mark_needs_reset`] when the reset itself was not available. Kept by
    /// the backend, so it holds across sessions on the same backend object (a new VFIO open
    /// of the device is reset by vfio-pci when the function supports it).
    fn needs_reset(&self) -> Option<String>;
    /// Record (`Some`) or clear (`None`) that the function needs a reset.
    fn mark_needs_reset(&self, reason: Option<String>);
    /// Whether [`DeviceBackend::reset`] would reset, without resetting; `None` when the
    /// backend cannot tell.
    fn reset_supported(&self) -> Option<bool> {
        None
    }

    /// Backend-specific facts for people (`hca info`): label and value, e.g. the IOMMU group
    /// and page sizes of a VFIO device.
    fn facts(&self) -> Vec<(&'static str, String)> {
        Vec::new()
    }

    /// The IOMMU domain this device's DMA goes through.
    fn dma_mapper(&self) -> Arc<dyn DmaMapper>;

    /// Time as the device sees it, from an arbitrary origin: the monotonic clock for real
    /// hardware, the model's (possibly virtual) clock for an emulated device.
    fn now(&self) -> Duration;

    /// Let time pass until `deadline` (in [`DeviceBackend::now`] terms) or until the device
    /// signals something (an interrupt, a completion), whichever comes first. This is the
    /// only place a driver blocks; on an emulated device it is what runs the model.
    fn wait(&self, deadline: Duration);
}

/// PCI command register offset and its bus-master bit.
const PCI_COMMAND: u64 = 0x04;
const PCI_COMMAND_MASTER: u16 = 1 << 2;
/// The command register's INTx-disable bit.
const PCI_COMMAND_INTX_DISABLE: u16 = 1 << 10;
/// Command-register bits vfio-pci answers from its own copy instead of the device: it keeps
/// INTx disable virtual for its interrupt masking (`init_pci_cap_basic_perm` in
/// drivers/vfio/pci/vfio_pci_config.c), and a read merges `(hw & !virt) | (copy & virt)`.
/// Behind VFIO a function that is gone therefore reads all-ones in every bit but these
/// (0xfbff when the kernel's copy of INTx disable is clear), never all-ones in full.
const VFIO_VIRTUAL_COMMAND_BITS: u16 = PCI_COMMAND_INTX_DISABLE;

/// Helpers every backend gets from the trait's primitives.
pub trait DeviceBackendExt: DeviceBackend {
    /// Read a 16-bit little-endian config register.
    fn config_read16(&self, offset: u64) -> Result<u16, DriverError> {
        let mut b = [0u8; 2];
        self.config_read(offset, &mut b)?;
        Ok(u16::from_le_bytes(b))
    }

    /// Read a 32-bit little-endian config register.
    fn config_read32(&self, offset: u64) -> Result<u32, DriverError> {
        let mut b = [0u8; 4];
        self.config_read(offset, &mut b)?;
        Ok(u32::from_le_bytes(b))
    }

    /// Write a 16-bit little-endian config register.
    fn config_write16(&self, offset: u64, value: u16) -> Result<(), DriverError> {
        self.config_write(offset, &value.to_le_bytes())
    }

    /// Turn PCI bus mastering (the device's permission to DMA) on or off. A command register
    /// that reads all-ones (apart from the bits VFIO answers itself, see
    /// [`DeviceBackendExt::command_register`]) means the function is gone (removed, or its
    /// link down or in reset): nothing is written back, and [`DriverError::DeviceFatal`]
    /// says so. A gone function issues no DMA, so turning mastering off is then already true.
    fn set_bus_master(&self, on: bool) -> Result<(), DriverError> {
        let cmd = self.command_register()?;
        let new = if on {
            cmd | PCI_COMMAND_MASTER
        } else {
            cmd & !PCI_COMMAND_MASTER
        };
        if new != cmd {
            self.config_write16(PCI_COMMAND, new)?;
        }
        Ok(())
    }

    /// True when bus mastering is on ([`DriverError::DeviceFatal`] when the function is gone).
    fn bus_master(&self) -> Result<bool, DriverError> {
        Ok(self.command_register()? & PCI_COMMAND_MASTER != 0)
    }

    /// The PCI command register, refused when no function answers: it reads all-ones, or
    /// all-ones in every bit the device itself supplies (vfio-pci fills INTx disable from its
    /// virtual copy, so a gone function reads 0xfbff there). Bits 11 to 15 are reserved and
    /// read 0 on a live function, so a live one never matches.
    fn command_register(&self) -> Result<u16, DriverError> {
        let cmd = self.config_read16(PCI_COMMAND)?;
        if cmd | VFIO_VIRTUAL_COMMAND_BITS == u16::MAX {
            return Err(DriverError::DeviceFatal {
                reason: format!(
                    "the PCI command register of {} reads all-ones ({cmd:#06x}): the \
                     function is gone (surprise removal, link down or reset in progress)",
                    self.describe()
                ),
            });
        }
        Ok(cmd)
    }
}

impl<T: DeviceBackend + ?Sized> DeviceBackendExt for T {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::emulated::EmulatedBackend;
    use crate::mlx5::testutil::Recorder;
    use std::sync::Arc;

    #[test]
    fn an_all_ones_command_register_is_reported_as_a_gone_device_and_not_written() {
        let model = Arc::new(Recorder {
            config_all_ones: true,
            ..Recorder::default()
        });
        let backend = EmulatedBackend::new(model.clone(), "test");
        for on in [false, true] {
            let err = backend.set_bus_master(on).unwrap_err();
            assert!(
                matches!(&err, DriverError::DeviceFatal { reason } if reason.contains("all-ones")),
                "{err:?}"
            );
        }
        assert!(matches!(
            backend.bus_master(),
            Err(DriverError::DeviceFatal { .. })
        ));
        assert!(
            model.config_writes.lock().unwrap().is_empty(),
            "nothing is written back to a function that reads all-ones"
        );
    }

    #[test]
    fn a_gone_function_behind_vfio_reads_0xfbff_and_is_reported_gone() {
        // vfio-pci answers INTx disable from its own copy (0 here): the command register of
        // a function whose link is down reads 0xfbff, not all-ones.
        let model = Arc::new(Recorder {
            config_all_ones: true,
            config_vfio_merge: true,
            ..Recorder::default()
        });
        let backend = EmulatedBackend::new(model.clone(), "test");
        assert_eq!(backend.config_read16(PCI_COMMAND).unwrap(), 0xfbff);
        for on in [false, true] {
            let err = backend.set_bus_master(on).unwrap_err();
            assert!(
                matches!(&err, DriverError::DeviceFatal { reason } if reason.contains("0xfbff")),
                "{err:?}"
            );
        }
        assert!(matches!(
            backend.bus_master(),
            Err(DriverError::DeviceFatal { .. })
        ));
        assert!(model.config_writes.lock().unwrap().is_empty());
    }

    #[test]
    fn bus_mastering_flips_only_its_bit() {
        let model = Arc::new(Recorder::default());
        let backend = EmulatedBackend::new(model.clone(), "test");
        backend.set_bus_master(true).unwrap();
        assert_eq!(
            *model.config_writes.lock().unwrap(),
            vec![(PCI_COMMAND, PCI_COMMAND_MASTER.to_le_bytes().to_vec())]
        );
    }
}

/// Whether a function needs a reset before its next bring-up, and why: what a backend keeps
/// for [`DeviceBackend::needs_reset`] and [`DeviceBackend::mark_needs_reset`].
#[derive(Debug, Default)]
pub struct ResetMark(std::sync::Mutex<Option<String>>);

impl ResetMark {
    /// The reason recorded, if any.
    pub fn get(&self) -> Option<String> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Record (`Some`) or clear (`None`) the need.
    pub fn set(&self, reason: Option<String>) {
        *self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = reason;
    }
}

//! The HCA driver: access to a PCI function (kernel VFIO or an emulated device model behind the
//! same interface), the device families that bring an HCA up and run its queues (mlx5 first),
//! and the HCA and port objects that the MAD layer drives.

pub mod backend;
pub mod barrier;
pub mod emulated;
pub mod error;
pub mod eventfd;
pub mod mmio;
pub mod pci;
pub mod spec;
pub mod sysfs;

pub use backend::{DeviceBackend, DeviceBackendExt, IrqIndex, IrqInfo, PciId, RegionInfo};
pub use error::DriverError;
pub use mmio::Mmio;
pub use pci::{HcaFamily, PciAddress};
pub use spec::DeviceSpec;

//! The HCA driver: access to a PCI function (kernel VFIO or an emulated device model behind the
//! same interface), the device families that bring an HCA up and run its queues (mlx5 first),
//! and the HCA and port objects that the MAD layer drives.
//!
//! Device access: [`open`] takes a device string ([`spec`]) and gives a [`DeviceBackend`]:
//! [`vfio::VfioBackend`] for `vfio:BDF`, [`emulated::EmulatedBackend`] for `sim`. [`sysfs`]
//! lists HCAs and binds them to vfio-pci; [`pci`] knows the HCA device IDs.
//!
//! HCAs: [`open_hca`] brings up the family the PCI ID names ([`mlx5`] today) and gives the
//! family-independent [`verbs::Hca`] the MAD layer drives.

pub mod backend;
pub mod barrier;
pub mod emulated;
pub mod error;
pub mod eventfd;
pub mod mlx5;
pub mod mmio;
mod open;
mod open_hca;
pub mod pci;
pub mod spec;
pub mod sysfs;
pub mod verbs;
pub mod vfio;

pub use backend::{DeviceBackend, DeviceBackendExt, IrqIndex, IrqInfo, PciId, RegionInfo};
pub use error::DriverError;
pub use eventfd::EventFd;
pub use mmio::Mmio;
pub use open::{OpenOptions, open, open_with};
pub use open_hca::{open_hca, open_hca_with};
pub use pci::{HcaFamily, PciAddress};
pub use spec::DeviceSpec;

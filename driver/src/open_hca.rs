//! `open_hca`: bring up the HCA behind a backend with the family its PCI ID names.

use std::sync::Arc;

use crate::backend::DeviceBackend;
use crate::error::DriverError;
use crate::mlx5::Mlx5Hca;
use crate::pci::{self, HcaFamily};
use crate::verbs::{Hca, HcaOptions};

/// Bring up the HCA behind `backend` with the default options ([`HcaOptions::default`]).
pub fn open_hca(backend: Arc<dyn DeviceBackend>) -> Result<Arc<dyn Hca>, DriverError> {
    open_hca_with(backend, HcaOptions::default())
}

/// Bring up the HCA behind `backend`: the PCI ID table chooses the family.
pub fn open_hca_with(
    backend: Arc<dyn DeviceBackend>,
    options: HcaOptions,
) -> Result<Arc<dyn Hca>, DriverError> {
    let id = backend.pci_id();
    let Some(known) = pci::lookup(id) else {
        return Err(DriverError::NotAnHca {
            vendor: id.vendor,
            device: id.device,
        });
    };
    match known.family {
        HcaFamily::Mlx5 => Ok(Mlx5Hca::open(backend, options)? as Arc<dyn Hca>),
        family @ (HcaFamily::Mthca | HcaFamily::Mlx4) => Err(DriverError::FamilyUnsupported {
            family,
            model: known.model,
        }),
    }
}

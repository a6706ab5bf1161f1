//! Opening a device string: `vfio:` goes to the kernel VFIO backend, `sim` to the emulated
//! backend through the simulator registered in this process.

use std::path::PathBuf;
use std::sync::Arc;

use crate::backend::DeviceBackend;
use crate::emulated::EmulatedBackend;
use crate::error::DriverError;
use crate::spec::DeviceSpec;
use crate::sysfs::Sysfs;
use crate::vfio::VfioBackend;

/// Where the VFIO backend looks for sysfs and device nodes; the defaults are the real ones
/// (`/sys`, `/dev`), and tests point them at fake trees.
#[derive(Clone, Debug)]
pub struct OpenOptions {
    /// The sysfs tree.
    pub sysfs: Sysfs,
    /// The device-node directory (`/dev/vfio/...` lives under it).
    pub dev_root: PathBuf,
}

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions {
            sysfs: Sysfs::default(),
            dev_root: PathBuf::from("/dev"),
        }
    }
}

/// Open the device named by `device` (see [`crate::spec`] for the forms).
pub fn open(device: &str) -> Result<Arc<dyn DeviceBackend>, DriverError> {
    open_with(device, &OpenOptions::default())
}

/// [`open`] with explicit sysfs and `/dev` locations.
pub fn open_with(
    device: &str,
    options: &OpenOptions,
) -> Result<Arc<dyn DeviceBackend>, DriverError> {
    let spec = DeviceSpec::parse(device)?;
    tracing::debug!(%spec, "opening");
    match &spec {
        DeviceSpec::Vfio(address) => Ok(Arc::new(VfioBackend::open(
            *address,
            &options.sysfs,
            &options.dev_root,
        )?)),
        DeviceSpec::Sim(params) => Ok(Arc::new(EmulatedBackend::open(params, spec.to_string())?)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dispatches_by_kind() {
        // No simulator is registered in the driver's own tests.
        let err = open("sim").err().unwrap();
        assert!(matches!(err, DriverError::NoSimulator), "{err:?}");
        let err = open("sim:family=mlx5").err().unwrap();
        assert!(matches!(err, DriverError::NoSimulator), "{err:?}");
        let err = open("bogus").err().unwrap();
        assert!(
            matches!(err, DriverError::BadDeviceString { .. }),
            "{err:?}"
        );
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("bus/pci/devices")).unwrap();
        let options = OpenOptions {
            sysfs: Sysfs::new(root.path()),
            dev_root: root.path().to_path_buf(),
        };
        let err = open_with("vfio:03:00.0", &options).err().unwrap();
        assert!(
            matches!(&err, DriverError::NoSuchDevice { address, .. } if address.to_string() == "0000:03:00.0"),
            "{err:?}"
        );
    }
}

//! The record `hca bind` keeps of each function's previous driver, so that a later
//! `hca unbind` (another process) can give the function back to it.
//!
//! One file per function, `STATE_DIR/BDF.driver`, holding the driver name, or nothing when
//! the function had no driver. `/run` is a tmpfs: records do not outlive a reboot, and
//! neither does a vfio-pci binding made through `driver_override`.

use std::fs;
use std::io;
use std::path::PathBuf;

use driver::PciAddress;
use driver::sysfs::Restore;

/// The directory of bind records.
pub struct BindRecords {
    dir: PathBuf,
}

impl BindRecords {
    /// Records under `dir`.
    pub fn new(dir: PathBuf) -> Self {
        BindRecords { dir }
    }

    fn path(&self, address: PciAddress) -> PathBuf {
        self.dir.join(format!("{address}.driver"))
    }

    /// Remember that `address` had `driver` before it was bound to vfio-pci.
    pub fn save(&self, address: PciAddress, driver: Option<&str>) -> io::Result<PathBuf> {
        fs::create_dir_all(&self.dir)?;
        let path = self.path(address);
        fs::write(&path, format!("{}\n", driver.unwrap_or("")))?;
        Ok(path)
    }

    /// What to restore for `address`, if a record exists.
    pub fn load(&self, address: PciAddress) -> io::Result<Option<Restore>> {
        match fs::read_to_string(self.path(address)) {
            Ok(text) => {
                let name = text.trim();
                Ok(Some(if name.is_empty() {
                    Restore::Unbound
                } else {
                    Restore::Driver(name.to_string())
                }))
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Forget the record of `address` (it is back with its driver).
    pub fn remove(&self, address: PciAddress) -> io::Result<()> {
        match fs::remove_file(self.path(address)) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }
}

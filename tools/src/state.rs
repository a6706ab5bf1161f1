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
use sim::input_file::{InputFileError, read_text};

use crate::error::ToolError;

/// The most a bind record may hold: one driver name, which is a directory name under
/// /sys/bus/pci/drivers and so at most `NAME_MAX` (255) bytes, and a newline. The record is
/// read through this bound, and only if it is a regular file, since a record replaced by a
/// device (`/dev/zero`) or a FIFO would never end.
pub const MAX_RECORD_BYTES: u64 = 256;

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
    pub fn load(&self, address: PciAddress) -> Result<Option<Restore>, ToolError> {
        let path = self.path(address);
        let why = "the most one driver name (255 bytes) and a newline take";
        match read_text(&path, MAX_RECORD_BYTES, why) {
            Ok(text) => {
                let name = text.trim();
                Ok(Some(if name.is_empty() {
                    Restore::Unbound
                } else {
                    Restore::Driver(name.to_string())
                }))
            }
            Err(InputFileError::Io(e)) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(InputFileError::Io(source)) => Err(ToolError::Io {
                what: format!("reading bind record {}", path.display()),
                source,
            }),
            Err(e) => Err(ToolError::BadBindRecord {
                path: path.display().to_string(),
                problem: problem(&e),
            }),
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

/// What is wrong with a record, in words that fit a bind record (the advice of
/// [`InputFileError`]'s own messages is for the simulator's files).
fn problem(e: &InputFileError) -> String {
    match e {
        InputFileError::NotRegular { kind } => format!("it is a {kind}, not a regular file"),
        InputFileError::TooLarge { limit, why } => {
            format!("it is larger than {limit} bytes, {why}")
        }
        InputFileError::NotUtf8 => "it is not UTF-8 text".to_owned(),
        InputFileError::Io(e) => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn address() -> PciAddress {
        "0000:03:00.0".parse().unwrap()
    }

    #[test]
    fn a_record_round_trips_and_a_missing_one_is_none() {
        let dir = tempfile::tempdir().unwrap();
        let records = BindRecords::new(dir.path().to_owned());
        assert!(records.load(address()).unwrap().is_none());
        records.save(address(), Some("mlx5_core")).unwrap();
        assert!(matches!(
            records.load(address()).unwrap(),
            Some(Restore::Driver(d)) if d == "mlx5_core"
        ));
        records.save(address(), None).unwrap();
        assert!(matches!(
            records.load(address()).unwrap(),
            Some(Restore::Unbound)
        ));
    }

    #[test]
    fn a_record_that_is_a_device_or_too_long_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let records = BindRecords::new(dir.path().to_owned());
        std::os::unix::fs::symlink("/dev/zero", records.path(address())).unwrap();
        let e = records.load(address()).unwrap_err();
        assert!(
            matches!(&e, ToolError::BadBindRecord { problem, .. }
                if problem.contains("character device")),
            "{e}"
        );
        fs::remove_file(records.path(address())).unwrap();
        let name = "x".repeat(256);
        fs::write(records.path(address()), format!("{name}\n")).unwrap();
        let e = records.load(address()).unwrap_err();
        assert!(
            matches!(&e, ToolError::BadBindRecord { problem, .. }
                if problem.contains("larger than 256 bytes")),
            "{e}"
        );
    }
}

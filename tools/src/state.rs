//! The record `hca bind` keeps of each function's previous driver, so that a later
//! `hca unbind` (another process) can give the function back to it.
//!
//! One file per function, `STATE_DIR/BDF.driver`, of `KEY=VALUE` lines:
//! - `driver=NAME`, or `driver=` when the function had no driver;
//! - `override=VALUE`, the function's `driver_override` before the bind, only when it had one
//!   (`none`, which keeps every driver off it, or `pci-stub`, the only way pci-stub takes it).
//!
//! A record written before overrides were kept is one line holding the driver name (or
//! nothing), and still loads, as a record without an override. `/run` is a tmpfs: records do
//! not outlive a reboot, and neither does a vfio-pci binding made through `driver_override`.

use std::fs;
use std::io;
use std::path::PathBuf;

use driver::PciAddress;
use driver::sysfs::{GiveBack, Restore};
use sim::input_file::{InputFileError, read_text};

use crate::error::ToolError;

/// The most a bind record may hold: `driver=` and one driver name, which is a directory name
/// under /sys/bus/pci/drivers and so at most `NAME_MAX` (255) bytes, and `override=` and an
/// override, which the kernel takes up to `PAGE_SIZE - 2` (4094) bytes long, each with a
/// newline. The record is read through this bound, and only if it is a regular file, since a
/// record replaced by a device (`/dev/zero`) or a FIFO would never end.
pub const MAX_RECORD_BYTES: u64 = 7 + 255 + 1 + 9 + 4094 + 1;

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

    /// Remember that `address` had `driver` and the `driver_override` `ovr` before it was
    /// bound to vfio-pci.
    pub fn save(
        &self,
        address: PciAddress,
        driver: Option<&str>,
        ovr: Option<&str>,
    ) -> io::Result<PathBuf> {
        fs::create_dir_all(&self.dir)?;
        let path = self.path(address);
        let driver = driver.unwrap_or("");
        let text = match ovr {
            Some(o) => format!("driver={driver}\noverride={o}\n"),
            None => format!("driver={driver}\n"),
        };
        fs::write(&path, text)?;
        Ok(path)
    }

    /// How to give `address` back, if a record exists. A record makes the function ours, so
    /// one left without a driver by an unbind that stopped halfway is given back too
    /// ([`GiveBack::finish_driverless`]).
    pub fn load(&self, address: PciAddress) -> Result<Option<GiveBack>, ToolError> {
        let path = self.path(address);
        let why =
            "the most a driver name (255 bytes), an override (4094 bytes) and their keys take";
        match read_text(&path, MAX_RECORD_BYTES, why) {
            Ok(text) => parse(&text)
                .map(Some)
                .map_err(|problem| ToolError::BadBindRecord {
                    path: path.display().to_string(),
                    problem,
                }),
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

/// The record `text`, in either format (see the module doc), or what is wrong with it.
fn parse(text: &str) -> Result<GiveBack, String> {
    let keyed = |l: &str| l.starts_with("driver=") || l.starts_with("override=");
    if !text.lines().any(keyed) {
        // The one-line format of the first records.
        let name = text.trim();
        return Ok(GiveBack {
            restore: restore_of(name),
            driver_override: None,
            finish_driverless: true,
        });
    }
    let mut driver = None;
    let mut ovr = None;
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let (slot, value) = if let Some(v) = line.strip_prefix("driver=") {
            (&mut driver, v)
        } else if let Some(v) = line.strip_prefix("override=") {
            (&mut ovr, v)
        } else {
            return Err(format!(
                "its line `{line}` is neither `driver=NAME` nor `override=VALUE`"
            ));
        };
        if slot.replace(value.trim()).is_some() {
            return Err(format!("it has two lines like `{line}`"));
        }
    }
    let driver = driver.ok_or("it has an `override=` line but no `driver=` line")?;
    Ok(GiveBack {
        restore: restore_of(driver),
        driver_override: ovr.filter(|o| !o.is_empty()).map(str::to_string),
        finish_driverless: true,
    })
}

fn restore_of(name: &str) -> Restore {
    if name.is_empty() {
        Restore::Unbound
    } else {
        Restore::Driver(name.to_string())
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

    fn give_back(driver: Option<&str>, ovr: Option<&str>) -> GiveBack {
        GiveBack {
            restore: driver.map_or(Restore::Unbound, |d| Restore::Driver(d.into())),
            driver_override: ovr.map(str::to_string),
            finish_driverless: true,
        }
    }

    #[test]
    fn a_record_round_trips_and_a_missing_one_is_none() {
        let dir = tempfile::tempdir().unwrap();
        let records = BindRecords::new(dir.path().to_owned());
        assert!(records.load(address()).unwrap().is_none());
        for (driver, ovr) in [
            (Some("mlx5_core"), None),
            (None, None),
            (Some("pci-stub"), Some("pci-stub")),
            (None, Some("none")),
            (Some("mlx5_core"), Some(&*"x".repeat(4094))),
        ] {
            records.save(address(), driver, ovr).unwrap();
            assert_eq!(
                records.load(address()).unwrap(),
                Some(give_back(driver, ovr)),
                "{driver:?} {ovr:?}"
            );
        }
        assert_eq!(
            fs::read_to_string(records.path(address())).unwrap(),
            format!("driver=mlx5_core\noverride={}\n", "x".repeat(4094))
        );
    }

    #[test]
    fn a_record_of_the_one_line_format_still_loads() {
        let dir = tempfile::tempdir().unwrap();
        let records = BindRecords::new(dir.path().to_owned());
        for (text, driver) in [("mlx5_core\n", Some("mlx5_core")), ("\n", None), ("", None)] {
            fs::write(records.path(address()), text).unwrap();
            assert_eq!(
                records.load(address()).unwrap(),
                Some(give_back(driver, None)),
                "{text:?}"
            );
        }
    }

    #[test]
    fn a_keyed_record_with_a_stray_or_twice_given_line_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let records = BindRecords::new(dir.path().to_owned());
        for (text, says) in [
            ("driver=mlx5_core\nfoo\n", "neither `driver=NAME` nor"),
            ("driver=a\ndriver=b\n", "two lines like `driver=b`"),
            ("override=none\n", "no `driver=` line"),
        ] {
            fs::write(records.path(address()), text).unwrap();
            let e = records.load(address()).unwrap_err();
            assert!(
                matches!(&e, ToolError::BadBindRecord { problem, .. } if problem.contains(says)),
                "{text:?}: {e}"
            );
        }
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
        let name = "x".repeat(4367);
        fs::write(records.path(address()), format!("{name}\n")).unwrap();
        let e = records.load(address()).unwrap_err();
        assert!(
            matches!(&e, ToolError::BadBindRecord { problem, .. }
                if problem.contains("larger than 4367 bytes")),
            "{e}"
        );
    }
}

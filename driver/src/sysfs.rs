//! PCI functions as sysfs shows them: listing HCAs, binding a function to vfio-pci and giving
//! it back to its previous driver, and the members of an IOMMU group.
//!
//! The sysfs root is a parameter (`/sys` on a real system) so that tests run on a fake tree,
//! and every write goes through a [`SysfsWriter`], so that a test can record the exact sequence
//! of files and values (reference `vfio-userspace.md` §1.7).
//!
//! Binding follows the per-device `driver_override` method (what the kernel's VFIO selftests
//! do), never the `new_id` method, which would grab every function with the same ID:
//! 1. `vfio-pci` → `bus/pci/devices/BDF/driver_override` (set first, so no other driver can
//!    claim the function between the unbind and the probe);
//! 2. `BDF` → `bus/pci/devices/BDF/driver/unbind` (only when a driver is bound);
//! 3. `BDF` → `bus/pci/drivers_probe`;
//! 4. read back the `driver` link: it must now name vfio-pci.
//!
//! Unbinding reverses it: write back `driver_override` (the value read before the bind, or a
//! newline, which clears it), `BDF` → `driver/unbind`, then either
//! `BDF` → `bus/pci/drivers/PREV/bind` (the recorded previous driver),
//! `BDF` → `bus/pci/drivers_probe` (let the kernel choose), or nothing (leave it unbound).
//! The override goes back before the bind because the kernel's `pci_match_device` lets a
//! driver without an ID table (pci-stub) take a function only through it; an override that
//! names another driver (`none`, which keeps every driver off) would make the bind fail, so
//! it is cleared for the bind and written back after it. When the function is off vfio-pci but
//! its driver does not take it, the error ([`DriverError::UnbindLeftHalfway`]) gives the
//! commands that finish it, and [`GiveBack::finish_driverless`] lets a later call finish it.

use std::fs;
use std::io::{self, Write as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tracing::{debug, info, warn};

use crate::backend::PciId;
use crate::error::DriverError;
use crate::pci::{self, KnownDevice, PciAddress};

/// The driver name vfio-pci registers in sysfs.
pub const VFIO_PCI: &str = "vfio-pci";

/// True for vfio-pci and its vendor variants, which all give VFIO access.
///
/// The variants are named `PREFIX` + `_` or `-` + `vfio_pci` or `vfio-pci`: the modules use
/// underscores (`mlx5_vfio_pci`, `hisi_acc_vfio_pci`), and a driver may register a hyphenated
/// name (`xe-vfio-pci`) in `/sys/bus/pci/drivers`. A name that merely ends in the letters
/// (`novfio-pci`) is not one.
pub fn is_vfio_driver(name: &str) -> bool {
    let Some(prefix) = name
        .strip_suffix("vfio-pci")
        .or_else(|| name.strip_suffix("vfio_pci"))
    else {
        return false;
    };
    prefix.is_empty() || prefix.ends_with('_') || prefix.ends_with('-')
}

/// True when a device bound to `driver` keeps its IOMMU group from being viable for VFIO.
///
/// The kernel allows group members that have no driver or whose driver manages DMA itself:
/// vfio-pci (and variants), pci-stub, and pcieport for bridges.
pub fn blocks_group(driver: Option<&str>) -> bool {
    driver.is_some_and(|d| !(is_vfio_driver(d) || d == "pci-stub" || d == "pcieport"))
}

/// Where sysfs writes go. The real one writes files; tests record and emulate.
pub trait SysfsWriter: Send + Sync {
    /// Write `value` to the existing attribute file `path` in one `write`.
    fn write(&self, path: &Path, value: &str) -> io::Result<()>;
}

/// The [`SysfsWriter`] that writes the files.
#[derive(Clone, Copy, Debug, Default)]
pub struct FsWriter;

impl SysfsWriter for FsWriter {
    fn write(&self, path: &Path, value: &str) -> io::Result<()> {
        // Never create: a missing attribute means a wrong path, not a file to make.
        let mut f = fs::OpenOptions::new().write(true).open(path)?;
        f.write_all(value.as_bytes())
    }
}

/// One PCI function as sysfs describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PciFunction {
    /// Its address.
    pub address: PciAddress,
    /// Vendor and device ID.
    pub id: PciId,
    /// The device-table row, when it is a known HCA.
    pub known: Option<&'static KnownDevice>,
    /// The driver bound to it now.
    pub driver: Option<String>,
    /// Its IOMMU group (None when the IOMMU is off).
    pub iommu_group: Option<u32>,
    /// Its NUMA node (None when the platform reports none, i.e. `-1`).
    pub numa_node: Option<u32>,
}

/// A device of an IOMMU group and its driver.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupMember {
    /// The device name in sysfs (a PCI address for PCI devices).
    pub name: String,
    /// Its driver, if bound.
    pub driver: Option<String>,
    /// True when this driver keeps the group from being viable (see [`blocks_group`]).
    pub blocks: bool,
}

/// What [`Sysfs::bind_vfio`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Binding {
    /// The function.
    pub address: PciAddress,
    /// The driver it had before (None: it had none, or it was already on vfio-pci).
    pub previous_driver: Option<String>,
    /// Its `driver_override` before (None: unset, or naming a vfio-pci driver, which is a
    /// leftover of an earlier bind rather than an admin's choice). Give it to
    /// [`GiveBack::driver_override`] when unbinding, so that an override such as `none` (keep
    /// every driver off) or `pci-stub` (the only way pci-stub takes a function) survives.
    pub previous_override: Option<String>,
    /// True when it was already bound to vfio-pci and nothing was written.
    pub already_bound: bool,
    /// Its IOMMU group: `/dev/vfio/N` is the node to open (and to give a user access to).
    pub iommu_group: u32,
}

/// What to give a function back to when it leaves vfio-pci.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Restore {
    /// Bind it to this driver (the one recorded at bind time).
    Driver(String),
    /// Let the kernel choose (`drivers_probe`), for when no driver was recorded.
    KernelChoice,
    /// Leave it without a driver (it had none before).
    Unbound,
}

/// How [`Sysfs::give_back`] returns a function from vfio-pci.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GiveBack {
    /// The driver to give it to.
    pub restore: Restore,
    /// The `driver_override` to leave it with (None: cleared), normally
    /// [`Binding::previous_override`].
    pub driver_override: Option<String>,
    /// Also give back a function that has no driver at all, when `restore` names a driver or
    /// the kernel's choice: an earlier unbind took it off vfio-pci and then failed to bind it.
    /// Set it only when the function is known to be ours (a bind record exists) or the user
    /// named the driver: a function without a driver may be one an admin left so.
    pub finish_driverless: bool,
}

/// What [`Sysfs::unbind_vfio`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unbinding {
    /// The function.
    pub address: PciAddress,
    /// False when it was not on vfio-pci, so nothing was unbound.
    pub was_vfio: bool,
    /// True when it had no driver and was given back ([`GiveBack::finish_driverless`]),
    /// finishing an unbind left halfway.
    pub finished: bool,
    /// Its driver now.
    pub driver: Option<String>,
}

/// A sysfs tree (normally `/sys`).
#[derive(Clone)]
pub struct Sysfs {
    root: PathBuf,
    writer: Arc<dyn SysfsWriter>,
}

impl std::fmt::Debug for Sysfs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sysfs")
            .field("root", &self.root)
            .finish_non_exhaustive()
    }
}

impl Default for Sysfs {
    fn default() -> Self {
        Sysfs::new("/sys")
    }
}

fn io_err(what: impl Into<String>, source: io::Error) -> DriverError {
    DriverError::Io {
        what: what.into(),
        source,
    }
}

/// The last component of a symlink's target (`../../bus/pci/drivers/mlx5_core` → `mlx5_core`),
/// or None when the link does not exist.
fn link_name(path: &Path) -> Result<Option<String>, DriverError> {
    match fs::read_link(path) {
        Ok(target) => Ok(target.file_name().map(|n| n.to_string_lossy().into_owned())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_err(format!("reading the link {}", path.display()), e)),
    }
}

/// The most a sysfs attribute holds: one page (the kernel's `sysfs_emit` buffer).
pub const MAX_ATTRIBUTE_BYTES: u64 = 4096;

/// The text of attribute `path`, trimmed, or None when it does not exist.
///
/// At most [`MAX_ATTRIBUTE_BYTES`] are read, and only from a regular file (which every sysfs
/// attribute is): a `--sysfs-root` tree with `/dev/zero` or a FIFO in it would otherwise never
/// end, or never open. The open does not block (`O_NONBLOCK`, which regular files ignore).
fn read_trimmed(path: &Path) -> Result<Option<String>, DriverError> {
    use std::io::Read as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let what = || format!("reading {}", path.display());
    let file = match fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_err(what(), e)),
    };
    let meta = file.metadata().map_err(|e| io_err(what(), e))?;
    if !meta.is_file() {
        return Err(invalid(
            path,
            "it is not a regular file, as sysfs attributes are".into(),
        ));
    }
    let mut bytes = Vec::new();
    file.take(MAX_ATTRIBUTE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| io_err(what(), e))?;
    if bytes.len() as u64 > MAX_ATTRIBUTE_BYTES {
        return Err(invalid(
            path,
            format!(
                "it is longer than {MAX_ATTRIBUTE_BYTES} bytes, the most a sysfs attribute holds"
            ),
        ));
    }
    let text =
        String::from_utf8(bytes).map_err(|_| invalid(path, "it is not UTF-8 text".into()))?;
    Ok(Some(text.trim().to_string()))
}

/// A hex number as sysfs prints one (`0x15b3`, `1003`): hex digits only, so no sign, which
/// `from_str_radix` would take.
fn parse_hex<T: TryFrom<u64>>(text: &str) -> Option<T> {
    let digits = text.strip_prefix("0x").unwrap_or(text);
    if digits.is_empty() || digits.len() > 16 || !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u64::from_str_radix(digits, 16)
        .ok()
        .and_then(|v| T::try_from(v).ok())
}

/// The shell command that writes `value` to `path`, for a user to finish a restore by hand.
fn shell_write(path: &Path, value: &str) -> String {
    let value = value.trim_end();
    if value.is_empty() {
        format!("echo > {}", path.display())
    } else {
        format!("echo {value} > {}", path.display())
    }
}

/// The entry names of directory `path`, sorted (empty when it does not exist).
fn dir_names(path: &Path) -> Result<Vec<String>, DriverError> {
    let entries = match fs::read_dir(path) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io_err(format!("listing {}", path.display()), e)),
    };
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| io_err(format!("listing {}", path.display()), e))?;
        names.push(entry.file_name().to_string_lossy().into_owned());
    }
    names.sort();
    Ok(names)
}

fn invalid(path: &Path, what: String) -> DriverError {
    io_err(
        format!("reading {}", path.display()),
        io::Error::new(io::ErrorKind::InvalidData, what),
    )
}

/// Parse a sysfs ID attribute such as `0x15b3`.
fn read_id(path: &Path) -> Result<u16, DriverError> {
    let text = read_trimmed(path)?.ok_or_else(|| invalid(path, "missing".into()))?;
    parse_hex(&text).ok_or_else(|| invalid(path, format!("`{text}` is not a 16-bit hex ID")))
}

impl Sysfs {
    /// The sysfs tree at `root` (`/sys` on a real system), writing through [`FsWriter`].
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Sysfs::with_writer(root, Arc::new(FsWriter))
    }

    /// The sysfs tree at `root`, with writes going to `writer`.
    pub fn with_writer(root: impl Into<PathBuf>, writer: Arc<dyn SysfsWriter>) -> Self {
        Sysfs {
            root: root.into(),
            writer,
        }
    }

    /// The root of this tree.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `ROOT/bus/pci/devices`.
    pub fn devices_dir(&self) -> PathBuf {
        self.root.join("bus/pci/devices")
    }

    fn device_dir(&self, address: PciAddress) -> PathBuf {
        self.devices_dir().join(address.to_string())
    }

    fn rel(&self, path: &Path) -> String {
        path.strip_prefix(&self.root)
            .unwrap_or(path)
            .display()
            .to_string()
    }

    /// Fail with [`DriverError::NoSuchDevice`] unless sysfs has `address`.
    pub fn require(&self, address: PciAddress) -> Result<PathBuf, DriverError> {
        let dir = self.device_dir(address);
        if dir.exists() {
            Ok(dir)
        } else if !self.devices_dir().exists() {
            Err(DriverError::NoSysfs {
                path: self.devices_dir(),
            })
        } else {
            Err(DriverError::NoSuchDevice {
                address,
                devices_dir: self.devices_dir(),
            })
        }
    }

    /// The driver bound to `address` now (None: no driver).
    pub fn driver(&self, address: PciAddress) -> Result<Option<String>, DriverError> {
        link_name(&self.device_dir(address).join("driver"))
    }

    /// The IOMMU group of `address` (None: the IOMMU is off or does not cover it).
    pub fn iommu_group(&self, address: PciAddress) -> Result<Option<u32>, DriverError> {
        let path = self.device_dir(address).join("iommu_group");
        match link_name(&path)? {
            None => Ok(None),
            Some(name) => name
                .parse()
                .map(Some)
                .map_err(|_| invalid(&path, format!("group name `{name}` is not a number"))),
        }
    }

    /// Everything sysfs says about `address`.
    pub fn function(&self, address: PciAddress) -> Result<PciFunction, DriverError> {
        let dir = self.require(address)?;
        let id = PciId {
            vendor: read_id(&dir.join("vendor"))?,
            device: read_id(&dir.join("device"))?,
        };
        let numa_path = dir.join("numa_node");
        let numa_node = match read_trimmed(&numa_path)? {
            None => None,
            Some(t) => {
                let n: i64 = t
                    .parse()
                    .map_err(|_| invalid(&numa_path, format!("`{t}` is not a number")))?;
                u32::try_from(n).ok()
            }
        };
        Ok(PciFunction {
            address,
            id,
            known: pci::lookup(id),
            driver: self.driver(address)?,
            iommu_group: self.iommu_group(address)?,
            numa_node,
        })
    }

    /// Every PCI function, sorted by address. Entries that cannot be read are skipped with a
    /// warning, so one odd device does not hide the others.
    pub fn list_functions(&self) -> Result<Vec<PciFunction>, DriverError> {
        let dir = self.devices_dir();
        let entries = match fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(DriverError::NoSysfs { path: dir });
            }
            Err(e) => return Err(io_err(format!("listing {}", dir.display()), e)),
        };
        let mut out = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| io_err(format!("listing {}", dir.display()), e))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let Ok(address) = name.parse::<PciAddress>() else {
                debug!(%name, "skipping a sysfs entry that is not a PCI address");
                continue;
            };
            match self.function(address) {
                Ok(f) => out.push(f),
                Err(e) => warn!(%address, error = %e, "skipping an unreadable PCI function"),
            }
        }
        out.sort_by_key(|f| f.address);
        Ok(out)
    }

    /// The functions of the HCA vendors (Mellanox 0x15b3, Topspin 0x1867), sorted by address.
    pub fn list_hcas(&self) -> Result<Vec<PciFunction>, DriverError> {
        Ok(self
            .list_functions()?
            .into_iter()
            .filter(|f| pci::is_hca_vendor(f.id.vendor))
            .collect())
    }

    /// The functions with vendor and device ID `id`, sorted by address: how a test or tool
    /// finds a device that has no fixed address (QEMU's `edu`, `1234:11e8`, wherever the
    /// machine put it).
    pub fn find_by_id(&self, id: PciId) -> Result<Vec<PciFunction>, DriverError> {
        Ok(self
            .list_functions()?
            .into_iter()
            .filter(|f| f.id == id)
            .collect())
    }

    /// The devices of IOMMU group `group` and their drivers, sorted by name.
    pub fn group_members(&self, group: u32) -> Result<Vec<GroupMember>, DriverError> {
        let dir = self
            .root
            .join("kernel/iommu_groups")
            .join(group.to_string())
            .join("devices");
        let entries =
            fs::read_dir(&dir).map_err(|e| io_err(format!("listing {}", dir.display()), e))?;
        let mut out = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| io_err(format!("listing {}", dir.display()), e))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let driver = link_name(&entry.path().join("driver"))?;
            let blocks = blocks_group(driver.as_deref());
            out.push(GroupMember {
                name,
                driver,
                blocks,
            });
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    /// The other members of `address`'s IOMMU group.
    pub fn group_others(
        &self,
        group: u32,
        address: PciAddress,
    ) -> Result<Vec<GroupMember>, DriverError> {
        let me = address.to_string();
        Ok(self
            .group_members(group)?
            .into_iter()
            .filter(|m| m.name != me)
            .collect())
    }

    /// What taking `address` off its driver would take down, one phrase each (empty: nothing
    /// known). `hca bind` refuses when this is not empty, because one mistyped address run as
    /// root would otherwise unbind a boot disk or the NIC of the ssh session:
    /// - a function that is not in the HCA table ([`pci::lookup`]);
    /// - a network interface of it (`net/IF`) that is up (IFF_UP in `flags`, or `operstate`
    ///   `up`);
    /// - an RDMA device of it (`infiniband/NAME`): the kernel's RDMA stack and its users.
    ///
    /// A function already on vfio-pci has nothing to take down.
    pub fn bind_hazards(&self, address: PciAddress) -> Result<Vec<String>, DriverError> {
        let f = self.function(address)?;
        let dir = self.device_dir(address);
        let driver = f.driver.as_deref();
        if driver.is_some_and(is_vfio_driver) {
            return Ok(Vec::new());
        }
        let mut hazards = Vec::new();
        if f.known.is_none() {
            hazards.push(format!(
                "it is not an HCA this driver knows ({:04x}:{:04x}, driver {})",
                f.id.vendor,
                f.id.device,
                driver.unwrap_or("none")
            ));
        }
        for name in dir_names(&dir.join("net"))? {
            let ifdir = dir.join("net").join(&name);
            let flags = read_trimmed(&ifdir.join("flags"))?.and_then(|t| parse_hex::<u32>(&t));
            let oper = read_trimmed(&ifdir.join("operstate"))?;
            if flags.is_some_and(|f| f & 1 != 0) || oper.as_deref() == Some("up") {
                hazards.push(format!("its network interface {name} is up"));
            }
        }
        for name in dir_names(&dir.join("infiniband"))? {
            hazards.push(format!(
                "its RDMA device {name} is registered (the kernel's RDMA stack and its users)"
            ));
        }
        Ok(hazards)
    }

    fn write(&self, path: &Path, value: &str) -> Result<(), DriverError> {
        debug!(path = %self.rel(path), value = value.trim_end(), "sysfs write");
        self.writer.write(path, value).map_err(|e| {
            if e.kind() == io::ErrorKind::PermissionDenied {
                DriverError::SysfsPermission {
                    path: path.to_path_buf(),
                }
            } else {
                io_err(
                    format!("writing {:?} to {}", value.trim_end(), path.display()),
                    e,
                )
            }
        })
    }

    /// Bind `address` to vfio-pci (see the module doc for the exact writes), and say which
    /// driver it had so that [`Sysfs::unbind_vfio`] can give it back.
    ///
    /// Nothing is written when vfio-pci is not loaded, the function has no IOMMU group, it is
    /// already on vfio-pci, or it is a PF with SR-IOV VFs enabled (`sriov_numvfs` above 0, which
    /// vfio-pci refuses only after the PF's driver, and with it the VFs, is gone). When anything
    /// after the first write fails (a write, or the probe not ending with vfio-pci bound), the
    /// override is written back and the previous driver rebound, and the error is
    /// [`DriverError::BindUndone`] wrapping that failure; when that undoing fails too, the error
    /// is [`DriverError::BindLeftHalfway`] with the commands still needed.
    pub fn bind_vfio(&self, address: PciAddress) -> Result<Binding, DriverError> {
        let dir = self.require(address)?;
        let vfio_dir = self.root.join("bus/pci/drivers").join(VFIO_PCI);
        if !vfio_dir.is_dir() {
            return Err(DriverError::VfioPciNotLoaded { path: vfio_dir });
        }
        let group = self
            .iommu_group(address)?
            .ok_or(DriverError::NoIommuGroup { address })?;
        let current = self.driver(address)?;
        if current.as_deref().is_some_and(is_vfio_driver) {
            info!(%address, "already bound to vfio-pci");
            return Ok(Binding {
                address,
                previous_driver: None,
                previous_override: None,
                already_bound: true,
                iommu_group: group,
            });
        }
        let numvfs_path = dir.join("sriov_numvfs");
        if let Some(text) = read_trimmed(&numvfs_path)? {
            let numvfs: u32 = text
                .parse()
                .map_err(|_| invalid(&numvfs_path, format!("`{text}` is not a number")))?;
            if numvfs > 0 {
                return Err(DriverError::SriovEnabled {
                    address,
                    numvfs,
                    path: numvfs_path,
                });
            }
        }
        let previous_override = self
            .driver_override(address)?
            .filter(|o| !is_vfio_driver(o));
        let bdf = address.to_string();
        // From here on every failure is undone: the override written back and the previous
        // driver bound again, or, when that fails too, the commands that would do it are
        // returned.
        self.write(&dir.join("driver_override"), VFIO_PCI)?;
        let probed = (|| {
            if current.is_some() {
                self.write(&dir.join("driver/unbind"), &bdf)?;
            }
            self.write(&self.root.join("bus/pci/drivers_probe"), &bdf)?;
            self.driver(address)
        })();
        let failure = match probed {
            Ok(now) if now.as_deref().is_some_and(is_vfio_driver) => {
                info!(%address, previous = ?current, group, "bound to vfio-pci");
                return Ok(Binding {
                    address,
                    previous_driver: current,
                    previous_override,
                    already_bound: false,
                    iommu_group: group,
                });
            }
            Ok(now) => DriverError::BindFailed {
                address,
                expected: Some(VFIO_PCI.to_string()),
                actual: now,
            },
            Err(e) => e,
        };
        warn!(%address, error = %failure, "binding to vfio-pci failed; undoing it");
        let previous = GiveBack {
            restore: current.map_or(Restore::Unbound, Restore::Driver),
            driver_override: previous_override,
            finish_driverless: false,
        };
        Err(self.undo_bind(address, &dir, &previous, failure))
    }

    /// The writes that give `address` (now on driver `now`) back as `to` says, in order: the
    /// override first when it lets the driver bind (unset, or naming that driver), else a
    /// cleared one first and the override after the bind; the unbind of `now` when it is
    /// not the driver wanted; the bind or probe.
    fn give_back_steps(
        &self,
        dir: &Path,
        bdf: &str,
        now: Option<&str>,
        to: &GiveBack,
    ) -> Vec<(PathBuf, String)> {
        let ovr_path = dir.join("driver_override");
        let ovr = to.driver_override.as_deref();
        let ovr_value = ovr.map_or_else(|| "\n".to_string(), str::to_string);
        let target = match &to.restore {
            Restore::Driver(d) => Some(d.as_str()),
            _ => None,
        };
        let bind = self
            .bind_path(&to.restore)
            .filter(|_| target.is_none() || now != target);
        let override_after = bind.is_some() && target.is_some() && ovr.is_some() && ovr != target;
        let mut steps = Vec::new();
        if override_after {
            steps.push((ovr_path.clone(), "\n".to_string()));
        } else {
            steps.push((ovr_path.clone(), ovr_value.clone()));
        }
        if now.is_some() && now != target {
            steps.push((dir.join("driver/unbind"), bdf.to_string()));
        }
        if let Some(path) = bind {
            steps.push((path, bdf.to_string()));
        }
        if override_after {
            steps.push((ovr_path, ovr_value));
        }
        steps
    }

    /// Give `address` back as `previous` says after a bind that failed with `failure`: write
    /// back the override, unbind whatever driver it has now if that is not the previous one,
    /// bind the previous one. Returns [`DriverError::BindUndone`] wrapping `failure` when that
    /// worked, else [`DriverError::BindLeftHalfway`] with the commands still needed.
    fn undo_bind(
        &self,
        address: PciAddress,
        dir: &Path,
        previous: &GiveBack,
        failure: DriverError,
    ) -> DriverError {
        let bdf = address.to_string();
        let prev = match &previous.restore {
            Restore::Driver(d) => Some(d.as_str()),
            _ => None,
        };
        // An unreadable link is taken as "some other driver": unbinding is then attempted.
        let now = self.driver(address).unwrap_or_else(|_| Some(String::new()));
        let steps = self.give_back_steps(dir, &bdf, now.as_deref(), previous);
        let mut undone = Ok(());
        for (i, (path, value)) in steps.iter().enumerate() {
            if let Err(e) = self.write(path, value) {
                let commands = steps[i..].iter().map(|(p, v)| shell_write(p, v));
                undone = Err((e, commands.collect::<Vec<_>>()));
                break;
            }
        }
        let after = self.driver(address).ok().flatten();
        if undone.is_ok() && after.as_deref() != prev {
            // The writes went through but the previous driver did not take it back (or
            // another one did): only that bind (or unbind) is left to retry.
            let command = match prev {
                Some(prev) => shell_write(
                    &self.root.join("bus/pci/drivers").join(prev).join("bind"),
                    &bdf,
                ),
                None => shell_write(&dir.join("driver/unbind"), &bdf),
            };
            let rollback = DriverError::BindFailed {
                address,
                expected: prev.map(str::to_string),
                actual: after.clone(),
            };
            undone = Err((rollback, vec![command]));
        }
        if let Err((rollback, commands)) = undone {
            return DriverError::BindLeftHalfway {
                address,
                failure: Box::new(failure),
                rollback: Box::new(rollback),
                driver: after,
                commands,
            };
        }
        info!(%address, driver = ?prev, "undid the failed bind");
        DriverError::BindUndone {
            address,
            failure: Box::new(failure),
            driver: prev.map(str::to_string),
        }
    }

    /// Check that `name` can be a driver name (not empty, no `/`, not `.` or `..`, no NUL:
    /// anything else would make the path leave `bus/pci/drivers`) and that the driver is
    /// registered, before anything is written.
    fn require_driver(&self, name: &str) -> Result<PathBuf, DriverError> {
        let reason = if name.is_empty() {
            Some("it is empty")
        } else if name.contains('/') {
            Some("it contains `/`")
        } else if name == "." || name == ".." {
            Some("it is a directory reference")
        } else if name.contains('\0') {
            Some("it contains a NUL byte")
        } else {
            None
        };
        if let Some(reason) = reason {
            return Err(DriverError::BadDriverName {
                name: name.to_string(),
                reason,
            });
        }
        let path = self.root.join("bus/pci/drivers").join(name);
        if path.is_dir() {
            Ok(path)
        } else {
            Err(DriverError::DriverNotLoaded {
                name: name.to_string(),
                path,
            })
        }
    }

    /// The `driver_override` of `address` (None: unset, which sysfs shows as `(null)`).
    pub fn driver_override(&self, address: PciAddress) -> Result<Option<String>, DriverError> {
        let text = read_trimmed(&self.device_dir(address).join("driver_override"))?;
        Ok(text.filter(|t| !t.is_empty() && t != "(null)"))
    }

    /// Take `address` off vfio-pci and give it to `restore`, clearing its `driver_override`:
    /// [`Sysfs::give_back`] without an override to write back.
    pub fn unbind_vfio(
        &self,
        address: PciAddress,
        restore: &Restore,
    ) -> Result<Unbinding, DriverError> {
        self.give_back(
            address,
            &GiveBack {
                restore: restore.clone(),
                driver_override: None,
                finish_driverless: false,
            },
        )
    }

    /// Take `address` off vfio-pci and give it back as `to` says (see the module doc for the
    /// exact writes). A function that is not on vfio-pci is left alone (`was_vfio: false`),
    /// except that a leftover `vfio-pci` override is cleared, and that one without a driver is
    /// given back when [`GiveBack::finish_driverless`] says so (`finished: true`).
    ///
    /// Once the function is off vfio-pci, a failure to give it back (a write refused, or the
    /// driver's probe not taking it) is [`DriverError::UnbindLeftHalfway`], with the commands
    /// that finish it.
    ///
    /// The unbind blocks in the kernel while any process still has the device open; vfio-pci
    /// signals that process's REQ interrupt meanwhile.
    pub fn give_back(&self, address: PciAddress, to: &GiveBack) -> Result<Unbinding, DriverError> {
        let dir = self.require(address)?;
        if let Restore::Driver(name) = &to.restore {
            self.require_driver(name)?;
        }
        let current = self.driver(address)?;
        let on_vfio = current.as_deref().is_some_and(is_vfio_driver);
        let finishing =
            current.is_none() && to.finish_driverless && !matches!(to.restore, Restore::Unbound);
        if !on_vfio && !finishing {
            if self.driver_override(address)?.as_deref() == Some(VFIO_PCI) {
                self.write(&dir.join("driver_override"), "\n")?;
            }
            return Ok(Unbinding {
                address,
                was_vfio: false,
                finished: false,
                driver: current,
            });
        }
        let bdf = address.to_string();
        let steps = self.give_back_steps(&dir, &bdf, current.as_deref(), to);
        if on_vfio {
            info!(
                %address,
                "unbinding from vfio-pci: this waits while a program holds the device \
                 (vfio-pci asks it to close it through its REQ interrupt)"
            );
        }
        for (i, (path, value)) in steps.iter().enumerate() {
            if let Err(e) = self.write(path, value) {
                let now = self.driver(address).ok().flatten();
                if now.as_deref().is_some_and(is_vfio_driver) {
                    // Still on vfio-pci: nothing is half done, the unbind can simply be retried.
                    return Err(e);
                }
                return Err(left_halfway(address, to, e, now, &steps[i..]));
            }
        }
        let now = self.driver(address)?;
        let expected = match &to.restore {
            Restore::Driver(name) => Some(Some(name.clone())),
            Restore::Unbound => Some(None),
            Restore::KernelChoice => None,
        };
        if let Some(expected) = expected {
            if now != expected {
                let failure = DriverError::BindFailed {
                    address,
                    expected,
                    actual: now.clone(),
                };
                if now.is_some() {
                    return Err(failure);
                }
                // The bind went through but the driver's probe did not take the function:
                // the bind (and what follows it) is what is left to retry.
                let bind = self.bind_path(&to.restore);
                let from = steps
                    .iter()
                    .position(|(p, _)| Some(p) == bind.as_ref())
                    .unwrap_or(steps.len());
                return Err(left_halfway(address, to, failure, now, &steps[from..]));
            }
        }
        info!(%address, driver = ?now, finishing, "given back from vfio-pci");
        Ok(Unbinding {
            address,
            was_vfio: on_vfio,
            finished: finishing,
            driver: now,
        })
    }

    /// The write that gives a function to `restore`'s driver: `drivers/NAME/bind` or
    /// `drivers_probe` (None: nothing binds it).
    fn bind_path(&self, restore: &Restore) -> Option<PathBuf> {
        match restore {
            Restore::Driver(d) => Some(self.root.join("bus/pci/drivers").join(d).join("bind")),
            Restore::KernelChoice => Some(self.root.join("bus/pci/drivers_probe")),
            Restore::Unbound => None,
        }
    }
}

/// [`DriverError::UnbindLeftHalfway`]: `failure` stopped giving `address` back as `to`
/// says, with `left` still to write.
fn left_halfway(
    address: PciAddress,
    to: &GiveBack,
    failure: DriverError,
    driver: Option<String>,
    left: &[(PathBuf, String)],
) -> DriverError {
    let target = match &to.restore {
        Restore::Driver(d) => d.clone(),
        Restore::KernelChoice => "the driver the kernel chooses".to_string(),
        Restore::Unbound => "no driver".to_string(),
    };
    warn!(%address, error = %failure, "giving the function back failed halfway");
    DriverError::UnbindLeftHalfway {
        address,
        target,
        failure: Box::new(failure),
        driver,
        commands: left.iter().map(|(p, v)| shell_write(p, v)).collect(),
    }
}

#[cfg(test)]
pub(crate) mod fake {
    //! A fake sysfs tree and a writer that records writes and plays the kernel's part.

    use super::*;
    use std::collections::HashMap;
    use std::os::unix::fs::symlink;
    use std::sync::Mutex;

    /// A temporary sysfs tree.
    pub struct FakeSysfs {
        pub dir: tempfile::TempDir,
        pub kernel: Arc<FakeKernel>,
    }

    /// Records every write (path relative to the root, value) and applies what the kernel
    /// would: override, unbind, probe, bind.
    pub struct FakeKernel {
        root: PathBuf,
        pub log: Mutex<Vec<(String, String)>>,
        /// The driver `drivers_probe` picks when no override is set, per device.
        pub native: Mutex<HashMap<String, String>>,
        /// Drivers whose probe fails (the function stays unbound).
        pub refuse: Mutex<Vec<String>>,
        /// Attribute paths (relative to the root) whose writes fail with EIO, after being
        /// logged.
        pub fail: Mutex<Vec<String>>,
        /// Drivers without an ID table (pci-stub): they bind only through `driver_override`.
        pub id_less: Mutex<Vec<String>>,
    }

    impl FakeKernel {
        fn bind(&self, bdf: &str, driver: &str) {
            if self.refuse.lock().unwrap().iter().any(|d| d == driver) {
                return;
            }
            let link = self.root.join("bus/pci/devices").join(bdf).join("driver");
            let _ = fs::remove_file(&link);
            symlink(format!("../../../../bus/pci/drivers/{driver}"), link).unwrap();
        }

        pub fn writes(&self) -> Vec<(String, String)> {
            self.log.lock().unwrap().clone()
        }

        /// The override of `bdf` (None: `(null)`).
        fn override_of(&self, bdf: &str) -> io::Result<Option<String>> {
            let path = self
                .root
                .join("bus/pci/devices")
                .join(bdf)
                .join("driver_override");
            let text = fs::read_to_string(path)?;
            let text = text.trim();
            Ok((text != "(null)" && !text.is_empty()).then(|| text.to_string()))
        }

        /// `drivers/DRV/bind` as pci_match_device decides it: an override naming another
        /// driver, or none for a driver without an ID table, is ENODEV.
        fn bind_store(&self, bdf: &str, drv: &str) -> io::Result<()> {
            let matches = match self.override_of(bdf)? {
                Some(o) => o == drv,
                None => !self.id_less.lock().unwrap().iter().any(|d| d == drv),
            };
            if !matches {
                return Err(io::Error::from_raw_os_error(libc::ENODEV));
            }
            self.bind(bdf, drv);
            Ok(())
        }
    }

    impl SysfsWriter for FakeKernel {
        fn write(&self, path: &Path, value: &str) -> io::Result<()> {
            if !path.exists() {
                return Err(io::Error::new(io::ErrorKind::NotFound, "no such attribute"));
            }
            let rel = path.strip_prefix(&self.root).unwrap().display().to_string();
            self.log
                .lock()
                .unwrap()
                .push((rel.clone(), value.to_string()));
            if self.fail.lock().unwrap().contains(&rel) {
                return Err(io::Error::from_raw_os_error(libc::EIO));
            }
            let parts: Vec<&str> = rel.split('/').collect();
            match parts.as_slice() {
                ["bus", "pci", "devices", bdf, "driver_override"] => {
                    let v = value.trim();
                    let v = if v.is_empty() { "(null)" } else { v };
                    fs::write(
                        self.root
                            .join("bus/pci/devices")
                            .join(bdf)
                            .join("driver_override"),
                        format!("{v}\n"),
                    )?;
                }
                ["bus", "pci", "devices", bdf, "driver", "unbind"] => {
                    assert_eq!(*bdf, value, "unbind names another device");
                    fs::remove_file(self.root.join("bus/pci/devices").join(bdf).join("driver"))?;
                }
                ["bus", "pci", "drivers_probe"] => {
                    let dev = self.root.join("bus/pci/devices").join(value);
                    if dev.join("driver").exists() {
                        return Ok(());
                    }
                    let ovr = fs::read_to_string(dev.join("driver_override"))?;
                    let ovr = ovr.trim();
                    if ovr != "(null)" && !ovr.is_empty() {
                        if self.root.join("bus/pci/drivers").join(ovr).is_dir() {
                            self.bind(value, ovr);
                        }
                    } else if let Some(d) = self.native.lock().unwrap().get(value).cloned() {
                        self.bind(value, &d);
                    }
                }
                ["bus", "pci", "drivers", drv, "bind"] => self.bind_store(value, drv)?,
                _ => panic!("unexpected sysfs write to {rel}"),
            }
            Ok(())
        }
    }

    impl FakeSysfs {
        pub fn new() -> Self {
            let dir = tempfile::tempdir().unwrap();
            let root = dir.path().to_path_buf();
            fs::create_dir_all(root.join("bus/pci/devices")).unwrap();
            fs::create_dir_all(root.join("kernel/iommu_groups")).unwrap();
            fs::write(root.join("bus/pci/drivers_probe"), "").unwrap();
            for d in [
                "vfio-pci",
                "mlx5_core",
                "mlx4_core",
                "ib_mthca",
                "snd_hda_intel",
                "pcieport",
                "pci-stub",
            ] {
                Self::add_driver_at(&root, d);
            }
            FakeSysfs {
                dir,
                kernel: Arc::new(FakeKernel {
                    root,
                    log: Mutex::new(Vec::new()),
                    native: Mutex::new(HashMap::new()),
                    refuse: Mutex::new(Vec::new()),
                    fail: Mutex::new(Vec::new()),
                    id_less: Mutex::new(vec!["pci-stub".into()]),
                }),
            }
        }

        fn add_driver_at(root: &Path, name: &str) {
            let d = root.join("bus/pci/drivers").join(name);
            fs::create_dir_all(&d).unwrap();
            fs::write(d.join("bind"), "").unwrap();
            fs::write(d.join("unbind"), "").unwrap();
        }

        pub fn root(&self) -> &Path {
            self.dir.path()
        }

        pub fn remove_driver(&self, name: &str) {
            fs::remove_dir_all(self.root().join("bus/pci/drivers").join(name)).unwrap();
        }

        /// Sysfs over this tree with the recording kernel as writer.
        pub fn sysfs(&self) -> Sysfs {
            Sysfs::with_writer(self.root(), self.kernel.clone())
        }

        pub fn add(
            &self,
            bdf: &str,
            vendor: u16,
            device: u16,
            driver: Option<&str>,
            group: Option<u32>,
            numa: i32,
        ) {
            let root = self.root();
            let dir = root.join("bus/pci/devices").join(bdf);
            fs::create_dir_all(&dir).unwrap();
            fs::write(dir.join("vendor"), format!("0x{vendor:04x}\n")).unwrap();
            fs::write(dir.join("device"), format!("0x{device:04x}\n")).unwrap();
            fs::write(dir.join("numa_node"), format!("{numa}\n")).unwrap();
            fs::write(dir.join("driver_override"), "(null)\n").unwrap();
            if let Some(d) = driver {
                symlink(
                    format!("../../../../bus/pci/drivers/{d}"),
                    dir.join("driver"),
                )
                .unwrap();
                self.kernel
                    .native
                    .lock()
                    .unwrap()
                    .insert(bdf.to_string(), d.to_string());
            }
            if let Some(g) = group {
                let gdir = root
                    .join("kernel/iommu_groups")
                    .join(g.to_string())
                    .join("devices");
                fs::create_dir_all(&gdir).unwrap();
                symlink(
                    format!("../../../../kernel/iommu_groups/{g}"),
                    dir.join("iommu_group"),
                )
                .unwrap();
                symlink(format!("../../../../bus/pci/devices/{bdf}"), gdir.join(bdf)).unwrap();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::fake::FakeSysfs;
    use super::*;
    use crate::pci::{FunctionKind, HcaFamily};

    fn a(s: &str) -> PciAddress {
        s.parse().unwrap()
    }

    fn w(p: &str, v: &str) -> (String, String) {
        (p.to_string(), v.to_string())
    }

    /// A fake sysfs with a ConnectX-5 PF at 0000:03:00.0, alone in IOMMU group 17, bound to
    /// `driver`.
    fn cx5_on(driver: &str) -> FakeSysfs {
        let fake = FakeSysfs::new();
        fake.add("0000:03:00.0", 0x15b3, 0x1017, Some(driver), Some(17), 0);
        fake
    }

    /// What a bind of 0000:03:00.0 writes up to its probe.
    fn bind_writes() -> Vec<(String, String)> {
        vec![
            w("bus/pci/devices/0000:03:00.0/driver_override", "vfio-pci"),
            w("bus/pci/devices/0000:03:00.0/driver/unbind", "0000:03:00.0"),
            w("bus/pci/drivers_probe", "0000:03:00.0"),
        ]
    }

    /// What gives 0000:03:00.0 back to mlx5_core after a bind that did not take.
    fn give_back_writes() -> Vec<(String, String)> {
        vec![
            w("bus/pci/devices/0000:03:00.0/driver_override", "\n"),
            w("bus/pci/drivers/mlx5_core/bind", "0000:03:00.0"),
        ]
    }

    #[test]
    fn lists_hcas_with_driver_group_and_numa() {
        let fake = FakeSysfs::new();
        fake.add(
            "0000:03:00.0",
            0x15b3,
            0x1017,
            Some("mlx5_core"),
            Some(17),
            1,
        );
        fake.add("0000:03:00.1", 0x15b3, 0x1018, None, Some(18), -1);
        fake.add(
            "0000:00:1f.3",
            0x8086,
            0xa348,
            Some("snd_hda_intel"),
            Some(9),
            -1,
        );
        fake.add("0000:81:00.0", 0x1867, 0x6282, Some("ib_mthca"), None, 0);
        let list = fake.sysfs().list_hcas().unwrap();
        assert_eq!(list.len(), 3, "{list:?}");
        let f = &list[0];
        assert_eq!(f.address, a("0000:03:00.0"));
        assert_eq!(
            f.id,
            PciId {
                vendor: 0x15b3,
                device: 0x1017
            }
        );
        assert_eq!(f.known.unwrap().family, HcaFamily::Mlx5);
        assert_eq!(f.known.unwrap().model, "ConnectX-5");
        assert_eq!(f.driver.as_deref(), Some("mlx5_core"));
        assert_eq!(f.iommu_group, Some(17));
        assert_eq!(f.numa_node, Some(1));
        let vf = &list[1];
        assert_eq!(vf.known.unwrap().kind, FunctionKind::Vf);
        assert_eq!(vf.driver, None);
        assert_eq!(vf.numa_node, None);
        let topspin = &list[2];
        assert_eq!(topspin.known.unwrap().family, HcaFamily::Mthca);
        assert_eq!(topspin.iommu_group, None);
        // Everything, sorted, with the non-HCA too.
        let all = fake.sysfs().list_functions().unwrap();
        assert_eq!(all[0].address, a("0000:00:1f.3"));
        assert!(all[0].known.is_none());
    }

    #[test]
    fn finds_functions_by_vendor_and_device_id() {
        let fake = FakeSysfs::new();
        fake.add("0000:00:03.0", 0x1234, 0x11e8, None, Some(3), -1);
        fake.add("0000:00:02.0", 0x1234, 0x1111, None, Some(2), -1);
        fake.add("0000:01:00.0", 0x1234, 0x11e8, Some("vfio-pci"), Some(5), 0);
        fake.add("0000:03:00.0", 0x15b3, 0x11e8, None, Some(7), 0);
        let edu = PciId {
            vendor: 0x1234,
            device: 0x11e8,
        };
        let found = fake.sysfs().find_by_id(edu).unwrap();
        let addresses: Vec<_> = found.iter().map(|f| f.address.to_string()).collect();
        assert_eq!(addresses, ["0000:00:03.0", "0000:01:00.0"]);
        assert_eq!(found[0].iommu_group, Some(3));
        assert_eq!(found[1].driver.as_deref(), Some("vfio-pci"));
        let none = PciId {
            vendor: 0x1af4,
            device: 0x1000,
        };
        assert!(fake.sysfs().find_by_id(none).unwrap().is_empty());
        let empty = tempfile::tempdir().unwrap();
        assert!(matches!(
            Sysfs::new(empty.path()).find_by_id(edu),
            Err(DriverError::NoSysfs { .. })
        ));
    }

    #[test]
    fn family_detection_for_every_known_device_id() {
        let fake = FakeSysfs::new();
        let golden = crate::pci::tests::golden();
        for (i, &(vendor, device, _, _)) in golden.iter().enumerate() {
            fake.add(
                &format!("0000:{:02x}:00.0", i + 1),
                vendor,
                device,
                None,
                None,
                -1,
            );
        }
        let list = fake.sysfs().list_hcas().unwrap();
        assert_eq!(list.len(), golden.len());
        for (f, &(vendor, device, family, vf)) in list.iter().zip(golden) {
            assert_eq!(f.id, PciId { vendor, device });
            let known = f
                .known
                .unwrap_or_else(|| panic!("{vendor:04x}:{device:04x} unknown"));
            assert_eq!(known.family.name(), family, "{vendor:04x}:{device:04x}");
            assert_eq!(
                known.kind == FunctionKind::Vf,
                vf,
                "{vendor:04x}:{device:04x}"
            );
        }
    }

    /// Where the machine has a real sysfs, every PCI function in it must parse.
    #[test]
    fn the_real_sysfs_parses_where_present() {
        let real = Sysfs::default();
        let Ok(entries) = fs::read_dir(real.devices_dir()) else {
            return;
        };
        let names: Vec<String> = entries
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        let listed = real.list_functions().unwrap();
        assert_eq!(listed.len(), names.len(), "{names:?}");
        for f in &listed {
            assert!(names.contains(&f.address.to_string()));
            assert_ne!(f.id.vendor, 0);
        }
    }

    #[test]
    fn missing_tree_and_device_are_clear_errors() {
        let empty = tempfile::tempdir().unwrap();
        let err = Sysfs::new(empty.path()).list_hcas().unwrap_err();
        assert!(matches!(err, DriverError::NoSysfs { .. }), "{err}");
        let fake = FakeSysfs::new();
        assert!(fake.sysfs().list_hcas().unwrap().is_empty());
        let err = fake.sysfs().function(a("0000:09:00.0")).unwrap_err();
        assert!(
            err.to_string().contains("no PCI function 0000:09:00.0"),
            "{err}"
        );
    }

    #[test]
    fn vfio_variants_with_either_separator_are_vfio_drivers() {
        for name in [
            "vfio-pci",
            "vfio_pci",
            "mlx5_vfio_pci",
            "hisi_acc_vfio_pci",
            "xe-vfio-pci",
            "nvgrace-gpu-vfio-pci",
            "virtio_vfio-pci",
        ] {
            assert!(is_vfio_driver(name), "{name}");
            assert!(!blocks_group(Some(name)), "{name}");
        }
        for name in [
            "mlx5_core",
            "pci-stub",
            "novfio-pci",
            "vfio-pci-core",
            "vfio",
            "",
        ] {
            assert!(!is_vfio_driver(name), "{name}");
        }
    }

    #[test]
    fn ids_with_a_sign_are_refused() {
        let fake = FakeSysfs::new();
        fake.add("0000:03:00.0", 0x15b3, 0x1017, None, Some(17), 0);
        let dir = fake.root().join("bus/pci/devices/0000:03:00.0");
        for bad in ["+15b3\n", "0x+15b3\n", "-15b3\n", "0x\n"] {
            fs::write(dir.join("vendor"), bad).unwrap();
            let err = fake.sysfs().function(a("0000:03:00.0")).unwrap_err();
            assert!(
                err.to_string().contains("is not a 16-bit hex ID"),
                "{bad:?}: {err}"
            );
        }
        fs::write(dir.join("vendor"), "0x15B3\n").unwrap();
        assert_eq!(
            fake.sysfs().function(a("0000:03:00.0")).unwrap().id.vendor,
            0x15b3
        );
    }

    #[test]
    fn attributes_are_read_up_to_a_page_and_only_from_regular_files() {
        let fake = FakeSysfs::new();
        fake.add("0000:03:00.0", 0x15b3, 0x1017, None, Some(17), 0);
        let dir = fake.root().join("bus/pci/devices/0000:03:00.0");
        // One page is what a sysfs attribute can hold; a longer file is not one.
        fs::write(dir.join("numa_node"), format!("1{}\n", " ".repeat(4094))).unwrap();
        assert_eq!(
            fake.sysfs().function(a("0000:03:00.0")).unwrap().numa_node,
            Some(1)
        );
        fs::write(dir.join("numa_node"), format!("1{}\n", " ".repeat(4095))).unwrap();
        let err = fake.sysfs().function(a("0000:03:00.0")).unwrap_err();
        assert!(err.to_string().contains("longer than 4096 bytes"), "{err}");
        fs::write(dir.join("numa_node"), "1\n").unwrap();
        // A device or a FIFO in a --sysfs-root tree would never end (or never open).
        fs::remove_file(dir.join("vendor")).unwrap();
        std::os::unix::fs::symlink("/dev/zero", dir.join("vendor")).unwrap();
        let err = fake.sysfs().function(a("0000:03:00.0")).unwrap_err();
        assert!(err.to_string().contains("not a regular file"), "{err}");
        fs::remove_file(dir.join("vendor")).unwrap();
        let fifo = std::ffi::CString::new(dir.join("vendor").to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path; mkfifo reads nothing else.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        let err = fake.sysfs().function(a("0000:03:00.0")).unwrap_err();
        assert!(err.to_string().contains("not a regular file"), "{err}");
    }

    #[test]
    fn bind_writes_override_unbind_probe_in_that_order() {
        let fake = cx5_on("mlx5_core");
        let b = fake.sysfs().bind_vfio(a("0000:03:00.0")).unwrap();
        assert_eq!(
            b,
            Binding {
                address: a("0000:03:00.0"),
                previous_driver: Some("mlx5_core".into()),
                previous_override: None,
                already_bound: false,
                iommu_group: 17,
            }
        );
        assert_eq!(fake.kernel.writes(), bind_writes());
        assert_eq!(
            fake.sysfs().driver(a("0000:03:00.0")).unwrap().as_deref(),
            Some("vfio-pci")
        );
    }

    #[test]
    fn bind_of_an_unbound_function_skips_the_unbind() {
        let fake = FakeSysfs::new();
        fake.add("0000:03:00.1", 0x15b3, 0x1018, None, Some(18), 0);
        let b = fake.sysfs().bind_vfio(a("0000:03:00.1")).unwrap();
        assert_eq!(b.previous_driver, None);
        assert_eq!(
            fake.kernel.writes(),
            vec![
                w("bus/pci/devices/0000:03:00.1/driver_override", "vfio-pci"),
                w("bus/pci/drivers_probe", "0000:03:00.1"),
            ]
        );
    }

    #[test]
    fn bind_when_already_bound_writes_nothing() {
        let fake = cx5_on("vfio-pci");
        let b = fake.sysfs().bind_vfio(a("0000:03:00.0")).unwrap();
        assert!(b.already_bound);
        assert!(fake.kernel.writes().is_empty());
    }

    #[test]
    fn bind_preconditions_write_nothing() {
        let fake = FakeSysfs::new();
        fake.add("0000:03:00.0", 0x15b3, 0x1017, Some("mlx5_core"), None, 0);
        let err = fake.sysfs().bind_vfio(a("0000:03:00.0")).unwrap_err();
        assert!(matches!(err, DriverError::NoIommuGroup { .. }), "{err}");
        assert!(err.to_string().contains("intel_iommu=on"));
        fake.remove_driver("vfio-pci");
        let err = fake.sysfs().bind_vfio(a("0000:03:00.0")).unwrap_err();
        assert!(err.to_string().contains("modprobe vfio-pci"), "{err}");
        assert!(fake.kernel.writes().is_empty());
    }

    #[test]
    fn bind_of_a_pf_with_vfs_enabled_writes_nothing() {
        let fake = cx5_on("mlx5_core");
        let numvfs = fake
            .root()
            .join("bus/pci/devices/0000:03:00.0/sriov_numvfs");
        fs::write(&numvfs, "4\n").unwrap();
        let err = fake.sysfs().bind_vfio(a("0000:03:00.0")).unwrap_err();
        assert!(
            matches!(err, DriverError::SriovEnabled { numvfs: 4, .. }),
            "{err:?}"
        );
        assert!(
            err.to_string().ends_with(&format!(
                "disable the VFs first: echo 0 > {}",
                numvfs.display()
            )),
            "{err}"
        );
        assert!(fake.kernel.writes().is_empty());
        fs::write(&numvfs, "0\n").unwrap();
        assert!(fake.sysfs().bind_vfio(a("0000:03:00.0")).is_ok());
    }

    #[test]
    fn failed_bind_restores_the_previous_driver() {
        let fake = cx5_on("mlx5_core");
        fake.kernel.refuse.lock().unwrap().push("vfio-pci".into());
        let err = fake.sysfs().bind_vfio(a("0000:03:00.0")).unwrap_err();
        // The error says the bind failed and that the function is back, not that it has no
        // driver (which was true only until the undo).
        let msg = err.to_string();
        assert!(
            msg.starts_with(
                "binding 0000:03:00.0 to vfio-pci failed (0000:03:00.0 should now be bound to \
                 vfio-pci but it has no driver; see `dmesg`"
            ),
            "{msg}"
        );
        assert!(msg.ends_with("); it was given back to mlx5_core"), "{msg}");
        assert_eq!(
            fake.kernel.writes(),
            [bind_writes(), give_back_writes()].concat()
        );
        assert_eq!(
            fake.sysfs().driver(a("0000:03:00.0")).unwrap().as_deref(),
            Some("mlx5_core")
        );
    }

    /// A CX-5 PF on mlx5_core whose writes at `fail` fail, and the bind's error.
    fn bind_with_failing(fail: &[&str], refuse_vfio: bool) -> (FakeSysfs, DriverError) {
        let fake = cx5_on("mlx5_core");
        fake.kernel
            .fail
            .lock()
            .unwrap()
            .extend(fail.iter().map(|s| (*s).to_string()));
        if refuse_vfio {
            fake.kernel.refuse.lock().unwrap().push("vfio-pci".into());
        }
        let err = fake.sysfs().bind_vfio(a("0000:03:00.0")).unwrap_err();
        (fake, err)
    }

    fn override_of(fake: &FakeSysfs, bdf: &str) -> String {
        fs::read_to_string(
            fake.root()
                .join("bus/pci/devices")
                .join(bdf)
                .join("driver_override"),
        )
        .unwrap()
    }

    #[test]
    fn a_bind_that_fails_partway_is_undone() {
        // The probe write fails: the function has no driver and the override is set.
        let (fake, err) = bind_with_failing(&["bus/pci/drivers_probe"], false);
        assert!(
            matches!(&err, DriverError::BindUndone { failure, driver: Some(d), .. }
                if matches!(**failure, DriverError::Io { .. }) && d == "mlx5_core"),
            "{err:?}"
        );
        assert!(err.to_string().contains("drivers_probe"), "{err}");
        assert_eq!(
            fake.kernel.writes(),
            [bind_writes(), give_back_writes()].concat()
        );
        assert_eq!(override_of(&fake, "0000:03:00.0"), "(null)\n");
        assert_eq!(
            fake.sysfs().driver(a("0000:03:00.0")).unwrap().as_deref(),
            Some("mlx5_core")
        );

        // The unbind write fails: the old driver still has it; only the override is undone.
        let (fake, err) = bind_with_failing(&["bus/pci/devices/0000:03:00.0/driver/unbind"], false);
        assert!(
            matches!(&err, DriverError::BindUndone { failure, .. }
                if matches!(**failure, DriverError::Io { .. })),
            "{err:?}"
        );
        assert_eq!(fake.kernel.writes().len(), 3);
        assert_eq!(override_of(&fake, "0000:03:00.0"), "(null)\n");
        assert_eq!(
            fake.sysfs().driver(a("0000:03:00.0")).unwrap().as_deref(),
            Some("mlx5_core")
        );
    }

    #[test]
    fn a_bind_whose_undo_fails_says_what_to_run() {
        let bind_back = "bus/pci/drivers/mlx5_core/bind";
        for refuse_vfio in [false, true] {
            let fail: &[&str] = if refuse_vfio {
                &[bind_back]
            } else {
                &["bus/pci/drivers_probe", bind_back]
            };
            let (fake, err) = bind_with_failing(fail, refuse_vfio);
            let DriverError::BindLeftHalfway {
                failure,
                driver,
                commands,
                ..
            } = &err
            else {
                panic!("{err:?}");
            };
            if refuse_vfio {
                assert!(matches!(**failure, DriverError::BindFailed { .. }), "{err}");
            } else {
                assert!(matches!(**failure, DriverError::Io { .. }), "{err}");
            }
            assert_eq!(driver, &None);
            let cmd = format!(
                "echo 0000:03:00.0 > {}",
                fake.root().join(bind_back).display()
            );
            assert_eq!(commands, std::slice::from_ref(&cmd));
            let msg = err.to_string();
            assert!(msg.contains("it is left with no driver"), "{msg}");
            assert!(msg.ends_with(&format!("run as root:\n  {cmd}")), "{msg}");
            assert_eq!(override_of(&fake, "0000:03:00.0"), "(null)\n");
        }
    }

    #[test]
    fn a_failed_bind_gives_back_the_override_it_found() {
        // An override `none` opts a driverless function out of binding: it must survive.
        let fake = FakeSysfs::new();
        fake.add("0000:03:00.1", 0x15b3, 0x1018, None, Some(18), 0);
        let ovr = fake
            .root()
            .join("bus/pci/devices/0000:03:00.1/driver_override");
        fs::write(&ovr, "none\n").unwrap();
        fake.kernel.refuse.lock().unwrap().push("vfio-pci".into());
        let err = fake.sysfs().bind_vfio(a("0000:03:00.1")).unwrap_err();
        assert!(
            err.to_string()
                .ends_with("; it was left without a driver, as it had none before"),
            "{err}"
        );
        assert_eq!(fs::read_to_string(&ovr).unwrap(), "none\n");
        assert_eq!(
            fake.kernel.writes(),
            vec![
                w("bus/pci/devices/0000:03:00.1/driver_override", "vfio-pci"),
                w("bus/pci/drivers_probe", "0000:03:00.1"),
                w("bus/pci/devices/0000:03:00.1/driver_override", "none"),
            ]
        );

        // pci-stub has no ID table: it takes a function back only through the override, so
        // the override goes back before the bind.
        let fake = FakeSysfs::new();
        fake.add(
            "0000:03:00.0",
            0x15b3,
            0x1017,
            Some("pci-stub"),
            Some(17),
            0,
        );
        let ovr = fake
            .root()
            .join("bus/pci/devices/0000:03:00.0/driver_override");
        fs::write(&ovr, "pci-stub\n").unwrap();
        fake.kernel.refuse.lock().unwrap().push("vfio-pci".into());
        let err = fake.sysfs().bind_vfio(a("0000:03:00.0")).unwrap_err();
        assert!(!matches!(err, DriverError::BindLeftHalfway { .. }), "{err}");
        assert_eq!(
            fake.sysfs().driver(a("0000:03:00.0")).unwrap().as_deref(),
            Some("pci-stub")
        );
        assert_eq!(fs::read_to_string(&ovr).unwrap(), "pci-stub\n");

        // An override naming no driver, on a bound function, would refuse the rebind: it
        // goes back after it.
        let fake = cx5_on("mlx5_core");
        let ovr = fake
            .root()
            .join("bus/pci/devices/0000:03:00.0/driver_override");
        fs::write(&ovr, "none\n").unwrap();
        fake.kernel.refuse.lock().unwrap().push("vfio-pci".into());
        let err = fake.sysfs().bind_vfio(a("0000:03:00.0")).unwrap_err();
        assert!(!matches!(err, DriverError::BindLeftHalfway { .. }), "{err}");
        assert_eq!(
            fake.kernel.writes(),
            [
                bind_writes(),
                give_back_writes(),
                vec![w("bus/pci/devices/0000:03:00.0/driver_override", "none")]
            ]
            .concat()
        );
        assert_eq!(fs::read_to_string(&ovr).unwrap(), "none\n");
    }

    #[test]
    fn unbind_restores_the_recorded_driver() {
        let fake = cx5_on("mlx5_core");
        let sysfs = fake.sysfs();
        let b = sysfs.bind_vfio(a("0000:03:00.0")).unwrap();
        fake.kernel.log.lock().unwrap().clear();
        let restore = Restore::Driver(b.previous_driver.unwrap());
        let u = sysfs.unbind_vfio(a("0000:03:00.0"), &restore).unwrap();
        assert_eq!(
            u,
            Unbinding {
                address: a("0000:03:00.0"),
                was_vfio: true,
                finished: false,
                driver: Some("mlx5_core".into())
            }
        );
        assert_eq!(
            fake.kernel.writes(),
            vec![
                w("bus/pci/devices/0000:03:00.0/driver_override", "\n"),
                w("bus/pci/devices/0000:03:00.0/driver/unbind", "0000:03:00.0"),
                w("bus/pci/drivers/mlx5_core/bind", "0000:03:00.0"),
            ]
        );
        let ovr = fs::read_to_string(
            fake.root()
                .join("bus/pci/devices/0000:03:00.0/driver_override"),
        );
        assert_eq!(ovr.unwrap(), "(null)\n");
    }

    #[test]
    fn an_unbind_whose_restore_fails_says_what_to_run() {
        let bind_back = "bus/pci/drivers/mlx5_core/bind";
        let probe = "bus/pci/drivers_probe";
        // The bind write fails (ENODEV, EIO), or it goes through and the probe does not take.
        for (restore, fail, refuse, cmd_path) in [
            (
                Restore::Driver("mlx5_core".into()),
                Some(bind_back),
                false,
                bind_back,
            ),
            (Restore::Driver("mlx5_core".into()), None, true, bind_back),
            (Restore::KernelChoice, Some(probe), false, probe),
        ] {
            let fake = cx5_on("vfio-pci");
            fake.kernel
                .native
                .lock()
                .unwrap()
                .insert("0000:03:00.0".into(), "mlx5_core".into());
            fake.kernel
                .fail
                .lock()
                .unwrap()
                .extend(fail.map(String::from));
            if refuse {
                fake.kernel.refuse.lock().unwrap().push("mlx5_core".into());
            }
            let err = fake
                .sysfs()
                .unbind_vfio(a("0000:03:00.0"), &restore)
                .unwrap_err();
            let cmd = format!(
                "echo 0000:03:00.0 > {}",
                fake.root().join(cmd_path).display()
            );
            let DriverError::UnbindLeftHalfway {
                driver, commands, ..
            } = &err
            else {
                panic!("{restore:?}: {err:?}");
            };
            assert_eq!(driver, &None);
            assert_eq!(commands, std::slice::from_ref(&cmd));
            let msg = err.to_string();
            assert!(msg.contains("it is left with no driver"), "{msg}");
            assert!(msg.contains(&format!("run as root:\n  {cmd}\n")), "{msg}");
            assert!(msg.contains("hca unbind 0000:03:00.0"), "{msg}");
        }
    }

    #[test]
    fn a_function_left_without_a_driver_is_finished_only_when_asked() {
        let fake = cx5_on("vfio-pci");
        let sysfs = fake.sysfs();
        let bind_back = "bus/pci/drivers/mlx5_core/bind";
        fake.kernel.fail.lock().unwrap().push(bind_back.into());
        let to = |finish_driverless| GiveBack {
            restore: Restore::Driver("mlx5_core".into()),
            driver_override: None,
            finish_driverless,
        };
        let err = sysfs.give_back(a("0000:03:00.0"), &to(false)).unwrap_err();
        assert!(
            matches!(err, DriverError::UnbindLeftHalfway { .. }),
            "{err}"
        );
        assert_eq!(sysfs.driver(a("0000:03:00.0")).unwrap(), None);
        fake.kernel.fail.lock().unwrap().clear();
        fake.kernel.log.lock().unwrap().clear();

        // A retry that is not told the function is ours leaves a driverless function alone.
        let u = sysfs.give_back(a("0000:03:00.0"), &to(false)).unwrap();
        assert!(!u.was_vfio && !u.finished && u.driver.is_none(), "{u:?}");
        let unbound = GiveBack {
            restore: Restore::Unbound,
            ..to(true)
        };
        let u = sysfs.give_back(a("0000:03:00.0"), &unbound).unwrap();
        assert!(!u.finished, "{u:?}");
        assert!(fake.kernel.writes().is_empty());

        // Told, it finishes: the override, then the bind the first attempt did not get to.
        let u = sysfs.give_back(a("0000:03:00.0"), &to(true)).unwrap();
        assert_eq!(
            u,
            Unbinding {
                address: a("0000:03:00.0"),
                was_vfio: false,
                finished: true,
                driver: Some("mlx5_core".into()),
            }
        );
        assert_eq!(fake.kernel.writes(), give_back_writes());
    }

    #[test]
    fn unbind_writes_the_recorded_override_back() {
        // A function parked on pci-stub by its override goes back to pci-stub.
        let fake = FakeSysfs::new();
        fake.add(
            "0000:03:00.0",
            0x15b3,
            0x1017,
            Some("pci-stub"),
            Some(17),
            0,
        );
        let dev = fake.root().join("bus/pci/devices/0000:03:00.0");
        fs::write(dev.join("driver_override"), "pci-stub\n").unwrap();
        let sysfs = fake.sysfs();
        let b = sysfs.bind_vfio(a("0000:03:00.0")).unwrap();
        assert_eq!(b.previous_driver.as_deref(), Some("pci-stub"));
        assert_eq!(b.previous_override.as_deref(), Some("pci-stub"));
        fake.kernel.log.lock().unwrap().clear();
        let to = GiveBack {
            restore: Restore::Driver("pci-stub".into()),
            driver_override: b.previous_override,
            finish_driverless: false,
        };
        let u = sysfs.give_back(a("0000:03:00.0"), &to).unwrap();
        assert_eq!(u.driver.as_deref(), Some("pci-stub"));
        assert_eq!(
            fake.kernel.writes(),
            vec![
                w("bus/pci/devices/0000:03:00.0/driver_override", "pci-stub"),
                w("bus/pci/devices/0000:03:00.0/driver/unbind", "0000:03:00.0"),
                w("bus/pci/drivers/pci-stub/bind", "0000:03:00.0"),
            ]
        );
        assert_eq!(
            fs::read_to_string(dev.join("driver_override")).unwrap(),
            "pci-stub\n"
        );

        // `none` on a function that had no driver: written back, nothing bound.
        let fake = FakeSysfs::new();
        fake.add("0000:03:00.1", 0x15b3, 0x1018, None, Some(18), 0);
        let dev = fake.root().join("bus/pci/devices/0000:03:00.1");
        fs::write(dev.join("driver_override"), "none\n").unwrap();
        let sysfs = fake.sysfs();
        let b = sysfs.bind_vfio(a("0000:03:00.1")).unwrap();
        assert_eq!(b.previous_override.as_deref(), Some("none"));
        let to = GiveBack {
            restore: Restore::Unbound,
            driver_override: b.previous_override,
            finish_driverless: false,
        };
        assert_eq!(
            sysfs.give_back(a("0000:03:00.1"), &to).unwrap().driver,
            None
        );
        assert_eq!(
            fs::read_to_string(dev.join("driver_override")).unwrap(),
            "none\n"
        );

        // A vfio-pci override left over from an earlier bind is not an admin's choice.
        let fake = FakeSysfs::new();
        fake.add("0000:03:00.1", 0x15b3, 0x1018, None, Some(18), 0);
        let dev = fake.root().join("bus/pci/devices/0000:03:00.1");
        fs::write(dev.join("driver_override"), "vfio-pci\n").unwrap();
        let b = fake.sysfs().bind_vfio(a("0000:03:00.1")).unwrap();
        assert_eq!(b.previous_override, None);
    }

    #[test]
    fn unbind_with_kernel_choice_probes_and_with_unbound_leaves_it() {
        let fake = cx5_on("vfio-pci");
        fake.kernel
            .native
            .lock()
            .unwrap()
            .insert("0000:03:00.0".into(), "mlx5_core".into());
        let u = fake
            .sysfs()
            .unbind_vfio(a("0000:03:00.0"), &Restore::KernelChoice)
            .unwrap();
        assert_eq!(u.driver.as_deref(), Some("mlx5_core"));
        assert_eq!(
            fake.kernel.writes(),
            vec![
                w("bus/pci/devices/0000:03:00.0/driver_override", "\n"),
                w("bus/pci/devices/0000:03:00.0/driver/unbind", "0000:03:00.0"),
                w("bus/pci/drivers_probe", "0000:03:00.0"),
            ]
        );

        let fake = FakeSysfs::new();
        fake.add(
            "0000:03:00.1",
            0x15b3,
            0x1018,
            Some("vfio-pci"),
            Some(18),
            0,
        );
        let u = fake
            .sysfs()
            .unbind_vfio(a("0000:03:00.1"), &Restore::Unbound)
            .unwrap();
        assert_eq!(u.driver, None);
        assert_eq!(fake.kernel.writes().len(), 2);
    }

    #[test]
    fn unbind_of_a_function_not_on_vfio_does_nothing() {
        let fake = cx5_on("mlx5_core");
        let u = fake
            .sysfs()
            .unbind_vfio(a("0000:03:00.0"), &Restore::KernelChoice)
            .unwrap();
        assert!(!u.was_vfio);
        assert!(fake.kernel.writes().is_empty());
    }

    #[test]
    fn unbind_to_a_driver_that_is_not_loaded_or_not_a_name_writes_nothing() {
        let fake = FakeSysfs::new();
        fake.add("0000:05:00.0", 0x15b3, 0x1003, Some("vfio-pci"), Some(5), 0);
        fake.remove_driver("mlx4_core");
        let sysfs = fake.sysfs();
        let unbind = |name: &str| {
            sysfs
                .unbind_vfio(a("0000:05:00.0"), &Restore::Driver(name.into()))
                .unwrap_err()
        };
        let err = unbind("mlx4_core");
        assert!(
            matches!(&err, DriverError::DriverNotLoaded { name, .. } if name == "mlx4_core"),
            "{err:?}"
        );
        assert!(
            err.to_string()
                .starts_with("driver mlx4_core is not loaded"),
            "{err}"
        );
        assert!(err.to_string().contains("modprobe mlx4_core"), "{err}");
        for bad in ["", "/tmp/x", "../../devices", "..", "mlx5\0core"] {
            let err = unbind(bad);
            assert!(
                matches!(&err, DriverError::BadDriverName { name, .. } if name == bad),
                "{bad:?}: {err:?}"
            );
        }
        assert!(fake.kernel.writes().is_empty());
        assert_eq!(
            sysfs.driver(a("0000:05:00.0")).unwrap().as_deref(),
            Some("vfio-pci")
        );
    }

    #[test]
    fn bind_hazards_name_non_hcas_interfaces_that_are_up_and_rdma_devices() {
        let fake = FakeSysfs::new();
        fake.add("0000:00:19.0", 0x8086, 0x15b8, Some("e1000e"), Some(3), 0);
        fake.add(
            "0000:03:00.0",
            0x15b3,
            0x1017,
            Some("mlx5_core"),
            Some(17),
            0,
        );
        fake.add(
            "0000:03:00.1",
            0x15b3,
            0x1017,
            Some("vfio-pci"),
            Some(18),
            0,
        );
        let sysfs = fake.sysfs();
        let nic = fake.root().join("bus/pci/devices/0000:00:19.0/net/eno1");
        fs::create_dir_all(&nic).unwrap();
        fs::write(nic.join("flags"), "0x1003\n").unwrap();
        fs::write(nic.join("operstate"), "up\n").unwrap();
        assert_eq!(
            sysfs.bind_hazards(a("0000:00:19.0")).unwrap(),
            [
                "it is not an HCA this driver knows (8086:15b8, driver e1000e)",
                "its network interface eno1 is up"
            ]
        );
        // An HCA with no interface up and no RDMA device is fine to take.
        let hca = fake.root().join("bus/pci/devices/0000:03:00.0");
        fs::create_dir_all(hca.join("net/ib0")).unwrap();
        fs::write(hca.join("net/ib0/flags"), "0x1002\n").unwrap();
        fs::write(hca.join("net/ib0/operstate"), "down\n").unwrap();
        assert!(sysfs.bind_hazards(a("0000:03:00.0")).unwrap().is_empty());
        fs::create_dir_all(hca.join("infiniband/mlx5_0")).unwrap();
        assert_eq!(
            sysfs.bind_hazards(a("0000:03:00.0")).unwrap(),
            ["its RDMA device mlx5_0 is registered (the kernel's RDMA stack and its users)"]
        );
        // Already on vfio-pci: nothing to take down.
        assert!(sysfs.bind_hazards(a("0000:03:00.1")).unwrap().is_empty());
        assert!(fake.kernel.writes().is_empty());
    }

    #[test]
    fn permission_denied_names_root() {
        struct Denied;
        impl SysfsWriter for Denied {
            fn write(&self, _: &Path, _: &str) -> io::Result<()> {
                Err(io::Error::from(io::ErrorKind::PermissionDenied))
            }
        }
        let fake = cx5_on("mlx5_core");
        let sysfs = Sysfs::with_writer(fake.root(), Arc::new(Denied));
        let err = sysfs.bind_vfio(a("0000:03:00.0")).unwrap_err();
        assert!(matches!(err, DriverError::SysfsPermission { .. }), "{err}");
        assert!(err.to_string().contains("needs root"));
    }

    #[test]
    fn group_members_and_the_not_viable_message() {
        let fake = FakeSysfs::new();
        fake.add("0000:03:00.0", 0x15b3, 0x1017, Some("vfio-pci"), Some(7), 0);
        fake.add(
            "0000:03:00.1",
            0x15b3,
            0x1017,
            Some("mlx5_core"),
            Some(7),
            0,
        );
        fake.add("0000:00:01.0", 0x8086, 0x1901, Some("pcieport"), Some(7), 0);
        fake.add("0000:03:00.2", 0x15b3, 0x1018, None, Some(7), 0);
        let sysfs = fake.sysfs();
        let others = sysfs.group_others(7, a("0000:03:00.0")).unwrap();
        let view: Vec<_> = others
            .iter()
            .map(|m| (m.name.as_str(), m.driver.as_deref(), m.blocks))
            .collect();
        assert_eq!(
            view,
            vec![
                ("0000:00:01.0", Some("pcieport"), false),
                ("0000:03:00.1", Some("mlx5_core"), true),
                ("0000:03:00.2", None, false),
            ]
        );
        let err = DriverError::GroupNotViable {
            group: 7,
            address: a("0000:03:00.0"),
            others,
        };
        let msg = err.to_string();
        assert!(
            msg.contains("IOMMU group 7 of 0000:03:00.0 is not viable"),
            "{msg}"
        );
        assert!(
            msg.contains("0000:03:00.1  driver: mlx5_core  <- keeps the group from being viable"),
            "{msg}"
        );
        assert!(msg.contains("0000:00:01.0  driver: pcieport\n"), "{msg}");
        assert!(msg.contains("0000:03:00.2  driver: (none)"), "{msg}");
        assert!(msg.contains("hca bind"), "{msg}");
    }
}

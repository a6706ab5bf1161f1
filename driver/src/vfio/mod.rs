//! The kernel VFIO backend: a PCI function bound to vfio-pci, reached through the legacy
//! container/group interface (reference `vfio-userspace.md` §1.2), which every kernel since 3.6
//! and every Debian kernel has.
//!
//! Opening follows the reference flow step by step, and each way it can fail has its own
//! error that says what to do: `/dev/vfio/vfio` missing (load vfio-pci, turn the IOMMU on),
//! the function not on vfio-pci (`hca bind`), no IOMMU group, permission denied on the group
//! node, the group in use, the group not viable (naming the other devices and their drivers),
//! no type1v2 IOMMU, no interrupt remapping.
//!
//! One backend owns one group and one container. A second function of the same IOMMU group
//! cannot be opened while the first is open (the group node has one opener).
//!
//! Teardown (drop) disables the interrupts this backend routed, then closes the device fd,
//! detaches the group from the container and closes it, and finally drops the container
//! (§1.2 step 7). A BAR mapping ([`Mmio`]) that outlives the backend keeps the device open in
//! the kernel until it is dropped too; drop register handles first for a clean teardown.
//!
//! The DMA mapper ([`VfioType1`]) co-owns the group: detaching the last group tears the
//! container's IOMMU down, after which no unmap succeeds, so a lease or pool that outlives the
//! backend keeps the group attached (and its node open: the group cannot be opened again)
//! until the last mapper handle is dropped. The device fd is closed with the backend either
//! way, which stops the function's DMA.

mod bar;
mod caps;
mod ioctl;
mod irq;

use std::ffi::CString;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use dma::{DmaMapper, IovaRange, VfioType1, X86_MSI_WINDOW};
use tracing::{debug, info, warn};
use vfio_bindings::bindings::vfio as b;

pub use caps::{IommuInfo, RegionDetails};

use crate::backend::{DeviceBackend, IrqIndex, IrqInfo, MmapArea, PciId, RegionInfo, region};
use crate::error::DriverError;
use crate::eventfd::EventFd;
use crate::mmio::Mmio;
use crate::pci::PciAddress;
use crate::sysfs::{Sysfs, is_vfio_driver};

/// The group fd, detached from its container when dropped. Shared between the backend and
/// its mapper, so the detach happens when the later of the two goes.
struct Group {
    fd: File,
    number: u32,
    attached: bool,
}

impl Drop for Group {
    fn drop(&mut self) {
        if self.attached {
            if let Err(e) = ioctl::ioctl_none(self.fd.as_fd(), ioctl::NoArg::GroupUnsetContainer) {
                // EBUSY: a BAR mapping still holds the device; the kernel detaches on release.
                debug!(group = self.number, error = %e, "VFIO_GROUP_UNSET_CONTAINER failed");
            }
        }
    }
}

/// A PCI function bound to vfio-pci, as a [`DeviceBackend`].
pub struct VfioBackend {
    // Field order is drop order: the device is closed here; the group and container are shared
    // with `mapper` and are detached and closed by their last holder (see the module docs).
    device: File,
    group: Arc<Group>,
    container: Arc<OwnedFd>,
    mapper: Arc<VfioType1>,
    address: PciAddress,
    id: PciId,
    device_flags: u32,
    num_irqs: u32,
    regions: Vec<Option<RegionDetails>>,
    iommu: IommuInfo,
    iova_ranges: Vec<IovaRange>,
    /// The eventfds routed per vector. Every `VFIO_DEVICE_SET_IRQS` is issued with this held,
    /// so the kernel's routing and the table change together and the fd numbers an ioctl
    /// passes are open until it returns.
    routed: Mutex<irq::Routed>,
    opened: Instant,
    /// See [`DeviceBackend::needs_reset`].
    needs_reset: crate::backend::ResetMark,
}

impl std::fmt::Debug for VfioBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VfioBackend")
            .field("address", &self.address)
            .field("group", &self.group.number)
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

/// Open a VFIO node read-write and close-on-exec, mapping the errors users meet to their
/// errors.
fn open_node(path: &Path) -> Result<File, io::Error> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_CLOEXEC)
        .open(path)
}

fn ioctl_err(op: &'static str, target: String, source: io::Error) -> DriverError {
    DriverError::VfioIoctl {
        op,
        target,
        source,
        hint: String::new(),
    }
}

/// The IOVA ranges to use when the kernel reports none (before Linux 5.4): the whole space,
/// minus the x86 MSI window, which is never DMA.
fn default_iova_ranges() -> Vec<IovaRange> {
    if cfg!(any(target_arch = "x86_64", target_arch = "x86")) {
        vec![
            IovaRange::new(0, X86_MSI_WINDOW.start - 1),
            IovaRange::new(X86_MSI_WINDOW.end + 1, u64::MAX),
        ]
    } else {
        vec![IovaRange::new(0, u64::MAX)]
    }
}

impl VfioBackend {
    /// Open `address` through VFIO, with sysfs at `sysfs.root()` and device nodes under
    /// `dev_root` (`/dev` on a real system).
    pub fn open(address: PciAddress, sysfs: &Sysfs, dev_root: &Path) -> Result<Self, DriverError> {
        sysfs.require(address)?;
        let container_path = dev_root.join("vfio/vfio");
        if !container_path.exists() {
            return Err(DriverError::VfioMissing {
                path: container_path,
            });
        }
        let driver = sysfs.driver(address)?;
        if !driver.as_deref().is_some_and(is_vfio_driver) {
            return Err(DriverError::NotBoundToVfio { address, driver });
        }
        let group_no = sysfs
            .iommu_group(address)?
            .ok_or(DriverError::NoIommuGroup { address })?;
        let target = format!("vfio:{address}");

        // Step 1: the container, its API version and the type1v2 IOMMU.
        let container = Arc::new(OwnedFd::from(
            open_node(&container_path).map_err(|e| node_error(&container_path, None, e))?,
        ));
        let version = ioctl::ioctl_none(container.as_fd(), ioctl::NoArg::GetApiVersion)
            .map_err(|e| ioctl_err("VFIO_GET_API_VERSION", target.clone(), e))?;
        if version != b::VFIO_API_VERSION as i32 {
            return Err(DriverError::VfioUnsupported {
                what: format!(
                    "API version {version} (this driver speaks version {})",
                    b::VFIO_API_VERSION
                ),
                hint: "use a kernel whose VFIO API is version 0 (every Linux since 3.6)",
            });
        }
        let type1v2 = ioctl::ioctl_value(
            container.as_fd(),
            ioctl::ValueArg::CheckExtension,
            b::VFIO_TYPE1v2_IOMMU,
        )
        .map_err(|e| ioctl_err("VFIO_CHECK_EXTENSION", target.clone(), e))?;
        if type1v2 <= 0 {
            return Err(DriverError::VfioUnsupported {
                what: "the type1v2 IOMMU".into(),
                hint: "load vfio_iommu_type1 (`modprobe vfio_iommu_type1`); noiommu mode is not supported",
            });
        }

        // Steps 2-3: the group node, and its viability.
        let group_path = dev_root.join("vfio").join(group_no.to_string());
        let group_file =
            open_node(&group_path).map_err(|e| node_error(&group_path, Some(group_no), e))?;
        let mut group = Group {
            fd: group_file,
            number: group_no,
            attached: false,
        };
        let mut status = ioctl::argsz_buf(std::mem::size_of::<b::vfio_group_status>());
        ioctl::ioctl_buf(group.fd.as_fd(), ioctl::BufArg::GroupGetStatus, &mut status)
            .map_err(|e| ioctl_err("VFIO_GROUP_GET_STATUS", target.clone(), e))?;
        let group_flags = ioctl::u32_at(&status, 4);
        debug!(%address, group = group_no, flags = group_flags, "group status");
        if group_flags & b::VFIO_GROUP_FLAGS_VIABLE == 0 {
            let others = sysfs.group_others(group_no, address).unwrap_or_else(|e| {
                warn!(error = %e, "cannot list the IOMMU group's devices");
                Vec::new()
            });
            return Err(DriverError::GroupNotViable {
                group: group_no,
                address,
                others,
            });
        }

        // Step 4: attach the group, then choose the IOMMU type.
        ioctl::group_set_container(group.fd.as_fd(), container.as_fd())
            .map_err(|e| ioctl_err("VFIO_GROUP_SET_CONTAINER", target.clone(), e))?;
        group.attached = true;
        ioctl::ioctl_value(
            container.as_fd(),
            ioctl::ValueArg::SetIommu,
            b::VFIO_TYPE1v2_IOMMU,
        )
        .map_err(|e| set_iommu_error(&target, e))?;

        // Step 5: IOMMU info, twice, for the capability chain.
        let fixed = ioctl::argsz_buf(std::mem::size_of::<b::vfio_iommu_type1_info>());
        let buf = ioctl::info_with_caps(container.as_fd(), ioctl::BufArg::IommuGetInfo, &fixed)
            .map_err(|e| ioctl_err("VFIO_IOMMU_GET_INFO", target.clone(), e))?;
        let iommu = caps::parse_iommu_info(&buf).map_err(|what| DriverError::BadVfioInfo {
            target: target.clone(),
            what: format!("IOMMU info: {what}"),
        })?;
        let iova_ranges = iommu.iova_ranges.clone().unwrap_or_else(|| {
            info!("the kernel reports no IOVA ranges (before Linux 5.4); assuming all but the MSI window");
            default_iova_ranges()
        });
        debug!(?iommu, "IOMMU info");

        // Step 6: the device fd, named by a real C string.
        let name = CString::new(address.to_string()).expect("a PCI address has no NUL");
        let device = File::from(
            ioctl::group_get_device_fd(group.fd.as_fd(), &name)
                .map_err(|e| ioctl_err("VFIO_GROUP_GET_DEVICE_FD", target.clone(), e))?,
        );

        // Step 7: device info, regions, config space.
        let mut info = ioctl::argsz_buf(std::mem::size_of::<b::vfio_device_info>());
        ioctl::ioctl_buf(device.as_fd(), ioctl::BufArg::DeviceGetInfo, &mut info)
            .map_err(|e| ioctl_err("VFIO_DEVICE_GET_INFO", target.clone(), e))?;
        let device_flags = ioctl::u32_at(&info, 4);
        let num_regions = ioctl::u32_at(&info, 8);
        let num_irqs = ioctl::u32_at(&info, 12);
        debug!(device_flags, num_regions, num_irqs, "device info");
        if device_flags & b::VFIO_DEVICE_FLAGS_PCI == 0 {
            return Err(DriverError::BadVfioInfo {
                target,
                what: format!("device flags {device_flags:#x} do not say PCI"),
            });
        }
        if num_regions <= region::CONFIG {
            return Err(DriverError::BadVfioInfo {
                target,
                what: format!("{num_regions} regions, so no config region (index 7)"),
            });
        }
        // vfio-pci has 9 fixed regions plus a few device-specific ones; more is nonsense.
        let num_regions = num_regions.min(64);
        let mut regions = Vec::with_capacity(num_regions as usize);
        for index in 0..num_regions {
            regions.push(query_region(device.as_fd(), index, &target)?);
        }
        let backend_id = PciId {
            vendor: 0,
            device: 0,
        };
        let group = Arc::new(group);
        let attachment: dma::vfio_type1::Attachment = group.clone();
        let mut backend = VfioBackend {
            mapper: Arc::new(VfioType1::new(
                container.clone(),
                attachment,
                iova_ranges.clone(),
                iommu.pgsizes,
            )),
            device,
            group,
            container,
            address,
            id: backend_id,
            device_flags,
            num_irqs,
            regions,
            iommu,
            iova_ranges,
            routed: Mutex::new(irq::Routed::default()),
            opened: Instant::now(),
            needs_reset: crate::backend::ResetMark::default(),
        };
        let config = backend.config_region()?;
        if config.info.size < 0x40 || !config.info.read || !config.info.write {
            return Err(DriverError::BadVfioInfo {
                target: backend.describe(),
                what: format!(
                    "config region of {:#x} bytes (read {}, write {})",
                    config.info.size, config.info.read, config.info.write
                ),
            });
        }
        let mut ids = [0u8; 4];
        backend.config_read(0, &mut ids)?;
        backend.id = PciId {
            vendor: u16::from_le_bytes([ids[0], ids[1]]),
            device: u16::from_le_bytes([ids[2], ids[3]]),
        };
        info!(
            %address, group = group_no, vendor = backend.id.vendor, device = backend.id.device,
            reset = device_flags & b::VFIO_DEVICE_FLAGS_RESET != 0,
            "opened through VFIO"
        );
        Ok(backend)
    }

    /// The function's PCI address.
    pub fn address(&self) -> PciAddress {
        self.address
    }

    /// The IOMMU group (`/dev/vfio/N`).
    pub fn iommu_group(&self) -> u32 {
        self.group.number
    }

    /// What the IOMMU reported (page sizes, IOVA ranges, mappings available).
    pub fn iommu_info(&self) -> &IommuInfo {
        &self.iommu
    }

    /// Everything known about region `index`, including its file offset and type.
    pub fn region_details(&self, index: u32) -> Option<&RegionDetails> {
        self.regions.get(index as usize).and_then(Option::as_ref)
    }

    fn config_region(&self) -> Result<&RegionDetails, DriverError> {
        self.region_details(region::CONFIG)
            .ok_or(DriverError::NoRegion {
                index: region::CONFIG,
            })
    }

    fn config_range(&self, offset: u64, len: usize) -> Result<u64, DriverError> {
        let config = self.config_region()?;
        let size = config.info.size;
        if offset.checked_add(len as u64).is_none_or(|end| end > size) {
            return Err(DriverError::ConfigRange { offset, len, size });
        }
        // No overflow: `offset` lies inside the region, and parsing checked its end.
        Ok(config.file_offset + offset)
    }

    fn device_file(&self) -> BorrowedFd<'_> {
        self.device.as_fd()
    }

    fn set_irqs_raw(&self, buf: &mut [u8]) -> Result<(), io::Error> {
        ioctl::ioctl_buf(self.device_file(), ioctl::BufArg::DeviceSetIrqs, buf).map(drop)
    }

    fn routed(&self) -> std::sync::MutexGuard<'_, irq::Routed> {
        self.routed.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Query one region; regions the device does not have (vfio-pci's VGA region on a non-VGA
/// device answers `EINVAL`) are `None`.
fn query_region(
    device: BorrowedFd<'_>,
    index: u32,
    target: &str,
) -> Result<Option<RegionDetails>, DriverError> {
    let mut fixed = ioctl::argsz_buf(std::mem::size_of::<b::vfio_region_info>());
    ioctl::put_u32(&mut fixed, 8, index);
    match ioctl::info_with_caps(device, ioctl::BufArg::DeviceGetRegionInfo, &fixed) {
        Ok(buf) => {
            let details =
                caps::parse_region_info(&buf, index).map_err(|what| DriverError::BadVfioInfo {
                    target: target.to_string(),
                    what: format!("region {index}: {what}"),
                })?;
            debug!(index, ?details, "region");
            Ok(Some(details))
        }
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
            debug!(index, "region not present");
            Ok(None)
        }
        Err(e) => Err(ioctl_err(
            "VFIO_DEVICE_GET_REGION_INFO",
            target.to_string(),
            e,
        )),
    }
}

/// The error for a VFIO node that cannot be opened.
fn node_error(path: &Path, group: Option<u32>, e: io::Error) -> DriverError {
    match (e.kind(), e.raw_os_error(), group) {
        (io::ErrorKind::PermissionDenied, _, _) => DriverError::VfioPermission {
            path: path.to_path_buf(),
        },
        (_, Some(libc::EBUSY), Some(group)) => DriverError::GroupBusy {
            group,
            path: path.to_path_buf(),
        },
        (io::ErrorKind::NotFound, _, None) => DriverError::VfioMissing {
            path: path.to_path_buf(),
        },
        (io::ErrorKind::NotFound, _, Some(group)) => {
            let noiommu = path.with_file_name(format!("noiommu-{group}"));
            if noiommu.exists() {
                DriverError::VfioUnsupported {
                    what: format!("noiommu groups ({} exists)", noiommu.display()),
                    hint: "turn the IOMMU on (intel_iommu=on / amd_iommu=on) instead of enable_unsafe_noiommu_mode",
                }
            } else {
                DriverError::Io {
                    what: format!(
                        "opening {} (the node of IOMMU group {group}, which appears once a device of the group is bound to vfio-pci)",
                        path.display()
                    ),
                    source: e,
                }
            }
        }
        _ => DriverError::Io {
            what: format!("opening {}", path.display()),
            source: e,
        },
    }
}

fn set_iommu_error(target: &str, source: io::Error) -> DriverError {
    let hint = if source.raw_os_error() == Some(libc::EPERM) {
        "; the platform has no interrupt remapping, so type1 refuses the group: enable it \
         (intremap=on / check the IOMMU's IR support) or, accepting the risk, load \
         vfio_iommu_type1 with allow_unsafe_interrupts=1"
            .to_string()
    } else {
        String::new()
    };
    DriverError::VfioIoctl {
        op: "VFIO_SET_IOMMU(TYPE1v2)",
        target: target.to_string(),
        source,
        hint,
    }
}

fn irq_index_from(n: u32) -> Option<IrqIndex> {
    irq::ALL_INDEXES.into_iter().find(|i| *i as u32 == n)
}

impl DeviceBackend for VfioBackend {
    fn describe(&self) -> String {
        format!("vfio:{}", self.address)
    }

    fn pci_id(&self) -> PciId {
        self.id
    }

    fn region_info(&self, index: u32) -> Result<RegionInfo, DriverError> {
        self.region_details(index)
            .map(|d| d.info.clone())
            .ok_or(DriverError::NoRegion { index })
    }

    fn map_region(&self, index: u32) -> Result<Mmio, DriverError> {
        let not = |reason: String| DriverError::RegionNotMappable { index, reason };
        if index > 5 {
            return Err(not("only BARs (regions 0-5) are mapped".into()));
        }
        let details = self
            .region_details(index)
            .ok_or(DriverError::NoRegion { index })?;
        let info = &details.info;
        if info.size == 0 {
            return Err(not("the BAR is not implemented (size 0)".into()));
        }
        if !info.mmap {
            return Err(not(
                "VFIO does not allow mapping it (an I/O-port BAR, or smaller than a page)".into(),
            ));
        }
        if !(info.read && info.write) {
            return Err(not("VFIO does not allow both reads and writes".into()));
        }
        let whole = [MmapArea {
            offset: 0,
            size: info.size,
        }];
        let areas: &[MmapArea] = match &info.sparse {
            Some(a) if a.is_empty() => return Err(not("its sparse-mmap list is empty".into())),
            Some(a) => a,
            None => &whole,
        };
        let fd = self.device.as_fd();
        let file_offset = details.file_offset;
        let mapping = bar::map_bar(info.size, areas, bar::page_size(), |at, area, len| {
            // SAFETY: `map_bar` calls this with `at .. at + len` inside the PROT_NONE
            // reservation it just made and owns (it checked each area fits the BAR), which
            // nothing refers to yet. The sum does not overflow: the area lies inside the BAR,
            // whose end parsing checked.
            unsafe { bar::map_fixed_shared(at, len, fd, file_offset + area.offset) }
        })
        .map_err(not)?;
        let base = mapping.base();
        debug!(
            index,
            ?base,
            size = info.size,
            reserved = mapping.len(),
            ?areas,
            "mapped BAR"
        );
        let keep = Arc::new(mapping);
        if info.sparse.is_some() {
            // SAFETY: every area was mapped from the device at its BAR offset inside the
            // reservation `keep` owns, and `map_bar` checked each lies inside the BAR.
            Ok(unsafe { Mmio::mapped_sparse(base, info.size, areas.to_vec().into(), keep) })
        } else {
            // SAFETY: the whole BAR is mapped at `base` and owned by `keep`.
            Ok(unsafe { Mmio::mapped(base, info.size, keep) })
        }
    }

    fn config_read(&self, offset: u64, data: &mut [u8]) -> Result<(), DriverError> {
        let at = self.config_range(offset, data.len())?;
        self.device
            .read_exact_at(data, at)
            .map_err(|e| DriverError::Io {
                what: format!(
                    "reading {} bytes of config space at {offset:#x}",
                    data.len()
                ),
                source: e,
            })
    }

    fn config_write(&self, offset: u64, data: &[u8]) -> Result<(), DriverError> {
        let at = self.config_range(offset, data.len())?;
        self.device
            .write_all_at(data, at)
            .map_err(|e| DriverError::Io {
                what: format!(
                    "writing {} bytes of config space at {offset:#x}",
                    data.len()
                ),
                source: e,
            })
    }

    fn irq_info(&self, index: IrqIndex) -> Result<IrqInfo, DriverError> {
        let absent = IrqInfo {
            index,
            count: 0,
            eventfd: false,
            maskable: false,
            automasked: false,
            noresize: false,
        };
        if index as u32 >= self.num_irqs {
            return Ok(absent);
        }
        let mut buf = ioctl::argsz_buf(std::mem::size_of::<b::vfio_irq_info>());
        ioctl::put_u32(&mut buf, 8, index as u32);
        match ioctl::ioctl_buf(
            self.device_file(),
            ioctl::BufArg::DeviceGetIrqInfo,
            &mut buf,
        ) {
            // The ERR index of a conventional-PCI device answers EINVAL: not available.
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => Ok(absent),
            Err(e) => Err(ioctl_err("VFIO_DEVICE_GET_IRQ_INFO", self.describe(), e)),
            Ok(_) => {
                let got = ioctl::u32_at(&buf, 8);
                if irq_index_from(got) != Some(index) {
                    return Err(DriverError::BadVfioInfo {
                        target: self.describe(),
                        what: format!("asked for IRQ index {}, got {got}", index as u32),
                    });
                }
                let flags = ioctl::u32_at(&buf, 4);
                Ok(IrqInfo {
                    index,
                    count: ioctl::u32_at(&buf, 12),
                    eventfd: flags & b::VFIO_IRQ_INFO_EVENTFD != 0,
                    maskable: flags & b::VFIO_IRQ_INFO_MASKABLE != 0,
                    automasked: flags & b::VFIO_IRQ_INFO_AUTOMASKED != 0,
                    noresize: flags & b::VFIO_IRQ_INFO_NORESIZE != 0,
                })
            }
        }
    }

    fn set_irqs(&self, index: IrqIndex, start: u32, fds: &[&EventFd]) -> Result<(), DriverError> {
        if fds.is_empty() {
            return self.disable_irqs(index);
        }
        let info = self.irq_info(index)?;
        let count = u32::try_from(fds.len()).unwrap_or(u32::MAX);
        if start.checked_add(count).is_none_or(|end| end > info.count) {
            return Err(DriverError::IrqRange {
                index,
                start,
                count,
                available: info.count,
            });
        }
        let dups = fds
            .iter()
            .map(|f| f.try_clone())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| DriverError::Io {
                what: "dup of an interrupt eventfd".into(),
                source: e,
            })?;
        let raw: Vec<i32> = dups.iter().map(AsRawFd::as_raw_fd).collect();
        let mut buf = irq::trigger_eventfds(index as u32, start, &raw);
        // Held across the ioctl so the kernel's routing and the table change together (see
        // `routed`).
        let mut routed = self.routed();
        self.set_irqs_raw(&mut buf).map_err(|source| {
            let hint = if source.raw_os_error() == Some(libc::EINVAL) && info.noresize {
                "; this index cannot grow while enabled: route all its vectors in one call, or disable it first".to_string()
            } else {
                String::new()
            };
            DriverError::VfioIoctl {
                op: "VFIO_DEVICE_SET_IRQS",
                target: self.describe(),
                source,
                hint,
            }
        })?;
        debug!(?index, start, count, "interrupts routed");
        routed.set(index, start, dups);
        Ok(())
    }

    fn disable_irqs(&self, index: IrqIndex) -> Result<(), DriverError> {
        let mut buf = irq::disable(index as u32);
        let mut routed = self.routed();
        self.set_irqs_raw(&mut buf)
            .map_err(|e| ioctl_err("VFIO_DEVICE_SET_IRQS (disable)", self.describe(), e))?;
        routed.clear(index);
        Ok(())
    }

    fn reset(&self) -> Result<bool, DriverError> {
        if self.device_flags & b::VFIO_DEVICE_FLAGS_RESET == 0 {
            return Ok(false);
        }
        ioctl::ioctl_none(self.device_file(), ioctl::NoArg::DeviceReset)
            .map_err(|e| ioctl_err("VFIO_DEVICE_RESET", self.describe(), e))?;
        // A reset can tear down the kernel side of MSI/MSI-X triggers while our eventfds stay
        // (the kernel selftests' igb driver re-arms after it); route them again. The table stays
        // locked across each ioctl: its handles keep the fds open, so a concurrent `set_irqs`
        // cannot close one (and let its number be reused) before the kernel has taken it, nor
        // be overwritten by a re-arm with the routing it replaced.
        let routed = self.routed();
        for index in [IrqIndex::Msi, IrqIndex::Msix] {
            let raw = routed.raw_fds(index);
            if raw.iter().any(|&fd| fd >= 0) {
                let mut buf = irq::trigger_eventfds(index as u32, 0, &raw);
                self.set_irqs_raw(&mut buf).map_err(|e| {
                    ioctl_err(
                        "VFIO_DEVICE_SET_IRQS (re-arm after reset)",
                        self.describe(),
                        e,
                    )
                })?;
            }
        }
        info!(address = %self.address, "function reset");
        Ok(true)
    }

    fn reset_supported(&self) -> Option<bool> {
        Some(self.device_flags & b::VFIO_DEVICE_FLAGS_RESET != 0)
    }

    fn needs_reset(&self) -> Option<String> {
        self.needs_reset.get()
    }

    fn mark_needs_reset(&self, reason: Option<String>) {
        self.needs_reset.set(reason);
    }

    fn dma_mapper(&self) -> Arc<dyn DmaMapper> {
        self.mapper.clone()
    }

    fn now(&self) -> Duration {
        self.opened.elapsed()
    }

    fn wait(&self, deadline: Duration) {
        let fds = self.routed().all();
        // A deadline too far to represent (Duration::MAX) means "until an interrupt".
        let until = self
            .opened
            .checked_add(deadline)
            .unwrap_or_else(|| Instant::now() + Duration::from_secs(365 * 86400));
        irq::wait_any(&fds, until);
    }

    fn facts(&self) -> Vec<(&'static str, String)> {
        let mut out = vec![
            (
                "IOMMU group",
                format!("{} (/dev/vfio/{})", self.group.number, self.group.number),
            ),
            (
                "container",
                format!("type1v2, fd {}", self.container.as_raw_fd()),
            ),
        ];
        if let Some(p) = self.iommu.pgsizes {
            out.push(("IOMMU page sizes", format_pgsizes(p)));
        }
        out.push((
            "IOVA ranges source",
            if self.iommu.iova_ranges.is_some() {
                "kernel (IOVA-range capability)".to_string()
            } else {
                "assumed (the kernel reports none)".to_string()
            },
        ));
        if let Some(n) = self.iommu.dma_avail {
            out.push(("DMA mappings available", n.to_string()));
        }
        debug_assert_eq!(self.iova_ranges, self.mapper.iova_ranges());
        out
    }
}

/// `0x40201000` → `4K 2M 1G`.
fn format_pgsizes(bitmap: u64) -> String {
    (0..64)
        .filter(|bit| bitmap & (1u64 << bit) != 0)
        .map(|bit| {
            let size = 1u64 << bit;
            match bit {
                30.. => format!("{}G", size >> 30),
                20.. => format!("{}M", size >> 20),
                10.. => format!("{}K", size >> 10),
                _ => format!("{size}"),
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

impl Drop for VfioBackend {
    fn drop(&mut self) {
        for index in irq::ALL_INDEXES {
            if self.routed().any(index) {
                if let Err(e) = self.disable_irqs(index) {
                    debug!(?index, error = %e, "disabling interrupts at close failed");
                }
            }
        }
        let live = self.mapper.live_mappings();
        if live > 0 {
            warn!(
                address = %self.address, live,
                "closing a VFIO device with DMA mappings still live; the group stays attached until the last mapper handle is dropped"
            );
        }
        debug!(address = %self.address, "closing: the device; group and container with the last mapper handle");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sysfs::fake::FakeSysfs;

    fn a(s: &str) -> PciAddress {
        s.parse().unwrap()
    }

    fn open(fake: &FakeSysfs, dev: &Path, bdf: &str) -> DriverError {
        VfioBackend::open(a(bdf), &fake.sysfs(), dev).unwrap_err()
    }

    #[test]
    fn missing_dev_vfio_tells_to_load_the_module() {
        let fake = FakeSysfs::new();
        fake.add(
            "0000:03:00.0",
            0x15b3,
            0x1017,
            Some("vfio-pci"),
            Some(17),
            0,
        );
        let dev = tempfile::tempdir().unwrap();
        let err = open(&fake, dev.path(), "0000:03:00.0");
        assert!(matches!(err, DriverError::VfioMissing { .. }), "{err:?}");
        let msg = err.to_string();
        assert!(
            msg.contains(&format!(
                "{}/vfio/vfio does not exist",
                dev.path().display()
            )),
            "{msg}"
        );
        assert!(
            msg.contains("modprobe vfio-pci") && msg.contains("intel_iommu=on"),
            "{msg}"
        );
    }

    #[test]
    fn the_checks_before_any_ioctl() {
        let fake = FakeSysfs::new();
        fake.add(
            "0000:03:00.0",
            0x15b3,
            0x1017,
            Some("mlx5_core"),
            Some(17),
            0,
        );
        fake.add("0000:04:00.0", 0x15b3, 0x1017, Some("vfio-pci"), None, 0);
        fake.add("0000:05:00.0", 0x15b3, 0x1017, None, Some(5), 0);
        let dev = tempfile::tempdir().unwrap();
        std::fs::create_dir(dev.path().join("vfio")).unwrap();
        std::fs::write(dev.path().join("vfio/vfio"), "").unwrap();

        let err = open(&fake, dev.path(), "0000:03:00.0");
        assert!(err.to_string().contains("0000:03:00.0 is not bound to vfio-pci (its driver is mlx5_core): run `hca bind 0000:03:00.0`"), "{err}");
        let err = open(&fake, dev.path(), "0000:05:00.0");
        assert!(err.to_string().contains("(it has no driver)"), "{err}");
        let err = open(&fake, dev.path(), "0000:04:00.0");
        assert!(matches!(err, DriverError::NoIommuGroup { .. }), "{err}");
        let err = open(&fake, dev.path(), "0000:09:00.0");
        assert!(matches!(err, DriverError::NoSuchDevice { .. }), "{err}");
    }

    #[test]
    fn node_errors_say_what_to_do() {
        let p = Path::new("/dev/vfio/17");
        let err = node_error(p, Some(17), io::Error::from_raw_os_error(libc::EACCES));
        let msg = err.to_string();
        assert!(
            msg.contains("permission denied opening /dev/vfio/17"),
            "{msg}"
        );
        assert!(
            msg.contains("chown $USER /dev/vfio/17") && msg.contains("run as root"),
            "{msg}"
        );
        let err = node_error(p, Some(17), io::Error::from_raw_os_error(libc::EBUSY));
        assert!(
            matches!(err, DriverError::GroupBusy { group: 17, .. }),
            "{err}"
        );
        // EBUSY has two causes: another process, or this one holding the group already.
        let msg = err.to_string();
        assert!(msg.contains("another process has it open"), "{msg}");
        assert!(
            msg.contains("this program already has a function of IOMMU group 17 open"),
            "{msg}"
        );
        let err = node_error(
            Path::new("/dev/vfio/vfio"),
            None,
            io::Error::from_raw_os_error(libc::ENOENT),
        );
        assert!(matches!(err, DriverError::VfioMissing { .. }), "{err}");
        let noiommu = tempfile::tempdir().unwrap();
        std::fs::write(noiommu.path().join("noiommu-3"), "").unwrap();
        let err = node_error(
            &noiommu.path().join("3"),
            Some(3),
            io::Error::from_raw_os_error(libc::ENOENT),
        );
        assert!(err.to_string().contains("noiommu"), "{err}");
        let err = set_iommu_error(
            "vfio:0000:03:00.0",
            io::Error::from_raw_os_error(libc::EPERM),
        );
        assert!(
            err.to_string().contains("allow_unsafe_interrupts=1"),
            "{err}"
        );
    }

    #[test]
    fn page_size_bitmap_reads_as_sizes() {
        assert_eq!(format_pgsizes(0x40201000), "4K 2M 1G");
        assert_eq!(format_pgsizes(0x1000), "4K");
    }

    #[test]
    fn default_ranges_skip_the_msi_window() {
        let r = default_iova_ranges();
        if cfg!(target_arch = "x86_64") {
            assert_eq!(
                r,
                vec![
                    IovaRange::new(0, 0xfedf_ffff),
                    IovaRange::new(0xfef0_0000, u64::MAX)
                ]
            );
        }
    }
}

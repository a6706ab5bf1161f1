//! The one error type of the `driver` crate.

use std::fmt::Write as _;
use std::io;
use std::path::PathBuf;

use firmware_cmds::mlx5::Opcode;
use firmware_cmds::mlx5::cmd::{CmdStatus, DeliveryStatus};

use crate::backend::IrqIndex;
use crate::pci::{HcaFamily, PCI_ADDRESS_FORMS, PciAddress};
use crate::sysfs::GroupMember;

/// Everything device access and the families can report. Each message says what to do.
#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    /// A device string that is none of the accepted forms.
    #[error(
        "bad device string {given:?}: {reason}\naccepted forms:\n  vfio:DDDD:BB:DD.F   a PCI function bound to vfio-pci, e.g. vfio:0000:03:00.0 (vfio:03:00.0 means domain 0000)\n  sim                 the built-in simulated HCA\n  sim:KEY=VALUE,...   the simulated HCA with parameters (see `hca info --help`)"
    )]
    BadDeviceString {
        /// The string as given.
        given: String,
        /// What is wrong with it.
        reason: String,
    },

    /// `sim` was asked for in a program that has no simulator linked in.
    #[error(
        "this program has no simulator linked in, so `sim` devices are unavailable; use a vfio:BDF device, or a program built with the `embed` crate (such as `hca`)"
    )]
    NoSimulator,

    /// The simulator does not know a parameter, or misses one another needs.
    #[error("the simulator refused its parameters: {reason}\naccepted parameters:\n{help}")]
    SimParams {
        /// Why.
        reason: String,
        /// The parameters it accepts.
        help: &'static str,
    },

    /// The simulator could not open the device for another reason (a value, a file, a node,
    /// a server), which the reason names.
    #[error("the simulated device cannot be opened: {reason}")]
    SimOpen {
        /// Why.
        reason: String,
    },

    /// The backend has no such region, or it cannot be mapped.
    #[error("the device has no mappable region {index}")]
    NoRegion {
        /// Region index.
        index: u32,
    },

    /// A region that exists but cannot be mapped for register access.
    #[error("region {index} cannot be mapped: {reason}")]
    RegionNotMappable {
        /// Region index.
        index: u32,
        /// Why.
        reason: String,
    },

    /// Interrupt vectors outside what the device offers.
    #[error("{index:?} interrupts {start}..{} requested but the device offers {available}", start + count)]
    IrqRange {
        /// Index.
        index: IrqIndex,
        /// First vector.
        start: u32,
        /// Vectors requested.
        count: u32,
        /// Vectors available.
        available: u32,
    },

    /// An OS call failed.
    #[error("{what}: {source}")]
    Io {
        /// What we were doing.
        what: String,
        /// The OS error.
        #[source]
        source: io::Error,
    },

    /// A DMA error from the `dma` crate.
    #[error(transparent)]
    Dma(#[from] dma::DmaError),

    /// A PCI address that is not `DDDD:BB:DD.F` or `BB:DD.F`.
    #[error("bad PCI address {given:?}: {reason}\naccepted forms: {forms}", forms = PCI_ADDRESS_FORMS)]
    BadPciAddress {
        /// The text as given.
        given: String,
        /// Which part is wrong.
        reason: String,
    },

    /// No such PCI function in sysfs.
    #[error(
        "no PCI function {address} under {}: check the address with `hca list` or `lspci -D`",
        devices_dir.display()
    )]
    NoSuchDevice {
        /// The address asked for.
        address: PciAddress,
        /// The sysfs devices directory that was searched.
        devices_dir: PathBuf,
    },

    /// The PCI devices directory of sysfs is missing (wrong `--sysfs-root`, or no sysfs).
    #[error("{} does not exist: is sysfs mounted (or is --sysfs-root right)?", path.display())]
    NoSysfs {
        /// The directory that was expected.
        path: PathBuf,
    },

    /// The VFIO container device node is missing: the vfio modules are not loaded.
    #[error(
        "{} does not exist: the VFIO driver is not loaded. Load it with `modprobe vfio-pci`, and \
         make sure the IOMMU is on (boot with intel_iommu=on on Intel, amd_iommu=on or the \
         default on AMD)",
        path.display()
    )]
    VfioMissing {
        /// The path that was expected (`/dev/vfio/vfio`).
        path: PathBuf,
    },

    /// The vfio-pci driver is not registered, so nothing can be bound to it.
    #[error(
        "the vfio-pci driver is not loaded ({} is missing): run `modprobe vfio-pci` first",
        path.display()
    )]
    VfioPciNotLoaded {
        /// The sysfs driver directory that was expected.
        path: PathBuf,
    },

    /// The function is not bound to vfio-pci.
    #[error(
        "{address} is not bound to vfio-pci ({}): run `hca bind {address}` as root first",
        match driver { Some(d) => format!("its driver is {d}"), None => "it has no driver".to_string() }
    )]
    NotBoundToVfio {
        /// The function.
        address: PciAddress,
        /// Its current driver, if any.
        driver: Option<String>,
    },

    /// The function has no IOMMU group: the IOMMU is off, so VFIO cannot isolate it.
    #[error(
        "{address} has no IOMMU group, so VFIO cannot use it: turn the IOMMU on (boot with \
         intel_iommu=on on Intel; on AMD it is on unless amd_iommu=off) and check that \
         `dmesg | grep -i -e DMAR -e AMD-Vi` shows it enabled"
    )]
    NoIommuGroup {
        /// The function.
        address: PciAddress,
    },

    /// Opening a VFIO device node was refused.
    #[error(
        "permission denied opening {}: give your user access (`sudo chown $USER {}` or `chmod`), \
         or run as root; DMA also needs `ulimit -l` large enough for the memory it pins",
        path.display(), path.display()
    )]
    VfioPermission {
        /// The node.
        path: PathBuf,
    },

    /// The group node is already open (VFIO allows one opener of a group): by another process,
    /// or by this one, through another function of the same group.
    #[error(
        "IOMMU group {group} ({}) is busy: either another process has it open (another `hca`, \
         a VM or a DPDK application; stop it), or this program already has a function of IOMMU \
         group {group} open (VFIO lets one opener hold a group: close that function, and drop \
         the DMA leases and pools that outlive it, first); then try again",
        path.display()
    )]
    GroupBusy {
        /// Group number.
        group: u32,
        /// The node.
        path: PathBuf,
    },

    /// Another device of the IOMMU group is bound to a host driver.
    #[error("{}", group_not_viable_message(*group, *address, others))]
    GroupNotViable {
        /// Group number.
        group: u32,
        /// The function being opened.
        address: PciAddress,
        /// The other devices of the group and their drivers.
        others: Vec<GroupMember>,
    },

    /// The kernel's VFIO lacks something the driver needs.
    #[error("the kernel's VFIO does not support {what}; {hint}")]
    VfioUnsupported {
        /// What is missing.
        what: String,
        /// What to do.
        hint: &'static str,
    },

    /// A VFIO ioctl failed.
    #[error("{op} failed on {target}: {source}{hint}")]
    VfioIoctl {
        /// The ioctl (`VFIO_SET_IOMMU`, ...).
        op: &'static str,
        /// The device or group it was issued for.
        target: String,
        /// The OS error.
        #[source]
        source: io::Error,
        /// A hint (starting with "; ") for errors with a known cause, or empty.
        hint: String,
    },

    /// The kernel returned VFIO information that is inconsistent or malformed.
    #[error(
        "malformed VFIO information from the kernel for {target}: {what} (a kernel or \
         vfio-pci bug; please report it with `uname -r`)"
    )]
    BadVfioInfo {
        /// Which device or container.
        target: String,
        /// What is wrong.
        what: String,
    },

    /// A configuration-space access outside the config region.
    #[error(
        "config space access of {len} bytes at {offset:#x} is outside the {size:#x}-byte config region"
    )]
    ConfigRange {
        /// Offset asked for.
        offset: u64,
        /// Bytes asked for.
        len: usize,
        /// Size of the config region.
        size: u64,
    },

    /// A sysfs write needs privileges the process lacks.
    #[error("permission denied writing {}: binding and unbinding drivers needs root (try `sudo hca ...`)", path.display())]
    SysfsPermission {
        /// The file.
        path: PathBuf,
    },

    /// A physical function with SR-IOV virtual functions enabled: vfio-pci refuses it
    /// (-EBUSY), but only after its driver was unbound, which takes the VFs (and the VMs
    /// using them) down.
    #[error(
        "{address} has {numvfs} SR-IOV virtual functions enabled, and vfio-pci does not take a \
         PF with VFs (taking it off its driver would also take the VFs and any VM using them \
         down): disable the VFs first: echo 0 > {}",
        path.display()
    )]
    SriovEnabled {
        /// The physical function.
        address: PciAddress,
        /// VFs enabled.
        numvfs: u32,
        /// Its `sriov_numvfs` attribute.
        path: PathBuf,
    },

    /// A driver name that cannot be one (empty, a path, `..`, a NUL).
    #[error(
        "{name:?} is not a driver name: {reason} (give the name as `ls /sys/bus/pci/drivers` \
         shows it, e.g. mlx5_core)"
    )]
    BadDriverName {
        /// The name as given or recorded.
        name: String,
        /// What is wrong with it.
        reason: &'static str,
    },

    /// The driver to give a function to is not registered with the PCI bus.
    #[error(
        "driver {name} is not loaded ({} is missing): load it with `modprobe {name}`, or check \
         the name in `ls {}`",
        path.display(),
        path.parent().map_or_else(String::new, |p| p.display().to_string())
    )]
    DriverNotLoaded {
        /// The driver name.
        name: String,
        /// The sysfs directory that was expected.
        path: PathBuf,
    },

    /// A bind that failed after its first write, and whose undoing failed too: the function
    /// may be left without a driver, and the commands say how to give it back.
    #[error(
        "binding {address} to vfio-pci failed ({failure}), and undoing it failed too \
         ({rollback}); it is left with {}. To give it back, run as root:\n  {}",
        match driver { Some(d) => format!("driver {d}"), None => "no driver".to_string() },
        commands.join("\n  ")
    )]
    BindLeftHalfway {
        /// The function.
        address: PciAddress,
        /// What made the bind fail.
        failure: Box<DriverError>,
        /// What made the undo fail.
        rollback: Box<DriverError>,
        /// Its driver now.
        driver: Option<String>,
        /// The shell commands still needed, in order.
        commands: Vec<String>,
    },

    /// An unbind that took the function off vfio-pci (or found it left without a driver by an
    /// earlier one) but could not give it to the driver it was to have: the commands say how
    /// to finish, and `hca unbind` again finishes it from the bind record.
    #[error(
        "giving {address} back to {target} failed ({failure}); it is left with {}. To finish, \
         run as root:\n  {}\nor, once the cause is fixed, run `hca unbind {address}` again (it \
         finishes from the bind record; `--to DRIVER` names another driver)",
        match driver { Some(d) => format!("driver {d}"), None => "no driver".to_string() },
        commands.join("\n  ")
    )]
    UnbindLeftHalfway {
        /// The function.
        address: PciAddress,
        /// What it was to be given to: a driver name, or the kernel's choice.
        target: String,
        /// What failed.
        failure: Box<DriverError>,
        /// Its driver now.
        driver: Option<String>,
        /// The shell commands still needed, in order.
        commands: Vec<String>,
    },

    /// A bind that failed after its first write and was undone: the function is back with
    /// the driver (and `driver_override`) it had.
    #[error(
        "binding {address} to vfio-pci failed ({failure}); {}",
        match driver {
            Some(d) => format!("it was given back to {d}"),
            None => "it was left without a driver, as it had none before".to_string(),
        }
    )]
    BindUndone {
        /// The function.
        address: PciAddress,
        /// What made the bind fail.
        failure: Box<DriverError>,
        /// The driver it is back with (None: it had none).
        driver: Option<String>,
    },

    /// `hca bind` of a function whose driver is serving something (see
    /// [`crate::sysfs::Sysfs::bind_hazards`]).
    #[error(
        "refusing to take {address} off its driver: {}. Check the address with `hca list`; \
         if you really mean this function, stop what uses it first or pass --force",
        hazards.join("; ")
    )]
    BindRefused {
        /// The function.
        address: PciAddress,
        /// What the unbind would take down, one phrase each.
        hazards: Vec<String>,
    },

    /// The PCI ID is not an HCA function this driver knows.
    #[error(
        "{vendor:04x}:{device:04x} is not an HCA this driver knows: `hca list` shows the \
         Mellanox/NVIDIA functions and their families"
    )]
    NotAnHca {
        /// Vendor ID.
        vendor: u16,
        /// Device ID.
        device: u16,
    },

    /// An HCA of a family the driver cannot bring up yet.
    #[error(
        "{model} is an {family} device, which this driver cannot bring up yet; only mlx5 \
         (Connect-IB, ConnectX-4 and later) is supported"
    )]
    FamilyUnsupported {
        /// The family.
        family: HcaFamily,
        /// The model name from the PCI ID table.
        model: &'static str,
    },

    /// The device lacks something the driver needs.
    #[error("the device does not support {what}: {hint}")]
    DeviceUnsupported {
        /// What is missing.
        what: String,
        /// What it means for the user.
        hint: String,
    },

    /// A firmware command ran and completed with a non-zero status.
    #[error(
        "firmware command {opcode} (op_mod {op_mod:#x}) failed with status {status}, syndrome \
         {syndrome:#010x}; the syndrome identifies the firmware check that failed"
    )]
    CommandFailed {
        /// The command.
        opcode: Opcode,
        /// Its opcode modifier.
        op_mod: u16,
        /// The output status byte.
        status: CmdStatus,
        /// The output syndrome dword.
        syndrome: u32,
    },

    /// A send queue stayed in error (SQE): each SQERR2RTS meant to bring it back to RTS failed
    /// without a known reason (a timeout or a corrupt completion; for a retry, a failure
    /// status too) and QUERY_QP then found the QP still in SQE, so the command was issued
    /// again, `attempts` times in all.
    #[error(
        "the send queue of {qp} QP {qpn:#x} is still in error (SQE) after {attempts} SQERR2RTS \
         attempts (QUERY_QP found SQE after each; the last failed with: {last}); its sends are \
         flushed in software until a recovery succeeds: recover it again later, or close and \
         reopen the HCA"
    )]
    SendQueueNotRecovered {
        /// Which special QP (SMI or GSI).
        qp: String,
        /// Its hardware QP number.
        qpn: u32,
        /// SQERR2RTS commands issued.
        attempts: u32,
        /// The error of the last attempt.
        last: Box<DriverError>,
    },

    /// A special QP is in error (ERR: a receive failed or was flushed, the device reported a
    /// QP error, or QUERY_QP found it so), which no send-queue recovery undoes: SQERR2RTS
    /// brings back only a send queue stopped in SQE.
    #[error(
        "{qp} QP {qpn:#x} is in error (ERR), not in a send-queue error (SQE): SQERR2RTS cannot \
         bring it back, and its work requests complete with WR_FLUSH_ERR; close and reopen the \
         HCA to use it again"
    )]
    QpInError {
        /// Which special QP (SMI or GSI).
        qp: String,
        /// Its hardware QP number.
        qpn: u32,
    },

    /// The device could not take a firmware command off the queue (a transport error).
    #[error(
        "firmware command {opcode} was not delivered: {status}; this is a driver or device \
         bug, please report it with the log (HCA_LOG=driver=debug)"
    )]
    CommandDelivery {
        /// The command.
        opcode: Opcode,
        /// The delivery status of the queue entry.
        status: DeliveryStatus,
    },

    /// A firmware command did not complete in time.
    #[error(
        "firmware command {opcode} did not complete within {ms} ms; its queue slot stays out \
         of use until the device is closed, because the firmware may still write it"
    )]
    CommandTimeout {
        /// The command.
        opcode: Opcode,
        /// How long the driver waited.
        ms: u64,
    },

    /// A firmware command was not sent because the device is in a fatal state (the kernel
    /// fakes status 0xfe and syndrome 0xbadd00de for it).
    #[error(
        "firmware command {opcode} was not sent: the device is in a fatal state ({reason}); \
         close the HCA and reset or rebind the function"
    )]
    CommandAborted {
        /// The command.
        opcode: Opcode,
        /// Why the device is in a fatal state.
        reason: String,
    },

    /// Waiting for the device timed out (outside a firmware command).
    #[error("timed out after {ms} ms waiting for {what}")]
    DeviceTimeout {
        /// What was awaited.
        what: String,
        /// How long the driver waited.
        ms: u64,
    },

    /// The device wrote a value the driver cannot accept (a CQE, an EQE, a command output or
    /// a register). Nothing the device writes is trusted.
    #[error("the device wrote an invalid {what}: {detail}")]
    BadDeviceValue {
        /// Which structure or register.
        what: &'static str,
        /// What is wrong with it.
        detail: String,
    },

    /// The device is in a fatal state (health check, removal, or an untrustworthy value).
    #[error(
        "the device is in a fatal state ({reason}); close the HCA and reset or rebind the \
         function before using it again"
    )]
    DeviceFatal {
        /// What was seen.
        reason: String,
    },

    /// The function still holds state of an earlier session that could not be undone (it
    /// ended fatal, TEARDOWN_HCA failed, pages were not reclaimed or command slots were
    /// lost), and the backend cannot reset it: bringing it up again would let the firmware
    /// use memory the new session hands out for something else.
    #[error(
        "{device} needs a function reset before it is brought up again: {reason}; it offers \
         no reset through this backend, so unbind it from vfio-pci and bind it again, or \
         reset it (echo 1 > /sys/bus/pci/devices/<address>/reset), then open it anew"
    )]
    NeedsReset {
        /// The device string.
        device: String,
        /// What the earlier session left behind.
        reason: String,
    },

    /// The HCA was closed.
    #[error("the HCA was closed; open it again to use it")]
    Closed,

    /// A firmware command layout rejected a value or a buffer.
    #[error("firmware command layout: {0}")]
    Layout(#[from] firmware_cmds::Error),

    /// After a bind or unbind, the function ended up with another driver than intended.
    #[error(
        "{address} should now be bound to {} but {}; see `dmesg` for the driver's reason",
        expected.as_deref().unwrap_or("no driver"),
        match actual { Some(d) => format!("its driver is {d}"), None => "it has no driver".to_string() }
    )]
    BindFailed {
        /// The function.
        address: PciAddress,
        /// The driver it should have (None: unbound).
        expected: Option<String>,
        /// The driver it has.
        actual: Option<String>,
    },
}

/// The text of [`DriverError::GroupNotViable`]: every other member and its driver.
fn group_not_viable_message(group: u32, address: PciAddress, others: &[GroupMember]) -> String {
    let mut s = format!(
        "IOMMU group {group} of {address} is not viable: every device in an IOMMU group must be \
         bound to vfio-pci (or have no driver) before VFIO can use any of them. Other devices in \
         group {group}:"
    );
    if others.is_empty() {
        s.push_str(" (none listed in sysfs)");
    }
    for m in others {
        let _ = write!(
            s,
            "\n  {}  driver: {}{}",
            m.name,
            m.driver.as_deref().unwrap_or("(none)"),
            if m.blocks {
                "  <- keeps the group from being viable"
            } else {
                ""
            }
        );
    }
    let _ = write!(
        s,
        "\nBind the others too (`hca bind BDF` for each; `hca bind --force BDF` for a function that is not an HCA) or unbind them from their drivers (`echo BDF > /sys/bus/pci/devices/BDF/driver/unbind`), then try again."
    );
    s
}

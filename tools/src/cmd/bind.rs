//! `hca bind BDF`: give a PCI function to vfio-pci, remembering its driver.

use driver::sysfs::is_vfio_driver;
use driver::{DriverError, PciAddress};

use super::{CmdResult, Context};

/// Long help of `hca bind`.
pub const HELP: &str = "\
Writes sysfs, so it needs root. The function is taken from its driver through its
driver_override (only this function, unlike vfio-pci's new_id), and the previous driver and
driver_override (an admin's `none` or `pci-stub`) are recorded under --state-dir so that
`hca unbind` gives them back; a bind that fails gives them back at once.

Every device of the function's IOMMU group must be on vfio-pci (or have no driver) before
VFIO will open any of them; bind warns about the others.

Bind refuses, unless --force, a function that is not in the HCA table (`hca list` shows the
known ones), one with a network interface that is up (net/IF), and one with an RDMA device
(infiniband/NAME, i.e. the kernel's mlx5_ib or mlx4_ib has it): taking it off its driver
would take those down, and a mistyped address could be a boot disk or the NIC of your ssh
session. The error says what it found. Bring the interface down or unload the RDMA driver
(`modprobe -r mlx5_ib`) first, or pass --force if you mean it.

A physical function with SR-IOV VFs enabled is refused before anything is written (vfio-pci
would refuse it only after its driver, and with it the VFs and their VMs, is gone): disable
the VFs first with `echo 0 > /sys/bus/pci/devices/BDF/sriov_numvfs`.

Needs: the vfio-pci module (`modprobe vfio-pci`) and the IOMMU on (intel_iommu=on on Intel).
To use the device without root afterwards: `sudo chown $USER /dev/vfio/GROUP`.

Examples:
  sudo hca bind 0000:03:00.0
  sudo hca bind 03:00.0          (domain 0000)
  sudo hca bind --force 0000:03:00.0   (even though mlx5_ib has it as mlx5_0)";

/// Arguments of `hca bind`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The function: DDDD:BB:DD.F or BB:DD.F.
    #[arg(value_name = "BDF")]
    pub address: String,

    /// Bind even a function that is not a known HCA, has a network interface up or an RDMA
    /// device registered (what it would take down is lost until `hca unbind`).
    #[arg(long)]
    pub force: bool,
}

/// Bind, record the previous driver, and point at what else the IOMMU group needs.
pub fn run(ctx: &Context, args: &Args) -> CmdResult {
    let address: PciAddress = args.address.parse()?;
    if !args.force {
        let hazards = ctx.sysfs.bind_hazards(address)?;
        if !hazards.is_empty() {
            return Err(DriverError::BindRefused { address, hazards }.into());
        }
    }
    let binding = ctx.sysfs.bind_vfio(address)?;
    let group = binding.iommu_group;
    if binding.already_bound {
        println!("{address} is already bound to vfio-pci (IOMMU group {group}: /dev/vfio/{group})");
    } else {
        println!(
            "{address}: bound to vfio-pci (was {}); IOMMU group {group}: /dev/vfio/{group}",
            binding
                .previous_driver
                .as_deref()
                .unwrap_or("without a driver")
        );
        let saved = ctx.state.save(
            address,
            binding.previous_driver.as_deref(),
            binding.previous_override.as_deref(),
        );
        match saved {
            Ok(path) => tracing::debug!(path = %path.display(), "recorded the previous driver"),
            Err(e) => eprintln!(
                "warning: could not record the previous driver ({e}); `hca unbind {address}` will let the kernel choose one"
            ),
        }
    }
    for other in ctx.sysfs.group_others(group, address)? {
        if other.blocks {
            println!(
                "note: IOMMU group {group} also holds {} (driver {}); bind it too before opening {address}: `hca bind {}`",
                other.name,
                other.driver.as_deref().unwrap_or("-"),
                other.name
            );
        } else if !other.driver.as_deref().is_some_and(is_vfio_driver) {
            tracing::debug!(device = %other.name, driver = ?other.driver, "group member that does not block");
        }
    }
    Ok(())
}

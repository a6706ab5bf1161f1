//! `hca bind BDF`: give a PCI function to vfio-pci, remembering its driver.

use driver::sysfs::{Binding, GiveBack, Restore, is_vfio_driver};
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

/// Record what `address` had before `binding`, so that `hca unbind` gives it back; a failure
/// to record is a warning, since the bind itself is done.
///
/// A function that had no driver keeps an existing record that names one: an earlier
/// `hca unbind` took it off vfio-pci and failed to give it back, and the record is all that
/// still knows where it belongs.
fn record(ctx: &Context, address: PciAddress, binding: &Binding) {
    if binding.previous_driver.is_none() {
        match ctx.state.load(address) {
            Ok(Some(GiveBack {
                restore: Restore::Driver(earlier),
                ..
            })) => {
                let _ = outln!(
                    "note: kept the record that {address} had driver {earlier} (an earlier \
                     unbind stopped halfway); `hca unbind {address}` gives it back to {earlier}"
                );
                return;
            }
            Ok(_) => {}
            Err(e) => tracing::debug!(error = %e, "unreadable earlier bind record: overwritten"),
        }
    }
    let saved = ctx.state.save(
        address,
        binding.previous_driver.as_deref(),
        binding.previous_override.as_deref(),
    );
    match saved {
        Ok(path) => tracing::debug!(path = %path.display(), "recorded the previous driver"),
        Err(e) => errln!(
            "warning: could not record the previous driver ({e}); `hca unbind {address}` will let the kernel choose one"
        ),
    }
}

/// What to do about `name`, a member of IOMMU group `group` whose driver keeps the group from
/// being viable: `hca bind NAME` when that would go through, else (it would be refused as not
/// an HCA, or for what it would take down) taking it off its driver or `hca bind --force NAME`.
fn blocker_advice(ctx: &Context, group: u32, address: PciAddress, name: &str) -> String {
    let Ok(other) = name.parse::<PciAddress>() else {
        // Not a PCI function (a platform device): only its driver can let it go.
        let unbind = ctx
            .sysfs
            .root()
            .join("kernel/iommu_groups")
            .join(group.to_string())
            .join("devices")
            .join(name)
            .join("driver/unbind");
        return format!(
            "take it off its driver before opening {address}: `echo {name} > {}`",
            unbind.display()
        );
    };
    let hazards = ctx
        .sysfs
        .bind_hazards(other)
        .unwrap_or_else(|e| vec![e.to_string()]);
    if hazards.is_empty() {
        return format!("bind it too before opening {address}: `hca bind {name}`");
    }
    let unbind = ctx.sysfs.devices_dir().join(name).join("driver/unbind");
    format!(
        "`hca bind {name}` would refuse it ({}): take it off its driver (`echo {name} > {}`) \
         or, if you mean it, `hca bind --force {name}`",
        hazards.join("; "),
        unbind.display()
    )
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
        let _ = outln!(
            "{address} is already bound to vfio-pci (IOMMU group {group}: /dev/vfio/{group})"
        );
    } else {
        let _ = outln!(
            "{address}: bound to vfio-pci (was {}); IOMMU group {group}: /dev/vfio/{group}",
            binding
                .previous_driver
                .as_deref()
                .unwrap_or("without a driver")
        );
        record(ctx, address, &binding);
    }
    // The bind is done: a group that cannot be listed is only a missing hint.
    let others = match ctx.sysfs.group_others(group, address) {
        Ok(others) => others,
        Err(e) => {
            errln!(
                "warning: cannot list the other devices of IOMMU group {group} ({e}); check \
                 /sys/kernel/iommu_groups/{group}/devices before opening {address}"
            );
            Vec::new()
        }
    };
    for other in others {
        if other.blocks {
            let _ = outln!(
                "note: IOMMU group {group} also holds {} (driver {}); {}",
                other.name,
                other.driver.as_deref().unwrap_or("-"),
                blocker_advice(ctx, group, address, &other.name)
            );
        } else if !other.driver.as_deref().is_some_and(is_vfio_driver) {
            tracing::debug!(device = %other.name, driver = ?other.driver, "group member that does not block");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::io;
    use std::os::unix::fs::symlink;
    use std::path::{Path, PathBuf};
    use std::sync::Arc;

    use driver::sysfs::{Sysfs, SysfsWriter};

    use super::*;
    use crate::state::BindRecords;

    const BDF: &str = "0000:03:00.0";

    /// The kernel's part of a bind that works: a probe binds vfio-pci.
    struct ProbeBindsVfio {
        root: PathBuf,
    }

    impl SysfsWriter for ProbeBindsVfio {
        fn write(&self, path: &Path, value: &str) -> io::Result<()> {
            if path == self.root.join("bus/pci/drivers_probe") {
                let dev = self.root.join("bus/pci/devices").join(value);
                symlink("../../../../bus/pci/drivers/vfio-pci", dev.join("driver"))?;
            }
            Ok(())
        }
    }

    /// A tree with a ConnectX-5 PF at [`BDF`], without a driver, alone in IOMMU group 17.
    fn context(root: &Path) -> Context {
        let dev = root.join("bus/pci/devices").join(BDF);
        fs::create_dir_all(&dev).unwrap();
        fs::create_dir_all(root.join("bus/pci/drivers/vfio-pci")).unwrap();
        let group = root.join("kernel/iommu_groups/17/devices");
        fs::create_dir_all(&group).unwrap();
        for (attr, value) in [
            ("vendor", "0x15b3\n"),
            ("device", "0x1017\n"),
            ("numa_node", "0\n"),
            ("driver_override", "(null)\n"),
        ] {
            fs::write(dev.join(attr), value).unwrap();
        }
        symlink(
            "../../../../kernel/iommu_groups/17",
            dev.join("iommu_group"),
        )
        .unwrap();
        symlink(
            format!("../../../../bus/pci/devices/{BDF}"),
            group.join(BDF),
        )
        .unwrap();
        let writer = Arc::new(ProbeBindsVfio {
            root: root.to_owned(),
        });
        Context {
            sysfs: Sysfs::with_writer(root, writer),
            dev_root: root.join("dev"),
            state: BindRecords::new(root.join("state")),
        }
    }

    fn bind(ctx: &Context) {
        let args = Args {
            address: BDF.into(),
            force: false,
        };
        run(ctx, &args).unwrap();
    }

    #[test]
    fn a_driverless_function_keeps_the_record_of_an_unbind_left_halfway() {
        let t = tempfile::tempdir().unwrap();
        let ctx = context(t.path());
        let record = t.path().join("state").join(format!("{BDF}.driver"));
        fs::create_dir_all(record.parent().unwrap()).unwrap();
        fs::write(&record, "driver=mlx5_core\noverride=none\n").unwrap();
        bind(&ctx);
        assert_eq!(
            fs::read_to_string(&record).unwrap(),
            "driver=mlx5_core\noverride=none\n"
        );
    }

    #[test]
    fn a_driverless_function_without_a_record_is_recorded_as_such() {
        let t = tempfile::tempdir().unwrap();
        let ctx = context(t.path());
        bind(&ctx);
        let record = t.path().join("state").join(format!("{BDF}.driver"));
        assert_eq!(fs::read_to_string(&record).unwrap(), "driver=\n");
    }
}

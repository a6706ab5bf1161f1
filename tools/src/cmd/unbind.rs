//! `hca unbind BDF`: take a function off vfio-pci and give it back to its previous driver.

use driver::PciAddress;
use driver::sysfs::{GiveBack, Restore, is_vfio_driver};

use super::{CmdResult, Context};

/// Long help of `hca unbind`.
pub const HELP: &str = "\
Writes sysfs, so it needs root. Writes back the function's driver_override as `hca bind`
found it (or clears it), unbinds it from vfio-pci and binds it to the driver `hca bind`
recorded (or, with no record, lets the kernel choose). An override that would refuse that
driver (`none`) is cleared for the bind and written back after it.

The unbind waits while a program still has the device open: vfio-pci asks that program to
let go through its REQ interrupt (unbind says so on stderr before it writes).

The driver to give it to (--to, or the recorded one) must be loaded: when
/sys/bus/pci/drivers/NAME is missing, unbind writes nothing and says `modprobe NAME`.

When the function is off vfio-pci but its driver does not take it back (the bind is refused,
or the driver's probe fails), unbind says so and prints the command that finishes it; the
bind record is kept, and running `hca unbind` again (or `hca unbind --to DRIVER`) on the
function, which has no driver now, finishes the job.

Examples:
  sudo hca unbind 0000:03:00.0
  sudo hca unbind 0000:03:00.0 --to mlx5_core
  sudo hca unbind 0000:03:00.0 --leave-unbound";

/// Arguments of `hca unbind`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The function: DDDD:BB:DD.F or BB:DD.F.
    #[arg(value_name = "BDF")]
    pub address: String,

    /// Bind it to this driver instead of the recorded one (a loaded driver's name, as in
    /// /sys/bus/pci/drivers).
    #[arg(long, value_name = "DRIVER", conflicts_with = "leave_unbound")]
    pub to: Option<String>,

    /// Leave it without a driver.
    #[arg(long)]
    pub leave_unbound: bool,
}

/// Say, before the unbind, that it may block: the kernel's vfio-pci remove waits,
/// uninterruptibly, until every holder of the device has closed it, and asks them to through
/// the device's REQ interrupt. Whether a program holds it is not known here (the group node,
/// or only a device fd taken from it), so the note is given whenever there is an unbind to
/// write.
fn warn_of_the_wait(ctx: &Context, address: PciAddress) {
    let on_vfio = ctx
        .sysfs
        .driver(address)
        .is_ok_and(|d| d.as_deref().is_some_and(is_vfio_driver));
    if !on_vfio {
        return;
    }
    let node = match ctx.sysfs.iommu_group(address) {
        Ok(Some(group)) => ctx.dev_root.join("vfio").join(group.to_string()),
        _ => ctx.dev_root.join("vfio/GROUP"),
    };
    errln!(
        "{address}: unbinding from vfio-pci; if a program holds {}, unbind waits for it to \
         close it (vfio-pci has asked it to through its REQ interrupt)",
        node.display()
    );
}

/// Unbind and restore.
pub fn run(ctx: &Context, args: &Args) -> CmdResult {
    let address: PciAddress = args.address.parse()?;
    let record = match ctx.state.load(address) {
        Ok(r) => r,
        Err(e) => {
            errln!("warning: cannot read the bind record of {address}: {e}");
            None
        }
    };
    // The recorded override goes back whatever the driver: it is the admin's, not ours.
    let driver_override = record.as_ref().and_then(|r| r.driver_override.clone());
    // A function with no driver is ours to finish (an earlier unbind took it off vfio-pci and
    // failed to bind it) when we recorded it, or when the user names the driver.
    let finish_driverless = record.is_some() || args.to.is_some();
    let restore = if let Some(name) = &args.to {
        Restore::Driver(name.clone())
    } else if args.leave_unbound {
        Restore::Unbound
    } else if let Some(r) = record {
        r.restore
    } else {
        let _ = outln!("no record of {address}'s previous driver; letting the kernel choose one");
        Restore::KernelChoice
    };
    let to = GiveBack {
        restore,
        driver_override,
        finish_driverless,
    };
    warn_of_the_wait(ctx, address);
    let done = ctx.sysfs.give_back(address, &to)?;
    if done.finished {
        if let Err(e) = ctx.state.remove(address) {
            errln!("warning: could not remove the bind record of {address}: {e}");
        }
        let _ = outln!(
            "{address} had no driver (an earlier unbind stopped halfway); driver now {}",
            done.driver.as_deref().unwrap_or("none")
        );
        return Ok(());
    }
    if !done.was_vfio {
        let _ = outln!(
            "{address} is not bound to vfio-pci (driver: {}); nothing to do",
            done.driver.as_deref().unwrap_or("none")
        );
        return Ok(());
    }
    if let Err(e) = ctx.state.remove(address) {
        errln!("warning: could not remove the bind record of {address}: {e}");
    }
    let _ = outln!(
        "{address}: unbound from vfio-pci; driver now {}",
        done.driver.as_deref().unwrap_or("none")
    );
    Ok(())
}

//! `hca list`: the Mellanox/NVIDIA (and Topspin) PCI functions with their family, model,
//! driver, IOMMU group and NUMA node.

use driver::pci::{VENDOR_MELLANOX, VENDOR_TOPSPIN};

use super::{CmdResult, Context, print_table};

/// Long help of `hca list`.
pub const HELP: &str = "\
Reads sysfs only; needs no privileges and changes nothing.

Columns: PCI address, vendor:device ID, family (mthca, mlx4, mlx5; `-` for a function the
device table does not know), model, PF or VF, the driver bound now, the IOMMU group
(/dev/vfio/N once bound to vfio-pci; `-` when the IOMMU is off) and the NUMA node.

Examples:
  hca list
  hca list --sysfs-root /tmp/sys-copy";

/// Arguments of `hca list` (none besides the global options).
#[derive(Debug, clap::Args)]
pub struct Args {}

/// Print the table, or say plainly that there is nothing to list.
pub fn run(ctx: &Context, _args: &Args) -> CmdResult {
    let functions = ctx.sysfs.list_hcas()?;
    if functions.is_empty() {
        outln!(
            "no Mellanox/NVIDIA HCA found (vendor {VENDOR_MELLANOX:#06x} or {VENDOR_TOPSPIN:#06x}) under {}",
            ctx.sysfs.devices_dir().display()
        )?;
        return Ok(());
    }
    let dash = || "-".to_string();
    let mut rows = vec![
        [
            "ADDRESS", "ID", "FAMILY", "MODEL", "KIND", "DRIVER", "GROUP", "NUMA",
        ]
        .map(String::from)
        .to_vec(),
    ];
    for f in &functions {
        rows.push(vec![
            f.address.to_string(),
            format!("{:04x}:{:04x}", f.id.vendor, f.id.device),
            f.known.map_or_else(dash, |k| k.family.to_string()),
            f.known.map_or_else(
                || "(not in the device table)".to_string(),
                |k| k.model.to_string(),
            ),
            f.known.map_or_else(dash, |k| k.kind.to_string()),
            f.driver.clone().unwrap_or_else(|| "(none)".to_string()),
            f.iommu_group.map_or_else(dash, |g| g.to_string()),
            f.numa_node.map_or_else(dash, |n| n.to_string()),
        ]);
    }
    print_table(&rows)?;
    Ok(())
}

//! `hca info DEVICE`: open any device string and show what the backend reports.

use driver::backend::{IrqIndex, region};
use driver::{DeviceBackend, DriverError, OpenOptions, pci};

use super::{CmdResult, Context, human_size, print_table};

/// Long help of `hca info`.
pub const HELP: &str = "\
Opens the device exactly as the driver does (through VFIO for vfio:..., through the simulator
for sim) and prints its PCI ID and family, its regions (BARs and config space) with sizes,
flags and the areas that may be mapped, its interrupt indexes, whether it can be reset, and
the IOVA ranges its IOMMU accepts. Nothing is written to the device.

A vfio: device must be bound to vfio-pci first (`hca bind`), and /dev/vfio/GROUP must be
accessible (root, or chown it to your user).

Examples:
  hca info vfio:0000:03:00.0
  hca info sim
  hca info sim:model=edu";

/// Arguments of `hca info`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The device string: vfio:DDDD:BB:DD.F, sim, or sim:KEY=VALUE,...
    #[arg(value_name = "DEVICE")]
    pub device: String,
}

fn region_name(index: u32) -> String {
    match index {
        0..=5 => format!("BAR{index}"),
        region::ROM => "ROM".into(),
        region::CONFIG => "config".into(),
        8 => "VGA".into(),
        n => format!("region {n}"),
    }
}

fn irq_name(index: IrqIndex) -> &'static str {
    match index {
        IrqIndex::Intx => "INTx",
        IrqIndex::Msi => "MSI",
        IrqIndex::Msix => "MSI-X",
        IrqIndex::Err => "ERR",
        IrqIndex::Req => "REQ",
    }
}

/// Open and describe.
pub fn run(ctx: &Context, args: &Args) -> CmdResult {
    let options = OpenOptions {
        sysfs: ctx.sysfs.clone(),
        dev_root: ctx.dev_root.clone(),
    };
    let dev = driver::open_with(&args.device, &options)?;
    describe(dev.as_ref())
}

fn describe(dev: &dyn DeviceBackend) -> CmdResult {
    let id = dev.pci_id();
    let mut facts: Vec<Vec<String>> = vec![
        vec!["device".into(), dev.describe()],
        vec![
            "PCI ID".into(),
            format!("{:04x}:{:04x}", id.vendor, id.device),
        ],
        vec![
            "family".into(),
            pci::lookup(id).map_or_else(
                || "not a known HCA".to_string(),
                |k| format!("{} ({}, {})", k.family, k.model, k.kind),
            ),
        ],
        vec![
            "reset".into(),
            match dev.reset_supported() {
                Some(true) => "supported".into(),
                Some(false) => "not supported".into(),
                None => "unknown".into(),
            },
        ],
    ];
    for (label, value) in dev.facts() {
        facts.push(vec![label.to_string(), value]);
    }
    print_table(&facts);

    println!("\nregions:");
    let mut rows = vec![
        ["  INDEX", "NAME", "SIZE", "FLAGS", "MAPPABLE"]
            .map(String::from)
            .to_vec(),
    ];
    for index in 0..=8 {
        let info = match dev.region_info(index) {
            Ok(i) => i,
            Err(DriverError::NoRegion { .. }) => continue,
            Err(e) => return Err(e.into()),
        };
        if info.size == 0 {
            continue;
        }
        let mut flags = String::new();
        flags.push(if info.read { 'r' } else { '-' });
        flags.push(if info.write { 'w' } else { '-' });
        if info.mmap {
            flags.push_str(" mmap");
        }
        if info.msix_mappable {
            flags.push_str(" msix-mappable");
        }
        let mappable = match (&info.sparse, info.mmap) {
            (_, false) => "-".to_string(),
            (None, true) => "all".to_string(),
            (Some(areas), true) => areas
                .iter()
                .map(|a| format!("{:#x}+{:#x}", a.offset, a.size))
                .collect::<Vec<_>>()
                .join(", "),
        };
        rows.push(vec![
            format!("  {index}"),
            region_name(index),
            format!("{:#x} ({})", info.size, human_size(info.size)),
            flags,
            mappable,
        ]);
    }
    print_table(&rows);

    println!("\ninterrupts:");
    let mut rows = vec![["  INDEX", "VECTORS", "FLAGS"].map(String::from).to_vec()];
    for index in [
        IrqIndex::Intx,
        IrqIndex::Msi,
        IrqIndex::Msix,
        IrqIndex::Err,
        IrqIndex::Req,
    ] {
        let info = dev.irq_info(index)?;
        let flags = if info.count == 0 {
            "(not available)".to_string()
        } else {
            [
                (info.eventfd, "eventfd"),
                (info.maskable, "maskable"),
                (info.automasked, "automasked"),
                (info.noresize, "noresize"),
            ]
            .iter()
            .filter(|(on, _)| *on)
            .map(|(_, name)| *name)
            .collect::<Vec<_>>()
            .join(" ")
        };
        rows.push(vec![
            format!("  {}", irq_name(index)),
            info.count.to_string(),
            flags,
        ]);
    }
    print_table(&rows);

    let mapper = dev.dma_mapper();
    println!("\nIOVA ranges ({}):", mapper.name());
    for r in mapper.iova_ranges() {
        println!("  [{:#x}, {:#x}]", r.start, r.end);
    }
    Ok(())
}

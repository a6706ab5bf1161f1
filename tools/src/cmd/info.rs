//! `hca info DEVICE`: open any device string and show what the backend reports; for an HCA
//! the driver can run, bring it up and show its firmware, capabilities and ports.

use driver::backend::{IrqIndex, region};
use driver::verbs::Hca;
use driver::{DeviceBackend, DriverError, HcaFamily, OpenOptions, pci};

use super::{CmdResult, Context, human_size, print_table};

/// Long help of `hca info`.
pub const HELP: &str = "\
Opens the device exactly as the driver does (through VFIO for vfio:..., through the simulator
for sim) and prints its PCI ID and family, its regions (BARs and config space) with sizes,
flags and the areas that may be mapped, its interrupt indexes, whether it can be reset, and
the IOVA ranges its IOMMU accepts.

When the PCI ID is an mlx5 function (ConnectX-4 and later), the driver then brings the HCA
up (firmware commands, pages, EQs, the special QPs of every port), prints the firmware
version, the capabilities that matter, each port's state, LIDs and GUID, and tears it down
again, returning every page to the firmware. With --no-bringup nothing is written to the
device.

A vfio: device must be bound to vfio-pci first (`hca bind`), and /dev/vfio/GROUP must be
accessible (root, or chown it to your user).

Examples:
  hca info vfio:0000:03:00.0
  hca info --no-bringup vfio:0000:03:00.0
  hca info sim
  hca info sim:model=mlx5,clock=virtual
  hca info sim:model=edu";

/// Arguments of `hca info`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The device string: vfio:DDDD:BB:DD.F, sim, or sim:KEY=VALUE,...
    #[arg(value_name = "DEVICE")]
    pub device: String,
    /// Only show what the backend reports; do not bring an HCA up.
    #[arg(long)]
    pub no_bringup: bool,
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
    describe(dev.as_ref())?;
    let family = pci::lookup(dev.pci_id()).map(|k| k.family);
    if args.no_bringup || family != Some(HcaFamily::Mlx5) {
        return Ok(());
    }
    let started = dev.now();
    let hca = driver::open_hca(dev.clone())?;
    let took = dev.now().saturating_sub(started);
    // Closed even when standard output fails.
    let shown = show_hca(hca.as_ref(), took);
    hca.close()?;
    Ok(shown?)
}

fn show_hca(hca: &dyn Hca, took: std::time::Duration) -> std::io::Result<()> {
    let info = hca.info();
    outln!(
        "\nHCA ({} family, brought up in {:.1} ms of device time):",
        info.family,
        took.as_secs_f64() * 1000.0
    )?;
    print_table(&[
        vec!["  model".into(), info.model.clone()],
        vec!["  firmware".into(), info.fw_version.clone()],
        vec!["  node GUID".into(), format!("{:#018x}", info.node_guid)],
        vec!["  ports".into(), info.ports.to_string()],
    ])?;
    outln!("\ncapabilities:")?;
    let rows: Vec<Vec<String>> = info
        .caps
        .iter()
        .map(|(k, v)| vec![format!("  {k}"), v.clone()])
        .collect();
    print_table(&rows)?;
    outln!("\nports:")?;
    let mut rows = vec![
        [
            "  PORT",
            "STATE",
            "PHYS",
            "LID",
            "LMC",
            "SM LID",
            "SM SL",
            "PORT GUID",
            "CAPMASK",
            "SMI",
        ]
        .map(String::from)
        .to_vec(),
    ];
    for n in 1..=info.ports {
        let Some(port) = hca.port(n) else { continue };
        match port.attrs() {
            Ok(a) => rows.push(vec![
                format!("  {n}"),
                a.state.to_string(),
                phys_state(a.phys_state),
                format!("{:#x}", a.lid),
                a.lmc.to_string(),
                format!("{:#x}", a.sm_lid),
                a.sm_sl.to_string(),
                format!("{:#018x}", a.port_guid),
                format!("{:#010x}", a.capability_mask),
                if a.has_smi { "yes" } else { "no" }.into(),
            ]),
            Err(e) => rows.push(vec![format!("  {n}"), format!("(not readable: {e})")]),
        }
    }
    print_table(&rows)
}

/// PortPhysicalState names (IBA 14.2.5.6).
fn phys_state(v: u8) -> String {
    match v {
        1 => "Sleep".into(),
        2 => "Polling".into(),
        3 => "Disabled".into(),
        4 => "Training".into(),
        5 => "LinkUp".into(),
        6 => "LinkErrorRecovery".into(),
        7 => "PhyTest".into(),
        n => format!("{n}"),
    }
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
    print_table(&facts)?;

    outln!("\nregions:")?;
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
    print_table(&rows)?;

    outln!("\ninterrupts:")?;
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
    print_table(&rows)?;

    let mapper = dev.dma_mapper();
    outln!("\nIOVA ranges ({}):", mapper.name())?;
    for r in mapper.iova_ranges() {
        outln!("  [{:#x}, {:#x}]", r.start, r.end)?;
    }
    Ok(())
}

//! PCI addresses (`DDDD:BB:DD.F`) and the table of HCA device IDs: which family drives a
//! function, what it is called, and whether it is a physical or a virtual function.
//!
//! The IDs are those of the kernel's `mthca`, `mlx4_core` and `mlx5_core` PCI tables
//! (reference `hca-hardware.md` §1.1–1.3).

use std::fmt;
use std::str::FromStr;

use crate::backend::PciId;
use crate::error::DriverError;

/// The PCI vendor ID of Mellanox (now NVIDIA networking).
pub const VENDOR_MELLANOX: u16 = 0x15b3;
/// The PCI vendor ID of Topspin, an OEM whose InfiniHost boards the mthca driver also claims.
pub const VENDOR_TOPSPIN: u16 = 0x1867;

/// The address of a PCI function: domain (segment), bus, device (slot) and function.
///
/// Parsed from `DDDD:BB:DD.F` (the form sysfs and `lspci -D` use) or `BB:DD.F` (the short form
/// `lspci` prints, meaning domain 0). Always displayed in the full sysfs form, lower-case, so
/// the display is the directory name under `/sys/bus/pci/devices` and the name VFIO expects.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PciAddress {
    /// PCI domain (segment group). Usually 0; VMD and some large machines use more than 16 bits.
    pub domain: u32,
    /// Bus number.
    pub bus: u8,
    /// Device (slot) number, 0..=0x1f.
    pub device: u8,
    /// Function number, 0..=7.
    pub function: u8,
}

/// The accepted forms of a PCI address, for error messages.
pub const PCI_ADDRESS_FORMS: &str =
    "DDDD:BB:DD.F (e.g. 0000:03:00.0) or BB:DD.F (domain 0, e.g. 03:00.0), hex digits";

fn hex_field(
    text: &str,
    name: &str,
    digits: std::ops::RangeInclusive<usize>,
) -> Result<u32, String> {
    if text.is_empty() {
        return Err(format!("the {name} is empty"));
    }
    if !digits.contains(&text.len()) {
        let want = if digits.start() == digits.end() {
            format!("{} hex digits", digits.start())
        } else {
            format!("{} to {} hex digits", digits.start(), digits.end())
        };
        return Err(format!("the {name} `{text}` must be {want}"));
    }
    if let Some(bad) = text.chars().find(|c| !c.is_ascii_hexdigit()) {
        return Err(format!(
            "the {name} `{text}` has a non-hex character `{bad}`"
        ));
    }
    u32::from_str_radix(text, 16).map_err(|e| format!("the {name} `{text}`: {e}"))
}

impl PciAddress {
    /// Parse an address, returning the precise reason on failure (without the accepted forms).
    pub fn parse_reason(text: &str) -> Result<Self, String> {
        let (front, function) = text
            .rsplit_once('.')
            .ok_or_else(|| format!("`{text}` has no `.F` function number"))?;
        let parts: Vec<&str> = front.split(':').collect();
        let (domain, bus, device) = match parts.as_slice() {
            [bus, device] => (0, *bus, *device),
            [domain, bus, device] => (hex_field(domain, "domain", 4..=8)?, *bus, *device),
            _ => {
                return Err(format!(
                    "`{text}` has {} `:`-separated parts before the `.F`; expected DDDD:BB:DD or BB:DD",
                    parts.len()
                ));
            }
        };
        let bus = hex_field(bus, "bus", 2..=2)? as u8;
        let device = hex_field(device, "device", 2..=2)?;
        if device > 0x1f {
            return Err(format!("the device number {device:#04x} is above 0x1f"));
        }
        let function = hex_field(function, "function", 1..=1)?;
        if function > 7 {
            return Err(format!("the function number {function} is above 7"));
        }
        Ok(PciAddress {
            domain,
            bus,
            device: device as u8,
            function: function as u8,
        })
    }
}

impl FromStr for PciAddress {
    type Err = DriverError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        PciAddress::parse_reason(s.trim()).map_err(|reason| DriverError::BadPciAddress {
            given: s.to_string(),
            reason,
        })
    }
}

impl fmt::Display for PciAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:04x}:{:02x}:{:02x}.{:x}",
            self.domain, self.bus, self.device, self.function
        )
    }
}

/// The driver family that runs an HCA.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HcaFamily {
    /// InfiniHost (Tavor, Arbel, Sinai): the kernel's `ib_mthca`.
    Mthca,
    /// ConnectX, ConnectX-2, ConnectX-3 (Pro): the kernel's `mlx4_core`.
    Mlx4,
    /// Connect-IB, ConnectX-4 and later, BlueField: the kernel's `mlx5_core`.
    Mlx5,
}

impl HcaFamily {
    /// The short name used in device strings and tables (`mthca`, `mlx4`, `mlx5`).
    pub fn name(self) -> &'static str {
        match self {
            HcaFamily::Mthca => "mthca",
            HcaFamily::Mlx4 => "mlx4",
            HcaFamily::Mlx5 => "mlx5",
        }
    }

    /// The kernel driver that claims this family's functions (what `hca unbind` may restore).
    pub fn kernel_driver(self) -> &'static str {
        match self {
            HcaFamily::Mthca => "ib_mthca",
            HcaFamily::Mlx4 => "mlx4_core",
            HcaFamily::Mlx5 => "mlx5_core",
        }
    }
}

impl fmt::Display for HcaFamily {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Physical or virtual (SR-IOV) function.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FunctionKind {
    /// A physical function.
    Pf,
    /// An SR-IOV virtual function (mlx4 VFs have no HCR and talk to the PF's comm channel).
    Vf,
}

impl fmt::Display for FunctionKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FunctionKind::Pf => "PF",
            FunctionKind::Vf => "VF",
        })
    }
}

/// One row of the device-ID table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KnownDevice {
    /// Vendor ID.
    pub vendor: u16,
    /// Device ID.
    pub device: u16,
    /// The family that drives it.
    pub family: HcaFamily,
    /// Marketing or chip name, as the kernel tables and pci.ids give it.
    pub model: &'static str,
    /// Physical or virtual function.
    pub kind: FunctionKind,
}

const fn dev(
    vendor: u16,
    device: u16,
    family: HcaFamily,
    model: &'static str,
    kind: FunctionKind,
) -> KnownDevice {
    KnownDevice {
        vendor,
        device,
        family,
        model,
        kind,
    }
}

use FunctionKind::{Pf, Vf};
use HcaFamily::{Mlx4, Mlx5, Mthca};

/// Every HCA function the driver knows, from the kernel's PCI tables (`hca-hardware.md` §1).
///
/// mthca devices appear under both the Mellanox and the Topspin vendor IDs, as in the kernel.
pub const KNOWN_DEVICES: &[KnownDevice] = &[
    // mthca (§1.1), Mellanox and Topspin.
    dev(
        VENDOR_MELLANOX,
        0x5a44,
        Mthca,
        "InfiniHost MT23108 (Tavor)",
        Pf,
    ),
    dev(
        VENDOR_MELLANOX,
        0x6278,
        Mthca,
        "InfiniHost III Ex MT25208 (Arbel, Tavor-compat mode)",
        Pf,
    ),
    dev(
        VENDOR_MELLANOX,
        0x6282,
        Mthca,
        "InfiniHost III Ex MT25208 (Arbel)",
        Pf,
    ),
    dev(
        VENDOR_MELLANOX,
        0x5e8c,
        Mthca,
        "InfiniHost III Lx MT25204 (Sinai, old ID)",
        Pf,
    ),
    dev(
        VENDOR_MELLANOX,
        0x6274,
        Mthca,
        "InfiniHost III Lx MT25204 (Sinai)",
        Pf,
    ),
    dev(
        VENDOR_TOPSPIN,
        0x5a44,
        Mthca,
        "InfiniHost MT23108 (Tavor)",
        Pf,
    ),
    dev(
        VENDOR_TOPSPIN,
        0x6278,
        Mthca,
        "InfiniHost III Ex MT25208 (Arbel, Tavor-compat mode)",
        Pf,
    ),
    dev(
        VENDOR_TOPSPIN,
        0x6282,
        Mthca,
        "InfiniHost III Ex MT25208 (Arbel)",
        Pf,
    ),
    dev(
        VENDOR_TOPSPIN,
        0x5e8c,
        Mthca,
        "InfiniHost III Lx MT25204 (Sinai, old ID)",
        Pf,
    ),
    dev(
        VENDOR_TOPSPIN,
        0x6274,
        Mthca,
        "InfiniHost III Lx MT25204 (Sinai)",
        Pf,
    ),
    // mlx4 (§1.2).
    dev(
        VENDOR_MELLANOX,
        0x6340,
        Mlx4,
        "ConnectX MT25408 \"Hermon\" SDR",
        Pf,
    ),
    dev(
        VENDOR_MELLANOX,
        0x634a,
        Mlx4,
        "ConnectX MT25408 \"Hermon\" DDR",
        Pf,
    ),
    dev(
        VENDOR_MELLANOX,
        0x6354,
        Mlx4,
        "ConnectX MT25408 \"Hermon\" QDR",
        Pf,
    ),
    dev(
        VENDOR_MELLANOX,
        0x6732,
        Mlx4,
        "ConnectX MT25408 \"Hermon\" DDR PCIe gen2",
        Pf,
    ),
    dev(
        VENDOR_MELLANOX,
        0x673c,
        Mlx4,
        "ConnectX MT25408 \"Hermon\" QDR PCIe gen2",
        Pf,
    ),
    dev(
        VENDOR_MELLANOX,
        0x6368,
        Mlx4,
        "ConnectX EN MT25408 \"Hermon\" 10GigE",
        Pf,
    ),
    dev(
        VENDOR_MELLANOX,
        0x6750,
        Mlx4,
        "ConnectX EN MT25408 \"Hermon\" 10GigE PCIe gen2",
        Pf,
    ),
    dev(
        VENDOR_MELLANOX,
        0x6372,
        Mlx4,
        "ConnectX EN MT25458 10GBASE-T",
        Pf,
    ),
    dev(
        VENDOR_MELLANOX,
        0x675a,
        Mlx4,
        "ConnectX EN MT25458 10GBASE-T PCIe gen2",
        Pf,
    ),
    dev(
        VENDOR_MELLANOX,
        0x6764,
        Mlx4,
        "ConnectX EN MT26468 10GigE PCIe gen2",
        Pf,
    ),
    dev(
        VENDOR_MELLANOX,
        0x6746,
        Mlx4,
        "ConnectX EN MT26438 40GigE PCIe gen2",
        Pf,
    ),
    dev(
        VENDOR_MELLANOX,
        0x676e,
        Mlx4,
        "ConnectX-2 EN MT26478 40GigE PCIe gen2",
        Pf,
    ),
    dev(
        VENDOR_MELLANOX,
        0x1002,
        Mlx4,
        "ConnectX-2 MT25400 Virtual Function",
        Vf,
    ),
    dev(VENDOR_MELLANOX, 0x1003, Mlx4, "ConnectX-3 MT27500", Pf),
    dev(
        VENDOR_MELLANOX,
        0x1004,
        Mlx4,
        "ConnectX-3 / ConnectX-3 Pro Virtual Function",
        Vf,
    ),
    dev(VENDOR_MELLANOX, 0x1005, Mlx4, "MT27510 family", Pf),
    dev(VENDOR_MELLANOX, 0x1006, Mlx4, "MT27511 family", Pf),
    dev(VENDOR_MELLANOX, 0x1007, Mlx4, "ConnectX-3 Pro MT27520", Pf),
    dev(VENDOR_MELLANOX, 0x1008, Mlx4, "MT27521 family", Pf),
    dev(VENDOR_MELLANOX, 0x1009, Mlx4, "MT27530 family", Pf),
    dev(VENDOR_MELLANOX, 0x100a, Mlx4, "MT27531 family", Pf),
    dev(VENDOR_MELLANOX, 0x100b, Mlx4, "MT27540 family", Pf),
    dev(VENDOR_MELLANOX, 0x100c, Mlx4, "MT27541 family", Pf),
    dev(VENDOR_MELLANOX, 0x100d, Mlx4, "MT27550 family", Pf),
    dev(VENDOR_MELLANOX, 0x100e, Mlx4, "MT27551 family", Pf),
    dev(VENDOR_MELLANOX, 0x100f, Mlx4, "MT27560 family", Pf),
    dev(VENDOR_MELLANOX, 0x1010, Mlx4, "MT27561 family", Pf),
    // mlx5 (§1.3).
    dev(VENDOR_MELLANOX, 0x1011, Mlx5, "Connect-IB", Pf),
    dev(VENDOR_MELLANOX, 0x1012, Mlx5, "Connect-IB VF", Vf),
    dev(VENDOR_MELLANOX, 0x1013, Mlx5, "ConnectX-4", Pf),
    dev(VENDOR_MELLANOX, 0x1014, Mlx5, "ConnectX-4 VF", Vf),
    dev(VENDOR_MELLANOX, 0x1015, Mlx5, "ConnectX-4 Lx", Pf),
    dev(VENDOR_MELLANOX, 0x1016, Mlx5, "ConnectX-4 Lx VF", Vf),
    dev(VENDOR_MELLANOX, 0x1017, Mlx5, "ConnectX-5", Pf),
    dev(VENDOR_MELLANOX, 0x1018, Mlx5, "ConnectX-5 VF", Vf),
    dev(VENDOR_MELLANOX, 0x1019, Mlx5, "ConnectX-5 Ex", Pf),
    dev(VENDOR_MELLANOX, 0x101a, Mlx5, "ConnectX-5 Ex VF", Vf),
    dev(VENDOR_MELLANOX, 0x101b, Mlx5, "ConnectX-6", Pf),
    dev(VENDOR_MELLANOX, 0x101c, Mlx5, "ConnectX-6 VF", Vf),
    dev(VENDOR_MELLANOX, 0x101d, Mlx5, "ConnectX-6 Dx", Pf),
    dev(
        VENDOR_MELLANOX,
        0x101e,
        Mlx5,
        "ConnectX family mlx5Gen Virtual Function",
        Vf,
    ),
    dev(VENDOR_MELLANOX, 0x101f, Mlx5, "ConnectX-6 Lx", Pf),
    dev(VENDOR_MELLANOX, 0x1021, Mlx5, "ConnectX-7", Pf),
    dev(VENDOR_MELLANOX, 0x1023, Mlx5, "ConnectX-8", Pf),
    dev(VENDOR_MELLANOX, 0x1025, Mlx5, "ConnectX-9", Pf),
    dev(VENDOR_MELLANOX, 0x1027, Mlx5, "ConnectX-10", Pf),
    dev(VENDOR_MELLANOX, 0x2101, Mlx5, "ConnectX-10 NVLink-C2C", Pf),
    dev(
        VENDOR_MELLANOX,
        0xa2d2,
        Mlx5,
        "BlueField integrated ConnectX-5",
        Pf,
    ),
    dev(VENDOR_MELLANOX, 0xa2d3, Mlx5, "BlueField VF", Vf),
    dev(
        VENDOR_MELLANOX,
        0xa2d6,
        Mlx5,
        "BlueField-2 integrated ConnectX-6 Dx",
        Pf,
    ),
    dev(
        VENDOR_MELLANOX,
        0xa2dc,
        Mlx5,
        "BlueField-3 integrated ConnectX-7",
        Pf,
    ),
    dev(
        VENDOR_MELLANOX,
        0xa2df,
        Mlx5,
        "BlueField-4 integrated ConnectX-8",
        Pf,
    ),
];

/// The table row for `id`, if it is an HCA function the driver knows.
pub fn lookup(id: PciId) -> Option<&'static KnownDevice> {
    KNOWN_DEVICES
        .iter()
        .find(|d| d.vendor == id.vendor && d.device == id.device)
}

/// True for the vendors whose functions `hca list` shows (Mellanox, and Topspin for mthca).
pub fn is_hca_vendor(vendor: u16) -> bool {
    vendor == VENDOR_MELLANOX || vendor == VENDOR_TOPSPIN
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::collections::HashSet;

    fn addr(s: &str) -> PciAddress {
        s.parse().unwrap()
    }

    #[test]
    fn parses_full_and_short_forms() {
        assert_eq!(
            addr("0000:03:00.0"),
            PciAddress {
                domain: 0,
                bus: 3,
                device: 0,
                function: 0
            }
        );
        assert_eq!(addr("03:00.0"), addr("0000:03:00.0"));
        assert_eq!(
            addr("ABCD:Ef:1f.7"),
            PciAddress {
                domain: 0xabcd,
                bus: 0xef,
                device: 0x1f,
                function: 7
            }
        );
        // VMD domains have five hex digits.
        assert_eq!(addr("10000:e1:00.0").domain, 0x10000);
    }

    #[test]
    fn displays_the_sysfs_form() {
        assert_eq!(addr("3b:00.1").to_string(), "0000:3b:00.1");
        assert_eq!(addr("ABCD:EF:1F.7").to_string(), "abcd:ef:1f.7");
        assert_eq!(addr("10000:e1:00.0").to_string(), "10000:e1:00.0");
    }

    #[test]
    fn names_the_wrong_part() {
        let cases = [
            ("0000:03:00", "no `.F` function number"),
            ("0000:3:00.0", "the bus `3` must be 2 hex digits"),
            ("0000:03:0.0", "the device `0` must be 2 hex digits"),
            ("0000:03:20.0", "device number 0x20 is above 0x1f"),
            ("0000:03:00.8", "function number 8 is above 7"),
            ("0000:03:00.10", "the function `10` must be 1 hex digits"),
            ("00:0000:03:00.0", "4 `:`-separated parts"),
            ("000:03:00.0", "the domain `000` must be 4 to 8 hex digits"),
            ("0000:0g:00.0", "non-hex character `g`"),
            ("0000::00.0", "the bus is empty"),
        ];
        for (text, want) in cases {
            let err = text.parse::<PciAddress>().unwrap_err().to_string();
            assert!(err.contains(want), "{text}: {err}");
            assert!(err.contains("DDDD:BB:DD.F"), "{text}: {err}");
        }
    }

    /// Golden table written out from hca-hardware.md §1 (not from `KNOWN_DEVICES`).
    const GOLDEN: &[(u16, u16, &str, bool)] = &[
        (0x15b3, 0x5a44, "mthca", false),
        (0x15b3, 0x6278, "mthca", false),
        (0x15b3, 0x6282, "mthca", false),
        (0x15b3, 0x5e8c, "mthca", false),
        (0x15b3, 0x6274, "mthca", false),
        (0x1867, 0x5a44, "mthca", false),
        (0x1867, 0x6278, "mthca", false),
        (0x1867, 0x6282, "mthca", false),
        (0x1867, 0x5e8c, "mthca", false),
        (0x1867, 0x6274, "mthca", false),
        (0x15b3, 0x6340, "mlx4", false),
        (0x15b3, 0x634a, "mlx4", false),
        (0x15b3, 0x6354, "mlx4", false),
        (0x15b3, 0x6732, "mlx4", false),
        (0x15b3, 0x673c, "mlx4", false),
        (0x15b3, 0x6368, "mlx4", false),
        (0x15b3, 0x6750, "mlx4", false),
        (0x15b3, 0x6372, "mlx4", false),
        (0x15b3, 0x675a, "mlx4", false),
        (0x15b3, 0x6764, "mlx4", false),
        (0x15b3, 0x6746, "mlx4", false),
        (0x15b3, 0x676e, "mlx4", false),
        (0x15b3, 0x1002, "mlx4", true),
        (0x15b3, 0x1003, "mlx4", false),
        (0x15b3, 0x1004, "mlx4", true),
        (0x15b3, 0x1005, "mlx4", false),
        (0x15b3, 0x1006, "mlx4", false),
        (0x15b3, 0x1007, "mlx4", false),
        (0x15b3, 0x1008, "mlx4", false),
        (0x15b3, 0x1009, "mlx4", false),
        (0x15b3, 0x100a, "mlx4", false),
        (0x15b3, 0x100b, "mlx4", false),
        (0x15b3, 0x100c, "mlx4", false),
        (0x15b3, 0x100d, "mlx4", false),
        (0x15b3, 0x100e, "mlx4", false),
        (0x15b3, 0x100f, "mlx4", false),
        (0x15b3, 0x1010, "mlx4", false),
        (0x15b3, 0x1011, "mlx5", false),
        (0x15b3, 0x1012, "mlx5", true),
        (0x15b3, 0x1013, "mlx5", false),
        (0x15b3, 0x1014, "mlx5", true),
        (0x15b3, 0x1015, "mlx5", false),
        (0x15b3, 0x1016, "mlx5", true),
        (0x15b3, 0x1017, "mlx5", false),
        (0x15b3, 0x1018, "mlx5", true),
        (0x15b3, 0x1019, "mlx5", false),
        (0x15b3, 0x101a, "mlx5", true),
        (0x15b3, 0x101b, "mlx5", false),
        (0x15b3, 0x101c, "mlx5", true),
        (0x15b3, 0x101d, "mlx5", false),
        (0x15b3, 0x101e, "mlx5", true),
        (0x15b3, 0x101f, "mlx5", false),
        (0x15b3, 0x1021, "mlx5", false),
        (0x15b3, 0x1023, "mlx5", false),
        (0x15b3, 0x1025, "mlx5", false),
        (0x15b3, 0x1027, "mlx5", false),
        (0x15b3, 0x2101, "mlx5", false),
        (0x15b3, 0xa2d2, "mlx5", false),
        (0x15b3, 0xa2d3, "mlx5", true),
        (0x15b3, 0xa2d6, "mlx5", false),
        (0x15b3, 0xa2dc, "mlx5", false),
        (0x15b3, 0xa2df, "mlx5", false),
    ];

    /// The golden rows, for the sysfs tests that build one fake function per known ID.
    pub(crate) fn golden() -> &'static [(u16, u16, &'static str, bool)] {
        GOLDEN
    }

    #[test]
    fn every_reference_id_is_known_with_its_family_and_kind() {
        for &(vendor, device, family, vf) in GOLDEN {
            let d = lookup(PciId { vendor, device })
                .unwrap_or_else(|| panic!("{vendor:04x}:{device:04x} missing"));
            assert_eq!(d.family.name(), family, "{vendor:04x}:{device:04x}");
            assert_eq!(d.kind == FunctionKind::Vf, vf, "{vendor:04x}:{device:04x}");
            assert!(!d.model.is_empty());
        }
        // Nothing in the table that the reference does not list, and no duplicate rows.
        assert_eq!(KNOWN_DEVICES.len(), GOLDEN.len());
        let unique: HashSet<_> = KNOWN_DEVICES.iter().map(|d| (d.vendor, d.device)).collect();
        assert_eq!(unique.len(), KNOWN_DEVICES.len());
    }

    #[test]
    fn unknown_ids_and_the_tavor_bridge_are_not_hcas() {
        // 0x5a46 is Tavor's PCI bridge (devid + 2), not an HCA.
        assert!(
            lookup(PciId {
                vendor: 0x15b3,
                device: 0x5a46
            })
            .is_none()
        );
        assert!(
            lookup(PciId {
                vendor: 0x1234,
                device: 0x11e8
            })
            .is_none()
        );
        // mlx5 IDs exist only under the Mellanox vendor.
        assert!(
            lookup(PciId {
                vendor: 0x1867,
                device: 0x1017
            })
            .is_none()
        );
    }

    #[test]
    fn models_from_the_reference_names() {
        let name = |v, d| {
            lookup(PciId {
                vendor: v,
                device: d,
            })
            .unwrap()
            .model
        };
        assert_eq!(name(0x15b3, 0x1007), "ConnectX-3 Pro MT27520");
        assert_eq!(name(0x15b3, 0x1017), "ConnectX-5");
        assert_eq!(name(0x15b3, 0xa2dc), "BlueField-3 integrated ConnectX-7");
        assert!(name(0x1867, 0x6282).contains("Arbel"));
    }
}

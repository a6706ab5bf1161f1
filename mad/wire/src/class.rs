//! Base versions, management classes and class versions (IBA 13.4.4; kernel `ib_mad.h`,
//! OpenSM `ib_types.h`), and the per-class facts the MAD layer dispatches on.

/// BaseVersion of every InfiniBand MAD.
pub const BASE_VERSION: u8 = 1;
/// BaseVersion of Omni-Path MADs; not InfiniBand, listed so it can be recognised and refused.
pub const OPA_BASE_VERSION: u8 = 0x80;

/// Subnet management, LID-routed SMPs.
pub const SUBN_LID_ROUTED: u8 = 0x01;
/// Subnet management, directed-route SMPs.
pub const SUBN_DIRECTED_ROUTE: u8 = 0x81;
/// Subnet administration (the SA).
pub const SUBN_ADM: u8 = 0x03;
/// Performance management (the PMA).
pub const PERF_MGMT: u8 = 0x04;
/// Baseboard management.
pub const BM: u8 = 0x05;
/// Device management.
pub const DEVICE_MGMT: u8 = 0x06;
/// Communication management (CM).
pub const CM: u8 = 0x07;
/// SNMP tunnelling.
pub const SNMP: u8 = 0x08;
/// First class of vendor range 1 (no OUI).
pub const VENDOR_RANGE1_START: u8 = 0x09;
/// Last class of vendor range 1.
pub const VENDOR_RANGE1_END: u8 = 0x0F;
/// Device administration.
pub const DEVICE_ADM: u8 = 0x10;
/// Boot management.
pub const BOOT_MGMT: u8 = 0x11;
/// BIS.
pub const BIS: u8 = 0x12;
/// Congestion control.
pub const CONG_MGMT: u8 = 0x21;
/// First class of vendor range 2 (MADs carry an OUI, see [`crate::vendor`]).
pub const VENDOR_RANGE2_START: u8 = 0x30;
/// Last class of vendor range 2.
pub const VENDOR_RANGE2_END: u8 = 0x4F;

/// ClassVersion of subnet management (classes 0x01 and 0x81).
pub const SUBN_CLASS_VERSION: u8 = 1;
/// ClassVersion of subnet administration.
pub const SUBN_ADM_CLASS_VERSION: u8 = 2;
/// ClassVersion of performance management.
pub const PERF_MGMT_CLASS_VERSION: u8 = 1;

/// OUI of the OpenIB alliance, which libibumad registers for vendor classes by default.
pub const OPENIB_OUI: u32 = 0x00_1405;

/// Whether `class` is a subnet management class (LID-routed or directed-route), which travel
/// on QP0 only.
pub const fn is_smp(class: u8) -> bool {
    class == SUBN_LID_ROUTED || class == SUBN_DIRECTED_ROUTE
}

/// Whether `class` is in vendor range 1 (0x09–0x0F).
pub const fn is_vendor_range1(class: u8) -> bool {
    class >= VENDOR_RANGE1_START && class <= VENDOR_RANGE1_END
}

/// Whether `class` is in vendor range 2 (0x30–0x4F), whose MADs carry an OUI.
pub const fn is_vendor_range2(class: u8) -> bool {
    class >= VENDOR_RANGE2_START && class <= VENDOR_RANGE2_END
}

/// Whether `class` may use RMPP, after the kernel's `ib_is_mad_class_rmpp`: SA, DevMgt,
/// DevAdm, BIS and vendor range 2.
pub const fn is_rmpp_capable(class: u8) -> bool {
    matches!(class, SUBN_ADM | DEVICE_MGMT | DEVICE_ADM | BIS) || is_vendor_range2(class)
}

/// Offset of the class data in a MAD of `class`, after the kernel's `ib_get_mad_data_offset`:
/// 56 for the SA, 64 for DevMgt/DevAdm/BIS, 40 for vendor range 2, 24 otherwise.
///
/// The PMA's 40 reserved bytes count as data here, as in the kernel; its attributes start at
/// 64 (see [`crate::perf`]).
pub const fn data_offset(class: u8) -> usize {
    match class {
        SUBN_ADM => crate::sa::DATA_OFFSET,
        DEVICE_MGMT | DEVICE_ADM | BIS => 64,
        c if is_vendor_range2(c) => crate::vendor::DATA_OFFSET,
        _ => crate::header::HEADER_LEN,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rmpp_capable_classes_are_the_kernels() {
        for class in [0x03, 0x06, 0x10, 0x12, 0x30, 0x4F] {
            assert!(is_rmpp_capable(class), "class {class:#x}");
        }
        for class in [
            0x01, 0x81, 0x04, 0x05, 0x07, 0x08, 0x09, 0x11, 0x21, 0x2F, 0x50,
        ] {
            assert!(!is_rmpp_capable(class), "class {class:#x}");
        }
    }

    #[test]
    fn data_offsets_follow_ib_get_mad_data_offset() {
        assert_eq!(data_offset(0x03), 56);
        assert_eq!(data_offset(0x06), 64);
        assert_eq!(data_offset(0x10), 64);
        assert_eq!(data_offset(0x12), 64);
        assert_eq!(data_offset(0x30), 40);
        assert_eq!(data_offset(0x4F), 40);
        assert_eq!(data_offset(0x04), 24);
        assert_eq!(data_offset(0x81), 24);
    }

    #[test]
    fn vendor_ranges_have_their_bounds() {
        assert!(!is_vendor_range1(0x08) && is_vendor_range1(0x09) && is_vendor_range1(0x0F));
        assert!(!is_vendor_range1(0x10));
        assert!(!is_vendor_range2(0x2F) && is_vendor_range2(0x30) && is_vendor_range2(0x4F));
        assert!(!is_vendor_range2(0x50));
        assert!(is_smp(0x01) && is_smp(0x81) && !is_smp(0x03));
    }
}

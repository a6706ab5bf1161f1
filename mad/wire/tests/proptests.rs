//! Properties over arbitrary bytes: no view or parser panics on any input, and for every layout
//! `Repr -> emit -> parse` is the identity. The Reprs are drawn by parsing arbitrary bytes (with
//! the header bytes a parser insists on forced valid), which reaches every value of every field.

use mad_wire::attr::class_port_info::{ClassPortInfo, ClassPortInfoRepr};
use mad_wire::attr::guid_info::{GuidInfo, GuidInfoRepr};
use mad_wire::attr::linear_forwarding_table::{LinearForwardingTable, LinearForwardingTableRepr};
use mad_wire::attr::multicast_forwarding_table::{
    MulticastForwardingTable, MulticastForwardingTableRepr,
};
use mad_wire::attr::node_description::{NodeDescription, NodeDescriptionRepr};
use mad_wire::attr::node_info::{NodeInfo, NodeInfoRepr};
use mad_wire::attr::notice::{Notice, NoticeRepr};
use mad_wire::attr::pkey_table::{PkeyTable, PkeyTableRepr};
use mad_wire::attr::port_counters::{PortCounters, PortCountersRepr};
use mad_wire::attr::port_info::{PortInfo, PortInfoRepr};
use mad_wire::attr::sl_to_vl_table::{SlToVlTable, SlToVlTableRepr};
use mad_wire::attr::sm_info::{SmInfo, SmInfoRepr};
use mad_wire::attr::switch_info::{SwitchInfo, SwitchInfoRepr};
use mad_wire::attr::vl_arb_table::{VlArbTable, VlArbTableRepr};
use mad_wire::header::{Mad, MadHeaderRepr};
use mad_wire::perf::PerfMad;
use mad_wire::rmpp::{Rmpp, RmppRepr};
use mad_wire::sa::{SaMad, SaRepr};
use mad_wire::smp::{Smp, SmpRepr, SmpRoute};
use mad_wire::vendor::{VendorMad, VendorRepr};
use proptest::prelude::*;

/// Views `bytes` as every layout, parses each and pokes the index-taking accessors; results are
/// dropped, only a panic fails.
fn parse_everything(bytes: &[u8], index: usize) {
    if let Ok(mad) = Mad::new_checked(bytes) {
        let _ = MadHeaderRepr::parse(&mad);
        let _ = mad.is_response();
    }
    if let Ok(smp) = Smp::new_checked(bytes) {
        let _ = SmpRepr::parse(&smp);
        let _ = smp.initial_path_hop(index);
        let _ = smp.return_path_hop(usize::from(smp.hop_pointer()));
    }
    if let Ok(rmpp) = Rmpp::new_checked(bytes) {
        let _ = RmppRepr::parse(&rmpp);
    }
    if let Ok(sa) = SaMad::new_checked(bytes) {
        let _ = SaRepr::parse(&sa);
    }
    if let Ok(vendor) = VendorMad::new_checked(bytes) {
        let _ = VendorRepr::parse(&vendor);
    }
    if let Ok(pma) = PerfMad::new_checked(bytes) {
        let _ = PortCounters::new_checked(pma.data()).map(|v| PortCountersRepr::parse(&v));
        let _ = ClassPortInfo::new_checked(pma.data()).map(|v| ClassPortInfoRepr::parse(&v));
    }
    let _ = NodeInfo::new_checked(bytes).map(|v| NodeInfoRepr::parse(&v));
    let _ = NodeDescription::new_checked(bytes)
        .map(|v| NodeDescriptionRepr::parse(&v).map(|r| r.text().map(str::len)));
    let _ = PortInfo::new_checked(bytes).map(|v| PortInfoRepr::parse(&v));
    let _ = SwitchInfo::new_checked(bytes).map(|v| SwitchInfoRepr::parse(&v));
    let _ = SmInfo::new_checked(bytes).map(|v| SmInfoRepr::parse(&v));
    let _ = Notice::new_checked(bytes).map(|v| (NoticeRepr::parse(&v), v.issuer_gid()));
    let _ = PortCounters::new_checked(bytes).map(|v| PortCountersRepr::parse(&v));
    let _ = ClassPortInfo::new_checked(bytes).map(|v| ClassPortInfoRepr::parse(&v));
    if let Ok(v) = GuidInfo::new_checked(bytes) {
        let _ = (GuidInfoRepr::parse(&v), v.guid(index));
    }
    if let Ok(v) = PkeyTable::new_checked(bytes) {
        let _ = (PkeyTableRepr::parse(&v), v.pkey(index));
    }
    if let Ok(v) = LinearForwardingTable::new_checked(bytes) {
        let _ = (LinearForwardingTableRepr::parse(&v), v.port(index));
    }
    if let Ok(v) = MulticastForwardingTable::new_checked(bytes) {
        let _ = (MulticastForwardingTableRepr::parse(&v), v.port_mask(index));
    }
    if let Ok(v) = SlToVlTable::new_checked(bytes) {
        let _ = (SlToVlTableRepr::parse(&v), v.vl(index));
    }
    if let Ok(v) = VlArbTable::new_checked(bytes) {
        let _ = (VlArbTableRepr::parse(&v), v.entry(index));
    }
}

/// For an attribute: parse `bytes`, emit into a zeroed buffer, parse again; the Reprs must be
/// equal. Returns the emitted bytes.
macro_rules! identity {
    ($bytes:expr, $len:expr, $view:ident, $repr:ident) => {{
        let first = $repr::parse(&$view::new_checked(&$bytes[..]).unwrap()).unwrap();
        let mut out = [0u8; $len];
        first.emit(&mut $view::new_checked(&mut out[..]).unwrap());
        let second = $repr::parse(&$view::new_checked(&out[..]).unwrap()).unwrap();
        prop_assert_eq!(first, second);
        out
    }};
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn nothing_panics_on_arbitrary_bytes(
        bytes in proptest::collection::vec(any::<u8>(), 0..300),
        index in 0usize..300,
    ) {
        parse_everything(&bytes, index);
        // Responding to whatever arrived must not panic either.
        let mut copy = bytes.clone();
        if let Ok(mut mad) = Mad::new_checked(&mut copy[..]) {
            let _ = mad.make_response(0x000C);
        }
    }

    #[test]
    fn nothing_panics_on_arbitrary_smps(
        mut bytes in proptest::collection::vec(any::<u8>(), 256),
        class_dr in any::<bool>(),
        hop_count in any::<u8>(),
    ) {
        // Valid enough to get past the header checks, so the path code runs.
        bytes[0] = 1;
        bytes[1] = if class_dr { 0x81 } else { 0x01 };
        bytes[7] = hop_count;
        parse_everything(&bytes, usize::from(bytes[6]));
    }

    #[test]
    fn header_reprs_survive_emit_and_parse(
        bytes in proptest::collection::vec(any::<u8>(), 256),
        class_dr in any::<bool>(),
        hops in 0u8..64,
        vendor_class in 0x30u8..=0x4F,
    ) {
        // Common header and RMPP: any bytes.
        let header = MadHeaderRepr::parse(&Mad::new_checked(&bytes[..]).unwrap()).unwrap();
        let mut out = [0u8; 24];
        header.emit(&mut Mad::new_checked(&mut out[..]).unwrap());
        // Every header byte is a field but the reserved 18-19, which emit clears.
        prop_assert_eq!(&out[..18], &bytes[..18]);
        prop_assert_eq!(&out[18..20], &[0u8, 0][..]);
        prop_assert_eq!(&out[20..], &bytes[20..24]);
        let rmpp = RmppRepr::parse(&Rmpp::new_checked(&bytes[..]).unwrap()).unwrap();
        let mut out = [0u8; 36];
        rmpp.emit(&mut Rmpp::new_checked(&mut out[..]).unwrap());
        prop_assert_eq!(RmppRepr::parse(&Rmpp::new_checked(&out[..]).unwrap()).unwrap(), rmpp);
        prop_assert_eq!(&out[24..], &bytes[24..36]);

        // SMP: base version 1, an SMP class, a hop count the path arrays hold.
        let mut smp_bytes = bytes.clone();
        smp_bytes[0] = 1;
        smp_bytes[1] = if class_dr { 0x81 } else { 0x01 };
        smp_bytes[7] = hops;
        let smp = SmpRepr::parse(&Smp::new_checked(&smp_bytes[..]).unwrap()).unwrap();
        prop_assert_eq!(matches!(smp.route, SmpRoute::Directed(_)), class_dr);
        let mut out = [0u8; 256];
        smp.emit(&mut Smp::new_checked(&mut out[..]).unwrap());
        prop_assert_eq!(SmpRepr::parse(&Smp::new_checked(&out[..]).unwrap()).unwrap(), smp);
        if class_dr {
            // Every byte of a directed-route SMP but the reserved ones is a field.
            prop_assert_eq!(&out[..18], &smp_bytes[..18]);
            prop_assert_eq!(&out[20..36], &smp_bytes[20..36]);
            prop_assert_eq!(&out[64..], &smp_bytes[64..]);
        }

        // SA and vendor headers.
        let mut sa_bytes = bytes.clone();
        sa_bytes[0] = 1;
        sa_bytes[1] = 0x03;
        let sa = SaRepr::parse(&SaMad::new_checked(&sa_bytes[..]).unwrap()).unwrap();
        let mut out = [0u8; 56];
        sa.emit(&mut SaMad::new_checked(&mut out[..]).unwrap());
        prop_assert_eq!(SaRepr::parse(&SaMad::new_checked(&out[..]).unwrap()).unwrap(), sa);
        let mut vendor_bytes = bytes;
        vendor_bytes[0] = 1;
        vendor_bytes[1] = vendor_class;
        let vendor = VendorRepr::parse(&VendorMad::new_checked(&vendor_bytes[..]).unwrap()).unwrap();
        let mut out = [0u8; 40];
        vendor.emit(&mut VendorMad::new_checked(&mut out[..]).unwrap());
        prop_assert_eq!(VendorRepr::parse(&VendorMad::new_checked(&out[..]).unwrap()).unwrap(), vendor);
        prop_assert_eq!(&out[37..40], &vendor_bytes[37..40]);
    }

    #[test]
    fn attribute_reprs_survive_emit_and_parse(bytes in proptest::collection::vec(any::<u8>(), 80)) {
        // Layouts where every bit is a field give back the very bytes.
        let out = identity!(bytes, 40, NodeInfo, NodeInfoRepr);
        prop_assert_eq!(&out[..], &bytes[..40]);
        let out = identity!(bytes, 64, NodeDescription, NodeDescriptionRepr);
        prop_assert_eq!(&out[..], &bytes[..64]);
        let out = identity!(bytes, 21, SmInfo, SmInfoRepr);
        prop_assert_eq!(&out[..], &bytes[..21]);
        let out = identity!(bytes, 64, Notice, NoticeRepr);
        prop_assert_eq!(&out[..], &bytes[..64]);
        let out = identity!(bytes, 64, GuidInfo, GuidInfoRepr);
        prop_assert_eq!(&out[..], &bytes[..64]);
        let out = identity!(bytes, 64, PkeyTable, PkeyTableRepr);
        prop_assert_eq!(&out[..], &bytes[..64]);
        let out = identity!(bytes, 64, LinearForwardingTable, LinearForwardingTableRepr);
        prop_assert_eq!(&out[..], &bytes[..64]);
        let out = identity!(bytes, 64, MulticastForwardingTable, MulticastForwardingTableRepr);
        prop_assert_eq!(&out[..], &bytes[..64]);
        let out = identity!(bytes, 8, SlToVlTable, SlToVlTableRepr);
        prop_assert_eq!(&out[..], &bytes[..8]);
        // Layouts with reserved bits: equal Reprs, reserved bits cleared.
        let out = identity!(bytes, 64, PortInfo, PortInfoRepr);
        prop_assert_eq!(out[34] & 0x38, 0);
        prop_assert_eq!(out[56], bytes[56] & 0x7F, "XDR fields kept, bit 7 reserved");
        identity!(bytes, 20, SwitchInfo, SwitchInfoRepr);
        identity!(bytes, 44, PortCounters, PortCountersRepr);
        identity!(bytes, 72, ClassPortInfo, ClassPortInfoRepr);
        let out = identity!(bytes, 64, VlArbTable, VlArbTableRepr);
        prop_assert!(out.iter().step_by(2).all(|b| b & 0xF0 == 0));
    }
}

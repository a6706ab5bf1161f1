//! Header layouts against bytes written out by hand from the IBA tables (kernel `ib_mad.h`,
//! `ib_smi.h`, libibmad `fields.c`): parse gives the values laid out, emit gives the bytes back.
//! Plus the behaviours built on the headers: the response rule, responses, directed routes and
//! the errors of bad input.

use mad_wire::header::{Mad, MadHeaderRepr};
use mad_wire::perf::PerfMad;
use mad_wire::rmpp::{Rmpp, RmppRepr, flags, rmpp_type};
use mad_wire::sa::{SaMad, SaRepr};
use mad_wire::smp::{DirectedRoute, Direction, Smp, SmpRepr, SmpRoute};
use mad_wire::vendor::{VendorMad, VendorRepr};
use mad_wire::{Error, class, method, status};

/// A PMA Get of PortCounters with status 0x001C, TID 0x0102030405060708, modifier 1.
const COMMON_HEADER: [u8; 24] = [
    0x01, // BaseVersion 1
    0x04, // MgmtClass PerfMgt
    0x01, // ClassVersion 1
    0x81, // R + GetResp
    0x00, 0x1C, // Status: invalid attribute value
    0xA5, 0x5A, // ClassSpecific
    0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, // TID
    0x00, 0x12, // AttributeID PortCounters
    0x00, 0x00, // reserved
    0x00, 0x00, 0x00, 0x01, // AttributeModifier 1
];

#[test]
fn common_header_fields_sit_at_their_offsets() {
    let mad = Mad::new_checked(&COMMON_HEADER[..]).unwrap();
    let repr = MadHeaderRepr::parse(&mad).unwrap();
    assert_eq!(
        repr,
        MadHeaderRepr {
            base_version: 1,
            mgmt_class: 0x04,
            class_version: 1,
            method: 0x81,
            status: 0x001C,
            class_specific: 0xA55A,
            tid: 0x0102_0304_0506_0708,
            attr_id: 0x0012,
            attr_mod: 1,
        }
    );
    let mut out = [0xEEu8; 24];
    repr.emit(&mut Mad::new_checked(&mut out[..]).unwrap());
    assert_eq!(out, COMMON_HEADER);
}

#[test]
fn short_buffers_are_refused_with_the_lengths() {
    assert_eq!(
        Mad::new_checked(&[0u8; 23][..]).unwrap_err(),
        Error::Truncated {
            what: "a MAD header",
            needed: 24,
            got: 23
        }
    );
    assert_eq!(
        Smp::new_checked(&[0u8; 255][..]).unwrap_err(),
        Error::Truncated {
            what: "an SMP",
            needed: 256,
            got: 255
        }
    );
    assert!(matches!(
        Rmpp::new_checked(&[0u8; 35][..]),
        Err(Error::Truncated { needed: 36, .. })
    ));
    assert!(matches!(
        SaMad::new_checked(&[0u8; 55][..]),
        Err(Error::Truncated { needed: 56, .. })
    ));
    assert!(matches!(
        VendorMad::new_checked(&[0u8; 39][..]),
        Err(Error::Truncated { needed: 40, .. })
    ));
    assert!(matches!(
        PerfMad::new_checked(&[0u8; 63][..]),
        Err(Error::Truncated { needed: 64, .. })
    ));
}

fn header(class: u8, method: u8, attr_mod: u32) -> MadHeaderRepr {
    MadHeaderRepr {
        attr_mod,
        ..MadHeaderRepr::request(class, 1, method, 1, 0x10, 0)
    }
}

#[test]
fn is_response_follows_ib_response_mad() {
    // The R bit.
    assert!(header(class::SUBN_LID_ROUTED, 0x81, 0).is_response());
    assert!(header(class::SUBN_ADM, 0x92, 0).is_response());
    // TrapRepress has no R bit but answers a Trap.
    assert!(header(class::SUBN_LID_ROUTED, 0x07, 0).is_response());
    // Baseboard management: bit 0 of the modifier.
    assert!(header(class::BM, 0x03, 0x0000_0001).is_response());
    assert!(!header(class::BM, 0x03, 0x0000_0002).is_response());
    // That bit means nothing in other classes.
    assert!(!header(class::PERF_MGMT, 0x01, 0x0000_0001).is_response());
    assert!(!header(class::SUBN_DIRECTED_ROUTE, 0x01, 0).is_response());
    assert!(!header(class::SUBN_LID_ROUTED, 0x05, 0).is_response());
    // The view applies the same rule.
    let mut buf = [0u8; 24];
    header(class::BM, 0x03, 1).emit(&mut Mad::new_checked(&mut buf[..]).unwrap());
    assert!(Mad::new_checked(&buf[..]).unwrap().is_response());
}

/// A LID-routed SMP: Set PortInfo port 2, M_Key 0x1122334455667788, data 0x5A… .
fn lid_routed_smp_bytes() -> [u8; 256] {
    let mut b = [0u8; 256];
    b[..24].copy_from_slice(&[
        0x01, 0x01, 0x01, 0x02, // base 1, class 0x01, class version 1, Set
        0x00, 0x00, 0x00, 0x00, // status, reserved class-specific
        0x00, 0x00, 0x00, 0x07, 0xCA, 0xFE, 0x00, 0x01, // TID
        0x00, 0x15, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, // PortInfo, port 2
    ]);
    b[24..32].copy_from_slice(&[0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88]);
    b[64..128].fill(0x5A);
    b
}

#[test]
fn lid_routed_smp_round_trips() {
    let bytes = lid_routed_smp_bytes();
    let repr = SmpRepr::parse(&Smp::new_checked(&bytes[..]).unwrap()).unwrap();
    assert_eq!(repr.route, SmpRoute::LidRouted);
    assert_eq!(repr.method, method::SET);
    assert_eq!(repr.tid, 0x0000_0007_CAFE_0001);
    assert_eq!(repr.attr_id, 0x0015);
    assert_eq!(repr.attr_mod, 2);
    assert_eq!(repr.m_key, 0x1122_3344_5566_7788);
    assert_eq!(repr.data, [0x5A; 64]);
    let mut out = [0xFFu8; 256];
    repr.emit(&mut Smp::new_checked(&mut out[..]).unwrap());
    assert_eq!(out, bytes);
}

/// A returning directed-route SMP: GetResp NodeInfo, status 0x001C with D, HopPointer 1,
/// HopCount 2, DrSLID 0xFFFF, DrDLID 0x0005, InitialPath [-, 1, 3], ReturnPath [-, 4, 2].
fn directed_smp_bytes() -> [u8; 256] {
    let mut b = [0u8; 256];
    b[..24].copy_from_slice(&[
        0x01, 0x81, 0x01, 0x81, // base 1, class 0x81, class version 1, GetResp
        0x80, 0x1C, // D bit + invalid attribute value
        0x01, 0x02, // HopPointer 1, HopCount 2
        0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x2A, // TID
        0x00, 0x11, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // NodeInfo
    ]);
    b[24..32].copy_from_slice(&[0, 0, 0, 0, 0, 0, 0x01, 0x00]); // M_Key 0x100
    b[32..36].copy_from_slice(&[0xFF, 0xFF, 0x00, 0x05]); // DrSLID, DrDLID
    b[64] = 0x01;
    b[127] = 0x7F;
    b[129] = 1;
    b[130] = 3;
    b[193] = 4;
    b[194] = 2;
    b
}

#[test]
fn directed_route_smp_round_trips() {
    let bytes = directed_smp_bytes();
    let smp = Smp::new_checked(&bytes[..]).unwrap();
    assert!(smp.is_directed_route());
    assert_eq!(smp.direction(), Direction::Returning);
    assert_eq!(smp.dr_status(), 0x001C);
    assert_eq!(smp.initial_path_hop(2), Ok(3));
    assert_eq!(smp.return_path_hop(1), Ok(4));
    let repr = SmpRepr::parse(&smp).unwrap();
    assert_eq!(repr.status, 0x001C, "the D bit is not part of the status");
    assert_eq!(repr.m_key, 0x100);
    let SmpRoute::Directed(dr) = repr.route else {
        panic!("not directed: {:?}", repr.route)
    };
    assert_eq!(dr.direction, Direction::Returning);
    assert_eq!((dr.hop_pointer, dr.hop_count), (1, 2));
    assert_eq!((dr.dr_slid, dr.dr_dlid), (0xFFFF, 0x0005));
    assert_eq!(dr.initial_path[..3], [0, 1, 3]);
    assert_eq!(dr.return_path[..3], [0, 4, 2]);
    assert_eq!((repr.data[0], repr.data[63]), (0x01, 0x7F));
    let mut out = [0xFFu8; 256];
    repr.emit(&mut Smp::new_checked(&mut out[..]).unwrap());
    assert_eq!(out, bytes);
}

#[test]
fn bad_smps_get_typed_errors() {
    let mut bytes = directed_smp_bytes();
    bytes[0] = 2;
    assert_eq!(
        SmpRepr::parse(&Smp::new_checked(&bytes[..]).unwrap()),
        Err(Error::BadBaseVersion { found: 2 })
    );
    let mut bytes = directed_smp_bytes();
    bytes[1] = 0x04;
    assert!(matches!(
        SmpRepr::parse(&Smp::new_checked(&bytes[..]).unwrap()),
        Err(Error::WrongClass { found: 0x04, .. })
    ));
    let mut bytes = directed_smp_bytes();
    bytes[7] = 64;
    assert_eq!(
        SmpRepr::parse(&Smp::new_checked(&bytes[..]).unwrap()),
        Err(Error::HopCountTooLarge { found: 64 })
    );
    bytes[7] = 63;
    assert!(SmpRepr::parse(&Smp::new_checked(&bytes[..]).unwrap()).is_ok());
    let smp = Smp::new_checked(&bytes[..]).unwrap();
    assert_eq!(
        smp.initial_path_hop(64),
        Err(Error::HopOutOfRange { hop: 64 })
    );
    assert_eq!(
        smp.return_path_hop(usize::from(u8::MAX)),
        Err(Error::HopOutOfRange { hop: 255 })
    );
}

#[test]
fn a_directed_route_is_built_from_a_path_of_ports() {
    let dr = DirectedRoute::from_path(&[1, 3, 1]).unwrap();
    assert_eq!(dr.hop_count, 3);
    assert_eq!(dr.hop_pointer, 0);
    assert_eq!(dr.direction, Direction::Outbound);
    assert_eq!((dr.dr_slid, dr.dr_dlid), (0xFFFF, 0xFFFF));
    assert_eq!(dr.initial_path[..5], [0, 1, 3, 1, 0]);
    assert_eq!(dr.return_path, [0; 64]);
    assert_eq!(DirectedRoute::from_path(&[]).unwrap().hop_count, 0);
    assert_eq!(DirectedRoute::from_path(&[2; 63]).unwrap().hop_count, 63);
    assert_eq!(
        DirectedRoute::from_path(&[2; 64]),
        Err(Error::PathTooLong { hops: 64 })
    );
    let lids = DirectedRoute::from_path_with_lids(&[5], 0x0003, 0xFFFF).unwrap();
    assert_eq!((lids.dr_slid, lids.dr_dlid, lids.hop_count), (3, 0xFFFF, 1));
}

#[test]
fn a_directed_get_is_emitted_as_the_ib_layout_says() {
    let repr = SmpRepr::directed_get(&[1, 3], 0x0015, 3, 0x0000_0000_1234_5678).unwrap();
    let mut out = [0xEEu8; 256];
    repr.emit(&mut Smp::new_checked(&mut out[..]).unwrap());
    let mut expected = [0u8; 256];
    expected[..24].copy_from_slice(&[
        0x01, 0x81, 0x01, 0x01, 0x00, 0x00, 0x00, 0x02, // Get, D=0, hop pointer 0, count 2
        0x00, 0x00, 0x00, 0x00, 0x12, 0x34, 0x56, 0x78, //
        0x00, 0x15, 0x00, 0x00, 0x00, 0x00, 0x00, 0x03,
    ]);
    expected[32..36].copy_from_slice(&[0xFF, 0xFF, 0xFF, 0xFF]);
    expected[129] = 1;
    expected[130] = 3;
    assert_eq!(out, expected);
}

#[test]
fn a_directed_request_becomes_a_returning_get_response() {
    let request = SmpRepr::directed_get(&[1, 3], 0x0011, 0, 42).unwrap();
    let response = request
        .response(status::METHOD_ATTR_UNSUPPORTED, [7; 64])
        .unwrap();
    assert_eq!(response.method, 0x81);
    assert_eq!(response.status, 0x000C);
    assert_eq!(response.data, [7; 64]);
    assert_eq!((response.tid, response.attr_id), (42, 0x0011));
    let SmpRoute::Directed(dr) = response.route else {
        panic!("route lost")
    };
    assert_eq!(dr.direction, Direction::Returning);
    assert_eq!((dr.hop_pointer, dr.hop_count), (0, 2));
    let mut out = [0u8; 256];
    response.emit(&mut Smp::new_checked(&mut out[..]).unwrap());
    assert_eq!(
        out[3..6],
        [0x81, 0x80, 0x0C],
        "GetResp, D set, status 0x000C"
    );
}

#[test]
fn make_response_turns_a_buffer_into_its_answer_in_place() {
    // A directed-route Get: GetResp, D set, the status given.
    let mut smp_buf = [0u8; 256];
    SmpRepr::directed_get(&[1], 0x0011, 0, 9)
        .unwrap()
        .emit(&mut Smp::new_checked(&mut smp_buf[..]).unwrap());
    let mut smp = Smp::new_checked(&mut smp_buf[..]).unwrap();
    smp.make_response(status::METHOD_ATTR_UNSUPPORTED).unwrap();
    assert_eq!(smp_buf[3..8], [0x81, 0x80, 0x0C, 0x00, 0x01]);

    // A LID-routed Set: GetResp, no D bit.
    let mut buf = lid_routed_smp_bytes();
    Mad::new_checked(&mut buf[..])
        .unwrap()
        .make_response(status::INVALID_ATTR_VALUE)
        .unwrap();
    assert_eq!(buf[3..6], [0x81, 0x00, 0x1C]);

    // A Trap is answered by TrapRepress; an SA GetTable by GetTableResp.
    let mut trap = COMMON_HEADER;
    trap[3] = method::TRAP;
    Mad::new_checked(&mut trap[..])
        .unwrap()
        .make_response(0)
        .unwrap();
    assert_eq!(trap[3], 0x07);
    let mut table = COMMON_HEADER;
    table[3] = method::GET_TABLE;
    Mad::new_checked(&mut table[..])
        .unwrap()
        .make_response(0)
        .unwrap();
    assert_eq!(table[3], 0x92);

    // A response has no response, and the buffer is left alone.
    let mut resp = COMMON_HEADER;
    assert_eq!(
        Mad::new_checked(&mut resp[..]).unwrap().make_response(0),
        Err(Error::NoResponseMethod { method: 0x81 })
    );
    assert_eq!(resp, COMMON_HEADER);
}

#[test]
fn smp_view_setters_touch_only_their_field() {
    let mut buf = directed_smp_bytes();
    let mut smp = Smp::new_checked(&mut buf[..]).unwrap();
    smp.set_direction(Direction::Outbound);
    assert_eq!(smp.header().status(), 0x001C);
    smp.set_dr_status(0xFFFF);
    assert_eq!(
        smp.header().status(),
        0x7FFF,
        "bit 15 of a DR status is the D bit"
    );
    smp.set_direction(Direction::Returning);
    assert_eq!(smp.header().status(), 0xFFFF);
    smp.set_return_path_hop(2, 9).unwrap();
    assert_eq!(smp.return_path_hop(2), Ok(9));
    assert_eq!(
        smp.set_initial_path_hop(64, 1),
        Err(Error::HopOutOfRange { hop: 64 })
    );
    assert_eq!(smp.initial_path()[..3], [0, 1, 3]);
}

/// RMPP DATA, RRespTime 0x1F, flags Active|First, segment 1, payload length 400.
const RMPP_HEADER: [u8; 12] = [0x01, 0x01, 0xFB, 0x00, 0, 0, 0, 1, 0x00, 0x00, 0x01, 0x90];

#[test]
fn rmpp_header_round_trips() {
    let mut bytes = [0u8; 36];
    bytes[..24].copy_from_slice(&COMMON_HEADER);
    bytes[24..].copy_from_slice(&RMPP_HEADER);
    let view = Rmpp::new_checked(&bytes[..]).unwrap();
    assert_eq!(view.payload_length(), 400);
    assert_eq!(view.new_window_last(), 400);
    let repr = RmppRepr::parse(&view).unwrap();
    assert_eq!(
        repr,
        RmppRepr {
            version: 1,
            rmpp_type: rmpp_type::DATA,
            resp_time: 0x1F,
            flags: flags::ACTIVE | flags::FIRST,
            status: 0,
            segment_number: 1,
            paylen_newwin: 400,
        }
    );
    assert!(repr.is_active());
    let mut out = bytes;
    out[24..].fill(0xEE);
    repr.emit(&mut Rmpp::new_checked(&mut out[..]).unwrap());
    assert_eq!(out, bytes);
}

#[test]
fn sa_header_round_trips() {
    let mut bytes = [0u8; 256];
    bytes[..24].copy_from_slice(&[
        0x01, 0x03, 0x02, 0x12, 0x00, 0x00, 0x00, 0x00, // SA, class version 2, GetTable
        0, 0, 0, 0, 0, 0, 0, 9, //
        0x00, 0x11, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // NodeRecord
    ]);
    bytes[24..36].copy_from_slice(&RMPP_HEADER);
    bytes[36..56].copy_from_slice(&[
        0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, // SM_Key
        0x00, 0x08, 0x00, 0x00, // AttributeOffset 8 words, reserved
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x05, // ComponentMask bits 0 and 2
    ]);
    bytes[56] = 0xD0;
    let sa = SaMad::new_checked(&bytes[..]).unwrap();
    assert_eq!(sa.data()[0], 0xD0);
    assert_eq!(sa.data().len(), 200);
    let repr = SaRepr::parse(&sa).unwrap();
    assert_eq!(repr.header.method, method::GET_TABLE);
    assert_eq!(repr.rmpp.segment_number, 1);
    assert_eq!(repr.sm_key, 0x0102_0304_0506_0708);
    assert_eq!(repr.attr_offset, 8);
    assert_eq!(repr.component_mask, 5);
    let mut out = bytes;
    out[..56].fill(0xEE);
    repr.emit(&mut SaMad::new_checked(&mut out[..]).unwrap());
    assert_eq!(out, bytes);

    let mut smp_class = bytes;
    smp_class[1] = 0x81;
    assert!(matches!(
        SaRepr::parse(&SaMad::new_checked(&smp_class[..]).unwrap()),
        Err(Error::WrongClass { found: 0x81, .. })
    ));
}

#[test]
fn vendor_header_puts_the_oui_at_37() {
    let mut bytes = [0u8; 256];
    bytes[..24].copy_from_slice(&[
        0x01, 0x30, 0x01, 0x01, 0x00, 0x00, 0x00, 0x00, //
        0, 0, 0, 1, 0, 0, 0, 2, //
        0x00, 0x20, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    ]);
    bytes[36..40].copy_from_slice(&[0x00, 0x00, 0x02, 0xC9]); // reserved, OUI 0x0002C9
    bytes[40] = 0xAB;
    let mad = VendorMad::new_checked(&bytes[..]).unwrap();
    assert_eq!(mad.data()[0], 0xAB);
    assert_eq!(mad.data().len(), 216);
    let repr = VendorRepr::parse(&mad).unwrap();
    assert_eq!(repr.oui, 0x0002C9);
    assert_eq!(repr.header.mgmt_class, 0x30);
    assert_eq!(repr.rmpp, RmppRepr::NONE);
    let mut out = bytes;
    out[..40].fill(0xEE);
    repr.emit(&mut VendorMad::new_checked(&mut out[..]).unwrap());
    assert_eq!(out, bytes);

    let mut range1 = bytes;
    range1[1] = 0x0A;
    assert!(matches!(
        VendorRepr::parse(&VendorMad::new_checked(&range1[..]).unwrap()),
        Err(Error::WrongClass { found: 0x0A, .. })
    ));
}

#[test]
fn pma_data_starts_after_forty_reserved_bytes() {
    let mut bytes = [0u8; 256];
    bytes[..24].copy_from_slice(&COMMON_HEADER);
    bytes[63] = 0x11;
    bytes[64] = 0x22;
    let pma = PerfMad::new_checked(&bytes[..]).unwrap();
    assert_eq!(pma.data()[0], 0x22);
    assert_eq!(pma.data().len(), 192);
    assert_eq!(pma.header().attr_id(), 0x0012);
    let mut out = bytes;
    PerfMad::new_checked(&mut out[..]).unwrap().clear_reserved();
    assert_eq!(out[24..64], [0u8; 40]);
    assert_eq!(out[64], 0x22);
}

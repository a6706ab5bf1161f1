//! Notice (attribute 0x0002; IBA 13.4.8.2, kernel `struct ib_mad_notice_attr`, OpenSM
//! `ib_mad_notice_attr_t`, libibmad `fields.c`): the payload of Trap and TrapRepress.
//!
//! An SMP carries the first 64 bytes; the SA's form adds the IssuerGID. DataDetails is read
//! and written per trap through [`DataDetails`] (`notice_details`).
//!
//! | Offset | Field |
//! |---|---|
//! | 0 | IsGeneric (bit 7) / Type (bits 6–0) |
//! | 1 | ProducerType (generic) or VendorID (3) |
//! | 4 | TrapNumber (generic) or DeviceID (2) |
//! | 6 | IssuerLID (2) |
//! | 8 | NoticeToggle (bit 15) / NoticeCount (bits 14–0) |
//! | 10 | DataDetails (54) |
//! | 64 | IssuerGID (16), SA form only |

use super::notice_details::DataDetails;
use crate::error::{Result, check_len};
use crate::field::{set_u16_at, set_u24_at, u16_at, u24_at};

/// Length of the Notice in an SMP.
pub const LEN: usize = 64;
/// Length of the Notice with its IssuerGID (the SA's form).
pub const LEN_WITH_ISSUER_GID: usize = 80;
/// Length of DataDetails ([`DataDetails`] reads and writes it per trap).
pub const DATA_DETAILS_LEN: usize = super::notice_details::LEN;

/// Notice types (the 7-bit Type field; OpenSM `IB_NOTICE_TYPE_*`).
pub mod notice_type {
    /// Fatal.
    pub const FATAL: u8 = 0;
    /// Urgent.
    pub const URGENT: u8 = 1;
    /// Security.
    pub const SECURITY: u8 = 2;
    /// Subnet management.
    pub const SUBN_MGMT: u8 = 3;
    /// Informational.
    pub const INFO: u8 = 4;
    /// Empty (no notice queued).
    pub const EMPTY: u8 = 0x7F;
}

/// ProducerType values of generic notices (the producer's node type, or a class manager).
pub mod producer {
    /// Channel adapter.
    pub const CA: u32 = 1;
    /// Switch.
    pub const SWITCH: u32 = 2;
    /// Router.
    pub const ROUTER: u32 = 3;
    /// Class manager.
    pub const CLASS_MANAGER: u32 = 4;
}

/// Generic trap numbers (IBA 14.2.5.1, 13.4.8.2; OpenSM `SM_*_TRAP`).
pub mod trap {
    /// SA: a port's GID is in service (GIDADDR in DataDetails).
    pub const GID_IN_SERVICE: u16 = 64;
    /// SA: a port's GID is out of service.
    pub const GID_OUT_OF_SERVICE: u16 = 65;
    /// SA: a multicast group was created (its MGID in DataDetails).
    pub const MGID_CREATED: u16 = 66;
    /// SA: a multicast group was deleted.
    pub const MGID_DESTROYED: u16 = 67;
    /// SA: paths no longer exist (UnPath).
    pub const UNPATH: u16 = 68;
    /// SA: paths were recomputed (RePath).
    pub const REPATH: u16 = 69;
    /// A port of the switch at LIDADDR changed link state.
    pub const PORT_STATE_CHANGE: u16 = 128;
    /// Local link integrity threshold reached.
    pub const LOCAL_LINK_INTEGRITY: u16 = 129;
    /// Excessive buffer overrun threshold reached.
    pub const EXCESSIVE_BUFFER_OVERRUN: u16 = 130;
    /// Flow control update watchdog timer expired.
    pub const FLOW_CONTROL_UPDATE: u16 = 131;
    /// CapabilityMask (or other local attribute) changed.
    pub const CAPABILITY_MASK_CHANGE: u16 = 144;
    /// SystemImageGUID changed.
    pub const SYSTEM_IMAGE_GUID_CHANGE: u16 = 145;
    /// Bad M_Key.
    pub const BAD_MKEY: u16 = 256;
    /// Bad P_Key.
    pub const BAD_PKEY: u16 = 257;
    /// Bad Q_Key.
    pub const BAD_QKEY: u16 = 258;
    /// Bad P_Key at a switch external port.
    pub const BAD_PKEY_SWITCH_PORT: u16 = 259;
}

/// The directed-route part of a trap 256: present when the offending SMP was directed-route.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BadMkeyRoute {
    /// DrSLID of the SMP.
    pub dr_slid: u16,
    /// HopCount of the SMP (0-63).
    pub hop_count: u8,
    /// ReturnPath of the SMP as it reached the SMA (all 64 bytes; the notice keeps the first
    /// `hop_count` of them, at most 30).
    pub return_path: [u8; 64],
}

/// What a trap 256 (Bad M_Key) reports about the SMP that failed the M_Key check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BadMkey {
    /// LIDADDR: the LID the SMP came from (the SLID of its packet). qib and hfi1 put the
    /// issuer's own LID here instead; see [`NoticeRepr::bad_mkey`].
    pub lid: u16,
    /// The SMP's method.
    pub method: u8,
    /// The SMP's AttributeID.
    pub attr_id: u16,
    /// The SMP's AttributeModifier.
    pub attr_mod: u32,
    /// The M_Key the SMP carried.
    pub m_key: u64,
    /// Its directed route, if it was directed-route (sets DRNotice).
    pub directed: Option<BadMkeyRoute>,
}

/// What a trap 257 (Bad P_Key) or 258 (Bad Q_Key) reports about the packet that failed the
/// key check: who sent it to whom, and the key it carried.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BadKey {
    /// LIDADDR1: the sender (the SLID of the packet).
    pub lid1: u16,
    /// LIDADDR2: the receiver (the DLID of the packet).
    pub lid2: u16,
    /// The P_Key (trap 257, in the low 16 bits) or Q_Key (trap 258) the packet carried.
    pub key: u32,
    /// The packet's service level (4 bits).
    pub sl: u8,
    /// QP1: the sending QP (24 bits).
    pub qp1: u32,
    /// QP2: the QP the packet was for (24 bits).
    pub qp2: u32,
    /// GIDADDR1: the source GID of the packet's GRH, zero without one.
    pub gid1: [u8; 16],
    /// GIDADDR2: the destination GID of the packet's GRH, zero without one.
    pub gid2: [u8; 16],
}

mod field {
    /// IsGeneric (7) / Type (6–0).
    pub const GENERIC_TYPE: usize = 0;
    pub const PRODUCER_OR_VENDOR: usize = 1;
    pub const TRAP_OR_DEVICE: usize = 4;
    pub const ISSUER_LID: usize = 6;
    /// NoticeToggle (15) / NoticeCount (14–0).
    pub const TOGGLE_COUNT: usize = 8;
    pub const DATA_DETAILS: usize = 10;
    pub const ISSUER_GID: usize = 64;
}

/// A typed view of a Notice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Notice<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Notice<T> {
    /// Views `buffer` as a Notice, checking that it holds the 64 bytes an SMP carries.
    pub fn new_checked(buffer: T) -> Result<Self> {
        check_len("a Notice", buffer.as_ref(), LEN)?;
        Ok(Self { buffer })
    }

    /// Gives the buffer back.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// IsGeneric: a generic notice (ProducerType/TrapNumber) rather than a vendor one
    /// (VendorID/DeviceID).
    pub fn is_generic(&self) -> bool {
        self.buffer.as_ref()[field::GENERIC_TYPE] & 0x80 != 0
    }

    /// Type ([`notice_type`]), 7 bits.
    pub fn notice_type(&self) -> u8 {
        self.buffer.as_ref()[field::GENERIC_TYPE] & 0x7F
    }

    /// ProducerType ([`producer`]) of a generic notice, or VendorID of a vendor one; 24 bits.
    pub fn producer_type_or_vendor_id(&self) -> u32 {
        u24_at(self.buffer.as_ref(), field::PRODUCER_OR_VENDOR)
    }

    /// TrapNumber ([`trap`]) of a generic notice, or DeviceID of a vendor one.
    pub fn trap_number_or_device_id(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field::TRAP_OR_DEVICE)
    }

    /// IssuerLID.
    pub fn issuer_lid(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field::ISSUER_LID)
    }

    /// NoticeToggle.
    pub fn notice_toggle(&self) -> bool {
        u16_at(self.buffer.as_ref(), field::TOGGLE_COUNT) & 0x8000 != 0
    }

    /// NoticeCount, 15 bits.
    pub fn notice_count(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field::TOGGLE_COUNT) & 0x7FFF
    }

    /// DataDetails: 54 bytes whose layout depends on the trap.
    pub fn data_details(&self) -> &[u8] {
        &self.buffer.as_ref()[field::DATA_DETAILS..field::DATA_DETAILS + DATA_DETAILS_LEN]
    }

    /// DataDetails read per trap.
    pub fn details(&self) -> DataDetails<&[u8]> {
        DataDetails::from_exact(self.data_details())
    }

    /// IssuerGID, present only when the buffer holds the SA's 80-byte form.
    pub fn issuer_gid(&self) -> Option<[u8; 16]> {
        let bytes = self
            .buffer
            .as_ref()
            .get(field::ISSUER_GID..LEN_WITH_ISSUER_GID)?;
        let mut gid = [0u8; 16];
        gid.copy_from_slice(bytes);
        Some(gid)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Notice<T> {
    /// Sets IsGeneric and Type (7 bits; higher bits dropped), which share byte 0.
    pub fn set_generic_and_type(&mut self, is_generic: bool, notice_type: u8) {
        self.buffer.as_mut()[field::GENERIC_TYPE] =
            (u8::from(is_generic) << 7) | (notice_type & 0x7F);
    }

    /// Sets ProducerType / VendorID (24 bits; higher bits dropped).
    pub fn set_producer_type_or_vendor_id(&mut self, value: u32) {
        set_u24_at(self.buffer.as_mut(), field::PRODUCER_OR_VENDOR, value);
    }

    /// Sets TrapNumber / DeviceID.
    pub fn set_trap_number_or_device_id(&mut self, value: u16) {
        set_u16_at(self.buffer.as_mut(), field::TRAP_OR_DEVICE, value);
    }

    /// Sets IssuerLID.
    pub fn set_issuer_lid(&mut self, value: u16) {
        set_u16_at(self.buffer.as_mut(), field::ISSUER_LID, value);
    }

    /// Sets NoticeToggle and NoticeCount (15 bits; higher bits dropped), which share a word.
    pub fn set_toggle_and_count(&mut self, toggle: bool, count: u16) {
        let word = (u16::from(toggle) << 15) | (count & 0x7FFF);
        set_u16_at(self.buffer.as_mut(), field::TOGGLE_COUNT, word);
    }

    /// DataDetails, writable.
    pub fn data_details_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::DATA_DETAILS..field::DATA_DETAILS + DATA_DETAILS_LEN]
    }

    /// DataDetails written per trap.
    pub fn details_mut(&mut self) -> DataDetails<&mut [u8]> {
        DataDetails::from_exact(self.data_details_mut())
    }

    /// Sets IssuerGID if the buffer holds the SA's 80-byte form; returns whether it did.
    pub fn set_issuer_gid(&mut self, gid: [u8; 16]) -> bool {
        match self
            .buffer
            .as_mut()
            .get_mut(field::ISSUER_GID..LEN_WITH_ISSUER_GID)
        {
            Some(bytes) => {
                bytes.copy_from_slice(&gid);
                true
            }
            None => false,
        }
    }
}

/// The 64 bytes of a Notice as plain values (the IssuerGID of the SA's form is read and
/// written through the view).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct NoticeRepr {
    /// IsGeneric.
    pub is_generic: bool,
    /// Type, 7 bits ([`notice_type`]).
    pub notice_type: u8,
    /// ProducerType (generic) or VendorID, 24 bits.
    pub producer_type_or_vendor_id: u32,
    /// TrapNumber (generic) or DeviceID.
    pub trap_number_or_device_id: u16,
    /// IssuerLID.
    pub issuer_lid: u16,
    /// NoticeToggle.
    pub notice_toggle: bool,
    /// NoticeCount, 15 bits.
    pub notice_count: u16,
    /// DataDetails.
    pub data_details: [u8; DATA_DETAILS_LEN],
}

impl NoticeRepr {
    /// Trap 128, "link state of at least one port of the switch at LIDADDR has changed", as a
    /// switch's SMA sends it: generic, Urgent, producer Switch, issued by and about the
    /// switch's LID (DataDetails bytes 0–1 = LIDADDR, the rest zero), toggle and count 0.
    pub fn port_state_change(switch_lid: u16) -> Self {
        let mut data_details = [0u8; DATA_DETAILS_LEN];
        DataDetails::new_mut(&mut data_details).set_ntc_128_lid(switch_lid);
        Self {
            is_generic: true,
            notice_type: notice_type::URGENT,
            producer_type_or_vendor_id: producer::SWITCH,
            trap_number_or_device_id: trap::PORT_STATE_CHANGE,
            issuer_lid: switch_lid,
            notice_toggle: false,
            notice_count: 0,
            data_details,
        }
    }

    /// Trap 144, "local changes" (CapabilityMask, enabled link widths or speeds), as ibsim's
    /// SMA sends it (`sim_mad.c` `encode_trap144`): generic, Informational, producer the node
    /// type ([`producer`]), issued by and about `lid`, DataDetails LIDADDR and the port's
    /// `capability_mask`; OtherLocalChanges and the change flags stay 0, toggle and count 0.
    pub fn capability_mask_change(node_type: u32, lid: u16, capability_mask: u32) -> Self {
        let mut data_details = [0u8; DATA_DETAILS_LEN];
        let mut d = DataDetails::new_mut(&mut data_details);
        d.set_ntc_144_lid(lid);
        d.set_ntc_144_capability_mask(capability_mask);
        Self {
            is_generic: true,
            notice_type: notice_type::INFO,
            producer_type_or_vendor_id: node_type,
            trap_number_or_device_id: trap::CAPABILITY_MASK_CHANGE,
            issuer_lid: lid,
            notice_toggle: false,
            notice_count: 0,
            data_details,
        }
    }

    /// Trap 256, "Bad M_Key, `<M_Key>` from `<LIDADDR>` attempted `<METHOD>` with
    /// `<ATTRIBUTEID>` and `<ATTRIBUTEMODIFIER>`": generic, Security, producer the node type,
    /// issued by `issuer_lid`. DataDetails has the offsets of kernel and OpenSM `ntc_256` and is
    /// filled as the kernel's SMAs fill it (`qib_mad.c` `qib_bad_mkey`, hfi1 `bad_mkey`) but
    /// for one field: LIDADDR is `smp.lid`, the LID the SMP came from, where qib and hfi1
    /// write their own LID (`ntc_256.lid = data.issuer_lid`). IBA's text for the trap ("from
    /// `<LIDADDR>`") names the requester, and the issuer is already in IssuerLID, so we
    /// follow the spec; an SM comparing with a qib/hfi1 port sees the two differ there only.
    /// For a directed-route SMP, DRSLID, DRNotice, and the first HopCount bytes of its
    /// ReturnPath (at most 30, DRPathTruncated set when there were more).
    pub fn bad_mkey(node_type: u32, issuer_lid: u16, smp: &BadMkey) -> Self {
        let mut data_details = [0u8; DATA_DETAILS_LEN];
        let mut d = DataDetails::new_mut(&mut data_details);
        d.set_ntc_256_lid(smp.lid);
        d.set_ntc_256_method(smp.method);
        d.set_ntc_256_attr_id(smp.attr_id);
        d.set_ntc_256_attr_mod(smp.attr_mod);
        d.set_ntc_256_m_key(smp.m_key);
        if let Some(dr) = smp.directed {
            d.set_ntc_256_dr_slid(dr.dr_slid);
            d.set_ntc_256_dr_return_path(dr.hop_count, &dr.return_path);
        }
        Self {
            is_generic: true,
            notice_type: notice_type::SECURITY,
            producer_type_or_vendor_id: node_type,
            trap_number_or_device_id: trap::BAD_MKEY,
            issuer_lid,
            notice_toggle: false,
            notice_count: 0,
            data_details,
        }
    }

    /// Trap 257, "Bad P_Key, `<KEY>` from `<LIDADDR1>`/`<GIDADDR1>`/`<QP1>` to
    /// `<LIDADDR2>`/`<GIDADDR2>`/`<QP2>` on `<SL>`": generic, Security, producer the node
    /// type, issued by `issuer_lid`, DataDetails as the kernel's SMAs lay it out (`qib_mad.c`
    /// `qib_bad_pqkey`, OpenSM `ntc_257_258`); toggle and count 0.
    pub fn bad_pkey(node_type: u32, issuer_lid: u16, packet: &BadKey) -> Self {
        Self::bad_key(trap::BAD_PKEY, node_type, issuer_lid, packet)
    }

    /// Trap 258, "Bad Q_Key", laid out as [`bad_pkey`](Self::bad_pkey) with the Q_Key in the
    /// Key field.
    pub fn bad_qkey(node_type: u32, issuer_lid: u16, packet: &BadKey) -> Self {
        Self::bad_key(trap::BAD_QKEY, node_type, issuer_lid, packet)
    }

    fn bad_key(trap_number: u16, node_type: u32, issuer_lid: u16, k: &BadKey) -> Self {
        let mut data_details = [0u8; DATA_DETAILS_LEN];
        let mut d = DataDetails::new_mut(&mut data_details);
        d.set_ntc_257_258_lid1(k.lid1);
        d.set_ntc_257_258_lid2(k.lid2);
        d.set_ntc_257_258_key(k.key);
        d.set_ntc_257_258_sl_qp1(k.sl, k.qp1);
        d.set_ntc_257_258_qp2(k.qp2);
        d.set_ntc_257_258_gid1(k.gid1);
        d.set_ntc_257_258_gid2(k.gid2);
        Self {
            is_generic: true,
            notice_type: notice_type::SECURITY,
            producer_type_or_vendor_id: node_type,
            trap_number_or_device_id: trap_number,
            issuer_lid,
            notice_toggle: false,
            notice_count: 0,
            data_details,
        }
    }

    /// The LIDADDR of a generic trap 128, or `None` for any other notice.
    pub fn port_state_change_lid(&self) -> Option<u16> {
        (self.is_generic && self.trap_number_or_device_id == trap::PORT_STATE_CHANGE)
            .then(|| self.details().ntc_128_lid())
    }

    /// DataDetails read per trap (which accessors apply depends on the trap number).
    pub fn details(&self) -> DataDetails<&[u8]> {
        DataDetails::new(&self.data_details)
    }

    /// DataDetails written per trap.
    pub fn details_mut(&mut self) -> DataDetails<&mut [u8]> {
        DataDetails::new_mut(&mut self.data_details)
    }

    /// Reads the 64 bytes of `view`.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(view: &Notice<&T>) -> Result<Self> {
        let mut data_details = [0u8; DATA_DETAILS_LEN];
        data_details.copy_from_slice(view.data_details());
        Ok(Self {
            is_generic: view.is_generic(),
            notice_type: view.notice_type(),
            producer_type_or_vendor_id: view.producer_type_or_vendor_id(),
            trap_number_or_device_id: view.trap_number_or_device_id(),
            issuer_lid: view.issuer_lid(),
            notice_toggle: view.notice_toggle(),
            notice_count: view.notice_count(),
            data_details,
        })
    }

    /// Bytes [`NoticeRepr::emit`] writes.
    pub const fn buffer_len(&self) -> usize {
        LEN
    }

    /// Writes the 64 bytes into `view`.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(&self, view: &mut Notice<&mut T>) {
        view.set_generic_and_type(self.is_generic, self.notice_type);
        view.set_producer_type_or_vendor_id(self.producer_type_or_vendor_id);
        view.set_trap_number_or_device_id(self.trap_number_or_device_id);
        view.set_issuer_lid(self.issuer_lid);
        view.set_toggle_and_count(self.notice_toggle, self.notice_count);
        view.data_details_mut().copy_from_slice(&self.data_details);
    }
}

//! The common MAD header (IBA 13.4.3; kernel `struct ib_mad_hdr`): the first 24 bytes of every
//! MAD, whatever its class.
//!
//! | Offset | Size | Field |
//! |---|---|---|
//! | 0 | 1 | BaseVersion |
//! | 1 | 1 | MgmtClass |
//! | 2 | 1 | ClassVersion |
//! | 3 | 1 | R (bit 7) + Method (bits 0–6) |
//! | 4 | 2 | Status (bit 15 = D in directed-route SMPs) |
//! | 6 | 2 | ClassSpecific (HopPointer, HopCount in directed-route SMPs) |
//! | 8 | 8 | TransactionID |
//! | 16 | 2 | AttributeID |
//! | 18 | 2 | reserved |
//! | 20 | 4 | AttributeModifier |

use crate::error::{Result, check_len};
use crate::field::{set_u16_at, set_u32_at, set_u64_at, u16_at, u32_at, u64_at};
use crate::{class, method, status};

/// Length of the common MAD header.
pub const HEADER_LEN: usize = 24;
/// Length of a whole (non-RMPP) MAD on the wire.
pub const MAD_LEN: usize = 256;
/// Bit 0 of the AttributeModifier of a baseboard-management MAD: set in responses
/// (`IB_BM_ATTR_MOD_RESP`).
pub const BM_ATTR_MOD_RESPONSE: u32 = 0x0000_0001;

mod field {
    pub const BASE_VERSION: usize = 0;
    pub const MGMT_CLASS: usize = 1;
    pub const CLASS_VERSION: usize = 2;
    pub const METHOD: usize = 3;
    pub const STATUS: usize = 4;
    pub const CLASS_SPECIFIC: usize = 6;
    pub const TID: usize = 8;
    pub const ATTR_ID: usize = 16;
    pub const RESERVED: usize = 18;
    pub const ATTR_MOD: usize = 20;
}

/// A typed view of a MAD buffer through its common header.
///
/// The buffer holds at least the 24-byte header; whatever follows is the class's data
/// ([`Mad::payload`]). Class views ([`crate::smp::Smp`], [`crate::sa::SaMad`], …) hand out this
/// view for the header fields they share.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mad<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Mad<T> {
    /// Views `buffer` as a MAD, checking that it holds the 24-byte header.
    pub fn new_checked(buffer: T) -> Result<Self> {
        check_len("a MAD header", buffer.as_ref(), HEADER_LEN)?;
        Ok(Self { buffer })
    }

    /// Wraps a buffer whose length the caller has already checked against [`HEADER_LEN`].
    pub(crate) fn new_unchecked(buffer: T) -> Self {
        debug_assert!(buffer.as_ref().len() >= HEADER_LEN);
        Self { buffer }
    }

    /// Gives the buffer back.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The whole buffer, header included.
    pub fn as_bytes(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    /// BaseVersion (1 for InfiniBand).
    pub fn base_version(&self) -> u8 {
        self.buffer.as_ref()[field::BASE_VERSION]
    }

    /// MgmtClass.
    pub fn mgmt_class(&self) -> u8 {
        self.buffer.as_ref()[field::MGMT_CLASS]
    }

    /// ClassVersion.
    pub fn class_version(&self) -> u8 {
        self.buffer.as_ref()[field::CLASS_VERSION]
    }

    /// The Method byte, R bit included.
    pub fn method(&self) -> u8 {
        self.buffer.as_ref()[field::METHOD]
    }

    /// Status, all 16 bits (for directed-route SMPs bit 15 is the D bit).
    pub fn status(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field::STATUS)
    }

    /// ClassSpecific (for directed-route SMPs: HopPointer in the high byte, HopCount in the low).
    pub fn class_specific(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field::CLASS_SPECIFIC)
    }

    /// TransactionID. The MAD layer owns the upper 32 bits of a request's TID.
    pub fn tid(&self) -> u64 {
        u64_at(self.buffer.as_ref(), field::TID)
    }

    /// AttributeID.
    pub fn attr_id(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field::ATTR_ID)
    }

    /// AttributeModifier.
    pub fn attr_mod(&self) -> u32 {
        u32_at(self.buffer.as_ref(), field::ATTR_MOD)
    }

    /// Whether this MAD answers a request or a trap, by the kernel's `ib_response_mad` rule:
    /// the R bit is set, or the method is TrapRepress, or it is a baseboard-management MAD
    /// with bit 0 of the AttributeModifier set.
    pub fn is_response(&self) -> bool {
        is_response(self.mgmt_class(), self.method(), self.attr_mod())
    }

    /// Everything after the common header.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Mad<T> {
    /// Sets BaseVersion.
    pub fn set_base_version(&mut self, value: u8) {
        self.buffer.as_mut()[field::BASE_VERSION] = value;
    }

    /// Sets MgmtClass.
    pub fn set_mgmt_class(&mut self, value: u8) {
        self.buffer.as_mut()[field::MGMT_CLASS] = value;
    }

    /// Sets ClassVersion.
    pub fn set_class_version(&mut self, value: u8) {
        self.buffer.as_mut()[field::CLASS_VERSION] = value;
    }

    /// Sets the Method byte, R bit included.
    pub fn set_method(&mut self, value: u8) {
        self.buffer.as_mut()[field::METHOD] = value;
    }

    /// Sets all 16 bits of Status.
    pub fn set_status(&mut self, value: u16) {
        set_u16_at(self.buffer.as_mut(), field::STATUS, value);
    }

    /// Sets ClassSpecific.
    pub fn set_class_specific(&mut self, value: u16) {
        set_u16_at(self.buffer.as_mut(), field::CLASS_SPECIFIC, value);
    }

    /// Sets TransactionID.
    pub fn set_tid(&mut self, value: u64) {
        set_u64_at(self.buffer.as_mut(), field::TID, value);
    }

    /// Sets AttributeID.
    pub fn set_attr_id(&mut self, value: u16) {
        set_u16_at(self.buffer.as_mut(), field::ATTR_ID, value);
    }

    /// Clears the reserved bytes 18–19.
    pub fn clear_reserved(&mut self) {
        set_u16_at(self.buffer.as_mut(), field::RESERVED, 0);
    }

    /// Sets AttributeModifier.
    pub fn set_attr_mod(&mut self, value: u32) {
        set_u32_at(self.buffer.as_mut(), field::ATTR_MOD, value);
    }

    /// Everything after the common header, writable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[HEADER_LEN..]
    }

    /// Turns the request in this buffer into its response, in place, as an agent or SMA does
    /// before filling in the answer: the method becomes the response method
    /// ([`method::response_method`]), Status becomes `status`, and a directed-route SMP also
    /// gets its D bit set (returning). The TID, attribute, hop fields and paths are kept, as
    /// the kernel's `generate_unmatched_resp` keeps them.
    ///
    /// For a directed-route SMP, bit 15 of `status` is ignored: it is the D bit.
    pub fn make_response(&mut self, status: u16) -> Result<()> {
        let response = method::response_method(self.method())?;
        self.set_method(response);
        if self.mgmt_class() == class::SUBN_DIRECTED_ROUTE {
            self.set_status((status & status::DR_STATUS_MASK) | status::DR_DIRECTION);
        } else {
            self.set_status(status);
        }
        Ok(())
    }
}

/// The kernel's `ib_response_mad` rule on raw header values; see [`Mad::is_response`].
pub const fn is_response(mgmt_class: u8, method_byte: u8, attr_mod: u32) -> bool {
    method::has_response_bit(method_byte)
        || method_byte == method::TRAP_REPRESS
        || (mgmt_class == class::BM && attr_mod & BM_ATTR_MOD_RESPONSE != 0)
}

/// The common header as plain values.
///
/// Parsing accepts any BaseVersion and class, because a responder must read the header of a
/// MAD it cannot handle to answer it (BAD_VERSION, METHOD_UNSUPPORTED …); class parsers
/// ([`crate::smp::SmpRepr`] …) check what they need.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MadHeaderRepr {
    /// BaseVersion.
    pub base_version: u8,
    /// MgmtClass.
    pub mgmt_class: u8,
    /// ClassVersion.
    pub class_version: u8,
    /// Method byte, R bit included.
    pub method: u8,
    /// Status, all 16 bits.
    pub status: u16,
    /// ClassSpecific.
    pub class_specific: u16,
    /// TransactionID.
    pub tid: u64,
    /// AttributeID.
    pub attr_id: u16,
    /// AttributeModifier.
    pub attr_mod: u32,
}

impl MadHeaderRepr {
    /// A request header: base version 1, status 0, ClassSpecific 0.
    pub const fn request(
        mgmt_class: u8,
        class_version: u8,
        method: u8,
        tid: u64,
        attr_id: u16,
        attr_mod: u32,
    ) -> Self {
        Self {
            base_version: class::BASE_VERSION,
            mgmt_class,
            class_version,
            method,
            status: status::SUCCESS,
            class_specific: 0,
            tid,
            attr_id,
            attr_mod,
        }
    }

    /// Reads the header fields of `mad`.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(mad: &Mad<&T>) -> Result<Self> {
        Ok(Self {
            base_version: mad.base_version(),
            mgmt_class: mad.mgmt_class(),
            class_version: mad.class_version(),
            method: mad.method(),
            status: mad.status(),
            class_specific: mad.class_specific(),
            tid: mad.tid(),
            attr_id: mad.attr_id(),
            attr_mod: mad.attr_mod(),
        })
    }

    /// Bytes [`MadHeaderRepr::emit`] writes.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the header into `mad`, reserved bytes cleared; the payload is left alone.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(&self, mad: &mut Mad<&mut T>) {
        mad.set_base_version(self.base_version);
        mad.set_mgmt_class(self.mgmt_class);
        mad.set_class_version(self.class_version);
        mad.set_method(self.method);
        mad.set_status(self.status);
        mad.set_class_specific(self.class_specific);
        mad.set_tid(self.tid);
        mad.set_attr_id(self.attr_id);
        mad.clear_reserved();
        mad.set_attr_mod(self.attr_mod);
    }

    /// Whether this header is a response ([`Mad::is_response`]).
    pub const fn is_response(&self) -> bool {
        is_response(self.mgmt_class, self.method, self.attr_mod)
    }
}

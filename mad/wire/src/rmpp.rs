//! The RMPP header (IBA 13.6.2; kernel `struct ib_rmpp_hdr`), bytes 24–35 of a MAD of an
//! RMPP-capable class.
//!
//! | Offset | Size | Field |
//! |---|---|---|
//! | 24 | 1 | RMPPVersion |
//! | 25 | 1 | RMPPType |
//! | 26 | 1 | RRespTime (bits 3–7) / RMPPFlags (bits 0–2) |
//! | 27 | 1 | RMPPStatus |
//! | 28 | 4 | SegmentNumber |
//! | 32 | 4 | PayloadLength (DATA) / NewWindowLast (ACK) |

use crate::error::{Result, check_len};
use crate::field::{bits, set_bits_at, set_u32_at, u32_at};
use crate::header::Mad;

/// Offset just past the RMPP header: where SA and vendor headers continue.
pub const RMPP_HEADER_END: usize = 36;
/// The RMPP version the kernel speaks.
pub const VERSION: u8 = 1;

/// RMPPType values.
pub mod rmpp_type {
    /// No RMPP (the header is unused).
    pub const NONE: u8 = 0;
    /// A data segment.
    pub const DATA: u8 = 1;
    /// Acknowledges segments and opens the window.
    pub const ACK: u8 = 2;
    /// The receiver stops the transfer.
    pub const STOP: u8 = 3;
    /// Either side aborts the transfer.
    pub const ABORT: u8 = 4;
}

/// RMPPFlags bits.
pub mod flags {
    /// RMPP is active for this MAD.
    pub const ACTIVE: u8 = 0x1;
    /// First segment of a transfer.
    pub const FIRST: u8 = 0x2;
    /// Last segment of a transfer.
    pub const LAST: u8 = 0x4;
}

/// RRespTime meaning "no time given".
pub const NO_RESP_TIME: u8 = 0x1F;

/// RMPPStatus values.
pub mod rmpp_status {
    /// Normal.
    pub const SUCCESS: u8 = 0;
    /// Resources exhausted (STOP).
    pub const RESOURCES_EXHAUSTED: u8 = 1;
    /// Lowest abort code.
    pub const ABORT_MIN: u8 = 118;
    /// Total time too long.
    pub const T2L: u8 = 118;
    /// Inconsistent first and last PayloadLength.
    pub const BAD_LEN: u8 = 119;
    /// Inconsistent first segment number.
    pub const BAD_SEG: u8 = 120;
    /// Bad RMPPType.
    pub const BADT: u8 = 121;
    /// NewWindowLast too small.
    pub const W2S: u8 = 122;
    /// SegmentNumber too big.
    pub const S2B: u8 = 123;
    /// Illegal status.
    pub const BAD_STATUS: u8 = 124;
    /// Unsupported version.
    pub const UNV: u8 = 125;
    /// Too many retries.
    pub const TMR: u8 = 126;
    /// Unspecified error.
    pub const UNSPEC: u8 = 127;
    /// Highest abort code.
    pub const ABORT_MAX: u8 = 127;
}

mod field {
    pub const VERSION: usize = 24;
    pub const TYPE: usize = 25;
    pub const RTIME_FLAGS: usize = 26;
    pub const STATUS: usize = 27;
    pub const SEGMENT: usize = 28;
    pub const DATA2: usize = 32;
}

/// A typed view of a MAD through its RMPP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rmpp<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Rmpp<T> {
    /// Views `buffer` as a MAD with an RMPP header, checking that it holds 36 bytes.
    pub fn new_checked(buffer: T) -> Result<Self> {
        check_len("an RMPP header", buffer.as_ref(), RMPP_HEADER_END)?;
        Ok(Self { buffer })
    }

    /// Wraps a buffer the caller has checked against [`RMPP_HEADER_END`].
    pub(crate) fn new_unchecked(buffer: T) -> Self {
        debug_assert!(buffer.as_ref().len() >= RMPP_HEADER_END);
        Self { buffer }
    }

    /// Gives the buffer back.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The common header.
    pub fn header(&self) -> Mad<&[u8]> {
        Mad::new_unchecked(self.buffer.as_ref())
    }

    /// RMPPVersion.
    pub fn rmpp_version(&self) -> u8 {
        self.buffer.as_ref()[field::VERSION]
    }

    /// RMPPType ([`rmpp_type`]).
    pub fn rmpp_type(&self) -> u8 {
        self.buffer.as_ref()[field::TYPE]
    }

    /// RRespTime, the upper 5 bits of byte 26.
    pub fn resp_time(&self) -> u8 {
        bits(self.buffer.as_ref()[field::RTIME_FLAGS], 3, 5)
    }

    /// RMPPFlags, the low 3 bits of byte 26 ([`flags`]).
    pub fn flags(&self) -> u8 {
        bits(self.buffer.as_ref()[field::RTIME_FLAGS], 0, 3)
    }

    /// RMPPStatus ([`rmpp_status`]).
    pub fn rmpp_status(&self) -> u8 {
        self.buffer.as_ref()[field::STATUS]
    }

    /// SegmentNumber.
    pub fn segment_number(&self) -> u32 {
        u32_at(self.buffer.as_ref(), field::SEGMENT)
    }

    /// The second data word: PayloadLength in DATA, NewWindowLast in ACK.
    pub fn paylen_newwin(&self) -> u32 {
        u32_at(self.buffer.as_ref(), field::DATA2)
    }

    /// PayloadLength (DATA: total on the first segment, the remainder on the last).
    pub fn payload_length(&self) -> u32 {
        self.paylen_newwin()
    }

    /// NewWindowLast (ACK).
    pub fn new_window_last(&self) -> u32 {
        self.paylen_newwin()
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Rmpp<T> {
    /// The common header, writable.
    pub fn header_mut(&mut self) -> Mad<&mut [u8]> {
        Mad::new_unchecked(self.buffer.as_mut())
    }

    /// Sets RMPPVersion.
    pub fn set_rmpp_version(&mut self, value: u8) {
        self.buffer.as_mut()[field::VERSION] = value;
    }

    /// Sets RMPPType.
    pub fn set_rmpp_type(&mut self, value: u8) {
        self.buffer.as_mut()[field::TYPE] = value;
    }

    /// Sets RRespTime (5 bits; higher bits dropped).
    pub fn set_resp_time(&mut self, value: u8) {
        set_bits_at(self.buffer.as_mut(), field::RTIME_FLAGS, 3, 5, value);
    }

    /// Sets RMPPFlags (3 bits; higher bits dropped).
    pub fn set_flags(&mut self, value: u8) {
        set_bits_at(self.buffer.as_mut(), field::RTIME_FLAGS, 0, 3, value);
    }

    /// Sets RMPPStatus.
    pub fn set_rmpp_status(&mut self, value: u8) {
        self.buffer.as_mut()[field::STATUS] = value;
    }

    /// Sets SegmentNumber.
    pub fn set_segment_number(&mut self, value: u32) {
        set_u32_at(self.buffer.as_mut(), field::SEGMENT, value);
    }

    /// Sets PayloadLength / NewWindowLast.
    pub fn set_paylen_newwin(&mut self, value: u32) {
        set_u32_at(self.buffer.as_mut(), field::DATA2, value);
    }
}

/// The RMPP header as plain values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RmppRepr {
    /// RMPPVersion.
    pub version: u8,
    /// RMPPType ([`rmpp_type`]).
    pub rmpp_type: u8,
    /// RRespTime, 5 bits.
    pub resp_time: u8,
    /// RMPPFlags, 3 bits ([`flags`]).
    pub flags: u8,
    /// RMPPStatus ([`rmpp_status`]).
    pub status: u8,
    /// SegmentNumber.
    pub segment_number: u32,
    /// PayloadLength (DATA) or NewWindowLast (ACK).
    pub paylen_newwin: u32,
}

impl RmppRepr {
    /// A header saying "no RMPP": every field zero, as non-segmented SA MADs carry.
    pub const NONE: Self = Self {
        version: 0,
        rmpp_type: rmpp_type::NONE,
        resp_time: 0,
        flags: 0,
        status: 0,
        segment_number: 0,
        paylen_newwin: 0,
    };

    /// Reads the RMPP header of `rmpp`.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(rmpp: &Rmpp<&T>) -> Result<Self> {
        Ok(Self {
            version: rmpp.rmpp_version(),
            rmpp_type: rmpp.rmpp_type(),
            resp_time: rmpp.resp_time(),
            flags: rmpp.flags(),
            status: rmpp.rmpp_status(),
            segment_number: rmpp.segment_number(),
            paylen_newwin: rmpp.paylen_newwin(),
        })
    }

    /// Bytes [`RmppRepr::emit`] needs in the MAD: through offset 36.
    pub const fn buffer_len(&self) -> usize {
        RMPP_HEADER_END
    }

    /// Writes bytes 24–35; bits beyond a field's width are dropped.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(&self, rmpp: &mut Rmpp<&mut T>) {
        rmpp.set_rmpp_version(self.version);
        rmpp.set_rmpp_type(self.rmpp_type);
        rmpp.set_resp_time(self.resp_time);
        rmpp.set_flags(self.flags);
        rmpp.set_rmpp_status(self.status);
        rmpp.set_segment_number(self.segment_number);
        rmpp.set_paylen_newwin(self.paylen_newwin);
    }

    /// Whether the Active flag is set.
    pub const fn is_active(&self) -> bool {
        self.flags & flags::ACTIVE != 0
    }
}

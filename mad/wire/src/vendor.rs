//! Vendor range-2 MADs (classes 0x30–0x4F; kernel `struct ib_vendor_mad`): common header,
//! RMPP header, a reserved byte, the vendor's OUI, then 216 bytes of data.
//!
//! | Offset | Size | Field |
//! |---|---|---|
//! | 0 | 24 | common header |
//! | 24 | 12 | RMPP header |
//! | 36 | 1 | reserved |
//! | 37 | 3 | OUI |
//! | 40 | 216 | vendor data |

use crate::class;
use crate::error::{Error, Result, check_len};
use crate::field::{set_u24_at, u24_at};
use crate::header::{Mad, MadHeaderRepr};
use crate::rmpp::{Rmpp, RmppRepr};

/// Offset of the vendor data.
pub const DATA_OFFSET: usize = 40;
/// Length of the vendor data in one (non-RMPP) MAD.
pub const DATA_LEN: usize = 216;

mod field {
    pub const RESERVED: usize = 36;
    pub const OUI: usize = 37;
}

/// A typed view of a vendor range-2 MAD.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VendorMad<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> VendorMad<T> {
    /// Views `buffer` as a vendor range-2 MAD, checking that it holds the 40 header bytes.
    pub fn new_checked(buffer: T) -> Result<Self> {
        check_len("a vendor MAD header", buffer.as_ref(), DATA_OFFSET)?;
        Ok(Self { buffer })
    }

    /// Gives the buffer back.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The common header.
    pub fn header(&self) -> Mad<&[u8]> {
        Mad::new_unchecked(self.buffer.as_ref())
    }

    /// The RMPP header.
    pub fn rmpp(&self) -> Rmpp<&[u8]> {
        Rmpp::new_unchecked(self.buffer.as_ref())
    }

    /// The vendor's OUI (24 bits), which agents of vendor range-2 classes register by.
    pub fn oui(&self) -> u32 {
        u24_at(self.buffer.as_ref(), field::OUI)
    }

    /// The vendor data (everything from offset 40).
    pub fn data(&self) -> &[u8] {
        &self.buffer.as_ref()[DATA_OFFSET..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> VendorMad<T> {
    /// The common header, writable.
    pub fn header_mut(&mut self) -> Mad<&mut [u8]> {
        Mad::new_unchecked(self.buffer.as_mut())
    }

    /// The RMPP header, writable.
    pub fn rmpp_mut(&mut self) -> Rmpp<&mut [u8]> {
        Rmpp::new_unchecked(self.buffer.as_mut())
    }

    /// Sets the OUI (24 bits; higher bits dropped).
    pub fn set_oui(&mut self, value: u32) {
        set_u24_at(self.buffer.as_mut(), field::OUI, value);
    }

    /// Clears the reserved byte 36.
    pub fn clear_reserved(&mut self) {
        self.buffer.as_mut()[field::RESERVED] = 0;
    }

    /// The vendor data, writable.
    pub fn data_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[DATA_OFFSET..]
    }
}

/// The headers of a vendor range-2 MAD as plain values (the data stays in the buffer).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct VendorRepr {
    /// The common header.
    pub header: MadHeaderRepr,
    /// The RMPP header.
    pub rmpp: RmppRepr,
    /// The OUI, 24 bits.
    pub oui: u32,
}

impl VendorRepr {
    /// Reads the headers, refusing a BaseVersion other than 1 and a class outside 0x30–0x4F.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(mad: &VendorMad<&T>) -> Result<Self> {
        let header = MadHeaderRepr::parse(&mad.header())?;
        if header.base_version != class::BASE_VERSION {
            return Err(Error::BadBaseVersion {
                found: header.base_version,
            });
        }
        if !class::is_vendor_range2(header.mgmt_class) {
            return Err(Error::WrongClass {
                found: header.mgmt_class,
                expected: "a vendor range-2 class (0x30-0x4F)",
            });
        }
        Ok(Self {
            header,
            rmpp: RmppRepr::parse(&mad.rmpp())?,
            oui: mad.oui(),
        })
    }

    /// Bytes [`VendorRepr::emit`] writes: the 40 header bytes.
    pub const fn buffer_len(&self) -> usize {
        DATA_OFFSET
    }

    /// Writes bytes 0–39; the data is left alone.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(&self, mad: &mut VendorMad<&mut T>) {
        self.header.emit(&mut mad.header_mut());
        self.rmpp.emit(&mut mad.rmpp_mut());
        mad.clear_reserved();
        mad.set_oui(self.oui);
    }
}

//! The subnet-administration MAD (IBA 15.2.1.1; kernel `struct ib_sa_mad`): common header,
//! RMPP header, then the SA header and 200 bytes of data.
//!
//! | Offset | Size | Field |
//! |---|---|---|
//! | 0 | 24 | common header |
//! | 24 | 12 | RMPP header |
//! | 36 | 8 | SM_Key |
//! | 44 | 2 | AttributeOffset (in 8-byte words) |
//! | 46 | 2 | reserved |
//! | 48 | 8 | ComponentMask |
//! | 56 | 200 | SA data |

use crate::class;
use crate::error::{Error, Result, check_len};
use crate::field::{set_u16_at, set_u64_at, u16_at, u64_at};
use crate::header::{Mad, MadHeaderRepr};
use crate::rmpp::{Rmpp, RmppRepr};

/// Offset of the SA data.
pub const DATA_OFFSET: usize = 56;
/// Length of the SA data in one (non-RMPP) MAD.
pub const DATA_LEN: usize = 200;

mod field {
    pub const SM_KEY: usize = 36;
    pub const ATTR_OFFSET: usize = 44;
    pub const RESERVED: usize = 46;
    pub const COMPONENT_MASK: usize = 48;
}

/// A typed view of an SA MAD.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SaMad<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> SaMad<T> {
    /// Views `buffer` as an SA MAD, checking that it holds the 56 header bytes.
    pub fn new_checked(buffer: T) -> Result<Self> {
        check_len("an SA MAD header", buffer.as_ref(), DATA_OFFSET)?;
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

    /// SM_Key.
    pub fn sm_key(&self) -> u64 {
        u64_at(self.buffer.as_ref(), field::SM_KEY)
    }

    /// AttributeOffset: the size of one record, in 8-byte words (GetTable responses).
    pub fn attr_offset(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field::ATTR_OFFSET)
    }

    /// ComponentMask: which record fields a query matches on.
    pub fn component_mask(&self) -> u64 {
        u64_at(self.buffer.as_ref(), field::COMPONENT_MASK)
    }

    /// The SA data (everything from offset 56).
    pub fn data(&self) -> &[u8] {
        &self.buffer.as_ref()[DATA_OFFSET..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> SaMad<T> {
    /// The common header, writable.
    pub fn header_mut(&mut self) -> Mad<&mut [u8]> {
        Mad::new_unchecked(self.buffer.as_mut())
    }

    /// The RMPP header, writable.
    pub fn rmpp_mut(&mut self) -> Rmpp<&mut [u8]> {
        Rmpp::new_unchecked(self.buffer.as_mut())
    }

    /// Sets SM_Key.
    pub fn set_sm_key(&mut self, value: u64) {
        set_u64_at(self.buffer.as_mut(), field::SM_KEY, value);
    }

    /// Sets AttributeOffset.
    pub fn set_attr_offset(&mut self, value: u16) {
        set_u16_at(self.buffer.as_mut(), field::ATTR_OFFSET, value);
    }

    /// Clears the reserved bytes 46–47.
    pub fn clear_reserved(&mut self) {
        set_u16_at(self.buffer.as_mut(), field::RESERVED, 0);
    }

    /// Sets ComponentMask.
    pub fn set_component_mask(&mut self, value: u64) {
        set_u64_at(self.buffer.as_mut(), field::COMPONENT_MASK, value);
    }

    /// The SA data, writable.
    pub fn data_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[DATA_OFFSET..]
    }
}

/// The headers of an SA MAD as plain values (the data stays in the buffer).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SaRepr {
    /// The common header.
    pub header: MadHeaderRepr,
    /// The RMPP header.
    pub rmpp: RmppRepr,
    /// SM_Key.
    pub sm_key: u64,
    /// AttributeOffset, in 8-byte words.
    pub attr_offset: u16,
    /// ComponentMask.
    pub component_mask: u64,
}

impl SaRepr {
    /// Reads the headers of an SA MAD, refusing a BaseVersion other than 1 and a class other
    /// than SubnAdm (0x03).
    pub fn parse<T: AsRef<[u8]> + ?Sized>(sa: &SaMad<&T>) -> Result<Self> {
        let header = MadHeaderRepr::parse(&sa.header())?;
        if header.base_version != class::BASE_VERSION {
            return Err(Error::BadBaseVersion {
                found: header.base_version,
            });
        }
        if header.mgmt_class != class::SUBN_ADM {
            return Err(Error::WrongClass {
                found: header.mgmt_class,
                expected: "subnet administration (0x03)",
            });
        }
        Ok(Self {
            header,
            rmpp: RmppRepr::parse(&sa.rmpp())?,
            sm_key: sa.sm_key(),
            attr_offset: sa.attr_offset(),
            component_mask: sa.component_mask(),
        })
    }

    /// Bytes [`SaRepr::emit`] writes: the 56 header bytes.
    pub const fn buffer_len(&self) -> usize {
        DATA_OFFSET
    }

    /// Writes bytes 0–55; the data is left alone.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(&self, sa: &mut SaMad<&mut T>) {
        self.header.emit(&mut sa.header_mut());
        self.rmpp.emit(&mut sa.rmpp_mut());
        sa.set_sm_key(self.sm_key);
        sa.set_attr_offset(self.attr_offset);
        sa.clear_reserved();
        sa.set_component_mask(self.component_mask);
    }
}

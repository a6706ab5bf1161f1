//! GUIDInfo block (SM attribute 0x0014, 64 bytes; IBA 14.2.5.5, OpenSM `ib_guid_info_t`):
//! 8 port GUIDs (entry 0 of block 0 is the port GUID itself; the rest are alias GUIDs).
//! AttributeModifier = block number.

use crate::error::{Error, Result, check_len};
use crate::field::{set_u64_at, u64_at};

/// Length of one block.
pub const LEN: usize = 64;
/// GUIDs per block.
pub const GUIDS_PER_BLOCK: usize = 8;

/// A typed view of one GUIDInfo block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GuidInfo<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> GuidInfo<T> {
    /// Views `buffer` as a GUIDInfo block, checking that it holds 64 bytes.
    pub fn new_checked(buffer: T) -> Result<Self> {
        check_len("a GUIDInfo block", buffer.as_ref(), LEN)?;
        Ok(Self { buffer })
    }

    /// Gives the buffer back.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// GUID `index` (0–7).
    pub fn guid(&self, index: usize) -> Result<u64> {
        check_index(index)?;
        Ok(u64_at(self.buffer.as_ref(), index * 8))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> GuidInfo<T> {
    /// Sets GUID `index` (0–7).
    pub fn set_guid(&mut self, index: usize, guid: u64) -> Result<()> {
        check_index(index)?;
        set_u64_at(self.buffer.as_mut(), index * 8, guid);
        Ok(())
    }
}

fn check_index(index: usize) -> Result<()> {
    if index < GUIDS_PER_BLOCK {
        Ok(())
    } else {
        Err(Error::IndexOutOfRange {
            table: "a GUIDInfo block",
            index,
            len: GUIDS_PER_BLOCK,
        })
    }
}

/// One GUIDInfo block as plain values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GuidInfoRepr {
    /// The 8 GUIDs.
    pub guids: [u64; GUIDS_PER_BLOCK],
}

impl GuidInfoRepr {
    /// Reads the block.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(view: &GuidInfo<&T>) -> Result<Self> {
        let mut guids = [0u64; GUIDS_PER_BLOCK];
        for (i, guid) in guids.iter_mut().enumerate() {
            *guid = view.guid(i)?;
        }
        Ok(Self { guids })
    }

    /// Bytes [`GuidInfoRepr::emit`] writes.
    pub const fn buffer_len(&self) -> usize {
        LEN
    }

    /// Writes the block.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(&self, view: &mut GuidInfo<&mut T>) {
        for (i, &guid) in self.guids.iter().enumerate() {
            set_u64_at(view.buffer.as_mut(), i * 8, guid);
        }
    }
}

//! P_KeyTable block (SM attribute 0x0016, 64 bytes; IBA 14.2.5.7, OpenSM `ib_pkey_table_t`):
//! 32 P_Keys of 16 bits. AttributeModifier: bits 0–15 the block, bits 16–31 the port (switch
//! external ports; a CA ignores it).

use crate::error::{Error, Result, check_len};
use crate::field::{set_u16_at, u16_at};

/// Length of one block.
pub const LEN: usize = 64;
/// P_Keys per block.
pub const PKEYS_PER_BLOCK: usize = 32;
/// The default (full-membership) P_Key.
pub const DEFAULT_PKEY: u16 = 0xFFFF;
/// The limited-membership default P_Key.
pub const DEFAULT_PKEY_PARTIAL: u16 = 0x7FFF;
/// Bit 15 of a P_Key: full membership.
pub const FULL_MEMBER: u16 = 0x8000;
/// Bits 0–14 of a P_Key: the partition.
pub const BASE_MASK: u16 = 0x7FFF;

/// The block and port of a P_KeyTable AttributeModifier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PkeyAttrMod {
    /// Block, bits 0–15.
    pub block: u16,
    /// Port, bits 16–31.
    pub port: u16,
}

impl PkeyAttrMod {
    /// Splits an AttributeModifier.
    pub const fn from_attr_mod(attr_mod: u32) -> Self {
        Self {
            block: attr_mod as u16,
            port: (attr_mod >> 16) as u16,
        }
    }

    /// Builds the AttributeModifier.
    pub const fn to_attr_mod(self) -> u32 {
        ((self.port as u32) << 16) | self.block as u32
    }
}

/// A typed view of one P_KeyTable block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PkeyTable<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> PkeyTable<T> {
    /// Views `buffer` as a P_KeyTable block, checking that it holds 64 bytes.
    pub fn new_checked(buffer: T) -> Result<Self> {
        check_len("a P_KeyTable block", buffer.as_ref(), LEN)?;
        Ok(Self { buffer })
    }

    /// Gives the buffer back.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// P_Key `index` (0–31).
    pub fn pkey(&self, index: usize) -> Result<u16> {
        check_index(index)?;
        Ok(u16_at(self.buffer.as_ref(), index * 2))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> PkeyTable<T> {
    /// Sets P_Key `index` (0–31).
    pub fn set_pkey(&mut self, index: usize, pkey: u16) -> Result<()> {
        check_index(index)?;
        set_u16_at(self.buffer.as_mut(), index * 2, pkey);
        Ok(())
    }
}

fn check_index(index: usize) -> Result<()> {
    if index < PKEYS_PER_BLOCK {
        Ok(())
    } else {
        Err(Error::IndexOutOfRange {
            table: "a P_KeyTable block",
            index,
            len: PKEYS_PER_BLOCK,
        })
    }
}

/// One P_KeyTable block as plain values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PkeyTableRepr {
    /// The 32 P_Keys.
    pub pkeys: [u16; PKEYS_PER_BLOCK],
}

impl PkeyTableRepr {
    /// Reads the block.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(view: &PkeyTable<&T>) -> Result<Self> {
        let mut pkeys = [0u16; PKEYS_PER_BLOCK];
        for (i, pkey) in pkeys.iter_mut().enumerate() {
            *pkey = view.pkey(i)?;
        }
        Ok(Self { pkeys })
    }

    /// Bytes [`PkeyTableRepr::emit`] writes.
    pub const fn buffer_len(&self) -> usize {
        LEN
    }

    /// Writes the block.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(&self, view: &mut PkeyTable<&mut T>) {
        for (i, &pkey) in self.pkeys.iter().enumerate() {
            set_u16_at(view.buffer.as_mut(), i * 2, pkey);
        }
    }
}

//! VLArbitrationTable block (SM attribute 0x0018, 64 bytes; IBA 14.2.5.9, kernel
//! `struct ib_vl_weight_elem`, OpenSM `ib_vl_arb_table_t`): 32 entries of (reserved 4 bits,
//! VL 4 bits, Weight 8 bits).
//!
//! AttributeModifier: bits 16–31 the block (1 low priority 0–31, 2 low 32–63, 3 high 0–31,
//! 4 high 32–63), bits 0–15 the port.

use crate::error::{Error, Result, check_len};
use crate::field::{bits, set_bits_at};

/// Length of one block.
pub const LEN: usize = 64;
/// Entries per block.
pub const ENTRIES_PER_BLOCK: usize = 32;

/// Block numbers of the AttributeModifier.
pub mod block {
    /// Low-priority entries 0–31.
    pub const LOW_0_31: u16 = 1;
    /// Low-priority entries 32–63.
    pub const LOW_32_63: u16 = 2;
    /// High-priority entries 0–31.
    pub const HIGH_0_31: u16 = 3;
    /// High-priority entries 32–63.
    pub const HIGH_32_63: u16 = 4;
}

/// The block and port of a VLArbitrationTable AttributeModifier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct VlArbAttrMod {
    /// Block ([`block`]), bits 16–31.
    pub block: u16,
    /// Port, bits 0–15.
    pub port: u16,
}

impl VlArbAttrMod {
    /// Splits an AttributeModifier.
    pub const fn from_attr_mod(attr_mod: u32) -> Self {
        Self {
            block: (attr_mod >> 16) as u16,
            port: attr_mod as u16,
        }
    }

    /// Builds the AttributeModifier.
    pub const fn to_attr_mod(self) -> u32 {
        ((self.block as u32) << 16) | self.port as u32
    }
}

/// One arbitration entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct VlArbEntry {
    /// VL, 4 bits.
    pub vl: u8,
    /// Weight, in units of 64 bytes.
    pub weight: u8,
}

/// A typed view of one VLArbitrationTable block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VlArbTable<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> VlArbTable<T> {
    /// Views `buffer` as a VLArbitrationTable block, checking that it holds 64 bytes.
    pub fn new_checked(buffer: T) -> Result<Self> {
        check_len("a VLArbitrationTable block", buffer.as_ref(), LEN)?;
        Ok(Self { buffer })
    }

    /// Gives the buffer back.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Entry `index` (0–31).
    pub fn entry(&self, index: usize) -> Result<VlArbEntry> {
        check_index(index)?;
        let buf = self.buffer.as_ref();
        Ok(VlArbEntry {
            vl: bits(buf[index * 2], 0, 4),
            weight: buf[index * 2 + 1],
        })
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> VlArbTable<T> {
    /// Sets entry `index` (0–31), clearing its reserved bits; VL bits above 4 are dropped.
    pub fn set_entry(&mut self, index: usize, entry: VlArbEntry) -> Result<()> {
        check_index(index)?;
        let buf = self.buffer.as_mut();
        buf[index * 2] = 0;
        set_bits_at(buf, index * 2, 0, 4, entry.vl);
        buf[index * 2 + 1] = entry.weight;
        Ok(())
    }
}

fn check_index(index: usize) -> Result<()> {
    if index < ENTRIES_PER_BLOCK {
        Ok(())
    } else {
        Err(Error::IndexOutOfRange {
            table: "a VLArbitrationTable block",
            index,
            len: ENTRIES_PER_BLOCK,
        })
    }
}

/// One VLArbitrationTable block as plain values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct VlArbTableRepr {
    /// The 32 entries.
    pub entries: [VlArbEntry; ENTRIES_PER_BLOCK],
}

impl VlArbTableRepr {
    /// Reads the block.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(view: &VlArbTable<&T>) -> Result<Self> {
        let mut entries = [VlArbEntry::default(); ENTRIES_PER_BLOCK];
        for (i, entry) in entries.iter_mut().enumerate() {
            *entry = view.entry(i)?;
        }
        Ok(Self { entries })
    }

    /// Bytes [`VlArbTableRepr::emit`] writes.
    pub const fn buffer_len(&self) -> usize {
        LEN
    }

    /// Writes the block, reserved bits cleared.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(&self, view: &mut VlArbTable<&mut T>) {
        let buf = view.buffer.as_mut();
        for (i, entry) in self.entries.iter().enumerate() {
            buf[i * 2] = entry.vl & 0x0F;
            buf[i * 2 + 1] = entry.weight;
        }
    }
}

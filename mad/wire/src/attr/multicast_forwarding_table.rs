//! MulticastForwardingTable block (SM attribute 0x001B, 64 bytes; IBA 14.2.5.12, OpenSM
//! `IB_MCAST_*`): 32 port masks of 16 bits, one per multicast LID.
//!
//! AttributeModifier: bits 0–8 the block (MLIDs `0xC000 + 32·block …`), bits 28–31 the
//! position (the mask covers ports `16·position … 16·position+15`; bit `n` of a mask is port
//! `16·position + n`).

use crate::error::{Error, Result, check_len};
use crate::field::{set_u16_at, u16_at};

/// Length of one block.
pub const LEN: usize = 64;
/// Multicast LIDs per block.
pub const MLIDS_PER_BLOCK: usize = 32;
/// Ports per port mask.
pub const PORTS_PER_MASK: usize = 16;
/// The first multicast LID.
pub const MLID_START: u16 = 0xC000;
/// Mask of the block number in the AttributeModifier.
pub const BLOCK_MASK: u32 = 0x0000_01FF;
/// Shift of the position in the AttributeModifier.
pub const POSITION_SHIFT: u32 = 28;

/// The block number and port-mask position of an MFT AttributeModifier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MftAttrMod {
    /// Block, 9 bits.
    pub block: u16,
    /// Port-mask position, 4 bits.
    pub position: u8,
}

impl MftAttrMod {
    /// Splits an AttributeModifier; reserved bits 9–27 are ignored.
    pub const fn from_attr_mod(attr_mod: u32) -> Self {
        Self {
            block: (attr_mod & BLOCK_MASK) as u16,
            position: (attr_mod >> POSITION_SHIFT) as u8,
        }
    }

    /// Builds the AttributeModifier; bits beyond each field's width are dropped.
    pub const fn to_attr_mod(self) -> u32 {
        ((self.position as u32 & 0xF) << POSITION_SHIFT) | (self.block as u32 & BLOCK_MASK)
    }
}

/// A typed view of one MulticastForwardingTable block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MulticastForwardingTable<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> MulticastForwardingTable<T> {
    /// Views `buffer` as an MFT block, checking that it holds 64 bytes.
    pub fn new_checked(buffer: T) -> Result<Self> {
        check_len("a MulticastForwardingTable block", buffer.as_ref(), LEN)?;
        Ok(Self { buffer })
    }

    /// Gives the buffer back.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The port mask of entry `index` (0–31).
    pub fn port_mask(&self, index: usize) -> Result<u16> {
        check_index(index)?;
        Ok(u16_at(self.buffer.as_ref(), index * 2))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> MulticastForwardingTable<T> {
    /// Sets the port mask of entry `index` (0–31).
    pub fn set_port_mask(&mut self, index: usize, mask: u16) -> Result<()> {
        check_index(index)?;
        set_u16_at(self.buffer.as_mut(), index * 2, mask);
        Ok(())
    }
}

fn check_index(index: usize) -> Result<()> {
    if index < MLIDS_PER_BLOCK {
        Ok(())
    } else {
        Err(Error::IndexOutOfRange {
            table: "a MulticastForwardingTable block",
            index,
            len: MLIDS_PER_BLOCK,
        })
    }
}

/// One MFT block as plain values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MulticastForwardingTableRepr {
    /// Port mask per MLID of the block.
    pub port_masks: [u16; MLIDS_PER_BLOCK],
}

impl MulticastForwardingTableRepr {
    /// Reads the block.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(view: &MulticastForwardingTable<&T>) -> Result<Self> {
        let mut port_masks = [0u16; MLIDS_PER_BLOCK];
        for (i, mask) in port_masks.iter_mut().enumerate() {
            *mask = view.port_mask(i)?;
        }
        Ok(Self { port_masks })
    }

    /// Bytes [`MulticastForwardingTableRepr::emit`] writes.
    pub const fn buffer_len(&self) -> usize {
        LEN
    }

    /// Writes the block.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(
        &self,
        view: &mut MulticastForwardingTable<&mut T>,
    ) {
        for (i, &mask) in self.port_masks.iter().enumerate() {
            set_u16_at(view.buffer.as_mut(), i * 2, mask);
        }
    }
}

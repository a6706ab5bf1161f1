//! SLtoVLMappingTable (SM attribute 0x0017, 8 bytes; IBA 14.2.5.8, OpenSM `ib_slvl_table_t`):
//! a 4-bit VL for each of the 16 SLs, two per byte, the even SL in the high nibble.
//! AttributeModifier (switches): bits 8–15 the input port, bits 0–7 the output port.

use crate::error::{Error, Result, check_len};
use crate::field::{bits, set_bits_at};

/// Length of the table.
pub const LEN: usize = 8;
/// Number of service levels.
pub const SL_COUNT: usize = 16;
/// VL 15, the management VL; mapping an SL to it drops that SL's data packets.
pub const DROP_VL: u8 = 15;

/// The ports of an SLtoVLMappingTable AttributeModifier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SlToVlAttrMod {
    /// Input port, bits 8–15.
    pub input_port: u8,
    /// Output port, bits 0–7.
    pub output_port: u8,
}

impl SlToVlAttrMod {
    /// Splits an AttributeModifier; bits 16–31 are ignored.
    pub const fn from_attr_mod(attr_mod: u32) -> Self {
        Self {
            input_port: (attr_mod >> 8) as u8,
            output_port: attr_mod as u8,
        }
    }

    /// Builds the AttributeModifier.
    pub const fn to_attr_mod(self) -> u32 {
        ((self.input_port as u32) << 8) | self.output_port as u32
    }
}

/// A typed view of an SLtoVLMappingTable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlToVlTable<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> SlToVlTable<T> {
    /// Views `buffer` as an SLtoVLMappingTable, checking that it holds 8 bytes.
    pub fn new_checked(buffer: T) -> Result<Self> {
        check_len("an SLtoVLMappingTable", buffer.as_ref(), LEN)?;
        Ok(Self { buffer })
    }

    /// Gives the buffer back.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The VL of service level `sl` (0–15).
    pub fn vl(&self, sl: usize) -> Result<u8> {
        let (at, shift) = locate(sl)?;
        Ok(bits(self.buffer.as_ref()[at], shift, 4))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> SlToVlTable<T> {
    /// Sets the VL of service level `sl` (0–15); bits of `vl` above 4 are dropped.
    pub fn set_vl(&mut self, sl: usize, vl: u8) -> Result<()> {
        let (at, shift) = locate(sl)?;
        set_bits_at(self.buffer.as_mut(), at, shift, 4, vl);
        Ok(())
    }
}

/// Byte and nibble shift of `sl`: even SLs in the high nibble.
fn locate(sl: usize) -> Result<(usize, u32)> {
    if sl < SL_COUNT {
        Ok((sl / 2, if sl % 2 == 0 { 4 } else { 0 }))
    } else {
        Err(Error::IndexOutOfRange {
            table: "an SLtoVLMappingTable",
            index: sl,
            len: SL_COUNT,
        })
    }
}

/// An SLtoVLMappingTable as plain values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SlToVlTableRepr {
    /// VL per SL, 4 bits each.
    pub vls: [u8; SL_COUNT],
}

impl SlToVlTableRepr {
    /// Reads the table.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(view: &SlToVlTable<&T>) -> Result<Self> {
        let mut vls = [0u8; SL_COUNT];
        for (sl, vl) in vls.iter_mut().enumerate() {
            *vl = view.vl(sl)?;
        }
        Ok(Self { vls })
    }

    /// Bytes [`SlToVlTableRepr::emit`] writes.
    pub const fn buffer_len(&self) -> usize {
        LEN
    }

    /// Writes the table; bits of a VL above 4 are dropped.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(&self, view: &mut SlToVlTable<&mut T>) {
        for (sl, &vl) in self.vls.iter().enumerate() {
            let shift = if sl % 2 == 0 { 4 } else { 0 };
            set_bits_at(view.buffer.as_mut(), sl / 2, shift, 4, vl);
        }
    }
}

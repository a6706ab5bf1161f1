//! MAD_IFC (0x50d): hands a 256-byte MAD to the firmware's SMA/PMA and returns its response.

use crate::error::Result;
use crate::mlx5::bits::{Bytes, Field};
use crate::mlx5::opcode::Opcode;
use crate::mlx5::ops::{Command, CommandOutput, open_in, open_out, start_in, start_out};

/// Size of a MAD.
pub const MAD_LEN: usize = 256;
/// Size of `mad_ifc_in` and `mad_ifc_out`.
pub const MAD_IFC_LEN: usize = 0x110;

/// op_mod bits.
pub mod op_mod {
    /// Bit 0: the firmware ignores the M_Key.
    pub const IGNORE_MKEY: u16 = 0x1;
    /// Bit 1: the firmware ignores the B_Key.
    pub const IGNORE_BKEY: u16 = 0x2;
}

/// Field positions (mlx5_ifc.h `mad_ifc_in`, `mad_ifc_out`).
pub mod field {
    use super::{Bytes, Field, MAD_LEN};
    /// `mad_ifc_in.remote_lid`.
    pub const REMOTE_LID: Field = Field::new("remote_lid", 0x40, 16);
    /// `mad_ifc_in.port`.
    pub const PORT: Field = Field::new("port", 0x58, 8);
    /// `mad_ifc_in.mad`.
    pub const MAD: Bytes = Bytes::new("mad", 0x80, MAD_LEN);
    /// `mad_ifc_out.response_mad_packet`.
    pub const RESPONSE_MAD: Bytes = Bytes::new("response_mad_packet", 0x80, MAD_LEN);
}

/// MAD_IFC.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MadIfc {
    /// Skip the M_Key check.
    pub ignore_mkey: bool,
    /// Skip the B_Key check.
    pub ignore_bkey: bool,
    /// Source LID of the MAD (for a MAD received from the wire).
    pub remote_lid: u16,
    /// Port (1-based).
    pub port: u8,
    /// The MAD.
    pub mad: [u8; MAD_LEN],
}

/// MAD_IFC output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MadIfcOut {
    /// The response MAD.
    pub mad: [u8; MAD_LEN],
}

impl Command for MadIfc {
    const OPCODE: Opcode = Opcode::MAD_IFC;
    type Output = MadIfcOut;

    fn encode(&self) -> Result<Vec<u8>> {
        let mut om = 0;
        if self.ignore_mkey {
            om |= op_mod::IGNORE_MKEY;
        }
        if self.ignore_bkey {
            om |= op_mod::IGNORE_BKEY;
        }
        let mut b = start_in(Self::OPCODE, om, MAD_IFC_LEN)?;
        field::REMOTE_LID.set(&mut b, self.remote_lid.into())?;
        field::PORT.set(&mut b, self.port.into())?;
        field::MAD.set(&mut b, &self.mad)?;
        Ok(b)
    }

    fn decode(input: &[u8]) -> Result<Self> {
        let h = open_in(input, Self::OPCODE, "mad_ifc_in", MAD_IFC_LEN)?;
        let mut mad = [0u8; MAD_LEN];
        mad.copy_from_slice(field::MAD.get(input)?);
        Ok(MadIfc {
            ignore_mkey: h.op_mod & op_mod::IGNORE_MKEY != 0,
            ignore_bkey: h.op_mod & op_mod::IGNORE_BKEY != 0,
            remote_lid: field::REMOTE_LID.get(input)? as u16,
            port: field::PORT.get(input)? as u8,
            mad,
        })
    }

    fn out_len(&self) -> usize {
        MAD_IFC_LEN
    }
}

impl CommandOutput for MadIfcOut {
    fn encode(&self) -> Result<Vec<u8>> {
        let mut b = start_out(MAD_IFC_LEN);
        field::RESPONSE_MAD.set(&mut b, &self.mad)?;
        Ok(b)
    }

    fn decode(output: &[u8]) -> Result<Self> {
        open_out(output, "mad_ifc_out", MAD_IFC_LEN)?;
        let mut mad = [0u8; MAD_LEN];
        mad.copy_from_slice(field::RESPONSE_MAD.get(output)?);
        Ok(MadIfcOut { mad })
    }
}

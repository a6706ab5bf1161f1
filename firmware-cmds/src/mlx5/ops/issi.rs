//! QUERY_ISSI and SET_ISSI: negotiation of the interface step sequence id (the kernel speaks
//! ISSI 0 and 1).

use crate::error::Result;
use crate::mlx5::bits::Field;
use crate::mlx5::opcode::Opcode;
use crate::mlx5::ops::{Command, CommandOutput, NoPayload, open_in, open_out, start_in, start_out};

/// Field positions (mlx5_ifc.h `query_issi_out`, `set_issi_in`).
pub mod field {
    use super::Field;
    /// `query_issi_out.current_issi`.
    pub const CURRENT_ISSI_OUT: Field = Field::new("current_issi", 0x50, 16);
    /// `query_issi_out.supported_issi_dw0`: bit n set = ISSI n supported (n < 32).
    pub const SUPPORTED_ISSI_DW0: Field = Field::new("supported_issi_dw0", 0x360, 32);
    /// `set_issi_in.current_issi`.
    pub const CURRENT_ISSI_IN: Field = Field::new("current_issi", 0x50, 16);
}

/// Size of `query_issi_in`, `set_issi_in`, `set_issi_out`.
pub const ISSI_LEN: usize = 0x10;
/// Size of `query_issi_out`.
pub const QUERY_ISSI_OUT_LEN: usize = 0x70;

/// QUERY_ISSI (0x10a).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QueryIssi;

/// QUERY_ISSI output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QueryIssiOut {
    /// ISSI in force.
    pub current_issi: u16,
    /// Supported ISSIs 0..31 as a bitmask (`supported_issi_dw0`).
    pub supported_issi_dw0: u32,
}

impl QueryIssiOut {
    /// True if ISSI `n` (< 32) is supported.
    pub fn supports(&self, n: u32) -> bool {
        n < 32 && self.supported_issi_dw0 & (1 << n) != 0
    }
}

impl Command for QueryIssi {
    const OPCODE: Opcode = Opcode::QUERY_ISSI;
    type Output = QueryIssiOut;

    fn encode(&self) -> Result<Vec<u8>> {
        start_in(Self::OPCODE, 0, ISSI_LEN)
    }

    fn decode(input: &[u8]) -> Result<Self> {
        open_in(input, Self::OPCODE, "query_issi_in", ISSI_LEN)?;
        Ok(QueryIssi)
    }

    fn out_len(&self) -> usize {
        QUERY_ISSI_OUT_LEN
    }
}

impl CommandOutput for QueryIssiOut {
    fn encode(&self) -> Result<Vec<u8>> {
        let mut b = start_out(QUERY_ISSI_OUT_LEN);
        field::CURRENT_ISSI_OUT.set(&mut b, self.current_issi.into())?;
        field::SUPPORTED_ISSI_DW0.set(&mut b, self.supported_issi_dw0)?;
        Ok(b)
    }

    fn decode(output: &[u8]) -> Result<Self> {
        open_out(output, "query_issi_out", QUERY_ISSI_OUT_LEN)?;
        Ok(QueryIssiOut {
            current_issi: field::CURRENT_ISSI_OUT.get(output)? as u16,
            supported_issi_dw0: field::SUPPORTED_ISSI_DW0.get(output)?,
        })
    }
}

/// SET_ISSI (0x10b).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SetIssi {
    /// ISSI to use.
    pub current_issi: u16,
}

impl Command for SetIssi {
    const OPCODE: Opcode = Opcode::SET_ISSI;
    type Output = NoPayload<ISSI_LEN>;

    fn encode(&self) -> Result<Vec<u8>> {
        let mut b = start_in(Self::OPCODE, 0, ISSI_LEN)?;
        field::CURRENT_ISSI_IN.set(&mut b, self.current_issi.into())?;
        Ok(b)
    }

    fn decode(input: &[u8]) -> Result<Self> {
        open_in(input, Self::OPCODE, "set_issi_in", ISSI_LEN)?;
        Ok(SetIssi {
            current_issi: field::CURRENT_ISSI_IN.get(input)? as u16,
        })
    }

    fn out_len(&self) -> usize {
        ISSI_LEN
    }
}

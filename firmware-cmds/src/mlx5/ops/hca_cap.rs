//! QUERY_HCA_CAP (0x100) and SET_HCA_CAP (0x109).

use crate::error::Result;
use crate::mlx5::bits::Field;
use crate::mlx5::caps::{CAP_LEN, CapType, HcaCaps, check_len};
use crate::mlx5::opcode::Opcode;
use crate::mlx5::ops::{Command, CommandOutput, NoPayload, open_in, open_out, start_in, start_out};

/// Field positions (mlx5_ifc.h `query_hca_cap_in`, `set_hca_cap_in`).
pub mod field {
    use super::Field;
    /// `other_function`.
    pub const OTHER_FUNCTION: Field = Field::new("other_function", 0x40, 1);
    /// `function_id`.
    pub const FUNCTION_ID: Field = Field::new("function_id", 0x50, 16);
}

/// Byte offset of `capability` in `query_hca_cap_out` and `set_hca_cap_in`.
pub const CAPABILITY_OFFSET: usize = 0x10;
/// Size of `query_hca_cap_in` and `set_hca_cap_out`.
pub const HCA_CAP_SHORT_LEN: usize = 0x10;
/// Size of `query_hca_cap_out` and `set_hca_cap_in` (header + 0x1000-byte capability).
pub const HCA_CAP_LONG_LEN: usize = CAPABILITY_OFFSET + CAP_LEN;

/// Which values QUERY_HCA_CAP returns (op_mod bit 0, `HCA_CAP_OPMOD_GET_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CapMode {
    /// 0: the device's maximum.
    Max,
    /// 1: the values in force.
    Current,
}

/// QUERY_HCA_CAP: op_mod = (cap_type << 1) | mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueryHcaCap {
    /// Capability page.
    pub cap_type: CapType,
    /// Max or current.
    pub mode: CapMode,
    /// Ask about another function (a vport group manager only).
    pub other_function: bool,
    /// That function.
    pub function_id: u16,
}

impl QueryHcaCap {
    /// The general page, current or max, of this function.
    pub fn general(mode: CapMode) -> Self {
        QueryHcaCap {
            cap_type: CapType::GENERAL,
            mode,
            other_function: false,
            function_id: 0,
        }
    }
}

/// QUERY_HCA_CAP output.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct QueryHcaCapOut {
    /// The capability page.
    pub caps: HcaCaps,
}

impl Command for QueryHcaCap {
    const OPCODE: Opcode = Opcode::QUERY_HCA_CAP;
    type Output = QueryHcaCapOut;

    fn encode(&self) -> Result<Vec<u8>> {
        let mode = match self.mode {
            CapMode::Max => 0,
            CapMode::Current => 1,
        };
        let op_mod =
            crate::mlx5::bits::fit("op_mod", (u64::from(self.cap_type.0) << 1) | mode, 16)?;
        let mut b = start_in(Self::OPCODE, op_mod as u16, HCA_CAP_SHORT_LEN)?;
        field::OTHER_FUNCTION.set_bool(&mut b, self.other_function)?;
        field::FUNCTION_ID.set(&mut b, self.function_id.into())?;
        Ok(b)
    }

    fn decode(input: &[u8]) -> Result<Self> {
        let h = open_in(input, Self::OPCODE, "query_hca_cap_in", HCA_CAP_SHORT_LEN)?;
        Ok(QueryHcaCap {
            cap_type: CapType(h.op_mod >> 1),
            mode: if h.op_mod & 1 == 1 {
                CapMode::Current
            } else {
                CapMode::Max
            },
            other_function: field::OTHER_FUNCTION.get_bool(input)?,
            function_id: field::FUNCTION_ID.get(input)? as u16,
        })
    }

    fn out_len(&self) -> usize {
        HCA_CAP_LONG_LEN
    }
}

impl CommandOutput for QueryHcaCapOut {
    fn encode(&self) -> Result<Vec<u8>> {
        let mut b = start_out(CAPABILITY_OFFSET);
        b.extend_from_slice(self.caps.as_bytes());
        Ok(b)
    }

    fn decode(output: &[u8]) -> Result<Self> {
        open_out(output, "query_hca_cap_out", HCA_CAP_LONG_LEN)?;
        Ok(QueryHcaCapOut {
            caps: HcaCaps::from_bytes(&output[CAPABILITY_OFFSET..HCA_CAP_LONG_LEN])?,
        })
    }
}

/// SET_HCA_CAP: op_mod = cap_type << 1; carries a whole capability page (the kernel sends the
/// current page with its changes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetHcaCap {
    /// Capability page.
    pub cap_type: CapType,
    /// Set another function's caps (a vport group manager only).
    pub other_function: bool,
    /// That function.
    pub function_id: u16,
    /// The page to write.
    pub caps: HcaCaps,
}

impl Command for SetHcaCap {
    const OPCODE: Opcode = Opcode::SET_HCA_CAP;
    type Output = NoPayload<HCA_CAP_SHORT_LEN>;

    fn encode(&self) -> Result<Vec<u8>> {
        let op_mod = crate::mlx5::bits::fit("op_mod", u64::from(self.cap_type.0) << 1, 16)?;
        let mut b = start_in(Self::OPCODE, op_mod as u16, CAPABILITY_OFFSET)?;
        field::OTHER_FUNCTION.set_bool(&mut b, self.other_function)?;
        field::FUNCTION_ID.set(&mut b, self.function_id.into())?;
        check_len(self.caps.as_bytes())?;
        b.extend_from_slice(self.caps.as_bytes());
        Ok(b)
    }

    fn decode(input: &[u8]) -> Result<Self> {
        let h = open_in(input, Self::OPCODE, "set_hca_cap_in", HCA_CAP_LONG_LEN)?;
        Ok(SetHcaCap {
            cap_type: CapType(h.op_mod >> 1),
            other_function: field::OTHER_FUNCTION.get_bool(input)?,
            function_id: field::FUNCTION_ID.get(input)? as u16,
            caps: HcaCaps::from_bytes(&input[CAPABILITY_OFFSET..HCA_CAP_LONG_LEN])?,
        })
    }

    fn out_len(&self) -> usize {
        HCA_CAP_SHORT_LEN
    }
}

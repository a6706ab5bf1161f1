//! QUERY_SPECIAL_CONTEXTS (0x203): the device's reserved memory keys. The driver uses
//! `resd_lkey` (physical-address access, here IOVA access through the IOMMU) for its DMA
//! buffers instead of registering memory with CREATE_MKEY.

use crate::error::Result;
use crate::mlx5::bits::Field;
use crate::mlx5::opcode::Opcode;
use crate::mlx5::ops::{Command, CommandOutput, open_in, open_out, start_in, start_out};

/// Field positions (mlx5_ifc.h `query_special_contexts_out`).
pub mod field {
    use super::Field;
    /// `dump_fill_mkey`.
    pub const DUMP_FILL_MKEY: Field = Field::new("dump_fill_mkey", 0x40, 32);
    /// `resd_lkey`: reserved lkey for physical/IOVA addressing.
    pub const RESD_LKEY: Field = Field::new("resd_lkey", 0x60, 32);
    /// `null_mkey`.
    pub const NULL_MKEY: Field = Field::new("null_mkey", 0x80, 32);
    /// `terminate_scatter_list_mkey`.
    pub const TERMINATE_SCATTER_LIST_MKEY: Field =
        Field::new("terminate_scatter_list_mkey", 0xa0, 32);
    /// `repeated_mkey`.
    pub const REPEATED_MKEY: Field = Field::new("repeated_mkey", 0xc0, 32);
}

/// Size of `query_special_contexts_in`.
pub const QUERY_SPECIAL_CONTEXTS_IN_LEN: usize = 0x10;
/// Size of `query_special_contexts_out`.
pub const QUERY_SPECIAL_CONTEXTS_OUT_LEN: usize = 0x20;

/// QUERY_SPECIAL_CONTEXTS.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QuerySpecialContexts;

/// QUERY_SPECIAL_CONTEXTS output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SpecialContexts {
    /// `dump_fill_mkey`.
    pub dump_fill_mkey: u32,
    /// `resd_lkey`: the lkey for buffers addressed by IOVA.
    pub resd_lkey: u32,
    /// `null_mkey` (valid when the `null_mkey` cap is set).
    pub null_mkey: u32,
    /// `terminate_scatter_list_mkey`.
    pub terminate_scatter_list_mkey: u32,
    /// `repeated_mkey`.
    pub repeated_mkey: u32,
}

impl Command for QuerySpecialContexts {
    const OPCODE: Opcode = Opcode::QUERY_SPECIAL_CONTEXTS;
    type Output = SpecialContexts;

    fn encode(&self) -> Result<Vec<u8>> {
        start_in(Self::OPCODE, 0, QUERY_SPECIAL_CONTEXTS_IN_LEN)
    }

    fn decode(input: &[u8]) -> Result<Self> {
        open_in(
            input,
            Self::OPCODE,
            "query_special_contexts_in",
            QUERY_SPECIAL_CONTEXTS_IN_LEN,
        )?;
        Ok(QuerySpecialContexts)
    }

    fn out_len(&self) -> usize {
        QUERY_SPECIAL_CONTEXTS_OUT_LEN
    }
}

impl CommandOutput for SpecialContexts {
    fn encode(&self) -> Result<Vec<u8>> {
        let mut b = start_out(QUERY_SPECIAL_CONTEXTS_OUT_LEN);
        field::DUMP_FILL_MKEY.set(&mut b, self.dump_fill_mkey)?;
        field::RESD_LKEY.set(&mut b, self.resd_lkey)?;
        field::NULL_MKEY.set(&mut b, self.null_mkey)?;
        field::TERMINATE_SCATTER_LIST_MKEY.set(&mut b, self.terminate_scatter_list_mkey)?;
        field::REPEATED_MKEY.set(&mut b, self.repeated_mkey)?;
        Ok(b)
    }

    fn decode(output: &[u8]) -> Result<Self> {
        open_out(
            output,
            "query_special_contexts_out",
            QUERY_SPECIAL_CONTEXTS_OUT_LEN,
        )?;
        Ok(SpecialContexts {
            dump_fill_mkey: field::DUMP_FILL_MKEY.get(output)?,
            resd_lkey: field::RESD_LKEY.get(output)?,
            null_mkey: field::NULL_MKEY.get(output)?,
            terminate_scatter_list_mkey: field::TERMINATE_SCATTER_LIST_MKEY.get(output)?,
            repeated_mkey: field::REPEATED_MKEY.get(output)?,
        })
    }
}

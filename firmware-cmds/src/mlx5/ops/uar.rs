//! ALLOC_UAR (0x802) and DEALLOC_UAR (0x803).

use crate::error::Result;
use crate::mlx5::bits::Field;
use crate::mlx5::opcode::Opcode;
use crate::mlx5::ops::{Command, CommandOutput, NoPayload, open_in, open_out, start_in, start_out};

/// Field positions (mlx5_ifc.h `alloc_uar_out.uar`, `dealloc_uar_in.uar`).
pub mod field {
    use super::Field;
    /// `uar`: UAR index, 24 bits.
    pub const UAR: Field = Field::new("uar", 0x48, 24);
}

/// Size of every ALLOC_UAR / DEALLOC_UAR input and output.
pub const UAR_LEN: usize = 0x10;

/// ALLOC_UAR: allocates a UAR page (doorbells for EQs, CQs, QPs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AllocUar;

/// ALLOC_UAR output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AllocUarOut {
    /// UAR index; its page is at BAR0 + index * UAR size.
    pub uar: u32,
}

impl Command for AllocUar {
    const OPCODE: Opcode = Opcode::ALLOC_UAR;
    type Output = AllocUarOut;

    fn encode(&self) -> Result<Vec<u8>> {
        start_in(Self::OPCODE, 0, UAR_LEN)
    }

    fn decode(input: &[u8]) -> Result<Self> {
        open_in(input, Self::OPCODE, "alloc_uar_in", UAR_LEN)?;
        Ok(AllocUar)
    }

    fn out_len(&self) -> usize {
        UAR_LEN
    }
}

impl CommandOutput for AllocUarOut {
    fn encode(&self) -> Result<Vec<u8>> {
        let mut b = start_out(UAR_LEN);
        field::UAR.set(&mut b, self.uar)?;
        Ok(b)
    }

    fn decode(output: &[u8]) -> Result<Self> {
        open_out(output, "alloc_uar_out", UAR_LEN)?;
        Ok(AllocUarOut {
            uar: field::UAR.get(output)?,
        })
    }
}

/// DEALLOC_UAR.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DeallocUar {
    /// UAR index to free.
    pub uar: u32,
}

impl Command for DeallocUar {
    const OPCODE: Opcode = Opcode::DEALLOC_UAR;
    type Output = NoPayload<UAR_LEN>;

    fn encode(&self) -> Result<Vec<u8>> {
        let mut b = start_in(Self::OPCODE, 0, UAR_LEN)?;
        field::UAR.set(&mut b, self.uar)?;
        Ok(b)
    }

    fn decode(input: &[u8]) -> Result<Self> {
        open_in(input, Self::OPCODE, "dealloc_uar_in", UAR_LEN)?;
        Ok(DeallocUar {
            uar: field::UAR.get(input)?,
        })
    }

    fn out_len(&self) -> usize {
        UAR_LEN
    }
}

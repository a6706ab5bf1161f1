//! ALLOC_PD (0x800) and DEALLOC_PD (0x801).

use crate::error::Result;
use crate::mlx5::bits::Field;
use crate::mlx5::opcode::Opcode;
use crate::mlx5::ops::{Command, CommandOutput, NoPayload, open_in, open_out, start_in, start_out};

/// Field positions (mlx5_ifc.h `alloc_pd_out.pd`, `dealloc_pd_in.pd`).
pub mod field {
    use super::Field;
    /// `pd`: protection domain number, 24 bits.
    pub const PD: Field = Field::new("pd", 0x48, 24);
}

/// Size of every ALLOC_PD / DEALLOC_PD input and output.
pub const PD_LEN: usize = 0x10;

/// ALLOC_PD: allocates a protection domain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AllocPd;

/// ALLOC_PD output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AllocPdOut {
    /// Protection domain number.
    pub pd: u32,
}

impl Command for AllocPd {
    const OPCODE: Opcode = Opcode::ALLOC_PD;
    type Output = AllocPdOut;

    fn encode(&self) -> Result<Vec<u8>> {
        start_in(Self::OPCODE, 0, PD_LEN)
    }

    fn decode(input: &[u8]) -> Result<Self> {
        open_in(input, Self::OPCODE, "alloc_pd_in", PD_LEN)?;
        Ok(AllocPd)
    }

    fn out_len(&self) -> usize {
        PD_LEN
    }
}

impl CommandOutput for AllocPdOut {
    fn encode(&self) -> Result<Vec<u8>> {
        let mut b = start_out(PD_LEN);
        field::PD.set(&mut b, self.pd)?;
        Ok(b)
    }

    fn decode(output: &[u8]) -> Result<Self> {
        open_out(output, "alloc_pd_out", PD_LEN)?;
        Ok(AllocPdOut {
            pd: field::PD.get(output)?,
        })
    }
}

/// DEALLOC_PD.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DeallocPd {
    /// Protection domain to free.
    pub pd: u32,
}

impl Command for DeallocPd {
    const OPCODE: Opcode = Opcode::DEALLOC_PD;
    type Output = NoPayload<PD_LEN>;

    fn encode(&self) -> Result<Vec<u8>> {
        let mut b = start_in(Self::OPCODE, 0, PD_LEN)?;
        field::PD.set(&mut b, self.pd)?;
        Ok(b)
    }

    fn decode(input: &[u8]) -> Result<Self> {
        open_in(input, Self::OPCODE, "dealloc_pd_in", PD_LEN)?;
        Ok(DeallocPd {
            pd: field::PD.get(input)?,
        })
    }

    fn out_len(&self) -> usize {
        PD_LEN
    }
}

//! CREATE_CQ (0x400) and DESTROY_CQ (0x401).

use crate::error::{Error, Result};
use crate::mlx5::bits::Field;
use crate::mlx5::cqc::{CQC_LEN, Cqc};
use crate::mlx5::opcode::Opcode;
use crate::mlx5::ops::{
    Command, CommandOutput, NoPayload, open_in, open_out, pas, start_in, start_out,
};

/// Field positions (mlx5_ifc.h `create_cq_out.cqn`, `destroy_cq_in.cqn`).
pub mod field {
    use super::Field;
    /// `cqn`.
    pub const CQN: Field = Field::new("cqn", 0x48, 24);
}

/// Byte offset of `cq_context` in `create_cq_in`.
pub const CQC_OFFSET: usize = 0x10;
/// Byte offset of `pas` in `create_cq_in`.
pub const PAS_OFFSET: usize = 0x110;
/// Size of `create_cq_out`, `destroy_cq_in`, `destroy_cq_out`.
pub const CQ_SHORT_LEN: usize = 0x10;

/// CREATE_CQ.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CreateCq {
    /// The CQ context.
    pub ctx: Cqc,
    /// 4 KiB page addresses of the CQ buffer.
    pub pas: Vec<u64>,
}

/// CREATE_CQ output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CreateCqOut {
    /// CQ number.
    pub cqn: u32,
}

impl Command for CreateCq {
    const OPCODE: Opcode = Opcode::CREATE_CQ;
    type Output = CreateCqOut;

    fn encode(&self) -> Result<Vec<u8>> {
        let mut b = start_in(Self::OPCODE, 0, PAS_OFFSET)?;
        self.ctx
            .encode_into(&mut b[CQC_OFFSET..CQC_OFFSET + CQC_LEN])?;
        pas::put(&mut b, &self.pas)?;
        Ok(b)
    }

    fn decode(input: &[u8]) -> Result<Self> {
        open_in(input, Self::OPCODE, "create_cq_in", PAS_OFFSET)?;
        if (input.len() - PAS_OFFSET) % pas::PAS_ENTRY != 0 {
            return Err(Error::Invalid {
                what: "create_cq_in",
                reason: "inlen leaves a partial pas entry",
            });
        }
        Ok(CreateCq {
            ctx: Cqc::decode(&input[CQC_OFFSET..CQC_OFFSET + CQC_LEN])?,
            pas: pas::get_rest(input, PAS_OFFSET),
        })
    }

    fn out_len(&self) -> usize {
        CQ_SHORT_LEN
    }
}

impl CommandOutput for CreateCqOut {
    fn encode(&self) -> Result<Vec<u8>> {
        let mut b = start_out(CQ_SHORT_LEN);
        field::CQN.set(&mut b, self.cqn)?;
        Ok(b)
    }

    fn decode(output: &[u8]) -> Result<Self> {
        open_out(output, "create_cq_out", CQ_SHORT_LEN)?;
        Ok(CreateCqOut {
            cqn: field::CQN.get(output)?,
        })
    }
}

/// DESTROY_CQ.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DestroyCq {
    /// CQ number.
    pub cqn: u32,
}

impl Command for DestroyCq {
    const OPCODE: Opcode = Opcode::DESTROY_CQ;
    type Output = NoPayload<CQ_SHORT_LEN>;

    fn encode(&self) -> Result<Vec<u8>> {
        let mut b = start_in(Self::OPCODE, 0, CQ_SHORT_LEN)?;
        field::CQN.set(&mut b, self.cqn)?;
        Ok(b)
    }

    fn decode(input: &[u8]) -> Result<Self> {
        open_in(input, Self::OPCODE, "destroy_cq_in", CQ_SHORT_LEN)?;
        Ok(DestroyCq {
            cqn: field::CQN.get(input)?,
        })
    }

    fn out_len(&self) -> usize {
        CQ_SHORT_LEN
    }
}

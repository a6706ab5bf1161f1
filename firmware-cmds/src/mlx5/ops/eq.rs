//! CREATE_EQ (0x301) and DESTROY_EQ (0x302).

use crate::error::{Error, Result};
use crate::mlx5::bits::{Field, Field64};
use crate::mlx5::eqc::{EQC_LEN, Eqc};
use crate::mlx5::opcode::Opcode;
use crate::mlx5::ops::{
    Command, CommandOutput, NoPayload, open_in, open_out, pas, start_in, start_out,
};

/// Field positions (mlx5_ifc.h `create_eq_in`, `create_eq_out`, `destroy_eq_in`).
pub mod field {
    use super::{Field, Field64};
    /// `create_eq_out.eq_number` / `destroy_eq_in.eq_number`.
    pub const EQ_NUMBER: Field = Field::new("eq_number", 0x58, 8);
    /// `create_eq_in.event_bitmask[0]` (events 0..63); entries 1..3 follow every 64 bits.
    pub const EVENT_BITMASK_0: Field64 = Field64::new("event_bitmask", 0x2c0);
}

/// Byte offset of `eq_context_entry` in `create_eq_in`.
pub const EQC_OFFSET: usize = 0x10;
/// Byte offset of `event_bitmask` (4 × 64 bits) in `create_eq_in`.
pub const EVENT_BITMASK_OFFSET: usize = 0x58;
/// Byte offset of `pas` in `create_eq_in`.
pub const PAS_OFFSET: usize = 0x110;
/// Size of `create_eq_out`, `destroy_eq_in`, `destroy_eq_out`.
pub const EQ_SHORT_LEN: usize = 0x10;

/// CREATE_EQ.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CreateEq {
    /// The EQ context.
    pub ctx: Eqc,
    /// Event types routed to this EQ: bit `t % 64` of word `t / 64` is event type `t`.
    pub event_bitmask: [u64; 4],
    /// 4 KiB page addresses of the EQ buffer.
    pub pas: Vec<u64>,
}

impl CreateEq {
    /// Routes event type `t` (< 256) to this EQ.
    #[must_use]
    pub fn with_event(mut self, t: u8) -> Self {
        self.event_bitmask[usize::from(t / 64)] |= 1u64 << (t % 64);
        self
    }
}

/// CREATE_EQ output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CreateEqOut {
    /// EQ number.
    pub eqn: u8,
}

impl Command for CreateEq {
    const OPCODE: Opcode = Opcode::CREATE_EQ;
    type Output = CreateEqOut;

    fn encode(&self) -> Result<Vec<u8>> {
        let mut b = start_in(Self::OPCODE, 0, PAS_OFFSET)?;
        self.ctx
            .encode_into(&mut b[EQC_OFFSET..EQC_OFFSET + EQC_LEN])?;
        for (i, w) in self.event_bitmask.iter().enumerate() {
            let at = EVENT_BITMASK_OFFSET + 8 * i;
            b[at..at + 8].copy_from_slice(&w.to_be_bytes());
        }
        pas::put(&mut b, &self.pas)?;
        Ok(b)
    }

    fn decode(input: &[u8]) -> Result<Self> {
        open_in(input, Self::OPCODE, "create_eq_in", PAS_OFFSET)?;
        let mut event_bitmask = [0u64; 4];
        for (i, w) in event_bitmask.iter_mut().enumerate() {
            let at = EVENT_BITMASK_OFFSET + 8 * i;
            let mut a = [0u8; 8];
            a.copy_from_slice(&input[at..at + 8]);
            *w = u64::from_be_bytes(a);
        }
        if (input.len() - PAS_OFFSET) % pas::PAS_ENTRY != 0 {
            return Err(Error::Invalid {
                what: "create_eq_in",
                reason: "inlen leaves a partial pas entry",
            });
        }
        Ok(CreateEq {
            ctx: Eqc::decode(&input[EQC_OFFSET..EQC_OFFSET + EQC_LEN])?,
            event_bitmask,
            pas: pas::get_rest(input, PAS_OFFSET),
        })
    }

    fn out_len(&self) -> usize {
        EQ_SHORT_LEN
    }
}

impl CommandOutput for CreateEqOut {
    fn encode(&self) -> Result<Vec<u8>> {
        let mut b = start_out(EQ_SHORT_LEN);
        field::EQ_NUMBER.set(&mut b, self.eqn.into())?;
        Ok(b)
    }

    fn decode(output: &[u8]) -> Result<Self> {
        open_out(output, "create_eq_out", EQ_SHORT_LEN)?;
        Ok(CreateEqOut {
            eqn: field::EQ_NUMBER.get(output)? as u8,
        })
    }
}

/// DESTROY_EQ.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DestroyEq {
    /// EQ number.
    pub eqn: u8,
}

impl Command for DestroyEq {
    const OPCODE: Opcode = Opcode::DESTROY_EQ;
    type Output = NoPayload<EQ_SHORT_LEN>;

    fn encode(&self) -> Result<Vec<u8>> {
        let mut b = start_in(Self::OPCODE, 0, EQ_SHORT_LEN)?;
        field::EQ_NUMBER.set(&mut b, self.eqn.into())?;
        Ok(b)
    }

    fn decode(input: &[u8]) -> Result<Self> {
        open_in(input, Self::OPCODE, "destroy_eq_in", EQ_SHORT_LEN)?;
        Ok(DestroyEq {
            eqn: field::EQ_NUMBER.get(input)? as u8,
        })
    }

    fn out_len(&self) -> usize {
        EQ_SHORT_LEN
    }
}

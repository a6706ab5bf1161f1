//! CREATE_QP (0x500), DESTROY_QP (0x501) and QUERY_QP (0x50b).

use crate::error::{Error, Result};
use crate::mlx5::bits::Field;
use crate::mlx5::opcode::Opcode;
use crate::mlx5::ops::{
    Command, CommandOutput, NoPayload, open_in, open_out, pas, start_in, start_out,
};
use crate::mlx5::qpc::{QPC_LEN, Qpc};

/// Field positions (mlx5_ifc.h `create_qp_in`, `create_qp_out`, `destroy_qp_in`,
/// `query_qp_in`, `query_qp_out`).
pub mod field {
    use super::Field;
    /// `create_qp_out.qpn`, `destroy_qp_in.qpn`, `query_qp_in.qpn` and the modify inputs' `qpn`.
    pub const QPN: Field = Field::new("qpn", 0x48, 24);
    /// `create_qp_in.input_qpn`.
    pub const INPUT_QPN: Field = Field::new("input_qpn", 0x48, 24);
    /// `opt_param_mask` of `create_qp_in`, the modify inputs and `query_qp_out`.
    pub const OPT_PARAM_MASK: Field = Field::new("opt_param_mask", 0x80, 32);
}

/// Byte offset of `qpc` in `create_qp_in`, the modify inputs and `query_qp_out`.
pub const QPC_OFFSET: usize = 0x18;
/// Byte offset of `pas` in `create_qp_in`.
pub const PAS_OFFSET: usize = 0x110;
/// Size of the short QP inputs/outputs.
pub const QP_SHORT_LEN: usize = 0x10;
/// Size of `query_qp_out` up to its `pas` list (rdma-core's `query_qp_out`; newer kernels
/// append a QPC extension after it).
pub const QUERY_QP_OUT_LEN: usize = 0x110;

/// CREATE_QP.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CreateQp {
    /// The QP context (state is ignored by the device; QPs are created in RST).
    pub ctx: Qpc,
    /// `opt_param_mask`.
    pub opt_param_mask: u32,
    /// `input_qpn` (0: the device chooses).
    pub input_qpn: u32,
    /// 4 KiB page addresses of the QP buffer (RQ first, then SQ).
    pub pas: Vec<u64>,
}

/// CREATE_QP output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CreateQpOut {
    /// QP number assigned by the device.
    pub qpn: u32,
}

impl Command for CreateQp {
    const OPCODE: Opcode = Opcode::CREATE_QP;
    type Output = CreateQpOut;

    fn encode(&self) -> Result<Vec<u8>> {
        let mut b = start_in(Self::OPCODE, 0, PAS_OFFSET)?;
        field::INPUT_QPN.set(&mut b, self.input_qpn)?;
        field::OPT_PARAM_MASK.set(&mut b, self.opt_param_mask)?;
        self.ctx
            .encode_into(&mut b[QPC_OFFSET..QPC_OFFSET + QPC_LEN])?;
        pas::put(&mut b, &self.pas)?;
        Ok(b)
    }

    fn decode(input: &[u8]) -> Result<Self> {
        open_in(input, Self::OPCODE, "create_qp_in", PAS_OFFSET)?;
        if (input.len() - PAS_OFFSET) % pas::PAS_ENTRY != 0 {
            return Err(Error::Invalid {
                what: "create_qp_in",
                reason: "inlen leaves a partial pas entry",
            });
        }
        Ok(CreateQp {
            ctx: Qpc::decode(&input[QPC_OFFSET..QPC_OFFSET + QPC_LEN])?,
            opt_param_mask: field::OPT_PARAM_MASK.get(input)?,
            input_qpn: field::INPUT_QPN.get(input)?,
            pas: pas::get_rest(input, PAS_OFFSET),
        })
    }

    fn out_len(&self) -> usize {
        QP_SHORT_LEN
    }
}

impl CommandOutput for CreateQpOut {
    fn encode(&self) -> Result<Vec<u8>> {
        let mut b = start_out(QP_SHORT_LEN);
        field::QPN.set(&mut b, self.qpn)?;
        Ok(b)
    }

    fn decode(output: &[u8]) -> Result<Self> {
        open_out(output, "create_qp_out", QP_SHORT_LEN)?;
        Ok(CreateQpOut {
            qpn: field::QPN.get(output)?,
        })
    }
}

/// DESTROY_QP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DestroyQp {
    /// QP number.
    pub qpn: u32,
}

impl Command for DestroyQp {
    const OPCODE: Opcode = Opcode::DESTROY_QP;
    type Output = NoPayload<QP_SHORT_LEN>;

    fn encode(&self) -> Result<Vec<u8>> {
        let mut b = start_in(Self::OPCODE, 0, QP_SHORT_LEN)?;
        field::QPN.set(&mut b, self.qpn)?;
        Ok(b)
    }

    fn decode(input: &[u8]) -> Result<Self> {
        open_in(input, Self::OPCODE, "destroy_qp_in", QP_SHORT_LEN)?;
        Ok(DestroyQp {
            qpn: field::QPN.get(input)?,
        })
    }

    fn out_len(&self) -> usize {
        QP_SHORT_LEN
    }
}

/// QUERY_QP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QueryQp {
    /// QP number.
    pub qpn: u32,
}

/// QUERY_QP output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QueryQpOut {
    /// `opt_param_mask`.
    pub opt_param_mask: u32,
    /// The QP context (its `state` is what the driver usually wants).
    pub ctx: Qpc,
}

impl Command for QueryQp {
    const OPCODE: Opcode = Opcode::QUERY_QP;
    type Output = QueryQpOut;

    fn encode(&self) -> Result<Vec<u8>> {
        let mut b = start_in(Self::OPCODE, 0, QP_SHORT_LEN)?;
        field::QPN.set(&mut b, self.qpn)?;
        Ok(b)
    }

    fn decode(input: &[u8]) -> Result<Self> {
        open_in(input, Self::OPCODE, "query_qp_in", QP_SHORT_LEN)?;
        Ok(QueryQp {
            qpn: field::QPN.get(input)?,
        })
    }

    fn out_len(&self) -> usize {
        QUERY_QP_OUT_LEN
    }
}

impl CommandOutput for QueryQpOut {
    fn encode(&self) -> Result<Vec<u8>> {
        let mut b = start_out(QUERY_QP_OUT_LEN);
        field::OPT_PARAM_MASK.set(&mut b, self.opt_param_mask)?;
        self.ctx
            .encode_into(&mut b[QPC_OFFSET..QPC_OFFSET + QPC_LEN])?;
        Ok(b)
    }

    fn decode(output: &[u8]) -> Result<Self> {
        open_out(output, "query_qp_out", QUERY_QP_OUT_LEN)?;
        Ok(QueryQpOut {
            opt_param_mask: field::OPT_PARAM_MASK.get(output)?,
            ctx: Qpc::decode(&output[QPC_OFFSET..QPC_OFFSET + QPC_LEN])?,
        })
    }
}

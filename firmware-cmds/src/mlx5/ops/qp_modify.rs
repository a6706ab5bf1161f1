//! The QP state transitions the special QPs use: RST2INIT, INIT2RTR, RTR2RTS and SQERR2RTS
//! (which carry a QP context and an optional-parameter mask) and 2ERR and 2RST (which carry
//! only the QPN).

use crate::error::Result;
use crate::mlx5::opcode::Opcode;
use crate::mlx5::ops::qp::{QP_SHORT_LEN, QPC_OFFSET, field};
use crate::mlx5::ops::{Command, NoPayload, open_in, start_in};
use crate::mlx5::qpc::{QPC_LEN, Qpc};

/// Size of `rst2init_qp_in`, `init2rtr_qp_in`, `rtr2rts_qp_in`, `sqerr2rts_qp_in`.
pub const MODIFY_QP_IN_LEN: usize = 0x110;

/// The body shared by the context-carrying transitions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ModifyQp {
    /// QP number.
    pub qpn: u32,
    /// Which optional context fields apply (`qpc::optpar`).
    pub opt_param_mask: u32,
    /// The context fields for the transition.
    pub ctx: Qpc,
}

fn encode_modify(op: Opcode, m: &ModifyQp) -> Result<Vec<u8>> {
    let mut b = start_in(op, 0, MODIFY_QP_IN_LEN)?;
    field::QPN.set(&mut b, m.qpn)?;
    field::OPT_PARAM_MASK.set(&mut b, m.opt_param_mask)?;
    m.ctx
        .encode_into(&mut b[QPC_OFFSET..QPC_OFFSET + QPC_LEN])?;
    Ok(b)
}

fn decode_modify(input: &[u8], op: Opcode, what: &'static str) -> Result<ModifyQp> {
    open_in(input, op, what, MODIFY_QP_IN_LEN)?;
    Ok(ModifyQp {
        qpn: field::QPN.get(input)?,
        opt_param_mask: field::OPT_PARAM_MASK.get(input)?,
        ctx: Qpc::decode(&input[QPC_OFFSET..QPC_OFFSET + QPC_LEN])?,
    })
}

macro_rules! modify_command {
    ($(#[$doc:meta])* $name:ident, $op:ident, $what:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
        pub struct $name(pub ModifyQp);

        impl Command for $name {
            const OPCODE: Opcode = Opcode::$op;
            type Output = NoPayload<QP_SHORT_LEN>;

            fn encode(&self) -> Result<Vec<u8>> {
                encode_modify(Self::OPCODE, &self.0)
            }

            fn decode(input: &[u8]) -> Result<Self> {
                decode_modify(input, Self::OPCODE, $what).map($name)
            }

            fn out_len(&self) -> usize {
                QP_SHORT_LEN
            }
        }
    };
}

modify_command!(
    /// RST2INIT_QP (0x502): port, P_Key index and (QP1/UD) Q_Key are set here.
    Rst2InitQp,
    RST2INIT_QP,
    "rst2init_qp_in"
);
modify_command!(
    /// INIT2RTR_QP (0x503).
    Init2RtrQp,
    INIT2RTR_QP,
    "init2rtr_qp_in"
);
modify_command!(
    /// RTR2RTS_QP (0x504): the send PSN is set here.
    Rtr2RtsQp,
    RTR2RTS_QP,
    "rtr2rts_qp_in"
);
modify_command!(
    /// SQERR2RTS_QP (0x506): brings a QP whose send queue hit an error back to RTS.
    Sqerr2RtsQp,
    SQERR2RTS_QP,
    "sqerr2rts_qp_in"
);

macro_rules! qpn_command {
    ($(#[$doc:meta])* $name:ident, $op:ident, $what:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
        pub struct $name {
            /// QP number.
            pub qpn: u32,
        }

        impl Command for $name {
            const OPCODE: Opcode = Opcode::$op;
            type Output = NoPayload<QP_SHORT_LEN>;

            fn encode(&self) -> Result<Vec<u8>> {
                let mut b = start_in(Self::OPCODE, 0, QP_SHORT_LEN)?;
                field::QPN.set(&mut b, self.qpn)?;
                Ok(b)
            }

            fn decode(input: &[u8]) -> Result<Self> {
                open_in(input, Self::OPCODE, $what, QP_SHORT_LEN)?;
                Ok($name {
                    qpn: field::QPN.get(input)?,
                })
            }

            fn out_len(&self) -> usize {
                QP_SHORT_LEN
            }
        }
    };
}

qpn_command!(
    /// 2ERR_QP (0x507): moves the QP to ERR; the device flushes its WQEs.
    Qp2Err,
    QP_2ERR_QP,
    "qp_2err_in"
);
qpn_command!(
    /// 2RST_QP (0x50a): moves the QP to RST.
    Qp2Rst,
    QP_2RST_QP,
    "qp_2rst_in"
);

//! The crate's one error type: what a codec found wrong with a buffer or a value.

use crate::mlx5::cmd::status::{CmdStatus, DeliveryStatus};

/// Everything a codec of this crate can reject. Decoders see bytes written by the other side
/// (a device-written output, a driver-written input seen by the simulator), so every variant
/// names the structure and what to check.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The buffer is shorter than the structure it should hold.
    #[error(
        "{what} needs {need} bytes but only {got} were given: the buffer is truncated (check the command's inlen/outlen or the DMA read size)"
    )]
    Short {
        /// Structure being decoded or encoded.
        what: &'static str,
        /// Bytes the structure needs.
        need: usize,
        /// Bytes that were available.
        got: usize,
    },
    /// A bit field does not lie inside the buffer, or crosses a 32-bit dword.
    #[error(
        "bit field at bit offset {bit:#x} of width {width} does not fit a {len}-byte buffer within one dword"
    )]
    FieldOutOfRange {
        /// Bit offset from the MSB of dword 0.
        bit: usize,
        /// Width in bits.
        width: u32,
        /// Buffer length in bytes.
        len: usize,
    },
    /// A value is wider than the field that must carry it; it would be silently truncated.
    #[error(
        "value {value:#x} does not fit the {width}-bit field `{field}`: reduce it to at most {max:#x}"
    )]
    ValueTooWide {
        /// Field name, as in mlx5_ifc.h.
        field: &'static str,
        /// The value that was offered.
        value: u64,
        /// Field width in bits.
        width: u32,
        /// Largest value the field can hold.
        max: u64,
    },
    /// A command input carries another opcode than the decoder expects.
    #[error(
        "command input carries opcode {got:#06x} ({got_name}) where {expected:#06x} ({expected_name}) was expected"
    )]
    WrongOpcode {
        /// Opcode the decoder handles.
        expected: u16,
        /// Its name.
        expected_name: &'static str,
        /// Opcode found in the input.
        got: u16,
        /// Its name, or "UNKNOWN".
        got_name: &'static str,
    },
    /// A code (op_mod, state, type, opcode…) has a value the layout does not define.
    #[error("{what} has the undefined value {value:#x}")]
    UnknownCode {
        /// What the code is.
        what: &'static str,
        /// The value found.
        value: u32,
    },
    /// A value is defined but not acceptable here (an inconsistent count, a misaligned address…).
    #[error("invalid {what}: {reason}")]
    Invalid {
        /// The field or structure concerned.
        what: &'static str,
        /// Why it is rejected.
        reason: &'static str,
    },
    /// The device completed the command with a non-zero status in the output header.
    #[error("command failed with status {status} and syndrome {syndrome:#010x}")]
    CommandFailed {
        /// Status byte of the output (`MLX5_CMD_STAT_*`).
        status: CmdStatus,
        /// Firmware syndrome (dword 1 of the output).
        syndrome: u32,
    },
    /// The command-queue entry reports a delivery (transport) error.
    #[error("command delivery failed: {0}")]
    Delivery(DeliveryStatus),
    /// A mailbox block of a chain is inconsistent with the entry or the chain.
    #[error("mailbox block {index}: {problem}")]
    Mailbox {
        /// Position of the block in the chain (0 = first).
        index: usize,
        /// What is wrong with it.
        problem: MailboxProblem,
    },
}

/// What can be wrong with one mailbox block of a command chain. Each maps to the delivery status
/// a device reports for it (see [`MailboxProblem::delivery_status`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum MailboxProblem {
    /// `block_num` is not the block's position in the chain.
    #[error("block_num is {got}, expected {expected}")]
    BlockNumber {
        /// Position in the chain.
        expected: u32,
        /// Value found.
        got: u32,
    },
    /// The block's token differs from the entry's token.
    #[error("token {got:#04x} differs from the entry token {expected:#04x}")]
    Token {
        /// Entry token.
        expected: u8,
        /// Block token.
        got: u8,
    },
    /// `ctrl_sig` or `sig` does not make the XOR of the covered bytes 0xff.
    #[error("signature check failed")]
    Signature,
    /// The block address is not aligned as the pointer that names it requires.
    #[error("block address {addr:#x} is not {align}-byte aligned")]
    Misaligned {
        /// Address of the block.
        addr: u64,
        /// Required alignment.
        align: u64,
        /// True on an output chain.
        output: bool,
    },
    /// The chain ends (next = 0) before the message length is covered.
    #[error("chain ends early: the message needs more blocks")]
    ChainTooShort,
    /// The block could not be read or written at its address (the caller's DMA access failed).
    #[error("block at {addr:#x} could not be accessed")]
    Unreachable {
        /// Address of the block.
        addr: u64,
    },
}

impl MailboxProblem {
    /// The delivery status a device reports in the entry for this problem.
    pub fn delivery_status(self) -> DeliveryStatus {
        match self {
            MailboxProblem::BlockNumber { .. } | MailboxProblem::ChainTooShort => {
                DeliveryStatus::BAD_BLOCK_NUMBER
            }
            MailboxProblem::Token { .. } => DeliveryStatus::TOKEN_ERR,
            MailboxProblem::Signature => DeliveryStatus::SIGNATURE_ERR,
            MailboxProblem::Misaligned { output: false, .. } => DeliveryStatus::IN_PTR_ALIGN_ERR,
            MailboxProblem::Misaligned { output: true, .. } => DeliveryStatus::OUT_PTR_ALIGN_ERR,
            MailboxProblem::Unreachable { .. } => DeliveryStatus::FW_ERR,
        }
    }
}

/// Result alias of this crate.
pub type Result<T> = core::result::Result<T, Error>;

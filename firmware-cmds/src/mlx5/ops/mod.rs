//! Typed command inputs and outputs, one module per command family. Every input type
//! implements [`Command`] (encode for the driver, decode for the simulator) and names its
//! output type, which implements [`CommandOutput`] (encode for the simulator, decode for the
//! driver). Field positions are `bits::Field` constants written from mlx5_ifc.h.

use crate::error::{Error, Result};
use crate::mlx5::bits::need;
use crate::mlx5::cmd::header::{HEADER_LEN, InHeader, OutHeader};
use crate::mlx5::cmd::status::CmdStatus;
use crate::mlx5::opcode::Opcode;

pub mod access_reg;
pub mod cq;
pub mod eq;
pub mod hca;
pub mod hca_cap;
pub mod issi;
pub mod mad_ifc;
pub mod pages;
pub mod pas;
pub mod pd;
pub mod qp;
pub mod qp_modify;
pub mod special_contexts;
pub mod uar;
pub mod vport;

/// A command input.
pub trait Command: Sized {
    /// The command's opcode.
    const OPCODE: Opcode;
    /// The output this command produces.
    type Output: CommandOutput;
    /// Emits the input bytes (header included), `inlen` bytes long.
    fn encode(&self) -> Result<Vec<u8>>;
    /// Parses an input written by a driver; rejects a short buffer or another opcode.
    fn decode(input: &[u8]) -> Result<Self>;
    /// The output length (`outlen`) the driver must provide for this input.
    fn out_len(&self) -> usize;
}

/// A command output.
pub trait CommandOutput: Sized {
    /// Emits a successful output (status 0).
    fn encode(&self) -> Result<Vec<u8>>;
    /// Parses an output written by a device: a non-zero status gives
    /// [`Error::CommandFailed`]; a short buffer gives [`Error::Short`].
    fn decode(output: &[u8]) -> Result<Self>;
}

/// An output that carries nothing but the status header; `LEN` is its mlx5_ifc.h size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NoPayload<const LEN: usize>;

impl<const LEN: usize> CommandOutput for NoPayload<LEN> {
    fn encode(&self) -> Result<Vec<u8>> {
        Ok(start_out(LEN))
    }

    fn decode(output: &[u8]) -> Result<Self> {
        open_out(output, "status-only output", LEN)?;
        Ok(NoPayload)
    }
}

/// A zeroed input of `len` bytes with its header written.
pub(crate) fn start_in(opcode: Opcode, op_mod: u16, len: usize) -> Result<Vec<u8>> {
    let mut buf = vec![0u8; len.max(HEADER_LEN)];
    InHeader {
        opcode,
        uid: 0,
        op_mod,
    }
    .write(&mut buf)?;
    Ok(buf)
}

/// Checks an input's length and opcode and returns its header.
pub(crate) fn open_in(
    input: &[u8],
    opcode: Opcode,
    what: &'static str,
    len: usize,
) -> Result<InHeader> {
    let h = InHeader::decode(input)?;
    if h.opcode != opcode {
        return Err(Error::WrongOpcode {
            expected: opcode.0,
            expected_name: opcode.name().unwrap_or("UNKNOWN"),
            got: h.opcode.0,
            got_name: h.opcode.name().unwrap_or("UNKNOWN"),
        });
    }
    need(what, input, len)?;
    Ok(h)
}

/// A zeroed successful output of `len` bytes.
pub(crate) fn start_out(len: usize) -> Vec<u8> {
    OutHeader::failure(CmdStatus::OK, 0, len)
}

/// Checks an output's status first (a failed output may be short), then its length.
pub(crate) fn open_out(output: &[u8], what: &'static str, len: usize) -> Result<()> {
    OutHeader::decode(output)?.check()?;
    need(what, output, len)
}

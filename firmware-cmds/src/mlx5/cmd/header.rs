//! The generic command input and output headers (`mlx5_ifc_mbox_in_bits` /
//! `mlx5_ifc_mbox_out_bits`): input dword 0 = opcode \[31:16\] | uid \[15:0\], dword 1 = op_mod
//! \[15:0\]; output byte 0 = status, dword 1 = syndrome.

use crate::error::{Error, Result};
use crate::mlx5::bits::{Field, need};
use crate::mlx5::cmd::status::CmdStatus;
use crate::mlx5::opcode::Opcode;

/// Length of either header.
pub const HEADER_LEN: usize = 8;

/// Header fields (mlx5_ifc.h `mbox_in` / `mbox_out`).
pub mod field {
    use super::Field;
    /// `opcode`: bit 0x00, 16 bits.
    pub const OPCODE: Field = Field::new("opcode", 0x00, 16);
    /// `uid`: bit 0x10, 16 bits (reserved in commands that have no user context).
    pub const UID: Field = Field::new("uid", 0x10, 16);
    /// `op_mod`: bit 0x30, 16 bits.
    pub const OP_MOD: Field = Field::new("op_mod", 0x30, 16);
    /// `status`: bit 0x00, 8 bits.
    pub const STATUS: Field = Field::new("status", 0x00, 8);
    /// `syndrome`: bit 0x20, 32 bits.
    pub const SYNDROME: Field = Field::new("syndrome", 0x20, 32);
}

/// The input header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InHeader {
    /// Command opcode.
    pub opcode: Opcode,
    /// User context id (0 for the kernel / our driver).
    pub uid: u16,
    /// Opcode modifier.
    pub op_mod: u16,
}

impl InHeader {
    /// Reads the header of a command input (how the simulator dispatches).
    pub fn decode(buf: &[u8]) -> Result<Self> {
        need("command input header", buf, HEADER_LEN)?;
        Ok(InHeader {
            opcode: Opcode(field::OPCODE.get(buf)? as u16),
            uid: field::UID.get(buf)? as u16,
            op_mod: field::OP_MOD.get(buf)? as u16,
        })
    }

    /// Writes the header into the first 8 bytes of `buf`.
    pub fn write(&self, buf: &mut [u8]) -> Result<()> {
        field::OPCODE.set(buf, self.opcode.0.into())?;
        field::UID.set(buf, self.uid.into())?;
        field::OP_MOD.set(buf, self.op_mod.into())
    }
}

/// The output header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutHeader {
    /// Command status.
    pub status: CmdStatus,
    /// Firmware syndrome.
    pub syndrome: u32,
}

impl OutHeader {
    /// Reads the header of a command output.
    pub fn decode(buf: &[u8]) -> Result<Self> {
        need("command output header", buf, HEADER_LEN)?;
        Ok(OutHeader {
            status: CmdStatus(field::STATUS.get(buf)? as u8),
            syndrome: field::SYNDROME.get(buf)?,
        })
    }

    /// Writes the header into the first 8 bytes of `buf`.
    pub fn write(&self, buf: &mut [u8]) -> Result<()> {
        field::STATUS.set(buf, self.status.0.into())?;
        field::SYNDROME.set(buf, self.syndrome)
    }

    /// A failed output of `outlen` bytes (at least the header): what a device writes when it
    /// rejects a command.
    pub fn failure(status: CmdStatus, syndrome: u32, outlen: usize) -> Vec<u8> {
        let mut out = vec![0u8; outlen.max(HEADER_LEN)];
        out[0] = status.0;
        out[4..8].copy_from_slice(&syndrome.to_be_bytes());
        out
    }

    /// Turns a non-OK status into [`Error::CommandFailed`].
    pub fn check(&self) -> Result<()> {
        if self.status.is_ok() {
            Ok(())
        } else {
            Err(Error::CommandFailed {
                status: self.status,
                syndrome: self.syndrome,
            })
        }
    }
}

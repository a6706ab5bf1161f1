//! Entry points for `hca decode`: name what 64 raw bytes or a status byte mean.

use core::fmt;

use crate::error::Result;
use crate::mlx5::cmd::status::{CmdStatus, StatusReport};
use crate::mlx5::cqe::Cqe;
use crate::mlx5::eqe::Eqe;

/// Decodes 64 bytes as a CQE; the result prints every field by name.
pub fn cqe(raw: &[u8]) -> Result<Cqe> {
    Cqe::decode(raw)
}

/// Decodes 64 bytes as an EQE; the result prints every field by name.
pub fn eqe(raw: &[u8]) -> Result<Eqe> {
    Eqe::decode(raw)
}

/// Names a command status byte and syndrome.
pub fn status(status: u8, syndrome: u32) -> StatusReport {
    StatusReport {
        status: CmdStatus(status),
        syndrome,
    }
}

/// A hex dump of 64 bytes, 16 per line, for showing next to a decoded structure.
pub struct HexDump<'a>(pub &'a [u8]);

impl fmt::Display for HexDump<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, line) in self.0.chunks(16).enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{:04x}:", i * 16)?;
            for b in line {
                write!(f, " {b:02x}")?;
            }
        }
        Ok(())
    }
}

//! QUERY_PAGES and MANAGE_PAGES: the firmware's demand for host memory and the driver's
//! answer (give, take back, or can't give).

use crate::error::{Error, Result};
use crate::mlx5::bits::Field;
use crate::mlx5::opcode::Opcode;
use crate::mlx5::ops::{Command, CommandOutput, open_in, open_out, pas, start_in, start_out};

/// Field positions (mlx5_ifc.h `query_pages_in/out`, `manage_pages_in/out`).
pub mod field {
    use super::Field;
    /// `*.embedded_cpu_function` (query_pages_in/out, manage_pages_in).
    pub const EMBEDDED_CPU_FUNCTION: Field = Field::new("embedded_cpu_function", 0x40, 1);
    /// `*.function_id` (query_pages_in/out, manage_pages_in).
    pub const FUNCTION_ID: Field = Field::new("function_id", 0x50, 16);
    /// `query_pages_out.num_pages` (signed).
    pub const NUM_PAGES: Field = Field::new("num_pages", 0x60, 32);
    /// `manage_pages_in.input_num_entries`.
    pub const INPUT_NUM_ENTRIES: Field = Field::new("input_num_entries", 0x60, 32);
    /// `manage_pages_out.output_num_entries`.
    pub const OUTPUT_NUM_ENTRIES: Field = Field::new("output_num_entries", 0x40, 32);
}

/// Size of `query_pages_in/out` and of the fixed part of `manage_pages_in/out`.
pub const PAGES_LEN: usize = 0x10;
/// Byte offset of the `pas` list in `manage_pages_in` and `manage_pages_out`.
pub const PAS_OFFSET: usize = 0x10;

/// QUERY_PAGES op_mod (`MLX5_QUERY_PAGES_IN_OP_MOD_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PagesKind {
    /// 1: pages needed before INIT_HCA's boot stage.
    Boot,
    /// 2: pages needed by INIT_HCA.
    Init,
    /// 3: pages needed at run time.
    Regular,
}

impl PagesKind {
    /// The op_mod code.
    pub fn code(self) -> u16 {
        match self {
            PagesKind::Boot => 1,
            PagesKind::Init => 2,
            PagesKind::Regular => 3,
        }
    }

    /// Parses an op_mod code.
    pub fn from_code(code: u16) -> Result<Self> {
        match code {
            1 => Ok(PagesKind::Boot),
            2 => Ok(PagesKind::Init),
            3 => Ok(PagesKind::Regular),
            _ => Err(Error::UnknownCode {
                what: "QUERY_PAGES op_mod",
                value: code.into(),
            }),
        }
    }
}

/// QUERY_PAGES (0x107).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueryPages {
    /// Which stage's pages.
    pub kind: PagesKind,
    /// Function asked about; 0 for the PF itself.
    pub function_id: u16,
    /// BlueField ARM side addressing the host function.
    pub embedded_cpu_function: bool,
}

/// QUERY_PAGES output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QueryPagesOut {
    /// Function the pages are for (use it in MANAGE_PAGES).
    pub function_id: u16,
    /// As in the input.
    pub embedded_cpu_function: bool,
    /// Pages wanted (> 0) or to be reclaimed (< 0).
    pub num_pages: i32,
}

impl Command for QueryPages {
    const OPCODE: Opcode = Opcode::QUERY_PAGES;
    type Output = QueryPagesOut;

    fn encode(&self) -> Result<Vec<u8>> {
        let mut b = start_in(Self::OPCODE, self.kind.code(), PAGES_LEN)?;
        field::EMBEDDED_CPU_FUNCTION.set_bool(&mut b, self.embedded_cpu_function)?;
        field::FUNCTION_ID.set(&mut b, self.function_id.into())?;
        Ok(b)
    }

    fn decode(input: &[u8]) -> Result<Self> {
        let h = open_in(input, Self::OPCODE, "query_pages_in", PAGES_LEN)?;
        Ok(QueryPages {
            kind: PagesKind::from_code(h.op_mod)?,
            function_id: field::FUNCTION_ID.get(input)? as u16,
            embedded_cpu_function: field::EMBEDDED_CPU_FUNCTION.get_bool(input)?,
        })
    }

    fn out_len(&self) -> usize {
        PAGES_LEN
    }
}

impl CommandOutput for QueryPagesOut {
    fn encode(&self) -> Result<Vec<u8>> {
        let mut b = start_out(PAGES_LEN);
        field::EMBEDDED_CPU_FUNCTION.set_bool(&mut b, self.embedded_cpu_function)?;
        field::FUNCTION_ID.set(&mut b, self.function_id.into())?;
        field::NUM_PAGES.set(&mut b, self.num_pages as u32)?;
        Ok(b)
    }

    fn decode(output: &[u8]) -> Result<Self> {
        open_out(output, "query_pages_out", PAGES_LEN)?;
        Ok(QueryPagesOut {
            function_id: field::FUNCTION_ID.get(output)? as u16,
            embedded_cpu_function: field::EMBEDDED_CPU_FUNCTION.get_bool(output)?,
            num_pages: field::NUM_PAGES.get(output)? as i32,
        })
    }
}

/// What MANAGE_PAGES does (op_mod, `MLX5_MANAGE_PAGES_IN_OP_MOD_*`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PagesOp {
    /// op_mod 1 (ALLOCATION_SUCCESS): give these 4 KiB pages.
    Give(Vec<u64>),
    /// op_mod 0 (ALLOCATION_FAIL): the driver cannot give the pages asked for.
    CantGive,
    /// op_mod 2 (HCA_RETURN_PAGES): ask the device to return up to this many pages.
    Take(u32),
}

impl PagesOp {
    /// The op_mod code.
    pub fn code(&self) -> u16 {
        match self {
            PagesOp::CantGive => 0,
            PagesOp::Give(_) => 1,
            PagesOp::Take(_) => 2,
        }
    }
}

/// MANAGE_PAGES (0x108).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManagePages {
    /// Give, take or can't give.
    pub op: PagesOp,
    /// Function concerned (from QUERY_PAGES or the page-request EQE).
    pub function_id: u16,
    /// BlueField ARM side addressing the host function.
    pub embedded_cpu_function: bool,
}

/// MANAGE_PAGES output: for TAKE, the pages returned.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ManagePagesOut {
    /// Pages handed back by the device (`output_num_entries` entries of `pas`).
    pub pas: Vec<u64>,
}

impl Command for ManagePages {
    const OPCODE: Opcode = Opcode::MANAGE_PAGES;
    type Output = ManagePagesOut;

    fn encode(&self) -> Result<Vec<u8>> {
        let mut b = start_in(Self::OPCODE, self.op.code(), PAGES_LEN)?;
        field::EMBEDDED_CPU_FUNCTION.set_bool(&mut b, self.embedded_cpu_function)?;
        field::FUNCTION_ID.set(&mut b, self.function_id.into())?;
        match &self.op {
            PagesOp::Give(list) => {
                let n = u32::try_from(list.len()).map_err(|_| Error::Invalid {
                    what: "MANAGE_PAGES pas",
                    reason: "more than 2^32 pages",
                })?;
                field::INPUT_NUM_ENTRIES.set(&mut b, n)?;
                pas::put(&mut b, list)?;
            }
            PagesOp::Take(n) => field::INPUT_NUM_ENTRIES.set(&mut b, *n)?,
            PagesOp::CantGive => {}
        }
        Ok(b)
    }

    fn decode(input: &[u8]) -> Result<Self> {
        let h = open_in(input, Self::OPCODE, "manage_pages_in", PAGES_LEN)?;
        let n = field::INPUT_NUM_ENTRIES.get(input)?;
        let op = match h.op_mod {
            0 => PagesOp::CantGive,
            1 => PagesOp::Give(pas::get(
                input,
                PAS_OFFSET,
                n as usize,
                "manage_pages_in pas",
            )?),
            2 => PagesOp::Take(n),
            other => {
                return Err(Error::UnknownCode {
                    what: "MANAGE_PAGES op_mod",
                    value: other.into(),
                });
            }
        };
        Ok(ManagePages {
            op,
            function_id: field::FUNCTION_ID.get(input)? as u16,
            embedded_cpu_function: field::EMBEDDED_CPU_FUNCTION.get_bool(input)?,
        })
    }

    fn out_len(&self) -> usize {
        match self.op {
            PagesOp::Take(n) => PAS_OFFSET + pas::PAS_ENTRY * n as usize,
            _ => PAGES_LEN,
        }
    }
}

impl CommandOutput for ManagePagesOut {
    fn encode(&self) -> Result<Vec<u8>> {
        let mut b = start_out(PAGES_LEN);
        let n = u32::try_from(self.pas.len()).map_err(|_| Error::Invalid {
            what: "MANAGE_PAGES output pas",
            reason: "more than 2^32 pages",
        })?;
        field::OUTPUT_NUM_ENTRIES.set(&mut b, n)?;
        pas::put(&mut b, &self.pas)?;
        Ok(b)
    }

    fn decode(output: &[u8]) -> Result<Self> {
        open_out(output, "manage_pages_out", PAGES_LEN)?;
        let n = field::OUTPUT_NUM_ENTRIES.get(output)?;
        Ok(ManagePagesOut {
            pas: pas::get(output, PAS_OFFSET, n as usize, "manage_pages_out pas")?,
        })
    }
}

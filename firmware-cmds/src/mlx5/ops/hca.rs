//! ENABLE_HCA, DISABLE_HCA, INIT_HCA and TEARDOWN_HCA.

use crate::error::{Error, Result};
use crate::mlx5::bits::{Bytes, Field};
use crate::mlx5::opcode::Opcode;
use crate::mlx5::ops::{Command, CommandOutput, NoPayload, open_in, open_out, start_in, start_out};

/// Field positions (mlx5_ifc.h `enable_hca_in`, `disable_hca_in`, `init_hca_in`,
/// `teardown_hca_in`, `teardown_hca_out`).
pub mod field {
    use super::{Bytes, Field};
    /// `enable_hca_in` / `disable_hca_in.embedded_cpu_function`.
    pub const EMBEDDED_CPU_FUNCTION: Field = Field::new("embedded_cpu_function", 0x40, 1);
    /// `enable_hca_in` / `disable_hca_in.function_id`.
    pub const FUNCTION_ID: Field = Field::new("function_id", 0x50, 16);
    /// `init_hca_in.sw_owner_id`: 4 dwords at byte 0x10.
    pub const SW_OWNER_ID: Bytes = Bytes::new("sw_owner_id", 0x80, 16);
    /// `teardown_hca_in.profile`.
    pub const PROFILE: Field = Field::new("profile", 0x50, 16);
    /// `teardown_hca_out.state` (force-close result).
    pub const FORCE_STATE: Field = Field::new("state", 0x7f, 1);
}

/// Size of `enable_hca_in` / `disable_hca_in`.
pub const ENABLE_HCA_IN_LEN: usize = 0x10;
/// Size of `enable_hca_out` / `disable_hca_out` (96 bits).
pub const ENABLE_HCA_OUT_LEN: usize = 0x0c;
/// Size of `init_hca_in`.
pub const INIT_HCA_IN_LEN: usize = 0x20;
/// Size of `init_hca_out`, `teardown_hca_in`, `teardown_hca_out`.
pub const HCA_OUT_LEN: usize = 0x10;

/// ENABLE_HCA (0x104): turns the function on; first command of the bring-up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EnableHca {
    /// Function to enable; 0 for the PF itself.
    pub function_id: u16,
    /// Set on a BlueField ARM side to address the host function.
    pub embedded_cpu_function: bool,
}

/// DISABLE_HCA (0x105): last command of the teardown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DisableHca {
    /// Function to disable; 0 for the PF itself.
    pub function_id: u16,
    /// As for [`EnableHca`].
    pub embedded_cpu_function: bool,
}

fn encode_function(op: Opcode, function_id: u16, ecpu: bool) -> Result<Vec<u8>> {
    let mut b = start_in(op, 0, ENABLE_HCA_IN_LEN)?;
    field::EMBEDDED_CPU_FUNCTION.set_bool(&mut b, ecpu)?;
    field::FUNCTION_ID.set(&mut b, function_id.into())?;
    Ok(b)
}

fn decode_function(input: &[u8], op: Opcode, what: &'static str) -> Result<(u16, bool)> {
    open_in(input, op, what, ENABLE_HCA_IN_LEN)?;
    Ok((
        field::FUNCTION_ID.get(input)? as u16,
        field::EMBEDDED_CPU_FUNCTION.get_bool(input)?,
    ))
}

impl Command for EnableHca {
    const OPCODE: Opcode = Opcode::ENABLE_HCA;
    type Output = NoPayload<ENABLE_HCA_OUT_LEN>;

    fn encode(&self) -> Result<Vec<u8>> {
        encode_function(Self::OPCODE, self.function_id, self.embedded_cpu_function)
    }

    fn decode(input: &[u8]) -> Result<Self> {
        let (function_id, embedded_cpu_function) =
            decode_function(input, Self::OPCODE, "enable_hca_in")?;
        Ok(EnableHca {
            function_id,
            embedded_cpu_function,
        })
    }

    fn out_len(&self) -> usize {
        ENABLE_HCA_OUT_LEN
    }
}

impl Command for DisableHca {
    const OPCODE: Opcode = Opcode::DISABLE_HCA;
    type Output = NoPayload<ENABLE_HCA_OUT_LEN>;

    fn encode(&self) -> Result<Vec<u8>> {
        encode_function(Self::OPCODE, self.function_id, self.embedded_cpu_function)
    }

    fn decode(input: &[u8]) -> Result<Self> {
        let (function_id, embedded_cpu_function) =
            decode_function(input, Self::OPCODE, "disable_hca_in")?;
        Ok(DisableHca {
            function_id,
            embedded_cpu_function,
        })
    }

    fn out_len(&self) -> usize {
        ENABLE_HCA_OUT_LEN
    }
}

/// INIT_HCA (0x102): brings the HCA to the initialized state after the boot and init pages
/// were given.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct InitHca {
    /// Software owner id (random 128-bit value) when the `sw_owner_id` cap is set; zeros
    /// otherwise. Dword 0 first.
    pub sw_owner_id: [u32; 4],
}

impl Command for InitHca {
    const OPCODE: Opcode = Opcode::INIT_HCA;
    type Output = NoPayload<HCA_OUT_LEN>;

    fn encode(&self) -> Result<Vec<u8>> {
        let mut b = start_in(Self::OPCODE, 0, INIT_HCA_IN_LEN)?;
        let mut id = [0u8; 16];
        for (i, w) in self.sw_owner_id.iter().enumerate() {
            id[i * 4..i * 4 + 4].copy_from_slice(&w.to_be_bytes());
        }
        field::SW_OWNER_ID.set(&mut b, &id)?;
        Ok(b)
    }

    fn decode(input: &[u8]) -> Result<Self> {
        open_in(input, Self::OPCODE, "init_hca_in", INIT_HCA_IN_LEN)?;
        let id = field::SW_OWNER_ID.get(input)?;
        let mut sw_owner_id = [0u32; 4];
        for (i, w) in sw_owner_id.iter_mut().enumerate() {
            *w = u32::from_be_bytes([id[i * 4], id[i * 4 + 1], id[i * 4 + 2], id[i * 4 + 3]]);
        }
        Ok(InitHca { sw_owner_id })
    }

    fn out_len(&self) -> usize {
        HCA_OUT_LEN
    }
}

/// TEARDOWN_HCA profiles (`MLX5_TEARDOWN_HCA_IN_PROFILE_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TeardownProfile {
    /// 0: orderly close.
    GracefulClose,
    /// 1: close even with resources still open.
    ForceClose,
    /// 2: prepare a fast teardown (then NIC interface DISABLED is awaited).
    PrepareFastTeardown,
}

impl TeardownProfile {
    /// The profile code.
    pub fn code(self) -> u16 {
        match self {
            TeardownProfile::GracefulClose => 0,
            TeardownProfile::ForceClose => 1,
            TeardownProfile::PrepareFastTeardown => 2,
        }
    }

    /// Parses a profile code.
    pub fn from_code(code: u16) -> Result<Self> {
        match code {
            0 => Ok(TeardownProfile::GracefulClose),
            1 => Ok(TeardownProfile::ForceClose),
            2 => Ok(TeardownProfile::PrepareFastTeardown),
            _ => Err(Error::UnknownCode {
                what: "TEARDOWN_HCA profile",
                value: code.into(),
            }),
        }
    }
}

/// TEARDOWN_HCA (0x103).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TeardownHca {
    /// How to tear down.
    pub profile: TeardownProfile,
}

/// TEARDOWN_HCA output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TeardownHcaOut {
    /// Force-close result: false = SUCCESS (0), true = FAIL (1).
    pub force_state_fail: bool,
}

impl Command for TeardownHca {
    const OPCODE: Opcode = Opcode::TEARDOWN_HCA;
    type Output = TeardownHcaOut;

    fn encode(&self) -> Result<Vec<u8>> {
        let mut b = start_in(Self::OPCODE, 0, HCA_OUT_LEN)?;
        field::PROFILE.set(&mut b, self.profile.code().into())?;
        Ok(b)
    }

    fn decode(input: &[u8]) -> Result<Self> {
        open_in(input, Self::OPCODE, "teardown_hca_in", HCA_OUT_LEN)?;
        Ok(TeardownHca {
            profile: TeardownProfile::from_code(field::PROFILE.get(input)? as u16)?,
        })
    }

    fn out_len(&self) -> usize {
        HCA_OUT_LEN
    }
}

impl CommandOutput for TeardownHcaOut {
    fn encode(&self) -> Result<Vec<u8>> {
        let mut b = start_out(HCA_OUT_LEN);
        field::FORCE_STATE.set_bool(&mut b, self.force_state_fail)?;
        Ok(b)
    }

    fn decode(output: &[u8]) -> Result<Self> {
        open_out(output, "teardown_hca_out", HCA_OUT_LEN)?;
        Ok(TeardownHcaOut {
            force_state_fail: field::FORCE_STATE.get_bool(output)?,
        })
    }
}

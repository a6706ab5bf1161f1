//! ACCESS_REG (0x805) and the registers the driver writes: HOST_ENDIANNESS (0x7004) at
//! bring-up, and PCAP (0x5001), the port's capability mask, when an SM takes the port.

use crate::error::{Error, Result};
use crate::mlx5::bits::Field;
use crate::mlx5::opcode::Opcode;
use crate::mlx5::ops::{Command, CommandOutput, open_in, open_out, start_in, start_out};

/// Field positions (mlx5_ifc.h `access_register_in/out`).
pub mod field {
    use super::Field;
    /// `access_register_in.register_id`.
    pub const REGISTER_ID: Field = Field::new("register_id", 0x50, 16);
    /// `access_register_in.argument`.
    pub const ARGUMENT: Field = Field::new("argument", 0x60, 32);
}

/// Byte offset of `register_data` in both input and output.
pub const REGISTER_DATA_OFFSET: usize = 0x10;
/// Register id of HOST_ENDIANNESS (`MLX5_REG_HOST_ENDIANNESS`).
pub const REG_HOST_ENDIANNESS: u16 = 0x7004;
/// Size of the HOST_ENDIANNESS register data (`struct mlx5_reg_host_endianness`: `he` and 15
/// reserved bytes).
pub const HOST_ENDIANNESS_LEN: usize = 16;
/// `he` value for a little-endian host (`MLX5_SET_HOST_ENDIANNESS`).
pub const HOST_ENDIANNESS_LITTLE: u8 = 0x00;
/// `he` value for a big-endian host.
pub const HOST_ENDIANNESS_BIG: u8 = 0x80;

/// Register id of PCAP, the port capability mask (`MLX5_REG_PCAP`).
pub const REG_PCAP: u16 = 0x5001;
/// Size of the PCAP register data (`struct mlx5_reg_pcap`: a reserved byte, the port
/// number, two reserved bytes, then the capability words `caps_127_96` .. `caps_31_0`,
/// big-endian). `caps_127_96` holds PortInfo:CapabilityMask.
pub const PCAP_LEN: usize = 20;

/// The fields of a PCAP register.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pcap {
    /// The port (1-based).
    pub port: u8,
    /// PortInfo:CapabilityMask (`caps_127_96`).
    pub caps: u32,
}

impl Pcap {
    /// The register data.
    pub fn encode(&self) -> [u8; PCAP_LEN] {
        let mut d = [0u8; PCAP_LEN];
        d[1] = self.port;
        d[4..8].copy_from_slice(&self.caps.to_be_bytes());
        d
    }

    /// Reads register data; `None` when it is shorter than the register.
    pub fn decode(data: &[u8]) -> Option<Pcap> {
        if data.len() < PCAP_LEN {
            return None;
        }
        Some(Pcap {
            port: data[1],
            caps: u32::from_be_bytes([data[4], data[5], data[6], data[7]]),
        })
    }
}

/// Direction of an ACCESS_REG (op_mod, `MLX5_ACCESS_REGISTER_IN_OP_MOD_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RegAccess {
    /// 0: write.
    Write,
    /// 1: read.
    Read,
}

/// ACCESS_REG: reads or writes a device register; the register's data follows the header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccessReg {
    /// Read or write.
    pub access: RegAccess,
    /// Register id.
    pub register_id: u16,
    /// Register-specific argument.
    pub argument: u32,
    /// Register data sent (for a read, its length is the length read back).
    pub data: Vec<u8>,
}

impl AccessReg {
    /// The HOST_ENDIANNESS write the bring-up issues; `big_endian` selects the host order.
    pub fn host_endianness(big_endian: bool) -> Self {
        let mut data = vec![0u8; HOST_ENDIANNESS_LEN];
        data[0] = if big_endian {
            HOST_ENDIANNESS_BIG
        } else {
            HOST_ENDIANNESS_LITTLE
        };
        AccessReg {
            access: RegAccess::Write,
            register_id: REG_HOST_ENDIANNESS,
            argument: 0,
            data,
        }
    }
}

impl AccessReg {
    /// The PCAP write of `mlx5_set_port_caps` on a physical function: `caps` becomes port
    /// `port`'s PortInfo:CapabilityMask.
    pub fn pcap(port: u8, caps: u32) -> Self {
        AccessReg {
            access: RegAccess::Write,
            register_id: REG_PCAP,
            argument: 0,
            data: Pcap { port, caps }.encode().to_vec(),
        }
    }
}

/// ACCESS_REG output: the register data.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AccessRegOut {
    /// Register data returned (everything after the 16-byte header).
    pub data: Vec<u8>,
}

impl Command for AccessReg {
    const OPCODE: Opcode = Opcode::ACCESS_REG;
    type Output = AccessRegOut;

    fn encode(&self) -> Result<Vec<u8>> {
        let op_mod = match self.access {
            RegAccess::Write => 0,
            RegAccess::Read => 1,
        };
        let mut b = start_in(Self::OPCODE, op_mod, REGISTER_DATA_OFFSET)?;
        field::REGISTER_ID.set(&mut b, self.register_id.into())?;
        field::ARGUMENT.set(&mut b, self.argument)?;
        b.extend_from_slice(&self.data);
        Ok(b)
    }

    fn decode(input: &[u8]) -> Result<Self> {
        let h = open_in(
            input,
            Self::OPCODE,
            "access_register_in",
            REGISTER_DATA_OFFSET,
        )?;
        let access = match h.op_mod {
            0 => RegAccess::Write,
            1 => RegAccess::Read,
            other => {
                return Err(Error::UnknownCode {
                    what: "ACCESS_REG op_mod",
                    value: other.into(),
                });
            }
        };
        Ok(AccessReg {
            access,
            register_id: field::REGISTER_ID.get(input)? as u16,
            argument: field::ARGUMENT.get(input)?,
            data: input[REGISTER_DATA_OFFSET..].to_vec(),
        })
    }

    fn out_len(&self) -> usize {
        REGISTER_DATA_OFFSET + self.data.len()
    }
}

impl CommandOutput for AccessRegOut {
    fn encode(&self) -> Result<Vec<u8>> {
        let mut b = start_out(REGISTER_DATA_OFFSET);
        b.extend_from_slice(&self.data);
        Ok(b)
    }

    fn decode(output: &[u8]) -> Result<Self> {
        open_out(output, "access_register_out", REGISTER_DATA_OFFSET)?;
        Ok(AccessRegOut {
            data: output[REGISTER_DATA_OFFSET..].to_vec(),
        })
    }
}

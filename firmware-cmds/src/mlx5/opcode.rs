//! Command opcodes (`MLX5_CMD_OP_*` in mlx5_ifc.h) with their kernel names.

use core::fmt;

/// A command opcode: input dword 0 bits \[31:16\].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Opcode(pub u16);

impl Opcode {
    /// `MLX5_CMD_OP_QUERY_HCA_CAP`.
    pub const QUERY_HCA_CAP: Self = Self(0x100);
    /// `MLX5_CMD_OP_QUERY_ADAPTER`.
    pub const QUERY_ADAPTER: Self = Self(0x101);
    /// `MLX5_CMD_OP_INIT_HCA`.
    pub const INIT_HCA: Self = Self(0x102);
    /// `MLX5_CMD_OP_TEARDOWN_HCA`.
    pub const TEARDOWN_HCA: Self = Self(0x103);
    /// `MLX5_CMD_OP_ENABLE_HCA`.
    pub const ENABLE_HCA: Self = Self(0x104);
    /// `MLX5_CMD_OP_DISABLE_HCA`.
    pub const DISABLE_HCA: Self = Self(0x105);
    /// `MLX5_CMD_OP_QUERY_PAGES`.
    pub const QUERY_PAGES: Self = Self(0x107);
    /// `MLX5_CMD_OP_MANAGE_PAGES`.
    pub const MANAGE_PAGES: Self = Self(0x108);
    /// `MLX5_CMD_OP_SET_HCA_CAP`.
    pub const SET_HCA_CAP: Self = Self(0x109);
    /// `MLX5_CMD_OP_QUERY_ISSI`.
    pub const QUERY_ISSI: Self = Self(0x10a);
    /// `MLX5_CMD_OP_SET_ISSI`.
    pub const SET_ISSI: Self = Self(0x10b);
    /// `MLX5_CMD_OP_SET_DRIVER_VERSION`.
    pub const SET_DRIVER_VERSION: Self = Self(0x10d);
    /// `MLX5_CMD_OP_CREATE_MKEY`.
    pub const CREATE_MKEY: Self = Self(0x200);
    /// `MLX5_CMD_OP_QUERY_MKEY`.
    pub const QUERY_MKEY: Self = Self(0x201);
    /// `MLX5_CMD_OP_DESTROY_MKEY`.
    pub const DESTROY_MKEY: Self = Self(0x202);
    /// `MLX5_CMD_OP_QUERY_SPECIAL_CONTEXTS`.
    pub const QUERY_SPECIAL_CONTEXTS: Self = Self(0x203);
    /// `MLX5_CMD_OP_CREATE_EQ`.
    pub const CREATE_EQ: Self = Self(0x301);
    /// `MLX5_CMD_OP_DESTROY_EQ`.
    pub const DESTROY_EQ: Self = Self(0x302);
    /// `MLX5_CMD_OP_QUERY_EQ`.
    pub const QUERY_EQ: Self = Self(0x303);
    /// `MLX5_CMD_OP_GEN_EQE`.
    pub const GEN_EQE: Self = Self(0x304);
    /// `MLX5_CMD_OP_CREATE_CQ`.
    pub const CREATE_CQ: Self = Self(0x400);
    /// `MLX5_CMD_OP_DESTROY_CQ`.
    pub const DESTROY_CQ: Self = Self(0x401);
    /// `MLX5_CMD_OP_QUERY_CQ`.
    pub const QUERY_CQ: Self = Self(0x402);
    /// `MLX5_CMD_OP_MODIFY_CQ`.
    pub const MODIFY_CQ: Self = Self(0x403);
    /// `MLX5_CMD_OP_CREATE_QP`.
    pub const CREATE_QP: Self = Self(0x500);
    /// `MLX5_CMD_OP_DESTROY_QP`.
    pub const DESTROY_QP: Self = Self(0x501);
    /// `MLX5_CMD_OP_RST2INIT_QP`.
    pub const RST2INIT_QP: Self = Self(0x502);
    /// `MLX5_CMD_OP_INIT2RTR_QP`.
    pub const INIT2RTR_QP: Self = Self(0x503);
    /// `MLX5_CMD_OP_RTR2RTS_QP`.
    pub const RTR2RTS_QP: Self = Self(0x504);
    /// `MLX5_CMD_OP_RTS2RTS_QP`.
    pub const RTS2RTS_QP: Self = Self(0x505);
    /// `MLX5_CMD_OP_SQERR2RTS_QP`.
    pub const SQERR2RTS_QP: Self = Self(0x506);
    /// `MLX5_CMD_OP_2ERR_QP`.
    pub const QP_2ERR_QP: Self = Self(0x507);
    /// `MLX5_CMD_OP_2RST_QP`.
    pub const QP_2RST_QP: Self = Self(0x50a);
    /// `MLX5_CMD_OP_QUERY_QP`.
    pub const QUERY_QP: Self = Self(0x50b);
    /// `MLX5_CMD_OP_SQD_RTS_QP`.
    pub const SQD_RTS_QP: Self = Self(0x50c);
    /// `MLX5_CMD_OP_MAD_IFC`.
    pub const MAD_IFC: Self = Self(0x50d);
    /// `MLX5_CMD_OP_INIT2INIT_QP`.
    pub const INIT2INIT_QP: Self = Self(0x50e);
    /// `MLX5_CMD_OP_CREATE_SRQ`.
    pub const CREATE_SRQ: Self = Self(0x700);
    /// `MLX5_CMD_OP_QUERY_VPORT_STATE`.
    pub const QUERY_VPORT_STATE: Self = Self(0x750);
    /// `MLX5_CMD_OP_QUERY_HCA_VPORT_CONTEXT`.
    pub const QUERY_HCA_VPORT_CONTEXT: Self = Self(0x762);
    /// `MLX5_CMD_OP_ALLOC_PD`.
    pub const ALLOC_PD: Self = Self(0x800);
    /// `MLX5_CMD_OP_DEALLOC_PD`.
    pub const DEALLOC_PD: Self = Self(0x801);
    /// `MLX5_CMD_OP_ALLOC_UAR`.
    pub const ALLOC_UAR: Self = Self(0x802);
    /// `MLX5_CMD_OP_DEALLOC_UAR`.
    pub const DEALLOC_UAR: Self = Self(0x803);
    /// `MLX5_CMD_OP_ACCESS_REG`.
    pub const ACCESS_REG: Self = Self(0x805);
    /// `MLX5_CMD_OP_ATTACH_TO_MCG`.
    pub const ATTACH_TO_MCG: Self = Self(0x806);
    /// `MLX5_CMD_OP_DETACH_FROM_MCG`.
    pub const DETACH_FROM_MCG: Self = Self(0x807);
    /// `MLX5_CMD_OP_QUERY_MAD_DEMUX`.
    pub const QUERY_MAD_DEMUX: Self = Self(0x80b);
    /// `MLX5_CMD_OP_SET_MAD_DEMUX`.
    pub const SET_MAD_DEMUX: Self = Self(0x80c);
    /// `MLX5_CMD_OP_NOP`.
    pub const NOP: Self = Self(0x80d);

    /// Every opcode this crate names, in table order.
    pub const ALL: [Self; 50] = [
        Self::QUERY_HCA_CAP,
        Self::QUERY_ADAPTER,
        Self::INIT_HCA,
        Self::TEARDOWN_HCA,
        Self::ENABLE_HCA,
        Self::DISABLE_HCA,
        Self::QUERY_PAGES,
        Self::MANAGE_PAGES,
        Self::SET_HCA_CAP,
        Self::QUERY_ISSI,
        Self::SET_ISSI,
        Self::SET_DRIVER_VERSION,
        Self::CREATE_MKEY,
        Self::QUERY_MKEY,
        Self::DESTROY_MKEY,
        Self::QUERY_SPECIAL_CONTEXTS,
        Self::CREATE_EQ,
        Self::DESTROY_EQ,
        Self::QUERY_EQ,
        Self::GEN_EQE,
        Self::CREATE_CQ,
        Self::DESTROY_CQ,
        Self::QUERY_CQ,
        Self::MODIFY_CQ,
        Self::CREATE_QP,
        Self::DESTROY_QP,
        Self::RST2INIT_QP,
        Self::INIT2RTR_QP,
        Self::RTR2RTS_QP,
        Self::RTS2RTS_QP,
        Self::SQERR2RTS_QP,
        Self::QP_2ERR_QP,
        Self::QP_2RST_QP,
        Self::QUERY_QP,
        Self::SQD_RTS_QP,
        Self::MAD_IFC,
        Self::INIT2INIT_QP,
        Self::CREATE_SRQ,
        Self::QUERY_VPORT_STATE,
        Self::QUERY_HCA_VPORT_CONTEXT,
        Self::ALLOC_PD,
        Self::DEALLOC_PD,
        Self::ALLOC_UAR,
        Self::DEALLOC_UAR,
        Self::ACCESS_REG,
        Self::ATTACH_TO_MCG,
        Self::DETACH_FROM_MCG,
        Self::QUERY_MAD_DEMUX,
        Self::SET_MAD_DEMUX,
        Self::NOP,
    ];

    /// The `MLX5_CMD_OP_*` suffix, or `None` for an opcode this crate does not name.
    pub fn name(self) -> Option<&'static str> {
        Some(match self.0 {
            0x100 => "QUERY_HCA_CAP",
            0x101 => "QUERY_ADAPTER",
            0x102 => "INIT_HCA",
            0x103 => "TEARDOWN_HCA",
            0x104 => "ENABLE_HCA",
            0x105 => "DISABLE_HCA",
            0x107 => "QUERY_PAGES",
            0x108 => "MANAGE_PAGES",
            0x109 => "SET_HCA_CAP",
            0x10a => "QUERY_ISSI",
            0x10b => "SET_ISSI",
            0x10d => "SET_DRIVER_VERSION",
            0x200 => "CREATE_MKEY",
            0x201 => "QUERY_MKEY",
            0x202 => "DESTROY_MKEY",
            0x203 => "QUERY_SPECIAL_CONTEXTS",
            0x301 => "CREATE_EQ",
            0x302 => "DESTROY_EQ",
            0x303 => "QUERY_EQ",
            0x304 => "GEN_EQE",
            0x400 => "CREATE_CQ",
            0x401 => "DESTROY_CQ",
            0x402 => "QUERY_CQ",
            0x403 => "MODIFY_CQ",
            0x500 => "CREATE_QP",
            0x501 => "DESTROY_QP",
            0x502 => "RST2INIT_QP",
            0x503 => "INIT2RTR_QP",
            0x504 => "RTR2RTS_QP",
            0x505 => "RTS2RTS_QP",
            0x506 => "SQERR2RTS_QP",
            0x507 => "2ERR_QP",
            0x50a => "2RST_QP",
            0x50b => "QUERY_QP",
            0x50c => "SQD_RTS_QP",
            0x50d => "MAD_IFC",
            0x50e => "INIT2INIT_QP",
            0x700 => "CREATE_SRQ",
            0x750 => "QUERY_VPORT_STATE",
            0x762 => "QUERY_HCA_VPORT_CONTEXT",
            0x800 => "ALLOC_PD",
            0x801 => "DEALLOC_PD",
            0x802 => "ALLOC_UAR",
            0x803 => "DEALLOC_UAR",
            0x805 => "ACCESS_REG",
            0x806 => "ATTACH_TO_MCG",
            0x807 => "DETACH_FROM_MCG",
            0x80b => "QUERY_MAD_DEMUX",
            0x80c => "SET_MAD_DEMUX",
            0x80d => "NOP",
            _ => return None,
        })
    }
}

impl fmt::Display for Opcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#06x} {}", self.0, self.name().unwrap_or("UNKNOWN"))
    }
}

//! QUERY_HCA_VPORT_CONTEXT (0x762) and QUERY_VPORT_STATE (0x750): the port's IB attributes
//! (state, LID, SM LID, GUIDs, capability mask) and whether this function may own QP0
//! (`has_smi`).

use crate::error::Result;
use crate::mlx5::bits::{Field, Field64};
use crate::mlx5::opcode::Opcode;
use crate::mlx5::ops::{Command, CommandOutput, open_in, open_out, start_in, start_out};

/// Byte offset of `hca_vport_context` in `query_hca_vport_context_out`.
pub const HCA_VPORT_CONTEXT_OFFSET: usize = 0x10;
/// Size of `query_hca_vport_context_out` (header + 0x200-byte context).
pub const QUERY_HCA_VPORT_CONTEXT_OUT_LEN: usize = 0x210;
/// Size of the vport inputs and of `query_vport_state_out`.
pub const VPORT_SHORT_LEN: usize = 0x10;

/// Field positions: inputs (`query_hca_vport_context_in`, `query_vport_state_in`), the
/// `hca_vport_context` (relative to the context) and `query_vport_state_out`.
pub mod field {
    use super::{Field, Field64};
    /// `*_in.other_vport`.
    pub const OTHER_VPORT: Field = Field::new("other_vport", 0x40, 1);
    /// `query_hca_vport_context_in.port_num`.
    pub const PORT_NUM: Field = Field::new("port_num", 0x4c, 4);
    /// `*_in.vport_number`.
    pub const VPORT_NUMBER: Field = Field::new("vport_number", 0x50, 16);

    /// `hca_vport_context.field_select`.
    pub const FIELD_SELECT: Field = Field::new("field_select", 0x00, 32);
    /// `hca_vport_context.sm_virt_aware`.
    pub const SM_VIRT_AWARE: Field = Field::new("sm_virt_aware", 0x100, 1);
    /// `hca_vport_context.has_smi`: this function may create QP0.
    pub const HAS_SMI: Field = Field::new("has_smi", 0x101, 1);
    /// `hca_vport_context.has_raw`.
    pub const HAS_RAW: Field = Field::new("has_raw", 0x102, 1);
    /// `hca_vport_context.grh_required`.
    pub const GRH_REQUIRED: Field = Field::new("grh_required", 0x103, 1);
    /// `hca_vport_context.port_physical_state`.
    pub const PORT_PHYSICAL_STATE: Field = Field::new("port_physical_state", 0x110, 4);
    /// `hca_vport_context.vport_state_policy`.
    pub const VPORT_STATE_POLICY: Field = Field::new("vport_state_policy", 0x114, 4);
    /// `hca_vport_context.port_state`.
    pub const PORT_STATE: Field = Field::new("port_state", 0x118, 4);
    /// `hca_vport_context.vport_state`.
    pub const VPORT_STATE: Field = Field::new("vport_state", 0x11c, 4);
    /// `hca_vport_context.system_image_guid`.
    pub const SYSTEM_IMAGE_GUID: Field64 = Field64::new("system_image_guid", 0x140);
    /// `hca_vport_context.port_guid`.
    pub const PORT_GUID: Field64 = Field64::new("port_guid", 0x180);
    /// `hca_vport_context.node_guid`.
    pub const NODE_GUID: Field64 = Field64::new("node_guid", 0x1c0);
    /// `hca_vport_context.cap_mask1`.
    pub const CAP_MASK1: Field = Field::new("cap_mask1", 0x200, 32);
    /// `hca_vport_context.cap_mask2`.
    pub const CAP_MASK2: Field = Field::new("cap_mask2", 0x240, 32);
    /// `hca_vport_context.lid`.
    pub const LID: Field = Field::new("lid", 0x300, 16);
    /// `hca_vport_context.init_type_reply`.
    pub const INIT_TYPE_REPLY: Field = Field::new("init_type_reply", 0x314, 4);
    /// `hca_vport_context.lmc`.
    pub const LMC: Field = Field::new("lmc", 0x318, 3);
    /// `hca_vport_context.subnet_timeout`.
    pub const SUBNET_TIMEOUT: Field = Field::new("subnet_timeout", 0x31b, 5);
    /// `hca_vport_context.sm_lid`.
    pub const SM_LID: Field = Field::new("sm_lid", 0x320, 16);
    /// `hca_vport_context.sm_sl`.
    pub const SM_SL: Field = Field::new("sm_sl", 0x330, 4);
    /// `hca_vport_context.qkey_violation_counter`.
    pub const QKEY_VIOLATION_COUNTER: Field = Field::new("qkey_violation_counter", 0x340, 16);
    /// `hca_vport_context.pkey_violation_counter`.
    pub const PKEY_VIOLATION_COUNTER: Field = Field::new("pkey_violation_counter", 0x350, 16);

    /// `query_vport_state_out.admin_state`.
    pub const ADMIN_STATE: Field = Field::new("admin_state", 0x78, 4);
    /// `query_vport_state_out.state`.
    pub const STATE: Field = Field::new("state", 0x7c, 4);
}

/// QUERY_HCA_VPORT_CONTEXT.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QueryHcaVportContext {
    /// Query another vport (a vport group manager only).
    pub other_vport: bool,
    /// Port number; the kernel sets it only on dual-port devices.
    pub port_num: u8,
    /// Vport (VF) number with `other_vport`.
    pub vport_number: u16,
}

/// The HCA vport context: the port as IB sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HcaVportContext {
    /// `field_select` (which fields a MODIFY would change).
    pub field_select: u32,
    /// The SM is virtualization aware.
    pub sm_virt_aware: bool,
    /// QP0 is allowed on this function.
    pub has_smi: bool,
    /// Raw QPs allowed.
    pub has_raw: bool,
    /// A GRH is required.
    pub grh_required: bool,
    /// IB PortPhysicalState.
    pub port_physical_state: u8,
    /// Vport state policy.
    pub vport_state_policy: u8,
    /// IB PortState (1 DOWN, 2 INIT, 3 ARMED, 4 ACTIVE).
    pub port_state: u8,
    /// Vport state.
    pub vport_state: u8,
    /// System image GUID.
    pub system_image_guid: u64,
    /// Port GUID.
    pub port_guid: u64,
    /// Node GUID.
    pub node_guid: u64,
    /// IB CapabilityMask.
    pub cap_mask1: u32,
    /// IB CapabilityMask2.
    pub cap_mask2: u32,
    /// Base LID.
    pub lid: u16,
    /// InitTypeReply.
    pub init_type_reply: u8,
    /// LMC.
    pub lmc: u8,
    /// Subnet timeout.
    pub subnet_timeout: u8,
    /// Master SM LID.
    pub sm_lid: u16,
    /// Master SM SL.
    pub sm_sl: u8,
    /// Q_Key violations.
    pub qkey_violation_counter: u16,
    /// P_Key violations.
    pub pkey_violation_counter: u16,
}

impl Command for QueryHcaVportContext {
    const OPCODE: Opcode = Opcode::QUERY_HCA_VPORT_CONTEXT;
    type Output = HcaVportContext;

    fn encode(&self) -> Result<Vec<u8>> {
        let mut b = start_in(Self::OPCODE, 0, VPORT_SHORT_LEN)?;
        field::OTHER_VPORT.set_bool(&mut b, self.other_vport)?;
        field::PORT_NUM.set(&mut b, self.port_num.into())?;
        field::VPORT_NUMBER.set(&mut b, self.vport_number.into())?;
        Ok(b)
    }

    fn decode(input: &[u8]) -> Result<Self> {
        open_in(
            input,
            Self::OPCODE,
            "query_hca_vport_context_in",
            VPORT_SHORT_LEN,
        )?;
        Ok(QueryHcaVportContext {
            other_vport: field::OTHER_VPORT.get_bool(input)?,
            port_num: field::PORT_NUM.get(input)? as u8,
            vport_number: field::VPORT_NUMBER.get(input)? as u16,
        })
    }

    fn out_len(&self) -> usize {
        QUERY_HCA_VPORT_CONTEXT_OUT_LEN
    }
}

impl CommandOutput for HcaVportContext {
    fn encode(&self) -> Result<Vec<u8>> {
        let mut b = start_out(QUERY_HCA_VPORT_CONTEXT_OUT_LEN);
        let c = &mut b[HCA_VPORT_CONTEXT_OFFSET..];
        field::FIELD_SELECT.set(c, self.field_select)?;
        field::SM_VIRT_AWARE.set_bool(c, self.sm_virt_aware)?;
        field::HAS_SMI.set_bool(c, self.has_smi)?;
        field::HAS_RAW.set_bool(c, self.has_raw)?;
        field::GRH_REQUIRED.set_bool(c, self.grh_required)?;
        field::PORT_PHYSICAL_STATE.set(c, self.port_physical_state.into())?;
        field::VPORT_STATE_POLICY.set(c, self.vport_state_policy.into())?;
        field::PORT_STATE.set(c, self.port_state.into())?;
        field::VPORT_STATE.set(c, self.vport_state.into())?;
        field::SYSTEM_IMAGE_GUID.set(c, self.system_image_guid)?;
        field::PORT_GUID.set(c, self.port_guid)?;
        field::NODE_GUID.set(c, self.node_guid)?;
        field::CAP_MASK1.set(c, self.cap_mask1)?;
        field::CAP_MASK2.set(c, self.cap_mask2)?;
        field::LID.set(c, self.lid.into())?;
        field::INIT_TYPE_REPLY.set(c, self.init_type_reply.into())?;
        field::LMC.set(c, self.lmc.into())?;
        field::SUBNET_TIMEOUT.set(c, self.subnet_timeout.into())?;
        field::SM_LID.set(c, self.sm_lid.into())?;
        field::SM_SL.set(c, self.sm_sl.into())?;
        field::QKEY_VIOLATION_COUNTER.set(c, self.qkey_violation_counter.into())?;
        field::PKEY_VIOLATION_COUNTER.set(c, self.pkey_violation_counter.into())?;
        Ok(b)
    }

    fn decode(output: &[u8]) -> Result<Self> {
        open_out(
            output,
            "query_hca_vport_context_out",
            QUERY_HCA_VPORT_CONTEXT_OUT_LEN,
        )?;
        let c = &output[HCA_VPORT_CONTEXT_OFFSET..];
        Ok(HcaVportContext {
            field_select: field::FIELD_SELECT.get(c)?,
            sm_virt_aware: field::SM_VIRT_AWARE.get_bool(c)?,
            has_smi: field::HAS_SMI.get_bool(c)?,
            has_raw: field::HAS_RAW.get_bool(c)?,
            grh_required: field::GRH_REQUIRED.get_bool(c)?,
            port_physical_state: field::PORT_PHYSICAL_STATE.get(c)? as u8,
            vport_state_policy: field::VPORT_STATE_POLICY.get(c)? as u8,
            port_state: field::PORT_STATE.get(c)? as u8,
            vport_state: field::VPORT_STATE.get(c)? as u8,
            system_image_guid: field::SYSTEM_IMAGE_GUID.get(c)?,
            port_guid: field::PORT_GUID.get(c)?,
            node_guid: field::NODE_GUID.get(c)?,
            cap_mask1: field::CAP_MASK1.get(c)?,
            cap_mask2: field::CAP_MASK2.get(c)?,
            lid: field::LID.get(c)? as u16,
            init_type_reply: field::INIT_TYPE_REPLY.get(c)? as u8,
            lmc: field::LMC.get(c)? as u8,
            subnet_timeout: field::SUBNET_TIMEOUT.get(c)? as u8,
            sm_lid: field::SM_LID.get(c)? as u16,
            sm_sl: field::SM_SL.get(c)? as u8,
            qkey_violation_counter: field::QKEY_VIOLATION_COUNTER.get(c)? as u16,
            pkey_violation_counter: field::PKEY_VIOLATION_COUNTER.get(c)? as u16,
        })
    }
}

/// QUERY_VPORT_STATE op_mod (`MLX5_VPORT_STATE_OP_MOD_*`).
pub mod vport_state_op_mod {
    /// The function's own NIC vport.
    pub const VNIC_VPORT: u16 = 0x0;
    /// An e-switch vport.
    pub const ESW_VPORT: u16 = 0x1;
    /// The uplink.
    pub const UPLINK: u16 = 0x2;
}

/// QUERY_VPORT_STATE.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QueryVportState {
    /// Which vport kind ([`vport_state_op_mod`]).
    pub op_mod: u16,
    /// Another vport.
    pub other_vport: bool,
    /// Its number.
    pub vport_number: u16,
}

/// QUERY_VPORT_STATE output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct VportState {
    /// Administrative state (0 down, 1 up, 2 follow).
    pub admin_state: u8,
    /// Operational state (0 down, 1 up).
    pub state: u8,
}

impl Command for QueryVportState {
    const OPCODE: Opcode = Opcode::QUERY_VPORT_STATE;
    type Output = VportState;

    fn encode(&self) -> Result<Vec<u8>> {
        let mut b = start_in(Self::OPCODE, self.op_mod, VPORT_SHORT_LEN)?;
        field::OTHER_VPORT.set_bool(&mut b, self.other_vport)?;
        field::VPORT_NUMBER.set(&mut b, self.vport_number.into())?;
        Ok(b)
    }

    fn decode(input: &[u8]) -> Result<Self> {
        let h = open_in(input, Self::OPCODE, "query_vport_state_in", VPORT_SHORT_LEN)?;
        Ok(QueryVportState {
            op_mod: h.op_mod,
            other_vport: field::OTHER_VPORT.get_bool(input)?,
            vport_number: field::VPORT_NUMBER.get(input)? as u16,
        })
    }

    fn out_len(&self) -> usize {
        VPORT_SHORT_LEN
    }
}

impl CommandOutput for VportState {
    fn encode(&self) -> Result<Vec<u8>> {
        let mut b = start_out(VPORT_SHORT_LEN);
        field::ADMIN_STATE.set(&mut b, self.admin_state.into())?;
        field::STATE.set(&mut b, self.state.into())?;
        Ok(b)
    }

    fn decode(output: &[u8]) -> Result<Self> {
        open_out(output, "query_vport_state_out", VPORT_SHORT_LEN)?;
        Ok(VportState {
            admin_state: field::ADMIN_STATE.get(output)? as u8,
            state: field::STATE.get(output)? as u8,
        })
    }
}

//! The simulated firmware's command set: decode the input with `firmware-cmds`, check it the
//! way firmware does, act, and encode the output.
//!
//! Status codes (the model's choices; see the crate report for the sources):
//! * an opcode the model does not implement: BAD_OP;
//! * an input shorter than the command's layout, or a `pas` list cut short: BAD_INP_LEN;
//! * an `outlen` too short for the fields the command returns: BAD_OUTP_LEN (checked before
//!   the command takes effect); a longer layout than needed is fine, the firmware writes what
//!   fits (observed on hardware with a 256-byte QUERY_HCA_CAP);
//! * a command the HCA's life-cycle phase does not allow (anything but ENABLE_HCA and the ISSI
//!   commands before ENABLE_HCA, as observed on hardware; CREATE_* before INIT_HCA; destroying
//!   a resource still in use): BAD_RES_STATE;
//! * a modify-QP from a state it does not start from: BAD_QP_STATE;
//! * a number that names no object (QPN, CQN, EQN, UAR, PD): BAD_RES;
//! * a field value outside what the device supports: BAD_PARAM;
//! * out of QPs/CQs/EQs/UARs/PDs: NO_RES.
//!
//! Syndromes are the model's own ([`synd`]): one per check, so a test can tell which check
//! refused a command. Real firmware syndromes are opaque 32-bit values.

mod hca;
mod pages;
mod port;
mod qp;
mod queues;

use firmware_cmds::Error as CodecError;
use firmware_cmds::mlx5::cmd::header::{HEADER_LEN, InHeader};
use firmware_cmds::mlx5::cmd::status::CmdStatus;
use firmware_cmds::mlx5::opcode::Opcode;
use firmware_cmds::mlx5::ops::mad_ifc::MAD_LEN;

use super::state::{Phase, State};

/// The model's syndromes, one per check (public as `sim::mlx5::syndrome`, for tests to tell
/// which check refused a command).
pub mod synd {
    /// The HCA is not in a phase that allows the command.
    pub const PHASE: u32 = 0x5100_0001;
    /// The input is shorter than the command's layout.
    pub const INPUT_SHORT: u32 = 0x5100_0002;
    /// The output length cannot hold the command's answer.
    pub const OUTPUT_SHORT: u32 = 0x5100_0003;
    /// An op_mod or code the command does not define.
    pub const BAD_CODE: u32 = 0x5100_0004;
    /// The opcode is not implemented.
    pub const BAD_OPCODE: u32 = 0x5100_0005;
    /// A function other than the PF itself was addressed.
    pub const FUNCTION: u32 = 0x5100_0006;
    /// A capability value outside the maximum.
    pub const CAP_VALUE: u32 = 0x5100_0007;
    /// An unsupported capability page.
    pub const CAP_TYPE: u32 = 0x5100_0008;
    /// An unsupported ISSI.
    pub const ISSI: u32 = 0x5100_0009;
    /// INIT_HCA without the boot and init pages.
    pub const NOT_ENOUGH_PAGES: u32 = 0x5100_000a;
    /// A page address not 4 KiB aligned.
    pub const PAGE_MISALIGNED: u32 = 0x5100_000b;
    /// A page given twice.
    pub const PAGE_DUPLICATE: u32 = 0x5100_000c;
    /// A page the device could not write through the IOMMU.
    pub const PAGE_NOT_WRITABLE: u32 = 0x5100_000d;
    /// A command parked behind a page request the driver refused.
    pub const PAGES_REFUSED: u32 = 0x5100_000e;
    /// An unknown register.
    pub const REGISTER: u32 = 0x5100_000f;
    /// No such UAR.
    pub const NO_UAR: u32 = 0x5100_0010;
    /// No such PD.
    pub const NO_PD: u32 = 0x5100_0011;
    /// No such EQ.
    pub const NO_EQ: u32 = 0x5100_0012;
    /// No such CQ.
    pub const NO_CQ: u32 = 0x5100_0013;
    /// No such QP.
    pub const NO_QP: u32 = 0x5100_0014;
    /// A resource still referenced by another.
    pub const IN_USE: u32 = 0x5100_0015;
    /// A queue size beyond the maximum.
    pub const QUEUE_SIZE: u32 = 0x5100_0016;
    /// A page list that does not describe the queue (misaligned, too short).
    pub const PAS: u32 = 0x5100_0017;
    /// An interrupt vector the function does not have.
    pub const VECTOR: u32 = 0x5100_0018;
    /// A doorbell record address not 8-byte aligned.
    pub const DBR: u32 = 0x5100_0019;
    /// A QP service type the model does not run.
    pub const QP_TYPE: u32 = 0x5100_001a;
    /// A modify-QP from a state it does not start from.
    pub const QP_STATE: u32 = 0x5100_001b;
    /// A port number outside 1..=num_ports.
    pub const PORT: u32 = 0x5100_001c;
    /// A P_Key index outside the table.
    pub const PKEY_INDEX: u32 = 0x5100_001d;
    /// The port's QP0 or QP1 is already in use.
    pub const SPECIAL_QP_BUSY: u32 = 0x5100_001e;
    /// An unsupported context field (page offset, SRQ, CQE size).
    pub const CONTEXT: u32 = 0x5100_001f;
    /// Out of a resource.
    pub const EXHAUSTED: u32 = 0x5100_0020;
    /// The SMA did not answer the MAD.
    pub const MAD_DISCARDED: u32 = 0x5100_0021;
    /// Internal error of the model.
    pub const INTERNAL: u32 = 0x5100_0022;
    /// A QP timestamp format the `sq_ts_format` capability does not offer.
    pub const TS_FORMAT: u32 = 0x5100_0023;
}

/// The outcome of a command.
pub(crate) enum Exec {
    /// Success, with the output message.
    Out(Vec<u8>),
    /// Failure: status and syndrome.
    Fail(CmdStatus, u32),
    /// A MAD_IFC for the port's SMA, answered outside the device lock.
    Mad {
        port: u8,
        mad: Box<[u8; MAD_LEN]>,
        ignore_mkey: bool,
    },
    /// A PCAP write: the port's capability mask becomes `caps`, set through the port's link
    /// outside the device lock.
    PortCaps { port: u8, caps: u32 },
}

/// A failed command.
pub(crate) type Failure = (CmdStatus, u32);

/// The status a decoder's complaint about an input becomes.
pub(crate) fn decode_failure(e: &CodecError) -> Failure {
    match e {
        CodecError::Short { .. } | CodecError::Invalid { .. } => {
            (CmdStatus::BAD_INP_LEN_ERR, synd::INPUT_SHORT)
        }
        _ => (CmdStatus::BAD_PARAM_ERR, synd::BAD_CODE),
    }
}

/// Encoding our own output cannot fail for values we built; if it does, it is the model's bug.
pub(crate) fn encoded(r: firmware_cmds::Result<Vec<u8>>) -> Result<Vec<u8>, Failure> {
    r.map_err(|_| (CmdStatus::INT_ERR, synd::INTERNAL))
}

/// Bytes of output a command needs for the fields it returns (`outlen` below this gets
/// BAD_OUTP_LEN before the command runs).
fn min_out(op: Opcode) -> usize {
    use firmware_cmds::mlx5::ops::{
        hca_cap::CAPABILITY_OFFSET, issi::QUERY_ISSI_OUT_LEN, mad_ifc::MAD_IFC_LEN, qp::QPC_OFFSET,
        special_contexts::QUERY_SPECIAL_CONTEXTS_OUT_LEN, vport::HCA_VPORT_CONTEXT_OFFSET,
    };
    match op {
        // Fields in dword 2 (eqn, cqn, qpn, pd, uar, function_id...).
        Opcode::CREATE_EQ
        | Opcode::CREATE_CQ
        | Opcode::CREATE_QP
        | Opcode::ALLOC_PD
        | Opcode::ALLOC_UAR => 0x0c,
        Opcode::QUERY_PAGES | Opcode::QUERY_VPORT_STATE | Opcode::MANAGE_PAGES => 0x10,
        Opcode::QUERY_ISSI => QUERY_ISSI_OUT_LEN,
        Opcode::QUERY_HCA_CAP => CAPABILITY_OFFSET + firmware_cmds::mlx5::caps::GENERAL_CAP_LEN,
        Opcode::QUERY_SPECIAL_CONTEXTS => QUERY_SPECIAL_CONTEXTS_OUT_LEN,
        Opcode::QUERY_QP => QPC_OFFSET + firmware_cmds::mlx5::qpc::QPC_LEN,
        Opcode::MAD_IFC => MAD_IFC_LEN,
        Opcode::QUERY_HCA_VPORT_CONTEXT => HCA_VPORT_CONTEXT_OFFSET + 0x70,
        _ => HEADER_LEN,
    }
}

/// Which life-cycle phases allow `op`.
fn allowed(op: Opcode, phase: Phase) -> bool {
    match op {
        Opcode::QUERY_ISSI => true,
        Opcode::ENABLE_HCA => phase == Phase::Disabled,
        Opcode::SET_ISSI => matches!(phase, Phase::Disabled | Phase::Enabled),
        Opcode::QUERY_PAGES | Opcode::MANAGE_PAGES => phase != Phase::Disabled,
        Opcode::QUERY_HCA_CAP | Opcode::ACCESS_REG => {
            matches!(phase, Phase::Enabled | Phase::Initialized)
        }
        Opcode::SET_HCA_CAP | Opcode::INIT_HCA => phase == Phase::Enabled,
        Opcode::DISABLE_HCA => matches!(phase, Phase::Enabled | Phase::TornDown),
        _ => phase == Phase::Initialized,
    }
}

/// Runs one command.
pub(crate) fn execute(st: &mut State, input: &[u8], outlen: u32) -> Exec {
    let Ok(h) = InHeader::decode(input) else {
        return Exec::Fail(CmdStatus::BAD_INP_LEN_ERR, synd::INPUT_SHORT);
    };
    let op = h.opcode;
    let Some(handler) = handler(op) else {
        return Exec::Fail(CmdStatus::BAD_OP_ERR, synd::BAD_OPCODE);
    };
    if (outlen as usize) < min_out(op) {
        return Exec::Fail(CmdStatus::BAD_OUTP_LEN_ERR, synd::OUTPUT_SHORT);
    }
    if !allowed(op, st.phase) {
        return Exec::Fail(CmdStatus::BAD_RES_STATE_ERR, synd::PHASE);
    }
    handler(st, input, outlen)
}

/// A command's page list and its doorbell record's address, as one list.
fn with_dbr(mut pas: Vec<u64>, dbr: u64) -> Vec<u64> {
    pas.push(dbr);
    pas
}

/// The host memory a command hands to the firmware: the queue buffer pages and doorbell
/// record of CREATE_CQ, CREATE_EQ and CREATE_QP, the pages of MANAGE_PAGES GIVE.
pub(crate) fn memory_named(input: &[u8]) -> Vec<u64> {
    use firmware_cmds::mlx5::ops::Command;
    use firmware_cmds::mlx5::ops::cq::CreateCq;
    use firmware_cmds::mlx5::ops::eq::CreateEq;
    use firmware_cmds::mlx5::ops::pages::{ManagePages, PagesOp};
    use firmware_cmds::mlx5::ops::qp::CreateQp;
    let Ok(h) = InHeader::decode(input) else {
        return Vec::new();
    };
    match h.opcode {
        Opcode::CREATE_CQ => CreateCq::decode(input)
            .map(|c| with_dbr(c.pas, c.ctx.dbr_addr))
            .unwrap_or_default(),
        Opcode::CREATE_EQ => CreateEq::decode(input).map(|c| c.pas).unwrap_or_default(),
        Opcode::CREATE_QP => CreateQp::decode(input)
            .map(|c| with_dbr(c.pas, c.ctx.dbr_addr))
            .unwrap_or_default(),
        Opcode::MANAGE_PAGES => match ManagePages::decode(input).map(|m| m.op) {
            Ok(PagesOp::Give(pas)) => pas,
            _ => Vec::new(),
        },
        _ => Vec::new(),
    }
}

type Handler = fn(&mut State, &[u8], u32) -> Exec;

pub(super) fn done(r: Result<Vec<u8>, Failure>) -> Exec {
    match r {
        Ok(out) => Exec::Out(out),
        Err((s, y)) => Exec::Fail(s, y),
    }
}

/// Wraps a handler that never asks the SMA.
macro_rules! plain {
    ($f:path) => {
        |st: &mut State, input: &[u8], outlen: u32| done($f(st, input, outlen))
    };
}

fn handler(op: Opcode) -> Option<Handler> {
    Some(match op {
        Opcode::ENABLE_HCA => plain!(hca::enable_hca),
        Opcode::DISABLE_HCA => plain!(hca::disable_hca),
        Opcode::INIT_HCA => plain!(hca::init_hca),
        Opcode::TEARDOWN_HCA => plain!(hca::teardown_hca),
        Opcode::QUERY_ISSI => plain!(hca::query_issi),
        Opcode::SET_ISSI => plain!(hca::set_issi),
        Opcode::QUERY_HCA_CAP => plain!(hca::query_hca_cap),
        Opcode::SET_HCA_CAP => plain!(hca::set_hca_cap),
        Opcode::ACCESS_REG => hca::access_reg,
        Opcode::QUERY_SPECIAL_CONTEXTS => plain!(hca::query_special_contexts),
        Opcode::QUERY_PAGES => plain!(pages::query_pages),
        Opcode::MANAGE_PAGES => plain!(pages::manage_pages),
        Opcode::ALLOC_UAR => plain!(queues::alloc_uar),
        Opcode::DEALLOC_UAR => plain!(queues::dealloc_uar),
        Opcode::ALLOC_PD => plain!(queues::alloc_pd),
        Opcode::DEALLOC_PD => plain!(queues::dealloc_pd),
        Opcode::CREATE_EQ => plain!(queues::create_eq),
        Opcode::DESTROY_EQ => plain!(queues::destroy_eq),
        Opcode::CREATE_CQ => plain!(queues::create_cq),
        Opcode::DESTROY_CQ => plain!(queues::destroy_cq),
        Opcode::CREATE_QP => plain!(qp::create_qp),
        Opcode::DESTROY_QP => plain!(qp::destroy_qp),
        Opcode::QUERY_QP => plain!(qp::query_qp),
        Opcode::RST2INIT_QP
        | Opcode::INIT2RTR_QP
        | Opcode::RTR2RTS_QP
        | Opcode::SQERR2RTS_QP
        | Opcode::QP_2ERR_QP
        | Opcode::QP_2RST_QP => plain!(qp::modify_qp),
        Opcode::QUERY_HCA_VPORT_CONTEXT => plain!(port::query_hca_vport_context),
        Opcode::QUERY_VPORT_STATE => plain!(port::query_vport_state),
        Opcode::MAD_IFC => port::mad_ifc,
        _ => return None,
    })
}

//! The port as firmware reports it: MAD_IFC (handed to the port's SMA on the fabric),
//! QUERY_HCA_VPORT_CONTEXT and QUERY_VPORT_STATE.

use firmware_cmds::mlx5::cmd::status::CmdStatus;
use firmware_cmds::mlx5::ops::mad_ifc::MadIfc;
use firmware_cmds::mlx5::ops::vport::{
    HcaVportContext, QueryHcaVportContext, QueryVportState, VportState,
};
use firmware_cmds::mlx5::ops::{Command, CommandOutput};

use super::{Exec, Failure, decode_failure, encoded, synd};
use crate::mlx5::state::State;

type Out = Result<Vec<u8>, Failure>;

/// IB PortState Active.
const PORT_ACTIVE: u8 = 4;

pub(super) fn mad_ifc(st: &mut State, input: &[u8], _: u32) -> Exec {
    let c = match MadIfc::decode(input) {
        Ok(c) => c,
        Err(e) => {
            let (s, y) = decode_failure(&e);
            return Exec::Fail(s, y);
        }
    };
    if c.port == 0 || c.port > st.cfg.ports {
        return Exec::Fail(CmdStatus::BAD_PARAM_ERR, synd::PORT);
    }
    Exec::Mad {
        port: c.port,
        mad: Box::new(c.mad),
        ignore_mkey: c.ignore_mkey,
    }
}

/// Port `n` (0 means port 1, as the kernel leaves it on single-port devices).
fn port_index(st: &State, n: u8) -> Result<usize, Failure> {
    let p = if n == 0 { 1 } else { n };
    if p > st.cfg.ports {
        return Err((CmdStatus::BAD_PARAM_ERR, synd::PORT));
    }
    Ok(usize::from(p - 1))
}

pub(super) fn query_hca_vport_context(st: &mut State, input: &[u8], _: u32) -> Out {
    let c = QueryHcaVportContext::decode(input).map_err(|e| decode_failure(&e))?;
    if c.other_vport || c.vport_number != 0 {
        return Err((CmdStatus::BAD_PARAM_ERR, synd::FUNCTION));
    }
    let p = &st.ports[port_index(st, c.port_num)?].snapshot;
    encoded(
        HcaVportContext {
            // A PF without IB virtualization owns its QP0.
            has_smi: true,
            port_physical_state: p.phys_state,
            port_state: p.state,
            vport_state: p.state,
            system_image_guid: p.node_guid,
            port_guid: p.port_guid,
            node_guid: p.node_guid,
            cap_mask1: p.capability_mask,
            lid: p.lid,
            lmc: p.lmc,
            sm_lid: p.sm_lid,
            sm_sl: p.sm_sl,
            ..HcaVportContext::default()
        }
        .encode(),
    )
}

pub(super) fn query_vport_state(st: &mut State, input: &[u8], _: u32) -> Out {
    let c = QueryVportState::decode(input).map_err(|e| decode_failure(&e))?;
    if c.other_vport || c.vport_number != 0 {
        return Err((CmdStatus::BAD_PARAM_ERR, synd::FUNCTION));
    }
    let up = st.ports[0].snapshot.state == PORT_ACTIVE;
    encoded(
        VportState {
            admin_state: 1,
            state: u8::from(up),
        }
        .encode(),
    )
}

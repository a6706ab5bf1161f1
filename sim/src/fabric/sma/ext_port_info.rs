//! Mellanox ExtendedPortInfo (vendor SMP attribute 0xFF90): the FDR10 speed, which PortInfo
//! has no bit for.
//!
//! Every node answers it, as ibsim's `sim_mad.c` `do_extportinfo` does, since the tools that
//! ask decide by NodeInfo DeviceID alone, not by any capability bit: infiniband-diags'
//! `is_mlnx_ext_port_info_supported` (ibportstate queries it before any operation and exits
//! on failure; libibnetdisc asks QDR ports); OpenSM asks too where it judges a node supports
//! it (`osm_req.c`, `mlnx_epi_supported`). A real Mellanox switch or HCA with one of those
//! DeviceIDs answers it.
//!
//! Layout (OpenSM `ib_types.h` `ib_mlnx_ext_port_info_t`, libibmad `IB_MLNX_EXT_PORT_*`):
//! byte 3 StateChangeEnable, byte 7 LinkSpeedSupported, byte 11 LinkSpeedEnabled, byte 15
//! LinkSpeedActive, the rest reserved; speed bit 0 is FDR10.
//!
//! AttributeModifier: the port, as for PortInfo (0 on a CA is the port the SMP came in by);
//! beyond the node's ports is 0x001C. The values come from the port's rates, as ibsim's
//! `update_portinfo` fills them: Supported and Enabled both FDR10 where the topology enables
//! it (an `FDR10` link token, or FDR and faster, which enable it too), Active FDR10 when the
//! link trained to FDR10 and to no extended speed. (ibsim fills the three only for a port
//! with no extended speed active and leaves zeros on the others; here a port at EDR still
//! reports the FDR10 it supports and enables, as PortInfo reports its enabled speeds whatever
//! speed is active.)
//!
//! A Set whose StateChangeEnable bit 0 is clear changes nothing (the bit is what tells the
//! port to apply LinkSpeedEnabled; OpenSM sets it when it changes FDR10). A Set that would
//! change the FDR10 enable is refused with 0x001C, changing nothing: FDR10 is enabled by the
//! topology only here (ibsim stores what a Set writes and acts on none of it). OpenSM writes
//! it only for a port that supports FDR10 and enables something else, which does not happen
//! here, where the two are one bit.

use mad_wire::status;

use super::{Data, Sma, Status};
use crate::fabric::model::{NodeId, NodeType};

/// Byte offsets of the fields in the SMP data.
mod field {
    pub const STATE_CHANGE_ENABLE: usize = 3;
    pub const LINK_SPEED_SUPPORTED: usize = 7;
    pub const LINK_SPEED_ENABLED: usize = 11;
    pub const LINK_SPEED_ACTIVE: usize = 15;
}

/// The FDR10 bit of the three speed fields.
pub const FDR10: u8 = 0x01;
/// StateChangeEnable bit 0: apply the LinkSpeedEnabled written.
const APPLY_LINK_SPEED: u8 = 0x01;

const BAD: Status = status::INVALID_ATTR_VALUE;

impl Sma<'_> {
    /// The Mellanox ExtendedPortInfo attribute handler.
    pub(super) fn ext_port_info(
        &mut self,
        node: NodeId,
        in_port: u8,
        set: bool,
        attr_mod: u32,
        data: &mut Data,
    ) -> Status {
        let n = self.fabric.node(node);
        if attr_mod > u32::from(n.num_ports()) {
            return BAD;
        }
        let target = if n.kind() != NodeType::Switch && attr_mod == 0 {
            in_port
        } else {
            attr_mod as u8
        };
        let Some(pid) = self.fabric.port_id(node, target) else {
            return BAD;
        };
        let p = self.fabric.port(pid);
        let enabled = if p.enabled.fdr10 { FDR10 } else { 0 };
        // Two ends that both enable FDR10 and an extended speed run the extended speed
        // (PortInfo shows it active); FDR10 is active only on a link without one.
        let a = p.state.active;
        let active = if a.fdr10 && a.speed_ext == 0 {
            FDR10
        } else {
            0
        };
        let st = if set
            && data[field::STATE_CHANGE_ENABLE] & APPLY_LINK_SPEED != 0
            && data[field::LINK_SPEED_ENABLED] != enabled
        {
            BAD
        } else {
            status::SUCCESS
        };
        data.fill(0);
        data[field::LINK_SPEED_SUPPORTED] = enabled;
        data[field::LINK_SPEED_ENABLED] = enabled;
        data[field::LINK_SPEED_ACTIVE] = active;
        st
    }
}

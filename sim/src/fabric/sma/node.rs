//! NodeInfo and NodeDescription: read-only, modifier 0.

use mad_wire::attr::node_description::{NodeDescription, NodeDescriptionRepr};
use mad_wire::attr::node_info::{self, NodeInfo, NodeInfoRepr};
use mad_wire::{class, status};

use super::defaults::{CA_PARTITION_CAP, NODE_REVISION, SWITCH_PARTITION_CAP};
use super::{Data, Sma, Status};
use crate::fabric::model::{NodeId, NodeType};

impl Sma<'_> {
    /// NodeInfo: the node's identity, with PortGUID and LocalPortNum of the port the SMP
    /// entered by (a switch's ports share port 0's GUID).
    pub(super) fn node_info(
        &mut self,
        node: NodeId,
        in_port: u8,
        set: bool,
        attr_mod: u32,
        data: &mut Data,
    ) -> Status {
        let n = self.fabric.node(node);
        let kind = n.kind();
        let port_guid = self
            .fabric
            .port_id(node, if kind == NodeType::Switch { 0 } else { in_port })
            .map_or(0, |p| self.fabric.port(p).guid());
        NodeInfoRepr {
            base_version: class::BASE_VERSION,
            class_version: class::SUBN_CLASS_VERSION,
            node_type: match kind {
                NodeType::Ca => node_info::NodeType::Ca,
                NodeType::Switch => node_info::NodeType::Switch,
                NodeType::Router => node_info::NodeType::Router,
            },
            num_ports: n.num_ports(),
            system_image_guid: n.sys_image_guid(),
            node_guid: n.guid(),
            port_guid,
            partition_cap: if kind == NodeType::Switch {
                SWITCH_PARTITION_CAP
            } else {
                CA_PARTITION_CAP
            },
            device_id: n.device_id(),
            revision: NODE_REVISION,
            local_port_num: in_port,
            vendor_id: n.vendor_id(),
        }
        .emit(&mut NodeInfo::new_checked(&mut data[..]).expect("64 bytes hold NodeInfo"));
        data[node_info::LEN..].fill(0);
        if set {
            status::METHOD_ATTR_UNSUPPORTED
        } else if attr_mod != 0 {
            status::INVALID_ATTR_VALUE
        } else {
            status::SUCCESS
        }
    }

    /// NodeDescription: the node's description string, NUL-padded.
    pub(super) fn node_description(
        &mut self,
        node: NodeId,
        set: bool,
        attr_mod: u32,
        data: &mut Data,
    ) -> Status {
        // The fabric refuses descriptions longer than the attribute, so this cannot fail; an
        // empty description is the fallback all the same.
        let repr = NodeDescriptionRepr::from_text(self.fabric.description(node))
            .unwrap_or(NodeDescriptionRepr { bytes: [0; 64] });
        repr.emit(&mut NodeDescription::new_checked(&mut data[..]).expect("64 bytes"));
        if set {
            status::METHOD_ATTR_UNSUPPORTED
        } else if attr_mod != 0 {
            status::INVALID_ATTR_VALUE
        } else {
            status::SUCCESS
        }
    }
}

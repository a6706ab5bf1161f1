//! NodeInfo (SM attribute 0x0011, 40 bytes; IBA 14.2.5.3, kernel `struct ib_node_info`).
//!
//! | Offset | Size | Field |
//! |---|---|---|
//! | 0 | 1 | BaseVersion |
//! | 1 | 1 | ClassVersion |
//! | 2 | 1 | NodeType |
//! | 3 | 1 | NumPorts |
//! | 4 | 8 | SystemImageGUID |
//! | 12 | 8 | NodeGUID |
//! | 20 | 8 | PortGUID |
//! | 28 | 2 | PartitionCap |
//! | 30 | 2 | DeviceID |
//! | 32 | 4 | Revision |
//! | 36 | 1 | LocalPortNum |
//! | 37 | 3 | VendorID |

use crate::error::{Result, check_len};
use crate::field::{
    set_u16_at, set_u24_at, set_u32_at, set_u64_at, u16_at, u24_at, u32_at, u64_at,
};
use crate::macros::wire_enum;

/// Length of NodeInfo.
pub const LEN: usize = 40;

wire_enum! {
    /// NodeType.
    pub enum NodeType(u8) {
        /// Channel adapter.
        Ca = 1,
        /// Switch.
        Switch = 2,
        /// Router.
        Router = 3,
    }
}

mod field {
    pub const BASE_VERSION: usize = 0;
    pub const CLASS_VERSION: usize = 1;
    pub const NODE_TYPE: usize = 2;
    pub const NUM_PORTS: usize = 3;
    pub const SYSTEM_IMAGE_GUID: usize = 4;
    pub const NODE_GUID: usize = 12;
    pub const PORT_GUID: usize = 20;
    pub const PARTITION_CAP: usize = 28;
    pub const DEVICE_ID: usize = 30;
    pub const REVISION: usize = 32;
    pub const LOCAL_PORT_NUM: usize = 36;
    pub const VENDOR_ID: usize = 37;
}

/// A typed view of a NodeInfo attribute.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeInfo<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> NodeInfo<T> {
    /// Views `buffer` as NodeInfo, checking that it holds 40 bytes.
    pub fn new_checked(buffer: T) -> Result<Self> {
        check_len("NodeInfo", buffer.as_ref(), LEN)?;
        Ok(Self { buffer })
    }

    /// Gives the buffer back.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// BaseVersion of the MADs the node supports.
    pub fn base_version(&self) -> u8 {
        self.buffer.as_ref()[field::BASE_VERSION]
    }

    /// ClassVersion of subnet management the node supports.
    pub fn class_version(&self) -> u8 {
        self.buffer.as_ref()[field::CLASS_VERSION]
    }

    /// NodeType.
    pub fn node_type(&self) -> NodeType {
        NodeType::from(self.buffer.as_ref()[field::NODE_TYPE])
    }

    /// NumPorts (physical ports; switch port 0 not counted).
    pub fn num_ports(&self) -> u8 {
        self.buffer.as_ref()[field::NUM_PORTS]
    }

    /// SystemImageGUID.
    pub fn system_image_guid(&self) -> u64 {
        u64_at(self.buffer.as_ref(), field::SYSTEM_IMAGE_GUID)
    }

    /// NodeGUID.
    pub fn node_guid(&self) -> u64 {
        u64_at(self.buffer.as_ref(), field::NODE_GUID)
    }

    /// PortGUID of the port the SMP arrived on (switches: port 0's, the NodeGUID).
    pub fn port_guid(&self) -> u64 {
        u64_at(self.buffer.as_ref(), field::PORT_GUID)
    }

    /// PartitionCap: entries in the P_Key table.
    pub fn partition_cap(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field::PARTITION_CAP)
    }

    /// DeviceID.
    pub fn device_id(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field::DEVICE_ID)
    }

    /// Revision.
    pub fn revision(&self) -> u32 {
        u32_at(self.buffer.as_ref(), field::REVISION)
    }

    /// LocalPortNum: the port the SMP entered the node by.
    pub fn local_port_num(&self) -> u8 {
        self.buffer.as_ref()[field::LOCAL_PORT_NUM]
    }

    /// VendorID (24-bit IEEE OUI).
    pub fn vendor_id(&self) -> u32 {
        u24_at(self.buffer.as_ref(), field::VENDOR_ID)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> NodeInfo<T> {
    /// Sets BaseVersion.
    pub fn set_base_version(&mut self, value: u8) {
        self.buffer.as_mut()[field::BASE_VERSION] = value;
    }

    /// Sets ClassVersion.
    pub fn set_class_version(&mut self, value: u8) {
        self.buffer.as_mut()[field::CLASS_VERSION] = value;
    }

    /// Sets NodeType.
    pub fn set_node_type(&mut self, value: NodeType) {
        self.buffer.as_mut()[field::NODE_TYPE] = value.into();
    }

    /// Sets NumPorts.
    pub fn set_num_ports(&mut self, value: u8) {
        self.buffer.as_mut()[field::NUM_PORTS] = value;
    }

    /// Sets SystemImageGUID.
    pub fn set_system_image_guid(&mut self, value: u64) {
        set_u64_at(self.buffer.as_mut(), field::SYSTEM_IMAGE_GUID, value);
    }

    /// Sets NodeGUID.
    pub fn set_node_guid(&mut self, value: u64) {
        set_u64_at(self.buffer.as_mut(), field::NODE_GUID, value);
    }

    /// Sets PortGUID.
    pub fn set_port_guid(&mut self, value: u64) {
        set_u64_at(self.buffer.as_mut(), field::PORT_GUID, value);
    }

    /// Sets PartitionCap.
    pub fn set_partition_cap(&mut self, value: u16) {
        set_u16_at(self.buffer.as_mut(), field::PARTITION_CAP, value);
    }

    /// Sets DeviceID.
    pub fn set_device_id(&mut self, value: u16) {
        set_u16_at(self.buffer.as_mut(), field::DEVICE_ID, value);
    }

    /// Sets Revision.
    pub fn set_revision(&mut self, value: u32) {
        set_u32_at(self.buffer.as_mut(), field::REVISION, value);
    }

    /// Sets LocalPortNum.
    pub fn set_local_port_num(&mut self, value: u8) {
        self.buffer.as_mut()[field::LOCAL_PORT_NUM] = value;
    }

    /// Sets VendorID (24 bits; higher bits dropped).
    pub fn set_vendor_id(&mut self, value: u32) {
        set_u24_at(self.buffer.as_mut(), field::VENDOR_ID, value);
    }
}

/// NodeInfo as plain values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct NodeInfoRepr {
    /// BaseVersion.
    pub base_version: u8,
    /// ClassVersion.
    pub class_version: u8,
    /// NodeType.
    pub node_type: NodeType,
    /// NumPorts.
    pub num_ports: u8,
    /// SystemImageGUID.
    pub system_image_guid: u64,
    /// NodeGUID.
    pub node_guid: u64,
    /// PortGUID.
    pub port_guid: u64,
    /// PartitionCap.
    pub partition_cap: u16,
    /// DeviceID.
    pub device_id: u16,
    /// Revision.
    pub revision: u32,
    /// LocalPortNum.
    pub local_port_num: u8,
    /// VendorID, 24 bits.
    pub vendor_id: u32,
}

impl NodeInfoRepr {
    /// Reads every field of `view`.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(view: &NodeInfo<&T>) -> Result<Self> {
        Ok(Self {
            base_version: view.base_version(),
            class_version: view.class_version(),
            node_type: view.node_type(),
            num_ports: view.num_ports(),
            system_image_guid: view.system_image_guid(),
            node_guid: view.node_guid(),
            port_guid: view.port_guid(),
            partition_cap: view.partition_cap(),
            device_id: view.device_id(),
            revision: view.revision(),
            local_port_num: view.local_port_num(),
            vendor_id: view.vendor_id(),
        })
    }

    /// Bytes [`NodeInfoRepr::emit`] writes.
    pub const fn buffer_len(&self) -> usize {
        LEN
    }

    /// Writes every field into `view`.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(&self, view: &mut NodeInfo<&mut T>) {
        view.set_base_version(self.base_version);
        view.set_class_version(self.class_version);
        view.set_node_type(self.node_type);
        view.set_num_ports(self.num_ports);
        view.set_system_image_guid(self.system_image_guid);
        view.set_node_guid(self.node_guid);
        view.set_port_guid(self.port_guid);
        view.set_partition_cap(self.partition_cap);
        view.set_device_id(self.device_id);
        view.set_revision(self.revision);
        view.set_local_port_num(self.local_port_num);
        view.set_vendor_id(self.vendor_id);
    }
}

//! How a device model's port meets the simulated fabric. The fabric implements [`PortLink`]
//! for each attached device port; the device implements [`PortSink`] to receive.
//!
//! The rules a device follows (when deliveries happen, what it may hold while calling in) are
//! in [`crate::net`]; the network there is the implementation.
//!
//! A device with no fabric of its own is attached to a one-node fabric (its own CA node), so
//! the same code serves a standalone HCA (loopback to its own LID, its own SMA behind MAD_IFC)
//! and an HCA on a large simulated subnet.

use std::time::Duration;

use crate::packet::Packet;

/// What a device's port can ask of the fabric it is attached to.
pub trait PortLink: Send + Sync {
    /// Put `packet` on the wire out of this port (the fabric routes it; it may be delivered to
    /// this same port again when addressed to its own LID: loopback).
    fn transmit(&self, packet: Packet);

    /// [`transmit`](Self::transmit) by a device that read the clock at `now` for the
    /// operation the packet is part of (a doorbell), so that the fabric need not read it
    /// again. `now` is not later than the clock.
    fn transmit_at(&self, packet: Packet, now: Duration) {
        let _ = now;
        self.transmit(packet);
    }

    /// Hand a MAD to the management agent (SMA/PMA) of this port's own node and return its
    /// answer, as firmware does for MAD_IFC; `None` when the agent does not answer (for
    /// example, not a Get/Set it handles).
    fn local_mad(&self, mad: &[u8; 256], ignore_mkey: bool) -> Option<[u8; 256]>;

    /// The port's current management state, as the SMA holds it.
    fn port_info(&self) -> PortSnapshot;

    /// Sets then clears CapabilityMask bits of this port and returns the new mask: how the
    /// host asks its firmware for IsSM when an SM opens the port (the kernel's
    /// `ib_modify_port` through the issm device; on mlx5, MODIFY_HCA_VPORT_CONTEXT).
    fn modify_capability_mask(&self, set: u32, clear: u32) -> u32;

    /// The device dropped a packet this port received, for a reason the port's PMA counts:
    /// the drops happen inside the device, the counters live with the fabric's port. A device
    /// calls it with none of its own locks held (it may from its [`PortSink::deliver`]: the
    /// fabric holds no lock of its own there either). The default counts nothing, for a link
    /// with no PMA behind it.
    fn count_drop(&self, drop: ReceiveDrop) {
        let _ = drop;
    }
}

/// A received packet the device dropped, by the port counter that counts it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReceiveDrop {
    /// A VL15 packet (an SMP for QP0) dropped for want of resources: QP0 not in a state that
    /// receives, or no receive posted (PortCounters:VL15Dropped, IBA 16.1.3.5; mlx5 firmware
    /// reports its `vl_15_dropped` there).
    Vl15,
    /// A data packet (not VL15) dropped for want of room on its way into the device: the
    /// deliveries waiting for a fabric server's client were at their limit
    /// ([`RemoteTarget::max_pending`](crate::net::remote::RemoteTarget::max_pending)), or the
    /// server's queue for the client was full. Counted in PortRcvErrors, whose causes include
    /// packets discarded due to buffer overrun (IBA 16.1.3.5; PortCounters has no finer
    /// counter for data packets a port could not take).
    Overrun,
}

impl ReceiveDrop {
    /// What a port counts when it could not take `packet` for want of room: an SMP is a
    /// VL15 drop, anything else an overrun.
    pub fn for_packet(packet: &crate::packet::Packet) -> ReceiveDrop {
        if packet.vl15 {
            ReceiveDrop::Vl15
        } else {
            ReceiveDrop::Overrun
        }
    }
}

/// What a device receives from the fabric.
pub trait PortSink: Send + Sync {
    /// A packet arrived at the device's port `port`.
    fn deliver(&self, port: u8, packet: Packet);

    /// [`deliver`](Self::deliver) from a scheduler that read the clock at `now` for the run
    /// of due events this delivery is part of, so that the device need not read it again.
    fn deliver_at(&self, port: u8, packet: Packet, now: Duration) {
        let _ = now;
        self.deliver(port, packet);
    }

    /// The port's management state changed (LID, state, P_Keys, client reregister): the device
    /// raises its port-change event.
    fn port_changed(&self, port: u8, change: PortChange);
}

/// A port's state as the SMA holds it, for QUERY_HCA_VPORT_CONTEXT and friends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct PortSnapshot {
    /// PortInfo:PortState (1 Down .. 4 Active).
    pub state: u8,
    /// PortInfo:PortPhysicalState (5 LinkUp).
    pub phys_state: u8,
    /// LID.
    pub lid: u16,
    /// LMC.
    pub lmc: u8,
    /// Master SM LID.
    pub sm_lid: u16,
    /// Master SM SL.
    pub sm_sl: u8,
    /// Port GUID.
    pub port_guid: u64,
    /// Node GUID.
    pub node_guid: u64,
    /// Subnet prefix.
    pub subnet_prefix: u64,
    /// Capability mask.
    pub capability_mask: u32,
    /// P_Key table entries.
    pub pkey_table_len: u16,
}

/// Which kind of port change (the mlx5 PORT_CHANGE subtypes map onto these).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PortChange {
    /// The port went down.
    Down,
    /// The port became active.
    Active,
    /// The port went to INIT.
    Initialized,
    /// The LID changed.
    Lid,
    /// The P_Key table changed.
    Pkey,
    /// The GUID table changed.
    Guid,
    /// The SM asked for client reregistration.
    ClientReregister,
}

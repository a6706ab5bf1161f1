//! A device's view of the port it attached to: the [`PortLink`] the network hands out.

use std::sync::Arc;
use std::time::Duration;

use mad_wire::attr::port_info::cap_mask;

use super::Shared;
use super::drops::DropReason;
use super::engine::NetState;
use crate::fabric::PortId;
use crate::fabric::sma::Effect;
use crate::link::{PortLink, PortSnapshot, ReceiveDrop};
use crate::packet::Packet;

/// The link between one device port and the network. Dropping it detaches the device (and
/// clears the IsSM bit it may have set, as ibsim does when its SM client goes away).
pub struct AttachedPort {
    pub(super) shared: Arc<Shared>,
    pub(super) port: PortId,
    pub(super) id: u64,
}

impl std::fmt::Debug for AttachedPort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AttachedPort")
            .field("port", &self.port)
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl AttachedPort {
    /// [`PortLink::count_drop`] of `n` packets at once (what a fabric server's client reports
    /// in one COUNT_DROP frame).
    pub(crate) fn count_drops(&self, drop: ReceiveDrop, n: u64) {
        self.shared.run(|st| {
            st.count_port_drops(self.port, drop, DropReason::DeviceDropped(drop), n);
        });
    }

    /// [`PortLink::transmit`] for a device that is not trusted with its source LID (a fabric
    /// server's client, in another process): the packet's SLID is forced into this port's
    /// own LIDs, its base LID with the path bits the LMC leaves to the sender kept, so that
    /// no client can send as another port.
    pub(crate) fn transmit_as_own(&self, mut packet: Packet) {
        self.shared.run(|st| {
            packet.slid = st.own_slid(self.port, packet.slid);
            st.transmit(self.port, packet);
        });
    }
}

impl PortLink for AttachedPort {
    fn transmit(&self, packet: Packet) {
        self.shared.run(|st| st.transmit(self.port, packet));
    }

    fn transmit_at(&self, packet: Packet, now: Duration) {
        self.shared.run_at(now, |st| st.transmit(self.port, packet));
    }

    fn local_mad(&self, mad: &[u8; 256], ignore_mkey: bool) -> Option<[u8; 256]> {
        self.shared
            .run(|st| st.local_mad(self.port, mad, ignore_mkey))
    }

    fn port_info(&self) -> PortSnapshot {
        self.shared.run(|st| st.snapshot(self.port))
    }

    fn modify_capability_mask(&self, set: u32, clear: u32) -> u32 {
        self.shared.run(|st| {
            let old = st.fabric.port(self.port).state.capability_mask;
            set_capability_mask(st, self.port, (old | set) & !clear)
        })
    }

    fn count_drop(&self, drop: ReceiveDrop) {
        self.count_drops(drop, 1);
    }
}

/// Gives `port` the CapabilityMask `mask` and returns it. A change makes the SMA send trap 144
/// when the new mask announces notices or traps and capability-mask notices (ibsim's
/// `set_issm`).
fn set_capability_mask(st: &mut NetState, port: PortId, mask: u32) -> u32 {
    let s = &mut st.fabric.port_mut(port).state;
    let old = std::mem::replace(&mut s.capability_mask, mask);
    if old != mask
        && mask & (cap_mask::HAS_NOTICE | cap_mask::HAS_TRAP) != 0
        && mask & cap_mask::HAS_CAP_MASK_NOTICE != 0
    {
        st.agents.effects.push(Effect::LocalChanges(port));
    }
    mask
}

impl Drop for AttachedPort {
    fn drop(&mut self) {
        self.shared.run(|st| {
            if st.attached.get(&self.port).is_some_and(|a| a.id == self.id) {
                st.attached.remove(&self.port);
                let mask = st.fabric.port(self.port).state.capability_mask & !cap_mask::IS_SM;
                set_capability_mask(st, self.port, mask);
            }
        });
    }
}

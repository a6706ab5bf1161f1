//! The device's ports and the fabric: the [`PortSink`] the fabric delivers to, and the view of
//! each port (its PortInfo snapshot and P_Key table) the device refreshes from its
//! [`PortLink`](crate::link::PortLink).
//!
//! Re-entrancy: the device never calls its link while holding its lock. From inside a
//! [`PortSink`] callback it makes one call only, [`PortLink::count_drop`] after a delivery it
//! dropped, its lock released (the fabric runs deliveries with no lock of its own held, as
//! [`crate::net`] says). A port change only marks the view stale and posts the PORT_CHANGE
//! event; the view is refreshed on the next driver action (a doorbell, a command, a wait).

use std::sync::Weak;
use std::time::Duration;

use firmware_cmds::mlx5::eqe::{EqeEvent, port_change};
use mad_wire::attr::pkey_table::{PKEYS_PER_BLOCK, PkeyTable};
use mad_wire::attr_id::sm;
use mad_wire::smp::{Smp, SmpRepr};
use mad_wire::{MAD_LEN, status};

use super::Inner;
use super::counters::DropReason;
use super::state::PortView;
use crate::link::{PortChange, PortLink, PortSink};
use crate::packet::Packet;

/// MAD buffers kept for reuse: as many as packets a burst of deliveries brings (a window of
/// up to 1024 MADs in flight arrives at once in virtual time), 256 KiB at most. A smaller
/// pool overflows on every burst, and the sends behind it allocate again.
const MAD_POOL_MAX: usize = 1024;

/// The PORT_CHANGE subtype of a change.
pub(crate) fn subtype(change: PortChange) -> u8 {
    match change {
        PortChange::Down => port_change::DOWN,
        PortChange::Active => port_change::ACTIVE,
        PortChange::Initialized => port_change::INITIALIZED,
        PortChange::Lid => port_change::LID,
        PortChange::Pkey => port_change::PKEY,
        PortChange::Guid => port_change::GUID,
        PortChange::ClientReregister => port_change::CLIENT_REREG,
    }
}

/// Reads the port's view from its link: PortInfo through `port_info`, the P_Key table through
/// Get(P_KeyTable) SMPs to the port's own SMA (what the firmware itself holds on hardware).
pub(crate) fn read_view(link: &dyn PortLink, entries: usize) -> PortView {
    let snapshot = link.port_info();
    let mut pkeys = vec![0u16; entries];
    pkeys[0] = 0xffff;
    for block in 0..entries.div_ceil(PKEYS_PER_BLOCK) {
        let Some(table) = pkey_block(link, block as u32) else {
            break;
        };
        for (i, k) in table.iter().enumerate() {
            if let Some(slot) = pkeys.get_mut(block * PKEYS_PER_BLOCK + i) {
                *slot = *k;
            }
        }
    }
    PortView {
        snapshot,
        pkeys,
        linked: true,
    }
}

fn pkey_block(link: &dyn PortLink, block: u32) -> Option<[u16; PKEYS_PER_BLOCK]> {
    let req = SmpRepr::directed_get(
        &[],
        sm::PKEY_TABLE,
        block,
        0x6d6c_7835_0000_0000 | u64::from(block),
    )
    .ok()?;
    let mut mad = [0u8; MAD_LEN];
    let mut smp = Smp::new_checked(&mut mad[..]).ok()?;
    req.emit(&mut smp);
    let answer = link.local_mad(&mad, true)?;
    let resp = Smp::new_checked(&answer[..]).ok()?;
    let repr = SmpRepr::parse(&resp).ok()?;
    if repr.status & !status::DR_DIRECTION != 0 {
        return None;
    }
    let table = PkeyTable::new_checked(&repr.data[..]).ok()?;
    let mut out = [0u16; PKEYS_PER_BLOCK];
    for (i, k) in out.iter_mut().enumerate() {
        *k = table.pkey(i).ok()?;
    }
    Some(out)
}

/// What the fabric holds to reach the device: a weak handle, so that a fabric outliving the
/// device delivers into nothing rather than keeping it alive.
pub(crate) struct Sink(pub Weak<Inner>);

impl PortSink for Sink {
    fn deliver(&self, port: u8, packet: Packet) {
        if let Some(inner) = self.0.upgrade() {
            let now = inner.sched.now();
            inner.deliver(port, packet, now);
        }
    }

    fn deliver_at(&self, port: u8, packet: Packet, now: Duration) {
        if let Some(inner) = self.0.upgrade() {
            inner.deliver(port, packet, now);
        }
    }

    fn port_changed(&self, port: u8, change: PortChange) {
        let Some(inner) = self.0.upgrade() else {
            return;
        };
        if let Some(d) = inner.port_dirty.get(usize::from(port.wrapping_sub(1))) {
            d.store(true, std::sync::atomic::Ordering::SeqCst);
        }
        inner.with(|st| {
            if port == 0 || port > st.cfg.ports || st.health.fatal {
                return;
            }
            st.post_event(&EqeEvent::PortChange {
                port,
                sub_type: subtype(change),
            });
        });
    }
}

impl Inner {
    /// A packet from the fabric, at `now`.
    pub(crate) fn deliver(&self, port: u8, packet: Packet, now: Duration) {
        let counted = self.with_at(now, |st| {
            let counted = if self.down() || st.health.fatal {
                st.counters.drop_packet(DropReason::DeviceDown);
                None
            } else {
                st.receive(port, &packet)
            };
            // Keep the MAD buffer for the next send.
            if st.mad_pool.len() < MAD_POOL_MAX {
                st.mad_pool.push(packet.mad);
            }
            counted
        });
        // The port's PMA counts it, outside the device lock.
        if let (Some(drop), Some(link)) = (counted, self.link(port)) {
            link.count_drop(drop);
        }
    }
}

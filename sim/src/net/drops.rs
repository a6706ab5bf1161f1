//! Why the network dropped packets, counted per reason, so that a test can assert that a
//! packet was lost for the reason it meant to provoke (the PMA counters say where).

use super::smi::DrDiscard;
use crate::link::ReceiveDrop;

/// Why a packet was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DropReason {
    /// The egress port's link is not up (or the port is not cabled), or it went down while
    /// the delay of a fault held the packet on it, up again by the end of the delay or not
    /// (counted then).
    LinkDown,
    /// A data (non-VL15) packet met a port that is not Active (egress) or not Armed/Active
    /// (ingress).
    PortNotActive,
    /// A fault's drop rate lost it on a link.
    Fault,
    /// A fault's delay would have it arrive at or after `Duration::MAX`, the end of simulated
    /// time (a delay of `Duration::MAX`, or one too large to add to the clock): it never
    /// arrives, and is counted when it enters the link.
    DelayedForever,
    /// A switch had no LFT entry for the DLID (or the entry is above LinearFDBTop, or names a
    /// port the switch lacks, or the DLID is the reserved LID 0, which no switch forwards).
    /// Counted in the switch port's PortRcvSwitchRelayErrors.
    NoRoute,
    /// A multicast DLID: multicast forwarding is not simulated.
    Multicast,
    /// An end port received a packet for a LID that is not its own: a CA port, or a switch's
    /// port 0 that the switch's LFT led another LID to. Counted in that port's PortRcvErrors.
    WrongDlid,
    /// VL15 carried something other than an SMP to QP0, or an SMP came on another VL or QP.
    Vl15Violation,
    /// The SMI rules discarded a directed-route SMP.
    DirectedRoute(DrDiscard),
    /// A directed route with a LID-routed part (not simulated).
    DrLidRouted,
    /// The packet reached a simulated node where no agent takes it (a response, a trap, SMInfo
    /// with no SM there), or the agent answered nothing (M_Key violation, TrapRepress).
    NoTaker,
    /// It went round more hops than any path can have (an LFT loop).
    HopLimit,
    /// The device at a CA port dropped a packet the network had delivered to it, and said so
    /// ([`PortLink::count_drop`](crate::link::PortLink::count_drop); a fabric server's client
    /// in its COUNT_DROP frames): also counted in the port's PMA counter that
    /// [`ReceiveDrop`] names (VL15Dropped for an SMP, PortRcvErrors for a data packet it had
    /// no room for).
    DeviceDropped(ReceiveDrop),
    /// Behind a [`FabricServer`](super::remote::FabricServer): a packet for a client whose
    /// queue was full (the client does not read its socket;
    /// [`ServerStats::queue_drops`](super::remote::ServerStats::queue_drops)). Also counted
    /// in the client port's VL15Dropped (an SMP) or PortRcvErrors (a data packet), as a port
    /// without buffers drops it.
    ClientQueueFull,
    /// A GMP reached a simulated node's agents with a P_Key that matches no entry of the end
    /// port's P_Key table: counted in PortInfo:P_KeyViolations, trap 257.
    BadPkey,
    /// A GMP reached QP1 of a simulated node's agents with a Q_Key other than 0x80010000:
    /// counted in PortInfo:Q_KeyViolations, trap 258.
    BadQkey,
    /// The packet fell due at a device port whose device had gone by then, since the network
    /// routed it to the device (its sink dropped, e.g. detached before the scheduler ran the
    /// delivery; a packet a link delay holds is routed when the delay ends, and finds a port
    /// whose device detached meanwhile without it): delivered to nobody; or, behind a [`FabricServer`](super::remote::FabricServer), a packet for a
    /// client whose connection had ended or failed before the server could write it
    /// ([`ServerStats::gone_drops`](super::remote::ServerStats::gone_drops)). Counted by the
    /// network's scheduler
    /// ([`Scheduler::undelivered`](crate::Scheduler::undelivered)), for every network sharing
    /// that scheduler.
    DeviceGone,
}

/// Drops counted per reason since the network started.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DropCounts {
    counts: Vec<(DropReason, u64)>,
}

impl DropCounts {
    /// Counts one drop.
    pub(crate) fn count(&mut self, reason: DropReason) {
        self.add(reason, 1);
    }

    /// Counts `n` drops (none when `n` is 0).
    pub(crate) fn add(&mut self, reason: DropReason, n: u64) {
        match self.counts.iter_mut().find(|(r, _)| *r == reason) {
            Some((_, c)) => *c = c.saturating_add(n),
            None if n > 0 => self.counts.push((reason, n)),
            None => {}
        }
    }

    /// Sets the count of `reason` (one kept outside the network's state) to `n`; a zero
    /// count adds no entry.
    pub(crate) fn set(&mut self, reason: DropReason, n: u64) {
        match self.counts.iter_mut().find(|(r, _)| *r == reason) {
            Some((_, c)) => *c = n,
            None if n > 0 => self.counts.push((reason, n)),
            None => {}
        }
    }

    /// Drops for `reason`.
    pub fn get(&self, reason: DropReason) -> u64 {
        self.counts
            .iter()
            .find(|(r, _)| *r == reason)
            .map_or(0, |(_, n)| *n)
    }

    /// All drops.
    pub fn total(&self) -> u64 {
        self.counts.iter().map(|(_, n)| n).sum()
    }

    /// Every reason with its count, in the order first seen ([`DropReason::DeviceGone`], counted
    /// apart, last).
    pub fn iter(&self) -> impl Iterator<Item = (DropReason, u64)> + '_ {
        self.counts.iter().copied()
    }
}

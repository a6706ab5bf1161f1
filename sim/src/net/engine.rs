//! The forwarding engine: what happens to a packet from the moment a device transmits it until
//! it is delivered to a device, answered by a simulated node's agent, or dropped. It runs under
//! the network's lock and never calls a device: deliveries and port changes become
//! [`Output`]s that the network hands to the scheduler once the lock is released.
//!
//! Every step is an index operation on the fabric (a link's peer, an LFT entry, a LID's owner),
//! so the cost of a packet grows with its hops, never with the fabric's size.
//!
//! A packet crosses a link in two halves: it leaves one end (`leave`: the sender's checks and
//! counters, the faults) and enters the other (`enter`: the receiver's checks and counters,
//! then what the node does with it). With no delay both happen at once. A link's (or node's)
//! delay holds the packet between the halves: it becomes an internal event of the scheduler
//! at the time the delay ends, which takes the network's lock and carries the packet on from
//! the far end (`land`). So everything at the far end (an agent's processing and its
//! effects, the next hop, a delivery) happens at that time, as does every later step of the
//! packet and its response.

use std::sync::Weak;
use std::time::Duration;

use mad_wire::attr::notice::{BadKey, BadMkey, BadMkeyRoute, Notice, NoticeRepr};
use mad_wire::attr::port_info::cap_mask;
use mad_wire::smp::{Smp, SmpRepr, SmpRoute};
use mad_wire::{PERMISSIVE_LID, attr_id, class, method};

use super::Shared;
use super::drops::{DropCounts, DropReason};
use super::fault::{Faults, Verdict};
use super::smi::{self, DrAction};
use crate::fabric::sma::{Agents, Effect, KeyViolation, QP1_QKEY, Reply, Silent, Sma};
use crate::fabric::state::{LinkState, MCAST_LID_BASE, PhysState};
use crate::fabric::{Fabric, NodeId, NodeType, PortId};
use crate::idmap::IdKeyMap;
use crate::link::{PortSink, PortSnapshot, ReceiveDrop};
use crate::packet::Packet;
use crate::sched::Task;

/// Most links one packet (with its response) may cross: two full 63-hop directed routes,
/// with room to spare; an LFT loop ends here.
const MAX_CROSSINGS: u32 = 256;
/// The default P_Key, carried by packets the network makes (traps).
const DEFAULT_PKEY: u16 = 0xFFFF;

/// A device attached to a CA port.
pub(crate) struct Attachment {
    pub(crate) sink: Weak<dyn PortSink>,
    /// Tells this attachment from a later one at the same port.
    pub(crate) id: u64,
}

/// Something to tell a device once the lock is released, or a packet a link delay holds: the
/// scheduler's task for it, at the simulated time it happens.
pub(crate) type Output = (Duration, Task);

/// A packet a link's delay holds: it reaches port `to` when the delay ends.
struct InFlight {
    to: PortId,
    packet: Packet,
    /// Links it may still cross after this one (of [`MAX_CROSSINGS`]).
    left: u32,
    /// The far end's link-down count when the packet entered the link: a link that went
    /// down meanwhile lost it, up again or not.
    downs: u64,
}

/// Where a packet goes next.
enum Next {
    /// Out of this port.
    Egress(PortId, Packet),
    /// Nowhere: delivered, answered in full, or dropped.
    Done,
}

/// Everything the network keeps under its lock.
pub(crate) struct NetState {
    pub(crate) fabric: Fabric,
    pub(crate) agents: Agents,
    /// By port: looked up for every packet a device sends or receives.
    pub(crate) attached: IdKeyMap<PortId, Attachment>,
    pub(crate) faults: Faults,
    pub(crate) drops: DropCounts,
    pub(crate) outputs: Vec<Output>,
    /// Simulated time of the operation under way.
    pub(crate) now: Duration,
    pub(crate) next_attach_id: u64,
    trap_tid: u64,
    /// The network this state is the state of: what a packet held by a link delay needs to
    /// take the lock again when the delay ends.
    net: Weak<Shared>,
}

/// 4-byte words a packet occupies on the wire, headers and ICRC included (LRH 8, GRH 40,
/// BTH 12, DETH 8, MAD 256, ICRC 4), as PortXmitData/PortRcvData count them (ibsim: 72).
fn packet_words(p: &Packet) -> u64 {
    let grh = if p.grh.is_some() { 40 } else { 0 };
    (8 + grh + 12 + 8 + 256 + 4) / 4
}

/// Whether `dlid` is a multicast LID (0xC000-0xFFFE): PortMulticast*Pkts count those packets,
/// PortUnicast*Pkts the rest (the permissive LID is not a multicast one).
fn is_multicast(dlid: u16) -> bool {
    dlid >= MCAST_LID_BASE && dlid != PERMISSIVE_LID
}

/// Whether `lid` is one of the LIDs of a port with base `base` and LMC `lmc`.
fn owns(base: u16, lmc: u8, lid: u16) -> bool {
    base != 0 && lid >= base && u32::from(lid) < u32::from(base) + (1u32 << lmc)
}

impl NetState {
    pub(crate) fn new(mut fabric: Fabric, seed: u64, net: Weak<Shared>) -> NetState {
        let agents = Agents::new(&mut fabric);
        NetState {
            fabric,
            agents,
            attached: IdKeyMap::default(),
            faults: Faults::new(seed),
            drops: DropCounts::default(),
            outputs: Vec::new(),
            now: Duration::ZERO,
            next_attach_id: 1,
            trap_tid: 0x5ca1_ab1e_0000_0000,
            net,
        }
    }

    fn sma(&mut self) -> Sma<'_> {
        Sma {
            fabric: &mut self.fabric,
            agents: &mut self.agents,
            now: self.now,
        }
    }

    fn dropped(&mut self, reason: DropReason) -> Next {
        self.drops.count(reason);
        Next::Done
    }

    /// `slid` moved into the LIDs of `port`: the port's base LID with the path bits of
    /// `slid` that its LMC leaves to the sender, as an HCA builds the LRH's SLID (the
    /// simulated ConnectX: `(lid & !mask) | (path_bits & mask)`). For a device the network does
    /// not trust to set it (a fabric server's client, which could claim any port's LID).
    pub(crate) fn own_slid(&self, port: PortId, slid: u16) -> u16 {
        let p = self.fabric.port(port);
        let mask = (1u16 << p.lmc().min(7)) - 1;
        (p.lid() & !mask) | (slid & mask)
    }

    /// `n` packets the network had delivered to `port` were dropped there, for `reason`:
    /// counted in the port's PMA counter that `drop` names and in the network's drops.
    pub(crate) fn count_port_drops(
        &mut self,
        port: PortId,
        drop: ReceiveDrop,
        reason: DropReason,
        n: u64,
    ) {
        let c = self.agents.counters_mut(port);
        match drop {
            ReceiveDrop::Vl15 => c.vl15_dropped = c.vl15_dropped.saturating_add(n),
            ReceiveDrop::Overrun => c.rcv_errors = c.rcv_errors.saturating_add(n),
        }
        self.drops.add(reason, n);
    }

    /// A device at `from` put `packet` on the wire.
    pub(crate) fn transmit(&mut self, from: PortId, packet: Packet) {
        let p = self.fabric.port(from);
        if packet.dlid != PERMISSIVE_LID
            && owns(p.lid(), p.lmc(), packet.dlid)
            && p.state.phys_state == PhysState::LinkUp
        {
            // Loopback: the HCA turns the packet round before the wire.
            if let Some(a) = self.attached.get(&from) {
                let task = Task::Deliver {
                    sink: a.sink.clone(),
                    port: p.num(),
                    packet,
                };
                self.outputs.push((self.now, task));
            }
            return;
        }
        self.send(from, packet);
    }

    /// Carries `pkt` out of `egress` and on until it is done.
    fn send(&mut self, egress: PortId, pkt: Packet) {
        self.carry(Next::Egress(egress, pkt), MAX_CROSSINGS);
    }

    /// Carries a packet on from `next`, crossing at most `left` links: across links and
    /// through nodes until it is done, or until a link's delay holds it (it goes on from the
    /// far end when the delay ends: [`NetState::land`]).
    fn carry(&mut self, mut next: Next, mut left: u32) {
        while let Next::Egress(egress, mut pkt) = next {
            let Some(l) = left.checked_sub(1) else {
                self.drops.count(DropReason::HopLimit);
                return;
            };
            left = l;
            let Some((peer, delay)) = self.leave(egress, &mut pkt) else {
                return;
            };
            if !delay.is_zero() {
                self.hold(peer, pkt, delay, left);
                return;
            }
            next = self.enter(peer, pkt);
        }
    }

    /// Holds `packet`, on its way to port `to`, for `delay`: an internal event of the
    /// scheduler carries it on then. One that would arrive at or after `Duration::MAX` (the
    /// clock saturates there) never arrives: it is counted as
    /// [`DropReason::DelayedForever`] now, and nothing is kept for it.
    fn hold(&mut self, to: PortId, packet: Packet, delay: Duration, left: u32) {
        let at = self.now.saturating_add(delay);
        if at == Duration::MAX {
            self.drops.count(DropReason::DelayedForever);
            return;
        }
        let hop = InFlight {
            to,
            packet,
            left,
            downs: self.agents.link_downs(to),
        };
        let net = self.net.clone();
        let task = Task::Internal(Box::new(move || {
            // A network that has gone has nobody left to deliver to.
            if let Some(net) = net.upgrade() {
                net.run_at(at, |st| st.land(hop));
            }
        }));
        self.outputs.push((at, task));
    }

    /// A packet a link's delay held reaches the far end of the link (the time its delay
    /// ended): it enters there, and goes on. A link that went down meanwhile lost it, also
    /// when it came back up before the delay ended.
    fn land(&mut self, hop: InFlight) {
        if self.fabric.port(hop.to).state.phys_state != PhysState::LinkUp
            || self.agents.link_downs(hop.to) != hop.downs
        {
            self.drops.count(DropReason::LinkDown);
            return;
        }
        let next = self.enter(hop.to, hop.packet);
        self.carry(next, hop.left);
    }

    /// `pkt` leaves by the link of `egress`: the sender's checks and counters, and the faults
    /// on the link. Returns the port at the far end and the delay the packet takes to reach
    /// it, or `None` if it was lost.
    fn leave(&mut self, egress: PortId, pkt: &mut Packet) -> Option<(PortId, Duration)> {
        let port = self.fabric.port(egress);
        let st = port.state;
        let node = port.node();
        let peer = match port.peer() {
            Some(q) if st.phys_state == PhysState::LinkUp => q,
            _ => {
                self.agents.counters_mut(egress).xmit_discards += 1;
                self.drops.count(DropReason::LinkDown);
                return None;
            }
        };
        if !pkt.vl15 && st.link_state != LinkState::Active {
            self.agents.counters_mut(egress).xmit_discards += 1;
            self.drops.count(DropReason::PortNotActive);
            return None;
        }
        let words = packet_words(pkt);
        let multicast = is_multicast(pkt.dlid);
        {
            let c = self.agents.counters_mut(egress);
            c.xmit_packets += 1;
            c.xmit_data += words;
            if multicast {
                c.multicast_xmit_packets += 1;
            } else {
                c.unicast_xmit_packets += 1;
            }
        }
        let mut delay = Duration::ZERO;
        if !self.faults.is_empty() {
            let peer_node = self.fabric.port(peer).node();
            match self.faults.cross(egress, peer, node, peer_node) {
                Verdict::Dropped => {
                    self.agents.counters_mut(peer).rcv_errors += 1;
                    self.drops.count(DropReason::Fault);
                    return None;
                }
                Verdict::Passed { delay: d, flip } => {
                    delay = d;
                    if let Some(bit) = flip {
                        pkt.mad[usize::from(bit / 8)] ^= 1 << (bit % 8);
                    }
                }
            }
        }
        Some((peer, delay))
    }

    /// `pkt` enters port `peer` from its link: the receiver's checks and counters, then what
    /// the node does with it.
    fn enter(&mut self, peer: PortId, pkt: Packet) -> Next {
        let words = packet_words(&pkt);
        let multicast = is_multicast(pkt.dlid);
        let pst = self.fabric.port(peer).state;
        if !pkt.vl15 && !matches!(pst.link_state, LinkState::Armed | LinkState::Active) {
            self.agents.counters_mut(peer).rcv_errors += 1;
            return self.dropped(DropReason::PortNotActive);
        }
        let c = self.agents.counters_mut(peer);
        c.rcv_packets += 1;
        c.rcv_data += words;
        if multicast {
            c.multicast_rcv_packets += 1;
        } else {
            c.unicast_rcv_packets += 1;
        }
        self.arrive(peer, pkt)
    }

    /// `pkt` arrived at port `q`.
    fn arrive(&mut self, q: PortId, mut pkt: Packet) -> Next {
        let cls = pkt.mad[1];
        let smp = class::is_smp(cls);
        if pkt.vl15 != smp || (smp && pkt.dst_qp != 0) || (!smp && pkt.dst_qp == 0) {
            let c = self.agents.counters_mut(q);
            if pkt.vl15 {
                c.vl15_dropped += 1;
            } else {
                c.rcv_errors += 1;
            }
            return self.dropped(DropReason::Vl15Violation);
        }
        let qport = self.fabric.port(q);
        let (node, qnum) = (qport.node(), qport.num());
        let n = self.fabric.node(node);
        let (is_switch, num_ports) = (n.kind() == NodeType::Switch, n.num_ports());
        if !is_switch {
            if let Some(a) = self.attached.get(&q) {
                // The HCA's link layer takes only its own DLIDs (and the permissive one, which
                // directed-route SMPs carry).
                if cls != class::SUBN_DIRECTED_ROUTE
                    && pkt.dlid != PERMISSIVE_LID
                    && !owns(qport.lid(), qport.lmc(), pkt.dlid)
                {
                    self.agents.counters_mut(q).rcv_errors += 1;
                    return self.dropped(DropReason::WrongDlid);
                }
                let task = Task::Deliver {
                    sink: a.sink.clone(),
                    port: qnum,
                    packet: pkt,
                };
                self.outputs.push((self.now, task));
                return Next::Done;
            }
        }
        if cls == class::SUBN_DIRECTED_ROUTE {
            return match smi::receive(&mut pkt.mad, is_switch, qnum, num_ports) {
                Ok(DrAction::Forward(e)) => self.egress(node, e, pkt),
                Ok(DrAction::Local) => self.answer(node, q, pkt),
                Ok(DrAction::ToSm) => self.dropped(DropReason::NoTaker),
                Ok(DrAction::LidRouted) => self.dropped(DropReason::DrLidRouted),
                Err(d) => {
                    self.agents.counters_mut(q).vl15_dropped += 1;
                    self.dropped(DropReason::DirectedRoute(d))
                }
            };
        }
        let dlid = pkt.dlid;
        if is_switch {
            // The switch compares the DLID with its own LIDs (port 0's), not with a table of
            // the subnet's: while an SM moves LIDs two ports may hold one.
            let port0 = self.fabric.port_id(node, 0);
            let own = port0
                .map(|p0| self.fabric.port(p0))
                .is_some_and(|p0| owns(p0.lid(), p0.lmc(), dlid));
            if dlid == PERMISSIVE_LID || own {
                return self.answer(node, q, pkt);
            }
            match self.switch_egress(node, dlid) {
                // The LFT leads another LID to port 0, an end port that takes only its own
                // LIDs: it drops the packet (counted as a CA port counts one).
                Ok(0) => {
                    if let Some(p0) = port0 {
                        self.agents.counters_mut(p0).rcv_errors += 1;
                    }
                    self.dropped(DropReason::WrongDlid)
                }
                Ok(e) => self.egress(node, e, pkt),
                Err(reason) => {
                    self.agents.counters_mut(q).rcv_switch_relay_errors += 1;
                    self.dropped(reason)
                }
            }
        } else if dlid == PERMISSIVE_LID || owns(qport.lid(), qport.lmc(), dlid) {
            self.answer(node, q, pkt)
        } else {
            self.agents.counters_mut(q).rcv_errors += 1;
            self.dropped(DropReason::WrongDlid)
        }
    }

    /// The output port a switch's LFT gives `dlid` (0 = the switch itself); none for the
    /// reserved LID 0.
    fn switch_egress(&self, node: NodeId, dlid: u16) -> Result<u8, DropReason> {
        if dlid >= MCAST_LID_BASE {
            return Err(DropReason::Multicast);
        }
        let num_ports = self.fabric.node(node).num_ports();
        let sw = self.fabric.switch(node).ok_or(DropReason::NoRoute)?;
        // LID 0 is reserved: no port holds it and no switch forwards it, whatever LFT entry
        // 0 holds (IBA 4.1.3; ibsim's `lid_route_MAD` refuses it too).
        if dlid == 0 || dlid > sw.info.linear_fdb_top {
            return Err(DropReason::NoRoute);
        }
        match sw.route(dlid) {
            Some(e) if e <= num_ports => Ok(e),
            _ => Err(DropReason::NoRoute),
        }
    }

    /// Port `num` of `node` as the next egress.
    fn egress(&mut self, node: NodeId, num: u8, pkt: Packet) -> Next {
        match self.fabric.port_id(node, num) {
            Some(e) if num != 0 => Next::Egress(e, pkt),
            _ => self.dropped(DropReason::NoRoute),
        }
    }

    /// The agents of `node` take `pkt`, which entered by `q`; their response goes back.
    fn answer(&mut self, node: NodeId, q: PortId, mut pkt: Packet) -> Next {
        let qnum = self.fabric.port(q).num();
        let is_switch = self.fabric.node(node).kind() == NodeType::Switch;
        // The end port the agents answer for: a switch's port 0, a CA's own port.
        let own = if is_switch {
            self.fabric.port_id(node, 0).expect("a switch has port 0")
        } else {
            q
        };
        if !pkt.vl15 {
            let checked = self
                .sma()
                .check_gmp_keys(own, pkt.pkey, pkt.dst_qp, pkt.qkey);
            if let Err(v) = checked {
                self.trap_bad_key(own, v, &pkt);
                return self.dropped(match v {
                    KeyViolation::Pkey => DropReason::BadPkey,
                    KeyViolation::Qkey => DropReason::BadQkey,
                });
            }
        }
        match self.sma().process(node, qnum, &mut pkt.mad, false) {
            Reply::Respond => {}
            Reply::Consumed(Silent::MkeyViolation { port, also }) => {
                for p in std::iter::once(port).chain(also) {
                    self.trap_bad_mkey(p, pkt.slid, &pkt.mad);
                }
                return self.dropped(DropReason::NoTaker);
            }
            Reply::Consumed(_) | Reply::PassUp => return self.dropped(DropReason::NoTaker),
        }
        let request_dlid = pkt.dlid;
        let slid = if request_dlid == PERMISSIVE_LID {
            if pkt.mad[1] == class::SUBN_DIRECTED_ROUTE {
                PERMISSIVE_LID
            } else {
                self.fabric.port(own).lid()
            }
        } else {
            request_dlid
        };
        let mut resp = Packet {
            slid,
            dlid: pkt.slid,
            sl: pkt.sl,
            vl15: pkt.vl15,
            src_qp: pkt.dst_qp,
            dst_qp: pkt.src_qp,
            qkey: if pkt.vl15 { 0 } else { QP1_QKEY },
            pkey: pkt.pkey,
            grh: pkt.grh.map(|mut g| {
                std::mem::swap(&mut g.sgid, &mut g.dgid);
                g
            }),
            mad: pkt.mad,
        };
        let num_ports = self.fabric.node(node).num_ports();
        if resp.mad[1] == class::SUBN_DIRECTED_ROUTE {
            return match smi::respond(&mut resp.mad, is_switch) {
                Ok(None) => Next::Egress(q, resp),
                Ok(Some(e)) if is_switch && e != 0 && e <= num_ports => self.egress(node, e, resp),
                Ok(Some(e)) if !is_switch && e == qnum => Next::Egress(q, resp),
                Ok(Some(_)) => self.dropped(DropReason::DirectedRoute(
                    smi::DrDiscard::ReturnPathMismatch,
                )),
                Err(d) => self.dropped(DropReason::DirectedRoute(d)),
            };
        }
        if !is_switch || request_dlid == PERMISSIVE_LID {
            return Next::Egress(q, resp);
        }
        match self.switch_egress(node, resp.dlid) {
            Ok(0) => self.dropped(DropReason::NoTaker),
            Ok(e) => self.egress(node, e, resp),
            Err(reason) => {
                self.agents.counters_mut(own).rcv_switch_relay_errors += 1;
                self.dropped(reason)
            }
        }
    }

    /// The SMA or PMA of the node of `port` answers `mad` for its own host (MAD_IFC).
    pub(crate) fn local_mad(
        &mut self,
        port: PortId,
        mad: &[u8; 256],
        ignore_mkey: bool,
    ) -> Option<[u8; 256]> {
        let p = self.fabric.port(port);
        let (node, num) = (p.node(), p.num());
        let mut out = *mad;
        let reply = self.sma().process(node, num, &mut out, ignore_mkey);
        if let Reply::Consumed(Silent::MkeyViolation { port, also }) = reply {
            // MAD_IFC does not say where the SMP came from: LIDADDR is the trapping port's
            // own LID, as the kernel's SMAs (`qib_bad_mkey`) always write it. The ports are
            // a CA's (only those take a device).
            for p in std::iter::once(port).chain(also) {
                let own = self.fabric.port(p).lid();
                self.trap_bad_mkey(p, own, &out);
            }
        }
        self.flush_effects();
        (reply == Reply::Respond).then_some(out)
    }

    /// The port's state as its SMA holds it.
    pub(crate) fn snapshot(&self, port: PortId) -> PortSnapshot {
        let p = self.fabric.port(port);
        let s = p.state;
        let node = self.fabric.node(p.node());
        PortSnapshot {
            state: s.link_state as u8,
            phys_state: s.phys_state as u8,
            lid: p.lid(),
            lmc: p.lmc(),
            sm_lid: s.sm_lid,
            sm_sl: s.sm_sl,
            port_guid: p.guid(),
            node_guid: node.guid(),
            subnet_prefix: s.subnet_prefix,
            capability_mask: s.capability_mask,
            pkey_table_len: crate::fabric::sma::defaults::CA_PARTITION_CAP,
        }
    }

    /// Reports what the agents did: port changes to attached devices, trap 128 from every
    /// configured switch whose port went up or down, trap 144 from every configured SMA
    /// whose port's enabled rates or CapabilityMask changed.
    pub(crate) fn flush_effects(&mut self) {
        // Nearly always nothing (a packet changes no port): no vector is taken apart then.
        if self.agents.effects.is_empty() {
            return;
        }
        loop {
            let effects = self.agents.take_effects();
            if effects.is_empty() {
                return;
            }
            let mut switches: Vec<NodeId> = Vec::new();
            let mut changed: Vec<PortId> = Vec::new();
            for e in effects {
                match e {
                    Effect::Port(port, change) => {
                        if let Some(a) = self.attached.get(&port) {
                            let task = Task::Changed {
                                sink: a.sink.clone(),
                                port: self.fabric.port(port).num(),
                                change,
                            };
                            self.outputs.push((self.now, task));
                        }
                    }
                    Effect::SwitchPortStateChange(node) => {
                        if !switches.contains(&node) {
                            switches.push(node);
                        }
                    }
                    Effect::LocalChanges(port) => {
                        if !changed.contains(&port) {
                            changed.push(port);
                        }
                    }
                }
            }
            for node in switches {
                self.trap_port_state_change(node);
            }
            for port in changed {
                self.trap_local_changes(port);
            }
        }
    }

    /// Trap 144 (`NoticeRepr::capability_mask_change`, as ibsim's `encode_trap144`) from the
    /// SMA whose management port is `port`: its LID and its CapabilityMask.
    fn trap_local_changes(&mut self, port: PortId) {
        let p = self.fabric.port(port);
        let node_type = self.fabric.node(p.node()).kind() as u32;
        let mask = p.state.capability_mask;
        self.send_trap(port, |lid| {
            NoticeRepr::capability_mask_change(node_type, lid, mask)
        });
    }

    /// Trap 256 (IBA 14.2.4: an SMP failed the M_Key check) from the SMA whose end port
    /// `mgmt` (a switch's port 0, a CA's port) the SMP `mad`, sent from LID `requester`,
    /// reached.
    fn trap_bad_mkey(&mut self, mgmt: PortId, requester: u16, mad: &[u8; 256]) {
        let node_type = self.fabric.node(self.fabric.port(mgmt).node()).kind() as u32;
        let Ok(smp) = Smp::new_checked(&mad[..]) else {
            return;
        };
        let directed = smp.is_directed_route().then(|| {
            let mut return_path = [0u8; 64];
            return_path.copy_from_slice(smp.return_path());
            BadMkeyRoute {
                dr_slid: smp.dr_slid(),
                hop_count: smp.hop_count(),
                return_path,
            }
        });
        let header = smp.header();
        let info = BadMkey {
            lid: requester,
            method: header.method(),
            attr_id: header.attr_id(),
            attr_mod: header.attr_mod(),
            m_key: smp.m_key(),
            directed,
        };
        self.send_trap(mgmt, |lid| NoticeRepr::bad_mkey(node_type, lid, &info));
    }

    /// Trap 257 (Bad P_Key) or 258 (Bad Q_Key) from the SMA whose end port `mgmt` (a switch's
    /// port 0, a CA's port) dropped the GMP `pkt`: LIDADDR1/QP1 its sender, LIDADDR2/QP2 its
    /// destination, its SL, the key it carried, and the GIDs of its GRH if it had one.
    fn trap_bad_key(&mut self, mgmt: PortId, v: KeyViolation, pkt: &Packet) {
        let node_type = self.fabric.node(self.fabric.port(mgmt).node()).kind() as u32;
        let (gid1, gid2) = pkt
            .grh
            .as_ref()
            .map_or(([0; 16], [0; 16]), |g| (g.sgid, g.dgid));
        let info = BadKey {
            lid1: pkt.slid,
            lid2: pkt.dlid,
            key: match v {
                KeyViolation::Pkey => u32::from(pkt.pkey),
                KeyViolation::Qkey => pkt.qkey,
            },
            sl: pkt.sl,
            qp1: pkt.src_qp,
            qp2: pkt.dst_qp,
            gid1,
            gid2,
        };
        self.send_trap(mgmt, |lid| match v {
            KeyViolation::Pkey => NoticeRepr::bad_pkey(node_type, lid, &info),
            KeyViolation::Qkey => NoticeRepr::bad_qkey(node_type, lid, &info),
        });
    }

    /// Trap 128 (IBA 14.3.3, `NoticeRepr::port_state_change`) from the SMA of switch `node` to
    /// its master SM.
    fn trap_port_state_change(&mut self, node: NodeId) {
        if let Some(p0) = self.fabric.port_id(node, 0) {
            self.send_trap(p0, NoticeRepr::port_state_change);
        }
    }

    /// Sends the notice `make` builds from the issuer's LID as a SubnTrap(Notice), LID-routed
    /// from the SMA whose management port is `mgmt` (a switch's port 0, a CA's port) to its
    /// master SM, if the port knows its own LID and the SM's and supports traps. A switch
    /// routes it by its LFT; a CA sends it out of its port, or turns it round to its own host
    /// when the SM is there (ibsim delivers such a trap to the SM client on that port).
    fn send_trap(&mut self, mgmt: PortId, make: impl FnOnce(u16) -> NoticeRepr) {
        let p = self.fabric.port(mgmt);
        let node = p.node();
        let is_switch = self.fabric.node(node).kind() == NodeType::Switch;
        let (lid, lmc, sm_lid, sm_sl) = (p.lid(), p.lmc(), p.state.sm_lid, p.state.sm_sl);
        let to_self = owns(lid, lmc, sm_lid);
        if lid == 0
            || sm_lid == 0
            || (is_switch && to_self)
            || p.state.capability_mask & cap_mask::HAS_TRAP == 0
        {
            return;
        }
        self.trap_tid += 1;
        let mut repr = SmpRepr::request(
            method::TRAP,
            SmpRoute::LidRouted,
            attr_id::sm::NOTICE,
            0,
            self.trap_tid,
        );
        make(lid)
            .emit(&mut Notice::new_checked(&mut repr.data[..]).expect("64 bytes hold a Notice"));
        let mut mad = Box::new([0u8; 256]);
        repr.emit(&mut Smp::new_checked(&mut mad[..]).expect("256 bytes hold an SMP"));
        let pkt = Packet {
            slid: lid,
            dlid: sm_lid,
            sl: sm_sl,
            vl15: true,
            src_qp: 0,
            dst_qp: 0,
            qkey: 0,
            pkey: DEFAULT_PKEY,
            grh: None,
            mad,
        };
        if !is_switch {
            if !to_self {
                self.send(mgmt, pkt);
            } else if let Some(a) = self.attached.get(&mgmt) {
                let task = Task::Deliver {
                    sink: a.sink.clone(),
                    port: self.fabric.port(mgmt).num(),
                    packet: pkt,
                };
                self.outputs.push((self.now, task));
            } else {
                self.drops.count(DropReason::NoTaker);
            }
            return;
        }
        match self.switch_egress(node, sm_lid) {
            Ok(e) if e != 0 => {
                if let Some(out) = self.fabric.port_id(node, e) {
                    self.send(out, pkt);
                }
            }
            Ok(_) => {
                self.drops.count(DropReason::NoTaker);
            }
            Err(reason) => {
                self.drops.count(reason);
            }
        }
    }
}

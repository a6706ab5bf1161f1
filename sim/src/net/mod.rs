//! The running network: a [`Fabric`] with the SMA and PMA of every node, the links carrying
//! packets between them, faults, and the devices attached to CA ports.
//!
//! # Using it as a device
//!
//! A device model implements [`PortSink`] and attaches to a CA's port with
//! [`Network::attach`] (by node name or [`NodeId`]); it gets back the [`PortLink`] it transmits
//! through. A lone device uses [`Network::standalone`]: a one-node fabric holding just its CA,
//! with its own SMA and loopback.
//!
//! - [`PortLink::transmit`]: the packet leaves the device's port and the fabric routes it:
//!   LID-routed packets by the switches' linear forwarding tables, directed-route SMPs by the
//!   SMI rules at every hop (see [`smi`]). A packet to the port's own LID comes back to the
//!   port (loopback) without touching the wire.
//! - Where it ends: at a CA port with a device attached, the packet is delivered to that
//!   device's [`PortSink::deliver`], QP0 and QP1 traffic alike (the device and its host decide
//!   what to do, as on hardware: the host's MAD stack answers SMPs there, asking its SMA through
//!   [`PortLink::local_mad`]). At a simulated node (a switch, or a CA with no device), its SMA
//!   (QP0, classes 0x01 and 0x81) or PMA (QP1, class 0x04) answers, and the answer is routed
//!   back; other GSI classes get 0x000C for a Get or Set, as the kernel answers unclaimed MADs.
//!   A GMP reaching a simulated node passes the P_Key check of the node's end port (a
//!   switch's port 0, the CA's port) and, for QP1, the Q_Key check first: a failure drops it,
//!   counts P_KeyViolations or Q_KeyViolations, and sends trap 257 or 258.
//! - [`PortLink::local_mad`] is MAD_IFC: the SMA or PMA of the device's node answers for the
//!   device's port, synchronously, at once.
//! - [`PortLink::port_info`] is the port's state as its SMA holds it;
//!   [`PortLink::modify_capability_mask`] is how the host sets IsSM when an SM opens the port.
//! - [`PortLink::count_drop`]: a packet the device dropped for a reason the port's PMA counts
//!   (an SMP its QP0 could not take: VL15Dropped).
//! - Port changes of an attached port (an SM's Set of its LID or state, a link fault) reach
//!   the device as [`PortSink::port_changed`].
//! - Faults ([`Network::set_link_fault`], [`Network::set_node_fault`]): a delay holds a
//!   packet on the link it crosses, and the far end acts on it only when the delay ends (its
//!   agents' processing and effects: a PortInfo Set's new state, port changes, traps; the next
//!   hop; the delivery), so a response leaves when its request has arrived. Each crossing
//!   takes the delay in force when the packet enters the link; a link that went down while
//!   the delay held the packet has lost it, up again when the delay ends or not; a delay to the end of simulated time never arrives (see
//!   [`Fault::delay`](Fault#structfield.delay)).
//! - VL15 carries SMPs only (to and from QP0); anything else on VL15, or an SMP elsewhere, is
//!   dropped at the port it enters.
//! - Traps: the SMAs send traps 128, 144, 256, 257 and 258 (see [`crate::fabric::sma`],
//!   which also says why 129-131, 145 and 259 are never sent) LID-routed to
//!   their MasterSMLID, from a switch by its LFT, from a CA out of its port; a CA port whose
//!   SM is its own host turns the trap round to its device, as ibsim hands such a trap to the
//!   SM client on that port.
//!
//! # The delivery rule (re-entrancy)
//!
//! **The network never calls a device from inside a call the device made.** `transmit`,
//! `local_mad`, `port_info` and `modify_capability_mask` do their work under the network's lock
//! and return; every `deliver` and `port_changed` they cause is put on the shared
//! [`Scheduler`] as an event at the simulated time it happens (now, unless a fault delays it),
//! and runs when someone runs the scheduler: the driver's wait
//! ([`Scheduler::run_until`], reached through `DeviceBackend::wait`), a test's
//! [`Scheduler::run_due`], or, in real time, the simulated ConnectX at the end of a send
//! doorbell (its lock released), so that what is due at once is there when the post returns. Each delivery event calls [`Scheduler::notify`] after the device has
//! taken the packet, so a driver waiting in real time wakes up.
//!
//! So a device may hold its own lock while it calls `transmit` or `local_mad` (nothing calls it
//! back on that stack), and its `deliver` and `port_changed` run on the thread that runs the
//! scheduler, with the network's lock not held: they may call `transmit` again. Packets are
//! delivered in the order they were routed; with equal times, first routed is first delivered.
//!
//! # Where a port starts
//!
//! Ports start as the topology and ibsim's `connect_ports` leave them: cabled ports in
//! Init/LinkUp, uncabled ones Down/Polling, switch port 0 Active, no LIDs, until an SM
//! configures them. A standalone CA's ports start as [`Standalone::init`] says; the default is
//! [`StandaloneInit::Active`]: Active with LIDs 1, 2, ... and the SM LID 1, as if an SM had
//! run, so that a lone HCA can loop packets back at once. [`StandaloneInit::Init`] is a port
//! whose link is up but that no SM configured (LID 0); [`StandaloneInit::Down`] a port with no
//! cable.
//!
//! # Sharing a network between processes
//!
//! [`remote`] serves a network over a Unix socket ([`remote::FabricServer`]) to devices in
//! other processes, which attach through a [`remote::RemoteLink`]: the same [`PortLink`] and
//! the same delivery rule, one socket away.

mod attach;
mod drops;
mod engine;
mod error;
mod fault;
pub mod remote;
pub mod smi;
pub mod state_file;

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

pub use self::attach::AttachedPort;
pub use self::drops::{DropCounts, DropReason};
use self::engine::{Attachment, NetState};
pub use self::error::NetError;
pub use self::fault::Fault;
use crate::fabric::builder::{FabricBuilder, NodeSpec};
use crate::fabric::pma::PortCounters;
use crate::fabric::rate::ActiveRates;
pub use crate::fabric::sma::QP1_QKEY;
use crate::fabric::sma::Sma;
use crate::fabric::state::{LinkState, PhysState};
use crate::fabric::{Fabric, NodeId, NodeType, PortId};
use crate::link::{PortLink, PortSink, ReceiveDrop};
use crate::sched::Scheduler;

/// The seed of the fault generator until [`Network::reseed`].
pub const DEFAULT_SEED: u64 = 0x5EED_0FFA_B41C;

/// A node, by the name the topology gives it or by id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeRef<'a> {
    /// By id.
    Id(NodeId),
    /// By name (the quoted id of its topology record).
    Name(&'a str),
}

impl From<NodeId> for NodeRef<'_> {
    fn from(id: NodeId) -> Self {
        NodeRef::Id(id)
    }
}

impl<'a> From<&'a str> for NodeRef<'a> {
    fn from(name: &'a str) -> Self {
        NodeRef::Name(name)
    }
}

impl<'a> From<&'a String> for NodeRef<'a> {
    fn from(name: &'a String) -> Self {
        NodeRef::Name(name)
    }
}

/// How the ports of a standalone CA start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StandaloneInit {
    /// Active, port `p` with LID `p` and LMC 0, SM LID 1: as if an SM had configured it.
    #[default]
    Active,
    /// Init/LinkUp with LID 0: link up, no SM yet.
    Init,
    /// Down/Polling: no cable. The port cannot come up.
    Down,
}

/// A lone CA: the one node of a standalone network.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Standalone {
    /// The node's name (and NodeDescription).
    pub name: String,
    /// Its ports.
    pub num_ports: u8,
    /// NodeGUID (port `p` gets NodeGUID + `p`); `None` for ibsim's default, 0x100000.
    pub node_guid: Option<u64>,
    /// VendorID (24 bits).
    pub vendor_id: u32,
    /// DeviceID.
    pub device_id: u16,
    /// How its ports start.
    pub init: StandaloneInit,
}

impl Default for Standalone {
    fn default() -> Self {
        Standalone {
            name: "sim-hca".to_owned(),
            num_ports: 1,
            node_guid: None,
            vendor_id: 0,
            device_id: 0,
            init: StandaloneInit::Active,
        }
    }
}

/// What [`Network`] handles share.
pub(crate) struct Shared {
    sched: Arc<Scheduler>,
    state: Mutex<NetState>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, NetState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `f` on the state under the lock, then hands what it caused to the scheduler.
    ///
    /// The outputs go to the scheduler with the network's lock still held (the scheduler's
    /// lock is taken after it, and nothing holds the scheduler's lock while it takes another),
    /// so that the output buffer keeps its capacity from one operation to the next.
    pub(crate) fn run<R>(&self, f: impl FnOnce(&mut NetState) -> R) -> R {
        self.run_at(self.sched.now(), f)
    }

    /// [`run`](Self::run) at `now`, a time read from the clock by the caller. The network's
    /// time never goes back (another thread may have run it at a later time meanwhile).
    #[inline]
    pub(crate) fn run_at<R>(&self, now: Duration, f: impl FnOnce(&mut NetState) -> R) -> R {
        let mut st = self.lock();
        st.now = st.now.max(now);
        let r = f(&mut st);
        st.flush_effects();
        if !st.outputs.is_empty() {
            self.sched.schedule_tasks(st.outputs.drain(..));
        }
        r
    }
}

/// A running simulated network. Cheap to clone: clones share the network.
#[derive(Clone)]
pub struct Network {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Network {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let st = self.shared.lock();
        f.debug_struct("Network")
            .field("nodes", &st.fabric.node_count())
            .field("attached", &st.attached.len())
            .finish_non_exhaustive()
    }
}

impl Network {
    /// Runs `fabric`, with time and events from `scheduler`.
    pub fn new(fabric: Fabric, scheduler: Arc<Scheduler>) -> Network {
        Network {
            shared: Arc::new_cyclic(|me| Shared {
                sched: scheduler,
                state: Mutex::new(NetState::new(fabric, DEFAULT_SEED, me.clone())),
            }),
        }
    }

    /// A network of one CA with `config.num_ports` ports and nothing else: for a device on its
    /// own, which still has an SMA (for MAD_IFC) and loopback. The CA is node 0, named
    /// `config.name`; attach to it with that name or `NodeId(0)`. Its ports start as
    /// `config.init` says (see the module documentation).
    pub fn standalone(config: &Standalone, scheduler: Arc<Scheduler>) -> Result<Network, NetError> {
        let mut b = FabricBuilder::new();
        let mut spec = NodeSpec::new(NodeType::Ca, &config.name, config.num_ports);
        spec.guid = config.node_guid;
        spec.vendor_id = config.vendor_id;
        spec.device_id = config.device_id;
        let node = b
            .add_node(&spec)
            .map_err(|p| NetError::Standalone(crate::fabric::FabricError::Invalid(p)))?;
        let fabric = b.build()?;
        let net = Network::new(fabric, scheduler);
        net.shared.run(|st| {
            let ports: Vec<PortId> = st.fabric.ports_of(node).collect();
            for (i, &p) in ports.iter().enumerate() {
                if config.init == StandaloneInit::Down {
                    continue;
                }
                st.agents.set_loopback(p);
                let enabled = st.fabric.port(p).enabled;
                let s = &mut st.fabric.port_mut(p).state;
                s.phys_state = PhysState::LinkUp;
                s.active = ActiveRates::train(enabled, enabled).unwrap_or_default();
                if config.init == StandaloneInit::Active {
                    s.link_state = LinkState::Active;
                    s.sm_lid = 1;
                    let lid = u16::try_from(i + 1).expect("at most 254 ports");
                    st.fabric
                        .set_lid(p, lid, 0)
                        .expect("a one-node fabric has its LIDs free");
                } else {
                    s.link_state = LinkState::Init;
                }
            }
        });
        Ok(net)
    }

    /// The scheduler whose time and events this network uses.
    pub fn scheduler(&self) -> &Arc<Scheduler> {
        &self.shared.sched
    }

    fn resolve(st: &NetState, node: NodeRef<'_>) -> Result<NodeId, NetError> {
        match node {
            NodeRef::Id(id) if id.index() < st.fabric.node_count() => Ok(id),
            NodeRef::Id(id) => Err(NetError::NoSuchNodeId {
                id: id.0,
                count: st.fabric.node_count(),
            }),
            NodeRef::Name(name) => {
                st.fabric
                    .node_by_name(name)
                    .ok_or_else(|| NetError::NoSuchNode {
                        name: name.to_owned(),
                    })
            }
        }
    }

    fn resolve_port(st: &NetState, node: NodeRef<'_>, port: u8) -> Result<PortId, NetError> {
        let id = Self::resolve(st, node)?;
        st.fabric
            .port_id(id, port)
            .filter(|_| port != 0)
            .ok_or_else(|| NetError::NoSuchPort {
                node: st.fabric.name(id).to_owned(),
                port,
                ports: st.fabric.node(id).num_ports(),
            })
    }

    /// The id of a node.
    pub fn node<'a>(&self, node: impl Into<NodeRef<'a>>) -> Result<NodeId, NetError> {
        Self::resolve(&self.shared.lock(), node.into())
    }

    /// The id of physical port `port` (1 and up) of a node.
    pub fn port<'a>(&self, node: impl Into<NodeRef<'a>>, port: u8) -> Result<PortId, NetError> {
        Self::resolve_port(&self.shared.lock(), node.into(), port)
    }

    /// Attaches a device to port `port` of CA `node`: from now on packets that reach that port
    /// go to `sink`, and the device transmits through the returned link. The network keeps only
    /// a weak reference to `sink` (the device owns it); dropping the link detaches the device.
    pub fn attach<'a>(
        &self,
        node: impl Into<NodeRef<'a>>,
        port: u8,
        sink: &Arc<dyn PortSink>,
    ) -> Result<Arc<dyn PortLink>, NetError> {
        let link = self.attach_port(node, port, sink)?;
        Ok(link)
    }

    /// [`attach`](Self::attach), returning the link's own type.
    pub fn attach_port<'a>(
        &self,
        node: impl Into<NodeRef<'a>>,
        port: u8,
        sink: &Arc<dyn PortSink>,
    ) -> Result<Arc<AttachedPort>, NetError> {
        let node = node.into();
        let (pid, id) = self.shared.run(|st| -> Result<(PortId, u64), NetError> {
            let pid = Self::resolve_port(st, node, port)?;
            let nid = st.fabric.port(pid).node();
            let name = st.fabric.name(nid).to_owned();
            let kind = st.fabric.node(nid).kind();
            if kind != NodeType::Ca {
                return Err(NetError::NotACa {
                    node: name,
                    kind: kind.keyword(),
                });
            }
            if st
                .attached
                .get(&pid)
                .is_some_and(|a| a.sink.strong_count() > 0)
            {
                return Err(NetError::AlreadyAttached { node: name, port });
            }
            let id = st.next_attach_id;
            st.next_attach_id += 1;
            st.attached.insert(
                pid,
                Attachment {
                    sink: Arc::downgrade(sink),
                    id,
                },
            );
            Ok((pid, id))
        })?;
        Ok(Arc::new(AttachedPort {
            shared: self.shared.clone(),
            port: pid,
            id,
        }))
    }

    /// Reads the fabric (topology and SMA state) under the network's lock.
    pub fn with_fabric<R>(&self, f: impl FnOnce(&Fabric) -> R) -> R {
        f(&self.shared.lock().fabric)
    }

    /// Changes the fabric directly, for setting up a scenario (LIDs, forwarding tables)
    /// without an SM. Nothing done here is reported to devices or counted.
    pub fn with_fabric_mut<R>(&self, f: impl FnOnce(&mut Fabric) -> R) -> R {
        f(&mut self.shared.lock().fabric)
    }

    /// The PMA counters of a port (all zero for a port that is not this network's, as for
    /// one nothing crossed).
    pub fn counters(&self, port: PortId) -> PortCounters {
        self.shared.lock().agents.counters(port)
    }

    /// A packet the network had delivered to `port` (a CA port) was dropped on its way to the
    /// device, for `reason` (a fabric server's client queue full): counted in the port's
    /// counter that `drop` names and in [`Network::drops`].
    pub(crate) fn count_port_drop(&self, port: PortId, drop: ReceiveDrop, reason: DropReason) {
        self.shared
            .run(|st| st.count_port_drops(port, drop, reason, 1));
    }

    /// Packets dropped so far, by reason.
    ///
    /// [`DropReason::DeviceGone`] is the scheduler's count
    /// ([`Scheduler::undelivered`]): a network built on a scheduler another network shares
    /// reports the losses of both there (every network in this workspace has its own).
    pub fn drops(&self) -> DropCounts {
        let mut d = self.shared.lock().drops.clone();
        d.set(DropReason::DeviceGone, self.shared.sched.undelivered());
        d
    }

    /// Sets the fault of the link at `port` (both directions); [`Fault::NONE`] clears it.
    ///
    /// # Panics
    ///
    /// If `port` is not one of this network's ports (ids come from [`Network::port`] or the
    /// fabric of this network): a test's mistake, not bad input.
    pub fn set_link_fault(&self, port: PortId, fault: Fault) {
        self.shared.run(|st| {
            let peer = st.fabric.peer(port).unwrap_or(port);
            st.faults.set_link(port, peer, fault);
        });
    }

    /// Sets the fault of every packet entering or leaving `node`; [`Fault::NONE`] clears it.
    pub fn set_node_fault(&self, node: NodeId, fault: Fault) {
        self.shared.run(|st| st.faults.set_node(node, fault));
    }

    /// Loses the `nth` packet (1: the next one) to leave `port` for its link from now on, and
    /// only that one: counted as a [`DropReason::Fault`] drop and in the receiving port's
    /// PortRcvErrors, like a drop-rate loss. A packet a device loops back to its own LID never
    /// leaves the port and does not count.
    pub fn drop_nth_leaving(&self, port: PortId, nth: u32) {
        self.shared.run(|st| st.faults.drop_nth(port, nth));
    }

    /// Clears every link and node fault and one-shot drop (not links held down).
    pub fn clear_faults(&self) {
        self.shared.run(|st| st.faults.clear());
    }

    /// Restarts the fault generator from `seed`, so that a run replays.
    pub fn reseed(&self, seed: u64) {
        self.shared.run(|st| st.faults.reseed(seed));
    }

    /// Takes the link at `port` down (`down`), as a pulled cable: both ends go to Down/Polling,
    /// their devices hear [`PortChange::Down`](crate::link::PortChange::Down), switches set
    /// PortStateChange and send trap 128 if configured. With `!down` the link trains again
    /// (both ends Init/LinkUp) unless an end is Disabled by its SM.
    ///
    /// # Panics
    ///
    /// If `port` is not one of this network's ports (ids come from [`Network::port`] or the
    /// fabric of this network): a test's mistake, not bad input.
    pub fn set_link_down(&self, port: PortId, down: bool) {
        self.shared.run(|st| {
            Sma {
                fabric: &mut st.fabric,
                agents: &mut st.agents,
                now: st.now,
            }
            .set_fault_down(port, down);
        });
    }

    /// Takes every link of `node` down, as a node losing power, or lets them come back (a link
    /// whose other end is held down stays down).
    ///
    /// # Panics
    ///
    /// If `node` is not one of this network's nodes (ids come from [`Network::node`] or the
    /// fabric of this network): a test's mistake, not bad input.
    pub fn set_node_down(&self, node: NodeId, down: bool) {
        self.shared.run(|st| {
            Sma {
                fabric: &mut st.fabric,
                agents: &mut st.agents,
                now: st.now,
            }
            .set_node_fault_down(node, down);
        });
    }
}

//! The subnet management agent (SMA) of every simulated node, and the state it keeps beyond
//! the fabric model: Get and Set of the SM attributes as the IBA defines them, with the status
//! a bad attribute, modifier or method earns, M_Key protection, and the port state machine the
//! SM drives.
//!
//! A switch's SMA answers on port 0 (its M_Key, LID and SM LID are port 0's); a CA's SMA answers
//! per port. [`Sma::process`] takes one MAD as it reached the agent (for a directed-route SMP,
//! after the SMI rules moved the hop pointer) and turns it into its response in place. It never
//! touches the hop fields: the SMI's send rule does that (`crate::net::smi`).
//!
//! | Attribute | Get | Set | Notes |
//! |---|---|---|---|
//! | NodeDescription, NodeInfo | yes | 0x000C | modifier must be 0 |
//! | PortInfo | yes | yes | state machine; CA Set only on the receiving port |
//! | SwitchInfo, LinearForwardingTable, MulticastForwardingTable | switches | switches | 0x000C on CAs |
//! | P_KeyTable, SLtoVLMappingTable, VLArbitrationTable, GUIDInfo | yes | yes | modifiers checked |
//! | SMInfo | passed to the SM | passed to the SM | no answer with IsSMDisabled; 0x000C where no SM (IsSM clear) |
//! | Mellanox ExtendedPortInfo (0xFF90) | yes | no change only | FDR10; see `ext_port_info.rs` |
//!
//! Status codes: 0x0004 class version other than 1, 0x0008 unknown method, 0x000C attribute
//! not supported (or not with this method), 0x001C bad modifier or field. A Set that fails
//! changes nothing and answers with the current value. A request failing the M_Key check gets
//! no answer (the network sends trap 256 for it). A TrapRepress of Notice gets no answer; of
//! any other attribute, 0x000C in a GetResp, as `qib_mad.c` answers it (ibsim drops every
//! TrapRepress).
//!
//! Traps: the SMA records [`Effect`]s and the network sends the traps (`crate::net`): 128 when
//! a switch port goes up or down (`link.rs`), 144 when a PortInfo Set changes a port's
//! LinkWidthEnabled, LinkSpeedEnabled or LinkSpeedExtEnabled (ibsim's `do_portinfo`: at a
//! switch only for a LID-routed Set, see `port_info.rs`) or the host changes a CA port's
//! CapabilityMask, 256 for an SMP that fails the M_Key check (`mkey.rs`), and 257 or 258 for
//! a GMP that fails the P_Key or Q_Key check of the node's end port (`keys.rs`). A trap goes
//! from the node's management port (a switch's port 0, a CA's port) to its MasterSMLID, only
//! if that port has a LID, an SM LID and IsTrapSupported.
//!
//! The other generic traps an SMA may send have no trigger here, and are not sent:
//!
//! - 129 (local link integrity threshold), 130 (excessive buffer overrun threshold), 131
//!   (flow control update watchdog): their triggers live in the physical and link layers,
//!   which are not simulated. 129 fires when the count of local physical errors passes the
//!   PortInfo:LocalPhyErrors threshold (counted in LocalLinkIntegrityErrors); 130 when
//!   OverrunErrors consecutive flow control update periods each saw a buffer overrun
//!   (ExcessiveBufferOverrunErrors); 131 when a VL's flow control update does not arrive in
//!   time. No credit, no flow control packet and no symbol crosses a simulated link, so
//!   nothing raises those counters: the thresholds are stored and reported, never crossed.
//!   A link fault's lost packet is counted as a receive error (`crate::net::Fault`), but it
//!   stands for a loss, not for the physical layer's error count and its window, which the
//!   IBA's link integrity check (and the link error recovery it starts) is defined on.
//!   ibsim sends none of the three either.
//! - 145 (SystemImageGUID changed): SystemImageGUID comes from the topology and nothing
//!   changes it while the network runs (NodeInfo is read-only, 0x000C on Set; no command
//!   changes it). The ports do not claim IsSystemImageGUIDsupported (CapabilityMask bit 11,
//!   OpenSM `IB_PORT_CAP_HAS_SYS_IMG_GUID`) either, as ibsim's do not.
//! - 259 (bad P_Key at a switch external port): a switch reports it only if its port 0
//!   claims IsPKeySwitchExternalPortTrapSupported (CapabilityMask bit 12, OpenSM
//!   `IB_PORT_CAP_HAS_PKEY_SW_EXT_PORT_TRAP`), and ours, as ibsim's `smaport` (0x0000C048),
//!   do not. Nor do the switches enforce partitions: PartitionEnforcementInbound and
//!   Outbound are stored and reported, and packets cross external ports unchecked (so
//!   PortRcvConstraintErrors and PortXmitConstraintErrors stay 0).

pub mod defaults;
mod ext_port_info;
mod keys;
pub mod limits;
mod link;
mod mkey;
mod node;
mod port_info;
mod switch;
mod tables;

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use mad_wire::attr::vl_arb_table::VlArbEntry;
use mad_wire::smp::Smp;
use mad_wire::{attr_id, class, method, status};

pub use self::defaults::{PortDefaults, PortKind};
pub use self::keys::{KeyViolation, QP1_QKEY};
pub use self::link::LinkEvent;
pub use self::tables::pkey_capacity;
use super::model::{Fabric, NodeId, NodeType, PortId};
use super::pma::PortCounters;
use super::side::SideTable;
use crate::link::PortChange;

/// What became of a MAD handed to an agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reply {
    /// The buffer now holds the response; send it back.
    Respond,
    /// The agent consumed the MAD and answers nothing (a TrapRepress, an M_Key violation).
    Consumed(Silent),
    /// Not for this agent: a response, a trap, SMInfo for the SM of this port. Pass it to the
    /// SM or client at the node if there is one; drop it otherwise.
    PassUp,
}

/// Why an agent answered nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Silent {
    /// The M_Key check failed (IBA 14.2.4): no response, by design. Trap 256 goes from
    /// each port whose M_Key the SMP failed: `port`, and `also` when a CA's PortInfo SMP
    /// failed both its receiving port's and the named port's (`mkey.rs`).
    MkeyViolation {
        /// The port whose M_Key the SMP failed (a switch's port 0, a CA's port).
        port: PortId,
        /// A second such port.
        also: Option<PortId>,
    },
    /// A TrapRepress of Notice: acknowledges a trap, needs no answer.
    TrapRepress,
    /// The MAD is not an InfiniBand MAD (BaseVersion other than 1).
    BadBaseVersion,
    /// A method that has no response (Send) to an agent that has nothing to do with it.
    NoResponse,
    /// SMInfo to a port whose CapabilityMask has IsSMDisabled: its SM is present but
    /// disabled and takes part in no SM negotiation (`qib_mad.c`, `hfi1` `process_subn`).
    SmDisabled,
}

/// Something the SMA did that others must hear about: the network tells attached devices and
/// sends traps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    /// A port's management state changed in a way its device raises an event for.
    Port(PortId, PortChange),
    /// A port of a switch went up or down: trap 128 to the SM, if the switch is configured.
    SwitchPortStateChange(NodeId),
    /// A PortInfo Set changed a port's LinkWidthEnabled, LinkSpeedEnabled or
    /// LinkSpeedExtEnabled, or the host changed a CA port's CapabilityMask: trap 144 to the
    /// SM from the SMA whose management port (a switch's port 0, a CA's port) this is, if
    /// the port is configured.
    LocalChanges(PortId),
}

/// PortInfo fields a port keeps beyond [`PortState`](super::PortState), stored once the SM
/// writes one of them (or a violation is counted).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortExtra {
    /// LinkDownDefaultState: 1 Sleep, 2 Polling.
    pub link_down_default: u8,
    /// VLHighLimit.
    pub vl_high_limit: u8,
    /// VLStallCount (switch external ports).
    pub vl_stall_count: u8,
    /// SubnetTimeOut.
    pub subnet_timeout: u8,
    /// M_KeyViolations (saturates at 0xFFFF).
    pub m_key_violations: u16,
    /// P_KeyViolations.
    pub p_key_violations: u16,
    /// Q_KeyViolations.
    pub q_key_violations: u16,
    /// LocalPhyErrors threshold.
    pub local_phy_errors: u8,
    /// OverrunErrors threshold.
    pub overrun_errors: u8,
    /// PartitionEnforcementInbound (switch external ports).
    pub partition_enforcement_inbound: bool,
    /// PartitionEnforcementOutbound (switch external ports).
    pub partition_enforcement_outbound: bool,
    /// FilterRawInbound (switch external ports).
    pub filter_raw_inbound: bool,
    /// FilterRawOutbound (switch external ports).
    pub filter_raw_outbound: bool,
    /// When the running M_Key lease expires (simulated time), if one runs.
    pub lease_deadline: Option<Duration>,
}

impl PortExtra {
    fn new(kind: PortKind) -> Self {
        let d = kind.defaults();
        PortExtra {
            link_down_default: defaults::LINK_DOWN_DEFAULT,
            vl_high_limit: 0,
            vl_stall_count: d.vl_stall_count,
            subnet_timeout: d.subnet_timeout,
            m_key_violations: 0,
            p_key_violations: 0,
            q_key_violations: 0,
            local_phy_errors: 0,
            overrun_errors: 0,
            partition_enforcement_inbound: false,
            partition_enforcement_outbound: false,
            filter_raw_inbound: false,
            filter_raw_outbound: false,
            lease_deadline: None,
        }
    }
}

/// The 64 low-priority then 64 high-priority entries of a port's VL arbitration tables.
pub type VlArbTables = [[VlArbEntry; defaults::VL_ARB_ENTRIES]; 2];

/// The management state of every node beyond the fabric model: the side tables the SMA and PMA
/// write, and the effects waiting to be reported. One per [`Fabric`], made with
/// [`Agents::new`], which also gives every port its SMA defaults.
#[derive(Debug, Clone)]
pub struct Agents {
    pub(crate) extra: SideTable<PortExtra>,
    pub(crate) pkeys: SideTable<Box<[u16]>>,
    pub(crate) guids: SideTable<Box<[u64]>>,
    /// SL-to-VL tables by (output port, input port number); a CA's port has input 0.
    pub(crate) sl2vl: HashMap<(PortId, u8), [u8; 8]>,
    pub(crate) vlarb: SideTable<Box<VlArbTables>>,
    pub(crate) counters: SideTable<PortCounters>,
    /// Ports whose link a fault holds down (both ends are listed).
    pub(crate) fault_down: HashSet<PortId>,
    /// Nodes a fault holds down: none of their links comes up.
    pub(crate) node_down: HashSet<NodeId>,
    /// Ports without a cable that train as if looped back to themselves (a standalone CA's).
    pub(crate) loopback: HashSet<PortId>,
    /// How many times each port's link left LinkUp (ports whose link never did are absent):
    /// a packet a link delay holds is lost if its far end's count moved meanwhile, even if
    /// the link is up again when the delay ends.
    pub(crate) link_downs: HashMap<PortId, u64>,
    pub(crate) effects: Vec<Effect>,
}

impl Agents {
    /// How many times the link of `port` has left LinkUp.
    pub(crate) fn link_downs(&self, port: PortId) -> u64 {
        self.link_downs.get(&port).copied().unwrap_or(0)
    }

    /// The agents of `fabric`, giving each port the PortInfo values its SMA starts with
    /// (CapabilityMask, NeighborMTU, OperationalVLs) where the fabric left them unset.
    pub fn new(fabric: &mut Fabric) -> Agents {
        let slots = fabric.ports.len();
        for i in 0..slots {
            let id = PortId(i as u32);
            let kind = port_kind(fabric, id);
            let d = kind.defaults();
            let s = &mut fabric.ports[i].state;
            if s.capability_mask == 0 {
                s.capability_mask = d.capability_mask;
            }
            if s.neighbor_mtu == 0 {
                s.neighbor_mtu = d.neighbor_mtu;
            }
            if s.op_vls == 0 {
                s.op_vls = d.vl_cap;
            }
        }
        Agents {
            extra: SideTable::new(slots),
            pkeys: SideTable::new(slots),
            guids: SideTable::new(slots),
            sl2vl: HashMap::new(),
            vlarb: SideTable::new(slots),
            counters: SideTable::new(slots),
            fault_down: HashSet::new(),
            node_down: HashSet::new(),
            loopback: HashSet::new(),
            link_downs: HashMap::new(),
            effects: Vec::new(),
        }
    }

    /// The PMA counters of `port` (zero if nothing crossed it yet).
    pub fn counters(&self, port: PortId) -> PortCounters {
        self.counters.get(port).copied().unwrap_or_default()
    }

    /// The PMA counters of `port`, to count something.
    pub fn counters_mut(&mut self, port: PortId) -> &mut PortCounters {
        self.counters
            .get_or_insert_with(port, PortCounters::default)
    }

    /// Takes the effects recorded since the last call.
    pub fn take_effects(&mut self) -> Vec<Effect> {
        std::mem::take(&mut self.effects)
    }

    /// Makes `port` (which has no cable) train as if looped back to itself, as the ports of a
    /// standalone CA do.
    pub fn set_loopback(&mut self, port: PortId) {
        self.loopback.insert(port);
    }

    /// Whether a fault holds the link of `port` down (the link itself, or the node of either
    /// end; `fabric` is the fabric these agents belong to).
    pub fn is_fault_down(&self, fabric: &Fabric, port: PortId) -> bool {
        let down = |p: PortId| {
            self.fault_down.contains(&p) || self.node_down.contains(&fabric.port(p).node())
        };
        down(port) || fabric.peer(port).is_some_and(down)
    }
}

/// Which kind of port slot `id` is.
pub fn port_kind(fabric: &Fabric, id: PortId) -> PortKind {
    let p = fabric.port(id);
    match (fabric.node(p.node()).kind(), p.num()) {
        (NodeType::Switch, 0) => PortKind::SwitchPort0,
        (NodeType::Switch, _) => PortKind::SwitchExternal,
        _ => PortKind::Ca,
    }
}

/// The SMA (and PMA) at work on one fabric: the fabric, its agents' state and the current
/// simulated time, borrowed for the handling of one MAD or one link event.
pub struct Sma<'a> {
    /// The fabric.
    pub fabric: &'a mut Fabric,
    /// The agents' state.
    pub agents: &'a mut Agents,
    /// Simulated time now (for the M_Key lease).
    pub now: Duration,
}

/// The SMP data area, as attribute handlers see it.
type Data = [u8; 64];

/// Result of an attribute handler: the MAD status to answer with (0 = success). The handler
/// has left the attribute's current value in the data either way.
type Status = u16;

impl Sma<'_> {
    /// Handles one MAD that reached `node` through its port `in_port` (for a switch, the port
    /// it entered by; for a CA, its own port), turning it into the response in place.
    /// `ignore_mkey` skips the M_Key check, as MAD_IFC's flag does for the local host.
    pub fn process(
        &mut self,
        node: NodeId,
        in_port: u8,
        mad: &mut [u8; 256],
        ignore_mkey: bool,
    ) -> Reply {
        if mad[0] != class::BASE_VERSION {
            return Reply::Consumed(Silent::BadBaseVersion);
        }
        match mad[1] {
            class::SUBN_LID_ROUTED | class::SUBN_DIRECTED_ROUTE => {
                self.smp(node, in_port, mad, ignore_mkey)
            }
            class::PERF_MGMT => self.pma(node, in_port, mad),
            _ => unmatched(mad),
        }
    }

    fn smp(&mut self, node: NodeId, in_port: u8, mad: &mut [u8; 256], ignore_mkey: bool) -> Reply {
        let m = mad[3];
        if method::has_response_bit(m) || m == method::TRAP || m == method::SEND {
            return Reply::PassUp;
        }
        if mad[2] != class::SUBN_CLASS_VERSION {
            return respond(mad, status::BAD_VERSION);
        }
        let Some(key_port) = self.mkey_port(node, in_port) else {
            return Reply::Consumed(Silent::NoResponse);
        };
        let smp = Smp::new_checked(&mad[..]).expect("256 bytes hold an SMP");
        let (attr, attr_mod, m_key) =
            (smp.header().attr_id(), smp.header().attr_mod(), smp.m_key());
        let req = mkey::Request {
            method: m,
            attr,
            attr_mod,
            key: m_key,
            ignore: ignore_mkey,
        };
        let check = match self.check_smp_mkey(node, in_port, key_port, req) {
            Ok(check) => check,
            Err(violation) => return violation,
        };
        if m == method::TRAP_REPRESS {
            if attr == attr_id::sm::NOTICE {
                return Reply::Consumed(Silent::TrapRepress);
            }
            // TrapRepress has no response method: the kernel's software SMA (`qib_mad.c`
            // `process_subn`) answers 0x000C in a GetResp, the response to a Get.
            mad[3] = method::GET;
            return respond(mad, status::METHOD_ATTR_UNSUPPORTED);
        }
        if m != method::GET && m != method::SET {
            return respond(mad, status::METHOD_UNSUPPORTED);
        }
        let set = m == method::SET;
        let is_switch = self.fabric.node(node).kind() == NodeType::Switch;
        let lid_routed = mad[1] == class::SUBN_LID_ROUTED;
        // The handlers work on the SMP's data area in place: each leaves the attribute's
        // value there (the new one, or the current one when it refuses), and SMInfo passed
        // up does not touch it.
        let data: &mut Data = (&mut mad[64..128])
            .try_into()
            .expect("the SMP data area is 64 bytes");
        let st = match attr {
            attr_id::sm::NODE_DESCRIPTION => self.node_description(node, set, attr_mod, data),
            attr_id::sm::NODE_INFO => self.node_info(node, in_port, set, attr_mod, data),
            attr_id::sm::PORT_INFO => {
                // ibsim sends trap 144 with the LID and SM LID of the port the SMP came in by
                // (`sim_mad.c` `do_portinfo`, `send_trap(port, TRAP_144)`): a CA's port, or a
                // switch's port 0 when the SMP was LID-routed to the switch. A directed-route
                // SMP comes into a switch by an external port, which has no LID: no trap.
                let access = port_info::Access {
                    hide_mkey: check == mkey::Check::HideKey,
                    notice_port: (!is_switch || lid_routed).then_some(key_port),
                };
                self.port_info(node, in_port, set, attr_mod, data, access)
            }
            attr_id::sm::SWITCH_INFO if is_switch => self.switch_info(node, set, attr_mod, data),
            attr_id::sm::LINEAR_FORWARDING_TABLE if is_switch => {
                self.lft(node, set, attr_mod, data)
            }
            attr_id::sm::MULTICAST_FORWARDING_TABLE if is_switch => {
                self.mft(node, set, attr_mod, data)
            }
            attr_id::sm::PKEY_TABLE => self.pkey_table(node, in_port, set, attr_mod, data),
            attr_id::sm::SL_TO_VL_TABLE => self.sl2vl(node, in_port, set, attr_mod, data),
            attr_id::sm::VL_ARB_TABLE => self.vl_arb(node, in_port, set, attr_mod, data),
            attr_id::sm::GUID_INFO => self.guid_info(node, in_port, set, attr_mod, data),
            attr_id::sm::MLNX_EXTENDED_PORT_INFO => {
                self.ext_port_info(node, in_port, set, attr_mod, data)
            }
            attr_id::sm::SM_INFO => {
                // As the kernel's `process_subn` (`qib_mad.c`, `hfi1`), for Get and Set:
                // IsSMDisabled first (consumed, no answer), then IsSM (passed up to the SM).
                use mad_wire::attr::port_info::cap_mask::{IS_SM, SM_DISABLED};
                let caps = self.fabric.port(key_port).state.capability_mask;
                if caps & SM_DISABLED != 0 {
                    return Reply::Consumed(Silent::SmDisabled);
                }
                if caps & IS_SM != 0 {
                    return Reply::PassUp;
                }
                status::METHOD_ATTR_UNSUPPORTED
            }
            _ => status::METHOD_ATTR_UNSUPPORTED,
        };
        respond(mad, st)
    }

    /// The port whose M_Key guards the node's SMA: a switch's port 0, a CA's receiving port.
    fn mkey_port(&self, node: NodeId, in_port: u8) -> Option<PortId> {
        match self.fabric.node(node).kind() {
            NodeType::Switch => self.fabric.port_id(node, 0),
            _ => self.fabric.port_id(node, in_port),
        }
    }

    /// Records an effect for the network to report.
    fn effect(&mut self, e: Effect) {
        self.agents.effects.push(e);
    }

    /// The extra PortInfo fields of `port`, created with their defaults.
    fn extra_mut(&mut self, port: PortId) -> &mut PortExtra {
        let kind = port_kind(self.fabric, port);
        self.agents
            .extra
            .get_or_insert_with(port, || PortExtra::new(kind))
    }

    /// The extra PortInfo fields of `port` (defaults if never written).
    fn extra(&self, port: PortId) -> PortExtra {
        self.agents
            .extra
            .get(port)
            .copied()
            .unwrap_or_else(|| PortExtra::new(port_kind(self.fabric, port)))
    }
}

/// Turns the request in `mad` into its response with `st`.
pub(crate) fn respond(mad: &mut [u8; 256], st: Status) -> Reply {
    let mut view = mad_wire::Mad::new_checked(&mut mad[..]).expect("256 bytes hold a header");
    match view.make_response(st) {
        Ok(()) => Reply::Respond,
        Err(_) => Reply::Consumed(Silent::NoResponse),
    }
}

/// A GSI MAD of a class no agent here serves: Get and Set are answered with 0x000C, as the
/// kernel's `generate_unmatched_resp` does; anything else is dropped.
fn unmatched(mad: &mut [u8; 256]) -> Reply {
    let m = mad[3];
    if method::has_response_bit(m) || m == method::TRAP_REPRESS {
        return Reply::PassUp;
    }
    if m == method::GET || m == method::SET {
        respond(mad, status::METHOD_ATTR_UNSUPPORTED)
    } else {
        Reply::PassUp
    }
}

//! The simulated InfiniBand fabric: its topology (switches, CAs, routers and the links between
//! them) and the per-port and per-switch state the simulated SMA keeps.
//!
//! * [`parse`]: reading ibnetdiscover / ibsim topology files ([`Fabric::parse_file`],
//!   [`Fabric::parse_str`]); [`write`](mod@write): writing them back ([`Fabric::write_topology`]).
//! * [`model`]: the index-based model, sized for 100,000-node fabrics; [`state`]: PortInfo and
//!   SwitchInfo state, LFT and MFT; [`rate`]: link widths and speeds.
//! * [`builder`]: building a fabric in code; [`guid`]: ibsim's default GUID scheme;
//!   [`generator`]: fat trees and other regular shapes from a spec string (not `gen`, a
//!   reserved word in edition 2024).
//!
//! The SMA, PMA and routing that act on this model are not here. How they are meant to use it:
//!
//! * Every step of forwarding an SMP is an index operation, whatever the fabric's size. A
//!   directed-route hop out of port `p` of node `n` is `port_id(n, p)` then `peer()` then
//!   `port(q).node()`/`.num()` (the arrival port, for NodeInfo LocalPortNum and the return
//!   path). A LID-routed hop is `switch(n).route(dlid)` then the same; the packet is taken
//!   by the first port on its way whose own LID range holds the DLID (a switch's is port
//!   0's), as in hardware. `lid_owner(dlid)` names the port holding a LID for tools; an SM
//!   moving LIDs may leave a LID with two holders for a while ([`Fabric::assign_lid`]).
//! * The SMA's per-port state is [`Port::state`] (PortState, PhysState, M_Key, SM LID, ...) and
//!   [`Port::enabled`]; change LIDs only through [`Fabric::set_lid`] or [`Fabric::assign_lid`],
//!   which keep `lid_owner` in step. Cables never change; a link taken down is a state (PhysState
//!   Disabled or Polling, PortState Down), and forwarding should check it as ibsim does.
//! * Switch state is [`SwitchState`]: SwitchInfo fields, and the LFT and MFT, which grow as the
//!   SM programs them (48K LIDs at most, ibsim 0.12's LinearFDBCap).
//! * Tables the SMA adds (P_Key, SL-to-VL, VL arbitration, port counters) belong in side
//!   vectors indexed by [`PortId`], allocated when first written, so that a port stays small.
//! * Unicast LIDs stop at 0xbfff, so a fabric of 100,000 CAs is more than one subnet can
//!   address: such a fabric is for loading and discovery, not for full routing.

pub mod builder;
pub mod check;
pub mod error;
pub mod generator;
pub mod guid;
pub mod model;
pub mod parse;
pub mod pma;
pub mod rate;
pub mod side;
pub mod sma;
pub mod state;
pub mod write;

pub use self::builder::{FabricBuilder, NodeSpec};
pub use self::error::{FabricError, Problem, SpecProblem};
pub use self::model::{Fabric, Node, NodeId, NodeType, Port, PortId};
pub use self::rate::{ActiveRates, LinkRates};
pub use self::state::{LinkState, PhysState, PortState, SwitchInfo, SwitchState};

//! The MAD layer: agents registered by management class, and per-port send tracking that gives
//! every accepted send exactly one completion and leaks no DMA lease, on every path from
//! completion to device removal. Written against `driver::verbs` only: it never knows which
//! device family (or the simulator) is underneath.
//!
//! ```text
//! let port = mad::open(hca.port(1).unwrap())?;            // Port: rings, receive buffers
//! let agent = port.register(AgentSpec::class(0x04, 1, MethodMask::of(&[0x01])))?;
//! let id = agent.send(SendRequest::new(mad, dest).timeout_ms(100).retries(3))?;
//! while let Some(ev) = agent.next_event(port.deadline_after(Duration::from_secs(1))) { ... }
//! agent.deregister();                                      // returns when all sends are done
//! ```
//!
//! The parts (reference/mad-stack.md §1 is the kernel behaviour each follows):
//! - [`registry`]: registrations by class, class version, methods and OUI; dispatch of
//!   unsolicited MADs; conflicts refused.
//! - [`slot_state`]: the kernel's 2025 send state machine as one atomic word per slot, moved by
//!   compare-and-swap (model-checked with loom).
//! - `ring`: per QP, a ring of send slots (4 per send queue entry by default), indexed by
//!   `wr_id`; each slot has a send buffer of its own (leased with the ring when the port
//!   opens, 16 to a lease) that holds its MAD until DONE; a send queue entry is held
//!   only from post to completion; what cannot go yet waits in order, nothing is refused.
//! - `units`: a ring's request units, which agents waiting for one get in the order they began
//!   waiting (model-checked with loom).
//! - [`tid`]: `wr_id` and TID encodings (the TID's upper 32 bits name the slot: O(1) matching).
//! - `progress`: the progress loop (CQEs, responses, timers, cancels, fatal errors).
//! - `park`, `waiters`: where threads wait for the thread running the progress loop (parked,
//!   or on their event queue), and the wake-ups when it does work or lets it go
//!   (model-checked with loom).
//! - [`timer`]: response timers in an indexed heap.
//! - [`addr`], [`recv_rules`]: the address check of response matching, receive validation,
//!   the port's own agent (`process_mad`) and the 0x000C answer to unclaimed Get/Set.
//! - [`flow`]: solicited-MAD flow control per agent.
//! - [`event`], [`counters`]: what agents are told, and what the port and agents have done.
//! - [`smi`]: directed-route SMPs: the SMI send and receive rules ([`smi::rules`]), and SMPs
//!   for the port itself answered by its SMA (`HcaPort::process_mad`) without the wire.
//! - [`rmpp`]: RMPP transfers for agents registered with RMPP version 1: segmentation,
//!   window, ACKs, timeouts, STOP/ABORT, reassembly.

pub use mad_wire as wire;

pub mod addr;
mod agent;
pub mod counters;
mod error;
pub mod event;
pub mod flow;
mod park;
mod port;
mod progress;
mod recv;
pub mod recv_rules;
pub mod registry;
mod ring;
pub mod rmpp;
mod slot_events;
pub mod slot_state;
pub mod smi;
mod sync;
pub mod tid;
pub mod timer;
mod units;
mod waiters;

#[cfg(all(test, not(loom)))]
mod double;
#[cfg(all(test, not(loom)))]
mod tests;

pub use addr::{GrhInfo, QP1_QKEY, RecvAddr};
pub use agent::{Agent, AgentSpec, SendRequest};
pub use counters::{AgentCounters, DropCounts, DropReason, PortCounters, StatusCounts};
pub use error::MadError;
pub use event::{
    AgentId, Event, EventQueue, Notify, RecvBox, RecvMad, SendCompletion, SendId, SendRef,
};
pub use port::{Census, MIN_SLOTS, Port, PortConfig, ProgressThread, QpCensus, open};
pub use recv::RECV_BUF_LEN;
pub use registry::{ClassRegistration, MethodMask};
pub use rmpp::RmppCounters;
pub use slot_state::SendState;
pub use smi::{SmiCounters, SmiDiscard};

pub use driver::verbs::{Grh, SpecialQp, UdDest, WcStatus};

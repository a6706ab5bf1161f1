//! The simulated hardware: device models that implement a family's registers, commands, queues
//! and completion formats, doing DMA only through a simulated IOMMU, attached to a simulated
//! InfiniBand fabric of switches and CAs with their SMA and PMA, with fault injection.
//!
//! [`fabric`] is the topology and the management agents of every node; [`net`] runs it: devices
//! attach to CA ports ([`Network::attach`]), packets are routed, answered, faulted and counted.

pub mod clock;
pub mod device;
pub mod edu;
pub mod fabric;
mod idmap;
pub mod input_file;
pub mod link;
pub mod mlx5;
pub mod net;
pub mod packet;
pub mod pci_config;
pub mod sched;

pub use clock::{ClockMode, SimClock};
pub use device::{Bar, Device, IrqKind, IrqLines, IrqSignal};
pub use link::{PortChange, PortLink, PortSink, PortSnapshot, ReceiveDrop};
pub use net::{Network, NodeRef, Standalone, StandaloneInit};
pub use packet::{Packet, PacketGrh};
pub use sched::Scheduler;

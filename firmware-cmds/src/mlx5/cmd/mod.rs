//! The command interface: queue entries, mailbox chains, the generic input/output headers and
//! the status codes. The typed commands are in [`crate::mlx5::ops`].

pub mod entry;
pub mod header;
pub mod mailbox;
pub mod status;

pub use entry::CmdEntry;
pub use header::{InHeader, OutHeader};
pub use mailbox::{ChainCheck, Framed, MailboxBlock};
pub use status::{CmdStatus, DeliveryStatus, StatusReport};

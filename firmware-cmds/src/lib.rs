//! Every firmware command the driver issues and the simulator answers, per device family:
//! opcodes, input and output layouts, status codes and command-interface framing.
//! Pure data and codecs, no I/O; shared by `driver` and `sim` and guarded by golden tests.
//!
//! Decoders take untrusted bytes and return [`Error`] on short or malformed input; they never
//! panic.

pub mod error;
pub mod mlx5;

pub use error::{Error, MailboxProblem, Result};

//! Errors of the library half of `hca-tools`: opening a device for a MAD tool, and the
//! discovery and bench engines. Each message says what failed and what to try.

use std::time::Duration;

/// Why a discovery, a bench or the session they run in could not go on.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The device string did not open.
    #[error("cannot open {device}: {source}")]
    Open {
        /// The device string.
        device: String,
        /// The driver's error.
        #[source]
        source: driver::DriverError,
    },
    /// Bring-up failed.
    #[error("bringing up {device} failed: {source} (`hca info {device}` shows the device)")]
    BringUp {
        /// The device string.
        device: String,
        /// The driver's error.
        #[source]
        source: driver::DriverError,
    },
    /// Closing the HCA failed.
    #[error("closing {device} failed: {source}")]
    Close {
        /// The device string.
        device: String,
        /// The driver's error.
        #[source]
        source: driver::DriverError,
    },
    /// The HCA has no such port.
    #[error("{device} has no port {port} (it has {ports}): pick one with --port")]
    NoSuchPort {
        /// The device string.
        device: String,
        /// The port asked for.
        port: u8,
        /// Ports it has.
        ports: u8,
    },
    /// The MAD layer refused something the tool needs (opening the port, registering).
    #[error("MAD layer: {0}")]
    Mad(#[from] mad::MadError),
    /// The device died or was removed during the run.
    #[error(
        "the device failed during the run: {reason} (nothing more can be sent; `hca info` shows its state)"
    )]
    DeviceFatal {
        /// What the driver said.
        reason: String,
    },
    /// Sends stayed outstanding far past their timeouts: the MAD layer did not complete them.
    #[error(
        "{outstanding} SMPs got no completion within {waited:?} of device time (timeouts and retries should have ended them): a MAD-layer bug, please report it with HCA_LOG=mad=debug"
    )]
    Stalled {
        /// Sends still outstanding.
        outstanding: usize,
        /// How long nothing happened.
        waited: Duration,
    },
    /// A setting is out of range.
    #[error("{what}: {why}")]
    BadSetting {
        /// The setting.
        what: &'static str,
        /// What is wrong and what is allowed.
        why: String,
    },
    /// The local port answered nothing, so there is nothing to discover from.
    #[error(
        "the local port did not answer its own NodeInfo ({why}): is the port up (`hca info` shows its state)?"
    )]
    NoLocalNode {
        /// What happened to the query.
        why: String,
    },
    /// The port the SMPs would leave by is Down: a route through it reaches nothing.
    #[error(
        "port {port} is Down (physical state {phys}): SMPs sent along a route leave by it and reach nothing; bring its link up (`hca info` shows the port's state), pick another port with --port, or give --path 0 to ask the HCA's own SMA"
    )]
    PortDown {
        /// The port.
        port: u8,
        /// Its PortPhysicalState, by name.
        phys: String,
    },
    /// A bench in which no send got its response.
    #[error("no round trip completed out of {sent} sends: {why}")]
    NoRoundTrip {
        /// Sends made.
        sent: u64,
        /// The first failure.
        why: String,
    },
    /// SIGINT or SIGTERM came ([`crate::interrupt`]): the engine stopped, its sends cancelled.
    #[error("interrupted by {}", crate::interrupt::name(*signal))]
    Interrupted {
        /// The signal's number.
        signal: i32,
    },
    /// Writing the output failed.
    #[error("writing the output: {0}")]
    Write(#[from] std::io::Error),
}

//! The one error type of the `driver` crate.

use std::io;

use crate::backend::IrqIndex;

/// Everything device access and the families can report. Each message says what to do.
#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    /// A device string that is none of the accepted forms.
    #[error(
        "bad device string {given:?}: {reason}\naccepted forms:\n  vfio:DDDD:BB:DD.F   a PCI function bound to vfio-pci, e.g. vfio:0000:03:00.0\n  sim                 the built-in simulated HCA\n  sim:KEY=VALUE,...   the simulated HCA with parameters (see `hca info --help`)"
    )]
    BadDeviceString {
        /// The string as given.
        given: String,
        /// What is wrong with it.
        reason: String,
    },

    /// `sim` was asked for in a program that has no simulator linked in.
    #[error(
        "this program has no simulator linked in, so `sim` devices are unavailable; use a vfio:BDF device, or a program built with the `embed` crate (such as `hca`)"
    )]
    NoSimulator,

    /// The simulator refused its parameters.
    #[error("the simulator refused its parameters: {reason}\naccepted parameters:\n{help}")]
    SimParams {
        /// Why.
        reason: String,
        /// The parameters it accepts.
        help: &'static str,
    },

    /// The backend has no such region, or it cannot be mapped.
    #[error("the device has no mappable region {index}")]
    NoRegion {
        /// Region index.
        index: u32,
    },

    /// Interrupt vectors outside what the device offers.
    #[error("{index:?} interrupts {start}..{} requested but the device offers {available}", start + count)]
    IrqRange {
        /// Index.
        index: IrqIndex,
        /// First vector.
        start: u32,
        /// Vectors requested.
        count: u32,
        /// Vectors available.
        available: u32,
    },

    /// An OS call failed.
    #[error("{what}: {source}")]
    Io {
        /// What we were doing.
        what: String,
        /// The OS error.
        #[source]
        source: io::Error,
    },

    /// A DMA error from the `dma` crate.
    #[error(transparent)]
    Dma(#[from] dma::DmaError),
}

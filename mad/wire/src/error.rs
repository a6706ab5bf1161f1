//! The one error type of this crate: what was wrong with a buffer or a value, and what to do.

use thiserror::Error;

/// Why a buffer could not be viewed or parsed, or a value could not be built.
///
/// Every parser in this crate reads bytes that came off the wire or out of a device, so each
/// failure is one of these values, never a panic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum Error {
    /// The buffer is shorter than the layout it is viewed as.
    #[error(
        "{what} needs {needed} bytes but the buffer holds {got}: pass the whole MAD (256 bytes) or the whole attribute"
    )]
    Truncated {
        /// The layout that was asked for.
        what: &'static str,
        /// Bytes that layout occupies.
        needed: usize,
        /// Bytes the buffer holds.
        got: usize,
    },
    /// The MAD's BaseVersion is not InfiniBand's (1).
    #[error(
        "MAD base version {found} is not InfiniBand's (1): answer a request with status 0x0004 (bad version), drop anything else"
    )]
    BadBaseVersion {
        /// The BaseVersion byte as received.
        found: u8,
    },
    /// The MAD belongs to another management class than the layout it was parsed as.
    #[error(
        "management class {found:#04x} is not {expected}: dispatch the MAD by class before parsing it"
    )]
    WrongClass {
        /// The MgmtClass byte as received.
        found: u8,
        /// The class or classes this layout is for.
        expected: &'static str,
    },
    /// A directed-route SMP claims more hops than its path arrays hold (C14-6 allows 0–63).
    #[error("directed-route hop count {found} is above 63 (IBA C14-6): discard the SMP")]
    HopCountTooLarge {
        /// The HopCount byte as received.
        found: u8,
    },
    /// A directed-route path longer than an SMP can carry.
    #[error(
        "a directed-route path of {hops} hops is longer than the 63 an SMP can carry: shorten it or route by LID"
    )]
    PathTooLong {
        /// Number of hops asked for.
        hops: usize,
    },
    /// A hop index outside the 64-entry InitialPath/ReturnPath arrays.
    #[error(
        "hop {hop} is outside the 64-entry directed-route path arrays: check the hop pointer before using it"
    )]
    HopOutOfRange {
        /// The hop index asked for.
        hop: usize,
    },
    /// An entry index outside a table block.
    #[error(
        "entry {index} is outside {table}, which holds {len}: reduce the index modulo the block size"
    )]
    IndexOutOfRange {
        /// The table block.
        table: &'static str,
        /// The index asked for.
        index: usize,
        /// Entries in the block.
        len: usize,
    },
    /// The method has no response method (it is already a response, or a Send).
    #[error(
        "method {method:#04x} has no response: only requests (Get, Set, Trap, Report, SA queries) are answered"
    )]
    NoResponseMethod {
        /// The Method byte of the MAD (R bit included).
        method: u8,
    },
    /// A NodeDescription string longer than the attribute.
    #[error(
        "a node description of {len} bytes does not fit the 64-byte NodeDescription attribute: shorten it"
    )]
    NodeDescriptionTooLong {
        /// Length of the string in bytes.
        len: usize,
    },
    /// A NodeDescription whose bytes (up to the first NUL) are not UTF-8.
    #[error("the node description is not UTF-8 (IBA NodeString): read the raw bytes instead")]
    NodeDescriptionNotUtf8,
}

/// The result type of this crate.
pub type Result<T> = core::result::Result<T, Error>;

/// Checks that `buffer` holds at least `needed` bytes for the layout named `what`.
pub(crate) fn check_len(what: &'static str, buffer: &[u8], needed: usize) -> Result<()> {
    if buffer.len() < needed {
        Err(Error::Truncated {
            what,
            needed,
            got: buffer.len(),
        })
    } else {
        Ok(())
    }
}

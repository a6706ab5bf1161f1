//! The errors of the running network: what a caller asked for that the fabric cannot do.

use thiserror::Error;

use crate::fabric::FabricError;

/// Why a network operation was refused.
#[derive(Debug, Error)]
pub enum NetError {
    /// No node has this name.
    #[error(
        "no node named {name:?} in the fabric: use a node id as the topology file spells it \
         (e.g. \"Hca1\" or \"S-0008f10400411a08\")"
    )]
    NoSuchNode {
        /// The name asked for.
        name: String,
    },
    /// A node id beyond the fabric.
    #[error(
        "node id {id} is not in this fabric of {count} nodes: take ids from this network's fabric"
    )]
    NoSuchNodeId {
        /// The id asked for.
        id: u32,
        /// Nodes in the fabric.
        count: usize,
    },
    /// The node has no such port.
    #[error("node {node:?} has no port {port}: its ports are 1 to {ports}")]
    NoSuchPort {
        /// The node's name.
        node: String,
        /// The port asked for.
        port: u8,
        /// The node's port count.
        ports: u8,
    },
    /// Devices attach to CA ports; switches and routers are simulated whole.
    #[error(
        "node {node:?} is a {kind}: a device can attach only to a CA's port (switches and routers \
         are simulated with their SMA)"
    )]
    NotACa {
        /// The node's name.
        node: String,
        /// Its type ("Switch", "Rt").
        kind: &'static str,
    },
    /// Another device is attached there.
    #[error("port {port} of {node:?} already has a device attached: drop that device's link first")]
    AlreadyAttached {
        /// The node's name.
        node: String,
        /// The port.
        port: u8,
    },
    /// A state file could not be read, or was refused unread (not a regular file, larger than
    /// any state saved from this fabric, not UTF-8).
    #[error("cannot read simulated fabric state {path}: {source}")]
    StateFileRead {
        /// The file.
        path: String,
        /// Why.
        source: crate::input_file::InputFileError,
    },
    /// A state file could not be written or applied.
    #[error(
        "simulated fabric state {path}{}: {problem}",
        if *line > 0 { format!(" line {line}") } else { String::new() }
    )]
    StateFile {
        /// The file.
        path: String,
        /// The line (0: the file as a whole).
        line: usize,
        /// What is wrong.
        problem: String,
    },
    /// The one-node fabric of a standalone CA could not be built.
    #[error("cannot build the standalone CA: {0}")]
    Standalone(#[from] FabricError),
}

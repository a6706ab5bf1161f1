//! Fabric discovery on the MAD layer: [`engine`] walks the fabric by directed route from the
//! local port (libibnetdisc's algorithm, several SMPs in flight), [`topology`] holds what it
//! found, and the writers give it as ibnetdiscover text ([`ibnetdiscover`], the default of
//! `hca discover`), JSON ([`json`]) or a Graphviz graph ([`dot`]).

pub mod dot;
pub mod engine;
pub mod ibnetdiscover;
pub mod json;
mod order;
pub mod topology;

pub use engine::{Config, Progress, discover, discover_with};
pub use topology::{
    Failure, FailureKind, Node, NodeIndex, Port, PortRef, Stats, Topology, route_text,
};

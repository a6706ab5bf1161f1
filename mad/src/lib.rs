//! The MAD layer: management datagram wire formats, agents registered by class, and per-port
//! send tracking that gives every posted send exactly one completion and leaks no DMA lease,
//! on every path from completion to device removal.

//! The atomics the slot state machine uses: loom's under `--cfg loom` (so that loom can explore
//! every interleaving of its compare-and-swaps), the standard library's otherwise.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicU64, Ordering};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicU64, Ordering};

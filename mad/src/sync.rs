//! The atomics that the loom model checks replace: loom's under `--cfg loom` (so that loom can
//! explore every interleaving of their accesses), the standard library's otherwise. Used by
//! the slot state machine, the ring's free slot indexes and its posting flag, and (with the
//! mutex) the ring's request units and the agents waiting for one.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
#[cfg(loom)]
pub(crate) use loom::sync::{Mutex, MutexGuard};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
#[cfg(not(loom))]
pub(crate) use std::sync::{Mutex, MutexGuard};

/// Nothing outside loom: there `SeqCst` accesses are totally ordered by themselves. Under
/// loom a `SeqCst` fence, standing in for that total order, which loom does not model (it
/// takes `SeqCst` loads and stores as acquire and release): called between a `SeqCst` store
/// and a later `SeqCst` load of another atomic whose correctness needs that order.
#[inline]
pub(crate) fn seq_cst_order() {
    #[cfg(loom)]
    loom::sync::atomic::fence(Ordering::SeqCst);
}

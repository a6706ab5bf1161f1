//! Memory barriers between the CPU and a device, after rdma-core's `udma_barrier.h`.
//!
//! Volatile accesses are not reordered against each other by the compiler, but they are not
//! hardware barriers and do not order ordinary memory accesses. These functions do.

use std::sync::atomic::{Ordering, compiler_fence, fence};

/// Before a store that makes the device read DMA memory (a doorbell record or an MMIO
/// doorbell): every earlier write to DMA memory must be visible to the device first.
/// rdma-core's `udma_to_device_barrier`; SPDK uses `sfence` on x86, and so do we.
#[inline]
pub fn to_device() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `sfence` has no operands and no effect besides ordering stores.
    unsafe {
        core::arch::x86_64::_mm_sfence();
    }
    #[cfg(not(target_arch = "x86_64"))]
    fence(Ordering::SeqCst);
    compiler_fence(Ordering::SeqCst);
}

/// After seeing a device-written valid or owner bit and before reading the rest of the entry
/// (CQE, EQE, command output). rdma-core's `udma_from_device_barrier` (`lfence` on x86).
#[inline]
pub fn from_device() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `lfence` has no operands and no effect besides ordering loads.
    unsafe {
        core::arch::x86_64::_mm_lfence();
    }
    #[cfg(not(target_arch = "x86_64"))]
    fence(Ordering::SeqCst);
    compiler_fence(Ordering::SeqCst);
}

/// Full barrier, for the rare place that needs loads and stores ordered both ways.
#[inline]
pub fn full() {
    fence(Ordering::SeqCst);
}

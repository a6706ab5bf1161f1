//! Memory barriers between the CPU and a device, after rdma-core's `udma_barrier.h`.
//!
//! Volatile accesses are not reordered against each other by the compiler, but they are not
//! hardware barriers and do not order ordinary memory accesses. These functions do. A DMA
//! barrier must reach the device's side of the interconnect: on aarch64 that is the outer
//! shareable domain (`dmb osh*`), which Rust's atomic fences (`dmb ish`, inner shareable) do
//! not cover. Other architectures are refused at build time rather than given a barrier that
//! might be too weak.

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
compile_error!(
    "driver: DMA barriers are written for x86_64 and aarch64 only; add the architecture's \
     udma_to_device / udma_from_device barriers (rdma-core util/udma_barrier.h) to barrier.rs"
);

#[cfg(target_arch = "x86_64")]
use std::sync::atomic::fence;
use std::sync::atomic::{Ordering, compiler_fence};

/// Before a store that makes the device read DMA memory (a doorbell record or an MMIO
/// doorbell): every earlier write to DMA memory must be visible to the device first.
/// rdma-core's `udma_to_device_barrier` (`dmb oshst` on aarch64); on x86 SPDK uses `sfence`,
/// and so do we.
#[inline]
pub fn to_device() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `sfence` has no operands and no effect besides ordering stores.
    unsafe {
        core::arch::x86_64::_mm_sfence();
    }
    #[cfg(target_arch = "aarch64")]
    // SAFETY: `dmb oshst` has no operands and no effect besides ordering stores.
    unsafe {
        core::arch::asm!("dmb oshst", options(nostack, preserves_flags));
    }
    compiler_fence(Ordering::SeqCst);
}

/// After seeing a device-written valid or owner bit and before reading the rest of the entry
/// (CQE, EQE, command output). rdma-core's `udma_from_device_barrier` (`lfence` on x86,
/// `dmb oshld` on aarch64).
#[inline]
pub fn from_device() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `lfence` has no operands and no effect besides ordering loads.
    unsafe {
        core::arch::x86_64::_mm_lfence();
    }
    #[cfg(target_arch = "aarch64")]
    // SAFETY: `dmb oshld` has no operands and no effect besides ordering loads.
    unsafe {
        core::arch::asm!("dmb oshld", options(nostack, preserves_flags));
    }
    compiler_fence(Ordering::SeqCst);
}

/// Full barrier, for the rare place that needs loads and stores ordered both ways (`dmb osh`
/// on aarch64, for the same reason as above).
#[inline]
pub fn full() {
    #[cfg(target_arch = "aarch64")]
    // SAFETY: `dmb osh` has no operands and no effect besides ordering memory accesses.
    unsafe {
        core::arch::asm!("dmb osh", options(nostack, preserves_flags));
    }
    #[cfg(target_arch = "x86_64")]
    fence(Ordering::SeqCst);
    compiler_fence(Ordering::SeqCst);
}

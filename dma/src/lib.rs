//! DMA for a userspace HCA driver: memory the device may touch, the device addresses (IOVAs)
//! it is known by, the IOMMU domain that maps one to the other (VFIO type1 or the simulator's
//! IOMMU), and owned, accounted leases of mapped buffers that unmap themselves when dropped.
//!
//! - [`DmaMemory`] (`memory.rs`): memfd-backed, shared, pre-faulted memory, on 2 MiB huge
//!   pages when there are any; reachable by address and by fd + offset.
//! - [`IovaAllocator`] (`iova.rs`): IOVAs inside the IOMMU's ranges, never in the MSI window,
//!   never IOVA 0.
//! - [`DmaMapper`] (`mapper.rs`) and its backends: [`VfioType1`] (`vfio_type1.rs`) and
//!   [`SimIommu`] (`sim_iommu.rs`), whose device side checks every simulated DMA and records
//!   each violation as a [`Fault`].
//! - [`DmaPool`] and [`DmaLease`] (`lease.rs`): leases of mapped memory, strict (one mapping
//!   each) or pooled (buddy blocks of mapped arenas), with [`Accounting`] for leak checks.
//! - `memlock.rs`: the `RLIMIT_MEMLOCK` check behind [`DmaError::MemlockTooLow`].
//!
//! No function here hands out a Rust reference to device-visible memory: raw pointers,
//! copies and volatile big-endian accessors only.

mod buddy;
mod error;
mod iova;
mod iova_range;
mod lease;
mod mapper;
pub mod memlock;
mod memory;
mod sim_iommu;
pub mod vfio_type1;
mod volatile;

pub use error::DmaError;
pub use iova::{IOVA_ZERO_PAGE, IovaAllocator, IovaStats};
pub use iova_range::{IovaRange, X86_MSI_WINDOW, clip_to_dma_mask, dma_bit_mask};
pub use lease::{Accounting, DmaLease, DmaPool, FIRST_BASE_ARENA, LeaseMode, PoolConfig};
pub use mapper::{Access, DmaMapper};
pub use memory::{DmaMemory, PageKind, PagePolicy, base_page_size};
pub use sim_iommu::{
    AccessKind, DEFAULT_DMA_ENTRY_LIMIT, FAULT_LOG_CAPACITY, Fault, FaultReason, SimIommu,
    SimIommuConfig, SimIommuHold, VTD_39BIT_RANGES,
};
pub use vfio_type1::VfioType1;

//! DMA for a userspace HCA driver: memory the device may touch, the device addresses (IOVAs)
//! it is known by, the IOMMU domain that maps one to the other (VFIO type1 or the simulator's
//! IOMMU), and owned, accounted leases of mapped buffers that unmap themselves when dropped.

mod error;
mod iova_range;
mod mapper;
pub mod memlock;
pub mod vfio_type1;

pub use error::DmaError;
pub use iova_range::{IovaRange, X86_MSI_WINDOW};
pub use mapper::{Access, DmaMapper};
pub use vfio_type1::VfioType1;

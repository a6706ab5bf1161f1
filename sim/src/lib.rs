//! The simulated hardware: device models that implement a family's registers, commands, queues
//! and completion formats, doing DMA only through a simulated IOMMU, attached to a simulated
//! InfiniBand fabric of switches and CAs with their SMA and PMA, with fault injection.

pub mod fabric;

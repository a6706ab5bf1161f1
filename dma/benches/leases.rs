//! Lease + drop (and lease + 256-byte write + drop) in strict vs pooled mode on the simulated
//! IOMMU. Pooled should stay well under a microsecond; strict pays memfd + mmap + map + unmap.

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use dma::{Access, DmaPool, LeaseMode, SimIommu};

fn leases(c: &mut Criterion) {
    let payload = [0x5au8; 256];
    for (name, mode) in [("pooled", LeaseMode::Pooled), ("strict", LeaseMode::Strict)] {
        let pool = DmaPool::new(Arc::new(SimIommu::new()), mode).unwrap();
        // Keep some leases out so the pooled arena is not empty (a realistic free list).
        let _held: Vec<_> = (0..64)
            .map(|_| pool.lease(256, 64, Access::ReadWrite).unwrap())
            .collect();
        c.bench_function(&format!("lease_drop/{name}/256"), |b| {
            b.iter(|| black_box(pool.lease(black_box(256), 64, Access::ReadWrite).unwrap()));
        });
        c.bench_function(&format!("lease_write256_drop/{name}"), |b| {
            b.iter(|| {
                let l = pool.lease(256, 64, Access::ReadWrite).unwrap();
                l.write(0, black_box(&payload)).unwrap();
                black_box(l.iova())
            });
        });
    }
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
}

criterion_group! { name = benches; config = config(); targets = leases }
criterion_main!(benches);

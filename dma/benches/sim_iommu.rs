//! Device-side accesses through the simulated IOMMU, with 1024 live mappings (so translation
//! walks a realistic tree): the simulator moves every WQE, CQE and MAD through these.

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use dma::{Access, DmaMapper, DmaMemory, PagePolicy, SimIommu};

const PAGE: usize = 4096;
const MAPPINGS: usize = 1024;

fn device_accesses(c: &mut Criterion) {
    let iommu = SimIommu::new();
    let mem = DmaMemory::with_policy(MAPPINGS * PAGE, PagePolicy::BaseOnly).unwrap();
    for i in 0..MAPPINGS {
        // SAFETY: `mem` outlives the IOMMU's use of it (unmapped at the end).
        unsafe {
            iommu
                .map(
                    mem.as_ptr().wrapping_add(i * PAGE),
                    PAGE,
                    0x10_0000 + (i * PAGE) as u64,
                    Access::ReadWrite,
                )
                .unwrap();
        }
    }
    let base = 0x10_0000u64 + (MAPPINGS as u64 / 2) * PAGE as u64;
    let mut wqe = [0u8; 64];
    c.bench_function("sim_iommu/read64", |b| {
        b.iter(|| iommu.read(black_box(base + 128), &mut wqe).unwrap());
    });
    c.bench_function("sim_iommu/write64", |b| {
        b.iter(|| iommu.write(black_box(base + 128), black_box(&wqe)).unwrap());
    });
    let mad = [0u8; 256];
    c.bench_function("sim_iommu/write256", |b| {
        b.iter(|| iommu.write(black_box(base + 256), black_box(&mad)).unwrap());
    });
    c.bench_function("sim_iommu/read_u32_be", |b| {
        b.iter(|| black_box(iommu.read_u32_be(black_box(base + 8)).unwrap()));
    });
    for i in 0..MAPPINGS {
        iommu.unmap(0x10_0000 + (i * PAGE) as u64, PAGE).unwrap();
    }
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
}

criterion_group! { name = benches; config = config(); targets = device_accesses }
criterion_main!(benches);

//! Loading large topologies: parsing the text of generated fat trees (the 2,144-node benchmark
//! fabric and a 102,976-node one), and generating + writing them. The goal for 100,000 nodes is
//! a load under 10 s; peak memory is measured by `examples/fabric_load.rs`.

use std::hint::black_box;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use sim::fabric::{Fabric, generator};

const FABRICS: [(&str, &str); 2] = [
    ("2144-nodes", "fat-tree:leaves=64,hosts=32,spines=32"),
    (
        "102976-nodes",
        "fat-tree3:pods=96,leaves=32,hosts=32,spines=16,cores=64",
    ),
];

fn fabric_load(c: &mut Criterion) {
    let mut g = c.benchmark_group("fabric_load");
    g.sample_size(10).measurement_time(Duration::from_secs(40));
    for (name, spec) in FABRICS {
        let mut text = Vec::new();
        generator::generate_text(spec, &mut text).expect("spec is valid");
        let text = String::from_utf8(text).expect("UTF-8");
        g.throughput(Throughput::Bytes(text.len() as u64));
        g.bench_function(BenchmarkId::new("parse", name), |b| {
            b.iter(|| Fabric::parse_str(name, black_box(&text)).expect("parses"));
        });
        g.bench_function(BenchmarkId::new("generate_and_write", name), |b| {
            b.iter(|| {
                let mut out = Vec::with_capacity(text.len());
                generator::generate_text(black_box(spec), &mut out).expect("spec is valid");
                out
            });
        });
    }
    g.finish();
}

criterion_group!(benches, fabric_load);
criterion_main!(benches);

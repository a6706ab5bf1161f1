//! One mlx5 bring-up and teardown on the simulated ConnectX (the whole §5.3 sequence, the
//! EQs, the special QPs of one port, then every page reclaimed), on the virtual and the real
//! clock, with pooled and strict leases; and one MAD round trip through QP1 loopback.

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use driver::verbs::{Hca, HcaOptions, HcaPort, SpecialQp};
use hca_tests::mlx5::{MAD, RECV_BUF, SimHca, lease, mad, poll_n, port, recv_wr, send_wr, to_self};
use sim::ClockMode;

fn bringup(c: &mut Criterion) {
    let mut g = c.benchmark_group("mlx5_bringup_teardown");
    g.sample_size(30);
    for (clock, cname) in [(ClockMode::Virtual, "virtual"), (ClockMode::Real, "real")] {
        for (mode, mname) in [
            (dma::LeaseMode::Pooled, "pooled"),
            (dma::LeaseMode::Strict, "strict"),
        ] {
            let sim = SimHca::with_clock(clock);
            let options = HcaOptions {
                lease_mode: mode,
                ..HcaOptions::default()
            };
            g.bench_function(format!("{cname}_clock/{mname}"), |b| {
                b.iter(|| {
                    let hca = sim.open(options).unwrap();
                    hca.close().unwrap();
                    black_box(hca);
                });
            });
        }
    }
    g.finish();
}

fn mad_round_trip(c: &mut Criterion) {
    let sim = SimHca::new();
    let hca = sim.open(HcaOptions::default()).unwrap();
    let p = port(&hca, 1);
    let lid = p.attrs().unwrap().lid;
    let s = lease(p.as_ref(), MAD);
    s.write(0, &mad(0x09, 1, 1)).unwrap();
    let r = lease(p.as_ref(), RECV_BUF);
    c.bench_function("mlx5_qp1_loopback_round_trip/virtual_clock", |b| {
        b.iter(|| {
            p.post_recv(SpecialQp::Gsi, &recv_wr(1, &r)).unwrap();
            p.post_send(
                SpecialQp::Gsi,
                &send_wr(2, &s, to_self(lid, SpecialQp::Gsi)),
            )
            .unwrap();
            black_box(poll_n(p.as_ref(), 2, Duration::from_secs(1)));
        });
    });
    drop((s, r));
    hca.close().unwrap();
}

criterion_group!(benches, bringup, mad_round_trip);
criterion_main!(benches);

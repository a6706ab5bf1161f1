//! The send path of the simulated ConnectX, end to end as a MAD round trip costs it: a QP1
//! receive posted, a UD send written, the BlueFlame doorbell, the WQE read and turned into a
//! packet, the network's loopback to the own LID, the receive written, and both CQEs polled.
//! One iteration is one packet out and in. The MAD layer's goal is millions of round trips
//! per second on the simulator, so this path must stay cheap.

#[path = "../tests/mlx5rig/mod.rs"]
#[allow(unused_imports)]
mod mlx5rig;

use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use firmware_cmds::mlx5::eqe::EventType;
use firmware_cmds::mlx5::qpc::QpServiceType;
use mlx5rig::{QP1_QKEY, Rig, SendSpec};
use sim::ClockMode;
use sim::mlx5::Mlx5;

fn loopback(c: &mut Criterion) {
    let (dev, _net) = Mlx5::standalone_default(ClockMode::Virtual).expect("standalone device");
    let mut rig = Rig::on(dev);
    rig.up(false);
    let eq = rig.create_eq(&[EventType::COMP.0], 6, 0);
    let mut scq = rig.create_cq(eq.eqn, 10);
    let mut rcq = rig.create_cq(eq.eqn, 10);
    let mut qp = rig.create_qp(QpServiceType::QP1, &scq, &rcq, 8, 8);
    rig.qp_to_rts(&qp, QP1_QKEY);
    let rbuf = rig.alloc(512, 64);
    let mad = rig.alloc(256, 64);
    rig.mem.write(mad, &[0x5a; 256]);
    let spec = SendSpec {
        dlid: 1,
        ..SendSpec::mad(mad)
    };

    let mut g = c.benchmark_group("mlx5");
    g.throughput(Throughput::Elements(1));
    g.measurement_time(Duration::from_secs(10));
    g.bench_function("ud_loopback_round_trip", |b| {
        b.iter(|| {
            qp.post_recv(&rig, rbuf, 512);
            let ctrl = qp.write_send(&rig, &spec);
            rig.ring_send(&ctrl);
            rig.settle();
            let s = scq.poll(&rig).expect("send CQE");
            let r = rcq.poll(&rig).expect("receive CQE");
            (s, r)
        });
    });
    g.finish();
}

criterion_group!(benches, loopback);
criterion_main!(benches);

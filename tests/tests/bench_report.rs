//! `hca bench`'s report through the full stack: what its throughput counts when a send is
//! lost, and what it says of latency when no round trip completed.

use std::time::Duration;

use hca_tests::discover_rig::{DiscoverRig, example};
use hca_tools::bench::{self, Config, Stop};
use sim::ClockMode;

/// Our HCA on Hca1 of `net.2sw2path4hca`, on the real clock (the bench measures wall time).
fn rig() -> DiscoverRig {
    DiscoverRig::with(
        example("net.2sw2path4hca"),
        "Hca1",
        ClockMode::Real,
        dma::LeaseMode::Strict,
    )
}

#[test]
fn throughput_does_not_count_the_wait_for_a_lost_last_send() {
    // Twenty NodeInfo Gets of the switch next to Hca1, one at a time; the twentieth never
    // leaves the port, so the bench then waits out its timeout for nothing.
    const SENDS: u32 = 20;
    const TIMEOUT_MS: u32 = 300;
    let rig = rig();
    let out = rig.net.port("Hca1", 1).unwrap();
    rig.net.drop_nth_leaving(out, SENDS);
    let r = bench::run(
        &rig.hca.port,
        &Config {
            window: 1,
            path: vec![1],
            stop: Stop::Count(u64::from(SENDS)),
            timeout_ms: TIMEOUT_MS,
            retries: 0,
            ..Config::default()
        },
    )
    .expect("bench");
    rig.finish();
    assert_eq!((r.round_trips, r.timeouts), (u64::from(SENDS) - 1, 1));
    let timeout = Duration::from_millis(u64::from(TIMEOUT_MS));
    // The last send went out after the last response and waited its whole timeout: the
    // round trips took at most the wall time less that timeout.
    assert!(r.wall > timeout, "{r:?}");
    let at_least = hca_tools::per_second(r.round_trips, r.wall.saturating_sub(timeout));
    assert!(
        r.throughput() >= at_least,
        "{} round trips/s, but {} in the time before the lost send: {r:?}",
        r.throughput(),
        at_least
    );
    // It is over the time from the first send to the last response, which the wait for the
    // lost send does not enter.
    assert!(r.round_trip_span + timeout <= r.wall, "{r:?}");
    assert!(
        (r.throughput() - hca_tools::per_second(r.round_trips, r.round_trip_span)).abs() < 1e-9
    );
}

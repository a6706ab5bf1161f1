//! The simulated ConnectX with its send doorbells on a thread of its own
//! (`Mlx5::run_on_own_thread`, on the real clock), as a real HCA works beside the host:
//! directed-route NodeInfo Gets to a switch's SMA go out and come back through the device
//! thread, each send completes once with its answer; once the handle is dropped the thread
//! is gone and doorbells run on the ringing thread again; nothing is left at the close. A
//! fatal error or a removal while the thread works (doorbells queued for it, sends on the
//! wire and waiting for answers) completes every send once. A device on virtual time, or one
//! that has a thread already, is refused with a typed error.

use std::sync::Arc;
use std::time::Duration;

use driver::verbs::{HcaOptions, SpecialQp, UdDest, WcStatus};
use hca_tests::mad_fabric::{SWITCH1, attach_with, dr_smp, example};
use hca_tests::mad_rig::{MadRig, Seen, Tracker};
use mad::wire::{attr_id, method};
use mad::{Agent, AgentSpec, SendId, SendRequest};
use sim::fabric::Fabric;
use sim::mlx5::{DeviceThreadError, Mlx5};
use sim::net::Network;
use sim::{ClockMode, Scheduler};

/// Hca1 of ibsim's `net.2sw2path4hca` on the real clock, the final check watching
/// `longest_timeout`, and a responses-only agent on its SMI (the network is returned to be
/// kept while the rig is used).
fn hca1_on_the_real_clock(longest_timeout: Duration) -> (Network, MadRig, Agent) {
    let fabric = Fabric::parse_file(example("net.2sw2path4hca")).expect("topology");
    let net = Network::new(fabric, Arc::new(Scheduler::new(ClockMode::Real)));
    let rig = attach_with(&net, "Hca1", HcaOptions::default());
    rig.set_longest_timeout(longest_timeout);
    let a = rig.agent(AgentSpec::responses_only(SpecialQp::Smi));
    (net, rig, a)
}

/// A directed-route NodeInfo Get to Switch1 with TID `tid` (5 s to its answer).
fn node_info_get(a: &Agent, tid: u32) -> SendId {
    let m = dr_smp(
        method::GET,
        SWITCH1,
        attr_id::sm::NODE_INFO,
        0,
        [0; 64],
        u64::from(tid),
    );
    a.send(SendRequest::new(m, UdDest::DIRECTED_ROUTE).timeout_ms(5000))
        .expect("send")
}

/// `n` NodeInfo Gets to Switch1 with up to `window` in flight; every one must be answered.
fn round_trips(rig: &MadRig, a: &Agent, t: &mut Tracker, first: u32, n: u32, window: usize) {
    let mut ids: Vec<SendId> = Vec::new();
    for tid in first..first + n {
        while ids.iter().filter(|id| !t.done.contains_key(id)).count() >= window {
            assert!(
                rig.pump_until(None, &[a], t, Duration::from_secs(10), |t| ids
                    .iter()
                    .filter(|id| !t.done.contains_key(id))
                    .count()
                    < window),
                "a window's send completes"
            );
        }
        ids.push(node_info_get(a, tid));
    }
    assert!(
        rig.pump_until(None, &[a], t, Duration::from_secs(10), |t| t.all_done(&ids)),
        "every send completes"
    );
    for id in &ids {
        assert_eq!(t.status(*id), Some(WcStatus::Success), "{id}: answered");
    }
}

#[test]
fn round_trips_run_through_the_device_thread_and_on_the_ringer_once_it_is_gone() {
    // On the real clock: the final check drives the port twice the sends' 5 s timeout.
    let (_net, rig, a) = hca1_on_the_real_clock(Duration::from_secs(5));
    let mut t = Tracker::default();

    let device = rig.sim.model.run_on_own_thread().expect("device thread");
    assert!(matches!(
        rig.sim.model.run_on_own_thread(),
        Err(DeviceThreadError::AlreadyRunning)
    ));
    let sent = rig.sim.model.counters().packets_sent;
    round_trips(&rig, &a, &mut t, 0, 300, 16);
    assert!(
        device.doorbells_run() > 0,
        "the device thread ran the doorbells"
    );
    let on_thread = device.doorbells_run();
    assert_eq!(rig.sim.model.counters().packets_sent, sent + 300);
    assert_eq!(t.recvs.len(), 300, "each answer delivered once");

    drop(device);
    round_trips(&rig, &a, &mut t, 1000, 32, 8);
    assert_eq!(t.done.len(), 332, "each send completed once");
    assert_eq!(rig.sim.model.counters().packets_sent, sent + 332);

    // A new thread can be had once the old one is gone.
    let again = rig
        .sim
        .model
        .run_on_own_thread()
        .expect("a second device thread");
    round_trips(&rig, &a, &mut t, 2000, 16, 16);
    assert!(again.doorbells_run() > 0);
    assert!(on_thread > 0);
    drop(again);

    rig.deregister(a, &mut t);
    assert_eq!(t.done.len(), 348);
    rig.finish();
}

#[test]
fn a_device_on_virtual_time_gets_no_thread() {
    let dev = Mlx5::with_clock(ClockMode::Virtual);
    let err = dev.run_on_own_thread().unwrap_err();
    assert!(matches!(err, DeviceThreadError::VirtualClock), "{err}");
    assert!(err.to_string().contains("ClockMode::Real"), "{err}");
}

/// How the device dies under the device thread.
#[derive(Clone, Copy, Debug)]
enum Death {
    Fatal,
    Removed,
}

/// With sends on the wire, doorbells queued for the device thread and sends waiting for
/// their answers, the device dies: every send completes once (answered, or WR_FLUSH_ERR with
/// vendor_err 5), the agent is told once, nothing hangs, and the close leaves nothing.
fn death_under_the_device_thread(death: Death) {
    // What the final check watches for after the deregistration: nothing can come once
    // the device is dead (no timer decides anything then), so a short look will do.
    let (_net, rig, a) = hca1_on_the_real_clock(Duration::from_secs(1));
    let mut t = Tracker::default();
    let device = rig.sim.model.run_on_own_thread().expect("device thread");
    // A first window answered, so that the device thread is known to be at work.
    round_trips(&rig, &a, &mut t, 0, 64, 16);
    let mut ids = Vec::new();
    for tid in 100..356u32 {
        ids.push(node_info_get(&a, tid));
    }
    match death {
        Death::Fatal => rig.sim.model.faults().catastrophic(
            firmware_cmds::mlx5::health::HealthSyndrome::FW_INTERNAL_ERR,
            true,
        ),
        Death::Removed => rig.sim.model.faults().remove(),
    }
    assert!(
        rig.pump_until(None, &[&a], &mut t, Duration::from_secs(10), |t| t
            .all_done(&ids)),
        "{death:?}: every send completes"
    );
    // The agent is told of the death before any of its sends completes flushed: the MAD
    // layer takes the death as soon as the driver's software flushes show it.
    let told = t
        .log
        .iter()
        .position(|(seen, _)| *seen == Seen::Fatal)
        .unwrap_or_else(|| panic!("{death:?}: the agent is told"));
    for (at, (seen, id)) in t.log.iter().enumerate() {
        if let (Seen::Send, Some(id)) = (seen, id) {
            if t.done[id].status == WcStatus::WrFlushErr {
                assert!(
                    at > told,
                    "{death:?}: {id} flushed before the death was told"
                );
            }
        }
    }
    let mut flushed = 0;
    for id in &ids {
        let c = &t.done[id];
        match (c.status, c.vendor_err) {
            (WcStatus::Success, _) => {}
            (WcStatus::WrFlushErr, 5) => flushed += 1,
            other => panic!("{death:?}: {id}: {other:?}"),
        }
    }
    assert!(
        flushed > 0,
        "{death:?}: some sends were still out at the death"
    );
    assert_eq!(t.fatal, 1, "{death:?}: the agent is told once");
    drop(device);
    rig.deregister(a, &mut t);
    assert_eq!(t.done.len(), 64 + ids.len(), "each send completed once");
    rig.finish_dead();
}

#[test]
fn a_fatal_error_under_the_device_thread_completes_every_send_once() {
    death_under_the_device_thread(Death::Fatal);
}

#[test]
fn a_removal_under_the_device_thread_completes_every_send_once() {
    death_under_the_device_thread(Death::Removed);
}

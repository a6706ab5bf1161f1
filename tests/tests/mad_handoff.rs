//! Threads that each wait for their own MADs on one port (the progress loop run by whoever
//! waits, no progress thread): when the thread holding the progress token leaves, a thread
//! still waiting must take the loop over at once, not after its `max_sleep`. Real clock,
//! responses 40 µs away (a delayed link), so that a holder often leaves while another
//! thread's response is still on the wire.

use std::sync::Arc;
use std::time::{Duration, Instant};

use driver::verbs::{HcaOptions, SpecialQp, UdDest, WcStatus};
use hca_tests::mad_fabric::{SWITCH1, attach_configured, dr_smp, example};
use mad::wire::{attr_id, method};
use mad::{AgentSpec, Event, PortConfig, SendRequest};
use sim::fabric::Fabric;
use sim::net::{Fault, Network};
use sim::{ClockMode, Scheduler};

/// Longer than any scheduling delay on a loaded 2-core machine, far shorter than the
/// `max_sleep` below: a round trip slower than this waited for a wake-up nobody sent.
const STALL: Duration = Duration::from_secs(1);

#[test]
fn a_thread_waiting_for_its_answer_takes_the_loop_over_when_the_holder_leaves() {
    let fabric = Fabric::parse_file(example("net.2sw2path4hca")).expect("topology");
    let net = Network::new(fabric, Arc::new(Scheduler::new(ClockMode::Real)));
    let config = PortConfig {
        max_sleep: Duration::from_secs(30),
        ..PortConfig::default()
    };
    let rig = attach_configured(&net, "Hca1", HcaOptions::default(), config);
    let link = net.port("Hca1", 1).expect("Hca1 port 1");
    net.set_link_fault(link, Fault::delay(Duration::from_micros(20)));
    let rig = &rig;
    let slowest: Vec<Duration> = std::thread::scope(|s| {
        let threads: Vec<_> = (0..2u32)
            .map(|k| {
                s.spawn(move || {
                    let a = rig.agent(AgentSpec::responses_only(SpecialQp::Smi));
                    let mut slowest = Duration::ZERO;
                    for t in 0..1000u32 {
                        let mut m =
                            dr_smp(method::GET, SWITCH1, attr_id::sm::NODE_INFO, 0, [0; 64], 0);
                        m[12..16].copy_from_slice(&(k << 20 | t).to_be_bytes());
                        let start = Instant::now();
                        a.send(SendRequest::new(m, UdDest::DIRECTED_ROUTE).timeout_ms(60_000))
                            .expect("send");
                        let (mut answered, mut completed) = (false, false);
                        while !(answered && completed) {
                            let deadline = rig.port.deadline_after(Duration::from_secs(120));
                            match a
                                .next_event(deadline)
                                .expect("an event before the deadline")
                            {
                                Event::Recv(_) => answered = true,
                                Event::Send(c) => {
                                    assert_eq!(c.status, WcStatus::Success, "{c:?}");
                                    completed = true;
                                }
                                e @ Event::DeviceFatal { .. } => panic!("unexpected {e:?}"),
                            }
                            assert!(
                                start.elapsed() < STALL,
                                "thread {k}, round trip {t}: {:?} (the loop was left to nobody)",
                                start.elapsed()
                            );
                        }
                        slowest = slowest.max(start.elapsed());
                    }
                    a.deregister();
                    slowest
                })
            })
            .collect();
        threads
            .into_iter()
            .map(|h| h.join().expect("thread"))
            .collect()
    });
    eprintln!("slowest round trip per thread: {slowest:?}");
    net.set_link_fault(link, Fault::NONE);
    rig.assert_clean();
}

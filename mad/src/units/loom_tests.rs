//! Model checks of the request units and their waiters, on the real [`RequestUnits`] (its
//! atomics and lock are loom's in this build): agents whose new sends look for a unit while
//! units are given back, the way the port's backlogs do. Each agent is a count of new sends
//! under a mutex (its flow-control lock); its drain and the wake mirror
//! `PortShared::fc_drain_locked` (take units while the agent may, leave the waiters when no
//! send of its waits any more, serve a hand-on after the agent's lock) and
//! `PortShared::wake_unit_waiters` (the waiters from the front through the real
//! [`RequestUnits::serve`], then every other agent). After every execution: no unit is free
//! while an agent waits for one (the wait would never end: nothing else gives a unit back),
//! every unit is accounted for, and units went to the agents in the order they began waiting.
//! Negative controls take the front's second look, or the `SeqCst` order, away: loom must
//! find the lost wake-up (it does from 2 preemptions on). Up to [`PREEMPTIONS`] preemptions
//! each (at 6: (a) 293,321 executions and (c) 152,457, 20 s in all in a release build). Run
//! with
//! `RUSTFLAGS="--cfg loom" cargo test -p mad --release --lib loom -- --nocapture`.

use std::sync::atomic::AtomicUsize as StdAtomicUsize;

use loom::sync::Arc;
use loom::thread;

use super::*;

/// The preemptions per execution loom explores (unless `LOOM_MAX_PREEMPTIONS` says
/// otherwise): every interleaving with at most this many switches away from a thread that
/// could go on.
const PREEMPTIONS: usize = 4;

/// Loom's settings from the environment, with [`PREEMPTIONS`] if it sets none.
fn builder() -> loom::model::Builder {
    let mut b = loom::model::Builder::new();
    if b.preemption_bound.is_none() {
        b.preemption_bound = Some(PREEMPTIONS);
    }
    b
}

/// Run `f` under the interleavings of [`builder`] and print how many executions loom
/// explored.
fn check(name: &'static str, f: impl Fn() + Sync + Send + 'static) {
    let runs = std::sync::Arc::new(StdAtomicUsize::new(0));
    let counted = std::sync::Arc::clone(&runs);
    builder().check(move || {
        counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        f();
    });
    eprintln!(
        "{name}: loom explored {} executions",
        runs.load(std::sync::atomic::Ordering::Relaxed)
    );
}

/// One agent: its new sends waiting for a unit, under its lock (the flow-control lock).
struct Agent {
    id: u32,
    waiting_sends: Mutex<u32>,
}

/// A port in miniature: the ring's units, its agents, and the order units went to them.
struct Port {
    units: RequestUnits,
    agents: Vec<Agent>,
    /// Written under an agent's lock with no step of the model in between (a plain mutex: no
    /// point for loom to switch threads at, which only multiplies the executions).
    taken_by: std::sync::Mutex<Vec<u32>>,
}

impl Port {
    fn new(units: RequestUnits, sends: &[u32]) -> Arc<Port> {
        Arc::new(Port {
            units,
            agents: sends
                .iter()
                .enumerate()
                .map(|(i, &n)| Agent {
                    id: i as u32,
                    waiting_sends: Mutex::new(n),
                })
                .collect(),
            taken_by: std::sync::Mutex::new(Vec::new()),
        })
    }

    /// `fc_drain_locked` then the drain's end: returns whether the agent handed on.
    fn drain_quiet(&self, id: u32) -> bool {
        let agent = &self.agents[id as usize];
        let mut sends = agent.waiting_sends.lock().unwrap();
        let mut handed_on = false;
        let mut no_unit = false;
        while *sends > 0 {
            match self.units.reserve(agent.id) {
                Reserve::Taken { handed_on: h } => {
                    handed_on |= h;
                    *sends -= 1;
                    self.taken_by.lock().unwrap().push(agent.id);
                }
                Reserve::Waiting => {
                    no_unit = true;
                    break;
                }
            }
        }
        if !no_unit {
            handed_on |= self.units.leave(agent.id);
        }
        handed_on
    }

    /// `fc_drain`: a hand-on is served after the agent's lock.
    fn drain(&self, id: u32) {
        if self.drain_quiet(id) {
            self.wake();
        }
    }

    /// `wake_unit_waiters`.
    fn wake(&self) {
        while self.units.take_wanted() {
            let mut served = Vec::new();
            self.units.serve(|id| {
                self.drain_quiet(id);
                served.push(id);
            });
            let mut handed_on = false;
            for a in &self.agents {
                if !served.contains(&a.id) {
                    handed_on |= self.drain_quiet(a.id);
                }
            }
            if !handed_on {
                break;
            }
        }
    }

    /// A request ends: its unit comes back, and the backlogs move on.
    fn give_back(&self) {
        self.units.give_back();
        self.wake();
    }

    /// The agent's waiting sends are canceled (`PortShared::cancel`): it leaves the waiters.
    fn cancel_all(&self, id: u32) {
        let handed_on = {
            let mut sends = self.agents[id as usize].waiting_sends.lock().unwrap();
            *sends = 0;
            self.units.leave(id)
        };
        if handed_on {
            self.wake();
        }
    }

    /// No unit is free while an agent waits for one; `held` units are taken.
    fn assert_settled(&self, held: u32) {
        let waiting: u32 = self
            .agents
            .iter()
            .map(|a| *a.waiting_sends.lock().unwrap())
            .sum();
        assert!(
            waiting == 0 || self.units.held() == self.units.limit,
            "a unit free while {waiting} sends wait for one (held {} of {})",
            self.units.held(),
            self.units.limit
        );
        assert_eq!(self.units.held(), held, "units taken");
        let w = self.units.waiters.lock().unwrap();
        assert_eq!(w.len(), self.units.waiting(), "the waiters' count");
        for a in &self.agents {
            let waits = *a.waiting_sends.lock().unwrap() > 0;
            assert_eq!(w.contains(&a.id), waits, "agent {} among the waiters", a.id);
        }
    }
}

/// Every unit held; the unit given back, and two agents beginning to wait for one, at once.
fn one_unit_back_while_two_agents_join(units: RequestUnits) {
    let port = Port::new(units, &[1, 1]);
    assert!(port.units.try_take());
    let joiners: Vec<_> = (0..2)
        .map(|id| {
            let port = Arc::clone(&port);
            thread::spawn(move || port.drain(id))
        })
        .collect();
    port.give_back();
    for j in joiners {
        j.join().unwrap();
    }
    port.assert_settled(1);
}

/// (a) One unit given back while two agents begin waiting: one of them takes it, the other
/// waits, and no unit is left free.
#[test]
fn loom_units_a_unit_given_back_while_agents_join_is_taken() {
    check("units (a)", || {
        one_unit_back_while_two_agents_join(RequestUnits::new(1));
    });
}

/// (b) Agent 0 begins waiting before agent 1 (one thread, in that order) while the only unit
/// comes back: agent 0 gets it, whenever it comes.
#[test]
fn loom_units_the_first_to_wait_gets_the_unit() {
    check("units (b)", || {
        let port = Port::new(RequestUnits::new(1), &[1, 1]);
        assert!(port.units.try_take());
        let joiner = {
            let port = Arc::clone(&port);
            thread::spawn(move || {
                port.drain(0);
                port.drain(1);
            })
        };
        port.give_back();
        joiner.join().unwrap();
        port.assert_settled(1);
        assert_eq!(*port.taken_by.lock().unwrap(), [0], "the first to wait");
    });
}

/// (c) Two agents wait (0 first) with two sends each; two units come back from two threads:
/// one goes to each, whatever the interleaving (an agent that took one goes behind the other).
#[test]
fn loom_units_units_back_together_go_one_to_each_in_turn() {
    check("units (c)", || {
        let port = Port::new(RequestUnits::new(2), &[2, 2]);
        assert!(port.units.try_take());
        assert!(port.units.try_take());
        port.drain(0);
        port.drain(1);
        let other = {
            let port = Arc::clone(&port);
            thread::spawn(move || port.give_back())
        };
        port.give_back();
        other.join().unwrap();
        port.assert_settled(2);
        assert_eq!(*port.taken_by.lock().unwrap(), [0, 1], "one each, in turn");
    });
}

/// (d) Two agents wait; the front's sends are canceled while the unit comes back: the one
/// behind it gets the unit (the hand-on, or the serve that finds the front gone).
#[test]
fn loom_units_the_front_leaving_while_a_unit_comes_back_hands_it_on() {
    check("units (d)", || {
        let port = Port::new(RequestUnits::new(1), &[1, 1]);
        assert!(port.units.try_take());
        port.drain(0);
        port.drain(1);
        let canceler = {
            let port = Arc::clone(&port);
            thread::spawn(move || port.cancel_all(0))
        };
        port.give_back();
        canceler.join().unwrap();
        port.assert_settled(1);
        let taken = port.taken_by.lock().unwrap().clone();
        assert!(
            taken == [1] || taken == [0],
            "the unit went to one agent: {taken:?}"
        );
    });
}

/// Negative control: without the front's second look after setting the wanted flag, a unit
/// given back between its first look and the flag is missed (the returner saw no flag).
#[test]
#[should_panic(expected = "a unit free while")]
fn loom_units_control_no_second_look() {
    builder().check(|| {
        one_unit_back_while_two_agents_join(RequestUnits::with_model(
            1,
            Model {
                second_look: false,
                seq_cst: true,
            },
        ));
    });
}

/// Negative control: without the `SeqCst` order between the flag and the units (loom's
/// stand-in for it taken away), the waiter's second look and the returner's look at the
/// flag can both miss.
#[test]
#[should_panic(expected = "a unit free while")]
fn loom_units_control_no_seq_cst_order() {
    builder().check(|| {
        one_unit_back_while_two_agents_join(RequestUnits::with_model(
            1,
            Model {
                second_look: true,
                seq_cst: false,
            },
        ));
    });
}

//! A ring's request units ([`crate::ring`]: the slots requests may hold) and the agents
//! waiting for one, served in the order they began waiting.
//!
//! A solicited send of an agent under flow control takes a unit with its credit, before it is
//! queued ([`crate::flow`]). When none is left it waits in its agent's backlog, and its agent
//! joins this ring's *waiters*, a FIFO of agent IDs, once. Whoever gives a unit back looks at
//! the wanted flag and, if it is set, moves the backlogs on (`PortShared::wake_unit_waiters`),
//! first the waiters from the front ([`RequestUnits::serve`]), then every other agent of the
//! ring. Only the agent at the front may take a unit while others wait
//! ([`RequestUnits::reserve`]); once it has one it leaves the front, and if it has another
//! send waiting it joins again at the back. So units freed one at a time go round the waiting
//! agents in the order they began waiting: an agent whose own request ended does not take
//! the unit it gave back ahead of one that waited longer, and an agent that came first is not
//! passed by one its `HashMap` slot happens to put before it.
//!
//! Why nobody waits here for a unit that is free (the wait must end by itself, see
//! [`crate::flow`]): the front takes a unit under the waiters' lock, and when it finds none it
//! sets the wanted flag, then tries once more (both `SeqCst`, as the unit's return and the
//! look at the flag after it): either it sees the unit, or the returner sees the flag and
//! serves the front. A serve goes on while the front changes, and stops only when the front
//! found no unit (and set the flag again). An agent that becomes the front otherwise (the one
//! before it took a unit outside a serve, or left: canceled, flushed, deregistered, or it
//! spent its credit on a retry) is handed on: the flag is set and the thread that made the
//! change serves it once its agent's lock is let go. An agent behind the front takes nothing
//! and needs no second look: the front is served first, and then it.
//!
//! What the order does not cover: a new send that finds nobody waiting takes a unit with one
//! load and no lock, so one racing an agent that is just joining may pass it (it would have
//! been a moment earlier); and the ring's requests that reserved no unit (a class without
//! flow control, an agent without a limit) take theirs as they leave the ring's queue
//! (`SendRing::try_reserve`), in that queue's order, not among the waiters. Agents are kept
//! by ID: registration skips an ID still among a ring's waiters (`Port::register`), and
//! deregistration leaves (its clean-up takes every send of the agent out of its backlog).
//!
//! Locks: the waiters' lock is a leaf, taken under an agent's flow-control lock (and under the
//! ring's queue lock that the backlog's drain may hold); nothing else is taken under it.

use std::collections::VecDeque;

use crate::sync::{self, AtomicBool, AtomicU32, AtomicUsize, Mutex, MutexGuard, Ordering};

/// What [`RequestUnits::reserve`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reserve {
    /// A unit was taken. `handed_on`: the agent was the front of the waiters and others wait
    /// behind it: the caller serves them ([`RequestUnits::take_wanted`] then
    /// [`RequestUnits::serve`], as `PortShared::wake_unit_waiters` does) once it let go of
    /// the agent's lock.
    Taken { handed_on: bool },
    /// No unit for it (none left, or other agents wait ahead of it): it is among the waiters.
    Waiting,
}

/// The request units of one ring, and the agents waiting for one.
pub(crate) struct RequestUnits {
    /// The most units (`SendRing::request_limit`).
    limit: u32,
    /// Units taken: by requests in slots, and by queued sends that reserved one with their
    /// flow-control credit. Never above `limit`.
    held: AtomicU32,
    /// An agent waits for a unit: whoever gives one back moves the backlogs on
    /// ([`RequestUnits::take_wanted`]).
    wanted: AtomicBool,
    /// Agents (by ID) whose backlog holds a new send that found no unit while it had a
    /// credit, in the order they began waiting; each at most once.
    waiters: Mutex<VecDeque<u32>>,
    /// `waiters.len()`, written under its lock, read without it (nobody waits: one load).
    waiting: AtomicUsize,
    /// Loom only: parts of the protocol the negative controls take away.
    #[cfg(loom)]
    model: Model,
}

/// Loom only: which parts of the protocol a model keeps (all of them but in the negative
/// controls, which show that the checks fail without the part they take away).
#[cfg(loom)]
#[derive(Clone, Copy)]
pub(crate) struct Model {
    /// The front's second look for a unit after setting the wanted flag.
    pub(crate) second_look: bool,
    /// Stand in, with `fence(SeqCst)`, for the total order of sequentially consistent accesses
    /// that loom does not model (it takes `SeqCst` loads and stores as acquire/release).
    pub(crate) seq_cst: bool,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl RequestUnits {
    pub(crate) fn new(limit: u32) -> RequestUnits {
        RequestUnits {
            limit,
            held: AtomicU32::new(0),
            wanted: AtomicBool::new(false),
            waiters: Mutex::new(VecDeque::new()),
            waiting: AtomicUsize::new(0),
            #[cfg(loom)]
            model: Model {
                second_look: true,
                seq_cst: true,
            },
        }
    }

    /// Loom only: the protocol with some of its parts taken away (negative controls).
    #[cfg(all(loom, test))]
    pub(crate) fn with_model(limit: u32, model: Model) -> RequestUnits {
        RequestUnits {
            model,
            ..RequestUnits::new(limit)
        }
    }

    /// [`sync::seq_cst_order`], which a negative control takes away.
    #[inline]
    #[cfg_attr(
        not(loom),
        allow(clippy::unused_self, reason = "the loom build reads the model")
    )]
    fn seq_cst_order(&self) {
        #[cfg(loom)]
        if !self.model.seq_cst {
            return;
        }
        sync::seq_cst_order();
    }

    /// Whether the front looks for a unit again after setting the wanted flag (always, but in
    /// a negative control).
    #[inline]
    #[cfg_attr(
        not(loom),
        allow(clippy::unused_self, reason = "the loom build reads the model")
    )]
    fn second_look(&self) -> bool {
        #[cfg(loom)]
        return self.model.second_look;
        #[cfg(not(loom))]
        true
    }

    /// Units taken.
    pub(crate) fn held(&self) -> u32 {
        self.held.load(Ordering::SeqCst)
    }

    /// Take a unit if one is left, whoever waits (the drainer's requests that reserved none,
    /// which wait in the ring's queue in their own order).
    #[inline]
    pub(crate) fn try_take(&self) -> bool {
        let limit = self.limit;
        self.held
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |h| {
                (h < limit).then_some(h + 1)
            })
            .is_ok()
    }

    /// Give a unit back. The caller then looks at [`RequestUnits::take_wanted`].
    pub(crate) fn give_back(&self) {
        let before = self.held.fetch_sub(1, Ordering::SeqCst);
        debug_assert!(before > 0, "more request units returned than taken");
    }

    /// A unit for a new send of agent `agent`, under that agent's flow-control lock: taken if
    /// one is left and no other agent waits ahead of it; otherwise the agent is among the
    /// waiters (at the back if it was not yet), and the wanted flag is set.
    pub(crate) fn reserve(&self, agent: u32) -> Reserve {
        if self.waiting.load(Ordering::SeqCst) == 0 && self.try_take() {
            // Nobody waits (the common case: one load, no lock). One that joins meanwhile
            // finds the unit taken, as it would a moment later.
            return Reserve::Taken { handed_on: false };
        }
        let mut w = lock(&self.waiters);
        let first = w.front().is_none_or(|&f| f == agent);
        if first && self.try_take() {
            return Reserve::Taken {
                handed_on: self.leave_front(&mut w, agent),
            };
        }
        if !w.contains(&agent) {
            w.push_back(agent);
            self.waiting.store(w.len(), Ordering::SeqCst);
        }
        // The flag, then a second look (see the module doc): only the front takes a unit, so
        // only the front needs it (one behind is served after the front).
        self.wanted.store(true, Ordering::SeqCst);
        self.seq_cst_order();
        if self.second_look() && w.front() == Some(&agent) && self.try_take() {
            return Reserve::Taken {
                handed_on: self.leave_front(&mut w, agent),
            };
        }
        Reserve::Waiting
    }

    /// `agent` took a unit: it leaves the front if it is there. Returns whether another agent
    /// is the front now (handed on: the flag is set for it).
    fn leave_front(&self, w: &mut VecDeque<u32>, agent: u32) -> bool {
        if w.front() != Some(&agent) {
            return false;
        }
        w.pop_front();
        self.waiting.store(w.len(), Ordering::SeqCst);
        self.hand_on(w)
    }

    fn hand_on(&self, w: &VecDeque<u32>) -> bool {
        if w.is_empty() {
            return false;
        }
        self.wanted.store(true, Ordering::SeqCst);
        true
    }

    /// `agent` no longer waits for a unit (no new send left in its backlog, or no credit to
    /// take one with, or it is deregistered). Returns whether it was the front and another
    /// agent is now (handed on: the caller serves it once it let go of the agent's lock, as
    /// for [`Reserve::Taken`]).
    pub(crate) fn leave(&self, agent: u32) -> bool {
        // An agent among the waiters put itself there under its own lock, which the caller
        // holds (or it is gone from the port): then the count it wrote is seen.
        if self.waiting.load(Ordering::SeqCst) == 0 {
            return false;
        }
        let mut w = lock(&self.waiters);
        let Some(at) = w.iter().position(|&a| a == agent) else {
            return false;
        };
        w.remove(at);
        self.waiting.store(w.len(), Ordering::SeqCst);
        at == 0 && self.hand_on(&w)
    }

    /// Whether an agent waits for a unit (cleared: the caller moves the backlogs on, and one
    /// that still finds none sets it again). Called after giving units back; one load when
    /// none waits.
    #[inline]
    pub(crate) fn take_wanted(&self) -> bool {
        self.seq_cst_order();
        self.wanted.load(Ordering::SeqCst) && self.wanted.swap(false, Ordering::SeqCst)
    }

    /// The agent at the front of the waiters.
    pub(crate) fn first(&self) -> Option<u32> {
        if self.waiting.load(Ordering::SeqCst) == 0 {
            return None;
        }
        lock(&self.waiters).front().copied()
    }

    /// How many agents wait.
    pub(crate) fn waiting(&self) -> usize {
        self.waiting.load(Ordering::SeqCst)
    }

    /// Whether `agent` waits.
    pub(crate) fn is_waiting(&self, agent: u32) -> bool {
        self.waiting() > 0 && lock(&self.waiters).contains(&agent)
    }

    /// The waiting agents, front first.
    #[cfg(test)]
    pub(crate) fn waiters(&self) -> Vec<u32> {
        lock(&self.waiters).iter().copied().collect()
    }

    /// Serve the waiters from the front: `drain(id)` moves agent `id`'s backlog on (its first
    /// new send takes a unit by [`RequestUnits::reserve`], as the front may), and must make
    /// it leave if it no longer waits ([`RequestUnits::leave`]). Goes on while the front
    /// changes (it took a unit, or left); stops when none waits, or when the front stays:
    /// it found no unit and set the wanted flag, so the next unit given back serves it.
    pub(crate) fn serve(&self, mut drain: impl FnMut(u32)) {
        while let Some(id) = self.first() {
            drain(id);
            if self.first() == Some(id) {
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn with_units_left_and_nobody_waiting_a_unit_is_taken() {
        let u = RequestUnits::new(2);
        assert_eq!(u.reserve(7), Reserve::Taken { handed_on: false });
        assert_eq!(u.reserve(8), Reserve::Taken { handed_on: false });
        assert_eq!(u.held(), 2);
        assert_eq!(u.waiting(), 0);
        assert!(!u.take_wanted(), "nobody waited");
    }

    #[test]
    fn waiters_join_once_in_order_and_only_the_front_takes_a_unit() {
        let u = RequestUnits::new(1);
        assert!(u.try_take());
        assert_eq!(u.reserve(5), Reserve::Waiting);
        assert_eq!(u.reserve(3), Reserve::Waiting);
        assert_eq!(u.reserve(5), Reserve::Waiting, "already waiting");
        assert_eq!(u.waiters(), [5, 3]);
        assert!(u.take_wanted());
        u.give_back();
        assert_eq!(u.reserve(3), Reserve::Waiting, "5 waits ahead of 3");
        assert_eq!(u.held(), 0, "3 did not take it");
        assert_eq!(
            u.reserve(5),
            Reserve::Taken { handed_on: true },
            "the front takes it, and 3 is the front now"
        );
        assert_eq!(u.waiters(), [3]);
        assert!(u.take_wanted(), "handed on");
        assert_eq!(u.reserve(5), Reserve::Waiting, "5 waits again, behind 3");
        assert_eq!(u.waiters(), [3, 5]);
        u.give_back();
        assert_eq!(u.reserve(3), Reserve::Taken { handed_on: true });
        assert_eq!(u.waiters(), [5]);
    }

    #[test]
    fn the_front_leaving_hands_on_and_one_behind_leaves_quietly() {
        let u = RequestUnits::new(1);
        assert!(u.try_take());
        for a in [1, 2, 3] {
            assert_eq!(u.reserve(a), Reserve::Waiting);
        }
        assert!(u.take_wanted());
        assert!(!u.leave(2), "not the front");
        assert!(!u.take_wanted());
        assert!(u.leave(1), "the front: 3 is handed on");
        assert!(u.take_wanted());
        assert!(!u.leave(9), "not waiting");
        assert!(!u.leave(3), "the last");
        assert_eq!(u.waiting(), 0);
        assert_eq!(u.first(), None);
    }

    #[test]
    fn serve_goes_round_while_units_last_and_stops_at_a_front_without_one() {
        let u = RequestUnits::new(3);
        for _ in 0..3 {
            assert!(u.try_take());
        }
        // Agents 1 and 2 each have two sends waiting.
        let mut left = [0u32, 2, 2];
        for a in [1, 2] {
            assert_eq!(u.reserve(a), Reserve::Waiting);
        }
        u.give_back();
        u.give_back();
        u.give_back();
        assert!(u.take_wanted());
        let mut order = Vec::new();
        u.serve(|id| {
            // A drain: its sends in order while units are given, as the backlog's drain.
            let i = id as usize;
            while left[i] > 0 {
                match u.reserve(id) {
                    Reserve::Taken { .. } => {
                        left[i] -= 1;
                        order.push(id);
                    }
                    Reserve::Waiting => break,
                }
            }
            if left[i] == 0 {
                u.leave(id);
            }
        });
        assert_eq!(order, [1, 2, 1], "one unit each in turn");
        assert_eq!(u.waiters(), [2], "2 waits at the front for its second");
        assert!(u.take_wanted(), "and said so");
    }
}

#[cfg(all(test, loom))]
mod loom_tests;

//! The simulator's scheduler: one clock and one queue of timed events shared by every device
//! and link of a simulated world, and the wake-up that tells a waiting driver that a device
//! wrote something.
//!
//! Devices do their work synchronously inside register writes whenever nothing delays it; a
//! delay (a CQE delay, a link delay) becomes an event here. A driver blocks only in
//! `DeviceBackend::wait`, which lands in [`Scheduler::run_until`]: it runs the events that are
//! due and returns as soon as a device signalled (see [`Scheduler::notify`]) or the deadline
//! passed. In virtual time the clock jumps straight to the next event or the deadline, so a
//! 30-second timeout in a test takes no time; virtual time is meant for one driving thread.

use std::cell::Cell;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::sync::Weak;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::Duration;

use crate::clock::{ClockMode, SimClock};
use crate::link::{PortChange, PortSink};
use crate::packet::Packet;

thread_local! {
    /// The scheduler (by address; 0 for none) whose wake-ups this thread holds back while it
    /// runs one device step, and whether the step owes its waiters a wake-up
    /// ([`Scheduler::hold_wakes`]).
    static HELD: Cell<(usize, bool)> = const { Cell::new((0, false)) };
}

/// Work to do at a point in simulated time.
pub type Event = Box<dyn FnOnce() + Send>;

/// What an entry does when it runs: a closure, or one of the network's two callbacks, kept
/// unboxed because a delivery is the event of every packet.
pub(crate) enum Task {
    /// Any work.
    Call(Event),
    /// The simulator's own work, which no device sees (a packet that a link delay held
    /// reaching the far end of the link, and the network carrying it on from there): run like
    /// any event, but no news to a waiter. [`Scheduler::run_until`] goes on waiting after it
    /// unless something else ran or a device signalled (a delivery it leads to is a
    /// [`Task::Deliver`] of its own).
    Internal(Event),
    /// `sink.deliver(port, packet)`, then wake the driver.
    Deliver {
        sink: Weak<dyn PortSink>,
        port: u8,
        packet: Packet,
    },
    /// `sink.port_changed(port, change)`, then wake the driver.
    Changed {
        sink: Weak<dyn PortSink>,
        port: u8,
        change: PortChange,
    },
}

struct Entry {
    at: Duration,
    seq: u64,
    task: Task,
}

impl Entry {
    fn key(&self) -> (Duration, u64) {
        (self.at, self.seq)
    }
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Entry {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.key().cmp(&other.key())
    }
}

/// The events not yet run, in the order (time, then scheduling order) they run in.
///
/// Most events are scheduled in time order (a packet delivered now, after the one delivered
/// a moment ago): those go to `fifo`, which stays sorted because each one enters behind a
/// not-later one, and costs no heap operation. An event earlier than the last one in `fifo`
/// goes to `heap`. The next event is the earlier of the two fronts, so the order is exactly
/// that of one heap.
#[derive(Default)]
struct Queue {
    heap: BinaryHeap<Reverse<Entry>>,
    fifo: VecDeque<Entry>,
    seq: u64,
}

impl Queue {
    /// The next event's time, and whether it is `fifo`'s front (else `heap`'s).
    fn front(&self) -> Option<(Duration, bool)> {
        let h = self.heap.peek().map(|Reverse(e)| e.key());
        let f = self.fifo.front().map(Entry::key);
        match (h, f) {
            (Some(h), Some(f)) => Some(if f < h { (f.0, true) } else { (h.0, false) }),
            (Some(h), None) => Some((h.0, false)),
            (None, f) => f.map(|f| (f.0, true)),
        }
    }

    /// When the next event falls due.
    fn next_at(&self) -> Option<Duration> {
        self.front().map(|(at, _)| at)
    }

    /// Adds an event.
    fn push(&mut self, at: Duration, task: Task) {
        self.seq += 1;
        let e = Entry {
            at,
            seq: self.seq,
            task,
        };
        if self.fifo.back().is_none_or(|b| b.at <= at) {
            self.fifo.push_back(e);
        } else {
            self.heap.push(Reverse(e));
        }
    }

    /// Takes the earliest event if it is due at `now`.
    fn pop_due(&mut self, now: Duration) -> Option<Task> {
        match self.front()? {
            (at, _) if at > now => None,
            (_, true) => self.fifo.pop_front().map(|e| e.task),
            (_, false) => self.heap.pop().map(|Reverse(e)| e.task),
        }
    }

    fn len(&self) -> usize {
        self.heap.len() + self.fifo.len()
    }
}

/// What a run of due events ran.
#[derive(Debug, Default, Clone, Copy)]
struct Ran {
    /// Every event.
    ran: usize,
    /// Those that are news to a waiter (all but [`Task::Internal`]).
    news: usize,
}

/// Clock plus timed events plus wake-ups.
///
/// Wake-ups: `signals` is bumped by every `notify` (a waiter returns when it changes) and
/// `waiting` counts threads blocked on the condition variable (real time only). Both are
/// atomics so that a notify, which devices make on every completion, takes no lock when
/// nobody waits. A waiter counts itself under the queue lock and then reads `signals`; a
/// notifier bumps `signals` and then reads `waiting` (all sequentially consistent), so either
/// the waiter sees the new signal or the notifier sees the waiter, and then wakes it under
/// the lock, which the waiter releases only inside its wait.
pub struct Scheduler {
    clock: SimClock,
    queue: Mutex<Queue>,
    wake: Condvar,
    signals: AtomicU64,
    /// `signals` when a real-time wait last returned: a signal after that (while the driver
    /// was busy polling, before it came back to wait) ends the next wait at once, as a
    /// pending interrupt would, instead of being lost.
    seen: AtomicU64,
    waiting: AtomicUsize,
    /// Wake-ups sent to threads blocked in `run_until` (see [`Scheduler::wakeups`]).
    wakeups: AtomicU64,
    /// Packets that fell due for a device whose sink had gone: see [`Scheduler::undelivered`].
    undelivered: AtomicU64,
}

impl std::fmt::Debug for Scheduler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scheduler")
            .field("clock", &self.clock)
            .field("pending", &self.pending())
            .finish_non_exhaustive()
    }
}

impl Scheduler {
    /// A scheduler with a clock in `mode`.
    pub fn new(mode: ClockMode) -> Self {
        Scheduler {
            clock: SimClock::new(mode),
            queue: Mutex::new(Queue::default()),
            wake: Condvar::new(),
            signals: AtomicU64::new(0),
            seen: AtomicU64::new(0),
            waiting: AtomicUsize::new(0),
            wakeups: AtomicU64::new(0),
            undelivered: AtomicU64::new(0),
        }
    }

    /// The clock.
    pub fn clock(&self) -> &SimClock {
        &self.clock
    }

    /// Current simulated time.
    pub fn now(&self) -> Duration {
        self.clock.now()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Run `event` at simulated time `at` (at once on the next `run_until` if `at` is past).
    pub fn schedule_at(&self, at: Duration, event: Event) {
        self.schedule_tasks([(at, Task::Call(event))]);
    }

    /// Schedules each task at its time, in order, under one lock.
    pub(crate) fn schedule_tasks(&self, tasks: impl IntoIterator<Item = (Duration, Task)>) {
        let mut q = self.lock();
        // A waiter sleeps until the earliest event at most: only a new earliest one changes
        // how long it may sleep, so the waiters are woken if some new event is earlier than
        // every event there was before. Read under the lock a waiter counts itself under: no
        // wake-up is lost. With nobody waiting (always, in virtual time) the times are not
        // compared at all.
        let waiting = self.waiting.load(Ordering::SeqCst) > 0;
        let before = if waiting { q.next_at() } else { None };
        let mut first: Option<Duration> = None;
        for (at, task) in tasks {
            if waiting {
                first = Some(first.map_or(at, |f| f.min(at)));
            }
            q.push(at, task);
        }
        let wake = first.is_some_and(|f| before.is_none_or(|b| f < b));
        drop(q);
        if wake && !self.owe_wake() {
            self.wake.notify_all();
            self.wakeups.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Run `event` after `delay` of simulated time (a delay past the end of the clock, which
    /// saturates at `Duration::MAX`, schedules it there: it runs only if the clock gets there).
    pub fn schedule_in(&self, delay: Duration, event: Event) {
        self.schedule_at(self.now().saturating_add(delay), event);
    }

    /// Events not yet run.
    pub fn pending(&self) -> usize {
        self.lock().len()
    }

    /// A device wrote something a driver may be waiting for (a completion, an event queue
    /// entry, an interrupt): wake every waiter.
    pub fn notify(&self) {
        self.signals.fetch_add(1, Ordering::SeqCst);
        // Nobody blocked now: a thread that blocks later sees the signal first (see the type's
        // documentation), so no wake-up is owed either (and the common case, in virtual time
        // always, stops at this load).
        if self.waiting.load(Ordering::SeqCst) > 0 && !self.owe_wake() {
            self.wake_waiters();
        }
    }

    /// Wakes every thread blocked in [`Scheduler::run_until`], if any.
    fn wake_waiters(&self) {
        if self.waiting.load(Ordering::SeqCst) > 0 {
            // Taken so that the wake cannot fall between a waiter's check and its wait.
            drop(self.lock());
            self.wake.notify_all();
            self.wakeups.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Wake-ups sent so far to threads blocked waiting for a device (each a system call, and
    /// a thread switch on the woken side): what [`Scheduler::hold_wakes`] saves.
    pub fn wakeups(&self) -> u64 {
        self.wakeups.load(Ordering::Relaxed)
    }

    /// Holds back this thread's wake-ups of this scheduler's waiters until the returned guard
    /// is dropped, and then sends at most one. A device step (a doorbell, a run of due events)
    /// writes a send's CQE, schedules its packet, delivers the answer and writes its CQE: each
    /// would wake the waiting driver on its own, and a wake-up of a thread on another CPU
    /// costs a system call here and several microseconds there, to find half the work done.
    /// Signals are still counted at once (a waiter that looks sees them); only the wake-up
    /// waits for the end of the step, which never blocks. Nested holds (of any scheduler)
    /// are part of the outermost one; another scheduler's wake-ups are not held.
    pub fn hold_wakes(&self) -> HeldWakes<'_> {
        let me = std::ptr::from_ref(self) as usize;
        let outer = HELD.with(|h| {
            if h.get().0 == 0 {
                h.set((me, false));
                true
            } else {
                false
            }
        });
        HeldWakes { sched: self, outer }
    }

    /// True (and the wake-up owed) when this thread holds this scheduler's wake-ups back.
    fn owe_wake(&self) -> bool {
        let me = std::ptr::from_ref(self) as usize;
        HELD.with(|h| {
            let held = h.get().0 == me;
            if held {
                h.set((me, true));
            }
            held
        })
    }

    /// Packets a network handed to this scheduler for a device port that, when they fell due,
    /// had no device any more (its sink dropped, e.g. the device detached before the scheduler
    /// ran the delivery), or that a fabric server could not write to its client because the
    /// client's connection had ended or failed: delivered to nobody. Counts the deliveries of every network that
    /// uses this scheduler; [`Network::drops`](crate::net::Network::drops) reports it as
    /// [`DropReason::DeviceGone`](crate::net::DropReason::DeviceGone).
    pub fn undelivered(&self) -> u64 {
        self.undelivered.load(Ordering::Relaxed)
    }

    /// Counts one packet delivered to nobody, lost outside the scheduler for the same reason:
    /// a fabric server's client had gone before the packet could be written to it.
    pub(crate) fn count_undelivered(&self) {
        self.undelivered.fetch_add(1, Ordering::Relaxed);
    }

    /// Pop the earliest event if it is due at `now`.
    fn pop_due(&self, now: Duration) -> Option<Task> {
        self.lock().pop_due(now)
    }

    /// Runs `task`, part of a run of events due at `now`; returns whether it is news to a
    /// waiter (anything but [`Task::Internal`]).
    fn run_task(&self, task: Task, now: Duration) -> bool {
        match task {
            Task::Call(f) => f(),
            Task::Internal(f) => {
                f();
                return false;
            }
            Task::Deliver { sink, port, packet } => {
                if let Some(s) = sink.upgrade() {
                    s.deliver_at(port, packet, now);
                } else {
                    // A loss like any other in the network: counted, for `drops()`.
                    self.undelivered.fetch_add(1, Ordering::Relaxed);
                }
                self.notify();
            }
            Task::Changed { sink, port, change } => {
                // A port change for a device that has gone is news to nobody: not a packet,
                // so not a drop, and not counted.
                if let Some(s) = sink.upgrade() {
                    s.port_changed(port, change);
                }
                self.notify();
            }
        }
        true
    }

    /// Run due events (never holding the queue lock while an event runs); returns how many.
    pub fn run_due(&self) -> usize {
        self.run_due_from(self.now(), true).ran
    }

    /// Runs the events due at `now`, a time the caller read from the clock (on the real clock
    /// a read is a system call's worth of work: a device passes the time of its doorbell).
    /// Events that fell due since are left for the next run.
    pub(crate) fn run_due_at(&self, now: Duration) -> usize {
        self.run_due_from(now, false).ran
    }

    /// Runs the events due at `now`; with `reread`, then reads the clock again (once after
    /// each run of events) and runs what fell due meanwhile.
    fn run_due_from(&self, mut now: Duration, reread: bool) -> Ran {
        let _held = self.hold_wakes();
        let mut ran = Ran::default();
        let mut fresh = true;
        loop {
            if let Some(task) = self.pop_due(now) {
                if self.run_task(task, now) {
                    ran.news += 1;
                }
                ran.ran += 1;
                fresh = false;
            } else if fresh || !reread {
                return ran;
            } else {
                now = self.now();
                fresh = true;
            }
        }
    }

    /// Let simulated time pass until `deadline`, running events as they fall due, and return
    /// early once any event ran (other than the simulator's internal ones, such as a packet
    /// moving on after a link delay) or any device signalled. Returns true if something
    /// happened.
    pub fn run_until(&self, deadline: Duration) -> bool {
        let start_signals = if self.clock.mode() == ClockMode::Real {
            self.seen.load(Ordering::SeqCst)
        } else {
            self.signals.load(Ordering::SeqCst)
        };
        // Every return marks the signals up to now as seen (a later one ends the next wait).
        let done = |happened: bool| {
            self.seen
                .store(self.signals.load(Ordering::SeqCst), Ordering::SeqCst);
            happened
        };
        loop {
            if self.run_due_from(self.now(), true).news > 0 {
                return done(true);
            }
            let q = self.lock();
            if self.signals.load(Ordering::SeqCst) != start_signals {
                return done(true);
            }
            let now = self.now();
            if now >= deadline {
                return done(false);
            }
            let next = q.next_at();
            let until = next.map_or(deadline, |t| t.min(deadline));
            match self.clock.mode() {
                ClockMode::Virtual => {
                    drop(q);
                    self.clock.pass_until(until);
                }
                ClockMode::Real => {
                    let wait = until.saturating_sub(now);
                    // Counted under the lock, before it is released by the wait, then the
                    // signals looked at again: a notifier either bumped them before this
                    // count (seen here) or sees the waiter and wakes it under the lock.
                    self.waiting.fetch_add(1, Ordering::SeqCst);
                    if self.signals.load(Ordering::SeqCst) != start_signals {
                        self.waiting.fetch_sub(1, Ordering::SeqCst);
                        return done(true);
                    }
                    let (guard, _) = self
                        .wake
                        .wait_timeout(q, wait)
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    self.waiting.fetch_sub(1, Ordering::SeqCst);
                    drop(guard);
                }
            }
        }
    }
}

/// The wake-ups a thread holds back ([`Scheduler::hold_wakes`]); dropping it sends the one
/// owed, if any.
#[must_use = "the wake-ups are held only while the guard lives"]
pub struct HeldWakes<'a> {
    sched: &'a Scheduler,
    outer: bool,
}

impl Drop for HeldWakes<'_> {
    fn drop(&mut self) {
        if self.outer {
            let (_, owed) = HELD.replace((0, false));
            if owed {
                self.sched.wake_waiters();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};

    /// A thread blocked in `run_until` on the real clock; returns when it is counted waiting.
    fn blocked_waiter(s: &Arc<Scheduler>) -> std::thread::JoinHandle<bool> {
        let w = Arc::clone(s);
        let h = std::thread::spawn(move || w.run_until(w.now() + Duration::from_secs(30)));
        while s.waiting.load(Ordering::SeqCst) == 0 {
            std::thread::yield_now();
        }
        h
    }

    #[test]
    fn a_notify_wakes_a_blocked_waiter_at_once() {
        let s = Arc::new(Scheduler::new(ClockMode::Real));
        let h = blocked_waiter(&s);
        s.notify();
        assert_eq!(s.wakeups(), 1);
        assert!(h.join().unwrap(), "the waiter saw the signal");
    }

    #[test]
    fn held_wakes_reach_a_blocked_waiter_once_when_the_step_ends() {
        let s = Arc::new(Scheduler::new(ClockMode::Real));
        let h = blocked_waiter(&s);
        {
            let _held = s.hold_wakes();
            // A doorbell's step: a CQE, a packet due now, another CQE, all signalled.
            s.notify();
            s.schedule_at(s.now(), Box::new(|| {}));
            {
                let _nested = s.hold_wakes();
                s.notify();
            }
            assert_eq!(s.wakeups(), 0, "nothing woken while the step runs");
        }
        assert_eq!(s.wakeups(), 1, "one wake-up when the step ends");
        assert!(h.join().unwrap());
        // Nothing owed is carried into the next step.
        drop(s.hold_wakes());
        assert_eq!(s.wakeups(), 1);
    }

    #[test]
    fn another_schedulers_wakes_are_not_held() {
        let a = Arc::new(Scheduler::new(ClockMode::Real));
        let b = Arc::new(Scheduler::new(ClockMode::Real));
        let h = blocked_waiter(&b);
        let _held = a.hold_wakes();
        b.notify();
        assert_eq!(b.wakeups(), 1);
        assert!(h.join().unwrap());
    }

    #[test]
    fn an_event_scheduled_past_the_end_of_time_does_not_panic_and_waits() {
        let s = Scheduler::new(ClockMode::Virtual);
        s.schedule_in(Duration::from_secs(1), Box::new(|| {}));
        assert!(s.run_until(Duration::from_secs(2)));
        s.schedule_in(Duration::MAX, Box::new(|| {}));
        assert_eq!(s.pending(), 1);
        assert!(!s.run_until(Duration::from_secs(3600)));
        assert_eq!(
            s.pending(),
            1,
            "not due within any deadline short of the end"
        );
    }

    #[test]
    fn virtual_time_jumps_to_events_in_order() {
        let s = Scheduler::new(ClockMode::Virtual);
        let log = Arc::new(Mutex::new(Vec::new()));
        for (t, tag) in [(30, 'c'), (10, 'a'), (20, 'b'), (20, 'B')] {
            let log = log.clone();
            s.schedule_at(
                Duration::from_millis(t),
                Box::new(move || log.lock().unwrap().push(tag)),
            );
        }
        assert!(s.run_until(Duration::from_secs(60)));
        assert_eq!(s.now(), Duration::from_millis(10));
        assert_eq!(*log.lock().unwrap(), vec!['a']);
        // Both events due at 20 ms run in one call, in scheduling order.
        assert!(s.run_until(Duration::from_secs(60)));
        assert_eq!(s.now(), Duration::from_millis(20));
        assert!(s.run_until(Duration::from_secs(60)));
        assert_eq!(*log.lock().unwrap(), vec!['a', 'b', 'B', 'c']);
        assert!(!s.run_until(Duration::from_secs(60)));
        assert_eq!(s.now(), Duration::from_secs(60));
    }

    #[test]
    fn events_scheduled_out_of_time_order_run_in_time_then_scheduling_order() {
        let s = Scheduler::new(ClockMode::Virtual);
        let log = Arc::new(Mutex::new(Vec::new()));
        // In time order as far as 'b', then earlier ones between ('c', 'e') and one equal to
        // the latest ('d'): the first run in order of scheduling, the others by time.
        for (t, tag) in [
            (10, 'a'),
            (20, 'b'),
            (15, 'c'),
            (20, 'd'),
            (15, 'e'),
            (0, 'f'),
        ] {
            let log = log.clone();
            s.schedule_at(
                Duration::from_millis(t),
                Box::new(move || log.lock().unwrap().push(tag)),
            );
        }
        assert_eq!(s.pending(), 6);
        while s.run_until(Duration::from_secs(1)) {}
        assert_eq!(*log.lock().unwrap(), vec!['f', 'a', 'c', 'e', 'b', 'd']);
        assert_eq!(s.pending(), 0);
    }

    /// Counts the packets it is given.
    struct Counting(AtomicU32);

    impl PortSink for Counting {
        fn deliver(&self, _: u8, _: Packet) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
        fn port_changed(&self, _: u8, _: PortChange) {}
    }

    fn packet() -> Packet {
        Packet {
            slid: 1,
            dlid: 2,
            sl: 0,
            vl15: false,
            src_qp: 1,
            dst_qp: 1,
            qkey: 0,
            pkey: 0xffff,
            grh: None,
            mad: Box::new([0; 256]),
        }
    }

    #[test]
    fn a_delivery_to_a_sink_that_has_gone_is_counted_undelivered() {
        let s = Scheduler::new(ClockMode::Virtual);
        let live = Arc::new(Counting(AtomicU32::new(0)));
        let live_sink: Arc<dyn PortSink> = live.clone();
        let gone_sink: Arc<dyn PortSink> = Arc::new(Counting(AtomicU32::new(0)));
        let deliver = |sink: &Arc<dyn PortSink>| Task::Deliver {
            sink: Arc::downgrade(sink),
            port: 1,
            packet: packet(),
        };
        let at = Duration::from_millis(1);
        s.schedule_tasks([(at, deliver(&live_sink)), (at, deliver(&gone_sink))]);
        drop(gone_sink);
        assert_eq!(s.undelivered(), 0, "not before it falls due");
        while s.run_until(Duration::from_secs(1)) {}
        assert_eq!(live.0.load(Ordering::SeqCst), 1);
        assert_eq!(s.undelivered(), 1);
    }

    #[test]
    fn an_internal_event_runs_but_does_not_end_a_wait() {
        let s = Scheduler::new(ClockMode::Virtual);
        let hits = Arc::new(AtomicU32::new(0));
        let h = hits.clone();
        let internal = Task::Internal(Box::new(move || {
            h.fetch_add(1, Ordering::SeqCst);
        }));
        s.schedule_tasks([(Duration::from_millis(5), internal)]);
        s.schedule_at(Duration::from_millis(7), Box::new(|| {}));
        // The internal event at 5 ms runs on the way; the wait ends with the event at 7 ms.
        assert!(s.run_until(Duration::from_secs(1)));
        assert_eq!(s.now(), Duration::from_millis(7));
        assert_eq!(hits.load(Ordering::SeqCst), 1);
        // Alone, it runs and the wait goes on to its deadline.
        let h = hits.clone();
        let internal = Task::Internal(Box::new(move || {
            h.fetch_add(1, Ordering::SeqCst);
        }));
        s.schedule_tasks([(Duration::from_millis(9), internal)]);
        assert!(!s.run_until(Duration::from_millis(20)));
        assert_eq!(s.now(), Duration::from_millis(20));
        assert_eq!(hits.load(Ordering::SeqCst), 2);
        // run_due counts it as an event.
        let internal = Task::Internal(Box::new(|| {}));
        s.schedule_tasks([(Duration::ZERO, internal)]);
        assert_eq!(s.run_due(), 1);
    }

    #[test]
    fn an_event_scheduled_by_an_event_runs_later() {
        let s = Arc::new(Scheduler::new(ClockMode::Virtual));
        let hits = Arc::new(AtomicU32::new(0));
        let (s2, h2) = (s.clone(), hits.clone());
        s.schedule_in(
            Duration::from_millis(5),
            Box::new(move || {
                h2.fetch_add(1, Ordering::SeqCst);
                let h3 = h2.clone();
                s2.schedule_in(
                    Duration::from_millis(5),
                    Box::new(move || {
                        h3.fetch_add(10, Ordering::SeqCst);
                    }),
                );
            }),
        );
        while s.run_until(Duration::from_secs(1)) {}
        assert_eq!(hits.load(Ordering::SeqCst), 11);
        assert_eq!(s.pending(), 0);
    }

    #[test]
    fn an_event_scheduled_from_another_thread_wakes_a_real_time_waiter() {
        let s = Arc::new(Scheduler::new(ClockMode::Real));
        let hits = Arc::new(AtomicU32::new(0));
        let (s2, h2) = (s.clone(), hits.clone());
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            s2.schedule_in(
                Duration::ZERO,
                Box::new(move || {
                    h2.fetch_add(1, Ordering::SeqCst);
                }),
            );
        });
        let start = s.now();
        while hits.load(Ordering::SeqCst) == 0 {
            assert!(s.now().saturating_sub(start) < Duration::from_secs(10));
            s.run_until(start + Duration::from_secs(30));
        }
        assert!(s.now().saturating_sub(start) < Duration::from_secs(10));
        t.join().unwrap();
    }

    #[test]
    fn notify_wakes_a_real_time_waiter_early() {
        let s = Arc::new(Scheduler::new(ClockMode::Real));
        let s2 = s.clone();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            s2.notify();
        });
        let start = s.now();
        assert!(s.run_until(start + Duration::from_secs(30)));
        assert!(s.now().saturating_sub(start) < Duration::from_secs(10));
        t.join().unwrap();
    }

    #[test]
    fn a_signal_between_two_real_time_waits_ends_the_next_wait_at_once() {
        let s = Scheduler::new(ClockMode::Real);
        // The device signalled while the driver was polling, before it came back to wait.
        s.notify();
        let start = s.now();
        assert!(
            s.run_until(start + Duration::from_secs(30)),
            "the signal is not lost"
        );
        assert!(s.now().saturating_sub(start) < Duration::from_secs(10));
        // Seen once: the next wait lasts until its deadline.
        let start = s.now();
        assert!(!s.run_until(start + Duration::from_millis(20)));
        assert!(s.now().saturating_sub(start) >= Duration::from_millis(20));
    }
}

//! Response timers: an indexed binary min-heap of deadlines, one entry per send slot at most.
//!
//! The kernel keeps a per-agent wait list sorted by deadline and walks it from the head; here a
//! slot's timer is armed, re-armed (modify) or disarmed in O(log n) by its key, and the expired
//! ones are popped in deadline order. Because each key has at most one entry, nothing stale
//! piles up when responses arrive long before their deadlines.

use std::time::Duration;

/// A deadline-ordered set of keys `0..capacity`.
#[derive(Debug)]
pub struct TimerHeap {
    /// (deadline in nanoseconds, key, tag) in heap order. Nanoseconds in a `u64` (584 years)
    /// rather than a `Duration`: each sift step compares deadlines, and a `u64` compares in one
    /// instruction where a `Duration` takes its seconds and then its nanoseconds.
    heap: Vec<(u64, u32, u32)>,
    /// Position of each key in `heap`, or `NONE`.
    pos: Vec<u32>,
}

const NONE: u32 = u32::MAX;

/// `d` in nanoseconds, saturated (a deadline past 584 years never comes).
fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl TimerHeap {
    /// An empty heap for keys below `capacity`.
    pub fn new(capacity: usize) -> TimerHeap {
        TimerHeap {
            heap: Vec::with_capacity(capacity),
            pos: vec![NONE; capacity],
        }
    }

    /// Armed timers.
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// No timer armed.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    /// The earliest deadline.
    pub fn next_deadline(&self) -> Option<Duration> {
        self.heap.first().map(|e| Duration::from_nanos(e.0))
    }

    /// The deadline and tag of `key`, if armed.
    pub fn get(&self, key: u32) -> Option<(Duration, u32)> {
        let p = *self.pos.get(key as usize)?;
        (p != NONE).then(|| {
            let e = self.heap[p as usize];
            (Duration::from_nanos(e.0), e.2)
        })
    }

    /// Arm (or re-arm) `key` for `deadline`, with a caller-chosen `tag` (the slot generation).
    /// Keys at or above the capacity are ignored.
    pub fn arm(&mut self, key: u32, deadline: Duration, tag: u32) {
        let Some(&p) = self.pos.get(key as usize) else {
            return;
        };
        let e = (nanos(deadline), key, tag);
        if p == NONE {
            let i = self.heap.len();
            self.heap.push(e);
            // Deadlines are mostly armed in the order they come (one timeout, a clock that
            // only moves on): the new entry then stays at the end, below its parent.
            if i == 0 || self.heap[(i - 1) / 2].0 <= e.0 {
                self.pos[key as usize] = i as u32;
            } else {
                self.sift_up(i, e);
            }
        } else {
            let i = p as usize;
            if e.0 < self.heap[i].0 {
                self.sift_up(i, e);
            } else {
                self.sift_down(i, e);
            }
        }
    }

    /// Disarm `key`; returns whether it was armed.
    pub fn disarm(&mut self, key: u32) -> bool {
        let Some(&p) = self.pos.get(key as usize) else {
            return false;
        };
        if p == NONE {
            return false;
        }
        self.remove_at(p as usize);
        true
    }

    /// Pop the earliest timer if its deadline is at or before `now`: `(key, tag)`.
    pub fn pop_expired(&mut self, now: Duration) -> Option<(u32, u32)> {
        let &(deadline, key, tag) = self.heap.first()?;
        if deadline > nanos(now) {
            return None;
        }
        self.remove_at(0);
        Some((key, tag))
    }

    /// Take out the entry at `i`: the last entry fills its place, moved up or down to where
    /// it belongs.
    fn remove_at(&mut self, i: usize) {
        let gone = self.heap[i].1;
        let last = self.heap.pop().expect("non-empty");
        self.pos[gone as usize] = NONE;
        if i < self.heap.len() {
            if i > 0 && last.0 < self.heap[(i - 1) / 2].0 {
                self.sift_up(i, last);
            } else {
                self.sift_down(i, last);
            }
        }
    }

    /// Put `e` at the hole `i` or above it: parents later than it move down into the hole
    /// (one write each, rather than a swap), then `e` goes where the hole stops.
    fn sift_up(&mut self, mut i: usize, e: (u64, u32, u32)) {
        while i > 0 {
            let parent = (i - 1) / 2;
            let p = self.heap[parent];
            if e.0 >= p.0 {
                break;
            }
            self.heap[i] = p;
            self.pos[p.1 as usize] = i as u32;
            i = parent;
        }
        self.heap[i] = e;
        self.pos[e.1 as usize] = i as u32;
    }

    /// Put `e` at the hole `i` or below it: the earlier child moves up while it is earlier
    /// than `e`.
    fn sift_down(&mut self, mut i: usize, e: (u64, u32, u32)) {
        let len = self.heap.len();
        loop {
            let left = 2 * i + 1;
            if left >= len {
                break;
            }
            let right = left + 1;
            let child = if right < len && self.heap[right].0 < self.heap[left].0 {
                right
            } else {
                left
            };
            let c = self.heap[child];
            if c.0 >= e.0 {
                break;
            }
            self.heap[i] = c;
            self.pos[c.1 as usize] = i as u32;
            i = child;
        }
        self.heap[i] = e;
        self.pos[e.1 as usize] = i as u32;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn pops_in_deadline_order_only_when_due() {
        let mut t = TimerHeap::new(8);
        t.arm(3, ms(30), 0);
        t.arm(1, ms(10), 0);
        t.arm(2, ms(20), 7);
        assert_eq!(t.next_deadline(), Some(ms(10)));
        assert_eq!(t.pop_expired(ms(9)), None);
        assert_eq!(t.pop_expired(ms(25)), Some((1, 0)));
        assert_eq!(t.pop_expired(ms(25)), Some((2, 7)));
        assert_eq!(t.pop_expired(ms(25)), None);
        assert_eq!(t.len(), 1);
    }

    #[test]
    fn rearm_moves_and_disarm_removes() {
        let mut t = TimerHeap::new(4);
        t.arm(0, ms(10), 1);
        t.arm(1, ms(20), 1);
        t.arm(0, ms(30), 2);
        assert_eq!(t.get(0), Some((ms(30), 2)));
        assert_eq!(t.next_deadline(), Some(ms(20)));
        assert!(t.disarm(1));
        assert!(!t.disarm(1));
        assert_eq!(t.pop_expired(ms(100)), Some((0, 2)));
        assert!(t.is_empty());
        t.arm(9, ms(1), 0);
        assert!(t.is_empty(), "keys beyond the capacity are ignored");
    }

    proptest! {
        /// Against a sorted model: any sequence of arm/disarm/pop gives the same expiries.
        #[test]
        fn matches_a_model(ops in proptest::collection::vec((0u8..3, 0u32..16, 0u64..100), 1..200)) {
            let mut t = TimerHeap::new(16);
            let mut model: std::collections::BTreeMap<u32, u64> = Default::default();
            for (op, key, v) in ops {
                match op {
                    0 => { t.arm(key, ms(v), key); model.insert(key, v); }
                    1 => { prop_assert_eq!(t.disarm(key), model.remove(&key).is_some()); }
                    _ => {
                        let now = ms(v);
                        let mut last = 0;
                        while let Some((k, tag)) = t.pop_expired(now) {
                            prop_assert_eq!(tag, k);
                            let d = model.remove(&k).expect("popped key was armed");
                            prop_assert!(ms(d) <= now);
                            prop_assert!(d >= last, "popped out of deadline order");
                            last = d;
                        }
                        prop_assert!(model.values().all(|&d| ms(d) > now));
                    }
                }
                prop_assert_eq!(t.len(), model.len());
                prop_assert_eq!(t.next_deadline(), model.values().min().map(|&d| ms(d)));
            }
        }
    }
}

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
    /// (deadline, key, tag) in heap order.
    heap: Vec<(Duration, u32, u32)>,
    /// Position of each key in `heap`, or `NONE`.
    pos: Vec<u32>,
}

const NONE: u32 = u32::MAX;

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
        self.heap.first().map(|e| e.0)
    }

    /// The deadline and tag of `key`, if armed.
    pub fn get(&self, key: u32) -> Option<(Duration, u32)> {
        let p = *self.pos.get(key as usize)?;
        (p != NONE).then(|| {
            let e = self.heap[p as usize];
            (e.0, e.2)
        })
    }

    /// Arm (or re-arm) `key` for `deadline`, with a caller-chosen `tag` (the slot generation).
    /// Keys at or above the capacity are ignored.
    pub fn arm(&mut self, key: u32, deadline: Duration, tag: u32) {
        let Some(&p) = self.pos.get(key as usize) else {
            return;
        };
        if p == NONE {
            let i = self.heap.len();
            self.heap.push((deadline, key, tag));
            self.pos[key as usize] = i as u32;
            self.sift_up(i);
        } else {
            let i = p as usize;
            let old = self.heap[i].0;
            self.heap[i] = (deadline, key, tag);
            if deadline < old {
                self.sift_up(i);
            } else {
                self.sift_down(i);
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
        if deadline > now {
            return None;
        }
        self.remove_at(0);
        Some((key, tag))
    }

    fn remove_at(&mut self, i: usize) {
        let last = self.heap.len() - 1;
        self.swap(i, last);
        let (_, key, _) = self.heap.pop().expect("non-empty");
        self.pos[key as usize] = NONE;
        if i < self.heap.len() {
            self.sift_down(i);
            self.sift_up(i);
        }
    }

    fn swap(&mut self, a: usize, b: usize) {
        self.heap.swap(a, b);
        self.pos[self.heap[a].1 as usize] = a as u32;
        self.pos[self.heap[b].1 as usize] = b as u32;
    }

    fn sift_up(&mut self, mut i: usize) {
        while i > 0 {
            let parent = (i - 1) / 2;
            if self.heap[i].0 >= self.heap[parent].0 {
                break;
            }
            self.swap(i, parent);
            i = parent;
        }
    }

    fn sift_down(&mut self, mut i: usize) {
        loop {
            let l = 2 * i + 1;
            let r = l + 1;
            let mut m = i;
            if l < self.heap.len() && self.heap[l].0 < self.heap[m].0 {
                m = l;
            }
            if r < self.heap.len() && self.heap[r].0 < self.heap[m].0 {
                m = r;
            }
            if m == i {
                break;
            }
            self.swap(i, m);
            i = m;
        }
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

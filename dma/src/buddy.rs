//! A binary buddy allocator over one arena, with its bookkeeping outside the arena.
//!
//! The arena is device-visible memory, so nothing of the allocator lives in it (a device write
//! must never corrupt our free lists). Free blocks of each order sit on an intrusive doubly
//! linked list kept in side arrays, so allocation, free and coalescing are O(orders).

/// Smallest block handed out, in bytes (a CQE, a WQE basic block).
pub(crate) const MIN_BLOCK: usize = 64;

const NIL: u32 = u32::MAX;
const NOT_FREE: u8 = u8::MAX;

/// Buddy bookkeeping for an arena of `MIN_BLOCK << max_order` bytes. Block positions are in
/// units of `MIN_BLOCK`.
pub(crate) struct Buddy {
    max_order: u8,
    /// First free block of each order, or NIL.
    heads: Vec<u32>,
    /// Bit `k` set when order `k` has a free block.
    nonempty: u64,
    next: Vec<u32>,
    prev: Vec<u32>,
    /// For the first unit of a free block: its order; otherwise NOT_FREE.
    free_order: Vec<u8>,
    /// Units handed out (for the idle check).
    used_units: usize,
}

impl Buddy {
    /// An all-free arena of `1 << max_order` units. `max_order` must be below 32.
    pub(crate) fn new(max_order: u8) -> Self {
        debug_assert!(max_order < 32);
        let units = 1usize << max_order;
        let mut b = Buddy {
            max_order,
            heads: vec![NIL; max_order as usize + 1],
            nonempty: 0,
            next: vec![NIL; units],
            prev: vec![NIL; units],
            free_order: vec![NOT_FREE; units],
            used_units: 0,
        };
        b.push(0, max_order);
        b
    }

    /// The order whose blocks hold `bytes` (a power of two at least `MIN_BLOCK`).
    pub(crate) fn order_for(bytes: usize) -> u8 {
        (bytes.max(MIN_BLOCK).next_power_of_two() / MIN_BLOCK).trailing_zeros() as u8
    }

    /// True when nothing is allocated.
    pub(crate) fn is_idle(&self) -> bool {
        self.used_units == 0
    }

    /// Allocate a block of `order`; returns its first unit.
    pub(crate) fn alloc(&mut self, order: u8) -> Option<u32> {
        if order > self.max_order {
            return None;
        }
        let candidates = self.nonempty & !((1u64 << order) - 1);
        if candidates == 0 {
            return None;
        }
        let mut j = candidates.trailing_zeros() as u8;
        let block = self.heads[j as usize];
        self.remove(block, j);
        while j > order {
            j -= 1;
            self.push(block + (1 << j), j);
        }
        self.used_units += 1 << order;
        Some(block)
    }

    /// Free the block at `unit` of `order`, merging it with free buddies.
    pub(crate) fn free(&mut self, unit: u32, order: u8) {
        debug_assert_eq!(self.free_order[unit as usize], NOT_FREE, "double free");
        self.used_units -= 1 << order;
        let mut unit = unit;
        let mut order = order;
        while order < self.max_order {
            let buddy = unit ^ (1 << order);
            if self.free_order[buddy as usize] != order {
                break;
            }
            self.remove(buddy, order);
            unit = unit.min(buddy);
            order += 1;
        }
        self.push(unit, order);
    }

    fn push(&mut self, unit: u32, order: u8) {
        let head = self.heads[order as usize];
        self.next[unit as usize] = head;
        self.prev[unit as usize] = NIL;
        if head != NIL {
            self.prev[head as usize] = unit;
        }
        self.heads[order as usize] = unit;
        self.free_order[unit as usize] = order;
        self.nonempty |= 1 << order;
    }

    fn remove(&mut self, unit: u32, order: u8) {
        let (p, n) = (self.prev[unit as usize], self.next[unit as usize]);
        if p == NIL {
            self.heads[order as usize] = n;
        } else {
            self.next[p as usize] = n;
        }
        if n != NIL {
            self.prev[n as usize] = p;
        }
        if self.heads[order as usize] == NIL {
            self.nonempty &= !(1 << order);
        }
        self.free_order[unit as usize] = NOT_FREE;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_for_rounds_up_to_powers_of_two_from_min_block() {
        assert_eq!(Buddy::order_for(1), 0);
        assert_eq!(Buddy::order_for(64), 0);
        assert_eq!(Buddy::order_for(65), 1);
        assert_eq!(Buddy::order_for(256), 2);
        assert_eq!(Buddy::order_for(4096), 6);
    }

    #[test]
    fn splits_and_coalesces_back_to_one_block() {
        let mut b = Buddy::new(4); // 16 units
        let a = b.alloc(0).unwrap();
        let c = b.alloc(1).unwrap();
        let d = b.alloc(2).unwrap();
        // Blocks are aligned to their size and disjoint.
        assert_eq!(c % 2, 0);
        assert_eq!(d % 4, 0);
        let spans = [(a, 1), (c, 2), (d, 4)];
        for (i, &(s1, l1)) in spans.iter().enumerate() {
            for &(s2, l2) in &spans[i + 1..] {
                assert!(s1 + l1 <= s2 || s2 + l2 <= s1, "{spans:?} overlap");
            }
        }
        assert!(b.alloc(4).is_none(), "the whole arena cannot be free");
        b.free(c, 1);
        b.free(a, 0);
        b.free(d, 2);
        assert!(b.is_idle());
        assert_eq!(
            b.alloc(4),
            Some(0),
            "everything coalesced into the top block"
        );
    }

    #[test]
    fn exhausts_at_arena_size() {
        let mut b = Buddy::new(3);
        let blocks: Vec<u32> = (0..8).map(|_| b.alloc(0).unwrap()).collect();
        assert!(b.alloc(0).is_none());
        let mut sorted = blocks.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..8).collect::<Vec<_>>());
        for u in blocks {
            b.free(u, 0);
        }
        assert_eq!(b.alloc(3), Some(0));
    }
}

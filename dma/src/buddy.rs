//! A binary buddy allocator over one arena, with its bookkeeping outside the arena.
//!
//! The arena is device-visible memory, so nothing of the allocator lives in it (a device write
//! must never corrupt our free lists). Free blocks of each order sit on an intrusive doubly
//! linked list kept in side arrays, so allocation, free and coalescing are O(orders).
//!
//! Small blocks freed are kept aside uncoalesced (a quick list per order, bounded) and handed
//! out again first: a pool that leases and returns a MAD buffer per packet would otherwise
//! split a large block on every allocation and merge it back on every free. The quick lists
//! are given back to the buddy lists (coalescing as usual) whenever an allocation finds no
//! block, so they never make an allocation fail that would have succeeded.

/// Smallest block handed out, in bytes (a CQE, a WQE basic block).
pub(crate) const MIN_BLOCK: usize = 64;

const NIL: u32 = u32::MAX;
/// `free_order` of a unit that does not start a free block (0, so the side array starts
/// zeroed and a new arena needs no pass over it).
const NOT_FREE: u8 = 0;
/// `free_order` of the first unit of a block on a quick list: never an order plus one (orders
/// stay below 32), so merging never takes it, and a second free of it is caught.
const QUICK: u8 = u8::MAX;
/// Orders whose freed blocks go to a quick list (up to 4 KiB).
const QUICK_ORDERS: usize = 7;

/// Buddy bookkeeping for an arena of `MIN_BLOCK << max_order` bytes. Block positions are in
/// units of `MIN_BLOCK`.
pub(crate) struct Buddy {
    max_order: u8,
    /// First free block of each order, or NIL.
    heads: Vec<u32>,
    /// Bit `k` set when order `k` has a free block.
    nonempty: u64,
    /// Links of the free lists; meaningful only for the first unit of a free block (written
    /// when the block is put on its list), so they start zeroed, not NIL.
    next: Vec<u32>,
    prev: Vec<u32>,
    /// For the first unit of a free block: its order plus one; of a block on a quick list:
    /// QUICK; otherwise NOT_FREE.
    free_order: Vec<u8>,
    /// Units handed out (for the idle check); blocks on the quick lists are not counted.
    used_units: usize,
    /// Freed blocks of small orders, not yet merged back: taken first by `alloc`.
    quick: [Vec<u32>; QUICK_ORDERS],
    /// Units on the quick lists.
    quick_units: usize,
    /// Most units the quick lists may hold (an eighth of the arena).
    quick_max: usize,
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
            next: vec![0; units],
            prev: vec![0; units],
            free_order: vec![NOT_FREE; units],
            used_units: 0,
            quick: Default::default(),
            quick_units: 0,
            quick_max: units / 8,
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
    #[inline]
    pub(crate) fn alloc(&mut self, order: u8) -> Option<u32> {
        if order <= self.max_order {
            if let Some(unit) = self.quick.get_mut(usize::from(order)).and_then(Vec::pop) {
                self.free_order[unit as usize] = NOT_FREE;
                self.quick_units -= 1 << order;
                self.used_units += 1 << order;
                return Some(unit);
            }
        }
        self.alloc_listed(order)
    }

    /// [`alloc`](Self::alloc) when the quick list of `order` is empty.
    fn alloc_listed(&mut self, order: u8) -> Option<u32> {
        if order > self.max_order {
            return None;
        }
        let block = match self.take(order) {
            Some(b) => b,
            None if self.quick_units > 0 => {
                self.drain_quick();
                self.take(order)?
            }
            None => return None,
        };
        self.used_units += 1 << order;
        Some(block)
    }

    /// A block of `order` from the buddy lists, splitting a larger one if need be.
    fn take(&mut self, order: u8) -> Option<u32> {
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
        Some(block)
    }

    /// Free the block at `unit` of `order`: onto its quick list if it is small and there is
    /// room, else merged with free buddies.
    #[inline]
    pub(crate) fn free(&mut self, unit: u32, order: u8) {
        debug_assert_eq!(self.free_order[unit as usize], NOT_FREE, "double free");
        self.used_units -= 1 << order;
        if let Some(q) = self.quick.get_mut(usize::from(order)) {
            if self.quick_units + (1 << order) <= self.quick_max {
                q.push(unit);
                self.free_order[unit as usize] = QUICK;
                self.quick_units += 1 << order;
                return;
            }
        }
        self.merge(unit, order);
    }

    /// Puts every quick-list block back on the buddy lists, coalescing.
    fn drain_quick(&mut self) {
        for order in 0..QUICK_ORDERS {
            while let Some(unit) = self.quick[order].pop() {
                self.free_order[unit as usize] = NOT_FREE;
                self.merge(unit, order as u8);
            }
        }
        self.quick_units = 0;
    }

    /// Returns the block at `unit` of `order` to the buddy lists, merging it with free
    /// buddies.
    fn merge(&mut self, unit: u32, order: u8) {
        let mut unit = unit;
        let mut order = order;
        while order < self.max_order {
            let buddy = unit ^ (1 << order);
            if self.free_order[buddy as usize] != order + 1 {
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
        self.free_order[unit as usize] = order + 1;
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
    #[cfg(debug_assertions)]
    #[should_panic(expected = "double free")]
    fn freeing_a_block_twice_is_caught_while_it_waits_on_a_quick_list() {
        let mut b = Buddy::new(6);
        let u = b.alloc(0).unwrap();
        b.free(u, 0);
        b.free(u, 0);
    }

    #[test]
    fn quick_listed_blocks_come_back_last_freed_first_and_merge_when_room_runs_out() {
        let mut b = Buddy::new(4);
        let (u, v) = (b.alloc(0).unwrap(), b.alloc(0).unwrap());
        assert_eq!(u ^ v, 1, "buddies");
        // Both wait on the quick list, unmerged: the last freed comes back first.
        b.free(v, 0);
        b.free(u, 0);
        assert_eq!(b.alloc(0), Some(u));
        assert_eq!(b.alloc(0), Some(v));
        b.free(u, 0);
        b.free(v, 0);
        // The whole arena in one block: the quick lists are merged back first.
        assert_eq!(b.alloc(4), Some(0));
        assert!(!b.is_idle());
        b.free(0, 4);
        assert!(b.is_idle());
    }

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

    #[test]
    fn a_freed_small_block_is_reused_first_and_never_blocks_a_large_allocation() {
        let mut b = Buddy::new(6); // 64 units: the quick lists hold up to 8
        let a = b.alloc(2).unwrap();
        let c = b.alloc(2).unwrap();
        b.free(a, 2);
        assert_eq!(b.alloc(2), Some(a), "the block just freed comes back first");
        b.free(a, 2);
        b.free(c, 2);
        assert!(b.is_idle(), "blocks on a quick list are not in use");
        assert_eq!(b.quick_units, 8);
        // The whole arena: only possible once the quick lists are merged back.
        assert_eq!(b.alloc(6), Some(0));
        assert_eq!(b.quick_units, 0);
        assert!(b.alloc(0).is_none());
        b.free(0, 6);
        assert!(b.is_idle());
    }

    #[test]
    fn quick_lists_stay_within_an_eighth_of_the_arena() {
        let mut b = Buddy::new(6);
        let blocks: Vec<u32> = (0..16).map(|_| b.alloc(2).unwrap()).collect();
        assert!(b.alloc(0).is_none(), "16 blocks of 4 units fill 64");
        for u in blocks {
            b.free(u, 2);
            assert!(b.quick_units <= b.quick_max);
        }
        assert_eq!(b.quick_units, 8);
        assert!(b.is_idle());
        // The 14 blocks past the quick lists coalesced: half the arena is one block again.
        assert!(b.nonempty & (1 << 5) != 0);
    }
}

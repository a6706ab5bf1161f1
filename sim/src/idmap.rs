//! Maps keyed by small integer ids looked up on every packet (QPNs and CQNs in the ConnectX
//! model, port ids in the network), and by the names and GUIDs of a topology file: a
//! multiplicative hash instead of SipHash. The ids come from the simulator's own allocators;
//! names and GUIDs come from the user's own topology file, which could be crafted to collide
//! (unkeyed, the hash can be inverted) and make loading it slow, never wrong: a file is
//! trusted that far, as the user's own input.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// Fibonacci hashing of one integer key.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }

    fn write_u32(&mut self, n: u32) {
        self.0 = u64::from(n).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }

    /// A 64-bit key (a GUID) is folded after the multiplication: GUIDs may step by a power of
    /// two, whose low bits (which pick the bucket) a product alone would leave equal.
    fn write_u64(&mut self, n: u64) {
        let x = (self.0 ^ n).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        self.0 = x ^ (x >> 32);
    }
}

/// A map from a queue number.
pub(crate) type IdMap<V> = HashMap<u32, V, BuildHasherDefault<IdHasher>>;

/// A map from any key that hashes as one integer (a `PortId`, a GUID), or from the names
/// of a topology file (hashed byte by byte: read once, at start-up, where SipHash's cost
/// showed).
pub(crate) type IdKeyMap<K, V> = HashMap<K, V, BuildHasherDefault<IdHasher>>;

/// How many look-up hints an [`IdTable`] keeps: one per value of the id's low bits.
const HINTS: usize = 8;

/// A map from a queue number for the look-ups of every packet (a QP, its CQs): the entries in
/// a vector, found by an [`IdMap`] of their positions, with a hint per value of the id's low
/// bits of where the last look-up of such an id found its entry. A device goes back to the
/// same few queues, whose numbers come from a counter, so the hint nearly always holds: a
/// look-up is then one comparison instead of a hash probe. A hint is only where to look
/// first; the id stored there is compared, so a stale hint (after a removal moved entries)
/// costs a probe, never a wrong answer.
pub(crate) struct IdTable<V> {
    entries: Vec<(u32, V)>,
    index: IdMap<usize>,
    hints: [std::cell::Cell<usize>; HINTS],
}

impl<V> Default for IdTable<V> {
    fn default() -> Self {
        IdTable {
            entries: Vec::new(),
            index: IdMap::default(),
            hints: Default::default(),
        }
    }
}

// Keys by reference, as the `HashMap` this replaces takes them: the call sites stay the same.
#[allow(clippy::trivially_copy_pass_by_ref)]
impl<V> IdTable<V> {
    fn hint(&self, id: u32) -> &std::cell::Cell<usize> {
        &self.hints[id as usize % HINTS]
    }

    /// The position of `id`'s entry.
    #[inline]
    fn find(&self, id: u32) -> Option<usize> {
        let hint = self.hint(id);
        let at = hint.get();
        if self.entries.get(at).is_some_and(|(k, _)| *k == id) {
            return Some(at);
        }
        let at = *self.index.get(&id)?;
        hint.set(at);
        Some(at)
    }

    /// The entry of `id`.
    #[inline]
    pub(crate) fn get(&self, id: &u32) -> Option<&V> {
        self.find(*id).map(|at| &self.entries[at].1)
    }

    /// The entry of `id`, writable.
    #[inline]
    pub(crate) fn get_mut(&mut self, id: &u32) -> Option<&mut V> {
        self.find(*id).map(|at| &mut self.entries[at].1)
    }

    /// Whether `id` has an entry.
    pub(crate) fn contains_key(&self, id: &u32) -> bool {
        self.index.contains_key(id)
    }

    /// Stores `value` for `id`; returns the value it replaces.
    pub(crate) fn insert(&mut self, id: u32, value: V) -> Option<V> {
        if let Some(&at) = self.index.get(&id) {
            return Some(std::mem::replace(&mut self.entries[at].1, value));
        }
        self.index.insert(id, self.entries.len());
        self.entries.push((id, value));
        None
    }

    /// Removes the entry of `id` and returns it. The last entry moves into its place.
    pub(crate) fn remove(&mut self, id: &u32) -> Option<V> {
        let at = self.index.remove(id)?;
        let (_, value) = self.entries.swap_remove(at);
        if let Some(&(moved, _)) = self.entries.get(at) {
            self.index.insert(moved, at);
        }
        Some(value)
    }

    /// How many entries.
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Removes every entry.
    pub(crate) fn clear(&mut self) {
        self.entries.clear();
        self.index.clear();
    }

    /// Every value, in no particular order.
    pub(crate) fn values(&self) -> impl Iterator<Item = &V> {
        self.entries.iter().map(|(_, v)| v)
    }
}

impl<V> std::ops::Index<&u32> for IdTable<V> {
    type Output = V;

    fn index(&self, id: &u32) -> &V {
        self.get(id).expect("no entry for this id")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_table_finds_each_entry_across_inserts_removals_and_stale_hints() {
        let mut t: IdTable<u32> = IdTable::default();
        // Ids that share their low bits, so that they share hints.
        let ids: Vec<u32> = (0..40).map(|i| 0x400 + 8 * i + (i % 3)).collect();
        for &id in &ids {
            assert_eq!(t.insert(id, id * 10), None);
        }
        assert_eq!(t.len(), ids.len());
        for &id in &ids {
            assert_eq!(t.get(&id), Some(&(id * 10)));
        }
        // Replacing keeps one entry.
        assert_eq!(t.insert(ids[3], 7), Some(ids[3] * 10));
        assert_eq!(t[&ids[3]], 7);
        assert_eq!(t.len(), ids.len());
        // Removing moves the last entry into the hole: a hint to either place is stale.
        for &id in ids.iter().step_by(3) {
            let _ = t.get(&id);
            assert!(t.remove(&id).is_some());
            assert_eq!(t.get(&id), None);
            assert!(!t.contains_key(&id));
            assert_eq!(t.remove(&id), None);
        }
        for (i, &id) in ids.iter().enumerate() {
            let want = if i % 3 == 0 {
                None
            } else if i == 3 {
                Some(7)
            } else {
                Some(id * 10)
            };
            assert_eq!(t.get(&id).copied(), want, "id {id:#x}");
            if let Some(v) = t.get_mut(&id) {
                *v += 1;
            }
        }
        let mut values: Vec<u32> = t.values().copied().collect();
        values.sort_unstable();
        let mut want: Vec<u32> = ids
            .iter()
            .enumerate()
            .filter(|(i, _)| i % 3 != 0)
            .map(|(i, &id)| if i == 3 { 8 } else { id * 10 + 1 })
            .collect();
        want.sort_unstable();
        assert_eq!(values, want);
        t.clear();
        assert_eq!(t.len(), 0);
        assert_eq!(t.get(&ids[1]), None);
    }
}

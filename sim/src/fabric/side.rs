//! Side tables: per-port data that most ports never have (a written P_Key table, PMA counters,
//! PortInfo fields the SM changed), kept outside [`Port`](super::Port) so that a 100,000-node
//! fabric pays four bytes per port for each kind of data, and only once something is stored.

use super::model::PortId;

/// Marks a port without an entry.
const EMPTY: u32 = u32::MAX;

/// Data of type `T` for some of the ports of one fabric, found in O(1) by [`PortId`].
///
/// The index (one `u32` per port) is allocated at the first insertion; entries are never
/// moved, only added, so an entry's slot stays valid for the table's life.
#[derive(Debug, Clone)]
pub struct SideTable<T> {
    ports: usize,
    index: Vec<u32>,
    items: Vec<(PortId, T)>,
}

impl<T> SideTable<T> {
    /// An empty table for a fabric with `ports` port slots ([`Fabric`](super::Fabric) port ids
    /// run from 0 to `ports - 1`).
    pub fn new(ports: usize) -> Self {
        SideTable {
            ports,
            index: Vec::new(),
            items: Vec::new(),
        }
    }

    fn slot(&self, port: PortId) -> Option<usize> {
        match self.index.get(port.index()) {
            Some(&i) if i != EMPTY => Some(i as usize),
            _ => None,
        }
    }

    /// Every entry, in the order they were stored.
    pub fn iter(&self) -> impl Iterator<Item = (PortId, &T)> {
        self.items.iter().map(|(p, t)| (*p, t))
    }

    /// The entry of `port`, if one was stored.
    pub fn get(&self, port: PortId) -> Option<&T> {
        self.slot(port).map(|i| &self.items[i].1)
    }

    /// The entry of `port`, writable, if one was stored.
    pub fn get_mut(&mut self, port: PortId) -> Option<&mut T> {
        self.slot(port).map(|i| &mut self.items[i].1)
    }

    /// The entry of `port`, created with `make` if there is none. Panics if `port` is not a
    /// port of the fabric the table was made for.
    #[inline]
    pub fn get_or_insert_with(&mut self, port: PortId, make: impl FnOnce() -> T) -> &mut T {
        // An existing entry (the per-packet case: counters) is one index look-up; only a
        // port of this fabric can have one, the index being as long as the fabric.
        let i = match self.slot(port) {
            Some(i) => i,
            None => self.insert_with(port, make),
        };
        &mut self.items[i].1
    }

    /// Stores `make()` for `port`, which has no entry; returns its slot.
    #[cold]
    fn insert_with(&mut self, port: PortId, make: impl FnOnce() -> T) -> usize {
        assert!(
            port.index() < self.ports,
            "port {port:?} is not in a fabric of {} ports",
            self.ports
        );
        if self.index.is_empty() {
            self.index = vec![EMPTY; self.ports];
        }
        let i = self.items.len();
        self.index[port.index()] = u32::try_from(i).expect("fewer than 2^32 entries");
        self.items.push((port, make()));
        i
    }

    /// How many ports have an entry.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether no port has an entry.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Every port with an entry, with it, in the order the entries were made.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (PortId, &mut T)> {
        self.items.iter_mut().map(|(p, t)| (*p, t))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_created_once_and_found_by_port() {
        let mut t: SideTable<u32> = SideTable::new(10);
        assert!(t.is_empty());
        assert_eq!(t.get(PortId(3)), None);
        *t.get_or_insert_with(PortId(3), || 7) += 1;
        *t.get_or_insert_with(PortId(3), || 100) += 1;
        *t.get_or_insert_with(PortId(9), || 1) += 0;
        assert_eq!(t.get(PortId(3)), Some(&9));
        assert_eq!(t.get(PortId(9)), Some(&1));
        assert_eq!(t.get(PortId(4)), None);
        assert_eq!(t.len(), 2);
        let mut seen: Vec<(PortId, u32)> = t.iter_mut().map(|(p, v)| (p, *v)).collect();
        seen.sort();
        assert_eq!(seen, vec![(PortId(3), 9), (PortId(9), 1)]);
    }

    #[test]
    #[should_panic(expected = "not in a fabric")]
    fn a_port_beyond_the_fabric_is_a_bug() {
        let mut t: SideTable<u8> = SideTable::new(2);
        t.get_or_insert_with(PortId(2), || 0);
    }
}

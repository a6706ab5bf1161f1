//! Maps keyed by small integer ids looked up on every packet (QPNs and CQNs in the ConnectX
//! model, port ids in the network): a multiplicative hash instead of SipHash, since the keys
//! come from the simulator's own allocators, not from an adversary.

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
}

/// A map from a queue number.
pub(crate) type IdMap<V> = HashMap<u32, V, BuildHasherDefault<IdHasher>>;

/// A map from any key that hashes as one integer (a `PortId`).
pub(crate) type IdKeyMap<K, V> = HashMap<K, V, BuildHasherDefault<IdHasher>>;

//! Faults a test switches on and off while the network runs: per link or per node, a drop
//! rate, a delay and a corruption rate, drawn from one seeded generator so that a run replays
//! exactly from its seed; and one-shot drops of a chosen packet (the Nth to leave a port),
//! for a test that must lose exactly that one. (Link and node down/up are state changes: see
//! [`Network::set_link_down`](super::Network::set_link_down).)

use std::collections::HashMap;
use std::time::Duration;

use crate::fabric::{NodeId, PortId};

/// What happens to packets crossing a faulty link, or entering or leaving a faulty node.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Fault {
    /// Probability (0 to 1) that a packet is lost. The receiving port counts it in
    /// PortRcvErrors, as a packet failing its CRC.
    pub drop_rate: f64,
    /// Extra simulated time each packet takes to cross: it reaches the far end that much
    /// later, and everything that happens there waits for it (the SMA's or PMA's processing
    /// and its effects: a PortInfo Set's new state, port changes told to devices, traps; the
    /// next hop; the delivery to a device). Each crossing takes the delay in force when the
    /// packet enters the link; link and node delays on one crossing add up.
    ///
    /// Times saturate: a packet whose arrival would fall at or after [`Duration::MAX`] (the
    /// end of simulated time: `Duration::MAX` itself, or any delay too large to add to the
    /// clock) never arrives. It is counted as a [`DropReason::DelayedForever`] drop when it
    /// enters the link, and nothing is kept for it.
    ///
    /// [`DropReason::DelayedForever`]: super::DropReason::DelayedForever
    pub delay: Duration,
    /// Probability (0 to 1) that a packet arrives with one bit of its MAD flipped: an error no
    /// CRC caught, for testing what receivers make of bad bytes.
    pub corrupt_rate: f64,
}

impl Fault {
    /// No fault.
    pub const NONE: Fault = Fault {
        drop_rate: 0.0,
        delay: Duration::ZERO,
        corrupt_rate: 0.0,
    };

    /// A fault that loses packets with probability `rate`.
    pub fn drop(rate: f64) -> Fault {
        Fault {
            drop_rate: rate,
            ..Fault::NONE
        }
    }

    /// A fault that delays every packet by `delay` ([`Duration::MAX`]: packets never arrive;
    /// see [`Fault::delay`](Fault#structfield.delay)).
    pub fn delay(delay: Duration) -> Fault {
        Fault {
            delay,
            ..Fault::NONE
        }
    }

    /// A fault that flips a bit in packets with probability `rate`.
    pub fn corrupt(rate: f64) -> Fault {
        Fault {
            corrupt_rate: rate,
            ..Fault::NONE
        }
    }

    fn is_none(&self) -> bool {
        self.drop_rate <= 0.0 && self.delay.is_zero() && self.corrupt_rate <= 0.0
    }

    /// Both faults at once: independent losses and corruptions, delays added (saturating at
    /// [`Duration::MAX`], which never arrives).
    fn and(self, o: Fault) -> Fault {
        Fault {
            drop_rate: 1.0 - (1.0 - self.drop_rate) * (1.0 - o.drop_rate),
            delay: self.delay.saturating_add(o.delay),
            corrupt_rate: 1.0 - (1.0 - self.corrupt_rate) * (1.0 - o.corrupt_rate),
        }
    }
}

/// SplitMix64: small, fast and good enough to draw drop decisions from a seed.
#[derive(Debug, Clone)]
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    #[allow(clippy::cast_precision_loss)] // 53-bit values: an f64 holds them exactly
    fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// True with probability `p`.
    fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && (p >= 1.0 || self.unit() < p)
    }
}

/// What a fault did to one packet crossing a link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Lost.
    Dropped,
    /// Delivered after `delay`, with bit `flip` of the MAD flipped if any.
    Passed { delay: Duration, flip: Option<u16> },
}

/// The faults in force.
#[derive(Debug, Clone)]
pub(crate) struct Faults {
    /// By the lower port id of the link's two ends.
    links: HashMap<PortId, Fault>,
    nodes: HashMap<NodeId, Fault>,
    /// One-shot drops: (egress port, packets to let through before the one to lose).
    one_shot: Vec<(PortId, u32)>,
    rng: Rng,
}

impl Faults {
    pub(crate) fn new(seed: u64) -> Faults {
        Faults {
            links: HashMap::new(),
            nodes: HashMap::new(),
            one_shot: Vec::new(),
            rng: Rng::new(seed),
        }
    }

    pub(crate) fn reseed(&mut self, seed: u64) {
        self.rng = Rng::new(seed);
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.links.is_empty() && self.nodes.is_empty() && self.one_shot.is_empty()
    }

    /// Loses the `nth` packet (1: the next one) to leave `egress` from now on, once.
    pub(crate) fn drop_nth(&mut self, egress: PortId, nth: u32) {
        if nth > 0 {
            self.one_shot.push((egress, nth - 1));
        }
    }

    /// A packet leaves `egress`: whether a one-shot drop takes it (each one counts it).
    fn one_shot_hit(&mut self, egress: PortId) -> bool {
        let mut hit = false;
        self.one_shot.retain_mut(|(port, left)| {
            if *port != egress {
                return true;
            }
            if *left == 0 {
                hit = true;
                return false;
            }
            *left -= 1;
            true
        });
        hit
    }

    /// Sets the fault of the link whose ends are `a` and `b`.
    pub(crate) fn set_link(&mut self, a: PortId, b: PortId, fault: Fault) {
        let key = a.min(b);
        if fault.is_none() {
            self.links.remove(&key);
        } else {
            self.links.insert(key, fault);
        }
    }

    pub(crate) fn set_node(&mut self, node: NodeId, fault: Fault) {
        if fault.is_none() {
            self.nodes.remove(&node);
        } else {
            self.nodes.insert(node, fault);
        }
    }

    pub(crate) fn clear(&mut self) {
        self.links.clear();
        self.nodes.clear();
        self.one_shot.clear();
    }

    /// Decides the fate of a packet crossing from `a` (on node `na`) to `b` (on `nb`).
    pub(crate) fn cross(&mut self, a: PortId, b: PortId, na: NodeId, nb: NodeId) -> Verdict {
        if self.one_shot_hit(a) {
            return Verdict::Dropped;
        }
        let mut f = Fault::NONE;
        for g in [
            self.links.get(&a.min(b)),
            self.nodes.get(&na),
            self.nodes.get(&nb).filter(|_| nb != na),
        ]
        .into_iter()
        .flatten()
        {
            f = f.and(*g);
        }
        if self.rng.chance(f.drop_rate) {
            return Verdict::Dropped;
        }
        let flip = self
            .rng
            .chance(f.corrupt_rate)
            .then(|| (self.rng.next_u64() % (256 * 8)) as u16);
        Verdict::Passed {
            delay: f.delay,
            flip,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_generator_replays_from_its_seed_and_hits_its_rate() {
        let mut a = Rng::new(42);
        let mut b = Rng::new(42);
        let xs: Vec<u64> = (0..8).map(|_| a.next_u64()).collect();
        let ys: Vec<u64> = (0..8).map(|_| b.next_u64()).collect();
        assert_eq!(xs, ys);
        let mut r = Rng::new(7);
        let hits = (0..100_000).filter(|_| r.chance(0.25)).count();
        assert!(
            (23_000..27_000).contains(&hits),
            "{hits} hits of 100000 at 25 %"
        );
        assert!(!Rng::new(1).chance(0.0));
        assert!(Rng::new(1).chance(1.0));
    }

    #[test]
    fn a_one_shot_drop_takes_exactly_the_nth_packet_leaving_its_port() {
        let mut f = Faults::new(1);
        let (a, b) = (PortId(3), PortId(4));
        f.drop_nth(a, 3);
        assert!(!f.is_empty());
        let cross = |f: &mut Faults, from, to| f.cross(from, to, NodeId(0), NodeId(1));
        // Packets the other way do not count.
        assert!(matches!(cross(&mut f, b, a), Verdict::Passed { .. }));
        assert!(matches!(cross(&mut f, a, b), Verdict::Passed { .. }));
        assert!(matches!(cross(&mut f, a, b), Verdict::Passed { .. }));
        assert_eq!(cross(&mut f, a, b), Verdict::Dropped, "the third");
        assert!(
            matches!(cross(&mut f, a, b), Verdict::Passed { .. }),
            "once"
        );
        assert!(f.is_empty());
        f.drop_nth(a, 0);
        assert!(f.is_empty(), "0 names no packet");
    }

    #[test]
    fn faults_combine_and_clear() {
        let mut f = Faults::new(1);
        assert!(f.is_empty());
        f.set_link(PortId(5), PortId(2), Fault::drop(1.0));
        assert_eq!(
            f.cross(PortId(2), PortId(5), NodeId(0), NodeId(1)),
            Verdict::Dropped
        );
        f.set_link(PortId(2), PortId(5), Fault::delay(Duration::from_millis(3)));
        f.set_node(NodeId(1), Fault::delay(Duration::from_millis(4)));
        assert_eq!(
            f.cross(PortId(5), PortId(2), NodeId(1), NodeId(0)),
            Verdict::Passed {
                delay: Duration::from_millis(7),
                flip: None
            }
        );
        f.clear();
        assert!(f.is_empty());
    }

    #[test]
    fn delays_that_add_past_the_largest_duration_saturate() {
        let mut f = Faults::new(1);
        f.set_link(PortId(2), PortId(5), Fault::delay(Duration::MAX));
        f.set_node(NodeId(0), Fault::delay(Duration::from_secs(1)));
        f.set_node(NodeId(1), Fault::delay(Duration::MAX));
        assert_eq!(
            f.cross(PortId(2), PortId(5), NodeId(0), NodeId(1)),
            Verdict::Passed {
                delay: Duration::MAX,
                flip: None
            }
        );
    }
}

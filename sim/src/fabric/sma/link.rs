//! Link and port state transitions, shared by the SM's PortInfo Sets and by faults.
//!
//! A link is up when both ends are physically LinkUp; training a link puts both ends in
//! Init/LinkUp with the best common rate (as ibsim's `link_ports`). Taking it down puts the
//! end asked for in Down/Polling (or Down/Disabled when the SM disables it) and its peer in
//! Down/Polling. A link comes back up only when neither end is Disabled and no fault holds it
//! down. Every change of a port's PortState is recorded as an [`Effect`]; a switch whose port
//! goes up or down also gets SwitchInfo:PortStateChange set (and sends trap 128), unless the
//! change comes from a SubnSet(PortInfo) to that switch: IBA's SwitchInfo table says changes
//! of PortState resulting from SubnSet do not change the bit, and ibsim (`sim_mad.c`
//! `do_portinfo`) sets it only on the far end's switch ("the local portchange (if switch) is
//! not changed according to the spec (p. 731) - no portchange on subnset"). Otherwise an SM
//! would hear of a change it made itself and escalate a light sweep to a heavy one. The
//! switch at the far end of the link still sets it. A switch's port 0 has no link: neither an
//! SM nor a fault takes it down.

use super::defaults::PortKind;
use super::{Effect, Sma, port_kind};
use crate::fabric::model::{NodeId, NodeType, PortId};
use crate::fabric::rate::ActiveRates;
use crate::fabric::state::{LinkState, PhysState};
use crate::link::PortChange;

/// What happened to a link, as [`Sma::link_down`] and [`Sma::link_up`] report it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkEvent {
    /// Nothing changed (already in that state, or the link cannot come up).
    Unchanged,
    /// The link went down.
    Down,
    /// The link trained and is up (both ends Init).
    Up,
}

/// What drives a change of port state; decides which switches set PortStateChange.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Cause {
    /// The link itself: a cable pulled or plugged back, a node losing power.
    Link,
    /// A SubnSet(PortInfo) to the SMA of this node: it sets no PortStateChange of its own
    /// (see the module documentation); the far end's switch does.
    SubnSet(NodeId),
}

impl Sma<'_> {
    /// Sets a port's PortState and PortPhysicalState, recording what changed.
    pub(super) fn set_state(
        &mut self,
        port: PortId,
        link: LinkState,
        phys: PhysState,
        cause: Cause,
    ) {
        let before = self.fabric.port(port).state;
        if before.link_state == link && before.phys_state == phys {
            return;
        }
        {
            let s = &mut self.fabric.port_mut(port).state;
            s.link_state = link;
            s.phys_state = phys;
            if phys != PhysState::LinkUp {
                s.active = ActiveRates::default();
            }
        }
        if before.phys_state == PhysState::LinkUp && phys != PhysState::LinkUp {
            let c = self.agents.counters_mut(port);
            c.link_downed = c.link_downed.saturating_add(1);
            *self.agents.link_downs.entry(port).or_default() += 1;
        }
        if before.link_state != link {
            let change = match link {
                LinkState::Down => Some(PortChange::Down),
                LinkState::Init => Some(PortChange::Initialized),
                LinkState::Active => Some(PortChange::Active),
                LinkState::Armed | LinkState::NoChange => None,
            };
            if let Some(change) = change {
                self.effect(Effect::Port(port, change));
            }
            let up_down = (before.link_state == LinkState::Down) != (link == LinkState::Down);
            let node = self.fabric.port(port).node();
            if up_down
                && self.fabric.node(node).kind() == NodeType::Switch
                && cause != Cause::SubnSet(node)
            {
                if let Some(sw) = self.fabric.switch_mut(node) {
                    sw.info.port_state_change = true;
                }
                self.effect(Effect::SwitchPortStateChange(node));
            }
        }
    }

    /// Takes the link of `port` down: `port` to Down/Polling (Down/Disabled if `disable`), its
    /// peer to Down/Polling.
    pub fn link_down(&mut self, port: PortId, disable: bool) -> LinkEvent {
        self.link_down_by(port, disable, Cause::Link)
    }

    /// [`Sma::link_down`], driven by `cause`.
    pub(super) fn link_down_by(&mut self, port: PortId, disable: bool, cause: Cause) -> LinkEvent {
        if port_kind(self.fabric, port) == PortKind::SwitchPort0 {
            // No link to take down: port 0 stays Active/LinkUp at its 4x SDR rate.
            return LinkEvent::Unchanged;
        }
        let was_up = self.fabric.port(port).state.phys_state == PhysState::LinkUp;
        let phys = if disable || self.fabric.port(port).state.phys_state == PhysState::Disabled {
            PhysState::Disabled
        } else {
            PhysState::Polling
        };
        self.set_state(port, LinkState::Down, phys, cause);
        if let Some(peer) = self.fabric.peer(port) {
            let peer_phys = match self.fabric.port(peer).state.phys_state {
                PhysState::Disabled => PhysState::Disabled,
                _ => PhysState::Polling,
            };
            self.set_state(peer, LinkState::Down, peer_phys, cause);
        }
        if was_up {
            LinkEvent::Down
        } else {
            LinkEvent::Unchanged
        }
    }

    /// Trains the link of `port` if it can come up: both ends to Init/LinkUp with the best
    /// common rate. A port without a cable stays down, unless it is looped back to itself (a
    /// standalone CA's port), which comes up alone.
    pub fn link_up(&mut self, port: PortId) -> LinkEvent {
        self.link_up_by(port, Cause::Link)
    }

    /// [`Sma::link_up`], driven by `cause`.
    fn link_up_by(&mut self, port: PortId, cause: Cause) -> LinkEvent {
        let me = self.fabric.port(port).state;
        if me.phys_state == PhysState::Disabled || self.agents.is_fault_down(self.fabric, port) {
            return LinkEvent::Unchanged;
        }
        if me.phys_state == PhysState::LinkUp {
            return LinkEvent::Unchanged;
        }
        let Some(peer) = self.fabric.peer(port) else {
            if !self.agents.loopback.contains(&port) {
                return LinkEvent::Unchanged;
            }
            let enabled = self.fabric.port(port).enabled;
            let Ok(active) = ActiveRates::train(enabled, enabled) else {
                return LinkEvent::Unchanged;
            };
            self.set_state(port, LinkState::Init, PhysState::LinkUp, cause);
            self.fabric.port_mut(port).state.active = active;
            return LinkEvent::Up;
        };
        if self.fabric.port(peer).state.phys_state == PhysState::Disabled {
            return LinkEvent::Unchanged;
        }
        let Ok(active) = ActiveRates::train(
            self.fabric.port(port).enabled,
            self.fabric.port(peer).enabled,
        ) else {
            return LinkEvent::Unchanged;
        };
        for p in [port, peer] {
            self.set_state(p, LinkState::Init, PhysState::LinkUp, cause);
            self.fabric.port_mut(p).state.active = active;
        }
        LinkEvent::Up
    }

    /// Bounces the link of `port`: down, then up again if it can train (PortInfo Set of
    /// PortState Down, or PortPhysicalState Polling).
    pub fn retrain(&mut self, port: PortId) {
        self.retrain_by(port, Cause::Link);
    }

    /// [`Sma::retrain`], driven by `cause`.
    pub(super) fn retrain_by(&mut self, port: PortId, cause: Cause) {
        self.link_down_by(port, false, cause);
        self.link_up_by(port, cause);
    }

    /// Holds every link of `node` down (`down`), as a node losing power, or lets them come back
    /// (those whose other end is not held down too).
    pub fn set_node_fault_down(&mut self, node: crate::fabric::NodeId, down: bool) {
        if down {
            self.agents.node_down.insert(node);
        } else {
            self.agents.node_down.remove(&node);
        }
        let ports: Vec<PortId> = self.fabric.ports_of(node).collect();
        for p in ports {
            if down {
                self.link_down(p, false);
            } else {
                self.link_up(p);
            }
        }
    }

    /// Holds the link of `port` down (`down`) or lets it come back (`!down`), as a cable pulled
    /// or plugged back: both ends go to Down/Polling, or train again.
    pub fn set_fault_down(&mut self, port: PortId, down: bool) -> LinkEvent {
        if port_kind(self.fabric, port) == PortKind::SwitchPort0 {
            // A switch's port 0 has no cable to pull.
            return LinkEvent::Unchanged;
        }
        let ends = [Some(port), self.fabric.peer(port)];
        if down {
            for p in ends.into_iter().flatten() {
                self.agents.fault_down.insert(p);
            }
            self.link_down(port, false)
        } else {
            for p in ends.into_iter().flatten() {
                self.agents.fault_down.remove(&p);
            }
            self.link_up(port)
        }
    }
}

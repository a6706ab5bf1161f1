//! Putting a simulated ConnectX on a network: alone (a one-node fabric holding just its CA,
//! with the SMA that answers its MAD_IFC and loopback to its own LIDs) or on a CA node of a
//! larger simulated fabric.

use crate::clock::ClockMode;
use crate::net::{Network, NodeRef, Standalone, StandaloneInit};
use crate::sched::Scheduler;

use super::config::Mlx5Config;
use super::{Mlx5, Mlx5Error};

/// Mellanox's IEEE OUI, the NodeInfo VendorID of its HCAs.
pub const MELLANOX_OUI: u32 = 0x00_02c9;

impl Mlx5 {
    /// A ConnectX alone on its own one-node network on a new scheduler in `mode`: its ports
    /// start as `init` says (Active with LIDs 1, 2.. by default). Returns the device and the
    /// network (which lives as long as the device's links, whether or not the caller keeps
    /// the handle).
    pub fn standalone(
        cfg: Mlx5Config,
        mode: ClockMode,
        name: &str,
        init: StandaloneInit,
    ) -> Result<(Mlx5, Network), Mlx5Error> {
        let sched = std::sync::Arc::new(Scheduler::new(mode));
        let net = Network::standalone(
            &Standalone {
                name: name.to_owned(),
                num_ports: cfg.ports,
                node_guid: Some(cfg.node_guid),
                vendor_id: MELLANOX_OUI,
                device_id: cfg.device_id,
                init,
            },
            sched,
        )
        .map_err(|e| Mlx5Error::Network(e.to_string()))?;
        let dev = Mlx5::on_network(cfg, &net, name, 1)?;
        Ok((dev, net))
    }

    /// A ConnectX on CA `node` of `net` (on the network's scheduler): device port `p` is
    /// attached to the node's port `first_port + p - 1`.
    pub fn on_network<'a>(
        cfg: Mlx5Config,
        net: &Network,
        node: impl Into<NodeRef<'a>>,
        first_port: u8,
    ) -> Result<Mlx5, Mlx5Error> {
        let node = net
            .node(node)
            .map_err(|e| Mlx5Error::Network(e.to_string()))?;
        let ports = cfg.ports;
        let dev = Mlx5::new(cfg, net.scheduler().clone())?;
        let sink = dev.sink();
        for p in 1..=ports {
            let node_port = first_port
                .checked_add(p - 1)
                .ok_or_else(|| Mlx5Error::Network(format!("port {first_port} + {p} overflows")))?;
            let link = net
                .attach(node, node_port, &sink)
                .map_err(|e| Mlx5Error::Network(e.to_string()))?;
            dev.attach_port(p, link)?;
        }
        Ok(dev)
    }

    /// [`Mlx5::standalone`] with the default configuration, name and Active ports.
    pub fn standalone_default(mode: ClockMode) -> Result<(Mlx5, Network), Mlx5Error> {
        Mlx5::standalone(
            Mlx5Config::default(),
            mode,
            "sim-hca",
            StandaloneInit::Active,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_standalone_device_sees_its_port_active_with_lid_1() {
        let (dev, _net) = Mlx5::standalone_default(ClockMode::Virtual).unwrap();
        let view = dev.inner.with(|st| st.ports[0].clone());
        assert_eq!(view.snapshot.lid, 1);
        assert_eq!(view.snapshot.state, 4);
        assert_eq!(view.snapshot.node_guid, Mlx5Config::default().node_guid);
        assert_eq!(
            view.pkeys[0], 0xffff,
            "the SMA's default P_Key, read by MAD"
        );
    }

    #[test]
    fn a_second_device_on_the_same_port_is_refused() {
        let (dev, net) = Mlx5::standalone_default(ClockMode::Virtual).unwrap();
        let err = Mlx5::on_network(Mlx5Config::default(), &net, "sim-hca", 1).unwrap_err();
        assert!(matches!(err, Mlx5Error::Network(m) if m.contains("already has a device")));
        drop(dev);
    }
}

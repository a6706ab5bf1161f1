//! Helpers for the mlx5 scenario tests: a simulated ConnectX the test keeps a handle on (for
//! fault injection and for what the firmware holds), the HCA the driver brings up on it, MAD
//! buffers, a poll loop on the device's clock, and the leak check every scenario ends with.

use std::sync::Arc;
use std::sync::mpsc::{Receiver, Sender};
use std::time::Duration;

use dma::{Access, DmaLease};
use driver::DeviceBackend;
use driver::emulated::EmulatedBackend;
use driver::mlx5::{Mlx5Hca, Mlx5Port};
use driver::verbs::{
    GRH_LEN, Hca, HcaOptions, HcaPort, RecvWr, SendWr, Sge, SpecialQp, UdDest, WorkCompletion,
};
use sim::mlx5::{MELLANOX_OUI, Mlx5, Mlx5Config};
use sim::net::Network;
use sim::{ClockMode, Scheduler, Standalone, StandaloneInit};

/// Bytes of a MAD.
pub const MAD: usize = 256;
/// Bytes of a receive buffer: the GRH area, then the MAD.
pub const RECV_BUF: usize = GRH_LEN as usize + MAD;

/// Our CA in [`SimHca::with_linked_peer`].
pub const LINKED_NODE: &str = "sim-hca";
/// The CA at the other end of its link.
pub const PEER_NODE: &str = "peer";
/// Our LID there.
pub const LINKED_LID: u16 = 1;
/// The peer's LID.
pub const PEER_LID: u16 = 2;

/// A simulated ConnectX alone on its network (or linked to one peer:
/// [`SimHca::with_linked_peer`]), and the driver's backend over it.
pub struct SimHca {
    /// The model, for fault injection and firmware-side counts.
    pub model: Arc<Mlx5>,
    /// Keeps the network (SMA, loopback) alive; its faults for the link of
    /// [`SimHca::with_linked_peer`].
    pub net: Network,
    /// The backend the driver uses.
    pub backend: Arc<EmulatedBackend>,
}

impl SimHca {
    /// A default ConnectX-5 with Active ports, on a virtual clock.
    pub fn new() -> SimHca {
        Self::with_clock(ClockMode::Virtual)
    }

    /// The same on `clock`.
    pub fn with_clock(clock: ClockMode) -> SimHca {
        let (model, net) = Mlx5::standalone_default(clock).expect("simulated ConnectX");
        let model = Arc::new(model);
        let backend = embed::backend_for(model.clone(), "sim:model=mlx5");
        SimHca {
            model,
            net,
            backend,
        }
    }

    /// A ConnectX described by `cfg`, alone on its network with Active ports, on a virtual
    /// clock.
    pub fn with_config(cfg: Mlx5Config) -> SimHca {
        Self::with_config_and_pkeys(cfg, None)
    }

    /// [`SimHca::with_config`] whose port 1 has `pkeys` as its P_Key table from the start
    /// (loaded into the SMA before the device is attached, so that the device's view and
    /// the MAD_IFC answers agree); the rest of the table is empty.
    pub fn with_config_and_pkeys(cfg: Mlx5Config, pkeys: Option<&[u16]>) -> SimHca {
        let sched = Arc::new(Scheduler::new(ClockMode::Virtual));
        let net = Network::standalone(
            &Standalone {
                name: "sim-hca".to_owned(),
                num_ports: cfg.ports,
                node_guid: Some(cfg.node_guid),
                vendor_id: MELLANOX_OUI,
                device_id: cfg.device_id,
                init: StandaloneInit::Active,
            },
            sched,
        )
        .expect("one-node network");
        if let Some(pkeys) = pkeys {
            // A CA's table holds 64 entries (PartitionCap); the state file gives them all.
            let mut table = pkeys.to_vec();
            table.resize(64, 0);
            let list: Vec<String> = table.iter().map(|k| format!("{k:x}")).collect();
            let text = format!(
                "{}pkeys {:x} 1 {}\n",
                net.state_text(),
                cfg.node_guid,
                list.join(",")
            );
            net.load_state_text(&text).expect("P_Key table loads");
        }
        let model =
            Arc::new(Mlx5::on_network(cfg, &net, "sim-hca", 1).expect("simulated ConnectX"));
        let backend = embed::backend_for(model.clone(), "sim:model=mlx5");
        SimHca {
            model,
            net,
            backend,
        }
    }

    /// A one-port ConnectX on CA [`LINKED_NODE`] of a two-node fabric on a virtual clock, its
    /// port cabled to the one port of CA [`PEER_NODE`]: both ports Active, LIDs
    /// [`LINKED_LID`] and [`PEER_LID`], the SM at our LID, as if an SM had run. What goes to
    /// our own LID is looped back by the device and never touches the cable; what goes to
    /// the peer crosses it both ways, under the link's faults
    /// ([`Network::set_link_fault`], [`Network::drop_nth_leaving`]). The peer node's SMA and
    /// PMA answer unless a device is attached to its port (see `crate::wire_peer`).
    pub fn with_linked_peer() -> SimHca {
        let text = format!(
            "Hca 1 \"{LINKED_NODE}\"\n[1] \"{PEER_NODE}\"[1]\n\n\
             Hca 1 \"{PEER_NODE}\"\n[1] \"{LINKED_NODE}\"[1]\n"
        );
        let fabric = sim::fabric::Fabric::parse_str("linked-peer", &text).expect("topology");
        let net = Network::new(fabric, Arc::new(Scheduler::new(ClockMode::Virtual)));
        net.with_fabric_mut(|f| {
            for (node, lid) in [(LINKED_NODE, LINKED_LID), (PEER_NODE, PEER_LID)] {
                let id = f.node_by_name(node).expect("node");
                let p = f.port_id(id, 1).expect("port 1");
                f.set_lid(p, lid, 0).expect("a free LID");
                let s = &mut f.port_mut(p).state;
                assert_eq!(s.phys_state, sim::fabric::PhysState::LinkUp, "cabled");
                s.link_state = sim::fabric::LinkState::Active;
                s.sm_lid = LINKED_LID;
            }
        });
        let cfg = sim::mlx5::Mlx5Config {
            ports: 1,
            ..sim::mlx5::Mlx5Config::default()
        };
        let model =
            Arc::new(Mlx5::on_network(cfg, &net, LINKED_NODE, 1).expect("simulated ConnectX"));
        let backend = embed::backend_for(model.clone(), "sim:model=mlx5");
        SimHca {
            model,
            net,
            backend,
        }
    }

    /// Bring the HCA up with `options`.
    pub fn open(&self, options: HcaOptions) -> Result<Arc<Mlx5Hca>, driver::DriverError> {
        Mlx5Hca::open(self.backend.clone(), options)
    }

    /// Bring the HCA up with strict leases (every lease its own mapping, so any overrun faults).
    pub fn open_strict(&self) -> Arc<Mlx5Hca> {
        self.open(HcaOptions {
            lease_mode: dma::LeaseMode::Strict,
            ..HcaOptions::default()
        })
        .expect("bring-up")
    }

    /// The device's IOMMU faults so far.
    pub fn faults(&self) -> usize {
        self.backend.dma_mapper().fault_count()
    }

    /// Assert that nothing is left: no lease in either pool (out or quarantined), no mapping
    /// in the domain, no page held by the firmware, no firmware object, no IOMMU fault.
    pub fn assert_clean(&self, hca: &Mlx5Hca) {
        let a = hca.accounting();
        assert_eq!(a.driver_pool.leases_out, 0, "driver leases: {a:?}");
        assert_eq!(a.mad_pool.leases_out, 0, "MAD leases: {a:?}");
        assert_eq!(
            a.firmware_pages, 0,
            "pages the driver thinks are given: {a:?}"
        );
        assert_eq!(a.driver_pool.unmap_failures, 0, "{a:?}");
        assert_eq!(
            (a.driver_pool.quarantined, a.mad_pool.quarantined),
            (0, 0),
            "leases kept because the device's DMA could not be stopped: {a:?}"
        );
        self.assert_device_clean("after the close");
    }

    /// The device's half of [`SimHca::assert_clean`] (for when there is no HCA to ask, as
    /// after a failed bring-up): no mapping in the domain, no IOMMU fault, no page held by
    /// the firmware, no firmware object. `ctx` starts each message.
    pub fn assert_device_clean(&self, ctx: &str) {
        let mapper = self.backend.dma_mapper();
        assert_eq!(mapper.live_mappings(), 0, "{ctx}: IOMMU mappings left");
        assert_eq!(
            mapper.fault_count(),
            0,
            "{ctx}: IOMMU faults: {:?}",
            self.model.counters()
        );
        assert_eq!(
            self.model.pages_held(),
            0,
            "{ctx}: pages the firmware still holds"
        );
        let r = self.model.resources();
        assert_eq!(
            (r.eqs, r.cqs, r.qps, r.uars, r.pds),
            (0, 0, 0, 0, 0),
            "{ctx}: firmware objects left: {r:?}"
        );
    }
}

impl Default for SimHca {
    fn default() -> Self {
        Self::new()
    }
}

/// Schedule, one microsecond of device time from now, an event that waits (in real time, up
/// to `limit`) for `release` once the firmware has lost a command (fetched it), telling
/// `entered` which thread it holds; before that it schedules itself again, so that it holds
/// the thread that waits for the lost command and not one that only let time pass before the
/// command was fetched.
pub fn hold_once_a_command_is_lost(
    model: Arc<Mlx5>,
    entered: Sender<Option<String>>,
    release: Receiver<()>,
    limit: Duration,
) {
    let sched = model.scheduler().clone();
    sched.schedule_in(
        Duration::from_micros(1),
        Box::new(move || {
            if model.counters().commands_lost == 0 {
                hold_once_a_command_is_lost(model, entered, release, limit);
                return;
            }
            let _ = entered.send(std::thread::current().name().map(str::to_owned));
            let _ = release.recv_timeout(limit);
        }),
    );
}

/// A MAD buffer leased from the port's pool.
pub fn lease(port: &dyn HcaPort, len: usize) -> DmaLease {
    port.dma()
        .lease(len, 64, Access::ReadWrite)
        .expect("MAD buffer")
}

/// A UD destination: our own LID, `qp`'s QPN and Q_Key.
pub fn to_self(lid: u16, qp: SpecialQp) -> UdDest {
    UdDest {
        dlid: lid,
        sl: 0,
        src_path_bits: 0,
        remote_qpn: qp.qpn(),
        remote_qkey: match qp {
            SpecialQp::Smi => 0,
            SpecialQp::Gsi => driver::mlx5::QP1_QKEY,
        },
        pkey_index: 0,
        grh: None,
    }
}

/// A send of `buf` (its whole length).
pub fn send_wr(wr_id: u64, buf: &DmaLease, dest: UdDest) -> SendWr {
    SendWr {
        wr_id,
        sge: Sge {
            iova: buf.iova(),
            len: buf.len() as u32,
        },
        dest,
    }
}

/// A receive into `buf`.
pub fn recv_wr(wr_id: u64, buf: &DmaLease) -> RecvWr {
    RecvWr {
        wr_id,
        sge: Sge {
            iova: buf.iova(),
            len: buf.len() as u32,
        },
    }
}

/// Poll `port` until `n` completions arrived or `budget` of device time passed.
pub fn poll_n(port: &dyn HcaPort, n: usize, budget: Duration) -> Vec<WorkCompletion> {
    let mut out = Vec::new();
    let end = port.now() + budget;
    while out.len() < n {
        let before = out.len();
        let want = n - out.len();
        port.poll(&mut out, want).expect("poll");
        if out.len() == before {
            if port.now() >= end {
                break;
            }
            port.wait((port.now() + Duration::from_micros(100)).min(end));
        }
    }
    out
}

/// The mlx5 port `n` of `hca` as the verbs interface sees it.
pub fn port(hca: &Mlx5Hca, n: u8) -> Arc<Mlx5Port> {
    hca.mlx5_port(n).expect("port")
}

/// What a test of the GSI send queue on port 1 starts from: the port, its LID, the hardware
/// QPN of its GSI QP, and a MAD buffer holding `mad(0x09, 1, 1)`.
pub fn gsi_send_setup(hca: &Mlx5Hca) -> (Arc<Mlx5Port>, u16, u32, DmaLease) {
    let p = port(hca, 1);
    let lid = p.attrs().expect("port attributes").lid;
    let qpn = p.hw_qpn(SpecialQp::Gsi);
    let buf = lease(p.as_ref(), MAD);
    buf.write(0, &mad(0x09, 1, 1)).expect("write the MAD");
    (p, lid, qpn, buf)
}

/// A 256-byte MAD of class `class` (0x01 LID-routed SMP, 0x09.. vendor) with a recognisable
/// payload: byte `i` of the data is `seed + i`.
pub fn mad(class: u8, tid: u64, seed: u8) -> [u8; MAD] {
    let mut m = [0u8; MAD];
    m[0] = 1;
    m[1] = class;
    m[2] = 1;
    m[3] = 0x01; // Get
    m[8..16].copy_from_slice(&tid.to_be_bytes());
    m[16..18].copy_from_slice(&0xff00u16.to_be_bytes());
    for (i, b) in m.iter_mut().enumerate().skip(24) {
        *b = seed.wrapping_add(i as u8);
    }
    m
}

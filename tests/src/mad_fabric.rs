//! Two simulated ConnectX HCAs, each with the MAD layer open, on one simulated fabric: ibsim's
//! `net.2sw2path4hca` (two switches, four CAs; our HCAs are `Hca1` and `Hca2`, port 1 each,
//! `Hca3` and `Hca4` are the network's own simulated CAs). For the scenarios of the SMI
//! (directed routes through switches, SMPs answered by our own SMA) and of RMPP between two of
//! our ports (`tests/mad_smi.rs`, `tests/mad_rmpp.rs`).
//!
//! [`MadFabric::configure`] is a small subnet manager run by Hca1 through its own MAD layer, as
//! OpenSM's sweep does (reference/mad-stack.md §5.1): LIDs by PortInfo Set (Hca1's own by a
//! 0-hop SMP its SMA answers locally, Hca2's answered by Hca2's MAD layer), the switches'
//! forwarding tables, then every linked port to Armed and Active. The LIDs and tables are the
//! ones OpenSM chose on this fabric, written out by hand (as in `sim/tests/netutil/sweep.rs`).

use std::sync::Arc;
use std::time::Duration;

use driver::mlx5::Mlx5Hca;
use driver::verbs::{HcaOptions, HcaPort, SpecialQp, UdDest, WcStatus};
use mad::wire::attr::linear_forwarding_table::{LinearForwardingTable, LinearForwardingTableRepr};
use mad::wire::attr::port_info::{PhysPortState, PortInfo, PortInfoRepr, PortState};
use mad::wire::attr::switch_info::{SwitchInfo, SwitchInfoRepr};
use mad::wire::smp::{DirectedRoute, Smp, SmpRepr, SmpRoute};
use mad::wire::{attr_id, method, status};
use mad::{Agent, AgentSpec, Event, Port, PortConfig, RecvMad, SendCompletion, SendRequest};
use sim::fabric::{Fabric, PortId};
use sim::mlx5::{Mlx5, Mlx5Config};
use sim::net::Network;
use sim::{ClockMode, Scheduler};

use crate::mad_rig::{MadRig, Tracker};
use crate::mlx5::SimHca;

/// Directed routes from Hca1 port 1.
pub const SWITCH1: &[u8] = &[1];
/// Switch2, through Switch1's port 3.
pub const SWITCH2: &[u8] = &[1, 3];
/// Our second HCA.
pub const HCA2: &[u8] = &[1, 3, 1];
/// The network's CA behind Switch1.
pub const HCA3: &[u8] = &[1, 2];
/// The network's CA behind Switch2.
pub const HCA4: &[u8] = &[1, 3, 2];

/// LIDs [`MadFabric::configure`] assigns.
pub const LID_HCA1: u16 = 1;
/// Switch1's LID.
pub const LID_SWITCH1: u16 = 2;
/// Switch2's LID.
pub const LID_SWITCH2: u16 = 3;
/// Hca2's LID.
pub const LID_HCA2: u16 = 4;
/// Hca3's LID.
pub const LID_HCA3: u16 = 5;
/// Hca4's LID.
pub const LID_HCA4: u16 = 6;

/// Switch1's and Switch2's LFT block 0 (LIDs 0-6) as OpenSM programmed them.
pub const LFT_SWITCH1: [u8; 7] = [0xFF, 1, 0, 3, 3, 2, 5];
/// Switch2's.
pub const LFT_SWITCH2: [u8; 7] = [0xFF, 3, 3, 0, 1, 5, 2];

/// The path to the topology file in the sim crate.
pub fn example(name: &str) -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../sim/tests/net-examples")
        .join(name)
}

/// A LID-routed destination on `qp`.
pub fn lid_dest(dlid: u16, qp: SpecialQp) -> UdDest {
    UdDest {
        dlid,
        remote_qpn: qp.qpn(),
        remote_qkey: match qp {
            SpecialQp::Smi => 0,
            SpecialQp::Gsi => mad::QP1_QKEY,
        },
        ..UdDest::DIRECTED_ROUTE
    }
}

/// A directed-route SMP (`m`, `attr`, `attr_mod`, `data`) along `path`, as a client builds
/// it: HopPointer 0, permissive DrSLID and DrDLID.
pub fn dr_smp(m: u8, path: &[u8], attr: u16, attr_mod: u32, data: [u8; 64], tid: u64) -> Vec<u8> {
    let route = SmpRoute::Directed(DirectedRoute::from_path(path).expect("at most 63 hops"));
    let mut repr = SmpRepr::request(m, route, attr, attr_mod, tid);
    repr.data = data;
    let mut b = vec![0u8; 256];
    repr.emit(&mut Smp::new_checked(&mut b[..]).expect("256 bytes"));
    b
}

/// A LID-routed SMP.
pub fn lid_smp(m: u8, attr: u16, attr_mod: u32, tid: u64) -> Vec<u8> {
    let repr = SmpRepr::request(m, SmpRoute::LidRouted, attr, attr_mod, tid);
    let mut b = vec![0u8; 256];
    repr.emit(&mut Smp::new_checked(&mut b[..]).expect("256 bytes"));
    b
}

/// The SMP of a received MAD.
pub fn smp_of(r: &RecvMad) -> SmpRepr {
    SmpRepr::parse(&Smp::new_checked(&r.mad[..]).expect("256 bytes")).expect("an SMP")
}

/// Our two HCAs on the fabric.
pub struct MadFabric {
    /// The running network.
    pub net: Network,
    /// Hca1 port 1 (the SM's port).
    pub hca1: MadRig,
    /// Hca2 port 1.
    pub hca2: MadRig,
}

/// A simulated ConnectX attached to `node` port 1 of `net`, its driver (strict leases) and
/// MAD layer up.
fn attach(net: &Network, node: &str) -> MadRig {
    attach_with(
        net,
        node,
        HcaOptions {
            lease_mode: dma::LeaseMode::Strict,
            ..HcaOptions::default()
        },
    )
}

/// A simulated ConnectX attached to `node` port 1 of `net`, its driver brought up with
/// `options` and its MAD layer opened.
pub fn attach_with(net: &Network, node: &str, options: HcaOptions) -> MadRig {
    attach_configured(net, node, options, PortConfig::default())
}

/// As [`attach_with`], with the MAD layer opened with `config`.
pub fn attach_configured(
    net: &Network,
    node: &str,
    options: HcaOptions,
    config: PortConfig,
) -> MadRig {
    let cfg = Mlx5Config {
        ports: 1,
        ..Mlx5Config::default()
    };
    let model = Arc::new(Mlx5::on_network(cfg, net, node, 1).expect("attach"));
    let backend = embed::backend_for(model.clone(), "sim:model=mlx5");
    let sim = SimHca {
        model,
        net: net.clone(),
        backend,
    };
    let hca: Arc<Mlx5Hca> = sim.open(options).expect("bring-up");
    let hw = hca.mlx5_port(1).expect("port 1");
    let port = Port::open(hw.clone(), config).expect("MAD layer");
    let lid = hw.attrs().expect("port attributes").lid;
    MadRig::assemble(sim, hca, hw, port, lid)
}

impl MadFabric {
    /// The fabric on a virtual clock, both HCAs up, nothing configured (ports Init, no LIDs).
    pub fn new() -> MadFabric {
        let fabric = Fabric::parse_file(example("net.2sw2path4hca")).expect("topology");
        let net = Network::new(fabric, Arc::new(Scheduler::new(ClockMode::Virtual)));
        let hca1 = attach(&net, "Hca1");
        let hca2 = attach(&net, "Hca2");
        MadFabric { net, hca1, hca2 }
    }

    /// A fabric port by node name and number.
    pub fn port_id(&self, node: &str, port: u8) -> PortId {
        self.net.port(node, port).expect("a port of the topology")
    }

    /// One round of both HCAs' progress loops, `step` of device time at most.
    fn step(&self, step: Duration) {
        for r in [&self.hca1, &self.hca2] {
            r.port.progress_until(r.port.deadline_after(step));
        }
    }

    /// Drive both ports until `done` (given the events of `watch` so far, in `tracker`) or
    /// `within` of device time; returns whether `done` said so.
    pub fn pump_until(
        &self,
        watch: &[&Agent],
        tracker: &mut Tracker,
        within: Duration,
        mut done: impl FnMut(&Tracker) -> bool,
    ) -> bool {
        let deadline = self.hca1.port.deadline_after(within);
        loop {
            for a in watch {
                while let Some(e) = a.try_event() {
                    tracker.absorb(e);
                }
            }
            if done(tracker) {
                return true;
            }
            if self.hca1.port.now() >= deadline {
                return false;
            }
            self.step(Duration::from_millis(1));
        }
    }

    /// Drive both ports for `within` of device time.
    pub fn pump(&self, watch: &[&Agent], tracker: &mut Tracker, within: Duration) {
        self.pump_until(watch, tracker, within, |_| false);
    }

    /// Send `req` from `agent` and drive both ports until its completion: returns the
    /// response (if one came) and the completion.
    pub fn call(&self, agent: &Agent, req: SendRequest<'_>) -> (Option<RecvMad>, SendCompletion) {
        let id = agent.send(req).expect("accepted");
        let mut t = Tracker::default();
        assert!(
            self.pump_until(&[agent], &mut t, Duration::from_secs(10), |t| t
                .done
                .contains_key(&id)),
            "no completion for {id}"
        );
        let resp = t
            .recvs
            .into_iter()
            .find(|r| r.response_to.is_some_and(|s| s.id == id));
        (resp, t.done.remove(&id).expect("completed"))
    }

    /// A directed-route call from Hca1's `agent` that must be answered: the response SMP.
    pub fn dr_call(
        &self,
        agent: &Agent,
        m: u8,
        path: &[u8],
        attr: u16,
        attr_mod: u32,
        data: [u8; 64],
    ) -> SmpRepr {
        let req = SendRequest::new(
            dr_smp(m, path, attr, attr_mod, data, 0x5EED),
            UdDest::DIRECTED_ROUTE,
        )
        .timeout_ms(100)
        .retries(2);
        let (resp, c) = self.call(agent, req);
        assert_eq!(c.status, WcStatus::Success, "{attr:#x} along {path:?}");
        let r = smp_of(&resp.expect("a response"));
        assert_eq!(r.method, method::GET_RESP);
        r
    }

    /// Read-modify-write of PortInfo `port` along `path`, state fields "no change" unless
    /// `f` sets them.
    fn update_port(&self, sm: &Agent, path: &[u8], port: u32, f: impl FnOnce(&mut PortInfoRepr)) {
        let got = self.dr_call(sm, method::GET, path, attr_id::sm::PORT_INFO, port, [0; 64]);
        assert_eq!(got.status, status::SUCCESS);
        let mut pi = PortInfoRepr::parse(&PortInfo::new_checked(&got.data[..]).expect("64"))
            .expect("PortInfo");
        pi.port_state = PortState::NoChange;
        pi.port_physical_state = PhysPortState::NoChange;
        f(&mut pi);
        let mut d = [0u8; 64];
        pi.emit(&mut PortInfo::new_checked(&mut d[..]).expect("64"));
        let set = self.dr_call(sm, method::SET, path, attr_id::sm::PORT_INFO, port, d);
        assert_eq!(set.status, status::SUCCESS, "PortInfo Set along {path:?}");
    }

    fn program_switch(&self, sm: &Agent, path: &[u8], lft: &[u8]) {
        let mut ports = [0xFFu8; 64];
        ports[..lft.len()].copy_from_slice(lft);
        let mut d = [0u8; 64];
        LinearForwardingTableRepr { ports }
            .emit(&mut LinearForwardingTable::new_checked(&mut d[..]).expect("64"));
        let r = self.dr_call(
            sm,
            method::SET,
            path,
            attr_id::sm::LINEAR_FORWARDING_TABLE,
            0,
            d,
        );
        assert_eq!(r.status, status::SUCCESS);
        let r = self.dr_call(sm, method::GET, path, attr_id::sm::SWITCH_INFO, 0, [0; 64]);
        let mut si = SwitchInfoRepr::parse(&SwitchInfo::new_checked(&r.data[..]).expect("64"))
            .expect("SwitchInfo");
        si.linear_fdb_top = (lft.len() - 1) as u16;
        si.life_time_value = 18;
        // Writing 1 clears it.
        si.port_state_change = true;
        let mut d = [0u8; 64];
        si.emit(&mut SwitchInfo::new_checked(&mut d[..]).expect("64"));
        let r = self.dr_call(sm, method::SET, path, attr_id::sm::SWITCH_INFO, 0, d);
        assert_eq!(r.status, status::SUCCESS);
    }

    /// Configure the subnet from Hca1 through its MAD layer: LIDs, forwarding tables, and
    /// every linked port Active. Returns when both HCAs' ports report their LIDs.
    pub fn configure(&mut self) {
        let sm = self.hca1.agent(AgentSpec::responses_only(SpecialQp::Smi));
        let lid = |pi: &mut PortInfoRepr, lid: u16| {
            pi.lid = lid;
            pi.master_sm_lid = LID_HCA1;
            pi.gid_prefix = 0xfe80_0000_0000_0000;
        };
        self.update_port(&sm, &[], 1, |pi| lid(pi, LID_HCA1));
        self.update_port(&sm, SWITCH1, 0, |pi| lid(pi, LID_SWITCH1));
        self.update_port(&sm, SWITCH2, 0, |pi| lid(pi, LID_SWITCH2));
        self.update_port(&sm, HCA2, 0, |pi| lid(pi, LID_HCA2));
        self.update_port(&sm, HCA3, 0, |pi| lid(pi, LID_HCA3));
        self.update_port(&sm, HCA4, 0, |pi| lid(pi, LID_HCA4));
        self.program_switch(&sm, SWITCH1, &LFT_SWITCH1);
        self.program_switch(&sm, SWITCH2, &LFT_SWITCH2);
        let linked: [(&[u8], u32); 12] = [
            (&[], 1),
            (HCA2, 0),
            (HCA3, 0),
            (HCA4, 0),
            (SWITCH1, 1),
            (SWITCH1, 2),
            (SWITCH1, 3),
            (SWITCH1, 5),
            (SWITCH2, 1),
            (SWITCH2, 2),
            (SWITCH2, 3),
            (SWITCH2, 5),
        ];
        for state in [PortState::Armed, PortState::Active] {
            for (path, port) in linked {
                self.update_port(&sm, path, port, |pi| pi.port_state = state);
            }
        }
        sm.deregister();
        // The port changes reach the drivers as events; the MAD layers read them.
        let mut t = Tracker::default();
        let ok = self.pump_until(&[], &mut t, Duration::from_secs(1), |_| {
            let a = self.hca1.hw.attrs().expect("attrs");
            let b = self.hca2.hw.attrs().expect("attrs");
            a.lid == LID_HCA1 && b.lid == LID_HCA2
        });
        assert!(ok, "both HCAs see their LIDs");
        self.hca1.lid = LID_HCA1;
        self.hca2.lid = LID_HCA2;
    }

    /// Both HCAs clean (leases, mappings, IOMMU faults, nothing outstanding).
    pub fn assert_clean(&self) {
        self.hca1.assert_clean();
        self.hca2.assert_clean();
    }

    /// Close both HCAs and check nothing is left anywhere.
    pub fn finish(self) {
        let MadFabric { net, hca1, hca2 } = self;
        hca1.finish();
        hca2.finish();
        drop(net);
    }
}

impl Default for MadFabric {
    fn default() -> Self {
        MadFabric::new()
    }
}

/// The events of `agent` now queued.
pub fn drain(agent: &Agent) -> Vec<Event> {
    let mut v = Vec::new();
    agent.events().drain_into(&mut v);
    v
}

//! The simulated ConnectX on the simulated network: alone on its one-node fabric (the
//! network's SMA answers MAD_IFC and packets to its own LID loop back), the P_Key table and
//! LID it reads from the SMA, port changes an SMP causes, and the SMPs QP0 drops counted in
//! the port's VL15Dropped.

mod mlx5rig;

use firmware_cmds::mlx5::cqe::CqeBody;
use firmware_cmds::mlx5::eqe::{EqeEvent, EventType, port_change};
use firmware_cmds::mlx5::ops::mad_ifc::MadIfc;
use firmware_cmds::mlx5::ops::vport::QueryHcaVportContext;
use firmware_cmds::mlx5::qpc::QpServiceType;
use mad_wire::attr::node_info::NodeInfo;
use mad_wire::attr::port_counters::PortCounters;
use mad_wire::attr::port_info::{PhysPortState, PortInfo, PortState};
use mad_wire::attr_id::sm;
use mad_wire::smp::{Smp, SmpRepr, SmpRoute};
use mad_wire::{MAD_LEN, method};
use mlx5rig::{QP1_QKEY, Rig, SendSpec};
use sim::mlx5::{DropReason, Mlx5, Mlx5Config};
use sim::net::StandaloneInit;
use sim::{ClockMode, Device};

fn smp_bytes(r: &SmpRepr) -> [u8; MAD_LEN] {
    let mut mad = [0u8; MAD_LEN];
    let mut smp = Smp::new_checked(&mut mad[..]).unwrap();
    r.emit(&mut smp);
    mad
}

fn mad_ifc(rig: &mut Rig, mad: [u8; MAD_LEN]) -> SmpRepr {
    let out = rig
        .exec(&MadIfc {
            ignore_mkey: true,
            ignore_bkey: false,
            remote_lid: 0,
            port: 1,
            mad,
        })
        .unwrap();
    SmpRepr::parse(&Smp::new_checked(&out.mad[..]).unwrap()).unwrap()
}

fn standalone() -> Rig {
    let (dev, _net) = Mlx5::standalone(
        Mlx5Config::default(),
        ClockMode::Virtual,
        "hca-under-test",
        StandaloneInit::Active,
    )
    .unwrap();
    let mut rig = Rig::on(dev);
    rig.up(false);
    rig
}

#[test]
fn mad_ifc_is_answered_by_the_sma_of_the_own_node() {
    let mut rig = standalone();
    let req = SmpRepr::directed_get(&[], sm::NODE_INFO, 0, 0x1234).unwrap();
    let resp = mad_ifc(&mut rig, smp_bytes(&req));
    assert_eq!(resp.method, method::GET_RESP);
    assert_eq!(resp.tid, 0x1234);
    let ni = NodeInfo::new_checked(&resp.data[..]).unwrap();
    let guid = rig.dev.mlx5_config().node_guid;
    assert_eq!(ni.node_guid(), guid);
    assert_eq!(ni.port_guid(), guid + 1);
    assert_eq!(ni.vendor_id(), sim::mlx5::MELLANOX_OUI);
    assert_eq!(ni.device_id(), rig.dev.mlx5_config().device_id);
    assert_eq!(ni.local_port_num(), 1);
    assert_eq!(rig.dev.iommu().fault_count(), 0);
}

#[test]
fn a_lid_set_through_mad_ifc_shows_in_the_vport_context_and_as_an_event() {
    let mut rig = standalone();
    let mut eq = rig.create_eq(&[EventType::PORT_CHANGE.0], 4, 0);
    eq.drain(&rig);
    let ctx = |rig: &mut Rig| {
        rig.exec(&QueryHcaVportContext {
            other_vport: false,
            port_num: 1,
            vport_number: 0,
        })
        .unwrap()
    };
    assert_eq!(ctx(&mut rig).lid, 1);
    let get = SmpRepr::directed_get(&[], sm::PORT_INFO, 1, 7).unwrap();
    let cur = mad_ifc(&mut rig, smp_bytes(&get));
    let mut set = get;
    set.method = method::SET;
    set.data = cur.data;
    {
        // A Set as an SM sends it: the new LID, states left alone.
        let mut pi = PortInfo::new_checked(&mut set.data[..]).unwrap();
        pi.set_lid(0x42);
        pi.set_port_state(PortState::NoChange);
        pi.set_port_physical_state(PhysPortState::NoChange);
    }
    let resp = mad_ifc(&mut rig, smp_bytes(&set));
    assert_eq!(resp.status, 0);
    assert_eq!(PortInfo::new_checked(&resp.data[..]).unwrap().lid(), 0x42);
    assert_eq!(ctx(&mut rig).lid, 0x42, "read again after the Set");
    rig.settle();
    let events: Vec<EqeEvent> = eq
        .drain(&rig)
        .iter()
        .map(firmware_cmds::mlx5::eqe::Eqe::event)
        .collect();
    assert!(
        events.contains(&EqeEvent::PortChange {
            port: 1,
            sub_type: port_change::LID
        }),
        "{events:?}"
    );
}

#[test]
fn a_gsi_mad_to_the_own_lid_comes_back_through_the_network() {
    let mut rig = standalone();
    let eq = rig.create_eq(&[EventType::COMP.0], 4, 0);
    let scq = rig.create_cq(eq.eqn, 4);
    let rcq = rig.create_cq(eq.eqn, 4);
    let mut qp = rig.create_qp(QpServiceType::QP1, &scq, &rcq, 4, 4);
    rig.qp_to_rts(&qp, QP1_QKEY);
    let rbuf = rig.alloc(512, 64);
    qp.post_recv(&rig, rbuf, 512);
    // A PerfMgmt Get(PortCounters) as a GSI MAD.
    let mut mad = [0u8; MAD_LEN];
    mad[0] = 1;
    mad[1] = mad_wire::class::PERF_MGMT;
    mad[2] = 1;
    mad[3] = method::GET;
    mad[16..18].copy_from_slice(&0x0012u16.to_be_bytes());
    let addr = rig.alloc(256, 64);
    rig.mem.write(addr, &mad);
    let spec = SendSpec {
        dlid: 1,
        ..SendSpec::mad(addr)
    };
    let ctrl = qp.write_send(&rig, &spec);
    rig.ring_send(&ctrl);
    let mut scq = scq;
    assert!(scq.poll(&rig).is_some());
    let mut rcq = rcq;
    assert!(rcq.poll(&rig).is_none(), "delivery waits for the scheduler");
    rig.settle();
    let c = rcq.poll(&rig).expect("the MAD came back to the device");
    let CqeBody::Responder(r) = c.body else {
        panic!("responder CQE expected");
    };
    assert_eq!((r.src_qpn, r.slid, r.pkey()), (1, 1, 0xffff));
    assert_eq!(rig.mem.bytes(rbuf + 40, 256), mad.to_vec());
}

/// A PerfMgt Get(PortCounters) of port 1 through MAD_IFC, as the host's perfquery asks its own
/// port: the VL15Dropped it answers.
fn vl15_dropped_by_mad_ifc(rig: &mut Rig) -> u16 {
    let mut mad = [0u8; MAD_LEN];
    mad[0] = 1;
    mad[1] = mad_wire::class::PERF_MGMT;
    mad[2] = 1;
    mad[3] = method::GET;
    mad[16..18].copy_from_slice(&mad_wire::attr_id::pma::PORT_COUNTERS.to_be_bytes());
    mad[64 + 1] = 1; // PortSelect
    let out = rig
        .exec(&MadIfc {
            ignore_mkey: true,
            ignore_bkey: false,
            remote_lid: 0,
            port: 1,
            mad,
        })
        .unwrap();
    let pm = mad_wire::perf::PerfMad::new_checked(&out.mad[..]).unwrap();
    assert_eq!(pm.header().status(), 0);
    PortCounters::new_checked(pm.data()).unwrap().vl15_dropped()
}

#[test]
fn an_smp_qp0_cannot_take_counts_in_the_ports_vl15_dropped() {
    let (dev, net) = Mlx5::standalone(
        Mlx5Config::default(),
        ClockMode::Virtual,
        "hca-under-test",
        StandaloneInit::Active,
    )
    .unwrap();
    let port = net.port("hca-under-test", 1).unwrap();
    let mut rig = Rig::on(dev);
    rig.up(false);
    let eq = rig.create_eq(&[EventType::COMP.0], 4, 0);
    let scq = rig.create_cq(eq.eqn, 4);
    let rcq = rig.create_cq(eq.eqn, 4);
    let mut qp = rig.create_qp(QpServiceType::QP0, &scq, &rcq, 4, 4);
    rig.qp_to_rts(&qp, 0);
    // A LID-routed SMP from QP0 to the port's own LID: it loops back to QP0, which has no
    // receive posted.
    let req = SmpRepr::request(method::GET, SmpRoute::LidRouted, sm::NODE_INFO, 0, 0x77);
    let addr = rig.alloc(256, 64);
    rig.mem.write(addr, &smp_bytes(&req));
    let spec = SendSpec {
        dlid: 1,
        dqpn: 0,
        qkey: 0,
        ..SendSpec::mad(addr)
    };
    let send = |rig: &mut Rig, qp: &mut mlx5rig::QpRing| {
        let ctrl = qp.write_send(rig, &spec);
        rig.ring_send(&ctrl);
        rig.settle();
    };
    assert_eq!(net.counters(port).vl15_dropped, 0);
    send(&mut rig, &mut qp);
    let drops = rig.dev.counters().dropped(DropReason::NoRecvWqe);
    assert_eq!(drops, 1, "the device dropped it");
    assert_eq!(net.counters(port).vl15_dropped, 1, "and the port counts it");
    assert_eq!(
        net.drops()
            .get(sim::net::DropReason::DeviceDropped(sim::ReceiveDrop::Vl15)),
        1,
        "and the network's drops"
    );
    assert_eq!(vl15_dropped_by_mad_ifc(&mut rig), 1);
    // With a receive posted the next one is taken, not counted.
    let rbuf = rig.alloc(512, 64);
    qp.post_recv(&rig, rbuf, 512);
    send(&mut rig, &mut qp);
    let mut rcq = rcq;
    assert!(rcq.poll(&rig).is_some(), "QP0 took the second SMP");
    assert_eq!(net.counters(port).vl15_dropped, 1);
}

//! A port's link changed by another party in the middle of a send queue's doorbell run: the
//! device must read the link for each packet, so that what it counts (sent, or dropped for
//! want of a link), the SLID it stamps and the link it transmits on all come from the same
//! port view. Reading the link once per run (e44b092, backed out) counted a packet as a
//! NoLink drop and still put it on the old link, or stamped the new link's SLID on a packet
//! sent on the old one.
//!
//! The change is made from inside the link's `transmit` of the run's first packet: the
//! device calls its link with no lock held, so a fabric (or a test) may detach or re-attach
//! the port there, and nothing else can time the change inside a run without sleeps.

mod mlx5rig;

use std::sync::{Arc, Mutex, Weak};

use firmware_cmds::mlx5::cqe::{CqeBody, CqeOpcode};
use firmware_cmds::mlx5::eqe::EventType;
use firmware_cmds::mlx5::qpc::QpServiceType;
use firmware_cmds::mlx5::wqe::WqeOpcode;
use mlx5rig::{QP1_QKEY, Rig, SendSpec};
use sim::mlx5::{DropReason, Mlx5, Mlx5Counters};
use sim::{Packet, PortLink, PortSnapshot};

/// The LID of the link the port starts on.
const FIRST_LID: u16 = 0x21;
/// The LID of the link the port is moved to mid-run.
const SECOND_LID: u16 = 0x42;
/// Where the sends go: a LID neither link has, so nothing loops back.
const REMOTE_LID: u16 = 0x77;
/// WQEs posted behind one doorbell.
const WQES: usize = 3;

/// What the run's first transmit does to the port.
type Action = Box<dyn FnOnce() + Send>;

/// A port link that records every packet it is given and, on its first transmit, runs a
/// one-shot action: the other party changing the port's link while the run goes on.
struct Tap {
    lid: u16,
    sent: Mutex<Vec<Packet>>,
    on_first_transmit: Mutex<Option<Action>>,
}

impl Tap {
    fn new(lid: u16) -> Arc<Tap> {
        Arc::new(Tap {
            lid,
            sent: Mutex::new(Vec::new()),
            on_first_transmit: Mutex::new(None),
        })
    }

    fn on_first_transmit(&self, action: impl FnOnce() + Send + 'static) {
        *self.on_first_transmit.lock().unwrap() = Some(Box::new(action));
    }

    fn sent(&self) -> Vec<Packet> {
        self.sent.lock().unwrap().clone()
    }
}

impl PortLink for Tap {
    fn transmit(&self, packet: Packet) {
        self.sent.lock().unwrap().push(packet);
        // Taken out first: the action may drop the device's last reference to this link.
        let action = self.on_first_transmit.lock().unwrap().take();
        if let Some(action) = action {
            action();
        }
    }

    fn local_mad(&self, _mad: &[u8; 256], _ignore_mkey: bool) -> Option<[u8; 256]> {
        None
    }

    fn port_info(&self) -> PortSnapshot {
        mlx5rig::active_port(self.lid)
    }

    fn modify_capability_mask(&self, _set: u32, _clear: u32) -> u32 {
        0
    }
}

/// What one doorbell did.
struct Run {
    /// The MAD of each posted WQE, in posting order (each is different).
    mads: Vec<[u8; 256]>,
    /// How the counters moved across the doorbell.
    sent: u64,
    no_link: u64,
    dropped: u64,
    send_wqes: u64,
    /// The send CQEs' WQE counters, and the WQE counters of the posted WQEs.
    cqe_counters: Vec<u16>,
    wqe_counters: Vec<u16>,
}

/// Brings up a device (virtual clock) with port 1 on `first`, a QP of `st` in RTS, posts
/// [`WQES`] signaled sends and rings one doorbell for all of them, `first` doing `change`
/// to the port on its first transmit.
fn one_doorbell_run(
    st: QpServiceType,
    first: &Arc<Tap>,
    change: impl FnOnce(&Mlx5) + Send + 'static,
) -> Run {
    let mut rig = Rig::new();
    rig.up(false);
    rig.dev.attach_port(1, first.clone()).unwrap();
    let eq = rig.create_eq(&[EventType::COMP.0], 5, 0);
    let mut scq = rig.create_cq(eq.eqn, 5);
    let rcq = rig.create_cq(eq.eqn, 5);
    let mut qp = rig.create_qp(st, &scq, &rcq, 5, 5);
    let (qkey, dqpn) = if st == QpServiceType::QP0 {
        (0, 0)
    } else {
        (QP1_QKEY, 1)
    };
    rig.qp_to_rts(&qp, qkey);

    // The action holds the device weakly: the device holds the link that holds the action.
    let dev: Weak<Mlx5> = Arc::downgrade(&rig.dev);
    first.on_first_transmit(move || {
        if let Some(dev) = dev.upgrade() {
            change(&dev);
        }
    });

    let mut mads = Vec::new();
    let mut wqe_counters = Vec::new();
    let mut last = None;
    for i in 0..WQES {
        let addr = rig.alloc(256, 64);
        let mad: [u8; 256] = std::array::from_fn(|b| (b as u8) ^ (0x10 * (i as u8 + 1)));
        rig.mem.write(addr, &mad);
        let spec = SendSpec {
            dlid: REMOTE_LID,
            dqpn,
            qkey,
            ..SendSpec::mad(addr)
        };
        let ctrl = qp.write_send(&rig, &spec);
        mads.push(mad);
        wqe_counters.push(ctrl.wqe_index);
        last = Some(ctrl);
    }
    let before = rig.dev.counters();
    rig.ring_send(&last.expect("WQEs were posted"));
    let after = rig.dev.counters();

    let cqes = scq.drain(&rig);
    for c in &cqes {
        assert_eq!(c.opcode, CqeOpcode::REQ, "a successful send completion");
        assert_eq!(c.qpn, qp.qpn);
        assert!(
            matches!(c.body, CqeBody::Requester(r) if r.wqe_opcode == WqeOpcode::SEND.0),
            "{c:?}"
        );
    }
    let delta = |f: fn(&Mlx5Counters) -> u64| f(&after) - f(&before);
    Run {
        mads,
        sent: delta(|c| c.packets_sent),
        no_link: delta(|c| c.dropped(DropReason::NoLink)),
        dropped: delta(Mlx5Counters::dropped_total),
        send_wqes: delta(|c| c.send_wqes),
        cqe_counters: cqes.iter().map(|c| c.wqe_counter).collect(),
        wqe_counters,
    }
}

impl Run {
    /// Which posted WQE (by posting order) each of `packets` carries the MAD of; `None` for
    /// a MAD that was not posted.
    fn wqes_of(&self, packets: &[Packet]) -> Vec<Option<usize>> {
        packets
            .iter()
            .map(|p| self.mads.iter().position(|m| m == &*p.mad))
            .collect()
    }
}

/// `Some(i)` for each of `range`: the posted WQEs expected on a link.
fn wqes(range: std::ops::Range<usize>) -> Vec<Option<usize>> {
    range.map(Some).collect()
}

/// "QP0" or "QP1", for the assertion messages.
fn qp_name(st: QpServiceType) -> &'static str {
    if st == QpServiceType::QP0 {
        "QP0"
    } else {
        "QP1"
    }
}

fn detached_by_the_first_transmit(st: QpServiceType) {
    let qp = qp_name(st);
    let first = Tap::new(FIRST_LID);
    let run = one_doorbell_run(st, &first, |dev| dev.detach_port(1).unwrap());

    let on_wire = first.sent();
    assert_eq!(
        run.wqes_of(&on_wire),
        wqes(0..1),
        "{qp}: only the packet sent before the detach went out on the old link"
    );
    assert_eq!(
        run.sent,
        on_wire.len() as u64,
        "{qp}: what is counted as sent is what was transmitted"
    );
    assert_eq!(
        run.no_link,
        (WQES - 1) as u64,
        "{qp}: the packets behind the detach are NoLink drops"
    );
    assert_eq!(
        run.dropped, run.no_link,
        "{qp}: and dropped for no other reason"
    );
    assert_eq!(on_wire[0].slid, FIRST_LID);
    assert_eq!(run.send_wqes, WQES as u64);
    assert_eq!(
        run.cqe_counters, run.wqe_counters,
        "{qp}: one CQE per WQE, in order, dropped or not"
    );
}

fn moved_to_a_second_link_by_the_first_transmit(st: QpServiceType) {
    let qp = qp_name(st);
    let first = Tap::new(FIRST_LID);
    let second = Tap::new(SECOND_LID);
    let to = second.clone();
    let run = one_doorbell_run(st, &first, move |dev| {
        dev.attach_port(1, to).unwrap();
    });

    let old = first.sent();
    let new = second.sent();
    assert_eq!(
        run.wqes_of(&old),
        wqes(0..1),
        "{qp}: the old link got only the packet sent before the move"
    );
    assert_eq!(
        run.wqes_of(&new),
        wqes(1..WQES),
        "{qp}: the packets behind the move went out on the new link, in order"
    );
    assert_eq!(old[0].slid, FIRST_LID, "{qp}: the old view's SLID");
    for p in &new {
        assert_eq!(
            p.slid, SECOND_LID,
            "{qp}: a packet on the new link carries the new view's SLID"
        );
    }
    assert_eq!(
        run.sent,
        (old.len() + new.len()) as u64,
        "{qp}: what is counted as sent is what was transmitted"
    );
    assert_eq!(run.sent, WQES as u64, "{qp}: nothing dropped");
    assert_eq!(run.dropped, 0, "{qp}");
    assert_eq!(run.send_wqes, WQES as u64);
    assert_eq!(
        run.cqe_counters, run.wqe_counters,
        "{qp}: one CQE per WQE, in order"
    );
}

#[test]
fn qp1_sends_behind_a_detach_in_the_same_doorbell_run_are_no_link_drops_not_transmitted() {
    detached_by_the_first_transmit(QpServiceType::QP1);
}

#[test]
fn qp0_sends_behind_a_detach_in_the_same_doorbell_run_are_no_link_drops_not_transmitted() {
    detached_by_the_first_transmit(QpServiceType::QP0);
}

#[test]
fn qp1_sends_behind_a_reattach_in_the_same_doorbell_run_go_out_on_the_new_link_with_its_slid() {
    moved_to_a_second_link_by_the_first_transmit(QpServiceType::QP1);
}

#[test]
fn qp0_sends_behind_a_reattach_in_the_same_doorbell_run_go_out_on_the_new_link_with_its_slid() {
    moved_to_a_second_link_by_the_first_transmit(QpServiceType::QP0);
}

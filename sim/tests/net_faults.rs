//! Faults switched on and off while the network runs (drop rate, delay, corruption, per link
//! or node; links and nodes down and up), trap 128, and an SM and a client attached to one
//! fabric. Fabric: ibsim's `net.2sw2path4hca`, the SM's device at Hca1 port 1.

mod netutil;

use std::time::Duration;

use mad_wire::attr::notice::{Notice, NoticeRepr};
use mad_wire::attr::port_info::{PhysPortState, PortState, cap_mask};
use mad_wire::smp::SmpRoute;
use mad_wire::{attr_id, method, status};
use netutil::sweep::{self, LID_HCA1, LID_HCA3, LID_SWITCH2};
use netutil::{Device, attach, dr_smp, example, gsi, local_call, network, smp_of};
use sim::link::PortChange;
use sim::net::{DropReason, Fault, Network};
use sim::packet::Packet;

fn setup() -> (Network, Device) {
    let net = network(example("net.2sw2path4hca"));
    let dev = attach(&net, "Hca1", 1);
    (net, dev)
}

fn node_info_get(path: &[u8]) -> sim::packet::Packet {
    dr_smp(method::GET, path, attr_id::sm::NODE_INFO, 0, [0; 64])
}

fn reaches(net: &Network, d: &Device, path: &[u8]) -> bool {
    !d.exchange(net, node_info_get(path)).is_empty()
}

#[test]
fn a_lossy_link_drops_and_counts() {
    let (net, d) = setup();
    let sw1_p3 = net.port("Switch1", 3).unwrap();
    let sw2_p3 = net.port("Switch2", 3).unwrap();
    net.set_link_fault(sw1_p3, Fault::drop(1.0));
    assert!(!reaches(&net, &d, &[1, 3]));
    assert!(reaches(&net, &d, &[1, 5]), "the other link is fine");
    assert_eq!(net.drops().get(DropReason::Fault), 1);
    assert_eq!(
        net.counters(sw2_p3).rcv_errors,
        1,
        "counted where it was received"
    );
    assert_eq!(net.counters(sw1_p3).xmit_packets, 1, "it was sent");
    // The fault is set on the link: either end names it.
    net.set_link_fault(sw2_p3, Fault::NONE);
    assert!(reaches(&net, &d, &[1, 3]));
}

#[test]
fn a_one_shot_drop_loses_exactly_the_chosen_packet() {
    let (net, d) = setup();
    let hca1 = net.port("Hca1", 1).unwrap();
    net.drop_nth_leaving(hca1, 2);
    let answered: Vec<bool> = (0..4).map(|_| reaches(&net, &d, &[1])).collect();
    assert_eq!(
        answered,
        vec![true, false, true, true],
        "only the second request is lost"
    );
    assert_eq!(net.drops().get(DropReason::Fault), 1);
    let sw1 = net.port("Switch1", 1).unwrap();
    assert_eq!(
        net.counters(sw1).rcv_errors,
        1,
        "counted where it was received"
    );
    assert_eq!(net.counters(hca1).xmit_packets, 4, "all four were sent");
}

/// Which of `n` requests across Switch1-Switch2 port 3 are answered at drop rate 0.5.
fn pattern(seed: u64, n: usize) -> Vec<bool> {
    let (net, d) = setup();
    net.reseed(seed);
    net.set_link_fault(net.port("Switch1", 3).unwrap(), Fault::drop(0.5));
    (0..n).map(|_| reaches(&net, &d, &[1, 3])).collect()
}

#[test]
fn drop_rates_are_seeded_and_replay() {
    let a = pattern(7, 400);
    let b = pattern(7, 400);
    assert_eq!(a, b, "same seed, same losses");
    assert_ne!(a, pattern(8, 400), "another seed, other losses");
    // Request and response each cross the lossy link: 0.5 * 0.5 = 25 % answered.
    let answered = a.iter().filter(|&&x| x).count();
    assert!((60..140).contains(&answered), "{answered} of 400 answered");
}

#[test]
fn a_delay_postpones_delivery_in_virtual_time() {
    let (net, d) = setup();
    let hca1 = net.port("Hca1", 1).unwrap();
    net.set_link_fault(hca1, Fault::delay(Duration::from_millis(5)));
    let t0 = net.scheduler().now();
    d.link.transmit(node_info_get(&[1]));
    net.scheduler().run_due();
    assert!(d.rec.take().is_empty(), "not yet");
    // Out and back over the delayed link: 10 ms.
    assert!(net.scheduler().run_until(t0 + Duration::from_millis(20)));
    assert_eq!(net.scheduler().now(), t0 + Duration::from_millis(10));
    assert_eq!(d.rec.take().len(), 1);
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// PortInfo Sets of port `port` of the node at the end of `path` that write back what a Get
/// read there now, with PortState changed to each of `states`.
fn port_state_sets(
    net: &Network,
    d: &Device,
    path: &[u8],
    port: u32,
    states: &[PortState],
) -> Vec<Packet> {
    let (st, data) = netutil::dr_get(net, d, path, attr_id::sm::PORT_INFO, port);
    assert_eq!(st, status::SUCCESS);
    let mut pi = netutil::port_info(&data);
    pi.port_physical_state = PhysPortState::NoChange;
    states
        .iter()
        .map(|&s| {
            pi.port_state = s;
            let data = netutil::port_info_data(&pi);
            dr_smp(method::SET, path, attr_id::sm::PORT_INFO, port, data)
        })
        .collect()
}

/// A link's delay holds a packet on its way to the far end: the SMA there processes a
/// PortInfo Set when it arrives, not when it was sent, and the port changes the Set causes
/// reach devices then.
#[test]
fn a_port_info_set_over_a_delayed_link_applies_when_it_arrives() {
    let (net, d) = setup();
    let sched = net.scheduler();
    let hca1 = net.port("Hca1", 1).unwrap();
    let sw1_p1 = net.port("Switch1", 1).unwrap();
    let state = |p| net.with_fabric(|f| f.port(p).state.link_state as u8);
    let [arm, down] = <[Packet; 2]>::try_from(port_state_sets(
        &net,
        &d,
        &[1],
        1,
        &[PortState::Armed, PortState::Down],
    ))
    .unwrap();
    assert_eq!(state(sw1_p1), 2, "Init");
    net.set_link_fault(hca1, Fault::delay(ms(5)));
    let received = net.counters(sw1_p1).rcv_packets;

    let t0 = sched.now();
    d.link.transmit(arm);
    sched.run_due();
    assert!(!sched.run_until(t0 + ms(4)));
    assert_eq!(state(sw1_p1), 2, "still Init before the Set arrives");
    assert_eq!(
        net.counters(sw1_p1).rcv_packets,
        received,
        "not received yet"
    );
    assert!(
        !sched.run_until(t0 + ms(5)),
        "the Set arriving is no news to the device"
    );
    assert_eq!(state(sw1_p1), 3, "Armed once the Set arrived");
    assert_eq!(net.counters(sw1_p1).rcv_packets, received + 1);
    assert!(d.rec.take().is_empty(), "the answer is on its way back");
    assert!(sched.run_until(t0 + ms(60)));
    assert_eq!(sched.now(), t0 + ms(10));
    let got = d.rec.take();
    assert_eq!(got.len(), 1);
    let answer = smp_of(&got[0].1);
    assert_eq!(
        (answer.method, answer.status),
        (method::GET_RESP, status::SUCCESS)
    );
    assert_eq!(
        netutil::port_info(&answer.data).port_state,
        PortState::Armed
    );

    // PortState Down bounces the link of Switch1 port 1: the device at its far end (Hca1)
    // hears Down and Initialized when the Set arrives.
    let t1 = sched.now();
    d.link.transmit(down);
    sched.run_due();
    assert!(!sched.run_until(t1 + ms(4)));
    assert!(
        d.rec.take_changes().is_empty(),
        "no change before the Set arrives"
    );
    assert_eq!(net.counters(hca1).link_downed, 0);
    assert!(sched.run_until(t1 + ms(60)));
    assert_eq!(sched.now(), t1 + ms(5), "the changes come first");
    assert_eq!(
        d.rec.take_changes(),
        vec![(1, PortChange::Down), (1, PortChange::Initialized)]
    );
    assert_eq!(net.counters(hca1).link_downed, 1);
    assert!(d.rec.take().is_empty());
    assert!(sched.run_until(t1 + ms(60)));
    assert_eq!(sched.now(), t1 + ms(10), "then the answer");
    assert_eq!(d.rec.take().len(), 1);
    assert_eq!(sched.pending(), 0);
}

/// A packet's every crossing takes the delay in force when it enters the link, from the
/// time it enters: a response leaves when its request has arrived, and a delay changed
/// meanwhile is the one it takes.
#[test]
fn a_response_arrives_after_the_delays_of_each_crossing_on_the_way_there_and_back() {
    let (net, d) = setup();
    let sched = net.scheduler();
    let hca1 = net.port("Hca1", 1).unwrap();
    let sw1_p3 = net.port("Switch1", 3).unwrap();
    net.set_link_fault(hca1, Fault::delay(ms(5)));
    net.set_link_fault(sw1_p3, Fault::delay(ms(3)));
    // To Switch2 and back: 5 + 3 there, 3 + 5 back.
    let t0 = sched.now();
    d.link.transmit(node_info_get(&[1, 3]));
    assert!(sched.run_until(t0 + ms(60)));
    assert_eq!(sched.now(), t0 + ms(16));
    assert_eq!(d.rec.take().len(), 1);
    // The request crosses Hca1's link with 5 ms; the response, leaving Switch1 at t1 + 5 ms,
    // with the 1 ms in force by then.
    let t1 = sched.now();
    d.link.transmit(node_info_get(&[1]));
    assert!(!sched.run_until(t1 + ms(1)));
    net.set_link_fault(hca1, Fault::delay(ms(1)));
    assert!(sched.run_until(t1 + ms(60)));
    assert_eq!(sched.now(), t1 + ms(6));
    assert_eq!(d.rec.take().len(), 1);
    assert_eq!(sched.pending(), 0);
}

/// The traps a delayed Set causes at the far end are sent when it arrives there: trap 128 of
/// the switch whose port the Set bounced leaves then, and crosses the delayed link back.
#[test]
fn a_trap_a_delayed_set_causes_is_sent_when_the_set_arrives() {
    let (net, sm) = setup();
    sweep::configure(&net, &sm);
    let sched = net.scheduler();
    let hca1 = net.port("Hca1", 1).unwrap();
    let sw2_p3 = net.port("Switch2", 3).unwrap();
    let state = |p| net.with_fabric(|f| f.port(p).state.link_state as u8);
    // PortState Down on Switch1 port 3 bounces its link to Switch2, which traps (128).
    let [down] = <[Packet; 1]>::try_from(port_state_sets(
        &net,
        &sm,
        sweep::SWITCH1,
        3,
        &[PortState::Down],
    ))
    .unwrap();
    net.set_link_fault(hca1, Fault::delay(ms(5)));
    let t0 = sched.now();
    sm.link.transmit(down);
    assert!(!sched.run_until(t0 + ms(4)));
    assert_eq!(state(sw2_p3), 4, "Active until the Set arrives");
    assert!(!sched.run_until(t0 + ms(5)), "trap and answer on their way");
    assert_eq!(state(sw2_p3), 2, "bounced to Init");
    assert!(sched.run_until(t0 + ms(60)));
    assert_eq!(sched.now(), t0 + ms(10));
    let got: Vec<_> = sm.rec.take().iter().map(|(_, p)| smp_of(p)).collect();
    let methods: Vec<u8> = got.iter().map(|s| s.method).collect();
    assert_eq!(methods, vec![method::GET_RESP, method::TRAP]);
    let notice = NoticeRepr::parse(&Notice::new_checked(&got[1].data[..]).unwrap()).unwrap();
    assert_eq!(notice.port_state_change_lid(), Some(LID_SWITCH2));
    assert_eq!(sched.pending(), 0);
}

/// A delay of `Duration::MAX`, or one the clock cannot add (both saturate at the end of
/// simulated time), panics nowhere: the packet never arrives, is counted once, and leaves
/// nothing pending.
#[test]
fn a_delay_to_the_end_of_time_never_arrives_and_does_not_panic() {
    let (net, d) = setup();
    let sched = net.scheduler();
    let hca1 = net.port("Hca1", 1).unwrap();
    let sw1_p1 = net.port("Switch1", 1).unwrap();
    let sw1_p3 = net.port("Switch1", 3).unwrap();
    let sw2 = net.node("Switch2").unwrap();
    let forever = |net: &Network| net.drops().get(DropReason::DelayedForever);
    let hour = Duration::from_secs(3600);

    // On the first link.
    net.set_link_fault(hca1, Fault::delay(Duration::MAX));
    let t0 = sched.now();
    d.link.transmit(node_info_get(&[1]));
    assert!(!sched.run_until(t0 + hour));
    assert!(d.rec.take().is_empty());
    assert_eq!(forever(&net), 1);
    assert_eq!(net.counters(sw1_p1).rcv_packets, 0, "never received");
    assert_eq!(sched.pending(), 0, "nothing kept for it");

    // After a finite delay, on the next link; and a link's and a node's delays that add up
    // past the largest duration.
    net.set_link_fault(hca1, Fault::delay(ms(5)));
    for (link, node) in [
        (Duration::MAX, Duration::ZERO),
        (Duration::MAX / 2 + hour, Duration::MAX / 2 + hour),
    ] {
        net.set_link_fault(sw1_p3, Fault::delay(link));
        net.set_node_fault(sw2, Fault::delay(node));
        let before = forever(&net);
        let t = sched.now();
        d.link.transmit(node_info_get(&[1, 3]));
        assert!(!sched.run_until(t + hour));
        assert!(d.rec.take().is_empty());
        assert_eq!(forever(&net), before + 1);
        assert_eq!(sched.pending(), 0);
    }
    net.clear_faults();

    // A delay that is not the largest, but that the clock (well past 0 by now) cannot add.
    assert!(sched.now() > hour);
    net.set_link_fault(
        hca1,
        Fault::delay(Duration::MAX.saturating_sub(Duration::from_secs(1))),
    );
    let t = sched.now();
    d.link.transmit(node_info_get(&[1]));
    assert!(!sched.run_until(t + hour));
    assert!(d.rec.take().is_empty());
    assert_eq!(forever(&net), 4);
    assert_eq!(sched.pending(), 0);

    // The network carries on.
    net.clear_faults();
    assert!(reaches(&net, &d, &[1, 3]));
}

/// A packet on a link when the link goes down (its delay not over) is lost with the link.
/// A NodeInfo Get from Hca1 held by a 5 ms delay on Hca1's link, 1 ms into the delay; and
/// when it was sent.
fn held_on_hca1s_link() -> (Network, Device, Duration) {
    let (net, d) = setup();
    let sched = net.scheduler();
    net.set_link_fault(net.port("Hca1", 1).unwrap(), Fault::delay(ms(5)));
    let t0 = sched.now();
    d.link.transmit(node_info_get(&[1]));
    assert!(!sched.run_until(t0 + ms(1)));
    (net, d, t0)
}

#[test]
fn a_packet_held_on_a_link_that_goes_down_is_lost() {
    let (net, d, t0) = held_on_hca1s_link();
    let sched = net.scheduler();
    let hca1 = net.port("Hca1", 1).unwrap();
    let sw1_p1 = net.port("Switch1", 1).unwrap();
    net.set_link_down(hca1, true);
    while sched.run_until(t0 + ms(60)) {}
    assert_eq!(d.rec.take_changes(), vec![(1, PortChange::Down)]);
    assert!(d.rec.take().is_empty(), "no answer");
    assert_eq!(net.counters(sw1_p1).rcv_packets, 0, "Switch1 got nothing");
    assert_eq!(net.drops().get(DropReason::LinkDown), 1);
    assert_eq!(sched.pending(), 0);
}

// A cable pulled and plugged back while a link delay holds a packet on it: the packet was
// lost with the link, though the link is up again when the delay ends.
#[test]
fn a_packet_held_on_a_link_that_bounces_is_lost() {
    let (net, d, t0) = held_on_hca1s_link();
    let sched = net.scheduler();
    let hca1 = net.port("Hca1", 1).unwrap();
    let sw1_p1 = net.port("Switch1", 1).unwrap();
    net.set_link_down(hca1, true);
    net.set_link_down(hca1, false);
    while sched.run_until(t0 + ms(60)) {}
    assert_eq!(
        d.rec.take_changes(),
        vec![(1, PortChange::Down), (1, PortChange::Initialized)]
    );
    assert!(d.rec.take().is_empty(), "no answer");
    assert_eq!(net.counters(sw1_p1).rcv_packets, 0, "Switch1 got nothing");
    assert_eq!(net.drops().get(DropReason::LinkDown), 1);
    assert_eq!(sched.pending(), 0);
    // The link works again: a packet sent now crosses it (after its delay) and is answered.
    d.link.transmit(node_info_get(&[1]));
    while sched.run_until(t0 + ms(200)) {}
    assert_eq!(
        d.rec.take().len(),
        1,
        "answered over the link that came back"
    );
    assert_eq!(net.drops().get(DropReason::LinkDown), 1);
}

// A packet that falls due at a device that has gone since the network routed it (link and
// sink dropped before the scheduler ran) is delivered to nobody: it is counted as a drop like
// every other loss, once, then.
#[test]
fn a_packet_due_at_a_device_that_has_gone_is_counted_as_dropped() {
    let (net, d) = setup();
    let before = net.drops();
    // No delay: the answer is routed inside the transmit, due at once.
    d.link.transmit(node_info_get(&[1]));
    assert_eq!(net.scheduler().pending(), 1, "the answer is due");
    drop(d);
    assert_eq!(net.drops(), before, "nothing lost before it falls due");
    assert_eq!(net.scheduler().run_due(), 1);
    assert_eq!(net.scheduler().pending(), 0);
    let after = net.drops();
    assert_eq!(after.get(DropReason::DeviceGone), 1);
    assert_eq!(
        after.total(),
        before.total() + 1,
        "counted once, under one reason"
    );
}

// A packet a link delay holds while its device goes reaches the port when the delay ends,
// and finds no device there: the CA's own agents take it, as at any port without a device
// (an answer is for nobody there), and it is counted once, then.
#[test]
fn a_packet_a_link_delay_holds_while_its_device_goes_finds_the_port_without_it() {
    let (net, d) = setup();
    let hca1 = net.port("Hca1", 1).unwrap();
    net.set_link_fault(hca1, Fault::delay(ms(5)));
    let before = net.drops();
    let t0 = net.scheduler().now();
    // Request and answer cross the delayed link: the answer reaches Hca1 at t0 + 10 ms.
    d.link.transmit(node_info_get(&[1]));
    net.scheduler().run_due();
    assert_eq!(net.scheduler().pending(), 1, "the request is on its way");
    drop(d);
    assert_eq!(net.drops(), before, "nothing lost before it arrives");
    assert!(
        !net.scheduler().run_until(t0 + ms(9)),
        "the request arrives at 5 ms: no news"
    );
    assert_eq!(
        net.drops(),
        before,
        "nothing lost before the answer arrives"
    );
    assert!(!net.scheduler().run_until(t0 + ms(10)));
    assert_eq!(net.scheduler().pending(), 0);
    let after = net.drops();
    assert_eq!(
        after.get(DropReason::NoTaker),
        before.get(DropReason::NoTaker) + 1
    );
    assert_eq!(after.get(DropReason::DeviceGone), 0);
    assert_eq!(
        after.total(),
        before.total() + 1,
        "counted once, under one reason"
    );
}

#[test]
fn corruption_flips_one_bit_per_crossing() {
    let (net, sm) = setup();
    sweep::configure(&net, &sm);
    let client = attach(&net, "Hca3", 1);
    net.set_link_fault(net.port("Hca3", 1).unwrap(), Fault::corrupt(1.0));
    let sent = gsi(
        0x09,
        method::SEND,
        LID_HCA1,
        LID_HCA3,
        0x10,
        0,
        b"payload bytes",
    );
    sm.link.transmit(sent.clone());
    net.scheduler().run_due();
    let got = client.rec.take();
    assert_eq!(got.len(), 1);
    let flipped: u32 = got[0]
        .1
        .mad
        .iter()
        .zip(sent.mad.iter())
        .map(|(a, b)| (a ^ b).count_ones())
        .sum();
    assert_eq!(flipped, 1);
}

#[test]
fn a_faulty_node_loses_what_crosses_it() {
    let (net, d) = setup();
    let sw2 = net.node("Switch2").unwrap();
    net.set_node_fault(sw2, Fault::drop(1.0));
    assert!(!reaches(&net, &d, &[1, 3]));
    assert!(!reaches(&net, &d, &[1, 5, 1]));
    assert!(reaches(&net, &d, &[1, 2]));
    net.clear_faults();
    assert!(reaches(&net, &d, &[1, 3, 1]));
}

#[test]
fn a_link_down_changes_port_states_and_blocks_routing() {
    let (net, d) = setup();
    let hca1 = net.port("Hca1", 1).unwrap();
    let sw1_p1 = net.port("Switch1", 1).unwrap();
    net.set_link_down(hca1, true);
    net.scheduler().run_due();
    assert_eq!(d.rec.take_changes(), vec![(1, PortChange::Down)]);
    let s = d.link.port_info();
    assert_eq!((s.state, s.phys_state), (1, 2), "Down/Polling");
    net.with_fabric(|f| {
        let s = f.port(sw1_p1).state;
        assert_eq!((s.link_state as u8, s.phys_state as u8), (1, 2));
        let sw = f.node_by_name("Switch1").unwrap();
        assert!(f.switch(sw).unwrap().info.port_state_change);
    });
    assert_eq!(net.counters(hca1).link_downed, 1);
    assert_eq!(net.counters(sw1_p1).link_downed, 1);
    assert!(!reaches(&net, &d, &[1]));
    assert_eq!(net.counters(hca1).xmit_discards, 1);
    assert_eq!(net.drops().get(DropReason::LinkDown), 1);
    // Up again: both ends train to Init.
    net.set_link_down(hca1, false);
    net.scheduler().run_due();
    assert_eq!(d.rec.take_changes(), vec![(1, PortChange::Initialized)]);
    assert_eq!(
        (d.link.port_info().state, d.link.port_info().phys_state),
        (2, 5)
    );
    assert!(reaches(&net, &d, &[1]));
}

#[test]
fn links_down_cut_a_subtree_off() {
    let (net, d) = setup();
    let (p3, p5) = (
        net.port("Switch1", 3).unwrap(),
        net.port("Switch1", 5).unwrap(),
    );
    net.set_link_down(p3, true);
    assert!(!reaches(&net, &d, &[1, 3]));
    assert!(
        reaches(&net, &d, &[1, 5, 1]),
        "the second link still leads to Hca2"
    );
    net.set_link_down(p5, true);
    for path in [&[1u8, 3][..], &[1, 5], &[1, 5, 1], &[1, 5, 2]] {
        assert!(!reaches(&net, &d, path), "{path:?}");
    }
    assert!(reaches(&net, &d, &[1, 2]), "Switch1's side is whole");
    net.set_link_down(p3, false);
    assert!(reaches(&net, &d, &[1, 3, 2]));
    // A node down takes all its links.
    let sw2 = net.node("Switch2").unwrap();
    net.set_node_down(sw2, true);
    assert!(!reaches(&net, &d, &[1, 3]));
    let hca2 = net.port("Hca2", 1).unwrap();
    net.with_fabric(|f| assert_eq!(f.port(hca2).state.link_state as u8, 1));
    net.set_node_down(sw2, false);
    assert!(reaches(&net, &d, &[1, 3, 1]));
    // Two nodes down: bringing one back leaves the link between them down.
    let sw1 = net.node("Switch1").unwrap();
    net.set_node_down(sw2, true);
    net.set_node_down(sw1, true);
    net.set_node_down(sw2, false);
    let p3 = net.port("Switch2", 3).unwrap();
    net.with_fabric(|f| {
        assert_eq!(
            f.port(p3).state.link_state as u8,
            1,
            "Switch1 is still down"
        );
    });
    net.set_node_down(sw1, false);
    assert!(reaches(&net, &d, &[1, 3, 1]));
}

#[test]
fn a_configured_switch_traps_port_state_changes_to_the_sm() {
    let (net, sm) = setup();
    sweep::configure(&net, &sm);
    net.set_link_down(net.port("Hca2", 1).unwrap(), true);
    net.scheduler().run_due();
    let got = sm.rec.take();
    assert_eq!(got.len(), 1, "one trap from Switch2");
    let trap = &got[0].1;
    assert_eq!(
        (trap.slid, trap.dlid, trap.vl15, trap.dst_qp),
        (LID_SWITCH2, LID_HCA1, true, 0)
    );
    let smp = smp_of(trap);
    assert_eq!(
        (smp.route, smp.method, smp.attr_id),
        (SmpRoute::LidRouted, method::TRAP, attr_id::sm::NOTICE)
    );
    let notice = NoticeRepr::parse(&Notice::new_checked(&smp.data[..]).unwrap()).unwrap();
    assert_eq!(notice.port_state_change_lid(), Some(LID_SWITCH2));
    assert_eq!(notice.issuer_lid, LID_SWITCH2);
    // The SM represses the trap: the switch takes it and answers nothing.
    let mut repress = smp;
    repress.method = method::TRAP_REPRESS;
    let p = netutil::smp_packet(&repress, LID_HCA1, LID_SWITCH2);
    assert!(sm.exchange(&net, p).is_empty());
    assert_eq!(net.drops().get(DropReason::NoTaker), 1);
}

#[test]
fn an_sm_and_a_client_on_one_fabric() {
    let (net, sm) = setup();
    let client = attach(&net, "Hca2", 1);
    // The SM's host opens the port as SM: IsSM in its capability mask.
    sm.link.modify_capability_mask(cap_mask::IS_SM, 0);
    // SMInfo is for the SM: the SMA passes it up (MAD_IFC answers nothing); the client's SMA
    // has no SM behind it and says so.
    let q = netutil::local_smp(method::GET, attr_id::sm::SM_INFO, 0, [0; 64]);
    assert_eq!(sm.link.local_mad(&q, true), None);
    assert_eq!(
        local_call(&client, method::GET, attr_id::sm::SM_INFO, 0, [0; 64]).status,
        status::METHOD_ATTR_UNSUPPORTED
    );
    // The SM sets the client's LID by directed route; the client's host hands the SMP to its
    // SMA (receive rule: ReturnPath[3] = 1, hp = 4) and sends the answer back (hp = 3).
    let mut pi = netutil::port_info(
        &local_call(&client, method::GET, attr_id::sm::PORT_INFO, 1, [0; 64]).data,
    );
    pi.port_state = mad_wire::attr::port_info::PortState::NoChange;
    pi.port_physical_state = mad_wire::attr::port_info::PhysPortState::NoChange;
    pi.lid = 44;
    pi.master_sm_lid = 1;
    sm.link.transmit(dr_smp(
        method::SET,
        &[1, 3, 1],
        attr_id::sm::PORT_INFO,
        0,
        netutil::port_info_data(&pi),
    ));
    net.scheduler().run_due();
    let (_, req) = client.rec.take().pop().expect("the SMP reached the client");
    let mut mad = *req.mad;
    mad[192 + 3] = 1;
    mad[6] = 4;
    let mut resp = client
        .link
        .local_mad(&mad, false)
        .expect("the client's SMA answers");
    resp[6] = 3;
    client.link.transmit(sim::packet::Packet {
        mad: Box::new(resp),
        ..req
    });
    net.scheduler().run_due();
    let back = sm.rec.take();
    assert_eq!(back.len(), 1);
    assert_eq!(smp_of(&back[0].1).status, status::SUCCESS);
    assert_eq!(client.link.port_info().lid, 44);
    assert_eq!(client.rec.take_changes(), vec![(1, PortChange::Lid)]);
}

/// SMInfo to a port whose CapabilityMask has IsSMDisabled (0x400) is consumed without an
/// answer, whether IsSM is set or not: the kernel's `qib_mad.c` and `hfi1` `process_subn`
/// test IsSMDisabled first (`IB_MAD_RESULT_SUCCESS | IB_MAD_RESULT_CONSUMED`), then IsSM
/// (passed up to the SM), else answer 0x000C.
#[test]
fn sm_info_to_a_port_whose_sm_is_disabled_is_not_answered() {
    let (net, _sm) = setup();
    let client = attach(&net, "Hca2", 1);
    let get = netutil::local_smp(method::GET, attr_id::sm::SM_INFO, 0, [0; 64]);
    let set = netutil::local_smp(method::SET, attr_id::sm::SM_INFO, 0, [0; 64]);
    // No SM: 0x000C.
    assert_eq!(
        local_call(&client, method::GET, attr_id::sm::SM_INFO, 0, [0; 64]).status,
        status::METHOD_ATTR_UNSUPPORTED
    );
    // IsSMDisabled: Get and Set consumed, no answer.
    client.link.modify_capability_mask(cap_mask::SM_DISABLED, 0);
    assert_eq!(client.link.local_mad(&get, true), None, "Get");
    assert_eq!(client.link.local_mad(&set, true), None, "Set");
    // IsSMDisabled and IsSM: still no answer.
    client.link.modify_capability_mask(cap_mask::IS_SM, 0);
    assert_eq!(client.link.local_mad(&get, true), None);
    // IsSMDisabled cleared, IsSM cleared: 0x000C again.
    client
        .link
        .modify_capability_mask(0, cap_mask::SM_DISABLED | cap_mask::IS_SM);
    assert_eq!(
        local_call(&client, method::GET, attr_id::sm::SM_INFO, 0, [0; 64]).status,
        status::METHOD_ATTR_UNSUPPORTED
    );
}

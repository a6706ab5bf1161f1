//! Whatever a device puts on the wire or hands to MAD_IFC, the network does not panic: random
//! MADs (and random SMPs with plausible headers, which get further in) go through a configured
//! fabric and through the local SMA, and every packet either comes back, is delivered, or is
//! counted as dropped.

mod netutil;

use mad_wire::{class, method};
use netutil::{attach, example, network, sweep};
use proptest::prelude::*;
use sim::packet::Packet;

fn packet(mad: [u8; 256], vl15: bool, dst_qp: u32, dlid: u16) -> Packet {
    Packet {
        slid: sweep::LID_HCA1,
        dlid,
        sl: 0,
        vl15,
        src_qp: dst_qp,
        dst_qp,
        qkey: 0x8001_0000,
        pkey: 0xFFFF,
        grh: None,
        mad: Box::new(mad),
    }
}

/// A MAD with a plausible header (SMP or PMA class, Get/Set, version 1) and random rest.
fn plausible() -> impl Strategy<Value = [u8; 256]> {
    (
        prop::collection::vec(any::<u8>(), 256),
        prop::sample::select(vec![
            class::SUBN_LID_ROUTED,
            class::SUBN_DIRECTED_ROUTE,
            class::PERF_MGMT,
        ]),
        prop::sample::select(vec![method::GET, method::SET, method::TRAP_REPRESS, 0x10]),
        0u8..8,
        0u8..64,
    )
        .prop_map(|(bytes, cls, m, hp, hc)| {
            let mut mad = [0u8; 256];
            mad.copy_from_slice(&bytes);
            mad[0] = 1;
            mad[1] = cls;
            mad[2] = 1;
            mad[3] = m;
            mad[6] = hp;
            mad[7] = hc;
            mad[24..32].fill(0); // no M_Key: the SMAs take it
            mad
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn random_packets_are_answered_delivered_or_counted(
        mad in plausible(),
        raw in prop::collection::vec(any::<u8>(), 256),
        vl15 in any::<bool>(),
        dlid in prop::sample::select(vec![0u16, 1, 2, 3, 4, 5, 6, 9, 0xC000, 0xFFFF]),
    ) {
        let net = network(example("net.2sw2path4hca"));
        let d = attach(&net, "Hca1", 1);
        sweep::configure(&net, &d);
        let mut r = [0u8; 256];
        r.copy_from_slice(&raw);
        for m in [mad, r] {
            let smp = class::is_smp(m[1]);
            let p = packet(m, smp && vl15, u32::from(!smp), dlid);
            let before = net.drops().total();
            let got = d.exchange(&net, p);
            let dropped = net.drops().total() - before;
            prop_assert!(got.len() + usize::try_from(dropped).unwrap() >= 1,
                "a packet vanished: nothing back, nothing counted");
            // The device's own SMA/PMA takes anything.
            let _ = d.link.local_mad(&m, false);
            let _ = d.link.local_mad(&m, true);
        }
    }
}

//! parse(write(fabric)) == fabric, for random fabrics built through the builder (the shipped
//! files and generated fabrics are covered by the other test files).

mod common;

use proptest::prelude::*;
use sim::fabric::{Fabric, FabricBuilder, FabricError, LinkRates, NodeSpec, NodeType};

#[derive(Debug, Clone)]
struct NodePlan {
    kind: NodeType,
    ports: u8,
    desc: Option<String>,
    explicit_guid: bool,
    vendor: u32,
    device: u16,
    rates: LinkRates,
    enhanced: bool,
}

/// Rates of a cabled port: any masks (always enabling 4x and SDR, so most random links can
/// train), or what an ibnetdiscover token gives, which is the only way FDR10 and XDR get
/// enabled.
fn rates() -> impl Strategy<Value = LinkRates> {
    prop_oneof![
        Just(LinkRates::DEFAULT),
        (0u8..=31, 0u8..=7, 0u8..=15).prop_map(|(w, s, speed_ext)| {
            LinkRates {
                width: w | 2,
                speed: s | 1,
                speed_ext,
                speed_ext2: 0,
                fdr10: false,
            }
        }),
        (
            prop_oneof![Just("4"), Just("12")],
            prop_oneof![
                Just("SDR"),
                Just("QDR"),
                Just("FDR10"),
                Just("FDR"),
                Just("EDR"),
                Just("HDR"),
                Just("NDR"),
                Just("XDR")
            ],
            0u8..=15,
        )
            .prop_map(|(w, s, e)| {
                LinkRates {
                    speed_ext: e,
                    ..LinkRates::DEFAULT
                }
                .apply_token(w, s)
                .unwrap()
            }),
    ]
}

fn node_plan() -> impl Strategy<Value = NodePlan> {
    (
        prop_oneof![
            Just(NodeType::Switch),
            Just(NodeType::Ca),
            Just(NodeType::Router)
        ],
        1u8..=6,
        proptest::option::of("[a-zA-Z0-9 ;:/_.-]{0,20}"),
        any::<bool>(),
        0u32..=0xff_ffff,
        any::<u16>(),
        (0u8..=31, 0u8..=7, 0u8..=15).prop_map(|(w, s, speed_ext)| LinkRates {
            width: w | 2,
            speed: s | 1,
            speed_ext,
            speed_ext2: 0,
            fdr10: false,
        }),
        any::<bool>(),
    )
        .prop_map(
            |(kind, ports, desc, explicit_guid, vendor, device, rates, enhanced)| NodePlan {
                kind,
                ports,
                desc,
                explicit_guid,
                vendor,
                device,
                rates,
                enhanced,
            },
        )
}

/// A planned cable: two indexes into the free ports, and the rates its ends enable (`None`:
/// the node's).
type LinkPlan = (usize, usize, Option<LinkRates>, Option<LinkRates>);

/// Builds the planned fabric (every link can train: all rates enable 4x and SDR).
fn build(nodes: &[NodePlan], links: &[LinkPlan], lids: bool) -> Fabric {
    let mut b = FabricBuilder::new();
    let mut ids = Vec::new();
    for (i, n) in nodes.iter().enumerate() {
        let name = format!("n{i}");
        let spec = NodeSpec {
            description: n.desc.as_deref(),
            guid: n.explicit_guid.then_some(0xabc0_0000 + 0x100 * i as u64),
            sys_image_guid: n.explicit_guid.then_some(0x5000 + i as u64),
            vendor_id: n.vendor,
            device_id: n.device,
            enabled: n.rates,
            enhanced_port0: n.enhanced,
            ..NodeSpec::new(n.kind, &name, n.ports)
        };
        ids.push(b.add_node(&spec).unwrap());
    }
    // Free physical ports in a fixed order; each planned link takes two of them.
    let mut free: Vec<_> = ids
        .iter()
        .flat_map(|&n| b.fabric().ports_of(n).collect::<Vec<_>>())
        .collect();
    for &(x, y, ra, rc) in links {
        if free.len() < 2 {
            break;
        }
        let a = free.remove(x % free.len());
        let c = free.remove(y % free.len());
        b.link(a, c).unwrap();
        if let Some(r) = ra {
            b.set_enabled(a, r);
        }
        if let Some(r) = rc {
            b.set_enabled(c, r);
        }
        if b.fabric().node(b.fabric().port(a).node()).kind() != NodeType::Switch && x % 3 == 0 {
            b.set_port_guid(a, 0xfeed_0000 + u64::from(a.0)).unwrap();
        }
    }
    if lids {
        let mut lid = 1u16;
        for &n in &ids {
            let f = b.fabric();
            let ports: Vec<_> = if f.node(n).kind() == NodeType::Switch {
                vec![f.port_id(n, 0).unwrap()]
            } else {
                f.ports_of(n).filter(|&p| f.peer(p).is_some()).collect()
            };
            for p in ports {
                // A switch's base port 0 has one LID (LMC 0); a base LID with LMC has its
                // low LMC bits clear.
                let lmc = if b.fabric().lmc_capable(p) {
                    (lid % 3) as u8
                } else {
                    0
                };
                let step = 1u16 << lmc;
                lid = lid.next_multiple_of(step);
                b.set_lid(p, lid, lmc).unwrap();
                lid += 1 << lmc;
            }
        }
    }
    b.build().expect("links train by construction")
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn write_then_parse_is_the_identity(
        nodes in proptest::collection::vec(node_plan(), 1..10),
        links in proptest::collection::vec(
            (0usize..64, 0usize..64, proptest::option::of(rates()), proptest::option::of(rates())),
            0..20,
        ),
        lids in any::<bool>(),
    ) {
        let f = build(&nodes, &links, lids);
        let text = f.to_topology_string().unwrap_or_else(|e| panic!("{e}"));
        let again = Fabric::parse_str("written", &text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        prop_assert!(again == f, "{}", text);
    }
}

fn unrepresentable(f: &Fabric) -> String {
    match f.to_topology_string() {
        Err(FabricError::Unrepresentable { what, .. }) => what,
        Err(e) => panic!("{e}"),
        Ok(t) => panic!("written:\n{t}"),
    }
}

#[test]
fn what_the_format_cannot_hold_is_refused() {
    let two_cas = |tweak: &dyn Fn(&mut FabricBuilder, &Fabric)| {
        let mut b = FabricBuilder::new();
        b.add_node(&NodeSpec::new(NodeType::Ca, "a", 2)).unwrap();
        b.add_node(&NodeSpec::new(NodeType::Ca, "b", 2)).unwrap();
        let f0 = b.fabric().clone();
        tweak(&mut b, &f0);
        b.build().unwrap()
    };
    let port = |f: &Fabric, n: &str, p| f.port_id(f.node_by_name(n).unwrap(), p).unwrap();

    // The GUID of an unlinked CA port has no line to go on.
    let f = two_cas(&|b, f| b.set_port_guid(port(f, "a", 2), 0x77).unwrap());
    assert!(unrepresentable(&f).contains("GUID of an unlinked"));
    // Unlinked ports of one node share the node's directive defaults.
    let f = two_cas(&|b, f| {
        b.set_enabled(
            port(f, "a", 2),
            LinkRates {
                width: 1,
                ..LinkRates::DEFAULT
            },
        );
    });
    assert!(unrepresentable(&f).contains("unlinked port"));
    // FDR10 comes only from a token on a port line, not from the directives.
    let mut b = FabricBuilder::new();
    let spec = NodeSpec {
        enabled: LinkRates::DEFAULT.apply_token("4", "FDR10").unwrap(),
        ..NodeSpec::new(NodeType::Ca, "c", 1)
    };
    b.add_node(&spec).unwrap();
    assert!(unrepresentable(&b.build().unwrap()).contains("FDR10"));
    // FDR10 on a 4x-only cabled port: no token gives it.
    let f = two_cas(&|b, f| {
        b.link(port(f, "a", 1), port(f, "b", 1)).unwrap();
        let r = LinkRates {
            width: 2,
            ..LinkRates::DEFAULT.apply_token("4", "FDR10").unwrap()
        };
        b.set_enabled(port(f, "a", 1), r);
    });
    assert!(unrepresentable(&f).starts_with("enabled rates"));
    // The same fabric with a spellable rate is written and read back.
    let f = two_cas(&|b, f| {
        b.link(port(f, "a", 1), port(f, "b", 1)).unwrap();
        b.set_enabled(
            port(f, "a", 1),
            LinkRates::DEFAULT.apply_token("4", "FDR10").unwrap(),
        );
    });
    common::assert_round_trip(&f);
}

#[test]
fn unlinked_ports_keep_the_directive_rates() {
    let text =
        "width=3\nspeed=7\nSwitch 4 \"S\"\n[1] \"A\"[1]\n\nextspeed=2\nCa 2 \"A\"\n[1] \"S\"[1]\n";
    let f = Fabric::parse_str("t", text).unwrap();
    let s = f.node_by_name("S").unwrap();
    let a = f.node_by_name("A").unwrap();
    let e = f.port(f.port_id(s, 4).unwrap()).enabled;
    assert_eq!((e.width, e.speed, e.speed_ext), (3, 7, 0));
    let e = f.port(f.port_id(a, 2).unwrap()).enabled;
    assert_eq!((e.width, e.speed, e.speed_ext), (3, 7, 2));
    common::assert_round_trip(&f);
}

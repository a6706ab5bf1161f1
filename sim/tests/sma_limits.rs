//! What a port's LID/LMC and a switch's SwitchInfo may hold, through a Set to the SMA, a
//! topology file and a state file alike: a switch's base port 0 has one LID (LMC 0), a base
//! LID with LMC has its low LMC bits clear, and MulticastFDBTop (which no simulated switch
//! supports) stays as the switch started. On ibsim's `net.2sw2path4hca` with the SM's device
//! at Hca1 port 1: Switch1 (path 1, base port 0), Hca3 (path 1,2).

mod netutil;

use mad_wire::attr::port_info::{PhysPortState, PortInfoRepr, PortState};
use mad_wire::{attr_id, status};
use netutil::sweep;
use netutil::{
    Device, attach, dr_get, dr_set, example, network, port_info, port_info_data, switch_info,
    switch_info_data,
};
use sim::fabric::{Fabric, FabricError, Problem};
use sim::net::Network;

const SW: &[u8] = &[1];
const CA: &[u8] = &[1, 2];
const OK: u16 = status::SUCCESS;
const BAD: u16 = status::INVALID_ATTR_VALUE;

/// The port 0 of switch `name`.
fn port0(net: &Network, name: &str) -> sim::fabric::PortId {
    net.with_fabric(|f| f.port_id(f.node_by_name(name).unwrap(), 0).unwrap())
}

fn setup(fabric: Fabric) -> (Network, Device) {
    let net = network(fabric);
    let dev = attach(&net, "Hca1", 1);
    (net, dev)
}

/// A PortInfo Set of `lid`/`lmc` (SM LID 1, states unchanged) on `port` at `path`: its status
/// and the PortInfo answered.
fn set_lid(
    net: &Network,
    d: &Device,
    path: &[u8],
    port: u32,
    lid: u16,
    lmc: u8,
) -> (u16, PortInfoRepr) {
    let mut pi = port_info(&dr_get(net, d, path, attr_id::sm::PORT_INFO, port).1);
    pi.port_state = PortState::NoChange;
    pi.port_physical_state = PhysPortState::NoChange;
    pi.lid = lid;
    pi.lmc = lmc;
    pi.master_sm_lid = 1;
    let (s, back) = dr_set(
        net,
        d,
        path,
        attr_id::sm::PORT_INFO,
        port,
        port_info_data(&pi),
    );
    (s, port_info(&back))
}

/// `net.2sw2path4hca` with Switch1's port 0 enhanced.
fn enhanced_switch1() -> Fabric {
    let text = std::fs::read_to_string(netutil::data("net-examples/net.2sw2path4hca")).unwrap();
    let text = text.replacen(
        "Switch\t8 \"Switch1\"",
        "Switch\t8 \"Switch1\" # \"Switch1\" enhanced port 0",
        1,
    );
    assert!(text.contains("enhanced port 0"));
    Fabric::parse_str("enhanced", &text).unwrap()
}

/// A switch's base port 0 has one LID: a Set with LMC 3 is refused whole (OpenSM gives a base
/// port 0 one LID and writes LMC 0, `osm_lid_mgr.c`), the switch keeps its LID and holds no
/// other; LMC 0 is taken. An enhanced port 0 takes an LMC and holds the whole range.
#[test]
fn a_base_switch_port_0_refuses_an_lmc_and_an_enhanced_one_takes_it() {
    let (net, d) = setup(example("net.2sw2path4hca"));
    assert_eq!(set_lid(&net, &d, SW, 0, 0x10, 0).0, OK);
    let (s, back) = set_lid(&net, &d, SW, 0, 0x20, 3);
    assert_eq!(s, BAD);
    assert_eq!(
        (back.lid, back.lmc),
        (0x10, 0),
        "a refused Set changes nothing"
    );
    let sw1 = port0(&net, "Switch1");
    net.with_fabric(|f| {
        assert_eq!(f.lid_owner(0x10), Some(sw1));
        for lid in 0x11..0x28 {
            assert_eq!(f.lid_owner(lid), None, "LID {lid:#x}");
        }
    });

    let (net, d) = setup(enhanced_switch1());
    let (s, back) = set_lid(&net, &d, SW, 0, 0x20, 3);
    assert_eq!(s, OK);
    assert_eq!((back.lid, back.lmc), (0x20, 3));
    let sw1 = port0(&net, "Switch1");
    net.with_fabric(|f| {
        for lid in 0x20..0x28 {
            assert_eq!(f.lid_owner(lid), Some(sw1), "LID {lid:#x}");
        }
    });
}

/// A topology file cannot give a base port 0 an LMC either; the error names the port and
/// says what to do.
#[test]
fn a_topology_giving_a_base_port_0_an_lmc_is_refused() {
    let text = "Switch 2 \"S\" # \"s\" base port 0 lid 4 lmc 1\n[1] \"A\"[1]\n\n\
                Ca 1 \"A\"\n[1] \"S\"[1]\n";
    let e = Fabric::parse_str("t", text).unwrap_err();
    let FabricError::Parse { line, problem, .. } = &e else {
        panic!("{e}");
    };
    assert_eq!(*line, 1, "{e}");
    assert!(
        matches!(problem, Problem::LmcOnBaseSwitchPort0 { lmc: 1, .. }),
        "{problem:?}"
    );
    assert!(e.to_string().contains("\"S\"[0]"), "{e}");
    // Enhanced, the same line loads.
    let ok = text.replace("base port 0", "enhanced port 0");
    let f = Fabric::parse_str("t", &ok).unwrap();
    let s = f.node_by_name("S").unwrap();
    assert_eq!(f.port(f.port_id(s, 0).unwrap()).lmc(), 1);
}

/// A state file holding an LMC on a base port 0 is refused with its line and field; the same
/// file with LMC 0 loads.
#[test]
fn a_state_file_giving_a_base_port_0_an_lmc_is_refused() {
    let net = network(example("net.2sw2path4hca"));
    let sm = attach(&net, "Hca1", 1);
    sweep::configure(&net, &sm);
    let good = net.state_text();
    let guid = net.with_fabric(|f| f.node(f.node_by_name("Switch1").unwrap()).guid());
    let record = format!("port {guid:x} 0 ");
    let (n, line) = good
        .lines()
        .enumerate()
        .find(|(_, l)| l.starts_with(&record))
        .expect("Switch1's port 0 record");
    assert!(line.contains(" lmc=0 "), "{line}");
    let bad = good.replace(line, &line.replace(" lmc=0 ", " lmc=1 "));
    let fresh = network(example("net.2sw2path4hca"));
    let (l, msg) = fresh.load_state_text(&bad).unwrap_err();
    assert_eq!(l, n + 1, "{msg}");
    assert!(msg.contains("lmc=1") && msg.contains("Lmc"), "{msg}");
    fresh.load_state_text(&good).unwrap();
}

/// A base LID with LMC must have its low LMC bits clear: LID 0x21 with LMC 2 would be
/// 0x20-0x23 to the port (it masks them) but 0x21-0x24 to a LID table; the Set is refused.
/// LID 0x20 with LMC 2, and 0x21 with LMC 0, are taken.
#[test]
fn an_unaligned_base_lid_with_an_lmc_is_refused() {
    let (net, d) = setup(example("net.2sw2path4hca"));
    assert_eq!(set_lid(&net, &d, CA, 0, 0x21, 0).0, OK);
    for (lid, lmc) in [(0x21, 2), (0x22, 2), (0x24, 3), (0x40, 7)] {
        let (s, back) = set_lid(&net, &d, CA, 0, lid, lmc);
        assert_eq!(s, BAD, "LID {lid:#x} LMC {lmc}");
        assert_eq!((back.lid, back.lmc), (0x21, 0), "LID {lid:#x} LMC {lmc}");
    }
    let hca3 = net.port("Hca3", 1).unwrap();
    net.with_fabric(|f| assert_eq!(f.lid_owner(0x24), None));
    let (s, back) = set_lid(&net, &d, CA, 0, 0x20, 2);
    assert_eq!(s, OK);
    assert_eq!((back.lid, back.lmc), (0x20, 2));
    net.with_fabric(|f| {
        for lid in 0x20..0x24 {
            assert_eq!(f.lid_owner(lid), Some(hca3), "LID {lid:#x}");
        }
        assert_eq!(f.lid_owner(0x24), None);
    });
    // The switch's port 0 too.
    assert_eq!(set_lid(&net, &d, SW, 0, 0x31, 0).0, OK);
    let (net, d) = setup(enhanced_switch1());
    assert_eq!(set_lid(&net, &d, SW, 0, 0x31, 1).0, BAD);
    assert_eq!(set_lid(&net, &d, SW, 0, 0x30, 1).0, OK);
}

/// No simulated switch supports MulticastFDBTop (port 0's CapabilityMask lacks
/// IsMulticastFDBTopSupported): a SwitchInfo Set leaves it as it was, as ibsim's
/// `do_switchinfo` does, while the rest of the Set is taken.
#[test]
fn switch_info_set_leaves_multicast_fdb_top_alone() {
    let (net, d) = setup(example("net.2sw2path4hca"));
    let (s, data) = dr_get(&net, &d, SW, attr_id::sm::SWITCH_INFO, 0);
    assert_eq!(s, OK);
    let before = switch_info(&data);
    let pi = port_info(&dr_get(&net, &d, SW, attr_id::sm::PORT_INFO, 0).1);
    assert_eq!(
        pi.capability_mask & 0x4000_0000,
        0,
        "not IsMulticastFDBTopSupported"
    );
    for top in [0xFFFF, 0xBFFF, 0xC01F] {
        let mut si = before;
        si.multicast_fdb_top = top;
        si.linear_fdb_top = 0x40;
        let (s, back) = dr_set(
            &net,
            &d,
            SW,
            attr_id::sm::SWITCH_INFO,
            0,
            switch_info_data(&si),
        );
        assert_eq!(s, OK, "MulticastFDBTop {top:#x}");
        let got = switch_info(&back);
        assert_eq!(got.multicast_fdb_top, before.multicast_fdb_top, "{top:#x}");
        assert_eq!(got.linear_fdb_top, 0x40);
    }
}

/// A state file's `mtop=` other than the value every switch holds is refused with its line.
#[test]
fn a_state_file_with_another_multicast_fdb_top_is_refused() {
    let net = network(example("net.2sw2path4hca"));
    let good = net.state_text();
    let (n, line) = good
        .lines()
        .enumerate()
        .find(|(_, l)| l.starts_with("switch "))
        .expect("a switch record");
    assert!(line.contains(" mtop=0 "), "{line}");
    let bad = good.replace(line, &line.replace(" mtop=0 ", " mtop=65535 "));
    let fresh = network(example("net.2sw2path4hca"));
    let (l, msg) = fresh.load_state_text(&bad).unwrap_err();
    assert_eq!(l, n + 1, "{msg}");
    assert!(msg.contains("mtop=65535"), "{msg}");
    fresh.load_state_text(&good).unwrap();
}

/// A topology file cannot give a port an unaligned base LID with LMC either, on a CA's port
/// line or on an enhanced switch's port 0 (ibsim itself reads both numbers with no check,
/// `sim_net.c` `parse_port_lid_and_lmc`): the error names the file, the line, the port, the
/// LID and the LMC, and says what to use. The same lines with an aligned LID load.
#[test]
fn a_topology_giving_an_unaligned_base_lid_with_an_lmc_is_refused() {
    let ca = "Switch 2 \"S\" # \"s\" base port 0 lid 4\n[1] \"A\"[1]\n\n\
              Ca 1 \"A\"\n[1](a1) \"S\"[1] # lid 33 lmc 2 \"s\" lid 4 4xQDR\n";
    let sw = "Switch 2 \"S\" # \"s\" enhanced port 0 lid 6 lmc 2\n[1] \"A\"[1]\n\n\
              Ca 1 \"A\"\n[1] \"S\"[1]\n";
    for (text, bad_line, port, lid, lmc, aligned) in [
        (
            ca,
            5,
            "\"A\"[1]",
            33u16,
            2u8,
            ca.replace("lid 33 lmc 2", "lid 32 lmc 2"),
        ),
        (
            sw,
            1,
            "\"S\"[0]",
            6,
            2,
            sw.replace("lid 6 lmc 2", "lid 8 lmc 2"),
        ),
    ] {
        let e = Fabric::parse_str("topo.net", text).unwrap_err();
        let FabricError::Parse {
            file,
            line,
            problem,
        } = &e
        else {
            panic!("{e}");
        };
        assert_eq!((file.as_str(), *line), ("topo.net", bad_line), "{e}");
        assert_eq!(
            *problem,
            Problem::UnalignedLid {
                lid,
                lmc,
                port: port.to_owned()
            },
            "{e}"
        );
        let msg = e.to_string();
        assert!(
            msg.contains(&format!("LID {lid} with LMC {lmc}"))
                && msg.contains(port)
                && msg.contains("multiple of 4"),
            "{msg}"
        );
        let f = Fabric::parse_str("topo.net", &aligned).unwrap();
        let (node, num) = if port == "\"A\"[1]" {
            ("A", 1)
        } else {
            ("S", 0)
        };
        let p = f.port(f.port_id(f.node_by_name(node).unwrap(), num).unwrap());
        assert_eq!((p.lid() & 3, p.lmc()), (0, 2));
    }
}

/// A state file holding an unaligned base LID with LMC is refused without changing anything,
/// the error naming the file, the record's line, the port, the LID and the LMC; the same
/// record with an aligned LID loads.
#[test]
fn a_state_file_giving_an_unaligned_base_lid_with_an_lmc_is_refused() {
    let net = network(example("net.2sw2path4hca"));
    let sm = attach(&net, "Hca1", 1);
    sweep::configure(&net, &sm);
    let good = net.state_text();
    let hca3 = net.with_fabric(|f| f.node(f.node_by_name("Hca3").unwrap()).guid());
    let record = format!("port {hca3:x} 1 ");
    let (n, line) = good
        .lines()
        .enumerate()
        .find(|(_, l)| l.starts_with(&record))
        .expect("Hca3's port 1 record");
    let lid_field = line
        .split(' ')
        .find(|w| w.starts_with("lid="))
        .expect("lid=");
    assert!(line.contains(" lmc=0 "), "{line}");
    let with = |lid: u16| {
        good.replace(
            line,
            &line
                .replace(lid_field, &format!("lid={lid}"))
                .replace(" lmc=0 ", " lmc=2 "),
        )
    };
    let dir = std::env::temp_dir().join(format!("sma-limits-lmc-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("state");
    std::fs::write(&path, with(0x101)).unwrap();
    let fresh = network(example("net.2sw2path4hca"));
    let before = fresh.state_text();
    let e = fresh.load_state(&path).unwrap_err();
    let msg = e.to_string();
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(
        msg.contains(&path.display().to_string())
            && msg.contains(&format!(" line {}:", n + 1))
            && msg.contains("\"Hca3\"[1]")
            && msg.contains("LID 257 with LMC 2")
            && msg.contains("multiple of 4"),
        "{msg}"
    );
    assert_eq!(fresh.state_text(), before, "nothing changed");
    fresh.load_state_text(&with(0x100)).unwrap();
    let p = net.port("Hca3", 1).unwrap();
    fresh.with_fabric(|f| assert_eq!((f.port(p).lid(), f.port(p).lmc()), (0x100, 2)));
}

/// The builder refuses it too, changing nothing.
#[test]
fn the_builder_refuses_an_unaligned_base_lid_with_an_lmc() {
    let mut f = example("net.2sw2path4hca");
    let p = f.port_id(f.node_by_name("Hca3").unwrap(), 1).unwrap();
    assert!(matches!(
        f.set_lid(p, 0x21, 1),
        Err(Problem::UnalignedLid {
            lid: 0x21,
            lmc: 1,
            ..
        })
    ));
    assert!(matches!(
        f.assign_lid(p, 0x22, 2),
        Err(Problem::UnalignedLid { .. })
    ));
    assert_eq!(
        (f.port(p).lid(), f.lid_owner(0x21), f.lid_owner(0x22)),
        (0, None, None)
    );
    f.set_lid(p, 0x24, 2).unwrap();
}

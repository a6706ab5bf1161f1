//! The network's state file and the fabric check: a fabric configured by a small SM (the
//! sweep of `netutil::sweep`, OpenSM's choices on `net.2sw2path4hca`) passes the check,
//! survives a save and a load into a fresh network built from the same topology, and a
//! damaged table or file is named precisely.

mod netutil;

use std::sync::atomic::{AtomicU32, Ordering};

use netutil::sweep;
use sim::fabric::check::{self, Report};
use sim::fabric::state::LinkState;
use sim::fabric::{Fabric, NodeType};
use sim::net::{NetError, Network};

fn configured() -> (Network, netutil::Device) {
    let net = netutil::network(netutil::example("net.2sw2path4hca"));
    let sm = netutil::attach(&net, "Hca1", 1);
    sweep::configure(&net, &sm);
    (net, sm)
}

fn report(net: &Network) -> Report {
    net.with_fabric(check::check)
}

fn temp(name: &str) -> std::path::PathBuf {
    static N: AtomicU32 = AtomicU32::new(0);
    std::env::temp_dir().join(format!(
        "sim-state-{}-{}-{name}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ))
}

#[test]
fn an_unconfigured_fabric_fails_the_check_and_a_configured_one_passes() {
    let net = netutil::network(netutil::example("net.2sw2path4hca"));
    let r = report(&net);
    assert!(!r.ok());
    // 2 switches with port 0, 4 HCAs with one cable each, 6 links: 2 + 2*6 cabled ports.
    assert_eq!(r.cabled_ports, 14);
    assert_eq!(r.not_active.len(), 12, "links start in Init: {r}");
    assert_eq!(r.without_lid.len(), 6, "4 HCA ports and 2 switches: {r}");
    let (net, _sm) = configured();
    let r = report(&net);
    assert!(r.ok(), "{r}");
    assert_eq!((r.lids, r.ca_ports, r.pairs, r.unreachable), (6, 4, 12, 0));
}

#[test]
fn a_walk_follows_the_tables_the_sm_wrote() {
    let (net, _sm) = configured();
    net.with_fabric(|f| {
        let hca1 = f.port_id(f.node_by_name("Hca1").unwrap(), 1).unwrap();
        let path = check::route(f, hca1, sweep::LID_HCA2).unwrap();
        let names: Vec<String> = path.iter().map(|&p| f.port_label(p)).collect();
        // Switch1's LFT sends LID 4 out of port 3 to Switch2, whose LFT gives port 1.
        assert_eq!(
            names,
            [
                "\"Hca1\"[1]",
                "\"Switch1\"[1]",
                "\"Switch1\"[3]",
                "\"Switch2\"[3]",
                "\"Switch2\"[1]",
                "\"Hca2\"[1]"
            ]
        );
    });
}

#[test]
fn a_bad_lft_entry_and_a_loop_are_found() {
    let (net, _sm) = configured();
    let sw1 = net.node("Switch1").unwrap();
    net.with_fabric_mut(|f| {
        let t = &mut f.switch_mut(sw1).unwrap().lft;
        t[usize::from(sweep::LID_HCA2)] = 0xff;
    });
    let r = report(&net);
    assert_eq!(
        r.unreachable, 2,
        "Hca1 and Hca3 reach Hca2 through Switch1: {r}"
    );
    assert!(r.failures[0].contains("no LFT entry for LID 4"), "{r}");
    let sw2 = net.node("Switch2").unwrap();
    net.with_fabric_mut(|f| {
        // Switch1 -> Switch2 -> Switch1 ...
        f.switch_mut(sw1).unwrap().lft[usize::from(sweep::LID_HCA2)] = 3;
        f.switch_mut(sw2).unwrap().lft[usize::from(sweep::LID_HCA2)] = 3;
    });
    let r = report(&net);
    assert!(r.failures.iter().any(|x| x.contains("routing loop")), "{r}");
}

#[test]
fn the_state_survives_a_save_and_a_load_onto_a_fresh_network() {
    let (net, _sm) = configured();
    let path = temp("ok");
    net.save_state(&path).unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.starts_with("# "), "a comment names the format");
    assert!(text.contains("\nhca-sim-state 1\n"));
    let fresh = netutil::network(netutil::example("net.2sw2path4hca"));
    assert!(!report(&fresh).ok());
    fresh.load_state(&path).unwrap();
    let r = report(&fresh);
    assert!(r.ok(), "{r}");
    assert_eq!(
        fresh.state_text(),
        net.state_text(),
        "nothing lost or changed"
    );
    fresh.with_fabric(|f| {
        let sw1 = f.node_by_name("Switch1").unwrap();
        let t = &f.switch(sw1).unwrap().lft;
        assert_eq!(&t[..7], &sweep::LFT_SWITCH1, "the golden LFT of Switch1");
        let hca4 = f.port_id(f.node_by_name("Hca4").unwrap(), 1).unwrap();
        assert_eq!(f.port(hca4).lid(), sweep::LID_HCA4);
        assert_eq!(f.port(hca4).state.link_state, LinkState::Active);
        assert_eq!(f.port(hca4).state.sm_lid, sweep::LID_HCA1);
    });
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn is_sm_is_not_saved() {
    let (net, sm) = configured();
    let hca1 = net.port("Hca1", 1).unwrap();
    sm.link.modify_capability_mask(0x2, 0);
    assert_ne!(
        net.with_fabric(|f| f.port(hca1).state.capability_mask) & 0x2,
        0
    );
    let fresh = netutil::network(netutil::example("net.2sw2path4hca"));
    fresh.load_state_text(&net.state_text()).unwrap();
    assert_eq!(
        fresh.with_fabric(|f| f.port(hca1).state.capability_mask) & 0x2,
        0,
        "the SM that held the port is gone when the state is read"
    );
}

#[test]
fn a_state_from_another_fabric_is_refused_and_changes_nothing() {
    let (net, _sm) = configured();
    let other = netutil::network(netutil::example("net"));
    let before = other.state_text();
    let (line, msg) = other.load_state_text(&net.state_text()).unwrap_err();
    assert_eq!(line, 3, "the fabric line");
    assert!(msg.contains("another fabric"), "{msg}");
    assert_eq!(other.state_text(), before);
}

#[test]
fn malformed_files_name_the_line() {
    let (net, _sm) = configured();
    let good = net.state_text();
    let fresh = netutil::network(netutil::example("net.2sw2path4hca"));
    let cases: Vec<(String, usize, &str)> = vec![
        (String::new(), 1, "empty"),
        ("hello\n".into(), 1, "not a simulated fabric state"),
        ("hca-sim-state 2\n".into(), 1, "version 1 only"),
        (good.replace("ls=4", "ls=9"), 4, "ls= must be 1-4"),
        (good.replace(" lid=1 ", " lid=x "), 0, "lid=x"),
        (
            good.lines().take(2).collect::<Vec<_>>().join("\n"),
            1,
            "cut short",
        ),
        (format!("{good}bogus record\n"), 0, "unknown or malformed"),
    ];
    for (text, line, says) in cases {
        let (l, msg) = fresh.load_state_text(&text).unwrap_err();
        assert!(msg.contains(says), "{says}: {msg}");
        if line > 0 {
            assert_eq!(l, line, "{says}: {msg}");
        }
    }
    assert!(!report(&fresh).ok(), "nothing was applied");
    let err = fresh
        .load_state(std::path::Path::new("/nonexistent/state"))
        .unwrap_err();
    assert!(matches!(err, NetError::StateFileRead { .. }), "{err}");
    assert!(err.to_string().contains("/nonexistent/state"), "{err}");
}

#[test]
fn a_fat_tree_state_round_trips() {
    // Hand-configure a generated fat tree the way an SM would leave it: LIDs in node order,
    // every link active, each switch's LFT by the shortest way (computed here, checked by
    // the walk).
    let f = sim::fabric::generator::generate("fat-tree:leaves=4,hosts=3,spines=2").unwrap();
    let net = netutil::network(f);
    net.with_fabric_mut(|f| {
        let mut lid = 1u16;
        let mut ca_lids = Vec::new();
        for n in f.node_ids().collect::<Vec<_>>() {
            let first = u8::from(f.node(n).kind() != NodeType::Switch);
            for num in first..=f.node(n).num_ports() {
                let p = f.port_id(n, num).unwrap();
                if f.peer(p).is_some() || num == 0 {
                    f.port_mut(p).state.link_state = LinkState::Active;
                }
                if num == 0 || (f.node(n).kind() != NodeType::Switch && f.peer(p).is_some()) {
                    f.set_lid(p, lid, 0).unwrap();
                    if num != 0 {
                        ca_lids.push((p, lid));
                    }
                    lid += 1;
                }
            }
        }
        shortest_lfts(f, &ca_lids);
    });
    let r = report(&net);
    assert!(r.ok(), "{r}");
    assert_eq!(r.ca_ports, 12);
    let fresh = netutil::network(
        sim::fabric::generator::generate("fat-tree:leaves=4,hosts=3,spines=2").unwrap(),
    );
    fresh.load_state_text(&net.state_text()).unwrap();
    assert!(report(&fresh).ok());
    assert_eq!(fresh.state_text(), net.state_text());
}

/// Each switch routes every CA LID out of the port nearest to it (breadth-first from each
/// CA port).
fn shortest_lfts(f: &mut Fabric, ca_lids: &[(sim::fabric::PortId, u16)]) {
    use std::collections::VecDeque;
    let top = ca_lids.iter().map(|&(_, l)| l).max().unwrap_or(0);
    for &(ca, lid) in ca_lids {
        let mut seen = std::collections::HashSet::new();
        let mut q = VecDeque::new();
        // (switch port the packet should leave by, toward the CA)
        if let Some(p) = f.peer(ca) {
            q.push_back(p);
        }
        while let Some(entry) = q.pop_front() {
            let node = f.port(entry).node();
            if !seen.insert(node) || f.switch(node).is_none() {
                continue;
            }
            let out = f.port(entry).num();
            let sw = f.switch_mut(node).unwrap();
            sw.info.linear_fdb_top = top;
            if sw.lft.len() <= usize::from(top) {
                sw.lft.resize(usize::from(top) + 1, 0xff);
            }
            sw.lft[usize::from(lid)] = out;
            for other in f.ports_of(node).collect::<Vec<_>>() {
                if let Some(peer) = f.peer(other) {
                    q.push_back(peer);
                }
            }
        }
    }
}

/// A LID two ports hold (an SM moving LIDs leaves that for a while; a PortInfo Set takes a LID
/// another port still holds) is saved and loads back, both ports holding it.
#[test]
fn a_lid_held_twice_round_trips() {
    let (net, _sm) = configured();
    // Hca2 (LID 4) given Hca1's LID 1.
    let text = net.state_text().replace(" lid=4 ", " lid=1 ");
    let fresh = netutil::network(netutil::example("net.2sw2path4hca"));
    fresh.load_state_text(&text).unwrap();
    assert_eq!(fresh.state_text(), text);
    let (hca1, hca2) = (
        fresh.port("Hca1", 1).unwrap(),
        fresh.port("Hca2", 1).unwrap(),
    );
    fresh.with_fabric(|f| {
        assert_eq!(f.port(hca2).lid(), 1);
        assert_eq!(f.lid_holders(1), vec![hca1, hca2]);
        assert_eq!(f.lid_holders(4), vec![]);
    });
}

/// A `pkeys` record must hold exactly the port's P_Key table (NodeInfo PartitionCap for a CA
/// port, 64 here): a table of another length is refused with its line, and the loaded state
/// never reaches the SMA, whose P_KeyTable Get then answers the default table.
#[test]
fn a_pkey_table_of_the_wrong_length_is_refused() {
    let (net, _sm) = configured();
    let good = net.state_text();
    let hca2 = net.with_fabric(|f| f.node(f.node_by_name("Hca2").unwrap()).guid());
    let line = good.lines().count() + 1;
    for table in ["ffff".to_owned(), vec!["ffff"; 65].join(",")] {
        let fresh = netutil::network(netutil::example("net.2sw2path4hca"));
        let sm = netutil::attach(&fresh, "Hca1", 1);
        let bad = format!("{good}pkeys {hca2:x} 1 {table}\n");
        let (l, msg) = fresh.load_state_text(&bad).unwrap_err();
        assert_eq!(l, line, "{msg}");
        let entries = table.split(',').count();
        assert!(
            msg.contains(&format!("P_Key table of {entries} entries, port has 64")),
            "{msg}"
        );
        // Loading failed whole: the SMA still answers block 0 as the default table.
        let (st, data) = netutil::dr_get(
            &fresh,
            &sm,
            sweep::HCA2,
            mad_wire::attr_id::sm::PKEY_TABLE,
            0,
        );
        assert_eq!(st, 0);
        assert_eq!(&data[..4], &[0xff, 0xff, 0, 0]);
    }
}

/// SwitchInfo:LIDsPerPort, which SwitchInfo Set writes, is saved as `lpp=` and loaded back; a
/// file written before it was saved (no `lpp=`) still loads and leaves it as it was.
#[test]
fn lids_per_port_is_saved_and_an_older_file_without_it_loads() {
    let (net, _sm) = configured();
    let sw2 = net.node("Switch2").unwrap();
    net.with_fabric_mut(|f| f.switch_mut(sw2).unwrap().info.lids_per_port = 7);
    let text = net.state_text();
    let fresh = netutil::network(netutil::example("net.2sw2path4hca"));
    fresh.load_state_text(&text).unwrap();
    assert_eq!(
        fresh.with_fabric(|f| f.switch(sw2).unwrap().info.lids_per_port),
        7
    );
    assert_eq!(fresh.state_text(), text);
    let older: String = text
        .lines()
        .map(|l| {
            let kept: Vec<&str> = l
                .split(' ')
                .filter(|w| !(l.starts_with("switch ") && w.starts_with("lpp=")))
                .collect();
            kept.join(" ") + "\n"
        })
        .collect();
    assert_ne!(older, text);
    let fresh = netutil::network(netutil::example("net.2sw2path4hca"));
    let lpp = |n: &Network| n.with_fabric(|f| f.switch(sw2).unwrap().info.lids_per_port);
    let before = lpp(&fresh);
    assert_ne!(before, 7);
    fresh.load_state_text(&older).unwrap();
    assert!(report(&fresh).ok());
    assert_eq!(lpp(&fresh), before, "left as it was");
}

/// `text` with `key=` of the record starting with `prefix` set to `value`, and that
/// record's line number.
fn with_field(text: &str, prefix: &str, key: &str, value: &str) -> (String, usize) {
    let mut line = 0;
    let mut out = String::new();
    for (i, l) in text.lines().enumerate() {
        if l.starts_with(prefix) {
            line = i + 1;
            let words: Vec<String> = l
                .split(' ')
                .map(|w| match w.split_once('=') {
                    Some((k, _)) if k == key => format!("{k}={value}"),
                    _ => w.to_owned(),
                })
                .collect();
            assert!(
                words.iter().any(|w| w.starts_with(&format!("{key}="))),
                "{l}"
            );
            out += &words.join(" ");
        } else {
            out += l;
        }
        out.push('\n');
    }
    assert!(line > 0, "no record {prefix:?}");
    (out, line)
}

/// A state file holds only values the SMA could have been given: what a PortInfo or
/// SwitchInfo Set refuses, or what does not fit the attribute's field, is refused with the
/// record's line, and so is a link one end of which is up while the other is down. Nothing
/// is applied.
#[test]
fn values_a_set_would_refuse_and_one_sided_links_are_refused_with_their_line() {
    let (net, _sm) = configured();
    let good = net.state_text();
    let guid = |name: &str| net.with_fabric(|f| f.node(f.node_by_name(name).unwrap()).guid());
    let (hca2, sw2) = (guid("Hca2"), guid("Switch2"));
    let hca2_port = format!("port {hca2:x} 1 ");
    let sw2_port1 = format!("port {sw2:x} 1 ");
    let sw2_port0 = format!("port {sw2:x} 0 ");
    let sw2_switch = format!("switch {sw2:x} ");
    let extra = good
        .lines()
        .find(|l| l.starts_with("extra "))
        .map(|l| l.split(' ').take(3).collect::<Vec<_>>().join(" ") + " ")
        .expect("the SM wrote some PortInfo extras");
    let cases: Vec<(&str, &str, &str, &str)> = vec![
        (&hca2_port, "protect", "200", "protect=200"),
        (&hca2_port, "protect", "4", "protect=4"),
        (&hca2_port, "smsl", "255", "smsl=255"),
        (&hca2_port, "smsl", "16", "smsl=16"),
        (&hca2_port, "hoq", "255", "hoq=255"),
        (&hca2_port, "hoq", "32", "hoq=32"),
        (&hca2_port, "nmtu", "0", "nmtu=0"),
        (&hca2_port, "nmtu", "5", "nmtu=5"),
        (&hca2_port, "opvls", "9", "opvls=9"),
        (&hca2_port, "smlid", "49152", "smlid=49152"),
        (&hca2_port, "en", "32,1,0,0", "en="),
        // Hca2 port 1 supports no extended speed (its topology enables none).
        (&hca2_port, "en", "2,1,1,0", "en="),
        (&sw2_port0, "nmtu", "4", "nmtu=4"),
        (&extra, "ldd", "9", "ldd=9"),
        (&extra, "vsc", "8", "vsc=8"),
        (&extra, "sto", "32", "sto=32"),
        (&sw2_switch, "top", "49152", "top=49152"),
        (&sw2_switch, "dport", "9", "dport=9"),
        (&sw2_switch, "dmpp", "200", "dmpp=200"),
        (&sw2_switch, "life", "32", "life=32"),
    ];
    for (prefix, key, value, says) in cases {
        let (text, line) = with_field(&good, prefix, key, value);
        let fresh = netutil::network(netutil::example("net.2sw2path4hca"));
        let before = fresh.state_text();
        let (l, msg) = fresh.load_state_text(&text).unwrap_err();
        assert!(msg.contains(says), "{key}={value}: {msg}");
        assert_eq!(l, line, "{key}={value}: {msg}");
        assert_eq!(fresh.state_text(), before, "{key}={value}: nothing applied");
    }
    // The values at their limits load.
    for (prefix, key, value) in [
        (&hca2_port, "protect", "3"),
        (&hca2_port, "smsl", "15"),
        (&hca2_port, "hoq", "31"),
        (&sw2_switch, "dport", "255"),
        (&sw2_switch, "dport", "8"),
    ] {
        let (text, _) = with_field(&good, prefix, key, value);
        let fresh = netutil::network(netutil::example("net.2sw2path4hca"));
        fresh.load_state_text(&text).unwrap();
        assert_eq!(fresh.state_text(), text, "{key}={value}");
    }
    // Switch2 port 1 down (Down, Polling) while Hca2 port 1, its peer, stays Active: refused
    // at the record of the end that claims the link is up.
    let (text, _) = with_field(&good, &sw2_port1, "ls", "1");
    let (text, _) = with_field(&text, &sw2_port1, "ps", "2");
    let (_, hca2_line) = with_field(&text, &hca2_port, "ls", "4");
    let fresh = netutil::network(netutil::example("net.2sw2path4hca"));
    let (l, msg) = fresh.load_state_text(&text).unwrap_err();
    assert!(msg.contains("peer"), "{msg}");
    assert_eq!(l, hca2_line, "{msg}");
    // Both ends down loads.
    let (text, _) = with_field(&text, &hca2_port, "ls", "1");
    let (text, _) = with_field(&text, &hca2_port, "ps", "2");
    fresh.load_state_text(&text).unwrap();
}

/// On an XDR fabric the rates carry LinkSpeedExtEnabled2 / LinkSpeedExtActive2 as a fifth
/// value (`en=3,7,15,1,1`), which loads back; XDR enabled where the port does not support it
/// is refused with its line; a fabric without XDR writes the four values it always did.
#[test]
fn xdr_rates_round_trip_and_are_checked() {
    let spec = "switch:hosts=2,link=4xXDR";
    let net = netutil::network(sim::fabric::generator::generate(spec).unwrap());
    let text = net.state_text();
    let host = net.with_fabric(|f| f.node(f.node_by_name("host-1").unwrap()).guid());
    let record = format!("port {host:x} 1 ");
    let line = text.lines().find(|l| l.starts_with(&record)).unwrap();
    assert!(line.contains(" en=3,7,15,1,1 "), "{line}");
    assert!(line.ends_with(" act=2,4,8,1,1"), "{line}");
    let fresh = netutil::network(sim::fabric::generator::generate(spec).unwrap());
    fresh.load_state_text(&text).unwrap();
    assert_eq!(fresh.state_text(), text);

    // XDR on a port of a fabric without it: refused, with the record's line.
    let sdr = netutil::network(sim::fabric::generator::generate("switch:hosts=2").unwrap());
    let plain = sdr.state_text();
    let plain_line = plain.lines().find(|l| l.starts_with(&record)).unwrap();
    assert!(
        plain_line.contains(" en=2,1,0,0 "),
        "four values without XDR: {plain_line}"
    );
    let (bad, line) = with_field(&plain, &record, "en", "2,1,0,0,1");
    let err = sdr.load_state_text(&bad).unwrap_err();
    assert_eq!(err.0, line, "{err:?}");
    assert!(err.1.contains("LinkSpeedExtEnabled2"), "{err:?}");
    assert_eq!(sdr.state_text(), plain, "nothing applied");
}

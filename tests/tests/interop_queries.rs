//! The diagnostic tools, unmodified, over this project's libibumad on a fabric OpenSM
//! configured (ibsim's `net.2sw2path4hca`, `opensm -o` run first in its own process, the
//! fabric's state kept in a file), compared with the same tools under ibsim and umad2sim after
//! the same OpenSM run there: `ibstat`, `smpquery nodeinfo|portinfo|switchinfo`, `perfquery`
//! (PortCounters and, with `-x`, PortCountersExtended), `ibroute`, `sminfo`.
//!
//! Where the outputs differ, the difference is ibsim 0.10's, and is compared field by field
//! rather than hidden:
//! - LocalPortNum (NodeInfo and PortInfo) of a switch: ibsim says 0; IBA (and the simulator)
//!   say the port the SMP came in on.
//! - PortInfo fields OpenSM sets and ibsim 0.10 does not apply (MkeyLeasePeriod,
//!   LinkWidthEnabled, LinkSpeedEnabled, SubnetTimeout, LocalPhysErr, OverrunErr, and on
//!   switch ports facing CAs PartEnforceInb/Outb): ours must show OpenSM's values (its
//!   defaults: 0, "set to supported", 18, 8, 8, enforcement on).
//! - SwitchInfo LinearFDBCap: 30720 in ibsim 0.10, 48K (ibsim 0.12, what the simulator models).
//! - PerfMgt: the traffic counters count each simulator's own history (ibsim's include the
//!   OpenSM run, ours start with the process). Both claim IsExtendedWidthSupported, but
//!   ibsim 0.10 never counts PortUnicast*Pkts (it reports 0); ours count every packet to a
//!   unicast or the permissive DLID there.
//! - SMInfo: after `opensm -o` no SM runs in either world (ours: each process has its own
//!   simulator), so both fail the same query. That `sminfo` answers correctly (the SM's LID,
//!   GUID, priority and MASTER state, as under ibsim) while an SM runs is covered by
//!   `interop_live.rs`, where OpenSM runs as a daemon.
//!
//! Each world's OpenSM starts from an empty cache of its own (no `guid2lid` of the other's),
//! so the LIDs below are what two independent OpenSM runs assigned; the NodeInfo comparison
//! checks that each LID is the same node in both worlds.
//!
//! On switch external ports OpenSM 3.3.23 leaves SubnetTimeout alone (`osm_link_mgr.c` sets
//! it only on CA, router and enhanced port 0 PortInfo) and LinkWidthEnabled too (its default
//! `force_link_width` 255 is applied only where CapabilityMask2 has IsLinkWidth2XSupported),
//! and it clears partition enforcement on inter-switch links (`osm_pkey_mgr.c`): so on the
//! switch ports those fields are compared with ibsim's, and ours must show 0, 4X, and (on the
//! switch-to-switch port, the second switch's port 3) enforcement off.

use hca_tests::interop::{self, Ibsim, Ours, Run, WorkDir};

/// PortInfo fields OpenSM sets that ibsim 0.10 leaves as they were.
const SET_BY_OPENSM: [&str; 8] = [
    "MkeyLeasePeriod",
    "LinkWidthEnabled",
    "LinkSpeedEnabled",
    "SubnetTimeout",
    "LocalPhysErr",
    "OverrunErr",
    "PartEnforceInb",
    "PartEnforceOutb",
];

struct World {
    _work: WorkDir,
    ours: Ours,
    sim: Option<Ibsim>,
}

const NODE: &str = "Hca1";
/// LIDs OpenSM gives this fabric from Hca1 (both worlds; the opensm test checks they agree).
const SWITCH1: &str = "2";
const SWITCH2: &str = "3";
const HCA2: &str = "4";

fn world() -> Option<World> {
    let opensm = interop::need_program("opensm", "opensm")?;
    let work = WorkDir::new("queries");
    let case = interop::net_examples()
        .into_iter()
        .find(|c| c.name == "net.2sw2path4hca")
        .expect("the example");
    let state = work.join("state");
    let ours = Ours::new(&work, &case.topology, NODE).with_state(&state);
    ours.opensm_once(&opensm, &work.join("opensm-ours.log"));
    let sim = Ibsim::start(&work, &case.topology);
    if let Some(s) = &sim {
        assert_ne!(s.cache(), ours.cache(), "each world its own OpenSM cache");
        s.opensm_once(&opensm, NODE, &work.join("opensm-ibsim.log"));
    }
    Some(World {
        _work: work,
        ours,
        sim,
    })
}

/// `tool args` in both worlds: (ours, ibsim's).
fn both(w: &World, tool: &str, args: &[&str]) -> Option<(Run, Option<Run>)> {
    let p = interop::need_program(tool, "infiniband-diags")?;
    let a = w.ours.run(&p, args);
    let b = w.sim.as_ref().map(|s| s.run(&p, NODE, args));
    Some((a, b))
}

/// The `Name:....value` lines of a smpquery/perfquery output.
fn fields(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(':')?;
            Some((k.to_owned(), v.trim_start_matches('.').trim().to_owned()))
        })
        .collect()
}

fn field<'a>(f: &'a [(String, String)], k: &str) -> &'a str {
    f.iter()
        .find(|(n, _)| n == k)
        .map_or_else(|| panic!("no {k} in {f:?}"), |(_, v)| v.as_str())
}

/// Every field equal but `except`; the excepted ones returned (ours, ibsim's).
fn compare(what: &str, ours: &Run, theirs: &Run, except: &[&str]) {
    let (a, b) = (fields(&ours.stdout), fields(&theirs.stdout));
    let names = |f: &[(String, String)]| f.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>();
    assert_eq!(names(&a), names(&b), "{what}: the same fields");
    for ((k, x), (_, y)) in a.iter().zip(&b) {
        if except.contains(&k.as_str()) {
            continue;
        }
        assert_eq!(x, y, "{what}: {k}");
    }
}

#[test]
fn the_tools_answer_on_the_configured_fabric_as_under_ibsim() {
    let Some(w) = world() else { return };

    // ibstat: the CA of the node the HCA sits at, configured. Whole lines (trimmed of their
    // tabs), so that "Base lid: 1" does not accept 10 to 19.
    if let Some(ibstat) = interop::need_program("ibstat", "infiniband-diags") {
        let r = w.ours.run(&ibstat, &[]).ok();
        for line in [
            "CA 'mlx5_0'",
            "Node GUID: 0x0000000000100000",
            "Port GUID: 0x0000000000100001",
            "State: Active",
            "Physical state: LinkUp",
            "Base lid: 1",
            "SM lid: 1",
            "Link layer: InfiniBand",
        ] {
            assert!(
                r.stdout.lines().any(|l| l.trim() == line),
                "{line:?} in\n{}",
                r.stdout
            );
        }
    }

    // NodeInfo of every node.
    for lid in ["1", SWITCH1, SWITCH2, HCA2, "5", "6"] {
        let Some((a, b)) = both(&w, "smpquery", &["nodeinfo", lid]) else {
            return;
        };
        let a = a.ok();
        let Some(b) = b else { continue };
        let b = b.ok();
        let switch = field(&fields(&a.stdout), "NodeType") == "Switch";
        compare(
            &format!("nodeinfo {lid}"),
            &a,
            &b,
            if switch { &["LocalPort"] } else { &[] },
        );
        if switch {
            assert_eq!(field(&fields(&b.stdout), "LocalPort"), "0");
            assert_ne!(
                field(&fields(&a.stdout), "LocalPort"),
                "0",
                "the port it came in on"
            );
        }
    }

    // PortInfo of a CA port and of a switch port.

    for (lid, port) in [(HCA2, "1"), (SWITCH1, "1"), (SWITCH2, "3")] {
        let Some((a, b)) = both(&w, "smpquery", &["portinfo", lid, port]) else {
            return;
        };
        let a = a.ok();
        let f = fields(&a.stdout);
        assert_eq!(field(&f, "LinkState"), "Active");
        if let Some(b) = b {
            let b = b.ok();
            let mut except = SET_BY_OPENSM.to_vec();
            if lid != HCA2 {
                except.push("LocalPort");
                assert_eq!(field(&fields(&b.stdout), "LocalPort"), "0");
                // OpenSM leaves these alone on a switch's external port (below), so both
                // worlds show the port's own values.
                except.retain(|k| !["LinkWidthEnabled", "SubnetTimeout"].contains(k));
            }
            if (lid, port) == (SWITCH2, "3") {
                // Cleared on an inter-switch link, where ibsim starts with them clear too.
                except.retain(|k| !k.starts_with("PartEnforce"));
            }
            compare(&format!("portinfo {lid} {port}"), &a, &b, &except);
        }
        // OpenSM's defaults (opensm -c): local_phy_errors_threshold 8,
        // overrun_errors_threshold 8, force_link_speed 15 and force_link_width 255 (set
        // to supported); on CA ports m_key_lease_period 0 and subnet_timeout 18; on switch
        // ports facing a CA, partition enforcement in both directions.
        assert_eq!(field(&f, "LocalPhysErr"), "8");
        assert_eq!(field(&f, "OverrunErr"), "8");
        assert_eq!(
            field(&f, "LinkSpeedEnabled"),
            field(&f, "LinkSpeedSupported")
        );
        if lid == HCA2 {
            assert_eq!(field(&f, "MkeyLeasePeriod"), "0");
            assert_eq!(field(&f, "SubnetTimeout"), "18");
            assert_eq!(
                field(&f, "LinkWidthEnabled"),
                field(&f, "LinkWidthSupported")
            );
        }
        if (lid, port) == (SWITCH1, "1") {
            assert_eq!(field(&f, "PartEnforceInb"), "1");
            assert_eq!(field(&f, "PartEnforceOutb"), "1");
        }
        if lid != HCA2 {
            // OpenSM 3.3.23 on a switch's external port: SubnetTimeout is set only on CA,
            // router and enhanced port 0 PortInfo (osm_link_mgr.c), so it keeps the port's 0;
            // force_link_width 255 is applied only to a port whose CapabilityMask2 has
            // IsLinkWidth2XSupported (osm_link_mgr.c), which a switch's external port (its
            // CapabilityMask 0) does not, so LinkWidthEnabled stays 4X.
            assert_eq!(field(&f, "SubnetTimeout"), "0", "{lid} {port}");
            assert_eq!(field(&f, "CapMask"), "0x0", "{lid} {port}");
            assert_eq!(field(&f, "LinkWidthEnabled"), "4X", "{lid} {port}");
        }
        if (lid, port) == (SWITCH2, "3") {
            // Partition enforcement cleared on inter-switch links (osm_pkey_mgr.c,
            // "clear partition enforcement on inter-switch links").
            assert_eq!(field(&f, "PartEnforceInb"), "0");
            assert_eq!(field(&f, "PartEnforceOutb"), "0");
        }
    }

    // SwitchInfo.
    for lid in [SWITCH1, SWITCH2] {
        let Some((a, b)) = both(&w, "smpquery", &["switchinfo", lid]) else {
            return;
        };
        let a = a.ok();
        assert_eq!(field(&fields(&a.stdout), "LinearFdbCap"), "49152");
        if let Some(b) = b {
            let b = b.ok();
            assert_eq!(field(&fields(&b.stdout), "LinearFdbCap"), "30720");
            compare(&format!("switchinfo {lid}"), &a, &b, &["LinearFdbCap"]);
        }
    }

    // The LFTs OpenSM wrote.
    for lid in [SWITCH1, SWITCH2] {
        let Some((a, b)) = both(&w, "ibroute", &[lid]) else {
            return;
        };
        let a = a.ok();
        assert!(a.stdout.contains("valid lids dumped"), "{}", a.stdout);
        if let Some(b) = b {
            assert_eq!(a.stdout, b.ok().stdout, "ibroute {lid}");
        }
    }

    // Port counters.
    let Some((a, b)) = both(&w, "perfquery", &[HCA2, "1"]) else {
        return;
    };
    let a = a.ok();
    if let Some(b) = b {
        compare(
            "perfquery",
            &a,
            &b.ok(),
            &["PortXmitData", "PortRcvData", "PortXmitPkts", "PortRcvPkts"],
        );
    }
    let f = fields(&a.stdout);
    assert_eq!(field(&f, "PortSelect"), "1");
    assert!(
        field(&f, "PortRcvPkts").parse::<u64>().unwrap() > 0,
        "this query itself"
    );

    // Extended port counters (perfquery -x): the same capability mask and fields as ibsim.
    let Some((a, b)) = both(&w, "perfquery", &["-x", HCA2, "1"]) else {
        return;
    };
    let a = a.ok();
    let traffic = [
        "PortXmitData",
        "PortRcvData",
        "PortXmitPkts",
        "PortRcvPkts",
        "PortUnicastXmitPkts",
        "PortUnicastRcvPkts",
        "PortMulticastXmitPkts",
        "PortMulticastRcvPkts",
    ];
    if let Some(b) = b {
        compare("perfquery -x", &a, &b.ok(), &traffic);
    }
    let f = fields(&a.stdout);
    assert_eq!(field(&f, "PortSelect"), "1");
    let count = |k: &str| field(&f, k).parse::<u64>().unwrap();
    assert!(count("PortRcvPkts") > 0, "this query itself");
    assert_eq!(count("PortUnicastRcvPkts"), count("PortRcvPkts"));
    assert_eq!(count("PortMulticastRcvPkts"), 0);
    assert_eq!(
        count("PortXmitData"),
        72 * count("PortXmitPkts"),
        "72 words a MAD"
    );

    // SMInfo: no SM runs after opensm -o, in either world.
    if let Some((a, b)) = both(&w, "sminfo", &[]) {
        assert_ne!(a.code, Some(0), "ours: {}", a.stdout);
        if let Some(b) = b {
            assert_eq!(a.code, b.code, "the same failure");
        }
    }
}

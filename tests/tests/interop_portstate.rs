//! `ibportstate` (infiniband-diags, unmodified) over this project's libibumad on a Mellanox
//! EDR switch (Switch-IB, DeviceID 0xcb20), compared with ibsim and umad2sim: ibportstate asks
//! every node with a Mellanox DeviceID for Mellanox ExtendedPortInfo (0xFF90) before any
//! operation and gives up if it is not answered ("smp query ext portinfo failed"). Both
//! worlds answer it, and `disable` takes the port down.

use hca_tests::interop::{self, Ibsim, Ours, Run, WorkDir};

const TOPOLOGY: &str = "\
vendid=0x2c9
devid=0xcb20
sysimgguid=0x248a070300f81a00
switchguid=0x248a070300f81a00(248a070300f81a00)
Switch\t36 \"S-248a070300f81a00\"\t\t# \"MF0;leaf01:MSB7700/U1\" enhanced port 0 lid 1 lmc 0
[1]\t\"H-0c42a10300a3e1c8\"[1](c42a10300a3e1c9) \t\t# \"node01 mlx5_0\" lid 6 4xEDR
[2]\t\"H-0c42a10300a3e1d8\"[1](c42a10300a3e1d9) \t\t# \"node02 mlx5_0\" lid 7 4xEDR

vendid=0x2c9
devid=0x1013
sysimgguid=0x0c42a10300a3e1c8
caguid=0x0c42a10300a3e1c8
Ca\t1 \"H-0c42a10300a3e1c8\"\t\t# \"node01 mlx5_0\"
[1](c42a10300a3e1c9) \t\"S-248a070300f81a00\"[1]\t\t# lid 6 lmc 0 \"MF0;leaf01:MSB7700/U1\" lid 1 4xEDR

vendid=0x2c9
devid=0x1013
sysimgguid=0x0c42a10300a3e1d8
caguid=0x0c42a10300a3e1d8
Ca\t1 \"H-0c42a10300a3e1d8\"\t\t# \"node02 mlx5_0\"
[1](c42a10300a3e1d9) \t\"S-248a070300f81a00\"[2]\t\t# lid 7 lmc 0 \"MF0;leaf01:MSB7700/U1\" lid 1 4xEDR
";

const NODE: &str = "H-0c42a10300a3e1c8";

/// The value of `Name:....value` in ibportstate's output, first occurrence.
fn field<'a>(text: &'a str, name: &str) -> Option<&'a str> {
    text.lines().find_map(|l| {
        let rest = l.strip_prefix(name)?.strip_prefix(':')?;
        Some(rest.trim_start_matches('.'))
    })
}

fn ok(r: &Run) {
    assert_eq!(r.code, Some(0), "{}:\n{}\n{}", r.what, r.stdout, r.stderr);
}

/// The ExtendedPortInfo part of an ibportstate output (the first one).
fn ext_part(text: &str) -> &str {
    let (_, rest) = text
        .split_once("# MLNX ext Port info:")
        .unwrap_or_else(|| panic!("no ExtendedPortInfo in\n{text}"));
    rest
}

/// `disable` then `query` of switch port 2 in one world: both outputs.
fn disable_then_query(run: &dyn Fn(&[&str]) -> Run) -> (String, String) {
    let r = run(&["-D", "0,1", "2", "disable"]);
    ok(&r);
    let after = r.stdout.split("After PortInfo set:").nth(1).expect("a Set");
    assert_eq!(field(after, "PhysLinkState"), Some("Disabled"), "{after}");
    let q = run(&["-D", "0,1", "2", "query"]);
    ok(&q);
    (r.stdout, q.stdout)
}

#[test]
fn ibportstate_disables_an_edr_switch_port_as_under_ibsim() {
    let Some(tool) = interop::need_program("ibportstate", "infiniband-diags") else {
        return;
    };
    let work = WorkDir::new("portstate");
    let topology = work.join("edr.topo");
    std::fs::write(&topology, TOPOLOGY).unwrap();

    let ours = Ours::new(&work, &topology, NODE).with_state(&work.join("state"));
    let (d, q) = disable_then_query(&|args| ours.run(&tool, args));
    // Before the Set, the port up at EDR: FDR10 supported and enabled (the EDR token enables
    // it) but not what the link runs.
    let ext = ext_part(&d);
    assert_eq!(field(ext, "LinkSpeedSupported"), Some("0x01"), "{d}");
    assert_eq!(field(ext, "LinkSpeedEnabled"), Some("0x01"), "{d}");
    assert_eq!(field(ext, "LinkSpeedActive"), Some("0x00"), "{d}");
    // The state file carries the disabled port to the next process.
    assert_eq!(field(&q, "PhysLinkState"), Some("Disabled"), "{q}");
    assert_eq!(field(&q, "LinkState"), Some("Down"), "{q}");
    let r = ours.run(&tool, &["-D", "0,1", "2", "enable"]);
    ok(&r);
    let q = ours.run(&tool, &["-D", "0,1", "2", "query"]);
    ok(&q);
    assert_eq!(
        field(&q.stdout, "PhysLinkState"),
        Some("LinkUp"),
        "{}",
        q.stdout
    );

    if let Some(sim) = Ibsim::start(&work, &topology) {
        // ibsim answers ExtendedPortInfo too (zeros on a port at an extended speed).
        let (d, q) = disable_then_query(&|args| sim.run(&tool, NODE, args));
        assert_eq!(field(ext_part(&d), "LinkSpeedActive"), Some("0x00"), "{d}");
        assert_eq!(field(&q, "PhysLinkState"), Some("Disabled"), "{q}");
    }
}

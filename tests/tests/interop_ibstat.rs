//! `ibstat`, unmodified, over this project's libibumad: the CA at a node of a simulated
//! fabric, its identity from the topology file and its port as the fabric left it (no SM
//! yet: link up, INIT, no LID). Asks only the HCA's own SMA, so it needs nothing of the MAD
//! layer's directed-route rules.

use hca_tests::interop::{self, Ours, WorkDir};

#[test]
fn ibstat_shows_the_simulated_ca_and_port_of_the_topology() {
    let Some(ibstat) = interop::need_program("ibstat", "infiniband-diags") else {
        return;
    };
    let work = WorkDir::new("ibstat");
    let case = interop::net_examples()
        .into_iter()
        .find(|c| c.name == "net.2sw2path4hca")
        .expect("the example");
    // Hca3: the third CA in file order; ibsim's GUID scheme gives it 0x100006 (port 1:
    // 0x100007).
    let r = Ours::new(&work, &case.topology, "Hca3")
        .run(&ibstat, &[])
        .ok();
    for line in [
        "CA 'mlx5_0'",
        "\tCA type: MT4119",
        "\tNumber of ports: 1",
        "\tNode GUID: 0x0000000000100006",
        "\tSystem image GUID: 0x0000000000100006",
        "\tPort 1:",
        "\t\tState: Initializing",
        "\t\tPhysical state: LinkUp",
        "\t\tRate: 10",
        "\t\tBase lid: 0",
        "\t\tSM lid: 0",
        "\t\tPort GUID: 0x0000000000100007",
        "\t\tLink layer: InfiniBand",
    ] {
        assert!(
            r.stdout.lines().any(|l| l == line),
            "{line:?} in\n{}",
            r.stdout
        );
    }
    let r = Ours::new(&work, &case.topology, "Hca3")
        .run(&ibstat, &["-p"])
        .ok();
    assert_eq!(r.stdout, "0x0000000000100007\n");
}

//! A CA on a fabric server (`sim:server=`), as libibumad's callers see its port: what sysfs
//! would show is read from the port's own SMA through MAD_IFC, and that SMA (the firmware's
//! on hardware) still answers when the server is gone, with the port Down.

use std::path::PathBuf;
use std::sync::Arc;

use ibumad::Context;
use sim::fabric::Fabric;
use sim::net::Network;
use sim::net::remote::FabricServer;
use sim::{ClockMode, Scheduler};

/// A directory of its own, removed at the end.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let d = std::env::temp_dir().join(format!("umad-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        TempDir(d)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn the_port_reads_down_once_the_server_is_gone() {
    let dir = TempDir::new("server-gone");
    let topo = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../sim/tests/net-examples/net.2sw2path4hca"
    );
    let net = Network::new(
        Fabric::parse_file(topo).unwrap(),
        Arc::new(Scheduler::new(ClockMode::Real)),
    );
    let sock = dir.0.join("fabric.sock");
    let server = FabricServer::start(net, &sock).unwrap();
    let ctx = Context::open(&format!("sim:server={},node=Hca2", sock.display())).unwrap();
    let port = ctx.cas()[0].port(1).unwrap().clone();
    let alive = port.attrs().unwrap();
    assert_eq!(
        (alive.state, alive.phys_state),
        (2, 5),
        "Init, LinkUp: no SM"
    );
    server.shutdown();
    let gone = port
        .attrs()
        .expect("the port's own SMA answers without the server");
    assert_eq!((gone.state, gone.phys_state), (1, 2), "Down, Polling");
    // What the port was stays: its GUID, capability mask and P_Keys.
    assert_eq!(
        (gone.port_guid, gone.cap_mask, &gone.pkeys),
        (alive.port_guid, alive.cap_mask, &alive.pkeys)
    );
    let node = ctx.cas()[0].node().expect("NodeInfo still answered");
    assert_eq!(node.node_guid, 0x10_0003);
}

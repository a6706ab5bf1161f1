//! The fabric server and its remote links, in one process over a socket in a temporary
//! directory: attach (and the refusals), transmit and deliver between two clients and from a
//! simulated node, local MADs, port info, the capability mask, port changes, disconnects
//! (detached, IsSM cleared, the port free again), malformed and out-of-turn frames refused
//! without harm to other clients, a dead server as the device sees it, the socket's life
//! (a live one refused, a stale one replaced, removed at the end), and the delivery rule.

mod netutil;

use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::thread::ThreadId;
use std::time::{Duration, Instant};

use mad_wire::attr::node_info::{NodeInfo, NodeInfoRepr, NodeType};
use mad_wire::attr::port_info::{PhysPortState, PortInfo, PortState, cap_mask};
use mad_wire::{attr_id, class, method, status};
use netutil::{data, dr_smp, gsi, lid_smp, local_get, local_smp, smp_of};
use sim::fabric::Fabric;
use sim::link::{PortChange, PortLink, PortSink, ReceiveDrop};
use sim::net::remote::wire::{self, ClientMsg, ServerMsg};
use sim::net::remote::{
    FabricServer, RefuseCode, RemoteError, RemoteLink, RemoteTarget, ServerLimits,
};
use sim::net::{DropReason, Network};
use sim::packet::Packet;
use sim::{ClockMode, Scheduler};

/// How long a test waits for something that should happen at once.
const PATIENCE: Duration = Duration::from_secs(10);

/// A directory of its own, removed at the end.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        static N: AtomicU32 = AtomicU32::new(0);
        let d = std::env::temp_dir().join(format!(
            "sim-remote-{}-{}-{name}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        TempDir(d)
    }

    fn join(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A real-time network on ibsim's `net.2sw2path4hca` (Hca1..Hca4 on two switches).
fn fabric() -> Network {
    let f = Fabric::parse_file(data("net-examples/net.2sw2path4hca")).unwrap();
    Network::new(f, Arc::new(Scheduler::new(ClockMode::Real)))
}

fn serve(dir: &TempDir) -> FabricServer {
    FabricServer::start(fabric(), &dir.join("fabric.sock")).unwrap()
}

/// A device that records what reaches it, and on which thread.
#[derive(Default)]
struct Recorder {
    packets: Mutex<Vec<(u8, Packet, ThreadId)>>,
    changes: Mutex<Vec<(u8, PortChange, ThreadId)>>,
}

impl PortSink for Recorder {
    fn deliver(&self, port: u8, packet: Packet) {
        let t = std::thread::current().id();
        self.packets.lock().unwrap().push((port, packet, t));
    }

    fn port_changed(&self, port: u8, change: PortChange) {
        let t = std::thread::current().id();
        self.changes.lock().unwrap().push((port, change, t));
    }
}

/// A client process's side: its device (a recorder), its scheduler, its link.
struct Client {
    rec: Arc<Recorder>,
    _sink: Arc<dyn PortSink>,
    sched: Arc<Scheduler>,
    link: Arc<RemoteLink>,
}

fn try_connect(path: &Path, node: &str, port: u8) -> Result<Client, RemoteError> {
    let rec = Arc::new(Recorder::default());
    let sink: Arc<dyn PortSink> = rec.clone();
    let sched = Arc::new(Scheduler::new(ClockMode::Real));
    let link = RemoteLink::connect(&RemoteTarget::new(path, node, port), 1, &sink, &sched)?;
    Ok(Client {
        rec,
        _sink: sink,
        sched,
        link,
    })
}

fn connect(server: &FabricServer, node: &str) -> Client {
    try_connect(server.path(), node, 1).unwrap()
}

impl Client {
    /// Runs the client's scheduler (as its driver's wait would) until `done` or the patience
    /// runs out.
    fn run_until(&self, mut done: impl FnMut(&Recorder) -> bool) -> bool {
        let end = Instant::now() + PATIENCE;
        while !done(&self.rec) {
            if Instant::now() > end {
                return false;
            }
            self.sched
                .run_until(self.sched.now() + Duration::from_millis(50));
        }
        true
    }

    /// Waits for `n` packets in all and takes them.
    fn packets(&self, n: usize) -> Vec<(u8, Packet, ThreadId)> {
        assert!(
            self.run_until(|r| r.packets.lock().unwrap().len() >= n),
            "{n} packets within {PATIENCE:?}; got {}",
            self.rec.packets.lock().unwrap().len()
        );
        std::mem::take(&mut *self.rec.packets.lock().unwrap())
    }

    /// Waits for a port change and takes the changes.
    fn changes(&self) -> Vec<(u8, PortChange, ThreadId)> {
        assert!(
            self.run_until(|r| !r.changes.lock().unwrap().is_empty()),
            "a port change within {PATIENCE:?}"
        );
        std::mem::take(&mut *self.rec.changes.lock().unwrap())
    }
}

/// Polls `f` until it holds or the patience runs out.
fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let end = Instant::now() + PATIENCE;
    while !f() {
        assert!(Instant::now() < end, "{what} within {PATIENCE:?}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A raw connection speaking frames by hand.
struct Raw(UnixStream);

impl Raw {
    fn new(path: &Path) -> Raw {
        let s = UnixStream::connect(path).unwrap();
        s.set_read_timeout(Some(PATIENCE)).unwrap();
        Raw(s)
    }

    fn send(&mut self, bytes: &[u8]) {
        self.0.write_all(bytes).unwrap();
    }

    fn attach(&mut self, node: &str, port: u8) -> ServerMsg {
        self.send(
            &ClientMsg::Attach {
                version: wire::VERSION,
                node: node.into(),
                port,
            }
            .encode(),
        );
        self.next().expect("an answer to ATTACH")
    }

    /// The next frame, or `None` when the server closed the connection.
    fn next(&mut self) -> Option<ServerMsg> {
        let body = wire::read_frame(&mut self.0).expect("a whole frame")?;
        Some(ServerMsg::decode(&body).expect("the server's frames are well formed"))
    }

    /// The refusal that must come, then the end of the connection.
    #[track_caller]
    fn refused(&mut self) -> (RefuseCode, String) {
        match self.next() {
            Some(ServerMsg::Refused { code, message }) => {
                let mut rest = Vec::new();
                // A reset when the server closed with bytes of ours unread.
                match self.0.read_to_end(&mut rest) {
                    Ok(n) => assert_eq!(n, 0, "the server closes after REFUSED"),
                    Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset, "{e}"),
                }
                (code, message)
            }
            other => panic!("expected REFUSED, got {other:?}"),
        }
    }
}

#[test]
fn a_client_sees_its_port_as_the_server_holds_it() {
    let dir = TempDir::new("portinfo");
    let server = serve(&dir);
    let c = connect(&server, "Hca2");
    let s = c.link.port_info();
    // ibsim's GUID scheme: Hca1 0x100000 (ports +1, +2), Hca2 0x100003, its port 1 0x100004.
    assert_eq!(s.node_guid, 0x10_0003);
    assert_eq!(s.port_guid, 0x10_0004);
    assert_eq!(
        (s.state, s.phys_state, s.lid),
        (2, 5, 0),
        "Init, LinkUp, no SM yet"
    );
    let local = server.network().with_fabric(|f| {
        let p = f.port_id(f.node_by_name("Hca2").unwrap(), 1).unwrap();
        (f.port(p).guid(), f.port(p).state.capability_mask)
    });
    assert_eq!((s.port_guid, s.capability_mask), local);
    assert_eq!(server.attached(), vec![("Hca2".to_owned(), 1)]);
    let st = server.stats();
    assert_eq!((st.connections, st.attaches, st.refused), (1, 1, 0));
}

#[test]
fn local_mad_is_answered_by_the_sma_of_the_clients_node() {
    let dir = TempDir::new("localmad");
    let server = serve(&dir);
    let c = connect(&server, "Hca3");
    let resp = c
        .link
        .local_mad(&local_get(attr_id::sm::NODE_INFO, 0), false)
        .expect("the SMA answers NodeInfo");
    let smp = smp_of(&Packet {
        mad: Box::new(resp),
        ..dr_smp(method::GET, &[], 0, 0, [0; 64])
    });
    assert_eq!(
        (smp.method, smp.status),
        (method::GET_RESP, status::SUCCESS)
    );
    let ni = NodeInfoRepr::parse(&NodeInfo::new_checked(&smp.data[..]).unwrap()).unwrap();
    assert_eq!((ni.node_type, ni.num_ports), (NodeType::Ca, 2));
    // Hca3 is the third CA: 0x100006, port 1 0x100007.
    assert_eq!(
        (ni.node_guid, ni.port_guid, ni.local_port_num),
        (0x10_0006, 0x10_0007, 1)
    );
    // A MAD the SMA does not answer (a GetResp) comes back as "no answer".
    let mut not_a_request = local_get(attr_id::sm::NODE_INFO, 0);
    not_a_request[3] = method::GET_RESP;
    assert_eq!(c.link.local_mad(&not_a_request, false), None);
}

#[test]
fn packets_travel_between_two_clients_and_from_simulated_nodes() {
    let dir = TempDir::new("traffic");
    let server = serve(&dir);
    let a = connect(&server, "Hca1");
    let b = connect(&server, "Hca2");
    // Hca1 -> Switch1 (port 1 in) -> port 3 -> Switch2 -> port 1 -> Hca2, and back the same.
    a.link.transmit(dr_smp(
        method::GET,
        &[1, 3, 1],
        attr_id::sm::NODE_INFO,
        0,
        [0; 64],
    ));
    let got = b.packets(1);
    let (port, p, _) = &got[0];
    assert_eq!(*port, 1);
    let smp = smp_of(p);
    assert_eq!(
        (smp.method, smp.attr_id),
        (method::GET, attr_id::sm::NODE_INFO)
    );
    assert_eq!(smp.tid, 0x1234_5678);
    assert!(p.vl15 && p.dst_qp == 0);
    b.link.transmit(dr_smp(
        method::GET,
        &[1, 3, 1],
        attr_id::sm::PORT_INFO,
        1,
        [0; 64],
    ));
    let got = a.packets(1);
    assert_eq!(smp_of(&got[0].1).attr_id, attr_id::sm::PORT_INFO);
    // Switch1's SMA answers a client: NodeInfo of a switch, through the server's clock.
    a.link.transmit(dr_smp(
        method::GET,
        &[1],
        attr_id::sm::NODE_INFO,
        0,
        [0; 64],
    ));
    let got = a.packets(1);
    let smp = smp_of(&got[0].1);
    assert_eq!(
        (smp.method, smp.status),
        (method::GET_RESP, status::SUCCESS)
    );
    let ni = NodeInfoRepr::parse(&NodeInfo::new_checked(&smp.data[..]).unwrap()).unwrap();
    assert_eq!((ni.node_type, ni.node_guid), (NodeType::Switch, 0x20_0000));
    assert!(
        b.rec.packets.lock().unwrap().is_empty(),
        "nothing else for Hca2"
    );
    assert_eq!(a.link.stats().transmitted, 2);
    assert_eq!(a.link.stats().delivered, 2);
    assert_eq!(b.link.stats().delivered, 1);
}

// A client writes the SLID of what it transmits, and could claim any port's LID (an SM's,
// to forge its traps' or its answers' origin). The server sends the packet from the client's
// own port: its base LID forced, the path bits within its LMC kept, as an HCA builds the SLID.
#[test]
fn a_clients_source_lid_is_forced_into_its_ports_lids() {
    let dir = TempDir::new("slid");
    let server = serve(&dir);
    let net = server.network();
    let (p1, p2) = (net.port("Hca1", 1).unwrap(), net.port("Hca2", 1).unwrap());
    net.with_fabric_mut(|f| {
        f.set_lid(p1, 8, 2).unwrap();
        f.set_lid(p2, 20, 0).unwrap();
    });
    let a = connect(&server, "Hca1");
    let b = connect(&server, "Hca2");
    // Hca1's LIDs are 8..=11 (LMC 2).
    for (forged, sent) in [(20, 8), (0x1235, 9), (10, 10), (0xffff, 11), (0, 8), (9, 9)] {
        let mut p = dr_smp(method::GET, &[1, 3, 1], attr_id::sm::NODE_INFO, 0, [0; 64]);
        p.slid = forged;
        a.link.transmit(p);
        let got = b.packets(1);
        assert_eq!(got[0].1.slid, sent, "a client's SLID {forged:#x}");
    }
}

#[test]
fn deliveries_run_on_the_thread_that_runs_the_clients_scheduler() {
    let dir = TempDir::new("rule");
    let server = serve(&dir);
    let a = connect(&server, "Hca1");
    a.link.transmit(dr_smp(
        method::GET,
        &[1],
        attr_id::sm::NODE_INFO,
        0,
        [0; 64],
    ));
    // Nobody runs a's scheduler yet: the answer waits there as an event, not delivered by
    // the link's reader thread.
    eventually("the answer queued on the client's scheduler", || {
        a.sched.pending() == 1
    });
    assert!(a.rec.packets.lock().unwrap().is_empty());
    let got = a.packets(1);
    assert_eq!(got[0].2, std::thread::current().id());
}

#[test]
fn the_capability_mask_is_the_servers_and_a_disconnect_clears_is_sm() {
    let dir = TempDir::new("capmask");
    let server = serve(&dir);
    let port = server.network().port("Hca4", 1).unwrap();
    let held = |server: &FabricServer| {
        server
            .network()
            .with_fabric(|f| f.port(port).state.capability_mask)
    };
    let before = held(&server);
    assert_eq!(before & cap_mask::IS_SM, 0);
    let c = connect(&server, "Hca4");
    let mask = c.link.modify_capability_mask(cap_mask::IS_SM, 0);
    assert_eq!(mask, before | cap_mask::IS_SM);
    assert_eq!(held(&server), mask, "the server's SMA holds it");
    assert_eq!(c.link.port_info().capability_mask, mask);
    assert_eq!(c.link.modify_capability_mask(0, cap_mask::IS_SM), before);
    c.link.modify_capability_mask(cap_mask::IS_SM, 0);
    drop(c);
    eventually("the client detached", || server.attached().is_empty());
    assert_eq!(held(&server), before, "IsSM cleared with the client gone");
    // The port is free again.
    let again = connect(&server, "Hca4");
    assert_eq!(server.attached(), vec![("Hca4".to_owned(), 1)]);
    drop(again);
}

#[test]
fn a_client_that_dies_is_detached_and_its_is_sm_cleared() {
    let dir = TempDir::new("died");
    let server = serve(&dir);
    let port = server.network().port("Hca1", 1).unwrap();
    let mut raw = Raw::new(server.path());
    assert_eq!(
        raw.attach("Hca1", 1),
        ServerMsg::Attached {
            version: wire::VERSION,
        }
    );
    raw.send(
        &ClientMsg::ModifyCapMask {
            id: 5,
            set: cap_mask::IS_SM,
            clear: 0,
        }
        .encode(),
    );
    match raw.next() {
        Some(ServerMsg::CapMask { id: 5, mask }) => assert_ne!(mask & cap_mask::IS_SM, 0),
        other => panic!("{other:?}"),
    }
    // The process goes away without a word: its socket closes.
    drop(raw);
    eventually("the client detached", || server.attached().is_empty());
    let mask = server
        .network()
        .with_fabric(|f| f.port(port).state.capability_mask);
    assert_eq!(mask & cap_mask::IS_SM, 0);
}

#[test]
fn port_changes_reach_the_client() {
    let dir = TempDir::new("changes");
    let server = serve(&dir);
    let c = connect(&server, "Hca2");
    let port = server.network().port("Hca2", 1).unwrap();
    server.network().set_link_down(port, true);
    let changes = c.changes();
    assert_eq!(changes[0].1, PortChange::Down);
    assert_eq!(changes[0].0, 1, "the device's port");
    let s = c.link.port_info();
    assert_eq!((s.state, s.phys_state), (1, 2), "Down, Polling");
    assert!(c.link.dead().is_none(), "a link down is not a dead server");
}

#[test]
fn attaches_are_refused_with_a_reason() {
    let dir = TempDir::new("refusals");
    let server = serve(&dir);
    let _held = connect(&server, "Hca1");
    for (node, port, code, says) in [
        ("Hca1", 1, RefuseCode::PortTaken, "already has a device"),
        ("Hca9", 1, RefuseCode::UnknownNode, "Hca9"),
        ("Hca2", 0, RefuseCode::NoSuchPort, "no port 0"),
        ("Hca2", 3, RefuseCode::NoSuchPort, "ports are 1 to 2"),
        ("Switch1", 1, RefuseCode::NotACa, "Switch"),
    ] {
        match try_connect(server.path(), node, port) {
            Err(RemoteError::Refused {
                code: c, message, ..
            }) => {
                assert_eq!(c, code, "{node} {port}: {message}");
                assert!(message.contains(says), "{node} {port}: {message}");
            }
            Err(e) => panic!("{node} {port}: {e}"),
            Ok(_) => panic!("{node} {port} attached"),
        }
    }
    // The second port of a node is another port.
    let _second = try_connect(server.path(), "Hca1", 2).unwrap();
    assert_eq!(server.stats().refused, 5);
    assert_eq!(
        server.attached(),
        vec![("Hca1".to_owned(), 1), ("Hca1".to_owned(), 2)]
    );
}

#[test]
fn a_client_of_another_version_is_refused() {
    let dir = TempDir::new("version");
    let server = serve(&dir);
    let mut raw = Raw::new(server.path());
    raw.send(
        &ClientMsg::Attach {
            version: 99,
            node: "Hca1".into(),
            port: 1,
        }
        .encode(),
    );
    let (code, message) = raw.refused();
    assert_eq!(code, RefuseCode::Version);
    assert!(message.contains("99"), "{message}");
    assert!(server.attached().is_empty());
}

// A server and a client of different builds: the client's error names both versions and
// says what to do, whether the server refused the client's version (as a version-1 server
// words it) or answered with its own.
#[test]
fn a_server_of_another_version_is_a_typed_error_naming_both_versions() {
    let dir = TempDir::new("oldserver");
    for answer in [
        ServerMsg::Refused {
            code: RefuseCode::Version,
            message: "this server speaks protocol version 1, the client 2: use the same build \
                      of hca for both"
                .into(),
        },
        ServerMsg::Attached { version: 1 },
    ] {
        let path = dir.join("old.sock");
        let _ = std::fs::remove_file(&path);
        let listener = UnixListener::bind(&path).unwrap();
        let frame = answer.encode();
        let t = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            wire::read_frame(&mut s).unwrap().unwrap();
            s.write_all(&frame).unwrap();
        });
        let e = try_connect(&path, "Hca1", 1).err().expect("refused");
        t.join().unwrap();
        match &e {
            RemoteError::Version { ours, server, .. } => {
                assert_eq!((*ours, *server), (wire::VERSION, Some(1)), "{e}");
            }
            other => panic!("{answer:?}: {other}"),
        }
        let m = e.to_string();
        assert!(m.contains("version 1") && m.contains(&format!("version {}", wire::VERSION)));
        assert!(
            m.contains("same build") && m.contains("hca sim serve"),
            "{m}"
        );
    }
}

// What the device drops of what it received (an SMP its QP0 cannot take) is counted where the
// port's counters live: the server's PMA, and the network's drops.
#[test]
fn drops_a_client_device_reports_are_counted_in_the_servers_port() {
    let dir = TempDir::new("countdrop");
    let server = serve(&dir);
    let port = server.network().port("Hca1", 1).unwrap();
    let c = connect(&server, "Hca1");
    c.link.count_drop(ReceiveDrop::Vl15);
    c.link.count_drop(ReceiveDrop::Vl15);
    // A raw client reports several in one frame.
    let mut raw = Raw::new(server.path());
    assert!(matches!(raw.attach("Hca2", 1), ServerMsg::Attached { .. }));
    raw.send(
        &ClientMsg::CountDrop {
            drop: ReceiveDrop::Vl15,
            count: 3,
        }
        .encode(),
    );
    let port2 = server.network().port("Hca2", 1).unwrap();
    eventually("the drops counted", || {
        server.network().counters(port).vl15_dropped == 2
            && server.network().counters(port2).vl15_dropped == 3
    });
    assert_eq!(
        server
            .network()
            .drops()
            .get(DropReason::DeviceDropped(ReceiveDrop::Vl15)),
        5
    );
    assert_eq!(c.link.stats().reported_drops, 2);
}

#[test]
fn malformed_and_out_of_turn_frames_end_only_that_connection() {
    let dir = TempDir::new("malformed");
    let server = serve(&dir);
    let good = connect(&server, "Hca2");

    // A length beyond the limit.
    let mut raw = Raw::new(server.path());
    raw.send(&u32::MAX.to_be_bytes());
    assert_eq!(raw.refused().0, RefuseCode::Malformed);
    // Not this protocol at all.
    let mut raw = Raw::new(server.path());
    raw.send(b"GET / HTTP/1.1\r\n\r\n");
    assert_eq!(raw.refused().0, RefuseCode::Malformed);
    // A request before ATTACH.
    let mut raw = Raw::new(server.path());
    raw.send(&ClientMsg::PortInfo { id: 1 }.encode());
    assert_eq!(raw.refused().0, RefuseCode::Protocol);
    // After ATTACH: a packet with an undefined flag; an unknown type; a second ATTACH.
    for (bad, code) in [
        (
            {
                let mut f =
                    ClientMsg::Transmit(dr_smp(method::GET, &[1], 0x11, 0, [0; 64])).encode();
                f[4 + 6] |= 0x80;
                f
            },
            RefuseCode::Malformed,
        ),
        (vec![0, 0, 0, 1, 0x42], RefuseCode::Malformed),
        (
            ClientMsg::Attach {
                version: 1,
                node: "Hca3".into(),
                port: 1,
            }
            .encode(),
            RefuseCode::Protocol,
        ),
    ] {
        let mut raw = Raw::new(server.path());
        assert_eq!(
            raw.attach("Hca1", 1),
            ServerMsg::Attached {
                version: wire::VERSION,
            }
        );
        raw.send(&bad);
        assert_eq!(raw.refused().0, code);
        eventually("the bad client detached", || {
            server.attached() == vec![("Hca2".to_owned(), 1)]
        });
    }
    // A connection that ends inside a frame once attached: a client killed while it wrote,
    // gone, not misbehaving.
    let mut raw = Raw::new(server.path());
    assert_eq!(
        raw.attach("Hca1", 1),
        ServerMsg::Attached {
            version: wire::VERSION,
        }
    );
    raw.send(&[0, 0, 1, 21, 0x02, 0, 1]);
    drop(raw);
    eventually("the cut client detached", || server.attached().len() == 1);

    // Malformed: the length, the HTTP, the flag, the type; refused as well: the early request
    // and the second ATTACH. The cut frame is neither.
    let st = server.stats();
    assert_eq!(st.malformed, 4, "{st:?}");
    assert_eq!(st.refused, 6, "{st:?}");
    // The well-behaved client never noticed.
    assert!(good.link.dead().is_none());
    assert_eq!(good.link.port_info().node_guid, 0x10_0003);
}

/// A MAD answered by `local_mad`, as a packet for `smp_of`.
fn packet_of(mad: [u8; 256]) -> Packet {
    Packet {
        mad: Box::new(mad),
        ..dr_smp(method::GET, &[], 0, 0, [0; 64])
    }
}

#[test]
fn a_dead_server_is_a_port_gone_down() {
    let dir = TempDir::new("dead");
    let server = serve(&dir);
    let c = connect(&server, "Hca2");
    c.link.modify_capability_mask(cap_mask::IS_SM, 0);
    let alive = c.link.port_info();
    let live_node_info = smp_of(&packet_of(
        c.link
            .local_mad(&local_get(attr_id::sm::NODE_INFO, 0), true)
            .unwrap(),
    ));
    let live_port_info = smp_of(&packet_of(
        c.link
            .local_mad(&local_get(attr_id::sm::PORT_INFO, 1), false)
            .unwrap(),
    ));
    server.shutdown();
    let changes = c.changes();
    assert_eq!(changes.len(), 1);
    assert_eq!((changes[0].0, changes[0].1), (1, PortChange::Down));
    assert_eq!(
        changes[0].2,
        std::thread::current().id(),
        "told through the client's scheduler"
    );
    let why = c.link.dead().expect("the link knows it is dead");
    assert!(why.contains("closed"), "{why}");
    let s = c.link.port_info();
    assert_eq!((s.state, s.phys_state), (1, 2), "Down, Polling");
    assert_eq!(
        (s.port_guid, s.capability_mask),
        (alive.port_guid, alive.capability_mask)
    );
    // The port's own SMA (the firmware's on hardware) still answers the host's reads of its
    // port, from the server's last answers, with the port Down; what it never answered, and
    // Sets, get no answer.
    let node_info = c
        .link
        .local_mad(&local_get(attr_id::sm::NODE_INFO, 0), true)
        .expect("NodeInfo still answered");
    assert_eq!(smp_of(&packet_of(node_info)).data, live_node_info.data);
    let pi = smp_of(&packet_of(
        c.link
            .local_mad(&local_get(attr_id::sm::PORT_INFO, 1), false)
            .expect("PortInfo still answered"),
    ));
    assert_eq!(
        (pi.method, pi.status & 0x7fff),
        (method::GET_RESP, status::SUCCESS)
    );
    let view = PortInfo::new_checked(&pi.data[..]).unwrap();
    assert_eq!(view.port_state(), PortState::Down);
    assert_eq!(view.port_physical_state(), PhysPortState::Polling);
    let live = PortInfo::new_checked(&live_port_info.data[..]).unwrap();
    assert_eq!(
        (view.lid(), view.capability_mask(), view.local_port_num()),
        (live.lid(), live.capability_mask(), live.local_port_num())
    );
    assert_eq!(
        c.link
            .local_mad(&local_get(attr_id::sm::SL_TO_VL_TABLE, 0), true),
        None
    );
    assert_eq!(
        c.link.local_mad(
            &local_smp(method::SET, attr_id::sm::PORT_INFO, 1, pi.data),
            true
        ),
        None
    );
    assert_eq!(
        c.link.modify_capability_mask(0, cap_mask::IS_SM),
        alive.capability_mask,
        "nothing changes on a dead link"
    );
    c.link.transmit(dr_smp(
        method::GET,
        &[1],
        attr_id::sm::NODE_INFO,
        0,
        [0; 64],
    ));
    assert_eq!(c.link.stats().dropped, 1);
}

#[test]
fn a_server_that_stops_answering_is_dead_after_the_timeout() {
    let dir = TempDir::new("silent");
    let path = dir.join("silent.sock");
    let listener = UnixListener::bind(&path).unwrap();
    // A "server" that accepts the attach and then never answers a request.
    let t = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let body = wire::read_frame(&mut s).unwrap().unwrap();
        assert!(matches!(
            ClientMsg::decode(&body),
            Ok(ClientMsg::Attach { .. })
        ));
        s.write_all(
            &ServerMsg::Attached {
                version: wire::VERSION,
            }
            .encode(),
        )
        .unwrap();
        let mut sink = Vec::new();
        let _ = s.read_to_end(&mut sink);
    });
    let rec = Arc::new(Recorder::default());
    let sink: Arc<dyn PortSink> = rec.clone();
    let sched = Arc::new(Scheduler::new(ClockMode::Real));
    let mut target = RemoteTarget::new(&path, "Hca1", 1);
    target.timeout = Duration::from_millis(200);
    let link = RemoteLink::connect(&target, 1, &sink, &sched).unwrap();
    let start = Instant::now();
    assert_eq!(link.port_info().state, 1);
    assert!(start.elapsed() < PATIENCE);
    assert!(link.dead().unwrap().contains("did not answer"));
    drop(link);
    t.join().unwrap();
}

#[test]
fn the_socket_is_refused_when_live_replaced_when_stale_and_removed_at_the_end() {
    let dir = TempDir::new("socket");
    let path = dir.join("fabric.sock");
    let server = FabricServer::start(fabric(), &path).unwrap();
    match FabricServer::start(fabric(), &path) {
        Err(RemoteError::Live { path: p }) => assert_eq!(p, path),
        other => panic!("a second server on a live socket: {other:?}"),
    }
    assert!(
        server.attached().is_empty(),
        "the liveness probe is no client"
    );
    server.shutdown();
    assert!(!path.exists(), "removed at shutdown");

    // A socket left by a server that died.
    drop(UnixListener::bind(&path).unwrap());
    assert!(path.exists());
    let server = FabricServer::start(fabric(), &path).unwrap();
    let c = connect(&server, "Hca1");
    assert!(c.link.dead().is_none());
    drop(c);
    drop(server);
    assert!(!path.exists());

    // A file that is not a socket is left alone.
    std::fs::write(&path, "precious").unwrap();
    assert!(matches!(
        FabricServer::start(fabric(), &path),
        Err(RemoteError::NotASocket { .. })
    ));
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "precious");

    // Virtual time is for one driving thread, not a server.
    let f = Fabric::parse_file(data("net-examples/net.2sw2path4hca")).unwrap();
    let virt = Network::new(f, Arc::new(Scheduler::new(ClockMode::Virtual)));
    assert!(matches!(
        FabricServer::start(virt, &dir.join("v.sock")),
        Err(RemoteError::VirtualClock)
    ));
    // No server at all.
    let e = try_connect(&dir.join("nobody.sock"), "Hca1", 1)
        .err()
        .unwrap();
    assert!(e.to_string().contains("hca sim serve"), "{e}");
}

#[test]
fn shutdown_disconnects_every_client_and_joins_its_threads() {
    let dir = TempDir::new("shutdown");
    let server = serve(&dir);
    let clients: Vec<Client> = ["Hca1", "Hca2", "Hca3", "Hca4"]
        .iter()
        .map(|n| connect(&server, n))
        .collect();
    assert_eq!(server.attached().len(), 4);
    let start = Instant::now();
    server.shutdown();
    assert!(start.elapsed() < PATIENCE);
    for c in &clients {
        assert_eq!(c.changes()[0].1, PortChange::Down);
        assert!(c.link.dead().is_some());
    }
}

// The socket file is its user's only (mode 0600, not the bind's 0777 less the umask): another
// user cannot connect to it at all.
#[test]
fn the_socket_file_is_its_owners_only() {
    use std::os::unix::fs::PermissionsExt;
    let dir = TempDir::new("mode");
    let server = serve(&dir);
    let mode = std::fs::metadata(server.path())
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o7777, 0o600, "mode {mode:o}");
    let c = connect(&server, "Hca1");
    assert!(c.link.dead().is_none(), "its own user connects");
}

// Two servers starting together on a stale socket: without taking turns, both could see it
// stale, the second remove the first's new socket and bind its own, and both start (one
// listening where nobody can reach it). One gets the path, the other finds it live.
#[test]
fn of_two_servers_starting_together_on_a_stale_socket_one_gets_it() {
    let dir = TempDir::new("startrace");
    let path = dir.join("fabric.sock");
    let f = Fabric::parse_file(data("net-examples/net.2sw2path4hca")).unwrap();
    let start = Instant::now();
    let mut rounds = 0;
    while rounds < 400 && start.elapsed() < Duration::from_secs(2) {
        rounds += 1;
        drop(UnixListener::bind(&path).unwrap());
        let barrier = Arc::new(std::sync::Barrier::new(2));
        let starters: Vec<_> = (0..2)
            .map(|_| {
                let (f, path, barrier) = (f.clone(), path.clone(), barrier.clone());
                std::thread::spawn(move || {
                    let net = Network::new(f, Arc::new(Scheduler::new(ClockMode::Real)));
                    barrier.wait();
                    FabricServer::start(net, &path)
                })
            })
            .collect();
        let results: Vec<_> = starters.into_iter().map(|t| t.join().unwrap()).collect();
        let started = results.iter().filter(|r| r.is_ok()).count();
        assert_eq!(started, 1, "round {rounds}: {results:?}");
        assert!(
            results
                .iter()
                .any(|r| matches!(r, Err(RemoteError::Live { .. }))),
            "round {rounds}: the other finds the path live: {results:?}"
        );
        let server = results.into_iter().find_map(Result::ok).unwrap();
        let c = connect(&server, "Hca1");
        assert!(c.link.dead().is_none(), "round {rounds}");
        drop(c);
        drop(server);
        assert!(
            !path.exists(),
            "round {rounds}: the socket removed at the stop"
        );
    }
    assert!(rounds >= 10, "only {rounds} rounds");
}

// A server's socket file may be removed and the path taken by another server; stopping the
// first must neither wait for ever nor knock on the second's door.
#[test]
fn shutdown_returns_when_another_server_took_the_socket_path() {
    let dir = TempDir::new("takenpath");
    let path = dir.join("fabric.sock");
    let a = FabricServer::start(fabric(), &path).unwrap();
    std::fs::remove_file(&path).unwrap();
    let b = FabricServer::start(fabric(), &path).unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        a.shutdown();
        let _ = tx.send(());
    });
    rx.recv_timeout(PATIENCE)
        .expect("the first server's shutdown returned");
    assert_eq!(
        b.stats().connections,
        0,
        "the first server's stop is no client of the second"
    );
    assert!(path.exists(), "the second server's socket is left in place");
    let c = connect(&b, "Hca1");
    assert!(c.link.dead().is_none());
}

// Closing a device and reopening it at once is what a program run twice in a row does: the
// port must be free again the moment the link is dropped, not when the server gets round to
// it.
#[test]
fn a_dropped_link_frees_its_port_before_the_drop_returns() {
    let dir = TempDir::new("reopen");
    let server = serve(&dir);
    for cycle in 0..200 {
        let c =
            try_connect(server.path(), "Hca3", 1).unwrap_or_else(|e| panic!("cycle {cycle}: {e}"));
        drop(c);
        assert!(
            server.attached().is_empty(),
            "cycle {cycle}: still attached"
        );
    }
    assert_eq!(server.stats().refused, 0);
}

// A server that never closes its end must not hold up a drop for longer than the timeout.
#[test]
fn a_drop_waits_for_the_server_no_longer_than_the_timeout() {
    let dir = TempDir::new("noclose");
    let path = dir.join("noclose.sock");
    let listener = UnixListener::bind(&path).unwrap();
    let (release, held) = mpsc::channel::<()>();
    // A "server" that answers the attach and every request (no SMA answer), and keeps its
    // end open after the client's end of the stream until the test lets it go.
    let t = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        wire::read_frame(&mut s).unwrap().unwrap();
        s.write_all(
            &ServerMsg::Attached {
                version: wire::VERSION,
            }
            .encode(),
        )
        .unwrap();
        while let Ok(Some(body)) = wire::read_frame(&mut s) {
            if let Ok(ClientMsg::LocalMad { id, .. }) = ClientMsg::decode(&body) {
                s.write_all(&ServerMsg::MadAnswer { id, mad: None }.encode())
                    .unwrap();
            }
        }
        let _ = held.recv();
    });
    let rec = Arc::new(Recorder::default());
    let sink: Arc<dyn PortSink> = rec.clone();
    let sched = Arc::new(Scheduler::new(ClockMode::Real));
    let mut target = RemoteTarget::new(&path, "Hca1", 1);
    target.timeout = Duration::from_millis(300);
    let link = RemoteLink::connect(&target, 1, &sink, &sched).unwrap();
    assert!(link.dead().is_none());
    let start = Instant::now();
    drop(link);
    let took = start.elapsed();
    assert!(
        took >= Duration::from_millis(300) && took < PATIENCE,
        "the drop waited {took:?}"
    );
    release.send(()).unwrap();
    t.join().unwrap();
}

// A client process that does not run its device's scheduler (its driver neither waits nor
// rings a doorbell) must not pile up every delivery the server sends it: beyond the limit
// they are dropped and counted, and once the device has taken what waited, room is back.
#[test]
fn deliveries_waiting_for_the_device_are_capped() {
    let dir = TempDir::new("cap");
    let server = serve(&dir);
    let rec = Arc::new(Recorder::default());
    let sink: Arc<dyn PortSink> = rec.clone();
    let sched = Arc::new(Scheduler::new(ClockMode::Real));
    let mut target = RemoteTarget::new(server.path(), "Hca1", 1);
    target.max_pending = 50;
    let a = Client {
        rec,
        _sink: sink.clone(),
        sched: sched.clone(),
        link: RemoteLink::connect(&target, 1, &sink, &sched).unwrap(),
    };
    let b = connect(&server, "Hca2");
    let to_a = || dr_smp(method::GET, &[1, 3, 1], attr_id::sm::NODE_INFO, 0, [0; 64]);
    for _ in 0..200 {
        b.link.transmit(to_a());
    }
    eventually("every packet reached the client", || {
        let st = a.link.stats();
        st.delivered + st.overflowed == 200
    });
    let st = a.link.stats();
    assert_eq!((st.delivered, st.overflowed), (50, 150), "{st:?}");
    assert_eq!(a.sched.pending(), 50);
    assert_eq!(a.packets(50).len(), 50);
    // The device took them: there is room again.
    for _ in 0..10 {
        b.link.transmit(to_a());
    }
    assert_eq!(a.packets(10).len(), 10);
    assert_eq!(a.link.stats().overflowed, 150);
    assert_eq!(server.stats().queue_drops, 0, "the server dropped none");
}

// The deliveries beyond the cap are dropped as a port without buffers drops them, and the
// port's counters on the server say so: an SMP in VL15Dropped, a data packet in
// PortRcvErrors (both in the network's drops as the device's).
#[test]
fn deliveries_beyond_the_cap_are_counted_as_the_ports_drops() {
    let dir = TempDir::new("capdrops");
    let server = serve(&dir);
    let net = server.network();
    let port = net.port("Hca1", 1).unwrap();
    net.with_fabric_mut(|f| f.set_lid(port, 1, 0).unwrap());
    let rec = Arc::new(Recorder::default());
    let sink: Arc<dyn PortSink> = rec.clone();
    let sched = Arc::new(Scheduler::new(ClockMode::Real));
    let mut target = RemoteTarget::new(server.path(), "Hca1", 1);
    target.max_pending = 50;
    let a = Client {
        rec,
        _sink: sink.clone(),
        sched: sched.clone(),
        link: RemoteLink::connect(&target, 1, &sink, &sched).unwrap(),
    };
    // To its own LID: each comes back to it (loopback), in order. The first 50 SMPs wait for
    // the device; the other 50 SMPs and the 100 GMPs find no room.
    for _ in 0..100 {
        a.link.transmit(lid_smp(
            method::GET,
            1,
            1,
            attr_id::sm::NODE_INFO,
            0,
            [0; 64],
        ));
    }
    for _ in 0..100 {
        a.link
            .transmit(gsi(class::PERF_MGMT, method::GET, 1, 1, 0x12, 0, &[]));
    }
    eventually("the drops counted at the server", || {
        let c = net.counters(port);
        (c.vl15_dropped, c.rcv_errors) == (50, 100)
    });
    let st = a.link.stats();
    assert_eq!((st.delivered, st.overflowed), (50, 150), "{st:?}");
    assert_eq!(st.reported_drops, 150);
    let drops = net.drops();
    assert_eq!(drops.get(DropReason::DeviceDropped(ReceiveDrop::Vl15)), 50);
    assert_eq!(
        drops.get(DropReason::DeviceDropped(ReceiveDrop::Overrun)),
        100
    );
    assert_eq!(a.packets(50).len(), 50);
}

fn serve_with(dir: &TempDir, limits: ServerLimits) -> FabricServer {
    FabricServer::start_with(fabric(), &dir.join("fabric.sock"), limits).unwrap()
}

// Each connection not yet attached holds a thread and two descriptors: beyond the limit new
// ones are refused at once, and a place frees when one of them ends.
#[test]
fn connections_waiting_to_attach_are_capped() {
    let dir = TempDir::new("handshakes");
    let server = serve_with(
        &dir,
        ServerLimits {
            attach_timeout: PATIENCE * 3,
            max_handshakes: 4,
        },
    );
    let mut silent: Vec<Raw> = (0..4).map(|_| Raw::new(server.path())).collect();
    let mut fifth = Raw::new(server.path());
    let (code, message) = fifth.refused();
    assert_eq!(code, RefuseCode::Busy, "{message}");
    assert!(message.contains('4'), "{message}");
    let st = server.stats();
    assert_eq!((st.busy, st.refused, st.malformed), (1, 1, 0), "{st:?}");
    // One of the silent ones goes: its place is free for a client that attaches.
    drop(silent.pop());
    let end = Instant::now() + PATIENCE;
    let c = loop {
        match try_connect(server.path(), "Hca1", 1) {
            Ok(c) => break c,
            Err(RemoteError::Refused {
                code: RefuseCode::Busy,
                ..
            }) if Instant::now() < end => std::thread::sleep(Duration::from_millis(5)),
            Err(e) => panic!("{e}"),
        }
    };
    assert!(c.link.dead().is_none());
    assert_eq!(server.attached(), vec![("Hca1".to_owned(), 1)]);
}

// The attach timeout is one deadline for the whole ATTACH, not a wait per read that each
// byte restarts.
#[test]
fn the_attach_deadline_holds_however_slowly_the_attach_comes() {
    let dir = TempDir::new("slowattach");
    let server = serve_with(
        &dir,
        ServerLimits {
            attach_timeout: Duration::from_millis(500),
            ..ServerLimits::default()
        },
    );
    let mut raw = Raw::new(server.path());
    let attach = ClientMsg::Attach {
        version: wire::VERSION,
        node: "Hca1".into(),
        port: 1,
    }
    .encode();
    // One byte every 100 ms: the whole frame would take about 2 s.
    assert!(attach.len() >= 18);
    let mut w = raw.0.try_clone().unwrap();
    let dripper = std::thread::spawn(move || {
        for b in attach {
            if w.write_all(&[b]).is_err() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    });
    let (code, message) = raw.refused();
    // A wait per read (each under 500 ms) would have let the whole frame in and attached:
    // the refusal itself is what shows the deadline held. No bound on the time taken here: a
    // loaded machine may be slow to refuse, and a hang would end at the reader's patience.
    assert_eq!(code, RefuseCode::Timeout, "{message}");
    assert!(server.attached().is_empty());
    dripper.join().unwrap();
}

// A connection that says nothing is late, not malformed.
#[test]
fn a_silent_connection_is_refused_as_late_not_malformed() {
    let dir = TempDir::new("silentconn");
    let server = serve_with(
        &dir,
        ServerLimits {
            attach_timeout: Duration::from_millis(200),
            ..ServerLimits::default()
        },
    );
    let mut raw = Raw::new(server.path());
    let (code, message) = raw.refused();
    assert_eq!(code, RefuseCode::Timeout, "{message}");
    assert!(message.contains("no ATTACH within"), "{message}");
    let st = server.stats();
    assert_eq!(
        (st.timed_out, st.malformed, st.refused),
        (1, 0, 1),
        "{st:?}"
    );
}

// After a REFUSED the connection is over both ways: nothing the client sent after the frame
// that earned it is looked at (a request pipelined behind it: no answer, no effect), and
// nothing is written to it but the end of the stream, while another client keeps sending to
// its port until the server has detached it.
#[test]
fn nothing_is_read_or_written_after_a_refused() {
    let dir = TempDir::new("afterrefused");
    let server = serve(&dir);
    let port = server.network().port("Hca1", 1).unwrap();
    let b = connect(&server, "Hca2");
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flood = {
        let stop = stop.clone();
        let link = b.link.clone();
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let to_hca1 = dr_smp(method::GET, &[1, 3, 1], attr_id::sm::NODE_INFO, 0, [0; 64]);
                link.transmit(to_hca1);
                std::thread::sleep(Duration::from_micros(50));
            }
        })
    };
    for (round, bad) in [
        vec![0, 0, 0, 1, 0x42],
        ClientMsg::Attach {
            version: wire::VERSION,
            node: "Hca3".into(),
            port: 1,
        }
        .encode(),
    ]
    .iter()
    .cycle()
    .take(20)
    .enumerate()
    {
        let mut raw = Raw::new(server.path());
        assert!(matches!(raw.attach("Hca1", 1), ServerMsg::Attached { .. }));
        std::thread::sleep(Duration::from_millis(2));
        let mut bytes = bad.clone();
        let set_is_sm = ClientMsg::ModifyCapMask {
            id: 9,
            set: cap_mask::IS_SM,
            clear: 0,
        };
        bytes.extend(set_is_sm.encode());
        raw.send(&bytes);
        let mut refused = false;
        let mut after = Vec::new();
        while let Ok(Some(body)) = wire::read_frame(&mut raw.0) {
            match ServerMsg::decode(&body).unwrap() {
                ServerMsg::Refused { .. } if !refused => refused = true,
                m @ ServerMsg::CapMask { .. } => panic!("round {round}: answered {m:?}"),
                m if refused => after.push(format!("{m:.40?}")),
                _ => {}
            }
        }
        assert!(refused, "round {round}");
        assert!(after.is_empty(), "round {round}: after REFUSED: {after:?}");
        eventually("the refused client detached", || {
            server.attached().len() == 1
        });
        let mask = server
            .network()
            .with_fabric(|f| f.port(port).state.capability_mask);
        assert_eq!(mask & cap_mask::IS_SM, 0, "round {round}: IsSM set");
    }
    stop.store(true, Ordering::Relaxed);
    flood.join().unwrap();
}

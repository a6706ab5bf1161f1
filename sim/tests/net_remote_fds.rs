//! A fabric server gives back what each connection took once it ends, however it ends: the
//! descriptors and threads of the process and the server's own records return to what they
//! were. One test in this binary: it counts the process's descriptors and threads, which
//! another test running beside it would change (nextest runs each test in a process of its
//! own; `cargo test` runs the tests of one binary in one process).

mod netutil;

use std::io::Write;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use netutil::data;
use sim::fabric::Fabric;
use sim::link::{PortChange, PortSink};
use sim::net::Network;
use sim::net::remote::wire::{self, ClientMsg, ServerMsg};
use sim::net::remote::{FabricServer, RemoteError, RemoteLink, RemoteTarget, ServerLimits};
use sim::packet::Packet;
use sim::{ClockMode, Scheduler};

const PATIENCE: Duration = Duration::from_secs(10);

/// Entries of a `/proc/self` directory: `fd` (descriptors) or `task` (threads).
fn count(dir: &str) -> usize {
    std::fs::read_dir(format!("/proc/self/{dir}"))
        .unwrap_or_else(|e| panic!("/proc/self/{dir}: {e}"))
        .count()
}

struct Nothing;

impl PortSink for Nothing {
    fn deliver(&self, _port: u8, _packet: Packet) {}
    fn port_changed(&self, _port: u8, _change: PortChange) {}
}

fn link(path: &Path, node: &str) -> Result<Arc<RemoteLink>, RemoteError> {
    let sink: Arc<dyn PortSink> = Arc::new(Nothing);
    let sched = Arc::new(Scheduler::new(ClockMode::Real));
    let link = RemoteLink::connect(&RemoteTarget::new(path, node, 1), 1, &sink, &sched)?;
    // The sink and the scheduler go first, as when a device closes.
    drop(sink);
    drop(sched);
    Ok(link)
}

/// A raw connection whose ATTACH for Hca2 the server granted.
fn attached(path: &Path) -> UnixStream {
    let mut s = UnixStream::connect(path).unwrap();
    s.set_read_timeout(Some(PATIENCE)).unwrap();
    s.write_all(
        &ClientMsg::Attach {
            version: wire::VERSION,
            node: "Hca2".into(),
            port: 1,
        }
        .encode(),
    )
    .unwrap();
    let body = wire::read_frame(&mut s).unwrap().unwrap();
    assert!(matches!(
        ServerMsg::decode(&body),
        Ok(ServerMsg::Attached { .. })
    ));
    s
}

/// Reads to the end of the stream: the server has closed its end (after its REFUSED).
fn closed_by_server(mut s: UnixStream) {
    s.set_read_timeout(Some(PATIENCE)).unwrap();
    let mut rest = Vec::new();
    // A reset when the server closed with bytes of ours unread.
    if let Err(e) = std::io::Read::read_to_end(&mut s, &mut rest) {
        assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset, "{e}");
    }
}

#[test]
fn every_connection_gives_back_its_descriptors_threads_and_records() {
    let dir = std::env::temp_dir().join(format!("sim-remote-fds-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let f = Fabric::parse_file(data("net-examples/net.2sw2path4hca")).unwrap();
    let net = Network::new(f, Arc::new(Scheduler::new(ClockMode::Real)));
    let server = FabricServer::start_with(
        net,
        &dir.join("fabric.sock"),
        ServerLimits {
            attach_timeout: Duration::from_millis(200),
            max_handshakes: 2,
        },
    )
    .unwrap();
    let path = server.path().to_owned();
    let (fds, tasks) = (count("fd"), count("task"));

    for _ in 0..3 {
        // Attached through a link, then closed as a device closes.
        drop(link(&path, "Hca1").unwrap());
        // Refused at the attach: an unknown node.
        assert!(matches!(
            link(&path, "Hca9"),
            Err(RemoteError::Refused { .. })
        ));
        // Attached, then gone without a word (a process killed).
        drop(attached(&path));
        let end = Instant::now() + PATIENCE;
        while !server.attached().is_empty() {
            assert!(Instant::now() < end, "the silent client detached");
            std::thread::sleep(Duration::from_millis(5));
        }
        // Attached, then a malformed frame: REFUSED, closed.
        let mut s = attached(&path);
        s.write_all(&[0, 0, 0, 1, 0x42]).unwrap();
        closed_by_server(s);
        // Another version: REFUSED at the attach.
        let mut s = UnixStream::connect(&path).unwrap();
        s.write_all(
            &ClientMsg::Attach {
                version: wire::VERSION + 1,
                node: "Hca3".into(),
                port: 1,
            }
            .encode(),
        )
        .unwrap();
        closed_by_server(s);
        // Silent until the attach deadline, while more wait than the server lets wait: the
        // third is refused as busy at once.
        let silent: Vec<UnixStream> = (0..2)
            .map(|_| UnixStream::connect(&path).unwrap())
            .collect();
        let busy = UnixStream::connect(&path).unwrap();
        closed_by_server(busy);
        for s in silent {
            closed_by_server(s);
        }
    }
    let st = server.stats();
    assert_eq!(st.attaches, 9, "{st:?}");
    assert_eq!(st.busy + st.timed_out, 9, "{st:?}");

    let end = Instant::now() + PATIENCE;
    loop {
        let now = (server.connections(), count("fd"), count("task"));
        if now == (0, fds, tasks) {
            break;
        }
        assert!(
            Instant::now() < end,
            "(connections, descriptors, threads) {now:?}, expected {:?}",
            (0, fds, tasks)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    server.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
}

//! Loads a large topology into a running network and sends SMPs through it, reporting the
//! load time and the process's peak memory (VmHWM): the fabric's parse, `Network::new`, a
//! device attached to the first host, and a directed-route NodeInfo to every node within two
//! hops of it followed by one per switch port of its leaf (what the first steps of a
//! discovery send).
//!
//! The requests are sent twice and the second, warm pass is timed (the first allocates the
//! counters' side tables and warms the caches).
//!
//! `cargo run --release -p sim --example net_load [-- SPEC]`; the default SPEC is the
//! 102,976-node `fat-tree3:pods=96,leaves=32,hosts=32,spines=16,cores=64`.

use std::process::{Command, ExitCode};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use mad_wire::smp::{DirectedRoute, Smp, SmpRepr, SmpRoute};
use mad_wire::{attr_id, method};
use sim::fabric::{Fabric, generator};
use sim::link::{PortChange, PortSink};
use sim::net::Network;
use sim::packet::Packet;
use sim::{ClockMode, Scheduler};

const DEFAULT_SPEC: &str = "fat-tree3:pods=96,leaves=32,hosts=32,spines=16,cores=64";

/// A `Vm*:` line of /proc/self/status, in KiB.
fn status_kib(field: &str) -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with(field))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

#[derive(Default)]
struct Count(Mutex<usize>);

impl PortSink for Count {
    fn deliver(&self, _port: u8, _packet: Packet) {
        *self.0.lock().unwrap() += 1;
    }
    fn port_changed(&self, _port: u8, _change: PortChange) {}
}

fn dr_get(path: &[u8]) -> Packet {
    let mut dr = DirectedRoute::from_path(path).expect("short path");
    dr.hop_pointer = 1;
    let repr = SmpRepr::request(
        method::GET,
        SmpRoute::Directed(dr),
        attr_id::sm::NODE_INFO,
        0,
        7,
    );
    let mut mad = Box::new([0u8; 256]);
    repr.emit(&mut Smp::new_checked(&mut mad[..]).expect("256 bytes"));
    Packet {
        slid: 0xFFFF,
        dlid: 0xFFFF,
        sl: 0,
        vl15: true,
        src_qp: 0,
        dst_qp: 0,
        qkey: 0,
        pkey: 0xFFFF,
        grh: None,
        mad,
    }
}

fn load(path: &str) -> ExitCode {
    let t = Instant::now();
    let fabric = match Fabric::parse_file(path) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let parsed = t.elapsed();
    let (nodes, ports) = (fabric.node_count(), fabric.port_count());
    let net = Network::new(fabric, Arc::new(Scheduler::new(ClockMode::Virtual)));
    let built = t.elapsed();
    let count = Arc::new(Count::default());
    let sink: Arc<dyn PortSink> = count.clone();
    let Some(first) = net.with_fabric(|f| {
        f.node_ids()
            .find(|&n| f.node(n).kind() == sim::fabric::NodeType::Ca)
    }) else {
        eprintln!("error: the fabric has no CA to attach to");
        return ExitCode::FAILURE;
    };
    let link = match net.attach(first, 1, &sink) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let leaf_ports = net.with_fabric(|f| {
        let p = f.port_id(first, 1).and_then(|p| f.peer(p));
        p.map_or(0, |p| f.node(f.port(p).node()).num_ports())
    });
    let sweep = || {
        let mut sent = 0u32;
        for out in 1..=leaf_ports {
            link.transmit(dr_get(&[1, out]));
            sent += 1;
            for down in 1..=8 {
                link.transmit(dr_get(&[1, out, down]));
                sent += 1;
            }
            net.scheduler().run_due();
        }
        sent
    };
    sweep();
    *count.0.lock().unwrap() = 0;
    let t2 = Instant::now();
    let sent = sweep();
    let swept = t2.elapsed();
    let delivered = *count.0.lock().unwrap();
    let hwm = status_kib("VmHWM:").unwrap_or(0);
    println!(
        "{nodes} nodes, {ports} ports: parsed in {:.3} s, network built in {:.3} s (total); \
         {sent} directed-route NodeInfo Gets ({delivered} answers delivered, the rest dropped \
         by the SMI at a CA mid-path) in {:.3} ms \
         ({:.0} ns each); peak RSS {} MiB",
        parsed.as_secs_f64(),
        built.as_secs_f64(),
        swept.as_secs_f64() * 1e3,
        swept.as_secs_f64() * 1e9 / f64::from(sent.max(1)),
        hwm / 1024,
    );
    ExitCode::SUCCESS
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let [flag, path] = args.as_slice() {
        if flag == "--load" {
            return load(path);
        }
    }
    let spec = args.first().map_or(DEFAULT_SPEC, String::as_str);
    let path = std::env::temp_dir().join(format!("net-load-{}.net", std::process::id()));
    let file = match std::fs::File::create(&path) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("error: cannot create {}: {e}", path.display());
            return ExitCode::FAILURE;
        }
    };
    if let Err(e) = generator::generate_text(spec, file) {
        eprintln!("error: {e}");
        return ExitCode::FAILURE;
    }
    let status = Command::new(std::env::current_exe().expect("own path"))
        .arg("--load")
        .arg(&path)
        .status();
    let _ = std::fs::remove_file(&path);
    match status {
        Ok(s) if s.success() => ExitCode::SUCCESS,
        _ => ExitCode::FAILURE,
    }
}

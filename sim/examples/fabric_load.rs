//! Measures loading a large topology: generates it as text into a file, then loads that file in
//! a fresh process and reports the load time and the process's peak memory (VmHWM).
//!
//! `cargo run --release -p sim --example fabric_load [-- SPEC]`; the default SPEC is the
//! 102,976-node `fat-tree3:pods=96,leaves=32,hosts=32,spines=16,cores=64`.

use std::process::{Command, ExitCode};
use std::time::Instant;

use sim::fabric::{Fabric, generator};

const DEFAULT_SPEC: &str = "fat-tree3:pods=96,leaves=32,hosts=32,spines=16,cores=64";

/// A `Vm*:` line of /proc/self/status, in KiB.
fn status_kib(field: &str) -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with(field))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn load(path: &str) -> ExitCode {
    let before = status_kib("VmHWM:").unwrap_or(0);
    let t = Instant::now();
    let f = match Fabric::parse_file(path) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let elapsed = t.elapsed();
    let hwm = status_kib("VmHWM:").unwrap_or(0);
    println!(
        "loaded {} nodes, {} ports, {} links in {:.3} s; peak RSS {} KiB = {} MiB (at start {} KiB)",
        f.node_count(),
        f.port_count(),
        f.link_count(),
        elapsed.as_secs_f64(),
        hwm,
        hwm / 1024,
        before
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
    let path = std::env::temp_dir().join(format!("fabric-load-{}.net", std::process::id()));
    let t = Instant::now();
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
    let size = std::fs::metadata(&path).map_or(0, |m| m.len());
    println!(
        "generated {spec}: {size} bytes of text in {:.3} s",
        t.elapsed().as_secs_f64()
    );
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

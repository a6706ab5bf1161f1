//! Writes a generated topology to stdout, or re-writes a topology file in canonical form:
//! `cargo run -p sim --example fabric_gen -- fat-tree:leaves=4,hosts=2,spines=2` or
//! `cargo run -p sim --example fabric_gen -- --rewrite FILE`. Until `hca sim gen` exists, this is
//! how to get a generated file by hand.

use std::process::ExitCode;

use sim::fabric::{Fabric, generator};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.as_slice() {
        [flag, file] if flag == "--rewrite" => {
            Fabric::parse_file(file).and_then(|f| f.write_topology(std::io::stdout().lock()))
        }
        [spec] => generator::generate_text(spec, std::io::stdout().lock()).map(|_| ()),
        _ => {
            eprintln!("usage: fabric_gen SPEC | fabric_gen --rewrite FILE");
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

//! `hca sim ...`: tools for the simulated fabric (`hca sim gen` writes topology files).

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;

use sim::fabric::generator;

use super::CmdResult;

/// Long help of `hca sim gen`.
pub const GEN_HELP: &str = "\
Writes a topology file in the ibnetdiscover/ibsim format for a regular fabric, to standard
output or to --output. The simulator (sim:topology=FILE), ibsim and our parser all read it.

Shapes (numbers are decimal):
  fat-tree:leaves=L,hosts=H,spines=S[,links=K,leaf-ports=P,spine-ports=Q]
      two levels: every leaf cabled to every spine (K cables each), H hosts per leaf
  fat-tree3:pods=P,leaves=L,hosts=H,spines=S,cores=C
      three levels: pods of leaves and spines under C cores (C a multiple of S)
  switch:hosts=H[,ports=P]      one switch with H hosts
  line:switches=N,hosts=H[,links=K]   switches in a line, H hosts each
  ring:switches=N,hosts=H[,links=K]   the same, closed into a ring (N >= 3)
Every shape takes link=RATE (e.g. link=4xHDR) for the rate of every cable.

Hosts are single-port CAs named host-1, host-2, ... and come first in the file; switches are
named after their role (leaf-N, spine-N, core-N, podP-leafN, switch-1, sw-N). GUIDs follow
ibsim's default scheme and are written out.

Examples:
  hca sim gen fat-tree:leaves=36,hosts=18,spines=18 -o ft648.topo     648 hosts, 36-port switches
  hca sim gen fat-tree:leaves=64,hosts=32,spines=32 -o ft2144.topo    2,144 nodes
  hca sim gen fat-tree3:pods=96,leaves=32,hosts=32,spines=16,cores=64 -o ft100k.topo
  hca sim gen switch:hosts=4";

/// Subcommands of `hca sim`.
#[derive(Debug, clap::Subcommand)]
pub enum SimCommand {
    /// Write a generated topology file (fat trees and other regular shapes).
    #[command(after_long_help = GEN_HELP)]
    Gen(GenArgs),
}

/// Arguments of `hca sim gen`.
#[derive(Debug, clap::Args)]
pub struct GenArgs {
    /// The shape and its sizes, e.g. fat-tree:leaves=64,hosts=32,spines=32.
    #[arg(value_name = "SPEC")]
    pub spec: String,

    /// Write to this file instead of standard output.
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
}

/// Run `hca sim ...`.
pub fn run(cmd: &SimCommand) -> CmdResult {
    match cmd {
        SimCommand::Gen(args) => generate(args),
    }
}

fn generate(args: &GenArgs) -> CmdResult {
    let Some(path) = &args.output else {
        let stdout = std::io::stdout();
        let mut out = BufWriter::new(stdout.lock());
        generator::generate_text(&args.spec, &mut out)?;
        out.flush()?;
        return Ok(());
    };
    let file = File::create(path).map_err(|e| format!("cannot create {}: {e}", path.display()))?;
    let mut out = BufWriter::new(file);
    let fabric = generator::generate_text(&args.spec, &mut out)?;
    out.flush()
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    eprintln!(
        "wrote {}: {} nodes, {} links",
        path.display(),
        fabric.node_count(),
        fabric.link_count()
    );
    Ok(())
}

//! The subcommands, one module each, and what they share.
//!
//! They print through `outln!` and `errln!` (defined here), not `println!` and `eprintln!`,
//! which panic when a write fails: standard output may be a full disk (`hca info sim > /dev/full`) and
//! standard error too. A failed write to standard output is an error of the command (exit 1);
//! one to standard error is dropped, since there is nowhere left to report it. (A reader that
//! went away ends the program by SIGPIPE before either, see `restore_sigpipe` in main.)

/// `println!` to standard output that gives the write's `io::Result` (for a `?`) instead of
/// panicking on an error.
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        writeln!(std::io::stdout().lock(), $($arg)*).map_err($crate::cmd::stdout_error)
    }};
}

/// `eprintln!` that drops a failed write instead of panicking on it.
macro_rules! errln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr().lock(), $($arg)*);
    }};
}

/// `eprint!` that drops a failed write instead of panicking on it.
macro_rules! err {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = write!(std::io::stderr().lock(), $($arg)*);
    }};
}

/// `help` followed by the parameters of `sim:` device strings ([`embed::SIM_HELP`]), for the
/// long help of the commands that take a device string and of `hca` itself.
pub fn with_sim_help(help: &str) -> String {
    format!(
        "{help}\n\nParameters of sim:KEY=VALUE,... device strings:\n{}",
        embed::SIM_HELP
    )
}

/// A failed write to standard output, saying so (the bare error names no file).
#[allow(clippy::needless_pass_by_value)] // the shape `map_err` takes
pub fn stdout_error(e: std::io::Error) -> std::io::Error {
    std::io::Error::new(e.kind(), format!("writing to standard output: {e}"))
}

pub mod bench;
pub mod bind;
pub mod decode;
pub mod discover;
pub mod info;
pub mod list;
pub mod run;
pub mod sim;
pub mod unbind;

use std::fmt::Write as _;
use std::path::PathBuf;

use driver::sysfs::Sysfs;

use crate::state::BindRecords;

/// What every subcommand may need: where sysfs, device nodes and bind records are.
pub struct Context {
    /// The sysfs tree.
    pub sysfs: Sysfs,
    /// The device-node directory.
    pub dev_root: PathBuf,
    /// Previous drivers recorded by `hca bind`.
    pub state: BindRecords,
}

/// A subcommand's result: errors are printed as `error: ...` and exit with status 1.
pub type CmdResult = Result<(), Box<dyn std::error::Error>>;

/// `1 MiB`-style size for exact binary multiples, bytes in hex otherwise.
pub fn human_size(bytes: u64) -> String {
    const UNITS: [(&str, u32); 4] = [("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)];
    for (unit, shift) in UNITS {
        if bytes >= 1 << shift && bytes % (1 << shift) == 0 {
            return format!("{} {unit}", bytes >> shift);
        }
    }
    format!("{bytes} B")
}

/// Print rows as left-aligned columns separated by two spaces.
pub fn print_table(rows: &[Vec<String>]) -> std::io::Result<()> {
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..cols)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|s| s.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    for row in rows {
        let mut line = String::new();
        for (c, cell) in row.iter().enumerate() {
            if c + 1 == row.len() {
                line.push_str(cell);
            } else {
                let _ = write!(line, "{cell:<w$}  ", w = widths[c]);
            }
        }
        outln!("{}", line.trim_end())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::human_size;

    #[test]
    fn sizes() {
        assert_eq!(human_size(0x100000), "1 MiB");
        assert_eq!(human_size(0x2000000), "32 MiB");
        assert_eq!(human_size(0x1000), "4 KiB");
        assert_eq!(human_size(0x100), "256 B");
        assert_eq!(human_size(0x1800), "6 KiB");
    }
}

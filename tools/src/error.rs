//! The `hca` tool's own errors (the libraries' errors pass through as they are).

/// What the tool itself rejects in its input. Each message says what to fix.
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    /// A token of a hex dump is not hex.
    #[error("bad hex `{token}` (line {line}, token {position}): {reason}")]
    BadHex {
        /// The token as given.
        token: String,
        /// The line it is on, from 1.
        line: usize,
        /// Its position among the whitespace-separated tokens of its line, from 1.
        position: usize,
        /// What is wrong with it.
        reason: String,
    },
    /// A dump of the wrong length.
    #[error("{what} is {want}; the dump has {got} bytes (is it complete, and only one entry?)")]
    WrongLength {
        /// What was being decoded.
        what: &'static str,
        /// What is expected.
        want: &'static str,
        /// Bytes found.
        got: usize,
    },
    /// A number too large for its field.
    #[error("{what} {value} is too large (at most {max:#x})")]
    OutOfRange {
        /// The field.
        what: &'static str,
        /// The value as given.
        value: String,
        /// The largest allowed.
        max: u64,
    },
    /// `hca decode status` given a count of numbers it does not take.
    #[error(
        "status takes 1 or 2 numbers (`0xSTATUS [0xSYNDROME]`), not {got}; or give the first 8 \
         bytes of the command's output as a dump"
    )]
    StatusNumbers {
        /// How many numbers were given.
        got: usize,
    },
    /// A `*` line (repeated lines left out) in a dump whose offsets cannot say how many.
    #[error("{0}")]
    RepeatedLines(String),
    /// The layout decoder refused the bytes.
    #[error("cannot decode: {0}")]
    Decode(String),
    /// Standard input could not be read.
    #[error("reading standard input: {0}")]
    Stdin(String),
    /// Standard input holds more than the command reads.
    #[error("standard input is larger than {limit} bytes, {why}: give the dump of one entry only")]
    StdinTooLarge {
        /// The bound, in bytes.
        limit: u64,
        /// Where the bound comes from.
        why: &'static str,
    },
    /// Standard input is not UTF-8 text.
    #[error("standard input is not UTF-8 text: give a hex dump")]
    StdinNotText,
    /// A bind record is not a file `hca bind` could have written.
    #[error(
        "bind record {path}: {problem}: it is not a record `hca bind` wrote; remove it (then \
         `hca unbind` lets the kernel choose the driver, or give --to DRIVER)"
    )]
    BadBindRecord {
        /// The record's path.
        path: String,
        /// What is wrong with it.
        problem: String,
    },
    /// Nothing to decode.
    #[error("no bytes to decode: give the hex dump as arguments or on standard input")]
    NoInput,
    /// `hca run` found no libibumad.so to run with.
    #[error(
        "no libibumad.so found (looked at {}): build it with `cargo build -p umad`, or give \
         --lib PATH or HCA_UMAD_LIB",
        looked.join(", ")
    )]
    NoUmadLib {
        /// Where it looked.
        looked: Vec<String>,
    },
    /// A file operation failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// The program could not be executed.
    #[error("cannot run {program}: {source} (is it installed and on PATH?)")]
    Exec {
        /// The program.
        program: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
}

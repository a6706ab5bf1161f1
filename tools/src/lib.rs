//! The library half of `hca`: the MAD tools' engines, so that tests can drive them on a
//! simulated fabric they control. [`discover`] walks a fabric and writes what it found;
//! [`bench`](mod@bench) measures MAD round trips; [`session`] opens a device string for either;
//! [`output_file`] replaces an output file only when the output is complete; [`interrupt`]
//! turns Ctrl-C into an orderly stop of either engine.

pub mod bench;
pub mod discover;
mod engine_error;
pub mod interrupt;
pub mod output_file;
pub mod session;

pub use engine_error::EngineError;

/// `count` per second of `elapsed` (0 for no time), for rates in reports.
#[allow(clippy::cast_precision_loss)] // a rate: 52 bits of a count are plenty
pub fn per_second(count: u64, elapsed: std::time::Duration) -> f64 {
    let secs = elapsed.as_secs_f64();
    if secs > 0.0 { count as f64 / secs } else { 0.0 }
}

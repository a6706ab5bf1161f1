//! The program the QEMU guest test runs inside the guest (`tests/qemu/vfio-guest.sh`): the
//! project's VFIO backend and DMA layer driving QEMU's `edu` device behind an emulated VT-d,
//! on Debian's own kernel.
//!
//! Run as root with no arguments, it prints one line per test, `TEST <name> ... ok` or
//! `TEST <name> ... FAILED: <why>`, then `N passed, N failed`, and exits non-zero if any test
//! failed. Lines starting with `GUEST:` carry measurements. Two parts run in other processes,
//! started from this same binary: the unprivileged memlock test (`--memlock-child BDF`, as
//! uid 1000) and the unbind that triggers the REQ interrupt (`--unbind BDF`).
//!
//! Every wait is bounded, and a watchdog turns a hang into a FAILED line and the closing
//! line, so the harness sees a result rather than its own timeout.

mod children;
mod device_tests;
mod runner;
mod session;

use std::process::ExitCode;
use std::time::Duration;

use runner::Runner;

/// The whole suite must end within this, leaving the harness (170 s by default, boot
/// included) room to collect the result.
const WATCHDOG: Duration = Duration::from_secs(120);

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        None => run_suite(),
        Some("--memlock-child") if args.len() == 2 => children::memlock_child(&args[1]),
        Some("--unbind") if args.len() == 2 => children::unbind_child(&args[1]),
        _ => {
            eprintln!(
                "usage: vfio-guest                        run the suite (as root, in the QEMU guest)\n       \
                 vfio-guest --memlock-child BDF   (internal) the unprivileged memlock test\n       \
                 vfio-guest --unbind BDF          (internal) unbind BDF from vfio-pci"
            );
            ExitCode::from(2)
        }
    }
}

fn run_suite() -> ExitCode {
    let mut runner = Runner::new(WATCHDOG);
    device_tests::run_all(&mut runner);
    runner.finish()
}

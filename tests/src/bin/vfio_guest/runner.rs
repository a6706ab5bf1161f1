//! Running tests one after another and reporting them as the harness reads them: one
//! `TEST <name> ... ok|FAILED: <why>` line each, then `N passed, N failed`.
//!
//! A test is a closure returning `Result<(), Fail>`; a panic inside it is caught and reported
//! as a failure with its message. A watchdog thread ends the process with the closing line if
//! the suite runs past its time, naming the test that hung.

use std::fmt::Display;
use std::io::Write as _;
use std::panic::{self, AssertUnwindSafe};
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Why a test failed: one line of text.
#[derive(Debug)]
pub struct Fail(pub String);

impl<E: Display> From<E> for Fail {
    fn from(e: E) -> Self {
        Fail(e.to_string())
    }
}

/// The result of one test.
pub type Outcome = Result<(), Fail>;

/// Fail the test with a formatted message unless `cond` holds.
#[macro_export]
macro_rules! ensure {
    ($cond:expr, $($fmt:tt)+) => {
        if !$cond {
            return Err($crate::runner::Fail(format!($($fmt)+)));
        }
    };
}

/// Counts and the name of the running test, shared with the watchdog.
#[derive(Default)]
struct Shared {
    passed: AtomicUsize,
    failed: AtomicUsize,
    current: Mutex<Option<String>>,
    /// The message of the last panic, caught by the hook.
    panic: Mutex<Option<String>>,
}

/// Runs tests and prints their lines.
pub struct Runner {
    shared: Arc<Shared>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One line: newlines in a message would break the harness's line parsing.
fn one_line(s: &str) -> String {
    s.trim().replace('\n', " | ")
}

/// Print a line and flush it now: the serial console is what the harness reads.
pub fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

impl Runner {
    /// A runner whose watchdog ends the process after `limit`.
    pub fn new(limit: Duration) -> Self {
        let shared = Arc::new(Shared::default());
        let hook_shared = Arc::clone(&shared);
        panic::set_hook(Box::new(move |info| {
            *lock(&hook_shared.panic) = Some(info.to_string());
        }));
        let dog = Arc::clone(&shared);
        let start = Instant::now();
        std::thread::spawn(move || {
            std::thread::sleep(limit.saturating_sub(start.elapsed()));
            let current = lock(&dog.current).clone();
            let name = current.as_deref().unwrap_or("suite");
            say(&format!(
                "TEST {name} ... FAILED: watchdog: the suite ran past {limit:?} (a hang)"
            ));
            let passed = dog.passed.load(Ordering::SeqCst);
            let failed = dog.failed.load(Ordering::SeqCst) + 1;
            say(&format!("{passed} passed, {failed} failed"));
            std::process::exit(1);
        });
        Runner { shared }
    }

    /// Run `test` as `name` and print its line; returns true when it passed.
    pub fn run(&mut self, name: &str, test: impl FnOnce() -> Outcome) -> bool {
        *lock(&self.shared.current) = Some(name.to_string());
        let result = panic::catch_unwind(AssertUnwindSafe(test));
        let outcome = result.unwrap_or_else(|_| {
            let msg = lock(&self.shared.panic)
                .take()
                .unwrap_or_else(|| "panicked".into());
            Err(Fail(format!("panic: {msg}")))
        });
        self.report(name, outcome)
    }

    /// Print the line of a test that was decided elsewhere (e.g. in a child process).
    pub fn report(&mut self, name: &str, outcome: Outcome) -> bool {
        *lock(&self.shared.current) = None;
        match outcome {
            Ok(()) => {
                self.shared.passed.fetch_add(1, Ordering::SeqCst);
                say(&format!("TEST {name} ... ok"));
                true
            }
            Err(Fail(why)) => {
                self.shared.failed.fetch_add(1, Ordering::SeqCst);
                say(&format!("TEST {name} ... FAILED: {}", one_line(&why)));
                false
            }
        }
    }

    /// Print the closing line; the exit code says whether everything passed.
    pub fn finish(self) -> ExitCode {
        let passed = self.shared.passed.load(Ordering::SeqCst);
        let failed = self.shared.failed.load(Ordering::SeqCst);
        say(&format!("{passed} passed, {failed} failed"));
        if failed == 0 && passed > 0 {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        }
    }
}

//! Programs the harness starts do not outlive it: a test process that dies (a panic in
//! another thread that aborts, nextest's timeout killing it, a SIGKILL) would otherwise leave
//! its ibsim, OpenSM or `hca sim serve` running, holding sockets and CPU for the rest of the
//! run. The kernel's `PR_SET_PDEATHSIG` (prctl(2)) sends the child SIGKILL when the thread
//! that started it ends, whichever way it ends.

use std::os::unix::process::CommandExt;
use std::process::Command;

/// Makes the process `cmd` starts get SIGKILL when the thread that spawns it ends (the
/// kernel ties the signal to the thread, not to the process: spawn a long-lived child from
/// the thread that will wait for it). A child whose parent is gone already when it is set
/// up exits at once instead of running unwatched.
pub fn killed_with_parent(cmd: &mut Command) -> &mut Command {
    // The pid before the fork: the parent the child must still have once the signal is set.
    let parent = i32::try_from(std::process::id()).unwrap_or(i32::MAX);
    // SAFETY: the closure runs in the child between fork and exec, where only
    // async-signal-safe calls are allowed: prctl, getppid and _exit are system calls that
    // take no lock and allocate nothing, and the error is built from errno alone.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The parent died between the fork and the prctl: no signal will come.
            if libc::getppid() != parent {
                libc::_exit(1);
            }
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::ExitStatusExt;
    use std::time::{Duration, Instant};

    use super::*;

    /// Waits up to 10 s for `child` to end; kills it after that (so that the test leaves
    /// nothing behind either way).
    fn ended(child: &mut std::process::Child) -> Option<std::process::ExitStatus> {
        let end = Instant::now() + Duration::from_secs(10);
        while Instant::now() < end {
            if let Some(s) = child.try_wait().expect("try_wait") {
                return Some(s);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = child.kill();
        let _ = child.wait();
        None
    }

    #[test]
    fn a_child_is_killed_when_the_thread_that_started_it_ends() {
        let mut child = std::thread::spawn(|| {
            killed_with_parent(Command::new("sleep").arg("60"))
                .spawn()
                .expect("sleep")
        })
        .join()
        .expect("the spawning thread");
        let status = ended(&mut child).expect("sleep was killed when its thread ended");
        assert_eq!(status.signal(), Some(libc::SIGKILL), "{status:?}");
    }

    #[test]
    fn without_it_the_child_outlives_the_thread() {
        // The control: what the kernel does without the prctl (so the test above shows the
        // prctl's effect, not some other reason for the child to end).
        let mut child =
            std::thread::spawn(|| Command::new("sleep").arg("60").spawn().expect("sleep"))
                .join()
                .expect("the spawning thread");
        std::thread::sleep(Duration::from_millis(300));
        assert!(
            child.try_wait().expect("try_wait").is_none(),
            "sleep runs on"
        );
        let _ = child.kill();
        let _ = child.wait();
    }

    #[test]
    fn a_child_that_exits_by_itself_is_not_disturbed() {
        let status = killed_with_parent(&mut Command::new("true"))
            .status()
            .expect("true");
        assert!(status.success(), "{status:?}");
    }
}

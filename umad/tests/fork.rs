//! `fork(2)` from a process holding umad files: the child's copies of the library's own
//! socket ends are closed in the child (`ibumad::fork`), so that the parent's fd still
//! reports POLLERR once its device dies while the child lives on. One test in this binary:
//! it counts the process's tracked descriptors.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ibumad::Context;
use ibumad::queue::poll_now;
use sim::ClockMode;
use sim::mlx5::Mlx5;

/// Descriptors open in this process.
fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .expect("/proc/self/fd")
        .count()
}

#[test]
fn a_living_child_does_not_keep_the_parents_fd_from_reporting_pollerr() {
    let (model, _net) = Mlx5::standalone_default(ClockMode::Real).expect("simulated ConnectX");
    let model = Arc::new(model);
    let baseline = ibumad::fork::tracked();
    let ctx = Context::from_backends(vec![(
        "sim".into(),
        embed::backend_for(Arc::clone(&model), "sim"),
    )])
    .expect("context");
    let port = Arc::clone(&ctx.cas()[0].ports[0]);
    let fds_before = open_fds();
    let f = ctx.open_file(&port).expect("umad file");
    assert_eq!(
        open_fds(),
        fds_before + 3,
        "an open port costs three descriptors (README)"
    );
    assert_eq!(
        ibumad::fork::tracked(),
        baseline + 2,
        "the file's two library ends are tracked"
    );
    let mut pipe = [0; 2];
    // SAFETY: room for the two descriptors.
    assert_eq!(unsafe { libc::pipe(pipe.as_mut_ptr()) }, 0);
    // SAFETY: the child makes only async-signal-safe calls (read, close, _exit).
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let mut b = 0u8;
        // SAFETY: plain system calls on the pipe; the child ends here.
        unsafe {
            libc::close(pipe[1]);
            libc::read(pipe[0], (&raw mut b).cast(), 1);
            libc::_exit(0);
        }
    }
    // SAFETY: the parent's copy of the read end.
    unsafe { libc::close(pipe[0]) };

    model.faults().remove();
    let end = Instant::now() + Duration::from_secs(20);
    let revents = loop {
        port.mad.progress();
        let r = poll_now(f.fd());
        if r & libc::POLLERR != 0 || Instant::now() > end {
            break r;
        }
        std::thread::sleep(Duration::from_millis(1));
    };
    let removed = port.removed();

    // SAFETY: the write end: the child reads EOF and exits.
    unsafe { libc::close(pipe[1]) };
    let mut status = 0;
    // SAFETY: our child, a live int.
    assert_eq!(unsafe { libc::waitpid(pid, &raw mut status, 0) }, pid);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "child status {status:#x}"
    );
    assert!(removed.is_some(), "the port saw the removal");
    assert_ne!(
        revents & libc::POLLERR,
        0,
        "POLLERR on the parent's fd while the child lives (revents {revents:#x})"
    );

    ctx.close_file(f.fd()).expect("close the file");
    let _ = ctx.close();
    drop(f);
    assert_eq!(
        ibumad::fork::tracked(),
        baseline,
        "every library end closed"
    );
}

//! A send-queue recovery (`HcaPort::recover_send_queue`) whose SQERR2RTS the simulated
//! ConnectX loses (fetched, never run, never given back: the driver waits its command timeout)
//! holds neither the posters of its QP nor a close: a send posted meanwhile is refused at once
//! as a send in SQE (`PostError::SendQueueError`), a receive is taken, a second recovery waits
//! for the first without issuing commands of its own, and once the retried SQERR2RTS brought
//! the queue back a send goes through end to end. A close made meanwhile finishes without
//! waiting, and the recovery then ends with `Closed`.
//!
//! The recovering thread is held inside its lost command, deterministically, by a simulator
//! event that runs when that thread's command wait lets device time pass, after the firmware
//! fetched the command, and that waits there until the test lets it go.

use std::sync::Arc;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender, TryRecvError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use dma::DmaLease;
use driver::DriverError;
use driver::mlx5::{Mlx5Hca, Mlx5Port};
use driver::verbs::{Hca, HcaPort, PostError, SpecialQp, UdDest, WcOpcode, WcStatus};
use firmware_cmds::mlx5::opcode::Opcode;
use firmware_cmds::mlx5::syndrome::CqeSyndrome;
use hca_tests::mlx5::{
    RECV_BUF, SimHca, gsi_send_setup, hold_once_a_command_is_lost, lease, poll_n, recv_wr, send_wr,
    to_self,
};
use sim::mlx5::WqeQueue;

/// Real time after which a thread that has not answered counts as hung. Generous: the machine
/// is shared, and a hang is what it catches, not slowness.
const HANG_LIMIT: Duration = Duration::from_secs(120);

/// Real time a post may take while the recovery's command is in flight. A post that does not
/// wait for the firmware takes microseconds; one that waits for the recovery never returns
/// while the recovery is held (the test holds it indefinitely), so any bound tells them apart.
const POST_LIMIT: Duration = Duration::from_secs(10);

/// Name of the thread that recovers.
const RECOVERER: &str = "recover";

/// A port whose GSI send queue stopped on a failed send, and a thread recovering it, held in
/// its lost SQERR2RTS until `release` is sent.
struct Held {
    sim: SimHca,
    hca: Arc<Mlx5Hca>,
    p: Arc<Mlx5Port>,
    buf: DmaLease,
    rbuf: DmaLease,
    dest: UdDest,
    release: Sender<()>,
    recovered: Receiver<Result<(), DriverError>>,
    recoverer: Option<JoinHandle<()>>,
}

impl Held {
    fn new() -> Held {
        let sim = SimHca::new();
        let hca = sim.open_strict();
        let (p, lid, qpn, buf) = gsi_send_setup(&hca);
        let rbuf = lease(p.as_ref(), RECV_BUF);
        let dest = to_self(lid, SpecialQp::Gsi);

        // A send that fails stops the send queue (SQE).
        sim.model
            .faults()
            .wqe_error(qpn, WqeQueue::Send, 1, CqeSyndrome::LOCAL_LENGTH_ERR, 0x51);
        p.post_send(SpecialQp::Gsi, &send_wr(1, &buf, dest))
            .unwrap();
        let wcs = poll_n(p.as_ref(), 1, Duration::from_secs(1));
        assert_eq!(wcs.len(), 1);
        assert_eq!((wcs[0].wr_id, wcs[0].status), (1, WcStatus::LocLenErr));

        // The recovery's first SQERR2RTS is lost: the driver waits its command timeout, finds
        // the QP still in SQE with QUERY_QP, and issues it again. The thread is held in that
        // wait.
        sim.model.faults().lose_commands(Opcode::SQERR2RTS_QP.0, 1);
        let (entered_tx, entered) = mpsc::channel();
        let (release, release_rx) = mpsc::channel();
        hold_once_a_command_is_lost(sim.model.clone(), entered_tx, release_rx, HANG_LIMIT);
        let (recovered_tx, recovered) = mpsc::channel();
        let recoverer = {
            let p = p.clone();
            std::thread::Builder::new()
                .name(RECOVERER.into())
                .spawn(move || {
                    let _ = recovered_tx.send(p.recover_send_queue(SpecialQp::Gsi));
                })
                .unwrap()
        };
        let holder = entered
            .recv_timeout(HANG_LIMIT)
            .expect("the recovery's SQERR2RTS was fetched and its wait let device time pass");
        assert_eq!(
            holder.as_deref(),
            Some(RECOVERER),
            "the thread held is the one waiting for the lost SQERR2RTS"
        );
        assert_eq!(sim.model.counters().commands_lost, 1);
        Held {
            sim,
            hca,
            p,
            buf,
            rbuf,
            dest,
            release,
            recovered,
            recoverer: Some(recoverer),
        }
    }

    /// Whether the recovery is still running.
    fn recovering(&self) -> bool {
        matches!(self.recovered.try_recv(), Err(TryRecvError::Empty))
    }

    /// Let the recovery go on and return its result.
    fn release(&mut self) -> Result<(), DriverError> {
        let _ = self.release.send(());
        let r = self
            .recovered
            .recv_timeout(HANG_LIMIT)
            .expect("the recovery returns");
        if let Some(t) = self.recoverer.take() {
            t.join().unwrap();
        }
        r
    }
}

/// Run `f` on its own thread and return its result, or None if it took more than `limit` of
/// real time (the thread is then left to finish on its own).
fn within<T: Send + 'static>(
    limit: Duration,
    f: impl FnOnce() -> T + Send + 'static,
) -> Option<(T, Duration)> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let start = Instant::now();
        let r = f();
        let _ = tx.send((r, start.elapsed()));
    });
    match rx.recv_timeout(limit) {
        Ok(r) => Some(r),
        Err(RecvTimeoutError::Timeout) => None,
        Err(RecvTimeoutError::Disconnected) => panic!("the thread panicked"),
    }
}

/// While the recovery waits for its lost SQERR2RTS, another thread's send is refused at once
/// as a send in SQE and its receive is taken; a second recovery issues no command of its own
/// and returns once the first brought the queue back; then a send goes through end to end.
#[test]
fn a_post_during_a_recovery_whose_sqerr2rts_is_lost_is_refused_at_once_not_held() {
    let mut held = Held::new();

    // A second recovery waits for the first (it must not issue an SQERR2RTS of its own).
    // Nothing shows that it reached its wait; it is given a moment of real time to, so that
    // it overlaps the first (if it came late it would find the queue back and issue nothing,
    // which this test could not tell from a wait).
    let (second_tx, second) = mpsc::channel();
    let (started_tx, started) = mpsc::channel();
    let second_recoverer = {
        let p = held.p.clone();
        std::thread::spawn(move || {
            let _ = started_tx.send(());
            let _ = second_tx.send(p.recover_send_queue(SpecialQp::Gsi));
        })
    };
    started.recv_timeout(HANG_LIMIT).unwrap();
    std::thread::sleep(Duration::from_millis(50));

    // Another thread posts meanwhile.
    let (swr, rwr) = (send_wr(2, &held.buf, held.dest), recv_wr(3, &held.rbuf));
    let p = held.p.clone();
    let answer = within(POST_LIMIT, move || {
        (
            p.post_send(SpecialQp::Gsi, &swr),
            p.post_recv(SpecialQp::Gsi, &rwr),
        )
    });
    let still_recovering = held.recovering();
    let second_early = second.try_recv().ok();
    let result = held.release();
    let Some(((sent, received), took)) = answer else {
        panic!(
            "a post waited more than {POST_LIMIT:?} for a recovery whose firmware command \
             was in flight"
        );
    };
    assert!(
        still_recovering,
        "the posts returned while the recovery was in flight"
    );
    assert!(
        matches!(sent, Err(PostError::SendQueueError(_))),
        "a send posted during the recovery is refused as a send in SQE: {sent:?} ({took:?})"
    );
    assert_eq!(
        received,
        Ok(()),
        "a receive posted during the recovery is taken"
    );
    assert!(
        second_early.is_none(),
        "the second recovery did not end before the first: {second_early:?}"
    );

    // The recovery ends: the lost SQERR2RTS timed out, QUERY_QP found SQE, the second ran.
    result.expect("the retried SQERR2RTS brings the send queue back");
    let second = second
        .recv_timeout(HANG_LIMIT)
        .expect("the second recovery returns");
    second_recoverer.join().unwrap();
    second.expect("the second recovery finds the queue back");
    let c = held.sim.model.counters();
    assert_eq!(
        (
            c.commands_lost,
            c.command_count(Opcode::SQERR2RTS_QP.0),
            c.command_count(Opcode::QUERY_QP.0)
        ),
        (1, 1, 1),
        "one recovery's commands, none of the second: {c:?}"
    );

    // The queue runs: a send reaches the receive posted during the recovery.
    let Held {
        sim,
        hca,
        p,
        buf,
        rbuf,
        dest,
        ..
    } = held;
    p.post_send(SpecialQp::Gsi, &send_wr(4, &buf, dest))
        .expect("a send after the recovery");
    let mut wcs = poll_n(p.as_ref(), 2, Duration::from_secs(1));
    wcs.sort_by_key(|w| w.wr_id);
    let seen: Vec<_> = wcs.iter().map(|w| (w.wr_id, w.opcode, w.status)).collect();
    assert_eq!(
        seen,
        [
            (3, WcOpcode::Recv, WcStatus::Success),
            (4, WcOpcode::Send, WcStatus::Success)
        ],
        "{wcs:?}"
    );
    assert_eq!(p.outstanding(), 0);

    drop((buf, rbuf));
    hca.close().unwrap();
    sim.assert_clean(&hca);
}

/// Closing the HCA while a recovery waits for its lost SQERR2RTS does not wait for it: the
/// close takes the QP (2RST, software flush, DESTROY_QP) and finishes, and the recovery then
/// ends with `Closed` without touching the QP again; everything is given back.
#[test]
fn a_close_during_a_recovery_whose_sqerr2rts_is_lost_does_not_wait_for_it() {
    let mut held = Held::new();
    let hca = held.hca.clone();
    let closed = within(POST_LIMIT, move || hca.close());
    let still_recovering = held.recovering();
    let result = held.release();
    let Some((closed, _)) = closed else {
        panic!("the close waited more than {POST_LIMIT:?} for a recovery's firmware command");
    };
    assert!(
        still_recovering,
        "the close returned while the recovery was in flight"
    );
    closed.expect("close");
    assert!(
        matches!(result, Err(DriverError::Closed)),
        "the recovery ends with Closed: {result:?}"
    );
    assert_eq!(held.p.outstanding(), 0);
    let Held {
        sim,
        hca,
        buf,
        rbuf,
        ..
    } = held;
    drop((buf, rbuf));
    sim.assert_clean(&hca);
}

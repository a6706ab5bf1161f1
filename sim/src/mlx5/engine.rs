//! The device's own thread: send doorbells run there instead of on the thread that rang them.
//!
//! By default the simulated ConnectX does a send doorbell's work (fetch the WQEs, put the
//! packets on the fabric, write the CQEs) inside the doorbell write, on the driver's thread:
//! deterministic, and what virtual time needs. A real HCA does that work in its own silicon
//! while the host goes on. With [`crate::mlx5::Mlx5::run_on_own_thread`] the doorbell only
//! records the queue and wakes this thread, which runs it; the driver's thread finds the
//! completions on a later poll (or is woken by the completion event). What that measures is
//! the host's share of the work alone: the cost a real HCA leaves on the CPU that drives it.
//!
//! Only on the real clock: on virtual time the clock moves when the waiting thread lets it,
//! and a device working beside it would race that.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::Inner;
use crate::clock::ClockMode;

/// The doorbells rung and not yet run, shared by the ringing threads and the device thread.
#[derive(Debug, Default)]
pub(crate) struct Engine {
    /// QPs whose send doorbell rang, in order, each once.
    pending: Mutex<Vec<u32>>,
    rung: Condvar,
    /// `pending` is not empty (looked at without the lock while the thread spins).
    rung_flag: AtomicBool,
    /// The thread waits on `rung` (set and cleared under the `pending` lock).
    sleeping: AtomicBool,
    stop: AtomicBool,
    /// Doorbells the thread ran.
    ran: AtomicU64,
}

/// How long the thread looks at its doorbells before it sleeps.
const SPIN: Duration = Duration::from_micros(50);

impl Engine {
    /// A send doorbell of `qpn` rang: the device thread runs the queue. False once the
    /// thread is stopping: the caller runs it.
    pub(crate) fn ring(&self, qpn: u32) -> bool {
        let mut p = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        if self.stop.load(Ordering::SeqCst) {
            return false;
        }
        if !p.contains(&qpn) {
            p.push(qpn);
        }
        self.rung_flag.store(true, Ordering::Release);
        let sleeping = self.sleeping.load(Ordering::SeqCst);
        drop(p);
        if sleeping {
            self.rung.notify_one();
        }
        true
    }

    /// The next doorbells to run (in `into`), waiting for one; false once stopped. Looks
    /// without sleeping for [`SPIN`] first, as hardware watches its doorbells: a host that
    /// keeps the queue busy then rings with no system call.
    fn next(&self, into: &mut Vec<u32>) -> bool {
        let start = Instant::now();
        while !self.rung_flag.load(Ordering::Acquire) && start.elapsed() < SPIN {
            std::hint::spin_loop();
        }
        let mut p = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            if self.stop.load(Ordering::SeqCst) {
                return false;
            }
            if !p.is_empty() {
                std::mem::swap(&mut *p, into);
                self.rung_flag.store(false, Ordering::Release);
                return true;
            }
            self.sleeping.store(true, Ordering::SeqCst);
            p = self.rung.wait(p).unwrap_or_else(PoisonError::into_inner);
            self.sleeping.store(false, Ordering::SeqCst);
        }
    }
}

/// The device's thread: runs until dropped (then joins). While it exists, send doorbells of
/// the device run on it.
#[derive(Debug)]
pub struct DeviceThread {
    inner: Weak<Inner>,
    engine: Arc<Engine>,
    handle: Option<JoinHandle<()>>,
}

/// Why a device cannot get a thread of its own.
#[derive(Debug, thiserror::Error)]
pub enum DeviceThreadError {
    /// The device runs on virtual time.
    #[error(
        "the device runs on virtual time, where the clock moves only when the waiting thread \
         lets it: a device thread needs the real clock (ClockMode::Real)"
    )]
    VirtualClock,
    /// The device already has one.
    #[error("the device already runs on a thread of its own")]
    AlreadyRunning,
    /// The thread could not be started.
    #[error("could not start the device thread: {0}")]
    Spawn(#[from] std::io::Error),
}

pub(crate) fn spawn(inner: &Arc<Inner>) -> Result<DeviceThread, DeviceThreadError> {
    if inner.sched.clock().mode() != ClockMode::Real {
        return Err(DeviceThreadError::VirtualClock);
    }
    let engine = Arc::new(Engine::default());
    // The slot stays locked until the thread runs, and only then names the engine: a doorbell
    // never lands in the pending list of an engine whose thread failed to start. The thread
    // waits on its own pending list and never reads the slot, so holding it cannot stall it.
    let mut slot = inner.engine.write().unwrap_or_else(PoisonError::into_inner);
    if slot.is_some() {
        return Err(DeviceThreadError::AlreadyRunning);
    }
    let weak = Arc::downgrade(inner);
    let e = engine.clone();
    let w = weak.clone();
    let handle = std::thread::Builder::new()
        .name("sim-mlx5".into())
        .spawn(move || run(&w, &e))?;
    *slot = Some(engine.clone());
    Ok(DeviceThread {
        inner: weak,
        engine,
        handle: Some(handle),
    })
}

fn run(inner: &Weak<Inner>, engine: &Engine) {
    let mut qpns = Vec::new();
    while engine.next(&mut qpns) {
        let Some(inner) = inner.upgrade() else { return };
        inner.run_doorbells(&qpns);
        engine.ran.fetch_add(qpns.len() as u64, Ordering::Relaxed);
        qpns.clear();
    }
}

impl DeviceThread {
    /// Send doorbells this thread has run (one per queue per look: doorbells rung while it
    /// was busy with the queue count once).
    pub fn doorbells_run(&self) -> u64 {
        self.engine.ran.load(Ordering::Relaxed)
    }
}

impl Drop for DeviceThread {
    fn drop(&mut self) {
        {
            // Under the lock, so that the thread is either before its look at `stop` or
            // waiting (and then woken).
            let _p = self
                .engine
                .pending
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            self.engine.stop.store(true, Ordering::SeqCst);
        }
        self.engine.rung.notify_all();
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
        if let Some(inner) = self.inner.upgrade() {
            let pending = std::mem::take(
                &mut *self
                    .engine
                    .pending
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner),
            );
            *inner.engine.write().unwrap_or_else(PoisonError::into_inner) = None;
            // Doorbells rung before the stop and not run by the thread run here (later ones
            // were run by their ringers: `ring` refuses them).
            inner.run_doorbells(&pending);
        }
    }
}

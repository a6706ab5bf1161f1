//! The device's own thread: the driver's UAR writes (doorbells) take effect there instead of
//! on the thread that made them.
//!
//! By default the simulated ConnectX does a send doorbell's work (fetch the WQEs, put the
//! packets on the fabric, write the CQEs) inside the doorbell write, on the driver's thread:
//! deterministic, and what virtual time needs. A real HCA does that work in its own silicon
//! while the host goes on. With [`crate::mlx5::Mlx5::run_on_own_thread`] a write to a UAR page
//! (send doorbell, CQ arm, EQ doorbell) is only queued, in order, and this thread takes the
//! queue, applies the writes under the device's lock and runs the send queues they rang; the
//! driver's thread finds the completions on a later poll (or is woken by the completion event).
//! The writing thread never takes the device's lock, which this thread holds while it works:
//! as on a real HCA, a posted MMIO write does not wait for the device. What that measures is
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

/// A write to a UAR page the driver made and the device has not applied yet: its offset in
/// BAR0 and its bytes (a doorbell is 4 or 8 bytes, kept inline; a longer write, which no
/// driver path makes, on the heap).
#[derive(Debug)]
pub(crate) struct UarWrite {
    pub(crate) offset: u64,
    len: u8,
    short: [u8; 8],
    long: Option<Box<[u8]>>,
}

impl UarWrite {
    fn new(offset: u64, data: &[u8]) -> Self {
        let mut short = [0u8; 8];
        let (len, long) = match short.get_mut(..data.len()) {
            Some(head) => {
                head.copy_from_slice(data);
                (data.len() as u8, None)
            }
            None => (0, Some(data.into())),
        };
        UarWrite {
            offset,
            len,
            short,
            long,
        }
    }

    /// The bytes written.
    pub(crate) fn data(&self) -> &[u8] {
        match &self.long {
            Some(b) => b,
            None => &self.short[..usize::from(self.len)],
        }
    }
}

/// The UAR writes made and not yet applied, shared by the writing threads and the device
/// thread.
#[derive(Debug, Default)]
pub(crate) struct Engine {
    /// In the order they were made.
    pending: Mutex<Vec<UarWrite>>,
    rung: Condvar,
    /// `pending` is not empty (looked at without the lock while the thread spins).
    rung_flag: AtomicBool,
    /// The thread waits on `rung` (set and cleared under the `pending` lock).
    sleeping: AtomicBool,
    stop: AtomicBool,
    /// Writers apply their own writes from now on: the queue was drained at the stop, or the
    /// thread died (set under the `pending` lock).
    closed: AtomicBool,
    /// Writes queued, and writes applied (by the thread, or by the stop's drain): a fence
    /// waits for the second to reach the first.
    posted: AtomicU64,
    applied: AtomicU64,
    /// Send queues run.
    ran: AtomicU64,
}

/// The most writes the queue holds: a writer that finds it full waits until the thread has
/// taken them, so a device thread that falls behind (or is held up) bounds the memory instead
/// of letting a host that keeps ringing grow it. Far above what a driver rings between two
/// looks of the thread (one doorbell per batch of WQEs, one arm per CQ poll).
const QUEUE_LIMIT: usize = 4096;

/// How long the thread looks at its queue before it sleeps.
const SPIN: Duration = Duration::from_micros(50);

/// Spins between two looks at the clock while the thread looks at its queue.
const SPINS_PER_CLOCK: u32 = 64;

impl Engine {
    /// The driver wrote `data` at `offset` of a UAR page: queued for the device thread. False
    /// once the queue is closed (drained at the thread's stop): the caller applies it, after
    /// every write queued before it.
    pub(crate) fn post(&self, offset: u64, data: &[u8]) -> bool {
        let w = UarWrite::new(offset, data);
        let mut p = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            if self.closed.load(Ordering::SeqCst) {
                return false;
            }
            if p.len() < QUEUE_LIMIT {
                break;
            }
            // Full: the writer waits for the thread to take the queue, as a CPU's posted
            // writes stall when the link to the device is out of credits. The thread is
            // awake (the flag is set), and its stop or its death closes the queue.
            drop(p);
            std::thread::yield_now();
            p = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        }
        // While the thread stops, still queued: the stop applies the queue in order.
        p.push(w);
        // One writer at a time (under the lock): no locked add needed.
        self.posted
            .store(self.posted.load(Ordering::Relaxed) + 1, Ordering::Release);
        self.rung_flag.store(true, Ordering::Release);
        let sleeping = self.sleeping.load(Ordering::SeqCst);
        drop(p);
        if sleeping {
            self.rung.notify_one();
        }
        true
    }

    /// Waits until every write queued before the call is applied (or the queue is closed):
    /// what the device does with an access to the rest of BAR0 (a command doorbell, a register
    /// read, a reset) comes after the UAR writes made before it, as PCIe orders posted writes
    /// and a read behind them. Short: the thread applies a batch in microseconds.
    pub(crate) fn fence(&self) {
        let target = self.posted.load(Ordering::Acquire);
        while self.applied.load(Ordering::Acquire) < target && !self.closed.load(Ordering::SeqCst) {
            std::thread::yield_now();
        }
    }

    /// Applies `writes` (taken from the queue) to the device, if it is still there, and
    /// counts them and the send queues they ran. One applier at a time: the thread, or the
    /// stop once the thread has ended.
    fn apply(&self, inner: Option<&Inner>, writes: &[UarWrite], qpns: &mut Vec<u32>) {
        if let Some(inner) = inner {
            inner.apply_uar_writes(writes, qpns);
            self.ran.fetch_add(qpns.len() as u64, Ordering::Relaxed);
        }
        self.applied.store(
            self.applied.load(Ordering::Relaxed) + writes.len() as u64,
            Ordering::Release,
        );
    }

    /// The next writes to apply (in `into`, which must be empty), waiting for one; false once
    /// stopped. Looks without sleeping for [`SPIN`] first, as hardware watches its doorbells:
    /// a host that keeps the queue busy then rings with no system call.
    fn next(&self, into: &mut Vec<UarWrite>) -> bool {
        let start = Instant::now();
        let mut spins = 0u32;
        while !self.rung_flag.load(Ordering::Acquire) {
            spins = spins.wrapping_add(1);
            if spins % SPINS_PER_CLOCK == 0 && start.elapsed() >= SPIN {
                break;
            }
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

/// The device's thread: runs until dropped (then joins). While it exists, the device's UAR
/// writes are applied, and the send queues they ring run, on it.
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
    // The slot stays locked until the thread runs, and only then names the engine: a write
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
    /// A panic (a model bug) ends the thread: the queue is closed, so that writers apply
    /// their own writes (and meet the bug themselves) instead of queueing them for nobody.
    struct CloseOnPanic<'a>(&'a Engine);
    impl Drop for CloseOnPanic<'_> {
        fn drop(&mut self) {
            if std::thread::panicking() {
                let _p = self
                    .0
                    .pending
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
                self.0.closed.store(true, Ordering::SeqCst);
            }
        }
    }
    let _close = CloseOnPanic(engine);
    let mut writes = Vec::new();
    let mut qpns = Vec::new();
    while engine.next(&mut writes) {
        let Some(inner) = inner.upgrade() else { return };
        engine.apply(Some(&inner), &writes, &mut qpns);
        writes.clear();
        qpns.clear();
    }
}

impl DeviceThread {
    /// Send queues run for the doorbells queued to this thread (one per queue per batch:
    /// doorbells rung while it was busy with the queue count once).
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
        // Writes left in the queue (made before the stop, or while the thread stopped) are
        // applied here with the queue locked, and the queue closed under the same lock: a
        // writer waiting for the lock then finds it closed and applies its own write after
        // them. Lock order: the queue, then the device's state (and what a send queue's run
        // reaches); nothing the device runs writes to the device's BAR.
        let mut p = self
            .engine
            .pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let left = std::mem::take(&mut *p);
        let inner = self.inner.upgrade();
        self.engine.apply(inner.as_deref(), &left, &mut Vec::new());
        self.engine.closed.store(true, Ordering::SeqCst);
        drop(p);
        if let Some(inner) = inner {
            *inner.engine.write().unwrap_or_else(PoisonError::into_inner) = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;
    use std::sync::{PoisonError, mpsc};
    use std::time::{Duration, Instant};

    use super::super::config::FIRST_UAR;
    use super::{Arc, Engine, UarWrite};
    use crate::ClockMode;
    use crate::device::Device;
    use crate::mlx5::Mlx5;

    /// Waits up to 5 s for `f`.
    fn eventually(f: impl Fn() -> bool) -> bool {
        let end = Instant::now() + Duration::from_secs(5);
        while Instant::now() < end {
            if f() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        f()
    }

    #[test]
    fn a_uar_write_is_queued_without_the_device_lock_and_applied_in_order_by_the_thread() {
        let (dev, thread, uar_page) = device_with_thread();
        // The device's lock held, as the device thread holds it while it works.
        let held = dev.inner.lock();
        let (tx, rx) = mpsc::channel();
        let writer = {
            let dev = dev.clone();
            std::thread::spawn(move || {
                // Three doorbells of a UAR the driver never allocated: each one ignored
                // (and counted) once applied.
                for _ in 0..3 {
                    dev.mmio_write(0, uar_page + 0x20, &[0; 8]);
                }
                tx.send(()).expect("the test waits");
            })
        };
        assert!(
            rx.recv_timeout(Duration::from_secs(5)).is_ok(),
            "the writes returned while the device's lock was held"
        );
        assert_eq!(held.counters.snap.uar_writes_ignored, 0, "not applied yet");
        drop(held);
        assert!(
            eventually(|| dev.counters().uar_writes_ignored == 3),
            "the device thread applied the three writes"
        );
        writer.join().expect("writer");
        assert_eq!(thread.doorbells_run(), 0, "no send queue rang");
        drop(thread);
        // Without the thread, a write is applied by the writer before it returns.
        dev.mmio_write(0, uar_page + 0x20, &[0; 8]);
        assert_eq!(dev.counters().uar_writes_ignored, 4);
    }

    #[test]
    fn writes_left_in_the_queue_are_applied_when_the_thread_stops() {
        let dev = Mlx5::with_clock(ClockMode::Real);
        let thread = dev.run_on_own_thread().expect("device thread");
        let uar_page = u64::from(FIRST_UAR) * 4096;
        let held = dev.inner.lock();
        dev.mmio_write(0, uar_page + 0x20, &[0; 8]);
        // A write longer than a doorbell keeps its bytes too.
        dev.mmio_write(0, uar_page + 0x20, &[0; 16]);
        drop(held);
        drop(thread);
        assert_eq!(
            dev.counters().uar_writes_ignored,
            2,
            "each write applied once, by the thread or at its stop"
        );
    }

    /// A device on the real clock with its thread, and the offset of its first UAR page (no
    /// UAR the driver allocated: a write there is counted as ignored once applied).
    fn device_with_thread() -> (Arc<Mlx5>, super::DeviceThread, u64) {
        let dev = Arc::new(Mlx5::with_clock(ClockMode::Real));
        let thread = dev.run_on_own_thread().expect("device thread");
        (dev, thread, u64::from(FIRST_UAR) * 4096)
    }

    /// The queue as the device sees it.
    fn engine_of(dev: &Mlx5) -> Arc<Engine> {
        dev.inner
            .engine
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
            .expect("a device thread")
    }

    #[test]
    fn a_write_made_while_the_thread_stops_is_queued_behind_the_earlier_ones() {
        let dev = Arc::new(Mlx5::with_clock(ClockMode::Real));
        let thread = dev.run_on_own_thread().expect("device thread");
        let engine = engine_of(&dev);
        let uar_page = u64::from(FIRST_UAR) * 4096;
        let held = dev.inner.lock();
        // A1: taken by the thread, which then waits for the device's lock.
        dev.mmio_write(0, uar_page + 0x20, &[0; 8]);
        assert!(eventually(|| engine.pending.lock().unwrap().is_empty()));
        // A2: queued behind it.
        dev.mmio_write(0, uar_page + 0x20, &[0; 8]);
        let dropper = std::thread::spawn(move || drop(thread));
        assert!(eventually(|| engine.stop.load(Ordering::SeqCst)));
        // B, made while the thread stops: queued behind A2 (its writer applying it at once
        // would put it before A2).
        assert!(engine.post(uar_page + 0x20, &[0; 8]), "B is queued");
        assert_eq!(engine.pending.lock().unwrap().len(), 2, "A2, then B");
        drop(held);
        dropper.join().expect("dropper");
        assert_eq!(dev.counters().uar_writes_ignored, 3, "A1, A2 and B applied");
        assert!(engine.closed.load(Ordering::SeqCst));
        assert!(
            !engine.post(uar_page + 0x20, &[0; 8]),
            "closed: the writer applies it"
        );
    }

    #[test]
    fn a_register_access_waits_for_the_uar_writes_made_before_it() {
        let (dev, thread, uar_page) = device_with_thread();
        let held = dev.inner.lock();
        dev.mmio_write(0, uar_page + 0x20, &[0; 8]);
        let (tx, rx) = mpsc::channel();
        let reader = {
            let dev = dev.clone();
            std::thread::spawn(move || {
                // The firmware version register, in the initialization segment.
                let mut v = [0u8; 4];
                dev.mmio_read(0, 0, &mut v);
                tx.send(dev.counters().uar_writes_ignored)
                    .expect("the test waits");
            })
        };
        assert!(
            rx.recv_timeout(Duration::from_millis(300)).is_err(),
            "the read waits while the write before it is not applied"
        );
        drop(held);
        assert_eq!(
            rx.recv_timeout(Duration::from_secs(5)),
            Ok(1),
            "the read comes after the write"
        );
        reader.join().expect("reader");
        drop(thread);
    }

    #[test]
    fn a_writer_waits_while_the_queue_is_full_and_nothing_is_lost() {
        let (dev, thread, uar_page) = device_with_thread();
        let engine = engine_of(&dev);
        let held = dev.inner.lock();
        // The first write is taken by the thread, which then waits for the device's lock.
        dev.mmio_write(0, uar_page + 0x20, &[0; 8]);
        assert!(eventually(|| engine.pending.lock().unwrap().is_empty()));
        let (tx, rx) = mpsc::channel();
        let writer = {
            let dev = dev.clone();
            std::thread::spawn(move || {
                for _ in 0..=super::QUEUE_LIMIT {
                    dev.mmio_write(0, uar_page + 0x20, &[0; 8]);
                }
                tx.send(()).expect("the test waits");
            })
        };
        assert!(
            eventually(|| engine.pending.lock().unwrap().len() == super::QUEUE_LIMIT),
            "the queue fills up to its limit"
        );
        assert!(
            rx.recv_timeout(Duration::from_millis(200)).is_err(),
            "the write beyond the limit waits"
        );
        assert_eq!(engine.pending.lock().unwrap().len(), super::QUEUE_LIMIT);
        drop(held);
        assert!(
            rx.recv_timeout(Duration::from_secs(5)).is_ok(),
            "the writer goes on once the thread takes the queue"
        );
        writer.join().expect("writer");
        let all = super::QUEUE_LIMIT as u64 + 2;
        assert!(
            eventually(|| dev.counters().uar_writes_ignored == all),
            "every write applied once: {} of {all}",
            dev.counters().uar_writes_ignored
        );
        drop(thread);
        assert_eq!(dev.counters().uar_writes_ignored, all);
    }

    #[test]
    fn a_uar_write_keeps_its_bytes() {
        let short = UarWrite::new(8, &[1, 2, 3, 4]);
        assert_eq!(short.data(), &[1, 2, 3, 4]);
        let long: Vec<u8> = (0..64).collect();
        assert_eq!(UarWrite::new(8, &long).data(), &long[..]);
        assert_eq!(UarWrite::new(8, &[]).data(), &[] as &[u8]);
    }
}

//! Model checks of the ring's lock-free parts, on the real [`FreeRing`] and [`Posting`] (their
//! atomics are loom's in this build): the free slot indexes, popped by the drainer while the
//! progress loop recycles the slots it used, and the posting flag, given back by a drainer
//! while another thread queues a job and kicks. Two threads each, explored exhaustively.
//! Run with `RUSTFLAGS="--cfg loom" cargo test -p mad --release --lib loom -- --nocapture`
//! (which prints how many executions each model check explored).

use std::sync::atomic::AtomicUsize as StdAtomicUsize;

use loom::sync::{Arc, Mutex};
use loom::thread;

use super::*;

/// Run `f` under every interleaving loom finds and print how many executions it explored.
fn check(name: &'static str, f: impl Fn() + Sync + Send + 'static) {
    let runs = std::sync::Arc::new(StdAtomicUsize::new(0));
    let counted = std::sync::Arc::clone(&runs);
    loom::model(move || {
        counted.fetch_add(1, Ordering::Relaxed);
        f();
    });
    eprintln!(
        "{name}: loom explored {} executions",
        runs.load(Ordering::Relaxed)
    );
}

/// The drainer pops `slots` free indexes and `recycles` more, handing each to the progress
/// loop (through a mutex, as a slot goes from install to completion through the device and
/// the loop's lock), which pushes `recycles` of them back, latest first, as the loop recycles
/// a finished slot. Each pop waits (yielding) until an index is free. Every index popped must
/// be a slot's, and no index may be out twice at once: a pop that read a stale buffer entry
/// (the ring's room is a power of two above the slot count, so the first push writes an entry
/// that held no slot's index) would break one or the other.
fn free_ring_pop_vs_recycle(slots: u32, recycles: usize) {
    let ring = Arc::new(FreeRing::full(slots));
    let out = Arc::new(Mutex::new(Vec::<u32>::new()));
    let drainer = {
        let (ring, out) = (Arc::clone(&ring), Arc::clone(&out));
        thread::spawn(move || {
            for _ in 0..slots as usize + recycles {
                let index = loop {
                    match ring.pop() {
                        Some(i) => break i,
                        None => thread::yield_now(),
                    }
                };
                let mut out = out.lock().unwrap();
                assert!(index < slots, "popped {index}, no slot's index");
                assert!(!out.contains(&index), "index {index} popped while out");
                out.push(index);
            }
        })
    };
    for _ in 0..recycles {
        let index = loop {
            if let Some(i) = out.lock().unwrap().pop() {
                break i;
            }
            thread::yield_now();
        };
        ring.push(index);
    }
    drainer.join().unwrap();
    assert_eq!(ring.len(), 0, "every free index was popped");
    let mut out = out.lock().unwrap().clone();
    out.sort_unstable();
    assert_eq!(
        out,
        (0..slots).collect::<Vec<_>>(),
        "every slot is out once"
    );
}

/// Three slots (room 4): the recycled index goes into the entry that held no slot's index.
#[test]
fn loom_free_ring_pop_vs_recycle_wraps_into_the_spare_entry() {
    check("free ring: 3 slots, 1 recycle", || {
        free_ring_pop_vs_recycle(3, 1);
    });
}

/// Three slots, two recycles: the second push goes into an entry the drainer popped before,
/// whose second pop must see the recycled index.
#[test]
fn loom_free_ring_pop_vs_two_recycles_reuses_a_popped_entry() {
    check("free ring: 3 slots, 2 recycles", || {
        free_ring_pop_vs_recycle(3, 2);
    });
}

/// A ring's queue and its posting flag: what a drainer drained.
struct Drains {
    posting: Posting,
    queue: Mutex<Vec<u32>>,
    drained: Mutex<Vec<u32>>,
}

/// `SendRing::enqueue` (the job queued under the queue lock, then a kick) and then
/// `PortShared::drain` ([`Posting::drain`] with a drain that takes what is queued, under the
/// queue lock, and gives the flag back).
fn enqueue_and_drain(d: &Drains, job: u32) {
    d.queue.lock().unwrap().push(job);
    d.posting.kick();
    d.posting.drain(|seen| {
        let jobs = std::mem::take(&mut *d.queue.lock().unwrap());
        d.drained.lock().unwrap().extend(jobs);
        d.posting.end(seen)
    });
}

/// Two threads queue a job each and drain: whichever finds the flag taken (its holder may be
/// giving it back, having drained before the job was queued) leaves its job to the holder,
/// which must see the kick and drain again. Both jobs are drained, once each.
#[test]
fn loom_posting_kick_vs_a_drainer_giving_the_flag_back() {
    check("posting: two enqueue + drain", || {
        let d = Arc::new(Drains {
            posting: Posting::new(),
            queue: Mutex::new(Vec::new()),
            drained: Mutex::new(Vec::new()),
        });
        let other = {
            let d = Arc::clone(&d);
            thread::spawn(move || enqueue_and_drain(&d, 1))
        };
        enqueue_and_drain(&d, 0);
        other.join().unwrap();
        let mut drained = d.drained.lock().unwrap().clone();
        drained.sort_unstable();
        assert_eq!(drained, [0, 1], "every queued job drained, once");
        assert!(d.queue.lock().unwrap().is_empty(), "a job left queued");
    });
}

/// A ring with no free slot, one job waiting for one, and its posting flag.
struct SlotWait {
    free: FreeRing,
    posting: Posting,
    queue: Mutex<Vec<u32>>,
    drained: Mutex<Vec<(u32, u32)>>,
}

/// One drain with the flag: the waiting job takes a free slot if there is one (under the
/// queue lock, as `next_batch` pops), then the flag goes back.
fn drain_once(d: &SlotWait, seen: u64) -> bool {
    {
        let mut q = d.queue.lock().unwrap();
        if !q.is_empty() {
            if let Some(i) = d.free.pop() {
                let job = q.remove(0);
                d.drained.lock().unwrap().push((job, i));
            }
        }
    }
    d.posting.end(seen)
}

/// The progress loop gives a slot back (`FreeRing::push`, a
/// release store of the tail, no kick of its own) and, at its pass's end, kicks once (`kick`)
/// and drains; meanwhile a sender queues a job (no slot free) and drains. Whoever holds the
/// flag when the slot comes back must see it: the job is drained.
fn recycle_vs_a_waiting_job(kick: bool) {
    let free = FreeRing::full(1);
    assert_eq!(free.pop(), Some(0));
    let d = Arc::new(SlotWait {
        free,
        posting: Posting::new(),
        queue: Mutex::new(Vec::new()),
        drained: Mutex::new(Vec::new()),
    });
    let sender = {
        let d = Arc::clone(&d);
        thread::spawn(move || {
            d.queue.lock().unwrap().push(7);
            d.posting.kick();
            d.posting.drain(|seen| drain_once(&d, seen));
        })
    };
    d.free.push(0);
    if kick {
        d.posting.kick();
    }
    d.posting.drain(|seen| drain_once(&d, seen));
    sender.join().unwrap();
    assert_eq!(
        *d.drained.lock().unwrap(),
        [(7, 0)],
        "the job waiting for a slot took the slot given back"
    );
}

#[test]
fn loom_a_slot_given_back_with_one_kick_per_pass_reaches_a_waiting_job() {
    check("recycle + one kick vs a waiting job", || {
        recycle_vs_a_waiting_job(true);
    });
}

/// Negative control: without the pass's kick, loom must find the job left waiting.
#[test]
#[should_panic(expected = "the job waiting for a slot took the slot given back")]
fn loom_control_a_slot_given_back_without_a_kick_strands_the_job() {
    check("control: recycle, no kick", || {
        recycle_vs_a_waiting_job(false);
    });
}

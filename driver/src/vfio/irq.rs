//! Interrupts through VFIO: the `VFIO_DEVICE_SET_IRQS` argument, and the table of eventfds
//! this backend has routed (kept as dups, so `wait` can poll them and a reset can re-arm them).

use std::io;
use std::mem::{offset_of, size_of};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::Instant;

use vfio_bindings::bindings::vfio as b;

use crate::backend::IrqIndex;
use crate::eventfd::EventFd;

const HEADER: usize = size_of::<b::vfio_irq_set>();
// The buffer is built as u32 words; the header must be whole words with data right after it.
const _: () = assert!(HEADER % 4 == 0 && offset_of!(b::vfio_irq_set, data) == HEADER);

/// The `vfio_irq_set` that routes vectors `start ..` of `index` to `fds`: flags
/// `DATA_EVENTFD | ACTION_TRIGGER`, and each fd as a full 4-byte `s32` (`-1` de-assigns a
/// vector). ixy.rs wrote one byte per fd, which only worked for fds below 256.
pub fn trigger_eventfds(index: u32, start: u32, fds: &[i32]) -> Vec<u8> {
    let mut buf = vec![0u8; HEADER + 4 * fds.len()];
    let mut put = |off: usize, v: u32| buf[off..off + 4].copy_from_slice(&v.to_ne_bytes());
    put(
        offset_of!(b::vfio_irq_set, argsz),
        (HEADER + 4 * fds.len()) as u32,
    );
    put(
        offset_of!(b::vfio_irq_set, flags),
        b::VFIO_IRQ_SET_DATA_EVENTFD | b::VFIO_IRQ_SET_ACTION_TRIGGER,
    );
    put(offset_of!(b::vfio_irq_set, index), index);
    put(offset_of!(b::vfio_irq_set, start), start);
    put(offset_of!(b::vfio_irq_set, count), fds.len() as u32);
    for (i, fd) in fds.iter().enumerate() {
        buf[HEADER + 4 * i..HEADER + 4 * i + 4].copy_from_slice(&fd.to_ne_bytes());
    }
    buf
}

/// The `vfio_irq_set` that turns every vector of `index` off: `DATA_NONE | ACTION_TRIGGER`
/// with `start = 0, count = 0`.
pub fn disable(index: u32) -> Vec<u8> {
    let mut buf = vec![0u8; HEADER];
    let mut put = |off: usize, v: u32| buf[off..off + 4].copy_from_slice(&v.to_ne_bytes());
    put(offset_of!(b::vfio_irq_set, argsz), HEADER as u32);
    put(
        offset_of!(b::vfio_irq_set, flags),
        b::VFIO_IRQ_SET_DATA_NONE | b::VFIO_IRQ_SET_ACTION_TRIGGER,
    );
    put(offset_of!(b::vfio_irq_set, index), index);
    buf
}

/// Every IRQ index, in vfio-pci's order.
pub const ALL_INDEXES: [IrqIndex; 5] = [
    IrqIndex::Intx,
    IrqIndex::Msi,
    IrqIndex::Msix,
    IrqIndex::Err,
    IrqIndex::Req,
];

/// The eventfds routed per index and vector (dups of the caller's).
#[derive(Debug, Default)]
pub struct Routed {
    by_index: [Vec<Option<Arc<EventFd>>>; 5],
}

impl Routed {
    /// Record `fds` as vectors `start ..` of `index`.
    pub fn set(&mut self, index: IrqIndex, start: u32, fds: Vec<EventFd>) {
        let slots = &mut self.by_index[index as usize];
        let end = start as usize + fds.len();
        if slots.len() < end {
            slots.resize(end, None);
        }
        for (slot, fd) in slots[start as usize..end].iter_mut().zip(fds) {
            *slot = Some(Arc::new(fd));
        }
    }

    /// Forget every vector of `index`.
    pub fn clear(&mut self, index: IrqIndex) {
        self.by_index[index as usize].clear();
    }

    /// True when some vector of `index` is routed.
    pub fn any(&self, index: IrqIndex) -> bool {
        self.by_index[index as usize].iter().any(Option::is_some)
    }

    /// The raw fds of `index` from vector 0, `-1` for unrouted vectors (to re-arm after a reset).
    /// The numbers name open fds only while this table is borrowed: a later `set` or `clear`
    /// closes the ones it replaces, so use them before letting go of the table.
    pub fn raw_fds(&self, index: IrqIndex) -> Vec<i32> {
        self.by_index[index as usize]
            .iter()
            .map(|s| s.as_ref().map_or(-1, AsRawFd::as_raw_fd))
            .collect()
    }

    /// Every routed eventfd (shared handles, so they stay open while someone polls them).
    pub fn all(&self) -> Vec<Arc<EventFd>> {
        self.by_index.iter().flatten().flatten().cloned().collect()
    }
}

/// Block until one of `fds` is readable (an interrupt is pending; the count is left for the
/// caller to take) or `deadline` passes. Returns true when an fd is readable. With no fds it
/// just sleeps until the deadline.
pub fn wait_any(fds: &[Arc<EventFd>], deadline: Instant) -> bool {
    let mut pfds: Vec<libc::pollfd> = fds
        .iter()
        .map(|f| libc::pollfd {
            fd: f.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let ts = libc::timespec {
            tv_sec: libc::time_t::try_from(left.as_secs()).unwrap_or(libc::time_t::MAX),
            tv_nsec: left.subsec_nanos() as libc::c_long,
        };
        // SAFETY: `pfds` is a live array of `pfds.len()` pollfds whose fds `fds` keeps open for
        // the whole call; `ts` is a live timespec; no signal mask is passed.
        let rc = unsafe {
            libc::ppoll(
                pfds.as_mut_ptr(),
                pfds.len() as libc::nfds_t,
                &raw const ts,
                std::ptr::null(),
            )
        };
        if rc > 0 {
            return true;
        }
        if rc == 0 && Instant::now() >= deadline {
            return false;
        }
        if rc < 0 {
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                tracing::warn!(error = %e, "ppoll on interrupt eventfds failed");
                return false;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn word(buf: &[u8], at: usize) -> u32 {
        u32::from_ne_bytes(buf[at..at + 4].try_into().unwrap())
    }

    /// Layout from vfio-userspace.md §1.4: `{argsz, flags, index, start, count, data[]}`, data =
    /// count × s32 fds, flags DATA_EVENTFD (4) | ACTION_TRIGGER (32).
    #[test]
    fn trigger_buffer_carries_full_s32_fds() {
        let buf = trigger_eventfds(2, 1, &[300, -1, 70000]);
        assert_eq!(buf.len(), 20 + 12);
        assert_eq!(word(&buf, 0), 32, "argsz");
        assert_eq!(word(&buf, 4), 0x24, "flags");
        assert_eq!(word(&buf, 8), 2, "index");
        assert_eq!(word(&buf, 12), 1, "start");
        assert_eq!(word(&buf, 16), 3, "count");
        assert_eq!(&buf[20..24], &300i32.to_ne_bytes());
        assert_eq!(&buf[24..28], &[0xff; 4]);
        assert_eq!(&buf[28..32], &70000i32.to_ne_bytes());
    }

    #[test]
    fn disable_buffer() {
        let buf = disable(4);
        assert_eq!(buf.len(), 20);
        assert_eq!(word(&buf, 0), 20);
        assert_eq!(word(&buf, 4), 0x21, "DATA_NONE (1) | ACTION_TRIGGER (32)");
        assert_eq!(word(&buf, 8), 4);
        assert_eq!(word(&buf, 12), 0);
        assert_eq!(word(&buf, 16), 0);
    }

    #[test]
    fn wait_returns_when_an_eventfd_fires_and_leaves_the_count() {
        let fd = Arc::new(EventFd::new().unwrap());
        let other = Arc::new(EventFd::new().unwrap());
        let signaller = fd.clone();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            signaller.signal().unwrap();
        });
        let start = Instant::now();
        assert!(wait_any(
            &[other.clone(), fd.clone()],
            start + Duration::from_secs(30)
        ));
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "woke by the signal, not the deadline"
        );
        t.join().unwrap();
        // Level-triggered: the count is still there for the driver to take.
        assert!(wait_any(std::slice::from_ref(&fd), Instant::now()));
        assert_eq!(fd.take().unwrap(), 1);
        assert_eq!(other.take().unwrap(), 0);
    }

    #[test]
    fn wait_times_out_at_the_deadline() {
        let fd = Arc::new(EventFd::new().unwrap());
        let start = Instant::now();
        assert!(!wait_any(&[fd], start + Duration::from_millis(30)));
        assert!(start.elapsed() >= Duration::from_millis(30));
        let start = Instant::now();
        assert!(
            !wait_any(&[], start + Duration::from_millis(10)),
            "no fds: sleep"
        );
        assert!(start.elapsed() >= Duration::from_millis(10));
    }

    #[test]
    fn routed_table_tracks_dups() {
        let mut r = Routed::default();
        let a = EventFd::new().unwrap();
        let b = EventFd::new().unwrap();
        let (ra, rb) = (a.as_raw_fd(), b.as_raw_fd());
        r.set(IrqIndex::Msix, 0, vec![a]);
        r.set(IrqIndex::Msix, 2, vec![b]);
        assert_eq!(r.raw_fds(IrqIndex::Msix), vec![ra, -1, rb]);
        assert!(r.any(IrqIndex::Msix) && !r.any(IrqIndex::Req));
        assert_eq!(r.all().len(), 2);
        r.clear(IrqIndex::Msix);
        assert!(r.all().is_empty());
    }
}

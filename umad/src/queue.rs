//! A umad file's read queue and the fd that shows it to `poll`.
//!
//! The kernel's umad fd is readable (POLLIN) while its receive list is non-empty and reports
//! POLLERR once its device is gone. The fd this library hands out is one end of a Unix
//! stream socket pair; the library holds the other end. One byte sits in the user's end
//! while the queue is non-empty (so POLLIN follows the queue), and when the device goes
//! away the library queues a byte on its own end and closes it, which makes the kernel mark
//! the user's end with ECONNRESET: `poll` then reports POLLERR (with POLLHUP), as the
//! kernel's umad does. The fd is only for `poll`: reads and writes go through `umad_recv`
//! and `umad_send`.
//!
//! The user owns the number handed out and may `close(2)` it themselves (libibumad's own
//! `umad_close_port` is just that), after which the number can name anything. So the library
//! keeps a duplicate of the user's end for its own reads and writes of it, records the
//! socket's identity (device and inode), and closes the user's number only while it still
//! names that socket ([`ReadQueue::owns_fd`], [`ReadQueue::close_user`]).
//!
//! While a thread waits for the queue in this library ([`ReadQueue::hold`]), the byte is not
//! written: that thread takes what arrives at once, and two system calls per MAD (raise,
//! then lower) would double the cost of a round trip. When the last such thread stops
//! waiting, the fd is brought in line with the queue again. To another thread polling the
//! fd meanwhile, a MAD taken that way looks like one another reader took first.

use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, OwnedFd, RawFd};

use crate::abi::{IbUserMad, MAD_HDR_LEN};
use crate::error::UmadError;
use crate::fork::LibFd;
use mad::wire::header::MAD_LEN;

/// One entry of the read queue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Packet {
    /// Its header (agent slot, status, length, address).
    pub hdr: IbUserMad,
    /// The MAD (a received message, possibly longer than one MAD once RMPP reassembles; or
    /// the first 24 bytes of a timed-out send).
    pub data: Vec<u8>,
    /// A received MAD (counted against the receive limit), not a returned send.
    pub received: bool,
}

impl Packet {
    /// Copies the packet into `buf` as the kernel's `ib_umad_read` does, with a header of
    /// `hdr_len` bytes: all of it if it fits (returning the bytes written); nothing and
    /// EINVAL if even the first MAD does not fit; the header and first MAD and ENOSPC for a
    /// longer message that does not fit (the header's length says how much is needed).
    pub fn copy_out(&self, hdr_len: usize, buf: &mut [u8]) -> Result<usize, UmadError> {
        let total = hdr_len + self.data.len();
        let first = hdr_len + self.data.len().min(MAD_LEN);
        if buf.len() < first {
            return Err(UmadError::BufferTooSmall {
                len: buf.len(),
                need: first,
            });
        }
        let hdr = self.hdr.to_bytes();
        buf[..hdr_len].copy_from_slice(&hdr[..hdr_len]);
        if buf.len() < total {
            buf[hdr_len..first].copy_from_slice(&self.data[..first - hdr_len]);
            return Err(UmadError::NoSpace {
                len: buf.len(),
                need: total,
            });
        }
        buf[hdr_len..total].copy_from_slice(&self.data);
        Ok(total)
    }

    /// A timed-out send coming back: the header as it was written with status ETIMEDOUT,
    /// and the first 24 bytes of the MAD as sent (`send_handler`).
    pub fn timed_out(hdr: IbUserMad, slot: u32, first_bytes: [u8; MAD_HDR_LEN]) -> Packet {
        Packet {
            hdr: IbUserMad {
                agent_id: slot,
                status: libc::ETIMEDOUT as u32,
                ..hdr
            },
            data: first_bytes.to_vec(),
            received: false,
        }
    }
}

/// The queue, its receive limit, and the user's fd.
#[derive(Debug)]
pub struct ReadQueue {
    packets: VecDeque<Packet>,
    received: usize,
    limit: usize,
    dropped: u64,
    /// The number handed to the user; closed by us only while it names our socket.
    user: RawFd,
    /// The user's number was closed by us or found to name something else.
    user_released: bool,
    /// Our own descriptor of the user's end (a dup): the one we read and write it through.
    mine: LibFd,
    /// `st_dev` and `st_ino` of the user's end.
    ident: (u64, u64),
    inner: Option<LibFd>,
    raised: bool,
    held: usize,
}

impl ReadQueue {
    /// A queue dropping received MADs beyond `limit`, and its socket pair.
    pub fn new(limit: usize) -> Result<ReadQueue, UmadError> {
        let mut fds = [0 as RawFd; 2];
        // SAFETY: `fds` has room for the two descriptors socketpair writes.
        let r = unsafe {
            libc::socketpair(
                libc::AF_UNIX,
                libc::SOCK_STREAM | libc::SOCK_NONBLOCK,
                0,
                fds.as_mut_ptr(),
            )
        };
        if r != 0 {
            return Err(UmadError::Os {
                what: "creating the socket pair behind a umad fd",
                source: io::Error::last_os_error(),
            });
        }
        // SAFETY: socketpair succeeded: both descriptors are open and owned by nobody else.
        let (user, inner) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        // The library's end must not leak into programs the user executes.
        // SAFETY: plain fcntl on a descriptor we own.
        unsafe { libc::fcntl(inner.as_raw_fd(), libc::F_SETFD, libc::FD_CLOEXEC) };
        // SAFETY: duplicates a descriptor we own into the lowest free number, close-on-exec.
        let dup = unsafe { libc::fcntl(user.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 0) };
        if dup < 0 {
            return Err(UmadError::Os {
                what: "duplicating the user's end of a umad fd",
                source: io::Error::last_os_error(),
            });
        }
        // SAFETY: fcntl returned a new descriptor that nobody else owns.
        let mine = LibFd::new(unsafe { OwnedFd::from_raw_fd(dup) });
        let inner = LibFd::new(inner);
        let ident = identity(mine.raw()).map_err(|source| UmadError::Os {
            what: "fstat of a umad fd",
            source,
        })?;
        Ok(ReadQueue {
            packets: VecDeque::new(),
            received: 0,
            limit,
            dropped: 0,
            user: user.into_raw_fd(),
            user_released: false,
            mine,
            ident,
            inner: Some(inner),
            raised: false,
            held: 0,
        })
    }

    /// The fd the user polls.
    pub fn fd(&self) -> RawFd {
        self.user
    }

    /// Whether the user's number still names our socket (the user has not closed it, or
    /// closed it and got the number back for something else).
    pub fn owns_fd(&self) -> bool {
        !self.user_released && identity(self.user).is_ok_and(|id| id == self.ident)
    }

    /// Close the user's number if it still names our socket (returns whether it did);
    /// otherwise leave it alone, it is someone else's now. Either way it is not ours after.
    pub fn close_user(&mut self) -> bool {
        let ours = self.owns_fd();
        self.user_released = true;
        if ours {
            // SAFETY: the number names the socket we made and handed out (checked just
            // above): closing it closes nothing of anybody else's.
            unsafe { libc::close(self.user) };
        }
        ours
    }

    /// Packets queued.
    pub fn len(&self) -> usize {
        self.packets.len()
    }

    /// Nothing queued.
    pub fn is_empty(&self) -> bool {
        self.packets.is_empty()
    }

    /// Received MADs dropped over the limit.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// How many received MADs the queue holds at most.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Counts a received MAD dropped before it reached the queue, for want of room on its
    /// way there (the file's MADs held while an agent registers).
    pub fn count_dropped(&mut self) {
        self.dropped += 1;
    }

    /// Queue `p` at the end. A received MAD beyond the limit is dropped (returns false);
    /// `exempt` ones (responses to our own requests, timed-out sends) never are, so that
    /// every request still ends in exactly one answer.
    pub fn push(&mut self, p: Packet, exempt: bool) -> bool {
        if p.received && !exempt && self.received >= self.limit {
            self.dropped += 1;
            return false;
        }
        if p.received {
            self.received += 1;
        }
        self.packets.push_back(p);
        self.raise();
        true
    }

    /// Take the first packet.
    pub fn pop(&mut self) -> Option<Packet> {
        let p = self.packets.pop_front()?;
        if p.received {
            self.received -= 1;
        }
        if self.packets.is_empty() {
            self.lower();
        }
        Some(p)
    }

    /// Put `p` back at the front (a read that could not take it).
    pub fn requeue(&mut self, p: Packet) {
        if p.received {
            self.received += 1;
        }
        self.packets.push_front(p);
        self.raise();
    }

    /// Drop everything queued.
    pub fn clear(&mut self) {
        self.packets.clear();
        self.received = 0;
        self.lower();
    }

    /// A thread waits for the queue and takes what comes: the fd need not follow until
    /// [`ReadQueue::release`].
    pub fn hold(&mut self) {
        self.held += 1;
    }

    /// The thread of a [`ReadQueue::hold`] stopped waiting. With `show`, the fd follows the queue
    /// again now; without, packets left queued are shown by a later [`ReadQueue::show`], which the
    /// port's fallback thread makes within about [`crate::drive::IDLE`] whatever callers wait on
    /// other files (the thread is expected back soon: a second packet delivered in the same pass as
    /// the first would otherwise cost a raise and a lower while it sits there, and it is no
    /// different from a response not yet taken off the completion queue).
    pub fn release(&mut self, show: bool) {
        self.held = self.held.saturating_sub(1);
        if show {
            self.show();
        }
    }

    /// Make the fd readable if packets are queued and no thread holds the queue.
    pub fn show(&mut self) {
        if !self.packets.is_empty() {
            self.raise();
        }
    }

    fn raise(&mut self) {
        if self.raised || self.held > 0 {
            return;
        }
        if let Some(inner) = &self.inner {
            // SAFETY: sends one byte from a live buffer on a descriptor we own; MSG_NOSIGNAL
            // keeps a closed peer from raising SIGPIPE.
            let n = unsafe {
                libc::send(
                    inner.raw(),
                    [1u8].as_ptr().cast(),
                    1,
                    libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT,
                )
            };
            self.raised = n == 1;
        }
    }

    fn lower(&mut self) {
        if !self.raised {
            return;
        }
        let mut buf = [0u8; 16];
        loop {
            // SAFETY: reads into a live local buffer of the length given, from our descriptor.
            let n = unsafe {
                libc::recv(
                    self.mine.raw(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                    libc::MSG_DONTWAIT,
                )
            };
            if n <= 0 {
                break;
            }
        }
        self.raised = false;
    }

    /// The device is gone: make the user's fd report POLLERR from now on.
    pub fn kill(&mut self) {
        let Some(inner) = self.inner.take() else {
            return;
        };
        // Unread data in our end when it closes is what makes the kernel set ECONNRESET on
        // the user's end (unix_release_sock).
        // SAFETY: sends one byte from a live buffer on a descriptor we own.
        unsafe {
            libc::send(
                self.mine.raw(),
                [0u8].as_ptr().cast(),
                1,
                libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT,
            )
        };
        drop(inner);
    }
}

impl Drop for ReadQueue {
    fn drop(&mut self) {
        self.close_user();
    }
}

/// `st_dev` and `st_ino` of what `fd` names.
fn identity(fd: RawFd) -> io::Result<(u64, u64)> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: fstat writes a struct stat into the live buffer given; any number is safe to
    // ask about (EBADF for a closed one).
    if unsafe { libc::fstat(fd, st.as_mut_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fstat succeeded and filled the struct.
    let st = unsafe { st.assume_init() };
    Ok((st.st_dev, st.st_ino))
}

/// Whether `fd` reports `events` right now (`poll` with timeout 0).
pub fn poll_now(fd: RawFd) -> i16 {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN | libc::POLLOUT,
        revents: 0,
    };
    // SAFETY: one pollfd, live for the call.
    let n = unsafe { libc::poll(&raw mut p, 1, 0) };
    if n == 1 { p.revents } else { 0 }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi::HDR_LEN;

    fn recv(len: usize, fill: u8) -> Packet {
        Packet {
            hdr: IbUserMad {
                agent_id: 2,
                length: (HDR_LEN + len) as u32,
                ..IbUserMad::default()
            },
            data: vec![fill; len],
            received: true,
        }
    }

    #[test]
    fn a_mad_that_fits_is_copied_whole() {
        let p = recv(256, 7);
        let mut buf = vec![0u8; 64 + 256];
        assert_eq!(p.copy_out(64, &mut buf).unwrap(), 320);
        assert_eq!(&buf[..4], &2u32.to_ne_bytes());
        assert!(buf[64..].iter().all(|&b| b == 7));
    }

    #[test]
    fn a_buffer_short_of_one_mad_gets_einval_and_nothing() {
        let p = recv(256, 7);
        let mut buf = vec![0xeeu8; 64 + 255];
        let e = p.copy_out(64, &mut buf).unwrap_err();
        assert_eq!(e.errno(), libc::EINVAL);
        assert!(buf.iter().all(|&b| b == 0xee), "nothing written");
    }

    #[test]
    fn a_long_message_in_a_short_buffer_gets_enospc_header_and_first_mad() {
        let mut p = recv(1000, 0);
        for (i, b) in p.data.iter_mut().enumerate() {
            *b = i as u8;
        }
        let mut buf = vec![0xeeu8; 64 + 256];
        let e = p.copy_out(64, &mut buf).unwrap_err();
        assert_eq!(e.errno(), libc::ENOSPC);
        let h = IbUserMad::from_bytes(buf[..64].try_into().unwrap());
        assert_eq!(
            h.length as usize,
            64 + 1000,
            "the length says what is needed"
        );
        assert_eq!(&buf[64..], &p.data[..256]);
        let mut big = vec![0u8; 64 + 1000];
        assert_eq!(p.copy_out(64, &mut big).unwrap(), 1064);
        assert_eq!(&big[64..], &p.data[..]);
    }

    #[test]
    fn the_fd_is_readable_exactly_while_packets_are_queued() {
        let mut q = ReadQueue::new(10).unwrap();
        assert_eq!(poll_now(q.fd()) & libc::POLLIN, 0);
        assert_ne!(
            poll_now(q.fd()) & libc::POLLOUT,
            0,
            "always writable, as umad"
        );
        q.push(recv(256, 1), false);
        q.push(recv(256, 2), false);
        assert_ne!(poll_now(q.fd()) & libc::POLLIN, 0);
        let a = q.pop().unwrap();
        assert_eq!(a.data[0], 1);
        assert_ne!(poll_now(q.fd()) & libc::POLLIN, 0, "one left");
        q.requeue(a);
        assert_eq!(q.pop().unwrap().data[0], 1, "requeued at the front");
        q.pop().unwrap();
        assert_eq!(poll_now(q.fd()) & libc::POLLIN, 0, "empty: not readable");
        assert!(q.pop().is_none());
    }

    #[test]
    fn a_number_the_user_closed_and_reused_is_neither_owned_nor_closed() {
        let q = ReadQueue::new(10).unwrap();
        let n = q.fd();
        assert!(q.owns_fd());
        let other = std::fs::File::open("/dev/null").unwrap();
        // The user closes the umad fd and the number comes back naming another file.
        // SAFETY: dup2 onto the queue's user number (closing it, as the user would).
        assert_eq!(unsafe { libc::dup2(other.as_raw_fd(), n) }, n);
        assert!(!q.owns_fd());
        drop(q);
        // SAFETY: fcntl on a number: only asks whether it is open.
        assert!(unsafe { libc::fcntl(n, libc::F_GETFD) } >= 0, "left open");
        // SAFETY: n is the dup2 made above, owned by this test.
        unsafe { libc::close(n) };
    }

    #[test]
    fn the_users_number_is_closed_while_it_names_the_queues_socket() {
        let mut q = ReadQueue::new(10).unwrap();
        let n = q.fd();
        let socket = identity(n).unwrap();
        q.push(recv(256, 1), false);
        assert!(q.close_user());
        assert!(!q.owns_fd());
        // Another thread of the test may take the number at once: it must not name the
        // queue's socket any more (which the queue's own dup keeps alive).
        assert_ne!(identity(n).ok(), Some(socket), "closed");
        assert!(!q.close_user(), "closed once");
        assert_eq!(q.pop().unwrap().data[0], 1, "the queue itself still works");
    }

    #[test]
    fn received_mads_over_the_limit_are_dropped_but_not_answers() {
        let mut q = ReadQueue::new(2).unwrap();
        assert!(q.push(recv(256, 1), false));
        assert!(q.push(recv(256, 2), false));
        assert!(!q.push(recv(256, 3), false), "over the limit");
        assert!(
            q.push(recv(256, 4), true),
            "a response to our request is exempt"
        );
        assert!(q.push(Packet::timed_out(IbUserMad::default(), 1, [0; 24]), false));
        assert_eq!((q.len(), q.dropped()), (4, 1));
    }

    #[test]
    fn a_killed_queue_reports_pollerr() {
        let mut q = ReadQueue::new(2).unwrap();
        assert_eq!(poll_now(q.fd()) & libc::POLLERR, 0);
        q.kill();
        assert_ne!(poll_now(q.fd()) & libc::POLLERR, 0);
        q.push(recv(256, 1), false);
        q.clear();
    }

    #[test]
    fn a_timed_out_send_returns_24_bytes_with_etimedout() {
        let h = IbUserMad {
            agent_id: 9,
            timeout_ms: 100,
            retries: 2,
            length: 0,
            ..IbUserMad::default()
        };
        let p = Packet::timed_out(h, 4, [5; 24]);
        let mut buf = vec![0u8; 64 + 256];
        assert_eq!(p.copy_out(64, &mut buf).unwrap(), 88);
        let back = IbUserMad::from_bytes(buf[..64].try_into().unwrap());
        assert_eq!((back.agent_id, back.status, back.timeout_ms), (4, 110, 100));
        assert_eq!(&buf[64..88], &[5; 24]);
    }
}

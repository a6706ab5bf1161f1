//! The receiving side of one RMPP transfer, as the kernel's `mad_rmpp.c` reassembles
//! (`start_rmpp`, `continue_rmpp`, `complete_rmpp`, `get_mad_len`): segments kept in order,
//! ACKs at the end of each window, the whole message once the last segment is in sequence.
//! No I/O here: it answers each segment with what to send back.
//!
//! - The first segment opens the window to `1 + window` and is acknowledged.
//! - A segment beyond the window is dropped; one already acknowledged (or any, once complete)
//!   is acknowledged again, which is how a sender whose ACK was lost learns where it is.
//! - Segments may arrive out of order; the transfer advances over the ones in sequence. When
//!   that reaches the window's end the window moves by `window` and is acknowledged; when it
//!   reaches the segment flagged Last the message is complete.
//! - A message longer than [`MAX_SEGMENTS`] segments is refused (the receiver's resources are
//!   exhausted: STOP). That bounds one reassembly only: how many a port holds, and their
//!   segments together, is bounded by the port's [`super::RmppLimits`].

use std::collections::BTreeMap;

use mad_wire::header::MAD_LEN;
use mad_wire::rmpp::{Rmpp, flags};

use super::segment::message_len;

/// The most segments one reassembled message may have: about 50 MB of SA data. The kernel
/// sets no bound; a bound keeps a faulty sender from exhausting memory.
pub const MAX_SEGMENTS: u32 = 1 << 18;

/// What to do after a segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecvStep {
    /// Kept; nothing to send (in sequence within the window, or waiting for the ones before
    /// it).
    Nothing,
    /// Dropped: beyond the window, or a duplicate not yet acknowledged.
    Dropped,
    /// Acknowledge: ACK with [`Receiver::ack_fields`].
    Ack,
    /// The message is whole: acknowledge it and deliver [`Receiver::take_message`].
    Complete,
    /// Too long: tell the sender to stop (resources exhausted) and forget the transfer.
    Stop,
}

fn seg_flags(mad: &[u8; MAD_LEN]) -> u8 {
    Rmpp::new_checked(&mad[..]).map_or(0, |r| r.flags())
}

fn seg_paylen(mad: &[u8; MAD_LEN]) -> u32 {
    Rmpp::new_checked(&mad[..]).map_or(0, |r| r.paylen_newwin())
}

/// The reassembly of one transfer.
#[derive(Clone, Debug)]
pub struct Receiver {
    mgmt_class: u8,
    /// The last segment received in sequence.
    pub seg_num: u32,
    /// The last segment acknowledged.
    pub last_ack: u32,
    /// The last segment the window allows.
    pub newwin: u32,
    window: u32,
    max_segments: u32,
    /// The message is whole.
    pub complete: bool,
    /// Segment 1, then the others by number (also those beyond the sequence).
    segments: BTreeMap<u32, Box<[u8; MAD_LEN]>>,
}

impl Receiver {
    /// Start with the first segment (SegmentNumber 1, flagged First) of a class `mgmt_class`
    /// transfer, with a receive window of `window` segments, for a message of at most
    /// `max_segments` segments ([`MAX_SEGMENTS`] on a port).
    pub fn start(
        mgmt_class: u8,
        first: &[u8; MAD_LEN],
        window: u32,
        max_segments: u32,
    ) -> (Receiver, RecvStep) {
        let mut segments = BTreeMap::new();
        segments.insert(1, Box::new(*first));
        let mut r = Receiver {
            mgmt_class,
            seg_num: 1,
            last_ack: 0,
            newwin: 1,
            window: window.max(1),
            max_segments: max_segments.max(1),
            complete: false,
            segments,
        };
        if seg_flags(first) & flags::LAST != 0 {
            r.complete = true;
            return (r, RecvStep::Complete);
        }
        r.newwin = r.newwin.saturating_add(r.window).min(r.max_segments);
        (r, RecvStep::Ack)
    }

    /// Segment `seg` (not the first) arrived.
    pub fn on_segment(&mut self, seg: u32, mad: &[u8; MAD_LEN]) -> RecvStep {
        if seg > self.newwin {
            return RecvStep::Dropped;
        }
        if seg <= self.last_ack || self.complete {
            return RecvStep::Ack;
        }
        if seg <= self.seg_num || self.segments.contains_key(&seg) {
            // A duplicate not yet acknowledged.
            return RecvStep::Dropped;
        }
        self.segments.insert(seg, Box::new(*mad));
        if seg != self.seg_num + 1 {
            return RecvStep::Nothing;
        }
        while self.segments.contains_key(&(self.seg_num + 1)) {
            self.seg_num += 1;
        }
        let last = self
            .segments
            .get(&self.seg_num)
            .is_some_and(|m| seg_flags(m) & flags::LAST != 0);
        if last {
            self.complete = true;
            return RecvStep::Complete;
        }
        if self.seg_num == self.newwin {
            if self.newwin >= self.max_segments {
                return RecvStep::Stop;
            }
            self.newwin = self
                .newwin
                .saturating_add(self.window)
                .min(self.max_segments);
            return RecvStep::Ack;
        }
        RecvStep::Nothing
    }

    /// SegmentNumber and NewWindowLast of the ACK to send now (`format_ack`), which also
    /// counts as acknowledging what is in sequence.
    pub fn ack_fields(&mut self) -> (u32, u32) {
        self.last_ack = self.seg_num;
        (self.seg_num, self.newwin)
    }

    /// The whole message (once complete): segment 1 entire, then the data of each later
    /// segment in order, cut to the length the last segment's PayloadLength gives. The
    /// segments are released; an empty vector if the message is not complete.
    pub fn take_message(&mut self) -> Vec<u8> {
        if !self.complete {
            return Vec::new();
        }
        let segments = std::mem::take(&mut self.segments);
        let hdr_len = mad_wire::class::data_offset(self.mgmt_class);
        let last_paylen = segments.get(&self.seg_num).map_or(0, |m| seg_paylen(m));
        let len = message_len(self.mgmt_class, self.seg_num, last_paylen);
        let mut out = Vec::with_capacity(self.seg_num as usize * MAD_LEN);
        for (n, m) in segments.range(1..=self.seg_num) {
            if *n == 1 {
                out.extend_from_slice(&m[..]);
            } else {
                out.extend_from_slice(&m[hdr_len..]);
            }
        }
        out.truncate(len);
        out
    }

    /// Segments held.
    pub fn held(&self) -> usize {
        self.segments.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rmpp::segment::Layout;
    use mad_wire::class;

    /// `got` is `msg` as reassembled: the same header and data, with the RMPP fields of the
    /// first segment (DATA, Active|First, SegmentNumber 1, the total PayloadLength).
    fn assert_message(got: &[u8], msg: &[u8], first: &[u8; MAD_LEN]) {
        assert_eq!(got.len(), msg.len());
        assert_eq!(got[..24], msg[..24]);
        assert_eq!(got[24..36], first[24..36]);
        assert_eq!(
            (got[25], got[26] & 7),
            (1, flags::ACTIVE | flags::FIRST | (first[26] & flags::LAST))
        );
        assert_eq!(got[36..], msg[36..], "the data as sent");
    }

    /// The segments of an SA message with `data_len` bytes of data, as the sender makes them.
    fn segments(data_len: usize) -> (Vec<u8>, Vec<[u8; MAD_LEN]>) {
        let mut msg = vec![0u8; 56 + data_len];
        msg[0] = 1;
        msg[1] = class::SUBN_ADM;
        msg[24] = 1;
        for (i, b) in msg[56..].iter_mut().enumerate() {
            *b = (i * 7 % 253) as u8;
        }
        let l = Layout::new(class::SUBN_ADM, msg.len()).unwrap();
        let segs = (1..=l.seg_count)
            .map(|n| {
                let mut out = [0u8; MAD_LEN];
                l.segment(&msg, n, &mut out);
                out
            })
            .collect();
        (msg, segs)
    }

    #[test]
    fn in_order_segments_are_acknowledged_per_window_and_reassembled() {
        let (msg, segs) = segments(200 * 9 + 77); // 10 segments
        let (mut r, step) = Receiver::start(class::SUBN_ADM, &segs[0], 4, MAX_SEGMENTS);
        assert_eq!(step, RecvStep::Ack);
        assert_eq!(r.ack_fields(), (1, 5));
        // 2..4 in the window: silent; 5 is the window's end: ACK, window to 9.
        for n in 2..=4 {
            assert_eq!(r.on_segment(n, &segs[n as usize - 1]), RecvStep::Nothing);
        }
        assert_eq!(r.on_segment(5, &segs[4]), RecvStep::Ack);
        assert_eq!(r.ack_fields(), (5, 9));
        for n in 6..=8 {
            assert_eq!(r.on_segment(n, &segs[n as usize - 1]), RecvStep::Nothing);
        }
        assert_eq!(r.on_segment(9, &segs[8]), RecvStep::Ack);
        assert_eq!(r.ack_fields(), (9, 13));
        assert_eq!(r.on_segment(10, &segs[9]), RecvStep::Complete);
        assert_eq!(r.ack_fields(), (10, 13));
        assert_message(&r.take_message(), &msg, &segs[0]);
        assert_eq!(r.held(), 0, "segments released");
    }

    #[test]
    fn a_lost_segment_is_waited_for_and_duplicates_are_re_acknowledged() {
        let (msg, segs) = segments(200 * 4 + 1); // 5 segments
        let (mut r, _) = Receiver::start(class::SUBN_ADM, &segs[0], 64, MAX_SEGMENTS);
        r.ack_fields();
        assert_eq!(r.on_segment(2, &segs[1]), RecvStep::Nothing);
        // 3 is lost; 4 and 5 are kept, out of sequence.
        assert_eq!(r.on_segment(4, &segs[3]), RecvStep::Nothing);
        assert_eq!(r.on_segment(5, &segs[4]), RecvStep::Nothing);
        assert_eq!(r.seg_num, 2);
        // The sender times out and resends from 2 (acknowledged up to 1): 2 is a duplicate.
        assert_eq!(r.on_segment(2, &segs[1]), RecvStep::Dropped);
        // The first segment again (acknowledged): ACK again.
        assert_eq!(r.on_segment(1, &segs[0]), RecvStep::Ack);
        // 3 fills the gap: the sequence runs to 5, which is Last.
        assert_eq!(r.on_segment(3, &segs[2]), RecvStep::Complete);
        assert_eq!(r.seg_num, 5);
        assert_message(&r.take_message(), &msg, &segs[0]);
        // After completion every segment is acknowledged again.
        assert_eq!(r.on_segment(4, &segs[3]), RecvStep::Ack);
        assert_eq!(r.ack_fields(), (5, 65));
    }

    #[test]
    fn segments_beyond_the_window_are_dropped() {
        let (_, segs) = segments(200 * 5);
        let (mut r, _) = Receiver::start(class::SUBN_ADM, &segs[0], 2, MAX_SEGMENTS);
        assert_eq!(r.newwin, 3);
        assert_eq!(r.on_segment(4, &segs[3]), RecvStep::Dropped);
        assert_eq!(r.held(), 1, "not kept");
    }

    #[test]
    fn a_one_segment_message_is_complete_at_once() {
        let (msg, segs) = segments(10);
        let (mut r, step) = Receiver::start(class::SUBN_ADM, &segs[0], 64, MAX_SEGMENTS);
        assert_eq!(step, RecvStep::Complete);
        assert_eq!(
            r.ack_fields(),
            (1, 1),
            "the kernel acknowledges with window 1"
        );
        assert_message(&r.take_message(), &msg, &segs[0]);
    }

    #[test]
    fn an_endless_transfer_is_stopped() {
        let (_, segs) = segments(200 * 3);
        let mut middle = segs[1];
        // A limit of 8 segments, window 4: the window stops growing at 8, and the 8th
        // segment in sequence without Last is one too many.
        let (mut r, _) = Receiver::start(class::SUBN_ADM, &segs[0], 4, 8);
        assert_eq!(r.newwin, 5);
        let mut steps = Vec::new();
        for n in 2..=8u32 {
            middle[28..32].copy_from_slice(&n.to_be_bytes());
            steps.push(r.on_segment(n, &middle));
        }
        assert_eq!(steps[3], RecvStep::Ack, "segment 5 ends the first window");
        assert_eq!(r.newwin, 8);
        assert_eq!(steps[6], RecvStep::Stop, "segment 8 is the limit");
    }
}

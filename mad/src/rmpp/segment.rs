//! How a message is cut into RMPP DATA segments and put back together (reference/mad-stack.md
//! §2.9; the kernel's `ib_create_send_mad`, `get_pad_size`, `send_next_seg` and `get_mad_len`).
//!
//! A message is the class header (`hdr_len` bytes: the common MAD header, the RMPP header and
//! the class's own header, e.g. 56 bytes for the SA) followed by `data_len` bytes of data. Every
//! segment is one 256-byte MAD: the same header, then the next `seg_size = 256 - hdr_len` bytes
//! of data, the last one zero-padded by `pad` bytes. PayloadLength counts the RMPP payload, the
//! 220 bytes after the RMPP header (class header included): the first segment carries the
//! total, `seg_count * 220 - pad`, the last one its own, `220 - pad`.

use mad_wire::class;
use mad_wire::header::MAD_LEN;
use mad_wire::rmpp::{RMPP_HEADER_END, Rmpp, flags, rmpp_type};

/// Bytes of RMPP payload per segment: a MAD less its common and RMPP headers (the kernel's
/// `IB_MGMT_RMPP_DATA`).
pub const RMPP_PAYLOAD: u32 = (MAD_LEN - RMPP_HEADER_END) as u32;

/// The segments of one message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Bytes of header every segment repeats.
    pub hdr_len: usize,
    /// Bytes of data per segment.
    pub seg_size: usize,
    /// Bytes of data in the message.
    pub data_len: usize,
    /// Zero bytes after the data in the last segment.
    pub pad: usize,
    /// Segments.
    pub seg_count: u32,
}

impl Layout {
    /// The layout of a message of `message_len` bytes of `class`; `None` if it is shorter than
    /// the class's header or needs more segments than a SegmentNumber counts.
    pub fn new(mgmt_class: u8, message_len: usize) -> Option<Layout> {
        let hdr_len = class::data_offset(mgmt_class);
        let data_len = message_len.checked_sub(hdr_len)?;
        let seg_size = MAD_LEN - hdr_len;
        // `get_pad_size`: an empty message still takes one (all-padding) segment.
        let pad = if data_len == 0 {
            seg_size
        } else {
            (seg_size - data_len % seg_size) % seg_size
        };
        let seg_count = u32::try_from((data_len + pad) / seg_size).ok()?;
        Some(Layout {
            hdr_len,
            seg_size,
            data_len,
            pad,
            seg_count,
        })
    }

    /// PayloadLength of segment `seg` (1-based): the message's total on the first, the last
    /// segment's own on the last (which wins for a one-segment message), 0 between.
    pub fn paylen(&self, seg: u32) -> u32 {
        // pad < seg_size <= 216 and seg_count * 220 fit: the count comes from a usize length.
        let pad = self.pad as u32;
        if seg == self.seg_count {
            RMPP_PAYLOAD - pad
        } else if seg == 1 {
            self.seg_count.saturating_mul(RMPP_PAYLOAD) - pad
        } else {
            0
        }
    }

    /// Segment `seg` (1-based) of `message` into `out`: the header with the RMPP fields of a
    /// DATA segment (Active, First, Last, SegmentNumber, PayloadLength, RMPPStatus 0;
    /// RRespTime and the other header fields as the message has them), then its slice of the
    /// data.
    ///
    /// RMPPStatus is the stack's, not the client's: a DATA segment with a status other than 0
    /// is refused by the receiver (BAD_STATUS), and the kernel never takes it from the client
    /// (`ib_create_send_mad` starts from a zeroed header). RRespTime is the client's: the
    /// kernel's `send_next_seg` sets the flags with `ib_set_rmpp_flags`, which keeps the upper
    /// five bits of byte 26 as its client (an `ib_mad_agent`, as an [`crate::Agent`] is) wrote
    /// them. (On the umad path it is 0 because `ib_umad_write` copies only the 24-byte common
    /// header over that zeroed RMPP header; the umad library does the same in its `write`.)
    pub fn segment(&self, message: &[u8], seg: u32, out: &mut [u8; MAD_LEN]) {
        out.fill(0);
        out[..self.hdr_len].copy_from_slice(&message[..self.hdr_len]);
        let start = self.hdr_len + (seg as usize - 1) * self.seg_size;
        let end = (start + self.seg_size).min(message.len());
        if start < end {
            out[self.hdr_len..self.hdr_len + (end - start)].copy_from_slice(&message[start..end]);
        }
        let mut r = Rmpp::new_checked(&mut out[..]).expect("a MAD holds an RMPP header");
        r.set_rmpp_type(rmpp_type::DATA);
        r.set_rmpp_status(0);
        let mut f = flags::ACTIVE;
        if seg == 1 {
            f |= flags::FIRST;
        }
        if seg == self.seg_count {
            f |= flags::LAST;
        }
        r.set_flags(f);
        r.set_segment_number(seg);
        r.set_paylen_newwin(self.paylen(seg));
    }
}

/// Bytes of the message `seg_count` segments of `class` make when the last one carries
/// PayloadLength `last_paylen` (`get_mad_len`; a PayloadLength above 220 counts as no
/// padding, as the kernel reads it).
pub fn message_len(mgmt_class: u8, seg_count: u32, last_paylen: u32) -> usize {
    let hdr_len = class::data_offset(mgmt_class);
    let pad = RMPP_PAYLOAD.saturating_sub(last_paylen) as usize;
    (hdr_len + seg_count as usize * (MAD_LEN - hdr_len)).saturating_sub(pad)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sa_layouts_follow_the_kernels_arithmetic() {
        // SA: 56-byte header, 200 data bytes per segment. 450 bytes of data: 3 segments, the
        // last holding 50 bytes and 150 of padding; PayloadLength 3 * 220 - 150 = 510 on the
        // first, 220 - 150 = 70 on the last.
        let l = Layout::new(class::SUBN_ADM, 56 + 450).unwrap();
        assert_eq!(
            (l.hdr_len, l.seg_size, l.seg_count, l.pad),
            (56, 200, 3, 150)
        );
        assert_eq!((l.paylen(1), l.paylen(2), l.paylen(3)), (510, 0, 70));
        assert_eq!(message_len(class::SUBN_ADM, 3, 70), 506);
        // Exactly two segments' worth: no padding; the last carries a whole 220.
        let l = Layout::new(class::SUBN_ADM, 56 + 400).unwrap();
        assert_eq!(
            (l.seg_count, l.pad, l.paylen(1), l.paylen(2)),
            (2, 0, 440, 220)
        );
        assert_eq!(message_len(class::SUBN_ADM, 2, 220), 456);
        // One segment: Last wins, 220 - 190 = 30.
        let l = Layout::new(class::SUBN_ADM, 56 + 10).unwrap();
        assert_eq!((l.seg_count, l.pad, l.paylen(1)), (1, 190, 30));
        // No data at all: one segment of padding (get_pad_size's data_len == 0 case).
        let l = Layout::new(class::SUBN_ADM, 56).unwrap();
        assert_eq!((l.seg_count, l.pad, l.paylen(1)), (1, 200, 20));
        assert_eq!(
            Layout::new(class::SUBN_ADM, 55),
            None,
            "shorter than the header"
        );
    }

    #[test]
    fn vendor_and_device_classes_use_their_headers() {
        // Vendor range 2: 40-byte header, 216 data bytes; 300 bytes: 2 segments, pad 132.
        let l = Layout::new(0x30, 40 + 300).unwrap();
        assert_eq!((l.seg_size, l.seg_count, l.pad), (216, 2, 132));
        assert_eq!((l.paylen(1), l.paylen(2)), (2 * 220 - 132, 88));
        assert_eq!(message_len(0x30, 2, 88), 340);
        // DevMgt: 64-byte header, 192 data bytes.
        let l = Layout::new(class::DEVICE_MGMT, 64 + 192 * 4).unwrap();
        assert_eq!((l.seg_size, l.seg_count, l.pad), (192, 4, 0));
    }

    #[test]
    fn a_paylen_beyond_the_payload_counts_as_no_padding() {
        assert_eq!(message_len(class::SUBN_ADM, 2, 250), 56 + 400);
        assert_eq!(message_len(class::SUBN_ADM, 0, 0), 0, "never below zero");
    }

    #[test]
    fn segments_carry_the_header_their_data_and_the_rmpp_fields() {
        let mut msg = vec![0u8; 56 + 450];
        msg[0] = 1;
        msg[1] = class::SUBN_ADM;
        // RRespTime 0x1F is the client's and kept on every segment (`send_next_seg` keeps the
        // upper five bits of byte 26); a stray RMPPStatus is not (a receiver refuses DATA with
        // a status: BAD_STATUS), so every segment carries 0.
        msg[26] = 0x1F << 3 | flags::ACTIVE;
        msg[27] = mad_wire::rmpp::rmpp_status::RESOURCES_EXHAUSTED;
        for (i, b) in msg[56..].iter_mut().enumerate() {
            *b = (i % 251) as u8 + 1;
        }
        let l = Layout::new(class::SUBN_ADM, msg.len()).unwrap();
        let mut out = [0u8; MAD_LEN];
        l.segment(&msg, 1, &mut out);
        assert_eq!(out[25], rmpp_type::DATA);
        assert_eq!(out[26], 0x1F << 3 | flags::ACTIVE | flags::FIRST);
        assert_eq!(out[27], 0, "RMPPStatus 0");
        assert_eq!(&out[28..32], &1u32.to_be_bytes());
        assert_eq!(&out[32..36], &510u32.to_be_bytes());
        assert_eq!(&out[56..], &msg[56..256]);
        l.segment(&msg, 2, &mut out);
        assert_eq!(out[26], 0x1F << 3 | flags::ACTIVE);
        assert_eq!(out[27], 0, "RMPPStatus 0");
        assert_eq!(&out[32..36], &0u32.to_be_bytes());
        assert_eq!(&out[56..], &msg[256..456]);
        l.segment(&msg, 3, &mut out);
        assert_eq!(out[26], 0x1F << 3 | flags::ACTIVE | flags::LAST);
        assert_eq!(out[27], 0, "RMPPStatus 0");
        assert_eq!(&out[28..32], &3u32.to_be_bytes());
        assert_eq!(&out[32..36], &70u32.to_be_bytes());
        assert_eq!(&out[56..106], &msg[456..506]);
        assert!(out[106..].iter().all(|&b| b == 0), "padding is zero");
    }
}

//! The `ib_user_mad` header in both directions, as the kernel's `ib_umad_write` reads it
//! (an address handle from the address fields) and `recv_handler` fills it (from the work
//! completion and the GRH), and the kernel's duplicate rule (`is_duplicate`,
//! `same_destination`).

use mad::{Grh, QP1_QKEY, RecvAddr, RecvMad, SpecialQp, UdDest};

use crate::abi::{IbMadAddr, IbUserMad};

/// Where a send of an agent on `qp` goes, from the header the user wrote. `pkey_index`
/// counts only with the new ABI (the old header has none).
///
/// The header's `qkey` is not used: `ib_umad_write` builds the address handle from the LID,
/// SL, path bits and GRH only, and `ib_create_send_mad` sends with the QP's own Q_Key
/// (`IB_QP_SET_QKEY`): QP1's well-known one for GSI, none for SMPs (QP0 checks no Q_Key).
pub fn dest_of(h: &IbUserMad, new_abi: bool, qp: SpecialQp) -> UdDest {
    let a = &h.addr;
    UdDest {
        dlid: u16::from_be(a.lid),
        sl: a.sl,
        src_path_bits: a.path_bits,
        remote_qpn: u32::from_be(a.qpn),
        remote_qkey: match qp {
            SpecialQp::Gsi => QP1_QKEY,
            SpecialQp::Smi => 0,
        },
        pkey_index: if new_abi { a.pkey_index } else { 0 },
        grh: (a.grh_present != 0).then(|| Grh {
            sgid_index: a.gid_index,
            dgid: a.gid,
            flow_label: u32::from_be(a.flow_label),
            traffic_class: a.traffic_class,
            hop_limit: a.hop_limit,
        }),
    }
}

/// The header of a received MAD for agent `slot`: `recv_handler`'s fields (status 0, length
/// = header + MAD, the sender's QP and LID, SL, path bits, P_Key index, and the GRH as the
/// address a reply would use: hop limit 0xFF, GID index 0, the sender's GID).
pub fn recv_header(slot: u32, r: &RecvMad, hdr_len: usize, mad_len: usize) -> IbUserMad {
    let a: &RecvAddr = &r.addr;
    let mut addr = IbMadAddr {
        qpn: a.src_qp.to_be(),
        qkey: 0,
        lid: a.slid.to_be(),
        sl: a.sl,
        path_bits: a.dlid_path_bits,
        pkey_index: a.pkey_index,
        ..IbMadAddr::default()
    };
    if let Some(g) = a.reply_dest().grh {
        addr.grh_present = 1;
        addr.gid_index = g.sgid_index;
        addr.hop_limit = g.hop_limit;
        addr.traffic_class = g.traffic_class;
        addr.gid = g.dgid;
        addr.flow_label = g.flow_label.to_be();
    }
    IbUserMad {
        agent_id: slot,
        status: 0,
        timeout_ms: 0,
        retries: 0,
        length: (hdr_len + mad_len) as u32,
        addr,
    }
}

/// The destination the duplicate rule compares for responses: the LID without GRH, the GID
/// with one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Destination {
    /// No GRH: the DLID.
    Lid(u16),
    /// With a GRH: the destination GID.
    Gid([u8; 16]),
}

impl Destination {
    /// From the header the user wrote.
    pub fn of(h: &IbUserMad) -> Destination {
        if h.addr.grh_present != 0 {
            Destination::Gid(h.addr.gid)
        } else {
            Destination::Lid(h.addr.lid)
        }
    }
}

/// What the duplicate rule needs of an outstanding send.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DupKey {
    /// The agent slot.
    pub slot: u32,
    /// The TID as the user wrote it.
    pub tid: u64,
    /// Management class.
    pub class: u8,
    /// A response (not rewritten, compared by destination).
    pub response: bool,
    /// Where it goes.
    pub dest: Destination,
}

/// The kernel's `is_duplicate`, with its TIDs as the wire would see them: the kernel
/// rewrites a request's upper 32 TID bits with the agent's `hi_tid` first, so two requests
/// collide when they come from the same agent with the same lower 32 bits and class; two
/// responses collide when TID, class and destination are equal; a request and a response
/// never do.
pub fn is_duplicate(new: &DupKey, sent: &DupKey) -> bool {
    if new.class != sent.class || new.response != sent.response {
        return false;
    }
    if new.response {
        new.tid == sent.tid && new.dest == sent.dest
    } else {
        new.slot == sent.slot && (new.tid as u32) == (sent.tid as u32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mad::wire::header::MAD_LEN;
    use mad::{AgentId, GrhInfo, SpecialQp};

    fn key(slot: u32, tid: u64, class: u8, response: bool, lid: u16) -> DupKey {
        DupKey {
            slot,
            tid,
            class,
            response,
            dest: Destination::Lid(lid.to_be()),
        }
    }

    #[test]
    fn duplicates_follow_the_kernel() {
        let a = key(0, 0x0000_0001_0000_0005, 0x81, false, 0xffff);
        assert!(
            is_duplicate(&key(0, 5, 0x81, false, 3), &a),
            "upper bits are replaced"
        );
        assert!(
            !is_duplicate(&key(1, 5, 0x81, false, 0xffff), &a),
            "other agent"
        );
        assert!(
            !is_duplicate(&key(0, 5, 0x01, false, 0xffff), &a),
            "other class"
        );
        assert!(
            !is_duplicate(&key(0, 6, 0x81, false, 0xffff), &a),
            "other TID"
        );
        assert!(
            !is_duplicate(&key(0, a.tid, 0x81, true, 0xffff), &a),
            "response"
        );
        let r = key(0, 9, 0x03, true, 4);
        assert!(
            is_duplicate(&key(2, 9, 0x03, true, 4), &r),
            "same TID and LID"
        );
        assert!(!is_duplicate(&key(0, 9, 0x03, true, 5), &r), "other LID");
        assert!(
            !is_duplicate(&key(0, 0x1_0000_0009, 0x03, true, 4), &r),
            "full TID"
        );
    }

    #[test]
    fn a_send_header_becomes_the_address_handle() {
        let mut h = IbUserMad::default();
        h.addr.lid = 0x0012u16.to_be();
        h.addr.qpn = 1u32.to_be();
        h.addr.sl = 3;
        h.addr.path_bits = 1;
        h.addr.pkey_index = 2;
        h.addr.qkey = 0x1234_5678u32.to_be();
        let d = dest_of(&h, true, SpecialQp::Gsi);
        assert_eq!(
            (d.dlid, d.remote_qpn, d.remote_qkey),
            (0x12, 1, 0x8001_0000),
            "QP1's Q_Key whatever the header says"
        );
        assert_eq!(dest_of(&h, true, SpecialQp::Smi).remote_qkey, 0);
        assert_eq!((d.sl, d.src_path_bits, d.pkey_index), (3, 1, 2));
        assert_eq!(d.grh, None);
        assert_eq!(
            dest_of(&h, false, SpecialQp::Gsi).pkey_index,
            0,
            "old ABI has no P_Key index"
        );
        h.addr.grh_present = 1;
        h.addr.gid = [7; 16];
        h.addr.flow_label = 0xabcdeu32.to_be();
        h.addr.hop_limit = 9;
        let g = dest_of(&h, true, SpecialQp::Gsi).grh.unwrap();
        assert_eq!((g.dgid, g.flow_label, g.hop_limit), ([7; 16], 0xabcde, 9));
    }

    #[test]
    fn a_received_mad_gets_the_kernels_header() {
        let r = RecvMad {
            agent: AgentId(9),
            mad: [0; MAD_LEN],
            len: MAD_LEN,
            rmpp: None,
            addr: RecvAddr {
                qp: SpecialQp::Gsi,
                src_qp: 1,
                slid: 0x22,
                sl: 4,
                dlid_path_bits: 1,
                pkey_index: 5,
                grh: Some(GrhInfo {
                    traffic_class: 2,
                    flow_label: 0x333,
                    hop_limit: 7,
                    sgid: [1; 16],
                    dgid: [2; 16],
                }),
            },
            response_to: None,
        };
        let h = recv_header(3, &r, 64, 256);
        assert_eq!((h.agent_id, h.status, h.length), (3, 0, 320));
        assert_eq!(u32::from_be(h.addr.qpn), 1);
        assert_eq!(h.addr.qkey, 0, "recv_handler leaves the Q_Key zero");
        assert_eq!(u16::from_be(h.addr.lid), 0x22);
        assert_eq!((h.addr.sl, h.addr.path_bits, h.addr.pkey_index), (4, 1, 5));
        assert_eq!(h.addr.grh_present, 1);
        assert_eq!(h.addr.gid, [1; 16], "the sender's GID");
        assert_eq!(h.addr.hop_limit, 0xff);
        assert_eq!(u32::from_be(h.addr.flow_label), 0x333);
    }
}

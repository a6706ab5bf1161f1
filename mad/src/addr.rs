//! Where a received MAD came from (the work completion's address fields and the GRH the device
//! wrote), how to answer it, and the kernel's address check between a send and a response
//! (`rcv_has_same_gid`, reference/mad-stack.md §1.3).

use driver::verbs::{GRH_LEN, Grh, SpecialQp, UdDest, WorkCompletion};

/// The Q_Key of QP1 (IBA 13.4.2; the kernel's `IB_QP1_QKEY`).
pub const QP1_QKEY: u32 = 0x8001_0000;

/// The GRH of a received datagram (IBA 8.3), as the device wrote it before the MAD.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GrhInfo {
    /// Traffic class.
    pub traffic_class: u8,
    /// Flow label (20 bits).
    pub flow_label: u32,
    /// Hop limit.
    pub hop_limit: u8,
    /// Source GID (the sender's).
    pub sgid: [u8; 16],
    /// Destination GID (ours).
    pub dgid: [u8; 16],
}

impl GrhInfo {
    /// Reads the 40-byte GRH area of a receive buffer. IPVer/PayLen/NxtHdr are not checked:
    /// the device delivered the packet, and only the fields the reply needs are kept.
    pub fn parse(grh: &[u8; GRH_LEN as usize]) -> GrhInfo {
        let w0 = u32::from_be_bytes([grh[0], grh[1], grh[2], grh[3]]);
        let mut sgid = [0u8; 16];
        let mut dgid = [0u8; 16];
        sgid.copy_from_slice(&grh[8..24]);
        dgid.copy_from_slice(&grh[24..40]);
        GrhInfo {
            traffic_class: (w0 >> 20) as u8,
            flow_label: w0 & 0xF_FFFF,
            hop_limit: grh[7],
            sgid,
            dgid,
        }
    }
}

/// The address of a received MAD.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecvAddr {
    /// The QP it arrived on.
    pub qp: SpecialQp,
    /// The sender's QP.
    pub src_qp: u32,
    /// The sender's LID.
    pub slid: u16,
    /// Service level.
    pub sl: u8,
    /// The low LMC bits of the DLID it was sent to (which of our LIDs).
    pub dlid_path_bits: u8,
    /// P_Key index it arrived with (0 on QP0).
    pub pkey_index: u16,
    /// The GRH, when the packet had one.
    pub grh: Option<GrhInfo>,
}

impl RecvAddr {
    /// From a receive completion and, when it says a GRH came, the buffer's GRH area.
    pub fn from_wc(wc: &WorkCompletion, grh: Option<&[u8; GRH_LEN as usize]>) -> RecvAddr {
        RecvAddr {
            qp: wc.qp,
            src_qp: wc.src_qp,
            slid: wc.slid,
            sl: wc.sl,
            dlid_path_bits: wc.dlid_path_bits,
            pkey_index: wc.pkey_index,
            grh: if wc.grh {
                grh.map(GrhInfo::parse)
            } else {
                None
            },
        }
    }

    /// Where an answer to this MAD goes, as the kernel's `ib_init_ah_attr_from_wc` builds it:
    /// back to the sender's LID and QP with the same SL, P_Key index and path bits; with a GRH
    /// when one came (destination = its source GID, hop limit 0xFF, our GID index 0, which is
    /// the only GID this stack knows).
    pub fn reply_dest(&self) -> UdDest {
        UdDest {
            dlid: self.slid,
            sl: self.sl,
            src_path_bits: self.dlid_path_bits,
            remote_qpn: self.src_qp,
            remote_qkey: match self.qp {
                SpecialQp::Smi => 0,
                SpecialQp::Gsi => QP1_QKEY,
            },
            pkey_index: self.pkey_index,
            grh: self.grh.map(|g| Grh {
                sgid_index: 0,
                dgid: g.sgid,
                flow_label: g.flow_label,
                traffic_class: g.traffic_class,
                hop_limit: 0xFF,
            }),
        }
    }
}

/// What the address check needs to know about our port.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct LocalPort {
    /// LID mask count.
    pub lmc: u8,
    /// GID index 0 (subnet prefix and port GUID).
    pub gid0: [u8; 16],
}

impl LocalPort {
    /// GID 0 from the subnet prefix and the port GUID.
    pub fn new(lmc: u8, gid_prefix: u64, port_guid: u64) -> LocalPort {
        let mut gid0 = [0u8; 16];
        gid0[..8].copy_from_slice(&gid_prefix.to_be_bytes());
        gid0[8..].copy_from_slice(&port_guid.to_be_bytes());
        LocalPort { lmc, gid0 }
    }
}

/// The kernel's `rcv_has_same_gid`: whether a received MAD comes from where a send went.
///
/// - both requests or both responses: no;
/// - a GRH on one side only: no;
/// - our request, their response: without GRH, the LMC path bits we sent from must equal the
///   path bits it arrived on (any LID of the responder); with GRH, our source GID must equal its
///   destination GID (only GID index 0 is known here; another index never matches, as the
///   kernel's failed `rdma_query_gid` does not);
/// - our response, their request: the destination LID (or GID) we sent to must be its source.
pub fn same_address(
    sent_is_response: bool,
    sent: &UdDest,
    recv_is_response: bool,
    recv: &RecvAddr,
    local: &LocalPort,
) -> bool {
    if sent_is_response == recv_is_response {
        return false;
    }
    match (sent.grh, recv.grh) {
        (Some(_), None) | (None, Some(_)) => false,
        (None, None) if !sent_is_response => {
            let lmc = local.lmc.min(7);
            lmc == 0 || (sent.src_path_bits ^ recv.dlid_path_bits) & ((1u8 << lmc) - 1) == 0
        }
        (None, None) => sent.dlid == recv.slid,
        (Some(s), Some(r)) if !sent_is_response => s.sgid_index == 0 && local.gid0 == r.dgid,
        (Some(s), Some(r)) => s.dgid == r.sgid,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dest(dlid: u16, path_bits: u8, grh: Option<Grh>) -> UdDest {
        UdDest {
            dlid,
            sl: 0,
            src_path_bits: path_bits,
            remote_qpn: 1,
            remote_qkey: QP1_QKEY,
            pkey_index: 0,
            grh,
        }
    }

    fn recv(slid: u16, path_bits: u8, grh: Option<GrhInfo>) -> RecvAddr {
        RecvAddr {
            qp: SpecialQp::Gsi,
            src_qp: 1,
            slid,
            sl: 0,
            dlid_path_bits: path_bits,
            pkey_index: 0,
            grh,
        }
    }

    fn g(sgid: u8, dgid: u8) -> GrhInfo {
        GrhInfo {
            traffic_class: 0,
            flow_label: 0,
            hop_limit: 64,
            sgid: [sgid; 16],
            dgid: [dgid; 16],
        }
    }

    fn sgrh(index: u8, dgid: u8) -> Grh {
        Grh {
            sgid_index: index,
            dgid: [dgid; 16],
            flow_label: 0,
            traffic_class: 0,
            hop_limit: 64,
        }
    }

    #[test]
    fn grh_fields_are_read_where_ibta_puts_them() {
        let mut b = [0u8; 40];
        // IPVer 6, TClass 0xAB, FlowLabel 0xCDEF1.
        b[..4].copy_from_slice(&0x6ABC_DEF1u32.to_be_bytes());
        b[7] = 0x40;
        b[8..24].fill(0x11);
        b[24..40].fill(0x22);
        let g = GrhInfo::parse(&b);
        assert_eq!(
            (g.traffic_class, g.flow_label, g.hop_limit),
            (0xAB, 0xCDEF1, 0x40)
        );
        assert_eq!((g.sgid, g.dgid), ([0x11; 16], [0x22; 16]));
    }

    #[test]
    fn reply_goes_back_where_it_came_from() {
        let a = RecvAddr {
            qp: SpecialQp::Gsi,
            src_qp: 0x1234,
            slid: 7,
            sl: 3,
            dlid_path_bits: 1,
            pkey_index: 2,
            grh: Some(g(0x11, 0x22)),
        };
        let d = a.reply_dest();
        assert_eq!(
            (
                d.dlid,
                d.sl,
                d.src_path_bits,
                d.remote_qpn,
                d.remote_qkey,
                d.pkey_index
            ),
            (7, 3, 1, 0x1234, QP1_QKEY, 2)
        );
        let grh = d.grh.unwrap();
        assert_eq!(
            (grh.dgid, grh.hop_limit, grh.sgid_index),
            ([0x11; 16], 0xFF, 0)
        );
        let smi = RecvAddr {
            qp: SpecialQp::Smi,
            grh: None,
            ..a
        };
        assert_eq!(smi.reply_dest().remote_qkey, 0);
        assert!(smi.reply_dest().grh.is_none());
    }

    #[test]
    fn request_response_without_grh_compares_lmc_path_bits_only() {
        let lmc2 = LocalPort {
            lmc: 2,
            gid0: [0; 16],
        };
        // Our request from path bits 1 to LID 9; the response may come from any LID.
        let d = dest(9, 1, None);
        assert!(same_address(false, &d, true, &recv(55, 1, None), &lmc2));
        assert!(
            same_address(false, &d, true, &recv(55, 0b101, None), &lmc2),
            "bits above the LMC are ignored"
        );
        assert!(!same_address(false, &d, true, &recv(9, 2, None), &lmc2));
        let lmc0 = LocalPort::default();
        assert!(
            same_address(false, &d, true, &recv(9, 2, None), &lmc0),
            "LMC 0: always"
        );
    }

    #[test]
    fn request_response_with_grh_compares_our_gid() {
        let local = LocalPort::new(0, 0xFE80_0000_0000_0000, 0x0002_C903_0000_0001);
        let mut r = g(0x33, 0);
        r.dgid = local.gid0;
        assert!(same_address(
            false,
            &dest(9, 0, Some(sgrh(0, 0x33))),
            true,
            &recv(9, 0, Some(r)),
            &local
        ));
        assert!(
            !same_address(
                false,
                &dest(9, 0, Some(sgrh(1, 0x33))),
                true,
                &recv(9, 0, Some(r)),
                &local
            ),
            "unknown GID index"
        );
        r.dgid = [0x44; 16];
        assert!(!same_address(
            false,
            &dest(9, 0, Some(sgrh(0, 0x33))),
            true,
            &recv(9, 0, Some(r)),
            &local
        ));
    }

    #[test]
    fn grh_on_one_side_or_same_direction_never_matches() {
        let l = LocalPort::default();
        assert!(!same_address(
            false,
            &dest(9, 0, Some(sgrh(0, 1))),
            true,
            &recv(9, 0, None),
            &l
        ));
        assert!(!same_address(
            false,
            &dest(9, 0, None),
            true,
            &recv(9, 0, Some(g(1, 2))),
            &l
        ));
        assert!(!same_address(
            false,
            &dest(9, 0, None),
            false,
            &recv(9, 0, None),
            &l
        ));
        assert!(!same_address(
            true,
            &dest(9, 0, None),
            true,
            &recv(9, 0, None),
            &l
        ));
    }

    #[test]
    fn response_request_compares_dlid_or_dgid() {
        let l = LocalPort::default();
        assert!(same_address(
            true,
            &dest(9, 0, None),
            false,
            &recv(9, 0, None),
            &l
        ));
        assert!(!same_address(
            true,
            &dest(9, 0, None),
            false,
            &recv(8, 0, None),
            &l
        ));
        assert!(same_address(
            true,
            &dest(9, 0, Some(sgrh(0, 0x55))),
            false,
            &recv(1, 0, Some(g(0x55, 0))),
            &l
        ));
        assert!(!same_address(
            true,
            &dest(9, 0, Some(sgrh(0, 0x55))),
            false,
            &recv(9, 0, Some(g(0x56, 0))),
            &l
        ));
    }
}

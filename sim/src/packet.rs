//! What crosses a simulated InfiniBand link: one management datagram with the header fields
//! that matter to routing and to the receiving QP (LRH, BTH/DETH, optional GRH).

/// Global route header of a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PacketGrh {
    /// Source GID.
    pub sgid: [u8; 16],
    /// Destination GID.
    pub dgid: [u8; 16],
    /// Traffic class.
    pub traffic_class: u8,
    /// Flow label (20 bits).
    pub flow_label: u32,
    /// Hop limit.
    pub hop_limit: u8,
}

/// A datagram on the wire. Management traffic is all this simulator carries, so the payload
/// is one 256-byte MAD.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Packet {
    /// Source LID (LRH).
    pub slid: u16,
    /// Destination LID (LRH); 0xffff (permissive) for directed-route SMPs.
    pub dlid: u16,
    /// Service level.
    pub sl: u8,
    /// Sent on VL15 (only SMPs, from and to QP0, may be).
    pub vl15: bool,
    /// Source QP (DETH).
    pub src_qp: u32,
    /// Destination QP (BTH).
    pub dst_qp: u32,
    /// Q_Key (DETH).
    pub qkey: u32,
    /// P_Key (BTH).
    pub pkey: u16,
    /// GRH, if present. Boxed: few packets carry one, and the packet stays small (one word
    /// here instead of 44 bytes) as it is moved from the send queue through the network and
    /// the scheduler to the receiving device.
    pub grh: Option<Box<PacketGrh>>,
    /// The MAD.
    pub mad: Box<[u8; 256]>,
}

/// IBA P_Key matching (10.9.3): the same partition (low 15 bits, not 0) and not both limited
/// members. Every end port checks a packet's P_Key with it: a device's receive queue, and the
/// agents of a simulated node.
pub(crate) fn pkey_match(a: u16, b: u16) -> bool {
    a & 0x7fff != 0 && a & 0x7fff == b & 0x7fff && (a | b) & 0x8000 != 0
}

/// The Q_Key of QP1 (IBA 13.5.3.1), which every GMP to QP1 carries: a device's QP1 takes it
/// as its own, and the agents of a simulated node check it.
pub const QP1_QKEY: u32 = 0x8001_0000;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pkey_matching_follows_membership() {
        assert!(pkey_match(0xffff, 0xffff));
        assert!(pkey_match(0xffff, 0x7fff));
        assert!(pkey_match(0x7fff, 0xffff));
        assert!(!pkey_match(0x7fff, 0x7fff), "two limited members");
        assert!(!pkey_match(0x8001, 0x8002));
        assert!(!pkey_match(0x8000, 0x8000), "the invalid P_Key");
    }
}

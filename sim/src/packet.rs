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

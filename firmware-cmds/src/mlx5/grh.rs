//! The 40-byte InfiniBand global route header (IBA vol. 1 §8.3, the kernel's `struct ib_grh`)
//! as an mlx5 device places it at the start of a UD, QP0 or QP1 receive buffer: the first 40
//! bytes of every such receive are the GRH area, written only when the packet carried a GRH.

use crate::error::Result;
use crate::mlx5::bits::need;

/// Size of the GRH and of the GRH area of a UD receive buffer.
pub const GRH_LEN: usize = 40;
/// IPVer of an IB GRH.
pub const IP_VERSION: u8 = 6;
/// NxtHdr value announcing an IBA transport header (BTH follows).
pub const NEXT_HEADER_IBA: u8 = 0x1b;

/// Byte offsets inside the GRH.
pub mod off {
    /// `version_tclass_flow` (BE32): IPVer \[31:28\], TClass \[27:20\], FlowLabel \[19:0\].
    pub const VERSION_TCLASS_FLOW: usize = 0;
    /// `paylen` (BE16).
    pub const PAYLEN: usize = 4;
    /// `next_hdr`.
    pub const NEXT_HDR: usize = 6;
    /// `hop_limit`.
    pub const HOP_LIMIT: usize = 7;
    /// `sgid[16]`.
    pub const SGID: usize = 8;
    /// `dgid[16]`.
    pub const DGID: usize = 24;
}

/// A global route header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Grh {
    /// IPVer (6 for IB).
    pub ip_version: u8,
    /// Traffic class.
    pub traffic_class: u8,
    /// Flow label (20 bits).
    pub flow_label: u32,
    /// Bytes after the GRH up to and including the ICRC.
    pub payload_len: u16,
    /// Next header (0x1b: IBA transport).
    pub next_header: u8,
    /// Hop limit.
    pub hop_limit: u8,
    /// Source GID.
    pub sgid: [u8; 16],
    /// Destination GID.
    pub dgid: [u8; 16],
}

impl Grh {
    /// Emits the 40 bytes; bits of `ip_version` and `flow_label` beyond their fields are
    /// dropped.
    pub fn encode(&self) -> [u8; GRH_LEN] {
        let mut b = [0u8; GRH_LEN];
        let w0 = (u32::from(self.ip_version & 0xf) << 28)
            | (u32::from(self.traffic_class) << 20)
            | (self.flow_label & 0x000f_ffff);
        b[off::VERSION_TCLASS_FLOW..off::VERSION_TCLASS_FLOW + 4]
            .copy_from_slice(&w0.to_be_bytes());
        b[off::PAYLEN..off::PAYLEN + 2].copy_from_slice(&self.payload_len.to_be_bytes());
        b[off::NEXT_HDR] = self.next_header;
        b[off::HOP_LIMIT] = self.hop_limit;
        b[off::SGID..off::SGID + 16].copy_from_slice(&self.sgid);
        b[off::DGID..off::DGID + 16].copy_from_slice(&self.dgid);
        b
    }

    /// Parses the first 40 bytes of `buf`.
    pub fn decode(buf: &[u8]) -> Result<Self> {
        need("GRH", buf, GRH_LEN)?;
        let w0 = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]);
        let mut sgid = [0u8; 16];
        sgid.copy_from_slice(&buf[off::SGID..off::SGID + 16]);
        let mut dgid = [0u8; 16];
        dgid.copy_from_slice(&buf[off::DGID..off::DGID + 16]);
        Ok(Grh {
            ip_version: (w0 >> 28) as u8,
            traffic_class: (w0 >> 20) as u8,
            flow_label: w0 & 0x000f_ffff,
            payload_len: u16::from_be_bytes([buf[off::PAYLEN], buf[off::PAYLEN + 1]]),
            next_header: buf[off::NEXT_HDR],
            hop_limit: buf[off::HOP_LIMIT],
            sgid,
            dgid,
        })
    }
}

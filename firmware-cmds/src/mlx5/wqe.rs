//! Send and receive WQE segments (`struct mlx5_wqe_ctrl_seg`, `mlx5_wqe_datagram_seg` /
//! `mlx5_av`, `mlx5_wqe_data_seg`, `mlx5_wqe_inline_seg`), WQE opcodes and the basic-block
//! (64 B) / DS (16 B) arithmetic.
//!
//! Segments are built into plain arrays: the driver copies them into its DMA ring with
//! volatile writes, the simulator parses copies it read through the IOMMU.

use core::fmt;

use crate::error::{Error, Result};
use crate::mlx5::bits::need;

/// Basic block size (`MLX5_SEND_WQE_BB`).
pub const SEND_WQE_BB: usize = 64;
/// DS unit (`MLX5_SEND_WQE_DS`): WQE sizes are counted in 16-byte units.
pub const SEND_WQE_DS: usize = 16;
/// Largest WQE in basic blocks (`MLX5_SEND_WQE_MAX_WQEBBS`).
pub const SEND_WQE_MAX_WQEBBS: usize = 16;
/// Largest DS count the 6-bit `ds` field holds.
pub const MAX_DS: u8 = 0x3f;
/// Size of the control segment.
pub const CTRL_SEG_LEN: usize = 16;
/// Size of the datagram segment (`struct mlx5_av`).
pub const DATAGRAM_SEG_LEN: usize = 48;
/// Size of a data segment.
pub const DATA_SEG_LEN: usize = 16;
/// `byte_count` bit 31 marking an inline segment (`MLX5_INLINE_SEG`).
pub const INLINE_SEG: u32 = 0x8000_0000;
/// The fallback key that ends a receive scatter list shorter than the RQ's maximum
/// (`MLX5_INVALID_LKEY`, called `MLX5_TERMINATE_SCATTER_LIST_LKEY` in newer qp.h): what a
/// device without the `terminate_scatter_list_mkey` capability
/// ([`crate::mlx5::caps::field::TERMINATE_SCATTER_LIST_MKEY`]) expects. With the capability
/// set, the kernel ends the list with the key QUERY_SPECIAL_CONTEXTS reports instead
/// (`mlx5r_cmd_query_special_mkeys` in drivers/infiniband/hw/mlx5/cmd.c fills
/// `dev->mkeys.terminate_scatter_list_mkey`, which `mlx5_ib_post_recv` in wr.c writes), so
/// the terminator checks below take the key as a parameter.
pub const INVALID_LKEY: u32 = 0x100;
/// `dqp_dct` bit 31 set on UD/GSI sends (`MLX5_EXTENDED_UD_AV`).
pub const EXTENDED_UD_AV: u32 = 0x8000_0000;

/// DS units needed for `bytes` of WQE.
pub fn ds_for_bytes(bytes: usize) -> usize {
    bytes.div_ceil(SEND_WQE_DS)
}

/// Basic blocks a WQE of `ds` DS units occupies (`DIV_ROUND_UP(ds * 16, 64)`): the amount
/// the producer counter advances.
pub fn bbs_for_ds(ds: usize) -> usize {
    (ds * SEND_WQE_DS).div_ceil(SEND_WQE_BB)
}

/// `fm_ce_se` bits of the control segment.
pub mod fm_ce_se {
    /// No fence.
    pub const FENCE_NONE: u8 = 0 << 5;
    /// Initiator small fence.
    pub const FENCE_INITIATOR_SMALL: u8 = 1 << 5;
    /// Fence.
    pub const FENCE: u8 = 2 << 5;
    /// Strong ordering.
    pub const FENCE_STRONG_ORDERING: u8 = 3 << 5;
    /// Fence and initiator small.
    pub const FENCE_SMALL_AND_FENCE: u8 = 4 << 5;
    /// Always generate a CQE (`MLX5_WQE_CTRL_CQ_UPDATE`).
    pub const CQ_UPDATE: u8 = 2 << 2;
    /// Generate a CQE and an EQE (`MLX5_WQE_CTRL_CQ_UPDATE_AND_EQE`).
    pub const CQ_UPDATE_AND_EQE: u8 = 3 << 2;
    /// Solicited event (`MLX5_WQE_CTRL_SOLICITED`).
    pub const SOLICITED: u8 = 1 << 1;
}

/// Send WQE opcode (`MLX5_OPCODE_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct WqeOpcode(pub u8);

impl WqeOpcode {
    /// NOP.
    pub const NOP: Self = Self(0x00);
    /// Send with invalidate.
    pub const SEND_INVAL: Self = Self(0x01);
    /// RDMA write.
    pub const RDMA_WRITE: Self = Self(0x08);
    /// RDMA write with immediate.
    pub const RDMA_WRITE_IMM: Self = Self(0x09);
    /// Send.
    pub const SEND: Self = Self(0x0a);
    /// Send with immediate.
    pub const SEND_IMM: Self = Self(0x0b);
    /// Large send offload.
    pub const LSO: Self = Self(0x0e);
    /// RDMA read.
    pub const RDMA_READ: Self = Self(0x10);
    /// Atomic compare and swap.
    pub const ATOMIC_CS: Self = Self(0x11);
    /// Atomic fetch and add.
    pub const ATOMIC_FA: Self = Self(0x12);
    /// Masked compare and swap.
    pub const ATOMIC_MASKED_CS: Self = Self(0x14);
    /// Masked fetch and add.
    pub const ATOMIC_MASKED_FA: Self = Self(0x15);
    /// Bind memory window.
    pub const BIND_MW: Self = Self(0x18);
    /// Configuration command.
    pub const CONFIG_CMD: Self = Self(0x1f);
    /// Set PSV.
    pub const SET_PSV: Self = Self(0x20);
    /// UMR.
    pub const UMR: Self = Self(0x25);
    /// Enhanced multi-packet send WQE.
    pub const ENHANCED_MPSW: Self = Self(0x29);

    /// Every named opcode.
    pub const ALL: [Self; 17] = [
        Self::NOP,
        Self::SEND_INVAL,
        Self::RDMA_WRITE,
        Self::RDMA_WRITE_IMM,
        Self::SEND,
        Self::SEND_IMM,
        Self::LSO,
        Self::RDMA_READ,
        Self::ATOMIC_CS,
        Self::ATOMIC_FA,
        Self::ATOMIC_MASKED_CS,
        Self::ATOMIC_MASKED_FA,
        Self::BIND_MW,
        Self::CONFIG_CMD,
        Self::SET_PSV,
        Self::UMR,
        Self::ENHANCED_MPSW,
    ];

    /// The `MLX5_OPCODE_*` suffix, or `None`.
    pub fn name(self) -> Option<&'static str> {
        Some(match self.0 {
            0x00 => "NOP",
            0x01 => "SEND_INVAL",
            0x08 => "RDMA_WRITE",
            0x09 => "RDMA_WRITE_IMM",
            0x0a => "SEND",
            0x0b => "SEND_IMM",
            0x0e => "LSO",
            0x10 => "RDMA_READ",
            0x11 => "ATOMIC_CS",
            0x12 => "ATOMIC_FA",
            0x14 => "ATOMIC_MASKED_CS",
            0x15 => "ATOMIC_MASKED_FA",
            0x18 => "BIND_MW",
            0x1f => "CONFIG_CMD",
            0x20 => "SET_PSV",
            0x25 => "UMR",
            0x29 => "ENHANCED_MPSW",
            _ => return None,
        })
    }
}

impl fmt::Display for WqeOpcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#04x} {}", self.0, self.name().unwrap_or("UNKNOWN"))
    }
}

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// The control segment, first in every send WQE.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CtrlSeg {
    /// Opcode modifier (`opmod_idx_opcode[31:24]`).
    pub opmod: u8,
    /// WQE index: the producer counter in basic blocks (`[23:8]`).
    pub wqe_index: u16,
    /// Opcode (`[7:0]`).
    pub opcode: WqeOpcode,
    /// QPN (`qpn_ds[31:8]`).
    pub qpn: u32,
    /// WQE size in DS units, control segment included (`qpn_ds[5:0]`).
    pub ds: u8,
    /// WQE signature.
    pub signature: u8,
    /// Fence, completion and solicited bits ([`fm_ce_se`]).
    pub fm_ce_se: u8,
    /// Immediate data / invalidation key.
    pub imm: u32,
}

impl CtrlSeg {
    /// Emits the 16 bytes.
    pub fn to_bytes(&self) -> Result<[u8; CTRL_SEG_LEN]> {
        self.check()?;
        let mut b = [0u8; CTRL_SEG_LEN];
        self.put(&mut b);
        Ok(b)
    }

    /// Whether every field fits its width.
    fn check(&self) -> Result<()> {
        if self.qpn > 0x00ff_ffff {
            return Err(Error::ValueTooWide {
                field: "qpn",
                value: self.qpn.into(),
                width: 24,
                max: 0x00ff_ffff,
            });
        }
        if self.ds > MAX_DS {
            return Err(Error::ValueTooWide {
                field: "ds",
                value: self.ds.into(),
                width: 6,
                max: MAX_DS.into(),
            });
        }
        Ok(())
    }

    /// Writes the fields (checked by [`check`](Self::check)) into `b`, [`CTRL_SEG_LEN`]
    /// zeroed bytes: where a WQE is built, with no copy of its own.
    fn put(&self, b: &mut [u8]) {
        let w0 = (u32::from(self.opmod) << 24)
            | (u32::from(self.wqe_index) << 8)
            | u32::from(self.opcode.0);
        b[0..4].copy_from_slice(&w0.to_be_bytes());
        b[4..8].copy_from_slice(&((self.qpn << 8) | u32::from(self.ds)).to_be_bytes());
        b[8] = self.signature;
        b[11] = self.fm_ce_se;
        b[12..16].copy_from_slice(&self.imm.to_be_bytes());
    }

    /// Parses a control segment.
    pub fn decode(buf: &[u8]) -> Result<Self> {
        need("WQE control segment", buf, CTRL_SEG_LEN)?;
        let w0 = be32(buf, 0);
        let w1 = be32(buf, 4);
        Ok(CtrlSeg {
            opmod: (w0 >> 24) as u8,
            wqe_index: ((w0 >> 8) & 0xffff) as u16,
            opcode: WqeOpcode(w0 as u8),
            qpn: w1 >> 8,
            ds: (w1 & 0x3f) as u8,
            signature: buf[8],
            fm_ce_se: buf[11],
            imm: be32(buf, 12),
        })
    }

    /// The 64-bit value the send doorbell writes to the BlueFlame register: the first 8 bytes
    /// of the control segment, as a big-endian quantity.
    pub fn doorbell_qword(&self) -> Result<u64> {
        let b = self.to_bytes()?;
        let mut a = [0u8; 8];
        a.copy_from_slice(&b[..8]);
        Ok(u64::from_be_bytes(a))
    }
}

/// The datagram segment / address vector of UD, QP0 and QP1 sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DatagramSeg {
    /// Remote Q_Key.
    pub qkey: u32,
    /// Destination QPN.
    pub dqpn: u32,
    /// `MLX5_EXTENDED_UD_AV` (bit 31 of `dqp_dct`); the kernel sets it on UD/GSI sends.
    pub extended_ud: bool,
    /// Static rate (`stat_rate_sl[7:4]`).
    pub stat_rate: u8,
    /// SL (`stat_rate_sl[3:0]`).
    pub sl: u8,
    /// Force loopback (`fl_mlid` bit 7).
    pub force_loopback: bool,
    /// Source path bits (`fl_mlid[6:0]`).
    pub path_bits: u8,
    /// Destination LID.
    pub rlid: u16,
    /// Traffic class.
    pub tclass: u8,
    /// Hop limit.
    pub hop_limit: u8,
    /// GRH present (`grh_gid_fl` bit 30).
    pub grh: bool,
    /// SGID index (`grh_gid_fl[27:20]`).
    pub sgid_index: u8,
    /// Flow label (`grh_gid_fl[19:0]`).
    pub flow_label: u32,
    /// Destination GID.
    pub rgid: [u8; 16],
}

/// Byte offsets inside the datagram segment.
pub mod av_off {
    /// `key.qkey.qkey` (BE32).
    pub const QKEY: usize = 0x00;
    /// `dqp_dct` (BE32).
    pub const DQP_DCT: usize = 0x08;
    /// `stat_rate_sl`.
    pub const STAT_RATE_SL: usize = 0x0c;
    /// `fl_mlid`.
    pub const FL_MLID: usize = 0x0d;
    /// `rlid` (BE16).
    pub const RLID: usize = 0x0e;
    /// `rmac[6]`.
    pub const RMAC: usize = 0x14;
    /// `tclass`.
    pub const TCLASS: usize = 0x1a;
    /// `hop_limit`.
    pub const HOP_LIMIT: usize = 0x1b;
    /// `grh_gid_fl` (BE32).
    pub const GRH_GID_FL: usize = 0x1c;
    /// `rgid[16]`.
    pub const RGID: usize = 0x20;
}

impl DatagramSeg {
    /// Emits the 48 bytes.
    pub fn to_bytes(&self) -> Result<[u8; DATAGRAM_SEG_LEN]> {
        self.check()?;
        let mut b = [0u8; DATAGRAM_SEG_LEN];
        self.put(&mut b);
        Ok(b)
    }

    /// Whether every field fits its width.
    fn check(&self) -> Result<()> {
        if self.dqpn > 0x00ff_ffff || self.flow_label > 0x000f_ffff {
            return Err(Error::Invalid {
                what: "datagram segment",
                reason: "dqpn must fit 24 bits and flow_label 20 bits",
            });
        }
        if self.stat_rate > 0xf || self.sl > 0xf || self.path_bits > 0x7f {
            return Err(Error::Invalid {
                what: "datagram segment",
                reason: "stat_rate and sl must fit 4 bits, path_bits 7 bits",
            });
        }
        Ok(())
    }

    /// Writes the fields (checked by [`check`](Self::check)) into `b`, [`DATAGRAM_SEG_LEN`]
    /// zeroed bytes.
    fn put(&self, b: &mut [u8]) {
        b[av_off::QKEY..av_off::QKEY + 4].copy_from_slice(&self.qkey.to_be_bytes());
        let dqp = self.dqpn | if self.extended_ud { EXTENDED_UD_AV } else { 0 };
        b[av_off::DQP_DCT..av_off::DQP_DCT + 4].copy_from_slice(&dqp.to_be_bytes());
        b[av_off::STAT_RATE_SL] = (self.stat_rate << 4) | self.sl;
        b[av_off::FL_MLID] = (u8::from(self.force_loopback) << 7) | self.path_bits;
        b[av_off::RLID..av_off::RLID + 2].copy_from_slice(&self.rlid.to_be_bytes());
        b[av_off::TCLASS] = self.tclass;
        b[av_off::HOP_LIMIT] = self.hop_limit;
        let g = (u32::from(self.grh) << 30) | (u32::from(self.sgid_index) << 20) | self.flow_label;
        b[av_off::GRH_GID_FL..av_off::GRH_GID_FL + 4].copy_from_slice(&g.to_be_bytes());
        b[av_off::RGID..av_off::RGID + 16].copy_from_slice(&self.rgid);
    }

    /// Parses a datagram segment.
    pub fn decode(buf: &[u8]) -> Result<Self> {
        need("WQE datagram segment", buf, DATAGRAM_SEG_LEN)?;
        let dqp = be32(buf, av_off::DQP_DCT);
        let g = be32(buf, av_off::GRH_GID_FL);
        let mut rgid = [0u8; 16];
        rgid.copy_from_slice(&buf[av_off::RGID..av_off::RGID + 16]);
        Ok(DatagramSeg {
            qkey: be32(buf, av_off::QKEY),
            dqpn: dqp & 0x00ff_ffff,
            extended_ud: dqp & EXTENDED_UD_AV != 0,
            stat_rate: buf[av_off::STAT_RATE_SL] >> 4,
            sl: buf[av_off::STAT_RATE_SL] & 0xf,
            force_loopback: buf[av_off::FL_MLID] & 0x80 != 0,
            path_bits: buf[av_off::FL_MLID] & 0x7f,
            rlid: u16::from_be_bytes([buf[av_off::RLID], buf[av_off::RLID + 1]]),
            tclass: buf[av_off::TCLASS],
            hop_limit: buf[av_off::HOP_LIMIT],
            grh: (g >> 30) & 1 != 0,
            sgid_index: ((g >> 20) & 0xff) as u8,
            flow_label: g & 0x000f_ffff,
            rgid,
        })
    }
}

/// A data (scatter/gather) segment.
///
/// On mlx5 `byte_count` is taken as a plain length, 0 included: a count of 0 is an empty
/// buffer, not 2 GiB. This is unverified without the PRM or hardware; the evidence is
/// indirect:
/// - the kernel's `mlx5_ib_post_recv` (drivers/infiniband/hw/mlx5/wr.c) writes each SGE of a
///   receive as given (`set_data_ptr_seg`), zero-length ones included, which would let the
///   device write up to 2 GiB into a buffer the caller said was empty if 0 meant 2 GiB;
/// - a third-party report (uiuc-hpc/lci pull request #33) says mlx4 takes a zero-length SGE
///   as 2^31 bytes and mlx5 as 0 bytes.
///
/// The kernel's `mlx5_ib_post_send` and rdma-core's `_mlx5_post_send` and `mlx5_post_recv`
/// (providers/mlx5/qp.c) leave zero-length SGEs out of a WQE; that fits either reading and
/// says nothing about the encoding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DataSeg {
    /// Length in bytes (bit 31 must be clear: it marks inline segments; 0 is 0 bytes, see
    /// above).
    pub byte_count: u32,
    /// Local key.
    pub lkey: u32,
    /// Address (IOVA).
    pub addr: u64,
}

impl DataSeg {
    /// The terminator of a short receive scatter list, with the device's terminator key
    /// (`key`: [`INVALID_LKEY`] unless the capability says otherwise).
    pub const fn terminator(key: u32) -> DataSeg {
        DataSeg {
            byte_count: 0,
            lkey: key,
            addr: 0,
        }
    }

    /// Emits the 16 bytes.
    pub fn to_bytes(&self) -> [u8; DATA_SEG_LEN] {
        let mut b = [0u8; DATA_SEG_LEN];
        self.put(&mut b);
        b
    }

    /// Writes the fields into `b`, [`DATA_SEG_LEN`] bytes.
    fn put(&self, b: &mut [u8]) {
        b[0..4].copy_from_slice(&self.byte_count.to_be_bytes());
        b[4..8].copy_from_slice(&self.lkey.to_be_bytes());
        b[8..16].copy_from_slice(&self.addr.to_be_bytes());
    }

    /// Parses a data segment.
    pub fn decode(buf: &[u8]) -> Result<Self> {
        need("WQE data segment", buf, DATA_SEG_LEN)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(&buf[8..16]);
        Ok(DataSeg {
            byte_count: be32(buf, 0),
            lkey: be32(buf, 4),
            addr: u64::from_be_bytes(a),
        })
    }

    /// True for the receive-list terminator of a device whose terminator key is `key`
    /// ([`INVALID_LKEY`] unless the capability says otherwise).
    pub fn is_terminator(&self, key: u32) -> bool {
        self.lkey == key
    }
}

/// The 4-byte header of an inline segment carrying `len` bytes.
pub fn inline_header(len: u32) -> Result<[u8; 4]> {
    if len & INLINE_SEG != 0 {
        return Err(Error::Invalid {
            what: "inline segment",
            reason: "length too large",
        });
    }
    Ok((len | INLINE_SEG).to_be_bytes())
}

/// A gather entry of a send WQE as the device sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Gather {
    /// A pointer to memory.
    Data(DataSeg),
    /// Bytes carried in the WQE.
    Inline(Vec<u8>),
}

/// A UD-style send WQE (UD, QP0, QP1): control + datagram + gather entries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UdSendWqe {
    /// Control segment; `ds` is computed by [`UdSendWqe::to_bytes`].
    pub ctrl: CtrlSeg,
    /// Address vector.
    pub av: DatagramSeg,
    /// Gather list (data segments only are emitted by `to_bytes`; the parser also accepts
    /// inline segments).
    pub gather: Vec<Gather>,
}

impl UdSendWqe {
    /// Emits the WQE, padded to whole basic blocks, with `ctrl.ds` = 4 + entries. Returns the
    /// bytes and the number of basic blocks the producer counter advances.
    pub fn to_bytes(&self) -> Result<(Vec<u8>, usize)> {
        let mut body = Vec::with_capacity(SEND_WQE_BB * 2);
        body.extend_from_slice(&[0u8; CTRL_SEG_LEN]);
        body.extend_from_slice(&self.av.to_bytes()?);
        for g in &self.gather {
            match g {
                Gather::Data(d) => {
                    if d.byte_count & INLINE_SEG != 0 {
                        return Err(Error::Invalid {
                            what: "data segment",
                            reason: "byte_count bit 31 is the inline flag",
                        });
                    }
                    body.extend_from_slice(&d.to_bytes());
                }
                Gather::Inline(data) => {
                    let len = u32::try_from(data.len()).map_err(|_| Error::Invalid {
                        what: "inline segment",
                        reason: "length too large",
                    })?;
                    body.extend_from_slice(&inline_header(len)?);
                    body.extend_from_slice(data);
                    let pad = body.len().next_multiple_of(SEND_WQE_DS) - body.len();
                    body.extend(core::iter::repeat_n(0, pad));
                }
            }
        }
        let ds = ds_for_bytes(body.len());
        let bbs = bbs_for_ds(ds);
        if ds > usize::from(MAX_DS) || bbs > SEND_WQE_MAX_WQEBBS {
            return Err(Error::Invalid {
                what: "send WQE",
                reason: "too many segments for one WQE (at most 16 basic blocks)",
            });
        }
        let mut ctrl = self.ctrl;
        ctrl.ds = ds as u8;
        body[..CTRL_SEG_LEN].copy_from_slice(&ctrl.to_bytes()?);
        body.resize(bbs * SEND_WQE_BB, 0);
        Ok((body, bbs))
    }

    /// Parses a UD-style send WQE from `buf` (which may extend past the WQE). The DS count of
    /// the control segment bounds the parse; it must cover control and datagram segments and
    /// fit in `buf`.
    pub fn decode(buf: &[u8]) -> Result<Self> {
        let (ctrl, av, entries) = UdSendWqe::parse_in_place(buf)?;
        let gather = entries
            .map(|g| {
                g.map(|g| match g {
                    GatherRef::Data(d) => Gather::Data(d),
                    GatherRef::Inline(b) => Gather::Inline(b.to_vec()),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(UdSendWqe { ctrl, av, gather })
    }

    /// [`UdSendWqe::decode`] without copying: the control and datagram segments, and the
    /// gather entries as an iterator over `buf` (a device parses every WQE it runs, so this
    /// one allocates nothing). Same checks as `decode`; a bad entry ends the iteration with
    /// its error.
    pub fn parse_in_place(buf: &[u8]) -> Result<(CtrlSeg, DatagramSeg, GatherIter<'_>)> {
        let ctrl = CtrlSeg::decode(buf)?;
        let len = usize::from(ctrl.ds) * SEND_WQE_DS;
        if len < CTRL_SEG_LEN + DATAGRAM_SEG_LEN {
            return Err(Error::Invalid {
                what: "send WQE ds",
                reason: "a UD WQE needs at least 4 DS (control + datagram)",
            });
        }
        need("send WQE", buf, len)?;
        let av = DatagramSeg::decode(&buf[CTRL_SEG_LEN..])?;
        Ok((
            ctrl,
            av,
            GatherIter {
                buf: &buf[..len],
                at: CTRL_SEG_LEN + DATAGRAM_SEG_LEN,
            },
        ))
    }

    /// The bytes of a UD send WQE with one data segment (control, datagram and data
    /// segments: 5 DS, two basic blocks), as [`UdSendWqe::to_bytes`] emits it for a gather list
    /// of that one entry, without allocating (a driver builds one per send). `ctrl.ds` is set
    /// here.
    pub fn single_data(
        ctrl: CtrlSeg,
        av: &DatagramSeg,
        data: DataSeg,
    ) -> Result<[u8; SINGLE_DATA_WQE_LEN]> {
        let mut b = [0u8; SINGLE_DATA_WQE_LEN];
        Self::single_data_into(ctrl, av, data, &mut b)?;
        Ok(b)
    }

    /// [`single_data`](Self::single_data) written into the caller's buffer `b` (every byte of
    /// it is written, unless the segments are refused, when it is left as it was).
    pub fn single_data_into(
        ctrl: CtrlSeg,
        av: &DatagramSeg,
        data: DataSeg,
        b: &mut [u8; SINGLE_DATA_WQE_LEN],
    ) -> Result<()> {
        Self::single_data_with_av(ctrl, &av.to_bytes()?, data, b)
    }

    /// [`single_data_into`](Self::single_data_into) with the datagram segment already
    /// encoded (`av`, as [`DatagramSeg::to_bytes`] emits it, which checked it): a driver that
    /// sends many WQEs to one destination encodes its segment once and copies it.
    pub fn single_data_with_av(
        ctrl: CtrlSeg,
        av: &[u8; DATAGRAM_SEG_LEN],
        data: DataSeg,
        b: &mut [u8; SINGLE_DATA_WQE_LEN],
    ) -> Result<()> {
        if data.byte_count & INLINE_SEG != 0 {
            return Err(Error::Invalid {
                what: "data segment",
                reason: "byte_count bit 31 is the inline flag",
            });
        }
        let ctrl = CtrlSeg {
            ds: SINGLE_DATA_WQE_DS as u8,
            ..ctrl
        };
        ctrl.check()?;
        // The control segment's reserved bytes and the padding after the 5 DS are zero.
        *b = [0u8; SINGLE_DATA_WQE_LEN];
        let av_end = CTRL_SEG_LEN + DATAGRAM_SEG_LEN;
        ctrl.put(&mut b[..CTRL_SEG_LEN]);
        b[CTRL_SEG_LEN..av_end].copy_from_slice(av);
        data.put(&mut b[av_end..av_end + DATA_SEG_LEN]);
        Ok(())
    }
}

/// DS count of a UD send WQE with one data segment.
pub const SINGLE_DATA_WQE_DS: usize =
    (CTRL_SEG_LEN + DATAGRAM_SEG_LEN + DATA_SEG_LEN) / SEND_WQE_DS;

/// Bytes (whole basic blocks) of a UD send WQE with one data segment.
pub const SINGLE_DATA_WQE_LEN: usize =
    (SINGLE_DATA_WQE_DS * SEND_WQE_DS).div_ceil(SEND_WQE_BB) * SEND_WQE_BB;

/// A gather entry of a send WQE, borrowed from the WQE's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GatherRef<'a> {
    /// A data segment (an address to read).
    Data(DataSeg),
    /// Inline data.
    Inline(&'a [u8]),
}

/// The gather entries of a send WQE ([`UdSendWqe::parse_in_place`]).
#[derive(Debug, Clone)]
pub struct GatherIter<'a> {
    /// The WQE, cut at its DS count.
    buf: &'a [u8],
    at: usize,
}

impl<'a> Iterator for GatherIter<'a> {
    type Item = Result<GatherRef<'a>>;

    fn next(&mut self) -> Option<Self::Item> {
        let (buf, at, len) = (self.buf, self.at, self.buf.len());
        if at >= len {
            return None;
        }
        if at + 4 > len {
            self.at = len;
            return Some(Err(Error::Invalid {
                what: "send WQE",
                reason: "a gather entry runs past the WQE's DS count",
            }));
        }
        let bc = be32(buf, at);
        if bc & INLINE_SEG != 0 {
            let n = (bc & !INLINE_SEG) as usize;
            let end = at + 4 + n;
            if end > len {
                self.at = len;
                return Some(Err(Error::Invalid {
                    what: "inline segment",
                    reason: "inline data runs past the WQE's DS count",
                }));
            }
            self.at = end.next_multiple_of(SEND_WQE_DS);
            Some(Ok(GatherRef::Inline(&buf[at + 4..end])))
        } else {
            match DataSeg::decode(&buf[at..len]) {
                Ok(d) => {
                    self.at = at + DATA_SEG_LEN;
                    Some(Ok(GatherRef::Data(d)))
                }
                Err(e) => {
                    self.at = len;
                    Some(Err(e))
                }
            }
        }
    }
}

/// Builds a receive WQE of `max_sge` data segments: the given entries, then (if fewer) the
/// terminator with key `terminator_key`, then zeros.
pub fn recv_wqe(sges: &[DataSeg], max_sge: usize, terminator_key: u32) -> Result<Vec<u8>> {
    if sges.len() > max_sge {
        return Err(Error::Invalid {
            what: "receive WQE",
            reason: "more scatter entries than the RQ allows",
        });
    }
    let mut b = vec![0u8; max_sge * DATA_SEG_LEN];
    for (i, s) in sges.iter().enumerate() {
        b[i * DATA_SEG_LEN..(i + 1) * DATA_SEG_LEN].copy_from_slice(&s.to_bytes());
    }
    if sges.len() < max_sge {
        let i = sges.len();
        b[i * DATA_SEG_LEN..(i + 1) * DATA_SEG_LEN]
            .copy_from_slice(&DataSeg::terminator(terminator_key).to_bytes());
    }
    Ok(b)
}

/// Parses a receive WQE: data segments up to the terminator (key `terminator_key`) or the end
/// of `buf`.
pub fn parse_recv_wqe(buf: &[u8], terminator_key: u32) -> Result<Vec<DataSeg>> {
    let mut out = Vec::new();
    for chunk in buf.chunks_exact(DATA_SEG_LEN) {
        let s = DataSeg::decode(chunk)?;
        if s.is_terminator(terminator_key) {
            break;
        }
        out.push(s);
    }
    Ok(out)
}

//! The 64-byte CQE (`struct mlx5_cqe64`) and its error form (`struct mlx5_err_cqe`), CQE
//! opcodes, and the ownership rule of a CQ ring.

use core::fmt;

use crate::error::Result;
use crate::mlx5::bits::need;
use crate::mlx5::syndrome::{CqeSyndrome, WcError};

/// Size of a CQE.
pub const CQE_SIZE: usize = 64;
/// Offset of the 64-byte CQE inside a 128-byte CQE slot.
pub const CQE128_OFFSET: usize = 64;
/// The `op_own` byte the driver writes into every CQE before use: opcode INVALID, owner 0.
pub const INITIAL_OP_OWN: u8 = 0xf0;

/// Byte offsets inside a CQE.
pub mod off {
    /// `ml_path`: DLID path bits \[6:0\].
    pub const ML_PATH: usize = 0x11;
    /// `slid` (BE16).
    pub const SLID: usize = 0x16;
    /// `flags_rqpn` (BE32): \[29:28\] GRH/L3 indication, \[27:24\] SL, \[23:0\] source QPN.
    pub const FLAGS_RQPN: usize = 0x18;
    /// `srqn` (BE32): \[23:0\] SRQ number / user index.
    pub const SRQN: usize = 0x20;
    /// Immediate data / invalidated rkey / P_Key (BE32).
    pub const IMM_INVAL_PKEY: usize = 0x24;
    /// `byte_cnt` (BE32).
    pub const BYTE_CNT: usize = 0x2c;
    /// `timestamp_h` (BE32), followed by `timestamp_l`.
    pub const TIMESTAMP: usize = 0x30;
    /// Error CQE: `hw_err_synd` (UCX/DOCA headers only; reserved in kernel and rdma-core).
    pub const HW_ERR_SYND: usize = 0x34;
    /// Error CQE: `hw_synd_type` (UCX/DOCA headers only).
    pub const HW_SYND_TYPE: usize = 0x35;
    /// Error CQE: `vendor_err_synd`.
    pub const VENDOR_ERR_SYND: usize = 0x36;
    /// Error CQE: `syndrome`.
    pub const SYNDROME: usize = 0x37;
    /// `sop_drop_qpn` / `s_wqe_opcode_qpn` (BE32): \[31:24\] send WQE opcode, \[23:0\] QPN.
    pub const SOP_DROP_QPN: usize = 0x38;
    /// `wqe_counter` (BE16).
    pub const WQE_COUNTER: usize = 0x3c;
    /// `signature`.
    pub const SIGNATURE: usize = 0x3e;
    /// `op_own`: \[7:4\] opcode, \[3:2\] format, bit 0 owner.
    pub const OP_OWN: usize = 0x3f;
}

/// CQE opcode (`MLX5_CQE_*`, `op_own >> 4`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CqeOpcode(pub u8);

impl CqeOpcode {
    /// Send (requester) completion.
    pub const REQ: Self = Self(0);
    /// RDMA write with immediate received.
    pub const RESP_WR_IMM: Self = Self(1);
    /// Send received.
    pub const RESP_SEND: Self = Self(2);
    /// Send with immediate received.
    pub const RESP_SEND_IMM: Self = Self(3);
    /// Send with invalidate received.
    pub const RESP_SEND_INV: Self = Self(4);
    /// CQ resize.
    pub const RESIZE_CQ: Self = Self(5);
    /// Signature error.
    pub const SIG_ERR: Self = Self(12);
    /// Requester error.
    pub const REQ_ERR: Self = Self(13);
    /// Responder error.
    pub const RESP_ERR: Self = Self(14);
    /// Not written by hardware (the initial value).
    pub const INVALID: Self = Self(15);

    /// Every named opcode.
    pub const ALL: [Self; 10] = [
        Self::REQ,
        Self::RESP_WR_IMM,
        Self::RESP_SEND,
        Self::RESP_SEND_IMM,
        Self::RESP_SEND_INV,
        Self::RESIZE_CQ,
        Self::SIG_ERR,
        Self::REQ_ERR,
        Self::RESP_ERR,
        Self::INVALID,
    ];

    /// The `MLX5_CQE_*` suffix, or `None`.
    pub fn name(self) -> Option<&'static str> {
        Some(match self.0 {
            0 => "REQ",
            1 => "RESP_WR_IMM",
            2 => "RESP_SEND",
            3 => "RESP_SEND_IMM",
            4 => "RESP_SEND_INV",
            5 => "RESIZE_CQ",
            12 => "SIG_ERR",
            13 => "REQ_ERR",
            14 => "RESP_ERR",
            15 => "INVALID",
            _ => return None,
        })
    }
}

impl fmt::Display for CqeOpcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.name().unwrap_or("UNKNOWN"), self.0)
    }
}

/// True if the CQE at ring index `index` of a ring of `nent` entries (a power of two) belongs
/// to software (`get_sw_cqe`): not INVALID and the owner bit equals the wrap parity
/// `!!(index & nent)`.
pub fn sw_owned(op_own: u8, index: u32, nent: u32) -> bool {
    (op_own >> 4) != CqeOpcode::INVALID.0 && (op_own & 1 != 0) == (index & nent != 0)
}

/// The owner bit hardware writes for ring index `index` (the wrap parity).
pub fn hw_owner_bit(index: u32, nent: u32) -> bool {
    index & nent != 0
}

/// A requester (send) completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ReqCqe {
    /// Opcode of the completed send WQE (`sop_drop_qpn >> 24`).
    pub wqe_opcode: u8,
    /// Bytes (RDMA read / atomic responses).
    pub byte_cnt: u32,
    /// Completion timestamp.
    pub timestamp: u64,
}

/// A responder (receive) completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RespCqe {
    /// Bytes received (including the 40-byte GRH area on UD).
    pub byte_cnt: u32,
    /// Source QPN (`flags_rqpn & 0xffffff`).
    pub src_qpn: u32,
    /// SL (`flags_rqpn >> 24 & 0xf`).
    pub sl: u8,
    /// GRH/L3 indication (`flags_rqpn >> 28 & 3`); non-zero means a GRH is present.
    pub l3_hdr: u8,
    /// Source LID.
    pub slid: u16,
    /// DLID path bits.
    pub ml_path: u8,
    /// Immediate data, invalidated rkey, or (QP1) the P_Key in the low 16 bits.
    pub imm_inval_pkey: u32,
    /// SRQ number / user index (`srqn & 0xffffff`).
    pub srqn: u32,
    /// Completion timestamp.
    pub timestamp: u64,
    /// Drop counter byte (`sop_drop_qpn >> 24`).
    pub drop_count: u8,
}

impl RespCqe {
    /// A GRH precedes the payload.
    pub fn has_grh(&self) -> bool {
        grh_present(self.l3_hdr)
    }

    /// The P_Key a QP1 receive carries.
    pub fn pkey(&self) -> u16 {
        pkey_of(self.imm_inval_pkey)
    }
}

/// Whether an `l3_hdr` value says a GRH precedes the payload (any non-zero one does).
fn grh_present(l3_hdr: u8) -> bool {
    l3_hdr != 0
}

/// The P_Key a QP1 receive carries: the low 16 bits of `imm_inval_pkey`.
fn pkey_of(imm_inval_pkey: u32) -> u16 {
    (imm_inval_pkey & 0xffff) as u16
}

/// An error completion (`struct mlx5_err_cqe`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ErrCqe {
    /// The syndrome.
    pub syndrome: CqeSyndrome,
    /// Vendor syndrome (becomes `wc.vendor_err`).
    pub vendor_err: u8,
    /// Opcode of the failed send WQE (`s_wqe_opcode_qpn >> 24`).
    pub wqe_opcode: u8,
    /// `srqn` (BE32 at 0x20).
    pub srqn: u32,
    /// Bytes 0x34/0x35 (`hw_err_synd`, `hw_synd_type` in UCX headers; reserved upstream).
    pub hw_err_synd: u8,
    /// See `hw_err_synd`.
    pub hw_synd_type: u8,
}

impl ErrCqe {
    /// The work-completion error it reports.
    pub fn wc_error(&self) -> WcError {
        WcError::from_cqe(self.syndrome, self.vendor_err)
    }
}

/// The part of a CQE that depends on its opcode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CqeBody {
    /// REQ.
    Requester(ReqCqe),
    /// RESP_WR_IMM, RESP_SEND, RESP_SEND_IMM, RESP_SEND_INV.
    Responder(RespCqe),
    /// REQ_ERR, RESP_ERR.
    Error(ErrCqe),
    /// RESIZE_CQ, SIG_ERR, INVALID and undefined opcodes: the raw 64 bytes. Boxed: these are
    /// rare, and inline they would make every `Cqe` (moved on each completion) 80 bytes
    /// instead of 48.
    Other(Box<[u8; CQE_SIZE]>),
}

/// A decoded CQE.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cqe {
    /// Opcode.
    pub opcode: CqeOpcode,
    /// CQE format (`op_own >> 2 & 3`; 0 = normal, 3 = compressed).
    pub format: u8,
    /// Owner bit.
    pub owner: bool,
    /// QPN (`sop_drop_qpn & 0xffffff`).
    pub qpn: u32,
    /// Index of the completed WQE (basic blocks for the SQ).
    pub wqe_counter: u16,
    /// Signature byte.
    pub signature: u8,
    /// Opcode-specific fields.
    pub body: CqeBody,
}

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn be64(b: &[u8], at: usize) -> u64 {
    (u64::from(be32(b, at)) << 32) | u64::from(be32(b, at + 4))
}

/// The fields of a 64-byte CQE entry, each decoded by its accessor where it lies (as
/// [`Cqe::from_entry`] reads them): a poll loop that needs a few of them reads those alone,
/// rather than building the whole [`Cqe`] and taking its parts out again. Every bit pattern
/// has a reading; which fields mean anything depends on the opcode (see [`CqeBody`]).
#[derive(Debug, Clone, Copy)]
pub struct CqeFields<'a>(pub &'a [u8; CQE_SIZE]);

impl CqeFields<'_> {
    /// Opcode (`op_own >> 4`).
    pub fn opcode(self) -> CqeOpcode {
        CqeOpcode(self.0[off::OP_OWN] >> 4)
    }

    /// CQE format (`op_own >> 2 & 3`; 0 = normal, 3 = compressed).
    pub fn format(self) -> u8 {
        (self.0[off::OP_OWN] >> 2) & 0x3
    }

    /// Owner bit.
    pub fn owner(self) -> bool {
        self.0[off::OP_OWN] & 1 != 0
    }

    /// QPN (`sop_drop_qpn & 0xffffff`).
    pub fn qpn(self) -> u32 {
        be32(self.0, off::SOP_DROP_QPN) & 0x00ff_ffff
    }

    /// The top byte of `sop_drop_qpn`: the send WQE's opcode (requester and error CQEs) or
    /// the drop counter (responder CQEs).
    pub fn sop_top(self) -> u8 {
        self.0[off::SOP_DROP_QPN]
    }

    /// Index of the completed WQE.
    pub fn wqe_counter(self) -> u16 {
        be16(self.0, off::WQE_COUNTER)
    }

    /// `byte_cnt`.
    pub fn byte_cnt(self) -> u32 {
        be32(self.0, off::BYTE_CNT)
    }

    /// Responder: source QPN (`flags_rqpn & 0xffffff`).
    pub fn src_qpn(self) -> u32 {
        be32(self.0, off::FLAGS_RQPN) & 0x00ff_ffff
    }

    /// Responder: SL (`flags_rqpn >> 24 & 0xf`).
    pub fn sl(self) -> u8 {
        self.0[off::FLAGS_RQPN] & 0xf
    }

    /// Responder: GRH/L3 indication (`flags_rqpn >> 28 & 3`); non-zero means a GRH is present.
    pub fn l3_hdr(self) -> u8 {
        (self.0[off::FLAGS_RQPN] >> 4) & 0x3
    }

    /// Responder: source LID.
    pub fn slid(self) -> u16 {
        be16(self.0, off::SLID)
    }

    /// Responder: DLID path bits byte.
    pub fn ml_path(self) -> u8 {
        self.0[off::ML_PATH]
    }

    /// Responder: immediate data, invalidated rkey, or (QP1) the P_Key in the low 16 bits.
    pub fn imm_inval_pkey(self) -> u32 {
        be32(self.0, off::IMM_INVAL_PKEY)
    }

    /// Responder: a GRH precedes the payload ([`CqeFields::l3_hdr`] non-zero), as
    /// [`RespCqe::has_grh`] reads it.
    pub fn has_grh(self) -> bool {
        grh_present(self.l3_hdr())
    }

    /// Responder: the P_Key a QP1 receive carries (the low 16 bits of
    /// [`CqeFields::imm_inval_pkey`]), as [`RespCqe::pkey`] reads it.
    pub fn pkey(self) -> u16 {
        pkey_of(self.imm_inval_pkey())
    }

    /// The `srqn` word, whole (a responder's SRQ number is its low 24 bits).
    pub fn srqn(self) -> u32 {
        be32(self.0, off::SRQN)
    }

    /// Completion timestamp.
    pub fn timestamp(self) -> u64 {
        be64(self.0, off::TIMESTAMP)
    }

    /// Error CQE: the syndrome.
    pub fn syndrome(self) -> CqeSyndrome {
        CqeSyndrome(self.0[off::SYNDROME])
    }

    /// Error CQE: the vendor syndrome.
    pub fn vendor_err(self) -> u8 {
        self.0[off::VENDOR_ERR_SYND]
    }
}

impl Cqe {
    /// Decodes the first 64 bytes of `buf` (a CQE the device wrote: every value is reported
    /// as found, nothing is trusted).
    pub fn decode(buf: &[u8]) -> Result<Self> {
        need("CQE", buf, CQE_SIZE)?;
        let mut entry = [0u8; CQE_SIZE];
        entry.copy_from_slice(&buf[..CQE_SIZE]);
        Ok(Self::from_entry(&entry))
    }

    /// Decodes a whole 64-byte entry. It cannot fail (every bit pattern has a reading), so a
    /// poll loop that already holds the entry skips the length check and the `Result`. Each
    /// field is read through [`CqeFields`], which a poll loop that needs only a few of them
    /// uses alone.
    pub fn from_entry(b: &[u8; CQE_SIZE]) -> Self {
        let f = CqeFields(b);
        let opcode = f.opcode();
        let body = match opcode {
            CqeOpcode::REQ => CqeBody::Requester(ReqCqe {
                wqe_opcode: f.sop_top(),
                byte_cnt: f.byte_cnt(),
                timestamp: f.timestamp(),
            }),
            CqeOpcode::RESP_WR_IMM
            | CqeOpcode::RESP_SEND
            | CqeOpcode::RESP_SEND_IMM
            | CqeOpcode::RESP_SEND_INV => CqeBody::Responder(RespCqe {
                byte_cnt: f.byte_cnt(),
                src_qpn: f.src_qpn(),
                sl: f.sl(),
                l3_hdr: f.l3_hdr(),
                slid: f.slid(),
                ml_path: f.ml_path(),
                imm_inval_pkey: f.imm_inval_pkey(),
                srqn: f.srqn() & 0x00ff_ffff,
                timestamp: f.timestamp(),
                drop_count: f.sop_top(),
            }),
            CqeOpcode::REQ_ERR | CqeOpcode::RESP_ERR => CqeBody::Error(ErrCqe {
                syndrome: f.syndrome(),
                vendor_err: f.vendor_err(),
                wqe_opcode: f.sop_top(),
                srqn: f.srqn(),
                hw_err_synd: b[off::HW_ERR_SYND],
                hw_synd_type: b[off::HW_SYND_TYPE],
            }),
            _ => CqeBody::Other(Box::new(*b)),
        };
        Cqe {
            opcode,
            format: f.format(),
            owner: f.owner(),
            qpn: f.qpn(),
            wqe_counter: f.wqe_counter(),
            signature: b[off::SIGNATURE],
            body,
        }
    }

    /// Emits the 64 bytes (how the simulator writes a CQE). The opcode field is taken from
    /// `opcode`; the body's fields go where its form puts them.
    pub fn encode(&self) -> [u8; CQE_SIZE] {
        let mut b = [0u8; CQE_SIZE];
        self.encode_into(&mut b);
        b
    }

    /// [`encode`](Self::encode) into `b` (every byte of it is written): a device that
    /// writes a CQE per completion builds it where it is sent from, with no copy of its own.
    #[inline]
    pub fn encode_into(&self, b: &mut [u8; CQE_SIZE]) {
        *b = [0u8; CQE_SIZE];
        let put32 = |b: &mut [u8; CQE_SIZE], at: usize, v: u32| {
            b[at..at + 4].copy_from_slice(&v.to_be_bytes());
        };
        let mut top = 0u8;
        match &self.body {
            CqeBody::Other(raw) => b.copy_from_slice(&raw[..]),
            CqeBody::Requester(r) => {
                top = r.wqe_opcode;
                put32(b, off::BYTE_CNT, r.byte_cnt);
                b[off::TIMESTAMP..off::TIMESTAMP + 8].copy_from_slice(&r.timestamp.to_be_bytes());
            }
            CqeBody::Responder(r) => {
                top = r.drop_count;
                put32(b, off::BYTE_CNT, r.byte_cnt);
                let fr = (u32::from(r.l3_hdr & 3) << 28)
                    | (u32::from(r.sl & 0xf) << 24)
                    | (r.src_qpn & 0x00ff_ffff);
                put32(b, off::FLAGS_RQPN, fr);
                b[off::SLID..off::SLID + 2].copy_from_slice(&r.slid.to_be_bytes());
                b[off::ML_PATH] = r.ml_path;
                put32(b, off::IMM_INVAL_PKEY, r.imm_inval_pkey);
                put32(b, off::SRQN, r.srqn & 0x00ff_ffff);
                b[off::TIMESTAMP..off::TIMESTAMP + 8].copy_from_slice(&r.timestamp.to_be_bytes());
            }
            CqeBody::Error(e) => {
                top = e.wqe_opcode;
                b[off::SYNDROME] = e.syndrome.0;
                b[off::VENDOR_ERR_SYND] = e.vendor_err;
                b[off::HW_ERR_SYND] = e.hw_err_synd;
                b[off::HW_SYND_TYPE] = e.hw_synd_type;
                put32(b, off::SRQN, e.srqn);
            }
        }
        if matches!(self.body, CqeBody::Other(_)) {
            // Keep the raw top byte of an undecoded CQE.
            top = (be32(b, off::SOP_DROP_QPN) >> 24) as u8;
        }
        put32(
            b,
            off::SOP_DROP_QPN,
            (u32::from(top) << 24) | (self.qpn & 0x00ff_ffff),
        );
        b[off::WQE_COUNTER..off::WQE_COUNTER + 2].copy_from_slice(&self.wqe_counter.to_be_bytes());
        b[off::SIGNATURE] = self.signature;
        b[off::OP_OWN] = (self.opcode.0 << 4)
            | ((self.format & 3) << 2)
            | (b[off::OP_OWN] & 0x2)
            | u8::from(self.owner);
    }

    /// The work-completion error of an error CQE, `None` otherwise.
    pub fn wc_error(&self) -> Option<WcError> {
        match &self.body {
            CqeBody::Error(e) => Some(e.wc_error()),
            _ => None,
        }
    }
}

impl fmt::Display for Cqe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "CQE opcode {} format {} owner {} qpn {:#x} wqe_counter {} signature {:#04x}",
            self.opcode,
            self.format,
            u8::from(self.owner),
            self.qpn,
            self.wqe_counter,
            self.signature
        )?;
        match &self.body {
            CqeBody::Requester(r) => write!(
                f,
                "\n  requester: wqe_opcode {:#04x} byte_cnt {} timestamp {:#x}",
                r.wqe_opcode, r.byte_cnt, r.timestamp
            ),
            CqeBody::Responder(r) => write!(
                f,
                "\n  responder: byte_cnt {} src_qpn {:#x} slid {:#x} sl {} grh {} ml_path {:#x} \
                 imm/inval/pkey {:#010x} srqn {:#x} timestamp {:#x}",
                r.byte_cnt,
                r.src_qpn,
                r.slid,
                r.sl,
                u8::from(r.has_grh()),
                r.ml_path,
                r.imm_inval_pkey,
                r.srqn,
                r.timestamp
            ),
            CqeBody::Error(e) => write!(
                f,
                "\n  error: syndrome {} vendor_err {:#04x} wqe_opcode {:#04x} -> {}",
                e.syndrome,
                e.vendor_err,
                e.wqe_opcode,
                e.wc_error().status
            ),
            CqeBody::Other(_) => write!(f, "\n  (no decoded body for this opcode)"),
        }
    }
}

//! Completion queues (`cq.c`): a ring of 64-byte CQEs initialised INVALID, the ownership rule,
//! the doorbell record (consumer index and arm word), the arm doorbell, and the first check of
//! every CQE the device wrote: its format and opcode. What a CQE claims about a work request
//! (QPN, WQE counter, byte count) is checked against the QP in `qp.rs`.

use dma::{Access, DmaLease};
use firmware_cmds::mlx5::cqc::Cqc;
use firmware_cmds::mlx5::cqe::{self, CQE_SIZE, CqeFields, CqeOpcode, INITIAL_OP_OWN};
use firmware_cmds::mlx5::doorbell::{CqArm, CqArmCmd, DB_RECORD_LEN, UAR_CQ_DOORBELL};
use firmware_cmds::mlx5::ops::cq::{CreateCq, DestroyCq};
use firmware_cmds::mlx5::ops::pas::ADAPTER_PAGE_SIZE;
use firmware_cmds::mlx5::syndrome::CqeSyndrome;

use crate::barrier;
use crate::error::DriverError;
use crate::mmio::Mmio;

use super::dev::Dev;
use super::eq::pas_of;

/// What a receive CQE reports that a work completion carries (the fields of
/// [`RespCqe`](firmware_cmds::mlx5::cqe::RespCqe) the MAD path reads: a poll batch moves
/// this, not the whole decode).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RecvCqe {
    /// Bytes received (including the 40-byte GRH area on UD).
    pub(crate) byte_cnt: u32,
    /// Source QPN.
    pub(crate) src_qpn: u32,
    /// Source LID.
    pub(crate) slid: u16,
    /// The low 16 bits of the immediate / P_Key word (QP1: the P_Key).
    pub(crate) pkey: u16,
    /// SL.
    pub(crate) sl: u8,
    /// DLID path bits byte.
    pub(crate) ml_path: u8,
    /// A GRH precedes the payload.
    pub(crate) grh: bool,
}

/// What a CQE reports, once its format and opcode were accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CqeKind {
    /// REQ: a send completed.
    SendOk,
    /// REQ_ERR: a send failed.
    SendErr {
        syndrome: CqeSyndrome,
        vendor_err: u8,
    },
    /// RESP_SEND / RESP_SEND_IMM: a datagram arrived.
    Recv(RecvCqe),
    /// RESP_ERR: a receive failed (or was flushed).
    RecvErr {
        syndrome: CqeSyndrome,
        vendor_err: u8,
    },
}

/// A CQE whose format and opcode are acceptable for a special QP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ParsedCqe {
    pub(crate) qpn: u32,
    pub(crate) wqe_counter: u16,
    pub(crate) kind: CqeKind,
}

/// Check the parts of a CQE that do not depend on a QP: the format (no compression is
/// enabled, so it must be 0) and the opcode (only the ones a UD send or receive produces).
/// Reads only the fields that the opcode's completion carries.
pub(crate) fn parse(raw: &[u8; CQE_SIZE]) -> Result<ParsedCqe, String> {
    let c = CqeFields(raw);
    if c.format() != 0 {
        return Err(format!(
            "CQE format {} (compressed or mini CQEs) on a CQ created without compression",
            c.format()
        ));
    }
    let kind = match c.opcode() {
        CqeOpcode::REQ => CqeKind::SendOk,
        CqeOpcode::RESP_SEND | CqeOpcode::RESP_SEND_IMM => CqeKind::Recv(RecvCqe {
            byte_cnt: c.byte_cnt(),
            src_qpn: c.src_qpn(),
            slid: c.slid(),
            pkey: c.pkey(),
            sl: c.sl(),
            ml_path: c.ml_path(),
            grh: c.has_grh(),
        }),
        CqeOpcode::REQ_ERR => CqeKind::SendErr {
            syndrome: c.syndrome(),
            vendor_err: c.vendor_err(),
        },
        CqeOpcode::RESP_ERR => CqeKind::RecvErr {
            syndrome: c.syndrome(),
            vendor_err: c.vendor_err(),
        },
        op => {
            return Err(format!(
                "CQE opcode {op} cannot complete a UD send or receive (QPN {:#x}, wqe_counter {})",
                c.qpn(),
                c.wqe_counter()
            ));
        }
    };
    Ok(ParsedCqe {
        qpn: c.qpn(),
        wqe_counter: c.wqe_counter(),
        kind,
    })
}

/// A CQ.
#[derive(Debug)]
pub(crate) struct Cq {
    buf: DmaLease,
    db: DmaLease,
    nent: u32,
    cons_index: u32,
    pub(crate) cqn: u32,
    uar_base: u64,
    /// Arm sequence number last armed with, if armed since the last completion event.
    armed_sn: Option<u32>,
}

impl Cq {
    /// CREATE_CQ of at least `wanted` 64-byte CQEs reporting to EQ `c_eqn`.
    pub(crate) fn create(
        dev: &Dev,
        wanted: u32,
        c_eqn: u8,
        uar: u32,
        uar_base: u64,
        log_max_cq_sz: u32,
    ) -> Result<Cq, DriverError> {
        let nent = wanted.max(2).next_power_of_two();
        if nent.trailing_zeros() > log_max_cq_sz.min(24) {
            return Err(DriverError::DeviceUnsupported {
                what: format!("a CQ of {nent} entries"),
                hint: format!(
                    "the device allows 2^{log_max_cq_sz}; open the HCA with smaller queue depths"
                ),
            });
        }
        let bytes = (nent as usize * CQE_SIZE).max(ADAPTER_PAGE_SIZE as usize);
        let buf = dev
            .pool
            .lease(bytes, ADAPTER_PAGE_SIZE as usize, Access::ReadWrite)?;
        for i in 0..nent as usize {
            buf.write_u8(i * CQE_SIZE + cqe::off::OP_OWN, INITIAL_OP_OWN)?;
        }
        let db = dev
            .pool
            .lease(DB_RECORD_LEN, DB_RECORD_LEN, Access::ReadWrite)?;
        let create = CreateCq {
            ctx: Cqc {
                cqe_sz: firmware_cmds::mlx5::cqc::cqe_sz::BYTES_64,
                log_cq_size: nent.trailing_zeros() as u8,
                uar_page: uar,
                c_eqn: u32::from(c_eqn),
                log_page_size: 0,
                dbr_addr: db.iova(),
                ..Cqc::default()
            },
            pas: pas_of(&buf),
        };
        barrier::to_device();
        let out = match dev.exec(&create) {
            Ok(out) => out,
            Err(e) => {
                dev.release_or_bury(&e, [buf, db]);
                return Err(e);
            }
        };
        tracing::debug!(cqn = out.cqn, nent, "CQ created");
        Ok(Cq {
            buf,
            db,
            nent,
            cons_index: 0,
            cqn: out.cqn,
            uar_base,
            armed_sn: None,
        })
    }

    /// Where the ring is: buffer IOVA, entries, the next index software reads.
    pub(crate) fn position(&self) -> (u64, u32, u32) {
        (self.buf.iova(), self.nent, self.cons_index)
    }

    /// The next CQE software owns, consumed (`get_sw_cqe` then `++cons_index`).
    pub(crate) fn next(&mut self) -> Option<[u8; CQE_SIZE]> {
        let idx = (self.cons_index & (self.nent - 1)) as usize;
        let op_own = self.buf.read_u8(idx * CQE_SIZE + cqe::off::OP_OWN).ok()?;
        if !cqe::sw_owned(op_own, self.cons_index, self.nent) {
            return None;
        }
        barrier::from_device();
        let mut raw = [0u8; CQE_SIZE];
        self.buf.read(idx * CQE_SIZE, &mut raw).ok()?;
        self.cons_index = self.cons_index.wrapping_add(1);
        Some(raw)
    }

    /// Tell the device how far software has consumed (`mlx5_cq_set_ci`).
    pub(crate) fn set_ci(&self) {
        let _ = self.db.write_u32_be(0, self.cons_index & 0x00ff_ffff);
    }

    /// Arm for an event on the next completion (`mlx5_cq_arm`) unless already armed with the
    /// current sequence number `events` (the completion events seen so far).
    pub(crate) fn arm(&mut self, bar: &Mmio, events: u32) {
        if self.armed_sn == Some(events) {
            return;
        }
        let arm = CqArm {
            sn: (events & 3) as u8,
            cmd: CqArmCmd::NextCompletion,
            ci: self.cons_index,
        };
        let _ = self.db.write_u32_be(4, arm.word());
        barrier::to_device();
        bar.write64(
            self.uar_base + UAR_CQ_DOORBELL as u64,
            arm.uar_doorbell(self.cqn),
        );
        self.armed_sn = Some(events);
    }

    /// Force the next `arm` to ring (after consuming CQEs the device may need to re-arm).
    pub(crate) fn disarm(&mut self) {
        self.armed_sn = None;
    }

    /// DESTROY_CQ; buffers wait for the quiesce if the command failed.
    pub(crate) fn destroy(self, dev: &Dev) -> Result<(), DriverError> {
        match dev.exec(&DestroyCq { cqn: self.cqn }) {
            Ok(_) => Ok(()),
            Err(e) => {
                dev.bury(self.buf);
                dev.bury(self.db);
                Err(e)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use firmware_cmds::mlx5::cqe::{Cqe, CqeBody, ErrCqe, ReqCqe, RespCqe};

    fn image(opcode: CqeOpcode, body: CqeBody) -> [u8; CQE_SIZE] {
        Cqe {
            opcode,
            format: 0,
            owner: false,
            qpn: 0x1234,
            wqe_counter: 7,
            signature: 0,
            body,
        }
        .encode()
    }

    #[test]
    fn send_and_receive_opcodes_are_accepted() {
        let p = parse(&image(
            CqeOpcode::REQ,
            CqeBody::Requester(ReqCqe::default()),
        ))
        .unwrap();
        assert_eq!(p.kind, CqeKind::SendOk);
        assert_eq!((p.qpn, p.wqe_counter), (0x1234, 7));
        let r = RespCqe {
            byte_cnt: 296,
            src_qpn: 1,
            ..RespCqe::default()
        };
        let p = parse(&image(CqeOpcode::RESP_SEND, CqeBody::Responder(r))).unwrap();
        assert!(matches!(p.kind, CqeKind::Recv(rr) if rr.byte_cnt == 296));
        let r = RespCqe {
            byte_cnt: 296,
            src_qpn: 0x00ab_cdef,
            sl: 0xa,
            l3_hdr: 2,
            slid: 0x1234,
            ml_path: 0x85,
            imm_inval_pkey: 0xdead_7fff,
            ..RespCqe::default()
        };
        let p = parse(&image(CqeOpcode::RESP_SEND_IMM, CqeBody::Responder(r))).unwrap();
        assert_eq!(
            p.kind,
            CqeKind::Recv(RecvCqe {
                byte_cnt: 296,
                src_qpn: 0x00ab_cdef,
                slid: 0x1234,
                pkey: 0x7fff,
                sl: 0xa,
                ml_path: 0x85,
                grh: true,
            })
        );
        let e = ErrCqe {
            syndrome: CqeSyndrome(0x13),
            vendor_err: 0x77,
            wqe_opcode: 0x0a,
            srqn: 0,
            hw_err_synd: 0,
            hw_synd_type: 0,
        };
        let p = parse(&image(CqeOpcode::REQ_ERR, CqeBody::Error(e))).unwrap();
        assert_eq!(
            p.kind,
            CqeKind::SendErr {
                syndrome: CqeSyndrome(0x13),
                vendor_err: 0x77
            }
        );
    }

    #[test]
    fn unknown_and_foreign_opcodes_are_rejected() {
        for op in [1u8, 4, 5, 6, 7, 8, 9, 10, 11, 12] {
            let mut raw = [0u8; CQE_SIZE];
            raw[cqe::off::OP_OWN] = op << 4;
            let err = parse(&raw).unwrap_err();
            assert!(err.contains("opcode"), "{op}: {err}");
        }
    }

    #[test]
    fn a_compressed_format_is_rejected() {
        let mut raw = image(CqeOpcode::REQ, CqeBody::Requester(ReqCqe::default()));
        raw[cqe::off::OP_OWN] |= 3 << 2;
        assert!(parse(&raw).unwrap_err().contains("format"));
    }
}

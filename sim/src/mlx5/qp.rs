//! Queue pairs of the kinds the model runs (QP0, QP1 and UD): their context, where their
//! WQEs live in the driver's buffer (receive queue first, then the send queue), the device's
//! consumer counters, and the state machine of the modify-QP commands.

use dma::SimIommu;
use firmware_cmds::mlx5::doorbell::{QpDbRecord, RCV_DBR, SND_DBR};
use firmware_cmds::mlx5::opcode::Opcode;
use firmware_cmds::mlx5::qpc::{QpServiceType, QpState};
use firmware_cmds::mlx5::wqe::SEND_WQE_BB;

use super::buffer::PageList;

/// One QP.
#[derive(Debug)]
pub(crate) struct Qp {
    /// QP number.
    pub qpn: u32,
    /// Service type: QP0, QP1 or UD.
    pub st: QpServiceType,
    /// State.
    pub state: QpState,
    /// Protection domain.
    pub pd: u32,
    /// UAR whose BlueFlame registers ring this QP's send doorbell.
    pub uar: u32,
    /// Send CQ (meaningful when `sq_log` is `Some`).
    pub cqn_snd: u32,
    /// Receive CQ (meaningful when `rq_log` is `Some`).
    pub cqn_rcv: u32,
    /// Buffer: receive queue at 0, send queue at `sq_offset`.
    pub buf: PageList,
    /// Doorbell record.
    pub dbr: u64,
    /// log2 of receive WQEs; `None` without a receive queue.
    pub rq_log: Option<u8>,
    /// log2 of the receive WQE stride in bytes.
    pub rq_stride_shift: u32,
    /// log2 of send basic blocks; `None` without a send queue.
    pub sq_log: Option<u8>,
    /// Byte offset of the send queue in the buffer.
    pub sq_offset: u64,
    /// The reserved lkey may be used.
    pub rlky: bool,
    /// Port (1-based; 0 until RST2INIT).
    pub port: u8,
    /// P_Key index.
    pub pkey_index: u16,
    /// Q_Key.
    pub qkey: u32,
    /// DETH source QPN (a GSI send QP sends as QP1).
    pub deth_sqpn: u32,
    /// User index reported in CQEs (`cqe_version` 1).
    pub user_index: u32,
    /// Device send consumer, in basic blocks (16 bits, as the doorbell record).
    pub sq_cc: u16,
    /// Device receive consumer, in WQEs (16 bits). A receive CQE carries it whole as its
    /// `wqe_counter` (not reduced to the ring index), which the driver checks against its own
    /// count.
    pub rq_cc: u16,
    /// The receive producer as last read from the doorbell record (it only moves forward,
    /// so while it is ahead of `rq_cc` the record need not be read again).
    pub rq_pc_seen: u16,
    /// The send producer as last read from the doorbell record, read again when `sq_cc`
    /// reaches it or a send doorbell rings (a doorbell is what tells the device to look).
    pub sq_pc_seen: u16,
    /// Send WQEs processed since creation (fault injection counts on this).
    pub sends: u64,
    /// Receive WQEs consumed since creation.
    pub recvs: u64,
}

impl Qp {
    /// Entries of the receive queue.
    pub(crate) fn rq_entries(&self) -> Option<u32> {
        self.rq_log.map(|l| 1u32 << l)
    }

    /// Basic blocks of the send queue.
    pub(crate) fn sq_bbs(&self) -> Option<u32> {
        self.sq_log.map(|l| 1u32 << l)
    }

    /// IOVA of receive WQE `index` (wrapped on the ring).
    pub(crate) fn rq_wqe_addr(&self, index: u16) -> Option<u64> {
        let n = self.rq_entries()?;
        let slot = u64::from(u32::from(index) & (n - 1));
        self.buf.addr(slot << self.rq_stride_shift)
    }

    /// IOVA of send basic block `index` (wrapped on the ring).
    pub(crate) fn sq_bb_addr(&self, index: u16) -> Option<u64> {
        let n = self.sq_bbs()?;
        let slot = u64::from(u32::from(index) & (n - 1));
        self.buf.addr(self.sq_offset + slot * SEND_WQE_BB as u64)
    }

    /// The doorbell record's counters, as the driver last wrote them.
    pub(crate) fn db_record(&self, iommu: &SimIommu) -> Option<QpDbRecord> {
        let mut b = [0u8; 8];
        iommu.read(self.dbr, &mut b).ok()?;
        QpDbRecord::decode(&b).ok()
    }

    /// Only the send counter (one 4-byte DMA read on the send path).
    pub(crate) fn sq_producer(&self, iommu: &SimIommu) -> Option<u16> {
        let v = iommu.read_u32_be(self.dbr + 4 * SND_DBR as u64).ok()?;
        Some(v as u16)
    }

    /// Only the receive counter.
    pub(crate) fn rq_producer(&self, iommu: &SimIommu) -> Option<u16> {
        let v = iommu.read_u32_be(self.dbr + 4 * RCV_DBR as u64).ok()?;
        Some(v as u16)
    }

    /// The QP receives packets in this state.
    pub(crate) fn receives(&self) -> bool {
        matches!(
            self.state,
            QpState::Rtr | QpState::Rts | QpState::Sqer | QpState::Sqd
        )
    }
}

/// The state a modify-QP command requires and the state it leads to; `None` for an opcode
/// that is not a transition the model runs. 2ERR and 2RST are accepted from any state.
pub(crate) fn transition(op: Opcode, from: QpState) -> Option<Result<QpState, ()>> {
    let (required, to): (&[QpState], QpState) = match op {
        Opcode::RST2INIT_QP => (&[QpState::Rst], QpState::Init),
        Opcode::INIT2RTR_QP => (&[QpState::Init], QpState::Rtr),
        Opcode::RTR2RTS_QP => (&[QpState::Rtr], QpState::Rts),
        Opcode::SQERR2RTS_QP => (&[QpState::Sqer], QpState::Rts),
        Opcode::QP_2ERR_QP => return Some(Ok(QpState::Err)),
        Opcode::QP_2RST_QP => return Some(Ok(QpState::Rst)),
        _ => return None,
    };
    Some(if required.contains(&from) {
        Ok(to)
    } else {
        Err(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transitions_follow_the_qp_state_machine() {
        use QpState as S;
        let t = |op, s| transition(op, s);
        assert_eq!(t(Opcode::RST2INIT_QP, S::Rst), Some(Ok(S::Init)));
        assert_eq!(t(Opcode::RST2INIT_QP, S::Init), Some(Err(())));
        assert_eq!(t(Opcode::INIT2RTR_QP, S::Init), Some(Ok(S::Rtr)));
        assert_eq!(t(Opcode::INIT2RTR_QP, S::Rst), Some(Err(())));
        assert_eq!(t(Opcode::RTR2RTS_QP, S::Rtr), Some(Ok(S::Rts)));
        assert_eq!(t(Opcode::RTR2RTS_QP, S::Rts), Some(Err(())));
        assert_eq!(t(Opcode::SQERR2RTS_QP, S::Sqer), Some(Ok(S::Rts)));
        assert_eq!(t(Opcode::SQERR2RTS_QP, S::Err), Some(Err(())));
        for s in QpState::ALL {
            assert_eq!(t(Opcode::QP_2ERR_QP, s), Some(Ok(S::Err)));
            assert_eq!(t(Opcode::QP_2RST_QP, s), Some(Ok(S::Rst)));
        }
        assert_eq!(t(Opcode::CREATE_QP, S::Rst), None);
    }
}

//! CQ context (`mlx5_ifc_cqc_bits`, 64 bytes), carried by CREATE_CQ, QUERY_CQ and MODIFY_CQ.

use crate::error::Result;
use crate::mlx5::bits::{Field, Field64, need};

/// Size of the context.
pub const CQC_LEN: usize = 0x40;

/// `cqe_sz` values (`MLX5_CQC_CQE_SZ_*`; `cqe_sz_to_mlx_sz`).
pub mod cqe_sz {
    /// 64-byte CQEs.
    pub const BYTES_64: u8 = 0;
    /// 128-byte CQEs (the 64-byte CQE sits in the second half).
    pub const BYTES_128: u8 = 1;
    /// 128-byte stride with padding (`CQE_STRIDE_128_PAD`).
    pub const BYTES_128_PAD: u8 = 2;
}

/// `st` values (`MLX5_CQC_ST_*`).
pub mod st {
    /// Armed for solicited completions only.
    pub const SOLICITED_NOTIFICATION_REQUEST_ARMED: u8 = 0x6;
    /// Armed for any completion.
    pub const NOTIFICATION_REQUEST_ARMED: u8 = 0x9;
    /// An event was generated; re-arm to get another.
    pub const FIRED: u8 = 0xa;
}

/// Field positions relative to the start of the context (mlx5_ifc.h `cqc`).
pub mod field {
    use super::{Field, Field64};
    /// `status` (0 OK, 9 overflow, 0xa write failure).
    pub const STATUS: Field = Field::new("status", 0x00, 4);
    /// `cqe_sz`.
    pub const CQE_SZ: Field = Field::new("cqe_sz", 0x08, 3);
    /// `cc`: collapsed CQ.
    pub const CC: Field = Field::new("cc", 0x0b, 1);
    /// `oi`: overrun ignore.
    pub const OI: Field = Field::new("oi", 0x0e, 1);
    /// `st`: arm state.
    pub const ST: Field = Field::new("st", 0x14, 4);
    /// `page_offset`.
    pub const PAGE_OFFSET: Field = Field::new("page_offset", 0x54, 6);
    /// `log_cq_size`: log2 of the number of CQEs.
    pub const LOG_CQ_SIZE: Field = Field::new("log_cq_size", 0x63, 5);
    /// `uar_page`: UAR whose doorbell arms this CQ.
    pub const UAR_PAGE: Field = Field::new("uar_page", 0x68, 24);
    /// `cq_period` (moderation, µs).
    pub const CQ_PERIOD: Field = Field::new("cq_period", 0x84, 12);
    /// `cq_max_count` (moderation, CQEs).
    pub const CQ_MAX_COUNT: Field = Field::new("cq_max_count", 0x90, 16);
    /// `c_eqn_or_apu_element`: the completion EQ number.
    pub const C_EQN: Field = Field::new("c_eqn_or_apu_element", 0xa0, 32);
    /// `log_page_size`: log2(page size) - 12.
    pub const LOG_PAGE_SIZE: Field = Field::new("log_page_size", 0xc3, 5);
    /// `last_notified_index`.
    pub const LAST_NOTIFIED_INDEX: Field = Field::new("last_notified_index", 0x108, 24);
    /// `last_solicit_index`.
    pub const LAST_SOLICIT_INDEX: Field = Field::new("last_solicit_index", 0x128, 24);
    /// `consumer_counter`.
    pub const CONSUMER_COUNTER: Field = Field::new("consumer_counter", 0x148, 24);
    /// `producer_counter`.
    pub const PRODUCER_COUNTER: Field = Field::new("producer_counter", 0x168, 24);
    /// `dbr_addr`: DMA address of the 8-byte CQ doorbell record.
    pub const DBR_ADDR: Field64 = Field64::new("dbr_addr", 0x1c0);
}

/// A CQ context.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Cqc {
    /// `status`.
    pub status: u8,
    /// CQE size code ([`cqe_sz`]).
    pub cqe_sz: u8,
    /// Collapsed CQ.
    pub cc: bool,
    /// Ignore overruns.
    pub oi: bool,
    /// Arm state ([`st`]).
    pub st: u8,
    /// `page_offset`.
    pub page_offset: u8,
    /// log2 of the number of CQEs.
    pub log_cq_size: u8,
    /// UAR index.
    pub uar_page: u32,
    /// Moderation period.
    pub cq_period: u16,
    /// Moderation count.
    pub cq_max_count: u16,
    /// Completion EQ number.
    pub c_eqn: u32,
    /// log2(buffer page size) - 12.
    pub log_page_size: u8,
    /// Query only.
    pub last_notified_index: u32,
    /// Query only.
    pub last_solicit_index: u32,
    /// Query only.
    pub consumer_counter: u32,
    /// Query only.
    pub producer_counter: u32,
    /// DMA address of the doorbell record.
    pub dbr_addr: u64,
}

impl Cqc {
    /// Writes the context into `ctx` (at least [`CQC_LEN`] bytes, zeroed by the caller).
    pub fn encode_into(&self, ctx: &mut [u8]) -> Result<()> {
        need("cqc", ctx, CQC_LEN)?;
        field::STATUS.set(ctx, self.status.into())?;
        field::CQE_SZ.set(ctx, self.cqe_sz.into())?;
        field::CC.set_bool(ctx, self.cc)?;
        field::OI.set_bool(ctx, self.oi)?;
        field::ST.set(ctx, self.st.into())?;
        field::PAGE_OFFSET.set(ctx, self.page_offset.into())?;
        field::LOG_CQ_SIZE.set(ctx, self.log_cq_size.into())?;
        field::UAR_PAGE.set(ctx, self.uar_page)?;
        field::CQ_PERIOD.set(ctx, self.cq_period.into())?;
        field::CQ_MAX_COUNT.set(ctx, self.cq_max_count.into())?;
        field::C_EQN.set(ctx, self.c_eqn)?;
        field::LOG_PAGE_SIZE.set(ctx, self.log_page_size.into())?;
        field::LAST_NOTIFIED_INDEX.set(ctx, self.last_notified_index)?;
        field::LAST_SOLICIT_INDEX.set(ctx, self.last_solicit_index)?;
        field::CONSUMER_COUNTER.set(ctx, self.consumer_counter)?;
        field::PRODUCER_COUNTER.set(ctx, self.producer_counter)?;
        field::DBR_ADDR.set(ctx, self.dbr_addr)
    }

    /// Reads a context.
    pub fn decode(ctx: &[u8]) -> Result<Self> {
        need("cqc", ctx, CQC_LEN)?;
        Ok(Cqc {
            status: field::STATUS.get(ctx)? as u8,
            cqe_sz: field::CQE_SZ.get(ctx)? as u8,
            cc: field::CC.get_bool(ctx)?,
            oi: field::OI.get_bool(ctx)?,
            st: field::ST.get(ctx)? as u8,
            page_offset: field::PAGE_OFFSET.get(ctx)? as u8,
            log_cq_size: field::LOG_CQ_SIZE.get(ctx)? as u8,
            uar_page: field::UAR_PAGE.get(ctx)?,
            cq_period: field::CQ_PERIOD.get(ctx)? as u16,
            cq_max_count: field::CQ_MAX_COUNT.get(ctx)? as u16,
            c_eqn: field::C_EQN.get(ctx)?,
            log_page_size: field::LOG_PAGE_SIZE.get(ctx)? as u8,
            last_notified_index: field::LAST_NOTIFIED_INDEX.get(ctx)?,
            last_solicit_index: field::LAST_SOLICIT_INDEX.get(ctx)?,
            consumer_counter: field::CONSUMER_COUNTER.get(ctx)?,
            producer_counter: field::PRODUCER_COUNTER.get(ctx)?,
            dbr_addr: field::DBR_ADDR.get(ctx)?,
        })
    }
}

//! EQ context (`mlx5_ifc_eqc_bits`, 64 bytes), carried by CREATE_EQ and QUERY_EQ.

use crate::error::Result;
use crate::mlx5::bits::{Field, need};

/// Size of the context.
pub const EQC_LEN: usize = 0x40;

/// `st` values (`MLX5_EQC_ST_*`).
pub mod st {
    /// Armed: the next EQE raises an interrupt.
    pub const ARMED: u8 = 0x9;
    /// Fired: an interrupt was raised; re-arm through the doorbell.
    pub const FIRED: u8 = 0xa;
}

/// Field positions relative to the start of the context (mlx5_ifc.h `eqc`).
pub mod field {
    use super::Field;
    /// `status` (0 OK, 0xa EQ write failure).
    pub const STATUS: Field = Field::new("status", 0x00, 4);
    /// `ec`.
    pub const EC: Field = Field::new("ec", 0x0d, 1);
    /// `oi`: overrun ignore.
    pub const OI: Field = Field::new("oi", 0x0e, 1);
    /// `st`: arm state.
    pub const ST: Field = Field::new("st", 0x14, 4);
    /// `page_offset`.
    pub const PAGE_OFFSET: Field = Field::new("page_offset", 0x54, 6);
    /// `log_eq_size`: log2 of the number of EQEs.
    pub const LOG_EQ_SIZE: Field = Field::new("log_eq_size", 0x63, 5);
    /// `uar_page`: UAR whose doorbell serves this EQ.
    pub const UAR_PAGE: Field = Field::new("uar_page", 0x68, 24);
    /// `intr`: MSI-X vector.
    pub const INTR: Field = Field::new("intr", 0xb4, 12);
    /// `log_page_size`: log2(page size) - 12.
    pub const LOG_PAGE_SIZE: Field = Field::new("log_page_size", 0xc3, 5);
    /// `consumer_counter`.
    pub const CONSUMER_COUNTER: Field = Field::new("consumer_counter", 0x148, 24);
    /// `producer_counter`.
    pub const PRODUCER_COUNTER: Field = Field::new("producer_counter", 0x168, 24);
}

/// An EQ context.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Eqc {
    /// `status`.
    pub status: u8,
    /// `ec`.
    pub ec: bool,
    /// `oi`: ignore overruns.
    pub oi: bool,
    /// `st`: arm state ([`st`]).
    pub st: u8,
    /// `page_offset`.
    pub page_offset: u8,
    /// log2 of the number of EQEs.
    pub log_eq_size: u8,
    /// UAR index.
    pub uar_page: u32,
    /// MSI-X vector.
    pub intr: u16,
    /// log2(buffer page size) - 12.
    pub log_page_size: u8,
    /// Consumer counter (query only).
    pub consumer_counter: u32,
    /// Producer counter (query only).
    pub producer_counter: u32,
}

impl Eqc {
    /// Writes the context into `ctx` (at least [`EQC_LEN`] bytes, zeroed by the caller).
    pub fn encode_into(&self, ctx: &mut [u8]) -> Result<()> {
        need("eqc", ctx, EQC_LEN)?;
        field::STATUS.set(ctx, self.status.into())?;
        field::EC.set_bool(ctx, self.ec)?;
        field::OI.set_bool(ctx, self.oi)?;
        field::ST.set(ctx, self.st.into())?;
        field::PAGE_OFFSET.set(ctx, self.page_offset.into())?;
        field::LOG_EQ_SIZE.set(ctx, self.log_eq_size.into())?;
        field::UAR_PAGE.set(ctx, self.uar_page)?;
        field::INTR.set(ctx, self.intr.into())?;
        field::LOG_PAGE_SIZE.set(ctx, self.log_page_size.into())?;
        field::CONSUMER_COUNTER.set(ctx, self.consumer_counter)?;
        field::PRODUCER_COUNTER.set(ctx, self.producer_counter)
    }

    /// Reads a context.
    pub fn decode(ctx: &[u8]) -> Result<Self> {
        need("eqc", ctx, EQC_LEN)?;
        Ok(Eqc {
            status: field::STATUS.get(ctx)? as u8,
            ec: field::EC.get_bool(ctx)?,
            oi: field::OI.get_bool(ctx)?,
            st: field::ST.get(ctx)? as u8,
            page_offset: field::PAGE_OFFSET.get(ctx)? as u8,
            log_eq_size: field::LOG_EQ_SIZE.get(ctx)? as u8,
            uar_page: field::UAR_PAGE.get(ctx)?,
            intr: field::INTR.get(ctx)? as u16,
            log_page_size: field::LOG_PAGE_SIZE.get(ctx)? as u8,
            consumer_counter: field::CONSUMER_COUNTER.get(ctx)?,
            producer_counter: field::PRODUCER_COUNTER.get(ctx)?,
        })
    }
}

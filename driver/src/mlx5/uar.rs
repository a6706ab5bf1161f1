//! User access regions (`uar.c`): a BAR0 page per UAR index with the EQ and CQ doorbells and
//! the BlueFlame registers that send doorbells are written to.

use firmware_cmds::mlx5::doorbell::{self, UAR_4K};
use firmware_cmds::mlx5::ops::uar::{AllocUar, DeallocUar};

use crate::error::DriverError;
use crate::mmio::Mmio;

use super::dev::Dev;

/// An allocated UAR.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Uar {
    /// Its index (what QPCs, CQCs and EQCs name).
    pub(crate) index: u32,
    /// BAR0 offset of its page.
    pub(crate) base: u64,
}

/// BAR0 offset of UAR `index`, checked to lie inside the BAR (the index comes from the device).
pub(crate) fn uar_base(
    bar: &Mmio,
    index: u32,
    uar_4k: bool,
    page_size: usize,
) -> Result<u64, DriverError> {
    let base = doorbell::uar_bar_offset(index, uar_4k, page_size) as u64;
    let last = base.checked_add((UAR_4K - 8) as u64);
    match last {
        Some(last) if bar.in_bounds(base, 8) && bar.in_bounds(last, 8) => Ok(base),
        _ => Err(DriverError::BadDeviceValue {
            what: "ALLOC_UAR output",
            detail: format!(
                "UAR {index} would be at BAR0 offset {base:#x}, outside the {:#x}-byte BAR",
                bar.len()
            ),
        }),
    }
}

impl Uar {
    /// ALLOC_UAR and locate its page.
    pub(crate) fn alloc(dev: &Dev, uar_4k: bool, page_size: usize) -> Result<Uar, DriverError> {
        let out = dev.exec(&AllocUar)?;
        match uar_base(&dev.bar, out.uar, uar_4k, page_size) {
            Ok(base) => Ok(Uar {
                index: out.uar,
                base,
            }),
            Err(e) => {
                let _ = dev.exec(&DeallocUar { uar: out.uar });
                Err(e)
            }
        }
    }

    /// DEALLOC_UAR.
    pub(crate) fn free(self, dev: &Dev) -> Result<(), DriverError> {
        dev.exec(&DeallocUar { uar: self.index }).map(drop)
    }
}

/// A BlueFlame register used for send doorbells: 64-bit writes of a WQE's first 8 bytes,
/// alternating between the register's two halves (`bf->offset ^= bf->buf_size`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BfReg {
    offset: u64,
    half: u64,
}

impl BfReg {
    /// BlueFlame register `n` of the UAR at `uar_base`, with `log_bf_reg_size` from the caps.
    /// A register too small to hold two 8-byte halves (or a register number past the UAR's
    /// four) falls back to register 0 without alternating.
    pub(crate) fn new(uar_base: u64, n: usize, log_bf_reg_size: u32) -> BfReg {
        let size = 1u64.checked_shl(log_bf_reg_size).unwrap_or(0);
        if size < 16 || n >= doorbell::BFREGS_PER_UAR || size > 0x200 {
            return BfReg {
                offset: uar_base + doorbell::UAR_BF_OFFSET as u64,
                half: 0,
            };
        }
        BfReg {
            offset: uar_base + doorbell::bf_reg_offset(n, log_bf_reg_size) as u64,
            half: size / 2,
        }
    }

    /// Write `qword` (the control segment's first 8 bytes, in device order) and switch halves.
    pub(crate) fn ring(&mut self, bar: &Mmio, qword: [u8; 8]) {
        bar.write_bytes64(self.offset, qword);
        self.offset ^= self.half;
    }

    /// The offset the next doorbell goes to.
    #[cfg(test)]
    pub(crate) fn offset(&self) -> u64 {
        self.offset
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bf_registers_alternate_halves() {
        // log_bf_reg_size 9: 512-byte registers, 256-byte halves.
        let mut bf = BfReg::new(0x3000, 1, 9);
        assert_eq!(bf.offset(), 0x3000 + 0x800 + 0x200);
        bf.offset ^= bf.half;
        assert_eq!(bf.offset(), 0x3000 + 0x800 + 0x200 + 0x100);
        bf.offset ^= bf.half;
        assert_eq!(bf.offset(), 0x3000 + 0xa00);
    }

    #[test]
    fn a_tiny_bf_register_falls_back_to_the_first_without_alternating() {
        let bf = BfReg::new(0x1000, 1, 0);
        assert_eq!(bf.offset(), 0x1800);
        assert_eq!(bf.half, 0);
    }
}

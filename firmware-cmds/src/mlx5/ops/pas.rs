//! Physical address lists (`cmd_pas`: 64-bit entries, bits \[11:0\] reserved) that follow
//! MANAGE_PAGES and the CREATE_EQ / CREATE_CQ / CREATE_QP inputs.

use crate::error::{Error, Result};

/// Bytes per entry.
pub const PAS_ENTRY: usize = 8;
/// Page size the entries address (`MLX5_ADAPTER_PAGE_SIZE`): entries are 4 KiB aligned.
pub const ADAPTER_PAGE_SIZE: u64 = 4096;

/// Appends `pas` (each 4 KiB aligned) to `buf` as big-endian u64s.
pub fn put(buf: &mut Vec<u8>, pas: &[u64]) -> Result<()> {
    for &pa in pas {
        if pa % ADAPTER_PAGE_SIZE != 0 {
            return Err(Error::Invalid {
                what: "pas entry",
                reason: "page addresses must be 4 KiB aligned (bits 11:0 are reserved)",
            });
        }
        buf.extend_from_slice(&pa.to_be_bytes());
    }
    Ok(())
}

/// Reads `count` entries starting at byte `at`; the count is checked against the buffer
/// before anything is allocated, so an untrusted count cannot make us allocate.
pub fn get(buf: &[u8], at: usize, count: usize, what: &'static str) -> Result<Vec<u64>> {
    let need = count
        .checked_mul(PAS_ENTRY)
        .and_then(|n| n.checked_add(at))
        .ok_or(Error::Invalid {
            what,
            reason: "entry count overflows the address space",
        })?;
    if buf.len() < need {
        return Err(Error::Short {
            what,
            need,
            got: buf.len(),
        });
    }
    Ok(buf[at..need]
        .chunks_exact(PAS_ENTRY)
        .map(|c| {
            let mut a = [0u8; 8];
            a.copy_from_slice(c);
            u64::from_be_bytes(a)
        })
        .collect())
}

/// Reads every whole entry from byte `at` to the end of `buf` (for inputs whose entry count is
/// implied by `inlen`, as in CREATE_CQ/EQ/QP).
pub fn get_rest(buf: &[u8], at: usize) -> Vec<u64> {
    buf.get(at..)
        .unwrap_or(&[])
        .chunks_exact(PAS_ENTRY)
        .map(|c| {
            let mut a = [0u8; 8];
            a.copy_from_slice(c);
            u64::from_be_bytes(a)
        })
        .collect()
}

//! Performance-management MADs (class 0x04; kernel `struct ib_pma_mad`): the common header,
//! 40 reserved bytes, then 192 bytes of attribute data (PortCounters, ClassPortInfo …).

use crate::error::{Result, check_len};
use crate::header::Mad;

/// Offset of the PMA attribute data.
pub const DATA_OFFSET: usize = 64;
/// Length of the PMA attribute data.
pub const DATA_LEN: usize = 192;

/// A typed view of a PMA MAD: its header, and its data at offset 64.
///
/// The header is read and written with [`crate::header::MadHeaderRepr`]; the attribute with
/// its own view over [`PerfMad::data`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PerfMad<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> PerfMad<T> {
    /// Views `buffer` as a PMA MAD, checking that it reaches the data at offset 64.
    pub fn new_checked(buffer: T) -> Result<Self> {
        check_len("a PMA MAD header", buffer.as_ref(), DATA_OFFSET)?;
        Ok(Self { buffer })
    }

    /// Gives the buffer back.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The common header.
    pub fn header(&self) -> Mad<&[u8]> {
        Mad::new_unchecked(self.buffer.as_ref())
    }

    /// The attribute data (everything from offset 64).
    pub fn data(&self) -> &[u8] {
        &self.buffer.as_ref()[DATA_OFFSET..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> PerfMad<T> {
    /// The common header, writable.
    pub fn header_mut(&mut self) -> Mad<&mut [u8]> {
        Mad::new_unchecked(self.buffer.as_mut())
    }

    /// Clears the 40 reserved bytes 24–63.
    pub fn clear_reserved(&mut self) {
        self.buffer.as_mut()[crate::header::HEADER_LEN..DATA_OFFSET].fill(0);
    }

    /// The attribute data, writable.
    pub fn data_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[DATA_OFFSET..]
    }
}

//! LinearForwardingTable block (SM attribute 0x0019, 64 bytes; IBA 14.2.5.10): the egress
//! port of 64 consecutive unicast LIDs. AttributeModifier = block number; block `b` holds
//! LIDs `64·b … 64·b+63`.

use crate::error::{Error, Result, check_len};

/// Length of one block.
pub const LEN: usize = 64;
/// LIDs per block.
pub const LIDS_PER_BLOCK: usize = 64;
/// Port value OpenSM programs for a LID with no route (`OSM_NO_PATH`).
pub const NO_PATH: u8 = 0xFF;

/// The block (AttributeModifier) that holds `lid`, and the entry index inside it.
pub const fn block_and_index(lid: u16) -> (u32, usize) {
    (
        (lid as usize / LIDS_PER_BLOCK) as u32,
        lid as usize % LIDS_PER_BLOCK,
    )
}

/// A typed view of one LinearForwardingTable block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinearForwardingTable<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> LinearForwardingTable<T> {
    /// Views `buffer` as an LFT block, checking that it holds 64 bytes.
    pub fn new_checked(buffer: T) -> Result<Self> {
        check_len("a LinearForwardingTable block", buffer.as_ref(), LEN)?;
        Ok(Self { buffer })
    }

    /// Gives the buffer back.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The 64 ports, one per LID of the block.
    pub fn ports(&self) -> &[u8] {
        &self.buffer.as_ref()[..LEN]
    }

    /// The port of entry `index` (0–63).
    pub fn port(&self, index: usize) -> Result<u8> {
        self.ports()
            .get(index)
            .copied()
            .ok_or(Error::IndexOutOfRange {
                table: "a LinearForwardingTable block",
                index,
                len: LEN,
            })
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> LinearForwardingTable<T> {
    /// The 64 ports, writable.
    pub fn ports_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[..LEN]
    }

    /// Sets the port of entry `index` (0–63).
    pub fn set_port(&mut self, index: usize, port: u8) -> Result<()> {
        let slot = self
            .ports_mut()
            .get_mut(index)
            .ok_or(Error::IndexOutOfRange {
                table: "a LinearForwardingTable block",
                index,
                len: LEN,
            })?;
        *slot = port;
        Ok(())
    }
}

/// One LFT block as plain values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LinearForwardingTableRepr {
    /// Egress port per LID of the block.
    pub ports: [u8; LIDS_PER_BLOCK],
}

impl LinearForwardingTableRepr {
    /// Reads the block.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(view: &LinearForwardingTable<&T>) -> Result<Self> {
        let mut ports = [0u8; LIDS_PER_BLOCK];
        ports.copy_from_slice(view.ports());
        Ok(Self { ports })
    }

    /// Bytes [`LinearForwardingTableRepr::emit`] writes.
    pub const fn buffer_len(&self) -> usize {
        LEN
    }

    /// Writes the block.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(
        &self,
        view: &mut LinearForwardingTable<&mut T>,
    ) {
        view.ports_mut().copy_from_slice(&self.ports);
    }
}

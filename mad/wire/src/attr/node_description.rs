//! NodeDescription (SM attribute 0x0010, 64 bytes; IBA 14.2.5.2): the node's name as a
//! NUL-padded UTF-8 string (NodeString).

use crate::error::{Error, Result, check_len};

/// Length of NodeDescription.
pub const LEN: usize = 64;

/// A typed view of a NodeDescription attribute.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeDescription<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> NodeDescription<T> {
    /// Views `buffer` as NodeDescription, checking that it holds 64 bytes.
    pub fn new_checked(buffer: T) -> Result<Self> {
        check_len("NodeDescription", buffer.as_ref(), LEN)?;
        Ok(Self { buffer })
    }

    /// Gives the buffer back.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The 64 raw bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.buffer.as_ref()[..LEN]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> NodeDescription<T> {
    /// The 64 raw bytes, writable.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[..LEN]
    }
}

/// NodeDescription as plain values: the raw 64 bytes, since a peer may send anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct NodeDescriptionRepr {
    /// The NodeString, NUL-padded.
    pub bytes: [u8; LEN],
}

impl NodeDescriptionRepr {
    /// A description holding `text`, NUL-padded; refuses text longer than 64 bytes.
    pub fn from_text(text: &str) -> Result<Self> {
        if text.len() > LEN {
            return Err(Error::NodeDescriptionTooLong { len: text.len() });
        }
        let mut bytes = [0u8; LEN];
        bytes[..text.len()].copy_from_slice(text.as_bytes());
        Ok(Self { bytes })
    }

    /// The text up to the first NUL (all 64 bytes if there is none).
    pub fn text(&self) -> Result<&str> {
        let end = self.bytes.iter().position(|&b| b == 0).unwrap_or(LEN);
        core::str::from_utf8(&self.bytes[..end]).map_err(|_| Error::NodeDescriptionNotUtf8)
    }

    /// Reads the 64 bytes of `view`.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(view: &NodeDescription<&T>) -> Result<Self> {
        let mut bytes = [0u8; LEN];
        bytes.copy_from_slice(view.bytes());
        Ok(Self { bytes })
    }

    /// Bytes [`NodeDescriptionRepr::emit`] writes.
    pub const fn buffer_len(&self) -> usize {
        LEN
    }

    /// Writes the 64 bytes into `view`.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(&self, view: &mut NodeDescription<&mut T>) {
        view.bytes_mut().copy_from_slice(&self.bytes);
    }
}

//! The 64-byte command-queue entry (`struct mlx5_cmd_layout`) and the XOR signatures of the
//! command interface.

use crate::error::{Error, Result};
use crate::mlx5::bits::need;
use crate::mlx5::cmd::status::DeliveryStatus;

/// Size of an entry in bytes.
pub const ENTRY_SIZE: usize = 64;
/// Value of the `type` byte: PCI command transport (`MLX5_PCI_CMD_XPORT`).
pub const CMD_XPORT_PCI: u8 = 7;
/// Bytes of input and of output carried inline in the entry.
pub const INLINE_LEN: usize = 16;
/// Most command slots a queue may have (`MLX5_MAX_COMMANDS`).
pub const MAX_COMMANDS: usize = 32;
/// `status_own` bit 0: set while the device owns the entry (`CMD_OWNER_HW`).
pub const OWNER_HW: u8 = 0x01;

/// Byte offsets inside the entry (`struct mlx5_cmd_layout`).
pub mod off {
    /// `type` (u8).
    pub const TYPE: usize = 0x00;
    /// `inlen` (BE32).
    pub const INLEN: usize = 0x04;
    /// `in_ptr` (BE64).
    pub const IN_PTR: usize = 0x08;
    /// `in[4]`: first 16 input bytes.
    pub const IN: usize = 0x10;
    /// `out[4]`: first 16 output bytes.
    pub const OUT: usize = 0x20;
    /// `out_ptr` (BE64).
    pub const OUT_PTR: usize = 0x30;
    /// `outlen` (BE32).
    pub const OUTLEN: usize = 0x38;
    /// `token` (u8).
    pub const TOKEN: usize = 0x3c;
    /// `sig` (u8).
    pub const SIG: usize = 0x3d;
    /// `status_own` (u8): bit 0 ownership, bits \[7:1\] delivery status.
    pub const STATUS_OWN: usize = 0x3f;
}

/// XOR of all bytes (`xor8_buf`).
pub fn xor8(bytes: &[u8]) -> u8 {
    bytes.iter().fold(0, |acc, b| acc ^ b)
}

/// The signature byte that makes the XOR of the covered bytes (signature included) 0xff:
/// `~xor8` of the covered bytes with the signature byte itself left out.
pub fn signature(covered_without_sig: &[u8]) -> u8 {
    !xor8(covered_without_sig)
}

/// A command-queue entry, parsed or to be emitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CmdEntry {
    /// Transport type; 7 for PCI.
    pub ty: u8,
    /// Total input length in bytes.
    pub inlen: u32,
    /// DMA address of the first input mailbox (0 when the input fits inline).
    pub in_ptr: u64,
    /// First 16 bytes of the input.
    pub in_inline: [u8; INLINE_LEN],
    /// First 16 bytes of the output.
    pub out_inline: [u8; INLINE_LEN],
    /// DMA address of the first output mailbox (0 when the output fits inline).
    pub out_ptr: u64,
    /// Total output length in bytes.
    pub outlen: u32,
    /// Token, repeated in every mailbox block of this command.
    pub token: u8,
    /// Signature byte.
    pub sig: u8,
    /// Delivery status (`status_own >> 1`).
    pub delivery_status: DeliveryStatus,
    /// Ownership: true while the device owns the entry.
    pub hw_owned: bool,
}

impl CmdEntry {
    /// A fresh entry as the driver posts it: type 7, device-owned, delivery status 0, signature
    /// to be filled by [`CmdEntry::seal`].
    pub fn new_request(
        in_inline: [u8; INLINE_LEN],
        inlen: u32,
        in_ptr: u64,
        outlen: u32,
        out_ptr: u64,
        token: u8,
    ) -> Self {
        CmdEntry {
            ty: CMD_XPORT_PCI,
            inlen,
            in_ptr,
            in_inline,
            out_inline: [0; INLINE_LEN],
            out_ptr,
            outlen,
            token,
            sig: 0,
            delivery_status: DeliveryStatus::OK,
            hw_owned: true,
        }
    }

    /// Parses an entry from the first 64 bytes of `buf`.
    pub fn decode(buf: &[u8]) -> Result<Self> {
        need("command queue entry", buf, ENTRY_SIZE)?;
        let mut in_inline = [0u8; INLINE_LEN];
        in_inline.copy_from_slice(&buf[off::IN..off::IN + INLINE_LEN]);
        let mut out_inline = [0u8; INLINE_LEN];
        out_inline.copy_from_slice(&buf[off::OUT..off::OUT + INLINE_LEN]);
        let so = buf[off::STATUS_OWN];
        Ok(CmdEntry {
            ty: buf[off::TYPE],
            inlen: be32(buf, off::INLEN),
            in_ptr: be64(buf, off::IN_PTR),
            in_inline,
            out_inline,
            out_ptr: be64(buf, off::OUT_PTR),
            outlen: be32(buf, off::OUTLEN),
            token: buf[off::TOKEN],
            sig: buf[off::SIG],
            delivery_status: DeliveryStatus(so >> 1),
            hw_owned: so & OWNER_HW != 0,
        })
    }

    /// Emits the entry's 64 bytes (the signature byte as stored in `sig`).
    pub fn encode(&self) -> [u8; ENTRY_SIZE] {
        let mut b = [0u8; ENTRY_SIZE];
        b[off::TYPE] = self.ty;
        b[off::INLEN..off::INLEN + 4].copy_from_slice(&self.inlen.to_be_bytes());
        b[off::IN_PTR..off::IN_PTR + 8].copy_from_slice(&self.in_ptr.to_be_bytes());
        b[off::IN..off::IN + INLINE_LEN].copy_from_slice(&self.in_inline);
        b[off::OUT..off::OUT + INLINE_LEN].copy_from_slice(&self.out_inline);
        b[off::OUT_PTR..off::OUT_PTR + 8].copy_from_slice(&self.out_ptr.to_be_bytes());
        b[off::OUTLEN..off::OUTLEN + 4].copy_from_slice(&self.outlen.to_be_bytes());
        b[off::TOKEN] = self.token;
        b[off::SIG] = self.sig;
        b[off::STATUS_OWN] = self.status_own();
        b
    }

    /// The `status_own` byte.
    pub fn status_own(&self) -> u8 {
        ((self.delivery_status.0 & 0x7f) << 1) | u8::from(self.hw_owned)
    }

    /// Computes `sig` the way the kernel does (`set_signature`): over all 64 bytes, with the
    /// ownership bit already set and the signature byte counted as 0.
    pub fn seal(&mut self) {
        self.sig = 0;
        self.sig = signature(&self.encode());
    }

    /// Emits the entry with its signature computed (see [`CmdEntry::seal`]).
    pub fn encode_sealed(&self) -> [u8; ENTRY_SIZE] {
        let mut e = *self;
        e.seal();
        e.encode()
    }

    /// True if the 64 raw bytes XOR to 0xff, the check the kernel applies when checksums are
    /// enabled (`verify_signature`).
    pub fn signature_ok(raw: &[u8]) -> bool {
        raw.len() >= ENTRY_SIZE && xor8(&raw[..ENTRY_SIZE]) == 0xff
    }

    /// Checks what a device checks before running a command: the transport type.
    pub fn check_type(&self) -> Result<()> {
        if self.ty == CMD_XPORT_PCI {
            Ok(())
        } else {
            Err(Error::UnknownCode {
                what: "command entry type",
                value: self.ty.into(),
            })
        }
    }
}

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn be64(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_be_bytes(a)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip() {
        let mut e = CmdEntry::new_request([7; 16], 0x110, 0x1000, 0x20, 0x2000, 0x5a);
        e.out_inline = [3; 16];
        e.seal();
        let raw = e.encode();
        assert_eq!(CmdEntry::decode(&raw).unwrap(), e);
        assert!(CmdEntry::signature_ok(&raw));
    }

    #[test]
    fn seal_makes_xor_ff_and_depends_on_owner_bit() {
        let mut a = CmdEntry::new_request([1; 16], 16, 0, 16, 0, 1);
        a.seal();
        let mut b = a;
        b.hw_owned = false;
        b.seal();
        assert_ne!(a.sig, b.sig);
        assert_eq!(xor8(&a.encode()), 0xff);
    }

    #[test]
    fn short_is_an_error() {
        assert!(matches!(
            CmdEntry::decode(&[0u8; 63]),
            Err(Error::Short {
                need: 64,
                got: 63,
                ..
            })
        ));
    }
}

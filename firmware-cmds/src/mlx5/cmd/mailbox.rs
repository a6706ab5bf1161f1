//! Mailbox blocks (`struct mlx5_cmd_prot_block`, 576 bytes) and the framing of a command
//! message into 16 inline bytes plus a chain of 512-byte data blocks.
//!
//! No I/O happens here: the chain is built into values the caller copies to DMA memory, and
//! walking a chain in DMA memory goes through a caller-supplied block reader.

use crate::error::{Error, MailboxProblem, Result};
use crate::mlx5::bits::need;
use crate::mlx5::cmd::entry::{INLINE_LEN, signature, xor8};

/// Size of a mailbox block.
pub const BLOCK_SIZE: usize = 576;
/// Data bytes per block (`MLX5_CMD_DATA_BLOCK_SIZE`).
pub const BLOCK_DATA: usize = 512;
/// Alignment of the entry's `in_ptr` / `out_ptr` (`input_mailbox_pointer_31_9`: low 9 bits
/// are not carried).
pub const ENTRY_PTR_ALIGN: u64 = 512;
/// Alignment of a block's `next` pointer (`next_pointer_31_10`: low 10 bits not carried).
pub const NEXT_PTR_ALIGN: u64 = 1024;
/// Alignment the driver allocates blocks with (the kernel's DMA pool rounds 576 up to 1024);
/// it satisfies both pointer alignments.
pub const BLOCK_ALIGN: u64 = 1024;

/// Byte offsets inside a block.
pub mod off {
    /// 512 data bytes.
    pub const DATA: usize = 0x000;
    /// Reserved bytes 0x200..0x230 (covered by `ctrl_sig`).
    pub const RSVD0: usize = 0x200;
    /// `next` (BE64): address of the next block, 0 for the last.
    pub const NEXT: usize = 0x230;
    /// `block_num` (BE32): position in the chain.
    pub const BLOCK_NUM: usize = 0x238;
    /// `token` (u8): the entry's token.
    pub const TOKEN: usize = 0x23d;
    /// `ctrl_sig` (u8).
    pub const CTRL_SIG: usize = 0x23e;
    /// `sig` (u8).
    pub const SIG: usize = 0x23f;
}

/// One mailbox block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MailboxBlock {
    /// Message bytes carried by this block.
    pub data: [u8; BLOCK_DATA],
    /// Address of the next block, 0 for the last.
    pub next: u64,
    /// Position in the chain (0, 1, 2 …).
    pub block_num: u32,
    /// The entry's token.
    pub token: u8,
    /// Signature over bytes 0x200..=0x23d.
    pub ctrl_sig: u8,
    /// Signature over bytes 0x000..=0x23e.
    pub sig: u8,
}

impl MailboxBlock {
    /// Parses a block.
    pub fn decode(buf: &[u8]) -> Result<Self> {
        need("mailbox block", buf, BLOCK_SIZE)?;
        let mut data = [0u8; BLOCK_DATA];
        data.copy_from_slice(&buf[..BLOCK_DATA]);
        let mut next = [0u8; 8];
        next.copy_from_slice(&buf[off::NEXT..off::NEXT + 8]);
        let mut num = [0u8; 4];
        num.copy_from_slice(&buf[off::BLOCK_NUM..off::BLOCK_NUM + 4]);
        Ok(MailboxBlock {
            data,
            next: u64::from_be_bytes(next),
            block_num: u32::from_be_bytes(num),
            token: buf[off::TOKEN],
            ctrl_sig: buf[off::CTRL_SIG],
            sig: buf[off::SIG],
        })
    }

    /// Emits the block's 576 bytes (signatures as stored).
    pub fn encode(&self) -> [u8; BLOCK_SIZE] {
        let mut b = [0u8; BLOCK_SIZE];
        b[..BLOCK_DATA].copy_from_slice(&self.data);
        b[off::NEXT..off::NEXT + 8].copy_from_slice(&self.next.to_be_bytes());
        b[off::BLOCK_NUM..off::BLOCK_NUM + 4].copy_from_slice(&self.block_num.to_be_bytes());
        b[off::TOKEN] = self.token;
        b[off::CTRL_SIG] = self.ctrl_sig;
        b[off::SIG] = self.sig;
        b
    }

    /// Computes both signatures as the kernel does (`calc_block_sig`): `ctrl_sig` first, then
    /// `sig`, which covers `ctrl_sig`.
    pub fn seal(&mut self) {
        self.ctrl_sig = 0;
        self.sig = 0;
        let raw = self.encode();
        self.ctrl_sig = signature(&raw[off::RSVD0..off::CTRL_SIG]);
        let raw = self.encode();
        self.sig = signature(&raw[..off::SIG]);
    }

    /// The kernel's `verify_block_sig` on raw bytes: XOR of 0x200..=0x23e and XOR of the whole
    /// block must both be 0xff.
    pub fn signatures_ok(raw: &[u8]) -> bool {
        raw.len() >= BLOCK_SIZE
            && xor8(&raw[off::RSVD0..off::SIG]) == 0xff
            && xor8(&raw[..BLOCK_SIZE]) == 0xff
    }
}

/// Number of mailbox blocks a message of `len` bytes needs beyond its 16 inline bytes
/// (`mlx5_calc_cmd_blocks`).
pub fn blocks_needed(len: usize) -> usize {
    len.saturating_sub(INLINE_LEN).div_ceil(BLOCK_DATA)
}

/// A message split for the command queue: the inline part and the chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Framed {
    /// First 16 bytes (zero-padded), for the entry's `in` or `out` field.
    pub inline: [u8; INLINE_LEN],
    /// The chain, block `i` to be placed at `addrs[i]`.
    pub blocks: Vec<MailboxBlock>,
}

/// Splits `msg` into inline bytes and a chain of blocks placed at `addrs` (one address per
/// block, [`blocks_needed`] of them, each [`BLOCK_ALIGN`]-aligned), linked in order, numbered
/// from 0 and stamped with `token`. With `checksum` the block signatures are computed.
///
/// For an output chain, frame a zeroed message of the output length: the device fills it.
pub fn frame(msg: &[u8], addrs: &[u64], token: u8, checksum: bool) -> Result<Framed> {
    let n = blocks_needed(msg.len());
    if addrs.len() != n {
        return Err(Error::Invalid {
            what: "mailbox addresses",
            reason: "one address per block is needed (see blocks_needed)",
        });
    }
    if let Some(&bad) = addrs.iter().find(|&&a| a % BLOCK_ALIGN != 0 || a == 0) {
        return Err(Error::Mailbox {
            index: addrs.iter().position(|&a| a == bad).unwrap_or(0),
            problem: MailboxProblem::Misaligned {
                addr: bad,
                align: BLOCK_ALIGN,
                output: false,
            },
        });
    }
    let mut inline = [0u8; INLINE_LEN];
    let head = msg.len().min(INLINE_LEN);
    inline[..head].copy_from_slice(&msg[..head]);
    let rest = &msg[head..];
    let mut blocks = Vec::with_capacity(n);
    for i in 0..n {
        let mut data = [0u8; BLOCK_DATA];
        let start = i * BLOCK_DATA;
        let end = (start + BLOCK_DATA).min(rest.len());
        data[..end - start].copy_from_slice(&rest[start..end]);
        let mut b = MailboxBlock {
            data,
            next: addrs.get(i + 1).copied().unwrap_or(0),
            block_num: i as u32,
            token,
            ctrl_sig: 0,
            sig: 0,
        };
        if checksum {
            b.seal();
        }
        blocks.push(b);
    }
    Ok(Framed { inline, blocks })
}

/// Options for walking a chain written by the other side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChainCheck {
    /// The entry's token; every block must carry it.
    pub token: u8,
    /// Verify both block signatures (only meaningful when command checksums are enabled).
    pub verify_signatures: bool,
    /// True when walking an output chain (selects the alignment error reported).
    pub output: bool,
}

/// Reassembles a message of `len` bytes from the entry's 16 inline bytes and the chain starting
/// at `first` (the entry's `in_ptr` or `out_ptr`), reading each block with `read_block`, which
/// returns `None` when the address cannot be read. Every block is checked (alignment, number,
/// token, and optionally signatures); a failure names the block and maps to the delivery
/// status a device would report.
pub fn gather<F>(
    inline: &[u8; INLINE_LEN],
    len: usize,
    first: u64,
    check: ChainCheck,
    mut read_block: F,
) -> Result<Vec<u8>>
where
    F: FnMut(u64) -> Option<[u8; BLOCK_SIZE]>,
{
    let n = blocks_needed(len);
    // `len` comes from the other side: grow as blocks arrive instead of trusting it up front.
    let mut msg = Vec::with_capacity(len.min(INLINE_LEN + 64 * BLOCK_DATA));
    msg.extend_from_slice(&inline[..len.min(INLINE_LEN)]);
    let mut addr = first;
    for i in 0..n {
        let align = if i == 0 {
            ENTRY_PTR_ALIGN
        } else {
            NEXT_PTR_ALIGN
        };
        let fail = |problem| Error::Mailbox { index: i, problem };
        if addr == 0 {
            return Err(fail(MailboxProblem::ChainTooShort));
        }
        if addr % align != 0 {
            return Err(fail(MailboxProblem::Misaligned {
                addr,
                align,
                output: check.output,
            }));
        }
        let raw = read_block(addr).ok_or(fail(MailboxProblem::Unreachable { addr }))?;
        let block = MailboxBlock::decode(&raw)?;
        if block.block_num != i as u32 {
            return Err(fail(MailboxProblem::BlockNumber {
                expected: i as u32,
                got: block.block_num,
            }));
        }
        if block.token != check.token {
            return Err(fail(MailboxProblem::Token {
                expected: check.token,
                got: block.token,
            }));
        }
        if check.verify_signatures && !MailboxBlock::signatures_ok(&raw) {
            return Err(fail(MailboxProblem::Signature));
        }
        let take = (len - msg.len()).min(BLOCK_DATA);
        msg.extend_from_slice(&block.data[..take]);
        addr = block.next;
    }
    Ok(msg)
}

/// Writes a message into a chain prepared by the driver (the device side of an output): the
/// first 16 bytes are returned for the entry's `out` field, the rest is written into the
/// blocks found by following `first` and each block's `next`, keeping the driver's `next`,
/// `block_num` and `token`, and resealing signatures when `checksum` is set.
/// `read_block` / `write_block` do the DMA; a `false` from `write_block` means the write failed.
pub fn scatter<R, W>(
    msg: &[u8],
    first: u64,
    check: ChainCheck,
    checksum: bool,
    mut read_block: R,
    mut write_block: W,
) -> Result<[u8; INLINE_LEN]>
where
    R: FnMut(u64) -> Option<[u8; BLOCK_SIZE]>,
    W: FnMut(u64, &[u8; BLOCK_SIZE]) -> bool,
{
    let mut inline = [0u8; INLINE_LEN];
    let head = msg.len().min(INLINE_LEN);
    inline[..head].copy_from_slice(&msg[..head]);
    let rest = &msg[head..];
    let mut addr = first;
    for (i, chunk) in rest.chunks(BLOCK_DATA).enumerate() {
        let align = if i == 0 {
            ENTRY_PTR_ALIGN
        } else {
            NEXT_PTR_ALIGN
        };
        let fail = |problem| Error::Mailbox { index: i, problem };
        if addr == 0 {
            return Err(fail(MailboxProblem::ChainTooShort));
        }
        if addr % align != 0 {
            return Err(fail(MailboxProblem::Misaligned {
                addr,
                align,
                output: check.output,
            }));
        }
        let raw = read_block(addr).ok_or(fail(MailboxProblem::Unreachable { addr }))?;
        let mut block = MailboxBlock::decode(&raw)?;
        if block.block_num != i as u32 {
            return Err(fail(MailboxProblem::BlockNumber {
                expected: i as u32,
                got: block.block_num,
            }));
        }
        if block.token != check.token {
            return Err(fail(MailboxProblem::Token {
                expected: check.token,
                got: block.token,
            }));
        }
        block.data = [0u8; BLOCK_DATA];
        block.data[..chunk.len()].copy_from_slice(chunk);
        if checksum {
            block.seal();
        }
        if !write_block(addr, &block.encode()) {
            return Err(fail(MailboxProblem::Unreachable { addr }));
        }
        addr = block.next;
    }
    Ok(inline)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn addrs(n: usize) -> Vec<u64> {
        (0..n).map(|i| 0x10_0000 + (i as u64) * 0x400).collect()
    }

    fn memory(f: &Framed, a: &[u64]) -> HashMap<u64, [u8; BLOCK_SIZE]> {
        a.iter()
            .zip(&f.blocks)
            .map(|(&a, b)| (a, b.encode()))
            .collect()
    }

    #[test]
    fn blocks_needed_matches_kernel_rounding() {
        // DIV_ROUND_UP(len - min(16, len), 512)
        assert_eq!(blocks_needed(0), 0);
        assert_eq!(blocks_needed(16), 0);
        assert_eq!(blocks_needed(17), 1);
        assert_eq!(blocks_needed(16 + 512), 1);
        assert_eq!(blocks_needed(16 + 513), 2);
        assert_eq!(blocks_needed(0x1010), 8);
    }

    #[test]
    fn frame_then_gather_roundtrips() {
        for len in [0usize, 5, 16, 17, 528, 529, 0x1010, 3000] {
            let msg: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
            let a = addrs(blocks_needed(len));
            let f = frame(&msg, &a, 0x42, true).unwrap();
            for (i, b) in f.blocks.iter().enumerate() {
                assert_eq!(b.block_num, i as u32);
                assert!(MailboxBlock::signatures_ok(&b.encode()));
            }
            let mem = memory(&f, &a);
            let check = ChainCheck {
                token: 0x42,
                verify_signatures: true,
                output: false,
            };
            let back = gather(
                &f.inline,
                len,
                a.first().copied().unwrap_or(0),
                check,
                |x| mem.get(&x).copied(),
            )
            .unwrap();
            assert_eq!(back, msg, "len {len}");
        }
    }

    #[test]
    fn scatter_fills_a_driver_chain() {
        let len = 0x1010;
        let a = addrs(blocks_needed(len));
        let f = frame(&vec![0u8; len], &a, 9, false).unwrap();
        let mut mem = memory(&f, &a);
        let msg: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
        let check = ChainCheck {
            token: 9,
            verify_signatures: false,
            output: true,
        };
        let snapshot = mem.clone();
        let inline = scatter(
            &msg,
            a[0],
            check,
            true,
            |x| snapshot.get(&x).copied(),
            |x, b| {
                mem.insert(x, *b);
                true
            },
        )
        .unwrap();
        let check = ChainCheck {
            token: 9,
            verify_signatures: true,
            output: true,
        };
        let back = gather(&inline, len, a[0], check, |x| mem.get(&x).copied()).unwrap();
        assert_eq!(back, msg);
    }

    #[test]
    fn gather_reports_each_problem() {
        let len = 16 + 3 * 512;
        let a = addrs(3);
        let f = frame(&vec![1u8; len], &a, 5, true).unwrap();
        let base = memory(&f, &a);
        let check = ChainCheck {
            token: 5,
            verify_signatures: true,
            output: false,
        };

        let err = gather(
            &f.inline,
            len,
            a[0],
            ChainCheck { token: 6, ..check },
            |x| base.get(&x).copied(),
        )
        .unwrap_err();
        assert!(matches!(
            err,
            Error::Mailbox {
                index: 0,
                problem: MailboxProblem::Token { .. }
            }
        ));

        let mut m = base.clone();
        m.get_mut(&a[1]).unwrap()[off::BLOCK_NUM + 3] = 7;
        let err = gather(&f.inline, len, a[0], check, |x| m.get(&x).copied()).unwrap_err();
        assert!(matches!(
            err,
            Error::Mailbox {
                index: 1,
                problem: MailboxProblem::BlockNumber {
                    expected: 1,
                    got: 7
                }
            }
        ));

        let mut m = base.clone();
        m.get_mut(&a[2]).unwrap()[10] ^= 1;
        let err = gather(&f.inline, len, a[0], check, |x| m.get(&x).copied()).unwrap_err();
        assert!(matches!(
            err,
            Error::Mailbox {
                index: 2,
                problem: MailboxProblem::Signature
            }
        ));

        let mut m = base.clone();
        m.get_mut(&a[1]).unwrap()[off::NEXT..off::NEXT + 8].copy_from_slice(&[0; 8]);
        // With signatures checked, the edited block fails its signature first.
        let err = gather(&f.inline, len, a[0], check, |x| m.get(&x).copied()).unwrap_err();
        assert!(matches!(
            err,
            Error::Mailbox {
                index: 1,
                problem: MailboxProblem::Signature
            }
        ));
        let unsigned = ChainCheck {
            verify_signatures: false,
            ..check
        };
        let err = gather(&f.inline, len, a[0], unsigned, |x| m.get(&x).copied()).unwrap_err();
        assert!(matches!(
            err,
            Error::Mailbox {
                index: 2,
                problem: MailboxProblem::ChainTooShort
            }
        ));

        let err = gather(&f.inline, len, a[0] + 0x100, check, |x| {
            base.get(&x).copied()
        })
        .unwrap_err();
        assert!(matches!(
            err,
            Error::Mailbox {
                index: 0,
                problem: MailboxProblem::Misaligned { .. }
            }
        ));

        let err = gather(&f.inline, len, a[0], check, |_| None).unwrap_err();
        assert!(matches!(
            err,
            Error::Mailbox {
                index: 0,
                problem: MailboxProblem::Unreachable { .. }
            }
        ));
    }

    #[test]
    fn frame_rejects_wrong_address_count_and_alignment() {
        assert!(frame(&[0u8; 600], &[], 1, false).is_err());
        assert!(frame(&[0u8; 600], &[0x1200], 1, false).is_err());
        // 600 bytes = 16 inline + 584 in two blocks.
        assert!(frame(&[0u8; 600], &[0x1000, 0x2000, 0x3000], 1, false).is_err());
        assert!(frame(&[0u8; 600], &[0x1000, 0x2200], 1, false).is_err());
        assert_eq!(
            frame(&[0u8; 600], &[0x1000, 0x2000], 1, false)
                .unwrap()
                .blocks
                .len(),
            2
        );
    }
}

//! `hca decode cqe|eqe|status HEX...`: name every field of a CQE, an EQE or a command status
//! copied from a log or a memory dump, with the work-completion status a CQE gives.

use std::fmt::Write as _;
use std::io::{Read, Write};

use firmware_cmds::mlx5::cqe::{CQE_SIZE, CQE128_OFFSET, CqeBody, CqeOpcode, RespCqe};
use firmware_cmds::mlx5::decode::{self, HexDump};
use firmware_cmds::mlx5::eqe::EQE_SIZE;
use firmware_cmds::mlx5::syndrome::IbWcStatus;

use crate::error::ToolError;

use super::CmdResult;

/// Long help of `hca decode`.
pub const HELP: &str = "\
Decodes bytes as the device wrote them (big-endian, in memory order) into named fields.

  cqe     64 bytes of a completion queue entry (or a 128-byte CQE slot: its second half is
          the CQE). Prints opcode, owner, QPN, WQE counter, byte count, source QP/LID for a
          receive and its word at 0x24 as the opcode reads it (immediate data, the invalidated
          rkey, or a plain send's P_Key if the QP is QP1), and for an error CQE the syndrome,
          vendor syndrome and the work-completion status the driver reports (unknown
          syndromes are IB_WC_GENERAL_ERR).
  eqe     64 bytes of an event queue entry: event type, subtype and the typed data (command
          slots, page request, port change, CQ or QP error).
  status  a command's status: the first 8 bytes of its output (status byte, 3 reserved bytes,
          32-bit syndrome), or the numbers themselves with 0x prefixes: STATUS [SYNDROME].

HEX is any hex dump: bytes or words with or without spaces, `0x` prefixes, colons and commas,
or lines copied from a log or a dump tool. Skipped on each line: dmesg's `[timestamp]`, a
`DRIVER 0000:03:00.0:` device prefix, everything up to an offset ending in `:` (`00000010:`
as the kernel's print_hex_dump writes them, and xxd), hexdump -C's offset column, and an ASCII
column (`|...|`, or after two spaces as xxd writes it). A `*` line (repeated lines left out by
hexdump, od or xxd -a) is filled in from the offsets around it; without offsets (od -An), dump
with -v. xxd -p and od -An -tx1 -v output are plain hex. With no HEX, or `-`, the dump is read
from standard input.

Examples:
  hca decode cqe 00000000 00000000 00000000 00000000 00000000 00000000 00000000 \\
                 00000000 00000000 00000000 00000000 00000000 00000000 00009113 0a000048 000300d0
  hca decode eqe < eqe.txt
  hca decode status 03000000 00ab1234
  hca decode status 0x03 0xab1234";

/// What to decode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Kind {
    /// A 64-byte completion queue entry.
    Cqe,
    /// A 64-byte event queue entry.
    Eqe,
    /// A command output status (and syndrome).
    Status,
}

/// Arguments of `hca decode`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// What the bytes are.
    #[arg(value_enum)]
    pub kind: Kind,
    /// The hex dump (several arguments are joined); `-` or nothing reads standard input.
    #[arg(value_name = "HEX")]
    pub hex: Vec<String>,
}

/// Parse a hex dump into bytes (see [`HELP`] for the accepted forms).
///
/// Line by line: a leading `[...]` (dmesg's timestamp) and a `DRIVER DDDD:BB:DD.F:` device
/// prefix are dropped, and so is everything up to and including an offset token (`0010:`);
/// in `hexdump -C` output the offset has no colon, and the text is taken for that format when
/// a line is an offset, two spaces, and a `|ascii|` column. A line ends at `|`, or at two
/// spaces followed by text that is not hex and is no longer than the bytes before it (the
/// ASCII column of `xxd` and of print_hex_dump with ascii). A `*` line (lines equal to the one
/// before, left out) is expanded up to the next line's offset.
pub fn parse_hex(text: &str) -> Result<Vec<u8>, ToolError> {
    let hexdump_c = text.lines().any(is_hexdump_c_line);
    let mut out = Vec::new();
    // The last line with bytes: its offset, and where its bytes are in `out`.
    let mut last: Option<(Option<u64>, std::ops::Range<usize>)> = None;
    // The line number of a `*` waiting for the next offset.
    let mut repeat: Option<usize> = None;
    for (n, raw) in text.lines().enumerate() {
        let line_no = n + 1;
        let line = strip_log_prefix(raw);
        if line.trim() == "*" {
            if last.is_none() {
                return Err(ToolError::RepeatedLines(format!(
                    "line {line_no}: `*` (lines equal to the one before, left out) has no line \
                     before it"
                )));
            }
            repeat = Some(line_no);
            continue;
        }
        let (offset, data) = split_offset(line, hexdump_c);
        if offset.is_none() && data.trim().is_empty() {
            continue;
        }
        if let Some(star) = repeat.take() {
            expand_repeat(&mut out, last.clone(), offset, star)?;
        }
        let start = out.len();
        parse_line(data, line_no, &mut out)?;
        if out.len() > start {
            last = Some((offset, start..out.len()));
        }
    }
    if let Some(star) = repeat {
        return Err(no_offsets_for_repeat(star));
    }
    Ok(out)
}

fn no_offsets_for_repeat(line_no: usize) -> ToolError {
    ToolError::RepeatedLines(format!(
        "line {line_no}: `*` stands for lines equal to the one before, left out, and there are \
         no offsets before and after it to say how many: dump with `hexdump -v`, `od -v` or \
         `xxd` without -a, or copy all the lines"
    ))
}

/// Appends the lines a `*` on line `star` left out: copies of the `last` line's bytes up to
/// the `next` line's offset.
fn expand_repeat(
    out: &mut Vec<u8>,
    last: Option<(Option<u64>, std::ops::Range<usize>)>,
    next: Option<u64>,
    star: usize,
) -> Result<(), ToolError> {
    let (Some((Some(last_offset), bytes)), Some(next)) = (last, next) else {
        return Err(no_offsets_for_repeat(star));
    };
    let len = bytes.len() as u64;
    let gap = last_offset
        .checked_add(len)
        .and_then(|end| next.checked_sub(end));
    let bad = |why: String| {
        ToolError::RepeatedLines(format!(
            "line {star}: `*` after a {len}-byte line at offset {last_offset:#x}, and the next \
             line is at offset {next:#x}: {why}"
        ))
    };
    let Some(gap) = gap else {
        return Err(bad("the offsets go backwards".into()));
    };
    if gap % len != 0 {
        return Err(bad(format!("{gap} left-out bytes are not whole lines")));
    }
    if (out.len() as u64).saturating_add(gap) > MAX_STDIN_BYTES {
        return Err(bad(format!(
            "{gap} left-out bytes, more than the {MAX_STDIN_BYTES} bytes hca decode reads"
        )));
    }
    for _ in 0..gap / len {
        out.extend_from_within(bytes.clone());
    }
    Ok(())
}

/// Whether `line` looks like `hexdump -C` output: an offset without a colon, two spaces, and
/// a `|ascii|` column.
fn is_hexdump_c_line(line: &str) -> bool {
    let line = strip_log_prefix(line);
    let end = line.find(char::is_whitespace).unwrap_or(line.len());
    let first = &line[..end];
    !first.is_empty()
        && first.chars().all(|c| c.is_ascii_hexdigit())
        && line[end..].starts_with("  ")
        && line.contains('|')
}

/// `line` without a leading `[...]` (dmesg's timestamp) and `DRIVER DDDD:BB:DD.F:` device
/// prefix (dev_printk's).
fn strip_log_prefix(line: &str) -> &str {
    let mut s = line.trim_start();
    if s.starts_with('[') {
        if let Some(i) = s.find(']') {
            s = s[i + 1..].trim_start();
        }
    }
    let mut tokens = s.split_whitespace();
    if let (Some(driver), Some(device)) = (tokens.next(), tokens.next()) {
        if driver
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
            && is_pci_address_prefix(device)
        {
            let at = s.find(device).unwrap_or(0) + device.len();
            s = s[at..].trim_start();
        }
    }
    s
}

/// Whether `t` is a PCI address followed by `:` (`0000:03:00.0:` or `03:00.0:`).
fn is_pci_address_prefix(t: &str) -> bool {
    let hex = |s: &str, n: usize| s.len() == n && s.chars().all(|c| c.is_ascii_hexdigit());
    let Some(t) = t.strip_suffix(':') else {
        return false;
    };
    let parts: Vec<&str> = t.split(':').collect();
    let (bus, devfn) = match parts.as_slice() {
        [domain, bus, devfn] if hex(domain, 4) => (bus, devfn),
        [bus, devfn] => (bus, devfn),
        _ => return false,
    };
    let Some((dev, func)) = devfn.split_once('.') else {
        return false;
    };
    hex(bus, 2) && hex(dev, 2) && matches!(func, "0" | "1" | "2" | "3" | "4" | "5" | "6" | "7")
}

/// The offset a line starts with, if any, and the text after it: the first token that is hex
/// digits and a `:` (everything before it is a log prefix), or in `hexdump -C` output the
/// first token.
fn split_offset(line: &str, hexdump_c: bool) -> (Option<u64>, &str) {
    let mut rest = line;
    let mut first = true;
    while let Some(start) = rest.find(|c: char| !c.is_whitespace()) {
        let end = rest[start..]
            .find(char::is_whitespace)
            .map_or(rest.len(), |e| start + e);
        let token = &rest[start..end];
        let is_hex = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_hexdigit());
        if let Some(stem) = token.strip_suffix(':') {
            if is_hex(stem) {
                return (u64::from_str_radix(stem, 16).ok(), &rest[end..]);
            }
        }
        if first && hexdump_c && is_hex(token) {
            return (u64::from_str_radix(token, 16).ok(), &rest[end..]);
        }
        first = false;
        rest = &rest[end..];
    }
    (None, line)
}

/// The bytes of one token: hex digits in pairs, with `0x` prefixes and `:` between bytes.
fn token_bytes(raw: &str) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    for part in raw.split(':').filter(|p| !p.is_empty()) {
        let digits = part
            .strip_prefix("0x")
            .or_else(|| part.strip_prefix("0X"))
            .unwrap_or(part);
        if let Some(bad) = digits.chars().find(|c| !c.is_ascii_hexdigit()) {
            return Err(format!("`{bad}` is not a hex digit"));
        }
        if digits.is_empty() || digits.len() % 2 != 0 {
            return Err(format!(
                "{} hex digits: bytes need two digits each (write 0a, not a)",
                digits.len()
            ));
        }
        for pair in digits.as_bytes().chunks(2) {
            let s = std::str::from_utf8(pair).unwrap_or("00");
            out.push(u8::from_str_radix(s, 16).unwrap_or(0));
        }
    }
    Ok(out)
}

/// Appends the bytes of one line's data (after its offset) to `out`.
fn parse_line(data: &str, line_no: usize, out: &mut Vec<u8>) -> Result<(), ToolError> {
    // `hexdump -C`'s `|ascii|` column.
    let data = data.split('|').next().unwrap_or("").trim_start();
    // Segments: the text between runs of two or more spaces.
    let mut starts = vec![0];
    let mut blanks = 0;
    for (i, c) in data.char_indices() {
        if c.is_whitespace() {
            blanks += 1;
        } else {
            if blanks >= 2 {
                starts.push(i);
            }
            blanks = 0;
        }
    }
    let line_start = out.len();
    let mut position = 0;
    for (k, &start) in starts.iter().enumerate() {
        let end = starts.get(k + 1).copied().unwrap_or(data.len());
        let tokens: Vec<&str> = data[start..end]
            .split(|c: char| c.is_whitespace() || c == ',')
            .filter(|t| !t.is_empty())
            .collect();
        let line_bytes = out.len() - line_start;
        // An ASCII column: after two spaces, not hex, one character per byte before it.
        if k > 0
            && line_bytes > 0
            && tokens.iter().any(|t| token_bytes(t).is_err())
            && data[start..].trim_end().chars().count() <= line_bytes
        {
            break;
        }
        for raw in tokens {
            position += 1;
            // An offset column within the line (`0010:`), as the help promises to skip.
            if let Some(stem) = raw.strip_suffix(':') {
                if !stem.is_empty() && stem.chars().all(|c| c.is_ascii_hexdigit()) {
                    continue;
                }
            }
            let bytes = token_bytes(raw).map_err(|reason| ToolError::BadHex {
                token: raw.to_string(),
                line: line_no,
                position,
                reason,
            })?;
            out.extend_from_slice(&bytes);
        }
    }
    Ok(())
}

/// The hex digits of a number written with a `0x` prefix (the numeric form of `status`).
fn hex_number_digits(token: &str) -> Option<&str> {
    let digits = token
        .strip_prefix("0x")
        .or_else(|| token.strip_prefix("0X"))?;
    (!digits.is_empty() && digits.chars().all(|c| c.is_ascii_hexdigit())).then_some(digits)
}

/// The value of `token` (`0x` and hex `digits`), if it is at most `max`.
fn number_at_most(
    what: &'static str,
    token: &str,
    digits: &str,
    max: u64,
) -> Result<u64, ToolError> {
    u64::from_str_radix(digits, 16)
        .ok()
        .filter(|v| *v <= max)
        .ok_or_else(|| ToolError::OutOfRange {
            what,
            value: token.to_string(),
            max,
        })
}

/// The (status, syndrome) of the `status` form: `0xSTATUS [0xSYNDROME]`, or a dump of the
/// first 8 bytes of a command's output.
pub fn parse_status(text: &str) -> Result<(u8, u32), ToolError> {
    let tokens: Vec<&str> = text.split_whitespace().collect();
    let numbers: Option<Vec<&str>> = tokens.iter().map(|t| hex_number_digits(t)).collect();
    match numbers.as_deref() {
        Some([status] | [status, _]) => {
            let s = number_at_most("status", tokens[0], status, 0xff)?;
            let syndrome = match numbers.as_deref() {
                Some([_, syndrome]) => {
                    number_at_most("syndrome", tokens[1], syndrome, u64::from(u32::MAX))?
                }
                _ => 0,
            };
            return Ok((
                u8::try_from(s).unwrap_or(u8::MAX),
                u32::try_from(syndrome).unwrap_or(u32::MAX),
            ));
        }
        // Three or more numbers: a dump with `0x` prefixes (`0x03 0x00 ...`), or too many
        // numbers.
        Some(n) if n.len() > 2 => match parse_hex(text) {
            Ok(bytes) if bytes.len() >= 8 => {}
            _ => return Err(ToolError::StatusNumbers { got: n.len() }),
        },
        _ => {}
    }
    let bytes = parse_hex(text)?;
    if bytes.len() < 8 {
        return Err(ToolError::WrongLength {
            what: "a command status",
            want: "8 bytes (status, 3 reserved, syndrome) or `0xSTATUS [0xSYNDROME]`",
            got: bytes.len(),
        });
    }
    let syndrome = u32::from_be_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]);
    Ok((bytes[0], syndrome))
}

/// The text `hca decode` prints for a CQE.
pub fn describe_cqe(bytes: &[u8]) -> Result<String, ToolError> {
    let (raw, note) = match bytes.len() {
        CQE_SIZE => (bytes, ""),
        128 => (
            &bytes[CQE128_OFFSET..],
            " (second half of a 128-byte CQE slot)",
        ),
        n => {
            return Err(ToolError::WrongLength {
                what: "a CQE",
                want: "64 bytes (or a 128-byte CQE slot)",
                got: n,
            });
        }
    };
    let cqe = decode::cqe(raw).map_err(|e| ToolError::Decode(e.to_string()))?;
    let mut s = format!("{}{note}\n{cqe}\n", HexDump(raw));
    match (&cqe.body, cqe.wc_error()) {
        (_, Some(e)) => {
            let _ = writeln!(
                s,
                "work completion: {} vendor_err {:#04x}",
                e.status, e.vendor_err
            );
            if e.status == IbWcStatus::GeneralErr {
                s.push_str(
                    "  (a syndrome the kernel's table does not name gives IB_WC_GENERAL_ERR)\n",
                );
            }
        }
        (CqeBody::Requester(_) | CqeBody::Responder(_), None) => {
            let _ = writeln!(s, "work completion: {}", IbWcStatus::Success);
            if let CqeBody::Responder(r) = &cqe.body {
                describe_receive(&mut s, cqe.opcode, r);
            }
        }
        (CqeBody::Other(_), None) => s.push_str(
            "work completion: none: this opcode does not complete a work request (an INVALID \
             opcode is a slot the device has not written yet)\n",
        ),
        (CqeBody::Error(_), None) => {}
    }
    Ok(s)
}

/// What a successful responder CQE received, by its opcode (`MLX5_CQE_RESP_*`, the
/// kernel's include/linux/mlx5/device.h: WR_IMM 1, SEND 2, SEND_IMM 3, SEND_INV 4). The word
/// at 0x24 is read as the kernel's `handle_responder` (drivers/infiniband/hw/mlx5/cq.c) reads
/// it: immediate data for RESP_WR_IMM and RESP_SEND_IMM, the invalidated rkey for
/// RESP_SEND_INV, and the P_Key (its low 16 bits) only on QP1, whose receives are plain sends.
/// The CQE does not carry the QP type, so the GRH area (the first 40 bytes of a UD receive)
/// and the P_Key are given as what they are if the QP is UD or QP1. UD carries only SEND and
/// SEND with immediate (include/rdma/ib_pack.h, the UD opcodes): a send with invalidate (RC,
/// XRC) and an RDMA write (RC, UC) have no GRH area.
fn describe_receive(s: &mut String, opcode: CqeOpcode, r: &RespCqe) {
    let n = r.byte_cnt;
    let word = r.imm_inval_pkey;
    let ud_split = if n >= 40 {
        format!(
            " (if the QP is UD: a 40-byte GRH area + {} bytes of payload)",
            n - 40
        )
    } else {
        String::new()
    };
    match opcode {
        CqeOpcode::RESP_WR_IMM => {
            let _ = writeln!(s, "  RDMA write with immediate of {n} bytes (RC or UC)");
            let _ = writeln!(s, "  immediate data {word:#010x}");
        }
        CqeOpcode::RESP_SEND => {
            let _ = writeln!(s, "  receive of {n} bytes{ud_split}");
            if r.pkey() != 0 {
                let _ = writeln!(
                    s,
                    "  P_Key {:#06x} if the QP is QP1 (the low 16 bits of the word at 0x24; \
                     the CQE does not carry the QP type)",
                    r.pkey()
                );
            }
        }
        CqeOpcode::RESP_SEND_IMM => {
            let _ = writeln!(s, "  receive of {n} bytes{ud_split}");
            let _ = writeln!(s, "  immediate data {word:#010x}");
        }
        CqeOpcode::RESP_SEND_INV => {
            let _ = writeln!(
                s,
                "  receive of {n} bytes (a send with invalidate: RC or XRC)"
            );
            let _ = writeln!(s, "  invalidated rkey {word:#010x}");
        }
        _ => {}
    }
}

/// The text `hca decode` prints for an EQE.
pub fn describe_eqe(bytes: &[u8]) -> Result<String, ToolError> {
    if bytes.len() != EQE_SIZE {
        return Err(ToolError::WrongLength {
            what: "an EQE",
            want: "64 bytes",
            got: bytes.len(),
        });
    }
    let e = decode::eqe(bytes).map_err(|e| ToolError::Decode(e.to_string()))?;
    Ok(format!("{}\n{e}\n", HexDump(bytes)))
}

/// The text `hca decode` prints for a status.
pub fn describe_status(status: u8, syndrome: u32) -> String {
    let r = decode::status(status, syndrome);
    format!("{r}\n")
}

/// The most `hca decode` reads from standard input: 64 KiB. The largest entry it decodes is a
/// 128-byte CQE slot, whose dump in the wordiest accepted form (`xxd` lines: offset, 16 bytes
/// and their ASCII, under 80 characters) takes under 1 KiB; standard input may be a device
/// (`< /dev/zero`) that never ends.
pub const MAX_STDIN_BYTES: u64 = 64 << 10;

/// Reads all of `input` as text, refusing more than `limit` bytes.
fn read_bounded(input: impl Read, limit: u64) -> Result<String, ToolError> {
    let mut bytes = Vec::new();
    // One byte past the limit tells input at the limit from input above it.
    input
        .take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| ToolError::Stdin(e.to_string()))?;
    if bytes.len() as u64 > limit {
        return Err(ToolError::StdinTooLarge {
            limit,
            why: "many times the dump of the largest entry (a 128-byte CQE slot)",
        });
    }
    String::from_utf8(bytes).map_err(|_| ToolError::StdinNotText)
}

fn read_input(args: &Args) -> Result<String, ToolError> {
    if args.hex.is_empty() || (args.hex.len() == 1 && args.hex[0] == "-") {
        let s = read_bounded(std::io::stdin().lock(), MAX_STDIN_BYTES)?;
        if s.trim().is_empty() {
            return Err(ToolError::NoInput);
        }
        Ok(s)
    } else {
        Ok(args.hex.join(" "))
    }
}

/// Decode and print.
pub fn run(args: &Args) -> CmdResult {
    let text = read_input(args)?;
    let out = match args.kind {
        Kind::Cqe => describe_cqe(&parse_hex(&text)?)?,
        Kind::Eqe => describe_eqe(&parse_hex(&text)?)?,
        Kind::Status => {
            let (status, syndrome) = parse_status(&text)?;
            describe_status(status, syndrome)
        }
    };
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(out.as_bytes())
        .and_then(|()| stdout.flush())
        .map_err(super::stdout_error)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn standard_input_is_read_up_to_the_bound_and_refused_past_it() {
        let at = [b'0'; 16];
        assert_eq!(read_bounded(&at[..], 16).unwrap().len(), 16);
        let over = [b'0'; 17];
        assert!(matches!(
            read_bounded(&over[..], 16),
            Err(ToolError::StdinTooLarge { limit: 16, .. })
        ));
        assert!(matches!(
            read_bounded(&[0xff_u8][..], 16),
            Err(ToolError::StdinNotText)
        ));
    }

    #[test]
    fn hex_dumps_in_common_forms_parse_to_the_same_bytes() {
        let want: Vec<u8> = vec![0x00, 0x01, 0xab, 0xcd];
        for text in [
            "0001abcd",
            "00 01 ab cd",
            "0x0001 0xabcd",
            "00:01:ab:cd",
            "0000: 00 01 ab cd",
            "00000000: 0001abcd",
            "00,01,AB,CD",
        ] {
            assert_eq!(parse_hex(text).unwrap(), want, "{text}");
        }
    }

    #[test]
    fn bad_hex_says_which_token_and_why() {
        let e = parse_hex("00 01 zz").unwrap_err().to_string();
        assert!(
            e.contains("`zz`") && e.contains("line 1, token 3") && e.contains("`z`"),
            "{e}"
        );
        let e = parse_hex("00 a").unwrap_err().to_string();
        assert!(e.contains("two digits"), "{e}");
    }

    #[test]
    fn a_short_cqe_is_refused_with_the_length() {
        let e = describe_cqe(&[0u8; 63]).unwrap_err().to_string();
        assert!(e.contains("64 bytes") && e.contains("63"), "{e}");
    }

    #[test]
    fn an_error_cqe_gives_its_wc_status_from_the_table() {
        let mut b = [0u8; 64];
        b[0x36] = 0x91; // vendor syndrome
        b[0x37] = 0x13; // REMOTE_ACCESS_ERR
        b[0x38..0x3c].copy_from_slice(&0x0a00_0048u32.to_be_bytes());
        b[0x3f] = 0xd0; // REQ_ERR, owner 0
        let s = describe_cqe(&b).unwrap();
        assert!(s.contains("IB_WC_REM_ACCESS_ERR (10)"), "{s}");
        assert!(s.contains("vendor_err 0x91"), "{s}");
        b[0x37] = 0x7e; // not in the table
        let s = describe_cqe(&b).unwrap();
        assert!(s.contains("IB_WC_GENERAL_ERR (21)"), "{s}");
        assert!(s.contains("vendor_err 0x91"), "{s}");
    }

    /// A successful responder CQE of `opcode` with byte_cnt 4096 and 0xdeadbeef at 0x24.
    fn responder_cqe(opcode: u8) -> [u8; 64] {
        let mut b = [0u8; 64];
        b[0x24..0x28].copy_from_slice(&0xdead_beefu32.to_be_bytes());
        b[0x2c..0x30].copy_from_slice(&4096u32.to_be_bytes());
        b[0x38..0x3c].copy_from_slice(&0x48u32.to_be_bytes());
        b[0x3f] = opcode << 4;
        b
    }

    #[test]
    fn the_word_at_0x24_is_read_by_the_receive_opcode() {
        // RESP_SEND: the only receive that may be QP1's, so the only one with a P_Key.
        let s = describe_cqe(&responder_cqe(2)).unwrap();
        assert!(
            s.contains("if the QP is UD: a 40-byte GRH area + 4056 bytes of payload"),
            "{s}"
        );
        assert!(s.contains("P_Key 0xbeef if the QP is QP1"), "{s}");
        for (opcode, name, word, grh) in [
            (1, "RESP_WR_IMM", "immediate data 0xdeadbeef", false),
            (3, "RESP_SEND_IMM", "immediate data 0xdeadbeef", true),
            (4, "RESP_SEND_INV", "invalidated rkey 0xdeadbeef", false),
        ] {
            let s = describe_cqe(&responder_cqe(opcode)).unwrap();
            assert!(s.contains(&format!("CQE opcode {name}")), "{s}");
            assert!(s.contains(word), "{name}: {s}");
            assert!(!s.contains("P_Key") && !s.contains("QP1"), "{name}: {s}");
            assert_eq!(s.contains("GRH area"), grh, "{name}: {s}");
        }
    }

    #[test]
    fn status_accepts_bytes_or_numbers() {
        assert_eq!(parse_status("03000000 00ab1234").unwrap(), (3, 0xab1234));
        assert_eq!(parse_status("0x03 0xab1234").unwrap(), (3, 0xab1234));
        assert_eq!(parse_status("0x05").unwrap(), (5, 0));
        assert_eq!(
            parse_status("0x03 0x00 0x00 0x00 0x00 0xab 0x12 0x34").unwrap(),
            (3, 0xab1234),
            "a dump with 0x prefixes"
        );
        assert_eq!(
            parse_status("[ 5.1] 00000000: 03 00 00 00 00 ab 12 34\n").unwrap(),
            (3, 0xab1234)
        );
        assert!(parse_status("0x100").is_err());
        assert!(parse_status("0300").is_err(), "too short");
        assert!(describe_status(3, 0).contains("BAD_PARAM_ERR"));
    }

    #[test]
    fn status_with_three_numbers_says_it_takes_one_or_two() {
        for text in ["0x03 0xab1234 0x1", "0x03 0xab1234 0x10"] {
            let e = parse_status(text).unwrap_err();
            assert!(matches!(e, ToolError::StatusNumbers { got: 3 }), "{e:?}");
            assert!(e.to_string().contains("status takes 1 or 2 numbers"), "{e}");
        }
    }

    #[test]
    fn a_status_number_too_large_for_u64_is_refused_not_read_as_a_dump() {
        let e = parse_status("0xffffffffffffffffffff").unwrap_err();
        let m = e.to_string();
        assert!(
            m.contains("status 0xffffffffffffffffffff is too large") && m.contains("0xff)"),
            "{m}"
        );
        let e = parse_status("0x03 0x1ffffffffffffffffffff")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("syndrome 0x1ffffffffffffffffffff is too large"),
            "{e}"
        );
    }

    /// The error CQE of the CLI tests: syndrome 0x13, vendor syndrome 0x91, QPN 0x48,
    /// WQE counter 3, opcode REQ_ERR.
    const CQE_PLAIN: &str = "00000000 00000000 00000000 00000000 00000000 00000000 00000000 \
        00000000 00000000 00000000 00000000 00000000 00000000 00009113 0a000048 000300d0";

    /// What dmesg shows for it: mlx5_dump_err_cqe (include/linux/mlx5/cq.h) calls
    /// print_hex_dump(KERN_WARNING, "", DUMP_PREFIX_OFFSET, 16, 1, cqe, 64, false).
    const CQE_DMESG: &str = "\
[ 1234.567890] mlx5_core 0000:03:00.0: mlx5_ib_poll: WC error
[ 1234.567891] 00000000: 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00
[ 1234.567892] 00000010: 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00
[ 1234.567893] 00000020: 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00
[ 1234.567894] 00000030: 00 00 00 00 00 00 91 13 0a 00 00 48 00 03 00 d0
";

    /// `dmesg -T` and journalctl prefixes.
    const CQE_JOURNAL: &str = "\
[Mon Jan  1 12:00:00 2024] 00000000: 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00
[Mon Jan  1 12:00:00 2024] 00000010: 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00
Jan 01 12:00:00 host kernel: 00000020: 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00
Jan 01 12:00:00 host kernel: 00000030: 00 00 00 00 00 00 91 13 0a 00 00 48 00 03 00 d0
";

    /// print_hex_dump with ascii true: the ASCII column two spaces after the bytes.
    const CQE_KERNEL_ASCII: &str = "\
00000000: 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00  ................
00000010: 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00  ................
00000020: 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00  ................
00000030: 00 00 00 00 00 00 91 13 0a 00 00 48 00 03 00 d0  ...........H....
";

    /// `xxd cqe.bin`.
    const CQE_XXD: &str = "\
00000000: 0000 0000 0000 0000 0000 0000 0000 0000  ................
00000010: 0000 0000 0000 0000 0000 0000 0000 0000  ................
00000020: 0000 0000 0000 0000 0000 0000 0000 0000  ................
00000030: 0000 0000 0000 9113 0a00 0048 0003 00d0  ...........H....
";

    /// `xxd -a cqe.bin`: the all-zero lines left out.
    const CQE_XXD_A: &str = "\
00000000: 0000 0000 0000 0000 0000 0000 0000 0000  ................
*
00000030: 0000 0000 0000 9113 0a00 0048 0003 00d0  ...........H....
";

    /// `hexdump -C cqe.bin`.
    const CQE_HEXDUMP_C: &str = "\
00000000  00 00 00 00 00 00 00 00  00 00 00 00 00 00 00 00  |................|
*
00000030  00 00 00 00 00 00 91 13  0a 00 00 48 00 03 00 d0  |...........H....|
00000040
";

    /// `xxd -p cqe.bin`.
    const CQE_XXD_P: &str = "\
000000000000000000000000000000000000000000000000000000000000
00000000000000000000000000000000000000000000000091130a000048
000300d0
";

    /// `od -An -tx1 -v cqe.bin`.
    const CQE_OD: &str = " 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00
 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00
 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00
 00 00 00 00 00 00 91 13 0a 00 00 48 00 03 00 d0
";

    #[test]
    fn log_and_dump_tool_output_decodes_to_the_same_cqe_as_plain_hex() {
        let want = parse_hex(CQE_PLAIN).unwrap();
        assert_eq!(want.len(), 64);
        let decoded = describe_cqe(&want).unwrap();
        for (name, text) in [
            ("dmesg", CQE_DMESG),
            ("journal", CQE_JOURNAL),
            ("print_hex_dump ascii", CQE_KERNEL_ASCII),
            ("xxd", CQE_XXD),
            ("xxd -a", CQE_XXD_A),
            ("hexdump -C", CQE_HEXDUMP_C),
            ("xxd -p", CQE_XXD_P),
            ("od -An -tx1 -v", CQE_OD),
        ] {
            let text = if name == "dmesg" {
                // The header line is not part of the dump.
                text.split_once('\n').unwrap().1
            } else {
                text
            };
            let bytes = parse_hex(text).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(bytes, want, "{name}");
            assert_eq!(describe_cqe(&bytes).unwrap(), decoded, "{name}");
        }
        assert!(decoded.contains("IB_WC_REM_ACCESS_ERR (10)"), "{decoded}");
    }

    #[test]
    fn a_log_line_that_is_not_a_dump_is_named_by_line() {
        let e = parse_hex(CQE_DMESG).unwrap_err().to_string();
        assert!(e.contains("`mlx5_ib_poll:` (line 1, token 1)"), "{e}");
    }

    #[test]
    fn a_device_prefix_is_dropped_only_before_a_pci_address() {
        assert_eq!(
            parse_hex("mlx5_core 0000:03:00.0: 00 01 ab cd").unwrap(),
            [0, 1, 0xab, 0xcd]
        );
        assert_eq!(parse_hex("mlx5_core 03:00.7: 0001").unwrap(), [0, 1]);
        // Not a PCI address: the first token is reported.
        let e = parse_hex("mlx5_core mlx5_0: 00").unwrap_err().to_string();
        assert!(e.contains("`mlx5_core`"), "{e}");
    }

    #[test]
    fn repeated_lines_without_offsets_or_with_bad_offsets_are_refused() {
        let od = " 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00\n*\n 00 01\n";
        let e = parse_hex(od).unwrap_err().to_string();
        assert!(e.contains("line 2") && e.contains("-v"), "{e}");
        let e = parse_hex("*\n00000010: 00\n").unwrap_err().to_string();
        assert!(e.contains("no line before it"), "{e}");
        let odd = "00000000: 00 00 00 00\n*\n00000006: 01\n";
        let e = parse_hex(odd).unwrap_err().to_string();
        assert!(e.contains("not whole lines"), "{e}");
        let back = "00000010: 00 00 00 00\n*\n00000000: 01\n";
        let e = parse_hex(back).unwrap_err().to_string();
        assert!(e.contains("backwards"), "{e}");
        let huge = "00000000: 00\n*\nffffffff: 01\n";
        let e = parse_hex(huge).unwrap_err().to_string();
        assert!(e.contains("more than"), "{e}");
        let last = "00000000: 00 00\n*\n";
        assert!(parse_hex(last).is_err());
    }

    #[test]
    fn hex_after_two_spaces_is_still_read_and_bad_hex_still_refused() {
        // hexdump -C's two halves without the ASCII column, and double-spaced words.
        assert_eq!(parse_hex("00 01  02 03").unwrap(), [0, 1, 2, 3]);
        assert_eq!(parse_hex("0001  0203\n").unwrap(), [0, 1, 2, 3]);
        // Not an ASCII column: longer than the bytes before it.
        let e = parse_hex("00  zzzzz").unwrap_err().to_string();
        assert!(e.contains("`zzzzz`"), "{e}");
    }
}

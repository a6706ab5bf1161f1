//! `hca decode cqe|eqe|status HEX...`: name every field of a CQE, an EQE or a command status
//! copied from a log or a memory dump, with the work-completion status a CQE gives.

use std::fmt::Write as _;
use std::io::{Read, Write};

use firmware_cmds::mlx5::cqe::{CQE_SIZE, CQE128_OFFSET, CqeBody};
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
          receive, and for an error CQE the syndrome, vendor syndrome and the work-completion
          status the driver reports (unknown syndromes are IB_WC_GENERAL_ERR).
  eqe     64 bytes of an event queue entry: event type, subtype and the typed data (command
          slots, page request, port change, CQ or QP error).
  status  a command's status: the first 8 bytes of its output (status byte, 3 reserved bytes,
          32-bit syndrome), or the numbers themselves with 0x prefixes: STATUS [SYNDROME].

HEX is any hex dump: bytes or words with or without spaces, `0x` prefixes, colons and commas;
leading offsets ending in `:` (`0000:`, `00000010:` as the kernel's print_hex_dump writes them)
are skipped. With no HEX, or `-`, the dump is read from standard input.

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
pub fn parse_hex(text: &str) -> Result<Vec<u8>, ToolError> {
    let mut out = Vec::new();
    for (i, raw) in text
        .split(|c: char| c.is_whitespace() || c == ',')
        .filter(|t| !t.is_empty())
        .enumerate()
    {
        // An offset column (`0000:`), or `aa:bb:cc` byte lists.
        if let Some(offset) = raw.strip_suffix(':') {
            if offset.chars().all(|c| c.is_ascii_hexdigit()) && !offset.is_empty() {
                continue;
            }
        }
        for part in raw.split(':').filter(|p| !p.is_empty()) {
            let digits = part
                .strip_prefix("0x")
                .or_else(|| part.strip_prefix("0X"))
                .unwrap_or(part);
            if let Some(bad) = digits.chars().find(|c| !c.is_ascii_hexdigit()) {
                return Err(ToolError::BadHex {
                    token: raw.to_string(),
                    position: i + 1,
                    reason: format!("`{bad}` is not a hex digit"),
                });
            }
            if digits.is_empty() || digits.len() % 2 != 0 {
                return Err(ToolError::BadHex {
                    token: raw.to_string(),
                    position: i + 1,
                    reason: format!(
                        "{} hex digits: bytes need two digits each (write 0a, not a)",
                        digits.len()
                    ),
                });
            }
            for pair in digits.as_bytes().chunks(2) {
                let s = std::str::from_utf8(pair).unwrap_or("00");
                out.push(u8::from_str_radix(s, 16).unwrap_or(0));
            }
        }
    }
    Ok(out)
}

/// A number with a `0x` prefix (the numeric form of `status`).
fn hex_number(token: &str) -> Option<u64> {
    let digits = token
        .strip_prefix("0x")
        .or_else(|| token.strip_prefix("0X"))?;
    u64::from_str_radix(digits, 16).ok()
}

/// The (status, syndrome) of the `status` form.
pub fn parse_status(tokens: &[String]) -> Result<(u8, u32), ToolError> {
    let numeric: Option<Vec<u64>> = tokens.iter().map(|t| hex_number(t)).collect();
    if let Some(nums) = numeric {
        if (1..=2).contains(&nums.len()) {
            let status = u8::try_from(nums[0]).map_err(|_| ToolError::OutOfRange {
                what: "status",
                value: nums[0],
                max: 0xff,
            })?;
            let syndrome = nums.get(1).copied().unwrap_or(0);
            let syndrome = u32::try_from(syndrome).map_err(|_| ToolError::OutOfRange {
                what: "syndrome",
                value: syndrome,
                max: u64::from(u32::MAX),
            })?;
            return Ok((status, syndrome));
        }
    }
    let bytes = parse_hex(&tokens.join(" "))?;
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
                if r.byte_cnt >= 40 {
                    let _ = writeln!(
                        s,
                        "  receive of {} bytes: {}-byte GRH area + {} bytes of payload{}",
                        r.byte_cnt,
                        40,
                        r.byte_cnt - 40,
                        if r.pkey() != 0 {
                            format!(", P_Key {:#06x} (a QP1 receive)", r.pkey())
                        } else {
                            String::new()
                        }
                    );
                }
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
            let tokens: Vec<String> = text.split_whitespace().map(String::from).collect();
            let (status, syndrome) = parse_status(&tokens)?;
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
            e.contains("`zz`") && e.contains("token 3") && e.contains("`z`"),
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

    #[test]
    fn status_accepts_bytes_or_numbers() {
        let t = |v: &[&str]| v.iter().map(|s| (*s).to_string()).collect::<Vec<_>>();
        assert_eq!(
            parse_status(&t(&["03000000", "00ab1234"])).unwrap(),
            (3, 0xab1234)
        );
        assert_eq!(
            parse_status(&t(&["0x03", "0xab1234"])).unwrap(),
            (3, 0xab1234)
        );
        assert_eq!(parse_status(&t(&["0x05"])).unwrap(), (5, 0));
        assert!(parse_status(&t(&["0x100"])).is_err());
        assert!(parse_status(&t(&["0300"])).is_err(), "too short");
        assert!(describe_status(3, 0).contains("BAD_PARAM_ERR"));
    }
}

//! The kernel log as `/dev/kmsg` hands it out, and the IOMMU fault lines in it: how the QEMU
//! guest test sees that the IOMMU refused a DMA.
//!
//! `/dev/kmsg` gives one record per `read`: `PRIO,SEQ,TIMESTAMP,FLAGS;MESSAGE`, then
//! continuation lines (` KEY=VALUE`) that we ignore. A reader that seeks to the end sees only
//! records logged after it opened.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::fs::OpenOptionsExt;
use std::time::{Duration, Instant};

/// A reader of `/dev/kmsg` that starts at the records logged after it was opened.
#[derive(Debug)]
pub struct Kmsg {
    file: File,
}

/// The message text of a `/dev/kmsg` record (after the `;`, first line only), or None when
/// the record has no `;`.
pub fn record_text(record: &str) -> Option<&str> {
    let (_, text) = record.split_once(';')?;
    Some(text.lines().next().unwrap_or(""))
}

/// One IOMMU fault as Intel's DMAR driver reports it, e.g.
/// `DMAR: [DMA Write NO_PASID] Request device [00:03.0] fault addr 0x8000000 [fault reason
/// 0x05] PTE Write access is not set`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DmarFault {
    /// The requester, `bus:device.function` as the kernel prints it (`00:03.0`).
    pub device: String,
    /// The faulting address (the page, as the IOMMU records it).
    pub addr: u64,
    /// True for a device write, false for a read.
    pub write: bool,
    /// The rest of the line after the address: the fault reason.
    pub reason: String,
}

/// Parse a DMAR fault line (the message text, with or without its `DMAR: ` prefix); None for
/// any other line.
pub fn parse_dmar_fault(text: &str) -> Option<DmarFault> {
    let text = text.trim();
    let body = text.strip_prefix("DMAR:").unwrap_or(text).trim_start();
    let write = if body.starts_with("[DMA Write") {
        true
    } else if body.starts_with("[DMA Read") {
        false
    } else {
        return None;
    };
    let after_dev = body.split_once("Request device [")?.1;
    let (device, rest) = after_dev.split_once(']')?;
    let after_addr = rest.split_once("fault addr ")?.1;
    let (token, reason) = after_addr
        .split_once(char::is_whitespace)
        .unwrap_or((after_addr, ""));
    let hex = token
        .strip_prefix("0x")
        .or_else(|| token.strip_prefix("0X"))?;
    let addr = u64::from_str_radix(hex, 16).ok()?;
    Some(DmarFault {
        device: device.to_string(),
        addr,
        write,
        reason: reason.trim().to_string(),
    })
}

impl Kmsg {
    /// Open `/dev/kmsg` non-blocking and skip everything already logged.
    pub fn open_at_end() -> io::Result<Self> {
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open("/dev/kmsg")?;
        file.seek(SeekFrom::End(0))?;
        Ok(Kmsg { file })
    }

    /// The message texts of every record logged since the last call (or the open).
    pub fn drain(&mut self) -> io::Result<Vec<String>> {
        // One record per read; a record never exceeds the kernel's 8 KiB line limit.
        let mut buf = vec![0u8; 16 * 1024];
        let mut out = Vec::new();
        loop {
            match self.file.read(&mut buf) {
                Ok(0) => return Ok(out),
                Ok(n) => {
                    let record = String::from_utf8_lossy(&buf[..n]);
                    if let Some(text) = record_text(&record) {
                        out.push(text.to_string());
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(out),
                // EPIPE: records were overwritten before we read them; carry on from the next.
                Err(e) if e.raw_os_error() == Some(libc::EPIPE) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Read records until one satisfies `found` or `timeout` passes; returns that record's
    /// text (if any) and every text read meanwhile.
    pub fn wait_for(
        &mut self,
        timeout: Duration,
        mut found: impl FnMut(&str) -> bool,
    ) -> io::Result<(Option<String>, Vec<String>)> {
        let deadline = Instant::now() + timeout;
        let mut seen = Vec::new();
        loop {
            for text in self.drain()? {
                if found(&text) {
                    let hit = text.clone();
                    seen.push(text);
                    return Ok((Some(hit), seen));
                }
                seen.push(text);
            }
            if Instant::now() >= deadline {
                return Ok((None, seen));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The line observed in the guest (reference vfio-userspace.md §3.2).
    const OBSERVED: &str = "DMAR: [DMA Write NO_PASID] Request device [00:03.0] fault addr \
                            0x8000000 [fault reason 0x05] PTE Write access is not set";

    #[test]
    fn parses_the_fault_line_seen_in_the_guest() {
        let f = parse_dmar_fault(OBSERVED).unwrap();
        assert_eq!(
            f,
            DmarFault {
                device: "00:03.0".into(),
                addr: 0x800_0000,
                write: true,
                reason: "[fault reason 0x05] PTE Write access is not set".into(),
            }
        );
    }

    #[test]
    fn parses_a_read_fault_and_tells_addresses_apart() {
        let line = "[DMA Read NO_PASID] Request device [00:03.0] fault addr 0x80000 [fault \
                    reason 0x06] PTE Read access is not set";
        let f = parse_dmar_fault(line).unwrap();
        assert!(!f.write);
        assert_eq!(
            f.addr, 0x8_0000,
            "0x80000, not a prefix of a longer address"
        );
        assert_ne!(f.addr, 0x80_0000);
    }

    #[test]
    fn other_lines_are_not_faults() {
        for line in [
            "DMAR: DRHD: handling fault status reg 2",
            "DMAR-IR: Enabled IRQ remapping in xapic mode",
            "vfio-pci 0000:00:03.0: enabling device (0103 -> 0107)",
            "DMAR: [DMA Write NO_PASID] Request device [00:03.0] fault addr zz",
            "",
        ] {
            assert_eq!(parse_dmar_fault(line), None, "{line}");
        }
    }

    #[test]
    fn record_text_takes_the_message_after_the_header() {
        let record =
            format!("3,1234,5678901,-;{OBSERVED}\n SUBSYSTEM=pci\n DEVICE=+pci:0000:00:03.0\n");
        assert_eq!(record_text(&record), Some(OBSERVED));
        assert_eq!(record_text("no header"), None);
    }
}

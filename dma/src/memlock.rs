//! `RLIMIT_MEMLOCK` and `CAP_IPC_LOCK`: may this process pin more memory for DMA?

use crate::DmaError;

/// Bit of `CAP_IPC_LOCK` in the capability sets of `/proc/self/status`.
const CAP_IPC_LOCK: u32 = 14;

/// The soft `RLIMIT_MEMLOCK` of this process in bytes (`u64::MAX` when unlimited).
pub fn memlock_limit() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit into the struct we own; no other memory is touched.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &raw mut lim) };
    if rc != 0 || lim.rlim_cur == libc::RLIM_INFINITY {
        return u64::MAX;
    }
    lim.rlim_cur
}

/// True when the effective capability set holds `CAP_IPC_LOCK` (VFIO then does not charge
/// pinned pages against `RLIMIT_MEMLOCK`).
pub fn has_cap_ipc_lock() -> bool {
    let Ok(status) = std::fs::read_to_string("/proc/self/status") else {
        return false;
    };
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .is_some_and(|caps| caps & (1 << CAP_IPC_LOCK) != 0)
}

/// The `VmLck:` figure of a `/proc/<pid>/status` text, in bytes.
fn parse_vm_lck(status: &str) -> Option<u64> {
    let kib = status
        .lines()
        .find_map(|l| l.strip_prefix("VmLck:"))?
        .trim()
        .strip_suffix("kB")?
        .trim()
        .parse::<u64>()
        .ok()?;
    kib.checked_mul(1024)
}

/// Bytes of this process already counted against `RLIMIT_MEMLOCK` (`VmLck`: `mlock`ed memory
/// and the pages VFIO type1 has pinned for it), or None when /proc does not say.
pub fn locked_bytes() -> Option<u64> {
    parse_vm_lck(&std::fs::read_to_string("/proc/self/status").ok()?)
}

/// Check that pinning `already + extra` bytes stays within `limit`, as VFIO type1 will check it.
///
/// `exempt` is true for a process with `CAP_IPC_LOCK`.
pub fn check_memlock(already: u64, extra: u64, limit: u64, exempt: bool) -> Result<(), DmaError> {
    let needed = already.saturating_add(extra);
    if exempt || needed <= limit {
        return Ok(());
    }
    Err(DmaError::MemlockTooLow {
        needed,
        needed_kib: needed.div_ceil(1024),
        limit,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn within_limit_is_allowed() {
        assert!(check_memlock(4096, 4096, 8192, false).is_ok());
    }

    #[test]
    fn over_limit_names_size_and_fixes() {
        let err = check_memlock(8 << 20, 4096, 8 << 20, false).unwrap_err();
        let msg = err.to_string();
        assert!(matches!(
            err,
            DmaError::MemlockTooLow { needed, limit, .. } if needed == (8 << 20) + 4096 && limit == 8 << 20
        ));
        assert!(msg.contains("ulimit -l 8196"), "{msg}");
        assert!(msg.contains("CAP_IPC_LOCK"), "{msg}");
    }

    #[test]
    fn vm_lck_is_read_in_bytes() {
        let status = "Name:\tcat\nVmPeak:\t    5000 kB\nVmLck:\t      48 kB\nVmPin:\t       0 kB\n";
        assert_eq!(parse_vm_lck(status), Some(48 * 1024));
        assert_eq!(parse_vm_lck("Name:\tcat\n"), None);
        assert_eq!(parse_vm_lck("VmLck:\t lots kB\n"), None);
        // This process: /proc is there on Linux, and nothing forces a figure.
        assert!(locked_bytes().is_some());
    }

    #[test]
    fn capability_exempts() {
        assert!(check_memlock(u64::MAX / 2, u64::MAX / 2, 0, true).is_ok());
    }
}

//! `RLIMIT_MEMLOCK` and `CAP_IPC_LOCK`: may this process pin more memory for DMA?
//!
//! VFIO type1 charges the pages it pins to the process's locked memory (`VmLck`) and refuses
//! a map with `ENOMEM` past `RLIMIT_MEMLOCK`, unless the process has `CAP_IPC_LOCK` in the
//! *initial* user namespace (`capable(CAP_IPC_LOCK)` in `vfio_dma_do_map`,
//! drivers/vfio/vfio_iommu_type1.c). [`MemlockState`] makes the same judgement before a map
//! (so a low limit is a [`DmaError::MemlockTooLow`] naming the fix, not a bare `ENOMEM`) and
//! after the kernel's `ENOMEM`.

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

/// True when this process has `CAP_IPC_LOCK` as VFIO sees it, so VFIO does not charge pinned
/// pages against `RLIMIT_MEMLOCK`: see [`cap_ipc_lock_exempts`], here with this process's
/// `/proc/self/status` and `/proc/self/uid_map`.
pub fn has_cap_ipc_lock() -> bool {
    let Ok(status) = std::fs::read_to_string("/proc/self/status") else {
        return false;
    };
    match std::fs::read_to_string("/proc/self/uid_map") {
        Ok(uid_map) => cap_ipc_lock_exempts(&status, Some(&uid_map)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => cap_ipc_lock_exempts(&status, None),
        Err(_) => false,
    }
}

/// Whether a process with this `/proc/<pid>/status` text and `/proc/<pid>/uid_map` text (`None`:
/// the file does not exist, a kernel without user namespaces) is exempt from VFIO's memlock
/// accounting.
///
/// `CapEff` lists the capabilities in the process's own user namespace, but VFIO asks
/// `capable(CAP_IPC_LOCK)`, which is about the initial user namespace: a rootless container
/// or `unshare -Ur` shows `CAP_IPC_LOCK` in `CapEff` and is charged all the same. So the
/// capability counts only when `uid_map` is the identity map of the initial namespace, the
/// single line `0 0 4294967295` (user_namespaces(7)). A child namespace that its creator gave
/// that same full identity map is not told apart; it is still caught after the fact, as
/// [`MemlockState::explain_enomem`] does not trust the exemption.
pub fn cap_ipc_lock_exempts(status: &str, uid_map: Option<&str>) -> bool {
    let has_cap = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .is_some_and(|caps| caps & (1 << CAP_IPC_LOCK) != 0);
    has_cap && uid_map.is_none_or(is_initial_uid_map)
}

/// True for the uid map of the initial user namespace: one line `0 0 4294967295`.
fn is_initial_uid_map(uid_map: &str) -> bool {
    let mut lines = uid_map.lines().filter(|l| !l.trim().is_empty());
    let (Some(line), None) = (lines.next(), lines.next()) else {
        return false;
    };
    let fields: Vec<Option<u64>> = line.split_whitespace().map(|f| f.parse().ok()).collect();
    fields == [Some(0), Some(0), Some(u64::from(u32::MAX))]
}

/// This process's `RLIMIT_MEMLOCK` and exemption, as a mapper judges one map by them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemlockState {
    /// The soft `RLIMIT_MEMLOCK` in bytes ([`memlock_limit`]).
    pub limit: u64,
    /// `CAP_IPC_LOCK` in the initial user namespace ([`has_cap_ipc_lock`]).
    pub exempt: bool,
}

impl MemlockState {
    /// The limit and exemption of this process now.
    pub fn current() -> Self {
        MemlockState {
            limit: memlock_limit(),
            exempt: has_cap_ipc_lock(),
        }
    }

    /// Before a map of `len` bytes, with `pinned` bytes already pinned by this mapper:
    /// [`DmaError::MemlockTooLow`] when the limit would be passed and the process is not exempt.
    pub fn check(&self, pinned: u64, len: u64) -> Result<(), DmaError> {
        check_memlock(pinned, len, self.limit, self.exempt)
    }

    /// After the kernel refused a map of `len` bytes with `ENOMEM`: the
    /// [`DmaError::MemlockTooLow`] to report when what the kernel counts (`locked`, this
    /// process's `VmLck`, or at least our own `pinned` bytes) plus `len` passes the limit;
    /// `None` when it does not (the `ENOMEM` has another cause).
    ///
    /// Whatever [`MemlockState::exempt`] says: the kernel just refused, so an exemption we
    /// believed in was not one VFIO honours.
    pub fn explain_enomem(&self, pinned: u64, locked: Option<u64>, len: u64) -> Option<DmaError> {
        let already = locked.map_or(pinned, |l| l.max(pinned));
        check_memlock(already, len, self.limit, false).err()
    }
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

    /// `CapEff` of a process with every capability (CAP_IPC_LOCK is bit 14), and without it.
    const ALL_CAPS: &str = "Name:\tx\nCapInh:\t0000000000000000\nCapEff:\t000001ffffffffff\n";
    const NO_IPC_LOCK: &str = "Name:\tx\nCapEff:\t000001ffffffbfff\n";
    /// `/proc/self/uid_map` in the initial user namespace (the kernel pads with spaces).
    const INIT_UID_MAP: &str = "         0          0 4294967295\n";

    #[test]
    fn cap_ipc_lock_exempts_only_in_the_initial_user_namespace() {
        assert!(cap_ipc_lock_exempts(ALL_CAPS, Some(INIT_UID_MAP)));
        assert!(cap_ipc_lock_exempts(ALL_CAPS, Some("0 0 4294967295")));
        // A kernel without user namespaces has no uid_map: every process is in the first.
        assert!(cap_ipc_lock_exempts(ALL_CAPS, None));
        // Root of a rootless container (`unshare -Ur`, podman): all of CapEff, but only in
        // its own namespace.
        for uid_map in [
            // `unshare -Ur` run as root: uid 0 mapped, but as a one-id map.
            "         0          0          1\n",
            "         0       1000          1\n",
            "         0       1000          1\n         1     100000      65536\n",
            "         0          0 4294967294\n",
            "         0          0 4294967295\n         0          0 4294967295\n",
            "",
            "0 0 lots\n",
        ] {
            assert!(
                !cap_ipc_lock_exempts(ALL_CAPS, Some(uid_map)),
                "{uid_map:?}"
            );
        }
        assert!(!cap_ipc_lock_exempts(NO_IPC_LOCK, Some(INIT_UID_MAP)));
        assert!(!cap_ipc_lock_exempts("Name:\tx\n", Some(INIT_UID_MAP)));
        assert!(!cap_ipc_lock_exempts("CapEff:\tzz\n", Some(INIT_UID_MAP)));
    }

    /// The pre-check of a rootless container with a low limit: its CapEff does not spare it.
    #[test]
    fn a_user_namespace_root_is_checked_against_its_limit() {
        let exempt = cap_ipc_lock_exempts(ALL_CAPS, Some("0 1000 1\n"));
        let state = MemlockState {
            limit: 64 << 10,
            exempt,
        };
        let err = state.check(48 << 10, 32 << 10).unwrap_err();
        assert!(
            matches!(err, DmaError::MemlockTooLow { needed, limit, .. } if needed == 80 << 10 && limit == 64 << 10),
            "{err:?}"
        );
        assert!(state.check(0, 32 << 10).is_ok());
    }

    /// The kernel's ENOMEM over the limit is reported as MemlockTooLow even when the process
    /// was believed exempt; under the limit it is some other shortage.
    #[test]
    fn an_enomem_past_the_limit_is_memlock_too_low_whatever_the_exemption() {
        for exempt in [false, true] {
            let state = MemlockState {
                limit: 64 << 10,
                exempt,
            };
            // 48 KiB mlocked elsewhere (VmLck) and none pinned by us: 80 KiB needed.
            let err = state.explain_enomem(0, Some(48 << 10), 32 << 10);
            assert!(
                matches!(err, Some(DmaError::MemlockTooLow { needed, limit, .. }) if needed == 80 << 10 && limit == 64 << 10),
                "exempt {exempt}: {err:?}"
            );
            // Without VmLck, our own pins count.
            let err = state.explain_enomem(40 << 10, None, 32 << 10);
            assert!(
                matches!(err, Some(DmaError::MemlockTooLow { needed, .. }) if needed == 72 << 10),
                "exempt {exempt}: {err:?}"
            );
            assert!(
                state.explain_enomem(0, Some(16 << 10), 32 << 10).is_none(),
                "exempt {exempt}: within the limit, the ENOMEM is not about memlock"
            );
        }
    }
}

//! The VFIO path on a real kernel: boot Debian's kernel in a QEMU TCG guest with an emulated
//! VT-d and QEMU's `edu` device (`qemu/vfio-guest.sh`), run the guest program
//! (`src/bin/vfio_guest`) there, and check that every guest test passed.
//!
//! Needs the Debian packages qemu-system-x86, linux-image-amd64, busybox-static and cpio, and
//! root (to read /boot/vmlinuz-*). Without them the test fails under CI (`CI` set) with the
//! harness's message naming what to install, and is skipped with that message elsewhere.

use std::path::Path;
use std::process::Command;

/// The guest tests, each of which must report `ok`.
const GUEST_TESTS: [&str; 11] = [
    "bind_open_info",
    "id_liveness",
    "factorial_msi",
    "dma_roundtrip_strict",
    "dma_roundtrip_pooled",
    "dma_unmapped_iova_faults",
    "lease_outlives_backend",
    "memlock_unprivileged",
    "memlock_kernel_enforced",
    "req_unbind",
    "accounting_zero",
];

/// The exit status of `vfio-guest.sh` when a prerequisite is missing.
const MISSING_PREREQUISITE: i32 = 3;

#[test]
fn vfio_path_in_a_qemu_guest() {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("qemu/vfio-guest.sh");
    let guest = env!("CARGO_BIN_EXE_vfio-guest");

    let check = Command::new(&script)
        .arg("--check")
        .output()
        .expect("running vfio-guest.sh --check");
    if check.status.code() == Some(MISSING_PREREQUISITE) {
        let why = String::from_utf8_lossy(&check.stderr);
        let msg = format!(
            "the QEMU VFIO test cannot run: {} (.ci/run installs the packages)",
            why.trim()
        );
        assert!(std::env::var_os("CI").is_none(), "{msg}");
        eprintln!("skipped: {msg}");
        return;
    }
    assert!(
        check.status.success(),
        "vfio-guest.sh --check failed: {}",
        String::from_utf8_lossy(&check.stderr)
    );

    let run = Command::new(&script)
        .arg(guest)
        .output()
        .expect("running vfio-guest.sh");
    let stdout = String::from_utf8_lossy(&run.stdout);
    let stderr = String::from_utf8_lossy(&run.stderr);
    // The guest's own lines, for whoever reads the test output.
    println!("{stdout}");
    if !stderr.trim().is_empty() {
        eprintln!("{stderr}");
    }
    assert!(
        run.status.success(),
        "the guest run failed ({}); output above",
        run.status
    );
    for name in GUEST_TESTS {
        let line = format!("TEST {name} ... ok");
        assert!(
            stdout.lines().any(|l| l == line),
            "the guest did not report `{line}`"
        );
    }
    let summary = format!("{} passed, 0 failed", GUEST_TESTS.len());
    assert!(
        stdout.lines().any(|l| l == summary),
        "no `{summary}` line from the guest"
    );
}

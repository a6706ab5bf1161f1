//! The parts that run in other processes, started from this same binary: the unprivileged
//! memlock tests (uid 1000, no capabilities, a 64 KiB `RLIMIT_MEMLOCK`) and the unbind that
//! makes vfio-pci send the REQ interrupt. Each child prints its results on stdout; the parent
//! waits for it with a deadline and kills it when the deadline passes.

use std::io::Read as _;
use std::os::unix::process::CommandExt as _;
use std::process::{Child, Command, ExitCode, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use dma::{Access, DmaError, LeaseMode, PoolConfig};
use driver::PciAddress;
use driver::sysfs::{Restore, Sysfs};
use hca_tests::edu;

use crate::ensure;
use crate::runner::{Fail, Outcome, Runner};

/// The unprivileged user of the guest's /etc/passwd.
const TESTER_UID: u32 = 1000;
/// Its group.
const TESTER_GID: u32 = 1000;
/// The memlock limit the child sets for itself.
const MEMLOCK_LIMIT: u64 = 64 * 1024;
/// `CAP_IPC_LOCK`'s bit in the capability sets of /proc/self/status.
const CAP_IPC_LOCK_BIT: u32 = 14;

/// The tests the memlock child reports, in order.
pub const MEMLOCK_TESTS: [&str; 2] = ["memlock_unprivileged", "memlock_kernel_enforced"];

/// Start this binary again with `args`.
fn this_binary(args: &[&str]) -> Result<Command, Fail> {
    let exe = std::env::current_exe()?;
    let mut cmd = Command::new(exe);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    Ok(cmd)
}

/// True while `child` has not exited.
pub fn still_running(child: &mut Child) -> bool {
    matches!(child.try_wait(), Ok(None))
}

/// Wait for `child` until `deadline` (killing it then), and collect its stdout and stderr.
pub fn finish(mut child: Child, deadline: Instant) -> Result<(ExitStatus, String), Fail> {
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            // A process blocked in an unbind cannot die until the device is released, so do
            // not wait for it unboundedly.
            let reaped = (0..200).any(|_| {
                std::thread::sleep(Duration::from_millis(10));
                matches!(child.try_wait(), Ok(Some(_)))
            });
            return Err(Fail(format!(
                "child process {} did not finish in time; killed it{}",
                child.id(),
                if reaped { "" } else { " (it is still stuck)" }
            )));
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let mut out = String::new();
    if let Some(mut s) = child.stdout.take() {
        s.read_to_string(&mut out)?;
    }
    if let Some(mut s) = child.stderr.take() {
        let mut err = String::new();
        s.read_to_string(&mut err)?;
        if !err.trim().is_empty() {
            out.push_str("\nstderr: ");
            out.push_str(err.trim());
        }
    }
    Ok((status, out))
}

/// Start the process that unbinds `address` from vfio-pci (and blocks while we hold it).
pub fn spawn_unbind(address: PciAddress) -> Result<Child, Fail> {
    Ok(this_binary(&["--unbind", &address.to_string()])?.spawn()?)
}

/// `--unbind BDF`: take BDF off vfio-pci through the project's sysfs helper, which clears
/// `driver_override` and writes BDF to the driver's `unbind` (the vfio-pci driver's own file,
/// through the device's `driver` link); leave it without a driver.
pub fn unbind_child(bdf: &str) -> ExitCode {
    let address: PciAddress = match bdf.parse() {
        Ok(a) => a,
        Err(e) => {
            println!("UNBIND FAILED: {e}");
            return ExitCode::FAILURE;
        }
    };
    let start = Instant::now();
    match Sysfs::default().unbind_vfio(address, &Restore::Unbound) {
        Ok(u) => {
            println!(
                "UNBIND ok after {} ms, driver now {:?}",
                start.elapsed().as_millis(),
                u.driver
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            println!("UNBIND FAILED: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Run the memlock child as uid 1000 with `/dev/vfio/<group>` given to it, and report its
/// results as this suite's lines.
pub fn memlock_tests(r: &mut Runner, address: PciAddress, group: u32) {
    let node = format!("/dev/vfio/{group}");
    let run = || -> Result<(ExitStatus, String), Fail> {
        std::os::unix::fs::chown(&node, Some(TESTER_UID), Some(TESTER_GID))?;
        let mut cmd = this_binary(&["--memlock-child", &address.to_string()])?;
        // Dropping from root to uid 1000 clears every capability (and std drops the
        // supplementary groups); the child checks that it holds none.
        cmd.uid(TESTER_UID).gid(TESTER_GID);
        let child = cmd.spawn()?;
        finish(child, Instant::now() + Duration::from_secs(40))
    };
    let result = run();
    let restored = std::os::unix::fs::chown(&node, Some(0), Some(0));
    let (status, out) = match result {
        Ok(r) => r,
        Err(Fail(why)) => {
            for name in MEMLOCK_TESTS {
                r.report(name, Err(Fail(format!("the memlock child: {why}"))));
            }
            return;
        }
    };
    for line in out.lines().filter_map(|l| l.strip_prefix("CHILD: ")) {
        crate::runner::say(&format!("GUEST: memlock child: {line}"));
    }
    for name in MEMLOCK_TESTS {
        let prefix = format!("RESULT {name} ");
        let line = out.lines().find_map(|l| l.strip_prefix(prefix.as_str()));
        let outcome = match line {
            Some("ok") => Ok(()),
            Some(other) => Err(Fail(
                other.strip_prefix("FAILED: ").unwrap_or(other).to_string(),
            )),
            None => Err(Fail(format!(
                "the memlock child ({status}) printed no result: {}",
                out.trim()
            ))),
        };
        r.report(name, outcome);
    }
    if let Err(e) = restored {
        crate::runner::say(&format!("GUEST: could not give {node} back to root: {e}"));
    }
}

/// A capability set (`CapPrm`, `CapEff`, ...) of this process, from /proc/self/status.
fn cap_set(name: &str) -> Result<u64, Fail> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    let hex = status
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .ok_or_else(|| Fail(format!("no {name} in /proc/self/status")))?;
    Ok(u64::from_str_radix(hex.trim(), 16)?)
}

/// `VmLck` of this process in bytes: memory counted against `RLIMIT_MEMLOCK` (mlock and
/// VFIO's pins alike).
fn vm_locked() -> Result<u64, Fail> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    let kib = status
        .lines()
        .find_map(|l| l.strip_prefix("VmLck:"))
        .and_then(|v| v.trim().strip_suffix("kB"))
        .ok_or_else(|| Fail("no VmLck in /proc/self/status".into()))?;
    Ok(kib.trim().parse::<u64>()? * 1024)
}

/// The child's preconditions: really unprivileged, and the low limit set.
fn drop_to_low_limit() -> Outcome {
    // SAFETY: plain syscalls without pointers.
    let (uid, euid, gid) = unsafe { (libc::getuid(), libc::geteuid(), libc::getgid()) };
    ensure!(
        uid == TESTER_UID && euid == TESTER_UID && gid == TESTER_GID,
        "running as uid {uid} euid {euid} gid {gid}, expected {TESTER_UID}/{TESTER_GID}"
    );
    let (prm, eff) = (cap_set("CapPrm")?, cap_set("CapEff")?);
    ensure!(
        (prm | eff) & (1 << CAP_IPC_LOCK_BIT) == 0,
        "the child holds CAP_IPC_LOCK (CapPrm {prm:#x}, CapEff {eff:#x}): the limit would not apply"
    );
    ensure!(
        !dma::memlock::has_cap_ipc_lock(),
        "dma::memlock::has_cap_ipc_lock() says the child has CAP_IPC_LOCK"
    );
    let lim = libc::rlimit {
        rlim_cur: MEMLOCK_LIMIT,
        rlim_max: MEMLOCK_LIMIT,
    };
    // SAFETY: setrlimit reads the struct we own.
    let rc = unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &raw const lim) };
    ensure!(
        rc == 0,
        "setrlimit(RLIMIT_MEMLOCK, 64 KiB): {}",
        std::io::Error::last_os_error()
    );
    let now = dma::memlock::memlock_limit();
    ensure!(
        now == MEMLOCK_LIMIT,
        "RLIMIT_MEMLOCK reads {now} after setting {MEMLOCK_LIMIT}"
    );
    Ok(())
}

/// Mapping 1 MiB under a 64 KiB limit fails with `MemlockTooLow`, while a mapping within the
/// limit works (so the failure is the limit's, not a missing permission).
fn memlock_unprivileged(pool: &dma::DmaPool) -> Outcome {
    let mapper = pool.mapper();
    let small = pool.lease(16 * 1024, 4096, Access::ReadWrite)?;
    ensure!(
        mapper.live_mappings() == 1,
        "16 KiB leased, {} live mappings",
        mapper.live_mappings()
    );
    drop(small);
    ensure!(
        mapper.live_mappings() == 0,
        "{} live mappings after the drop",
        mapper.live_mappings()
    );
    match pool.lease(1 << 20, 4096, Access::ReadWrite) {
        Ok(lease) => {
            return Err(Fail(format!(
                "1 MiB was mapped under a {MEMLOCK_LIMIT}-byte RLIMIT_MEMLOCK: {lease:?}"
            )));
        }
        Err(e @ DmaError::MemlockTooLow { needed, limit, .. }) => {
            let msg = e.to_string();
            ensure!(
                limit == MEMLOCK_LIMIT && needed >= 1 << 20,
                "MemlockTooLow with limit {limit} and needed {needed}: {msg}"
            );
            ensure!(
                msg.contains("ulimit -l") && msg.contains("CAP_IPC_LOCK"),
                "the message does not say what to do (ulimit -l, CAP_IPC_LOCK): {msg}"
            );
            println!("CHILD: 1 MiB under 64 KiB: {msg}");
        }
        Err(other) => {
            return Err(Fail(format!(
                "expected DmaError::MemlockTooLow, got {other:?}: {other}"
            )));
        }
    }
    let acc = pool.accounting();
    ensure!(
        acc.leases_out == 0 && acc.live_mappings == 0 && pool.iova_stats().allocations == 0,
        "the failed lease left something behind: {acc:?}, {:?}",
        pool.iova_stats()
    );
    Ok(())
}

/// Memory already locked with `mlock` counts against the same limit in the kernel: a mapping
/// our own bookkeeping lets through (no pins of ours yet) is refused by the kernel, and the
/// project reports that as `MemlockTooLow` too, with the locked memory in its figure.
fn memlock_kernel_enforced(pool: &dma::DmaPool) -> Outcome {
    const LOCKED: usize = 48 * 1024;
    const LEASE: usize = 32 * 1024;
    // SAFETY: a new private anonymous mapping; only the syscalls below touch it.
    let mem = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            LOCKED,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    ensure!(
        mem != libc::MAP_FAILED,
        "mmap: {}",
        std::io::Error::last_os_error()
    );
    let result = (|| -> Outcome {
        // SAFETY: locks our own mapping of LOCKED bytes.
        let rc = unsafe { libc::mlock(mem, LOCKED) };
        ensure!(
            rc == 0,
            "mlock of 48 KiB under a 64 KiB limit: {}",
            std::io::Error::last_os_error()
        );
        let locked = vm_locked()?;
        ensure!(
            locked >= LOCKED as u64,
            "VmLck is {locked} bytes after locking {LOCKED}"
        );
        match pool.lease(LEASE, 4096, Access::ReadWrite) {
            Ok(lease) => {
                return Err(Fail(format!(
                    "{LEASE} bytes were mapped with {locked} bytes already locked under a \
                     {MEMLOCK_LIMIT}-byte limit: {lease:?}"
                )));
            }
            Err(e @ DmaError::MemlockTooLow { needed, limit, .. }) => {
                let msg = e.to_string();
                ensure!(
                    limit == MEMLOCK_LIMIT && needed > limit,
                    "MemlockTooLow must count the locked memory: needed {needed}, limit {limit}: {msg}"
                );
                println!("CHILD: {LEASE} bytes with {locked} locked: {msg}");
            }
            Err(other) => {
                return Err(Fail(format!(
                    "expected DmaError::MemlockTooLow from the kernel's refusal, got {other:?}: {other}"
                )));
            }
        }
        // SAFETY: unlocks our own mapping.
        let rc = unsafe { libc::munlock(mem, LOCKED) };
        ensure!(rc == 0, "munlock: {}", std::io::Error::last_os_error());
        let lease = pool.lease(LEASE, 4096, Access::ReadWrite).map_err(|e| {
            Fail(format!(
                "with the mlock gone, {LEASE} bytes still do not map: {e}"
            ))
        })?;
        drop(lease);
        let acc = pool.accounting();
        ensure!(
            acc.leases_out == 0 && acc.live_mappings == 0,
            "left behind: {acc:?}"
        );
        Ok(())
    })();
    // SAFETY: unmaps the mapping made above (which also unlocks it).
    unsafe { libc::munmap(mem, LOCKED) };
    result
}

/// `--memlock-child BDF`, run as uid 1000: print `RESULT <name> ok|FAILED: <why>` for each of
/// [`MEMLOCK_TESTS`].
pub fn memlock_child(bdf: &str) -> ExitCode {
    let results = memlock_child_results(bdf);
    let mut ok = true;
    for (name, outcome) in MEMLOCK_TESTS.iter().zip(results) {
        match outcome {
            Ok(()) => println!("RESULT {name} ok"),
            Err(Fail(why)) => {
                ok = false;
                println!("RESULT {name} FAILED: {}", why.replace('\n', " | "));
            }
        }
    }
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn memlock_child_results(bdf: &str) -> [Outcome; 2] {
    let setup = (|| {
        drop_to_low_limit()?;
        let backend = driver::open(&format!("vfio:{bdf}"))
            .map_err(|e| Fail(format!("opening as uid {TESTER_UID}: {e}")))?;
        let iova = edu::iova_allocator(backend.dma_mapper().as_ref());
        let pool = edu::pool(backend.as_ref(), PoolConfig::new(LeaseMode::Strict), &iova)?;
        Ok::<_, Fail>((backend, pool))
    })();
    // The backend must outlive the pool: closing it detaches the group from the container,
    // after which the container maps nothing.
    let (backend, pool) = match setup {
        Ok(both) => both,
        Err(Fail(why)) => return [Err(Fail(why.clone())), Err(Fail(why))],
    };
    let first = memlock_unprivileged(&pool);
    let second = memlock_kernel_enforced(&pool);
    drop(pool);
    drop(backend);
    [first, second]
}

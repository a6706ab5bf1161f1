//! The suite, in order: bind and open, registers, factorial by MSI, DMA round trips in both
//! lease modes, a DMA to an unmapped IOVA, a lease that outlives its backend, the unprivileged
//! memlock limit, the REQ unbind handshake, and the accounting of both device sessions.
//!
//! One session (one open of the device) serves the tests up to the unmapped-IOVA one; it is
//! closed before the unprivileged child opens the device (an IOMMU group has one opener), and
//! the REQ test opens its own.

use std::hash::{BuildHasher, RandomState};
use std::path::Path;
use std::sync::{Arc, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use dma::{Access, DmaMemory, DmaPool, LeaseMode, PagePolicy, PoolConfig};
use driver::backend::region;
use driver::eventfd::EventFd;
use driver::sysfs::{Sysfs, VFIO_PCI};
use driver::{DeviceBackendExt, IrqIndex, PciAddress};
use hca_tests::edu::{self, Direction};
use hca_tests::kmsg::{self, Kmsg};

use crate::children;
use crate::ensure;
use crate::runner::{Fail, Outcome, Runner, say};
use crate::session::{CloseReport, Session};

/// Bytes moved by each DMA test: not a whole page, so a transfer that moved a page's worth
/// regardless of the count would show.
const LEN: usize = 4000;
/// Where in the device's 4 KiB buffer they go; `OFFSET + LEN` stays below 4096 (see
/// [`edu::Edu::dma`]).
const OFFSET: u64 = 64;
/// How long any single device event may take under TCG on a loaded machine.
const EVENT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the guest kernel may take to log an IOMMU fault.
const FAULT_LOG_TIMEOUT: Duration = Duration::from_secs(5);
/// The REQ test's bound on the whole handshake, from starting the unbind to its return.
const REQ_BOUND: Duration = Duration::from_secs(5);

/// 12! (fits in 32 bits; 13! would not).
const FACTORIAL_12: u32 = 479_001_600;

/// What the tests hand on to later ones.
#[derive(Default)]
struct State {
    address: Option<PciAddress>,
    group: Option<u32>,
    session: Option<Session>,
    reports: Vec<CloseReport>,
    close_errors: Vec<String>,
}

/// Run every test in order, printing their lines through `r`.
pub fn run_all(r: &mut Runner) {
    let sysfs = Sysfs::default();
    let mut st = State::default();

    r.run("bind_open_info", || bind_open_info(&sysfs, &mut st));
    with_session(r, &mut st, "id_liveness", id_liveness);
    with_session(r, &mut st, "factorial_msi", factorial_msi);
    with_session(r, &mut st, "dma_roundtrip_strict", |s| {
        dma_roundtrip(s, false)
    });
    with_session(r, &mut st, "dma_roundtrip_pooled", |s| {
        dma_roundtrip(s, true)
    });
    with_session(
        r,
        &mut st,
        "dma_unmapped_iova_faults",
        dma_unmapped_iova_faults,
    );
    if let Some(session) = st.session.take() {
        match session.close("first session (tests up to dma_unmapped_iova_faults)") {
            Ok(report) => st.reports.push(report),
            Err(Fail(e)) => st
                .close_errors
                .push(format!("closing the first session: {e}")),
        }
    }
    match st.address {
        Some(address) => {
            r.run("lease_outlives_backend", || lease_outlives_backend(address));
        }
        None => {
            r.report(
                "lease_outlives_backend",
                Err(Fail("not run: bind_open_info failed".into())),
            );
        }
    }

    match (st.address, st.group) {
        (Some(address), Some(group)) => children::memlock_tests(r, address, group),
        _ => {
            for name in children::MEMLOCK_TESTS {
                r.report(name, Err(Fail("not run: bind_open_info failed".into())));
            }
        }
    }

    r.run("req_unbind", || req_unbind(&sysfs, &mut st));
    r.run("accounting_zero", || accounting_zero(&st));
}

/// Run `test` on the open session, or fail it when there is none.
fn with_session(
    r: &mut Runner,
    st: &mut State,
    name: &str,
    test: impl FnOnce(&mut Session) -> Outcome,
) {
    match st.session.as_mut() {
        Some(session) => r.run(name, || test(session)),
        None => r.report(name, Err(Fail("not run: bind_open_info failed".into()))),
    };
}

/// The kernel's short form of a PCI address in DMAR lines: `00:03.0`.
fn short_bdf(a: PciAddress) -> String {
    format!("{:02x}:{:02x}.{:x}", a.bus, a.device, a.function)
}

/// Random bytes from a seed (xorshift64*), and the seed, so a failure can say which.
fn random_bytes(len: usize) -> (u64, Vec<u8>) {
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let seed = RandomState::new().hash_one(nanos) | 1;
    let mut x = seed;
    let bytes = (0..len)
        .map(|_| {
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            (x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 56) as u8
        })
        .collect();
    (seed, bytes)
}

/// Where `got` differs from `want`: count and first offset.
fn mismatches(want: &[u8], got: &[u8]) -> (usize, Option<usize>) {
    let count = want.iter().zip(got).filter(|(a, b)| a != b).count();
    let first = want.iter().zip(got).position(|(a, b)| a != b);
    (count, first)
}

fn bind_open_info(sysfs: &Sysfs, st: &mut State) -> Outcome {
    let found = edu::find(sysfs)?;
    let address = found.address;
    say(&format!(
        "GUEST: edu at {address}, driver {:?}, IOMMU group {:?}",
        found.driver, found.iommu_group
    ));
    let binding = sysfs.bind_vfio(address)?;
    ensure!(
        !binding.already_bound && binding.previous_driver == found.driver,
        "unexpected binding {binding:?} (sysfs said driver {:?})",
        found.driver
    );
    let driver = sysfs.driver(address)?;
    ensure!(
        driver.as_deref() == Some(VFIO_PCI),
        "after bind_vfio the driver is {driver:?}"
    );
    let override_path = sysfs
        .devices_dir()
        .join(address.to_string())
        .join("driver_override");
    let ovr = std::fs::read_to_string(&override_path)?;
    ensure!(
        ovr.trim() == VFIO_PCI,
        "driver_override reads {:?}, not vfio-pci (bound some other way?)",
        ovr.trim()
    );
    let node = format!("/dev/vfio/{}", binding.iommu_group);
    ensure!(
        Path::new(&node).exists(),
        "{node} does not exist after binding"
    );
    st.address = Some(address);
    st.group = Some(binding.iommu_group);

    let session = Session::open(address)?;
    let b = session.edu.backend();
    ensure!(
        b.describe() == format!("vfio:{address}"),
        "describe() = {}",
        b.describe()
    );
    ensure!(b.pci_id() == edu::EDU_ID, "PCI ID {:?}", b.pci_id());
    let bar0 = b.region_info(region::BAR0)?;
    ensure!(
        bar0.size == edu::BAR0_SIZE && bar0.read && bar0.write && bar0.mmap,
        "BAR0 {bar0:?}: expected 1 MiB, readable, writable, mappable"
    );
    ensure!(
        bar0.sparse.is_none(),
        "BAR0 has sparse areas {:?}",
        bar0.sparse
    );
    ensure!(
        session.edu.bar_len() == edu::BAR0_SIZE,
        "BAR0 mapped {:#x} bytes",
        session.edu.bar_len()
    );
    let config = b.region_info(region::CONFIG)?;
    ensure!(
        config.size == 0x100 && config.read && config.write && !config.mmap,
        "config region {config:?}: expected 256 bytes (conventional PCI), read/write, not mappable"
    );
    let msi = b.irq_info(IrqIndex::Msi)?;
    ensure!(
        msi.count == 1 && msi.eventfd && msi.noresize,
        "MSI {msi:?}: expected 1 vector, eventfd, noresize"
    );
    let req = b.irq_info(IrqIndex::Req)?;
    ensure!(
        req.count == 1 && req.eventfd,
        "REQ {req:?}: expected 1 vector, eventfd"
    );
    let err = b.irq_info(IrqIndex::Err)?;
    ensure!(
        err.count == 0,
        "ERR {err:?}: expected none on a conventional-PCI device"
    );
    let msix = b.irq_info(IrqIndex::Msix)?;
    ensure!(msix.count == 0, "MSI-X {msix:?}: edu has none");
    ensure!(
        b.reset_supported() == Some(false),
        "reset_supported() = {:?}, edu has no reset",
        b.reset_supported()
    );
    ensure!(
        b.bus_master()?,
        "bus mastering is off after Edu::open turned it on"
    );
    say(&format!(
        "GUEST: opened {} (group {}), BAR0 {:#x} bytes, config {:#x} bytes, MSI {} vector(s), REQ {}",
        b.describe(),
        binding.iommu_group,
        bar0.size,
        config.size,
        msi.count,
        req.count
    ));
    st.session = Some(session);
    Ok(())
}

fn id_liveness(s: &mut Session) -> Outcome {
    let id = s.edu.id();
    ensure!(
        id == edu::ID_VALUE,
        "identification register reads {id:#010x}, expected {:#010x}",
        edu::ID_VALUE
    );
    let (_, r) = random_bytes(4);
    let random = u32::from_le_bytes([r[0], r[1], r[2], r[3]]);
    for v in [0x1234_5678, 0, u32::MAX, 0xdead_beef, random] {
        let back = s.edu.liveness(v);
        ensure!(
            back == !v,
            "liveness: wrote {v:#010x}, read {back:#010x}, expected {:#010x}",
            !v
        );
    }
    Ok(())
}

fn factorial_msi(s: &mut Session) -> Outcome {
    let stale = s.edu.take_msi()?;
    ensure!(stale == 0, "{stale} MSI(s) pending before the test");
    let pending = s.edu.irq_status();
    ensure!(
        pending == 0,
        "interrupt status {pending:#x} before the test"
    );
    let start = Instant::now();
    let value = s.edu.factorial(12, EVENT_TIMEOUT)?;
    let took = start.elapsed();
    ensure!(
        value == FACTORIAL_12,
        "12! read back as {value}, expected {FACTORIAL_12}"
    );
    let after = s.edu.irq_status();
    ensure!(
        after & edu::IRQ_FACT == 0,
        "the factorial interrupt is still pending after the acknowledge (status {after:#x})"
    );
    let value = s.edu.factorial(5, EVENT_TIMEOUT)?;
    ensure!(value == 120, "5! read back as {value}");
    say(&format!("GUEST: factorial: 12! by MSI in {took:?}"));
    Ok(())
}

fn dma_roundtrip(s: &mut Session, pooled: bool) -> Outcome {
    let pool: &DmaPool = if pooled { &s.pooled } else { &s.strict };
    let mapper = pool.mapper().clone();
    ensure!(
        mapper.name() == "vfio-type1",
        "the pool maps through {}",
        mapper.name()
    );
    let live_before = mapper.live_mappings();
    let arenas_before = pool.accounting().arenas;
    ensure!(
        arenas_before == 0,
        "the pool already has {arenas_before} arenas; this test expects a fresh one"
    );
    let mut log = Kmsg::open_at_end()?;

    let (seed, pattern) = random_bytes(LEN);
    let inverse: Vec<u8> = pattern.iter().map(|b| !b).collect();
    let src = pool.lease(LEN, 4096, Access::Read)?;
    let dst = pool.lease(LEN, 4096, Access::Write)?;
    let mask = dma::dma_bit_mask(edu::DMA_MASK_BITS);
    for lease in [&src, &dst] {
        ensure!(
            lease.iova() + LEN as u64 - 1 <= mask,
            "lease at IOVA {:#x} is above the 28-bit DMA mask",
            lease.iova()
        );
    }
    src.write(0, &pattern)?;
    // Every destination byte differs from what the device should write there.
    dst.write(0, &inverse)?;
    let acc = pool.accounting();
    // Strict: one mapping per lease. Pooled: one arena per access kind (the device-read one
    // and the device-write one), mapped on first use.
    let expected_live = live_before + 2;
    ensure!(
        mapper.live_mappings() == expected_live,
        "{} live mappings with both leases out, expected {expected_live} ({acc:?})",
        mapper.live_mappings()
    );

    s.edu.dma(
        Direction::ToDevice,
        src.iova(),
        OFFSET,
        LEN as u64,
        EVENT_TIMEOUT,
    )?;
    s.edu.dma(
        Direction::ToHost,
        dst.iova(),
        OFFSET,
        LEN as u64,
        EVENT_TIMEOUT,
    )?;

    let mut got = vec![0u8; LEN];
    dst.read(0, &mut got)?;
    let (bad, first) = mismatches(&pattern, &got);
    if let Some(i) = first {
        return Err(Fail(format!(
            "{bad} of {LEN} bytes differ after RAM -> edu -> RAM, first at offset {i}: wrote \
             {:#04x}, read back {:#04x} (seed {seed:#x}, src IOVA {:#x}, dst IOVA {:#x})",
            pattern[i],
            got[i],
            src.iova(),
            dst.iova()
        )));
    }
    let mut src_now = vec![0u8; LEN];
    src.read(0, &mut src_now)?;
    ensure!(
        src_now == pattern,
        "the source lease changed although the device may only read it"
    );
    say(&format!(
        "GUEST: dma {}: {LEN} random bytes via src IOVA {:#x} and dst IOVA {:#x}, 0 mismatches",
        if pooled { "pooled" } else { "strict" },
        src.iova(),
        dst.iova()
    ));
    drop(src);
    drop(dst);

    let acc = pool.accounting();
    ensure!(
        acc.leases_out == 0 && acc.lease_bytes == 0,
        "leases still out after dropping both: {acc:?}"
    );
    if pooled {
        ensure!(
            acc.arenas == 2 && mapper.live_mappings() == expected_live,
            "pooled arenas must stay mapped until trim: {acc:?}, {} live mappings",
            mapper.live_mappings()
        );
    } else {
        ensure!(
            mapper.live_mappings() == live_before,
            "strict leases must unmap on drop: {} live mappings, {live_before} before",
            mapper.live_mappings()
        );
    }
    let faults: Vec<String> = log
        .drain()?
        .into_iter()
        .filter(|t| kmsg::parse_dmar_fault(t).is_some())
        .collect();
    ensure!(
        faults.is_empty(),
        "IOMMU faults during a DMA to mapped leases: {faults:?}"
    );
    Ok(())
}

/// Copy `len` bytes out of DMA memory the device may have written.
fn read_memory(mem: &DmaMemory, len: usize) -> Vec<u8> {
    let mut out = vec![0u8; len];
    // SAFETY: `len <= mem.len()` (callers pass at most the mapping's length); the device is
    // idle (its DMA completed), and `out` is ordinary memory, so the ranges do not overlap.
    unsafe { std::ptr::copy_nonoverlapping(mem.as_ptr(), out.as_mut_ptr(), len) };
    out
}

fn fill_memory(mem: &DmaMemory, byte: u8) {
    // SAFETY: exactly the memory's own bytes; no device access is in flight.
    unsafe { std::ptr::write_bytes(mem.as_ptr(), byte, mem.len()) };
}

fn dma_unmapped_iova_faults(s: &mut Session) -> Outcome {
    let page = 4096usize;
    let (_, pattern) = random_bytes(LEN);

    // Put the pattern into the device's buffer.
    let src = s.strict.lease(LEN, page, Access::Read)?;
    src.write(0, &pattern)?;
    s.edu.dma(
        Direction::ToDevice,
        src.iova(),
        OFFSET,
        LEN as u64,
        EVENT_TIMEOUT,
    )?;
    drop(src);

    // Memory that outlives its mapping, at an IOVA we keep reserved so nothing else is mapped
    // there meanwhile: after the unmap the device must not reach it.
    let iova = s
        .iova
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .alloc(page as u64, page as u64)?;
    let mem = DmaMemory::with_policy(page, PagePolicy::BaseOnly)?;
    let mut stuck = false;
    let result = unmapped_iova_steps(s, &mem, iova, &pattern, &mut stuck);
    if stuck {
        // An unmap failed: the device may still reach the page, so it must never be freed.
        std::mem::forget(mem);
        return result;
    }
    drop(mem);
    s.iova
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .free(iova, page as u64)?;
    result
}

/// Map `mem` (one page) at `iova` for device writes, let the device copy the pattern from its
/// buffer there, and unmap; `stuck` is set when the unmap fails.
fn dma_through_mapping(s: &Session, mem: &DmaMemory, iova: u64, stuck: &mut bool) -> Outcome {
    let mapper = s.strict.mapper();
    // SAFETY: `mem` is one page-aligned page owned by the caller, which frees it only when
    // this unmap succeeded (`stuck` tells it otherwise); nothing else uses it meanwhile.
    unsafe { mapper.map(mem.as_ptr(), mem.len(), iova, Access::Write)? };
    let moved = s
        .edu
        .dma(Direction::ToHost, iova, OFFSET, LEN as u64, EVENT_TIMEOUT);
    if let Err(e) = mapper.unmap(iova, mem.len()) {
        *stuck = true;
        return Err(e.into());
    }
    Ok(moved?)
}

fn unmapped_iova_steps(
    s: &Session,
    mem: &DmaMemory,
    iova: u64,
    pattern: &[u8],
    stuck: &mut bool,
) -> Outcome {
    const SENTINEL: u8 = 0xc3;
    // Control: while mapped, the device's write lands.
    fill_memory(mem, 0);
    dma_through_mapping(s, mem, iova, stuck)?;
    ensure!(
        read_memory(mem, LEN) == pattern,
        "control: the DMA to IOVA {iova:#x} while mapped did not deliver the pattern"
    );

    fill_memory(mem, SENTINEL);
    let mut log = Kmsg::open_at_end()?;
    // The device does not learn that its writes were refused: the transfer "completes".
    s.edu
        .dma(Direction::ToHost, iova, OFFSET, LEN as u64, EVENT_TIMEOUT)?;
    let want_dev = short_bdf(s.address);
    let (hit, seen) = log.wait_for(FAULT_LOG_TIMEOUT, |t| {
        kmsg::parse_dmar_fault(t).is_some_and(|f| f.addr == iova && f.device == want_dev)
    })?;
    let after = read_memory(mem, mem.len());
    let changed = after.iter().filter(|&&b| b != SENTINEL).count();
    ensure!(
        changed == 0,
        "{changed} bytes of the memory behind the unmapped IOVA {iova:#x} changed: the DMA landed"
    );
    let Some(line) = hit else {
        return Err(Fail(format!(
            "no DMAR fault naming {want_dev} and address {iova:#x} in the kernel log within \
             {FAULT_LOG_TIMEOUT:?}; saw {seen:?}"
        )));
    };
    let fault = kmsg::parse_dmar_fault(&line).expect("matched above");
    ensure!(fault.write, "the fault is not a device write: {line}");
    say(&format!(
        "GUEST: unmapped IOVA {iova:#x}: kernel log: {line}"
    ));

    // The IOMMU and the device still work after the fault: map again and the data lands.
    fill_memory(mem, 0);
    dma_through_mapping(s, mem, iova, stuck)?;
    ensure!(
        read_memory(mem, LEN) == pattern,
        "after the fault, a DMA to the re-mapped IOVA {iova:#x} did not deliver the pattern"
    );
    Ok(())
}

/// A strict lease dropped after the backend that mapped it: its unmap must still succeed, so
/// the memory is freed and the mapper's count returns to zero (the IOMMU keeps the memory
/// mapped, and the container usable, until then). Once the pool and the last mapper handle
/// are gone the group is free again: a new open succeeds.
fn lease_outlives_backend(address: PciAddress) -> Outcome {
    let backend = driver::open(&format!("vfio:{address}"))?;
    let iova = edu::iova_allocator(backend.dma_mapper().as_ref());
    let strict = edu::pool(backend.as_ref(), PoolConfig::new(LeaseMode::Strict), &iova)?;
    let lease = strict.lease(LEN, 4096, Access::ReadWrite)?;
    let (_, pattern) = random_bytes(LEN);
    lease.write(0, &pattern)?;
    let held = strict.accounting();
    ensure!(
        held.leases_out == 1 && held.live_mappings == 1,
        "with the lease out: {held:?}, expected 1 lease and 1 mapping"
    );
    ensure!(
        Arc::strong_count(&backend) == 1,
        "{} other handles hold the backend; dropping ours would not close it",
        Arc::strong_count(&backend) - 1
    );
    drop(backend);
    let mut back = vec![0u8; LEN];
    lease.read(0, &mut back)?;
    ensure!(
        back == pattern,
        "the lease's memory changed when the backend was dropped"
    );
    drop(lease);
    let after = strict.accounting();
    let iova_stats = iova.lock().unwrap_or_else(PoisonError::into_inner).stats();
    say(&format!(
        "GUEST: lease dropped after the backend: leases_out {}, live_mappings {}, \
         unmap_failures {}, IOVA allocations {}",
        after.leases_out, after.live_mappings, after.unmap_failures, iova_stats.allocations
    ));
    ensure!(
        after.leases_out == 0 && after.lease_bytes == 0,
        "the lease is still counted out: {after:?}"
    );
    ensure!(
        after.unmap_failures == 0 && after.live_mappings == 0,
        "the unmap after the backend was dropped failed: {after:?}"
    );
    ensure!(
        iova_stats.allocations == 0,
        "the lease's IOVA was not returned: {iova_stats:?}"
    );
    drop(strict);
    // The pool held the last mapper handle: the group must be released now.
    let again = driver::open(&format!("vfio:{address}"))
        .map_err(|e| Fail(format!("reopening after the pool was dropped: {e}")))?;
    drop(again);
    Ok(())
}

fn req_unbind(sysfs: &Sysfs, st: &mut State) -> Outcome {
    let address = st
        .address
        .ok_or_else(|| Fail("not run: bind_open_info failed".into()))?;
    let driver = sysfs.driver(address)?;
    ensure!(
        driver.as_deref() == Some(VFIO_PCI),
        "the device is on {driver:?} before the REQ test, not vfio-pci"
    );
    let mut session = Session::open(address)?;
    // Something for the teardown to release: a strict and a pooled lease, the latter holding
    // an arena mapped.
    session
        .held
        .push(session.strict.lease(8192, 4096, Access::ReadWrite)?);
    session
        .held
        .push(session.pooled.lease(4096, 4096, Access::ReadWrite)?);
    let req = EventFd::new()?;
    session.edu.backend().set_irqs(IrqIndex::Req, 0, &[&req])?;

    let start = Instant::now();
    let mut unbinder = children::spawn_unbind(address)?;
    let got_req = wait_req(&session, &req, EVENT_TIMEOUT);
    let req_at = start.elapsed();
    let blocked_at_req = children::still_running(&mut unbinder);
    // Hold on a little longer: the unbind must keep waiting while we hold the device.
    std::thread::sleep(Duration::from_millis(300));
    let blocked_later = children::still_running(&mut unbinder);

    let closed = session.close("REQ session");
    let closed_at = start.elapsed();
    let outcome = children::finish(unbinder, start + Duration::from_secs(20));
    let done_at = start.elapsed();
    let bus_master = closed.as_ref().ok().map(|r| r.bus_master_after_quiesce);
    match closed {
        Ok(report) => st.reports.push(report),
        Err(Fail(e)) => st
            .close_errors
            .push(format!("closing the REQ session: {e}")),
    }
    say(&format!(
        "GUEST: req: REQ eventfd after {} ms, closed after {} ms (300 ms of it holding on), \
         unbind {} after {} ms",
        req_at.as_millis(),
        closed_at.as_millis(),
        if outcome.is_ok() {
            "returned"
        } else {
            "given up"
        },
        done_at.as_millis()
    ));
    got_req?;
    ensure!(
        bus_master == Some(Some(false)),
        "on REQ the driver must turn bus mastering off before releasing memory; read back \
         {bus_master:?}"
    );
    let (status, out) = outcome?;
    ensure!(
        blocked_at_req && blocked_later,
        "the unbind did not wait for us to close the device (running at REQ: {blocked_at_req}, \
         300 ms later: {blocked_later}); its output: {out}"
    );
    ensure!(
        status.success() && out.contains("UNBIND ok"),
        "the unbinding process failed ({status}): {out}"
    );
    let driver = sysfs.driver(address)?;
    ensure!(
        driver.is_none(),
        "after the unbind the device is on {driver:?}"
    );
    ensure!(
        done_at < REQ_BOUND,
        "the unbind took {done_at:?} from start to return, more than {REQ_BOUND:?}"
    );
    Ok(())
}

/// Wait through the backend's `wait` until the REQ eventfd fires.
fn wait_req(session: &Session, req: &EventFd, timeout: Duration) -> Outcome {
    let backend = session.edu.backend();
    let start = Instant::now();
    loop {
        if req.take()? > 0 {
            return Ok(());
        }
        let left = timeout.saturating_sub(start.elapsed());
        if left.is_zero() {
            return Err(Fail(format!(
                "no REQ interrupt within {timeout:?} of starting the unbind"
            )));
        }
        // An MSI would also wake the wait; it is not what we wait for, so take it and go on.
        let _ = session.edu.take_msi();
        backend.wait(backend.now() + left);
    }
}

fn accounting_zero(st: &State) -> Outcome {
    ensure!(
        st.close_errors.is_empty(),
        "closing failed: {:?}",
        st.close_errors
    );
    ensure!(
        st.reports.len() == 2,
        "{} device sessions were closed, expected 2 (the first and the REQ one)",
        st.reports.len()
    );
    for r in &st.reports {
        let who = r.label;
        for (pool, acc) in [("strict", &r.strict), ("pooled", &r.pooled)] {
            ensure!(
                acc.leases_out == 0 && acc.lease_bytes == 0,
                "{who}: {pool} pool has leases out after close: {acc:?}"
            );
            ensure!(
                acc.unmap_failures == 0 && acc.faults == 0,
                "{who}: {pool} pool: {acc:?}"
            );
        }
        ensure!(
            r.pooled_before_trim.arenas >= 1,
            "{who}: the pooled pool had no arena before trim ({:?}), so its zero proves nothing",
            r.pooled_before_trim
        );
        ensure!(
            r.trimmed == r.pooled_before_trim.arenas && r.pooled.arenas == 0,
            "{who}: trim released {} of {} arenas, {} left",
            r.trimmed,
            r.pooled_before_trim.arenas,
            r.pooled.arenas
        );
        ensure!(
            r.iova.allocations == 0 && r.iova.allocated_bytes == 0,
            "{who}: IOVA allocator still has {} allocations ({} bytes)",
            r.iova.allocations,
            r.iova.allocated_bytes
        );
        ensure!(
            r.live_mappings_at_close == 0,
            "{who}: {} IOMMU mappings live when the device was closed",
            r.live_mappings_at_close
        );
        ensure!(
            r.bus_master_after_quiesce == Some(false),
            "{who}: bus mastering after the quiesce reads {:?}, not off",
            r.bus_master_after_quiesce
        );
        ensure!(
            r.backend_other_refs == 0,
            "{who}: {} other handles kept the device open past close",
            r.backend_other_refs
        );
        say(&format!(
            "GUEST: accounting, {who}: leases 0, arenas {} -> 0 by trim, IOVA allocations 0, live mappings 0",
            r.pooled_before_trim.arenas
        ));
    }
    Ok(())
}

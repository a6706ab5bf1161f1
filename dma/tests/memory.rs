//! DMA memory: zeroed, aligned, pre-faulted, not inherited by fork, fd offsets right, and the
//! huge-page fallback reported.

use std::io::Write;
use std::os::fd::AsRawFd;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use dma::{DmaError, DmaMemory, PageKind, PagePolicy, base_page_size};

/// Tests here read /proc/self/{maps,smaps} and count huge pages: run them one at a time so a
/// neighbour's mapping cannot be mistaken for ours.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(PoisonError::into_inner)
}

fn byte_at(mem: &DmaMemory, off: usize) -> u8 {
    assert!(off < mem.len());
    // SAFETY: inside the mapping (asserted); volatile read through the raw pointer.
    unsafe { mem.as_ptr().add(off).read_volatile() }
}

/// The smaps block of the mapping that starts at `addr`, if any.
fn smaps_of(addr: usize) -> Option<String> {
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
    let head = format!("{addr:x}-");
    let start = smaps.lines().position(|l| l.starts_with(&head))?;
    let block: Vec<&str> = smaps
        .lines()
        .skip(start)
        .take_while(|l| !l.starts_with("VmFlags"))
        .chain(smaps.lines().skip(start).find(|l| l.starts_with("VmFlags")))
        .collect();
    Some(block.join("\n"))
}

fn smaps_kib(block: &str, field: &str) -> usize {
    block
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in\n{block}"))
}

fn free_huge_pages() -> usize {
    std::fs::read_to_string("/proc/meminfo")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("HugePages_Free:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

#[test]
fn base_page_memory_is_zeroed_aligned_prefaulted_and_not_forked() {
    let _s = serial();
    let page = base_page_size();
    let mem = DmaMemory::with_policy(3 * page + 5, PagePolicy::BaseOnly).unwrap();
    assert_eq!(mem.page_kind(), PageKind::Base);
    assert_eq!(mem.page_size(), page);
    assert_eq!(mem.len(), 4 * page, "rounded up to whole pages");
    assert_eq!(mem.as_ptr().addr() % page, 0);
    assert!((0..mem.len()).all(|o| byte_at(&mem, o) == 0));

    let block = smaps_of(mem.as_ptr().addr()).expect("mapping listed in smaps");
    assert!(block.contains("/memfd:hca-dma"), "{block}");
    assert_eq!(
        smaps_kib(&block, "Rss:"),
        mem.len() / 1024,
        "pre-faulted\n{block}"
    );
    let flags = block.lines().find(|l| l.starts_with("VmFlags")).unwrap();
    // "dc": do not copy on fork (MADV_DONTFORK); "sh": shared.
    assert!(flags.split_whitespace().any(|f| f == "dc"), "{flags}");
    assert!(flags.split_whitespace().any(|f| f == "sh"), "{flags}");
}

#[test]
fn fd_offset_of_an_address_reads_back_the_same_bytes() {
    let _s = serial();
    let page = base_page_size();
    let mem = DmaMemory::with_policy(2 * page, PagePolicy::BaseOnly).unwrap();
    let at = page + 123;
    let pattern = [0xde, 0xad, 0xbe, 0xef, 0x42];
    // SAFETY: `at + 5` is inside the mapping.
    unsafe { std::ptr::copy_nonoverlapping(pattern.as_ptr(), mem.as_ptr().add(at), 5) };
    let off = mem.offset_of(mem.as_ptr().wrapping_add(at)).unwrap();
    assert_eq!(off, at as u64);
    let mut buf = [0u8; 5];
    // SAFETY: pread into our own buffer from the memfd.
    let n = unsafe {
        libc::pread(
            mem.fd().as_raw_fd(),
            buf.as_mut_ptr().cast(),
            5,
            off as libc::off_t,
        )
    };
    assert_eq!(n, 5);
    assert_eq!(buf, pattern);
    assert_eq!(mem.offset_of(mem.as_ptr()), Some(0));
    assert_eq!(mem.offset_of(mem.as_ptr().wrapping_add(mem.len())), None);
    assert_eq!(mem.offset_of(mem.as_ptr().wrapping_sub(1)), None);
}

#[test]
fn drop_unmaps() {
    let _s = serial();
    let mem = DmaMemory::with_policy(8192, PagePolicy::BaseOnly).unwrap();
    let addr = mem.as_ptr().addr();
    assert!(smaps_of(addr).is_some());
    drop(mem);
    let still = smaps_of(addr);
    assert!(
        still.as_ref().is_none_or(|b| !b.contains("memfd:hca-dma")),
        "{still:?}"
    );
}

#[test]
fn zero_length_is_refused() {
    assert!(matches!(DmaMemory::new(0), Err(DmaError::Invalid(_))));
}

/// A `tracing` writer that keeps what it is given.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn huge_pages_are_used_when_free_and_the_fallback_is_reported_otherwise() {
    let _s = serial();
    let log = Captured::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer({
            let log = log.clone();
            move || log.clone()
        })
        .with_ansi(false)
        .finish();
    let free = free_huge_pages();
    let mem = tracing::subscriber::with_default(subscriber, || DmaMemory::new(4 << 20).unwrap());
    let text = String::from_utf8(log.0.lock().unwrap().clone()).unwrap();
    if free >= 2 {
        assert_eq!(
            mem.page_kind(),
            PageKind::Huge2M,
            "{free} huge pages were free"
        );
        assert_eq!(mem.page_size(), 2 << 20);
        assert_eq!(mem.as_ptr().addr() % (2 << 20), 0);
        assert!(text.contains("using 2 MiB huge pages"), "{text}");
    } else {
        assert_eq!(mem.page_kind(), PageKind::Base, "no huge pages were free");
        assert!(text.contains("INFO"), "{text}");
        assert!(text.contains("falling back to base pages"), "{text}");
        // Asking for huge pages only is a clean error, not a SIGBUS later.
        let err = DmaMemory::with_policy(2 << 20, PagePolicy::HugeOnly).unwrap_err();
        assert!(
            matches!(err, DmaError::Alloc { len, .. } if len == 2 << 20),
            "{err:?}"
        );
        assert!(err.to_string().contains("nr_hugepages"), "{err}");
    }
    assert_eq!(mem.len(), 4 << 20);
    assert!((0..mem.len()).step_by(4096).all(|o| byte_at(&mem, o) == 0));
}

/// Memory for an IOMMU with pages larger than the CPU's: start and length multiples of the
/// alignment asked for, zeroed, usable, with the fd offsets right; nothing of the address
/// space reserved to place it stays mapped.
#[test]
fn memory_can_be_aligned_beyond_its_page() {
    let _s = serial();
    for align in [0x10000, 1 << 20] {
        let mem = DmaMemory::with_alignment(100, PagePolicy::BaseOnly, align).unwrap();
        assert_eq!(mem.page_kind(), PageKind::Base);
        assert_eq!(mem.len(), align);
        assert_eq!(mem.as_ptr().addr() % align, 0, "{align:#x}");
        assert!((0..mem.len()).step_by(4096).all(|o| byte_at(&mem, o) == 0));
        // SAFETY: the last byte of the memory; volatile write through the raw pointer.
        unsafe { mem.as_ptr().add(align - 1).write_volatile(7) };
        assert_eq!(byte_at(&mem, align - 1), 7);
        assert_eq!(
            mem.offset_of(mem.as_ptr().wrapping_add(align - 1)),
            Some(align as u64 - 1)
        );
        // Exactly one mapping covers the memory, and it ends where the memory does: the
        // reservation around it was given back.
        let start = mem.as_ptr().addr();
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let ours: Vec<(usize, usize)> = maps
            .lines()
            .filter_map(|l| {
                let (range, _) = l.split_once(' ')?;
                let (a, b) = range.split_once('-')?;
                Some((
                    usize::from_str_radix(a, 16).ok()?,
                    usize::from_str_radix(b, 16).ok()?,
                ))
            })
            .filter(|&(a, b)| a < start + align && b > start)
            .collect();
        assert_eq!(ours, [(start, start + align)], "{align:#x}");
        let smaps = smaps_of(start).unwrap();
        assert!(smaps.contains("hca-dma"), "{smaps}");
    }
    // Larger than the alignment: rounded to it.
    let mem = DmaMemory::with_alignment(0x10001, PagePolicy::BaseOnly, 0x10000).unwrap();
    assert_eq!(mem.len(), 0x20000);
    // Below the page: the page rules.
    let mem = DmaMemory::with_alignment(1, PagePolicy::BaseOnly, 16).unwrap();
    assert_eq!(mem.len(), base_page_size());
    let err = DmaMemory::with_alignment(4096, PagePolicy::BaseOnly, 0x3000).unwrap_err();
    assert!(matches!(err, DmaError::Invalid(_)), "{err:?}");
}

#[test]
fn small_requests_do_not_try_huge_pages() {
    let _s = serial();
    let mem = DmaMemory::new(4096).unwrap();
    assert_eq!(mem.page_kind(), PageKind::Base);
    assert_eq!(mem.len(), base_page_size());
}

//! Leases: owned, accounted, mapped DMA buffers that give themselves back when dropped.
//!
//! A [`DmaPool`] hands out [`DmaLease`]s in one of two modes:
//! - [`LeaseMode::Strict`]: each lease has its own memory, IOVA and IOMMU mapping, unmapped
//!   on drop. A device access that runs past the lease's end, or comes after drop, faults:
//!   each mapping is followed by an unmapped guard page (one page of the lease's memory or one
//!   IOMMU page, whichever is larger) that no other lease gets, the lease ends as close to
//!   the end of its mapping as its alignment allows (as a guard-page allocator places a
//!   buffer), and IOVAs are taken next fit ([`IovaAllocator::alloc_next_fit`]), so a released
//!   IOVA is handed out again only once the allocator has gone round the whole IOVA space (in
//!   a nearly full space, sooner: wrapping round beats failing). Not caught: an overrun of
//!   fewer bytes than the alignment's padding after the end (none for a length that is a
//!   multiple of the alignment), an access before the start that stays in the first mapped
//!   page, and a stray access that jumps the guard page into another lease. For tests and
//!   debugging.
//! - [`LeaseMode::Pooled`]: leases are buddy blocks of long-lived mapped arenas (one arena list
//!   per [`Access`]); the pool grows by adding arenas (on base pages each as large as those
//!   before it together, from [`FIRST_BASE_ARENA`] to the configured arena size). Cheap, and
//!   the number of IOMMU mappings stays small (VFIO allows 65535 per container). Leases
//!   larger than an arena get their own mapping, as in strict mode but placed first fit and
//!   without the guard page.
//!
//! Mapping sizes, host addresses and IOVAs are multiples of the pool's mapping page: the larger
//! of the CPU page and the IOMMU's smallest page ([`DmaMapper::min_page_size`]), which an
//! IOMMU with 64 KiB pages needs; arenas must be at least that large
//! ([`DmaError::ArenaTooSmall`]).
//!
//! Whatever the mode, a lease never lends out a Rust reference to its memory: the device may
//! write it at any time, so every access is a copy or a volatile load/store through a raw
//! pointer, bounds-checked against the lease.
//!
//! Quarantine ([`DmaPool::quarantine`]): when the device's DMA could not be stopped (bus
//! mastering could not be cleared and the function could not be reset), no buffer it was
//! handed may be reused or unmapped. The driver then switches the pool to quarantine, and
//! every lease dropped from that moment keeps its block, memory, IOVA and IOMMU mapping for
//! the life of the process, counted in [`Accounting::quarantined`]. The pool cannot tell which
//! of its leases the device was given, so it keeps them all: the switch is a pool-wide rule
//! rather than a per-lease call, so that no drop path can be missed. Quarantined memory is
//! never freed by this crate; the kernel drops the IOMMU mappings (and unpins the pages) only
//! when the VFIO container is closed, at which point the device can no longer reach them.

use std::fmt;
use std::mem::ManuallyDrop;
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use crate::buddy::{Buddy, MIN_BLOCK};
use crate::memory::{DmaMemory, HUGE_PAGE, PagePolicy, base_page_size};
use crate::volatile;
use crate::{Access, DmaError, DmaMapper, IovaAllocator, IovaStats};

/// The smallest arena on base pages (unless the mapping page is larger): enough for a
/// libibumad program's MAD buffers of one access kind (a special QP's 512 send slots of
/// 256 bytes each, or its 256 receive buffers).
pub const FIRST_BASE_ARENA: usize = 256 << 10;

/// How a [`DmaPool`] backs its leases.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LeaseMode {
    /// One memory, IOVA and mapping per lease, with an unmapped guard page after it and the
    /// lease placed at the end of the mapping (as far as its alignment allows); unmapped on
    /// drop, and its IOVA not reused until the IOVA space has been gone round. Catches a
    /// device overrun past the end rounded up to the alignment, and a device access after
    /// drop.
    Strict,
    /// Slices of long-lived mapped arenas. Fast; the mapping count stays small.
    Pooled,
}

/// Settings of a [`DmaPool`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolConfig {
    /// Strict or pooled.
    pub mode: LeaseMode,
    /// Size of one pooled arena in bytes: a power of two from 4 KiB (or the CPU page, or the
    /// IOMMU's smallest page, whichever is largest) to 1 GiB; leases larger than it get
    /// their own mapping. The default, 2 MiB, is one huge page and one IOMMU superpage entry.
    /// An arena on huge pages is this large; one on base pages (all of whose pages are
    /// zeroed and faulted in when it is made) is as large as the pool's arenas of its access
    /// kind together, from [`FIRST_BASE_ARENA`] up to this, so a pool that needs little
    /// memory populates little.
    pub arena_size: usize,
    /// Which pages back arenas and own-mapping leases. An arena's memory and mapping are the
    /// same bytes, so an `arena_size` smaller than a 2 MiB huge page puts arenas on base
    /// pages under [`PagePolicy::Auto`] (as does a huge page that could not be had, from
    /// then on in that pool), and [`PagePolicy::HugeOnly`] needs an `arena_size` of at least
    /// 2 MiB ([`DmaError::ArenaTooSmall`] otherwise).
    pub pages: PagePolicy,
}

impl PoolConfig {
    /// `mode` with a 2 MiB arena size and [`PagePolicy::Auto`].
    pub fn new(mode: LeaseMode) -> Self {
        PoolConfig {
            mode,
            arena_size: 2 << 20,
            pages: PagePolicy::Auto,
        }
    }
}

/// What a pool has out, and what its IOMMU domain reports, at one moment.
///
/// Tests compare it with a baseline after each scenario: a lease that was forgotten instead of
/// dropped shows up as `leases_out` above the baseline.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Accounting {
    /// Leases handed out and not yet dropped.
    pub leases_out: usize,
    /// Bytes of those leases (as requested, before rounding).
    pub lease_bytes: u64,
    /// Live mappings in the mapper's whole domain (arenas, own-mapping leases, and any other
    /// user of the same mapper).
    pub live_mappings: usize,
    /// Device accesses the mapper refused since it was created.
    pub faults: usize,
    /// Pooled arenas currently mapped (an arena whose unmap failed is still mapped, and still
    /// counted).
    pub arenas: usize,
    /// Unmaps that failed, and failed maps that left a mapping behind (their memory and
    /// IOVA are kept, never reused: the device might still reach them).
    pub unmap_failures: usize,
    /// Leases dropped after [`DmaPool::quarantine`]: kept allocated and mapped, never handed
    /// out again (no longer counted in `leases_out`).
    pub quarantined: usize,
    /// Bytes of those leases (as requested).
    pub quarantined_bytes: u64,
}

/// A mapped arena of the pooled mode.
struct Arena {
    mem: DmaMemory,
    /// Bytes mapped at `iova` and allocated there from the IOVA allocator: what unmap and
    /// the IOVA free must be given back (`mem.len()`: the pool's `arena_size` on huge pages,
    /// at most that on base pages).
    mapped: usize,
    iova: u64,
    access: Access,
    buddy: Buddy,
}

struct PoolState {
    /// Slots stay put so that leases can name their arena by index; `None` after a trim.
    arenas: Vec<Option<Arena>>,
}

struct PoolInner {
    mapper: Arc<dyn DmaMapper>,
    config: PoolConfig,
    /// The granule of every mapping: the larger of the CPU page and the IOMMU's smallest page.
    map_page: usize,
    iova: Arc<Mutex<IovaAllocator>>,
    state: Mutex<PoolState>,
    leases_out: AtomicUsize,
    lease_bytes: AtomicU64,
    unmap_failures: AtomicUsize,
    arena_count: AtomicUsize,
    /// Under [`PagePolicy::Auto`]: a huge page could not be had for an arena, so later
    /// arenas go to base pages at once.
    no_huge: AtomicBool,
    /// Set once by [`DmaPool::quarantine`]: dropped leases are kept, not given back.
    quarantining: AtomicBool,
    quarantined: AtomicUsize,
    quarantined_bytes: AtomicU64,
}

/// Hands out [`DmaLease`]s mapped in one IOMMU domain, and accounts for them.
///
/// Cloning gives another handle to the same pool; it is `Send + Sync` and locks inside. Use
/// one pool (or one shared [`IovaAllocator`], see [`DmaPool::with_iova`]) per IOMMU domain:
/// IOVAs are chosen by the pool. Arenas are unmapped by [`DmaPool::trim`] or when the last
/// handle and the last lease are gone.
#[derive(Clone)]
pub struct DmaPool {
    inner: Arc<PoolInner>,
}

impl DmaPool {
    /// A pool in `mode` with the default settings ([`PoolConfig::new`]) and its own IOVA
    /// allocator over the mapper's ranges.
    pub fn new(mapper: Arc<dyn DmaMapper>, mode: LeaseMode) -> Result<Self, DmaError> {
        Self::with_config(mapper, PoolConfig::new(mode))
    }

    /// A pool with `config` and its own IOVA allocator over the mapper's ranges.
    pub fn with_config(mapper: Arc<dyn DmaMapper>, config: PoolConfig) -> Result<Self, DmaError> {
        let iova = Arc::new(Mutex::new(IovaAllocator::new(&mapper.iova_ranges())));
        Self::with_iova(mapper, config, iova)
    }

    /// A pool that takes its IOVAs from `iova`, which other pools of the same domain share.
    pub fn with_iova(
        mapper: Arc<dyn DmaMapper>,
        config: PoolConfig,
        iova: Arc<Mutex<IovaAllocator>>,
    ) -> Result<Self, DmaError> {
        let iommu_page = mapper.min_page_size();
        if !iommu_page.is_power_of_two() {
            return Err(DmaError::Invalid(format!(
                "{}: an IOMMU page size of {iommu_page:#x} is not a power of two",
                mapper.name()
            )));
        }
        let cpu_page = base_page_size().max(4096);
        let map_page = cpu_page.max(iommu_page);
        if !config.arena_size.is_power_of_two() || config.arena_size > 1 << 30 {
            return Err(DmaError::Invalid(format!(
                "arena size {:#x} must be a power of two from the page size to 1 GiB",
                config.arena_size
            )));
        }
        let too_small = |min: usize, why: &'static str| DmaError::ArenaTooSmall {
            arena_size: config.arena_size,
            min,
            why,
        };
        if config.arena_size < map_page {
            return Err(too_small(
                map_page,
                if iommu_page > cpu_page {
                    "the IOMMU's smallest page: each arena is one mapping"
                } else {
                    "the CPU page size"
                },
            ));
        }
        // An arena is one memory of exactly `arena_size` bytes, mapped whole: huge pages
        // would round it up, and the mapping (and its unmap) would no longer match it.
        if config.pages == PagePolicy::HugeOnly && config.arena_size < HUGE_PAGE {
            return Err(too_small(
                HUGE_PAGE,
                "PagePolicy::HugeOnly backs each arena with whole 2 MiB huge pages",
            ));
        }
        Ok(DmaPool {
            inner: Arc::new(PoolInner {
                mapper,
                config,
                map_page,
                iova,
                state: Mutex::new(PoolState { arenas: Vec::new() }),
                leases_out: AtomicUsize::new(0),
                lease_bytes: AtomicU64::new(0),
                unmap_failures: AtomicUsize::new(0),
                arena_count: AtomicUsize::new(0),
                no_huge: AtomicBool::new(false),
                quarantining: AtomicBool::new(false),
                quarantined: AtomicUsize::new(0),
                quarantined_bytes: AtomicU64::new(0),
            }),
        })
    }

    /// The pool's settings.
    pub fn config(&self) -> PoolConfig {
        self.inner.config
    }

    /// The mapper the pool maps through.
    pub fn mapper(&self) -> &Arc<dyn DmaMapper> {
        &self.inner.mapper
    }

    /// Lease `len` zeroed bytes whose IOVA is a multiple of `align` (a power of two), mapped
    /// with `access` for the device.
    ///
    /// Errors: [`DmaError::Invalid`] for `len == 0` or a bad alignment; otherwise what getting
    /// memory, an IOVA or a mapping returned ([`DmaError::MemlockTooLow`] from
    /// [`DmaMapper::check_pin_headroom`], asked before any memory is allocated;
    /// [`DmaError::IovaExhausted`], [`DmaError::Map`], [`DmaError::Alloc`]), with nothing
    /// left allocated, unless a failed map left a mapping behind (the mapper broke the
    /// [`DmaMapper::map`] contract): then its memory and IOVA are kept for good and counted
    /// in [`Accounting::unmap_failures`].
    pub fn lease(&self, len: usize, align: usize, access: Access) -> Result<DmaLease, DmaError> {
        self.lease_inner(len, align, access, true)
    }

    /// A lease of `data.len()` bytes (aligned to `align`) that starts as a copy of `data`:
    /// what [`DmaPool::lease`] then [`DmaLease::write`] give, with one pass over the memory
    /// instead of two (every byte is written, so nothing earlier shows through).
    pub fn lease_copy(
        &self,
        data: &[u8],
        align: usize,
        access: Access,
    ) -> Result<DmaLease, DmaError> {
        let lease = self.lease_inner(data.len(), align, access, false)?;
        lease.write(0, data)?;
        Ok(lease)
    }

    /// A lease; `zero`: clear a pooled block (own memory comes zeroed from the kernel).
    fn lease_inner(
        &self,
        len: usize,
        align: usize,
        access: Access,
        zero: bool,
    ) -> Result<DmaLease, DmaError> {
        if len == 0 {
            return Err(DmaError::Invalid("DMA lease of 0 bytes".into()));
        }
        if !align.is_power_of_two() {
            return Err(DmaError::Invalid(format!(
                "DMA lease alignment {align:#x} is not a power of two"
            )));
        }
        let inner = &self.inner;
        let block = len.max(align).max(MIN_BLOCK).checked_next_power_of_two();
        let lease = match (inner.config.mode, block) {
            (LeaseMode::Pooled, Some(block)) if block <= inner.config.arena_size => {
                inner.lease_pooled(len, block, access, zero)?
            }
            _ => inner.lease_own(len, align, access)?,
        };
        inner.leases_out.fetch_add(1, Ordering::Relaxed);
        inner.lease_bytes.fetch_add(len as u64, Ordering::Relaxed);
        Ok(DmaLease {
            pool: Arc::clone(inner),
            ptr: lease.0,
            iova: lease.1,
            len,
            access,
            backing: lease.2,
        })
    }

    /// Leases out, their bytes, the mapper's live mappings and faults, arenas, unmap failures.
    pub fn accounting(&self) -> Accounting {
        let inner = &self.inner;
        Accounting {
            leases_out: inner.leases_out.load(Ordering::Relaxed),
            lease_bytes: inner.lease_bytes.load(Ordering::Relaxed),
            live_mappings: inner.mapper.live_mappings(),
            faults: inner.mapper.fault_count(),
            arenas: inner.arena_count.load(Ordering::Relaxed),
            unmap_failures: inner.unmap_failures.load(Ordering::Relaxed),
            quarantined: inner.quarantined.load(Ordering::Relaxed),
            quarantined_bytes: inner.quarantined_bytes.load(Ordering::Relaxed),
        }
    }

    /// From now on, keep every lease of this pool that is dropped instead of giving it back:
    /// its block stays allocated (so its arena is never trimmed or unmapped, even when the
    /// pool itself is dropped), an own-mapping lease stays mapped with its memory and IOVA,
    /// and nothing is handed out again from it. Counted in [`Accounting::quarantined`].
    ///
    /// For a device whose DMA could not be stopped after a fatal error (DESIGN §4.3: a lease is
    /// released only once the device can no longer touch it, and here that moment never
    /// comes). Irreversible, and meant to be called before the leases the device holds are
    /// dropped. Leases made afterwards are taken from memory no live lease used and are
    /// quarantined when dropped as well. Costs one atomic load per lease drop.
    pub fn quarantine(&self) {
        if !self.inner.quarantining.swap(true, Ordering::SeqCst) {
            tracing::error!(
                mapper = self.inner.mapper.name(),
                "DMA pool quarantined: the device may still write its buffers, so every lease \
                 dropped from now on stays allocated and mapped for the life of the process"
            );
        }
    }

    /// True after [`DmaPool::quarantine`].
    pub fn is_quarantined(&self) -> bool {
        self.inner.quarantining.load(Ordering::SeqCst)
    }

    /// Free space and allocations of the pool's IOVA allocator.
    pub fn iova_stats(&self) -> IovaStats {
        self.inner
            .iova
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .stats()
    }

    /// Unmap and free every arena with no lease out; returns how many were released (an arena
    /// whose unmap fails stays mapped, kept forever, and counted in
    /// [`Accounting::unmap_failures`]).
    pub fn trim(&self) -> usize {
        let idle: Vec<Arena> = {
            let mut state = self.inner.lock_state();
            state
                .arenas
                .iter_mut()
                .filter(|slot| slot.as_ref().is_some_and(|a| a.buddy.is_idle()))
                .filter_map(Option::take)
                .collect()
        };
        idle.into_iter()
            .map(|arena| self.inner.release_arena(arena))
            .filter(|&released| released)
            .count()
    }
}

impl fmt::Debug for DmaPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DmaPool")
            .field("mapper", &self.inner.mapper.name())
            .field("config", &self.inner.config)
            .field("accounting", &self.accounting())
            .finish()
    }
}

/// Where a lease's memory comes from.
enum Backing {
    /// A buddy block of arena `arena` starting at `unit` (in `MIN_BLOCK`s).
    Arena { arena: u32, unit: u32, order: u8 },
    /// Its own memory and mapping of `mem.len()` bytes, the lease `offset` bytes into it,
    /// inside `reserved` bytes of IOVA space (strict mode: the mapping and its unmapped guard).
    Own {
        mem: ManuallyDrop<DmaMemory>,
        offset: usize,
        reserved: u64,
    },
}

impl PoolInner {
    fn lock_state(&self) -> std::sync::MutexGuard<'_, PoolState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn lock_iova(&self) -> std::sync::MutexGuard<'_, IovaAllocator> {
        self.iova.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn lease_pooled(
        &self,
        len: usize,
        block: usize,
        access: Access,
        zero: bool,
    ) -> Result<(NonNull<u8>, u64, Backing), DmaError> {
        let order = Buddy::order_for(block);
        let mut state = self.lock_state();
        let found = state.arenas.iter_mut().enumerate().find_map(|(i, slot)| {
            let arena = slot.as_mut().filter(|a| a.access == access)?;
            arena.buddy.alloc(order).map(|unit| (i, unit))
        });
        let (index, unit) = match found {
            Some(found) => found,
            None => self.grow(&mut state, order, block, access)?,
        };
        let offset = unit as usize * MIN_BLOCK;
        let Some(arena) = state.arenas[index].as_ref() else {
            unreachable!("arena {index} was used under this lock");
        };
        // In bounds: the buddy never hands out past the arena's size, `mem.len()`.
        let host = arena.mem.as_ptr().wrapping_add(offset);
        let iova = arena.iova + offset as u64;
        drop(state);
        if zero {
            // SAFETY: `host .. host + len` lies in the arena's live mapping (len <= block), and
            // the block is ours alone until it is freed. No reference is created.
            unsafe { ptr::write_bytes(host, 0, len) };
        }
        let Some(host) = NonNull::new(host) else {
            unreachable!("arena memory is never at address 0");
        };
        Ok((
            host,
            iova,
            Backing::Arena {
                arena: index as u32,
                unit,
                order,
            },
        ))
    }

    /// Adds an arena for `access` and allocates a block of `order` (`block` bytes) in it:
    /// what a lease does when no arena has room (rare, so kept off the lease's path).
    #[cold]
    #[inline(never)]
    fn grow(
        &self,
        state: &mut PoolState,
        order: u8,
        block: usize,
        access: Access,
    ) -> Result<(usize, u32), DmaError> {
        let arena = self.new_arena(state, block, access)?;
        let index = if let Some(free_slot) = state.arenas.iter().position(Option::is_none) {
            state.arenas[free_slot] = Some(arena);
            free_slot
        } else {
            state.arenas.push(Some(arena));
            state.arenas.len() - 1
        };
        let unit = state.arenas[index]
            .as_mut()
            .and_then(|a| a.buddy.alloc(order))
            .ok_or_else(|| {
                DmaError::Invalid(format!("a block of {block} bytes does not fit an arena"))
            })?;
        Ok((index, unit))
    }

    /// The pages of an arena: under [`PagePolicy::Auto`], base pages for an arena smaller
    /// than a huge page (a huge page would make its memory larger than its mapping), and
    /// once a huge page could not be had for this pool.
    /// [`PagePolicy::HugeOnly`] with such an arena was refused when the pool was made.
    fn arena_pages(&self) -> PagePolicy {
        match self.config.pages {
            PagePolicy::Auto
                if self.config.arena_size < HUGE_PAGE || self.no_huge.load(Ordering::Relaxed) =>
            {
                PagePolicy::BaseOnly
            }
            pages => pages,
        }
    }

    /// The size of a new base-page arena for `access` that must hold a `block`: as large as
    /// the pool's arenas for `access` together, between [`FIRST_BASE_ARENA`] (or the mapping
    /// page, if larger) and the pool's `arena_size`. Every base page of an arena is zeroed
    /// and faulted in when it is made, so a process that needs a few hundred KiB (a
    /// libibumad program: two 2 MiB arenas per pool would cost it 8 MiB of zeroed pages, about
    /// 10 ms) gets arenas of its size, and a growing one still adds arenas seldom (the count
    /// grows with the logarithm of the memory).
    fn base_arena_size(&self, state: &PoolState, block: usize, access: Access) -> usize {
        let held: usize = state
            .arenas
            .iter()
            .flatten()
            .filter(|a| a.access == access)
            .map(|a| a.mapped)
            .sum();
        held.max(block)
            .max(FIRST_BASE_ARENA)
            .max(self.map_page)
            .checked_next_power_of_two()
            .map_or(self.config.arena_size, |s| s.min(self.config.arena_size))
    }

    /// Get, place and map a new arena able to hold a `block` (under the state lock: growth
    /// is rare). On huge pages it is `arena_size` bytes (one huge page costs no more than
    /// part of one); on base pages, [`PoolInner::base_arena_size`].
    fn new_arena(
        &self,
        state: &PoolState,
        block: usize,
        access: Access,
    ) -> Result<Arena, DmaError> {
        let mem = match self.arena_pages() {
            PagePolicy::BaseOnly => self.arena_memory(
                self.base_arena_size(state, block, access),
                PagePolicy::BaseOnly,
            )?,
            PagePolicy::HugeOnly => {
                self.arena_memory(self.config.arena_size, PagePolicy::HugeOnly)?
            }
            PagePolicy::Auto => {
                match self.arena_memory(self.config.arena_size, PagePolicy::HugeOnly) {
                    Ok(mem) => mem,
                    // No room for a huge page under RLIMIT_MEMLOCK: a smaller arena on base
                    // pages may fit (the next arena asks for a huge page again).
                    Err(DmaError::MemlockTooLow { .. }) => self.arena_memory(
                        self.base_arena_size(state, block, access),
                        PagePolicy::BaseOnly,
                    )?,
                    Err(err) => {
                        // Asked again for every arena it would cost three system calls each
                        // time; this pool keeps to base pages from now on.
                        self.no_huge.store(true, Ordering::Relaxed);
                        tracing::info!(
                            "DMA pool: no 2 MiB huge pages ({err}); arenas on base pages \
                             (reserve some with /proc/sys/vm/nr_hugepages)"
                        );
                        self.arena_memory(
                            self.base_arena_size(state, block, access),
                            PagePolicy::BaseOnly,
                        )?
                    }
                }
            }
        };
        let size = mem.len();
        let iova = self.lock_iova().alloc(size as u64, size as u64)?;
        // SAFETY: `mem` is memory of exactly `size` bytes, aligned to `map_page` as the IOVA
        // is, that the arena owns; it is unmapped (release_arena) before the memory is
        // dropped.
        if let Err(e) = unsafe { self.mapper.map(mem.as_ptr(), size, iova, access) } {
            self.map_failed(&e, mem, iova, size as u64);
            return Err(e);
        }
        self.arena_count.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(
            iova,
            size,
            ?access,
            pages = ?mem.page_kind(),
            mapper = self.mapper.name(),
            "DMA pool: new arena"
        );
        let max_order = Buddy::order_for(size);
        Ok(Arena {
            mem,
            mapped: size,
            iova,
            access,
            buddy: Buddy::new(max_order),
        })
    }

    /// The memory of an arena: exactly `size` bytes (a power of two, a multiple of the
    /// mapping page) on `pages`, checked against the pinning headroom before it is allocated
    /// and faulted in.
    fn arena_memory(&self, size: usize, pages: PagePolicy) -> Result<DmaMemory, DmaError> {
        self.mapper.check_pin_headroom(size)?;
        let mem = DmaMemory::with_alignment(size, pages, self.map_page)?;
        if mem.len() != size {
            // Not reached: huge pages only back arenas of at least a huge page (a multiple of
            // it: powers of two), and `size` is a multiple of `map_page`. Checked before
            // anything is mapped, so that an arena's memory and its mapping are the same bytes.
            return Err(DmaError::Invalid(format!(
                "arena of {size:#x} bytes got {:#x} bytes of {:?} memory (pool bug)",
                mem.len(),
                mem.page_kind()
            )));
        }
        Ok(mem)
    }

    /// Unmap an idle arena and free its IOVA and memory; true when it is gone. When the unmap
    /// fails the arena stays mapped (and counted in [`Accounting::arenas`]) with its memory
    /// and IOVA kept forever.
    fn release_arena(&self, arena: Arena) -> bool {
        match self.mapper.unmap(arena.iova, arena.mapped) {
            Ok(()) => {
                self.arena_count.fetch_sub(1, Ordering::Relaxed);
                if let Err(e) = self.lock_iova().free(arena.iova, arena.mapped as u64) {
                    tracing::error!("DMA pool: freeing an arena's IOVA: {e}");
                }
                true
            }
            Err(e) => {
                self.unmap_failed(&e, arena.mem);
                false
            }
        }
    }

    #[cold]
    #[inline(never)]
    fn lease_own(
        &self,
        len: usize,
        align: usize,
        access: Access,
    ) -> Result<(NonNull<u8>, u64, Backing), DmaError> {
        // Before the memory is allocated and faulted in, not only in the map: the least the
        // mapping can be (huge pages may make it longer, which the map checks). A length that
        // cannot be rounded is refused by the allocation.
        if let Some(least) = len.checked_next_multiple_of(self.map_page) {
            self.mapper.check_pin_headroom(least)?;
        }
        // Address and length multiples of the IOMMU's page too: VFIO refuses anything else.
        let pages = match self.config.pages {
            // A huge page could not be had for an arena: not for this lease either.
            PagePolicy::Auto if self.no_huge.load(Ordering::Relaxed) => PagePolicy::BaseOnly,
            pages => pages,
        };
        let mem = DmaMemory::with_alignment(len, pages, self.map_page)?;
        let mapped = mem.len();
        // The mapping's granule: a page of the memory, or of the IOMMU if that is larger.
        let granule = mem.page_size().max(self.map_page);
        // Aligning the IOVA to the page size of the memory lets a huge page be one IOMMU
        // entry.
        let iova_align = align.max(granule) as u64;
        let (iova, reserved) = match self.config.mode {
            // A guard of one granule is reserved with the lease and never mapped, so that an
            // overrun faults instead of landing in the next lease; next fit keeps a released
            // range out of use a while.
            LeaseMode::Strict => {
                let reserved = (mapped + granule) as u64;
                (
                    self.lock_iova().alloc_next_fit(reserved, iova_align)?,
                    reserved,
                )
            }
            LeaseMode::Pooled => (
                self.lock_iova().alloc(mapped as u64, iova_align)?,
                mapped as u64,
            ),
        };
        // SAFETY: `mem` is `mapped` bytes long and aligned to `map_page` (a multiple of it, as
        // `iova` is); the lease owns it and unmaps before dropping it (DmaLease::drop), or
        // never drops it if the unmap fails.
        if let Err(e) = unsafe { self.mapper.map(mem.as_ptr(), mapped, iova, access) } {
            self.map_failed(&e, mem, iova, reserved);
            return Err(e);
        }
        // Strict: the lease ends where the mapping does (the guard page follows), as far as
        // its alignment allows, so that an overrun faults at once instead of landing in the
        // rest of the last page (an offset that is a multiple of the caller's `align`; the
        // mapping starts on a multiple of it, or the padding is shorter than it and this is 0).
        let offset = match self.config.mode {
            LeaseMode::Strict => (mapped - len) / align * align,
            LeaseMode::Pooled => 0,
        };
        // SAFETY: `offset` is below `mapped - len + 1`, inside the memory's allocation.
        let Some(host) = NonNull::new(unsafe { mem.as_ptr().add(offset) }) else {
            unreachable!("DmaMemory is never at address 0");
        };
        Ok((
            host,
            iova + offset as u64,
            Backing::Own {
                mem: ManuallyDrop::new(mem),
                offset,
                reserved,
            },
        ))
    }

    /// A map of `mem` at `iova` (inside `reserved` bytes taken from the IOVA allocator)
    /// failed: give both back, unless the mapper still has a mapping there (a map that failed
    /// halfway, against the [`DmaMapper::map`] contract), in which case the device may reach
    /// `mem` and both are kept as after a failed unmap.
    fn map_failed(&self, err: &DmaError, mem: DmaMemory, iova: u64, reserved: u64) {
        if self.mapper.has_mapping_in(iova, mem.len()) {
            self.keep_reachable(err, "the failed map left a mapping behind", mem);
            return;
        }
        if let Err(e) = self.lock_iova().free(iova, reserved) {
            tracing::error!("DMA pool: freeing the IOVA of a failed map: {e}");
        }
        drop(mem);
    }

    /// An unmap failed: the device may still reach `mem`, so keep it (and its IOVA) forever.
    fn unmap_failed(&self, err: &DmaError, mem: DmaMemory) {
        self.keep_reachable(err, "the mapping may still be live", mem);
    }

    /// The device may still reach `mem` (`why`): keep it and its IOVA out of use forever,
    /// counted in [`Accounting::unmap_failures`].
    fn keep_reachable(&self, err: &DmaError, why: &str, mem: DmaMemory) {
        self.unmap_failures.fetch_add(1, Ordering::Relaxed);
        tracing::error!(
            "DMA pool: {err}; {why}, so the {} bytes of memory and their IOVA are kept out of use",
            mem.len()
        );
        std::mem::forget(mem);
    }
}

impl Drop for PoolInner {
    fn drop(&mut self) {
        // No lease is out: each holds an Arc to us. Quarantined blocks are still allocated:
        // an arena holding one stays mapped, and its memory is never freed.
        let arenas = std::mem::take(&mut self.lock_state().arenas);
        for arena in arenas.into_iter().flatten() {
            if arena.buddy.is_idle() {
                self.release_arena(arena);
            } else {
                std::mem::forget(arena);
            }
        }
    }
}

/// An owned, mapped DMA buffer: `len` bytes at IOVA [`DmaLease::iova`].
///
/// Dropping it gives it back (in strict mode: unmaps it; an unmap failure is logged and counted
/// in [`Accounting::unmap_failures`], never a panic). Drop it only when the device can no longer
/// touch it (DESIGN §4.3). All access is bounds-checked and goes through raw pointers: no
/// `&[u8]` into the lease exists. `Send` (a lease moves with the send slot that owns it) but not
/// `Sync`.
pub struct DmaLease {
    pool: Arc<PoolInner>,
    ptr: NonNull<u8>,
    iova: u64,
    len: usize,
    access: Access,
    backing: Backing,
}

// SAFETY: the lease owns its block exclusively; its pointer is valid from any thread while the
// pool (held by the Arc) keeps the arena or own memory alive. It is not Sync: its accessors
// write through `&self`, which two threads must not do at once.
unsafe impl Send for DmaLease {}

impl DmaLease {
    /// The device address of byte 0.
    pub fn iova(&self) -> u64 {
        self.iova
    }

    /// Length in bytes, as requested.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: leases are at least one byte.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// What the device may do with the lease.
    pub fn access(&self) -> Access {
        self.access
    }

    /// The host address of byte 0, for code that must hand the address on (never turn it into
    /// a reference). Valid for [`DmaLease::len`] bytes while the lease lives.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// The device address of byte `offset` (`offset < len`).
    pub fn iova_at(&self, offset: usize) -> Result<u64, DmaError> {
        self.check(offset, 1)?;
        Ok(self.iova + offset as u64)
    }

    /// Copy `buf.len()` bytes at `offset` out of the lease.
    pub fn read(&self, offset: usize, buf: &mut [u8]) -> Result<(), DmaError> {
        let p = self.at(offset, buf.len())?;
        // SAFETY: `p .. p + buf.len()` is inside the lease (checked); `buf` is a Rust slice and
        // so not DMA memory: they do not overlap.
        unsafe { ptr::copy_nonoverlapping(p, buf.as_mut_ptr(), buf.len()) };
        Ok(())
    }

    /// Copy `data` into the lease at `offset`.
    pub fn write(&self, offset: usize, data: &[u8]) -> Result<(), DmaError> {
        let p = self.at(offset, data.len())?;
        // SAFETY: as in `read`, the other way round.
        unsafe { ptr::copy_nonoverlapping(data.as_ptr(), p, data.len()) };
        Ok(())
    }

    /// Set `len` bytes at `offset` to `byte`.
    pub fn fill(&self, offset: usize, len: usize, byte: u8) -> Result<(), DmaError> {
        let p = self.at(offset, len)?;
        // SAFETY: `p .. p + len` is inside the lease (checked).
        unsafe { ptr::write_bytes(p, byte, len) };
        Ok(())
    }

    /// Zero the whole lease.
    pub fn zero(&self) {
        // SAFETY: exactly the lease's bytes.
        unsafe { ptr::write_bytes(self.ptr.as_ptr(), 0, self.len) };
    }

    /// Volatile read of the byte at `offset`.
    pub fn read_u8(&self, offset: usize) -> Result<u8, DmaError> {
        let p = self.at(offset, 1)?;
        // SAFETY: one byte inside the lease (checked).
        Ok(unsafe { volatile::load_u8(p) })
    }

    /// Volatile read of a big-endian u16 at `offset`.
    pub fn read_u16_be(&self, offset: usize) -> Result<u16, DmaError> {
        let p = self.at(offset, 2)?;
        // SAFETY: two bytes inside the lease (checked).
        Ok(unsafe { volatile::load_be16(p) })
    }

    /// Volatile read of a big-endian u32 at `offset` (one load when 4-aligned).
    pub fn read_u32_be(&self, offset: usize) -> Result<u32, DmaError> {
        let p = self.at(offset, 4)?;
        // SAFETY: four bytes inside the lease (checked).
        Ok(unsafe { volatile::load_be32(p) })
    }

    /// Volatile read of a big-endian u64 at `offset` (one load when 8-aligned).
    pub fn read_u64_be(&self, offset: usize) -> Result<u64, DmaError> {
        let p = self.at(offset, 8)?;
        // SAFETY: eight bytes inside the lease (checked).
        Ok(unsafe { volatile::load_be64(p) })
    }

    /// Volatile write of the byte at `offset`.
    pub fn write_u8(&self, offset: usize, v: u8) -> Result<(), DmaError> {
        let p = self.at(offset, 1)?;
        // SAFETY: one byte inside the lease (checked).
        unsafe { volatile::store_u8(p, v) };
        Ok(())
    }

    /// Volatile write of a big-endian u16 at `offset`.
    pub fn write_u16_be(&self, offset: usize, v: u16) -> Result<(), DmaError> {
        let p = self.at(offset, 2)?;
        // SAFETY: two bytes inside the lease (checked).
        unsafe { volatile::store_be16(p, v) };
        Ok(())
    }

    /// Volatile write of a big-endian u32 at `offset` (one store when 4-aligned).
    pub fn write_u32_be(&self, offset: usize, v: u32) -> Result<(), DmaError> {
        let p = self.at(offset, 4)?;
        // SAFETY: four bytes inside the lease (checked).
        unsafe { volatile::store_be32(p, v) };
        Ok(())
    }

    /// Volatile write of a big-endian u64 at `offset` (one store when 8-aligned).
    pub fn write_u64_be(&self, offset: usize, v: u64) -> Result<(), DmaError> {
        let p = self.at(offset, 8)?;
        // SAFETY: eight bytes inside the lease (checked).
        unsafe { volatile::store_be64(p, v) };
        Ok(())
    }

    fn check(&self, offset: usize, len: usize) -> Result<(), DmaError> {
        if offset.checked_add(len).is_some_and(|end| end <= self.len) {
            Ok(())
        } else {
            Err(DmaError::OutOfBounds {
                iova: self.iova,
                offset,
                len,
                lease_len: self.len,
            })
        }
    }

    /// The host pointer of `[offset, offset + len)`, after the bounds check.
    #[inline]
    fn at(&self, offset: usize, len: usize) -> Result<*mut u8, DmaError> {
        self.check(offset, len)?;
        Ok(self.ptr.as_ptr().wrapping_add(offset))
    }
}

impl Drop for DmaLease {
    fn drop(&mut self) {
        let pool = &self.pool;
        if pool.quarantining.load(Ordering::SeqCst) {
            // The device may still write it: keep the block allocated (its arena can then
            // never be trimmed or unmapped) or the own memory mapped and never dropped (it is
            // in a ManuallyDrop, left untaken).
            pool.quarantined.fetch_add(1, Ordering::Relaxed);
            pool.quarantined_bytes
                .fetch_add(self.len as u64, Ordering::Relaxed);
            pool.leases_out.fetch_sub(1, Ordering::Relaxed);
            pool.lease_bytes
                .fetch_sub(self.len as u64, Ordering::Relaxed);
            return;
        }
        match &mut self.backing {
            Backing::Arena { arena, unit, order } => {
                let mut state = pool.lock_state();
                if let Some(a) = state
                    .arenas
                    .get_mut(*arena as usize)
                    .and_then(Option::as_mut)
                {
                    a.buddy.free(*unit, *order);
                } else {
                    tracing::error!(
                        iova = self.iova,
                        "DMA lease dropped after its arena was released (pool bug)"
                    );
                }
            }
            Backing::Own {
                mem,
                offset,
                reserved,
            } => {
                // SAFETY: `mem` is taken exactly once, here, and the backing is not used after.
                let mem = unsafe { ManuallyDrop::take(mem) };
                let mapped = mem.len();
                let base = self.iova - *offset as u64;
                match pool.mapper.unmap(base, mapped) {
                    Ok(()) => {
                        if let Err(e) = pool.lock_iova().free(base, *reserved) {
                            tracing::error!("DMA lease: freeing its IOVA: {e}");
                        }
                        drop(mem);
                    }
                    Err(e) => pool.unmap_failed(&e, mem),
                }
            }
        }
        pool.leases_out.fetch_sub(1, Ordering::Relaxed);
        pool.lease_bytes
            .fetch_sub(self.len as u64, Ordering::Relaxed);
    }
}

impl fmt::Debug for DmaLease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DmaLease")
            .field("iova", &format_args!("{:#x}", self.iova))
            .field("len", &self.len)
            .field("access", &self.access)
            .field(
                "backing",
                &match self.backing {
                    Backing::Arena { .. } => "arena",
                    Backing::Own { .. } => "own mapping",
                },
            )
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::test_seam;
    use crate::{PageKind, SimIommu};

    /// Backs this thread's "huge" memory with base pages (2 MiB rounding kept) until dropped:
    /// the machine running the tests may have no huge pages reserved.
    struct HugeOnBasePages;

    impl HugeOnBasePages {
        fn on() -> Self {
            test_seam::set_huge_on_base_pages(true);
            // The seam gives what huge pages would: 1 MiB under Auto becomes 2 MiB.
            let probe = DmaMemory::with_policy(1 << 20, PagePolicy::Auto).unwrap();
            assert_eq!(
                (probe.page_kind(), probe.len()),
                (PageKind::Huge2M, 2 << 20)
            );
            HugeOnBasePages
        }
    }

    impl Drop for HugeOnBasePages {
        fn drop(&mut self) {
            test_seam::set_huge_on_base_pages(false);
        }
    }

    /// A pooled pool of 1 MiB arenas (below a huge page) on a simulated IOMMU.
    fn pooled_with_1mib_arenas() -> (Arc<SimIommu>, DmaPool) {
        let iommu = Arc::new(SimIommu::new());
        let pool = DmaPool::with_config(
            iommu.clone(),
            PoolConfig {
                arena_size: 1 << 20,
                ..PoolConfig::new(LeaseMode::Pooled)
            },
        )
        .unwrap();
        (iommu, pool)
    }

    /// Under `PagePolicy::Auto` a 1 MiB request gets a 2 MiB huge page when there are any; an
    /// arena of 1 MiB must still be 1 MiB of memory, so that its release unmaps and frees
    /// exactly what was mapped and allocated, and nothing is left behind.
    #[test]
    fn an_auto_arena_below_a_huge_page_is_released_whole_where_huge_pages_exist() {
        let _huge = HugeOnBasePages::on();
        let (iommu, pool) = pooled_with_1mib_arenas();
        let lease = pool.lease(64, 64, Access::ReadWrite).unwrap();
        assert_eq!(pool.accounting().arenas, 1);
        drop(lease);
        assert_eq!(pool.trim(), 1);
        assert_eq!(pool.accounting(), Accounting::default());
        assert_eq!(iommu.live_mappings(), 0);
        assert_eq!(pool.iova_stats().allocations, 0);
    }

    /// Release unmaps and frees the length the arena was mapped with, not its memory's length.
    #[test]
    fn release_uses_the_mapped_length_of_the_arena() {
        let _huge = HugeOnBasePages::on();
        let (iommu, pool) = pooled_with_1mib_arenas();
        let inner = &pool.inner;
        // Memory longer than the mapping: 2 MiB of "huge" memory, 1 MiB of it mapped.
        let mem = DmaMemory::with_policy(1 << 20, PagePolicy::HugeOnly).unwrap();
        assert_eq!(mem.len(), 2 << 20);
        let mapped = 1 << 20;
        let iova = inner
            .lock_iova()
            .alloc(mapped as u64, mapped as u64)
            .unwrap();
        // SAFETY: `mem` is page-aligned and longer than `mapped`; the arena owns it and
        // release_arena unmaps before dropping it.
        unsafe { iommu.map(mem.as_ptr(), mapped, iova, Access::ReadWrite) }.unwrap();
        inner.arena_count.fetch_add(1, Ordering::Relaxed);
        let arena = Arena {
            mem,
            mapped,
            iova,
            access: Access::ReadWrite,
            buddy: Buddy::new(Buddy::order_for(mapped)),
        };
        assert!(inner.release_arena(arena));
        assert_eq!(pool.accounting(), Accounting::default());
        assert_eq!(pool.iova_stats().allocations, 0);
    }
}

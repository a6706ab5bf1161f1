//! Register access to a device region (a BAR): 32- and 64-bit big-endian reads and writes.
//!
//! A mapped BAR is touched only through raw pointers with volatile accesses, never through a
//! Rust reference (references to MMIO let the compiler invent reads; vfio-userspace.md §4.1).
//! An emulated BAR forwards the same bytes to a device model (trap and emulate).
//!
//! A BAR that VFIO lets us map only in parts (the sparse-mmap capability: typically every page
//! but the MSI-X table's) keeps its offsets: the backend reserves the whole BAR's address range
//! with no access rights and maps the allowed areas into it at their own offsets. Such an
//! `Mmio` knows its areas, and [`Mmio::in_bounds`] is false for any access that is not wholly
//! inside one of them, so the access asserts like any other out-of-range offset; were that
//! check ever bypassed, the reserved pages would fault instead of reaching another mapping.

use std::any::Any;
use std::fmt;
use std::ptr::NonNull;
use std::sync::Arc;

use crate::backend::MmapArea;
use crate::emulated::DeviceModel;

/// One device region that registers are read from and written to.
#[derive(Clone)]
pub struct Mmio {
    len: u64,
    /// When present, the only parts of `0..len` that may be accessed.
    areas: Option<Arc<[MmapArea]>>,
    target: Target,
}

#[derive(Clone)]
enum Target {
    /// A BAR mapped into our address space. `keep` owns the mapping (e.g. a `memmap2::MmapRaw`).
    Mapped {
        base: NonNull<u8>,
        _keep: Arc<dyn Any + Send + Sync>,
    },
    /// A BAR of an in-process device model.
    Emulated {
        model: Arc<dyn DeviceModel>,
        bar: u8,
    },
}

// SAFETY: the mapped pointer is only used for volatile accesses, which the device serializes;
// the mapping itself is owned by `keep`, which is Send + Sync.
unsafe impl Send for Mmio {}
// SAFETY: as above; concurrent volatile MMIO accesses are what hardware registers are for.
unsafe impl Sync for Mmio {}

impl fmt::Debug for Mmio {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.target {
            Target::Mapped { base, .. } => {
                write!(f, "Mmio(mapped {:p}, {:#x} bytes", base, self.len)?;
                if let Some(areas) = &self.areas {
                    write!(f, ", areas {areas:x?}")?;
                }
                f.write_str(")")
            }
            Target::Emulated { bar, .. } => {
                write!(f, "Mmio(emulated BAR{bar}, {:#x} bytes)", self.len)
            }
        }
    }
}

/// Pointer to a register of type `T` at `offset` from `base`.
///
/// Callers have checked with [`Mmio::in_bounds`] that `offset` is a multiple of the register
/// size, and BARs are page aligned, so the cast pointer is aligned.
#[inline]
#[allow(clippy::cast_ptr_alignment)]
fn reg_ptr<T>(base: NonNull<u8>, offset: u64) -> *mut T {
    base.as_ptr().wrapping_add(offset as usize).cast::<T>()
}

impl Mmio {
    /// A region mapped at `base` for `len` bytes, kept alive by `keep`.
    ///
    /// # Safety
    /// `base .. base + len` must be a live mapping of device memory for as long as `keep`
    /// lives, and nothing may create Rust references into it.
    pub unsafe fn mapped(base: NonNull<u8>, len: u64, keep: Arc<dyn Any + Send + Sync>) -> Self {
        Mmio {
            len,
            areas: None,
            target: Target::Mapped { base, _keep: keep },
        }
    }

    /// A region of `len` bytes at `base` of which only `areas` are mapped (VFIO sparse mmap);
    /// the rest of `base .. base + len` is reserved without access rights.
    ///
    /// # Safety
    /// Every area of `areas` must be inside `0..len` and a live mapping of device memory at
    /// `base + area.offset` for as long as `keep` lives, and nothing may create Rust
    /// references into it.
    pub unsafe fn mapped_sparse(
        base: NonNull<u8>,
        len: u64,
        areas: Arc<[MmapArea]>,
        keep: Arc<dyn Any + Send + Sync>,
    ) -> Self {
        Mmio {
            len,
            areas: Some(areas),
            target: Target::Mapped { base, _keep: keep },
        }
    }

    /// The accessible areas when only parts of the region are mapped (None: all of it).
    pub fn areas(&self) -> Option<&[MmapArea]> {
        self.areas.as_deref()
    }

    /// BAR `bar` of an emulated device, `len` bytes long.
    pub fn emulated(model: Arc<dyn DeviceModel>, bar: u8, len: u64) -> Self {
        Mmio {
            len,
            areas: None,
            target: Target::Emulated { model, bar },
        }
    }

    /// Length of the region in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// True for a zero-length region.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// True when `offset .. offset + size` is inside the region (inside one mapped area, for a
    /// sparse region) and naturally aligned. Check offsets that come from the device with this
    /// before using them: the accessors assert it.
    pub fn in_bounds(&self, offset: u64, size: u64) -> bool {
        let Some(end) = offset.checked_add(size) else {
            return false;
        };
        if size == 0 || offset % size != 0 || end > self.len {
            return false;
        }
        match &self.areas {
            None => true,
            Some(areas) => areas
                .iter()
                .any(|a| offset >= a.offset && end - a.offset <= a.size),
        }
    }

    #[track_caller]
    fn check(&self, offset: u64, size: u64) {
        assert!(
            self.in_bounds(offset, size),
            "register access of {size} bytes at {offset:#x} outside or misaligned in a {:#x}-byte region{}",
            self.len,
            if self.areas.is_some() {
                " (or outside its mapped areas)"
            } else {
                ""
            }
        );
    }

    /// Read a 32-bit big-endian register.
    #[inline]
    #[track_caller]
    pub fn read32(&self, offset: u64) -> u32 {
        self.check(offset, 4);
        match &self.target {
            Target::Mapped { base, .. } => {
                // SAFETY: in bounds and aligned (checked), inside a live device mapping (the
                // contract of `mapped`); volatile so the access happens exactly once.
                let raw = unsafe { reg_ptr::<u32>(*base, offset).read_volatile() };
                u32::from_be(raw)
            }
            Target::Emulated { model, bar } => {
                let mut b = [0u8; 4];
                model.mmio_read(*bar, offset, &mut b);
                u32::from_be_bytes(b)
            }
        }
    }

    /// Write a 32-bit big-endian register.
    #[inline]
    #[track_caller]
    pub fn write32(&self, offset: u64, value: u32) {
        self.check(offset, 4);
        match &self.target {
            Target::Mapped { base, .. } => {
                // SAFETY: as in `read32`.
                unsafe {
                    reg_ptr::<u32>(*base, offset).write_volatile(value.to_be());
                }
            }
            Target::Emulated { model, bar } => model.mmio_write(*bar, offset, &value.to_be_bytes()),
        }
    }

    /// Read a 64-bit big-endian register with one 64-bit access.
    #[inline]
    #[track_caller]
    pub fn read64(&self, offset: u64) -> u64 {
        self.check(offset, 8);
        match &self.target {
            Target::Mapped { base, .. } => {
                // SAFETY: as in `read32`.
                let raw = unsafe { reg_ptr::<u64>(*base, offset).read_volatile() };
                u64::from_be(raw)
            }
            Target::Emulated { model, bar } => {
                let mut b = [0u8; 8];
                model.mmio_read(*bar, offset, &mut b);
                u64::from_be_bytes(b)
            }
        }
    }

    /// Write a 64-bit big-endian register (a doorbell) as one 64-bit store.
    ///
    /// Callers ring doorbells with [`crate::barrier::to_device`] before this call.
    #[inline]
    #[track_caller]
    pub fn write64(&self, offset: u64, value: u64) {
        self.check(offset, 8);
        match &self.target {
            Target::Mapped { base, .. } => {
                // SAFETY: as in `read32`.
                unsafe {
                    reg_ptr::<u64>(*base, offset).write_volatile(value.to_be());
                }
            }
            Target::Emulated { model, bar } => model.mmio_write(*bar, offset, &value.to_be_bytes()),
        }
    }

    /// Write raw bytes (already in device byte order) with one store; for doorbells that are
    /// defined as byte images, such as the first 8 bytes of a WQE control segment.
    #[inline]
    #[track_caller]
    pub fn write_bytes64(&self, offset: u64, bytes: [u8; 8]) {
        self.check(offset, 8);
        match &self.target {
            Target::Mapped { base, .. } => {
                // SAFETY: as in `read32`.
                unsafe {
                    reg_ptr::<u64>(*base, offset).write_volatile(u64::from_ne_bytes(bytes));
                }
            }
            Target::Emulated { model, bar } => model.mmio_write(*bar, offset, &bytes),
        }
    }
}

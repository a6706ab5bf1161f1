//! Register access to a device region (a BAR): 32- and 64-bit big-endian reads and writes,
//! and little-endian ones for the few devices whose registers are little-endian (QEMU's `edu`,
//! which the QEMU guest test drives; PCI config space is little-endian too).
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

    /// Read a 32-bit little-endian register.
    #[inline]
    #[track_caller]
    pub fn read32_le(&self, offset: u64) -> u32 {
        self.check(offset, 4);
        match &self.target {
            Target::Mapped { base, .. } => {
                // SAFETY: as in `read32`.
                let raw = unsafe { reg_ptr::<u32>(*base, offset).read_volatile() };
                u32::from_le(raw)
            }
            Target::Emulated { model, bar } => {
                let mut b = [0u8; 4];
                model.mmio_read(*bar, offset, &mut b);
                u32::from_le_bytes(b)
            }
        }
    }

    /// Write a 32-bit little-endian register.
    #[inline]
    #[track_caller]
    pub fn write32_le(&self, offset: u64, value: u32) {
        self.check(offset, 4);
        match &self.target {
            Target::Mapped { base, .. } => {
                // SAFETY: as in `read32`.
                unsafe {
                    reg_ptr::<u32>(*base, offset).write_volatile(value.to_le());
                }
            }
            Target::Emulated { model, bar } => model.mmio_write(*bar, offset, &value.to_le_bytes()),
        }
    }

    /// Read a 64-bit little-endian register with one 64-bit access.
    #[inline]
    #[track_caller]
    pub fn read64_le(&self, offset: u64) -> u64 {
        self.check(offset, 8);
        match &self.target {
            Target::Mapped { base, .. } => {
                // SAFETY: as in `read32`.
                let raw = unsafe { reg_ptr::<u64>(*base, offset).read_volatile() };
                u64::from_le(raw)
            }
            Target::Emulated { model, bar } => {
                let mut b = [0u8; 8];
                model.mmio_read(*bar, offset, &mut b);
                u64::from_le_bytes(b)
            }
        }
    }

    /// Write a 64-bit little-endian register as one 64-bit store (a device that splits a
    /// 64-bit register into two 32-bit halves may act on the first half alone).
    #[inline]
    #[track_caller]
    pub fn write64_le(&self, offset: u64, value: u64) {
        self.check(offset, 8);
        match &self.target {
            Target::Mapped { base, .. } => {
                // SAFETY: as in `read32`.
                unsafe {
                    reg_ptr::<u64>(*base, offset).write_volatile(value.to_le());
                }
            }
            Target::Emulated { model, bar } => model.mmio_write(*bar, offset, &value.to_le_bytes()),
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::panic::AssertUnwindSafe;

    /// A page of ordinary memory standing in for a mapped BAR, so the byte order of each
    /// accessor can be seen in memory.
    fn page_bar() -> (Mmio, NonNull<u8>) {
        let map = memmap2::MmapMut::map_anon(4096).unwrap();
        let base = NonNull::new(map.as_ptr().cast_mut()).unwrap();
        // SAFETY: the anonymous mapping is live for as long as the Arc that owns it, and the
        // test touches it only through the Mmio and raw-pointer reads.
        let mmio = unsafe { Mmio::mapped(base, 4096, Arc::new(map)) };
        (mmio, base)
    }

    fn bytes(base: NonNull<u8>, offset: usize, n: usize) -> Vec<u8> {
        (0..n)
            // SAFETY: inside the live page of `page_bar`.
            .map(|i| unsafe { base.as_ptr().add(offset + i).read_volatile() })
            .collect()
    }

    #[test]
    fn little_endian_accessors_put_the_low_byte_first() {
        let (mmio, base) = page_bar();
        mmio.write32_le(0x10, 0x0100_00ed);
        assert_eq!(bytes(base, 0x10, 4), [0xed, 0x00, 0x00, 0x01]);
        assert_eq!(mmio.read32_le(0x10), 0x0100_00ed);
        assert_eq!(
            mmio.read32(0x10),
            0xed00_0001,
            "the same bytes read big-endian"
        );

        mmio.write64_le(0x80, 0x0102_0304_0506_0708);
        assert_eq!(
            bytes(base, 0x80, 8),
            [0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01]
        );
        assert_eq!(mmio.read64_le(0x80), 0x0102_0304_0506_0708);
        assert_eq!(mmio.read64(0x80), 0x0807_0605_0403_0201);

        mmio.write32(0x20, 0x1122_3344);
        assert_eq!(bytes(base, 0x20, 4), [0x11, 0x22, 0x33, 0x44]);
        assert_eq!(mmio.read32_le(0x20), 0x4433_2211);
    }

    #[test]
    fn little_endian_accessors_check_bounds_and_alignment() {
        let (mmio, _) = page_bar();
        let panics = |f: &dyn Fn()| std::panic::catch_unwind(AssertUnwindSafe(f)).is_err();
        for bad in [
            panics(&|| {
                let _ = mmio.read32_le(4096);
            }),
            panics(&|| mmio.write32_le(0x2, 1)),
            panics(&|| {
                let _ = mmio.read64_le(0x4);
            }),
            panics(&|| mmio.write64_le(4096 - 4, 1)),
        ] {
            assert!(bad, "an out-of-range or misaligned access must not happen");
        }
    }

    /// A model that keeps the bytes of every BAR write and serves them back, to see what an
    /// emulated device receives.
    #[derive(Default)]
    struct BytesModel(std::sync::Mutex<std::collections::HashMap<u64, Vec<u8>>>);

    impl DeviceModel for BytesModel {
        fn pci_id(&self) -> crate::backend::PciId {
            crate::backend::PciId {
                vendor: 0x1234,
                device: 0x11e8,
            }
        }
        fn regions(&self) -> Vec<crate::backend::RegionInfo> {
            Vec::new()
        }
        fn mmio_read(&self, _bar: u8, offset: u64, data: &mut [u8]) {
            data.copy_from_slice(&self.0.lock().unwrap()[&offset]);
        }
        fn mmio_write(&self, _bar: u8, offset: u64, data: &[u8]) {
            self.0.lock().unwrap().insert(offset, data.to_vec());
        }
        fn config_read(&self, _offset: u64, _data: &mut [u8]) {}
        fn config_write(&self, _offset: u64, _data: &[u8]) {}
        fn irq_info(&self, index: crate::backend::IrqIndex) -> crate::backend::IrqInfo {
            crate::backend::IrqInfo {
                index,
                count: 0,
                eventfd: false,
                maskable: false,
                automasked: false,
                noresize: false,
            }
        }
        fn set_irqs(
            &self,
            _index: crate::backend::IrqIndex,
            _start: u32,
            _fds: Vec<crate::eventfd::EventFd>,
        ) {
        }
        fn reset(&self) -> bool {
            false
        }
        fn dma_mapper(&self) -> Arc<dyn dma::DmaMapper> {
            Arc::new(dma::SimIommu::new())
        }
        fn now(&self) -> std::time::Duration {
            std::time::Duration::ZERO
        }
        fn run_until(&self, _deadline: std::time::Duration) {}
    }

    #[test]
    fn emulated_little_endian_accesses_carry_low_byte_first() {
        let model = Arc::new(BytesModel::default());
        let mmio = Mmio::emulated(model.clone(), 0, 4096);
        mmio.write32_le(0x04, 0x0100_00ed);
        mmio.write64_le(0x80, 0x0102_0304_0506_0708);
        {
            let seen = model.0.lock().unwrap();
            assert_eq!(seen[&0x04], [0xed, 0x00, 0x00, 0x01]);
            assert_eq!(seen[&0x80], [8, 7, 6, 5, 4, 3, 2, 1]);
        }
        assert_eq!(mmio.read32_le(0x04), 0x0100_00ed);
        assert_eq!(mmio.read64_le(0x80), 0x0102_0304_0506_0708);
        assert_eq!(mmio.read32(0x04), 0xed00_0001);
    }
}

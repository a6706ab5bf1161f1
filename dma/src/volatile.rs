//! Big-endian volatile loads and stores on raw pointers into device-visible memory.
//!
//! Device formats are big-endian, so the conversion happens here, at the access. A naturally
//! aligned access is one volatile load or store (single-copy atomic on the CPUs we run on, which
//! owner bits and doorbell records rely on); an unaligned one falls back to bytes.

use std::ptr;

macro_rules! be_access {
    ($load:ident, $store:ident, $t:ty) => {
        /// Load a big-endian value.
        ///
        /// # Safety
        /// `p .. p + size_of::<T>()` must be valid for reads.
        pub(crate) unsafe fn $load(p: *const u8) -> $t {
            const N: usize = size_of::<$t>();
            if p.addr() % N == 0 {
                // Alignment is checked just above, which the lint cannot see.
                #[allow(clippy::cast_ptr_alignment)]
                let p = p.cast::<$t>();
                // SAFETY: aligned (checked) and valid for N bytes (caller).
                <$t>::from_be(unsafe { ptr::read_volatile(p) })
            } else {
                let mut b = [0u8; N];
                for (i, byte) in b.iter_mut().enumerate() {
                    // SAFETY: i < N, inside the caller's valid range.
                    *byte = unsafe { ptr::read_volatile(p.add(i)) };
                }
                <$t>::from_be_bytes(b)
            }
        }

        /// Store a value big-endian.
        ///
        /// # Safety
        /// `p .. p + size_of::<T>()` must be valid for writes.
        pub(crate) unsafe fn $store(p: *mut u8, v: $t) {
            const N: usize = size_of::<$t>();
            if p.addr() % N == 0 {
                // Alignment is checked just above, which the lint cannot see.
                #[allow(clippy::cast_ptr_alignment)]
                let p = p.cast::<$t>();
                // SAFETY: aligned (checked) and valid for N bytes (caller).
                unsafe { ptr::write_volatile(p, v.to_be()) }
            } else {
                for (i, byte) in v.to_be_bytes().into_iter().enumerate() {
                    // SAFETY: i < N, inside the caller's valid range.
                    unsafe { ptr::write_volatile(p.add(i), byte) }
                }
            }
        }
    };
}

be_access!(load_be16, store_be16, u16);
be_access!(load_be32, store_be32, u32);
be_access!(load_be64, store_be64, u64);

/// Load one byte.
///
/// # Safety
/// `p` must be valid for a one-byte read.
pub(crate) unsafe fn load_u8(p: *const u8) -> u8 {
    // SAFETY: the caller guarantees p is valid.
    unsafe { ptr::read_volatile(p) }
}

/// Store one byte.
///
/// # Safety
/// `p` must be valid for a one-byte write.
pub(crate) unsafe fn store_u8(p: *mut u8, v: u8) {
    // SAFETY: the caller guarantees p is valid.
    unsafe { ptr::write_volatile(p, v) }
}

//! Big-endian reads and writes at fixed offsets, and bit fields inside one byte.
//!
//! Every view in this crate checks its buffer length once, in `new_checked`; the offsets the
//! accessors pass here are constants inside that length, so these never index out of bounds.
//! The conversion from wire order happens here, called from each field accessor and nowhere else.

/// Reads the big-endian `u16` at `at`.
pub(crate) fn u16_at(buf: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([buf[at], buf[at + 1]])
}

/// Reads the big-endian 24-bit value at `at` into the low bits of a `u32`.
pub(crate) fn u24_at(buf: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([0, buf[at], buf[at + 1], buf[at + 2]])
}

/// Reads the big-endian `u32` at `at`.
pub(crate) fn u32_at(buf: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([buf[at], buf[at + 1], buf[at + 2], buf[at + 3]])
}

/// Reads the big-endian `u64` at `at`.
pub(crate) fn u64_at(buf: &[u8], at: usize) -> u64 {
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(&buf[at..at + 8]);
    u64::from_be_bytes(bytes)
}

/// Writes `value` big-endian at `at`.
pub(crate) fn set_u16_at(buf: &mut [u8], at: usize, value: u16) {
    buf[at..at + 2].copy_from_slice(&value.to_be_bytes());
}

/// Writes the low 24 bits of `value` big-endian at `at`; higher bits are dropped.
pub(crate) fn set_u24_at(buf: &mut [u8], at: usize, value: u32) {
    buf[at..at + 3].copy_from_slice(&value.to_be_bytes()[1..]);
}

/// Writes `value` big-endian at `at`.
pub(crate) fn set_u32_at(buf: &mut [u8], at: usize, value: u32) {
    buf[at..at + 4].copy_from_slice(&value.to_be_bytes());
}

/// Writes `value` big-endian at `at`.
pub(crate) fn set_u64_at(buf: &mut [u8], at: usize, value: u64) {
    buf[at..at + 8].copy_from_slice(&value.to_be_bytes());
}

/// Mask of the low `width` bits of a byte (`width` ≤ 8).
const fn mask(width: u32) -> u8 {
    if width >= 8 { 0xFF } else { (1u8 << width) - 1 }
}

/// Reads the `width`-bit field whose lowest bit is bit `shift` (0 = least significant) of `byte`.
pub(crate) const fn bits(byte: u8, shift: u32, width: u32) -> u8 {
    (byte >> shift) & mask(width)
}

/// Returns `byte` with its `width`-bit field at `shift` replaced by the low bits of `value`;
/// bits of `value` beyond `width` are dropped, the other bits of `byte` are kept.
pub(crate) const fn with_bits(byte: u8, shift: u32, width: u32, value: u8) -> u8 {
    let m = mask(width) << shift;
    (byte & !m) | ((value << shift) & m)
}

/// Replaces the `width`-bit field at `shift` of `buf[at]` by the low bits of `value`.
pub(crate) fn set_bits_at(buf: &mut [u8], at: usize, shift: u32, width: u32, value: u8) {
    buf[at] = with_bits(buf[at], shift, width, value);
}

/// Reads one flag bit (`shift` 0 = least significant) of `buf[at]`.
pub(crate) fn flag_at(buf: &[u8], at: usize, shift: u32) -> bool {
    bits(buf[at], shift, 1) != 0
}

/// Sets or clears one flag bit of `buf[at]`.
pub(crate) fn set_flag_at(buf: &mut [u8], at: usize, shift: u32, value: bool) {
    set_bits_at(buf, at, shift, 1, u8::from(value));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bit_fields_read_and_replace_only_their_bits() {
        // 0b1011_0110: high nibble 0xB, low nibble 0x6, bits 5..=7 = 0b101.
        assert_eq!(bits(0b1011_0110, 4, 4), 0xB);
        assert_eq!(bits(0b1011_0110, 0, 4), 0x6);
        assert_eq!(bits(0b1011_0110, 5, 3), 0b101);
        assert_eq!(with_bits(0b1011_0110, 0, 3, 0b001), 0b1011_0001);
        // A value wider than its field loses its high bits and leaves neighbours alone.
        assert_eq!(with_bits(0x00, 4, 2, 0xFF), 0b0011_0000);
    }

    #[test]
    fn big_endian_accessors_put_the_most_significant_byte_first() {
        let mut buf = [0u8; 8];
        set_u16_at(&mut buf, 0, 0x1234);
        set_u24_at(&mut buf, 2, 0xAB_CDEF);
        assert_eq!(buf[..5], [0x12, 0x34, 0xAB, 0xCD, 0xEF]);
        assert_eq!(u16_at(&buf, 0), 0x1234);
        assert_eq!(u24_at(&buf, 2), 0xAB_CDEF);
        set_u64_at(&mut buf, 0, 0x0102_0304_0506_0708);
        assert_eq!(buf, [1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(u32_at(&buf, 4), 0x0506_0708);
    }
}

//! Bit-field addressing of mlx5_ifc.h layouts.
//!
//! `mlx5_ifc.h` describes every command structure as a sequence of big-endian dwords and names
//! each field by its bit offset counted from the most significant bit of dword 0 and its width
//! (the `MLX5_SET` / `MLX5_GET` convention). A field of at most 32 bits never crosses a dword
//! boundary; 64-bit fields (`MLX5_SET64`) start on a dword boundary; byte arrays start on a byte
//! boundary. This module is the only place that turns such coordinates into byte positions.

use crate::error::{Error, Result};

/// A field of 1 to 32 bits inside one big-endian dword, as `u8 name[width]` in mlx5_ifc.h.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Field {
    /// Bit offset from the MSB of dword 0 (`__mlx5_bit_off`).
    pub bit: usize,
    /// Width in bits (`__mlx5_bit_sz`), 1..=32.
    pub width: u32,
    /// The mlx5_ifc.h name, for error messages.
    pub name: &'static str,
}

impl Field {
    /// Declares a field. Evaluated in constant context, a field that crosses a dword boundary
    /// or has a width outside 1..=32 is a compile error.
    pub const fn new(name: &'static str, bit: usize, width: u32) -> Self {
        assert!(width >= 1 && width <= 32, "field width must be 1..=32");
        assert!(
            (bit % 32) + width as usize <= 32,
            "field must not cross a dword boundary"
        );
        Field { bit, width, name }
    }

    /// The same field inside a sub-structure placed at `base_bit` of an enclosing structure.
    #[must_use]
    pub const fn at(self, base_bit: usize) -> Self {
        Field::new(self.name, base_bit + self.bit, self.width)
    }

    /// Largest value the field holds.
    pub const fn max(self) -> u32 {
        if self.width == 32 {
            u32::MAX
        } else {
            (1u32 << self.width) - 1
        }
    }

    /// Byte offset of the dword that holds the field.
    pub const fn dword_byte(self) -> usize {
        (self.bit / 32) * 4
    }

    /// Right shift that brings the field to bit 0 of its dword.
    pub const fn shift(self) -> u32 {
        32 - (self.bit % 32) as u32 - self.width
    }

    /// Number of bytes a buffer needs to hold the field.
    pub const fn end_byte(self) -> usize {
        self.dword_byte() + 4
    }

    /// Reads the field from `buf`.
    pub fn get(self, buf: &[u8]) -> Result<u32> {
        let dw = read_dword(buf, self)?;
        Ok((dw >> self.shift()) & self.max())
    }

    /// Reads a 1-bit field as a flag.
    pub fn get_bool(self, buf: &[u8]) -> Result<bool> {
        Ok(self.get(buf)? != 0)
    }

    /// Writes `value` into the field of `buf`, leaving the other bits of the dword unchanged.
    /// A value wider than the field is rejected rather than truncated.
    pub fn set(self, buf: &mut [u8], value: u32) -> Result<()> {
        if value > self.max() {
            return Err(Error::ValueTooWide {
                field: self.name,
                value: value.into(),
                width: self.width,
                max: self.max().into(),
            });
        }
        let dw = read_dword(buf, self)?;
        let mask = self.max() << self.shift();
        let new = (dw & !mask) | (value << self.shift());
        let at = self.dword_byte();
        buf[at..at + 4].copy_from_slice(&new.to_be_bytes());
        Ok(())
    }

    /// Writes a flag into a field (1 for true).
    pub fn set_bool(self, buf: &mut [u8], value: bool) -> Result<()> {
        self.set(buf, u32::from(value))
    }
}

fn read_dword(buf: &[u8], f: Field) -> Result<u32> {
    let at = f.dword_byte();
    match buf.get(at..at + 4) {
        Some(b) => Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]])),
        None => Err(Error::FieldOutOfRange {
            bit: f.bit,
            width: f.width,
            len: buf.len(),
        }),
    }
}

/// A 64-bit big-endian field starting on a dword boundary (`MLX5_SET64` / `MLX5_GET64`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Field64 {
    /// Bit offset from the MSB of dword 0; a multiple of 32.
    pub bit: usize,
    /// The mlx5_ifc.h name.
    pub name: &'static str,
}

impl Field64 {
    /// Declares a 64-bit field; a bit offset that is not dword aligned is a compile error in
    /// constant context.
    pub const fn new(name: &'static str, bit: usize) -> Self {
        assert!(bit % 32 == 0, "64-bit fields start on a dword boundary");
        Field64 { bit, name }
    }

    /// The same field inside a sub-structure placed at `base_bit`.
    #[must_use]
    pub const fn at(self, base_bit: usize) -> Self {
        Field64::new(self.name, base_bit + self.bit)
    }

    /// Byte offset of the field.
    pub const fn byte(self) -> usize {
        self.bit / 8
    }

    /// Reads the field.
    pub fn get(self, buf: &[u8]) -> Result<u64> {
        let at = self.byte();
        match buf.get(at..at + 8) {
            Some(b) => {
                let mut a = [0u8; 8];
                a.copy_from_slice(b);
                Ok(u64::from_be_bytes(a))
            }
            None => Err(self.out_of_range(buf.len())),
        }
    }

    /// Writes the field.
    pub fn set(self, buf: &mut [u8], value: u64) -> Result<()> {
        let at = self.byte();
        let len = buf.len();
        match buf.get_mut(at..at + 8) {
            Some(b) => {
                b.copy_from_slice(&value.to_be_bytes());
                Ok(())
            }
            None => Err(self.out_of_range(len)),
        }
    }

    fn out_of_range(self, len: usize) -> Error {
        Error::FieldOutOfRange {
            bit: self.bit,
            width: 64,
            len,
        }
    }
}

/// A byte array field starting on a byte boundary (`u8 name[N][0x8]`, `MLX5_ADDR_OF`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bytes {
    /// Bit offset from the MSB of dword 0; a multiple of 8.
    pub bit: usize,
    /// Length in bytes.
    pub len: usize,
    /// The mlx5_ifc.h name.
    pub name: &'static str,
}

impl Bytes {
    /// Declares a byte array; an unaligned offset is a compile error in constant context.
    pub const fn new(name: &'static str, bit: usize, len: usize) -> Self {
        assert!(bit % 8 == 0, "byte arrays start on a byte boundary");
        Bytes { bit, len, name }
    }

    /// The same array inside a sub-structure placed at `base_bit`.
    #[must_use]
    pub const fn at(self, base_bit: usize) -> Self {
        Bytes::new(self.name, base_bit + self.bit, self.len)
    }

    /// Byte offset of the array.
    pub const fn byte(self) -> usize {
        self.bit / 8
    }

    /// Borrows the array from `buf`.
    pub fn get(self, buf: &[u8]) -> Result<&[u8]> {
        let at = self.byte();
        buf.get(at..at + self.len).ok_or(Error::FieldOutOfRange {
            bit: self.bit,
            width: (self.len * 8) as u32,
            len: buf.len(),
        })
    }

    /// Copies `data` into the array; `data` must have exactly the array's length.
    pub fn set(self, buf: &mut [u8], data: &[u8]) -> Result<()> {
        if data.len() != self.len {
            return Err(Error::Invalid {
                what: self.name,
                reason: "data length differs from the field length",
            });
        }
        let at = self.byte();
        let len = buf.len();
        match buf.get_mut(at..at + self.len) {
            Some(b) => {
                b.copy_from_slice(data);
                Ok(())
            }
            None => Err(Error::FieldOutOfRange {
                bit: self.bit,
                width: (self.len * 8) as u32,
                len,
            }),
        }
    }
}

/// Checks that `buf` holds at least `need` bytes of the structure `what`.
pub fn need(what: &'static str, buf: &[u8], need: usize) -> Result<()> {
    if buf.len() < need {
        Err(Error::Short {
            what,
            need,
            got: buf.len(),
        })
    } else {
        Ok(())
    }
}

/// Narrows a `u64` to a field width, rejecting what does not fit.
pub fn fit(field: &'static str, value: u64, width: u32) -> Result<u32> {
    let max = if width >= 64 {
        u64::MAX
    } else {
        (1u64 << width) - 1
    };
    if value > max || value > u64::from(u32::MAX) {
        Err(Error::ValueTooWide {
            field,
            value,
            width,
            max,
        })
    } else {
        Ok(value as u32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Positions below are worked out by hand from the MLX5_SET definition: dword index =
    // bit / 32, shift = 32 - (bit % 32) - width, dword stored big-endian.

    #[test]
    fn get_reads_msb_first_big_endian() {
        // Dword 0 = 0x12345678, dword 1 = 0x9abcdef0.
        let buf = [0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde, 0xf0];
        assert_eq!(Field::new("a", 0, 16).get(&buf).unwrap(), 0x1234);
        assert_eq!(Field::new("b", 16, 16).get(&buf).unwrap(), 0x5678);
        assert_eq!(Field::new("c", 0, 4).get(&buf).unwrap(), 0x1);
        assert_eq!(Field::new("d", 4, 4).get(&buf).unwrap(), 0x2);
        assert_eq!(Field::new("e", 8, 24).get(&buf).unwrap(), 0x345678);
        assert_eq!(Field::new("f", 32, 32).get(&buf).unwrap(), 0x9abcdef0);
        assert_eq!(Field::new("g", 63, 1).get(&buf).unwrap(), 0);
        assert_eq!(Field::new("h", 32, 1).get(&buf).unwrap(), 1);
        // 0x9abcdef0 bits [27:24] (bit offset 36, width 4) = 0xa.
        assert_eq!(Field::new("i", 36, 4).get(&buf).unwrap(), 0xa);
    }

    #[test]
    fn set_writes_only_its_bits() {
        let mut buf = [0xffu8; 8];
        Field::new("x", 0x08, 8).set(&mut buf, 0x07).unwrap();
        assert_eq!(buf, [0xff, 0x07, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]);
        let mut buf = [0u8; 8];
        // A 5-bit field at bit 0x1b = dword 0 bits [4:0] = low 5 bits of byte 3.
        Field::new("log_max_qp", 0x1b, 5)
            .set(&mut buf, 0x12)
            .unwrap();
        assert_eq!(buf, [0, 0, 0, 0x12, 0, 0, 0, 0]);
        // A 24-bit field at bit 0x28 = dword 1 bits [23:0] = bytes 5..8.
        Field::new("pd", 0x28, 24).set(&mut buf, 0xabcdef).unwrap();
        assert_eq!(buf, [0, 0, 0, 0x12, 0, 0xab, 0xcd, 0xef]);
        // A 2-bit field at bit 0x13 = dword 0 bits [12:11].
        let mut buf = [0u8; 4];
        Field::new("pm_state", 0x13, 2).set(&mut buf, 3).unwrap();
        assert_eq!(buf, [0, 0, 0x18, 0]);
    }

    #[test]
    fn set_rejects_values_wider_than_the_field() {
        let mut buf = [0u8; 4];
        let err = Field::new("log_max_qp", 0x1b, 5)
            .set(&mut buf, 32)
            .unwrap_err();
        assert!(matches!(
            err,
            Error::ValueTooWide {
                width: 5,
                max: 31,
                ..
            }
        ));
        assert_eq!(buf, [0; 4]);
    }

    #[test]
    fn out_of_range_is_an_error_not_a_panic() {
        let buf = [0u8; 7];
        assert!(matches!(
            Field::new("f", 32, 8).get(&buf),
            Err(Error::FieldOutOfRange { .. })
        ));
        assert!(Field64::new("g", 0).get(&buf).is_err());
        assert!(Bytes::new("h", 0, 8).get(&buf).is_err());
        let mut b = [0u8; 3];
        assert!(Field::new("f", 0, 8).set(&mut b, 1).is_err());
        assert!(Field64::new("g", 0).set(&mut b, 1).is_err());
    }

    #[test]
    fn u64_and_bytes() {
        let mut buf = [0u8; 16];
        Field64::new("dbr_addr", 64)
            .set(&mut buf, 0x0102_0304_0506_0708)
            .unwrap();
        assert_eq!(&buf[8..16], &[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(
            Field64::new("dbr_addr", 64).get(&buf).unwrap(),
            0x0102_0304_0506_0708
        );
        Bytes::new("gid", 16, 4)
            .set(&mut buf, &[9, 8, 7, 6])
            .unwrap();
        assert_eq!(&buf[2..6], &[9, 8, 7, 6]);
        assert_eq!(Bytes::new("gid", 16, 4).get(&buf).unwrap(), &[9, 8, 7, 6]);
        assert!(Bytes::new("gid", 16, 4).set(&mut buf, &[1]).is_err());
    }

    #[test]
    fn at_offsets_into_an_enclosing_structure() {
        let f = Field::new("st", 0x08, 8).at(0xc0);
        assert_eq!(
            (f.bit, f.width, f.dword_byte(), f.shift()),
            (0xc8, 8, 0x18, 16)
        );
    }

    #[test]
    fn fit_checks_width() {
        assert_eq!(fit("x", 0xffffff, 24).unwrap(), 0xffffff);
        assert!(fit("x", 0x1000000, 24).is_err());
    }
}

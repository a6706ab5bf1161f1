//! Small enumerations of wire values that keep any value they have no name for.

/// Declares a `Copy` enum over a wire integer type with one variant per named value and an
/// `Unknown` variant for everything else, plus `From` conversions both ways, so that parsing
/// never fails on a value a newer spec (or a broken peer) uses and emitting gives it back.
macro_rules! wire_enum {
    (
        $(#[$meta:meta])*
        pub enum $name:ident($ty:ty) {
            $( $(#[$vmeta:meta])* $variant:ident = $value:expr ),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name {
            $( $(#[$vmeta])* $variant, )+
            /// A value with no name here, kept as received. Only values without a name belong
            /// here: `Unknown` of a named value emits that value and parses back as its name.
            Unknown($ty),
        }

        impl From<$ty> for $name {
            fn from(value: $ty) -> Self {
                match value {
                    $( $value => $name::$variant, )+
                    other => $name::Unknown(other),
                }
            }
        }

        impl From<$name> for $ty {
            fn from(value: $name) -> Self {
                match value {
                    $( $name::$variant => $value, )+
                    $name::Unknown(other) => other,
                }
            }
        }
    };
}

pub(crate) use wire_enum;

/// A getter for the whole byte at `$at` of a view's buffer.
macro_rules! byte_get {
    ($get:ident, $at:expr, $doc:literal) => {
        #[doc = $doc]
        pub fn $get(&self) -> u8 {
            self.buffer.as_ref()[$at]
        }
    };
}

/// A setter for the whole byte at `$at` of a view's buffer.
macro_rules! byte_set {
    ($set:ident, $at:expr, $doc:literal) => {
        #[doc = $doc]
        pub fn $set(&mut self, value: u8) {
            self.buffer.as_mut()[$at] = value;
        }
    };
}

/// A getter for the `$width`-bit field whose lowest bit is bit `$shift` of byte `$at`.
macro_rules! bits_get {
    ($get:ident, $at:expr, $shift:expr, $width:expr, $doc:literal) => {
        #[doc = $doc]
        pub fn $get(&self) -> u8 {
            $crate::field::bits(self.buffer.as_ref()[$at], $shift, $width)
        }
    };
}

/// A setter for a bit field of byte `$at`; bits of the value beyond `$width` are dropped.
macro_rules! bits_set {
    ($set:ident, $at:expr, $shift:expr, $width:expr, $doc:literal) => {
        #[doc = $doc]
        pub fn $set(&mut self, value: u8) {
            $crate::field::set_bits_at(self.buffer.as_mut(), $at, $shift, $width, value);
        }
    };
}

/// A getter for the one-bit flag at bit `$shift` of byte `$at`.
macro_rules! flag_get {
    ($get:ident, $at:expr, $shift:expr, $doc:literal) => {
        #[doc = $doc]
        pub fn $get(&self) -> bool {
            $crate::field::flag_at(self.buffer.as_ref(), $at, $shift)
        }
    };
}

/// A setter for the one-bit flag at bit `$shift` of byte `$at`.
macro_rules! flag_set {
    ($set:ident, $at:expr, $shift:expr, $doc:literal) => {
        #[doc = $doc]
        pub fn $set(&mut self, value: bool) {
            $crate::field::set_flag_at(self.buffer.as_mut(), $at, $shift, value);
        }
    };
}

pub(crate) use {bits_get, bits_set, byte_get, byte_set, flag_get, flag_set};

//! The MAD Status field (IBA 13.4.7; kernel `ib_mad.h`) and the directed-route D bit that
//! shares it.

/// Success.
pub const SUCCESS: u16 = 0x0000;
/// Bit 0: busy, the requester may retry.
pub const BUSY: u16 = 0x0001;
/// Bit 1: redirect required (see ClassPortInfo).
pub const REDIRECT_REQUIRED: u16 = 0x0002;
/// Code 1 in bits 2–4: the base or class version is not supported.
pub const BAD_VERSION: u16 = 0x0004;
/// Code 2 in bits 2–4: the method is not supported.
pub const METHOD_UNSUPPORTED: u16 = 0x0008;
/// Code 3 in bits 2–4: the method/attribute combination is not supported.
pub const METHOD_ATTR_UNSUPPORTED: u16 = 0x000C;
/// Code 7 in bits 2–4: one or more fields of the attribute or modifier are invalid.
pub const INVALID_ATTR_VALUE: u16 = 0x001C;
/// Bits 2–4: the code field that the three values above live in.
pub const CODE_MASK: u16 = 0x001C;
/// Bits 8–15: class-specific status.
pub const CLASS_SPECIFIC_MASK: u16 = 0xFF00;

/// Bit 15 of the Status of a directed-route SMP: the D (direction) bit, 0 outbound, 1
/// returning (`IB_SMP_DIRECTION`). It is not part of the status proper.
pub const DR_DIRECTION: u16 = 0x8000;
/// The status proper of a directed-route SMP: every bit but D.
pub const DR_STATUS_MASK: u16 = 0x7FFF;

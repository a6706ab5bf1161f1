//! The header helpers: `umad_get_mad`, `umad_size`, `umad_status`, `umad_get_mad_addr`,
//! `umad_set_grh`, `umad_set_pkey`, `umad_get_pkey`, `umad_set_addr`, `umad_set_addr_net`.
//! They only read and write the caller's buffer, exactly as libibumad's do.
//!
//! The caller's buffer is a `void *` in C and may sit at any address: every field is read
//! and written unaligned, through raw pointers to it (never a Rust reference).

use std::ffi::{c_int, c_void};
use std::ptr::{addr_of, addr_of_mut};
use std::sync::atomic::Ordering;

use crate::abi::{IbMadAddr, IbUserMad};
use crate::exports::{NEW_API, hdr_len};

/// `umad_get_mad`: the MAD after the header.
///
/// # Safety
/// None asked: the address is computed, not dereferenced (libibumad's is plain pointer
/// arithmetic too).
pub unsafe extern "C" fn umad_get_mad(umad: *mut c_void) -> *mut c_void {
    umad.cast::<u8>().wrapping_add(hdr_len()).cast()
}

/// `umad_size`: 64 once a port was opened (the new ABI), 56 before.
pub extern "C" fn umad_size() -> usize {
    hdr_len()
}

/// `umad_status`: the header's status (ETIMEDOUT for a returned send).
///
/// # Safety
/// `umad` points to a umad header (`umad_size()` bytes), at any alignment.
pub unsafe extern "C" fn umad_status(umad: *mut c_void) -> c_int {
    let h = umad.cast::<IbUserMad>();
    // SAFETY: the caller's header holds the status field; read unaligned.
    unsafe { addr_of!((*h).status).read_unaligned() as c_int }
}

/// `umad_get_mad_addr`: the address inside the header.
///
/// # Safety
/// None asked: the address is computed, not dereferenced.
pub unsafe extern "C" fn umad_get_mad_addr(umad: *mut c_void) -> *mut IbMadAddr {
    addr_of_header(umad)
}

/// The address inside the header at `umad`, as a raw pointer (possibly unaligned).
fn addr_of_header(umad: *mut c_void) -> *mut IbMadAddr {
    umad.cast::<u8>()
        .wrapping_add(std::mem::offset_of!(IbUserMad, addr))
        .cast()
}

/// `umad_set_grh`: copies the GRH fields of `mad_addr` (its flow label in host order, as
/// umad.h documents) into the header, or clears `grh_present` when it is NULL.
///
/// # Safety
/// `umad` points to a umad header; `mad_addr` is NULL or an `ib_mad_addr_t`; either at any
/// alignment.
pub unsafe extern "C" fn umad_set_grh(umad: *mut c_void, mad_addr: *mut c_void) -> c_int {
    let a = addr_of_header(umad);
    if mad_addr.is_null() {
        // SAFETY: the caller's header holds the address; written unaligned.
        unsafe { addr_of_mut!((*a).grh_present).write_unaligned(0) };
        return 0;
    }
    // SAFETY: the caller's ib_mad_addr_t, read unaligned.
    let src = unsafe { std::ptr::read_unaligned(mad_addr.cast::<IbMadAddr>()) };
    // SAFETY: the caller's header holds the address; each field written unaligned.
    unsafe {
        addr_of_mut!((*a).grh_present).write_unaligned(1);
        addr_of_mut!((*a).gid).write_unaligned(src.gid);
        addr_of_mut!((*a).flow_label).write_unaligned(src.flow_label.to_be());
        addr_of_mut!((*a).hop_limit).write_unaligned(src.hop_limit);
        addr_of_mut!((*a).traffic_class).write_unaligned(src.traffic_class);
    }
    0
}

/// `umad_set_pkey`: the P_Key index (ignored with the old ABI).
///
/// # Safety
/// `umad` points to a umad header, at any alignment.
pub unsafe extern "C" fn umad_set_pkey(umad: *mut c_void, pkey_index: c_int) -> c_int {
    if NEW_API.load(Ordering::Relaxed) {
        let a = addr_of_header(umad);
        // SAFETY: the caller's header (new ABI: 64 bytes) holds pkey_index; unaligned.
        unsafe { addr_of_mut!((*a).pkey_index).write_unaligned(pkey_index as u16) };
    }
    0
}

/// `umad_get_pkey`: the P_Key index (0 with the old ABI).
///
/// # Safety
/// `umad` points to a umad header, at any alignment.
pub unsafe extern "C" fn umad_get_pkey(umad: *mut c_void) -> c_int {
    if NEW_API.load(Ordering::Relaxed) {
        let a = addr_of_header(umad);
        // SAFETY: the caller's header (new ABI: 64 bytes) holds pkey_index; unaligned.
        c_int::from(unsafe { addr_of!((*a).pkey_index).read_unaligned() })
    } else {
        0
    }
}

/// `umad_set_addr`: DLID, QP, SL and Q_Key in host order.
///
/// # Safety
/// `umad` points to a umad header, at any alignment.
pub unsafe extern "C" fn umad_set_addr(
    umad: *mut c_void,
    dlid: c_int,
    dqp: c_int,
    sl: c_int,
    qkey: c_int,
) -> c_int {
    // SAFETY: as umad_set_addr_net's, whose contract is this function's.
    unsafe {
        umad_set_addr_net(
            umad,
            (dlid as u16).to_be(),
            (dqp as u32).to_be(),
            sl,
            (qkey as u32).to_be(),
        )
    }
}

/// `umad_set_addr_net`: DLID, QP and Q_Key already in network order.
///
/// # Safety
/// `umad` points to a umad header, at any alignment.
pub unsafe extern "C" fn umad_set_addr_net(
    umad: *mut c_void,
    dlid: u16,
    dqp: u32,
    sl: c_int,
    qkey: u32,
) -> c_int {
    let a = addr_of_header(umad);
    // SAFETY: the caller's header holds the address; each field written unaligned.
    unsafe {
        addr_of_mut!((*a).qpn).write_unaligned(dqp);
        addr_of_mut!((*a).lid).write_unaligned(dlid);
        addr_of_mut!((*a).qkey).write_unaligned(qkey);
        addr_of_mut!((*a).sl).write_unaligned(sl as u8);
    }
    0
}

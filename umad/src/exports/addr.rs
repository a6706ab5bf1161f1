//! The header helpers: `umad_get_mad`, `umad_size`, `umad_status`, `umad_get_mad_addr`,
//! `umad_set_grh`, `umad_set_pkey`, `umad_get_pkey`, `umad_set_addr`, `umad_set_addr_net`.
//! They only read and write the caller's buffer, exactly as libibumad's do.

use std::ffi::{c_int, c_void};
use std::sync::atomic::Ordering;

use crate::abi::{IbMadAddr, IbUserMad};
use crate::exports::{NEW_API, hdr_len};

/// `umad_get_mad`: the MAD after the header.
///
/// # Safety
/// `umad` points to a umad buffer.
pub unsafe extern "C" fn umad_get_mad(umad: *mut c_void) -> *mut c_void {
    // SAFETY: the header lies inside the caller's buffer.
    unsafe { umad.cast::<u8>().add(hdr_len()).cast() }
}

/// `umad_size`: 64 once a port was opened (the new ABI), 56 before.
pub extern "C" fn umad_size() -> usize {
    hdr_len()
}

/// `umad_status`: the header's status (ETIMEDOUT for a returned send).
///
/// # Safety
/// `umad` points to a umad buffer.
pub unsafe extern "C" fn umad_status(umad: *mut c_void) -> c_int {
    // SAFETY: the caller's header.
    unsafe { (*umad.cast::<IbUserMad>()).status as c_int }
}

/// `umad_get_mad_addr`: the address inside the header.
///
/// # Safety
/// `umad` points to a umad buffer.
pub unsafe extern "C" fn umad_get_mad_addr(umad: *mut c_void) -> *mut IbMadAddr {
    // SAFETY: the address lies inside the caller's header.
    unsafe { &raw mut (*umad.cast::<IbUserMad>()).addr }
}

/// `umad_set_grh`: copies the GRH fields of `mad_addr` (its flow label in host order, as
/// umad.h documents) into the header, or clears `grh_present` when it is NULL.
///
/// # Safety
/// `umad` points to a umad buffer; `mad_addr` is NULL or an `ib_mad_addr_t`.
pub unsafe extern "C" fn umad_set_grh(umad: *mut c_void, mad_addr: *mut c_void) -> c_int {
    // SAFETY: the caller's header.
    let a = unsafe { &mut (*umad.cast::<IbUserMad>()).addr };
    if mad_addr.is_null() {
        a.grh_present = 0;
        return 0;
    }
    // SAFETY: the caller's ib_mad_addr_t.
    let src = unsafe { std::ptr::read_unaligned(mad_addr.cast::<IbMadAddr>()) };
    a.grh_present = 1;
    a.gid = src.gid;
    a.flow_label = src.flow_label.to_be();
    a.hop_limit = src.hop_limit;
    a.traffic_class = src.traffic_class;
    0
}

/// `umad_set_pkey`: the P_Key index (ignored with the old ABI).
///
/// # Safety
/// `umad` points to a umad buffer.
pub unsafe extern "C" fn umad_set_pkey(umad: *mut c_void, pkey_index: c_int) -> c_int {
    if NEW_API.load(Ordering::Relaxed) {
        // SAFETY: the caller's header.
        unsafe { (*umad.cast::<IbUserMad>()).addr.pkey_index = pkey_index as u16 };
    }
    0
}

/// `umad_get_pkey`: the P_Key index (0 with the old ABI).
///
/// # Safety
/// `umad` points to a umad buffer.
pub unsafe extern "C" fn umad_get_pkey(umad: *mut c_void) -> c_int {
    if NEW_API.load(Ordering::Relaxed) {
        // SAFETY: the caller's header.
        c_int::from(unsafe { (*umad.cast::<IbUserMad>()).addr.pkey_index })
    } else {
        0
    }
}

/// `umad_set_addr`: DLID, QP, SL and Q_Key in host order.
///
/// # Safety
/// `umad` points to a umad buffer.
pub unsafe extern "C" fn umad_set_addr(
    umad: *mut c_void,
    dlid: c_int,
    dqp: c_int,
    sl: c_int,
    qkey: c_int,
) -> c_int {
    // SAFETY: the caller's header.
    let a = unsafe { &mut (*umad.cast::<IbUserMad>()).addr };
    a.qpn = (dqp as u32).to_be();
    a.lid = (dlid as u16).to_be();
    a.qkey = (qkey as u32).to_be();
    a.sl = sl as u8;
    0
}

/// `umad_set_addr_net`: DLID, QP and Q_Key already in network order.
///
/// # Safety
/// `umad` points to a umad buffer.
pub unsafe extern "C" fn umad_set_addr_net(
    umad: *mut c_void,
    dlid: u16,
    dqp: u32,
    sl: c_int,
    qkey: u32,
) -> c_int {
    // SAFETY: the caller's header.
    let a = unsafe { &mut (*umad.cast::<IbUserMad>()).addr };
    a.qpn = dqp;
    a.lid = dlid;
    a.qkey = qkey;
    a.sl = sl as u8;
    0
}

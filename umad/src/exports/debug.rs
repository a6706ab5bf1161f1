//! Debugging and names: `umad_debug`, `umad_addr_dump`, `umad_dump`, and the `umad_*_str`
//! functions.

use std::ffi::{c_char, c_int, c_void};
use std::fmt::Write as _;
use std::sync::atomic::Ordering;

use crate::abi::{IbMadAddr, IbUserMad};
use crate::context::{DEBUG, say};
use crate::exports::uncancellable;
use crate::strings;

/// `umad_debug`: set the level (when `level` >= 0) and return it.
pub extern "C" fn umad_debug(level: c_int) -> c_int {
    if level >= 0 {
        DEBUG.store(level, Ordering::Relaxed);
    }
    DEBUG.load(Ordering::Relaxed)
}

fn ibwarn(func: &str, msg: &str) {
    say(format_args!(
        "ibwarn: [{}] {func}: {msg}",
        std::process::id()
    ));
}

/// `umad_addr_dump`: the address on stderr, in libibumad's words.
///
/// # Safety
/// `addr` points to an `ib_mad_addr_t`.
pub unsafe extern "C" fn umad_addr_dump(addr: *mut IbMadAddr) {
    if addr.is_null() {
        return;
    }
    // SAFETY: the caller's address, read unaligned.
    let a = unsafe { std::ptr::read_unaligned(addr) };
    // The write to stderr is a cancellation point: defer a pending cancel past it.
    uncancellable(|| addr_dump(&a));
}

fn addr_dump(a: &IbMadAddr) {
    let mut gid = String::with_capacity(32);
    for b in a.gid {
        let _ = write!(gid, "{b:02x}");
    }
    ibwarn(
        "umad_addr_dump",
        &format!(
            "qpn {} qkey 0x{:x} lid {} sl {}\ngrh_present {} gid_index {} hop_limit {} \
             traffic_class {} flow_label 0x{:x} pkey_index 0x{:x}\nGid 0x{gid}",
            u32::from_be(a.qpn) as i32,
            u32::from_be(a.qkey),
            u16::from_be(a.lid),
            a.sl,
            a.grh_present,
            a.gid_index,
            a.hop_limit,
            a.traffic_class,
            a.flow_label,
            a.pkey_index
        ),
    );
}

/// `umad_dump`: the header on stderr.
///
/// # Safety
/// `umad` points to a umad buffer.
pub unsafe extern "C" fn umad_dump(umad: *mut c_void) {
    if umad.is_null() {
        return;
    }
    // SAFETY: the caller's header, read unaligned.
    let h = unsafe { std::ptr::read_unaligned(umad.cast::<IbUserMad>()) };
    // The writes to stderr are cancellation points: defer a pending cancel past them.
    uncancellable(|| {
        ibwarn(
            "umad_dump",
            &format!(
                "agent id {} status {:x} timeout {}",
                h.agent_id as i32, h.status, h.timeout_ms as i32
            ),
        );
        addr_dump(&h.addr);
    });
}

/// `umad_class_str`.
pub extern "C" fn umad_class_str(mgmt_class: u8) -> *const c_char {
    strings::class(mgmt_class).as_ptr()
}

/// `umad_method_str`.
pub extern "C" fn umad_method_str(mgmt_class: u8, method: u8) -> *const c_char {
    strings::method(mgmt_class, method).as_ptr()
}

/// `umad_common_mad_status_str`; `status` in network order.
pub extern "C" fn umad_common_mad_status_str(status: u16) -> *const c_char {
    strings::common_status(u16::from_be(status)).as_ptr()
}

/// `umad_sa_mad_status_str`; `status` in network order.
pub extern "C" fn umad_sa_mad_status_str(status: u16) -> *const c_char {
    strings::sa_status(u16::from_be(status)).as_ptr()
}

/// `umad_attribute_str`; `attr_id` in network order.
pub extern "C" fn umad_attribute_str(mgmt_class: u8, attr_id: u16) -> *const c_char {
    strings::attribute(mgmt_class, u16::from_be(attr_id)).as_ptr()
}

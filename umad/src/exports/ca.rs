//! CA and port enumeration: `umad_get_cas_names`, `umad_get_ca_portguids`, `umad_get_ca`,
//! `umad_release_ca`, `umad_get_port`, `umad_release_port`, `umad_get_ca_device_list`,
//! `umad_free_ca_device_list`, `umad_sort_ca_device_list`, `umad_init`, `umad_done`.
//!
//! Where libibumad reads sysfs, these ask the device (see [`crate::info`]); the values and
//! their encodings (big-endian GUIDs and CapabilityMask, host-order P_Keys) are those
//! libibumad would have put there.

use std::ffi::{c_char, c_int, c_void};
use std::ptr;
use std::sync::Arc;

use crate::abi::{CA_MAX_PORTS, CA_NAME_LEN, UmadCa, UmadDeviceNode, UmadPort, put_str};
use crate::context::{Ca, Context, global};
use crate::error::UmadError;
use crate::exports::{guard, opt_str, set_errno};

/// `umad_init`: nothing to do (libibumad's has been a no-op since 2018; the device is
/// opened on first use).
#[allow(clippy::missing_safety_doc)]
pub extern "C" fn umad_init() -> c_int {
    0
}

/// `umad_done`: nothing to do.
pub extern "C" fn umad_done() -> c_int {
    0
}

/// The CAs, or `None` (the device could not be opened: said on stderr once).
fn ctx() -> Option<&'static Arc<Context>> {
    global()
}

/// `resolve_ca_name(name, NULL)`: the name itself, or with no name the CA of the first
/// usable port.
fn resolve_name(c: &Context, name: Option<&str>) -> Option<Arc<Ca>> {
    match name {
        Some(n) => c.ca(n).cloned(),
        None => c.resolve(None, 0).map(|(ca, _)| ca),
    }
}

/// `umad_get_cas_names`: up to `max` CA names into `cas`; returns how many.
///
/// # Safety
/// `cas` points to `max` arrays of 20 chars.
pub unsafe extern "C" fn umad_get_cas_names(cas: *mut [c_char; CA_NAME_LEN], max: c_int) -> c_int {
    guard(-libc::EIO, || {
        let Some(c) = ctx() else { return 0 };
        let mut n = 0;
        for ca in c.cas() {
            if n >= max || cas.is_null() {
                break;
            }
            // SAFETY: the caller gives `max` entries; n < max.
            let dst = unsafe { &mut *cas.add(n as usize) };
            put_str(dst, &ca.name);
            n += 1;
        }
        n
    })
}

/// `umad_get_ca_portguids`: the port GUIDs (big-endian) of ports 0..=numports of the CA
/// (0 where no port); returns the count, -ENOMEM if `max` is too small, -ENODEV/-1 for no
/// such CA.
///
/// # Safety
/// `ca_name` is NULL or a C string; `portguids` is NULL or has room for `max` entries.
pub unsafe extern "C" fn umad_get_ca_portguids(
    ca_name: *const c_char,
    portguids: *mut u64,
    max: c_int,
) -> c_int {
    guard(-libc::EIO, || {
        let Some(c) = ctx() else {
            return -libc::ENODEV;
        };
        // SAFETY: the caller passes NULL or a C string.
        let name = unsafe { opt_str(ca_name) };
        let name = name.as_deref();
        let Some(ca) = resolve_name(c, name) else {
            return if name.is_some() { -1 } else { -libc::ENODEV };
        };
        let Ok(filled) = fill_ports(&ca) else {
            return -1;
        };
        if portguids.is_null() {
            return 0;
        }
        let numports = numports(&ca);
        if numports + 1 > max {
            return -libc::ENOMEM;
        }
        for i in 0..=numports {
            let guid = filled
                .iter()
                .find(|(n, _)| i32::from(*n) == i)
                .map_or(0, |(_, p)| p.port_guid.to_be());
            // SAFETY: i <= numports < max entries.
            unsafe { *portguids.add(i as usize) = guid };
        }
        numports + 1
    })
}

fn numports(ca: &Ca) -> i32 {
    ca.ports.iter().map(|p| i32::from(p.num)).max().unwrap_or(0)
}

fn fill_ports(ca: &Ca) -> Result<Vec<(u8, crate::info::PortAttrs)>, UmadError> {
    ca.ports.iter().map(|p| Ok((p.num, p.attrs()?))).collect()
}

/// Fills `out` with `a` (the caller allocated `out`; `pkeys` is allocated here with
/// `calloc`).
fn write_port(out: &mut UmadPort, ca: &str, a: &crate::info::PortAttrs) -> Result<(), ()> {
    put_str(&mut out.ca_name, ca);
    out.portnum = i32::from(a.num);
    out.base_lid = a.lid.into();
    out.lmc = a.lmc.into();
    out.sm_lid = a.sm_lid.into();
    out.sm_sl = a.sm_sl.into();
    out.state = a.state.into();
    out.phys_state = a.phys_state.into();
    out.rate = a.rate;
    out.capmask = a.cap_mask.to_be();
    out.gid_prefix = a.gid_prefix.to_be();
    out.port_guid = a.port_guid.to_be();
    put_str(&mut out.link_layer, a.link_layer);
    if a.pkeys.is_empty() {
        // libibumad: "no pkeys found" is an error.
        out.pkeys = ptr::null_mut();
        out.pkeys_size = 0;
        return Err(());
    }
    // SAFETY: calloc of pkeys.len() u16s; checked for NULL below.
    let p: *mut u16 = unsafe { libc::calloc(a.pkeys.len(), std::mem::size_of::<u16>()) }.cast();
    if p.is_null() {
        return Err(());
    }
    for (i, &k) in a.pkeys.iter().enumerate() {
        // SAFETY: i < pkeys.len(), the length allocated.
        unsafe { *p.add(i) = k };
    }
    out.pkeys = p;
    out.pkeys_size = a.pkeys.len() as u32;
    Ok(())
}

/// `umad_get_ca`: fills `ca` (ports allocated with `calloc`; `umad_release_ca` frees them).
/// Returns 0, -ENOENT for no such CA, -EIO if a port cannot be read.
///
/// # Safety
/// `ca_name` is NULL or a C string; `ca` points to a `umad_ca_t`.
pub unsafe extern "C" fn umad_get_ca(ca_name: *const c_char, ca: *mut UmadCa) -> c_int {
    guard(-libc::EIO, || {
        if ca.is_null() {
            return -libc::EINVAL;
        }
        // SAFETY: the caller gives a umad_ca_t.
        let out = unsafe { &mut *ca };
        out.numports = 0;
        out.ports = [ptr::null_mut(); CA_MAX_PORTS];
        let Some(c) = ctx() else {
            return -libc::ENOENT;
        };
        // SAFETY: the caller passes NULL or a C string.
        let name = unsafe { opt_str(ca_name) };
        let name = name.as_deref();
        let Some(dev) = resolve_name(c, name) else {
            return if name.is_some() {
                -libc::ENOENT
            } else {
                -libc::ENODEV
            };
        };
        let Ok(node) = dev.node() else {
            return -libc::EIO;
        };
        put_str(&mut out.ca_name, &dev.name);
        out.node_type = node.node_type.into();
        put_str(&mut out.fw_ver, &dev.fw_ver);
        put_str(&mut out.ca_type, &dev.ca_type);
        put_str(&mut out.hw_ver, &dev.hw_ver);
        out.node_guid = node.node_guid.to_be();
        out.system_guid = node.sys_image_guid.to_be();
        for p in &dev.ports {
            let n = usize::from(p.num);
            if n >= CA_MAX_PORTS {
                continue;
            }
            let filled = p.attrs().ok().and_then(|a| {
                // SAFETY: calloc of one zeroed umad_port_t, checked for NULL.
                let port: *mut UmadPort =
                    unsafe { libc::calloc(1, std::mem::size_of::<UmadPort>()) }.cast();
                if port.is_null() {
                    return None;
                }
                // SAFETY: freshly allocated and zeroed, a valid UmadPort (all fields are
                // integers, arrays or a null pointer).
                if write_port(unsafe { &mut *port }, &dev.name, &a).is_err() {
                    // SAFETY: allocated above with calloc.
                    unsafe { libc::free(port.cast()) };
                    return None;
                }
                Some(port)
            });
            let Some(port) = filled else {
                // SAFETY: `out` holds only ports this call allocated.
                unsafe { release_ca(out) };
                return -libc::EIO;
            };
            out.ports[n] = port;
            out.numports = out.numports.max(i32::from(p.num));
        }
        0
    })
}

/// Frees what `umad_get_ca` allocated in `ca`.
///
/// # Safety
/// `ca.ports` holds NULL or pointers `umad_get_ca` allocated.
unsafe fn release_ca(ca: &mut UmadCa) {
    for slot in &mut ca.ports {
        let p = std::mem::replace(slot, ptr::null_mut());
        if !p.is_null() {
            // SAFETY: allocated by umad_get_ca with calloc, pkeys likewise (or NULL).
            unsafe {
                libc::free((*p).pkeys.cast());
                libc::free(p.cast());
            }
        }
    }
}

/// `umad_release_ca`: frees the ports `umad_get_ca` allocated.
///
/// # Safety
/// `ca` is NULL or was filled by `umad_get_ca`.
pub unsafe extern "C" fn umad_release_ca(ca: *mut UmadCa) -> c_int {
    if ca.is_null() {
        return -libc::ENODEV;
    }
    // SAFETY: the caller passes a umad_ca_t filled by umad_get_ca.
    unsafe { release_ca(&mut *ca) };
    0
}

/// `umad_get_port`: fills `port` (its `pkeys` allocated; `umad_release_port` frees them).
/// With port 0 (or no CA name) the port is resolved as `umad_open_port` does. Returns 0,
/// -ENODEV if nothing resolves, -EIO if the port cannot be read.
///
/// # Safety
/// `ca_name` is NULL or a C string; `port` points to a `umad_port_t`.
pub unsafe extern "C" fn umad_get_port(
    ca_name: *const c_char,
    portnum: c_int,
    port: *mut UmadPort,
) -> c_int {
    guard(-libc::EIO, || {
        if port.is_null() {
            return -libc::EINVAL;
        }
        let Some(c) = ctx() else {
            return -libc::ENODEV;
        };
        // SAFETY: the caller passes NULL or a C string.
        let name = unsafe { opt_str(ca_name) };
        let name = name.as_deref();
        let resolved = match name {
            Some(n) if portnum != 0 => c.ca(n).map(|ca| (Arc::clone(ca), portnum)),
            _ => c.resolve(name, portnum),
        };
        let Some((ca, num)) = resolved else {
            return if name.is_some() && portnum != 0 {
                -libc::EIO
            } else {
                -libc::ENODEV
            };
        };
        let Some(p) = ca.port(num) else {
            return -libc::EIO;
        };
        let Ok(a) = p.attrs() else {
            return -libc::EIO;
        };
        // SAFETY: the caller gives a umad_port_t; every field is plain data.
        let out = unsafe { &mut *port };
        out.pkeys = ptr::null_mut();
        if write_port(out, &ca.name, &a).is_err() {
            return -libc::EIO;
        }
        0
    })
}

/// `umad_release_port`: frees the P_Key table `umad_get_port` allocated.
///
/// # Safety
/// `port` is NULL or was filled by `umad_get_port`/`umad_get_ca`.
pub unsafe extern "C" fn umad_release_port(port: *mut UmadPort) -> c_int {
    if port.is_null() {
        return -libc::ENODEV;
    }
    // SAFETY: the caller passes a port this library filled.
    let p = unsafe { &mut *port };
    // SAFETY: allocated with calloc by this library (or NULL).
    unsafe { libc::free(p.pkeys.cast()) };
    p.pkeys = ptr::null_mut();
    p.pkeys_size = 0;
    0
}

/// `umad_get_ca_device_list`: the CA names as a list of `calloc`ed nodes (the name stored
/// after its node). NULL with errno 0 when there is no CA; NULL with ENODEV when the device
/// could not be opened.
pub extern "C" fn umad_get_ca_device_list() -> *mut UmadDeviceNode {
    guard(ptr::null_mut(), || {
        let Some(c) = ctx() else {
            set_errno(libc::ENODEV);
            return ptr::null_mut();
        };
        let mut head: *mut UmadDeviceNode = ptr::null_mut();
        let mut tail: *mut UmadDeviceNode = ptr::null_mut();
        for ca in c.cas() {
            let size = std::mem::size_of::<UmadDeviceNode>();
            // SAFETY: calloc of the node and its name; checked for NULL.
            let node: *mut UmadDeviceNode =
                unsafe { libc::calloc(1, size + ca.name.len() + 1) }.cast();
            if node.is_null() {
                // SAFETY: `head` is a list this function built.
                unsafe { umad_free_ca_device_list(head) };
                set_errno(libc::ENOMEM);
                return ptr::null_mut();
            }
            // SAFETY: the name goes into the bytes after the node, inside the allocation
            // (calloc zeroed the terminating NUL).
            unsafe {
                let name = node.cast::<u8>().add(size);
                ptr::copy_nonoverlapping(ca.name.as_ptr(), name, ca.name.len());
                (*node).ca_name = name.cast::<c_char>();
                if tail.is_null() {
                    head = node;
                } else {
                    (*tail).next = node;
                }
            }
            tail = node;
        }
        if head.is_null() {
            set_errno(0);
        }
        head
    })
}

/// `umad_free_ca_device_list`.
///
/// # Safety
/// `head` is NULL or a list from `umad_get_ca_device_list`.
pub unsafe extern "C" fn umad_free_ca_device_list(head: *mut UmadDeviceNode) {
    let mut node = head;
    while !node.is_null() {
        // SAFETY: every node of the list was allocated with calloc by this library.
        let next = unsafe { (*node).next };
        // SAFETY: as above.
        unsafe { libc::free(node.cast::<c_void>()) };
        node = next;
    }
}

/// `umad_sort_ca_device_list`: sorts the list by name (`strcmp`); `size` 0 means "count
/// it". As libibumad: a `size` below 2 sorts nothing and returns 0; otherwise the list must
/// have exactly `size` nodes, else EINVAL and the list is left as it was.
///
/// # Safety
/// `head` points to a list from `umad_get_ca_device_list`.
pub unsafe extern "C" fn umad_sort_ca_device_list(
    head: *mut *mut UmadDeviceNode,
    size: usize,
) -> c_int {
    if head.is_null() {
        return libc::EINVAL;
    }
    let mut nodes = Vec::new();
    // SAFETY: the caller passes a pointer to a list head.
    let mut node = unsafe { *head };
    while !node.is_null() {
        nodes.push(node);
        // SAFETY: a node of the list.
        node = unsafe { (*node).next };
    }
    let size = if size == 0 { nodes.len() } else { size };
    if size < 2 {
        return 0;
    }
    if size != nodes.len() {
        return libc::EINVAL;
    }
    // SAFETY: every node's name is a NUL-terminated string stored with it.
    nodes.sort_by(|&a, &b| unsafe {
        std::ffi::CStr::from_ptr((*a).ca_name).cmp(std::ffi::CStr::from_ptr((*b).ca_name))
    });
    for w in nodes.windows(2) {
        // SAFETY: nodes of the list.
        unsafe { (*w[0]).next = w[1] };
    }
    let last = nodes[nodes.len() - 1];
    // SAFETY: nodes of the list; the caller's head pointer.
    unsafe {
        (*last).next = ptr::null_mut();
        *head = nodes[0];
    }
    0
}

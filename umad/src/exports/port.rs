//! Ports and agents: `umad_open_port`, `umad_close_port`, `umad_get_issm_path`,
//! `umad_register`, `umad_register_oui`, `umad_register2`, `umad_unregister`.

use std::ffi::{c_char, c_int, c_long};
use std::sync::atomic::Ordering;

use crate::abi::{OPENIB_OUI, UmadRegAttr};
use std::sync::Arc;

use crate::context::{Ca, CaPort, Context, debug, global, say};
use crate::error::UmadError;
use crate::exports::{NEW_API, guard, opt_str, set_errno};
use crate::file::Registration;

/// `umad_open_port`: resolve the CA and port (NULL / 0 pick the first ACTIVE port, as
/// libibumad does), open a umad file on it, and return its fd; -ENODEV when nothing
/// resolves, -EINVAL for a port that does not exist (or an unknown CA name with a port
/// other than 0), -EIO when the device is gone.
///
/// # Safety
/// `ca_name` is NULL or a C string.
pub unsafe extern "C" fn umad_open_port(ca_name: *const c_char, portnum: c_int) -> c_int {
    guard(-libc::EIO, || {
        let Some(c) = global() else {
            return -libc::ENODEV;
        };
        // SAFETY: the caller passes NULL or a C string.
        let name = unsafe { opt_str(ca_name) };
        let name = name.as_deref();
        let (ca, num, port) = match resolve(c, name, portnum) {
            Ok(r) => r,
            Err(e) => return e,
        };
        match c.open_file(&port) {
            Ok(f) => {
                NEW_API.store(true, Ordering::Relaxed);
                debug("umad_open_port", || {
                    format!("opened {} port {} fd {}", ca.name, num, f.fd())
                });
                f.fd()
            }
            Err(e) => {
                debug("umad_open_port", || format!("{}: {e}", ca.name));
                -libc::EIO
            }
        }
    })
}

/// `umad_close_port`: unregister the fd's agents and close it; 0. An fd this library did not
/// open is simply closed, as libibumad's `close(fd)` would; the number of a umad fd the
/// program already closed itself is left alone (it names another file of the program now).
pub extern "C" fn umad_close_port(fd: c_int) -> c_int {
    guard(0, || {
        let ours = global().is_some_and(|c| c.close_file(fd).is_ok());
        if !ours {
            // SAFETY: closing a descriptor number the caller handed us, as libibumad does.
            unsafe { libc::close(fd) };
        }
        0
    })
}

/// `umad_get_issm_path`: the path whose holding sets IsSM on the port (see
/// [`crate::issm`]); 0, -ENODEV when nothing resolves, -EINVAL for no such port (or an
/// unknown CA name with a port other than 0).
///
/// # Safety
/// `ca_name` is NULL or a C string; `path` has room for `max` bytes.
pub unsafe extern "C" fn umad_get_issm_path(
    ca_name: *const c_char,
    portnum: c_int,
    path: *mut c_char,
    max: c_int,
) -> c_int {
    guard(-libc::EIO, || {
        let Some(c) = global() else {
            return -libc::ENODEV;
        };
        // SAFETY: the caller passes NULL or a C string.
        let name = unsafe { opt_str(ca_name) };
        let name = name.as_deref();
        let (_, _, port) = match resolve(c, name, portnum) {
            Ok(r) => r,
            Err(e) => return e,
        };
        let p = match c.issm().and_then(|i| i.path_for(&port)) {
            Ok(p) => p,
            Err(e) => {
                say(format_args!("libibumad (hca): {e}"));
                return -libc::EIO;
            }
        };
        if !path.is_null() && max > 0 {
            // snprintf: as much as fits, always NUL-terminated.
            let bytes = p.as_os_str().as_encoded_bytes();
            let n = bytes.len().min(max as usize - 1);
            // SAFETY: the caller gives `max` bytes; n + 1 <= max.
            unsafe {
                std::ptr::copy_nonoverlapping(bytes.as_ptr(), path.cast::<u8>(), n);
                *path.add(n) = 0;
            }
        }
        0
    })
}

/// The port `umad_open_port` and `umad_get_issm_path` use: libibumad's `resolve_ca_name`
/// (-ENODEV when it fails), then `dev_to_umad_id` (-EINVAL when no umad device is that CA
/// and port). A name with a port other than 0 is taken as it is, so an unknown CA name is
/// -EINVAL there, and -ENODEV with port 0 (`resolve_ca_port` fails).
fn resolve(
    c: &Context,
    name: Option<&str>,
    portnum: c_int,
) -> Result<(Arc<Ca>, c_int, Arc<CaPort>), c_int> {
    let (ca, num) = match name {
        Some(n) if portnum != 0 => (c.ca(n).cloned().ok_or(-libc::EINVAL)?, portnum),
        _ => c.resolve(name, portnum).ok_or(-libc::ENODEV)?,
    };
    let port = c.port_of(&ca, num).ok_or(-libc::EINVAL)?;
    Ok((ca, num, port))
}

fn register(fd: c_int, r: &Registration) -> Result<u32, UmadError> {
    let c = global().ok_or(UmadError::NotAPort { fd })?;
    match c.file(fd) {
        Ok(f) => f.register(r),
        // In a child of fork() the device is the parent's: refused as after a removal.
        Err(UmadError::Forked) => Err(UmadError::RegisterRemoved {
            reason: UmadError::Forked.to_string(),
        }),
        Err(e) => Err(e),
    }
}

/// The two `long`s of a method mask (`NULL`: none).
///
/// # Safety
/// `mask` is NULL or points to `16 / sizeof(long)` longs.
unsafe fn method_mask(mask: *const c_long) -> [u64; 2] {
    if mask.is_null() {
        return [0, 0];
    }
    // SAFETY: 16 bytes readable, as umad.h's `long method_mask[16 / sizeof(long)]`.
    let bytes: [u8; 16] = unsafe { std::ptr::read_unaligned(mask.cast()) };
    [
        u64::from_ne_bytes(bytes[..8].try_into().expect("8 bytes")),
        u64::from_ne_bytes(bytes[8..].try_into().expect("8 bytes")),
    ]
}

/// libibumad's QP choice, made on the class as the caller passed it (an `int` for
/// `umad_register`): QP0 for exactly 0x01 and 0x81, QP1 for anything else. The kernel then
/// sees the class truncated to a byte, so 0x101 asks for class 0x01 on QP1 (refused).
fn qpn_of(class: c_int) -> u32 {
    u32::from(!matches!(class, 0x01 | 0x81))
}

/// `umad_register`: an agent for `mgmt_class` (QP0 for 0x01/0x81, QP1 otherwise) receiving
/// the unsolicited methods of `method_mask`; returns its ID, or -EPERM (errno says why).
///
/// # Safety
/// `method_mask` is NULL or points to 16 bytes.
pub unsafe extern "C" fn umad_register(
    fd: c_int,
    mgmt_class: c_int,
    mgmt_version: c_int,
    rmpp_version: u8,
    method_mask: *const c_long,
) -> c_int {
    guard(-libc::EPERM, || {
        let class = mgmt_class as u8;
        let r = Registration {
            qpn: qpn_of(mgmt_class),
            class,
            version: mgmt_version as u8,
            // SAFETY: the caller's mask, NULL or 16 bytes.
            methods: unsafe { self::method_mask(method_mask) },
            oui: OPENIB_OUI,
            rmpp_version,
            flags: 0,
        };
        match register(fd, &r) {
            Ok(id) => id as c_int,
            Err(e) => {
                debug("umad_register", || format!("fd {fd} class {class:#x}: {e}"));
                set_errno(e.errno());
                -libc::EPERM
            }
        }
    })
}

/// `umad_register_oui`: an agent for vendor range-2 class `mgmt_class` (0x30-0x4F) with
/// `oui`; -EINVAL for a class outside the range, -EPERM when refused.
///
/// # Safety
/// `oui` points to 3 bytes; `method_mask` is NULL or points to 16 bytes.
pub unsafe extern "C" fn umad_register_oui(
    fd: c_int,
    mgmt_class: c_int,
    rmpp_version: u8,
    oui: *const u8,
    method_mask: *const c_long,
) -> c_int {
    guard(-libc::EPERM, || {
        if !(0x30..=0x4f).contains(&mgmt_class) {
            return -libc::EINVAL;
        }
        if oui.is_null() {
            set_errno(libc::EFAULT);
            return -libc::EPERM;
        }
        // SAFETY: the caller's 3-byte OUI.
        let o: [u8; 3] = unsafe { std::ptr::read_unaligned(oui.cast()) };
        let r = Registration {
            qpn: 1,
            class: mgmt_class as u8,
            version: 1,
            // SAFETY: the caller's mask, NULL or 16 bytes.
            methods: unsafe { self::method_mask(method_mask) },
            oui: u32::from(o[0]) << 16 | u32::from(o[1]) << 8 | u32::from(o[2]),
            rmpp_version,
            flags: 0,
        };
        match register(fd, &r) {
            Ok(id) => id as c_int,
            Err(e) => {
                set_errno(e.errno());
                -libc::EPERM
            }
        }
    })
}

/// `umad_register2`: registration with flags and a 24-bit OUI. Returns 0 with the ID in
/// `*agent_id`, or a positive errno (EINVAL for an invalid vendor OUI, unknown flags, or an
/// OUI wider than 24 bits with flags, in which case `attr->flags` is cleared as libibumad
/// does). Without flags libibumad retries a refused registration with `REGISTER_AGENT`,
/// which keeps 24 bits of the OUI: so does this.
///
/// # Safety
/// `attr` and `agent_id` are NULL or valid.
pub unsafe extern "C" fn umad_register2(
    port_fd: c_int,
    attr: *mut UmadRegAttr,
    agent_id: *mut u32,
) -> c_int {
    guard(libc::EIO, || {
        if attr.is_null() || agent_id.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: the caller's umad_reg_attr.
        let a = unsafe { &mut *attr };
        if (0x30..=0x4f).contains(&a.mgmt_class)
            && (a.oui & 0x00ff_ffff == 0 || a.oui & 0xff00_0000 != 0)
        {
            return libc::EINVAL;
        }
        let r = Registration {
            qpn: qpn_of(c_int::from(a.mgmt_class)),
            class: a.mgmt_class,
            version: a.mgmt_class_version,
            methods: a.method_mask,
            // REGISTER_AGENT2 refuses a wider OUI; libibumad then retries without flags
            // through REGISTER_AGENT, whose OUI has 3 bytes: what that retry registers.
            oui: if a.flags == 0 {
                a.oui & 0x00ff_ffff
            } else {
                a.oui
            },
            rmpp_version: a.rmpp_version,
            flags: a.flags,
        };
        match register(port_fd, &r) {
            Ok(id) => {
                // SAFETY: the caller's u32.
                unsafe { *agent_id = id };
                0
            }
            Err(e) => {
                let errno = e.errno();
                if matches!(errno, libc::EINVAL | libc::ENOTTY) {
                    a.flags = 0;
                }
                set_errno(errno);
                errno
            }
        }
    })
}

/// `umad_unregister`: 0, or -1 with errno (EINVAL for an agent not registered), as the
/// ioctl returns.
pub extern "C" fn umad_unregister(fd: c_int, agentid: c_int) -> c_int {
    guard(-1, || {
        let r = global()
            .ok_or(UmadError::NotAPort { fd })
            .and_then(|c| c.file(fd))
            .and_then(|f| {
                let id = u32::try_from(agentid)
                    .map_err(|_| UmadError::AgentRange { id: agentid.into() })?;
                f.unregister(id)
            })
            // In a child of fork(), as after a removal: the agents are gone.
            .map_err(|e| match e {
                UmadError::Forked => UmadError::UnregisterUnknownAgent { id: agentid as u32 },
                e => e,
            });
        match r {
            Ok(()) => 0,
            Err(e) => {
                set_errno(e.errno());
                -1
            }
        }
    })
}

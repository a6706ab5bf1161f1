//! The C layouts of `<infiniband/umad.h>` (rdma-core 44, Debian's libibumad-dev) and the
//! constants of the kernel's umad ABI 5 (reference/mad-stack.md §3.2, §3.3).
//!
//! Every struct is `#[repr(C)]` with the field order and types of the header, so the
//! compiler lays it out as gcc does; `tests/abi_layout.rs` compiles a C program against the
//! installed header and compares every offset and size with these.

use std::ffi::{c_char, c_int, c_uint};

/// `UMAD_CA_NAME_LEN`: bytes of a CA name, with its NUL.
pub const CA_NAME_LEN: usize = 20;
/// `UMAD_CA_MAX_PORTS`: port numbers 0-9.
pub const CA_MAX_PORTS: usize = 10;
/// `UMAD_CA_MAX_AGENTS` / the kernel's `IB_UMAD_MAX_AGENTS`: agents per file.
pub const MAX_AGENTS: usize = 32;
/// `UMAD_MAX_DEVICES`: CA names `resolve_ca_name` looks at.
pub const MAX_DEVICES: usize = 32;
/// `UMAD_MAX_PORTS`: umad device numbers libibumad scans.
pub const MAX_PORTS: usize = 64;
/// `IB_UMAD_ABI_VERSION`.
pub const ABI_VERSION: u32 = 5;
/// `sizeof(struct ib_user_mad)`: the header of the new ABI (with `pkey_index`).
pub const HDR_LEN: usize = 64;
/// The header of the old ABI (`ib_user_mad_hdr_old`: no `pkey_index`, no reserved bytes).
pub const HDR_LEN_OLD: usize = 56;
/// The kernel's `IB_MGMT_RMPP_HDR`: a write must carry at least this much MAD.
pub const MIN_WRITE_MAD: usize = 36;
/// The kernel's `IB_MGMT_MAD_HDR`: what a timed-out send returns of its MAD.
pub const MAD_HDR_LEN: usize = 24;
/// The kernel's `MAX_UMAD_RECV_LIST_SIZE`: received MADs queued per file before more are
/// dropped.
pub const MAX_RECV_LIST: usize = 200_000;
/// `IB_OPENIB_OUI`, the OUI `umad_register` puts in every registration.
pub const OPENIB_OUI: u32 = 0x00_1405;
/// `UMAD_USER_RMPP`: the one registration flag (`IB_USER_MAD_REG_FLAGS_CAP`).
pub const USER_RMPP: u32 = 1;

/// `ib_mad_addr_t`: where a MAD goes (send) or came from (receive). Multi-byte fields are
/// big-endian except `pkey_index`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IbMadAddr {
    /// Remote QP (big-endian).
    pub qpn: u32,
    /// Remote Q_Key (big-endian).
    pub qkey: u32,
    /// DLID on send, SLID on receive (big-endian).
    pub lid: u16,
    /// Service level.
    pub sl: u8,
    /// Source path bits (send) or DLID path bits (receive).
    pub path_bits: u8,
    /// A GRH follows.
    pub grh_present: u8,
    /// Source GID index.
    pub gid_index: u8,
    /// GRH hop limit.
    pub hop_limit: u8,
    /// GRH traffic class.
    pub traffic_class: u8,
    /// Remote GID (network order).
    pub gid: [u8; 16],
    /// GRH flow label (big-endian).
    pub flow_label: u32,
    /// P_Key index (host order; new ABI only).
    pub pkey_index: u16,
    /// Reserved.
    pub reserved: [u8; 6],
}

/// `ib_user_mad_t` without its flexible `data[]`: the 64-byte header in front of every MAD
/// that goes through `umad_send` and `umad_recv`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IbUserMad {
    /// Agent ID (send: the agent to send with; receive: the agent that received).
    pub agent_id: u32,
    /// 0, or ETIMEDOUT for a returned timed-out send.
    pub status: u32,
    /// Response timeout in ms (send).
    pub timeout_ms: u32,
    /// Retries (send).
    pub retries: u32,
    /// Header plus MAD length (receive).
    pub length: u32,
    /// The address.
    pub addr: IbMadAddr,
}

impl IbUserMad {
    /// The header as the bytes the C side sees.
    pub fn to_bytes(&self) -> [u8; HDR_LEN] {
        let mut b = [0u8; HDR_LEN];
        b[0..4].copy_from_slice(&self.agent_id.to_ne_bytes());
        b[4..8].copy_from_slice(&self.status.to_ne_bytes());
        b[8..12].copy_from_slice(&self.timeout_ms.to_ne_bytes());
        b[12..16].copy_from_slice(&self.retries.to_ne_bytes());
        b[16..20].copy_from_slice(&self.length.to_ne_bytes());
        let a = &self.addr;
        b[20..24].copy_from_slice(&a.qpn.to_ne_bytes());
        b[24..28].copy_from_slice(&a.qkey.to_ne_bytes());
        b[28..30].copy_from_slice(&a.lid.to_ne_bytes());
        b[30] = a.sl;
        b[31] = a.path_bits;
        b[32] = a.grh_present;
        b[33] = a.gid_index;
        b[34] = a.hop_limit;
        b[35] = a.traffic_class;
        b[36..52].copy_from_slice(&a.gid);
        b[52..56].copy_from_slice(&a.flow_label.to_ne_bytes());
        b[56..58].copy_from_slice(&a.pkey_index.to_ne_bytes());
        b[58..64].copy_from_slice(&a.reserved);
        b
    }

    /// The header from the bytes the C side wrote.
    pub fn from_bytes(b: &[u8; HDR_LEN]) -> IbUserMad {
        let u32_at = |o: usize| u32::from_ne_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        let mut gid = [0u8; 16];
        gid.copy_from_slice(&b[36..52]);
        let mut reserved = [0u8; 6];
        reserved.copy_from_slice(&b[58..64]);
        IbUserMad {
            agent_id: u32_at(0),
            status: u32_at(4),
            timeout_ms: u32_at(8),
            retries: u32_at(12),
            length: u32_at(16),
            addr: IbMadAddr {
                qpn: u32_at(20),
                qkey: u32_at(24),
                lid: u16::from_ne_bytes([b[28], b[29]]),
                sl: b[30],
                path_bits: b[31],
                grh_present: b[32],
                gid_index: b[33],
                hop_limit: b[34],
                traffic_class: b[35],
                gid,
                flow_label: u32_at(52),
                pkey_index: u16::from_ne_bytes([b[56], b[57]]),
                reserved,
            },
        }
    }
}

/// `umad_port_t`: one port as `umad_get_port` fills it.
#[repr(C)]
#[derive(Debug)]
pub struct UmadPort {
    /// CA name.
    pub ca_name: [c_char; CA_NAME_LEN],
    /// Port number.
    pub portnum: c_int,
    /// Base LID.
    pub base_lid: c_uint,
    /// LMC.
    pub lmc: c_uint,
    /// Master SM LID.
    pub sm_lid: c_uint,
    /// Master SM SL.
    pub sm_sl: c_uint,
    /// PortState (4 = Active).
    pub state: c_uint,
    /// PortPhysicalState (5 = LinkUp).
    pub phys_state: c_uint,
    /// Rate in Gb/s (integer part of the sysfs `rate`).
    pub rate: c_uint,
    /// CapabilityMask (big-endian).
    pub capmask: u32,
    /// GID prefix (big-endian).
    pub gid_prefix: u64,
    /// Port GUID (big-endian).
    pub port_guid: u64,
    /// Entries of `pkeys`.
    pub pkeys_size: c_uint,
    /// The P_Key table (host order), `malloc`ed; `umad_release_port` frees it.
    pub pkeys: *mut u16,
    /// Link layer ("InfiniBand").
    pub link_layer: [c_char; CA_NAME_LEN],
}

/// `umad_ca_t`: one CA as `umad_get_ca` fills it.
#[repr(C)]
#[derive(Debug)]
pub struct UmadCa {
    /// CA name.
    pub ca_name: [c_char; CA_NAME_LEN],
    /// Node type: 1 CA, 2 switch, 3 router.
    pub node_type: c_uint,
    /// Highest port number.
    pub numports: c_int,
    /// Firmware version.
    pub fw_ver: [c_char; 20],
    /// CA type (`hca_type`).
    pub ca_type: [c_char; 40],
    /// Hardware version (`hw_rev`).
    pub hw_ver: [c_char; 20],
    /// Node GUID (big-endian).
    pub node_guid: u64,
    /// System image GUID (big-endian).
    pub system_guid: u64,
    /// The ports, `malloc`ed; `umad_release_ca` frees them.
    pub ports: [*mut UmadPort; CA_MAX_PORTS],
}

/// `struct umad_device_node`: one entry of `umad_get_ca_device_list`.
#[repr(C)]
#[derive(Debug)]
pub struct UmadDeviceNode {
    /// The next entry.
    pub next: *mut UmadDeviceNode,
    /// The CA name (stored after the node, in the same allocation).
    pub ca_name: *const c_char,
}

/// `struct umad_reg_attr`: what `umad_register2` registers.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UmadRegAttr {
    /// Management class.
    pub mgmt_class: u8,
    /// Class version.
    pub mgmt_class_version: u8,
    /// Registration flags (`UMAD_USER_RMPP`).
    pub flags: u32,
    /// Unsolicited methods, bit `m` of word `m / 64` (host order).
    pub method_mask: [u64; 2],
    /// OUI (24 bits) for vendor range-2 classes.
    pub oui: u32,
    /// RMPP version.
    pub rmpp_version: u8,
}

/// Copies `s` into a fixed C string buffer, cutting it to leave room for the NUL (as the
/// kernel's sysfs strings reach libibumad through `sys_read_string`).
pub fn put_str(dst: &mut [c_char], s: &str) {
    let n = s.len().min(dst.len().saturating_sub(1));
    for (d, &b) in dst.iter_mut().zip(&s.as_bytes()[..n]) {
        *d = b as c_char;
    }
    for d in dst.iter_mut().skip(n) {
        *d = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    #[test]
    fn the_header_round_trips_through_bytes_at_the_abi_offsets() {
        let h = IbUserMad {
            agent_id: 7,
            status: 110,
            timeout_ms: 200,
            retries: 3,
            length: 88,
            addr: IbMadAddr {
                qpn: 1u32.to_be(),
                qkey: 0x8001_0000u32.to_be(),
                lid: 0x1234u16.to_be(),
                sl: 5,
                path_bits: 1,
                grh_present: 1,
                gid_index: 2,
                hop_limit: 64,
                traffic_class: 9,
                gid: [0xab; 16],
                flow_label: 0x12345u32.to_be(),
                pkey_index: 3,
                reserved: [0; 6],
            },
        };
        let b = h.to_bytes();
        // Offsets of reference/mad-stack.md §3.2, written out by hand.
        assert_eq!(&b[8..12], &200u32.to_ne_bytes());
        assert_eq!(&b[28..30], &[0x12, 0x34]);
        assert_eq!(b[30], 5);
        assert_eq!(b[32], 1);
        assert_eq!(&b[36..52], &[0xab; 16]);
        assert_eq!(&b[52..56], &[0x00, 0x01, 0x23, 0x45]);
        assert_eq!(&b[56..58], &3u16.to_ne_bytes());
        assert_eq!(IbUserMad::from_bytes(&b), h);
        assert_eq!(size_of::<IbUserMad>(), HDR_LEN);
        assert_eq!(
            offset_of!(IbUserMad, addr) + offset_of!(IbMadAddr, pkey_index),
            56
        );
    }

    #[test]
    fn put_str_cuts_and_terminates() {
        let mut b = [1 as c_char; 5];
        put_str(&mut b, "mlx5_0");
        assert_eq!(b.map(|c| c as u8), *b"mlx5\0");
        put_str(&mut b, "ab");
        assert_eq!(b.map(|c| c as u8), *b"ab\0\0\0");
    }
}

//! What `umad_get_ca` and `umad_get_port` report, asked of the port's own SMA (the firmware's
//! through MAD_IFC on hardware, the simulated node's in the simulator) through
//! [`HcaPort::process_mad`], as the kernel's `ib_query_port`/`ib_query_device` do before sysfs
//! shows them: NodeInfo, PortInfo and the P_Key table, with the values sysfs derives
//! (`rate`, `link_layer`) computed the kernel's way.

use driver::verbs::HcaPort;
use mad::wire::attr::node_info::NodeInfo;
use mad::wire::attr::pkey_table::{PKEYS_PER_BLOCK, PkeyTable};
use mad::wire::attr::port_info::{
    PortInfo, PortInfoRepr, cap_mask, cap_mask2, link_speed, link_speed_ext, link_speed_ext2,
    link_width,
};
use mad::wire::header::{MAD_LEN, Mad};
use mad::wire::{attr_id, class, method};

use crate::error::UmadError;

/// The SMP data area: bytes 64-127.
const DATA: std::ops::Range<usize> = 64..128;

/// The node as NodeInfo tells it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeAttrs {
    /// NodeType (1 CA, 2 switch, 3 router).
    pub node_type: u8,
    /// NumPorts.
    pub num_ports: u8,
    /// NodeGUID.
    pub node_guid: u64,
    /// SystemImageGUID.
    pub sys_image_guid: u64,
    /// PortGUID of the port asked through.
    pub port_guid: u64,
    /// PartitionCap: P_Key table entries per port.
    pub partition_cap: u16,
}

/// One port as sysfs shows it under `ports/<n>/`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortAttrs {
    /// Port number.
    pub num: u8,
    /// `lid`.
    pub lid: u16,
    /// `lid_mask_count`.
    pub lmc: u8,
    /// `sm_lid`.
    pub sm_lid: u16,
    /// `sm_sl`.
    pub sm_sl: u8,
    /// `state` (PortState, 4 = ACTIVE).
    pub state: u8,
    /// `phys_state` (5 = LinkUp).
    pub phys_state: u8,
    /// `rate`, in Gb/s, as libibumad's `strtoul` reads it (the integer part).
    pub rate: u32,
    /// `cap_mask`.
    pub cap_mask: u32,
    /// GID prefix of `gids/0`.
    pub gid_prefix: u64,
    /// Port GUID of `gids/0`.
    pub port_guid: u64,
    /// `pkeys/<i>`, every entry of the table.
    pub pkeys: Vec<u16>,
    /// `link_layer`.
    pub link_layer: &'static str,
}

/// A SubnGet of `attr` with `modifier`, answered by the port's own SMA; returns the
/// attribute data. The answer is checked (response, same attribute, status 0) before use:
/// it comes from the device.
pub fn smp_get(port: &dyn HcaPort, attr: u16, modifier: u32) -> Result<[u8; 64], UmadError> {
    let mut req = [0u8; MAD_LEN];
    {
        let mut m = Mad::new_checked(&mut req[..]).expect("a MAD buffer holds a header");
        m.set_base_version(class::BASE_VERSION);
        m.set_mgmt_class(class::SUBN_LID_ROUTED);
        m.set_class_version(class::SUBN_CLASS_VERSION);
        m.set_method(method::GET);
        m.set_tid(0x756d_6164_0000_0000 | u64::from(attr));
        m.set_attr_id(attr);
        m.set_attr_mod(modifier);
    }
    let answer = port.process_mad(&req, true)?;
    let bad = |detail: String| {
        UmadError::Driver(driver::DriverError::BadDeviceValue {
            what: "SMA answer",
            detail,
        })
    };
    let h = Mad::new_checked(&answer[..]).map_err(|e| bad(e.to_string()))?;
    if h.method() != method::GET_RESP || h.attr_id() != attr {
        return Err(bad(format!(
            "asked attribute {attr:#06x}, got method {:#04x} attribute {:#06x}",
            h.method(),
            h.attr_id()
        )));
    }
    if h.status() & 0x7fff != 0 {
        return Err(bad(format!(
            "attribute {attr:#06x} modifier {modifier:#x}: status {:#06x}",
            h.status()
        )));
    }
    let mut d = [0u8; 64];
    d.copy_from_slice(&answer[DATA]);
    Ok(d)
}

/// NodeInfo through `port`.
pub fn node(port: &dyn HcaPort) -> Result<NodeAttrs, UmadError> {
    let d = smp_get(port, attr_id::sm::NODE_INFO, 0)?;
    let n = NodeInfo::new_checked(&d[..]).map_err(|e| {
        UmadError::Driver(driver::DriverError::BadDeviceValue {
            what: "NodeInfo",
            detail: e.to_string(),
        })
    })?;
    Ok(NodeAttrs {
        node_type: n.node_type().into(),
        num_ports: n.num_ports(),
        node_guid: n.node_guid(),
        sys_image_guid: n.system_image_guid(),
        port_guid: n.port_guid(),
        partition_cap: n.partition_cap(),
    })
}

/// Everything sysfs shows of `port`, with `pkey_entries` entries of its P_Key table (fewer
/// if the node's PartitionCap is smaller: the SMA holds no more).
pub fn port(port: &dyn HcaPort, pkey_entries: u16) -> Result<PortAttrs, UmadError> {
    let num = port.port_num();
    let d = smp_get(port, attr_id::sm::PORT_INFO, u32::from(num))?;
    let bad = |e: mad::wire::Error| {
        UmadError::Driver(driver::DriverError::BadDeviceValue {
            what: "PortInfo",
            detail: e.to_string(),
        })
    };
    let pi = PortInfoRepr::parse(&PortInfo::new_checked(&d[..]).map_err(bad)?).map_err(bad)?;
    let n = node(port)?;
    let guid = n.port_guid;
    let pkey_entries = pkey_entries.min(n.partition_cap);
    let mut pkeys = Vec::with_capacity(usize::from(pkey_entries));
    let blocks = usize::from(pkey_entries).div_ceil(PKEYS_PER_BLOCK);
    for block in 0..blocks {
        let d = smp_get(port, attr_id::sm::PKEY_TABLE, block as u32)?;
        let t = PkeyTable::new_checked(&d[..]).map_err(bad)?;
        for i in 0..PKEYS_PER_BLOCK {
            if pkeys.len() == usize::from(pkey_entries) {
                break;
            }
            pkeys.push(t.pkey(i).map_err(bad)?);
        }
    }
    let ext = ext_speed(&pi);
    Ok(PortAttrs {
        num,
        lid: pi.lid,
        lmc: pi.lmc,
        sm_lid: pi.master_sm_lid,
        sm_sl: pi.master_sm_sl,
        state: pi.port_state.into(),
        phys_state: pi.port_physical_state.into(),
        rate: rate_gbps(pi.link_width_active, pi.link_speed_active, ext),
        cap_mask: pi.capability_mask,
        gid_prefix: pi.gid_prefix,
        port_guid: guid,
        pkeys,
        link_layer: "InfiniBand",
    })
}

/// The extended speed a port runs at, as libibnetdisc's `ibnd_get_agg_linkspeedext_field`
/// reads it: LinkSpeedExtActive when the port has extended speeds, and [`XDR_EXT`] in its
/// place when it also has CapabilityMask2 with extended speeds 2 and LinkSpeedExtActive2 is
/// XDR; 0 otherwise.
fn ext_speed(pi: &PortInfoRepr) -> u8 {
    if pi.capability_mask & cap_mask::HAS_EXT_SPEEDS == 0 {
        return 0;
    }
    if pi.capability_mask & cap_mask::HAS_CAP_MASK2 != 0
        && pi.capability_mask2 & cap_mask2::EXT_SPEEDS_2_SUPPORTED != 0
        && pi.link_speed_ext_active2 == link_speed_ext2::XDR
    {
        return XDR_EXT;
    }
    pi.link_speed_ext_active
}

/// The aggregated extended-speed value of XDR (LinkSpeedExtActive2 shifted past the five
/// bits of LinkSpeedExtActive, as libibnetdisc aggregates them).
const XDR_EXT: u8 = link_speed_ext2::XDR << 5;

/// The integer part of the kernel's sysfs `rate` (`rate_show`: 2.5 Gb/s per SDR lane,
/// 5 DDR, 10 QDR, 14 FDR, 25 EDR, 50 HDR, 100 NDR, 200 XDR, times the lanes); 0 for a width
/// IBA does not define (the kernel's read fails and libibumad leaves 0). `speed_ext_active`
/// is the aggregated value of `ext_speed`.
pub fn rate_gbps(width_active: u8, speed_active: u8, speed_ext_active: u8) -> u32 {
    let lanes = match width_active {
        link_width::X1 => 1,
        link_width::X2 => 2,
        link_width::X4 => 4,
        link_width::X8 => 8,
        link_width::X12 => 12,
        _ => return 0,
    };
    // Tenths of Gb/s per lane, the kernel's table.
    let per_lane = match speed_ext_active {
        link_speed_ext::FDR => 140,
        link_speed_ext::EDR => 250,
        link_speed_ext::HDR => 500,
        link_speed_ext::NDR => 1000,
        XDR_EXT => 2000,
        _ => match speed_active {
            link_speed::DDR => 50,
            link_speed::QDR => 100,
            _ => 25,
        },
    };
    per_lane * lanes / 10
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_are_the_kernels() {
        // rate_show: "%d%s Gb/sec (%dX%s)"; libibumad keeps the integer part.
        assert_eq!(
            rate_gbps(link_width::X1, link_speed::SDR, 0),
            2,
            "2.5 Gb/sec"
        );
        assert_eq!(rate_gbps(link_width::X4, link_speed::SDR, 0), 10);
        assert_eq!(rate_gbps(link_width::X4, link_speed::DDR, 0), 20);
        assert_eq!(rate_gbps(link_width::X4, link_speed::QDR, 0), 40);
        assert_eq!(
            rate_gbps(link_width::X4, link_speed::SDR, link_speed_ext::FDR),
            56
        );
        assert_eq!(
            rate_gbps(link_width::X4, link_speed::SDR, link_speed_ext::EDR),
            100
        );
        assert_eq!(
            rate_gbps(link_width::X4, link_speed::SDR, link_speed_ext::HDR),
            200
        );
        assert_eq!(
            rate_gbps(link_width::X2, link_speed::SDR, link_speed_ext::NDR),
            200
        );
        assert_eq!(rate_gbps(link_width::X12, link_speed::QDR, 0), 120);
        assert_eq!(
            rate_gbps(link_width::X1, link_speed::SDR, link_speed_ext::FDR),
            14
        );
        assert_eq!(rate_gbps(0, link_speed::SDR, 0), 0);
        // rate_show: IB_SPEED_XDR is 200 Gb/s a lane, "800 Gb/sec (4X XDR)".
        assert_eq!(rate_gbps(link_width::X4, link_speed::SDR, XDR_EXT), 800);
    }

    fn port_info(mask: u32, mask2: u16, ext: u8, ext2: u8) -> PortInfoRepr {
        let mut b = [0u8; 64];
        let mut v = PortInfo::new_checked(&mut b[..]).unwrap();
        v.set_capability_mask(mask);
        v.set_capability_mask2(mask2);
        v.set_link_speed_ext_active(ext);
        v.set_link_speed_ext_active2(ext2);
        PortInfoRepr::parse(&PortInfo::new_checked(&b[..]).unwrap()).unwrap()
    }

    #[test]
    fn an_xdr_port_reads_xdr_only_with_every_capability_bit() {
        let both = cap_mask::HAS_EXT_SPEEDS | cap_mask::HAS_CAP_MASK2;
        let xdr2 = cap_mask2::EXT_SPEEDS_2_SUPPORTED;
        let ndr = link_speed_ext::NDR;
        assert_eq!(ext_speed(&port_info(both, xdr2, 0, 1)), XDR_EXT);
        assert_eq!(ext_speed(&port_info(both, xdr2, ndr, 0)), ndr);
        // Without CapabilityMask2's bit, or without HasCapMask2, byte 56 is not read.
        assert_eq!(ext_speed(&port_info(both, 0, ndr, 1)), ndr);
        assert_eq!(
            ext_speed(&port_info(cap_mask::HAS_EXT_SPEEDS, xdr2, ndr, 1)),
            ndr
        );
        // Without extended speeds nothing extended is read.
        assert_eq!(
            ext_speed(&port_info(cap_mask::HAS_CAP_MASK2, xdr2, ndr, 1)),
            0
        );
    }
}

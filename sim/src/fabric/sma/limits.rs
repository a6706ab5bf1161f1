//! The values a port's PortInfo and a switch's SwitchInfo can hold: the checks a PortInfo or
//! SwitchInfo Set applies to what it writes (`port_info.rs`, `switch.rs`), and the same
//! checks for values set another way (the network's state file, `crate::net::state_file`),
//! so that nothing holds a value the SMA would have refused, or one its field cannot carry
//! (a field writer keeps only the field's bits, so such a value would read back as another).

use mad_wire::attr::port_info::{PortInfo, PortInfoRepr};
use mad_wire::attr::switch_info::{SwitchInfo, SwitchInfoRepr};

use super::PortExtra;
use super::defaults::{LINK_SPEED_SUPPORTED, LINK_WIDTH_SUPPORTED, PortDefaults};
use crate::fabric::model::UNICAST_LID_END;
use crate::fabric::rate::LinkRates;
use crate::fabric::state::SwitchInfo as SwitchInfoState;

/// An enabled width or speed mask names only rates the port supports.
pub(super) fn rate_mask_ok(mask: u8, supported: u8) -> bool {
    mask & !supported == 0
}

/// LinkDownDefaultState a port holds: 1 Sleep or 2 Polling (0 in a Set means no change).
pub(super) fn link_down_default_ok(v: u8) -> bool {
    matches!(v, 1 | 2)
}

/// NeighborMTU: 1 (256 bytes) up to the port's MTUCap.
pub(super) fn neighbor_mtu_ok(d: &PortDefaults, v: u8) -> bool {
    v != 0 && v <= d.mtu_cap
}

/// OperationalVLs a port holds: 1 up to its VLCap (0 in a Set means no change).
pub(super) fn op_vls_ok(d: &PortDefaults, v: u8) -> bool {
    v != 0 && v <= d.vl_cap
}

/// A MasterSMLID an SM writes: a unicast LID.
pub(super) fn sm_lid_ok(v: u16) -> bool {
    v != 0 && u32::from(v) < UNICAST_LID_END
}

/// The LMC a port holds: 0 on a port with one LID (a switch's base port 0,
/// [`Fabric::lmc_capable`](crate::fabric::Fabric::lmc_capable)), else any 3-bit LMC.
pub(super) fn lmc_ok(lmc_capable: bool, lmc: u8) -> bool {
    lmc == 0 || (lmc_capable && lmc <= 7)
}

/// The largest LinearFDBTop a switch takes: below LinearFDBCap and a unicast LID.
pub(super) fn linear_fdb_top_max(i: &SwitchInfoState) -> u16 {
    let max = u32::from(i.linear_fdb_cap).min(UNICAST_LID_END) - 1;
    u16::try_from(max).unwrap_or(u16::MAX)
}

/// A default port of SwitchInfo: a port of the switch (0 its management port) or 255 (none).
pub(super) fn switch_port_ok(ports: u8, p: u8) -> bool {
    p <= ports || p == 0xFF
}

/// A PortInfo field a held value does not fit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PortInfoField {
    /// M_KeyProtectBits (2 bits).
    MKeyProtect,
    /// MasterSMLID (a unicast LID, or 0 before an SM wrote one).
    MasterSmLid,
    /// LMC (0 on a switch's base port 0, else 0-7).
    Lmc,
    /// MasterSMSL (4 bits).
    MasterSmSl,
    /// NeighborMTU (1 up to MTUCap).
    NeighborMtu,
    /// OperationalVLs (1 up to VLCap).
    OperationalVls,
    /// HOQLife (5 bits).
    HoqLife,
    /// LinkWidthEnabled (supported widths only).
    LinkWidthEnabled,
    /// LinkSpeedEnabled (supported speeds only).
    LinkSpeedEnabled,
    /// LinkSpeedExtEnabled (supported extended speeds only).
    LinkSpeedExtEnabled,
    /// LinkSpeedExtEnabled2 (XDR only where supported).
    LinkSpeedExtEnabled2,
    /// LinkDownDefaultState (1 or 2).
    LinkDownDefault,
    /// VLStallCount (3 bits).
    VlStallCount,
    /// SubnetTimeOut (5 bits).
    SubnetTimeout,
    /// LocalPhyErrors (4 bits).
    LocalPhyErrors,
    /// OverrunErrors (4 bits).
    OverrunErrors,
}

/// The PortInfo values of a port held outside a Set, to check with [`check_port_info`].
#[derive(Debug, Clone, Copy)]
pub struct HeldPortInfo {
    /// M_KeyProtectBits.
    pub m_key_protect: u8,
    /// MasterSMLID.
    pub sm_lid: u16,
    /// LMC.
    pub lmc: u8,
    /// Whether the port may hold an LMC other than 0
    /// ([`Fabric::lmc_capable`](crate::fabric::Fabric::lmc_capable)).
    pub lmc_capable: bool,
    /// MasterSMSL.
    pub sm_sl: u8,
    /// NeighborMTU.
    pub neighbor_mtu: u8,
    /// OperationalVLs.
    pub op_vls: u8,
    /// HOQLife.
    pub hoq_life: u8,
    /// The enabled rates.
    pub enabled: LinkRates,
    /// The port's LinkSpeedExtSupported
    /// ([`Port::speed_ext_supported`](crate::fabric::Port::speed_ext_supported)).
    pub speed_ext_supported: u8,
    /// The port's LinkSpeedExtSupported2
    /// ([`Port::speed_ext2_supported`](crate::fabric::Port::speed_ext2_supported)).
    pub speed_ext2_supported: u8,
}

/// Whether a port of defaults `d` could hold `p` (and `x`, its PortInfo fields beyond the
/// port state): what a PortInfo Set would refuse to write, or a field could not carry, is
/// the first field named. A MasterSMLID of 0 is taken: a port no SM configured has it.
pub fn check_port_info(
    d: &PortDefaults,
    p: &HeldPortInfo,
    x: Option<&PortExtra>,
) -> Result<(), PortInfoField> {
    use PortInfoField as F;
    // The fields' widths: what the wire format carries of each value.
    let zero = [0u8; mad_wire::attr::port_info::LEN];
    let mut r = PortInfoRepr::parse(&PortInfo::new_checked(&zero[..]).expect("PortInfo length"))
        .expect("PortInfo parses from its length");
    r.m_key_protect_bits = p.m_key_protect;
    r.master_sm_sl = p.sm_sl;
    r.hoq_life = p.hoq_life;
    if let Some(x) = x {
        r.vl_stall_count = x.vl_stall_count;
        r.subnet_timeout = x.subnet_timeout;
        r.local_phy_errors = x.local_phy_errors;
        r.overrun_errors = x.overrun_errors;
    }
    let mut buf = zero;
    r.emit(&mut PortInfo::new_checked(&mut buf[..]).expect("PortInfo length"));
    let back = PortInfoRepr::parse(&PortInfo::new_checked(&buf[..]).expect("PortInfo length"))
        .expect("PortInfo parses from its length");
    for (field, held, carried) in [
        (
            F::MKeyProtect,
            r.m_key_protect_bits,
            back.m_key_protect_bits,
        ),
        (F::MasterSmSl, r.master_sm_sl, back.master_sm_sl),
        (F::HoqLife, r.hoq_life, back.hoq_life),
        (F::VlStallCount, r.vl_stall_count, back.vl_stall_count),
        (F::SubnetTimeout, r.subnet_timeout, back.subnet_timeout),
        (F::LocalPhyErrors, r.local_phy_errors, back.local_phy_errors),
        (F::OverrunErrors, r.overrun_errors, back.overrun_errors),
    ] {
        if held != carried {
            return Err(field);
        }
    }
    // What a Set checks.
    if p.sm_lid != 0 && !sm_lid_ok(p.sm_lid) {
        return Err(F::MasterSmLid);
    }
    if !lmc_ok(p.lmc_capable, p.lmc) {
        return Err(F::Lmc);
    }
    if !neighbor_mtu_ok(d, p.neighbor_mtu) {
        return Err(F::NeighborMtu);
    }
    if !op_vls_ok(d, p.op_vls) {
        return Err(F::OperationalVls);
    }
    if !rate_mask_ok(p.enabled.width, LINK_WIDTH_SUPPORTED) {
        return Err(F::LinkWidthEnabled);
    }
    if !rate_mask_ok(p.enabled.speed, LINK_SPEED_SUPPORTED) {
        return Err(F::LinkSpeedEnabled);
    }
    if !rate_mask_ok(p.enabled.speed_ext, p.speed_ext_supported) {
        return Err(F::LinkSpeedExtEnabled);
    }
    if !rate_mask_ok(p.enabled.speed_ext2, p.speed_ext2_supported) {
        return Err(F::LinkSpeedExtEnabled2);
    }
    if x.is_some_and(|x| !link_down_default_ok(x.link_down_default)) {
        return Err(F::LinkDownDefault);
    }
    Ok(())
}

/// A SwitchInfo field a held value does not fit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SwitchInfoField {
    /// LinearFDBTop (below LinearFDBCap, a unicast LID).
    LinearFdbTop,
    /// DefaultPort (a port of the switch or 255).
    DefaultPort,
    /// DefaultMulticastPrimaryPort (a port of the switch or 255).
    DefaultMcastPrimaryPort,
    /// DefaultMulticastNotPrimaryPort (a port of the switch or 255).
    DefaultMcastNotPrimaryPort,
    /// LifeTimeValue (5 bits).
    LifeTimeValue,
    /// MulticastFDBTop (not supported: only the value the switch starts with,
    /// [`MULTICAST_FDB_TOP`]).
    MulticastFdbTop,
}

/// The MulticastFDBTop every simulated switch holds: 0, as ibsim's SwitchInfo template
/// (`ibsim/sim_net.c` `switchinfo`). No switch supports the component (port 0's
/// CapabilityMask lacks IsMulticastFDBTopSupported, 0x40000000, `defaults.rs`; OpenSM writes
/// it only to a switch that sets the bit, `osm_mcast_mgr.c`), so a SwitchInfo Set leaves it
/// alone, as ibsim's `do_switchinfo` (`sim_mad.c`) stores only PortStateChange,
/// LinearFDBTop and LifeTimeValue.
pub const MULTICAST_FDB_TOP: u16 = 0;

/// Whether a switch of `ports` ports could hold SwitchInfo `i`: what a SwitchInfo Set would
/// refuse, or a field could not carry, is the first field named.
pub fn check_switch_info(ports: u8, i: &SwitchInfoState) -> Result<(), SwitchInfoField> {
    use SwitchInfoField as F;
    if i.linear_fdb_top > linear_fdb_top_max(i) {
        return Err(F::LinearFdbTop);
    }
    if i.multicast_fdb_top != MULTICAST_FDB_TOP {
        return Err(F::MulticastFdbTop);
    }
    for (field, p) in [
        (F::DefaultPort, i.default_port),
        (F::DefaultMcastPrimaryPort, i.default_mcast_primary_port),
        (
            F::DefaultMcastNotPrimaryPort,
            i.default_mcast_not_primary_port,
        ),
    ] {
        if !switch_port_ok(ports, p) {
            return Err(field);
        }
    }
    let zero = [0u8; mad_wire::attr::switch_info::LEN];
    let mut r =
        SwitchInfoRepr::parse(&SwitchInfo::new_checked(&zero[..]).expect("SwitchInfo length"))
            .expect("SwitchInfo parses from its length");
    r.life_time_value = i.life_time_value;
    let mut buf = zero;
    r.emit(&mut SwitchInfo::new_checked(&mut buf[..]).expect("SwitchInfo length"));
    let back = SwitchInfoRepr::parse(&SwitchInfo::new_checked(&buf[..]).expect("length"))
        .expect("SwitchInfo parses from its length");
    if back.life_time_value != i.life_time_value {
        return Err(F::LifeTimeValue);
    }
    Ok(())
}

//! PortInfo Get and Set, and the port state machine the SM drives through it.
//!
//! AttributeModifier: a switch's port number (0 = its management port); on a CA, 0 means the
//! port the SMP arrived on, and a Set must address that port (ibsim refuses the others too).
//! A CA's port named by another port's SMP is guarded by its own M_Key as well (`mkey.rs`).
//! LocalPortNum always reports the port the SMP arrived on.
//!
//! A Set is checked whole before anything changes: a field the port cannot take makes the
//! Set fail with 0x001C, changing nothing. Checks (after the kernel's `qib_mad.c`
//! `subn_set_portinfo` and IBA 14.2.5.6):
//! - LID and MasterSMLID (CA ports, switch port 0): unicast (1-0xBFFF), the LMC range inside
//!   the unicast LIDs, the base LID's low LMC bits clear (a port answers the DLIDs matching
//!   its base LID with those bits masked, IBA 4.1.3, so an unaligned base names LIDs it
//!   does not answer; OpenSM assigns aligned ranges only, `osm_lid_mgr.c`). LMC 0 on a
//!   switch's base port 0 (SwitchInfo EnhancedPort0 clear), which has one LID: OpenSM gives
//!   it one (`osm_lid_mgr.c` `lid_mgr_get_port_lid`, `osm_switch.h`
//!   `osm_switch_sp0_is_lmc_capable`) and writes LMC 0 there; another LMC is refused rather
//!   than stored, so the switch never holds LIDs its SM did not give it. A LID another port still holds is taken: an SMA knows only its own
//!   port (`qib_mad.c` refuses only LID 0 and multicast LIDs; ibsim's `sim_mad.c` takes it and
//!   logs "overwrite lid table entry"), and an SM moving LIDs with several Sets in flight
//!   gives a port a LID another gives up later in the same sweep
//!   ([`Fabric::assign_lid`](crate::fabric::Fabric::assign_lid));
//! - LinkWidthEnabled: 0 no change, 0xFF all supported, else a subset of the supported widths;
//!   LinkSpeedEnabled: 0 no change, 15 all supported, else a subset; LinkSpeedExtEnabled: 0 no
//!   change, 30 none, 31 all supported, else a subset. The supported extended speeds are the
//!   port's ([`Port::speed_ext_supported`]): none on a port its topology gives SDR to QDR only,
//!   so there 31 changes nothing (as under ibsim, whose `do_portinfo` ignores 31) and any
//!   explicit mask is refused (`qib_mad.c`: a mask beyond the supported speeds is 0x001C);
//!   OpenSM writes 31 on every port claiming IsExtendedSpeedsSupported, which ours all do, as
//!   ibsim's (CapabilityMask bit 0x4000, `defaults.rs`); LinkSpeedExtEnabled2 (XDR, which
//!   ibsim does not have): 0 no change, else a subset of the port's
//!   ([`Port::speed_ext2_supported`]: XDR where the topology enables it, else none);
//! - LinkDownDefaultState 0-2; NeighborMTU 1 up to MTUCap; OperationalVLs up to VLCap;
//! - PortState 0 (no change), 1 Down, 3 Armed or 4 Active; PortPhysicalState 0, 2 Polling or
//!   3 Disabled, and only with PortState 0 or 1.
//!
//! New enabled rates (LinkWidthEnabled and the speeds) take effect when the link next trains
//! (after a Down, or when it comes back up); the active rates stay until then.
//!
//! Trap 144, as ibsim's `do_portinfo` sends it: a Set that writes an enabled width or speed as
//! an explicit mask different from the enabled one (not 0, nor the "all supported" codes
//! 0xFF, 15 and 31, nor 30, which ibsim ignores) makes the node's SMA send trap 144, from a
//! CA's port, or from a switch's port 0 when the Set was LID-routed. ibsim takes the LID and
//! SM LID of the port the SMP came in by, and a directed-route SMP comes into a switch by an
//! external port, which has none; so a switch the SM sets by directed route (as OpenSM does
//! in its sweeps) sends no trap 144.
//!
//! Where this differs from ibsim, which the tests do not compare:
//! ibsim looks at the enabled width and speeds only when the Set's PortState is NOP and the
//! port is cabled, recognises only LinkSpeedEnabled 1, 3, 5 and 7 and the FDR/EDR/HDR/NDR
//! combinations of LinkSpeedExtEnabled, and compares with enabled values the "all supported"
//! codes leave alone; here any explicit mask that differs sends the trap.
//!
//! State changes are legal as the IBA link state machine allows them: Armed from Init (the
//! neighbour at least Init), Active from Armed (the neighbour at least Armed), setting the
//! current state is a no-op. Down bounces the link (both ends retrain to Init, as ibsim);
//! Disabled holds the port down until a Set of Polling enables it. A switch's port 0 has no
//! link: it stays Active and reports the 4x SDR active rate ibsim and real switches give it
//! ([`ActiveRates::SWITCH_PORT0`]). Its PortState is taken as OpenSM's `osm_lid_mgr.c`
//! (`lid_mgr_set_physp_pi`) says a switch does: "for switch port 0, the state bits are
//! ignored". Down and Active are taken and change nothing (Active is the state it holds, a
//! no-op as on any Active port); Armed is refused with 0x001C, as Active -> Armed is on any
//! port. (ibsim's `do_portinfo` acts on a PortState only for a port with a remote end and
//! refuses Armed and Active on port 0; OpenSM never sends them: its link manager skips a
//! port already at or beyond the state it sets, and port 0 reads Active.) A physical state
//! other than "no change" is refused, where ibsim stores it and then reports port 0
//! Disabled or Polling while Active, which no port can be.
//!
//! A port whose link is down keeps reporting its Supported and Enabled widths and speeds
//! (extended speeds included); only the Active fields are zero until the link trains again.
//!
//! [`ActiveRates::SWITCH_PORT0`]: crate::fabric::ActiveRates::SWITCH_PORT0
//! [`Port::speed_ext_supported`]: crate::fabric::Port::speed_ext_supported
//! [`Port::speed_ext2_supported`]: crate::fabric::Port::speed_ext2_supported

use mad_wire::attr::port_info::{PhysPortState, PortInfo, PortInfoRepr, PortState};
use mad_wire::status;

use super::defaults::{CAP_MASK2_XDR, LINK_SPEED_SUPPORTED, LINK_WIDTH_SUPPORTED, PortKind};
use super::limits;
use super::link::Cause;
use super::{Data, Effect, Sma, Status, port_kind};
use crate::fabric::model::{NodeId, NodeType, PortId, lid_aligned, lid_range};
use crate::fabric::state::{LinkState, PhysState};
use crate::link::PortChange;

const BAD: Status = status::INVALID_ATTR_VALUE;

/// The port bits of PortInfo's attribute modifier.
const PORT_MASK: u32 = 0xff;

/// The reserved bits of PortInfo's attribute modifier: bits 30:8 (bit 31 is
/// SMSupportsExtendedSpeeds).
const RESERVED_MASK: u32 = 0x7fff_ff00;

/// What the SMP reaching PortInfo may see and cause, decided by its M_Key check and its route.
#[derive(Debug, Clone, Copy)]
pub(super) struct Access {
    /// Report M_Key as 0 (protect level 1, wrong key, Get).
    pub(super) hide_mkey: bool,
    /// The management port a trap 144 for a Set changing an enabled rate comes from, if any
    /// (see the module documentation).
    pub(super) notice_port: Option<PortId>,
}

impl Sma<'_> {
    /// The PortInfo attribute handler.
    pub(super) fn port_info(
        &mut self,
        node: NodeId,
        in_port: u8,
        set: bool,
        attr_mod: u32,
        data: &mut Data,
        access: Access,
    ) -> Status {
        let n = self.fabric.node(node);
        let is_switch = n.kind() == NodeType::Switch;
        // Bits 7:0 name the port; bit 31 is SMSupportsExtendedSpeeds (smpquery -x sets it,
        // OpenSM sets it on its PortInfo Sets); bits 30:8 are reserved.
        if attr_mod & RESERVED_MASK != 0 {
            return BAD;
        }
        let port = attr_mod & PORT_MASK;
        if port > u32::from(n.num_ports()) {
            return BAD;
        }
        let target = if !is_switch && port == 0 {
            in_port
        } else {
            port as u8
        };
        let Some(pid) = self.fabric.port_id(node, target) else {
            return BAD;
        };
        let mut st = status::SUCCESS;
        let mut rereg = false;
        if set {
            let req = PortInfoRepr::parse(&PortInfo::new_checked(&data[..]).expect("64 bytes"))
                .expect("PortInfo parses from 64 bytes");
            if !is_switch && target != in_port {
                st = BAD;
            } else {
                st = self.set_port_info(pid, &req, access.notice_port);
                rereg = st == status::SUCCESS && req.client_reregister && !is_switch;
            }
        }
        let mut repr = self.port_info_repr(pid, in_port, access.hide_mkey);
        // o14-12.2.1: the response to a Set echoes ClientReregister.
        repr.client_reregister = rereg;
        repr.emit(&mut PortInfo::new_checked(&mut data[..]).expect("64 bytes"));
        st
    }

    /// The port of CA `node` other than `in_port` that PortInfo modifier `attr_mod` names,
    /// if it names one that exists: its M_Key guards the SMP too (`mkey.rs`). `None` for a
    /// switch (its port 0's M_Key guards all its ports), for modifier 0 or `in_port`, and
    /// for a modifier the handler refuses with 0x001C.
    pub(super) fn named_other_port(
        &self,
        node: NodeId,
        in_port: u8,
        attr_mod: u32,
    ) -> Option<PortId> {
        if self.fabric.node(node).kind() == NodeType::Switch || attr_mod & RESERVED_MASK != 0 {
            return None;
        }
        let n = u8::try_from(attr_mod & PORT_MASK).ok()?;
        if n == 0 || n == in_port {
            return None;
        }
        self.fabric.port_id(node, n)
    }

    /// The PortInfo of `port` as its SMA reports it to an SMP that arrived on `in_port`.
    pub fn port_info_repr(&self, port: PortId, in_port: u8, hide_mkey: bool) -> PortInfoRepr {
        let p = self.fabric.port(port);
        let s = p.state;
        let kind = port_kind(self.fabric, port);
        let d = kind.defaults();
        let x = self.extra(port);
        let mgmt = kind != PortKind::SwitchExternal;
        // The extended speed fields: ibsim shows them only for a port whose link trained to an
        // extended speed (`ibsim/sim_net.c` `update_portinfo` tests the active `linkspeedext`),
        // and we follow it while the link is up. When the link goes down ibsim keeps them (it
        // never clears `linkspeedext`), as a real port keeps its Supported and Enabled fields
        // whatever its state; so a port whose link is not up shows them when it enables an
        // extended speed, with no speed active. Either way a port showing them supports
        // extended speeds: what it enables (and so what it trains to) stays inside what it
        // supports.
        let ext = if s.phys_state == PhysState::LinkUp {
            s.active.speed_ext != 0
        } else {
            p.enabled.speed_ext != 0
        };
        let pick = |v: u64| if mgmt { v } else { 0 };
        // XDR, beyond ibsim: a port whose topology enables it reports its LinkSpeedExt*2
        // fields whatever its state (Active2 is 0 while the link is down, as the other Active
        // fields are), and CapabilityMask2 says they are valid; a switch says so on port 0,
        // whose masks a reader takes for all its ports (libibnetdisc, ibnetdiscover). A port
        // without XDR reports none of it, as ibsim's ports do.
        let ext2 = p.speed_ext2_supported() != 0;
        let xdr_caps = match kind {
            PortKind::SwitchPort0 => self
                .fabric
                .ports_of(p.node())
                .any(|q| self.fabric.port(q).speed_ext2_supported() != 0),
            _ => ext2,
        };
        PortInfoRepr {
            m_key: if hide_mkey { 0 } else { pick(s.m_key) },
            gid_prefix: pick(s.subnet_prefix),
            lid: pick(u64::from(p.lid())) as u16,
            master_sm_lid: pick(u64::from(s.sm_lid)) as u16,
            capability_mask: s.capability_mask,
            diag_code: 0,
            m_key_lease_period: pick(u64::from(s.m_key_lease_period)) as u16,
            local_port_num: in_port,
            link_width_enabled: p.enabled.width,
            link_width_supported: LINK_WIDTH_SUPPORTED,
            link_width_active: s.active.width,
            link_speed_supported: LINK_SPEED_SUPPORTED,
            port_state: PortState::from(s.link_state as u8),
            port_physical_state: PhysPortState::from(s.phys_state as u8),
            link_down_default_state: x.link_down_default,
            m_key_protect_bits: pick(u64::from(s.m_key_protect)) as u8,
            lmc: pick(u64::from(p.lmc())) as u8,
            link_speed_active: s.active.speed,
            link_speed_enabled: p.enabled.speed,
            neighbor_mtu: s.neighbor_mtu,
            master_sm_sl: pick(u64::from(s.sm_sl)) as u8,
            vl_cap: d.vl_cap,
            init_type: 0,
            vl_high_limit: x.vl_high_limit,
            vl_arbitration_high_cap: d.vl_arb_high_cap,
            vl_arbitration_low_cap: d.vl_arb_low_cap,
            init_type_reply: 0,
            mtu_cap: d.mtu_cap,
            vl_stall_count: x.vl_stall_count,
            hoq_life: s.hoq_life,
            operational_vls: s.op_vls,
            partition_enforcement_inbound: x.partition_enforcement_inbound,
            partition_enforcement_outbound: x.partition_enforcement_outbound,
            filter_raw_inbound: x.filter_raw_inbound,
            filter_raw_outbound: x.filter_raw_outbound,
            m_key_violations: x.m_key_violations,
            p_key_violations: x.p_key_violations,
            q_key_violations: x.q_key_violations,
            guid_cap: d.guid_cap,
            client_reregister: false,
            multicast_pkey_trap_suppression: 0,
            subnet_timeout: x.subnet_timeout,
            resp_time_value: d.resp_time_value,
            local_phy_errors: x.local_phy_errors,
            overrun_errors: x.overrun_errors,
            max_credit_hint: 0,
            link_round_trip_latency: 0,
            capability_mask2: d.capability_mask2 | if xdr_caps { CAP_MASK2_XDR } else { 0 },
            link_speed_ext_active: if ext { s.active.speed_ext } else { 0 },
            link_speed_ext_supported: if ext { p.speed_ext_supported() } else { 0 },
            link_speed_ext_enabled: if ext { p.enabled.speed_ext } else { 0 },
            link_speed_ext_active2: if ext2 { s.active.speed_ext2 } else { 0 },
            link_speed_ext_supported2: if ext2 { p.speed_ext2_supported() } else { 0 },
            link_speed_ext_enabled2: if ext2 { p.enabled.speed_ext2 } else { 0 },
        }
    }

    /// Whether `lid`/`lmc` is a range of unicast LIDs (whoever else holds them).
    fn lid_range_ok(lid: u16, lmc: u8) -> bool {
        lid != 0 && lid_range(lid, lmc).is_some()
    }

    /// Whether `port` may move to `target` (Armed or Active) now.
    fn transition_ok(&self, port: PortId, target: LinkState) -> bool {
        let cur = self.fabric.port(port).state.link_state;
        if cur == target {
            return true;
        }
        let (from, peer_min) = match target {
            LinkState::Armed => (LinkState::Init, LinkState::Init),
            LinkState::Active => (LinkState::Armed, LinkState::Armed),
            _ => return false,
        };
        if cur != from {
            return false;
        }
        self.fabric
            .peer(port)
            .is_none_or(|q| self.fabric.port(q).state.link_state as u8 >= peer_min as u8)
    }

    /// Checks a PortInfo Set whole, then applies it; see the module documentation. A change
    /// of an enabled rate records trap 144 from `notice_port`.
    fn set_port_info(
        &mut self,
        pid: PortId,
        req: &PortInfoRepr,
        notice_port: Option<PortId>,
    ) -> Status {
        let kind = port_kind(self.fabric, pid);
        let d = *kind.defaults();
        let mgmt = kind != PortKind::SwitchExternal;
        if mgmt
            && (!Self::lid_range_ok(req.lid, req.lmc)
                || !limits::lmc_ok(self.fabric.lmc_capable(pid), req.lmc)
                || !lid_aligned(req.lid, req.lmc)
                || !limits::sm_lid_ok(req.master_sm_lid))
        {
            return BAD;
        }
        let width = match req.link_width_enabled {
            0 => None,
            0xFF => Some(LINK_WIDTH_SUPPORTED),
            w if limits::rate_mask_ok(w, LINK_WIDTH_SUPPORTED) => Some(w),
            _ => return BAD,
        };
        let speed = match req.link_speed_enabled {
            0 => None,
            0xF => Some(LINK_SPEED_SUPPORTED),
            s if limits::rate_mask_ok(s, LINK_SPEED_SUPPORTED) => Some(s),
            _ => return BAD,
        };
        let ext_supported = self.fabric.port(pid).speed_ext_supported();
        let speed_ext = match req.link_speed_ext_enabled {
            0 => None,
            0x1E => Some(0),
            0x1F => Some(ext_supported),
            e if limits::rate_mask_ok(e, ext_supported) => Some(e),
            _ => return BAD,
        };
        // LinkSpeedExtEnabled2 (3 bits, libibmad `fields.c`): 0 no change, as for
        // LinkSpeedExtEnabled; else a subset of the port's LinkSpeedExtSupported2 (none on a
        // port without XDR, where any other value is refused).
        let speed_ext2 = match req.link_speed_ext_enabled2 {
            0 => None,
            e if limits::rate_mask_ok(e, self.fabric.port(pid).speed_ext2_supported()) => Some(e),
            _ => return BAD,
        };
        let link_down_default = match req.link_down_default_state {
            0 => None,
            v if limits::link_down_default_ok(v) => Some(v),
            _ => return BAD,
        };
        if !limits::neighbor_mtu_ok(&d, req.neighbor_mtu) {
            return BAD;
        }
        let op_vls = match req.operational_vls {
            0 => None,
            v if limits::op_vls_ok(&d, v) => Some(v),
            _ => return BAD,
        };
        let state = u8::from(req.port_state);
        let phys = u8::from(req.port_physical_state);
        if !matches!(state, 0 | 1 | 3 | 4) || !matches!(phys, 0 | 2 | 3) {
            return BAD;
        }
        if phys != 0 && state > 1 {
            return BAD;
        }
        if kind == PortKind::SwitchPort0 {
            // Port 0 has no link and is always Active ("for switch port 0, the state bits are
            // ignored": OpenSM `osm_lid_mgr.c` `lid_mgr_set_physp_pi`): Down and Active change
            // nothing, Active being the state it holds, as on any Active port; Armed is
            // refused, as Active -> Armed is on any port. A physical state is refused (see the
            // module documentation).
            if state == 3 || phys != 0 {
                return BAD;
            }
        } else if (state == 3 && !self.transition_ok(pid, LinkState::Armed))
            || (state == 4 && !self.transition_ok(pid, LinkState::Active))
        {
            return BAD;
        }

        // ibsim's trap 144 rule (`sim_mad.c` `do_portinfo`): a width or speed written as an
        // explicit mask that differs from the enabled one. ibsim does not act on the "all
        // supported" codes (0xFF, 15, 31) nor on "disable" (30), so they send no trap here
        // either, though they change the enabled rates: OpenSM writes them in its sweeps
        // (`force_link_width`, `force_link_speed`), and under ibsim it hears no trap for them.
        let old = self.fabric.port(pid).enabled;
        let explicit_change = |written: u8, specials: &[u8], current: u8| {
            written != 0 && !specials.contains(&written) && written != current
        };
        let local_change = explicit_change(req.link_width_enabled, &[0xFF], old.width)
            || explicit_change(req.link_speed_enabled, &[0xF], old.speed)
            || explicit_change(req.link_speed_ext_enabled, &[0x1E, 0x1F], old.speed_ext)
            || explicit_change(req.link_speed_ext_enabled2, &[], old.speed_ext2);

        // Everything checked: apply.
        if mgmt {
            let before = (self.fabric.port(pid).lid(), self.fabric.port(pid).lmc());
            {
                let s = &mut self.fabric.port_mut(pid).state;
                s.m_key = req.m_key;
                s.subnet_prefix = req.gid_prefix;
                s.m_key_lease_period = req.m_key_lease_period;
                s.m_key_protect = req.m_key_protect_bits;
                s.sm_lid = req.master_sm_lid;
                s.sm_sl = req.master_sm_sl;
            }
            if before != (req.lid, req.lmc) && self.fabric.assign_lid(pid, req.lid, req.lmc).is_ok()
            {
                self.effect(Effect::Port(pid, PortChange::Lid));
            }
            self.extra_mut(pid).subnet_timeout = req.subnet_timeout;
            if req.client_reregister && kind == PortKind::Ca {
                self.effect(Effect::Port(pid, PortChange::ClientReregister));
            }
        }
        {
            let p = self.fabric.port_mut(pid);
            if let Some(w) = width {
                p.enabled.width = w;
            }
            if let Some(s) = speed {
                p.enabled.speed = s;
            }
            if let Some(e) = speed_ext {
                p.enabled.speed_ext = e;
            }
            if let Some(e) = speed_ext2 {
                p.enabled.speed_ext2 = e;
            }
            p.state.neighbor_mtu = req.neighbor_mtu;
            p.state.hoq_life = req.hoq_life;
            if let Some(v) = op_vls {
                p.state.op_vls = v;
            }
        }
        {
            let x = self.extra_mut(pid);
            if let Some(v) = link_down_default {
                x.link_down_default = v;
            }
            x.vl_high_limit = req.vl_high_limit;
            x.local_phy_errors = req.local_phy_errors;
            x.overrun_errors = req.overrun_errors;
            if kind == PortKind::SwitchExternal {
                x.vl_stall_count = req.vl_stall_count;
                x.partition_enforcement_inbound = req.partition_enforcement_inbound;
                x.partition_enforcement_outbound = req.partition_enforcement_outbound;
                x.filter_raw_inbound = req.filter_raw_inbound;
                x.filter_raw_outbound = req.filter_raw_outbound;
            }
            // Writing 0 to a violation counter resets it (as `qib_mad.c` does).
            if req.m_key_violations == 0 {
                x.m_key_violations = 0;
            }
            if req.p_key_violations == 0 {
                x.p_key_violations = 0;
            }
            if req.q_key_violations == 0 {
                x.q_key_violations = 0;
            }
        }
        if kind != PortKind::SwitchPort0 {
            self.apply_state(pid, state, phys);
        }
        if let Some(port) = notice_port.filter(|_| local_change) {
            self.effect(Effect::LocalChanges(port));
        }
        status::SUCCESS
    }

    /// The state change of a checked PortInfo Set: a SubnSet, so the switch being set does
    /// not set its own PortStateChange (see `link.rs`).
    fn apply_state(&mut self, pid: PortId, state: u8, phys: u8) {
        let cur = self.fabric.port(pid).state;
        let cause = Cause::SubnSet(self.fabric.port(pid).node());
        match (state, phys) {
            (_, 3) => {
                self.link_down_by(pid, true, cause);
            }
            (1 | 0, 2) => {
                if cur.phys_state == PhysState::Disabled {
                    self.set_state(pid, LinkState::Down, PhysState::Polling, cause);
                }
                self.retrain_by(pid, cause);
            }
            (1, _) => self.retrain_by(pid, cause),
            (3, _) if cur.link_state != LinkState::Armed => {
                self.set_state(pid, LinkState::Armed, PhysState::LinkUp, cause);
            }
            (4, _) if cur.link_state != LinkState::Active => {
                self.set_state(pid, LinkState::Active, PhysState::LinkUp, cause);
            }
            _ => {}
        }
    }
}

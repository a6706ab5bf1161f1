//! What a dead link's port answers for its own SMA: on hardware the SMA is in the HCA's
//! firmware, so MAD_IFC keeps answering when the cable is pulled, with the port Down. A
//! client's SMA is in the server; once the server is gone, the link answers local Gets of the
//! attributes the host reads of its own port (the kernel's `mlx5_query_mad_ifc_*`, umad's
//! sysfs view) from the last answers the server gave to each (attribute, modifier), with
//! PortInfo's PortState Down and PortPhysicalState Polling.
//!
//! Kept: NodeInfo, NodeDescription, PortInfo, P_KeyTable, GUIDInfo, from every successful
//! answer (to a Get, or to a Set, whose answer holds the new value). A dead link answers only
//! Gets of those, of a modifier answered before (PortInfo of its own port always: from the
//! port's last snapshot if the server never answered one); anything else gets no answer,
//! which MAD_IFC reports as an error. M_Key protection is judged by the kept PortInfo of the
//! port's own port: a wrong key with protect bits 2 or 3 gets no answer, with 1 PortInfo's
//! M_Key reads 0 (IBA 14.2.4; no lease runs on a dead link).

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use mad_wire::attr::port_info::{PhysPortState, PortInfo, PortState};
use mad_wire::attr_id::sm;
use mad_wire::header::Mad;
use mad_wire::smp::Smp;
use mad_wire::{class, method, status};

use crate::link::PortSnapshot;

/// The SMP data area.
const DATA: std::ops::Range<usize> = 64..128;

/// Attributes a dead link still answers.
const KEPT: [u16; 5] = [
    sm::NODE_INFO,
    sm::NODE_DESCRIPTION,
    sm::PORT_INFO,
    sm::PKEY_TABLE,
    sm::GUID_INFO,
];

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The last answers of the port's own SMA, by (attribute, modifier).
#[derive(Debug)]
pub(crate) struct LastAnswers {
    /// The node's port this link is (what PortInfo modifier 0 names).
    node_port: u8,
    data: Mutex<HashMap<(u16, u32), [u8; 64]>>,
}

/// An SMP's class, method, attribute and modifier, if `mad` is an SMP.
fn smp_fields(mad: &[u8; 256]) -> Option<(u8, u16, u32)> {
    let h = Mad::new_checked(&mad[..]).ok()?;
    if h.base_version() != class::BASE_VERSION
        || !matches!(
            h.mgmt_class(),
            class::SUBN_LID_ROUTED | class::SUBN_DIRECTED_ROUTE
        )
    {
        return None;
    }
    Some((h.method(), h.attr_id(), h.attr_mod()))
}

/// A LID-routed SubnGet of `attr` with `modifier` and M_Key 0, as the host asks its own
/// port's SMA.
pub(crate) fn local_get(attr: u16, modifier: u32, tid: u64) -> [u8; 256] {
    let mut mad = [0u8; 256];
    let mut h = Mad::new_checked(&mut mad[..]).expect("256 bytes hold a MAD header");
    h.set_base_version(class::BASE_VERSION);
    h.set_mgmt_class(class::SUBN_LID_ROUTED);
    h.set_class_version(class::SUBN_CLASS_VERSION);
    h.set_method(method::GET);
    h.set_tid(tid);
    h.set_attr_id(attr);
    h.set_attr_mod(modifier);
    mad
}

impl LastAnswers {
    /// Nothing kept yet, for the link of node port `node_port`.
    pub(crate) fn new(node_port: u8) -> LastAnswers {
        LastAnswers {
            node_port,
            data: Mutex::new(HashMap::new()),
        }
    }

    /// The key an attribute is kept under: the modifier means nothing to NodeInfo and
    /// NodeDescription, and PortInfo's 0 is the port asked through.
    fn key(&self, attr: u16, modifier: u32) -> (u16, u32) {
        match attr {
            sm::NODE_INFO | sm::NODE_DESCRIPTION => (attr, 0),
            sm::PORT_INFO if modifier == 0 => (attr, u32::from(self.node_port)),
            _ => (attr, modifier),
        }
    }

    /// Keeps what `answer`, the live SMA's answer to `request`, says, if it is a successful
    /// answer of an attribute kept.
    pub(crate) fn keep(&self, request: &[u8; 256], answer: &[u8; 256]) {
        let Some((m, attr, modifier)) = smp_fields(request) else {
            return;
        };
        if (m != method::GET && m != method::SET) || !KEPT.contains(&attr) {
            return;
        }
        let Ok(h) = Mad::new_checked(&answer[..]) else {
            return;
        };
        if h.method() != method::GET_RESP
            || h.attr_id() != attr
            || h.status() & status::DR_STATUS_MASK != status::SUCCESS
        {
            return;
        }
        let mut d = [0u8; 64];
        d.copy_from_slice(&answer[DATA]);
        lock(&self.data).insert(self.key(attr, modifier), d);
    }

    /// PortInfo of the link's own port as `snap` tells it, for a port no PortInfo was kept
    /// of: the fields a snapshot has, the rest 0.
    fn port_info_of(&self, snap: &PortSnapshot) -> [u8; 64] {
        let mut d = [0u8; 64];
        let mut pi = PortInfo::new_checked(&mut d[..]).expect("64 bytes hold PortInfo");
        pi.set_gid_prefix(snap.subnet_prefix);
        pi.set_lid(snap.lid);
        pi.set_master_sm_lid(snap.sm_lid);
        pi.set_capability_mask(snap.capability_mask);
        pi.set_local_port_num(self.node_port);
        pi.set_lmc(snap.lmc);
        pi.set_master_sm_sl(snap.sm_sl);
        d
    }

    /// What the port's own SMA answers `request` with while the link is dead (`None`: no
    /// answer); `snap` is the port's last snapshot.
    pub(crate) fn answer(
        &self,
        request: &[u8; 256],
        ignore_mkey: bool,
        snap: &PortSnapshot,
    ) -> Option<[u8; 256]> {
        let (m, attr, modifier) = smp_fields(request)?;
        if m != method::GET || !KEPT.contains(&attr) {
            return None;
        }
        let key = self.key(attr, modifier);
        let own = (sm::PORT_INFO, u32::from(self.node_port));
        let (data, own_info) = {
            let kept = lock(&self.data);
            (kept.get(&key).copied(), kept.get(&own).copied())
        };
        let own_info = own_info.unwrap_or_else(|| self.port_info_of(snap));
        let mut hide_key = false;
        if !ignore_mkey {
            let pi = PortInfo::new_checked(&own_info[..]).ok()?;
            let theirs = Smp::new_checked(&request[..]).ok()?.m_key();
            if pi.m_key() != 0 && pi.m_key() != theirs {
                match pi.m_key_protect_bits() {
                    0 => {}
                    1 => hide_key = true,
                    _ => return None,
                }
            }
        }
        let mut data = match data {
            Some(d) => d,
            None if key == own => own_info,
            None => return None,
        };
        if attr == sm::PORT_INFO {
            let mut pi = PortInfo::new_checked(&mut data[..]).ok()?;
            pi.set_port_state(PortState::Down);
            pi.set_port_physical_state(PhysPortState::Polling);
            if hide_key {
                pi.set_m_key(0);
            }
        }
        let mut out = *request;
        out[DATA].copy_from_slice(&data);
        Mad::new_checked(&mut out[..])
            .ok()?
            .make_response(status::SUCCESS)
            .ok()?;
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A LID-routed Get of `attr` with `modifier` and M_Key `key`.
    fn get(attr: u16, modifier: u32, key: u64) -> [u8; 256] {
        let mut mad = local_get(attr, modifier, 0x77);
        // SMP M_Key: bytes 24..32.
        mad[24..32].copy_from_slice(&key.to_be_bytes());
        mad
    }

    fn answer_with(request: &[u8; 256], data: [u8; 64]) -> [u8; 256] {
        let mut a = *request;
        a[DATA].copy_from_slice(&data);
        Mad::new_checked(&mut a[..])
            .unwrap()
            .make_response(0)
            .unwrap();
        a
    }

    fn port_info(key: u64, protect: u8) -> [u8; 64] {
        let mut d = [0u8; 64];
        let mut pi = PortInfo::new_checked(&mut d[..]).unwrap();
        pi.set_m_key(key);
        pi.set_m_key_protect_bits(protect);
        pi.set_lid(7);
        pi.set_port_state(PortState::Active);
        pi.set_port_physical_state(PhysPortState::LinkUp);
        d
    }

    #[test]
    fn port_info_is_the_last_answer_with_the_port_down() {
        let kept = LastAnswers::new(1);
        let req = get(sm::PORT_INFO, 0, 0);
        kept.keep(&req, &answer_with(&req, port_info(0, 0)));
        // Modifier 1 is the port asked through (0) on node port 1.
        let a = kept
            .answer(&get(sm::PORT_INFO, 1, 0), false, &PortSnapshot::default())
            .unwrap();
        let h = Mad::new_checked(&a[..]).unwrap();
        assert_eq!(
            (h.method(), h.status(), h.tid()),
            (method::GET_RESP, 0, 0x77)
        );
        let pi = PortInfo::new_checked(&a[DATA]).unwrap();
        assert_eq!(pi.lid(), 7);
        assert_eq!(pi.port_state(), PortState::Down);
        assert_eq!(pi.port_physical_state(), PhysPortState::Polling);
        // Not kept: no answer. A Set: no answer.
        assert!(
            kept.answer(&get(sm::PKEY_TABLE, 0, 0), false, &PortSnapshot::default())
                .is_none()
        );
        let mut set = get(sm::PORT_INFO, 1, 0);
        set[3] = method::SET;
        assert!(kept.answer(&set, false, &PortSnapshot::default()).is_none());
    }

    #[test]
    fn a_wrong_m_key_is_judged_by_the_kept_protect_bits() {
        for (protect, answered, reads) in [(1, true, 0), (2, false, 0)] {
            let kept = LastAnswers::new(1);
            let req = get(sm::PORT_INFO, 1, 0x5);
            kept.keep(&req, &answer_with(&req, port_info(0x5, protect)));
            let wrong = get(sm::PORT_INFO, 1, 0x6);
            let a = kept.answer(&wrong, false, &PortSnapshot::default());
            assert_eq!(a.is_some(), answered, "protect {protect}");
            if let Some(a) = a {
                assert_eq!(PortInfo::new_checked(&a[DATA]).unwrap().m_key(), reads);
            }
            // The host's own MAD_IFC may ignore the M_Key.
            let a = kept.answer(&wrong, true, &PortSnapshot::default()).unwrap();
            assert_eq!(PortInfo::new_checked(&a[DATA]).unwrap().m_key(), 0x5);
        }
    }

    #[test]
    fn without_a_kept_port_info_the_snapshot_tells_it() {
        let kept = LastAnswers::new(2);
        let snap = PortSnapshot {
            lid: 9,
            sm_lid: 1,
            subnet_prefix: 0xfe80_0000_0000_0000,
            ..PortSnapshot::default()
        };
        let a = kept
            .answer(&get(sm::PORT_INFO, 0, 0), false, &snap)
            .unwrap();
        let pi = PortInfo::new_checked(&a[DATA]).unwrap();
        assert_eq!((pi.lid(), pi.master_sm_lid()), (9, 1));
        assert_eq!(pi.gid_prefix(), 0xfe80_0000_0000_0000);
        assert_eq!(pi.port_state(), PortState::Down);
        // Another port of the node was never answered.
        assert!(
            kept.answer(&get(sm::PORT_INFO, 1, 0), false, &snap)
                .is_none()
        );
    }
}

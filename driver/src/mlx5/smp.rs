//! The few subnet management attributes the driver reads from the port's own SMA through
//! MAD_IFC, as `mlx5_query_mad_ifc_*` does: NodeInfo (GUIDs), PortInfo (state, LIDs,
//! capability mask) and P_KeyTable (to turn a QP1 receive's P_Key into its index). Layouts
//! from IBA 14.2.5 (reference `mad-stack.md` §2.2, §2.6, §2.7).

use firmware_cmds::mlx5::ops::mad_ifc::MAD_LEN;

/// NodeInfo attribute.
pub(crate) const ATTR_NODE_INFO: u16 = 0x0011;
/// PortInfo attribute (modifier: port number).
pub(crate) const ATTR_PORT_INFO: u16 = 0x0015;
/// P_KeyTable attribute (modifier: block of 32 P_Keys).
pub(crate) const ATTR_PKEY_TABLE: u16 = 0x0016;
/// P_Keys per P_KeyTable block.
pub(crate) const PKEYS_PER_BLOCK: usize = 32;
/// The default P_Key, full member (`IB_DEFAULT_PKEY_FULL`).
pub(crate) const DEFAULT_PKEY: u16 = 0xffff;

/// Offset of the SMP data in a LID-routed SMP.
const SMP_DATA: usize = 64;
/// SMP data length.
const SMP_DATA_LEN: usize = 64;
const CLASS_SUBN_LID_ROUTED: u8 = 0x01;
const METHOD_GET: u8 = 0x01;
const METHOD_GET_RESP: u8 = 0x81;

/// A LID-routed SubnGet(`attr`, `modifier`) SMP.
pub(crate) fn subn_get(attr: u16, modifier: u32, tid: u64) -> [u8; MAD_LEN] {
    let mut m = [0u8; MAD_LEN];
    m[0] = 1; // BaseVersion
    m[1] = CLASS_SUBN_LID_ROUTED;
    m[2] = 1; // ClassVersion
    m[3] = METHOD_GET;
    m[8..16].copy_from_slice(&tid.to_be_bytes());
    m[16..18].copy_from_slice(&attr.to_be_bytes());
    m[20..24].copy_from_slice(&modifier.to_be_bytes());
    m
}

/// The SMP data of the answer to [`subn_get`]`(attr, modifier, tid)`, after checking that it
/// is a SubnGetResp of that attribute, modifier and TID (an answer for another P_Key block
/// or port would otherwise be stored as this one's) and that its status is 0.
pub(crate) fn response_data(
    resp: &[u8; MAD_LEN],
    attr: u16,
    modifier: u32,
    tid: u64,
) -> Result<&[u8], String> {
    if resp[1] != CLASS_SUBN_LID_ROUTED || resp[3] != METHOD_GET_RESP {
        return Err(format!(
            "not a SubnGetResp (class {:#04x}, method {:#04x})",
            resp[1], resp[3]
        ));
    }
    let got = u16::from_be_bytes([resp[16], resp[17]]);
    if got != attr {
        return Err(format!(
            "answer for attribute {got:#06x}, asked {attr:#06x}"
        ));
    }
    let got_tid = u64::from_be_bytes(resp[8..16].try_into().unwrap_or_default());
    if got_tid != tid {
        return Err(format!("answer with TID {got_tid:#018x}, sent {tid:#018x}"));
    }
    let got_mod = u32::from_be_bytes([resp[20], resp[21], resp[22], resp[23]]);
    if got_mod != modifier {
        return Err(format!(
            "answer for attribute modifier {got_mod:#x}, asked {modifier:#x}"
        ));
    }
    let status = u16::from_be_bytes([resp[4], resp[5]]) & 0x7fff;
    if status != 0 {
        return Err(format!("MAD status {status:#06x}"));
    }
    Ok(&resp[SMP_DATA..SMP_DATA + SMP_DATA_LEN])
}

fn be16(d: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([d[at], d[at + 1]])
}

fn be32(d: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([d[at], d[at + 1], d[at + 2], d[at + 3]])
}

fn be64(d: &[u8], at: usize) -> u64 {
    (u64::from(be32(d, at)) << 32) | u64::from(be32(d, at + 4))
}

/// The NodeInfo fields the driver uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct NodeInfo {
    pub(crate) num_ports: u8,
    pub(crate) node_guid: u64,
    pub(crate) port_guid: u64,
}

/// Parse NodeInfo from SMP data.
pub(crate) fn node_info(d: &[u8]) -> NodeInfo {
    NodeInfo {
        num_ports: d[3],
        node_guid: be64(d, 12),
        port_guid: be64(d, 20),
    }
}

/// The PortInfo fields the driver uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PortInfo {
    pub(crate) gid_prefix: u64,
    pub(crate) lid: u16,
    pub(crate) sm_lid: u16,
    pub(crate) capability_mask: u32,
    pub(crate) port_state: u8,
    pub(crate) phys_state: u8,
    pub(crate) lmc: u8,
    pub(crate) sm_sl: u8,
}

/// Parse PortInfo from SMP data.
pub(crate) fn port_info(d: &[u8]) -> PortInfo {
    PortInfo {
        gid_prefix: be64(d, 8),
        lid: be16(d, 16),
        sm_lid: be16(d, 18),
        capability_mask: be32(d, 20),
        port_state: d[32] & 0xf,
        phys_state: d[33] >> 4,
        lmc: d[34] & 0x7,
        sm_sl: d[36] & 0xf,
    }
}

/// Parse one P_KeyTable block from SMP data.
pub(crate) fn pkey_block(d: &[u8]) -> Vec<u16> {
    (0..PKEYS_PER_BLOCK).map(|i| be16(d, 2 * i)).collect()
}

/// Which limited-member match wins when `table` holds no full member of the partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LimitedMatch {
    /// The first (`ib_find_pkey`, core/device.c).
    First,
    /// The last (`ib_find_cached_pkey`, core/cache.c).
    Last,
}

/// The kernel's P_Key search: the first entry whose low 15 bits match `pkey`'s and that is
/// a full member (bit 15) wins, whatever `pkey`'s own membership bit; without one, a
/// limited-member match, the first or the last as `limited` says; `None` when nothing
/// matches. Unlike the kernel, the invalid P_Key (low 15 bits 0, IBA 10.9.1.2) matches
/// nothing, not the table's empty entries.
fn search_pkey(table: &[u16], pkey: u16, limited: LimitedMatch) -> Option<u16> {
    if pkey & 0x7fff == 0 {
        return None;
    }
    let mut partial = None;
    for (i, &p) in table.iter().enumerate() {
        if p & 0x7fff != pkey & 0x7fff {
            continue;
        }
        if p & 0x8000 != 0 {
            return u16::try_from(i).ok();
        }
        if limited == LimitedMatch::Last || partial.is_none() {
            partial = Some(i);
        }
    }
    partial.and_then(|i| u16::try_from(i).ok())
}

/// The index of `pkey` in `table` as `ib_find_cached_pkey` finds it (what the kernel's mlx5
/// reports as a QP1 receive's P_Key index): the first full member of the partition, else
/// the last limited member, else `None`.
pub(crate) fn find_cached_pkey(table: &[u16], pkey: u16) -> Option<u16> {
    search_pkey(table, pkey, LimitedMatch::Last)
}

/// The index of `pkey` in `table` as `ib_find_pkey` finds it (what `ib_mad_port_start` puts
/// in the special QPs' contexts for the default P_Key): the first full member of the
/// partition, else the first limited member, else `None`.
pub(crate) fn find_pkey(table: &[u16], pkey: u16) -> Option<u16> {
    search_pkey(table, pkey, LimitedMatch::First)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subn_get_header_is_a_lid_routed_get() {
        let m = subn_get(ATTR_PORT_INFO, 1, 0x1122_3344_5566_7788);
        assert_eq!(&m[0..4], &[1, 0x01, 1, 0x01]);
        assert_eq!(&m[8..16], &0x1122_3344_5566_7788u64.to_be_bytes());
        assert_eq!(&m[16..18], &[0x00, 0x15]);
        assert_eq!(&m[20..24], &[0, 0, 0, 1]);
    }

    #[test]
    fn port_info_fields_come_from_their_ib_offsets() {
        let mut d = [0u8; 64];
        d[8..16].copy_from_slice(&0xfe80_0000_0000_0000u64.to_be_bytes());
        d[16..18].copy_from_slice(&0x0012u16.to_be_bytes());
        d[18..20].copy_from_slice(&0x0001u16.to_be_bytes());
        d[20..24].copy_from_slice(&0x0251_0a6au32.to_be_bytes());
        d[32] = 0x24; // speed supported 2, state ACTIVE (4)
        d[33] = 0x52; // phys LinkUp (5), default down state 2
        d[34] = 0x02; // LMC 2
        d[36] = 0x43; // neighbour MTU 4, SM SL 3
        let p = port_info(&d);
        assert_eq!(p.gid_prefix, 0xfe80_0000_0000_0000);
        assert_eq!((p.lid, p.sm_lid), (0x12, 1));
        assert_eq!(p.capability_mask, 0x0251_0a6a);
        assert_eq!((p.port_state, p.phys_state, p.lmc, p.sm_sl), (4, 5, 2, 3));
    }

    #[test]
    fn a_response_is_checked_before_its_data_is_used() {
        let mut r = subn_get(ATTR_NODE_INFO, 0, 1);
        assert!(
            response_data(&r, ATTR_NODE_INFO, 0, 1).is_err(),
            "a Get is not a GetResp"
        );
        r[3] = METHOD_GET_RESP;
        assert!(
            response_data(&r, ATTR_PORT_INFO, 0, 1).is_err(),
            "another attribute"
        );
        let mut other_tid = r;
        other_tid[15] = 2;
        assert!(
            response_data(&other_tid, ATTR_NODE_INFO, 0, 1)
                .unwrap_err()
                .contains("TID")
        );
        assert!(
            response_data(&r, ATTR_NODE_INFO, 1, 1)
                .unwrap_err()
                .contains("modifier"),
            "another modifier"
        );
        r[5] = 0x0c;
        assert!(
            response_data(&r, ATTR_NODE_INFO, 0, 1)
                .unwrap_err()
                .contains("0x000c")
        );
        r[5] = 0;
        r[64 + 3] = 2;
        r[64 + 12..64 + 20].copy_from_slice(&0x0002_c903_0000_1234u64.to_be_bytes());
        let n = node_info(response_data(&r, ATTR_NODE_INFO, 0, 1).unwrap());
        assert_eq!(n.num_ports, 2);
        assert_eq!(n.node_guid, 0x0002_c903_0000_1234);
    }

    #[test]
    fn a_full_member_wins_over_an_earlier_limited_one() {
        // core/cache.c and core/device.c: the first entry with the same low 15 bits and
        // the full-member bit wins, whether the P_Key asked for is full or limited.
        assert_eq!(find_cached_pkey(&[0x7fff, 0xffff], 0x7fff), Some(1));
        assert_eq!(find_cached_pkey(&[0x7fff, 0xffff], 0xffff), Some(1));
        assert_eq!(find_pkey(&[0x7fff, 0xffff], 0xffff), Some(1));
        assert_eq!(find_pkey(&[0x7fff, 0xffff], 0x7fff), Some(1));
        assert_eq!(
            find_cached_pkey(&[0x8005, 0x8005], 0x0005),
            Some(0),
            "the first"
        );
    }

    #[test]
    fn without_a_full_member_the_cache_takes_the_last_limited_match_and_find_pkey_the_first() {
        // ib_find_cached_pkey overwrites partial_ix on every limited match; ib_find_pkey
        // keeps the first (`if (partial_ix < 0)`).
        assert_eq!(find_cached_pkey(&[0x0005, 0x0005], 0x8005), Some(1));
        assert_eq!(find_pkey(&[0x0005, 0x0005], 0x8005), Some(0));
        assert_eq!(
            find_cached_pkey(&[0x0001, 0x0005, 0x0002, 0x0005, 0], 0x0005),
            Some(3)
        );
        assert_eq!(
            find_pkey(&[0x0001, 0x0005, 0x0002, 0x0005, 0], 0x0005),
            Some(1)
        );
    }

    #[test]
    fn no_match_and_the_invalid_pkey_find_nothing() {
        let t = [0xffff, 0x8001, 0x0002, 0];
        assert_eq!(find_cached_pkey(&t, 0x1234), None);
        assert_eq!(find_pkey(&t, 0x1234), None);
        assert_eq!(
            find_cached_pkey(&t, 0x8002),
            Some(2),
            "limited only: still found"
        );
        assert_eq!(find_cached_pkey(&t, 0), None, "not the empty entry");
        assert_eq!(find_pkey(&t, 0x8000), None);
        assert_eq!(find_cached_pkey(&[], 0xffff), None);
    }
}

//! The DataDetails of a generic Notice (54 bytes from Notice byte 10), read and written per
//! trap at the offsets of OpenSM `ib_mad_notice_attr_t` `data_details` (the kernel's
//! `struct ib_mad_notice_attr` has the same for the traps it knows). Offsets below are within
//! DataDetails.
//!
//! | Trap | Fields |
//! |---|---|
//! | 64–67 | GIDADDR 6 (16) |
//! | 128 | LIDADDR 0 (2) |
//! | 129–131 | LIDADDR 2 (2), PortNum 4 |
//! | 144 | LIDADDR 2 (2), OtherLocalChanges 5 (bit 0), CapabilityMask 6 (4), change flags 10 (2), CapabilityMask2 12 (2) |
//! | 145 | LIDADDR 2 (2), SystemImageGUID 6 (8) |
//! | 256 | LIDADDR 2, DRSLID 4, Method 6, AttributeID 8, AttributeModifier 10 (4), M_Key 14 (8), DRNotice (bit 7) / DRPathTruncated (bit 6) / DRHopCount (bits 5–0) 23, DRNoticeReturnPath 24 (30) |
//! | 257, 258 | LIDADDR1 2, LIDADDR2 4, Key 6 (4), SL (bits 31–28) / QP1 (bits 23–0) 10, QP2 (bits 23–0) 14, GIDADDR1 18 (16), GIDADDR2 34 (16) |

use crate::field::{set_u16_at, set_u32_at, set_u64_at, u16_at, u32_at, u64_at};

/// Length of DataDetails.
pub const LEN: usize = 54;

/// Change flags of trap 144 (OpenSM `TRAP_144_MASK_*`): which local attribute changed.
pub mod change_flags {
    /// NodeDescription changed.
    pub const NODE_DESCRIPTION: u16 = 0x0001;
    /// LinkWidthEnabled changed.
    pub const LINK_WIDTH_ENABLED: u16 = 0x0002;
    /// LinkSpeedEnabled changed.
    pub const LINK_SPEED_ENABLED: u16 = 0x0004;
    /// SM priority changed.
    pub const SM_PRIORITY: u16 = 0x0008;
    /// HierarchyInfo changed.
    pub const HIERARCHY_INFO: u16 = 0x0010;
    /// CapabilityMask2 changed.
    pub const CAPABILITY_MASK2: u16 = 0x0020;
}

mod ntc_64_67 {
    pub const GID: usize = 6;
}

mod ntc_128 {
    pub const LID: usize = 0;
}

mod ntc_129_131 {
    pub const LID: usize = 2;
    pub const PORT: usize = 4;
}

mod ntc_144 {
    pub const LID: usize = 2;
    /// reserved (7–1) / OtherLocalChanges (0).
    pub const LOCAL_CHANGES: usize = 5;
    pub const CAPABILITY_MASK: usize = 6;
    pub const CHANGE_FLAGS: usize = 10;
    pub const CAPABILITY_MASK2: usize = 12;
}

mod ntc_145 {
    pub const LID: usize = 2;
    pub const SYSTEM_IMAGE_GUID: usize = 6;
}

mod ntc_256 {
    pub const LID: usize = 2;
    pub const DR_SLID: usize = 4;
    pub const METHOD: usize = 6;
    pub const ATTR_ID: usize = 8;
    pub const ATTR_MOD: usize = 10;
    pub const M_KEY: usize = 14;
    pub const DR_TRUNC_HOP: usize = 23;
    pub const DR_RETURN_PATH: usize = 24;
}

mod ntc_257_258 {
    pub const LID1: usize = 2;
    pub const LID2: usize = 4;
    pub const KEY: usize = 6;
    pub const SL_QP1: usize = 10;
    pub const QP2: usize = 14;
    pub const GID1: usize = 18;
    pub const GID2: usize = 34;
}

/// Return-path bytes a trap 256 has room for.
pub const DR_RETURN_PATH_LEN: usize = 30;
/// [`DR_RETURN_PATH_LEN`] as the 6-bit DRHopCount holds it.
const DR_RETURN_PATH_HOPS: u8 = 30;
/// DRNotice bit of trap 256 byte 23: the SMP was directed-route.
const DR_NOTICE: u8 = 0x80;
/// DRPathTruncated bit of trap 256 byte 23: the return path did not fit.
const DR_TRUNCATED: u8 = 0x40;
/// DRHopCount bits of trap 256 byte 23.
const DR_HOP_COUNT: u8 = 0x3F;
/// The 24 bits of a QP number.
const QP_MASK: u32 = 0x00FF_FFFF;

/// A typed view of the 54 DataDetails bytes. Which accessors mean anything depends on the
/// notice's TrapNumber; each is named after the trap (`ntc_<n>_…`, as OpenSM's union).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataDetails<T: AsRef<[u8]>> {
    buffer: T,
}

fn gid_at(buf: &[u8], at: usize) -> [u8; 16] {
    let mut gid = [0u8; 16];
    gid.copy_from_slice(&buf[at..at + 16]);
    gid
}

impl<T: AsRef<[u8]>> DataDetails<T> {
    /// Views a buffer the caller knows holds exactly DataDetails (a Notice's slice).
    pub(crate) fn from_exact(buffer: T) -> Self {
        debug_assert_eq!(buffer.as_ref().len(), LEN);
        Self { buffer }
    }
}

impl<'a> DataDetails<&'a [u8]> {
    /// Views DataDetails that the type says are 54 bytes (no length check can fail).
    pub fn new(buffer: &'a [u8; LEN]) -> Self {
        Self { buffer }
    }
}

impl<'a> DataDetails<&'a mut [u8]> {
    /// Views writable DataDetails that the type says are 54 bytes.
    pub fn new_mut(buffer: &'a mut [u8; LEN]) -> Self {
        Self { buffer }
    }
}

impl<T: AsRef<[u8]>> DataDetails<T> {
    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    /// Traps 64–67 (GID in/out of service, multicast group created/deleted): the GID.
    pub fn ntc_64_67_gid(&self) -> [u8; 16] {
        gid_at(self.b(), ntc_64_67::GID)
    }

    /// Trap 128: LIDADDR, the switch whose port changed state.
    pub fn ntc_128_lid(&self) -> u16 {
        u16_at(self.b(), ntc_128::LID)
    }

    /// Traps 129–131: LIDADDR of the port whose threshold was reached.
    pub fn ntc_129_131_lid(&self) -> u16 {
        u16_at(self.b(), ntc_129_131::LID)
    }

    /// Traps 129–131: PortNum of that port.
    pub fn ntc_129_131_port(&self) -> u8 {
        self.b()[ntc_129_131::PORT]
    }

    /// Trap 144: LIDADDR of the port whose attributes changed.
    pub fn ntc_144_lid(&self) -> u16 {
        u16_at(self.b(), ntc_144::LID)
    }

    /// Trap 144: OtherLocalChanges (bit 0 of byte 5): some attribute other than
    /// CapabilityMask changed, the change flags say which.
    pub fn ntc_144_other_local_changes(&self) -> bool {
        self.b()[ntc_144::LOCAL_CHANGES] & 0x01 != 0
    }

    /// Trap 144: the port's new CapabilityMask.
    pub fn ntc_144_capability_mask(&self) -> u32 {
        u32_at(self.b(), ntc_144::CAPABILITY_MASK)
    }

    /// Trap 144: the change flags ([`change_flags`]).
    pub fn ntc_144_change_flags(&self) -> u16 {
        u16_at(self.b(), ntc_144::CHANGE_FLAGS)
    }

    /// Trap 144: the port's new CapabilityMask2.
    pub fn ntc_144_capability_mask2(&self) -> u16 {
        u16_at(self.b(), ntc_144::CAPABILITY_MASK2)
    }

    /// Trap 145: LIDADDR of the node whose SystemImageGUID changed.
    pub fn ntc_145_lid(&self) -> u16 {
        u16_at(self.b(), ntc_145::LID)
    }

    /// Trap 145: the new SystemImageGUID.
    pub fn ntc_145_system_image_guid(&self) -> u64 {
        u64_at(self.b(), ntc_145::SYSTEM_IMAGE_GUID)
    }

    /// Trap 256: LIDADDR.
    pub fn ntc_256_lid(&self) -> u16 {
        u16_at(self.b(), ntc_256::LID)
    }

    /// Trap 256: DRSLID of a directed-route SMP.
    pub fn ntc_256_dr_slid(&self) -> u16 {
        u16_at(self.b(), ntc_256::DR_SLID)
    }

    /// Trap 256: the SMP's method.
    pub fn ntc_256_method(&self) -> u8 {
        self.b()[ntc_256::METHOD]
    }

    /// Trap 256: the SMP's AttributeID.
    pub fn ntc_256_attr_id(&self) -> u16 {
        u16_at(self.b(), ntc_256::ATTR_ID)
    }

    /// Trap 256: the SMP's AttributeModifier.
    pub fn ntc_256_attr_mod(&self) -> u32 {
        u32_at(self.b(), ntc_256::ATTR_MOD)
    }

    /// Trap 256: the M_Key the SMP carried.
    pub fn ntc_256_m_key(&self) -> u64 {
        u64_at(self.b(), ntc_256::M_KEY)
    }

    /// Trap 256: DRNotice, the SMP was directed-route.
    pub fn ntc_256_dr_notice(&self) -> bool {
        self.b()[ntc_256::DR_TRUNC_HOP] & DR_NOTICE != 0
    }

    /// Trap 256: DRPathTruncated, the return path did not fit in 30 bytes.
    pub fn ntc_256_dr_path_truncated(&self) -> bool {
        self.b()[ntc_256::DR_TRUNC_HOP] & DR_TRUNCATED != 0
    }

    /// Trap 256: DRHopCount, 6 bits: how many return-path bytes are valid.
    pub fn ntc_256_dr_hop_count(&self) -> u8 {
        self.b()[ntc_256::DR_TRUNC_HOP] & DR_HOP_COUNT
    }

    /// Trap 256: DRNoticeReturnPath (30 bytes; the first DRHopCount are valid).
    pub fn ntc_256_dr_return_path(&self) -> &[u8] {
        &self.b()[ntc_256::DR_RETURN_PATH..ntc_256::DR_RETURN_PATH + DR_RETURN_PATH_LEN]
    }

    /// Traps 257/258: LIDADDR1, the sender.
    pub fn ntc_257_258_lid1(&self) -> u16 {
        u16_at(self.b(), ntc_257_258::LID1)
    }

    /// Traps 257/258: LIDADDR2, the receiver.
    pub fn ntc_257_258_lid2(&self) -> u16 {
        u16_at(self.b(), ntc_257_258::LID2)
    }

    /// Traps 257/258: the P_Key (in the low 16 bits) or Q_Key.
    pub fn ntc_257_258_key(&self) -> u32 {
        u32_at(self.b(), ntc_257_258::KEY)
    }

    /// Traps 257/258: the packet's SL, 4 bits.
    pub fn ntc_257_258_sl(&self) -> u8 {
        self.b()[ntc_257_258::SL_QP1] >> 4
    }

    /// Traps 257/258: QP1, the sending QP, 24 bits.
    pub fn ntc_257_258_qp1(&self) -> u32 {
        u32_at(self.b(), ntc_257_258::SL_QP1) & QP_MASK
    }

    /// Traps 257/258: QP2, the QP the packet was for, 24 bits.
    pub fn ntc_257_258_qp2(&self) -> u32 {
        u32_at(self.b(), ntc_257_258::QP2) & QP_MASK
    }

    /// Traps 257/258: GIDADDR1.
    pub fn ntc_257_258_gid1(&self) -> [u8; 16] {
        gid_at(self.b(), ntc_257_258::GID1)
    }

    /// Traps 257/258: GIDADDR2.
    pub fn ntc_257_258_gid2(&self) -> [u8; 16] {
        gid_at(self.b(), ntc_257_258::GID2)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> DataDetails<T> {
    fn b_mut(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }

    /// Sets trap 128's LIDADDR.
    pub fn set_ntc_128_lid(&mut self, lid: u16) {
        set_u16_at(self.b_mut(), ntc_128::LID, lid);
    }

    /// Sets trap 144's LIDADDR.
    pub fn set_ntc_144_lid(&mut self, lid: u16) {
        set_u16_at(self.b_mut(), ntc_144::LID, lid);
    }

    /// Sets trap 144's CapabilityMask.
    pub fn set_ntc_144_capability_mask(&mut self, mask: u32) {
        set_u32_at(self.b_mut(), ntc_144::CAPABILITY_MASK, mask);
    }

    /// Sets trap 256's LIDADDR.
    pub fn set_ntc_256_lid(&mut self, lid: u16) {
        set_u16_at(self.b_mut(), ntc_256::LID, lid);
    }

    /// Sets trap 256's DRSLID.
    pub fn set_ntc_256_dr_slid(&mut self, dr_slid: u16) {
        set_u16_at(self.b_mut(), ntc_256::DR_SLID, dr_slid);
    }

    /// Sets trap 256's method.
    pub fn set_ntc_256_method(&mut self, method: u8) {
        self.b_mut()[ntc_256::METHOD] = method;
    }

    /// Sets trap 256's AttributeID.
    pub fn set_ntc_256_attr_id(&mut self, attr_id: u16) {
        set_u16_at(self.b_mut(), ntc_256::ATTR_ID, attr_id);
    }

    /// Sets trap 256's AttributeModifier.
    pub fn set_ntc_256_attr_mod(&mut self, attr_mod: u32) {
        set_u32_at(self.b_mut(), ntc_256::ATTR_MOD, attr_mod);
    }

    /// Sets trap 256's M_Key.
    pub fn set_ntc_256_m_key(&mut self, m_key: u64) {
        set_u64_at(self.b_mut(), ntc_256::M_KEY, m_key);
    }

    /// Sets trap 256's directed-route part: DRNotice, and the first `hop_count` (6 bits) bytes
    /// of `return_path`, at most 30, DRPathTruncated set when there were more.
    pub fn set_ntc_256_dr_return_path(&mut self, hop_count: u8, return_path: &[u8; 64]) {
        let hops = hop_count & DR_HOP_COUNT;
        let kept = hops.min(DR_RETURN_PATH_HOPS);
        let mut flags = DR_NOTICE;
        if hops > kept {
            flags |= DR_TRUNCATED;
        }
        let b = self.b_mut();
        b[ntc_256::DR_TRUNC_HOP] = flags | kept;
        let kept = usize::from(kept);
        b[ntc_256::DR_RETURN_PATH..ntc_256::DR_RETURN_PATH + kept]
            .copy_from_slice(&return_path[..kept]);
    }

    /// Sets traps 257/258's LIDADDR1.
    pub fn set_ntc_257_258_lid1(&mut self, lid: u16) {
        set_u16_at(self.b_mut(), ntc_257_258::LID1, lid);
    }

    /// Sets traps 257/258's LIDADDR2.
    pub fn set_ntc_257_258_lid2(&mut self, lid: u16) {
        set_u16_at(self.b_mut(), ntc_257_258::LID2, lid);
    }

    /// Sets traps 257/258's Key.
    pub fn set_ntc_257_258_key(&mut self, key: u32) {
        set_u32_at(self.b_mut(), ntc_257_258::KEY, key);
    }

    /// Sets traps 257/258's SL (4 bits) and QP1 (24 bits), which share a word; the bits
    /// between them are cleared, higher bits of each value dropped.
    pub fn set_ntc_257_258_sl_qp1(&mut self, sl: u8, qp1: u32) {
        let word = (u32::from(sl & 0xF) << 28) | (qp1 & QP_MASK);
        set_u32_at(self.b_mut(), ntc_257_258::SL_QP1, word);
    }

    /// Sets traps 257/258's QP2 (24 bits; the byte above it cleared).
    pub fn set_ntc_257_258_qp2(&mut self, qp2: u32) {
        set_u32_at(self.b_mut(), ntc_257_258::QP2, qp2 & QP_MASK);
    }

    /// Sets traps 257/258's GIDADDR1.
    pub fn set_ntc_257_258_gid1(&mut self, gid: [u8; 16]) {
        self.b_mut()[ntc_257_258::GID1..ntc_257_258::GID1 + 16].copy_from_slice(&gid);
    }

    /// Sets traps 257/258's GIDADDR2.
    pub fn set_ntc_257_258_gid2(&mut self, gid: [u8; 16]) {
        self.b_mut()[ntc_257_258::GID2..ntc_257_258::GID2 + 16].copy_from_slice(&gid);
    }
}

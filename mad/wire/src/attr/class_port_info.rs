//! ClassPortInfo (attribute 0x0001 of every GS class, 72 bytes; IBA 13.4.8.1, kernel
//! `struct ib_class_port_info`, OpenSM `ib_class_port_info_t`, libibmad `fields.c`).
//!
//! | Offset | Field |
//! |---|---|
//! | 0 | BaseVersion |
//! | 1 | ClassVersion |
//! | 2 | CapabilityMask (2) |
//! | 4 | CapabilityMask2 (27 bits) / RespTimeValue (5 bits) |
//! | 8 | RedirectGID (16) |
//! | 24 | RedirectTC (8 bits) / RedirectSL (4) / RedirectFL (20) |
//! | 28 | RedirectLID (2) |
//! | 30 | RedirectP_Key (2) |
//! | 32 | reserved (8 bits) / RedirectQP (24) |
//! | 36 | RedirectQ_Key (4) |
//! | 40 | TrapGID (16) |
//! | 56 | TrapTC (8 bits) / TrapSL (4) / TrapFL (20) |
//! | 60 | TrapLID (2) |
//! | 62 | TrapP_Key (2) |
//! | 64 | TrapHL (8 bits) / TrapQP (24) |
//! | 68 | TrapQ_Key (4) |

use crate::error::{Result, check_len};
use crate::field::{set_u16_at, set_u24_at, set_u32_at, u16_at, u24_at, u32_at};

/// Length of ClassPortInfo.
pub const LEN: usize = 72;
/// Length of a GID.
pub const GID_LEN: usize = 16;

/// CapabilityMask bits common to all classes.
pub mod cap {
    /// Trap supported.
    pub const IS_TRAP_SUPPORTED: u16 = 0x0001;
    /// Notice supported.
    pub const IS_NOTICE_SUPPORTED: u16 = 0x0002;
}

/// CapabilityMask bits of the PMA (kernel `IB_PMA_CLASS_CAP_*`, OpenSM `IB_PM_*`).
pub mod pma_cap {
    /// PortSelect 0xFF (all ports) supported.
    pub const ALL_PORT_SELECT: u16 = 0x0100;
    /// PortCountersExtended supported.
    pub const EXT_WIDTH: u16 = 0x0200;
    /// PortCountersExtended supported, without the IETF counters.
    pub const EXT_WIDTH_NOIETF: u16 = 0x0400;
    /// SamplesOnlySupported: the PMA implements PortSamplesControl/Result but no PortCounters.
    pub const SAMPLES_ONLY: u16 = 0x0800;
    /// PortXmitWait supported.
    pub const XMIT_WAIT: u16 = 0x1000;
    /// IsQP1DropSupported: PortCounters QP1Dropped (bytes 20–21 of the attribute) counts.
    pub const IS_QP1_DROP: u16 = 0x8000;
}

mod field {
    pub const BASE_VERSION: usize = 0;
    pub const CLASS_VERSION: usize = 1;
    pub const CAPABILITY_MASK: usize = 2;
    /// CapabilityMask2 (bits 31–5) / RespTimeValue (bits 4–0).
    pub const CAP2_RESP_TIME: usize = 4;
    pub const REDIRECT_GID: usize = 8;
    /// TC (31–24) / SL (23–20) / FL (19–0).
    pub const REDIRECT_TC_SL_FL: usize = 24;
    pub const REDIRECT_LID: usize = 28;
    pub const REDIRECT_PKEY: usize = 30;
    pub const REDIRECT_RESERVED: usize = 32;
    pub const REDIRECT_QP: usize = 33;
    pub const REDIRECT_QKEY: usize = 36;
    pub const TRAP_GID: usize = 40;
    pub const TRAP_TC_SL_FL: usize = 56;
    pub const TRAP_LID: usize = 60;
    pub const TRAP_PKEY: usize = 62;
    pub const TRAP_HL: usize = 64;
    pub const TRAP_QP: usize = 65;
    pub const TRAP_QKEY: usize = 68;
}

/// Splits a TC/SL/FL word.
const fn tc_sl_fl(word: u32) -> (u8, u8, u32) {
    (
        (word >> 24) as u8,
        ((word >> 20) & 0xF) as u8,
        word & 0xF_FFFF,
    )
}

/// Builds a TC/SL/FL word; bits beyond each field's width are dropped.
const fn to_tc_sl_fl(tc: u8, sl: u8, fl: u32) -> u32 {
    ((tc as u32) << 24) | (((sl & 0xF) as u32) << 20) | (fl & 0xF_FFFF)
}

/// A typed view of a ClassPortInfo attribute.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClassPortInfo<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> ClassPortInfo<T> {
    /// Views `buffer` as ClassPortInfo, checking that it holds 72 bytes.
    pub fn new_checked(buffer: T) -> Result<Self> {
        check_len("ClassPortInfo", buffer.as_ref(), LEN)?;
        Ok(Self { buffer })
    }

    /// Gives the buffer back.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// BaseVersion: the highest MAD base version supported.
    pub fn base_version(&self) -> u8 {
        self.buffer.as_ref()[field::BASE_VERSION]
    }

    /// ClassVersion: the highest class version supported.
    pub fn class_version(&self) -> u8 {
        self.buffer.as_ref()[field::CLASS_VERSION]
    }

    /// CapabilityMask ([`cap`], [`pma_cap`]).
    pub fn capability_mask(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field::CAPABILITY_MASK)
    }

    /// CapabilityMask2, 27 bits.
    pub fn capability_mask2(&self) -> u32 {
        u32_at(self.buffer.as_ref(), field::CAP2_RESP_TIME) >> 5
    }

    /// RespTimeValue, 5 bits.
    pub fn resp_time_value(&self) -> u8 {
        (u32_at(self.buffer.as_ref(), field::CAP2_RESP_TIME) & 0x1F) as u8
    }

    /// RedirectGID.
    pub fn redirect_gid(&self) -> [u8; GID_LEN] {
        gid_at(self.buffer.as_ref(), field::REDIRECT_GID)
    }

    /// RedirectTC.
    pub fn redirect_tc(&self) -> u8 {
        tc_sl_fl(u32_at(self.buffer.as_ref(), field::REDIRECT_TC_SL_FL)).0
    }

    /// RedirectSL, 4 bits.
    pub fn redirect_sl(&self) -> u8 {
        tc_sl_fl(u32_at(self.buffer.as_ref(), field::REDIRECT_TC_SL_FL)).1
    }

    /// RedirectFL, 20 bits.
    pub fn redirect_fl(&self) -> u32 {
        tc_sl_fl(u32_at(self.buffer.as_ref(), field::REDIRECT_TC_SL_FL)).2
    }

    /// RedirectLID.
    pub fn redirect_lid(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field::REDIRECT_LID)
    }

    /// RedirectP_Key.
    pub fn redirect_pkey(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field::REDIRECT_PKEY)
    }

    /// RedirectQP, 24 bits.
    pub fn redirect_qp(&self) -> u32 {
        u24_at(self.buffer.as_ref(), field::REDIRECT_QP)
    }

    /// RedirectQ_Key.
    pub fn redirect_qkey(&self) -> u32 {
        u32_at(self.buffer.as_ref(), field::REDIRECT_QKEY)
    }

    /// TrapGID.
    pub fn trap_gid(&self) -> [u8; GID_LEN] {
        gid_at(self.buffer.as_ref(), field::TRAP_GID)
    }

    /// TrapTC.
    pub fn trap_tc(&self) -> u8 {
        tc_sl_fl(u32_at(self.buffer.as_ref(), field::TRAP_TC_SL_FL)).0
    }

    /// TrapSL, 4 bits.
    pub fn trap_sl(&self) -> u8 {
        tc_sl_fl(u32_at(self.buffer.as_ref(), field::TRAP_TC_SL_FL)).1
    }

    /// TrapFL, 20 bits.
    pub fn trap_fl(&self) -> u32 {
        tc_sl_fl(u32_at(self.buffer.as_ref(), field::TRAP_TC_SL_FL)).2
    }

    /// TrapLID.
    pub fn trap_lid(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field::TRAP_LID)
    }

    /// TrapP_Key.
    pub fn trap_pkey(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field::TRAP_PKEY)
    }

    /// TrapHL (hop limit).
    pub fn trap_hop_limit(&self) -> u8 {
        self.buffer.as_ref()[field::TRAP_HL]
    }

    /// TrapQP, 24 bits.
    pub fn trap_qp(&self) -> u32 {
        u24_at(self.buffer.as_ref(), field::TRAP_QP)
    }

    /// TrapQ_Key.
    pub fn trap_qkey(&self) -> u32 {
        u32_at(self.buffer.as_ref(), field::TRAP_QKEY)
    }
}

fn gid_at(buf: &[u8], at: usize) -> [u8; GID_LEN] {
    let mut gid = [0u8; GID_LEN];
    gid.copy_from_slice(&buf[at..at + GID_LEN]);
    gid
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> ClassPortInfo<T> {
    /// Sets BaseVersion.
    pub fn set_base_version(&mut self, value: u8) {
        self.buffer.as_mut()[field::BASE_VERSION] = value;
    }

    /// Sets ClassVersion.
    pub fn set_class_version(&mut self, value: u8) {
        self.buffer.as_mut()[field::CLASS_VERSION] = value;
    }

    /// Sets CapabilityMask.
    pub fn set_capability_mask(&mut self, value: u16) {
        set_u16_at(self.buffer.as_mut(), field::CAPABILITY_MASK, value);
    }

    /// Sets CapabilityMask2 (27 bits; higher bits dropped), keeping RespTimeValue.
    pub fn set_capability_mask2(&mut self, value: u32) {
        let word = u32_at(self.buffer.as_ref(), field::CAP2_RESP_TIME);
        set_u32_at(
            self.buffer.as_mut(),
            field::CAP2_RESP_TIME,
            (value << 5) | (word & 0x1F),
        );
    }

    /// Sets RespTimeValue (5 bits; higher bits dropped), keeping CapabilityMask2.
    pub fn set_resp_time_value(&mut self, value: u8) {
        let word = u32_at(self.buffer.as_ref(), field::CAP2_RESP_TIME);
        set_u32_at(
            self.buffer.as_mut(),
            field::CAP2_RESP_TIME,
            (word & !0x1F) | (value & 0x1F) as u32,
        );
    }

    /// Sets RedirectGID.
    pub fn set_redirect_gid(&mut self, value: [u8; GID_LEN]) {
        self.buffer.as_mut()[field::REDIRECT_GID..field::REDIRECT_GID + GID_LEN]
            .copy_from_slice(&value);
    }

    /// Sets RedirectTC, RedirectSL (4 bits) and RedirectFL (20 bits), which share a word.
    pub fn set_redirect_tc_sl_fl(&mut self, tc: u8, sl: u8, fl: u32) {
        set_u32_at(
            self.buffer.as_mut(),
            field::REDIRECT_TC_SL_FL,
            to_tc_sl_fl(tc, sl, fl),
        );
    }

    /// Sets RedirectLID.
    pub fn set_redirect_lid(&mut self, value: u16) {
        set_u16_at(self.buffer.as_mut(), field::REDIRECT_LID, value);
    }

    /// Sets RedirectP_Key.
    pub fn set_redirect_pkey(&mut self, value: u16) {
        set_u16_at(self.buffer.as_mut(), field::REDIRECT_PKEY, value);
    }

    /// Sets RedirectQP (24 bits), clearing the reserved byte before it.
    pub fn set_redirect_qp(&mut self, value: u32) {
        self.buffer.as_mut()[field::REDIRECT_RESERVED] = 0;
        set_u24_at(self.buffer.as_mut(), field::REDIRECT_QP, value);
    }

    /// Sets RedirectQ_Key.
    pub fn set_redirect_qkey(&mut self, value: u32) {
        set_u32_at(self.buffer.as_mut(), field::REDIRECT_QKEY, value);
    }

    /// Sets TrapGID.
    pub fn set_trap_gid(&mut self, value: [u8; GID_LEN]) {
        self.buffer.as_mut()[field::TRAP_GID..field::TRAP_GID + GID_LEN].copy_from_slice(&value);
    }

    /// Sets TrapTC, TrapSL (4 bits) and TrapFL (20 bits), which share a word.
    pub fn set_trap_tc_sl_fl(&mut self, tc: u8, sl: u8, fl: u32) {
        set_u32_at(
            self.buffer.as_mut(),
            field::TRAP_TC_SL_FL,
            to_tc_sl_fl(tc, sl, fl),
        );
    }

    /// Sets TrapLID.
    pub fn set_trap_lid(&mut self, value: u16) {
        set_u16_at(self.buffer.as_mut(), field::TRAP_LID, value);
    }

    /// Sets TrapP_Key.
    pub fn set_trap_pkey(&mut self, value: u16) {
        set_u16_at(self.buffer.as_mut(), field::TRAP_PKEY, value);
    }

    /// Sets TrapHL.
    pub fn set_trap_hop_limit(&mut self, value: u8) {
        self.buffer.as_mut()[field::TRAP_HL] = value;
    }

    /// Sets TrapQP (24 bits).
    pub fn set_trap_qp(&mut self, value: u32) {
        set_u24_at(self.buffer.as_mut(), field::TRAP_QP, value);
    }

    /// Sets TrapQ_Key.
    pub fn set_trap_qkey(&mut self, value: u32) {
        set_u32_at(self.buffer.as_mut(), field::TRAP_QKEY, value);
    }
}

/// ClassPortInfo as plain values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ClassPortInfoRepr {
    /// BaseVersion.
    pub base_version: u8,
    /// ClassVersion.
    pub class_version: u8,
    /// CapabilityMask.
    pub capability_mask: u16,
    /// CapabilityMask2, 27 bits.
    pub capability_mask2: u32,
    /// RespTimeValue, 5 bits.
    pub resp_time_value: u8,
    /// RedirectGID.
    pub redirect_gid: [u8; GID_LEN],
    /// RedirectTC.
    pub redirect_tc: u8,
    /// RedirectSL, 4 bits.
    pub redirect_sl: u8,
    /// RedirectFL, 20 bits.
    pub redirect_fl: u32,
    /// RedirectLID.
    pub redirect_lid: u16,
    /// RedirectP_Key.
    pub redirect_pkey: u16,
    /// RedirectQP, 24 bits.
    pub redirect_qp: u32,
    /// RedirectQ_Key.
    pub redirect_qkey: u32,
    /// TrapGID.
    pub trap_gid: [u8; GID_LEN],
    /// TrapTC.
    pub trap_tc: u8,
    /// TrapSL, 4 bits.
    pub trap_sl: u8,
    /// TrapFL, 20 bits.
    pub trap_fl: u32,
    /// TrapLID.
    pub trap_lid: u16,
    /// TrapP_Key.
    pub trap_pkey: u16,
    /// TrapHL.
    pub trap_hop_limit: u8,
    /// TrapQP, 24 bits.
    pub trap_qp: u32,
    /// TrapQ_Key.
    pub trap_qkey: u32,
}

impl ClassPortInfoRepr {
    /// Reads every field of `view`.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(view: &ClassPortInfo<&T>) -> Result<Self> {
        Ok(Self {
            base_version: view.base_version(),
            class_version: view.class_version(),
            capability_mask: view.capability_mask(),
            capability_mask2: view.capability_mask2(),
            resp_time_value: view.resp_time_value(),
            redirect_gid: view.redirect_gid(),
            redirect_tc: view.redirect_tc(),
            redirect_sl: view.redirect_sl(),
            redirect_fl: view.redirect_fl(),
            redirect_lid: view.redirect_lid(),
            redirect_pkey: view.redirect_pkey(),
            redirect_qp: view.redirect_qp(),
            redirect_qkey: view.redirect_qkey(),
            trap_gid: view.trap_gid(),
            trap_tc: view.trap_tc(),
            trap_sl: view.trap_sl(),
            trap_fl: view.trap_fl(),
            trap_lid: view.trap_lid(),
            trap_pkey: view.trap_pkey(),
            trap_hop_limit: view.trap_hop_limit(),
            trap_qp: view.trap_qp(),
            trap_qkey: view.trap_qkey(),
        })
    }

    /// Bytes [`ClassPortInfoRepr::emit`] writes.
    pub const fn buffer_len(&self) -> usize {
        LEN
    }

    /// Writes every field into `view`, reserved bits cleared.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(&self, view: &mut ClassPortInfo<&mut T>) {
        view.set_base_version(self.base_version);
        view.set_class_version(self.class_version);
        view.set_capability_mask(self.capability_mask);
        view.set_capability_mask2(self.capability_mask2);
        view.set_resp_time_value(self.resp_time_value);
        view.set_redirect_gid(self.redirect_gid);
        view.set_redirect_tc_sl_fl(self.redirect_tc, self.redirect_sl, self.redirect_fl);
        view.set_redirect_lid(self.redirect_lid);
        view.set_redirect_pkey(self.redirect_pkey);
        view.set_redirect_qp(self.redirect_qp);
        view.set_redirect_qkey(self.redirect_qkey);
        view.set_trap_gid(self.trap_gid);
        view.set_trap_tc_sl_fl(self.trap_tc, self.trap_sl, self.trap_fl);
        view.set_trap_lid(self.trap_lid);
        view.set_trap_pkey(self.trap_pkey);
        view.set_trap_hop_limit(self.trap_hop_limit);
        view.set_trap_qp(self.trap_qp);
        view.set_trap_qkey(self.trap_qkey);
    }
}

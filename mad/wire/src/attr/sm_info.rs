//! SMInfo (SM attribute 0x0020, 21 bytes; IBA 14.2.5.13, OpenSM `ib_sm_info_t`, libibmad
//! `fields.c`).
//!
//! | Offset | Field |
//! |---|---|
//! | 0 | GUID (8) |
//! | 8 | SM_Key (8) |
//! | 16 | ActCount (4) |
//! | 20 | Priority (4) / SMState (4) |

use crate::error::{Result, check_len};
use crate::field::{bits, set_bits_at, set_u32_at, set_u64_at, u32_at, u64_at};
use crate::macros::wire_enum;

/// Length of SMInfo.
pub const LEN: usize = 21;

wire_enum! {
    /// SMState, 4 bits.
    pub enum SmState(u8) {
        /// Not active.
        NotActive = 0,
        /// Discovering.
        Discovering = 1,
        /// Standby.
        Standby = 2,
        /// Master.
        Master = 3,
    }
}

mod field {
    pub const GUID: usize = 0;
    pub const SM_KEY: usize = 8;
    pub const ACT_COUNT: usize = 16;
    /// Priority (7–4) / SMState (3–0).
    pub const PRI_STATE: usize = 20;
}

/// A typed view of an SMInfo attribute.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SmInfo<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> SmInfo<T> {
    /// Views `buffer` as SMInfo, checking that it holds 21 bytes.
    pub fn new_checked(buffer: T) -> Result<Self> {
        check_len("SMInfo", buffer.as_ref(), LEN)?;
        Ok(Self { buffer })
    }

    /// Gives the buffer back.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// GUID: the port GUID of the SM.
    pub fn guid(&self) -> u64 {
        u64_at(self.buffer.as_ref(), field::GUID)
    }

    /// SM_Key.
    pub fn sm_key(&self) -> u64 {
        u64_at(self.buffer.as_ref(), field::SM_KEY)
    }

    /// ActCount: the SM's heartbeat.
    pub fn act_count(&self) -> u32 {
        u32_at(self.buffer.as_ref(), field::ACT_COUNT)
    }

    /// Priority, 4 bits.
    pub fn priority(&self) -> u8 {
        bits(self.buffer.as_ref()[field::PRI_STATE], 4, 4)
    }

    /// SMState, 4 bits.
    pub fn sm_state(&self) -> SmState {
        SmState::from(bits(self.buffer.as_ref()[field::PRI_STATE], 0, 4))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> SmInfo<T> {
    /// Sets GUID.
    pub fn set_guid(&mut self, value: u64) {
        set_u64_at(self.buffer.as_mut(), field::GUID, value);
    }

    /// Sets SM_Key.
    pub fn set_sm_key(&mut self, value: u64) {
        set_u64_at(self.buffer.as_mut(), field::SM_KEY, value);
    }

    /// Sets ActCount.
    pub fn set_act_count(&mut self, value: u32) {
        set_u32_at(self.buffer.as_mut(), field::ACT_COUNT, value);
    }

    /// Sets Priority (4 bits).
    pub fn set_priority(&mut self, value: u8) {
        set_bits_at(self.buffer.as_mut(), field::PRI_STATE, 4, 4, value);
    }

    /// Sets SMState.
    pub fn set_sm_state(&mut self, value: SmState) {
        set_bits_at(self.buffer.as_mut(), field::PRI_STATE, 0, 4, value.into());
    }
}

/// SMInfo as plain values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SmInfoRepr {
    /// GUID.
    pub guid: u64,
    /// SM_Key.
    pub sm_key: u64,
    /// ActCount.
    pub act_count: u32,
    /// Priority, 4 bits.
    pub priority: u8,
    /// SMState.
    pub sm_state: SmState,
}

impl SmInfoRepr {
    /// Reads every field of `view`.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(view: &SmInfo<&T>) -> Result<Self> {
        Ok(Self {
            guid: view.guid(),
            sm_key: view.sm_key(),
            act_count: view.act_count(),
            priority: view.priority(),
            sm_state: view.sm_state(),
        })
    }

    /// Bytes [`SmInfoRepr::emit`] writes.
    pub const fn buffer_len(&self) -> usize {
        LEN
    }

    /// Writes every field into `view`.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(&self, view: &mut SmInfo<&mut T>) {
        view.set_guid(self.guid);
        view.set_sm_key(self.sm_key);
        view.set_act_count(self.act_count);
        view.set_priority(self.priority);
        view.set_sm_state(self.sm_state);
    }
}

//! How the stack names its sends on the device and on the wire.
//!
//! **Work request IDs.** Every `wr_id` the port posts says what it is, so that a completion finds
//! its owner in O(1) and a value the device invents is recognised:
//!
//! | bits | field |
//! |---|---|
//! | 0–15 | index (send slot or receive buffer) |
//! | 16–47 | generation of the send slot (0 for receive buffers) |
//! | 48 | QP: 0 = QP0 (SMI), 1 = QP1 (GSI) |
//! | 56–63 | kind: 1 = send slot, 2 = receive buffer (0 is never posted) |
//!
//! **Transaction IDs.** As in the kernel, the stack owns the upper 32 bits of the TID of every
//! request it sends (any MAD that is not a response: it rewrites them) and the client owns the
//! lower 32 bits. The kernel puts the agent's `hi_tid` there; this stack puts the send slot, so
//! a response finds its send in O(1) without a search:
//!
//! | bits of TID | field |
//! |---|---|
//! | 0–31 | the client's |
//! | 32–(32+g-1) | low `g` bits of the slot's generation, `g = 23 - index_bits` |
//! | (55-index_bits)–54 | slot index (`index_bits` = bits to number the QP's slots, at most 13) |
//! | 55 | QP: 0 = QP0, 1 = QP1 |
//! | 56–63 | 0: the top byte stays clear, as the kernel keeps it (mlx4 uses it to demultiplex VF MADs) |
//!
//! With the default 512 slots per QP (the driver's send depth of 128, 4 slots per entry) that
//! is 9 index bits and 14 generation bits: a response for a recycled slot is rejected unless it
//! arrives 16384 uses of that slot later *and* carries
//! the same client TID, class and address. The full 64-bit TID is also compared with the one the
//! slot sent, so the generation bits only decide between uses of a slot.
//!
//! **Local requests without a slot.** A directed-route request the port handles itself and
//! that takes no send slot (`crate::smi`: one for the port's SMA, or one sent without a
//! response timeout) carries the sending agent's ID instead, as the kernel's carries its
//! `hi_tid`, so that an answer another agent of the port gives to it finds the sender
//! ([`local_stamp`], [`local_stamp_agent`]):
//!
//! | bits of TID | field |
//! |---|---|
//! | 0–31 | the client's |
//! | 32–54 | the agent's ID (at most [`MAX_AGENT_ID`]) |
//! | 55 | 1: never set in a QP0 slot's TID, so the two cannot be confused |
//! | 56–63 | 0 |

use driver::verbs::SpecialQp;

/// The most slots one QP may have: the kernel's `IB_MAD_QP_MAX_SIZE`, 8192 (13 index bits).
pub const MAX_SLOTS_PER_QP: u32 = 8192;

/// The largest agent ID (23 bits): a local request's TID carries its agent's ID in the 23 bits
/// below the QP bit ([`local_stamp`]). The kernel limits its `hi_tid` to 24 bits the same way
/// (`xa_alloc_cyclic` with `XA_LIMIT(0, (1 << 24) - 1)` in `ib_register_mad_agent`,
/// drivers/infiniband/core/mad.c), keeping the top byte clear.
pub const MAX_AGENT_ID: u32 = (1 << 23) - 1;

/// Bit 23 of the upper TID half: the QP bit of a slot's TID, set in a local request's stamp.
const LOCAL_STAMP_BIT: u32 = 1 << 23;

/// The upper 32 TID bits of a local request of agent `agent` that takes no send slot.
pub fn local_stamp(agent: u32) -> u32 {
    LOCAL_STAMP_BIT | (agent & MAX_AGENT_ID)
}

/// The agent ID a directed-route SMP's TID carries if its upper half is a [`local_stamp`]
/// (top byte clear, bit 23 set: a QP0 slot's TID never has it), else `None`.
pub fn local_stamp_agent(tid: u64) -> Option<u32> {
    let hi = (tid >> 32) as u32;
    (hi >> 24 == 0 && hi & LOCAL_STAMP_BIT != 0).then_some(hi & MAX_AGENT_ID)
}

const KIND_SHIFT: u32 = 56;
const KIND_SEND: u64 = 1;
const KIND_RECV: u64 = 2;
const QP_BIT: u64 = 1 << 48;
const GEN_SHIFT: u32 = 16;

/// What a `wr_id` names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WrId {
    /// A send slot at a generation.
    Send {
        /// The QP.
        qp: SpecialQp,
        /// Slot index.
        index: u32,
        /// Slot generation.
        generation: u32,
    },
    /// A receive buffer.
    Recv {
        /// The QP.
        qp: SpecialQp,
        /// Buffer index.
        index: u32,
    },
}

fn qp_bit(qp: SpecialQp) -> u64 {
    match qp {
        SpecialQp::Smi => 0,
        SpecialQp::Gsi => QP_BIT,
    }
}

fn qp_of(bit: bool) -> SpecialQp {
    if bit { SpecialQp::Gsi } else { SpecialQp::Smi }
}

impl WrId {
    /// The 64-bit value posted with the work request.
    pub fn encode(self) -> u64 {
        match self {
            WrId::Send {
                qp,
                index,
                generation,
            } => {
                (KIND_SEND << KIND_SHIFT)
                    | qp_bit(qp)
                    | (u64::from(generation) << GEN_SHIFT)
                    | u64::from(index & 0xFFFF)
            }
            WrId::Recv { qp, index } => {
                (KIND_RECV << KIND_SHIFT) | qp_bit(qp) | u64::from(index & 0xFFFF)
            }
        }
    }

    /// Reads a `wr_id` the device returned; `None` if the stack cannot have posted it.
    pub fn decode(v: u64) -> Option<WrId> {
        let qp = qp_of(v & QP_BIT != 0);
        let index = (v & 0xFFFF) as u32;
        let reserved = v & 0x00FE_0000_0000_0000;
        if reserved != 0 {
            return None;
        }
        match v >> KIND_SHIFT {
            KIND_SEND => Some(WrId::Send {
                qp,
                index,
                generation: (v >> GEN_SHIFT) as u32,
            }),
            KIND_RECV if (v >> GEN_SHIFT) & 0xFFFF_FFFF == 0 => Some(WrId::Recv { qp, index }),
            _ => None,
        }
    }
}

/// The layout of the stack's upper 32 TID bits for one QP with `slots` send slots.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TidLayout {
    qp: SpecialQp,
    index_bits: u32,
}

/// Where a response's TID points.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TidRef {
    /// Slot index.
    pub index: u32,
    /// The low generation bits the TID carries.
    pub generation_bits: u32,
}

impl TidLayout {
    /// The layout for `slots` slots (1..=[`MAX_SLOTS_PER_QP`]) on `qp`.
    pub fn new(qp: SpecialQp, slots: u32) -> TidLayout {
        let slots = slots.clamp(1, MAX_SLOTS_PER_QP);
        let index_bits = 32 - (slots - 1).leading_zeros();
        TidLayout { qp, index_bits }
    }

    /// Bits of the slot index.
    pub fn index_bits(self) -> u32 {
        self.index_bits
    }

    /// Bits of the generation carried in the TID.
    pub fn generation_bits(self) -> u32 {
        23 - self.index_bits
    }

    fn generation_mask(self) -> u32 {
        (1u32 << self.generation_bits()) - 1
    }

    /// Whether the TID's generation bits match the full generation `generation`.
    pub fn generation_matches(self, tid_generation_bits: u32, generation: u32) -> bool {
        tid_generation_bits == generation & self.generation_mask()
    }

    /// The upper 32 TID bits for slot `index` at `generation`.
    pub fn hi(self, index: u32, generation: u32) -> u32 {
        let qp = match self.qp {
            SpecialQp::Smi => 0,
            SpecialQp::Gsi => 1u32 << 23,
        };
        qp | (index << self.generation_bits()) | (generation & self.generation_mask())
    }

    /// `tid` with its upper 32 bits replaced by the stack's for slot `index` at `generation`.
    pub fn rewrite(self, tid: u64, index: u32, generation: u32) -> u64 {
        (u64::from(self.hi(index, generation)) << 32) | (tid & 0xFFFF_FFFF)
    }

    /// Where the response TID `tid` points on this QP, or `None` if this stack cannot have
    /// sent it from this QP (top byte set, other QP, index out of range for `slots`).
    pub fn decode(self, tid: u64, slots: u32) -> Option<TidRef> {
        let hi = (tid >> 32) as u32;
        if hi >> 24 != 0 {
            return None;
        }
        let qp_bit = hi >> 23 & 1;
        let expected = u32::from(self.qp == SpecialQp::Gsi);
        if qp_bit != expected {
            return None;
        }
        let index = (hi & 0x7F_FFFF) >> self.generation_bits();
        if index >= slots {
            return None;
        }
        Some(TidRef {
            index,
            generation_bits: hi & self.generation_mask(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wr_ids_round_trip_and_carry_their_fields_where_documented() {
        let s = WrId::Send {
            qp: SpecialQp::Gsi,
            index: 127,
            generation: 0xDEAD_BEEF,
        };
        // kind 1 in the top byte, QP bit 48, generation in 16..48, index in 0..16.
        assert_eq!(s.encode(), 0x0101_DEAD_BEEF_007F);
        assert_eq!(WrId::decode(s.encode()), Some(s));
        let r = WrId::Recv {
            qp: SpecialQp::Smi,
            index: 511,
        };
        assert_eq!(r.encode(), 0x0200_0000_0000_01FF);
        assert_eq!(WrId::decode(r.encode()), Some(r));
    }

    #[test]
    fn wr_ids_the_stack_never_posts_are_rejected() {
        for v in [
            0,
            0x0300_0000_0000_0001,
            0x0102_0000_0000_0001,
            0x0200_0000_0001_0001,
            u64::MAX,
        ] {
            assert_eq!(WrId::decode(v), None, "{v:#x}");
        }
    }

    #[test]
    fn default_layout_has_7_index_and_16_generation_bits() {
        let l = TidLayout::new(SpecialQp::Gsi, 128);
        assert_eq!((l.index_bits(), l.generation_bits()), (7, 16));
        // QP1 bit 23, slot 5 in bits 16..23, generation 0x1234.
        assert_eq!(l.hi(5, 0x0001_1234), 0x0085_1234);
        assert_eq!(
            l.rewrite(0xFFFF_FFFF_0000_0042, 5, 0x1234),
            0x0085_1234_0000_0042
        );
        let s = TidLayout::new(SpecialQp::Smi, 128);
        assert_eq!(s.hi(0, 0), 0, "QP0 slot 0 generation 0");
    }

    #[test]
    fn layout_sizes() {
        for (slots, bits) in [(1, 0), (2, 1), (64, 6), (65, 7), (8192, 13), (100_000, 13)] {
            assert_eq!(
                TidLayout::new(SpecialQp::Gsi, slots).index_bits(),
                bits,
                "{slots}"
            );
        }
    }

    #[test]
    fn decode_checks_top_byte_qp_and_range() {
        let l = TidLayout::new(SpecialQp::Gsi, 100);
        let tid = l.rewrite(7, 99, 3);
        assert_eq!(
            l.decode(tid, 100),
            Some(TidRef {
                index: 99,
                generation_bits: 3
            })
        );
        assert!(l.generation_matches(3, 3 + (1 << l.generation_bits())));
        assert!(!l.generation_matches(3, 4));
        assert_eq!(l.decode(tid | 1 << 56, 100), None, "top byte set");
        assert_eq!(l.decode(tid, 99), None, "index out of range");
        let smi = TidLayout::new(SpecialQp::Smi, 100);
        assert_eq!(smi.decode(tid, 100), None, "a QP1 TID on QP0");
    }

    #[test]
    fn local_stamps_carry_the_agent_and_are_never_a_qp0_slot() {
        assert_eq!(local_stamp(5), 0x0080_0005);
        assert_eq!(
            local_stamp(MAX_AGENT_ID),
            0x00FF_FFFF,
            "the top byte stays clear"
        );
        let tid = (u64::from(local_stamp(0x12_3456)) << 32) | 0x77;
        assert_eq!(local_stamp_agent(tid), Some(0x12_3456));
        // No QP0 slot's TID reads as a stamp, whatever the slot count; a stamp is no slot.
        for slots in [1, 128, MAX_SLOTS_PER_QP] {
            let l = TidLayout::new(SpecialQp::Smi, slots);
            let slot_tid = l.rewrite(0x77, slots - 1, u32::MAX);
            assert_eq!(local_stamp_agent(slot_tid), None, "{slots}");
            assert_eq!(l.decode(tid, slots), None, "{slots}");
        }
        assert_eq!(local_stamp_agent(0x77), None, "a client's own TID");
        assert_eq!(local_stamp_agent(tid | 1 << 56), None, "top byte set");
    }
}

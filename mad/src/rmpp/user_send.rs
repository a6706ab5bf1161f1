//! The TIDs of user-RMPP sends: what an agent without the MAD layer's RMPP sends of a
//! transfer goes with the transfer's TID, not a new one.
//!
//! A request's TID gets its upper half from the send slot it takes (the ring's response
//! matching). The kernel's `ib_umad_write` puts the agent's `hi_tid` there instead, the same
//! for every send of the agent, so an RMPP-active request-method MAD keeps the TID of its
//! transfer: the ACK (or STOP, ABORT) of a response segment, built from that segment, goes
//! with the response's TID, and every DATA segment of a request sent in segments with the
//! first one's. Here, an RMPP-active request-method MAD of an RMPP-capable class from an
//! agent without RMPP, other than a First DATA segment, goes with:
//!
//! - for a DATA segment, the TID of the agent's newest transfer under way (the user-RMPP
//!   table, [`super::user`]; not a completed one) with the same TID lower half, class and
//!   peer: the peer's ACK of the First segment, which the sender waits for before any later
//!   one, recorded it;
//! - its own TID if that names a transfer of the agent: a user-RMPP table entry of the agent
//!   (under way, or completed: the final ACK of a response's Last segment, and the ACKs of
//!   its resent copies, whatever sends took the request's slot meanwhile), or a send slot
//!   whose send (in it now, or its last) was the agent's;
//! - for an ACK, STOP or ABORT, failing that, the TID the DATA rule gives;
//! - otherwise a slot's TID as any request.
//!
//! The TID is then kept, as a response's is. A First segment takes a slot's TID, so a
//! response to a one-segment request is matched as any; a resent First segment thus starts a
//! new transfer for the receiver. A response is matched only to the send of the slot its TID
//! names (the First segment's): a later segment sent with a response timeout ends with
//! RESP_TIMEOUT_ERR, its RMPP-active responses reaching the agent unmatched as user-RMPP
//! segments do.

use std::sync::atomic::Ordering;

use driver::verbs::{SpecialQp, UdDest};
use mad_wire::header::Mad;
use mad_wire::rmpp::{Rmpp as RmppView, flags, rmpp_type};

use crate::agent::AgentInner;
use crate::port::PortShared;
use crate::ring::lock;

impl PortShared {
    /// The TID `mad`, an RMPP-active request of `agent` (registered without RMPP) for `dest`,
    /// goes with and keeps, if it continues a transfer of the agent; `None`: a TID from its
    /// slot, as any request. Off the common path: called only for such MADs.
    #[cold]
    pub(crate) fn user_rmpp_tid(
        &self,
        agent: &AgentInner,
        mad: &[u8],
        dest: &UdDest,
    ) -> Option<u64> {
        let r = RmppView::new_checked(mad).ok()?;
        let data = r.rmpp_type() == rmpp_type::DATA;
        if r.flags() & flags::ACTIVE == 0 || (data && r.flags() & flags::FIRST != 0) {
            return None;
        }
        let tid = Mad::new_checked(mad).ok()?.tid();
        let mgmt_class = mad[1];
        let now = self.hca.now();
        let t = lock(&self.rmpp.table);
        let newest = || {
            t.user.find(
                agent.id,
                tid as u32,
                mgmt_class,
                (dest.dlid, dest.remote_qpn),
                now,
            )
        };
        let own = || {
            t.user.get(tid, mgmt_class, now) == Some(agent.id) || self.slot_was_agents(agent, tid)
        };
        if data {
            newest().or_else(|| own().then_some(tid))
        } else if own() {
            Some(tid)
        } else {
            newest()
        }
    }

    /// Whether `tid` names a QP1 send slot whose send, in it now or its last, was `agent`'s.
    fn slot_was_agents(&self, agent: &AgentInner, tid: u64) -> bool {
        let Some(ring) = self.ring(SpecialQp::Gsi) else {
            return false;
        };
        ring.layout
            .decode(tid, ring.slot_count())
            .and_then(|t| ring.slots.get(t.index as usize))
            .is_some_and(|s| s.owner.load(Ordering::Acquire) == agent.id.0)
    }
}

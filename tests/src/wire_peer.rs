//! A device of the test's own at the far end of a simulated link: it answers every Get that
//! arrives on QP1 with a GetResp (same MAD, response method) and records, by the low 32 bits of
//! the TID, every request that arrived and every answer it sent, and which of those answers it
//! had the network lose. What the fault-injection run (`tests/mad_faults.rs`) holds a send to:
//! a request lost on the wire never arrives here; an answer lost on the wire was sent from
//! here and never reached the requester.
//!
//! The answers it loses are the next packets to leave its port, armed with
//! [`Network::drop_nth_leaving`] by [`WirePeer::lose_next_answers`]: it is the only sender on
//! its port, so it knows exactly which of its answers those are. Losses drawn from a link's
//! drop rate ([`Network::set_link_fault`]) hit both directions and are not known to it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};

use sim::fabric::PortId;
use sim::link::{PortChange, PortLink, PortSink};
use sim::net::{Network, QP1_QKEY};
use sim::packet::Packet;

/// The answers the peer sent for one TID.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Answers {
    /// Answers put on the wire.
    pub sent: u32,
    /// Of those, answers the network was told to lose ([`WirePeer::lose_next_answers`]).
    pub lost: u32,
}

impl Answers {
    /// Whether an answer left that the peer did not have lost (it may still have been lost to
    /// a link's drop rate).
    pub fn any_not_lost(self) -> bool {
        self.sent > self.lost
    }
}

#[derive(Default)]
struct Log {
    arrivals: HashMap<u32, u32>,
    answers: HashMap<u32, Answers>,
    /// Answers still to be lost: the next this many packets to leave the port.
    to_lose: u32,
}

/// The test's device on a CA port (see the module documentation).
pub struct WirePeer {
    link: OnceLock<Arc<dyn PortLink>>,
    lid: u16,
    port: PortId,
    log: Mutex<Log>,
}

/// The low 32 bits of a MAD's TID: the client's half, which the stack leaves alone.
pub fn low_tid(mad: &[u8]) -> u32 {
    u32::from_be_bytes([mad[12], mad[13], mad[14], mad[15]])
}

impl WirePeer {
    /// Attach a peer to port `port` of CA `node` of `net`, answering from `lid` (the port's
    /// LID). Keep the returned value: the network holds the device only weakly, and dropping
    /// it detaches it.
    pub fn attach(net: &Network, node: &str, port: u8, lid: u16) -> Arc<WirePeer> {
        let me = Arc::new(WirePeer {
            link: OnceLock::new(),
            lid,
            port: net.port(node, port).expect("the peer's port exists"),
            log: Mutex::default(),
        });
        let sink: Arc<dyn PortSink> = me.clone();
        let link = net.attach(node, port, &sink).expect("attach the peer");
        assert!(me.link.set(link).is_ok(), "attached once");
        me
    }

    fn log(&self) -> MutexGuard<'_, Log> {
        self.log.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The network loses the next `n` answers this peer sends (after those already armed).
    pub fn lose_next_answers(&self, net: &Network, n: u32) {
        // Under the log's lock, which `deliver` holds while it transmits: no answer leaves
        // between reading the count and arming the drops that follow it.
        let mut log = self.log();
        for k in 1..=n {
            net.drop_nth_leaving(self.port, log.to_lose + k);
        }
        log.to_lose += n;
    }

    /// Requests with this low TID that arrived.
    pub fn arrivals(&self, tid: u32) -> u32 {
        self.log().arrivals.get(&tid).copied().unwrap_or(0)
    }

    /// The answers sent for this low TID.
    pub fn answers(&self, tid: u32) -> Answers {
        self.log().answers.get(&tid).copied().unwrap_or_default()
    }

    /// Requests that arrived, over all TIDs.
    pub fn total_arrivals(&self) -> u64 {
        self.log().arrivals.values().map(|&n| u64::from(n)).sum()
    }
}

impl PortSink for WirePeer {
    fn deliver(&self, _port: u8, packet: Packet) {
        let tid = low_tid(&packet.mad[..]);
        let mut log = self.log();
        *log.arrivals.entry(tid).or_default() += 1;
        // Gets to QP1 are answered; anything else (a Send, a response) only counted.
        if packet.dst_qp != 1 || packet.mad[3] != 0x01 {
            return;
        }
        let Some(link) = self.link.get() else {
            return;
        };
        let mut mad = packet.mad.clone();
        mad[3] = 0x81;
        let answer = Packet {
            slid: self.lid,
            dlid: packet.slid,
            sl: packet.sl,
            vl15: false,
            src_qp: 1,
            dst_qp: packet.src_qp,
            qkey: QP1_QKEY,
            pkey: packet.pkey,
            grh: None,
            mad,
        };
        let lost = log.to_lose > 0;
        if lost {
            log.to_lose -= 1;
        }
        let a = log.answers.entry(tid).or_default();
        a.sent += 1;
        a.lost += u32::from(lost);
        // Sent with the log held, so that `lose_next_answers` counts it (see there).
        link.transmit(answer);
        drop(log);
    }

    fn port_changed(&self, _port: u8, _change: PortChange) {}
}

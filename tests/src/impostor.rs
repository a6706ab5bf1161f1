//! A CA of a simulated fabric whose SMPs are answered by the test: its node's own SMA answers
//! (through the port's `local_mad`, as a host's MAD stack asks its firmware), and a NodeInfo
//! answer is rewritten before it leaves. How the discovery tests make a node lie (claim another
//! node's GUID, claim to be a switch answering by its port 0) with the fabric's own attach
//! interface: the impostor is a device on the CA's port, like our HCA is on its own.
//!
//! The impostor plays the part of the device's host: the network hands a device its packets
//! as they arrive, so it applies the directed-route receive rule of an end node
//! (`sim::net::smi::receive`), and the responder's send rule (`sim::net::smi::respond`) to
//! the answer, as the network does for the nodes it answers for itself.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use mad::wire::attr::node_info::{NodeInfo, NodeInfoRepr};
use mad::wire::attr_id::sm;
use mad::wire::class;
use mad::wire::smp::Smp;
use sim::link::{PortChange, PortLink, PortSink};
use sim::net::Network;
use sim::net::smi::{self, DrAction};
use sim::packet::Packet;

/// What the impostor does to each NodeInfo its SMA answers.
pub type Rewrite = Box<dyn Fn(&mut NodeInfoRepr) + Send + Sync>;

/// A device on a CA's port that answers SMPs with the CA's SMA, NodeInfo rewritten.
pub struct Impostor {
    link: OnceLock<Arc<dyn PortLink>>,
    num_ports: u8,
    rewrite: Rewrite,
    node_infos: AtomicU64,
}

impl Impostor {
    /// Attach an impostor to port `port` of CA `node` of `net`; `rewrite` changes every
    /// NodeInfo it answers with. Keep the returned value: the network holds the device only
    /// weakly, and dropping it detaches it.
    pub fn attach(
        net: &Network,
        node: &str,
        port: u8,
        rewrite: impl Fn(&mut NodeInfoRepr) + Send + Sync + 'static,
    ) -> Arc<Impostor> {
        let id = net.node(node).expect("the node exists");
        let num_ports = net.with_fabric(|f| f.node(id).num_ports());
        let me = Arc::new(Impostor {
            link: OnceLock::new(),
            num_ports,
            rewrite: Box::new(rewrite),
            node_infos: AtomicU64::new(0),
        });
        let sink: Arc<dyn PortSink> = me.clone();
        let link = net.attach(node, port, &sink).expect("attach the impostor");
        assert!(me.link.set(link).is_ok(), "attached once");
        me
    }

    /// NodeInfo answers rewritten so far.
    pub fn node_infos(&self) -> u64 {
        self.node_infos.load(Ordering::Relaxed)
    }

    /// The answer to a directed-route SMP that entered by `port`, or `None` when there is
    /// none (not for this node, or not a Get or Set its SMA answers).
    fn answer(&self, port: u8, request: &Packet) -> Option<Packet> {
        let link = self.link.get()?;
        let mut mad = *request.mad;
        if smi::receive(&mut mad, false, port, self.num_ports) != Ok(DrAction::Local) {
            return None;
        }
        let mut resp = link.local_mad(&mad, false)?;
        let mut smp = Smp::new_checked(&mut resp[..]).ok()?;
        if smp.header().attr_id() == sm::NODE_INFO && smp.dr_status() == 0 {
            let data = smp.data_mut();
            let mut ni = NodeInfoRepr::parse(&NodeInfo::new_checked(&data[..]).ok()?).ok()?;
            (self.rewrite)(&mut ni);
            ni.emit(&mut NodeInfo::new_checked(&mut data[..]).ok()?);
            self.node_infos.fetch_add(1, Ordering::Relaxed);
        }
        match smi::respond(&mut resp, false) {
            Ok(None) => {}
            Ok(Some(p)) if p == port => {}
            _ => return None,
        }
        Some(Packet {
            slid: mad::wire::PERMISSIVE_LID,
            dlid: request.slid,
            sl: request.sl,
            vl15: true,
            src_qp: 0,
            dst_qp: request.src_qp,
            qkey: 0,
            pkey: request.pkey,
            grh: None,
            mad: Box::new(resp),
        })
    }
}

impl PortSink for Impostor {
    fn deliver(&self, port: u8, packet: Packet) {
        // Only directed-route SMPs (what a discovery sends); anything else is dropped.
        if !packet.vl15 || packet.mad[1] != class::SUBN_DIRECTED_ROUTE {
            return;
        }
        if let (Some(resp), Some(link)) = (self.answer(port, &packet), self.link.get()) {
            link.transmit(resp);
        }
    }

    fn port_changed(&self, _port: u8, _change: PortChange) {}
}

//! A port that records the order sends go out in: it stands between the MAD layer and the
//! driver's port, forwards every call, and notes the `wr_id` of each send work request the
//! driver took (a refused one went nowhere), in the order the driver took them, which is the
//! order the device executes them in on one QP. How the fault-injection run
//! (`tests/mad_faults.rs`) sees that sends waiting for room leave in the order they were
//! posted: the MAD layer encodes each send's slot and generation in its `wr_id`
//! ([`mad::tid::WrId`]), and the completion's TID names the same slot.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use dma::DmaPool;
use driver::DriverError;
use driver::verbs::{
    DeviceEvent, HcaPort, PortAttrs, PostError, RecvWr, SendWr, SpecialQp, WorkCompletion,
};

/// The recording port (see the module documentation).
pub struct PostLog {
    inner: Arc<dyn HcaPort>,
    posts: Mutex<Vec<(SpecialQp, u64)>>,
}

impl PostLog {
    /// Record the sends posted through `inner`.
    pub fn new(inner: Arc<dyn HcaPort>) -> Arc<PostLog> {
        Arc::new(PostLog {
            inner,
            posts: Mutex::default(),
        })
    }

    /// The send work requests the driver took since the last call, oldest first: QP and
    /// `wr_id`.
    pub fn take(&self) -> Vec<(SpecialQp, u64)> {
        std::mem::take(&mut *self.posts.lock().unwrap_or_else(PoisonError::into_inner))
    }

    fn note(&self, qp: SpecialQp, wrs: &[SendWr]) {
        self.posts
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend(wrs.iter().map(|w| (qp, w.wr_id)));
    }
}

impl HcaPort for PostLog {
    fn port_num(&self) -> u8 {
        self.inner.port_num()
    }

    fn attrs(&self) -> Result<PortAttrs, DriverError> {
        self.inner.attrs()
    }

    fn queue_depth(&self, qp: SpecialQp) -> (u32, u32) {
        self.inner.queue_depth(qp)
    }

    fn post_send(&self, qp: SpecialQp, wr: &SendWr) -> Result<(), PostError> {
        // The note is taken under the log's lock after the post: posts of one QP come from
        // one drainer at a time (the ring's posting flag), so the log keeps their order.
        let r = self.inner.post_send(qp, wr);
        if r.is_ok() {
            self.note(qp, std::slice::from_ref(wr));
        }
        r
    }

    fn post_sends(&self, qp: SpecialQp, wrs: &[SendWr]) -> (usize, Option<PostError>) {
        let (n, e) = self.inner.post_sends(qp, wrs);
        self.note(qp, &wrs[..n]);
        (n, e)
    }

    fn post_recv(&self, qp: SpecialQp, wr: &RecvWr) -> Result<(), PostError> {
        self.inner.post_recv(qp, wr)
    }

    fn post_recvs(&self, qp: SpecialQp, wrs: &[RecvWr]) -> (usize, Option<PostError>) {
        self.inner.post_recvs(qp, wrs)
    }

    fn poll(&self, out: &mut Vec<WorkCompletion>, max: usize) -> Result<usize, DriverError> {
        self.inner.poll(out, max)
    }

    fn recover_send_queue(&self, qp: SpecialQp) -> Result<(), DriverError> {
        self.inner.recover_send_queue(qp)
    }

    fn process_mad(&self, mad: &[u8; 256], ignore_mkey: bool) -> Result<[u8; 256], DriverError> {
        self.inner.process_mad(mad, ignore_mkey)
    }

    fn modify_capability_mask(&self, set: u32, clear: u32) -> Result<u32, DriverError> {
        self.inner.modify_capability_mask(set, clear)
    }

    fn events(&self) -> Vec<DeviceEvent> {
        self.inner.events()
    }

    fn dma(&self) -> &DmaPool {
        self.inner.dma()
    }

    fn now(&self) -> Duration {
        self.inner.now()
    }

    fn wait(&self, deadline: Duration) {
        self.inner.wait(deadline);
    }
}

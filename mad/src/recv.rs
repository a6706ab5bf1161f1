//! Receive buffers of one special QP: leased once when the port opens, posted, and reposted
//! (as one batch per poll) once the MAD is copied out, so no DMA memory is allocated per
//! receive. A completion with an error status (a flush among them) means the QP has entered
//! the error state: from then on its buffers are kept unposted, not lost, and counted, as is
//! one the device refuses back for another reason. Owned by the progress loop.

use dma::{Access, DmaLease, DmaPool};
use driver::verbs::{GRH_LEN, HcaPort, PostError, RecvWr, Sge, SpecialQp};
use mad_wire::header::MAD_LEN;

use crate::event::RecvBox;
use crate::tid::WrId;

/// Bytes of one receive buffer: the GRH area and one MAD.
pub const RECV_BUF_LEN: usize = GRH_LEN as usize + MAD_LEN;

struct Buf {
    lease: Option<DmaLease>,
    posted: bool,
}

/// The receive buffers of one QP.
pub(crate) struct RecvRing {
    qp: SpecialQp,
    bufs: Vec<Buf>,
    /// Buffers posted, and buffers held (posted or not).
    posted: usize,
    held: usize,
    /// Scratch for [`RecvRing::post_batch`]: the work requests and their buffers.
    wrs: Vec<RecvWr>,
    which: Vec<u32>,
}

impl RecvRing {
    /// `n` buffers leased from `pool` (nothing posted yet).
    pub(crate) fn new(qp: SpecialQp, n: u32, pool: &DmaPool) -> Result<RecvRing, dma::DmaError> {
        let mut bufs = Vec::with_capacity(n as usize);
        for _ in 0..n {
            bufs.push(Buf {
                lease: Some(pool.lease(RECV_BUF_LEN, 64, Access::Write)?),
                posted: false,
            });
        }
        Ok(RecvRing {
            qp,
            held: bufs.len(),
            bufs,
            posted: 0,
            wrs: Vec::new(),
            which: Vec::new(),
        })
    }

    /// Post buffer `index`. On error it stays unposted (and kept).
    pub(crate) fn post(&mut self, hca: &dyn HcaPort, index: u32) -> Result<(), PostError> {
        let qp = self.qp;
        let b = self
            .bufs
            .get_mut(index as usize)
            .ok_or_else(|| PostError::Invalid(format!("no receive buffer {index}")))?;
        let Some(lease) = b.lease.as_ref() else {
            return Err(PostError::Invalid(format!(
                "receive buffer {index} was released"
            )));
        };
        if b.posted {
            return Ok(());
        }
        let wr = RecvWr {
            wr_id: WrId::Recv { qp, index }.encode(),
            sge: Sge {
                iova: lease.iova(),
                len: RECV_BUF_LEN as u32,
            },
        };
        hca.post_recv(qp, &wr)?;
        b.posted = true;
        self.posted += 1;
        Ok(())
    }

    /// Post the buffers `indexes` as one batch (one doorbell record update); a buffer already
    /// posted is left as it is. Returns the buffers refused, each with why (they stay unposted
    /// and kept); the others of the batch are posted all the same.
    pub(crate) fn post_batch(
        &mut self,
        hca: &dyn HcaPort,
        indexes: &[u32],
    ) -> Vec<(u32, PostError)> {
        let qp = self.qp;
        let mut refused = Vec::new();
        let (mut wrs, mut which) = (
            std::mem::take(&mut self.wrs),
            std::mem::take(&mut self.which),
        );
        wrs.clear();
        which.clear();
        for &index in indexes {
            match self.bufs.get(index as usize) {
                Some(Buf { posted: true, .. }) => {}
                Some(Buf {
                    lease: Some(lease),
                    posted: false,
                }) => {
                    wrs.push(RecvWr {
                        wr_id: WrId::Recv { qp, index }.encode(),
                        sge: Sge {
                            iova: lease.iova(),
                            len: RECV_BUF_LEN as u32,
                        },
                    });
                    which.push(index);
                }
                Some(_) => refused.push((
                    index,
                    PostError::Invalid(format!("receive buffer {index} was released")),
                )),
                None => refused.push((
                    index,
                    PostError::Invalid(format!("no receive buffer {index}")),
                )),
            }
        }
        let mut start = 0;
        while start < wrs.len() {
            let (n, err) = hca.post_recvs(qp, &wrs[start..]);
            let n = n.min(wrs.len() - start);
            for &index in &which[start..start + n] {
                self.bufs[index as usize].posted = true;
                self.posted += 1;
            }
            start += n;
            match err {
                Some(e) if start < wrs.len() => {
                    refused.push((which[start], e));
                    start += 1;
                }
                _ if n == 0 => {
                    // A port that posts nothing and names no reason: do not spin on it.
                    for &index in &which[start..] {
                        refused.push((index, PostError::Invalid("the port posted nothing".into())));
                    }
                    break;
                }
                _ => {}
            }
        }
        self.wrs = wrs;
        self.which = which;
        refused
    }

    /// Post every buffer not posted; returns how many the device refused (with the first
    /// refusal).
    pub(crate) fn post_all(&mut self, hca: &dyn HcaPort) -> (usize, Option<PostError>) {
        let mut failed = 0;
        let mut first = None;
        for i in 0..self.bufs.len() as u32 {
            if self.bufs[i as usize].lease.is_some() && !self.bufs[i as usize].posted {
                if let Err(e) = self.post(hca, i) {
                    failed += 1;
                    first.get_or_insert(e);
                }
            }
        }
        (failed, first)
    }

    /// A completion names buffer `index`: it is no longer posted. False if the stack had not
    /// posted it (a completion the device invented).
    pub(crate) fn complete(&mut self, index: u32) -> bool {
        match self.bufs.get_mut(index as usize) {
            Some(b) if b.posted => {
                b.posted = false;
                self.posted -= 1;
                true
            }
            _ => false,
        }
    }

    /// Copy the MAD out of buffer `index`, whose completion reported `byte_len` bytes (GRH
    /// area included), straight into the box the event will own: `make` is given the GRH (if
    /// `grh`) and the MAD's length and returns the box (its MAD zeroed after that length), and
    /// the device's bytes are then read into it, once. `None` if the length is impossible.
    pub(crate) fn copy_out(
        &self,
        index: u32,
        byte_len: u32,
        grh: bool,
        make: impl FnOnce(Option<&[u8; GRH_LEN as usize]>, usize) -> RecvBox,
    ) -> Option<RecvBox> {
        let lease = self.bufs.get(index as usize)?.lease.as_ref()?;
        let len = (byte_len as usize).checked_sub(GRH_LEN as usize)?;
        if !(mad_wire::HEADER_LEN..=MAD_LEN).contains(&len) {
            return None;
        }
        let g = if grh {
            let mut g = [0u8; GRH_LEN as usize];
            lease.read(0, &mut g).ok()?;
            Some(g)
        } else {
            None
        };
        let mut recv = make(g.as_ref(), len);
        lease.read(GRH_LEN as usize, &mut recv.mad[..len]).ok()?;
        Some(recv)
    }

    /// Release buffer `index`'s lease (the device can no longer write it: it was returned and
    /// the device is dead).
    pub(crate) fn release(&mut self, index: u32) {
        if let Some(b) = self.bufs.get_mut(index as usize) {
            if !b.posted && b.lease.take().is_some() {
                self.held -= 1;
            }
        }
    }

    /// Release every buffer that is not posted (the device is dead).
    pub(crate) fn release_idle(&mut self) {
        if self.held == self.posted {
            return;
        }
        for i in 0..self.bufs.len() as u32 {
            self.release(i);
        }
    }

    /// Buffers posted.
    pub(crate) fn posted(&self) -> usize {
        self.posted
    }

    /// Buffers held but not posted.
    pub(crate) fn idle(&self) -> usize {
        self.held - self.posted
    }

    /// Give up every lease: unposted ones are dropped; posted ones are leaked on purpose when
    /// `device_live` (the device may still write them: freeing them would break DESIGN §4.3)
    /// and dropped otherwise. Returns how many were leaked.
    pub(crate) fn shutdown(&mut self, device_live: bool) -> usize {
        let mut leaked = 0;
        for b in &mut self.bufs {
            if let Some(lease) = b.lease.take() {
                if b.posted && device_live {
                    std::mem::forget(lease);
                    leaked += 1;
                }
            }
            b.posted = false;
        }
        self.posted = 0;
        self.held = 0;
        leaked
    }
}

//! A minimal mlx5 driver for the model's tests: host memory behind the model's IOMMU, the
//! command queue with mailboxes, the bring-up, and EQ/CQ/QP rings, all through registers and
//! DMA as a real driver would, with the `firmware-cmds` codecs. Plus a test-only port link
//! that loops packets to its own LID back (deferred through the scheduler, as the network
//! does) and has no SMA.

#![allow(dead_code)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use dma::{Access, DmaMapper, DmaMemory};
use firmware_cmds::mlx5::caps::HcaCaps;
use firmware_cmds::mlx5::cmd::entry::{self, CmdEntry, INLINE_LEN};
use firmware_cmds::mlx5::cmd::header::OutHeader;
use firmware_cmds::mlx5::cmd::mailbox::{
    self, BLOCK_SIZE, ChainCheck, MailboxBlock, blocks_needed,
};
use firmware_cmds::mlx5::cmd::status::{CmdStatus, DeliveryStatus};
use firmware_cmds::mlx5::cqc::Cqc;
use firmware_cmds::mlx5::cqe::{self, Cqe};
use firmware_cmds::mlx5::doorbell::{CqArm, CqArmCmd, EqDoorbell, QpDbRecord};
use firmware_cmds::mlx5::eqc::Eqc;
use firmware_cmds::mlx5::eqe::{self, Eqe};
use firmware_cmds::mlx5::init_seg::off;
use firmware_cmds::mlx5::ops::cq::CreateCq;
use firmware_cmds::mlx5::ops::eq::CreateEq;
use firmware_cmds::mlx5::ops::hca::{EnableHca, InitHca};
use firmware_cmds::mlx5::ops::hca_cap::{CapMode, QueryHcaCap, SetHcaCap};
use firmware_cmds::mlx5::ops::issi::{QueryIssi, SetIssi};
use firmware_cmds::mlx5::ops::pages::{ManagePages, PagesKind, PagesOp, QueryPages};
use firmware_cmds::mlx5::ops::pd::AllocPd;
use firmware_cmds::mlx5::ops::qp::CreateQp;
use firmware_cmds::mlx5::ops::qp_modify::{Init2RtrQp, ModifyQp, Rst2InitQp, Rtr2RtsQp};
use firmware_cmds::mlx5::ops::special_contexts::QuerySpecialContexts;
use firmware_cmds::mlx5::ops::uar::AllocUar;
use firmware_cmds::mlx5::ops::{Command, CommandOutput};
use firmware_cmds::mlx5::qpc::{QpServiceType, Qpc};
use firmware_cmds::mlx5::wqe::{
    CtrlSeg, DataSeg, DatagramSeg, Gather, INVALID_LKEY, UdSendWqe, WqeOpcode, fm_ce_se, recv_wqe,
};
use sim::mlx5::{Mlx5, Mlx5Config};
use sim::pci_config::{COMMAND_MASTER, COMMAND_MEMORY};
use sim::{ClockMode, Device, Packet, PortChange, PortLink, PortSink, PortSnapshot, Scheduler};

/// Where the rig maps its memory.
pub const IOVA_BASE: u64 = 0x1000_0000;
/// How much memory the rig maps.
pub const MEM_LEN: usize = 16 << 20;
/// The Q_Key of QP1.
pub const QP1_QKEY: u32 = 0x8001_0000;
/// The LID the loopback link gives the port.
pub const LID: u16 = 0x11;
/// The last command slot, where a driver puts every MANAGE_PAGES (the kernel's
/// `max_reg_cmds`), as the rig does.
pub const PAGE_SLOT: u8 = (1 << sim::mlx5::config::LOG_CMDQ_SIZE) - 1;

/// Host memory the device reaches at IOVA_BASE.
pub struct HostMem {
    mem: DmaMemory,
}

impl HostMem {
    fn ptr(&self, iova: u64, len: usize) -> *mut u8 {
        let off = iova
            .checked_sub(IOVA_BASE)
            .expect("IOVA below the rig's memory") as usize;
        assert!(off + len <= self.mem.len(), "IOVA beyond the rig's memory");
        // The offset is inside the allocation (checked).
        self.mem.as_ptr().wrapping_add(off)
    }

    /// Writes `data` at `iova`.
    pub fn write(&self, iova: u64, data: &[u8]) {
        let p = self.ptr(iova, data.len());
        // SAFETY: `p .. p + len` is inside the mapping (checked in `ptr`); the model runs on
        // this thread, so nothing touches the memory concurrently.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), p, data.len()) };
    }

    /// Reads `out.len()` bytes at `iova`.
    pub fn read(&self, iova: u64, out: &mut [u8]) {
        let p = self.ptr(iova, out.len());
        // SAFETY: as in `write`.
        unsafe { std::ptr::copy_nonoverlapping(p, out.as_mut_ptr(), out.len()) };
    }

    /// `len` bytes at `iova`.
    pub fn bytes(&self, iova: u64, len: usize) -> Vec<u8> {
        let mut v = vec![0u8; len];
        self.read(iova, &mut v);
        v
    }

    /// A big-endian u32.
    pub fn be32(&self, iova: u64) -> u32 {
        let mut b = [0u8; 4];
        self.read(iova, &mut b);
        u32::from_be_bytes(b)
    }

    /// Writes a big-endian u32.
    pub fn set_be32(&self, iova: u64, v: u32) {
        self.write(iova, &v.to_be_bytes());
    }
}

/// A command as prepared before posting, for tests to spoil.
pub struct Prepared {
    pub entry: CmdEntry,
    pub in_blocks: Vec<MailboxBlock>,
    pub in_addrs: Vec<u64>,
    pub out_blocks: Vec<MailboxBlock>,
    pub out_addrs: Vec<u64>,
    /// Reseal the entry signature after the test's edits.
    pub seal: bool,
    /// Bytes to write over the raw entry after sealing (offset, value).
    pub raw_edits: Vec<(usize, u8)>,
}

/// A posted command.
#[derive(Debug, Clone, Copy)]
pub struct Posted {
    pub slot: u8,
    pub outlen: usize,
    pub out_ptr: u64,
    pub token: u8,
}

/// A command's completion.
#[derive(Debug, Clone)]
pub struct Done {
    pub delivery: DeliveryStatus,
    pub out: Vec<u8>,
}

impl Done {
    /// The output's command status.
    pub fn status(&self) -> CmdStatus {
        OutHeader::decode(&self.out).map_or(CmdStatus(0xff), |h| h.status)
    }

    /// The output's syndrome.
    pub fn syndrome(&self) -> u32 {
        OutHeader::decode(&self.out).map_or(0, |h| h.syndrome)
    }
}

const MAX_BLOCKS: usize = 16;

/// The mini driver.
pub struct Rig {
    pub dev: Arc<Mlx5>,
    pub mem: HostMem,
    bump: u64,
    pub cmdq: u64,
    token: u8,
    in_mbox: Vec<Vec<u64>>,
    out_mbox: Vec<Vec<u64>>,
    /// Command checksums are on (after SET_HCA_CAP asked for them).
    pub checksum: bool,
    pub uar: u32,
    pub pd: u32,
    pub resd_lkey: u32,
    /// Pages given to the firmware.
    pub given: Vec<u64>,
    bf_toggle: u64,
}

impl Rig {
    /// A default ConnectX-5 on a virtual clock, memory mapped, bus mastering on, the
    /// command queue set up (not yet enabled).
    pub fn new() -> Self {
        Self::with_config(Mlx5Config::default())
    }

    /// As [`Rig::new`] with a configuration.
    pub fn with_config(cfg: Mlx5Config) -> Self {
        let sched = Arc::new(Scheduler::new(ClockMode::Virtual));
        Self::on(Mlx5::new(cfg, sched).unwrap())
    }

    /// A rig driving `dev` (built by the caller, e.g. on a network).
    pub fn on(dev: Mlx5) -> Self {
        let dev = Arc::new(dev);
        let mem = DmaMemory::new(MEM_LEN).unwrap();
        // SAFETY: `mem` lives in the rig as long as the device can reach it; the rig never
        // unmaps before dropping both.
        unsafe {
            dev.iommu()
                .map(mem.as_ptr(), MEM_LEN, IOVA_BASE, Access::ReadWrite)
                .unwrap();
        }
        dev.config()
            .write(0x04, &(COMMAND_MEMORY | COMMAND_MASTER).to_le_bytes());
        let mut rig = Rig {
            dev,
            mem: HostMem { mem },
            bump: IOVA_BASE,
            cmdq: 0,
            token: 0,
            in_mbox: Vec::new(),
            out_mbox: Vec::new(),
            checksum: false,
            uar: 0,
            pd: 0,
            resd_lkey: 0,
            given: Vec::new(),
            bf_toggle: 0,
        };
        rig.cmdq = rig.alloc(4096, 4096);
        for _ in 0..32 {
            let i = (0..MAX_BLOCKS).map(|_| rig.alloc(1024, 1024)).collect();
            let o = (0..MAX_BLOCKS).map(|_| rig.alloc(1024, 1024)).collect();
            rig.in_mbox.push(i);
            rig.out_mbox.push(o);
        }
        rig
    }

    /// Zeroed memory of `len` bytes aligned to `align`.
    pub fn alloc(&mut self, len: usize, align: u64) -> u64 {
        let at = self.bump.next_multiple_of(align);
        self.bump = at + len as u64;
        assert!(
            self.bump <= IOVA_BASE + MEM_LEN as u64,
            "rig memory exhausted"
        );
        self.mem.write(at, &vec![0u8; len]);
        at
    }

    pub fn rd32(&self, off: u64) -> u32 {
        let mut b = [0u8; 4];
        self.dev.mmio_read(0, off, &mut b);
        u32::from_be_bytes(b)
    }

    pub fn wr32(&self, off: u64, v: u32) {
        self.dev.mmio_write(0, off, &v.to_be_bytes());
    }

    pub fn wr64(&self, off: u64, v: u64) {
        self.dev.mmio_write(0, off, &v.to_be_bytes());
    }

    /// Lets virtual time pass (runs the scheduler: deliveries, delayed CQEs).
    pub fn wait(&self, d: Duration) {
        let deadline = self.dev.clock().now() + d;
        while self.dev.clock().now() < deadline {
            self.dev.run_until(deadline);
        }
    }

    /// Runs what is due now without letting time pass.
    pub fn settle(&self) {
        self.dev.run_until(self.dev.clock().now());
        self.dev.scheduler().run_due();
    }

    /// Waits for `initializing` to clear, then writes the command queue address.
    pub fn start(&mut self) {
        let mut spins = 0;
        while self.rd32(off::INITIALIZING as u64) >> 31 != 0 {
            self.wait(Duration::from_millis(2));
            spins += 1;
            assert!(spins < 1000, "firmware never finished initializing");
        }
        self.wr32(off::CMDQ_ADDR_H as u64, (self.cmdq >> 32) as u32);
        self.wr32(off::CMDQ_ADDR_L_SZ as u64, self.cmdq as u32);
    }

    fn next_token(&mut self) -> u8 {
        self.token = self.token.wrapping_add(1).max(1);
        self.token
    }

    /// Prepares a command for `slot`.
    pub fn prepare(&mut self, slot: u8, input: &[u8], outlen: usize) -> Prepared {
        let token = self.next_token();
        let nin = blocks_needed(input.len());
        let nout = blocks_needed(outlen);
        assert!(nin <= MAX_BLOCKS && nout <= MAX_BLOCKS);
        let in_addrs = self.in_mbox[usize::from(slot)][..nin].to_vec();
        let out_addrs = self.out_mbox[usize::from(slot)][..nout].to_vec();
        let fin = mailbox::frame(input, &in_addrs, token, self.checksum).unwrap();
        let fout = mailbox::frame(&vec![0u8; outlen], &out_addrs, token, self.checksum).unwrap();
        let entry = CmdEntry::new_request(
            fin.inline,
            input.len() as u32,
            in_addrs.first().copied().unwrap_or(0),
            outlen as u32,
            out_addrs.first().copied().unwrap_or(0),
            token,
        );
        Prepared {
            entry,
            in_blocks: fin.blocks,
            in_addrs,
            out_blocks: fout.blocks,
            out_addrs,
            seal: true,
            raw_edits: Vec::new(),
        }
    }

    /// Writes a prepared command into `slot` and rings its doorbell.
    pub fn post(&mut self, slot: u8, p: &Prepared) -> Posted {
        for (b, &a) in p.in_blocks.iter().zip(&p.in_addrs) {
            self.mem.write(a, &b.encode());
        }
        for (b, &a) in p.out_blocks.iter().zip(&p.out_addrs) {
            self.mem.write(a, &b.encode());
        }
        let mut raw = if p.seal {
            p.entry.encode_sealed()
        } else {
            p.entry.encode()
        };
        for &(o, v) in &p.raw_edits {
            raw[o] = v;
        }
        let at = self.cmdq + u64::from(slot) * 64;
        self.mem.write(at, &raw);
        self.wr32(off::CMD_DBELL as u64, 1 << slot);
        Posted {
            slot,
            outlen: p.entry.outlen as usize,
            out_ptr: p.entry.out_ptr,
            token: p.entry.token,
        }
    }

    /// The completion of a posted command, `None` while the device owns the entry.
    pub fn completion(&self, p: &Posted) -> Option<Done> {
        let at = self.cmdq + u64::from(p.slot) * 64;
        let raw = self.mem.bytes(at, 64);
        let e = CmdEntry::decode(&raw).unwrap();
        if e.hw_owned {
            return None;
        }
        if self.checksum {
            assert!(CmdEntry::signature_ok(&raw), "device entry signature");
        }
        if e.delivery_status != DeliveryStatus::OK {
            return Some(Done {
                delivery: e.delivery_status,
                out: Vec::new(),
            });
        }
        let out = mailbox::gather(
            &e.out_inline,
            p.outlen,
            p.out_ptr,
            ChainCheck {
                token: p.token,
                verify_signatures: self.checksum,
                output: true,
            },
            |a| {
                let mut b = [0u8; BLOCK_SIZE];
                self.mem.read(a, &mut b);
                Some(b)
            },
        )
        .unwrap();
        Some(Done {
            delivery: e.delivery_status,
            out,
        })
    }

    /// Runs `input` on slot 0 and returns its completion (which must be immediate).
    pub fn cmd(&mut self, input: &[u8], outlen: usize) -> Done {
        self.cmd_on(0, input, outlen)
    }

    /// Runs `input` on `slot`.
    pub fn cmd_on(&mut self, slot: u8, input: &[u8], outlen: usize) -> Done {
        let p = self.prepare(slot, input, outlen);
        let posted = self.post(slot, &p);
        self.completion(&posted).expect("command did not complete")
    }

    /// Runs a typed command on slot 0.
    pub fn exec<C: Command>(&mut self, c: &C) -> firmware_cmds::Result<C::Output> {
        self.exec_on(0, c)
    }

    /// Runs a typed command on `slot`.
    pub fn exec_on<C: Command>(&mut self, slot: u8, c: &C) -> firmware_cmds::Result<C::Output> {
        let input = c.encode()?;
        let d = self.cmd_on(slot, &input, c.out_len());
        assert_eq!(
            d.delivery,
            DeliveryStatus::OK,
            "delivery of {:?}",
            C::OPCODE
        );
        C::Output::decode(&d.out)
    }

    /// The status a typed command gets.
    pub fn status<C: Command>(&mut self, c: &C) -> CmdStatus {
        let input = c.encode().unwrap();
        let d = self.cmd(&input, c.out_len());
        assert_eq!(d.delivery, DeliveryStatus::OK);
        d.status()
    }

    /// The status and syndrome a typed command gets.
    pub fn outcome<C: Command>(&mut self, c: &C) -> (CmdStatus, u32) {
        let input = c.encode().unwrap();
        let d = self.cmd(&input, c.out_len());
        assert_eq!(d.delivery, DeliveryStatus::OK);
        (d.status(), d.syndrome())
    }

    /// The general capabilities in force (QUERY_HCA_CAP, current).
    pub fn caps(&mut self) -> HcaCaps {
        self.exec(&QueryHcaCap::general(CapMode::Current))
            .unwrap()
            .caps
    }

    /// `n` fresh 4 KiB pages.
    pub fn pages(&mut self, n: usize) -> Vec<u64> {
        (0..n).map(|_| self.alloc(4096, 4096)).collect()
    }

    /// QUERY_PAGES `kind` and MANAGE_PAGES GIVE of what it asks (on [`PAGE_SLOT`]).
    pub fn give_pages(&mut self, kind: PagesKind) -> usize {
        let q = self
            .exec(&QueryPages {
                kind,
                function_id: 0,
                embedded_cpu_function: false,
            })
            .unwrap();
        let n = q.num_pages.max(0) as usize;
        if n > 0 {
            let pas = self.pages(n);
            self.given.extend(&pas);
            self.exec_on(
                PAGE_SLOT,
                &ManagePages {
                    op: PagesOp::Give(pas),
                    function_id: q.function_id,
                    embedded_cpu_function: false,
                },
            )
            .unwrap();
        }
        n
    }

    /// The bring-up up to INIT_HCA, with command checksums turned on if `checksum`.
    pub fn init(&mut self, checksum: bool) {
        self.start();
        self.exec(&EnableHca::default()).unwrap();
        let issi = self.exec(&QueryIssi).unwrap();
        assert!(issi.supports(1));
        self.exec(&SetIssi { current_issi: 1 }).unwrap();
        self.give_pages(PagesKind::Boot);
        let mut cur = self
            .exec(&QueryHcaCap::general(CapMode::Current))
            .unwrap()
            .caps;
        if checksum {
            cur.set_cmdif_checksum(3).unwrap();
        }
        self.exec(&SetHcaCap {
            cap_type: firmware_cmds::mlx5::caps::CapType::GENERAL,
            other_function: false,
            function_id: 0,
            caps: cur,
        })
        .unwrap();
        self.checksum = checksum;
        self.give_pages(PagesKind::Init);
        self.exec(&InitHca::default()).unwrap();
    }

    /// [`Rig::init`] plus a UAR, a PD and the reserved lkey.
    pub fn up(&mut self, checksum: bool) {
        self.init(checksum);
        self.uar = self.exec(&AllocUar).unwrap().uar;
        self.pd = self.exec(&AllocPd).unwrap().pd;
        self.resd_lkey = self.exec(&QuerySpecialContexts).unwrap().resd_lkey;
    }

    /// BAR0 offset of the rig's UAR.
    pub fn uar_base(&self) -> u64 {
        u64::from(self.uar) * 4096
    }

    /// An EQ of `1 << log` entries taking `events`, on MSI-X vector `intr`, armed.
    pub fn create_eq(&mut self, events: &[u8], log: u8, intr: u16) -> EqRing {
        let nent = 1u32 << log;
        let len = (nent as usize * 64).max(4096);
        let buf = self.alloc(len, 4096);
        for i in 0..nent {
            self.mem
                .write(buf + u64::from(i) * 64 + 63, &[eqe::OWNER_INIT_VAL]);
        }
        let mut c = CreateEq {
            ctx: Eqc {
                log_eq_size: log,
                uar_page: self.uar,
                intr,
                ..Eqc::default()
            },
            event_bitmask: [0; 4],
            pas: (0..len as u64 / 4096).map(|i| buf + i * 4096).collect(),
        };
        for &t in events {
            c = c.with_event(t);
        }
        let eqn = self.exec(&c).unwrap().eqn;
        let mut eq = EqRing {
            eqn,
            buf,
            nent,
            ci: 0,
        };
        eq.doorbell(self, true);
        eq
    }

    /// A CQ of `1 << log` 64-byte entries on EQ `eqn`.
    pub fn create_cq(&mut self, eqn: u8, log: u8) -> CqRing {
        let nent = 1u32 << log;
        let len = (nent as usize * 64).max(4096);
        let buf = self.alloc(len, 4096);
        for i in 0..nent {
            self.mem
                .write(buf + u64::from(i) * 64 + 63, &[cqe::INITIAL_OP_OWN]);
        }
        let dbr = self.alloc(64, 64);
        let cqn = self
            .exec(&CreateCq {
                ctx: Cqc {
                    log_cq_size: log,
                    uar_page: self.uar,
                    c_eqn: u32::from(eqn),
                    dbr_addr: dbr,
                    ..Cqc::default()
                },
                pas: (0..len as u64 / 4096).map(|i| buf + i * 4096).collect(),
            })
            .unwrap()
            .cqn;
        CqRing {
            cqn,
            buf,
            dbr,
            nent,
            ci: 0,
        }
    }

    /// A QP of `st` with `1 << log_sq` send basic blocks and `1 << log_rq` receive WQEs of
    /// 32 bytes (two data segments), in RST.
    pub fn create_qp(
        &mut self,
        st: QpServiceType,
        scq: &CqRing,
        rcq: &CqRing,
        log_sq: u8,
        log_rq: u8,
    ) -> QpRing {
        let rq_stride = 32usize;
        let rq_bytes = rq_stride << log_rq;
        let sq_bytes = 64usize << log_sq;
        let len = (rq_bytes + sq_bytes).next_multiple_of(4096);
        let buf = self.alloc(len, 4096);
        let dbr = self.alloc(64, 64);
        let qpn = self
            .exec(&CreateQp {
                ctx: Qpc {
                    st,
                    pd: self.pd,
                    log_rq_size: log_rq,
                    log_rq_stride: 1,
                    log_sq_size: log_sq,
                    rlky: true,
                    uar_page: self.uar,
                    cqn_snd: scq.cqn,
                    cqn_rcv: rcq.cqn,
                    dbr_addr: dbr,
                    ..Qpc::default()
                },
                opt_param_mask: 0,
                input_qpn: 0,
                pas: (0..len as u64 / 4096).map(|i| buf + i * 4096).collect(),
            })
            .unwrap()
            .qpn;
        QpRing {
            qpn,
            buf,
            dbr,
            sq_offset: rq_bytes as u64,
            sq_bbs: 1 << log_sq,
            rq_n: 1 << log_rq,
            rq_stride,
            sq_pc: 0,
            rq_pc: 0,
        }
    }

    /// RST -> INIT -> RTR -> RTS on port 1 with `qkey` and P_Key index 0.
    pub fn qp_to_rts(&mut self, qp: &QpRing, qkey: u32) {
        let m = ModifyQp {
            qpn: qp.qpn,
            opt_param_mask: 0,
            ctx: Qpc {
                port: 1,
                q_key: qkey,
                ..Qpc::default()
            },
        };
        self.exec(&Rst2InitQp(m)).unwrap();
        self.exec(&Init2RtrQp(ModifyQp {
            ctx: Qpc::default(),
            ..m
        }))
        .unwrap();
        self.exec(&Rtr2RtsQp(ModifyQp {
            ctx: Qpc::default(),
            ..m
        }))
        .unwrap();
    }

    /// Rings the send doorbell of `qp` with the first 8 bytes of `ctrl`, alternating the
    /// BlueFlame halves as drivers do.
    pub fn ring_send(&mut self, ctrl: &CtrlSeg) {
        let off = self.uar_base() + 0x800 + (self.bf_toggle & 1) * 0x100;
        self.bf_toggle += 1;
        self.dev
            .mmio_write(0, off, &ctrl.doorbell_qword().unwrap().to_be_bytes());
    }
}

/// An EQ ring on the driver side.
pub struct EqRing {
    pub eqn: u8,
    pub buf: u64,
    pub nent: u32,
    pub ci: u32,
}

impl EqRing {
    /// The next software-owned EQE.
    pub fn poll(&mut self, rig: &Rig) -> Option<Eqe> {
        let at = self.buf + u64::from(self.ci & (self.nent - 1)) * 64;
        let raw = rig.mem.bytes(at, 64);
        if !eqe::sw_owned(raw[63], self.ci, self.nent) {
            return None;
        }
        self.ci += 1;
        Some(Eqe::decode(&raw).unwrap())
    }

    /// Every EQE available now.
    pub fn drain(&mut self, rig: &Rig) -> Vec<Eqe> {
        std::iter::from_fn(|| self.poll(rig)).collect()
    }

    /// Updates the consumer index (and arms).
    pub fn doorbell(&mut self, rig: &Rig, arm: bool) {
        let d = EqDoorbell {
            eqn: self.eqn,
            ci: self.ci,
            arm,
        };
        rig.wr32(rig.uar_base() + d.offset() as u64, d.value());
    }
}

/// A CQ ring on the driver side.
pub struct CqRing {
    pub cqn: u32,
    pub buf: u64,
    pub dbr: u64,
    pub nent: u32,
    pub ci: u32,
}

impl CqRing {
    /// The next software-owned CQE (and the consumer index in the doorbell record).
    pub fn poll(&mut self, rig: &Rig) -> Option<Cqe> {
        let at = self.buf + u64::from(self.ci & (self.nent - 1)) * 64;
        let raw = rig.mem.bytes(at, 64);
        if !cqe::sw_owned(raw[63], self.ci, self.nent) {
            return None;
        }
        self.ci += 1;
        rig.mem.set_be32(self.dbr, self.ci & 0x00ff_ffff);
        Some(Cqe::decode(&raw).unwrap())
    }

    /// Every CQE available now.
    pub fn drain(&mut self, rig: &Rig) -> Vec<Cqe> {
        std::iter::from_fn(|| self.poll(rig)).collect()
    }

    /// Arms for the next completion.
    pub fn arm(&self, rig: &Rig) {
        let a = CqArm {
            sn: 0,
            cmd: CqArmCmd::NextCompletion,
            ci: self.ci,
        };
        rig.mem.set_be32(self.dbr + 4, a.word());
        rig.wr64(rig.uar_base() + 0x20, a.uar_doorbell(self.cqn));
    }
}

/// A QP on the driver side.
pub struct QpRing {
    pub qpn: u32,
    pub buf: u64,
    pub dbr: u64,
    pub sq_offset: u64,
    pub sq_bbs: u32,
    pub rq_n: u32,
    pub rq_stride: usize,
    pub sq_pc: u16,
    pub rq_pc: u16,
}

impl QpRing {
    /// Posts a receive of `len` bytes at `addr` and updates the doorbell record.
    pub fn post_recv(&mut self, rig: &Rig, addr: u64, len: u32) {
        self.post_recv_segs(
            rig,
            &[DataSeg {
                byte_count: len,
                lkey: rig.resd_lkey,
                addr,
            }],
        );
    }

    /// Posts a receive WQE of the scatter entries `segs` (at most `rq_stride / 16`; fewer
    /// get the terminator, with the fallback key: the model does not advertise
    /// `terminate_scatter_list_mkey`) and updates the doorbell record.
    pub fn post_recv_segs(&mut self, rig: &Rig, segs: &[DataSeg]) {
        let wqe = recv_wqe(segs, self.rq_stride / 16, INVALID_LKEY).unwrap();
        let at =
            self.buf + u64::from(u32::from(self.rq_pc) & (self.rq_n - 1)) * self.rq_stride as u64;
        rig.mem.write(at, &wqe);
        self.rq_pc = self.rq_pc.wrapping_add(1);
        rig.mem
            .write(self.dbr, &QpDbRecord::counter_bytes(self.rq_pc.into()));
    }

    /// Writes a UD send WQE described by `s`, updates the doorbell record and returns the
    /// control segment for the doorbell.
    pub fn write_send(&mut self, rig: &Rig, s: &SendSpec) -> CtrlSeg {
        let ctrl = CtrlSeg {
            wqe_index: self.sq_pc,
            opcode: WqeOpcode::SEND,
            qpn: self.qpn,
            fm_ce_se: if s.signaled { fm_ce_se::CQ_UPDATE } else { 0 },
            ..CtrlSeg::default()
        };
        let wqe = UdSendWqe {
            ctrl,
            av: DatagramSeg {
                qkey: s.qkey,
                dqpn: s.dqpn,
                extended_ud: true,
                rlid: s.dlid,
                ..DatagramSeg::default()
            },
            gather: vec![Gather::Data(DataSeg {
                byte_count: s.len,
                lkey: s.lkey.unwrap_or(rig.resd_lkey),
                addr: s.addr,
            })],
        };
        self.write_wqe(rig, &wqe)
    }

    /// Writes a one-DS NOP WQE and updates the doorbell record.
    pub fn write_nop(&mut self, rig: &Rig, signaled: bool) -> CtrlSeg {
        self.write_ctrl_only(rig, WqeOpcode::NOP, self.qpn, 1, signaled)
    }

    /// Writes a WQE that is only a control segment with the given fields (malformed ones
    /// included) and updates the doorbell record by one basic block.
    pub fn write_ctrl_only(
        &mut self,
        rig: &Rig,
        opcode: WqeOpcode,
        qpn: u32,
        ds: u8,
        signaled: bool,
    ) -> CtrlSeg {
        let ctrl = CtrlSeg {
            wqe_index: self.sq_pc,
            opcode,
            qpn,
            ds,
            fm_ce_se: if signaled { fm_ce_se::CQ_UPDATE } else { 0 },
            ..CtrlSeg::default()
        };
        let mut bb = [0u8; 64];
        bb[..16].copy_from_slice(&ctrl.to_bytes().unwrap());
        let idx = u32::from(self.sq_pc) & (self.sq_bbs - 1);
        rig.mem
            .write(self.buf + self.sq_offset + u64::from(idx) * 64, &bb);
        self.sq_pc = self.sq_pc.wrapping_add(1);
        rig.mem
            .write(self.dbr + 4, &QpDbRecord::counter_bytes(self.sq_pc.into()));
        ctrl
    }

    /// Writes `wqe` at the producer index (wrapping by basic block) and updates the doorbell
    /// record; returns the control segment as written.
    pub fn write_wqe(&mut self, rig: &Rig, wqe: &UdSendWqe) -> CtrlSeg {
        let (bytes, bbs) = wqe.to_bytes().unwrap();
        for (i, bb) in bytes.chunks(64).enumerate() {
            let idx = u32::from(self.sq_pc.wrapping_add(i as u16)) & (self.sq_bbs - 1);
            rig.mem
                .write(self.buf + self.sq_offset + u64::from(idx) * 64, bb);
        }
        let ctrl = CtrlSeg::decode(&bytes).unwrap();
        self.sq_pc = self.sq_pc.wrapping_add(bbs as u16);
        rig.mem
            .write(self.dbr + 4, &QpDbRecord::counter_bytes(self.sq_pc.into()));
        ctrl
    }
}

/// A UD send as the tests describe it.
#[derive(Debug, Clone, Copy)]
pub struct SendSpec {
    /// Payload address.
    pub addr: u64,
    /// Payload length.
    pub len: u32,
    /// Destination LID.
    pub dlid: u16,
    /// Destination QP.
    pub dqpn: u32,
    /// Q_Key of the WQE.
    pub qkey: u32,
    /// Ask for a CQE.
    pub signaled: bool,
    /// Another lkey than the reserved one.
    pub lkey: Option<u32>,
}

impl SendSpec {
    /// A signaled 256-byte MAD at `addr` to QP1 of the loopback LID.
    pub fn mad(addr: u64) -> Self {
        SendSpec {
            addr,
            len: 256,
            dlid: LID,
            dqpn: 1,
            qkey: QP1_QKEY,
            signaled: true,
            lkey: None,
        }
    }
}

/// A port link for tests: loops packets addressed to its own LID back to the device through
/// the scheduler (as the network defers deliveries), records every packet, and has no SMA.
pub struct Loopback {
    sched: Arc<Scheduler>,
    sink: Mutex<Option<Arc<dyn PortSink>>>,
    pub sent: Mutex<Vec<Packet>>,
    pub lid: u16,
}

impl Loopback {
    /// A link for `rig`'s port 1, attached.
    pub fn attach(rig: &Rig) -> Arc<Loopback> {
        let l = Arc::new(Loopback {
            sched: rig.dev.scheduler().clone(),
            sink: Mutex::new(Some(rig.dev.sink())),
            sent: Mutex::new(Vec::new()),
            lid: LID,
        });
        rig.dev.attach_port(1, l.clone()).unwrap();
        l
    }

    /// Delivers `p` to the device as if it came from the wire.
    pub fn inject(&self, p: Packet) {
        if let Some(s) = self.sink.lock().unwrap().clone() {
            self.sched
                .schedule_in(Duration::ZERO, Box::new(move || s.deliver(1, p)));
        }
    }

    /// Tells the device its port changed.
    pub fn change(&self, c: PortChange) {
        if let Some(s) = self.sink.lock().unwrap().clone() {
            self.sched
                .schedule_in(Duration::ZERO, Box::new(move || s.port_changed(1, c)));
        }
    }
}

impl PortLink for Loopback {
    fn transmit(&self, packet: Packet) {
        self.sent.lock().unwrap().push(packet.clone());
        if packet.dlid == self.lid {
            self.inject(packet);
        }
    }

    fn local_mad(&self, _mad: &[u8; 256], _ignore_mkey: bool) -> Option<[u8; 256]> {
        None
    }

    fn modify_capability_mask(&self, _set: u32, _clear: u32) -> u32 {
        0
    }

    fn port_info(&self) -> PortSnapshot {
        active_port(self.lid)
    }
}

/// An active port at `lid` (LMC 0, SM at LID 1), as a test link reports it.
pub fn active_port(lid: u16) -> PortSnapshot {
    PortSnapshot {
        state: 4,
        phys_state: 5,
        lid,
        lmc: 0,
        sm_lid: 1,
        port_guid: 0x0002_c903_0000_0002,
        node_guid: 0x0002_c903_0000_0001,
        subnet_prefix: 0xfe80_0000_0000_0000,
        pkey_table_len: 128,
        ..PortSnapshot::default()
    }
}

/// The in-line region of an entry output, for tests that look at raw bytes.
pub const OUT_INLINE: usize = entry::off::OUT;
/// Size of the inline part.
pub const INLINE: usize = INLINE_LEN;

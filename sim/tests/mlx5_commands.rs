//! The simulated ConnectX's initialization segment and command queue, driven through its
//! registers and the IOMMU: the bring-up, every delivery status a malformed entry or mailbox
//! chain gets, the command statuses of bad inputs, and the firmware's pages (boot, init,
//! run-time requests, one raised while a command is pending, and the reclaim at teardown).

mod mlx5rig;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use firmware_cmds::mlx5::cmd::entry::{self, CmdEntry};
use firmware_cmds::mlx5::cmd::mailbox;
use firmware_cmds::mlx5::cmd::status::{CmdStatus, DeliveryStatus};
use firmware_cmds::mlx5::cqc::Cqc;
use firmware_cmds::mlx5::eqe::{EqeEvent, EventType};
use firmware_cmds::mlx5::init_seg::{self, CmdqAddrLoSz, FwRev, HealthCounter, off};
use firmware_cmds::mlx5::opcode::Opcode;
use firmware_cmds::mlx5::ops::Command;
use firmware_cmds::mlx5::ops::cq::{CreateCq, DestroyCq};
use firmware_cmds::mlx5::ops::eq::{CreateEq, DestroyEq};
use firmware_cmds::mlx5::ops::hca::{DisableHca, EnableHca, InitHca, TeardownHca, TeardownProfile};
use firmware_cmds::mlx5::ops::hca_cap::{CapMode, QueryHcaCap};
use firmware_cmds::mlx5::ops::issi::SetIssi;
use firmware_cmds::mlx5::ops::mad_ifc::MadIfc;
use firmware_cmds::mlx5::ops::pages::{ManagePages, PagesKind, PagesOp, QueryPages};
use firmware_cmds::mlx5::ops::pd::{AllocPd, DeallocPd};
use firmware_cmds::mlx5::ops::qp::DestroyQp;
use firmware_cmds::mlx5::qpc::QpServiceType;
use mlx5rig::{IOVA_BASE, PAGE_SLOT, Rig};
use sim::mlx5::FetchedCommand;
use sim::mlx5::config::CONNECTX5_DEVICE;
use sim::mlx5::syndrome;
use sim::{Device, IrqKind};

fn pd_count(rig: &Rig) -> usize {
    rig.dev.resources().pds
}

#[test]
fn init_segment_reports_identity_and_boots() {
    let rig = Rig::new();
    assert_eq!(rig.dev.ids(), (0x15b3, CONNECTX5_DEVICE));
    let fw = FwRev::from_regs(
        rig.rd32(off::FW_REV as u64),
        rig.rd32(off::CMDIF_REV_FW_SUB as u64),
    );
    assert_eq!((fw.major, fw.minor, fw.subminor), (16, 35, 2000));
    assert_eq!(
        init_seg::cmdif_rev(rig.rd32(off::CMDIF_REV_FW_SUB as u64)),
        5
    );
    let sz = CmdqAddrLoSz::decode(rig.rd32(off::CMDQ_ADDR_L_SZ as u64));
    assert_eq!((sz.log_cmdq_size, sz.log_cmdq_stride), (5, 6));
    sz.check_geometry().unwrap();
    assert_eq!(
        rig.rd32(off::INITIALIZING as u64) >> 31,
        1,
        "firmware is still booting at power-on"
    );
    let c0 = HealthCounter::decode(rig.rd32(off::HEALTH_COUNTER as u64)).counter;
    rig.wait(Duration::from_secs(1));
    assert_eq!(rig.rd32(off::INITIALIZING as u64) >> 31, 0);
    let c1 = HealthCounter::decode(rig.rd32(off::HEALTH_COUNTER as u64)).counter;
    assert_eq!(c1 - c0, 10, "one increment per 100 ms of device time");
    // The health buffer's fw_ver is the firmware version, not all-ones.
    assert_ne!(rig.rd32(off::HEALTH as u64 + 0x30), 0xffff_ffff);
}

#[test]
fn bring_up_gives_boot_and_init_pages_and_counts_commands() {
    let mut rig = Rig::new();
    rig.up(false);
    let cfg = rig.dev.mlx5_config().clone();
    assert_eq!(
        rig.dev.pages_held(),
        u64::from(cfg.boot_pages + cfg.init_pages)
    );
    let c = rig.dev.counters();
    assert_eq!(c.command_count(Opcode::INIT_HCA.0), 1);
    assert_eq!(c.command_count(Opcode::QUERY_PAGES.0), 2);
    assert_eq!(c.command_count(Opcode::MANAGE_PAGES.0), 2);
    assert!(c.command_failures.is_empty(), "{:?}", c.command_failures);
    assert_eq!(c.delivery_errors, 0);
    assert_eq!(rig.dev.iommu().fault_count(), 0);
    // Firmware uses its pages: each was overwritten through the IOMMU.
    let page = rig.mem.bytes(rig.given[0], 4096);
    assert!(page.iter().all(|&b| b == 0xa5), "page pattern");
    // Caps as a ConnectX in IB mode reports them.
    let caps = rig
        .exec(&QueryHcaCap::general(CapMode::Current))
        .unwrap()
        .caps;
    assert_eq!(caps.port_type(), 0, "InfiniBand");
    assert_eq!(caps.num_ports(), 1);
    assert!(!caps.ib_virt());
    assert!(caps.ud());
}

#[test]
fn unknown_and_unimplemented_opcodes_get_bad_op() {
    let mut rig = Rig::new();
    rig.up(false);
    let mut input = vec![0u8; 16];
    input[0..2].copy_from_slice(&0x0999u16.to_be_bytes());
    let d = rig.cmd(&input, 16);
    assert_eq!(d.delivery, DeliveryStatus::OK);
    assert_eq!(d.status(), CmdStatus::BAD_OP_ERR);
    input[0..2].copy_from_slice(&Opcode::CREATE_MKEY.0.to_be_bytes());
    assert_eq!(rig.cmd(&input, 16).status(), CmdStatus::BAD_OP_ERR);
}

#[test]
fn bad_parameters_get_bad_param() {
    let mut rig = Rig::new();
    rig.up(false);
    assert_eq!(
        rig.status(&SetIssi { current_issi: 1 }),
        CmdStatus::BAD_RES_STATE_ERR,
        "SET_ISSI after INIT_HCA"
    );
    // An EQ on an MSI-X vector the function does not have.
    let mut c = CreateEq::default().with_event(EventType::CMD.0);
    c.ctx.log_eq_size = 2;
    c.ctx.uar_page = rig.uar;
    c.ctx.intr = 4000;
    c.pas = vec![rig.alloc(4096, 4096)];
    assert_eq!(
        rig.outcome(&c),
        (CmdStatus::BAD_PARAM_ERR, syndrome::VECTOR)
    );
    // Pages for another function.
    assert_eq!(
        rig.outcome(&QueryPages {
            kind: PagesKind::Regular,
            function_id: 3,
            embedded_cpu_function: false
        }),
        (CmdStatus::BAD_PARAM_ERR, syndrome::FUNCTION)
    );
    assert_eq!(rig.dev.resources().eqs, 0);
}

/// One page of `4 KiB << log_page_size` that holds `bytes`, at an address aligned to it
/// (nothing is mapped there: the queues made over it are never written).
fn one_page_for(bytes: u64) -> (u8, Vec<u64>) {
    let shift = bytes.next_power_of_two().trailing_zeros().max(12);
    ((shift - 12) as u8, vec![1u64 << shift])
}

#[test]
fn an_eq_larger_than_log_max_eq_sz_is_refused_for_its_size() {
    let mut rig = Rig::new();
    rig.up(false);
    let max = rig.caps().log_max_eq_sz();
    // The buffer holds 2^(max + 1) EQEs, so only the size check can refuse the larger EQ.
    let (log_page_size, pas) = one_page_for(64 << (max + 1));
    let mut c = CreateEq::default();
    c.ctx.uar_page = rig.uar;
    c.ctx.log_page_size = log_page_size;
    c.pas = pas;
    c.ctx.log_eq_size = max as u8;
    let eqn = rig.exec(&c).expect("an EQ of log_max_eq_sz").eqn;
    rig.exec(&DestroyEq { eqn }).unwrap();
    c.ctx.log_eq_size = max as u8 + 1;
    assert_eq!(
        rig.outcome(&c),
        (CmdStatus::BAD_PARAM_ERR, syndrome::QUEUE_SIZE)
    );
    assert_eq!(rig.dev.resources().eqs, 0);
}

#[test]
fn a_cq_larger_than_log_max_cq_sz_is_refused_for_its_size() {
    let mut rig = Rig::new();
    rig.up(false);
    let eq = rig.create_eq(&[EventType::COMP.0], 2, 0);
    let max = rig.caps().log_max_cq_sz();
    let (log_page_size, pas) = one_page_for(64 << (max + 1));
    let mut c = CreateCq {
        ctx: Cqc {
            uar_page: rig.uar,
            c_eqn: u32::from(eq.eqn),
            dbr_addr: rig.alloc(64, 64),
            log_page_size,
            log_cq_size: max as u8,
            ..Cqc::default()
        },
        pas,
    };
    let cqn = rig.exec(&c).expect("a CQ of log_max_cq_sz").cqn;
    rig.exec(&DestroyCq { cqn }).unwrap();
    c.ctx.log_cq_size = max as u8 + 1;
    assert_eq!(
        rig.outcome(&c),
        (CmdStatus::BAD_PARAM_ERR, syndrome::QUEUE_SIZE)
    );
    assert_eq!(rig.dev.resources().cqs, 0);
}

#[test]
fn set_issi_before_init_validates_its_value() {
    let mut rig = Rig::new();
    rig.start();
    rig.exec(&EnableHca::default()).unwrap();
    assert_eq!(
        rig.status(&SetIssi { current_issi: 7 }),
        CmdStatus::BAD_PARAM_ERR
    );
    assert_eq!(rig.status(&SetIssi { current_issi: 1 }), CmdStatus::OK);
}

#[test]
fn commands_out_of_phase_or_on_busy_resources_get_bad_resource_state() {
    let mut rig = Rig::new();
    rig.start();
    // Before ENABLE_HCA, as observed on hardware.
    let q = QueryPages {
        kind: PagesKind::Boot,
        function_id: 0,
        embedded_cpu_function: false,
    };
    assert_eq!(rig.status(&q), CmdStatus::BAD_RES_STATE_ERR);
    rig.exec(&EnableHca::default()).unwrap();
    assert_eq!(rig.status(&q), CmdStatus::OK);
    // Resources before INIT_HCA.
    assert_eq!(rig.status(&AllocPd), CmdStatus::BAD_RES_STATE_ERR);
    // ENABLE_HCA twice.
    assert_eq!(
        rig.status(&EnableHca::default()),
        CmdStatus::BAD_RES_STATE_ERR
    );

    let mut rig = Rig::new();
    rig.up(false);
    let mut eq = rig.create_eq(&[EventType::CMD.0], 3, 0);
    let cq = rig.create_cq(eq.eqn, 3);
    let qp = rig.create_qp(QpServiceType::QP1, &cq, &cq, 3, 3);
    assert_eq!(
        rig.status(&DestroyCq { cqn: cq.cqn }),
        CmdStatus::BAD_RES_STATE_ERR,
        "a CQ a QP uses"
    );
    assert_eq!(
        rig.status(&DeallocPd { pd: rig.pd }),
        CmdStatus::BAD_RES_STATE_ERR
    );
    rig.exec(&DestroyQp { qpn: qp.qpn }).unwrap();
    rig.exec(&DestroyCq { cqn: cq.cqn }).unwrap();
    assert_eq!(
        rig.status(&DestroyQp { qpn: qp.qpn }),
        CmdStatus::BAD_RES_ERR,
        "a QPN that names nothing"
    );
    eq.drain(&rig);
}

#[test]
fn short_input_and_output_lengths() {
    let mut rig = Rig::new();
    rig.up(false);
    // CREATE_EQ cut before its event bitmask.
    let mut c = CreateEq::default();
    c.ctx.uar_page = rig.uar;
    c.ctx.log_eq_size = 2;
    c.pas = vec![rig.alloc(4096, 4096)];
    let input = c.encode().unwrap();
    let d = rig.cmd(&input[..0x40], 16);
    assert_eq!(d.status(), CmdStatus::BAD_INP_LEN_ERR);
    // A pas list cut in the middle of an entry.
    let d = rig.cmd(&input[..input.len() - 3], 16);
    assert_eq!(d.status(), CmdStatus::BAD_INP_LEN_ERR);
    assert_eq!(rig.dev.resources().eqs, 0);

    // ALLOC_PD with no room for the PD number: refused before it takes effect.
    let before = pd_count(&rig);
    let d = rig.cmd(&AllocPd.encode().unwrap(), 8);
    assert_eq!(d.status(), CmdStatus::BAD_OUTP_LEN_ERR);
    assert_eq!(pd_count(&rig), before);

    // A shorter capability answer than the 4 KiB union is fine (seen on hardware).
    let q = QueryHcaCap::general(CapMode::Max).encode().unwrap();
    let d = rig.cmd(&q, 0x10 + 0x100);
    assert_eq!(d.status(), CmdStatus::OK);
    assert_eq!(d.out.len(), 0x110);
}

#[test]
fn delivery_statuses_of_malformed_entries_and_chains() {
    let mut rig = Rig::new();
    rig.up(false);
    // MANAGE_PAGES with 130 pages: 16 + 1040 bytes, three input blocks.
    let pages = rig.pages(130);
    let input = ManagePages {
        op: PagesOp::Give(pages),
        function_id: 0,
        embedded_cpu_function: false,
    }
    .encode()
    .unwrap();
    let held = rig.dev.pages_held();
    let run = |rig: &mut Rig, edit: &dyn Fn(&mut mlx5rig::Prepared)| {
        let mut p = rig.prepare(0, &input, 16);
        edit(&mut p);
        let posted = rig.post(0, &p);
        rig.completion(&posted).expect("completed").delivery
    };
    assert_eq!(
        run(&mut rig, &|p| p.in_blocks[1].token ^= 0xff),
        DeliveryStatus::TOKEN_ERR
    );
    assert_eq!(
        run(&mut rig, &|p| p.in_blocks[2].block_num = 7),
        DeliveryStatus::BAD_BLOCK_NUMBER
    );
    assert_eq!(
        run(&mut rig, &|p| p.in_blocks[1].next = 0),
        DeliveryStatus::BAD_BLOCK_NUMBER,
        "a chain that ends early"
    );
    assert_eq!(
        run(&mut rig, &|p| p.entry.in_ptr += 0x100),
        DeliveryStatus::IN_PTR_ALIGN_ERR
    );
    assert_eq!(
        run(&mut rig, &|p| p.entry.ty = 3),
        DeliveryStatus::CMD_DESCR_ERR
    );
    assert_eq!(
        run(&mut rig, &|p| p.entry.inlen = 4),
        DeliveryStatus::IN_LENGTH_ERR
    );
    assert_eq!(
        run(&mut rig, &|p| p.entry.outlen = 4),
        DeliveryStatus::OUT_LENGTH_ERR
    );
    assert_eq!(
        run(&mut rig, &|p| p.raw_edits.push((0x02, 0x5a))),
        DeliveryStatus::RES_FLD_NOT_CLR_ERR
    );
    // Signatures are not checked while checksums are off.
    assert_eq!(
        run(&mut rig, &|p| {
            p.in_blocks[0].sig ^= 0x11;
            p.seal = false;
        }),
        DeliveryStatus::OK
    );
    assert_eq!(
        rig.dev.pages_held(),
        held + 130,
        "the one good MANAGE_PAGES"
    );
    assert_eq!(rig.dev.counters().delivery_errors, 8);

    // An output chain: misaligned out_ptr and a bad output token; the command must not run.
    let pds = pd_count(&rig);
    let q = QueryHcaCap::general(CapMode::Max).encode().unwrap();
    let mut p = rig.prepare(0, &q, 0x1010);
    p.entry.out_ptr += 0x40;
    let posted = rig.post(0, &p);
    assert_eq!(
        rig.completion(&posted).unwrap().delivery,
        DeliveryStatus::OUT_PTR_ALIGN_ERR
    );
    let mut p = rig.prepare(0, &AllocPd.encode().unwrap(), 0x300);
    p.out_blocks[0].token ^= 1;
    let posted = rig.post(0, &p);
    assert_eq!(
        rig.completion(&posted).unwrap().delivery,
        DeliveryStatus::TOKEN_ERR
    );
    assert_eq!(
        pd_count(&rig),
        pds,
        "a command whose answer cannot be delivered did not run"
    );
    assert_eq!(rig.dev.iommu().fault_count(), 0);
}

#[test]
fn signatures_are_checked_when_checksums_are_on() {
    let mut rig = Rig::new();
    rig.up(true);
    assert_eq!(rig.status(&AllocPd), CmdStatus::OK, "sealed commands pass");
    let input = AllocPd.encode().unwrap();
    let mut p = rig.prepare(0, &input, 16);
    p.raw_edits.push((entry::off::SIG, 0));
    let posted = rig.post(0, &p);
    // The driver-side check of the entry signature would fail on the spoiled input entry
    // too, so look at the raw status byte.
    let raw = rig.mem.bytes(rig.cmdq, 64);
    let e = CmdEntry::decode(&raw).unwrap();
    assert!(!e.hw_owned);
    assert_eq!(e.delivery_status, DeliveryStatus::SIGNATURE_ERR);
    let _ = posted;
    // A mailbox block with a bad signature.
    let pages = rig.pages(70);
    let input = ManagePages {
        op: PagesOp::Give(pages),
        function_id: 0,
        embedded_cpu_function: false,
    }
    .encode()
    .unwrap();
    let mut p = rig.prepare(0, &input, 16);
    p.in_blocks[0].sig ^= 0x80;
    let posted = rig.post(0, &p);
    assert_eq!(
        rig.completion(&posted).unwrap().delivery,
        DeliveryStatus::SIGNATURE_ERR
    );
    // The device seals what it writes back: output blocks verify.
    let q = QueryHcaCap::general(CapMode::Current).encode().unwrap();
    let d = rig.cmd(&q, 0x1010);
    assert_eq!(d.status(), CmdStatus::OK);
    let _ = mailbox::BLOCK_SIZE;
}

#[test]
fn a_doorbell_for_a_software_owned_entry_is_ignored() {
    let mut rig = Rig::new();
    rig.up(false);
    let input = AllocPd.encode().unwrap();
    let mut p = rig.prepare(0, &input, 16);
    p.entry.hw_owned = false;
    rig.post(0, &p);
    let raw = rig.mem.bytes(rig.cmdq, 64);
    assert_eq!(raw[0x3f], 0, "entry untouched");
    assert_eq!(rig.dev.counters().cmd_doorbells_ignored, 1);
}

#[test]
fn command_completion_events_and_interrupts() {
    let mut rig = Rig::new();
    rig.up(false);
    let hits = Arc::new(AtomicU32::new(0));
    let h = hits.clone();
    rig.dev.irqs().set(
        IrqKind::Msix,
        2,
        Some(Arc::new(move || {
            h.fetch_add(1, Ordering::SeqCst);
        })),
    );
    let mut eq = rig.create_eq(&[EventType::CMD.0], 3, 2);
    // The EQ exists when its own CREATE_EQ completes: that completion is its first event,
    // and arming the EQ (the rig arms at consumer index 0) with it unconsumed interrupts at
    // once.
    assert_eq!(hits.load(Ordering::SeqCst), 1);
    assert_eq!(
        eq.poll(&rig).unwrap().event(),
        EqeEvent::Command { vector: 1 }
    );
    assert!(eq.poll(&rig).is_none());
    // Not re-armed: the next completion writes an EQE but raises no interrupt.
    rig.exec_on(5, &AllocPd).unwrap();
    assert_eq!(
        eq.poll(&rig).unwrap().event(),
        EqeEvent::Command { vector: 1 << 5 }
    );
    assert_eq!(hits.load(Ordering::SeqCst), 1);
    // Armed with nothing pending: the next completion interrupts.
    eq.doorbell(&rig, true);
    assert_eq!(hits.load(Ordering::SeqCst), 1);
    rig.exec_on(1, &AllocPd).unwrap();
    assert_eq!(hits.load(Ordering::SeqCst), 2);
    assert_eq!(
        eq.poll(&rig).unwrap().event(),
        EqeEvent::Command { vector: 2 }
    );
    assert_eq!(rig.dev.counters().interrupts, 2);
}

#[test]
fn a_page_request_raised_during_a_command_holds_it_until_pages_arrive() {
    let mut rig = Rig::new();
    rig.up(false);
    let mut eq = rig.create_eq(&[EventType::PAGE_REQUEST.0, EventType::CMD.0], 4, 0);
    eq.drain(&rig);
    let held = rig.dev.pages_held();
    rig.dev.faults().page_request_during_command(1, 5);
    let p = rig.prepare(3, &AllocPd.encode().unwrap(), 16);
    let posted = rig.post(3, &p);
    assert!(
        rig.completion(&posted).is_none(),
        "held by the page request"
    );
    assert_eq!(rig.dev.pending_commands(), 1 << 3);
    let ev = eq.poll(&rig).expect("page request EQE").event();
    let EqeEvent::PageRequest {
        function_id,
        num_pages,
        ..
    } = ev
    else {
        panic!("expected a page request, got {ev:?}");
    };
    assert_eq!(num_pages, 5);
    assert_eq!(rig.dev.pages_requested(), 5);
    // Another regular command still runs meanwhile.
    rig.exec_on(1, &AllocPd).unwrap();
    assert!(rig.completion(&posted).is_none());
    // Part of the pages: still held.
    let pas = rig.pages(2);
    rig.exec_on(
        31,
        &ManagePages {
            op: PagesOp::Give(pas),
            function_id,
            embedded_cpu_function: false,
        },
    )
    .unwrap();
    assert!(rig.completion(&posted).is_none());
    let pas = rig.pages(3);
    rig.exec_on(
        31,
        &ManagePages {
            op: PagesOp::Give(pas),
            function_id,
            embedded_cpu_function: false,
        },
    )
    .unwrap();
    let d = rig.completion(&posted).expect("released by the pages");
    assert_eq!(d.status(), CmdStatus::OK);
    assert_eq!(rig.dev.pending_commands(), 0);
    assert_eq!(rig.dev.pages_held(), held + 5);
    assert_eq!(rig.dev.pages_requested(), 0);
    let vectors: Vec<EqeEvent> = eq
        .drain(&rig)
        .iter()
        .map(firmware_cmds::mlx5::eqe::Eqe::event)
        .collect();
    assert!(vectors.contains(&EqeEvent::Command { vector: 1 << 3 }));
}

/// The record of the commands the firmware fetched names each one's slot and `op_mod`, and
/// the commands the firmware held when it fetched it: here an ALLOC_PD held behind a page
/// request while the GIVE that settles it arrives on the page slot.
#[test]
fn the_command_record_names_slots_and_the_commands_the_firmware_held() {
    let mut rig = Rig::new();
    rig.up(false);
    let mut eq = rig.create_eq(&[EventType::PAGE_REQUEST.0, EventType::CMD.0], 4, 0);
    eq.drain(&rig);
    rig.dev.record_commands(true);
    rig.dev.faults().page_request_during_command(1, 2);
    let p = rig.prepare(3, &AllocPd.encode().unwrap(), 16);
    let posted = rig.post(3, &p);
    assert!(rig.completion(&posted).is_none(), "held");
    let pas = rig.pages(2);
    rig.exec_on(
        PAGE_SLOT,
        &ManagePages {
            op: PagesOp::Give(pas),
            function_id: 0,
            embedded_cpu_function: false,
        },
    )
    .unwrap();
    assert!(rig.completion(&posted).is_some(), "released by the pages");
    let fetched = |slot, opcode: Opcode, op_mod, others| FetchedCommand {
        slot,
        opcode: opcode.0,
        op_mod,
        others,
    };
    assert_eq!(
        rig.dev.take_command_record(),
        vec![
            fetched(3, Opcode::ALLOC_PD, 0, vec![]),
            fetched(
                PAGE_SLOT,
                Opcode::MANAGE_PAGES,
                1,
                vec![(3, Opcode::ALLOC_PD.0)]
            ),
        ]
    );
    assert!(rig.dev.take_command_record().is_empty(), "taken");
    rig.dev.record_commands(false);
    rig.exec(&AllocPd).unwrap();
    assert!(rig.dev.take_command_record().is_empty(), "not recording");
}

#[test]
fn a_refused_page_request_fails_the_held_command() {
    let mut rig = Rig::new();
    rig.up(false);
    let mut eq = rig.create_eq(&[EventType::PAGE_REQUEST.0], 4, 0);
    rig.dev.faults().page_request_during_command(2, 8);
    rig.exec_on(0, &AllocPd).unwrap();
    let posted = {
        let p = rig.prepare(0, &AllocPd.encode().unwrap(), 16);
        rig.post(0, &p)
    };
    assert!(rig.completion(&posted).is_none());
    assert!(matches!(
        eq.poll(&rig).unwrap().event(),
        EqeEvent::PageRequest { num_pages: 8, .. }
    ));
    rig.exec_on(
        31,
        &ManagePages {
            op: PagesOp::CantGive,
            function_id: 0,
            embedded_cpu_function: false,
        },
    )
    .unwrap();
    assert_eq!(
        rig.completion(&posted).unwrap().status(),
        CmdStatus::NO_RES_ERR
    );
}

#[test]
fn run_time_page_requests_give_and_take() {
    let mut rig = Rig::new();
    rig.up(false);
    let mut eq = rig.create_eq(&[EventType::PAGE_REQUEST.0], 4, 0);
    let held = rig.dev.pages_held();
    assert!(rig.dev.faults().page_request(4));
    assert!(matches!(
        eq.poll(&rig).unwrap().event(),
        EqeEvent::PageRequest { num_pages: 4, .. }
    ));
    let q = rig
        .exec(&QueryPages {
            kind: PagesKind::Regular,
            function_id: 0,
            embedded_cpu_function: false,
        })
        .unwrap();
    assert_eq!(q.num_pages, 4);
    let pas = rig.pages(4);
    rig.exec(&ManagePages {
        op: PagesOp::Give(pas.clone()),
        function_id: 0,
        embedded_cpu_function: false,
    })
    .unwrap();
    assert_eq!(rig.dev.pages_held(), held + 4);
    // Asking back without an offer: the working set stays.
    let out = rig
        .exec(&ManagePages {
            op: PagesOp::Take(10),
            function_id: 0,
            embedded_cpu_function: false,
        })
        .unwrap();
    assert!(out.pas.is_empty());
    // The firmware offers 3 back.
    assert!(rig.dev.faults().page_request(-3));
    assert!(matches!(
        eq.poll(&rig).unwrap().event(),
        EqeEvent::PageRequest { num_pages: -3, .. }
    ));
    let out = rig
        .exec(&ManagePages {
            op: PagesOp::Take(3),
            function_id: 0,
            embedded_cpu_function: false,
        })
        .unwrap();
    assert_eq!(out.pas.len(), 3);
    assert!(out.pas.iter().all(|p| pas.contains(p)));
    assert_eq!(rig.dev.pages_held(), held + 1);
    assert_eq!(rig.dev.pages_requested(), 0);
}

/// MANAGE_PAGES names a function that exists (the device itself, or one the firmware asked
/// pages for), as QUERY_PAGES does: any other is refused, and no page changes hands.
#[test]
fn manage_pages_for_a_function_that_does_not_exist_is_refused() {
    let mut rig = Rig::new();
    rig.up(false);
    let _eq = rig.create_eq(&[EventType::PAGE_REQUEST.0], 4, 0);
    let held = rig.dev.pages_held();
    let refused = (CmdStatus::BAD_PARAM_ERR, syndrome::FUNCTION);
    let pas = rig.pages(2);
    let for_vf = |op| ManagePages {
        op,
        function_id: 0x77,
        embedded_cpu_function: false,
    };
    let give = for_vf(PagesOp::Give(pas.clone()));
    let d = rig.cmd_on(PAGE_SLOT, &give.encode().unwrap(), give.out_len());
    assert_eq!((d.status(), d.syndrome()), refused, "GIVE");
    let take = for_vf(PagesOp::Take(5));
    let d = rig.cmd_on(PAGE_SLOT, &take.encode().unwrap(), take.out_len());
    assert_eq!((d.status(), d.syndrome()), refused, "TAKE");
    let cant = for_vf(PagesOp::CantGive);
    let d = rig.cmd_on(PAGE_SLOT, &cant.encode().unwrap(), cant.out_len());
    assert_eq!((d.status(), d.syndrome()), refused, "CANT_GIVE");
    // The embedded-CPU function of a device that is not an ECPF does not exist either.
    let ec = ManagePages {
        op: PagesOp::Give(pas.clone()),
        function_id: 0,
        embedded_cpu_function: true,
    };
    let d = rig.cmd_on(PAGE_SLOT, &ec.encode().unwrap(), ec.out_len());
    assert_eq!((d.status(), d.syndrome()), refused, "embedded CPU function");
    assert_eq!(rig.dev.pages_held(), held, "no page changed hands");
    assert_eq!(rig.dev.pages_held_for(0x77, false), 0);

    // Once the firmware asks pages for that function (a VF of this PF), it exists.
    assert!(rig.dev.faults().page_request_for(0x77, false, 2));
    rig.exec_on(PAGE_SLOT, &give).unwrap();
    assert_eq!(rig.dev.pages_held_for(0x77, false), 2);
    let back = rig.exec_on(PAGE_SLOT, &take).unwrap();
    assert_eq!(back.pas.len(), 2);
    assert_eq!(rig.dev.pages_held(), held);
}

#[test]
fn teardown_gives_every_page_back() {
    let mut rig = Rig::new();
    rig.up(false);
    assert_eq!(
        rig.status(&TeardownHca {
            profile: TeardownProfile::PrepareFastTeardown
        }),
        CmdStatus::BAD_PARAM_ERR,
        "the caps offer no fast teardown"
    );
    rig.exec(&TeardownHca {
        profile: TeardownProfile::GracefulClose,
    })
    .unwrap();
    let mut back = Vec::new();
    loop {
        let out = rig
            .exec_on(
                PAGE_SLOT,
                &ManagePages {
                    op: PagesOp::Take(32),
                    function_id: 0,
                    embedded_cpu_function: false,
                },
            )
            .unwrap();
        if out.pas.is_empty() {
            break;
        }
        back.extend(out.pas);
    }
    back.sort_unstable();
    let mut given = rig.given.clone();
    given.sort_unstable();
    assert_eq!(back, given);
    assert_eq!(rig.dev.pages_held(), 0);
    rig.exec(&DisableHca::default()).unwrap();
    assert_eq!(rig.dev.resources(), sim::mlx5::ResourceCounts::default());
}

#[test]
fn given_pages_are_checked() {
    let mut rig = Rig::new();
    rig.start();
    rig.exec(&EnableHca::default()).unwrap();
    let give = |rig: &mut Rig, pas: Vec<u64>| {
        rig.status(&ManagePages {
            op: PagesOp::Give(pas),
            function_id: 0,
            embedded_cpu_function: false,
        })
    };
    let good = rig.pages(2);
    // The encoder refuses a misaligned page, so spoil the address in the encoded input.
    let mut input = ManagePages {
        op: PagesOp::Give(vec![good[0]]),
        function_id: 0,
        embedded_cpu_function: false,
    }
    .encode()
    .unwrap();
    input[0x17] |= 0x08;
    assert_eq!(rig.cmd(&input, 16).status(), CmdStatus::BAD_PARAM_ERR);
    assert_eq!(
        give(&mut rig, vec![good[0], good[0]]),
        CmdStatus::BAD_PARAM_ERR
    );
    assert_eq!(rig.dev.iommu().fault_count(), 0);
    // A page the IOMMU does not map: the device's write faults (a driver bug the test sees).
    assert_eq!(
        give(&mut rig, vec![good[0], IOVA_BASE - 0x10_0000]),
        CmdStatus::BAD_PARAM_ERR
    );
    assert_eq!(rig.dev.iommu().fault_count(), 1);
    assert_eq!(rig.dev.pages_held(), 0, "nothing of a refused list is kept");
    assert_eq!(give(&mut rig, good.clone()), CmdStatus::OK);
    assert_eq!(
        give(&mut rig, vec![good[1]]),
        CmdStatus::BAD_PARAM_ERR,
        "given twice"
    );
    // INIT_HCA without the pages it needs.
    assert_eq!(rig.status(&InitHca::default()), CmdStatus::NO_RES_ERR);
}

/// What the port link below does while the device waits, lock released, for its SMA.
#[derive(Clone, Copy, PartialEq, Eq)]
enum MidMad {
    /// A function reset (another thread's), after which the driver turns bus mastering back
    /// on, as a reopen does: a late write from before the reset would land.
    Reset,
    /// The firmware dies.
    Fatal,
}

/// A port link whose SMA answers every MAD, the first one once armed after doing `what` to
/// the device.
struct MidMadLink {
    dev: std::sync::Weak<sim::mlx5::Mlx5>,
    what: MidMad,
    armed: std::sync::atomic::AtomicBool,
}

impl MidMadLink {
    /// Attached to port 1 of `rig`, then armed (attaching reads the port through the SMA).
    fn attach(rig: &Rig, what: MidMad) -> Arc<MidMadLink> {
        let link = Arc::new(MidMadLink {
            dev: Arc::downgrade(&rig.dev),
            what,
            armed: false.into(),
        });
        rig.dev.attach_port(1, link.clone()).unwrap();
        link.armed.store(true, Ordering::SeqCst);
        link
    }
}

impl sim::PortLink for MidMadLink {
    fn transmit(&self, _packet: sim::Packet) {}

    fn local_mad(&self, mad: &[u8; 256], _ignore_mkey: bool) -> Option<[u8; 256]> {
        if self.armed.swap(false, Ordering::SeqCst) {
            let dev = self.dev.upgrade().expect("device alive");
            match self.what {
                MidMad::Reset => {
                    assert!(dev.reset());
                    dev.config().write(
                        0x04,
                        &(sim::pci_config::COMMAND_MEMORY | sim::pci_config::COMMAND_MASTER)
                            .to_le_bytes(),
                    );
                }
                MidMad::Fatal => dev.faults().catastrophic(
                    firmware_cmds::mlx5::health::HealthSyndrome::HW_FATAL_ERR,
                    true,
                ),
            }
        }
        let mut answer = *mad;
        answer[3] = 0x81; // GetResp
        Some(answer)
    }

    fn modify_capability_mask(&self, _set: u32, _clear: u32) -> u32 {
        0
    }

    fn port_info(&self) -> sim::PortSnapshot {
        mlx5rig::active_port(mlx5rig::LID)
    }
}

fn mad_ifc() -> MadIfc {
    MadIfc {
        ignore_mkey: true,
        ignore_bkey: false,
        remote_lid: 0,
        port: 1,
        mad: [0x01; 256],
    }
}

/// The device answers MAD_IFC through the port's SMA with its lock released. A function reset
/// in that window leaves the command to no one: the entry from before the reset is not
/// written (nor its output, nor a command EQE), and the device runs its commands as usual
/// once brought up again.
#[test]
fn a_mad_ifc_answered_across_a_function_reset_is_abandoned() {
    let mut rig = Rig::new();
    rig.up(false);
    let mut eq = rig.create_eq(&[EventType::CMD.0], 4, 0);
    eq.drain(&rig);
    let _link = MidMadLink::attach(&rig, MidMad::Reset);
    let resets = rig.dev.counters().function_resets;
    let m = mad_ifc();
    let p = rig.prepare(0, &m.encode().unwrap(), m.out_len());
    // The output block as the driver framed it (what `post` writes).
    let out_block = p.out_addrs[0];
    let out_framed = p.out_blocks[0].encode();
    let posted = rig.post(0, &p);
    assert_eq!(rig.dev.counters().function_resets, resets + 1);
    assert!(
        rig.completion(&posted).is_none(),
        "the entry from before the reset stays the device's"
    );
    assert_eq!(
        rig.mem.bytes(out_block, out_framed.len()),
        out_framed.to_vec(),
        "no output written"
    );
    assert!(eq.poll(&rig).is_none(), "no command EQE");
    assert_eq!(rig.dev.counters().commands_abandoned, 1);
    assert_eq!(rig.dev.iommu().fault_count(), 0);
    // Brought up again, the device runs MAD_IFC on the same slot.
    rig.up(false);
    let d = rig.cmd(&m.encode().unwrap(), m.out_len());
    assert_eq!(d.status(), CmdStatus::OK);
    assert_eq!(rig.dev.counters().commands_abandoned, 1);
}

/// The firmware dying while the SMA answers: the command is never completed (dead firmware
/// completes nothing; its other commands stay pending as well).
#[test]
fn a_mad_ifc_answered_after_the_firmware_died_is_abandoned() {
    let mut rig = Rig::new();
    rig.up(false);
    let _link = MidMadLink::attach(&rig, MidMad::Fatal);
    let m = mad_ifc();
    let p = rig.prepare(0, &m.encode().unwrap(), m.out_len());
    let posted = rig.post(0, &p);
    rig.wait(Duration::from_millis(10));
    assert!(rig.completion(&posted).is_none());
    assert_eq!(rig.dev.counters().commands_abandoned, 1);
}

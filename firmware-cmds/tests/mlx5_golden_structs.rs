//! Golden tests of the byte-aligned mlx5 structures: init segment (§5.1), command entry and
//! mailbox (§5.2), CQE (§5.5), WQE segments and doorbells (§5.7, §1.3), EQE (§6.2) of
//! /work/shared/reference/hca-hardware.md. Expected offsets and byte images are written out by
//! hand, not computed by the crate.
//!
//! Each test names the kernel or rdma-core struct, enum or function its values come from, and
//! every value was checked against that original: offsets of a C struct by adding up the sizes
//! of the members before the field, offsets of an `mlx5_ifc_*_bits` struct as bit / 8. Copies
//! read: the MLNX_OFED 24.07 copy of the kernel files (wjz304/mlnx-ofed-kernel @2c0186b:
//! include/linux/mlx5/{device.h,mlx5_ifc.h,qp.h,cq.h,driver.h,doorbell.h,eq.h},
//! include/rdma/{ib_verbs.h,ib_hdrs.h}, drivers/net/ethernet/mellanox/mlx5/core/{cmd.c,
//! health.c,eq.c,lib/eq.h,uar.c,main.c,ecpf.h}, drivers/infiniband/hw/mlx5/{cq.c,wr.c,ah.c,
//! main.c}), include/linux/mlx5/qp.h of torvalds/linux @010e85f9, and rdma-core @691953d8
//! (providers/mlx5/{mlx5dv.h,cq.c,qp.c,mlx5_vfio.h,mlx5_vfio.c}).

use firmware_cmds::mlx5::cmd::entry::{self, CmdEntry, signature, xor8};
use firmware_cmds::mlx5::cmd::mailbox::{self, MailboxBlock};
use firmware_cmds::mlx5::cmd::status::DeliveryStatus;
use firmware_cmds::mlx5::cqe::{self, Cqe, CqeBody, CqeOpcode, ErrCqe, ReqCqe, RespCqe};
use firmware_cmds::mlx5::doorbell::{self, CqArm, CqArmCmd, CqDbRecord, EqDoorbell, QpDbRecord};
use firmware_cmds::mlx5::eqe::{self, Eqe, EqeEvent, EventType};
use firmware_cmds::mlx5::health::{self, HealthBuffer, HealthSyndrome};
use firmware_cmds::mlx5::init_seg::{
    self, CmdqAddrLoSz, FwRev, HealthCounter, Initializing, NicInterface,
};
use firmware_cmds::mlx5::syndrome::{CqeSyndrome, IbWcStatus};
use firmware_cmds::mlx5::wqe::{
    self, CtrlSeg, DataSeg, DatagramSeg, Gather, UdSendWqe, WqeOpcode, fm_ce_se,
};

/// Source: `struct mlx5_init_seg` in include/linux/mlx5/device.h (`rsvd1[120]` puts
/// `initializing` at 0x1fc, the 64-byte `struct health_buffer` at 0x200, `rsvd2[878]` puts
/// `cmd_exec_to` at 0xff8, `rsvd5[1006]` puts `ieee1588_clk` at 0x2000); `CMD_IF_REV = 5` in
/// drivers/net/ethernet/mellanox/mlx5/core/cmd.c. The MLX5_GET view,
/// `struct mlx5_ifc_initial_seg_bits` in mlx5_ifc.h, agrees on every offset here but one:
/// `clr_intx` is the dword at 0x200c in device.h, while mlx5_ifc.h has a one-bit `clear_int`
/// at bit 0x807f, i.e. bit 0 of the dword at 0x100c (which device.h calls `rsvd3[1]`). Neither
/// is read or written anywhere in the kernel's mlx5 code or rdma-core (whose userspace VFIO
/// driver declares the same `clr_intx` at 0x200c in `struct mlx5_init_seg`,
/// providers/mlx5/mlx5_vfio.h); `CLR_INTX` follows device.h and nothing in this project uses
/// it.
#[test]
fn init_segment_offsets() {
    use init_seg::off;
    assert_eq!(off::FW_REV, 0x000);
    assert_eq!(off::CMDIF_REV_FW_SUB, 0x004);
    assert_eq!(off::CMDQ_ADDR_H, 0x010);
    assert_eq!(off::CMDQ_ADDR_L_SZ, 0x014);
    assert_eq!(off::CMD_DBELL, 0x018);
    assert_eq!(off::INITIALIZING, 0x1fc);
    assert_eq!(off::HEALTH, 0x200);
    assert_eq!(off::CMD_EXEC_TO, 0xff8);
    assert_eq!(off::CMD_Q_INIT_TO, 0xffc);
    assert_eq!(off::INTERNAL_TIMER_H, 0x1000);
    assert_eq!(off::INTERNAL_TIMER_L, 0x1004);
    assert_eq!(off::HEALTH_COUNTER, 0x1010);
    assert_eq!(off::REAL_TIME_H, 0x1040);
    assert_eq!(off::REAL_TIME_L, 0x1044);
    assert_eq!(off::IEEE1588_CLK, 0x2000);
    assert_eq!(off::IEEE1588_CLK_TYPE, 0x2008);
    assert_eq!(off::CLR_INTX, 0x200c);
    assert_eq!(init_seg::CMD_IF_REV, 5);
}

#[test]
fn init_segment_fields() {
    // fw_rev [31:16] minor, [15:0] major; cmdif_rev_fw_sub [31:16] rev, [15:0] subminor:
    // `fw_rev_maj()`, `fw_rev_min()`, `fw_rev_sub()` in include/linux/mlx5/driver.h and
    // `cmdif_rev()` in cmd.c (`>> 16`); `initial_seg_bits` fw_rev_minor/major,
    // cmd_interface_rev/fw_rev_subminor.
    let v = FwRev::from_regs(0x0024_0010, 0x0005_03e8);
    assert_eq!((v.major, v.minor, v.subminor), (0x10, 0x24, 1000));
    assert_eq!(v.to_string(), "16.36.1000");
    assert_eq!(init_seg::cmdif_rev(0x0005_03e8), 5);
    assert_eq!(v.fw_rev_reg(), 0x0024_0010);
    // cmdq_addr_l_sz: [31:12] address, [10:8] nic_interface, [7:4] log size, [3:0] log stride.
    // The kernel reads nic_interface as three bits: `mlx5_get_nic_state()` in health.c is
    // `(cmdq_addr_l_sz >> 8) & 7`, and `mlx5_handle_bad_state()` there says "The IFC mode field
    // is 3 bits" (SW_RESET is 7). `initial_seg_bits` in mlx5_ifc.h declares it
    // `nic_interface[0x2]` at bits [9:8] after `reserved_at_b4[0x2]`, too narrow for 7; we
    // follow health.c, as rdma-core's `mlx5_vfio_get_nic_state()` (providers/mlx5/mlx5_vfio.c,
    // `>> 8) & 7`) does. Log size / stride: `mlx5_cmd_enable()` in cmd.c (`cmd_l >> 4 & 0xf`,
    // `cmd_l & 0xf`), which also refuses `1 << log_sz > MLX5_MAX_COMMANDS` (32) and
    // `log_sz + log_stride > MLX5_ADAPTER_PAGE_SHIFT` (12): the geometry checks below.
    let r = CmdqAddrLoSz::decode(0x1234_5756);
    assert_eq!(r.addr_lo, 0x1234_5000);
    assert_eq!(r.nic_interface, NicInterface::SW_RESET);
    assert_eq!((r.log_cmdq_size, r.log_cmdq_stride), (5, 6));
    assert_eq!(r.encode(), 0x1234_5756);
    assert!(r.check_geometry().is_ok()); // 32 slots of 64 bytes = 2 KiB
    assert!(CmdqAddrLoSz::decode(0x66).check_geometry().is_err()); // 64 slots
    assert!(CmdqAddrLoSz::decode(0x57).check_geometry().is_ok()); // 32 x 128 = 4 KiB
    assert!(CmdqAddrLoSz::decode(0x58).check_geometry().is_err()); // 32 x 256 > 4 KiB
    // `mlx5_set_nic_state()` in health.c: (old & 0xfffff000) | state << MLX5_NIC_IFC_OFFSET (8).
    assert_eq!(
        init_seg::with_nic_state(0xabcd_e056, NicInterface::SW_RESET),
        0xabcd_e700
    );
    // initializing: bit31 initializing (`wait_fw_init()` in main.c, `>> 31`), bit30 fw reset
    // supported (`MLX5_FW_RESET_SUPPORTED_OFFSET = 30`, device.h), [26:24] nic ifc supported
    // (`initial_seg_bits.nic_interface_supported[0x3]` at bit 0xfe5), bit23 embedded cpu
    // (`MLX5_ECPU_BIT_NUM = 23`, drivers/net/ethernet/mellanox/mlx5/core/ecpf.h).
    let i = Initializing::decode(0xc280_0000);
    assert!(i.initializing && i.fw_reset_supported && i.embedded_cpu);
    assert_eq!(i.nic_interface_supported, 2);
    assert_eq!(i.encode(), 0xc280_0000);
    assert!(!Initializing::decode(0x4000_0000).initializing);
    // health_counter (0x1010): [31:24] syndrome, [23:0] counter, as `initial_seg_bits`
    // health_syndrome[0x8], health_counter[0x18] at bit 0x8080.
    let h = HealthCounter::decode(0x0712_3456);
    assert_eq!((h.syndrome, h.counter), (0x07, 0x12_3456));
    assert_eq!(h.encode(), 0x0712_3456);
}

/// Sources: `struct health_buffer` in include/linux/mlx5/device.h (and
/// `struct mlx5_ifc_health_buffer_bits` in mlx5_ifc.h: rfr bit 0x1c0, valid 0x1c4, severity
/// 0x1c5..0x1c7, i.e. byte 0x38 bits 7, 3, 2..0); `MLX5_RFR_BIT_OFFSET = 7` (device.h),
/// `MLX5_SEVERITY_MASK = 0x7` / `MLX5_SEVERITY_VALID_MASK = 0x8` and
/// `mlx5_health_get_severity()` in health.c; unreachable = `fw_ver` reads 0xffffffff
/// (`mlx5_sensor_pci_not_working()`), recovery required = rfr and a syndrome
/// (`sensor_fw_synd_rfr()`), both in health.c.
#[test]
fn health_buffer_layout() {
    use health::off;
    assert_eq!(init_seg::off::HEALTH + off::ASSERT_VAR, 0x200);
    assert_eq!(init_seg::off::HEALTH + off::ASSERT_EXIT_PTR, 0x220);
    assert_eq!(init_seg::off::HEALTH + off::ASSERT_CALLRA, 0x224);
    assert_eq!(init_seg::off::HEALTH + off::TIME, 0x22c);
    assert_eq!(init_seg::off::HEALTH + off::FW_VER, 0x230);
    assert_eq!(init_seg::off::HEALTH + off::HW_ID, 0x234);
    assert_eq!(init_seg::off::HEALTH + off::RFR_SEVERITY, 0x238);
    assert_eq!(init_seg::off::HEALTH + off::IRISC_INDEX, 0x23c);
    assert_eq!(init_seg::off::HEALTH + off::SYND, 0x23d);
    assert_eq!(init_seg::off::HEALTH + off::EXT_SYND, 0x23e);
    assert_eq!(health::HEALTH_BUFFER_LEN, 64);

    let mut raw = [0u8; 64];
    raw[0x30..0x34].copy_from_slice(&[0xff; 4]);
    raw[0x38] = 0x8b; // rfr, valid, severity 3
    raw[0x3d] = 0x08;
    raw[0x3e] = 0x12;
    raw[0x3f] = 0x34;
    raw[0x04..0x08].copy_from_slice(&[0xde, 0xad, 0xbe, 0xef]);
    let h = HealthBuffer::decode(&raw).unwrap();
    assert!(h.unreachable());
    assert!(h.rfr());
    assert_eq!(h.severity(), Some(3));
    assert_eq!(h.synd, HealthSyndrome::HW_FATAL_ERR);
    assert_eq!(h.ext_synd, 0x1234);
    assert_eq!(h.assert_var[1], 0xdead_beef);
    assert!(h.recovery_required());
    assert_eq!(h.encode(), raw);
}

/// Sources: `struct mlx5_cmd_layout` in include/linux/mlx5/device.h (type 0x00, inlen 0x04,
/// in_ptr 0x08, in[4] 0x10, out[4] 0x20, out_ptr 0x30, outlen 0x38, token 0x3c, sig 0x3d,
/// status_own 0x3f; 64 bytes); `MLX5_PCI_CMD_XPORT = 7` and `MLX5_MAX_COMMANDS = 32` in
/// device.h; `CMD_OWNER_HW = 0x1` in driver.h; delivery status = `status_own >> 1`
/// (`mlx5_cmd_comp_handler()` in cmd.c).
#[test]
fn command_entry_layout() {
    use entry::off;
    assert_eq!(entry::ENTRY_SIZE, 64);
    assert_eq!(off::TYPE, 0x00);
    assert_eq!(off::INLEN, 0x04);
    assert_eq!(off::IN_PTR, 0x08);
    assert_eq!(off::IN, 0x10);
    assert_eq!(off::OUT, 0x20);
    assert_eq!(off::OUT_PTR, 0x30);
    assert_eq!(off::OUTLEN, 0x38);
    assert_eq!(off::TOKEN, 0x3c);
    assert_eq!(off::SIG, 0x3d);
    assert_eq!(off::STATUS_OWN, 0x3f);
    assert_eq!(entry::CMD_XPORT_PCI, 7);
    assert_eq!(entry::MAX_COMMANDS, 32);

    let mut e = CmdEntry::new_request([0x11; 16], 0x0000_0110, 0x1_2345_6000, 0x10, 0, 0xa5);
    e.sig = 0x77;
    let raw = e.encode();
    let mut want = [0u8; 64];
    want[0] = 7;
    want[4..8].copy_from_slice(&[0, 0, 0x01, 0x10]);
    want[8..16].copy_from_slice(&[0, 0, 0, 0x01, 0x23, 0x45, 0x60, 0x00]);
    want[0x10..0x20].copy_from_slice(&[0x11; 16]);
    want[0x38..0x3c].copy_from_slice(&[0, 0, 0, 0x10]);
    want[0x3c] = 0xa5;
    want[0x3d] = 0x77;
    want[0x3f] = 0x01; // owned by hardware, delivery status 0
    assert_eq!(raw, want);

    // status_own: bit 0 ownership, bits [7:1] delivery status.
    let mut done = want;
    done[0x3f] = 0x03 << 1;
    let d = CmdEntry::decode(&done).unwrap();
    assert!(!d.hw_owned);
    assert_eq!(d.delivery_status, DeliveryStatus::BAD_BLOCK_NUMBER);
}

/// Source: drivers/net/ethernet/mellanox/mlx5/core/cmd.c: `set_signature()` writes
/// `sig = ~xor8_buf(entry, 0, 64)` and `verify_signature()` wants the whole entry to XOR to
/// 0xff.
#[test]
fn signatures_are_not_xor8() {
    // ~xor8: bytes 0x01 ^ 0x02 ^ 0x04 = 0x07, signature = 0xf8.
    assert_eq!(xor8(&[0x01, 0x02, 0x04]), 0x07);
    assert_eq!(signature(&[0x01, 0x02, 0x04]), 0xf8);
    let mut e = CmdEntry::new_request([0; 16], 0x10, 0, 0x10, 0, 1);
    e.seal();
    // Covered bytes: type 7, inlen 0x10, outlen 0x10, token 1, status_own 1: XOR = 0x07,
    // so sig = !0x07 = 0xf8, and the whole entry XORs to 0xff.
    assert_eq!(e.sig, 0xf8);
    assert!(CmdEntry::signature_ok(&e.encode()));
}

/// Sources: `struct mlx5_cmd_prot_block` in include/linux/mlx5/device.h (data[512], rsvd0[48],
/// next 0x230, block_num 0x238, rsvd1, token 0x23d, ctrl_sig 0x23e, sig 0x23f; 576 bytes);
/// `calc_block_sig()` / `verify_block_sig()` in cmd.c (ctrl_sig over rsvd0..token, sig over
/// bytes 0..0x23e); `mlx5_calc_cmd_blocks()` in cmd.c (the first 16 bytes ride in the entry,
/// `struct mlx5_cmd_first.data[4]` in driver.h, then `MLX5_CMD_DATA_BLOCK_SIZE` per block).
#[test]
fn mailbox_layout() {
    use mailbox::off;
    assert_eq!(mailbox::BLOCK_SIZE, 576);
    assert_eq!(mailbox::BLOCK_DATA, 512);
    assert_eq!(off::DATA, 0x000);
    assert_eq!(off::NEXT, 0x230);
    assert_eq!(off::BLOCK_NUM, 0x238);
    assert_eq!(off::TOKEN, 0x23d);
    assert_eq!(off::CTRL_SIG, 0x23e);
    assert_eq!(off::SIG, 0x23f);
    // mlx5_ifc.h cmd_queue_entry: input/output_mailbox_pointer_31_9; cmd_if_box:
    // next_pointer_31_10.
    assert_eq!(mailbox::ENTRY_PTR_ALIGN, 512);
    assert_eq!(mailbox::NEXT_PTR_ALIGN, 1024);

    let mut b = MailboxBlock {
        data: [0; 512],
        next: 0x0000_0001_0000_0400,
        block_num: 2,
        token: 0x5a,
        ctrl_sig: 0,
        sig: 0,
    };
    b.data[0] = 0x80;
    b.seal();
    let raw = b.encode();
    assert_eq!(&raw[0x230..0x238], &[0, 0, 0, 1, 0, 0, 0x04, 0]);
    assert_eq!(&raw[0x238..0x23c], &[0, 0, 0, 2]);
    assert_eq!(raw[0x23d], 0x5a);
    // ctrl_sig = ~xor8(0x200..=0x23d) = ~(0x01 ^ 0x04 ^ 0x02 ^ 0x5a) = ~0x5d = 0xa2.
    assert_eq!(raw[0x23e], 0xa2);
    // sig = ~xor8(0x000..=0x23e) = ~(0x80 ^ 0x5d ^ 0xa2) = ~0x7f = 0x80.
    assert_eq!(raw[0x23f], 0x80);
    assert!(MailboxBlock::signatures_ok(&raw));
    // Split: 16 inline bytes, then 512 per block.
    assert_eq!(mailbox::blocks_needed(0x110), 1);
    assert_eq!(mailbox::blocks_needed(0x1010), 8);
    assert_eq!(mailbox::blocks_needed(16 + 512 * 3), 3);
}

/// Sources: `struct mlx5_cqe64` and `struct mlx5_err_cqe` in include/linux/mlx5/device.h
/// (rdma-core providers/mlx5/mlx5dv.h has the same offsets), the initial `op_own` of
/// `MLX5_CQE_INVALID << 4` (`init_cq_frag_buf()` in drivers/infiniband/hw/mlx5/cq.c) and the
/// 64-byte CQE in the second half of a 128-byte one (`cqe_sz == 64 ? cqe : cqe + 64`, same
/// file).
///
/// `HW_ERR_SYND` (0x34) and `HW_SYND_TYPE` (0x35) have no source in the kernel or rdma-core:
/// both `mlx5_err_cqe` structs cover 0x24..0x35 with `rsvd1[18]`. The names come from
/// `struct mlx5_err_cqe_ex` of UCX (src/uct/ib/mlx5; its error log prints `hw_synd_type >> 4`),
/// NVSHMEM and DOCA GPUNetIO headers, and the pre-rdma-core MLNX_OFED libmlx5 `mlx5_err_cqe`
/// (`rsvd1[16]`, `hw_err_synd`, `hw_synd_type`). The kernel's mlx5_ifc.h has the same four
/// bytes in the same order as `struct mlx5_ifc_cqe_error_syndrome_bits` (hw_error_syndrome[8],
/// hw_syndrome_type[4], reserved[4], vendor_error_syndrome[8], syndrome[8]), but only inside
/// `qp_context_extension_bits` (QUERY_QP), not in a CQE structure.
#[test]
fn cqe_offsets() {
    use cqe::off;
    assert_eq!(cqe::CQE_SIZE, 64);
    assert_eq!(off::ML_PATH, 0x11);
    assert_eq!(off::SLID, 0x16);
    assert_eq!(off::FLAGS_RQPN, 0x18);
    assert_eq!(off::SRQN, 0x20);
    assert_eq!(off::IMM_INVAL_PKEY, 0x24);
    assert_eq!(off::BYTE_CNT, 0x2c);
    assert_eq!(off::TIMESTAMP, 0x30);
    assert_eq!(off::HW_ERR_SYND, 0x34);
    assert_eq!(off::HW_SYND_TYPE, 0x35);
    assert_eq!(off::VENDOR_ERR_SYND, 0x36);
    assert_eq!(off::SYNDROME, 0x37);
    assert_eq!(off::SOP_DROP_QPN, 0x38);
    assert_eq!(off::WQE_COUNTER, 0x3c);
    assert_eq!(off::SIGNATURE, 0x3e);
    assert_eq!(off::OP_OWN, 0x3f);
    assert_eq!(cqe::INITIAL_OP_OWN, 0xf0);
    assert_eq!(cqe::CQE128_OFFSET, 64);
}

/// Fields as `handle_responder()` in drivers/infiniband/hw/mlx5/cq.c reads them: src_qp =
/// flags_rqpn & 0xffffff, sl = (flags_rqpn >> 24) & 0xf, GRH = (flags_rqpn >> 28) & 3,
/// pkey = the low 16 bits of the word at 0x24, dlid_path_bits = ml_path; QPN = sop_drop_qpn &
/// 0xffffff.
#[test]
fn cqe_receive_decodes_from_a_hand_built_image() {
    let mut raw = [0u8; 64];
    raw[0x11] = 0x05; // ml_path
    raw[0x16..0x18].copy_from_slice(&[0x00, 0x2a]); // slid 42
    raw[0x18..0x1c].copy_from_slice(&[0x13, 0x00, 0x00, 0x01]); // grh 1, sl 3, src qpn 1
    raw[0x20..0x24].copy_from_slice(&[0x00, 0x00, 0x00, 0x07]);
    raw[0x24..0x28].copy_from_slice(&[0x00, 0x00, 0xff, 0xff]); // pkey 0xffff
    raw[0x2c..0x30].copy_from_slice(&[0, 0, 0x01, 0x28]); // 296 bytes = 40 GRH + 256 MAD
    raw[0x38..0x3c].copy_from_slice(&[0x00, 0x00, 0x01, 0x23]);
    raw[0x3c..0x3e].copy_from_slice(&[0x00, 0x09]);
    raw[0x3f] = 0x21; // RESP_SEND, owner 1
    let c = Cqe::decode(&raw).unwrap();
    assert_eq!(c.opcode, CqeOpcode::RESP_SEND);
    assert!(c.owner);
    assert_eq!(c.qpn, 0x123);
    assert_eq!(c.wqe_counter, 9);
    let CqeBody::Responder(r) = c.body else {
        panic!("not a responder CQE")
    };
    assert_eq!(r.byte_cnt, 296);
    assert_eq!(r.src_qpn, 1);
    assert_eq!(r.sl, 3);
    assert!(r.has_grh());
    assert_eq!(r.slid, 42);
    assert_eq!(r.ml_path, 5);
    assert_eq!(r.pkey(), 0xffff);
    assert_eq!(r.srqn, 7);
    assert_eq!(c.encode(), raw);
}

/// `struct mlx5_err_cqe` (device.h): vendor_err_synd 0x36, syndrome 0x37, the failed WQE's
/// opcode in the top byte of `s_wqe_opcode_qpn` at 0x38 (`handle_good_req()` in
/// drivers/infiniband/hw/mlx5/cq.c reads the same byte of a requester CQE as
/// `sop_drop_qpn >> 24`).
#[test]
fn cqe_error_decodes_from_a_hand_built_image() {
    let mut raw = [0u8; 64];
    raw[0x36] = 0x32; // vendor_err_synd
    raw[0x37] = 0x05; // WR_FLUSH_ERR
    raw[0x38..0x3c].copy_from_slice(&[0x0a, 0x00, 0x00, 0x48]); // SEND WQE, qpn 0x48
    raw[0x3c..0x3e].copy_from_slice(&[0x01, 0x00]);
    raw[0x3f] = 0xd0; // REQ_ERR, owner 0
    let c = Cqe::decode(&raw).unwrap();
    assert_eq!(c.opcode, CqeOpcode::REQ_ERR);
    assert_eq!((c.qpn, c.wqe_counter), (0x48, 0x100));
    let w = c.wc_error().unwrap();
    assert_eq!((w.status, w.vendor_err), (IbWcStatus::WrFlushErr, 0x32));
    let CqeBody::Error(ErrCqe {
        syndrome,
        wqe_opcode,
        ..
    }) = c.body
    else {
        panic!()
    };
    assert_eq!((syndrome, wqe_opcode), (CqeSyndrome::WR_FLUSHED_ERR, 0x0a));
    assert_eq!(c.encode(), raw);
    // A requester CQE built by the simulator lands where the table says.
    let req = Cqe {
        opcode: CqeOpcode::REQ,
        format: 0,
        owner: true,
        qpn: 0xabcdef,
        wqe_counter: 0x1234,
        signature: 0,
        body: CqeBody::Requester(ReqCqe {
            wqe_opcode: 0x0a,
            byte_cnt: 0,
            timestamp: 0,
        }),
    };
    let b = req.encode();
    assert_eq!(
        &b[0x38..0x40],
        &[0x0a, 0xab, 0xcd, 0xef, 0x12, 0x34, 0x00, 0x01]
    );
    let resp = Cqe {
        opcode: CqeOpcode::RESP_SEND,
        format: 0,
        owner: false,
        qpn: 1,
        wqe_counter: 0,
        signature: 0,
        body: CqeBody::Responder(RespCqe {
            l3_hdr: 1,
            sl: 0xf,
            src_qpn: 0xfffffe,
            ..Default::default()
        }),
    };
    assert_eq!(&resp.encode()[0x18..0x1c], &[0x1f, 0xff, 0xff, 0xfe]);
    assert_eq!(resp.encode()[0x3f], 0x20);
}

#[test]
fn cqe_ownership_rule() {
    // sw-owned iff opcode != INVALID && owner == !!(n & nent), as `get_sw_cqe()` in
    // drivers/infiniband/hw/mlx5/cq.c (`MLX5_CQE_OWNER_MASK = 1`, cq.h); nent = 8 here.
    assert!(!cqe::sw_owned(0xf0, 0, 8)); // initial value
    assert!(!cqe::sw_owned(0xf1, 8, 8)); // INVALID even with the right owner
    assert!(cqe::sw_owned(0x00, 0, 8)); // REQ, owner 0, first pass
    assert!(!cqe::sw_owned(0x01, 0, 8)); // owner 1 on the first pass: stale
    assert!(cqe::sw_owned(0x21, 9, 8)); // second pass wants owner 1
    assert!(!cqe::sw_owned(0x20, 9, 8));
    assert!(cqe::sw_owned(0x20, 17, 8)); // third pass: owner 0 again
}

/// Sources: `struct mlx5_eqe` (type 0x01, sub_type 0x03, data at 0x20, signature 0x3e, owner
/// 0x3f; packed, 64 bytes) and its data views in include/linux/mlx5/device.h:
/// `mlx5_eqe_cmd.vector` 0x20, `mlx5_eqe_comp` (cqn after reserved[6]: 0x38),
/// `mlx5_eqe_qp_srq` (type after reserved1[5]: 0x34, qp_srq_n 0x38), `mlx5_eqe_cq_err` (cqn
/// 0x20, syndrome after reserved1[7]: 0x2b), `mlx5_eqe_port_state` (port after reserved0[8]:
/// 0x28, read as `port >> 4` in drivers/infiniband/hw/mlx5/main.c), `mlx5_eqe_page_req`
/// (ec_function 0x20, func_id 0x22, num_pages 0x24). `MLX5_EQE_OWNER_INIT_VAL = 0x1` in
/// drivers/net/ethernet/mellanox/mlx5/core/eq.c; `MLX5_NUM_CMD_EQE` 32,
/// `MLX5_NUM_ASYNC_EQE` 0x1000, `MLX5_NUM_SPARE_EQE` 0x80 in include/linux/mlx5/eq.h.
#[test]
fn eqe_layout_and_events() {
    use eqe::off;
    assert_eq!(eqe::EQE_SIZE, 64);
    assert_eq!(off::TYPE, 0x01);
    assert_eq!(off::SUB_TYPE, 0x03);
    assert_eq!(off::DATA, 0x20);
    assert_eq!(off::CMD_VECTOR, 0x20);
    assert_eq!(off::COMP_CQN, 0x38);
    assert_eq!(off::QP_SRQ_TYPE, 0x34);
    assert_eq!(off::QP_SRQ_N, 0x38);
    assert_eq!(off::CQ_ERR_CQN, 0x20);
    assert_eq!(off::CQ_ERR_SYNDROME, 0x2b);
    assert_eq!(off::PORT, 0x28);
    assert_eq!(off::PAGE_REQ_FUNC_ID, 0x22);
    assert_eq!(off::PAGE_REQ_NUM_PAGES, 0x24);
    assert_eq!(off::SIGNATURE, 0x3e);
    assert_eq!(off::OWNER, 0x3f);
    assert_eq!(eqe::OWNER_INIT_VAL, 1);
    assert_eq!(eqe::NUM_SPARE_EQE, 0x80);
    assert_eq!(eqe::NUM_CMD_EQE, 32);
    assert_eq!(eqe::NUM_ASYNC_EQE, 0x1000);

    // Page request: function_id 0x0003, num_pages -16.
    let mut raw = [0u8; 64];
    raw[0x01] = 0x0b;
    raw[0x22..0x24].copy_from_slice(&[0x00, 0x03]);
    raw[0x24..0x28].copy_from_slice(&[0xff, 0xff, 0xff, 0xf0]);
    let e = Eqe::decode(&raw).unwrap();
    assert_eq!(e.event_type, EventType::PAGE_REQUEST);
    assert_eq!(
        e.event(),
        EqeEvent::PageRequest {
            ec_function: 0,
            function_id: 3,
            num_pages: -16
        }
    );
    assert_eq!(e.encode(), raw);

    // Command completion vector at 0x20.
    let mut raw = [0u8; 64];
    raw[0x01] = 0x0a;
    raw[0x20..0x24].copy_from_slice(&[0x80, 0x00, 0x00, 0x05]);
    assert_eq!(
        Eqe::decode(&raw).unwrap().event(),
        EqeEvent::Command {
            vector: 0x8000_0005
        }
    );

    // Completion: CQN at 0x38.
    let mut raw = [0u8; 64];
    raw[0x38..0x3c].copy_from_slice(&[0xff, 0x00, 0x04, 0x01]);
    raw[0x3f] = 1;
    let e = Eqe::decode(&raw).unwrap();
    assert_eq!(e.event(), EqeEvent::Completion { cqn: 0x401 });
    assert_eq!(e.owner, 1);

    // Port change: port in byte 0x28 bits [7:4], subtype at 0x03.
    let mut raw = [0u8; 64];
    raw[0x01] = 0x09;
    raw[0x03] = 0x04;
    raw[0x28] = 0x10;
    assert_eq!(
        Eqe::decode(&raw).unwrap().event(),
        EqeEvent::PortChange {
            port: 1,
            sub_type: 4
        }
    );

    // CQ error: CQN at 0x20, syndrome at 0x2b.
    let mut raw = [0u8; 64];
    raw[0x01] = 0x04;
    raw[0x20..0x24].copy_from_slice(&[0, 0, 0x02, 0x00]);
    raw[0x2b] = 0x01;
    assert_eq!(
        Eqe::decode(&raw).unwrap().event(),
        EqeEvent::CqError {
            cqn: 0x200,
            syndrome: 1
        }
    );

    // QP event: type at 0x34, QPN at 0x38.
    let mut raw = [0u8; 64];
    raw[0x01] = 0x05;
    raw[0x34] = 0;
    raw[0x38..0x3c].copy_from_slice(&[0, 0, 0x00, 0x48]);
    assert_eq!(
        Eqe::decode(&raw).unwrap().event(),
        EqeEvent::QueueEvent {
            event: EventType::WQ_CATAS_ERROR,
            queue_type: 0,
            number: 0x48
        }
    );

    // Built by the simulator: the same bytes.
    let built = Eqe::from_event(
        &EqeEvent::QueueEvent {
            event: EventType::WQ_CATAS_ERROR,
            queue_type: 0,
            number: 0x48,
        },
        0,
    );
    assert_eq!(built.encode(), raw);
}

#[test]
fn eqe_ownership_and_doorbell() {
    // sw-owned iff (owner & 1) == !!(ci & nent), as `next_eqe_sw()` in
    // drivers/net/ethernet/mellanox/mlx5/core/lib/eq.h: init value 1 is not sw-owned on pass 0.
    assert!(!eqe::sw_owned(eqe::OWNER_INIT_VAL, 0, 32));
    assert!(eqe::sw_owned(0, 0, 32));
    assert!(eqe::sw_owned(1, 32, 32));
    assert!(!eqe::sw_owned(0, 33, 32));
    // `eq_update_ci()` in lib/eq.h: (ci & 0xffffff) | eqn << 24, written at the UAR's
    // `MLX5_EQ_DOORBEL_OFFSET` (0x40, eq.c) to arm, two dwords further (0x48) not to.
    assert_eq!(eqe::eq_doorbell_value(0x0123_4567, 0x05), 0x0523_4567);
    let d = EqDoorbell {
        eqn: 2,
        ci: 0x100,
        arm: true,
    };
    assert_eq!((d.offset(), d.value()), (0x40, 0x0200_0100));
    let d = EqDoorbell { arm: false, ..d };
    assert_eq!(d.offset(), 0x48);
    assert_eq!(EqDoorbell::from_write(0x48, 0x0200_0100), Some(d));
    assert_eq!(EqDoorbell::from_write(0x44, 0), None);
}

/// Sources: `MLX5_CQ_DOORBELL` 0x20 and `MLX5_BF_OFFSET` 0x800 in include/linux/mlx5/doorbell.h
/// (rdma-core mlx5dv.h has `MLX5_CQ_DOORBELL` 0x20 too); `MLX5_EQ_DOORBEL_OFFSET` 0x40 in
/// drivers/net/ethernet/mellanox/mlx5/core/eq.c; `MLX5_BFREGS_PER_UAR` 4 in device.h;
/// `map_offset()` in drivers/net/ethernet/mellanox/mlx5/core/uar.c (blue-flame register i at
/// 0x800 + i * (1 << log_bf_reg_size)) and `uar2pfn()` there (UAR n at n * 4 KiB with
/// `uar_4k`, else at n system pages); `MLX5_RCV_DBR` 0 / `MLX5_SND_DBR` 1 in qp.h.
#[test]
fn uar_and_doorbells() {
    assert_eq!(doorbell::UAR_CQ_DOORBELL, 0x20);
    assert_eq!(doorbell::UAR_EQ_DOORBELL_ARM, 0x40);
    assert_eq!(doorbell::UAR_EQ_DOORBELL_NO_ARM, 0x48);
    assert_eq!(doorbell::UAR_BF_OFFSET, 0x800);
    assert_eq!(doorbell::BFREGS_PER_UAR, 4);
    assert_eq!(doorbell::bf_reg_offset(0, 9), 0x800);
    assert_eq!(doorbell::bf_reg_offset(1, 9), 0xa00);
    assert_eq!(doorbell::uar_bar_offset(3, true, 65536), 0x3000);
    assert_eq!(doorbell::uar_bar_offset(3, false, 65536), 0x30000);
    assert_eq!((doorbell::RCV_DBR, doorbell::SND_DBR), (0, 1));

    // QP DB record: [0] RQ counter, [1] SQ counter, each & 0xffff, big-endian: in
    // drivers/infiniband/hw/mlx5/wr.c `mlx5_ib_post_recv()` writes `rq.head & 0xffff` to
    // dword 0 and the send path the u16 `sq.cur_post` to `db.db[MLX5_SND_DBR]`; rdma-core
    // providers/mlx5/qp.c masks both with 0xffff.
    let r = QpDbRecord {
        rq: 0x1234,
        sq: 0xabcd,
    };
    assert_eq!(r.encode(), [0, 0, 0x12, 0x34, 0, 0, 0xab, 0xcd]);
    assert_eq!(QpDbRecord::counter_bytes(0x0001_0002), [0, 0, 0, 2]);
    assert_eq!(
        QpDbRecord::decode(&[0xff, 0xff, 0x00, 0x07, 0, 0, 0, 9]).unwrap(),
        QpDbRecord { rq: 7, sq: 9 }
    );

    // CQ arm word: (sn & 3) << 28 | cmd | (ci & 0xffffff); REQ_NOT_SOL = 1 << 24: `mlx5_cq_arm()`
    // and the `MLX5_CQ_DB_REQ_NOT*` enum in include/linux/mlx5/cq.h.
    let a = CqArm {
        sn: 1,
        cmd: CqArmCmd::NextSolicited,
        ci: 0x0100_0005,
    };
    assert_eq!(a.word(), 0x1100_0005);
    let a = CqArm {
        sn: 2,
        cmd: CqArmCmd::NextCompletion,
        ci: 7,
    };
    assert_eq!(a.word(), 0x2000_0007);
    // UAR+0x20: hi = arm word, lo = cqn.
    assert_eq!(a.uar_doorbell(0x89), 0x2000_0007_0000_0089);
    assert_eq!(
        a.uar_doorbell(0x89).to_be_bytes(),
        [0x20, 0, 0, 7, 0, 0, 0, 0x89]
    );
    assert_eq!(CqArm::from_uar_doorbell(0x2000_0007_0000_0089), (a, 0x89));
    // CQ DB record: [0] set_ci & 0xffffff (`mlx5_cq_set_ci()`, cq.h), [1] arm word (`arm_db`,
    // the second dword of the record).
    let r = CqDbRecord {
        set_ci: 0x0100_0003,
        arm: 0x2000_0007,
    };
    assert_eq!(r.encode(), [0, 0, 0, 3, 0x20, 0, 0, 7]);
}

/// Sources: include/linux/mlx5/qp.h: `MLX5_SEND_WQE_BB` 64, `MLX5_SEND_WQE_DS` 16,
/// `MLX5_SEND_WQE_MAX_WQEBBS` 16, `MLX5_INVALID_LKEY` 0x100, `struct mlx5_wqe_ctrl_seg`
/// (opmod_idx_opcode, qpn_ds, signature 0x08, fm_ce_se 0x0b, imm 0x0c; the
/// `MLX5_WQE_CTRL_*_MASK` / `_SHIFT` macros), `struct mlx5_av` (qkey 0x00, dqp_dct 0x08,
/// stat_rate_sl 0x0c, fl_mlid 0x0d, rlid 0x0e, rmac 0x14, tclass 0x1a, hop_limit 0x1b,
/// grh_gid_fl 0x1c, rgid 0x20; 48 bytes), `struct mlx5_wqe_data_seg`; include/linux/mlx5/
/// device.h: `MLX5_INLINE_SEG` and `MLX5_EXTENDED_UD_AV` 0x80000000. rdma-core mlx5dv.h has
/// the same (`struct mlx5_wqe_av`, `mlx5_wqe_ctrl_seg`, `mlx5_wqe_data_seg`). The datagram
/// bytes follow the kernel's AV fill (drivers/infiniband/hw/mlx5/ah.c: `stat_rate_sl =
/// rate << 4 | sl`, `grh_gid_fl = flow_label | 1 << 30 | sgid_index << 20`).
#[test]
fn wqe_segments() {
    assert_eq!(wqe::SEND_WQE_BB, 64);
    assert_eq!(wqe::SEND_WQE_DS, 16);
    assert_eq!(wqe::SEND_WQE_MAX_WQEBBS, 16);
    assert_eq!(wqe::CTRL_SEG_LEN, 16);
    assert_eq!(wqe::DATAGRAM_SEG_LEN, 48);
    assert_eq!(wqe::DATA_SEG_LEN, 16);
    assert_eq!(wqe::INLINE_SEG, 0x8000_0000);
    assert_eq!(wqe::INVALID_LKEY, 0x100);
    assert_eq!(wqe::EXTENDED_UD_AV, 0x8000_0000);
    assert_eq!(wqe::av_off::QKEY, 0x00);
    assert_eq!(wqe::av_off::DQP_DCT, 0x08);
    assert_eq!(wqe::av_off::STAT_RATE_SL, 0x0c);
    assert_eq!(wqe::av_off::FL_MLID, 0x0d);
    assert_eq!(wqe::av_off::RLID, 0x0e);
    assert_eq!(wqe::av_off::RMAC, 0x14);
    assert_eq!(wqe::av_off::TCLASS, 0x1a);
    assert_eq!(wqe::av_off::HOP_LIMIT, 0x1b);
    assert_eq!(wqe::av_off::GRH_GID_FL, 0x1c);
    assert_eq!(wqe::av_off::RGID, 0x20);

    // ctrl: [31:24] opmod, [23:8] wqe index, [7:0] opcode; qpn_ds: [31:8] qpn, [5:0] ds;
    // 0x08 signature, 0x0b fm_ce_se, 0x0c imm.
    let c = CtrlSeg {
        opmod: 0,
        wqe_index: 0x0102,
        opcode: WqeOpcode::SEND,
        qpn: 0x000048,
        ds: 5,
        signature: 0,
        fm_ce_se: fm_ce_se::CQ_UPDATE,
        imm: 0xdeadbeef,
    };
    assert_eq!(
        c.to_bytes().unwrap(),
        [
            0x00, 0x01, 0x02, 0x0a, 0x00, 0x00, 0x48, 0x05, 0, 0, 0, 0x08, 0xde, 0xad, 0xbe, 0xef
        ]
    );
    assert_eq!(c.doorbell_qword().unwrap(), 0x0001_020a_0000_4805);
    assert_eq!(CtrlSeg::decode(&c.to_bytes().unwrap()).unwrap(), c);

    // datagram: qkey, dqp | EXTENDED_UD_AV, stat_rate_sl, fl_mlid, rlid, grh bit 30.
    let av = DatagramSeg {
        qkey: 0x8001_0000,
        dqpn: 1,
        extended_ud: true,
        stat_rate: 0,
        sl: 2,
        force_loopback: false,
        path_bits: 0x03,
        rlid: 0x0011,
        grh: true,
        sgid_index: 1,
        flow_label: 0x12345,
        ..Default::default()
    };
    let b = av.to_bytes().unwrap();
    assert_eq!(&b[0x00..0x04], &[0x80, 0x01, 0x00, 0x00]);
    assert_eq!(&b[0x08..0x0c], &[0x80, 0x00, 0x00, 0x01]);
    assert_eq!(b[0x0c], 0x02);
    assert_eq!(b[0x0d], 0x03);
    assert_eq!(&b[0x0e..0x10], &[0x00, 0x11]);
    assert_eq!(&b[0x1c..0x20], &[0x40, 0x11, 0x23, 0x45]);
    assert_eq!(DatagramSeg::decode(&b).unwrap(), av);

    // data: byte_count, lkey, addr.
    let d = DataSeg {
        byte_count: 256,
        lkey: 0x1234,
        addr: 0x1_0000_2000,
    };
    assert_eq!(
        d.to_bytes(),
        [0, 0, 1, 0, 0, 0, 0x12, 0x34, 0, 0, 0, 1, 0, 0, 0x20, 0]
    );
    assert_eq!(wqe::inline_header(5).unwrap(), [0x80, 0, 0, 5]);
}

/// DS units of 16 bytes (`MLX5_SEND_WQE_DS`) rounded up to 64-byte basic blocks
/// (`MLX5_SEND_WQEBB_NUM_DS` = 4, qp.h); a short receive list ends with a data segment of
/// byte_count 0 and the terminator key (`mlx5_ib_post_recv()` in
/// drivers/infiniband/hw/mlx5/wr.c; `MLX5_INVALID_LKEY` 0x100 without the cap).
#[test]
fn wqe_size_arithmetic() {
    assert_eq!(wqe::ds_for_bytes(16 + 48 + 16), 5);
    assert_eq!(wqe::bbs_for_ds(4), 1);
    assert_eq!(wqe::bbs_for_ds(5), 2);
    assert_eq!(wqe::bbs_for_ds(8), 2);
    assert_eq!(wqe::bbs_for_ds(9), 3);
    // A UD send with one SGE: ctrl(16) + datagram(48) + data(16): DS = 4 + 1, two BBs.
    let w = UdSendWqe {
        ctrl: CtrlSeg {
            opcode: WqeOpcode::SEND,
            qpn: 2,
            fm_ce_se: fm_ce_se::CQ_UPDATE,
            ..Default::default()
        },
        av: DatagramSeg {
            qkey: 0x8001_0000,
            dqpn: 1,
            extended_ud: true,
            rlid: 1,
            ..Default::default()
        },
        gather: vec![Gather::Data(DataSeg {
            byte_count: 256,
            lkey: 0x100_0000,
            addr: 0x2000,
        })],
    };
    let (bytes, bbs) = w.to_bytes().unwrap();
    assert_eq!((bytes.len(), bbs), (128, 2));
    assert_eq!(bytes[7] & 0x3f, 5);
    assert_eq!(UdSendWqe::decode(&bytes).unwrap().gather, w.gather);
    // The allocation-free encoder emits the same two basic blocks.
    let Gather::Data(d) = w.gather[0] else {
        unreachable!()
    };
    let single = UdSendWqe::single_data(w.ctrl, &w.av, d).unwrap();
    assert_eq!(&single[..], &bytes[..]);
    // In place: every byte is written (over a buffer full of something else).
    let mut into = [0xa5u8; wqe::SINGLE_DATA_WQE_LEN];
    UdSendWqe::single_data_into(w.ctrl, &w.av, d, &mut into).unwrap();
    assert_eq!(&into[..], &bytes[..]);
    // With the datagram segment encoded beforehand: the same bytes.
    let mut with_av = [0x5au8; wqe::SINGLE_DATA_WQE_LEN];
    UdSendWqe::single_data_with_av(w.ctrl, &w.av.to_bytes().unwrap(), d, &mut with_av).unwrap();
    assert_eq!(&with_av[..], &bytes[..]);
    assert_eq!(wqe::SINGLE_DATA_WQE_LEN, 128);
    // Parsed in place: the same segments, the data entry borrowed, nothing more.
    let (ctrl, av, mut g) = UdSendWqe::parse_in_place(&bytes).unwrap();
    assert_eq!((ctrl.ds, ctrl.qpn, av), (5, 2, w.av));
    assert_eq!(g.next().unwrap().unwrap(), wqe::GatherRef::Data(d));
    assert!(g.next().is_none());
    // An inline entry whose length runs past the DS count ends the iteration with an error.
    let mut bad = bytes.clone();
    bad[64..68].copy_from_slice(&(0x8000_0000u32 | 0x28).to_be_bytes());
    let (_, _, mut g) = UdSendWqe::parse_in_place(&bad).unwrap();
    assert!(g.next().unwrap().is_err());
    assert!(g.next().is_none());
    assert!(UdSendWqe::decode(&bad).is_err());
    // Receive WQE shorter than the RQ's max SGE ends with the device's terminator key: 0x100
    // without the terminate_scatter_list_mkey cap.
    let seg = DataSeg {
        byte_count: 296,
        lkey: 7,
        addr: 0x3000,
    };
    let r = wqe::recv_wqe(&[seg], 2, wqe::INVALID_LKEY).unwrap();
    assert_eq!(
        &r[16..32],
        &[0, 0, 0, 0, 0, 0, 0x01, 0x00, 0, 0, 0, 0, 0, 0, 0, 0]
    );
    assert_eq!(wqe::parse_recv_wqe(&r, 0x100).unwrap(), [seg]);
}

/// With the `terminate_scatter_list_mkey` cap set, the kernel ends a short receive list with
/// the key QUERY_SPECIAL_CONTEXTS reports (`mlx5r_cmd_query_special_mkeys` in
/// drivers/infiniband/hw/mlx5/cmd.c, written by `mlx5_ib_post_recv` in wr.c), not 0x100: the
/// list ends at that key, and 0x100 is then an ordinary key.
#[test]
fn a_receive_list_ends_at_the_device_terminator_key() {
    let key = 0x0000_0200; // a device-reported key: any value the firmware picks
    let seg = DataSeg {
        byte_count: 296,
        lkey: 7,
        addr: 0x3000,
    };
    let r = wqe::recv_wqe(&[seg], 3, key).unwrap();
    assert_eq!(
        &r[16..32],
        &[0, 0, 0, 0, 0, 0, 0x02, 0x00, 0, 0, 0, 0, 0, 0, 0, 0]
    );
    assert_eq!(wqe::parse_recv_wqe(&r, key).unwrap(), [seg]);
    assert!(DataSeg::terminator(key).is_terminator(key));
    // Under that key, an entry with lkey 0x100 is data, and the list goes on past it.
    let other = DataSeg {
        byte_count: 64,
        lkey: wqe::INVALID_LKEY,
        addr: 0x4000,
    };
    let mut r = Vec::new();
    for s in [seg, other, DataSeg::terminator(key), seg] {
        r.extend_from_slice(&s.to_bytes());
    }
    assert!(!other.is_terminator(key));
    assert_eq!(wqe::parse_recv_wqe(&r, key).unwrap(), [seg, other]);
    // And under the fallback key the same bytes end after the first entry.
    assert_eq!(wqe::parse_recv_wqe(&r, wqe::INVALID_LKEY).unwrap(), [seg]);
}

/// §6.2: CQ error syndromes and the queue types of QP/SRQ events: `MLX5_CQ_ERROR_SYNDROME_*`
/// in include/linux/mlx5/mlx5_ifc.h, `MLX5_EVENT_QUEUE_TYPE_*` in include/linux/mlx5/device.h.
#[test]
fn eqe_cq_error_syndromes_and_queue_types() {
    assert_eq!(eqe::cq_error_syndrome::CQ_OVERRUN, 0x1);
    assert_eq!(eqe::cq_error_syndrome::CQ_ACCESS_VIOLATION_ERROR, 0x2);
    assert_eq!(eqe::queue_type::QP, 0);
    assert_eq!(eqe::queue_type::RQ, 1);
    assert_eq!(eqe::queue_type::SQ, 2);
    assert_eq!(eqe::queue_type::DCT, 6);
}

/// IBA §8.3 / `struct ib_grh` in include/rdma/ib_verbs.h: version_tclass_flow (BE32), paylen
/// (BE16), next_hdr, hop_limit, sgid, dgid; `IB_GRH_NEXT_HDR` 0x1B in include/rdma/ib_hdrs.h. The image is written out by hand: IPVer 6, TClass 0x12, FlowLabel 0x34567,
/// PayLen 280, NxtHdr 0x1b, HopLmt 0x40.
#[test]
fn grh_layout() {
    use firmware_cmds::mlx5::grh::{self, Grh};
    assert_eq!(grh::GRH_LEN, 40);
    assert_eq!(grh::off::PAYLEN, 4);
    assert_eq!(grh::off::NEXT_HDR, 6);
    assert_eq!(grh::off::HOP_LIMIT, 7);
    assert_eq!(grh::off::SGID, 8);
    assert_eq!(grh::off::DGID, 24);
    assert_eq!(grh::NEXT_HEADER_IBA, 0x1b);
    let mut raw = [0u8; 40];
    raw[0..4].copy_from_slice(&[0x61, 0x23, 0x45, 0x67]);
    raw[4..6].copy_from_slice(&[0x01, 0x18]);
    raw[6] = 0x1b;
    raw[7] = 0x40;
    for i in 0..16 {
        raw[8 + i] = 0xa0 + i as u8;
        raw[24 + i] = 0xb0 + i as u8;
    }
    let g = Grh::decode(&raw).unwrap();
    assert_eq!(g.ip_version, 6);
    assert_eq!(g.traffic_class, 0x12);
    assert_eq!(g.flow_label, 0x34567);
    assert_eq!(g.payload_len, 280);
    assert_eq!(g.next_header, 0x1b);
    assert_eq!(g.hop_limit, 0x40);
    assert_eq!(g.sgid[0], 0xa0);
    assert_eq!(g.dgid[15], 0xbf);
    assert_eq!(g.encode(), raw);
    assert!(Grh::decode(&raw[..39]).is_err());
}

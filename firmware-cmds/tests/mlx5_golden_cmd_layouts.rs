//! Golden tests of the mlx5 command layouts against mlx5_ifc.h
//! (`include/linux/mlx5/mlx5_ifc.h`, MLNX_OFED 24.07 copy of upstream, wjz304/mlnx-ofed-kernel
//! @2c0186b). Each expected (bit offset, width) pair and each byte position is written out by
//! hand from the named `mlx5_ifc_<struct>_bits` field: bit offset counted from the MSB of
//! dword 0, byte = bit / 8 for byte-aligned fields; a field of width w at bit b sits in dword
//! b / 32, bits [31 - b % 32 : 32 - b % 32 - w].
//!
//! Every field below was checked against that copy by adding up the widths of the members
//! before it, nested `_bits` structs included, and every length against the struct's size
//! (`MLX5_ST_SZ_BYTES`). Where mlx5_ifc.h renamed a field since, the test says so. Constants
//! that are not layouts name their own file; `QUERY_QP`'s output length follows rdma-core
//! (linux-rdma/rdma-core @691953d8, providers/mlx5/mlx5_ifc.h), see `create_qp_for_qp1_image`.

use firmware_cmds::mlx5::bits::{Bytes, Field, Field64};
use firmware_cmds::mlx5::caps::{self, CapType, HcaCaps};
use firmware_cmds::mlx5::cqc::{self, Cqc};
use firmware_cmds::mlx5::eqc::{self, Eqc};
use firmware_cmds::mlx5::ops::access_reg::{self, AccessReg};
use firmware_cmds::mlx5::ops::cq::{self, CreateCq, CreateCqOut, DestroyCq};
use firmware_cmds::mlx5::ops::eq::{self, CreateEq, CreateEqOut, DestroyEq};
use firmware_cmds::mlx5::ops::hca::{
    self, EnableHca, InitHca, TeardownHca, TeardownHcaOut, TeardownProfile,
};
use firmware_cmds::mlx5::ops::hca_cap::{self, CapMode, QueryHcaCap, QueryHcaCapOut, SetHcaCap};
use firmware_cmds::mlx5::ops::issi::{self, QueryIssiOut, SetIssi};
use firmware_cmds::mlx5::ops::mad_ifc::{self, MadIfc, MadIfcOut};
use firmware_cmds::mlx5::ops::pages::{
    self, ManagePages, ManagePagesOut, PagesKind, PagesOp, QueryPages, QueryPagesOut,
};
use firmware_cmds::mlx5::ops::pd::{self, AllocPdOut, DeallocPd};
use firmware_cmds::mlx5::ops::qp::{self, CreateQp, CreateQpOut, QueryQp, QueryQpOut};
use firmware_cmds::mlx5::ops::qp_modify::{ModifyQp, Qp2Err, Rst2InitQp};
use firmware_cmds::mlx5::ops::special_contexts::{self, SpecialContexts};
use firmware_cmds::mlx5::ops::uar::{self, AllocUarOut};
use firmware_cmds::mlx5::ops::vport::{self, HcaVportContext, QueryHcaVportContext, VportState};
use firmware_cmds::mlx5::ops::{Command, CommandOutput};
use firmware_cmds::mlx5::qpc::{self, QpServiceType, QpState, Qpc};

fn f(field: Field, bit: usize, width: u32) {
    assert_eq!(
        (field.bit, field.width),
        (bit, width),
        "field {}",
        field.name
    );
}

fn f64(field: Field64, bit: usize) {
    assert_eq!(field.bit, bit, "field {}", field.name);
}

fn fb(field: Bytes, bit: usize, len: usize) {
    assert_eq!((field.bit, field.len), (bit, len), "field {}", field.name);
}

/// `struct mlx5_ifc_mbox_in_bits` / `mlx5_ifc_mbox_out_bits`: defined in
/// drivers/net/ethernet/mellanox/mlx5/core/cmd.c, not in mlx5_ifc.h.
#[test]
fn generic_headers() {
    use firmware_cmds::mlx5::cmd::header::field as h;
    // mbox_in: opcode[0x10] at 0x00, uid[0x10] at 0x10, op_mod[0x10] at 0x30.
    f(h::OPCODE, 0x00, 16);
    f(h::UID, 0x10, 16);
    f(h::OP_MOD, 0x30, 16);
    // mbox_out: status[0x8] at 0x00, syndrome[0x20] at 0x20.
    f(h::STATUS, 0x00, 8);
    f(h::SYNDROME, 0x20, 32);
}

/// mlx5_ifc.h: `enable_hca_in/out`, `init_hca_in`, `teardown_hca_in/out`, `query_issi_out`,
/// `set_issi_in`, `query_pages_in/out`, `manage_pages_in/out`, `access_register_in`,
/// `query_hca_cap_in/out` and `set_hca_cap_in` (capability = `union mlx5_ifc_hca_cap_union_bits`,
/// 0x8000 bits), `alloc_uar_out`, `alloc_pd_out`, `query_special_contexts_out`;
/// `MLX5_REG_HOST_ENDIANNESS = 0x7004` in include/linux/mlx5/driver.h.
#[test]
fn hca_and_issi_and_pages_fields() {
    // enable_hca_in: embedded_cpu_function 0x40/1, function_id 0x50/16.
    f(hca::field::EMBEDDED_CPU_FUNCTION, 0x40, 1);
    f(hca::field::FUNCTION_ID, 0x50, 16);
    // init_hca_in.sw_owner_id[4][0x20] at 0x80.
    fb(hca::field::SW_OWNER_ID, 0x80, 16);
    // teardown_hca_in.profile 0x50/16; teardown_hca_out.state 0x7f/1.
    f(hca::field::PROFILE, 0x50, 16);
    f(hca::field::FORCE_STATE, 0x7f, 1);
    assert_eq!(hca::ENABLE_HCA_IN_LEN, 0x10);
    assert_eq!(hca::ENABLE_HCA_OUT_LEN, 0x0c); // enable_hca_out is 0x60 bits
    assert_eq!(hca::INIT_HCA_IN_LEN, 0x20);
    // query_issi_out: current_issi 0x50/16, supported_issi_dw0 0x360/32; size 0x380 bits.
    f(issi::field::CURRENT_ISSI_OUT, 0x50, 16);
    f(issi::field::SUPPORTED_ISSI_DW0, 0x360, 32);
    assert_eq!(issi::QUERY_ISSI_OUT_LEN, 0x70);
    // set_issi_in.current_issi 0x50/16.
    f(issi::field::CURRENT_ISSI_IN, 0x50, 16);
    // query_pages_in/out, manage_pages_in/out (query_pages_out.function_id is 0x50/16 too).
    f(pages::field::EMBEDDED_CPU_FUNCTION, 0x40, 1);
    f(pages::field::FUNCTION_ID, 0x50, 16);
    f(pages::field::NUM_PAGES, 0x60, 32);
    f(pages::field::INPUT_NUM_ENTRIES, 0x60, 32);
    f(pages::field::OUTPUT_NUM_ENTRIES, 0x40, 32);
    assert_eq!(pages::PAS_OFFSET, 0x10); // pas[0][0x40] at bit 0x80
    // access_register_in: register_id 0x50/16, argument 0x60/32, register_data at 0x80.
    f(access_reg::field::REGISTER_ID, 0x50, 16);
    f(access_reg::field::ARGUMENT, 0x60, 32);
    assert_eq!(access_reg::REGISTER_DATA_OFFSET, 0x10);
    assert_eq!(access_reg::REG_HOST_ENDIANNESS, 0x7004);
    // query/set_hca_cap_in: other_function 0x40/1, function_id 0x50/16; capability at 0x80.
    f(hca_cap::field::OTHER_FUNCTION, 0x40, 1);
    f(hca_cap::field::FUNCTION_ID, 0x50, 16);
    assert_eq!(hca_cap::CAPABILITY_OFFSET, 0x10);
    assert_eq!(hca_cap::HCA_CAP_LONG_LEN, 0x1010); // 0x80 + 0x8000 bits
    // alloc_uar_out.uar / alloc_pd_out.pd: 0x48/24.
    f(uar::field::UAR, 0x48, 24);
    f(pd::field::PD, 0x48, 24);
    // query_special_contexts_out.
    f(special_contexts::field::DUMP_FILL_MKEY, 0x40, 32);
    f(special_contexts::field::RESD_LKEY, 0x60, 32);
    f(special_contexts::field::NULL_MKEY, 0x80, 32);
    f(
        special_contexts::field::TERMINATE_SCATTER_LIST_MKEY,
        0xa0,
        32,
    );
    f(special_contexts::field::REPEATED_MKEY, 0xc0, 32);
    assert_eq!(special_contexts::QUERY_SPECIAL_CONTEXTS_OUT_LEN, 0x20);
}

/// `struct mlx5_ifc_cmd_hca_cap_bits`; `CAP_LEN` is `union mlx5_ifc_hca_cap_union_bits`
/// (0x8000 bits = 0x1000 bytes; cmd_hca_cap itself is 0x800 bits). Cap types: `enum
/// mlx5_cap_type` in include/linux/mlx5/device.h (`MLX5_CAP_GENERAL = 0`, `MLX5_CAP_ROCE` the
/// fifth, 4; `MLX5_SET_HCA_CAP_OP_MOD_ROCE = 0x4` in mlx5_ifc.h). P_Key table codes:
/// `to_fw_pkey_sz()` in drivers/net/ethernet/mellanox/mlx5/core/main.c (128 -> 0 ... 4096 -> 5)
/// and `mlx5_to_sw_pkey_sz()` in device.h (`MLX5_MIN_PKEY_TABLE_SIZE << code`).
#[test]
fn cmd_hca_cap_fields() {
    use caps::field as c;
    // mlx5_ifc_cmd_hca_cap_bits.
    let table: &[(Field, usize, u32)] = &[
        (c::VHCA_ID, 0x30, 16),
        (c::LOG_MAX_SRQ_SZ, 0x80, 8),
        (c::LOG_MAX_QP_SZ, 0x88, 8),
        (c::LOG_MAX_QP, 0x9b, 5),
        (c::LOG_MAX_SRQ, 0xab, 5),
        (c::LOG_MAX_CQ_SZ, 0xc8, 8),
        (c::LOG_MAX_CQ, 0xdb, 5),
        (c::LOG_MAX_EQ_SZ, 0xe0, 8),
        (c::LOG_MAX_MKEY, 0xea, 6),
        (c::LOG_MAX_EQ, 0xfc, 4),
        (c::LOG_MAX_RA_REQ_QP, 0x14a, 6),
        (c::GID_TABLE_SIZE, 0x170, 16),
        (c::PKEY_TABLE_SIZE, 0x190, 16),
        (c::PORT_TYPE, 0x1b6, 2),
        (c::NUM_PORTS, 0x1b8, 8),
        (c::LOG_MAX_MSG, 0x1c3, 5),
        (c::STAT_RATE_SUPPORT, 0x1e0, 16),
        (c::CQE_VERSION, 0x1fc, 4),
        (c::CMDIF_CHECKSUM, 0x210, 2),
        (c::LOG_PG_SZ, 0x258, 8),
        (c::LOG_BF_REG_SIZE, 0x26b, 5),
        (c::MAX_WQE_SZ_SQ, 0x290, 16),
        (c::MAX_WQE_SZ_RQ, 0x2b0, 16),
        (c::LOG_MAX_PD, 0x32b, 5),
        (c::SQ_TS_FORMAT, 0x440, 2),
        (c::LOG_UAR_PAGE_SZ, 0x490, 16),
        (c::NUM_OF_UARS_PER_PAGE, 0x520, 32),
        (c::HCA_CAP_2, 0x20, 1),
        (c::EVENT_CAP, 0x90, 1),
        // mlx5_ifc.h: reserved_at_f0[0x6], then terminate_scatter_list_mkey[0x1].
        (c::TERMINATE_SCATTER_LIST_MKEY, 0xf6, 1),
        (c::FAST_TEARDOWN, 0xfb, 1),
        (c::FORCE_TEARDOWN, 0x110, 1),
        (c::NULL_MKEY, 0x119, 1),
        (c::END_PAD, 0x160, 1),
        (c::CACHE_LINE_128BYTE, 0x164, 1),
        (c::OUT_OF_SEQ_CNT, 0x180, 1),
        (c::VPORT_COUNTERS, 0x181, 1),
        (c::VPORT_GROUP_MANAGER, 0x1a0, 1),
        (c::IB_VIRT, 0x1a2, 1),
        (c::PORT_MODULE_EVENT, 0x1b0, 1),
        (c::PCI_SYNC_FOR_FW_UPDATE_EVENT, 0x1f1, 1),
        (c::DCT, 0x21a, 1),
        (c::ROCE, 0x21d, 1),
        (c::ATOMIC, 0x21e, 1),
        (c::CQ_OI, 0x220, 1),
        (c::CQ_RESIZE, 0x221, 1),
        (c::CQ_MODERATION, 0x222, 1),
        (c::SET_DETH_SQPN, 0x238, 1),
        (c::XRC, 0x23c, 1),
        (c::UD, 0x23d, 1),
        (c::UC, 0x23e, 1),
        (c::RC, 0x23f, 1),
        (c::UAR_4K, 0x240, 1),
        (c::BF, 0x260, 1),
        (c::DRIVER_VERSION, 0x261, 1),
        (c::CQE_128_ALWAYS, 0x5bd, 1),
        (c::CQE_COMPRESSION, 0x5bf, 1),
        (c::SW_OWNER_ID, 0x61e, 1),
    ];
    for &(fld, bit, w) in table {
        f(fld, bit, w);
    }
    assert_eq!(c::ALL.len(), table.len());
    assert_eq!(caps::CAP_LEN, 0x1000);
    assert_eq!(CapType::GENERAL.0, 0);
    assert_eq!(CapType::ROCE.0, 4);
    // to_fw_pkey_sz: 128 -> 0 ... 4096 -> 5.
    assert_eq!(caps::pkey_table_code(128), Some(0));
    assert_eq!(caps::pkey_table_code(4096), Some(5));
    assert_eq!(caps::pkey_table_code(100), None);
    assert_eq!(caps::pkey_table_entries(1), Some(256));
}

/// Byte positions of `query_hca_cap_out.capability` (bit 0x80) plus a `cmd_hca_cap` bit / 8;
/// `MLX5_CAP_PORT_TYPE_ETH = 0x1` (mlx5_ifc.h). op_mod: `mlx5_core_get_caps_mode()` in
/// drivers/net/ethernet/mellanox/mlx5/core/main.c builds `cap_type << 1 | mode` for QUERY
/// (`HCA_CAP_OPMOD_GET_MAX = 0`, `HCA_CAP_OPMOD_GET_CUR = 1`, device.h), `set_caps()` there
/// `opmod << 1` for SET.
#[test]
fn query_hca_cap_output_byte_positions() {
    // query_hca_cap_out.capability at bit 0x80 (byte 0x10): a cap at cap bit b lands in
    // output byte 0x10 + b / 8.
    let mut out = vec![0u8; 0x1010];
    out[0x10 + 0x13] = 0x12; // log_max_qp = 18: cap dword 4 bits [4:0]
    out[0x10 + 0x36] = 0x01; // port_type = ETH: cap dword 13 bits [9:8]
    out[0x10 + 0x37] = 0x02; // num_ports = 2
    out[0x10 + 0x42] = 0xc0; // cmdif_checksum = 3: cap dword 16 bits [15:14]
    out[0x10 + 0x48] = 0x80; // uar_4k: cap dword 18 bit 31
    out[0x10 + 0x4d] = 0x09; // log_bf_reg_size = 9: cap dword 19 bits [20:16]
    out[0x10 + 0x4b] = 0x0c; // log_pg_sz = 12
    out[0x10 + 0x32] = 0x00; // pkey_table_size bytes 0x32..0x34
    out[0x10 + 0x33] = 0x01;
    out[0x10 + 0x3f] = 0x01; // cqe_version = 1
    out[0x10 + 0x38] = 0x1e; // log_max_msg = 30: cap dword 14 bits [28:24]
    out[0x10 + 0x19] = 0x16; // log_max_cq_sz = 22
    out[0x10 + 0x1b] = 0x18; // log_max_cq = 24
    out[0x10 + 0x11] = 0x0f; // log_max_qp_sz = 15
    out[0x10 + 0x1c] = 0x17; // log_max_eq_sz = 23
    out[0x10 + 0x1f] = 0x07; // log_max_eq = 7 (bits [3:0])
    out[0x10 + 0x47] = 0x84; // set_deth_sqpn (bit 7) and ud (bit 2) of cap byte 0x47
    out[0x10 + 0x34] = 0x20; // ib_virt: cap dword 13 bit 29
    let caps = QueryHcaCapOut::decode(&out).unwrap().caps;
    assert_eq!(caps.log_max_qp(), 18);
    assert_eq!(caps.port_type(), caps::port_type::ETH);
    assert_eq!(caps.num_ports(), 2);
    assert_eq!(caps.cmdif_checksum(), 3);
    assert!(caps.uar_4k());
    assert_eq!(caps.log_bf_reg_size(), 9);
    assert_eq!(caps.log_pg_sz(), 12);
    assert_eq!(caps.pkey_table_size(), 1);
    assert_eq!(caps.cqe_version(), 1);
    assert_eq!(caps.log_max_msg(), 30);
    assert_eq!(caps.log_max_cq_sz(), 22);
    assert_eq!(caps.log_max_cq(), 24);
    assert_eq!(caps.log_max_qp_sz(), 15);
    assert_eq!(caps.log_max_eq_sz(), 23);
    assert_eq!(caps.log_max_eq(), 7);
    assert!(caps.set_deth_sqpn() && caps.ud() && !caps.rc());
    assert!(caps.ib_virt());

    // SET_HCA_CAP: op_mod = cap_type << 1 at bytes 6..8; capability at byte 0x10.
    let mut c = HcaCaps::zeroed();
    c.set_log_max_qp(18).unwrap();
    c.set_cmdif_checksum(0).unwrap();
    c.set_pkey_table_size(caps::pkey_table_code(128).unwrap())
        .unwrap();
    let inp = SetHcaCap {
        cap_type: CapType::GENERAL,
        other_function: false,
        function_id: 0,
        caps: c,
    }
    .encode()
    .unwrap();
    assert_eq!(inp.len(), 0x1010);
    assert_eq!(&inp[0..8], &[0x01, 0x09, 0, 0, 0, 0, 0, 0x00]);
    assert_eq!(inp[0x10 + 0x13], 0x12);
    // QUERY_HCA_CAP current general caps: op_mod = (0 << 1) | 1.
    let q = QueryHcaCap::general(CapMode::Current).encode().unwrap();
    assert_eq!(
        q,
        [0x01, 0x00, 0, 0, 0, 0, 0x00, 0x01, 0, 0, 0, 0, 0, 0, 0, 0]
    );
    let q = QueryHcaCap {
        cap_type: CapType::ROCE,
        mode: CapMode::Max,
        other_function: true,
        function_id: 3,
    }
    .encode()
    .unwrap();
    assert_eq!(&q[6..12], &[0x00, 0x08, 0x80, 0x00, 0x00, 0x03]);
}

/// Command images from the `_bits` structs of `hca_and_issi_and_pages_fields`; op_mods:
/// `MLX5_QUERY_PAGES_IN_OP_MOD_BOOT_PAGES = 0x1` (mlx5_ifc.h); `MLX5_PAGES_CANT_GIVE = 0`,
/// `MLX5_PAGES_GIVE = 1`, `MLX5_PAGES_TAKE = 2` and the TAKE output length
/// `MLX5_ST_SZ_BYTES(manage_pages_out) + npages * 8` (`reclaim_pages()`), both in
/// drivers/net/ethernet/mellanox/mlx5/core/pagealloc.c; ACCESS_REG `op_mod = !write`
/// (`mlx5_core_access_reg()`, port.c); HOST_ENDIANNESS data = `struct
/// mlx5_reg_host_endianness` (main.c, `he` first) with `MLX5_SET_HOST_ENDIANNESS` 0 on a
/// little-endian host, 0x80 on a big-endian one (device.h; written by `set_hca_ctrl()`);
/// `MLX5_TEARDOWN_HCA_IN_PROFILE_PREPARE_FAST_TEARDOWN = 0x2` and
/// `MLX5_TEARDOWN_HCA_OUT_FORCE_STATE_FAIL = 0x1` (mlx5_ifc.h).
#[test]
fn bring_up_command_images() {
    // ENABLE_HCA: opcode 0x104; function_id at bytes 0x0a..0x0c.
    let b = EnableHca {
        function_id: 0x0102,
        embedded_cpu_function: true,
    }
    .encode()
    .unwrap();
    assert_eq!(
        b,
        [
            0x01, 0x04, 0, 0, 0, 0, 0, 0, 0x80, 0, 0x01, 0x02, 0, 0, 0, 0
        ]
    );
    // SET_ISSI current_issi at bytes 0x0a..0x0c.
    let b = SetIssi { current_issi: 1 }.encode().unwrap();
    assert_eq!(b, [0x01, 0x0b, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01, 0, 0, 0, 0]);
    // QUERY_ISSI out: current_issi 0x0a..0x0c, supported_issi_dw0 0x6c..0x70.
    let mut o = vec![0u8; 0x70];
    o[0x0b] = 1;
    o[0x6f] = 0x03;
    let q = QueryIssiOut::decode(&o).unwrap();
    assert_eq!((q.current_issi, q.supported_issi_dw0), (1, 3));
    assert!(q.supports(1) && !q.supports(2));
    // QUERY_PAGES op_mod 1 (BOOT) at bytes 6..8.
    let b = QueryPages {
        kind: PagesKind::Boot,
        function_id: 0,
        embedded_cpu_function: false,
    }
    .encode()
    .unwrap();
    assert_eq!(&b[0..8], &[0x01, 0x07, 0, 0, 0, 0, 0, 0x01]);
    // QUERY_PAGES out: function_id 0x0a..0x0c, num_pages (signed) 0x0c..0x10.
    let mut o = vec![0u8; 0x10];
    o[0x0b] = 0x05;
    o[0x0c..0x10].copy_from_slice(&[0xff, 0xff, 0xff, 0xfe]);
    let q = QueryPagesOut::decode(&o).unwrap();
    assert_eq!((q.function_id, q.num_pages), (5, -2));
    // MANAGE_PAGES GIVE (op_mod 1): input_num_entries 0x0c..0x10, pas from 0x10.
    let b = ManagePages {
        op: PagesOp::Give(vec![0x1_0000_1000, 0x2000]),
        function_id: 5,
        embedded_cpu_function: false,
    }
    .encode()
    .unwrap();
    assert_eq!(b.len(), 0x20);
    assert_eq!(
        &b[0..0x10],
        &[
            0x01, 0x08, 0, 0, 0, 0, 0, 0x01, 0, 0, 0, 0x05, 0, 0, 0, 0x02
        ]
    );
    assert_eq!(
        &b[0x10..0x20],
        &[0, 0, 0, 1, 0, 0, 0x10, 0, 0, 0, 0, 0, 0, 0, 0x20, 0]
    );
    // TAKE (op_mod 2) asks for 3 pages and needs an output of 0x10 + 3 * 8.
    let take = ManagePages {
        op: PagesOp::Take(3),
        function_id: 0,
        embedded_cpu_function: false,
    };
    assert_eq!(take.encode().unwrap()[7], 0x02);
    assert_eq!(take.out_len(), 0x28);
    // CANT_GIVE is op_mod 0.
    let cg = ManagePages {
        op: PagesOp::CantGive,
        function_id: 0,
        embedded_cpu_function: false,
    };
    assert_eq!(cg.encode().unwrap()[7], 0x00);
    // MANAGE_PAGES out: output_num_entries 0x08..0x0c, pas from 0x10.
    let mut o = vec![0u8; 0x18];
    o[0x0b] = 1;
    o[0x10..0x18].copy_from_slice(&[0, 0, 0, 0, 0, 0, 0x30, 0]);
    assert_eq!(ManagePagesOut::decode(&o).unwrap().pas, vec![0x3000]);
    // ACCESS_REG write HOST_ENDIANNESS: op_mod 0, register_id 0x7004, data he at 0x10.
    let b = AccessReg::host_endianness(false).encode().unwrap();
    assert_eq!(b.len(), 0x20);
    assert_eq!(
        &b[0..0x10],
        &[0x08, 0x05, 0, 0, 0, 0, 0, 0, 0, 0, 0x70, 0x04, 0, 0, 0, 0]
    );
    assert_eq!(b[0x10], 0x00);
    assert_eq!(
        AccessReg::host_endianness(true).encode().unwrap()[0x10],
        0x80
    );
    // ACCESS_REG write PCAP (mlx5 port.c `mlx5_set_port_caps`, `struct mlx5_reg_pcap` there):
    // register_id 0x5001 (`MLX5_REG_PCAP`, driver.h); data = rsvd, port_num, rsvd[2],
    // caps_127_96 (BE), 3 more words.
    let b = AccessReg::pcap(2, 0x0251_0a6a).encode().unwrap();
    assert_eq!(b.len(), 0x10 + 20);
    assert_eq!(&b[0x0a..0x0c], &[0x50, 0x01]);
    assert_eq!(
        &b[0x10..0x24],
        &[
            0, 2, 0, 0, 0x02, 0x51, 0x0a, 0x6a, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0
        ]
    );
    assert_eq!(
        access_reg::Pcap::decode(&b[0x10..]),
        Some(access_reg::Pcap {
            port: 2,
            caps: 0x0251_0a6a
        })
    );
    assert_eq!(access_reg::Pcap::decode(&b[0x10..0x20]), None, "short");
    // INIT_HCA sw_owner_id at bytes 0x10..0x20.
    let b = InitHca {
        sw_owner_id: [0x0102_0304, 0, 0, 0x0a0b_0c0d],
    }
    .encode()
    .unwrap();
    assert_eq!(b.len(), 0x20);
    assert_eq!(&b[0x10..0x14], &[1, 2, 3, 4]);
    assert_eq!(&b[0x1c..0x20], &[0x0a, 0x0b, 0x0c, 0x0d]);
    // TEARDOWN_HCA profile at 0x0a..0x0c; out state is byte 0x0f bit 0.
    let b = TeardownHca {
        profile: TeardownProfile::PrepareFastTeardown,
    }
    .encode()
    .unwrap();
    assert_eq!(
        &b[0..0x0c],
        &[0x01, 0x03, 0, 0, 0, 0, 0, 0, 0, 0, 0x00, 0x02]
    );
    let mut o = vec![0u8; 0x10];
    o[0x0f] = 1;
    assert!(TeardownHcaOut::decode(&o).unwrap().force_state_fail);
    // ALLOC_UAR / ALLOC_PD out: 24-bit id at bytes 0x09..0x0c.
    let mut o = vec![0u8; 0x10];
    o[0x08] = 0xff; // reserved bits above the 24-bit field are ignored
    o[0x09..0x0c].copy_from_slice(&[0x01, 0x02, 0x03]);
    assert_eq!(AllocUarOut::decode(&o).unwrap().uar, 0x010203);
    assert_eq!(AllocPdOut::decode(&o).unwrap().pd, 0x010203);
    let b = DeallocPd { pd: 0x0a0b0c }.encode().unwrap();
    assert_eq!(
        &b[0..0x0c],
        &[0x08, 0x01, 0, 0, 0, 0, 0, 0, 0, 0x0a, 0x0b, 0x0c]
    );
    // QUERY_SPECIAL_CONTEXTS out: resd_lkey at 0x0c..0x10.
    let mut o = vec![0u8; 0x20];
    o[0x0c..0x10].copy_from_slice(&[0, 0, 0x01, 0x00]);
    o[0x10..0x14].copy_from_slice(&[0, 0, 0x02, 0x00]);
    let s = SpecialContexts::decode(&o).unwrap();
    assert_eq!((s.resd_lkey, s.null_mkey), (0x100, 0x200));
}

/// `struct mlx5_ifc_eqc_bits`, `create_eq_in/out`, `destroy_eq_in`; `MLX5_EQ_STATE_ARMED =
/// 0x9`, `MLX5_EQ_STATE_FIRED = 0xa` in drivers/net/ethernet/mellanox/mlx5/core/eq.c; event n
/// is bit n of the first 64-bit `event_bitmask` word (`create_map_eq()` in eq.c writes
/// `mask[i]` with `MLX5_ARRAY_SET64`).
#[test]
fn eqc_and_create_eq() {
    // mlx5_ifc_eqc_bits.
    f(eqc::field::STATUS, 0x00, 4);
    f(eqc::field::EC, 0x0d, 1);
    f(eqc::field::OI, 0x0e, 1);
    f(eqc::field::ST, 0x14, 4);
    f(eqc::field::PAGE_OFFSET, 0x54, 6);
    f(eqc::field::LOG_EQ_SIZE, 0x63, 5);
    f(eqc::field::UAR_PAGE, 0x68, 24);
    f(eqc::field::INTR, 0xb4, 12);
    f(eqc::field::LOG_PAGE_SIZE, 0xc3, 5);
    f(eqc::field::CONSUMER_COUNTER, 0x148, 24);
    f(eqc::field::PRODUCER_COUNTER, 0x168, 24);
    assert_eq!(eqc::EQC_LEN, 0x40);
    assert_eq!((eqc::st::ARMED, eqc::st::FIRED), (0x9, 0xa));
    // create_eq_in: eq_context_entry at 0x80 (byte 0x10), event_bitmask at 0x2c0 (byte 0x58),
    // pas at 0x880 (byte 0x110); create_eq_out.eq_number 0x58/8.
    assert_eq!(eq::EQC_OFFSET, 0x10);
    assert_eq!(eq::EVENT_BITMASK_OFFSET, 0x58);
    f64(eq::field::EVENT_BITMASK_0, 0x2c0);
    assert_eq!(eq::PAS_OFFSET, 0x110);
    f(eq::field::EQ_NUMBER, 0x58, 8);

    let ce = CreateEq {
        ctx: Eqc {
            log_eq_size: 7,
            uar_page: 0x000123,
            intr: 0x345,
            log_page_size: 0,
            ..Default::default()
        },
        event_bitmask: [0; 4],
        pas: vec![0x7000],
    }
    .with_event(0x0a)
    .with_event(0x0b);
    let b = ce.encode().unwrap();
    assert_eq!(b.len(), 0x118);
    assert_eq!(&b[0..2], &[0x03, 0x01]);
    assert_eq!(b[0x1c], 0x07); // log_eq_size: eqc byte 0x0c bits [4:0]
    assert_eq!(&b[0x1d..0x20], &[0x00, 0x01, 0x23]); // uar_page
    assert_eq!(&b[0x26..0x28], &[0x03, 0x45]); // intr: eqc dword 5 bits [11:0]
    assert_eq!(&b[0x58..0x60], &[0, 0, 0, 0, 0, 0, 0x0c, 0x00]); // CMD (0xa) and PAGE_REQUEST (0xb)
    assert_eq!(&b[0x110..0x118], &[0, 0, 0, 0, 0, 0, 0x70, 0]);
    assert_eq!(CreateEq::decode(&b).unwrap(), ce);
    let mut o = vec![0u8; 0x10];
    o[0x0b] = 9;
    assert_eq!(CreateEqOut::decode(&o).unwrap().eqn, 9);
    assert_eq!(DestroyEq { eqn: 9 }.encode().unwrap()[0x0b], 9);
}

/// `struct mlx5_ifc_cqc_bits` (`C_EQN` is today's `c_eqn_or_apu_element[0x20]`),
/// `create_cq_in/out`, `destroy_cq_in`; `MLX5_CQC_CQE_SZ_64_BYTES = 0x0`,
/// `MLX5_CQC_CQE_SZ_128_BYTES = 0x1` (mlx5_ifc.h; `CQE_STRIDE_*` in include/linux/mlx5/cq.h).
#[test]
fn cqc_and_create_cq() {
    // mlx5_ifc_cqc_bits.
    f(cqc::field::STATUS, 0x00, 4);
    f(cqc::field::CQE_SZ, 0x08, 3);
    f(cqc::field::CC, 0x0b, 1);
    f(cqc::field::OI, 0x0e, 1);
    f(cqc::field::ST, 0x14, 4);
    f(cqc::field::PAGE_OFFSET, 0x54, 6);
    f(cqc::field::LOG_CQ_SIZE, 0x63, 5);
    f(cqc::field::UAR_PAGE, 0x68, 24);
    f(cqc::field::CQ_PERIOD, 0x84, 12);
    f(cqc::field::CQ_MAX_COUNT, 0x90, 16);
    f(cqc::field::C_EQN, 0xa0, 32);
    f(cqc::field::LOG_PAGE_SIZE, 0xc3, 5);
    f(cqc::field::LAST_NOTIFIED_INDEX, 0x108, 24);
    f(cqc::field::LAST_SOLICIT_INDEX, 0x128, 24);
    f(cqc::field::CONSUMER_COUNTER, 0x148, 24);
    f(cqc::field::PRODUCER_COUNTER, 0x168, 24);
    f64(cqc::field::DBR_ADDR, 0x1c0);
    assert_eq!(cqc::CQC_LEN, 0x40);
    assert_eq!((cqc::cqe_sz::BYTES_64, cqc::cqe_sz::BYTES_128), (0, 1));
    // create_cq_in: cq_context at 0x80 (byte 0x10), pas at 0x880 (byte 0x110);
    // create_cq_out.cqn 0x48/24.
    assert_eq!(cq::CQC_OFFSET, 0x10);
    assert_eq!(cq::PAS_OFFSET, 0x110);
    f(cq::field::CQN, 0x48, 24);

    let cc = CreateCq {
        ctx: Cqc {
            cqe_sz: cqc::cqe_sz::BYTES_128,
            log_cq_size: 0x11,
            uar_page: 0xabcdef,
            c_eqn: 7,
            log_page_size: 4,
            page_offset: 0,
            dbr_addr: 0x0000_0001_0000_0040,
            ..Default::default()
        },
        pas: vec![0x1000, 0x2000],
    };
    let b = cc.encode().unwrap();
    assert_eq!(b.len(), 0x120);
    assert_eq!(&b[0..2], &[0x04, 0x00]);
    assert_eq!(b[0x11], 0x20); // cqe_sz = 1 in cqc dword 0 bits [23:21]
    assert_eq!(b[0x1c], 0x11); // log_cq_size
    assert_eq!(&b[0x1d..0x20], &[0xab, 0xcd, 0xef]); // uar_page
    assert_eq!(&b[0x24..0x28], &[0, 0, 0, 7]); // c_eqn
    assert_eq!(b[0x28], 0x04); // log_page_size
    assert_eq!(&b[0x48..0x50], &[0, 0, 0, 1, 0, 0, 0, 0x40]); // dbr_addr
    assert_eq!(
        &b[0x110..0x120],
        &[0, 0, 0, 0, 0, 0, 0x10, 0, 0, 0, 0, 0, 0, 0, 0x20, 0]
    );
    assert_eq!(CreateCq::decode(&b).unwrap(), cc);
    let mut o = vec![0u8; 0x10];
    o[0x09..0x0c].copy_from_slice(&[0, 0x04, 0x01]);
    assert_eq!(CreateCqOut::decode(&o).unwrap().cqn, 0x401);
    assert_eq!(
        &DestroyCq { cqn: 0x401 }.encode().unwrap()[0x08..0x0c],
        &[0, 0, 0x04, 0x01]
    );
}

/// `struct mlx5_ifc_qpc_bits` with `struct mlx5_ifc_ads_bits primary_address_path` at bit
/// 0xc0 (`SRQN` is `srqn_rmpn_xrqn[0x18]`); `create_qp_in/out`.
#[test]
fn qpc_fields() {
    // mlx5_ifc_qpc_bits; address-path fields = ads offset + 0xc0 (primary_address_path).
    f(qpc::field::STATE, 0x00, 4);
    f(qpc::field::ST, 0x08, 8);
    f(qpc::field::PM_STATE, 0x13, 2);
    f(qpc::field::PD, 0x28, 24);
    f(qpc::field::MTU, 0x40, 3);
    f(qpc::field::LOG_MSG_MAX, 0x43, 5);
    f(qpc::field::LOG_RQ_SIZE, 0x49, 4);
    f(qpc::field::LOG_RQ_STRIDE, 0x4d, 3);
    f(qpc::field::NO_SQ, 0x50, 1);
    f(qpc::field::LOG_SQ_SIZE, 0x51, 4);
    f(qpc::field::TS_FORMAT, 0x58, 2);
    f(qpc::field::RLKY, 0x5b, 1);
    f(qpc::field::FRE, 0x394, 1);
    f(qpc::field::UAR_PAGE, 0x68, 24);
    f(qpc::field::USER_INDEX, 0x88, 24);
    f(qpc::field::LOG_PAGE_SIZE, 0xa3, 5);
    f(qpc::field::REMOTE_QPN, 0xa8, 24);
    f(qpc::field::PKEY_INDEX, 0xd0, 16); // ads.pkey_index 0x10
    f(qpc::field::SL, 0x1e4, 4); // ads.sl 0x124
    f(qpc::field::VHCA_PORT_NUM, 0x1e8, 8); // ads.vhca_port_num 0x128
    f(qpc::field::NEXT_SEND_PSN, 0x3c8, 24);
    f(qpc::field::CQN_SND, 0x3e8, 24);
    f(qpc::field::DETH_SQPN, 0x408, 24);
    f(qpc::field::PAGE_OFFSET, 0x494, 6);
    f(qpc::field::NEXT_RCV_PSN, 0x4a8, 24);
    f(qpc::field::CQN_RCV, 0x4e8, 24);
    f64(qpc::field::DBR_ADDR, 0x500);
    f(qpc::field::Q_KEY, 0x540, 32);
    f(qpc::field::RQ_TYPE, 0x565, 3);
    f(qpc::field::SRQN, 0x568, 24);
    f(qpc::field::HW_SQ_WQEBB_COUNTER, 0x5a0, 16);
    f(qpc::field::SW_SQ_WQEBB_COUNTER, 0x5b0, 16);
    f(qpc::field::HW_RQ_COUNTER, 0x5c0, 32);
    f(qpc::field::SW_RQ_COUNTER, 0x5e0, 32);
    assert_eq!(qpc::QPC_LEN, 0xe8);
    // create_qp_in: input_qpn 0x48/24, opt_param_mask 0x80/32, qpc at 0xc0 (byte 0x18), pas
    // at 0x880 (byte 0x110); create_qp_out.qpn 0x48/24.
    f(qp::field::QPN, 0x48, 24);
    f(qp::field::INPUT_QPN, 0x48, 24);
    f(qp::field::OPT_PARAM_MASK, 0x80, 32);
    assert_eq!(qp::QPC_OFFSET, 0x18);
    assert_eq!(qp::PAS_OFFSET, 0x110);
}

/// Images of `create_qp_in`, `rst2init_qp_in` (0x110 bytes), `qp_2err_in` and
/// `query_qp_out` from the fields of `qpc_fields`; `MLX5_QP_ST_QP1 = 0x8`, `MLX5_QP_PM_MIGRATED
/// = 0x3` (include/linux/mlx5/qp.h).
#[test]
fn create_qp_for_qp1_image() {
    let ctx = Qpc {
        st: QpServiceType::QP1,
        pm_state: qpc::pm_state::MIGRATED,
        pd: 0x000102,
        log_rq_size: 0x7,
        log_rq_stride: 0x4,
        log_sq_size: 0x8,
        uar_page: 0x000003,
        log_page_size: 0,
        pkey_index: 0x0005,
        port: 1,
        cqn_snd: 0x000401,
        cqn_rcv: 0x000402,
        dbr_addr: 0x0000_0000_0009_0000,
        q_key: 0x8001_0000,
        rlky: true,
        fre: true,
        ..Default::default()
    };
    let b = CreateQp {
        ctx,
        opt_param_mask: 0,
        input_qpn: 0,
        pas: vec![0xa000],
    }
    .encode()
    .unwrap();
    assert_eq!(b.len(), 0x118);
    assert_eq!(&b[0..2], &[0x05, 0x00]);
    assert_eq!(b[0x18], 0x00); // state RST in the high nibble
    assert_eq!(b[0x19], 0x08); // st QP1
    assert_eq!(b[0x1a], 0x18); // pm_state 3 in qpc dword 0 bits [12:11]
    assert_eq!(&b[0x1d..0x20], &[0x00, 0x01, 0x02]); // pd
    assert_eq!(b[0x21], 0x3c); // log_rq_size 7 in [22:19], log_rq_stride 4 in [18:16]
    assert_eq!(b[0x22], 0x40); // log_sq_size 8 in qpc dword 2 bits [14:11]
    assert_eq!(b[0x23], 0x10); // rlky: qpc dword 2 bit 4
    assert_eq!(b[0x18 + 0x72], 0x08); // fre: qpc dword 28 bit 11
    assert_eq!(&b[0x25..0x28], &[0x00, 0x00, 0x03]); // uar_page
    assert_eq!(&b[0x32..0x34], &[0x00, 0x05]); // primary_address_path.pkey_index
    assert_eq!(b[0x55], 0x01); // primary_address_path.vhca_port_num
    assert_eq!(&b[0x95..0x98], &[0x00, 0x04, 0x01]); // cqn_snd
    assert_eq!(&b[0xb5..0xb8], &[0x00, 0x04, 0x02]); // cqn_rcv
    assert_eq!(&b[0xb8..0xc0], &[0, 0, 0, 0, 0, 0x09, 0, 0]); // dbr_addr
    assert_eq!(&b[0xc0..0xc4], &[0x80, 0x01, 0x00, 0x00]); // q_key
    assert_eq!(&b[0x110..0x118], &[0, 0, 0, 0, 0, 0, 0xa0, 0]);
    let mut o = vec![0u8; 0x10];
    o[0x09..0x0c].copy_from_slice(&[0x00, 0x00, 0x48]);
    assert_eq!(CreateQpOut::decode(&o).unwrap().qpn, 0x48);

    // RST2INIT: qpn 0x09..0x0c, opt_param_mask 0x10..0x14, qpc at 0x18.
    let m = Rst2InitQp(ModifyQp {
        qpn: 0x48,
        opt_param_mask: 0,
        ctx,
    })
    .encode()
    .unwrap();
    assert_eq!(m.len(), 0x110);
    assert_eq!(&m[0..2], &[0x05, 0x02]);
    assert_eq!(&m[0x09..0x0c], &[0, 0, 0x48]);
    assert_eq!(m[0x55], 0x01);
    // 2ERR: qpn only.
    assert_eq!(
        Qp2Err { qpn: 0x48 }.encode().unwrap(),
        [0x05, 0x07, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x48, 0, 0, 0, 0]
    );
    // QUERY_QP out: qpc at 0x18, state in the high nibble of byte 0x18. The output length
    // 0x110 is rdma-core's `query_qp_out` (providers/mlx5/mlx5_ifc.h: qpc, reserved_at_800,
    // then `pas[0]`). The kernel's mlx5_ifc.h ends the struct with
    // `union mlx5_ifc_qp_pas_or_qpc_ext_and_pas_bits` (room for the 0xc0-byte QPC extension),
    // so `MLX5_ST_SZ_BYTES(query_qp_out)`, what drivers/infiniband/hw/mlx5/qp.c asks for, is
    // 0x1d0. Both put the qpc at 0x18; the shorter output omits only the extension and the
    // PAS list, which nothing here reads.
    assert_eq!(QueryQp { qpn: 0x48 }.out_len(), 0x110);
    let mut o = vec![0u8; 0x110];
    o[0x18] = 0x30;
    o[0x19] = 0x07;
    let q = QueryQpOut::decode(&o).unwrap();
    assert_eq!(q.ctx.state, QpState::Rts);
    assert_eq!(q.ctx.st, QpServiceType::QP0);
}

/// `struct mlx5_ifc_mad_ifc_in_bits` / `mad_ifc_out_bits` (`RESPONSE_MAD` is
/// `response_mad_packet`); op_mod bits `MLX5_MAD_IFC_IGNORE_MKEY = 1`,
/// `MLX5_MAD_IFC_IGNORE_BKEY = 2` in drivers/infiniband/hw/mlx5/mlx5_ib.h (`mlx5_MAD_IFC()` in
/// drivers/infiniband/hw/mlx5/mad.c ORs 0x1 / 0x2 into the op_mod that `mlx5_cmd_mad_ifc()`,
/// cmd.c there, writes).
#[test]
fn mad_ifc_layout() {
    // mad_ifc_in: remote_lid 0x40/16, port 0x58/8, mad[256] at 0x80; out response at 0x80.
    f(mad_ifc::field::REMOTE_LID, 0x40, 16);
    f(mad_ifc::field::PORT, 0x58, 8);
    fb(mad_ifc::field::MAD, 0x80, 256);
    fb(mad_ifc::field::RESPONSE_MAD, 0x80, 256);
    assert_eq!(mad_ifc::MAD_IFC_LEN, 0x110);
    let mut mad = [0u8; 256];
    mad[0] = 0x01;
    mad[255] = 0xee;
    let b = MadIfc {
        ignore_mkey: true,
        ignore_bkey: true,
        remote_lid: 0x0203,
        port: 1,
        mad,
    }
    .encode()
    .unwrap();
    assert_eq!(
        &b[0..0x10],
        &[
            0x05, 0x0d, 0, 0, 0, 0, 0, 0x03, 0x02, 0x03, 0, 0x01, 0, 0, 0, 0
        ]
    );
    assert_eq!((b[0x10], b[0x10f]), (0x01, 0xee));
    let mut o = vec![0u8; 0x110];
    o[0x10] = 0x81;
    assert_eq!(MadIfcOut::decode(&o).unwrap().mad[0], 0x81);
}

/// `query_hca_vport_context_in/out`, `struct mlx5_ifc_hca_vport_context_bits` (at bit 0x80
/// of the output), `query_vport_state_in/out`.
#[test]
fn vport_layouts() {
    use vport::field as v;
    // query_hca_vport_context_in / query_vport_state_in: other_vport and vport_number in both,
    // port_num only in query_hca_vport_context_in (QUERY_VPORT_STATE does not send it).
    f(v::OTHER_VPORT, 0x40, 1);
    f(v::PORT_NUM, 0x4c, 4);
    f(v::VPORT_NUMBER, 0x50, 16);
    // hca_vport_context (relative to the context, which sits at bit 0x80 of the output).
    f(v::FIELD_SELECT, 0x00, 32);
    f(v::SM_VIRT_AWARE, 0x100, 1);
    f(v::HAS_SMI, 0x101, 1);
    f(v::HAS_RAW, 0x102, 1);
    f(v::GRH_REQUIRED, 0x103, 1);
    f(v::PORT_PHYSICAL_STATE, 0x110, 4);
    f(v::VPORT_STATE_POLICY, 0x114, 4);
    f(v::PORT_STATE, 0x118, 4);
    f(v::VPORT_STATE, 0x11c, 4);
    f64(v::SYSTEM_IMAGE_GUID, 0x140);
    f64(v::PORT_GUID, 0x180);
    f64(v::NODE_GUID, 0x1c0);
    f(v::CAP_MASK1, 0x200, 32);
    f(v::CAP_MASK2, 0x240, 32);
    f(v::LID, 0x300, 16);
    f(v::INIT_TYPE_REPLY, 0x314, 4);
    f(v::LMC, 0x318, 3);
    f(v::SUBNET_TIMEOUT, 0x31b, 5);
    f(v::SM_LID, 0x320, 16);
    f(v::SM_SL, 0x330, 4);
    f(v::QKEY_VIOLATION_COUNTER, 0x340, 16);
    f(v::PKEY_VIOLATION_COUNTER, 0x350, 16);
    // query_vport_state_out: admin_state 0x78/4, state 0x7c/4.
    f(v::ADMIN_STATE, 0x78, 4);
    f(v::STATE, 0x7c, 4);
    assert_eq!(vport::HCA_VPORT_CONTEXT_OFFSET, 0x10);
    assert_eq!(vport::QUERY_HCA_VPORT_CONTEXT_OUT_LEN, 0x210);

    // query_hca_vport_context_out byte positions: context byte + 0x10.
    let mut o = vec![0u8; 0x210];
    o[0x30] = 0x40; // has_smi: context dword 8 bit 30
    o[0x33] = 0x41; // port_state 4 (ACTIVE) in [7:4], vport_state 1 in [3:0]
    o[0x32] = 0x50; // port_physical_state 5 (LinkUp) in [15:12]
    o[0x40..0x48].copy_from_slice(&[0, 0x02, 0xc9, 0x03, 0, 0, 0, 0x01]); // port_guid
    o[0x48..0x50].copy_from_slice(&[0, 0x02, 0xc9, 0x03, 0, 0, 0, 0x00]); // node_guid
    o[0x50..0x54].copy_from_slice(&[0x02, 0x51, 0x08, 0x6a]); // cap_mask1
    o[0x70..0x72].copy_from_slice(&[0x00, 0x07]); // lid
    o[0x73] = 0x32; // lmc 1 in [7:5], subnet_timeout 0x12 in [4:0]
    o[0x74..0x76].copy_from_slice(&[0x00, 0x01]); // sm_lid
    o[0x76] = 0x20; // sm_sl 2 in [15:12]
    o[0x78..0x7a].copy_from_slice(&[0x00, 0x03]); // qkey_violation_counter
    let c = HcaVportContext::decode(&o).unwrap();
    assert!(c.has_smi && !c.sm_virt_aware);
    assert_eq!(
        (c.port_state, c.vport_state, c.port_physical_state),
        (4, 1, 5)
    );
    assert_eq!(c.port_guid, 0x0002_c903_0000_0001);
    assert_eq!(c.node_guid, 0x0002_c903_0000_0000);
    assert_eq!(c.cap_mask1, 0x0251_086a);
    assert_eq!((c.lid, c.lmc, c.subnet_timeout), (7, 1, 0x12));
    assert_eq!((c.sm_lid, c.sm_sl), (1, 2));
    assert_eq!(c.qkey_violation_counter, 3);
    assert_eq!(c.encode().unwrap(), o);

    let b = QueryHcaVportContext {
        other_vport: false,
        port_num: 2,
        vport_number: 0,
    }
    .encode()
    .unwrap();
    assert_eq!(b, [0x07, 0x62, 0, 0, 0, 0, 0, 0, 0, 0x02, 0, 0, 0, 0, 0, 0]);
    let mut o = vec![0u8; 0x10];
    o[0x0f] = 0x21;
    let s = VportState::decode(&o).unwrap();
    assert_eq!((s.admin_state, s.state), (2, 1));
}

//! HCA capabilities (`cmd_hca_cap`, the GENERAL capability page returned by QUERY_HCA_CAP and
//! sent back by SET_HCA_CAP).
//!
//! The page is kept as raw bytes so that a query-modify-set cycle preserves every bit we do not
//! name; typed accessors cover the fields the bring-up and the special QPs need. Positions are
//! bit offsets inside `mlx5_ifc_cmd_hca_cap_bits` (mlx5_ifc.h).

use crate::error::{Error, Result};
use crate::mlx5::bits::{Field, need};

/// Size of the capability area of QUERY_HCA_CAP / SET_HCA_CAP (`hca_cap_union`, 0x8000 bits).
pub const CAP_LEN: usize = 0x1000;
/// Size of the general capability structure (`cmd_hca_cap`, 0x800 bits).
pub const GENERAL_CAP_LEN: usize = 0x100;

/// Capability page selector (`MLX5_CAP_*` / `MLX5_SET_HCA_CAP_OP_MOD_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CapType(pub u16);

impl CapType {
    /// General device capabilities.
    pub const GENERAL: Self = Self(0x0);
    /// Ethernet offloads.
    pub const ETHERNET_OFFLOADS: Self = Self(0x1);
    /// On-demand paging.
    pub const ODP: Self = Self(0x2);
    /// Atomics.
    pub const ATOMIC: Self = Self(0x3);
    /// RoCE.
    pub const ROCE: Self = Self(0x4);
    /// General capabilities, second page.
    pub const GENERAL_2: Self = Self(0x20);
}

/// Port type values of `port_type`.
pub mod port_type {
    /// InfiniBand.
    pub const IB: u32 = 0;
    /// Ethernet.
    pub const ETH: u32 = 1;
}

/// P_Key table entries for a `pkey_table_size` code (`mlx5_to_sw_pkey_sz`: 128 << code, code
/// at most 5), or `None` for a larger code.
pub fn pkey_table_entries(code: u32) -> Option<u32> {
    (code <= 5).then(|| 128 << code)
}

/// The `pkey_table_size` code for a table of `entries` (`to_fw_pkey_sz`): 128 -> 0 … 4096 -> 5.
pub fn pkey_table_code(entries: u32) -> Option<u32> {
    (0..=5).find(|&c| 128u32 << c == entries)
}

/// Field positions in `cmd_hca_cap` (bit offset, width) from mlx5_ifc.h.
pub mod field {
    use super::Field;

    /// `vhca_id`: Function's vHCA id.
    pub const VHCA_ID: Field = Field::new("vhca_id", 0x30, 16);
    /// `log_max_srq_sz`: log2 of the largest SRQ (WQEs).
    pub const LOG_MAX_SRQ_SZ: Field = Field::new("log_max_srq_sz", 0x80, 8);
    /// `log_max_qp_sz`: log2 of the largest work queue (WQEs).
    pub const LOG_MAX_QP_SZ: Field = Field::new("log_max_qp_sz", 0x88, 8);
    /// `log_max_qp`: log2 of the number of QPs.
    pub const LOG_MAX_QP: Field = Field::new("log_max_qp", 0x9b, 5);
    /// `log_max_srq`: log2 of the number of SRQs.
    pub const LOG_MAX_SRQ: Field = Field::new("log_max_srq", 0xab, 5);
    /// `log_max_cq_sz`: log2 of the largest CQ (CQEs).
    pub const LOG_MAX_CQ_SZ: Field = Field::new("log_max_cq_sz", 0xc8, 8);
    /// `log_max_cq`: log2 of the number of CQs.
    pub const LOG_MAX_CQ: Field = Field::new("log_max_cq", 0xdb, 5);
    /// `log_max_eq_sz`: log2 of the largest EQ (EQEs).
    pub const LOG_MAX_EQ_SZ: Field = Field::new("log_max_eq_sz", 0xe0, 8);
    /// `log_max_mkey`: log2 of the number of memory keys.
    pub const LOG_MAX_MKEY: Field = Field::new("log_max_mkey", 0xea, 6);
    /// `log_max_eq`: log2 of the number of EQs.
    pub const LOG_MAX_EQ: Field = Field::new("log_max_eq", 0xfc, 4);
    /// `log_max_ra_req_qp`: log2 of outstanding RDMA read/atomic requests per QP.
    pub const LOG_MAX_RA_REQ_QP: Field = Field::new("log_max_ra_req_qp", 0x14a, 6);
    /// `gid_table_size`: GID table entries per port.
    pub const GID_TABLE_SIZE: Field = Field::new("gid_table_size", 0x170, 16);
    /// `pkey_table_size`: P_Key table size as a code: entries = 128 << code, code 0..=5 (see
    /// [`super::pkey_table_entries`]).
    pub const PKEY_TABLE_SIZE: Field = Field::new("pkey_table_size", 0x190, 16);
    /// `port_type`: Port type: 0 IB, 1 Ethernet (`MLX5_CAP_PORT_TYPE_*`).
    pub const PORT_TYPE: Field = Field::new("port_type", 0x1b6, 2);
    /// `num_ports`: Number of physical ports.
    pub const NUM_PORTS: Field = Field::new("num_ports", 0x1b8, 8);
    /// `log_max_msg`: log2 of the largest message.
    pub const LOG_MAX_MSG: Field = Field::new("log_max_msg", 0x1c3, 5);
    /// `stat_rate_support`: Supported static rates bitmask.
    pub const STAT_RATE_SUPPORT: Field = Field::new("stat_rate_support", 0x1e0, 16);
    /// `cqe_version`: CQE version (0 or 1).
    pub const CQE_VERSION: Field = Field::new("cqe_version", 0x1fc, 4);
    /// `cmdif_checksum`: Command-interface checksum mode (0 off; 3 when supported in the max caps).
    pub const CMDIF_CHECKSUM: Field = Field::new("cmdif_checksum", 0x210, 2);
    /// `log_pg_sz`: log2 of the smallest page size the device handles.
    pub const LOG_PG_SZ: Field = Field::new("log_pg_sz", 0x258, 8);
    /// `log_bf_reg_size`: log2 of the BlueFlame register size (both halves).
    pub const LOG_BF_REG_SIZE: Field = Field::new("log_bf_reg_size", 0x26b, 5);
    /// `max_wqe_sz_sq`: Largest send WQE in bytes.
    pub const MAX_WQE_SZ_SQ: Field = Field::new("max_wqe_sz_sq", 0x290, 16);
    /// `max_wqe_sz_rq`: Largest receive WQE in bytes.
    pub const MAX_WQE_SZ_RQ: Field = Field::new("max_wqe_sz_rq", 0x2b0, 16);
    /// `log_max_pd`: log2 of the number of PDs.
    pub const LOG_MAX_PD: Field = Field::new("log_max_pd", 0x32b, 5);
    /// `sq_ts_format`: the timestamp formats send queues (and so QPs, without RoCE) support
    /// ([`super::ts_format_cap`]).
    pub const SQ_TS_FORMAT: Field = Field::new("sq_ts_format", 0x440, 2);
    /// `log_uar_page_sz`: log2 of the UAR page size in 4 KiB units (PAGE_SHIFT - 12).
    pub const LOG_UAR_PAGE_SZ: Field = Field::new("log_uar_page_sz", 0x490, 16);
    /// `num_of_uars_per_page`: 4 KiB UARs per system page when `uar_4k` is set.
    pub const NUM_OF_UARS_PER_PAGE: Field = Field::new("num_of_uars_per_page", 0x520, 32);
    /// `hca_cap_2`: The GENERAL_2 capability page exists.
    pub const HCA_CAP_2: Field = Field::new("hca_cap_2", 0x20, 1);
    /// `event_cap`: Affiliated/unaffiliated event reporting.
    pub const EVENT_CAP: Field = Field::new("event_cap", 0x90, 1);
    /// `terminate_scatter_list_mkey`: receive scatter lists end with the key
    /// QUERY_SPECIAL_CONTEXTS reports, not with `wqe::INVALID_LKEY` (0x100)
    /// (`mlx5r_cmd_query_special_mkeys` in drivers/infiniband/hw/mlx5/cmd.c).
    pub const TERMINATE_SCATTER_LIST_MKEY: Field =
        Field::new("terminate_scatter_list_mkey", 0xf6, 1);
    /// `fast_teardown`: TEARDOWN_HCA PREPARE_FAST_TEARDOWN is supported.
    pub const FAST_TEARDOWN: Field = Field::new("fast_teardown", 0xfb, 1);
    /// `force_teardown`: TEARDOWN_HCA FORCE_CLOSE is supported.
    pub const FORCE_TEARDOWN: Field = Field::new("force_teardown", 0x110, 1);
    /// `null_mkey`: QUERY_SPECIAL_CONTEXTS reports a null mkey.
    pub const NULL_MKEY: Field = Field::new("null_mkey", 0x119, 1);
    /// `end_pad`: End-of-packet padding is supported.
    pub const END_PAD: Field = Field::new("end_pad", 0x160, 1);
    /// `cache_line_128byte`: 128-byte cache line (set to the host's).
    pub const CACHE_LINE_128BYTE: Field = Field::new("cache_line_128byte", 0x164, 1);
    /// `out_of_seq_cnt`: Out-of-sequence counter.
    pub const OUT_OF_SEQ_CNT: Field = Field::new("out_of_seq_cnt", 0x180, 1);
    /// `vport_counters`: Vport counters are available.
    pub const VPORT_COUNTERS: Field = Field::new("vport_counters", 0x181, 1);
    /// `vport_group_manager`: The function manages other vports.
    pub const VPORT_GROUP_MANAGER: Field = Field::new("vport_group_manager", 0x1a0, 1);
    /// `ib_virt`: IB virtualization: query the HCA vport context for has_smi.
    pub const IB_VIRT: Field = Field::new("ib_virt", 0x1a2, 1);
    /// `port_module_event`: Port module events.
    pub const PORT_MODULE_EVENT: Field = Field::new("port_module_event", 0x1b0, 1);
    /// `pci_sync_for_fw_update_event`: Sync-reset events.
    pub const PCI_SYNC_FOR_FW_UPDATE_EVENT: Field =
        Field::new("pci_sync_for_fw_update_event", 0x1f1, 1);
    /// `dct`: DC targets.
    pub const DCT: Field = Field::new("dct", 0x21a, 1);
    /// `roce`: RoCE.
    pub const ROCE: Field = Field::new("roce", 0x21d, 1);
    /// `atomic`: Atomic operations.
    pub const ATOMIC: Field = Field::new("atomic", 0x21e, 1);
    /// `cq_oi`: CQ overrun ignore.
    pub const CQ_OI: Field = Field::new("cq_oi", 0x220, 1);
    /// `cq_resize`: CQ resize.
    pub const CQ_RESIZE: Field = Field::new("cq_resize", 0x221, 1);
    /// `cq_moderation`: CQ moderation.
    pub const CQ_MODERATION: Field = Field::new("cq_moderation", 0x222, 1);
    /// `set_deth_sqpn`: A UD QP may send with DETH source QPN 1 (GSI TX QPs).
    pub const SET_DETH_SQPN: Field = Field::new("set_deth_sqpn", 0x238, 1);
    /// `xrc`: XRC transport.
    pub const XRC: Field = Field::new("xrc", 0x23c, 1);
    /// `ud`: UD transport.
    pub const UD: Field = Field::new("ud", 0x23d, 1);
    /// `uc`: UC transport.
    pub const UC: Field = Field::new("uc", 0x23e, 1);
    /// `rc`: RC transport.
    pub const RC: Field = Field::new("rc", 0x23f, 1);
    /// `uar_4k`: UARs are 4 KiB regardless of the system page size.
    pub const UAR_4K: Field = Field::new("uar_4k", 0x240, 1);
    /// `bf`: BlueFlame is supported.
    pub const BF: Field = Field::new("bf", 0x260, 1);
    /// `driver_version`: SET_DRIVER_VERSION is supported.
    pub const DRIVER_VERSION: Field = Field::new("driver_version", 0x261, 1);
    /// `cqe_128_always`: 128-byte CQEs are always used.
    pub const CQE_128_ALWAYS: Field = Field::new("cqe_128_always", 0x5bd, 1);
    /// `cqe_compression`: CQE compression.
    pub const CQE_COMPRESSION: Field = Field::new("cqe_compression", 0x5bf, 1);
    /// `sw_owner_id`: INIT_HCA takes a sw_owner_id.
    pub const SW_OWNER_ID: Field = Field::new("sw_owner_id", 0x61e, 1);

    /// Every named field, for the layout tests.
    pub const ALL: &[Field] = &[
        VHCA_ID,
        LOG_MAX_SRQ_SZ,
        LOG_MAX_QP_SZ,
        LOG_MAX_QP,
        LOG_MAX_SRQ,
        LOG_MAX_CQ_SZ,
        LOG_MAX_CQ,
        LOG_MAX_EQ_SZ,
        LOG_MAX_MKEY,
        LOG_MAX_EQ,
        LOG_MAX_RA_REQ_QP,
        GID_TABLE_SIZE,
        PKEY_TABLE_SIZE,
        PORT_TYPE,
        NUM_PORTS,
        LOG_MAX_MSG,
        STAT_RATE_SUPPORT,
        CQE_VERSION,
        CMDIF_CHECKSUM,
        LOG_PG_SZ,
        LOG_BF_REG_SIZE,
        MAX_WQE_SZ_SQ,
        MAX_WQE_SZ_RQ,
        LOG_MAX_PD,
        SQ_TS_FORMAT,
        LOG_UAR_PAGE_SZ,
        NUM_OF_UARS_PER_PAGE,
        HCA_CAP_2,
        EVENT_CAP,
        TERMINATE_SCATTER_LIST_MKEY,
        FAST_TEARDOWN,
        FORCE_TEARDOWN,
        NULL_MKEY,
        END_PAD,
        CACHE_LINE_128BYTE,
        OUT_OF_SEQ_CNT,
        VPORT_COUNTERS,
        VPORT_GROUP_MANAGER,
        IB_VIRT,
        PORT_MODULE_EVENT,
        PCI_SYNC_FOR_FW_UPDATE_EVENT,
        DCT,
        ROCE,
        ATOMIC,
        CQ_OI,
        CQ_RESIZE,
        CQ_MODERATION,
        SET_DETH_SQPN,
        XRC,
        UD,
        UC,
        RC,
        UAR_4K,
        BF,
        DRIVER_VERSION,
        CQE_128_ALWAYS,
        CQE_COMPRESSION,
        SW_OWNER_ID,
    ];
}

/// Values of the timestamp-format capabilities `sq_ts_format`, `rq_ts_format` and RoCE's
/// `qp_ts_format` (`MLX5_TIMESTAMP_FORMAT_CAP_*`): which CQE timestamp formats a queue may be
/// created with. The QPC's own `ts_format` values are in [`crate::mlx5::qpc::ts_format`].
pub mod ts_format_cap {
    /// Free-running only (also what firmware that predates the field reports).
    pub const FREE_RUNNING: u32 = 0x0;
    /// Real time only: a queue asking for free-running timestamps is refused.
    pub const REAL_TIME: u32 = 0x1;
    /// Both.
    pub const FREE_RUNNING_AND_REAL_TIME: u32 = 0x2;
}

/// A capability page, as raw bytes with typed accessors for the general capabilities.
#[derive(Clone, PartialEq, Eq)]
pub struct HcaCaps {
    raw: Vec<u8>,
}

impl core::fmt::Debug for HcaCaps {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("HcaCaps")
            .field("log_max_qp", &self.log_max_qp())
            .field("log_max_cq", &self.log_max_cq())
            .field("log_max_eq", &self.log_max_eq())
            .field("num_ports", &self.num_ports())
            .field("port_type", &self.port_type())
            .finish_non_exhaustive()
    }
}

impl Default for HcaCaps {
    fn default() -> Self {
        HcaCaps::zeroed()
    }
}

impl HcaCaps {
    /// An all-zero page.
    pub fn zeroed() -> Self {
        HcaCaps {
            raw: vec![0; CAP_LEN],
        }
    }

    /// Takes a capability area; it must be at least [`GENERAL_CAP_LEN`] bytes (a shorter
    /// area cannot hold the general caps) and is zero-extended or cut to [`CAP_LEN`].
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        need("cmd_hca_cap", bytes, GENERAL_CAP_LEN)?;
        let mut raw = vec![0u8; CAP_LEN];
        let n = bytes.len().min(CAP_LEN);
        raw[..n].copy_from_slice(&bytes[..n]);
        Ok(HcaCaps { raw })
    }

    /// The raw page ([`CAP_LEN`] bytes).
    pub fn as_bytes(&self) -> &[u8] {
        &self.raw
    }

    /// Reads any field of the page (for fields this type does not name).
    pub fn get(&self, f: Field) -> Result<u32> {
        f.get(&self.raw)
    }

    /// Writes any field of the page.
    pub fn set(&mut self, f: Field, value: u32) -> Result<()> {
        f.set(&mut self.raw, value)
    }

    // Every named field lies inside GENERAL_CAP_LEN (checked by a test), and `raw` is always
    // CAP_LEN bytes, so reads of named fields cannot fail.
    fn rd(&self, f: Field) -> u32 {
        f.get(&self.raw).unwrap_or(0)
    }

    /// `vhca_id`: Function's vHCA id.
    pub fn vhca_id(&self) -> u32 {
        self.rd(field::VHCA_ID)
    }

    /// Sets `vhca_id`; rejects a value wider than 16 bits.
    pub fn set_vhca_id(&mut self, value: u32) -> Result<()> {
        self.set(field::VHCA_ID, value)
    }

    /// `log_max_srq_sz`: log2 of the largest SRQ (WQEs).
    pub fn log_max_srq_sz(&self) -> u32 {
        self.rd(field::LOG_MAX_SRQ_SZ)
    }

    /// Sets `log_max_srq_sz`; rejects a value wider than 8 bits.
    pub fn set_log_max_srq_sz(&mut self, value: u32) -> Result<()> {
        self.set(field::LOG_MAX_SRQ_SZ, value)
    }

    /// `log_max_qp_sz`: log2 of the largest work queue (WQEs).
    pub fn log_max_qp_sz(&self) -> u32 {
        self.rd(field::LOG_MAX_QP_SZ)
    }

    /// Sets `log_max_qp_sz`; rejects a value wider than 8 bits.
    pub fn set_log_max_qp_sz(&mut self, value: u32) -> Result<()> {
        self.set(field::LOG_MAX_QP_SZ, value)
    }

    /// `log_max_qp`: log2 of the number of QPs.
    pub fn log_max_qp(&self) -> u32 {
        self.rd(field::LOG_MAX_QP)
    }

    /// Sets `log_max_qp`; rejects a value wider than 5 bits.
    pub fn set_log_max_qp(&mut self, value: u32) -> Result<()> {
        self.set(field::LOG_MAX_QP, value)
    }

    /// `log_max_srq`: log2 of the number of SRQs.
    pub fn log_max_srq(&self) -> u32 {
        self.rd(field::LOG_MAX_SRQ)
    }

    /// Sets `log_max_srq`; rejects a value wider than 5 bits.
    pub fn set_log_max_srq(&mut self, value: u32) -> Result<()> {
        self.set(field::LOG_MAX_SRQ, value)
    }

    /// `log_max_cq_sz`: log2 of the largest CQ (CQEs).
    pub fn log_max_cq_sz(&self) -> u32 {
        self.rd(field::LOG_MAX_CQ_SZ)
    }

    /// Sets `log_max_cq_sz`; rejects a value wider than 8 bits.
    pub fn set_log_max_cq_sz(&mut self, value: u32) -> Result<()> {
        self.set(field::LOG_MAX_CQ_SZ, value)
    }

    /// `log_max_cq`: log2 of the number of CQs.
    pub fn log_max_cq(&self) -> u32 {
        self.rd(field::LOG_MAX_CQ)
    }

    /// Sets `log_max_cq`; rejects a value wider than 5 bits.
    pub fn set_log_max_cq(&mut self, value: u32) -> Result<()> {
        self.set(field::LOG_MAX_CQ, value)
    }

    /// `log_max_eq_sz`: log2 of the largest EQ (EQEs).
    pub fn log_max_eq_sz(&self) -> u32 {
        self.rd(field::LOG_MAX_EQ_SZ)
    }

    /// Sets `log_max_eq_sz`; rejects a value wider than 8 bits.
    pub fn set_log_max_eq_sz(&mut self, value: u32) -> Result<()> {
        self.set(field::LOG_MAX_EQ_SZ, value)
    }

    /// `log_max_mkey`: log2 of the number of memory keys.
    pub fn log_max_mkey(&self) -> u32 {
        self.rd(field::LOG_MAX_MKEY)
    }

    /// Sets `log_max_mkey`; rejects a value wider than 6 bits.
    pub fn set_log_max_mkey(&mut self, value: u32) -> Result<()> {
        self.set(field::LOG_MAX_MKEY, value)
    }

    /// `log_max_eq`: log2 of the number of EQs.
    pub fn log_max_eq(&self) -> u32 {
        self.rd(field::LOG_MAX_EQ)
    }

    /// Sets `log_max_eq`; rejects a value wider than 4 bits.
    pub fn set_log_max_eq(&mut self, value: u32) -> Result<()> {
        self.set(field::LOG_MAX_EQ, value)
    }

    /// `log_max_ra_req_qp`: log2 of outstanding RDMA read/atomic requests per QP.
    pub fn log_max_ra_req_qp(&self) -> u32 {
        self.rd(field::LOG_MAX_RA_REQ_QP)
    }

    /// Sets `log_max_ra_req_qp`; rejects a value wider than 6 bits.
    pub fn set_log_max_ra_req_qp(&mut self, value: u32) -> Result<()> {
        self.set(field::LOG_MAX_RA_REQ_QP, value)
    }

    /// `gid_table_size`: GID table entries per port.
    pub fn gid_table_size(&self) -> u32 {
        self.rd(field::GID_TABLE_SIZE)
    }

    /// Sets `gid_table_size`; rejects a value wider than 16 bits.
    pub fn set_gid_table_size(&mut self, value: u32) -> Result<()> {
        self.set(field::GID_TABLE_SIZE, value)
    }

    /// `pkey_table_size`: P_Key table size as a code: entries = 128 << code, code 0..=5 (see
    /// [`pkey_table_entries`]).
    pub fn pkey_table_size(&self) -> u32 {
        self.rd(field::PKEY_TABLE_SIZE)
    }

    /// Sets `pkey_table_size`; rejects a value wider than 16 bits.
    pub fn set_pkey_table_size(&mut self, value: u32) -> Result<()> {
        self.set(field::PKEY_TABLE_SIZE, value)
    }

    /// `port_type`: Port type: 0 IB, 1 Ethernet (`MLX5_CAP_PORT_TYPE_*`).
    pub fn port_type(&self) -> u32 {
        self.rd(field::PORT_TYPE)
    }

    /// Sets `port_type`; rejects a value wider than 2 bits.
    pub fn set_port_type(&mut self, value: u32) -> Result<()> {
        self.set(field::PORT_TYPE, value)
    }

    /// `num_ports`: Number of physical ports.
    pub fn num_ports(&self) -> u32 {
        self.rd(field::NUM_PORTS)
    }

    /// Sets `num_ports`; rejects a value wider than 8 bits.
    pub fn set_num_ports(&mut self, value: u32) -> Result<()> {
        self.set(field::NUM_PORTS, value)
    }

    /// `log_max_msg`: log2 of the largest message.
    pub fn log_max_msg(&self) -> u32 {
        self.rd(field::LOG_MAX_MSG)
    }

    /// Sets `log_max_msg`; rejects a value wider than 5 bits.
    pub fn set_log_max_msg(&mut self, value: u32) -> Result<()> {
        self.set(field::LOG_MAX_MSG, value)
    }

    /// `stat_rate_support`: Supported static rates bitmask.
    pub fn stat_rate_support(&self) -> u32 {
        self.rd(field::STAT_RATE_SUPPORT)
    }

    /// Sets `stat_rate_support`; rejects a value wider than 16 bits.
    pub fn set_stat_rate_support(&mut self, value: u32) -> Result<()> {
        self.set(field::STAT_RATE_SUPPORT, value)
    }

    /// `cqe_version`: CQE version (0 or 1).
    pub fn cqe_version(&self) -> u32 {
        self.rd(field::CQE_VERSION)
    }

    /// Sets `cqe_version`; rejects a value wider than 4 bits.
    pub fn set_cqe_version(&mut self, value: u32) -> Result<()> {
        self.set(field::CQE_VERSION, value)
    }

    /// `sq_ts_format`: the timestamp formats send queues support ([`ts_format_cap`]).
    pub fn sq_ts_format(&self) -> u32 {
        self.rd(field::SQ_TS_FORMAT)
    }

    /// Sets `sq_ts_format`; rejects a value wider than 2 bits.
    pub fn set_sq_ts_format(&mut self, value: u32) -> Result<()> {
        self.set(field::SQ_TS_FORMAT, value)
    }

    /// `cmdif_checksum`: Command-interface checksum mode (0 off; 3 when supported in the max caps).
    pub fn cmdif_checksum(&self) -> u32 {
        self.rd(field::CMDIF_CHECKSUM)
    }

    /// Sets `cmdif_checksum`; rejects a value wider than 2 bits.
    pub fn set_cmdif_checksum(&mut self, value: u32) -> Result<()> {
        self.set(field::CMDIF_CHECKSUM, value)
    }

    /// `log_pg_sz`: log2 of the smallest page size the device handles.
    pub fn log_pg_sz(&self) -> u32 {
        self.rd(field::LOG_PG_SZ)
    }

    /// Sets `log_pg_sz`; rejects a value wider than 8 bits.
    pub fn set_log_pg_sz(&mut self, value: u32) -> Result<()> {
        self.set(field::LOG_PG_SZ, value)
    }

    /// `log_bf_reg_size`: log2 of the BlueFlame register size (both halves).
    pub fn log_bf_reg_size(&self) -> u32 {
        self.rd(field::LOG_BF_REG_SIZE)
    }

    /// Sets `log_bf_reg_size`; rejects a value wider than 5 bits.
    pub fn set_log_bf_reg_size(&mut self, value: u32) -> Result<()> {
        self.set(field::LOG_BF_REG_SIZE, value)
    }

    /// `max_wqe_sz_sq`: Largest send WQE in bytes.
    pub fn max_wqe_sz_sq(&self) -> u32 {
        self.rd(field::MAX_WQE_SZ_SQ)
    }

    /// Sets `max_wqe_sz_sq`; rejects a value wider than 16 bits.
    pub fn set_max_wqe_sz_sq(&mut self, value: u32) -> Result<()> {
        self.set(field::MAX_WQE_SZ_SQ, value)
    }

    /// `max_wqe_sz_rq`: Largest receive WQE in bytes.
    pub fn max_wqe_sz_rq(&self) -> u32 {
        self.rd(field::MAX_WQE_SZ_RQ)
    }

    /// Sets `max_wqe_sz_rq`; rejects a value wider than 16 bits.
    pub fn set_max_wqe_sz_rq(&mut self, value: u32) -> Result<()> {
        self.set(field::MAX_WQE_SZ_RQ, value)
    }

    /// `log_max_pd`: log2 of the number of PDs.
    pub fn log_max_pd(&self) -> u32 {
        self.rd(field::LOG_MAX_PD)
    }

    /// Sets `log_max_pd`; rejects a value wider than 5 bits.
    pub fn set_log_max_pd(&mut self, value: u32) -> Result<()> {
        self.set(field::LOG_MAX_PD, value)
    }

    /// `log_uar_page_sz`: log2 of the UAR page size in 4 KiB units (PAGE_SHIFT - 12).
    pub fn log_uar_page_sz(&self) -> u32 {
        self.rd(field::LOG_UAR_PAGE_SZ)
    }

    /// Sets `log_uar_page_sz`; rejects a value wider than 16 bits.
    pub fn set_log_uar_page_sz(&mut self, value: u32) -> Result<()> {
        self.set(field::LOG_UAR_PAGE_SZ, value)
    }

    /// `num_of_uars_per_page`: 4 KiB UARs per system page when `uar_4k` is set.
    pub fn num_of_uars_per_page(&self) -> u32 {
        self.rd(field::NUM_OF_UARS_PER_PAGE)
    }

    /// Sets `num_of_uars_per_page`; rejects a value wider than 32 bits.
    pub fn set_num_of_uars_per_page(&mut self, value: u32) -> Result<()> {
        self.set(field::NUM_OF_UARS_PER_PAGE, value)
    }

    /// `hca_cap_2`: The GENERAL_2 capability page exists.
    pub fn hca_cap_2(&self) -> bool {
        self.rd(field::HCA_CAP_2) != 0
    }

    /// Sets `hca_cap_2`.
    pub fn set_hca_cap_2(&mut self, value: bool) -> Result<()> {
        self.set(field::HCA_CAP_2, u32::from(value))
    }

    /// `event_cap`: Affiliated/unaffiliated event reporting.
    pub fn event_cap(&self) -> bool {
        self.rd(field::EVENT_CAP) != 0
    }

    /// Sets `event_cap`.
    pub fn set_event_cap(&mut self, value: bool) -> Result<()> {
        self.set(field::EVENT_CAP, u32::from(value))
    }

    /// `fast_teardown`: TEARDOWN_HCA PREPARE_FAST_TEARDOWN is supported.
    pub fn fast_teardown(&self) -> bool {
        self.rd(field::FAST_TEARDOWN) != 0
    }

    /// Sets `fast_teardown`.
    pub fn set_fast_teardown(&mut self, value: bool) -> Result<()> {
        self.set(field::FAST_TEARDOWN, u32::from(value))
    }

    /// `force_teardown`: TEARDOWN_HCA FORCE_CLOSE is supported.
    pub fn force_teardown(&self) -> bool {
        self.rd(field::FORCE_TEARDOWN) != 0
    }

    /// Sets `force_teardown`.
    pub fn set_force_teardown(&mut self, value: bool) -> Result<()> {
        self.set(field::FORCE_TEARDOWN, u32::from(value))
    }

    /// `null_mkey`: QUERY_SPECIAL_CONTEXTS reports a null mkey.
    pub fn null_mkey(&self) -> bool {
        self.rd(field::NULL_MKEY) != 0
    }

    /// Sets `null_mkey`.
    pub fn set_null_mkey(&mut self, value: bool) -> Result<()> {
        self.set(field::NULL_MKEY, u32::from(value))
    }

    /// `end_pad`: End-of-packet padding is supported.
    pub fn end_pad(&self) -> bool {
        self.rd(field::END_PAD) != 0
    }

    /// Sets `end_pad`.
    pub fn set_end_pad(&mut self, value: bool) -> Result<()> {
        self.set(field::END_PAD, u32::from(value))
    }

    /// `cache_line_128byte`: 128-byte cache line (set to the host's).
    pub fn cache_line_128byte(&self) -> bool {
        self.rd(field::CACHE_LINE_128BYTE) != 0
    }

    /// Sets `cache_line_128byte`.
    pub fn set_cache_line_128byte(&mut self, value: bool) -> Result<()> {
        self.set(field::CACHE_LINE_128BYTE, u32::from(value))
    }

    /// `out_of_seq_cnt`: Out-of-sequence counter.
    pub fn out_of_seq_cnt(&self) -> bool {
        self.rd(field::OUT_OF_SEQ_CNT) != 0
    }

    /// Sets `out_of_seq_cnt`.
    pub fn set_out_of_seq_cnt(&mut self, value: bool) -> Result<()> {
        self.set(field::OUT_OF_SEQ_CNT, u32::from(value))
    }

    /// `vport_counters`: Vport counters are available.
    pub fn vport_counters(&self) -> bool {
        self.rd(field::VPORT_COUNTERS) != 0
    }

    /// Sets `vport_counters`.
    pub fn set_vport_counters(&mut self, value: bool) -> Result<()> {
        self.set(field::VPORT_COUNTERS, u32::from(value))
    }

    /// `vport_group_manager`: The function manages other vports.
    pub fn vport_group_manager(&self) -> bool {
        self.rd(field::VPORT_GROUP_MANAGER) != 0
    }

    /// Sets `vport_group_manager`.
    pub fn set_vport_group_manager(&mut self, value: bool) -> Result<()> {
        self.set(field::VPORT_GROUP_MANAGER, u32::from(value))
    }

    /// `ib_virt`: IB virtualization: query the HCA vport context for has_smi.
    pub fn ib_virt(&self) -> bool {
        self.rd(field::IB_VIRT) != 0
    }

    /// Sets `ib_virt`.
    pub fn set_ib_virt(&mut self, value: bool) -> Result<()> {
        self.set(field::IB_VIRT, u32::from(value))
    }

    /// `port_module_event`: Port module events.
    pub fn port_module_event(&self) -> bool {
        self.rd(field::PORT_MODULE_EVENT) != 0
    }

    /// Sets `port_module_event`.
    pub fn set_port_module_event(&mut self, value: bool) -> Result<()> {
        self.set(field::PORT_MODULE_EVENT, u32::from(value))
    }

    /// `pci_sync_for_fw_update_event`: Sync-reset events.
    pub fn pci_sync_for_fw_update_event(&self) -> bool {
        self.rd(field::PCI_SYNC_FOR_FW_UPDATE_EVENT) != 0
    }

    /// Sets `pci_sync_for_fw_update_event`.
    pub fn set_pci_sync_for_fw_update_event(&mut self, value: bool) -> Result<()> {
        self.set(field::PCI_SYNC_FOR_FW_UPDATE_EVENT, u32::from(value))
    }

    /// `dct`: DC targets.
    pub fn dct(&self) -> bool {
        self.rd(field::DCT) != 0
    }

    /// Sets `dct`.
    pub fn set_dct(&mut self, value: bool) -> Result<()> {
        self.set(field::DCT, u32::from(value))
    }

    /// `roce`: RoCE.
    pub fn roce(&self) -> bool {
        self.rd(field::ROCE) != 0
    }

    /// Sets `roce`.
    pub fn set_roce(&mut self, value: bool) -> Result<()> {
        self.set(field::ROCE, u32::from(value))
    }

    /// `atomic`: Atomic operations.
    pub fn atomic(&self) -> bool {
        self.rd(field::ATOMIC) != 0
    }

    /// Sets `atomic`.
    pub fn set_atomic(&mut self, value: bool) -> Result<()> {
        self.set(field::ATOMIC, u32::from(value))
    }

    /// `cq_oi`: CQ overrun ignore.
    pub fn cq_oi(&self) -> bool {
        self.rd(field::CQ_OI) != 0
    }

    /// Sets `cq_oi`.
    pub fn set_cq_oi(&mut self, value: bool) -> Result<()> {
        self.set(field::CQ_OI, u32::from(value))
    }

    /// `cq_resize`: CQ resize.
    pub fn cq_resize(&self) -> bool {
        self.rd(field::CQ_RESIZE) != 0
    }

    /// Sets `cq_resize`.
    pub fn set_cq_resize(&mut self, value: bool) -> Result<()> {
        self.set(field::CQ_RESIZE, u32::from(value))
    }

    /// `cq_moderation`: CQ moderation.
    pub fn cq_moderation(&self) -> bool {
        self.rd(field::CQ_MODERATION) != 0
    }

    /// Sets `cq_moderation`.
    pub fn set_cq_moderation(&mut self, value: bool) -> Result<()> {
        self.set(field::CQ_MODERATION, u32::from(value))
    }

    /// `set_deth_sqpn`: A UD QP may send with DETH source QPN 1 (GSI TX QPs).
    pub fn set_deth_sqpn(&self) -> bool {
        self.rd(field::SET_DETH_SQPN) != 0
    }

    /// Sets `set_deth_sqpn`.
    pub fn set_set_deth_sqpn(&mut self, value: bool) -> Result<()> {
        self.set(field::SET_DETH_SQPN, u32::from(value))
    }

    /// `xrc`: XRC transport.
    pub fn xrc(&self) -> bool {
        self.rd(field::XRC) != 0
    }

    /// Sets `xrc`.
    pub fn set_xrc(&mut self, value: bool) -> Result<()> {
        self.set(field::XRC, u32::from(value))
    }

    /// `ud`: UD transport.
    pub fn ud(&self) -> bool {
        self.rd(field::UD) != 0
    }

    /// Sets `ud`.
    pub fn set_ud(&mut self, value: bool) -> Result<()> {
        self.set(field::UD, u32::from(value))
    }

    /// `uc`: UC transport.
    pub fn uc(&self) -> bool {
        self.rd(field::UC) != 0
    }

    /// Sets `uc`.
    pub fn set_uc(&mut self, value: bool) -> Result<()> {
        self.set(field::UC, u32::from(value))
    }

    /// `rc`: RC transport.
    pub fn rc(&self) -> bool {
        self.rd(field::RC) != 0
    }

    /// Sets `rc`.
    pub fn set_rc(&mut self, value: bool) -> Result<()> {
        self.set(field::RC, u32::from(value))
    }

    /// `uar_4k`: UARs are 4 KiB regardless of the system page size.
    pub fn uar_4k(&self) -> bool {
        self.rd(field::UAR_4K) != 0
    }

    /// Sets `uar_4k`.
    pub fn set_uar_4k(&mut self, value: bool) -> Result<()> {
        self.set(field::UAR_4K, u32::from(value))
    }

    /// `bf`: BlueFlame is supported.
    pub fn bf(&self) -> bool {
        self.rd(field::BF) != 0
    }

    /// Sets `bf`.
    pub fn set_bf(&mut self, value: bool) -> Result<()> {
        self.set(field::BF, u32::from(value))
    }

    /// `driver_version`: SET_DRIVER_VERSION is supported.
    pub fn driver_version(&self) -> bool {
        self.rd(field::DRIVER_VERSION) != 0
    }

    /// Sets `driver_version`.
    pub fn set_driver_version(&mut self, value: bool) -> Result<()> {
        self.set(field::DRIVER_VERSION, u32::from(value))
    }

    /// `cqe_128_always`: 128-byte CQEs are always used.
    pub fn cqe_128_always(&self) -> bool {
        self.rd(field::CQE_128_ALWAYS) != 0
    }

    /// Sets `cqe_128_always`.
    pub fn set_cqe_128_always(&mut self, value: bool) -> Result<()> {
        self.set(field::CQE_128_ALWAYS, u32::from(value))
    }

    /// `cqe_compression`: CQE compression.
    pub fn cqe_compression(&self) -> bool {
        self.rd(field::CQE_COMPRESSION) != 0
    }

    /// Sets `cqe_compression`.
    pub fn set_cqe_compression(&mut self, value: bool) -> Result<()> {
        self.set(field::CQE_COMPRESSION, u32::from(value))
    }

    /// `sw_owner_id`: INIT_HCA takes a sw_owner_id.
    pub fn sw_owner_id(&self) -> bool {
        self.rd(field::SW_OWNER_ID) != 0
    }

    /// Sets `sw_owner_id`.
    pub fn set_sw_owner_id(&mut self, value: bool) -> Result<()> {
        self.set(field::SW_OWNER_ID, u32::from(value))
    }
}

/// Checks that a page has the size SET_HCA_CAP carries.
pub(crate) fn check_len(bytes: &[u8]) -> Result<()> {
    if bytes.len() == CAP_LEN {
        Ok(())
    } else {
        Err(Error::Invalid {
            what: "capability page",
            reason: "must be exactly 0x1000 bytes",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn named_fields_lie_inside_the_general_caps() {
        for f in field::ALL {
            assert!(f.end_byte() <= GENERAL_CAP_LEN, "{}", f.name);
        }
    }

    #[test]
    fn from_bytes_rejects_short_and_pads() {
        assert!(HcaCaps::from_bytes(&[0u8; 0xff]).is_err());
        let c = HcaCaps::from_bytes(&[0xffu8; 0x100]).unwrap();
        assert_eq!(c.as_bytes().len(), CAP_LEN);
        assert_eq!(c.log_max_qp(), 31);
        assert_eq!(c.as_bytes()[0x100], 0);
    }

    #[test]
    fn sq_ts_format_is_the_top_two_bits_of_byte_0x88() {
        // mlx5_ifc.h cmd_hca_cap: sq_ts_format[0x2] at bit 0x440 (after general_obj_types),
        // then rq_ts_format[0x2].
        let mut c = HcaCaps::zeroed();
        c.set_sq_ts_format(ts_format_cap::REAL_TIME).unwrap();
        assert_eq!(c.as_bytes()[0x88], 0x40);
        c.set_sq_ts_format(ts_format_cap::FREE_RUNNING_AND_REAL_TIME)
            .unwrap();
        assert_eq!(c.as_bytes()[0x88], 0x80);
        assert!(c.set_sq_ts_format(4).is_err());
    }

    #[test]
    fn setters_reject_wide_values() {
        let mut c = HcaCaps::zeroed();
        assert!(c.set_log_max_qp(32).is_err());
        assert!(c.set_port_type(4).is_err());
        c.set_log_max_qp(18).unwrap();
        assert_eq!(c.log_max_qp(), 18);
    }
}

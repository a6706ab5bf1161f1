//! What a simulated ConnectX is: PCI identity, firmware version, ports, MSI-X vectors, the
//! page demands of its firmware, and the values the model chooses where the real device's are
//! not documented (reserved keys, vendor syndromes, UAR placement).

use std::time::Duration;

pub use firmware_cmds::mlx5::init_seg::FwRev;

/// Mellanox's PCI vendor ID.
pub const MELLANOX_VENDOR: u16 = 0x15b3;
/// PCI device ID of a ConnectX-5 PF (reference §1.3), the default.
pub const CONNECTX5_DEVICE: u16 = 0x1017;
/// PCI class code: network controller, InfiniBand (what `lspci` reports for a ConnectX in IB
/// mode).
pub const CLASS_INFINIBAND: u32 = 0x02_0700;
/// BAR0 size: 64 MiB (emulated, so it costs nothing).
pub const BAR0_SIZE: u64 = 64 << 20;
/// First UAR index the firmware hands out. BAR0 pages 0..8 hold the initialization segment,
/// the health counter and the clocks (`init_seg::INIT_SEG_LEN` is 0x2010), so no UAR page may
/// overlap them.
pub const FIRST_UAR: u32 = 8;
/// log2 of the command queue size the firmware reports (32 slots, as on ConnectX-4 and later).
pub const LOG_CMDQ_SIZE: u8 = 5;
/// log2 of the command queue stride (64-byte entries).
pub const LOG_CMDQ_STRIDE: u8 = 6;
/// log2 of the BlueFlame register size reported in the caps (512 bytes: two 256-byte halves).
pub const LOG_BF_REG_SIZE: u32 = 9;
/// Largest `inlen` / `outlen` the firmware accepts. The kernel's largest command message is
/// about 4 MiB (`LONG_LIST_SIZE` in cmd.c); anything longer gets an input/output length
/// delivery error.
pub const MAX_CMD_MSG_LEN: u32 = 4 << 20;

/// The reserved memory keys QUERY_SPECIAL_CONTEXTS reports. Real values are firmware-specific;
/// the model's are chosen distinct from each other and from 0. A driver ends receive lists
/// with `terminate_scatter_list_mkey` only when the capability of that name is set
/// (`mlx5r_cmd_query_special_mkeys` in drivers/infiniband/hw/mlx5/cmd.c); the model does not
/// set it, so lists end with the fallback `wqe::INVALID_LKEY` (0x100), and the model reports
/// that same value here.
pub mod special_keys {
    /// `dump_fill_mkey`.
    pub const DUMP_FILL_MKEY: u32 = 0x0000_0200;
    /// `resd_lkey`: the lkey of IOVA-addressed buffers (needs `rlky` in the QP context).
    pub const RESD_LKEY: u32 = 0x0000_0300;
    /// `null_mkey`.
    pub const NULL_MKEY: u32 = 0x0000_0400;
    /// `terminate_scatter_list_mkey`.
    pub const TERMINATE_SCATTER_LIST_MKEY: u32 = 0x0000_0100;
    /// `repeated_mkey`.
    pub const REPEATED_MKEY: u32 = 0x0000_0500;
}

/// Vendor syndromes (`vendor_err_synd`) the model writes into error CQEs it raises itself.
/// ConnectX devices report 0xf9 on flushed work requests (seen in user reports of
/// `vendor_err 0xf9` with WR_FLUSH_ERR); the others are model choices.
pub mod vendor_syndrome {
    /// A work request flushed because its queue is in error.
    pub const FLUSH: u8 = 0xf9;
    /// A WQE the device could not parse (LOCAL_QP_OP_ERR).
    pub const BAD_WQE: u8 = 0x68;
    /// A bad lkey or a DMA the IOMMU refused (LOCAL_PROT_ERR).
    pub const PROTECTION: u8 = 0x6b;
    /// A message longer than the path allows or than the receive buffer (LOCAL_LENGTH_ERR).
    pub const LENGTH: u8 = 0x69;
}

/// A simulated ConnectX's identity and firmware behaviour.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mlx5Config {
    /// PCI device ID (default ConnectX-5, 0x1017).
    pub device_id: u16,
    /// Firmware version the init segment reports (default 16.35.2000, a ConnectX-5 release).
    pub fw: FwRev,
    /// Physical ports (1 or 2).
    pub ports: u8,
    /// MSI-X vectors the function offers.
    pub msix_vectors: u32,
    /// Pages the firmware asks for before INIT_HCA (QUERY_PAGES boot).
    pub boot_pages: u32,
    /// Pages INIT_HCA needs (QUERY_PAGES init).
    pub init_pages: u32,
    /// Time after creation or reset during which the `initializing` bit reads 1.
    pub init_delay: Duration,
    /// Device time per health-counter increment.
    pub health_tick: Duration,
    /// Node GUID the model reports when no fabric answers for its port.
    pub node_guid: u64,
    /// The `sq_ts_format` capability (`caps::ts_format_cap`): which CQE timestamp formats
    /// CREATE_QP accepts. Default free-running only, as a ConnectX-5 (no real-time clock);
    /// real-time only models a device that refuses free-running QPs.
    pub sq_ts_format: u32,
    /// Bit 23 of `initializing`: the function is a BlueField's embedded CPU (ECPF). Its own
    /// function is then addressed with `embedded_cpu_function` set; function 0 without it
    /// is the host PF, which the model does not have.
    pub embedded_cpu: bool,
    /// QUERY_ISSI's `supported_issi_dw0` (bit n: ISSI n). Default 0b11; 0 models firmware
    /// that reports no ISSI (which means ISSI 0 only).
    pub supported_issi: u32,
}

impl Default for Mlx5Config {
    fn default() -> Self {
        Mlx5Config {
            device_id: CONNECTX5_DEVICE,
            fw: FwRev {
                major: 16,
                minor: 35,
                subminor: 2000,
            },
            ports: 1,
            msix_vectors: 32,
            boot_pages: 6,
            init_pages: 64,
            init_delay: Duration::from_millis(10),
            health_tick: Duration::from_millis(100),
            node_guid: 0x0002_c903_0000_0001,
            sq_ts_format: firmware_cmds::mlx5::caps::ts_format_cap::FREE_RUNNING,
            embedded_cpu: false,
            supported_issi: 0b11,
        }
    }
}

/// Parses a firmware version written `MAJOR.MINOR.SUBMINOR` (as `ibstat` shows it).
pub fn parse_fw(text: &str) -> Result<FwRev, String> {
    let bad = || format!("{text}: expected MAJOR.MINOR.SUBMINOR, e.g. 16.35.2000");
    let mut parts = text.split('.').map(str::parse::<u16>);
    let (Some(Ok(major)), Some(Ok(minor)), Some(Ok(subminor)), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(bad());
    };
    Ok(FwRev {
        major,
        minor,
        subminor,
    })
}

impl Mlx5Config {
    /// Checks what the model cannot simulate.
    pub fn validate(&self) -> Result<(), String> {
        if !(1..=2).contains(&self.ports) {
            return Err(format!("ports={}: a ConnectX has 1 or 2 ports", self.ports));
        }
        if self.msix_vectors == 0 || self.msix_vectors > 2048 {
            return Err(format!(
                "msix vectors {}: must be 1..=2048",
                self.msix_vectors
            ));
        }
        if self.sq_ts_format > firmware_cmds::mlx5::caps::ts_format_cap::FREE_RUNNING_AND_REAL_TIME
        {
            return Err(format!(
                "sq_ts_format {}: 0 (free-running), 1 (real-time) or 2 (both)",
                self.sq_ts_format
            ));
        }
        if self.supported_issi & !0b11 != 0 {
            return Err(format!(
                "supported ISSI {:#x}: the model implements ISSI 0 and 1 only",
                self.supported_issi
            ));
        }
        if self.health_tick.is_zero() {
            return Err("health tick must be longer than zero".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn firmware_versions_parse_as_ibstat_writes_them() {
        let v = parse_fw("16.35.2000").unwrap();
        assert_eq!((v.major, v.minor, v.subminor), (16, 35, 2000));
        for bad in ["16.35", "16.35.2000.1", "a.b.c", "16.35.70000", ""] {
            assert!(parse_fw(bad).is_err(), "{bad}");
        }
    }
}

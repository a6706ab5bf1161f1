//! The mlx5 HCA object ([`Hca`]): facts for tools, its ports, accounting, and the orderly
//! close. Family-specific extras (raw firmware commands, counters) are here for tests and
//! diagnostics; the MAD layer uses only the [`Hca`] trait.

use std::sync::{Arc, Mutex, PoisonError};

use firmware_cmds::mlx5::ops::Command;

use crate::backend::DeviceBackend;
use crate::error::DriverError;
use crate::pci;
use crate::verbs::{Hca, HcaAccounting, HcaInfo, HcaOptions, HcaPort};

use super::bringup;
use super::dev::{Dev, Mlx5Stats};
use super::port::Mlx5Port;
use super::smp;

/// An mlx5 function brought up by this driver.
pub struct Mlx5Hca {
    dev: Arc<Dev>,
    ports: Vec<Arc<Mlx5Port>>,
    /// `close` ran (it is idempotent).
    close: Mutex<bool>,
    node_guid: u64,
}

impl Mlx5Hca {
    /// Bring up the mlx5 function behind `backend` (see `bringup.rs` for the sequence).
    pub fn open(
        backend: Arc<dyn DeviceBackend>,
        options: HcaOptions,
    ) -> Result<Arc<Mlx5Hca>, DriverError> {
        bringup::check_no_reset_needed(backend.as_ref())?;
        let dev = Arc::new(Dev::new(backend, options)?);
        let ports = bringup::bring_up(&dev)?;
        let node_guid = ports.first().map_or(0, |p| p.node_guid());
        dev.info
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .node_guid = node_guid;
        Ok(Arc::new(Mlx5Hca {
            dev,
            ports,
            close: Mutex::new(false),
            node_guid,
        }))
    }

    /// Port `n` with its mlx5 extras.
    pub fn mlx5_port(&self, n: u8) -> Option<Arc<Mlx5Port>> {
        self.ports.iter().find(|p| p.port_num == n).cloned()
    }

    /// Run one firmware command (diagnostics and tests: a command the driver does not issue
    /// itself, or one with a deliberately bad parameter), on an ordinary slot, or on the page
    /// slot for MANAGE_PAGES, as every MANAGE_PAGES (whose pages the driver's accounting
    /// then does not know).
    pub fn command<C: Command>(&self, cmd: &C) -> Result<C::Output, DriverError> {
        if self.dev.is_closed() {
            return Err(DriverError::Closed);
        }
        self.dev.exec(cmd)
    }

    /// Counters: command queue, pages, EQEs, rejected CQEs, health polls.
    pub fn stats(&self) -> Mlx5Stats {
        self.dev.stats()
    }

    /// Drive the device once (EQs, command completions, page requests, health when due)
    /// without polling any CQ.
    pub fn progress(&self) {
        self.dev.progress();
    }

    /// Why the device is unusable, if it is (fatal error or closed).
    pub fn fatal_reason(&self) -> Option<String> {
        self.dev.fatal_reason()
    }

    /// Firmware version `major.minor.subminor`.
    pub fn fw_version(&self) -> String {
        self.dev
            .info
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .fw
            .map_or_else(|| "?".into(), |f| f.to_string())
    }

    /// Command queue slots that timed out and are kept out of use.
    pub fn lost_command_slots(&self) -> usize {
        self.dev.lock_cmd().lost_slots()
    }
}

/// The TID of the NodeInfo query [`Mlx5Port::node_guid`] sends.
const NODE_GUID_TID: u64 = 0x6d6c_7835_0000_0011;

impl Mlx5Port {
    /// The node GUID, from NodeInfo through MAD_IFC, or the vport context (0 when neither
    /// answers).
    pub fn node_guid(&self) -> u64 {
        let q = firmware_cmds::mlx5::ops::mad_ifc::MadIfc {
            ignore_mkey: true,
            ignore_bkey: true,
            remote_lid: 0,
            port: self.port_num,
            mad: smp::subn_get(smp::ATTR_NODE_INFO, 0, NODE_GUID_TID),
        };
        if let Ok(out) = self.dev.exec(&q) {
            if let Ok(d) = smp::response_data(&out.mad, smp::ATTR_NODE_INFO, 0, NODE_GUID_TID) {
                return smp::node_info(d).node_guid;
            }
        }
        self.dev
            .exec(&firmware_cmds::mlx5::ops::vport::QueryHcaVportContext::default())
            .map_or(0, |v| v.node_guid)
    }
}

impl Hca for Mlx5Hca {
    fn info(&self) -> HcaInfo {
        let backend = &self.dev.backend;
        let info = self.dev.info.read().unwrap_or_else(PoisonError::into_inner);
        let c = &info.caps;
        let model = pci::lookup(backend.pci_id()).map_or_else(
            || {
                format!(
                    "{:04x}:{:04x}",
                    backend.pci_id().vendor,
                    backend.pci_id().device
                )
            },
            |k| format!("{} ({})", k.model, k.kind),
        );
        let pkeys = firmware_cmds::mlx5::caps::pkey_table_entries(c.pkey_table_size())
            .map_or_else(|| "?".into(), |n| n.to_string());
        let (send, recv) = self.ports.first().map_or((0, 0), |p| p.depths);
        let caps = vec![
            ("ISSI", info.issi.to_string()),
            ("ports", c.num_ports().to_string()),
            (
                "port type",
                if c.port_type() == 0 {
                    "InfiniBand".to_string()
                } else {
                    format!("{} (not InfiniBand)", c.port_type())
                },
            ),
            ("max QPs", format!("2^{}", c.log_max_qp())),
            ("max QP size", format!("2^{} WQEs", c.log_max_qp_sz())),
            ("max CQs", format!("2^{}", c.log_max_cq())),
            ("max CQ size", format!("2^{} CQEs", c.log_max_cq_sz())),
            ("max EQs", format!("2^{}", c.log_max_eq())),
            ("max PDs", format!("2^{}", c.log_max_pd())),
            ("max message", format!("2^{} bytes", c.log_max_msg())),
            ("P_Key table", pkeys),
            ("GID table", c.gid_table_size().to_string()),
            ("CQE version", c.cqe_version().to_string()),
            ("virtualised (ib_virt)", c.ib_virt().to_string()),
            (
                "BlueFlame",
                format!("{} (register 2^{} bytes)", c.bf(), c.log_bf_reg_size()),
            ),
            ("UAR", format!("{} at BAR0 {:#x}", info.uar, info.uar_base)),
            ("PD", format!("{:#x}", info.pd)),
            ("reserved lkey", format!("{:#x}", info.lkey)),
            (
                "special QP depths",
                format!("{send} sends, {recv} receives"),
            ),
        ];
        HcaInfo {
            device: backend.describe(),
            family: "mlx5",
            model,
            fw_version: info.fw.map_or_else(|| "?".into(), |f| f.to_string()),
            node_guid: self.node_guid,
            ports: self.ports.len() as u8,
            caps,
        }
    }

    fn accounting(&self) -> HcaAccounting {
        HcaAccounting {
            driver_pool: self.dev.pool.accounting(),
            mad_pool: self.dev.mad_pool.accounting(),
            firmware_pages: self.dev.lock_pages().held(),
            outstanding_wrs: self.ports.iter().map(|p| p.outstanding()).sum(),
        }
    }

    fn port(&self, n: u8) -> Option<Arc<dyn HcaPort>> {
        self.mlx5_port(n).map(|p| p as Arc<dyn HcaPort>)
    }

    fn close(&self) -> Result<(), DriverError> {
        let mut done = self.close.lock().unwrap_or_else(PoisonError::into_inner);
        if *done {
            return Ok(());
        }
        *done = true;
        bringup::teardown(&self.dev, &self.ports)
    }
}

impl Drop for Mlx5Hca {
    fn drop(&mut self) {
        if let Err(e) = self.close() {
            tracing::warn!("closing the HCA on drop: {e}");
        }
    }
}

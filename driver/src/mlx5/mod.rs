//! The mlx5 family: Connect-IB, ConnectX-4 and later, BlueField. Brings the function up with
//! firmware commands over the command queue, serves the firmware's page requests, polls its
//! health, creates QP0 and QP1 on every port and runs them for the MAD layer, and tears it all
//! down again returning every page, lease and mapping.
//!
//! Nothing here knows whether the function is real (vfio-pci) or simulated: it uses only
//! [`crate::DeviceBackend`], and every wait goes through the backend's clock.
//!
//! Files, one job each:
//! - `dev.rs`: the state a function shares, the fatal state, the progress loop;
//! - `cmd.rs`: the command queue engine; `pages.rs`: firmware pages;
//! - `eq.rs`, `cq.rs`, `qp.rs`: event queues, completion queues, the special QPs;
//! - `uar.rs`: UAR pages and BlueFlame doorbells; `health.rs`: health polling;
//! - `bringup.rs`: the bring-up sequence and the teardown;
//! - `port.rs`, `hca.rs`: the [`crate::verbs`] objects; `smp.rs`: the SMA queries they need;
//! - `wait.rs`: deadlines and back-off on the device's clock.

mod bringup;
mod cmd;
mod cq;
mod dev;
mod eq;
mod hca;
mod health;
mod pages;
mod port;
mod qp;
mod smp;
#[cfg(test)]
pub(crate) mod testutil;
mod uar;
mod wait;

pub use cmd::{CmdStats, UNTRUSTED_COMPLETION_BUDGET};
pub use dev::Mlx5Stats;
pub use hca::Mlx5Hca;
pub use health::{MAX_MISSES, REMOVAL_CHECK};
pub use pages::{
    DEFAULT_MAX_FIRMWARE_PAGES, MAX_PAGES_PER_REQUEST, MAX_PENDING_PAGE_REQUESTS, PageStats,
};
pub use port::{CqPosition, Mlx5Port};
pub use qp::QP1_QKEY;

//! The libibumad C ABI (`libibumad.so.3`) implemented over the `mad` crate, so that OpenSM,
//! libibmad and the infiniband-diags tools run unmodified on a vfio-bound HCA or on the
//! embedded simulator.
//!
//! Load it instead of rdma-core's with `LD_LIBRARY_PATH` pointing at a directory holding
//! `libibumad.so.3` (a link to the built `libibumad.so`; `hca run` makes one) or with
//! `LD_PRELOAD`. The device comes from `HCA_DEVICE` (default `sim`, the embedded simulator;
//! `sim:topology=FILE,node=NAME,...` or `vfio:DDDD:BB:DD.F`).
//!
//! The parts:
//! - [`abi`]: the C layouts of `<infiniband/umad.h>` and the kernel ABI's constants;
//! - [`context`]: the process-wide state (devices, MAD-layer ports, open files), made on
//!   first use from `HCA_DEVICE`; [`drive`]: who runs each port's progress loop (the
//!   threads waiting in `umad_recv`, else a fallback thread);
//! - [`info`]: the CA and port attributes libibumad reads from sysfs, asked of the SMA;
//! - [`file`](mod@file): one `umad_open_port` fd: agents, sends, the read queue ([`queue`]) and the
//!   kernel's header rules ([`header`]);
//! - [`issm`]: the issm files and the IsSM capability bit;
//! - [`exports`]: the C functions, exported with rdma-core's symbol versions (`symbols`,
//!   `libibumad.map`); [`strings`]: the names of `umad_str.c`.
//!
//! What differs from the kernel's umad is said where it is done: the fd is for `poll` only
//! ([`queue`]), issm is a watched file ([`issm`]), and every request with a timeout ends in
//! its response or an ETIMEDOUT return ([`file`](mod@file)).

pub mod abi;
pub mod context;
pub mod drive;
pub mod error;
pub mod exports;
pub mod file;
pub mod header;
pub mod info;
pub mod issm;
pub mod queue;
pub mod strings;
pub mod symbols;

pub use context::{Ca, CaPort, Context, DEFAULT_DEVICE, DEVICE_ENV};
pub use error::UmadError;
pub use file::{Registration, UmadFile};

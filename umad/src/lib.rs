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
//!
//! **Signals.** A signal whose handler runs while `umad_recv` or `umad_poll` waits ends the
//! wait as it ends libibumad's `poll(2)`: -EIO with errno EINTR (`SA_RESTART` or not), and a
//! signal ignored ends nothing. The library's own threads block the asynchronous signals, so
//! that process-directed ones reach the program's threads ([`signals`]).
//!
//! **fork().** The devices stay with the process that opened them: their DMA memory is not
//! mapped in a child and the library's threads do not run there. A child of `fork()` (after
//! the parent used the library; one that forked before gets a fresh context on first use)
//! sees every device as removed, and nothing it calls touches a device or a lock of the
//! parent's threads ([`fork`]):
//! - `umad_get_port`, `umad_get_ca`, `umad_get_ca_portguids`, `umad_open_port` and
//!   `umad_get_issm_path` answer as for a removed device: -ENODEV where the port is to be
//!   resolved (no CA name, or port 0: nothing resolves), else -EIO (-1 for
//!   `umad_get_ca_portguids`);
//! - on a umad fd inherited from the parent: `umad_send` and `umad_recv` -EIO with errno EIO,
//!   `umad_poll` 0 (libibumad's answer when `poll` reports POLLERR), `umad_register*` refused
//!   with EPIPE, `umad_unregister` -1 with EINVAL, `umad_close_port` a plain `close` (0);
//! - what needs no device works: `umad_init`, `umad_done`, `umad_get_cas_names`,
//!   `umad_get_ca_device_list` (the parent's CA names), the header helpers, `umad_size`,
//!   `umad_debug`, the dumps and the `umad_*_str` names;
//! - at exit the child does nothing: the parent keeps its IsSM bits, its issm files and its
//!   simulated fabric's state;
//! - the library's ends of the inherited fds' socket pairs are closed in the child, so that
//!   a device death in the parent still shows as POLLERR on the parent's fds while the child
//!   lives. The fds the program was handed stay open in the child, as kernel umad fds would.

pub mod abi;
pub mod context;
pub mod drive;
pub mod error;
pub mod exports;
pub mod file;
pub mod fork;
pub mod header;
pub mod info;
pub mod issm;
pub mod queue;
pub mod signals;
pub mod strings;
pub mod symbols;

pub use context::{Ca, CaPort, Context, DEFAULT_DEVICE, DEVICE_ENV};
pub use error::UmadError;
pub use file::{Registration, UmadFile};

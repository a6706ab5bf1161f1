//! Cross-crate integration tests and their shared helpers: scenario tests on the simulated HCA,
//! deterministic fault-injection runs, interop with real OpenSM and infiniband-diags, and the
//! VFIO test in a QEMU guest.
//!
//! For the QEMU guest test (`src/bin/vfio_guest`, run by `tests/qemu_vfio.rs` through
//! `qemu/vfio-guest.sh`): [`edu`] drives QEMU's `edu` device on the project's own device
//! access and DMA layer, and [`kmsg`] reads the guest kernel's IOMMU fault lines.
//!
//! For the mlx5 scenarios (`tests/mlx5_*.rs`): [`mlx5`] builds a simulated ConnectX the test
//! keeps a handle on, brings the driver up on it, and checks that nothing is left behind.
//!
//! For the MAD-layer scenarios (`tests/mad_*.rs`): [`mad_rig`] opens the MAD layer on that
//! ConnectX, with a responder on the same port and a tracker of completions; [`mad_fabric`]
//! puts two of them on one simulated fabric (directed routes, SMPs between our own ports,
//! RMPP) with a small SM that configures it through the MAD layer. For the fault-injection
//! run (`tests/mad_faults.rs`): [`wire_peer`] is a device of the test's own at the far end of
//! a link (it answers, and records what arrived and what it had the wire lose), and
//! [`post_log`] a port between the MAD layer and the driver that records the order sends go
//! out in.
//!
//! For the interop tests (`tests/interop_*.rs`): [`interop`] runs Debian's OpenSM and
//! infiniband-diags on this project's libibumad over a simulated fabric, and the same
//! programs under ibsim and umad2sim, for comparison; [`live`] runs OpenSM as a daemon on a
//! fabric `hca sim serve` holds (and under ibsim), with the diagnostics beside it.
//!
//! For the discovery tests (`tests/discover_*.rs`): [`discover_rig`] puts that ConnectX on a
//! fabric the test controls, runs `hca-tools`' discovery engine through it, and compares what
//! it found with the topology file parsed on its own; [`impostor`] makes a CA of that fabric
//! answer with a NodeInfo the test rewrites (a node that lies).

pub mod discover_rig;
pub mod edu;
pub mod impostor;
pub mod interop;
pub mod kmsg;
pub mod live;
pub mod mad_fabric;
pub mod mad_rig;
pub mod mlx5;
pub mod orphans;
pub mod post_log;
pub mod wire_peer;

//! Cross-crate integration tests and their shared helpers: scenario tests on the simulated HCA,
//! deterministic fault-injection runs, interop with real OpenSM and infiniband-diags, and the
//! VFIO test in a QEMU guest.

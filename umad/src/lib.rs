//! The libibumad C ABI (`libibumad.so.3`) implemented over the `mad` crate, so that OpenSM,
//! libibmad and the infiniband-diags tools run unmodified on a vfio-bound HCA or on the
//! embedded simulator.

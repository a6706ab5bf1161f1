//! Gives the cdylib the soname and the symbol versions of rdma-core's libibumad.
//!
//! rustc hands the linker its own anonymous version script (`{ local: *; }` here, because the
//! C entry points are not `#[no_mangle]` items: `src/symbols.rs` defines them as assembler
//! aliases). lld, rustc's default linker on x86_64 Linux, merges that script with
//! `libibumad.map`, where each exported name is listed exactly and so wins over `local: *`.
//! GNU ld refuses to combine an anonymous version script with named ones; the symbol test
//! (`tests/symbols.rs`) checks the result against Debian's library.

fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    println!("cargo:rustc-cdylib-link-arg=-Wl,--version-script={dir}/libibumad.map");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libibumad.so.3");
    println!("cargo:rerun-if-changed=libibumad.map");
    println!("cargo:rerun-if-changed=build.rs");
}

//! The C names of the exported functions, as assembler entry points that jump to the Rust functions
//! in `exports` (see `build.rs` for why they are not `#[no_mangle]` items). The versions come from
//! `libibumad.map`; `tests/symbols.rs` compares the result with Debian's library.

macro_rules! c_names {
    ($($module:ident :: $name:ident),* $(,)?) => {
        $(
            // A two-instruction entry point under the C name that jumps to the Rust
            // function: an alias (`.set`) cannot name a function another codegen unit
            // defines. The jump pushes nothing, so stacks and unwinding see only the caller
            // and the Rust function.
            core::arch::global_asm!(
                concat!(".pushsection .text.", stringify!($name), ",\"ax\",@progbits"),
                concat!(".globl ", stringify!($name)),
                concat!(".type ", stringify!($name), ", @function"),
                ".p2align 4",
                concat!(stringify!($name), ":"),
                ".cfi_startproc",
                "jmp {0}",
                ".cfi_endproc",
                concat!(".size ", stringify!($name), ", . - ", stringify!($name)),
                ".popsection",
                sym crate::exports::$module::$name,
            );
        )*
        /// Every exported C name.
        pub const NAMES: &[&str] = &[$(stringify!($name)),*];
    };
}

c_names!(
    debug::umad_addr_dump,
    debug::umad_attribute_str,
    debug::umad_class_str,
    port::umad_close_port,
    debug::umad_common_mad_status_str,
    debug::umad_debug,
    ca::umad_done,
    debug::umad_dump,
    ca::umad_get_ca,
    ca::umad_get_ca_portguids,
    ca::umad_get_cas_names,
    io::umad_get_fd,
    port::umad_get_issm_path,
    addr::umad_get_mad,
    addr::umad_get_mad_addr,
    addr::umad_get_pkey,
    ca::umad_get_port,
    ca::umad_init,
    debug::umad_method_str,
    port::umad_open_port,
    io::umad_poll,
    io::umad_recv,
    port::umad_register,
    port::umad_register2,
    port::umad_register_oui,
    ca::umad_release_ca,
    ca::umad_release_port,
    debug::umad_sa_mad_status_str,
    io::umad_send,
    addr::umad_set_addr,
    addr::umad_set_addr_net,
    addr::umad_set_grh,
    addr::umad_set_pkey,
    addr::umad_size,
    addr::umad_status,
    port::umad_unregister,
    ca::umad_free_ca_device_list,
    ca::umad_get_ca_device_list,
    ca::umad_sort_ca_device_list,
);

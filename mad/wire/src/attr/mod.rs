//! Attribute layouts: a typed view and a `Repr` per attribute, read from and written into the
//! data area of an SMP ([`crate::smp::Smp::data`]) or a PMA MAD ([`crate::perf::PerfMad::data`]).
//!
//! Bit fields are named high bits first within their byte, as in the IBA tables; bit offsets
//! were checked against libibmad's `fields.c`.

pub mod class_port_info;
pub mod guid_info;
pub mod linear_forwarding_table;
pub mod multicast_forwarding_table;
pub mod node_description;
pub mod node_info;
pub mod notice;
pub mod notice_details;
pub mod pkey_table;
pub mod port_counters;
pub mod port_counters_ext;
pub mod port_info;
pub mod sl_to_vl_table;
pub mod sm_info;
pub mod switch_info;
pub mod vl_arb_table;

//! The C layouts of `abi` are those gcc gives the structs of Debian's
//! `<infiniband/umad.h>`: a C program compiled against the installed header prints the
//! offset and size of every field, and each must equal the Rust struct's.

mod common;

use std::mem::{offset_of, size_of};

use ibumad::abi::{IbMadAddr, IbUserMad, UmadCa, UmadDeviceNode, UmadPort, UmadRegAttr};

const PROGRAM: &str = r#"
#include <stddef.h>
#include <stdio.h>
#include <infiniband/umad.h>
#define F(t, f) printf(#t "." #f "=%zu,%zu\n", offsetof(t, f), sizeof(((t *)0)->f))
#define S(t) printf(#t "=%zu\n", sizeof(t))
int main(void)
{
	S(ib_mad_addr_t); F(ib_mad_addr_t, qpn); F(ib_mad_addr_t, qkey); F(ib_mad_addr_t, lid);
	F(ib_mad_addr_t, sl); F(ib_mad_addr_t, path_bits); F(ib_mad_addr_t, grh_present);
	F(ib_mad_addr_t, gid_index); F(ib_mad_addr_t, hop_limit); F(ib_mad_addr_t, traffic_class);
	F(ib_mad_addr_t, gid); F(ib_mad_addr_t, flow_label); F(ib_mad_addr_t, pkey_index);
	F(ib_mad_addr_t, reserved);
	S(ib_user_mad_t); F(ib_user_mad_t, agent_id); F(ib_user_mad_t, status);
	F(ib_user_mad_t, timeout_ms); F(ib_user_mad_t, retries); F(ib_user_mad_t, length);
	F(ib_user_mad_t, addr); printf("ib_user_mad_t.data=%zu\n", offsetof(ib_user_mad_t, data));
	S(umad_port_t); F(umad_port_t, ca_name); F(umad_port_t, portnum); F(umad_port_t, base_lid);
	F(umad_port_t, lmc); F(umad_port_t, sm_lid); F(umad_port_t, sm_sl); F(umad_port_t, state);
	F(umad_port_t, phys_state); F(umad_port_t, rate); F(umad_port_t, capmask);
	F(umad_port_t, gid_prefix); F(umad_port_t, port_guid); F(umad_port_t, pkeys_size);
	F(umad_port_t, pkeys); F(umad_port_t, link_layer);
	S(umad_ca_t); F(umad_ca_t, ca_name); F(umad_ca_t, node_type); F(umad_ca_t, numports);
	F(umad_ca_t, fw_ver); F(umad_ca_t, ca_type); F(umad_ca_t, hw_ver); F(umad_ca_t, node_guid);
	F(umad_ca_t, system_guid); F(umad_ca_t, ports);
	S(struct umad_device_node); F(struct umad_device_node, next);
	F(struct umad_device_node, ca_name);
	S(struct umad_reg_attr); F(struct umad_reg_attr, mgmt_class);
	F(struct umad_reg_attr, mgmt_class_version); F(struct umad_reg_attr, flags);
	F(struct umad_reg_attr, method_mask); F(struct umad_reg_attr, oui);
	F(struct umad_reg_attr, rmpp_version);
	return 0;
}
"#;

macro_rules! field {
    ($t:ty, $f:ident) => {
        (
            format!("{}.{}", stringify!($t), stringify!($f)),
            format!("{},{}", offset_of!($t, $f), {
                // SAFETY: all-zero bytes are a valid value of these C structs (integers,
                // arrays and null pointers only).
                let v: $t = unsafe { std::mem::zeroed() };
                std::mem::size_of_val(&v.$f)
            }),
        )
    };
}

#[test]
fn every_field_sits_where_gcc_puts_it_in_the_debian_header() {
    if common::c_toolchain().is_none() {
        return;
    }
    let dir = common::scratch("layout");
    let prog = common::compile(&dir, "layout", PROGRAM, common::Link::Debian);
    let out = common::run(&prog, &[], "sim");
    assert!(out.status.success());
    let c = common::values(&out);
    // The C names of the Rust types.
    let rename = |k: &str| {
        k.replace("IbMadAddr", "ib_mad_addr_t")
            .replace("IbUserMad", "ib_user_mad_t")
            .replace("UmadPort", "umad_port_t")
            .replace("UmadCa", "umad_ca_t")
            .replace("UmadDeviceNode", "struct umad_device_node")
            .replace("UmadRegAttr", "struct umad_reg_attr")
    };
    let rust: Vec<(String, String)> = vec![
        ("IbMadAddr".into(), size_of::<IbMadAddr>().to_string()),
        field!(IbMadAddr, qpn),
        field!(IbMadAddr, qkey),
        field!(IbMadAddr, lid),
        field!(IbMadAddr, sl),
        field!(IbMadAddr, path_bits),
        field!(IbMadAddr, grh_present),
        field!(IbMadAddr, gid_index),
        field!(IbMadAddr, hop_limit),
        field!(IbMadAddr, traffic_class),
        field!(IbMadAddr, gid),
        field!(IbMadAddr, flow_label),
        field!(IbMadAddr, pkey_index),
        field!(IbMadAddr, reserved),
        ("IbUserMad".into(), size_of::<IbUserMad>().to_string()),
        field!(IbUserMad, agent_id),
        field!(IbUserMad, status),
        field!(IbUserMad, timeout_ms),
        field!(IbUserMad, retries),
        field!(IbUserMad, length),
        field!(IbUserMad, addr),
        ("IbUserMad.data".into(), size_of::<IbUserMad>().to_string()),
        ("UmadPort".into(), size_of::<UmadPort>().to_string()),
        field!(UmadPort, ca_name),
        field!(UmadPort, portnum),
        field!(UmadPort, base_lid),
        field!(UmadPort, lmc),
        field!(UmadPort, sm_lid),
        field!(UmadPort, sm_sl),
        field!(UmadPort, state),
        field!(UmadPort, phys_state),
        field!(UmadPort, rate),
        field!(UmadPort, capmask),
        field!(UmadPort, gid_prefix),
        field!(UmadPort, port_guid),
        field!(UmadPort, pkeys_size),
        field!(UmadPort, pkeys),
        field!(UmadPort, link_layer),
        ("UmadCa".into(), size_of::<UmadCa>().to_string()),
        field!(UmadCa, ca_name),
        field!(UmadCa, node_type),
        field!(UmadCa, numports),
        field!(UmadCa, fw_ver),
        field!(UmadCa, ca_type),
        field!(UmadCa, hw_ver),
        field!(UmadCa, node_guid),
        field!(UmadCa, system_guid),
        field!(UmadCa, ports),
        (
            "UmadDeviceNode".into(),
            size_of::<UmadDeviceNode>().to_string(),
        ),
        field!(UmadDeviceNode, next),
        field!(UmadDeviceNode, ca_name),
        ("UmadRegAttr".into(), size_of::<UmadRegAttr>().to_string()),
        field!(UmadRegAttr, mgmt_class),
        field!(UmadRegAttr, mgmt_class_version),
        field!(UmadRegAttr, flags),
        field!(UmadRegAttr, method_mask),
        field!(UmadRegAttr, oui),
        field!(UmadRegAttr, rmpp_version),
    ];
    assert_eq!(rust.len(), c.len(), "one line per field: {c:?}");
    for (k, v) in rust {
        let ck = rename(&k);
        assert_eq!(common::value(&c, &ck), v, "{ck}");
    }
    // The numbers of reference/mad-stack.md §3.2, written out by hand.
    assert_eq!(common::value(&c, "ib_user_mad_t"), "64");
    assert_eq!(common::value(&c, "ib_mad_addr_t.pkey_index"), "36,2");
    std::fs::remove_dir_all(&dir).unwrap();
}

//! The names `umad_class_str`, `umad_method_str`, `umad_attribute_str`,
//! `umad_common_mad_status_str` and `umad_sa_mad_status_str` give (rdma-core
//! `libibumad/umad_str.c`; the constants are those of `<infiniband/umad_types.h>`,
//! `umad_sm.h`, `umad_sa.h` and `umad_cm.h`). `tests/c_abi.rs` compares every input with
//! Debian's library.

use std::ffi::CStr;

/// `umad_class_str`.
pub fn class(mgmt_class: u8) -> &'static CStr {
    let named = match mgmt_class {
        0x01 | 0x81 => Some(c"Subn"),
        0x03 => Some(c"SubnAdm"),
        0x04 => Some(c"Perf"),
        0x05 => Some(c"BM"),
        0x06 => Some(c"DevMgt"),
        0x07 => Some(c"ComMgt"),
        0x08 => Some(c"SNMP"),
        0x10 => Some(c"DevAdm"),
        0x11 => Some(c"BootMgt"),
        0x12 => Some(c"BIS"),
        0x21 => Some(c"CongestionManagment"),
        _ => None,
    };
    if let Some(n) = named {
        return n;
    }
    match mgmt_class {
        0x09..=0x0f | 0x30..=0x4f => c"Vendor",
        0x10..=0x2f => c"Application",
        _ => c"<unknown>",
    }
}

fn common_method(method: u8) -> &'static CStr {
    match method {
        0x01 => c"Get",
        0x02 => c"Set",
        0x81 => c"GetResp",
        0x03 => c"Send",
        0x05 => c"Trap",
        0x06 => c"Report",
        0x86 => c"ReportResp",
        0x07 => c"TrapRepress",
        // The missing '>' is rdma-core's.
        _ => c"<unknown",
    }
}

/// `umad_method_str`.
pub fn method(mgmt_class: u8, method: u8) -> &'static CStr {
    if mgmt_class != 0x03 {
        return common_method(method);
    }
    match method {
        0x12 => c"GetTable",
        0x92 => c"GetTableResp",
        0x15 => c"Delete",
        0x95 => c"DeleteResp",
        0x14 => c"GetMulti",
        0x94 => c"GetMultiResp",
        0x13 => c"GetTraceTable",
        m => common_method(m),
    }
}

/// `umad_common_mad_status_str`; `status` in host order.
pub fn common_status(status: u16) -> &'static CStr {
    if status & 0x0001 != 0 {
        return c"Busy";
    }
    if status & 0x0002 != 0 {
        return c"Redirection required";
    }
    match status & 0x001c {
        0x04 => c"Bad Version",
        0x08 => c"Method not supported",
        0x0c => c"Method/Attribute combo not supported",
        0x1c => c"Invalid attribute/modifier field",
        _ => c"Success",
    }
}

/// `umad_sa_mad_status_str`; `status` in host order.
pub fn sa_status(status: u16) -> &'static CStr {
    match (status & 0xff00) >> 8 {
        0 => c"Success",
        1 => c"No Resources",
        2 => c"Request Invalid",
        3 => c"No Records",
        4 => c"Too Many Records",
        5 => c"Invalid GID",
        6 => c"Insufficient Components",
        7 => c"Request Denied",
        8 => c"Priority Suggested",
        _ => c"Undefined Error",
    }
}

fn common_attr(attr: u16) -> &'static CStr {
    match attr {
        0x0001 => c"Class Port Info",
        0x0002 => c"Notice",
        0x0003 => c"Inform Info",
        _ => c"<unknown>",
    }
}

fn sm_attr(attr: u16) -> &'static CStr {
    match attr {
        0x0010 => c"NodeDescription",
        0x0011 => c"NodeInfo",
        0x0012 => c"SwitchInfo",
        0x0014 => c"GUIDInfo",
        0x0015 => c"PortInfo",
        0x0016 => c"P_KeyTable",
        0x0017 => c"SLtoVLMappingTable",
        0x0018 => c"VLArbitrationTable",
        0x0019 => c"LinearForwardingTable",
        0x001a => c"RandomForwardingTable",
        0x001b => c"MulticastForwardingTable",
        0x0020 => c"SMInfo",
        0x0030 => c"VendorDiag",
        0x0031 => c"LedInfo",
        0x001c => c"LinkSpeedWidthPairsTable",
        0x001d => c"VendorSpecificMadsTable",
        0x001e => c"HierarchyInfo",
        0x0032 => c"CableInfo",
        0x0033 => c"PortInfoExtended",
        a => common_attr(a),
    }
}

fn sa_attr(attr: u16) -> &'static CStr {
    match attr {
        0x0011 => c"NodeRecord",
        0x0012 => c"PortInfoRecord",
        0x0013 => c"SLtoVLMappingTableRecord",
        0x0014 => c"SwitchInfoRecord",
        0x0015 => c"LinearForwardingTableRecord",
        0x0016 => c"RandomForwardingTableRecord",
        0x0017 => c"MulticastForwardingTableRecord",
        0x0018 => c"SMInfoRecord",
        0x00f3 => c"InformInfoRecord",
        0x0020 => c"LinkRecord",
        0x0030 => c"GuidInfoRecord",
        0x0031 => c"ServiceRecord",
        0x0033 => c"P_KeyTableRecord",
        0x0035 => c"PathRecord",
        0x0036 => c"VLArbitrationTableRecord",
        0x0038 => c"MCMemberRecord",
        0x0039 => c"TraceRecord",
        0x003a => c"MultiPathRecord",
        0x003b => c"ServiceAssociationRecord",
        0x0019 => c"LinkSpeedWidthPairsTableRecord",
        0x003c => c"HierarchyInfoRecord",
        0x003d => c"CableInfoRecord",
        0x003e => c"PortInfoExtendedRecord",
        a => common_attr(a),
    }
}

fn cm_attr(attr: u16) -> &'static CStr {
    match attr {
        0x0010 => c"ConnectRequest",
        0x0011 => c"MsgRcptAck",
        0x0012 => c"ConnectReject",
        0x0013 => c"ConnectReply",
        0x0014 => c"ReadyToUse",
        0x0015 => c"DisconnectRequest",
        0x0016 => c"DisconnectReply",
        0x0017 => c"ServiceIDResReq",
        0x0018 => c"ServiceIDResReqResp",
        0x0019 => c"LoadAlternatePath",
        0x001a => c"AlternatePathResponse",
        0x001b => c"SuggestAlternatePath",
        0x001c => c"SuggestPathResponse",
        a => common_attr(a),
    }
}

/// `umad_attribute_str`; `attr` in host order.
pub fn attribute(mgmt_class: u8, attr: u16) -> &'static CStr {
    match mgmt_class {
        0x01 | 0x81 => sm_attr(attr),
        0x03 => sa_attr(attr),
        0x07 => cm_attr(attr),
        _ => common_attr(attr),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_few_names_from_umad_str_c() {
        assert_eq!(class(0x81), c"Subn");
        assert_eq!(class(0x0a), c"Vendor");
        assert_eq!(class(0x22), c"Application");
        assert_eq!(class(0x60), c"<unknown>");
        assert_eq!(method(0x03, 0x92), c"GetTableResp");
        assert_eq!(method(0x04, 0x92), c"<unknown");
        assert_eq!(attribute(0x81, 0x0015), c"PortInfo");
        assert_eq!(attribute(0x03, 0x0035), c"PathRecord");
        assert_eq!(attribute(0x04, 0x0001), c"Class Port Info");
        assert_eq!(
            common_status(0x000c),
            c"Method/Attribute combo not supported"
        );
        assert_eq!(common_status(0x0003), c"Busy");
        assert_eq!(sa_status(0x0300), c"No Records");
        assert_eq!(sa_status(0x0900), c"Undefined Error");
    }
}

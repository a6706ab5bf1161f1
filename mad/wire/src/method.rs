//! MAD methods (IBA 13.4.5; kernel `ib_mad.h`, OpenSM `ib_types.h`) and the rule that maps a
//! request to its response method.

use crate::error::{Error, Result};

/// The R bit of the Method byte: set in every response method.
pub const RESPONSE: u8 = 0x80;

/// Get an attribute.
pub const GET: u8 = 0x01;
/// Set an attribute.
pub const SET: u8 = 0x02;
/// Response to Get and Set.
pub const GET_RESP: u8 = 0x81;
/// Send a datagram; no response.
pub const SEND: u8 = 0x03;
/// Unsolicited notice (trap).
pub const TRAP: u8 = 0x05;
/// Report (SA event forwarding).
pub const REPORT: u8 = 0x06;
/// Response to Report.
pub const REPORT_RESP: u8 = 0x86;
/// Acknowledgement of a Trap; treated as a response (`ib_response_mad`).
pub const TRAP_REPRESS: u8 = 0x07;
/// SA: get a table of records.
pub const GET_TABLE: u8 = 0x12;
/// SA: response to GetTable.
pub const GET_TABLE_RESP: u8 = 0x92;
/// SA: get a trace table.
pub const GET_TRACE_TABLE: u8 = 0x13;
/// SA: multi-packet get.
pub const GET_MULTI: u8 = 0x14;
/// SA: response to GetMulti.
pub const GET_MULTI_RESP: u8 = 0x94;
/// SA: delete a record.
pub const DELETE: u8 = 0x15;
/// SA: response to Delete.
pub const DELETE_RESP: u8 = 0x95;

/// Number of method slots per class (the Method byte without its R bit).
pub const MAX_METHODS: usize = 128;

/// Whether the R bit of `method` is set.
pub const fn has_response_bit(method: u8) -> bool {
    method & RESPONSE != 0
}

/// The method a responder puts in its answer to a request with `method`.
///
/// Set is answered by GetResp and Trap by TrapRepress (IBA 13.4.5); every other request is
/// answered by its own method with the R bit set (Get → GetResp, Report → ReportResp,
/// GetTable → GetTableResp …). Responses, TrapRepress and Send have no response.
/// GetTraceTable (0x13) gives 0x93, libibmad `mad.h` `IB_MAD_METHOD_GET_TRACE_TABLE_RESPONSE`
/// and what OpenSM's SA (`osm_sa.c`: request method | R) would send; OpenSM's Mellanox vendor
/// layer pairs it with GetMultiResp (0x94) instead, and no source we have says GetTableResp.
pub const fn response_method(method: u8) -> Result<u8> {
    match method {
        SET => Ok(GET_RESP),
        TRAP => Ok(TRAP_REPRESS),
        SEND | TRAP_REPRESS => Err(Error::NoResponseMethod { method }),
        m if has_response_bit(m) => Err(Error::NoResponseMethod { method }),
        m => Ok(m | RESPONSE),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_map_to_their_response_methods() {
        assert_eq!(response_method(0x01), Ok(0x81));
        assert_eq!(response_method(0x02), Ok(0x81));
        assert_eq!(response_method(0x05), Ok(0x07));
        assert_eq!(response_method(0x06), Ok(0x86));
        assert_eq!(response_method(0x12), Ok(0x92));
        assert_eq!(response_method(0x14), Ok(0x94));
        assert_eq!(response_method(0x15), Ok(0x95));
    }

    #[test]
    fn responses_and_sends_have_no_response() {
        for m in [0x81, 0x86, 0x92, 0x03, 0x07] {
            assert_eq!(
                response_method(m),
                Err(Error::NoResponseMethod { method: m })
            );
        }
    }
}

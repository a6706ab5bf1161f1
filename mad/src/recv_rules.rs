//! What the receive path decides from a MAD's header alone, after the kernel's
//! `ib_mad_recv_done`: whether the MAD is acceptable on the QP it arrived on (`validate_mad`),
//! whether the device gets it first (the firmware's SMA, PMA and vendor agents, via
//! `HcaPort::process_mad`: mlx5's `process_mad`), and the answer the stack gives to a Get or
//! Set no agent claims (`generate_unmatched_resp`).

use driver::verbs::SpecialQp;
use mad_wire::attr_id;
use mad_wire::header::{MAD_LEN, Mad};
use mad_wire::{class, method, status};

use crate::counters::DropReason;

/// Checks the kernel's `validate_mad` applies to every received MAD.
///
/// - BaseVersion must be 1 (the stack does not speak OPA);
/// - subnet-management classes (0x01, 0x81) only on QP0, every other class only on QP1;
/// - a CM MAD (class 0x07) other than ClassPortInfo must use method Send.
pub fn validate(qp: SpecialQp, mad: &[u8]) -> Result<(), DropReason> {
    let Ok(h) = Mad::new_checked(mad) else {
        return Err(DropReason::BadLength);
    };
    if h.base_version() != class::BASE_VERSION {
        return Err(DropReason::BadBaseVersion);
    }
    let smp = class::is_smp(h.mgmt_class());
    match qp {
        SpecialQp::Smi if !smp => return Err(DropReason::WrongQp),
        SpecialQp::Gsi if smp => return Err(DropReason::WrongQp),
        _ => {}
    }
    if h.mgmt_class() == class::CM
        && h.attr_id() != attr_id::CLASS_PORT_INFO
        && h.method() != method::SEND
    {
        return Err(DropReason::CmMethod);
    }
    Ok(())
}

/// What the port's own agent does with a received MAD, before any client agent sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LocalAgent {
    /// Hand it to `process_mad` and send the answer back.
    Answer,
    /// Hand it to `process_mad` and send nothing back (TrapRepress: the firmware's own trap
    /// was acknowledged).
    Absorb,
    /// Drop it: a Trap from LID 0.
    Consume,
    /// Not for the port's agent: dispatch it to the client agents.
    Pass,
}

/// Mellanox vendor class 1 (`MLX5_IB_VENDOR_CLASS1`, `MTHCA_VENDOR_CLASS1`): served by the
/// firmware.
const MLNX_VENDOR_CLASS1: u8 = 0x09;
/// Mellanox vendor class 2 (`MLX5_IB_VENDOR_CLASS2`, `MTHCA_VENDOR_CLASS2`): served by the
/// firmware.
const MLNX_VENDOR_CLASS2: u8 = 0x0A;

/// The rule of mlx5's `process_mad` (`drivers/infiniband/hw/mlx5/mad.c`
/// `mlx5_ib_process_mad`), which `ib_mad_recv_done` applies before it looks for a client
/// agent, so a client agent never sees what the device answers:
///
/// - a Trap from SLID 0 is consumed;
/// - SMPs (0x01, 0x81) with method Get, Set or TrapRepress go to the firmware SMA, except
///   SMInfo (the SMA cannot answer for an SM: OpenSM's SMInfo agent gets those);
/// - Get and Set of PerfMgt (0x04), of the Mellanox vendor classes 0x09 and 0x0A and of
///   Congestion Control (0x21) go to the device (MAD_IFC; the firmware answers an attribute
///   it does not implement with status 0x000C);
/// - everything else passes to the client agents.
///
/// The agent gets them only if `process_mad` fails.
///
/// PerfMgt Get always goes to MAD_IFC here, deliberately. Current kernels, when the device
/// has the `vport_counters` capability, answer it in the driver instead (`process_pma_cmd`):
/// ClassPortInfo with only the extended-width capability bit, PortCountersExtended from
/// QUERY_VPORT_COUNTER, every other attribute from the PPCNT register's IB port counters;
/// MAD_IFC is then left only PerfMgt Set. Through MAD_IFC the firmware PMA answers all of
/// them itself (its own ClassPortInfo, counters of the physical port rather than of the
/// vport, and status 0x000C for what it lacks), which is what a device without
/// `vport_counters` does under the kernel too, and keeps the stack to one device path whose
/// answers `firmware_answer` checks.
///
/// mthca's rule (`mthca_process_mad`)
/// differs only in leaving Congestion Control and vendor-range SMP attributes
/// (0xFF00–0xFFFF) to the client agents; the mlx5 rule is the one kept here, as the
/// driver is mlx5's.
pub fn local_agent(mad: &Mad<&[u8]>, slid: u16) -> LocalAgent {
    let m = mad.method();
    if m == method::TRAP && slid == 0 {
        return LocalAgent::Consume;
    }
    let c = mad.mgmt_class();
    if class::is_smp(c) {
        if mad.attr_id() == attr_id::sm::SM_INFO {
            return LocalAgent::Pass;
        }
        return match m {
            method::GET | method::SET => LocalAgent::Answer,
            method::TRAP_REPRESS => LocalAgent::Absorb,
            _ => LocalAgent::Pass,
        };
    }
    let device_class = matches!(
        c,
        class::PERF_MGMT | MLNX_VENDOR_CLASS1 | MLNX_VENDOR_CLASS2 | class::CONG_MGMT
    );
    if device_class && matches!(m, method::GET | method::SET) {
        return LocalAgent::Answer;
    }
    LocalAgent::Pass
}

/// Checks what `process_mad` returned for `request` before it goes on the wire as the port's
/// reply or to a local sender (nothing the device writes is trusted): BaseVersion 1, the
/// request's class, class version, TID, attribute ID and attribute modifier, and the method
/// that answers the request's: GetResp (0x81) for a Get or a Set, of whatever class
/// (`LocalAgent::Answer` is given only those). A TrapRepress (`LocalAgent::Absorb`) has no
/// answer and is not checked here; any other request method has none to check against and
/// gives `None`. For a directed-route SMP the D bit is set, as mlx5's `process_mad` does
/// after MAD_IFC. `None` means "not the response": the caller counts a failure and hands the
/// request to the client agents.
pub fn firmware_answer(request: &[u8; MAD_LEN], answer: [u8; MAD_LEN]) -> Option<[u8; MAD_LEN]> {
    let mut answer = answer;
    let req = Mad::new_checked(&request[..]).ok()?;
    let mut ans = Mad::new_checked(&mut answer[..]).ok()?;
    let expected_method = match req.method() {
        method::GET | method::SET => method::GET_RESP,
        _ => return None,
    };
    if ans.base_version() != class::BASE_VERSION
        || ans.mgmt_class() != req.mgmt_class()
        || ans.class_version() != req.class_version()
        || ans.method() != expected_method
        || ans.tid() != req.tid()
        || ans.attr_id() != req.attr_id()
        || ans.attr_mod() != req.attr_mod()
    {
        return None;
    }
    if req.mgmt_class() == class::SUBN_DIRECTED_ROUTE {
        let s = ans.status();
        ans.set_status(s | status::DR_DIRECTION);
    }
    Some(answer)
}

/// `generate_unmatched_resp`: a Get or Set that no agent claims is answered with GetResp and
/// status 0x000C (method/attribute unsupported), the D bit set for directed-route SMPs; the
/// rest of the MAD (TID, attribute, hop fields, paths) is kept. Anything else gets no answer.
pub fn unmatched_response(request: &[u8; MAD_LEN]) -> Option<[u8; MAD_LEN]> {
    let mut out = *request;
    let mut h = Mad::new_checked(&mut out[..]).ok()?;
    if !matches!(h.method(), method::GET | method::SET) {
        return None;
    }
    h.set_method(method::GET_RESP);
    let st = if h.mgmt_class() == class::SUBN_DIRECTED_ROUTE {
        status::METHOD_ATTR_UNSUPPORTED | status::DR_DIRECTION
    } else {
        status::METHOD_ATTR_UNSUPPORTED
    };
    h.set_status(st);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mad(class: u8, method: u8, attr: u16) -> [u8; MAD_LEN] {
        let mut b = [0u8; MAD_LEN];
        b[0] = 1;
        b[1] = class;
        b[2] = 1;
        b[3] = method;
        b[8..16].copy_from_slice(&0x0000_0001_0000_0002u64.to_be_bytes());
        b[16..18].copy_from_slice(&attr.to_be_bytes());
        b
    }

    #[test]
    fn validate_mad_rules() {
        use SpecialQp::{Gsi, Smi};
        assert_eq!(validate(Smi, &mad(0x81, 1, 0x11)), Ok(()));
        assert_eq!(validate(Smi, &mad(0x01, 1, 0x11)), Ok(()));
        assert_eq!(validate(Gsi, &mad(0x04, 1, 0x12)), Ok(()));
        assert_eq!(validate(Gsi, &mad(0x81, 1, 0x11)), Err(DropReason::WrongQp));
        assert_eq!(validate(Smi, &mad(0x03, 1, 0x11)), Err(DropReason::WrongQp));
        let mut v2 = mad(0x04, 1, 0x12);
        v2[0] = 2;
        assert_eq!(validate(Gsi, &v2), Err(DropReason::BadBaseVersion));
        assert_eq!(
            validate(Gsi, &mad(0x07, 0x01, 0x10)),
            Err(DropReason::CmMethod)
        );
        assert_eq!(validate(Gsi, &mad(0x07, 0x03, 0x10)), Ok(()));
        assert_eq!(
            validate(Gsi, &mad(0x07, 0x01, 0x01)),
            Ok(()),
            "CM ClassPortInfo Get"
        );
        assert_eq!(validate(Gsi, &[1u8; 10]), Err(DropReason::BadLength));
    }

    #[test]
    fn the_port_agent_takes_what_mlx5_process_mad_takes() {
        let la = |c, m, a, slid| local_agent(&Mad::new_checked(&mad(c, m, a)[..]).unwrap(), slid);
        assert_eq!(la(0x81, 0x01, 0x11, 0xFFFF), LocalAgent::Answer);
        assert_eq!(la(0x01, 0x02, 0x15, 5), LocalAgent::Answer);
        assert_eq!(la(0x81, 0x01, 0x20, 5), LocalAgent::Pass, "SMInfo");
        assert_eq!(la(0x01, 0x07, 0x02, 5), LocalAgent::Absorb);
        assert_eq!(la(0x01, 0x05, 0x02, 0), LocalAgent::Consume);
        assert_eq!(la(0x01, 0x05, 0x02, 3), LocalAgent::Pass);
        assert_eq!(
            la(0x01, 0x81, 0x11, 3),
            LocalAgent::Pass,
            "responses are not the SMA's"
        );
        assert_eq!(la(0x04, 0x01, 0x12, 3), LocalAgent::Answer);
        assert_eq!(la(0x04, 0x06, 0x12, 3), LocalAgent::Pass);
        assert_eq!(la(0x03, 0x01, 0x11, 3), LocalAgent::Pass);
    }

    /// mlx5's `process_mad` hands Get and Set of its vendor classes 1 and 2 (0x09, 0x0A) and
    /// of Congestion Control (0x21) to MAD_IFC, as it does PerfMgt's; other methods of those
    /// classes, and the rest of vendor range 1, pass to the client agents.
    #[test]
    fn the_port_agent_takes_mellanox_vendor_and_cc_gets_and_sets() {
        let la = |c, m| local_agent(&Mad::new_checked(&mad(c, m, 0x10)[..]).unwrap(), 5);
        for c in [0x09, 0x0A, 0x21] {
            for m in [0x01, 0x02] {
                assert_eq!(
                    la(c, m),
                    LocalAgent::Answer,
                    "class {c:#04x} method {m:#04x}"
                );
            }
            for m in [0x03, 0x05, 0x06, 0x07, 0x81] {
                assert_eq!(la(c, m), LocalAgent::Pass, "class {c:#04x} method {m:#04x}");
            }
        }
        for c in [0x0B, 0x0F, 0x20, 0x30] {
            assert_eq!(la(c, 0x01), LocalAgent::Pass, "class {c:#04x}");
        }
    }

    #[test]
    fn firmware_answers_are_checked() {
        let req = mad(0x81, 0x01, 0x11);
        let mut ans = req;
        ans[3] = 0x81;
        let out = firmware_answer(&req, ans).expect("a proper answer");
        assert_eq!(
            u16::from_be_bytes([out[4], out[5]]),
            0x8000,
            "D bit set for DR"
        );
        let mut wrong_tid = ans;
        wrong_tid[15] ^= 1;
        assert_eq!(firmware_answer(&req, wrong_tid), None);
        assert_eq!(firmware_answer(&req, req), None, "not a response");
        let mut wrong_class = ans;
        wrong_class[1] = 0x01;
        assert_eq!(firmware_answer(&req, wrong_class), None);
    }

    /// SubnGet(PortInfo, port 1), TID 7: the firmware's answer must be the GetResp of that
    /// attribute and modifier in the request's versions; a mismatch in any one field is
    /// refused, as is one that gets every field wrong but the class and TID.
    #[test]
    fn firmware_answers_must_match_the_request_field_by_field() {
        let mut req = mad(0x01, 0x01, 0x15);
        req[8..16].copy_from_slice(&7u64.to_be_bytes());
        req[20..24].copy_from_slice(&1u32.to_be_bytes());
        let mut good = req;
        good[3] = 0x81;
        assert_eq!(
            firmware_answer(&req, good),
            Some(good),
            "the GetResp itself"
        );

        let mut all_wrong = good;
        all_wrong[0] = 7;
        all_wrong[16..18].copy_from_slice(&0x0011u16.to_be_bytes());
        all_wrong[20..24].copy_from_slice(&9u32.to_be_bytes());
        assert_eq!(firmware_answer(&req, all_wrong), None, "NodeInfo mod 9, v7");

        let one_field: [(&str, usize, u8); 6] = [
            ("base version 7", 0, 7),
            ("class version 2", 2, 2),
            ("method TrapRepress", 3, 0x87),
            ("method GetTableResp", 3, 0x86),
            ("attribute NodeInfo", 17, 0x11),
            ("modifier 9", 23, 9),
        ];
        for (what, at, v) in one_field {
            let mut a = good;
            a[at] = v;
            assert_eq!(firmware_answer(&req, a), None, "{what}");
        }

        let mut set = req;
        set[3] = 0x02;
        assert_eq!(firmware_answer(&set, good), Some(good), "Set: GetResp");
        let mut set_resp = good;
        set_resp[3] = 0x82;
        assert_eq!(firmware_answer(&set, set_resp), None, "Set: not 0x82");
        let mut pma = mad(0x04, 0x01, 0x12);
        pma[2] = 1;
        let mut pma_ans = pma;
        pma_ans[3] = 0x81;
        assert_eq!(firmware_answer(&pma, pma_ans), Some(pma_ans), "PMA GetResp");
        pma_ans[2] = 2;
        assert_eq!(firmware_answer(&pma, pma_ans), None, "PMA class version");
    }

    #[test]
    fn unmatched_get_and_set_get_0x000c() {
        let out = unmatched_response(&mad(0x04, 0x01, 0x12)).unwrap();
        assert_eq!(out[3], 0x81);
        assert_eq!(u16::from_be_bytes([out[4], out[5]]), 0x000C);
        assert_eq!(out[8..16], mad(0x04, 0x01, 0x12)[8..16], "TID kept");
        let set = unmatched_response(&mad(0x81, 0x02, 0x15)).unwrap();
        assert_eq!(set[3], 0x81, "Set is answered with GetResp");
        assert_eq!(u16::from_be_bytes([set[4], set[5]]), 0x800C, "D bit for DR");
        assert_eq!(unmatched_response(&mad(0x04, 0x06, 0x12)), None);
        assert_eq!(unmatched_response(&mad(0x04, 0x81, 0x12)), None);
    }
}

//! Round trips (encode then decode gives the value back) for every command input and output,
//! typed errors for short, mis-addressed or failed buffers, and a property test that no decoder
//! panics on arbitrary bytes.

use firmware_cmds::mlx5::caps::{CapType, HcaCaps};
use firmware_cmds::mlx5::cmd::entry::CmdEntry;
use firmware_cmds::mlx5::cmd::header::{InHeader, OutHeader};
use firmware_cmds::mlx5::cmd::mailbox::{self, ChainCheck, MailboxBlock};
use firmware_cmds::mlx5::cmd::status::CmdStatus;
use firmware_cmds::mlx5::cqc::Cqc;
use firmware_cmds::mlx5::cqe::{Cqe, CqeBody, CqeOpcode, ErrCqe, ReqCqe, RespCqe};
use firmware_cmds::mlx5::decode;
use firmware_cmds::mlx5::doorbell::{CqDbRecord, QpDbRecord};
use firmware_cmds::mlx5::eqc::Eqc;
use firmware_cmds::mlx5::eqe::{Eqe, EqeEvent, EventType};
use firmware_cmds::mlx5::health::HealthBuffer;
use firmware_cmds::mlx5::opcode::Opcode;
use firmware_cmds::mlx5::ops::access_reg::{AccessReg, AccessRegOut, RegAccess};
use firmware_cmds::mlx5::ops::cq::{CreateCq, CreateCqOut, DestroyCq};
use firmware_cmds::mlx5::ops::eq::{CreateEq, CreateEqOut, DestroyEq};
use firmware_cmds::mlx5::ops::hca::{
    DisableHca, EnableHca, InitHca, TeardownHca, TeardownHcaOut, TeardownProfile,
};
use firmware_cmds::mlx5::ops::hca_cap::{CapMode, QueryHcaCap, QueryHcaCapOut, SetHcaCap};
use firmware_cmds::mlx5::ops::issi::{QueryIssi, QueryIssiOut, SetIssi};
use firmware_cmds::mlx5::ops::mad_ifc::{MadIfc, MadIfcOut};
use firmware_cmds::mlx5::ops::pages::{
    ManagePages, ManagePagesOut, PagesKind, PagesOp, QueryPages, QueryPagesOut,
};
use firmware_cmds::mlx5::ops::pd::{AllocPd, AllocPdOut, DeallocPd};
use firmware_cmds::mlx5::ops::qp::{CreateQp, CreateQpOut, DestroyQp, QueryQp, QueryQpOut};
use firmware_cmds::mlx5::ops::qp_modify::{
    Init2RtrQp, ModifyQp, Qp2Err, Qp2Rst, Rst2InitQp, Rtr2RtsQp, Sqerr2RtsQp,
};
use firmware_cmds::mlx5::ops::special_contexts::{QuerySpecialContexts, SpecialContexts};
use firmware_cmds::mlx5::ops::uar::{AllocUar, AllocUarOut, DeallocUar};
use firmware_cmds::mlx5::ops::vport::{
    HcaVportContext, QueryHcaVportContext, QueryVportState, VportState,
};
use firmware_cmds::mlx5::ops::{Command, CommandOutput, NoPayload};
use firmware_cmds::mlx5::qpc::{QpServiceType, QpState, Qpc};
use firmware_cmds::mlx5::syndrome::CqeSyndrome;
use firmware_cmds::mlx5::wqe::{CtrlSeg, DataSeg, DatagramSeg, UdSendWqe};
use firmware_cmds::{Error, MailboxProblem};
use proptest::prelude::*;

fn rt_in<C: Command + PartialEq + core::fmt::Debug>(c: &C) {
    let b = c.encode().unwrap();
    assert_eq!(&C::decode(&b).unwrap(), c);
    assert_eq!(InHeader::decode(&b).unwrap().opcode, C::OPCODE);
    // Every input is rejected when one byte short of its fixed part or under another opcode.
    let mut other = b.clone();
    other[0] ^= 0x40;
    assert!(
        matches!(C::decode(&other), Err(Error::WrongOpcode { .. })),
        "{:?}",
        C::OPCODE
    );
    assert!(C::decode(&b[..7]).is_err());
}

fn rt_out<O: CommandOutput + PartialEq + core::fmt::Debug>(o: &O) {
    rt_out_inner(o, true);
}

/// For outputs whose length is set by the input (ACCESS_REG data): no fixed length to miss.
fn rt_out_unsized<O: CommandOutput + PartialEq + core::fmt::Debug>(o: &O) {
    rt_out_inner(o, false);
}

fn rt_out_inner<O: CommandOutput + PartialEq + core::fmt::Debug>(o: &O, sized: bool) {
    let b = o.encode().unwrap();
    assert_eq!(&O::decode(&b).unwrap(), o);
    // A failed output is reported as such, whatever its length.
    let failed = OutHeader::failure(CmdStatus::BAD_PARAM_ERR, 0x1234, 8);
    assert_eq!(
        O::decode(&failed),
        Err(Error::CommandFailed {
            status: CmdStatus::BAD_PARAM_ERR,
            syndrome: 0x1234
        })
    );
    // A successful but truncated output is short.
    if sized && b.len() > 8 {
        assert!(
            matches!(O::decode(&b[..b.len() - 1]), Err(Error::Short { .. })),
            "{o:?}"
        );
    }
}

fn qpc() -> Qpc {
    Qpc {
        state: QpState::Init,
        st: QpServiceType::QP1,
        pm_state: 3,
        pd: 5,
        mtu: 4,
        log_msg_max: 30,
        log_rq_size: 8,
        log_rq_stride: 2,
        no_sq: false,
        log_sq_size: 9,
        ts_format: 1,
        rlky: true,
        fre: true,
        uar_page: 3,
        user_index: 0x12,
        log_page_size: 1,
        page_offset: 2,
        remote_qpn: 0xfff,
        pkey_index: 1,
        sl: 3,
        port: 2,
        next_send_psn: 0x123456,
        cqn_snd: 0x401,
        deth_sqpn: 1,
        next_rcv_psn: 0x654321,
        cqn_rcv: 0x402,
        dbr_addr: 0xdead_b000,
        q_key: 0x8001_0000,
        rq_type: 0,
        srqn: 0x77,
        hw_sq_wqebb_counter: 10,
        sw_sq_wqebb_counter: 11,
        hw_rq_counter: 12,
        sw_rq_counter: 13,
    }
}

#[test]
fn every_input_round_trips() {
    rt_in(&EnableHca {
        function_id: 3,
        embedded_cpu_function: true,
    });
    rt_in(&DisableHca {
        function_id: 0,
        embedded_cpu_function: false,
    });
    rt_in(&InitHca {
        sw_owner_id: [1, 2, 3, 4],
    });
    rt_in(&TeardownHca {
        profile: TeardownProfile::ForceClose,
    });
    rt_in(&QueryIssi);
    rt_in(&SetIssi { current_issi: 1 });
    rt_in(&QueryPages {
        kind: PagesKind::Regular,
        function_id: 2,
        embedded_cpu_function: true,
    });
    rt_in(&ManagePages {
        op: PagesOp::Give(vec![0x1000, 0x2000, 0xffff_f000]),
        function_id: 1,
        embedded_cpu_function: false,
    });
    rt_in(&ManagePages {
        op: PagesOp::Take(7),
        function_id: 1,
        embedded_cpu_function: false,
    });
    rt_in(&ManagePages {
        op: PagesOp::CantGive,
        function_id: 1,
        embedded_cpu_function: false,
    });
    rt_in(&AccessReg::host_endianness(false));
    rt_in(&AccessReg {
        access: RegAccess::Read,
        register_id: 0x5002,
        argument: 9,
        data: vec![0; 8],
    });
    rt_in(&QueryHcaCap::general(CapMode::Max));
    rt_in(&QueryHcaCap {
        cap_type: CapType::ROCE,
        mode: CapMode::Current,
        other_function: true,
        function_id: 4,
    });
    let mut caps = HcaCaps::zeroed();
    caps.set_log_max_qp(17).unwrap();
    caps.set_uar_4k(true).unwrap();
    rt_in(&SetHcaCap {
        cap_type: CapType::GENERAL,
        other_function: false,
        function_id: 0,
        caps,
    });
    rt_in(&AllocUar);
    rt_in(&DeallocUar { uar: 0xabcdef });
    rt_in(&AllocPd);
    rt_in(&DeallocPd { pd: 0x123 });
    rt_in(&QuerySpecialContexts);
    rt_in(&CreateEq {
        ctx: Eqc {
            status: 0,
            ec: true,
            oi: true,
            st: 9,
            page_offset: 1,
            log_eq_size: 10,
            uar_page: 2,
            intr: 0xfff,
            log_page_size: 3,
            consumer_counter: 4,
            producer_counter: 5,
        },
        event_bitmask: [1, 2, 3, 4],
        pas: vec![0x1000; 3],
    });
    rt_in(&DestroyEq { eqn: 7 });
    rt_in(&CreateCq {
        ctx: Cqc {
            status: 0,
            cqe_sz: 1,
            cc: true,
            oi: true,
            st: 6,
            page_offset: 5,
            log_cq_size: 12,
            uar_page: 2,
            cq_period: 0xfff,
            cq_max_count: 0xffff,
            c_eqn: 3,
            log_page_size: 1,
            last_notified_index: 1,
            last_solicit_index: 2,
            consumer_counter: 3,
            producer_counter: 4,
            dbr_addr: 0x1234_5678_9abc_def0,
        },
        pas: vec![0x5000],
    });
    rt_in(&DestroyCq { cqn: 0xffffff });
    rt_in(&CreateQp {
        ctx: qpc(),
        opt_param_mask: 0x30,
        input_qpn: 0,
        pas: vec![0x9000, 0xa000],
    });
    rt_in(&DestroyQp { qpn: 0x48 });
    rt_in(&QueryQp { qpn: 0x48 });
    let m = ModifyQp {
        qpn: 0x48,
        opt_param_mask: 0x10,
        ctx: qpc(),
    };
    rt_in(&Rst2InitQp(m));
    rt_in(&Init2RtrQp(m));
    rt_in(&Rtr2RtsQp(m));
    rt_in(&Sqerr2RtsQp(m));
    rt_in(&Qp2Err { qpn: 1 });
    rt_in(&Qp2Rst { qpn: 2 });
    let mut mad = [0u8; 256];
    mad.iter_mut().enumerate().for_each(|(i, b)| *b = i as u8);
    rt_in(&MadIfc {
        ignore_mkey: true,
        ignore_bkey: false,
        remote_lid: 9,
        port: 1,
        mad,
    });
    rt_in(&QueryHcaVportContext {
        other_vport: true,
        port_num: 1,
        vport_number: 3,
    });
    rt_in(&QueryVportState {
        op_mod: 0,
        other_vport: false,
        vport_number: 0,
    });
}

#[test]
fn every_output_round_trips() {
    rt_out(&NoPayload::<0x0c>);
    rt_out(&NoPayload::<0x10>);
    rt_out(&TeardownHcaOut {
        force_state_fail: true,
    });
    rt_out(&QueryIssiOut {
        current_issi: 1,
        supported_issi_dw0: 3,
    });
    rt_out(&QueryPagesOut {
        function_id: 1,
        embedded_cpu_function: true,
        num_pages: -5,
    });
    rt_out(&ManagePagesOut {
        pas: vec![0x1000, 0x3000],
    });
    rt_out_unsized(&AccessRegOut {
        data: vec![0x80; 16],
    });
    let mut caps = HcaCaps::zeroed();
    caps.set_num_ports(1).unwrap();
    caps.set_log_max_qp(18).unwrap();
    rt_out(&QueryHcaCapOut { caps });
    rt_out(&AllocUarOut { uar: 1 });
    rt_out(&AllocPdOut { pd: 2 });
    rt_out(&SpecialContexts {
        dump_fill_mkey: 1,
        resd_lkey: 2,
        null_mkey: 3,
        terminate_scatter_list_mkey: 4,
        repeated_mkey: 5,
    });
    rt_out(&CreateEqOut { eqn: 4 });
    rt_out(&CreateCqOut { cqn: 0x400 });
    rt_out(&CreateQpOut { qpn: 0x48 });
    rt_out(&QueryQpOut {
        opt_param_mask: 1,
        ctx: qpc(),
    });
    rt_out(&MadIfcOut { mad: [0x5a; 256] });
    rt_out(&HcaVportContext {
        has_smi: true,
        port_state: 4,
        lid: 1,
        sm_lid: 1,
        port_guid: 2,
        node_guid: 3,
        ..Default::default()
    });
    rt_out(&VportState {
        admin_state: 1,
        state: 1,
    });
}

#[test]
fn cqe_eqe_round_trip() {
    let cqes = [
        Cqe {
            opcode: CqeOpcode::REQ,
            format: 0,
            owner: true,
            qpn: 0x48,
            wqe_counter: 3,
            signature: 0,
            body: CqeBody::Requester(ReqCqe {
                wqe_opcode: 0x0a,
                byte_cnt: 0,
                timestamp: 77,
            }),
        },
        Cqe {
            opcode: CqeOpcode::RESP_SEND_IMM,
            format: 0,
            owner: false,
            qpn: 1,
            wqe_counter: 9,
            signature: 4,
            body: CqeBody::Responder(RespCqe {
                byte_cnt: 296,
                src_qpn: 1,
                sl: 2,
                l3_hdr: 2,
                slid: 3,
                ml_path: 1,
                imm_inval_pkey: 0xffff,
                srqn: 0,
                timestamp: 5,
                drop_count: 0,
            }),
        },
        Cqe {
            opcode: CqeOpcode::RESP_ERR,
            format: 0,
            owner: true,
            qpn: 2,
            wqe_counter: 1,
            signature: 0,
            body: CqeBody::Error(ErrCqe {
                syndrome: CqeSyndrome::LOCAL_LENGTH_ERR,
                vendor_err: 0x33,
                wqe_opcode: 0,
                srqn: 0,
                hw_err_synd: 1,
                hw_synd_type: 2,
            }),
        },
    ];
    for c in &cqes {
        assert_eq!(&Cqe::decode(&c.encode()).unwrap(), c);
    }
    let mut raw = [0u8; 64];
    raw[0x3f] = 0x51; // RESIZE_CQ
    raw[7] = 0x99;
    let c = Cqe::decode(&raw).unwrap();
    assert!(matches!(c.body, CqeBody::Other(_)));
    assert_eq!(c.encode(), raw);

    let events = [
        EqeEvent::Completion { cqn: 0x401 },
        EqeEvent::Command {
            vector: 0x8000_0001,
        },
        EqeEvent::PageRequest {
            ec_function: 1,
            function_id: 2,
            num_pages: -3,
        },
        EqeEvent::PortChange {
            port: 1,
            sub_type: 6,
        },
        EqeEvent::CqError {
            cqn: 4,
            syndrome: 2,
        },
        EqeEvent::QueueEvent {
            event: EventType::COMM_EST,
            queue_type: 0,
            number: 0x48,
        },
        EqeEvent::Other {
            event: EventType::GENERAL_EVENT,
            data: [7; 28],
        },
    ];
    for ev in &events {
        let e = Eqe::from_event(ev, 1);
        let back = Eqe::decode(&e.encode()).unwrap();
        assert_eq!(&back.event(), ev);
        assert_eq!(back.owner, 1);
    }
}

#[test]
fn garbage_gives_typed_errors() {
    // Unknown op_mod codes.
    let mut b = QueryPages {
        kind: PagesKind::Boot,
        function_id: 0,
        embedded_cpu_function: false,
    }
    .encode()
    .unwrap();
    b[7] = 9;
    assert_eq!(
        QueryPages::decode(&b),
        Err(Error::UnknownCode {
            what: "QUERY_PAGES op_mod",
            value: 9
        })
    );
    let mut b = ManagePages {
        op: PagesOp::CantGive,
        function_id: 0,
        embedded_cpu_function: false,
    }
    .encode()
    .unwrap();
    b[7] = 3;
    assert!(matches!(
        ManagePages::decode(&b),
        Err(Error::UnknownCode { .. })
    ));
    let mut b = TeardownHca {
        profile: TeardownProfile::GracefulClose,
    }
    .encode()
    .unwrap();
    b[0x0b] = 7;
    assert!(matches!(
        TeardownHca::decode(&b),
        Err(Error::UnknownCode { .. })
    ));
    // MANAGE_PAGES that claims more entries than it carries: short, nothing allocated.
    let mut b = ManagePages {
        op: PagesOp::Give(vec![0x1000]),
        function_id: 0,
        embedded_cpu_function: false,
    }
    .encode()
    .unwrap();
    b[0x0c..0x10].copy_from_slice(&[0xff, 0xff, 0xff, 0xff]);
    assert!(matches!(ManagePages::decode(&b), Err(Error::Short { .. })));
    let mut o = ManagePagesOut { pas: vec![] }.encode().unwrap();
    o[0x08..0x0c].copy_from_slice(&[0x7f, 0xff, 0xff, 0xff]);
    assert!(matches!(
        ManagePagesOut::decode(&o),
        Err(Error::Short { .. })
    ));
    // Misaligned page address is refused at encode.
    assert!(
        ManagePages {
            op: PagesOp::Give(vec![0x1001]),
            function_id: 0,
            embedded_cpu_function: false
        }
        .encode()
        .is_err()
    );
    // CREATE_CQ whose inlen leaves half a pas entry.
    let mut b = CreateCq::default().encode().unwrap();
    b.extend_from_slice(&[0; 4]);
    assert!(matches!(CreateCq::decode(&b), Err(Error::Invalid { .. })));
    // QUERY_QP output with an undefined QP state (8).
    let mut o = QueryQpOut {
        opt_param_mask: 0,
        ctx: qpc(),
    }
    .encode()
    .unwrap();
    o[0x18] = 0x80;
    assert_eq!(
        QueryQpOut::decode(&o),
        Err(Error::UnknownCode {
            what: "QP state",
            value: 8
        })
    );
    // Values too wide for their fields are refused, not truncated.
    assert!(matches!(
        DestroyCq { cqn: 0x100_0000 }.encode(),
        Err(Error::ValueTooWide { .. })
    ));
    assert!(
        CreateQp {
            ctx: Qpc {
                log_sq_size: 16,
                ..Qpc::default()
            },
            ..Default::default()
        }
        .encode()
        .is_err()
    );
    // Structures too short.
    assert!(matches!(
        Cqe::decode(&[0; 63]),
        Err(Error::Short {
            need: 64,
            got: 63,
            ..
        })
    ));
    assert!(matches!(Eqe::decode(&[0; 10]), Err(Error::Short { .. })));
    assert!(HealthBuffer::decode(&[0; 63]).is_err());
    assert!(CmdEntry::decode(&[]).is_err());
    assert!(MailboxBlock::decode(&[0; 575]).is_err());
    assert!(QpDbRecord::decode(&[0; 7]).is_err());
    assert!(CqDbRecord::decode(&[0; 7]).is_err());
    assert!(CtrlSeg::decode(&[0; 15]).is_err());
    assert!(DatagramSeg::decode(&[0; 47]).is_err());
    assert!(DataSeg::decode(&[0; 15]).is_err());
    // A UD WQE whose DS count is below control + datagram, or beyond the buffer.
    let mut w = [0u8; 128];
    w[7] = 3;
    assert!(UdSendWqe::decode(&w).is_err());
    w[7] = 9;
    assert!(matches!(UdSendWqe::decode(&w), Err(Error::Short { .. })));
    // Inline data running past the DS count.
    w[7] = 5;
    w[0x40..0x44].copy_from_slice(&[0x80, 0, 0, 0x20]);
    assert!(UdSendWqe::decode(&w).is_err());
    // A status byte + syndrome names itself; an unknown one says so.
    assert!(decode::status(0x66, 1).to_string().contains("UNKNOWN"));
    assert!(
        decode::status(0xfe, 0xbadd00de)
            .to_string()
            .contains("driver-faked")
    );
}

#[test]
fn mailbox_errors_map_to_delivery_status() {
    use firmware_cmds::mlx5::cmd::status::DeliveryStatus;
    assert_eq!(
        MailboxProblem::Token {
            expected: 1,
            got: 2
        }
        .delivery_status(),
        DeliveryStatus::TOKEN_ERR
    );
    assert_eq!(
        MailboxProblem::BlockNumber {
            expected: 1,
            got: 2
        }
        .delivery_status(),
        DeliveryStatus::BAD_BLOCK_NUMBER
    );
    assert_eq!(
        MailboxProblem::Signature.delivery_status(),
        DeliveryStatus::SIGNATURE_ERR
    );
    assert_eq!(
        MailboxProblem::Misaligned {
            addr: 1,
            align: 512,
            output: true
        }
        .delivery_status(),
        DeliveryStatus::OUT_PTR_ALIGN_ERR
    );
    assert_eq!(
        MailboxProblem::Misaligned {
            addr: 1,
            align: 512,
            output: false
        }
        .delivery_status(),
        DeliveryStatus::IN_PTR_ALIGN_ERR
    );
}

#[test]
fn decode_api_display() {
    let c = Cqe {
        opcode: CqeOpcode::REQ_ERR,
        format: 0,
        owner: false,
        qpn: 0x48,
        wqe_counter: 2,
        signature: 0,
        body: CqeBody::Error(ErrCqe {
            syndrome: CqeSyndrome(0x77),
            vendor_err: 0x9,
            wqe_opcode: 0x0a,
            srqn: 0,
            hw_err_synd: 0,
            hw_synd_type: 0,
        }),
    };
    let s = decode::cqe(&c.encode()).unwrap().to_string();
    assert!(s.contains("REQ_ERR"), "{s}");
    assert!(s.contains("0x77 UNKNOWN"), "{s}");
    assert!(s.contains("IB_WC_GENERAL_ERR (21)"), "{s}");
    assert!(s.contains("vendor_err 0x09"), "{s}");
    let e = Eqe::from_event(
        &EqeEvent::PageRequest {
            ec_function: 0,
            function_id: 0,
            num_pages: 12,
        },
        0,
    );
    let s = decode::eqe(&e.encode()).unwrap().to_string();
    assert!(
        s.contains("PAGE_REQUEST") && s.contains("num_pages 12"),
        "{s}"
    );
    let dump = decode::HexDump(&[0u8; 20]).to_string();
    assert_eq!(dump.lines().count(), 2);
}

type Decoder = fn(&[u8]) -> bool;

fn all_decoders() -> Vec<(&'static str, Decoder)> {
    vec![
        ("EnableHca", |b| EnableHca::decode(b).is_ok()),
        ("DisableHca", |b| DisableHca::decode(b).is_ok()),
        ("InitHca", |b| InitHca::decode(b).is_ok()),
        ("TeardownHca", |b| TeardownHca::decode(b).is_ok()),
        ("TeardownHcaOut", |b| TeardownHcaOut::decode(b).is_ok()),
        ("QueryIssi", |b| QueryIssi::decode(b).is_ok()),
        ("QueryIssiOut", |b| QueryIssiOut::decode(b).is_ok()),
        ("SetIssi", |b| SetIssi::decode(b).is_ok()),
        ("QueryPages", |b| QueryPages::decode(b).is_ok()),
        ("QueryPagesOut", |b| QueryPagesOut::decode(b).is_ok()),
        ("ManagePages", |b| ManagePages::decode(b).is_ok()),
        ("ManagePagesOut", |b| ManagePagesOut::decode(b).is_ok()),
        ("AccessReg", |b| AccessReg::decode(b).is_ok()),
        ("AccessRegOut", |b| AccessRegOut::decode(b).is_ok()),
        ("QueryHcaCap", |b| QueryHcaCap::decode(b).is_ok()),
        ("QueryHcaCapOut", |b| QueryHcaCapOut::decode(b).is_ok()),
        ("SetHcaCap", |b| SetHcaCap::decode(b).is_ok()),
        ("AllocUar", |b| AllocUar::decode(b).is_ok()),
        ("AllocUarOut", |b| AllocUarOut::decode(b).is_ok()),
        ("DeallocUar", |b| DeallocUar::decode(b).is_ok()),
        ("AllocPd", |b| AllocPd::decode(b).is_ok()),
        ("AllocPdOut", |b| AllocPdOut::decode(b).is_ok()),
        ("DeallocPd", |b| DeallocPd::decode(b).is_ok()),
        ("QuerySpecialContexts", |b| {
            QuerySpecialContexts::decode(b).is_ok()
        }),
        ("SpecialContexts", |b| SpecialContexts::decode(b).is_ok()),
        ("CreateEq", |b| CreateEq::decode(b).is_ok()),
        ("CreateEqOut", |b| CreateEqOut::decode(b).is_ok()),
        ("DestroyEq", |b| DestroyEq::decode(b).is_ok()),
        ("CreateCq", |b| CreateCq::decode(b).is_ok()),
        ("CreateCqOut", |b| CreateCqOut::decode(b).is_ok()),
        ("DestroyCq", |b| DestroyCq::decode(b).is_ok()),
        ("CreateQp", |b| CreateQp::decode(b).is_ok()),
        ("CreateQpOut", |b| CreateQpOut::decode(b).is_ok()),
        ("DestroyQp", |b| DestroyQp::decode(b).is_ok()),
        ("QueryQp", |b| QueryQp::decode(b).is_ok()),
        ("QueryQpOut", |b| QueryQpOut::decode(b).is_ok()),
        ("Rst2InitQp", |b| Rst2InitQp::decode(b).is_ok()),
        ("Init2RtrQp", |b| Init2RtrQp::decode(b).is_ok()),
        ("Rtr2RtsQp", |b| Rtr2RtsQp::decode(b).is_ok()),
        ("Sqerr2RtsQp", |b| Sqerr2RtsQp::decode(b).is_ok()),
        ("Qp2Err", |b| Qp2Err::decode(b).is_ok()),
        ("Qp2Rst", |b| Qp2Rst::decode(b).is_ok()),
        ("MadIfc", |b| MadIfc::decode(b).is_ok()),
        ("MadIfcOut", |b| MadIfcOut::decode(b).is_ok()),
        ("QueryHcaVportContext", |b| {
            QueryHcaVportContext::decode(b).is_ok()
        }),
        ("HcaVportContext", |b| HcaVportContext::decode(b).is_ok()),
        ("QueryVportState", |b| QueryVportState::decode(b).is_ok()),
        ("VportState", |b| VportState::decode(b).is_ok()),
        ("NoPayload", |b| NoPayload::<0x10>::decode(b).is_ok()),
        ("InHeader", |b| InHeader::decode(b).is_ok()),
        ("OutHeader", |b| OutHeader::decode(b).is_ok()),
        ("CmdEntry", |b| CmdEntry::decode(b).is_ok()),
        ("MailboxBlock", |b| MailboxBlock::decode(b).is_ok()),
        ("Cqe", |b| Cqe::decode(b).map(|c| c.to_string()).is_ok()),
        ("Eqe", |b| Eqe::decode(b).map(|e| e.to_string()).is_ok()),
        ("HealthBuffer", |b| HealthBuffer::decode(b).is_ok()),
        ("Qpc", |b| Qpc::decode(b).is_ok()),
        ("Cqc", |b| Cqc::decode(b).is_ok()),
        ("Eqc", |b| Eqc::decode(b).is_ok()),
        ("HcaCaps", |b| HcaCaps::from_bytes(b).is_ok()),
        ("QpDbRecord", |b| QpDbRecord::decode(b).is_ok()),
        ("CqDbRecord", |b| CqDbRecord::decode(b).is_ok()),
        ("CtrlSeg", |b| CtrlSeg::decode(b).is_ok()),
        ("DatagramSeg", |b| DatagramSeg::decode(b).is_ok()),
        ("DataSeg", |b| DataSeg::decode(b).is_ok()),
        ("UdSendWqe", |b| UdSendWqe::decode(b).is_ok()),
        ("RecvWqe", |b| {
            firmware_cmds::mlx5::wqe::parse_recv_wqe(b, firmware_cmds::mlx5::wqe::INVALID_LKEY)
                .is_ok()
        }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Arbitrary bytes never make a decoder panic: as they are, then under every opcode this
    /// crate names (so each command decoder gets past its opcode check), then with a zero
    /// status byte (so each output decoder gets past its status check).
    #[test]
    fn decoders_never_panic(mut bytes in prop::collection::vec(any::<u8>(), 0..0x1100)) {
        for (_, dec) in all_decoders() {
            let _ = dec(&bytes);
        }
        if bytes.len() >= 2 {
            for op in Opcode::ALL {
                bytes[..2].copy_from_slice(&op.0.to_be_bytes());
                for (_, dec) in all_decoders() {
                    let _ = dec(&bytes);
                }
            }
            bytes[0] = 0;
            for (_, dec) in all_decoders() {
                let _ = dec(&bytes);
            }
        }
    }

    /// Walking a chain whose blocks are arbitrary bytes ends in a value or a typed error.
    #[test]
    fn gather_never_panics(len in 0usize..5000, first in any::<u64>(), blocks in prop::collection::vec(prop::collection::vec(any::<u8>(), 576), 0..12), verify in any::<bool>()) {
        let mut i = 0usize;
        let check = ChainCheck { token: 0, verify_signatures: verify, output: false };
        let r = mailbox::gather(&[0; 16], len, first, check, |_| {
            let b = blocks.get(i).map(|v| {
                let mut a = [0u8; 576];
                a.copy_from_slice(v);
                a
            });
            i += 1;
            b
        });
        if let Ok(msg) = r {
            prop_assert_eq!(msg.len(), len);
        }
    }

    /// Every input survives encode -> frame -> gather -> decode for arbitrary QP contexts.
    #[test]
    fn create_qp_through_the_mailbox(pd in 0u32..0x100_0000, cqn in 0u32..0x100_0000, qkey in any::<u32>(), npas in 0usize..100, token in 1u8..) {
        let c = CreateQp { ctx: Qpc { pd, cqn_snd: cqn, cqn_rcv: cqn, q_key: qkey, st: QpServiceType::QP1, ..Qpc::default() }, opt_param_mask: 0, input_qpn: 0, pas: (0..npas as u64).map(|i| i << 12).collect() };
        let bytes = c.encode().unwrap();
        let n = mailbox::blocks_needed(bytes.len());
        let addrs: Vec<u64> = (0..n as u64).map(|i| 0x10_0000 + i * 0x400).collect();
        let framed = mailbox::frame(&bytes, &addrs, token, true).unwrap();
        let mem: std::collections::HashMap<u64, [u8; 576]> = addrs.iter().copied().zip(framed.blocks.iter().map(MailboxBlock::encode)).collect();
        let check = ChainCheck { token, verify_signatures: true, output: false };
        let back = mailbox::gather(&framed.inline, bytes.len(), addrs.first().copied().unwrap_or(0), check, |a| mem.get(&a).copied()).unwrap();
        prop_assert_eq!(CreateQp::decode(&back).unwrap(), c);
    }
}

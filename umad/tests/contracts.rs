//! The library's contracts seen from Rust, over a simulated ConnectX the test keeps a handle
//! on: nothing leaks when files and the context close; a device removal makes reads fail
//! with EIO, the fd poll POLLERR and registrations EPIPE; a request whose send fails on the
//! device still comes back (as ETIMEDOUT), so no caller waits forever; a removal ends long
//! waits whichever thread's pass took it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use driver::DeviceBackend;
use driver::verbs::Hca;
use ibumad::abi::{HDR_LEN, IbUserMad};
use ibumad::queue::poll_now;
use ibumad::{Context, Registration, UmadError, UmadFile};
use sim::ClockMode;
use sim::mlx5::Mlx5;

const MAD: usize = 256;

struct Rig {
    model: Arc<Mlx5>,
    backend: Arc<dyn DeviceBackend>,
    ctx: Context,
    hca: Arc<dyn Hca>,
    _net: sim::net::Network,
}

fn rig() -> Rig {
    let (model, net) = Mlx5::standalone_default(ClockMode::Real).expect("simulated ConnectX");
    let model = Arc::new(model);
    let backend: Arc<dyn DeviceBackend> = embed::backend_for(model.clone(), "sim");
    let ctx = Context::from_backends(vec![("sim".into(), backend.clone())]).expect("context");
    let hca = ctx.cas()[0].hca.clone();
    Rig {
        model,
        backend,
        ctx,
        hca,
        _net: net,
    }
}

fn perf_agent(f: &UmadFile) -> u32 {
    f.register(&Registration {
        qpn: 1,
        class: 0x04,
        version: 1,
        methods: [0, 0],
        oui: 0,
        rmpp_version: 0,
        flags: 0,
    })
    .expect("register")
}

/// A PerfMgt PortCounters Get from `agent` to `dlid`.
fn perf_get(agent: u32, dlid: u16, tid: u64, timeout_ms: u32, retries: u32) -> Vec<u8> {
    let mut h = IbUserMad {
        agent_id: agent,
        timeout_ms,
        retries,
        ..IbUserMad::default()
    };
    h.addr.lid = dlid.to_be();
    h.addr.qpn = 1u32.to_be();
    h.addr.qkey = 0x8001_0000u32.to_be();
    let mut b = h.to_bytes().to_vec();
    let mut m = [0u8; MAD];
    m[0] = 1;
    m[1] = 0x04;
    m[2] = 1;
    m[3] = 0x01;
    m[8..16].copy_from_slice(&tid.to_be_bytes());
    m[16..18].copy_from_slice(&0x0012u16.to_be_bytes());
    m[65] = 1;
    b.extend_from_slice(&m);
    b
}

/// Read the next packet, waiting up to `wait`.
fn read(f: &UmadFile, wait: Duration) -> Result<(IbUserMad, Vec<u8>), UmadError> {
    let end = Instant::now() + wait;
    let mut buf = vec![0u8; HDR_LEN + MAD];
    loop {
        match f.read(&mut buf) {
            Ok(n) => {
                let h = IbUserMad::from_bytes(buf[..HDR_LEN].try_into().unwrap());
                return Ok((h, buf[HDR_LEN..n].to_vec()));
            }
            Err(UmadError::Again) if Instant::now() < end => {
                std::thread::sleep(Duration::from_millis(2));
            }
            Err(e) => return Err(e),
        }
    }
}

#[test]
fn nothing_is_left_after_files_and_the_context_close() {
    let r = rig();
    let port = r.ctx.cas()[0].ports[0].clone();
    for round in 0..3u64 {
        let f = r.ctx.open_file(&port).unwrap();
        let a = perf_agent(&f);
        // One answered request, one left outstanding when the file closes.
        f.write(&perf_get(a, 1, 0x100 + round, 1000, 0)).unwrap();
        let (hdr, mad) = read(&f, Duration::from_secs(2)).unwrap();
        assert_eq!((hdr.status, mad[3]), (0, 0x81));
        f.write(&perf_get(a, 0x77, 0x200 + round, 60_000, 0))
            .unwrap();
        assert_eq!(f.outstanding(), 1);
        r.ctx.close_file(f.fd()).unwrap();
        assert!(
            matches!(r.ctx.file(f.fd()), Err(UmadError::NotAPort { .. })),
            "the fd is forgotten"
        );
        assert_eq!(f.agents(), 0);
        assert_eq!(f.queued(), 0);
        let census = port.mad.census();
        assert_eq!(census.agents, 1, "only the port's own sentinel: {census:?}");
        assert_eq!(census.outstanding, 0, "{census:?}");
    }
    assert_eq!(r.ctx.open_files(), 0);
    let Rig {
        model,
        backend,
        ctx,
        hca,
        _net,
    } = r;
    ctx.close().unwrap();
    drop(port);
    drop(ctx);
    let a = hca.accounting();
    assert_eq!(a.mad_pool.leases_out, 0, "{a:?}");
    assert_eq!(a.driver_pool.leases_out, 0, "{a:?}");
    assert_eq!(a.firmware_pages, 0, "{a:?}");
    assert_eq!(a.outstanding_wrs, 0, "{a:?}");
    // The pools' arenas go with the HCA.
    drop(hca);
    let mapper = backend.dma_mapper();
    assert_eq!(mapper.live_mappings(), 0);
    assert_eq!(mapper.fault_count(), 0, "{:?}", model.counters());
    assert_eq!(model.pages_held(), 0);
}

#[test]
fn a_removed_device_fails_reads_with_eio_polls_pollerr_and_registrations_epipe() {
    let r = rig();
    let port = r.ctx.cas()[0].ports[0].clone();
    let f = r.ctx.open_file(&port).unwrap();
    let idle = r.ctx.open_file(&port).unwrap();
    let a = perf_agent(&f);
    f.write(&perf_get(a, 0x77, 1, 60_000, 0)).unwrap();
    assert_eq!(poll_now(f.fd()) & libc::POLLERR, 0);
    r.model.faults().remove();
    let start = Instant::now();
    let e = loop {
        match read(&f, Duration::from_millis(10)) {
            Err(UmadError::Again) if start.elapsed() < Duration::from_secs(5) => {}
            other => break other.unwrap_err(),
        }
    };
    assert_eq!(e.errno(), libc::EIO, "{e}");
    assert_ne!(poll_now(f.fd()) & libc::POLLERR, 0, "POLLERR");
    assert_ne!(
        poll_now(idle.fd()) & libc::POLLERR,
        0,
        "a file without agents is marked too"
    );
    let e = idle.read(&mut [0u8; 400]).unwrap_err();
    assert_eq!(e.errno(), libc::EIO);
    let e = f
        .register(&Registration {
            qpn: 1,
            class: 0,
            version: 0,
            methods: [0, 0],
            oui: 0,
            rmpp_version: 0,
            flags: 0,
        })
        .unwrap_err();
    assert_eq!(e.errno(), libc::EPIPE, "{e}");
    let e = f.write(&perf_get(a, 1, 2, 0, 0)).unwrap_err();
    assert_eq!(e.errno(), libc::EIO, "{e}");
    let e = r.ctx.open_file(&port).unwrap_err();
    assert_eq!(e.errno(), libc::EIO, "{e}");
    r.ctx.close_file(f.fd()).unwrap();
    r.ctx.close_file(idle.fd()).unwrap();
    let _ = r.ctx.close();
}

/// The port dies at once for every fd: once a read of one says EIO, every other fd of the
/// port polls POLLERR and reads EIO, whichever order the MAD layer tells the agents in (the
/// file's own agent, the port's sentinel, others). Agents that take their time when told (as
/// a preempted progress thread would) widen the window in which the order shows.
#[test]
fn once_one_fd_of_a_port_reads_eio_every_fd_of_it_does() {
    use mad::event::{Event, EventQueue};
    use mad::{AgentSpec, SpecialQp};
    for round in 0..10u64 {
        let r = rig();
        let port = r.ctx.cas()[0].ports[0].clone();
        let f = r.ctx.open_file(&port).unwrap();
        let idle = r.ctx.open_file(&port).unwrap();
        let a = perf_agent(&f);
        let slow: Vec<_> = (0..3)
            .map(|_| {
                let q = Arc::new(EventQueue::new());
                let weak = Arc::downgrade(&q);
                q.set_notify(Some(Arc::new(move || {
                    let Some(q) = weak.upgrade() else { return };
                    let mut evs = Vec::new();
                    q.drain_into(&mut evs);
                    if evs.iter().any(|e| matches!(e, Event::DeviceFatal { .. })) {
                        std::thread::sleep(Duration::from_millis(20));
                    }
                })));
                port.mad
                    .register(AgentSpec::send_only(SpecialQp::Gsi).with_events(q))
                    .expect("a slow agent")
            })
            .collect();
        f.write(&perf_get(a, 0x77, round, 60_000, 0)).unwrap();
        r.model.faults().remove();
        let start = Instant::now();
        let e = loop {
            match read(&f, Duration::from_millis(1)) {
                Err(UmadError::Again) if start.elapsed() < Duration::from_secs(5) => {}
                other => break other.unwrap_err(),
            }
        };
        assert_eq!(e.errno(), libc::EIO, "round {round}: {e}");
        assert_ne!(
            poll_now(idle.fd()) & libc::POLLERR,
            0,
            "round {round}: the fd without agents polls POLLERR as soon as another reads EIO"
        );
        let e = idle.read(&mut [0u8; 400]).unwrap_err();
        assert_eq!(e.errno(), libc::EIO, "round {round}: {e}");
        r.ctx.close_file(f.fd()).unwrap();
        r.ctx.close_file(idle.fd()).unwrap();
        for agent in slow {
            agent.deregister();
        }
        let _ = r.ctx.close();
    }
}

#[test]
fn a_request_whose_send_fails_on_the_device_comes_back_as_a_timeout() {
    use firmware_cmds::mlx5::syndrome::CqeSyndrome;
    use sim::mlx5::WqeQueue;
    let r = rig();
    let port = r.ctx.cas()[0].ports[0].clone();
    let f = r.ctx.open_file(&port).unwrap();
    let a = perf_agent(&f);
    let qpn1 = r
        .model
        .qps()
        .into_iter()
        .find(|q| q.st == firmware_cmds::mlx5::qpc::QpServiceType::QP1)
        .map(|q| q.qpn)
        .expect("QP1");
    r.model
        .faults()
        .wqe_error(qpn1, WqeQueue::Send, 1, CqeSyndrome::LOCAL_QP_OP_ERR, 0x42);
    // The kernel would free this send in silence; its caller would wait forever.
    f.write(&perf_get(a, 1, 0xabc, 60_000, 0)).unwrap();
    let (hdr, mad) = read(&f, Duration::from_secs(5)).expect("the request comes back");
    assert_eq!(hdr.status, libc::ETIMEDOUT as u32);
    assert_eq!(mad.len(), 24);
    assert_eq!(
        u64::from_be_bytes(mad[8..16].try_into().unwrap()) as u32,
        0xabc
    );
    assert!(read(&f, Duration::from_millis(200)).is_err(), "once");
    // The QP recovered: the next request is answered.
    f.write(&perf_get(a, 1, 0xabd, 2000, 0)).unwrap();
    let (hdr, mad) = read(&f, Duration::from_secs(2)).unwrap();
    assert_eq!((hdr.status, mad[3]), (0, 0x81));
    r.ctx.close().unwrap();
}

#[test]
fn a_gsi_send_uses_qp1s_qkey_whatever_the_header_says() {
    // ib_umad_write builds the address handle from LID, SL, path bits and GRH, and
    // ib_create_send_mad sends with the QP's own Q_Key: the header's qkey is not used.
    let r = rig();
    let port = r.ctx.cas()[0].ports[0].clone();
    let f = r.ctx.open_file(&port).unwrap();
    let a = perf_agent(&f);
    for (tid, qkey) in [(0x401u64, 0u32), (0x402, 0x1234_5678)] {
        let mut get = perf_get(a, 1, tid, 1000, 0);
        let mut sent = IbUserMad::from_bytes(get[..HDR_LEN].try_into().unwrap());
        sent.addr.qkey = qkey.to_be();
        get[..HDR_LEN].copy_from_slice(&sent.to_bytes());
        f.write(&get).unwrap();
        let (hdr, mad) = read(&f, Duration::from_secs(2)).unwrap();
        assert_eq!(
            (hdr.status, mad[3]),
            (0, 0x81),
            "answered with header qkey {qkey:#x}"
        );
        assert_eq!(
            u64::from_be_bytes(mad[8..16].try_into().unwrap()) as u32,
            tid as u32
        );
        assert_eq!(hdr.addr.qkey, 0, "a received header's qkey is 0");
    }
    r.ctx.close_file(f.fd()).unwrap();
    r.ctx.close().unwrap();
}

#[test]
fn capability_mask_changes_reach_the_fabric_port() {
    let r = rig();
    let port = r.ctx.cas()[0].ports[0].clone();
    let before = port.attrs().unwrap().cap_mask;
    assert_eq!(before & 2, 0);
    assert_eq!(port.set_is_sm(true).unwrap() & 2, 2);
    assert_eq!(
        port.attrs().unwrap().cap_mask,
        before | 2,
        "only IsSM changed"
    );
    assert_eq!(port.set_is_sm(false).unwrap(), before);
    r.ctx.close().unwrap();
}

/// The header and first 36 bytes of a MAD of `class` from `agent`, RMPP Active or not.
fn write_head(agent: u32, class: u8, rmpp_active: bool) -> [u8; HDR_LEN + 36] {
    let mut b = [0u8; HDR_LEN + 36];
    b[..HDR_LEN].copy_from_slice(
        &IbUserMad {
            agent_id: agent,
            ..IbUserMad::default()
        }
        .to_bytes(),
    );
    let m = &mut b[HDR_LEN..];
    (m[0], m[1], m[2], m[3]) = (1, class, 2, 0x01);
    if rmpp_active {
        (m[24], m[25], m[26]) = (1, 1, 0x07);
    }
    b
}

/// An SA-class agent on QP1 (class version 2, no methods) with the given RMPP version and
/// registration flags.
fn register_sa(f: &UmadFile, rmpp_version: u8, flags: u32) -> u32 {
    f.register(&Registration {
        qpn: 1,
        class: 0x03,
        version: 2,
        methods: [0, 0],
        oui: 0,
        rmpp_version,
        flags,
    })
    .unwrap()
}

#[test]
fn a_write_may_exceed_one_mad_only_as_an_rmpp_active_send_of_a_kernel_rmpp_agent() {
    let r = rig();
    let port = r.ctx.cas()[0].ports[0].clone();
    let f = r.ctx.open_file(&port).unwrap();
    let reg = |rmpp_version, flags| register_sa(&f, rmpp_version, flags);
    let plain = reg(0, 0);
    let rmpp = reg(1, 0);
    let user_rmpp = reg(1, ibumad::abi::USER_RMPP);
    let einval = |r: Result<(), UmadError>| r.unwrap_err().errno() == libc::EINVAL;
    assert!(f.check_write(&write_head(rmpp, 0x03, true), 4000).is_ok());
    assert!(f.check_write(&write_head(rmpp, 0x03, false), 256).is_ok());
    assert!(einval(f.check_write(&write_head(rmpp, 0x03, false), 257)));
    assert!(einval(f.check_write(&write_head(plain, 0x03, true), 257)));
    assert!(
        einval(f.check_write(&write_head(user_rmpp, 0x03, true), 257)),
        "with user RMPP the kernel sends one MAD at a time"
    );
    assert!(einval(f.check_write(&write_head(rmpp, 0x03, true), 35)));
    assert!(einval(f.check_write(&write_head(40, 0x03, true), 256)));
    assert_eq!(
        f.check_write(&write_head(7, 0x03, false), 4000)
            .unwrap_err()
            .errno(),
        libc::EIO,
        "an unregistered agent is EIO before the length is looked at"
    );
    r.ctx.close_file(f.fd()).unwrap();
    r.ctx.close().unwrap();
}

#[test]
fn a_write_shorter_than_its_classs_headers_is_einval() {
    // ib_umad_write: check_sub_overflow(count, hdr_size + ib_get_mad_data_offset(class)):
    // 56 bytes for the SA, 64 for DevMgt/DevAdm/BIS, 40 for vendor range 2, 24 otherwise
    // (where the 36 bytes every write needs rule).
    let r = rig();
    let port = r.ctx.cas()[0].ports[0].clone();
    let f = r.ctx.open_file(&port).unwrap();
    let a = register_sa(&f, 0, 0);
    for (class, need) in [
        (0x03u8, 56usize),
        (0x06, 64),
        (0x10, 64),
        (0x12, 64),
        (0x30, 40),
        (0x4F, 40),
        (0x04, 36),
        (0x81, 36),
    ] {
        let head = write_head(a, class, false);
        match f.check_write(&head, need - 1) {
            Err(e) => assert_eq!(e.errno(), libc::EINVAL, "class {class:#x}: {e}"),
            Ok(()) => panic!("class {class:#x}: {} bytes accepted", need - 1),
        }
        assert!(
            f.check_write(&head, need).is_ok(),
            "class {class:#x}: {need} bytes"
        );
    }
    assert_eq!(
        f.check_write(&write_head(9, 0x03, false), 40)
            .unwrap_err()
            .errno(),
        libc::EIO,
        "an unregistered agent is EIO before the class's length is looked at"
    );
    r.ctx.close_file(f.fd()).unwrap();
    r.ctx.close().unwrap();
}

#[test]
fn an_oui_wider_than_24_bits_is_einval_with_any_class() {
    // ib_umad_reg_agent2: `ureq.oui & 0xff000000` is EINVAL whenever a class is given.
    let r = rig();
    let port = r.ctx.cas()[0].ports[0].clone();
    let f = r.ctx.open_file(&port).unwrap();
    let reg = |class: u8, oui: u32| {
        f.register(&Registration {
            qpn: 1,
            class,
            version: u8::from(class != 0),
            methods: [0, 0],
            oui,
            rmpp_version: 0,
            flags: 0,
        })
    };
    for class in [0x04u8, 0x09, 0x31] {
        let e = reg(class, 0x0100_1405).unwrap_err();
        assert_eq!(e.errno(), libc::EINVAL, "class {class:#x}: {e}");
    }
    assert_eq!(f.agents(), 0, "nothing registered");
    assert_eq!(
        reg(0, 0x0100_0000).unwrap(),
        0,
        "no class: the OUI is not looked at"
    );
    assert_eq!(reg(0x04, 0x00ff_ffff).unwrap(), 1, "24 bits are fine");
    r.ctx.close_file(f.fd()).unwrap();
    r.ctx.close().unwrap();
}

/// An SA request from `agent` to LID 1 (the simulated HCA's own port), method `m`, `data_len`
/// bytes of data after the SA header, and the user's bytes 24 to 35 (the RMPP header) as
/// `rmpp_hdr`.
fn sa_request(agent: u32, m: u8, tid: u64, data_len: usize, rmpp_hdr: [u8; 12]) -> Vec<u8> {
    let mut h = IbUserMad {
        agent_id: agent,
        timeout_ms: 100,
        retries: 0,
        ..IbUserMad::default()
    };
    h.addr.lid = 1u16.to_be();
    h.addr.qpn = 1u32.to_be();
    h.addr.qkey = 0x8001_0000u32.to_be();
    let mut b = h.to_bytes().to_vec();
    let mut m_ = vec![0u8; 56 + data_len];
    (m_[0], m_[1], m_[2], m_[3]) = (1, 0x03, 2, m);
    m_[8..16].copy_from_slice(&tid.to_be_bytes());
    m_[16..18].copy_from_slice(&0x0011u16.to_be_bytes());
    m_[24..36].copy_from_slice(&rmpp_hdr);
    for (i, x) in m_[56..].iter_mut().enumerate() {
        *x = (i % 249) as u8 + 1;
    }
    b.extend_from_slice(&m_);
    b
}

/// Two files on the rig's port with SA-class (0x03, version 2) agents on QP1: a client agent
/// with `rmpp_version` and no methods (its agent ID returned), and a peer taking `methods`.
fn sa_client_and_peer(
    r: &Rig,
    rmpp_version: u8,
    methods: u64,
) -> (Arc<UmadFile>, u32, Arc<UmadFile>) {
    let port = r.ctx.cas()[0].ports[0].clone();
    let client = r.ctx.open_file(&port).unwrap();
    let peer = r.ctx.open_file(&port).unwrap();
    let reg = |f: &UmadFile, methods: u64, rmpp_version| {
        f.register(&Registration {
            qpn: 1,
            class: 0x03,
            version: 2,
            methods: [methods, 0],
            oui: 0,
            rmpp_version,
            flags: 0,
        })
        .unwrap()
    };
    let a = reg(&client, 0, rmpp_version);
    reg(&peer, methods, 0);
    (client, a, peer)
}

#[test]
fn rmpp_headers_reach_the_wire_as_the_kernels_umad_write_leaves_them() {
    // ib_umad_write copies only the common header (bytes 0-23) and the bytes from 36 on over
    // the zeroed buffer ib_create_send_mad made; for an RMPP-active send
    // alloc_send_rmpp_list writes RMPPVersion (the agent's), DATA and Active, and
    // send_next_seg First/Last, SegmentNumber and PayloadLength. So the user's RRespTime,
    // RMPPStatus and the rest of its RMPP header never reach the wire.
    let r = rig();
    // The peer takes RMPP segments as they come (no RMPP of its own): Get and GetMulti.
    let (client, a, peer) = sa_client_and_peer(&r, 1, 1 << 0x01 | 1 << 0x14);
    // An RMPP-active GetMulti of 450 data bytes: 3 segments. The user's header has
    // RRespTime 0x1F, a stray RMPPStatus, RMPPType 3 (STOP), RMPPVersion 7, a SegmentNumber
    // and a PayloadLength.
    let user_hdr = [7, 3, 0x1F << 3 | 0x01, 5, 0, 0, 0, 9, 0, 0, 0x12, 0x34];
    client
        .write(&sa_request(a, 0x14, 0x51, 450, user_hdr))
        .unwrap();
    let (_, seg) = read(&peer, Duration::from_secs(2)).expect("segment 1 at the peer");
    assert_eq!((seg[1], seg[3]), (0x03, 0x14));
    assert_eq!(
        seg[24..36],
        [1, 1, 0x03, 0, 0, 0, 0, 1, 0, 0, 0x01, 0xFE],
        "RMPPVersion 1, DATA, Active|First with RRespTime 0, status 0, segment 1, \
         PayloadLength 3 * 220 - 150 = 510"
    );
    // No ACK comes: the client's request returns as ETIMEDOUT.
    let (h, _) = read(&client, Duration::from_secs(5)).expect("the timeout return");
    assert_eq!(h.status, 110);
    // Not RMPP-active: the RMPP header goes out all zero, whatever the user wrote there.
    let user_hdr = [1, 1, 0x1F << 3, 5, 0, 0, 0, 9, 0, 0, 0x12, 0x34];
    client
        .write(&sa_request(a, 0x01, 0x52, 100, user_hdr))
        .unwrap();
    let (_, mad) = read(&peer, Duration::from_secs(2)).expect("the Get at the peer");
    assert_eq!((mad[1], mad[3]), (0x03, 0x01));
    assert_eq!(mad[24..36], [0; 12], "the kernel copies none of it");
    assert_eq!(
        mad[36..156],
        sa_request(a, 0x01, 0x52, 100, user_hdr)[HDR_LEN + 36..]
    );
    r.ctx.close_file(client.fd()).unwrap();
    r.ctx.close_file(peer.fd()).unwrap();
    r.ctx.close().unwrap();
}

#[test]
fn the_mad_sent_has_the_header_that_was_checked_even_if_the_buffer_changed_meanwhile() {
    // umad_send reads the header and 36 bytes, checks them, then reads the whole MAD: another
    // thread may have rewritten the buffer in between. The TID and class recorded for the
    // duplicate rule and the timeout return must be those that go out.
    let r = rig();
    let (client, a, peer) = sa_client_and_peer(&r, 0, 1 << 0x01);
    let user_hdr = [0; 12];
    let first = sa_request(a, 0x01, 0x61, 100, user_hdr);
    let mut second = sa_request(a, 0x01, 0x62, 100, user_hdr);
    second[HDR_LEN + 1] = 0x04; // another class too
    second[HDR_LEN + 100] ^= 0xFF; // and other data, which the second read does take
    let head: &[u8; HDR_LEN + 36] = first[..HDR_LEN + 36].try_into().unwrap();
    let mad_len = first.len() - HDR_LEN;
    client
        .write_parts(head, mad_len, || &second[HDR_LEN..])
        .unwrap();
    let (_, mad) = read(&peer, Duration::from_secs(2)).expect("the Get at the peer");
    // The TID's upper 32 bits are the stack's (bytes 8-11), as in the kernel.
    let m = &first[HDR_LEN..];
    assert_eq!(mad[..8], m[..8], "the checked class and method");
    assert_eq!(
        mad[12..36],
        m[12..36],
        "the checked TID and the rest of the 36 bytes"
    );
    assert_eq!(mad[36..mad_len], second[HDR_LEN + 36..]);
    r.ctx.close_file(client.fd()).unwrap();
    r.ctx.close_file(peer.fd()).unwrap();
    r.ctx.close().unwrap();
}

#[test]
fn a_write_is_checked_once_in_the_kernels_order() {
    // ib_umad_write: the length (ib_create_send_mad's EINVAL) is refused before the duplicate
    // rule is looked at, on the Rust write path as on umad_send's.
    let r = rig();
    let port = r.ctx.cas()[0].ports[0].clone();
    let f = r.ctx.open_file(&port).unwrap();
    let a = perf_agent(&f);
    f.write(&perf_get(a, 0x77, 0x300, 60_000, 0)).unwrap();
    assert_eq!(f.outstanding(), 1);
    let mut long = perf_get(a, 0x77, 0x300, 60_000, 0);
    long.resize(HDR_LEN + 300, 0);
    match f.write(&long) {
        Err(UmadError::Send(mad::MadError::MadTooLarge { len: 300, max: 256 })) => {}
        other => panic!("an over-long duplicate is refused for its length: {other:?}"),
    }
    // The duplicate alone is refused as one, and nothing was added either time.
    match f.write(&perf_get(a, 0x77, 0x300, 60_000, 0)) {
        Err(e @ UmadError::Duplicate { .. }) => assert_eq!(e.errno(), libc::EINVAL),
        other => panic!("a duplicate: {other:?}"),
    }
    assert_eq!(f.outstanding(), 1);
    // An unregistered agent is EIO whatever the length or TID.
    let mut stray = long.clone();
    stray[..4].copy_from_slice(&9u32.to_ne_bytes());
    assert_eq!(f.write(&stray).unwrap_err().errno(), libc::EIO);
    r.ctx.close_file(f.fd()).unwrap();
    r.ctx.close().unwrap();
}

/// Two files on the rig's port: an SM agent on QP0 taking directed-route Gets, and a client
/// on QP0 with no class (responses only). Returns them with their agent IDs.
fn sm_and_client_on_qp0(r: &Rig) -> (Arc<UmadFile>, u32, Arc<UmadFile>, u32) {
    let port = r.ctx.cas()[0].ports[0].clone();
    let sm = r.ctx.open_file(&port).unwrap();
    let client = r.ctx.open_file(&port).unwrap();
    let reg = |f: &UmadFile, class: u8, methods: u64| {
        f.register(&Registration {
            qpn: 0,
            class,
            version: u8::from(class != 0),
            methods: [methods, 0],
            oui: 0,
            rmpp_version: 0,
            flags: 0,
        })
        .unwrap()
    };
    let s = reg(&sm, 0x81, 1 << 0x01);
    let c = reg(&client, 0, 0);
    (sm, s, client, c)
}

/// A 0-hop directed-route SMInfo Get from `agent`, to the port itself.
fn dr_sminfo_get(agent: u32, tid: u64, timeout_ms: u32) -> Vec<u8> {
    let mut h = IbUserMad {
        agent_id: agent,
        timeout_ms,
        ..IbUserMad::default()
    };
    h.addr.lid = 0xFFFFu16.to_be();
    let mut b = h.to_bytes().to_vec();
    let mut m = [0u8; MAD];
    (m[0], m[1], m[2], m[3]) = (1, 0x81, 1, 0x01);
    m[8..16].copy_from_slice(&tid.to_be_bytes());
    m[16..18].copy_from_slice(&0x0020u16.to_be_bytes());
    m[32..36].copy_from_slice(&[0xFF; 4]);
    b.extend_from_slice(&m);
    b
}

#[test]
fn a_local_smp_another_file_answers_reaches_its_requester() {
    // The port's SMA does not take SMInfo: the SM's file gets the request, and its answer
    // is the client's response (the kernel routes it by the TID's upper half).
    let r = rig();
    let (sm, sm_agent, client, agent) = sm_and_client_on_qp0(&r);
    client.write(&dr_sminfo_get(agent, 0x77, 100)).unwrap();
    let (hdr, req) = read(&sm, Duration::from_secs(2)).expect("the request at the SM");
    assert_eq!((hdr.status, req[1], req[3]), (0, 0x81, 0x01));
    let mut resp = IbUserMad {
        agent_id: sm_agent,
        addr: hdr.addr,
        ..IbUserMad::default()
    }
    .to_bytes()
    .to_vec();
    let mut answer = req.clone();
    answer[3] = 0x81;
    answer[4] |= 0x80;
    answer[64] = 0xC1;
    resp.extend_from_slice(&answer);
    sm.write(&resp).unwrap();
    let (hdr, got) = read(&client, Duration::from_secs(2)).expect("the answer at the client");
    assert_eq!((hdr.status, got[3], got[64]), (0, 0x81, 0xC1));
    assert_eq!(
        u64::from_be_bytes(got[8..16].try_into().unwrap()) as u32,
        0x77
    );
    assert!(
        read(&client, Duration::from_millis(300)).is_err(),
        "no timeout return after the answer"
    );
    assert_eq!(client.outstanding(), 0);
    r.ctx.close_file(client.fd()).unwrap();
    r.ctx.close_file(sm.fd()).unwrap();
    r.ctx.close().unwrap();
}

#[test]
fn a_local_smp_sent_without_a_timeout_still_gets_the_answer_another_file_gives() {
    // The kernel completes a local SMP at once and routes another agent's answer to the
    // requester by the TID's upper half (handle_outgoing_dr_smp, local_completions), whatever
    // the requester's timeout: a requester that sent with timeout 0 reads the answer too.
    let r = rig();
    let (sm, sm_agent, client, agent) = sm_and_client_on_qp0(&r);
    client.write(&dr_sminfo_get(agent, 0x79, 0)).unwrap();
    let (hdr, req) = read(&sm, Duration::from_secs(2)).expect("the request at the SM");
    assert_eq!((hdr.status, req[1], req[3]), (0, 0x81, 0x01));
    let mut resp = IbUserMad {
        agent_id: sm_agent,
        addr: hdr.addr,
        ..IbUserMad::default()
    }
    .to_bytes()
    .to_vec();
    let mut answer = req.clone();
    answer[3] = 0x81;
    answer[4] |= 0x80;
    answer[64] = 0xC1;
    resp.extend_from_slice(&answer);
    sm.write(&resp).unwrap();
    let (hdr, got) = read(&client, Duration::from_secs(2)).expect("the answer at the client");
    assert_eq!((hdr.status, got[3], got[64]), (0, 0x81, 0xC1));
    assert_eq!(got[8..16], req[8..16], "the TID the SM got and answered");
    assert_eq!(
        u64::from_be_bytes(got[8..16].try_into().unwrap()) as u32,
        0x79
    );
    assert!(
        read(&client, Duration::from_millis(300)).is_err(),
        "the answer only"
    );
    assert_eq!(client.outstanding(), 0);
    r.ctx.close_file(client.fd()).unwrap();
    r.ctx.close_file(sm.fd()).unwrap();
    r.ctx.close().unwrap();
}

#[test]
fn a_local_smp_nobody_answers_comes_back_as_a_timeout() {
    let r = rig();
    let (sm, _, client, c) = sm_and_client_on_qp0(&r);
    client.write(&dr_sminfo_get(c, 0x78, 100)).unwrap();
    read(&sm, Duration::from_secs(2)).expect("the request at the SM, left unanswered");
    let (h, mad) = read(&client, Duration::from_secs(2)).expect("the timeout return");
    assert_eq!(h.status, libc::ETIMEDOUT as u32);
    assert_eq!(
        u64::from_be_bytes(mad[8..16].try_into().unwrap()) as u32,
        0x78
    );
    assert!(read(&client, Duration::from_millis(200)).is_err(), "once");
    r.ctx.close_file(client.fd()).unwrap();
    r.ctx.close_file(sm.fd()).unwrap();
    r.ctx.close().unwrap();
}

#[test]
fn active_rmpp_segments_of_an_agent_without_kernel_rmpp_skip_the_duplicate_rule() {
    // ib_umad_write: a MAD of an RMPP class with the Active flag, from an agent the MAD layer
    // does not do RMPP for (!ib_mad_kernel_rmpp_agent), joins the send list without
    // is_duplicate: the user sends a transfer's segments one by one, all with its TID.
    let r = rig();
    let port = r.ctx.cas()[0].ports[0].clone();
    let f = r.ctx.open_file(&port).unwrap();
    let reg = |rmpp_version, flags| register_sa(&f, rmpp_version, flags);
    let user_rmpp = reg(1, ibumad::abi::USER_RMPP);
    let kernel_rmpp = reg(1, 0);
    let qpn1 = r
        .model
        .qps()
        .into_iter()
        .find(|q| q.st == firmware_cmds::mlx5::qpc::QpServiceType::QP1)
        .map(|q| q.qpn)
        .expect("QP1");
    // Each send stays outstanding for a while after it is posted.
    r.model
        .faults()
        .send_completion_delay(qpn1, Duration::from_secs(2));
    // A GetTableResp segment (no response timeout), RMPP DATA with `flags`.
    let segment = |agent, tid, n: u8, flags: u8| {
        let mut w = sa_request(
            agent,
            0x92,
            tid,
            200,
            [1, 1, flags, 0, 0, 0, 0, n, 0, 0, 0, 0],
        );
        w[8..12].copy_from_slice(&0u32.to_ne_bytes());
        w
    };
    let posted = port.mad.counters().posted;
    f.write(&segment(user_rmpp, 0x71, 1, 0x03))
        .expect("segment 1: Active|First");
    f.write(&segment(user_rmpp, 0x71, 2, 0x01))
        .expect("segment 2 with the same TID while segment 1 is outstanding");
    assert_eq!(f.outstanding(), 2, "both recorded");
    // A send another thread is draining for may reach the QP a moment after its write.
    let end = Instant::now() + Duration::from_secs(1);
    while port.mad.counters().posted - posted < 2 && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(port.mad.counters().posted - posted, 2, "both sent");
    // Without the Active flag the rule holds: a third response with that TID and
    // destination is a duplicate.
    match f.write(&segment(user_rmpp, 0x71, 3, 0x00)) {
        Err(e @ UmadError::Duplicate { .. }) => assert_eq!(e.errno(), libc::EINVAL),
        other => panic!("a duplicate: {other:?}"),
    }
    // So it does for an agent the MAD layer does RMPP for: its write is the whole message.
    f.write(&segment(kernel_rmpp, 0x72, 1, 0x01))
        .expect("a transfer");
    match f.write(&segment(kernel_rmpp, 0x72, 1, 0x01)) {
        Err(e @ UmadError::Duplicate { .. }) => assert_eq!(e.errno(), libc::EINVAL),
        other => panic!("a duplicate transfer: {other:?}"),
    }
    r.ctx.close_file(f.fd()).unwrap();
    r.ctx.close().unwrap();
}

#[test]
fn a_removal_ends_long_waits_before_their_deadline_whichever_thread_sees_it() {
    // Another thread runs the progress loop too (as umad_send and the fallback thread do):
    // it may be the one whose pass takes the removal, between two passes of the waiters.
    let r = rig();
    let port = r.ctx.cas()[0].ports[0].clone();
    let with_agent = r.ctx.open_file(&port).unwrap();
    perf_agent(&with_agent);
    let bare = r.ctx.open_file(&port).unwrap();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let driver = {
        let (p, stop) = (port.clone(), Arc::clone(&stop));
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                p.mad.progress();
                std::thread::yield_now();
            }
        })
    };
    let deadline = port.mad.now() + Duration::from_secs(20);
    let mut waiters = Vec::new();
    for f in [with_agent.clone(), bare.clone()] {
        let p = port.clone();
        waiters.push(std::thread::spawn(move || {
            let mut buf = vec![0u8; HDR_LEN + MAD];
            let r = f.recv_wait(&mut buf, deadline, true).map(|_| ());
            (r.map_err(|e| e.errno()), p.mad.now())
        }));
    }
    let poller = {
        let (p, f) = (port.clone(), bare.clone());
        std::thread::spawn(move || {
            (
                f.wait_readable(deadline).map_err(|e| e.errno()),
                p.mad.now(),
            )
        })
    };
    std::thread::sleep(Duration::from_millis(100));
    r.model.faults().remove();
    for w in waiters {
        let (res, at) = w.join().unwrap();
        assert_eq!(res, Err(libc::EIO));
        assert!(at < deadline, "recv_wait ran to its deadline");
    }
    let (res, at) = poller.join().unwrap();
    assert_eq!(res, Ok(true));
    assert!(at < deadline, "wait_readable ran to its deadline");
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    driver.join().unwrap();
    r.ctx.close_file(with_agent.fd()).unwrap();
    r.ctx.close_file(bare.fd()).unwrap();
    let _ = r.ctx.close();
}

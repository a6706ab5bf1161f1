//! mlx5 bring-up and teardown on the simulated ConnectX: the sequence completes, the HCA
//! reports what the device says, and a hundred bring-up/teardown cycles leave no lease,
//! mapping, firmware page or firmware object behind and cause no IOMMU fault.

use std::time::Duration;

use driver::verbs::{Hca, HcaOptions, HcaPort, PortState, WcStatus};
use driver::{DeviceBackend, DriverError};
use hca_tests::mlx5::{MAD, RECV_BUF, SimHca, lease, mad, poll_n, port, recv_wr, send_wr, to_self};

#[test]
fn bring_up_reports_firmware_caps_and_an_active_port() {
    let sim = SimHca::new();
    let hca = sim.open_strict();
    let info = hca.info();
    assert_eq!(info.family, "mlx5");
    assert_eq!(
        info.fw_version, "16.35.2000",
        "the model's default firmware"
    );
    assert_eq!(info.ports, 1);
    assert!(info.model.contains("ConnectX-5"), "{}", info.model);
    assert!(
        info.caps
            .iter()
            .any(|(k, v)| *k == "port type" && v == "InfiniBand")
    );
    let p = port(&hca, 1);
    let a = p.attrs().unwrap();
    assert_eq!(a.state, PortState::Active);
    assert_eq!(a.lid, 1, "a standalone port gets LID 1");
    assert!(a.has_smi);
    assert_ne!(p.hw_qpn(driver::verbs::SpecialQp::Smi), 0);
    assert_ne!(p.hw_qpn(driver::verbs::SpecialQp::Gsi), 0);
    assert!(sim.model.pages_held() > 0, "boot and init pages were given");
    let s = hca.stats();
    assert!(
        s.cmd.polled > 0,
        "commands before the command EQ completed by polling"
    );
    assert!(
        s.cmd.by_event > 0,
        "commands after it completed by command EQEs"
    );
    assert_eq!(s.cmd.event_fallback, 0, "no command EQE was missed");
    hca.close().unwrap();
    sim.assert_clean(&hca);
    hca.close().unwrap();
}

#[test]
fn a_hundred_bring_ups_and_teardowns_leave_nothing_behind() {
    let sim = SimHca::new();
    for round in 0..100 {
        let options = HcaOptions {
            lease_mode: if round % 2 == 0 {
                dma::LeaseMode::Strict
            } else {
                dma::LeaseMode::Pooled
            },
            ..HcaOptions::default()
        };
        let hca = sim
            .open(options)
            .unwrap_or_else(|e| panic!("round {round}: {e}"));
        assert!(sim.model.pages_held() > 0);
        hca.close().unwrap_or_else(|e| panic!("round {round}: {e}"));
        sim.assert_clean(&hca);
        drop(hca);
        assert_eq!(sim.faults(), 0, "round {round}");
    }
}

#[test]
fn firmware_that_never_finishes_booting_times_out_after_fw_pre_init() {
    let sim = SimHca::new();
    sim.model.faults().hold_initializing(true);
    let start = sim.backend.now();
    let err = sim.open(HcaOptions::default()).err().expect("no bring-up");
    let waited = sim.backend.now().saturating_sub(start);
    assert!(
        matches!(&err, DriverError::DeviceTimeout { ms: 120_000, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("pre-initializing"), "{err}");
    assert!(waited >= Duration::from_secs(120), "{waited:?}");
    assert!(waited < Duration::from_secs(121), "{waited:?}");
    assert_eq!(sim.backend.dma_mapper().live_mappings(), 0);
}

/// A CREATE whose completion never comes (the firmware took the queue and hung on the
/// answer): bring-up fails with the command's timeout, and the queue's buffer and doorbell
/// record stay mapped until the device is quiesced. The firmware reads them once more at
/// TEARDOWN_HCA; memory released before would fault in the IOMMU (strict leases).
#[test]
fn a_create_that_times_out_keeps_its_memory_until_the_quiesce() {
    use firmware_cmds::mlx5::Opcode;
    for op in [Opcode::CREATE_EQ, Opcode::CREATE_CQ, Opcode::CREATE_QP] {
        let sim = SimHca::new();
        sim.model.faults().withhold_completion(op.0);
        let err = sim
            .open(HcaOptions {
                lease_mode: dma::LeaseMode::Strict,
                ..HcaOptions::default()
            })
            .err()
            .unwrap_or_else(|| panic!("{op}: bring-up succeeded"));
        assert!(
            matches!(&err, DriverError::CommandTimeout { opcode, .. } if *opcode == op),
            "{op}: {err}"
        );
        let mapper = sim.backend.dma_mapper();
        assert_eq!(
            mapper.fault_count(),
            0,
            "{op}: the firmware read released memory: {:?}",
            sim.model.counters()
        );
        assert_eq!(sim.model.counters().dma_errors, 0, "{op}");
        assert_eq!(mapper.live_mappings(), 0, "{op}: mappings left after close");
        assert_eq!(sim.model.pages_held(), 0, "{op}");
        let r = sim.model.resources();
        assert_eq!((r.eqs, r.cqs, r.qps), (0, 0, 0), "{op}: {r:?}");
    }
}

/// A session that ends with a lost command slot (the firmware took QUERY_SPECIAL_CONTEXTS and
/// never gave its entry back): the firmware may still write that command's mailboxes, so
/// close resets the function before the same backend is brought up again (a new session's
/// IOVA allocator hands the same addresses out). A clean close does not reset.
#[test]
fn a_close_with_a_lost_command_slot_resets_the_function_and_the_reopen_works() {
    use firmware_cmds::mlx5::Opcode;
    use firmware_cmds::mlx5::ops::special_contexts::QuerySpecialContexts;
    let sim = SimHca::new();
    let resets = || sim.model.counters().function_resets;
    let hca = sim.open_strict();
    hca.close().unwrap();
    sim.assert_clean(&hca);
    assert_eq!(resets(), 0, "a clean close does not reset");

    let hca = sim.open_strict();
    sim.model
        .faults()
        .withhold_completion(Opcode::QUERY_SPECIAL_CONTEXTS.0);
    assert!(matches!(
        hca.command(&QuerySpecialContexts),
        Err(DriverError::CommandTimeout { .. })
    ));
    hca.close().unwrap();
    assert_eq!(resets(), 1, "the close reset the function");
    sim.assert_clean(&hca);

    let hca = sim.open_strict();
    hca.command(&QuerySpecialContexts)
        .expect("the reopened HCA works");
    hca.close().unwrap();
    sim.assert_clean(&hca);
    assert_eq!(resets(), 1);
}

/// The simulated function behind a backend that offers no reset.
struct NoReset(std::sync::Arc<driver::emulated::EmulatedBackend>);

impl DeviceBackend for NoReset {
    fn describe(&self) -> String {
        self.0.describe()
    }
    fn pci_id(&self) -> driver::PciId {
        self.0.pci_id()
    }
    fn region_info(&self, index: u32) -> Result<driver::RegionInfo, DriverError> {
        self.0.region_info(index)
    }
    fn map_region(&self, index: u32) -> Result<driver::Mmio, DriverError> {
        self.0.map_region(index)
    }
    fn config_read(&self, offset: u64, data: &mut [u8]) -> Result<(), DriverError> {
        self.0.config_read(offset, data)
    }
    fn config_write(&self, offset: u64, data: &[u8]) -> Result<(), DriverError> {
        self.0.config_write(offset, data)
    }
    fn irq_info(&self, index: driver::IrqIndex) -> Result<driver::IrqInfo, DriverError> {
        self.0.irq_info(index)
    }
    fn set_irqs(
        &self,
        index: driver::IrqIndex,
        start: u32,
        fds: &[&driver::EventFd],
    ) -> Result<(), DriverError> {
        self.0.set_irqs(index, start, fds)
    }
    fn disable_irqs(&self, index: driver::IrqIndex) -> Result<(), DriverError> {
        self.0.disable_irqs(index)
    }
    fn reset(&self) -> Result<bool, DriverError> {
        Ok(false)
    }
    fn needs_reset(&self) -> Option<String> {
        self.0.needs_reset()
    }
    fn mark_needs_reset(&self, reason: Option<String>) {
        self.0.mark_needs_reset(reason);
    }
    fn dma_mapper(&self) -> std::sync::Arc<dyn dma::DmaMapper> {
        self.0.dma_mapper()
    }
    fn now(&self) -> Duration {
        self.0.now()
    }
    fn wait(&self, deadline: Duration) {
        self.0.wait(deadline);
    }
}

/// The same lost slot on a function the backend cannot reset: the next bring-up on that
/// backend is refused with `NeedsReset`, which says what to do, and touches nothing.
#[test]
fn a_function_left_needing_a_reset_it_does_not_offer_is_refused_at_the_next_bring_up() {
    use driver::mlx5::Mlx5Hca;
    use firmware_cmds::mlx5::Opcode;
    use firmware_cmds::mlx5::ops::special_contexts::QuerySpecialContexts;
    let sim = SimHca::new();
    let backend: std::sync::Arc<dyn DeviceBackend> =
        std::sync::Arc::new(NoReset(sim.backend.clone()));
    let hca = Mlx5Hca::open(backend.clone(), HcaOptions::default()).unwrap();
    sim.model
        .faults()
        .withhold_completion(Opcode::QUERY_SPECIAL_CONTEXTS.0);
    assert!(hca.command(&QuerySpecialContexts).is_err());
    hca.close().unwrap();
    let a = hca.accounting();
    assert_eq!(
        (a.driver_pool.leases_out, a.firmware_pages),
        (0, 0),
        "{a:?}"
    );
    assert_eq!(sim.backend.dma_mapper().live_mappings(), 0);
    drop(hca);

    let commands = sim.model.counters().commands.values().sum::<u64>();
    let err = Mlx5Hca::open(backend.clone(), HcaOptions::default())
        .err()
        .expect("bring-up refused");
    match &err {
        DriverError::NeedsReset { reason, .. } => {
            assert!(reason.contains("never completed"), "{reason}");
        }
        other => panic!("expected NeedsReset, got {other:?}"),
    }
    let msg = err.to_string();
    assert!(msg.contains("unbind") && msg.contains("reset"), "{msg}");
    assert_eq!(
        sim.model.counters().commands.values().sum::<u64>(),
        commands,
        "no command sent to the function"
    );
    assert_eq!(sim.backend.dma_mapper().live_mappings(), 0);
    assert_eq!(sim.faults(), 0);
}

/// A page request's MANAGE_PAGES still on the page slot at close (a CAN'T GIVE whose
/// completion is withheld, not yet timed out, with requests queued behind it): the close
/// starts nothing more after `STOP_DRAIN` (the requests behind it are dropped and counted)
/// and waits for the command before TEARDOWN_HCA, as the kernel's `mlx5_pagealloc_stop`
/// flushes its page work, which waits for its command. At the command timeout the page slot
/// is lost and the device declared fatal (quiesced); the reclaim TAKEs, which go on the page
/// slot too, are then not sent: the pages are released after the quiesce, and close resets
/// the function.
#[test]
fn a_close_with_a_page_command_still_on_the_page_slot_resets_the_function() {
    use firmware_cmds::mlx5::Opcode;
    let sim = SimHca::new();
    let own = {
        let probe = sim.open_strict();
        let n = sim.model.pages_held();
        probe.close().unwrap();
        n
    };
    // No room for a single page more: the request is answered CAN'T GIVE.
    let hca = sim
        .open(HcaOptions {
            lease_mode: dma::LeaseMode::Strict,
            max_firmware_pages: own as usize,
            ..HcaOptions::default()
        })
        .unwrap();
    let p = port(&hca, 1);
    sim.model
        .faults()
        .withhold_completion(Opcode::MANAGE_PAGES.0);
    assert!(sim.model.faults().page_request(4));
    let end = p.now() + Duration::from_millis(100);
    while hca.stats().pages.cant_give == 0 && p.now() < end {
        p.events();
        p.wait(p.now() + Duration::from_micros(50));
    }
    assert_eq!(
        hca.stats().pages.cant_give,
        1,
        "CAN'T GIVE posted on the page slot"
    );
    let posted = p.now();
    // Requests queued behind it cannot start: dropped at the close, and counted.
    let requests = hca.stats().pages.requests;
    for _ in 0..3 {
        assert!(sim.model.faults().page_request(1));
    }
    p.events();
    assert_eq!(hca.stats().pages.requests, requests + 3);
    drop(p);
    sim.model.record_commands(true);
    hca.close().unwrap();
    assert!(
        sim.model.scheduler().now() >= posted + Duration::from_secs(60),
        "the close waited for the page command's timeout"
    );
    let record = sim.model.take_command_record();
    assert!(
        record.iter().all(|c| c.opcode != Opcode::MANAGE_PAGES.0),
        "nothing sent on the lost page slot: {record:x?}"
    );
    let s = hca.stats();
    assert_eq!(s.pages.timeouts, 1, "the page command timed out (fatal)");
    assert_eq!(s.pages.unserved_at_close, 3);
    assert_eq!(s.pages.cant_give, 1, "nothing started behind it");
    assert_eq!(s.pages.returned, 0);
    assert_eq!(
        s.pages.dropped_after_quiesce, s.pages.given,
        "every page released after the quiesce"
    );
    assert_eq!(sim.model.counters().function_resets, 1);
    sim.assert_clean(&hca);
}

/// A device whose send queues support real-time timestamps only (`sq_ts_format` 1) refuses
/// a QP asking for free-running ones; the driver asks for DEFAULT there, as
/// `mlx5_get_qp_default_ts` does, so QP0 and QP1 are created and MADs loop back.
#[test]
fn a_device_with_real_time_timestamps_only_opens_and_passes_mads() {
    let sim = SimHca::with_config(sim::mlx5::Mlx5Config {
        sq_ts_format: firmware_cmds::mlx5::caps::ts_format_cap::REAL_TIME,
        ..sim::mlx5::Mlx5Config::default()
    });
    let hca = sim.open_strict();
    let p = port(&hca, 1);
    let lid = p.attrs().unwrap().lid;
    let qp = driver::verbs::SpecialQp::Gsi;
    let rbuf = lease(p.as_ref(), RECV_BUF);
    p.post_recv(qp, &recv_wr(7, &rbuf)).unwrap();
    let sbuf = lease(p.as_ref(), MAD);
    sbuf.write(0, &mad(0x09, 1, 1)).unwrap();
    p.post_send(qp, &send_wr(1, &sbuf, to_self(lid, qp)))
        .unwrap();
    let wcs = poll_n(p.as_ref(), 2, Duration::from_secs(1));
    assert_eq!(wcs.len(), 2, "{wcs:?}");
    assert!(wcs.iter().all(|w| w.status == WcStatus::Success), "{wcs:?}");
    drop((p, rbuf, sbuf));
    hca.close().unwrap();
    sim.assert_clean(&hca);
}

/// Firmware that reports no ISSI at all (`supported_issi_dw0` 0) speaks ISSI 0: the kernel's
/// `mlx5_core_set_issi` carries on with 0 (`sup_issi & 1 || !sup_issi`), and so does the
/// driver, without a SET_ISSI.
#[test]
fn firmware_reporting_no_issi_is_brought_up_with_issi_0() {
    let sim = SimHca::with_config(sim::mlx5::Mlx5Config {
        supported_issi: 0,
        ..sim::mlx5::Mlx5Config::default()
    });
    let hca = sim.open_strict();
    let info = hca.info();
    assert!(
        info.caps.iter().any(|(k, v)| *k == "ISSI" && v == "0"),
        "{:?}",
        info.caps
    );
    hca.close().unwrap();
    sim.assert_clean(&hca);
}

/// A BlueField's embedded CPU function (`initializing` bit 23) names itself with
/// `embedded_cpu_function` in ENABLE_HCA, QUERY_PAGES, the startup GIVEs and DISABLE_HCA
/// (`mlx5_core_is_ecpf`); the simulated ECPF refuses those commands without the flag
/// (function 0 without it is the host PF). Its pages are held for (0, embedded CPU), a
/// run-time request for them is served, and everything comes back at close.
#[test]
fn an_embedded_cpu_function_names_itself_in_its_hca_and_page_commands() {
    let sim = SimHca::with_config(sim::mlx5::Mlx5Config {
        embedded_cpu: true,
        ..sim::mlx5::Mlx5Config::default()
    });
    let hca = sim.open_strict();
    let own = sim.model.pages_held_for(0, true);
    assert!(own > 0, "boot and init pages given for the ECPF itself");
    assert_eq!(
        sim.model.pages_held_for(0, false),
        0,
        "none for the host PF"
    );
    let p = port(&hca, 1);
    assert!(sim.model.faults().page_request(5));
    let end = p.now() + Duration::from_secs(1);
    while sim.model.pages_held_for(0, true) < own + 5 && p.now() < end {
        p.events();
        p.wait(p.now() + Duration::from_micros(50));
    }
    assert_eq!(sim.model.pages_held_for(0, true), own + 5);
    drop(p);
    hca.close().unwrap();
    assert_eq!(
        sim.model.pages_held_for(0, true),
        0,
        "reclaimed from the ECPF"
    );
    sim.assert_clean(&hca);
}

//! mlx5 bring-up and teardown on the simulated ConnectX: the sequence completes, the HCA
//! reports what the device says, and a hundred bring-up/teardown cycles leave no lease,
//! mapping, firmware page or firmware object behind and cause no IOMMU fault.

use std::time::Duration;

use driver::verbs::{Hca, HcaOptions, HcaPort, PortState};
use driver::{DeviceBackend, DriverError};
use hca_tests::mlx5::{SimHca, port};

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

//! The `hca` binary on fake sysfs trees: what a user sees for list, bind, unbind and info.

use std::fs;
use std::os::unix::fs::symlink;
use std::path::Path;
use std::process::{Command, Output};

fn hca(root: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_hca"))
        .args(args)
        .arg("--sysfs-root")
        .arg(root)
        .arg("--dev-root")
        .arg(root.join("dev"))
        .arg("--state-dir")
        .arg(root.join("state"))
        .env_remove("HCA_LOG")
        .env_remove("RUST_LOG")
        .output()
        .expect("run hca")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// An empty sysfs tree with a few drivers registered.
fn tree() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    fs::create_dir_all(root.join("bus/pci/devices")).unwrap();
    fs::create_dir_all(root.join("kernel/iommu_groups")).unwrap();
    fs::create_dir_all(root.join("dev")).unwrap();
    fs::write(root.join("bus/pci/drivers_probe"), "").unwrap();
    for d in ["vfio-pci", "mlx5_core", "e1000e"] {
        let p = root.join("bus/pci/drivers").join(d);
        fs::create_dir_all(&p).unwrap();
        fs::write(p.join("bind"), "").unwrap();
        fs::write(p.join("unbind"), "").unwrap();
    }
    dir
}

fn add(root: &Path, bdf: &str, vendor: u16, device: u16, driver: Option<&str>, group: u32) {
    let dir = root.join("bus/pci/devices").join(bdf);
    fs::create_dir_all(&dir).unwrap();
    fs::write(dir.join("vendor"), format!("0x{vendor:04x}\n")).unwrap();
    fs::write(dir.join("device"), format!("0x{device:04x}\n")).unwrap();
    fs::write(dir.join("numa_node"), "1\n").unwrap();
    fs::write(dir.join("driver_override"), "(null)\n").unwrap();
    if let Some(d) = driver {
        symlink(
            format!("../../../../bus/pci/drivers/{d}"),
            dir.join("driver"),
        )
        .unwrap();
    }
    let g = root
        .join("kernel/iommu_groups")
        .join(group.to_string())
        .join("devices");
    fs::create_dir_all(&g).unwrap();
    symlink(
        format!("../../../../kernel/iommu_groups/{group}"),
        dir.join("iommu_group"),
    )
    .unwrap();
    symlink(format!("../../../../bus/pci/devices/{bdf}"), g.join(bdf)).unwrap();
}

/// [`add`] for a ConnectX-5 PF (15b3:1017) bound to `driver` in IOMMU group `group`.
fn add_cx5(root: &Path, bdf: &str, driver: &str, group: u32) {
    add(root, bdf, 0x15b3, 0x1017, Some(driver), group);
}

#[test]
fn list_with_no_hca_says_so_and_succeeds() {
    let t = tree();
    add(t.path(), "0000:00:19.0", 0x8086, 0x15b8, Some("e1000e"), 3);
    let o = hca(t.path(), &["list"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let want = format!(
        "no Mellanox/NVIDIA HCA found (vendor 0x15b3 or 0x1867) under {}/bus/pci/devices\n",
        t.path().display()
    );
    assert_eq!(stdout(&o), want);
}

#[test]
fn list_shows_a_table() {
    let t = tree();
    add_cx5(t.path(), "0000:03:00.0", "mlx5_core", 17);
    add(t.path(), "0000:03:00.2", 0x15b3, 0x1018, None, 18);
    add(t.path(), "0000:00:19.0", 0x8086, 0x15b8, Some("e1000e"), 3);
    let o = hca(t.path(), &["list"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    let cells = |l: &str| {
        l.split("  ")
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(String::from)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        cells(lines[0]),
        [
            "ADDRESS", "ID", "FAMILY", "MODEL", "KIND", "DRIVER", "GROUP", "NUMA"
        ]
    );
    assert_eq!(
        cells(lines[1]),
        [
            "0000:03:00.0",
            "15b3:1017",
            "mlx5",
            "ConnectX-5",
            "PF",
            "mlx5_core",
            "17",
            "1"
        ]
    );
    assert_eq!(
        cells(lines[2]),
        [
            "0000:03:00.2",
            "15b3:1018",
            "mlx5",
            "ConnectX-5 VF",
            "VF",
            "(none)",
            "18",
            "1"
        ]
    );
}

#[test]
fn info_of_sim_opens_the_simulated_device() {
    let t = tree();
    let o = hca(t.path(), &["info", "sim:clock=virtual"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(
        out.contains("15b3:1017"),
        "the default simulated device is a ConnectX-5: {out}"
    );
    assert!(out.contains("BAR0"), "{out}");
}

#[test]
fn info_of_the_simulated_connectx_brings_it_up_and_shows_firmware_and_ports() {
    let t = tree();
    let o = hca(
        t.path(),
        &[
            "info",
            "sim:clock=virtual,fw=16.35.2000,ports=2,port_state=init",
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    for want in [
        "HCA (mlx5 family",
        "firmware   16.35.2000",
        "ConnectX-5 (PF)",
        "port type              InfiniBand",
        "P_Key table            128",
        "reserved lkey",
    ] {
        assert!(out.contains(want), "missing {want:?} in:\n{out}");
    }
    // Two ports, link up but no SM yet: INIT, LinkUp, LID 0.
    let ports: Vec<&str> = out
        .lines()
        .skip_while(|l| !l.starts_with("ports:"))
        .skip(2)
        .collect();
    assert_eq!(ports.len(), 2, "{out}");
    for (i, line) in ports.iter().enumerate() {
        let cols: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(cols[0], (i + 1).to_string(), "{line}");
        assert_eq!(&cols[1..4], &["INIT", "LinkUp", "0x0"], "{line}");
    }
}

#[test]
fn info_with_no_bringup_leaves_the_hca_alone() {
    let t = tree();
    let o = hca(t.path(), &["info", "--no-bringup", "sim:clock=virtual"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("mlx5 (ConnectX-5, PF)"), "{out}");
    assert!(!out.contains("HCA (mlx5 family"), "{out}");
}

#[test]
fn info_of_sim_with_a_bad_parameter_lists_the_accepted_ones() {
    let t = tree();
    let o = hca(t.path(), &["info", "sim:speed=fast"]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(err.contains("unknown parameter \"speed\""), "{err}");
    assert!(err.contains("clock=real"), "{err}");
    // Every parameter indented as the first, `model=`, is.
    assert!(err.contains("\n  model=mlx5 "), "{err}");
}

/// The device-string error points at `hca info --help` for the sim: parameters; it and the
/// other commands that take a device string list them, indented alike.
#[test]
fn help_lists_the_sim_parameters() {
    let t = tree();
    let o = hca(t.path(), &["info", "bogus"]);
    assert!(
        stderr(&o).contains("(see `hca info --help`)"),
        "{}",
        stderr(&o)
    );
    for args in [
        &["--help"][..],
        &["info", "--help"],
        &["discover", "--help"],
        &["bench", "--help"],
    ] {
        let o = hca(t.path(), args);
        assert_eq!(o.status.code(), Some(0), "{args:?}");
        let out = stdout(&o);
        for want in ["\n  model=mlx5 ", "\n  clock=real ", "\n  state=FILE "] {
            assert!(out.contains(want), "{args:?} lacks {want:?}:\n{out}");
        }
    }
}

#[test]
fn info_of_vfio_without_dev_vfio_says_to_load_the_module() {
    let t = tree();
    add_cx5(t.path(), "0000:03:00.0", "vfio-pci", 17);
    let o = hca(t.path(), &["info", "vfio:03:00.0"]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(err.contains("/dev/vfio/vfio does not exist"), "{err}");
    assert!(err.contains("modprobe vfio-pci"), "{err}");
}

#[test]
fn info_of_an_unbound_function_says_to_bind_it() {
    let t = tree();
    add_cx5(t.path(), "0000:03:00.0", "mlx5_core", 17);
    fs::create_dir_all(t.path().join("dev/vfio")).unwrap();
    fs::write(t.path().join("dev/vfio/vfio"), "").unwrap();
    let o = hca(t.path(), &["info", "vfio:0000:03:00.0"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("run `hca bind 0000:03:00.0` as root"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn bad_device_strings_show_the_accepted_forms() {
    let t = tree();
    let o = hca(t.path(), &["info", "0000:03:00.0"]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(err.contains("did you mean `vfio:0000:03:00.0`?"), "{err}");
    assert!(
        err.contains("accepted forms:") && err.contains("sim:KEY=VALUE,..."),
        "{err}"
    );
    let o = hca(t.path(), &["bind", "3:00.0"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("the bus `3` must be 2 hex digits"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn bind_writes_sysfs_and_reports_a_probe_that_did_not_take() {
    // A fake tree has no kernel behind it: the writes land in files, the driver link stays.
    let t = tree();
    add_cx5(t.path(), "0000:03:00.0", "mlx5_core", 17);
    let o = hca(t.path(), &["bind", "03:00.0"]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(
        err.contains("0000:03:00.0 should now be bound to vfio-pci but its driver is mlx5_core"),
        "{err}"
    );
    let probe = fs::read_to_string(t.path().join("bus/pci/drivers_probe")).unwrap();
    assert_eq!(probe, "0000:03:00.0");
    // The roll-back clears the override (a newline; the plain file keeps the rest of the
    // earlier, longer write); the link still names mlx5_core, so nothing is rebound.
    let ovr = t
        .path()
        .join("bus/pci/devices/0000:03:00.0/driver_override");
    assert!(fs::read_to_string(ovr).unwrap().starts_with('\n'));
    let bind = fs::read_to_string(t.path().join("bus/pci/drivers/mlx5_core/bind")).unwrap();
    assert_eq!(bind, "");
    assert!(!t.path().join("state/0000:03:00.0.driver").exists());
}

#[test]
fn bind_refuses_a_non_hca_or_a_busy_hca_unless_forced() {
    let t = tree();
    add(t.path(), "0000:00:19.0", 0x8086, 0x15b8, Some("e1000e"), 3);
    let nic = t.path().join("bus/pci/devices/0000:00:19.0/net/eno1");
    fs::create_dir_all(&nic).unwrap();
    fs::write(nic.join("flags"), "0x1003\n").unwrap();
    fs::write(nic.join("operstate"), "up\n").unwrap();
    let o = hca(t.path(), &["bind", "00:19.0"]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(
        err.contains("refusing to take 0000:00:19.0 off its driver"),
        "{err}"
    );
    assert!(
        err.contains("not an HCA this driver knows (8086:15b8"),
        "{err}"
    );
    assert!(err.contains("network interface eno1 is up"), "{err}");
    assert!(err.contains("--force"), "{err}");
    let override_of = |bdf: &str| {
        fs::read_to_string(
            t.path()
                .join("bus/pci/devices")
                .join(bdf)
                .join("driver_override"),
        )
        .unwrap()
    };
    assert_eq!(override_of("0000:00:19.0"), "(null)\n");
    assert_eq!(
        fs::read_to_string(t.path().join("bus/pci/drivers_probe")).unwrap(),
        ""
    );

    add_cx5(t.path(), "0000:03:00.0", "mlx5_core", 17);
    fs::create_dir_all(
        t.path()
            .join("bus/pci/devices/0000:03:00.0/infiniband/mlx5_0"),
    )
    .unwrap();
    let o = hca(t.path(), &["bind", "03:00.0"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("RDMA device mlx5_0"), "{}", stderr(&o));
    assert_eq!(override_of("0000:03:00.0"), "(null)\n");
    // --force goes ahead (the fake tree has no kernel, so the probe does not take).
    let o = hca(t.path(), &["bind", "--force", "03:00.0"]);
    assert!(!stderr(&o).contains("refusing"), "{}", stderr(&o));
    assert_eq!(
        fs::read_to_string(t.path().join("bus/pci/drivers_probe")).unwrap(),
        "0000:03:00.0"
    );
}

#[test]
fn bind_of_a_bound_function_reports_its_group_and_blockers() {
    let t = tree();
    add_cx5(t.path(), "0000:03:00.0", "vfio-pci", 17);
    add_cx5(t.path(), "0000:03:00.1", "mlx5_core", 17);
    let o = hca(t.path(), &["bind", "0000:03:00.0"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(
        out.contains("0000:03:00.0 is already bound to vfio-pci (IOMMU group 17: /dev/vfio/17)"),
        "{out}"
    );
    assert!(
        out.contains("also holds 0000:03:00.1 (driver mlx5_core)"),
        "{out}"
    );
}

#[test]
fn bind_that_cannot_list_the_group_warns_and_succeeds() {
    let t = tree();
    add_cx5(t.path(), "0000:03:00.0", "vfio-pci", 17);
    fs::remove_dir_all(t.path().join("kernel/iommu_groups/17/devices")).unwrap();
    let o = hca(t.path(), &["bind", "0000:03:00.0"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("0000:03:00.0 is already bound to vfio-pci"),
        "{}",
        stdout(&o)
    );
    let err = stderr(&o);
    assert!(
        err.contains("warning: cannot list the other devices of IOMMU group 17"),
        "{err}"
    );
}

#[test]
fn group_notes_suggest_a_bind_that_will_not_be_refused() {
    let t = tree();
    add_cx5(t.path(), "0000:03:00.0", "vfio-pci", 17);
    add_cx5(t.path(), "0000:03:00.1", "mlx5_core", 17);
    add(t.path(), "0000:00:19.0", 0x8086, 0x15b8, Some("e1000e"), 17);
    let o = hca(t.path(), &["bind", "0000:03:00.0"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    // An HCA with nothing up: a plain bind takes it.
    assert!(
        out.contains("also holds 0000:03:00.1 (driver mlx5_core); bind it too before opening 0000:03:00.0: `hca bind 0000:03:00.1`"),
        "{out}"
    );
    // Not an HCA: `hca bind` would refuse it, so the note says what does work.
    let unbind = t.path().join("bus/pci/devices/0000:00:19.0/driver/unbind");
    let want = format!(
        "also holds 0000:00:19.0 (driver e1000e); `hca bind 0000:00:19.0` would refuse it (it \
         is not an HCA this driver knows (8086:15b8, driver e1000e)): take it off its driver \
         (`echo 0000:00:19.0 > {}`) or, if you mean it, `hca bind --force 0000:00:19.0`",
        unbind.display()
    );
    assert!(out.contains(&want), "{out}");
    assert!(!out.contains("`hca bind 0000:00:19.0`;"), "{out}");
}

#[test]
fn unbind_of_a_function_not_on_vfio_does_nothing() {
    let t = tree();
    add_cx5(t.path(), "0000:03:00.0", "mlx5_core", 17);
    let o = hca(t.path(), &["unbind", "0000:03:00.0"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("is not bound to vfio-pci (driver: mlx5_core); nothing to do"),
        "{}",
        stdout(&o)
    );
    assert_eq!(
        fs::read_to_string(t.path().join("bus/pci/drivers_probe")).unwrap(),
        ""
    );
}

#[test]
fn unbind_checks_the_driver_name_before_writing() {
    let t = tree();
    add_cx5(t.path(), "0000:03:00.0", "vfio-pci", 17);
    let outside = t.path().join("outside");
    fs::create_dir_all(&outside).unwrap();
    fs::write(outside.join("bind"), "").unwrap();
    let outside = outside.to_str().unwrap().to_string();
    for (to, says) in [
        ("mlx5_cor", "driver mlx5_cor is not loaded"),
        ("", "is not a driver name: it is empty"),
        (outside.as_str(), "is not a driver name: it contains `/`"),
    ] {
        let o = hca(t.path(), &["unbind", "0000:03:00.0", "--to", to]);
        assert_eq!(o.status.code(), Some(1), "--to {to:?}");
        assert!(stderr(&o).contains(says), "--to {to:?}: {}", stderr(&o));
    }
    // The same for a name read back from the bind record.
    fs::create_dir_all(t.path().join("state")).unwrap();
    fs::write(t.path().join("state/0000:03:00.0.driver"), "mlx4_core\n").unwrap();
    let o = hca(t.path(), &["unbind", "0000:03:00.0"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("modprobe mlx4_core"), "{}", stderr(&o));
    let dev = t.path().join("bus/pci/devices/0000:03:00.0");
    assert_eq!(
        fs::read_to_string(dev.join("driver_override")).unwrap(),
        "(null)\n"
    );
    assert_eq!(
        fs::read_to_string(t.path().join("outside/bind")).unwrap(),
        ""
    );
    assert_eq!(
        fs::read_to_string(t.path().join("bus/pci/drivers/vfio-pci/unbind")).unwrap(),
        ""
    );
}

#[test]
fn unbind_writes_the_recorded_override_back() {
    let t = tree();
    add_cx5(t.path(), "0000:03:00.0", "vfio-pci", 17);
    fs::create_dir_all(t.path().join("state")).unwrap();
    fs::write(
        t.path().join("state/0000:03:00.0.driver"),
        "driver=mlx5_core\noverride=none\n",
    )
    .unwrap();
    let o = hca(t.path(), &["unbind", "0000:03:00.0"]);
    // The tree has no kernel: the writes land in the files and the link stays on vfio-pci.
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    let dev = t.path().join("bus/pci/devices/0000:03:00.0");
    // `none` would refuse the bind, so it is cleared for it and written back after.
    let ovr = fs::read_to_string(dev.join("driver_override")).unwrap();
    assert!(ovr.starts_with("none"), "{ovr:?}");
    assert_eq!(
        fs::read_to_string(t.path().join("bus/pci/drivers/mlx5_core/bind")).unwrap(),
        "0000:03:00.0"
    );
}

#[test]
fn unbind_finishes_a_function_an_earlier_unbind_left_without_a_driver() {
    // An earlier unbind took 0000:03:00.0 off vfio-pci, then mlx5_core did not take it.
    let t = tree();
    add(t.path(), "0000:03:00.0", 0x15b3, 0x1017, None, 17);
    let bind_file = t.path().join("bus/pci/drivers/mlx5_core/bind");
    let cmd = format!("echo 0000:03:00.0 > {}", bind_file.display());
    // Without a record or --to, a function without a driver is not ours to touch.
    let o = hca(t.path(), &["unbind", "0000:03:00.0"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("nothing to do"), "{}", stdout(&o));
    assert_eq!(fs::read_to_string(&bind_file).unwrap(), "");
    // With the record, or --to, the bind is written again. The tree has no kernel, so the
    // function stays without a driver, and the error says how to finish.
    fs::create_dir_all(t.path().join("state")).unwrap();
    let record = t.path().join("state/0000:03:00.0.driver");
    fs::write(&record, "driver=mlx5_core\n").unwrap();
    for (args, recorded) in [
        (&["unbind", "0000:03:00.0"][..], true),
        (&["unbind", "0000:03:00.0", "--to", "mlx5_core"][..], false),
    ] {
        if !recorded {
            fs::remove_file(&record).unwrap();
        }
        fs::write(&bind_file, "").unwrap();
        let o = hca(t.path(), args);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {}", stdout(&o));
        assert_eq!(fs::read_to_string(&bind_file).unwrap(), "0000:03:00.0");
        let err = stderr(&o);
        assert!(
            err.contains("giving 0000:03:00.0 back to mlx5_core failed"),
            "{err}"
        );
        assert!(err.contains(&format!("run as root:\n  {cmd}\n")), "{err}");
        // A record stays for the next try.
        assert_eq!(record.exists(), recorded);
    }
}

#[test]
fn unbind_from_vfio_says_first_that_it_waits_for_a_holder_of_the_group() {
    let t = tree();
    add_cx5(t.path(), "0000:03:00.0", "vfio-pci", 17);
    add_cx5(t.path(), "0000:04:00.0", "mlx5_core", 18);
    let o = hca(t.path(), &["unbind", "0000:03:00.0", "--leave-unbound"]);
    let node = t.path().join("dev/vfio/17");
    let note = format!(
        "if a program holds {}, unbind waits for it to close it (vfio-pci has asked it to \
         through its REQ interrupt)",
        node.display()
    );
    assert!(stderr(&o).contains(&note), "{}", stderr(&o));
    // Nothing to unbind, nothing to wait for.
    let o = hca(t.path(), &["unbind", "0000:04:00.0"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!stderr(&o).contains("waits"), "{}", stderr(&o));
}

/// Run `hca args` with standard output (and with `both`, standard error too) going to a
/// socket whose reader is already gone, as `hca ... | true` ends up.
fn hca_to_a_closed_reader(args: &[&str], both: bool) -> Output {
    let (ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
    drop(ours);
    let fd = std::os::fd::OwnedFd::from(theirs);
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_hca"));
    cmd.args(args)
        .env_remove("HCA_LOG")
        .env_remove("RUST_LOG")
        .stdout(fd.try_clone().unwrap());
    if both {
        cmd.stderr(fd);
    } else {
        cmd.stderr(std::process::Stdio::piped());
    }
    cmd.output().expect("run hca")
}

#[test]
fn a_reader_that_goes_away_ends_hca_with_sigpipe_not_a_panic() {
    use std::os::unix::process::ExitStatusExt as _;
    for (args, both) in [
        (&["info", "sim"][..], false),
        (&["decode", "status", "0x03"][..], false),
        (&["decode", "cqe", "00"][..], true),
    ] {
        let o = hca_to_a_closed_reader(args, both);
        assert_eq!(o.status.signal(), Some(13), "{args:?}: {:?}", o.status);
        assert!(!stderr(&o).contains("panicked"), "{args:?}: {}", stderr(&o));
    }
}

#[test]
fn log_lines_have_no_colour_codes_when_stderr_is_not_a_terminal() {
    let t = tree();
    fs::create_dir_all(t.path().join("bus/pci/devices/not-a-bdf")).unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_hca"))
        .args(["list", "--sysfs-root"])
        .arg(t.path())
        .env("HCA_LOG", "debug")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(err.contains("skipping a sysfs entry"), "{err}");
    assert!(!err.contains('\x1b'), "{err:?}");
}

#[test]
fn help_teaches_with_examples() {
    let t = tree();
    let o = hca(t.path(), &["--help"]);
    assert!(o.status.success());
    let out = stdout(&o);
    for want in [
        "Examples:",
        "sudo hca bind 0000:03:00.0",
        "hca info sim",
        "HCA_LOG",
    ] {
        assert!(out.contains(want), "missing {want:?} in:\n{out}");
    }
    let o = hca(t.path(), &["bind", "--help"]);
    assert!(stdout(&o).contains("driver_override"), "{}", stdout(&o));
}

fn hca_stdin(args: &[&str], input: &str) -> Output {
    use std::io::Write as _;
    let mut child = Command::new(env!("CARGO_BIN_EXE_hca"))
        .args(args)
        .env_remove("HCA_LOG")
        .env_remove("RUST_LOG")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run hca");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

/// A REQ_ERR CQE of QP 0x48, WQE 3, syndrome 0x13 (REMOTE_ACCESS_ERR), vendor syndrome 0x91,
/// as the kernel's print_hex_dump would log it.
const ERR_CQE_DUMP: &str = "\
00000000: 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00
00000010: 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00
00000020: 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00
00000030: 00 00 00 00 00 00 91 13 0a 00 00 48 00 03 00 d0
";

#[test]
fn decode_names_an_error_cqe_and_its_wc_status() {
    let o = hca_stdin(&["decode", "cqe"], ERR_CQE_DUMP);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    for want in [
        "REQ_ERR",
        "qpn 0x48",
        "wqe_counter 3",
        "REMOTE_ACCESS_ERR",
        "IB_WC_REM_ACCESS_ERR (10)",
        "vendor_err 0x91",
    ] {
        assert!(out.contains(want), "missing {want:?} in:\n{out}");
    }
}

/// [`ERR_CQE_DUMP`] as dmesg shows it (a timestamp on each line), as `xxd` writes it (words
/// and an ASCII column) and as `hexdump -C` writes it (offsets without colons, `*` for the
/// repeated zero lines, `|ascii|`).
const ERR_CQE_LOGS: [&str; 3] = [
    "\
[ 1234.567891] 00000000: 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00
[ 1234.567892] 00000010: 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00
[ 1234.567893] 00000020: 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00
[ 1234.567894] 00000030: 00 00 00 00 00 00 91 13 0a 00 00 48 00 03 00 d0
",
    "\
00000000: 0000 0000 0000 0000 0000 0000 0000 0000  ................
00000010: 0000 0000 0000 0000 0000 0000 0000 0000  ................
00000020: 0000 0000 0000 0000 0000 0000 0000 0000  ................
00000030: 0000 0000 0000 9113 0a00 0048 0003 00d0  ...........H....
",
    "\
00000000  00 00 00 00 00 00 00 00  00 00 00 00 00 00 00 00  |................|
*
00000030  00 00 00 00 00 00 91 13  0a 00 00 48 00 03 00 d0  |...........H....|
00000040
",
];

#[test]
fn decode_reads_dmesg_xxd_and_hexdump_c_dumps_as_the_plain_dump() {
    let plain = hca_stdin(&["decode", "cqe"], ERR_CQE_DUMP);
    assert_eq!(plain.status.code(), Some(0), "{}", stderr(&plain));
    for log in ERR_CQE_LOGS {
        let o = hca_stdin(&["decode", "cqe"], log);
        assert_eq!(o.status.code(), Some(0), "{log}\n{}", stderr(&o));
        assert_eq!(stdout(&o), stdout(&plain), "{log}");
    }
}

#[test]
fn decode_status_refuses_three_numbers_and_a_number_past_64_bits() {
    let t = tree();
    let o = hca(t.path(), &["decode", "status", "0x03", "0xab1234", "0x1"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("status takes 1 or 2 numbers"),
        "{}",
        stderr(&o)
    );
    let o = hca(t.path(), &["decode", "status", "0xffffffffffffffffffff"]);
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    assert!(
        stderr(&o).contains("status 0xffffffffffffffffffff is too large"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn decode_of_a_short_or_bad_dump_says_what_is_wrong() {
    let o = hca_stdin(&["decode", "cqe"], "00 01 02");
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("64 bytes"), "{}", stderr(&o));
    assert!(stderr(&o).contains("has 3 bytes"), "{}", stderr(&o));
    let t = tree();
    let o = hca(t.path(), &["decode", "eqe", "00", "0g"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("bad hex `0g`"), "{}", stderr(&o));
    let o = hca_stdin(&["decode", "status"], "\n");
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("no bytes to decode"), "{}", stderr(&o));
}

#[test]
fn decode_status_names_the_status_and_help_has_examples() {
    let t = tree();
    let o = hca(t.path(), &["decode", "status", "0x03", "0x1a2b3c4d"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains("BAD_PARAM_ERR"), "{}", stdout(&o));
    assert!(stdout(&o).contains("0x1a2b3c4d"), "{}", stdout(&o));
    let o = hca(t.path(), &["decode", "--help"]);
    let out = stdout(&o);
    for want in [
        "Examples:",
        "hca decode cqe",
        "hca decode status",
        "standard input",
    ] {
        assert!(out.contains(want), "missing {want:?} in:\n{out}");
    }
}

#[test]
fn sim_gen_writes_a_topology_the_parser_reads_back() {
    let t = tree();
    let file = t.path().join("ft.topo");
    let o = hca(
        t.path(),
        &[
            "sim",
            "gen",
            "fat-tree:leaves=4,hosts=3,spines=2",
            "-o",
            file.to_str().unwrap(),
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let fabric = sim::fabric::Fabric::parse_file(&file).expect("parses");
    // 4 leaves x 3 hosts = 12 hosts, 4 leaves, 2 spines; 12 host cables + 4 x 2 uplinks.
    assert_eq!(fabric.node_count(), 18);
    assert_eq!(fabric.link_count(), 20);
    assert!(stderr(&o).contains("18 nodes, 20 links"), "{}", stderr(&o));
}

#[test]
fn sim_gen_with_a_bad_spec_says_what_is_missing() {
    let t = tree();
    let o = hca(t.path(), &["sim", "gen", "fat-tree:leaves=2"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("missing parameter `hosts`"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn sim_serve_on_a_socket_path_it_cannot_bind_gives_the_server_hint() {
    let t = tree();
    let topo = t.path().join("net.topo");
    let o = hca(
        t.path(),
        &[
            "sim",
            "gen",
            "fat-tree:leaves=2,hosts=1,spines=1",
            "-o",
            topo.to_str().unwrap(),
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let o = hca(
        t.path(),
        &[
            "sim",
            "serve",
            "--topology",
            topo.to_str().unwrap(),
            "--socket",
            "/nonexistent/dir/x.sock",
        ],
    );
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let err = stderr(&o);
    // The first step that needs the directory fails: the lock file beside the socket
    // (servers starting on one path take turns), before the bind.
    assert!(
        err.contains("/nonexistent/dir/x.sock: opening the socket's lock file"),
        "{err}"
    );
    // The server itself: not the client's "is `hca sim serve` running" hint.
    assert!(!err.contains("running on this socket"), "{err}");
    assert!(
        err.contains("(does the socket's directory exist?)"),
        "{err}"
    );
}

/// A state file that cannot be written, and a fabric no client could attach to, are refused
/// when the server starts, not found out at its stop (the state then lost) or by every client.
#[test]
fn sim_serve_refuses_an_unwritable_state_or_a_fabric_without_a_ca_at_start() {
    let t = tree();
    let topo = t.path().join("net.topo");
    let o = hca(
        t.path(),
        &["sim", "gen", "switch:hosts=1", "-o", topo.to_str().unwrap()],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let switch_only = t.path().join("switch.topo");
    std::fs::write(
        &switch_only,
        "switchguid=0x200000(200000)\nSwitch\t4 \"sw\"\t\t# \"sw\" base port 0 lid 0 lmc 0\n",
    )
    .unwrap();
    let empty = t.path().join("empty.topo");
    std::fs::write(&empty, "# nothing\n").unwrap();
    let socket = t.path().join("fabric.sock");
    let state = t.path().join("net.state");
    let cases = [
        (
            &topo,
            "/nonexistent/dir/st",
            "cannot save the fabric's state to /nonexistent/dir/st",
        ),
        (
            &switch_only,
            state.to_str().unwrap(),
            "no CA among its 1 nodes",
        ),
        (&empty, state.to_str().unwrap(), "the file has no nodes"),
    ];
    for (topology, st, says) in cases {
        let mut child = Command::new(env!("CARGO_BIN_EXE_hca"))
            .args(["sim", "serve", "--topology"])
            .arg(topology)
            .arg("--socket")
            .arg(&socket)
            .args(["--state", st])
            .env_remove("HCA_LOG")
            .env_remove("RUST_LOG")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("run hca");
        let status = wait_bounded(&mut child, "hca sim serve");
        let mut err = String::new();
        std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
        assert_eq!(status.code(), Some(1), "{err}");
        assert!(err.contains(says), "{says}: {err}");
        assert!(!socket.exists(), "{says}: the socket was left");
        assert!(!state.exists(), "{says}: a state was saved");
    }
}

/// `hca run ARGS`: the global options go first, everything after `run` is the program's.
fn hca_run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_hca"))
        .args(["--sysfs-root", "/nonexistent", "run"])
        .args(args)
        .env_remove("HCA_LOG")
        .env_remove("RUST_LOG")
        .output()
        .expect("run hca")
}

/// `hca run` with a shell that prints what the program was given.
fn run_env(args: &[&str]) -> Output {
    let mut a: Vec<&str> = Vec::new();
    a.extend_from_slice(args);
    a.extend_from_slice(&[
        "--",
        "sh",
        "-c",
        "echo LD_LIBRARY_PATH=$LD_LIBRARY_PATH; echo LD_PRELOAD=$LD_PRELOAD; \
         echo HCA_DEVICE=$HCA_DEVICE; \
         readlink -f \"${LD_LIBRARY_PATH%%:*}/libibumad.so.3\"; exit 7",
    ]);
    hca_run(&a)
}

#[test]
fn run_puts_the_library_first_and_sets_the_device() {
    let o = run_env(&["--device", "sim:ports=2"]);
    assert_eq!(
        o.status.code(),
        Some(7),
        "the program's status: {}",
        stderr(&o)
    );
    let out = stdout(&o);
    assert!(out.contains("HCA_DEVICE=sim:ports=2\n"), "{out}");
    assert!(out.contains("LD_PRELOAD=\n"), "{out}");
    let target = out.lines().nth(3).unwrap_or_default();
    assert!(
        target.ends_with("/libibumad.so"),
        "libibumad.so.3 in the first LD_LIBRARY_PATH entry is the built library: {out}"
    );
    let o = run_env(&["--preload"]);
    let out = stdout(&o);
    assert!(
        out.lines()
            .any(|l| l.starts_with("LD_PRELOAD=/") && l.ends_with("/libibumad.so")),
        "{out}"
    );
}

#[test]
fn run_says_when_the_library_or_the_program_is_missing() {
    let o = hca_run(&["--lib", "/nonexistent/libibumad.so", "--", "true"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("cargo build -p umad"), "{}", stderr(&o));
    let o = hca_run(&["--", "/nonexistent/program"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("cannot run /nonexistent/program"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn run_ibstat_shows_the_simulated_ca() {
    let present = std::path::Path::new("/usr/sbin/ibstat").exists();
    if !present {
        assert!(
            std::env::var_os("CI").is_none(),
            "ibstat is missing: install the Debian package infiniband-diags"
        );
        eprintln!("skipped: ibstat is missing (install infiniband-diags)");
        return;
    }
    let o = hca_run(&[
        "--device",
        "sim:node_guid=0x0002c90300abcd00",
        "--",
        "/usr/sbin/ibstat",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("CA 'mlx5_0'"), "{out}");
    assert!(out.contains("Node GUID: 0x0002c90300abcd00"), "{out}");
    assert!(out.contains("Port GUID: 0x0002c90300abcd01"), "{out}");
    assert!(out.contains("State: Active"), "{out}");
    assert!(out.contains("Link layer: InfiniBand"), "{out}");
}

/// Waits up to 20 s for `child` to exit; kills it and panics otherwise.
fn wait_bounded(child: &mut std::process::Child, what: &str) -> std::process::ExitStatus {
    let start = std::time::Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if start.elapsed() > std::time::Duration::from_secs(20) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} did not exit within 20 s");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

#[test]
fn sim_serve_whose_log_reader_went_away_still_stops_cleanly_and_saves_its_state() {
    sim_serve_stops_cleanly_on(libc::SIGTERM);
}

/// SIGHUP (the terminal the server runs in closed) stops it as SIGTERM does.
#[test]
fn sim_serve_stops_cleanly_on_sighup() {
    sim_serve_stops_cleanly_on(libc::SIGHUP);
}

/// A served fabric whose log's reader goes away, then stopped by `sig`: it exits 0, its
/// state saved and its socket removed.
fn sim_serve_stops_cleanly_on(sig: i32) {
    use std::io::BufRead as _;
    use std::os::unix::process::ExitStatusExt as _;
    let t = tree();
    let topo = t.path().join("net.topo");
    let o = hca(
        t.path(),
        &[
            "sim",
            "gen",
            "fat-tree:leaves=2,hosts=1,spines=1",
            "-o",
            topo.to_str().unwrap(),
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let socket = t.path().join("fabric.sock");
    let state = t.path().join("fabric.state");
    let mut child = Command::new(env!("CARGO_BIN_EXE_hca"))
        .args(["sim", "serve", "--topology"])
        .arg(&topo)
        .arg("--socket")
        .arg(&socket)
        .arg("--state")
        .arg(&state)
        // Debug, so that a connection closed before attaching is logged by the server's
        // connection thread, and its stop by the main thread.
        .env("HCA_LOG", "debug")
        .env_remove("RUST_LOG")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run hca");
    let mut err = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    while !line.contains("serving ") {
        line.clear();
        let n = err.read_line(&mut line).unwrap();
        assert!(n > 0, "hca sim serve ended before serving");
    }
    // The reader of the server's log goes away, as `hca sim serve 2>&1 | head` ends up.
    drop(err);
    // A log line from a connection thread: a client that connects and leaves at once.
    drop(std::os::unix::net::UnixStream::connect(&socket).unwrap());
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert!(
        child.try_wait().unwrap().is_none(),
        "hca sim serve died of a log line to a closed pipe"
    );
    // SAFETY: kill() with our own child's pid; the child is not yet waited for.
    let rc = unsafe { libc::kill(i32::try_from(child.id()).unwrap(), sig) };
    assert_eq!(rc, 0);
    let status = wait_bounded(&mut child, "hca sim serve");
    assert_eq!(
        status.code(),
        Some(0),
        "{status:?} (signal {:?})",
        status.signal()
    );
    assert!(state.is_file(), "no state saved at {}", state.display());
    assert!(!socket.exists(), "the socket was left behind");
}

/// Runs `hca args` with its address space bounded to 1 GiB and `stdin`, so that a read
/// without a bound fails (allocation failure) instead of taking the machine's memory.
fn hca_memory_bounded(args: &[&std::ffi::OsStr], stdin: std::process::Stdio) -> Output {
    Command::new("sh")
        .arg("-c")
        .arg("ulimit -v 1048576 && exec \"$0\" \"$@\"")
        .arg(env!("CARGO_BIN_EXE_hca"))
        .args(args)
        .env_remove("HCA_LOG")
        .env_remove("RUST_LOG")
        .stdin(stdin)
        .output()
        .expect("run hca")
}

#[test]
fn decode_of_an_endless_standard_input_is_refused_with_the_bound() {
    let zero = fs::File::open("/dev/zero").unwrap();
    let o = hca_memory_bounded(&["decode".as_ref(), "cqe".as_ref()], zero.into());
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    let err = stderr(&o);
    assert!(
        err.contains("standard input is larger than 65536 bytes"),
        "{err}"
    );
}

#[test]
fn unbind_with_a_device_as_bind_record_refuses_the_record_and_goes_on() {
    let t = tree();
    add_cx5(t.path(), "0000:03:00.0", "mlx5_core", 17);
    fs::create_dir_all(t.path().join("state")).unwrap();
    symlink("/dev/zero", t.path().join("state/0000:03:00.0.driver")).unwrap();
    let o = hca_memory_bounded(
        &[
            "unbind".as_ref(),
            "0000:03:00.0".as_ref(),
            "--sysfs-root".as_ref(),
            t.path().as_os_str(),
            "--state-dir".as_ref(),
            t.path().join("state").as_os_str(),
        ],
        std::process::Stdio::null(),
    );
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    let err = stderr(&o);
    assert!(
        err.contains("cannot read the bind record of 0000:03:00.0")
            && err.contains("it is a character device, not a regular file"),
        "{err}"
    );
    assert!(stdout(&o).contains("nothing to do"), "{}", stdout(&o));
}

/// Runs `hca args` with standard output (or, with `stderr_full`, standard error) to
/// `/dev/full`, where every write fails with ENOSPC.
fn hca_to_dev_full(root: &Path, args: &[&str], stderr_full: bool) -> Output {
    let full = fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_hca"));
    cmd.args(args)
        .arg("--sysfs-root")
        .arg(root)
        .env_remove("HCA_LOG")
        .env_remove("RUST_LOG")
        .stdin(std::process::Stdio::null());
    if stderr_full {
        cmd.stderr(full).stdout(std::process::Stdio::piped());
    } else {
        cmd.stdout(full).stderr(std::process::Stdio::piped());
    }
    cmd.output().expect("run hca")
}

/// A failed write to standard output (a full disk) is an error of the command (exit 1, says
/// so), not a panic (exit 101); a failed write to standard error is not a panic either.
#[test]
fn a_full_standard_output_or_error_is_an_error_not_a_panic() {
    let t = tree();
    add_cx5(t.path(), "0000:03:00.0", "mlx5_core", 17);
    for args in [
        &["info", "sim"][..],
        &["info", "sim", "--no-bringup"],
        &["list"],
        &["decode", "status", "0x3"],
        &["decode", "cqe", ERR_CQE_DUMP],
        &[
            "bench",
            "--device",
            "sim:clock=virtual",
            "--path",
            "0",
            "--count",
            "1",
        ],
    ] {
        let o = hca_to_dev_full(t.path(), args, false);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert!(
            err.contains("writing to standard output"),
            "{args:?}: {err}"
        );
    }
    let o = hca_to_dev_full(t.path(), &["discover", "--device", "foo"], true);
    assert_eq!(o.status.code(), Some(1));
}

//! The library through its C ABI only: `tests/c/client.c`, compiled with gcc against
//! Debian's `<infiniband/umad.h>` and linked to the built `libibumad.so.3`, runs one contract
//! per mode on the embedded simulator and prints what it saw. Expected values are the
//! kernel's and libibumad's (errno numbers, header fields), and the simulator's
//! configuration given in `HCA_DEVICE`. Where libibumad's behaviour is plain C (the string
//! tables, the header helpers), the same program linked to Debian's library is the oracle.

mod common;

use std::path::PathBuf;

use common::{Link, value, values};

const CLIENT: &str = include_str!("c/client.c");

fn client(link: Link) -> Option<(PathBuf, PathBuf)> {
    common::c_toolchain()?;
    let dir = common::scratch("client");
    let prog = common::compile(&dir, "client", CLIENT, link);
    Some((dir, prog))
}

/// Run `mode` of the client linked to our library on `device`; its key=value lines.
fn run(mode: &str, device: &str) -> Option<Vec<(String, String)>> {
    let (dir, prog) = client(Link::Ours)?;
    let out = common::run(&prog, &[mode], device);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "client {mode} failed ({:?}):\n{}\n{stderr}",
        out.status,
        String::from_utf8_lossy(&out.stdout)
    );
    std::fs::remove_dir_all(dir).unwrap();
    Some(values(&out))
}

fn check(v: &[(String, String)], expected: &[(&str, &str)]) {
    for (k, want) in expected {
        assert_eq!(value(v, k), *want, "{k}: {v:?}");
    }
}

#[test]
fn ca_and_port_are_filled_as_libibumad_fills_them_from_sysfs() {
    let Some(v) = run(
        "enum",
        "sim:node_guid=0x0002c90300001000,fw=20.40.1000,device_id=0x101b,ports=2",
    ) else {
        return;
    };
    check(
        &v,
        &[
            ("cas", "1"),
            ("ca0", "mlx5_0"),
            ("get_ca", "0"),
            ("ca_name", "mlx5_0"),
            ("node_type", "1"),
            ("numports", "2"),
            ("fw_ver", "20.40.1000"),
            // mlx5's hca_type: "MT" and the PCI device ID in decimal (0x101b = 4123).
            ("ca_type", "MT4123"),
            ("node_guid", "0002c90300001000"),
            ("system_guid", "0002c90300001000"),
            ("port0", "none"),
            ("port1.portnum", "1"),
            ("port2.portnum", "2"),
            // A lone simulated HCA comes up ACTIVE with LIDs 1, 2 and SM LID 1.
            ("port1.lid", "1"),
            ("port2.lid", "2"),
            ("port1.sm_lid", "1"),
            ("port1.lmc", "0"),
            ("port1.state", "4"),
            ("port1.phys_state", "5"),
            // ibsim's default link, 4X SDR: the kernel's rate_show says "10 Gb/sec (4X SDR)".
            ("port1.rate", "10"),
            ("port1.gid_prefix", "fe80000000000000"),
            ("port1.port_guid", "0002c90300001001"),
            ("port2.port_guid", "0002c90300001002"),
            ("port1.pkey0", "ffff"),
            ("port1.link_layer", "InfiniBand"),
            ("release_ca", "0"),
            ("unknown_ca", "-2"),
            // resolve_ca_name takes a name with a port as it is; dev_to_umad_id then finds
            // no umad device: -EINVAL. With port 0 resolve_ca_port fails: -ENODEV.
            ("open_unknown_ca", "-22"),
            ("open_unknown_ca_port0", "-19"),
            ("issm_unknown_ca", "-22"),
            ("issm_unknown_ca_port0", "-19"),
            ("portguids", "3"),
            ("portguid0", "0000000000000000"),
            ("portguid1", "0002c90300001001"),
            ("portguid2", "0002c90300001002"),
            ("portguids_small", "-12"),
            ("get_port", "0"),
            ("get_port.port_guid", "0002c90300001001"),
            ("get_port_missing", "-5"),
            ("device_list", "1"),
            ("sort", "0"),
            ("sort_too_many", "22"),
            ("sort_size1", "0 order=cab"),
            ("sort_size2", "22 order=cab"),
            ("sort_size4", "22 order=cab"),
            ("sort_size3", "0 order=abc"),
            ("device", "mlx5_0"),
        ],
    );
    let size: u32 = value(&v, "port1.pkeys_size").parse().unwrap();
    assert!(size >= 1, "libibumad needs at least one P_Key");
    let cap = u32::from_str_radix(value(&v, "port1.capmask"), 16).unwrap();
    assert_eq!(cap & 2, 0, "no SM holds the port");
    assert!(value(&v, "release_port").ends_with("pkeys=(nil)"));
}

#[test]
fn a_bad_device_string_is_said_once_and_no_ca_is_found() {
    let Some((dir, prog)) = client(Link::Ours) else {
        return;
    };
    let out = common::run(&prog, &["enum"], "sim:colour=blue");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("colour"), "{err}");
    assert_eq!(err.matches("libibumad (hca)").count(), 1, "{err}");
    let v = values(&out);
    check(&v, &[("cas", "0")]);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_request_gets_its_response_with_the_kernels_header_and_tid() {
    let Some(v) = run("loopback", "sim") else {
        return;
    };
    check(
        &v,
        &[
            // Before a port is open libibumad uses the old 56-byte header.
            ("size_before_open", "56"),
            ("size", "64"),
            ("mad_offset", "64"),
            ("agent", "0"),
            ("send", "0"),
            // libibumad sets errno to 0 on entry; a successful write or read leaves it.
            ("errno_send", "0"),
            // A buffer shorter than one MAD: EINVAL, the packet stays queued.
            ("short_recv", "-22 errno_short=22"),
            ("recv", "0"),
            ("len", "256"),
            ("status", "0"),
            ("errno_recv", "0"),
            ("method", "81"),
            ("mad_status", "0000"),
            ("tid_low", "1234abcd"),
            ("tid_high_set", "1"),
            ("hdr_length", "320"),
            ("src_lid", "1"),
            ("src_qpn", "1"),
            ("recv_again", "-110"),
            ("recv_nonblocking", "-11 errno_nonblocking=11"),
            ("unregister", "0"),
            ("close", "0"),
        ],
    );
}

#[test]
fn an_unanswered_request_comes_back_once_with_etimedout_after_its_retries() {
    let Some(v) = run("timeout", "sim") else {
        return;
    };
    check(
        &v,
        &[
            ("send", "0"),
            ("recv", "0"),
            ("len", "24"),
            ("status", "110"),
            ("ret_timeout", "100"),
            ("ret_retries", "2"),
            ("ret_lid", "119"),
            ("tid_low", "77777777"),
            ("tid_high_set", "1"),
            ("ret_class", "04"),
            ("ret_attr", "0012"),
            ("second", "-110"),
            ("send_no_timeout", "0"),
            ("after_no_timeout", "-110"),
        ],
    );
    let took: u64 = value(&v, "took_ms").parse().unwrap();
    // Three attempts of 100 ms each (and no more than a few seconds).
    assert!((280..3000).contains(&took), "took {took} ms");
}

#[test]
fn a_duplicate_tid_is_refused_per_agent_until_its_request_ends() {
    let Some(v) = run("dup", "sim") else {
        return;
    };
    check(
        &v,
        &[
            ("first", "0"),
            ("dup", "-5 errno_dup=22"),
            ("other_agent", "0"),
            ("other_tid", "0"),
            ("timeouts", "3"),
            ("reuse", "0"),
        ],
    );
}

#[test]
fn thirty_two_agents_per_fd_and_the_kernels_errnos() {
    let Some(v) = run("agents", "sim") else {
        return;
    };
    check(
        &v,
        &[
            ("lowest_first", "1"),
            ("thirty_third", "-1 errno_full=12"),
            ("unregister5", "0"),
            ("again", "5"),
            ("unregister40", "-1 errno40=22"),
            ("unregister6_twice", "-1 errno6=22"),
            ("send_unregistered", "-5 errno_send=5"),
            ("send_short", "-5 errno_short=22"),
            ("send_long", "-5 errno_long=22"),
            ("bad_class", "-1 errno_bad_class=22"),
            ("conflict", "-1 errno_conflict=22 held=1"),
        ],
    );
}

#[test]
fn an_overlong_send_is_refused_before_the_mad_past_its_header_is_read() {
    // The buffer ends at an inaccessible page: reading the 4096 bytes claimed would fault.
    let Some(v) = run("overlong", "sim") else {
        return;
    };
    check(
        &v,
        &[
            // libibumad: -EIO, errno from write(2); the kernel's EINVAL for the size.
            ("overlong", "-5 errno_overlong=22"),
            ("one_over", "-5 errno_one_over=22"),
            // The agent is checked first (EIO), as ib_umad_write does.
            ("overlong_no_agent", "-5 errno_no_agent=5"),
            ("fits", "0"),
            ("answer", "0 status=0 tid_low=00000be7"),
        ],
    );
}

#[test]
fn a_umad_fd_the_program_closed_itself_is_never_closed_again_by_the_library() {
    let Some(v) = run("reclose", "sim") else {
        return;
    };
    check(
        &v,
        &[
            ("first_reg", "0"),
            ("same_number", "1"),
            // The new file's fd works: it was not closed along with the old file.
            ("fd2_open", "1"),
            ("reregister", "0 errno_reregister=0"),
            ("send", "0"),
            ("sys_poll", "1 revents_in=1"),
            ("recv", "1 status=0"),
            ("other_differs", "1"),
            ("close_port", "0"),
            ("fd2_closed", "1"),
            ("other_open", "1"),
            ("unrelated_same_number", "1"),
            ("close_unrelated", "0"),
            ("unrelated_open", "1"),
        ],
    );
}

#[test]
fn register2_and_register_oui_follow_libibumad() {
    let Some(v) = run("register2", "sim") else {
        return;
    };
    check(
        &v,
        &[
            ("reg2", "0 id=0"),
            ("reg2_flags", "22 flags_after=0"),
            ("reg2_no_oui", "22"),
            ("reg2_oui", "0"),
            ("oui_bad_class", "-22"),
            ("oui_ok", "1"),
            ("null_attr", "22"),
            ("reg2_wide_oui", "0 id_set=1"),
            ("reg2_wide_oui_flags", "22 id=99 flags_after=0"),
            ("reg2_narrow_oui_flags", "0"),
        ],
    );
}

#[test]
fn user_rmpp_registrations_are_checked_as_the_kernel_checks_them() {
    let Some(v) = run("user_rmpp", "sim") else {
        return;
    };
    check(
        &v,
        &[
            // PerfMgt is not RMPP-capable: EINVAL, nothing written to the ID, flags cleared
            // as libibumad clears them after an EINVAL.
            ("perf_rmpp1", "22 id=99 flags_after=0"),
            ("no_class", "22 id=99"),
            ("sa_rmpp5", "22 id=99"),
            // No agent ID was used up by the refusals.
            ("sa_rmpp1", "0 id=0"),
            ("perf_rmpp0", "0 id=1"),
        ],
    );
}

#[test]
fn umad_register_picks_the_qp_on_the_class_int_as_libibumad_does() {
    let Some(v) = run("class_int", "sim") else {
        return;
    };
    check(
        &v,
        &[
            // QP1 (the int is not 0x01 or 0x81) for class byte 0x01 or 0x81: EINVAL.
            ("class_0x101", "-1 errno_0x101=22"),
            ("class_0x181", "-1 errno_0x181=22"),
            // QP1 for class byte 0x04: a PerfMgt agent.
            ("class_0x104", "0"),
            ("class_0x01", "1"),
        ],
    );
}

#[test]
fn umad_recv_with_a_negative_length_is_einval_at_once_and_writes_nothing() {
    let Some(v) = run("recv_negative", "sim") else {
        return;
    };
    check(
        &v,
        &[
            ("empty", "-22 errno_empty=22 len_empty=-5 at_once=1"),
            ("queued", "-22 errno_queued=22 len_queued=-1"),
            ("then", "0 len=256"),
        ],
    );
}

#[test]
fn the_fd_polls_readable_while_something_is_queued() {
    let Some(v) = run("poll", "sim") else {
        return;
    };
    check(
        &v,
        &[
            ("poll_empty", "-110"),
            ("get_fd_same", "1"),
            ("sys_poll_empty", "0"),
            ("sys_poll", "1 revents_in=1"),
            ("poll_ready", "0"),
            ("recv", "1"),
            ("errno_recv", "0"),
            ("sys_poll_after", "0"),
            ("poll_timeout", "-110"),
            ("poll_waited", "1"),
        ],
    );
}

#[test]
fn a_response_left_queued_by_a_blocking_reader_makes_the_fd_readable() {
    let Some(v) = run("leftover", "sim") else {
        return;
    };
    check(
        &v,
        &[
            ("first", "1"),
            ("sys_poll", "1 revents_in=1"),
            ("second", "1"),
            ("sys_poll_after", "0"),
        ],
    );
}

#[test]
fn a_response_left_queued_makes_the_fd_readable_while_another_fd_has_a_reader_waiting() {
    let Some(v) = run("leftover_other", "sim") else {
        return;
    };
    check(&v, &[("readable", "5/5"), ("second", "5/5")]);
}

#[test]
fn a_reader_blocked_in_umad_recv_can_be_cancelled_as_opensm_stops_its_receiver() {
    let Some(v) = run("cancel", "sim") else {
        return;
    };
    check(
        &v,
        &[("cancel", "0"), ("joined", "1 canceled=1"), ("close", "0")],
    );
}

#[test]
fn a_cancel_pending_in_an_entry_point_acts_after_it_returns_and_never_aborts() {
    let Some(v) = run("cancel_pending", "sim") else {
        return;
    };
    for what in [
        "send",
        "recv0",
        "register",
        "unregister",
        "get_port",
        "get_ca",
        "cas_names",
        "open_close",
        "dump",
    ] {
        assert_eq!(value(&v, what), "returned 1 canceled 1", "{what}: {v:?}");
    }
}

#[test]
fn a_broken_stderr_changes_nothing_the_calls_return() {
    let Some(v) = run("broken_stderr", "sim") else {
        return;
    };
    check(
        &v,
        &[
            ("dump_survived", "1"),
            ("open_debug", "1"),
            ("send_unregistered", "-5 errno_send=5"),
            ("close", "0"),
        ],
    );
}

#[test]
fn holding_the_issm_file_sets_is_sm() {
    let Some(v) = run("issm", "sim") else {
        return;
    };
    check(
        &v,
        &[
            ("issm_path", "0"),
            ("issm_before", "0"),
            ("issm_open", "1"),
            ("issm_set", "1"),
            ("issm_cleared", "1"),
            ("issm_small_len", "7"),
        ],
    );
}

/// The output of `mode` with the client linked to Debian's library and to ours.
fn both(mode: &str) -> Option<(String, String)> {
    common::need(
        std::path::Path::new(common::DEBIAN_LIB).exists(),
        common::DEBIAN_LIB,
        "libibumad3",
    )?;
    let (dir, ours) = client(Link::Ours)?;
    let debian = common::compile(&dir, "client-debian", CLIENT, Link::Debian);
    let a = common::run(&debian, &[mode], "sim");
    let b = common::run(&ours, &[mode], "sim");
    assert!(a.status.success() && b.status.success());
    std::fs::remove_dir_all(dir).unwrap();
    Some((
        String::from_utf8_lossy(&a.stdout).into_owned(),
        String::from_utf8_lossy(&b.stdout).into_owned(),
    ))
}

#[test]
fn every_name_of_the_string_functions_is_debians() {
    let Some((debian, ours)) = both("strings") else {
        return;
    };
    assert!(debian.lines().count() > 100_000);
    for (d, o) in debian.lines().zip(ours.lines()) {
        assert_eq!(o, d);
    }
    assert_eq!(debian.lines().count(), ours.lines().count());
}

#[test]
fn the_header_helpers_write_what_debians_write() {
    let Some((debian, ours)) = both("helpers") else {
        return;
    };
    assert!(debian.contains("size=56"), "{debian}");
    assert_eq!(ours, debian);
}

#[test]
fn the_header_helpers_work_on_a_buffer_at_an_odd_address_as_debians_do() {
    let Some((debian, ours)) = both("helpers_odd") else {
        return;
    };
    assert!(debian.contains("get_pkey=0"), "{debian}");
    assert_eq!(ours, debian);
}

#[test]
fn send_and_recv_work_on_a_buffer_at_an_odd_address() {
    let Some(v) = run("io_odd", "sim") else {
        return;
    };
    check(
        &v,
        &[
            ("get_pkey", "0"),
            ("send", "0"),
            ("recv", "0 len=256 status=0 tid_low=000000dd"),
        ],
    );
}

#[test]
fn a_child_of_fork_gets_errors_not_signals_and_the_parent_keeps_working() {
    let Some(v) = run("fork_use", "sim") else {
        return;
    };
    check(
        &v,
        &[
            ("agent", "0"),
            // The child ends normally, whatever it asked.
            ("child", "code 0"),
            // As on a removed device: no port resolves (-ENODEV), a named one cannot be
            // read (-EIO), no file opens.
            ("child_get_port", "-19"),
            ("child_get_port_named", "-5"),
            ("child_get_ca", "-5"),
            // Names need no device.
            ("child_cas", "1"),
            ("child_open", "-19"),
            ("child_open_named", "-5"),
            ("child_send", "-5 errno=5"),
            ("child_recv", "-5 errno=5"),
            // Readable (the device is gone to the child), as poll(2) with POLLERR makes
            // libibumad's umad_poll return 0.
            ("child_poll", "0"),
            ("child_register", "-1 errno=32"),
            ("child_unregister", "-1 errno=22"),
            ("child_close", "0"),
            ("parent_rt", "0 status=0"),
            ("close", "0"),
        ],
    );
}

#[test]
fn a_fork_child_exiting_leaves_the_parents_issm_file_and_is_sm_alone() {
    let Some(v) = run("fork_exit", "sim") else {
        return;
    };
    check(
        &v,
        &[
            ("issm_path", "0"),
            ("issm_set", "1"),
            ("child", "code 0"),
            ("issm_exists", "1"),
            ("issm_still_set", "1"),
            ("issm_cleared", "1"),
        ],
    );
}

#[test]
fn a_caught_signal_ends_umad_recv_and_umad_poll_with_eintr_as_libibumads_poll_does() {
    let Some(v) = run("eintr", "sim") else {
        return;
    };
    check(
        &v,
        &[
            // libibumad's dev_poll: poll(2) fails (EINTR) -> -EIO, errno left at EINTR;
            // *length untouched.
            ("recv_forever", "-5 errno=4 alarms=1 len=256"),
            ("poll", "-5 errno=4 before_timeout=1"),
            // poll(2) is never restarted, SA_RESTART or not.
            ("recv_restart", "-5 errno=4"),
            ("poll_ignored", "-110"),
            ("mask_restored", "1"),
            ("after", "0 status=0"),
            ("close", "0"),
        ],
    );
}

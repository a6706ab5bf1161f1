//! What the C-side tests share: where the built `libibumad.so` is, a directory that makes
//! it `libibumad.so.3` for the dynamic linker, compiling a C program with gcc against the
//! installed `<infiniband/umad.h>`, and running it with `HCA_DEVICE` set.
//!
//! A missing tool (gcc, objdump, the Debian headers or library) fails the test under CI
//! (`CI` set) with the package to install, and skips it elsewhere.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};

/// Debian's library, the reference the symbol and string tests compare with.
pub const DEBIAN_LIB: &str = "/usr/lib/x86_64-linux-gnu/libibumad.so.3";
/// The header the layout test compiles against.
pub const HEADER: &str = "/usr/include/infiniband/umad.h";

/// `Some(())` when `what` is there; otherwise fail under CI, or say why the test is
/// skipped and return `None`.
pub fn need(ok: bool, what: &str, package: &str) -> Option<()> {
    if ok {
        return Some(());
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "{what} is missing: install the Debian package {package}"
    );
    eprintln!("skipped: {what} is missing (install {package})");
    None
}

/// A program on PATH?
pub fn have(program: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// The `libibumad.so` cargo built with this test (next to the test binary).
pub fn built_lib() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let deps = exe.parent().expect("deps directory");
    let lib = deps.join("libibumad.so");
    assert!(
        lib.exists(),
        "{} is missing: cargo builds it with the umad crate's tests",
        lib.display()
    );
    lib
}

/// A fresh directory for one test.
pub fn scratch(name: &str) -> PathBuf {
    static N: AtomicU32 = AtomicU32::new(0);
    let d = std::env::temp_dir().join(format!(
        "umad-test-{}-{}-{name}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&d).expect("scratch directory");
    d
}

/// A directory where `libibumad.so.3` (and `libibumad.so`, for linking) are the built
/// library.
pub fn lib_dir(dir: &Path) -> PathBuf {
    let d = dir.join("lib");
    std::fs::create_dir_all(&d).expect("lib directory");
    for name in ["libibumad.so.3", "libibumad.so"] {
        let link = d.join(name);
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(built_lib(), &link).expect("symlink");
    }
    d
}

/// Which library a program links to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Link {
    /// Ours, through `lib_dir` and an rpath.
    Ours,
    /// Debian's, from the system.
    Debian,
}

/// Compile `source` (C) into `dir/name`, linked to `link`'s libibumad and pthreads.
pub fn compile(dir: &Path, name: &str, source: &str, link: Link) -> PathBuf {
    let src = dir.join(format!("{name}.c"));
    std::fs::write(&src, source).expect("write C source");
    let out = dir.join(name);
    let mut cmd = Command::new("gcc");
    cmd.args(["-std=gnu11", "-Wall", "-Werror", "-O1", "-o"])
        .arg(&out)
        .arg(&src);
    if link == Link::Ours {
        let lib = lib_dir(dir);
        cmd.arg(format!("-L{}", lib.display()))
            .arg(format!("-Wl,-rpath,{}", lib.display()));
    }
    cmd.args(["-libumad", "-lpthread"]);
    let o = cmd.output().expect("run gcc");
    assert!(
        o.status.success(),
        "gcc failed:\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    out
}

/// Run `program` with `args` on `device` (HCA_DEVICE), with a time limit.
pub fn run(program: &Path, args: &[&str], device: &str) -> Output {
    Command::new("timeout")
        .arg("60")
        .arg(program)
        .args(args)
        .env("HCA_DEVICE", device)
        .output()
        .expect("run the C program")
}

/// The `key=value` lines of a program's stdout.
pub fn values(o: &Output) -> Vec<(String, String)> {
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect()
}

/// The value of `key` (the first one).
pub fn value<'a>(vals: &'a [(String, String)], key: &str) -> &'a str {
    vals.iter().find(|(k, _)| k == key).map_or_else(
        || panic!("no {key}= in the output: {vals:?}"),
        |(_, v)| v.as_str(),
    )
}

/// The C toolchain and the Debian header are there (or the test is skipped / fails).
pub fn c_toolchain() -> Option<()> {
    need(have("gcc"), "gcc", "gcc")?;
    need(Path::new(HEADER).exists(), HEADER, "libibumad-dev")
}

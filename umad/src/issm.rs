//! The issm files: while a program holds `issm<N>` open, port N's CapabilityMask has IsSM set
//! (the kernel's `ib_umad_sm_open`/`ib_umad_sm_close`).
//!
//! OpenSM opens the path `umad_get_issm_path` gave it with a plain `open(2)` from
//! libosmvendor, and closes it with `close(2)`. Catching those calls would need `open` and
//! `close` interposed, which works only when this library comes before libc in symbol lookup
//! (`LD_PRELOAD`), not when it is found through `LD_LIBRARY_PATH` as a dependency of
//! libosmvendor. Instead the path is a real, empty file in a private directory of this
//! process (`$TMPDIR/hca-umad-<pid>-<n>/issm<N>`, mode 0700), watched with inotify: on every
//! open or close event the watcher counts the process's descriptors that point at the file
//! (`/proc/self/fd`) and sets or clears IsSM when the count goes from 0 or to 0. Counting
//! makes the result exact whatever inotify coalesces.
//!
//! Differences from the kernel: the bit changes a moment after `open` returns rather than
//! before; a second open does not block or fail with EAGAIN; a program that exits without
//! closing leaves the bit to the exit (the simulated port goes away with the process).

use std::collections::HashMap;
use std::ffi::CString;
use std::fs;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::thread::JoinHandle;

use crate::context::{CaPort, debug, lock, say};
use crate::error::UmadError;

const DIR_PREFIX: &str = "hca-umad-";

struct Watched {
    path: PathBuf,
    port: Weak<CaPort>,
    held: bool,
}

/// The issm files of this process and their watcher.
pub struct Issm {
    dir: PathBuf,
    stop: OwnedFd,
    ports: Mutex<HashMap<String, Watched>>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for Issm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Issm")
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

fn os(what: &'static str) -> impl FnOnce(io::Error) -> UmadError {
    move |source| UmadError::Os { what, source }
}

impl Issm {
    /// Make the private directory and start the watcher.
    pub fn new() -> Result<Arc<Issm>, UmadError> {
        static SEQ: AtomicU32 = AtomicU32::new(0);
        let base = std::env::temp_dir();
        remove_stale(&base);
        let dir = base.join(format!(
            "{DIR_PREFIX}{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .map_err(os("creating the directory of the issm files"))?;
        // /proc/self/fd shows resolved paths: compare with the resolved one.
        let dir = fs::canonicalize(&dir).map_err(os("resolving the issm directory"))?;
        // SAFETY: plain syscall; the result is checked.
        let ino = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
        if ino < 0 {
            return Err(os("inotify_init1 for the issm files")(
                io::Error::last_os_error(),
            ));
        }
        // SAFETY: inotify_init1 returned a new descriptor nobody else owns.
        let ino = unsafe { OwnedFd::from_raw_fd(ino) };
        let cdir = CString::new(dir.as_os_str().as_encoded_bytes())
            .map_err(|e| os("issm directory name")(io::Error::other(e)))?;
        // SAFETY: a NUL-terminated path, a descriptor we own.
        let wd = unsafe {
            libc::inotify_add_watch(
                ino.as_raw_fd(),
                cdir.as_ptr(),
                libc::IN_OPEN | libc::IN_CLOSE_WRITE | libc::IN_CLOSE_NOWRITE,
            )
        };
        if wd < 0 {
            return Err(os("watching the issm directory")(io::Error::last_os_error()));
        }
        // SAFETY: plain syscall; the result is checked.
        let stop = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if stop < 0 {
            return Err(os("eventfd for the issm watcher")(
                io::Error::last_os_error(),
            ));
        }
        // SAFETY: eventfd returned a new descriptor nobody else owns.
        let stop = unsafe { OwnedFd::from_raw_fd(stop) };
        let stop_raw = stop.as_raw_fd();
        let issm = Arc::new(Issm {
            dir,
            stop,
            ports: Mutex::new(HashMap::new()),
            thread: Mutex::new(None),
        });
        let weak = Arc::downgrade(&issm);
        // The watcher blocks the asynchronous signals: they are the program's
        // (crate::signals).
        let handle = crate::signals::with_async_blocked(|| {
            std::thread::Builder::new()
                .name("umad-issm".into())
                .spawn(move || watch(&ino, stop_raw, &weak))
        })
        .map_err(os("starting the issm watcher"))?;
        *lock(&issm.thread) = Some(handle);
        Ok(issm)
    }

    /// The directory the files live in.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The issm file of `port` (made on first call).
    pub fn path_for(&self, port: &Arc<CaPort>) -> Result<PathBuf, UmadError> {
        let name = format!("issm{}", port.umad_id);
        let mut ports = lock(&self.ports);
        if let Some(w) = ports.get(&name) {
            return Ok(w.path.clone());
        }
        let path = self.dir.join(&name);
        fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&path)
            .map_err(os("creating an issm file"))?;
        ports.insert(
            name,
            Watched {
                path: path.clone(),
                port: Arc::downgrade(port),
                held: false,
            },
        );
        Ok(path)
    }

    /// Whether the issm file of `port` is held (as the watcher last saw it).
    pub fn held(&self, port: &CaPort) -> bool {
        lock(&self.ports)
            .get(&format!("issm{}", port.umad_id))
            .is_some_and(|w| w.held)
    }

    /// Look again at every file (what the watcher does on an event).
    pub fn recheck(&self) {
        let names: Vec<String> = lock(&self.ports).keys().cloned().collect();
        for n in names {
            self.recheck_one(&n);
        }
    }

    fn recheck_one(&self, name: &str) {
        let mut ports = lock(&self.ports);
        let Some(w) = ports.get_mut(name) else { return };
        let held = descriptors_on(&w.path) > 0;
        if held == w.held {
            return;
        }
        w.held = held;
        let Some(port) = w.port.upgrade() else { return };
        drop(ports);
        match port.set_is_sm(held) {
            Ok(mask) => debug("issm", || {
                format!(
                    "port {} {name}: IsSM {held}, CapabilityMask {mask:#010x}",
                    port.num
                )
            }),
            Err(e) => say(format_args!(
                "libibumad (hca): setting IsSM of port {}: {e}",
                port.num
            )),
        }
    }

    /// Stop the watcher, clear IsSM where it was set, and remove the files.
    pub fn shutdown(&self) {
        let one = 1u64;
        // SAFETY: writes 8 bytes from a live u64 to our eventfd.
        unsafe {
            libc::write(
                self.stop.as_raw_fd(),
                (&raw const one).cast(),
                std::mem::size_of::<u64>(),
            )
        };
        if let Some(t) = lock(&self.thread).take() {
            if t.thread().id() != std::thread::current().id() {
                let _ = t.join();
            }
        }
        let mut held: Vec<Arc<CaPort>> = Vec::new();
        for w in lock(&self.ports).values_mut() {
            if std::mem::replace(&mut w.held, false) {
                held.extend(w.port.upgrade());
            }
        }
        for p in held {
            let _ = p.set_is_sm(false);
        }
        let _ = fs::remove_dir_all(&self.dir);
    }
}

fn watch(ino: &OwnedFd, stop: i32, issm: &Weak<Issm>) {
    let mut buf = [0u8; 4096];
    loop {
        let mut fds = [
            libc::pollfd {
                fd: ino.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: stop,
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: two pollfds, live for the call.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) };
        if n < 0 {
            if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return;
        }
        if fds[1].revents != 0 {
            return;
        }
        // Drain the events; which file they name does not matter, every file is recounted.
        loop {
            // SAFETY: reads into a live local buffer of the given length.
            let r = unsafe { libc::read(ino.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
            if r <= 0 {
                break;
            }
        }
        let Some(i) = issm.upgrade() else { return };
        i.recheck();
    }
}

/// Descriptors of this process open on `path`.
fn descriptors_on(path: &Path) -> usize {
    let Ok(entries) = fs::read_dir("/proc/self/fd") else {
        return 0;
    };
    entries
        .filter_map(Result::ok)
        .filter(|e| fs::read_link(e.path()).is_ok_and(|t| t == path))
        .count()
}

/// Remove issm directories left by processes that no longer exist.
fn remove_stale(base: &Path) {
    let Ok(entries) = fs::read_dir(base) else {
        return;
    };
    for e in entries.filter_map(Result::ok) {
        let name = e.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(DIR_PREFIX)) else {
            continue;
        };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        let mine = fs::metadata(e.path()).is_ok_and(|m| {
            use std::os::unix::fs::MetadataExt;
            // SAFETY: getuid has no preconditions.
            m.uid() == unsafe { libc::getuid() }
        });
        if mine && !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = fs::remove_dir_all(e.path());
        }
    }
}

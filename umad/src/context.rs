//! The process-wide state behind the C functions: the HCA(s) named by `HCA_DEVICE`, brought
//! up through the driver, a MAD-layer port per HCA port (its progress loop run as
//! [`crate::drive`] says), the umad files (`umad_open_port` fds) and the issm files.
//!
//! The C entry points use one [`Context`], made on first use from the environment
//! ([`global`]); tests make their own over a device they keep a handle on
//! ([`Context::from_backends`]) and close it ([`Context::close`]) to check that nothing
//! leaked.

use std::collections::HashMap;
use std::io::Write as _;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError, Weak};

use driver::verbs::{Hca, HcaPort};
use driver::{DeviceBackend, DeviceBackendExt};
use mad::{Agent, AgentSpec, Event, EventQueue, SpecialQp};

use crate::drive::{Drive, Fallback};
use crate::error::UmadError;
use crate::file::UmadFile;
use crate::fork;
use crate::info::{self, NodeAttrs, PortAttrs};
use crate::issm::Issm;
use crate::signals;

/// The environment variable naming the device(s): a device string (`sim`,
/// `sim:KEY=VALUE,...`, `vfio:DDDD:BB:DD.F`), or several separated by `;`.
pub const DEVICE_ENV: &str = "HCA_DEVICE";
/// The device when `HCA_DEVICE` is not set: the embedded simulator.
pub const DEFAULT_DEVICE: &str = "sim";

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// `umad_debug`'s level: above 0 the library says what it does on stderr, as libibumad's
/// `IBWARN` does.
pub static DEBUG: AtomicI32 = AtomicI32::new(0);

/// Print a libibumad-style warning (`ibwarn: [pid] func: msg`) when debugging is on.
pub(crate) fn debug(func: &str, msg: impl FnOnce() -> String) {
    if DEBUG.load(Ordering::Relaxed) > 0 {
        say(format_args!(
            "ibwarn: [{}] {func}: {}",
            std::process::id(),
            msg()
        ));
    }
}

/// Write a line to stderr, ignoring a failed write (a closed or broken stderr must not
/// change what a call returns, nor panic as `eprintln!` does: libibumad's `fprintf` ignores
/// it too).
pub(crate) fn say(line: std::fmt::Arguments<'_>) {
    let _ = writeln!(std::io::stderr(), "{line}");
}

/// One port of a CA, with its MAD-layer port.
pub struct CaPort {
    /// The CA's name.
    pub ca: String,
    /// Port number.
    pub num: u8,
    /// Its umad device number (`umad<N>`, `issm<N>`): ports numbered in order over all CAs.
    pub umad_id: u32,
    /// The driver's port.
    pub hca: Arc<dyn HcaPort>,
    /// The MAD layer on it.
    pub mad: mad::Port,
    /// Who drives the MAD layer's progress loop (callers waiting in `umad_recv`, else the
    /// fallback thread).
    pub drive: Arc<Drive>,
    pkey_entries: u16,
    fallback: Mutex<Option<Fallback>>,
    sentinel: Mutex<Option<Agent>>,
    files: Mutex<Vec<Weak<UmadFile>>>,
    removed: OnceLock<String>,
    /// The [`fork::generation`] it was made in.
    generation: u64,
}

impl std::fmt::Debug for CaPort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CaPort")
            .field("ca", &self.ca)
            .field("num", &self.num)
            .field("umad_id", &self.umad_id)
            .finish_non_exhaustive()
    }
}

impl CaPort {
    fn open(ca: &str, hca: Arc<dyn HcaPort>, umad_id: u32) -> Result<Arc<CaPort>, UmadError> {
        let attrs = hca.attrs()?;
        let mad = mad::open(hca.clone()).map_err(|e| UmadError::Init {
            device: ca.to_owned(),
            reason: format!("MAD layer on port {}: {e}", attrs.port_num),
        })?;
        let drive = Arc::new(Drive::default());
        let port = Arc::new_cyclic(|me: &Weak<CaPort>| {
            // The port's own agent hears of the device's death, so that every file of the
            // port is marked, with agents or not (the kernel's `ib_umad_kill_port`).
            let queue = Arc::new(EventQueue::new());
            let weak = me.clone();
            let q = Arc::downgrade(&queue);
            queue.set_notify(Some(Arc::new(move || {
                let (Some(port), Some(q)) = (weak.upgrade(), q.upgrade()) else {
                    return;
                };
                let mut evs = Vec::new();
                q.drain_into(&mut evs);
                for ev in evs {
                    if let Event::DeviceFatal { reason, .. } = ev {
                        port.mark_removed(&reason);
                    }
                }
            })));
            let sentinel = mad
                .register(AgentSpec::send_only(SpecialQp::Gsi).with_events(queue))
                .ok();
            CaPort {
                ca: ca.to_owned(),
                num: attrs.port_num,
                umad_id,
                hca,
                mad,
                drive,
                pkey_entries: attrs.pkey_table_len,
                fallback: Mutex::new(None),
                sentinel: Mutex::new(sentinel),
                files: Mutex::new(Vec::new()),
                removed: OnceLock::new(),
                generation: fork::generation(),
            }
        });
        let weak = Arc::downgrade(&port);
        let show = move || {
            if let Some(p) = weak.upgrade() {
                p.show_queued();
            }
        };
        let fallback =
            Fallback::spawn(port.mad.clone(), Arc::clone(&port.drive), show).map_err(|e| {
                UmadError::Init {
                    device: ca.to_owned(),
                    reason: format!("starting the progress thread: {e}"),
                }
            })?;
        *lock(&port.fallback) = Some(fallback);
        Ok(port)
    }

    /// Make the fds of the port's files readable where packets wait that a reader left.
    pub fn show_queued(&self) {
        let files: Vec<Arc<UmadFile>> =
            lock(&self.files).iter().filter_map(Weak::upgrade).collect();
        for f in files {
            f.show_queued();
        }
    }

    /// Whether this process is a child of `fork()` and the port its parent's (see
    /// [`crate::fork`]): it answers as a removed device.
    pub fn inherited(&self) -> bool {
        self.generation != fork::generation()
    }

    /// Why the device is gone, if it is (in a child of `fork()`, it is the parent's).
    pub fn removed(&self) -> Option<String> {
        if self.inherited() {
            return Some(UmadError::Forked.to_string());
        }
        self.removed
            .get()
            .cloned()
            .or_else(|| self.mad.fatal_reason())
    }

    /// The device died: every file of the port is dead (reads EIO, poll POLLERR), as one
    /// step for whoever looks: every fd polls POLLERR before the removal is recorded, and a
    /// read of any fd says EIO from then on (`CaPort::marked_removed`), so once one read
    /// says EIO, every fd of the port polls POLLERR and reads EIO.
    pub fn mark_removed(&self, reason: &str) {
        let files: Vec<Arc<UmadFile>> =
            lock(&self.files).iter().filter_map(Weak::upgrade).collect();
        for f in &files {
            f.signal_dead();
        }
        let _ = self.removed.set(reason.to_owned());
        for f in files {
            f.kill(reason);
        }
    }

    /// Why the port was marked removed ([`CaPort::mark_removed`]), if it was: a read of any
    /// of its fds fails from then on.
    pub(crate) fn marked_removed(&self) -> Option<&str> {
        self.removed.get().map(String::as_str)
    }

    /// Add `f` to the files [`CaPort::mark_removed`] kills, unless the device is gone
    /// (returns why). Checked under the files' lock, which `mark_removed` takes after it
    /// records the removal: a file is either refused here or killed there (the kernel
    /// serialises `ib_umad_open` and `ib_umad_kill_port` under `file_mutex`).
    pub(crate) fn add_file(&self, f: &Arc<UmadFile>) -> Result<(), String> {
        let mut files = lock(&self.files);
        if let Some(reason) = self.removed() {
            return Err(reason);
        }
        files.retain(|w| w.strong_count() > 0);
        files.push(Arc::downgrade(f));
        Ok(())
    }

    /// What sysfs would show under `ports/<n>/`, asked of the SMA now.
    pub fn attrs(&self) -> Result<PortAttrs, UmadError> {
        if self.inherited() {
            return Err(UmadError::Forked);
        }
        info::port(&*self.hca, self.pkey_entries)
    }

    /// Set (`held`) or clear the IsSM capability bit, as opening and closing `issm<N>` does.
    pub fn set_is_sm(&self, held: bool) -> Result<u32, UmadError> {
        let bit = mad::wire::attr::port_info::cap_mask::IS_SM;
        let (set, clear) = if held { (bit, 0) } else { (0, bit) };
        Ok(self.hca.modify_capability_mask(set, clear)?)
    }

    fn shutdown(&self) {
        if let Some(s) = lock(&self.sentinel).take() {
            s.deregister();
        }
        if let Some(f) = lock(&self.fallback).take() {
            drop(f);
        }
    }
}

/// One CA: an HCA brought up by the driver, and its ports.
pub struct Ca {
    /// Its name (`mlx5_0`, ...).
    pub name: String,
    /// The device string it was opened from.
    pub device: String,
    /// The HCA.
    pub hca: Arc<dyn Hca>,
    /// Its ports, port 1 first.
    pub ports: Vec<Arc<CaPort>>,
    /// `fw_ver`.
    pub fw_ver: String,
    /// `hw_rev`: the PCI revision, as mlx5 shows it.
    pub hw_ver: String,
    /// `hca_type`: `MT` and the PCI device ID, as mlx5 shows it.
    pub ca_type: String,
}

impl std::fmt::Debug for Ca {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ca")
            .field("name", &self.name)
            .field("device", &self.device)
            .field("ports", &self.ports)
            .finish_non_exhaustive()
    }
}

impl Ca {
    /// NodeInfo of the CA (asked through port 1).
    pub fn node(&self) -> Result<NodeAttrs, UmadError> {
        let p = self.ports.first().ok_or_else(|| UmadError::NoPort {
            ca: self.name.clone(),
            port: 1,
        })?;
        if p.inherited() {
            return Err(UmadError::Forked);
        }
        info::node(&*p.hca)
    }

    /// Port `n`.
    pub fn port(&self, n: i32) -> Option<&Arc<CaPort>> {
        self.ports.iter().find(|p| i32::from(p.num) == n)
    }
}

/// Everything the library holds.
pub struct Context {
    cas: Vec<Arc<Ca>>,
    files: Mutex<HashMap<RawFd, Arc<UmadFile>>>,
    issm: Mutex<Option<Arc<Issm>>>,
    closed: AtomicBool,
    /// The [`fork::generation`] it was made in.
    generation: u64,
    /// The process that made it (what the exit hook goes by, should the fork handler be
    /// missing).
    pid: u32,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("cas", &self.cas)
            .finish_non_exhaustive()
    }
}

impl Context {
    /// Open the devices of `spec` (device strings separated by `;`).
    pub fn open(spec: &str) -> Result<Context, UmadError> {
        embed::install();
        let mut backends = Vec::new();
        for device in spec.split(';').map(str::trim).filter(|s| !s.is_empty()) {
            let b = driver::open(device).map_err(|e| UmadError::Init {
                device: device.to_owned(),
                reason: e.to_string(),
            })?;
            backends.push((device.to_owned(), b));
        }
        if backends.is_empty() {
            return Err(UmadError::Init {
                device: spec.to_owned(),
                reason: "no device string given".into(),
            });
        }
        Context::from_backends(backends)
    }

    /// Bring up the HCA behind each backend (named by the device string given with it).
    pub fn from_backends(
        backends: Vec<(String, Arc<dyn DeviceBackend>)>,
    ) -> Result<Context, UmadError> {
        fork::install();
        let generation = fork::generation();
        let mut cas: Vec<Arc<Ca>> = Vec::new();
        let mut per_family: HashMap<&'static str, u32> = HashMap::new();
        let mut umad_id = 0;
        for (device, backend) in backends {
            let init = |reason: String| UmadError::Init {
                device: device.clone(),
                reason,
            };
            let hca = driver::open_hca(backend.clone()).map_err(|e| init(e.to_string()))?;
            let info = hca.info();
            let n = per_family.entry(info.family).or_insert(0);
            let name = format!("{}_{n}", info.family);
            *n += 1;
            let mut ports = Vec::new();
            for p in 1..=info.ports {
                let Some(hp) = hca.port(p) else { continue };
                ports.push(CaPort::open(&name, hp, umad_id)?);
                umad_id += 1;
            }
            let rev = backend.config_read32(0x08).map_or(0, |v| v & 0xff);
            cas.push(Arc::new(Ca {
                name,
                device,
                ca_type: format!("MT{}", backend.pci_id().device),
                hw_ver: format!("{rev:x}"),
                fw_ver: info.fw_version,
                hca,
                ports,
            }));
        }
        Ok(Context {
            cas,
            files: Mutex::new(HashMap::new()),
            issm: Mutex::new(None),
            closed: AtomicBool::new(false),
            generation,
            pid: std::process::id(),
        })
    }

    /// Whether this process is a child of `fork()` and the context its parent's: the
    /// devices, their memory and the library's threads stayed with the parent, and the locks
    /// its threads held may stay held. Every call that needs a device then fails as on a
    /// removed device, before it takes a lock (see [`crate::fork`]).
    pub fn inherited(&self) -> bool {
        self.generation != fork::generation()
    }

    /// The CAs, in name order.
    pub fn cas(&self) -> &[Arc<Ca>] {
        &self.cas
    }

    /// The CA named `name`.
    pub fn ca(&self, name: &str) -> Option<&Arc<Ca>> {
        self.cas.iter().find(|c| c.name == name)
    }

    /// Every port of every CA.
    pub fn ports(&self) -> impl Iterator<Item = &Arc<CaPort>> {
        self.cas.iter().flat_map(|c| c.ports.iter())
    }

    /// `resolve_ca_name` + `resolve_ca_port` of libibumad: with a CA name and a port, that
    /// port; with a name and port 0, the CA's first ACTIVE port, else its first LinkUp port,
    /// else its first port not Disabled; with no name, the first CA with an ACTIVE port (of
    /// `port`, if given), else the first with a usable one. `None` when nothing qualifies.
    pub fn resolve(&self, ca: Option<&str>, port: i32) -> Option<(Arc<Ca>, i32)> {
        if let Some(name) = ca {
            let c = self.ca(name)?;
            if port != 0 {
                return Some((Arc::clone(c), port));
            }
            let (p, _) = resolve_port(c, 0)?;
            return Some((Arc::clone(c), p));
        }
        let mut usable = None;
        for c in &self.cas {
            let Some((p, active)) = resolve_port(c, port) else {
                continue;
            };
            if active {
                return Some((Arc::clone(c), p));
            }
            usable.get_or_insert((Arc::clone(c), p));
        }
        usable
    }

    /// The port `umad<N>` of `ca` port `port` is, if it exists.
    pub fn port_of(&self, ca: &Ca, port: i32) -> Option<Arc<CaPort>> {
        ca.port(port).cloned()
    }

    /// `umad_open_port` after resolution: a new umad file on `port`.
    ///
    /// Files whose fd the user closed themselves (a plain `close`, as libibumad's own
    /// `umad_close_port` does) are found here, their number naming something else now (often
    /// the new file): they are closed as the kernel closes a released file (agents
    /// unregistered), without touching the number.
    pub fn open_file(&self, port: &Arc<CaPort>) -> Result<Arc<UmadFile>, UmadError> {
        self.open_file_with(port, || {})
    }

    /// [`Context::open_file`], calling `between` after the first check of the device and
    /// before the file joins the port (where a removal may come: the tests make one come
    /// there).
    fn open_file_with(
        &self,
        port: &Arc<CaPort>,
        between: impl FnOnce(),
    ) -> Result<Arc<UmadFile>, UmadError> {
        if let Some(reason) = port.removed() {
            return Err(UmadError::Dead { reason });
        }
        let f = UmadFile::open(Arc::clone(port))?;
        between();
        // The file has no agent yet: dropped, it closes its fd.
        port.add_file(&f)
            .map_err(|reason| UmadError::Dead { reason })?;
        let stale: Vec<Arc<UmadFile>> = {
            let mut files = lock(&self.files);
            let mut stale = Vec::new();
            files.retain(|_, g| {
                let live = g.owns_fd();
                if !live {
                    stale.push(Arc::clone(g));
                }
                live
            });
            // An entry of the same number went with the `retain`: the number now names this
            // file's socket, which no older entry owns.
            files.insert(f.fd(), Arc::clone(&f));
            stale
        };
        for g in stale {
            debug("umad_open_port", || {
                format!(
                    "fd {} was closed by the program: releasing its file",
                    g.fd()
                )
            });
            g.close_fd();
            g.close();
        }
        Ok(f)
    }

    /// The umad file behind `fd`. Not checked against a `close` the user made themselves
    /// (that costs a system call per MAD): [`Context::open_file`] and
    /// [`Context::close_file`] are where a stale entry could do harm, and they check.
    pub fn file(&self, fd: RawFd) -> Result<Arc<UmadFile>, UmadError> {
        if self.inherited() {
            return Err(UmadError::Forked);
        }
        lock(&self.files)
            .get(&fd)
            .cloned()
            .ok_or(UmadError::NotAPort { fd })
    }

    /// `umad_close_port`: unregister the file's agents, drop its queue, close its fd. An fd
    /// the user already closed themselves is not closed again (its number may name another
    /// file of the program now): only the file is released. `NotAPort` for a number this
    /// library never handed out.
    pub fn close_file(&self, fd: RawFd) -> Result<(), UmadError> {
        if self.inherited() {
            return Err(UmadError::Forked);
        }
        let f = lock(&self.files)
            .remove(&fd)
            .ok_or(UmadError::NotAPort { fd })?;
        f.close();
        f.close_fd();
        Ok(())
    }

    /// Open umad files.
    pub fn open_files(&self) -> usize {
        lock(&self.files).len()
    }

    /// The issm files (made on first use).
    pub fn issm(&self) -> Result<Arc<Issm>, UmadError> {
        if self.inherited() {
            return Err(UmadError::Forked);
        }
        let mut g = lock(&self.issm);
        if let Some(i) = g.as_ref() {
            return Ok(Arc::clone(i));
        }
        let i = Issm::new()?;
        *g = Some(Arc::clone(&i));
        Ok(i)
    }

    /// The issm files if they were made.
    pub fn issm_if_open(&self) -> Option<Arc<Issm>> {
        if self.inherited() {
            return None;
        }
        lock(&self.issm).clone()
    }

    /// Close everything: files, the issm watcher, the progress threads, the HCAs (whose
    /// teardown returns every page and lease). Idempotent.
    pub fn close(&self) -> Result<(), UmadError> {
        if self.inherited() {
            return Err(UmadError::Forked);
        }
        if self.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        let files: Vec<Arc<UmadFile>> = lock(&self.files).drain().map(|(_, f)| f).collect();
        for f in files {
            f.close();
            f.close_fd();
        }
        if let Some(i) = lock(&self.issm).take() {
            i.shutdown();
        }
        let mut first = None;
        for ca in &self.cas {
            for p in &ca.ports {
                p.shutdown();
            }
            if let Err(e) = ca.hca.close() {
                first.get_or_insert(UmadError::Driver(e));
            }
        }
        first.map_or(Ok(()), Err)
    }
}

/// `resolve_ca_port`: the port to use on `ca` and whether it is ACTIVE; `None` when no port
/// qualifies. A port given explicitly qualifies if it is ACTIVE or not Disabled.
fn resolve_port(ca: &Ca, port: i32) -> Option<(i32, bool)> {
    const ACTIVE: u8 = 4;
    const LINK_UP: u8 = 5;
    const DISABLED: u8 = 3;
    let states: Vec<(i32, PortAttrs)> = ca
        .ports
        .iter()
        .filter_map(|p| p.attrs().ok().map(|a| (i32::from(p.num), a)))
        .collect();
    if port > 0 {
        let (_, a) = states.iter().find(|(n, _)| *n == port)?;
        if a.state == ACTIVE {
            return Some((port, true));
        }
        return (a.phys_state != DISABLED).then_some((port, false));
    }
    if let Some((n, _)) = states.iter().find(|(_, a)| a.state == ACTIVE) {
        return Some((*n, true));
    }
    if let Some((n, _)) = states.iter().find(|(_, a)| a.phys_state == LINK_UP) {
        return Some((*n, false));
    }
    states
        .iter()
        .find(|(_, a)| a.phys_state != DISABLED)
        .map(|(n, _)| (*n, false))
}

static GLOBAL: OnceLock<Result<Arc<Context>, String>> = OnceLock::new();

/// The context of the C functions: opened from `HCA_DEVICE` (default `sim`) on first use.
/// A failure is reported once on stderr (the C API has no other way to say why) and then
/// answered as "no such device". The threads it starts block asynchronous signals, which
/// are the program's (see [`crate::signals`]).
pub fn global() -> Option<&'static Arc<Context>> {
    GLOBAL
        .get_or_init(|| {
            let spec = std::env::var(DEVICE_ENV).unwrap_or_else(|_| DEFAULT_DEVICE.to_owned());
            match signals::with_async_blocked(|| Context::open(&spec)) {
                Ok(c) => {
                    // SAFETY: registers a plain extern "C" function with no arguments.
                    unsafe { libc::atexit(at_exit) };
                    Ok(Arc::new(c))
                }
                Err(e) => {
                    say(format_args!("libibumad (hca): {e}"));
                    Err(e.to_string())
                }
            }
        })
        .as_ref()
        .ok()
}

/// At exit: save the simulated fabrics that asked for it (`state=FILE`) and remove the
/// issm files. The HCAs stay up: other threads of the program may still be using them, and
/// the process is going away. In a child of `fork()` (which inherits the hook) nothing: the
/// devices, the issm files and the fabrics are the parent's. A panic stops here (it must
/// not cross into the C runtime's `exit`, which would abort).
extern "C" fn at_exit() {
    crate::exports::uncancellable(|| {
        let _ = std::panic::catch_unwind(at_exit_inner);
    });
}

fn at_exit_inner() {
    if let Some(Ok(c)) = GLOBAL.get() {
        if c.inherited() || c.pid != std::process::id() {
            return;
        }
        if let Some(i) = c.issm_if_open() {
            i.shutdown();
        }
    }
    for (path, result) in embed::persist_states() {
        if let Err(e) = result {
            say(format_args!(
                "libibumad (hca): saving the simulated fabric to {path}: {e}"
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_opened_as_the_device_goes_is_refused() {
        let (model, _net) =
            sim::mlx5::Mlx5::standalone_default(sim::ClockMode::Real).expect("simulated ConnectX");
        let backend = embed::backend_for(Arc::new(model), "sim");
        let ctx = Context::from_backends(vec![("sim".into(), backend)]).expect("context");
        let port = Arc::clone(&ctx.cas()[0].ports[0]);
        // The removal lands after open_file's first look at the device.
        let r = ctx.open_file_with(&port, || port.mark_removed("removed in the test"));
        match r {
            Err(e) => assert_eq!(e.errno(), libc::EIO, "{e}"),
            Ok(f) => panic!(
                "a file the removal missed (read: {:?})",
                f.read(&mut [0u8; 400]).map_err(|e| e.errno())
            ),
        }
        assert_eq!(ctx.open_files(), 0);
        let _ = ctx.close();
    }
}

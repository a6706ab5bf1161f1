//! The one crate that sees both the driver and the simulator: it adapts the simulator's device
//! models to the driver's `DeviceModel` interface and registers them, so that a program linking
//! this crate can open `sim:` device strings. Only programs (tools, umad, tests) depend on it.
//!
//! Call [`install`] once at start-up; then `driver::open("sim")` (or `sim:KEY=VALUE,...`) builds a
//! simulated device: by default a ConnectX-5 (the `sim::mlx5` model) alone on its own one-node
//! network ([`SIM_HELP`] lists the parameters). Tests that want to reach into the model (fault
//! injection) build the model themselves and wrap it with [`backend_for`].

pub mod serve;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use dma::DmaMapper;
use driver::backend::{IrqIndex, IrqInfo, PciId, RegionInfo, region};
use driver::emulated::{
    DeviceModel, EmulatedBackend, ModelOpenError, ModelProvider, register_provider,
};
use driver::eventfd::EventFd;
use sim::fabric::Fabric;
use sim::mlx5::config::parse_fw;
use sim::mlx5::{Mlx5, Mlx5Config};
use sim::net::remote::{RemoteLink, RemoteTarget};
use sim::net::{Network, StandaloneInit};
use sim::{ClockMode, Device, IrqKind, Scheduler};

/// The parameters `sim:` device strings accept, one per line, each indented two spaces (the
/// first line's spaces written `\x20`, since the string's leading `\` line continuation eats
/// the whitespace that follows it).
pub const SIM_HELP: &str = "\
\x20 model=mlx5       which device to simulate: mlx5 (default; a ConnectX with its firmware,
                   on a simulated InfiniBand network) or edu (QEMU's edu teaching device)
  clock=real       real (default; time is the wall clock) or virtual (time moves only when
                   the driver waits: deterministic and instant, for tests)
  topology=FILE    mlx5: put the HCA on the fabric of this ibnetdiscover/ibsim topology file
                   (default: alone on a one-node fabric of its own, with its SMA and loopback)
  fabric=SPEC      mlx5: put the HCA on a generated fabric (the shapes of `hca sim gen`, with
                   `/` for the spec's own `,`: fabric=fat-tree:leaves=4/hosts=4/spines=2);
                   the HCA is its first host (host-1) unless node= says otherwise
  node=NAME        mlx5 with topology=, fabric= or server=: the CA node the HCA is (its name,
                   e.g. Hca1)
  port=N           mlx5 with topology=, fabric= or server=: the node port HCA port 1 attaches
                   to (default 1)
  state=FILE       mlx5 with topology=: load the fabric's SMA state (port states, LIDs,
                   SM LID, M_Key, P_Keys, switch tables) from FILE if it exists, and save it
                   there when the device is closed, or when the program exits with it open
                   (sim/src/net/state_file.rs has the format). One open device per FILE in a
                   process: each device string is a fabric of its own, so a second is
                   refused (for several HCAs on one fabric use server=)
  server=PATH      mlx5: put the HCA on the fabric a fabric server (`hca sim serve`) holds,
                   through its socket PATH, with node= (and port=), so that programs running
                   at once share one fabric; instead of topology=, fabric= and state= (the
                   server has them); real clock only. If the server goes away the port goes Down.
  ports=N          mlx5: HCA ports, 1 or 2 (default 1)
  port_state=S     mlx5 alone: how its ports start: active (default; LIDs 1, 2.. and SM LID 1),
                   init (link up, no LID) or down
  device_id=ID     mlx5: PCI device ID (default 0x1017, ConnectX-5)
  fw=X.Y.Z         mlx5: firmware version the device reports (default 16.35.2000)
  boot_ms=MS       mlx5: how long its firmware boots (the `initializing` bit reads 1) after
                   creation or reset, on the device's clock (default 0: a `sim:` device is
                   there at once, and every program on it would otherwise wait for the boot,
                   10 ms on the real clock; the sim crate's Mlx5Config keeps 10 ms, with
                   which the driver's tests exercise the wait); the driver gives up on a
                   boot longer than its firmware-init timeout (at most 120 s)
  node_guid=GUID   mlx5 alone: the node GUID (port p gets GUID + p)";

/// Adapts a simulator [`Device`] to the driver's [`DeviceModel`].
pub struct SimModel<D: Device> {
    device: Arc<D>,
    /// The `state=FILE` network this device uses, saved when the model goes away. After
    /// `device`, so that the state is saved once the device has left the network.
    _state: Option<StateGuard>,
}

impl<D: Device> SimModel<D> {
    /// Wrap `device`.
    pub fn new(device: Arc<D>) -> Self {
        SimModel {
            device,
            _state: None,
        }
    }

    /// The simulated device.
    pub fn device(&self) -> &Arc<D> {
        &self.device
    }
}

fn kind(index: IrqIndex) -> IrqKind {
    match index {
        IrqIndex::Intx => IrqKind::Intx,
        IrqIndex::Msi => IrqKind::Msi,
        IrqIndex::Msix => IrqKind::Msix,
        IrqIndex::Err => IrqKind::Err,
        IrqIndex::Req => IrqKind::Req,
    }
}

impl<D: Device + 'static> DeviceModel for SimModel<D> {
    fn pci_id(&self) -> PciId {
        let (vendor, device) = self.device.ids();
        PciId { vendor, device }
    }

    fn regions(&self) -> Vec<RegionInfo> {
        let mut v: Vec<RegionInfo> = self
            .device
            .bars()
            .into_iter()
            .map(|b| RegionInfo {
                index: u32::from(b.index),
                size: b.size,
                read: true,
                write: true,
                mmap: true,
                msix_mappable: false,
                sparse: None,
            })
            .collect();
        v.push(RegionInfo {
            index: region::CONFIG,
            size: sim::pci_config::CONFIG_SIZE as u64,
            read: true,
            write: true,
            mmap: false,
            msix_mappable: false,
            sparse: None,
        });
        v
    }

    fn mmio_read(&self, bar: u8, offset: u64, data: &mut [u8]) {
        self.device.mmio_read(bar, offset, data);
    }

    fn mmio_write(&self, bar: u8, offset: u64, data: &[u8]) {
        self.device.mmio_write(bar, offset, data);
    }

    fn config_read(&self, offset: u64, data: &mut [u8]) {
        self.device.config().read(offset, data);
    }

    fn config_write(&self, offset: u64, data: &[u8]) {
        self.device.config().write(offset, data);
    }

    fn irq_info(&self, index: IrqIndex) -> IrqInfo {
        let count = self.device.irqs().count(kind(index));
        IrqInfo {
            index,
            count,
            eventfd: count > 0,
            maskable: matches!(index, IrqIndex::Intx | IrqIndex::Msix),
            automasked: index == IrqIndex::Intx,
            noresize: matches!(index, IrqIndex::Msi | IrqIndex::Req | IrqIndex::Err),
        }
    }

    fn set_irqs(&self, index: IrqIndex, start: u32, fds: Vec<EventFd>) {
        let k = kind(index);
        if fds.is_empty() {
            self.device.irqs().clear(k);
            return;
        }
        for (i, fd) in fds.into_iter().enumerate() {
            let fd = Arc::new(fd);
            self.device.irqs().set(
                k,
                start + i as u32,
                Some(Arc::new(move || {
                    // An eventfd write fails only when the counter would overflow, and then the
                    // interrupt is pending anyway.
                    let _ = fd.signal();
                })),
            );
        }
    }

    fn reset(&self) -> bool {
        self.device.reset()
    }

    fn dma_mapper(&self) -> Arc<dyn DmaMapper> {
        self.device.iommu().clone()
    }

    fn now(&self) -> Duration {
        self.device.clock().now()
    }

    fn run_until(&self, deadline: Duration) {
        self.device.run_until(deadline);
    }
}

/// A driver backend for a device the caller built (and keeps a handle on, e.g. to inject
/// faults).
pub fn backend_for<D: Device + 'static>(device: Arc<D>, describe: &str) -> Arc<EmulatedBackend> {
    Arc::new(EmulatedBackend::new(
        Arc::new(SimModel::new(device)),
        describe,
    ))
}

/// Builds simulated devices from `sim:` parameters.
struct Provider;

/// The `sim:` parameters, parsed.
struct Params {
    model: String,
    clock: ClockMode,
    topology: Option<String>,
    fabric: Option<String>,
    node: Option<String>,
    port: u8,
    init: StandaloneInit,
    cfg: Mlx5Config,
    node_guid_set: bool,
    state: Option<String>,
    server: Option<String>,
    clock_set: bool,
    init_set: bool,
}

fn number<T: TryFrom<u64>>(key: &str, v: &str) -> Result<T, String> {
    let parsed = match v.strip_prefix("0x").or_else(|| v.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => v.parse::<u64>(),
    };
    parsed
        .ok()
        .and_then(|n| T::try_from(n).ok())
        .ok_or_else(|| format!("{key}={v}: not a number in range"))
}

fn parse(params: &[(String, String)]) -> Result<Params, ModelOpenError> {
    let mut p = Params {
        model: "mlx5".to_string(),
        clock: ClockMode::Real,
        topology: None,
        fabric: None,
        node: None,
        port: 1,
        init: StandaloneInit::Active,
        cfg: Mlx5Config {
            init_delay: Duration::ZERO,
            ..Mlx5Config::default()
        },
        node_guid_set: false,
        state: None,
        server: None,
        clock_set: false,
        init_set: false,
    };
    for (k, v) in params {
        match k.as_str() {
            "model" => p.model.clone_from(v),
            "clock" => {
                p.clock_set = true;
                p.clock = match v.as_str() {
                    "real" => ClockMode::Real,
                    "virtual" => ClockMode::Virtual,
                    other => return Err(format!("clock={other}: expected real or virtual").into()),
                }
            }
            "topology" => p.topology = Some(v.clone()),
            "state" => p.state = Some(v.clone()),
            "fabric" => p.fabric = Some(v.clone()),
            "server" => p.server = Some(v.clone()),
            "node" => p.node = Some(v.clone()),
            "port" => p.port = number(k, v)?,
            "ports" => p.cfg.ports = number(k, v)?,
            "port_state" => {
                p.init_set = true;
                p.init = match v.as_str() {
                    "active" => StandaloneInit::Active,
                    "init" => StandaloneInit::Init,
                    "down" => StandaloneInit::Down,
                    other => {
                        return Err(
                            format!("port_state={other}: expected active, init or down").into()
                        );
                    }
                }
            }
            "device_id" => p.cfg.device_id = number(k, v)?,
            "boot_ms" => p.cfg.init_delay = Duration::from_millis(number(k, v)?),
            "fw" => p.cfg.fw = parse_fw(v).map_err(|e| format!("fw={e}"))?,
            "node_guid" => {
                p.cfg.node_guid = number(k, v)?;
                p.node_guid_set = true;
            }
            other => {
                return Err(ModelOpenError::Params(format!(
                    "unknown parameter {other:?}"
                )));
            }
        }
    }
    Ok(p)
}

/// The fabric of a `fabric=SPEC` parameter: a generator spec whose own parameters are
/// separated by `/` (device strings reserve `,`). With no node= the HCA is the first CA in
/// the fabric's order (generated hosts come first: host-1).
fn generated_fabric(spec: &str, node: Option<&str>) -> Result<(Fabric, String), String> {
    let spec = spec.replace('/', ",");
    let fabric =
        sim::fabric::generator::generate(&spec).map_err(|e| format!("fabric={spec}: {e}"))?;
    let node = match node {
        Some(n) => n.to_owned(),
        None => fabric
            .node_ids()
            .find(|&n| fabric.node(n).kind() == sim::fabric::NodeType::Ca)
            .map(|n| fabric.name(n).to_owned())
            .ok_or_else(|| format!("fabric={spec} has no CA to put the HCA on"))?,
    };
    Ok((fabric, node))
}

/// A simulated ConnectX on the fabric of the server at `path`: device port `p` on port
/// `p.port + p - 1` of `p.node`, over its own link each.
fn open_on_server(p: Params, path: &str) -> Result<Mlx5, ModelOpenError> {
    let conflict = [
        (p.topology.is_some(), "topology="),
        (p.fabric.is_some(), "fabric="),
        (p.state.is_some(), "state="),
        (p.node_guid_set, "node_guid="),
        (p.init_set, "port_state="),
    ];
    if let Some((_, what)) = conflict.iter().find(|(set, _)| *set) {
        return Err(format!(
            "server= and {what} exclude each other: the fabric server holds the topology and \
             its state (give those to `hca sim serve`)"
        )
        .into());
    }
    if p.clock_set && p.clock != ClockMode::Real {
        return Err(
            "server= needs clock=real: programs sharing a fabric share the wall clock".into(),
        );
    }
    let Some(node) = &p.node else {
        return Err(ModelOpenError::Params(
            "server= needs node=NAME: the CA node of the server's fabric the HCA is".into(),
        ));
    };
    let sched = Arc::new(Scheduler::new(ClockMode::Real));
    let ports = p.cfg.ports;
    let dev = Mlx5::new(p.cfg, sched.clone()).map_err(|e| e.to_string())?;
    let sink = dev.sink();
    for dp in 1..=ports {
        let node_port = p
            .port
            .checked_add(dp - 1)
            .ok_or_else(|| format!("port={} + {} overflows", p.port, dp - 1))?;
        let target = RemoteTarget::new(path, node, node_port);
        let link = RemoteLink::connect(&target, dp, &sink, &sched).map_err(|e| e.to_string())?;
        dev.attach_port(dp, link).map_err(|e| e.to_string())?;
    }
    Ok(dev)
}

/// A simulated ConnectX as the parameters describe it, with the guard of its `state=FILE`.
fn open_mlx5(p: Params) -> Result<(Mlx5, Option<StateGuard>), ModelOpenError> {
    if let Some(path) = p.server.clone() {
        return open_on_server(p, &path).map(|dev| (dev, None));
    }
    if p.state.is_some() && p.topology.is_none() {
        return Err(ModelOpenError::Params(
            "state= needs topology= and node=: it saves a fabric's state".into(),
        ));
    }
    if p.init_set && (p.topology.is_some() || p.fabric.is_some()) {
        return Err(
            "port_state= applies to an HCA alone: on a fabric the ports start as the \
             fabric's links train (Init), and an SM (or state=FILE) makes them Active"
                .into(),
        );
    }
    if let Some(spec) = &p.fabric {
        if p.topology.is_some() {
            return Err("fabric= and topology= both give a fabric: keep one".into());
        }
        if p.node_guid_set {
            return Err("node_guid= applies to an HCA alone: on a fabric the node's GUID comes from the fabric".into());
        }
        let (fabric, node) = generated_fabric(spec, p.node.as_deref())?;
        let net = Network::new(fabric, Arc::new(Scheduler::new(p.clock)));
        return Mlx5::on_network(p.cfg, &net, node.as_str(), p.port)
            .map(|dev| (dev, None))
            .map_err(|e| e.to_string().into());
    }
    match (&p.topology, &p.node) {
        (None, None) => {
            if p.port != 1 {
                return Err(ModelOpenError::Params(
                    "port= needs topology= and node= (or fabric=): an HCA alone sits on port 1 of its own node"
                        .into()),
                );
            }
            Mlx5::standalone(p.cfg, p.clock, "sim-hca", p.init)
                .map(|(dev, _net)| (dev, None))
                .map_err(|e| e.to_string().into())
        }
        (Some(file), Some(node)) => {
            if p.node_guid_set {
                return Err("node_guid= applies to an HCA alone: on a topology the node's GUID comes from the file".into());
            }
            let fabric = Fabric::parse_file(file).map_err(|e| e.to_string())?;
            if fabric.node_count() == 0 {
                // Else the node lookup says only that `node` is not in it.
                return Err(format!(
                    "topology={file}: the file has no nodes (is it empty?): give a topology \
                     such as `hca discover -o FILE` or `hca sim gen SPEC -o FILE` writes"
                )
                .into());
            }
            let net = Network::new(fabric, Arc::new(Scheduler::new(p.clock)));
            let Some(state) = &p.state else {
                let dev = Mlx5::on_network(p.cfg, &net, node.as_str(), p.port)
                    .map_err(|e| e.to_string())?;
                return Ok((dev, None));
            };
            // Under the registry's lock from the check to the registration, so that two opens
            // of one file cannot both pass, and a save at a drop is not read half-way.
            let path = Path::new(state);
            let key = state_key(path);
            let mut reg = registry();
            if reg.live.iter().any(|e| e.key == key) {
                return Err(EmbedError::StateFileInUse {
                    path: path.to_owned(),
                }
                .to_string()
                .into());
            }
            if path.exists() {
                net.load_state(path).map_err(|e| e.to_string())?;
            }
            let dev =
                Mlx5::on_network(p.cfg, &net, node.as_str(), p.port).map_err(|e| e.to_string())?;
            // Registered only now: a device that failed to open leaves no state to save.
            reg.next_id += 1;
            let id = reg.next_id;
            reg.live.push(Persisted {
                id,
                key,
                path: path.to_owned(),
                net,
            });
            Ok((dev, Some(StateGuard { id })))
        }
        (Some(_), None) => Err(ModelOpenError::Params(
            "topology= needs node=NAME: the CA node the HCA is".into(),
        )),
        (None, Some(_)) => Err(ModelOpenError::Params(
            "node= needs topology=FILE, fabric=SPEC or server=PATH".into(),
        )),
    }
}

impl ModelProvider for Provider {
    fn open(&self, params: &[(String, String)]) -> Result<Arc<dyn DeviceModel>, ModelOpenError> {
        let p = parse(params)?;
        match p.model.as_str() {
            "mlx5" => {
                let (dev, state) = open_mlx5(p)?;
                Ok(Arc::new(SimModel {
                    device: Arc::new(dev),
                    _state: state,
                }))
            }
            "edu" => {
                let mlx5_only = params
                    .iter()
                    .any(|(k, _)| !matches!(k.as_str(), "model" | "clock"));
                if mlx5_only {
                    return Err("model=edu takes only clock=".into());
                }
                Ok(Arc::new(SimModel::new(Arc::new(sim::edu::Edu::new(
                    p.clock,
                )))))
            }
            other => Err(format!(
                "model={other}: the simulator has no such model (known: mlx5, edu)"
            )
            .into()),
        }
    }

    fn help(&self) -> &'static str {
        SIM_HELP
    }
}

/// Why a `sim:` device string could not be opened, where the reason is embed's own (the
/// simulator's reasons come as its messages).
#[derive(Debug, thiserror::Error)]
pub enum EmbedError {
    /// Another device of this process already uses the `state=` file.
    #[error(
        "state={} is already used by another simulated device of this process: each device \
         string builds its own copy of the fabric, so two devices on one state file would be \
         two fabrics, each saving over the other. Give each device its own state file, close \
         the first device before opening the second, or put both HCAs on one fabric with a \
         fabric server (`hca sim serve --topology FILE --state FILE`, then \
         sim:server=SOCKET,node=NAME)",
        .path.display()
    )]
    StateFileInUse {
        /// The file.
        path: PathBuf,
    },
}

/// A network opened with `state=FILE`, while the device on it is open.
struct Persisted {
    /// Which [`StateGuard`] owns it.
    id: u64,
    /// The file as given, for messages and saving.
    path: PathBuf,
    /// The file's canonical path, to find a second device naming it.
    key: PathBuf,
    net: Network,
}

/// The `state=FILE` networks of open devices, and what saving those of closed ones failed.
#[derive(Default)]
struct Registry {
    next_id: u64,
    live: Vec<Persisted>,
    /// Saves at a device's close that failed, reported by the next [`persist_states`].
    failed: Vec<(String, String)>,
}

fn registry() -> MutexGuard<'static, Registry> {
    static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
        next_id: 0,
        live: Vec::new(),
        failed: Vec::new(),
    });
    REGISTRY.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The file a `state=` path names, however it is spelt: its canonical path, or its
/// directory's joined to its name when the file does not exist yet.
fn state_key(path: &Path) -> PathBuf {
    if let Ok(p) = std::fs::canonicalize(path) {
        return p;
    }
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    match (std::fs::canonicalize(dir), path.file_name()) {
        (Ok(d), Some(name)) => d.join(name),
        _ => std::path::absolute(path).unwrap_or_else(|_| path.to_owned()),
    }
}

/// Owned by the model of a device opened with `state=FILE`: when the device goes away, its
/// network's state is saved to the file and the network leaves the registry.
struct StateGuard {
    id: u64,
}

impl Drop for StateGuard {
    fn drop(&mut self) {
        // Saved under the registry's lock, so that an open of the same file waits for it.
        let mut reg = registry();
        let Some(i) = reg.live.iter().position(|e| e.id == self.id) else {
            return;
        };
        let entry = reg.live.swap_remove(i);
        if let Err(e) = entry.net.save_state(&entry.path) {
            let path = entry.path.display().to_string();
            tracing::warn!("saving the simulated fabric's state to {path}: {e}");
            reg.failed.push((path, e.to_string()));
        }
    }
}

/// Save the state of every simulated fabric opened with `state=FILE` whose device is still
/// open to its file; returns each file with the result, and the failed saves of devices
/// closed since the last call (a device's fabric is saved when it is closed). Programs call
/// it when they exit (the umad library does, from `atexit`; so does `hca`).
pub fn persist_states() -> Vec<(String, Result<(), String>)> {
    let mut reg = registry();
    let mut out: Vec<(String, Result<(), String>)> = reg
        .failed
        .drain(..)
        .map(|(path, e)| (path, Err(e)))
        .collect();
    for e in &reg.live {
        let r = e.net.save_state(&e.path).map_err(|e| e.to_string());
        out.push((e.path.display().to_string(), r));
    }
    out
}

/// Make `sim:` device strings open simulated devices in this process.
pub fn install() {
    register_provider(Arc::new(Provider));
}

#[cfg(test)]
mod tests {
    use super::*;
    use driver::DeviceBackendExt;
    use sim::edu;

    #[test]
    fn sim_string_opens_the_edu_model_through_the_driver() {
        install();
        let dev = driver::open("sim:model=edu,clock=virtual").unwrap();
        assert_eq!(
            dev.pci_id(),
            PciId {
                vendor: edu::EDU_VENDOR,
                device: edu::EDU_DEVICE
            }
        );
        let bar = dev.map_region(0).unwrap();
        assert_eq!(bar.len(), 1 << 20);
        let id = bar.read32(edu::reg::ID);
        assert_eq!(
            id.swap_bytes(),
            edu::EDU_ID,
            "edu registers are little-endian"
        );
        assert!(!dev.bus_master().unwrap());
        dev.set_bus_master(true).unwrap();
        assert!(dev.bus_master().unwrap());
        let t = dev.now();
        dev.wait(t + Duration::from_secs(5));
        assert_eq!(dev.now(), t + Duration::from_secs(5), "virtual clock jumps");
    }

    #[test]
    fn plain_sim_is_a_connectx5_that_boots() {
        install();
        let dev = driver::open("sim:clock=virtual").unwrap();
        assert_eq!(
            dev.pci_id(),
            PciId {
                vendor: 0x15b3,
                device: 0x1017
            }
        );
        assert!(!dev.bus_master().unwrap());
        let bar = dev.map_region(0).unwrap();
        assert_eq!(bar.len(), 64 << 20);
        // Init segment registers are big-endian; Mmio::read32 converts.
        assert_eq!(
            bar.read32(0x000),
            (35 << 16) | 16,
            "fw_rev: minor << 16 | major"
        );
        assert_eq!(bar.read32(0x004) >> 16, 5, "cmdif revision");
        assert_eq!(
            bar.read32(0x1fc) >> 31,
            0,
            "a sim: device boots at once by default"
        );
        let dev = driver::open("sim:clock=virtual,boot_ms=10").unwrap();
        let bar = dev.map_region(0).unwrap();
        assert_eq!(bar.read32(0x1fc) >> 31, 1, "still initializing");
        let t = dev.now();
        dev.wait(t + Duration::from_millis(20));
        assert_eq!(bar.read32(0x1fc) >> 31, 0);
    }

    #[test]
    fn mlx5_parameters_shape_the_device() {
        install();
        let dev =
            driver::open("sim:model=mlx5,clock=virtual,device_id=0x101b,fw=20.40.1000,ports=2")
                .unwrap();
        assert_eq!(dev.pci_id().device, 0x101b);
        let bar = dev.map_region(0).unwrap();
        assert_eq!(bar.read32(0x000), (40 << 16) + 20, "20.40");
        assert_eq!(bar.read32(0x004) & 0xffff, 1000);
        driver::open("sim:clock=virtual,port_state=init,node_guid=0x1234").unwrap();
    }

    fn open_err(spec: &str) -> String {
        match driver::open(spec) {
            Ok(_) => panic!("{spec} opened"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn bad_parameters_are_refused_with_the_accepted_list() {
        install();
        let msg = open_err("sim:model=nope");
        assert!(msg.contains("model=nope"), "{msg}");
        let msg = open_err("sim:colour=blue");
        assert!(msg.contains("colour"), "{msg}");
        assert!(msg.contains("clock=real"), "{msg}");
        assert!(msg.contains("topology=FILE"), "{msg}");
        for (spec, says) in [
            ("sim:ports=3", "1 or 2 ports"),
            ("sim:fw=1.2", "MAJOR.MINOR.SUBMINOR"),
            ("sim:device_id=0x1ffff", "device_id"),
            ("sim:port_state=sleepy", "active, init or down"),
            ("sim:node=Hca1", "needs topology"),
            ("sim:topology=/nonexistent/x.net", "needs node"),
            ("sim:port=2", "needs topology"),
            ("sim:model=edu,ports=2", "only clock"),
        ] {
            let msg = open_err(spec);
            assert!(msg.contains(says), "{spec}: {msg}");
        }
    }

    #[test]
    fn the_parameter_list_comes_only_with_an_unknown_or_missing_parameter() {
        const LIST: &str = "accepted parameters:";
        install();
        for (spec, says) in [
            ("sim:colour=blue", "unknown parameter \"colour\""),
            ("sim:node=Hca1", "node= needs topology=FILE"),
            (
                "sim:topology=/nonexistent/x.net",
                "topology= needs node=NAME",
            ),
            ("sim:port=2", "port= needs topology="),
            ("sim:state=/nonexistent/s", "state= needs topology="),
        ] {
            let msg = open_err(spec);
            assert!(msg.contains(says) && msg.contains(LIST), "{spec}: {msg}");
        }
        for (spec, says) in [
            (
                "sim:topology=/nonexistent/x.net,node=Hca1",
                "/nonexistent/x.net",
            ),
            ("sim:clock=virtual,fabric=switch:hosts=2,node=Hca9", "Hca9"),
            (
                "sim:server=/nonexistent/sock,node=Hca1",
                "/nonexistent/sock",
            ),
            ("sim:clock=sometimes", "expected real or virtual"),
            ("sim:model=nope", "no such model"),
        ] {
            let msg = open_err(spec);
            assert!(msg.contains(says), "{spec}: {msg}");
            assert!(
                !msg.contains(LIST),
                "{spec}: the list buries the reason: {msg}"
            );
        }
    }

    #[test]
    fn port_state_is_refused_on_a_fabric() {
        install();
        for spec in [
            "sim:clock=virtual,fabric=switch:hosts=2,port_state=down",
            "sim:clock=virtual,topology=/nonexistent/x.net,node=Hca1,port_state=init",
        ] {
            let msg = open_err(spec);
            assert!(
                msg.contains("port_state= applies to an HCA alone"),
                "{spec}: {msg}"
            );
        }
    }

    #[test]
    fn a_topology_places_the_hca_on_its_node() {
        install();
        let path = std::env::temp_dir().join(format!("embed-mlx5-{}.net", std::process::id()));
        std::fs::write(
            &path,
            "Switch\t8 \"Switch1\"\n[1]\t\"Hca1\"[1]\n[2]\t\"Hca2\"[1]\n\n\
             Hca\t2 \"Hca1\"\n[1]\t\"Switch1\"[1]\n\n\
             Hca\t2 \"Hca2\"\n[1]\t\"Switch1\"[2]\n",
        )
        .unwrap();
        let file = path.display();
        driver::open(&format!("sim:clock=virtual,topology={file},node=Hca1")).unwrap();
        driver::open(&format!(
            "sim:clock=virtual,topology={file},node=Hca2,port=2"
        ))
        .unwrap();
        let msg = open_err(&format!("sim:topology={file},node=Switch1"));
        assert!(msg.contains("Switch"), "{msg}");
        let msg = open_err(&format!("sim:topology={file},node=Hca9"));
        assert!(msg.contains("Hca9"), "{msg}");
        let msg = open_err(&format!("sim:topology={file},node=Hca1,ports=2,port=2"));
        assert!(msg.contains("port"), "{msg}");
        std::fs::remove_file(&path).unwrap();
        let msg = open_err(&format!("sim:topology={file},node=Hca1"));
        assert!(msg.contains("embed-mlx5"), "the file is named: {msg}");
    }

    #[test]
    fn an_empty_topology_is_said_to_have_no_nodes() {
        install();
        let path = std::env::temp_dir().join(format!("embed-empty-{}.topo", std::process::id()));
        std::fs::write(&path, "# nothing here\n\n").unwrap();
        let msg = open_err(&format!("sim:topology={},node=host-1", path.display()));
        std::fs::remove_file(&path).unwrap();
        assert!(
            msg.contains("embed-empty") && msg.contains("the file has no nodes"),
            "{msg}"
        );
        assert!(!msg.contains("no node named"), "{msg}");
    }

    #[test]
    fn state_is_loaded_at_open_and_saved_by_persist_states() {
        install();
        let (dir, topo) = two_cas("state");
        // A state saved from the same topology with Hca2's LID set.
        let (state, spec) = hca2_lid_state(&dir, &topo);
        let dev = driver::open(&spec).unwrap();
        std::fs::remove_file(&state).unwrap();
        let saved = persist_states();
        let mine: Vec<_> = saved
            .iter()
            .filter(|(p, _)| *p == state.display().to_string())
            .collect();
        assert_eq!(mine.len(), 1, "{saved:?}");
        assert_eq!(mine[0].1, Ok(()));
        let text = std::fs::read_to_string(&state).unwrap();
        assert!(
            text.contains(" lid=7 "),
            "the loaded LID was saved again: {text}"
        );
        drop(dev);
        // A state from another fabric is refused at open.
        let other = dir.join("other.net");
        std::fs::write(&other, "Hca\t1 \"Hca9\"\n").unwrap();
        let msg = open_err(&format!(
            "sim:topology={},node=Hca9,state={}",
            other.display(),
            state.display()
        ));
        assert!(msg.contains("another fabric"), "{msg}");
        assert!(open_err("sim:state=/tmp/x").contains("state= needs topology="));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Registry entries of open devices using the state file `path`.
    fn live_for(path: &Path) -> usize {
        let key = state_key(path);
        registry().live.iter().filter(|e| e.key == key).count()
    }

    /// A directory with the two-CA topology `two.net`; returns it and the topology's path.
    fn two_cas(name: &str) -> (PathBuf, PathBuf) {
        let dir = std::env::temp_dir().join(format!("embed-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let topo = dir.join("two.net");
        std::fs::write(
            &topo,
            "Switch\t8 \"Switch1\"\n[1]\t\"Hca1\"[1]\n[2]\t\"Hca2\"[1]\n\n\
             Hca\t1 \"Hca1\"\n[1]\t\"Switch1\"[1]\n\n\
             Hca\t1 \"Hca2\"\n[1]\t\"Switch1\"[2]\n",
        )
        .unwrap();
        (dir, topo)
    }

    /// Saves in `dir` a state of the fabric `topo` with Hca2's LID set to 7; returns the state
    /// file and the spec that opens Hca1 with it.
    fn hca2_lid_state(dir: &Path, topo: &Path) -> (PathBuf, String) {
        let net = Network::new(
            Fabric::parse_file(topo).unwrap(),
            Arc::new(Scheduler::new(ClockMode::Virtual)),
        );
        let hca2 = net.port("Hca2", 1).unwrap();
        net.with_fabric_mut(|f| f.set_lid(hca2, 7, 0).unwrap());
        let state = dir.join("state");
        net.save_state(&state).unwrap();
        let spec = format!(
            "sim:clock=virtual,topology={},node=Hca1,state={}",
            topo.display(),
            state.display()
        );
        (state, spec)
    }

    #[test]
    fn a_failed_open_leaves_no_state_to_save() {
        install();
        let (dir, topo) = two_cas("failed-open");
        let state = dir.join("state");
        let msg = open_err(&format!(
            "sim:clock=virtual,topology={},node=Switch1,state={}",
            topo.display(),
            state.display()
        ));
        assert!(msg.contains("Switch"), "{msg}");
        assert_eq!(live_for(&state), 0, "not registered");
        let saved = persist_states();
        assert!(
            !saved.iter().any(|(p, _)| *p == state.display().to_string()),
            "{saved:?}"
        );
        assert!(
            !state.exists(),
            "no state file written for a device that never opened"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_closed_device_saves_its_state_and_leaves_the_registry() {
        install();
        let (dir, topo) = two_cas("closed");
        // A state with Hca2's LID set.
        let (state, spec) = hca2_lid_state(&dir, &topo);
        for _ in 0..5 {
            let dev = driver::open(&spec).unwrap();
            assert_eq!(live_for(&state), 1);
            std::fs::remove_file(&state).unwrap();
            drop(dev);
            assert_eq!(live_for(&state), 0, "a closed device leaves the registry");
            let text = std::fs::read_to_string(&state).expect("saved at the close");
            assert!(text.contains(" lid=7 "), "{text}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_second_device_on_one_state_file_is_refused_while_the_first_is_open() {
        install();
        let (dir, topo) = two_cas("second");
        let state = dir.join("state");
        let spec = |node: &str, state: &Path| {
            format!(
                "sim:clock=virtual,topology={},node={node},state={}",
                topo.display(),
                state.display()
            )
        };
        let first = driver::open(&spec("Hca1", &state)).unwrap();
        // However the path is spelt.
        let other_spelling = dir.join(".").join("state");
        let msg = open_err(&spec("Hca2", &other_spelling));
        assert!(
            msg.contains("already used by another simulated device")
                && msg.contains("hca sim serve"),
            "{msg}"
        );
        assert_eq!(live_for(&state), 1);
        // Another file is another fabric.
        let second = driver::open(&spec("Hca2", &dir.join("state2"))).unwrap();
        drop(first);
        drop(driver::open(&spec("Hca2", &other_spelling)).unwrap());
        drop(second);
        assert_eq!(live_for(&state), 0);
        assert!(state.exists() && dir.join("state2").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn example(name: &str) -> std::path::PathBuf {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../sim/tests/net-examples")
            .join(name)
    }

    #[test]
    fn server_places_the_hca_on_a_served_fabric() {
        use sim::net::remote::FabricServer;
        install();
        let dir = std::env::temp_dir().join(format!("embed-server-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let sock = dir.join("fabric.sock");
        let net = Network::new(
            Fabric::parse_file(example("net.2sw2path4hca")).unwrap(),
            Arc::new(Scheduler::new(ClockMode::Real)),
        );
        let server = FabricServer::start(net, &sock).unwrap();
        let s = sock.display();
        let one = driver::open(&format!("sim:server={s},node=Hca2")).unwrap();
        assert_eq!(one.pci_id().device, 0x1017);
        let two = driver::open(&format!("sim:server={s},node=Hca1,ports=2")).unwrap();
        assert_eq!(
            server.attached(),
            vec![
                ("Hca1".to_owned(), 1),
                ("Hca1".to_owned(), 2),
                ("Hca2".to_owned(), 1)
            ],
            "device port p on node port p"
        );
        let msg = open_err(&format!("sim:server={s},node=Hca2"));
        assert!(msg.contains("already has a device"), "{msg}");
        let msg = open_err(&format!("sim:server={s},node=Hca3,port=2,ports=2"));
        assert!(msg.contains("no port 3"), "{msg}");
        drop(one);
        drop(two);
        assert!(
            server.attached().is_empty(),
            "devices are detached when their drop returns"
        );
        // So the same node may be opened again at once.
        drop(driver::open(&format!("sim:server={s},node=Hca2")).unwrap());
        assert!(server.attached().is_empty());
        for (spec, says) in [
            (format!("sim:server={s}"), "needs node="),
            (
                format!("sim:server={s},node=Hca1,clock=virtual"),
                "clock=real",
            ),
            (
                format!("sim:server={s},node=Hca1,topology=x"),
                "server= and topology=",
            ),
            (
                format!("sim:server={s},node=Hca1,state=x"),
                "server= and state=",
            ),
            (
                format!("sim:server={s},node=Hca1,fabric=switch:hosts=2"),
                "server= and fabric=",
            ),
            (
                format!("sim:server={s},node=Hca1,port_state=down"),
                "server= and port_state=",
            ),
            (
                format!("sim:server={}/none.sock,node=Hca1", dir.display()),
                "hca sim serve",
            ),
        ] {
            let msg = open_err(&spec);
            assert!(msg.contains(says), "{spec}: {msg}");
        }
        server.shutdown();
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn serving_loads_the_state_and_saves_it_at_the_end() {
        let dir = std::env::temp_dir().join(format!("embed-serving-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let topo = example("net.2sw2path4hca");
        let state = dir.join("state");
        // A state with Hca3's LID set, from the same topology.
        let net = Network::new(
            Fabric::parse_file(&topo).unwrap(),
            Arc::new(Scheduler::new(ClockMode::Virtual)),
        );
        let p = net.port("Hca3", 1).unwrap();
        net.with_fabric_mut(|f| f.set_lid(p, 9, 0).unwrap());
        net.save_state(&state).unwrap();
        let opts = serve::ServeOptions {
            topology: topo.clone(),
            socket: dir.join("s.sock"),
            state: Some(state.clone()),
            seed: Some(7),
        };
        let serving = serve::Serving::start(&opts).unwrap();
        let lid = serving.server().network().with_fabric(|f| {
            f.port(f.port_id(f.node_by_name("Hca3").unwrap(), 1).unwrap())
                .lid()
        });
        assert_eq!(lid, 9, "loaded at start");
        assert!(opts.socket.exists());
        // Something changes while it serves: Hca4 gets a LID.
        let q = serving.server().network().port("Hca4", 1).unwrap();
        serving
            .server()
            .network()
            .with_fabric_mut(|f| f.set_lid(q, 11, 0).unwrap());
        serving.stop().unwrap();
        assert!(!opts.socket.exists(), "the socket is removed");
        let text = std::fs::read_to_string(&state).unwrap();
        assert!(
            text.contains(" lid=9 ") && text.contains(" lid=11 "),
            "{text}"
        );
        // A topology that does not parse.
        let bad = serve::ServeOptions {
            topology: dir.join("missing.net"),
            ..opts
        };
        let e = serve::Serving::start(&bad).unwrap_err();
        assert!(e.to_string().contains("missing.net"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_generated_fabric_places_the_hca_on_its_first_host() {
        install();
        let guid_of = |spec: &str| {
            let dev = driver::open(spec).unwrap();
            let hca = driver::open_hca(dev).unwrap();
            let guid = hca.info().node_guid;
            hca.close().unwrap();
            guid
        };
        // ibsim's default CA GUIDs: 0x100000 for the first CA, each taking ports + 1 GUIDs.
        assert_eq!(
            guid_of("sim:clock=virtual,fabric=fat-tree:leaves=2/hosts=2/spines=1"),
            0x100000
        );
        assert_eq!(
            guid_of("sim:clock=virtual,fabric=fat-tree:leaves=2/hosts=2/spines=1,node=host-3"),
            0x100004
        );
        for (spec, says) in [
            ("sim:fabric=fat-tree:leaves=2", "fabric=fat-tree:leaves=2"),
            ("sim:fabric=switch:hosts=1,topology=/x", "keep one"),
            ("sim:fabric=switch:hosts=1,node=switch-1", "Switch"),
            ("sim:fabric=switch:hosts=1,node_guid=0x5", "node_guid="),
        ] {
            let msg = open_err(spec);
            assert!(msg.contains(says), "{spec}: {msg}");
        }
    }

    #[test]
    fn msi_reaches_an_eventfd() {
        let device = Arc::new(edu::Edu::new(ClockMode::Virtual));
        let backend = backend_for(device.clone(), "sim");
        let efd = EventFd::new().unwrap();
        driver::DeviceBackend::set_irqs(backend.as_ref(), IrqIndex::Msi, 0, &[&efd]).unwrap();
        let bar = driver::DeviceBackend::map_region(backend.as_ref(), 0).unwrap();
        bar.write32(edu::reg::IRQ_RAISE, 0x40u32.swap_bytes());
        assert_eq!(efd.take().unwrap(), 1);
    }
}

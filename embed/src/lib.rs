//! The one crate that sees both the driver and the simulator: it adapts the simulator's device
//! models to the driver's `DeviceModel` interface and registers them, so that a program linking
//! this crate can open `sim:` device strings. Only programs (tools, umad, tests) depend on it.
//!
//! Call [`install`] once at start-up; then `driver::open("sim")` (or `sim:KEY=VALUE,...`)
//! builds a simulated device. Tests that want to reach into the model (fault injection) build
//! the model themselves and wrap it with [`backend_for`].

use std::sync::Arc;
use std::time::Duration;

use dma::DmaMapper;
use driver::backend::{IrqIndex, IrqInfo, PciId, RegionInfo, region};
use driver::emulated::{DeviceModel, EmulatedBackend, ModelProvider, register_provider};
use driver::eventfd::EventFd;
use sim::{ClockMode, Device, IrqKind};

/// The parameters `sim:` device strings accept.
pub const SIM_HELP: &str = "\
  model=edu        which device to simulate (default edu; QEMU's edu teaching device)
  clock=real       real (default; time is the wall clock) or virtual (time moves only when
                   the driver waits: deterministic and instant, for tests)";

/// Adapts a simulator [`Device`] to the driver's [`DeviceModel`].
pub struct SimModel<D: Device> {
    device: Arc<D>,
}

impl<D: Device> SimModel<D> {
    /// Wrap `device`.
    pub fn new(device: Arc<D>) -> Self {
        SimModel { device }
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

impl ModelProvider for Provider {
    fn open(&self, params: &[(String, String)]) -> Result<Arc<dyn DeviceModel>, String> {
        let mut model = "edu".to_string();
        let mut clock = ClockMode::Real;
        for (k, v) in params {
            match k.as_str() {
                "model" => model.clone_from(v),
                "clock" => {
                    clock = match v.as_str() {
                        "real" => ClockMode::Real,
                        "virtual" => ClockMode::Virtual,
                        other => return Err(format!("clock={other}: expected real or virtual")),
                    }
                }
                other => return Err(format!("unknown parameter {other:?}")),
            }
        }
        match model.as_str() {
            "edu" => Ok(Arc::new(SimModel::new(Arc::new(sim::edu::Edu::new(clock))))),
            other => Err(format!(
                "model={other}: the simulator has no such model (known: edu)"
            )),
        }
    }

    fn help(&self) -> &'static str {
        SIM_HELP
    }
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
        let dev = driver::open("sim:clock=virtual").unwrap();
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
    fn bad_parameters_are_refused_with_the_accepted_list() {
        install();
        let Err(err) = driver::open("sim:model=nope") else {
            panic!("expected an error");
        };
        let msg = err.to_string();
        assert!(msg.contains("model=nope"), "{msg}");
        assert!(msg.contains("clock=real"), "{msg}");
        let Err(err) = driver::open("sim:colour=blue") else {
            panic!("expected an error");
        };
        assert!(err.to_string().contains("colour"));
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

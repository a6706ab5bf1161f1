//! The emulated backend: a PCI function implemented by an in-process device model.
//!
//! Register reads and writes reach the model directly (trap and emulate); the model reads and
//! writes DMA memory only through its own IOMMU, which it hands out as the backend's
//! [`DmaMapper`]. The driver never names a model: the simulator links itself in through
//! [`register_provider`], and a `sim:` device string selects it at run time.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock, RwLock};
use std::time::Duration;

use dma::DmaMapper;

use crate::backend::{DeviceBackend, IrqIndex, IrqInfo, PciId, RegionInfo, region};
use crate::error::DriverError;
use crate::eventfd::EventFd;
use crate::mmio::Mmio;

/// A device model: the "hardware" of an emulated PCI function.
///
/// All register and config accesses carry bytes exactly as they cross the PCI bus (device
/// byte order), so the model sees what real hardware would.
pub trait DeviceModel: Send + Sync {
    /// Vendor and device ID.
    fn pci_id(&self) -> PciId;

    /// Regions: BARs with their sizes, and the config space.
    fn regions(&self) -> Vec<RegionInfo>;

    /// A read of `data.len()` bytes (4 or 8) at `offset` of BAR `bar`.
    fn mmio_read(&self, bar: u8, offset: u64, data: &mut [u8]);

    /// A write of `data.len()` bytes (4 or 8) at `offset` of BAR `bar`.
    fn mmio_write(&self, bar: u8, offset: u64, data: &[u8]);

    /// A read of configuration space.
    fn config_read(&self, offset: u64, data: &mut [u8]);

    /// A write of configuration space.
    fn config_write(&self, offset: u64, data: &[u8]);

    /// Interrupt indexes the model offers.
    fn irq_info(&self, index: IrqIndex) -> IrqInfo;

    /// Signal `fds[i]` for vector `start + i` of `index` from now on (empty `fds`: stop).
    fn set_irqs(&self, index: IrqIndex, start: u32, fds: Vec<EventFd>);

    /// Function-level reset; `false` if the model has none.
    fn reset(&self) -> bool;

    /// The model's IOMMU, through which the driver maps DMA memory for it.
    fn dma_mapper(&self) -> Arc<dyn DmaMapper>;

    /// The model's clock.
    fn now(&self) -> Duration;

    /// Run the model until `deadline` or until it raises an interrupt or writes a completion.
    fn run_until(&self, deadline: Duration);
}

/// Something that builds device models from the parameters of a `sim:` device string.
pub trait ModelProvider: Send + Sync {
    /// Build a model from `key=value` parameters (in the order given).
    fn open(&self, params: &[(String, String)]) -> Result<Arc<dyn DeviceModel>, ModelOpenError>;

    /// One line per accepted parameter, for error messages and `--help`.
    fn help(&self) -> &'static str;
}

/// Why a [`ModelProvider`] did not open a model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelOpenError {
    /// An unknown parameter, or one that another needs and is missing: the message comes with
    /// the list of accepted parameters ([`ModelProvider::help`]).
    Params(String),
    /// Anything else (a bad value, a file, a node, a server): the message says what to fix.
    Open(String),
}

impl From<String> for ModelOpenError {
    fn from(reason: String) -> Self {
        ModelOpenError::Open(reason)
    }
}

impl From<&str> for ModelOpenError {
    fn from(reason: &str) -> Self {
        ModelOpenError::Open(reason.to_owned())
    }
}

static PROVIDER: OnceLock<RwLock<Option<Arc<dyn ModelProvider>>>> = OnceLock::new();

/// Make `sim:` device strings open models from `provider` in this process.
/// A later call replaces the earlier provider.
pub fn register_provider(provider: Arc<dyn ModelProvider>) {
    *PROVIDER
        .get_or_init(|| RwLock::new(None))
        .write()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(provider);
}

/// The registered provider, if a simulator was linked in.
pub fn provider() -> Option<Arc<dyn ModelProvider>> {
    PROVIDER.get().and_then(|p| {
        p.read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    })
}

/// Failures of the host side of an emulated function, for tests: what the VFIO kernel
/// interface can refuse on a live function, which no device model can make happen (a model
/// only sees the accesses that reach it).
#[derive(Debug, Default)]
pub struct BackendFaults {
    config_writes: AtomicBool,
    reset: AtomicBool,
}

impl BackendFaults {
    /// While `on`, every config-space write fails with an I/O error and never reaches the
    /// model (as a VFIO `pwrite` on the config region can fail): turning bus mastering off
    /// then fails on a function that still answers.
    pub fn fail_config_writes(&self, on: bool) {
        self.config_writes.store(on, Ordering::SeqCst);
    }

    /// While `on`, [`DeviceBackend::reset`] fails with an I/O error and the model is not
    /// reset (as `VFIO_DEVICE_RESET` can fail).
    pub fn fail_reset(&self, on: bool) {
        self.reset.store(on, Ordering::SeqCst);
    }

    fn injected(what: &str) -> DriverError {
        DriverError::Io {
            what: format!("{what} (fault injected by the test)"),
            source: std::io::Error::from_raw_os_error(libc::EIO),
        }
    }
}

/// A [`DeviceBackend`] over a [`DeviceModel`].
pub struct EmulatedBackend {
    model: Arc<dyn DeviceModel>,
    describe: String,
    /// See [`DeviceBackend::needs_reset`].
    needs_reset: crate::backend::ResetMark,
    faults: BackendFaults,
}

impl EmulatedBackend {
    /// Wrap `model`; `describe` is the device string shown to users.
    pub fn new(model: Arc<dyn DeviceModel>, describe: impl Into<String>) -> Self {
        EmulatedBackend {
            model,
            describe: describe.into(),
            needs_reset: crate::backend::ResetMark::default(),
            faults: BackendFaults::default(),
        }
    }

    /// The host-side failures a test can inject ([`BackendFaults`]).
    pub fn faults(&self) -> &BackendFaults {
        &self.faults
    }

    /// Open a `sim:` device through the registered provider.
    pub fn open(
        params: &[(String, String)],
        describe: impl Into<String>,
    ) -> Result<Self, DriverError> {
        let provider = provider().ok_or(DriverError::NoSimulator)?;
        let model = provider.open(params).map_err(|e| match e {
            ModelOpenError::Params(reason) => DriverError::SimParams {
                reason,
                help: provider.help(),
            },
            ModelOpenError::Open(reason) => DriverError::SimOpen { reason },
        })?;
        Ok(EmulatedBackend::new(model, describe))
    }

    /// The model behind this backend.
    pub fn model(&self) -> &Arc<dyn DeviceModel> {
        &self.model
    }
}

impl DeviceBackend for EmulatedBackend {
    fn describe(&self) -> String {
        self.describe.clone()
    }

    fn pci_id(&self) -> PciId {
        self.model.pci_id()
    }

    fn region_info(&self, index: u32) -> Result<RegionInfo, DriverError> {
        self.model
            .regions()
            .into_iter()
            .find(|r| r.index == index)
            .ok_or(DriverError::NoRegion { index })
    }

    fn map_region(&self, index: u32) -> Result<Mmio, DriverError> {
        let info = self.region_info(index)?;
        if index >= region::ROM || info.size == 0 || !info.mmap {
            return Err(DriverError::NoRegion { index });
        }
        Ok(Mmio::emulated(self.model.clone(), index as u8, info.size))
    }

    fn config_read(&self, offset: u64, data: &mut [u8]) -> Result<(), DriverError> {
        self.model.config_read(offset, data);
        Ok(())
    }

    fn config_write(&self, offset: u64, data: &[u8]) -> Result<(), DriverError> {
        if self.faults.config_writes.load(Ordering::SeqCst) {
            return Err(BackendFaults::injected(&format!(
                "writing {} bytes of config space at {offset:#x}",
                data.len()
            )));
        }
        self.model.config_write(offset, data);
        Ok(())
    }

    fn irq_info(&self, index: IrqIndex) -> Result<IrqInfo, DriverError> {
        Ok(self.model.irq_info(index))
    }

    fn set_irqs(&self, index: IrqIndex, start: u32, fds: &[&EventFd]) -> Result<(), DriverError> {
        let info = self.model.irq_info(index);
        if start as usize + fds.len() > info.count as usize {
            return Err(DriverError::IrqRange {
                index,
                start,
                count: fds.len() as u32,
                available: info.count,
            });
        }
        let owned = fds
            .iter()
            .map(|f| f.try_clone())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| DriverError::Io {
                what: "dup of an interrupt eventfd".into(),
                source: e,
            })?;
        self.model.set_irqs(index, start, owned);
        Ok(())
    }

    fn disable_irqs(&self, index: IrqIndex) -> Result<(), DriverError> {
        self.model.set_irqs(index, 0, Vec::new());
        Ok(())
    }

    fn reset(&self) -> Result<bool, DriverError> {
        if self.faults.reset.load(Ordering::SeqCst) {
            return Err(BackendFaults::injected("function reset"));
        }
        Ok(self.model.reset())
    }

    fn needs_reset(&self) -> Option<String> {
        self.needs_reset.get()
    }

    fn mark_needs_reset(&self, reason: Option<String>) {
        self.needs_reset.set(reason);
    }

    fn dma_mapper(&self) -> Arc<dyn DmaMapper> {
        self.model.dma_mapper()
    }

    fn now(&self) -> Duration {
        self.model.now()
    }

    fn wait(&self, deadline: Duration) {
        self.model.run_until(deadline);
    }
}

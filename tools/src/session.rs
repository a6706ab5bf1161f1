//! A device opened for a MAD tool: the device string opened, the HCA brought up, and the MAD
//! layer opened on one of its ports; closed in the reverse order.

use std::sync::Arc;

use driver::verbs::Hca;

use crate::EngineError;

/// The device `hca discover` and `hca bench` use when none is given: the simulator with a
/// generated fabric (a two-level fat tree of 4 leaves of 4 hosts and 2 spines, 4xHDR links),
/// the HCA being its first host.
pub const DEFAULT_DEVICE: &str = "sim:fabric=fat-tree:leaves=4/hosts=4/spines=2/link=4xHDR";

/// An HCA brought up with the MAD layer open on one port.
pub struct Session {
    /// The device string it was opened from.
    pub device: String,
    /// The HCA.
    pub hca: Arc<dyn Hca>,
    /// The MAD layer on the chosen port.
    pub port: mad::Port,
}

impl Session {
    /// Open `device` (`sim...` or `vfio:BDF`), bring its HCA up, and open the MAD layer on
    /// port `port`.
    pub fn open(device: &str, port: u8) -> Result<Session, EngineError> {
        Session::open_with(device, port, &driver::OpenOptions::default())
    }

    /// [`Session::open`] with explicit sysfs and `/dev` locations for `vfio:` devices.
    pub fn open_with(
        device: &str,
        port: u8,
        options: &driver::OpenOptions,
    ) -> Result<Session, EngineError> {
        let backend = driver::open_with(device, options).map_err(|source| EngineError::Open {
            device: device.to_owned(),
            source,
        })?;
        let hca = driver::open_hca(backend).map_err(|source| EngineError::BringUp {
            device: device.to_owned(),
            source,
        })?;
        let Some(hw) = hca.port(port) else {
            let ports = hca.info().ports;
            // Nothing else was opened on it: close quietly, the port error is the news.
            let _ = hca.close();
            return Err(EngineError::NoSuchPort {
                device: device.to_owned(),
                port,
                ports,
            });
        };
        let port = match mad::open(hw) {
            Ok(p) => p,
            Err(e) => {
                let _ = hca.close();
                return Err(e.into());
            }
        };
        Ok(Session {
            device: device.to_owned(),
            hca,
            port,
        })
    }

    /// Close the HCA (the MAD layer's buffers come back as it is dropped after).
    pub fn close(self) -> Result<(), EngineError> {
        let Session {
            device, hca, port, ..
        } = self;
        let r = hca.close();
        drop(port);
        r.map_err(|source| EngineError::Close { device, source })
    }
}

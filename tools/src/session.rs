//! A device opened for a MAD tool: the device string opened, the HCA brought up, and the MAD
//! layer opened on every one of its ports (the one the tool works from, and the others, whose
//! own SMA must answer SMPs that reach the HCA through them); closed in the reverse order.

use std::sync::Arc;
use std::time::Duration;

use driver::verbs::Hca;

use crate::EngineError;

/// The device `hca discover` and `hca bench` use when none is given: the simulator with a
/// generated fabric (a two-level fat tree of 4 leaves of 4 hosts and 2 spines, 4xHDR links),
/// the HCA being its first host.
pub const DEFAULT_DEVICE: &str = "sim:fabric=fat-tree:leaves=4/hosts=4/spines=2/link=4xHDR";

/// How long an engine that also keeps [`Session::others`] answering waits for its own events
/// at most before it gives them a pass: the most an SMP that enters the HCA by another port
/// waits for its answer.
pub const OTHERS_SLICE: Duration = Duration::from_millis(1);

/// An HCA brought up with the MAD layer open on each of its ports.
pub struct Session {
    /// The device string it was opened from.
    pub device: String,
    /// The HCA.
    pub hca: Arc<dyn Hca>,
    /// The MAD layer on the chosen port.
    pub port: mad::Port,
    /// The MAD layer on the HCA's other ports, in port order. Nothing is sent from them, but
    /// an SMP that reaches the HCA on one of them (a walk that comes back into the HCA, a
    /// bench route that ends there) is answered by that port's SMA, which runs in that port's
    /// progress loop: whoever waits on [`Session::port`] must also drive these ([`drive`]),
    /// as the kernel's MAD layer serves every port of a device.
    pub others: Vec<mad::Port>,
}

/// One pass of the progress loop of each port of `others` (repeated while it finds work,
/// a few times at most), without blocking. An engine waiting on its own port calls it
/// between waits of at most [`OTHERS_SLICE`].
///
/// Why not a progress thread per port: on the simulator's virtual clock, time moves when a
/// thread waits in the device, and it is meant for one driving thread: a second thread
/// sleeping in the device would let time jump past the first one's timers while an SMP
/// waits to be answered. Driving them from the waiting thread keeps one driving thread.
pub fn drive(others: &[mad::Port]) {
    for p in others {
        for _ in 0..8 {
            if p.progress() == 0 {
                break;
            }
        }
    }
}

/// How long an engine waits for its own events before it drives `others` again.
pub(crate) fn wait_slice(others: &[mad::Port], alone: Duration) -> Duration {
    if others.is_empty() {
        alone
    } else {
        OTHERS_SLICE.min(alone)
    }
}

impl Session {
    /// Open `device` (`sim...` or `vfio:BDF`), bring its HCA up, and open the MAD layer on
    /// every port, `port` being the one the tool works from.
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
        let ports = hca.info().ports;
        if hca.port(port).is_none() {
            // Nothing else was opened on it: close quietly, the port error is the news.
            let _ = hca.close();
            return Err(EngineError::NoSuchPort {
                device: device.to_owned(),
                port,
                ports,
            });
        }
        let mut chosen = None;
        let mut others = Vec::new();
        for n in 1..=ports {
            let Some(hw) = hca.port(n) else { continue };
            match mad::open(hw) {
                Ok(p) if n == port => chosen = Some(p),
                Ok(p) => others.push(p),
                Err(e) => {
                    // The HCA first, then the ports opened so far (the MAD layer's order:
                    // their buffers come back once the device can no longer write them).
                    let _ = hca.close();
                    drop(chosen);
                    drop(others);
                    return Err(e.into());
                }
            }
        }
        let Some(port) = chosen else {
            let _ = hca.close();
            return Err(EngineError::NoSuchPort {
                device: device.to_owned(),
                port,
                ports,
            });
        };
        Ok(Session {
            device: device.to_owned(),
            hca,
            port,
            others,
        })
    }

    /// Close the HCA, then drop the MAD layer's ports: their receive buffers, posted to the
    /// device until it is closed, come back only then (see `mad::Port`'s drop).
    pub fn close(self) -> Result<(), EngineError> {
        let Session {
            device,
            hca,
            port,
            others,
        } = self;
        let r = hca.close();
        drop(others);
        drop(port);
        r.map_err(|source| EngineError::Close { device, source })
    }
}

//! A fabric server as a program runs one (`hca sim serve`): the network of a topology file,
//! its SMA state loaded from a file and saved back at the end, a fault seed, served on a
//! socket ([`Serving`]); and the exit signals, taken synchronously ([`ExitSignals`]) so
//! that SIGINT, SIGTERM and SIGHUP end the server cleanly (clients detached, state saved, socket
//! removed) rather than killing it.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use sim::fabric::Fabric;
use sim::net::Network;
use sim::net::remote::{FabricServer, RemoteError};
use sim::{ClockMode, Scheduler};

/// Why a fabric server could not start or stop cleanly.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The topology file could not be read or parsed.
    #[error("topology {path}: {message}")]
    Topology {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// The state file could not be loaded or saved.
    #[error("{0}")]
    State(#[from] sim::net::NetError),
    /// The state file cannot be written, found when the server starts rather than when it
    /// stops, with the state it was to keep.
    #[error(
        "cannot save the fabric's state to {}: {source} (it is saved there when the server stops; give --state a file in a directory you can write)",
        path.display()
    )]
    StateNotWritable {
        /// The state file.
        path: PathBuf,
        /// Why the save failed (boxed: the variant would be the largest by far).
        #[source]
        source: Box<sim::net::NetError>,
    },
    /// The socket could not be served.
    #[error("{0}")]
    Server(#[from] RemoteError),
    /// The exit signals could not be set up or waited for.
    #[error("signal handling: {0}")]
    Signals(#[source] std::io::Error),
}

/// What a fabric server is started with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServeOptions {
    /// The topology file (ibnetdiscover/ibsim format).
    pub topology: PathBuf,
    /// Where the socket goes.
    pub socket: PathBuf,
    /// The SMA state: loaded at start if the file exists, saved at the end.
    pub state: Option<PathBuf>,
    /// The seed of the fault generator (the network's default otherwise).
    pub seed: Option<u64>,
}

/// A fabric server started from [`ServeOptions`].
#[derive(Debug)]
pub struct Serving {
    server: FabricServer,
    net: Network,
    state: Option<PathBuf>,
}

impl Serving {
    /// Builds the network (real time), loads the state and saves it back (so that a state
    /// file that cannot be written is refused now, not at the stop), and serves it. A fabric
    /// without a CA is refused: clients attach to CA ports, so nothing could use it.
    pub fn start(opts: &ServeOptions) -> Result<Serving, ServeError> {
        let topology = |message: String| ServeError::Topology {
            path: opts.topology.clone(),
            message,
        };
        let fabric = Fabric::parse_file(&opts.topology).map_err(|e| topology(e.to_string()))?;
        let cas = fabric
            .node_ids()
            .filter(|&n| fabric.node(n).kind() == sim::fabric::NodeType::Ca)
            .count();
        if fabric.node_count() == 0 {
            return Err(topology("the file has no nodes".into()));
        }
        if cas == 0 {
            return Err(topology(format!(
                "no CA among its {} nodes: programs attach to a CA's port (node=NAME), so \
                 none could use this fabric",
                fabric.node_count()
            )));
        }
        let net = Network::new(fabric, Arc::new(Scheduler::new(ClockMode::Real)));
        if let Some(state) = opts.state.as_deref() {
            if state.exists() {
                net.load_state(state)?;
            }
            net.save_state(state)
                .map_err(|source| ServeError::StateNotWritable {
                    path: state.to_path_buf(),
                    source: Box::new(source),
                })?;
        }
        if let Some(seed) = opts.seed {
            net.reseed(seed);
        }
        let server = FabricServer::start(net.clone(), &opts.socket)?;
        Ok(Serving {
            server,
            net,
            state: opts.state.clone(),
        })
    }

    /// The server.
    pub fn server(&self) -> &FabricServer {
        &self.server
    }

    /// The socket's path.
    pub fn socket(&self) -> &Path {
        self.server.path()
    }

    /// Stops the server (every client detached, so IsSM bits they held are cleared, the
    /// socket removed), then saves the state if a state file was given.
    pub fn stop(self) -> Result<(), ServeError> {
        self.server.shutdown();
        if let Some(state) = &self.state {
            self.net.save_state(state)?;
        }
        Ok(())
    }
}

/// SIGINT, SIGTERM and SIGHUP (the terminal of the session that started the server closed),
/// blocked in the thread that made this (and in every thread it starts
/// afterwards) and taken with `sigtimedwait`: a program makes it first, before any thread,
/// then waits on it.
#[derive(Debug)]
pub struct ExitSignals {
    set: libc::sigset_t,
}

impl ExitSignals {
    /// Blocks SIGINT, SIGTERM and SIGHUP in the calling thread. Threads started before keep their
    /// mask and would still die of the signals: call this before starting any.
    pub fn block() -> Result<ExitSignals, ServeError> {
        // SAFETY: a zeroed sigset_t is a valid argument for sigemptyset, which initialises it.
        let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: `set` is a live sigset_t owned by this frame; the calls only write it.
        let ok = unsafe {
            libc::sigemptyset(&raw mut set) == 0
                && libc::sigaddset(&raw mut set, libc::SIGINT) == 0
                && libc::sigaddset(&raw mut set, libc::SIGTERM) == 0
                && libc::sigaddset(&raw mut set, libc::SIGHUP) == 0
        };
        if !ok {
            return Err(ServeError::Signals(std::io::Error::last_os_error()));
        }
        // SAFETY: `set` is initialised; the old mask is not asked for (null).
        let rc =
            unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &raw const set, std::ptr::null_mut()) };
        if rc != 0 {
            return Err(ServeError::Signals(std::io::Error::from_raw_os_error(rc)));
        }
        Ok(ExitSignals { set })
    }

    /// Waits up to `timeout` for SIGINT, SIGTERM or SIGHUP; returns its number, or `None` when the
    /// time passed (or another signal interrupted the wait).
    pub fn wait(&self, timeout: Duration) -> Result<Option<i32>, ServeError> {
        let ts = libc::timespec {
            tv_sec: libc::time_t::try_from(timeout.as_secs()).unwrap_or(libc::time_t::MAX),
            tv_nsec: libc::c_long::from(timeout.subsec_nanos() as i32),
        };
        // SAFETY: `self.set` is an initialised sigset_t and `ts` a live timespec; the siginfo
        // is not asked for (null).
        let sig =
            unsafe { libc::sigtimedwait(&raw const self.set, std::ptr::null_mut(), &raw const ts) };
        if sig > 0 {
            return Ok(Some(sig));
        }
        let e = std::io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EAGAIN | libc::EINTR) => Ok(None),
            _ => Err(ServeError::Signals(e)),
        }
    }
}

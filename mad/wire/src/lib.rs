//! MAD wire formats, smoltcp style: for each layout a typed view over a byte buffer
//! (`Foo<T: AsRef<[u8]>>`, built with `new_checked`, one getter and one setter per field) and a
//! plain `FooRepr` to parse into and emit from. Pure data, no I/O: shared by the MAD layer and
//! by the simulated fabric's SMA/PMA, which must build and read the same requests and responses.
//!
//! Everything on the wire is big-endian and is converted in the field accessors, nowhere else.
//! Every view checks its length once, in `new_checked`, so no accessor can index out of bounds;
//! every parser reads untrusted bytes and fails with an [`Error`], never a panic. Setters and
//! `emit` drop the bits of a value beyond its field's width.
//!
//! Modules:
//! - constants: [`class`] (base versions, management classes), [`method`], [`status`] (and
//!   the directed-route D bit), [`attr_id`] (SM and PMA attribute IDs);
//! - MAD headers: [`header`] (the common 24-byte header, `is_response`, `make_response`),
//!   [`smp`] (LID-routed and directed-route SMPs), [`rmpp`], [`sa`], [`vendor`] (range 2),
//!   [`perf`] (PMA);
//! - attributes: [`attr`] (NodeInfo, NodeDescription, PortInfo, SwitchInfo, forwarding tables,
//!   P_Key and GUID tables, SL-to-VL and VL arbitration tables, SMInfo, PortCounters,
//!   ClassPortInfo, Notice).
//!
//! Layouts follow IBA vol. 1 as written down in the kernel's `ib_mad.h`, `ib_smi.h`,
//! `ib_pma.h`, OpenSM's `ib_types.h` and libibmad's `fields.c`; tests compare them with bytes
//! written out by hand from those tables and with MADs recorded from ibsim.

mod error;
mod field;
mod macros;

pub mod attr;
pub mod attr_id;
pub mod class;
pub mod header;
pub mod method;
pub mod perf;
pub mod rmpp;
pub mod sa;
pub mod smp;
pub mod status;
pub mod vendor;

pub use error::{Error, Result};
pub use header::{HEADER_LEN, MAD_LEN, Mad, MadHeaderRepr};
pub use smp::{DirectedRoute, Direction, PERMISSIVE_LID, Smp, SmpRepr, SmpRoute};

//! Subnet management packets (IBA 14.2.1; kernel `struct ib_smp`), LID-routed (class 0x01)
//! and directed-route (class 0x81).
//!
//! | Offset | LID-routed | Directed-route |
//! |---|---|---|
//! | 0–23 | common header | common header; byte 6 HopPointer, byte 7 HopCount, Status bit 15 = D |
//! | 24–31 | M_Key | M_Key |
//! | 32–33 | reserved | DrSLID |
//! | 34–35 | reserved | DrDLID |
//! | 36–63 | reserved | reserved |
//! | 64–127 | SMP data | SMP data |
//! | 128–191 | reserved | InitialPath\[64\] (entry 0 unused) |
//! | 192–255 | reserved | ReturnPath\[64\] |

use crate::error::{Error, Result, check_len};
use crate::field::{set_u16_at, set_u64_at, u16_at, u64_at};
use crate::header::{MAD_LEN, Mad};
use crate::{class, method, status};

/// Length of an SMP: always a whole MAD.
pub const SMP_LEN: usize = MAD_LEN;
/// Length of the SMP data (the attribute).
pub const DATA_LEN: usize = 64;
/// Entries of InitialPath and ReturnPath.
pub const PATH_LEN: usize = 64;
/// Largest valid HopCount (IBA C14-6).
pub const MAX_HOP_COUNT: u8 = 63;
/// The permissive LID: DrSLID/DrDLID of a pure directed-route SMP, and its UD DLID.
pub const PERMISSIVE_LID: u16 = 0xFFFF;

mod field {
    use core::ops::Range;
    pub const HOP_POINTER: usize = 6;
    pub const HOP_COUNT: usize = 7;
    pub const M_KEY: usize = 24;
    pub const DR_SLID: usize = 32;
    pub const DR_DLID: usize = 34;
    pub const RESERVED: Range<usize> = 36..64;
    pub const DATA: Range<usize> = 64..128;
    pub const INITIAL_PATH: Range<usize> = 128..192;
    pub const RETURN_PATH: Range<usize> = 192..256;
}

/// Direction of a directed-route SMP: the D bit of its Status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    /// D = 0: on its way from the requester along InitialPath.
    Outbound,
    /// D = 1: a response (or returning SMP) on its way back along ReturnPath.
    Returning,
}

/// A typed view of a 256-byte SMP buffer.
///
/// The directed-route accessors read the bytes that LID-routed SMPs reserve; check
/// [`Smp::is_directed_route`] (or parse an [`SmpRepr`]) before trusting them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Smp<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Smp<T> {
    /// Views `buffer` as an SMP, checking that it holds the whole 256 bytes.
    pub fn new_checked(buffer: T) -> Result<Self> {
        check_len("an SMP", buffer.as_ref(), SMP_LEN)?;
        Ok(Self { buffer })
    }

    /// Gives the buffer back.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The common header.
    pub fn header(&self) -> Mad<&[u8]> {
        Mad::new_unchecked(self.buffer.as_ref())
    }

    /// Whether MgmtClass is directed-route (0x81).
    pub fn is_directed_route(&self) -> bool {
        self.header().mgmt_class() == class::SUBN_DIRECTED_ROUTE
    }

    /// HopPointer (directed-route only). Untrusted: check it against HopCount before use.
    pub fn hop_pointer(&self) -> u8 {
        self.buffer.as_ref()[field::HOP_POINTER]
    }

    /// HopCount (directed-route only); valid values are 0–63.
    pub fn hop_count(&self) -> u8 {
        self.buffer.as_ref()[field::HOP_COUNT]
    }

    /// The D bit (directed-route only).
    pub fn direction(&self) -> Direction {
        if self.header().status() & status::DR_DIRECTION == 0 {
            Direction::Outbound
        } else {
            Direction::Returning
        }
    }

    /// Status without the D bit (directed-route); for LID-routed SMPs read the header's.
    pub fn dr_status(&self) -> u16 {
        self.header().status() & status::DR_STATUS_MASK
    }

    /// M_Key.
    pub fn m_key(&self) -> u64 {
        u64_at(self.buffer.as_ref(), field::M_KEY)
    }

    /// DrSLID (directed-route only).
    pub fn dr_slid(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field::DR_SLID)
    }

    /// DrDLID (directed-route only).
    pub fn dr_dlid(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field::DR_DLID)
    }

    /// The 64-byte SMP data: the attribute.
    pub fn data(&self) -> &[u8] {
        &self.buffer.as_ref()[field::DATA]
    }

    /// The 64 InitialPath entries (directed-route only).
    pub fn initial_path(&self) -> &[u8] {
        &self.buffer.as_ref()[field::INITIAL_PATH]
    }

    /// The 64 ReturnPath entries (directed-route only).
    pub fn return_path(&self) -> &[u8] {
        &self.buffer.as_ref()[field::RETURN_PATH]
    }

    /// InitialPath entry `hop`; an index read from the wire (a hop pointer) is checked here.
    pub fn initial_path_hop(&self, hop: usize) -> Result<u8> {
        self.initial_path()
            .get(hop)
            .copied()
            .ok_or(Error::HopOutOfRange { hop })
    }

    /// ReturnPath entry `hop`; an index read from the wire (a hop pointer) is checked here.
    pub fn return_path_hop(&self, hop: usize) -> Result<u8> {
        self.return_path()
            .get(hop)
            .copied()
            .ok_or(Error::HopOutOfRange { hop })
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Smp<T> {
    /// The common header, writable.
    pub fn header_mut(&mut self) -> Mad<&mut [u8]> {
        Mad::new_unchecked(self.buffer.as_mut())
    }

    /// Sets HopPointer.
    pub fn set_hop_pointer(&mut self, value: u8) {
        self.buffer.as_mut()[field::HOP_POINTER] = value;
    }

    /// Sets HopCount.
    pub fn set_hop_count(&mut self, value: u8) {
        self.buffer.as_mut()[field::HOP_COUNT] = value;
    }

    /// Sets or clears the D bit, keeping the rest of Status.
    pub fn set_direction(&mut self, value: Direction) {
        let rest = self.header().status() & status::DR_STATUS_MASK;
        let d = match value {
            Direction::Outbound => 0,
            Direction::Returning => status::DR_DIRECTION,
        };
        self.header_mut().set_status(rest | d);
    }

    /// Sets Status without touching the D bit (directed-route); bit 15 of `value` is ignored.
    pub fn set_dr_status(&mut self, value: u16) {
        let d = self.header().status() & status::DR_DIRECTION;
        self.header_mut()
            .set_status((value & status::DR_STATUS_MASK) | d);
    }

    /// Sets M_Key.
    pub fn set_m_key(&mut self, value: u64) {
        set_u64_at(self.buffer.as_mut(), field::M_KEY, value);
    }

    /// Sets DrSLID.
    pub fn set_dr_slid(&mut self, value: u16) {
        set_u16_at(self.buffer.as_mut(), field::DR_SLID, value);
    }

    /// Sets DrDLID.
    pub fn set_dr_dlid(&mut self, value: u16) {
        set_u16_at(self.buffer.as_mut(), field::DR_DLID, value);
    }

    /// Clears the reserved bytes 36–63.
    pub fn clear_reserved(&mut self) {
        self.buffer.as_mut()[field::RESERVED].fill(0);
    }

    /// The SMP data, writable.
    pub fn data_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::DATA]
    }

    /// InitialPath, writable.
    pub fn initial_path_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::INITIAL_PATH]
    }

    /// ReturnPath, writable.
    pub fn return_path_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::RETURN_PATH]
    }

    /// Sets InitialPath entry `hop` (a switch records nothing here; the requester fills it).
    pub fn set_initial_path_hop(&mut self, hop: usize, port: u8) -> Result<()> {
        let slot = self
            .initial_path_mut()
            .get_mut(hop)
            .ok_or(Error::HopOutOfRange { hop })?;
        *slot = port;
        Ok(())
    }

    /// Sets ReturnPath entry `hop`, as a switch does with the ingress port of an outbound SMP.
    pub fn set_return_path_hop(&mut self, hop: usize, port: u8) -> Result<()> {
        let slot = self
            .return_path_mut()
            .get_mut(hop)
            .ok_or(Error::HopOutOfRange { hop })?;
        *slot = port;
        Ok(())
    }

    /// Turns the request in this buffer into its response in place: response method, Status
    /// = `status`, D bit set for directed-route; see [`Mad::make_response`].
    pub fn make_response(&mut self, status: u16) -> Result<()> {
        self.header_mut().make_response(status)
    }
}

/// The directed-route part of an SMP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DirectedRoute {
    /// The D bit.
    pub direction: Direction,
    /// HopPointer.
    pub hop_pointer: u8,
    /// HopCount, 0–63.
    pub hop_count: u8,
    /// DrSLID.
    pub dr_slid: u16,
    /// DrDLID.
    pub dr_dlid: u16,
    /// InitialPath; entries 1..=HopCount are the egress ports, entry 0 is unused.
    pub initial_path: [u8; PATH_LEN],
    /// ReturnPath, filled by switches on the way out.
    pub return_path: [u8; PATH_LEN],
}

impl DirectedRoute {
    /// A pure directed route leaving the requester through the egress ports `path` (one per
    /// hop: `path[0]` is the port the requester sends from, as in libibmad's "0,1,3" → `[1, 3]`),
    /// with permissive DrSLID and DrDLID, HopPointer 0 and D = 0, as OpenSM and libibmad
    /// build their requests. An empty path reaches the local port (0 hops).
    pub fn from_path(path: &[u8]) -> Result<Self> {
        Self::from_path_with_lids(path, PERMISSIVE_LID, PERMISSIVE_LID)
    }

    /// Like [`DirectedRoute::from_path`], with explicit DrSLID and DrDLID for routes with a
    /// LID-routed part.
    pub fn from_path_with_lids(path: &[u8], dr_slid: u16, dr_dlid: u16) -> Result<Self> {
        if path.len() > MAX_HOP_COUNT as usize {
            return Err(Error::PathTooLong { hops: path.len() });
        }
        let mut initial_path = [0u8; PATH_LEN];
        initial_path[1..=path.len()].copy_from_slice(path);
        Ok(Self {
            direction: Direction::Outbound,
            hop_pointer: 0,
            hop_count: path.len() as u8,
            dr_slid,
            dr_dlid,
            initial_path,
            return_path: [0u8; PATH_LEN],
        })
    }
}

/// How an SMP is routed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SmpRoute {
    /// Class 0x01: by the LIDs of the packet.
    LidRouted,
    /// Class 0x81: along a path of ports.
    Directed(DirectedRoute),
}

impl SmpRoute {
    /// The management class of SMPs routed this way.
    pub const fn mgmt_class(&self) -> u8 {
        match self {
            SmpRoute::LidRouted => class::SUBN_LID_ROUTED,
            SmpRoute::Directed(_) => class::SUBN_DIRECTED_ROUTE,
        }
    }
}

/// An SMP as plain values.
///
/// Parsing checks what makes the SMP unusable (BaseVersion, class, HopCount); HopPointer is
/// kept as received, to be checked by the SMI rules. LID-routed SMPs' reserved bytes are
/// neither kept nor checked, and emitting clears them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SmpRepr {
    /// ClassVersion (1 today).
    pub class_version: u8,
    /// Method byte, R bit included.
    pub method: u8,
    /// Status; for directed-route SMPs without the D bit (bit 15 must be 0).
    pub status: u16,
    /// TransactionID.
    pub tid: u64,
    /// AttributeID.
    pub attr_id: u16,
    /// AttributeModifier.
    pub attr_mod: u32,
    /// M_Key.
    pub m_key: u64,
    /// LID-routed, or the directed-route fields.
    pub route: SmpRoute,
    /// The 64-byte SMP data.
    pub data: [u8; DATA_LEN],
}

impl SmpRepr {
    /// A request: ClassVersion 1, Status 0, M_Key 0, data zeroed.
    pub const fn request(
        method: u8,
        route: SmpRoute,
        attr_id: u16,
        attr_mod: u32,
        tid: u64,
    ) -> Self {
        Self {
            class_version: class::SUBN_CLASS_VERSION,
            method,
            status: status::SUCCESS,
            tid,
            attr_id,
            attr_mod,
            m_key: 0,
            route,
            data: [0u8; DATA_LEN],
        }
    }

    /// A Get of `attr_id`/`attr_mod` along the pure directed route `path` (see
    /// [`DirectedRoute::from_path`]).
    pub fn directed_get(path: &[u8], attr_id: u16, attr_mod: u32, tid: u64) -> Result<Self> {
        let route = SmpRoute::Directed(DirectedRoute::from_path(path)?);
        Ok(Self::request(method::GET, route, attr_id, attr_mod, tid))
    }

    /// The response to this request: the response method, Status `status`, the data `data`,
    /// and for directed-route D = 1 with HopPointer, HopCount and both paths unchanged (the
    /// responder's send rule, not the responder, moves the hop pointer). For directed-route,
    /// bit 15 of `status` is dropped: it is the D bit.
    pub fn response(&self, status: u16, data: [u8; DATA_LEN]) -> Result<Self> {
        let mut route = self.route;
        if let SmpRoute::Directed(dr) = &mut route {
            dr.direction = Direction::Returning;
        }
        Ok(Self {
            method: method::response_method(self.method)?,
            status: match route {
                SmpRoute::LidRouted => status,
                SmpRoute::Directed(_) => status & status::DR_STATUS_MASK,
            },
            route,
            data,
            ..*self
        })
    }

    /// Reads an SMP, refusing a BaseVersion other than 1, a class other than 0x01/0x81 and a
    /// HopCount above 63.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(smp: &Smp<&T>) -> Result<Self> {
        let header = smp.header();
        if header.base_version() != class::BASE_VERSION {
            return Err(Error::BadBaseVersion {
                found: header.base_version(),
            });
        }
        let (route, status) = match header.mgmt_class() {
            class::SUBN_LID_ROUTED => (SmpRoute::LidRouted, header.status()),
            class::SUBN_DIRECTED_ROUTE => {
                if smp.hop_count() > MAX_HOP_COUNT {
                    return Err(Error::HopCountTooLarge {
                        found: smp.hop_count(),
                    });
                }
                let mut initial_path = [0u8; PATH_LEN];
                initial_path.copy_from_slice(smp.initial_path());
                let mut return_path = [0u8; PATH_LEN];
                return_path.copy_from_slice(smp.return_path());
                let dr = DirectedRoute {
                    direction: smp.direction(),
                    hop_pointer: smp.hop_pointer(),
                    hop_count: smp.hop_count(),
                    dr_slid: smp.dr_slid(),
                    dr_dlid: smp.dr_dlid(),
                    initial_path,
                    return_path,
                };
                (SmpRoute::Directed(dr), smp.dr_status())
            }
            found => {
                return Err(Error::WrongClass {
                    found,
                    expected: "a subnet-management class (0x01 or 0x81)",
                });
            }
        };
        let mut data = [0u8; DATA_LEN];
        data.copy_from_slice(smp.data());
        Ok(Self {
            class_version: header.class_version(),
            method: header.method(),
            status,
            tid: header.tid(),
            attr_id: header.attr_id(),
            attr_mod: header.attr_mod(),
            m_key: smp.m_key(),
            route,
            data,
        })
    }

    /// Bytes [`SmpRepr::emit`] writes: the whole SMP.
    pub const fn buffer_len(&self) -> usize {
        SMP_LEN
    }

    /// Writes all 256 bytes of the SMP; reserved bytes are cleared.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(&self, smp: &mut Smp<&mut T>) {
        {
            let mut header = smp.header_mut();
            header.set_base_version(class::BASE_VERSION);
            header.set_mgmt_class(self.route.mgmt_class());
            header.set_class_version(self.class_version);
            header.set_method(self.method);
            header.set_tid(self.tid);
            header.set_attr_id(self.attr_id);
            header.clear_reserved();
            header.set_attr_mod(self.attr_mod);
        }
        smp.set_m_key(self.m_key);
        smp.clear_reserved();
        smp.data_mut().copy_from_slice(&self.data);
        match &self.route {
            SmpRoute::LidRouted => {
                smp.header_mut().set_status(self.status);
                smp.set_hop_pointer(0);
                smp.set_hop_count(0);
                smp.set_dr_slid(0);
                smp.set_dr_dlid(0);
                smp.initial_path_mut().fill(0);
                smp.return_path_mut().fill(0);
            }
            SmpRoute::Directed(dr) => {
                smp.header_mut()
                    .set_status(self.status & status::DR_STATUS_MASK);
                smp.set_direction(dr.direction);
                smp.set_hop_pointer(dr.hop_pointer);
                smp.set_hop_count(dr.hop_count);
                smp.set_dr_slid(dr.dr_slid);
                smp.set_dr_dlid(dr.dr_dlid);
                smp.initial_path_mut().copy_from_slice(&dr.initial_path);
                smp.return_path_mut().copy_from_slice(&dr.return_path);
            }
        }
    }
}

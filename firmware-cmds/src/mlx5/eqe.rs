//! The 64-byte EQE (`struct mlx5_eqe`), event types (`enum mlx5_event`), port-change
//! subtypes and the EQ ownership rule.

use core::fmt;

use crate::error::Result;
use crate::mlx5::bits::need;

/// Size of an EQE.
pub const EQE_SIZE: usize = 64;
/// Size of the data union.
pub const EQE_DATA_LEN: usize = 28;
/// Owner byte the driver writes into every EQE before use (`MLX5_EQE_OWNER_INIT_VAL`).
pub const OWNER_INIT_VAL: u8 = 0x1;
/// Spare EQEs added to every EQ and the longest the driver waits between CI updates
/// (`MLX5_NUM_SPARE_EQE`).
pub const NUM_SPARE_EQE: u32 = 0x80;
/// EQEs of the command EQ (`MLX5_NUM_CMD_EQE`).
pub const NUM_CMD_EQE: u32 = 32;
/// EQEs of the async EQ (`MLX5_NUM_ASYNC_EQE`).
pub const NUM_ASYNC_EQE: u32 = 0x1000;

/// Byte offsets inside an EQE.
pub mod off {
    /// `type`.
    pub const TYPE: usize = 0x01;
    /// `sub_type`.
    pub const SUB_TYPE: usize = 0x03;
    /// Start of the 28-byte `data` union.
    pub const DATA: usize = 0x20;
    /// CMD: `vector` (BE32), bitmask of completed command slots.
    pub const CMD_VECTOR: usize = 0x20;
    /// Completion: `cqn` (BE32, low 24 bits).
    pub const COMP_CQN: usize = 0x38;
    /// QP/SRQ events: queue `type` (u8).
    pub const QP_SRQ_TYPE: usize = 0x34;
    /// QP/SRQ events: QPN/SRQN (BE32, low 24 bits).
    pub const QP_SRQ_N: usize = 0x38;
    /// CQ error: `cqn` (BE32, low 24 bits).
    pub const CQ_ERR_CQN: usize = 0x20;
    /// CQ error: `syndrome` (u8).
    pub const CQ_ERR_SYNDROME: usize = 0x2b;
    /// Port change: `port` (u8, port number in bits \[7:4\]).
    pub const PORT: usize = 0x28;
    /// Page request: the `ec_function` word (BE16; bits in [`super::page_req`]).
    pub const PAGE_REQ_EC_FUNCTION: usize = 0x20;
    /// Page request: `func_id` (BE16).
    pub const PAGE_REQ_FUNC_ID: usize = 0x22;
    /// Page request: `num_pages` (signed BE32).
    pub const PAGE_REQ_NUM_PAGES: usize = 0x24;
    /// `signature`.
    pub const SIGNATURE: usize = 0x3e;
    /// `owner` (bit 0).
    pub const OWNER: usize = 0x3f;
}

/// Event type (`MLX5_EVENT_TYPE_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EventType(pub u8);

macro_rules! event_types {
    ($($name:ident = $v:literal, $doc:literal;)*) => {
        impl EventType {
            $(#[doc = $doc] pub const $name: Self = Self($v);)*

            /// Every named event type.
            pub const ALL: &'static [Self] = &[$(Self::$name),*];

            /// The `MLX5_EVENT_TYPE_*` suffix, or `None`.
            pub fn name(self) -> Option<&'static str> {
                match self.0 {
                    $($v => Some(stringify!($name)),)*
                    _ => None,
                }
            }
        }
    };
}

event_types! {
    COMP = 0x00, "Completion on a CQ.";
    PATH_MIG = 0x01, "Path migrated.";
    COMM_EST = 0x02, "Communication established.";
    SQ_DRAINED = 0x03, "Send queue drained.";
    CQ_ERROR = 0x04, "CQ error.";
    WQ_CATAS_ERROR = 0x05, "Work queue catastrophic error.";
    PATH_MIG_FAILED = 0x07, "Path migration failed.";
    INTERNAL_ERROR = 0x08, "Internal error (defined; fatal errors are found by health polling).";
    PORT_CHANGE = 0x09, "Port state change.";
    CMD = 0x0a, "Command completion.";
    PAGE_REQUEST = 0x0b, "Firmware asks for or returns pages.";
    PAGE_FAULT = 0x0c, "Page fault.";
    NIC_VPORT_CHANGE = 0x0d, "NIC vport change.";
    ESW_FUNCTIONS_CHANGED = 0x0e, "E-switch functions changed.";
    VHCA_STATE_CHANGE = 0x0f, "vHCA state change.";
    WQ_INVAL_REQ_ERROR = 0x10, "Work queue invalid request error.";
    WQ_ACCESS_ERROR = 0x11, "Work queue access error.";
    SRQ_CATAS_ERROR = 0x12, "SRQ catastrophic error.";
    SRQ_LAST_WQE = 0x13, "SRQ last WQE reached.";
    SRQ_RQ_LIMIT = 0x14, "SRQ limit reached.";
    GPIO_EVENT = 0x15, "GPIO event.";
    PORT_MODULE_EVENT = 0x16, "Port module event.";
    TEMP_WARN_EVENT = 0x17, "Temperature warning.";
    XRQ_ERROR = 0x18, "XRQ error.";
    REMOTE_CONFIG = 0x19, "Remote configuration.";
    DB_BF_CONGESTION = 0x1a, "Doorbell/BlueFlame congestion.";
    STALL_EVENT = 0x1b, "Stall event.";
    DCT_DRAINED = 0x1c, "DCT drained.";
    DCT_KEY_VIOLATION = 0x1d, "DCT key violation.";
    FPGA_ERROR = 0x20, "FPGA error.";
    FPGA_QP_ERROR = 0x21, "FPGA QP error.";
    GENERAL_EVENT = 0x22, "General event.";
    MONITOR_COUNTER = 0x24, "Monitor counter.";
    PPS_EVENT = 0x25, "PPS event.";
    DEVICE_TRACER = 0x26, "Device tracer.";
    OBJECT_CHANGE = 0x27, "Object change.";
}

impl fmt::Display for EventType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#04x} {}", self.0, self.name().unwrap_or("UNKNOWN"))
    }
}

/// PORT_CHANGE subtypes (`MLX5_PORT_CHANGE_SUBTYPE_*`).
pub mod port_change {
    /// Port went down.
    pub const DOWN: u8 = 1;
    /// Port became active.
    pub const ACTIVE: u8 = 4;
    /// Port initialized.
    pub const INITIALIZED: u8 = 5;
    /// LID changed.
    pub const LID: u8 = 6;
    /// P_Key table changed.
    pub const PKEY: u8 = 7;
    /// GUID changed.
    pub const GUID: u8 = 8;
    /// Client reregistration requested.
    pub const CLIENT_REREG: u8 = 9;

    /// The subtype's name, or `None`.
    pub fn name(sub_type: u8) -> Option<&'static str> {
        Some(match sub_type {
            1 => "DOWN",
            4 => "ACTIVE",
            5 => "INITIALIZED",
            6 => "LID",
            7 => "PKEY",
            8 => "GUID",
            9 => "CLIENT_REREG",
            _ => return None,
        })
    }
}

/// CQ_ERROR syndromes (`MLX5_CQ_ERROR_SYNDROME_*`, mlx5_ifc.h), byte 0x2b of a CQ_ERROR EQE.
pub mod cq_error_syndrome {
    /// A CQE was due and the CQ had no free entry.
    pub const CQ_OVERRUN: u8 = 0x1;
    /// The device could not access the CQ buffer.
    pub const CQ_ACCESS_VIOLATION_ERROR: u8 = 0x2;
}

/// Queue types of QP/SRQ affiliated events (`MLX5_EVENT_QUEUE_TYPE_*`), byte 0x34.
pub mod queue_type {
    /// A QP.
    pub const QP: u8 = 0;
    /// A receive WQ.
    pub const RQ: u8 = 1;
    /// A send WQ.
    pub const SQ: u8 = 2;
    /// A DC target.
    pub const DCT: u8 = 6;
}

/// True if the EQE at consumer index `ci` of a ring of `nent` entries (a power of two) belongs
/// to software: owner bit equals `!!(ci & nent)` (the driver initializes owner to 1, so
/// hardware writes 0 on the first pass).
pub fn sw_owned(owner: u8, ci: u32, nent: u32) -> bool {
    (owner & 1 != 0) == (ci & nent != 0)
}

/// The EQ doorbell value (`(ci & 0xffffff) | eqn << 24`), written big-endian to UAR+0x40
/// (update and arm) or UAR+0x48 (update only).
pub fn eq_doorbell_value(ci: u32, eqn: u8) -> u32 {
    (ci & 0x00ff_ffff) | (u32::from(eqn) << 24)
}

/// Bits of a page request's `ec_function` word (the kernel's `pagealloc.c`,
/// `req_pages_handler`).
pub mod page_req {
    /// The request is for the embedded-CPU function's host PF (`EC_FUNCTION_MASK`).
    pub const EC_FUNCTION: u16 = 0x8000;
    /// Give back every page of the function at once (`RELEASE_ALL_PAGES_MASK`); only sent
    /// to a driver that set `release_all_pages` in its capabilities.
    pub const RELEASE_ALL_PAGES: u16 = 0x4000;
}

/// The typed payload of an EQE, by event type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EqeEvent {
    /// COMP: a CQ has a new CQE.
    Completion {
        /// CQ number.
        cqn: u32,
    },
    /// CMD: command slots completed.
    Command {
        /// Bit n set = slot n completed.
        vector: u32,
    },
    /// PAGE_REQUEST.
    PageRequest {
        /// The `ec_function` word as written: test its bits with [`page_req`].
        ec_function: u16,
        /// Function concerned.
        function_id: u16,
        /// > 0 give pages, < 0 pages to reclaim.
        num_pages: i32,
    },
    /// PORT_CHANGE.
    PortChange {
        /// Port number (1-based).
        port: u8,
        /// Subtype ([`port_change`]).
        sub_type: u8,
    },
    /// CQ_ERROR.
    CqError {
        /// CQ number.
        cqn: u32,
        /// Error syndrome.
        syndrome: u8,
    },
    /// A QP/SRQ affiliated event (PATH_MIG, COMM_EST, SQ_DRAINED, SRQ_LAST_WQE, SRQ_RQ_LIMIT,
    /// WQ_CATAS_ERROR, PATH_MIG_FAILED, WQ_INVAL_REQ_ERROR, WQ_ACCESS_ERROR,
    /// SRQ_CATAS_ERROR).
    QueueEvent {
        /// The event.
        event: EventType,
        /// Queue type (`MLX5_EVENT_QUEUE_TYPE_*`: QP 0, RQ 1, SQ 2, DCT 6).
        queue_type: u8,
        /// QPN or SRQN.
        number: u32,
    },
    /// Any other event: the raw data union.
    Other {
        /// The event.
        event: EventType,
        /// The 28 data bytes.
        data: [u8; EQE_DATA_LEN],
    },
}

/// A decoded EQE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Eqe {
    /// Event type.
    pub event_type: EventType,
    /// Subtype.
    pub sub_type: u8,
    /// The 28-byte data union.
    pub data: [u8; EQE_DATA_LEN],
    /// Signature.
    pub signature: u8,
    /// Owner byte.
    pub owner: u8,
}

impl Eqe {
    /// An EQE with zeroed data, for the simulator to fill with the `set_*` helpers.
    pub fn new(event_type: EventType, sub_type: u8, owner: u8) -> Self {
        Eqe {
            event_type,
            sub_type,
            data: [0; EQE_DATA_LEN],
            signature: 0,
            owner,
        }
    }

    /// Builds the EQE for a typed event (the inverse of [`Eqe::event`]).
    pub fn from_event(ev: &EqeEvent, owner: u8) -> Self {
        let mut e = Eqe::new(EventType::COMP, 0, owner);
        let d = |eqe_off: usize| eqe_off - off::DATA;
        let put32 = |data: &mut [u8; EQE_DATA_LEN], at: usize, v: u32| {
            data[d(at)..d(at) + 4].copy_from_slice(&v.to_be_bytes());
        };
        match *ev {
            EqeEvent::Completion { cqn } => {
                e.event_type = EventType::COMP;
                put32(&mut e.data, off::COMP_CQN, cqn & 0x00ff_ffff);
            }
            EqeEvent::Command { vector } => {
                e.event_type = EventType::CMD;
                put32(&mut e.data, off::CMD_VECTOR, vector);
            }
            EqeEvent::PageRequest {
                ec_function,
                function_id,
                num_pages,
            } => {
                e.event_type = EventType::PAGE_REQUEST;
                e.data[d(off::PAGE_REQ_EC_FUNCTION)..d(off::PAGE_REQ_EC_FUNCTION) + 2]
                    .copy_from_slice(&ec_function.to_be_bytes());
                e.data[d(off::PAGE_REQ_FUNC_ID)..d(off::PAGE_REQ_FUNC_ID) + 2]
                    .copy_from_slice(&function_id.to_be_bytes());
                put32(&mut e.data, off::PAGE_REQ_NUM_PAGES, num_pages as u32);
            }
            EqeEvent::PortChange { port, sub_type } => {
                e.event_type = EventType::PORT_CHANGE;
                e.sub_type = sub_type;
                e.data[d(off::PORT)] = (port & 0xf) << 4;
            }
            EqeEvent::CqError { cqn, syndrome } => {
                e.event_type = EventType::CQ_ERROR;
                put32(&mut e.data, off::CQ_ERR_CQN, cqn & 0x00ff_ffff);
                e.data[d(off::CQ_ERR_SYNDROME)] = syndrome;
            }
            EqeEvent::QueueEvent {
                event,
                queue_type,
                number,
            } => {
                e.event_type = event;
                e.data[d(off::QP_SRQ_TYPE)] = queue_type;
                put32(&mut e.data, off::QP_SRQ_N, number & 0x00ff_ffff);
            }
            EqeEvent::Other { event, data } => {
                e.event_type = event;
                e.data = data;
            }
        }
        e
    }

    /// Decodes the first 64 bytes of `buf`.
    pub fn decode(buf: &[u8]) -> Result<Self> {
        need("EQE", buf, EQE_SIZE)?;
        let mut data = [0u8; EQE_DATA_LEN];
        data.copy_from_slice(&buf[off::DATA..off::DATA + EQE_DATA_LEN]);
        Ok(Eqe {
            event_type: EventType(buf[off::TYPE]),
            sub_type: buf[off::SUB_TYPE],
            data,
            signature: buf[off::SIGNATURE],
            owner: buf[off::OWNER],
        })
    }

    /// Emits the 64 bytes.
    pub fn encode(&self) -> [u8; EQE_SIZE] {
        let mut b = [0u8; EQE_SIZE];
        b[off::TYPE] = self.event_type.0;
        b[off::SUB_TYPE] = self.sub_type;
        b[off::DATA..off::DATA + EQE_DATA_LEN].copy_from_slice(&self.data);
        b[off::SIGNATURE] = self.signature;
        b[off::OWNER] = self.owner;
        b
    }

    fn be32_at(&self, eqe_off: usize) -> u32 {
        let i = eqe_off - off::DATA;
        u32::from_be_bytes([
            self.data[i],
            self.data[i + 1],
            self.data[i + 2],
            self.data[i + 3],
        ])
    }

    fn be16_at(&self, eqe_off: usize) -> u16 {
        let i = eqe_off - off::DATA;
        u16::from_be_bytes([self.data[i], self.data[i + 1]])
    }

    /// Interprets the data union by event type.
    pub fn event(&self) -> EqeEvent {
        let t = self.event_type;
        match t {
            EventType::COMP => EqeEvent::Completion {
                cqn: self.be32_at(off::COMP_CQN) & 0x00ff_ffff,
            },
            EventType::CMD => EqeEvent::Command {
                vector: self.be32_at(off::CMD_VECTOR),
            },
            EventType::PAGE_REQUEST => EqeEvent::PageRequest {
                ec_function: self.be16_at(off::PAGE_REQ_EC_FUNCTION),
                function_id: self.be16_at(off::PAGE_REQ_FUNC_ID),
                num_pages: self.be32_at(off::PAGE_REQ_NUM_PAGES) as i32,
            },
            EventType::PORT_CHANGE => EqeEvent::PortChange {
                port: (self.data[off::PORT - off::DATA] >> 4) & 0xf,
                sub_type: self.sub_type,
            },
            EventType::CQ_ERROR => EqeEvent::CqError {
                cqn: self.be32_at(off::CQ_ERR_CQN) & 0x00ff_ffff,
                syndrome: self.data[off::CQ_ERR_SYNDROME - off::DATA],
            },
            EventType::PATH_MIG
            | EventType::COMM_EST
            | EventType::SQ_DRAINED
            | EventType::SRQ_LAST_WQE
            | EventType::SRQ_RQ_LIMIT
            | EventType::WQ_CATAS_ERROR
            | EventType::PATH_MIG_FAILED
            | EventType::WQ_INVAL_REQ_ERROR
            | EventType::WQ_ACCESS_ERROR
            | EventType::SRQ_CATAS_ERROR => EqeEvent::QueueEvent {
                event: t,
                queue_type: self.data[off::QP_SRQ_TYPE - off::DATA],
                number: self.be32_at(off::QP_SRQ_N) & 0x00ff_ffff,
            },
            _ => EqeEvent::Other {
                event: t,
                data: self.data,
            },
        }
    }
}

impl fmt::Display for Eqe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "EQE type {} sub_type {:#04x} owner {} signature {:#04x}\n  ",
            self.event_type, self.sub_type, self.owner, self.signature
        )?;
        match self.event() {
            EqeEvent::Completion { cqn } => write!(f, "completion: cqn {cqn:#x}"),
            EqeEvent::Command { vector } => write!(f, "command completion: slots {vector:#010x}"),
            EqeEvent::PageRequest {
                ec_function,
                function_id,
                num_pages,
            } => write!(
                f,
                "page request: function_id {function_id:#x} ec_function {ec_function:#x} num_pages {num_pages}"
            ),
            EqeEvent::PortChange { port, sub_type } => write!(
                f,
                "port change: port {port} subtype {}",
                port_change::name(sub_type).unwrap_or("UNKNOWN")
            ),
            EqeEvent::CqError { cqn, syndrome } => {
                write!(f, "CQ error: cqn {cqn:#x} syndrome {syndrome:#04x}")
            }
            EqeEvent::QueueEvent {
                event,
                queue_type,
                number,
            } => write!(
                f,
                "{}: queue type {queue_type} number {number:#x}",
                event.name().unwrap_or("UNKNOWN")
            ),
            EqeEvent::Other { data, .. } => {
                write!(f, "data")?;
                for b in data {
                    write!(f, " {b:02x}")?;
                }
                Ok(())
            }
        }
    }
}

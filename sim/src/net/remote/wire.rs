//! The fabric server's frames: what a client and the server say to each other, as bytes. Pure
//! data (no I/O but [`read_frame`]); every decoder checks lengths, codes and reserved bits and
//! answers a [`WireError`] instead of trusting the peer. The layout is in the module
//! documentation of [`super`]; all numbers are big-endian.

use std::io::{ErrorKind, Read};

use crate::link::{PortChange, PortSnapshot, ReceiveDrop};
use crate::packet::{Packet, PacketGrh};

/// The first four bytes of an ATTACH: "HCAF".
pub const MAGIC: u32 = 0x4843_4146;
/// The protocol version this build speaks. Version 2 added COUNT_DROP and the refusal
/// [`RefuseCode::Forbidden`].
pub const VERSION: u16 = 2;
/// How the message of a REFUSED for [`RefuseCode::Version`] starts, followed by the server's
/// version in decimal, in every version of the protocol, so that a client of another
/// version can say which ([`refused_version`]).
pub const VERSION_REFUSAL: &str = "this server speaks protocol version ";
/// The largest frame body (type byte included) either side accepts; larger is malformed.
pub const MAX_FRAME: usize = 1024;
/// The longest node name an ATTACH may carry, in bytes.
pub const MAX_NAME: usize = 512;

/// Frame types, client to server.
pub mod client_type {
    /// Attach to a node's port (first frame, and only then).
    pub const ATTACH: u8 = 0x01;
    /// A packet leaves the client's port.
    pub const TRANSMIT: u8 = 0x02;
    /// A MAD for the port's own SMA/PMA (MAD_IFC).
    pub const LOCAL_MAD: u8 = 0x03;
    /// The port's state.
    pub const PORT_INFO: u8 = 0x04;
    /// Set then clear CapabilityMask bits.
    pub const MODIFY_CAP_MASK: u8 = 0x05;
    /// The device dropped packets it received, for a port counter to count (version 2).
    pub const COUNT_DROP: u8 = 0x06;
}

/// Frame types, server to client.
pub mod server_type {
    /// The attach succeeded.
    pub const ATTACHED: u8 = 0x81;
    /// The server refuses (then closes the connection).
    pub const REFUSED: u8 = 0x82;
    /// A packet arrived at the client's port.
    pub const DELIVER: u8 = 0x83;
    /// The port's management state changed.
    pub const PORT_CHANGED: u8 = 0x84;
    /// The answer to a LOCAL_MAD.
    pub const MAD_ANSWER: u8 = 0x85;
    /// The answer to a PORT_INFO.
    pub const PORT_INFO_ANSWER: u8 = 0x86;
    /// The answer to a MODIFY_CAP_MASK.
    pub const CAP_MASK_ANSWER: u8 = 0x87;
}

/// Bytes of an encoded packet without a GRH: LIDs, SL, flags, QPs, Q_Key, P_Key, the MAD.
const PACKET_LEN: usize = 2 + 2 + 1 + 1 + 4 + 4 + 4 + 2 + 256;
/// Bytes a GRH adds: GIDs, traffic class, flow label, hop limit.
const GRH_LEN: usize = 16 + 16 + 1 + 4 + 1;
/// Bytes of an encoded port snapshot.
const SNAPSHOT_LEN: usize = 4 + 2 + 2 + 8 + 8 + 8 + 4 + 2;

/// Packet flag: sent on VL15.
const FLAG_VL15: u8 = 0x01;
/// Packet flag: a GRH follows the fixed fields.
const FLAG_GRH: u8 = 0x02;

/// What is wrong with a frame.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// The stream ended inside a frame.
    #[error("the connection ended inside a frame ({got} of {want} bytes)")]
    Truncated {
        /// Bytes the frame needed.
        want: usize,
        /// Bytes that came.
        got: usize,
    },
    /// A length prefix outside 1..=[`MAX_FRAME`].
    #[error("frame length {0} is outside 1..={MAX_FRAME}")]
    BadLength(u32),
    /// A frame type this side never receives.
    #[error("unknown frame type {0:#04x}")]
    UnknownType(u8),
    /// A body of the wrong size for its type.
    #[error("{what}: {got} bytes, expected {want}")]
    Size {
        /// The frame type's name.
        what: &'static str,
        /// Its size.
        want: usize,
        /// The body's size.
        got: usize,
    },
    /// A field holds a value the protocol does not allow.
    #[error("{what}: {value:#x} is not allowed")]
    Field {
        /// The field.
        what: &'static str,
        /// Its value.
        value: u64,
    },
    /// An ATTACH that does not start with the magic number: not this protocol.
    #[error("not the hca fabric protocol (magic {0:#010x})")]
    Magic(u32),
    /// A node name that is not UTF-8, empty or too long.
    #[error("node name: {0}")]
    Name(&'static str),
    /// Reading the stream failed.
    #[error("reading: {message}")]
    Io {
        /// The error's kind (a read timeout is `WouldBlock` or `TimedOut`).
        kind: ErrorKind,
        /// The error.
        message: String,
    },
}

/// Why the server refuses a client, as a code on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefuseCode {
    /// The client speaks another protocol version.
    Version = 1,
    /// No node has the name given.
    UnknownNode = 2,
    /// The node has no such port.
    NoSuchPort = 3,
    /// The node is a switch or router.
    NotACa = 4,
    /// Another client is attached there.
    PortTaken = 5,
    /// The client sent a malformed frame.
    Malformed = 6,
    /// A frame out of turn (anything before ATTACH, ATTACH twice).
    Protocol = 7,
    /// The server is stopping.
    ShuttingDown = 8,
    /// Too many connections are waiting to attach (the server's `max_handshakes`): try
    /// again later.
    Busy = 9,
    /// No whole ATTACH came within the server's attach timeout.
    Timeout = 10,
    /// The client runs as another user than the server, and not as root (the kernel's
    /// `SO_PEERCRED`); refused before anything is read (version 2).
    Forbidden = 11,
}

impl RefuseCode {
    fn from_u8(v: u8) -> Option<RefuseCode> {
        Some(match v {
            1 => RefuseCode::Version,
            2 => RefuseCode::UnknownNode,
            3 => RefuseCode::NoSuchPort,
            4 => RefuseCode::NotACa,
            5 => RefuseCode::PortTaken,
            6 => RefuseCode::Malformed,
            7 => RefuseCode::Protocol,
            8 => RefuseCode::ShuttingDown,
            9 => RefuseCode::Busy,
            10 => RefuseCode::Timeout,
            11 => RefuseCode::Forbidden,
            _ => return None,
        })
    }
}

/// A frame from a client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientMsg {
    /// Attach to port `port` of CA `node`, speaking `version`.
    Attach {
        /// The client's protocol version.
        version: u16,
        /// The node's name in the topology.
        node: String,
        /// The node's port (1 and up).
        port: u8,
    },
    /// A packet leaves the client's port.
    Transmit(Packet),
    /// MAD_IFC: the port's own SMA/PMA answers `mad`.
    LocalMad {
        /// Request id, echoed by the answer.
        id: u32,
        /// Answer even with a wrong M_Key (the host's own MAD_IFC may).
        ignore_mkey: bool,
        /// The MAD.
        mad: Box<[u8; 256]>,
    },
    /// The port's state.
    PortInfo {
        /// Request id.
        id: u32,
    },
    /// Set then clear CapabilityMask bits.
    ModifyCapMask {
        /// Request id.
        id: u32,
        /// Bits to set.
        set: u32,
        /// Bits to clear (after setting).
        clear: u32,
    },
    /// The device dropped `count` packets its port received, for the reason `drop` (what
    /// [`PortLink::count_drop`](crate::link::PortLink::count_drop) says in a process of its
    /// own): the port's PMA counter and the network's drops count them. No answer.
    CountDrop {
        /// Why, as the port counter that counts it.
        drop: ReceiveDrop,
        /// How many (1 and up).
        count: u32,
    },
}

/// The code of a [`ReceiveDrop`] in a COUNT_DROP frame.
fn drop_code(d: ReceiveDrop) -> u8 {
    match d {
        ReceiveDrop::Vl15 => 1,
        ReceiveDrop::Overrun => 2,
    }
}

fn drop_of(v: u8) -> Result<ReceiveDrop, WireError> {
    match v {
        1 => Ok(ReceiveDrop::Vl15),
        2 => Ok(ReceiveDrop::Overrun),
        _ => Err(WireError::Field {
            what: "COUNT_DROP counter",
            value: u64::from(v),
        }),
    }
}

/// The server's version in the message of a REFUSED for [`RefuseCode::Version`], if it
/// starts as [`VERSION_REFUSAL`] says.
pub fn refused_version(message: &str) -> Option<u16> {
    let rest = message.strip_prefix(VERSION_REFUSAL)?;
    let end = rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len());
    rest[..end].parse().ok()
}

/// A frame from the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerMsg {
    /// The attach succeeded; the server speaks `version`.
    Attached {
        /// The server's protocol version.
        version: u16,
    },
    /// The server refuses; it closes the connection after this frame.
    Refused {
        /// Why, as a code.
        code: RefuseCode,
        /// Why, in words (for the user).
        message: String,
    },
    /// A packet arrived at the client's port.
    Deliver(Packet),
    /// The port's management state changed.
    PortChanged(PortChange),
    /// The answer to LOCAL_MAD `id`: `None` when the agent does not answer.
    MadAnswer {
        /// The request's id.
        id: u32,
        /// The answer.
        mad: Option<Box<[u8; 256]>>,
    },
    /// The answer to PORT_INFO `id`.
    PortInfo {
        /// The request's id.
        id: u32,
        /// The port's state.
        snapshot: PortSnapshot,
    },
    /// The answer to MODIFY_CAP_MASK `id`: the new mask.
    CapMask {
        /// The request's id.
        id: u32,
        /// The port's CapabilityMask now.
        mask: u32,
    },
}

/// A cursor over a frame body that refuses to read past its end.
struct Reader<'a> {
    buf: &'a [u8],
    what: &'static str,
    want: usize,
}

impl<'a> Reader<'a> {
    /// Checks that `body` is exactly `want` bytes long.
    fn exact(body: &'a [u8], what: &'static str, want: usize) -> Result<Reader<'a>, WireError> {
        if body.len() != want {
            return Err(WireError::Size {
                what,
                want,
                got: body.len(),
            });
        }
        Ok(Reader {
            buf: body,
            what,
            want,
        })
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        if self.buf.len() < n {
            return Err(WireError::Size {
                what: self.what,
                want: self.want,
                got: self.want - self.buf.len() + n,
            });
        }
        let (a, b) = self.buf.split_at(n);
        self.buf = b;
        Ok(a)
    }

    fn u8(&mut self) -> Result<u8, WireError> {
        Ok(self.take(1)?[0])
    }

    fn u16(&mut self) -> Result<u16, WireError> {
        let b = self.take(2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    fn u32(&mut self) -> Result<u32, WireError> {
        let b = self.take(4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn u64(&mut self) -> Result<u64, WireError> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_be_bytes(a))
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], WireError> {
        let b = self.take(N)?;
        let mut a = [0u8; N];
        a.copy_from_slice(b);
        Ok(a)
    }

    fn mad(&mut self) -> Result<Box<[u8; 256]>, WireError> {
        Ok(Box::new(self.array::<256>()?))
    }
}

/// Starts a frame of `kind`: room for the length prefix, then the type byte.
fn frame(kind: u8, body_len: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(4 + 1 + body_len);
    v.extend_from_slice(&[0; 4]);
    v.push(kind);
    v
}

/// Writes the length prefix of a frame built with [`frame`].
fn finish(mut v: Vec<u8>) -> Vec<u8> {
    let len = u32::try_from(v.len() - 4).expect("frames are small");
    v[..4].copy_from_slice(&len.to_be_bytes());
    v
}

fn put_packet(v: &mut Vec<u8>, p: &Packet) {
    v.extend_from_slice(&p.slid.to_be_bytes());
    v.extend_from_slice(&p.dlid.to_be_bytes());
    v.push(p.sl);
    let mut flags = 0;
    if p.vl15 {
        flags |= FLAG_VL15;
    }
    if p.grh.is_some() {
        flags |= FLAG_GRH;
    }
    v.push(flags);
    v.extend_from_slice(&p.src_qp.to_be_bytes());
    v.extend_from_slice(&p.dst_qp.to_be_bytes());
    v.extend_from_slice(&p.qkey.to_be_bytes());
    v.extend_from_slice(&p.pkey.to_be_bytes());
    if let Some(g) = &p.grh {
        v.extend_from_slice(&g.sgid);
        v.extend_from_slice(&g.dgid);
        v.push(g.traffic_class);
        v.extend_from_slice(&g.flow_label.to_be_bytes());
        v.push(g.hop_limit);
    }
    v.extend_from_slice(&p.mad[..]);
}

fn packet_len(p: &Packet) -> usize {
    PACKET_LEN + if p.grh.is_some() { GRH_LEN } else { 0 }
}

fn get_packet(body: &[u8], what: &'static str) -> Result<Packet, WireError> {
    // The flags byte says how long the body must be; read it before checking the size.
    let flags = *body.get(5).ok_or(WireError::Size {
        what,
        want: PACKET_LEN,
        got: body.len(),
    })?;
    if flags & !(FLAG_VL15 | FLAG_GRH) != 0 {
        return Err(WireError::Field {
            what: "packet flags",
            value: u64::from(flags),
        });
    }
    let want = PACKET_LEN + if flags & FLAG_GRH != 0 { GRH_LEN } else { 0 };
    let mut r = Reader::exact(body, what, want)?;
    let slid = r.u16()?;
    let dlid = r.u16()?;
    let sl = r.u8()?;
    if sl > 15 {
        return Err(WireError::Field {
            what: "service level",
            value: u64::from(sl),
        });
    }
    r.u8()?;
    let src_qp = r.u32()?;
    let dst_qp = r.u32()?;
    for (qp, what) in [(src_qp, "source QP"), (dst_qp, "destination QP")] {
        if qp > 0x00FF_FFFF {
            return Err(WireError::Field {
                what,
                value: u64::from(qp),
            });
        }
    }
    let qkey = r.u32()?;
    let pkey = r.u16()?;
    let grh = if flags & FLAG_GRH != 0 {
        let sgid = r.array::<16>()?;
        let dgid = r.array::<16>()?;
        let traffic_class = r.u8()?;
        let flow_label = r.u32()?;
        if flow_label > 0x000F_FFFF {
            return Err(WireError::Field {
                what: "flow label",
                value: u64::from(flow_label),
            });
        }
        let hop_limit = r.u8()?;
        Some(Box::new(PacketGrh {
            sgid,
            dgid,
            traffic_class,
            flow_label,
            hop_limit,
        }))
    } else {
        None
    };
    let mad = r.mad()?;
    Ok(Packet {
        slid,
        dlid,
        sl,
        vl15: flags & FLAG_VL15 != 0,
        src_qp,
        dst_qp,
        qkey,
        pkey,
        grh,
        mad,
    })
}

fn change_code(c: PortChange) -> u8 {
    match c {
        PortChange::Down => 1,
        PortChange::Active => 2,
        PortChange::Initialized => 3,
        PortChange::Lid => 4,
        PortChange::Pkey => 5,
        PortChange::Guid => 6,
        PortChange::ClientReregister => 7,
    }
}

fn change_of(v: u8) -> Result<PortChange, WireError> {
    Ok(match v {
        1 => PortChange::Down,
        2 => PortChange::Active,
        3 => PortChange::Initialized,
        4 => PortChange::Lid,
        5 => PortChange::Pkey,
        6 => PortChange::Guid,
        7 => PortChange::ClientReregister,
        _ => {
            return Err(WireError::Field {
                what: "port change",
                value: u64::from(v),
            });
        }
    })
}

impl ClientMsg {
    /// The frame, length prefix included.
    pub fn encode(&self) -> Vec<u8> {
        use client_type as t;
        let v = match self {
            ClientMsg::Attach {
                version,
                node,
                port,
            } => {
                let mut v = frame(t::ATTACH, 4 + 2 + 1 + 2 + node.len());
                v.extend_from_slice(&MAGIC.to_be_bytes());
                v.extend_from_slice(&version.to_be_bytes());
                v.push(*port);
                // Longer names are the caller's error; the server refuses the cut name.
                let name = &node.as_bytes()[..node.len().min(MAX_NAME + 1)];
                v.extend_from_slice(&(name.len() as u16).to_be_bytes());
                v.extend_from_slice(name);
                v
            }
            ClientMsg::Transmit(p) => {
                let mut v = frame(t::TRANSMIT, packet_len(p));
                put_packet(&mut v, p);
                v
            }
            ClientMsg::LocalMad {
                id,
                ignore_mkey,
                mad,
            } => {
                let mut v = frame(t::LOCAL_MAD, 4 + 1 + 256);
                v.extend_from_slice(&id.to_be_bytes());
                v.push(u8::from(*ignore_mkey));
                v.extend_from_slice(&mad[..]);
                v
            }
            ClientMsg::PortInfo { id } => {
                let mut v = frame(t::PORT_INFO, 4);
                v.extend_from_slice(&id.to_be_bytes());
                v
            }
            ClientMsg::ModifyCapMask { id, set, clear } => {
                let mut v = frame(t::MODIFY_CAP_MASK, 12);
                v.extend_from_slice(&id.to_be_bytes());
                v.extend_from_slice(&set.to_be_bytes());
                v.extend_from_slice(&clear.to_be_bytes());
                v
            }
            ClientMsg::CountDrop { drop, count } => {
                let mut v = frame(t::COUNT_DROP, 5);
                v.push(drop_code(*drop));
                v.extend_from_slice(&count.to_be_bytes());
                v
            }
        };
        finish(v)
    }

    /// Parses a frame body (type byte first, no length prefix).
    pub fn decode(body: &[u8]) -> Result<ClientMsg, WireError> {
        use client_type as t;
        let (&kind, rest) = body.split_first().ok_or(WireError::BadLength(0))?;
        match kind {
            t::ATTACH => {
                if rest.len() < 9 {
                    return Err(WireError::Size {
                        what: "ATTACH",
                        want: 9,
                        got: rest.len(),
                    });
                }
                let magic = u32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]);
                if magic != MAGIC {
                    return Err(WireError::Magic(magic));
                }
                let name_len = usize::from(u16::from_be_bytes([rest[7], rest[8]]));
                let mut r = Reader::exact(rest, "ATTACH", 9 + name_len)?;
                r.u32()?;
                let version = r.u16()?;
                let port = r.u8()?;
                r.u16()?;
                if name_len == 0 {
                    return Err(WireError::Name("empty"));
                }
                if name_len > MAX_NAME {
                    return Err(WireError::Name("longer than 512 bytes"));
                }
                let node = std::str::from_utf8(r.take(name_len)?)
                    .map_err(|_| WireError::Name("not UTF-8"))?
                    .to_owned();
                Ok(ClientMsg::Attach {
                    version,
                    node,
                    port,
                })
            }
            t::TRANSMIT => Ok(ClientMsg::Transmit(get_packet(rest, "TRANSMIT")?)),
            t::LOCAL_MAD => {
                let mut r = Reader::exact(rest, "LOCAL_MAD", 4 + 1 + 256)?;
                let id = r.u32()?;
                let flags = r.u8()?;
                if flags > 1 {
                    return Err(WireError::Field {
                        what: "LOCAL_MAD flags",
                        value: u64::from(flags),
                    });
                }
                Ok(ClientMsg::LocalMad {
                    id,
                    ignore_mkey: flags == 1,
                    mad: r.mad()?,
                })
            }
            t::PORT_INFO => {
                let mut r = Reader::exact(rest, "PORT_INFO", 4)?;
                Ok(ClientMsg::PortInfo { id: r.u32()? })
            }
            t::MODIFY_CAP_MASK => {
                let mut r = Reader::exact(rest, "MODIFY_CAP_MASK", 12)?;
                Ok(ClientMsg::ModifyCapMask {
                    id: r.u32()?,
                    set: r.u32()?,
                    clear: r.u32()?,
                })
            }
            t::COUNT_DROP => {
                let mut r = Reader::exact(rest, "COUNT_DROP", 5)?;
                let drop = drop_of(r.u8()?)?;
                let count = r.u32()?;
                if count == 0 {
                    return Err(WireError::Field {
                        what: "COUNT_DROP count",
                        value: 0,
                    });
                }
                Ok(ClientMsg::CountDrop { drop, count })
            }
            other => Err(WireError::UnknownType(other)),
        }
    }
}

impl ServerMsg {
    /// The frame, length prefix included.
    pub fn encode(&self) -> Vec<u8> {
        use server_type as t;
        let v = match self {
            ServerMsg::Attached { version } => {
                let mut v = frame(t::ATTACHED, 2);
                v.extend_from_slice(&version.to_be_bytes());
                v
            }
            ServerMsg::Refused { code, message } => {
                // The message is cut to what a frame holds (on a character boundary).
                let mut end = message.len().min(MAX_FRAME - 2);
                while !message.is_char_boundary(end) {
                    end -= 1;
                }
                let mut v = frame(t::REFUSED, 1 + end);
                v.push(*code as u8);
                v.extend_from_slice(&message.as_bytes()[..end]);
                v
            }
            ServerMsg::Deliver(p) => {
                let mut v = frame(t::DELIVER, packet_len(p));
                put_packet(&mut v, p);
                v
            }
            ServerMsg::PortChanged(c) => {
                let mut v = frame(t::PORT_CHANGED, 1);
                v.push(change_code(*c));
                v
            }
            ServerMsg::MadAnswer { id, mad } => {
                let mut v = frame(t::MAD_ANSWER, 4 + 1 + 256);
                v.extend_from_slice(&id.to_be_bytes());
                match mad {
                    Some(m) => {
                        v.push(1);
                        v.extend_from_slice(&m[..]);
                    }
                    None => v.push(0),
                }
                v
            }
            ServerMsg::PortInfo { id, snapshot: s } => {
                let mut v = frame(t::PORT_INFO_ANSWER, 4 + SNAPSHOT_LEN);
                v.extend_from_slice(&id.to_be_bytes());
                v.extend_from_slice(&[s.state, s.phys_state, s.lmc, s.sm_sl]);
                v.extend_from_slice(&s.lid.to_be_bytes());
                v.extend_from_slice(&s.sm_lid.to_be_bytes());
                v.extend_from_slice(&s.port_guid.to_be_bytes());
                v.extend_from_slice(&s.node_guid.to_be_bytes());
                v.extend_from_slice(&s.subnet_prefix.to_be_bytes());
                v.extend_from_slice(&s.capability_mask.to_be_bytes());
                v.extend_from_slice(&s.pkey_table_len.to_be_bytes());
                v
            }
            ServerMsg::CapMask { id, mask } => {
                let mut v = frame(t::CAP_MASK_ANSWER, 8);
                v.extend_from_slice(&id.to_be_bytes());
                v.extend_from_slice(&mask.to_be_bytes());
                v
            }
        };
        finish(v)
    }

    /// Parses a frame body (type byte first, no length prefix).
    pub fn decode(body: &[u8]) -> Result<ServerMsg, WireError> {
        use server_type as t;
        let (&kind, rest) = body.split_first().ok_or(WireError::BadLength(0))?;
        match kind {
            t::ATTACHED => {
                let mut r = Reader::exact(rest, "ATTACHED", 2)?;
                Ok(ServerMsg::Attached { version: r.u16()? })
            }
            t::REFUSED => {
                let (&code, msg) = rest.split_first().ok_or(WireError::Size {
                    what: "REFUSED",
                    want: 1,
                    got: 0,
                })?;
                let code = RefuseCode::from_u8(code).ok_or(WireError::Field {
                    what: "refusal code",
                    value: u64::from(code),
                })?;
                Ok(ServerMsg::Refused {
                    code,
                    message: String::from_utf8_lossy(msg).into_owned(),
                })
            }
            t::DELIVER => Ok(ServerMsg::Deliver(get_packet(rest, "DELIVER")?)),
            t::PORT_CHANGED => {
                let mut r = Reader::exact(rest, "PORT_CHANGED", 1)?;
                Ok(ServerMsg::PortChanged(change_of(r.u8()?)?))
            }
            t::MAD_ANSWER => {
                let present = *rest.get(4).ok_or(WireError::Size {
                    what: "MAD_ANSWER",
                    want: 5,
                    got: rest.len(),
                })?;
                let want = match present {
                    0 => 5,
                    1 => 5 + 256,
                    v => {
                        return Err(WireError::Field {
                            what: "MAD_ANSWER presence",
                            value: u64::from(v),
                        });
                    }
                };
                let mut r = Reader::exact(rest, "MAD_ANSWER", want)?;
                let id = r.u32()?;
                r.u8()?;
                let mad = if present == 1 { Some(r.mad()?) } else { None };
                Ok(ServerMsg::MadAnswer { id, mad })
            }
            t::PORT_INFO_ANSWER => {
                let mut r = Reader::exact(rest, "PORT_INFO_ANSWER", 4 + SNAPSHOT_LEN)?;
                let id = r.u32()?;
                let [state, phys_state, lmc, sm_sl] = r.array::<4>()?;
                let snapshot = PortSnapshot {
                    state,
                    phys_state,
                    lmc,
                    sm_sl,
                    lid: r.u16()?,
                    sm_lid: r.u16()?,
                    port_guid: r.u64()?,
                    node_guid: r.u64()?,
                    subnet_prefix: r.u64()?,
                    capability_mask: r.u32()?,
                    pkey_table_len: r.u16()?,
                };
                Ok(ServerMsg::PortInfo { id, snapshot })
            }
            t::CAP_MASK_ANSWER => {
                let mut r = Reader::exact(rest, "CAP_MASK_ANSWER", 8)?;
                Ok(ServerMsg::CapMask {
                    id: r.u32()?,
                    mask: r.u32()?,
                })
            }
            other => Err(WireError::UnknownType(other)),
        }
    }
}

/// Reads one frame body from `r`: `Ok(None)` when the stream ends cleanly between frames.
pub fn read_frame(r: &mut impl Read) -> Result<Option<Vec<u8>>, WireError> {
    let mut len = [0u8; 4];
    match fill(r, &mut len)? {
        0 => return Ok(None),
        4 => {}
        got => return Err(WireError::Truncated { want: 4, got }),
    }
    let n = u32::from_be_bytes(len);
    if n == 0 || n as usize > MAX_FRAME {
        return Err(WireError::BadLength(n));
    }
    let mut body = vec![0u8; n as usize];
    let got = fill(r, &mut body)?;
    if got != body.len() {
        return Err(WireError::Truncated {
            want: body.len(),
            got,
        });
    }
    Ok(Some(body))
}

/// Reads until `buf` is full or the stream ends; returns the bytes read.
fn fill(r: &mut impl Read, buf: &mut [u8]) -> Result<usize, WireError> {
    let mut got = 0;
    while got < buf.len() {
        match r.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => {
                return Err(WireError::Io {
                    kind: e.kind(),
                    message: e.to_string(),
                });
            }
        }
    }
    Ok(got)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packet(grh: bool) -> Packet {
        let mut mad = Box::new([0u8; 256]);
        for (i, b) in mad.iter_mut().enumerate() {
            *b = i as u8;
        }
        Packet {
            slid: 0x1234,
            dlid: 0xffff,
            sl: 3,
            vl15: !grh,
            src_qp: 1,
            dst_qp: 0x00ab_cdef,
            qkey: 0x8001_0000,
            pkey: 0x7fff,
            grh: grh.then(|| {
                Box::new(PacketGrh {
                    sgid: [1; 16],
                    dgid: [2; 16],
                    traffic_class: 9,
                    flow_label: 0xf_ffff,
                    hop_limit: 64,
                })
            }),
            mad,
        }
    }

    fn body(frame: &[u8]) -> &[u8] {
        let n = u32::from_be_bytes([frame[0], frame[1], frame[2], frame[3]]) as usize;
        assert_eq!(n, frame.len() - 4, "the prefix counts the rest");
        &frame[4..]
    }

    #[test]
    fn every_client_frame_round_trips() {
        for m in [
            ClientMsg::Attach {
                version: VERSION,
                node: "host-2".into(),
                port: 1,
            },
            ClientMsg::Transmit(packet(false)),
            ClientMsg::Transmit(packet(true)),
            ClientMsg::LocalMad {
                id: 7,
                ignore_mkey: true,
                mad: packet(false).mad,
            },
            ClientMsg::PortInfo { id: u32::MAX },
            ClientMsg::ModifyCapMask {
                id: 9,
                set: 2,
                clear: 0x8000_0000,
            },
            ClientMsg::CountDrop {
                drop: ReceiveDrop::Vl15,
                count: u32::MAX,
            },
            ClientMsg::CountDrop {
                drop: ReceiveDrop::Overrun,
                count: 1,
            },
        ] {
            let f = m.encode();
            assert!(f.len() - 4 <= MAX_FRAME);
            assert_eq!(ClientMsg::decode(body(&f)).unwrap(), m);
        }
    }

    #[test]
    fn every_server_frame_round_trips() {
        let snapshot = PortSnapshot {
            state: 4,
            phys_state: 5,
            lid: 7,
            lmc: 2,
            sm_lid: 1,
            sm_sl: 3,
            port_guid: 0x0102_0304_0506_0708,
            node_guid: 0x1112_1314_1516_1718,
            subnet_prefix: 0xfe80_0000_0000_0000,
            capability_mask: 0x0250_c04a,
            pkey_table_len: 64,
        };
        for m in [
            ServerMsg::Attached { version: VERSION },
            ServerMsg::Refused {
                code: RefuseCode::PortTaken,
                message: "taken".into(),
            },
            ServerMsg::Deliver(packet(true)),
            ServerMsg::PortChanged(PortChange::ClientReregister),
            ServerMsg::MadAnswer {
                id: 1,
                mad: Some(packet(false).mad),
            },
            ServerMsg::MadAnswer { id: 2, mad: None },
            ServerMsg::PortInfo { id: 3, snapshot },
            ServerMsg::CapMask { id: 4, mask: 2 },
        ] {
            assert_eq!(ServerMsg::decode(body(&m.encode())).unwrap(), m);
        }
    }

    #[test]
    fn the_layout_is_the_documented_one() {
        // ATTACH "Hca1" port 2: length 14, type 1, magic "HCAF", version 1, port, name.
        let f = ClientMsg::Attach {
            version: 1,
            node: "Hca1".into(),
            port: 2,
        }
        .encode();
        assert_eq!(
            f,
            [
                0, 0, 0, 14, 0x01, b'H', b'C', b'A', b'F', 0, 1, 2, 0, 4, b'H', b'c', b'a', b'1'
            ]
        );
        // A packet: LIDs, SL, flags (VL15), QPs, Q_Key, P_Key, then the MAD at offset 20.
        let f = ClientMsg::Transmit(packet(false)).encode();
        assert_eq!(&f[..5], &[0, 0, 1, 21, 0x02]);
        assert_eq!(
            &f[5..25],
            &[
                0x12, 0x34, 0xff, 0xff, 3, 1, 0, 0, 0, 1, 0, 0xab, 0xcd, 0xef, 0x80, 0x01, 0, 0,
                0x7f, 0xff
            ]
        );
        assert_eq!(&f[25..29], &[0, 1, 2, 3]);
        assert_eq!(
            ServerMsg::PortChanged(PortChange::Down).encode(),
            [0, 0, 0, 2, 0x84, 1]
        );
        assert_eq!(
            ServerMsg::CapMask { id: 5, mask: 2 }.encode(),
            [0, 0, 0, 9, 0x87, 0, 0, 0, 5, 0, 0, 0, 2]
        );
        // COUNT_DROP: type 6, counter 1 (VL15Dropped), count.
        assert_eq!(
            ClientMsg::CountDrop {
                drop: ReceiveDrop::Vl15,
                count: 3
            }
            .encode(),
            [0, 0, 0, 6, 0x06, 1, 0, 0, 0, 3]
        );
    }

    #[test]
    fn a_count_drop_names_a_known_counter_and_counts_at_least_one() {
        for (bad, what) in [
            ([6u8, 0, 0, 0, 0, 1], "COUNT_DROP counter"),
            ([6, 9, 0, 0, 0, 1], "COUNT_DROP counter"),
            ([6, 1, 0, 0, 0, 0], "COUNT_DROP count"),
        ] {
            match ClientMsg::decode(&bad) {
                Err(WireError::Field { what: w, .. }) => assert_eq!(w, what),
                other => panic!("{bad:?}: {other:?}"),
            }
        }
        assert!(matches!(
            ClientMsg::decode(&[6, 1, 0, 0, 1]),
            Err(WireError::Size { .. })
        ));
    }

    #[test]
    fn the_servers_version_is_read_from_a_version_refusal() {
        // As a version-1 server wrote it, and as this one does.
        let v1 = "this server speaks protocol version 1, the client 2: use the same build of \
                  hca for both";
        assert_eq!(refused_version(v1), Some(1));
        assert_eq!(
            refused_version(&format!("{VERSION_REFUSAL}{VERSION}, the client 9: ...")),
            Some(VERSION)
        );
        assert_eq!(refused_version("speaks another version"), None);
        assert_eq!(refused_version(VERSION_REFUSAL), None);
        assert_eq!(refused_version(&format!("{VERSION_REFUSAL}99999")), None);
    }

    #[test]
    fn malformed_bodies_are_errors() {
        let good = ClientMsg::Transmit(packet(false)).encode();
        let b = body(&good);
        // One byte short, one byte long.
        assert!(matches!(
            ClientMsg::decode(&b[..b.len() - 1]),
            Err(WireError::Size { .. })
        ));
        let mut long = b.to_vec();
        long.push(0);
        assert!(matches!(
            ClientMsg::decode(&long),
            Err(WireError::Size { .. })
        ));
        // A flag the protocol does not define; an SL above 15; a 25-bit QP number.
        for (at, v, what) in [
            (6, 0x04, "packet flags"),
            (5, 16, "service level"),
            (7, 1, "source QP"),
        ] {
            let mut bad = b.to_vec();
            bad[at] = v;
            match ClientMsg::decode(&bad) {
                Err(WireError::Field { what: w, .. }) => assert_eq!(w, what),
                other => panic!("{what}: {other:?}"),
            }
        }
        assert_eq!(
            ClientMsg::decode(&[0x7f]),
            Err(WireError::UnknownType(0x7f))
        );
        assert_eq!(
            ClientMsg::decode(&[0x83]),
            Err(WireError::UnknownType(0x83)),
            "a server frame from a client"
        );
        assert!(matches!(
            ClientMsg::decode(&[1, b'X', b'C', b'A', b'F', 0, 1, 1, 0, 1, b'a']),
            Err(WireError::Magic(_))
        ));
        assert_eq!(
            ClientMsg::decode(&[1, b'H', b'C', b'A', b'F', 0, 1, 1, 0, 1, 0xff]),
            Err(WireError::Name("not UTF-8"))
        );
        assert_eq!(
            ClientMsg::decode(&[1, b'H', b'C', b'A', b'F', 0, 1, 1, 0, 0]),
            Err(WireError::Name("empty"))
        );
        assert!(matches!(
            ClientMsg::decode(&[1, b'H', b'C', b'A', b'F', 0, 1, 1, 0, 5, b'a']),
            Err(WireError::Size { .. })
        ));
        assert!(matches!(
            ServerMsg::decode(&[0x84, 9]),
            Err(WireError::Field { .. })
        ));
        assert!(matches!(
            ServerMsg::decode(&[0x82, 99]),
            Err(WireError::Field { .. })
        ));
    }

    #[test]
    fn frames_are_read_whole_or_refused() {
        let f = ClientMsg::PortInfo { id: 1 }.encode();
        let mut two = f.clone();
        two.extend_from_slice(&f);
        let mut r = &two[..];
        assert_eq!(read_frame(&mut r).unwrap().unwrap(), body(&f));
        assert_eq!(read_frame(&mut r).unwrap().unwrap(), body(&f));
        assert_eq!(read_frame(&mut r).unwrap(), None, "a clean end");
        let mut r = &f[..6];
        assert_eq!(
            read_frame(&mut r),
            Err(WireError::Truncated { want: 5, got: 2 })
        );
        let mut r = &f[..2];
        assert_eq!(
            read_frame(&mut r),
            Err(WireError::Truncated { want: 4, got: 2 })
        );
        for len in [0u32, MAX_FRAME as u32 + 1, u32::MAX] {
            let mut r = &len.to_be_bytes()[..];
            assert_eq!(read_frame(&mut r), Err(WireError::BadLength(len)));
        }
    }
}

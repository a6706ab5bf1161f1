//! Reading topology files in the ibnetdiscover / ibsim format into a [`Fabric`].
//!
//! The accepted syntax is ibsim's (`ibsim/sim_net.c` `parse_netconf`), which reads
//! ibnetdiscover's output (`infiniband-diags/ibnetdiscover.c`):
//!
//! ```text
//! # comment
//! vendid=0x2c9                     one-shot: the next node's VendorID
//! devid=0xcb20                     DeviceID of the following nodes (sticky, as in ibsim)
//! sysimgguid=0x248a070300f81a00    one-shot: the next node's SystemImageGUID
//! switchguid=0x248a070300f81a00(248a070300f81a00)   next switch GUID (port GUID in parens)
//! Switch  36 "S-248a070300f81a00"  # "MF0;leaf01:MQM8700/U1" enhanced port 0 lid 1 lmc 0
//! [1]     "H-0c42a10300a3e1c8"[1](c42a10300a3e1c9)   # "node01 mlx5_0" lid 6 4xHDR
//! [35]    "Switch2"[3]   w=2 s=7 e=4
//!
//! caguid=0x0c42a10300a3e1c8        next CA GUID (its port p gets GUID + p)
//! Ca      1 "H-0c42a10300a3e1c8"   # "node01 mlx5_0"
//! [1](c42a10300a3e1c9)  "S-248a070300f81a00"[1]  # lid 6 lmc 0 "MF0;leaf01" lid 1 4xHDR
//! ```
//!
//! * Records: `Switch`, `Hca`/`Ca`, `Rt`, then one line per linked port; a blank line or any
//!   line that is not a port line or comment ends the record. Port counts are 1-254, and a
//!   fabric holds at most [`MAX_FABRIC_PORTS`](super::builder::MAX_FABRIC_PORTS) ports in all
//!   (a header past it is refused before its ports are allocated; ibsim caps them too).
//! * A port line names the remote node and port (`[rp]` defaults to 1, as in ibsim). Every
//!   link must be described from both ends, consistently.
//! * Rates: a port starts from ibsim's defaults (4x, SDR) or the last `width=`/`speed=`/
//!   `extspeed=` directive, then the line's `w=`/`s=`/`e=` options apply, then an ibnetdiscover
//!   token (`4xQDR`) following the comment's last `lid N` (ibsim's precedence). Tokens are
//!   ibsim's, and `XDR` besides, which current ibnetdiscover prints and ibsim does not know
//!   ([`LinkRates::apply_token`]).
//! * Descriptions: a header's comment gives the node's NodeDescription; one longer than its 64
//!   bytes is cut to them with a warning. ibsim cuts shorter, to 63 bytes (`sim_net.c`
//!   `new_node` copies at most `sizeof(nodedesc) - 1` into its `char nodedesc[64]`), so its
//!   SMA never answers with 64 bytes and no NUL, as real hardware and ours may.
//! * LIDs: a switch header's `lid N lmc M` is port 0's; a CA or router line's comment starting
//!   `lid N lmc M` is that port's. A base LID with LMC must have its low LMC bits clear, and a
//!   base switch port 0 holds LMC 0 (ibsim takes any: `sim_net.c` `parse_port_lid_and_lmc`
//!   reads both numbers with `strtoul` and no check).
//! * GUIDs: absent ones follow ibsim's scheme ([`guid`](crate::fabric::guid)); a CA port's GUID
//!   comes from its own line's `(guid)`, else from the peer line's `(guid)`, else node GUID + p.
//!   (ibsim ignores parenthesised port GUIDs; we keep them because real ibnetdiscover output has
//!   port GUIDs that are not node + p.)
//! * `include "file"` (resolved from the including file's directory; 8 levels at most) and
//!   `module="prefix"` (names become `prefix#name`) work as in ibsim. ibnetdiscover's grouping
//!   lines (`Chassis`, `Hostname:`, `[ext N]`) are skipped.
//! * Stricter than ibsim, which ignores what it does not understand: unknown lines, options and
//!   link tokens are errors; ibsim aliases (`@`) and `do` commands are rejected as unsupported.

mod lines;
mod scan;

use std::borrow::Cow;
use std::path::{Path, PathBuf};

use self::lines::{Directive, Header, Line, PortLine, check_port, parse_line};
use super::builder::{
    FabricBuilder, MAX_DESCRIPTION_LEN, MAX_NAME_LEN, NodeSpec, Subject, check_text,
};
use super::error::{FabricError, Problem};
use super::model::{Fabric, NONE, NodeId, NodeType, PortId};
use super::rate::{LinkRates, SPEED_QDR};
use crate::idmap::IdKeyMap;
use crate::input_file::{MAX_TOPOLOGY_BYTES, read_text, read_text_io};

/// How deep `include` may nest (ibsim `MAX_INCLUDE` 9 files in all).
pub const MAX_INCLUDE_DEPTH: usize = 8;

/// Where the bound on a topology file comes from, for the error.
const TOPOLOGY_BOUND: &str = "the most a topology file may hold (64 MiB, several times a \
     fabric that uses every unicast LID)";
/// Where the bound on an included file comes from, for the error.
const INCLUDE_BOUND: &str = "what is left of the 64 MiB a topology may hold with all its \
     includes (several times a fabric that uses every unicast LID)";

/// Reads the text of an included file.
type Loader<'l> = dyn FnMut(&Path) -> std::io::Result<String> + 'l;

/// Where a line is: index into the parser's file names, and the 1-based line number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Loc {
    file: u16,
    line: u32,
}

/// What one port line said, kept until every record is read so links can be checked from
/// both ends.
#[derive(Debug, Clone, Copy)]
struct PortRef {
    remote_sym: u32,
    remote_port: u8,
    remote_guid: Option<u64>,
    loc: Loc,
}

const NO_REF: PortRef = PortRef {
    remote_sym: NONE,
    remote_port: 0,
    remote_guid: None,
    loc: Loc { file: 0, line: 0 },
};

struct Parser<'l> {
    b: FabricBuilder,
    loader: Option<&'l mut Loader<'l>>,
    files: Vec<String>,
    /// Directive state carried between lines, as ibsim keeps it in globals.
    defaults: LinkRates,
    vendid: Option<u32>,
    devid: u16,
    sysimgguid: Option<u64>,
    switch_port_guid: Option<u64>,
    module: String,
    /// Names seen (defined or referenced) and, once defined, their node.
    syms: IdKeyMap<Box<str>, u32>,
    sym_names: Vec<Box<str>>,
    sym_node: Vec<u32>,
    node_sym: Vec<u32>,
    node_loc: Vec<Loc>,
    /// Indexed by global port id.
    refs: Vec<PortRef>,
    current: Option<NodeId>,
}

impl Fabric {
    /// Reads a topology file, following its `include`s. Only regular files are read, and at
    /// most [`MAX_TOPOLOGY_BYTES`] in all (the file and everything it includes): a device such
    /// as `/dev/zero` or a FIFO is refused rather than read without end.
    pub fn parse_file(path: impl AsRef<Path>) -> Result<Fabric, FabricError> {
        let path = path.as_ref();
        let text = read_text(path, MAX_TOPOLOGY_BYTES, TOPOLOGY_BOUND).map_err(|source| {
            FabricError::Io {
                path: path.to_owned(),
                source,
            }
        })?;
        // The bound is on the whole topology: a file including a large file many times would
        // otherwise read 64 MiB per include.
        let mut left = MAX_TOPOLOGY_BYTES - text.len() as u64;
        let mut load = |p: &Path| {
            let t = read_text_io(p, left, INCLUDE_BOUND)?;
            left -= t.len() as u64;
            Ok(t)
        };
        let mut parser = Parser::new(Some(&mut load));
        parser.parse_text(&path.display().to_string(), path.parent(), &text, 0)?;
        parser.finish()
    }

    /// Reads topology text; `name` is what error messages call it. An `include` in it is an
    /// error (use [`parse_file`](Self::parse_file) or [`parse_str_with`](Self::parse_str_with)).
    pub fn parse_str(name: &str, text: &str) -> Result<Fabric, FabricError> {
        let mut parser = Parser::new(None);
        parser.parse_text(name, None, text, 0)?;
        parser.finish()
    }

    /// Reads topology text, getting included files from `load` (given the path as written,
    /// joined to `dir` when relative).
    pub fn parse_str_with(
        name: &str,
        dir: Option<&Path>,
        text: &str,
        load: &mut dyn FnMut(&Path) -> std::io::Result<String>,
    ) -> Result<Fabric, FabricError> {
        let mut parser = Parser::new(Some(load));
        parser.parse_text(name, dir, text, 0)?;
        parser.finish()
    }
}

impl<'l> Parser<'l> {
    fn new(loader: Option<&'l mut Loader<'l>>) -> Parser<'l> {
        Parser {
            b: FabricBuilder::new(),
            loader,
            files: Vec::new(),
            defaults: LinkRates::DEFAULT,
            vendid: None,
            devid: 0,
            sysimgguid: None,
            switch_port_guid: None,
            module: String::new(),
            syms: IdKeyMap::default(),
            sym_names: Vec::new(),
            sym_node: Vec::new(),
            node_sym: Vec::new(),
            node_loc: Vec::new(),
            refs: Vec::new(),
            current: None,
        }
    }

    fn err(&self, loc: Loc, problem: Problem) -> FabricError {
        FabricError::Parse {
            file: self.files[usize::from(loc.file)].clone(),
            line: loc.line,
            problem,
        }
    }

    /// How a message refers to `loc` seen from `from`: `line 12`, or `file line 12`.
    fn place(&self, loc: Loc, from: Loc) -> String {
        if loc.file == from.file {
            format!("line {}", loc.line)
        } else {
            format!("{} line {}", self.files[usize::from(loc.file)], loc.line)
        }
    }

    fn sym(&mut self, name: &str) -> u32 {
        if let Some(&s) = self.syms.get(name) {
            return s;
        }
        let s = self.sym_names.len() as u32;
        self.syms.insert(name.into(), s);
        self.sym_names.push(name.into());
        self.sym_node.push(NONE);
        s
    }

    fn qualify<'n>(&self, name: &'n str) -> Cow<'n, str> {
        if self.module.is_empty() || name.contains('#') {
            Cow::Borrowed(name)
        } else {
            Cow::Owned(format!("{}#{}", self.module, name))
        }
    }

    fn parse_text(
        &mut self,
        name: &str,
        dir: Option<&Path>,
        text: &str,
        depth: usize,
    ) -> Result<(), FabricError> {
        let file = u16::try_from(self.files.len()).map_err(|_| FabricError::Parse {
            file: name.to_owned(),
            line: 0,
            problem: Problem::Include {
                path: name.to_owned(),
                why: "more than 65535 files".to_owned(),
            },
        })?;
        self.files.push(name.to_owned());
        self.current = None;
        for (i, raw) in text.lines().enumerate() {
            let loc = Loc {
                file,
                line: u32::try_from(i + 1).unwrap_or(u32::MAX),
            };
            let line = parse_line(raw).map_err(|p| self.err(loc, p))?;
            match line {
                Line::Blank | Line::Ignored => self.current = None,
                Line::Comment => {}
                Line::Port(p) => {
                    let Some(node) = self.current else {
                        return Err(self.err(loc, Problem::PortLineOutsideRecord));
                    };
                    self.port_line(node, &p, loc)
                        .map_err(|p| self.err(loc, p))?;
                }
                Line::Header(h) => {
                    self.current = None;
                    let node = self.header(&h, loc).map_err(|p| self.err(loc, p))?;
                    self.current = Some(node);
                }
                Line::Directive(d) => {
                    self.current = None;
                    self.directive(d).map_err(|p| self.err(loc, p))?;
                }
                Line::Include(path) => {
                    self.current = None;
                    self.include(path, dir, depth, loc)?;
                    self.current = None;
                }
            }
        }
        Ok(())
    }

    /// Reads an included file. Its own errors name its own file and line.
    fn include(
        &mut self,
        path: &str,
        dir: Option<&Path>,
        depth: usize,
        loc: Loc,
    ) -> Result<(), FabricError> {
        let file = self.files[usize::from(loc.file)].clone();
        let fail = |why: String| FabricError::Parse {
            file: file.clone(),
            line: loc.line,
            problem: Problem::Include {
                path: path.to_owned(),
                why,
            },
        };
        if depth >= MAX_INCLUDE_DEPTH {
            return Err(fail(format!(
                "includes nest deeper than {MAX_INCLUDE_DEPTH} levels (does a file include itself?)"
            )));
        }
        let Some(loader) = self.loader.as_mut() else {
            return Err(fail(
                "includes are followed only when reading a file (Fabric::parse_file)".to_owned(),
            ));
        };
        let p = Path::new(path);
        let full: PathBuf = match dir {
            Some(d) if p.is_relative() => d.join(p),
            _ => p.to_owned(),
        };
        let text = match loader(&full) {
            Ok(t) => t,
            Err(e) => return Err(fail(e.to_string())),
        };
        let name = full.display().to_string();
        let sub_dir = full.parent().map(Path::to_owned);
        self.parse_text(&name, sub_dir.as_deref(), &text, depth + 1)
    }

    fn directive(&mut self, d: Directive<'_>) -> Result<(), Problem> {
        let range = |what: &'static str, v: u64, lo: u64, hi: u64, why: &'static str| {
            if v < lo || v > hi {
                Err(Problem::BadNumber {
                    what,
                    text: v.to_string(),
                    why,
                })
            } else {
                Ok(v as u8)
            }
        };
        match d {
            Directive::GuidBase {
                kind,
                value,
                relative,
                port_guid,
            } => {
                let g = self.b.guids_mut();
                if relative {
                    g.set_offset(kind, value);
                } else {
                    g.set_base(kind, value);
                }
                if kind == NodeType::Switch {
                    self.switch_port_guid = port_guid;
                }
            }
            Directive::VendId(v) => {
                if v > 0xff_ffff {
                    return Err(Problem::BadNumber {
                        what: "vendor id",
                        text: format!("{v:#x}"),
                        why: "VendorID has 24 bits",
                    });
                }
                self.vendid = Some(v as u32);
            }
            Directive::DevId(v) => {
                self.devid = u16::try_from(v).map_err(|_| Problem::BadNumber {
                    what: "device id",
                    text: format!("{v:#x}"),
                    why: "DeviceID has 16 bits",
                })?;
            }
            Directive::SysImgGuid(v) => self.sysimgguid = (v != 0).then_some(v),
            Directive::Width(v) => {
                self.defaults.width =
                    range("width", v, 1, 31, "must be a LinkWidthEnabled mask 1-31")?;
            }
            Directive::Speed(v) => {
                self.defaults.speed =
                    range("speed", v, 1, 7, "must be a LinkSpeedEnabled mask 1-7")?;
            }
            Directive::ExtSpeed(v) => {
                self.defaults.speed_ext = range(
                    "extspeed",
                    v,
                    0,
                    15,
                    "must be a LinkSpeedExtEnabled mask 0-15",
                )?;
            }
            Directive::Module(m) => m.clone_into(&mut self.module),
        }
        Ok(())
    }

    fn header(&mut self, h: &Header<'_>, loc: Loc) -> Result<NodeId, Problem> {
        if h.id.is_empty() || h.id.contains(['#', '@']) {
            return Err(Problem::BadName {
                what: "node id",
                text: h.id.to_owned(),
                why: "must be non-empty, without `#` or `@` (ibsim reserves them for modules and aliases)",
            });
        }
        let name = self.qualify(h.id);
        check_text("node id", &name, MAX_NAME_LEN)?;
        if h.num_ports == 0 || h.num_ports > 254 {
            return Err(Problem::PortCountOutOfRange { count: h.num_ports });
        }
        // Before the node's ports (and their line records) are allocated.
        self.b.check_room(h.num_ports as u8)?;
        let sym = self.sym(&name);
        if self.sym_node[sym as usize] != NONE {
            let first = self.node_loc[self.sym_node[sym as usize] as usize];
            return Err(Problem::DuplicateNode {
                name: name.into_owned(),
                first: Some(self.place(first, loc)),
            });
        }
        let description = h.description.map(|d| self.fit_description(d, &name, loc));
        let spec = NodeSpec {
            kind: h.kind,
            name: &name,
            description,
            num_ports: h.num_ports as u8,
            guid: None,
            sys_image_guid: self.sysimgguid.take(),
            switch_port_guid: if h.kind == NodeType::Switch {
                self.switch_port_guid.take()
            } else {
                None
            },
            vendor_id: self.vendid.take().unwrap_or(0),
            device_id: self.devid,
            enabled: self.defaults,
            enhanced_port0: h.enhanced_port0,
        };
        let node = self.b.add_node(&spec)?;
        self.switch_port_guid = None;
        self.sym_node[sym as usize] = node.0;
        self.node_sym.push(sym);
        self.node_loc.push(loc);
        self.refs.resize(self.b.fabric().ports.len(), NO_REF);
        if h.lid.is_some() || h.lmc.is_some() {
            let p0 = self
                .b
                .fabric()
                .port_id(node, 0)
                .expect("switches have port 0");
            let (lid, lmc) = lid_lmc(h.lid, h.lmc, || self.b.fabric().port_label(p0))?;
            self.b.set_lid(p0, lid, lmc)?;
        }
        Ok(node)
    }

    /// A header's description cut to the 64 bytes of NodeDescription (at a character
    /// boundary): ibnetdiscover with a node-name map can print longer names, and a file it
    /// wrote should read. ibsim cuts to 63 bytes (`sim_net.c` `new_node`: `strncpy` of
    /// `sizeof(nodedesc) - 1`); we keep all 64, as a real SMA may fill them with no NUL.
    fn fit_description<'d>(&self, d: &'d str, node: &str, loc: Loc) -> &'d str {
        if d.len() <= MAX_DESCRIPTION_LEN {
            return d;
        }
        let end = (0..=MAX_DESCRIPTION_LEN)
            .rev()
            .find(|&i| d.is_char_boundary(i))
            .unwrap_or(0);
        tracing::warn!(
            "{}:{}: the description of `{node}` is {} bytes; NodeDescription holds {}, so it \
             is cut to `{}`",
            self.files[usize::from(loc.file)],
            loc.line,
            d.len(),
            MAX_DESCRIPTION_LEN,
            &d[..end]
        );
        &d[..end]
    }

    fn port_line(&mut self, node: NodeId, p: &PortLine<'_>, loc: Loc) -> Result<(), Problem> {
        let f = self.b.fabric();
        let n = f.node(node);
        let (kind, num_ports) = (n.kind(), n.num_ports());
        let num = check_port(p.port, f.name(node), num_ports)?;
        let pid = f
            .port_id(node, num)
            .expect("checked against the port count");
        let prev = self.refs[pid.index()];
        if prev.remote_sym != NONE {
            return Err(Problem::DuplicatePortLine {
                node: f.name(node).to_owned(),
                port: num,
                first_line: prev.loc.line,
            });
        }
        if p.remote.contains('@') {
            return Err(Problem::Unsupported {
                what: "an ibsim alias as remote node (`\"name@alias\"`)",
                hint: "name the remote node and port directly",
            });
        }
        if p.remote.is_empty() {
            return Err(Problem::BadName {
                what: "remote node id",
                text: String::new(),
                why: "empty",
            });
        }
        if p.remote_port == 0 {
            return Err(Problem::PortZero);
        }
        let remote_port = u8::try_from(p.remote_port)
            .ok()
            .filter(|&rp| rp <= 254)
            .ok_or_else(|| Problem::BadNumber {
                what: "remote port number",
                text: p.remote_port.to_string(),
                why: "ports are numbered 1-254",
            })?;
        // Rates: the node's defaults, then the options, then the token (ibsim's order).
        let mut rates = f.port(pid).enabled;
        if let Some(w) = p.width {
            rates.width = w as u8;
        }
        if let Some(s) = p.speed {
            rates.speed = if s == 0 { SPEED_QDR } else { s as u8 };
        }
        if let Some(e) = p.speed_ext {
            rates.speed_ext = e as u8;
        }
        if let Some((w, s)) = p.token {
            rates = rates.apply_token(w, s)?;
        }
        self.b.set_enabled(pid, rates);
        if let Some(g) = p.own_guid {
            if kind == NodeType::Switch {
                return Err(Problem::InvalidPort {
                    port: self.b.fabric().port_label(pid),
                    why: "a switch port line carries no GUID of its own; give the switch's port GUID as switchguid=X(P)",
                });
            }
            self.b.set_port_guid(pid, g)?;
        }
        if kind != NodeType::Switch && (p.local_lid.is_some() || p.local_lmc.is_some()) {
            let (lid, lmc) = lid_lmc(p.local_lid, p.local_lmc, || self.b.fabric().port_label(pid))?;
            self.b.set_lid(pid, lid, lmc)?;
        }
        let remote = self.qualify(p.remote);
        check_text("remote node id", &remote, MAX_NAME_LEN)?;
        let remote_sym = self.sym(&remote);
        self.refs[pid.index()] = PortRef {
            remote_sym,
            remote_port,
            remote_guid: p.remote_guid,
            loc,
        };
        Ok(())
    }

    /// Links every described port to its peer once all records are read, checking both ends
    /// agree, then trains the links.
    fn finish(mut self) -> Result<Fabric, FabricError> {
        for i in 0..self.refs.len() {
            let r = self.refs[i];
            if r.remote_sym == NONE {
                continue;
            }
            let pid = PortId(i as u32);
            self.resolve(pid, r).map_err(|p| self.err(r.loc, p))?;
        }
        let (refs, node_loc, files) = (self.refs, self.node_loc, self.files);
        self.b
            .finish()
            .map_err(|(problem, Subject::Port(p, node))| {
                // The port's line, or its node's header for a port without one (a switch's port 0).
                let loc = if refs[p.index()].remote_sym == NONE {
                    node_loc[node.index()]
                } else {
                    refs[p.index()].loc
                };
                FabricError::Parse {
                    file: files[usize::from(loc.file)].clone(),
                    line: loc.line,
                    problem,
                }
            })
    }

    fn resolve(&mut self, pid: PortId, r: PortRef) -> Result<(), Problem> {
        let f = self.b.fabric();
        let local_node = f.port(pid).node();
        let remote_name = &self.sym_names[r.remote_sym as usize];
        let rnode = self.sym_node[r.remote_sym as usize];
        if rnode == NONE {
            return Err(Problem::UnknownRemoteNode {
                name: remote_name.to_string(),
            });
        }
        let rnode = NodeId(rnode);
        let qid = f
            .port_id(rnode, r.remote_port)
            .ok_or_else(|| Problem::PortOutOfRange {
                node: remote_name.to_string(),
                port: u64::from(r.remote_port),
                num_ports: f.node(rnode).num_ports(),
            })?;
        // Named only in errors: not formatted for every link.
        let remote = || format!("\"{remote_name}\"[{}]", r.remote_port);
        if qid == pid {
            return Err(Problem::SelfLink {
                port: f.port_label(pid),
            });
        }
        let q = self.refs[qid.index()];
        let back =
            q.remote_sym == self.node_sym[local_node.index()] && q.remote_port == f.port(pid).num();
        if !back {
            let remote_says: Option<Box<str>> = (q.remote_sym != NONE).then(|| {
                format!(
                    "\"{}\"[{}]",
                    self.sym_names[q.remote_sym as usize], q.remote_port
                )
                .into()
            });
            return Err(Problem::InconsistentLink {
                local: f.port_label(pid),
                remote: remote(),
                remote_at: remote_says
                    .as_ref()
                    .map(|_| self.place(q.loc, r.loc).into()),
                remote_says,
            });
        }
        // The peer's GUID as this line gives it must agree with what the peer's own line says;
        // if the peer's line says nothing, this line's GUID is the peer's.
        if let Some(g) = r.remote_guid {
            let have = f.port(qid).guid();
            let remote_is_switch = f.node(rnode).kind() == NodeType::Switch;
            if have != g {
                if remote_is_switch || self.b.has_explicit_guid(qid) {
                    return Err(Problem::InconsistentPortGuid {
                        port: remote(),
                        here: g,
                        there: have,
                        other: (!remote_is_switch).then(|| self.place(q.loc, r.loc)),
                    });
                }
                self.b.set_port_guid(qid, g)?;
            }
        }
        if pid < qid {
            self.b.link(pid, qid)?;
        }
        Ok(())
    }
}

/// A LID and LMC from a file, checked to fit the unicast range; `port` names the port in
/// the error (formatted only then: most CA lines of ibnetdiscover's output carry a LID).
fn lid_lmc(
    lid: Option<u64>,
    lmc: Option<u64>,
    port: impl FnOnce() -> String,
) -> Result<(u16, u8), Problem> {
    let (l, m) = (lid.unwrap_or(0), lmc.unwrap_or(0));
    match (u16::try_from(l), u8::try_from(m)) {
        (Ok(l16), Ok(m8)) if super::model::lid_range(l16, m8).is_some() => Ok((l16, m8)),
        _ => Err(Problem::LidOutOfRange {
            lid: l,
            lmc: m,
            port: port(),
        }),
    }
}

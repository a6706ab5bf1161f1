//! The SMA state of a network, saved to a text file and loaded back onto a network built
//! from the same topology: what a subnet manager configured (port states, LIDs, SM LID,
//! M_Key, P_Keys, the switches' SwitchInfo and forwarding tables) outlives the process that
//! ran it, so that a later process (a diagnostic tool over the umad library) sees the
//! configured fabric.
//!
//! # Format (version 1)
//!
//! UTF-8 text, one record per line, fields separated by spaces, `#` starts a comment line.
//! Nodes are named by NodeGUID (hex), ports by node and number (0 is a switch's port 0).
//!
//! ```text
//! hca-sim-state 1
//! fabric nodes=<n> ports=<slots> guids=<xor of NodeGUIDs, hex>
//! port <guid> <num> ls=<PortState> ps=<PhysState> lid=<n> lmc=<n> mkey=<hex> lease=<n>
//!      protect=<n> prefix=<hex> smlid=<n> smsl=<n> cap=<hex> nmtu=<n> opvls=<n> hoq=<n>
//!      en=<width>,<speed>,<ext>,<fdr10>[,<ext2>] act=<width>,<speed>,<ext>,<fdr10>[,<ext2>]
//! extra <guid> <num> ldd=<n> vhl=<n> vsc=<n> sto=<n> lpe=<n> ove=<n> pe=<in><out> fr=<in><out>
//! pkeys <guid> <num> <hex>,<hex>,...
//! switch <guid> top=<n> dport=<n> dmpp=<n> dmnpp=<n> life=<n> psc=<0|1> mtop=<n> lpp=<n>
//! lft <guid> <hex port per LID, 2 digits each, from LID 0>
//! mft <guid> <hex 16-bit mask words, 4 digits each, from MLID 0xC000>
//! ```
//!
//! (`port` records are one line.) `<ext2>` (LinkSpeedExtEnabled2 / LinkSpeedExtActive2: XDR)
//! is written only when it is not 0, so the records of a fabric without XDR are as before,
//! and a record without it reads as 0. `lpp=` (LIDsPerPort) was added later: a `switch` record
//! without it loads and leaves LIDsPerPort as it was. Every port slot has a `port` record; `extra`, `pkeys`,
//! `lft` and `mft` only where the SM wrote something. The `fabric` line must match the
//! network the file is loaded onto, or loading fails without changing anything. So does a
//! record holding what the SMA could not: a value a PortInfo or SwitchInfo Set refuses or
//! its field cannot carry (the Set's own checks, `crate::fabric::sma::limits`), a P_Key table
//! of another length than the port's, a LID range beyond the unicast LIDs or a base LID with
//! any of its low LMC bits set, a link one end of which is up and the other Down; the error
//! names the record's line.
//! CapabilityMask is saved without IsSM: the SM that held the port is gone when the file is
//! read. Not saved: SL-to-VL and VL arbitration tables, alias GUIDs, PMA counters, link and
//! node faults, and PortInfo's M_Key, P_Key and Q_Key violation counters (they load as 0).

use std::fmt::Write as _;
use std::path::Path;

use mad_wire::attr::port_info::cap_mask;

use super::engine::NetState;
use super::{NetError, Network};
use crate::fabric::model::lid_aligned;
use crate::fabric::rate::{ActiveRates, LinkRates};
use crate::fabric::sma::defaults::CA_PARTITION_CAP;
use crate::fabric::sma::limits::{self, HeldPortInfo, PortInfoField, SwitchInfoField};
use crate::fabric::sma::{PortExtra, pkey_capacity, port_kind};
use crate::fabric::state::{LinkState, PhysState};
use crate::fabric::{Fabric, NodeId, PortId};
use crate::input_file::read_text;

/// The first line of a state file.
pub const MAGIC: &str = "hca-sim-state";
/// The format version this code writes and reads.
pub const VERSION: u32 = 1;

impl Network {
    /// The network's SMA state in the state-file format.
    pub fn state_text(&self) -> String {
        self.shared.run(|st| write_state(st))
    }

    /// Save the SMA state to `path` (written to a temporary file beside it, then renamed, so
    /// that a reader never sees half a file).
    pub fn save_state(&self, path: &Path) -> Result<(), NetError> {
        let text = self.state_text();
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        let io = |e: std::io::Error| NetError::StateFile {
            path: path.display().to_string(),
            line: 0,
            problem: e.to_string(),
        };
        std::fs::write(&tmp, text).map_err(io)?;
        std::fs::rename(&tmp, path).map_err(io)
    }

    /// Load a state saved by [`Network::save_state`] from a network of the same topology.
    /// Nothing changes if the file is malformed or was saved from another fabric. Only a
    /// regular file no larger than any state this fabric can save ([`max_state_bytes`]) is
    /// read: a device such as `/dev/zero` or a FIFO is refused rather than read without end.
    pub fn load_state(&self, path: &Path) -> Result<(), NetError> {
        let (limit, nodes) = self
            .shared
            .run(|st| (max_state_bytes(&st.fabric), st.fabric.node_count()));
        let why = format!("the most a state saved from this fabric of {nodes} nodes can hold");
        let text = read_text(path, limit, &why).map_err(|source| NetError::StateFileRead {
            path: path.display().to_string(),
            source,
        })?;
        self.load_state_text(&text)
            .map_err(|(line, problem)| NetError::StateFile {
                path: path.display().to_string(),
                line,
                problem,
            })
    }

    /// [`Network::load_state`] from the text itself; the error is (line, problem).
    pub fn load_state_text(&self, text: &str) -> Result<(), (usize, String)> {
        self.shared.run(|st| {
            let parsed = parse(&st.fabric, text)?;
            apply(st, parsed).map_err(|p| (0, p))
        })
    }
}

/// The most a state file saved from `f` can hold, with room to spare for hand-added comments:
/// twice the longest every record can be written (a port, its `extra` and a full P_Key table
/// per port slot; a switch line with a full LFT and MFT per switch), plus 1 MiB.
pub fn max_state_bytes(f: &Fabric) -> u64 {
    // Longest line of each fixed-size record, rounded up: `port` ~330 bytes, `extra` ~110,
    // `switch` ~120, the GUID and port number prefix of `pkeys`, `lft` and `mft` ~25.
    const PORT_RECORDS: u64 = 1024;
    const SWITCH_RECORD: u64 = 256;
    const PREFIX: u64 = 64;
    let mut total: u64 = 0;
    for n in f.node_ids() {
        let slots = u64::from(f.node(n).num_ports()) + 1;
        // A P_Key is 4 hex digits and a comma; no port's table is longer than a CA's.
        total += slots * (PORT_RECORDS + PREFIX + 5 * u64::from(CA_PARTITION_CAP));
        if let Some(sw) = f.switch(n) {
            // A port per LID in 2 hex digits; a 16-bit mask word per MLID and position in 4.
            let lft = 2 * u64::from(sw.info.linear_fdb_cap);
            let mft = 4 * u64::from(sw.info.multicast_fdb_cap) * u64::from(sw.mft_positions);
            total += SWITCH_RECORD + 2 * PREFIX + lft + mft;
        }
    }
    2 * total + (1 << 20)
}

/// What a state file must have been saved from: node and port counts and the NodeGUIDs in
/// file order.
fn fingerprint(f: &Fabric) -> (usize, usize, u64) {
    let guids = f
        .node_ids()
        .fold(0u64, |acc, n| acc ^ f.node(n).guid().rotate_left(n.0 % 64));
    (f.node_count(), f.port_count(), guids)
}

fn rates(w: u8, s: u8, e: u8, f: bool, e2: u8) -> String {
    if e2 == 0 {
        format!("{w},{s},{e},{}", u8::from(f))
    } else {
        format!("{w},{s},{e},{},{e2}", u8::from(f))
    }
}

fn write_state(st: &NetState) -> String {
    let f = &st.fabric;
    let mut out = String::new();
    let (nodes, ports, guids) = fingerprint(f);
    let _ = writeln!(out, "# simulated fabric state, sim/src/net/state_file.rs");
    let _ = writeln!(out, "{MAGIC} {VERSION}");
    let _ = writeln!(out, "fabric nodes={nodes} ports={ports} guids={guids:x}");
    for n in f.node_ids() {
        let guid = f.node(n).guid();
        let first = u8::from(f.switch(n).is_none());
        for num in first..=f.node(n).num_ports() {
            let Some(pid) = f.port_id(n, num) else {
                continue;
            };
            let p = f.port(pid);
            let s = &p.state;
            let _ = writeln!(
                out,
                "port {guid:x} {num} ls={} ps={} lid={} lmc={} mkey={:x} lease={} protect={} \
                 prefix={:x} smlid={} smsl={} cap={:x} nmtu={} opvls={} hoq={} en={} act={}",
                s.link_state as u8,
                s.phys_state as u8,
                p.lid(),
                p.lmc(),
                s.m_key,
                s.m_key_lease_period,
                s.m_key_protect,
                s.subnet_prefix,
                s.sm_lid,
                s.sm_sl,
                s.capability_mask & !cap_mask::IS_SM,
                s.neighbor_mtu,
                s.op_vls,
                s.hoq_life,
                rates(
                    p.enabled.width,
                    p.enabled.speed,
                    p.enabled.speed_ext,
                    p.enabled.fdr10,
                    p.enabled.speed_ext2
                ),
                rates(
                    s.active.width,
                    s.active.speed,
                    s.active.speed_ext,
                    s.active.fdr10,
                    s.active.speed_ext2
                ),
            );
            if let Some(x) = st.agents.extra.get(pid) {
                let _ = writeln!(
                    out,
                    "extra {guid:x} {num} ldd={} vhl={} vsc={} sto={} lpe={} ove={} pe={}{} fr={}{}",
                    x.link_down_default,
                    x.vl_high_limit,
                    x.vl_stall_count,
                    x.subnet_timeout,
                    x.local_phy_errors,
                    x.overrun_errors,
                    u8::from(x.partition_enforcement_inbound),
                    u8::from(x.partition_enforcement_outbound),
                    u8::from(x.filter_raw_inbound),
                    u8::from(x.filter_raw_outbound),
                );
            }
            if let Some(t) = st.agents.pkeys.get(pid) {
                let list: Vec<String> = t.iter().map(|k| format!("{k:04x}")).collect();
                let _ = writeln!(out, "pkeys {guid:x} {num} {}", list.join(","));
            }
        }
        if let Some(sw) = f.switch(n) {
            let i = &sw.info;
            let _ = writeln!(
                out,
                "switch {guid:x} top={} dport={} dmpp={} dmnpp={} life={} psc={} mtop={} lpp={}",
                i.linear_fdb_top,
                i.default_port,
                i.default_mcast_primary_port,
                i.default_mcast_not_primary_port,
                i.life_time_value,
                u8::from(i.port_state_change),
                i.multicast_fdb_top,
                i.lids_per_port,
            );
            if !sw.lft.is_empty() {
                let mut hex = String::with_capacity(sw.lft.len() * 2);
                for b in &sw.lft {
                    let _ = write!(hex, "{b:02x}");
                }
                let _ = writeln!(out, "lft {guid:x} {hex}");
            }
            if !sw.mft.is_empty() {
                let mut hex = String::with_capacity(sw.mft.len() * 4);
                for w in &sw.mft {
                    let _ = write!(hex, "{w:04x}");
                }
                let _ = writeln!(out, "mft {guid:x} {hex}");
            }
        }
    }
    out
}

/// A port record.
struct PortRec {
    line: usize,
    port: PortId,
    link_state: LinkState,
    phys_state: PhysState,
    lid: u16,
    lmc: u8,
    m_key: u64,
    lease: u16,
    protect: u8,
    prefix: u64,
    sm_lid: u16,
    sm_sl: u8,
    cap: u32,
    nmtu: u8,
    op_vls: u8,
    hoq: u8,
    enabled: LinkRates,
    active: ActiveRates,
}

struct SwitchRec {
    line: usize,
    node: NodeId,
    top: u16,
    dport: u8,
    dmpp: u8,
    dmnpp: u8,
    life: u8,
    psc: bool,
    mtop: u16,
    /// LIDsPerPort; `None` in a file written before it was saved.
    lpp: Option<u16>,
}

#[derive(Default)]
struct Parsed {
    ports: Vec<PortRec>,
    extra: Vec<(usize, PortId, PortExtra)>,
    pkeys: Vec<(PortId, Vec<u16>)>,
    switches: Vec<SwitchRec>,
    lfts: Vec<(NodeId, Vec<u8>)>,
    mfts: Vec<(NodeId, Vec<u16>)>,
}

type Problem = (usize, String);

fn num<T: TryFrom<u64>>(s: &str, hex: bool) -> Option<T> {
    let v = if hex {
        u64::from_str_radix(s, 16).ok()?
    } else {
        s.parse::<u64>().ok()?
    };
    T::try_from(v).ok()
}

/// The `key=value` fields of a record.
struct Fields<'a> {
    line: usize,
    kv: Vec<(&'a str, &'a str)>,
}

impl<'a> Fields<'a> {
    fn new(line: usize, words: &[&'a str]) -> Result<Self, Problem> {
        let kv = words
            .iter()
            .map(|w| {
                w.split_once('=')
                    .ok_or_else(|| (line, format!("{w:?} is not key=value")))
            })
            .collect::<Result<_, _>>()?;
        Ok(Fields { line, kv })
    }

    fn raw(&self, key: &str) -> Result<&'a str, Problem> {
        self.kv
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| *v)
            .ok_or_else(|| (self.line, format!("missing {key}=")))
    }

    fn get<T: TryFrom<u64>>(&self, key: &str, hex: bool) -> Result<T, Problem> {
        let v = self.raw(key)?;
        num(v, hex).ok_or_else(|| (self.line, format!("{key}={v}: not a number in range")))
    }

    /// A field older files lack: `None` if absent, an error if present and bad.
    fn get_opt<T: TryFrom<u64>>(&self, key: &str, hex: bool) -> Result<Option<T>, Problem> {
        if self.kv.iter().any(|(k, _)| *k == key) {
            self.get(key, hex).map(Some)
        } else {
            Ok(None)
        }
    }

    fn bits(&self, key: &str) -> Result<(bool, bool), Problem> {
        match self.raw(key)? {
            "00" => Ok((false, false)),
            "01" => Ok((false, true)),
            "10" => Ok((true, false)),
            "11" => Ok((true, true)),
            v => Err((self.line, format!("{key}={v}: expected two 0/1 digits"))),
        }
    }

    fn rates(&self, key: &str) -> Result<(u8, u8, u8, bool, u8), Problem> {
        let value = self.raw(key)?;
        let parts: Vec<Option<u8>> = value.split(',').map(|p| num::<u8>(p, false)).collect();
        match parts[..] {
            [Some(width), Some(speed), Some(ext), Some(fdr10 @ 0..=1)] => {
                Ok((width, speed, ext, fdr10 == 1, 0))
            }
            [
                Some(width),
                Some(speed),
                Some(ext),
                Some(fdr10 @ 0..=1),
                Some(ext2),
            ] => Ok((width, speed, ext, fdr10 == 1, ext2)),
            _ => Err((
                self.line,
                format!(
                    "{key}={value}: expected width,speed,ext,fdr10 or width,speed,ext,fdr10,ext2"
                ),
            )),
        }
    }
}

fn link_state(v: u8) -> Option<LinkState> {
    Some(match v {
        1 => LinkState::Down,
        2 => LinkState::Init,
        3 => LinkState::Armed,
        4 => LinkState::Active,
        _ => return None,
    })
}

fn phys_state(v: u8) -> Option<PhysState> {
    Some(match v {
        1 => PhysState::Sleep,
        2 => PhysState::Polling,
        3 => PhysState::Disabled,
        4 => PhysState::Training,
        5 => PhysState::LinkUp,
        6 => PhysState::LinkErrorRecovery,
        7 => PhysState::PhyTest,
        _ => return None,
    })
}

fn hex_bytes(line: usize, s: &str, width: usize) -> Result<Vec<u64>, Problem> {
    if s.len() % width != 0 || !s.is_ascii() {
        return Err((
            line,
            format!(
                "hex table of {} digits is not in groups of {width}",
                s.len()
            ),
        ));
    }
    (0..s.len() / width)
        .map(|i| {
            u64::from_str_radix(&s[i * width..(i + 1) * width], 16)
                .map_err(|_| (line, format!("bad hex at entry {i}")))
        })
        .collect()
}

fn parse(f: &Fabric, text: &str) -> Result<Parsed, Problem> {
    let mut parsed = Parsed::default();
    let mut lines = text
        .lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.trim()))
        .filter(|(_, l)| !l.is_empty() && !l.starts_with('#'));
    match lines.next() {
        Some((_, l)) if l == format!("{MAGIC} {VERSION}") => {}
        Some((n, l)) if l.starts_with(MAGIC) => {
            return Err((
                n,
                format!("{l:?}: this program reads version {VERSION} only"),
            ));
        }
        Some((n, _)) => {
            return Err((
                n,
                format!("not a simulated fabric state file (no \"{MAGIC} {VERSION}\" line)"),
            ));
        }
        None => return Err((1, "the file is empty".to_owned())),
    }
    let (nodes, ports, guids) = fingerprint(f);
    let mut seen_fabric = false;
    for (n, l) in lines {
        let words: Vec<&str> = l.split_whitespace().collect();
        let node_of = |w: &str| -> Result<NodeId, Problem> {
            let g = num::<u64>(w, true).ok_or_else(|| (n, format!("{w:?} is not a GUID")))?;
            f.node_by_guid(g)
                .ok_or_else(|| (n, format!("no node with GUID {g:#x} in this fabric")))
        };
        let port_of = |g: &str, p: &str| -> Result<PortId, Problem> {
            let node = node_of(g)?;
            let num = num::<u8>(p, false).ok_or_else(|| (n, format!("{p:?} is not a port")))?;
            f.port_id(node, num)
                .ok_or_else(|| (n, format!("node {g} has no port {num}")))
        };
        match words.first().copied() {
            Some("fabric") => {
                let k = Fields::new(n, &words[1..])?;
                let want = (
                    k.get::<usize>("nodes", false)?,
                    k.get::<usize>("ports", false)?,
                    k.get::<u64>("guids", true)?,
                );
                if want != (nodes, ports, guids) {
                    return Err((
                        n,
                        format!(
                            "saved from another fabric ({} nodes, {} port slots) than this one \
                             ({nodes} nodes, {ports} port slots) or with other GUIDs: load it \
                             onto the topology it was saved from",
                            want.0, want.1
                        ),
                    ));
                }
                seen_fabric = true;
            }
            Some("port") if words.len() >= 3 => {
                let port = port_of(words[1], words[2])?;
                let k = Fields::new(n, &words[3..])?;
                let (ew, es, ee, ef, ee2) = k.rates("en")?;
                let (aw, as_, ae, af, ae2) = k.rates("act")?;
                parsed.ports.push(PortRec {
                    line: n,
                    port,
                    link_state: link_state(k.get("ls", false)?)
                        .ok_or_else(|| (n, "ls= must be 1-4".to_owned()))?,
                    phys_state: phys_state(k.get("ps", false)?)
                        .ok_or_else(|| (n, "ps= must be 1-7".to_owned()))?,
                    lid: k.get("lid", false)?,
                    lmc: k.get("lmc", false)?,
                    m_key: k.get("mkey", true)?,
                    lease: k.get("lease", false)?,
                    protect: k.get("protect", false)?,
                    prefix: k.get("prefix", true)?,
                    sm_lid: k.get("smlid", false)?,
                    sm_sl: k.get("smsl", false)?,
                    cap: k.get("cap", true)?,
                    nmtu: k.get("nmtu", false)?,
                    op_vls: k.get("opvls", false)?,
                    hoq: k.get("hoq", false)?,
                    enabled: LinkRates {
                        width: ew,
                        speed: es,
                        speed_ext: ee,
                        speed_ext2: ee2,
                        fdr10: ef,
                    },
                    active: ActiveRates {
                        width: aw,
                        speed: as_,
                        speed_ext: ae,
                        speed_ext2: ae2,
                        fdr10: af,
                    },
                });
            }
            Some("extra") if words.len() >= 3 => {
                let port = port_of(words[1], words[2])?;
                let k = Fields::new(n, &words[3..])?;
                let (pei, peo) = k.bits("pe")?;
                let (fri, fro) = k.bits("fr")?;
                parsed.extra.push((
                    n,
                    port,
                    PortExtra {
                        link_down_default: k.get("ldd", false)?,
                        vl_high_limit: k.get("vhl", false)?,
                        vl_stall_count: k.get("vsc", false)?,
                        subnet_timeout: k.get("sto", false)?,
                        m_key_violations: 0,
                        p_key_violations: 0,
                        q_key_violations: 0,
                        local_phy_errors: k.get("lpe", false)?,
                        overrun_errors: k.get("ove", false)?,
                        partition_enforcement_inbound: pei,
                        partition_enforcement_outbound: peo,
                        filter_raw_inbound: fri,
                        filter_raw_outbound: fro,
                        lease_deadline: None,
                    },
                ));
            }
            Some("pkeys") if words.len() == 4 => {
                let port = port_of(words[1], words[2])?;
                let keys = words[3]
                    .split(',')
                    .map(|k| num::<u16>(k, true).ok_or_else(|| (n, format!("P_Key {k:?}"))))
                    .collect::<Result<Vec<u16>, _>>()?;
                // The SMA reads and writes the table in blocks up to the port's capacity.
                let cap = pkey_capacity(f, port);
                if keys.len() != cap {
                    return Err((
                        n,
                        format!(
                            "P_Key table of {} entries, port has {cap}: a saved table holds \
                             every entry of the port's table",
                            keys.len()
                        ),
                    ));
                }
                parsed.pkeys.push((port, keys));
            }
            Some("switch") if words.len() >= 2 => {
                let node = node_of(words[1])?;
                if f.switch(node).is_none() {
                    return Err((n, format!("node {} is not a switch", words[1])));
                }
                let k = Fields::new(n, &words[2..])?;
                parsed.switches.push(SwitchRec {
                    line: n,
                    node,
                    top: k.get("top", false)?,
                    dport: k.get("dport", false)?,
                    dmpp: k.get("dmpp", false)?,
                    dmnpp: k.get("dmnpp", false)?,
                    life: k.get("life", false)?,
                    psc: k.get::<u8>("psc", false)? != 0,
                    mtop: k.get("mtop", false)?,
                    lpp: k.get_opt("lpp", false)?,
                });
            }
            Some("lft") if words.len() == 3 => {
                let node = node_of(words[1])?;
                let sw = f
                    .switch(node)
                    .ok_or_else(|| (n, format!("node {} is not a switch", words[1])))?;
                let t: Vec<u8> = hex_bytes(n, words[2], 2)?
                    .into_iter()
                    .map(|b| b as u8)
                    .collect();
                if t.len() > usize::from(sw.info.linear_fdb_cap) {
                    return Err((
                        n,
                        format!("LFT of {} entries exceeds LinearFDBCap", t.len()),
                    ));
                }
                parsed.lfts.push((node, t));
            }
            Some("mft") if words.len() == 3 => {
                let node = node_of(words[1])?;
                let sw = f
                    .switch(node)
                    .ok_or_else(|| (n, format!("node {} is not a switch", words[1])))?;
                let t: Vec<u16> = hex_bytes(n, words[2], 4)?
                    .into_iter()
                    .map(|w| w as u16)
                    .collect();
                let per = usize::from(sw.mft_positions);
                if t.len() % per != 0 || t.len() / per > usize::from(sw.info.multicast_fdb_cap) {
                    return Err((n, "MFT does not fit the switch".to_owned()));
                }
                parsed.mfts.push((node, t));
            }
            _ => return Err((n, format!("unknown or malformed record {l:?}"))),
        }
    }
    if !seen_fabric {
        return Err((1, "no \"fabric\" line: the file is cut short".to_owned()));
    }
    check_lids(f, &parsed)?;
    check_ports(f, &parsed)?;
    check_links(f, &parsed)?;
    check_switches(f, &parsed)?;
    Ok(parsed)
}

/// Every LID range fits the unicast LIDs, starts at a base LID aligned to its LMC and sits on
/// a port that can hold LIDs: applying the records then cannot fail half-way. Ranges may overlap: an SM moving LIDs leaves a LID with
/// two holders for a while (`Fabric::assign_lid`), and a state saved then loads back.
fn check_lids(f: &Fabric, parsed: &Parsed) -> Result<(), Problem> {
    for r in parsed.ports.iter().filter(|r| r.lid != 0) {
        let label = f.port_label(r.port);
        let p = f.port(r.port);
        if (f.switch(p.node()).is_some()) != (p.num() == 0) {
            return Err((r.line, format!("{label} cannot hold LID {}", r.lid)));
        }
        let end = u32::from(r.lid) + (1u32 << r.lmc.min(7));
        if r.lmc > 7 || end > crate::fabric::model::UNICAST_LID_END {
            return Err((
                r.line,
                format!(
                    "{label}: LID {} LMC {} leaves the unicast LIDs",
                    r.lid, r.lmc
                ),
            ));
        }
        if !lid_aligned(r.lid, r.lmc) {
            let problem = crate::fabric::Problem::UnalignedLid {
                lid: r.lid,
                lmc: r.lmc,
                port: label,
            };
            return Err((r.line, problem.to_string()));
        }
    }
    Ok(())
}

/// The PortInfo values of a port record of `f`, as [`limits::check_port_info`] takes them.
fn held(f: &Fabric, r: &PortRec) -> HeldPortInfo {
    HeldPortInfo {
        m_key_protect: r.protect,
        sm_lid: r.sm_lid,
        lmc: r.lmc,
        lmc_capable: f.lmc_capable(r.port),
        sm_sl: r.sm_sl,
        neighbor_mtu: r.nmtu,
        op_vls: r.op_vls,
        hoq_life: r.hoq,
        enabled: r.enabled,
        speed_ext_supported: f.port(r.port).speed_ext_supported(),
        speed_ext2_supported: f.port(r.port).speed_ext2_supported(),
    }
}

/// The record key and value of a PortInfo field of `r` or `x`.
fn port_field(f: PortInfoField, r: &HeldPortInfo, x: Option<&PortExtra>) -> String {
    use PortInfoField as F;
    let e = r.enabled;
    let extra = |v: fn(&PortExtra) -> u8| x.map_or(0, v);
    match f {
        F::MKeyProtect => format!("protect={}", r.m_key_protect),
        F::MasterSmLid => format!("smlid={}", r.sm_lid),
        F::Lmc => format!("lmc={}", r.lmc),
        F::MasterSmSl => format!("smsl={}", r.sm_sl),
        F::NeighborMtu => format!("nmtu={}", r.neighbor_mtu),
        F::OperationalVls => format!("opvls={}", r.op_vls),
        F::HoqLife => format!("hoq={}", r.hoq_life),
        F::LinkWidthEnabled
        | F::LinkSpeedEnabled
        | F::LinkSpeedExtEnabled
        | F::LinkSpeedExtEnabled2 => format!(
            "en={}",
            rates(e.width, e.speed, e.speed_ext, e.fdr10, e.speed_ext2)
        ),
        F::LinkDownDefault => format!("ldd={}", extra(|x| x.link_down_default)),
        F::VlStallCount => format!("vsc={}", extra(|x| x.vl_stall_count)),
        F::SubnetTimeout => format!("sto={}", extra(|x| x.subnet_timeout)),
        F::LocalPhyErrors => format!("lpe={}", extra(|x| x.local_phy_errors)),
        F::OverrunErrors => format!("ove={}", extra(|x| x.overrun_errors)),
    }
}

/// Every `port` and `extra` record holds values a PortInfo Set could have written and its
/// fields can carry (`limits::check_port_info`): a field writer keeps only a field's bits,
/// so a value beyond them would be reported as another than the one enforced.
fn check_ports(f: &Fabric, parsed: &Parsed) -> Result<(), Problem> {
    let refused = |line: usize, port: PortId, what: String, field: PortInfoField| {
        (
            line,
            format!(
                "{what}: {} cannot hold this PortInfo {field:?} (a PortInfo Set refuses it \
                 or the field is too narrow)",
                f.port_label(port)
            ),
        )
    };
    for r in &parsed.ports {
        let d = port_kind(f, r.port).defaults();
        let h = held(f, r);
        limits::check_port_info(d, &h, None)
            .map_err(|e| refused(r.line, r.port, port_field(e, &h, None), e))?;
    }
    for (line, port, x) in &parsed.extra {
        let d = port_kind(f, *port).defaults();
        // The port's own values as they will be: its record's, or the fabric's now.
        let h = if let Some(r) = parsed.ports.iter().rev().find(|r| r.port == *port) {
            held(f, r)
        } else {
            let p = f.port(*port);
            HeldPortInfo {
                m_key_protect: p.state.m_key_protect,
                sm_lid: p.state.sm_lid,
                lmc: p.lmc(),
                lmc_capable: f.lmc_capable(*port),
                sm_sl: p.state.sm_sl,
                neighbor_mtu: p.state.neighbor_mtu,
                op_vls: p.state.op_vls,
                hoq_life: p.state.hoq_life,
                enabled: p.enabled,
                speed_ext_supported: p.speed_ext_supported(),
                speed_ext2_supported: p.speed_ext2_supported(),
            }
        };
        limits::check_port_info(d, &h, Some(x))
            .map_err(|e| refused(*line, *port, port_field(e, &h, Some(x)), e))?;
    }
    Ok(())
}

/// Both ends of every link agree on whether it is up (PortState other than Down), and a port
/// whose link is up is physically LinkUp: a one-sided link would let packets cross into a
/// port that is down. A port without a record keeps its state now.
fn check_links(f: &Fabric, parsed: &Parsed) -> Result<(), Problem> {
    let state = |p: PortId| {
        parsed
            .ports
            .iter()
            .rev()
            .find(|r| r.port == p)
            .map_or(f.port(p).state.link_state, |r| r.link_state)
    };
    for r in &parsed.ports {
        let Some(peer) = f.peer(r.port) else {
            continue;
        };
        let up = r.link_state != LinkState::Down;
        if up && r.phys_state != PhysState::LinkUp {
            return Err((
                r.line,
                format!(
                    "{}: ls={} with ps={}: a port whose link is up is physically LinkUp (5)",
                    f.port_label(r.port),
                    r.link_state as u8,
                    r.phys_state as u8
                ),
            ));
        }
        if up && state(peer) == LinkState::Down {
            return Err((
                r.line,
                format!(
                    "{} is up (ls={}) but its peer {} is Down: both ends of a link are up or \
                     neither",
                    f.port_label(r.port),
                    r.link_state as u8,
                    f.port_label(peer)
                ),
            ));
        }
    }
    Ok(())
}

/// Every `switch` record holds a SwitchInfo a SwitchInfo Set could have written
/// (`limits::check_switch_info`).
fn check_switches(f: &Fabric, parsed: &Parsed) -> Result<(), Problem> {
    use SwitchInfoField as F;
    for s in &parsed.switches {
        let Some(sw) = f.switch(s.node) else {
            continue;
        };
        let mut i = sw.info;
        i.linear_fdb_top = s.top;
        i.default_port = s.dport;
        i.default_mcast_primary_port = s.dmpp;
        i.default_mcast_not_primary_port = s.dmnpp;
        i.life_time_value = s.life;
        i.multicast_fdb_top = s.mtop;
        limits::check_switch_info(f.node(s.node).num_ports(), &i).map_err(|e| {
            let what = match e {
                F::LinearFdbTop => format!("top={}", s.top),
                F::DefaultPort => format!("dport={}", s.dport),
                F::DefaultMcastPrimaryPort => format!("dmpp={}", s.dmpp),
                F::DefaultMcastNotPrimaryPort => format!("dmnpp={}", s.dmnpp),
                F::LifeTimeValue => format!("life={}", s.life),
                F::MulticastFdbTop => format!("mtop={}", s.mtop),
            };
            (
                s.line,
                format!(
                    "{what}: switch {} cannot hold this SwitchInfo {e:?} (a SwitchInfo Set \
                     refuses it or the field is too narrow)",
                    f.name(s.node)
                ),
            )
        })?;
    }
    Ok(())
}

fn apply(st: &mut NetState, p: Parsed) -> Result<(), String> {
    let f = &mut st.fabric;
    // Saved ranges were checked (`check_lids`). LIDs move as a whole: clear first, so that
    // a LID two ports hold in the file ends with the holder of the later record last.
    for r in &p.ports {
        if f.port(r.port).lid() != 0 {
            f.assign_lid(r.port, 0, 0).map_err(|e| e.to_string())?;
        }
    }
    for r in &p.ports {
        if r.lid != 0 {
            f.assign_lid(r.port, r.lid, r.lmc)
                .map_err(|e| e.to_string())?;
        }
        let port = f.port_mut(r.port);
        port.enabled = r.enabled;
        let s = &mut port.state;
        s.link_state = r.link_state;
        s.phys_state = r.phys_state;
        s.m_key = r.m_key;
        s.m_key_lease_period = r.lease;
        s.m_key_protect = r.protect;
        s.subnet_prefix = r.prefix;
        s.sm_lid = r.sm_lid;
        s.sm_sl = r.sm_sl;
        s.capability_mask = r.cap;
        s.neighbor_mtu = r.nmtu;
        s.op_vls = r.op_vls;
        s.hoq_life = r.hoq;
        s.active = r.active;
    }
    for (_, port, x) in p.extra {
        *st.agents.extra.get_or_insert_with(port, || x) = x;
    }
    for (port, keys) in p.pkeys {
        let slot = st.agents.pkeys.get_or_insert_with(port, Box::default);
        *slot = keys.into_boxed_slice();
    }
    for s in p.switches {
        if let Some(sw) = st.fabric.switch_mut(s.node) {
            sw.info.linear_fdb_top = s.top;
            sw.info.default_port = s.dport;
            sw.info.default_mcast_primary_port = s.dmpp;
            sw.info.default_mcast_not_primary_port = s.dmnpp;
            sw.info.life_time_value = s.life;
            sw.info.port_state_change = s.psc;
            sw.info.multicast_fdb_top = s.mtop;
            if let Some(lpp) = s.lpp {
                sw.info.lids_per_port = lpp;
            }
        }
    }
    for (node, t) in p.lfts {
        if let Some(sw) = st.fabric.switch_mut(node) {
            sw.lft = t;
        }
    }
    for (node, t) in p.mfts {
        if let Some(sw) = st.fabric.switch_mut(node) {
            sw.mft = t;
        }
    }
    Ok(())
}

//! The fabric's error type: what went wrong while reading, building, writing or generating a
//! topology, with enough detail (file, line, node, port) for the user to fix the input.

use std::path::PathBuf;

/// Everything that can go wrong with a simulated fabric's topology.
#[derive(Debug, thiserror::Error)]
pub enum FabricError {
    /// A line of a topology file is malformed or contradicts another line.
    #[error("{file}:{line}: {problem}")]
    Parse {
        /// The file (or the name given to `parse_str`) holding the bad line.
        file: String,
        /// 1-based line number.
        line: u32,
        /// What is wrong there.
        problem: Problem,
    },
    /// A fabric built through [`FabricBuilder`](super::FabricBuilder) is inconsistent.
    #[error("invalid fabric: {0}")]
    Invalid(Problem),
    /// A topology file could not be read, or was refused unread (not a regular file, too
    /// large, not UTF-8).
    #[error("cannot read topology file `{}`: {source}", path.display())]
    Io {
        /// The file that failed.
        path: PathBuf,
        /// Why.
        source: crate::input_file::InputFileError,
    },
    /// Writing a topology failed in the output stream.
    #[error("cannot write the topology: {0}")]
    Write(#[source] std::io::Error),
    /// Something in the fabric has no spelling in the topology format, so writing it would not
    /// read back the same.
    #[error("node `{node}` port {port}: {what} cannot be expressed in the topology format")]
    Unrepresentable {
        /// Name of the node.
        node: String,
        /// Port number (0 for the node itself).
        port: u8,
        /// What cannot be written.
        what: String,
    },
    /// A generator spec (`fat-tree:leaves=...`) is malformed or asks for an impossible fabric.
    #[error("fabric spec `{spec}`: {problem}")]
    Spec {
        /// The spec as given.
        spec: String,
        /// What is wrong with it.
        problem: SpecProblem,
    },
}

/// What is wrong with a topology: the detail of [`FabricError::Parse`] and
/// [`FabricError::Invalid`]. Messages say what was expected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Problem {
    /// The first word of a line is not a record type or directive.
    #[error(
        "unknown record `{word}`: expected a node header (Switch, Hca, Ca, Rt), a directive \
         (vendid=, devid=, sysimgguid=, switchguid=, caguid=, rtguid=, width=, speed=, extspeed=, \
         module=, include), a port line `[n] \"remote\"[m]`, a `#` comment or a blank line"
    )]
    UnknownRecord {
        /// The word found.
        word: String,
    },
    /// A `[n] ...` port line that follows no node header.
    #[error(
        "port line outside a node record: port lines must follow a Switch/Hca/Ca/Rt header without a blank line in between"
    )]
    PortLineOutsideRecord,
    /// A quoted string has no closing quote.
    #[error("missing closing `\"` in {what}")]
    MissingQuote {
        /// Which string (node id, remote node id, description, file name).
        what: &'static str,
    },
    /// Something else than what the grammar allows at this point.
    #[error("expected {expected}, found `{found}`")]
    Expected {
        /// What the grammar wants here.
        expected: &'static str,
        /// What the line has instead (possibly empty).
        found: String,
    },
    /// A number that does not parse or does not fit.
    #[error("bad {what} `{text}`: {why}")]
    BadNumber {
        /// Which number.
        what: &'static str,
        /// Its text.
        text: String,
        /// Why it is rejected (range, syntax).
        why: &'static str,
    },
    /// A node header's port count outside what a node can have.
    #[error("port count {count} out of range: a node has 1 to 254 ports")]
    PortCountOutOfRange {
        /// The count given.
        count: u64,
    },
    /// A fabric with more ports than the simulator holds ([`MAX_FABRIC_PORTS`](super::builder::MAX_FABRIC_PORTS)).
    #[error(
        "the fabric would have {ports} ports (counting each node's port 0), more than the \
         simulator's limit of {limit}: enough for a fabric using every unicast LID several \
         times over (the 648-host fat tree has 3,294, the 2,144-node one 10,336); check the \
         port counts of the node headers, or split the fabric"
    )]
    TooManyPorts {
        /// Port entries the fabric would have with this node.
        ports: u64,
        /// The limit.
        limit: u64,
    },
    /// A node id or description that the format or the SMA cannot carry.
    #[error("bad {what} `{text}`: {why}")]
    BadName {
        /// "node id" or "description".
        what: &'static str,
        /// The text.
        text: String,
        /// Why.
        why: &'static str,
    },
    /// An `x=` option on a port line that is not one of w=, s=, e=, v=.
    #[error(
        "unknown port option `{option}`: port lines accept w=<LinkWidthEnabled 1-31>, s=<LinkSpeedEnabled 0-7>, e=<LinkSpeedExtEnabled 0-15> (and v=, ignored)"
    )]
    UnknownPortOption {
        /// The option name.
        option: String,
    },
    /// An ibnetdiscover link token (`4xQDR`) with an unknown width or speed.
    #[error("unknown link {what} `{text}` (known: {known})")]
    UnknownLinkToken {
        /// "width" or "speed".
        what: &'static str,
        /// The text.
        text: String,
        /// The accepted spellings.
        known: &'static str,
    },
    /// A feature of ibsim's format this parser deliberately does not implement.
    #[error("{what} is not supported: {hint}")]
    Unsupported {
        /// The feature.
        what: &'static str,
        /// What to do instead.
        hint: &'static str,
    },
    /// An `include` that cannot be followed.
    #[error("cannot include `{path}`: {why}")]
    Include {
        /// The file named.
        path: String,
        /// Why not.
        why: String,
    },
    /// Two nodes with the same id.
    #[error("duplicate node `{name}`{}: node ids must be unique", at(.first.as_ref(), "first defined"))]
    DuplicateNode {
        /// The id.
        name: String,
        /// Where it was first defined (`line 3`, `other.net line 3`), when known.
        first: Option<String>,
    },
    /// Two nodes, or two visible ports, with the same GUID.
    #[error("{what} GUID {guid:#x} of `{name}` is already used by `{other}`; GUIDs must be unique")]
    DuplicateGuid {
        /// "node" or "port".
        what: &'static str,
        /// The GUID.
        guid: u64,
        /// The node given the GUID second.
        name: String,
        /// The node that has it already.
        other: String,
    },
    /// A port number beyond the node's port count.
    #[error("port {port} out of range: `{node}` has ports 1 to {num_ports}")]
    PortOutOfRange {
        /// The node.
        node: String,
        /// The port asked for.
        port: u64,
        /// Its port count.
        num_ports: u8,
    },
    /// Port 0 on a port line.
    #[error(
        "port 0 cannot be linked: it is a switch's internal management port (physical ports are numbered from 1)"
    )]
    PortZero,
    /// The same port described twice in one record.
    #[error("port {port} of `{node}` is already described on line {first_line}")]
    DuplicatePortLine {
        /// The node.
        node: String,
        /// The port.
        port: u8,
        /// Where first described.
        first_line: u32,
    },
    /// A port line names a node no record defines.
    #[error("remote node `{name}` is not defined anywhere in the topology")]
    UnknownRemoteNode {
        /// The id named.
        name: String,
    },
    /// The two ends of a link disagree.
    #[error("{local} is linked to {remote}, but {}", match (.remote_says, .remote_at) {
        (Some(s), Some(l)) => format!("{l} links {remote} to {s}"),
        (Some(s), None) => format!("{remote} is linked to {s}"),
        (None, _) => "the remote node's record has no line for that port; describe each link from both ends".to_owned(),
    })]
    InconsistentLink {
        /// This end, as `"A"[1]`.
        local: String,
        /// The other end it names, as `"B"[2]`.
        remote: String,
        /// What the other end names instead, as `"C"[3]`, or `None` if it names nothing.
        remote_says: Option<Box<str>>,
        /// Where the other end is described (`line 12`), when it is.
        remote_at: Option<Box<str>>,
    },
    /// A port GUID given in two places with two values.
    #[error("port GUID of {port} given as {here:#x} here but as {there:#x}{}", at(.other.as_ref(), "on"))]
    InconsistentPortGuid {
        /// The port, as `"A"[1]`.
        port: String,
        /// The GUID on this line.
        here: u64,
        /// The GUID given elsewhere.
        there: u64,
        /// Where (`line 12`), when known.
        other: Option<String>,
    },
    /// A port linked to itself.
    #[error("{port} is linked to itself")]
    SelfLink {
        /// The port, as `"A"[1]`.
        port: String,
    },
    /// A port linked twice (builder API).
    #[error("{port} is already linked")]
    AlreadyLinked {
        /// The port, as `"A"[1]`.
        port: String,
    },
    /// The two ends of a link have no link width or speed in common, so the link cannot train.
    #[error(
        "link {a} <-> {b} cannot come up: the ends enable no common {what} ({a_mask:#x} vs {b_mask:#x})"
    )]
    NoCommonRate {
        /// "width" or "speed".
        what: &'static str,
        /// One end, as `"A"[1]`.
        a: String,
        /// The other end.
        b: String,
        /// One end's enabled mask.
        a_mask: u8,
        /// The other end's enabled mask.
        b_mask: u8,
    },
    /// Two ports with overlapping LID ranges.
    #[error("LID {lid:#x} of {port} is already assigned to {other}")]
    DuplicateLid {
        /// The first LID in conflict.
        lid: u16,
        /// The port, as `"A"[1]`.
        port: String,
        /// The port that has it.
        other: String,
    },
    /// A LID/LMC outside the unicast range.
    #[error(
        "LID {lid:#x} with LMC {lmc} of {port} is outside the unicast LIDs 0x1-0xbfff (LMC 0-7)"
    )]
    LidOutOfRange {
        /// The base LID.
        lid: u64,
        /// The LMC.
        lmc: u64,
        /// The port, as `"A"[1]`.
        port: String,
    },
    /// An LMC other than 0 on a switch's base port 0, which has one LID.
    #[error(
        "LMC {lmc} on {port}: a switch's base port 0 has one LID (LMC 0); give it LMC 0, or \
         make the switch's port 0 enhanced"
    )]
    LmcOnBaseSwitchPort0 {
        /// The LMC.
        lmc: u64,
        /// The port, as `"S"[0]`.
        port: String,
    },
    /// A base LID with LMC whose low LMC bits are not all clear. A port answers to the DLIDs
    /// that match its base LID with those bits masked (IBA 4.1.3), so such a LID names LIDs
    /// the port does not answer to. ibsim takes any (`sim_net.c` `parse_port_lid_and_lmc`
    /// reads both numbers with no check); OpenSM never hands one out (`osm_lid_mgr.c`
    /// `lid_mgr_init_sweep` drops a persistent LID that is "Not aligned").
    #[error(
        "base LID {lid} with LMC {lmc} of {port} is not a multiple of 2^LMC = {}: a port \
         answers to its base LID with the low LMC bits masked, so they must be 0; use a LID \
         that is a multiple of {} (such as {}), or LMC 0",
        1u32 << .lmc, 1u32 << .lmc, aligned_near(*.lid, *.lmc)
    )]
    UnalignedLid {
        /// The base LID.
        lid: u16,
        /// The LMC (0-7).
        lmc: u8,
        /// The port, as `"A"[1]`.
        port: String,
    },
    /// An operation aimed at a port that cannot take it (builder API).
    #[error("{port}: {why}")]
    InvalidPort {
        /// The port, as `"A"[1]`.
        port: String,
        /// Why.
        why: &'static str,
    },
}

/// An aligned base LID for LMC `lmc` next to `lid`: `lid` with its low LMC bits cleared, or
/// the first one above if that is 0.
fn aligned_near(lid: u16, lmc: u8) -> u32 {
    let step = 1u32 << lmc.min(7);
    let down = u32::from(lid) & !(step - 1);
    if down == 0 { step } else { down }
}

fn at(place: Option<&String>, prefix: &str) -> String {
    place.map_or_else(String::new, |l| format!(" ({prefix} {l})"))
}

/// What is wrong with a generator spec: the detail of [`FabricError::Spec`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecProblem {
    /// The shape before `:` is not known.
    #[error("unknown shape `{0}`: expected fat-tree, fat-tree3, switch, line or ring")]
    UnknownShape(String),
    /// A `key=value` pair whose key this shape does not take.
    #[error("unknown parameter `{key}` for {shape}: it takes {known}")]
    UnknownKey {
        /// The shape.
        shape: &'static str,
        /// The key given.
        key: String,
        /// The keys it takes.
        known: &'static str,
    },
    /// A parameter given twice.
    #[error("parameter `{0}` given twice")]
    DuplicateKey(String),
    /// A required parameter is missing.
    #[error("missing parameter `{key}` for {shape}")]
    MissingKey {
        /// The shape.
        shape: &'static str,
        /// The key.
        key: &'static str,
    },
    /// A parameter whose value does not parse or is out of range.
    #[error("bad value `{value}` for `{key}`: {why}")]
    BadValue {
        /// The key.
        key: String,
        /// The value.
        value: String,
        /// Why.
        why: String,
    },
    /// The parameters ask for a switch with more ports than a switch can have.
    #[error("{what} would need {ports} ports; a switch has at most 254 (reduce {hint})")]
    TooManyPorts {
        /// Which switch.
        what: &'static str,
        /// Ports it would need.
        ports: u64,
        /// Which parameters to reduce.
        hint: &'static str,
    },
    /// The parameters ask for more nodes, or more ports, than the generator builds.
    #[error(
        "{} {what} is more than the generator's limit of {limit} (reduce the counts)",
        .count.map_or_else(|| "more than 2^64".to_owned(), |c| c.to_string())
    )]
    TooLarge {
        /// "nodes", or "ports" (counting each node's port 0).
        what: &'static str,
        /// How many the parameters ask for; `None` when the count does not fit 64 bits.
        count: Option<u64>,
        /// The limit.
        limit: u64,
    },
    /// The generated fabric failed the model's checks (for example GUIDs running out).
    #[error("{0}")]
    Model(Problem),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_stay_small() {
        // Results carry these by value; keep them within clippy's `result_large_err` bound.
        assert!(
            std::mem::size_of::<FabricError>() < 128,
            "{}",
            std::mem::size_of::<FabricError>()
        );
    }
}

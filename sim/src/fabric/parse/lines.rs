//! The grammar of single lines: node headers, port lines, directives, and the ibnetdiscover
//! comments that carry descriptions, LIDs and link rates.

use super::scan::{Cursor, c_number};
use crate::fabric::error::Problem;
use crate::fabric::model::NodeType;

/// One classified line.
pub(super) enum Line<'a> {
    /// Empty or whitespace: ends a record.
    Blank,
    /// A `#` comment: does not end a record.
    Comment,
    /// `Switch 36 "id" # ...`.
    Header(Header<'a>),
    /// `[1] "remote"[2] ...`.
    Port(PortLine<'a>),
    /// `name=value`.
    Directive(Directive<'a>),
    /// `include "file"`.
    Include(&'a str),
    /// A line ibnetdiscover's grouping mode adds (`Chassis 1 ...`, `Hostname: ...`,
    /// `Non-Chassis Nodes`), or ibsim's `pdebug`: no meaning for the model.
    Ignored,
}

/// A node header.
pub(super) struct Header<'a> {
    pub(super) kind: NodeType,
    pub(super) num_ports: u64,
    pub(super) id: &'a str,
    pub(super) description: Option<&'a str>,
    pub(super) enhanced_port0: bool,
    pub(super) lid: Option<u64>,
    pub(super) lmc: Option<u64>,
}

/// A port line.
pub(super) struct PortLine<'a> {
    pub(super) port: u64,
    pub(super) own_guid: Option<u64>,
    pub(super) remote: &'a str,
    pub(super) remote_port: u64,
    pub(super) remote_guid: Option<u64>,
    /// Last `w=`, `s=`, `e=` values, in ibsim's precedence (the line's options, then its token).
    pub(super) width: Option<u64>,
    pub(super) speed: Option<u64>,
    pub(super) speed_ext: Option<u64>,
    /// `lid N lmc M` leading the comment of a CA/router line: this port's LID and LMC.
    pub(super) local_lid: Option<u64>,
    pub(super) local_lmc: Option<u64>,
    /// The `4xQDR` token after the comment's last `lid N`, split at the `x`.
    pub(super) token: Option<(&'a str, &'a str)>,
}

/// A global directive.
#[derive(Clone, Copy)]
pub(super) enum Directive<'a> {
    /// `switchguid=`, `caguid=`/`hcaguids=`, `rtguid=`: `=X` sets the base, `+N` offsets it;
    /// ibnetdiscover's `switchguid=X(P)` adds the switch's port GUID.
    GuidBase {
        kind: NodeType,
        value: u64,
        relative: bool,
        port_guid: Option<u64>,
    },
    VendId(u64),
    DevId(u64),
    SysImgGuid(u64),
    Width(u64),
    Speed(u64),
    ExtSpeed(u64),
    Module(&'a str),
}

/// Classifies and parses one line.
pub(super) fn parse_line(line: &str) -> Result<Line<'_>, Problem> {
    let t = line.trim_start();
    if t.trim_end().is_empty() {
        return Ok(Line::Blank);
    }
    if t.starts_with('#') {
        return Ok(Line::Comment);
    }
    if t.starts_with('[') {
        return port_line(t).map(Line::Port);
    }
    if t.starts_with('@') {
        return Err(Problem::Unsupported {
            what: "an ibsim alias port line (`@[n] \"alias\"`)",
            hint: "name the remote node and port directly",
        });
    }
    let word_end = t.find(|c: char| c.is_whitespace() || c == '=' || c == '+' || c == '"');
    let word = &t[..word_end.unwrap_or(t.len())];
    let rest = &t[word.len()..];
    let guid_base = |kind| {
        directive_value(word, rest, true).map(|(value, relative, port_guid)| {
            Line::Directive(Directive::GuidBase {
                kind,
                value,
                relative,
                port_guid,
            })
        })
    };
    let plain = |f: fn(u64) -> Directive<'static>| {
        directive_value(word, rest, false).map(|(v, _, _)| Line::Directive(f(v)))
    };
    match word {
        "Switch" => header(NodeType::Switch, rest).map(Line::Header),
        "Hca" | "Ca" => header(NodeType::Ca, rest).map(Line::Header),
        "Rt" => header(NodeType::Router, rest).map(Line::Header),
        "switchguid" => guid_base(NodeType::Switch),
        "caguid" | "hcaguids" => guid_base(NodeType::Ca),
        "rtguid" => guid_base(NodeType::Router),
        "vendid" => plain(Directive::VendId),
        "devid" => plain(Directive::DevId),
        "sysimgguid" => plain(Directive::SysImgGuid),
        "width" => plain(Directive::Width),
        "speed" => plain(Directive::Speed),
        "extspeed" => plain(Directive::ExtSpeed),
        "module" => module(rest).map(|m| Line::Directive(Directive::Module(m))),
        "include" => {
            let mut c = Cursor::new(rest);
            c.skip_ws();
            let name = c.quoted("file name")?;
            end_of_line(&mut c)?;
            Ok(Line::Include(name))
        }
        "do" => Err(Problem::Unsupported {
            what: "ibsim's `do <console command>`",
            hint: "remove the line; change the simulated fabric through the simulator's API instead",
        }),
        "pdebug" | "Chassis" | "Hostname:" | "Non-Chassis" => Ok(Line::Ignored),
        _ => Err(Problem::UnknownRecord {
            word: word.to_owned(),
        }),
    }
}

/// Accepts only whitespace or a `#` comment from here on.
fn end_of_line(c: &mut Cursor<'_>) -> Result<(), Problem> {
    c.skip_ws();
    if c.at_end() || c.peek() == Some('#') {
        return Ok(());
    }
    Err(Problem::Expected {
        expected: "the end of the line or a `#` comment",
        found: c.rest().trim_end().to_owned(),
    })
}

/// `=value[(portguid)]` or, for GUID bases, `+offset`.
fn directive_value(
    name: &str,
    rest: &str,
    guid_base: bool,
) -> Result<(u64, bool, Option<u64>), Problem> {
    let mut c = Cursor::new(rest);
    c.skip_ws();
    let relative = guid_base && c.eat('+');
    if !relative && !c.eat('=') {
        return Err(Problem::Expected {
            expected: if guid_base {
                "`=` or `+` and a value"
            } else {
                "`=` and a value"
            },
            found: format!("{name}{}", rest.trim_end()),
        });
    }
    c.skip_ws();
    let text = c.take_while(|ch| !ch.is_whitespace() && ch != '(' && ch != '#');
    let what = match name {
        "vendid" => "vendor id",
        "devid" => "device id",
        "width" => "link width",
        "speed" => "link speed",
        "extspeed" => "extended link speed",
        _ => "GUID",
    };
    let value = c_number(text, what)?;
    let port_guid = if c.peek() == Some('(') {
        if name != "switchguid" {
            return Err(Problem::Expected {
                expected: "the end of the line or a `#` comment",
                found: c.rest().trim_end().to_owned(),
            });
        }
        Some(c.paren_guid("port GUID")?)
    } else {
        None
    };
    end_of_line(&mut c)?;
    Ok((value, relative, port_guid))
}

fn module(rest: &str) -> Result<&str, Problem> {
    let mut c = Cursor::new(rest);
    c.skip_ws();
    if !c.eat('=') {
        return Err(Problem::Expected {
            expected: "`=\"prefix\"`",
            found: rest.trim().to_owned(),
        });
    }
    c.skip_ws();
    let m = c.quoted("module prefix")?;
    end_of_line(&mut c)?;
    if m.len() > 20 || m.contains(['#', '@']) || m.chars().any(char::is_control) {
        return Err(Problem::BadName {
            what: "module prefix",
            text: m.to_owned(),
            why: "at most 20 bytes, without `#`, `@` or control characters",
        });
    }
    Ok(m)
}

/// `<ports> "id" [# comment]` after the record keyword.
fn header(kind: NodeType, rest: &str) -> Result<Header<'_>, Problem> {
    let mut c = Cursor::new(rest);
    c.skip_ws();
    let count = c.take_while(|ch| !ch.is_whitespace() && ch != '"');
    if count.is_empty() {
        return Err(Problem::Expected {
            expected: "a port count after the record type (e.g. `Switch 36 \"name\"`)",
            found: rest.trim().to_owned(),
        });
    }
    let num_ports = c_number(count, "port count")?;
    c.skip_ws();
    let id = c.quoted("node id")?;
    c.skip_ws();
    let mut h = Header {
        kind,
        num_ports,
        id,
        description: None,
        enhanced_port0: false,
        lid: None,
        lmc: None,
    };
    if c.at_end() {
        return Ok(h);
    }
    if !c.eat('#') {
        return Err(Problem::Expected {
            expected: "a `#` comment or the end of the line after the node id",
            found: c.rest().trim_end().to_owned(),
        });
    }
    c.skip_ws();
    // The description: quoted as ibnetdiscover writes it, or (ibsim) bare up to a keyword.
    if c.peek() == Some('"') {
        h.description = Some(c.quoted("description")?);
    } else {
        let r = c.rest();
        let end = [" enhanced port ", " base port ", " lid ", " lmc "]
            .iter()
            .filter_map(|k| r.find(k))
            .min()
            .unwrap_or(r.len());
        let d = r[..end].trim();
        if !d.is_empty() {
            h.description = Some(d);
        }
        c = Cursor::new(&r[end..]);
    }
    if kind != NodeType::Switch {
        // ibsim reads no port-0 data from CA and router headers; ibnetdiscover writes none.
        return Ok(h);
    }
    let words: Vec<&str> = c.rest().split_whitespace().collect();
    for (i, w) in words.iter().enumerate() {
        let next = words.get(i + 1).copied();
        match (*w, next) {
            ("enhanced", Some("port")) => h.enhanced_port0 = true,
            ("base", Some("port")) => h.enhanced_port0 = false,
            ("lid", n) => h.lid = Some(c_number(n.unwrap_or(""), "LID")?),
            ("lmc", n) => h.lmc = Some(c_number(n.unwrap_or(""), "LMC")?),
            _ => {}
        }
    }
    Ok(h)
}

/// `[p][(guid)] "remote"[rp][(rguid)] [w=.. s=.. e=..] [# comment]`.
fn port_line(text: &str) -> Result<PortLine<'_>, Problem> {
    let mut c = Cursor::new(text);
    let port = c.bracketed("port number")?;
    c.skip_ext();
    c.skip_ws();
    let own_guid = if c.peek() == Some('(') {
        Some(c.paren_guid("port GUID")?)
    } else {
        None
    };
    c.skip_ws();
    let remote = c.quoted("remote node id")?;
    // ibsim requires `[rp]` right after the quote and takes port 1 without it; the examples'
    // comment writes `"remoteid" [remoteport]`, so a blank before the bracket is allowed.
    let save = c.rest();
    c.skip_ws();
    let remote_port = if c.peek() == Some('[') && !c.rest().starts_with("[ext") {
        c.bracketed("remote port number")?
    } else {
        c = Cursor::new(save);
        1
    };
    c.skip_ext();
    let save = c.rest();
    c.skip_ws();
    let remote_guid = if c.peek() == Some('(') {
        Some(c.paren_guid("remote port GUID")?)
    } else {
        c = Cursor::new(save);
        None
    };
    let mut pl = PortLine {
        port,
        own_guid,
        remote,
        remote_port,
        remote_guid,
        width: None,
        speed: None,
        speed_ext: None,
        local_lid: None,
        local_lmc: None,
        token: None,
    };
    // Options before the comment: only ibsim's.
    loop {
        c.skip_ws();
        if c.at_end() || c.peek() == Some('#') {
            break;
        }
        let word = c.word();
        let Some((key, value)) = word.split_once('=') else {
            return Err(Problem::Expected {
                expected: "port options (w=, s=, e=) or a `#` comment after the remote port",
                found: word.to_owned(),
            });
        };
        if !set_option(&mut pl, key, value)? {
            return Err(Problem::UnknownPortOption {
                option: key.to_owned(),
            });
        }
    }
    if c.eat('#') {
        comment(&mut pl, c.rest())?;
    }
    Ok(pl)
}

/// Applies a `k=v` option; `false` if `k` is not one. Values are checked as ibsim checks them.
fn set_option(pl: &mut PortLine<'_>, k: &str, v: &str) -> Result<bool, Problem> {
    let (slot, what, max, min) = match k {
        "w" => (&mut pl.width, "w= (LinkWidthEnabled)", 31, 1),
        "s" => (&mut pl.speed, "s= (LinkSpeedEnabled)", 7, 0),
        "e" => (&mut pl.speed_ext, "e= (LinkSpeedExtEnabled)", 15, 0),
        "v" => {
            // ibnetdiscover --full's VLCap: informational.
            c_number(v, "v= (VLCap)")?;
            return Ok(true);
        }
        _ => return Ok(false),
    };
    let n = c_number(v, what).map_err(|_| Problem::BadNumber {
        what,
        text: v.to_owned(),
        why: match k {
            "w" => "w= takes a LinkWidthEnabled mask, not a width: 1 = 1x, 2 = 4x, 4 = 8x, 8 = 12x, 16 = 2x, or a sum (a 4x link is w=2, or w=3 for 1x and 4x)",
            "s" => "s= takes a LinkSpeedEnabled mask: 1 = SDR, 2 = DDR, 4 = QDR, or a sum (QDR and below is s=7)",
            _ => "e= takes a LinkSpeedExtEnabled mask: 1 = FDR, 2 = EDR, 4 = HDR, 8 = NDR, or a sum",
        },
    })?;
    if n < min || n > max {
        return Err(Problem::BadNumber {
            what,
            text: v.to_owned(),
            why: match k {
                "w" => "must be a LinkWidthEnabled mask 1-31",
                "s" => "must be a LinkSpeedEnabled mask 0-7 (0 means QDR)",
                _ => "must be a LinkSpeedExtEnabled mask 0-15",
            },
        });
    }
    *slot = Some(n);
    Ok(true)
}

/// The comment of a port line, as ibnetdiscover writes it:
/// switch lines `"remote desc" lid L 4xQDR [s= w= v=]`, CA lines
/// `lid L lmc M "remote desc" lid RL 4xQDR [...]`. ibnetdiscover prints the description raw,
/// so it may hold any number of `"`: as ibsim does (`parse_port_connection_data`, regex
/// `lid[^"]*$`), everything from the first to the last `"` is the description and is skipped.
/// Before it, a leading `lid N lmc M` is a CA line's own; after it, the token following the
/// last `lid N` sets the rates; `k=v` words outside it are options (unknown ones ignored: this
/// is a comment).
fn comment<'a>(pl: &mut PortLine<'a>, text: &'a str) -> Result<(), Problem> {
    let quoted = text.find('"').zip(text.rfind('"'));
    // With no description the same words lead and trail.
    let (head, tail) = quoted.map_or((text, text), |(first, last)| {
        (&text[..first], &text[last + 1..])
    });
    // Every port line has a comment: no allocation here (the words are walked in place).
    let mut words = head.split_whitespace();
    if words.next() == Some("lid") {
        if let Some(l) = words.next() {
            pl.local_lid = Some(c_number(l, "LID")?);
            if words.next() == Some("lmc") {
                if let Some(m) = words.next() {
                    pl.local_lmc = Some(c_number(m, "LMC")?);
                }
            }
        }
    }
    let outside = if quoted.is_some() { tail } else { "" };
    for w in head.split_whitespace().chain(outside.split_whitespace()) {
        if let Some((k, v)) = w.split_once('=') {
            set_option(pl, k, v)?;
        }
    }
    // The token after the tail's last `lid N` (N a number).
    let mut token = None;
    let mut tail_words = tail.split_whitespace();
    while let Some(w) = tail_words.next() {
        if w != "lid" {
            continue;
        }
        let mut after = tail_words.clone();
        if after.next().is_some_and(|n| c_number(n, "LID").is_ok()) {
            token = Some(after.next());
        }
    }
    if let Some(Some(tok)) = token {
        if let Some((w, s)) = tok.split_once('x') {
            if !w.is_empty() && w.bytes().all(|b| b.is_ascii_digit()) && !s.is_empty() {
                pl.token = Some((w, s));
            }
        }
    }
    Ok(())
}

/// The port number of a port line as a node's port, checked against the node's port count.
pub(super) fn check_port(port: u64, node: &str, num_ports: u8) -> Result<u8, Problem> {
    if port == 0 {
        return Err(Problem::PortZero);
    }
    if port > u64::from(num_ports) {
        return Err(Problem::PortOutOfRange {
            node: node.to_owned(),
            port,
            num_ports,
        });
    }
    Ok(port as u8)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn port(t: &str) -> PortLine<'_> {
        match parse_line(t).unwrap() {
            Line::Port(p) => p,
            _ => panic!("not a port line: {t}"),
        }
    }

    #[test]
    fn ibsim_port_lines() {
        let p = port("[1]\t\"Hca1\"[1]");
        assert_eq!((p.port, p.remote, p.remote_port), (1, "Hca1", 1));
        let p = port("[3]  \"Switch2\"[4]  w=12 s=0x4 e=2");
        assert_eq!((p.port, p.remote, p.remote_port), (3, "Switch2", 4));
        assert_eq!(
            (p.width, p.speed, p.speed_ext),
            (Some(12), Some(4), Some(2))
        );
        let p = port("[2] \"Hca2\"");
        assert_eq!(p.remote_port, 1);
        let p = port("[2] \"Hca2\" [2]");
        assert_eq!(p.remote_port, 2);
    }

    #[test]
    fn ibnetdiscover_port_lines() {
        let p = port(
            "[10]\t\"H-0c42a10300a3e3e0\"[1](c42a10300a3e3e1) \t\t# \"node03 mlx5_0\" lid 10 4xEDR",
        );
        assert_eq!((p.port, p.remote_port), (10, 1));
        assert_eq!(p.remote_guid, Some(0xc42a10300a3e3e1));
        assert_eq!(p.token, Some(("4", "EDR")));
        assert_eq!(p.local_lid, None);
        let p = port(
            "[1](c42a10300a3e3e1) \t\"S-248a070300f81b00\"[10]\t\t# lid 10 lmc 0 \"MF0;spine01:MQM8700/U1\" lid 8 4xEDR s=4 w=2 v=4",
        );
        assert_eq!(p.own_guid, Some(0xc42a10300a3e3e1));
        assert_eq!((p.local_lid, p.local_lmc), (Some(10), Some(0)));
        assert_eq!(p.token, Some(("4", "EDR")));
        assert_eq!((p.width, p.speed), (Some(2), Some(4)));
        let p = port("[1][ext 1]\t\"S-1\"[5][ext 5]\t\t# \"x\" lid 1 4xQDR");
        assert_eq!((p.port, p.remote_port), (1, 5));
        // No token after a CA line's own lid/lmc.
        let p = port("[1](10) \"S\"[1] # lid 2 lmc 0");
        assert_eq!(p.token, None);
        // A description with lid-like words inside quotes is skipped.
        let p = port("[1] \"S\"[1] # \"solid lid 9 1xSDR\" lid 3 12xQDR");
        assert_eq!(p.token, Some(("12", "QDR")));
    }

    #[test]
    fn descriptions_with_quotes_in_them_are_read_as_ibsim_reads_them() {
        // ibnetdiscover prints a NodeDescription raw: here `a"b`, so the line has an odd
        // number of quotes. What follows the last quote is the remote LID and the rate.
        let p = port("[1] \"A\"[1](11) # \"a\"b\" lid 2 4xQDR");
        assert_eq!(
            (p.remote, p.remote_port, p.remote_guid),
            ("A", 1, Some(0x11))
        );
        assert_eq!(p.token, Some(("4", "QDR")));
        let p = port("[1](10) \"S\"[3] # lid 7 lmc 1 \"x\"\"y lid 9 1xSDR\" lid 4 12xEDR w=2");
        assert_eq!((p.local_lid, p.local_lmc), (Some(7), Some(1)));
        assert_eq!(p.token, Some(("12", "EDR")));
        assert_eq!(p.width, Some(2));
        // Options inside the description are not the line's.
        let p = port("[1] \"S\"[1] # \"w=1 \"odd\" lid 3 4xHDR");
        assert_eq!(p.width, None);
        assert_eq!(p.token, Some(("4", "HDR")));
    }

    #[test]
    fn headers() {
        let Line::Header(h) = parse_line(
            "Switch\t36 \"S-1\"\t\t# \"MF0;leaf01:MQM8700/U1\" enhanced port 0 lid 7 lmc 1",
        )
        .unwrap() else {
            panic!()
        };
        assert_eq!(
            (h.num_ports, h.id, h.description),
            (36, "S-1", Some("MF0;leaf01:MQM8700/U1"))
        );
        assert!(h.enhanced_port0);
        assert_eq!((h.lid, h.lmc), (Some(7), Some(1)));
        let Line::Header(h) = parse_line("Hca 	2 \"Hca4\"").unwrap() else {
            panic!()
        };
        assert_eq!(
            (h.kind, h.num_ports, h.id, h.description),
            (NodeType::Ca, 2, "Hca4", None)
        );
        let Line::Header(h) = parse_line("Switch 8 \"s\" # bare desc base port 0 lid 3").unwrap()
        else {
            panic!()
        };
        assert_eq!(
            (h.description, h.enhanced_port0, h.lid),
            (Some("bare desc"), false, Some(3))
        );
    }

    #[test]
    fn directives() {
        let Line::Directive(Directive::GuidBase {
            kind,
            value,
            relative,
            port_guid,
        }) = parse_line("switchguid=0x248a070300f81a00(248a070300f81a00)\t# ").unwrap()
        else {
            panic!()
        };
        assert_eq!(
            (kind, value, relative, port_guid),
            (
                NodeType::Switch,
                0x248a070300f81a00,
                false,
                Some(0x248a070300f81a00)
            )
        );
        let Line::Directive(Directive::GuidBase {
            relative, value, ..
        }) = parse_line("caguid+16").unwrap()
        else {
            panic!()
        };
        assert_eq!((relative, value), (true, 16));
        assert!(matches!(
            parse_line("vendid = 0x2c9").unwrap(),
            Line::Directive(Directive::VendId(0x2c9))
        ));
        assert!(matches!(
            parse_line("sysimgguid=0x1\t\t# Chassis 1").unwrap(),
            Line::Directive(Directive::SysImgGuid(1))
        ));
        assert!(matches!(
            parse_line("module=\"m1\"").unwrap(),
            Line::Directive(Directive::Module("m1"))
        ));
        assert!(matches!(
            parse_line("include \"a b\"").unwrap(),
            Line::Include("a b")
        ));
        assert!(matches!(
            parse_line("vendid"),
            Err(Problem::Expected { .. })
        ));
        assert!(matches!(
            parse_line("devid=12x"),
            Err(Problem::BadNumber { .. })
        ));
        assert!(matches!(
            parse_line("do link 1"),
            Err(Problem::Unsupported { .. })
        ));
        assert!(matches!(
            parse_line("Cables 2 \"x\""),
            Err(Problem::UnknownRecord { .. })
        ));
        assert!(matches!(
            parse_line("Chassis 1 (guid 0x1)").unwrap(),
            Line::Ignored
        ));
    }
}

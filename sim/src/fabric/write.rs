//! Writing a [`Fabric`] back as a topology file, in ibnetdiscover's layout, such that reading
//! it back gives the same fabric.
//!
//! Every node gets explicit `vendid=`, `devid=`, `sysimgguid=` and `switchguid=`/`caguid=`/
//! `rtguid=` lines, so GUIDs do not depend on ibsim's counters; CA ports carry their GUID in
//! parentheses. Rates: the rates of a node's unlinked ports (and port 0) become
//! `width=`/`speed=`/`extspeed=` directives when they change from node to node (the only way the
//! format sets them); a linked port that differs from them gets an ibnetdiscover token (`4xQDR`)
//! when one gives exactly its enabled masks, else `w=`/`s=`/`e=` options. The result reads the
//! same under ibsim, except that ibsim ignores parenthesised port GUIDs (it uses CA GUID + port
//! number) and reads an `XDR` token as no speed (it has no XDR: `sim_net.c`
//! `parse_port_link_width_and_speed` warns and keeps the port's speeds).
//!
//! Not written (the format has no place for them): the LID of an unlinked CA port, and all
//! SMA state other than LIDs (the link and physical states and active rates follow from the
//! topology when read back). Refused with [`FabricError::Unrepresentable`]: an unlinked CA
//! port whose GUID is not node GUID + port number; unlinked ports of one node with different
//! rates, or with FDR10 or XDR enabled; rates no spelling reproduces; and references to a
//! node outside a module from inside one.

use std::collections::HashMap;
use std::io::{BufWriter, Write};

use super::error::FabricError;
use super::model::{Fabric, NodeId, NodeType, PortId};
use super::rate::LinkRates;

/// How a port's enabled rates are spelled: options, then an optional token.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Spelling {
    width: Option<u8>,
    speed: Option<u8>,
    speed_ext: Option<u8>,
    token: Option<String>,
}

/// The shortest spelling that [`parse`](super::parse) turns back into `r` on a node whose
/// ports start with `base`: nothing, a token, options, or an `e=` option then a token.
fn spell(r: LinkRates, base: LinkRates) -> Option<Spelling> {
    let none = Spelling {
        width: None,
        speed: None,
        speed_ext: None,
        token: None,
    };
    if r == base {
        return Some(none);
    }
    if let Some(t) = r.token_from(base) {
        return Some(Spelling {
            token: Some(t),
            ..none
        });
    }
    let w = (r.width != base.width && (1..=31).contains(&r.width)).then_some(r.width);
    let s = (r.speed != base.speed && (1..=7).contains(&r.speed)).then_some(r.speed);
    let e = (r.speed_ext != base.speed_ext && r.speed_ext <= 15).then_some(r.speed_ext);
    // XDR has no option (ibsim has none): only a token (`4xXDR`) enables it.
    let with_opts = LinkRates {
        width: w.unwrap_or(base.width),
        speed: s.unwrap_or(base.speed),
        speed_ext: e.unwrap_or(base.speed_ext),
        speed_ext2: base.speed_ext2,
        fdr10: base.fdr10,
    };
    let opts = Spelling {
        width: w,
        speed: s,
        speed_ext: e,
        token: None,
    };
    if with_opts == r {
        return Some(opts);
    }
    // A token overrides width and speed, so only the extended speed option can survive it.
    let base = LinkRates {
        speed_ext: r.speed_ext,
        ..base
    };
    r.token_from(base).map(|t| Spelling {
        speed_ext: e,
        token: Some(t),
        ..none
    })
}

struct Writer<'f, W: Write> {
    f: &'f Fabric,
    out: W,
    module: String,
    /// The `width=`/`speed=`/`extspeed=` defaults written so far (ibsim's to start with).
    defaults: LinkRates,
    spellings: HashMap<(LinkRates, LinkRates), Option<Spelling>>,
}

fn io(e: std::io::Error) -> FabricError {
    FabricError::Write(e)
}

impl Fabric {
    /// Writes the topology (see the module documentation for what is and is not written).
    pub fn write_topology(&self, out: impl Write) -> Result<(), FabricError> {
        let mut w = Writer {
            f: self,
            out: BufWriter::with_capacity(1 << 16, out),
            module: String::new(),
            defaults: LinkRates::DEFAULT,
            spellings: HashMap::new(),
        };
        writeln!(
            w.out,
            "#\n# Topology file: {} nodes, {} links\n#",
            self.node_count(),
            self.link_count()
        )
        .map_err(io)?;
        for n in self.node_ids() {
            w.node(n)?;
        }
        w.out.flush().map_err(io)
    }

    /// The topology as a string.
    pub fn to_topology_string(&self) -> Result<String, FabricError> {
        let mut buf = Vec::new();
        self.write_topology(&mut buf)?;
        Ok(String::from_utf8(buf).expect("names and descriptions are UTF-8"))
    }
}

impl<W: Write> Writer<'_, W> {
    fn unrepresentable(&self, n: NodeId, port: u8, what: impl Into<String>) -> FabricError {
        FabricError::Unrepresentable {
            node: self.f.name(n).to_owned(),
            port,
            what: what.into(),
        }
    }

    /// How a node is referred to under the current module: its name, or `None` if it cannot be.
    fn reference<'n>(&self, name: &'n str) -> Option<&'n str> {
        (self.module.is_empty() || name.contains('#')).then_some(name)
    }

    fn node(&mut self, n: NodeId) -> Result<(), FabricError> {
        let f = self.f;
        let node = f.node(n);
        let name = f.name(n);
        let (module, bare) = name.split_once('#').unwrap_or(("", name));
        writeln!(self.out).map_err(io)?;
        let base = self.baseline(n)?;
        if module != self.module {
            writeln!(self.out, "module=\"{module}\"").map_err(io)?;
            module.clone_into(&mut self.module);
        }
        writeln!(
            self.out,
            "vendid={:#x}\ndevid={:#x}\nsysimgguid={:#x}",
            node.vendor_id(),
            node.device_id(),
            node.sys_image_guid()
        )
        .map_err(io)?;
        let desc = f.description(n);
        match node.kind() {
            NodeType::Switch => {
                let p0 = f.port(f.port_id(n, 0).expect("switches have port 0"));
                let enhanced = f.switch(n).is_some_and(|s| s.info.enhanced_port0);
                writeln!(
                    self.out,
                    "switchguid={:#x}({:x})\nSwitch\t{} \"{bare}\"\t\t# \"{desc}\" {} port 0 lid {} lmc {}",
                    node.guid(),
                    p0.guid(),
                    node.num_ports(),
                    if enhanced { "enhanced" } else { "base" },
                    p0.lid(),
                    p0.lmc()
                )
                .map_err(io)?;
            }
            kind => {
                let key = if kind == NodeType::Ca {
                    "caguid"
                } else {
                    "rtguid"
                };
                writeln!(
                    self.out,
                    "{key}={:#x}\n{}\t{} \"{bare}\"\t\t# \"{desc}\"",
                    node.guid(),
                    kind.keyword(),
                    node.num_ports()
                )
                .map_err(io)?;
            }
        }
        for pid in f.ports_of(n) {
            self.port(n, pid, base)?;
        }
        Ok(())
    }

    /// The rates a node's ports start from: what its unlinked ports (and port 0) have, which
    /// only `width=`/`speed=`/`extspeed=` directives can set. Writes the directives needed.
    fn baseline(&mut self, n: NodeId) -> Result<LinkRates, FabricError> {
        let f = self.f;
        let node = f.node(n);
        let base = f.ports[node.port_base as usize].enabled;
        if let Some(p) = f
            .ports_of(n)
            .find(|&p| f.peer(p).is_none() && f.port(p).enabled != base)
        {
            return Err(self.unrepresentable(
                n,
                f.port(p).num(),
                "enabled rates of an unlinked port that differ from the node's port 0",
            ));
        }
        if base.fdr10 {
            return Err(self.unrepresentable(n, 0, "FDR10 enabled on ports without a link"));
        }
        if base.speed_ext2 != 0 {
            return Err(self.unrepresentable(n, 0, "XDR enabled on ports without a link"));
        }
        let d = self.defaults;
        let directives = [
            ("width", d.width, base.width, 1..=31),
            ("speed", d.speed, base.speed, 1..=7),
            ("extspeed", d.speed_ext, base.speed_ext, 0..=15),
        ];
        for (key, old, new, range) in directives {
            if old != new {
                if !range.contains(&new) {
                    return Err(self.unrepresentable(
                        n,
                        0,
                        format!("{key} {new} on ports without a link"),
                    ));
                }
                writeln!(self.out, "{key}={new}").map_err(io)?;
            }
        }
        self.defaults = base;
        Ok(base)
    }

    fn port(&mut self, n: NodeId, pid: PortId, base: LinkRates) -> Result<(), FabricError> {
        let f = self.f;
        let is_switch = f.node(n).kind() == NodeType::Switch;
        let port = f.port(pid);
        let Some(qid) = port.peer() else {
            if !is_switch && port.guid() != f.node(n).guid().wrapping_add(u64::from(port.num())) {
                return Err(self.unrepresentable(
                    n,
                    port.num(),
                    "the GUID of an unlinked CA port other than node GUID + port number",
                ));
            }
            return Ok(());
        };
        let q = f.port(qid);
        let rnode = q.node();
        let rname = f.name(rnode);
        let Some(rref) = self.reference(rname) else {
            return Err(self.unrepresentable(
                n,
                port.num(),
                format!("a link to `{rname}`, outside module `{}`", self.module),
            ));
        };
        let remote_is_switch = f.node(rnode).kind() == NodeType::Switch;
        let rlid = if remote_is_switch {
            f.port(f.port_id(rnode, 0).expect("switches have port 0"))
                .lid()
        } else {
            q.lid()
        };
        let spelling = self
            .spellings
            .entry((port.enabled, base))
            .or_insert_with(|| spell(port.enabled, base))
            .clone()
            .ok_or_else(|| {
                self.unrepresentable(n, port.num(), format!("enabled rates {:?}", port.enabled))
            })?;
        let o = &mut self.out;
        if is_switch {
            write!(o, "[{}]\t\"{rref}\"[{}]", port.num(), q.num()).map_err(io)?;
        } else {
            write!(
                o,
                "[{}]({:x}) \t\"{rref}\"[{}]",
                port.num(),
                port.guid(),
                q.num()
            )
            .map_err(io)?;
        }
        if !remote_is_switch {
            write!(o, "({:x}) ", q.guid()).map_err(io)?;
        }
        let opts = [
            ("w", spelling.width),
            ("s", spelling.speed),
            ("e", spelling.speed_ext),
        ];
        let mut first = true;
        for (k, v) in opts {
            if let Some(v) = v {
                write!(o, "{}{k}={v}", if first { "\t" } else { " " }).map_err(io)?;
                first = false;
            }
        }
        write!(o, "\t\t# ").map_err(io)?;
        if !is_switch {
            write!(o, "lid {} lmc {} ", port.lid(), port.lmc()).map_err(io)?;
        }
        write!(o, "\"{}\" lid {rlid}", f.description(rnode)).map_err(io)?;
        if let Some(t) = &spelling.token {
            write!(o, " {t}").map_err(io)?;
        }
        writeln!(o).map_err(io)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spellings() {
        let d = LinkRates::DEFAULT;
        assert_eq!(spell(d, d).unwrap().token, None);
        let qdr = LinkRates {
            width: 3,
            speed: 7,
            speed_ext: 0,
            speed_ext2: 0,
            fdr10: false,
        };
        assert_eq!(spell(qdr, d).unwrap().token.as_deref(), Some("4xQDR"));
        assert_eq!(
            spell(qdr, qdr).unwrap(),
            Spelling {
                width: None,
                speed: None,
                speed_ext: None,
                token: None
            }
        );
        let odd = LinkRates {
            width: 2,
            speed: 7,
            speed_ext: 4,
            speed_ext2: 0,
            fdr10: false,
        };
        let s = spell(odd, d).unwrap();
        assert_eq!(
            (s.width, s.speed, s.speed_ext, s.token),
            (None, Some(7), Some(4), None)
        );
        // FDR10 with an extended-speed mask no token gives: option e= then the FDR10 token.
        let f10 = LinkRates {
            width: 3,
            speed: 7,
            speed_ext: 5,
            speed_ext2: 0,
            fdr10: true,
        };
        let s = spell(f10, d).unwrap();
        assert_eq!(
            (s.speed_ext, s.token.as_deref()),
            (Some(5), Some("4xFDR10"))
        );
        // FDR10 on a 4x-only port: no token sets width 2.
        assert_eq!(
            spell(
                LinkRates {
                    width: 2,
                    fdr10: true,
                    ..qdr
                },
                d
            ),
            None
        );
        assert_eq!(spell(LinkRates { speed: 0, ..d }, d), None);
    }
}

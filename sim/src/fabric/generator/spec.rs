//! Generator specs: `shape:key=value,key=value`, the string the `hca sim gen` command takes.

use super::{Chain, FatTree, FatTree3, GenSpec, Shape, Star};
use crate::fabric::error::{FabricError, SpecProblem};
use crate::fabric::rate::LinkRates;

/// The keys each shape takes, for messages.
const FAT_TREE_KEYS: &str = "leaves, hosts, spines, links, leaf-ports, spine-ports, link";
const FAT_TREE3_KEYS: &str = "pods, leaves, hosts, spines, cores, link";
const SWITCH_KEYS: &str = "hosts, ports, link";
const CHAIN_KEYS: &str = "switches, hosts, links, link";

struct Params<'a> {
    spec: &'a str,
    shape: &'static str,
    known: &'static str,
    pairs: Vec<(&'a str, &'a str, bool)>,
}

impl<'a> Params<'a> {
    fn err(&self, problem: SpecProblem) -> FabricError {
        FabricError::Spec {
            spec: self.spec.to_owned(),
            problem,
        }
    }

    fn take(&mut self, key: &str) -> Option<&'a str> {
        self.pairs
            .iter_mut()
            .find(|(k, _, _)| *k == key)
            .map(|(_, v, used)| {
                *used = true;
                *v
            })
    }

    fn number(&mut self, key: &'static str, min: u32) -> Result<Option<u32>, FabricError> {
        let Some(v) = self.take(key) else {
            return Ok(None);
        };
        let n: u32 = v.parse().map_err(|_| {
            self.err(SpecProblem::BadValue {
                key: key.to_owned(),
                value: v.to_owned(),
                why: "expected a decimal number".to_owned(),
            })
        })?;
        if n < min {
            return Err(self.err(SpecProblem::BadValue {
                key: key.to_owned(),
                value: v.to_owned(),
                why: format!("must be at least {min}"),
            }));
        }
        Ok(Some(n))
    }

    fn required(&mut self, key: &'static str, min: u32) -> Result<u32, FabricError> {
        self.number(key, min)?.ok_or_else(|| {
            self.err(SpecProblem::MissingKey {
                shape: self.shape,
                key,
            })
        })
    }

    fn port_count(&mut self, key: &'static str) -> Result<Option<u8>, FabricError> {
        let Some(n) = self.number(key, 1)? else {
            return Ok(None);
        };
        u8::try_from(n)
            .ok()
            .filter(|&p| p <= 254)
            .map(Some)
            .ok_or_else(|| {
                self.err(SpecProblem::BadValue {
                    key: key.to_owned(),
                    value: n.to_string(),
                    why: "a switch has 1 to 254 ports".to_owned(),
                })
            })
    }

    fn link(&mut self) -> Result<Option<LinkRates>, FabricError> {
        let Some(v) = self.take("link") else {
            return Ok(None);
        };
        let bad = |why: String| {
            self.err(SpecProblem::BadValue {
                key: "link".to_owned(),
                value: v.to_owned(),
                why,
            })
        };
        let (w, s) = v.split_once('x').ok_or_else(|| {
            bad("expected an ibnetdiscover rate such as 4xQDR or 4xHDR".to_owned())
        })?;
        if s == "???" {
            return Err(bad("the speed must be named".to_owned()));
        }
        LinkRates::DEFAULT
            .apply_token(w, s)
            .map(Some)
            .map_err(|p| bad(p.to_string()))
    }

    /// Fails on a key nobody took.
    fn done(&self) -> Result<(), FabricError> {
        match self.pairs.iter().find(|(_, _, used)| !used) {
            Some((k, _, _)) => Err(self.err(SpecProblem::UnknownKey {
                shape: self.shape,
                key: (*k).to_owned(),
                known: self.known,
            })),
            None => Ok(()),
        }
    }
}

/// Parses a spec such as `fat-tree:leaves=64,hosts=32,spines=32`.
pub fn parse_spec(spec: &str) -> Result<GenSpec, FabricError> {
    let err = |problem| FabricError::Spec {
        spec: spec.to_owned(),
        problem,
    };
    let (shape, args) = spec.trim().split_once(':').unwrap_or((spec.trim(), ""));
    let (shape, known): (&'static str, &'static str) = match shape {
        "fat-tree" => ("fat-tree", FAT_TREE_KEYS),
        "fat-tree3" => ("fat-tree3", FAT_TREE3_KEYS),
        "switch" => ("switch", SWITCH_KEYS),
        "line" => ("line", CHAIN_KEYS),
        "ring" => ("ring", CHAIN_KEYS),
        other => return Err(err(SpecProblem::UnknownShape(other.to_owned()))),
    };
    let mut pairs: Vec<(&str, &str, bool)> = Vec::new();
    for item in args.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (k, v) = item.split_once('=').ok_or_else(|| {
            err(SpecProblem::BadValue {
                key: item.to_owned(),
                value: String::new(),
                why: "expected key=value".to_owned(),
            })
        })?;
        let (k, v) = (k.trim(), v.trim());
        if pairs.iter().any(|(pk, _, _)| *pk == k) {
            return Err(err(SpecProblem::DuplicateKey(k.to_owned())));
        }
        pairs.push((k, v, false));
    }
    let mut p = Params {
        spec,
        shape,
        known,
        pairs,
    };
    let shape = match shape {
        "fat-tree" => Shape::FatTree(FatTree {
            leaves: p.required("leaves", 1)?,
            hosts_per_leaf: p.required("hosts", 0)?,
            spines: p.required("spines", 1)?,
            links_per_spine: p.number("links", 1)?.unwrap_or(1),
            leaf_ports: p.port_count("leaf-ports")?,
            spine_ports: p.port_count("spine-ports")?,
        }),
        "fat-tree3" => Shape::FatTree3(FatTree3 {
            pods: p.required("pods", 1)?,
            leaves_per_pod: p.required("leaves", 1)?,
            hosts_per_leaf: p.required("hosts", 0)?,
            spines_per_pod: p.required("spines", 1)?,
            cores: p.required("cores", 1)?,
        }),
        "switch" => Shape::Switch(Star {
            hosts: p.required("hosts", 1)?,
            ports: p.port_count("ports")?,
        }),
        chain => {
            let c = Chain {
                switches: p.required("switches", 1)?,
                hosts_per_switch: p.required("hosts", 0)?,
                links: p.number("links", 1)?.unwrap_or(1),
            };
            if chain == "ring" {
                Shape::Ring(c)
            } else {
                Shape::Line(c)
            }
        }
    };
    let link = p.link()?;
    p.done()?;
    Ok(GenSpec { shape, link })
}

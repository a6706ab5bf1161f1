//! Device strings: how a user or a test names the PCI function to drive.
//!
//! Accepted forms:
//! - `vfio:DDDD:BB:DD.F` — a function bound to the kernel's vfio-pci, e.g. `vfio:0000:03:00.0`.
//!   The domain may be left out (`vfio:03:00.0` means domain 0000, as `lspci` prints it).
//! - `sim` — the simulated HCA with its defaults.
//! - `sim:KEY=VALUE,...` — the simulated HCA with parameters, passed in order to the simulator
//!   (which says what it accepts). Keys are letters, digits, `_` and `-`; values are non-empty
//!   and cannot contain `,`.
//!
//! Surrounding whitespace is ignored; the kinds (`vfio`, `sim`) are lower-case.

use std::fmt;
use std::str::FromStr;

use crate::error::DriverError;
use crate::pci::PciAddress;

/// A parsed device string.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeviceSpec {
    /// A function bound to vfio-pci.
    Vfio(PciAddress),
    /// The simulator, with `key=value` parameters in the order given (empty for plain `sim`).
    Sim(Vec<(String, String)>),
}

fn bad(given: &str, reason: impl Into<String>) -> DriverError {
    DriverError::BadDeviceString {
        given: given.to_string(),
        reason: reason.into(),
    }
}

fn parse_sim_params(given: &str, text: &str) -> Result<Vec<(String, String)>, DriverError> {
    if text.is_empty() {
        return Err(bad(
            given,
            "nothing after `sim:`; write `sim` for the defaults or `sim:KEY=VALUE,...`",
        ));
    }
    let mut params = Vec::new();
    for (i, item) in text.split(',').enumerate() {
        let n = i + 1;
        if item.is_empty() {
            return Err(bad(
                given,
                format!("parameter {n} of the sim parameters is empty (a stray `,`?)"),
            ));
        }
        let Some((key, value)) = item.split_once('=') else {
            return Err(bad(
                given,
                format!("sim parameter `{item}` has no `=VALUE`"),
            ));
        };
        if key.is_empty() {
            return Err(bad(
                given,
                format!("sim parameter `{item}` has an empty key"),
            ));
        }
        if let Some(c) = key
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || *c == '_' || *c == '-'))
        {
            return Err(bad(
                given,
                format!(
                    "sim parameter key `{key}` has the character `{c}`; keys are letters, digits, `_` and `-`"
                ),
            ));
        }
        if value.is_empty() {
            return Err(bad(
                given,
                format!("sim parameter `{key}` has an empty value"),
            ));
        }
        // Last-one-wins would hide a typo'd or pasted-twice setting: refuse it.
        if let Some((_, first)) = params.iter().find(|(k, _)| k == key) {
            return Err(bad(
                given,
                format!(
                    "sim parameter `{key}` is given twice (`{key}={first}` and `{key}={value}`); keep one"
                ),
            ));
        }
        params.push((key.to_string(), value.to_string()));
    }
    Ok(params)
}

impl DeviceSpec {
    /// Parse a device string; errors name the part that is wrong and list the accepted forms.
    pub fn parse(given: &str) -> Result<Self, DriverError> {
        let text = given.trim();
        if text.is_empty() {
            return Err(bad(given, "the device string is empty"));
        }
        if text == "sim" {
            return Ok(DeviceSpec::Sim(Vec::new()));
        }
        let Some((kind, rest)) = text.split_once(':') else {
            return Err(bad(
                given,
                format!("unknown device kind `{text}` (expected `vfio:` or `sim`)"),
            ));
        };
        match kind {
            "vfio" => {
                if rest.is_empty() {
                    return Err(bad(given, "nothing after `vfio:`; a PCI address is needed"));
                }
                PciAddress::parse_reason(rest)
                    .map(DeviceSpec::Vfio)
                    .map_err(|reason| bad(given, format!("after `vfio:`, {reason}")))
            }
            "sim" => parse_sim_params(given, rest).map(DeviceSpec::Sim),
            _ if PciAddress::parse_reason(text).is_ok() => Err(bad(
                given,
                format!("a bare PCI address needs its kind: did you mean `vfio:{text}`?"),
            )),
            _ if kind.eq_ignore_ascii_case("vfio") || kind.eq_ignore_ascii_case("sim") => Err(bad(
                given,
                format!(
                    "unknown device kind `{kind}`: kinds are lower-case (`{}`)",
                    kind.to_ascii_lowercase()
                ),
            )),
            _ => Err(bad(
                given,
                format!("unknown device kind `{kind}` (expected `vfio` or `sim`)"),
            )),
        }
    }
}

impl FromStr for DeviceSpec {
    type Err = DriverError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        DeviceSpec::parse(s)
    }
}

impl fmt::Display for DeviceSpec {
    /// The canonical device string (full PCI address, parameters in order).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceSpec::Vfio(a) => write!(f, "vfio:{a}"),
            DeviceSpec::Sim(p) if p.is_empty() => f.write_str("sim"),
            DeviceSpec::Sim(p) => {
                f.write_str("sim:")?;
                for (i, (k, v)) in p.iter().enumerate() {
                    if i > 0 {
                        f.write_str(",")?;
                    }
                    write!(f, "{k}={v}")?;
                }
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kv(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
            .collect()
    }

    #[test]
    fn good_forms() {
        let a: PciAddress = "0000:03:00.0".parse().unwrap();
        assert_eq!(
            DeviceSpec::parse("vfio:0000:03:00.0").unwrap(),
            DeviceSpec::Vfio(a)
        );
        assert_eq!(
            DeviceSpec::parse("vfio:03:00.0").unwrap(),
            DeviceSpec::Vfio(a)
        );
        assert_eq!(
            DeviceSpec::parse("  vfio:0000:03:00.0\n").unwrap(),
            DeviceSpec::Vfio(a)
        );
        assert_eq!(DeviceSpec::parse("sim").unwrap(), DeviceSpec::Sim(vec![]));
        assert_eq!(
            DeviceSpec::parse("sim:topology=net.topo,node=H1,family=mlx5").unwrap(),
            DeviceSpec::Sim(kv(&[
                ("topology", "net.topo"),
                ("node", "H1"),
                ("family", "mlx5")
            ]))
        );
        // A value may contain `=` and `:` (paths); only `,` separates.
        assert_eq!(
            DeviceSpec::parse("sim:topology=/a:b/c=d").unwrap(),
            DeviceSpec::Sim(kv(&[("topology", "/a:b/c=d")]))
        );
    }

    #[test]
    fn canonical_display_round_trips() {
        for s in ["vfio:0000:03:00.0", "sim", "sim:a=1,b-c=x_y"] {
            assert_eq!(DeviceSpec::parse(s).unwrap().to_string(), s);
        }
        assert_eq!(
            DeviceSpec::parse("vfio:3B:00.1").unwrap().to_string(),
            "vfio:0000:3b:00.1"
        );
    }

    #[test]
    fn bad_forms_say_which_part_is_wrong_and_show_the_accepted_forms() {
        let cases = [
            ("", "the device string is empty"),
            ("mlx5", "unknown device kind `mlx5`"),
            ("pci:0000:03:00.0", "unknown device kind `pci`"),
            ("VFIO:0000:03:00.0", "kinds are lower-case (`vfio`)"),
            ("0000:03:00.0", "did you mean `vfio:0000:03:00.0`?"),
            ("vfio:", "nothing after `vfio:`"),
            ("vfio:0000:03:00", "after `vfio:`, `0000:03:00` has no `.F`"),
            ("vfio:0000:03:00.9", "function number 9 is above 7"),
            ("vfio:0000:3:00.0", "the bus `3` must be 2 hex digits"),
            ("sim:", "nothing after `sim:`"),
            ("sim:topology", "sim parameter `topology` has no `=VALUE`"),
            ("sim:a=1,,b=2", "parameter 2 of the sim parameters is empty"),
            ("sim:=x", "has an empty key"),
            ("sim:a b=x", "key `a b` has the character ` `"),
            ("sim:node=", "sim parameter `node` has an empty value"),
            (
                "sim:fw=1.2.3,fw=9.9.9",
                "sim parameter `fw` is given twice (`fw=1.2.3` and `fw=9.9.9`); keep one",
            ),
        ];
        for (text, want) in cases {
            let err = DeviceSpec::parse(text).unwrap_err();
            assert!(
                matches!(&err, DriverError::BadDeviceString { given, .. } if given == text),
                "{text}: {err:?}"
            );
            let msg = err.to_string();
            assert!(msg.contains(want), "{text:?}: {msg}");
            for form in ["vfio:DDDD:BB:DD.F", "sim ", "sim:KEY=VALUE,..."] {
                assert!(msg.contains(form), "{text:?} lacks {form:?}: {msg}");
            }
        }
    }
}

//! Which agent receives which unsolicited MAD: registrations by class version, management class
//! and method (and OUI for vendor range-2 classes), checked and dispatched as the kernel's
//! `ib_register_mad_agent` and `find_mad_agent` do (reference/mad-stack.md §1.3; `mad.c`).
//!
//! The kernel's tables are `version[v].class->method_table[c]->agent[m]`, where class 0x81
//! (directed-route SMPs) is stored at index 0 (`convert_mgmt_class`) and vendor range-2
//! classes (0x30–0x4F) have up to 8 OUIs each, each with its own method table. Registrations
//! conflict when they claim the same method of the same (version, class[, OUI]). This module
//! holds agent IDs only; the port maps them to agents.

use std::collections::HashMap;

use driver::verbs::SpecialQp;
use mad_wire::class;
use mad_wire::method::MAX_METHODS;

use crate::error::MadError;

/// The kernel's `MAX_MGMT_VERSION`: class versions must be below it.
pub const MAX_CLASS_VERSION: u8 = 0x83;
/// The kernel's `MAX_MGMT_CLASS`: class indexes must be below it (0x81 is stored at 0).
pub const MAX_CLASS_INDEX: u8 = 80;
/// The kernel's `MAX_MGMT_OUI`: OUIs per vendor range-2 class and version.
pub const MAX_OUIS: usize = 8;

/// A set of methods (0–127), one bit each, as in the kernel's and umad's `method_mask`.
///
/// A registration names request methods: the kernel's mask has no bit for a method with the
/// response bit (0x80) set, and responses reach the agent that sent the request without
/// registering. A mask built with such a value keeps it aside (no bit), and registering it
/// is refused ([`MadError::ResponseMethod`]) rather than taken as the request method.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct MethodMask {
    words: [u64; 2],
    /// The first value given with the response bit set, if any.
    response: Option<u8>,
}

impl MethodMask {
    /// No method: the agent gets responses to its own requests only.
    pub const NONE: MethodMask = MethodMask {
        words: [0, 0],
        response: None,
    };

    /// The methods listed (0x00–0x7F; a value with the response bit set makes the mask one a
    /// registration refuses, see [`MethodMask::insert`]).
    pub fn of(methods: &[u8]) -> MethodMask {
        let mut m = MethodMask::NONE;
        for &x in methods {
            m.insert(x);
        }
        m
    }

    /// From the 128-bit mask as two words, bit `n` of word `n / 64` for method `n` (umad's
    /// `method_mask` on a 64-bit host). Every such mask is a valid set.
    pub fn from_words(words: [u64; 2]) -> MethodMask {
        MethodMask {
            words,
            response: None,
        }
    }

    /// The mask as two words.
    pub fn words(self) -> [u64; 2] {
        self.words
    }

    /// Add `method`. A value with the response bit set (0x80–0xFF) is no method a
    /// registration can name (the kernel's 128-bit mask cannot hold it): it adds no bit, and
    /// the first one is kept to refuse the registration with ([`MethodMask::response_method`]).
    pub fn insert(&mut self, method: u8) {
        if method & 0x80 != 0 {
            self.response.get_or_insert(method);
            return;
        }
        self.words[usize::from(method / 64)] |= 1 << (method % 64);
    }

    /// Whether `method` (0x00–0x7F) is in the set.
    pub fn contains(self, method: u8) -> bool {
        method & 0x80 == 0 && self.words[usize::from(method / 64)] & (1 << (method % 64)) != 0
    }

    /// The first value with the response bit set that was added, which makes a registration
    /// of this mask fail.
    pub fn response_method(self) -> Option<u8> {
        self.response
    }

    /// Whether the set is empty.
    pub fn is_empty(self) -> bool {
        self.words == [0, 0]
    }

    /// The methods in the set, ascending.
    pub fn iter(self) -> impl Iterator<Item = u8> {
        (0..MAX_METHODS as u8).filter(move |&m| self.contains(m))
    }
}

/// What an agent with a receive side registers for: unsolicited MADs of `class` at
/// `version` whose method is in `methods` (and whose OUI is `oui`, for vendor range 2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ClassRegistration {
    /// Management class (0x81 and 0x01 are distinct registrations).
    pub class: u8,
    /// Class version.
    pub version: u8,
    /// Methods to receive unsolicited (empty: responses only).
    pub methods: MethodMask,
    /// OUI (24 bits), required for vendor range-2 classes (0x30–0x4F), ignored otherwise.
    pub oui: Option<u32>,
}

fn invalid(reason: impl Into<String>) -> MadError {
    MadError::InvalidRegistration {
        reason: reason.into(),
    }
}

/// The kernel's `convert_mgmt_class`: 0x81 is stored at index 0.
fn class_index(class: u8) -> u8 {
    if class == class::SUBN_DIRECTED_ROUTE {
        0
    } else {
        class
    }
}

/// Checks a registration as `ib_register_mad_agent` does, for an agent on `qp` with
/// `rmpp_version`.
pub fn validate(
    reg: Option<&ClassRegistration>,
    qp: SpecialQp,
    rmpp_version: u8,
) -> Result<(), MadError> {
    if rmpp_version > mad_wire::rmpp::VERSION {
        return Err(invalid(format!(
            "RMPP version {rmpp_version}: only 0 (no RMPP) and 1 exist"
        )));
    }
    let Some(reg) = reg else {
        return Ok(());
    };
    if let Some(method) = reg.methods.response_method() {
        return Err(MadError::ResponseMethod { method });
    }
    let c = reg.class;
    if reg.version >= MAX_CLASS_VERSION {
        return Err(invalid(format!(
            "class version {} is not below {MAX_CLASS_VERSION:#x}",
            reg.version
        )));
    }
    if c == 0 {
        return Err(invalid(
            "class 0 is reserved (it aliases 0x81); register without a class for a send-only \
             or responses-only agent",
        ));
    }
    if c >= MAX_CLASS_INDEX && c != class::SUBN_DIRECTED_ROUTE {
        return Err(invalid(format!(
            "class {c:#04x} is out of range: classes are below {MAX_CLASS_INDEX:#x}, or 0x81"
        )));
    }
    if class::is_vendor_range2(c) {
        match reg.oui {
            Some(oui) if oui != 0 && oui <= 0xFF_FFFF => {}
            Some(oui) if oui > 0xFF_FFFF => {
                return Err(invalid(format!("OUI {oui:#x} is wider than 24 bits")));
            }
            _ => {
                return Err(invalid(format!(
                    "vendor class {c:#04x} (range 2) needs a non-zero OUI"
                )));
            }
        }
    }
    if rmpp_version != 0 && !class::is_rmpp_capable(c) {
        return Err(invalid(format!(
            "class {c:#04x} is not RMPP-capable; register it with RMPP version 0"
        )));
    }
    let smp = class::is_smp(c);
    match qp {
        SpecialQp::Smi if !smp => Err(invalid(format!(
            "class {c:#04x} does not use QP0: only classes 0x01 and 0x81 do; register it on QP1"
        ))),
        SpecialQp::Gsi if smp => Err(invalid(format!(
            "class {c:#04x} uses QP0, not QP1; register it on QP0"
        ))),
        _ => Ok(()),
    }
}

/// One method table: the agent ID holding each method.
type Methods = Box<[Option<u32>; MAX_METHODS]>;

fn empty_methods() -> Methods {
    Box::new([None; MAX_METHODS])
}

/// The registration tables of one port.
#[derive(Debug, Default)]
pub struct Registry {
    /// (version, class index) -> methods, for every class but vendor range 2.
    classes: HashMap<(u8, u8), Methods>,
    /// (version, class) -> up to 8 (OUI, methods), for vendor range 2.
    vendor: HashMap<(u8, u8), Vec<(u32, Methods)>>,
}

impl Registry {
    /// Empty tables.
    pub fn new() -> Registry {
        Registry::default()
    }

    /// Registers `agent` for `reg` (already validated), or says which method conflicts. Nothing
    /// changes on error.
    pub fn register(&mut self, agent: u32, reg: &ClassRegistration) -> Result<(), MadError> {
        let conflict = |methods: &Methods, oui: Option<u32>| -> Result<(), MadError> {
            for m in reg.methods.iter() {
                if let Some(holder) = methods[usize::from(m)] {
                    return Err(MadError::RegistrationConflict {
                        class: reg.class,
                        version: reg.version,
                        method: m,
                        oui,
                        holder,
                    });
                }
            }
            Ok(())
        };
        let table = if class::is_vendor_range2(reg.class) {
            let oui = reg.oui.unwrap_or(0);
            let ouis = self.vendor.entry((reg.version, reg.class)).or_default();
            let pos = match ouis.iter().position(|(o, _)| *o == oui) {
                Some(p) => {
                    conflict(&ouis[p].1, Some(oui))?;
                    p
                }
                None if ouis.len() >= MAX_OUIS => {
                    return Err(MadError::OuiSlotsFull {
                        class: reg.class,
                        version: reg.version,
                    });
                }
                None => {
                    ouis.push((oui, empty_methods()));
                    ouis.len() - 1
                }
            };
            &mut ouis[pos].1
        } else {
            let methods = self
                .classes
                .entry((reg.version, class_index(reg.class)))
                .or_insert_with(empty_methods);
            conflict(methods, None)?;
            methods
        };
        for m in reg.methods.iter() {
            table[usize::from(m)] = Some(agent);
        }
        Ok(())
    }

    /// Removes every method `agent` holds under `reg`.
    pub fn unregister(&mut self, agent: u32, reg: &ClassRegistration) {
        let clear = |methods: &mut Methods| {
            for slot in methods.iter_mut() {
                if *slot == Some(agent) {
                    *slot = None;
                }
            }
            methods.iter().all(Option::is_none)
        };
        if class::is_vendor_range2(reg.class) {
            let key = (reg.version, reg.class);
            if let Some(ouis) = self.vendor.get_mut(&key) {
                let oui = reg.oui.unwrap_or(0);
                if let Some(p) = ouis.iter().position(|(o, _)| *o == oui) {
                    if clear(&mut ouis[p].1) {
                        ouis.remove(p);
                    }
                }
                if ouis.is_empty() {
                    self.vendor.remove(&key);
                }
            }
        } else {
            let key = (reg.version, class_index(reg.class));
            if let Some(methods) = self.classes.get_mut(&key) {
                if clear(methods) {
                    self.classes.remove(&key);
                }
            }
        }
    }

    /// The agent that receives an unsolicited MAD with these header fields (`oui` read from
    /// the MAD for vendor range-2 classes), as `find_mad_agent` routes requests.
    pub fn lookup(&self, version: u8, mgmt_class: u8, method: u8, oui: u32) -> Option<u32> {
        if version >= MAX_CLASS_VERSION {
            return None;
        }
        let m = usize::from(method & 0x7F);
        if class::is_vendor_range2(mgmt_class) {
            let ouis = self.vendor.get(&(version, mgmt_class))?;
            let (_, methods) = ouis.iter().find(|(o, _)| *o == oui)?;
            methods[m]
        } else {
            let idx = class_index(mgmt_class);
            if idx >= MAX_CLASS_INDEX {
                return None;
            }
            self.classes.get(&(version, idx))?[m]
        }
    }

    /// No registration left (for leak checks).
    pub fn is_empty(&self) -> bool {
        self.classes.is_empty() && self.vendor.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reg(class: u8, version: u8, methods: &[u8], oui: Option<u32>) -> ClassRegistration {
        ClassRegistration {
            class,
            version,
            methods: MethodMask::of(methods),
            oui,
        }
    }

    #[test]
    fn method_mask_bits() {
        let m = MethodMask::of(&[0x01, 0x02, 0x7F]);
        assert_eq!(m.words(), [0b110, 1 << 63]);
        assert_eq!(m.iter().collect::<Vec<_>>(), vec![1, 2, 0x7F]);
        assert_eq!(m.response_method(), None);
        assert!(MethodMask::NONE.is_empty());
        let all = MethodMask::from_words([u64::MAX; 2]);
        assert_eq!(all.iter().count(), 128);
        assert_eq!(
            all.response_method(),
            None,
            "a 128-bit mask holds requests only"
        );
    }

    /// The kernel's mask has no bit for a method with the response bit set (umad's neither):
    /// `of(&[0x81])` is refused, not taken as Get.
    #[test]
    fn a_response_method_in_a_registration_is_refused() {
        let m = MethodMask::of(&[0x01, 0x81, 0x92]);
        assert_eq!(m.response_method(), Some(0x81));
        assert_eq!(m.words(), [0b10, 0], "no bit for 0x81 or 0x92");
        assert!(!m.contains(0x81));
        let e = validate(
            Some(&ClassRegistration {
                class: 0x04,
                version: 1,
                methods: m,
                oui: None,
            }),
            SpecialQp::Gsi,
            0,
        );
        assert!(
            matches!(e, Err(MadError::ResponseMethod { method: 0x81 })),
            "{e:?}"
        );
    }

    /// The refusals of `ib_register_mad_agent`, one per rule.
    #[test]
    fn validation_follows_the_kernel() {
        use SpecialQp::{Gsi, Smi};
        let ok: &[(Option<ClassRegistration>, SpecialQp, u8)] = &[
            (None, Smi, 0),
            (None, Gsi, 1),
            (Some(reg(0x81, 1, &[1], None)), Smi, 0),
            (Some(reg(0x01, 1, &[1], None)), Smi, 0),
            (Some(reg(0x03, 2, &[1], None)), Gsi, 1),
            (Some(reg(0x30, 1, &[1], Some(0x1405))), Gsi, 1),
            (Some(reg(0x04, 0x82, &[1], Some(0x1405))), Gsi, 0),
            (Some(reg(0x09, 1, &[1], None)), Gsi, 0),
        ];
        for (r, qp, rmpp) in ok {
            assert!(
                validate(r.as_ref(), *qp, *rmpp).is_ok(),
                "{r:?} {qp:?} {rmpp}"
            );
        }
        let bad: &[(ClassRegistration, SpecialQp, u8)] = &[
            (reg(0x04, 1, &[1], None), Gsi, 2),
            (reg(0x04, 0x83, &[1], None), Gsi, 0),
            (reg(0x00, 1, &[1], None), Gsi, 0),
            (reg(0x50, 1, &[1], None), Gsi, 0),
            (reg(0x80, 1, &[1], None), Gsi, 0),
            (reg(0x30, 1, &[1], None), Gsi, 0),
            (reg(0x30, 1, &[1], Some(0)), Gsi, 0),
            (reg(0x4F, 1, &[1], Some(0x100_0000)), Gsi, 0),
            (reg(0x04, 1, &[1], None), Gsi, 1),
            (reg(0x03, 2, &[1], None), Smi, 0),
            (reg(0x01, 1, &[1], None), Gsi, 0),
            (reg(0x81, 1, &[1], None), Gsi, 0),
        ];
        for (r, qp, rmpp) in bad {
            assert!(
                matches!(
                    validate(Some(r), *qp, *rmpp),
                    Err(MadError::InvalidRegistration { .. })
                ),
                "{r:?} {qp:?} {rmpp}"
            );
        }
    }

    #[test]
    fn conflicts_are_per_version_class_method() {
        let mut r = Registry::new();
        r.register(1, &reg(0x04, 1, &[0x01, 0x02], None)).unwrap();
        let e = r
            .register(2, &reg(0x04, 1, &[0x03, 0x02], None))
            .unwrap_err();
        assert!(matches!(
            e,
            MadError::RegistrationConflict {
                class: 0x04,
                version: 1,
                method: 0x02,
                oui: None,
                holder: 1
            }
        ));
        assert_eq!(
            r.lookup(1, 0x04, 0x03, 0),
            None,
            "a refused registration adds nothing"
        );
        r.register(2, &reg(0x04, 1, &[0x03], None)).unwrap();
        r.register(3, &reg(0x04, 2, &[0x02], None)).unwrap();
        assert_eq!(r.lookup(1, 0x04, 0x02, 0), Some(1));
        assert_eq!(r.lookup(1, 0x04, 0x03, 0), Some(2));
        assert_eq!(r.lookup(2, 0x04, 0x02, 0), Some(3));
        assert_eq!(r.lookup(1, 0x04, 0x05, 0), None);
    }

    #[test]
    fn directed_route_is_stored_at_index_0_and_apart_from_lid_routed() {
        let mut r = Registry::new();
        r.register(1, &reg(0x81, 1, &[0x01], None)).unwrap();
        r.register(2, &reg(0x01, 1, &[0x01], None)).unwrap();
        assert_eq!(r.lookup(1, 0x81, 0x01, 0), Some(1));
        assert_eq!(r.lookup(1, 0x01, 0x01, 0), Some(2));
        assert_eq!(r.lookup(1, 0x00, 0x01, 0), Some(1), "class 0 aliases 0x81");
        assert_eq!(r.lookup(1, 0x90, 0x01, 0), None, "out of the class range");
        assert_eq!(r.lookup(0x83, 0x81, 0x01, 0), None, "version out of range");
    }

    #[test]
    fn vendor_range2_dispatches_on_oui_with_eight_slots() {
        let mut r = Registry::new();
        for oui in 1..=8u32 {
            r.register(oui, &reg(0x30, 1, &[0x01], Some(oui))).unwrap();
        }
        assert!(matches!(
            r.register(9, &reg(0x30, 1, &[0x01], Some(9))),
            Err(MadError::OuiSlotsFull { class: 0x30, .. })
        ));
        assert!(matches!(
            r.register(9, &reg(0x30, 1, &[0x01], Some(3))),
            Err(MadError::RegistrationConflict {
                oui: Some(3),
                holder: 3,
                ..
            })
        ));
        r.register(9, &reg(0x30, 1, &[0x02], Some(3))).unwrap();
        assert_eq!(r.lookup(1, 0x30, 0x01, 5), Some(5));
        assert_eq!(r.lookup(1, 0x30, 0x02, 3), Some(9));
        assert_eq!(r.lookup(1, 0x30, 0x01, 99), None);
        r.unregister(5, &reg(0x30, 1, &[0x01], Some(5)));
        assert_eq!(r.lookup(1, 0x30, 0x01, 5), None);
        r.register(10, &reg(0x30, 1, &[0x01], Some(10))).unwrap();
    }

    #[test]
    fn unregister_frees_methods_and_tables() {
        let mut r = Registry::new();
        let a = reg(0x04, 1, &[0x01, 0x02], None);
        r.register(1, &a).unwrap();
        r.register(2, &reg(0x04, 1, &[0x03], None)).unwrap();
        r.unregister(1, &a);
        assert_eq!(r.lookup(1, 0x04, 0x01, 0), None);
        assert_eq!(r.lookup(1, 0x04, 0x03, 0), Some(2));
        r.register(3, &a).unwrap();
        r.unregister(3, &a);
        r.unregister(2, &reg(0x04, 1, &[0x03], None));
        assert!(r.is_empty());
    }
}

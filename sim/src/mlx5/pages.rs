//! The firmware's host pages: what it asks for at boot, at INIT_HCA and at run time, the pages
//! the driver gave it (each checked writable by writing a pattern into it through the IOMMU,
//! as firmware uses its pages), and what it gives back on MANAGE_PAGES TAKE. Pages are held
//! per function (`function_id`, `embedded_cpu_function`), as a PF holds pages for its VFs:
//! a TAKE gives back only pages of the function it names.

use std::collections::HashSet;

use dma::SimIommu;
use firmware_cmds::mlx5::ops::pas::ADAPTER_PAGE_SIZE;

/// The byte the model writes over every page it is given.
pub(crate) const PAGE_PATTERN: u8 = 0xa5;

/// Why a MANAGE_PAGES GIVE was refused (the command fails with BAD_PARAM; no page is taken).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GiveProblem {
    /// An address is not 4 KiB aligned (bits 11:0 of a `pas` entry are reserved).
    Misaligned,
    /// The firmware already holds this page, or it appears twice in the list.
    Duplicate,
    /// The IOMMU refused the device's write into the page.
    NotWritable,
}

/// A function pages are given for: (`function_id`, `embedded_cpu_function`).
pub(crate) type Function = (u16, bool);

/// The function itself: 0, with `embedded_cpu_function` set when it is an ECPF (on a
/// BlueField's ARM, function 0 without the flag is the host PF).
pub(crate) fn own(embedded_cpu: bool) -> Function {
    (0, embedded_cpu)
}

/// The pages the firmware holds and the demands it has made.
#[derive(Debug, Default)]
pub(crate) struct Pages {
    held: Vec<(Function, u64)>,
    set: HashSet<u64>,
    /// The function itself ([`own`]).
    pub own: Function,
    /// Other functions the firmware raised page requests for (VFs of this PF, the host PF
    /// of an ECPF): the ones a MANAGE_PAGES may name besides [`Pages::own`].
    others: HashSet<Function>,
    /// Pages of [`Pages::own`] the firmware cannot give back now (its working set once initialized).
    pub need: u64,
    /// Outstanding run-time request: > 0 pages wanted, < 0 pages offered back.
    pub request: i64,
}

impl Pages {
    /// No pages yet, for the function `own`.
    pub(crate) fn new(own: Function) -> Self {
        Pages {
            own,
            ..Pages::default()
        }
    }

    /// Pages held, for every function.
    pub(crate) fn held(&self) -> u64 {
        self.held.len() as u64
    }

    /// The firmware raised a page request for `f`: it is a function MANAGE_PAGES may name.
    pub(crate) fn know(&mut self, f: Function) {
        if f != self.own {
            self.others.insert(f);
        }
    }

    /// Whether MANAGE_PAGES may name `f`: the function itself, the host PF when this is an
    /// ECPF (function 0 without `embedded_cpu_function`, which the ECPF's driver gives pages
    /// for), or a function the firmware asked pages for. Anything else does not exist here.
    pub(crate) fn exists(&self, f: Function) -> bool {
        f == self.own || (self.own.1 && f == (0, false)) || self.others.contains(&f)
    }

    /// Pages held for `f`.
    pub(crate) fn held_by(&self, f: Function) -> u64 {
        self.held.iter().filter(|(g, _)| *g == f).count() as u64
    }

    /// Takes `pas` for `f`, after checking every page and writing the pattern into each.
    pub(crate) fn give(
        &mut self,
        iommu: &SimIommu,
        f: Function,
        pas: &[u64],
    ) -> Result<(), GiveProblem> {
        let mut seen = HashSet::with_capacity(pas.len());
        for &pa in pas {
            if pa % ADAPTER_PAGE_SIZE != 0 {
                return Err(GiveProblem::Misaligned);
            }
            if self.set.contains(&pa) || !seen.insert(pa) {
                return Err(GiveProblem::Duplicate);
            }
        }
        for &pa in pas {
            if iommu
                .fill(pa, ADAPTER_PAGE_SIZE as usize, PAGE_PATTERN)
                .is_err()
            {
                return Err(GiveProblem::NotWritable);
            }
        }
        for &pa in pas {
            self.held.push((f, pa));
            self.set.insert(pa);
        }
        Ok(())
    }

    /// Gives back up to `max` pages of `f` beyond the working set (of [`Pages::own`] only), most
    /// recently given first.
    pub(crate) fn take(&mut self, f: Function, max: u64) -> Vec<u64> {
        let need = if f == self.own { self.need } else { 0 };
        let spare = self.held_by(f).saturating_sub(need);
        let mut n = spare.min(max);
        let mut out = Vec::new();
        let mut i = self.held.len();
        while n > 0 && i > 0 {
            i -= 1;
            if self.held[i].0 == f {
                let (_, pa) = self.held.remove(i);
                self.set.remove(&pa);
                out.push(pa);
                n -= 1;
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_functions_manage_pages_may_name() {
        let pf = Pages::new(own(false));
        assert!(pf.exists((0, false)), "itself");
        assert!(
            !pf.exists((0, true)),
            "no embedded CPU function on a plain PF"
        );
        assert!(!pf.exists((3, false)), "a VF it never asked pages for");

        let mut ecpf = Pages::new(own(true));
        assert!(ecpf.exists((0, true)), "itself");
        assert!(ecpf.exists((0, false)), "the host PF");
        assert!(!ecpf.exists((3, false)));
        ecpf.know((3, false));
        assert!(ecpf.exists((3, false)), "asked pages for");
    }
}

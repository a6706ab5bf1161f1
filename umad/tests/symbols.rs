//! The built library exports exactly what Debian's libibumad 44 exports: the same function
//! names at the same symbol versions (`objdump -T`), the same version definitions
//! (`readelf -V`), and the soname `libibumad.so.3`.
//!
//! One difference is known and checked as such: lld (rustc's linker) does not write the
//! parent of a version definition (IBUMAD_1.1's IBUMAD_1.0) into `.gnu.version_d`, which
//! GNU ld does. The dynamic linker binds symbols by version name and ignores parents.

mod common;

use std::path::Path;
use std::process::Command;

/// `(version, name)` of every function `objdump -T` lists as defined.
fn functions(lib: &Path) -> Vec<(String, String)> {
    let o = Command::new("objdump").arg("-T").arg(lib).output().unwrap();
    assert!(o.status.success(), "objdump -T {}", lib.display());
    let mut v: Vec<(String, String)> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter(|l| l.contains(" DF ") && !l.contains("*UND*"))
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            Some((
                f.get(f.len().checked_sub(2)?)?.to_string(),
                f.last()?.to_string(),
            ))
        })
        .collect();
    v.sort();
    v
}

/// The version definitions, `name parent...`, from `readelf -V`.
fn version_defs(lib: &Path) -> Vec<String> {
    version_defs_with_parents(lib)
        .into_iter()
        .map(|d| d.split(' ').next().unwrap_or("").to_owned())
        .collect()
}

/// The version definitions with their parents (`IBUMAD_1.1 IBUMAD_1.0`).
fn version_defs_with_parents(lib: &Path) -> Vec<String> {
    let o = Command::new("readelf").arg("-V").arg(lib).output().unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    let mut defs = Vec::new();
    let mut in_defs = false;
    let mut current: Option<String> = None;
    for l in text.lines() {
        if l.starts_with("Version definition section") {
            in_defs = true;
            continue;
        }
        if l.starts_with("Version needs section") || l.starts_with("Version symbols section") {
            in_defs = false;
        }
        if !in_defs {
            continue;
        }
        if let Some(i) = l.find("Name: ") {
            if let Some(c) = current.take() {
                defs.push(c);
            }
            let name = l[i + 6..]
                .split_whitespace()
                .next()
                .unwrap_or("")
                .to_owned();
            // The file's own base definition (flags BASE) names the soname.
            if !l.contains("BASE") {
                current = Some(name);
            }
        } else if let Some(i) = l.find("Parent 1: ") {
            if let Some(c) = current.as_mut() {
                c.push(' ');
                c.push_str(l[i + 10..].trim());
            }
        }
    }
    defs.extend(current);
    defs.sort();
    defs
}

#[test]
fn the_function_symbols_and_versions_are_debians() {
    let ok = common::need(common::have("objdump"), "objdump", "binutils").and_then(|()| {
        common::need(
            Path::new(common::DEBIAN_LIB).exists(),
            common::DEBIAN_LIB,
            "libibumad3",
        )
    });
    if ok.is_none() {
        return;
    }
    let ours = functions(&common::built_lib());
    let debian = functions(Path::new(common::DEBIAN_LIB));
    assert_eq!(debian.len(), 39, "Debian's libibumad 44: {debian:?}");
    assert_eq!(ours, debian);
    // And the Rust side knows the same list.
    let mut names: Vec<&str> = ibumad::symbols::NAMES.to_vec();
    names.sort_unstable();
    let mut deb: Vec<&str> = debian.iter().map(|(_, n)| n.as_str()).collect();
    deb.sort_unstable();
    assert_eq!(names, deb);
}

#[test]
fn the_version_definitions_and_the_soname_are_debians() {
    let ok = common::need(common::have("readelf"), "readelf", "binutils").and_then(|()| {
        common::need(
            Path::new(common::DEBIAN_LIB).exists(),
            common::DEBIAN_LIB,
            "libibumad3",
        )
    });
    if ok.is_none() {
        return;
    }
    let lib = common::built_lib();
    assert_eq!(
        version_defs(&lib),
        version_defs(Path::new(common::DEBIAN_LIB))
    );
    assert_eq!(
        version_defs(&lib),
        ["IBUMAD_1.0", "IBUMAD_1.1", "IBUMAD_1.2"]
    );
    assert_eq!(
        version_defs_with_parents(Path::new(common::DEBIAN_LIB)),
        [
            "IBUMAD_1.0",
            "IBUMAD_1.1 IBUMAD_1.0",
            "IBUMAD_1.2 IBUMAD_1.1"
        ],
        "Debian's (GNU ld) records the parents"
    );
    assert_eq!(
        version_defs_with_parents(&lib),
        ["IBUMAD_1.0", "IBUMAD_1.1", "IBUMAD_1.2"],
        "lld does not: if this changes, the known difference is gone"
    );
    let o = Command::new("readelf")
        .arg("-d")
        .arg(&lib)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.lines()
            .any(|l| l.contains("(SONAME)") && l.contains("[libibumad.so.3]")),
        "{text}"
    );
}

//! A [`Topology`] written as ibnetdiscover writes its default output (infiniband-diags
//! `ibnetdiscover.c`, `dump_topology` without grouping), so that tools and scripts that read
//! ibnetdiscover files (ibsim, our own parser, diff scripts) read ours.
//!
//! The layout, byte for byte: the header (`# Topology file: generated on <ctime>` and
//! `# Initiated from node <guid> port <guid>`), then every switch, then every CA, then every
//! router, each kind in the reverse of the order the walk finds them in (libibnetdisc
//! prepends to its lists) when answers come back in the order asked, as ibsim returns them
//! (the order [`Topology::nodes`] keeps, whatever order they really came back in).
//! A node is a blank line, `vendid=`, `devid=`, `sysimgguid=` (when not 0), `switchguid=G(P)`
//! or `caguid=`/`rtguid=`, the header line (`Switch\tN "S-<guid>"\t\t# "<desc>" base|enhanced
//! port 0 lid L lmc M`, or `Ca\tN "H-<guid>"\t\t# "<desc>"`), and one line per linked port
//! with the remote end, its description and LID, and the active width and speed (`4xHDR`).
//! Descriptions are cleaned as ibnetdiscover does (printable ASCII, all 64 bytes at most).
//!
//! Only the date differs from the real tool's: ours is UTC (ctime's format, not its zone).

use std::io::Write;
use std::time::{SystemTime, UNIX_EPOCH};

use mad::wire::attr::node_info::NodeType;

use super::topology::{Node, NodeIndex, Port, Topology};

/// `ibnetdiscover.c` `dump_linkwidth_compat`.
pub fn width_name(width: u8) -> &'static str {
    match width {
        1 => "1x",
        2 => "4x",
        4 => "8x",
        8 => "12x",
        16 => "2x",
        _ => "??",
    }
}

/// `dump_linkspeed_compat`.
fn speed_name(speed: u8) -> &'static str {
    match speed {
        1 => "SDR",
        2 => "DDR",
        4 => "QDR",
        _ => "???",
    }
}

/// The speed word ibnetdiscover prints for LinkSpeedActive `speed`, the extended speed
/// active `ext` as libibnetdisc aggregates it (0 when the port does not announce extended
/// speeds, 32 for XDR: [`super::topology::agg_link_speed_ext_active`]) and FDR10
/// (`dump_linkspeedext_compat` when the speed is QDR or an extended speed is active).
pub fn speed_word(speed: u8, ext: u8, fdr10: bool) -> &'static str {
    if speed != 4 && ext == 0 {
        return speed_name(speed);
    }
    match ext {
        0 if fdr10 => "FDR10",
        0 => speed_name(speed),
        1 => "FDR",
        2 => "EDR",
        4 => "HDR",
        8 => "NDR",
        // 16 is not used.
        32 => "XDR",
        _ => "???",
    }
}

/// `"S-<guid>"`, `"H-<guid>"` or `"R-<guid>"`, quotes included: how ibnetdiscover names a
/// node.
pub fn node_name(n: &Node) -> String {
    let letter = match n.kind {
        NodeType::Switch => 'S',
        NodeType::Ca => 'H',
        NodeType::Router => 'R',
        NodeType::Unknown(_) => '?',
    };
    format!("\"{letter}-{:016x}\"", n.guid)
}

/// The rate token of a port: width and speed as ibnetdiscover prints them; `??`/`???` for
/// what was not read. `cap_ok` is false for a switch port whose port 0 was never read
/// (ibnetdiscover then prints no speed).
fn rate_token(node: &Node, port: &Port) -> String {
    let (width, speed) = port
        .info
        .as_ref()
        .map_or((0, 0), |i| (i.link_width_active, i.link_speed_active));
    let switch_without_port0 = node.is_switch() && node.port(0).is_none_or(|p0| p0.info.is_none());
    let (speed, ext) = if switch_without_port0 {
        (0, 0)
    } else {
        let ext = port
            .active_rate(node.capability_masks_for(port.num))
            .map_or(0, |(_, _, e)| e);
        (speed, ext)
    };
    format!(
        "{}{}",
        width_name(width),
        speed_word(speed, ext, port.fdr10_active)
    )
}

/// ctime's `Www Mmm dd hh:mm:ss yyyy` for `t`, in UTC.
pub fn ctime_utc(t: SystemTime) -> String {
    const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let secs = t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let days = secs / 86_400;
    let rem = secs % 86_400;
    let (y, m, d) = civil_from_days(days as i64);
    format!(
        "{} {} {:2} {:02}:{:02}:{:02} {y}",
        DAYS[(days % 7) as usize],
        MONTHS[(m - 1) as usize],
        d,
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Year, month (1-12) and day (1-31) of a day count since 1970-01-01 (H. Hinnant's
/// `civil_from_days`).
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// Nodes of `kind`, newest first.
fn newest_first(t: &Topology, kind: NodeType) -> impl Iterator<Item = NodeIndex> + '_ {
    (0..t.nodes.len())
        .rev()
        .filter(move |&i| t.nodes[i].kind == kind)
}

/// Write `t` as ibnetdiscover's default output, dated `generated_on`.
pub fn write(t: &Topology, generated_on: SystemTime, out: &mut dyn Write) -> std::io::Result<()> {
    writeln!(
        out,
        "#\n# Topology file: generated on {}\n#",
        ctime_utc(generated_on)
    )?;
    if let Some(from) = t.from {
        // The PortGUID of the local NodeInfo, not the local port's as it stands after the
        // walk: another node answering with the local NodeGUID overwrites that
        // (infiniband-diags `ibnetdiscover.c` `dump_topology` prints the PortGUID of
        // `from_node->info`, the first NodeInfo libibnetdisc's `create_node` kept).
        writeln!(
            out,
            "# Initiated from node {:016x} port {:016x}",
            t.nodes[from.node].guid, t.from_port_guid
        )?;
    }
    for i in newest_first(t, NodeType::Switch) {
        write_switch(t, i, out)?;
    }
    for kind in [NodeType::Ca, NodeType::Router] {
        for i in newest_first(t, kind) {
            write_ca(t, i, out)?;
        }
    }
    Ok(())
}

fn write_ids(n: &Node, out: &mut dyn Write) -> std::io::Result<()> {
    write!(
        out,
        "\nvendid={:#x}\ndevid={:#x}\n",
        n.vendor_id, n.device_id
    )?;
    if n.sys_image_guid != 0 {
        writeln!(out, "sysimgguid={:#x}", n.sys_image_guid)?;
    }
    Ok(())
}

fn write_switch(t: &Topology, i: NodeIndex, out: &mut dyn Write) -> std::io::Result<()> {
    let n = &t.nodes[i];
    write_ids(n, out)?;
    let port0_guid = n.port(0).map_or(0, |p| p.guid);
    writeln!(out, "switchguid={:#x}({port0_guid:x})", n.guid)?;
    let enhanced = n.switch.is_some_and(|s| s.enhanced_port0);
    writeln!(
        out,
        "Switch\t{} {}\t\t# \"{}\" {} port 0 lid {} lmc {}",
        n.num_ports,
        node_name(n),
        n.description_text(),
        if enhanced { "enhanced" } else { "base" },
        n.lid_of(0),
        n.lmc_of(0)
    )?;
    for port in n.ports.iter().skip(1) {
        let Some(r) = port.remote else { continue };
        let rn = &t.nodes[r.node];
        write!(out, "[{}]\t{}[{}]", port.num, node_name(rn), r.port)?;
        if !rn.is_switch() {
            write!(out, "({:x}) ", rn.port(r.port).map_or(0, |p| p.guid))?;
        }
        writeln!(
            out,
            "\t\t# \"{}\" lid {} {}",
            rn.description_text(),
            rn.lid_of(r.port),
            rate_token(n, port)
        )?;
    }
    Ok(())
}

fn write_ca(t: &Topology, i: NodeIndex, out: &mut dyn Write) -> std::io::Result<()> {
    let n = &t.nodes[i];
    write_ids(n, out)?;
    let (key, word) = if n.kind == NodeType::Router {
        ("rt", "Rt")
    } else {
        ("ca", "Ca")
    };
    writeln!(out, "{key}guid={:#x}", n.guid)?;
    writeln!(
        out,
        "{word}\t{} {}\t\t# \"{}\"",
        n.num_ports,
        node_name(n),
        n.description_text()
    )?;
    for port in n.ports.iter().skip(1) {
        let Some(r) = port.remote else { continue };
        let rn = &t.nodes[r.node];
        write!(
            out,
            "[{}]({:x}) \t{}[{}]",
            port.num,
            port.guid,
            node_name(rn),
            r.port
        )?;
        if !rn.is_switch() {
            write!(out, " ({:x}) ", rn.port(r.port).map_or(0, |p| p.guid))?;
        }
        writeln!(
            out,
            "\t\t# lid {} lmc {} \"{}\" lid {} {}",
            n.lid_of(port.num),
            n.lmc_of(port.num),
            rn.description_text(),
            rn.lid_of(r.port),
            rate_token(n, port)
        )?;
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn dates_read_like_ctime() {
        // 2026-11-29 23:31:21 UTC, a Sunday (the date of the captures in sim/tests).
        let t = UNIX_EPOCH + std::time::Duration::from_secs(1_795_995_081);
        assert_eq!(ctime_utc(t), "Sun Nov 29 23:31:21 2026");
        assert_eq!(ctime_utc(UNIX_EPOCH), "Thu Jan  1 00:00:00 1970");
        // A leap day.
        let t = UNIX_EPOCH + std::time::Duration::from_secs(951_782_400);
        assert_eq!(ctime_utc(t), "Tue Feb 29 00:00:00 2000");
    }

    #[test]
    fn speed_words_follow_ibnetdiscover() {
        // ibnetdiscover.c: classic speeds unless QDR or an extended speed is active.
        assert_eq!(speed_word(1, 0, false), "SDR");
        assert_eq!(speed_word(2, 0, true), "DDR");
        assert_eq!(speed_word(4, 0, false), "QDR");
        assert_eq!(speed_word(4, 0, true), "FDR10");
        assert_eq!(speed_word(4, 1, false), "FDR");
        assert_eq!(speed_word(4, 2, false), "EDR");
        assert_eq!(speed_word(1, 4, false), "HDR");
        assert_eq!(speed_word(4, 8, false), "NDR");
        assert_eq!(speed_word(1, 32, false), "XDR");
        assert_eq!(speed_word(4, 16, false), "???");
        assert_eq!(speed_word(0, 0, false), "???");
        assert_eq!(width_name(2), "4x");
        assert_eq!(width_name(8), "12x");
        assert_eq!(width_name(3), "??");
    }

    /// A node of `kind` whose port 1 is a 4x link up with `ext_active`/`ext_active2`, and
    /// whose CapabilityMask/CapabilityMask2 (port 0's for a switch, port 1's for a CA) are
    /// `mask`/`mask2`.
    pub(crate) fn node_with_ext_speeds(
        kind: NodeType,
        mask: u32,
        mask2: u16,
        ext_active: u8,
        ext_active2: u8,
    ) -> Node {
        use mad::wire::attr::port_info::{PhysPortState, PortInfo, PortInfoRepr};
        let zero = [0u8; 64];
        let blank = PortInfoRepr::parse(&PortInfo::new_checked(&zero[..]).unwrap()).unwrap();
        let caps = PortInfoRepr {
            capability_mask: mask,
            capability_mask2: mask2,
            ..blank
        };
        let mut link = PortInfoRepr {
            port_physical_state: PhysPortState::LinkUp,
            link_width_active: 2,
            // An XDR port's LinkSpeedActive: SDR (extended speeds override it).
            link_speed_active: 1,
            link_speed_ext_active: ext_active,
            link_speed_ext_active2: ext_active2,
            local_port_num: 1,
            ..blank
        };
        let switch = kind == NodeType::Switch;
        if !switch {
            link.capability_mask = mask;
            link.capability_mask2 = mask2;
        }
        let ports = vec![
            Port {
                num: 0,
                info: switch.then_some(caps),
                ..Port::default()
            },
            Port {
                num: 1,
                info: Some(link),
                ..Port::default()
            },
        ];
        Node {
            guid: 1,
            kind,
            num_ports: 1,
            sys_image_guid: 0,
            vendor_id: 0,
            device_id: 0,
            revision: 0,
            description: None,
            path: Vec::new(),
            hops: 0,
            switch: None,
            ports,
        }
    }

    #[test]
    fn xdr_links_read_as_libibnetdisc_aggregates_extended_speeds() {
        use mad::wire::attr::port_info::cap_mask::{HAS_CAP_MASK2, HAS_EXT_SPEEDS};
        // libibnetdisc ibnd_get_agg_linkspeedext: with HasExtSpeeds and HasCapMask2 set and
        // CapabilityMask2 IsExtSpeeds2Supported (0x0800), LinkSpeedExtActive2 << 5 is taken
        // in preference to LinkSpeedExtActive; ibnetdiscover.c dump_linkspeedext_compat
        // prints 32 as "XDR", 8 as "NDR".
        let both = HAS_EXT_SPEEDS | HAS_CAP_MASK2;
        let cases = [
            // (CapabilityMask, CapabilityMask2, ExtActive, ExtActive2, word)
            (both, 0x0800, 0, 1, "4xXDR"),
            (both, 0x0800, 8, 1, "4xXDR"),
            (both, 0x0800, 8, 0, "4xNDR"),
            // No IsExtSpeeds2Supported: LinkSpeedExtActive2 is not looked at.
            (both, 0x0400, 8, 1, "4xNDR"),
            // No HasCapMask2: CapabilityMask2 is not looked at.
            (HAS_EXT_SPEEDS, 0x0800, 8, 1, "4xNDR"),
            // No HasExtSpeeds: neither extended field counts.
            (HAS_CAP_MASK2, 0x0800, 8, 1, "4xSDR"),
            // A LinkSpeedExtActive2 with no name (2 << 5 = 64).
            (both, 0x0800, 0, 2, "4x???"),
        ];
        for kind in [NodeType::Switch, NodeType::Ca] {
            for (mask, mask2, e, e2, want) in cases {
                let n = node_with_ext_speeds(kind, mask, mask2, e, e2);
                assert_eq!(
                    rate_token(&n, &n.ports[1]),
                    want,
                    "{kind:?} mask {mask:#x} mask2 {mask2:#x} ext {e} ext2 {e2}"
                );
            }
        }
    }
}

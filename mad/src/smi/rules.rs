//! The directed-route rules of the subnet management interface (IBA vol 1 §14.2.2, C14-6,
//! C14-9 and C14-13), as the kernel's `core/smi.c` applies them (reference/mad-stack.md §2.8):
//! what a node does with a directed-route SMP it sends or receives, and where it goes next.
//!
//! Notation: `hp` HopPointer, `hc` HopCount, D the direction bit (0 outbound, 1 returning).
//! Every function here reads `hp` and `hc` from the SMP (untrusted: they come from the wire or
//! a client) and indexes the 64-entry paths only through checked accessors, so no value of
//! them can index out of bounds.
//!
//! The functions take `is_switch` so that every row of the rules is written down and tested;
//! the MAD layer of a channel adapter always passes `false`.

use mad_wire::PERMISSIVE_LID;
use mad_wire::smp::{Direction, PATH_LEN, Smp};

/// Largest valid HopCount + 1: `hc` of 64 or more is discarded (C14-6; the kernel's
/// `IB_SMP_MAX_PATH_HOPS`).
pub const MAX_PATH_HOPS: u8 = PATH_LEN as u8;

/// Why the SMI discards a directed-route SMP.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SmiDiscard {
    /// HopCount is 64 or more (C14-6).
    HopCount,
    /// The hop pointer fits no rule for its direction and hop count (C14-9:5, C14-13:5), or
    /// an outbound SMP arrived with `hp == 0` although its sender must have moved it (C14-9:1).
    HopPointer,
    /// Only a switch may pass an SMP on in the middle of its directed route (C14-9:2,
    /// C14-13:2).
    NotASwitch,
    /// The directed route ends in a LID-routed part (DrDLID, or DrSLID when returning, is not
    /// the permissive LID), which only a switch may start (C14-9:3, C14-13:3).
    LidRoutedPart,
    /// InitialPath (outbound) or ReturnPath (returning) names another egress port than the one
    /// the SMP is sent from (C14-9:1-2, C14-13:1-2).
    WrongEgress,
    /// A returning SMP entered by another port than ReturnPath names (C14-13:1).
    WrongIngress,
    /// The path names a port the switch does not have (C14-9:2, C14-13:2, receive side).
    NoSuchPort,
    /// A received SMP that the rules would send on, but that is not then destined to this
    /// node's SMA (the kernel's `smi_check_local_smp` after `IB_SMI_SEND`).
    NotLocal,
}

impl SmiDiscard {
    /// Every reason, in the order of [`SmiDiscard::index`].
    pub const ALL: [SmiDiscard; 8] = [
        SmiDiscard::HopCount,
        SmiDiscard::HopPointer,
        SmiDiscard::NotASwitch,
        SmiDiscard::LidRoutedPart,
        SmiDiscard::WrongEgress,
        SmiDiscard::WrongIngress,
        SmiDiscard::NoSuchPort,
        SmiDiscard::NotLocal,
    ];

    /// Position in [`SmiDiscard::ALL`] (for counters).
    pub const fn index(self) -> usize {
        self as usize
    }
}

impl std::fmt::Display for SmiDiscard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            SmiDiscard::HopCount => "HopCount above 63 (C14-6)",
            SmiDiscard::HopPointer => "the hop pointer fits no rule (C14-9, C14-13)",
            SmiDiscard::NotASwitch => "only a switch forwards a directed-route SMP mid-path",
            SmiDiscard::LidRoutedPart => {
                "the route continues LID-routed (DrDLID/DrSLID not permissive), which only a switch may start"
            }
            SmiDiscard::WrongEgress => "the path names another egress port than the sending port",
            SmiDiscard::WrongIngress => "ReturnPath names another port than the one it entered by",
            SmiDiscard::NoSuchPort => "the path names a port the node does not have",
            SmiDiscard::NotLocal => "a received SMP that is not for this node",
        })
    }
}

/// Where a received directed-route SMP goes after the receive rules (`smi_check_forward_dr_smp`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Forward {
    /// Up the stack: to this node's SMA or SM (`IB_SMI_LOCAL`).
    Local,
    /// Through this node's send rules (`IB_SMI_SEND`): the end of the directed part, where
    /// the SMP either goes to this node's SMA (`hp` becomes `hc + 1`) or continues LID-routed.
    Send,
    /// Out of another port of this switch (`IB_SMI_FORWARD`).
    Forward,
}

fn view(buf: &mut [u8]) -> Smp<&mut [u8]> {
    // Callers pass whole MAD buffers; a short one fails here as a hop-count discard instead
    // of panicking (see `checked`).
    Smp::new_checked(buf).expect("checked by the caller")
}

fn checked(buf: &[u8]) -> Result<(), SmiDiscard> {
    if buf.len() < mad_wire::MAD_LEN {
        return Err(SmiDiscard::HopCount);
    }
    Ok(())
}

fn initial(smp: &Smp<&mut [u8]>, hop: u8) -> Option<u8> {
    smp.initial_path_hop(usize::from(hop)).ok()
}

fn ret(smp: &Smp<&mut [u8]>, hop: u8) -> Option<u8> {
    smp.return_path_hop(usize::from(hop)).ok()
}

/// The send rules (`smi_handle_dr_smp_send`) for an SMP leaving by `port_num`: moves the hop
/// pointer as C14-9 (outbound) and C14-13 (returning) say, and checks the path names the
/// port it leaves by.
pub fn send(buf: &mut [u8], is_switch: bool, port_num: u8) -> Result<(), SmiDiscard> {
    checked(buf)?;
    let mut smp = view(buf);
    let (hp, hc) = (smp.hop_pointer(), smp.hop_count());
    if hc >= MAX_PATH_HOPS {
        return Err(SmiDiscard::HopCount);
    }
    match smp.direction() {
        Direction::Outbound => {
            // C14-9:1: the originator.
            if hc != 0 && hp == 0 {
                smp.set_hop_pointer(1);
                return egress(initial(&smp, 1), port_num);
            }
            // C14-9:2: an intermediate hop.
            if hp != 0 && hp < hc {
                if !is_switch {
                    return Err(SmiDiscard::NotASwitch);
                }
                smp.set_hop_pointer(hp + 1);
                return egress(initial(&smp, hp + 1), port_num);
            }
            // C14-9:3: the end of the directed part.
            if hp == hc {
                smp.set_hop_pointer(hp + 1);
                return if is_switch || smp.dr_dlid() == PERMISSIVE_LID {
                    Ok(())
                } else {
                    Err(SmiDiscard::LidRoutedPart)
                };
            }
            // C14-9:4 (to the SMA or SM), else C14-9:5.
            if hp == hc + 1 {
                Ok(())
            } else {
                Err(SmiDiscard::HopPointer)
            }
        }
        Direction::Returning => {
            // C14-13:1: the responder.
            if hc != 0 && hp == hc + 1 {
                smp.set_hop_pointer(hp - 1);
                return egress(ret(&smp, hp - 1), port_num);
            }
            // C14-13:2: an intermediate hop.
            if 2 <= hp && hp <= hc {
                if !is_switch {
                    return Err(SmiDiscard::NotASwitch);
                }
                smp.set_hop_pointer(hp - 1);
                return egress(ret(&smp, hp - 1), port_num);
            }
            // C14-13:3: the end of the directed part.
            if hp == 1 {
                smp.set_hop_pointer(0);
                return if is_switch || smp.dr_slid() == PERMISSIVE_LID {
                    Ok(())
                } else {
                    Err(SmiDiscard::LidRoutedPart)
                };
            }
            // C14-13:4 (should have gone to the SM), else C14-13:5.
            if hp == 0 {
                Ok(())
            } else {
                Err(SmiDiscard::HopPointer)
            }
        }
    }
}

fn egress(path_port: Option<u8>, port_num: u8) -> Result<(), SmiDiscard> {
    if path_port == Some(port_num) {
        Ok(())
    } else {
        Err(SmiDiscard::WrongEgress)
    }
}

/// The receive rules (`smi_handle_dr_smp_recv`) for an SMP that entered by `port_num` of a
/// node with `phys_ports` ports: records the ingress port in ReturnPath on the way out, moves
/// the hop pointer where C14-13 says, and checks the path.
pub fn receive(
    buf: &mut [u8],
    is_switch: bool,
    port_num: u8,
    phys_ports: u8,
) -> Result<(), SmiDiscard> {
    checked(buf)?;
    let mut smp = view(buf);
    let (hp, hc) = (smp.hop_pointer(), smp.hop_count());
    if hc >= MAX_PATH_HOPS {
        return Err(SmiDiscard::HopCount);
    }
    let exists = |p: Option<u8>| match p {
        Some(p) if p <= phys_ports => Ok(()),
        _ => Err(SmiDiscard::NoSuchPort),
    };
    match smp.direction() {
        Direction::Outbound => {
            // C14-9:1: the sender should have moved the hop pointer.
            if hc != 0 && hp == 0 {
                return Err(SmiDiscard::HopPointer);
            }
            // C14-9:2: an intermediate hop.
            if hp != 0 && hp < hc {
                if !is_switch {
                    return Err(SmiDiscard::NotASwitch);
                }
                // hp < hc <= 63: inside the path.
                let _ = smp.set_return_path_hop(usize::from(hp), port_num);
                return exists(initial(&smp, hp + 1));
            }
            // C14-9:3: the end of the directed part.
            if hp == hc {
                if hc != 0 {
                    let _ = smp.set_return_path_hop(usize::from(hp), port_num);
                }
                return if is_switch || smp.dr_dlid() == PERMISSIVE_LID {
                    Ok(())
                } else {
                    Err(SmiDiscard::LidRoutedPart)
                };
            }
            // C14-9:4, else C14-9:5.
            if hp == hc + 1 {
                Ok(())
            } else {
                Err(SmiDiscard::HopPointer)
            }
        }
        Direction::Returning => {
            // C14-13:1.
            if hc != 0 && hp == hc + 1 {
                smp.set_hop_pointer(hp - 1);
                return if ret(&smp, hp - 1) == Some(port_num) {
                    Ok(())
                } else {
                    Err(SmiDiscard::WrongIngress)
                };
            }
            // C14-13:2: an intermediate hop.
            if 2 <= hp && hp <= hc {
                if !is_switch {
                    return Err(SmiDiscard::NotASwitch);
                }
                return exists(ret(&smp, hp - 1));
            }
            // C14-13:3: the end of the directed part.
            if hp == 1 {
                if smp.dr_slid() == PERMISSIVE_LID {
                    smp.set_hop_pointer(0);
                    return Ok(());
                }
                return if is_switch {
                    Ok(())
                } else {
                    Err(SmiDiscard::LidRoutedPart)
                };
            }
            // C14-13:4, else C14-13:5.
            if hp == 0 {
                Ok(())
            } else {
                Err(SmiDiscard::HopPointer)
            }
        }
    }
}

/// Where a received SMP that passed [`receive`] goes (`smi_check_forward_dr_smp`).
pub fn forward(buf: &[u8]) -> Forward {
    let Ok(smp) = Smp::new_checked(buf) else {
        return Forward::Local;
    };
    let (hp, hc) = (smp.hop_pointer(), smp.hop_count());
    match smp.direction() {
        Direction::Outbound => {
            if hp != 0 && hp < hc {
                return Forward::Forward;
            }
            if hp == hc {
                return if smp.dr_dlid() == PERMISSIVE_LID {
                    Forward::Send
                } else {
                    Forward::Local
                };
            }
            if u16::from(hp) == u16::from(hc) + 1 {
                return Forward::Send;
            }
            Forward::Local
        }
        Direction::Returning => {
            if 2 <= hp && hp <= hc {
                return Forward::Forward;
            }
            if hp == 1 {
                return if smp.dr_slid() == PERMISSIVE_LID {
                    Forward::Local
                } else {
                    Forward::Send
                };
            }
            Forward::Local
        }
    }
}

/// The port a switch forwards the SMP out of (`smi_get_fwd_port`): InitialPath\[hp + 1\]
/// outbound, ReturnPath\[hp - 1\] returning; `None` when the hop pointer points outside the
/// path.
pub fn forward_port(buf: &[u8]) -> Option<u8> {
    let smp = Smp::new_checked(buf).ok()?;
    let hp = usize::from(smp.hop_pointer());
    match smp.direction() {
        Direction::Outbound => smp.initial_path_hop(hp + 1).ok(),
        Direction::Returning => smp.return_path_hop(hp.checked_sub(1)?).ok(),
    }
}

/// Whether an outbound SMP is at its destination: `hp == hc + 1`, for this node's SMA or SM
/// (`smi_check_local_smp`).
pub fn is_local(buf: &[u8]) -> bool {
    Smp::new_checked(buf).is_ok_and(|s| {
        s.direction() == Direction::Outbound
            && u16::from(s.hop_pointer()) == u16::from(s.hop_count()) + 1
    })
}

/// Whether a returning SMP has reached its requester: `hp == 0`, for this node's SM
/// (`smi_check_local_returning_smp`).
pub fn is_local_returning(buf: &[u8]) -> bool {
    Smp::new_checked(buf)
        .is_ok_and(|s| s.direction() == Direction::Returning && s.hop_pointer() == 0)
}

/// What a node's MAD layer does with a directed-route SMP one of its agents sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outgoing {
    /// Put it on the wire (the hop pointer has been moved as the send rules say).
    Wire,
    /// Hand it to this node's own SMA or SM (`process_mad`) instead of the wire.
    Local,
}

/// The kernel's `handle_outgoing_dr_smp` for an SMP sent from `port_num`: the send rules run
/// when the first LID-routed part (DrSLID outbound, DrDLID returning) is empty, and a discard
/// fails the send; then an SMP for this node (outbound `hp == hc + 1`, or returning `hp == 0`)
/// is processed locally.
pub fn outgoing(buf: &mut [u8], is_switch: bool, port_num: u8) -> Result<Outgoing, SmiDiscard> {
    checked(buf)?;
    let smp = view(buf);
    let first_lid = match smp.direction() {
        Direction::Outbound => smp.dr_slid(),
        Direction::Returning => smp.dr_dlid(),
    };
    if first_lid == PERMISSIVE_LID {
        send(buf, is_switch, port_num)?;
    }
    if is_local(buf) || is_local_returning(buf) {
        Ok(Outgoing::Local)
    } else {
        Ok(Outgoing::Wire)
    }
}

/// The kernel's `handle_ib_smi` on a channel adapter: the receive rules, then the forwarding
/// decision; an SMP at the end of its directed part passes the send rules and must then be
/// for this node. `Ok` means the SMP goes up the stack (with its hop pointer and ReturnPath
/// updated), as the kernel's `IB_SMI_HANDLE`. A switch's forwarding is not done here.
pub fn incoming(
    buf: &mut [u8],
    is_switch: bool,
    port_num: u8,
    phys_ports: u8,
) -> Result<(), SmiDiscard> {
    receive(buf, is_switch, port_num, phys_ports)?;
    match forward(buf) {
        Forward::Local | Forward::Forward => Ok(()),
        Forward::Send => {
            send(buf, is_switch, port_num)?;
            if is_local(buf) {
                Ok(())
            } else {
                Err(SmiDiscard::NotLocal)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    //! One row per line of the tables in reference/mad-stack.md §2.8 (IBA C14-6, C14-9,
    //! C14-13; kernel `core/smi.c`), for a switch and for a channel adapter. The expected
    //! hop pointers and paths are written out from the tables, not computed.

    use super::*;
    use mad_wire::smp::{DirectedRoute, SmpRepr, SmpRoute};

    const PERM: u16 = PERMISSIVE_LID;
    const OUT: Direction = Direction::Outbound;
    const RET: Direction = Direction::Returning;

    /// A directed-route Get with the given fields; InitialPath[i] = 10 + i and
    /// ReturnPath[i] = 20 + i unless `set` overrides entries (path, index, port).
    fn smp(
        d: Direction,
        hp: u8,
        hc: u8,
        slid: u16,
        dlid: u16,
        set: &[(char, usize, u8)],
    ) -> [u8; 256] {
        let mut route = DirectedRoute::from_path(&[]).unwrap();
        route.direction = d;
        route.hop_pointer = hp;
        route.hop_count = hc;
        route.dr_slid = slid;
        route.dr_dlid = dlid;
        for i in 0..64 {
            route.initial_path[i] = 10 + i as u8;
            route.return_path[i] = 20 + i as u8;
        }
        for &(which, i, v) in set {
            match which {
                'i' => route.initial_path[i] = v,
                _ => route.return_path[i] = v,
            }
        }
        let repr = SmpRepr::request(0x01, SmpRoute::Directed(route), 0x11, 0, 7);
        let mut b = [0u8; 256];
        repr.emit(&mut Smp::new_checked(&mut b[..]).unwrap());
        b
    }

    fn hp(b: &[u8; 256]) -> u8 {
        b[6]
    }

    fn rp(b: &[u8; 256], i: usize) -> u8 {
        b[192 + i]
    }

    struct Row {
        rule: &'static str,
        b: [u8; 256],
        switch: bool,
        port: u8,
        want: Result<(), SmiDiscard>,
        hp_after: u8,
    }

    fn row(
        rule: &'static str,
        b: [u8; 256],
        switch: bool,
        port: u8,
        want: Result<(), SmiDiscard>,
        hp_after: u8,
    ) -> Row {
        Row {
            rule,
            b,
            switch,
            port,
            want,
            hp_after,
        }
    }

    #[test]
    fn send_rules_every_row() {
        use SmiDiscard::*;
        let rows = [
            // C14-6.
            row(
                "hc 64",
                smp(OUT, 0, 64, PERM, PERM, &[]),
                true,
                1,
                Err(HopCount),
                0,
            ),
            row(
                "hc 64 ret",
                smp(RET, 0, 64, PERM, PERM, &[]),
                false,
                1,
                Err(HopCount),
                0,
            ),
            // C14-9:1: hp 0 -> 1, InitialPath[1] must be the egress port.
            row(
                "9:1 ok",
                smp(OUT, 0, 3, PERM, PERM, &[('i', 1, 1)]),
                false,
                1,
                Ok(()),
                1,
            ),
            row(
                "9:1 wrong port",
                smp(OUT, 0, 3, PERM, PERM, &[('i', 1, 2)]),
                false,
                1,
                Err(WrongEgress),
                1,
            ),
            // C14-9:2: switches only; hp++; InitialPath[hp] is the egress port.
            row(
                "9:2 switch",
                smp(OUT, 1, 3, PERM, PERM, &[('i', 2, 5)]),
                true,
                5,
                Ok(()),
                2,
            ),
            row(
                "9:2 switch wrong port",
                smp(OUT, 1, 3, PERM, PERM, &[('i', 2, 5)]),
                true,
                4,
                Err(WrongEgress),
                2,
            ),
            row(
                "9:2 CA",
                smp(OUT, 1, 3, PERM, PERM, &[]),
                false,
                1,
                Err(NotASwitch),
                1,
            ),
            // C14-9:3: hp++; a switch, or a permissive DrDLID.
            row(
                "9:3 switch",
                smp(OUT, 3, 3, PERM, 9, &[]),
                true,
                1,
                Ok(()),
                4,
            ),
            row(
                "9:3 CA permissive",
                smp(OUT, 3, 3, PERM, PERM, &[]),
                false,
                1,
                Ok(()),
                4,
            ),
            row(
                "9:3 CA LID-routed",
                smp(OUT, 3, 3, PERM, 9, &[]),
                false,
                1,
                Err(LidRoutedPart),
                4,
            ),
            row(
                "9:3 0-hop",
                smp(OUT, 0, 0, PERM, PERM, &[]),
                false,
                1,
                Ok(()),
                1,
            ),
            // C14-9:4: hp == hc + 1 is for this node.
            row("9:4", smp(OUT, 4, 3, PERM, PERM, &[]), false, 1, Ok(()), 4),
            // C14-9:5.
            row(
                "9:5",
                smp(OUT, 5, 3, PERM, PERM, &[]),
                true,
                1,
                Err(HopPointer),
                5,
            ),
            // C14-13:1: hp--; ReturnPath[hp] is the egress port.
            row(
                "13:1 ok",
                smp(RET, 4, 3, PERM, PERM, &[('r', 3, 1)]),
                false,
                1,
                Ok(()),
                3,
            ),
            row(
                "13:1 wrong port",
                smp(RET, 4, 3, PERM, PERM, &[('r', 3, 2)]),
                false,
                1,
                Err(WrongEgress),
                3,
            ),
            // C14-13:2: switches only; hp--; ReturnPath[hp] is the egress port.
            row(
                "13:2 switch",
                smp(RET, 3, 3, PERM, PERM, &[('r', 2, 6)]),
                true,
                6,
                Ok(()),
                2,
            ),
            row(
                "13:2 switch wrong port",
                smp(RET, 2, 3, PERM, PERM, &[('r', 1, 6)]),
                true,
                7,
                Err(WrongEgress),
                1,
            ),
            row(
                "13:2 CA",
                smp(RET, 2, 3, PERM, PERM, &[]),
                false,
                1,
                Err(NotASwitch),
                2,
            ),
            // C14-13:3: hp 1 -> 0; a switch, or a permissive DrSLID.
            row(
                "13:3 switch",
                smp(RET, 1, 3, 9, PERM, &[]),
                true,
                1,
                Ok(()),
                0,
            ),
            row(
                "13:3 CA permissive",
                smp(RET, 1, 3, PERM, PERM, &[]),
                false,
                1,
                Ok(()),
                0,
            ),
            row(
                "13:3 CA LID-routed",
                smp(RET, 1, 3, 9, PERM, &[]),
                false,
                1,
                Err(LidRoutedPart),
                0,
            ),
            row(
                "13:3 0-hop reply",
                smp(RET, 1, 0, PERM, PERM, &[]),
                false,
                1,
                Ok(()),
                0,
            ),
            // C14-13:4.
            row("13:4", smp(RET, 0, 3, PERM, PERM, &[]), false, 1, Ok(()), 0),
            // C14-13:5.
            row(
                "13:5",
                smp(RET, 5, 3, PERM, PERM, &[]),
                true,
                1,
                Err(HopPointer),
                5,
            ),
            row(
                "13:5 0-hop",
                smp(RET, 2, 0, PERM, PERM, &[]),
                true,
                1,
                Err(HopPointer),
                2,
            ),
        ];
        for mut r in rows {
            let got = send(&mut r.b, r.switch, r.port);
            assert_eq!(got, r.want, "{}", r.rule);
            assert_eq!(hp(&r.b), r.hp_after, "{}: hop pointer", r.rule);
        }
    }

    #[test]
    fn receive_rules_every_row() {
        use SmiDiscard::*;
        // (row, expected ReturnPath entry (index, value) afterwards)
        let rows = [
            (
                row(
                    "hc 64",
                    smp(OUT, 1, 64, PERM, PERM, &[]),
                    true,
                    1,
                    Err(HopCount),
                    1,
                ),
                None,
            ),
            // C14-9:1: the sender should have moved hp.
            (
                row(
                    "9:1",
                    smp(OUT, 0, 2, PERM, PERM, &[]),
                    true,
                    1,
                    Err(HopPointer),
                    0,
                ),
                None,
            ),
            // C14-9:2: switches record the ingress port; InitialPath[hp+1] must exist.
            (
                row(
                    "9:2 switch",
                    smp(OUT, 1, 3, PERM, PERM, &[('i', 2, 8)]),
                    true,
                    5,
                    Ok(()),
                    1,
                ),
                Some((1, 5)),
            ),
            (
                row(
                    "9:2 no such port",
                    smp(OUT, 1, 3, PERM, PERM, &[('i', 2, 9)]),
                    true,
                    5,
                    Err(NoSuchPort),
                    1,
                ),
                Some((1, 5)),
            ),
            (
                row(
                    "9:2 CA",
                    smp(OUT, 1, 3, PERM, PERM, &[]),
                    false,
                    1,
                    Err(NotASwitch),
                    1,
                ),
                Some((1, 21)),
            ),
            // C14-9:3: record ReturnPath[hc] (hc != 0); a switch, or a permissive DrDLID.
            (
                row(
                    "9:3 switch",
                    smp(OUT, 2, 2, PERM, 9, &[]),
                    true,
                    3,
                    Ok(()),
                    2,
                ),
                Some((2, 3)),
            ),
            (
                row(
                    "9:3 CA",
                    smp(OUT, 2, 2, PERM, PERM, &[]),
                    false,
                    1,
                    Ok(()),
                    2,
                ),
                Some((2, 1)),
            ),
            (
                row(
                    "9:3 CA LID-routed",
                    smp(OUT, 2, 2, PERM, 9, &[]),
                    false,
                    1,
                    Err(LidRoutedPart),
                    2,
                ),
                Some((2, 1)),
            ),
            (
                row(
                    "9:3 0-hop records nothing",
                    smp(OUT, 0, 0, PERM, PERM, &[]),
                    false,
                    1,
                    Ok(()),
                    0,
                ),
                Some((0, 20)),
            ),
            // C14-9:4.
            (
                row("9:4", smp(OUT, 3, 2, PERM, PERM, &[]), false, 1, Ok(()), 3),
                None,
            ),
            // C14-9:5.
            (
                row(
                    "9:5",
                    smp(OUT, 4, 2, PERM, PERM, &[]),
                    false,
                    1,
                    Err(HopPointer),
                    4,
                ),
                None,
            ),
            // C14-13:1: hp--; ReturnPath[hp] must be the ingress port.
            (
                row(
                    "13:1 ok",
                    smp(RET, 3, 2, PERM, PERM, &[('r', 2, 4)]),
                    true,
                    4,
                    Ok(()),
                    2,
                ),
                None,
            ),
            (
                row(
                    "13:1 wrong port",
                    smp(RET, 3, 2, PERM, PERM, &[('r', 2, 4)]),
                    true,
                    5,
                    Err(WrongIngress),
                    2,
                ),
                None,
            ),
            // C14-13:2: switches; ReturnPath[hp-1] must exist; hp moves when sending.
            (
                row(
                    "13:2 switch",
                    smp(RET, 2, 3, PERM, PERM, &[('r', 1, 8)]),
                    true,
                    1,
                    Ok(()),
                    2,
                ),
                None,
            ),
            (
                row(
                    "13:2 no such port",
                    smp(RET, 2, 3, PERM, PERM, &[('r', 1, 9)]),
                    true,
                    1,
                    Err(NoSuchPort),
                    2,
                ),
                None,
            ),
            (
                row(
                    "13:2 CA",
                    smp(RET, 2, 3, PERM, PERM, &[]),
                    false,
                    1,
                    Err(NotASwitch),
                    2,
                ),
                None,
            ),
            // C14-13:3: a permissive DrSLID goes to the SM (hp 0); otherwise switches only.
            (
                row(
                    "13:3 to SM",
                    smp(RET, 1, 3, PERM, PERM, &[]),
                    false,
                    1,
                    Ok(()),
                    0,
                ),
                None,
            ),
            (
                row(
                    "13:3 switch LID-routed",
                    smp(RET, 1, 3, 9, PERM, &[]),
                    true,
                    1,
                    Ok(()),
                    1,
                ),
                None,
            ),
            (
                row(
                    "13:3 CA LID-routed",
                    smp(RET, 1, 3, 9, PERM, &[]),
                    false,
                    1,
                    Err(LidRoutedPart),
                    1,
                ),
                None,
            ),
            // C14-13:4.
            (
                row("13:4", smp(RET, 0, 3, PERM, PERM, &[]), false, 1, Ok(()), 0),
                None,
            ),
            // C14-13:5.
            (
                row(
                    "13:5",
                    smp(RET, 5, 3, PERM, PERM, &[]),
                    false,
                    1,
                    Err(HopPointer),
                    5,
                ),
                None,
            ),
        ];
        for (mut r, path) in rows {
            let got = receive(&mut r.b, r.switch, r.port, 8);
            assert_eq!(got, r.want, "{}", r.rule);
            assert_eq!(hp(&r.b), r.hp_after, "{}: hop pointer", r.rule);
            if let Some((i, v)) = path {
                assert_eq!(rp(&r.b, i), v, "{}: ReturnPath[{i}]", r.rule);
            }
        }
    }

    #[test]
    fn forward_decision_every_row() {
        let rows = [
            (
                "9:2 intermediate",
                smp(OUT, 1, 3, PERM, PERM, &[]),
                Forward::Forward,
            ),
            (
                "9:3 permissive",
                smp(OUT, 3, 3, PERM, PERM, &[]),
                Forward::Send,
            ),
            (
                "9:3 LID-routed",
                smp(OUT, 3, 3, PERM, 9, &[]),
                Forward::Local,
            ),
            ("9:4", smp(OUT, 4, 3, PERM, PERM, &[]), Forward::Send),
            (
                "outbound other",
                smp(OUT, 6, 3, PERM, PERM, &[]),
                Forward::Local,
            ),
            (
                "13:2 intermediate",
                smp(RET, 2, 3, PERM, PERM, &[]),
                Forward::Forward,
            ),
            (
                "13:3 permissive",
                smp(RET, 1, 3, PERM, PERM, &[]),
                Forward::Local,
            ),
            (
                "13:3 LID-routed",
                smp(RET, 1, 3, 9, PERM, &[]),
                Forward::Send,
            ),
            ("13:4", smp(RET, 0, 3, PERM, PERM, &[]), Forward::Local),
        ];
        for (rule, b, want) in rows {
            assert_eq!(forward(&b), want, "{rule}");
        }
        // The port a switch forwards out of.
        assert_eq!(
            forward_port(&smp(OUT, 1, 3, PERM, PERM, &[('i', 2, 7)])),
            Some(7)
        );
        assert_eq!(
            forward_port(&smp(RET, 2, 3, PERM, PERM, &[('r', 1, 6)])),
            Some(6)
        );
        assert_eq!(forward_port(&smp(RET, 0, 3, PERM, PERM, &[])), None);
        assert_eq!(
            forward_port(&smp(OUT, 63, 63, PERM, PERM, &[])),
            None,
            "past the path"
        );
    }

    #[test]
    fn local_checks() {
        assert!(is_local(&smp(OUT, 1, 0, PERM, PERM, &[])));
        assert!(is_local(&smp(OUT, 4, 3, PERM, PERM, &[])));
        assert!(!is_local(&smp(OUT, 3, 3, PERM, PERM, &[])));
        assert!(!is_local(&smp(RET, 4, 3, PERM, PERM, &[])));
        assert!(is_local_returning(&smp(RET, 0, 3, PERM, PERM, &[])));
        assert!(!is_local_returning(&smp(OUT, 0, 0, PERM, PERM, &[])));
        assert!(!is_local_returning(&smp(RET, 1, 3, PERM, PERM, &[])));
    }

    #[test]
    fn outgoing_as_handle_outgoing_dr_smp() {
        // A 0-hop request goes to the local SMA with hp 1.
        let mut b = smp(OUT, 0, 0, PERM, PERM, &[]);
        assert_eq!(outgoing(&mut b, false, 1), Ok(Outgoing::Local));
        assert_eq!(hp(&b), 1);
        // A 2-hop request from port 1 leaves with hp 1.
        let mut b = smp(OUT, 0, 2, PERM, PERM, &[('i', 1, 1)]);
        assert_eq!(outgoing(&mut b, false, 1), Ok(Outgoing::Wire));
        assert_eq!(hp(&b), 1);
        // ... and is refused from port 2.
        let mut b = smp(OUT, 0, 2, PERM, PERM, &[('i', 1, 1)]);
        assert_eq!(outgoing(&mut b, false, 2), Err(SmiDiscard::WrongEgress));
        // A first LID-routed part: no rule runs, hp stays (the LRH carries it to DrSLID's
        // switch, which starts the directed part).
        let mut b = smp(OUT, 0, 2, 5, PERM, &[]);
        assert_eq!(outgoing(&mut b, false, 1), Ok(Outgoing::Wire));
        assert_eq!(hp(&b), 0);
        // A reply to a 2-hop request: hp 3 -> 2, out of ReturnPath[2].
        let mut b = smp(RET, 3, 2, PERM, PERM, &[('r', 2, 1)]);
        assert_eq!(outgoing(&mut b, false, 1), Ok(Outgoing::Wire));
        assert_eq!(hp(&b), 2);
        // A reply to a 0-hop request: hp 1 -> 0, which is this node's SM: local.
        let mut b = smp(RET, 1, 0, PERM, PERM, &[]);
        assert_eq!(outgoing(&mut b, false, 1), Ok(Outgoing::Local));
        assert_eq!(hp(&b), 0);
        // A CA cannot send an SMP from the middle of a path.
        let mut b = smp(OUT, 1, 3, PERM, PERM, &[]);
        assert_eq!(outgoing(&mut b, false, 1), Err(SmiDiscard::NotASwitch));
        let mut b = smp(OUT, 0, 64, PERM, PERM, &[]);
        assert_eq!(outgoing(&mut b, false, 1), Err(SmiDiscard::HopCount));
    }

    #[test]
    fn incoming_at_a_channel_adapter() {
        // The end of a 2-hop path: ReturnPath[2] = our port, hp 2 -> 3, for our SMA.
        let mut b = smp(OUT, 2, 2, PERM, PERM, &[]);
        assert_eq!(incoming(&mut b, false, 1, 1), Ok(()));
        assert_eq!((hp(&b), rp(&b, 2)), (3, 1));
        // Its reply's send rule then leaves by ReturnPath[2] with hp 2.
        b[4] |= 0x80;
        assert_eq!(outgoing(&mut b, false, 1), Ok(Outgoing::Wire));
        assert_eq!(hp(&b), 2);
        // A response back at its requester: hp 1 -> 0, for the SM.
        let mut b = smp(RET, 1, 2, PERM, PERM, &[]);
        assert_eq!(incoming(&mut b, false, 1, 1), Ok(()));
        assert_eq!(hp(&b), 0);
        // A CA in the middle of a path, or at the end of one that continues LID-routed.
        let mut b = smp(OUT, 1, 2, PERM, PERM, &[]);
        assert_eq!(incoming(&mut b, false, 1, 1), Err(SmiDiscard::NotASwitch));
        let mut b = smp(OUT, 2, 2, PERM, 7, &[]);
        assert_eq!(
            incoming(&mut b, false, 1, 1),
            Err(SmiDiscard::LidRoutedPart)
        );
        // hp == hc + 1 on arrival: already for this node.
        let mut b = smp(OUT, 3, 2, PERM, PERM, &[]);
        assert_eq!(incoming(&mut b, false, 1, 1), Ok(()));
        assert_eq!(hp(&b), 3);
        // A short buffer is refused, not indexed.
        assert_eq!(
            incoming(&mut [0u8; 100], false, 1, 1),
            Err(SmiDiscard::HopCount)
        );
    }
}

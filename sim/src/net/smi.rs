//! The directed-route rules of the subnet management interface (IBA 14.2.2, C14-9 and C14-13;
//! the kernel's `core/smi.c`), applied by every simulated node an SMP reaches, hop by hop.
//!
//! Notation: `hp` HopPointer, `hc` HopCount, D the direction bit. A requester sends an
//! outbound SMP with `hp` already moved to 1 (its own send rule, C14-9:1; the MAD layer of the
//! sending host applies it, as the kernel does). Each switch on the way records the port the
//! SMP entered by in ReturnPath\[hp\] and forwards it out of InitialPath\[hp + 1\]; the node at
//! `hp == hc` hands it to its SMA with `hp = hc + 1`. The SMA's response (D = 1) leaves by
//! ReturnPath\[hc\] with `hp = hc`, each switch sends it on out of ReturnPath\[hp - 1\], and
//! the requester receives it with `hp = 1` (and its own receive rule makes it 0).
//!
//! Only pure directed routes are carried (DrSLID and DrDLID permissive, as OpenSM and the
//! diagnostics send them). A route with a LID-routed part is recognised by the rules and
//! reported as [`DrAction::LidRouted`]; the network drops it and counts the drop.

use mad_wire::PERMISSIVE_LID;
use mad_wire::smp::{Direction, MAX_HOP_COUNT, Smp};

/// What a node does with a directed-route SMP it received, per the SMI rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DrAction {
    /// Send it on out of this port (a switch; the hop pointer has moved).
    Forward(u8),
    /// Hand it to this node's SMA (outbound, end of the path; `hp` is now `hc + 1`).
    Local,
    /// A returning SMP that reached its requester (`hp` is now 0): give it to the SM.
    ToSm,
    /// The next part of the route is LID-routed (DrDLID or DrSLID not permissive).
    LidRouted,
}

/// Why the SMI rules discard a directed-route SMP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DrDiscard {
    /// HopCount above 63 (C14-6).
    HopCount,
    /// The hop pointer does not fit the hop count and direction (C14-9:5, C14-13:5; also an
    /// outbound SMP that arrives with `hp == 0`, which its sender should have moved).
    HopPointer,
    /// Only a switch may forward a directed-route SMP (C14-9:2, C14-13:2), or end a path whose
    /// DrDLID is not permissive.
    NotASwitch,
    /// The path names port 0 or a port the switch does not have.
    NoSuchPort,
    /// A returning SMP entered by another port than ReturnPath says (C14-13:1).
    ReturnPathMismatch,
}

fn view(buf: &mut [u8; 256]) -> Smp<&mut [u8]> {
    Smp::new_checked(&mut buf[..]).expect("256 bytes hold an SMP")
}

/// The rules for a directed-route SMP received on `in_port` of a node with `num_ports` ports:
/// C14-9 (outbound) and C14-13 (returning) receive rules, then the forwarding decision and, for
/// a switch that forwards, its send rule. Updates HopPointer and ReturnPath in `buf`.
pub fn receive(
    buf: &mut [u8; 256],
    is_switch: bool,
    in_port: u8,
    num_ports: u8,
) -> Result<DrAction, DrDiscard> {
    let mut smp = view(buf);
    let (hp, hc) = (smp.hop_pointer(), smp.hop_count());
    if hc > MAX_HOP_COUNT {
        return Err(DrDiscard::HopCount);
    }
    let path_port = |p: u8| {
        if p == 0 || p > num_ports {
            Err(DrDiscard::NoSuchPort)
        } else {
            Ok(p)
        }
    };
    match smp.direction() {
        Direction::Outbound => {
            if hc != 0 && hp == 0 {
                return Err(DrDiscard::HopPointer);
            }
            if hp != 0 && hp < hc {
                if !is_switch {
                    return Err(DrDiscard::NotASwitch);
                }
                let _ = smp.set_return_path_hop(usize::from(hp), in_port);
                let next = path_port(smp.initial_path()[usize::from(hp) + 1])?;
                smp.set_hop_pointer(hp + 1);
                return Ok(DrAction::Forward(next));
            }
            if hp == hc {
                if hc != 0 {
                    let _ = smp.set_return_path_hop(usize::from(hp), in_port);
                }
                if smp.dr_dlid() != PERMISSIVE_LID {
                    return if is_switch {
                        Ok(DrAction::LidRouted)
                    } else {
                        Err(DrDiscard::NotASwitch)
                    };
                }
                smp.set_hop_pointer(hp + 1);
                return Ok(DrAction::Local);
            }
            if hp == hc + 1 {
                return Ok(DrAction::Local);
            }
            Err(DrDiscard::HopPointer)
        }
        Direction::Returning => {
            let mut hp = hp;
            if hc != 0 && hp == hc + 1 {
                hp -= 1;
                smp.set_hop_pointer(hp);
                if smp.return_path()[usize::from(hp)] != in_port {
                    return Err(DrDiscard::ReturnPathMismatch);
                }
            }
            if 2 <= hp && hp <= hc {
                if !is_switch {
                    return Err(DrDiscard::NotASwitch);
                }
                let next = path_port(smp.return_path()[usize::from(hp) - 1])?;
                smp.set_hop_pointer(hp - 1);
                return Ok(DrAction::Forward(next));
            }
            if hp == 1 {
                if smp.dr_slid() == PERMISSIVE_LID {
                    smp.set_hop_pointer(0);
                    return Ok(DrAction::ToSm);
                }
                return if is_switch {
                    Ok(DrAction::LidRouted)
                } else {
                    Err(DrDiscard::NotASwitch)
                };
            }
            if hp == 0 {
                return Ok(DrAction::ToSm);
            }
            Err(DrDiscard::HopPointer)
        }
    }
}

/// The responder's send rule (C14-13:1 and C14-13:3) for the response its SMA made of a
/// directed-route SMP (D now 1). Returns the egress port the ReturnPath names, or `None` when
/// the response leaves by the port the request entered (a 0-hop route).
pub fn respond(buf: &mut [u8; 256], is_switch: bool) -> Result<Option<u8>, DrDiscard> {
    let mut smp = view(buf);
    let (hp, hc) = (smp.hop_pointer(), smp.hop_count());
    if hc > MAX_HOP_COUNT {
        return Err(DrDiscard::HopCount);
    }
    if hc != 0 && hp == hc + 1 {
        smp.set_hop_pointer(hc);
        return Ok(Some(smp.return_path()[usize::from(hc)]));
    }
    if hc == 0 && hp == 1 {
        smp.set_hop_pointer(0);
        if is_switch || smp.dr_slid() == PERMISSIVE_LID {
            return Ok(None);
        }
        return Err(DrDiscard::NotASwitch);
    }
    Err(DrDiscard::HopPointer)
}

#[cfg(test)]
mod tests {
    use super::*;
    use mad_wire::smp::{DirectedRoute, SmpRepr, SmpRoute};

    /// A directed-route Get along `path`, with the hop pointer and direction given.
    fn dr(path: &[u8], hp: u8, returning: bool) -> [u8; 256] {
        let mut route = DirectedRoute::from_path(path).unwrap();
        route.hop_pointer = hp;
        if returning {
            route.direction = Direction::Returning;
        }
        let repr = SmpRepr::request(0x01, SmpRoute::Directed(route), 0x11, 0, 1);
        let mut buf = [0u8; 256];
        repr.emit(&mut Smp::new_checked(&mut buf[..]).unwrap());
        buf
    }

    fn hp(buf: &[u8; 256]) -> u8 {
        buf[6]
    }

    #[test]
    fn an_intermediate_switch_records_the_ingress_and_forwards() {
        // Path 1,3,1 (three hops): at the first switch hp = 1.
        let mut b = dr(&[1, 3, 1], 1, false);
        assert_eq!(receive(&mut b, true, 5, 8), Ok(DrAction::Forward(3)));
        assert_eq!(hp(&b), 2);
        assert_eq!(b[192 + 1], 5, "ReturnPath[1] = ingress port");
        // A CA cannot forward.
        let mut b = dr(&[1, 3, 1], 1, false);
        assert_eq!(receive(&mut b, false, 1, 2), Err(DrDiscard::NotASwitch));
        // A path naming a port the switch does not have, or port 0.
        let mut b = dr(&[1, 9, 1], 1, false);
        assert_eq!(receive(&mut b, true, 1, 8), Err(DrDiscard::NoSuchPort));
        let mut b = dr(&[1, 0, 1], 1, false);
        assert_eq!(receive(&mut b, true, 1, 8), Err(DrDiscard::NoSuchPort));
    }

    #[test]
    fn the_end_of_the_path_goes_to_the_sma_with_hp_past_the_count() {
        let mut b = dr(&[1, 3], 2, false);
        assert_eq!(receive(&mut b, true, 4, 8), Ok(DrAction::Local));
        assert_eq!((hp(&b), b[192 + 2]), (3, 4));
        // A CA at the end of the path too.
        let mut b = dr(&[1, 3], 2, false);
        assert_eq!(receive(&mut b, false, 1, 1), Ok(DrAction::Local));
        // An SMP whose sender did not move the hop pointer.
        let mut b = dr(&[1, 3], 0, false);
        assert_eq!(receive(&mut b, true, 1, 8), Err(DrDiscard::HopPointer));
        // A hop pointer beyond hc + 1.
        let mut b = dr(&[1, 3], 4, false);
        assert_eq!(receive(&mut b, true, 1, 8), Err(DrDiscard::HopPointer));
    }

    #[test]
    fn the_response_returns_along_the_return_path() {
        let mut b = dr(&[1, 3], 2, false);
        receive(&mut b, true, 4, 8).unwrap();
        b[4] |= 0x80; // D = 1, as the SMA's response has it
        assert_eq!(respond(&mut b, true), Ok(Some(4)));
        assert_eq!(hp(&b), 2);
        // At the previous switch (hp = 2 = hc): out of ReturnPath[1].
        b[192 + 1] = 6;
        assert_eq!(receive(&mut b, true, 3, 8), Ok(DrAction::Forward(6)));
        assert_eq!(hp(&b), 1);
        // At the requester: hp 1 with a permissive DrSLID goes to the SM.
        assert_eq!(receive(&mut b, false, 1, 1), Ok(DrAction::ToSm));
        assert_eq!(hp(&b), 0);
    }

    #[test]
    fn a_returning_smp_arriving_at_hc_plus_1_checks_the_return_path() {
        let mut b = dr(&[1, 3], 3, true);
        b[192 + 2] = 4;
        assert_eq!(
            receive(&mut b, true, 5, 8),
            Err(DrDiscard::ReturnPathMismatch)
        );
        let mut b = dr(&[1, 3], 3, true);
        b[192 + 2] = 4;
        b[192 + 1] = 7;
        assert_eq!(receive(&mut b, true, 4, 8), Ok(DrAction::Forward(7)));
        assert_eq!(hp(&b), 1);
    }

    #[test]
    fn zero_hop_and_lid_routed_parts() {
        let mut b = dr(&[], 1, false);
        assert_eq!(receive(&mut b, false, 1, 1), Ok(DrAction::Local));
        b[4] |= 0x80;
        assert_eq!(respond(&mut b, false), Ok(None));
        assert_eq!(hp(&b), 0);
        // A non-permissive DrDLID at the end of the DR part.
        let mut b = dr(&[1], 1, false);
        b[34] = 0;
        b[35] = 9;
        assert_eq!(receive(&mut b, true, 1, 8), Ok(DrAction::LidRouted));
        let mut b = dr(&[1], 1, false);
        b[34] = 0;
        b[35] = 9;
        assert_eq!(receive(&mut b, false, 1, 1), Err(DrDiscard::NotASwitch));
        let mut b = dr(&[1], 1, false);
        b[7] = 64;
        assert_eq!(receive(&mut b, true, 1, 8), Err(DrDiscard::HopCount));
    }
}

//! Link widths and speeds: the enabled masks a topology file sets per port, the active rate two
//! ends train to, and ibnetdiscover's `4xQDR` spelling.
//!
//! Values are PortInfo encodings (`mad-stack.md` §2.7; ibsim `sim.h`): LinkWidthEnabled bits
//! 1 = 1x, 2 = 4x, 4 = 8x, 8 = 12x, 16 = 2x; LinkSpeedEnabled bits 1 = SDR, 2 = DDR, 4 = QDR;
//! LinkSpeedExtEnabled bits 1 = FDR, 2 = EDR, 4 = HDR, 8 = NDR; LinkSpeedExtEnabled2 bit 1 =
//! XDR (212.5 Gb/s per lane: libibmad `fields.c` "More PortInfo fields (XDR)", `dump.c`
//! `dump_linkspeedext2`); and Mellanox ExtendedPortInfo's FDR10 bit.
//!
//! XDR goes beyond ibsim, which knows no extended speed 2 (`sim_net.c`
//! `parse_port_link_width_and_speed` warns of `4xXDR` and keeps the port's speeds): here
//! the token enables it, so that ibnetdiscover's output of an XDR fabric (current
//! infiniband-diags prints `XDR`) reads back.

use super::error::Problem;

/// Width bit for 1x links.
pub const WIDTH_1X: u8 = 1;
/// Width bit for 4x links.
pub const WIDTH_4X: u8 = 2;
/// Width bit for 8x links.
pub const WIDTH_8X: u8 = 4;
/// Width bit for 12x links.
pub const WIDTH_12X: u8 = 8;
/// Width bit for 2x links.
pub const WIDTH_2X: u8 = 16;
/// Speed bit for SDR (2.5 Gb/s per lane).
pub const SPEED_SDR: u8 = 1;
/// Speed bit for DDR.
pub const SPEED_DDR: u8 = 2;
/// Speed bit for QDR.
pub const SPEED_QDR: u8 = 4;
/// Extended speed bit for FDR.
pub const SPEED_EXT_FDR: u8 = 1;
/// Extended speed bit for EDR.
pub const SPEED_EXT_EDR: u8 = 2;
/// Extended speed bit for HDR.
pub const SPEED_EXT_HDR: u8 = 4;
/// Extended speed bit for NDR.
pub const SPEED_EXT_NDR: u8 = 8;
/// Extended speed 2 bit for XDR (LinkSpeedExtEnabled2, LinkSpeedExtSupported2,
/// LinkSpeedExtActive2).
pub const SPEED_EXT2_XDR: u8 = 1;

/// The link rates a port enables: what PortInfo's *Enabled fields hold and what the SMA trains
/// a link with. The topology file sets them (`w=`, `s=`, `e=` options or an ibnetdiscover token).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LinkRates {
    /// LinkWidthEnabled mask (1-31).
    pub width: u8,
    /// LinkSpeedEnabled mask (1-7).
    pub speed: u8,
    /// LinkSpeedExtEnabled mask (0-15).
    pub speed_ext: u8,
    /// LinkSpeedExtEnabled2 mask (0 or [`SPEED_EXT2_XDR`]).
    pub speed_ext2: u8,
    /// Mellanox FDR10 enabled (ExtendedPortInfo LinkSpeedEnabled bit 0).
    pub fdr10: bool,
}

impl LinkRates {
    /// What ibsim gives a port the file says nothing about (`sim.h` `DEFAULT_LINKWIDTH` 4x,
    /// `DEFAULT_LINKSPEED` SDR, `DEFAULT_LINKSPEEDEXT` none, no FDR10; no XDR).
    pub const DEFAULT: LinkRates = LinkRates {
        width: WIDTH_4X,
        speed: SPEED_SDR,
        speed_ext: 0,
        speed_ext2: 0,
        fdr10: false,
    };

    /// Applies an ibnetdiscover link token such as `4xQDR` the way ibsim does
    /// (`sim_net.c` `parse_port_link_width_and_speed`): a width number sets the enabled widths up
    /// to it (4 → 1x|4x, 12 → 1x|4x|12x, but 8 → 8x and 2 → 2x alone), and a speed name enables
    /// every speed up to it; SDR, DDR, QDR and FDR10 leave the extended speeds as they were.
    /// A speed of `???` (what ibnetdiscover prints for a speed it cannot name) changes nothing.
    /// `XDR`, which ibsim does not know, follows the same rule: every speed up to NDR, FDR10,
    /// and XDR (FDR to NDR clear XDR, as they set the extended speeds whole).
    pub fn apply_token(self, width: &str, speed: &str) -> Result<LinkRates, Problem> {
        const SDR_QDR: u8 = SPEED_SDR | SPEED_DDR | SPEED_QDR;
        let mut r = self;
        match width {
            "1" => r.width = WIDTH_1X,
            "2" => r.width = WIDTH_2X,
            "4" => r.width = WIDTH_1X | WIDTH_4X,
            "8" => r.width = WIDTH_8X,
            "12" => r.width = WIDTH_1X | WIDTH_4X | WIDTH_12X,
            _ => {
                return Err(Problem::UnknownLinkToken {
                    what: "width",
                    text: format!("{width}x"),
                    known: "1x 2x 4x 8x 12x",
                });
            }
        }
        match speed {
            "SDR" => r.speed = SPEED_SDR,
            "DDR" => r.speed = SPEED_SDR | SPEED_DDR,
            "QDR" => r.speed = SDR_QDR,
            "FDR10" => {
                r.speed = SDR_QDR;
                r.fdr10 = true;
            }
            "FDR" | "EDR" | "HDR" | "NDR" | "XDR" => {
                const FDR_NDR: u8 = SPEED_EXT_FDR | SPEED_EXT_EDR | SPEED_EXT_HDR | SPEED_EXT_NDR;
                r.speed = SDR_QDR;
                r.fdr10 = true;
                r.speed_ext = match speed {
                    "FDR" => SPEED_EXT_FDR,
                    "EDR" => SPEED_EXT_FDR | SPEED_EXT_EDR,
                    "HDR" => SPEED_EXT_FDR | SPEED_EXT_EDR | SPEED_EXT_HDR,
                    _ => FDR_NDR,
                };
                r.speed_ext2 = if speed == "XDR" { SPEED_EXT2_XDR } else { 0 };
            }
            "???" => {}
            _ => {
                return Err(Problem::UnknownLinkToken {
                    what: "speed",
                    text: speed.to_owned(),
                    known: "SDR DDR QDR FDR10 FDR EDR HDR NDR XDR",
                });
            }
        }
        Ok(r)
    }

    /// The token (`4xQDR`) that [`apply_token`](Self::apply_token) turns `base` into `self` with,
    /// if there is one. The writer uses it so that files it writes look like ibnetdiscover's.
    pub fn token_from(self, base: LinkRates) -> Option<String> {
        const WIDTHS: [&str; 5] = ["1", "2", "4", "8", "12"];
        const SPEEDS: [&str; 9] = [
            "SDR", "DDR", "QDR", "FDR10", "FDR", "EDR", "HDR", "NDR", "XDR",
        ];
        for w in WIDTHS {
            for s in SPEEDS {
                if base.apply_token(w, s).ok() == Some(self) {
                    return Some(format!("{w}x{s}"));
                }
            }
        }
        None
    }
}

impl Default for LinkRates {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// The rate a link trained to: PortInfo's *Active fields, the same at both ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ActiveRates {
    /// LinkWidthActive (a single width bit).
    pub width: u8,
    /// LinkSpeedActive (a single speed bit).
    pub speed: u8,
    /// LinkSpeedExtActive (a single bit, or 0 when no extended speed is common).
    pub speed_ext: u8,
    /// LinkSpeedExtActive2 ([`SPEED_EXT2_XDR`], or 0 when both ends do not enable XDR).
    pub speed_ext2: u8,
    /// FDR10 active.
    pub fdr10: bool,
}

/// Which of the two rate kinds two ports have nothing in common for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoCommon {
    /// No enabled width in common.
    Width,
    /// No enabled speed in common.
    Speed,
}

impl ActiveRates {
    /// What a switch's port 0 reports active: 4x SDR, no extended speed, no FDR10. Port 0 has
    /// no link to train, but ibsim gives every port a 4x SDR active rate before any link
    /// trains (`ibsim/sim_net.c` `init_ports`: `linkwidth = LINKWIDTH_4x`, `linkspeed =
    /// LINKSPEED_SDR`, `linkspeedext = DEFAULT_LINKSPEEDEXT` (none)), port 0 keeps it because
    /// it never trains (`connect_ports` gives it the `smaport` template, Active/LinkUp), and
    /// `update_portinfo` writes LinkWidthActive and LinkSpeedActive for port 0 like any
    /// other; ibsim 0.10 answers `smpquery portinfo` of port 0 with 4X and 2.5 Gbps. Real
    /// switches report 4X on port 0 as well. It matters to OpenSM: the rate of a path that
    /// starts or ends at a switch is computed from port 0's PortInfo
    /// (`opensm/osm_sa_path_record.c` `pr_rcv_get_path_parms`, `ib_port_info_compute_rate`
    /// in `include/iba/ib_types.h`), which with no active width or speed says 2.5 Gb/s
    /// rather than the 10 Gb/s of 4x SDR.
    pub const SWITCH_PORT0: ActiveRates = ActiveRates {
        width: WIDTH_4X,
        speed: SPEED_SDR,
        speed_ext: 0,
        speed_ext2: 0,
        fdr10: false,
    };

    /// Trains a link between ports enabling `a` and `b`: the widest common width and fastest
    /// common speeds, as ibsim's `get_active_link*` pick them (12x > 8x > 4x > 2x > 1x;
    /// QDR > DDR > SDR; NDR > HDR > EDR > FDR > none), each field on its own as ibsim trains
    /// them, and XDR when both enable it. A reader takes the fastest that is active: the
    /// extended speed over LinkSpeedActive, LinkSpeedExtActive2 over LinkSpeedExtActive
    /// (libibnetdisc `ibnd_get_agg_linkspeedext`).
    pub fn train(one: LinkRates, other: LinkRates) -> Result<ActiveRates, NoCommon> {
        let best = |common: u8, order: &[u8]| order.iter().copied().find(|bit| common & bit != 0);
        let width = best(
            one.width & other.width,
            &[WIDTH_12X, WIDTH_8X, WIDTH_4X, WIDTH_2X, WIDTH_1X],
        )
        .ok_or(NoCommon::Width)?;
        let speed = best(one.speed & other.speed, &[SPEED_QDR, SPEED_DDR, SPEED_SDR])
            .ok_or(NoCommon::Speed)?;
        let speed_ext = best(
            one.speed_ext & other.speed_ext,
            &[SPEED_EXT_NDR, SPEED_EXT_HDR, SPEED_EXT_EDR, SPEED_EXT_FDR],
        )
        .unwrap_or(0);
        Ok(ActiveRates {
            width,
            speed,
            speed_ext,
            speed_ext2: one.speed_ext2 & other.speed_ext2 & SPEED_EXT2_XDR,
            fdr10: one.fdr10 && other.fdr10,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Expected masks written out from ibsim `sim.h` (LINKWIDTH_1x_4x = 3, LINKWIDTH_1x_4x_12x = 11,
    // LINKWIDTH_8x = 4, LINKWIDTH_2x = 16, LINKSPEED_SDR_DDR_QDR = 7,
    // LINKSPEEDEXT_NDR_HDR_EDR_FDR = 15, ...) and `parse_port_link_width_and_speed`.
    #[test]
    fn tokens_map_like_ibsim() {
        let d = LinkRates::DEFAULT;
        let r = d.apply_token("4", "QDR").unwrap();
        assert_eq!((r.width, r.speed, r.speed_ext, r.fdr10), (3, 7, 0, false));
        let r = d.apply_token("12", "DDR").unwrap();
        assert_eq!((r.width, r.speed, r.speed_ext, r.fdr10), (11, 3, 0, false));
        let r = d.apply_token("8", "SDR").unwrap();
        assert_eq!((r.width, r.speed), (4, 1));
        let r = d.apply_token("2", "EDR").unwrap();
        assert_eq!((r.width, r.speed, r.speed_ext, r.fdr10), (16, 7, 3, true));
        let r = d.apply_token("1", "HDR").unwrap();
        assert_eq!((r.width, r.speed, r.speed_ext, r.fdr10), (1, 7, 7, true));
        let r = d.apply_token("4", "NDR").unwrap();
        assert_eq!((r.speed_ext, r.fdr10), (15, true));
        let r = d.apply_token("4", "FDR").unwrap();
        assert_eq!((r.speed_ext, r.fdr10), (1, true));
        // FDR10 and the classic speeds leave the extended speeds alone.
        let base = LinkRates { speed_ext: 5, ..d };
        let r = base.apply_token("4", "FDR10").unwrap();
        assert_eq!((r.speed, r.speed_ext, r.fdr10), (7, 5, true));
        let r = base.apply_token("4", "SDR").unwrap();
        assert_eq!((r.speed, r.speed_ext, r.fdr10), (1, 5, false));
    }

    #[test]
    fn xdr_enables_every_speed_up_to_it() {
        // Beyond ibsim: XDR is NDR's masks (speeds SDR to QDR, FDR10, FDR to NDR) and
        // LinkSpeedExtEnabled2 XDR (libibmad dump.c `dump_linkspeedext2`: bit 0 is 212.5 Gbps).
        let d = LinkRates::DEFAULT;
        let r = d.apply_token("4", "XDR").unwrap();
        assert_eq!(
            (r.width, r.speed, r.speed_ext, r.speed_ext2, r.fdr10),
            (3, 7, 15, 1, true)
        );
        // The classic speeds and FDR10 leave it; FDR to NDR name the top speed and clear it.
        let r = r.apply_token("4", "QDR").unwrap();
        assert_eq!((r.speed_ext, r.speed_ext2), (15, 1));
        let r = r.apply_token("4", "FDR10").unwrap();
        assert_eq!(r.speed_ext2, 1);
        let r = r.apply_token("4", "NDR").unwrap();
        assert_eq!((r.speed_ext, r.speed_ext2), (15, 0));
        assert_eq!(
            d.apply_token("2", "XDR").unwrap().token_from(d).as_deref(),
            Some("2xXDR")
        );
    }

    #[test]
    fn unknown_tokens() {
        let d = LinkRates::DEFAULT;
        let r = d.apply_token("1", "???").unwrap();
        assert_eq!((r.width, r.speed, r.speed_ext, r.fdr10), (1, 1, 0, false));
        assert!(matches!(
            d.apply_token("3", "QDR"),
            Err(Problem::UnknownLinkToken { what: "width", .. })
        ));
        assert!(matches!(
            d.apply_token("4", "GDR"),
            Err(Problem::UnknownLinkToken { what: "speed", .. })
        ));
    }

    #[test]
    fn token_from_inverts_apply_token() {
        let d = LinkRates::DEFAULT;
        assert_eq!(
            LinkRates {
                width: 3,
                speed: 7,
                speed_ext: 7,
                speed_ext2: 0,
                fdr10: true
            }
            .token_from(d)
            .as_deref(),
            Some("4xHDR")
        );
        // ibsim's default (4x only) is not what any token gives.
        assert_eq!(d.token_from(d), None);
        assert_eq!(
            LinkRates {
                width: 2,
                speed: 7,
                speed_ext: 0,
                speed_ext2: 0,
                fdr10: false
            }
            .token_from(d),
            None
        );
    }

    #[test]
    fn training_picks_the_best_common_rate() {
        let hdr = LinkRates {
            width: 3,
            speed: 7,
            speed_ext: 7,
            speed_ext2: 0,
            fdr10: true,
        };
        let edr = LinkRates {
            width: 2,
            speed: 7,
            speed_ext: 3,
            speed_ext2: 0,
            fdr10: true,
        };
        let a = ActiveRates::train(hdr, edr).unwrap();
        assert_eq!((a.width, a.speed, a.speed_ext, a.fdr10), (2, 4, 2, true));
        let a = ActiveRates::train(LinkRates::DEFAULT, LinkRates::DEFAULT).unwrap();
        assert_eq!((a.width, a.speed, a.speed_ext, a.fdr10), (2, 1, 0, false));
        let one_x = LinkRates {
            width: 1,
            ..LinkRates::DEFAULT
        };
        assert_eq!(
            ActiveRates::train(one_x, LinkRates::DEFAULT),
            Err(NoCommon::Width)
        );
        let ddr = LinkRates {
            speed: 2,
            ..LinkRates::DEFAULT
        };
        assert_eq!(
            ActiveRates::train(ddr, LinkRates::DEFAULT),
            Err(NoCommon::Speed)
        );
        // XDR when both ends enable it; the other fields train as before.
        let xdr = LinkRates::DEFAULT.apply_token("4", "XDR").unwrap();
        let a = ActiveRates::train(xdr, xdr).unwrap();
        assert_eq!((a.width, a.speed, a.speed_ext, a.speed_ext2), (2, 4, 8, 1));
        let a = ActiveRates::train(xdr, hdr).unwrap();
        assert_eq!((a.speed_ext, a.speed_ext2), (4, 0));
    }
}

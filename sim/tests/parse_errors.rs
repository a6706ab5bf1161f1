//! Malformed topologies: each error names the file, the line and what was expected.

use std::fmt::Write as _;

use sim::fabric::{Fabric, FabricError, Problem};

/// Parses `text` expecting an error; returns its line and problem after checking the message
/// starts with `name:line:`.
fn fail(text: &str) -> (u32, Problem) {
    match Fabric::parse_str("topo.net", text) {
        Ok(_) => panic!("parsed:\n{text}"),
        Err(e @ FabricError::Parse { .. }) => {
            let msg = e.to_string();
            let FabricError::Parse {
                file,
                line,
                problem,
            } = e
            else {
                unreachable!()
            };
            assert_eq!(file, "topo.net");
            assert!(msg.starts_with(&format!("topo.net:{line}: ")), "{msg}");
            (line, problem)
        }
        Err(e) => panic!("not a parse error: {e}"),
    }
}

const GOOD: &str = "\
Switch 4 \"S\"
[1] \"A\"[1]

Hca 1 \"A\"
[1] \"S\"[1]
";

#[test]
fn the_good_file_parses() {
    let f = Fabric::parse_str("topo.net", GOOD).unwrap();
    assert_eq!(f.link_count(), 1);
}

#[test]
fn unknown_record() {
    let (line, p) = fail(&format!("{GOOD}\nRouter 2 \"R\"\n"));
    assert_eq!(line, 7);
    assert_eq!(
        p,
        Problem::UnknownRecord {
            word: "Router".into()
        }
    );
    let (line, p) = fail("# c\nSwitchX 4 \"S\"\n");
    assert_eq!(
        (line, p),
        (
            2,
            Problem::UnknownRecord {
                word: "SwitchX".into()
            }
        )
    );
}

#[test]
fn port_number_beyond_the_port_count() {
    let (line, p) =
        fail("Switch 4 \"S\"\n[1] \"A\"[1]\n[5] \"A\"[2]\n\nHca 2 \"A\"\n[1] \"S\"[1]\n");
    assert_eq!(line, 3);
    assert_eq!(
        p,
        Problem::PortOutOfRange {
            node: "S".into(),
            port: 5,
            num_ports: 4
        }
    );
    let (line, p) = fail("Switch 4 \"S\"\n[0] \"A\"[1]\n");
    assert_eq!((line, p), (2, Problem::PortZero));
    let (line, p) = fail("Switch 4 \"S\"\n[x] \"A\"[1]\n");
    assert_eq!(line, 2);
    assert!(
        matches!(
            p,
            Problem::BadNumber {
                what: "port number",
                ..
            }
        ),
        "{p:?}"
    );
}

#[test]
fn remote_port_beyond_the_remote_port_count() {
    let (line, p) = fail("Switch 4 \"S\"\n[1] \"A\"[3]\n\nHca 2 \"A\"\n[1] \"S\"[1]\n");
    assert_eq!(line, 2);
    assert_eq!(
        p,
        Problem::PortOutOfRange {
            node: "A".into(),
            port: 3,
            num_ports: 2
        }
    );
}

#[test]
fn link_described_inconsistently() {
    // A[1] -> B[2], but B[2] -> C[3].
    let text = "\
Switch 4 \"A\"
[1] \"B\"[2]

Switch 4 \"B\"
[2] \"C\"[3]

Switch 4 \"C\"
[3] \"B\"[2]
";
    let (line, p) = fail(text);
    assert_eq!(line, 2);
    assert_eq!(
        p,
        Problem::InconsistentLink {
            local: "\"A\"[1]".into(),
            remote: "\"B\"[2]".into(),
            remote_says: Some("\"C\"[3]".into()),
            remote_at: Some("line 5".into()),
        }
    );
    assert!(
        p.to_string().contains("line 5 links \"B\"[2] to \"C\"[3]"),
        "{p}"
    );
}

#[test]
fn link_described_from_one_end_only() {
    let (line, p) = fail("Switch 4 \"S\"\n[1] \"A\"[1]\n\nHca 1 \"A\"\n");
    assert_eq!(line, 2);
    assert!(
        matches!(
            p,
            Problem::InconsistentLink {
                remote_says: None,
                ..
            }
        ),
        "{p:?}"
    );
    assert!(p.to_string().contains("from both ends"), "{p}");
}

#[test]
fn missing_quotes() {
    let (line, p) = fail("Switch 4 \"S\n");
    assert_eq!((line, p), (1, Problem::MissingQuote { what: "node id" }));
    let (line, p) = fail("Switch 4 \"S\"\n[1] \"A[1]\n");
    assert_eq!(
        (line, p),
        (
            2,
            Problem::MissingQuote {
                what: "remote node id"
            }
        )
    );
    let (line, p) = fail("Switch 4 \"S\" # \"unterminated\n");
    assert_eq!(
        (line, p),
        (
            1,
            Problem::MissingQuote {
                what: "description"
            }
        )
    );
    let (line, p) = fail("Switch 4 S\n");
    assert_eq!(line, 1);
    assert!(matches!(p, Problem::Expected { .. }), "{p:?}");
}

#[test]
fn duplicate_node() {
    let (line, p) = fail(&format!("{GOOD}\n# again\nSwitch 8 \"S\"\n"));
    assert_eq!(line, 8);
    assert_eq!(
        p,
        Problem::DuplicateNode {
            name: "S".into(),
            first: Some("line 1".into())
        }
    );
}

#[test]
fn duplicate_port_line() {
    let (line, p) =
        fail("Switch 4 \"S\"\n[1] \"A\"[1]\n[1] \"A\"[1]\n\nHca 1 \"A\"\n[1] \"S\"[1]\n");
    assert_eq!(line, 3);
    assert_eq!(
        p,
        Problem::DuplicatePortLine {
            node: "S".into(),
            port: 1,
            first_line: 2
        }
    );
}

#[test]
fn unknown_remote_node() {
    let (line, p) =
        fail("Switch 4 \"S\"\n[1] \"A\"[1]\n[2] \"Nowhere\"[1]\n\nHca 1 \"A\"\n[1] \"S\"[1]\n");
    assert_eq!(
        (line, p),
        (
            3,
            Problem::UnknownRemoteNode {
                name: "Nowhere".into()
            }
        )
    );
}

#[test]
fn port_line_outside_a_record() {
    let (line, p) = fail("Switch 4 \"S\"\n\n[1] \"A\"[1]\n");
    assert_eq!((line, p), (3, Problem::PortLineOutsideRecord));
}

#[test]
fn bad_port_options_and_tokens() {
    let (line, p) = fail("Switch 4 \"S\"\n[1] \"A\"[1] w=40\n");
    assert_eq!(line, 2);
    assert!(matches!(p, Problem::BadNumber { .. }), "{p:?}");
    // ibsim reads `w=4x` as the mask 4 (8x only), which is never what it looks like.
    let (line, p) = fail("Switch 4 \"S\"\n[1] \"A\"[1] w=4x\n");
    assert_eq!(line, 2);
    assert!(p.to_string().contains("a 4x link is w=2"), "{p}");
    let (line, p) = fail("Switch 4 \"S\"\n[1] \"A\"[1] speed=4\n");
    assert_eq!(
        (line, p),
        (
            2,
            Problem::UnknownPortOption {
                option: "speed".into()
            }
        )
    );
    let (line, p) = fail("Switch 4 \"S\"\n[1] \"A\"[1] # \"A\" lid 3 4xGDR\n");
    assert_eq!(line, 2);
    assert!(
        matches!(p, Problem::UnknownLinkToken { what: "speed", .. }),
        "{p:?}"
    );
}

#[test]
fn bad_counts_and_numbers() {
    let (line, p) = fail("Switch 0 \"S\"\n");
    assert_eq!((line, p), (1, Problem::PortCountOutOfRange { count: 0 }));
    let (line, p) = fail("Switch 300 \"S\"\n");
    assert_eq!((line, p), (1, Problem::PortCountOutOfRange { count: 300 }));
    let (line, p) = fail("\n\nvendid=0x1000000\n");
    assert_eq!(line, 3);
    assert!(
        matches!(
            p,
            Problem::BadNumber {
                what: "vendor id",
                ..
            }
        ),
        "{p:?}"
    );
    let (line, p) = fail("caguid=zz\n");
    assert_eq!(line, 1);
    assert!(
        matches!(p, Problem::BadNumber { what: "GUID", .. }),
        "{p:?}"
    );
}

#[test]
fn duplicate_guids() {
    let (line, p) = fail("switchguid=0x10\nSwitch 4 \"S\"\n\nswitchguid=0x10\nSwitch 4 \"T\"\n");
    assert_eq!(line, 5);
    assert!(
        matches!(
            p,
            Problem::DuplicateGuid {
                what: "node",
                guid: 0x10,
                ..
            }
        ),
        "{p:?}"
    );
    // Two linked CA ports with the same GUID: reported at the second port's line.
    let text = "\
Switch 4 \"S\"
[1] \"A\"[1]
[2] \"B\"[1]

Ca 1 \"A\"
[1](77) \"S\"[1]

Ca 1 \"B\"
[1](77) \"S\"[2]
";
    let (line, p) = fail(text);
    assert_eq!(line, 9);
    assert!(
        matches!(
            p,
            Problem::DuplicateGuid {
                what: "port",
                guid: 0x77,
                ..
            }
        ),
        "{p:?}"
    );
}

#[test]
fn port_guids_that_disagree() {
    let text = "\
Switch 4 \"S\"
[1] \"A\"[1](99)

Ca 1 \"A\"
[1](98) \"S\"[1]
";
    let (line, p) = fail(text);
    assert_eq!(line, 2);
    assert!(
        matches!(
            p,
            Problem::InconsistentPortGuid {
                here: 0x99,
                there: 0x98,
                ..
            }
        ),
        "{p:?}"
    );
}

#[test]
fn duplicate_lids() {
    let text = "\
Switch 4 \"S\" # \"s\" lid 5 lmc 0
[1] \"A\"[1]

Ca 1 \"A\"
[1] \"S\"[1] # lid 5 lmc 0
";
    let (line, p) = fail(text);
    assert_eq!(line, 5);
    assert!(matches!(p, Problem::DuplicateLid { lid: 5, .. }), "{p:?}");
    let (line, p) = fail("Switch 4 \"S\" # \"s\" lid 0xc000\n");
    assert_eq!(line, 1);
    assert!(matches!(p, Problem::LidOutOfRange { .. }), "{p:?}");
}

#[test]
fn links_that_cannot_train() {
    let (line, p) = fail("Switch 4 \"S\"\n[1] \"A\"[1] w=1\n\nCa 1 \"A\"\n[1] \"S\"[1] w=2\n");
    assert_eq!(line, 2);
    assert!(
        matches!(p, Problem::NoCommonRate { what: "width", .. }),
        "{p:?}"
    );
}

#[test]
fn unsupported_ibsim_features() {
    let (line, p) = fail("do link 1\n");
    assert_eq!(line, 1);
    assert!(matches!(p, Problem::Unsupported { .. }), "{p:?}");
    let (line, p) = fail("Switch 4 \"S\"\n@[1] \"alias\"\n");
    assert_eq!(line, 2);
    assert!(matches!(p, Problem::Unsupported { .. }), "{p:?}");
    let (line, p) = fail("include \"other.net\"\n");
    assert_eq!(line, 1);
    assert!(matches!(p, Problem::Include { .. }), "{p:?}");
}

#[test]
fn includes_are_followed_and_errors_name_the_included_file() {
    let dir = std::env::temp_dir().join(format!("sim-fabric-include-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("sub")).unwrap();
    std::fs::write(
        dir.join("top.net"),
        "include \"sub/hosts.net\"\n\nSwitch 4 \"S\"\n[1] \"A\"[1]\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("sub/hosts.net"),
        "# hosts\nCa 1 \"A\"\n[1] \"S\"[1]\n",
    )
    .unwrap();
    let f = Fabric::parse_file(dir.join("top.net")).unwrap();
    assert_eq!(f.link_count(), 1);
    assert_eq!(f.name(sim::fabric::NodeId(0)), "A");

    std::fs::write(
        dir.join("sub/hosts.net"),
        "# hosts\nCa 1 \"A\"\n[1] \"S\"[1] w=0\n",
    )
    .unwrap();
    let e = Fabric::parse_file(dir.join("top.net")).unwrap_err();
    let FabricError::Parse { file, line, .. } = &e else {
        panic!("{e}")
    };
    assert!(file.ends_with("sub/hosts.net"), "{e}");
    assert_eq!(*line, 3);

    std::fs::write(dir.join("loop.net"), "include \"loop.net\"\n").unwrap();
    let e = Fabric::parse_file(dir.join("loop.net")).unwrap_err();
    assert!(
        matches!(
            &e,
            FabricError::Parse {
                problem: Problem::Include { .. },
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("deeper than 8"), "{e}");

    let e = Fabric::parse_file(dir.join("absent.net")).unwrap_err();
    assert!(matches!(e, FabricError::Io { .. }), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn module_prefixes_names() {
    let text = "\
module=\"m1\"
Switch 4 \"S\"
[1] \"A\"[1]
[2] \"top#T\"[1]

Ca 1 \"A\"
[1] \"S\"[1]

module=\"top\"
Switch 2 \"T\"
[1] \"m1#S\"[2]
";
    let f = Fabric::parse_str("m.net", text).unwrap();
    assert!(f.node_by_name("m1#S").is_some());
    assert!(f.node_by_name("top#T").is_some());
    assert_eq!(f.link_count(), 2);
    let written = f.to_topology_string().unwrap();
    assert!(Fabric::parse_str("w", &written).unwrap() == f, "{written}");
}

#[test]
fn a_fabric_of_too_many_ports_is_refused_at_the_first_node_over_the_limit() {
    use sim::fabric::builder::MAX_FABRIC_PORTS;
    // Headers of 254-port switches take 255 port entries each: without a bound, 100,000 such
    // lines (2 MB of text) would allocate 25 million ports. 5,000 go past the bound.
    let mut text = String::new();
    for i in 1..=5_000 {
        writeln!(text, "Switch 254 \"S{i}\"").unwrap();
    }
    let (line, p) = fail(&text);
    let first_over = MAX_FABRIC_PORTS / 255 + 1;
    assert_eq!(
        u64::from(line),
        first_over,
        "refused at the first node over"
    );
    assert_eq!(
        p,
        Problem::TooManyPorts {
            ports: first_over * 255,
            limit: MAX_FABRIC_PORTS
        }
    );
    let msg = p.to_string();
    assert!(
        msg.contains("2,144-node") && msg.contains("port counts"),
        "{msg}"
    );
}

#[test]
fn a_port_comment_with_an_odd_number_of_quotes_is_read() {
    // ibnetdiscover prints NodeDescriptions raw: `a"b` leaves an odd number of `"`.
    let text = "Switch 4 \"S\"\n[1] \"A\"[1](11) # \"a\"b\" lid 2 4xQDR\n\n\
                Hca 1 \"A\"\n[1](11) \"S\"[1] # lid 2 lmc 0 \"S \"quoted\" lid 0 4xQDR\n";
    let f = Fabric::parse_str("topo.net", text).unwrap();
    assert_eq!(f.link_count(), 1);
    let a = f.node_by_name("A").unwrap();
    let p = f.port_id(a, 1).unwrap();
    assert_eq!(f.port(p).lid(), 2);
    assert_eq!(f.port(p).guid(), 0x11);
    // 4xQDR from both ends: the link trained at QDR (LinkSpeedActive 4).
    assert_eq!(f.port(p).state.active.speed, 4);
}

#[test]
fn a_description_longer_than_node_description_is_cut_to_64_bytes() {
    // ibnetdiscover --node-name-map can print names longer than NodeDescription's 64 bytes;
    // ibsim keeps their first 64 (strncpy). Here 62 ASCII bytes, then `é` (2 bytes, ending at
    // byte 64) and `ü` (which would end at 66).
    let long = format!("{}éü tail", "d".repeat(62));
    let text = format!(
        "Switch 4 \"S\" # \"{long}\" enhanced port 0 lid 1 lmc 0\n[1] \"A\"[1]\n\n\
         Hca 1 \"A\" # \"{}ü\"\n[1] \"S\"[1]\n",
        "h".repeat(63)
    );
    let f = Fabric::parse_str("topo.net", &text).unwrap();
    let s = f.node_by_name("S").unwrap();
    assert_eq!(f.description(s), format!("{}é", "d".repeat(62)));
    let a = f.node_by_name("A").unwrap();
    assert_eq!(
        f.description(a),
        "h".repeat(63),
        "cut at a character boundary"
    );
    // What is left still refuses what NodeDescription cannot carry.
    let (line, p) = fail(&format!("Hca 1 \"B\" # \"\u{1}{}\"\n", "b".repeat(70)));
    assert_eq!(line, 1);
    assert!(matches!(p, Problem::BadName { .. }), "{p:?}");
}

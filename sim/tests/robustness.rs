//! The parser takes any text without panicking, and whatever it accepts writes back and reads
//! back the same (topology files are user input: DESIGN §4.6).

mod common;

use proptest::prelude::*;
use sim::fabric::{Fabric, FabricError};

fn sample() -> String {
    std::fs::read_to_string(common::data("ibnetdiscover/hdr.ibnetdiscover")).unwrap()
}

/// Accepted text must survive write -> parse unchanged (or be refused as unrepresentable).
fn check_accepted(text: &str) {
    if let Ok(f) = Fabric::parse_str("fuzz", text) {
        match f.to_topology_string() {
            Ok(written) => {
                let again = Fabric::parse_str("written", &written)
                    .unwrap_or_else(|e| panic!("{e}\ninput:\n{text}\nwritten:\n{written}"));
                assert!(again == f, "input:\n{text}\nwritten:\n{written}");
            }
            Err(FabricError::Unrepresentable { .. }) => {}
            Err(e) => panic!("{e}"),
        }
    }
}

fn fragment() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        Just("# comment".to_owned()),
        Just("Switch 4 \"S\"".to_owned()),
        Just("Switch 2 \"T\" # \"t\" enhanced port 0 lid 4 lmc 1".to_owned()),
        // Refused: the base LID's low LMC bit is set.
        Just("Switch 2 \"T\" # \"t\" enhanced port 0 lid 3 lmc 1".to_owned()),
        Just("Ca 2 \"A\"".to_owned()),
        Just("Rt 1 \"R\"".to_owned()),
        Just("switchguid=0x10(10)".to_owned()),
        Just("caguid=0x20".to_owned()),
        Just("width=3".to_owned()),
        Just("vendid=0x2c9".to_owned()),
        (1u8..6, prop_oneof![Just("S"), Just("T"), Just("A"), Just("R")], 0u8..6, ".{0,12}")
            .prop_map(|(p, n, q, rest)| format!("[{p}] \"{n}\"[{q}] {rest}")),
        (1u8..4, 0u32..9).prop_map(|(p, g)| format!("[{p}]({g:x}) \"S\"[{p}] # lid {g} lmc 0 \"S\" lid 1 4xQDR")),
        "\\PC{0,40}",
        // A consistent link between two fresh nodes, with random rates at each end.
        (0u32..1000, ".{0,6}", ".{0,6}").prop_map(|(n, ra, rb)| format!(
            "\nSwitch 3 \"X{n}\"\n[2] \"Y{n}\"[1] {ra}\n\nCa 1 \"Y{n}\"\n[1] \"X{n}\"[2] {rb}\n"
        )),
        (0u32..1000, prop_oneof![Just("4xQDR"), Just("12xFDR10"), Just("1xEDR"), Just("4xHDR")])
            .prop_map(|(n, t)| format!(
                "\nSwitch 3 \"P{n}\"\n[1] \"Q{n}\"[2] # \"q\" lid {n} {t}\n\nCa 2 \"Q{n}\"\n[2](abc{n}) \"P{n}\"[1] # lid {n} lmc 0 \"p\" lid 9 4xQDR\n"
            )),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn random_lines(lines in proptest::collection::vec(fragment(), 0..16)) {
        check_accepted(&lines.join("\n"));
    }

    #[test]
    fn mutated_real_output(at in 0usize..2000, len in 0usize..6, with in "\\PC{0,3}") {
        let mut text = sample();
        let start = text.char_indices().map(|(i, _)| i).nth(at % text.chars().count()).unwrap();
        let end = text[start..].char_indices().map(|(i, _)| start + i).nth(len).unwrap_or(text.len());
        text.replace_range(start..end, &with);
        check_accepted(&text);
    }
}

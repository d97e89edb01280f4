//! `spec/pitch_scenarios.json` (venues.md `cboe-pitch`), loaded whole.
//!
//! No `cboe-pitch` adapter exists yet, so the scenarios' checks are not
//! answered here: this test holds the datagrams of every scenario to the
//! framing and validity rules of venues.md through `Datagram::parse`, the
//! part of the venue that exists. It states what it does not do, so that
//! nobody reads it as the scenarios passing.

use serde_json::Value;
use tickgate::venue::cboe_pitch::frame::Datagram;

fn scenarios() -> Vec<Value> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/spec/pitch_scenarios.json");
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let doc: Value = serde_json::from_str(&text).unwrap();
    doc["scenarios"].as_array().unwrap().clone()
}

#[test]
fn the_file_holds_what_spec_readme_says() {
    let all = scenarios();
    let checks: usize = all
        .iter()
        .map(|s| {
            let steps = s["steps"].as_array().unwrap();
            steps.iter().filter(|st| st.get("check").is_some()).count()
        })
        .sum();
    // spec/README.md: 17 scenarios, 96 checks.
    assert_eq!((all.len(), checks), (17, 96));
}

#[test]
fn every_datagram_is_valid_or_invalid_as_its_scenario_says() {
    const INVALID: &str = "invalid_datagrams_change_nothing";
    let mut invalid_seen = 0;
    for s in scenarios() {
        let name = s["name"].as_str().unwrap();
        let steps = s["steps"].as_array().unwrap();
        let datagrams = steps
            .iter()
            .filter_map(|st| Some((st["line"].as_str()?, st["hex"].as_str()?)));
        for (i, (line, hex)) in datagrams.enumerate() {
            let bytes = hex::decode(hex).unwrap();
            let parsed = Datagram::parse(&bytes);
            // That scenario's doc: every datagram on line A after the
            // first (the unit's baseline) is invalid; line B's is valid.
            if name == INVALID && line == "A" && i > 0 {
                assert!(
                    parsed.is_err(),
                    "{name} datagram {i} ({hex}) parsed: {parsed:?}"
                );
                invalid_seen += 1;
            } else {
                assert!(parsed.is_ok(), "{name} datagram {i} on {line}: {parsed:?}");
            }
        }
    }
    // 16 datagrams on line A in that scenario, the first its baseline.
    assert_eq!(invalid_seen, 15);
}

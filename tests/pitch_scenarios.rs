//! `spec/pitch_scenarios.json` (venues.md `cboe-pitch`), loaded whole.
//!
//! Every scenario is run through the `cboe-pitch` adapter with the
//! conformance harness of the other venues (tests/common/scenarios.rs:
//! datagrams on their lines at their times, checks answered through the
//! gate's protocol and compared whole). The datagrams of every scenario
//! are also held to the framing
//! and validity rules through `Datagram::parse`.

#[path = "common/scenarios.rs"]
mod scenarios;

use serde_json::Value;
use tickgate::venue::cboe_pitch::frame::Datagram;

fn scenarios() -> Vec<Value> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/spec/pitch_scenarios.json");
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let doc: Value = serde_json::from_str(&text).unwrap();
    doc["scenarios"].as_array().unwrap().clone()
}

fn checks(s: &Value) -> usize {
    let steps = s["steps"].as_array().unwrap();
    steps.iter().filter(|st| st.get("check").is_some()).count()
}

#[test]
fn the_file_holds_what_spec_readme_says() {
    let all = scenarios();
    let total: usize = all.iter().map(checks).sum();
    // spec/README.md: 17 scenarios, 96 checks.
    assert_eq!((all.len(), total), (17, 96));
}

#[test]
fn every_runnable_scenario_answers_as_specified() {
    let mut failures = Vec::new();
    let mut run = Vec::new();
    for s in scenarios() {
        let name = s["name"].as_str().unwrap();
        failures.extend(scenarios::run(&s));
        run.push((name.to_string(), checks(&s)));
    }
    let total: usize = run.iter().map(|(_, n)| n).sum();
    assert_eq!((run.len(), total), (17, 96));
    assert!(
        failures.is_empty(),
        "{} failures over {} scenarios ({total} checks):\n{}",
        failures.len(),
        run.len(),
        failures.join("\n")
    );
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

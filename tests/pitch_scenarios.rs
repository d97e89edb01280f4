//! `spec/pitch_scenarios.json` (venues.md `cboe-pitch`), loaded whole.
//!
//! Every scenario is either run through the `cboe-pitch` adapter with the
//! conformance harness of the other venues (tests/common/scenarios.rs:
//! datagrams on their lines at their times, checks answered through the
//! gate's protocol and compared whole), or listed in `NOT_RUN` with the
//! reason it cannot pass yet. A listed scenario is also run, and must
//! still fail: when it starts passing, the list has to shrink, so the list
//! cannot drift into hiding a scenario that works or claiming one that
//! does not. The datagrams of every scenario are also held to the framing
//! and validity rules through `Datagram::parse`.

#[path = "common/scenarios.rs"]
mod scenarios;

use serde_json::Value;
use tickgate::venue::cboe_pitch::frame::Datagram;

/// Scenarios the adapter cannot pass yet, and why (docs/venues.md,
/// `cboe-pitch`: what works and what does not).
const NOT_RUN: &[(&str, &str)] = &[(
    "hole_filled_from_the_gap_line",
    "the Gap Request Proxy client (R4c): its deadlines and requests are not built",
)];

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

fn not_run(name: &str) -> bool {
    NOT_RUN.iter().any(|(n, _)| *n == name)
}

#[test]
fn the_file_holds_what_spec_readme_says() {
    let all = scenarios();
    let total: usize = all.iter().map(checks).sum();
    // spec/README.md: 17 scenarios, 96 checks.
    assert_eq!((all.len(), total), (17, 96));
    // Every name in NOT_RUN is a scenario of the file.
    for (name, _) in NOT_RUN {
        assert!(
            all.iter().any(|s| s["name"] == *name),
            "NOT_RUN names {name}, which the file does not hold"
        );
    }
}

#[test]
fn every_runnable_scenario_answers_as_specified() {
    let mut failures = Vec::new();
    let mut run = Vec::new();
    for s in scenarios() {
        let name = s["name"].as_str().unwrap();
        if not_run(name) {
            continue;
        }
        failures.extend(scenarios::run(&s));
        run.push((name.to_string(), checks(&s)));
    }
    let total: usize = run.iter().map(|(_, n)| n).sum();
    assert_eq!(run.len(), 17 - NOT_RUN.len());
    // 96 checks in all, 5 of them in the scenario not run.
    assert_eq!(total, 91);
    assert!(
        failures.is_empty(),
        "{} failures over {} scenarios ({total} checks):\n{}",
        failures.len(),
        run.len(),
        failures.join("\n")
    );
}

/// The scenarios of `NOT_RUN` do not pass yet: each fails at least one
/// check. Once one passes, move it out of the list.
#[test]
fn the_scenarios_not_run_still_fail() {
    let all = scenarios();
    for (name, why) in NOT_RUN {
        let s = all.iter().find(|s| s["name"] == *name).unwrap();
        let failures = scenarios::run(s);
        eprintln!(
            "{name}: {} of {} checks fail ({why})",
            failures.len(),
            checks(s)
        );
        assert!(
            !failures.is_empty(),
            "{name} passes now: remove it from NOT_RUN (was: {why})"
        );
    }
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

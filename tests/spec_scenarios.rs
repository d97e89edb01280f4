//! Every scenario of `spec/scenarios.json` (tickgate's own
//! protocol), through the public API (harness: tests/common/scenarios.rs).

#[path = "common/scenarios.rs"]
mod scenarios;

#[test]
fn every_scenario_answers_as_specified() {
    scenarios::run_file("scenarios.json", 30);
}

//! Every scenario of the contract's `recovery_scenarios.json` (recovery.md
//! R1-R4, semantics.md C3b and C6), through the public API, with the same
//! harness as scenarios.json (tests/common/scenarios.rs).

#[path = "common/scenarios.rs"]
mod scenarios;

#[test]
fn every_recovery_scenario_answers_as_specified() {
    scenarios::run_file("recovery_scenarios.json", 20);
}

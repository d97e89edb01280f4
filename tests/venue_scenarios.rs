//! Every scenario of `spec/venue_scenarios.json` (iex-tops and
//! nasdaq-itch feeds, venues.md), through the public API, with the same
//! harness as scenarios.json (tests/common/scenarios.rs).

#[path = "common/scenarios.rs"]
mod scenarios;

#[test]
fn every_venue_scenario_answers_as_specified() {
    scenarios::run_file("venue_scenarios.json", 32);
}

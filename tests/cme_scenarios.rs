//! Every scenario of `spec/cme_scenarios.json` (venues.md `cme-mdp3`)
//! through the public API, with the harness of the other contract
//! scenarios (tests/common/scenarios.rs): packets on incremental, snapshot
//! and definition lines, checks answered by `gate::protocol::answer`.

#[path = "common/scenarios.rs"]
mod scenarios;

#[test]
fn every_cme_scenario_answers_as_specified() {
    scenarios::run_file("cme_scenarios.json", 17);
}

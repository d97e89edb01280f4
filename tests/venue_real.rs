//! The real exchange captures of fixtures/real/ (copied from
//! shared/fixtures/real/) replayed with their venue (venues.md): the facts
//! that folder's README states, and the IEX sample's checks answered
//! exactly as `iex-tops16-sample.expect` says.

use std::process::Command;

use serde_json::Value;

fn fixture(name: &str) -> String {
    format!("{}/fixtures/real/{name}", env!("CARGO_MANIFEST_DIR"))
}

fn tickgate(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tickgate"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

fn replay_json(args: &[&str]) -> Value {
    let mut all = vec!["replay"];
    all.extend_from_slice(args);
    all.push("--json");
    let (code, out, err) = tickgate(&all);
    assert_eq!(code, 0, "{err}");
    serde_json::from_str(&out).unwrap()
}

#[test]
fn iex_sample_checks_answer_exactly_as_expected() {
    let (code, out, err) = tickgate(&[
        "replay",
        &fixture("iex-tops16-sample.pcap.gz"),
        "--venue",
        "iex-tops",
        "--checks",
        &fixture("iex-tops16-sample.checks"),
    ]);
    assert_eq!(code, 0, "{err}");
    let expect = std::fs::read_to_string(fixture("iex-tops16-sample.expect")).unwrap();
    assert_eq!(out, expect);
}

#[test]
fn iex_sample_gives_the_readme_facts() {
    let v = replay_json(&[&fixture("iex-tops16-sample.pcap.gz"), "--venue", "iex-tops"]);
    let f = &v["feeds"][0];
    assert_eq!(f["venue"], "iex-tops");
    assert_eq!(f["packets"], 13_022);
    assert_eq!(f["invalid_packets"], 0);
    assert_eq!(f["channel_lost"], 0);
    assert_eq!(f["channel_gaps"], 0);
    assert_eq!(f["messages"], 57_674);
    assert_eq!(f["unknown_messages"], 0);
    let sessions = f["sessions"].as_array().unwrap();
    assert_eq!(sessions.len(), 1, "one session");
    let s = &sessions[0];
    assert_eq!(s["id"], "1137508352");
    assert_eq!(
        (s["first_sequence"].as_u64(), s["next_sequence"].as_u64()),
        (Some(1), Some(57_675))
    );
    assert_eq!(s["heartbeats"], 237);
    // System Event C ends the session (C6).
    assert_eq!(s["end_of_session"], true);
    let types = &f["message_types"];
    for (t, n) in [
        ("Q", 27_217),
        ("H", 7_803),
        ("P", 7_802),
        ("O", 7_801),
        ("T", 6_390),
        ("A", 642),
        ("D", 10),
        ("S", 6),
        ("B", 3),
    ] {
        assert_eq!(types[t], n, "{t} messages");
    }
    assert_eq!(types.as_object().unwrap().len(), 9);
    assert_eq!(f["symbols_quoted"], 7_799);
}

/// The three symbols the README says IEX halted are answered `halted` at
/// some point of the replay, and a symbol it never halted never is.
#[test]
fn iex_sample_halts_mill_zeus_and_path() {
    let expect = std::fs::read_to_string(fixture("iex-tops16-sample.expect")).unwrap();
    for sym in ["MILL", "ZEUS", "PATH"] {
        assert!(
            expect
                .lines()
                .any(|l| l.starts_with(&format!("REJECT {sym} halted"))),
            "{sym}"
        );
    }
    let v = replay_json(&[&fixture("iex-tops16-sample.pcap.gz"), "--venue", "iex-tops"]);
    let syms = &v["feeds"][0]["symbols"];
    assert_eq!(syms["AAPL"]["trading"], "trading");
    // At the end ZEUS and PATH are still halted; MILL resumed.
    assert_eq!(syms["ZEUS"]["trading"], "halted");
    assert_eq!(syms["PATH"]["trading"], "halted");
    assert_eq!(syms["MILL"]["trading"], "trading");
}

#[test]
fn iex_single_quote_update_decodes() {
    let v = replay_json(&[
        &fixture("iex-tops16-quote-update.pcap"),
        "--venue",
        "iex-tops",
    ]);
    let f = &v["feeds"][0];
    assert_eq!(f["packets"], 1);
    assert_eq!(f["invalid_packets"], 0);
    assert_eq!(f["message_types"]["Q"], 1);
    assert_eq!(f["symbols_quoted"], 1);
}

#[test]
fn mode_does_not_apply_to_venue_feeds() {
    let (code, _, err) = tickgate(&[
        "replay",
        &fixture("iex-tops16-quote-update.pcap"),
        "--venue",
        "iex-tops",
        "--mode",
        "full",
    ]);
    assert_eq!(code, 2);
    assert!(
        err.contains("--mode does not apply to --venue iex-tops"),
        "{err}"
    );
}

//! venues.md `cboe-pitch`, Units and symbols: the gate's readers answer a
//! symbol of one unit from that unit's state, as replay does. Every
//! scenario of `spec/pitch_scenarios.json` is run twice: through the feed's
//! own check (`Feed::feed_view_for`, replay's answer) and through a feed
//! publishing into a shared state file (`daemon::shm::publish`), whose
//! answers are read by the gate socket's reader and by the shared-memory
//! client. All three must be the same bytes at every check.

#[path = "common/scenarios.rs"]
mod scenarios;
#[path = "common/shm.rs"]
mod shm;

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;
use shm::{shm_answer, Rig};
use tickgate::feed::check::SymbolLookup;
use tickgate::feed::{Feed, FeedSettings};
use tickgate::gate::protocol::answer;
use tickgate::venue::LineKind;

fn scenarios() -> Vec<Value> {
    let text = std::fs::read_to_string(scenarios::spec_path("pitch_scenarios.json")).unwrap();
    let doc: Value = serde_json::from_str(&text).unwrap();
    doc["scenarios"].as_array().unwrap().clone()
}

/// Line index of each named line: A and B are 0 and 1, others follow.
fn lines(sc: &Value) -> Vec<(String, usize, LineKind)> {
    let mut kinds: Vec<(String, usize, LineKind)> = Vec::new();
    if let Some(lines) = sc["feed"]["lines"].as_object() {
        for (name, kind) in lines {
            let kind = LineKind::parse(kind.as_str().unwrap()).unwrap();
            let index = match name.as_str() {
                "A" => 0,
                "B" => 1,
                _ => 2 + kinds.iter().filter(|(_, i, _)| *i >= 2).count(),
            };
            kinds.push((name.clone(), index, kind));
        }
    }
    kinds
}

fn set_up<P: tickgate::feed::view::Publish>(
    feed: &mut Feed<P>,
    kinds: &[(String, usize, LineKind)],
) {
    while feed.lines() < 2 + kinds.iter().filter(|(_, i, _)| *i >= 2).count() {
        feed.add_line();
    }
    for (_, index, kind) in kinds {
        feed.set_line_kind(*index, *kind);
    }
}

fn deliver<P: tickgate::feed::view::Publish>(
    feed: &mut Feed<P>,
    kinds: &[(String, usize, LineKind)],
    step: &Value,
    bytes: &[u8],
    t: i64,
) {
    match step["line"].as_str() {
        Some("rerequest") => {
            feed.on_rerequest_answer(bytes, t);
        }
        Some(l) => {
            let index = kinds
                .iter()
                .find(|(n, _, _)| n == l)
                .map_or(if l == "B" { 1 } else { 0 }, |k| k.1);
            feed.on_datagram(index, bytes, t);
        }
        None => {
            feed.on_datagram(0, bytes, t);
        }
    }
    while feed.poll_request().is_some() {}
}

/// Replay's answer: the feed's own check.
fn replay_answer(feed: &Feed, check: &str, t: i64) -> String {
    let mut out = Vec::new();
    let feeds: [&dyn SymbolLookup; 1] = [feed];
    answer(check.as_bytes(), &feeds, t, &mut out);
    String::from_utf8(out).unwrap()
}

/// Runs `sc` both ways; returns (check, replay, socket, shm) per check.
/// `at_check` sees the rig at each check (its time given).
fn run_with(
    sc: &Value,
    mut at_check: impl FnMut(&mut Rig, i64),
) -> Vec<(String, String, String, String)> {
    let settings: FeedSettings = scenarios::settings(&sc["feed"]);
    let kinds = lines(sc);
    let mut replay = Feed::new(settings, 2);
    set_up(&mut replay, &kinds);
    let mut rig = Rig::new(&[("cboe", settings)]);
    let mut client = rig.client();
    set_up(&mut rig.feeds[0], &kinds);
    let mut out = Vec::new();
    for step in sc["steps"].as_array().unwrap() {
        let t = step["t"].as_i64().unwrap();
        if let Some(hex) = step["hex"].as_str() {
            let bytes = hex::decode(hex).unwrap();
            deliver(&mut replay, &kinds, step, &bytes, t);
            deliver(&mut rig.feeds[0], &kinds, step, &bytes, t);
        } else if let Some(check) = step["check"].as_str() {
            replay.handle_timeout(t);
            rig.feeds[0].handle_timeout(t);
            let r = replay_answer(&replay, check, t);
            let s = rig.socket_answer(check, t);
            let m = shm_answer(&mut client, check, t);
            out.push((check.to_string(), r, s, m));
            at_check(&mut rig, t);
        }
    }
    out
}

fn run(sc: &Value) -> Vec<(String, String, String, String)> {
    run_with(sc, |_, _| {})
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `cargo build -p tickgate-c` (same profile as this test, as
/// tests/shm_ffi.rs does); the library's directory.
fn libdir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap().parent().unwrap().to_path_buf();
    let keep = |k: &str| !k.starts_with("CARGO_") || k == "CARGO_HOME" || k == "CARGO_TARGET_DIR";
    let mut cmd = Command::new(env!("CARGO"));
    cmd.env_clear()
        .envs(std::env::vars().filter(|(k, _)| keep(k)))
        .current_dir(root())
        .args(["build", "-p", "tickgate-c"]);
    if dir.file_name().unwrap() == "release" {
        cmd.arg("--release");
    }
    assert!(cmd.status().unwrap().success(), "cargo build -p tickgate-c");
    dir
}

/// The Python client's answers (clients/python, over libtickgate) to
/// `CHECK` of each symbol at `now`, concatenated.
fn python_answers(rig: &Rig, symbols: &[&str], now: i64) -> String {
    let script = r#"
import os, sys, tickgate
now = int(os.environ["NOW"])
with tickgate.Client(os.environ["SHM"]) as c:
    for sym in os.environ["SYMBOLS"].split(","):
        sys.stdout.write(c.check(sym, now_ns=now).line)
"#;
    let out = Command::new("python3")
        .args(["-c", script])
        .env("PYTHONPATH", root().join("clients/python"))
        .env("TICKGATE_LIB", libdir().join("libtickgate.so"))
        .env("SHM", &rig.shm)
        .env("NOW", now.to_string())
        .env("SYMBOLS", symbols.join(","))
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn socket_and_shared_memory_answer_per_unit_as_replay_does() {
    let mut checks = 0;
    let mut failures = Vec::new();
    for sc in scenarios() {
        let name = sc["name"].as_str().unwrap().to_string();
        for (check, r, s, m) in run(&sc) {
            checks += 1;
            if r != s || r != m {
                failures.push(format!(
                    "{name} `{check}`:\n  replay {r}  socket {s}  shm    {m}"
                ));
            }
        }
    }
    assert_eq!(checks, 96, "spec/README.md: 96 checks");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A hole open on unit 2 (its datagram 2 lost on lines A and B, the next
/// one held, gap_hold_us not yet passed): unit 2's symbol answers
/// `recovering` while unit 1's stays OK, through the socket, the shared
/// memory and the Python client alike, as replay answers.
#[test]
fn a_hole_on_one_unit_leaves_the_other_units_symbols_ok() {
    let sc = scenarios()
        .into_iter()
        .find(|s| s["name"] == "two_units_a_loss_on_one")
        .unwrap();
    let mut python = None;
    let answers = run_with(&sc, |rig, t| {
        // The first check: the hole is open.
        if python.is_none() {
            python = Some(python_answers(rig, &["AAPL", "MSFT"], t));
        }
    });
    let (_, aapl, s, m) = &answers[1];
    assert!(aapl.starts_with("OK AAPL "), "{aapl}");
    assert_eq!((s, m), (aapl, aapl));
    let (_, msft, s, m) = &answers[0];
    assert!(msft.starts_with("REJECT MSFT "), "{msft}");
    assert!(msft.ends_with(" suspect=recovering\n"), "{msft}");
    assert_eq!((s, m), (msft, msft));
    assert_eq!(python.unwrap(), format!("{aapl}{msft}"));
}

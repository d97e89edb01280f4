//! The conformance scenario harness shared by tests/spec_scenarios.rs
//! (scenarios.json), tests/venue_scenarios.rs (venue_scenarios.json) and
//! tests/recovery_scenarios.rs (recovery_scenarios.json): packets fed at
//! time `t` on line A (0) or B (1) or as a re-request answer, checks
//! answered through
//! the public `gate::protocol::answer` and compared whole (`expect`) or by
//! prefix (`expect_prefix`).

#![allow(dead_code)]

use serde_json::Value;
use tickgate::feed::check::SymbolLookup;
use tickgate::feed::{ClockOffset, Feed, FeedSettings, Liveness, Mode, Recovery, VenueKind};
use tickgate::gate::protocol::answer;
use tickgate::venue::LineKind;

/// The path of a contract file (`vectors.json`, `scenarios.json`, ...) in
/// the repository's copy of the contract, `spec/`.
pub fn spec_path(file: &str) -> String {
    concat!(env!("CARGO_MANIFEST_DIR"), "/spec/").to_string() + file
}

/// A scenario's feed settings; unset keys keep the defaults (of the
/// venue, venues.md, when the feed names one).
pub fn settings(feed: &Value) -> FeedSettings {
    let venue = match feed["venue"].as_str() {
        None => VenueKind::Tickgate,
        Some(v) => VenueKind::parse(v).unwrap_or_else(|| panic!("unknown venue {v}")),
    };
    let d = FeedSettings::for_venue(venue);
    let mut venue_settings = d.venue;
    if let Some(n) = feed["max_orders"].as_u64() {
        venue_settings.max_orders = n as usize;
    }
    FeedSettings {
        mode: match feed["mode"].as_str() {
            Some("delta") => Mode::Delta,
            Some("full") | None => Mode::Full,
            Some(m) => panic!("unknown mode {m}"),
        },
        liveness: match feed["liveness"].as_str() {
            Some("channel") => Liveness::Channel,
            Some("symbol") => Liveness::Symbol,
            None => d.liveness,
            Some(l) => panic!("unknown liveness {l}"),
        },
        stale_ms: feed["stale_ms"].as_u64().unwrap_or(d.stale_ms),
        source_max_age_ms: feed["source_max_age_ms"]
            .as_u64()
            .unwrap_or(d.source_max_age_ms),
        max_seq_jump: feed["max_seq_jump"].as_u64().unwrap_or(d.max_seq_jump),
        clock_offset: match &feed["clock_offset"] {
            Value::String(s) if s == "off" => ClockOffset::Off,
            Value::String(s) if s == "auto" => ClockOffset::Auto,
            Value::Null => ClockOffset::Auto,
            v => ClockOffset::FixedNs(
                v.as_i64().unwrap_or_else(|| panic!("bad clock_offset {v}")) * 1_000_000,
            ),
        },
        venue: venue_settings,
        max_channel_jump: feed["max_channel_jump"]
            .as_u64()
            .unwrap_or(d.max_channel_jump),
        recovery: Recovery {
            gap_hold_us: feed["gap_hold_us"]
                .as_u64()
                .unwrap_or(d.recovery.gap_hold_us),
            gap_hold_packets: feed["gap_hold_packets"]
                .as_u64()
                .map_or(d.recovery.gap_hold_packets, |n| n as usize),
            rerequest_servers: feed["rerequest"]
                .as_array()
                .map_or(d.recovery.rerequest_servers, |a| a.len()),
            // R4c: a Gap Request Proxy, with its count limit.
            gap_proxy: feed["grp"].as_object().map(|g| {
                g.get("max_count")
                    .and_then(|n| n.as_u64())
                    .map_or(100, |n| n as u16)
            }),
            rerequest_timeout_ms: feed["rerequest_timeout_ms"]
                .as_u64()
                .unwrap_or(d.recovery.rerequest_timeout_ms),
            rerequest_attempts: feed["rerequest_attempts"]
                .as_u64()
                .map_or(d.recovery.rerequest_attempts, |n| n as u32),
            max_hole_ms: feed["max_hole_ms"]
                .as_u64()
                .unwrap_or(d.recovery.max_hole_ms),
            snapshot: false,
            ..Recovery::default()
        },
        ..d
    }
}

/// Runs one scenario; returns its failures.
pub fn run(sc: &Value) -> Vec<String> {
    let name = sc["name"].as_str().unwrap();
    // venues.md `cme-mdp3`: named lines of three kinds; A and B stay lines
    // 0 and 1 (incremental), the others follow.
    let mut kinds: Vec<(String, usize, LineKind)> = Vec::new();
    if let Some(lines) = sc["feed"]["lines"].as_object() {
        for (name, kind) in lines {
            let kind = LineKind::parse(kind.as_str().unwrap())
                .unwrap_or_else(|| panic!("{name}: unknown line kind {kind}"));
            let index = match name.as_str() {
                "A" => 0,
                "B" => 1,
                _ => 2 + kinds.iter().filter(|(_, i, _)| *i >= 2).count(),
            };
            kinds.push((name.clone(), index, kind));
        }
    }
    let mut feed = Feed::new(settings(&sc["feed"]), 2 + kinds.len());
    for (_, index, kind) in &kinds {
        feed.set_line_kind(*index, *kind);
    }
    let mut failures = Vec::new();
    let mut out = Vec::new();
    for (i, step) in sc["steps"].as_array().unwrap().iter().enumerate() {
        let t = step["t"].as_i64().unwrap();
        if let Some(hex) = step["hex"].as_str() {
            let bytes = hex::decode(hex).unwrap();
            match step["line"].as_str() {
                Some("A") | None => feed.on_datagram(0, &bytes, t),
                Some("B") => feed.on_datagram(1, &bytes, t),
                // recovery.md: an answer from the feed's first server.
                Some("rerequest") => feed.on_rerequest_answer(&bytes, t),
                Some(l) if kinds.iter().any(|(n, _, _)| n == l) => {
                    let (_, index, _) = kinds.iter().find(|(n, _, _)| n == l).unwrap();
                    feed.on_datagram(*index, &bytes, t)
                }
                Some(l) => panic!("{name}: unknown line {l}"),
            };
            // R4: requests are the I/O shell's to send; here they go nowhere.
            while feed.poll_request().is_some() {}
        } else if let Some(check) = step["check"].as_str() {
            // R2: deadlines that passed before the check are declared first.
            feed.handle_timeout(t);
            out.clear();
            let feeds: [&dyn SymbolLookup; 1] = [&feed];
            answer(check.as_bytes(), &feeds, t, &mut out);
            let got = std::str::from_utf8(&out).unwrap();
            let got = got
                .strip_suffix('\n')
                .unwrap_or_else(|| panic!("{name}: answer without newline: {got:?}"));
            assert!(!got.contains('\n'), "{name}: one line per answer");
            if let Some(expect) = step["expect"].as_str() {
                if got != expect {
                    failures.push(format!(
                        "{name} step {i} `{check}`:\n   expected {expect}\n   got      {got}"
                    ));
                }
            } else if let Some(prefix) = step["expect_prefix"].as_str() {
                if !got.starts_with(prefix) {
                    failures.push(format!(
                        "{name} step {i} `{check}`:\n   expected prefix {prefix:?}\n   got {got}"
                    ));
                }
            } else {
                panic!("{name} step {i}: check without expectation");
            }
        } else {
            panic!("{name} step {i}: neither packet nor check");
        }
    }
    failures
}

/// Every scenario of `file` (the contract's count given): all failures are
/// collected and reported at once.
pub fn run_file(file: &str, expected_scenarios: usize) {
    let text = std::fs::read_to_string(spec_path(file)).unwrap();
    let doc: Value = serde_json::from_str(&text).unwrap();
    let scenarios = doc["scenarios"].as_array().unwrap();
    assert_eq!(
        scenarios.len(),
        expected_scenarios,
        "the contract's {file} has {expected_scenarios} scenarios"
    );
    let mut failures = Vec::new();
    let mut checks = 0;
    for sc in scenarios {
        checks += sc["steps"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| s.get("check").is_some())
            .count();
        failures.extend(run(sc));
    }
    assert!(checks > scenarios.len());
    assert!(
        failures.is_empty(),
        "{} of {checks} checks failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

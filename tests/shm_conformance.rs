//! Conformance of the shared-memory client with the socket: random feeds
//! drive a feed whose table lives in the state file, and after every
//! packet every symbol is asked both ways at the same clock; the answers
//! must be equal byte for byte.
//!
//! - tickgate-protocol feeds from the simulator (`sim::simulate`):
//!   loss (gaps), duplicates and reordering on two lines, session changes,
//!   an unbelievable sequence (suspicion), end of session, full and delta,
//!   both liveness rules, clock offsets off, automatic and fixed;
//! - iex-tops venue feeds: the packets of spec/venue_scenarios.json's
//!   IEX scenarios (halts, quote-flag halts, gaps, session changes, clock
//!   offsets) replayed in random order with repeats at random times.

use proptest::prelude::*;
use serde_json::Value;

use tickgate::feed::{ClockOffset, FeedSettings, Liveness, Mode};
use tickgate::sim::simulate::{symbol_name, SimConfig, SimMode, Simulator};

#[path = "common/scenarios.rs"]
mod scenarios;
#[path = "common/shm.rs"]
mod shm;
use shm::{shm_answer, Rig};

const MS: i64 = 1_000_000;

/// Asks `lines` both ways at `now`; the first difference, if any.
fn compare(
    rig: &mut Rig,
    client: &mut tickgate::client::Client,
    lines: &[String],
    now: i64,
) -> Result<(), String> {
    for l in lines {
        let socket = rig.socket_answer(l, now);
        let mapped = shm_answer(client, l, now);
        if socket != mapped {
            return Err(format!("`{l}` at {now}:\n socket {socket} shm    {mapped}"));
        }
    }
    Ok(())
}

/// For each symbol: the plain check and a tightened one.
fn requests(symbols: &[String]) -> Vec<String> {
    let mut v = Vec::new();
    for s in symbols {
        v.push(format!("CHECK {s}"));
        v.push(format!("CHECK {s} stale_ms=100 source_ms=300"));
    }
    v.push("CHECK NOTTHERE".to_string());
    v
}

#[derive(Debug, Clone)]
struct Sim {
    seed: u64,
    symbols: usize,
    delta: bool,
    channel_liveness: bool,
    clock: u8,
    loss: f64,
    dup: f64,
    reorder: f64,
    session_change: bool,
    bad_seq: bool,
    end_session: bool,
}

fn sim() -> impl Strategy<Value = Sim> {
    (
        any::<u64>(),
        2usize..7,
        any::<bool>(),
        any::<bool>(),
        0u8..3,
        prop_oneof![Just(0.0), 0.0..0.3f64],
        prop_oneof![Just(0.0), 0.0..0.2f64],
        prop_oneof![Just(0.0), 0.0..0.2f64],
        (any::<bool>(), any::<bool>(), any::<bool>()),
    )
        .prop_map(
            |(seed, symbols, delta, channel_liveness, clock, loss, dup, reorder, (s, b, e))| Sim {
                seed,
                symbols,
                delta,
                channel_liveness,
                clock,
                loss,
                dup,
                reorder,
                session_change: s,
                bad_seq: b,
                end_session: e,
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn simulated_feeds_answer_alike(p in sim()) {
        let mut cfg = SimConfig::new(p.seed);
        cfg.symbols = p.symbols;
        cfg.rate = 400;
        cfg.duration_ns = 400 * MS;
        cfg.mode = if p.delta { SimMode::Delta } else { SimMode::Full };
        cfg.snapshot_ms = if p.delta { 100 } else { 0 };
        cfg.heartbeat_ms = 50;
        cfg.channel_heartbeat_ms = 30;
        for l in &mut cfg.lines {
            l.loss = p.loss;
        }
        cfg.dup = p.dup;
        cfg.reorder = p.reorder;
        cfg.session_change_at_ns = p.session_change.then_some(200 * MS);
        cfg.bad_seq_at_ns = p.bad_seq.then_some(120 * MS);
        cfg.end_session = p.end_session;
        let settings = FeedSettings {
            mode: if p.delta { Mode::Delta } else { Mode::Full },
            liveness: if p.channel_liveness { Liveness::Channel } else { Liveness::Symbol },
            clock_offset: match p.clock {
                0 => ClockOffset::Off,
                1 => ClockOffset::Auto,
                _ => ClockOffset::FixedNs(-3 * MS),
            },
            stale_ms: 200,
            source_max_age_ms: 500,
            max_symbols: 64,
            ..FeedSettings::default()
        };
        let mut rig = Rig::new(&[("md1", settings)]);
        let mut client = rig.client();
        let names: Vec<String> = (0..p.symbols).map(symbol_name).collect();
        let lines = requests(&names);
        let mut sim = Simulator::new(cfg).unwrap();
        let mut buf = Vec::new();
        let mut packets = 0;
        while let Some(ev) = sim.next_into(&mut buf) {
            rig.feeds[0].on_datagram(ev.line, &buf, ev.t_ns);
            packets += 1;
            // At the packet's time, and later (ages cross the thresholds).
            let later = ev.t_ns + (packets % 5) as i64 * 90 * MS;
            for now in [ev.t_ns, later] {
                if let Err(e) = compare(&mut rig, &mut client, &lines, now) {
                    return Err(TestCaseError::fail(format!("packet {packets}: {e}")));
                }
            }
        }
        prop_assert!(packets > 10);
    }
}

/// A venue scenario: its feed, its packets (line, bytes), the symbols it
/// checks.
type Scenario = (Value, Vec<(usize, Vec<u8>)>, Vec<String>);

/// The IEX scenarios of venue_scenarios.json.
fn iex_scenarios() -> Vec<Scenario> {
    let text = std::fs::read_to_string(scenarios::spec_path("venue_scenarios.json")).unwrap();
    let doc: Value = serde_json::from_str(&text).unwrap();
    doc["scenarios"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["feed"]["venue"] == "iex-tops")
        .map(|s| {
            let steps = s["steps"].as_array().unwrap();
            let packets = steps
                .iter()
                .filter_map(|st| {
                    let hex = st["hex"].as_str()?;
                    let line = usize::from(st["line"].as_str() == Some("B"));
                    Some((line, hex::decode(hex).unwrap()))
                })
                .collect();
            let mut symbols: Vec<String> = steps
                .iter()
                .filter_map(|st| st["check"].as_str()?.split(' ').nth(1).map(String::from))
                .collect();
            symbols.sort();
            symbols.dedup();
            (s["feed"].clone(), packets, symbols)
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn iex_feeds_with_halts_answer_alike(
        which in any::<prop::sample::Index>(),
        order in prop::collection::vec((any::<prop::sample::Index>(), 0i64..3000), 1..40),
    ) {
        let all = iex_scenarios();
        prop_assert!(all.len() >= 10, "the IEX scenarios are there");
        let (feed, packets, symbols) = &all[which.index(all.len())];
        let mut rig = Rig::new(&[("iex", FeedSettings { max_symbols: 64, ..scenarios::settings(feed) })]);
        let mut client = rig.client();
        let lines = requests(symbols);
        let mut t = 1_768_487_400_000_000_000i64;
        for (i, (pick, step_ms)) in order.iter().enumerate() {
            let (line, bytes) = &packets[pick.index(packets.len())];
            t += step_ms * MS / 3;
            rig.feeds[0].on_datagram(*line, bytes, t);
            if let Err(e) = compare(&mut rig, &mut client, &lines, t + 1000 * MS * (i % 3) as i64) {
                return Err(TestCaseError::fail(format!("packet {i}: {e}")));
            }
        }
    }
}

/// The venue scenarios in order: the halts are seen through the mapping
/// (so the random replays above do exercise `halted`).
#[test]
fn iex_halts_are_seen_through_the_mapping() {
    let mut halted = 0;
    for (feed, packets, symbols) in iex_scenarios() {
        let mut rig = Rig::new(&[(
            "iex",
            FeedSettings {
                max_symbols: 64,
                ..scenarios::settings(&feed)
            },
        )]);
        let mut client = rig.client();
        let lines = requests(&symbols);
        let mut t = 1_768_487_400_000_000_000i64;
        for (line, bytes) in &packets {
            t += MS;
            rig.feeds[0].on_datagram(*line, bytes, t);
            compare(&mut rig, &mut client, &lines, t).unwrap();
            halted += lines
                .iter()
                .filter(|l| shm_answer(&mut client, l, t).contains("halted"))
                .count();
        }
    }
    assert!(halted > 0, "no scenario showed a halt");
}

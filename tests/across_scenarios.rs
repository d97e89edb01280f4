//! gate.md "One symbol on several feeds": every scenario of
//! `spec/across_scenarios.json` (several feeds in one config, steps naming
//! `<feed>.<line>`), answered three ways, each compared with the contract's
//! line:
//! - the gate socket (`gate::server::Gate` with the scenario's `[gate]`
//!   rules) over feeds whose tables live in a published state file;
//! - the shared-memory client reading that file (the rules from its
//!   header);
//! - `tickgate replay --checks` on the scenario written as a capture with
//!   one destination per line and a config of several feeds.

use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddrV4;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use serde_json::Value;
use tickgate::capture::PcapWriter;
use tickgate::client::Client;
use tickgate::daemon::shm::{publish_with_rules, DEFAULT_MODE};
use tickgate::feed::across::{Across, GateRules};
use tickgate::feed::reader::{feed_table_in, TablePublisher};
use tickgate::feed::shm::FeedSpec;
use tickgate::feed::Feed;
use tickgate::gate::server::{serve, Backend, Gate, ServerConfig};
use tickgate::wire::Symbol;

#[path = "common/scenarios.rs"]
mod scenarios;

const SCENARIOS: usize = 12;

fn doc() -> Value {
    let text = std::fs::read_to_string(scenarios::spec_path("across_scenarios.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn rules(sc: &Value) -> GateRules {
    let g = &sc["gate"];
    let across = match g["across"].as_str() {
        None => Across::All,
        Some(a) => Across::parse(a).unwrap_or_else(|| panic!("across {a}")),
    };
    GateRules::new(across, g["crossed_ms"].as_u64().unwrap_or(50))
}

/// The scenario's configured symbols of a feed: (symbol, stale_ms,
/// source_max_age_ms), the feed's own thresholds where unset.
fn configured(feed: &Value) -> Vec<(Symbol, u64, u64)> {
    let s = scenarios::settings(feed);
    feed["symbols"]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(name, t)| {
                    (
                        Symbol::parse(name).unwrap(),
                        t["stale_ms"].as_u64().unwrap_or(s.stale_ms),
                        t["source_max_age_ms"]
                            .as_u64()
                            .unwrap_or(s.source_max_age_ms),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// (feed index, line index) of a step's `<feed>.<line>`.
fn route(sc: &Value, line: &str) -> (usize, usize) {
    let (feed, l) = line.split_once('.').expect("<feed>.<line>");
    let feeds = sc["feeds"].as_array().unwrap();
    let fi = feeds
        .iter()
        .position(|f| f["name"] == feed)
        .unwrap_or_else(|| panic!("no feed {feed}"));
    let li = feeds[fi]["lines"]
        .as_object()
        .unwrap()
        .keys()
        .position(|k| k == l)
        .unwrap_or_else(|| panic!("no line {l} in {feed}"));
    (fi, li)
}

/// The live gate answering at the test's clock.
struct AtClock {
    gate: Gate,
    now: Arc<AtomicI64>,
}

impl Backend for AtClock {
    fn answer(&self, line: &[u8], _now: i64, out: &mut Vec<u8>) {
        self.gate.answer(line, self.now.load(Ordering::SeqCst), out)
    }
}

/// Compares `got` (with its `\n`) with the step's expectation.
fn judge(name: &str, way: &str, step: &Value, got: &str, failures: &mut Vec<String>) {
    let check = step["check"].as_str().unwrap();
    let got = got
        .strip_suffix('\n')
        .unwrap_or_else(|| panic!("{name}: {way} answer without newline: {got:?}"));
    if let Some(expect) = step["expect"].as_str() {
        if got != expect {
            failures.push(format!(
                "{name} ({way}) `{check}`:\n   expected {expect}\n   got      {got}"
            ));
        }
    } else {
        let prefix = step["expect_prefix"].as_str().expect("expect or prefix");
        if !got.starts_with(prefix) {
            failures.push(format!(
                "{name} ({way}) `{check}`:\n   expected prefix {prefix:?}\n   got {got}"
            ));
        }
    }
}

/// One scenario through the socket and the shared memory; returns the
/// checks asked.
fn socket_and_shm(sc: &Value, failures: &mut Vec<String>) -> usize {
    let name = sc["name"].as_str().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let shm = dir.path().join("state.shm");
    let sock = dir.path().join("gate.sock");
    let rules = rules(sc);
    let feed_docs = sc["feeds"].as_array().unwrap();
    let specs: Vec<FeedSpec> = feed_docs
        .iter()
        .map(|f| {
            let s = scenarios::settings(f);
            FeedSpec {
                name: f["name"].as_str().unwrap().to_string(),
                capacity: 64,
                stale_ms: s.stale_ms,
                source_max_age_ms: s.source_max_age_ms,
                units: s.venue.kind.unit_cells() as u32,
            }
        })
        .collect();
    let (_published, regions) = publish_with_rules(&shm, DEFAULT_MODE, &specs, &rules).unwrap();
    let mut feeds: Vec<Feed<TablePublisher>> = Vec::new();
    let mut readers = Vec::new();
    for ((f, spec), r) in feed_docs.iter().zip(&specs).zip(&regions) {
        let (publisher, reader) =
            feed_table_in(r.capacity, &r.cell, &r.table, r.units, &r.units_region).unwrap();
        let lines = f["lines"].as_object().unwrap().len();
        let mut feed = Feed::with_publisher(scenarios::settings(f), lines, publisher);
        for (sym, stale, source) in configured(f) {
            feed.set_symbol_thresholds(sym, stale, source).unwrap();
        }
        feeds.push(feed);
        readers.push((spec.name.clone(), reader));
    }
    let now = Arc::new(AtomicI64::new(0));
    let server = serve(
        &ServerConfig {
            path: sock.clone(),
            ..ServerConfig::default()
        },
        AtClock {
            gate: Gate::with_rules(readers, rules),
            now: now.clone(),
        },
    )
    .unwrap();
    let mut conn = BufReader::new(UnixStream::connect(&sock).unwrap());
    let mut client = Client::open(&shm).unwrap();
    assert_eq!(client.header().rules, rules, "{name}: rules in the header");
    let mut checks = 0;
    for step in sc["steps"].as_array().unwrap() {
        let t = step["t"].as_i64().unwrap();
        if let Some(hex) = step["hex"].as_str() {
            let (fi, li) = route(sc, step["line"].as_str().unwrap());
            feeds[fi].on_datagram(li, &hex::decode(hex).unwrap(), t);
            continue;
        }
        let check = step["check"].as_str().expect("a packet or a check");
        for f in &mut feeds {
            f.handle_timeout(t);
        }
        now.store(t, Ordering::SeqCst);
        conn.get_mut()
            .write_all(format!("{check}\n").as_bytes())
            .unwrap();
        let mut socket = String::new();
        conn.read_line(&mut socket).unwrap();
        judge(name, "socket", step, &socket, failures);
        let mut mapped = Vec::new();
        client.answer(check.as_bytes(), t, &mut mapped).unwrap();
        judge(
            name,
            "shm",
            step,
            &String::from_utf8(mapped).unwrap(),
            failures,
        );
        checks += 1;
    }
    drop(conn);
    server.stop();
    checks
}

/// The scenario's feeds and `[gate]` table as a config file.
fn config_of(sc: &Value) -> String {
    let mut c = String::new();
    for f in sc["feeds"].as_array().unwrap() {
        c += &format!("[[feed]]\nname = {}\n", f["name"]);
        for key in ["mode", "liveness", "clock_offset"] {
            if let Some(s) = f[key].as_str() {
                c += &format!("{key} = \"{s}\"\n");
            }
        }
        for key in ["stale_ms", "source_max_age_ms", "max_seq_jump"] {
            if let Some(n) = f[key].as_u64() {
                c += &format!("{key} = {n}\n");
            }
        }
        for (line, addr) in f["lines"].as_object().unwrap() {
            let a: SocketAddrV4 = addr.as_str().unwrap().parse().unwrap();
            c += &format!(
                "[[feed.line]]\nname = \"{line}\"\ngroup = \"{}\"\nport = {}\n",
                a.ip(),
                a.port()
            );
        }
        if let Some(symbols) = f["symbols"].as_object() {
            for (sym, t) in symbols {
                c += &format!("[feed.symbols.{sym}]\n");
                for key in ["stale_ms", "source_max_age_ms"] {
                    if let Some(n) = t[key].as_u64() {
                        c += &format!("{key} = {n}\n");
                    }
                }
            }
        }
        c += "\n";
    }
    let g = &sc["gate"];
    c += "[gate]\nshm = false\n";
    if let Some(a) = g["across"].as_str() {
        c += &format!("across = \"{a}\"\n");
    }
    if let Some(n) = g["crossed_ms"].as_u64() {
        c += &format!("crossed_ms = {n}\n");
    }
    c
}

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// One scenario through `tickgate replay --checks`; returns the checks.
fn replay(sc: &Value, dir: &Path, failures: &mut Vec<String>) -> usize {
    let name = sc["name"].as_str().unwrap();
    let cfg = dir.join(format!("{name}.toml"));
    std::fs::write(&cfg, config_of(sc)).unwrap();
    let cap = dir.join(format!("{name}.pcap"));
    let chk = dir.join(format!("{name}.checks"));
    let src: SocketAddrV4 = "10.0.0.1:40000".parse().unwrap();
    let mut w = PcapWriter::create(&cap).unwrap();
    let mut lines = String::new();
    let mut asked = Vec::new();
    for step in sc["steps"].as_array().unwrap() {
        let t = step["t"].as_i64().unwrap();
        if let Some(h) = step["hex"].as_str() {
            let (feed, line) = step["line"].as_str().unwrap().split_once('.').unwrap();
            let f = sc["feeds"]
                .as_array()
                .unwrap()
                .iter()
                .find(|f| f["name"] == feed)
                .unwrap();
            let dst: SocketAddrV4 = f["lines"][line].as_str().unwrap().parse().unwrap();
            w.write_udp(t, src, dst, &hex::decode(h).unwrap()).unwrap();
        } else {
            lines += &format!("{t} {}\n", step["check"].as_str().unwrap());
            asked.push(step);
        }
    }
    w.into_inner().unwrap();
    std::fs::write(&chk, lines).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_tickgate"))
        .args(["replay", p(&cap), "--config", p(&cfg), "--checks", p(&chk)])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{name}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got = String::from_utf8(out.stdout).unwrap();
    let got: Vec<&str> = got.lines().collect();
    assert_eq!(got.len(), asked.len(), "{name}: {got:?}");
    for (g, step) in got.iter().zip(&asked) {
        judge(name, "replay", step, &format!("{g}\n"), failures);
    }
    asked.len()
}

#[test]
fn every_across_scenario_through_the_socket_and_shared_memory() {
    let doc = doc();
    let scenarios = doc["scenarios"].as_array().unwrap();
    assert_eq!(scenarios.len(), SCENARIOS);
    let mut failures = Vec::new();
    let mut checks = 0;
    for sc in scenarios {
        checks += socket_and_shm(sc, &mut failures);
    }
    assert!(checks > 30, "{checks}");
    assert!(
        failures.is_empty(),
        "{} of {} answers differ:\n{}",
        failures.len(),
        checks * 2,
        failures.join("\n")
    );
}

#[test]
fn every_across_scenario_through_replay_with_a_config_of_several_feeds() {
    let doc = doc();
    let scenarios = doc["scenarios"].as_array().unwrap();
    assert_eq!(scenarios.len(), SCENARIOS);
    let dir = tempfile::tempdir().unwrap();
    let mut failures = Vec::new();
    let mut checks = 0;
    for sc in scenarios {
        checks += replay(sc, dir.path(), &mut failures);
    }
    assert!(checks > 30, "{checks}");
    assert!(
        failures.is_empty(),
        "{} of {checks} answers differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

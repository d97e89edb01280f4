//! `tickgate replay`, run as the real binary: the real captures report the
//! facts of fixtures/real/README.md, simulated captures report exactly what
//! the simulator injected, and `--checks` answers as the gate would have.

use std::net::SocketAddrV4;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;
use tickgate::capture::PcapWriter;
use tickgate::wire::{PacketBuilder, Quote, SessionId, Side, Symbol};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures")
        .join(name)
}

fn tickgate(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tickgate"))
        .args(args)
        .output()
        .expect("running tickgate")
}

fn replay_json(args: &[&str]) -> Value {
    let mut all = vec!["replay", "--json"];
    all.extend_from_slice(args);
    let out = tickgate(&all);
    assert!(
        out.status.success(),
        "replay failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("one JSON object on stdout")
}

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

#[test]
fn real_nasdaq_totalview() {
    let v = replay_json(&[p(&fixture("real/nasdaq-totalview-itch50-moldudp64.pcap"))]);
    assert_eq!(v["packets"], 2);
    assert_eq!(v["invalid_packets"], 0);
    assert_eq!(v["duplicate_packets"], 0);
    // C3b: the second packet is 4,244,620 messages on (more than the
    // default max_channel_jump): not believed, not applied, no loss.
    assert_eq!(v["channel_lost"], 0);
    assert_eq!(v["feeds"][0]["channel_seq_anomalies"], 1);
    assert_eq!(v["unknown_messages"], 1);
    assert_eq!(v["ticks_lost"], 0);
    let sessions = v["sessions"].as_array().unwrap();
    assert_eq!(sessions.len(), 1);
    assert_eq!(sessions[0]["id"], "000010059B");
    assert_eq!(sessions[0]["first_sequence"], 14_764_496);
    assert_eq!(sessions[0]["next_sequence"], 19_009_117 + 38);
    assert_eq!(v["symbols"].as_object().unwrap().len(), 0);
    assert_eq!(v["skipped_frames"], 0);
    assert_eq!(v["feeds"][0]["lines"][0]["dst"], "233.54.12.111:26477");
    assert_eq!(v["feeds"][0]["channel_gaps"], 0);
}

#[test]
fn real_ise_heartbeat() {
    let v = replay_json(&[p(&fixture("real/nasdaq-ise-moldudp64-heartbeat.pcap"))]);
    assert_eq!(v["packets"], 1);
    assert_eq!(v["channel_lost"], 0);
    let s = &v["sessions"][0];
    assert_eq!(s["id"], "000008367I");
    assert_eq!(s["heartbeats"], 1);
    assert_eq!(s["data_packets"], 0);
    assert_eq!(s["first_sequence"], 383_265);
    assert_eq!(v["sessions"].as_array().unwrap().len(), 1);
}

#[test]
fn real_iex_is_one_invalid_packet() {
    let v = replay_json(&[p(&fixture("real/iex-tops16-quote-update.pcap"))]);
    assert_eq!(v["datagrams"], 1);
    assert_eq!(v["invalid_packets"], 1);
    assert_eq!(v["packets"], 0);
    assert_eq!(v["sessions"].as_array().unwrap().len(), 0);
}

#[test]
fn readable_summary_names_the_facts() {
    let out = tickgate(&[
        "replay",
        p(&fixture("real/nasdaq-totalview-itch50-moldudp64.pcap")),
    ]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("session 000010059B"), "{text}");
    assert!(text.contains("channel lost 0"), "{text}");
    assert!(text.contains("channel jumps not believed 1"), "{text}");
    assert!(text.contains("unknown messages 1"), "{text}");
}

/// Runs the simulator CLI; returns (capture, truth).
fn simulate(dir: &Path, args: &[&str]) -> (PathBuf, Value) {
    let cap = dir.join("sim.pcap");
    let truth = dir.join("truth.json");
    let mut all = vec!["simulate", "--out", p(&cap), "--truth", p(&truth)];
    all.extend_from_slice(args);
    let out = tickgate(&all);
    assert!(
        out.status.success(),
        "simulate failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let t = serde_json::from_slice(&std::fs::read(&truth).unwrap()).unwrap();
    (cap, t)
}

#[test]
fn loss_on_line_a_only_is_recovered_from_b() {
    let dir = tempfile::tempdir().unwrap();
    let (cap, t) = simulate(
        dir.path(),
        &["--seed", "31", "--duration", "3", "--loss-a", "0.25"],
    );
    assert!(t["lines"][0]["dropped"].as_u64().unwrap() > 100);
    let v = replay_json(&[p(&cap)]);
    assert_eq!(v["channel_lost"], 0);
    assert_eq!(v["ticks_lost"], 0);
    assert_eq!(v["invalid_packets"], 0);
    assert_eq!(v["packets"], t["datagrams"]);
    // every B copy of a packet A delivered is a duplicate
    assert!(v["duplicate_packets"].as_u64().unwrap() > 100);
    assert_eq!(v["duplicate_packets"], t["expected_duplicate_packets"]);
    let lines = v["feeds"][0]["lines"].as_array().unwrap();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[1]["dst"], "239.255.0.2:30001");
    assert_eq!(
        lines[1]["duplicate_packets"],
        t["lines"][1]["expected_duplicate_packets"]
    );
    assert!(v["symbols"]
        .as_object()
        .unwrap()
        .values()
        .all(|s| s["suspect"].is_null() && s["ticks_lost"] == 0));
}

#[test]
fn loss_on_both_lines_is_exactly_the_injected_loss() {
    let dir = tempfile::tempdir().unwrap();
    let (cap, t) = simulate(
        dir.path(),
        &[
            "--seed",
            "32",
            "--duration",
            "3",
            "--loss-a",
            "0.2",
            "--loss-b",
            "0.2",
            "--dup",
            "0.02",
        ],
    );
    let lost = t["messages_lost_all_lines"].as_u64().unwrap();
    assert!(
        lost > 10,
        "the seed must lose something on both lines: {lost}"
    );
    let v = replay_json(&[p(&cap)]);
    assert_eq!(v["channel_lost"].as_u64().unwrap(), lost);
    assert_eq!(v["duplicate_packets"], t["expected_duplicate_packets"]);
    // consecutive lost packets make one gap
    let gaps = v["feeds"][0]["channel_gaps"].as_u64().unwrap();
    assert!(gaps > 0 && gaps <= t["packets_lost_all_lines"].as_u64().unwrap());
}

#[test]
fn session_change_bad_seq_and_end_of_session() {
    let dir = tempfile::tempdir().unwrap();
    let (cap, t) = simulate(
        dir.path(),
        &[
            "--seed",
            "33",
            "--duration",
            "2",
            "--session-change-at",
            "1",
            "--bad-seq-at",
            "0.5",
            "--end-session",
        ],
    );
    let v = replay_json(&[p(&cap)]);
    let ids: Vec<&str> = v["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    let want: Vec<&str> = t["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect();
    assert_eq!(ids, want);
    assert_eq!(v["feeds"][0]["session_changes"], 1);
    assert_eq!(v["feeds"][0]["session_ended"], true);
    assert_eq!(v["channel_lost"], 0);
    assert_eq!(v["seq_anomalies"], 1);
    // after the end of session every symbol is suspect: session_ended
    assert!(v["symbols"]
        .as_object()
        .unwrap()
        .values()
        .all(|s| s["suspect"] == "session_ended"));
}

#[test]
fn filter_keeps_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let (cap, t) = simulate(dir.path(), &["--seed", "34", "--duration", "1"]);
    let v = replay_json(&[p(&cap), "--filter", "239.255.0.1:30001"]);
    let lines = v["feeds"][0]["lines"].as_array().unwrap();
    assert_eq!(lines.len(), 1);
    assert_eq!(lines[0]["dst"], "239.255.0.1:30001");
    assert_eq!(v["filtered_out"], t["lines"][1]["packets"]);
    assert_eq!(v["packets"], t["lines"][0]["packets"]);
    assert_eq!(v["duplicate_packets"], 0);
}

// ---- checks ----

const T0: i64 = 1_800_000_000_000_000_000;
const MS: i64 = 1_000_000;

fn quote(sym: &str, seq: u64, ts: i64, bid: i64, ask: i64) -> Quote {
    Quote::new(
        Symbol::parse(sym).unwrap(),
        seq,
        ts as u64,
        Some(Side {
            px: bid,
            qty: 1_000_000,
        }),
        Some(Side {
            px: ask,
            qty: 2_000_000,
        }),
    )
}

/// A small hand-made capture: three packets on one line, the file written
/// out of time order (as a merge can leave it).
fn checks_capture(dir: &Path) -> PathBuf {
    let path = dir.join("checks.pcap");
    let s = SessionId::parse("CHECKS0001").unwrap();
    let src: SocketAddrV4 = "127.0.0.1:40000".parse().unwrap();
    let dst: SocketAddrV4 = "239.255.0.1:30001".parse().unwrap();
    let mut b = PacketBuilder::new();
    let p1 = b
        .start(s, 1)
        .quote(&quote("EURUSD", 1, T0, 1_085_000_000, 1_085_100_000))
        .bytes()
        .to_vec();
    let p2 = b
        .start(s, 2)
        .quote(&quote(
            "EURUSD",
            2,
            T0 + 100 * MS,
            1_085_200_000,
            1_085_300_000,
        ))
        .bytes()
        .to_vec();
    // channel sequence 5: messages 3 and 4 were lost
    let p3 = b
        .start(s, 5)
        .quote(&quote(
            "GBPUSD",
            1,
            T0 + 200 * MS,
            1_270_000_000,
            1_270_100_000,
        ))
        .bytes()
        .to_vec();
    let mut w = PcapWriter::create(&path).unwrap();
    w.write_udp(T0 + 100 * MS, src, dst, &p2).unwrap();
    w.write_udp(T0, src, dst, &p1).unwrap();
    w.write_udp(T0 + 200 * MS, src, dst, &p3).unwrap();
    w.into_inner().unwrap();
    path
}

#[test]
fn checks_are_answered_as_the_gate_would_have() {
    let dir = tempfile::tempdir().unwrap();
    let cap = checks_capture(dir.path());
    let checks = dir.path().join("checks.txt");
    let lines = [
        format!("{} CHECK EURUSD", T0 - 1),
        format!("{T0} CHECK EURUSD"),
        format!("{} CHECK EURUSD", T0 + 50 * MS),
        format!("{} CHECK EURUSD", T0 + 100 * MS),
        format!("{} CHECK EURUSD stale_ms=50", T0 + 160 * MS),
        String::new(), // blank: not a check
        format!("{} CHECK EURUSD", T0 + 1000 * MS),
        format!("{} CHECK EURUSD", T0), // earlier than the last check
        "CHECK EURUSD".to_string(),     // no timestamp
        format!("{} PING", T0 + 1000 * MS),
        format!("{} CHECK GBPUSD", T0 + 1000 * MS),
        format!("{} CHECK NOSUCH", T0 + 1000 * MS),
        format!("{} CHECK EURUSD stale_ms=900", T0 + 1000 * MS), // looser than configured
    ];
    std::fs::write(&checks, lines.join("\n") + "\n").unwrap();
    let out = tickgate(&["replay", p(&cap), "--checks", p(&checks)]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got = String::from_utf8(out.stdout).unwrap();
    let got: Vec<&str> = got.lines().collect();
    let want = [
        "REJECT EURUSD unknown_symbol seq=- bid=- ask=- silence_us=- source_age_us=-",
        "OK EURUSD seq=1 bid=1.085@1000000 ask=1.0851@2000000 silence_us=0 source_age_us=0",
        "OK EURUSD seq=1 bid=1.085@1000000 ask=1.0851@2000000 silence_us=50000 source_age_us=50000",
        // the packet stamped exactly at T is in
        "OK EURUSD seq=2 bid=1.0852@1000000 ask=1.0853@2000000 silence_us=0 source_age_us=0",
        // tightened threshold; the channel gap at +200 ms is not in yet
        "REJECT EURUSD stale_quote seq=2 bid=1.0852@1000000 ask=1.0853@2000000 silence_us=60000 source_age_us=60000",
        // the gap made it unverified
        "REJECT EURUSD stale_quote,suspect seq=2 bid=1.0852@1000000 ask=1.0853@2000000 silence_us=900000 source_age_us=900000 suspect=channel_gap",
        "ERR check stamped earlier than the previous check",
        "ERR missing timestamp",
        "PONG",
        "REJECT GBPUSD stale_quote seq=1 bid=1.27@1000000 ask=1.2701@2000000 silence_us=800000 source_age_us=800000",
        "REJECT NOSUCH unknown_symbol seq=- bid=- ask=- silence_us=- source_age_us=-",
        "ERR threshold looser than configured",
    ];
    assert_eq!(got, want);
}

/// A checks line is read with a bound: a longer one stops the answers
/// there with an error naming its line, instead of being held whole (a
/// 300 MB line, or `/dev/zero`, which is one endless line).
#[test]
fn a_checks_line_longer_than_a_request_can_be_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let cap = checks_capture(dir.path());
    let checks = dir.path().join("checks.txt");
    let max = tickgate::replay::checks::MAX_CHECK_LINE;
    // The longest line taken (with its \r): its request is too long for
    // the socket too.
    let longest = format!("{T0} CHECK {}", "X".repeat(max - 27));
    assert_eq!(longest.len() + 1, max);
    let lines = [
        format!("{T0} CHECK EURUSD"),
        format!("{longest}\r"),
        "# ".to_string() + &"y".repeat(max - 2),
        format!("{T0} CHECK {}", "X".repeat(max)),
        format!("{T0} CHECK EURUSD"),
    ];
    std::fs::write(&checks, lines.join("\n") + "\n").unwrap();
    let out = tickgate(&["replay", p(&cap), "--checks", p(&checks)]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "checks {}: line 4 is longer than {max} bytes",
            checks.display()
        )),
        "{stderr}"
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    let got: Vec<&str> = stdout.lines().collect();
    assert_eq!(got.len(), 2, "{stdout}");
    assert!(got[0].starts_with("OK EURUSD seq=1 "), "{stdout}");
    assert_eq!(got[1], "ERR line too long");

    let out = tickgate(&["replay", p(&cap), "--checks", "/dev/zero"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("line 1 is longer than"), "{stderr}");
}

#[test]
fn unsorted_capture_is_replayed_in_time_order() {
    let dir = tempfile::tempdir().unwrap();
    let cap = checks_capture(dir.path());
    let v = replay_json(&[p(&cap)]);
    assert_eq!(v["sorted"], false);
    // in time order: 1, 2, then 5 (a gap of 2); in file order 2 would be
    // the baseline and 1 a duplicate
    assert_eq!(v["duplicate_packets"], 0);
    assert_eq!(v["channel_lost"], 2);
    assert_eq!(v["symbols"]["EURUSD"]["seq"], 2);
    assert_eq!(v["symbols"]["EURUSD"]["suspect"], "channel_gap");
    assert_eq!(v["symbols"]["GBPUSD"]["suspect"], Value::Null);
}

#[test]
fn bad_input_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let junk = dir.path().join("junk.pcap");
    std::fs::write(&junk, b"this is not a capture at all").unwrap();
    let out = tickgate(&["replay", p(&junk)]);
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("not a pcap, pcapng or Nasdaq BinaryFILE")
    );
    let out = tickgate(&["replay", p(&dir.path().join("missing.pcap"))]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("missing.pcap"));
}

// ---- --config ----

const CONFIG: &str = r#"
[[feed]]
name = "fx"
mode = "full"
[[feed.line]]
name = "A"
group = "239.255.0.1"
port = 30001
[[feed.line]]
name = "B"
group = "239.255.0.2"
port = 30001
[feed.symbols.EURUSD]
stale_ms = 200
[feed.symbols.USDTRY]
stale_ms = 5000

[[feed]]
name = "eq"
mode = "delta"
[[feed.line]]
name = "A"
group = "239.255.0.9"
port = 30001
"#;

/// recovery.md "Replay": the hold with capture time, and a datagram from a
/// configured re-request server taken as the feed's answer (R4). Line A
/// delivers 1 and 3; the answer for 2 comes from 127.0.0.9:9000 1 ms
/// later. With `--config` nothing is lost and a check inside the hole
/// answers `recovering`; without it, the server's datagram is one more
/// line and the gap is declared at once.
#[test]
fn replay_holds_and_takes_rerequest_answers_by_source() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hole.pcap");
    let s = SessionId::parse("HOLE000001").unwrap();
    let line_src: SocketAddrV4 = "127.0.0.1:40000".parse().unwrap();
    let server: SocketAddrV4 = "127.0.0.9:9000".parse().unwrap();
    let feed_sock: SocketAddrV4 = "127.0.0.1:50000".parse().unwrap();
    let dst: SocketAddrV4 = "239.255.0.1:30001".parse().unwrap();
    let mut b = PacketBuilder::new();
    let mut packet = |seq: u64, q: Quote| b.start(s, seq).quote(&q).bytes().to_vec();
    let p1 = packet(1, quote("EURUSD", 1, T0, 1_085_000_000, 1_085_100_000));
    let p2 = packet(2, quote("EURUSD", 2, T0, 1_085_200_000, 1_085_300_000));
    let p3 = packet(3, quote("EURUSD", 3, T0, 1_085_400_000, 1_085_500_000));
    let mut w = PcapWriter::create(&path).unwrap();
    w.write_udp(T0, line_src, dst, &p1).unwrap();
    w.write_udp(T0 + MS, line_src, dst, &p3).unwrap();
    w.write_udp(T0 + 2 * MS, server, feed_sock, &p2).unwrap();
    w.into_inner().unwrap();
    let cfg = dir.path().join("hold.toml");
    std::fs::write(
        &cfg,
        "[[feed]]\nname = \"fx\"\nmode = \"full\"\nclock_offset = \"off\"\ngap_hold_us = 100\nrerequest = [\"127.0.0.9:9000\"]\nrerequest_timeout_ms = 5\nrerequest_attempts = 2\n[[feed.line]]\nname = \"A\"\ngroup = \"239.255.0.1\"\nport = 30001\n",
    )
    .unwrap();
    let checks = dir.path().join("checks.txt");
    std::fs::write(
        &checks,
        format!(
            "{} CHECK EURUSD\n{} CHECK EURUSD\n",
            T0 + MS + MS / 2,
            T0 + 3 * MS
        ),
    )
    .unwrap();
    let out = tickgate(&[
        "replay",
        p(&path),
        "--config",
        p(&cfg),
        "--checks",
        p(&checks),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got = String::from_utf8(out.stdout).unwrap();
    let got: Vec<&str> = got.lines().collect();
    assert_eq!(
        got,
        [
            "REJECT EURUSD suspect seq=1 bid=1.085@1000000 ask=1.0851@2000000 silence_us=1500 source_age_us=1500 suspect=recovering",
            "OK EURUSD seq=3 bid=1.0854@1000000 ask=1.0855@2000000 silence_us=1000 source_age_us=3000",
        ]
    );
    let v = replay_json(&[p(&path), "--config", p(&cfg)]);
    let f = &v["feeds"][0];
    assert_eq!(f["channel_lost"], 0);
    assert_eq!(f["recovery"]["holes_filled"], 1);
    assert_eq!(f["recovery"]["messages_recovered"], 1);
    // Without --config every destination is a line: the server's datagram
    // is not an answer, and the tickgate venue does not hold by default.
    let v = replay_json(&[p(&path)]);
    assert_eq!(v["feeds"][0]["channel_lost"], 1);
}

#[test]
fn config_maps_feeds_lines_and_symbols() {
    let dir = tempfile::tempdir().unwrap();
    let (cap, t) = simulate(
        dir.path(),
        &["--seed", "35", "--duration", "1", "--loss-a", "0.1"],
    );
    let cfg = dir.path().join("tickgate.toml");
    std::fs::write(&cfg, CONFIG).unwrap();
    let v = replay_json(&[p(&cap), "--config", p(&cfg)]);
    let feeds = v["feeds"].as_array().unwrap();
    assert_eq!(feeds.len(), 2);
    assert_eq!(feeds[0]["name"], "fx");
    assert_eq!(feeds[0]["lines"].as_array().unwrap().len(), 2);
    assert_eq!(feeds[0]["packets"], t["datagrams"]);
    assert_eq!(feeds[0]["channel_lost"], 0);
    assert_eq!(feeds[1]["name"], "eq");
    assert_eq!(feeds[1]["mode"], "delta");
    assert_eq!(feeds[1]["packets"], 0);
    assert_eq!(v["unmatched"], 0);
    // configured, never quoted: known, without data
    assert_eq!(v["symbols"]["USDTRY"]["has_quote"], false);

    let checks = dir.path().join("checks.txt");
    let t_end = t["end_ns"].as_i64().unwrap();
    std::fs::write(
        &checks,
        format!(
            "{t_end} CHECK USDTRY\n{t_end} CHECK EURUSD stale_ms=300\n{t_end} CHECK EURUSD stale_ms=150\n"
        ),
    )
    .unwrap();
    let out = tickgate(&[
        "replay",
        p(&cap),
        "--config",
        p(&cfg),
        "--checks",
        p(&checks),
    ]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let got: Vec<&str> = text.lines().collect();
    assert_eq!(got.len(), 3);
    assert_eq!(
        got[0],
        "REJECT USDTRY no_data seq=- bid=- ask=- silence_us=- source_age_us=-"
    );
    // EURUSD's configured stale_ms is 200: 300 would loosen it
    assert_eq!(got[1], "ERR threshold looser than configured");
    assert!(
        got[2].contains(" EURUSD ") && got[2].contains(" seq="),
        "{}",
        got[2]
    );

    // a line taking one source only: everything else on its group is not its
    let ssm = CONFIG.replacen("port = 30001\n", "port = 30001\nsource = \"10.9.9.9\"\n", 1);
    std::fs::write(&cfg, ssm).unwrap();
    let v = replay_json(&[p(&cap), "--config", p(&cfg)]);
    assert_eq!(v["unmatched"], t["lines"][0]["packets"]);
    assert_eq!(v["feeds"][0]["lines"][0]["source"], "10.9.9.9");

    // a bad config is refused with its key named
    std::fs::write(&cfg, "x = 1\n").unwrap();
    let out = tickgate(&["replay", p(&cap), "--config", p(&cfg)]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown key"));
}

// ---- compressed and streamed captures ----

fn gzip_members(bytes: &[u8], members: usize) -> Vec<u8> {
    use std::io::Write;
    // several members, split anywhere (mid-record): a multi-member file
    let mut out = Vec::new();
    for part in bytes.chunks(bytes.len().div_ceil(members)) {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(part).unwrap();
        out.extend(e.finish().unwrap());
    }
    out
}

/// The JSON summary without the fields that name the file or depend on
/// how it is read (a decoder's buffers count in the sort's memory).
fn without_name(mut v: Value) -> Value {
    let m = v.as_object_mut().unwrap();
    assert!(m.remove("capture").is_some());
    assert!(m.remove("captures").is_some());
    assert!(m.remove("compression").is_some());
    assert!(m.remove("sort").is_some());
    v
}

fn stdout_of(args: &[&str]) -> String {
    let out = tickgate(args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn gzip_and_zstd_captures_replay_exactly_as_the_plain_one() {
    let dir = tempfile::tempdir().unwrap();
    let (cap, t) = simulate(
        dir.path(),
        &[
            "--seed",
            "41",
            "--duration",
            "2",
            "--loss-a",
            "0.05",
            "--loss-b",
            "0.05",
        ],
    );
    let plain = std::fs::read(&cap).unwrap();
    let gz = dir.path().join("sim.pcap.gz");
    let zst = dir.path().join("sim.pcap.zst");
    // zstd content under a plain name: the content decides
    let disguised = dir.path().join("disguised.pcap");
    std::fs::write(&gz, gzip_members(&plain, 3)).unwrap();
    std::fs::write(&zst, zstd::encode_all(&plain[..], 3).unwrap()).unwrap();
    std::fs::copy(&zst, &disguised).unwrap();

    let want = replay_json(&[p(&cap)]);
    assert_eq!(want["datagrams"], t["datagrams"]);
    assert_eq!(want["channel_lost"], t["expected_channel_lost"]);
    assert_eq!(want["compression"], "none");
    let checks = dir.path().join("checks.txt");
    let t_end = t["end_ns"].as_i64().unwrap();
    let lines: Vec<String> = (1..=8)
        .map(|i| format!("{} CHECK EURUSD", t_end / 8 * i))
        .collect();
    std::fs::write(&checks, lines.join("\n") + "\n").unwrap();
    let want_checks = stdout_of(&["replay", p(&cap), "--checks", p(&checks)]);
    let want_text = stdout_of(&["replay", p(&cap)]);
    for (f, kind) in [(&gz, "gzip"), (&zst, "zstd"), (&disguised, "zstd")] {
        let got = replay_json(&[p(f)]);
        assert_eq!(got["compression"], kind, "{}", f.display());
        assert_eq!(
            without_name(got),
            without_name(want.clone()),
            "{}",
            f.display()
        );
        let got_checks = stdout_of(&["replay", p(f), "--checks", p(&checks)]);
        assert_eq!(got_checks, want_checks, "{}", f.display());
        // the readable summary differs in its first line only (the name)
        let got_text = stdout_of(&["replay", p(f)]);
        let tail = |s: &str| s.lines().skip(1).collect::<Vec<_>>().join("\n");
        assert_eq!(tail(&got_text), tail(&want_text), "{}", f.display());
    }
}

#[test]
fn simulate_writes_compressed_captures_that_replay_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let args = ["--seed", "43", "--duration", "1", "--loss-a", "0.1"];
    let (cap, _) = simulate(dir.path(), &args);
    let want = without_name(replay_json(&[p(&cap)]));
    for (name, extra, magic) in [
        ("a.pcap.zst", None, &[0x28u8, 0xb5, 0x2f, 0xfd][..]),
        ("b.pcap.gz", None, &[0x1f, 0x8b][..]),
        (
            "c.pcap",
            Some(["--compress", "zstd", "--compress-level", "19"]),
            &[0x28, 0xb5][..],
        ),
    ] {
        let out = dir.path().join(name);
        let mut all = vec!["simulate", "--out", p(&out)];
        all.extend_from_slice(&args);
        if let Some(e) = &extra {
            all.extend_from_slice(e);
        }
        stdout_of(&all);
        assert!(std::fs::read(&out).unwrap().starts_with(magic), "{name}");
        assert_eq!(without_name(replay_json(&[p(&out)])), want, "{name}");
    }
    let bad = tickgate(&[
        "simulate",
        "--out",
        p(&dir.path().join("x.gz")),
        "--compress",
        "gzip",
        "--compress-level",
        "12",
    ]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("12 is not a gzip compression level"));
    // a level for a plain capture is a mistake, said before anything runs
    let plain = dir.path().join("x.pcap");
    let bad = tickgate(&["simulate", "--out", p(&plain), "--compress-level", "5"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr)
        .contains("--compress-level needs a compressed capture"));
    assert!(!plain.exists());
    // the level applies to a compression told by the name too
    let named = dir.path().join("x.pcap.gz");
    stdout_of(&[
        "simulate",
        "--out",
        p(&named),
        "--duration",
        "0.1",
        "--compress-level",
        "1",
    ]);
    assert!(std::fs::read(&named).unwrap().starts_with(&[0x1f, 0x8b]));
}

#[test]
fn compressed_pcapng_replays_as_the_plain_one() {
    let dir = tempfile::tempdir().unwrap();
    let plain_path = fixture("gen/merged3.pcapng");
    let plain = std::fs::read(&plain_path).unwrap();
    let want = without_name(replay_json(&[p(&plain_path)]));
    assert_eq!(want["frames"], 4);
    let gz = dir.path().join("merged3.pcapng.gz");
    let zst = dir.path().join("merged3.pcapng.zst");
    std::fs::write(&gz, gzip_members(&plain, 2)).unwrap();
    std::fs::write(&zst, zstd::encode_all(&plain[..], 1).unwrap()).unwrap();
    for f in [&gz, &zst] {
        assert_eq!(without_name(replay_json(&[p(f)])), want, "{}", f.display());
    }
}

#[test]
fn truncated_compressed_capture_reports_what_was_read_then_fails_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let (cap, t) = simulate(dir.path(), &["--seed", "45", "--duration", "2"]);
    let plain = std::fs::read(&cap).unwrap();
    let total = t["datagrams"].as_u64().unwrap();
    for (kind, bytes) in [
        ("gzip", gzip_members(&plain, 1)),
        ("zstd", zstd::encode_all(&plain[..], 3).unwrap()),
    ] {
        let f = dir.path().join(format!("cut-{kind}.pcap.x"));
        std::fs::write(&f, &bytes[..bytes.len() * 3 / 5]).unwrap();
        let out = tickgate(&["replay", "--json", p(&f)]);
        assert_eq!(out.status.code(), Some(2), "{kind}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(p(&f)), "{kind}: {err}");
        assert!(
            err.contains(&format!("{kind} stream ends early")),
            "{kind}: {err}"
        );
        // what was read was replayed and reported first
        let v: Value = serde_json::from_slice(&out.stdout).expect("a summary before the error");
        let got = v["datagrams"].as_u64().unwrap();
        assert!(got > total / 3 && got < total, "{kind}: {got} of {total}");
        assert_eq!(v["packets"].as_u64().unwrap(), got);
        assert!(
            err.contains(&format!("after {got} datagrams")),
            "{kind}: {err}"
        );
        // checks: answered while what they need was read (up to the last
        // datagram before the break), none after it
        let checks = dir.path().join("checks.txt");
        let t0 = v["first_ts"].as_i64().unwrap();
        std::fs::write(
            &checks,
            format!("{} PING\n{} PING\n", t0, t["end_ns"].as_i64().unwrap()),
        )
        .unwrap();
        let out = tickgate(&["replay", p(&f), "--checks", p(&checks)]);
        assert_eq!(out.status.code(), Some(2), "{kind}");
        assert_eq!(String::from_utf8_lossy(&out.stdout), "PONG\n", "{kind}");
    }
}

#[test]
fn a_datagram_written_late_is_replayed_in_its_place_however_late() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("late.pcap");
    let s = SessionId::parse("LATE000001").unwrap();
    let src: SocketAddrV4 = "127.0.0.1:40000".parse().unwrap();
    let dst: SocketAddrV4 = "239.255.0.1:30001".parse().unwrap();
    let mut b = PacketBuilder::new();
    let mut pkt = |seq: u64, ts: i64| {
        b.start(s, seq)
            .quote(&quote("EURUSD", seq, ts, 1_085_000_000, 1_085_100_000))
            .bytes()
            .to_vec()
    };
    let (p1, p2, p3) = (pkt(1, T0), pkt(2, T0 + 100 * MS), pkt(3, T0 + 40_000 * MS));
    let mut w = PcapWriter::create(&path).unwrap();
    // packet 1 is written 40 s late (after packet 3)
    w.write_udp(T0 + 100 * MS, src, dst, &p2).unwrap();
    w.write_udp(T0 + 40_000 * MS, src, dst, &p3).unwrap();
    w.write_udp(T0, src, dst, &p1).unwrap();
    w.into_inner().unwrap();

    let v = replay_json(&[p(&path)]);
    assert_eq!(v["sorted"], false);
    assert_eq!(v["out_of_order"], 1);
    assert_eq!(v["sorted_runs"], 2);
    assert!(v.get("out_of_order_beyond_window").is_none());
    assert_eq!(v["sort"]["sources"], 2);
    assert_eq!(v["sort"]["spilled"], false);
    assert_eq!(v["duplicate_packets"], 0);
    assert_eq!(v["channel_lost"], 0);
    assert_eq!(v["first_ts"], T0);
    let text = stdout_of(&["replay", p(&path)]);
    assert!(
        text.contains("not in time order: 1 datagrams stamped earlier than one before them, in 2 sorted runs; replayed in timestamp order"),
        "{text}"
    );
    // the window's options are gone
    let out = tickgate(&["replay", "--reorder-window-ms", "100", p(&path)]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn a_small_sort_memory_bound_holds_and_changes_nothing_on_a_sorted_capture() {
    // a 10 MB capture replayed with at most 1 MiB: one reader, within the
    // bound, and exactly the replay of the default budget
    let dir = tempfile::tempdir().unwrap();
    let (cap, _) = simulate(
        dir.path(),
        &[
            "--seed",
            "47",
            "--duration",
            "2",
            "--symbols",
            "50",
            "--rate",
            "20000",
        ],
    );
    assert!(std::fs::metadata(&cap).unwrap().len() > 8 << 20);
    let mut want = replay_json(&[p(&cap)]);
    let mut got = replay_json(&["--sort-memory-mib", "1", p(&cap)]);
    let peak = got["sort"]["peak_bytes"].as_u64().unwrap();
    assert!(peak <= 1 << 20, "{peak}");
    assert_eq!(got["sort"]["memory_bytes"], 1 << 20);
    assert_eq!(got["sort"]["sources"], 1);
    assert_eq!(got["sorted_runs"], 1);
    for v in [&mut want, &mut got] {
        v.as_object_mut().unwrap().remove("sort");
    }
    assert_eq!(got, want);
}

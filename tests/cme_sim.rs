//! The simulated CME channel (`tickgate simulate --venue cme-mdp3`)
//! through the engine and through replay: books equal the simulator's
//! truth; a loss on both lines makes only the instruments it touched wait
//! for the snapshot loop (the others are unverified by C3 only until their
//! next entry); the snapshot line is wanted only while an instrument waits.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

use serde_json::Value;
use tickgate::feed::verdict::{judge, Thresholds};
use tickgate::feed::view::SuspectCause;
use tickgate::feed::{Feed, FeedSettings, VenueKind};
use tickgate::sim::simulate::{default_lines, SimConfig, Simulator};
use tickgate::venue::LineKind;
use tickgate::wire::Symbol;

fn cme_config(seed: u64) -> SimConfig {
    let mut cfg = SimConfig::new(seed);
    cfg.venue = VenueKind::CmeMdp3;
    cfg.symbols = 16;
    cfg.rate = 4_000;
    cfg.batch = 4;
    cfg.duration_ns = 3_000_000_000;
    cfg.heartbeat_ms = 0;
    cfg.channel_heartbeat_ms = 30_000;
    cfg.drop_both_every = Some(250);
    cfg.loop_interval_ns = 2_000_000;
    let mut lines = default_lines(
        &["A", "B", "SA", "DA"],
        std::net::Ipv4Addr::LOCALHOST,
        40_000,
        20_000,
    );
    lines[2].kind = LineKind::Snapshot;
    lines[3].kind = LineKind::Definition;
    for l in &mut lines[2..] {
        l.delay_ns = 0;
    }
    cfg.lines = lines;
    cfg
}

/// `<price>@<qty>` of a side, as the truth file and the gate write it.
fn side_text(s: Option<tickgate::wire::Side>) -> Value {
    s.map_or(Value::Null, |s| {
        let mut t = String::new();
        tickgate::wire::write_price(&mut t, s.px).unwrap();
        Value::String(format!("{t}@{}", s.qty))
    })
}

#[test]
fn a_double_loss_makes_only_the_touched_instruments_wait() {
    let mut sim = Simulator::new(cme_config(3)).unwrap();
    let kinds: Vec<LineKind> = sim.lines().iter().map(|l| l.kind).collect();
    let mut feed = Feed::new(FeedSettings::for_venue(VenueKind::CmeMdp3), kinds.len());
    for (i, k) in kinds.iter().enumerate() {
        feed.set_line_kind(i, *k);
    }
    let mut buf = Vec::new();
    // Every cause each instrument had after being OK once.
    let mut ok_once: BTreeSet<String> = BTreeSet::new();
    let mut causes: BTreeMap<String, std::collections::HashSet<SuspectCause>> = BTreeMap::new();
    let mut snapshot_line_wanted = 0;
    let mut last_t = 0;
    while let Some(ev) = sim.next_into(&mut buf) {
        // A receiver that joins the loops' groups only while it wants them.
        if kinds[ev.line] != LineKind::Incremental && !feed.line_wanted(ev.line) {
            continue;
        }
        if kinds[ev.line] == LineKind::Snapshot {
            snapshot_line_wanted += 1;
        }
        feed.on_datagram(ev.line, &buf, ev.t_ns);
        last_t = ev.t_ns;
        for (sym, _) in feed.symbols().collect::<Vec<_>>() {
            let name = sym.to_string();
            if name.starts_with('#') {
                continue;
            }
            let (_, v) = feed.symbol_view(sym).unwrap();
            let verdict = judge(Some(v), feed.feed_view(), ev.t_ns, &Thresholds::of(v));
            if verdict.ok() {
                ok_once.insert(name);
            } else if ok_once.contains(&name) {
                causes.entry(name).or_default().insert(verdict.cause);
            }
        }
    }
    let truth = sim.truth().clone();
    let venue = truth.venue.as_ref().expect("the CME truth");
    let touched: BTreeSet<String> = venue["touched_by_lost_packets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    assert!(
        truth.packets_lost_all_lines >= 10,
        "{}",
        truth.packets_lost_all_lines
    );
    assert!(!touched.is_empty());
    let gaps = touched
        .iter()
        .filter(|n| {
            causes
                .get(*n)
                .is_some_and(|c| c.contains(&SuspectCause::Gap))
        })
        .count();
    assert!(gaps > 0, "some touched instrument was answered suspect=gap");
    let instruments = venue["instruments"].as_array().unwrap();
    assert_eq!(instruments.len(), 16);
    for i in instruments {
        let name = i["symbol"].as_str().unwrap();
        let sym = Symbol::parse(name).unwrap();
        let (_, v) = feed
            .symbol_view(sym)
            .unwrap_or_else(|| panic!("{name} known"));
        // The books equal the simulator's at the end, every one trusted.
        assert_eq!(side_text(v.bid()), i["bid"], "{name}");
        assert_eq!(side_text(v.ask()), i["ask"], "{name}");
        let verdict = judge(Some(v), feed.feed_view(), last_t, &Thresholds::of(v));
        assert!(verdict.ok(), "{name}: {verdict:?}");
        let summary = feed.symbol_summary(sym).unwrap();
        let seen = causes.get(name).cloned().unwrap_or_default();
        if touched.contains(name) {
            // Its lost entries: a gap (or, lost before its first entry
            // arrived, no baseline), then the snapshot loop.
            assert!(summary.snapshots_applied > 0, "{name}");
            assert!(summary.ticks_lost > 0 || !ok_once.is_empty(), "{name}");
        } else {
            // Untouched: the channel gap (C3) and the open hole (R3) only
            // until its next entry (a loop snapshot may be used meanwhile:
            // unverified, it waits); never a gap of its own.
            assert_eq!(summary.ticks_lost, 0, "{name}");
            assert!(
                seen.iter()
                    .all(|c| matches!(c, SuspectCause::ChannelGap | SuspectCause::Recovering)),
                "{name}: {seen:?}"
            );
        }
    }
    // Nothing waits at the end: the snapshot line is not wanted; it was
    // while touched instruments waited.
    assert!(!feed.line_wanted(2));
    assert!(snapshot_line_wanted > 0);
    assert_eq!(feed.venue_recovery().waiting, 0);
    assert_eq!(
        feed.counters().channel_messages_lost,
        truth.expected_channel_lost
    );
}

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_tickgate")
}

#[test]
fn simulate_writes_a_channel_and_replay_rebuilds_its_books() {
    let dir = tempfile::tempdir().unwrap();
    let cap = dir.path().join("cme.pcap");
    let truth_path = dir.path().join("truth.json");
    let out = Command::new(bin())
        .args([
            "simulate",
            "--venue",
            "cme-mdp3",
            "--symbols",
            "12",
            "--rate",
            "2000",
        ])
        .args([
            "--batch",
            "4",
            "--duration",
            "3",
            "--drop-both",
            "400",
            "--out",
        ])
        .arg(&cap)
        .arg("--truth")
        .arg(&truth_path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let summary = String::from_utf8_lossy(&out.stdout);
    assert!(summary.contains("line SA 239.255.0.3:30001"), "{summary}");
    assert!(summary.contains("line DA 239.255.0.4:30001"), "{summary}");
    let truth: Value =
        serde_json::from_str(&std::fs::read_to_string(&truth_path).unwrap()).unwrap();
    assert!(truth["loop_packets"].as_u64().unwrap() > 1000);
    let cfg = dir.path().join("cme.toml");
    let line = |name: &str, last: u8, kind: &str| {
        format!("[[feed.line]]\nname = \"{name}\"\ngroup = \"239.255.0.{last}\"\nport = 30001\nkind = \"{kind}\"\n")
    };
    std::fs::write(
        &cfg,
        format!(
            "[[feed]]\nname = \"cme\"\nvenue = \"cme-mdp3\"\n{}{}{}{}",
            line("A", 1, "incremental"),
            line("B", 2, "incremental"),
            line("SA", 3, "snapshot"),
            line("DA", 4, "definition"),
        ),
    )
    .unwrap();
    let out = Command::new(bin())
        .args(["replay", "--json", "--config"])
        .arg(&cfg)
        .arg(&cap)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let symbols = v["symbols"].as_object().unwrap();
    let instruments = truth["venue"]["instruments"].as_array().unwrap();
    assert_eq!(instruments.len(), 12);
    let long = instruments
        .iter()
        .filter(|i| i["symbol"].as_str().unwrap().len() > 8)
        .count();
    assert!(long >= 3, "names longer than 8 characters on the path");
    for i in instruments {
        let name = i["symbol"].as_str().unwrap();
        let s = &symbols[name];
        assert_eq!(s["bid"], i["bid"], "{name}: {s}");
        assert_eq!(s["ask"], i["ask"], "{name}: {s}");
        assert_eq!(s["suspect"], Value::Null, "{name}: {s}");
        // The `#` name shows the same book.
        let id = &symbols[&format!("#{}", i["security_id"])];
        assert_eq!(id["bid"], i["bid"], "{name}");
    }
    let feed = &v["feeds"][0];
    assert_eq!(feed["channel_lost"], truth["expected_channel_lost"]);
    assert!(feed["snapshots_applied"].as_u64().unwrap() > 0, "{feed}");
}

/// venues.md `cme-mdp3`, "Lines in a replay without a config": the
/// simulator's channel replayed with `--venue cme-mdp3` alone learns its
/// snapshot and definition loops from their templates, and gives what the
/// config naming the kinds gives: one session, nothing lost, no hole, no
/// book error, every book the simulator's.
#[test]
fn replay_without_a_config_learns_the_loops() {
    let dir = tempfile::tempdir().unwrap();
    let cap = dir.path().join("cme.pcap");
    let truth_path = dir.path().join("truth.json");
    let out = Command::new(bin())
        .args(["simulate", "--venue", "cme-mdp3", "--out"])
        .arg(&cap)
        .arg("--truth")
        .arg(&truth_path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let truth: Value =
        serde_json::from_str(&std::fs::read_to_string(&truth_path).unwrap()).unwrap();
    let out = Command::new(bin())
        .args(["replay", "--json", "--venue", "cme-mdp3"])
        .arg(&cap)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let kinds: Vec<(String, String)> = v["learnt_lines"]["lines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            (
                l["dst"].as_str().unwrap().to_string(),
                l["kind"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let mut sorted = kinds.clone();
    sorted.sort();
    let want = |last: u8, kind: &str| (format!("239.255.0.{last}:30001"), kind.to_string());
    assert_eq!(
        sorted,
        [
            want(1, "incremental"),
            want(2, "incremental"),
            want(3, "snapshot"),
            want(4, "definition"),
        ],
        "{}",
        v["learnt_lines"]
    );
    let feed = &v["feeds"][0];
    assert_eq!(feed["sessions"].as_array().unwrap().len(), 1, "{feed}");
    assert_eq!(feed["channel_lost"], 0, "{feed}");
    assert_eq!(feed["channel_lost"], truth["expected_channel_lost"]);
    assert_eq!(feed["channel_gaps"], 0, "{feed}");
    assert_eq!(feed["book_errors"], 0, "{feed}");
    assert_eq!(feed["symbols_suspect"], 0, "{feed}");
    let symbols = v["symbols"].as_object().unwrap();
    let instruments = truth["venue"]["instruments"].as_array().unwrap();
    assert!(!instruments.is_empty());
    for i in instruments {
        let name = i["symbol"].as_str().unwrap();
        let s = &symbols[name];
        assert_eq!(s["bid"], i["bid"], "{name}: {s}");
        assert_eq!(s["ask"], i["ask"], "{name}: {s}");
    }

    // The readable summary says how the lines were told.
    let out = Command::new(bin())
        .args(["replay", "--venue", "cme-mdp3"])
        .arg(&cap)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("lines learnt from what they carry (no --config")
            && text.contains("line 239.255.0.3:30001: snapshot (")
            && text.contains("line 239.255.0.4:30001: definition ("),
        "{text}"
    );
}

/// A destination that carries snapshots and incremental messages both
/// cannot be told: the replay without a config is refused, with the
/// config to write, rather than read one way or the other.
#[test]
fn replay_without_a_config_refuses_a_mixed_destination() {
    use tickgate::capture::PcapWriter;
    use tickgate::venue::cme_mdp3::encode;
    let dir = tempfile::tempdir().unwrap();
    let cap = dir.path().join("mixed.pcap");
    let mut w = PcapWriter::create(&cap).unwrap();
    let src = "10.0.0.1:40000".parse().unwrap();
    let dst = "239.255.9.1:30001".parse().unwrap();
    let mut snap = Vec::new();
    encode::start_packet(&mut snap, 1, 1_000);
    encode::snapshot(
        &mut snap,
        &encode::Snapshot {
            last_msg_seq_num: 1,
            tot_num_reports: 1,
            security_id: 1,
            rpt_seq: 1,
            transact_time: 1_000,
            trading_status: None,
            levels: &[],
        },
    );
    let mut reset = Vec::new();
    encode::start_packet(&mut reset, 2, 2_000);
    encode::channel_reset(&mut reset, 2_000);
    w.write_udp(1_000, src, dst, &snap).unwrap();
    w.write_udp(2_000, src, dst, &reset).unwrap();
    w.into_inner().unwrap();
    let out = Command::new(bin())
        .args(["replay", "--venue", "cme-mdp3"])
        .arg(&cap)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with(
            "tickgate: 239.255.9.1:30001 carry both snapshots and incremental messages"
        ),
        "{err}"
    );
    // The config to write, which replays.
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        text.contains(
            "[[feed.line]]\nname = \"L1\"\ngroup = \"239.255.9.1\"\nport = 30001\nkind = "
        ),
        "{text}"
    );
    let cfg = dir.path().join("cme.toml");
    std::fs::write(&cfg, &text).unwrap();
    let out = Command::new(bin())
        .args(["replay", "--config"])
        .arg(&cfg)
        .arg(&cap)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[path = "common/daemon.rs"]
mod daemon;

/// Through `tickgate run` on loopback multicast: the simulated channel
/// starts first and the daemon joins a second later (a late join); two
/// packets lost on both lines follow. Every book ends equal to the
/// simulator's, every instrument answers OK, and the daemon left the
/// snapshot group once nothing waited.
#[test]
fn a_late_join_through_the_daemon_ends_with_the_simulators_books() {
    use std::io::{BufRead, BufReader};
    use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
    use std::process::Stdio;
    use std::sync::atomic::AtomicBool;
    use std::sync::{Arc, Mutex};
    use tickgate::sim::live::{send_paced, McastSender, Pace, SenderOptions};

    let _serial = daemon::serial();
    let port = daemon::free_port();
    let group = |last: u8| SocketAddrV4::new(Ipv4Addr::new(239, 255, 97, last), port);
    let mut cfg = cme_config(21);
    cfg.start_ns = tickgate::net::receiver::realtime_ns() + 200_000_000;
    cfg.duration_ns = 3_900_000_000;
    cfg.rate = 2_000;
    cfg.batch = 2;
    // Data packets 1,400 and 2,800 (1.4 s and 2.8 s in) are lost on both
    // lines; the last second lets the loop bring their snapshots.
    cfg.drop_both_every = Some(1_400);
    cfg.loop_interval_ns = 50_000_000;
    for (i, l) in cfg.lines.iter_mut().enumerate() {
        l.dst = group(i as u8 + 1);
    }
    let mut sim = Simulator::new(cfg).unwrap();
    let mut items = Vec::new();
    let mut buf = Vec::new();
    while let Some(ev) = sim.next_into(&mut buf) {
        items.push((ev.t_ns, ev.dst, buf.clone()));
    }
    let truth = sim.truth().clone();
    assert_eq!(truth.packets_lost_all_lines, 2);
    let sender = std::thread::spawn(move || {
        let mut tx = McastSender::open(&SenderOptions::new(Ipv4Addr::LOCALHOST)).unwrap();
        send_paced(
            &mut tx,
            items,
            Pace::Recorded { speed: 1.0 },
            &AtomicBool::new(false),
            None,
        )
        .unwrap();
    });

    // The daemon, a second into the channel.
    std::thread::sleep(std::time::Duration::from_millis(1_200));
    let dir = tempfile::tempdir().unwrap();
    let metrics: SocketAddr = format!("127.0.0.1:{}", daemon::free_port())
        .parse()
        .unwrap();
    let socket = dir.path().join("gate.sock");
    let line = |name: &str, last: u8, kind: &str| {
        format!(
            "[[feed.line]]\nname = \"{name}\"\ngroup = \"239.255.97.{last}\"\nport = {port}\ninterface = \"127.0.0.1\"\nkind = \"{kind}\"\n"
        )
    };
    let config = dir.path().join("tickgate.toml");
    std::fs::write(
        &config,
        format!(
            "[[feed]]\nname = \"cme\"\nvenue = \"cme-mdp3\"\nstale_ms = 600000\nsource_max_age_ms = 600000\nclock_offset = \"off\"\n{}{}{}{}\n[gate]\nsocket = \"{}\"\n\n[metrics]\nlisten = \"{metrics}\"\n",
            line("A", 1, "incremental"),
            line("B", 2, "incremental"),
            line("SA", 3, "snapshot"),
            line("DA", 4, "definition"),
            socket.display()
        ),
    )
    .unwrap();
    let mut child = Command::new(bin())
        .args(["run", "--config"])
        .arg(&config)
        .env_remove("NOTIFY_SOCKET")
        .env("RUST_LOG", "warn,tickgate::net=info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let log = Arc::new(Mutex::new(String::new()));
    {
        let log = log.clone();
        let stderr = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for l in BufReader::new(stderr).lines().map_while(Result::ok) {
                let mut g = log.lock().unwrap();
                g.push_str(&l);
                g.push('\n');
            }
        });
    }
    daemon::wait_for_gate(&socket);
    sender.join().unwrap();
    daemon::wait_for("no instrument waiting", || {
        daemon::metrics(metrics).get("tickgate_feed_instruments_waiting{feed=\"cme\"}")
            == Some(&0.0)
    });
    let m = daemon::metrics(metrics);
    assert!(
        m.get("tickgate_feed_channel_messages_lost_total{feed=\"cme\"}") >= Some(&1.0),
        "a loss on both lines after the join"
    );
    let field = |answer: &str, key: &str| {
        answer
            .split_whitespace()
            .find_map(|w| w.strip_prefix(key))
            .unwrap_or("")
            .to_string()
    };
    for i in truth.venue.as_ref().unwrap()["instruments"]
        .as_array()
        .unwrap()
    {
        let name = i["symbol"].as_str().unwrap();
        let answer = daemon::ask(&socket, &format!("CHECK {name}"));
        assert!(answer.starts_with(&format!("OK {name} ")), "{answer}");
        assert_eq!(
            field(&answer, "bid="),
            i["bid"].as_str().unwrap(),
            "{answer}"
        );
        assert_eq!(
            field(&answer, "ask="),
            i["ask"].as_str().unwrap(),
            "{answer}"
        );
    }
    // Joined while instruments waited, left once none did.
    let log = log.lock().unwrap().clone();
    let sa: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("the line's group") && l.contains("SA"))
        .collect();
    let joined = sa
        .iter()
        .rposition(|l| l.contains("joined the line's group"));
    let left = sa.iter().rposition(|l| l.contains("left the line's group"));
    assert!(joined.is_some() && left > joined, "{log}");
    daemon::terminate(&mut child);
}

//! `cboe-pitch` end to end (recovery.md R4c): `tickgate run` follows the
//! simulator's units on loopback multicast (lines A, B and the gap line G)
//! and its Gap Request Proxy fills what both lines lost.
//!
//! The daemon starts first, so it sees every unit from sequence 1 (no late
//! join). Its first connection to the proxy fails (the simulator is not up
//! yet) and the next one is 1 s later (R4c's pace); the simulator's losses
//! on both lines begin later than that (`--drop-both` counts data packets),
//! and the test checks that the connection logged in before the first hole.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};

#[path = "common/daemon.rs"]
mod daemon;

use daemon::{bin, free_port, serial, terminate, wait_for};

const FEED: &str = "cboe";
const SYMBOLS: usize = 12;

/// Lines A, B and G: 239.255.97.`base`, `base + 1`, `base + 2`, port
/// `port`.
fn groups(base: u8, port: u16) -> [SocketAddrV4; 3] {
    [0, 1, 2].map(|i| SocketAddrV4::new(Ipv4Addr::new(239, 255, 97, base + i), port))
}

struct Child2 {
    child: Child,
    log: Arc<Mutex<String>>,
    /// The threads reading its standard output and error, to their end.
    readers: Vec<std::thread::JoinHandle<()>>,
}

impl Child2 {
    fn spawn(cmd: &mut Command) -> Child2 {
        let mut child = cmd
            .env_remove("NOTIFY_SOCKET")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let log = Arc::new(Mutex::new(String::new()));
        let out: Box<dyn std::io::Read + Send> = Box::new(child.stdout.take().unwrap());
        let err: Box<dyn std::io::Read + Send> = Box::new(child.stderr.take().unwrap());
        let mut readers = Vec::new();
        for stream in [out, err] {
            let sink = log.clone();
            readers.push(std::thread::spawn(move || {
                for line in BufReader::new(stream).lines() {
                    let Ok(line) = line else { break };
                    let mut l = sink.lock().unwrap();
                    l.push_str(&line);
                    l.push('\n');
                }
            }));
        }
        Child2 {
            child,
            log,
            readers,
        }
    }

    fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// Everything it wrote, once it has exited.
    fn whole_log(&mut self) -> String {
        for r in self.readers.drain(..) {
            let _ = r.join();
        }
        self.log()
    }
}

impl Drop for Child2 {
    fn drop(&mut self) {
        terminate(&mut self.child);
    }
}

struct Daemon {
    process: Child2,
    dir: tempfile::TempDir,
    metrics: SocketAddr,
}

impl Daemon {
    fn start(g: &[SocketAddrV4; 3], grp: SocketAddr) -> Daemon {
        Daemon::start_with(g, grp, "", "")
    }

    /// `feed_extra`: more keys of the feed (`key = value` lines);
    /// `grp_extra`: more keys of its `grp` table (`, key = value`).
    fn start_with(
        g: &[SocketAddrV4; 3],
        grp: SocketAddr,
        feed_extra: &str,
        grp_extra: &str,
    ) -> Daemon {
        let dir = tempfile::tempdir().unwrap();
        let metrics: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let cfg = dir.path().join("tickgate.toml");
        let line = |name: &str, a: &SocketAddrV4, kind: &str| {
            format!(
                "[[feed.line]]\nname = \"{name}\"\ngroup = \"{}\"\nport = {}\ninterface = \"127.0.0.1\"\nrcvbuf = 4194304\nkind = \"{kind}\"\n",
                a.ip(),
                a.port()
            )
        };
        std::fs::write(
            &cfg,
            format!(
                r#"
[[feed]]
name = "{FEED}"
venue = "cboe-pitch"
stale_ms = 600000
source_max_age_ms = 600000
max_orders = 100000
clock_offset = "off"
gap_hold_us = 2000
rerequest_timeout_ms = 100
rerequest_attempts = 5
grp = {{ address = "{grp}", session_sub_id = "0006", username = "MKDA", password = ""{grp_extra} }}
{feed_extra}
{}{}{}
[gate]
socket = "{}"

[metrics]
listen = "{metrics}"
"#,
                line("A", &g[0], "realtime"),
                line("B", &g[1], "realtime"),
                line("G", &g[2], "gap"),
                dir.path().join("gate.sock").display()
            ),
        )
        .unwrap();
        let process = Child2::spawn(
            Command::new(bin())
                .arg("run")
                .arg("--config")
                .arg(&cfg)
                .env("RUST_LOG", "warn,tickgate::net=info"),
        );
        let d = Daemon {
            process,
            dir,
            metrics,
        };
        daemon::wait_for_gate(&d.socket());
        d
    }

    fn socket(&self) -> PathBuf {
        self.dir.path().join("gate.sock")
    }

    fn metrics(&self) -> BTreeMap<String, f64> {
        daemon::metrics(self.metrics)
    }

    /// `tickgate status`, raw (`--raw`: the gate's `STATUS` lines) or as
    /// operators read it.
    fn status(&self, raw: bool) -> String {
        let mut cmd = Command::new(bin());
        cmd.arg("status").arg("--socket").arg(self.socket());
        if raw {
            cmd.arg("--raw");
        }
        let out = cmd.output().unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap()
    }
}

/// The lines of `status` that begin with `prefix`.
fn status_lines(status: &str, prefix: &str) -> Vec<String> {
    status
        .lines()
        .filter(|l| l.starts_with(prefix))
        .map(str::to_string)
        .collect()
}

/// Waits until the feed has opened at least `opened` holes and closed
/// every one (filled or lost); its metrics then.
fn every_hole_closed(d: &Daemon, opened: u64) -> BTreeMap<String, f64> {
    let mut m = BTreeMap::new();
    wait_for("every hole closed", || {
        m = d.metrics();
        feed(&m, "recovering") == 0
            && feed(&m, "holes_opened_total") >= opened
            && feed(&m, "holes_opened_total")
                == feed(&m, "holes_filled_total") + feed(&m, "holes_lost_total")
    });
    m
}

/// One test's set-up: the lock that keeps these tests one at a time, the
/// lines of `groups(base, port)`, a free address for the simulator's
/// proxy, and the daemon started on them.
fn setup(
    base: u8,
    port: u16,
) -> (
    std::sync::MutexGuard<'static, ()>,
    [SocketAddrV4; 3],
    SocketAddr,
    Daemon,
) {
    let serial = serial();
    let g = groups(base, port);
    let grp: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let d = Daemon::start(&g, grp);
    (serial, g, grp, d)
}

/// Gap Responses of status `status` received by the feed.
fn by_status(m: &BTreeMap<String, f64>, status: &str) -> u64 {
    m.get(&format!(
        "tickgate_feed_gap_responses_by_status_total{{feed=\"{FEED}\",status=\"{status}\"}}"
    ))
    .copied()
    .unwrap_or(0.0) as u64
}

/// A counter or gauge of the feed.
fn feed(m: &BTreeMap<String, f64>, name: &str) -> u64 {
    let key = format!("tickgate_feed_{name}{{feed=\"{FEED}\"}}");
    *m.get(&key)
        .unwrap_or_else(|| panic!("{key} not in /metrics")) as u64
}

/// A counter of each unit of the feed, by unit.
fn unit_values(m: &BTreeMap<String, f64>, name: &str) -> BTreeMap<u8, u64> {
    let prefix = format!("tickgate_unit_{name}{{feed=\"{FEED}\",unit=\"");
    m.iter()
        .filter_map(|(k, v)| {
            let unit = k.strip_prefix(&prefix)?.strip_suffix("\"}")?;
            Some((unit.parse().ok()?, *v as u64))
        })
        .collect()
}

fn line(m: &BTreeMap<String, f64>, name: &str, line: &str) -> u64 {
    m.get(&format!(
        "tickgate_line_{name}{{feed=\"{FEED}\",line=\"{line}\"}}"
    ))
    .copied()
    .unwrap_or(0.0) as u64
}

/// `tickgate simulate --live --venue cboe-pitch`: three units on `g`, a
/// data packet in every `drop_both` lost on both realtime lines, and the
/// simulator's Gap Request Proxy on `grp`; `extra` adds flags, or replaces
/// the defaults of `--rate` (300 datagrams a second), `--batch` (1) and
/// `--duration` (7 s).
fn simulate(g: &[SocketAddrV4; 3], grp: SocketAddr, drop_both: u32, extra: &[&str]) -> Child2 {
    let s = |a: &SocketAddrV4| a.to_string();
    let defaults = [("--rate", "300"), ("--batch", "1"), ("--duration", "7")];
    let mut cmd = Command::new(bin());
    cmd.args([
        "simulate",
        "--venue",
        "cboe-pitch",
        "--live",
        "--units",
        "3",
        "--symbols",
        &SYMBOLS.to_string(),
        "--seed",
        "7",
        "--group-a",
        &s(&g[0]),
        "--group-b",
        &s(&g[1]),
        "--group-gap",
        &s(&g[2]),
        "--interface",
        "127.0.0.1",
        "--drop-both",
        &drop_both.to_string(),
        "--grp-listen",
        &grp.to_string(),
        "--pitch-sub-id",
        "0006",
        "--pitch-user",
        "MKDA",
    ]);
    for (flag, value) in defaults {
        if !extra.contains(&flag) {
            cmd.args([flag, value]);
        }
    }
    Child2::spawn(cmd.args(extra))
}

/// R4c end to end: data packets lost on both lines of a unit are asked for
/// and come again on the gap line: no message is declared lost, every hole
/// opened is filled, and every symbol's check is OK at the end.
#[test]
fn losses_on_both_lines_are_filled_from_the_gap_line() {
    let (_serial, g, grp, d) = setup(1, 46601);
    // About 300 data packets a second: the first loss after about 2 s,
    // once the proxy's second connection (1 s after the first) is in.
    let mut sim = simulate(&g, grp, 600, &[]);
    let lost = finish(&mut sim);
    assert!(lost >= 2);
    let m = every_hole_closed(&d, 2);
    let log = d.process.log();
    assert_eq!(feed(&m, "holes_lost_total"), 0, "{log}");
    assert_eq!(feed(&m, "channel_messages_lost_total"), 0, "{log}");
    assert_eq!(feed(&m, "grp_logged_in"), 1, "{log}");
    assert!(feed(&m, "grp_logins_total") >= 1);
    assert!(feed(&m, "rerequests_sent_total") >= 1);
    assert!(feed(&m, "gap_responses_total") >= 1);
    assert_eq!(feed(&m, "gap_responses_refused_total"), 0);
    // By status: every one an `A`.
    let accepted = m
        .get(&format!(
            "tickgate_feed_gap_responses_by_status_total{{feed=\"{FEED}\",status=\"A\"}}"
        ))
        .copied()
        .unwrap_or(0.0) as u64;
    assert_eq!(accepted, feed(&m, "gap_responses_total"), "{m:?}");
    // A Gap Response that arrives after its messages (the gap multicast
    // can beat the TCP response) echoes a request that already ended: it
    // is dropped and counted (R4c), never more than were received.
    assert!(feed(&m, "gap_responses_dropped_total") <= feed(&m, "gap_responses_total"));
    assert_eq!(feed(&m, "session_changes_total"), 0);
    // R6 per unit: the three units, whose holes add up to the feed's.
    let units = unit_values(&m, "holes_opened_total");
    assert_eq!(units.len(), 3, "{units:?}");
    assert_eq!(
        units.values().sum::<u64>(),
        feed(&m, "holes_opened_total"),
        "{units:?}"
    );
    assert_eq!(
        unit_values(&m, "holes_filled_total"),
        units,
        "every unit's holes filled"
    );
    assert!(unit_values(&m, "channel_messages_lost_total")
        .values()
        .all(|&n| n == 0));
    // The gap line carried the proxy's answers and heartbeats.
    assert!(line(&m, "packets_received_total", "G") >= 1, "{m:?}");
    // `tickgate status`: the proxy logged in at the configured count
    // limit (`grp.max_count`, default 100) and not paused; the three units, none
    // with a spin server, all served by the proxy.
    let raw = d.status(true);
    assert_eq!(
        status_lines(&raw, "GRP "),
        [format!(
            "GRP {FEED} logged_in=1 count_limit=100 pause=- pause_left_ms=-"
        )],
        "{raw}"
    );
    assert_eq!(
        status_lines(&raw, "UNIT "),
        (1..=3)
            .map(|u| format!("UNIT {FEED} {u} spin=none spin_wait_ms=- grp=on"))
            .collect::<Vec<_>>(),
        "{raw}"
    );
    let text = d.status(false);
    assert!(
        text.contains(&format!(
            "feed {FEED}: Gap Request Proxy logged in, count limit 100\n"
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!("feed {FEED} unit 2: no spin server\n")),
        "{text}"
    );
    for i in 0..SYMBOLS {
        let symbol = symbol_name(i);
        let answer = daemon::ask(&d.socket(), &format!("CHECK {symbol}"));
        assert!(answer.starts_with("OK "), "{answer}\n{log}");
    }
    drop(sim);
}

/// Waits for the simulator to end; the data packets it lost on both
/// lines, from its summary ("lost on every line: N packets, ...").
fn finish(sim: &mut Child2) -> u64 {
    let mut status = None;
    wait_for("the simulator to finish", || {
        status = sim.child.try_wait().unwrap();
        status.is_some()
    });
    let log = sim.whole_log();
    assert!(status.unwrap().success(), "{log}");
    log.split("lost on every line: ")
        .nth(1)
        .and_then(|s| s.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no loss summary in:\n{log}"))
}

/// R4c `O`: the simulator's proxy keeps one message per unit, so what
/// both lines lost is out of range by the time it is asked for: each such
/// hole is declared lost on its Gap Response, not left to its deadline,
/// and the feed goes on (the symbols of the unit answer `channel_gap`).
#[test]
fn holes_the_proxy_cannot_fill_are_declared_lost() {
    let (_serial, g, grp, d) = setup(4, 46602);
    let mut sim = simulate(&g, grp, 600, &["--grp-history", "1"]);
    let lost = finish(&mut sim);
    assert!(lost >= 2);
    let mut m = BTreeMap::new();
    wait_for("every hole closed", || {
        m = d.metrics();
        feed(&m, "recovering") == 0 && feed(&m, "holes_lost_total") >= 2
    });
    let log = d.process.log();
    assert!(feed(&m, "gap_responses_refused_total") >= 2, "{log}");
    let out_of_range = m
        .get(&format!(
            "tickgate_feed_gap_responses_by_status_total{{feed=\"{FEED}\",status=\"O\"}}"
        ))
        .copied()
        .unwrap_or(0.0) as u64;
    assert!(out_of_range >= 2, "{m:?}");
    assert!(feed(&m, "channel_messages_lost_total") >= 2, "{log}");
    assert_eq!(feed(&m, "grp_logged_in"), 1, "{log}");
    // Per unit, what each lost adds up to the feed's.
    assert_eq!(
        unit_values(&m, "channel_messages_lost_total")
            .values()
            .sum::<u64>(),
        feed(&m, "channel_messages_lost_total")
    );
}

/// The simulated venues' symbols: S00001, S00002, ...
fn symbol_name(i: usize) -> String {
    tickgate::sim::venue_sim::venue_symbol(i).to_string()
}

/// The feed's holes closed within `secs` seconds of opening (the
/// cumulative bucket of `tickgate_feed_hole_open_seconds` at that bound).
fn holes_closed_within(m: &BTreeMap<String, f64>, secs: f64) -> u64 {
    let prefix = format!("tickgate_feed_hole_open_seconds_bucket{{feed=\"{FEED}\",le=\"");
    m.iter()
        .find_map(|(k, v)| {
            let le: f64 = k.strip_prefix(&prefix)?.strip_suffix("\"}")?.parse().ok()?;
            (le == secs).then_some(*v as u64)
        })
        .unwrap_or_else(|| panic!("no {secs} s bucket of the hole time in {m:?}"))
}

/// R4c `C`: the simulator's proxy takes at most one message per request
/// and every lost datagram holds four, against the feed's `grp.max_count`
/// of 4. The feed halves its count limit on each `C` (4, 2, then 1),
/// asks again at once without spending an attempt, and fills every hole;
/// the limit stays at 1, on `/metrics` and on `tickgate status`.
#[test]
fn count_refusals_halve_the_count_limit_and_holes_are_filled() {
    let _serial = serial();
    let g = groups(7, 46603);
    let grp: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let d = Daemon::start_with(&g, grp, "", ", max_count = 4");
    // `--rate` counts messages: 75 datagrams a second, a loss every 2 s.
    let mut sim = simulate(&g, grp, 150, &["--batch", "4", "--grp-max-count", "1"]);
    let lost = finish(&mut sim);
    assert!(lost >= 2);
    let m = every_hole_closed(&d, 2);
    let log = d.process.log();
    // 4 -> 2 -> 1: at least two `C`, then only `A`.
    assert!(by_status(&m, "C") >= 2, "{m:?}");
    assert_eq!(feed(&m, "grp_count_limit"), 1, "{m:?}");
    assert_eq!(
        feed(&m, "gap_responses_refused_total"),
        by_status(&m, "C"),
        "no refusal but C: {m:?}"
    );
    assert_eq!(feed(&m, "holes_lost_total"), 0, "{log}");
    assert_eq!(feed(&m, "channel_messages_lost_total"), 0, "{log}");
    // A hole of four messages or more took as many one-message requests.
    assert!(
        by_status(&m, "A") >= 4 * feed(&m, "holes_filled_total"),
        "{m:?}"
    );
    let raw = d.status(true);
    assert_eq!(
        status_lines(&raw, "GRP "),
        [format!(
            "GRP {FEED} logged_in=1 count_limit=1 pause=- pause_left_ms=-"
        )],
        "{raw}"
    );
}

/// R4c `S`: the simulator's proxy refuses every request with `S` (its
/// allowance is 0 a second). Each `S` holds every Gap Request of the feed
/// back for 1 s and moves each open hole's deadline to the pause's end
/// plus `rerequest_attempts` x `rerequest_timeout_ms` (here 0.5 s), never
/// beyond `max_hole_ms` (2 s): no hole is declared lost within the first
/// second, although its own re-request deadline (0.5 s) would have
/// passed, and the requests leave at most one a second. The losses (4 s
/// and 8 s in) end 2 s later, well before the stream (11.5 s) and its
/// proxy, and a third would fall after the stream's end (12 s).
#[test]
fn second_refusals_pause_the_requests_and_stretch_the_deadlines() {
    let (_serial, g, grp, d) = setup(10, 46604);
    let started = std::time::Instant::now();
    let mut sim = simulate(
        &g,
        grp,
        1200,
        &["--grp-per-second", "0", "--duration", "11.5"],
    );
    let lost = finish(&mut sim);
    assert_eq!(lost, 2);
    let mut m = BTreeMap::new();
    wait_for("every hole declared lost", || {
        m = d.metrics();
        feed(&m, "recovering") == 0
            && feed(&m, "holes_lost_total") >= 2
            && feed(&m, "holes_opened_total") == feed(&m, "holes_lost_total")
    });
    let elapsed = started.elapsed().as_secs();
    let log = d.process.log();
    // Two requests a hole at least: one on opening, one after the pause.
    assert!(by_status(&m, "S") >= 4, "{m:?}");
    assert_eq!(feed(&m, "gap_responses_refused_total"), by_status(&m, "S"));
    assert_eq!(feed(&m, "holes_filled_total"), 0, "{log}");
    // Every hole outlived the pause its first request met.
    assert_eq!(
        m[&format!("tickgate_feed_hole_open_seconds_count{{feed=\"{FEED}\"}}")] as u64,
        feed(&m, "holes_lost_total")
    );
    assert_eq!(holes_closed_within(&m, 1.0), 0, "{log}");
    // At most one request a second leaves the feed, whatever its holes.
    assert!(
        feed(&m, "rerequests_sent_total") <= elapsed + 1,
        "{} requests in {elapsed} s: {m:?}",
        feed(&m, "rerequests_sent_total")
    );
}

/// R4c `I`: the simulator's proxy does not serve unit 2. The first Gap
/// Request for unit 2 gets `I`; no other request for that unit leaves in
/// its session, and its holes are declared lost at R2's deadline without
/// re-requests, while units 1 and 3 have theirs filled. `tickgate status`
/// shows the unit's proxy off.
#[test]
fn an_unserved_unit_is_not_asked_for_again_and_its_holes_are_lost() {
    let (_serial, g, grp, d) = setup(13, 46605);
    // A loss every 400 data packets (1.3 s), each of the next unit in
    // turn, the first once the proxy is logged in.
    let mut sim = simulate(&g, grp, 400, &["--grp-not-served", "2", "--duration", "10"]);
    let lost = finish(&mut sim);
    assert!(lost >= 6);
    let m = every_hole_closed(&d, 6);
    let log = d.process.log();
    assert_eq!(by_status(&m, "I"), 1, "{m:?}\n{log}");
    let opened = unit_values(&m, "holes_opened_total");
    let filled = unit_values(&m, "holes_filled_total");
    let lost_per_unit = unit_values(&m, "holes_lost_total");
    assert!(opened[&2] >= 2, "{opened:?}");
    assert_eq!(lost_per_unit[&2], opened[&2], "unit 2: every hole lost");
    for u in [1, 3] {
        assert_eq!(filled[&u], opened[&u], "unit {u}: every hole filled");
        assert_eq!(lost_per_unit[&u], 0, "unit {u}");
    }
    assert!(
        log.contains("does not serve this unit"),
        "the refusal is logged: {log}"
    );
    let raw = d.status(true);
    assert_eq!(
        status_lines(&raw, "UNIT "),
        [
            format!("UNIT {FEED} 1 spin=none spin_wait_ms=- grp=on"),
            format!("UNIT {FEED} 2 spin=none spin_wait_ms=- grp=off"),
            format!("UNIT {FEED} 3 spin=none spin_wait_ms=- grp=on"),
        ],
        "{raw}"
    );
    let text = d.status(false);
    assert!(
        text.contains(&format!(
            "feed {FEED} unit 2: no spin server, Gap Request Proxy off until the unit's next session (I)\n"
        )),
        "{text}"
    );
}

/// The pause of the feed's `GRP` status line and its `pause_left_ms`
/// (`None` for `-`).
fn grp_pause(raw: &str) -> (String, Option<u64>) {
    let line = status_lines(raw, "GRP ")
        .pop()
        .unwrap_or_else(|| panic!("no GRP line: {raw}"));
    let field = |name: &str| {
        line.split_whitespace()
            .find_map(|f| f.strip_prefix(name))
            .unwrap_or_else(|| panic!("no {name} in {line}"))
            .to_string()
    };
    let left = field("pause_left_ms=");
    let left = (left != "-").then(|| {
        left.parse()
            .unwrap_or_else(|_| panic!("pause_left_ms not a number: {line}"))
    });
    (field("pause="), left)
}

/// R4c `M` (and `D` with `day`): the simulator's proxy answers one
/// request, then refuses the next with `M` (`D`). The first hole is
/// filled; after the refusal no Gap Request leaves the feed (for 60 s, or
/// until New York's next day), and every later hole gets R2's deadline
/// without re-requests: declared lost, none asked for. `tickgate status`
/// shows the pause and its time left.
fn allowance_refusal_stops_the_requests(day: bool, base: u8, port: u16) {
    let (_serial, g, grp, d) = setup(base, port);
    let (flag, status) = if day {
        ("--grp-per-day", "D")
    } else {
        ("--grp-per-minute", "M")
    };
    // A loss every 600 data packets (2 s), the first once the proxy is
    // logged in: four holes.
    let mut sim = simulate(&g, grp, 600, &[flag, "1", "--duration", "9"]);
    let lost = finish(&mut sim);
    assert!(lost >= 3, "{lost}");
    let m = every_hole_closed(&d, 3);
    let log = d.process.log();
    assert_eq!(by_status(&m, "A"), 1, "{m:?}\n{log}");
    assert_eq!(by_status(&m, status), 1, "{m:?}\n{log}");
    // The request refused, and none after it.
    assert_eq!(feed(&m, "rerequests_sent_total"), 2, "{m:?}");
    assert_eq!(feed(&m, "holes_filled_total"), 1, "{m:?}");
    assert_eq!(
        feed(&m, "holes_lost_total"),
        feed(&m, "holes_opened_total") - 1,
        "{m:?}"
    );
    let raw = d.status(true);
    let (pause, left) = grp_pause(&raw);
    assert_eq!(pause, status, "{raw}");
    let most = if day { 25 * 3_600_000 } else { 60_000 };
    assert!(left.is_some_and(|l| l > 0 && l <= most), "{raw}");
    drop(sim);
}

#[test]
fn a_minute_refusal_stops_the_requests_for_a_minute() {
    allowance_refusal_stops_the_requests(false, 16, 46606);
}

#[test]
fn a_day_refusal_stops_the_requests_until_new_yorks_next_day() {
    allowance_refusal_stops_the_requests(true, 19, 46607);
}

/// R4c `U`: the simulator's proxy answers the connection's first two
/// requests with `U` (the unit cannot be served right now). Each is an
/// attempt without progress: asked again after `rerequest_timeout_ms`
/// (0.1 s, of 5 attempts), and the third is answered: every hole filled,
/// nothing lost, no pause.
#[test]
fn unavailable_units_are_asked_again_and_filled() {
    let (_serial, g, grp, d) = setup(22, 46608);
    let mut sim = simulate(&g, grp, 600, &["--grp-unavailable", "2"]);
    let lost = finish(&mut sim);
    assert!(lost >= 2);
    let m = every_hole_closed(&d, 2);
    let log = d.process.log();
    assert_eq!(by_status(&m, "U"), 2, "{m:?}\n{log}");
    assert_eq!(feed(&m, "holes_lost_total"), 0, "{log}");
    assert_eq!(feed(&m, "channel_messages_lost_total"), 0, "{log}");
    // The first hole took three requests, each later one one.
    assert_eq!(
        feed(&m, "rerequests_sent_total"),
        feed(&m, "holes_opened_total") + 2,
        "{m:?}"
    );
    let raw = d.status(true);
    assert_eq!(grp_pause(&raw), ("-".to_string(), None), "{raw}");
    drop(sim);
}

//! recovery.md R5c through the daemon: `tickgate run` joins a
//! `cboe-pitch` stream of two units under way (`tickgate simulate
//! --live`, loopback multicast). Once both units are spun, every book is
//! the simulator's: at the stream's end each symbol's quote equals the
//! truth file's book top. And with unit 1's Spin Server hostile on its
//! first connection (bytes that do not parse, or a spin whose Add Orders
//! are fewer than its Spin Response's order count) the attempt fails
//! (`malformed`), nothing of it is applied, and the unit's next attempt,
//! at its pace, reaches the simulator's real server: every symbol is
//! trusted in the end. Waits are bounded safety nets.

use std::sync::atomic::Ordering;
use std::time::Duration;

#[path = "common/daemon.rs"]
mod daemon;
#[path = "common/pitch.rs"]
mod pitch;
#[path = "common/pitch_daemon.rs"]
mod pitch_daemon;

use daemon::{free_port, serial, wait_within};
use pitch::add;
use pitch_daemon::{
    hostile_once, run_daemon, simulate, simulate_with, spin_servers, wait_all_trusted,
};
use tickgate::venue::cboe_pitch::session::{encode_block, LoginStatus, SessionMessage, SpinStatus};

const USD: i64 = 1_000_000_000;

fn block(msgs: &[SessionMessage], out: &mut Vec<u8>) {
    encode_block(msgs, out).unwrap();
}

/// Logged in, a Spin Image Available far ahead of the unit (so that the
/// client asks for it: R5c step 3), accepted with `order_count`.
fn accepted(order_count: u32) -> Vec<u8> {
    const S: u32 = 1_000_000;
    let mut out = Vec::new();
    block(
        &[SessionMessage::LoginResponse(LoginStatus::Accepted)],
        &mut out,
    );
    block(
        &[SessionMessage::SpinImageAvailable { sequence: S }],
        &mut out,
    );
    block(
        &[SessionMessage::SpinResponse {
            sequence: S,
            order_count,
            status: SpinStatus::Accepted,
        }],
        &mut out,
    );
    out
}

/// Three Add Orders announced, two sent (of symbols the simulator never
/// names), then Spin Finished.
fn lying_order_count() -> Vec<u8> {
    let mut out = accepted(3);
    block(
        &[
            SessionMessage::Pitch(add(1, b'B', 999, "ZZLIE", 50 * USD)),
            SessionMessage::Pitch(add(2, b'S', 10, "ZZLIE", 51 * USD)),
        ],
        &mut out,
    );
    block(
        &[SessionMessage::SpinFinished {
            sequence: 1_000_000,
        }],
        &mut out,
    );
    out
}

/// A block whose Length is shorter than its header, once the spin is
/// under way.
fn garbage() -> Vec<u8> {
    let mut out = accepted(1);
    out.extend_from_slice(&[3, 0, 1, 0, 0, 0, 0, 0, 0xff, 0xff]);
    out
}

fn a_hostile_first_spin_fails_and_the_next_is_applied(name: &str, script: Vec<u8>, port: u8) {
    let _serial = serial();
    let group = format!("239.255.96.{port}:{}", free_port());
    let (_sim, sim_log) = simulate(&group, 2);
    let servers = spin_servers(&sim_log);
    let (hostile, accepted) = hostile_once(servers[0], script);
    std::thread::sleep(Duration::from_millis(1500));

    let (_run, log, dir, metrics) = run_daemon(&group, [hostile, servers[1]]);
    let socket = dir.path().join("gate.sock");
    let check = |s: &str| daemon::ask(&socket, &format!("CHECK {s}"));
    wait_all_trusted(
        &socket,
        "every symbol trusted after unit 1's second attempt",
    );
    let text = log.lock().unwrap().clone();
    assert!(accepted.load(Ordering::SeqCst) >= 2, "{name}: {text}");
    let failures: Vec<&str> = text.lines().filter(|l| l.contains("spin failed")).collect();
    assert_eq!(failures.len(), 1, "{name}: {text}");
    assert!(failures[0].contains("unit=1"), "{name}: {}", failures[0]);
    assert!(failures[0].contains("malformed"), "{name}: {}", failures[0]);
    let m = daemon::metrics(metrics);
    assert_eq!(
        m.get("tickgate_feed_snapshots_failed_total{feed=\"px\"}"),
        Some(&1.0),
        "{name}: {text}"
    );
    // Nothing of the hostile attempt was applied: its symbol is unknown.
    let lie = check("ZZLIE");
    assert!(
        lie.starts_with("REJECT ZZLIE unknown_symbol"),
        "{name}: {lie}"
    );
}

#[test]
fn a_spin_whose_order_count_lies_fails_and_the_unit_is_spun_again() {
    a_hostile_first_spin_fails_and_the_next_is_applied(
        "lying order count",
        lying_order_count(),
        67,
    );
}

#[test]
fn a_spin_server_sending_garbage_fails_and_the_unit_is_spun_again() {
    a_hostile_first_spin_fails_and_the_next_is_applied("garbage", garbage(), 69);
}

/// A late join rebuilt by the spins: once the stream has ended, every
/// symbol's quote through the gate is the simulator's book top (its
/// truth file), both sides, price and size.
#[test]
fn after_the_spins_every_book_equals_the_simulators() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let truth_path = dir.path().join("truth.json");
    let group = format!("239.255.96.71:{}", free_port());
    let truth_arg = truth_path.to_str().unwrap();
    let (mut sim, sim_log) = simulate_with(&group, 2, &["--duration", "8", "--truth", truth_arg]);
    let servers = spin_servers(&sim_log);
    // Both units are well under way before the daemon joins.
    std::thread::sleep(Duration::from_millis(1500));
    let (_run, log, dir2, _metrics) = run_daemon(&group, servers);
    let socket = dir2.path().join("gate.sock");
    let check = |s: &str| daemon::ask(&socket, &format!("CHECK {s}"));
    wait_all_trusted(&socket, "every symbol trusted after both units' spins");
    wait_within(Duration::from_secs(30), "the simulator's end", &mut || {
        sim.0.try_wait().unwrap().is_some()
    });
    let truth: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&truth_path).unwrap()).unwrap();
    let tops = truth["venue"]["symbols"].as_array().unwrap();
    assert_eq!(tops.len(), 8);
    let field = |answer: &str, name: &str| {
        answer
            .split_whitespace()
            .find_map(|f| f.strip_prefix(name))
            .unwrap_or_default()
            .to_string()
    };
    let side = |v: &serde_json::Value| v.as_str().unwrap_or("-").to_string();
    // The stream's last datagrams may still be on their way.
    let mut last = String::new();
    let equal = (0..50).any(|_| {
        let all = tops.iter().all(|top| {
            let symbol = top["symbol"].as_str().unwrap();
            let a = check(symbol);
            let same =
                field(&a, "bid=") == side(&top["bid"]) && field(&a, "ask=") == side(&top["ask"]);
            if !same {
                last = format!("{a}\ntruth: {top}");
            }
            same
        });
        all || {
            std::thread::sleep(Duration::from_millis(100));
            false
        }
    });
    assert!(equal, "{last}\n{}", log.lock().unwrap());
    // Each unit was spun once.
    let text = log.lock().unwrap().clone();
    for unit in ["unit=1", "unit=2"] {
        assert_eq!(
            text.lines()
                .filter(|l| l.contains("spin applied") && l.contains(unit))
                .count(),
            1,
            "{text}"
        );
    }
}

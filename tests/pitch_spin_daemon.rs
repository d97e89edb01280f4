//! recovery.md R5c through the daemon: `tickgate run` joins a
//! `cboe-pitch` stream of two units under way (`tickgate simulate --live`,
//! multicast on loopback), each unit late (`no_snapshot`); the feed's Spin
//! client spins each unit from the simulator's Spin Server of that unit
//! and every symbol is then trusted. Waits are bounded safety nets.

use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

#[path = "common/daemon.rs"]
mod daemon;
#[path = "common/pitch_daemon.rs"]
mod pitch_daemon;

use daemon::{free_port, serial, wait_for, wait_within};
use pitch_daemon::{
    delayed, hostile_once, named, run_daemon, simulate, spin_servers, status_raw, trusted,
    wait_all_trusted,
};

#[test]
fn the_daemon_spins_each_late_unit_and_trusts_every_symbol() {
    let _serial = serial();
    let group = format!("239.255.96.61:{}", free_port());
    let (_sim, sim_log) = simulate(&group, 2);
    let servers = spin_servers(&sim_log);
    // Both units are well under way before the daemon joins.
    std::thread::sleep(Duration::from_millis(1500));

    let (_run, log, dir, metrics) = run_daemon(&group, servers);
    let socket = dir.path().join("gate.sock");

    wait_all_trusted(&socket, "every symbol trusted after both units' spins");
    // The metrics and the log follow within moments.
    wait_for("two spins applied in /metrics", || {
        let m = daemon::metrics(metrics);
        m.get("tickgate_feed_glimpse_snapshots_applied_total{feed=\"px\"}")
            .is_some_and(|&n| n >= 2.0)
    });
    wait_for("each unit's spin in the log", || {
        let text = log.lock().unwrap().clone();
        ["unit=1", "unit=2"].iter().all(|unit| {
            text.lines()
                .any(|l| l.contains("spin applied") && l.contains(unit))
        })
    });
}

/// A Spin Server that accepts connections and never sends a byte; counts
/// them, and keeps each open.
fn silent_server() -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let n = accepted.clone();
    std::thread::spawn(move || {
        let mut open = Vec::new();
        for stream in listener.incoming() {
            let Ok(stream) = stream else { break };
            n.fetch_add(1, Ordering::SeqCst);
            open.push(stream);
        }
    });
    (addr, accepted)
}

/// R5c failure by silence: unit 1's Spin Server accepts and says nothing.
/// The attempt is abandoned after 15 s without a block (`silence`), and a
/// new attempt connects again at the unit's pace; unit 1's symbols stay
/// untrusted (`no_snapshot`) meanwhile. Unit 2, whose server works, is
/// spun and trusted while unit 1's first attempt still runs (R5c: attempts
/// of different units run at the same time). `tickgate status` shows each
/// unit's spin.
#[test]
fn a_silent_spin_server_fails_by_silence_and_is_retried_while_other_units_spin() {
    let _serial = serial();
    let group = format!("239.255.96.63:{}", free_port());
    let (_sim, sim_log) = simulate(&group, 2);
    let mut unit2 = None;
    wait_for("unit 2's Spin Server address", || {
        unit2 = named(&sim_log, "Spin Server of unit 2 on ");
        unit2.is_some()
    });
    let (silent, accepted) = silent_server();
    // Unit 2's spin takes at least 2 s: unit 1's attempt, wanted at the
    // same join, has started by the time it is applied, whichever unit
    // the feed started first. One spin at a time would apply unit 2's
    // before unit 1's started, or 15 s after.
    let unit2 = delayed(unit2.unwrap(), Duration::from_secs(2));
    std::thread::sleep(Duration::from_millis(1500));

    let (_run, log, dir, metrics) = run_daemon(&group, [silent, unit2]);
    let socket = dir.path().join("gate.sock");
    let check = |s: &str| daemon::ask(&socket, &format!("CHECK {s}"));
    // Unit 1 has the odd symbols, unit 2 the even ones.
    let unit1 = ["S00001", "S00003", "S00005", "S00007"];
    let unit2_symbols = ["S00002", "S00004", "S00006", "S00008"];
    // R5c: attempts of different units run at the same time: unit 2 is
    // spun and trusted while unit 1's first attempt, on its own
    // connection, still waits for a silent server.
    let unit2_trusted = || unit2_symbols.iter().all(|s| trusted(&socket, s));
    wait_within(
        Duration::from_secs(40),
        "unit 2's symbols trusted after its spin",
        &mut || unit2_trusted(),
    );
    let raw = status_raw(&socket);
    let connections = accepted.load(Ordering::SeqCst);
    assert!(
        raw.lines()
            .any(|l| l == "UNIT px 1 spin=running spin_wait_ms=- grp=-")
            && connections == 1,
        "unit 1's first attempt runs while unit 2's symbols are trusted \
         ({connections} connections):\n{raw}\n{}",
        log.lock().unwrap()
    );
    // And it started before unit 2's spin was applied: they ran together.
    wait_for("unit 2's spin applied in the log", || {
        let text = log.lock().unwrap().clone();
        text.lines()
            .any(|l| l.contains("spin applied") && l.contains("unit=2"))
    });
    let text = log.lock().unwrap().clone();
    let started = text
        .lines()
        .position(|l| l.contains("spin started") && l.contains("unit=1"));
    let applied = text
        .lines()
        .position(|l| l.contains("spin applied") && l.contains("unit=2"));
    assert!(
        started.is_some() && started < applied,
        "unit 1's attempt started before unit 2's spin was applied:\n{text}"
    );
    wait_within(
        Duration::from_secs(40),
        "unit 1's attempt abandoned for silence and a new one connected",
        &mut || {
            let failed = daemon::metrics(metrics)
                .get("tickgate_feed_snapshots_failed_total{feed=\"px\"}")
                .is_some_and(|&n| n >= 1.0);
            failed && accepted.load(Ordering::SeqCst) >= 2
        },
    );
    let text = log.lock().unwrap().clone();
    let failure = text
        .lines()
        .find(|l| l.contains("spin failed"))
        .unwrap_or_else(|| panic!("no spin failure logged:\n{text}"));
    assert!(failure.contains("unit=1"), "{failure}");
    assert!(failure.contains("silence"), "{failure}");
    assert!(
        !text
            .lines()
            .any(|l| l.contains("spin failed") && l.contains("unit=2")),
        "{text}"
    );
    // Unit 1 is still not trusted; unit 2 still is.
    for s in unit1 {
        let a = check(s);
        assert!(a.starts_with(&format!("REJECT {s} ")), "{a}");
        assert!(a.contains("no_snapshot"), "{a}");
    }
    for s in unit2_symbols {
        let a = check(s);
        assert!(!a.contains("no_snapshot"), "{a}");
    }
    // `tickgate status`: unit 1 spinning again (or waiting for its pace
    // after the silence), unit 2 needing none. The status is written by
    // the feed thread at its next poll after a spin ends, so it is read
    // until it says so (a bounded safety net).
    let status = || status_raw(&socket);
    let expected = |raw: &str| {
        let units: Vec<&str> = raw.lines().filter(|l| l.starts_with("UNIT ")).collect();
        units.len() == 2
            && (units[0] == "UNIT px 1 spin=running spin_wait_ms=- grp=-"
                || units[0].starts_with("UNIT px 1 spin=wanted:last_failure=silence spin_wait_ms="))
            && units[1] == "UNIT px 2 spin=idle spin_wait_ms=- grp=-"
    };
    let mut raw = String::new();
    let settled = (0..50).any(|_| {
        raw = status();
        expected(&raw) || {
            std::thread::sleep(Duration::from_millis(100));
            false
        }
    });
    assert!(settled, "{raw}\n{}", log.lock().unwrap());
    assert!(!raw.contains("\nGRP "), "no GRP line without grp: {raw}");
}

/// Login Response `N` (not authorized), as a refusing Spin Server sends
/// it once the Login is read.
fn refusal() -> Vec<u8> {
    use tickgate::venue::cboe_pitch::session::{encode_block, LoginStatus, SessionMessage};
    let mut out = Vec::new();
    encode_block(
        &[SessionMessage::LoginResponse(LoginStatus::NotAuthorized)],
        &mut out,
    )
    .unwrap();
    out
}

/// R5c: a spin refused at login (Login Response `N`) fails the attempt
/// (`login_rejected`), and the unit's next attempt, at its pace, is
/// accepted and applied: every symbol of both units is trusted in the
/// end, and `tickgate status` shows no spin needed.
#[test]
fn a_refused_spin_is_retried_at_the_pace_and_then_applied() {
    let _serial = serial();
    let group = format!("239.255.96.65:{}", free_port());
    let (_sim, sim_log) = simulate(&group, 2);
    let servers = spin_servers(&sim_log);
    let (relay, accepted) = hostile_once(servers[0], refusal());
    std::thread::sleep(Duration::from_millis(1500));

    let (_run, log, dir, metrics) = run_daemon(&group, [relay, servers[1]]);
    let socket = dir.path().join("gate.sock");
    wait_all_trusted(
        &socket,
        "every symbol trusted after unit 1's second attempt",
    );
    assert!(accepted.load(Ordering::SeqCst) >= 2);
    wait_for("unit 1's refusal and its spin in the log", || {
        let text = log.lock().unwrap().clone();
        let unit1 = |what: &str| {
            text.lines()
                .any(|l| l.contains(what) && l.contains("unit=1"))
        };
        unit1("spin failed") && unit1("spin applied")
    });
    let text = log.lock().unwrap().clone();
    let failure = text.lines().find(|l| l.contains("spin failed")).unwrap();
    assert!(failure.contains("login_rejected"), "{failure}");
    let m = daemon::metrics(metrics);
    assert_eq!(
        m.get("tickgate_feed_snapshots_failed_total{feed=\"px\"}"),
        Some(&1.0),
        "{text}"
    );
    // `tickgate status` (published every 50 ms by the feed's thread): no
    // spin needed any more.
    let status = || status_raw(&socket);
    let mut raw = String::new();
    wait_for("both units idle in tickgate status", || {
        raw = status();
        raw.contains("\nUNIT px 1 spin=idle ")
    });
    let units: Vec<&str> = raw.lines().filter(|l| l.starts_with("UNIT ")).collect();
    assert_eq!(
        units,
        [
            "UNIT px 1 spin=idle spin_wait_ms=- grp=-",
            "UNIT px 2 spin=idle spin_wait_ms=- grp=-"
        ],
        "{raw}"
    );
}

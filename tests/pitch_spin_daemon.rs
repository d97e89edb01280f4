//! recovery.md R5c through the daemon: `tickgate run` joins a
//! `cboe-pitch` stream of two units under way (`tickgate simulate --live`,
//! multicast on loopback), each unit late (`no_snapshot`); the feed's Spin
//! client spins each unit from the simulator's Spin Server of that unit
//! and every symbol is then trusted. Waits are bounded safety nets.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[path = "common/daemon.rs"]
mod daemon;

use daemon::{bin, free_port, serial, terminate, wait_for, wait_within};

struct Stop(Child);

impl Drop for Stop {
    fn drop(&mut self) {
        terminate(&mut self.0);
    }
}

/// Collects a child's standard error into a shared string.
fn collect(child: &mut Child) -> Arc<Mutex<String>> {
    let log = Arc::new(Mutex::new(String::new()));
    let stderr = child.stderr.take().unwrap();
    let l = log.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            let mut l = l.lock().unwrap();
            l.push_str(&line);
            l.push('\n');
        }
    });
    log
}

/// The address standard error names after `prefix`.
fn named(log: &Mutex<String>, prefix: &str) -> Option<SocketAddr> {
    log.lock().unwrap().lines().find_map(|l| {
        l.strip_prefix(prefix)?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    })
}

#[test]
fn the_daemon_spins_each_late_unit_and_trusts_every_symbol() {
    let _serial = serial();
    let group = format!("239.255.96.61:{}", free_port());
    let mut sim = Command::new(bin())
        .args([
            "simulate",
            "--live",
            "--venue",
            "cboe-pitch",
            "--units",
            "2",
        ])
        .args(["--symbols", "8", "--orders", "200", "--rate", "1000"])
        .args(["--batch", "3", "--duration", "60", "--lines", "A"])
        .args(["--group-a", &group, "--interface", "127.0.0.1"])
        .args(["--spin-listen", "127.0.0.1:0"])
        .args(["--pitch-sub-id", "0006", "--pitch-user", "MKDA"])
        .args(["--pitch-password", "secret"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let sim_log = collect(&mut sim);
    let _sim = Stop(sim);
    let mut servers = [None, None];
    wait_for("the Spin Servers' addresses", || {
        servers[0] = named(&sim_log, "Spin Server of unit 1 on ");
        servers[1] = named(&sim_log, "Spin Server of unit 2 on ");
        servers.iter().all(Option::is_some)
    });
    // Both units are well under way before the daemon joins.
    std::thread::sleep(Duration::from_millis(1500));

    let dir = tempfile::tempdir().unwrap();
    let metrics: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let (ip, port) = group.split_once(':').unwrap();
    let cfg = dir.path().join("tickgate.toml");
    std::fs::write(
        &cfg,
        format!(
            r#"
[[feed]]
name = "px"
venue = "cboe-pitch"
stale_ms = 600000
source_max_age_ms = 600000
clock_offset = "off"
spin = {{ session_sub_id = "0006", username = "MKDA", password = "secret", servers = {{ "1" = "{}", "2" = "{}" }} }}
[[feed.line]]
name = "A"
group = "{ip}"
port = {port}
interface = "127.0.0.1"

[gate]
socket = "{}"

[metrics]
listen = "{metrics}"
"#,
            servers[0].unwrap(),
            servers[1].unwrap(),
            dir.path().join("gate.sock").display()
        ),
    )
    .unwrap();
    let mut run = Command::new(bin())
        .arg("run")
        .arg("--config")
        .arg(&cfg)
        .env_remove("NOTIFY_SOCKET")
        .env("RUST_LOG", "warn,tickgate::daemon=info,tickgate::net=info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let log = collect(&mut run);
    let _run = Stop(run);
    let socket = dir.path().join("gate.sock");
    daemon::wait_for_gate(&socket);

    let trusted = |s: &str| {
        let a = daemon::ask(&socket, &format!("CHECK {s}"));
        a.starts_with(&format!("OK {s} seq=")) || a.starts_with(&format!("REJECT {s} halted seq="))
    };
    wait_within(
        Duration::from_secs(30),
        "every symbol trusted after both units' spins",
        &mut || (1..=8).all(|i| trusted(&format!("S{i:05}"))),
    );
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

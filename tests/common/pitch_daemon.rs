//! `tickgate run` on a `cboe-pitch` stream of two units with Spin
//! Servers (recovery.md R5c), for the tests that drive the daemon
//! (`pitch_spin_daemon`, `pitch_spin_run`): the simulator under way
//! on loopback multicast, the daemon joining it late, their logs.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::daemon::{self, bin, free_port, terminate};

pub struct Stop(pub Child);

impl Drop for Stop {
    fn drop(&mut self) {
        terminate(&mut self.0);
    }
}

/// Collects a child's standard error into a shared string.
pub fn collect(child: &mut Child) -> Arc<Mutex<String>> {
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
pub fn named(log: &Mutex<String>, prefix: &str) -> Option<SocketAddr> {
    log.lock().unwrap().lines().find_map(|l| {
        l.strip_prefix(prefix)?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    })
}

/// `tickgate run` with feed `px` on `group` (line A), unit 1's Spin Server
/// at `servers[0]` and unit 2's at `servers[1]`: the process, its
/// standard error, its directory (the gate socket is `gate.sock` in it)
/// and its metrics address, once the gate answers.
pub fn run_daemon(
    group: &str,
    servers: [SocketAddr; 2],
) -> (Stop, Arc<Mutex<String>>, tempfile::TempDir, SocketAddr) {
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
            servers[0],
            servers[1],
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
    let run = Stop(run);
    daemon::wait_for_gate(&dir.path().join("gate.sock"));
    (run, log, dir, metrics)
}

/// The gate's `STATUS` lines, through `tickgate status --raw`.
pub fn status_raw(socket: &std::path::Path) -> String {
    let out = Command::new(bin())
        .args(["status", "--raw", "--socket"])
        .arg(socket)
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap()
}

/// The simulator: `units` units under way on `group` (line A only), each
/// with its Spin Server, for 60 s; standard error collected.
pub fn simulate(group: &str, units: u8) -> (Stop, Arc<Mutex<String>>) {
    simulate_with(group, units, &["--duration", "60"])
}

/// As `simulate`, with `extra` flags (`--duration` among them).
pub fn simulate_with(group: &str, units: u8, extra: &[&str]) -> (Stop, Arc<Mutex<String>>) {
    let mut sim = Command::new(bin())
        .args([
            "simulate",
            "--live",
            "--venue",
            "cboe-pitch",
            "--units",
            &units.to_string(),
        ])
        .args(["--symbols", "8", "--orders", "200", "--rate", "1000"])
        .args(["--batch", "3", "--lines", "A"])
        .args(["--group-a", group, "--interface", "127.0.0.1"])
        .args(["--spin-listen", "127.0.0.1:0"])
        .args(["--pitch-sub-id", "0006", "--pitch-user", "MKDA"])
        .args(["--pitch-password", "secret"])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let log = collect(&mut sim);
    (Stop(sim), log)
}

/// Relays `client` to a new connection to `upstream`, both ways, each
/// direction on a thread of its own, until either side closes.
pub fn relay(client: TcpStream, upstream: SocketAddr) {
    let Ok(server) = TcpStream::connect(upstream) else {
        return;
    };
    let (mut c2, mut s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
    let (mut c1, mut s1) = (client, server);
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut c1, &mut s1);
        let _ = s1.shutdown(std::net::Shutdown::Write);
    });
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut s2, &mut c2);
        let _ = c2.shutdown(std::net::Shutdown::Write);
    });
}

/// A Spin Server in front of `upstream` that holds each connection for
/// `delay` before relaying it: a spin that takes at least that long.
pub fn delayed(upstream: SocketAddr, delay: std::time::Duration) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(client) = stream else { break };
            std::thread::spawn(move || {
                std::thread::sleep(delay);
                relay(client, upstream);
            });
        }
    });
    addr
}

/// A Spin Server in front of `upstream` whose first connection gets
/// `script` once the Login is read (and is kept open until the client
/// closes it); every later connection is relayed to `upstream`. Counts
/// the connections.
pub fn hostile_once(upstream: SocketAddr, script: Vec<u8>) -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let n = accepted.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut client) = stream else { break };
            if n.fetch_add(1, Ordering::SeqCst) == 0 {
                let script = script.clone();
                std::thread::spawn(move || {
                    // The Login block (8 + 22 bytes), then the script.
                    let mut login = [0u8; 30];
                    let _ = client.set_read_timeout(Some(Duration::from_secs(20)));
                    let _ = client.read_exact(&mut login);
                    let _ = client.write_all(&script);
                    let _ = std::io::copy(&mut client, &mut std::io::sink());
                });
                continue;
            }
            relay(client, upstream);
        }
    });
    (addr, accepted)
}

/// Both units' Spin Server addresses, as the simulator's standard error
/// names them, once it has.
pub fn spin_servers(sim_log: &Mutex<String>) -> [SocketAddr; 2] {
    let mut servers = [None, None];
    daemon::wait_for("the Spin Servers' addresses", || {
        servers[0] = named(sim_log, "Spin Server of unit 1 on ");
        servers[1] = named(sim_log, "Spin Server of unit 2 on ");
        servers.iter().all(Option::is_some)
    });
    servers.map(Option::unwrap)
}

/// Whether the gate at `socket` trusts `symbol`: OK, or rejected only for
/// a halt (the simulated flow halts symbols now and then).
pub fn trusted(socket: &std::path::Path, symbol: &str) -> bool {
    let a = daemon::ask(socket, &format!("CHECK {symbol}"));
    a.starts_with(&format!("OK {symbol} seq="))
        || a.starts_with(&format!("REJECT {symbol} halted seq="))
}

/// Waits up to 30 s until the gate at `socket` trusts every simulated
/// symbol (S00001 to S00008).
pub fn wait_all_trusted(socket: &std::path::Path, what: &str) {
    daemon::wait_within(Duration::from_secs(30), what, &mut || {
        (1..=8).all(|i| trusted(socket, &format!("S{i:05}")))
    });
}

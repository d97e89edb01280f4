//! The systemd notify protocol, against a fake `NOTIFY_SOCKET` (a Unix
//! datagram socket in a tempdir, or an abstract one): READY=1 once the feeds
//! are joined and the gate socket listens, WATCHDOG=1 periodically,
//! RELOADING=1 then READY=1 on SIGHUP, STOPPING=1 and exit 0 on SIGTERM.
//! Loopback only.

use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The binary under test; `TICKGATE_BIN` may point at another build.
fn bin() -> String {
    std::env::var("TICKGATE_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_tickgate").to_string())
}
/// Upper bound on waiting for one message, so a broken daemon fails the
/// test instead of hanging it. Not a timing assertion.
const PATIENCE: Duration = Duration::from_secs(60);

fn config(dir: &Path, group: &str) -> std::path::PathBuf {
    let path = dir.join("tickgate.toml");
    std::fs::write(
        &path,
        format!(
            r#"
[[feed]]
name = "fx"
mode = "full"
[[feed.line]]
name = "A"
group = "{group}"
port = 46201
interface = "127.0.0.1"
[[feed.line]]
name = "B"
group = "{group}"
port = 46202
interface = "lo"

[gate]
socket = "{}"

[metrics]
listen = "127.0.0.1:0"
"#,
            dir.join("gate.sock").display()
        ),
    )
    .unwrap();
    path
}

struct Daemon(Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        // Only if a test failed half-way: never leave the daemon running.
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start(config: &Path, notify_socket: &str, watchdog_usec: Option<u64>) -> Daemon {
    let mut cmd = Command::new(bin());
    cmd.arg("run")
        .arg("--config")
        .arg(config)
        .env("NOTIFY_SOCKET", notify_socket)
        .env_remove("WATCHDOG_PID")
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    match watchdog_usec {
        Some(us) => cmd.env("WATCHDOG_USEC", us.to_string()),
        None => cmd.env_remove("WATCHDOG_USEC"),
    };
    Daemon(cmd.spawn().unwrap())
}

fn signal(d: &Daemon, sig: libc::c_int) {
    // SAFETY: plain kill(2) on our own child.
    assert_eq!(unsafe { libc::kill(d.0.id() as libc::pid_t, sig) }, 0);
}

fn recv(sock: &UnixDatagram) -> String {
    let mut buf = [0u8; 4096];
    let n = sock.recv(&mut buf).expect("a notify message in time");
    String::from_utf8(buf[..n].to_vec()).unwrap()
}

/// The next message that is not a watchdog ping.
fn recv_not_ping(sock: &UnixDatagram) -> String {
    loop {
        let m = recv(sock);
        if m != "WATCHDOG=1" {
            return m;
        }
    }
}

fn wait_exit(d: &mut Daemon) -> Option<i32> {
    for _ in 0..600 {
        if let Some(s) = d.0.try_wait().unwrap() {
            return s.code();
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("daemon did not exit after SIGTERM");
}

#[test]
fn ready_watchdog_reload_and_stopping() {
    let dir = tempfile::tempdir().unwrap();
    let notify_path = dir.path().join("notify");
    let sock = UnixDatagram::bind(&notify_path).unwrap();
    sock.set_read_timeout(Some(PATIENCE)).unwrap();
    let cfg = config(dir.path(), "239.255.94.1");
    let mut d = start(&cfg, notify_path.to_str().unwrap(), Some(200_000));

    let ready = recv_not_ping(&sock);
    assert!(ready.starts_with("READY=1\n"), "{ready:?}");
    assert!(ready.contains("STATUS=1 feed joined"), "{ready:?}");
    // READY means the gate answers.
    let gate = dir.path().join("gate.sock");
    let mut conn = std::os::unix::net::UnixStream::connect(&gate).expect("gate listening at READY");
    use std::io::{BufRead, BufReader, Write};
    conn.write_all(b"PING\n").unwrap();
    let mut line = String::new();
    BufReader::new(&conn).read_line(&mut line).unwrap();
    assert_eq!(line, "PONG\n");
    drop(conn);

    // WATCHDOG_USEC = 200 ms: pings every 100 ms; see a few.
    for _ in 0..3 {
        assert_eq!(recv(&sock), "WATCHDOG=1");
    }

    signal(&d, libc::SIGHUP);
    let reloading = recv_not_ping(&sock);
    assert!(
        reloading.starts_with("RELOADING=1\nMONOTONIC_USEC="),
        "{reloading:?}"
    );
    let again = recv_not_ping(&sock);
    assert!(again.starts_with("READY=1\n"), "{again:?}");

    signal(&d, libc::SIGTERM);
    let stopping = recv_not_ping(&sock);
    assert!(stopping.starts_with("STOPPING=1"), "{stopping:?}");
    assert_eq!(wait_exit(&mut d), Some(0));
    assert!(!gate.exists(), "the socket file is removed on a clean stop");
}

#[test]
fn abstract_notify_socket_and_no_watchdog() {
    let dir = tempfile::tempdir().unwrap();
    let name = format!("tickgate-test-notify-{}", std::process::id());
    let sock =
        UnixDatagram::bind_addr(&SocketAddr::from_abstract_name(name.as_bytes()).unwrap()).unwrap();
    sock.set_read_timeout(Some(PATIENCE)).unwrap();
    let cfg = config(dir.path(), "239.255.94.2");
    let mut d = start(&cfg, &format!("@{name}"), None);
    let ready = recv(&sock);
    assert!(ready.starts_with("READY=1\n"), "{ready:?}");
    signal(&d, libc::SIGTERM);
    // Without WATCHDOG_USEC systemd expects no pings: the next message is STOPPING.
    let stopping = recv(&sock);
    assert!(stopping.starts_with("STOPPING=1"), "{stopping:?}");
    assert_eq!(wait_exit(&mut d), Some(0));
}

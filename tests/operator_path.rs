//! What an operator meets around the daemon rather than in it: a daemon
//! whose log pipe closes, colour codes in a pipe, and a command line
//! error said as every other error is (one `tickgate: ...` line).

#[path = "common/daemon.rs"]
mod daemon;

use std::process::{Command, Stdio};

use daemon::{ask, bin, serial, terminate, wait_for};

/// A daemon whose standard error is a pipe nobody reads any more (a
/// journal or a terminal gone) logs into nothing and keeps serving: no
/// panic (exit 101), a clean stop, the socket removed.
#[test]
fn a_closed_stderr_does_not_stop_the_daemon() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("gate.sock");
    let port = daemon::free_port();
    let cfg = dir.path().join("tickgate.toml");
    std::fs::write(
        &cfg,
        format!(
            "[[feed]]\nname = \"fx\"\nmode = \"full\"\n\
             [[feed.line]]\nname = \"A\"\ngroup = \"239.255.96.1\"\nport = {port}\ninterface = \"127.0.0.1\"\n\
             [gate]\nsocket = \"{}\"\n[metrics]\nlisten = \"127.0.0.1:{}\"\n[log]\nlevel = \"debug\"\n",
            socket.display(),
            daemon::free_port()
        ),
    )
    .unwrap();
    let mut child = Command::new(bin())
        .args(["run", "--config"])
        .arg(&cfg)
        .current_dir(dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The read end closed before the daemon's first log line.
    drop(child.stderr.take());
    wait_for("the gate socket", || {
        socket.exists() || child.try_wait().unwrap().is_some()
    });
    assert_eq!(child.try_wait().unwrap(), None, "the daemon exited");
    assert_eq!(ask(&socket, "PING"), "PONG");
    // A reload logs too.
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGHUP) };
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert_eq!(ask(&socket, "PING"), "PONG");
    terminate(&mut child);
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0), "{status}");
    assert!(!socket.exists(), "the gate socket is left behind");
}

/// `fills consume` logs without colour codes into a pipe (a terminal
/// gets them; a file or the journal would keep them as escapes).
#[test]
fn no_colour_codes_into_a_pipe() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("fills.toml");
    // A NATS server nobody answers on: the consumer logs its attempts.
    std::fs::write(
        &cfg,
        format!(
            "[fills]\ndb = \"sqlite:{}\"\n[fills.nats]\nurl = \"nats://127.0.0.1:{}\"\n",
            dir.path().join("fills.db").display(),
            daemon::free_port()
        ),
    )
    .unwrap();
    let child = Command::new(bin())
        .args(["fills", "consume", "--config"])
        .arg(&cfg)
        .env("RUST_LOG", "debug")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    std::thread::sleep(std::time::Duration::from_secs(2));
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(pid as libc::pid_t, libc::SIGTERM) };
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(
        text.contains("DEBUG") || text.contains("INFO") || text.contains("WARN"),
        "{text}"
    );
    assert!(!text.contains('\u{1b}'), "colour codes in a pipe: {text:?}");
}

/// A missing argument is one line, `tickgate: ...`, exit 2, as the
/// docs promise for every error; help still prints as help.
#[test]
fn a_usage_error_is_one_line() {
    let out = Command::new(bin()).arg("run").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("tickgate: the following required arguments were not provided: --config <FILE> (usage: tickgate run --config <FILE>"),
        "{err}"
    );
    let out = Command::new(bin())
        .args(["run", "--help"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stdout).contains("--check-config"));
}

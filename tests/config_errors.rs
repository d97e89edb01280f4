//! `tickgate run --config FILE` with a bad config: one line naming the key
//! and the problem, exit code 2, nothing started (no socket file).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The binary under test; `TICKGATE_BIN` may point at another build.
fn bin() -> String {
    std::env::var("TICKGATE_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_tickgate").to_string())
}

fn write_config(dir: &Path, body: &str) -> PathBuf {
    let path = dir.join("tickgate.toml");
    std::fs::write(&path, body).unwrap();
    path
}

/// A valid config with a socket in `dir` and metrics on an ephemeral port;
/// `line_extra` is appended to the first line table.
fn config(dir: &Path, line_extra: &str) -> String {
    format!(
        r#"
[[feed]]
name = "fx"
mode = "full"
[[feed.line]]
name = "A"
group = "239.255.93.1"
port = 46101
interface = "127.0.0.1"
{line_extra}

[gate]
socket = "{}"

[metrics]
listen = "127.0.0.1:0"
"#,
        dir.join("gate.sock").display()
    )
}

fn run(path: &Path, extra: &[&str]) -> Output {
    Command::new(bin())
        .arg("run")
        .arg("--config")
        .arg(path)
        .args(extra)
        .env_remove("NOTIFY_SOCKET")
        .output()
        .unwrap()
}

fn assert_refused(out: &Output, dir: &Path, needles: &[&str]) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "stderr: {stderr}");
    for n in needles {
        assert!(stderr.contains(n), "{n:?} not in stderr: {stderr}");
    }
    assert!(
        !dir.join("gate.sock").exists(),
        "nothing may start on a bad config"
    );
}

#[test]
fn a_unicast_group_is_refused_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let body = config(dir.path(), "").replace("239.255.93.1", "10.0.0.1");
    let out = run(&write_config(dir.path(), &body), &[]);
    assert_refused(
        &out,
        dir.path(),
        &["feed[0].line[0].group: 10.0.0.1 is not a multicast address"],
    );
    // One clear line, not a backtrace or a usage dump.
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim().lines().count(),
        1
    );
}

#[test]
fn a_misspelt_key_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(
        &write_config(dir.path(), &config(dir.path(), "rcvbuff = 4096")),
        &[],
    );
    assert_refused(&out, dir.path(), &["feed[0].line[0].rcvbuff: unknown key"]);
}

#[test]
fn a_wrong_type_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let body = config(dir.path(), "").replace("port = 46101", "port = \"46101\"");
    let out = run(&write_config(dir.path(), &body), &[]);
    assert_refused(
        &out,
        dir.path(),
        &["feed[0].line[0].port: expected a whole number, found a string"],
    );
}

#[test]
fn a_missing_interface_is_a_config_error_found_before_anything_starts() {
    let dir = tempfile::tempdir().unwrap();
    let body =
        config(dir.path(), "").replace("interface = \"127.0.0.1\"", "interface = \"nosuchif9\"");
    let path = write_config(dir.path(), &body);
    // Syntactically fine: --check-config does not look at the host.
    assert_eq!(run(&path, &["--check-config"]).status.code(), Some(0));
    let out = run(&path, &[]);
    assert_refused(
        &out,
        dir.path(),
        &["feed[0].line[0].interface: no network interface named \"nosuchif9\""],
    );
}

#[test]
fn an_interface_address_of_another_host_is_a_config_error() {
    let dir = tempfile::tempdir().unwrap();
    // TEST-NET-3: documentation only, never on a real interface.
    let body =
        config(dir.path(), "").replace("interface = \"127.0.0.1\"", "interface = \"203.0.113.77\"");
    let out = run(&write_config(dir.path(), &body), &[]);
    assert_refused(
        &out,
        dir.path(),
        &["feed[0].line[0].interface: 203.0.113.77 is not an address of this host"],
    );
}

#[test]
fn syntax_errors_and_missing_files_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(&write_config(dir.path(), "[[feed]\nname = 1\n"), &[]);
    assert_refused(&out, dir.path(), &["TOML syntax error at line 1"]);
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim().lines().count(),
        1
    );
    let out = run(&dir.path().join("absent.toml"), &[]);
    assert_refused(&out, dir.path(), &["absent.toml: cannot read"]);
}

#[test]
fn the_shipped_example_config_is_valid() {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/tickgate.toml");
    let out = run(&example, &["--check-config"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("valid (1 feed(s), 2 line(s))"));
}

/// The example's commented `[fills]` block is valid once uncommented.
#[test]
fn the_examples_fills_block_is_valid() {
    let example =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("config/tickgate.toml"))
            .unwrap();
    let start = example.find("# [fills]\n").expect("a [fills] example");
    let mut text = example[..start].to_string();
    for line in example[start..].lines() {
        if line.starts_with("# # ") {
            continue;
        }
        text.push_str(line.strip_prefix("# ").unwrap_or(line));
        text.push('\n');
    }
    let dir = tempfile::tempdir().unwrap();
    let out = run(&write_config(dir.path(), &text), &["--check-config"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

//! `tickgate run --config FILE` with a bad config: one line per problem
//! naming the key, every problem in file order, exit code 2, nothing
//! started (no socket file); `--check-config` refuses exactly what `run`
//! refuses, with the same words.

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
    // --check-config looks at the host too: the same refusal as run.
    let out = run(&path, &[]);
    assert_refused(
        &out,
        dir.path(),
        &["feed[0].line[0].interface: no network interface named \"nosuchif9\""],
    );
    assert_eq!(run(&path, &["--check-config"]).stderr, out.stderr);
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
    assert_refused(&out, dir.path(), &["absent.toml: cannot read: "]);
    // The file's name is said once.
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.matches("absent.toml").count(), 1, "{stderr}");
}

/// Each known-bad config (the cases below and those of the tests above)
/// through both `run --check-config` and `run`: exit 2 from both, the same
/// lines on standard error, the key path in each, nothing started.
#[test]
fn check_config_refuses_what_run_refuses_with_the_same_words() {
    let dir = tempfile::tempdir().unwrap();
    let a_file = dir.path().join("a-file");
    std::fs::write(&a_file, b"").unwrap();
    let base = config(dir.path(), "");
    let fills = |extra: &str| {
        format!(
            "{base}\n[fills]\ndb = \"sqlite:{}/fills.db\"\n{extra}\n",
            dir.path().display()
        )
    };
    let cases: Vec<(String, Vec<String>)> = vec![
        (
            fills("[fills.http]\nlisten = \"not-an-addr\""),
            vec!["fills.http.listen: \"not-an-addr\" is not an address:port such as \"127.0.0.1:8088\"".into()],
        ),
        (
            base.replace("interface = \"127.0.0.1\"", "interface = \"eth99\""),
            vec!["feed[0].line[0].interface: no network interface named \"eth99\" on this host".into()],
        ),
        (
            fills("max_batch = \"many\""),
            vec!["fills.max_batch: expected a whole number, got \"many\"".into()],
        ),
        (
            fills("pg_pool_size = 1.5\n[fills.retention]\nchunk = \"big\""),
            vec![
                "fills.pg_pool_size: expected a whole number, got 1.5".into(),
                "fills.retention.chunk: expected a whole number, got \"big\"".into(),
            ],
        ),
        (
            base.replace(
                &format!("socket = \"{}\"", dir.path().join("gate.sock").display()),
                &format!("socket = \"{}/run/gate.sock\"", a_file.display()),
            ),
            vec![format!(
                "gate.socket: cannot create {}/run: {} is not a directory",
                a_file.display(),
                a_file.display()
            )],
        ),
        (
            format!("{base}\n[fills]\ndb = \"sqlite:{}/db/fills.db\"\n", a_file.display()),
            vec![format!(
                "fills.db: cannot create {}/db: {} is not a directory",
                a_file.display(),
                a_file.display()
            )],
        ),
        (
            base.replace("listen = \"127.0.0.1:0\"", "listen = \"0.0.0.0:0\""),
            vec!["metrics.listen: 0.0.0.0:0 is not a loopback address; set allow_remote = true in this table to listen there".into()],
        ),
        (
            fills("[fills.http]\nlisten = \"0.0.0.0:0\""),
            vec!["fills.http.listen: 0.0.0.0:0 is not a loopback address".into()],
        ),
        (
            base.replace("239.255.93.1", "10.0.0.1"),
            vec!["feed[0].line[0].group: 10.0.0.1 is not a multicast address".into()],
        ),
        // Several mistakes: every one, in file order (a file problem
        // and a host problem alike).
        (
            base.replace("mode = \"full\"", "mode = \"full\"\nstale_ms = \"soon\"")
                .replace("port = 46101", "port = 0\ncolour = \"red\"")
                .replace("[metrics]", "[metrics]\nenabled = \"yes\"")
                + "\n[log]\nformat = \"xml\"\n",
            vec![
                "feed[0].stale_ms: expected a whole number, found a string".into(),
                "feed[0].line[0].port: 0 is out of range 1..=65535".into(),
                "feed[0].line[0].colour: unknown key".into(),
                "metrics.enabled: expected true or false, found a string".into(),
                "log.format: \"xml\" is not one of: human, json".into(),
            ],
        ),
    ];
    for (body, lines) in &cases {
        let path = write_config(dir.path(), body);
        let checked = run(&path, &["--check-config"]);
        let ran = run(&path, &[]);
        for out in [&checked, &ran] {
            assert_refused(out, dir.path(), &[]);
            let stderr = String::from_utf8_lossy(&out.stderr);
            let got: Vec<&str> = stderr.lines().collect();
            assert_eq!(got.len(), lines.len(), "{body}\n{stderr}");
            for (g, want) in got.iter().zip(lines) {
                let prefix = format!("tickgate: config {}: {want}", path.display());
                assert!(g.starts_with(&prefix), "want {prefix:?}\ngot {g:?}");
            }
        }
        assert_eq!(checked.stderr, ran.stderr, "{body}");
        assert!(checked.stdout.is_empty());
    }
}

#[test]
fn the_shipped_example_config_is_valid() {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/tickgate.toml");
    let shipped = std::fs::read_to_string(&example).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite:{}", dir.path().join("fills.db").display());
    // As shipped (the Debian package's /etc/tickgate/tickgate.toml), with
    // its directories where this test may write; and with its commented
    // interface lines set to interfaces every host has.
    let here = shipped
        .replace("/run/tickgate/gate.sock", "gate.sock")
        .replace("sqlite:/var/lib/tickgate/fills.db", &db);
    let with_interfaces = here
        .replace("# interface = \"eth1\"", "interface = \"lo\"")
        .replace("# interface = \"eth2\"", "interface = \"127.0.0.1\"");
    assert_ne!(
        here, with_interfaces,
        "the example's commented interface lines"
    );
    for text in [here, with_interfaces] {
        let out = Command::new(bin())
            .args(["run", "--check-config", "--config"])
            .arg(write_config(dir.path(), &text))
            .current_dir(dir.path())
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(stdout.contains("valid (1 feed, 2 lines)"), "{stdout}");
        // gate.md "One symbol on several feeds": the rules in force.
        assert!(
            stdout.contains("gate: across = \"all\", crossed_ms = 50"),
            "{stdout}"
        );
    }
    // Unchanged, only the package's directories may be refused (a user
    // who cannot create /run/tickgate or /var/lib/tickgate).
    let out = run(&example, &["--check-config"]);
    for line in String::from_utf8_lossy(&out.stderr).lines() {
        assert!(
            line.contains(": gate.socket: ") || line.contains(": fills.db: "),
            "{line}"
        );
    }
}

/// The example's `[fills]` is on (so `fills consume --config
/// config/tickgate.toml` works as the README says), and its commented
/// `[fills.nats]` block is valid once uncommented.
#[test]
fn the_examples_fills_block_is_valid() {
    let example =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("config/tickgate.toml"))
            .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let example = example
        .replace(
            "/run/tickgate/gate.sock",
            &dir.path().join("gate.sock").display().to_string(),
        )
        .replace(
            "/var/lib/tickgate/fills.db",
            &dir.path().join("fills.db").display().to_string(),
        );
    assert!(example.contains("\n[fills]\nenabled = true\n"));
    let start = example
        .find("# [fills.nats]\n")
        .expect("a [fills.nats] example");
    let mut text = example[..start].to_string();
    for line in example[start..].lines() {
        if line.starts_with("# # ") {
            continue;
        }
        text.push_str(line.strip_prefix("# ").unwrap_or(line));
        text.push('\n');
    }
    let out = run(&write_config(dir.path(), &text), &["--check-config"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A config `run` would start with and then refuse (exit 1) is refused by
/// both `--check-config` and `run` up front: exit 2, the same line, naming
/// the key.
#[test]
fn check_config_refuses_what_the_start_would_refuse() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let file = d.join("plain");
    std::fs::write(&file, b"").unwrap();
    std::fs::create_dir(d.join("a-dir")).unwrap();
    let sock = d.join("gate.sock");
    let db = d.join("fills.db");
    let body = |gate_extra: &str, metrics: &str, fills_extra: &str| {
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

[gate]
socket = "{}"
{gate_extra}

[metrics]
listen = "{metrics}"

[fills]
db = "sqlite:{}"
[fills.http]
listen = "127.0.0.1:46199"
{fills_extra}
"#,
            sock.display(),
            db.display()
        )
    };
    let cases = [
        (
            body("", "127.0.0.1:0", "max_body_bytes = 0"),
            "fills.http.max_body_bytes: must be >= 1".to_string(),
        ),
        (
            body(
                &format!("shm = \"{}\"", d.join("a-dir").display()),
                "127.0.0.1:0",
                "",
            ),
            format!("gate.shm: {}/a-dir is a directory", d.display()),
        ),
        (
            body(
                &format!("shm = \"{}/state.shm\"", file.display()),
                "127.0.0.1:0",
                "",
            ),
            format!(
                "gate.shm: cannot create {}: {} is not a directory",
                file.display(),
                file.display()
            ),
        ),
        (
            body(&format!("shm = \"{}\"", sock.display()), "127.0.0.1:0", ""),
            format!("gate.shm: {} is also gate.socket", sock.display()),
        ),
        (
            body(&format!("shm = \"{}\"", db.display()), "127.0.0.1:0", ""),
            format!(
                "gate.shm: {} is the fills database (fills.db)",
                db.display()
            ),
        ),
        (
            body(
                &format!("shm = \"{}-wal\"", db.display()),
                "127.0.0.1:0",
                "",
            ),
            format!(
                "gate.shm: {}-wal is the fills database's -wal file",
                db.display()
            ),
        ),
        (
            body("", "127.0.0.1:46199", ""),
            "metrics.listen: 127.0.0.1:46199 is also where fills.http.listen".to_string(),
        ),
        (
            body("", "0.0.0.0:46199", "")
                .replace("[metrics]\n", "[metrics]\nallow_remote = true\n"),
            "metrics.listen: 0.0.0.0:46199 is also where fills.http.listen".to_string(),
        ),
    ];
    for (text, want) in &cases {
        let path = write_config(d, text);
        let checked = run(&path, &["--check-config"]);
        let ran = run(&path, &[]);
        for out in [&checked, &ran] {
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{want}\n{stderr}");
            let prefix = format!("tickgate: config {}: {want}", path.display());
            assert_eq!(stderr.lines().count(), 1, "{stderr}");
            assert!(
                stderr.starts_with(&prefix),
                "want {prefix:?}\ngot {stderr:?}"
            );
        }
        assert_eq!(checked.stderr, ran.stderr, "{want}");
        assert!(!sock.exists() && !db.exists(), "nothing started for {want}");
    }
    // The same addresses on other ports, and the defaults, are fine.
    let ok = write_config(d, &body("", "127.0.0.1:0", ""));
    let out = run(&ok, &["--check-config"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A venue feed's line without a `source` filter is valid but open to any
/// sender on the group: `--check-config` passes (exit 0) and warns, naming
/// the line; with `source` set, or on a tickgate-protocol feed, it is
/// silent.
#[test]
fn check_config_warns_of_a_venue_line_without_a_source_filter() {
    let dir = tempfile::tempdir().unwrap();
    let venue = config(dir.path(), "").replace("mode = \"full\"", "venue = \"nasdaq-itch\"");
    let out = run(&write_config(dir.path(), &venue), &["--check-config"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("warning: feed[0].line[0] (feed fx, line A): no `source` filter"),
        "{stderr}"
    );
    let filtered = config(dir.path(), "source = \"127.0.0.1\"")
        .replace("mode = \"full\"", "venue = \"nasdaq-itch\"");
    let out = run(&write_config(dir.path(), &filtered), &["--check-config"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(!String::from_utf8_lossy(&out.stderr).contains("warning"));
    let own = run(
        &write_config(dir.path(), &config(dir.path(), "")),
        &["--check-config"],
    );
    assert_eq!(own.status.code(), Some(0));
    assert!(!String::from_utf8_lossy(&own.stderr).contains("warning"));
}

#[test]
fn cme_line_kinds_and_keys_are_checked() {
    let dir = tempfile::tempdir().unwrap();
    // A kind on another venue's line.
    let out = run(
        &write_config(dir.path(), &config(dir.path(), "kind = \"snapshot\"")),
        &[],
    );
    assert_refused(
        &out,
        dir.path(),
        &["feed[0].line: line A: kind = \"snapshot\" applies to cme-mdp3 feeds only"],
    );
    // An unknown kind, a re-request server and max_orders on a CME feed,
    // and a CME feed without an incremental line: all named at once.
    let body = config(dir.path(), "kind = \"snap\"").replace(
        "mode = \"full\"",
        "venue = \"cme-mdp3\"\nrerequest = [\"127.0.0.1:9\"]",
    );
    let out = run(&write_config(dir.path(), &body), &[]);
    assert_refused(
        &out,
        dir.path(),
        &[
            "feed[0].rerequest: applies to tickgate and nasdaq-itch feeds only (cme-mdp3 recovers from its snapshot lines",
            "feed[0].line[0].kind: \"snap\" is not one of: incremental, snapshot, definition",
        ],
    );
    let body = config(dir.path(), "kind = \"definition\"")
        .replace("mode = \"full\"", "venue = \"cme-mdp3\"");
    let out = run(&write_config(dir.path(), &body), &[]);
    assert_refused(
        &out,
        dir.path(),
        &["feed[0].line: a cme-mdp3 feed needs at least one line with kind = \"incremental\""],
    );
    let body =
        config(dir.path(), "").replace("mode = \"full\"", "mode = \"full\"\nrecovery_entries = 10");
    let out = run(&write_config(dir.path(), &body), &[]);
    assert_refused(
        &out,
        dir.path(),
        &["feed[0].recovery_entries: applies to cme-mdp3 feeds only"],
    );
}

#[test]
fn symbol_thresholds_are_refused_beyond_what_the_venue_can_name() {
    let dir = tempfile::tempdir().unwrap();
    let sym = |venue: &str, name: &str| {
        let body = config(dir.path(), "").replace("mode = \"full\"", venue)
            + &format!("\n[feed.symbols.\"{name}\"]\nstale_ms = 100\n");
        write_config(dir.path(), &body)
    };
    // 9 characters cannot come from tickgate's own protocol (8 bytes).
    let out = run(&sym("mode = \"full\"", "ESM6-ESU6"), &[]);
    assert_refused(
        &out,
        dir.path(),
        &["feed[0].symbols.ESM6-ESU6: \"ESM6-ESU6\" is not a symbol of a tickgate feed (1 to 8 printable ASCII characters)"],
    );
    // CME names run to 20 characters, not 21.
    let cme = "venue = \"cme-mdp3\"";
    let out = run(&sym(cme, "ESM6-ESU6-ESZ6-ESH7XY"), &[]);
    assert_refused(
        &out,
        dir.path(),
        &["is not a symbol of a cme-mdp3 feed (1 to 20 printable ASCII characters)"],
    );
    let out = run(&sym(cme, "ESM6-ESU6-ESZ6-ESH7X"), &["--check-config"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

//! `tickgate fills apply FILE|-` end to end (SQLite in a temp dir).

use std::io::Write;
use std::process::{Command, Output, Stdio};

fn tickgate(args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tickgate"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run tickgate");
    let mut input = child.stdin.take().unwrap();
    if let Some(s) = stdin {
        input.write_all(s.as_bytes()).unwrap();
    }
    drop(input);
    child.wait_with_output().unwrap()
}

const LINES: &str = r#"{"kind":"FILL","event_id":"E-1","deal_id":"D-1","account":"ACC-7","symbol":"EURUSD","side":"BUY","qty":"100000","price":"1.08512","exec_time":"2026-11-30T08:00:00.123456Z"}
{"kind":"FILL","event_id":"E-1","deal_id":"D-1","account":"ACC-7","symbol":"EURUSD","side":"BUY","qty":"100000","price":"1.08512","exec_time":"2026-11-30T08:00:00.123456Z"}

{"kind":"FILL","event_id":"E-2","deal_id":"D-2","account":"ACC-7","symbol":"EURUSD","side":"SELL","qty":40000,"price":"1.08600","exec_time":"2026-11-30T08:01:00Z"}
not json at all
{"kind":"BUST","event_id":"B-9","deal_id":"D-9","account":"ACC-7","exec_time":"2026-11-30T08:05:00Z"}
{"kind":"FILL","event_id":"E-3","deal_id":"D-1","account":"ACC-7","symbol":"EURUSD","side":"BUY","qty":"1","price":"1","exec_time":"2026-11-30T08:02:00Z"}
{"kind":"FILL","event_id":"E-4","deal_id":"D-4","account":"ACC-7","symbol":"EURUSD","side":"SELL","qty":"30000","price":"1.08600","exec_time":"2026-11-30T08:03:00Z"}
"#;

#[test]
fn apply_file_prints_summary_and_rejects_with_line_numbers() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite:{}", dir.path().join("f.db").display());
    let file = dir.path().join("events.jsonl");
    std::fs::write(&file, LINES).unwrap();
    let out = tickgate(
        &[
            "fills",
            "apply",
            file.to_str().unwrap(),
            "--db",
            &db,
            "--batch",
            "3",
        ],
        None,
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // Some events rejected or held: exit 3, not 0 (nor 1 or 2).
    assert_eq!(out.status.code(), Some(3), "{stdout}\n{stderr}");
    assert_eq!(
        stdout.trim(),
        "applied 2 / duplicate 1 (0 by deal_id) / rejected 3 / held 1 (7 events)"
    );
    let rejected: Vec<&str> = stderr.lines().collect();
    assert_eq!(rejected.len(), 3, "{stderr}");
    assert!(rejected[0].starts_with("line 4: rejected: qty: must be a decimal string"));
    assert!(rejected[1].starts_with("line 5: rejected: malformed JSON"));
    // F2b: E-3 names deal D-1, which has E-1's FILL: a conflict, not a
    // duplicate.
    assert!(
        rejected[2].starts_with("line 7: rejected: conflict: deal_id \"D-1\""),
        "{stderr}"
    );

    // Re-running the same file (a replay after a crash) applies nothing.
    let again = tickgate(&["fills", "apply", "-", "--db", &db], Some(LINES));
    assert_eq!(again.status.code(), Some(3));
    assert_eq!(
        String::from_utf8_lossy(&again.stdout).trim(),
        "applied 0 / duplicate 4 (0 by deal_id) / rejected 3 / held 0 (7 events)"
    );
}

/// A line longer than an event can be is rejected with its line number,
/// read past without being held whole; the lines around it apply.
#[test]
fn an_overlong_line_is_rejected_with_its_number() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite:{}", dir.path().join("f.db").display());
    let file = dir.path().join("events.jsonl");
    let first = LINES.lines().next().unwrap();
    let last = LINES.lines().last().unwrap();
    // Valid JSON, so that only its length can refuse it.
    let huge = format!("{{\"pad\":\"{}\"}}", "x".repeat(3 << 20));
    std::fs::write(&file, format!("{first}\n{huge}\n{last}\n")).unwrap();
    let out = tickgate(
        &["fills", "apply", file.to_str().unwrap(), "--db", &db],
        None,
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stdout}\n{stderr}");
    assert_eq!(
        stderr.trim(),
        "line 2: rejected: line is longer than 1048576 bytes"
    );
    assert_eq!(
        stdout.trim(),
        "applied 2 / duplicate 0 (0 by deal_id) / rejected 1 / held 0 (3 events)"
    );
}

#[test]
fn database_error_exits_nonzero() {
    let dir = tempfile::tempdir().unwrap();
    // A file where the database directory should be.
    let blocker = dir.path().join("blocker");
    std::fs::write(&blocker, "x").unwrap();
    let db = format!("sqlite:{}/sub/f.db", blocker.display());
    let out = tickgate(&["fills", "apply", "-", "--db", &db], Some(LINES));
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("creating"));
    let out = tickgate(&["fills", "apply", "/nonexistent/in.jsonl"], None);
    assert_eq!(out.status.code(), Some(2));
}

//! Files of the reliable lane are created with explicit modes, not the
//! umask's: with a umask of 000 (nothing taken away), the SQLite database
//! and its WAL and SHM files are 0600, the directories created for them
//! 0750, and `fills push`'s dead-letter folder 0750 and records 0640.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output};

fn bin() -> String {
    std::env::var("TICKGATE_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_tickgate").to_string())
}

fn events() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/events.jsonl")
        .display()
        .to_string()
}

/// The binary under `umask 000`, so that only explicit modes restrict.
fn tickgate_with_umask_0(args: &[&str]) -> Output {
    let mut script = String::from("umask 000; exec \"$0\"");
    for i in 1..=args.len() {
        script.push_str(&format!(" \"${{{i}}}\""));
    }
    Command::new("sh")
        .arg("-c")
        .arg(script)
        .arg(bin())
        .args(args)
        .output()
        .unwrap()
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .permissions()
        .mode()
        & 0o777
}

#[test]
fn the_sqlite_database_and_its_wal_and_shm_are_0600() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("state/fills/fills.db");
    let url = format!("sqlite:{}", db.display());
    let out = tickgate_with_umask_0(&["fills", "apply", &events(), "--db", &url]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // WAL and SHM exist while a connection is open (the last one to
    // close removes them): this process opens one for the look, under a
    // umask of 000 as well, so their mode is SQLite's copy of the
    // database's mode, not a umask's.
    // SAFETY: umask only sets this process's file-creation mask.
    unsafe { libc::umask(0) };
    let conn = rusqlite::Connection::open(&db).unwrap();
    conn.query_row("SELECT count(*) FROM sqlite_master", [], |r| {
        r.get::<_, i64>(0)
    })
    .unwrap();
    conn.execute_batch("PRAGMA journal_mode=WAL; BEGIN IMMEDIATE; COMMIT;")
        .unwrap();
    for suffix in ["", "-wal", "-shm"] {
        let p = dir.path().join(format!("state/fills/fills.db{suffix}"));
        assert_eq!(mode(&p), 0o600, "{}", p.display());
    }
    assert_eq!(mode(&dir.path().join("state/fills")), 0o750);
    assert_eq!(mode(&dir.path().join("state")), 0o750);
}

#[test]
fn an_existing_world_readable_database_is_narrowed() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("fills.db");
    std::fs::write(&db, b"").unwrap();
    std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o644)).unwrap();
    let url = format!("sqlite:{}", db.display());
    let out = tickgate_with_umask_0(&["fills", "apply", &events(), "--db", &url]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(mode(&db), 0o640);
}

#[test]
fn dead_letter_folders_are_0750_and_records_0640() {
    let dir = tempfile::tempdir().unwrap();
    // Nothing listens on port 1: every attempt fails, the batch is
    // dead-lettered after one attempt.
    let dlq = dir.path().join("spool/dead");
    let out = tickgate_with_umask_0(&[
        "fills",
        "push",
        &events(),
        "--url",
        "http://127.0.0.1:1",
        "--token",
        "t",
        "--max-attempts",
        "1",
        "--dead-letter-dir",
        &dlq.display().to_string(),
    ]);
    assert_ne!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(mode(&dlq), 0o750);
    assert_eq!(mode(&dir.path().join("spool")), 0o750);
    let records: Vec<_> = std::fs::read_dir(&dlq)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert!(records.len() >= 2, "{records:?}");
    for r in &records {
        assert_eq!(mode(r), 0o640, "{}", r.display());
    }
}

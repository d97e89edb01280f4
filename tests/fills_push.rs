//! `tickgate fills push` (the real binary) against the real HTTP API:
//! the batch-retry incident (429 after commit), dead letters and re-sending.

use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;
use rust_decimal::Decimal;
use serde_json::Value;
use tickgate::fills::config::ClientConfig;
use tickgate::fills::http::{BatchOutcome, FillsBackend, HttpOptions, PositionView};
use tickgate::fills::model::Side;
use tickgate::fills::position::Position;
use tickgate::fills::push::{batch_body, batch_key, http_request};
use tickgate::fills::store::{Store, StoreOptions};

#[path = "common/fills.rs"]
mod fills_common;
use fills_common::{Db, Server};

const TOKEN: &str = "token-bridge";
const CLIENT: &str = "bridge";

fn clients() -> Vec<ClientConfig> {
    vec![ClientConfig {
        name: CLIENT.into(),
        token: TOKEN.into(),
        accounts: vec!["*".into()],
    }]
}

async fn serve(backend: Arc<dyn FillsBackend>, options: HttpOptions) -> Server {
    fills_common::serve(backend, &clients(), options).await
}

async fn sqlite_db() -> Db {
    fills_common::sqlite_db(StoreOptions::default()).await
}

async fn pg_db(test: &str) -> Option<Db> {
    fills_common::pg_db("t_push", test, StoreOptions::default()).await
}

/// A store that is down: every batch is a 500.
struct Down;

impl FillsBackend for Down {
    fn apply_batch<'a>(
        &'a self,
        _client: &'a ClientConfig,
        _key: &'a str,
        _request_hash: &'a str,
        _events: &'a [Value],
    ) -> BoxFuture<'a, anyhow::Result<BatchOutcome>> {
        Box::pin(async { Err(anyhow::anyhow!("database unavailable")) })
    }

    fn positions<'a>(
        &'a self,
        _account: &'a str,
    ) -> BoxFuture<'a, anyhow::Result<Vec<PositionView>>> {
        Box::pin(async { Err(anyhow::anyhow!("database unavailable")) })
    }
}

struct PushRun {
    code: i32,
    stdout: String,
    stderr: String,
}

/// Runs the real `tickgate fills push` binary.
async fn push(args: Vec<String>) -> PushRun {
    tokio::task::spawn_blocking(move || {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_tickgate"))
            .arg("fills")
            .arg("push")
            .args(&args)
            .env_remove("TICKGATE_FILLS_TOKEN")
            .output()
            .expect("running tickgate");
        PushRun {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    })
    .await
    .unwrap()
}

fn args(xs: &[&str]) -> Vec<String> {
    xs.iter().map(|s| s.to_string()).collect()
}

/// The number after `label ` in the summary line, e.g. `replayed 3`.
fn summary_number(stdout: &str, label: &str) -> u64 {
    let line = stdout
        .lines()
        .find(|l| l.starts_with("push:"))
        .unwrap_or_else(|| panic!("no summary in {stdout:?}"));
    let at = line
        .find(&format!("{label} "))
        .unwrap_or_else(|| panic!("no {label:?} in {line:?}"));
    line[at + label.len() + 1..]
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

/// A job of at-least-once input: fills over two accounts and three symbols,
/// a few repeated lines (a bridge that resent), and BUSTs of earlier fills.
/// Returns the lines and the expected positions (each distinct fill applied
/// once, busted fills as if they never happened).
fn job(n_fills: usize) -> (Vec<String>, BTreeMap<(String, String), Position>) {
    let accounts = ["ACC-A", "ACC-B"];
    let symbols = ["EURUSD", "USDJPY", "XAUUSD"];
    let mut lines = Vec::new();
    let mut fills = Vec::new();
    let mut busted = HashSet::new();
    for i in 0..n_fills {
        let account = accounts[i % 2];
        let symbol = symbols[(i / 2) % 3];
        let side = if i % 5 < 3 { "BUY" } else { "SELL" };
        let qty = format!("{}", 1000 + (i * 37) % 900);
        let price = format!("1.{:05}", 8000 + (i * 131) % 997);
        let line = serde_json::json!({"kind":"FILL","event_id":format!("E-{i}"),
            "deal_id":format!("D-{i}"),"account":account,"symbol":symbol,"side":side,
            "qty":qty,"price":price,"exec_time":"2026-11-30T08:00:00.123456Z"})
        .to_string();
        lines.push(line.clone());
        fills.push((i, account, symbol, side, qty, price));
        if i % 41 == 7 {
            lines.push(line); // resent by the bridge
        }
        if i % 53 == 20 {
            let victim = i - 10;
            busted.insert(victim);
            lines.push(
                serde_json::json!({"kind":"BUST","event_id":format!("B-{victim}"),
                    "deal_id":format!("D-{victim}"),"account":accounts[victim % 2],
                    "exec_time":"2026-11-30T08:05:00Z"})
                .to_string(),
            );
        }
    }
    let mut expected: BTreeMap<(String, String), Position> = BTreeMap::new();
    for (i, account, symbol, side, qty, price) in fills {
        if busted.contains(&i) {
            continue;
        }
        let side = if side == "BUY" { Side::Buy } else { Side::Sell };
        let p = expected
            .entry((account.to_owned(), symbol.to_owned()))
            .or_default();
        *p = p
            .apply(
                side,
                Decimal::from_str(&qty).unwrap(),
                Decimal::from_str(&price).unwrap(),
            )
            .unwrap();
    }
    (lines, expected)
}

async fn assert_positions(store: &Store, expected: &BTreeMap<(String, String), Position>) {
    let rows = store.positions(None).await.unwrap();
    let got: BTreeMap<(String, String), Position> = rows
        .into_iter()
        .map(|r| ((r.account, r.symbol), r.position))
        .collect();
    assert_eq!(got.len(), expected.len());
    for (k, want) in expected {
        let have = got[k];
        // Exact decimal equality (scale aside): never applied twice.
        assert_eq!(have.qty, want.qty, "{k:?}");
        assert_eq!(have.avg_price, want.avg_price, "{k:?}");
        assert_eq!(have.realized_pnl, want.realized_pnl, "{k:?}");
    }
}

fn write_lines(path: &Path, lines: &[String]) {
    let mut text = lines.join("\n");
    text.push('\n');
    std::fs::write(path, text).unwrap();
}

/// The batch-retry incident: the server commits, then answers 429 for 30%
/// of batches. `push` retries with the same keys; afterwards no event was
/// applied twice, every stored answer replays byte for byte, and re-running
/// the whole job changes nothing.
async fn batch_retry_incident(db: &Db) {
    let (lines, expected) = job(600);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("job.jsonl");
    write_lines(&file, &lines);
    let dead = dir.path().join("dead");
    let srv = serve(
        Arc::new(db.store.clone()),
        HttpOptions {
            fault_429_after_commit: 0.3,
            fault_seed: Some(20261130),
            // Retry-After 0: the client's own jitter decides the wait.
            overload_retry_after_secs: 0,
            ..HttpOptions::default()
        },
    )
    .await;
    let batch = 40;
    let run = push(args(&[
        file.to_str().unwrap(),
        "--url",
        &srv.base,
        "--token",
        TOKEN,
        "--batch",
        &batch.to_string(),
        "--backoff-base-ms",
        "5",
        "--backoff-cap-ms",
        "50",
        "--dead-letter-dir",
        dead.to_str().unwrap(),
    ]))
    .await;
    assert_eq!(run.code, 0, "stdout {}\nstderr {}", run.stdout, run.stderr);
    let batches = lines.len().div_ceil(batch) as u64;
    let faults = srv.counter("tickgate_fills_http_overload_total", &[("reason", "fault")]);
    // The incident did happen (fixed seed), and each faulted batch was
    // retried once and answered from the stored answer.
    assert!(faults >= 3, "only {faults} faults in {batches} batches");
    assert_eq!(summary_number(&run.stdout, "ok"), batches);
    assert_eq!(summary_number(&run.stdout, "failed"), 0);
    assert_eq!(summary_number(&run.stdout, "replayed"), faults);
    assert_eq!(summary_number(&run.stdout, "retries"), faults);
    let dup_lines = (0..600).filter(|i| i % 41 == 7).count() as u64;
    assert_eq!(summary_number(&run.stdout, "duplicate"), dup_lines);
    assert_eq!(summary_number(&run.stdout, "rejected"), 0);
    assert!(!dead.exists() || std::fs::read_dir(&dead).unwrap().next().is_none());

    assert_positions(&db.store, &expected).await;

    // Every stored answer replays byte for byte, from another instance
    // (cold cache: the database path) and from this one.
    let other = serve(Arc::new(db.store.clone()), HttpOptions::default()).await;
    for chunk in lines.chunks(batch) {
        let key = batch_key("push-", chunk);
        let stored = db
            .store
            .get_stored_answer(CLIENT, &key)
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("no stored answer for {key}"));
        for base in [&other.base, &srv.base] {
            let headers = vec![
                ("authorization".to_owned(), format!("Bearer {TOKEN}")),
                ("idempotency-key".to_owned(), key.clone()),
            ];
            let r = http_request(
                "POST",
                &format!("{base}/v1/fills"),
                &headers,
                batch_body(chunk),
                Duration::from_secs(60),
            )
            .await
            .unwrap();
            assert_eq!(r.status, stored.status);
            assert_eq!(r.header("idempotent-replayed"), Some("true"));
            assert_eq!(r.body, Bytes::from(stored.body.clone()));
        }
    }

    // Re-running the whole job (after a "crash") re-sends the same keys:
    // every batch is a replay and nothing changes.
    let again = push(args(&[
        file.to_str().unwrap(),
        "--url",
        &other.base,
        "--token",
        TOKEN,
        "--batch",
        &batch.to_string(),
        "--dead-letter-dir",
        dead.to_str().unwrap(),
    ]))
    .await;
    assert_eq!(again.code, 0, "{}", again.stderr);
    assert_eq!(summary_number(&again.stdout, "replayed"), batches);
    assert_positions(&db.store, &expected).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_retry_incident_sqlite() {
    batch_retry_incident(&sqlite_db().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_retry_incident_postgres() {
    let Some(db) = pg_db("incident").await else {
        return;
    };
    batch_retry_incident(&db).await;
    db.cleanup().await;
}

/// A batch the server keeps refusing with 500 is retried up to the budget,
/// then dead-lettered with its last error; `--resend-dead-letters` sends it
/// later and removes it. A 401 is not retried at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letters_then_resend() {
    let (lines, expected) = job(30);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("job.jsonl");
    write_lines(&file, &lines);
    let dead = dir.path().join("dead");
    let down = serve(Arc::new(Down), HttpOptions::default()).await;
    let common = |url: &str| {
        args(&[
            "--url",
            url,
            "--token",
            TOKEN,
            "--batch",
            "100",
            "--max-attempts",
            "3",
            "--backoff-base-ms",
            "1",
            "--backoff-cap-ms",
            "10",
            "--dead-letter-dir",
            dead.to_str().unwrap(),
        ])
    };
    let mut a = vec![file.to_str().unwrap().to_owned()];
    a.extend(common(&down.base));
    let run = push(a).await;
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert_eq!(summary_number(&run.stdout, "failed"), 1);
    assert_eq!(
        down.counter("tickgate_fills_http_requests_total", &[("status", "500")]),
        3
    );
    let mut files: Vec<_> = std::fs::read_dir(&dead)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert_eq!(files.len(), 2, "{files:?}");
    let jsonl = files
        .iter()
        .find(|p| p.extension().unwrap() == "jsonl")
        .unwrap();
    let error = files
        .iter()
        .find(|p| p.to_str().unwrap().ends_with(".error.json"))
        .unwrap();
    // The dead letter holds the batch as sent, nothing lost.
    let kept: Vec<String> = std::fs::read_to_string(jsonl)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    assert_eq!(kept, lines);
    let err: Value = serde_json::from_slice(&std::fs::read(error).unwrap()).unwrap();
    assert_eq!(err["attempts"], 3);
    assert!(
        err["last_error"].as_str().unwrap().contains("HTTP 500"),
        "{err}"
    );
    assert_eq!(err["key"], batch_key("push-", &lines));

    let db = sqlite_db().await;
    let up = serve(Arc::new(db.store.clone()), HttpOptions::default()).await;

    // A wrong token is a 401: not retried, and the dead letter stays.
    let mut a = vec!["--resend-dead-letters".to_owned()];
    a.extend(common(&up.base));
    let token_at = a.iter().position(|x| x == TOKEN).unwrap();
    a[token_at] = "wrong-token".into();
    let run = push(a).await;
    assert_eq!(run.code, 1);
    assert_eq!(
        up.counter("tickgate_fills_http_requests_total", &[("status", "401")]),
        1
    );
    assert!(jsonl.exists());
    let err: Value = serde_json::from_slice(&std::fs::read(error).unwrap()).unwrap();
    assert_eq!(err["attempts"], 1);
    assert!(
        err["last_error"].as_str().unwrap().contains("HTTP 401"),
        "{err}"
    );

    // With the right token the dead letter is delivered and removed.
    let mut a = vec!["--resend-dead-letters".to_owned()];
    a.extend(common(&up.base));
    let run = push(a).await;
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    assert_eq!(summary_number(&run.stdout, "ok"), 1);
    assert!(!jsonl.exists() && !error.exists());
    assert_eq!(std::fs::read_dir(&dead).unwrap().count(), 0);
    assert_positions(&db.store, &expected).await;
}

/// Lines that are not JSON are reported and not sent; the rest go through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreadable_lines_are_reported_not_sent() {
    let (mut lines, expected) = job(10);
    lines.insert(3, "{not json".into());
    lines.insert(7, String::new());
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("job.jsonl");
    write_lines(&file, &lines);
    let db = sqlite_db().await;
    let srv = serve(Arc::new(db.store.clone()), HttpOptions::default()).await;
    let run = push(args(&[
        file.to_str().unwrap(),
        "--url",
        &srv.base,
        "--token",
        TOKEN,
        "--dead-letter-dir",
        dir.path().join("dead").to_str().unwrap(),
    ]))
    .await;
    assert_eq!(run.code, 1);
    assert!(
        run.stderr.contains("job.jsonl:4: not JSON"),
        "{}",
        run.stderr
    );
    assert_eq!(summary_number(&run.stdout, "unreadable lines"), 1);
    assert_eq!(summary_number(&run.stdout, "applied"), 10);
    assert_positions(&db.store, &expected).await;
}

/// A line longer than an event can be is reported with its line number
/// and not sent (nor held whole); the rest go through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlong_lines_are_reported_not_sent() {
    let (mut lines, expected) = job(4);
    lines.insert(2, format!("{{\"pad\":\"{}\"}}", "x".repeat(3 << 20)));
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("job.jsonl");
    write_lines(&file, &lines);
    let db = sqlite_db().await;
    let srv = serve(Arc::new(db.store.clone()), HttpOptions::default()).await;
    let run = push(args(&[
        file.to_str().unwrap(),
        "--url",
        &srv.base,
        "--token",
        TOKEN,
        "--dead-letter-dir",
        dir.path().join("dead").to_str().unwrap(),
    ]))
    .await;
    assert_eq!(run.code, 1);
    assert!(
        run.stderr
            .contains("job.jsonl:3: longer than 1048576 bytes, not sent"),
        "{}",
        run.stderr
    );
    assert_eq!(summary_number(&run.stdout, "unreadable lines"), 1);
    assert_eq!(summary_number(&run.stdout, "applied"), 4);
    assert_positions(&db.store, &expected).await;
}

/// A server that accepts and never answers: each attempt times out, is
/// retried, and the batch ends in the dead-letter folder.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeouts_are_retried_then_dead_lettered() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((sock, _)) = listener.accept().await {
            held.push(sock); // never answered, never closed
        }
    });
    let (lines, _) = job(3);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("job.jsonl");
    write_lines(&file, &lines);
    let dead = dir.path().join("dead");
    let run = push(args(&[
        file.to_str().unwrap(),
        "--url",
        &base,
        "--token",
        TOKEN,
        "--timeout-ms",
        "200",
        "--max-attempts",
        "2",
        "--backoff-base-ms",
        "1",
        "--dead-letter-dir",
        dead.to_str().unwrap(),
    ]))
    .await;
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert_eq!(summary_number(&run.stdout, "failed"), 1);
    assert_eq!(summary_number(&run.stdout, "retries"), 1);
    let error = std::fs::read_dir(&dead)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.to_str().unwrap().ends_with(".error.json"))
        .unwrap();
    let err: Value = serde_json::from_slice(&std::fs::read(error).unwrap()).unwrap();
    assert!(
        err["last_error"]
            .as_str()
            .unwrap()
            .contains("no answer within"),
        "{err}"
    );
}

/// A fake fills endpoint on 127.0.0.1: reads each request whole, then
/// answers with `head` and, if `endless`, a chunked body that never ends
/// (until the client hangs up). Returns the base URL and the request count.
async fn fake_endpoint(
    head: &'static str,
    body: Vec<u8>,
    endless: bool,
) -> (String, Arc<std::sync::atomic::AtomicUsize>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let requests = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = requests.clone();
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let body = body.clone();
            tokio::spawn(async move {
                let mut req = Vec::new();
                let mut buf = [0u8; 8192];
                let header_end = loop {
                    let n = sock.read(&mut buf).await.unwrap_or(0);
                    if n == 0 {
                        return;
                    }
                    req.extend_from_slice(&buf[..n]);
                    if let Some(at) = req.windows(4).position(|w| w == b"\r\n\r\n") {
                        break at + 4;
                    }
                };
                let head_text = String::from_utf8_lossy(&req[..header_end]).to_lowercase();
                let len: usize = head_text
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .map_or(0, |v| v.trim().parse().unwrap());
                while req.len() < header_end + len {
                    let n = sock.read(&mut buf).await.unwrap_or(0);
                    if n == 0 {
                        return;
                    }
                    req.extend_from_slice(&buf[..n]);
                }
                if endless {
                    let chunk = format!("10000\r\n{}\r\n", "[".repeat(0x10000));
                    if sock.write_all(head.as_bytes()).await.is_err() {
                        return;
                    }
                    while sock.write_all(chunk.as_bytes()).await.is_ok() {}
                } else {
                    let mut out =
                        format!("{head}content-length: {}\r\n\r\n", body.len()).into_bytes();
                    out.extend_from_slice(&body);
                    let _ = sock.write_all(&out).await;
                }
            });
        }
    });
    (base, requests)
}

/// fills.md K4: a `200` is a delivery only when it answers every event of
/// the batch (one result per event, in order, totals that agree). A
/// non-JSON 200, one that accounts for fewer events, or an answer that
/// never ends is a failed batch: dead-lettered at once (the key kept, so a
/// re-send is answered from the stored answer if it was applied) and the
/// run exits non-zero.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_200_that_does_not_answer_every_event_is_a_failure() {
    let one_of_five = serde_json::json!({
        "results": [{"index":0,"kind":"FILL","event_id":"E-0","status":"applied"}],
        "totals": {"applied":1,"duplicate":0,"rejected":0,"held":0}
    })
    .to_string()
    .into_bytes();
    let ok_head = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n";
    let cases: [(&str, Vec<u8>, bool, &str); 3] = [
        ("not json", b"<html>ok</html>".to_vec(), false, "not JSON"),
        ("one of five", one_of_five, false, "1 of the 5 events"),
        ("endless", Vec::new(), true, "answer body over"),
    ];
    let (lines, _) = job(5);
    assert_eq!(lines.len(), 5);
    for (name, body, endless, why) in cases {
        let head = if endless {
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n"
        } else {
            ok_head
        };
        let (base, requests) = fake_endpoint(head, body, endless).await;
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("job.jsonl");
        write_lines(&file, &lines);
        let dead = dir.path().join("dead");
        let run = push(args(&[
            file.to_str().unwrap(),
            "--url",
            &base,
            "--token",
            TOKEN,
            "--max-attempts",
            "3",
            "--backoff-base-ms",
            "1",
            "--timeout-ms",
            "20000",
            "--dead-letter-dir",
            dead.to_str().unwrap(),
        ]))
        .await;
        assert_eq!(run.code, 1, "{name}: {}\n{}", run.stdout, run.stderr);
        assert_eq!(summary_number(&run.stdout, "failed"), 1, "{name}");
        assert_eq!(summary_number(&run.stdout, "applied"), 0, "{name}");
        assert_eq!(
            requests.load(std::sync::atomic::Ordering::SeqCst),
            1,
            "{name}"
        );
        let files: Vec<_> = std::fs::read_dir(&dead)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        let jsonl = files
            .iter()
            .find(|p| p.extension().unwrap() == "jsonl")
            .unwrap_or_else(|| panic!("{name}: no dead letter in {files:?}"));
        let kept: Vec<String> = std::fs::read_to_string(jsonl)
            .unwrap()
            .lines()
            .map(str::to_owned)
            .collect();
        assert_eq!(kept, lines, "{name}");
        let error = files
            .iter()
            .find(|p| p.to_str().unwrap().ends_with(".error.json"))
            .unwrap();
        let err: Value = serde_json::from_slice(&std::fs::read(error).unwrap()).unwrap();
        assert!(
            err["last_error"].as_str().unwrap().contains(why),
            "{name}: {err}"
        );
    }
}
